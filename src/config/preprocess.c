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
 * {size: "224,224"}). An image step with no layout/dtype written takes
 * the layout and dtype the step before gives (a resize after to_tensor
 * resizes the float32 NCHW tensor); `letterbox: true` (no size) makes the
 * resize step keep the aspect ratio and pad (seed 003's flag). Each step is
 * created here, so a bad option or two steps that cannot fit together (a
 * second to_tensor, an int64 cast into a resize) are config errors with
 * file:line:column. Whether the result fits the model is checked when the
 * pool loads (src/session/preprocess.c). */

#include "config/parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
     "letterbox: resize keeping the aspect ratio and pad to the size; `true` alone makes the "
     "resize step do so (seed 003)."},
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

static const char *step_get(const sip__preprocess_step_t *st, const char *key) {
  for (size_t i = 0; i < st->n_options; i++)
    if (!strcmp(st->options[i].key, key)) return st->options[i].value;
  return NULL;
}

/* Adds an option the parser chose (the layout a step adapts to). */
static int step_add(sip__ctx_t *c, sip__preprocess_step_t *st, const char *key, const char *value) {
  sip_kv_t *kv = sip__realloc(st->options, (st->n_options + 1) * sizeof *kv);
  if (!kv) return sip__cfg_oom(c);
  st->options = kv;
  char *k = sip__strdup(key), *v = sip__strdup(value);
  if (!k || !v) {
    sip__free(k);
    sip__free(v);
    return sip__cfg_oom(c);
  }
  kv[st->n_options++] = (sip_kv_t){k, v};
  return 0;
}

static void pre_desc(char *buf, size_t n, const sip_io_desc_t *d) {
  if (d->rank < 0)
    snprintf(buf, n, "%s of any rank", sip_dtype_name(d->dtype));
  else
    snprintf(buf, n, "%s of rank %d", sip_dtype_name(d->dtype), d->rank);
}

/* The image steps that take a layout option, and the layout they assume
 * when none is written (transform_image.c). */
static const char *image_default_layout(const char *op) {
  if (!strcmp(op, "resize") || !strcmp(op, "letterbox") || !strcmp(op, "color_convert"))
    return "hwc";
  if (!strcmp(op, "normalize")) return "nchw";
  return NULL;
}

static int channels_last(const char *layout) {
  return layout && (!strcmp(layout, "hwc") || !strcmp(layout, "nhwc"));
}

/* "1/255", "0.5": a scale option's value; NAN when not a number. */
static double scale_value(const char *s) {
  char *end;
  double a = strtod(s, &end);
  if (end == s) return NAN;
  if (*end == '/') {
    const char *b0 = end + 1;
    double b = strtod(b0, &end);
    if (end == b0 || b == 0) return NAN;
    a /= b;
  }
  return a;
}

/* What flows between steps while the list is read. */
typedef struct chain {
  sip_io_desc_t out;  /* the previous step's output (name unused) */
  const char *op;     /* its key; NULL before the first step */
  const char *layout; /* its image layout (hwc, nhwc, chw, nchw); NULL: not an image */
  double unit;        /* its values per pixel unit (to_tensor's scale); NAN after normalize */
} chain_t;

/* Steps run in the order written, and an image step fits what the step
 * before gives: with no layout/dtype written it takes that layout and
 * dtype (a resize after to_tensor resizes the float NCHW tensor, plane by
 * plane). A letterbox with no pad_value pads with 114 pixel units in the
 * values it sees. Orders that cannot work are errors naming the step. */
static int adapt_step(sip__ctx_t *c, sip__preprocess_step_t *st, const chain_t *ch,
                      const char *k, yaml_node_t *vn) {
  if (!ch->op) return 0;
  const char *def = image_default_layout(st->op);
  int image_in = ch->layout && (ch->out.dtype == SIP_DTYPE_UINT8 || ch->out.dtype == SIP_DTYPE_FLOAT32);
  if (def && image_in) {
    const char *layout = step_get(st, "layout");
    if (!layout) {
      layout = ch->layout;
      if (strcmp(layout, def) && step_add(c, st, "layout", layout)) return -1;
    }
    sip_dtype_t dflt = channels_last(layout) ? SIP_DTYPE_UINT8 : SIP_DTYPE_FLOAT32;
    if (!step_has(st, "dtype") && ch->out.dtype != dflt &&
        step_add(c, st, "dtype", sip_dtype_name(ch->out.dtype)))
      return -1;
  }
  if (!strcmp(st->op, "to_tensor")) {
    if (ch->layout && !channels_last(ch->layout))
      return sip__cfg_fail(c, vn->start_mark, k,
                           "the step before (%s) already gives a %s %s tensor; expected "
                           "to_tensor once, on an HWC image (uint8 or float32)",
                           ch->op, sip_dtype_name(ch->out.dtype), ch->layout);
    if (image_in && !step_has(st, "dtype") && ch->out.dtype == SIP_DTYPE_FLOAT32 &&
        step_add(c, st, "dtype", "float32"))
      return -1;
  }
  return 0;
}

static int pad_in_units(sip__ctx_t *c, sip__preprocess_step_t *st, const chain_t *ch) {
  if (strcmp(st->op, "letterbox") || step_has(st, "pad_value") || isnan(ch->unit) || ch->unit == 1)
    return 0;
  char v[48];
  snprintf(v, sizeof v, "%.9g", 114.0 * ch->unit);
  return step_add(c, st, "pad_value", v);
}

/* What a step gives, for the next one. */
static void chain_step(chain_t *ch, const sip__preprocess_step_t *st, const char *key,
                       const sip_io_desc_t *out) {
  const char *lay = step_get(st, "layout");
  if (!strcmp(st->op, "decode_image")) {
    ch->layout = "hwc";
  } else if (!strcmp(st->op, "to_tensor")) {
    ch->layout = "nchw";
    const char *sc = step_get(st, "scale");
    ch->unit *= sc ? scale_value(sc) : 1.0;
  } else if (image_default_layout(st->op)) {
    /* The layout strings live as long as the config (step options) or
     * are static. */
    ch->layout = lay ? lay : image_default_layout(st->op);
    if (!strcmp(st->op, "normalize")) ch->unit = NAN;
  } else if (strcmp(st->op, "cast")) {
    ch->layout = NULL;
  }
  ch->out = *out;
  ch->out.name = NULL;
  ch->op = key;
}

/* `letterbox: true` (no size), seed 003's flag: the resize to a size keeps
 * the aspect ratio and pads, in the resize's place. */
static yaml_node_t *letterbox_flag(sip__ctx_t *c, yaml_node_t *v) {
  for (yaml_node_pair_t *pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top; pr++) {
    yaml_node_t *kn = yaml_document_get_node(c->doc, pr->key);
    yaml_node_t *vn = yaml_document_get_node(c->doc, pr->value);
    static const char *const yes[] = {"true", "yes", "on", NULL};
    if (kn && vn && kn->type == YAML_SCALAR_NODE && !strcmp(text(kn), "letterbox") &&
        vn->type == YAML_SCALAR_NODE && !is_null(vn) && word_in(text(vn), yes))
      return kn;
  }
  return NULL;
}

/* A resize step made a letterbox by the flag: size (or target_size) is
 * its size; a size that follows each image cannot be letterboxed. */
static int resize_to_letterbox(sip__ctx_t *c, sip__preprocess_step_t *st, const char *k,
                               yaml_node_t *vn) {
  if (step_has(st, "limit_side_len") || step_has(st, "multiple_of"))
    return sip__cfg_fail(c, vn->start_mark, k,
                         "letterbox: true makes this resize keep the aspect ratio and pad, which "
                         "needs a fixed size; expected resize: [H, W] (not limit_side_len or "
                         "multiple_of) with letterbox: true");
  for (size_t i = 0; i < st->n_options; i++)
    if (!strcmp(st->options[i].key, "target_size")) {
      char *nk = sip__strdup("size");
      if (!nk) return sip__cfg_oom(c);
      sip__free((void *)st->options[i].key);
      st->options[i].key = nk;
    }
  return 0;
}

int sip__cfg_parse_preprocess(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__pool_config_t *pool = base;
  char k[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (is_null(v)) return 0;
  if (v->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, v, key, PREPROCESS_EXPECT);
  size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
  pool->preprocess = sip__calloc(n ? n : 1, sizeof *pool->preprocess);
  if (!pool->preprocess) return sip__cfg_oom(c);
  chain_t ch = {.unit = 1};
  yaml_node_t *flag = letterbox_flag(c, v);
  int flag_used = 0;
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
    if (kn == flag) continue; /* not a step: it changes the resize */
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
    const char *op = pre_ops[oi].op;
    if (flag && !strcmp(op, "resize")) {
      op = "letterbox";
      flag_used = 1;
    }
    if (!(st->op = sip__strdup(op))) return sip__cfg_oom(c);
    pool->n_preprocess++;
    if ((flag && !strcmp(pre_ops[oi].op, "resize") && resize_to_letterbox(c, st, k, vn)) ||
        adapt_step(c, st, &ch, k, vn) || pad_in_units(c, st, &ch))
      return -1;
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
                      ch.op);
    if (ch.op && (ch.out.dtype != in0.dtype ||
                  (ch.out.rank >= 0 && in0.rank >= 0 && ch.out.rank != in0.rank))) {
      char want[64], got[64];
      pre_desc(want, sizeof want, &in0);
      pre_desc(got, sizeof got, &ch.out);
      return sip__cfg_fail(c, vn->start_mark, k,
                      "%s takes %s but the step before (%s) gives %s; expected steps that fit "
                      "together (set this step's layout and dtype options, e.g. {layout: nchw})",
                      st->op, want, ch.op, got);
    }
    if ((!strcmp(st->op, "resize") && step_has(st, "size")) || !strcmp(st->op, "letterbox"))
      pool->preprocess_fixed = 1;
    chain_step(&ch, st, pre_ops[oi].key, &out0);
  }
  if (flag && !flag_used) {
    sip__cfg_key_join(k, key, "letterbox", strlen("letterbox"));
    return sip__cfg_fail(c, flag->start_mark, k,
                         "true letterboxes the resize step, and there is none; expected a "
                         "resize: [H, W] step with it, or letterbox: [H, W] as a step of its own");
  }
  if (!pool->n_preprocess)
    return sip__cfg_fail(c, v->start_mark, key, "has no steps; expected at least one of: " PRE_STEPS);
  return 0;
}
