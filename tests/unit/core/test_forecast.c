/* Unit tests for src/core/forecast.c (Holt's linear trend), against values
 * worked out by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/forecast.h"

/* x = 10, 12, 15, 15 with alpha = beta = 0.5:
 *   t0: level 10, trend 0
 *   t1: level 12, trend 12 - 10 = 2
 *   t2: level 0.5*15 + 0.5*(12 + 2)      = 14.5
 *       trend 0.5*(14.5 - 12) + 0.5*2    = 2.25
 *   t3: level 0.5*15 + 0.5*(14.5 + 2.25) = 15.875
 *       trend 0.5*(15.875 - 14.5) + 0.5*2.25 = 1.8125
 *   forecast 2 ahead: 15.875 + 2*1.8125 = 19.5; 0 ahead: 15.875. */
static void test_hand_worked(void **state) {
  (void)state;
  const double x[] = {10, 12, 15, 15};
  sip__holt_t h;
  sip__holt_init(&h, 0.5, 0.5);
  assert_true(sip__holt_forecast(&h, 3) == 0.0); /* nothing seen */
  sip__holt_add(&h, x[0]);
  assert_true(h.level == 10.0 && h.trend == 0.0);
  assert_true(sip__holt_forecast(&h, 5) == 10.0);
  sip__holt_add(&h, x[1]);
  assert_true(h.level == 12.0 && h.trend == 2.0);
  sip__holt_add(&h, x[2]);
  assert_true(h.level == 14.5 && h.trend == 2.25);
  sip__holt_add(&h, x[3]);
  assert_true(h.level == 15.875 && h.trend == 1.8125);
  assert_true(sip__holt_forecast(&h, 2) == 19.5);
  assert_true(sip__holt_forecast(&h, 0) == 15.875);
  assert_true(sip__holt_fit_forecast(0.5, 0.5, x, 4, 2) == 19.5);
}

/* A straight line x_t = 3 + 2t is followed exactly whatever the factors:
 * after t1 the level is x_t and the trend 2 (each step's smoothing mixes
 * x_t with level + trend = x_t), so h ahead of t9 (x = 21) is 21 + 2h. */
static void test_linear_series(void **state) {
  (void)state;
  double x[10];
  for (int t = 0; t < 10; t++) x[t] = 3 + 2 * t;
  const double ab[][2] = {{0.2, 0.1}, {0.5, 0.3}, {1.0, 1.0}};
  for (size_t k = 0; k < 3; k++) {
    assert_true(sip__holt_fit_forecast(ab[k][0], ab[k][1], x, 10, 0) == 21.0);
    assert_true(sip__holt_fit_forecast(ab[k][0], ab[k][1], x, 10, 10) == 41.0);
  }
}

/* A rate never forecasts below 0: 20, 10, 0 with alpha = beta = 1 has
 * level 0, trend -10 (t2: level = x = 0, trend = 0 - 10), so 3 ahead would
 * be -30: 0. */
static void test_clamped_at_zero(void **state) {
  (void)state;
  const double x[] = {20, 10, 0};
  assert_true(sip__holt_fit_forecast(1, 1, x, 3, 3) == 0.0);
  assert_true(sip__holt_fit_forecast(1, 1, x, 2, 0) == 10.0);
}

/* A ramp seen with noise: the forecast leads the last point (it follows the
 * trend), which is what scaling ahead of a ramp needs. x = 10, 20, ..., 100
 * with alpha 0.5, beta 0.3 is a line of slope 10: 10 ahead is 200. */
static void test_ramp_leads(void **state) {
  (void)state;
  double x[10];
  for (int t = 0; t < 10; t++) x[t] = 10 * (t + 1);
  double f = sip__holt_fit_forecast(0.5, 0.3, x, 10, 10);
  assert_true(f == 200.0);
  assert_true(f > x[9]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_worked),
      cmocka_unit_test(test_linear_series),
      cmocka_unit_test(test_clamped_at_zero),
      cmocka_unit_test(test_ramp_leads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
