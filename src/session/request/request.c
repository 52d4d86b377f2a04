/* sip — requests: the public sip_request_* constructor, setters and free.
 * The request type itself is in session/request/request.h; the engine fills its
 * scheduling fields when it is submitted. */
#include <string.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/sequence.h"

sip_request_t *sip_request_new(const char *pool) {
  sip_request_t *r = sip__calloc(1, sizeof *r);
  if (!r) return NULL;
  r->pool = sip__strdup(pool ? pool : "");
  if (!r->pool) {
    sip__free(r);
    return NULL;
  }
  return r;
}

void sip_request_free(sip_request_t *r) {
  if (!r) return;
  sip__free(r->pool);
  sip__free(r->version);
  sip__free(r->stage_timeout_ms);
  sip__free(r->early_exit);
  sip__free(r->seq_sid);
  sip__free(r->idem_key);
  sip__free(r->client_id);
  sip__free(r->tracestate);
  sip__trace_unref(r->trace);
  sip_cancel_token_free(r->cancel);
  for (size_t i = 0; i < r->n_inputs; i++) sip_tensor_free(r->inputs[i]);
  sip__free(r->inputs);
  for (size_t i = 0; i < r->n_outputs; i++) sip__free(r->outputs[i]);
  sip__free(r->outputs);
  for (size_t i = 0; i < r->n_dests; i++) {
    sip__free(r->dest_names[i]);
    sip_buf_unref(r->dests[i].owner);
  }
  sip__free(r->dest_names);
  sip__free(r->dests);
  sip__free(r);
}

sip_error_t *sip_request_set_output_buffer(sip_request_t *r, const char *name, void *data,
                                           size_t size, sip_buf_t *owner) {
  if (!name || !data)
    return sip_error_new(SIP_INVALID_ARGUMENT, "output buffer: %s is NULL",
                         name ? "the memory" : "the output name");
  for (size_t i = 0; i < r->n_dests; i++)
    if (!strcmp(r->dest_names[i], name))
      return sip_error_new(SIP_INVALID_ARGUMENT, "output '%s' already has a buffer", name);
  char **names = sip__realloc(r->dest_names, (r->n_dests + 1) * sizeof *names);
  if (!names) return SIP__OOM();
  r->dest_names = names;
  sip_out_dest_t *d = sip__realloc(r->dests, (r->n_dests + 1) * sizeof *d);
  if (!d) return SIP__OOM();
  r->dests = d;
  if (!(names[r->n_dests] = sip__strdup(name))) return SIP__OOM();
  d[r->n_dests] = (sip_out_dest_t){.data = data, .size = size,
                                   .owner = owner ? sip_buf_ref(owner) : NULL};
  r->n_dests++;
  return NULL;
}

void sip_request_set_id(sip_request_t *r, uint64_t id) { r->id = id; }

/* Replaces *slot with a copy of v (NULL or "" clears it). */
static sip_error_t *set_text(char **slot, const char *v, size_t max, const char *what) {
  char *c = NULL;
  if (v && strlen(v) > max)
    return sip_error_new(SIP_INVALID_ARGUMENT, "%s of %zu bytes; expected at most %zu", what,
                         strlen(v), max);
  if (v && *v && !(c = sip__strdup(v))) return SIP__OOM();
  sip__free(*slot);
  *slot = c;
  return NULL;
}

sip_error_t *sip_request_set_idempotency_key(sip_request_t *r, const char *key) {
  return set_text(&r->idem_key, key, 1024, "idempotency key");
}

sip_error_t *sip_request_set_client_id(sip_request_t *r, const char *id) {
  return set_text(&r->client_id, id, 65536, "request id");
}

sip_error_t *sip_request_set_version(sip_request_t *r, const char *version) {
  char *v = NULL;
  if (version && !(v = sip__strdup(version))) return SIP__OOM();
  sip__free(r->version);
  r->version = v;
  return NULL;
}
void sip_request_set_timeout_ms(sip_request_t *r, uint32_t ms) { r->timeout_ms = ms; }
void sip_request_set_batch_wait_ms(sip_request_t *r, uint32_t ms) { r->batch_wait_ms = ms; }

sip_error_t *sip_request_set_pipeline_config(sip_request_t *r, const char *json) {
  sip__free(r->stage_timeout_ms);
  sip__free(r->early_exit);
  r->stage_timeout_ms = NULL;
  r->n_stage_timeouts = 0;
  r->has_stage_timeouts = 0;
  r->early_exit = NULL;
  if (!json) return NULL;
  sip_param_value_t v = {.type = SIP_PARAM_STRING, .s = json};
  return sip_request_set_parameter(r, "pipeline_config", &v);
}

sip_error_t *sip_request_set_priority(sip_request_t *r, int priority) {
  if (priority < 0 || priority > 3)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "priority %d; expected 0 (pool default), 1 (high), 2 (medium) or 3 (low)",
                         priority);
  r->priority = priority;
  return NULL;
}

sip_error_t *sip_request_add_input(sip_request_t *r, sip_tensor_t *t) {
  if (!t) return sip_error_new(SIP_INVALID_ARGUMENT, "input tensor is NULL");
  sip_error_t *e = sip_tensor_validate(t);
  for (size_t i = 0; !e && i < r->n_inputs; i++)
    if (strcmp(r->inputs[i]->name, t->name) == 0)
      e = sip_error_new(SIP_INVALID_ARGUMENT, "input '%s' given twice", t->name);
  if (!e) {
    sip_tensor_t **v = sip__reallocarray(r->inputs, r->n_inputs + 1, sizeof *v);
    if (!v)
      e = SIP__OOM();
    else {
      r->inputs = v;
      v[r->n_inputs++] = t;
      return NULL;
    }
  }
  sip_tensor_free(t);
  return e;
}

sip_error_t *sip_request_adopt_inputs(sip_request_t *r, sip_tensor_t **inputs, size_t n) {
  if (r->n_inputs)
    return sip_error_new(SIP_INVALID_ARGUMENT, "the request has inputs already; adopt only into "
                         "a request without any");
  r->inputs = inputs;
  r->n_inputs = n;
  return NULL;
}

sip_error_t *sip_request_adopt_outputs(sip_request_t *r, char **names, size_t n) {
  if (r->n_outputs)
    return sip_error_new(SIP_INVALID_ARGUMENT, "the request names outputs already; adopt only "
                         "into a request without any");
  r->outputs = names;
  r->n_outputs = n;
  return NULL;
}

sip_error_t *sip_request_add_output(sip_request_t *r, const char *name) {
  char *n = sip__strdup(name ? name : "");
  char **v = n ? sip__reallocarray(r->outputs, r->n_outputs + 1, sizeof *v) : NULL;
  if (!v) {
    sip__free(n);
    return SIP__OOM();
  }
  r->outputs = v;
  v[r->n_outputs++] = n;
  return NULL;
}

void sip__request_traceparent(sip_request_t *r, const char *traceparent) {
  sip__trace_ctx_t c;
  r->has_trace_ctx = traceparent && sip__traceparent_parse(traceparent, strlen(traceparent), &c);
  if (r->has_trace_ctx) r->trace_ctx = c;
}

sip_error_t *sip__request_tracestate(sip_request_t *r, const char *tracestate) {
  sip__free(r->tracestate);
  r->tracestate = NULL;
  if (tracestate && sip__tracestate_ok(tracestate, strlen(tracestate)) &&
      !(r->tracestate = sip__strdup(tracestate)))
    return SIP__OOM();
  return NULL;
}

sip_error_t *sip_request_set_trace_context(sip_request_t *r, const char *traceparent,
                                           const char *tracestate) {
  sip__request_traceparent(r, traceparent);
  /* Without a valid traceparent its tracestate goes too (W3C). */
  return sip__request_tracestate(r, r->has_trace_ctx ? tracestate : NULL);
}

sip_error_t *sip__request_sequence_id(sip_request_t *r, uint64_t id, const char *sid) {
  char *c = sid && *sid ? sip__strdup(sid) : NULL;
  if (sid && *sid && !c) return SIP__OOM();
  sip__free(r->seq_sid);
  r->seq_sid = c;
  r->seq_id = c ? 0 : id;
  r->seq_flags = c || id ? r->seq_flags | SIP__SEQF_SET : r->seq_flags & ~SIP__SEQF_SET;
  return NULL;
}

static sip_error_t *set_sequence(sip_request_t *r, uint64_t id, const char *sid, bool start,
                                 bool end) {
  sip_error_t *e = sip__request_sequence_id(r, id, sid);
  if (!e) r->seq_flags = SIP__SEQF_SET | (start ? SIP__SEQF_START : 0) | (end ? SIP__SEQF_END : 0);
  return e;
}

sip_error_t *sip_request_set_sequence(sip_request_t *r, uint64_t id, bool start, bool end) {
  if (!id)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "sequence id 0; expected a number >= 1 (0 means no sequence)");
  return set_sequence(r, id, NULL, start, end);
}

sip_error_t *sip_request_set_sequence_str(sip_request_t *r, const char *id, bool start,
                                          bool end) {
  size_t len = id ? strlen(id) : 0;
  if (!len || len > 256)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "sequence id of %zu bytes; expected a string of 1..256 bytes", len);
  return set_sequence(r, 0, id, start, end);
}
