/* A pool's capacity through the public in-process API: elastic batch
 * levels chosen by the request rate, and the memory quota (with an ONNX
 * model made by python3-onnx). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching_helpers.h"

/* ==== elastic batching ================================================== */

/* Submits at about `rps` until pool `name` reports batch_level `want` or
 * `limit_ms` passes; returns 1 when it did. */
static int drive_to_level(sip_server_t *s, rec_t *rec, uint64_t *id, int rps, const char *want,
                          int limit_ms) {
  uint64_t t0 = sip__now_us(), next = t0, period = 1000000 / (uint64_t)rps;
  while (sip__now_us() - t0 < (uint64_t)limit_ms * 1000) {
    submit(s, req("e", (*id)++, 1), rec);
    next += period;
    if (strcmp(counts(s, "e").level, want) == 0) return 1;
    uint64_t now = sip__now_us();
    if (next > now) sleep_ms((int)((next - now + 999) / 1000));
  }
  return strcmp(counts(s, "e").level, want) == 0;
}

static void test_elastic_levels(void **state) {
  (void)state;
  sip_server_t *s = new_server(POOL(
      "e",
      ", batch_strategies: {low: {max_batch: 1, timeout: 0}, medium: {max_batch: 4, timeout: 1}, "
      "high: {max_batch: 8, timeout: 2}, rate_thresholds: [20, 100]}",
      "shape: '-1,2'"));
  rec_t rec;
  rec_init(&rec);
  uint64_t id = 1;
  assert_string_equal(counts(s, "e").level, "low");
  /* Low traffic (~8 req/s) stays low. */
  for (int i = 0; i < 3; i++) {
    if (i) sleep_ms(120);
    submit(s, req("e", id++, 1), &rec);
  }
  assert_string_equal(counts(s, "e").level, "low");
  /* ~50 req/s: medium. */
  if (!drive_to_level(s, &rec, &id, 50, "medium", 700))
    fail_msg("50 req/s for 0.7 s did not reach level medium (thresholds [20, 100]); level %s",
             counts(s, "e").level);
  /* A burst of ~500 req/s: high within half a second. */
  if (!drive_to_level(s, &rec, &id, 500, "high", 600))
    fail_msg("a burst of 500 req/s for 0.6 s did not reach level high; level %s",
             counts(s, "e").level);
  int n = (int)id - 1;
  if (rec_wait(&rec, n, 5000) != n) fail_msg("only %d of %d requests completed", rec.n, n);
  for (int i = 0; i < MAXR && i < n; i++) assert_code(&rec.e[i], SIP_OK);
  counts_t c = counts(s, "e");
  assert_int_equal(c.inferences, n);
  assert_int_equal(c.rows, n);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* ==== memory quota ====================================================== */

static void test_memory_quota(void **state) {
  (void)state;
  need_models();
  char pools[2048];
  snprintf(pools, sizeof pools,
           POOL("tiny", ", resource_quota: {max_memory_mb: 1}", "shape: '-1,2'")
           "  - {name: big, model_path: %s/big.onnx, pool_size: 1, resource_quota: "
           "{max_memory_mb: 16}}\n" POOL("other", "", "shape: '-1,2'"),
           model_dir);
  sip_server_t *s = new_server(pools);
  counts_t tiny = counts(s, "tiny"), big = counts(s, "big"), other = counts(s, "other");
  assert_string_equal(tiny.state, "READY"); /* the builtin backend takes ~0 MiB */
  assert_true(tiny.memory_bytes <= (1 << 20));
  assert_string_equal(other.state, "READY");
  if (strcmp(big.state, "FAILED") != 0)
    fail_msg("pool big (64 MiB of weights, quota 16 MiB) is %s, want FAILED", big.state);
  const char *e = big.error;
  if (!strstr(e, "RESOURCE_EXHAUSTED") || !strstr(e, "measured at load") ||
      !strstr(e, "max_memory_mb") || !strstr(e, "allows 16 MiB"))
    fail_msg("error of pool big: \"%s\"; want RESOURCE_EXHAUSTED naming the measured size and "
             "the 16 MiB allowed",
             e);
  const char *take = strstr(e, "take ");
  assert_non_null(take);
  double mib = strtod(take + 5, NULL);
  if (mib <= 16.0) fail_msg("measured %.1f MiB in \"%s\"; want > 16", mib, e);

  rec_t rec;
  rec_init(&rec);
  sip_request_t *r = sip_request_new("big");
  int64_t idx[1] = {0}, d[1] = {1};
  assert_null(sip_request_add_input(
      r, sip_tensor_new_copy("idx", SIP_DTYPE_INT64, 1, d, idx, sizeof idx)));
  EXPECT_REJECT(s, r, &rec, SIP_UNAVAILABLE, "pool 'big' failed to load", "RESOURCE_EXHAUSTED");
  for (int k = 0; k < 2; k++) {
    sip_response_t *resp = NULL;
    assert_null(sip_server_infer(s, req(k ? "other" : "tiny", 7, 2), &resp));
    assert_int_equal(sip_response_code(resp), SIP_OK);
    sip_response_free(resp);
  }
  sip_server_free(s);
  rec_destroy(&rec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_elastic_levels),
      cmocka_unit_test(test_memory_quota),
  };
  /* e.g. SIP_TEST_FILTER='test_ageing' or SIP_TEST_SKIP='*deadline*' */
  if (getenv("SIP_TEST_FILTER")) cmocka_set_test_filter(getenv("SIP_TEST_FILTER"));
  if (getenv("SIP_TEST_SKIP")) cmocka_set_skip_filter(getenv("SIP_TEST_SKIP"));
  return cmocka_run_group_tests(tests, NULL, group_teardown);
}
