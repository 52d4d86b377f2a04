/* sip — transform operations: the registry, option parsing, input checks
 * and the tensor helpers every operation shares. The operations themselves
 * are in transform_image.c, transform_crop.c, transform_tensor.c,
 * transform_db.c and transform_decode.c. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "ops/transform_impl.h"

static const sip__tf_op_t *const ops[] = {
    &sip__tf_resize,        &sip__tf_letterbox, &sip__tf_normalize,        &sip__tf_color_convert,
    &sip__tf_to_tensor,     &sip__tf_rotate180, &sip__tf_cast,             &sip__tf_softmax,
    &sip__tf_topk,          &sip__tf_nms,       &sip__tf_crop_and_resize,  &sip__tf_ctc_greedy_decode,
    &sip__tf_db_postprocess, &sip__tf_decode_image,
};
#define N_OPS (sizeof ops / sizeof ops[0])

const char *sip__transform_op_names(void) {
  return "resize, letterbox, normalize, color_convert, to_tensor, rotate180, cast, softmax, topk, "
         "nms, crop_and_resize, ctc_greedy_decode, db_postprocess, decode_image";
}

const char *sip__transform_op(const sip__transform_t *t) { return t->op->name; }

const char *sip__transform_batch_problem(const sip__transform_t *t) {
  switch (t->op->items) {
  case TF_ITEMS_ROWS:
    return NULL;
  case TF_ITEMS_IMAGES:
    return t->layout.n == 0 ? NULL
                            : "its images have no batch axis (layout hwc or chw; use nhwc or nchw)";
  case TF_ITEMS_OFF_AXIS:
    return t->axis != 0 ? NULL : "it works across rows (axis 0)";
  default:
    return "its outputs are not one row per input row";
  }
}

/* ---- options ---- */

const char *sip__tf_opt(const sip__tf_opts_t *o, const char *key) {
  for (size_t i = 0; i < o->n; i++)
    if (strcmp(o->kv[i].key, key) == 0) return o->kv[i].value ? o->kv[i].value : "";
  return NULL;
}

sip_error_t *sip__tf_bad(const sip__tf_opts_t *o, const char *key, const char *expect) {
  const char *v = sip__tf_opt(o, key);
  return sip_error_new(SIP_INVALID_ARGUMENT, "transform %s: option %s: '%s'; expected %s", o->op,
                       key, v ? v : "", expect);
}

/* Skips blanks (and list brackets, so "[224, 224]" reads like "224,224"). */
static const char *skip(const char *p) {
  while (*p && (isspace((unsigned char)*p) || *p == '[' || *p == ']')) p++;
  return p;
}

/* One number at *p: a decimal or a fraction "a/b"; advances *p. */
static int parse_num(const char **p, double *res) {
  const char *s = skip(*p);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno == ERANGE) return -1;
  if (*end == '/') {
    const char *d = end + 1;
    double den = strtod(d, &end);
    if (end == d || errno == ERANGE || den == 0) return -1;
    v /= den;
  }
  if (!isfinite(v)) return -1;
  *p = end;
  *res = v;
  return 0;
}

sip_error_t *sip__tf_opt_num(const sip__tf_opts_t *o, const char *key, double lo, double hi,
                             double *out) {
  const char *v = sip__tf_opt(o, key);
  if (!v) return NULL;
  double d = 0;
  const char *p = v;
  if (parse_num(&p, &d) || *skip(p) || d < lo || d > hi) {
    char want[128];
    snprintf(want, sizeof want, "a number in %g..%g", lo, hi);
    return sip__tf_bad(o, key, want);
  }
  *out = d;
  return NULL;
}

sip_error_t *sip__tf_opt_int(const sip__tf_opts_t *o, const char *key, int64_t lo, int64_t hi,
                             int64_t *out) {
  const char *v = sip__tf_opt(o, key);
  if (!v) return NULL;
  const char *s = skip(v);
  char *end;
  errno = 0;
  long long n = strtoll(s, &end, 10);
  if (end == s || errno || *skip(end) || n < lo || n > hi) {
    char want[128];
    snprintf(want, sizeof want, "an integer in %lld..%lld", (long long)lo, (long long)hi);
    return sip__tf_bad(o, key, want);
  }
  *out = n;
  return NULL;
}

sip_error_t *sip__tf_opt_bool(const sip__tf_opts_t *o, const char *key, int *out) {
  const char *v = sip__tf_opt(o, key);
  if (!v) return NULL;
  static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no",
                                                                            "off"};
  for (size_t i = 0; i < 4; i++) {
    if (!strcasecmp(v, yes[i])) return (*out = 1), NULL;
    if (!strcasecmp(v, no[i])) return (*out = 0), NULL;
  }
  return sip__tf_bad(o, key, "true or false");
}

sip_error_t *sip__tf_opt_nums(const sip__tf_opts_t *o, const char *key, double lo, double hi,
                              float *out, int max, int *n) {
  const char *v = sip__tf_opt(o, key);
  if (!v) return NULL;
  int k = 0;
  const char *p = skip(v);
  while (*p) {
    double d = 0;
    if (k == max || parse_num(&p, &d) || d < lo || d > hi) {
      char want[160];
      snprintf(want, sizeof want, "1..%d comma-separated numbers in %g..%g (e.g. \"0.5,0.5,0.5\")",
               max, lo, hi);
      return sip__tf_bad(o, key, want);
    }
    out[k++] = (float)d;
    p = skip(p);
    if (*p == ',') p = skip(p + 1);
  }
  if (!k) return sip__tf_bad(o, key, "at least one number");
  *n = k;
  return NULL;
}

sip_error_t *sip__tf_opt_hw(const sip__tf_opts_t *o, const char *key, int64_t *h, int64_t *w) {
  const char *v = sip__tf_opt(o, key);
  if (!v) return NULL;
  float f[2];
  int n = 0;
  char want[128];
  snprintf(want, sizeof want, "\"H,W\": two integers in 1..%d", TF_MAX_SIDE);
  sip_error_t *e = sip__tf_opt_nums(o, key, 1, TF_MAX_SIDE, f, 2, &n);
  if (e || n != 2 || f[0] != floorf(f[0]) || f[1] != floorf(f[1])) {
    sip_error_free(e); /* replaced by one that names the expected form */
    return sip__tf_bad(o, key, want);
  }
  *h = (int64_t)f[0];
  *w = (int64_t)f[1];
  return NULL;
}

sip_error_t *sip__tf_opt_dtype(const sip__tf_opts_t *o, const char *key, sip_dtype_t *out) {
  const char *v = sip__tf_opt(o, key);
  if (!v) return NULL;
  sip_dtype_t d = sip_dtype_from_name(v);
  if (d == SIP_DTYPE_INVALID || d == SIP_DTYPE_STRING)
    return sip__tf_bad(o, key,
                       "a numeric dtype: float32, float16, float64, uint8, int8, uint16, int16, "
                       "int32, int64, uint32, uint64 or bool");
  *out = d;
  return NULL;
}

sip_error_t *sip__tf_opt_enum(const sip__tf_opts_t *o, const char *key,
                              const char *const *names, int *out) {
  const char *v = sip__tf_opt(o, key);
  if (!v) return NULL;
  char want[256] = "one of";
  for (int i = 0; names[i]; i++) {
    if (!strcmp(v, names[i])) return (*out = i), NULL;
    snprintf(want + strlen(want), sizeof want - strlen(want), "%s %s", i ? "," : "", names[i]);
  }
  return sip__tf_bad(o, key, want);
}

static const sip__tf_layout_t layouts[] = {
    {"hwc", 3, -1, 2, 0, 1},
    {"nhwc", 4, 0, 3, 1, 2},
    {"chw", 3, -1, 0, 1, 2},
    {"nchw", 4, 0, 1, 2, 3},
};

sip_error_t *sip__tf_opt_image(const sip__tf_opts_t *o, sip__transform_t *t,
                               const char *default_layout) {
  static const char *const names[] = {"hwc", "nhwc", "chw", "nchw", NULL};
  int li = 0;
  while (strcmp(layouts[li].name, default_layout)) li++;
  sip_error_t *e = sip__tf_opt_enum(o, "layout", names, &li);
  if (e) return e;
  t->layout = layouts[li];
  t->dtype = t->layout.c == t->layout.rank - 1 ? SIP_DTYPE_UINT8 : SIP_DTYPE_FLOAT32;
  if ((e = sip__tf_opt_dtype(o, "dtype", &t->dtype))) return e;
  if (t->dtype != SIP_DTYPE_UINT8 && t->dtype != SIP_DTYPE_FLOAT32)
    return sip__tf_bad(o, "dtype", "uint8 or float32 (the image element types)");
  return NULL;
}

/* ---- descriptors ---- */

void sip__tf_io(sip_io_desc_t *d, const char *name, sip_dtype_t dtype, int rank) {
  /* The static name is duplicated by sip__transform_new. */
  d->name = (char *)(uintptr_t)name;
  d->dtype = dtype;
  d->rank = rank;
  for (int i = 0; i < SIP_MAX_RANK; i++) d->dims[i] = -1;
}

void sip__tf_io_image(const sip__transform_t *t, sip_io_desc_t *d, const char *name) {
  sip__tf_io(d, name, t->dtype, t->layout.rank);
}

/* ---- create / free ---- */

void sip__transform_free(sip__transform_t *t) {
  if (!t) return;
  for (size_t i = 0; i < TF_MAX_IO; i++) {
    sip__free(t->in[i].name);
    sip__free(t->out[i].name);
  }
  sip__free(t->label_blob);
  sip__free(t->label_off);
  sip__free(t->label_len);
  sip__free(t);
}

sip_error_t *sip__transform_new(const char *op, const sip_kv_t *opts, size_t n_opts,
                                sip__transform_t **out) {
  *out = NULL;
  const sip__tf_op_t *def = NULL;
  for (size_t i = 0; op && i < N_OPS && !def; i++)
    if (!strcmp(ops[i]->name, op)) def = ops[i];
  if (!def)
    return sip_error_new(SIP_INVALID_ARGUMENT, "unknown transform operation '%s'; expected one of: %s",
                         op ? op : "(none)", sip__transform_op_names());
  for (size_t i = 0; i < n_opts; i++) {
    const char *k = opts[i].key ? opts[i].key : "";
    int known = 0;
    for (size_t j = 0; def->options[j] && !known; j++) known = !strcmp(def->options[j], k);
    if (!known) {
      char names[512] = "";
      for (size_t j = 0; def->options[j]; j++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", j ? ", " : "",
                 def->options[j]);
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "transform %s has no option '%s'; expected one of: %s", def->name, k,
                           names[0] ? names : "(none)");
    }
    for (size_t j = 0; j < i; j++)
      if (!strcmp(opts[j].key, k))
        return sip_error_new(SIP_INVALID_ARGUMENT, "transform %s: option %s is given twice",
                             def->name, k);
  }
  sip__transform_t *t = sip__calloc(1, sizeof *t);
  if (!t) return SIP__OOM();
  t->op = def;
  sip__tf_opts_t o = {def->name, opts, n_opts};
  sip_error_t *e = def->setup(t, &o);
  /* setup leaves static names in the descriptors: own copies from here. */
  for (size_t i = 0; i < TF_MAX_IO; i++) {
    const char *in = i < t->n_in ? t->in[i].name : NULL;
    const char *on = i < t->n_out ? t->out[i].name : NULL;
    t->in[i].name = NULL;
    t->out[i].name = NULL;
    if (e) continue;
    if ((in && !(t->in[i].name = sip__strdup(in))) || (on && !(t->out[i].name = sip__strdup(on))))
      e = SIP__OOM();
  }
  if (e) {
    sip__transform_free(t);
    return e;
  }
  *out = t;
  return NULL;
}

void sip__transform_describe(const sip__transform_t *t, const sip_io_desc_t **inputs,
                             size_t *n_inputs, const sip_io_desc_t **outputs,
                             size_t *n_outputs) {
  *inputs = t->in;
  *n_inputs = t->n_in;
  *outputs = t->out;
  *n_outputs = t->n_out;
}

/* ---- run ---- */

static void format_desc(char *buf, size_t n, const sip_io_desc_t *d) {
  if (d->rank < 0) {
    snprintf(buf, n, "%s of any shape", sip_dtype_name(d->dtype));
    return;
  }
  size_t off = (size_t)snprintf(buf, n, "%s ", sip_dtype_name(d->dtype));
  if (off >= n) return;
  sip__shape_str(buf + off, n - off, d->rank, d->dims, ",");
  off += strlen(buf + off);
  snprintf(buf + off, n - off, "%s", d->rank ? " (-1: any size)" : "");
}

/* The messages below are built only on failure: this runs for every
 * input of every transform call. */
static sip_error_t *check_input(const sip__transform_t *t, const sip_io_desc_t *d,
                                const sip_tensor_t *x) {
  char want[256];
  if (x->dtype != d->dtype && (format_desc(want, sizeof want, d), 1))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform %s: input '%s': received dtype %s; expected %s", t->op->name,
                         d->name, sip_dtype_name(x->dtype), want);
  int ok = x->rank >= 0 && x->rank <= SIP_MAX_RANK && (d->rank < 0 || x->rank == d->rank);
  for (int i = 0; ok && d->rank >= 0 && i < d->rank; i++)
    ok = d->dims[i] < 0 || d->dims[i] == x->dims[i];
  if (!ok) {
    char got[256];
    sip__shape_str(got, sizeof got, x->rank < SIP_MAX_RANK ? x->rank : SIP_MAX_RANK, x->dims, ",");
    format_desc(want, sizeof want, d);
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform %s: input '%s': received shape %s; expected %s", t->op->name,
                         d->name, got, want);
  }
  sip_error_t *e = sip_tensor_validate(x);
  if (e) {
    sip_error_t *w = sip_error_new(SIP_INVALID_ARGUMENT, "transform %s: %s", t->op->name,
                                   sip_error_message(e));
    sip_error_free(e);
    return w;
  }
  return NULL;
}

/* "'a', 'b'" for messages; returns 1 so it can sit in a condition. */
static int input_names(const sip__transform_t *t, char *buf, size_t n) {
  buf[0] = '\0';
  for (size_t j = 0; j < t->n_in; j++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s'%s'", j ? ", " : "", t->in[j].name);
  return 1;
}

sip_error_t *sip__transform_run(const sip__transform_t *t, const sip_tensor_t *const *inputs,
                                size_t n_inputs, sip_tensor_t ***outputs, size_t *n_outputs) {
  *outputs = NULL;
  *n_outputs = 0;
  const sip_tensor_t *in[TF_MAX_IO] = {0};
  char names[256];
  if (n_inputs > t->n_in && input_names(t, names, sizeof names))
    return sip_error_new(SIP_INVALID_ARGUMENT, "transform %s takes %zu input%s (%s); got %zu",
                         t->op->name, t->n_in, t->n_in == 1 ? "" : "s", names, n_inputs);
  for (size_t i = 0; i < n_inputs; i++) {
    const sip_tensor_t *x = inputs[i];
    if (!x)
      return sip_error_new(SIP_INVALID_ARGUMENT, "transform %s: input %zu is missing (NULL)",
                           t->op->name, i);
    size_t slot = t->n_in;
    if (!x->name || !x->name[0])
      slot = i;
    else
      for (size_t j = 0; j < t->n_in && slot == t->n_in; j++)
        if (!strcmp(t->in[j].name, x->name)) slot = j;
    if (slot == t->n_in && input_names(t, names, sizeof names))
      return sip_error_new(SIP_INVALID_ARGUMENT, "transform %s has no input '%s'; expected %s",
                           t->op->name, x->name, names);
    if (in[slot])
      return sip_error_new(SIP_INVALID_ARGUMENT, "transform %s: input '%s' is given twice",
                           t->op->name, t->in[slot].name);
    in[slot] = x;
  }
  for (size_t j = 0; j < t->n_in; j++) {
    if (!in[j]) {
      char want[256];
      format_desc(want, sizeof want, &t->in[j]);
      return sip_error_new(SIP_INVALID_ARGUMENT, "transform %s: missing input '%s' (%s)",
                           t->op->name, t->in[j].name, want);
    }
    sip_error_t *e = check_input(t, &t->in[j], in[j]);
    if (e) return e;
  }
  sip_tensor_t **outs = sip__calloc(t->n_out, sizeof *outs);
  if (!outs) return SIP__OOM();
  sip_error_t *e = t->op->run(t, in, outs);
  for (size_t j = 0; !e && j < t->n_out; j++)
    if (!outs[j]) e = sip_error_new(SIP_INTERNAL, "transform %s left output '%s' unset",
                                    t->op->name, t->out[j].name);
  if (e) {
    sip__transform_outputs_free(outs, t->n_out);
    return e;
  }
  *outputs = outs;
  *n_outputs = t->n_out;
  return NULL;
}

void sip__transform_outputs_free(sip_tensor_t **outputs, size_t n) {
  if (!outputs) return;
  for (size_t i = 0; i < n; i++) sip_tensor_free(outputs[i]);
  sip__free(outputs);
}

/* ---- tensors ---- */

int64_t sip__tf_count(const sip_tensor_t *t) { return sip_tensor_count(t); }

sip_error_t *sip__tf_alloc_bytes(const char *name, sip_dtype_t dtype, int rank,
                                 const int64_t *dims, size_t nbytes, sip_tensor_t **out,
                                 void **data) {
  *out = NULL;
  if (nbytes > SIP__TRANSFORM_MAX_BYTES)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED,
                         "transform output '%s' would take %zu bytes; at most %zu are allowed",
                         name, nbytes, SIP__TRANSFORM_MAX_BYTES);
  sip_buf_t *b = sip_buf_new(nbytes);
  if (!b) return SIP__OOM();
  *out = sip_tensor_new_view(name, dtype, rank, dims, sip_buf_data(b), nbytes, b);
  sip_buf_unref(b);
  if (!*out) return SIP__OOM();
  if (data) *data = sip_buf_data(b);
  return NULL;
}

sip_error_t *sip__tf_alloc(const char *name, sip_dtype_t dtype, int rank, const int64_t *dims,
                           sip_tensor_t **out, void **data) {
  *out = NULL;
  size_t es = sip_dtype_size(dtype);
  uint64_t count = 1;
  int over = 0, zero = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return sip_error_new(SIP_INTERNAL, "transform output '%s': negative dim", name);
    zero |= dims[i] == 0;
  }
  /* A zero dim makes the tensor empty whatever the others are. */
  for (int i = 0; i < rank && !zero && !over; i++) {
    if (count > SIP__TRANSFORM_MAX_BYTES / (uint64_t)dims[i]) over = 1;
    count *= (uint64_t)dims[i];
  }
  if (zero) count = 0;
  if (over || count > SIP__TRANSFORM_MAX_BYTES / es)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED,
                         "transform output '%s' would exceed %zu bytes; send smaller inputs", name,
                         SIP__TRANSFORM_MAX_BYTES);
  return sip__tf_alloc_bytes(name, dtype, rank, dims, (size_t)count * es, out, data);
}

sip_error_t *sip__tf_image(const sip__transform_t *tf, const sip__tf_layout_t *l,
                           const sip_tensor_t *t, sip__tf_img_t *img) {
  (void)tf;
  memset(img, 0, sizeof *img);
  img->dtype = t->dtype;
  img->n = l->n >= 0 ? t->dims[l->n] : 1;
  img->c = t->dims[l->c];
  img->h = t->dims[l->h];
  img->w = t->dims[l->w];
  int64_t stride[SIP_MAX_RANK], s = 1;
  /* The tensor was validated, so these products cannot overflow. */
  for (int i = l->rank - 1; i >= 0; i--) {
    stride[i] = s;
    s *= t->dims[i];
  }
  img->sn = l->n >= 0 ? stride[l->n] : 0;
  img->sc = stride[l->c];
  img->sh = stride[l->h];
  img->sw = stride[l->w];
  img->data = t->data;
  return NULL;
}

sip_error_t *sip__tf_image_new(const char *name, const sip__tf_layout_t *l, sip_dtype_t dtype,
                               int64_t n, int64_t c, int64_t h, int64_t w, sip_tensor_t **out,
                               sip__tf_img_t *img) {
  int64_t dims[4];
  if (l->n >= 0) dims[l->n] = n;
  dims[l->c] = c;
  dims[l->h] = h;
  dims[l->w] = w;
  void *data;
  sip_error_t *e = sip__tf_alloc(name, dtype, l->rank, dims, out, &data);
  if (e) return e;
  sip__tf_image(NULL, l, *out, img);
  img->data = data;
  img->out = data;
  return NULL;
}
