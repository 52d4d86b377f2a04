/* server.memory_budget_mb (src/config/config_server.c): a number of MiB or
 * auto; absent means none; bad values name the file, line and column and
 * say what was expected. */
#include "config/config_helpers.h"

#define SERVER(v) "server:\n  memory_budget_mb: " v "\n" POOL("")
#define EXPECTED "expected a whole number of MiB, 1..16777216, or auto"

static void test_absent_is_none(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL(""));
  assert_int_equal(cfg->memory_budget_mb, 0);
  sip__config_free(cfg);
}

static void test_number_and_auto(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(SERVER("200"));
  assert_int_equal(cfg->memory_budget_mb, 200);
  sip__config_free(cfg);
  cfg = load_ok(SERVER("16777216"));
  assert_int_equal(cfg->memory_budget_mb, 16777216);
  sip__config_free(cfg);
  cfg = load_ok(SERVER("1"));
  assert_int_equal(cfg->memory_budget_mb, 1);
  sip__config_free(cfg);
  cfg = load_ok(SERVER("auto"));
  assert_int_equal(cfg->memory_budget_mb, -1);
  sip__config_free(cfg);
}

static void test_bad_values(void **state) {
  (void)state;
  /* line 2, column 21: where the value starts */
  EXPECT_ERR(SERVER("lots"), "cfg.yaml:2:21: server.memory_budget_mb: \"lots\" is not a number",
             EXPECTED);
  EXPECT_ERR(SERVER("0"), "cfg.yaml:2:21: server.memory_budget_mb: \"0\" is out of range", EXPECTED);
  EXPECT_ERR(SERVER("-5"), "cfg.yaml:2:21: server.memory_budget_mb: \"-5\" is out of range",
             EXPECTED);
  EXPECT_ERR(SERVER("16777217"), "\"16777217\" is out of range", EXPECTED);
  EXPECT_ERR(SERVER("99999999999999999999999"), "is out of range", EXPECTED);
  EXPECT_ERR(SERVER("200MiB"), "\"200MiB\" is not a number", EXPECTED);
  EXPECT_ERR(SERVER("1.5"), "\"1.5\" is not a number", EXPECTED);
  EXPECT_ERR(SERVER("Auto"), "\"Auto\" is not a number", EXPECTED);
  /* a quoted number is text, as for every numeric key */
  EXPECT_ERR(SERVER("\"200\""), "is not a number", EXPECTED);
  EXPECT_ERR(SERVER("[200]"), "cfg.yaml:2:21: server.memory_budget_mb", EXPECTED);
  EXPECT_ERR(SERVER("{mb: 200}"), "server.memory_budget_mb", EXPECTED);
  EXPECT_ERR(SERVER(""), "server.memory_budget_mb", EXPECTED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_absent_is_none),
      cmocka_unit_test(test_number_and_auto),
      cmocka_unit_test(test_bad_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
