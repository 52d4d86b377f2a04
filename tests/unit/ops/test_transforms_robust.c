/* Unit tests for src/ops/transform*.c under stress: every allocation
 * failing in turn, one transform run from several threads at once, and
 * random inputs against each operation's declared inputs. */
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

/* ---- allocation failures -------------------------------------------------- */

static sip_error_t *try_op(const char *op, const sip_kv_t *kv, size_t nkv,
                           const sip_tensor_t *const *ins, size_t nin) {
  sip__transform_t *t = NULL;
  sip_error_t *e = sip__transform_new(op, kv, nkv, &t);
  if (e) return e;
  sip_tensor_t **outs;
  size_t n;
  e = sip__transform_run(t, ins, nin, &outs, &n);
  if (!e) sip__transform_outputs_free(outs, n);
  sip__transform_free(t);
  return e;
}

static void test_alloc_failures(void **state) {
  (void)state;
  uint8_t img[6 * 8 * 3];
  for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)(i * 7);
  int64_t di[3] = {6, 8, 3};
  sip_tensor_t *image = tensor("image", SIP_DTYPE_UINT8, 3, di, img);
  float bx[8] = {1, 1, 5, 4, 0, 0, 8, 6};
  int64_t db[2] = {2, 4};
  sip_tensor_t *boxes = tensor("boxes", SIP_DTYPE_FLOAT32, 2, db, bx);
  float sc[2] = {0.3f, 0.6f};
  int64_t ds[1] = {2};
  sip_tensor_t *scores = tensor("scores", SIP_DTYPE_FLOAT32, 1, ds, sc);
  sip_tensor_t *vec = tensor("input", SIP_DTYPE_FLOAT32, 1, ds, sc);
  float pm[16 * 16] = {0};
  for (int y = 3; y < 12; y++)
    for (int x = 2; x < 14; x++) pm[y * 16 + x] = 0.9f;
  int64_t dp[4] = {1, 1, 16, 16};
  sip_tensor_t *probs = tensor("probs", SIP_DTYPE_FLOAT32, 4, dp, pm);
  int64_t dsz[1] = {2}, szv[2] = {32, 32};
  sip_tensor_t *srcsz = tensor("src_size", SIP_DTYPE_INT64, 1, dsz, szv);

  sip_kv_t kr[] = {KV("size", "4,5")};
  sip_kv_t kc[] = {KV("height", "8"), KV("min_width", "4")};
  sip_kv_t kk[] = {KV("k", "2")};
  const sip_tensor_t *img1[1] = {image}, *crop[2] = {image, boxes}, *nms[2] = {boxes, scores},
                     *db2[2] = {probs, srcsz}, *sc1[1] = {vec};
  struct {
    const char *op;
    const sip_kv_t *kv;
    size_t nkv;
    const sip_tensor_t *const *in;
    size_t nin;
  } cases[] = {
      {"resize", kr, 1, img1, 1},     {"letterbox", kr, 1, img1, 1},
      {"crop_and_resize", kc, 2, crop, 2}, {"nms", NULL, 0, nms, 2},
      {"db_postprocess", NULL, 0, db2, 2}, {"topk", kk, 1, sc1, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int ok = 0;
    for (long fail = 0; fail < 200 && !ok; fail++) {
      sip__alloc_fail_after(fail);
      sip_error_t *e = try_op(cases[c].op, cases[c].kv, cases[c].nkv, cases[c].in, cases[c].nin);
      sip__alloc_fail_after(-1);
      if (!e) {
        ok = 1;
        break;
      }
      if (sip_error_code(e) != SIP_RESOURCE_EXHAUSTED)
        fail_msg("%s with allocation %ld failing: %s", cases[c].op, fail, sip_error_message(e));
      sip_error_free(e);
    }
    if (!ok) fail_msg("%s never succeeded", cases[c].op);
  }
  sip_tensor_free(image);
  sip_tensor_free(boxes);
  sip_tensor_free(scores);
  sip_tensor_free(vec);
  sip_tensor_free(probs);
  sip_tensor_free(srcsz);
}

/* ---- concurrency ------------------------------------------------------------ */

typedef struct worker {
  const sip__transform_t *t;
  const sip_tensor_t *in;
  const float *want;
  size_t n;
  int bad;
} worker_t;

static void *work(void *arg) {
  worker_t *w = arg;
  for (int i = 0; i < 200; i++) {
    sip_tensor_t **outs;
    size_t n;
    sip_error_t *e = run1(w->t, w->in, &outs, &n);
    if (e) {
      sip_error_free(e);
      w->bad++;
      continue;
    }
    if (memcmp(outs[0]->data, w->want, w->n * sizeof(float))) w->bad++;
    sip__transform_outputs_free(outs, n);
  }
  return NULL;
}

static void test_concurrent_runs(void **state) {
  (void)state;
  sip_kv_t kr[] = {KV("size", "13,9"), KV("layout", "nchw")};
  sip__transform_t *t = make("resize", kr, 2);
  float px[2 * 3 * 10 * 10];
  for (size_t i = 0; i < sizeof px / sizeof *px; i++) px[i] = (float)(i % 17) * 0.25f;
  int64_t d[4] = {2, 3, 10, 10};
  sip_tensor_t *x = tensor("image", SIP_DTYPE_FLOAT32, 4, d, px);
  sip_tensor_t **outs;
  size_t n;
  assert_null(run1(t, x, &outs, &n));
  worker_t w[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker_t){t, x, outs[0]->data, 2 * 3 * 13 * 9, 0};
    assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(w[i].bad, 0);
  }
  sip__transform_outputs_free(outs, n);
  sip_tensor_free(x);
  sip__transform_free(t);
}

/* ---- random inputs ---------------------------------------------------------- */

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* A random tensor for descriptor d: its dtype, mostly its rank, small
 * random dims (sometimes 0), values including NaN, infinities, huge and
 * negative numbers. */
static sip_tensor_t *random_tensor(const sip_io_desc_t *d, unsigned char *buf, size_t cap) {
  int rank = d->rank >= 0 && rnd() % 8 ? d->rank : (int)(rnd() % 5);
  int64_t dims[SIP_MAX_RANK];
  size_t n = 1;
  for (int i = 0; i < rank; i++) {
    static const int64_t pick[] = {0, 1, 1, 1, 2, 3, 4, 4, 5, 6};
    dims[i] = d->rank == rank && d->dims[i] >= 0 && rnd() % 8 ? d->dims[i] : pick[rnd() % 10];
    n *= (size_t)dims[i];
  }
  size_t es = sip_dtype_size(d->dtype);
  if (n * es > cap) return NULL;
  static const float special[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, -1, 0, 0.5f, 3};
  for (size_t i = 0; i < n; i++) {
    if (d->dtype == SIP_DTYPE_FLOAT32) {
      float v = rnd() % 4 ? (float)(rnd() % 1000) / 100.0f : special[rnd() % 9];
      memcpy(buf + i * 4, &v, 4);
    } else {
      for (size_t b = 0; b < es; b++) buf[i * es + b] = (unsigned char)rnd();
    }
  }
  return sip_tensor_new_view(d->name, d->dtype, rank, dims, buf, n * es, NULL);
}

static void test_random_inputs(void **state) {
  (void)state;
  static unsigned char bufs[3][1 << 16];
  sip_kv_t ks[] = {KV("size", "5,7")}, kc[] = {KV("height", "8"), KV("max_width", "40")},
           kq[] = {KV("target_size", "4,6"), KV("layout", "nchw")},
           kr[] = {KV("flags", "int8")}, kt[] = {KV("to", "int16")}, kk[] = {KV("k", "2")},
           km[] = {KV("mode", "bgr2gray")}, kn[] = {KV("mean", "1,2,3")},
           kd[] = {KV("thresh", "0.5"), KV("min_size", "0"), KV("src_size", "50,60")};
  struct {
    const char *op;
    const sip_kv_t *kv;
    size_t n;
  } ops[] = {{"resize", ks, 1},    {"letterbox", ks, 1},    {"normalize", kn, 1},
             {"color_convert", km, 1}, {"to_tensor", NULL, 0}, {"rotate180", kr, 1},
             {"cast", kt, 1},      {"softmax", NULL, 0},    {"topk", kk, 1},
             {"nms", NULL, 0},     {"crop_and_resize", kc, 2}, {"crop_and_resize", kq, 2},
             {"db_postprocess", kd, 3}};
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
    sip__transform_t *t = make(ops[o].op, ops[o].kv, ops[o].n);
    const sip_io_desc_t *in, *out;
    size_t ni, no;
    sip__transform_describe(t, &in, &ni, &out, &no);
    int ok = 0;
    for (int round = 0; round < 2000; round++) {
      sip_tensor_t *x[3] = {0};
      int skip = 0;
      for (size_t i = 0; i < ni; i++) skip |= !(x[i] = random_tensor(&in[i], bufs[i], sizeof bufs[i]));
      if (!skip) {
        sip_tensor_t **outs;
        size_t n;
        sip_error_t *e = sip__transform_run(t, (const sip_tensor_t *const *)x, ni, &outs, &n);
        if (e) {
          if (sip_error_code(e) != SIP_INVALID_ARGUMENT &&
              sip_error_code(e) != SIP_RESOURCE_EXHAUSTED)
            fail_msg("%s: %s", ops[o].op, sip_error_message(e));
          if (getenv("TF_DEBUG")) fprintf(stderr, "%s: %s\n", ops[o].op, sip_error_message(e));
          sip_error_free(e);
        } else {
          ok++;
          for (size_t k = 0; k < n; k++) {
            sip_error_t *v = sip_tensor_validate(outs[k]);
            if (v) fail_msg("%s output %zu: %s", ops[o].op, k, sip_error_message(v));
          }
          sip__transform_outputs_free(outs, n);
        }
      }
      for (size_t i = 0; i < ni; i++) sip_tensor_free(x[i]);
    }
    if (!ok) fail_msg("%s: no random input was accepted", ops[o].op);
    sip__transform_free(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_failures),
      cmocka_unit_test(test_concurrent_runs),
      cmocka_unit_test(test_random_inputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
