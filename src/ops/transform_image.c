/* sip — image transforms: resize, letterbox, normalize, color_convert,
 * to_tensor, rotate180 (crop_and_resize is in transform_crop.c).
 *
 * Images are viewed through a layout (hwc, nhwc, chw, nchw) as N x C x H x W
 * with element strides, so one implementation serves every layout, uint8
 * and float32. Sampling follows OpenCV's INTER_LINEAR with half-pixel
 * centres (src = (dst + 0.5) * src_size / dst_size - 0.5, border pixels
 * replicated), because the models these pipelines feed were trained on
 * OpenCV-resized images. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "ops/transform_image.h"
#include "ops/transform_impl.h"

/* Views input `x` as an image; resampling needs at least one pixel. */
sip_error_t *sip__tf_image_in(const sip__transform_t *t, const sip_tensor_t *x,
                              sip__tf_img_t *img, int need_pixels) {
  sip__tf_image(t, &t->layout, x, img);
  if (need_pixels && (img->h < 1 || img->w < 1))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform %s: input '%s' is %lldx%lld pixels (layout %s); expected at "
                         "least 1x1",
                         t->op->name, x->name, (long long)img->h, (long long)img->w,
                         t->layout.name);
  return NULL;
}

/* A client may send a zero-sized tensor with other dims huge ([1e12,0,1,1]
 * is 0 bytes): loops over such dims would spin for hours doing nothing, so
 * every loop nest is skipped when the image holds no element. */
static int empty(const sip__tf_img_t *i) { return !i->n || !i->c || !i->h || !i->w; }

static void fill(const sip__tf_img_t *d, float v) {
  if (v == 0 || empty(d)) return; /* new tensors are zeroed */
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t c = 0; c < d->c; c++)
      for (int64_t y = 0; y < d->h; y++)
        for (int64_t x = 0; x < d->w; x++) sip__tf_put(d, n, c, y, x, v);
}

/* Whole rows at a time: the dtype test and index arithmetic happen once
 * per row, and the per-element loops are plain enough to vectorise. */
static void row_get(const sip__tf_img_t *img, int64_t n, int64_t c, int64_t y, float *row) {
  int64_t base = n * img->sn + c * img->sc + y * img->sh, sw = img->sw;
  if (img->dtype == SIP_DTYPE_UINT8) {
    const uint8_t *p = (const uint8_t *)img->data + base;
    for (int64_t x = 0; x < img->w; x++) row[x] = (float)p[x * sw];
  } else {
    const float *p = (const float *)img->data + base;
    for (int64_t x = 0; x < img->w; x++) row[x] = p[x * sw];
  }
}

/* Stores w values at (n, c, y, left..left+w-1); uint8 rounds and saturates
 * as sip__tf_put does. */
static void row_put(const sip__tf_img_t *img, int64_t n, int64_t c, int64_t y, int64_t left,
                    int64_t w, const float *row) {
  int64_t base = n * img->sn + c * img->sc + y * img->sh + left * img->sw, sw = img->sw;
  if (img->dtype == SIP_DTYPE_UINT8) {
    uint8_t *p = (uint8_t *)img->out + base;
    for (int64_t x = 0; x < w; x++) {
      float v = row[x];
      p[x * sw] = !(v > 0) ? 0 : v >= 255.0f ? 255 : (uint8_t)(v + 0.5f);
    }
  } else {
    float *p = (float *)img->out + base;
    for (int64_t x = 0; x < w; x++) p[x * sw] = row[x];
  }
}

/* out[x] = in[x] * a - b, then / d (d == 1 skips the division). The
 * operation order is normalize's (v * scale - mean) / std, so rows give
 * the same floats as the per-element definition. */
static void row_affine(float *row, int64_t w, float a, float b, float d) {
  if (d == 1.0f)
    for (int64_t x = 0; x < w; x++) row[x] = row[x] * a - b;
  else
    for (int64_t x = 0; x < w; x++) row[x] = (row[x] * a - b) / d;
}

/* Where row (n, c, y) of a float32 image with unit x stride lives, so a
 * row can be computed in place; NULL for other images (use row_put). */
static float *row_at(const sip__tf_img_t *img, int64_t n, int64_t c, int64_t y) {
  if (img->dtype != SIP_DTYPE_FLOAT32 || img->sw != 1) return NULL;
  return (float *)img->out + n * img->sn + c * img->sc + y * img->sh;
}

typedef struct lin_tap {
  int64_t i0, i1;
  float f;
} lin_tap_t;

static void lin_taps(int64_t src, int64_t dst, lin_tap_t *t) {
  double scale = (double)src / (double)dst;
  for (int64_t d = 0; d < dst; d++)
    sip__tf_tap(((double)d + 0.5) * scale - 0.5, src, &t[d].i0, &t[d].i1, &t[d].f);
}

/* One source row of (n, c) resampled horizontally to rw values. */
static void hrow(const sip__tf_img_t *src, int64_t n, int64_t c, int64_t y, const lin_tap_t *tx,
                 int64_t rw, float *tmp, float *out) {
  row_get(src, n, c, y, tmp);
  for (int64_t x = 0; x < rw; x++) {
    const lin_tap_t *b = &tx[x];
    out[x] = (1 - b->f) * tmp[b->i0] + b->f * tmp[b->i1];
  }
}

/* Resizes every image of `src` into the rh x rw region at (top, left) of
 * `dst` (same N and C). rh, rw <= TF_MAX_SIDE. Separable: each source row
 * is resampled horizontally once (kept while consecutive output rows use
 * it), then pairs of rows are blended vertically, in the same arithmetic
 * order as (1-a)*((1-b)*v00 + b*v01) + a*((1-b)*v10 + b*v11). */
static sip_error_t *resize_region(const sip__tf_img_t *src, const sip__tf_img_t *dst,
                                  int64_t top, int64_t left, int64_t rh, int64_t rw) {
  if (empty(src) || empty(dst)) return NULL;
  lin_tap_t *ty = sip__calloc((size_t)(rh + rw), sizeof *ty);
  float *buf = sip__calloc((size_t)(src->w + 3 * rw), sizeof *buf);
  if (!ty || !buf) {
    sip__free(ty);
    sip__free(buf);
    return SIP__OOM();
  }
  lin_tap_t *tx = ty + rh;
  float *tmp = buf, *r0 = buf + src->w, *r1 = r0 + rw, *o = r1 + rw;
  lin_taps(src->h, rh, ty);
  lin_taps(src->w, rw, tx);
  for (int64_t n = 0; n < src->n; n++)
    for (int64_t c = 0; c < src->c; c++) {
      int64_t have0 = -1, have1 = -1; /* source rows now in r0, r1 */
      for (int64_t y = 0; y < rh; y++) {
        const lin_tap_t *a = &ty[y];
        if (have0 != a->i0) {
          if (have1 == a->i0) { /* the previous lower row is this upper one */
            float *t = r0;
            r0 = r1;
            r1 = t;
            have0 = have1;
            have1 = -1;
          } else {
            hrow(src, n, c, a->i0, tx, rw, tmp, r0);
            have0 = a->i0;
          }
        }
        if (have1 != a->i1) {
          hrow(src, n, c, a->i1, tx, rw, tmp, r1);
          have1 = a->i1;
        }
        float fa = a->f, *d = row_at(dst, n, c, top + y), *out = d ? d + left : o;
        for (int64_t x = 0; x < rw; x++) out[x] = (1 - fa) * r0[x] + fa * r1[x];
        if (!d) row_put(dst, n, c, top + y, left, rw, o);
      }
    }
  sip__free(ty);
  sip__free(buf);
  return NULL;
}

/* ---- resize ---- */

static const char *const resize_opts[] = {"size", "limit_side_len", "multiple_of", "layout",
                                          "dtype", "target_size", NULL};

static sip_error_t *need_size(const sip__tf_opts_t *o, const sip__transform_t *t) {
  if (t->size_h) return NULL;
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "transform %s: option size is required; expected \"H,W\" (e.g. "
                       "\"224,224\")",
                       o->op);
}

static sip_error_t *resize_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  if ((e = sip__tf_opt_image(o, t, "hwc")) || (e = sip__tf_opt_hw(o, "size", &t->size_h, &t->size_w)) ||
      (e = sip__tf_opt_int(o, "limit_side_len", 1, TF_MAX_SIDE, &t->limit_side)) ||
      (e = sip__tf_opt_int(o, "multiple_of", 1, TF_MAX_SIDE, &t->multiple)))
    return e;
  /* target_size: crop_and_resize's name for the same thing. */
  if (sip__tf_opt(o, "target_size")) {
    if (t->size_h)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "transform resize: give size or target_size (the same \"H,W\"), not "
                           "both");
    if ((e = sip__tf_opt_hw(o, "target_size", &t->size_h, &t->size_w))) return e;
  }
  /* Either a fixed size, or a size that follows each image (PP-OCR). */
  if (t->size_h && (t->limit_side || t->multiple))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform resize: give either size (\"H,W\") or limit_side_len and/or "
                         "multiple_of (the size follows each image), not both");
  if (!t->limit_side && !t->multiple && (e = need_size(o, t))) return e;
  t->n_in = t->n_out = 1;
  sip__tf_io_image(t, &t->in[0], "image");
  sip__tf_io_image(t, &t->out[0], "output");
  return NULL;
}

/* PaddleOCR's DetResizeForTest (limit_type max): scale so the longer side
 * is at most limit_side_len (never up), truncate like Python's int(), then
 * round each side to the nearest multiple, ties to even like Python's
 * round(), and at least one multiple. */
static sip_error_t *fit_size(const sip__transform_t *t, int64_t h, int64_t w, int64_t *rh,
                             int64_t *rw) {
  double ratio = 1;
  int64_t longer = h > w ? h : w;
  if (t->limit_side && longer > t->limit_side) ratio = (double)t->limit_side / (double)longer;
  double sh = floor((double)h * ratio), sw = floor((double)w * ratio);
  if (t->multiple) {
    double m = (double)t->multiple;
    sh = fmax(rint(sh / m) * m, m);
    sw = fmax(rint(sw / m) * m, m);
  }
  sh = fmax(sh, 1);
  sw = fmax(sw, 1);
  if (sh > TF_MAX_SIDE || sw > TF_MAX_SIDE)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform resize: a %lldx%lld image would be resized to %.0fx%.0f; "
                         "expected at most %d per side (set limit_side_len)",
                         (long long)h, (long long)w, sh, sw, TF_MAX_SIDE);
  *rh = (int64_t)sh;
  *rw = (int64_t)sw;
  return NULL;
}

static sip_error_t *resize_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                               sip_tensor_t **out) {
  sip__tf_img_t src, dst;
  sip_error_t *e;
  int64_t rh = t->size_h, rw = t->size_w;
  if ((e = sip__tf_image_in(t, in[0], &src, 1)) ||
      (!t->size_h && (e = fit_size(t, src.h, src.w, &rh, &rw))) ||
      (e = sip__tf_image_new(t->out[0].name, &t->layout, t->dtype, src.n, src.c, rh, rw, &out[0],
                             &dst)))
    return e;
  return resize_region(&src, &dst, 0, 0, rh, rw);
}

const sip__tf_op_t sip__tf_resize = {"resize", resize_opts, resize_setup, resize_run, TF_ITEMS_IMAGES};

/* ---- letterbox ---- */

static const char *const letterbox_opts[] = {"size", "pad_value", "layout", "dtype", NULL};

static sip_error_t *letterbox_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  double pad = 114; /* the YOLO convention */
  if ((e = sip__tf_opt_image(o, t, "hwc")) || (e = sip__tf_opt_hw(o, "size", &t->size_h, &t->size_w)) ||
      (e = need_size(o, t)) || (e = sip__tf_opt_num(o, "pad_value", -1e30, 1e30, &pad)))
    return e;
  t->pad_value = (float)pad;
  t->n_in = 1;
  t->n_out = 3;
  sip__tf_io_image(t, &t->in[0], "image");
  sip__tf_io_image(t, &t->out[0], "output");
  sip__tf_io(&t->out[1], "scale", SIP_DTYPE_FLOAT32, 1);
  t->out[1].dims[0] = 1;
  sip__tf_io(&t->out[2], "offset", SIP_DTYPE_FLOAT32, 1);
  t->out[2].dims[0] = 2;
  return NULL;
}

static sip_error_t *letterbox_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                                  sip_tensor_t **out) {
  sip__tf_img_t src, dst;
  sip_error_t *e;
  if ((e = sip__tf_image_in(t, in[0], &src, 1)) ||
      (e = sip__tf_image_new(t->out[0].name, &t->layout, t->dtype, src.n, src.c, t->size_h,
                             t->size_w, &out[0], &dst)))
    return e;
  double r = fmin((double)t->size_h / (double)src.h, (double)t->size_w / (double)src.w);
  /* Rounded like the YOLO reference, at least a pixel, never past the box. */
  int64_t nh = llround((double)src.h * r), nw = llround((double)src.w * r);
  nh = nh < 1 ? 1 : nh > t->size_h ? t->size_h : nh;
  nw = nw < 1 ? 1 : nw > t->size_w ? t->size_w : nw;
  int64_t top = (t->size_h - nh) / 2, left = (t->size_w - nw) / 2;
  fill(&dst, t->pad_value);
  if ((e = resize_region(&src, &dst, top, left, nh, nw))) return e;
  int64_t d1 = 1, d2 = 2;
  float *s, *off;
  if ((e = sip__tf_alloc(t->out[1].name, SIP_DTYPE_FLOAT32, 1, &d1, &out[1], (void **)&s)) ||
      (e = sip__tf_alloc(t->out[2].name, SIP_DTYPE_FLOAT32, 1, &d2, &out[2], (void **)&off)))
    return e;
  s[0] = (float)r;
  off[0] = (float)top;
  off[1] = (float)left;
  return NULL;
}

const sip__tf_op_t sip__tf_letterbox = {"letterbox", letterbox_opts, letterbox_setup,
                                        letterbox_run, TF_NOT_ITEMS};

/* ---- normalize ---- */

static const char *const normalize_opts[] = {"mean", "std", "scale", "layout", "dtype", NULL};

sip_error_t *sip__tf_mean_std(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  double scale = 1;
  t->mean[0] = 0;
  t->std[0] = 1;
  t->n_mean = t->n_std = 1;
  if ((e = sip__tf_opt_num(o, "scale", -1e30, 1e30, &scale)) ||
      (e = sip__tf_opt_nums(o, "mean", -1e30, 1e30, t->mean, TF_MAX_CH, &t->n_mean)) ||
      (e = sip__tf_opt_nums(o, "std", -1e30, 1e30, t->std, TF_MAX_CH, &t->n_std)))
    return e;
  t->scale = (float)scale;
  for (int i = 0; i < t->n_std; i++)
    if (t->std[i] == 0) return sip__tf_bad(o, "std", "non-zero numbers (one, or one per channel)");
  return NULL;
}

/* mean/std hold one value or one per channel. */
sip_error_t *sip__tf_check_channels(const sip__transform_t *t, int64_t c) {
  if ((t->n_mean == 1 || t->n_mean == c) && (t->n_std == 1 || t->n_std == c)) return NULL;
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "transform %s: the image has %lld channels but mean has %d values and std "
                       "%d; expected 1 or %lld of each",
                       t->op->name, (long long)c, t->n_mean, t->n_std, (long long)c);
}

static sip_error_t *normalize_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  if ((e = sip__tf_opt_image(o, t, "nchw")) || (e = sip__tf_mean_std(t, o))) return e;
  t->n_in = t->n_out = 1;
  sip__tf_io_image(t, &t->in[0], "input");
  sip__tf_io(&t->out[0], "output", SIP_DTYPE_FLOAT32, t->layout.rank);
  return NULL;
}

static sip_error_t *normalize_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                                  sip_tensor_t **out) {
  sip__tf_img_t src, dst;
  sip_error_t *e;
  if ((e = sip__tf_image_in(t, in[0], &src, 0)) || (e = sip__tf_check_channels(t, src.c)) ||
      (e = sip__tf_image_new(t->out[0].name, &t->layout, SIP_DTYPE_FLOAT32, src.n, src.c, src.h,
                             src.w, &out[0], &dst)))
    return e;
  if (empty(&src)) return NULL;
  float *row = sip__calloc((size_t)src.w, sizeof *row);
  if (!row) return SIP__OOM();
  for (int64_t n = 0; n < src.n; n++)
    for (int64_t c = 0; c < src.c; c++) {
      float m = t->mean[t->n_mean == 1 ? 0 : c], s = t->std[t->n_std == 1 ? 0 : c];
      for (int64_t y = 0; y < src.h; y++) {
        float *d = row_at(&dst, n, c, y), *r = d ? d : row;
        row_get(&src, n, c, y, r);
        row_affine(r, src.w, t->scale, m, s);
        if (!d) row_put(&dst, n, c, y, 0, src.w, r);
      }
    }
  sip__free(row);
  return NULL;
}

const sip__tf_op_t sip__tf_normalize = {"normalize", normalize_opts, normalize_setup,
                                        normalize_run, TF_ITEMS_IMAGES};

/* ---- color_convert ---- */

enum { BGR2RGB, RGB2BGR, RGB2GRAY, BGR2GRAY };
static const char *const color_modes[] = {"bgr2rgb", "rgb2bgr", "rgb2gray", "bgr2gray", NULL};
static const char *const color_opts[] = {"mode", "layout", "dtype", NULL};

static sip_error_t *color_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  t->mode = -1;
  if ((e = sip__tf_opt_image(o, t, "hwc")) || (e = sip__tf_opt_enum(o, "mode", color_modes, &t->mode)))
    return e;
  if (t->mode < 0)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform color_convert: option mode is required; expected one of "
                         "bgr2rgb, rgb2bgr, rgb2gray, bgr2gray");
  t->n_in = t->n_out = 1;
  sip__tf_io_image(t, &t->in[0], "image");
  sip__tf_io_image(t, &t->out[0], "output");
  return NULL;
}

static sip_error_t *color_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                              sip_tensor_t **out) {
  sip__tf_img_t src, dst;
  sip_error_t *e;
  if ((e = sip__tf_image_in(t, in[0], &src, 0))) return e;
  if (src.c < 3)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform color_convert: input 'image' has %lld channels (layout %s); "
                         "expected 3 (or more: channels past the third are kept as they are)",
                         (long long)src.c, t->layout.name);
  int gray = t->mode == RGB2GRAY || t->mode == BGR2GRAY;
  if ((e = sip__tf_image_new(t->out[0].name, &t->layout, t->dtype, src.n, gray ? 1 : src.c,
                             src.h, src.w, &out[0], &dst)))
    return e;
  if (empty(&src)) return NULL;
  int r = t->mode == RGB2GRAY ? 0 : 2, b = 2 - r;
  for (int64_t n = 0; n < src.n; n++)
    for (int64_t y = 0; y < src.h; y++)
      for (int64_t x = 0; x < src.w; x++) {
        if (!gray) {
          for (int64_t c = 0; c < src.c; c++)
            sip__tf_put(&dst, n, c < 3 ? 2 - c : c, y, x, sip__tf_get(&src, n, c, y, x));
          continue;
        }
        float R = sip__tf_get(&src, n, r, y, x), G = sip__tf_get(&src, n, 1, y, x),
              B = sip__tf_get(&src, n, b, y, x);
        if (t->dtype == SIP_DTYPE_UINT8) {
          /* OpenCV's exact fixed-point weights (14 bits) for 8-bit images. */
          uint32_t v = ((uint32_t)R * 4899u + (uint32_t)G * 9617u + (uint32_t)B * 1868u + 8192u) >> 14;
          sip__tf_put(&dst, n, 0, y, x, (float)v);
        } else {
          sip__tf_put(&dst, n, 0, y, x, 0.299f * R + 0.587f * G + 0.114f * B);
        }
      }
  return NULL;
}

const sip__tf_op_t sip__tf_color_convert = {"color_convert", color_opts, color_setup, color_run, TF_ITEMS_IMAGES};

/* ---- to_tensor ---- */

static const char *const to_tensor_opts[] = {"scale", "dtype", NULL};

static sip_error_t *to_tensor_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  double scale = 1;
  t->dtype = SIP_DTYPE_UINT8;
  if ((e = sip__tf_opt_dtype(o, "dtype", &t->dtype)) ||
      (e = sip__tf_opt_num(o, "scale", -1e30, 1e30, &scale)))
    return e;
  if (t->dtype != SIP_DTYPE_UINT8 && t->dtype != SIP_DTYPE_FLOAT32)
    return sip__tf_bad(o, "dtype", "uint8 or float32 (the image element types)");
  t->scale = (float)scale;
  t->n_in = t->n_out = 1;
  sip__tf_io(&t->in[0], "image", t->dtype, -1); /* [H,W,C] or [N,H,W,C] */
  sip__tf_io(&t->out[0], "output", SIP_DTYPE_FLOAT32, 4);
  return NULL;
}

static sip_error_t *to_tensor_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                                  sip_tensor_t **out) {
  static const sip__tf_layout_t hwc = {"hwc", 3, -1, 2, 0, 1}, nhwc = {"nhwc", 4, 0, 3, 1, 2},
                                nchw = {"nchw", 4, 0, 1, 2, 3};
  const sip_tensor_t *x = in[0];
  if (x->rank != 3 && x->rank != 4)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform to_tensor: input 'image' has rank %d; expected [H,W,C] or "
                         "[N,H,W,C]",
                         x->rank);
  sip__tf_img_t src, dst;
  sip__tf_image(t, x->rank == 3 ? &hwc : &nhwc, x, &src);
  sip_error_t *e = sip__tf_image_new(t->out[0].name, &nchw, SIP_DTYPE_FLOAT32, src.n, src.c,
                                     src.h, src.w, &out[0], &dst);
  if (e || empty(&src)) return e;
  float *row = sip__calloc((size_t)src.w, sizeof *row);
  if (!row) return SIP__OOM();
  for (int64_t n = 0; n < src.n; n++)
    for (int64_t c = 0; c < src.c; c++)
      for (int64_t y = 0; y < src.h; y++) {
        float *d = row_at(&dst, n, c, y), *r = d ? d : row;
        row_get(&src, n, c, y, r);
        row_affine(r, src.w, t->scale, 0, 1);
        if (!d) row_put(&dst, n, c, y, 0, src.w, r);
      }
  sip__free(row);
  return NULL;
}

const sip__tf_op_t sip__tf_to_tensor = {"to_tensor", to_tensor_opts, to_tensor_setup,
                                        to_tensor_run, TF_NOT_ITEMS};

/* ---- rotate180 ---- */

static const char *const rotate_opts[] = {"layout", "dtype", "flags", "flag_index",
                                          "flag_threshold", "widths", NULL};

static sip_error_t *rotate_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  if ((e = sip__tf_opt_image(o, t, "nchw")) ||
      (e = sip__tf_opt_int(o, "flag_index", 0, 1000000000, &t->flag_index)) ||
      (e = sip__tf_opt_num(o, "flag_threshold", -1e30, 1e30, &t->flag_threshold)) ||
      (e = sip__tf_opt_bool(o, "widths", &t->has_widths)))
    return e;
  const char *f = sip__tf_opt(o, "flags");
  sip_dtype_t fd = SIP_DTYPE_FLOAT32;
  if (f && strcmp(f, "none") && strcmp(f, "false")) {
    if ((e = sip__tf_opt_dtype(o, "flags", &fd))) return e;
    t->has_flags = 1;
  }
  t->n_in = 1 + (size_t)t->has_flags + (size_t)t->has_widths;
  t->n_out = 1;
  sip__tf_io_image(t, &t->in[0], "image");
  if (t->has_flags) sip__tf_io(&t->in[1], "flags", fd, -1);
  /* crop_and_resize's widths: a crop padded on the right keeps its padding
   * there when turned, as PP-OCR turns the crop before padding it. */
  if (t->has_widths) sip__tf_io(&t->in[t->n_in - 1], "widths", SIP_DTYPE_INT64, 1);
  sip__tf_io_image(t, &t->out[0], "output");
  return NULL;
}

static sip_error_t *rotate_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                               sip_tensor_t **out) {
  sip__tf_img_t src, dst;
  sip_error_t *e;
  if ((e = sip__tf_image_in(t, in[0], &src, 0))) return e;
  int64_t k = 0;
  if (t->has_flags && src.n > 0) {
    int64_t cnt = sip__tf_count(in[1]);
    k = cnt / src.n;
    if (cnt % src.n || k <= t->flag_index)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "transform rotate180: input 'flags' has %lld elements for %lld "
                           "images; expected N x K elements with flag_index %lld < K",
                           (long long)cnt, (long long)src.n, (long long)t->flag_index);
  }
  const sip_tensor_t *wt = t->has_widths ? in[t->n_in - 1] : NULL;
  if (wt && wt->dims[0] != src.n)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform rotate180: input 'widths' has %lld values for %lld images; "
                         "expected one per image",
                         (long long)wt->dims[0], (long long)src.n);
  if ((e = sip__tf_image_new(t->out[0].name, &t->layout, t->dtype, src.n, src.c, src.h, src.w,
                             &out[0], &dst)))
    return e;
  if (empty(&src)) return NULL;
  for (int64_t n = 0; n < src.n; n++) {
    int rot = !t->has_flags ||
              sip__tf_read(in[1]->data, in[1]->dtype, n * k + t->flag_index) > t->flag_threshold;
    int64_t vw = src.w;
    if (wt) {
      int64_t v = ((const int64_t *)wt->data)[n];
      vw = v < 0 ? 0 : v > src.w ? src.w : v;
    }
    for (int64_t c = 0; c < src.c; c++)
      for (int64_t y = 0; y < src.h; y++)
        for (int64_t x = 0; x < src.w; x++)
          sip__tf_put(&dst, n, c, y, x,
                      rot && x < vw ? sip__tf_get(&src, n, c, src.h - 1 - y, vw - 1 - x)
                                    : sip__tf_get(&src, n, c, y, x));
  }
  return NULL;
}

const sip__tf_op_t sip__tf_rotate180 = {"rotate180", rotate_opts, rotate_setup, rotate_run, TF_ITEMS_IMAGES};
