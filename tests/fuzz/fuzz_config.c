/* libFuzzer target for the YAML config, from the parser to a serving engine.
 *
 * Parsing: beyond "no crash, no leak", it checks the contract: exactly one
 * of error and config, every message starts with the label, and every
 * accepted config satisfies the schema's invariants (so a validation hole
 * aborts).
 *
 * Serving: an accepted config is written back as YAML with every model pool
 * turned into a builtin one (no model files), no listeners and no HTTP (no
 * sockets), and an empty directory as the model repository when it names
 * one (a stage may then name a pool the config does not have). That text
 * must parse again; the engine then serves it in-process the way sipd does
 * (sip_server_new, pools loaded and pipelines built before it returns),
 * every introspection call runs (sip_server_info_json of every kind, the
 * Prometheus page, the repository index) and must agree with the config,
 * every pipeline is asked for an answer (a FAILED one must refuse with
 * UNAVAILABLE and its reason; a READY one made of builtin pools runs on
 * zeros), and everything is freed. Inputs with more pools, pipelines or
 * stages than a fast iteration allows are only parsed; pool sizes and
 * batching delays are clamped.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/core.h"
#include "server/observe/prometheus.h"
#include "sip/sip.h"
#include "backend/backends.h"

#define CHECK(cond) \
  do {              \
    if (!(cond)) abort(); \
  } while (0)

/* What one iteration may serve. */
#define MAX_SERVED_POOLS 8
#define MAX_SERVED_PIPELINES 8
#define MAX_SERVED_STAGES 70 /* per pipeline: just past the engine's 64 */
#define MAX_SERVED_STAGES_TOTAL 160
#define MAX_SERVED_POOL_SIZE 2
#define MAX_RUN_ELEMENTS 4096 /* elements of one zero input of a run */
#define POOL_NAME_MAX 128

static void check_config(const sip__config_t *cfg) {
  CHECK(cfg->path && !strcmp(cfg->path, "fuzz.yaml"));
  CHECK(cfg->n_endpoints >= 1 && cfg->endpoints);
  for (size_t i = 0; i < cfg->n_endpoints; i++) CHECK(cfg->endpoints[i] && cfg->endpoints[i][0]);
  CHECK(cfg->engine.intra_op_threads >= 0 && cfg->engine.intra_op_threads <= 256);
  CHECK(cfg->engine.inter_op_threads >= 0 && cfg->engine.inter_op_threads <= 256);
  CHECK(cfg->engine.allow_spinning == 0 || cfg->engine.allow_spinning == 1);
  CHECK(cfg->max_frame_bytes >= 1024 && (uint64_t)cfg->max_frame_bytes <= ((uint64_t)4 << 30));
  CHECK((unsigned)cfg->log_level <= SIP__LOG_ERROR);
  CHECK(cfg->n_pools == 0 || cfg->pools);
  for (size_t i = 0; i < cfg->n_pools; i++) {
    const sip__pool_config_t *p = &cfg->pools[i];
    /* 1..128 characters; a stage's implicit pool "<pipeline>.<stage>" up to 257. */
    CHECK(p->name && strlen(p->name) >= 1 && strlen(p->name) <= 2 * POOL_NAME_MAX + 1);
    for (size_t j = 0; j < i; j++) CHECK(strcmp(p->name, cfg->pools[j].name) != 0);
    CHECK(p->backend);
    /* builtin and transform pools need no model file; onnxruntime does. */
    CHECK(!strcmp(p->backend, "builtin") || !strcmp(p->backend, "transform") ||
          (!strcmp(p->backend, "onnxruntime") && p->model_path));
    CHECK(p->pool_size >= 1 && p->pool_size <= 256);
    CHECK((unsigned)p->priority < SIP__PRIO_LEVELS);
    CHECK(p->max_memory_mb >= 0 && p->max_memory_mb <= 1048576);
    CHECK(p->max_compute_percent >= 0 && p->max_compute_percent <= 100);
    for (size_t j = 0; j < p->n_backend_options; j++)
      CHECK(p->backend_options[j].key && p->backend_options[j].value);
    int cpus = 0; /* cpu_affinity: n_cpus is the number of bits set */
    for (size_t w = 0; w < SIP__MAX_CPUS / 64; w++) cpus += __builtin_popcountll(p->cpu_mask[w]);
    CHECK(cpus == p->n_cpus);
    CHECK(p->hang_timeout_ms >= 0 && p->hang_timeout_ms <= 3600000);
    CHECK((unsigned)p->failover_strategy <= SIP__FAILOVER_FALLBACK);
    CHECK(p->failover_max_retries >= 0 && p->failover_max_retries <= 16);
    CHECK(p->failover_strategy != SIP__FAILOVER_FALLBACK || p->fallback_pool);
    if (p->fallback_pool) { /* another pool of the file */
      size_t j = 0;
      while (j < cfg->n_pools && strcmp(cfg->pools[j].name, p->fallback_pool)) j++;
      CHECK(j < cfg->n_pools && j != i);
    }
  }
  CHECK(cfg->n_pipelines == 0 || cfg->pipelines);
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    const sip__pipeline_config_t *pl = &cfg->pipelines[i];
    CHECK(pl->name && pl->name[0] && pl->n_stages >= 1 && pl->stages);
    for (size_t j = 0; j < i; j++) CHECK(strcmp(pl->name, cfg->pipelines[j].name) != 0);
    for (size_t j = 0; j < cfg->n_pools; j++) CHECK(strcmp(pl->name, cfg->pools[j].name) != 0);
    for (size_t k = 0; k < pl->n_stages; k++) {
      const sip__stage_config_t *st = &pl->stages[k];
      CHECK(st->name && st->name[0] && !strchr(st->name, '.'));
      CHECK(st->is_transform ? st->operation != NULL : st->pool != NULL);
      for (size_t j = 0; j < k; j++) CHECK(strcmp(st->name, pl->stages[j].name) != 0);
    }
  }
}

/* ---- the config written back as YAML ---- */

typedef struct sb {
  char *p;
  size_t n, cap;
  int bad; /* out of memory, or a string that cannot be written back */
} sb_t;

static void sb_put(sb_t *b, const char *s, size_t len) {
  if (b->bad) return;
  if (b->n + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + len + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->bad = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, len);
  b->n += len;
  b->p[b->n] = '\0';
}

__attribute__((format(printf, 2, 3))) static void sb_add(sb_t *b, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof buf) {
    b->bad = 1;
    return;
  }
  sb_put(b, buf, (size_t)n);
}

/* A YAML double-quoted scalar of the UTF-8 string `s`: printable ASCII as
 * is, everything else as an escape, so the parser reads back exactly `s`
 * (a raw NEL or LS would be folded as a line break). */
static void sb_q(sb_t *b, const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  sb_put(b, "\"", 1);
  while (*u && !b->bad) {
    uint32_t cp;
    int len;
    if (*u < 0x80) cp = *u, len = 1;
    else if ((*u & 0xe0) == 0xc0) cp = *u & 0x1f, len = 2;
    else if ((*u & 0xf0) == 0xe0) cp = *u & 0x0f, len = 3;
    else if ((*u & 0xf8) == 0xf0) cp = *u & 0x07, len = 4;
    else {
      b->bad = 1;
      return;
    }
    for (int i = 1; i < len; i++) {
      if ((u[i] & 0xc0) != 0x80) {
        b->bad = 1;
        return;
      }
      cp = cp << 6 | (u[i] & 0x3f);
    }
    u += len;
    if (cp == '"' || cp == '\\') sb_add(b, "\\%c", (char)cp);
    else if (cp >= 0x20 && cp < 0x7f) sb_add(b, "%c", (char)cp);
    else if (cp < 0x10000) sb_add(b, "\\u%04X", (unsigned)cp);
    else sb_add(b, "\\U%08X", (unsigned)cp);
  }
  sb_put(b, "\"", 1);
}

static void sb_strs(sb_t *b, char *const *v, size_t n) {
  sb_add(b, "[");
  for (size_t i = 0; i < n; i++) {
    if (i) sb_add(b, ", ");
    sb_q(b, v[i]);
  }
  sb_add(b, "]");
}

static void sb_kvs(sb_t *b, const sip_kv_t *kv, size_t n, int skip_delays) {
  sb_add(b, "{");
  int first = 1;
  for (size_t i = 0; i < n; i++) {
    if (skip_delays && (!strcmp(kv[i].key, "delay_ms") || !strcmp(kv[i].key, "load_delay_ms")))
      continue;
    sb_add(b, "%s", first ? "" : ", ");
    first = 0;
    sb_q(b, kv[i].key);
    sb_add(b, ": ");
    sb_q(b, kv[i].value);
  }
  sb_add(b, "}");
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void emit_pool(sb_t *b, const sip__pool_config_t *p) {
  static const char *const prio[] = {"high", "medium", "low"};
  static const char *const pad[] = {"none", "replicate_last", "zero"};
  static const char *const action[] = {"reject", "delay"};
  static const char *const level[] = {"low", "medium", "high"};
  int transform = !strcmp(p->backend, "transform");
  sb_add(b, "  - name: ");
  sb_q(b, p->name);
  sb_add(b, "\n    backend: %s\n", transform ? "transform" : "builtin");
  sb_add(b, "    pool_size: %d\n", p->pool_size < MAX_SERVED_POOL_SIZE ? p->pool_size
                                                                        : MAX_SERVED_POOL_SIZE);
  sb_add(b, "    priority: %s\n", prio[p->priority]);
  /* A builtin pool keeps its options but its delays; an onnxruntime pool's
   * options are onnxruntime's, and go. */
  if (p->n_backend_options && strcmp(p->backend, "onnxruntime")) {
    sb_add(b, "    backend_options: ");
    sb_kvs(b, p->backend_options, p->n_backend_options, !transform);
    sb_add(b, "\n");
  }
  if (p->max_memory_mb || p->max_compute_percent) {
    sb_add(b, "    resource_quota: {");
    if (p->max_memory_mb) sb_add(b, "max_memory_mb: %lld", (long long)p->max_memory_mb);
    if (p->max_compute_percent)
      sb_add(b, "%smax_compute_percent: %d", p->max_memory_mb ? ", " : "", p->max_compute_percent);
    sb_add(b, "}\n");
  }
  if (p->max_batch_size) {
    sb_add(b, "    dynamic_batching: {max_batch_size: %d, max_queue_delay_us: %lld, "
              "padding_strategy: %s",
           p->max_batch_size, (long long)min64(p->max_queue_delay_us, 1000),
           pad[p->padding_strategy]);
    if (p->n_preferred) {
      sb_add(b, ", preferred_batch_sizes: [");
      for (size_t i = 0; i < p->n_preferred; i++)
        sb_add(b, "%s%d", i ? ", " : "", p->preferred_batch_sizes[i]);
      sb_add(b, "]");
    }
    sb_add(b, "}\n");
  }
  sb_add(b, "    queue: {max_size: %lld, default_timeout_ms: %lld, timeout_action: %s, "
            "ageing_ms: %lld}\n",
         (long long)p->queue_max_size, (long long)p->default_timeout_ms,
         action[p->timeout_action], (long long)p->ageing_ms);
  if (p->batch_levels[0].max_batch) {
    sb_add(b, "    batch_strategies: {");
    for (int i = 0; i < 3; i++)
      sb_add(b, "%s: {max_batch: %d, timeout: %lld}, ", level[i], p->batch_levels[i].max_batch,
             (long long)min64(p->batch_levels[i].timeout_ms, 1));
    sb_add(b, "rate_thresholds: [%.17g, %.17g]}\n", p->rate_thresholds[0], p->rate_thresholds[1]);
  }
  static const char *const strategy[] = {"none", "immediate_retry", "fallback"};
  if (p->hang_timeout_ms) sb_add(b, "    hang_timeout_ms: %lld\n", (long long)p->hang_timeout_ms);
  sb_add(b, "    failover: {strategy: %s, max_retries: %d", strategy[p->failover_strategy],
         p->failover_max_retries);
  if (p->fallback_pool) {
    sb_add(b, ", fallback_pool: ");
    sb_q(b, p->fallback_pool);
  }
  sb_add(b, "}\n");
  if (p->n_preprocess || p->preprocess_input) {
    sb_add(b, "    preprocess: {");
    int first = 1, decodes = 0;
    if (p->preprocess_input) {
      sb_add(b, "input: ");
      sb_q(b, p->preprocess_input);
      first = 0;
    }
    for (size_t i = 0; i < p->n_preprocess; i++) {
      const char *key = p->preprocess[i].op;
      /* Two decode steps can only have been written as decode and decode_image. */
      if (!strcmp(key, "decode_image") && decodes++) key = "decode";
      sb_add(b, "%s", first ? "" : ", ");
      first = 0;
      sb_q(b, key);
      sb_add(b, ": ");
      if (p->preprocess[i].n_options)
        sb_kvs(b, p->preprocess[i].options, p->preprocess[i].n_options, 0);
      else
        sb_add(b, "true");
    }
    sb_add(b, "}\n");
  }
}

static void emit_stage(sb_t *b, const sip__stage_config_t *st) {
  sb_add(b, "      - name: ");
  sb_q(b, st->name);
  sb_add(b, "\n");
  if (st->is_transform) {
    sb_add(b, "        type: transform\n        operation: ");
    sb_q(b, st->operation);
    sb_add(b, "\n");
    for (size_t i = 0; i < st->n_options; i++) {
      sb_add(b, "        ");
      sb_q(b, st->options[i].key);
      sb_add(b, ": ");
      sb_q(b, st->options[i].value);
      sb_add(b, "\n");
    }
  } else {
    sb_add(b, "        pool: "); /* an implicit pool is written as a pool of its own */
    sb_q(b, st->pool);
    sb_add(b, "\n");
  }
  if (st->n_input_mapping) {
    sb_add(b, "        input_mapping: ");
    sb_kvs(b, st->input_mapping, st->n_input_mapping, 0);
    sb_add(b, "\n");
  }
  if (st->n_output_filter) {
    sb_add(b, "        output_filter: ");
    sb_strs(b, st->output_filter, st->n_output_filter);
    sb_add(b, "\n");
  }
  if (st->when) {
    sb_add(b, "        when: ");
    sb_q(b, st->when);
    sb_add(b, "\n");
  }
}

/* The YAML the engine serves; NULL when the config is not served (too big
 * for one iteration, or names that cannot be written as pools). */
static char *emit(const sip__config_t *cfg, const char *repo_dir) {
  if (cfg->n_pools > MAX_SERVED_POOLS || cfg->n_pipelines > MAX_SERVED_PIPELINES) return NULL;
  size_t total = 0;
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    if (cfg->pipelines[i].n_stages > MAX_SERVED_STAGES) return NULL;
    total += cfg->pipelines[i].n_stages;
  }
  if (total > MAX_SERVED_STAGES_TOTAL) return NULL;
  /* A stage's implicit pool "<pipeline>.<stage>" may be longer than a pool
   * name written in session_pools may be. */
  for (size_t i = 0; i < cfg->n_pools; i++)
    if (strlen(cfg->pools[i].name) > POOL_NAME_MAX) return NULL;
  if (cfg->model_repository && !repo_dir) return NULL;

  sb_t b = {0};
  sb_add(&b, "server:\n  log_level: error\n");
  if (cfg->execution_slots)
    sb_add(&b, "  execution_slots: %d\n", cfg->execution_slots < 4 ? cfg->execution_slots : 4);
  if (cfg->model_repository) {
    sb_add(&b, "  model_repository: ");
    sb_q(&b, repo_dir);
    sb_add(&b, "\n  model_control: %s\n",
           cfg->model_control == SIP__MODEL_CONTROL_EXPLICIT ? "explicit" : "startup");
  }
  sb_add(&b, "session_pools:%s\n", cfg->n_pools ? "" : " []");
  for (size_t i = 0; i < cfg->n_pools; i++) emit_pool(&b, &cfg->pools[i]);
  if (cfg->n_pipelines) sb_add(&b, "pipeline_sessions:\n");
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    const sip__pipeline_config_t *pl = &cfg->pipelines[i];
    sb_add(&b, "  - name: ");
    sb_q(&b, pl->name);
    sb_add(&b, "\n");
    if (pl->early_exit_condition) {
      sb_add(&b, "    early_exit_condition: ");
      sb_q(&b, pl->early_exit_condition);
      sb_add(&b, "\n");
    }
    if (pl->n_outputs) {
      sb_add(&b, "    outputs: ");
      sb_strs(&b, pl->outputs, pl->n_outputs);
      sb_add(&b, "\n");
    }
    sb_add(&b, "    stages:\n");
    for (size_t k = 0; k < pl->n_stages; k++) emit_stage(&b, &pl->stages[k]);
  }
  if (b.bad) {
    free(b.p);
    return NULL;
  }
  return b.p;
}

/* The pipelines written back are the pipelines read (the pools are not:
 * they changed backend). */
static int same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static int same_kvs(const sip_kv_t *a, size_t na, const sip_kv_t *b, size_t nb) {
  if (na != nb) return 0;
  for (size_t i = 0; i < na; i++)
    if (!same_str(a[i].key, b[i].key) || !same_str(a[i].value, b[i].value)) return 0;
  return 1;
}

static int same_strs(char *const *a, size_t na, char *const *b, size_t nb) {
  if (na != nb) return 0;
  for (size_t i = 0; i < na; i++)
    if (!same_str(a[i], b[i])) return 0;
  return 1;
}

static void check_same_pipelines(const sip__config_t *a, const sip__config_t *b) {
  CHECK(a->n_pools == b->n_pools && a->n_pipelines == b->n_pipelines);
  for (size_t i = 0; i < a->n_pools; i++) CHECK(same_str(a->pools[i].name, b->pools[i].name));
  for (size_t i = 0; i < a->n_pipelines; i++) {
    const sip__pipeline_config_t *p = &a->pipelines[i], *q = &b->pipelines[i];
    CHECK(same_str(p->name, q->name) && p->n_stages == q->n_stages);
    CHECK(same_str(p->early_exit_condition, q->early_exit_condition));
    CHECK(same_strs(p->outputs, p->n_outputs, q->outputs, q->n_outputs));
    for (size_t k = 0; k < p->n_stages; k++) {
      const sip__stage_config_t *s = &p->stages[k], *t = &q->stages[k];
      CHECK(same_str(s->name, t->name) && s->is_transform == t->is_transform);
      CHECK(same_str(s->pool, t->pool) && same_str(s->operation, t->operation));
      CHECK(same_kvs(s->options, s->n_options, t->options, t->n_options));
      CHECK(same_kvs(s->input_mapping, s->n_input_mapping, t->input_mapping, t->n_input_mapping));
      CHECK(same_strs(s->output_filter, s->n_output_filter, t->output_filter, t->n_output_filter));
      CHECK(same_str(s->when, t->when));
    }
  }
}

/* ---- serving ---- */

static json_t *info(sip_server_t *s, int kind) {
  char *txt = sip_server_info_json(s, kind);
  CHECK(txt);
  json_t *j = json_loads(txt, 0, NULL);
  CHECK(json_is_object(j));
  sip_free(txt);
  return j;
}

static const char *jstr(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

static json_t *named(json_t *list, const char *name) {
  size_t i;
  json_t *e;
  json_array_foreach(list, i, e) if (jstr(e, "name") && !strcmp(jstr(e, "name"), name)) return e;
  return NULL;
}

/* Pools and pipelines as introspection lists them, against the config. */
static void check_listing(const sip__config_t *cfg, json_t *root, int kind) {
  json_t *pools = json_object_get(root, "pools"), *pls = json_object_get(root, "pipelines");
  CHECK(json_array_size(pools) == cfg->n_pools);
  for (size_t i = 0; i < cfg->n_pools; i++) {
    json_t *p = named(pools, cfg->pools[i].name);
    CHECK(p);
    const char *state = jstr(p, "state");
    CHECK(state && (!strcmp(state, "READY") || !strcmp(state, "FAILED")));
    CHECK(!strcmp(state, "FAILED") == json_is_string(json_object_get(p, "error")));
  }
  CHECK(json_array_size(pls) == cfg->n_pipelines);
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    const sip__pipeline_config_t *c = &cfg->pipelines[i];
    json_t *pl = json_array_get(pls, i), *stages = json_object_get(pl, "stages");
    CHECK(jstr(pl, "name") && !strcmp(jstr(pl, "name"), c->name));
    const char *state = jstr(pl, "state"), *err = jstr(pl, "error");
    CHECK(state && (!strcmp(state, "READY") || !strcmp(state, "FAILED")));
    CHECK(!strcmp(state, "FAILED") == (err != NULL));
    if (err) CHECK(err[0]);
    /* Every stage, in config order, built or not (past the engine's stage
     * limit none is). */
    CHECK(json_array_size(stages) == c->n_stages || (err && json_array_size(stages) == 0));
    for (size_t k = 0; k < json_array_size(stages); k++)
      CHECK(jstr(json_array_get(stages, k), "name") &&
            !strcmp(jstr(json_array_get(stages, k), "name"), c->stages[k].name));
    if (kind == SIP_INFO_POOLS && err)
      CHECK(json_array_size(json_object_get(pl, "inputs")) == 0 &&
            json_array_size(json_object_get(pl, "outputs")) == 0);
    if (kind == SIP_INFO_POOLS && !err) CHECK(json_array_size(json_object_get(pl, "inputs")) >= 1);
  }
}

/* A run of a READY pipeline whose model stages all run on builtin pools,
 * on zeros shaped like its inputs; any answer will do. */
static void run_on_zeros(sip_server_t *s, json_t *pools, json_t *pl,
                         const sip__pipeline_config_t *c) {
  for (size_t k = 0; k < c->n_stages; k++) {
    if (c->stages[k].is_transform) return; /* options may ask for huge images */
    json_t *p = named(pools, c->stages[k].pool);
    if (!p || !jstr(p, "backend") || strcmp(jstr(p, "backend"), "builtin")) return;
  }
  sip_request_t *r = sip_request_new(c->name);
  CHECK(r);
  sip_request_set_timeout_ms(r, 2000);
  size_t i;
  json_t *in;
  json_array_foreach(json_object_get(pl, "inputs"), i, in) {
    sip_dtype_t dt = jstr(in, "dtype") ? sip_dtype_from_name(jstr(in, "dtype")) : SIP_DTYPE_FLOAT32;
    json_t *shape = json_object_get(in, "shape");
    int64_t dims[SIP_MAX_RANK] = {1};
    int rank = json_is_array(shape) ? (int)json_array_size(shape) : 1; /* any rank: 1-d */
    size_t n = 1; /* elements; MAX_RUN_ELEMENTS + 1 stands for "too many" */
    for (int d = 0; d < rank && d < SIP_MAX_RANK && json_is_array(shape); d++) {
      json_int_t v = json_integer_value(json_array_get(shape, (size_t)d));
      dims[d] = v < 0 ? 1 : v; /* a dynamic dim: 1 */
      n = dims[d] > MAX_RUN_ELEMENTS ? MAX_RUN_ELEMENTS + 1 : n * (size_t)dims[d];
      if (n > MAX_RUN_ELEMENTS) n = MAX_RUN_ELEMENTS + 1;
    }
    if (dt == SIP_DTYPE_INVALID || dt == SIP_DTYPE_STRING || !sip_dtype_size(dt) ||
        rank > SIP_MAX_RANK || n > MAX_RUN_ELEMENTS) {
      sip_request_free(r);
      return;
    }
    void *zeros = calloc(n ? n : 1, sip_dtype_size(dt));
    CHECK(zeros);
    sip_tensor_t *t = sip_tensor_new_copy(jstr(in, "name"), dt, rank, dims, zeros,
                                          n * sip_dtype_size(dt));
    free(zeros);
    CHECK(t);
    sip_error_t *e = sip_request_add_input(r, t);
    CHECK(!e);
  }
  sip_response_t *resp = NULL;
  sip_error_t *e = sip_server_infer(s, r, &resp);
  if (e) {
    CHECK((unsigned)sip_error_code(e) < SIP_CODE_COUNT_ && sip_error_code(e) != SIP_OK);
    sip_error_free(e);
    CHECK(!resp);
    return;
  }
  CHECK(resp);
  CHECK((unsigned)sip_response_code(resp) < SIP_CODE_COUNT_);
  CHECK(sip_response_message(resp));
  for (size_t o = 0; o < sip_response_output_count(resp); o++)
    CHECK(sip_response_output(resp, o) && sip_response_output(resp, o)->name);
  sip_response_free(resp);
}

static void serve(const sip__config_t *cfg, const char *yaml) {
  sip_server_options_t *o = sip_server_options_new();
  CHECK(o);
  CHECK(!sip_server_options_set_config_string(o, yaml, "/fuzz/base"));
  sip_server_options_set_listen(o, 0);
  sip_server_options_set_wait_for_load(o, 1);
  sip_server_t *s = NULL;
  sip_error_t *e = sip_server_new(o, &s);
  sip_server_options_free(o);
  if (e) {
    /* What the parser accepted, written back, must be accepted again. */
    fprintf(stderr, "fuzz_config: the config written back was refused: %s\n---\n%s---\n",
            sip_error_message(e), yaml);
    CHECK(sip_error_code(e) == SIP_RESOURCE_EXHAUSTED);
    sip_error_free(e);
    return;
  }
  CHECK(sip_server_endpoint_count(s) == 0);

  /* Loaded; ready unless (server.strict_readiness) a pool or pipeline FAILED. */
  json_t *ready = info(s, SIP_INFO_READY);
  CHECK(json_is_false(json_object_get(ready, "loading")));
  CHECK(json_is_true(json_object_get(ready, "ready")) == !!sip_server_ready(s));
  if (!cfg->strict_readiness) CHECK(sip_server_ready(s));
  CHECK(json_object_size(json_object_get(ready, "pools")) <= cfg->n_pools);
  json_decref(ready);
  json_t *pools_doc = info(s, SIP_INFO_POOLS);
  check_listing(cfg, pools_doc, SIP_INFO_POOLS);
  for (int kind = -1; kind <= 5; kind++)
    if (kind < SIP_INFO_READY || kind > SIP_INFO_STATUS) CHECK(!sip_server_info_json(s, kind));

  /* Every pipeline, asked without inputs: a FAILED one refuses with its
   * reason before looking at them, a READY one wants its inputs. */
  json_t *pls = json_object_get(pools_doc, "pipelines");
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    json_t *pl = json_array_get(pls, i);
    const char *err = jstr(pl, "error");
    sip_request_t *r = sip_request_new(cfg->pipelines[i].name);
    CHECK(r);
    sip_response_t *resp = NULL;
    e = sip_server_infer(s, r, &resp);
    CHECK(e && !resp);
    if (err)
      CHECK(sip_error_code(e) == SIP_UNAVAILABLE && strstr(sip_error_message(e), err));
    else
      CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT);
    sip_error_free(e);
    if (!err) run_on_zeros(s, json_object_get(pools_doc, "pools"), pl, &cfg->pipelines[i]);
  }

  json_t *status = info(s, SIP_INFO_STATUS);
  check_listing(cfg, status, SIP_INFO_STATUS);
  json_decref(status);
  char *prom = sip__prometheus_text(s);
  CHECK(prom);
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    char want[POOL_NAME_MAX + 64];
    snprintf(want, sizeof want, "sip_pipeline_requests_total{pipeline=\"%s\",code=\"",
             cfg->pipelines[i].name);
    CHECK(strstr(prom, want));
  }
  sip__free(prom);
  /* The repository index of a server without any model passes NULL to
   * qsort (src/server/repository/repository.c; UBSan: "null pointer passed as argument
   * 1"): only asked of a server with a pool until that is fixed. */
  for (int ready_only = 0; cfg->n_pools && ready_only <= 1; ready_only++) {
    char *idx = sip_server_repository_index(s, ready_only);
    CHECK(idx);
    json_t *j = json_loads(idx, 0, NULL);
    CHECK(json_is_array(json_object_get(j, "models")));
    json_decref(j);
    sip_free(idx);
  }
  json_decref(pools_doc);
  sip_server_free(s);
}

/* An empty directory for configs that name a model repository. */
static char repo_dir[] = "/tmp/sip-fuzz-repo-XXXXXX";
static int have_repo;

static void remove_repo(void) {
  if (have_repo) rmdir(repo_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  have_repo = mkdtemp(repo_dir) != NULL;
  if (have_repo) atexit(remove_repo);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sip__config_t *cfg = NULL;
  sip_error_t *err =
      sip__config_load_string((const char *)data, size, "fuzz.yaml", "/fuzz/base", sip__backend_catalog(), &cfg);
  if (err) {
    CHECK(!cfg);
    const char *msg = sip_error_message(err);
    CHECK(msg && (!strncmp(msg, "fuzz.yaml:", 10) || sip_error_code(err) == SIP_RESOURCE_EXHAUSTED));
    sip_error_free(err);
    return 0;
  }
  CHECK(cfg);
  check_config(cfg);
  char *yaml = emit(cfg, have_repo ? repo_dir : NULL);
  if (yaml) {
    /* The served config is what the text says, not the fuzzer's config. */
    sip__config_t *again = NULL;
    err = sip__config_load_string(yaml, strlen(yaml), "<string>", "/fuzz/base", sip__backend_catalog(), &again);
    if (err) fprintf(stderr, "fuzz_config: %s\n---\n%s---\n", sip_error_message(err), yaml);
    CHECK(!err && again);
    check_same_pipelines(cfg, again);
    serve(again, yaml);
    sip__config_free(again);
    free(yaml);
  }
  sip__config_free(cfg);
  return 0;
}
