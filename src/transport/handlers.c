/* sip — the native protocol's messages, one function each:
 * INFER_REQUEST and BATCH_INFER_REQUEST (decoded and submitted; the engine
 * thread that completes one writes its answer), INFO_REQUEST and
 * REPO_REQUEST (index at once; load and unload answered by the loader
 * thread when done). A malformed frame is answered with an ERROR frame and
 * ends the connection.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "sip/frontend.h"
#include "transport/frame.h"
#include "transport/listener_impl.h"
#include "server/introspect.h"
#include "server/observe/tracing.h"

/* ---- INFER_REQUEST and BATCH_INFER_REQUEST ---- */

static void pending_free(sip__pending_t *pd) {
  if (!pd) return;
  for (size_t i = 0; i < pd->n_dst; i++) {
    sip__free(pd->dst[i].output);
    sip__free(pd->dst[i].region);
    sip_buf_unref(pd->dst[i].owner);
  }
  sip__free(pd->dst);
  sip__free(pd);
}

/* Copies the outputs that have a destination into the client's regions;
 * refs[i] says where output i went. A destination too small for its output
 * fails the request (nothing is copied then). */
static sip_error_t *write_shm_outputs(const sip__pending_t *pd, const sip_tensor_t *const *outs,
                                      size_t n_out, sip__wire_shm_ref_t **refs) {
  *refs = NULL;
  const sip__out_dst_t **d = sip__calloc(n_out ? n_out : 1, sizeof *d);
  if (!d) return SIP__OOM();
  int any = 0;
  for (size_t i = 0; i < n_out; i++) {
    for (size_t j = 0; j < pd->n_dst && !d[i]; j++)
      if (!strcmp(pd->dst[j].output, outs[i]->name)) d[i] = &pd->dst[j];
    if (d[i] && outs[i]->nbytes > d[i]->size) {
      sip_error_t *e = sip_error_new(
          SIP_INVALID_ARGUMENT, "output '%s' needs %zu bytes but its destination in shared memory "
          "region '%s' (offset %" PRIu64 ") holds %" PRIu64 "; give a destination of at least "
          "%zu bytes", outs[i]->name, outs[i]->nbytes, d[i]->region, d[i]->offset, d[i]->size,
          outs[i]->nbytes);
      sip__free(d);
      return e;
    }
    any |= d[i] != NULL;
  }
  sip__wire_shm_ref_t *r = any ? sip__calloc(n_out, sizeof *r) : NULL;
  if (any && !r) {
    sip__free(d);
    return SIP__OOM();
  }
  for (size_t i = 0; any && i < n_out; i++) {
    if (!d[i]) continue;
    /* An identity model answering in place already wrote the bytes. */
    if (outs[i]->nbytes && (const void *)d[i]->data != outs[i]->data)
      memmove(d[i]->data, outs[i]->data, outs[i]->nbytes);
    r[i] = (sip__wire_shm_ref_t){.region = d[i]->region, .offset = d[i]->offset,
                                 .size = outs[i]->nbytes};
  }
  sip__free(d);
  *refs = r;
  return NULL;
}

/* The completion, on the engine thread that ran the request. */
static void on_done(sip_response_t *resp, void *user) {
  sip__pending_t *pd = user;
  sip__wbuf_t w = {0};
  uint64_t t_send = sip__trace_send_begin(resp);
  if (!resp) {
    sip__encode_infer_response(&w, 0, SIP_RESOURCE_EXHAUSTED, "out of memory", 0, 0, 0, NULL, 0);
  } else {
    uint64_t queue_us, compute_us, total_us;
    size_t n_out;
    sip_response_timings(resp, &queue_us, &compute_us, &total_us);
    const sip_tensor_t *const *outs = sip_response_outputs(resp, &n_out);
    sip__wire_shm_ref_t *refs = NULL;
    sip_error_t *e = pd->n_dst && sip_response_code(resp) == SIP_OK
                         ? write_shm_outputs(pd, outs, n_out, &refs)
                         : NULL;
    if (e)
      sip__encode_infer_response(&w, sip_response_request_id(resp), sip_error_code(e),
                                 sip_error_message(e), queue_us, compute_us, total_us, NULL, 0);
    else
      sip__encode_infer_response_shm(&w, sip_response_request_id(resp), sip_response_code(resp),
                                     sip_response_message(resp), queue_us, compute_us, total_us,
                                     outs, refs, n_out,
                                     sip_response_replayed(resp) ? SIP__RESP_REPLAYED : 0);
    sip_error_free(e);
    sip__free(refs); /* the region names are the pending's */
    if (w.oom) {
      sip__wbuf_free(&w);
      sip__encode_infer_response(&w, sip_response_request_id(resp), SIP_RESOURCE_EXHAUSTED,
                                 "out of memory encoding the response", 0, 0, 0, NULL, 0);
    }
  }
  sip__conn_write_answer(pd->ls, pd->conn_id, &w);
  sip__trace_sent(resp, t_send); /* queued to the connection's loop */
  sip_response_free(resp);
  pending_free(pd);
}

/* Bytes of one of the connection's regions (`what` names the use). */
static sip_error_t *view_region(sip__conn_t *c, const sip__wire_shm_ref_t *ref, const char *what,
                                sip_buf_t **owner, uint8_t **data) {
  if (!c->shm)
    return sip_error_new(SIP_NOT_FOUND, "%s: no shared memory region named '%s' is registered on "
                         "this connection (register it with SHM_REGISTER first)", what,
                         ref->region);
  return sip__shm_view(c->shm, ref->region, ref->offset, ref->size, what, owner, data);
}

/* Points a request's shared memory inputs at their regions' bytes. */
static sip_error_t *view_shm_inputs(sip__conn_t *c, sip__wire_request_t *wr) {
  for (size_t i = 0; wr->input_shm && i < wr->n_inputs; i++) {
    const sip__wire_shm_ref_t *ref = &wr->input_shm[i];
    sip_tensor_t *t = wr->inputs[i];
    if (!ref->region) continue;
    char what[SIP__MAX_NAME + 16];
    snprintf(what, sizeof what, "input '%s'", t->name);
    sip_buf_t *owner;
    uint8_t *data;
    sip_error_t *e = view_region(c, ref, what, &owner, &data);
    if (e) return e;
    if (t->dtype == SIP_DTYPE_STRING) {
      /* The length prefixes are checked once and then trusted: take a
       * private copy, so that the client cannot change them in between. */
      sip_buf_t *copy = sip_buf_new(t->nbytes);
      if (copy && t->nbytes) memcpy(sip_buf_data(copy), data, t->nbytes);
      sip_buf_unref(owner);
      if (!copy) return SIP__OOM();
      owner = copy;
      data = sip_buf_data(copy);
    }
    t->data = data;
    t->owner = owner;
    size_t align = t->dtype == SIP_DTYPE_STRING ? 1 : sip_dtype_size(t->dtype);
    if (align > 1 && (uintptr_t)data % align)
      return sip_error_new(SIP_INVALID_ARGUMENT, "%s: offset %" PRIu64 " in shared memory region "
                           "'%s' is not aligned to its %zu-byte elements", what, ref->offset,
                           ref->region, align);
    if (t->dtype == SIP_DTYPE_STRING && (e = sip_tensor_validate(t))) return e;
  }
  return NULL;
}

/* Views the requested outputs' destinations (flag SIP__REQ_OUTPUT_SHM). */
static sip_error_t *view_shm_outputs(sip__conn_t *c, const sip__wire_request_t *wr, sip__pending_t *pd) {
  if (!wr->output_shm) return NULL;
  pd->dst = sip__calloc(wr->n_outputs, sizeof *pd->dst);
  if (!pd->dst) return SIP__OOM();
  for (size_t i = 0; i < wr->n_outputs; i++) {
    const sip__wire_shm_ref_t *ref = &wr->output_shm[i];
    if (!ref->region) continue;
    sip__out_dst_t *d = &pd->dst[pd->n_dst];
    char what[SIP__MAX_NAME + 16];
    snprintf(what, sizeof what, "output '%s'", wr->outputs[i]);
    sip_error_t *e = view_region(c, ref, what, &d->owner, &d->data);
    if (e) return e;
    pd->n_dst++;
    d->offset = ref->offset;
    d->size = ref->size;
    if (!(d->output = sip__strdup(wr->outputs[i])) || !(d->region = sip__strdup(ref->region)))
      return SIP__OOM();
  }
  return NULL;
}

/* A request's parameters (a JSON object), each through the engine's
 * parameter table (sip_request_set_parameter); an unknown key is refused.
 * A bad one is the request's error, not the connection's. */
sip_error_t *sip__apply_request_parameters(sip_request_t *r, const char *text) {
  json_error_t je;
  json_t *root = json_loads(text, 0, &je);
  sip_error_t *e = NULL;
  if (!json_is_object(root)) {
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "request parameters are not a JSON object (%s); expected "
                      "{\"pipeline_config\": {...}, \"sequence_id\": ..., \"idempotency_key\": \"...\"}",
                      root ? "another JSON value" : je.text);
  } else {
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
      sip_param_value_t pv = {.type = SIP_PARAM_JSON, .json = v};
      if ((e = sip_request_set_parameter(r, key, &pv))) break;
    }
    if (e && sip_error_code(e) == SIP_NOT_FOUND) { /* the native protocol knows every key */
      sip_error_t *u = sip_error_new(SIP_INVALID_ARGUMENT, "%s", sip_error_message(e));
      sip_error_free(e);
      e = u;
    }
  }
  json_decref(root);
  return e;
}

static void handle_infer(sip__listener_set_t *ls, sip__conn_t *c) {
  uint64_t t0 = sip__now_ns();
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
    sip__note_rejected_frame(ls, payload, len, e);
    sip__conn_error(ls, c, c->h.request_id, e);
    return;
  }
  sip_request_t *r = sip_request_new(wr.pool);
  sip__pending_t *pd = sip__calloc(1, sizeof *pd);
  if (!r || !pd) {
    sip_request_free(r);
    sip__free(pd);
    sip__wire_request_clear(&wr);
    sip__conn_error(ls, c, c->h.request_id, SIP__OOM());
    return;
  }
  /* Shared memory problems are the request's errors, not the connection's. */
  sip_error_t *shm_e = view_shm_inputs(c, &wr);
  if (!shm_e) shm_e = view_shm_outputs(c, &wr, pd);
  sip_request_set_id(r, c->h.request_id);
  sip_request_set_cancel_token(r, c->cancel);
  sip_request_set_timeout_ms(r, wr.timeout_ms);
  /* The codec checked the tensors; a new request has no inputs or outputs
   * yet, so both adopt. */
  sip_error_free(sip_request_adopt_inputs(r, wr.inputs, wr.n_inputs));
  sip_error_free(sip_request_adopt_outputs(r, wr.outputs, wr.n_outputs));
  e = shm_e ? shm_e : sip_request_set_priority(r, wr.priority);
  sip__wire_shm_refs_free(wr.input_shm, wr.n_inputs);
  sip__wire_shm_refs_free(wr.output_shm, wr.n_outputs);
  wr.input_shm = wr.output_shm = NULL;
  wr.inputs = NULL;
  wr.n_inputs = 0;
  wr.outputs = NULL;
  wr.n_outputs = 0;
  if (!e && wr.parameters) e = sip__apply_request_parameters(r, wr.parameters);
  sip__trace_received(r, t0);
  /* The backend may write straight into the destinations (no copy then). */
  for (size_t i = 0; !e && !batch && i < pd->n_dst; i++)
    e = sip_request_set_output_buffer(r, pd->dst[i].output, pd->dst[i].data, pd->dst[i].size,
                                      pd->dst[i].owner);
  sip__wire_request_clear(&wr);
  pd->ls = ls;
  pd->conn_id = conn_id(c);
  uint64_t rid = c->h.request_id;
  if (e) sip_request_free(r);
  else e = batch ? sip_server_infer_batch(ls->srv, r, (int)(max_batch > INT32_MAX ? INT32_MAX : max_batch),
                                     padding, on_done, pd)
            : sip_server_infer_async(ls->srv, r, on_done, pd);
  if (e) {
    if (sip_error_code(e) == SIP_NOT_FOUND) /* no such model (or version) */
      sip__server_note_rejected(ls->srv, SIP__PROTOCOL_NATIVE, NULL, 0, e);
    pending_free(pd);
    sip__wbuf_t w = {0};
    sip__encode_infer_response(&w, rid, sip_error_code(e), sip_error_message(e), 0, 0, 0, NULL,
                               0);
    sip_error_free(e);
    sip__conn_queue_wbuf(ls, c, &w);
  }
}

/* ---- INFO_REQUEST ---- */

static void handle_info(sip__listener_set_t *ls, sip__conn_t *c) {
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

static void handle_repo(sip__listener_set_t *ls, sip__conn_t *c) {
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
  /* A load may carry a Triton model config: a JSON object or its text. */
  json_t *jc = req ? json_object_get(req, "config") : NULL;
  char *config = NULL;
  if (!e && jc && (strcmp(action, "load") || !(json_is_object(jc) || json_is_string(jc))))
    e = sip_error_new(SIP_INVALID_ARGUMENT, "REPO_REQUEST %s: \"config\" is only for load, as "
                      "a Triton model config (a JSON object or its text)", action);
  else if (!e && jc && !(config = json_is_string(jc) ? sip__strdup(json_string_value(jc))
                                                     : json_dumps(jc, JSON_COMPACT)))
    e = SIP__OOM();
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
      e = rp->unload
              ? sip_server_unload_model_async(ls->srv, model, on_repo_done, rp)
              : sip_server_load_model_config_async(ls->srv, model, config, on_repo_done, rp);
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
  sip__free(config);
  json_decref(req);
  if (w.data || w.oom) sip__conn_queue_wbuf(ls, c, &w);
}

/* ---- operator requests (ADMIN_REQUEST, answered by INFO_RESPONSE) ---- */

/* Most answers come at once, on this thread (queued on the connection
 * here); a profile's comes seconds later from another thread (written to
 * the connection if it is still there). `state` tells which happened. */
typedef struct admin_pending {
  sip__listener_set_t *ls;
  uint64_t conn_id, request_id;
  atomic_int state; /* 0: in the call, 1: the call returned, 2: answered in the call */
  sip_error_t *e;
  char *answer;
} admin_pending_t;

static void encode_admin_answer(sip__wbuf_t *w, uint64_t rid, sip_error_t *e, char *answer) {
  if (e) encode_repo_answer(w, rid, e, NULL);
  else sip__encode_info_response(w, rid, SIP_OK, answer, strlen(answer));
  sip_error_free(e);
  sip_free(answer);
}

static void on_admin_done(sip_error_t *e, char *answer, void *user) {
  admin_pending_t *ap = user;
  ap->e = e;
  ap->answer = answer;
  int was = 0;
  if (atomic_compare_exchange_strong(&ap->state, &was, 2)) return; /* the caller answers */
  sip__wbuf_t w = {0};
  encode_admin_answer(&w, ap->request_id, e, answer);
  sip__conn_write_answer(ap->ls, ap->conn_id, &w);
  sip__free(ap);
}

static void handle_admin(sip__listener_set_t *ls, sip__conn_t *c) {
  sip__wbuf_t w = {0};
  admin_pending_t *ap = sip__calloc(1, sizeof *ap);
  if (!ap) {
    encode_repo_answer(&w, c->h.request_id, SIP__OOM(), NULL);
    sip__conn_queue_wbuf(ls, c, &w);
    return;
  }
  ap->ls = ls;
  ap->conn_id = conn_id(c);
  ap->request_id = c->h.request_id;
  sip_error_t *e = sip_server_admin_async(ls->srv, (const char *)sip_buf_data(c->payload),
                                          c->h.length, on_admin_done, ap);
  int was = 0;
  if (e) { /* refused before it started */
    encode_repo_answer(&w, c->h.request_id, e, NULL);
    sip_error_free(e);
    sip__free(ap);
  } else if (!atomic_compare_exchange_strong(&ap->state, &was, 1)) { /* answered in the call */
    encode_admin_answer(&w, c->h.request_id, ap->e, ap->answer);
    sip__free(ap);
  } else {
    return; /* on_admin_done answers later */
  }
  sip__conn_queue_wbuf(ls, c, &w);
}

/* ---- shared memory (SHM_REGISTER, SHM_UNREGISTER, SHM_STATUS) ---- */

/* Why `fd` cannot back a region, or NULL: it must be a memfd, open
 * read-write, sealed against shrinking (so that the client cannot truncate
 * it under a request, which would fault the server) and not against
 * writing (outputs are written into it). Closes fd on error. */
static sip_error_t *check_region_fd(const char *name, int fd) {
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  int fl = fcntl(fd, F_GETFL);
  const char *why = NULL;
  if (fstat(fd, &st) != 0)
    why = "not one that can be examined (fstat failed)";
  else if (!S_ISREG(st.st_mode))
    why = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a pipe"
          : S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file";
  else if (seals < 0)
    why = "a file that is not a memfd (memfd_create with MFD_ALLOW_SEALING)";
  else if (fl < 0 || (fl & O_ACCMODE) != O_RDWR)
    why = "not open read-write";
  else if (!(seals & F_SEAL_SHRINK) && (seals & F_SEAL_SEAL))
    why = "a file that cannot be sealed against shrinking (not a memfd, or one created without "
          "MFD_ALLOW_SEALING)";
  else if (!(seals & F_SEAL_SHRINK))
    why = "a memfd without F_SEAL_SHRINK (seal it so that it cannot be truncated under a "
          "request)";
  else if (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE))
    why = "a memfd sealed against writing (outputs are written into regions)";
  if (!why) return NULL;
  close(fd);
  return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s': the descriptor passed "
                       "is %s; expected a read-write memfd sealed with F_SEAL_SHRINK", name, why);
}

static void handle_shm_register(sip__listener_set_t *ls, sip__conn_t *c) {
  char *name;
  uint64_t offset, size;
  sip_error_t *e = sip__decode_shm_register(sip_buf_data(c->payload), c->h.length, &name,
                                            &offset, &size);
  if (e) {
    sip__conn_error(ls, c, c->h.request_id, e);
    return;
  }
  if (c->is_tcp)
    e = sip_error_new(SIP_FAILED_PRECONDITION, "shared memory region '%s': regions are passed "
                      "as file descriptors, which only a unix socket connection carries", name);
  else if (c->n_fds != 1 || c->fds_dropped)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s': SHM_REGISTER carried %s "
                      "file descriptors; expected exactly one (a memfd, as SCM_RIGHTS control "
                      "data sent with the frame)", name,
                      c->fds_dropped ? "too many" : c->n_fds ? "several" : "no");
  else if (!c->shm && !(c->shm = sip__shm_set_new(SIP__CONN_MAX_REGIONS)))
    e = SIP__OOM();
  if (!e) {
    int fd = c->fds[0];
    c->n_fds = 0; /* taken: closed by the checks or by the region */
    e = check_region_fd(name, fd);
    if (!e) e = sip__shm_register_fd(c->shm, name, fd, "memfd", offset, size);
  }
  sip__wbuf_t w = {0};
  encode_repo_answer(&w, c->h.request_id, e,
                     e ? NULL
                       : json_pack("{s:s,s:I,s:I}", "name", name, "offset", (json_int_t)offset,
                                   "byte_size", (json_int_t)size));
  sip_error_free(e);
  sip__free(name);
  sip__conn_queue_wbuf(ls, c, &w);
}

static void handle_shm_name(sip__listener_set_t *ls, sip__conn_t *c) {
  char *name;
  sip_error_t *e = sip__decode_shm_name(sip_buf_data(c->payload), c->h.length, c->h.type, &name);
  if (e) {
    sip__conn_error(ls, c, c->h.request_id, e);
    return;
  }
  json_t *ok = NULL;
  if (c->h.type == SIP__MSG_SHM_UNREGISTER) {
    if (c->shm) sip__shm_unregister(c->shm, name);
    ok = json_pack("{s:s}", "unregistered", name);
  } else {
    sip__shm_info_t *v = NULL;
    size_t n = 0;
    if (c->shm)
      e = sip__shm_status(c->shm, name, &v, &n);
    else if (*name)
      e = sip_error_new(SIP_NOT_FOUND, "no shared memory region named '%s' is registered on "
                        "this connection", name);
    json_t *arr = e ? NULL : json_array();
    for (size_t i = 0; arr && i < n; i++)
      json_array_append_new(arr, json_pack("{s:s,s:I,s:I}", "name", v[i].name, "offset",
                                           (json_int_t)v[i].offset, "byte_size",
                                           (json_int_t)v[i].byte_size));
    sip__shm_info_free(v, n);
    if (arr) ok = json_pack("{s:o}", "regions", arr);
  }
  sip__wbuf_t w = {0};
  encode_repo_answer(&w, c->h.request_id, e, e ? NULL : ok);
  sip_error_free(e);
  sip__free(name);
  sip__conn_queue_wbuf(ls, c, &w);
}

/* ---- SUBSCRIBE: the connection becomes an event stream ---- */

/* An EVENT frame for the stream's thread (sip_event_encode_fn). */
static void *encode_event_frame(const sip_event_t *ev, uint64_t dropped, size_t *len,
                                void *user) {
  (void)user;
  char *json = sip_event_json(ev, dropped);
  if (!json) return NULL;
  sip__wbuf_t w = {0};
  sip__encode_event(&w, json, strlen(json));
  sip_free(json);
  if (w.oom) {
    sip__wbuf_free(&w);
    return NULL;
  }
  *len = w.len;
  return w.data;
}

/* The server's stream thread takes over the socket (a duplicate of it):
 * it writes the INFO_RESPONSE that accepts the subscription, then the
 * events. The loop lets the connection go, reading nothing more from it,
 * so no other answer can interleave with the stream. */
static void handle_subscribe(sip__listener_set_t *ls, sip__conn_t *c) {
  char *pool;
  uint32_t buffer;
  uint64_t rid = c->h.request_id;
  sip_error_t *e = sip__decode_subscribe(sip_buf_data(c->payload), c->h.length, &pool, &buffer);
  if (e) {
    sip__conn_error(ls, c, rid, e);
    return;
  }
  pthread_mutex_lock(&c->wmu);
  int busy = c->out.head != NULL;
  pthread_mutex_unlock(&c->wmu);
  int fd = -1;
  if (busy)
    e = sip_error_new(SIP_FAILED_PRECONDITION, "SUBSCRIBE: answers are still being sent on "
                      "this connection; subscribe on a connection of its own");
  else if ((fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0)) < 0)
    e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "SUBSCRIBE: cannot take over the connection "
                      "(out of file descriptors)");
  sip__wbuf_t w = {0};
  json_t *ok = e ? NULL : json_pack("{s:s,s:i}", "subscribed", pool, "buffer",
                                    buffer ? (int)buffer : 1024);
  if (!e && !ok) {
    close(fd);
    json_t *name = json_string(pool); /* NULL: not UTF-8 (else out of memory) */
    e = name ? SIP__OOM()
             : sip_error_new(SIP_INVALID_ARGUMENT, "SUBSCRIBE: the pool name is not valid "
                             "UTF-8; expected a pool's name or \"\" for all");
    json_decref(name);
  }
  if (!e) {
    encode_repo_answer(&w, rid, NULL, ok);
    e = sip_server_stream_events(ls->srv, fd, pool, buffer, w.data, w.len, encode_event_frame,
                                 NULL);
    sip__wbuf_free(&w);
    if (!e) atomic_store(&c->closing, 1); /* handed over: the loop closes its descriptor */
  }
  if (e) {
    encode_repo_answer(&w, rid, e, NULL);
    sip__conn_queue_wbuf(ls, c, &w);
  }
  sip_error_free(e);
  sip__free(pool);
}

void sip__handle_refused(sip__listener_set_t *ls, sip__conn_t *c, sip_error_t *e) {
  sip__wbuf_t w = {0};
  if (c->h.type == SIP__MSG_INFER_REQUEST || c->h.type == SIP__MSG_BATCH_INFER_REQUEST)
    sip__encode_infer_response(&w, c->h.request_id, sip_error_code(e), sip_error_message(e), 0, 0,
                               0, NULL, 0);
  else
    encode_repo_answer(&w, c->h.request_id, e, NULL);
  sip_error_free(e);
  sip__conn_queue_wbuf(ls, c, &w);
}

void sip__handle_frame(sip__listener_set_t *ls, sip__conn_t *c) {
  if ((c->n_fds || c->fds_dropped) && c->h.type != SIP__MSG_SHM_REGISTER) {
    sip__conn_error(ls, c, c->h.request_id,
                    sip_error_new(SIP_INVALID_ARGUMENT, "message type %u carried file "
                                  "descriptors; only SHM_REGISTER (8) takes one",
                                  c->h.type));
    return;
  }
  if (!sip__conn_authorize(ls, c)) return;
  switch (c->h.type) {
  case SIP__MSG_SHM_REGISTER:
    handle_shm_register(ls, c);
    break;
  case SIP__MSG_SHM_UNREGISTER:
  case SIP__MSG_SHM_STATUS:
    handle_shm_name(ls, c);
    break;
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
  case SIP__MSG_SUBSCRIBE:
    handle_subscribe(ls, c);
    break;
  case SIP__MSG_ADMIN_REQUEST:
    handle_admin(ls, c);
    break;
  default:
    sip__conn_error(ls, c, c->h.request_id,
                    sip_error_new(SIP_INVALID_ARGUMENT,
                                  "message type %u is sent by servers, not clients; expected "
                                  "INFER_REQUEST (1), INFO_REQUEST (3), BATCH_INFER_REQUEST (6), "
                                  "REPO_REQUEST (7), SHM_REGISTER/UNREGISTER/STATUS (8-10), SUBSCRIBE (11) "
                                  "ADMIN_REQUEST (13) or AUTH (14)",
                                  c->h.type));
  }
}
