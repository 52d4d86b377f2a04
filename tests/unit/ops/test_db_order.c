/* Unit tests for db_postprocess's box order (src/ops/transform_db.c): the
 * reading order of PaddleOCR's sorted_boxes — top to bottom, and boxes of
 * one line (top-left corners under 10 source pixels apart vertically) left
 * to right whichever of them the detector saw first — with each score
 * staying with its box. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "core/core.h"
#include "ops/transforms.h"

#define KV(k, v) ((sip_kv_t){(k), (v)})

enum { H = 96, W = 200 };

/* A block of probability p over pixel centres x0..x1, y0..y1. */
static void block(float *m, int x0, int x1, int y0, int y1, float p) {
  for (int y = y0; y <= y1; y++)
    for (int x = x0; x <= x1; x++) m[y * W + x] = p;
}

/* Runs db_postprocess (source image = the map's size) on m; returns the
 * number of boxes, their top-left corners and scores. */
static int64_t detect(const float *m, float (*tl)[2], float *scores, int64_t most) {
  sip_kv_t k[] = {KV("src_size", "96,200")};
  sip__transform_t *t = NULL;
  sip_error_t *e = sip__transform_new("db_postprocess", k, 1, &t);
  if (e) fail_msg("sip__transform_new(db_postprocess): %s", sip_error_message(e));
  int64_t d[4] = {1, 1, H, W};
  sip_tensor_t *x =
      sip_tensor_new_copy("probs", SIP_DTYPE_FLOAT32, 4, d, m, (size_t)H * W * sizeof(float));
  assert_non_null(x);
  const sip_tensor_t *ins[1] = {x};
  sip_tensor_t **outs;
  size_t n;
  e = sip__transform_run(t, ins, 1, &outs, &n);
  if (e) fail_msg("db_postprocess: %s", sip_error_message(e));
  int64_t k_boxes = outs[0]->dims[0];
  assert_true(k_boxes <= most);
  const float *b = outs[0]->data, *s = outs[1]->data;
  for (int64_t i = 0; i < k_boxes; i++) {
    tl[i][0] = b[i * 8];
    tl[i][1] = b[i * 8 + 1];
    scores[i] = s[i];
  }
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(x);
  sip__transform_free(t);
  return k_boxes;
}

static void test_one_line_reads_left_to_right(void **state) {
  (void)state;
  static float m[H * W];
  memset(m, 0, sizeof m);
  /* Two words of one line, the right one 2 px higher (found first in
   * raster order), and a line below. */
  block(m, 10, 60, 12, 20, 0.9f);   /* left word */
  block(m, 120, 170, 10, 18, 0.8f); /* right word, higher */
  block(m, 10, 60, 50, 58, 0.7f);   /* next line */
  float tl[8][2], sc[8];
  assert_int_equal(detect(m, tl, sc, 8), 3);
  /* left word, right word, next line; each score with its box */
  assert_true(tl[0][0] < 10 && tl[1][0] > 100 && tl[2][1] > 40);
  assert_true(fabsf(sc[0] - 0.9f) < 1e-5f);
  assert_true(fabsf(sc[1] - 0.8f) < 1e-5f);
  assert_true(fabsf(sc[2] - 0.7f) < 1e-5f);
}

static void test_lines_apart_stay_top_to_bottom(void **state) {
  (void)state;
  static float m[H * W];
  memset(m, 0, sizeof m);
  /* The right block's top is 20 px above the left one's: another line,
   * so it stays first. */
  block(m, 120, 170, 10, 18, 0.8f);
  block(m, 10, 60, 30, 38, 0.9f);
  float tl[8][2], sc[8];
  assert_int_equal(detect(m, tl, sc, 8), 2);
  assert_true(tl[0][0] > 100 && tl[1][0] < 10);
  assert_true(fabsf(sc[0] - 0.8f) < 1e-5f && fabsf(sc[1] - 0.9f) < 1e-5f);
}

static void test_many_words_on_lines(void **state) {
  (void)state;
  static float m[H * W];
  memset(m, 0, sizeof m);
  /* Three lines of three words each, every word's top a little higher
   * than its left neighbour's (raster order: right to left). */
  for (int line = 0; line < 3; line++)
    for (int wd = 0; wd < 3; wd++) {
      int x0 = 8 + wd * 64, y0 = 12 + line * 28 - wd * 2;
      block(m, x0, x0 + 40, y0, y0 + 8, 0.6f + 0.01f * (float)(line * 3 + wd));
    }
  float tl[16][2], sc[16];
  assert_int_equal(detect(m, tl, sc, 16), 9);
  for (int i = 0; i < 9; i++) {
    float want = 0.6f + 0.01f * (float)i;
    if (fabsf(sc[i] - want) > 1e-5f)
      fail_msg("box %d has score %.3f; expected %.3f (line %d, word %d)", i, (double)sc[i],
               (double)want, i / 3, i % 3);
    if (i % 3) assert_true(tl[i][0] > tl[i - 1][0]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_line_reads_left_to_right),
      cmocka_unit_test(test_lines_apart_stay_top_to_bottom),
      cmocka_unit_test(test_many_words_on_lines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
