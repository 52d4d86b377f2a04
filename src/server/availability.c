/* sip — operator requests on sessions (docs/availability.md): injected
 * faults, draining one session and changing a pool's size and quotas, as
 * one JSON request that the native protocol (ADMIN_REQUEST) and HTTP
 * (POST /v2/admin) both pass here. Drains and pool changes are recorded in
 * the state checkpoint (server.state_dir). */
#include <string.h>

#include "core/core.h"
#include "server/server_impl.h"

#define ADMIN_EXPECT                                                                        \
  "{\"action\": \"fault\", \"pool\": P, \"kind\": crash|hang|slow|error|none, \"count\": N | " \
  "\"rate\": R, \"delay_ms\": D, \"session\": N}, {\"action\": \"drain\"|\"resume\", "      \
  "\"pool\": P, \"session\": N}, {\"action\": \"update\", \"pool\": P, \"pool_size\": N, "     \
  "\"max_memory_mb\": M, \"max_compute_percent\": C} or {\"action\": \"profile\", \"pool\": P, "  \
  "\"seconds\": S, \"session\": N, \"trace\": true|false}"

static const char *const kinds[] = {"none", "crash", "hang", "slow", "error", NULL};

/* An optional integer member in [lo, hi]: 0 (with *v set when present). */
static sip_error_t *get_int(json_t *req, const char *key, json_int_t lo, json_int_t hi,
                            json_int_t *v) {
  json_t *j = json_object_get(req, key);
  if (!j) return NULL;
  if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi)
    return sip_error_new(SIP_INVALID_ARGUMENT, "admin request: \"%s\" must be an integer "
                         "%lld..%lld", key, (long long)lo, (long long)hi);
  *v = json_integer_value(j);
  return NULL;
}

static sip_error_t *fault(sip_server_t *s, sip__pool_t *p, json_t *req, json_t **ok) {
  if (!s->cfg->allow_fault_injection)
    return sip_error_new(SIP_PERMISSION_DENIED, "fault injection is off; expected "
                         "server.allow_fault_injection: true in the config file");
  const char *kind = json_string_value(json_object_get(req, "kind"));
  int k = 0;
  while (kind && kinds[k] && strcmp(kinds[k], kind)) k++;
  if (!kind || !kinds[k])
    return sip_error_new(SIP_INVALID_ARGUMENT, "admin request: \"kind\" must be one of crash, "
                         "hang, slow, error or none");
  json_int_t session = -1, count = 0, delay = 0;
  sip_error_t *e;
  if ((e = get_int(req, "session", 0, 255, &session)) ||
      (e = get_int(req, "count", 1, 1000000000, &count)) ||
      (e = get_int(req, "delay_ms", 0, 3600000, &delay)))
    return e;
  json_t *jr = json_object_get(req, "rate");
  double rate = jr ? json_number_value(jr) : 0;
  if (jr && (!json_is_number(jr) || rate <= 0 || rate > 1))
    return sip_error_new(SIP_INVALID_ARGUMENT, "admin request: \"rate\" must be a number in "
                         "(0, 1]");
  if (k && !count == !jr)
    return sip_error_new(SIP_INVALID_ARGUMENT, "admin request: a fault takes \"count\" (the next "
                         "N executions) or \"rate\" (a fraction of them), one of the two");
  sip__fault_t f = {.kind = k, .session = (int)session, .count = jr ? -1 : count,
                    .rate = rate, .delay_ms = delay};
  if ((e = sip__pool_set_fault(p, &f))) return e;
  *ok = json_pack("{s:b,s:s,s:s,s:I,s:I,s:f,s:I}", "ok", 1, "pool", sip__pool_name(p), "kind",
                  kinds[k], "session", session, "count", count, "rate", rate, "delay_ms", delay);
  return NULL;
}

static sip_error_t *update(sip_server_t *s, sip__pool_t *p, json_t *req, json_t **ok) {
  json_int_t size = 0, mem = -1, pct = -1;
  sip_error_t *e;
  if ((e = get_int(req, "pool_size", 1, SIP__MAX_SESSIONS, &size)) ||
      (e = get_int(req, "max_memory_mb", 0, 1048576, &mem)) ||
      (e = get_int(req, "max_compute_percent", 0, 100, &pct)))
    return e;
  if (!size && mem < 0 && pct < 0)
    return sip_error_new(SIP_INVALID_ARGUMENT, "admin request update: nothing to change; "
                         "expected \"pool_size\", \"max_memory_mb\" or \"max_compute_percent\"");
  if ((e = sip__pool_update(p, (int)size, mem, (int)pct))) return e;
  sip__repo_checkpoint_pool(s, p);
  sip__pool_info_t in;
  sip__pool_info(p, &in);
  *ok = json_pack("{s:b,s:s,s:i,s:I,s:i}", "ok", 1, "pool", in.name, "pool_size", in.pool_size,
                  "max_memory_mb", (json_int_t)in.max_memory_mb, "max_compute_percent",
                  in.max_compute_percent);
  return NULL;
}

/* sip_server_admin, with done for a profile (NULL: answered at once);
 * *later is set when done answers (a profile given done). */
static sip_error_t *admin(sip_server_t *s, const char *text, size_t len, char **answer,
                          sip_admin_done_fn done, void *user, int *later) {
  *answer = NULL;
  *later = 0;
  json_error_t je;
  json_t *req = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  const char *action = json_string_value(json_object_get(req, "action"));
  const char *pool = json_string_value(json_object_get(req, "pool"));
  sip_error_t *e = NULL;
  json_t *ok = NULL;
  sip__pool_t *p = NULL;
  if (!req)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "admin request is not JSON: %s (offset %d); "
                      "expected " ADMIN_EXPECT, je.text, je.position);
  else if (!action || !pool ||
           (strcmp(action, "fault") && strcmp(action, "drain") && strcmp(action, "resume") &&
            strcmp(action, "update") && strcmp(action, "profile")))
    e = sip_error_new(SIP_INVALID_ARGUMENT, "admin request: expected " ADMIN_EXPECT);
  else
    p = sip__registry_find(&s->eng, pool, NULL, &e);
  if (p && !strcmp(action, "fault")) {
    e = fault(s, p, req, &ok);
  } else if (p && !strcmp(action, "update")) {
    e = update(s, p, req, &ok);
  } else if (p && !strcmp(action, "profile")) {
    char *txt = NULL;
    e = sip__admin_profile(p, req, done, user, &txt);
    *later = done != NULL;
    sip__pool_unref(p);
    json_decref(req);
    if (!e && !done) *answer = txt;
    return e;
  } else if (p) {
    json_int_t session = -1;
    if (!(e = get_int(req, "session", 0, 255, &session)) && session < 0)
      e = sip_error_new(SIP_INVALID_ARGUMENT, "admin request %s: \"session\" (the session's "
                        "index) is missing", action);
    int drain = !strcmp(action, "drain");
    if (!e && !(e = sip__session_drain(p, (int)session, drain))) sip__repo_checkpoint_pool(s, p);
    if (!e)
      ok = json_pack("{s:b,s:s,s:I,s:b}", "ok", 1, "pool", sip__pool_name(p), "session", session,
                     "drained", drain);
  }
  if (p) sip__pool_unref(p);
  json_decref(req);
  if (e) return e;
  char *txt = ok ? json_dumps(ok, JSON_COMPACT) : NULL;
  json_decref(ok);
  if (!txt) return SIP__OOM();
  *answer = sip__strdup(txt);
  free(txt); /* jansson's allocation */
  return *answer ? NULL : SIP__OOM();
}

sip_error_t *sip_server_admin(sip_server_t *s, const char *text, size_t len, char **answer) {
  int later;
  return admin(s, text, len, answer, NULL, NULL, &later);
}

sip_error_t *sip_server_admin_async(sip_server_t *s, const char *text, size_t len,
                                    sip_admin_done_fn done, void *user) {
  char *answer = NULL;
  int later;
  sip_error_t *e = admin(s, text, len, &answer, done, user, &later);
  if (later) return e; /* started (done answers), or refused before: done is not called */
  done(e, answer, user);
  return NULL;
}
