/* sip — engine responses -> KServe v2 (Open Inference Protocol) response
 * bodies, with Triton's binary tensor data and classification extensions;
 * the {"error": ...} body of every failed answer.
 *
 * Responses are written by hand into one growing buffer: a jansson node per
 * element would cost an allocation per number for tensors of millions of
 * elements, and binary outputs are not copied at all (the body lists
 * segments that point into the output tensors), but for bytes in a client's
 * shared memory region, which its client may shrink while they are sent
 * (copied; every output read from or written into a region is checked
 * afterwards, core/shm.h). Requests are read by kserve_decode.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "http/kserve_impl.h"

/* ---- JSON writer ------------------------------------------------------- */

typedef struct jw {
  char *p;
  size_t n, cap;
  int oom;
} jw_t;

static int jw_reserve(jw_t *w, size_t more) {
  if (w->oom) return -1;
  if (w->cap - w->n > more) return 0;
  size_t cap = w->cap ? w->cap : 256;
  while (cap - w->n <= more) {
    if (cap > SIZE_MAX / 2) return w->oom = 1, -1;
    cap *= 2;
  }
  char *p = sip__realloc(w->p, cap);
  if (!p) return w->oom = 1, -1;
  w->p = p;
  w->cap = cap;
  return 0;
}

static void jw_raw(jw_t *w, const char *s, size_t len) {
  if (jw_reserve(w, len)) return;
  memcpy(w->p + w->n, s, len);
  w->n += len;
  w->p[w->n] = '\0';
}

static void jw_lit(jw_t *w, const char *s) { jw_raw(w, s, strlen(s)); }

static void jw_fmt(jw_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jw_fmt(jw_t *w, const char *fmt, ...) {
  if (jw_reserve(w, 64)) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(w->p + w->n, w->cap - w->n, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= w->cap - w->n) {
    if (jw_reserve(w, (size_t)n + 1)) return;
    va_start(ap, fmt);
    vsnprintf(w->p + w->n, w->cap - w->n, fmt, ap);
    va_end(ap);
  }
  w->n += (size_t)n;
}

/* Length of the UTF-8 sequence at s (at most n bytes), 0 when invalid. */
static size_t utf8_len(const uint8_t *s, size_t n) {
  uint8_t c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

/* A JSON string. strict: fail (-1) on invalid UTF-8; otherwise replace each
 * bad byte with U+FFFD (names and messages must still produce valid JSON). */
static int jw_str(jw_t *w, const char *s, size_t len, int strict) {
  const uint8_t *p = (const uint8_t *)s;
  if (jw_reserve(w, len + 2)) return 0;
  w->p[w->n++] = '"';
  size_t i = 0;
  while (i < len) {
    size_t run = i;
    /* Copy runs of plain bytes at once. */
    while (run < len && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\') run++;
    if (run > i) jw_raw(w, s + i, run - i);
    i = run;
    if (i >= len) break;
    uint8_t c = p[i];
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      jw_raw(w, esc, 2);
      i++;
    } else if (c < 0x20) {
      static const char *const named[] = {['\b'] = "\\b", ['\f'] = "\\f", ['\n'] = "\\n",
                                          ['\r'] = "\\r", ['\t'] = "\\t"};
      if (c < sizeof named / sizeof named[0] && named[c])
        jw_lit(w, named[c]);
      else
        jw_fmt(w, "\\u%04x", c);
      i++;
    } else {
      size_t l = utf8_len(p + i, len - i);
      if (!l) {
        if (strict) return -1;
        jw_lit(w, "\\ufffd");
        i++;
      } else {
        jw_raw(w, s + i, l);
        i += l;
      }
    }
  }
  jw_raw(w, "\"", 1);
  return 0;
}

/* A number of a data array: the shortest text that reads back to the same
 * float32 (digits 9) or float64 (digits 17), kserve_numbers.c / core/fmt.h. */
static void jw_double(jw_t *w, double v, int digits) {
  char num[32];
  if (isnan(v))
    jw_lit(w, "NaN");
  else if (isinf(v))
    jw_lit(w, v > 0 ? "Infinity" : "-Infinity");
  else
    jw_raw(w, num, sip__ks_format_double(v, digits, num));
}

static void jw_int(jw_t *w, int64_t v, uint64_t u, int is_signed) {
  char num[32];
  jw_raw(w, num, sip__ks_format_int(v, u, is_signed, num));
}

char *sip__ks_error_json(const char *msg, size_t *len) {
  jw_t w = {0};
  jw_lit(&w, "{\"error\":");
  jw_str(&w, msg ? msg : "", msg ? strlen(msg) : 0, 0);
  jw_lit(&w, "}");
  if (w.oom) {
    sip__free(w.p);
    return NULL;
  }
  if (len) *len = w.n;
  return w.p;
}

/* ---- responses --------------------------------------------------------- */

void sip__ks_body_clear(sip__ks_body_t *b) {
  sip__free(b->json);
  sip__free(b->segs);
  for (size_t i = 0; i < b->n_keep; i++) sip_buf_unref(b->keep[i]);
  sip__free(b->keep);
  memset(b, 0, sizeof *b);
}

/* Writes a tensor's elements as a flat JSON array. */
static sip_error_t *write_data(jw_t *w, const sip_tensor_t *t, int64_t count) {
  const void *d = t->data;
  jw_raw(w, "[", 1);
  if (t->dtype == SIP_DTYPE_STRING) {
    const uint8_t *p = d;
    size_t off = 0;
    for (int64_t i = 0; i < count; i++) {
      if (t->nbytes - off < 4) return sip_error_new(SIP_INTERNAL, "output '%s': bad BYTES data", t->name);
      uint32_t len = rd_u32(p + off);
      off += 4;
      if (t->nbytes - off < len)
        return sip_error_new(SIP_INTERNAL, "output '%s': bad BYTES data", t->name);
      if (i) jw_raw(w, ",", 1);
      if (jw_str(w, (const char *)p + off, len, 1))
        return BAD("output '%s': element %lld is not UTF-8 text, which JSON cannot carry; ask "
                   "for it with parameters.binary_data: true",
                   t->name, (long long)i);
      off += len;
    }
  } else {
    for (int64_t i = 0; i < count && !w->oom; i++) {
      if (i) jw_raw(w, ",", 1);
      switch (t->dtype) {
      case SIP_DTYPE_BOOL: jw_lit(w, LOAD(uint8_t, d, i) ? "true" : "false"); break;
      case SIP_DTYPE_INT8: jw_int(w, LOAD(int8_t, d, i), 0, 1); break;
      case SIP_DTYPE_INT16: jw_int(w, LOAD(int16_t, d, i), 0, 1); break;
      case SIP_DTYPE_INT32: jw_int(w, LOAD(int32_t, d, i), 0, 1); break;
      case SIP_DTYPE_INT64: jw_int(w, LOAD(int64_t, d, i), 0, 1); break;
      case SIP_DTYPE_UINT8: jw_int(w, 0, LOAD(uint8_t, d, i), 0); break;
      case SIP_DTYPE_UINT16: jw_int(w, 0, LOAD(uint16_t, d, i), 0); break;
      case SIP_DTYPE_UINT32: jw_int(w, 0, LOAD(uint32_t, d, i), 0); break;
      case SIP_DTYPE_UINT64: jw_int(w, 0, LOAD(uint64_t, d, i), 0); break;
      /* float32 (and float16, exactly a float32) and float64: shortest text. */
      case SIP_DTYPE_FLOAT16: jw_double(w, sip__f16_to_f64(LOAD(uint16_t, d, i)), 9); break;
      case SIP_DTYPE_FLOAT32: jw_double(w, LOAD(float, d, i), 9); break;
      case SIP_DTYPE_FLOAT64: jw_double(w, LOAD(double, d, i), 17); break;
      default: return sip_error_new(SIP_INTERNAL, "output '%s' has dtype %d", t->name, t->dtype);
      }
    }
  }
  jw_raw(w, "]", 1);
  return NULL;
}

static int push_seg(sip__ks_body_t *b, const void *data, size_t len) {
  sip__ks_segment_t *s = sip__reallocarray(b->segs, b->n_segs + 1, sizeof *s);
  if (!s) return -1;
  b->segs = s;
  s[b->n_segs].data = data;
  s[b->n_segs].len = len;
  b->n_segs++;
  return 0;
}

static int push_keep(sip__ks_body_t *b, sip_buf_t *buf) {
  sip_buf_t **k = sip__reallocarray(b->keep, b->n_keep + 1, sizeof *k);
  if (!k) return -1;
  b->keep = k;
  k[b->n_keep++] = sip_buf_ref(buf);
  return 0;
}

/* A binary section of `n` bytes at `data`. Bytes in a client's shared
 * memory region (an identity's view of its input) are copied first: the
 * client may shrink the object while the answer is written, and the
 * socket's write would then fail (EFAULT) with the answer half sent. */
static int push_binary(sip__ks_body_t *b, const void *data, size_t n, sip_buf_t *keep) {
  if (!sip__shm_guarded(data, n)) return push_seg(b, data, n) || (keep && push_keep(b, keep));
  sip_buf_t *copy = sip_buf_new(n);
  if (!copy) return -1;
  memcpy(sip_buf_data(copy), data, n);
  int r = push_seg(b, sip_buf_data(copy), n) || push_keep(b, copy);
  sip_buf_unref(copy);
  return r;
}

sip_error_t *sip__ks_encode(const sip__ks_request_t *k, const char *model, const char *version,
                            const sip_tensor_t *const *outputs, size_t n_outputs,
                            sip__ks_body_t *out) {
  memset(out, 0, sizeof *out);
  jw_t w = {0};
  sip_error_t *e = NULL;
  jw_lit(&w, "{\"model_name\":");
  jw_str(&w, model, strlen(model), 0);
  if (version) {
    jw_lit(&w, ",\"model_version\":");
    jw_str(&w, version, strlen(version), 0);
  }
  if (k->id) {
    jw_lit(&w, ",\"id\":");
    jw_str(&w, k->id, k->id_len, 0);
  }
  if (k->replayed) jw_lit(&w, ",\"parameters\":{\"idempotent_replay\":true}");
  else if (k->cached) jw_lit(&w, ",\"parameters\":{\"cached\":true}");
  jw_lit(&w, ",\"outputs\":[");
  for (size_t i = 0; i < n_outputs && !e; i++) {
    const sip_tensor_t *t = outputs[i], *t0 = t;
    sip_tensor_t *cls = NULL;
    const sip__ks_output_t *ko = NULL;
    for (size_t j = 0; j < k->n_outputs && !ko; j++)
      if (!strcmp(k->outputs[j].name, t->name)) ko = &k->outputs[j];
    int binary = ko && ko->binary >= 0 ? ko->binary : k->binary_output;
    if (ko && ko->classification) {
      if ((e = sip__classify(t, ko->classification, &cls))) break;
      t = cls;
    }
    int64_t count = sip_tensor_count(t);
    const char *dtn = sip__ks_datatype(t->dtype);
    if (count < 0 || !dtn) {
      e = sip_error_new(SIP_INTERNAL, "output '%s' has an invalid shape or dtype", t->name);
      sip_tensor_free(cls);
      break;
    }
    jw_lit(&w, i ? ",{\"name\":" : "{\"name\":");
    jw_str(&w, t->name, strlen(t->name), 0);
    jw_fmt(&w, ",\"datatype\":\"%s\",\"shape\":[", dtn);
    for (int d = 0; d < t->rank; d++) jw_fmt(&w, "%s%" PRId64, d ? "," : "", t->dims[d]);
    jw_lit(&w, "]");
    if (ko && ko->shm_region) { /* written into the region, listed without data */
      if (!(e = sip__ks_shm_write(ko, t))) {
        jw_lit(&w, ",\"parameters\":{\"shared_memory_region\":");
        jw_str(&w, ko->shm_region, strlen(ko->shm_region), 0);
        jw_fmt(&w, ",\"shared_memory_byte_size\":%zu,\"shared_memory_offset\":%" PRIu64 "}}",
               t->nbytes, ko->shm_offset);
      }
    } else if (binary) {
      jw_fmt(&w, ",\"parameters\":{\"binary_data_size\":%zu}}", t->nbytes);
      out->binary = 1;
      if (t->nbytes && push_binary(out, t->data, t->nbytes, cls ? cls->owner : NULL))
        e = SIP__OOM();
    } else {
      jw_lit(&w, ",\"data\":");
      e = write_data(&w, t, count);
      jw_lit(&w, "}");
    }
    sip_tensor_free(cls); /* the body keeps its buffer when it is sent binary */
    /* Read from a client's region: one that shrank meanwhile gave zeros. */
    if (!e) e = sip__shm_check_bytes(t0->data, t0->nbytes);
  }
  jw_lit(&w, "]}");
  if (!e && w.oom) e = SIP__OOM();
  if (e) {
    sip__free(w.p);
    sip__ks_body_clear(out);
    return e;
  }
  out->json = w.p;
  out->json_len = w.n;
  return NULL;
}
