/* sip — responses: the one constructor every completion path uses (a
 * pool's request, a client batch joined from chunks, a pipeline run), and
 * the public accessors. */
#include <string.h>

#include "core/core.h"
#include "session/engine.h"

sip_response_t *sip__response_new(sip_code_t code, char *message, uint64_t request_id,
                                  sip_tensor_t **outputs, size_t n_outputs, uint64_t queue_us,
                                  uint64_t compute_us, uint64_t total_us) {
  if (code != SIP_OK) { /* a failure carries no outputs */
    for (size_t i = 0; i < n_outputs; i++) sip_tensor_free(outputs[i]);
    sip__free(outputs);
    outputs = NULL;
    n_outputs = 0;
  }
  sip_response_t *resp = sip__calloc(1, sizeof *resp);
  if (!message) message = sip__strdup("");
  if (!resp || !message) {
    /* Out of memory: still answer, with the least that can be allocated. */
    for (size_t i = 0; i < n_outputs; i++) sip_tensor_free(outputs[i]);
    sip__free(outputs);
    outputs = NULL;
    n_outputs = 0;
    code = SIP_RESOURCE_EXHAUSTED;
    if (!message) message = sip__strdup("out of memory");
    if (!resp || !message) {
      sip__free(resp);
      sip__free(message);
      return NULL;
    }
  }
  resp->code = code;
  resp->message = message;
  resp->request_id = request_id;
  resp->outputs = outputs;
  resp->n_outputs = n_outputs;
  resp->queue_us = queue_us;
  resp->compute_us = compute_us;
  resp->total_us = total_us;
  return resp;
}

void sip__response_note_failover(sip_response_t *resp, uint32_t retries, const char *served_by) {
  resp->retries = retries;
  resp->served_by = served_by ? sip__strdup(served_by) : NULL;
  /* The native protocol carries it in the message of a success. */
  if (resp->code == SIP_OK && !resp->message[0]) {
    /* Session ids are pool names (A-Z a-z 0-9 _ . -), ':', '/' and digits:
     * nothing to escape. */
    char *m = sip__asprintf("{\"failover\":{\"retries\":%u,\"served_by\":\"%s\"}}", retries,
                            served_by ? served_by : "");
    if (m) sip__free(resp->message), resp->message = m;
  }
}

uint32_t sip_response_retries(const sip_response_t *r) { return r->retries; }
const char *sip_response_served_by(const sip_response_t *r) { return r->served_by; }

sip_code_t sip_response_code(const sip_response_t *r) { return r->code; }
const char *sip_response_message(const sip_response_t *r) { return r->message; }
uint64_t sip_response_request_id(const sip_response_t *r) { return r->request_id; }
size_t sip_response_output_count(const sip_response_t *r) { return r->n_outputs; }
const sip_tensor_t *sip_response_output(const sip_response_t *r, size_t i) {
  return i < r->n_outputs ? r->outputs[i] : NULL;
}
const sip_tensor_t *const *sip_response_outputs(const sip_response_t *resp, size_t *n) {
  *n = resp->n_outputs;
  return (const sip_tensor_t *const *)resp->outputs;
}

const sip_tensor_t *sip_response_output_by_name(const sip_response_t *r, const char *name) {
  for (size_t i = 0; i < r->n_outputs; i++)
    if (strcmp(r->outputs[i]->name, name) == 0) return r->outputs[i];
  return NULL;
}
void sip_response_timings(const sip_response_t *r, uint64_t *q, uint64_t *c, uint64_t *t) {
  if (q) *q = r->queue_us;
  if (c) *c = r->compute_us;
  if (t) *t = r->total_us;
}
sip_tensor_t **sip_response_take_outputs(sip_response_t *r, size_t *n) {
  sip_tensor_t **o = r->outputs;
  *n = r->n_outputs;
  r->outputs = NULL;
  r->n_outputs = 0;
  return o;
}
void sip_response_free(sip_response_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_outputs; i++) sip_tensor_free(r->outputs[i]);
  sip__free(r->outputs);
  sip__free(r->message);
  sip__free(r->served_by);
  sip__trace_unref(r->trace);
  sip__free(r);
}

int sip_response_replayed(const sip_response_t *resp) { return resp->replayed; }
int sip_response_cached(const sip_response_t *resp) { return resp->cached; }
