/* sip — operator profiling requests (sip profile; docs/profiling.md): one
 * session of a pool runs under its backend's profiler for a few seconds
 * (src/session/observe/profile.c), and the trace it wrote is summed up per operator
 * type and per node. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "server/server_impl.h"

typedef struct op_stat {
  const char *op;   /* the op type, or (per node) the node's event name */
  const char *type; /* per node: its op type */
  json_int_t count;
  double total_us;
  double *durs; /* for p99 */
  size_t n, cap;
} op_stat_t;

static op_stat_t *stat_of(op_stat_t **v, size_t *n, const char *op) {
  for (size_t i = 0; i < *n; i++)
    if (!strcmp((*v)[i].op, op)) return &(*v)[i];
  op_stat_t *nv = sip__reallocarray(*v, *n + 1, sizeof *nv);
  if (!nv) return NULL;
  *v = nv;
  nv[*n] = (op_stat_t){.op = op};
  return &nv[(*n)++];
}

/* Counts one execution of `us`; with keep, remembers it for the p99. */
static int add_dur(op_stat_t *st, double us, int keep) {
  st->count++;
  st->total_us += us;
  if (!keep) return 0;
  if (st->n == st->cap) {
    size_t cap = st->cap ? st->cap * 2 : 16;
    double *nd = sip__reallocarray(st->durs, cap, sizeof *nd);
    if (!nd) return -1;
    st->durs = nd;
    st->cap = cap;
  }
  st->durs[st->n++] = us;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int by_total(const void *a, const void *b) {
  double x = ((const op_stat_t *)a)->total_us, y = ((const op_stat_t *)b)->total_us;
  return x > y ? -1 : x < y;
}

static double p99(op_stat_t *st) {
  if (!st->n) return 0;
  qsort(st->durs, st->n, sizeof *st->durs, cmp_double);
  size_t k = (size_t)ceil(0.99 * (double)st->n);
  return st->durs[k ? k - 1 : 0];
}

static void stats_free(op_stat_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) sip__free(v[i].durs);
  sip__free(v);
}

/* The answer for a trace (the backend profiler's Chrome trace, profile_end): every
 * "Node" event named "<node>_kernel_time" is one execution of that node's
 * kernel; "model_run" events are executions of the model. */
sip_error_t *sip__profile_summary(const char *trace_text, const char *pool, int session,
                                  double seconds, int with_trace, json_t **out) {
  *out = NULL;
  json_error_t je;
  json_t *trace = json_loads(trace_text, 0, &je);
  if (!json_is_array(trace)) {
    json_decref(trace);
    return sip_error_new(SIP_INTERNAL, "the backend's profile is not a JSON array of trace "
                         "events (line %d: %s)", je.line, je.text);
  }
  op_stat_t *ops = NULL, *nodes = NULL;
  size_t n_ops = 0, n_nodes = 0, i;
  json_int_t runs = 0;
  int oom = 0;
  json_t *ev;
  json_array_foreach(trace, i, ev) {
    const char *cat = json_string_value(json_object_get(ev, "cat"));
    const char *name = json_string_value(json_object_get(ev, "name"));
    json_t *dur = json_object_get(ev, "dur");
    if (!cat || !name || !json_is_number(dur)) continue;
    if (!strcmp(cat, "Session") && !strcmp(name, "model_run")) runs++;
    size_t len = strlen(name);
    static const char suffix[] = "_kernel_time";
    if (strcmp(cat, "Node") || len < sizeof suffix || strcmp(name + len - sizeof suffix + 1, suffix))
      continue;
    const char *op = json_string_value(json_object_get(json_object_get(ev, "args"), "op_name"));
    op_stat_t *o = stat_of(&ops, &n_ops, op ? op : "?");
    op_stat_t *nd = o ? stat_of(&nodes, &n_nodes, name) : NULL;
    if (!nd || add_dur(o, json_number_value(dur), 1) || add_dur(nd, json_number_value(dur), 0)) {
      oom = 1;
      break;
    }
    nd->type = o->op;
  }
  json_t *a = oom ? NULL : json_object();
  if (a) {
    double total = 0;
    for (size_t k = 0; k < n_ops; k++) total += ops[k].total_us;
    if (n_ops) qsort(ops, n_ops, sizeof *ops, by_total);
    if (n_nodes) qsort(nodes, n_nodes, sizeof *nodes, by_total);
    json_t *jo = json_array(), *jn = json_array();
    for (size_t k = 0; k < n_ops; k++)
      json_array_append_new(
          jo, json_pack("{s:s,s:I,s:f,s:f,s:f,s:f}", "op", ops[k].op, "count", ops[k].count,
                        "total_us", ops[k].total_us, "mean_us",
                        ops[k].total_us / (double)ops[k].count, "p99_us", p99(&ops[k]), "share",
                        total > 0 ? ops[k].total_us / total : 0.0));
    for (size_t k = 0; k < n_nodes && k < 20; k++)
      json_array_append_new(
          jn, json_pack("{s:s%,s:s,s:I,s:f,s:f}", "node", nodes[k].op,
                        strlen(nodes[k].op) - (sizeof "_kernel_time" - 1), "op", nodes[k].type,
                        "count", nodes[k].count, "total_us", nodes[k].total_us, "mean_us",
                        nodes[k].total_us / (double)nodes[k].count));
    json_object_set_new(a, "pool", json_string(pool));
    json_object_set_new(a, "session", json_integer(session));
    json_object_set_new(a, "seconds", json_real(seconds));
    json_object_set_new(a, "executions", json_integer(runs));
    json_object_set_new(a, "operators", jo);
    json_object_set_new(a, "nodes", jn);
    if (with_trace) json_object_set(a, "trace", trace);
  }
  stats_free(ops, n_ops);
  stats_free(nodes, n_nodes);
  json_decref(trace);
  if (!a) return SIP__OOM();
  *out = a;
  return NULL;
}

/* ---- the request (sip_server_admin{,_async} "profile") ---- */

typedef struct job {
  sip__pool_t *p; /* a reference */
  int session, with_trace;
  uint64_t ms;
  sip_admin_done_fn done;
  void *user;
  sip_error_t *e; /* the synchronous caller's answer */
  char *answer;
} job_t;

static void run(job_t *j) {
  char *trace = NULL;
  sip_error_t *e = sip__pool_profile(j->p, j->session, j->ms, &trace);
  json_t *a = NULL;
  if (!e)
    e = sip__profile_summary(trace, sip__pool_name(j->p), j->session, (double)j->ms / 1000.0,
                             j->with_trace, &a);
  sip__free(trace);
  char *txt = a ? json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  if (!e && !txt) e = SIP__OOM();
  j->answer = txt ? sip__strdup(txt) : NULL;
  free(txt); /* jansson's allocation */
  if (!e && !j->answer) e = SIP__OOM();
  j->e = e;
  sip__pool_unref(j->p);
}

static void *job_main(void *arg) {
  job_t *j = arg;
  run(j);
  j->done(j->e, j->answer, j->user);
  sip__free(j);
  return NULL;
}

sip_error_t *sip__admin_profile(sip__pool_t *p, json_t *req, sip_admin_done_fn done, void *user,
                                char **answer) {
  json_t *js = json_object_get(req, "seconds"), *jn = json_object_get(req, "session");
  json_t *jt = json_object_get(req, "trace");
  double secs = js ? json_number_value(js) : 5.0;
  if (js && (!json_is_number(js) || secs < 0.1 || secs > 60))
    return sip_error_new(SIP_INVALID_ARGUMENT, "admin request profile: \"seconds\" must be a "
                         "number 0.1..60");
  if (jn && (!json_is_integer(jn) || json_integer_value(jn) < 0 ||
             json_integer_value(jn) >= SIP__MAX_SESSIONS))
    return sip_error_new(SIP_INVALID_ARGUMENT, "admin request profile: \"session\" must be a "
                         "session index 0..%d", SIP__MAX_SESSIONS - 1);
  if (jt && !json_is_boolean(jt))
    return sip_error_new(SIP_INVALID_ARGUMENT, "admin request profile: \"trace\" must be true "
                         "or false");
  job_t *j = sip__calloc(1, sizeof *j);
  if (!j) return SIP__OOM();
  sip__pool_ref(p);
  *j = (job_t){p, jn ? (int)json_integer_value(jn) : 0, !jt || json_is_true(jt),
               (uint64_t)(secs * 1000.0), done, user, NULL, NULL};
  if (!done) { /* synchronous */
    run(j);
    sip_error_t *e = j->e;
    *answer = j->answer;
    sip__free(j);
    return e;
  }
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, job_main, j);
  pthread_attr_destroy(&attr);
  if (rc) {
    sip__pool_unref(p);
    sip__free(j);
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start a thread to profile pool '%s'",
                         sip__pool_name(p));
  }
  return NULL;
}
