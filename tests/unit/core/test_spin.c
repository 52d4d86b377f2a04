/* Unit tests for src/core/spin.c: a pool's poll window (its idle_spin_us,
 * else SIP_IDLE_SPIN_US, else 50 us), environment values out of range or
 * not numbers ignored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "core/spin.h"

static void test_window_precedence(void **state) {
  (void)state;
  unsetenv("SIP_IDLE_SPIN_US");
  assert_int_equal(sip__spin_window_us(-1), SIP__IDLE_SPIN_US_DEFAULT);
  assert_int_equal(sip__spin_window_us(0), 0);
  assert_int_equal(sip__spin_window_us(1000), 1000);
  setenv("SIP_IDLE_SPIN_US", "7", 1);
  assert_int_equal(sip__spin_window_us(-1), 7);  /* absent: the environment */
  assert_int_equal(sip__spin_window_us(20), 20); /* the pool's key wins */
  assert_int_equal(sip__spin_window_us(0), 0);
  unsetenv("SIP_IDLE_SPIN_US");
}

static void test_env_values(void **state) {
  (void)state;
  const char *bad[] = {"", "-1", "1001", "12x", "x", " "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("SIP_TEST_SPIN", bad[i], 1);
    assert_int_equal(sip__spin_us_env("SIP_TEST_SPIN"), -1);
  }
  setenv("SIP_TEST_SPIN", "0", 1);
  assert_int_equal(sip__spin_us_env("SIP_TEST_SPIN"), 0);
  setenv("SIP_TEST_SPIN", "1000", 1);
  assert_int_equal(sip__spin_us_env("SIP_TEST_SPIN"), 1000);
  unsetenv("SIP_TEST_SPIN");
  assert_int_equal(sip__spin_us_env("SIP_TEST_SPIN"), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_window_precedence),
      cmocka_unit_test(test_env_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
