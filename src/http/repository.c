/* sip — the model repository extension (Triton's): POST
 * /v2/repository/index lists the repository; .../models/{m}/load and
 * .../unload queue the work on the loader thread with the connection
 * suspended, and answer once it is done.
 */
#include <jansson.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "server/introspect.h"

/* A repository request's (small JSON) body. */
static enum MHD_Result repo_body(sip__hreq_t *q, const char *data, size_t n) {
  return sip__http_small_body(q, data, n, "repository request");
}

/* A load or unload finished (the loader thread): resume the connection,
 * whose thread answers. */
static void on_repo_done(sip_error_t *e, void *user) {
  sip__hreq_t *q = user;
  q->err = e;
  MHD_resume_connection(q->conn);
}

static enum MHD_Result repo_start(sip__hreq_t *q) {
  struct MHD_Connection *c = q->conn;
  json_error_t je;
  json_t *body = q->len ? json_loadb((const char *)q->buf, q->len, JSON_REJECT_DUPLICATES, &je)
                        : json_object();
  if (!body || !json_is_object(body)) {
    json_decref(body);
    return sip__http_send_error(c, sip_error_new(SIP_INVALID_ARGUMENT,
                                                 "repository request body is not a JSON object; "
                                                 "expected {} or {\"ready\": true} (index)"));
  }
  if (q->kind == R_REPO_INDEX) {
    /* Triton's format: a JSON array of {name, version, state, reason}. */
    char *txt = sip_server_repository_index(q->h->s, json_is_true(json_object_get(body, "ready")));
    json_decref(body);
    json_t *root = txt ? json_loads(txt, 0, NULL) : NULL;
    sip_free(txt);
    json_t *models = json_incref(json_object_get(root, "models"));
    json_decref(root);
    if (!models) return sip__http_send_error_msg(c, 500, "out of memory");
    return sip__http_send_json(c, 200, models);
  }
  json_t *params = json_object_get(body, "parameters");
  sip_error_t *pe = NULL;
  char *config = NULL;
  if (params && !json_is_object(params)) {
    pe = sip_error_new(SIP_INVALID_ARGUMENT, "\"parameters\" is not a JSON object; expected "
                       "an object of request parameters");
  } else {
    /* Triton's parameters: unload_dependents (its client sends it on every
     * unload), a load's config; checked by the server for every front-end. */
    int load = q->kind == R_REPO_LOAD;
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
      pe = sip__repo_parameter_check(load, k, load ? json_is_string(v) : json_is_boolean(v),
                                     "a boolean", "a string");
      if (!pe && load && !(config = sip__strdup(json_string_value(v)))) pe = SIP__OOM();
      if (pe) break;
    }
  }
  json_decref(body);
  if (pe) {
    sip__free(config);
    return sip__http_send_error(c, pe);
  }
  q->started = 1;
  /* Suspend before queuing, so the completion can resume at once. */
  MHD_suspend_connection(c);
  sip_error_t *e =
      q->kind == R_REPO_LOAD
          ? sip_server_load_model_config_async(q->h->s, q->model, config, on_repo_done, q)
          : sip_server_unload_model_async(q->h->s, q->model, on_repo_done, q);
  sip__free(config);
  if (e) {
    q->err = e;
    MHD_resume_connection(c);
  }
  return MHD_YES;
}

/* Called again after the resume. Triton answers a load or unload 200 with
 * an empty body; {} keeps every answer JSON. */
static enum MHD_Result repo_answer(sip__hreq_t *q) {
  if (q->err) {
    sip_error_t *e = q->err;
    q->err = NULL;
    return sip__http_send_error(q->conn, e);
  }
  return sip__http_send_json(q->conn, 200, json_object());
}

const sip__http_post_ops_t sip__http_repo_ops = {
    .begin = NULL,
    .body = repo_body,
    .start = repo_start,
    .answer = repo_answer,
};
