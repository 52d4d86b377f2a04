/* sip — session_pools[].preprocess: parsed by config.c (included there after
 * pipelines.inc, whose sip__cfg_scalar_or_list it shares).
 *
 *   preprocess:
 *     input: x                     # optional when the model has one input
 *     decode: true                 # PNG/JPEG bytes -> uint8 HWC (true = rgb; bgr; gray)
 *     resize: "224,224"            # or {limit_side_len: 960, multiple_of: 32}
 *     to_tensor: {scale: 1/255}    # HWC uint8 -> NCHW float32
 *     normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
 *
 * Every key but `input` is a step, run in the order written (YAML maps keep
 * their order in libyaml's document). A step's value is a map of the
 * operation's options, `true` (defaults), `false` (no such step), or a
 * scalar or list setting its main option (`resize: [224, 224]` is
 * {size: "224,224"}). Each step is created here, so a bad option or two
 * steps that do not fit together (a float32 NCHW tensor into a uint8 HWC
 * resize) are config errors with file:line:column. Whether the result fits
 * the model is checked when the pool loads (src/session/preprocess.c). */

#include "config/parse.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "ops/transforms.h"

#define PRE_STEPS "input, decode, color_convert, resize, letterbox, to_tensor, normalize, cast"

static const struct {
  const char *key, *op, *main; /* main: the option a scalar value sets */
} pre_ops[] = {
    {"decode", "decode_image", "mode"},   {"decode_image", "decode_image", "mode"},
    {"color_convert", "color_convert", "mode"}, {"resize", "resize", "size"},
    {"letterbox", "letterbox", "size"},   {"to_tensor", "to_tensor", "scale"},
    {"normalize", "normalize", NULL},     {"cast", "cast", "to"},
};

/* The keys above, for docs/config.md; tests/unit/config/test_config_doc.c checks
 * that they are the keys parse_preprocess accepts. */
#define PRE_VALUE "a map of options, true, false or "
const sip__cfg_key_doc_t sip__cfg_preprocess_keys[] = {
    {"input", "a model input name", "its only input",
     "The model input the steps make (needed when the model has several)."},
    {"decode", PRE_VALUE "the mode: rgb (true), bgr or gray", NULL,
     "decode_image: PNG/JPEG bytes to a uint8 HWC image; must be the first step."},
    {"decode_image", PRE_VALUE "the mode", NULL, "Another name for decode."},
    {"color_convert", PRE_VALUE "the mode: bgr2rgb, rgb2bgr, rgb2gray or bgr2gray", NULL,
     "color_convert: swap the channel order or make a gray image."},
    {"resize", PRE_VALUE "the size (\"224,224\" or [224, 224])", NULL,
     "resize: to a size, or by limit_side_len / multiple_of."},
    {"letterbox", PRE_VALUE "the size", NULL,
     "letterbox: resize keeping the aspect ratio and pad to the size."},
    {"to_tensor", PRE_VALUE "the scale", NULL,
     "to_tensor: an HWC image to a float32 [N,C,H,W] tensor, multiplied by scale."},
    {"normalize", "a map of options (mean, std, scale, layout, dtype) or true", NULL,
     "normalize: (x * scale - mean[c]) / std[c] per channel c, as float32."},
    {"cast", PRE_VALUE "the dtype (to)", NULL, "cast: convert to another dtype."},
    {NULL, NULL, NULL, NULL},
};

static int word_in(const char *s, const char *const *words) {
  for (size_t i = 0; words[i]; i++)
    if (!strcasecmp(s, words[i])) return 1;
  return 0;
}

/* The step's options from its YAML value; *skip when it is `false`. */
static int pre_step_options(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *main,
                            sip__preprocess_step_t *st, int *skip) {
  static const char *const yes[] = {"true", "yes", "on", NULL}, *const no[] = {"false", "no", "off",
                                                                             NULL};
  char exp[160];
  snprintf(exp, sizeof exp, "a map of options, true, false%s%s", main ? " or the value of " : "",
           main ? main : "");
  *skip = 0;
  if (v->type == YAML_MAPPING_NODE) {
    size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    st->options = sip__calloc(n ? n : 1, sizeof *st->options);
    if (!st->options) return sip__cfg_oom(c);
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
      yaml_node_t *kn, *vn;
      char ok[KEY_MAX];
      if (sip__cfg_pair(c, p, &kn, &vn)) return -1;
      if (sip__cfg_want_scalar(c, kn, key, "option names")) return -1;
      sip__cfg_key_join(ok, key, text(kn), kn->data.scalar.length);
      if (sip__cfg_dup_key(c, v, p, kn, ok, "option")) return -1;
      char *val = NULL;
      if (sip__cfg_scalar_or_list(c, vn, ok, "a scalar or a list of scalars", &val)) return -1;
      sip_kv_t *kv = &st->options[st->n_options++];
      kv->value = val;
      if (!(kv->key = sip__strndup(text(kn), kn->data.scalar.length))) return sip__cfg_oom(c);
    }
    return 0;
  }
  if (v->type == YAML_SCALAR_NODE && !is_null(v) && word_in(text(v), no)) {
    *skip = 1;
    return 0;
  }
  if (v->type == YAML_SCALAR_NODE && !is_null(v) && word_in(text(v), yes)) return 0;
  if (!main || is_null(v)) return sip__cfg_fail_kind(c, v, key, exp);
  char *val = NULL;
  if (sip__cfg_scalar_or_list(c, v, key, exp, &val)) return -1;
  st->options = sip__calloc(1, sizeof *st->options);
  if (!st->options) {
    sip__free(val);
    return sip__cfg_oom(c);
  }
  st->options[0].value = val;
  st->n_options = 1;
  if (!(st->options[0].key = sip__strdup(main))) return sip__cfg_oom(c);
  return 0;
}

static int step_has(const sip__preprocess_step_t *st, const char *key) {
  for (size_t i = 0; i < st->n_options; i++)
    if (!strcmp(st->options[i].key, key)) return 1;
  return 0;
}

static void pre_desc(char *buf, size_t n, const sip_io_desc_t *d) {
  if (d->rank < 0)
    snprintf(buf, n, "%s of any rank", sip_dtype_name(d->dtype));
  else
    snprintf(buf, n, "%s of rank %d", sip_dtype_name(d->dtype), d->rank);
}

int sip__cfg_parse_preprocess(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__pool_config_t *pool = base;
  char k[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (is_null(v)) return 0;
  if (v->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, v, key, PREPROCESS_EXPECT);
  size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
  pool->preprocess = sip__calloc(n ? n : 1, sizeof *pool->preprocess);
  if (!pool->preprocess) return sip__cfg_oom(c);
  sip_io_desc_t prev = {0}; /* the previous step's output (name unused) */
  const char *prev_op = NULL;
  for (yaml_node_pair_t *pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top; pr++) {
    yaml_node_t *kn, *vn;
    if (sip__cfg_pair(c, pr, &kn, &vn)) return -1;
    if (sip__cfg_want_scalar(c, kn, key, "step names: " PRE_STEPS)) return -1;
    const char *kt = text(kn);
    sip__cfg_key_join(k, key, kt, kn->data.scalar.length);
    if (sip__cfg_dup_key(c, v, pr, kn, k, "step")) return -1;
    if (!strcmp(kt, "input")) {
      if (sip__cfg_want_scalar(c, vn, k, "the name of the model input the steps make")) return -1;
      if (!(pool->preprocess_input = sip__strndup(text(vn), vn->data.scalar.length)))
        return sip__cfg_oom(c);
      continue;
    }
    size_t oi = 0;
    while (oi < sizeof pre_ops / sizeof pre_ops[0] && strcmp(pre_ops[oi].key, kt)) oi++;
    if (oi == sizeof pre_ops / sizeof pre_ops[0])
      return sip__cfg_fail(c, kn->start_mark, k, "%s is not a preprocess step; expected one of: " PRE_STEPS,
                      sip__cfg_show(shown, sizeof shown, kt, kn->data.scalar.length));
    sip__preprocess_step_t *st = &pool->preprocess[pool->n_preprocess];
    int skip = 0;
    if (pre_step_options(c, vn, k, pre_ops[oi].main, st, &skip)) {
      pool->n_preprocess++; /* what was allocated is freed with the pool */
      return -1;
    }
    if (skip) continue; /* `step: false` allocated nothing */
    if (!(st->op = sip__strdup(pre_ops[oi].op))) return sip__cfg_oom(c);
    pool->n_preprocess++;
    /* Created once here: option errors and chaining are config errors. */
    sip__transform_t *t = NULL;
    sip_error_t *err = sip__transform_new(st->op, st->options, st->n_options, &t);
    if (err) {
      int rc = sip__cfg_fail(c, vn->start_mark, k, "%s", sip_error_message(err));
      sip_error_free(err);
      return rc;
    }
    const sip_io_desc_t *ins, *outs;
    size_t ni, no;
    sip__transform_describe(t, &ins, &ni, &outs, &no);
    sip_io_desc_t in0 = ins[0], out0 = outs[0];
    sip__transform_free(t);
    if (ni != 1)
      return sip__cfg_fail(c, vn->start_mark, k, "%s takes %zu inputs; expected a step of one input",
                      st->op, ni);
    if (!strcmp(st->op, "decode_image") && pool->n_preprocess > 1)
      return sip__cfg_fail(c, kn->start_mark, k, "decode comes after %s; expected it as the first step",
                      prev_op);
    if (prev_op && (prev.dtype != in0.dtype ||
                    (prev.rank >= 0 && in0.rank >= 0 && prev.rank != in0.rank))) {
      char want[64], got[64];
      pre_desc(want, sizeof want, &in0);
      pre_desc(got, sizeof got, &prev);
      return sip__cfg_fail(c, vn->start_mark, k,
                      "takes %s but the step before (%s) gives %s; expected steps that fit "
                      "together (set this step's layout and dtype options, e.g. {layout: nchw})",
                      want, prev_op, got);
    }
    if ((!strcmp(st->op, "resize") && step_has(st, "size")) || !strcmp(st->op, "letterbox"))
      pool->preprocess_fixed = 1;
    prev = out0;
    prev.name = NULL;
    prev_op = pre_ops[oi].key;
  }
  if (!pool->n_preprocess)
    return sip__cfg_fail(c, v->start_mark, key, "has no steps; expected at least one of: " PRE_STEPS);
  return 0;
}
