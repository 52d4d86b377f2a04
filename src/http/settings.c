/* sip — Triton's log and trace settings extensions over HTTP.
 *
 * GET/POST /v2/logging reads and changes sipd's log level live (logs go to
 * stderr in logfmt; errors are always logged). GET/POST /v2/trace/setting
 * and /v2/models/{m}/trace/setting read and change the server's trace
 * settings, which the gRPC front-end shares (core/settings.h).
 */
#include <jansson.h>
#include <string.h>

#include "core/core.h"
#include "core/settings.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "server/introspect.h"

/* ---- logging ------------------------------------------------------------- */

enum MHD_Result sip__http_logging_get(sip__hreq_t *q) {
  return sip__http_send_json(q->conn, 200, sip__log_settings_doc());
}

static enum MHD_Result logging_start(sip__hreq_t *q) {
  json_t *b = sip__http_body_object(q, "{" SIP__LOG_SETTING_KEYS "}");
  if (!b) return MHD_YES;
  sip_error_t *e = sip__log_settings_apply(b);
  json_decref(b);
  if (e) return sip__http_send_error(q->conn, e);
  return sip__http_send_json(q->conn, 200, sip__log_settings_doc());
}

static enum MHD_Result small_body(sip__hreq_t *q, const char *data, size_t n) {
  return sip__http_small_body(q, data, n, "settings request");
}

const sip__http_post_ops_t sip__http_logging_ops = {.body = small_body, .start = logging_start};

/* ---- POST /v2/admin: faults, session drain and resume, pool updates,
 * profiles (sip_server_admin_async; a profile answers seconds later, with
 * the connection suspended meanwhile) ---- */

static void on_admin_done(sip_error_t *e, char *answer, void *user) {
  sip__hreq_t *q = user;
  q->err = e;
  q->answer = answer;
  MHD_resume_connection(q->conn);
}

static enum MHD_Result admin_start(sip__hreq_t *q) {
  json_t *b = sip__http_body_object(q, "{\"action\": \"fault\"|\"drain\"|\"resume\"|\"update\"|"
                                       "\"profile\", \"pool\": P, ...}");
  if (!b) return MHD_YES;
  char *txt = json_dumps(b, JSON_COMPACT);
  json_decref(b);
  if (!txt) return sip__http_send_error(q->conn, SIP__OOM());
  q->started = 1;
  /* Suspended first: the answer may come at once, or from another thread. */
  MHD_suspend_connection(q->conn);
  sip_error_t *e = sip_server_admin_async(q->h->s, txt, strlen(txt), on_admin_done, q);
  free(txt); /* jansson's allocation */
  if (e) on_admin_done(e, NULL, q);
  return MHD_YES;
}

static enum MHD_Result admin_answer(sip__hreq_t *q) {
  if (q->err) {
    sip_error_t *e = q->err;
    q->err = NULL;
    return sip__http_send_error(q->conn, e);
  }
  json_t *a = q->answer ? json_loads(q->answer, 0, NULL) : NULL;
  return sip__http_send_json(q->conn, 200, a ? a : json_object());
}

const sip__http_post_ops_t sip__http_admin_ops = {
    .body = small_body, .start = admin_start, .answer = admin_answer};

/* ---- trace settings ------------------------------------------------------ */

/* A model's settings need the model (the engine's not-found answer). */
static sip_error_t *trace_model_check(sip__hreq_t *q) {
  if (!q->model) return NULL;
  return sip__server_model_check(q->h->s, q->model, NULL);
}

enum MHD_Result sip__http_trace_get(sip__hreq_t *q) {
  sip_error_t *e = trace_model_check(q);
  if (e) return sip__http_send_error(q->conn, e);
  return sip__http_send_json(q->conn, 200, sip__trace_get(sip__server_trace(q->h->s), q->model));
}

static enum MHD_Result trace_start(sip__hreq_t *q) {
  sip_error_t *e = trace_model_check(q);
  if (e) return sip__http_send_error(q->conn, e);
  json_t *b = sip__http_body_object(q, "{" SIP__TRACE_SETTING_KEYS "}");
  if (!b) return MHD_YES;
  json_t *doc = NULL;
  e = sip__trace_apply(sip__server_trace(q->h->s), q->model, b, &doc);
  json_decref(b);
  if (e) return sip__http_send_error(q->conn, e);
  return sip__http_send_json(q->conn, 200, doc);
}

const sip__http_post_ops_t sip__http_trace_ops = {.body = small_body, .start = trace_start};
