/* sip — introspection: the document sip_server_info_json sends (the
 * server, its pools with their config, state and counters, the pipelines,
 * the front-ends' connections), built as jansson values for the modules
 * that read it too (src/server/introspect.h). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/redact.h"
#include "pipeline/pipeline.h"
#include "sched/batch.h"
#include "server/autoscale.h"
#include "server/server.h"
#include "sip/frontend.h"
#include "server/server_impl.h"
#include "session/observe/counters.h"
#include "session/pool_view.h"
#include "session/observe/sla.h"
#include "server/observe/sla_monitor.h"

static json_t *nullable(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *pool_json(sip__pool_t *p, int detail) {
  sip__pool_info_t in;
  sip__pool_info(p, &in);
  const sip__pool_config_t *cfg = in.cfg;
  int ready = in.state == SIP__POOL_READY || in.state == SIP__POOL_STOPPED;
  json_t *o = json_pack("{s:s,s:s,s:o}", "name", in.name, "state", sip__pool_state_name(in.state),
                        "error", nullable(in.error));
  /* In the status too: the HTTP front-end's stats and /metrics label by it
   * without asking for the pools' I/O. */
  json_object_set_new(o, "version", nullable(in.version));
  if (detail == SIP_INFO_POOLS) {
    json_object_set_new(o, "backend", json_string(cfg->backend));
    if (in.platform) json_object_set_new(o, "platform", json_string(in.platform));
    json_object_set_new(o, "model_path", nullable(sip__redact_path(in.model_path)));
    json_object_set_new(o, "priority", json_string(sip__priority_name(cfg->priority)));
    json_object_set_new(o, "pool_size", json_integer(in.pool_size));
    /* For the HTTP model_configuration extension. */
    json_object_set_new(o, "resource_quota",
                        json_pack("{s:I,s:i}", "max_memory_mb",
                                  (json_int_t)in.max_memory_mb,
                                  "max_compute_percent", in.max_compute_percent));
    json_t *bo = json_object();
    for (size_t k = 0; k < cfg->n_backend_options; k++)
      json_object_set_new(bo, cfg->backend_options[k].key,
                          json_string(cfg->backend_options[k].value));
    json_object_set_new(o, "backend_options", bo);
    if (cfg->n_cpus) {
      json_t *cpus = json_array();
      for (int k = 0; k < SIP__MAX_CPUS; k++)
        if (cfg->cpu_mask[k / 64] >> (k % 64) & 1) json_array_append_new(cpus, json_integer(k));
      json_object_set_new(o, "cpu_affinity", cpus);
    }
    if (cfg->max_batch_size) {
      json_t *pref = json_array();
      for (size_t k = 0; k < cfg->n_preferred; k++)
        json_array_append_new(pref, json_integer(cfg->preferred_batch_sizes[k]));
      static const char *pads[] = {"none", "replicate_last", "zero"};
      json_object_set_new(
          o, "dynamic_batching",
          json_pack("{s:i,s:I,s:o,s:s}", "max_batch_size", cfg->max_batch_size,
                    "max_queue_delay_us", (json_int_t)cfg->max_queue_delay_us,
                    "preferred_batch_sizes", pref, "padding_strategy",
                    pads[cfg->padding_strategy]));
    }
    if (cfg->sequence_batching) {
      static const char *const keys[SIP__SEQ_CONTROLS] = {"start", "end", "ready", "corrid"};
      json_t *ctl = json_object();
      for (int k = 0; k < SIP__SEQ_CONTROLS; k++)
        if (cfg->seq_control[k])
          json_object_set_new(ctl, keys[k], json_string(cfg->seq_control[k]));
      json_object_set_new(o, "sequence_batching",
                          json_pack("{s:I,s:i,s:I,s:o}", "idle_timeout_us",
                                    (json_int_t)cfg->seq_idle_timeout_us, "max_sequences",
                                    cfg->seq_max_sequences, "max_backlog",
                                    (json_int_t)cfg->seq_max_backlog, "control_inputs", ctl));
    }
    json_object_set_new(o, "inputs", ready ? sip__io_json(in.inputs, in.n_inputs) : json_array());
    json_object_set_new(o, "outputs", ready ? sip__io_json(in.outputs, in.n_outputs) : json_array());
    if (ready && in.preprocess) json_object_set_new(o, "preprocess", json_string(in.preprocess));
    return o;
  }
  /* The counters as /metrics reads them (session/observe/counters.h). */
  sip__pool_counters_t c;
  sip__pool_counters_read(p, &c);
  static const char *lvl[SIP__SCHED_QUEUES] = {"high", "medium", "low", "delayed"};
  json_t *qb = json_object();
  for (int l = 0; l < SIP__SCHED_QUEUES; l++)
    json_object_set_new(qb, lvl[l], json_integer((json_int_t)c.queued[l]));
  json_t *sessions = json_array();
  for (int i = 0; i < sip__pool_session_count(p); i++) {
    sip__session_counters_t sc;
    sip__pool_session_read(p, i, &sc);
    json_array_append_new(
        sessions, json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:b}", "id", sc.id, "state",
                            sip__session_state_name((sip__session_state_t)sc.state), "since_us",
                            (json_int_t)sc.since_us, "inferences", (json_int_t)sc.inferences,
                            "errors", (json_int_t)sc.errors, "failures",
                            (json_int_t)sc.failures, "drained", sc.drained));
  }
  json_t *codes = json_object();
  for (int k = 0; k < SIP_CODE_COUNT_; k++)
    if (c.by_code[k])
      json_object_set_new(codes, sip_code_name((sip_code_t)k), json_integer((json_int_t)c.by_code[k]));
  json_object_set_new(o, "active_sessions", json_integer(c.active_sessions));
  json_object_set_new(o, "queued_requests", json_integer((json_int_t)c.queued_total));
  json_object_set_new(o, "queued_by_priority", qb);
  json_object_set_new(o, "load_ms", json_real(c.load_ms));
  json_object_set_new(o, "model_bytes", json_integer((json_int_t)c.model_bytes));
  json_object_set_new(o, "memory_bytes", json_integer((json_int_t)c.memory_bytes));
  json_object_set_new(o, "session_memory_bytes", json_integer((json_int_t)c.session_bytes));
  json_object_set_new(o, "load_extra_bytes", json_integer((json_int_t)c.load_extra_bytes));
  json_t *as = sip__autoscale_json(p);
  if (as) json_object_set_new(o, "autoscale", as);
  json_object_set_new(o, "requests", codes);
  json_object_set_new(o, "latency_us",
                      json_pack("{s:o,s:o,s:o}", "queue", sip__hist_read_json(&c.queue), "compute",
                                sip__hist_read_json(&c.compute), "total",
                                sip__hist_read_json(&c.total)));
  json_object_set_new(o, "sessions", sessions);
  json_object_set_new(o, "failover",
                      json_pack("{s:I,s:I,s:I,s:i,s:I,s:I}", "retries", (json_int_t)c.retries,
                                "fallbacks", (json_int_t)c.fallbacks, "session_failures",
                                (json_int_t)c.session_failures, "standby_sessions",
                                c.standby_sessions, "promotions", (json_int_t)c.promotions,
                                "last_recovery_us", (json_int_t)c.last_recovery_us));
  json_object_set_new(o, "isolation",
                      json_string(c.isolation == SIP__ISOLATION_PROCESS ? "process" : "thread"));
  if (c.isolation == SIP__ISOLATION_PROCESS)
    json_object_set_new(o, "worker",
                        json_pack("{s:i,s:i,s:I,s:s}", "pid", c.worker_pid, "standby_pid",
                                  c.standby_worker_pid, "restarts",
                                  (json_int_t)c.worker_restarts, "last_exit", c.worker_exit));
  json_t *bh = json_array();
  for (int i = 0; i < SIP__BATCH_BUCKETS; i++)
    json_array_append_new(bh, json_pack("[o,I]",
                                        i < SIP__BATCH_BUCKETS - 1 ? json_integer(1 << i)
                                                                  : json_string("+Inf"),
                                        (json_int_t)c.batch_cum[i]));
  json_object_set_new(o, "batch_sizes",
                      json_pack("{s:I,s:I,s:o}", "count",
                                (json_int_t)c.batch_cum[SIP__BATCH_BUCKETS - 1], "sum",
                                (json_int_t)c.batch_rows_sum, "buckets", bh));
  if (c.batch_level >= 0) {
    static const char *lv[] = {"low", "medium", "high"};
    json_object_set_new(o, "batch_level", json_string(lv[c.batch_level]));
  }
  if (c.sequences)
    json_object_set_new(o, "sequences",
                        json_pack("{s:I,s:I,s:I}", "active", (json_int_t)c.seq_active, "waiting",
                                  (json_int_t)c.seq_waiting, "expired",
                                  (json_int_t)c.seq_expired));
  json_object_set_new(o, "compute_ns", json_integer((json_int_t)c.compute_ns));
  /* max_compute_percent measured (docs/elastic.md): the share of every
   * pool's execution time over the arbiter's window, against the quota. */
  json_object_set_new(
      o, "compute_share",
      json_pack("{s:i,s:I,s:I,s:f,s:o}", "window_s", SIP__ARB_WINDOW_S, "recent_ns",
                (json_int_t)c.recent_compute_ns, "all_pools_ns", (json_int_t)c.recent_total_ns,
                "share", sip__compute_share(c.recent_compute_ns, c.recent_total_ns), "quota",
                c.compute_percent ? json_real(c.compute_percent / 100.0) : json_null()));
  if (in.sla) json_object_set_new(o, "sla", sip__sla_json(in.sla)); /* docs/sla.md */
  json_object_set_new(
      o, "stats",
      json_pack("{s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o}", "inference_count",
                (json_int_t)c.inference_count, "execution_count", (json_int_t)c.execution_count,
                "last_inference", (json_int_t)c.last_inference_ms, "success",
                sip__stat_read_json(c.success), "fail", sip__stat_read_json(c.fail), "queue",
                sip__stat_read_json(c.queue_stat), "compute_input",
                sip__stat_read_json(c.compute_input), "compute_infer",
                sip__stat_read_json(c.compute_infer), "compute_output",
                sip__stat_read_json(c.compute_output)));
  return o;
}

static void count_connections(void *ctx, const char *kind, long open) {
  json_object_set_new((json_t *)ctx, kind, json_integer((json_int_t)open));
}

/* The pool's loaded model in the engine's model store (docs/elastic.md
 * "One model store"): null when it has none (not loaded, isolated), else
 * how many pools run on it, its bytes and the other pools listed that
 * share it ("name", or "name:version" for a repository model). */
static json_t *store_json(sip__pool_t *const *v, size_t n, size_t i) {
  sip__pool_info_t in, other;
  sip__pool_info(v[i], &in);
  if (!in.store_key) return json_null();
  json_t *with = json_array();
  for (size_t j = 0; j < n; j++) {
    if (j == i) continue;
    sip__pool_info(v[j], &other);
    if (other.store_key != in.store_key) continue;
    char name[300];
    if (other.version && other.from_repo)
      snprintf(name, sizeof name, "%s:%s", other.name, other.version);
    else snprintf(name, sizeof name, "%s", other.name);
    json_array_append_new(with, json_string(name));
  }
  return json_pack("{s:I,s:I,s:o}", "pools", (json_int_t)in.store_pools, "model_memory_bytes",
                   (json_int_t)in.store_bytes, "shared_with", with);
}

json_t *sip__server_info(sip_server_t *s, int kind) {
  json_t *root;
  if (kind != SIP_INFO_READY && kind != SIP_INFO_POOLS && kind != SIP_INFO_STATUS) return NULL;
  /* Pools in service (a retired version still draining is not listed),
   * each marked whether it is its model's default version. */
  size_t n = 0;
  sip__pool_t **v = sip__registry_snapshot(&s->eng, 1, &n);
  int *defaults = sip__calloc(n + 1, sizeof *defaults);
  pthread_rwlock_rdlock(&s->eng.reg_lock);
  for (size_t i = 0; defaults && i < n; i++)
    defaults[i] = sip__registry_is_default_locked(&s->eng, v[i]);
  pthread_rwlock_unlock(&s->eng.reg_lock);
  if (kind == SIP_INFO_READY) {
    /* Keyed by name; other versions than the default as "name:version". */
    json_t *pools = json_object();
    for (size_t i = 0; i < n; i++) {
      char key[300];
      const char *name = sip__pool_name(v[i]), *ver = sip__pool_version(v[i]);
      if (!defaults || defaults[i] || !ver)
        snprintf(key, sizeof key, "%s", name);
      else
        snprintf(key, sizeof key, "%s:%s", name, ver);
      json_object_set_new(pools, key, json_string(sip__pool_state_name(sip__pool_state(v[i]))));
    }
    /* loading: start-up loads not over, or a model still loading; once it
     * is false a server that is not ready has a model that failed
     * (server.strict_readiness) or is draining. */
    int loading = !atomic_load(&s->loaded);
    for (size_t i = 0; i < n && !loading; i++)
      loading = sip__pool_state(v[i]) == SIP__POOL_LOADING;
    root = json_pack("{s:b,s:b,s:b,s:o}", "ready", sip_server_ready(s), "live", 1, "loading",
                     loading, "pools", pools);
  } else {
    json_t *pools = json_array();
    for (size_t i = 0; i < n; i++) {
      json_t *o = pool_json(v[i], kind);
      if (o) {
        json_object_set_new(o, "default", json_boolean(!defaults || defaults[i]));
        json_object_set_new(o, "model_store", store_json(v, n, i));
        if (kind == SIP_INFO_POOLS)
          json_object_set_new(o, "source", json_string(sip__pool_from_repo(v[i]) ? "repository" : "config"));
      }
      json_array_append_new(pools, o);
    }
    root = json_pack("{s:o}", "pools", pools);
    if (atomic_load(&s->loaded)) /* pipelines hook: built before `loaded` is set */
      json_object_set_new(root, "pipelines", sip__pipelines_json(s->pipelines, kind));
    if (kind == SIP_INFO_STATUS) {
      json_object_set_new(root, "uptime_s",
                          json_real((double)(sip__now_us() - s->started_us) / 1e6));
      json_object_set_new(root, "ready", json_boolean(sip_server_ready(s)));
      json_object_set_new(root, "version", json_string(sip_version()));
      json_t *conns = json_object();
      for (size_t f = 0; f < s->n_frontends; f++)
        if (s->frontends[f].vt->connections)
          s->frontends[f].vt->connections(s->frontends[f].state, count_connections, conns);
      json_object_set_new(root, "connections", conns);
      json_object_set_new(root, "alerts", sip__sla_monitor_json(s));
      json_object_set_new(root, "memory", sip__server_memory_json(s)); /* memory.c */
      /* Where it listens ("http://host:port/dashboard" among them): what
       * `sip report` fetches the dashboard's report from. */
      json_t *eps = json_array();
      for (size_t k = 0; k < sip_server_endpoint_count(s); k++)
        json_array_append_new(eps, json_string(sip_server_endpoint(s, k)));
      json_object_set_new(root, "endpoints", eps);
    }
  }
  sip__registry_release(v, n);
  sip__free(defaults);
  return root;
}

char *sip_server_info_json(sip_server_t *s, int kind) {
  json_t *root = sip__server_info(s, kind);
  if (!root) return NULL;
  char *txt = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  return txt;
}
