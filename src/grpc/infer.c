/* sip — ModelInfer and ModelStreamInfer. A request is decoded (codec.c) and
 * submitted on the completion-queue thread; the engine thread that
 * completes it encodes the answer and starts sending it. A call's deadline
 * becomes the request's timeout, and a cancelled call cancels its requests
 * (server.c's close operation). A stream sends its answers one at a time in
 * completion order, each carrying its request's id; errors travel in the
 * stream as error_message, as Triton does, and the stream goes on.
 */
#include <string.h>

#include "core/redact.h"
#include "grpc/grpc_frontend.h"
#include "grpc/grpc_impl.h"
#include "server/introspect.h"
#include "server/observe/tracing.h"

/* ---- model_version of answers ------------------------------------------------ */

typedef struct vcache {
  char *model;
  char *version; /* NULL: unversioned */
  struct vcache *next;
} vcache_t;

static void vcache_free(vcache_t *v) {
  while (v) {
    vcache_t *next = v->next;
    sip__free(v->model);
    sip__free(v->version);
    sip__free(v);
    v = next;
  }
}

void sip__grpc_vcache_clear(sip__grpc_t *g) {
  vcache_free(g->vcache);
  g->vcache = NULL;
}

/* The cache entry of `model` for generation `gen` (the cache is emptied
 * when the generation moved on), or NULL. Caller holds g->mu. */
static vcache_t *vcache_find(sip__grpc_t *g, const char *model, uint64_t gen) {
  if (g->vgen != gen) {
    sip__grpc_vcache_clear(g);
    g->vgen = gen;
  }
  vcache_t *v = g->vcache;
  while (v && strcmp(v->model, model)) v = v->next;
  return v;
}

/* The version that answers a request for `model` naming none, as Triton
 * reports it in model_version: looked up once per model and set of models. */
static char *default_version(sip__grpc_t *g, const char *model) {
  uint64_t gen = sip_server_generation(g->s);
  char *out = NULL;
  pthread_mutex_lock(&g->mu);
  vcache_t *hit = vcache_find(g, model, gen);
  if (hit && hit->version) out = sip__strdup(hit->version);
  pthread_mutex_unlock(&g->mu);
  if (hit) return out;
  size_t n = 0;
  sip__model_view_t *views = sip__server_models(g->s, &n);
  const sip__model_view_t *v = sip__model_views_find(views, n, model, NULL);
  vcache_t *e = v ? sip__calloc(1, sizeof *e) : NULL;
  if (e) {
    e->model = sip__strdup(model);
    e->version = v->version ? sip__strdup(v->version) : NULL;
    out = v->version ? sip__strdup(v->version) : NULL;
  }
  sip__server_models_free(views, n);
  if (!e) return NULL;
  pthread_mutex_lock(&g->mu);
  if (e->model && g->vgen == gen && !vcache_find(g, model, gen)) {
    e->next = g->vcache;
    g->vcache = e;
    e = NULL;
  }
  pthread_mutex_unlock(&g->mu);
  vcache_free(e);
  return out;
}

/* ---- inference ----------------------------------------------------------------- */

typedef struct ginfer {
  sip__gcall_t *c;
  sip__grpc_infer_t *k;
  sip__shm_set_t *scope; /* the shared memory regions it used (core/shm.h) */
} ginfer_t;

static void stream_answer(sip__gcall_t *c, const sip__grpc_infer_t *k, sip_error_t *e, uint8_t *msg,
                          size_t len);

static void on_done(sip_response_t *resp, void *user) {
  ginfer_t *q = user;
  sip__gcall_t *c = q->c;
  int stream = c->method->stream;
  uint8_t *msg = NULL;
  size_t len = 0;
  sip_error_t *e = NULL;
  uint64_t t_send = sip__trace_send_begin(resp);
  if (!resp) {
    e = SIP__OOM();
  } else if (sip_response_code(resp) != SIP_OK) {
    e = sip_error_new(sip_response_code(resp), "%s", sip_response_message(resp));
  } else {
    size_t n = 0;
    const sip_tensor_t *const *outs = sip_response_outputs(resp, &n);
    q->k->replayed = sip_response_replayed(resp);
    q->k->cached = sip_response_cached(resp);
    q->k->retries = sip_response_retries(resp);
    q->k->served_by = sip_response_served_by(resp);
    /* A region the execution read or wrote that its client shrank
     * meanwhile: the outputs may be made of zeros. The encoder checks the
     * bytes it reads and writes itself. */
    e = sip__shm_scope_check(q->scope);
    if (!e) e = sip__grpc_encode_infer(q->k, q->k->version, outs, n, stream, &msg, &len);
    q->k->served_by = NULL; /* the response's, freed below */
  }
  if (stream)
    stream_answer(c, q->k, e, msg, len);
  else
    sip__grpc_reply_bytes(c, e, msg, len);
  sip__trace_sent(resp, t_send);
  sip_response_free(resp);
  sip__grpc_infer_free(q->k);
  sip__shm_set_free(q->scope);
  sip__free(q);
  sip__grpc_call_unref(c);
}

/* The call's metadata value for `key` (lowercase, as gRPC keeps keys) into
 * buf, NUL-terminated; NULL when absent or longer than buf. */
static const char *metadata(sip__gcall_t *c, const char *key, char *buf, size_t n) {
  for (size_t i = 0; i < c->md.count; i++) {
    const grpc_metadata *m = &c->md.metadata[i];
    size_t kl = GRPC_SLICE_LENGTH(m->key), vl = GRPC_SLICE_LENGTH(m->value);
    if (kl != strlen(key) || memcmp(GRPC_SLICE_START_PTR(m->key), key, kl)) continue;
    if (vl >= n) return NULL;
    memcpy(buf, GRPC_SLICE_START_PTR(m->value), vl);
    buf[vl] = '\0';
    return buf;
  }
  return NULL;
}

sip_error_t *sip__grpc_mm_model(sip__gcall_t *c, char *out, size_t cap) {
  char id[512];
  out[0] = '\0';
  for (size_t i = 0; i < c->md.count; i++) /* present but too long for id[] */
    if (GRPC_SLICE_LENGTH(c->md.metadata[i].key) == 11 &&
        !memcmp(GRPC_SLICE_START_PTR(c->md.metadata[i].key), "mm-model-id", 11) &&
        GRPC_SLICE_LENGTH(c->md.metadata[i].value) >= sizeof id)
      return sip_error_new(SIP_INVALID_ARGUMENT, "mm-model-id metadata is too long; expected "
                           "a ModelMesh model id");
  /* mm-vmodel-id (the virtual model) changes nothing here. */
  return metadata(c, "mm-model-id", id, sizeof id) ? sip__grpc_mmesh_name(id, out, cap) : NULL;
}

/* The W3C trace context of the call (docs/tracing.md); an invalid
 * traceparent is ignored. */
static void trace_context(sip__gcall_t *c, sip_request_t *r, uint64_t t0) {
  char tp[128], ts[520];
  const char *p = metadata(c, "traceparent", tp, sizeof tp);
  sip_error_t *e = p ? sip_request_set_trace_context(r, p, metadata(c, "tracestate", ts, sizeof ts))
                     : NULL;
  sip_error_free(e); /* out of memory: untraced by the caller */
  sip__trace_received(r, t0);
}

/* Decodes and submits one request; an error is returned when nothing was
 * submitted (*k then holds what was decoded, if anything). Its shared
 * memory regions are viewed through a scope of the server's set, checked
 * and freed when it is answered. */
static sip_error_t *submit(sip__gcall_t *c, const uint8_t *data, size_t len, sip_buf_t *backing,
                           sip__grpc_infer_t **kp) {
  uint64_t t0 = sip__now_ns();
  sip__grpc_infer_t *k = NULL;
  *kp = NULL;
  sip__shm_set_t *scope = sip__shm_scope_new(sip__server_shm(c->g->s));
  if (!scope) return SIP__OOM();
  char mm[160];
  sip_error_t *e = sip__grpc_mm_model(c, mm, sizeof mm);
  if (e) {
    sip__server_note_rejected(c->g->s, SIP__PROTOCOL_GRPC, NULL, 0, e);
    goto fail;
  }
  e = sip__grpc_decode_infer_as(data, len, backing, scope, mm[0] ? mm : NULL, &k);
  *kp = k;
  if (e) {
    /* No k: the bytes are not a ModelInferRequest at all. */
    sip__server_note_rejected(c->g->s, SIP__PROTOCOL_GRPC, k ? k->model : NULL, !k, e);
    goto fail;
  }
  if (!k->version) k->version = default_version(c->g, k->model); /* only echoed */
  int64_t ms = sip__grpc_timeout_ms(c);
  if (ms < 0) {
    e = sip_error_new(SIP_DEADLINE_EXCEEDED, "the call's deadline passed before the request "
                      "was submitted");
    goto fail;
  }
  if (ms > 0) sip_request_set_timeout_ms(k->req, ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms);
  pthread_mutex_lock(&c->mu);
  if (!c->cancel) c->cancel = sip_cancel_token_new();
  sip_cancel_token_t *tok = c->cancel;
  int cancelled = c->closed && c->cancelled;
  pthread_mutex_unlock(&c->mu);
  if (!tok || cancelled) {
    e = tok ? sip_error_new(SIP_CANCELLED, "the call was cancelled") : SIP__OOM();
    goto fail;
  }
  sip_request_set_cancel_token(k->req, tok);
  ginfer_t *q = sip__calloc(1, sizeof *q);
  if (!q) {
    e = SIP__OOM();
    goto fail;
  }
  q->c = c;
  q->k = k;
  q->scope = scope;
  sip__grpc_call_ref(c);
  if (c->method->stream) {
    pthread_mutex_lock(&c->mu);
    c->inflight++;
    pthread_mutex_unlock(&c->mu);
  }
  sip_request_t *r = k->req;
  k->req = NULL; /* the engine owns it from here, even on error */
  trace_context(c, r, t0);
  e = sip_server_infer_async(c->g->s, r, on_done, q);
  if (e) {
    if (sip_error_code(e) == SIP_NOT_FOUND) /* no such model (or version) */
      sip__server_note_rejected(c->g->s, SIP__PROTOCOL_GRPC, k->model, 0, e);
    if (c->method->stream) {
      pthread_mutex_lock(&c->mu);
      c->inflight--;
      pthread_mutex_unlock(&c->mu);
    }
    sip__free(q);
    sip__grpc_call_unref(c); /* never the last: the caller holds one */
    goto fail;
  }
  *kp = NULL; /* on_done frees it */
  return NULL;
fail:
  sip__shm_set_free(scope);
  return e;
}

void sip__grpc_infer(sip__gcall_t *c, const uint8_t *data, size_t len, sip_buf_t *backing) {
  sip__grpc_infer_t *k = NULL;
  sip_error_t *e = submit(c, data, len, backing, &k);
  sip__grpc_infer_free(k);
  if (e) sip__grpc_reply(c, e, NULL);
}

/* ---- streams ------------------------------------------------------------------ */

/* Sends the next queued answer, or the final status once the client has
 * closed its side and every request was answered. Caller holds c->mu. */
static void send_next_locked(sip__gcall_t *c) {
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (c->sending || c->status_sent) return;
  if (c->failed) { /* the client is gone: drop what is queued */
    while (c->out_head) {
      sip__gout_t *o = c->out_head;
      c->out_head = o->next;
      grpc_byte_buffer_destroy(o->bb);
      sip__free(o);
    }
    c->out_tail = NULL;
    return;
  }
  if (!c->md_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  sip__gout_t *o = c->out_head;
  if (o) {
    c->out_head = o->next;
    if (!c->out_head) c->out_tail = NULL;
    c->sent = o->bb;
    sip__free(o);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->sent;
  } else if (c->half_closed && c->inflight == 0) {
    c->status_sent = 1;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n++].data.send_status_from_server.status = GRPC_STATUS_OK;
  } else {
    return;
  }
  c->md_sent = 1;
  c->sending = 1;
  sip__grpc_call_ref(c);
  if (grpc_call_start_batch(c->call, ops, n, &c->send_tag, NULL) != GRPC_CALL_OK) {
    sip__log(SIP__LOG_ERROR, "grpc stream send refused", NULL);
    c->sending = 0;
    c->failed = 1;
    sip__grpc_call_unref(c); /* never the last: the caller holds one */
  }
}

void sip__grpc_stream_sent(sip__gcall_t *c, int ok) {
  pthread_mutex_lock(&c->mu);
  if (c->sent) grpc_byte_buffer_destroy(c->sent);
  c->sent = NULL;
  c->sending = 0;
  if (!ok) c->failed = 1;
  send_next_locked(c);
  pthread_mutex_unlock(&c->mu);
}

static void stream_answer(sip__gcall_t *c, const sip__grpc_infer_t *k, sip_error_t *e, uint8_t *msg,
                          size_t len) {
  if (e) {
    msg = NULL;
    const char *m = sip_error_message(e);
    size_t rn = 0;
    char *red = sip__redacted(m, strlen(m), &rn); /* no server directories (core/redact.h) */
    sip_error_t *e2 = sip__grpc_encode_stream_error(k, red ? red : m, &msg, &len);
    sip__free(red);
    sip_error_free(e);
    if (e2) {
      sip_error_free(e2);
      msg = NULL, len = 0;
    }
  }
  sip__gout_t *o = msg ? sip__calloc(1, sizeof *o) : NULL;
  if (o && !(o->bb = sip__grpc_bytes(msg, len))) {
    sip__free(o);
    o = NULL;
  } else if (!o) {
    sip__free(msg);
  }
  pthread_mutex_lock(&c->mu);
  if (!o) c->failed = 1; /* an answer lost: the stream cannot go on */
  if (o) {
    if (c->out_tail) c->out_tail->next = o;
    else c->out_head = o;
    c->out_tail = o;
  }
  c->inflight--;
  send_next_locked(c);
  pthread_mutex_unlock(&c->mu);
}

void sip__grpc_stream_message(sip__gcall_t *c, const uint8_t *data, size_t len, sip_buf_t *backing,
                              int closed) {
  if (closed) {
    pthread_mutex_lock(&c->mu);
    c->half_closed = 1;
    send_next_locked(c);
    pthread_mutex_unlock(&c->mu);
    return;
  }
  sip__grpc_infer_t *k = NULL;
  sip_error_t *e = submit(c, data, len, backing, &k);
  if (e) {
    pthread_mutex_lock(&c->mu);
    c->inflight++; /* stream_answer counts it out */
    pthread_mutex_unlock(&c->mu);
    stream_answer(c, k, e, NULL, 0);
  }
  sip__grpc_infer_free(k);
}
