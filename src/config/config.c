/* sip — the config document and its loaders: the top-level keys, the YAML
 * text (one document, syntax errors with their position), files, a model
 * repository's config.yaml, and freeing what they made. The sections are
 * read by the files parse.h lists. */
#include "config/parse.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* A config larger than this is a mistake (or /dev/zero), not a config. */
#define CONFIG_FILE_MAX ((size_t)16 << 20)

/* pipeline_sessions is kept for after session_pools (see parse_document). */
static int defer_pipelines(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  (void)key, (void)base;
  c->pipelines = v;
  return 0;
}

/* models (seed 003's list) is read after session_pools too: its pools
 * join theirs and names must differ across both. */
static int defer_models(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  (void)key, (void)base;
  c->models = v;
  return 0;
}

enum { T_SERVER, T_POOLS, T_PIPELINES, T_ALERTS, T_TRACING, T_METRICS, T_MODELS, T_COUNT };
static const sip__field_t top_fields[T_COUNT] = {
    [T_SERVER] = {.name = "server", .type = F_SECTION, .section = &sip__cfg_server_section,
                  .doc = "Process-wide settings."},
    /* Required unless server.model_repository is set (checked in parse_document). */
    [T_POOLS] = {.name = "session_pools", .type = F_CUSTOM, .parse = sip__cfg_parse_pools,
                 .expect = POOLS_EXPECT,
                 .doc = "The model pools to serve."},
    [T_MODELS] = {.name = "models", .type = F_CUSTOM, .parse = defer_models,
                  .expect = MODELS_EXPECT,
                  .doc = "More pools, written as seed 003's model list (model_name, model_path, "
                         "input_shapes, output_nums, preprocess, max_batch_size; "
                         "docs/seed-models.md). The same list may be the whole file."},
    [T_PIPELINES] = {.name = "pipeline_sessions", .type = F_CUSTOM, .parse = defer_pipelines,
                     .expect = "a list of pipelines (docs/pipelines.md)",
                     .doc = "Declarative multi-model pipelines."},
    [T_ALERTS] = {.name = "alerts", .type = F_SECTION, .section = &sip__cfg_alerts_section,
                  .doc = "When pools' SLA alerts fire and resolve, and the webhooks they are "
                         "posted to (docs/sla.md)."},
    [T_TRACING] = {.name = "tracing", .type = F_SECTION, .section = &sip__cfg_tracing_section,
                   .doc = "Request tracing: spans exported as OTLP/HTTP JSON (docs/tracing.md)."},
    [T_METRICS] = {.name = "metrics", .type = F_SECTION, .section = &sip__cfg_metrics_section,
                   .doc = "What /metrics exports besides the sip_* families (docs/metrics.md)."},
};
const sip__section_t sip__cfg_top_section = {top_fields, T_COUNT};
_Static_assert(COUNT(top_fields) <= MAX_FIELDS, "raise MAX_FIELDS");

/* ---- entry points ----------------------------------------------------- */

static sip_error_t *syntax_error(const char *name, const yaml_parser_t *p, const char *yaml,
                                 size_t len) {
  if (p->error == YAML_MEMORY_ERROR) return SIP__OOM();
  size_t line = p->problem_mark.line + 1, col = p->problem_mark.column + 1;
  const char *problem = p->problem ? p->problem : "unknown error";
  if (p->error == YAML_READER_ERROR) {
    /* Reader errors carry a byte offset, not a mark. */
    line = 1;
    col = 1;
    for (size_t i = 0; i < p->problem_offset && i < len; i++) {
      if (yaml[i] == '\n') line++, col = 1;
      else col++;
    }
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "%s:%zu:%zu: YAML syntax error: %s (byte 0x%02x at offset %zu); "
                         "expected UTF-8 or UTF-16 text",
                         name, line, col, problem, (unsigned)p->problem_value & 0xffu,
                         p->problem_offset);
  }
  if (p->context)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "%s:%zu:%zu: YAML syntax error: %s (%s that started at %zu:%zu); "
                         "expected well-formed YAML",
                         name, line, col, problem, p->context, p->context_mark.line + 1,
                         p->context_mark.column + 1);
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "%s:%zu:%zu: YAML syntax error: %s; expected well-formed YAML", name, line,
                       col, problem);
}


static int parse_document(sip__ctx_t *c, sip__config_t *cfg) {
  char exp[1024];
  snprintf(exp, sizeof exp, "a map with keys: ");
  sip__cfg_list_fields(exp, sizeof exp, &sip__cfg_top_section, 0);
  snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "; or a list of models in seed 003's form");

  yaml_node_t *root = yaml_document_get_root_node(c->doc);
  if (!root || is_null(root))
    return sip__cfg_fail(c, root ? root->start_mark : c->doc->start_mark, "",
                    "the document is empty; expected %s", exp);
  yaml_node_t *vals[MAX_FIELDS] = {0};
  if (root->type == YAML_SEQUENCE_NODE) {
    /* Seed 003's model list as the whole file (JSON is YAML: a .json file
     * whose top level is a list lands here); the server keeps its defaults. */
    if (sip__cfg_parse_models(c, root, "", cfg)) return -1;
  } else {
    if (root->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, root, "", exp);
    if (sip__cfg_parse_map(c, root, "", &sip__cfg_top_section, exp, cfg, vals)) return -1;
    if (sip__cfg_check_alerts(c, cfg, vals[T_ALERTS])) return -1;
    if (c->models && sip__cfg_parse_models(c, c->models, "models", cfg)) return -1;
    /* Stages refer to pools and add their own: pipelines come after every
     * session_pools entry, in whichever order the keys are written. */
    if (c->pipelines && sip__cfg_parse_pipelines(c, c->pipelines, "pipeline_sessions", cfg))
      return -1;
    /* Pipelines bring their own pools (stages naming a model_path); a stage
     * naming a pool that no entry makes is sip__cfg_check_pipelines' error. */
    if (!vals[T_POOLS] && !vals[T_MODELS] && !cfg->model_repository && !cfg->n_pipelines)
      return sip__cfg_fail(c, root->start_mark, "session_pools",
                      "missing; expected %s, models, a server.model_repository, or "
                      "pipeline_sessions whose stages name a model_path", POOLS_EXPECT);
  }
  if (cfg->model_repository) {
    char *r = sip__cfg_resolve_path(c->base_dir, cfg->model_repository);
    if (!r) return sip__cfg_oom(c);
    sip__free(cfg->model_repository);
    cfg->model_repository = r;
  }
  if (cfg->state_dir) {
    char *r = sip__cfg_resolve_path(c->base_dir, cfg->state_dir);
    if (!r) return sip__cfg_oom(c);
    sip__free(cfg->state_dir);
    cfg->state_dir = r;
  }
  if (sip__cfg_check_security(c, cfg, root)) return -1;
  if (sip__cfg_check_pipelines(c, cfg, root)) return -1;
  if (cfg->n_endpoints == 0) {
    cfg->endpoints = sip__calloc(1, sizeof *cfg->endpoints);
    if (!cfg->endpoints) return sip__cfg_oom(c);
    cfg->n_endpoints = 1;
    if (!(cfg->endpoints[0] = sip__strdup(DEFAULT_ENDPOINT))) return sip__cfg_oom(c);
  }
  return 0;
}

/* Runs libyaml over the text and `body` over its one document; refuses a
 * second document (it would be silently ignored). Returns c->err. */
static sip_error_t *parse_text(sip__ctx_t *c, const char *yaml, size_t len,
                               int (*body)(sip__ctx_t *c, void *arg), void *arg) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return SIP__OOM();
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);

  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) { /* libyaml already freed `doc` */
    c->err = syntax_error(c->name, &parser, yaml, len);
  } else {
    c->doc = &doc;
    if (body(c, arg) == 0) {
      yaml_document_t extra;
      if (!yaml_parser_load(&parser, &extra)) {
        c->err = syntax_error(c->name, &parser, yaml, len);
      } else {
        if (yaml_document_get_root_node(&extra))
          sip__cfg_fail(c, extra.start_mark, "", "a second YAML document starts here; expected exactly "
                   "one document");
        yaml_document_delete(&extra);
      }
    }
    yaml_document_delete(&doc);
    c->doc = NULL;
  }
  yaml_parser_delete(&parser);
  return c->err;
}

static int parse_document_body(sip__ctx_t *c, void *cfg) { return parse_document(c, cfg); }

sip_error_t *sip__config_load_string(const char *yaml, size_t len, const char *name,
                                     const char *base_dir, const sip__backend_catalog_t *backends,
                                     sip__config_t **out) {
  if (!out) return sip_error_new(SIP_INVALID_ARGUMENT, "config: out is NULL");
  *out = NULL;
  if (!backends) return sip_error_new(SIP_INVALID_ARGUMENT, "config: no backend table given");
  if (!yaml && len) return sip_error_new(SIP_INVALID_ARGUMENT, "config: text is NULL");
  if (!yaml) yaml = "";
  if (!name) name = "<string>";

  sip__config_t *cfg = sip__calloc(1, sizeof *cfg);
  if (!cfg) return SIP__OOM();
  if (!(cfg->path = sip__strdup(name))) {
    sip__free(cfg);
    return SIP__OOM();
  }
  sip__cfg_apply_defaults(&sip__cfg_top_section, cfg);

  sip__ctx_t c = {.name = cfg->path, .base_dir = base_dir, .backends = backends};
  sip_error_t *e = parse_text(&c, yaml, len, parse_document_body, cfg);
  if (e) {
    sip__config_free(cfg);
    return e;
  }
  *out = cfg;
  return NULL;
}

sip_error_t *sip__config_read_file(const char *path, char **buf_out, size_t *len_out) {
  char eb[256];
  *buf_out = NULL;
  *len_out = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return sip_error_new(SIP_NOT_FOUND, "%s: cannot open the config file: %s", path,
                         strerror_r(errno, eb, sizeof eb));
  size_t cap = 4096, n = 0;
  char *buf = sip__malloc(cap);
  sip_error_t *err = NULL;
  if (!buf) err = SIP__OOM();
  while (!err) {
    if (n == cap) {
      if (cap >= CONFIG_FILE_MAX) {
        err = sip_error_new(SIP_INVALID_ARGUMENT,
                            "%s: the file is larger than %zu MiB; expected a config file", path,
                            CONFIG_FILE_MAX >> 20);
        break;
      }
      char *nb = sip__realloc(buf, cap * 2);
      if (!nb) {
        err = SIP__OOM();
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f))
        err = sip_error_new(SIP_NOT_FOUND, "%s: cannot read the config file: %s", path,
                            strerror_r(errno, eb, sizeof eb));
      break;
    }
  }
  fclose(f);
  if (err) {
    sip__free(buf);
    return err;
  }
  *buf_out = buf;
  *len_out = n;
  return NULL;
}

sip_error_t *sip__config_load_file(const char *path, const sip__backend_catalog_t *backends,
                                   sip__config_t **out) {
  if (!out) return sip_error_new(SIP_INVALID_ARGUMENT, "config: out is NULL");
  *out = NULL;
  if (!path || !path[0]) return sip_error_new(SIP_INVALID_ARGUMENT, "config: no file path given");
  char *buf = NULL, *copy = NULL;
  size_t n = 0;
  sip_error_t *err = sip__config_read_file(path, &buf, &n);
  if (!err && !(copy = sip__strdup(path))) err = SIP__OOM();
  if (!err) err = sip__config_load_string(buf, n, path, dirname(copy), backends, out);
  sip__free(copy);
  sip__free(buf);
  return err;
}

/* ---- a model repository's config.yaml ---------------------------------- */

/* Field by field what a session_pools entry holds, minus name/model_path
 * (they come from the repository layout), plus version_policy. */
static int parse_model_body(sip__ctx_t *c, void *arg) {
  sip__pool_config_t *pool = arg;
  char exp[1024];
  snprintf(exp, sizeof exp, "a map with keys: ");
  sip__cfg_list_fields(exp, sizeof exp, &sip__cfg_pool_section, IN_MODEL);
  yaml_node_t *root = yaml_document_get_root_node(c->doc);
  yaml_node_t *vals[MAX_FIELDS] = {0};
  if (!root || is_null(root)) return 0; /* an empty file: every default */
  if (root->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, root, "", exp);
  if (sip__cfg_parse_map(c, root, "", &sip__cfg_pool_section, exp, pool, vals)) return -1;
  if (sip__cfg_check_sla(c, pool, vals[P_SLA], "")) return -1;
  if (sip__cfg_check_autoscale(c, pool, vals[P_AUTOSCALE], vals[P_POOL_SIZE], "")) return -1;
  if (sip__cfg_check_scheduling(c, pool, vals, "")) return -1;
  if (!pool->backend && pool->model_path) { /* the version's file decides */
    const char *b = sip__cfg_backend_for(c, pool->model_path);
    if (b && !(pool->backend = sip__strdup(b))) return sip__cfg_oom(c);
  }
  return sip__cfg_check_backend_options(c, pool, vals[P_OPTIONS], "");
}

/* sip__config_load_model, or with `text` (not NULL) read in place of the
 * file, `path` naming it in messages. */
static sip_error_t *load_model(const char *path, const char *text, size_t text_len,
                               const char *name, const char *model_path,
                               const sip__backend_catalog_t *backends, sip__pool_config_t **out) {
  *out = NULL;
  if (!backends) return sip_error_new(SIP_INVALID_ARGUMENT, "config: no backend table given");
  sip__pool_config_t *pool = sip__calloc(1, sizeof *pool);
  if (!pool) return SIP__OOM();
  sip__cfg_apply_defaults(&sip__cfg_pool_section, pool);
  pool->version_latest = 1;
  pool->line = 1;
  sip_error_t *e = NULL;
  if (!(pool->name = sip__strdup(name)) || (model_path && !(pool->model_path = sip__strdup(model_path))))
    e = SIP__OOM();
  char *buf = NULL; /* the file's text, when no text was given */
  if (!e && !text && path && !(e = sip__config_read_file(path, &buf, &text_len))) text = buf;
  sip__ctx_t c = {.name = path, .where = IN_MODEL, .backends = backends};
  if (!e && text) e = parse_text(&c, text, text_len, parse_model_body, pool);
  sip__free(buf);
  if (!e && !pool->backend) {
    /* No config.yaml, or one without a backend: the version's file decides,
     * else the default backend of model directories. */
    const char *b = model_path                 ? sip__cfg_backend_for(&c, model_path)
                    : backends->default_backend ? backends->default_backend()
                                                : NULL;
    if (!b)
      e = sip_error_new(SIP_INVALID_ARGUMENT, "model '%s': no backend claims %s; expected a "
                        "backend in its config.yaml", name, model_path ? model_path : "its files");
    else if (!(pool->backend = sip__strdup(b)))
      e = SIP__OOM();
  }
  if (!e && backends->platform_of) pool->platform = backends->platform_of(pool->backend);
  if (e) {
    sip__config_pool_free(pool);
    return e;
  }
  *out = pool;
  return NULL;
}

sip_error_t *sip__config_load_model(const char *path, const char *name, const char *model_path,
                                    const sip__backend_catalog_t *backends,
                                    sip__pool_config_t **out) {
  return load_model(path, NULL, 0, name, model_path, backends, out);
}

sip_error_t *sip__config_load_model_text(const char *text, size_t len, const char *source,
                                         const char *name, const char *model_path,
                                         const sip__backend_catalog_t *backends,
                                         sip__pool_config_t **out) {
  return load_model(source, text, len, name, model_path, backends, out);
}

static void pool_clear(sip__pool_config_t *p) {
  sip__free(p->name);
  sip__free(p->model_path);
  sip__free(p->backend);
  sip__cfg_kv_free(p->backend_options, p->n_backend_options);
  sip__free(p->preprocess_input);
  for (size_t j = 0; j < p->n_preprocess; j++) {
    sip__free(p->preprocess[j].op);
    sip__cfg_kv_free(p->preprocess[j].options, p->preprocess[j].n_options);
  }
  sip__free(p->preprocess);
  sip__free(p->fallback_pool);
  for (int k = 0; k < SIP__SEQ_CONTROLS; k++) sip__free(p->seq_control[k]);
  sip__free(p->model_type);
  for (size_t j = 0; j < p->n_declared_inputs; j++) sip__free(p->declared_inputs[j].name);
  sip__free(p->declared_inputs);
}

static int str_same(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static int kv_same(const sip_kv_t *a, size_t na, const sip_kv_t *b, size_t nb) {
  if (na != nb) return 0;
  for (size_t i = 0; i < na; i++)
    if (!str_same(a[i].key, b[i].key) || !str_same(a[i].value, b[i].value)) return 0;
  return 1;
}

#define SAME(f) (a->f == b->f)
#define SAME_ARRAY(f) (!memcmp(a->f, b->f, sizeof a->f))

int sip__config_pool_same(const sip__pool_config_t *a, const sip__pool_config_t *b) {
  if (!str_same(a->name, b->name) || !str_same(a->model_path, b->model_path) ||
      !str_same(a->backend, b->backend) || !str_same(a->preprocess_input, b->preprocess_input))
    return 0;
  if (!SAME(pool_size) || !SAME(priority) || !SAME(max_memory_mb) || !SAME(max_compute_percent) ||
      !SAME(max_batch_size) || !SAME(max_queue_delay_us) || !SAME(n_preferred) ||
      !SAME_ARRAY(preferred_batch_sizes) || !SAME(padding_strategy) || !SAME(queue_max_size) ||
      !SAME(default_timeout_ms) || !SAME(timeout_action) || !SAME(ageing_ms) ||
      !SAME(preprocess_fixed) || !SAME_ARRAY(cpu_mask) || !SAME(n_cpus) ||
      !SAME(version_policy) || !SAME(version_latest) || !SAME(n_versions) ||
      !SAME_ARRAY(versions) || !SAME(idem_enabled) || !SAME(idem_ttl_s) ||
      !SAME(idem_max_entries) || !SAME(idem_max_bytes) || !SAME(hang_timeout_ms) ||
      !SAME(health_check_interval_ms) || !SAME(failover_strategy) ||
      !SAME(failover_max_retries) || !str_same(a->fallback_pool, b->fallback_pool) ||
      !SAME(standby_enabled) || !SAME(standby_count) || !SAME(standby_health_ms) ||
      !SAME(sla.enabled) || !SAME(sla.latency_p99_ms) || !SAME(sla.availability) ||
      !SAME(sla.min_throughput_rps) || !SAME(sla.window_s) || !SAME(sla.horizon_windows) ||
      !SAME(isolation) || !SAME(idle_spin_us) || !SAME(residency) ||
      memcmp(&a->autoscale, &b->autoscale, sizeof a->autoscale) ||
      !SAME(response_cache))
    return 0;
  for (int i = 0; i < 3; i++)
    if (a->batch_levels[i].max_batch != b->batch_levels[i].max_batch ||
        a->batch_levels[i].timeout_ms != b->batch_levels[i].timeout_ms)
      return 0;
  if (a->rate_thresholds[0] != b->rate_thresholds[0] ||
      a->rate_thresholds[1] != b->rate_thresholds[1])
    return 0;
  if (!kv_same(a->backend_options, a->n_backend_options, b->backend_options,
               b->n_backend_options) ||
      a->n_preprocess != b->n_preprocess)
    return 0;
  if (!str_same(a->model_type, b->model_type) || !SAME(output_nums) ||
      !SAME(n_declared_inputs))
    return 0;
  for (size_t i = 0; i < a->n_declared_inputs; i++) {
    const sip__declared_input_t *u = &a->declared_inputs[i], *v = &b->declared_inputs[i];
    if (!str_same(u->name, v->name) || u->rank != v->rank || u->dtype != v->dtype ||
        u->format != v->format || memcmp(u->dims, v->dims, sizeof u->dims))
      return 0;
  }
  for (size_t i = 0; i < a->n_preprocess; i++)
    if (!str_same(a->preprocess[i].op, b->preprocess[i].op) ||
        !kv_same(a->preprocess[i].options, a->preprocess[i].n_options, b->preprocess[i].options,
                 b->preprocess[i].n_options))
      return 0;
  return 1;
}

static int strs_same(char *const *a, size_t na, char *const *b, size_t nb) {
  if (na != nb) return 0;
  for (size_t i = 0; i < na; i++)
    if (!str_same(a[i], b[i])) return 0;
  return 1;
}

int sip__config_pipelines_same(const sip__config_t *x, const sip__config_t *y) {
  if (x->n_pipelines != y->n_pipelines) return 0;
  for (size_t i = 0; i < x->n_pipelines; i++) {
    const sip__pipeline_config_t *a = &x->pipelines[i], *b = &y->pipelines[i];
    if (!str_same(a->name, b->name) || !str_same(a->early_exit_condition, b->early_exit_condition) ||
        !strs_same(a->outputs, a->n_outputs, b->outputs, b->n_outputs) || !SAME(n_stages) ||
        !SAME(n_stage_timeout_ms) ||
        (a->n_stage_timeout_ms &&
         memcmp(a->stage_timeout_ms, b->stage_timeout_ms,
                a->n_stage_timeout_ms * sizeof *a->stage_timeout_ms)))
      return 0;
    for (size_t k = 0; k < a->n_stages; k++) {
      const sip__stage_config_t *u = &a->stages[k], *v = &b->stages[k];
      if (!str_same(u->name, v->name) || u->is_transform != v->is_transform ||
          !str_same(u->pool, v->pool) || !str_same(u->operation, v->operation) ||
          !str_same(u->when, v->when) ||
          !kv_same(u->options, u->n_options, v->options, v->n_options) ||
          !kv_same(u->input_mapping, u->n_input_mapping, v->input_mapping, v->n_input_mapping) ||
          !strs_same(u->output_filter, u->n_output_filter, v->output_filter, v->n_output_filter))
        return 0;
    }
  }
  return 1;
}

#undef SAME
#undef SAME_ARRAY

void sip__config_pool_free(sip__pool_config_t *p) {
  if (!p) return;
  pool_clear(p);
  sip__free(p);
}

void sip__config_free(sip__config_t *cfg) {
  if (!cfg) return;
  sip__free(cfg->path);
  for (size_t i = 0; i < cfg->n_endpoints; i++) sip__free(cfg->endpoints[i]);
  sip__free(cfg->endpoints);
  sip__free(cfg->http);
  sip__free(cfg->grpc);
  sip__free(cfg->dashboard);
  sip__free(cfg->model_repository);
  sip__free(cfg->tracing.otlp_endpoint);
  sip__free(cfg->tracing.service_name);
  sip__free(cfg->response_cache.redis_address);
  sip__free(cfg->state_dir);
  sip__cfg_security_free(cfg);
  for (size_t i = 0; i < cfg->n_pools; i++) pool_clear(&cfg->pools[i]);
  sip__free(cfg->pools);
  sip__cfg_pipelines_free(cfg);
  sip__cfg_alerts_free(cfg);
  sip__free(cfg);
}

