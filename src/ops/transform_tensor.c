/* sip — tensor transforms: cast, softmax, topk, nms, ctc_greedy_decode. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/transform_impl.h"

/* ---- element access ---- */

#define LOAD(T)                                   \
  do {                                            \
    T v;                                          \
    memcpy(&v, (const char *)data + i * sizeof v, sizeof v); \
    return (double)v;                             \
  } while (0)

double sip__tf_read(const void *data, sip_dtype_t dt, int64_t i) {
  switch (dt) {
    case SIP_DTYPE_FLOAT32: LOAD(float);
    case SIP_DTYPE_FLOAT64: LOAD(double);
    case SIP_DTYPE_UINT8: LOAD(uint8_t);
    case SIP_DTYPE_INT8: LOAD(int8_t);
    case SIP_DTYPE_UINT16: LOAD(uint16_t);
    case SIP_DTYPE_INT16: LOAD(int16_t);
    case SIP_DTYPE_INT32: LOAD(int32_t);
    case SIP_DTYPE_INT64: LOAD(int64_t);
    case SIP_DTYPE_UINT32: LOAD(uint32_t);
    case SIP_DTYPE_UINT64: LOAD(uint64_t);
    case SIP_DTYPE_BOOL: return ((const uint8_t *)data)[i] != 0;
    case SIP_DTYPE_FLOAT16: {
      uint16_t h;
      memcpy(&h, (const char *)data + i * 2, 2);
      return (float)sip__f16_to_f64(h);
    }
    default: return 0;
  }
}

static int is_float(sip_dtype_t d) {
  return d == SIP_DTYPE_FLOAT32 || d == SIP_DTYPE_FLOAT64 || d == SIP_DTYPE_FLOAT16;
}
static int is_signed(sip_dtype_t d) {
  return d == SIP_DTYPE_INT8 || d == SIP_DTYPE_INT16 || d == SIP_DTYPE_INT32 ||
         d == SIP_DTYPE_INT64;
}

/* ---- cast ---- */

static const char *const cast_opts[] = {"to", "from", NULL};

static sip_error_t *cast_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  t->from = SIP_DTYPE_FLOAT32;
  t->to = SIP_DTYPE_INVALID;
  if ((e = sip__tf_opt_dtype(o, "from", &t->from)) || (e = sip__tf_opt_dtype(o, "to", &t->to)))
    return e;
  if (t->to == SIP_DTYPE_INVALID)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform cast: option to is required; expected a numeric dtype such "
                         "as float32, int64, uint8");
  t->n_in = t->n_out = 1;
  sip__tf_io(&t->in[0], "input", t->from, -1);
  sip__tf_io(&t->out[0], "output", t->to, -1);
  return NULL;
}

/* Integers are carried as their 64-bit two's complement pattern; storing
 * the low bytes then wraps like numpy's astype on x86 (-1.0 -> uint8 255).
 * Floats truncate toward zero; NaN gives 0 and values beyond int64 (beyond
 * uint64 for a uint64 target) saturate there, because C's own conversions
 * of such values are undefined. */
static uint64_t int_bits_of_double(double d, int to_u64) {
  if (isnan(d)) return 0;
  if (d >= 9223372036854775808.0) {
    if (!to_u64) return (uint64_t)INT64_MAX;
    return d >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)d;
  }
  if (d <= -9223372036854775808.0) return (uint64_t)INT64_MIN;
  return (uint64_t)(int64_t)d;
}

static void store_bits(void *out, size_t es, int64_t i, uint64_t bits) {
  unsigned char b[8];
  for (size_t k = 0; k < 8; k++) b[k] = (unsigned char)(bits >> (8 * k)); /* little-endian */
  memcpy((char *)out + (size_t)i * es, b, es);
}

static sip_error_t *cast_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                             sip_tensor_t **out) {
  const sip_tensor_t *x = in[0];
  void *o;
  sip_error_t *e = sip__tf_alloc(t->out[0].name, t->to, x->rank, x->dims, &out[0], &o);
  if (e) return e;
  int64_t n = sip__tf_count(x);
  size_t es = sip_dtype_size(t->to);
  for (int64_t i = 0; i < n; i++) {
    /* Exact 64-bit integers do not survive a trip through double. */
    uint64_t bits = 0;
    double d = 0;
    int exact = 1;
    if (t->from == SIP_DTYPE_INT64) {
      int64_t v;
      memcpy(&v, (const char *)x->data + i * 8, 8);
      bits = (uint64_t)v;
      d = (double)v;
    } else if (t->from == SIP_DTYPE_UINT64) {
      memcpy(&bits, (const char *)x->data + i * 8, 8);
      d = (double)bits;
    } else {
      d = sip__tf_read(x->data, t->from, i);
      exact = !is_float(t->from);
      bits = exact ? (is_signed(t->from) ? (uint64_t)(int64_t)d : (uint64_t)d) : 0;
    }
    switch (t->to) {
      case SIP_DTYPE_FLOAT32: ((float *)o)[i] = (float)d; break;
      case SIP_DTYPE_FLOAT64: ((double *)o)[i] = d; break;
      case SIP_DTYPE_FLOAT16: ((uint16_t *)o)[i] = sip__f64_to_f16((float)d); break; /* via float, as numpy */
      case SIP_DTYPE_BOOL: ((uint8_t *)o)[i] = exact ? bits != 0 : d != 0; break;
      default: store_bits(o, es, i, exact ? bits : int_bits_of_double(d, t->to == SIP_DTYPE_UINT64));
    }
  }
  return NULL;
}

const sip__tf_op_t sip__tf_cast = {"cast", cast_opts, cast_setup, cast_run, TF_ITEMS_ROWS};

/* ---- softmax / topk: [outer, L, inner] views ---- */

static sip_error_t *split_axis(const sip__transform_t *t, const sip_tensor_t *x, int64_t *outer,
                               int64_t *len, int64_t *inner, int *axis) {
  if (x->rank < 1)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform %s: input 'input' is a scalar; expected rank >= 1",
                         t->op->name);
  if (t->axis < -x->rank || t->axis >= x->rank)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform %s: axis %lld is out of range for input 'input' of rank %d; "
                         "expected -%d..%d",
                         t->op->name, (long long)t->axis, x->rank, x->rank, x->rank - 1);
  int a = (int)(t->axis < 0 ? t->axis + x->rank : t->axis);
  *outer = *inner = 1;
  for (int i = 0; i < a; i++) *outer *= x->dims[i];
  for (int i = a + 1; i < x->rank; i++) *inner *= x->dims[i];
  *len = x->dims[a];
  *axis = a;
  return NULL;
}

static const char *const softmax_opts[] = {"axis", NULL};

static sip_error_t *softmax_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  t->axis = -1;
  sip_error_t *e = sip__tf_opt_int(o, "axis", -SIP_MAX_RANK, SIP_MAX_RANK - 1, &t->axis);
  if (e) return e;
  t->n_in = t->n_out = 1;
  sip__tf_io(&t->in[0], "input", SIP_DTYPE_FLOAT32, -1);
  sip__tf_io(&t->out[0], "output", SIP_DTYPE_FLOAT32, -1);
  return NULL;
}

static sip_error_t *softmax_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                                sip_tensor_t **out) {
  const sip_tensor_t *x = in[0];
  int64_t outer, len, inner;
  int axis;
  float *o;
  sip_error_t *e;
  if ((e = split_axis(t, x, &outer, &len, &inner, &axis)) ||
      (e = sip__tf_alloc(t->out[0].name, SIP_DTYPE_FLOAT32, x->rank, x->dims, &out[0],
                         (void **)&o)))
    return e;
  if (!sip__tf_count(x)) return NULL; /* [1e15, 0]: nothing to do, and no spinning */
  const float *v = x->data;
  for (int64_t a = 0; a < outer; a++)
    for (int64_t b = 0; b < inner; b++) {
      const float *p = v + a * len * inner + b;
      float *q = o + a * len * inner + b;
      /* Subtracting the max keeps exp() from overflowing. */
      float mx = -INFINITY;
      for (int64_t i = 0; i < len; i++)
        if (p[i * inner] > mx) mx = p[i * inner];
      double sum = 0;
      for (int64_t i = 0; i < len; i++) sum += (q[i * inner] = expf(p[i * inner] - mx));
      for (int64_t i = 0; i < len; i++) q[i * inner] = (float)(q[i * inner] / sum);
    }
  return NULL;
}

const sip__tf_op_t sip__tf_softmax = {"softmax", softmax_opts, softmax_setup, softmax_run, TF_ITEMS_OFF_AXIS};

/* Labels files are small (PP-OCR's is 26 KB); this bounds a mistaken path
 * pointing at something huge. */
#define LABELS_MAX_BYTES (64u << 20)

static sip_error_t *load_labels(sip__transform_t *t, const char *op, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return sip_error_new(SIP_NOT_FOUND,
                         "transform %s: option labels_file: cannot open '%s': %s; "
                         "expected a text file with one label per line",
                         op, path, strerror(errno));
  size_t cap = 0, len = 0;
  char *buf = NULL;
  sip_error_t *e = NULL;
  for (;;) {
    if (len == cap) {
      if (cap >= LABELS_MAX_BYTES) {
        e = sip_error_new(SIP_INVALID_ARGUMENT,
                          "transform %s: labels_file '%s' is over %u bytes", op, path,
                          LABELS_MAX_BYTES);
        break;
      }
      cap = cap ? cap * 2 : 65536;
      char *nb = sip__realloc(buf, cap + 1);
      if (!nb) {
        e = SIP__OOM();
        break;
      }
      buf = nb;
    }
    size_t r = fread(buf + len, 1, cap - len, f);
    len += r;
    if (r == 0) {
      if (ferror(f))
        e = sip_error_new(SIP_NOT_FOUND, "transform %s: cannot read '%s'", op, path);
      break;
    }
  }
  fclose(f);
  if (e) {
    sip__free(buf);
    return e;
  }
  /* One label per line (PP-OCR strips only the line end, so a line holding
   * a space is the label " "); a last line without '\n' counts too. */
  size_t n = 0;
  for (size_t i = 0; i < len; i++) n += buf[i] == '\n';
  if (len && buf[len - 1] != '\n') n++;
  if (!n) {
    sip__free(buf);
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform %s: labels_file '%s' is empty; expected one "
                         "label per line",
                         op, path);
  }
  t->label_blob = buf;
  t->label_off = sip__calloc(n, sizeof *t->label_off);
  t->label_len = sip__calloc(n, sizeof *t->label_len);
  if (!t->label_off || !t->label_len) return SIP__OOM();
  size_t start = 0, k = 0;
  for (size_t i = 0; i <= len && k < n; i++) {
    if (i < len && buf[i] != '\n') continue;
    size_t end = i;
    if (end > start && buf[end - 1] == '\r') end--;
    t->label_off[k] = start;
    t->label_len[k++] = end - start;
    start = i + 1;
  }
  t->n_labels = n;
  return NULL;
}

static const char *const topk_opts[] = {"k", "axis", "labels_file", NULL};

static sip_error_t *topk_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  t->axis = -1;
  t->k = 1;
  sip_error_t *e;
  if ((e = sip__tf_opt_int(o, "axis", -SIP_MAX_RANK, SIP_MAX_RANK - 1, &t->axis)) ||
      (e = sip__tf_opt_int(o, "k", 1, INT32_MAX, &t->k)))
    return e;
  t->n_in = 1;
  t->n_out = 2;
  sip__tf_io(&t->in[0], "input", SIP_DTYPE_FLOAT32, -1);
  sip__tf_io(&t->out[0], "values", SIP_DTYPE_FLOAT32, -1);
  sip__tf_io(&t->out[1], "indices", SIP_DTYPE_INT64, -1);
  /* labels_file: line i names class i; the top classes' names as `labels`. */
  const char *path = sip__tf_opt(o, "labels_file");
  if (path) {
    if ((e = load_labels(t, "topk", path))) return e;
    t->n_out = 3;
    sip__tf_io(&t->out[2], "labels", SIP_DTYPE_STRING, -1);
  }
  return NULL;
}

/* out[2] of topk: the label of each index in `io` (n of them). */
static sip_error_t *topk_labels(const sip__transform_t *t, const int64_t *io, size_t n, int rank,
                                const int64_t *dims, sip_tensor_t **out) {
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    if (io[i] >= (int64_t)t->n_labels)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "transform topk: class %lld has no label; labels_file has %zu lines "
                           "(line i names class i)",
                           (long long)io[i], t->n_labels);
    len += 4 + t->label_len[io[i]];
  }
  unsigned char *o;
  sip_error_t *e = sip__tf_alloc_bytes(t->out[2].name, SIP_DTYPE_STRING, rank, dims, len, out,
                                       (void **)&o);
  for (size_t i = 0; !e && i < n; i++) {
    uint32_t ll = (uint32_t)t->label_len[io[i]];
    for (int b = 0; b < 4; b++) *o++ = (unsigned char)(ll >> (8 * b));
    memcpy(o, t->label_blob + t->label_off[io[i]], ll);
    o += ll;
  }
  return e;
}

typedef struct scored {
  float v;
  int64_t i;
} scored_t;

/* Descending by value with NaN above everything (as torch.topk), ties by
 * ascending index so results are deterministic. */
static int by_score_desc(const void *pa, const void *pb) {
  const scored_t *a = pa, *b = pb;
  int an = isnan(a->v), bn = isnan(b->v);
  if (an != bn) return an ? -1 : 1;
  if (!an && a->v != b->v) return a->v > b->v ? -1 : 1;
  return (a->i > b->i) - (a->i < b->i);
}

static sip_error_t *topk_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                             sip_tensor_t **out) {
  const sip_tensor_t *x = in[0];
  int64_t outer, len, inner;
  int axis;
  sip_error_t *e = split_axis(t, x, &outer, &len, &inner, &axis);
  if (e) return e;
  if (t->k > len)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform topk: k=%lld but axis %d of input 'input' has %lld elements; "
                         "expected k <= %lld",
                         (long long)t->k, axis, (long long)len, (long long)len);
  int64_t dims[SIP_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[axis] = t->k;
  float *vo;
  int64_t *io;
  if ((e = sip__tf_alloc(t->out[0].name, SIP_DTYPE_FLOAT32, x->rank, dims, &out[0], (void **)&vo)) ||
      (e = sip__tf_alloc(t->out[1].name, SIP_DTYPE_INT64, x->rank, dims, &out[1], (void **)&io)))
    return e;
  if (!sip__tf_count(x))
    return t->n_labels ? topk_labels(t, io, 0, x->rank, dims, &out[2]) : NULL;
  scored_t *s = sip__calloc((size_t)len, sizeof *s);
  if (!s) return SIP__OOM();
  const float *v = x->data;
  for (int64_t a = 0; a < outer; a++)
    for (int64_t b = 0; b < inner; b++) {
      for (int64_t i = 0; i < len; i++) s[i] = (scored_t){v[(a * len + i) * inner + b], i};
      qsort(s, (size_t)len, sizeof *s, by_score_desc);
      for (int64_t i = 0; i < t->k; i++) {
        vo[(a * t->k + i) * inner + b] = s[i].v;
        io[(a * t->k + i) * inner + b] = s[i].i;
      }
    }
  sip__free(s);
  return t->n_labels ? topk_labels(t, io, (size_t)(outer * t->k * inner), x->rank, dims, &out[2])
                     : NULL;
}

const sip__tf_op_t sip__tf_topk = {"topk", topk_opts, topk_setup, topk_run, TF_ITEMS_OFF_AXIS};

/* ---- nms ---- */

static const char *const nms_opts[] = {"iou_threshold", "score_threshold", "max_output", NULL};

/* Greedy NMS is quadratic in the candidates; this bounds the work one
 * request can demand. */
#define NMS_MAX_BOXES 262144

static sip_error_t *nms_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  t->iou_threshold = 0.5;
  t->score_threshold = -INFINITY;
  t->max_output = 0;
  if ((e = sip__tf_opt_num(o, "iou_threshold", 0, 1, &t->iou_threshold)) ||
      (e = sip__tf_opt_num(o, "score_threshold", -1e30, 1e30, &t->score_threshold)) ||
      (e = sip__tf_opt_int(o, "max_output", 0, INT32_MAX, &t->max_output)))
    return e;
  t->n_in = 2;
  t->n_out = 3;
  sip__tf_io(&t->in[0], "boxes", SIP_DTYPE_FLOAT32, 2);
  t->in[0].dims[1] = 4;
  sip__tf_io(&t->in[1], "scores", SIP_DTYPE_FLOAT32, 1);
  sip__tf_io(&t->out[0], "indices", SIP_DTYPE_INT64, 1);
  sip__tf_io(&t->out[1], "boxes", SIP_DTYPE_FLOAT32, 2);
  t->out[1].dims[1] = 4;
  sip__tf_io(&t->out[2], "scores", SIP_DTYPE_FLOAT32, 1);
  return NULL;
}

static sip_error_t *nms_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                            sip_tensor_t **out) {
  int64_t n = in[0]->dims[0];
  if (in[1]->dims[0] != n)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform nms: %lld boxes but %lld scores; expected one score per box",
                         (long long)n, (long long)in[1]->dims[0]);
  if (n > NMS_MAX_BOXES)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform nms: %lld boxes; at most %d are accepted (filter by score "
                         "first)",
                         (long long)n, NMS_MAX_BOXES);
  const float *bv = in[0]->data, *sv = in[1]->data;
  scored_t *cand = sip__calloc((size_t)n, sizeof *cand);
  double *box = sip__calloc((size_t)n * 5, sizeof *box); /* x1,y1,x2,y2,area */
  unsigned char *dead = sip__calloc((size_t)n, 1);
  int64_t *keep = sip__calloc((size_t)n, sizeof *keep);
  sip_error_t *e = NULL;
  if (!cand || !box || !dead || !keep) e = SIP__OOM();
  int64_t m = 0, k = 0;
  for (int64_t i = 0; !e && i < n; i++) {
    /* Corners in either order, as the NonMaxSuppression operator accepts them. */
    const float *b = bv + i * 4;
    double *d = box + i * 5;
    d[0] = fmin(b[0], b[2]);
    d[1] = fmin(b[1], b[3]);
    d[2] = fmax(b[0], b[2]);
    d[3] = fmax(b[1], b[3]);
    d[4] = (d[2] - d[0]) * (d[3] - d[1]);
    if (sv[i] > t->score_threshold) cand[m++] = (scored_t){sv[i], i}; /* NaN never passes */
  }
  if (!e) qsort(cand, (size_t)m, sizeof *cand, by_score_desc);
  for (int64_t a = 0; !e && a < m && (!t->max_output || k < t->max_output); a++) {
    if (dead[a]) continue;
    const double *p = box + cand[a].i * 5;
    keep[k++] = cand[a].i;
    for (int64_t b = a + 1; b < m; b++) {
      if (dead[b]) continue;
      const double *q = box + cand[b].i * 5;
      double iw = fmin(p[2], q[2]) - fmax(p[0], q[0]), ih = fmin(p[3], q[3]) - fmax(p[1], q[1]);
      if (!(iw > 0 && ih > 0)) continue;
      double inter = iw * ih, uni = p[4] + q[4] - inter;
      if (uni > 0 && inter / uni > t->iou_threshold) dead[b] = 1;
    }
  }
  int64_t d1 = k, d2[2] = {k, 4};
  int64_t *oi;
  float *ob, *os;
  if (!e && !(e = sip__tf_alloc(t->out[0].name, SIP_DTYPE_INT64, 1, &d1, &out[0], (void **)&oi)) &&
      !(e = sip__tf_alloc(t->out[1].name, SIP_DTYPE_FLOAT32, 2, d2, &out[1], (void **)&ob)) &&
      !(e = sip__tf_alloc(t->out[2].name, SIP_DTYPE_FLOAT32, 1, &d1, &out[2], (void **)&os))) {
    for (int64_t i = 0; i < k; i++) {
      oi[i] = keep[i];
      memcpy(ob + i * 4, bv + keep[i] * 4, 4 * sizeof *ob);
      os[i] = sv[keep[i]];
    }
  }
  sip__free(cand);
  sip__free(box);
  sip__free(dead);
  sip__free(keep);
  return e;
}

const sip__tf_op_t sip__tf_nms = {"nms", nms_opts, nms_setup, nms_run, TF_NOT_ITEMS};

/* ---- ctc_greedy_decode ---- */

static const char *const ctc_opts[] = {"labels_file", "use_space_char", NULL};

static sip_error_t *ctc_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  t->use_space = 1;
  if ((e = sip__tf_opt_bool(o, "use_space_char", &t->use_space))) return e;
  const char *path = sip__tf_opt(o, "labels_file");
  if (!path || !*path)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform ctc_greedy_decode: option labels_file is required; expected "
                         "a text file with one label per line (class i+1 is line i; class 0 is "
                         "the CTC blank)");
  if ((e = load_labels(t, "ctc_greedy_decode", path))) return e;
  t->n_in = 1;
  t->n_out = 2;
  sip__tf_io(&t->in[0], "probs", SIP_DTYPE_FLOAT32, 3);
  sip__tf_io(&t->out[0], "text", SIP_DTYPE_STRING, 1);
  sip__tf_io(&t->out[1], "scores", SIP_DTYPE_FLOAT32, 1);
  return NULL;
}

static sip_error_t *ctc_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                            sip_tensor_t **out) {
  const sip_tensor_t *x = in[0];
  int64_t n = x->dims[0], steps = x->dims[1], classes = x->dims[2];
  int64_t want = 1 + (int64_t)t->n_labels + t->use_space;
  if (classes != want)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform ctc_greedy_decode: input 'probs' has %lld classes; expected "
                         "%lld (blank + %zu labels%s)",
                         (long long)classes, (long long)want, t->n_labels,
                         t->use_space ? " + space" : "");
  int64_t d1 = n;
  float *scores;
  sip_error_t *e =
      sip__tf_alloc(t->out[1].name, SIP_DTYPE_FLOAT32, 1, &d1, &out[1], (void **)&scores);
  if (e) return e;
  /* Packed as the STRING wire encoding: u32 LE length, then the bytes. */
  size_t cap = 4096, len = 0;
  unsigned char *buf = sip__malloc(cap);
  if (!buf) return SIP__OOM();
  const float *p = x->data;
  for (int64_t i = 0; i < n && !e; i++) {
    size_t at = len;
    len += 4;
    if (len > cap) e = SIP__OOM(); /* cap >= 4096 and grows ahead below */
    int64_t prev = -1, kept = 0;
    double sum = 0;
    for (int64_t s = 0; s < steps && !e; s++) {
      const float *row = p + (i * steps + s) * classes;
      int64_t best = 0;
      for (int64_t c = 1; c < classes; c++)
        if (row[c] > row[best]) best = c;
      /* Greedy CTC: a new non-blank class starts a character; repeats of
       * the previous step's class are the same character. */
      if (best != 0 && best != prev) {
        const char *lab = " ";
        size_t ll = 1;
        if (best <= (int64_t)t->n_labels) {
          lab = t->label_blob + t->label_off[best - 1];
          ll = t->label_len[best - 1];
        }
        if (cap - len < ll + 4) {
          size_t nc = cap;
          while (nc - len < ll + 4) nc *= 2;
          unsigned char *nb = nc > SIP__TRANSFORM_MAX_BYTES ? NULL : sip__realloc(buf, nc);
          if (!nb) {
            e = nc > SIP__TRANSFORM_MAX_BYTES
                    ? sip_error_new(SIP_RESOURCE_EXHAUSTED,
                                    "transform ctc_greedy_decode: decoded text over %zu bytes",
                                    SIP__TRANSFORM_MAX_BYTES)
                    : SIP__OOM();
            break;
          }
          buf = nb;
          cap = nc;
        }
        memcpy(buf + len, lab, ll);
        len += ll;
        sum += row[best];
        kept++;
      }
      prev = best;
    }
    if (e) break;
    uint32_t sl = (uint32_t)(len - at - 4);
    for (int b = 0; b < 4; b++) buf[at + (size_t)b] = (unsigned char)(sl >> (8 * b));
    scores[i] = kept ? (float)(sum / (double)kept) : 0.0f;
    /* Keep room for the next length prefix. */
    if (cap - len < 4) {
      unsigned char *nb = sip__realloc(buf, cap * 2);
      if (!nb) e = SIP__OOM();
      else {
        buf = nb;
        cap *= 2;
      }
    }
  }
  void *o;
  if (!e && !(e = sip__tf_alloc_bytes(t->out[0].name, SIP_DTYPE_STRING, 1, &d1, len, &out[0], &o)))
    memcpy(o, buf, len);
  sip__free(buf);
  return e;
}

const sip__tf_op_t sip__tf_ctc_greedy_decode = {"ctc_greedy_decode", ctc_opts, ctc_setup,
                                                ctc_run, TF_ITEMS_ROWS};
