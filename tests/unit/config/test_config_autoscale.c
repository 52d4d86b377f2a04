/* Unit tests for the config parser's autoscale block (src/config/autoscale.c):
 * keys and seed 001's defaults, and every error naming the key, the value
 * and what is expected. */
#include "config_helpers.h"

static void test_autoscale_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL(
      "    pool_size: 2\n"
      "    autoscale: {min_sessions: 0, max_sessions: 12, scale_up_threshold: 0.9, "
      "scale_down_threshold: 0.2, cooldown_s: 5, window_s: 3, target_p99_ms: 40.5, "
      "predictive: true, history_window_s: 30, prediction_horizon_s: 4}\n"));
  const sip__autoscale_config_t *a = &cfg->pools[0].autoscale;
  assert_int_equal(a->enabled, 1);
  assert_int_equal(a->min_sessions, 0);
  assert_int_equal(a->max_sessions, 12);
  assert_true(a->scale_up_threshold == 0.9 && a->scale_down_threshold == 0.2);
  assert_int_equal(a->cooldown_s, 5);
  assert_int_equal(a->window_s, 3);
  assert_true(a->target_p99_ms == 40.5);
  assert_int_equal(a->predictive, 1);
  assert_int_equal(a->history_window_s, 30);
  assert_int_equal(a->prediction_horizon_s, 4);
  assert_int_equal(cfg->pools[0].pool_size, 2);
  sip__config_free(cfg);

  /* Seed 001's defaults: up 0.85, down 0.3, cooldown 30 s, history 60 s,
   * horizon 10 s; sessions 1..8, window 5 s, no p99 target, reactive. */
  cfg = load_ok(POOL("    autoscale: {}\n"));
  a = &cfg->pools[0].autoscale;
  assert_int_equal(a->enabled, 1);
  assert_true(a->scale_up_threshold == 0.85 && a->scale_down_threshold == 0.3);
  assert_int_equal(a->cooldown_s, 30);
  assert_int_equal(a->history_window_s, 60);
  assert_int_equal(a->prediction_horizon_s, 10);
  assert_int_equal(a->min_sessions, 1);
  assert_int_equal(a->max_sessions, 8);
  assert_int_equal(a->window_s, 5);
  assert_true(a->target_p99_ms == 0);
  assert_int_equal(a->predictive, 0);
  sip__config_free(cfg);

  /* Without the block: off. An unwritten pool_size starts at min_sessions. */
  cfg = load_ok(POOL(""));
  assert_int_equal(cfg->pools[0].autoscale.enabled, 0);
  sip__config_free(cfg);
  cfg = load_ok(POOL("    autoscale: {min_sessions: 3, max_sessions: 4}\n"));
  assert_int_equal(cfg->pools[0].pool_size, 3);
  sip__config_free(cfg);
  /* Only one threshold written: the other's default must still be on its side. */
  cfg = load_ok(POOL("    autoscale: {scale_up_threshold: 0.5}\n"));
  assert_true(cfg->pools[0].autoscale.scale_down_threshold == 0.3);
  sip__config_free(cfg);
}

static void test_autoscale_errors(void **state) {
  (void)state;
  EXPECT_ERR(POOL("    autoscale: {min_sessions: 5, max_sessions: 2}\n"),
             "session_pools[0].autoscale.min_sessions", "5 is above max_sessions (2)",
             "expected min_sessions <= max_sessions");
  EXPECT_ERR(POOL("    autoscale: {scale_up_threshold: 1.5}\n"),
             "session_pools[0].autoscale.scale_up_threshold", "\"1.5\" is out of range",
             "0 < x <= 1");
  EXPECT_ERR(POOL("    autoscale: {scale_up_threshold: 0}\n"), "is out of range", "0 < x <= 1");
  EXPECT_ERR(POOL("    autoscale: {scale_down_threshold: -0.1}\n"),
             "autoscale.scale_down_threshold", "is out of range");
  EXPECT_ERR(POOL("    autoscale: {scale_up_threshold: abc}\n"), "\"abc\" is not a number");
  EXPECT_ERR(POOL("    autoscale: {scale_up_threshold: 0.5, scale_down_threshold: 0.5}\n"),
             "autoscale.scale_down_threshold", "0.5 is not below scale_up_threshold (0.5)",
             "expected scale_down_threshold < scale_up_threshold");
  /* The default down (0.3) against a lower written up. */
  EXPECT_ERR(POOL("    autoscale: {scale_up_threshold: 0.25}\n"),
             "0.3 is not below scale_up_threshold (0.25)");
  EXPECT_ERR(POOL("    autoscale: {max_sessions: 0}\n"), "autoscale.max_sessions");
  EXPECT_ERR(POOL("    autoscale: {min_sessions: 300}\n"), "autoscale.min_sessions");
  EXPECT_ERR(POOL("    autoscale: {target_p99_ms: 0}\n"), "autoscale.target_p99_ms",
             "is out of range", "milliseconds > 0");
  EXPECT_ERR(POOL("    autoscale: {window_s: 0}\n"), "autoscale.window_s");
  EXPECT_ERR(POOL("    autoscale: {prediction_horizon_s: 0}\n"), "autoscale.prediction_horizon_s");
  EXPECT_ERR(POOL("    autoscale: {history_window_s: 1}\n"), "autoscale.history_window_s");
  EXPECT_ERR(POOL("    autoscale: {predictive: maybe}\n"), "autoscale.predictive");
  EXPECT_ERR(POOL("    autoscale: {max_session: 3}\n"), "autoscale.max_session", "unknown key");
  EXPECT_ERR(POOL("    pool_size: 9\n    autoscale: {max_sessions: 4}\n"),
             "session_pools[0].pool_size", "9 is outside autoscale's 1..4");
  EXPECT_ERR(POOL("    pool_size: 1\n    autoscale: {min_sessions: 2, max_sessions: 4}\n"),
             "1 is outside autoscale's 2..4");
  EXPECT_ERR(POOL("    autoscale: [1, 2]\n"), "session_pools[0].autoscale");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_autoscale_keys),
      cmocka_unit_test(test_autoscale_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
