/* Unit tests for src/core/spin.c: a pool's poll window (its idle_spin_us,
 * else SIP_IDLE_SPIN_US, else 50 us), environment values out of range or
 * not numbers ignored, and the spare-core test (a process that keeps more
 * threads runnable than there are CPUs sees none spare). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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

static atomic_int stop_spinning;

static void *spinner(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_spinning)) sip__cpu_relax();
  return NULL;
}

/* With twice as many threads spinning as there are CPUs, the machine's
 * runnable threads outnumber them on every reading. */
static void test_no_core_spare_under_spinners(void **state) {
  (void)state;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  assert_true(cpus > 0);
  int n = (int)(2 * cpus + 1);
  pthread_t *t = calloc((size_t)n, sizeof *t);
  assert_non_null(t);
  atomic_store(&stop_spinning, 0);
  for (int i = 0; i < n; i++) assert_int_equal(pthread_create(&t[i], NULL, spinner, NULL), 0);
  int spare = 0;
  for (int k = 0; k < 100; k++) spare += sip__spin_core_spare();
  atomic_store(&stop_spinning, 1);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  free(t);
  assert_int_equal(spare, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_window_precedence),
      cmocka_unit_test(test_env_values),
      cmocka_unit_test(test_no_core_spare_under_spinners),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
