/* sip — seed 003's model list (docs/seed-models.md): the JSON list of
 * models the seed writes, accepted as the whole config file or as the
 * `models:` section of sip's YAML config.
 *
 *   [ { "model_name": "face_detect", "model_path": "./models/face_detect.om",
 *       "model_type": "detection",
 *       "input_shapes": [ {"name": "input", "shape": [1, 3, 640, 640],
 *                          "format": "NCHW", "dtype": "float32"} ],
 *       "output_nums": 3,
 *       "preprocess": { "to_tensor": true, "resize": [640, 640],
 *                       "normalize": {"mean": [...], "std": [...]}, "letterbox": true },
 *       "max_batch_size": 1 }, ... ]
 *
 * JSON is YAML, so libyaml reads the file and config.c dispatches on the
 * document's shape (a list here, a map for sip's own config). Each entry
 * becomes a session pool: model_name is the pool's name; model_path its
 * model, a `.om` path served from the model file of the same name a
 * backend claims (the one it was converted from) when this build has no
 * backend for it; input_shapes and output_nums are checked
 * when the model loads (sip__config_check_declared_io); max_batch_size N > 1
 * is dynamic_batching.max_batch_size N (1: each request runs alone);
 * model_type is a label; preprocess is sip's preprocess (preprocess.c), with
 * one reading of the seed's numbers added here (seed_units). */
#include "config/parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <sys/stat.h>

#include "core/core.h"

#define ENTRY_EXPECT                                                                    \
  "a model: a map of model_name, model_path, model_type, input_shapes, output_nums, " \
  "preprocess, max_batch_size"
#define INPUTS_EXPECT                                                                 \
  "a list of inputs, each {name: N, shape: [D, ...], format: NCHW | NHWC, dtype: T} " \
  "(name and shape required)"
#define INPUT_KEYS "name, shape, format, dtype"
#define SHAPE_EXPECT "a list of at most 16 dims, each a size >= 0 or -1 (any size)"
#define FORMAT_EXPECT "NCHW or NHWC"
#define DTYPE_EXPECT "a dtype: float32, float16, uint8, int8, int32, int64, bool, ..."

static int parse_inputs(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_model_preprocess(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);

enum { M_NAME, M_PATH, M_TYPE, M_INPUTS, M_OUTPUTS, M_PRE, M_BATCH, M_COUNT };
static const sip__field_t model_fields[M_COUNT] = {
    [M_NAME] = {.name = "model_name", .type = F_STRING, .offset = offsetof(sip__pool_config_t, name),
                .valid = sip__cfg_valid_pool_name, .required = true,
                .expect = "a pool name of 1..128 characters from A-Z a-z 0-9 _ . -",
                .doc = "The pool's name (requests name it)."},
    [M_PATH] = {.name = "model_path", .type = F_STRING,
                .offset = offsetof(sip__pool_config_t, model_path), .required = true,
                .expect = "a path to a model file (a .om is served from the model file of the "
                          "same name that a backend runs)",
                .doc = "Relative to the config file."},
    [M_TYPE] = {.name = "model_type", .type = F_STRING,
                .offset = offsetof(sip__pool_config_t, model_type),
                .expect = "a label such as detection or classification",
                .doc = "A label, kept with the pool."},
    [M_INPUTS] = {.name = "input_shapes", .type = F_CUSTOM, .parse = parse_inputs,
                  .expect = INPUTS_EXPECT,
                  .doc = "The model's inputs, checked when it loads."},
    [M_OUTPUTS] = {.name = "output_nums", .type = F_INT,
                   .offset = offsetof(sip__pool_config_t, output_nums), .def = 0, .min = 1,
                   .max = 4096, .doc = "How many outputs the model has, checked when it loads."},
    [M_PRE] = {.name = "preprocess", .type = F_CUSTOM, .parse = parse_model_preprocess,
               .expect = PREPROCESS_EXPECT,
               .doc = "sip's preprocess steps, in the order written."},
    [M_BATCH] = {.name = "max_batch_size", .type = F_INT,
                 .offset = offsetof(sip__pool_config_t, max_batch_size), .def = 0, .min = 1,
                 .max = 65536,
                 .doc = "Rows per execution: N > 1 merges queued requests (dynamic_batching); "
                        "1 runs each request alone."},
};
static const sip__section_t model_section = {model_fields, M_COUNT};
_Static_assert(COUNT(model_fields) <= MAX_FIELDS, "raise MAX_FIELDS");

/* ---- input_shapes ---- */

static int parse_shape(sip__ctx_t *c, yaml_node_t *v, const char *key, sip__declared_input_t *d) {
  char ik[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, SHAPE_EXPECT);
  size_t n = seq_len(v);
  if (n > SIP_MAX_RANK)
    return sip__cfg_fail(c, v->start_mark, key, "has %zu dims; expected %s", n, SHAPE_EXPECT);
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = sip__cfg_seq_scalar(c, v, i, key, SHAPE_EXPECT);
    if (!e) return -1;
    sip__cfg_key_index(ik, key, i);
    int64_t x = 0;
    if (!is_plain(e) || sip__cfg_parse_int(text(e), e->data.scalar.length, &x) || x < -1)
      return sip__cfg_fail(c, e->start_mark, ik, "%s is not a dim; expected %s",
                           sip__cfg_show(shown, sizeof shown, text(e), e->data.scalar.length),
                           SHAPE_EXPECT);
    d->dims[i] = x;
  }
  d->rank = (int)n;
  return 0;
}

static int parse_input(sip__ctx_t *c, yaml_node_t *m, const char *key, sip__declared_input_t *d) {
  char k[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  int have_shape = 0;
  if (m->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, m, key, INPUTS_EXPECT);
  for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
    yaml_node_t *kn, *vn;
    if (sip__cfg_pair(c, p, &kn, &vn)) return -1;
    if (sip__cfg_want_scalar(c, kn, key, "keys: " INPUT_KEYS)) return -1;
    const char *kt = text(kn);
    sip__cfg_key_join(k, key, kt, kn->data.scalar.length);
    if (sip__cfg_dup_key(c, m, p, kn, k, "key")) return -1;
    if (!strcmp(kt, "name")) {
      if (sip__cfg_want_scalar(c, vn, k, "the name of a model input")) return -1;
      if (!(d->name = sip__strndup(text(vn), vn->data.scalar.length))) return sip__cfg_oom(c);
    } else if (!strcmp(kt, "shape")) {
      if (parse_shape(c, vn, k, d)) return -1;
      have_shape = 1;
    } else if (!strcmp(kt, "format")) {
      if (sip__cfg_want_scalar(c, vn, k, FORMAT_EXPECT)) return -1;
      if (!strcasecmp(text(vn), "nchw"))
        d->format = SIP__FORMAT_NCHW;
      else if (!strcasecmp(text(vn), "nhwc"))
        d->format = SIP__FORMAT_NHWC;
      else
        return sip__cfg_fail(c, vn->start_mark, k, "%s is not a format; expected " FORMAT_EXPECT,
                             sip__cfg_show(shown, sizeof shown, text(vn), vn->data.scalar.length));
    } else if (!strcmp(kt, "dtype")) {
      if (sip__cfg_want_scalar(c, vn, k, DTYPE_EXPECT)) return -1;
      d->dtype = sip_dtype_from_name(text(vn));
      if (d->dtype == SIP_DTYPE_INVALID || d->dtype == SIP_DTYPE_STRING)
        return sip__cfg_fail(c, vn->start_mark, k, "%s is not a tensor dtype; expected %s",
                             sip__cfg_show(shown, sizeof shown, text(vn), vn->data.scalar.length),
                             DTYPE_EXPECT);
    } else {
      return sip__cfg_fail(c, kn->start_mark, k, "unknown key; expected one of: " INPUT_KEYS);
    }
  }
  if (!d->name) {
    sip__cfg_key_join(k, key, "name", 4);
    return sip__cfg_fail(c, m->start_mark, k, "missing; expected the name of a model input");
  }
  if (!have_shape) {
    sip__cfg_key_join(k, key, "shape", 5);
    return sip__cfg_fail(c, m->start_mark, k, "missing; expected %s", SHAPE_EXPECT);
  }
  return 0;
}

static int parse_inputs(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__pool_config_t *pool = base;
  char ik[KEY_MAX];
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, INPUTS_EXPECT);
  size_t n = seq_len(v);
  if (!n) return sip__cfg_fail(c, v->start_mark, key, "is an empty list; expected %s", INPUTS_EXPECT);
  if (!(pool->declared_inputs = sip__calloc(n, sizeof *pool->declared_inputs)))
    return sip__cfg_oom(c);
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = seq_item(c, v, i);
    if (!e) return sip__cfg_oom(c);
    sip__cfg_key_index(ik, key, i);
    sip__declared_input_t *d = &pool->declared_inputs[pool->n_declared_inputs++];
    d->dtype = SIP_DTYPE_INVALID; /* not written: not checked */
    if (parse_input(c, e, ik, d)) return -1;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(pool->declared_inputs[j].name, d->name))
        return sip__cfg_fail(c, e->start_mark, ik, "names input '%s' again (input_shapes[%zu]); "
                             "expected each input once", d->name, j);
  }
  return 0;
}

/* ---- preprocess ---- */

static sip_kv_t *step_opt(const sip__preprocess_step_t *st, const char *key) {
  for (size_t i = 0; i < st->n_options; i++)
    if (!strcmp(st->options[i].key, key)) return &st->options[i];
  return NULL;
}

/* The largest |x| of a "a,b,c" list of numbers; -1 when one is not a number. */
static double max_abs(const char *s) {
  double m = 0;
  while (s && *s) {
    char *end;
    double x = strtod(s, &end);
    if (end == s || !isfinite(x)) return -1;
    m = fmax(m, fabs(x));
    s = end;
    while (*s == ' ' || *s == ',') s++;
  }
  return m;
}

/* Seed 003 writes normalize's mean/std after `to_tensor: true` in the units
 * of its numbers: ImageNet's 123.675/58.395 in pixel units 0..255 (to_tensor
 * keeps them: its default scale is 1), 0.5/0.5 in 0..1 units (torchvision's
 * ToTensor + Normalize). When no step sets a scale and every mean and std
 * lies in 0..1, normalize gets scale 1/255 so those numbers mean what the
 * seed means: (x / 255 - mean) / std. sip's own preprocess never guesses. */
static int seed_units(sip__ctx_t *c, sip__pool_config_t *pool) {
  int to_tensor = 0;
  for (size_t i = 0; i < pool->n_preprocess; i++) {
    const sip__preprocess_step_t *st = &pool->preprocess[i];
    if (step_opt(st, "scale")) return 0;
    if (!strcmp(st->op, "to_tensor")) to_tensor = 1;
  }
  for (size_t i = 0; to_tensor && i < pool->n_preprocess; i++) {
    sip__preprocess_step_t *st = &pool->preprocess[i];
    if (strcmp(st->op, "normalize")) continue;
    const sip_kv_t *m = step_opt(st, "mean"), *s = step_opt(st, "std");
    double mm = m ? max_abs(m->value) : 0, ms = s ? max_abs(s->value) : 0;
    if ((!m && !s) || mm < 0 || ms < 0 || mm > 1 || ms > 1) continue;
    sip_kv_t *kv = sip__realloc(st->options, (st->n_options + 1) * sizeof *kv);
    if (!kv) return sip__cfg_oom(c);
    st->options = kv;
    kv[st->n_options] = (sip_kv_t){0};
    if (!(kv[st->n_options].key = sip__strdup("scale")) ||
        !(kv[st->n_options].value = sip__strdup("1/255"))) {
      sip__free((void *)kv[st->n_options].key);
      return sip__cfg_oom(c);
    }
    st->n_options++;
  }
  return 0;
}

static int parse_model_preprocess(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  if (sip__cfg_parse_preprocess(c, v, key, base)) return -1;
  return seed_units(c, base);
}

/* ---- model_path ---- */

static int ends_with_om(const char *p) {
  const char *ext = sip__cfg_path_ext(p);
  return ext && !strcasecmp(ext, ".om");
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* A model file beside `om` (a .om path) with the same name and another
 * extension that a backend's probe claims: the model the .om was converted
 * from. The first by name when there are several; NULL when none (or out
 * of memory: *oom set). */
static char *sibling_model(sip__ctx_t *c, const char *om, int *oom) {
  *oom = 0;
  const char *slash = strrchr(om, '/');
  size_t dir_len = slash ? (size_t)(slash - om) : 0;
  const char *base = slash ? slash + 1 : om;
  size_t stem = strlen(base) - 3; /* without ".om" */
  char *dir = slash ? sip__strndup(om, dir_len ? dir_len : 1) : sip__strdup(".");
  if (!dir) return *oom = 1, NULL;
  DIR *d = opendir(dir);
  char *best = NULL;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strncmp(e->d_name, base, stem) || e->d_name[stem] != '.' || !strcmp(e->d_name, base))
      continue;
    if (best && strcmp(strrchr(best, '/') + 1, e->d_name) <= 0) continue;
    char *path = sip__asprintf("%s/%s", dir, e->d_name);
    if (!path) {
      *oom = 1;
      break;
    }
    if (c->backends->probe(path)) {
      sip__free(best);
      best = path;
    } else {
      sip__free(path);
    }
  }
  if (d) closedir(d);
  sip__free(dir);
  if (*oom) {
    sip__free(best);
    return NULL;
  }
  return best;
}

/* Resolves model_path; a .om no backend of this build claims is served
 * from the model of the same name a backend claims; picks the backend. */
static int resolve_model(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t *pv, const char *key) {
  char mkey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  sip__cfg_key_join(mkey, key, "model_path", strlen("model_path"));
  char *resolved = sip__cfg_resolve_path(c->base_dir, pool->model_path);
  if (!resolved) return sip__cfg_oom(c);
  if (ends_with_om(resolved) && !(exists(resolved) && c->backends->probe(resolved))) {
    int oom;
    char *model = sibling_model(c, resolved, &oom);
    if (oom) {
      sip__free(resolved);
      return sip__cfg_oom(c);
    }
    if (!model) {
      int rc = sip__cfg_fail(c, pv->start_mark, mkey,
                             "%s: %s %s and no file beside it of the same name (%.*s.*) is a "
                             "model this build runs; expected the model the .om was converted "
                             "from, one of %s",
                             sip__cfg_show(shown, sizeof shown, pool->model_path,
                                           strlen(pool->model_path)),
                             resolved,
                             exists(resolved) ? "is a CANN offline model no backend of this "
                                                "build runs,"
                                              : "does not exist",
                             (int)(strlen(resolved) - 3), resolved, c->backends->formats());
      sip__free(resolved);
      return rc;
    }
    sip__log(SIP__LOG_INFO, "a .om model path is served from the model of the same name",
             "pool=%s model_path=%s serves=%s", pool->name, resolved, model);
    sip__free(resolved);
    resolved = model;
  }
  const char *b = c->backends->probe(resolved);
  if (!b) {
    const char *ext = sip__cfg_path_ext(resolved);
    int rc = sip__cfg_fail(c, pv->start_mark, mkey,
                           "%s has an unknown extension (%s); expected one of %s",
                           sip__cfg_show(shown, sizeof shown, pool->model_path,
                                         strlen(pool->model_path)),
                           ext ? ext : "none", c->backends->formats());
    sip__free(resolved);
    return rc;
  }
  sip__free(pool->model_path);
  pool->model_path = resolved;
  if (!(pool->backend = sip__strdup(b))) return sip__cfg_oom(c);
  return sip__cfg_check_backend_options(c, pool, NULL, key);
}

/* ---- the list ---- */

int sip__cfg_parse_models(sip__ctx_t *c, yaml_node_t *v, const char *key, sip__config_t *cfg) {
  char ikey[KEY_MAX], exp[1024], shown[SHOW_MAX * 4 + 8];
  snprintf(exp, sizeof exp, "%s", ENTRY_EXPECT);
  if (is_null(v)) return 0;
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, MODELS_EXPECT);
  size_t n = seq_len(v);
  if (!n) return 0;
  sip__pool_config_t *pools = sip__realloc(cfg->pools, (cfg->n_pools + n) * sizeof *pools);
  if (!pools) return sip__cfg_oom(c);
  cfg->pools = pools;
  for (size_t i = 0; i < n; i++) {
    sip__pool_config_t *pool = &cfg->pools[cfg->n_pools];
    memset(pool, 0, sizeof *pool);
    yaml_node_t *item = seq_item(c, v, i);
    yaml_node_t *vals[MAX_FIELDS] = {0};
    sip__cfg_key_index(ikey, key, i);
    if (!item) return sip__cfg_oom(c);
    if (item->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, item, ikey, exp);
    sip__cfg_apply_defaults(&sip__cfg_pool_section, pool);
    pool->line = (int)item->start_mark.line + 1;
    cfg->n_pools++; /* from here on freed with the config */
    c->where = 0;
    if (sip__cfg_parse_map(c, item, ikey, &model_section, exp, pool, vals)) return -1;
    for (size_t j = 0; j + 1 < cfg->n_pools; j++) {
      if (strcmp(cfg->pools[j].name, pool->name)) continue;
      char nkey[KEY_MAX];
      sip__cfg_key_join(nkey, ikey, "model_name", strlen("model_name"));
      return sip__cfg_fail(c, vals[M_NAME]->start_mark, nkey,
                           "%s is already the name of a pool (line %d); expected unique names",
                           sip__cfg_show(shown, sizeof shown, pool->name, strlen(pool->name)),
                           cfg->pools[j].line);
    }
    if (pool->max_batch_size == 1) pool->max_batch_size = 0; /* one request per execution */
    if (resolve_model(c, pool, vals[M_PATH], ikey)) return -1;
  }
  return 0;
}

/* ---- the check when the model loads ---- */

static void shape_of(char *buf, size_t n, int rank, const int64_t *dims) {
  sip__shape_str(buf, n, rank, dims, ", ");
}

sip_error_t *sip__config_check_declared_io(const sip__pool_config_t *c, const sip_io_desc_t *ins,
                                           size_t n_in, const sip_io_desc_t *outs, size_t n_out) {
  for (size_t i = 0; i < c->n_declared_inputs; i++) {
    const sip__declared_input_t *d = &c->declared_inputs[i];
    size_t j = 0;
    while (j < n_in && strcmp(ins[j].name, d->name)) j++;
    if (j == n_in) {
      char names[512] = "";
      for (size_t k = 0; k < n_in; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", k ? ", " : "",
                 ins[k].name);
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "input_shapes[%zu]: the model has no input '%s'; expected one of its "
                           "inputs: %s",
                           i, d->name, names);
    }
    const sip_io_desc_t *m = &ins[j];
    int fits = m->rank < 0 || m->rank == d->rank;
    for (int k = 0; fits && m->rank >= 0 && k < d->rank; k++)
      fits = d->dims[k] < 0 || m->dims[k] < 0 || d->dims[k] == m->dims[k];
    if (!fits) {
      char want[160], got[160];
      shape_of(want, sizeof want, d->rank, d->dims);
      shape_of(got, sizeof got, m->rank, m->dims);
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "input_shapes[%zu]: input '%s' is declared with shape %s but the model "
                           "takes %s (-1: any size); expected the model's shape",
                           i, d->name, want, got);
    }
    if (d->dtype != SIP_DTYPE_INVALID && d->dtype != m->dtype)
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "input_shapes[%zu]: input '%s' is declared %s but the model takes %s; "
                           "expected the model's dtype",
                           i, d->name, sip_dtype_name(d->dtype), sip_dtype_name(m->dtype));
  }
  if (outs && c->output_nums && (size_t)c->output_nums != n_out)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "output_nums is %d but the model has %zu outputs; expected the model's "
                         "output count",
                         c->output_nums, n_out);
  return NULL;
}
