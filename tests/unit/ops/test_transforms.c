/* Unit tests for src/ops/transform*.c: option validation and its
 * messages, input matching by name and position, hostile shapes (overflow,
 * zero-sized tensors with huge dims), numeric edge cases (cast saturation and
 * wrap-around, float16), the homography, DB boxes, CTC labels files.
 * Allocation failures, concurrent runs and random inputs are
 * test_transforms_robust.c. The numeric references for every operation are
 * in tests/integration/test_transforms.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "ops/transform_impl.h" /* sip__tf_homography */
#include "ops/transforms.h"
#include "transform_helpers.h"

/* ---- options ------------------------------------------------------------ */

static void test_option_errors(void **state) {
  (void)state;
  expect_new_error("warp", NULL, 0, SIP_INVALID_ARGUMENT, "unknown transform operation 'warp'",
                   "resize, letterbox", "db_postprocess", NULL);
  expect_new_error(NULL, NULL, 0, SIP_INVALID_ARGUMENT, "(none)", NULL);
  sip_kv_t k1[] = {KV("size", "32,48"), KV("sise", "1")};
  expect_new_error("resize", k1, 2, SIP_INVALID_ARGUMENT, "transform resize has no option 'sise'",
                   "expected one of: size, limit_side_len, multiple_of, layout, dtype", NULL);
  sip_kv_t k2[] = {KV("size", "32,48"), KV("size", "1,1")};
  expect_new_error("resize", k2, 2, SIP_INVALID_ARGUMENT, "option size is given twice", NULL);
  expect_new_error("resize", NULL, 0, SIP_INVALID_ARGUMENT, "option size is required", "H,W", NULL);
  const char *bad_sizes[] = {"0,5", "1,2,3", "a,b", "99999,1", "32", "3.5,4", "", "-1,4"};
  for (size_t i = 0; i < sizeof bad_sizes / sizeof *bad_sizes; i++) {
    sip_kv_t k[] = {KV("size", bad_sizes[i])};
    expect_new_error("resize", k, 1, SIP_INVALID_ARGUMENT, "transform resize: option size",
                     "expected \"H,W\": two integers in 1..16384", NULL);
  }
  sip_kv_t k3[] = {KV("size", "4,4"), KV("layout", "whc")};
  expect_new_error("resize", k3, 2, SIP_INVALID_ARGUMENT, "option layout: 'whc'",
                   "one of hwc, nhwc, chw, nchw", NULL);
  sip_kv_t k4[] = {KV("size", "4,4"), KV("dtype", "int32")};
  expect_new_error("resize", k4, 2, SIP_INVALID_ARGUMENT, "option dtype", "uint8 or float32", NULL);
  sip_kv_t k5[] = {KV("scale", "1/0")};
  expect_new_error("normalize", k5, 1, SIP_INVALID_ARGUMENT, "option scale: '1/0'", NULL);
  sip_kv_t k6[] = {KV("mean", "1,2,nan")};
  expect_new_error("normalize", k6, 1, SIP_INVALID_ARGUMENT, "option mean", NULL);
  sip_kv_t k7[] = {KV("to", "string")};
  expect_new_error("cast", k7, 1, SIP_INVALID_ARGUMENT, "option to: 'string'", "numeric dtype",
                   NULL);
  expect_new_error("cast", NULL, 0, SIP_INVALID_ARGUMENT, "option to is required", NULL);
  sip_kv_t k8[] = {KV("k", "0")};
  expect_new_error("topk", k8, 1, SIP_INVALID_ARGUMENT, "option k: '0'", NULL);
  sip_kv_t k9[] = {KV("iou_threshold", "1.5")};
  expect_new_error("nms", k9, 1, SIP_INVALID_ARGUMENT, "iou_threshold", "0..1", NULL);
  expect_new_error("crop_and_resize", NULL, 0, SIP_INVALID_ARGUMENT, "exactly one of target_size",
                   NULL);
  sip_kv_t k10[] = {KV("target_size", "8,8"), KV("max_width", "100")};
  expect_new_error("crop_and_resize", k10, 2, SIP_INVALID_ARGUMENT, "go with height", NULL);
  sip_kv_t k11[] = {KV("height", "48"), KV("min_width", "400"), KV("max_width", "100")};
  expect_new_error("crop_and_resize", k11, 3, SIP_INVALID_ARGUMENT, "min_width", NULL);
  expect_new_error("ctc_greedy_decode", NULL, 0, SIP_INVALID_ARGUMENT,
                   "option labels_file is required", NULL);
  sip_kv_t k12[] = {KV("labels_file", "/nonexistent/keys.txt")};
  expect_new_error("ctc_greedy_decode", k12, 1, SIP_NOT_FOUND, "cannot open '/nonexistent/keys.txt'",
                   NULL);
  sip_kv_t k13[] = {KV("labels_file", "/dev/null")};
  expect_new_error("ctc_greedy_decode", k13, 1, SIP_INVALID_ARGUMENT, "is empty", NULL);
  sip_kv_t k14[] = {KV("use_space_char", "maybe"), KV("labels_file", "/dev/null")};
  expect_new_error("ctc_greedy_decode", k14, 2, SIP_INVALID_ARGUMENT, "true or false", NULL);
  sip_kv_t k15[] = {KV("mode", "bgr2hsv")};
  expect_new_error("color_convert", k15, 1, SIP_INVALID_ARGUMENT, "'bgr2hsv'", "bgr2rgb", NULL);
  expect_new_error("color_convert", NULL, 0, SIP_INVALID_ARGUMENT, "option mode is required", NULL);
  sip_kv_t k16[] = {KV("flags", "text")};
  expect_new_error("rotate180", k16, 1, SIP_INVALID_ARGUMENT, "option flags", NULL);
  sip_kv_t k17[] = {KV("src_size", "0,3")};
  expect_new_error("db_postprocess", k17, 1, SIP_INVALID_ARGUMENT, "option src_size", NULL);
}

static void test_option_forms(void **state) {
  (void)state;
  /* Lists as YAML flow sequences and fractions are accepted. */
  sip_kv_t k[] = {KV("target_size", "[224, 224]"), KV("scale", "1/255"),
                  KV("mean", "[0.5, 0.5, 0.5]"), KV("std", " 0.5 ")};
  sip__transform_t *t = make("crop_and_resize", k, 4);
  const sip_io_desc_t *in, *out;
  size_t ni, no;
  sip__transform_describe(t, &in, &ni, &out, &no);
  assert_int_equal(ni, 2);
  assert_string_equal(in[0].name, "image");
  assert_int_equal(in[0].dtype, SIP_DTYPE_UINT8);
  assert_int_equal(in[0].rank, 3);
  assert_string_equal(in[1].name, "boxes");
  assert_int_equal(in[1].rank, -1);
  assert_int_equal(no, 2);
  assert_int_equal(out[0].rank, 4);
  assert_int_equal(out[0].dims[2], 224);
  assert_int_equal(out[0].dims[3], 224);
  assert_string_equal(sip__transform_op(t), "crop_and_resize");
  sip__transform_free(t);
  sip__transform_free(NULL);

  sip_kv_t r[] = {KV("flags", "int64")};
  t = make("rotate180", r, 1);
  sip__transform_describe(t, &in, &ni, &out, &no);
  assert_int_equal(ni, 2);
  assert_string_equal(in[1].name, "flags");
  assert_int_equal(in[1].dtype, SIP_DTYPE_INT64);
  assert_int_equal(in[0].dtype, SIP_DTYPE_FLOAT32); /* nchw default */
  sip__transform_free(t);
}

/* ---- inputs ------------------------------------------------------------- */

static void test_input_matching(void **state) {
  (void)state;
  sip__transform_t *t = make("nms", NULL, 0);
  float bx[8] = {0, 0, 10, 10, 1, 1, 11, 11}, sc[2] = {0.5f, 0.9f};
  int64_t db[2] = {2, 4}, ds[1] = {2};
  sip_tensor_t *boxes = tensor("boxes", SIP_DTYPE_FLOAT32, 2, db, bx);
  sip_tensor_t *scores = tensor("scores", SIP_DTYPE_FLOAT32, 1, ds, sc);
  sip_tensor_t **outs;
  size_t n;

  /* By name, in any order. */
  const sip_tensor_t *a[2] = {scores, boxes};
  assert_null(sip__transform_run(t, a, 2, &outs, &n));
  assert_int_equal(n, 3);
  assert_string_equal(outs[0]->name, "indices");
  assert_int_equal(outs[0]->dims[0], 1);
  assert_int_equal(((const int64_t *)outs[0]->data)[0], 1);
  sip__transform_outputs_free(outs, n);

  /* Unnamed tensors go by position. */
  sip_tensor_t *ub = tensor("", SIP_DTYPE_FLOAT32, 2, db, bx);
  sip_tensor_t *us = tensor(NULL, SIP_DTYPE_FLOAT32, 1, ds, sc);
  const sip_tensor_t *b[2] = {ub, us};
  assert_null(sip__transform_run(t, b, 2, &outs, &n));
  sip__transform_outputs_free(outs, n);

  const sip_tensor_t *c[2] = {boxes, boxes};
  expect_error(sip__transform_run(t, c, 2, &outs, &n), SIP_INVALID_ARGUMENT,
               "input 'boxes' is given twice");
  assert_null(outs);
  expect_error(sip__transform_run(t, a, 1, &outs, &n), SIP_INVALID_ARGUMENT,
               "missing input 'boxes' (float32 [-1,4]");
  const sip_tensor_t *d[3] = {boxes, scores, scores};
  expect_error(sip__transform_run(t, d, 3, &outs, &n), SIP_INVALID_ARGUMENT,
               "takes 2 inputs ('boxes', 'scores'); got 3");
  sip_tensor_t *other = tensor("image", SIP_DTYPE_FLOAT32, 1, ds, sc);
  const sip_tensor_t *e[2] = {boxes, other};
  expect_error(sip__transform_run(t, e, 2, &outs, &n), SIP_INVALID_ARGUMENT,
               "has no input 'image'; expected 'boxes', 'scores'");
  const sip_tensor_t *f[2] = {boxes, NULL};
  expect_error(sip__transform_run(t, f, 2, &outs, &n), SIP_INVALID_ARGUMENT, "NULL");

  /* Data shorter than the shape says: refused before any read. */
  sip_tensor_t *lie = sip_tensor_new_view("scores", SIP_DTYPE_FLOAT32, 1, (int64_t[]){1000}, sc,
                                          sizeof sc, NULL);
  const sip_tensor_t *g[2] = {boxes, lie};
  expect_error(sip__transform_run(t, g, 2, &outs, &n), SIP_INVALID_ARGUMENT, "data bytes");
  /* Fixed dims and dtype. */
  int64_t d5[2] = {1, 5};
  sip_tensor_t *b5 = tensor("boxes", SIP_DTYPE_FLOAT32, 2, d5, bx);
  const sip_tensor_t *h[2] = {b5, scores};
  expect_error(sip__transform_run(t, h, 2, &outs, &n), SIP_INVALID_ARGUMENT, "expected float32 [-1,4]");
  int32_t si[2] = {1, 2};
  sip_tensor_t *s32 = tensor("scores", SIP_DTYPE_INT32, 1, ds, si);
  const sip_tensor_t *k[2] = {boxes, s32};
  expect_error(sip__transform_run(t, k, 2, &outs, &n), SIP_INVALID_ARGUMENT,
               "received dtype int32; expected float32");

  sip_tensor_free(boxes);
  sip_tensor_free(scores);
  sip_tensor_free(ub);
  sip_tensor_free(us);
  sip_tensor_free(other);
  sip_tensor_free(lie);
  sip_tensor_free(b5);
  sip_tensor_free(s32);
  sip__transform_free(t);
}

/* ---- hostile shapes ------------------------------------------------------ */

static void test_hostile_shapes(void **state) {
  (void)state;
  sip_tensor_t **outs;
  size_t n;
  /* Dims whose product overflows: refused by validation. */
  sip_kv_t k[] = {KV("size", "4,4")};
  sip__transform_t *t = make("resize", k, 1);
  int64_t big[3] = {INT64_MAX, 2, 3};
  uint8_t px[6] = {0};
  sip_tensor_t *x = sip_tensor_new_view("image", SIP_DTYPE_UINT8, 3, big, px, 6, NULL);
  expect_error(run1(t, x, &outs, &n), SIP_INVALID_ARGUMENT, "overflows");
  sip_tensor_free(x);
  /* Zero-sized images cannot be resampled. */
  int64_t z[3] = {0, 5, 3};
  x = sip_tensor_new_view("image", SIP_DTYPE_UINT8, 3, z, px, 0, NULL);
  expect_error(run1(t, x, &outs, &n), SIP_INVALID_ARGUMENT, "0x5 pixels");
  sip_tensor_free(x);
  sip__transform_free(t);

  /* Zero elements with a huge other dim: answered at once (no spinning over
   * the empty dims), with the right output shape. */
  sip_kv_t k2[] = {KV("size", "4,4"), KV("layout", "nchw")};
  t = make("resize", k2, 2);
  int64_t zc[4] = {(int64_t)1 << 40, 0, 2, 2};
  x = sip_tensor_new_view("image", SIP_DTYPE_FLOAT32, 4, zc, px, 0, NULL);
  assert_null(run1(t, x, &outs, &n));
  assert_int_equal(outs[0]->dims[0], (int64_t)1 << 40);
  assert_int_equal(outs[0]->dims[1], 0);
  assert_int_equal(outs[0]->nbytes, 0);
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(x);
  sip__transform_free(t);

  const char *ops[] = {"softmax", "normalize", "to_tensor", "rotate180"};
  for (size_t i = 0; i < 4; i++) {
    sip_kv_t dt[] = {KV("dtype", "float32")};
    t = make(ops[i], dt, !strcmp(ops[i], "to_tensor") ? 1 : 0);
    int64_t zd[4] = {(int64_t)1 << 40, 3, 0, (int64_t)1 << 20};
    x = sip_tensor_new_view(!strcmp(ops[i], "normalize") || !strcmp(ops[i], "softmax") ? "input"
                                                                                       : "image",
                            SIP_DTYPE_FLOAT32, 4, zd, px, 0, NULL);
    sip_error_t *e = run1(t, x, &outs, &n);
    if (e) fail_msg("%s: %s", ops[i], sip_error_message(e));
    sip__transform_outputs_free(outs, n);
    sip_tensor_free(x);
    sip__transform_free(t);
  }

  sip_kv_t k3[] = {KV("k", "2"), KV("axis", "1")};
  t = make("topk", k3, 2);
  int64_t tz[3] = {(int64_t)1 << 40, 4, 0};
  x = sip_tensor_new_view("input", SIP_DTYPE_FLOAT32, 3, tz, px, 0, NULL);
  assert_null(run1(t, x, &outs, &n));
  assert_int_equal(outs[0]->dims[1], 2);
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(x);
  sip__transform_free(t);

  /* An output past the size cap: RESOURCE_EXHAUSTED, nothing allocated. */
  sip_kv_t k4[] = {KV("size", "16384,16384"), KV("layout", "nchw")};
  t = make("resize", k4, 2);
  int64_t d4[4] = {4, 3, 1, 1};
  float f12[12] = {0};
  x = tensor("image", SIP_DTYPE_FLOAT32, 4, d4, f12);
  expect_error(run1(t, x, &outs, &n), SIP_RESOURCE_EXHAUSTED, "would exceed");
  sip_tensor_free(x);
  sip__transform_free(t);

  /* db_postprocess on an empty map with a huge H. */
  sip_kv_t k5[] = {KV("src_size", "10,10")};
  t = make("db_postprocess", k5, 1);
  int64_t dz[4] = {1, 1, (int64_t)1 << 50, 0};
  x = sip_tensor_new_view("probs", SIP_DTYPE_FLOAT32, 4, dz, px, 0, NULL);
  assert_null(run1(t, x, &outs, &n));
  assert_int_equal(outs[0]->dims[0], 0);
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(x);
  sip__transform_free(t);

  /* crop_and_resize with zero channels and many boxes writes nothing. */
  sip_kv_t k6[] = {KV("target_size", "16384,16384")};
  t = make("crop_and_resize", k6, 1);
  int64_t di[3] = {(int64_t)1 << 30, (int64_t)1 << 30, 0};
  sip_tensor_t *img = sip_tensor_new_view("image", SIP_DTYPE_UINT8, 3, di, px, 0, NULL);
  float bx[4 * 64];
  for (int i = 0; i < 64; i++) {
    bx[i * 4] = bx[i * 4 + 1] = 0;
    bx[i * 4 + 2] = bx[i * 4 + 3] = 1e30f;
  }
  int64_t db[2] = {64, 4};
  sip_tensor_t *boxes = tensor("boxes", SIP_DTYPE_FLOAT32, 2, db, bx);
  const sip_tensor_t *ins[2] = {img, boxes};
  assert_null(sip__transform_run(t, ins, 2, &outs, &n));
  assert_int_equal(outs[0]->nbytes, 0);
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(img);
  sip_tensor_free(boxes);
  sip__transform_free(t);
}

/* ---- numerics ----------------------------------------------------------- */

static void test_cast_edges(void **state) {
  (void)state;
  sip_tensor_t **outs;
  size_t n;
  float in[8] = {NAN, INFINITY, -INFINITY, -1.0f, 300.0f, 3e9f, -2.9f, 2.9f};
  int64_t d[1] = {8};
  sip_tensor_t *x = tensor("input", SIP_DTYPE_FLOAT32, 1, d, in);

  sip_kv_t ku8[] = {KV("to", "uint8")};
  sip__transform_t *t = make("cast", ku8, 1);
  assert_null(run1(t, x, &outs, &n));
  const uint8_t *u = outs[0]->data;
  /* NaN -> 0; infinities saturate through int64 then wrap like numpy on
   * x86; in-range values truncate toward zero, then wrap. */
  assert_int_equal(u[0], 0);
  assert_int_equal(u[1], 255); /* INT64_MAX's low byte */
  assert_int_equal(u[2], 0);   /* INT64_MIN's */
  assert_int_equal(u[3], 255);
  assert_int_equal(u[4], 44);
  assert_int_equal(u[6], 254);
  assert_int_equal(u[7], 2);
  sip__transform_outputs_free(outs, n);
  sip__transform_free(t);

  sip_kv_t ki64[] = {KV("to", "int64")};
  t = make("cast", ki64, 1);
  assert_null(run1(t, x, &outs, &n));
  const int64_t *l = outs[0]->data;
  assert_int_equal(l[0], 0);
  assert_true(l[1] == INT64_MAX); /* saturated */
  assert_true(l[2] == INT64_MIN);
  assert_int_equal(l[5], 3000000000LL);
  assert_int_equal(l[6], -2);
  sip__transform_outputs_free(outs, n);
  sip__transform_free(t);
  sip_tensor_free(x);

  /* int64 -> uint64 keeps every bit; -> float16 rounds to nearest even. */
  int64_t big[3] = {INT64_MIN, -1, 2049};
  int64_t d3[1] = {3};
  x = tensor("input", SIP_DTYPE_INT64, 1, d3, big);
  sip_kv_t k64[] = {KV("from", "int64"), KV("to", "uint64")};
  t = make("cast", k64, 2);
  assert_null(run1(t, x, &outs, &n));
  const uint64_t *q = outs[0]->data;
  assert_true(q[0] == (uint64_t)1 << 63 && q[1] == UINT64_MAX && q[2] == 2049);
  sip__transform_outputs_free(outs, n);
  sip__transform_free(t);
  sip_kv_t k16[] = {KV("from", "int64"), KV("to", "float16")};
  t = make("cast", k16, 2);
  assert_null(run1(t, x, &outs, &n));
  const uint16_t *h = outs[0]->data;
  assert_int_equal(h[2], 0x6800); /* 2049 -> 2048 (ties to even) */
  assert_int_equal(h[1], 0xbc00); /* -1 */
  assert_int_equal(h[0], 0xfc00); /* -2^63 -> -inf */
  sip__transform_outputs_free(outs, n);
  sip__transform_free(t);
  sip_tensor_free(x);

  /* float16 -> float32: subnormals, infinities, NaN. */
  uint16_t hv[4] = {0x0001, 0x7c00, 0x7e00, 0x3555};
  int64_t d4[1] = {4};
  x = tensor("input", SIP_DTYPE_FLOAT16, 1, d4, hv);
  sip_kv_t kf[] = {KV("from", "float16"), KV("to", "float32")};
  t = make("cast", kf, 2);
  assert_null(run1(t, x, &outs, &n));
  const float *f = outs[0]->data;
  assert_true(f[0] == ldexpf(1, -24));
  assert_true(isinf(f[1]) && f[1] > 0);
  assert_true(isnan(f[2]));
  assert_true(fabsf(f[3] - 0.33325195f) < 1e-7f);
  sip__transform_outputs_free(outs, n);
  sip__transform_free(t);
  sip_tensor_free(x);
}

static void test_homography(void **state) {
  (void)state;
  double x[4] = {10, 110, 100, 5}, y[4] = {20, 25, 80, 70}, m[9];
  assert_int_equal(sip__tf_homography(x, y, m), 0);
  double s[4] = {0, 1, 1, 0}, t[4] = {0, 0, 1, 1};
  for (int k = 0; k < 4; k++) {
    double w = m[6] * s[k] + m[7] * t[k] + m[8];
    assert_true(fabs((m[0] * s[k] + m[1] * t[k] + m[2]) / w - x[k]) < 1e-9);
    assert_true(fabs((m[3] * s[k] + m[4] * t[k] + m[5]) / w - y[k]) < 1e-9);
  }
  /* A parallelogram is affine. */
  double px[4] = {0, 10, 15, 5}, py[4] = {0, 0, 10, 10};
  assert_int_equal(sip__tf_homography(px, py, m), 0);
  assert_true(m[6] == 0 && m[7] == 0);
  /* No area: no map. */
  double dx[4] = {3, 3, 3, 3}, dy[4] = {4, 4, 4, 4};
  assert_int_equal(sip__tf_homography(dx, dy, m), -1);
  double lx[4] = {0, 1, 2, 3}, ly[4] = {0, 1, 2, 3};
  assert_int_equal(sip__tf_homography(lx, ly, m), -1);
}

static void test_db_box(void **state) {
  (void)state;
  /* A 21 x 11 block (pixel centres 10..30 x 5..15) in a 40 x 24 map. */
  enum { H = 24, W = 40 };
  static float p[H * W];
  for (int y = 5; y <= 15; y++)
    for (int x = 10; x <= 30; x++) p[y * W + x] = 0.9f;
  p[0] = 0.9f; /* one pixel: under min_size */
  sip_kv_t k[] = {KV("src_size", "48,80")};
  sip__transform_t *t = make("db_postprocess", k, 1);
  int64_t d[4] = {1, 1, H, W};
  sip_tensor_t *x = tensor("probs", SIP_DTYPE_FLOAT32, 4, d, p);
  sip_tensor_t **outs;
  size_t n;
  assert_null(run1(t, x, &outs, &n));
  assert_int_equal(outs[0]->dims[0], 1);
  const float *b = outs[0]->data;
  double dd = 20.0 * 10.0 * 1.5 / (2 * 30.0);
  double want[8] = {10 - dd, 5 - dd, 30 + dd, 5 - dd, 30 + dd, 15 + dd, 10 - dd, 15 + dd};
  for (int i = 0; i < 8; i++) assert_true(fabs(b[i] - want[i] * 2) < 1e-3);
  assert_true(fabsf(((const float *)outs[1]->data)[0] - 0.9f) < 1e-6f);
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(x);
  sip__transform_free(t);
}

/* Writes `text` to a new temporary file named into `path` (at least 22 bytes). */
static void labels_file(char *path, const char *text) {
  strcpy(path, "/tmp/sip_labelsXXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

static void test_ctc_labels_file(void **state) {
  (void)state;
  char path[32];
  labels_file(path, "x\r\ny\n \nzz"); /* CRLF, a space label, no final newline */
  sip_kv_t k[] = {KV("labels_file", path)};
  sip__transform_t *t = make("ctc_greedy_decode", k, 1);
  /* classes: blank, x, y, " ", zz, space */
  enum { T = 7, C = 6 };
  int seq[T] = {1, 1, 0, 2, 3, 4, 5};
  float pr[T * C] = {0};
  for (int s = 0; s < T; s++) pr[s * C + seq[s]] = 1.0f;
  int64_t d[3] = {1, T, C};
  sip_tensor_t *x = tensor("probs", SIP_DTYPE_FLOAT32, 3, d, pr);
  sip_tensor_t **outs;
  size_t n;
  assert_null(run1(t, x, &outs, &n));
  assert_null(sip_tensor_validate(outs[0]));
  const unsigned char *s = outs[0]->data;
  assert_int_equal(s[0], 6);
  assert_memory_equal(s + 4, "xy zz ", 6);
  assert_true(((const float *)outs[1]->data)[0] == 1.0f);
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(x);
  sip__transform_free(t);
  unlink(path);
}

/* topk with labels_file: line i names class i; `labels` holds the top
 * classes' names in the shape of `values`; a class past the file fails. */
static void test_topk_labels_file(void **state) {
  (void)state;
  char path[32];
  labels_file(path, "cat\ndog\r\nbird\n");
  sip_kv_t k[] = {KV("labels_file", path), KV("k", "2")};
  sip__transform_t *t = make("topk", k, 2);
  float v[6] = {0.1f, 0.7f, 0.2f, 0.5f, 0.1f, 0.4f};
  int64_t d[2] = {2, 3};
  sip_tensor_t *x = tensor("input", SIP_DTYPE_FLOAT32, 2, d, v);
  sip_tensor_t **outs;
  size_t n;
  assert_null(run1(t, x, &outs, &n));
  assert_int_equal(n, 3);
  assert_string_equal(outs[2]->name, "labels");
  assert_int_equal(outs[2]->rank, 2);
  assert_int_equal(outs[2]->dims[1], 2);
  assert_null(sip_tensor_validate(outs[2]));
  /* dog, bird | cat, bird as u32-length-prefixed strings */
  static const unsigned char want[] = {3, 0, 0, 0, 'd', 'o', 'g', 4, 0, 0, 0, 'b', 'i', 'r', 'd',
                                       3, 0, 0, 0, 'c', 'a', 't', 4, 0, 0, 0, 'b', 'i', 'r', 'd'};
  assert_int_equal(outs[2]->nbytes, sizeof want);
  assert_memory_equal(outs[2]->data, want, sizeof want);
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(x);
  sip__transform_free(t);
  /* Four classes, three labels: the fourth's top-1 has no name. */
  sip_kv_t k1[] = {KV("labels_file", path)};
  t = make("topk", k1, 1);
  float w[4] = {0, 0, 0, 1};
  int64_t d1[2] = {1, 4};
  x = tensor("input", SIP_DTYPE_FLOAT32, 2, d1, w);
  expect_error(run1(t, x, &outs, &n), SIP_INVALID_ARGUMENT, "class 3 has no label");
  sip_tensor_free(x);
  sip__transform_free(t);
  unlink(path);
  sip_kv_t k2[] = {KV("labels_file", "/nonexistent/l.txt")};
  expect_new_error("topk", k2, 1, SIP_NOT_FOUND, "transform topk: option labels_file", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_option_errors),   cmocka_unit_test(test_option_forms),
      cmocka_unit_test(test_input_matching),  cmocka_unit_test(test_hostile_shapes),
      cmocka_unit_test(test_cast_edges),      cmocka_unit_test(test_homography),
      cmocka_unit_test(test_db_box),          cmocka_unit_test(test_ctc_labels_file),
      cmocka_unit_test(test_topk_labels_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
