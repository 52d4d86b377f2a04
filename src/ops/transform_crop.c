/* sip — the crop_and_resize transform: cuts boxes ([N,4] x1,y1,x2,y2) or
 * quads ([N,4,2], clockwise from top-left) out of one image and resamples
 * each to a fixed size or to a fixed height (the width following the box's
 * aspect ratio), through the unit square's homography onto the quad;
 * normalises with scale/mean/std like normalize. Sampling follows the
 * other image transforms (transform_image.c). */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "ops/transform_image.h"
#include "ops/transform_impl.h"

/* ---- crop_and_resize ---- */

static const char *const crop_opts[] = {"target_size", "height",    "max_width", "min_width",
                                        "rotate_tall", "layout",    "dtype",     "scale",
                                        "mean",        "std",       "pad_value", NULL};

static sip_error_t *crop_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  double pad = 0;
  t->max_width = 2048;
  if ((e = sip__tf_opt_image(o, t, "hwc")) || (e = sip__tf_mean_std(t, o)) ||
      (e = sip__tf_opt_hw(o, "target_size", &t->size_h, &t->size_w)) ||
      (e = sip__tf_opt_int(o, "height", 1, TF_MAX_SIDE, &t->height)) ||
      (e = sip__tf_opt_int(o, "max_width", 1, TF_MAX_SIDE, &t->max_width)) ||
      (e = sip__tf_opt_int(o, "min_width", 0, TF_MAX_SIDE, &t->min_width)) ||
      (e = sip__tf_opt_bool(o, "rotate_tall", &t->rotate_tall)) ||
      (e = sip__tf_opt_num(o, "pad_value", -1e30, 1e30, &pad)))
    return e;
  t->pad_value = (float)pad;
  if (!t->size_h == !t->height)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform crop_and_resize: give exactly one of target_size (\"H,W\": "
                         "every crop that size) or height (the width follows each box's aspect "
                         "ratio, up to max_width)");
  if (t->size_h && (sip__tf_opt(o, "max_width") || sip__tf_opt(o, "min_width") ||
                    sip__tf_opt(o, "rotate_tall")))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform crop_and_resize: max_width, min_width and rotate_tall go "
                         "with height, not with target_size");
  if (t->min_width > t->max_width)
    return sip__tf_bad(o, "min_width", "at most max_width");
  t->n_in = t->n_out = 2;
  sip__tf_io_image(t, &t->in[0], "image");
  sip__tf_io(&t->in[1], "boxes", SIP_DTYPE_FLOAT32, -1); /* [N,4] or [N,4,2] */
  sip__tf_io(&t->out[0], "output", SIP_DTYPE_FLOAT32, 4);
  t->out[0].dims[2] = t->size_h ? t->size_h : t->height;
  if (t->size_w) t->out[0].dims[3] = t->size_w;
  sip__tf_io(&t->out[1], "widths", SIP_DTYPE_INT64, 1);
  return NULL;
}

/* The projective map of the unit square onto a quad: (0,0) -> p0, (1,0) ->
 * p1, (1,1) -> p2, (0,1) -> p3, X = (a s + b t + c) / (g s + h t + 1) and
 * likewise Y with d, e, f (Heckbert's closed form of the 3x3 homography). */
typedef struct homography {
  double a, b, c, d, e, f, g, h;
} homography_t;

int sip__tf_homography(const double *x, const double *y, double *m9) {
  double dx1 = x[1] - x[2], dx2 = x[3] - x[2], sx = x[0] - x[1] + x[2] - x[3];
  double dy1 = y[1] - y[2], dy2 = y[3] - y[2], sy = y[0] - y[1] + y[2] - y[3];
  homography_t m;
  double den = dx1 * dy2 - dx2 * dy1;
  if (sx == 0 && sy == 0) {
    m.g = m.h = 0;
  } else {
    if (den == 0 || !isfinite(den)) return -1;
    m.g = (sx * dy2 - dx2 * sy) / den;
    m.h = (dx1 * sy - sx * dy1) / den;
  }
  m.a = x[1] - x[0] + m.g * x[1];
  m.b = x[3] - x[0] + m.h * x[3];
  m.c = x[0];
  m.d = y[1] - y[0] + m.g * y[1];
  m.e = y[3] - y[0] + m.h * y[3];
  m.f = y[0];
  /* The linear part must be invertible: otherwise the quad has no area. */
  double det = m.a * (m.e - m.f * m.h) - m.b * (m.d - m.f * m.g) + m.c * (m.d * m.h - m.e * m.g);
  if (det == 0 || !isfinite(det) || !isfinite(m.g) || !isfinite(m.h)) return -1;
  double v[9] = {m.a, m.b, m.c, m.d, m.e, m.f, m.g, m.h, 1};
  memcpy(m9, v, sizeof v);
  return 0;
}

typedef struct quad {
  double x[4], y[4];
} quad_t;

static double dist(const quad_t *q, int i, int j) {
  return hypot(q->x[i] - q->x[j], q->y[i] - q->y[j]);
}

static sip_error_t *crop_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                             sip_tensor_t **out) {
  sip__tf_img_t src;
  sip_error_t *e;
  if ((e = sip__tf_image_in(t, in[0], &src, 1))) return e;
  if (src.n != 1)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform crop_and_resize: input 'image' holds %lld images; expected "
                         "one (the boxes refer to one image)",
                         (long long)src.n);
  if ((e = sip__tf_check_channels(t, src.c))) return e;
  const sip_tensor_t *bx = in[1];
  int is_quad = bx->rank == 3 && bx->dims[1] == 4 && bx->dims[2] == 2;
  if (!is_quad && !(bx->rank == 2 && bx->dims[1] == 4))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform crop_and_resize: input 'boxes' has rank %d; expected [N,4] "
                         "(x1,y1,x2,y2) or [N,4,2] (four corners, clockwise from top-left)",
                         bx->rank);
  int64_t nb = bx->dims[0];
  const float *bv = bx->data;
  quad_t *q = sip__calloc((size_t)nb, sizeof *q);
  int64_t *wi = sip__calloc((size_t)nb, sizeof *wi);
  if (!q || !wi) {
    sip__free(q);
    sip__free(wi);
    return SIP__OOM();
  }
  int64_t ho = t->size_h ? t->size_h : t->height, wb = t->size_h ? t->size_w : t->min_width;
  for (int64_t i = 0; i < nb && !e; i++) {
    if (is_quad) {
      for (int k = 0; k < 4; k++) {
        q[i].x[k] = bv[i * 8 + k * 2];
        q[i].y[k] = bv[i * 8 + k * 2 + 1];
      }
    } else {
      const float *b = bv + i * 4;
      double x[4] = {b[0], b[2], b[2], b[0]}, y[4] = {b[1], b[1], b[3], b[3]};
      memcpy(q[i].x, x, sizeof x);
      memcpy(q[i].y, y, sizeof y);
    }
    for (int k = 0; k < 4 && !e; k++)
      if (!isfinite(q[i].x[k]) || !isfinite(q[i].y[k]))
        e = sip_error_new(SIP_INVALID_ARGUMENT,
                          "transform crop_and_resize: boxes[%lld] has a non-finite coordinate",
                          (long long)i);
    if (e || t->size_h) {
      wi[i] = t->size_w;
      continue;
    }
    /* PP-OCR's crop size: the longer of each pair of opposite sides. */
    double w = fmax(dist(&q[i], 0, 1), dist(&q[i], 2, 3));
    double h = fmax(dist(&q[i], 0, 3), dist(&q[i], 1, 2));
    if (t->rotate_tall && w > 0 && h / w >= 1.5) {
      /* A vertical text line: read it turned 90 degrees counter-clockwise
       * (PP-OCR's np.rot90), i.e. start the quad at the top-right corner. */
      quad_t r;
      for (int k = 0; k < 4; k++) {
        r.x[k] = q[i].x[(k + 1) % 4];
        r.y[k] = q[i].y[(k + 1) % 4];
      }
      q[i] = r;
      double s = w;
      w = h;
      h = s;
    }
    /* ceil like PP-OCR, less a hair so exact ratios are not pushed up by
     * rounding noise. */
    double want = h > 0 ? ceil((double)t->height * w / h - 1e-6) : (double)t->max_width;
    wi[i] = !(want >= 1) ? 1 : want > (double)t->max_width ? t->max_width : (int64_t)want;
    if (wi[i] > wb) wb = wi[i];
  }
  int64_t dims[4] = {nb, src.c, ho, wb}, dn = nb;
  float *o = NULL;
  int64_t *ow = NULL;
  if (!e) e = sip__tf_alloc(t->out[0].name, SIP_DTYPE_FLOAT32, 4, dims, &out[0], (void **)&o);
  if (!e) e = sip__tf_alloc(t->out[1].name, SIP_DTYPE_INT64, 1, &dn, &out[1], (void **)&ow);
  for (int64_t i = 0; i < nb && !e; i++) ow[i] = wi[i];
  /* (v * scale - mean) / std as one multiply-add per channel; with more
   * channels than TF_MAX_CH mean and std are single values (slot 0). */
  float mul[TF_MAX_CH], add[TF_MAX_CH];
  int per_channel = t->n_mean > 1 || t->n_std > 1;
  for (int64_t c = 0; c < src.c && c < TF_MAX_CH; c++) {
    float mean = t->mean[t->n_mean == 1 ? 0 : c], sd = t->std[t->n_std == 1 ? 0 : c];
    mul[c] = t->scale / sd;
    add[c] = -mean / sd;
  }
  for (int64_t i = 0; i < nb && !e && src.c; i++) { /* C = 0: nothing to write */
    double m[9];
    int ok = sip__tf_homography(q[i].x, q[i].y, m) == 0;
    float *item = o + i * src.c * ho * wb;
    for (int64_t v = 0; v < ho; v++) {
      for (int64_t u = 0; u < wi[i]; u++) {
        /* Pixel centres of the crop map onto continuous image coordinates;
         * -0.5 turns those into pixel-index coordinates. */
        double s = ((double)u + 0.5) / (double)wi[i], tt = ((double)v + 0.5) / (double)ho;
        double den = m[6] * s + m[7] * tt + 1;
        if (!ok || !(fabs(den) > 1e-12)) {
          for (int64_t c = 0; c < src.c; c++) item[(c * ho + v) * wb + u] = t->pad_value;
          continue;
        }
        int64_t y0, y1, x0, x1;
        float fy, fx;
        sip__tf_tap((m[3] * s + m[4] * tt + m[5]) / den - 0.5, src.h, &y0, &y1, &fy);
        sip__tf_tap((m[0] * s + m[1] * tt + m[2]) / den - 0.5, src.w, &x0, &x1, &fx);
        for (int64_t c = 0; c < src.c; c++) {
          float v00 = sip__tf_get(&src, 0, c, y0, x0), v01 = sip__tf_get(&src, 0, c, y0, x1);
          float v10 = sip__tf_get(&src, 0, c, y1, x0), v11 = sip__tf_get(&src, 0, c, y1, x1);
          float val = (1 - fy) * ((1 - fx) * v00 + fx * v01) + fy * ((1 - fx) * v10 + fx * v11);
          int64_t k = per_channel ? c : 0;
          item[(c * ho + v) * wb + u] = val * mul[k] + add[k];
        }
      }
      if (t->pad_value != 0) /* new tensors are zeroed */
        for (int64_t c = 0; c < src.c; c++)
          for (int64_t u = wi[i]; u < wb; u++) item[(c * ho + v) * wb + u] = t->pad_value;
    }
  }
  sip__free(q);
  sip__free(wi);
  return e;
}

const sip__tf_op_t sip__tf_crop_and_resize = {"crop_and_resize", crop_opts, crop_setup, crop_run, TF_NOT_ITEMS};
