/* sip — the HTTP front-end's one route table: method + path pattern ->
 * handler. A path no pattern matches is answered 404; a path a route
 * matches, asked with a method the route does not take, 405 with an Allow
 * header. GET routes answer HEAD too; POST routes take only POST.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"

/* The longest model name a path may carry (the config's limit for pools). */
#define MODEL_NAME_MAX 128

/* In order: the first pattern that matches is the route (so the fixed
 * /v2/models/stats comes before /v2/models/{model}). */
static const sip__http_route_t routes[] = {
    {"/v2/health/live", R_LIVE, sip__http_live, NULL},
    {"/v2/health/ready", R_READY, sip__http_ready, NULL},
    {"/v2", R_SERVER, sip__http_server_meta, NULL},
    {"/v2/", R_SERVER, sip__http_server_meta, NULL},
    {"/metrics", R_METRICS, sip__http_metrics, NULL},
    {"/v2/events", R_EVENTS, sip__http_events, NULL},
    {"/v2/status", R_STATUS, sip__http_status, NULL},
    {"/dashboard", R_DASHBOARD, sip__http_dashboard, NULL},
    {"/dashboard/", R_DASHBOARD, sip__http_dashboard, NULL},
    {"/v2/dashboard/data", R_DASH_DATA, sip__http_dashboard_data, NULL},
    {"/v2/dashboard/report", R_DASH_REPORT, sip__http_dashboard_report, NULL},
    {"/v2/models/stats", R_ALL_STATS, sip__http_all_stats, NULL},
    {"/v2/logging", R_LOGGING, sip__http_logging_get, &sip__http_logging_ops},
    {"/v2/admin", R_ADMIN, NULL, &sip__http_admin_ops},
    {"/v2/trace/setting", R_TRACE, sip__http_trace_get, &sip__http_trace_ops},
    {"/v2/cudasharedmemory/status", R_CUDA_SHM, sip__http_cudashm_status, NULL},
    {"/v2/cudasharedmemory/region/{model}/status", R_CUDA_SHM, sip__http_cudashm_status, NULL},
    {"/v2/cudasharedmemory/unregister", R_CUDA_SHM, NULL, &sip__http_cudashm_unregister_ops},
    {"/v2/cudasharedmemory/region/{model}/unregister", R_CUDA_SHM, NULL,
     &sip__http_cudashm_unregister_ops},
    {"/v2/cudasharedmemory/region/{model}/register", R_CUDA_SHM, NULL,
     &sip__http_cudashm_register_ops},
    {"/v2/systemsharedmemory/status", R_SYS_SHM, sip__http_shm_status, NULL},
    {"/v2/systemsharedmemory/region/{region}/status", R_SYS_SHM, sip__http_shm_status, NULL},
    {"/v2/systemsharedmemory/unregister", R_SYS_SHM, NULL, &sip__http_shm_unregister_ops},
    {"/v2/systemsharedmemory/region/{region}/unregister", R_SYS_SHM, NULL,
     &sip__http_shm_unregister_ops},
    {"/v2/systemsharedmemory/region/{region}/register", R_SYS_SHM, NULL,
     &sip__http_shm_register_ops},
    {"/v2/models/{model}/trace/setting", R_TRACE, sip__http_trace_get, &sip__http_trace_ops},
    {"/v2/repository/index", R_REPO_INDEX, NULL, &sip__http_repo_ops},
    {"/v2/repository/models/{path}/load", R_REPO_LOAD, NULL, &sip__http_repo_ops},
    {"/v2/repository/models/{path}/unload", R_REPO_UNLOAD, NULL, &sip__http_repo_ops},
    {"/v2/models/{model}", R_MODEL, sip__http_model_meta, NULL},
    {"/v2/models/{model}/versions/{version}", R_MODEL, sip__http_model_meta, NULL},
    {"/v2/models/{model}/ready", R_MODEL_READY, sip__http_model_ready, NULL},
    {"/v2/models/{model}/versions/{version}/ready", R_MODEL_READY, sip__http_model_ready, NULL},
    {"/v2/models/{model}/infer", R_INFER, NULL, &sip__http_infer_ops},
    {"/v2/models/{model}/versions/{version}/infer", R_INFER, NULL, &sip__http_infer_ops},
    {"/v2/models/{model}/config", R_CONFIG, sip__http_model_config, NULL},
    {"/v2/models/{model}/versions/{version}/config", R_CONFIG, sip__http_model_config, NULL},
    {"/v2/models/{model}/stats", R_STATS, sip__http_model_stats, NULL},
    {"/v2/models/{model}/versions/{version}/stats", R_STATS, sip__http_model_stats, NULL},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

/* A placeholder's text in the url being matched. */
typedef struct span {
  const char *p;
  size_t n;
} span_t;

static int is_placeholder(const char *pat, size_t n, const char *name) {
  return n == strlen(name) && !memcmp(pat, name, n);
}

/* 1 when `url` matches `pat`; *model and *version are the placeholders'
 * text ({path} and {region} fill *model). Names as the config allows them
 * (pool names; version directory names and region names likewise):
 * anything else cannot exist, and must not reach the logs. */
static int match(const char *pat, const char *url, span_t *model, span_t *version) {
  while (*pat) {
    if (*pat != '{') {
      if (*url != *pat) return 0;
      pat++, url++;
      continue;
    }
    const char *name = pat + 1, *close = strchr(name, '}');
    size_t name_n = (size_t)(close - name);
    pat = close + 1;
    if (is_placeholder(name, name_n, "path")) {
      /* Up to the path's last '/': the rest of the pattern is one '/' and a
       * literal, matched below. */
      size_t rest = strlen(pat), len = strlen(url);
      if (len <= rest || strcmp(url + len - rest, pat) || !strchr(pat, '/')) return 0;
      *model = (span_t){url, len - rest};
      url += len - rest;
      continue;
    }
    size_t len = strcspn(url, "/");
    if (!len) return 0;
    for (size_t i = 0; i < len; i++)
      if (!sip__name_char(url[i])) return 0;
    if (is_placeholder(name, name_n, "model") || is_placeholder(name, name_n, "region")) {
      if (len > (is_placeholder(name, name_n, "model") ? MODEL_NAME_MAX : SIP__SHM_MAX_NAME))
        return 0;
      *model = (span_t){url, len};
    } else {
      *version = (span_t){url, len};
    }
    url += len;
  }
  return *url == '\0';
}

const sip__http_route_t *sip__http_route_match(const char *url, char **model, char **version) {
  for (size_t i = 0; i < N_ROUTES; i++) {
    span_t m = {NULL, 0}, v = {NULL, 0};
    if (!match(routes[i].pattern, url, &m, &v)) continue;
    if (m.p && !(*model = sip__strndup(m.p, m.n))) return NULL;
    if (v.p && !(*version = sip__strndup(v.p, v.n))) return NULL;
    return &routes[i];
  }
  return NULL;
}

unsigned sip__http_route_refusal(const sip__http_route_t *r, const char *url, const char *method,
                                 char *msg, size_t msg_n, const char **allow) {
  if (!r) {
    snprintf(msg, msg_n, "no such endpoint: %s %.200s", method, url);
    return 404;
  }
  int is_get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
  int is_post = !strcmp(method, MHD_HTTP_METHOD_POST);
  if ((r->get && is_get) || (r->post && is_post)) return 0;
  *allow = r->get && r->post ? "GET, HEAD, POST" : r->post ? "POST" : "GET, HEAD";
  snprintf(msg, msg_n, "%s is not allowed on %.200s; use %s", method, url,
           r->get && r->post ? "GET or POST" : r->post ? "POST" : "GET");
  return 405;
}

enum MHD_Result sip__http_answer(sip__hreq_t *q, const char *url, const char *method) {
  struct MHD_Connection *c = q->conn;
  char msg[300];
  const char *allow = NULL;
  unsigned status = sip__http_route_refusal(q->route, url, method, msg, sizeof msg, &allow);
  if (status == 404) return sip__http_send_error_msg(c, 404, msg);
  if (status == 405) {
    size_t len;
    char *body = sip__ks_error_json(msg, &len);
    if (!body) return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer_with_free_callback(len, body, sip__free);
    if (!r) {
      sip__free(body);
      return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    return sip__http_queue(c, 405, r, "application/json");
  }
  return q->route->get(q);
}
