/* Unit tests for image input: decode_image (src/ops/transform_decode.c)
 * on PNG and JPEG files written here with libpng and libjpeg, its modes and
 * its answers to hostile files (not an image, truncated, oversized headers,
 * allocation failures); resize's limit_side_len / multiple_of sizes
 * (PaddleOCR's DetResizeForTest); rotate180's widths; and the per-pool
 * preprocess chain (src/session/preprocess.c) with its config errors. The
 * pixel references against PIL are in tests/integration/test_preprocess.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "config/config.h"
#include "core/core.h"
#include "session/preprocess.h"
#include "ops/transforms.h"
#include "backend/backends.h"

#define KV(k, v) ((sip_kv_t){(k), (v)})
#define IW 13
#define IH 9

static uint8_t rgb[IH * IW * 3];

static void fill_rgb(void) {
  for (int i = 0; i < IH * IW * 3; i++) rgb[i] = (uint8_t)(i * 37 + (i / 3) * 11);
}

/* ---- encoders ------------------------------------------------------------ */

static uint8_t *png_of(const uint8_t *pix, int w, int h, int gray, size_t *n) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = (png_uint_32)w;
  im.height = (png_uint_32)h;
  im.format = gray ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  assert_true(png_image_write_to_memory(&im, NULL, &size, 0, pix, 0, NULL));
  uint8_t *buf = malloc(size);
  assert_true(png_image_write_to_memory(&im, buf, &size, 0, pix, 0, NULL));
  *n = size;
  return buf;
}

static uint8_t *jpeg_of(const uint8_t *pix, int w, int h, int quality, size_t *n) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char *buf = NULL;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = (JSAMPROW)(pix + (size_t)c.next_scanline * (size_t)w * 3);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  *n = size;
  return buf;
}

/* ---- helpers -------------------------------------------------------------- */

static sip__transform_t *make(const char *op, const sip_kv_t *kv, size_t n) {
  sip__transform_t *t = NULL;
  sip_error_t *e = sip__transform_new(op, kv, n, &t);
  if (e) fail_msg("%s: %s", op, sip_error_message(e));
  return t;
}

static sip_error_t *decode(const char *mode, const uint8_t *data, size_t n, sip_tensor_t ***outs,
                           size_t *no) {
  sip_kv_t kv = KV("mode", mode);
  sip__transform_t *t = make("decode_image", &kv, 1);
  int64_t dim = (int64_t)n;
  sip_tensor_t *in = sip_tensor_new_view("data", SIP_DTYPE_UINT8, 1, &dim, data, n, NULL);
  const sip_tensor_t *ins[1] = {in};
  sip_error_t *e = sip__transform_run(t, ins, 1, outs, no);
  sip_tensor_free(in);
  sip__transform_free(t);
  return e;
}

static void expect_error(sip_error_t *e, sip_code_t code, const char *frag) {
  assert_non_null(e);
  if (sip_error_code(e) != code || !strstr(sip_error_message(e), frag))
    fail_msg("got %s '%s'; want %s with '%s'", sip_code_name(sip_error_code(e)),
             sip_error_message(e), sip_code_name(code), frag);
  sip_error_free(e);
}

/* ---- decode ---------------------------------------------------------------- */

static void test_png_modes(void **state) {
  (void)state;
  size_t n;
  uint8_t *png = png_of(rgb, IW, IH, 0, &n);
  sip_tensor_t **o;
  size_t no;
  assert_null(decode("rgb", png, n, &o, &no));
  assert_int_equal(no, 2);
  assert_int_equal(o[0]->rank, 3);
  assert_int_equal(o[0]->dims[0], IH);
  assert_int_equal(o[0]->dims[1], IW);
  assert_int_equal(o[0]->dims[2], 3);
  assert_memory_equal(o[0]->data, rgb, sizeof rgb);
  const int64_t *hw = o[1]->data;
  assert_int_equal(hw[0], IH);
  assert_int_equal(hw[1], IW);
  sip__transform_outputs_free(o, no);

  assert_null(decode("bgr", png, n, &o, &no));
  const uint8_t *p = o[0]->data;
  for (int i = 0; i < IH * IW; i++) {
    assert_int_equal(p[i * 3], rgb[i * 3 + 2]);
    assert_int_equal(p[i * 3 + 1], rgb[i * 3 + 1]);
    assert_int_equal(p[i * 3 + 2], rgb[i * 3]);
  }
  sip__transform_outputs_free(o, no);

  assert_null(decode("gray", png, n, &o, &no));
  assert_int_equal(o[0]->dims[2], 1);
  p = o[0]->data;
  for (int i = 0; i < IH * IW; i++) { /* OpenCV's fixed-point RGB -> gray */
    unsigned want =
        (rgb[i * 3] * 4899u + rgb[i * 3 + 1] * 9617u + rgb[i * 3 + 2] * 1868u + 8192u) >> 14;
    assert_int_equal(p[i], want);
  }
  sip__transform_outputs_free(o, no);
  free(png);

  /* A gray file: gray stays, rgb repeats it. */
  uint8_t g[IH * IW];
  for (int i = 0; i < IH * IW; i++) g[i] = (uint8_t)(i * 7);
  png = png_of(g, IW, IH, 1, &n);
  assert_null(decode("gray", png, n, &o, &no));
  assert_memory_equal(o[0]->data, g, sizeof g);
  sip__transform_outputs_free(o, no);
  assert_null(decode("rgb", png, n, &o, &no));
  p = o[0]->data;
  for (int i = 0; i < IH * IW; i++) assert_true(p[i * 3] == g[i] && p[i * 3 + 2] == g[i]);
  sip__transform_outputs_free(o, no);
  free(png);
}

static void test_jpeg_and_string_input(void **state) {
  (void)state;
  size_t n;
  /* A smooth picture: JPEG keeps it within a few levels. */
  uint8_t smooth[IH * IW * 3];
  for (int y = 0; y < IH; y++)
    for (int x = 0; x < IW; x++)
      for (int c = 0; c < 3; c++)
        smooth[(y * IW + x) * 3 + c] = (uint8_t)(40 + x * 8 + y * 4 + c * 30);
  uint8_t *jpg = jpeg_of(smooth, IW, IH, 100, &n);
  sip_tensor_t **o;
  size_t no;
  assert_null(decode("rgb", jpg, n, &o, &no));
  assert_int_equal(o[0]->dims[0], IH);
  assert_int_equal(o[0]->dims[1], IW);
  const uint8_t *p = o[0]->data;
  int worst = 0;
  for (int i = 0; i < IH * IW * 3; i++) {
    int d = abs((int)p[i] - (int)smooth[i]);
    worst = d > worst ? d : worst;
  }
  if (worst > 8) fail_msg("JPEG pixels differ by up to %d", worst);
  sip__transform_outputs_free(o, no);
  assert_null(decode("gray", jpg, n, &o, &no));
  assert_int_equal(o[0]->dims[2], 1);
  sip__transform_outputs_free(o, no);

  /* dtype: string takes one STRING element holding the file. */
  sip_kv_t kv = KV("dtype", "string");
  sip__transform_t *t = make("decode_image", &kv, 1);
  uint8_t *packed = malloc(n + 4);
  uint32_t l = (uint32_t)n;
  memcpy(packed, &l, 4);
  memcpy(packed + 4, jpg, n);
  int64_t one = 1;
  sip_tensor_t *in = sip_tensor_new_view("data", SIP_DTYPE_STRING, 1, &one, packed, n + 4, NULL);
  const sip_tensor_t *ins[1] = {in};
  assert_null(sip__transform_run(t, ins, 1, &o, &no));
  assert_int_equal(o[0]->dims[1], IW);
  sip__transform_outputs_free(o, no);
  sip_tensor_free(in);
  sip__transform_free(t);
  free(packed);
  free(jpg);
}

/* CRC-32 of PNG chunks (a crafted header must pass libpng's check). */
static uint32_t crc32_of(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A PNG claiming w x h pixels: signature, IHDR and an empty IDAT (libpng
 * reads the header up to the first IDAT). */
static size_t png_header(uint8_t *buf, uint32_t w, uint32_t h) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  memcpy(buf, sig, 8);
  put32(buf + 8, 13);
  memcpy(buf + 12, "IHDR", 4);
  put32(buf + 16, w);
  put32(buf + 20, h);
  buf[24] = 8, buf[25] = 2, buf[26] = 0, buf[27] = 0, buf[28] = 0; /* 8-bit RGB */
  put32(buf + 29, crc32_of(buf + 12, 17));
  put32(buf + 33, 0);
  memcpy(buf + 37, "IDAT", 4);
  put32(buf + 41, crc32_of(buf + 37, 4));
  return 45;
}

static void test_hostile_files(void **state) {
  (void)state;
  sip_tensor_t **o = NULL;
  size_t no = 0;
  expect_error(decode("rgb", (const uint8_t *)"GIF89a..", 8, &o, &no), SIP_INVALID_ARGUMENT,
               "not a PNG or JPEG image (8 bytes, starting 47 49 46 38");
  expect_error(decode("rgb", (const uint8_t *)"", 0, &o, &no), SIP_INVALID_ARGUMENT,
               "not a PNG or JPEG image (0 bytes)");
  assert_null(o);

  size_t n;
  uint8_t *png = png_of(rgb, IW, IH, 0, &n);
  /* Every cut before the image data ends (IEND, 12 bytes, is not needed). */
  for (size_t cut = 0; cut + 12 < n; cut += 7) {
    sip_error_t *e = decode("rgb", png, cut, &o, &no);
    if (!e) fail_msg("a PNG cut at %zu of %zu bytes decoded", cut, n);
    expect_error(e, SIP_INVALID_ARGUMENT, cut < 8 ? "not a PNG" : "corrupt PNG");
  }
  png[40] ^= 0x55; /* inside the first chunk after IHDR: a CRC error */
  expect_error(decode("rgb", png, n, &o, &no), SIP_INVALID_ARGUMENT, "corrupt PNG");
  free(png);

  uint8_t hdr[64];
  expect_error(decode("rgb", hdr, png_header(hdr, 20000, 1), &o, &no), SIP_INVALID_ARGUMENT,
               "20000x1 pixels; expected 1..16384 per side");
  expect_error(decode("rgb", hdr, png_header(hdr, 16000, 16000), &o, &no), SIP_INVALID_ARGUMENT,
               "at most 256 MiB");
  /* A plausible header with no pixel data behind it. */
  expect_error(decode("rgb", hdr, png_header(hdr, 100, 100), &o, &no), SIP_INVALID_ARGUMENT,
               "corrupt PNG");

  uint8_t *jpg = jpeg_of(rgb, IW, IH, 90, &n);
  expect_error(decode("rgb", jpg, 3, &o, &no), SIP_INVALID_ARGUMENT, "corrupt JPEG");
  expect_error(decode("rgb", jpg, 100, &o, &no), SIP_INVALID_ARGUMENT, "corrupt JPEG");
  /* The frame header (SOF0: FF C0, length, precision, height, width) claims
   * 20000 x 20000: refused from the header, before any pixel is decoded. */
  size_t sof = 0;
  for (size_t i = 2; i + 9 < n && !sof; i++)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) sof = i;
  assert_true(sof > 0);
  jpg[sof + 5] = 0x4E, jpg[sof + 6] = 0x20; /* height 20000 */
  jpg[sof + 7] = 0x4E, jpg[sof + 8] = 0x20; /* width 20000 */
  expect_error(decode("rgb", jpg, n, &o, &no), SIP_INVALID_ARGUMENT,
               "the JPEG image is 20000x20000 pixels");
  free(jpg);
  assert_null(o);
}

static void test_alloc_failures(void **state) {
  (void)state;
  size_t np, nj;
  uint8_t *png = png_of(rgb, IW, IH, 0, &np), *jpg = jpeg_of(rgb, IW, IH, 90, &nj);
  const char *modes[] = {"rgb", "gray"};
  for (int m = 0; m < 2; m++)
    for (int f = 0; f < 2; f++)
      for (long k = 0; k < 60; k++) {
        sip_kv_t kv = KV("mode", modes[m]);
        sip__transform_t *t = make("decode_image", &kv, 1);
        int64_t dim = (int64_t)(f ? nj : np);
        sip_tensor_t *in = sip_tensor_new_view("data", SIP_DTYPE_UINT8, 1, &dim, f ? jpg : png,
                                               (size_t)dim, NULL);
        const sip_tensor_t *ins[1] = {in};
        sip_tensor_t **o = NULL;
        size_t no = 0;
        sip__alloc_fail_after(k);
        sip_error_t *e = sip__transform_run(t, ins, 1, &o, &no);
        sip__alloc_fail_after(-1);
        if (e) {
          if (sip_error_code(e) != SIP_RESOURCE_EXHAUSTED)
            fail_msg("fail after %ld: %s", k, sip_error_message(e));
          sip_error_free(e);
          assert_null(o);
        } else {
          assert_int_equal(o[0]->dims[1], IW);
          sip__transform_outputs_free(o, no);
        }
        sip_tensor_free(in);
        sip__transform_free(t);
      }
  free(png);
  free(jpg);
}

/* ---- resize by aspect ratio ------------------------------------------------ */

static void resized(const sip_kv_t *kv, size_t n, int64_t h, int64_t w, int64_t *oh, int64_t *ow) {
  sip__transform_t *t = make("resize", kv, n);
  int64_t dims[3] = {h, w, 1};
  uint8_t *z = calloc((size_t)(h * w), 1);
  sip_tensor_t *in =
      sip_tensor_new_view("image", SIP_DTYPE_UINT8, 3, dims, z, (size_t)(h * w), NULL);
  const sip_tensor_t *ins[1] = {in};
  sip_tensor_t **o;
  size_t no;
  sip_error_t *e = sip__transform_run(t, ins, 1, &o, &no);
  if (e) fail_msg("%s", sip_error_message(e));
  *oh = o[0]->dims[0];
  *ow = o[0]->dims[1];
  sip__transform_outputs_free(o, no);
  sip_tensor_free(in);
  free(z);
  sip__transform_free(t);
}

static void test_resize_limit_multiple(void **state) {
  (void)state;
  sip_kv_t det[] = {KV("limit_side_len", "960"), KV("multiple_of", "32")};
  /* {h, w, want h, want w}: PaddleOCR DetResizeForTest type 0, limit_type max.
   * 1000x500: ratio 0.96 -> 960x480; 100x45: no scaling, 3.125 -> 96,
   * 1.41 -> 32; 48x80: 1.5 -> 2 and 2.5 -> 2 (Python rounds ties to even);
   * 10x10: at least one multiple; 2000x3000: 640x960. */
  static const int64_t cases[][4] = {{1000, 500, 960, 480}, {100, 45, 96, 32}, {48, 80, 64, 64},
                                     {10, 10, 32, 32},       {2000, 3000, 640, 960},
                                     {460, 760, 448, 768}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t oh, ow;
    resized(det, 2, cases[i][0], cases[i][1], &oh, &ow);
    if (oh != cases[i][2] || ow != cases[i][3])
      fail_msg("%lldx%lld -> %lldx%lld; want %lldx%lld", (long long)cases[i][0],
               (long long)cases[i][1], (long long)oh, (long long)ow, (long long)cases[i][2],
               (long long)cases[i][3]);
  }
  int64_t oh, ow;
  sip_kv_t lim[] = {KV("limit_side_len", "100")};
  resized(lim, 1, 300, 50, &oh, &ow); /* no rounding: int(50 / 3) = 16 */
  assert_true(oh == 100 && ow == 16);
  resized(lim, 1, 30, 50, &oh, &ow); /* never up */
  assert_true(oh == 30 && ow == 50);
  sip_kv_t both[] = {KV("size", "32,32"), KV("multiple_of", "32")};
  sip__transform_t *t = NULL;
  expect_error(sip__transform_new("resize", both, 2, &t), SIP_INVALID_ARGUMENT, "not both");
  /* target_size, as crop_and_resize names it, is size. */
  sip_kv_t target[] = {KV("target_size", "24,40")};
  resized(target, 1, 300, 50, &oh, &ow);
  assert_true(oh == 24 && ow == 40);
  sip_kv_t two_sizes[] = {KV("size", "32,32"), KV("target_size", "32,32")};
  expect_error(sip__transform_new("resize", two_sizes, 2, &t), SIP_INVALID_ARGUMENT,
               "size or target_size");
  sip_kv_t mult[] = {KV("multiple_of", "16384")};
  t = make("resize", mult, 1);
  int64_t dims[3] = {1, 16384 * 2, 1}; /* 32768 wide: would be resized past 16384 */
  uint8_t *z = calloc(16384 * 2, 1);
  sip_tensor_t *in = sip_tensor_new_view("image", SIP_DTYPE_UINT8, 3, dims, z, 16384 * 2, NULL);
  const sip_tensor_t *ins[1] = {in};
  sip_tensor_t **o = NULL;
  size_t no;
  expect_error(sip__transform_run(t, ins, 1, &o, &no), SIP_INVALID_ARGUMENT, "at most 16384");
  sip_tensor_free(in);
  free(z);
  sip__transform_free(t);
}

/* ---- rotate180 widths -------------------------------------------------------- */

static void test_rotate_widths(void **state) {
  (void)state;
  sip_kv_t kv[] = {KV("widths", "true"), KV("flags", "float32"), KV("flag_index", "1"),
                   KV("flag_threshold", "0.5")};
  sip__transform_t *t = make("rotate180", kv, 4);
  /* Two 1x1x2x4 crops (NCHW): valid widths 3 and 4; only the first is flagged. */
  float img[2 * 2 * 4] = {1, 2, 3, 0, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  float flags[4] = {0.1f, 0.9f, 0.9f, 0.1f};
  int64_t widths[2] = {3, 4};
  int64_t di[4] = {2, 1, 2, 4}, df[2] = {2, 2}, dw[1] = {2};
  sip_tensor_t *a = sip_tensor_new_view("image", SIP_DTYPE_FLOAT32, 4, di, img, sizeof img, NULL);
  sip_tensor_t *b =
      sip_tensor_new_view("flags", SIP_DTYPE_FLOAT32, 2, df, flags, sizeof flags, NULL);
  sip_tensor_t *c =
      sip_tensor_new_view("widths", SIP_DTYPE_INT64, 1, dw, widths, sizeof widths, NULL);
  const sip_tensor_t *ins[3] = {a, b, c};
  sip_tensor_t **o;
  size_t no;
  assert_null(sip__transform_run(t, ins, 3, &o, &no));
  static const float want[16] = {6, 5, 4, 0, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  assert_memory_equal(o[0]->data, want, sizeof want);
  sip__transform_outputs_free(o, no);
  int64_t dw3[1] = {3};
  sip_tensor_t *bad = sip_tensor_new_view("widths", SIP_DTYPE_INT64, 1, dw3, (int64_t[3]){1, 1, 1},
                                          24, NULL);
  ins[2] = bad;
  expect_error(sip__transform_run(t, ins, 3, &o, &no), SIP_INVALID_ARGUMENT, "one per image");
  sip_tensor_free(bad);
  sip_tensor_free(a);
  sip_tensor_free(b);
  sip_tensor_free(c);
  sip__transform_free(t);
}

/* ---- preprocess ------------------------------------------------------------- */

static sip__config_t *load(const char *yaml, sip_error_t **err) {
  sip__config_t *cfg = NULL;
  *err = sip__config_load_string(yaml, strlen(yaml), "pre.yaml", "/tmp", sip__backend_catalog(), &cfg);
  return cfg;
}

static void test_preprocess_chain(void **state) {
  (void)state;
  sip_error_t *e;
  sip__config_t *cfg = load("session_pools:\n"
                           "  - name: p\n"
                           "    backend: builtin\n"
                           "    preprocess:\n"
                           "      decode: bgr\n"
                           "      resize: [4, 6]\n"
                           "      to_tensor: {scale: 1/255}\n"
                           "      normalize: {mean: [0.5, 0.5, 0.5], std: 0.5}\n",
                           &e);
  if (e) fail_msg("%s", sip_error_message(e));
  const sip__pool_config_t *pc = &cfg->pools[0];
  assert_int_equal(pc->n_preprocess, 4);
  assert_string_equal(pc->preprocess[0].op, "decode_image");
  assert_string_equal(pc->preprocess[1].options[0].value, "4,6");
  assert_true(pc->preprocess_fixed);
  sip_io_desc_t in = {.name = "x", .dtype = SIP_DTYPE_FLOAT32, .rank = 4, .dims = {-1, 3, 4, 6}};
  sip__preprocess_t *pp = NULL;
  assert_null(sip__preprocess_new(pc, &in, 1, &pp));
  assert_string_equal(sip__preprocess_steps(pp), "decode_image, resize, to_tensor, normalize");
  sip_io_desc_t raw = {.name = "x"};
  sip__preprocess_raw_desc(pp, &raw);
  assert_int_equal(raw.dtype, SIP_DTYPE_UINT8);
  assert_int_equal(raw.rank, -1);

  size_t n;
  uint8_t *png = png_of(rgb, IW, IH, 0, &n);
  int64_t dim = (int64_t)n;
  sip_tensor_t *bytes = sip_tensor_new_view("x", SIP_DTYPE_UINT8, 1, &dim, png, n, NULL);
  const sip_tensor_t *ins[1] = {bytes};
  assert_int_equal(sip__preprocess_rows(pp, ins, 1), 1);
  sip_tensor_t *out = NULL;
  assert_null(sip__preprocess_run(pp, bytes, &out));
  assert_string_equal(out->name, "x");
  assert_int_equal(out->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(out->rank, 4);
  assert_true(out->dims[0] == 1 && out->dims[1] == 3 && out->dims[2] == 4 && out->dims[3] == 6);
  const float *v = out->data;
  for (int i = 0; i < 3 * 4 * 6; i++) assert_true(v[i] >= -1.0f && v[i] <= 1.0f);
  sip_tensor_free(out);
  /* A raw image skips decoding; another rank is refused. */
  int64_t hwc[3] = {IH, IW, 3};
  sip_tensor_t *img = sip_tensor_new_view("x", SIP_DTYPE_UINT8, 3, hwc, rgb, sizeof rgb, NULL);
  assert_null(sip__preprocess_run(pp, img, &out));
  assert_int_equal(out->dims[3], 6);
  sip_tensor_free(out);
  assert_true(sip__preprocess_joinable(pp, bytes, bytes));
  assert_true(sip__preprocess_joinable(pp, img, img));
  assert_false(sip__preprocess_joinable(pp, bytes, img));
  int64_t two[2] = {2, 2};
  sip_tensor_t *m = sip_tensor_new_view("x", SIP_DTYPE_UINT8, 2, two, rgb, 4, NULL);
  expect_error(sip__preprocess_run(pp, m, &out), SIP_INVALID_ARGUMENT, "rank 2");
  bytes->nbytes = 10; /* a truncated file */
  bytes->dims[0] = 10;
  expect_error(sip__preprocess_run(pp, bytes, &out), SIP_INVALID_ARGUMENT,
               "preprocess of input 'x': transform decode_image: corrupt PNG");
  sip_tensor_free(m);
  sip_tensor_free(img);
  sip_tensor_free(bytes);
  free(png);
  sip__preprocess_free(pp);

  /* A size the model does not take is the preprocess's error, not the backend's. */
  sip_io_desc_t other = in;
  other.dims[2] = 224;
  assert_null(sip__preprocess_new(pc, &other, 1, &pp));
  int64_t hwc2[3] = {IH, IW, 3};
  img = sip_tensor_new_view("x", SIP_DTYPE_UINT8, 3, hwc2, rgb, sizeof rgb, NULL);
  expect_error(sip__preprocess_run(pp, img, &out), SIP_INVALID_ARGUMENT,
               "made shape [1,3,4,6]; the model takes [-1,3,224,6]");
  sip_tensor_free(img);
  sip__preprocess_free(pp);

  /* Fit against the model: dtype, rank, which input. */
  sip_io_desc_t u8 = {.name = "x", .dtype = SIP_DTYPE_UINT8, .rank = 4, .dims = {-1, 3, 4, 6}};
  expect_error(sip__preprocess_new(pc, &u8, 1, &pp), SIP_FAILED_PRECONDITION,
               "gives float32 of rank 4 but the model's input 'x' takes uint8");
  sip_io_desc_t two_in[2] = {in, in};
  two_in[1].name = "y";
  expect_error(sip__preprocess_new(pc, two_in, 2, &pp), SIP_INVALID_ARGUMENT,
               "expected preprocess.input");
  sip__config_free(cfg);
}

static void test_preprocess_config_errors(void **state) {
  (void)state;
  static const struct {
    const char *body, *want;
  } cases[] = {
      {"      blur: 3\n", "pre.yaml:5:7: session_pools[0].preprocess.blur: \"blur\" is not a "
                          "preprocess step"},
      {"      resize: 32x\n", "preprocess.resize: transform resize: option size: '32x'"},
      /* to_tensor then resize runs (the resize takes the NCHW tensor);
       * an int64 tensor fits no image step */
      {"      to_tensor: true\n      cast: {to: int64}\n      resize: [4, 4]\n",
       "takes uint8 of rank 3 but the step before (cast) gives int64"},
      {"      resize: [4, 4]\n      decode: true\n", "expected it as the first step"},
      {"      normalize: true\n      normalize: true\n", "duplicate key"},
      {"      normalize: 0.5\n", "preprocess.normalize: is a scalar; expected a map of options"},
      {"      decode: false\n", "has no steps"},
      {"      input: [x]\n", "preprocess.input: is a list"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "session_pools:\n  - name: p\n    backend: builtin\n    preprocess:\n%s",
             cases[i].body);
    sip_error_t *e;
    sip__config_t *cfg = load(yaml, &e);
    assert_null(cfg);
    expect_error(e, SIP_INVALID_ARGUMENT, cases[i].want);
  }
}

int main(void) {
  fill_rgb();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_png_modes),         cmocka_unit_test(test_jpeg_and_string_input),
      cmocka_unit_test(test_hostile_files),     cmocka_unit_test(test_alloc_failures),
      cmocka_unit_test(test_resize_limit_multiple), cmocka_unit_test(test_rotate_widths),
      cmocka_unit_test(test_preprocess_chain),  cmocka_unit_test(test_preprocess_config_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
