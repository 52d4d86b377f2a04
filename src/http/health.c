/* sip — server-level endpoints: liveness, readiness, the status document, server metadata
 * (with the KServe extensions sip has) and /metrics (Prometheus text).
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "server/introspect.h"
#include "server/observe/prometheus.h"

enum MHD_Result sip__http_live(sip__hreq_t *q) {
  return sip__http_send_json(q->conn, 200, json_pack("{s:b}", "live", 1));
}

/* The status document the native protocol's INFO_STATUS sends (`sip
 * status`): pools with their sessions, counters and sla, the alerts. */
enum MHD_Result sip__http_status(sip__hreq_t *q) {
  json_t *doc = sip__server_info(q->h->s, SIP_INFO_STATUS);
  if (!doc) return sip__http_send_error_msg(q->conn, 500, "out of memory");
  return sip__http_send_json(q->conn, 200, doc);
}

enum MHD_Result sip__http_ready(sip__hreq_t *q) {
  sip__http_t *h = q->h;
  if (sip_server_draining(h->s))
    return sip__http_send_error_msg(q->conn, 503, "server is draining: it answers requests in "
                                                  "flight and accepts no new ones");
  if (sip__server_leaving(h->s))
    return sip__http_send_error_msg(q->conn, 503, "server is shutting down: it serves until "
                                                  "server.drain_delay_ms passes, then drains");
  /* The models still loading or (server.strict_readiness) FAILED. */
  char why[512];
  size_t bad = sip__server_unready(h->s, why, sizeof why);
  if (bad || !sip_server_ready(h->s)) {
    char msg[600];
    snprintf(msg, sizeof msg, "server is not ready: %s", bad ? why : "starting");
    return sip__http_send_error_msg(q->conn, 503, msg);
  }
  return sip__http_send_json(q->conn, 200, json_pack("{s:b}", "ready", 1));
}

enum MHD_Result sip__http_server_meta(sip__hreq_t *q) {
  json_t *v = json_pack("{s:s,s:s,s:[s,s,s,s,s,s,s]}", "name", "sip", "version", sip_version(),
                        "extensions", "binary_tensor_data", "classification",
                        "model_configuration", "statistics", "logging", "trace",
                        "system_shared_memory");
  if (v && q->h->cfg->model_repository)
    json_array_append_new(json_object_get(v, "extensions"), json_string("model_repository"));
  /* Triton's sequence extension, string ids too (docs/sequences.md). */
  if (v) {
    json_array_append_new(json_object_get(v, "extensions"), json_string("sequence"));
    json_array_append_new(json_object_get(v, "extensions"), json_string("sequence(string_id)"));
  }
  return sip__http_send_json(q->conn, 200, v);
}

enum MHD_Result sip__http_metrics(sip__hreq_t *q) {
  char *txt = sip__prometheus_text(q->h->s);
  if (!txt) return sip__http_send_error_msg(q->conn, 500, "out of memory");
  return sip__http_send_owned(q->conn, 200, "text/plain; version=0.0.4; charset=utf-8", txt,
                              strlen(txt));
}
