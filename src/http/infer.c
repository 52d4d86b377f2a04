/* sip — the KServe infer endpoint (POST .../infer): the body is read into
 * a buffer aligned for in-place binary inputs, decoded (kserve_decode.c),
 * the connection suspended and the request submitted; the completion (an
 * engine thread) resumes it, and the answer is encoded (kserve_encode.c)
 * on MHD's thread and sent without copying the binary outputs. Also the
 * metadata cache raw binary requests and "model_version" need.
 */
#include <jansson.h>
#include <limits.h>
#include <zlib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "server/introspect.h"
#include "server/observe/tracing.h"

/* ---- the model metadata cache -------------------------------------------- */

static void meta_free(sip__meta_t *m) {
  if (!m) return;
  sip__free(m->model);
  sip__free(m->asked);
  sip__free(m->version);
  for (size_t i = 0; i < m->n_inputs; i++) sip__free(m->inputs[i].name);
  sip__free(m->inputs);
  sip__free(m);
}

void sip__http_meta_unref(sip__meta_t *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) meta_free(m);
}

void sip__http_meta_clear(sip__http_t *h) {
  while (h->cache) {
    sip__meta_t *m = h->cache;
    h->cache = m->next;
    sip__http_meta_unref(m);
  }
}

static sip__meta_t *meta_build(const sip__model_view_t *v, const char *model, const char *asked,
                          uint64_t gen) {
  sip__meta_t *m = sip__calloc(1, sizeof *m);
  if (!m) return NULL;
  atomic_init(&m->refs, 1);
  m->gen = gen;
  m->model = sip__strdup(model);
  m->asked = asked ? sip__strdup(asked) : NULL;
  m->version = v->version ? sip__strdup(v->version) : NULL;
  m->inputs = sip__calloc(v->n_inputs + 1, sizeof *m->inputs);
  if (!m->model || (v->version && !m->version) || (asked && !m->asked) || !m->inputs) goto fail;
  for (size_t i = 0; i < v->n_inputs; i++) {
    m->inputs[i] = v->inputs[i];
    if (!(m->inputs[i].name = sip__strdup(v->inputs[i].name ? v->inputs[i].name : ""))) goto fail;
    m->n_inputs = i + 1;
  }
  return m;
fail:
  meta_free(m);
  return NULL;
}

static int meta_is(const sip__meta_t *m, const char *model, const char *asked) {
  return !strcmp(m->model, model) && (asked ? m->asked && !strcmp(m->asked, asked) : !m->asked);
}

/* Metadata of a READY model (a reference for the caller: meta_unref), or
 * NULL (unknown, not ready, OOM). Entries describing an older set of pools
 * are replaced; requests still holding them keep them alive. */
static sip__meta_t *meta_get(sip__http_t *h, const char *model, const char *asked) {
  uint64_t gen = sip_server_generation(h->s);
  pthread_mutex_lock(&h->cache_mu);
  sip__meta_t **pp = &h->cache, *m;
  while ((m = *pp) && !meta_is(m, model, asked)) pp = &m->next;
  if (m && m->gen != gen) { /* the pools changed since: build it again */
    *pp = m->next;
    sip__http_meta_unref(m);
    m = NULL;
  }
  if (m) atomic_fetch_add(&m->refs, 1);
  pthread_mutex_unlock(&h->cache_mu);
  /* While draining, pools free their models: their I/O is no longer asked. */
  if (m || sip_server_draining(h->s)) return m;
  size_t n = 0;
  sip__model_view_t *views = sip__server_models(h->s, &n);
  const sip__model_view_t *v = sip__model_views_find(views, n, model, asked);
  if (v && !strcmp(v->state, "READY")) m = meta_build(v, model, asked, gen);
  sip__server_models_free(views, n);
  if (!m) return NULL;
  pthread_mutex_lock(&h->cache_mu);
  sip__meta_t *old = h->cache;
  while (old && !(meta_is(old, model, asked) && old->gen == gen)) old = old->next;
  if (old) { /* another thread won the race */
    meta_free(m);
    m = old;
  } else {
    m->next = h->cache;
    h->cache = m;
  }
  atomic_fetch_add(&m->refs, 1); /* the caller's, or the cache's for a new entry */
  pthread_mutex_unlock(&h->cache_mu);
  return m;
}

/* ---- inference ------------------------------------------------------------ */

/* What the completion needs: the request, and the scope its shared memory
 * regions were viewed through (core/shm.h). */
typedef struct hinfer {
  sip__hreq_t *q;
  sip__shm_set_t *scope;
} hinfer_t;

static void hinfer_free(hinfer_t *w) {
  if (!w) return;
  sip__shm_set_free(w->scope);
  sip__free(w);
}

/* The completion, on an engine thread: hand the answer to the connection's
 * own thread. */
static void on_done(sip_response_t *resp, void *user) {
  hinfer_t *w = user;
  sip__hreq_t *q = w->q;
  /* A region the execution read or wrote that its client shrank meanwhile:
   * the outputs may be made of zeros, so the answer is that error (the
   * response is freed with the request). The encoder checks the bytes it
   * reads and writes itself. */
  if (resp && sip_response_code(resp) == SIP_OK) q->err = sip__shm_scope_check(w->scope);
  hinfer_free(w);
  q->resp = resp;
  q->resp_oom = !resp;
  sip__http_conns_unwatch(q->h, q->hc);
  q->hc = NULL;
  /* MHD's resume takes its own lock, which orders the stores above before
   * the handler's reads on the daemon thread. */
  MHD_resume_connection(q->conn);
}

static int64_t parse_len(const char *s) {
  if (!s || !*s) return -2;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10) return -2;
    v = v * 10 + (*s - '0');
  }
  return v;
}

/* 1 when an Accept-Encoding list names `coding` without q=0. */
static int accepts(const char *ae, const char *coding) {
  size_t n = strlen(coding);
  for (const char *p = ae; p && *p;) {
    p += strspn(p, " \t,");
    size_t len = strcspn(p, ",;");
    const char *params = p + len;
    size_t plen = strcspn(params, ",");
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    if (len == n && !strncasecmp(p, coding, n)) {
      const char *qv = *params == ';' ? strstr(params, "q=") : NULL;
      if (!qv || qv > params + plen) return 1;
      return strtod(qv + 2, NULL) > 0;
    }
    p = params + plen;
  }
  return 0;
}

/* First call of an infer request: headers are in, the body is not. */
static enum MHD_Result infer_begin(sip__hreq_t *q) {
  struct MHD_Connection *c = q->conn;
  q->trace_t0 = sip__now_ns();
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  int64_t content_len = cl ? parse_len(cl) : -1;
  /* A Content-Length over server.http_max_body_bytes was answered 413
   * before this (framing.c). */
  const char *ae = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept-Encoding");
  q->compress_out = accepts(ae, "gzip") ? 1 : accepts(ae, "deflate") ? 2 : 0;
  const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
  if (ce && (!strcasecmp(ce, "gzip") || !strcasecmp(ce, "deflate"))) {
    q->compressed = 1;
  } else if (ce && strcasecmp(ce, "identity")) {
    q->early = sip_error_new(SIP_INVALID_ARGUMENT, "Content-Encoding '%.40s' is not supported; "
                             "expected gzip, deflate or identity", ce);
    return MHD_YES;
  }
  const char *hl =
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
  if (hl) {
    q->header_len = parse_len(hl);
    if (q->header_len < 0) {
      q->early = sip_error_new(SIP_INVALID_ARGUMENT,
                               "Inference-Header-Content-Length '%.40s' is not a byte count; "
                               "expected the length of the JSON header",
                               hl);
      return MHD_YES;
    }
  } else if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
    q->header_len = 0; /* raw binary: the whole body is the single input */
  } else {
    q->header_len = -1;
  }
  size_t hdr = q->header_len > 0 ? (size_t)q->header_len : 0;
  q->pad = (64 - hdr % 64) % 64;
  /* Sized from Content-Length, but only up to 1 MiB before any data has
   * come: an announced body is not memory a client has spent yet. */
  size_t first = content_len > 0 ? (size_t)content_len : 4096;
  q->cap = q->pad + (first < ((size_t)1 << 20) ? first : ((size_t)1 << 20));
  if (!(q->buf = sip__malloc(q->cap))) {
    q->refused = 1;
    return sip__http_send_error_msg(c, 429, "out of memory");
  }
  return MHD_YES;
}

static enum MHD_Result infer_body(sip__hreq_t *q, const char *data, size_t n) {
  if (q->early) return MHD_YES; /* answered once the body is in */
  size_t limit = q->h->cfg->http_max_body_bytes;
  if (n > limit - q->len) {
    /* Only a chunked body gets here (a Content-Length was checked first).
     * MHD cannot answer in the middle of a body: close the connection. */
    sip__log(SIP__LOG_WARN, "http request refused", "reason=\"chunked body over %zu bytes\"",
             limit);
    return MHD_NO;
  }
  if (q->pad + q->len + n > q->cap) {
    size_t cap = q->cap * 2 > q->pad + q->len + n ? q->cap * 2 : q->pad + q->len + n;
    uint8_t *b = sip__realloc(q->buf, cap);
    if (!b) return MHD_NO;
    q->buf = b;
    q->cap = cap;
  }
  memcpy(q->buf + q->pad + q->len, data, n);
  q->len += n;
  return MHD_YES;
}

static unsigned too_big(char *msg, size_t msg_n, size_t limit) {
  snprintf(msg, msg_n, "request body inflates to more than the server's limit of %zu bytes "
           "(server.http_max_body_bytes)", limit);
  return 413;
}

/* Inflates a gzip or zlib ("deflate") body in place of the compressed one,
 * at the same padding; the body limit applies to what it inflates to (a
 * bomb is refused once past it). 0, or the HTTP status of the error in
 * *msg. */
static unsigned inflate_body(sip__hreq_t *q, char *msg, size_t msg_n) {
  size_t limit = q->h->cfg->http_max_body_bytes;
  if (q->len > UINT_MAX) {
    snprintf(msg, msg_n, "compressed request body of %zu bytes is larger than zlib takes at once",
             q->len);
    return 413;
  }
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 15 + 32) != Z_OK) { /* 32: gzip or zlib header, detected */
    snprintf(msg, msg_n, "out of memory");
    return 429;
  }
  size_t cap = q->pad + (q->len * 4 > 4096 ? q->len * 4 : 4096), out = 0;
  uint8_t *b = sip__malloc(cap);
  unsigned status = 0;
  zs.next_in = q->buf + q->pad;
  zs.avail_in = (uInt)q->len;
  int rc = Z_OK;
  while (b && rc != Z_STREAM_END) {
    if (q->pad + out == cap) {
      if (out >= limit) {
        status = too_big(msg, msg_n, limit);
        break;
      }
      size_t nc = cap * 2 < q->pad + limit + 1 ? cap * 2 : q->pad + limit + 1;
      uint8_t *nb = sip__realloc(b, nc);
      if (!nb) break;
      b = nb, cap = nc;
    }
    zs.next_out = b + q->pad + out;
    zs.avail_out = (uInt)(cap - q->pad - out);
    rc = inflate(&zs, Z_NO_FLUSH);
    out = (size_t)(zs.next_out - (b + q->pad));
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs.avail_out == 0)) {
      snprintf(msg, msg_n, "request body is not valid %s data (%s); expected the body compressed "
               "as its Content-Encoding says", "gzip/deflate", zs.msg ? zs.msg : "truncated");
      status = 400;
      break;
    }
  }
  if (!status && out > limit) {
    status = too_big(msg, msg_n, limit);
  }
  if (!status && (!b || rc != Z_STREAM_END)) {
    snprintf(msg, msg_n, "out of memory");
    status = 429;
  }
  inflateEnd(&zs);
  if (status) {
    sip__free(b);
    return status;
  }
  sip__free(q->buf);
  q->buf = b, q->cap = cap, q->len = out;
  return 0;
}

static enum MHD_Result infer_start(sip__hreq_t *q) {
  q->started = 1;
  if (q->compressed) {
    char msg[300];
    unsigned status = inflate_body(q, msg, sizeof msg);
    if (status) return sip__http_send_error_msg(q->conn, status, msg);
  }
  /* The body becomes a refcounted buffer: binary inputs view it, so it
   * lives as long as the engine request does. */
  uint8_t *base = q->buf;
  q->buf = NULL;
  sip_buf_t *body = sip_buf_wrap(base, q->pad + q->len, sip__free, base);
  if (!body) return sip__http_send_error_msg(q->conn, 429, "out of memory");
  const sip_io_desc_t *ins = NULL;
  size_t n_ins = 0;
  /* Fetched now, while the pool is certainly alive: raw requests need the
   * input's shape, and the answer names the version that served. */
  q->meta = meta_get(q->h, q->model, q->version);
  if (q->meta) { /* raw requests' shape; every request's datatypes */
    ins = q->meta->inputs;
    n_ins = q->meta->n_inputs;
  }
  if (q->header_len == 0) {
    if (!q->meta) {
      /* Say why there is no metadata: unknown model, or not loaded. */
      sip_buf_unref(body);
      size_t n = 0;
      sip__model_view_t *views = sip__server_models(q->h->s, &n);
      const sip__model_view_t *v = NULL;
      sip_error_t *e = sip__model_views_lookup(q->h->s, views, n, q->model, q->version, &v);
      if (!e) e = sip__model_view_need_loaded(v);
      sip__server_models_free(views, n);
      if (!e && sip_server_draining(q->h->s))
        e = sip_error_new(SIP_UNAVAILABLE, "server is draining: it accepts no new requests");
      if (e && sip_error_code(e) == SIP_NOT_FOUND)
        sip__server_note_rejected(q->h->s, SIP__PROTOCOL_HTTP, q->model, 0, e);
      return sip__http_send_error(q->conn, e ? e : SIP__OOM());
    }
  }
  hinfer_t *w = sip__calloc(1, sizeof *w);
  if (w) w->scope = sip__shm_scope_new(sip__server_shm(q->h->s));
  if (!w || !w->scope) {
    hinfer_free(w);
    sip_buf_unref(body);
    return sip__http_send_error_msg(q->conn, 429, "out of memory");
  }
  w->q = q;
  sip_error_t *e = sip__ks_decode_shm(w->scope, q->model, q->version,
                                      (const uint8_t *)base + q->pad, q->len, q->header_len, body,
                                      ins, n_ins, &q->ks);
  sip_buf_unref(body);
  if (e) {
    sip__server_note_rejected(q->h->s, SIP__PROTOCOL_HTTP, q->model, sip__ks_error_malformed(e),
                              e);
    hinfer_free(w);
    return sip__http_send_error(q->conn, e);
  }
  sip_request_t *r = q->ks->req;
  q->ks->req = NULL; /* the engine owns it from here, even on error */
  /* A client that hangs up while its request waits has it cancelled. */
  sip_cancel_token_t *token = NULL;
  q->hc = sip__http_conns_watch(q->h, q->conn, &token);
  if (token) sip_request_set_cancel_token(r, token);
  /* W3C trace context (docs/tracing.md): an invalid traceparent is ignored. */
  const char *tp = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "traceparent");
  if (tp && (e = sip_request_set_trace_context(
                 r, tp, MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "tracestate"))))
    sip_error_free(e); /* out of memory: the request goes untraced by the caller */
  sip__trace_received(r, q->trace_t0);
  /* Suspend before submitting, so the completion can resume at once. */
  MHD_suspend_connection(q->conn);
  e = sip_server_infer_async(q->h->s, r, on_done, w);
  if (e) {
    if (sip_error_code(e) == SIP_NOT_FOUND) /* no such model (or version) */
      sip__server_note_rejected(q->h->s, SIP__PROTOCOL_HTTP, q->model, 0, e);
    hinfer_free(w); /* the completion never comes */
    sip__http_conns_unwatch(q->h, q->hc);
    q->hc = NULL;
    q->err = e;
    MHD_resume_connection(q->conn);
  }
  return MHD_YES;
}

typedef struct sent {
  sip__ks_body_t body;
  sip_response_t *resp; /* the outputs the body's segments point into */
  uint64_t trace_t0;    /* a traced answer: when encoding began */
} sent_t;

/* MHD is done with the answer (written, or the connection closed). */
static void sent_free(void *cls) {
  sent_t *s = cls;
  sip__trace_sent(s->resp, s->trace_t0);
  sip__ks_body_clear(&s->body);
  sip_response_free(s->resp);
  sip__free(s);
}

/* The segments compressed into one buffer (gzip, or zlib for "deflate");
 * NULL when out of memory. */
static uint8_t *deflate_iov(const struct MHD_IoVec *iov, unsigned n, int gzip, size_t *len) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, gzip ? 15 + 16 : 15, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    return NULL;
  size_t total = 0;
  for (unsigned i = 0; i < n; i++) total += iov[i].iov_len;
  size_t cap = deflateBound(&zs, (uLong)total) + 64;
  uint8_t *out = sip__malloc(cap);
  int rc = out ? Z_OK : Z_MEM_ERROR;
  zs.next_out = out;
  zs.avail_out = (uInt)cap;
  for (unsigned i = 0; rc == Z_OK && i < n; i++) {
    zs.next_in = (Bytef *)iov[i].iov_base;
    zs.avail_in = (uInt)iov[i].iov_len;
    rc = deflate(&zs, i + 1 == n ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_OK && zs.avail_in) rc = Z_BUF_ERROR; /* cannot happen: cap is the bound */
  }
  if (n == 0 && rc == Z_OK) rc = deflate(&zs, Z_FINISH);
  *len = cap - zs.avail_out;
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    sip__free(out);
    return NULL;
  }
  return out;
}

/* A request that was failed over (docs/availability.md) says so in the
 * response's parameters: {"retries": N, "served_by": "pool/1"}. */
static sip_error_t *note_failover(sip__ks_body_t *b, const sip_response_t *resp) {
  json_t *j = json_pack("{s:{s:I,s:s}}", "parameters", "retries",
                        (json_int_t)sip_response_retries(resp), "served_by",
                        sip_response_served_by(resp));
  char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  size_t tl = t ? strlen(t) : 0; /* {"parameters":{...}}: its inside goes after the '{' */
  char *n = t && b->json_len ? sip__malloc(b->json_len + tl) : NULL;
  if (n) {
    n[0] = '{';
    memcpy(n + 1, t + 1, tl - 2);
    n[tl - 1] = ',';
    memcpy(n + tl, b->json + 1, b->json_len - 1);
    sip__free(b->json);
    b->json = n;
    b->json_len += tl - 1;
  }
  free(t); /* jansson's allocation */
  return n ? NULL : SIP__OOM();
}

/* Called again after the resume: encode and queue the answer. */
static enum MHD_Result infer_answer(sip__hreq_t *q) {
  struct MHD_Connection *c = q->conn;
  if (q->err) { /* not submitted, or a region shrank under it (q->resp goes with q) */
    sip_error_t *e = q->err;
    q->err = NULL;
    return sip__http_send_error(c, e);
  }
  if (q->resp_oom) return sip__http_send_error_msg(c, 429, "out of memory");
  sip_response_t *resp = q->resp;
  q->resp = NULL;
  uint64_t t_send = sip__trace_send_begin(resp);
  if (sip_response_code(resp) != SIP_OK) {
    enum MHD_Result r = sip__http_send_error_msg(
        c, (unsigned)sip_code_http_status(sip_response_code(resp)), sip_response_message(resp));
    sip__trace_sent(resp, t_send);
    sip_response_free(resp);
    return r;
  }
  size_t n = sip_response_output_count(resp);
  const sip_tensor_t *outs[64];
  for (size_t i = 0; i < n && i < 64; i++) outs[i] = sip_response_output(resp, i);
  const char *version = q->version ? q->version : q->meta ? q->meta->version : NULL;
  sent_t *s = sip__calloc(1, sizeof *s);
  q->ks->replayed = sip_response_replayed(resp);
  q->ks->cached = sip_response_cached(resp);
  sip_error_t *e = s ? sip__ks_encode(q->ks, q->model, version, outs, n < 64 ? n : 64, &s->body)
                     : SIP__OOM();
  if (!e && sip_response_served_by(resp)) e = note_failover(&s->body, resp);
  if (e) {
    sip__ks_body_clear(&s->body);
    sip__free(s);
    sip_response_free(resp);
    return sip__http_send_error(c, e);
  }
  s->resp = resp;
  s->trace_t0 = t_send;
  int binary = s->body.binary;
  size_t json_len = s->body.json_len;
  struct MHD_IoVec iov[65];
  unsigned niov = 0;
  iov[niov].iov_base = s->body.json;
  iov[niov++].iov_len = s->body.json_len;
  for (size_t i = 0; i < s->body.n_segs && niov < 65; i++) {
    iov[niov].iov_base = s->body.segs[i].data;
    iov[niov++].iov_len = s->body.segs[i].len;
  }
  struct MHD_Response *r;
  if (q->compress_out) {
    /* Compressed as the client asked: one buffer instead of the segments. */
    size_t zlen = 0;
    uint8_t *z = deflate_iov(iov, niov, q->compress_out == 1, &zlen);
    sent_free(s);
    s = NULL;
    if (!z) return sip__http_send_error_msg(c, 429, "out of memory");
    r = MHD_create_response_from_buffer_with_free_callback(zlen, z, sip__free);
    if (!r) {
      sip__free(z);
      return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Encoding", q->compress_out == 1 ? "gzip" : "deflate");
  } else if (!(r = MHD_create_response_from_iovec(iov, niov, sent_free, s))) {
    sent_free(s);
    return MHD_NO;
  }
  if (binary) { /* the JSON header's length before compression, as Triton says it */
    char hl[32];
    snprintf(hl, sizeof hl, "%zu", json_len);
    MHD_add_response_header(r, "Inference-Header-Content-Length", hl);
  }
  return sip__http_queue(c, 200, r, binary ? "application/octet-stream" : "application/json");
}

const sip__http_post_ops_t sip__http_infer_ops = {
    .begin = infer_begin,
    .body = infer_body,
    .start = infer_start,
    .answer = infer_answer,
};
