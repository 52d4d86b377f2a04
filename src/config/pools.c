/* sip — a session_pools entry, field by field, and the same map as a model
 * repository's <model>/config.yaml (every key but name and model_path, plus
 * version_policy): resource quotas, backend and backend_options,
 * cpu_affinity, version_policy, the list itself and the cross-field check of
 * model_path against the backend. The scheduling keys are in scheduling.c,
 * preprocess in preprocess.c. */
#include "config/parse.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/core.h"

_Static_assert(SIP__PRIO_HIGH == 0 && SIP__PRIO_MEDIUM == 1 && SIP__PRIO_LOW == 2,
               "priority_names[] follows the enum order");

static int parse_options(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_version_policy(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_cpus(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_backend(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_residency(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);

static const char *const priority_names[] = {"high", "medium", "low", NULL};
static const char *const isolation_names[] = {"thread", "process", NULL};
#define RESIDENCY_EXPECT "one of pinned, on_demand"
#define BACKEND_EXPECT "the name of a backend of this server (built in, or one the embedding program registered)"

#define CPUS_EXPECT                                                                        \
  "logical CPU numbers 0..1023 as a list ([0, 1]) or ranges in taskset's form (\"0-3,8\" or " \
  "[0-3, 8]), each CPU once"
#define VERSION_POLICY_EXPECT                                                                  \
  "{latest: N} (N 1..1024), {specific: [V, ...]} (up to 64 distinct version numbers) or all"


enum { Q_MEMORY, Q_COMPUTE, Q_COUNT };
static const sip__field_t quota_fields[Q_COUNT] = {
    [Q_MEMORY] = {.name = "max_memory_mb", .type = F_INT64,
                  .offset = offsetof(sip__pool_config_t, max_memory_mb),
                  .def = 0, .min = 1, .max = 1048576,
                  .doc = "MiB the model and its sessions may take, measured at load (more: the "
                         "pool is FAILED) and, where its backend can, capped while serving (a "
                         "request that needs more fails with RESOURCE_EXHAUSTED; docs/elastic.md); "
                         "absent = unlimited."},
    [Q_COMPUTE] = {.name = "max_compute_percent", .type = F_INT,
                   .offset = offsetof(sip__pool_config_t, max_compute_percent),
                   .def = 0, .min = 1, .max = 100,
                   .doc = "The pool's share of execution time when pools wait for a slot "
                          "(unused share is lent to busy pools; the share used is measured, "
                          "sip_compute_share_ratio); absent = 100."},
};
static const sip__section_t quota_section = {quota_fields, Q_COUNT};

enum { I_ENABLED, I_TTL, I_ENTRIES, I_BYTES, I_COUNT };
static const sip__field_t idem_fields[I_COUNT] = {
    [I_ENABLED] = {.name = "enabled", .type = F_BOOL,
                   .offset = offsetof(sip__pool_config_t, idem_enabled), .def = 0,
                   .doc = "Key every request that carries a request id (HTTP/gRPC \"id\"); "
                          "otherwise only requests with an idempotency_key parameter are keyed."},
    [I_TTL] = {.name = "ttl_s", .type = F_INT64, .offset = offsetof(sip__pool_config_t, idem_ttl_s),
               .def = 300, .min = 1, .max = 604800,
               .doc = "Seconds a finished request's answer is kept for its duplicates."},
    [I_ENTRIES] = {.name = "max_entries", .type = F_INT64,
                   .offset = offsetof(sip__pool_config_t, idem_max_entries),
                   .def = 10000, .min = 1, .max = 10000000,
                   .doc = "Keys remembered at most (running and finished); least recently used "
                          "finished ones go first."},
    [I_BYTES] = {.name = "max_bytes", .type = F_INT64,
                 .offset = offsetof(sip__pool_config_t, idem_max_bytes),
                 .def = 67108864, .min = 1024, .max = INT64_C(1) << 40,
                 .doc = "Bytes of kept answers (outputs and messages) at most."},
};
static const sip__section_t idem_section = {idem_fields, I_COUNT};
static const char *const failover_names[] = {"none", "immediate_retry", "fallback", NULL};
enum { F_STRATEGY, F_RETRIES, F_FALLBACK, F_FCOUNT };
static const sip__field_t failover_fields[F_FCOUNT] = {
    [F_STRATEGY] = {.name = "strategy", .type = F_ENUM,
                    .offset = offsetof(sip__pool_config_t, failover_strategy),
                    .names = failover_names, .def = SIP__FAILOVER_NONE,
                    .doc = "What a request whose session failed does: immediate_retry (on another "
                           "session, then fallback_pool), fallback (straight to fallback_pool) "
                           "or none (answered with the failure)."},
    [F_RETRIES] = {.name = "max_retries", .type = F_INT,
                   .offset = offsetof(sip__pool_config_t, failover_max_retries),
                   .def = 1, .min = 0, .max = 16,
                   .doc = "Retries on other sessions of the pool (immediate_retry)."},
    [F_FALLBACK] = {.name = "fallback_pool", .type = F_STRING,
                    .offset = offsetof(sip__pool_config_t, fallback_pool),
                    .valid = sip__cfg_valid_pool_name, .expect = "the name of another pool",
                    .only = IN_POOL, /* checked against the file's pools */
                    .doc = "Pool tried when the retries are spent; it must exist and take the "
                           "same inputs and give the same outputs."},
};
static const sip__section_t failover_section = {failover_fields, F_FCOUNT};

enum { H_ENABLED, H_COUNT_, H_HEALTH, H_HCOUNT };
static const sip__field_t standby_fields[H_HCOUNT] = {
    [H_ENABLED] = {.name = "enabled", .type = F_BOOL,
                   .offset = offsetof(sip__pool_config_t, standby_enabled), .def = 0,
                   .doc = "Keep standby sessions (docs/availability.md)."},
    [H_COUNT_] = {.name = "standby_count", .type = F_INT,
                  .offset = offsetof(sip__pool_config_t, standby_count), .def = 1, .min = 0,
                  .max = 16, .doc = "Standby sessions kept besides pool_size."},
    [H_HEALTH] = {.name = "health_check_interval_ms", .type = F_INT64,
                  .offset = offsetof(sip__pool_config_t, standby_health_ms), .def = 0, .min = 10,
                  .max = 3600000,
                  .doc = "Heartbeat period of the pool's sessions when the pool sets none."},
};
static const sip__section_t standby_section = {standby_fields, H_HCOUNT};

const sip__field_t sip__cfg_pool_fields[P_COUNT] = {
    /* A repository model's name and files come from its directory. */
    [P_NAME] = {.name = "name", .type = F_STRING, .offset = offsetof(sip__pool_config_t, name),
                .valid = sip__cfg_valid_pool_name, .required = true, .only = IN_POOL,
                .expect = "a pool name of 1..128 characters from A-Z a-z 0-9 _ . -",
                .doc = "Unique name clients address the pool by."},
    [P_MODEL_PATH] = {.name = "model_path", .type = F_STRING,
                      .offset = offsetof(sip__pool_config_t, model_path),
                      .expect = MODEL_PATH_EXPECT, .only = IN_POOL,
                      .doc = "Model file or directory; relative paths are relative to the "
                             "config file. Required unless the backend needs no model file "
                             "(builtin, transform)."},
    [P_BACKEND] = {.name = "backend", .type = F_CUSTOM, .parse = parse_backend,
                   .expect = BACKEND_EXPECT,
                   .doc = "Backend; default: the backend whose probe claims model_path's "
                          "file (its extension: see Backends), or for a model directory the "
                          "first backend with default file names."},
    [P_POOL_SIZE] = {.name = "pool_size", .type = F_INT,
                     .offset = offsetof(sip__pool_config_t, pool_size),
                     .def = 1, .min = 1, .max = 256,
                     .doc = "Number of warm sessions."},
    [P_PRIORITY] = {.name = "priority", .type = F_ENUM,
                    .offset = offsetof(sip__pool_config_t, priority), .names = priority_names,
                    .def = SIP__PRIO_MEDIUM,
                    .doc = "Which pool runs first when sessions of several pools wait for an "
                           "execution slot."},
    [P_QUOTA] = {.name = "resource_quota", .type = F_SECTION, .section = &quota_section,
                 .doc = "Per-pool resource limits."},
    [P_OPTIONS] = {.name = "backend_options", .type = F_CUSTOM, .parse = parse_options,
                   .expect = "a map of scalar values (strings, numbers or bools) or lists of "
                             "names and maps",
                   .doc = "Options of the pool's backend, checked against its option table "
                          "(see Backends)."},
    [P_BATCHING] = {.name = "dynamic_batching", .type = F_SECTION, .section = &sip__cfg_batching_section,
                    .doc = "Merge queued requests along dim 0 into one execution."},
    [P_QUEUE] = {.name = "queue", .type = F_SECTION, .section = &sip__cfg_queue_section,
                 .doc = "Queue size, default deadline, expiry action, ageing."},
    [P_ELASTIC] = {.name = "batch_strategies", .type = F_SECTION, .section = &sip__cfg_elastic_section,
                   .doc = "Elastic batching: batch size and wait by traffic level."},
    [P_VERSIONS] = {.name = "version_policy", .type = F_CUSTOM, .parse = parse_version_policy,
                    .only = IN_MODEL, .expect = VERSION_POLICY_EXPECT,
                    .doc = "Which version directories are served; default {latest: 1}."},
    [P_PREPROCESS] = {.name = "preprocess", .type = F_CUSTOM, .parse = sip__cfg_parse_preprocess,
                      .expect = PREPROCESS_EXPECT,
                      .doc = "Transforms run on one input before the model, so clients may send "
                             "raw images or PNG/JPEG bytes (docs/preprocess.md)."},
    [P_CPUS] = {.name = "cpu_affinity", .type = F_CUSTOM, .parse = parse_cpus,
                .expect = CPUS_EXPECT,
                .doc = "Logical CPUs the pool's session threads and own intra-op threads run "
                       "on (docs/scheduling.md); absent = any."},
    [P_HANG] = {.name = "hang_timeout_ms", .type = F_INT64,
                .offset = offsetof(sip__pool_config_t, hang_timeout_ms), .def = 0, .min = 1,
                .max = 3600000,
                .doc = "An execution running longer fails its session: its requests are "
                       "answered (or failed over) and a new session replaces it; absent = off."},
    [P_HEALTH] = {.name = "health_check_interval_ms", .type = F_INT64,
                  .offset = offsetof(sip__pool_config_t, health_check_interval_ms), .def = 0,
                  .min = 10, .max = 3600000,
                  .doc = "How often the watchdog checks every session (heartbeat); absent = "
                         "hang_timeout_ms / 4."},
    [P_FAILOVER] = {.name = "failover", .type = F_SECTION, .section = &failover_section,
                    .doc = "Where requests go when their session fails (docs/availability.md)."},
    [P_STANDBY] = {.name = "hot_standby", .type = F_SECTION, .section = &standby_section,
                   .doc = "Warm sessions that take no traffic and replace a failed one."},
    [P_ISOLATION] = {.name = "isolation", .type = F_ENUM,
                     .offset = offsetof(sip__pool_config_t, isolation), .names = isolation_names,
                     .def = SIP__ISOLATION_THREAD,
                     .doc = "Where the sessions execute: thread (in the server process) or "
                            "process (in a worker process the server starts and restarts; a "
                            "crash there ends only the worker; docs/availability.md)."},
    [P_SPIN] = {.name = "idle_spin_us", .type = F_INT64,
                .offset = offsetof(sip__pool_config_t, idle_spin_us), .def = -1, .min = 0,
                .max = 1000,
                .doc = "Microseconds a session polls for its next request after work before it "
                       "sleeps; with isolation: process, how long the server polls for the "
                       "worker's answer and the worker for the next execution instead, yielding "
                       "between polls (docs/availability.md). 0 = never poll; absent = "
                       "SIP_IDLE_SPIN_US from the environment, else 50."},
    [P_SEQUENCE] = {.name = "sequence_batching", .type = F_SECTION,
                    .section = &sip__cfg_sequence_section,
                    .doc = "Stateful models: each sequence id runs in order on one session, with "
                           "control inputs filled by the server (docs/sequences.md)."},
    [P_IDEM] = {.name = "idempotency", .type = F_SECTION, .section = &idem_section,
                .doc = "Requests with an idempotency key run at most once while their entry "
                       "lives; duplicates join or get the kept answer (docs/idempotency.md)."},
    [P_SLA] = {.name = "sla", .type = F_SECTION, .section = &sip__cfg_sla_section,
               .doc = "Service-level targets checked per window, with compliance and alerts "
                      "(docs/sla.md)."},
    [P_RCACHE] = {.name = "response_cache", .type = F_BOOL,
                  .offset = offsetof(sip__pool_config_t, response_cache), .def = 0,
                  .doc = "Keep OK answers in the server's response cache (server.response_cache) "
                         "and answer identical requests from it without running the model; "
                         "never for sequences (docs/response_cache.md)."},
    [P_RESIDENCY] = {.name = "residency", .type = F_CUSTOM, .parse = parse_residency,
                     .expect = RESIDENCY_EXPECT,
                     .doc = "pinned: loaded at start and never evicted; on_demand: loaded at its "
                            "first request (which waits in the queue), unloaded when idle and its "
                            "memory is wanted under server.memory_budget_mb (docs/elastic.md). "
                            "Default: pinned for session_pools entries; on_demand for repository "
                            "models when a memory budget is set."},
    [P_AUTOSCALE] = {.name = "autoscale", .type = F_SECTION, .section = &sip__cfg_autoscale_section,
                     .doc = "Sessions follow the load between min_sessions and max_sessions, on "
                            "utilisation and optionally a forecast of the arrival rate "
                            "(docs/elastic.md)."},
};
const sip__section_t sip__cfg_pool_section = {sip__cfg_pool_fields, P_COUNT};
_Static_assert(COUNT(quota_fields) <= MAX_FIELDS && COUNT(sip__cfg_pool_fields) <= MAX_FIELDS &&
                   COUNT(failover_fields) <= MAX_FIELDS,
               "raise MAX_FIELDS");

static int parse_options(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__pool_config_t *pool = base;
  const char *exp = sip__cfg_pool_fields[P_OPTIONS].expect;
  char okey[KEY_MAX], shown[SHOW_MAX * 4 + 8];

  if (is_null(v)) return 0;
  if (v->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, v, key, exp);
  size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
  if (n == 0) return 0;
  pool->backend_options = sip__calloc(n, sizeof *pool->backend_options);
  if (!pool->backend_options) return sip__cfg_oom(c);
  pool->n_backend_options = n;
  for (size_t i = 0; i < n; i++) {
    yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
    yaml_node_t *k, *val;
    if (sip__cfg_pair(c, pr, &k, &val)) return -1;
    if (k->type != YAML_SCALAR_NODE)
      return sip__cfg_fail(c, k->start_mark, key, "a key is %s; expected %s",
                      k->type == YAML_MAPPING_NODE ? "a map" : "a list", exp);
    const char *ks = text(k);
    size_t kl = k->data.scalar.length;
    sip__cfg_key_join(okey, key, ks, kl);
    if (kl == 0 || is_null(k) || memchr(ks, '\0', kl))
      return sip__cfg_fail(c, k->start_mark, okey, "%s is not a valid option name; expected %s",
                      sip__cfg_show(shown, sizeof shown, ks, kl), exp);
    for (size_t j = 0; j < i; j++)
      if (strlen(pool->backend_options[j].key) == kl &&
          !memcmp(pool->backend_options[j].key, ks, kl))
        return sip__cfg_fail(c, k->start_mark, okey, "duplicate key; expected each key at most once");
    /* Stored one at a time so config_free sees only finished entries. */
    char *vc = NULL;
    if (sip__cfg_option_value(c, val, okey, &vc)) return -1;
    char *kc = sip__strndup(ks, kl);
    if (!kc) {
      sip__free(vc);
      return sip__cfg_oom(c);
    }
    pool->backend_options[i].key = kc;
    pool->backend_options[i].value = vc;
  }
  return 0;
}


static int resolve_option_paths(sip__ctx_t *c, sip_kv_t *kv, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!kv[i].key || !kv[i].value || !sip__cfg_is_path_option(kv[i].key)) continue;
    char *r = sip__cfg_resolve_path(c->base_dir, kv[i].value);
    if (!r) return sip__cfg_oom(c);
    sip__free((void *)kv[i].value);
    kv[i].value = r;
  }
  return 0;
}

/* Cross-field rules: model_path vs backend, resolution, and the default
 * backend. Existence is not checked here: a pool whose model fails to load
 * is reported FAILED by the runtime, not refused at parse time. */
static int check_pool(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t *map, yaml_node_t **vals,
                      const char *key) {
  char mkey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (pool->residency == SIP__RESIDENCY_ON_DEMAND && pool->sequence_batching && vals[P_RESIDENCY]) {
    sip__cfg_key_join(mkey, key, "residency", strlen("residency"));
    return sip__cfg_fail(c, vals[P_RESIDENCY]->start_mark, mkey,
                         "on_demand cannot be used with sequence_batching (a sequence's state "
                         "would be lost when the model is evicted); expected pinned");
  }
  sip__cfg_key_join(mkey, key, "model_path", strlen("model_path"));
  /* A backend without SIP_BACKEND_NEEDS_FILE (builtin, transform) needs no
   * model file; one with SIP_BACKEND_PATH_OPTIONS reads files named in its
   * options, resolved like model_path. */
  int flags = pool->backend ? c->backends->flags_of(pool->backend) : (int)SIP_BACKEND_NEEDS_FILE;
  bool builtin = flags >= 0 && !(flags & SIP_BACKEND_NEEDS_FILE);
  if (flags >= 0 && (flags & SIP_BACKEND_PATH_OPTIONS) &&
      resolve_option_paths(c, pool->backend_options, pool->n_backend_options))
    return -1;

  if (!pool->model_path) {
    if (builtin) return sip__cfg_check_backend_options(c, pool, vals[P_OPTIONS], key);
    return sip__cfg_fail(c, map->start_mark, mkey,
                    "missing; expected %s (required unless the backend needs no model file, "
                    "like builtin or transform)",
                    MODEL_PATH_EXPECT);
  }
  yaml_mark_t pm = vals[P_MODEL_PATH]->start_mark;
  const char *written = pool->model_path;
  const char *ext = sip__cfg_path_ext(written);
  size_t wl = strlen(written);

  if (!builtin && ext && !strcasecmp(ext, ".om") && !c->backends->probe(written))
    return sip__cfg_fail(c, pm, mkey,
                    "%s is a CANN offline model (.om), but this build has no CANN backend; "
                    "expected one of %s, or a model directory",
                    sip__cfg_show(shown, sizeof shown, written, wl), c->backends->formats());

  char *resolved = sip__cfg_resolve_path(c->base_dir, written);
  if (!resolved) return sip__cfg_oom(c);
  if (!pool->backend) {
    struct stat st;
    /* No extension or a trailing slash reads as a directory (versioned model
     * dirs); an existing directory with a dot in its name is one too. */
    bool dir = !ext || written[wl - 1] == '/' || (stat(resolved, &st) == 0 && S_ISDIR(st.st_mode));
    const char *b = dir ? c->backends->default_backend() : c->backends->probe(resolved);
    if (!b) {
      sip__free(resolved);
      return sip__cfg_fail(c, pm, mkey,
                      "%s has an unknown extension (%s); expected one of %s, a model directory "
                      "(or an explicit backend)",
                      sip__cfg_show(shown, sizeof shown, written, wl), ext ? ext : "none",
                      c->backends->formats());
    }
    if (!(pool->backend = sip__strdup(b))) {
      sip__free(resolved);
      return sip__cfg_oom(c);
    }
  }
  sip__free(pool->model_path);
  pool->model_path = resolved;
  return sip__cfg_check_backend_options(c, pool, vals[P_OPTIONS], key);
}

/* Adds "N" or "A-B" (s[0..len)) to the pool's CPU set; `at` locates it
 * for messages. */
static int add_cpus(sip__ctx_t *c, sip__pool_config_t *pool, yaml_mark_t at, const char *key,
                    const char *s, size_t len) {
  char shown[SHOW_MAX * 4 + 8];
  const char *dash = len > 1 ? memchr(s + 1, '-', len - 1) : NULL;
  size_t l1 = dash ? (size_t)(dash - s) : len;
  int64_t lo, hi;
  if (sip__cfg_parse_int(s, l1, &lo) || (dash ? sip__cfg_parse_int(dash + 1, len - l1 - 1, &hi) : (hi = lo, 0)) ||
      lo < 0 || hi < lo || hi >= SIP__MAX_CPUS)
    return sip__cfg_fail(c, at, key, "%s is not a CPU number or range; expected %s",
                    sip__cfg_show(shown, sizeof shown, s, len), CPUS_EXPECT);
  for (int64_t k = lo; k <= hi; k++) {
    uint64_t bit = UINT64_C(1) << (k % 64);
    if (pool->cpu_mask[k / 64] & bit)
      return sip__cfg_fail(c, at, key, "names CPU %lld twice; expected %s", (long long)k, CPUS_EXPECT);
    pool->cpu_mask[k / 64] |= bit;
    pool->n_cpus++;
  }
  return 0;
}

/* cpu_affinity: [0, 2-3] or "0,2-3". */

static int parse_cpus(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__pool_config_t *pool = base;
  char ikey[KEY_MAX];
  if (v->type == YAML_SCALAR_NODE && !is_null(v)) {
    const char *s = text(v), *end = s + v->data.scalar.length;
    for (;;) {
      const char *comma = memchr(s, ',', (size_t)(end - s));
      const char *e = comma ? comma : end;
      while (s < e && *s == ' ') s++;
      while (e > s && e[-1] == ' ') e--;
      if (add_cpus(c, pool, v->start_mark, key, s, (size_t)(e - s))) return -1;
      if (!comma) break;
      s = comma + 1;
    }
    return 0;
  }
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, CPUS_EXPECT);
  if (seq_len(v) == 0) return sip__cfg_fail(c, v->start_mark, key, "is an empty list; expected %s", CPUS_EXPECT);
  for (size_t i = 0; i < seq_len(v); i++) {
    yaml_node_t *e = seq_item(c, v, i);
    sip__cfg_key_index(ikey, key, i);
    if (!e) return sip__cfg_oom(c);
    if (sip__cfg_want_scalar(c, e, ikey, CPUS_EXPECT) ||
        add_cpus(c, pool, e->start_mark, ikey, text(e), e->data.scalar.length))
      return -1;
  }
  return 0;
}

/* backend: a name from the server's backend table (built-in or registered). */
static int parse_backend(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  char shown[SHOW_MAX * 4 + 8];
  if (sip__cfg_want_scalar(c, v, key, BACKEND_EXPECT)) return -1;
  const char *s = text(v);
  size_t len = v->data.scalar.length;
  if (!len || memchr(s, '\0', len) || c->backends->flags_of(s) < 0)
    return sip__cfg_fail(c, v->start_mark, key, "%s is not a backend of this server; expected one of %s",
                    sip__cfg_show(shown, sizeof shown, s, len), c->backends->names());
  char **slot = &((sip__pool_config_t *)base)->backend;
  sip__free(*slot);
  if (!(*slot = sip__strndup(s, len))) return sip__cfg_oom(c);
  return 0;
}

/* residency: pinned | on_demand. */
static int parse_residency(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  char shown[SHOW_MAX * 4 + 8];
  if (sip__cfg_want_scalar(c, v, key, RESIDENCY_EXPECT)) return -1;
  const char *s = text(v);
  size_t len = v->data.scalar.length;
  int *slot = &((sip__pool_config_t *)base)->residency;
  if (len == 6 && !memcmp(s, "pinned", 6)) {
    *slot = SIP__RESIDENCY_PINNED;
  } else if (len == 9 && !memcmp(s, "on_demand", 9)) {
    *slot = SIP__RESIDENCY_ON_DEMAND;
  } else {
    return sip__cfg_fail(c, v->start_mark, key, "%s is not valid; expected %s",
                         sip__cfg_show(shown, sizeof shown, s, len), RESIDENCY_EXPECT);
  }
  return 0;
}

/* version_policy: {latest: N} | {specific: [V, ...]} | all. */
static int parse_version_policy(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__pool_config_t *pool = base;
  const char *exp = VERSION_POLICY_EXPECT;
  char k[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (v->type == YAML_SCALAR_NODE && !is_null(v)) {
    if (v->data.scalar.length == 3 && !memcmp(text(v), "all", 3)) {
      pool->version_policy = SIP__VERSIONS_ALL;
      return 0;
    }
    return sip__cfg_fail(c, v->start_mark, key, "%s is not valid; expected %s",
                    sip__cfg_show(shown, sizeof shown, text(v), v->data.scalar.length), exp);
  }
  if (v->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, v, key, exp);
  size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
  if (n != 1) return sip__cfg_fail(c, v->start_mark, key, "has %zu keys; expected %s", n, exp);
  yaml_node_t *kn, *vn;
  if (sip__cfg_pair(c, &v->data.mapping.pairs.start[0], &kn, &vn)) return -1;
  if (kn->type != YAML_SCALAR_NODE) return sip__cfg_fail_kind(c, kn, key, exp);
  const char *ks = text(kn);
  size_t kl = kn->data.scalar.length;
  sip__cfg_key_join(k, key, ks, kl);
  if (kl == 6 && !memcmp(ks, "latest", 6)) {
    static const sip__field_t latest = {.name = "latest", .type = F_INT,
                                   .offset = offsetof(sip__pool_config_t, version_latest),
                                   .min = 1, .max = 1024,
                                   .doc = "Serve the N highest version numbers."};
    pool->version_policy = SIP__VERSIONS_LATEST;
    return sip__cfg_parse_value(c, &latest, vn, k, pool);
  }
  if (kl == 8 && !memcmp(ks, "specific", 8)) {
    const char *sexp = "a list of up to 64 distinct version numbers (0..2^53), e.g. [1, 3]";
    if (vn->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, vn, k, sexp);
    size_t m = seq_len(vn);
    if (m == 0 || m > SIP__MAX_SPECIFIC_VERSIONS)
      return sip__cfg_fail(c, vn->start_mark, k, "has %zu items; expected %s", m, sexp);
    for (size_t i = 0; i < m; i++) {
      char ik[KEY_MAX];
      yaml_node_t *e = seq_item(c, vn, i);
      sip__cfg_key_index(ik, k, i);
      if (!e) return sip__cfg_oom(c);
      if (sip__cfg_want_scalar(c, e, ik, sexp)) return -1;
      int64_t x = 0;
      if (!is_plain(e) || sip__cfg_parse_int(text(e), e->data.scalar.length, &x) || x < 0 ||
          x > ((int64_t)1 << 53))
        return sip__cfg_fail(c, e->start_mark, ik, "%s is not a version number; expected %s",
                        sip__cfg_show(shown, sizeof shown, text(e), e->data.scalar.length), sexp);
      /* Kept sorted; a repeated number is a mistake worth naming. */
      size_t at = pool->n_versions;
      for (size_t j = 0; j < pool->n_versions; j++) {
        if (pool->versions[j] == x)
          return sip__cfg_fail(c, e->start_mark, ik, "%lld is listed twice; expected %s", (long long)x,
                          sexp);
        if (pool->versions[j] > x && at == pool->n_versions) at = j;
      }
      memmove(&pool->versions[at + 1], &pool->versions[at],
              (pool->n_versions - at) * sizeof pool->versions[0]);
      pool->versions[at] = x;
      pool->n_versions++;
    }
    pool->version_policy = SIP__VERSIONS_SPECIFIC;
    return 0;
  }
  return sip__cfg_fail(c, kn->start_mark, k, "unknown key; expected %s", exp);
}

/* failover.fallback_pool names another pool of the file (whose inputs and
 * outputs are compared once both are loaded: src/server). */
static int check_fallbacks(sip__ctx_t *c, const sip__config_t *cfg, yaml_node_t *v, const char *key) {
  char pkey[KEY_MAX], ikey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  for (size_t i = 0; i < cfg->n_pools; i++) {
    const sip__pool_config_t *p = &cfg->pools[i];
    yaml_node_t *item = seq_item(c, v, i);
    sip__cfg_key_index(pkey, key, i);
    sip__cfg_key_join(ikey, pkey, "failover.fallback_pool", strlen("failover.fallback_pool"));
    if (p->failover_strategy == SIP__FAILOVER_FALLBACK && !p->fallback_pool)
      return sip__cfg_fail(c, item->start_mark, ikey,
                      "missing; expected the name of another pool for strategy fallback");
    if (!p->fallback_pool) continue;
    size_t j = 0;
    while (j < cfg->n_pools && strcmp(cfg->pools[j].name, p->fallback_pool)) j++;
    if (j == cfg->n_pools || j == i)
      return sip__cfg_fail(c, item->start_mark, ikey, "%s is %s; expected the name of another pool "
                      "of session_pools",
                      sip__cfg_show(shown, sizeof shown, p->fallback_pool, strlen(p->fallback_pool)),
                      j == i ? "the pool itself" : "not a pool of this file");
  }
  return 0;
}

int sip__cfg_parse_pools(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__config_t *cfg = base;
  char ikey[KEY_MAX], exp[1024], shown[SHOW_MAX * 4 + 8];
  snprintf(exp, sizeof exp, "a map with keys: ");
  sip__cfg_list_fields(exp, sizeof exp, &sip__cfg_pool_section, IN_POOL);

  if (is_null(v)) return 0;
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, POOLS_EXPECT);
  size_t n = seq_len(v);
  if (n == 0) return 0;
  cfg->pools = sip__calloc(n, sizeof *cfg->pools);
  if (!cfg->pools) return sip__cfg_oom(c);
  cfg->n_pools = n;
  for (size_t i = 0; i < n; i++) {
    sip__pool_config_t *pool = &cfg->pools[i];
    yaml_node_t *item = seq_item(c, v, i);
    yaml_node_t *vals[MAX_FIELDS] = {0};
    sip__cfg_key_index(ikey, key, i);
    if (!item) return sip__cfg_oom(c);
    /* An empty "- " entry is a mistake, not a pool made of defaults. */
    if (item->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, item, ikey, exp);
    sip__cfg_apply_defaults(&sip__cfg_pool_section, pool);
    pool->line = (int)item->start_mark.line + 1;
    c->where = IN_POOL;
    int rc = sip__cfg_parse_map(c, item, ikey, &sip__cfg_pool_section, exp, pool, vals);
    c->where = 0;
    if (rc) return -1;
    for (size_t j = 0; j < i; j++) {
      if (strcmp(cfg->pools[j].name, pool->name)) continue;
      char nkey[KEY_MAX];
      sip__cfg_key_join(nkey, ikey, "name", 4);
      return sip__cfg_fail(c, vals[P_NAME]->start_mark, nkey,
                      "%s is already the name of session_pools[%zu] (line %d); expected unique pool "
                      "names",
                      sip__cfg_show(shown, sizeof shown, pool->name, strlen(pool->name)), j, cfg->pools[j].line);
    }
    if (sip__cfg_check_scheduling(c, pool, vals, ikey)) return -1;
    if (sip__cfg_check_sla(c, pool, vals[P_SLA], ikey)) return -1;
    if (sip__cfg_check_autoscale(c, pool, vals[P_AUTOSCALE], vals[P_POOL_SIZE], ikey)) return -1;
    if (check_pool(c, pool, item, vals, ikey)) return -1;
  }
  return check_fallbacks(c, cfg, v, key);
}

const char *sip__priority_name(sip__priority_level_t p) {
  return (unsigned)p < SIP__PRIO_LEVELS ? priority_names[p] : "unknown";
}
