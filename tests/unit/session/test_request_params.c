/* The request parameter table (src/session/request/request_params.c): every key the
 * three front-ends pass, the types each takes, the unit conversions done
 * once, the errors, and pipeline_config read into typed fields. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "session/engine.h"
#include "session/sequence.h"

static sip_param_value_t I(int64_t v) { return (sip_param_value_t){.type = SIP_PARAM_INT, .i = v}; }
static sip_param_value_t U(uint64_t v) { return (sip_param_value_t){.type = SIP_PARAM_UINT, .u = v}; }
static sip_param_value_t B(int v) { return (sip_param_value_t){.type = SIP_PARAM_BOOL, .b = v}; }
static sip_param_value_t S(const char *v) {
  return (sip_param_value_t){.type = SIP_PARAM_STRING, .s = v};
}
static sip_param_value_t D(double v) { return (sip_param_value_t){.type = SIP_PARAM_DOUBLE, .d = v}; }

static void ok(sip_request_t *r, const char *key, sip_param_value_t v) {
  sip_error_t *e = sip_request_set_parameter(r, key, &v);
  if (e) fail_msg("%s: %s", key, sip_error_message(e));
}

static void err(sip_request_t *r, const char *key, sip_param_value_t v, sip_code_t code,
                const char *text) {
  sip_error_t *e = sip_request_set_parameter(r, key, &v);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), code);
  if (!strstr(sip_error_message(e), text))
    fail_msg("%s: '%s' lacks '%s'", key, sip_error_message(e), text);
  sip_error_free(e);
}

/* One JSON value (parsed), set as the HTTP and native front-ends pass it. */
static sip_error_t *set_json(sip_request_t *r, const char *key, const char *text) {
  json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
  assert_non_null(j);
  sip_param_value_t v = {.type = SIP_PARAM_JSON, .json = j};
  sip_error_t *e = sip_request_set_parameter(r, key, &v);
  json_decref(j);
  return e;
}

static void test_numbers_and_units(void **state) {
  (void)state;
  sip_request_t *r = sip_request_new("p");
  ok(r, "priority", I(2));
  assert_int_equal(r->priority, 2);
  ok(r, "priority", U(9)); /* past 3: the lowest */
  assert_int_equal(r->priority, 3);
  ok(r, "timeout", I(1500)); /* microseconds, rounded up to ms */
  assert_int_equal(r->timeout_ms, 2);
  ok(r, "timeout", U(3000));
  assert_int_equal(r->timeout_ms, 3);
  ok(r, "timeout", D(1000.0)); /* a whole double counts */
  assert_int_equal(r->timeout_ms, 1);
  ok(r, "timeout", U((uint64_t)INT64_MAX)); /* clamped */
  assert_int_equal(r->timeout_ms, UINT32_MAX);
  ok(r, "batch_timeout_ms", I(250));
  assert_int_equal(r->batch_wait_ms, 250);
  assert_null(set_json(r, "priority", "1"));
  assert_int_equal(r->priority, 1);

  err(r, "priority", I(-1), SIP_INVALID_ARGUMENT, "parameters.priority is -1; expected an integer in 0..2^63-1");
  err(r, "timeout", U(UINT64_MAX), SIP_INVALID_ARGUMENT, "parameters.timeout is 18446744073709551615");
  err(r, "timeout", S("5"), SIP_INVALID_ARGUMENT, "parameters.timeout is a string; expected");
  err(r, "timeout", D(1.5), SIP_INVALID_ARGUMENT, "a number with a fraction");
  err(r, "batch_timeout_ms", I(86400001), SIP_INVALID_ARGUMENT, "0..86400000");
  sip_error_t *e = set_json(r, "priority", "\"high\"");
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "parameters.priority is a string"));
  sip_error_free(e);
  assert_int_equal(r->priority, 1); /* a refused value leaves the old one */
  sip_request_free(r);
}

static void test_sequences(void **state) {
  (void)state;
  sip_request_t *r = sip_request_new("p");
  ok(r, "sequence_start", B(1)); /* before the id: kept, checked at submission */
  sip_error_t *e = sip__request_check_parameters(r);
  assert_non_null(strstr(sip_error_message(e), "need a sequence_id"));
  sip_error_free(e);
  ok(r, "sequence_id", U(42));
  assert_null(sip__request_check_parameters(r));
  assert_int_equal(r->seq_id, 42);
  assert_int_equal(r->seq_flags, SIP__SEQF_SET | SIP__SEQF_START);
  ok(r, "sequence_end", B(1));
  ok(r, "sequence_start", B(0));
  assert_int_equal(r->seq_flags, SIP__SEQF_SET | SIP__SEQF_END);
  ok(r, "sequence_id", S("abc")); /* a string id replaces the number */
  assert_string_equal(r->seq_sid, "abc");
  assert_int_equal(r->seq_id, 0);
  ok(r, "sequence_id", I(0)); /* 0: no sequence */
  assert_null(r->seq_sid);
  assert_int_equal(r->seq_flags & SIP__SEQF_SET, 0);
  char big[300];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  err(r, "sequence_id", S(big), SIP_INVALID_ARGUMENT, "a string of 299 bytes; expected 1..256");
  err(r, "sequence_end", S("yes"), SIP_INVALID_ARGUMENT, "parameters.sequence_end is a string; expected true or false");
  err(r, "sequence_id", B(1), SIP_INVALID_ARGUMENT, "parameters.sequence_id is a boolean");
  sip_request_free(r);
}

static void test_strings_and_trace(void **state) {
  (void)state;
  sip_request_t *r = sip_request_new("p");
  ok(r, "idempotency_key", S("k-1"));
  assert_string_equal(r->idem_key, "k-1");
  err(r, "idempotency_key", I(5), SIP_INVALID_ARGUMENT, "parameters.idempotency_key is 5; expected a string");
  ok(r, "tracestate", S("vendor=1"));
  ok(r, "traceparent", S("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  assert_int_equal(r->has_trace_ctx, 1);
  assert_string_equal(r->tracestate, "vendor=1");
  ok(r, "traceparent", S("not a traceparent")); /* ignored, as W3C says */
  assert_int_equal(r->has_trace_ctx, 0);
  err(r, "nope", I(1), SIP_NOT_FOUND, "unknown request parameter 'nope'; expected one of priority");
  sip_request_free(r);
}

static void test_pipeline_config(void **state) {
  (void)state;
  sip_request_t *r = sip_request_new("p");
  assert_null(set_json(r, "pipeline_config",
                       "{\"stage_timeout_ms\": [50, 0, 30], \"early_exit_condition\": \"len(a.y) == 0\"}"));
  assert_int_equal(r->has_stage_timeouts, 1);
  assert_int_equal(r->n_stage_timeouts, 3);
  assert_int_equal(r->stage_timeout_ms[0], 50);
  assert_int_equal(r->stage_timeout_ms[2], 30);
  assert_string_equal(r->early_exit, "len(a.y) == 0");
  /* The same as a string (gRPC's string_param, the C API). */
  ok(r, "pipeline_config", S("{\"stage_timeout_ms\": [7]}"));
  assert_int_equal(r->n_stage_timeouts, 1);
  assert_int_equal(r->stage_timeout_ms[0], 7);
  assert_null(sip_request_set_pipeline_config(r, NULL)); /* clears it */
  assert_int_equal(r->has_stage_timeouts, 0);
  assert_null(r->early_exit);

  const char *bad[][2] = {
      {"[1]", "pipeline_config is not a JSON object"},
      {"{\"stage_timeout_ms\": \"fast\"}", "stage_timeout_ms: expected a list"},
      {"{\"stage_timeout_ms\": [1, -2]}", "stage_timeout_ms[1]: expected an integer 0..86400000"},
      {"{\"early_exit_condition\": 3}", "early_exit_condition: expected a string"},
      {"{\"other\": 1}", "pipeline_config has no key 'other'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sip_error_t *e = set_json(r, "pipeline_config", bad[i][0]);
    assert_non_null(e);
    assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
    if (!strstr(sip_error_message(e), bad[i][1]))
      fail_msg("%s: '%s' lacks '%s'", bad[i][0], sip_error_message(e), bad[i][1]);
    sip_error_free(e);
  }
  err(r, "pipeline_config", S("{oops"), SIP_INVALID_ARGUMENT, "parameters.pipeline_config is not JSON");
  err(r, "pipeline_config", I(1), SIP_INVALID_ARGUMENT, "parameters.pipeline_config is 1; expected a JSON object");
  sip_request_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_numbers_and_units),
      cmocka_unit_test(test_sequences),
      cmocka_unit_test(test_strings_and_trace),
      cmocka_unit_test(test_pipeline_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
