/* sip — pipeline_sessions[] and their stages. Their keys are read by hand
 * (a transform stage's unknown keys are its operation's options); the
 * tables sip__cfg_pipeline_keys and sip__cfg_stage_keys below document them.
 *
 *   pipeline_sessions:
 *     - name: ocr
 *       early_exit_condition: "len(det.boxes) == 0"      # optional
 *       outputs: [rec.text, det.boxes]                    # optional; default: every sink's outputs
 *       stages:
 *         - {name: det, pool: ocr_det}                    # a model stage on an existing pool
 *         - {name: post, type: transform, operation: db_postprocess, thresh: 0.3,
 *            input_mapping: {probs: det.sigmoid_0.tmp_0}}
 *         - {name: cls, model_path: models/cls.model, pool_size: 2,  # an implicit pool "ocr.cls"
 *            input_mapping: {x: crop.output}, when: "len(post.boxes) > 0"}
 *
 * Stage keys: name, type (model | transform), pool, model_path, pool_size, operation,
 * input_mapping, output_filter, when. A transform stage's other keys are the operation's
 * options (validated by the transform itself, here, with file:line:col). */

#include "config/parse.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "ops/expr.h"
#include "ops/transforms.h"

#define STAGE_KEYS \
  "name, type, pool, model_path, pool_size, operation, input_mapping, output_filter, when"
#define PIPELINE_KEYS "name, stages, early_exit_condition, outputs, stage_timeout_ms"

/* The keys above, for docs/config.md; tests/unit/config/test_config_doc.c checks
 * that they are the keys the parsers below accept. */
const sip__cfg_key_doc_t sip__cfg_pipeline_keys[] = {
    {"name", "a name of 1..128 characters from A-Z a-z 0-9 _ . -", "required",
     "Unique name clients address the pipeline by; no pool may have it too."},
    {"stages", "a non-empty list of stages (below)", "required",
     "The stages; each reads pipeline inputs or outputs of stages listed before it."},
    {"early_exit_condition", "a condition (docs/expressions.md)", "none",
     "Checked after every stage: when true, no further stage starts and the answer has what ran."},
    {"outputs", "a list of \"<stage>.<output>\"", "every sink's outputs",
     "The outputs the pipeline returns."},
    {"stage_timeout_ms", "a list of integers 0..86400000, at most one per stage", "none",
     "Each stage's time limit in stage order (0: none); a request's pipeline_config.stage_timeout_ms "
     "replaces the list."},
    {NULL, NULL, NULL, NULL},
};

const sip__cfg_key_doc_t sip__cfg_stage_keys[] = {
    {"name", "a name of 1..128 characters from A-Z a-z 0-9 _ - (no dots; not 'pipeline')",
     "required",
     "Unique name in the pipeline; later stages read its outputs as <stage>.<output>."},
    {"type", "model or transform", "model",
     "model: run a pool; transform: run a transform operation (docs/transforms.md)."},
    {"pool", "the name of a session pool", NULL,
     "Model stage: the pool it runs on (exactly one of pool and model_path)."},
    {"model_path", MODEL_PATH_EXPECT, NULL,
     "Model stage: a model for this stage alone, served by its own pool '<pipeline>.<stage>'; "
     "relative to the config file."},
    {"pool_size", "an integer 1..256", "1",
     "Model stage with model_path: number of warm sessions of its own pool."},
    {"operation", "a transform operation (docs/transforms.md)", NULL,
     "Transform stage: the operation; the stage's other keys are its options."},
    {"input_mapping", "a map input name -> \"pipeline.<input>\" or \"<stage>.<output>\"", NULL,
     "Where each input of the stage comes from: a pipeline input or an earlier stage's output."},
    {"output_filter", "a list of output names", "all outputs",
     "The stage's outputs that are kept."},
    {"when", "a condition (docs/expressions.md)", "always",
     "The stage runs only when it is true (it may look at earlier stages); else it is skipped."},
    {NULL, NULL, NULL, NULL},
};

static void stage_clear(sip__stage_config_t *st) {
  sip__free(st->name);
  sip__free(st->pool);
  sip__free(st->operation);
  sip__free(st->when);
  sip__cfg_kv_free(st->options, st->n_options);
  sip__cfg_kv_free(st->input_mapping, st->n_input_mapping);
  for (size_t i = 0; i < st->n_output_filter; i++) sip__free(st->output_filter[i]);
  sip__free(st->output_filter);
}

static void pipeline_clear(sip__pipeline_config_t *pl) {
  sip__free(pl->name);
  for (size_t i = 0; i < pl->n_stages; i++) stage_clear(&pl->stages[i]);
  sip__free(pl->stages);
  sip__free(pl->early_exit_condition);
  for (size_t i = 0; i < pl->n_outputs; i++) sip__free(pl->outputs[i]);
  sip__free(pl->outputs);
  sip__free(pl->stage_timeout_ms);
}

#define TIMEOUTS_EXPECT "a list of integers 0..86400000 (milliseconds per stage in stage order; 0: none)"

static int timeout_list(sip__ctx_t *c, yaml_node_t *v, const char *key, sip__pipeline_config_t *pl) {
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, TIMEOUTS_EXPECT);
  size_t n = seq_len(v);
  pl->stage_timeout_ms = sip__calloc(n ? n : 1, sizeof *pl->stage_timeout_ms);
  if (!pl->stage_timeout_ms) return sip__cfg_oom(c);
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = sip__cfg_seq_scalar(c, v, i, key, TIMEOUTS_EXPECT);
    int64_t ms;
    if (!e) return -1;
    if (sip__cfg_parse_int(text(e), e->data.scalar.length, &ms) || ms < 0 || ms > 86400000)
      return sip__cfg_fail_kind(c, e, key, TIMEOUTS_EXPECT);
    pl->stage_timeout_ms[i] = (uint32_t)ms;
    pl->n_stage_timeout_ms = i + 1;
  }
  return 0;
}

static int string_list(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp, char ***out,
                       size_t *n_out) {
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, exp);
  size_t n = seq_len(v);
  *out = sip__calloc(n ? n : 1, sizeof **out);
  if (!*out) return sip__cfg_oom(c);
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = sip__cfg_seq_scalar(c, v, i, key, exp);
    if (!e) return -1;
    if (!((*out)[i] = sip__strndup(text(e), e->data.scalar.length))) return sip__cfg_oom(c);
    *n_out = i + 1;
  }
  return 0;
}

/* A reference "stage.output" or "pipeline.input": the stage index (-1 for
 * pipeline inputs), or -2 when it names no stage of this pipeline. */
static int ref_stage(const sip__pipeline_config_t *pl, size_t n_known, const char *ref) {
  const char *dot = strchr(ref, '.');
  if (!dot || dot == ref || !dot[1]) return -2;
  size_t sl = (size_t)(dot - ref);
  if (sl == 8 && !strncmp(ref, "pipeline", 8)) return -1;
  for (size_t i = 0; i < n_known; i++)
    if (strlen(pl->stages[i].name) == sl && !strncmp(pl->stages[i].name, ref, sl)) return (int)i;
  return -2;
}

static int check_expr(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *textv) {
  sip__expr_t *e = NULL;
  sip_error_t *err = sip__expr_parse(textv, &e);
  sip__expr_free(e);
  if (!err) return 0;
  int rc = sip__cfg_fail(c, v->start_mark, key, "%s; expected a condition (docs/expressions.md)",
                    sip_error_message(err));
  sip_error_free(err);
  return rc;
}

static int parse_stage(sip__ctx_t *c, sip__config_t *cfg, sip__pipeline_config_t *pl, size_t si,
                       yaml_node_t *m, const char *key) {
  sip__stage_config_t *st = &pl->stages[si];
  char k[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (m->type != YAML_MAPPING_NODE)
    return sip__cfg_fail_kind(c, m, key, "a map with keys: " STAGE_KEYS " (and a transform's options)");
  st->line = (int)m->start_mark.line + 1;
  yaml_node_t *type = NULL, *model_path = NULL, *pool_size = NULL, *when = NULL, *name = NULL;
  size_t n_pairs = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
  /* First pass: the type decides whether unknown keys are options or errors. */
  for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top; pr++) {
    yaml_node_t *kn = yaml_document_get_node(c->doc, pr->key);
    yaml_node_t *vn = yaml_document_get_node(c->doc, pr->value);
    if (kn && kn->type == YAML_SCALAR_NODE && !strcmp(text(kn), "type")) type = vn;
  }
  if (type) {
    sip__cfg_key_join(k, key, "type", 4);
    if (sip__cfg_want_scalar(c, type, k, "model or transform")) return -1;
    if (!strcmp(text(type), "transform"))
      st->is_transform = 1;
    else if (strcmp(text(type), "model"))
      return sip__cfg_fail(c, type->start_mark, k, "%s; expected model or transform",
                      sip__cfg_show(shown, sizeof shown, text(type), type->data.scalar.length));
  }
  if (st->is_transform) {
    st->options = sip__calloc(n_pairs ? n_pairs : 1, sizeof *st->options);
    if (!st->options) return sip__cfg_oom(c);
  }
  for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top; pr++) {
    yaml_node_t *kn, *vn;
    if (sip__cfg_pair(c, pr, &kn, &vn)) return -1;
    if (kn->type != YAML_SCALAR_NODE)
      return sip__cfg_fail(c, kn->start_mark, key, "a key is not a scalar; expected one of: " STAGE_KEYS);
    const char *kt = text(kn);
    sip__cfg_key_join(k, key, kt, kn->data.scalar.length);
    if (sip__cfg_dup_key(c, m, pr, kn, k, "key")) return -1;
    if (!strcmp(kt, "type")) continue;
    if (!strcmp(kt, "name")) {
      if (sip__cfg_want_scalar(c, vn, k, "a stage name [A-Za-z0-9_-]{1,128}")) return -1;
      if (!sip__cfg_valid_pool_name(text(vn), vn->data.scalar.length) || strchr(text(vn), '.') ||
          !strcmp(text(vn), "pipeline"))
        return sip__cfg_fail(c, vn->start_mark, k,
                        "%s; expected a stage name of 1..128 characters from A-Z a-z 0-9 _ - "
                        "(no dots; 'pipeline' is reserved)",
                        sip__cfg_show(shown, sizeof shown, text(vn), vn->data.scalar.length));
      if (!(st->name = sip__strdup(text(vn)))) return sip__cfg_oom(c);
      name = vn;
    } else if (!strcmp(kt, "pool") && !st->is_transform) {
      if (sip__cfg_want_scalar(c, vn, k, "the name of a session pool")) return -1;
      if (!(st->pool = sip__strdup(text(vn)))) return sip__cfg_oom(c);
    } else if (!strcmp(kt, "model_path") && !st->is_transform) {
      if (sip__cfg_want_scalar(c, vn, k, MODEL_PATH_EXPECT)) return -1;
      model_path = vn;
    } else if (!strcmp(kt, "pool_size") && !st->is_transform) {
      pool_size = vn;
    } else if (!strcmp(kt, "operation") && st->is_transform) {
      if (sip__cfg_want_scalar(c, vn, k, sip__transform_op_names())) return -1;
      if (!(st->operation = sip__strdup(text(vn)))) return sip__cfg_oom(c);
    } else if (!strcmp(kt, "input_mapping")) {
      const char *exp = "a map input name -> \"pipeline.<input>\" or \"<stage>.<output>\"";
      if (vn->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, vn, k, exp);
      size_t n = (size_t)(vn->data.mapping.pairs.top - vn->data.mapping.pairs.start);
      st->input_mapping = sip__calloc(n ? n : 1, sizeof *st->input_mapping);
      if (!st->input_mapping) return sip__cfg_oom(c);
      for (yaml_node_pair_t *q = vn->data.mapping.pairs.start; q < vn->data.mapping.pairs.top; q++) {
        yaml_node_t *ik, *iv;
        char mk[KEY_MAX];
        if (sip__cfg_pair(c, q, &ik, &iv)) return -1;
        if (sip__cfg_want_scalar(c, ik, k, exp)) return -1;
        sip__cfg_key_join(mk, k, text(ik), ik->data.scalar.length);
        if (sip__cfg_dup_key(c, vn, q, ik, mk, "input")) return -1;
        if (sip__cfg_want_scalar(c, iv, mk, exp)) return -1;
        int src = ref_stage(pl, si, text(iv));
        if (src == -2)
          return sip__cfg_fail(c, iv->start_mark, mk,
                          "%s names no earlier stage of pipeline '%s'; expected \"pipeline.<input>\" "
                          "or \"<stage>.<output>\" of a stage listed before this one",
                          sip__cfg_show(shown, sizeof shown, text(iv), iv->data.scalar.length), pl->name);
        sip_kv_t *kv = &st->input_mapping[st->n_input_mapping++];
        kv->key = sip__strdup(text(ik));
        kv->value = sip__strdup(text(iv));
        if (!kv->key || !kv->value) return sip__cfg_oom(c);
      }
    } else if (!strcmp(kt, "output_filter")) {
      if (string_list(c, vn, k, "a list of output names", &st->output_filter,
                      &st->n_output_filter))
        return -1;
    } else if (!strcmp(kt, "when")) {
      if (sip__cfg_want_scalar(c, vn, k, "a condition (docs/expressions.md)")) return -1;
      if (check_expr(c, vn, k, text(vn))) return -1;
      if (!(st->when = sip__strdup(text(vn)))) return sip__cfg_oom(c);
      when = vn;
    } else if (st->is_transform) {
      sip_kv_t *kv = &st->options[st->n_options];
      char *val = NULL;
      if (sip__cfg_scalar_or_list(c, vn, k, "a scalar or a list of scalars", &val)) return -1;
      if (val && sip__cfg_is_path_option(kt)) { /* like model_path: relative to the config file */
        char *r = sip__cfg_resolve_path(c->base_dir, val);
        sip__free(val);
        if (!(val = r)) return sip__cfg_oom(c);
      }
      kv->key = sip__strdup(kt);
      kv->value = val;
      st->n_options++;
      if (!kv->key) return sip__cfg_oom(c);
    } else {
      return sip__cfg_fail(c, kn->start_mark, k, "unknown key for a model stage; expected one of: " STAGE_KEYS);
    }
  }
  sip__cfg_key_join(k, key, "name", 4);
  if (!st->name) return sip__cfg_fail(c, m->start_mark, k, "missing; expected a stage name");
  for (size_t j = 0; j < si; j++)
    if (!strcmp(pl->stages[j].name, st->name))
      return sip__cfg_fail(c, name->start_mark, k, "'%s' is already the name of stages[%zu]; expected unique "
                      "stage names", st->name, j);
  if (when) {
    /* A condition may only look at stages that ran before this one. */
    sip__expr_t *e = NULL;
    sip_error_t *err = sip__expr_parse(st->when, &e);
    sip_error_free(err);
    const char *const *refs;
    size_t n = e ? sip__expr_refs(e, &refs) : 0;
    for (size_t i = 0; i < n; i++)
      if (ref_stage(pl, si, refs[i]) == -2) {
        sip__cfg_key_join(k, key, "when", 4);
        int rc = sip__cfg_fail(c, when->start_mark, k,
                          "'%s' names no earlier stage of pipeline '%s'; expected references to "
                          "stages listed before this one (or pipeline.<input>)",
                          refs[i], pl->name);
        sip__expr_free(e);
        return rc;
      }
    sip__expr_free(e);
  }
  if (st->is_transform) {
    sip__cfg_key_join(k, key, "operation", 9);
    if (!st->operation)
      return sip__cfg_fail(c, m->start_mark, k, "missing; expected one of: %s", sip__transform_op_names());
    sip__transform_t *t = NULL;
    sip_error_t *err = sip__transform_new(st->operation, st->options, st->n_options, &t);
    sip__transform_free(t);
    if (err) {
      int rc = sip__cfg_fail(c, m->start_mark, key, "%s", sip_error_message(err));
      sip_error_free(err);
      return rc;
    }
    return 0;
  }
  /* A model stage runs on a pool: a named one, or an implicit pool of its
   * own model_path named "<pipeline>.<stage>". */
  sip__cfg_key_join(k, key, "pool", 4);
  if (!!st->pool == !!model_path)
    return sip__cfg_fail(c, m->start_mark, k, "%s; expected exactly one of pool (an existing pool) or "
                    "model_path (a model for this stage alone)", st->pool ? "both pool and model_path "
                    "are set" : "neither pool nor model_path is set");
  if (pool_size && !model_path)
    return sip__cfg_fail(c, pool_size->start_mark, key, "pool_size applies to a stage's own model_path; "
                    "expected it on the pool '%s' instead", st->pool);
  if (model_path) {
    const char *written = text(model_path);
    const char *ext = sip__cfg_path_ext(written);
    sip__cfg_key_join(k, key, "model_path", 10);
    if (ext && !strcasecmp(ext, ".om"))
      return sip__cfg_fail(c, model_path->start_mark, k,
                      "%s is a CANN offline model (.om), but this build has no CANN backend; "
                      "expected one of %s, or a model directory",
                      sip__cfg_show(shown, sizeof shown, written, model_path->data.scalar.length),
                      c->backends->formats());
    char *own = sip__asprintf("%s.%s", pl->name, st->name);
    if (!own) return sip__cfg_oom(c);
    for (size_t j = 0; j < cfg->n_pools; j++) {
      if (strcmp(cfg->pools[j].name, own)) continue;
      int rc = sip__cfg_fail(c, model_path->start_mark, k,
                        "this stage's own pool would be named '%s', but a pool of that name exists "
                        "(line %d); expected distinct names: rename the pool, the pipeline or the "
                        "stage, or run the stage on it with pool: %s",
                        own, cfg->pools[j].line, own);
      sip__free(own);
      return rc;
    }
    sip__pool_config_t *v = sip__reallocarray(cfg->pools, cfg->n_pools + 1, sizeof *v);
    if (!v) {
      sip__free(own);
      return sip__cfg_oom(c);
    }
    cfg->pools = v;
    sip__pool_config_t *pool = &v[cfg->n_pools];
    memset(pool, 0, sizeof *pool);
    sip__cfg_apply_defaults(&sip__cfg_pool_section, pool);
    cfg->n_pools++;
    pool->line = st->line;
    pool->name = own;
    pool->model_path = sip__cfg_resolve_path(c->base_dir, written);
    const char *backend = pool->model_path ? sip__cfg_backend_for(c, pool->model_path) : NULL;
    if (pool->model_path && !backend)
      return sip__cfg_fail(c, model_path->start_mark, k, "no backend claims %s; expected one of %s, "
                      "or a model directory", sip__cfg_show(shown, sizeof shown, written,
                      model_path->data.scalar.length), c->backends->formats());
    pool->backend = backend ? sip__strdup(backend) : NULL;
    if (!pool->name || !pool->model_path || !pool->backend) return sip__cfg_oom(c);
    if (pool_size) {
      const sip__field_t *f = &sip__cfg_pool_fields[P_POOL_SIZE];
      sip__cfg_key_join(k, key, "pool_size", 9);
      if (sip__cfg_parse_value(c, f, pool_size, k, pool)) return -1;
    }
    if (!(st->pool = sip__strdup(pool->name))) return sip__cfg_oom(c);
  }
  return 0;
}

int sip__cfg_parse_pipelines(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__config_t *cfg = base;
  char ik[KEY_MAX], k[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (is_null(v)) return 0;
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, "a list of pipelines");
  size_t n = seq_len(v);
  if (!n) return 0;
  cfg->pipelines = sip__calloc(n, sizeof *cfg->pipelines);
  if (!cfg->pipelines) return sip__cfg_oom(c);
  for (size_t i = 0; i < n; i++) {
    sip__pipeline_config_t *pl = &cfg->pipelines[i];
    cfg->n_pipelines = i + 1;
    yaml_node_t *m = seq_item(c, v, i), *stages = NULL, *exit_node = NULL;
    sip__cfg_key_index(ik, key, i);
    if (!m) return sip__cfg_oom(c);
    if (m->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, m, ik, "a map with keys: " PIPELINE_KEYS);
    pl->line = (int)m->start_mark.line + 1;
    yaml_node_t *outputs = NULL, *timeouts = NULL;
    for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top; pr++) {
      yaml_node_t *kn, *vn;
      if (sip__cfg_pair(c, pr, &kn, &vn)) return -1;
      if (sip__cfg_want_scalar(c, kn, ik, PIPELINE_KEYS)) return -1;
      sip__cfg_key_join(k, ik, text(kn), kn->data.scalar.length);
      if (sip__cfg_dup_key(c, m, pr, kn, k, "key")) return -1;
      if (!strcmp(text(kn), "name")) {
        if (sip__cfg_want_scalar(c, vn, k, "a pipeline name [A-Za-z0-9_.-]{1,128}")) return -1;
        if (!sip__cfg_valid_pool_name(text(vn), vn->data.scalar.length))
          return sip__cfg_fail(c, vn->start_mark, k, "%s; expected a name of 1..128 characters from A-Z "
                          "a-z 0-9 _ . -", sip__cfg_show(shown, sizeof shown, text(vn), vn->data.scalar.length));
        if (!(pl->name = sip__strdup(text(vn)))) return sip__cfg_oom(c);
      } else if (!strcmp(text(kn), "stages")) {
        stages = vn;
      } else if (!strcmp(text(kn), "early_exit_condition")) {
        if (sip__cfg_want_scalar(c, vn, k, "a condition (docs/expressions.md)")) return -1;
        if (check_expr(c, vn, k, text(vn))) return -1;
        if (!(pl->early_exit_condition = sip__strdup(text(vn)))) return sip__cfg_oom(c);
        exit_node = vn;
      } else if (!strcmp(text(kn), "outputs")) {
        if (string_list(c, vn, k, "a list of \"<stage>.<output>\"", &pl->outputs, &pl->n_outputs))
          return -1;
        outputs = vn;
      } else if (!strcmp(text(kn), "stage_timeout_ms")) {
        if (timeout_list(c, vn, k, pl)) return -1;
        timeouts = vn;
      } else {
        return sip__cfg_fail(c, kn->start_mark, k, "unknown key; expected one of: " PIPELINE_KEYS);
      }
    }
    sip__cfg_key_join(k, ik, "name", 4);
    if (!pl->name) return sip__cfg_fail(c, m->start_mark, k, "missing; expected a pipeline name");
    for (size_t j = 0; j < i; j++)
      if (!strcmp(cfg->pipelines[j].name, pl->name))
        return sip__cfg_fail(c, m->start_mark, k, "'%s' is already the name of pipeline_sessions[%zu]; "
                        "expected unique names", pl->name, j);
    sip__cfg_key_join(k, ik, "stages", 6);
    if (!stages || stages->type != YAML_SEQUENCE_NODE || !seq_len(stages))
      return sip__cfg_fail(c, stages ? stages->start_mark : m->start_mark, k,
                      "%s; expected a non-empty list of stages", stages ? "is not a non-empty list"
                                                                    : "missing");
    size_t ns = seq_len(stages);
    pl->stages = sip__calloc(ns, sizeof *pl->stages);
    if (!pl->stages) return sip__cfg_oom(c);
    for (size_t s = 0; s < ns; s++) {
      char sk[KEY_MAX];
      sip__cfg_key_index(sk, k, s);
      pl->n_stages = s + 1;
      yaml_node_t *sm = seq_item(c, stages, s);
      if (!sm) return sip__cfg_oom(c);
      if (parse_stage(c, cfg, pl, s, sm, sk)) return -1;
    }
    const char *const *refs;
    sip__expr_t *e = NULL;
    if (pl->early_exit_condition) sip_error_free(sip__expr_parse(pl->early_exit_condition, &e));
    size_t nr = e ? sip__expr_refs(e, &refs) : 0;
    for (size_t r = 0; r < nr; r++)
      if (ref_stage(pl, pl->n_stages, refs[r]) == -2) {
        sip__cfg_key_join(k, ik, "early_exit_condition", 20);
        int rc = sip__cfg_fail(c, exit_node->start_mark, k, "'%s' names no stage of pipeline '%s'",
                          refs[r], pl->name);
        sip__expr_free(e);
        return rc;
      }
    sip__expr_free(e);
    if (pl->n_stage_timeout_ms > pl->n_stages) {
      sip__cfg_key_join(k, ik, "stage_timeout_ms", 16);
      return sip__cfg_fail(c, timeouts->start_mark, k, "%zu values for %zu stages; expected at most one "
                      "per stage, in stage order", pl->n_stage_timeout_ms, pl->n_stages);
    }
    for (size_t o = 0; o < pl->n_outputs; o++)
      if (ref_stage(pl, pl->n_stages, pl->outputs[o]) < 0) {
        sip__cfg_key_join(k, ik, "outputs", 7);
        return sip__cfg_fail(c, outputs->start_mark, k, "'%s' names no stage of pipeline '%s'; expected "
                        "\"<stage>.<output>\"", pl->outputs[o], pl->name);
      }
  }
  return 0;
}

/* After the whole document: stages name existing pools, and no pipeline is
 * named like a pool (requests name either). */
int sip__cfg_check_pipelines(sip__ctx_t *c, sip__config_t *cfg, yaml_node_t *root) {
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    sip__pipeline_config_t *pl = &cfg->pipelines[i];
    char k[KEY_MAX];
    for (size_t j = 0; j < cfg->n_pools; j++)
      if (!strcmp(cfg->pools[j].name, pl->name)) {
        snprintf(k, sizeof k, "pipeline_sessions[%zu].name", i);
        return sip__cfg_fail(c, root->start_mark, k, "'%s' is also the name of a pool (line %d); expected "
                        "pipelines and pools to have distinct names", pl->name, cfg->pools[j].line);
      }
    for (size_t s = 0; s < pl->n_stages; s++) {
      const sip__stage_config_t *st = &pl->stages[s];
      if (st->is_transform) continue;
      size_t j = 0;
      while (j < cfg->n_pools && strcmp(cfg->pools[j].name, st->pool)) j++;
      /* A pipeline is built once from its stages' loaded inputs and
       * outputs (docs/elastic.md "Residency"). */
      if (j < cfg->n_pools && cfg->pools[j].residency == SIP__RESIDENCY_ON_DEMAND) {
        snprintf(k, sizeof k, "pipeline_sessions[%zu].stages[%zu].pool", i, s);
        yaml_mark_t m = root->start_mark;
        m.line = (size_t)st->line - 1;
        return sip__cfg_fail(c, m, k, "'%s' has residency: on_demand, which a pipeline stage "
                             "cannot run on yet; expected a pinned pool (line %d)", st->pool,
                             cfg->pools[j].line);
      }
      if (cfg->model_repository) continue; /* repository models load later */
      if (j == cfg->n_pools) {
        snprintf(k, sizeof k, "pipeline_sessions[%zu].stages[%zu].pool", i, s);
        yaml_mark_t m = root->start_mark;
        m.line = (size_t)st->line - 1;
        return sip__cfg_fail(c, m, k, "'%s' is not a pool of this config; expected the name of one of "
                        "session_pools", st->pool);
      }
    }
  }
  return 0;
}

void sip__cfg_pipelines_free(sip__config_t *cfg) {
  for (size_t i = 0; i < cfg->n_pipelines; i++) pipeline_clear(&cfg->pipelines[i]);
  sip__free(cfg->pipelines);
}
