/* sip — native protocol codec: the decoders. Every read is bounds-checked
 * against the payload; every failure names the field, its offset and what
 * was expected. */
#include "transport/frame.h"

#include <string.h>

#include "core/core.h"

typedef struct reader {
  const uint8_t *p;
  size_t len, off;
  const char *what; /* message being decoded, for errors */
} reader_t;

static sip_error_t *short_read(reader_t *r, const char *field, size_t need) {
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "%s truncated at offset %zu reading %s: need %zu bytes, %zu remain",
                       r->what, r->off, field, need, r->len - r->off);
}

static sip_error_t *get_int(reader_t *r, const char *field, int n, uint64_t *v) {
  *v = 0;
  if (r->len - r->off < (size_t)n) return short_read(r, field, (size_t)n);
  for (int i = n - 1; i >= 0; i--) *v = *v << 8 | r->p[r->off + (size_t)i];
  r->off += (size_t)n;
  return NULL;
}

static sip_error_t *get_str16(reader_t *r, const char *field, char **out) {
  uint64_t n;
  sip_error_t *e = get_int(r, field, 2, &n);
  if (e) return e;
  if (r->len - r->off < n) return short_read(r, field, n);
  if (n > SIP__MAX_NAME)
    return sip_error_new(SIP_INVALID_ARGUMENT, "%s: %s of %llu bytes is longer than %d",
                         r->what, field, (unsigned long long)n, SIP__MAX_NAME);
  if (memchr(r->p + r->off, '\0', n))
    return sip_error_new(SIP_INVALID_ARGUMENT, "%s: %s at offset %zu contains a NUL byte",
                         r->what, field, r->off);
  *out = sip__strndup((const char *)r->p + r->off, n);
  if (!*out) return SIP__OOM();
  r->off += n;
  return NULL;
}

/* A tensor. With `ref` (messages that may reference shared memory), a
 * tensor flagged SIP__TENSOR_SHM fills it and gets data NULL. */
static sip_error_t *get_tensor(reader_t *r, sip_buf_t *owner, sip__wire_shm_ref_t *ref,
                               sip_tensor_t **out) {
  char *name = NULL, *region = NULL;
  sip_error_t *e = get_str16(r, "tensor name", &name);
  if (e) return e;
  uint64_t dtype, rank, reserved, nbytes;
  int64_t dims[SIP_MAX_RANK];
  if ((e = get_int(r, "tensor dtype", 1, &dtype)) || (e = get_int(r, "tensor rank", 1, &rank)) ||
      (e = get_int(r, "tensor reserved", 2, &reserved)))
    goto fail;
  if (dtype < SIP_DTYPE_FLOAT32 || dtype > SIP_DTYPE_UINT64) {
    e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: tensor '%s' has dtype %llu; expected 1..13",
                      r->what, name, (unsigned long long)dtype);
    goto fail;
  }
  if (rank > SIP_MAX_RANK) {
    e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: tensor '%s' has rank %llu; expected 0..%d",
                      r->what, name, (unsigned long long)rank, SIP_MAX_RANK);
    goto fail;
  }
  if (reserved & ~(uint64_t)(ref ? SIP__TENSOR_SHM : 0)) {
    e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: tensor '%s' reserved field is %llu; expected "
                      "%s", r->what, name, (unsigned long long)reserved,
                      ref ? "0 or 1 (data in shared memory)" : "0");
    goto fail;
  }
  for (uint64_t i = 0; i < rank; i++) {
    uint64_t d;
    if ((e = get_int(r, "tensor dim", 8, &d))) goto fail;
    if (d > (uint64_t)INT64_MAX) {
      e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: tensor '%s' dim %llu is negative; expected >= 0",
                        r->what, name, (unsigned long long)i);
      goto fail;
    }
    dims[i] = (int64_t)d;
  }
  if (reserved & SIP__TENSOR_SHM) {
    uint64_t offset;
    if ((e = get_str16(r, "tensor shared memory region", &region)) ||
        (e = get_int(r, "tensor shared memory offset", 8, &offset)) ||
        (e = get_int(r, "tensor nbytes", 8, &nbytes)))
      goto fail;
    if (!*region) {
      e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: tensor '%s' is flagged as in shared memory "
                        "but names no region", r->what, name);
      goto fail;
    }
    if (nbytes > SIZE_MAX / 2) {
      e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: tensor '%s' of %llu bytes in shared memory "
                        "is larger than this machine can address", r->what, name,
                        (unsigned long long)nbytes);
      goto fail;
    }
    sip_tensor_t *t = sip_tensor_new_view(name, (sip_dtype_t)dtype, (int)rank, dims, NULL,
                                          (size_t)nbytes, NULL);
    if (!t) {
      e = SIP__OOM();
      goto fail;
    }
    /* STRING elements are checked once the region's bytes are in hand. */
    if (dtype != SIP_DTYPE_STRING && (e = sip_tensor_validate(t))) {
      sip_tensor_free(t);
      goto fail;
    }
    sip__free(name);
    *ref = (sip__wire_shm_ref_t){.region = region, .offset = offset, .size = nbytes};
    *out = t;
    return NULL;
  }
  if ((e = get_int(r, "tensor nbytes", 8, &nbytes))) goto fail;
  size_t pad = (8 - r->off % 8) % 8;
  if (r->len - r->off < pad) {
    e = short_read(r, "tensor padding", pad);
    goto fail;
  }
  r->off += pad;
  if (r->len - r->off < nbytes) {
    e = short_read(r, "tensor data", nbytes);
    goto fail;
  }
  sip_tensor_t *t = sip_tensor_new_view(name, (sip_dtype_t)dtype, (int)rank, dims, r->p + r->off,
                                        (size_t)nbytes, owner);
  if (!t) {
    e = SIP__OOM();
    goto fail;
  }
  r->off += nbytes;
  if ((e = sip_tensor_validate(t))) {
    sip_tensor_free(t);
    goto fail;
  }
  sip__free(name);
  *out = t;
  return NULL;
fail:
  sip__free(name);
  sip__free(region);
  return e;
}

void sip__wire_shm_refs_free(sip__wire_shm_ref_t *v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++) sip__free(v[i].region);
  sip__free(v);
}

/* n tensors. With `refs`, tensors may be in shared memory: *refs gets n
 * entries when one is (NULL when none is). */
static sip_error_t *get_tensors(reader_t *r, sip_buf_t *owner, size_t n, sip_tensor_t ***out,
                                sip__wire_shm_ref_t **refs) {
  *out = NULL;
  if (refs) *refs = NULL;
  if (!n) return NULL;
  /* Each tensor takes at least 24 bytes on the wire: a cheap sanity bound
   * before allocating n slots for a hostile count. */
  if (n > (r->len - r->off) / 16 + 1) return short_read(r, "tensors", n * 16);
  sip_tensor_t **ts = sip__calloc(n, sizeof *ts);
  sip__wire_shm_ref_t *rs = refs ? sip__calloc(n, sizeof *rs) : NULL;
  if (!ts || (refs && !rs)) {
    sip__free(ts);
    sip__free(rs);
    return SIP__OOM();
  }
  int any = 0;
  for (size_t i = 0; i < n; i++) {
    /* Duplicate names are well-formed framing; the engine rejects them as a
     * request error, keeping the connection. */
    sip_error_t *e = get_tensor(r, owner, rs ? &rs[i] : NULL, &ts[i]);
    if (e) {
      for (size_t j = 0; j <= i; j++) sip_tensor_free(ts[j]);
      sip__free(ts);
      sip__wire_shm_refs_free(rs, n);
      return e;
    }
    any |= rs && rs[i].region;
  }
  *out = ts;
  if (any)
    *refs = rs;
  else
    sip__free(rs);
  return NULL;
}

static sip_error_t *trailing(reader_t *r) {
  if (r->off == r->len) return NULL;
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "%s has %zu unexpected bytes after its last field at offset %zu",
                       r->what, r->len - r->off, r->off);
}

void sip__wire_request_clear(sip__wire_request_t *r) {
  sip__free(r->pool);
  sip__free(r->parameters);
  for (size_t i = 0; i < r->n_outputs; i++) sip__free(r->outputs[i]);
  sip__free(r->outputs);
  for (size_t i = 0; i < r->n_inputs; i++) sip_tensor_free(r->inputs[i]);
  sip__free(r->inputs);
  sip__wire_shm_refs_free(r->input_shm, r->n_inputs);
  sip__wire_shm_refs_free(r->output_shm, r->n_outputs);
  memset(r, 0, sizeof *r);
}

void sip__wire_response_clear(sip__wire_response_t *r) {
  sip__free(r->message);
  for (size_t i = 0; i < r->n_outputs; i++) sip_tensor_free(r->outputs[i]);
  sip__free(r->outputs);
  sip__wire_shm_refs_free(r->output_shm, r->n_outputs);
  memset(r, 0, sizeof *r);
}

/* A requested output's destination (flag SIP__REQ_OUTPUT_SHM): str16
 * region ("": inline, offset and size 0), u64 offset, u64 byte_size. */
static sip_error_t *get_output_destination(reader_t *r, const char *output,
                                           sip__wire_shm_ref_t *d) {
  char *region = NULL;
  uint64_t offset, size;
  sip_error_t *e;
  if ((e = get_str16(r, "output destination region", &region)) ||
      (e = get_int(r, "output destination offset", 8, &offset)) ||
      (e = get_int(r, "output destination byte_size", 8, &size))) {
    sip__free(region);
    return e;
  }
  if (!*region) {
    sip__free(region);
    if (offset || size)
      return sip_error_new(SIP_INVALID_ARGUMENT, "%s: output '%s' has no destination region but "
                           "offset %llu and byte size %llu; expected 0 and 0 (inline)", r->what,
                           output, (unsigned long long)offset, (unsigned long long)size);
    return NULL;
  }
  *d = (sip__wire_shm_ref_t){.region = region, .offset = offset, .size = size};
  return NULL;
}

sip_error_t *sip__decode_infer_request(const uint8_t *p, size_t len, sip_buf_t *owner,
                                       sip__wire_request_t *out) {
  memset(out, 0, sizeof *out);
  reader_t r = {p, len, 0, "INFER_REQUEST"};
  uint64_t prio, res, timeout, n_out, n_in;
  sip_error_t *e;
  if ((e = get_str16(&r, "pool name", &out->pool))) goto fail;
  if ((e = get_int(&r, "priority", 1, &prio)) || (e = get_int(&r, "reserved", 3, &res)) ||
      (e = get_int(&r, "timeout_ms", 4, &timeout)) ||
      (e = get_int(&r, "n_outputs", 2, &n_out)) || (e = get_int(&r, "n_inputs", 2, &n_in)))
    goto fail;
  if (prio > 3) {
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "INFER_REQUEST priority %llu; expected 0 (pool default), 1 (high), 2 "
                      "(medium) or 3 (low)",
                      (unsigned long long)prio);
    goto fail;
  }
  /* The first reserved byte carries flags; the rest must be zero. */
  if (res & ~(uint64_t)(SIP__REQ_HAS_PARAMETERS | SIP__REQ_OUTPUT_SHM)) {
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "INFER_REQUEST reserved bytes are not zero (flags 0x%llx; expected only "
                      "0x%x, parameters, and 0x%x, output destinations)",
                      (unsigned long long)res, SIP__REQ_HAS_PARAMETERS, SIP__REQ_OUTPUT_SHM);
    goto fail;
  }
  out->priority = (int)prio;
  out->timeout_ms = (uint32_t)timeout;
  if (n_out) {
    if (n_out > (len - r.off) / 2) {
      e = short_read(&r, "requested outputs", n_out * 2);
      goto fail;
    }
    out->outputs = sip__calloc(n_out, sizeof *out->outputs);
    if (res & SIP__REQ_OUTPUT_SHM) out->output_shm = sip__calloc(n_out, sizeof *out->output_shm);
    if (!out->outputs || ((res & SIP__REQ_OUTPUT_SHM) && !out->output_shm)) {
      e = SIP__OOM();
      goto fail;
    }
    for (size_t i = 0; i < n_out; i++) {
      if ((e = get_str16(&r, "requested output name", &out->outputs[i]))) goto fail;
      out->n_outputs = i + 1;
      if (out->output_shm && (e = get_output_destination(&r, out->outputs[i],
                                                          &out->output_shm[i])))
        goto fail;
    }
  }
  if ((e = get_tensors(&r, owner, n_in, &out->inputs, &out->input_shm))) goto fail;
  out->n_inputs = n_in;
  if (res & SIP__REQ_HAS_PARAMETERS) {
    uint64_t n;
    if ((e = get_int(&r, "parameters length", 4, &n))) goto fail;
    if (len - r.off < n) {
      e = short_read(&r, "parameters", n);
      goto fail;
    }
    if (memchr(p + r.off, '\0', n)) {
      e = sip_error_new(SIP_INVALID_ARGUMENT, "INFER_REQUEST parameters contain a NUL byte");
      goto fail;
    }
    if (!(out->parameters = sip__strndup((const char *)p + r.off, n))) {
      e = SIP__OOM();
      goto fail;
    }
    r.off += n;
  }
  if ((e = trailing(&r))) goto fail;
  return NULL;
fail:
  sip__wire_request_clear(out);
  return e;
}

sip_error_t *sip__decode_infer_response(const uint8_t *p, size_t len, sip_buf_t *owner,
                                        sip__wire_response_t *out) {
  memset(out, 0, sizeof *out);
  reader_t r = {p, len, 0, "INFER_RESPONSE"};
  uint64_t code, mlen, n_out, res;
  sip_error_t *e;
  if ((e = get_int(&r, "code", 4, &code)) || (e = get_int(&r, "message length", 4, &mlen)))
    goto fail;
  if (len - r.off < mlen) {
    e = short_read(&r, "message", mlen);
    goto fail;
  }
  out->code = (uint32_t)code;
  out->message = sip__strndup((const char *)p + r.off, mlen);
  if (!out->message) {
    e = SIP__OOM();
    goto fail;
  }
  r.off += mlen;
  if ((e = get_int(&r, "queue_us", 8, &out->queue_us)) ||
      (e = get_int(&r, "compute_us", 8, &out->compute_us)) ||
      (e = get_int(&r, "total_us", 8, &out->total_us)) ||
      (e = get_int(&r, "n_outputs", 2, &n_out)) || (e = get_int(&r, "reserved", 6, &res)))
    goto fail;
  out->replayed = (int)(res & SIP__RESP_REPLAYED);
  if (res & ~(uint64_t)SIP__RESP_REPLAYED) {
    e = sip_error_new(SIP_INVALID_ARGUMENT, "INFER_RESPONSE flags and reserved bytes are not "
                      "zero apart from bit 0 (REPLAYED)");
    goto fail;
  }
  if ((e = get_tensors(&r, owner, n_out, &out->outputs, &out->output_shm))) goto fail;
  out->n_outputs = n_out;
  if ((e = trailing(&r))) goto fail;
  return NULL;
fail:
  sip__wire_response_clear(out);
  return e;
}

sip_error_t *sip__decode_shm_register(const uint8_t *p, size_t len, char **name,
                                      uint64_t *offset, uint64_t *byte_size) {
  reader_t r = {p, len, 0, "SHM_REGISTER"};
  *name = NULL;
  sip_error_t *e;
  if ((e = get_str16(&r, "region name", name)) ||
      (e = get_int(&r, "offset", 8, offset)) || (e = get_int(&r, "byte_size", 8, byte_size)) ||
      (e = trailing(&r))) {
    sip__free(*name);
    *name = NULL;
  }
  return e;
}

sip_error_t *sip__decode_shm_name(const uint8_t *p, size_t len, uint16_t type, char **name) {
  reader_t r = {p, len, 0, type == SIP__MSG_SHM_STATUS ? "SHM_STATUS" : "SHM_UNREGISTER"};
  *name = NULL;
  sip_error_t *e = get_str16(&r, "region name", name);
  if (!e) e = trailing(&r);
  if (e) {
    sip__free(*name);
    *name = NULL;
  }
  return e;
}


sip_error_t *sip__decode_subscribe(const uint8_t *p, size_t len, char **pool, uint32_t *buffer) {
  reader_t r = {p, len, 0, "SUBSCRIBE"};
  uint64_t b = 0;
  *pool = NULL;
  sip_error_t *e = get_str16(&r, "pool name", pool);
  if (!e) e = get_int(&r, "buffer", 4, &b);
  if (!e) e = trailing(&r);
  if (!e && b > SIP__MAX_EVENT_BUFFER)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "SUBSCRIBE: buffer of %llu events is too large; "
                      "expected 0 (the default, 1024) to %d", (unsigned long long)b,
                      SIP__MAX_EVENT_BUFFER);
  if (e) {
    sip__free(*pool);
    *pool = NULL;
    return e;
  }
  *buffer = (uint32_t)b;
  return NULL;
}

sip_error_t *sip__decode_code_text(const uint8_t *p, size_t len, int is_error, uint32_t *code,
                                   const char **text, size_t *text_len) {
  reader_t r = {p, len, 0, is_error ? "ERROR" : "INFO_RESPONSE"};
  uint64_t c, n;
  sip_error_t *e = get_int(&r, "code", 4, &c);
  if (e) return e;
  *code = (uint32_t)c;
  if (!is_error) {
    *text = (const char *)p + r.off;
    *text_len = len - r.off;
    return NULL;
  }
  if ((e = get_int(&r, "message length", 4, &n))) return e;
  if (len - r.off < n) return short_read(&r, "message", n);
  if (len - r.off > n)
    return sip_error_new(SIP_INVALID_ARGUMENT, "ERROR frame has %zu unexpected bytes after its "
                                               "%llu-byte message",
                         len - r.off - (size_t)n, (unsigned long long)n);
  *text = (const char *)p + r.off;
  *text_len = (size_t)n;
  return NULL;
}

sip_error_t *sip__decode_batch_prefix(const uint8_t *p, size_t len, uint32_t *max_batch_size,
                                      uint8_t *padding) {
  reader_t r = {p, len, 0, "BATCH_INFER_REQUEST"};
  uint64_t mb, pad, res;
  sip_error_t *e;
  if ((e = get_int(&r, "max_batch_size", 4, &mb)) || (e = get_int(&r, "padding", 1, &pad)) ||
      (e = get_int(&r, "reserved", 3, &res)))
    return e;
  if (pad > 2)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "BATCH_INFER_REQUEST padding %llu; expected 0 (none), 1 "
                         "(replicate_last) or 2 (zero)",
                         (unsigned long long)pad);
  if (res) return sip_error_new(SIP_INVALID_ARGUMENT, "BATCH_INFER_REQUEST reserved bytes are not zero");
  *max_batch_size = (uint32_t)mb;
  *padding = (uint8_t)pad;
  return NULL;
}
