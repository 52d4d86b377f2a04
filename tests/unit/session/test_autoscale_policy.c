/* Unit tests for src/session/autoscale_policy.c: the size the autoscaler
 * asks for, from numbers alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "session/autoscale_policy.h"

#define S 1000000ULL /* one second in microseconds */

static sip__autoscale_config_t cfg(int lo, int hi) {
  return (sip__autoscale_config_t){.enabled = 1, .min_sessions = lo, .max_sessions = hi,
                                   .scale_up_threshold = 0.8, .scale_down_threshold = 0.3,
                                   .cooldown_s = 30, .window_s = 5, .history_window_s = 60,
                                   .prediction_horizon_s = 10};
}

static void test_up_on_utilization(void **state) {
  (void)state;
  sip__autoscale_config_t c = cfg(1, 8);
  sip__as_reason_t why;
  /* 2 sessions busy all the time, 4 more requests queued on average:
   * demand 6 at 0.8 wants ceil(6 / 0.8) = 8. */
  sip__as_input_t in = {.sessions = 2, .utilization = 1.0, .demand = 6, .now_us = 100 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 8);
  assert_int_equal(why, SIP__AS_UTILIZATION);
  /* Busy at the threshold with no queue: at least one more (demand 1.6 at
   * 0.8 is 2, the size it has). */
  in = (sip__as_input_t){.sessions = 2, .utilization = 0.8, .demand = 1.6, .now_us = 100 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 3);
  /* Capped at max_sessions. */
  in = (sip__as_input_t){.sessions = 2, .utilization = 1, .demand = 100, .now_us = 100 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 8);
  /* At max already: nothing. */
  in.sessions = 8;
  assert_int_equal(sip__as_decide(&c, &in, &why), 8);
  assert_int_equal(why, SIP__AS_NONE);
  /* Below the threshold: nothing (and not cooled down for going down). */
  in = (sip__as_input_t){.sessions = 3, .utilization = 0.5, .demand = 1.5, .now_us = 100 * S,
                         .last_change_us = 90 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 3);
}

static void test_up_gap_and_cooldown(void **state) {
  (void)state;
  sip__autoscale_config_t c = cfg(1, 8);
  sip__as_reason_t why;
  /* A scale-up 0.5 s ago: the next waits for SIP__AS_UP_GAP_US. */
  sip__as_input_t in = {.sessions = 2, .utilization = 1, .demand = 4, .now_us = 100 * S,
                        .last_change_us = 100 * S - S / 2, .last_up_us = 100 * S - S / 2};
  assert_int_equal(sip__as_decide(&c, &in, &why), 2);
  in.now_us = 100 * S + S / 2;
  assert_int_equal(sip__as_decide(&c, &in, &why), 5); /* ceil(4 / 0.8) */
  /* Idle 29 s after the last change: kept (cooldown 30 s); at 30 s: down
   * to what the demand needs, ceil(0.5 / 0.8) = 1. */
  in = (sip__as_input_t){.sessions = 4, .utilization = 0.125, .demand = 0.5,
                         .now_us = 129 * S, .last_change_us = 100 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 4);
  in.now_us = 130 * S;
  assert_int_equal(sip__as_decide(&c, &in, &why), 1);
  assert_int_equal(why, SIP__AS_IDLE);
  /* Never below min_sessions. */
  c.min_sessions = 2;
  assert_int_equal(sip__as_decide(&c, &in, &why), 2);
  /* Requests queued now, or above the down threshold: not going down. */
  in.queued_now = 1;
  assert_int_equal(sip__as_decide(&c, &in, &why), 4);
  in.queued_now = 0;
  in.utilization = 0.31;
  assert_int_equal(sip__as_decide(&c, &in, &why), 4);
}

static void test_min_zero_and_wake(void **state) {
  (void)state;
  sip__autoscale_config_t c = cfg(0, 4);
  sip__as_reason_t why;
  /* Idle after the cooldown: every session goes. */
  sip__as_input_t in = {.sessions = 2, .utilization = 0, .demand = 0, .now_us = 100 * S,
                        .last_change_us = 10 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 0);
  assert_int_equal(why, SIP__AS_IDLE);
  /* A little demand keeps one. */
  in.demand = 0.1;
  assert_int_equal(sip__as_decide(&c, &in, &why), 1);
  /* None: nothing until a request waits; then one, at once (no cooldown,
   * no window). */
  in = (sip__as_input_t){.sessions = 0, .now_us = 100 * S, .last_change_us = 99 * S,
                         .last_up_us = 100 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 0);
  in.queued_now = 3;
  assert_int_equal(sip__as_decide(&c, &in, &why), 1);
  assert_int_equal(why, SIP__AS_WAKE);
  /* A forecast that needs 3 brings 3. */
  in.forecast_sessions = 2.2;
  assert_int_equal(sip__as_decide(&c, &in, &why), 3);
}

static void test_p99_and_forecast(void **state) {
  (void)state;
  sip__autoscale_config_t c = cfg(1, 8);
  c.target_p99_ms = 50;
  sip__as_reason_t why;
  /* Under the utilisation threshold but over the p99 target: one more. */
  sip__as_input_t in = {.sessions = 2, .utilization = 0.5, .demand = 1, .p99_ms = 80,
                        .now_us = 100 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 3);
  assert_int_equal(why, SIP__AS_P99);
  /* Idle by utilisation, cooled down, but over the p99 target: kept. */
  in = (sip__as_input_t){.sessions = 4, .utilization = 0.1, .demand = 0.4, .p99_ms = 80,
                         .now_us = 100 * S, .last_change_us = 1};
  /* one more for the p99 rather than fewer */
  assert_int_equal(sip__as_decide(&c, &in, &why), 5);
  /* A forecast needing 6 while 2 run quietly: 6, ahead of the load. */
  in = (sip__as_input_t){.sessions = 2, .utilization = 0.4, .demand = 0.8,
                         .forecast_sessions = 5.1, .now_us = 100 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 6);
  assert_int_equal(why, SIP__AS_FORECAST);
  /* And a forecast above what runs keeps sessions from going. */
  in = (sip__as_input_t){.sessions = 4, .utilization = 0.1, .demand = 0.4,
                         .forecast_sessions = 3, .now_us = 100 * S, .last_change_us = 1};
  assert_int_equal(sip__as_decide(&c, &in, &why), 3);
  /* Sessions for a rate: 150 req/s * 20 ms / 0.8 = 3.75 -> 4; none without either. */
  assert_true(sip__as_sessions_for(150, 0.020, 0.8) == 4);
  assert_true(sip__as_sessions_for(100, 0.008, 0.8) == 1);
  assert_true(sip__as_sessions_for(0, 0.020, 0.8) == 0);
  assert_true(sip__as_sessions_for(150, 0, 0.8) == 0);
}

static void test_bounds(void **state) {
  (void)state;
  sip__autoscale_config_t c = cfg(2, 4);
  sip__as_reason_t why;
  sip__as_input_t in = {.sessions = 6, .now_us = 100 * S, .last_change_us = 99 * S};
  assert_int_equal(sip__as_decide(&c, &in, &why), 4);
  assert_int_equal(why, SIP__AS_BOUNDS);
  in.sessions = 1;
  assert_int_equal(sip__as_decide(&c, &in, &why), 2);
  assert_string_equal(sip__as_reason_name(SIP__AS_IDLE), "idle");
  assert_string_equal(sip__as_reason_name(SIP__AS_UTILIZATION), "utilization");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_up_on_utilization),
      cmocka_unit_test(test_up_gap_and_cooldown),
      cmocka_unit_test(test_min_zero_and_wake),
      cmocka_unit_test(test_p99_and_forecast),
      cmocka_unit_test(test_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
