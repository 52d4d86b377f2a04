/* Unit tests for sip__shape_str (src/core/tensor.c), the one formatter of
 * shapes in messages: both separators, scalars, dynamic dims, and shapes
 * longer than the buffer (whole dims kept, then "...]"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/core.h"

static void test_separators(void **state) {
  (void)state;
  char buf[64];
  int64_t d[3] = {2, 3, -1};
  assert_string_equal(sip__shape_str(buf, sizeof buf, 3, d, ","), "[2,3,-1]");
  assert_string_equal(sip__shape_str(buf, sizeof buf, 3, d, ", "), "[2, 3, -1]");
  assert_ptr_equal(sip__shape_str(buf, sizeof buf, 3, d, ","), buf);
}

static void test_scalar_and_single(void **state) {
  (void)state;
  char buf[16];
  int64_t d[1] = {-1};
  assert_string_equal(sip__shape_str(buf, sizeof buf, 0, d, ","), "[]");
  assert_string_equal(sip__shape_str(buf, sizeof buf, -1, d, ","), "[]");
  assert_string_equal(sip__shape_str(buf, sizeof buf, 0, NULL, ", "), "[]");
  assert_string_equal(sip__shape_str(buf, sizeof buf, 1, d, ", "), "[-1]");
}

static void test_extreme_dims(void **state) {
  (void)state;
  char buf[128];
  int64_t d[2] = {INT64_MIN, INT64_MAX};
  assert_string_equal(sip__shape_str(buf, sizeof buf, 2, d, ","),
                      "[-9223372036854775808,9223372036854775807]");
}

static void test_exact_fit(void **state) {
  (void)state;
  int64_t d[3] = {10, 20, 30};
  char buf[11]; /* "[10,20,30]" and the NUL */
  assert_string_equal(sip__shape_str(buf, sizeof buf, 3, d, ","), "[10,20,30]");
}

static void test_truncated(void **state) {
  (void)state;
  int64_t d[8] = {1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000};
  char buf[20];
  const char *s = sip__shape_str(buf, sizeof buf, 8, d, ", ");
  assert_string_equal(s, "[1000, 2000, ...]");
  assert_true(strlen(s) < sizeof buf);
  char small[16];
  assert_string_equal(sip__shape_str(small, sizeof small, 8, d, ","), "[1000,2000,...]");
  /* Too small for even one dim: the marker alone, cut to fit. */
  char tiny[6];
  assert_string_equal(sip__shape_str(tiny, sizeof tiny, 8, d, ","), "[...]");
  char tinier[4];
  assert_string_equal(sip__shape_str(tinier, sizeof tinier, 8, d, ","), "[..");
  char one[1];
  assert_string_equal(sip__shape_str(one, sizeof one, 8, d, ","), "");
}

static void test_full_rank(void **state) {
  (void)state;
  /* SIP_MAX_RANK dims of the widest kind fit the 256-byte buffers callers use. */
  int64_t d[8];
  for (int i = 0; i < 8; i++) d[i] = INT64_MIN;
  char buf[256];
  const char *s = sip__shape_str(buf, sizeof buf, 8, d, ", ");
  assert_int_equal(strlen(s), 1 + 8 * 20 + 7 * 2 + 1);
  assert_int_equal(s[strlen(s) - 1], ']');
  assert_null(strstr(s, "..."));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_separators),   cmocka_unit_test(test_scalar_and_single),
      cmocka_unit_test(test_extreme_dims), cmocka_unit_test(test_exact_fit),
      cmocka_unit_test(test_truncated),    cmocka_unit_test(test_full_rank),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
