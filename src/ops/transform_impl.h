/* sip — internals shared by the transform_*.c files (not for other
 * modules: they use transforms.h). */
#ifndef SIP_PIPELINE_TRANSFORM_IMPL_H
#define SIP_PIPELINE_TRANSFORM_IMPL_H

#include <math.h>
#include <stdint.h>

#include "ops/transforms.h"

#define TF_MAX_IO 4
#define TF_MAX_CH 64 /* per-channel mean/std values */
/* Bounds on sizes written in options (they size server allocations). */
#define TF_MAX_SIDE 16384

/* Where N, C, H, W sit in an image tensor's dims (n = -1: no batch axis). */
typedef struct sip__tf_layout {
  const char *name; /* "hwc", "nhwc", "chw", "nchw" */
  int rank, n, c, h, w;
} sip__tf_layout_t;

/* An image tensor seen through its layout: sizes and element strides. */
typedef struct sip__tf_img {
  sip_dtype_t dtype; /* uint8 or float32 */
  int64_t n, c, h, w;
  int64_t sn, sc, sh, sw;
  const void *data; /* input images */
  void *out;        /* output images */
} sip__tf_img_t;

typedef struct sip__tf_opts {
  const char *op;
  const sip_kv_t *kv;
  size_t n;
} sip__tf_opts_t;

typedef struct sip__tf_op sip__tf_op_t;

struct sip__transform {
  const sip__tf_op_t *op;
  sip_io_desc_t in[TF_MAX_IO], out[TF_MAX_IO];
  size_t n_in, n_out;

  /* Image operations. */
  sip__tf_layout_t layout;
  sip_dtype_t dtype;
  int64_t size_h, size_w; /* resize, letterbox, crop target_size (0: unset) */
  int64_t limit_side, multiple; /* resize by aspect ratio (PP-OCR det; 0: unset) */
  int64_t height, max_width, min_width;
  int rotate_tall;
  float pad_value;
  float scale;
  float mean[TF_MAX_CH], std[TF_MAX_CH];
  int n_mean, n_std;
  int mode;
  /* rotate180 */
  int has_flags;
  int has_widths; /* input `widths`: turn only each image's valid width */
  int64_t flag_index;
  double flag_threshold;
  /* cast */
  sip_dtype_t from, to;
  /* softmax, topk */
  int64_t axis, k;
  /* nms */
  double iou_threshold, score_threshold;
  int64_t max_output;
  /* ctc_greedy_decode: labels[i] (len label_len[i]) for class i+1. */
  char *label_blob;
  size_t *label_off, *label_len;
  size_t n_labels;
  int use_space;
  /* db_postprocess */
  double thresh, box_thresh, unclip_ratio, min_size;
  int64_t max_candidates;
  int64_t src_h, src_w; /* 0: from the input src_size */
};

struct sip__tf_op {
  const char *name;
  const char *const *options; /* accepted option keys, NULL-terminated */
  /* Parses options into t and fills t->in/out (names strdup'ed by the
   * caller from the static names set here). */
  sip_error_t *(*setup)(sip__transform_t *t, const sip__tf_opts_t *o);
  /* in[] follows t->in order, already checked against dtype and rank; out[]
   * has t->n_out slots to fill with owned tensors (the caller frees them on
   * failure). */
  sip_error_t *(*run)(const sip__transform_t *t, const sip_tensor_t *const *in,
                      sip_tensor_t **out);
  /* Whether dim 0 holds independent items, one output row per input row,
   * so that dynamic batching may concatenate requests (TF_ITEMS_*). */
  int items;
};

enum {
  TF_NOT_ITEMS = 0,  /* outputs are not row-aligned (boxes of one image, decoded bytes) */
  TF_ITEMS_IMAGES,   /* one image per row when the layout has a batch axis (nhwc, nchw) */
  TF_ITEMS_ROWS,     /* row by row whatever the shape */
  TF_ITEMS_OFF_AXIS, /* row by row unless `axis` is 0 */
};

/* The operations, by file. */
extern const sip__tf_op_t sip__tf_resize, sip__tf_letterbox, sip__tf_normalize,
    sip__tf_color_convert, sip__tf_to_tensor, sip__tf_rotate180; /* transform_image.c */
extern const sip__tf_op_t sip__tf_crop_and_resize;               /* transform_crop.c */
extern const sip__tf_op_t sip__tf_cast, sip__tf_softmax, sip__tf_topk, sip__tf_nms,
    sip__tf_ctc_greedy_decode;                                   /* transform_tensor.c */
extern const sip__tf_op_t sip__tf_db_postprocess;                /* transform_db.c */
extern const sip__tf_op_t sip__tf_decode_image;                  /* transform_decode.c */

/* ---- options (transforms.c) ----
 * Each returns an owned INVALID_ARGUMENT naming the op and option on a bad
 * value and leaves the default in *out when the option is absent. */
const char *sip__tf_opt(const sip__tf_opts_t *o, const char *key);
sip_error_t *sip__tf_bad(const sip__tf_opts_t *o, const char *key, const char *expect);
sip_error_t *sip__tf_opt_int(const sip__tf_opts_t *o, const char *key, int64_t lo, int64_t hi,
                             int64_t *out);
/* Accepts "0.5", "1e-3" and fractions "1/255". */
sip_error_t *sip__tf_opt_num(const sip__tf_opts_t *o, const char *key, double lo, double hi,
                             double *out);
sip_error_t *sip__tf_opt_bool(const sip__tf_opts_t *o, const char *key, int *out);
sip_error_t *sip__tf_opt_nums(const sip__tf_opts_t *o, const char *key, double lo, double hi,
                              float *out, int max, int *n);
/* "H,W" (or "[H, W]"), each 1..TF_MAX_SIDE. */
sip_error_t *sip__tf_opt_hw(const sip__tf_opts_t *o, const char *key, int64_t *h, int64_t *w);
sip_error_t *sip__tf_opt_dtype(const sip__tf_opts_t *o, const char *key, sip_dtype_t *out);
/* One of names[] (NULL-terminated); *out is the index. */
sip_error_t *sip__tf_opt_enum(const sip__tf_opts_t *o, const char *key,
                              const char *const *names, int *out);
/* layout + dtype options of image operations; the dtype default follows
 * the layout (uint8 for hwc/nhwc, float32 for chw/nchw). */
sip_error_t *sip__tf_opt_image(const sip__tf_opts_t *o, sip__transform_t *t,
                               const char *default_layout);

/* ---- descriptors ---- */
void sip__tf_io(sip_io_desc_t *d, const char *name, sip_dtype_t dtype, int rank);
/* An image descriptor of the transform's layout and dtype. */
void sip__tf_io_image(const sip__transform_t *t, sip_io_desc_t *d, const char *name);

/* ---- tensors ---- */
/* Allocates a zeroed output tensor, refusing element counts that overflow
 * or exceed SIP__TRANSFORM_MAX_BYTES. *data is its writable memory. */
sip_error_t *sip__tf_alloc(const char *name, sip_dtype_t dtype, int rank, const int64_t *dims,
                           sip_tensor_t **out, void **data);
/* The same for a STRING tensor of `nbytes` packed bytes. */
sip_error_t *sip__tf_alloc_bytes(const char *name, sip_dtype_t dtype, int rank,
                                 const int64_t *dims, size_t nbytes, sip_tensor_t **out,
                                 void **data);
/* Views input `t` through layout `l` (its rank was checked by the caller). */
sip_error_t *sip__tf_image(const sip__transform_t *tf, const sip__tf_layout_t *l,
                           const sip_tensor_t *t, sip__tf_img_t *img);
/* Allocates an output image of layout `l`, sizes n,c,h,w and dtype. */
sip_error_t *sip__tf_image_new(const char *name, const sip__tf_layout_t *l, sip_dtype_t dtype,
                               int64_t n, int64_t c, int64_t h, int64_t w, sip_tensor_t **out,
                               sip__tf_img_t *img);
/* Element count of `t` (validated tensors only). */
int64_t sip__tf_count(const sip_tensor_t *t);

/* Pixel access; inline because these run once per pixel and tap. */
static inline float sip__tf_get(const sip__tf_img_t *img, int64_t n, int64_t c, int64_t y,
                                int64_t x) {
  int64_t i = n * img->sn + c * img->sc + y * img->sh + x * img->sw;
  return img->dtype == SIP_DTYPE_UINT8 ? (float)((const uint8_t *)img->data)[i]
                                       : ((const float *)img->data)[i];
}

static inline void sip__tf_put(const sip__tf_img_t *img, int64_t n, int64_t c, int64_t y,
                               int64_t x, float v) {
  int64_t i = n * img->sn + c * img->sc + y * img->sh + x * img->sw;
  if (img->dtype == SIP_DTYPE_UINT8) {
    /* Round half up and saturate, as OpenCV's fixed-point paths do; NaN
     * becomes 0 (a float-to-int conversion of NaN would be undefined). */
    ((uint8_t *)img->out)[i] = !(v > 0) ? 0 : v >= 255.0f ? 255 : (uint8_t)(v + 0.5f);
  } else {
    ((float *)img->out)[i] = v;
  }
}

/* One axis of a bilinear tap: OpenCV clamps a position left of pixel 0 or
 * right of the last pixel to that pixel (weight 0 for the neighbour), which
 * is also what keeps NaN or huge coordinates from hostile boxes in range. */
static inline void sip__tf_tap(double p, int64_t size, int64_t *i0, int64_t *i1, float *f) {
  if (!(p > 0)) {
    *i0 = *i1 = 0;
    *f = 0;
  } else if (p >= (double)(size - 1)) {
    *i0 = *i1 = size - 1;
    *f = 0;
  } else {
    double fl = floor(p);
    *i0 = (int64_t)fl;
    *i1 = *i0 + 1;
    *f = (float)(p - fl);
  }
}

/* The 3x3 homography (row-major, m9[8] = 1) taking the unit square's
 * corners (0,0), (1,0), (1,1), (0,1) to the quad (x[k], y[k]), k = 0..3;
 * -1 for a degenerate quad (no area), for which no map exists
 * (transform_crop.c). */
int sip__tf_homography(const double *x, const double *y, double *m9);

/* Element i of numeric data of dtype dt as a double (transform_tensor.c). */
double sip__tf_read(const void *data, sip_dtype_t dt, int64_t i);

#endif
