/* sip — Triton's CUDA shared memory extension as a server without GPUs
 * answers it: no region is ever registered, so status lists none and
 * unregistering is a no-op that succeeds; registering is refused. Triton's
 * shared-memory examples call status and unregister before they start.
 */
#include <jansson.h>

#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"

enum MHD_Result sip__http_cudashm_status(sip__hreq_t *q) {
  if (q->model)
    return sip__http_send_error(q->conn,
                                sip_error_new(SIP_NOT_FOUND, "no CUDA shared memory region '%s' is "
                                              "registered: this server has no GPUs", q->model));
  return sip__http_send_json(q->conn, 200, json_array());
}

static enum MHD_Result small_body(sip__hreq_t *q, const char *data, size_t n) {
  return sip__http_small_body(q, data, n, "CUDA shared memory request");
}

static enum MHD_Result unregister_start(sip__hreq_t *q) {
  return sip__http_send_json(q->conn, 200, json_object());
}

static enum MHD_Result register_start(sip__hreq_t *q) {
  return sip__http_send_error(q->conn,
                              sip_error_new(SIP_INVALID_ARGUMENT, "cannot register CUDA shared "
                                            "memory region '%s': this server has no GPUs; "
                                            "expected system shared memory instead", q->model));
}

const sip__http_post_ops_t sip__http_cudashm_unregister_ops = {.body = small_body,
                                                          .start = unregister_start};
const sip__http_post_ops_t sip__http_cudashm_register_ops = {.body = small_body,
                                                        .start = register_start};
