/* sip — server-level endpoints: liveness, readiness, server metadata
 * (with the KServe extensions sip has) and /metrics (Prometheus text).
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "server/introspect.h"
#include "server/prometheus.h"

enum MHD_Result sip__http_live(hreq_t *q) {
  return sip__http_send_json(q->conn, 200, json_pack("{s:b}", "live", 1));
}

enum MHD_Result sip__http_ready(hreq_t *q) {
  sip__http_t *h = q->h;
  if (sip_server_draining(h->s))
    return sip__http_send_error_msg(q->conn, 503, "server is draining: it answers requests in "
                                                  "flight and accepts no new ones");
  json_t *r = sip__server_info(h->s, SIP_INFO_READY);
  if (!r) return sip__http_send_error_msg(q->conn, 500, "out of memory");
  char loading[512] = "";
  const char *name;
  json_t *st;
  json_object_foreach(json_object_get(r, "pools"), name, st) {
    if (json_string_value(st) && !strcmp(json_string_value(st), "LOADING"))
      snprintf(loading + strlen(loading), sizeof loading - strlen(loading), "%s'%s'",
               loading[0] ? ", " : "", name);
  }
  int ready = json_is_true(json_object_get(r, "ready")) && !loading[0];
  json_decref(r);
  if (!ready) {
    char msg[600];
    snprintf(msg, sizeof msg, "server is not ready: models still loading: %s",
             loading[0] ? loading : "(starting)");
    return sip__http_send_error_msg(q->conn, 503, msg);
  }
  return sip__http_send_json(q->conn, 200, json_pack("{s:b}", "ready", 1));
}

enum MHD_Result sip__http_server_meta(hreq_t *q) {
  json_t *v = json_pack("{s:s,s:s,s:[s,s,s,s]}", "name", "sip", "version", sip_version(),
                        "extensions", "binary_tensor_data", "classification",
                        "model_configuration", "statistics");
  if (v && q->h->cfg->model_repository)
    json_array_append_new(json_object_get(v, "extensions"), json_string("model_repository"));
  return sip__http_send_json(q->conn, 200, v);
}

enum MHD_Result sip__http_metrics(hreq_t *q) {
  char *txt = sip__prometheus_text(q->h->s);
  if (!txt) return sip__http_send_error_msg(q->conn, 500, "out of memory");
  return sip__http_send_owned(q->conn, 200, "text/plain; version=0.0.4; charset=utf-8", txt,
                              strlen(txt));
}
