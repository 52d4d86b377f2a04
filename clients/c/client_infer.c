/* sip — libsipclient: inference requests (INFER_REQUEST and
 * BATCH_INFER_REQUEST), asynchronous and synchronous, and their responses. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sip/client.h"
#include "transport/frame.h"
#include "client_impl.h"

/* `v` as a JSON string (owned, jansson's), or NULL when it is not UTF-8. */
static char *json_str(const char *v) {
  json_t *j = json_string(v);
  char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
  json_decref(j);
  return t;
}

/* Appends `"key": value` to the object text being built in *acc (owned);
 * 0 when out of memory. */
static int add_param(char **acc, const char *key, const char *value) {
  char *n = sip__asprintf("%s%s\"%s\": %s", *acc ? *acc : "", *acc ? ", " : "", key, value);
  sip__free(*acc);
  *acc = n;
  return n != NULL;
}

/* The request's parameters object as JSON text (owned), or NULL when it
 * has none: pipeline_config as given, the sequence keys, the idempotency
 * key, the W3C trace context. */
static sip_error_t *request_params(const sip_client_request_t *req, char **out) {
  *out = NULL;
  int seq = req->sequence_id || req->sequence_id_str;
  if (!seq && (req->sequence_start || req->sequence_end))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "sequence_start/sequence_end need a sequence_id or sequence_id_str");
  const char *key = req->idempotency_key;
  if (key && (!*key || strlen(key) > 1024))
    return sip_error_new(SIP_INVALID_ARGUMENT, "idempotency key of %zu bytes; expected 1..1024 "
                         "bytes of UTF-8", strlen(key));
  if (!seq && !req->pipeline_config && !key && !req->traceparent) return NULL;
  /* Strings the server reads as JSON strings, each checked to be UTF-8. */
  const char *names[] = {"idempotency_key", "sequence_id", "traceparent", "tracestate"};
  const char *vals[] = {key, req->sequence_id_str, req->traceparent,
                        req->traceparent ? req->tracestate : NULL};
  char *js[4] = {0};
  sip_error_t *e = NULL;
  for (int i = 0; i < 4 && !e; i++)
    if (vals[i] && !(js[i] = json_str(vals[i])))
      e = sip_error_new(SIP_INVALID_ARGUMENT, "%s is not valid UTF-8",
                        i == 0 ? "idempotency key" : i == 1 ? "sequence_id_str" : names[i]);
  char num[24];
  snprintf(num, sizeof num, "%llu", (unsigned long long)req->sequence_id);
  char *acc = NULL;
  int ok = !e;
  if (ok && req->pipeline_config) ok = add_param(&acc, "pipeline_config", req->pipeline_config);
  if (ok && seq)
    ok = add_param(&acc, "sequence_id", js[1] ? js[1] : num) &&
         add_param(&acc, "sequence_start", req->sequence_start ? "true" : "false") &&
         add_param(&acc, "sequence_end", req->sequence_end ? "true" : "false");
  if (ok && js[0]) ok = add_param(&acc, "idempotency_key", js[0]);
  if (ok && js[2]) ok = add_param(&acc, "traceparent", js[2]);
  if (ok && js[3]) ok = add_param(&acc, "tracestate", js[3]);
  for (int i = 0; i < 4; i++) free(js[i]); /* jansson's */
  if (!e && ok) *out = sip__asprintf("{%s}", acc);
  sip__free(acc);
  if (e) return e;
  return *out ? NULL : SIP__OOM();
}

/* batch < 0: a plain INFER_REQUEST; else a BATCH_INFER_REQUEST. */
static sip_error_t *infer_async(sip_client_t *c, const sip_client_request_t *req, int64_t batch,
                                int padding, sip_client_done_fn done, void *user) {
  if (!req || !req->pool || !done)
    return sip_error_new(SIP_INVALID_ARGUMENT, "request, pool and callback are required");
  if (req->priority < 0 || req->priority > 3)
    return sip_error_new(SIP_INVALID_ARGUMENT, "priority %d; expected 0..3", req->priority);
  if (padding < 0 || padding > 2)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "padding %d; expected 0 (none), 1 (replicate_last) or 2 (zero)", padding);
  if (batch >= 0 && (req->input_shm || req->output_shm))
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory inputs and outputs are for "
                         "sip_client_infer and sip_client_infer_async, not batches");
  for (size_t i = 0; req->output_shm && i < req->n_outputs; i++)
    if (req->output_shm[i].region && !req->outputs[i])
      return sip_error_new(SIP_INVALID_ARGUMENT, "output %zu has a destination but no name", i);
  sip__client_pending_t *p = sip__calloc(1, sizeof *p);
  if (!p) return SIP__OOM();
  p->id = req->request_id ? req->request_id : atomic_fetch_add(&c->next_id, 1);
  p->done = done;
  p->user = user;
  p->start_ns = sip__now_ns();
  sip__wbuf_t w = {0};
  char *params = NULL;
  sip_error_t *pe = request_params(req, &params);
  if (pe) {
    sip__free(p);
    return pe;
  }
  /* The public refs borrow their names, as the wire refs do when encoding. */
  sip__wire_shm_ref_t *in_ref = req->input_shm ? sip__calloc(req->n_inputs + 1, sizeof *in_ref)
                                               : NULL;
  sip__wire_shm_ref_t *out_ref =
      req->output_shm ? sip__calloc(req->n_outputs + 1, sizeof *out_ref) : NULL;
  for (size_t i = 0; in_ref && i < req->n_inputs; i++)
    in_ref[i] = (sip__wire_shm_ref_t){(char *)req->input_shm[i].region, req->input_shm[i].offset,
                                      req->input_shm[i].byte_size};
  for (size_t i = 0; out_ref && i < req->n_outputs; i++)
    out_ref[i] = (sip__wire_shm_ref_t){(char *)req->output_shm[i].region,
                                       req->output_shm[i].offset, req->output_shm[i].byte_size};
  if ((req->input_shm && !in_ref) || (req->output_shm && !out_ref)) w.oom = 1;
  if (batch < 0)
    sip__encode_infer_request_shm(&w, p->id, req->pool, req->priority, req->timeout_ms,
                                  req->outputs, out_ref, req->n_outputs, req->inputs, in_ref,
                                  req->n_inputs, params);
  else
    sip__encode_batch_infer_request(&w, p->id, (uint32_t)batch, (uint8_t)padding, req->pool,
                                    req->priority, req->timeout_ms, req->outputs, req->n_outputs,
                                    req->inputs, req->n_inputs);
  sip__free(params);
  sip__free(in_ref);
  sip__free(out_ref);
  if (req->idempotency_key && !w.oom) { /* kept for a resend after a reconnection */
    p->frame.data = sip__malloc(w.len);
    if (!p->frame.data) w.oom = 1;
    else memcpy(p->frame.data, w.data, p->frame.len = w.len);
    uint32_t ms = req->timeout_ms;
    if (!ms) {
      pthread_mutex_lock(&c->pmu);
      ms = c->resend_ms;
      pthread_mutex_unlock(&c->pmu);
    }
    p->resend_until_ns = p->start_ns + (uint64_t)ms * 1000000u;
  }
  return sip__client_send_frame(c, p, &w, -1);
}

sip_error_t *sip_client_infer_async(sip_client_t *c, const sip_client_request_t *req,
                                    sip_client_done_fn done, void *user) {
  return infer_async(c, req, -1, 0, done, user);
}

sip_error_t *sip_client_batch_infer_async(sip_client_t *c, const sip_client_request_t *req,
                                          uint32_t max_batch_size, int padding,
                                          sip_client_done_fn done, void *user) {
  return infer_async(c, req, max_batch_size, padding, done, user);
}

static void sync_infer_done(sip_client_response_t *r, sip_error_t *e, void *user) {
  sip__client_waiter_t *w = user;
  w->resp = r;
  w->err = e;
  sip__client_signal_done(w);
}

static sip_error_t *infer_sync(sip_client_t *c, const sip_client_request_t *req, int64_t batch,
                               int padding, sip_client_response_t **out) {
  *out = NULL;
  sip__client_waiter_t w = {.done = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  sip_error_t *e = infer_async(c, req, batch, padding, sync_infer_done, &w);
  if (e) {
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return e;
  }
  sip__client_wait_done(&w);
  *out = w.resp;
  return w.err;
}

sip_error_t *sip_client_infer(sip_client_t *c, const sip_client_request_t *req,
                              sip_client_response_t **out) {
  return infer_sync(c, req, -1, 0, out);
}

sip_error_t *sip_client_batch_infer(sip_client_t *c, const sip_client_request_t *req,
                                    uint32_t max_batch_size, int padding,
                                    sip_client_response_t **out) {
  return infer_sync(c, req, max_batch_size, padding, out);
}

void sip_client_response_free(sip_client_response_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_outputs; i++) sip_tensor_free(r->outputs[i]);
  sip__free(r->outputs);
  sip__free(r);
}

const sip_tensor_t *sip_client_response_output(const sip_client_response_t *r, const char *name) {
  for (size_t i = 0; r && i < r->n_outputs; i++)
    if (strcmp(r->outputs[i]->name, name) == 0) return r->outputs[i];
  return NULL;
}
