/* sip — the native protocol's messages, one function each:
 * INFER_REQUEST and BATCH_INFER_REQUEST (decoded and submitted; the engine
 * thread that completes one writes its answer), INFO_REQUEST and
 * REPO_REQUEST (index at once; load and unload answered by the loader
 * thread when done). A malformed frame is answered with an ERROR frame and
 * ends the connection.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/seqparam.h"
#include "transport/frame.h"
#include "transport/listener_impl.h"

/* ---- INFER_REQUEST and BATCH_INFER_REQUEST ---- */

/* The completion, on the engine thread that ran the request. */
static void on_done(sip_response_t *resp, void *user) {
  pending_t *pd = user;
  sip__wbuf_t w = {0};
  if (!resp) {
    sip__encode_infer_response(&w, 0, SIP_RESOURCE_EXHAUSTED, "out of memory", 0, 0, 0, NULL, 0);
  } else {
    uint64_t queue_us, compute_us, total_us;
    size_t n_out;
    sip_response_timings(resp, &queue_us, &compute_us, &total_us);
    const sip_tensor_t *const *outs = sip_response_outputs(resp, &n_out);
    sip__encode_infer_response(&w, sip_response_request_id(resp), sip_response_code(resp),
                               sip_response_message(resp), queue_us, compute_us, total_us, outs,
                               n_out);
    if (w.oom) {
      sip__wbuf_free(&w);
      sip__encode_infer_response(&w, sip_response_request_id(resp), SIP_RESOURCE_EXHAUSTED,
                                 "out of memory encoding the response", 0, 0, 0, NULL, 0);
    }
    sip_response_free(resp);
  }
  sip__conn_write_answer(pd->ls, pd->conn_id, &w);
  sip__free(pd);
}

/* A request's parameters (a JSON object): pipeline_config and the sequence
 * keys (core/seqparam.h). A bad one is the request's error, not the
 * connection's. */
static sip_error_t *apply_parameters(sip_request_t *r, const char *text) {
  json_error_t je;
  json_t *root = json_loads(text, 0, &je);
  sip_error_t *e = NULL;
  if (!json_is_object(root)) {
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "request parameters are not a JSON object (%s); expected "
                      "{\"pipeline_config\": {...}, \"sequence_id\": ...}",
                      root ? "another JSON value" : je.text);
  } else {
    const char *key;
    json_t *v;
    sip__seq_params_t sq;
    if (!(e = sip__seq_params_read(root, &sq)) && sq.present)
      e = sq.sid ? sip_request_set_sequence_str(r, sq.sid, sq.start, sq.end)
                 : sip_request_set_sequence(r, sq.id, sq.start, sq.end);
    json_object_foreach(root, key, v) {
      if (e) break;
      if (sip__seq_param_key(key)) continue;
      if (strcmp(key, "pipeline_config")) {
        e = sip_error_new(SIP_INVALID_ARGUMENT,
                          "unknown request parameter '%s'; expected pipeline_config, "
                          "sequence_id, sequence_start or sequence_end",
                          key);
        break;
      }
      char *pc = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
      e = pc ? sip_request_set_pipeline_config(r, pc) : SIP__OOM();
      free(pc);
    }
  }
  json_decref(root);
  return e;
}

static void handle_infer(sip__listener_set_t *ls, conn_t *c) {
  sip__wire_request_t wr;
  const uint8_t *payload = sip_buf_data(c->payload);
  size_t len = c->h.length;
  uint32_t max_batch = 0;
  uint8_t padding = 0;
  int batch = c->h.type == SIP__MSG_BATCH_INFER_REQUEST;
  sip_error_t *e = batch ? sip__decode_batch_prefix(payload, len, &max_batch, &padding) : NULL;
  if (batch && !e) {
    payload += SIP__BATCH_PREFIX_SIZE;
    len -= SIP__BATCH_PREFIX_SIZE;
  }
  if (!e) e = sip__decode_infer_request(payload, len, c->payload, &wr);
  if (e) {
    sip__conn_error(ls, c, c->h.request_id, e);
    return;
  }
  sip_request_t *r = sip_request_new(wr.pool);
  pending_t *pd = sip__malloc(sizeof *pd);
  if (!r || !pd) {
    sip_request_free(r);
    sip__free(pd);
    sip__wire_request_clear(&wr);
    sip__conn_error(ls, c, c->h.request_id, SIP__OOM());
    return;
  }
  sip_request_set_id(r, c->h.request_id);
  sip_request_set_cancel_token(r, c->cancel);
  sip_request_set_timeout_ms(r, wr.timeout_ms);
  /* The codec checked the tensors; a new request has no inputs or outputs
   * yet, so both adopt. */
  sip_error_free(sip_request_adopt_inputs(r, wr.inputs, wr.n_inputs));
  sip_error_free(sip_request_adopt_outputs(r, wr.outputs, wr.n_outputs));
  e = sip_request_set_priority(r, wr.priority);
  wr.inputs = NULL;
  wr.n_inputs = 0;
  wr.outputs = NULL;
  wr.n_outputs = 0;
  if (!e && wr.parameters) e = apply_parameters(r, wr.parameters);
  sip__wire_request_clear(&wr);
  pd->ls = ls;
  pd->conn_id = conn_id(c);
  uint64_t rid = c->h.request_id;
  if (e) sip_request_free(r);
  else e = batch ? sip_server_infer_batch(ls->srv, r, (int)(max_batch > INT32_MAX ? INT32_MAX : max_batch),
                                     padding, on_done, pd)
            : sip_server_infer_async(ls->srv, r, on_done, pd);
  if (e) {
    sip__free(pd);
    sip__wbuf_t w = {0};
    sip__encode_infer_response(&w, rid, sip_error_code(e), sip_error_message(e), 0, 0, 0, NULL,
                               0);
    sip_error_free(e);
    sip__conn_queue_wbuf(ls, c, &w);
  }
}

/* ---- INFO_REQUEST ---- */

static void handle_info(sip__listener_set_t *ls, conn_t *c) {
  const uint8_t *p = sip_buf_data(c->payload);
  if (c->h.length != 1 || p[0] < SIP_INFO_READY || p[0] > SIP_INFO_STATUS) {
    sip__conn_error(ls, c, c->h.request_id,
                    sip_error_new(SIP_INVALID_ARGUMENT,
                                  "INFO_REQUEST payload must be one byte 1 (ready), 2 (pools) or 3 "
                                  "(status); got %u bytes",
                                  c->h.length));
    return;
  }
  char *json = sip_server_info_json(ls->srv, p[0]);
  sip__wbuf_t w = {0};
  if (json)
    sip__encode_info_response(&w, c->h.request_id, SIP_OK, json, strlen(json));
  else
    sip__encode_info_response(&w, c->h.request_id, SIP_RESOURCE_EXHAUSTED, "{}", 2);
  sip_free(json);
  sip__conn_queue_wbuf(ls, c, &w);
}

/* ---- repository requests (REPO_REQUEST, answered by INFO_RESPONSE) ---- */

typedef struct repo_pending {
  sip__listener_set_t *ls;
  uint64_t conn_id, request_id;
  int unload;
  char *model;
} repo_pending_t;

/* The INFO_RESPONSE of a repository request: `ok` (taken) on success, else
 * {"error": message} with the error's code. */
static void encode_repo_answer(sip__wbuf_t *w, uint64_t rid, sip_error_t *e, json_t *ok) {
  json_t *body = e ? json_pack("{s:s}", "error", sip_error_message(e)) : ok;
  char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (txt)
    sip__encode_info_response(w, rid, e ? sip_error_code(e) : SIP_OK, txt, strlen(txt));
  else
    sip__encode_info_response(w, rid, SIP_RESOURCE_EXHAUSTED, "{\"error\":\"out of memory\"}",
                              strlen("{\"error\":\"out of memory\"}"));
  free(txt); /* jansson's allocation */
}

/* A load or unload finished (the loader thread): answer like an engine
 * completion, straight to the connection if it is still there. */
static void on_repo_done(sip_error_t *e, void *user) {
  repo_pending_t *rp = user;
  sip__wbuf_t w = {0};
  encode_repo_answer(&w, rp->request_id, e,
                     e ? NULL
                       : json_pack("{s:s,s:s,s:b}", "model", rp->model, "action",
                                   rp->unload ? "unload" : "load", "ok", 1));
  sip_error_free(e);
  sip__conn_write_answer(rp->ls, rp->conn_id, &w);
  sip__free(rp->model);
  sip__free(rp);
}

static void handle_repo(sip__listener_set_t *ls, conn_t *c) {
  json_error_t je;
  uint64_t rid = c->h.request_id;
  json_t *req = json_loadb((const char *)sip_buf_data(c->payload), c->h.length,
                           JSON_REJECT_DUPLICATES, &je);
  const char *action = json_string_value(json_object_get(req, "action"));
  json_t *jm = json_object_get(req, "model");
  const char *model = json_string_value(jm);
  sip_error_t *e = NULL;
  if (!req)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "REPO_REQUEST payload is not JSON: %s (offset %d)",
                      je.text, je.position);
  else if (!json_is_object(req) || !action ||
           (strcmp(action, "index") && strcmp(action, "load") && strcmp(action, "unload")))
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "REPO_REQUEST: expected {\"action\": \"index\" | \"load\" | \"unload\", "
                      "\"model\": NAME}");
  else if (strcmp(action, "index") && !model)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "REPO_REQUEST %s: \"model\" (a string) is missing",
                      action);
  else if (model && strlen(model) != json_string_length(jm))
    e = sip_error_new(SIP_INVALID_ARGUMENT, "REPO_REQUEST %s: the model name contains a NUL byte",
                      action);
  sip__wbuf_t w = {0};
  if (!e && !strcmp(action, "index")) {
    json_t *ready = json_object_get(req, "ready");
    char *txt = sip_server_repository_index(ls->srv, json_is_true(ready));
    if (txt)
      sip__encode_info_response(&w, rid, SIP_OK, txt, strlen(txt));
    else
      encode_repo_answer(&w, rid, e = SIP__OOM(), NULL);
    sip_free(txt);
  } else if (!e) {
    /* Loads take long: the loader thread answers when done. */
    repo_pending_t *rp = sip__calloc(1, sizeof *rp);
    if (!rp || !(rp->model = sip__strdup(model))) {
      e = SIP__OOM();
      if (rp) sip__free(rp);
    } else {
      rp->ls = ls;
      rp->conn_id = conn_id(c);
      rp->request_id = rid;
      rp->unload = !strcmp(action, "unload");
      e = rp->unload ? sip_server_unload_model_async(ls->srv, model, on_repo_done, rp)
                     : sip_server_load_model_async(ls->srv, model, on_repo_done, rp);
      if (e) {
        sip__free(rp->model);
        sip__free(rp);
      }
    }
    if (e) encode_repo_answer(&w, rid, e, NULL);
  } else {
    encode_repo_answer(&w, rid, e, NULL);
  }
  sip_error_free(e);
  json_decref(req);
  if (w.data || w.oom) sip__conn_queue_wbuf(ls, c, &w);
}

void sip__handle_frame(sip__listener_set_t *ls, conn_t *c) {
  switch (c->h.type) {
  case SIP__MSG_INFER_REQUEST:
  case SIP__MSG_BATCH_INFER_REQUEST:
    handle_infer(ls, c);
    break;
  case SIP__MSG_INFO_REQUEST:
    handle_info(ls, c);
    break;
  case SIP__MSG_REPO_REQUEST:
    handle_repo(ls, c);
    break;
  default:
    sip__conn_error(ls, c, c->h.request_id,
                    sip_error_new(SIP_INVALID_ARGUMENT,
                                  "message type %u is sent by servers, not clients; expected "
                                  "INFER_REQUEST (1), INFO_REQUEST (3), BATCH_INFER_REQUEST (6) or "
                                  "REPO_REQUEST (7)",
                                  c->h.type));
  }
}
