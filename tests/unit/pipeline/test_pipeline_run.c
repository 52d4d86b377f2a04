/* Running built pipelines through the public API: the numbers the stages
 * compute (softmax and top-k checked against values computed here), and a
 * stage's `when:` condition (its ran / skipped counts in the status). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_helpers.h"

static void test_run_numbers(void **state) {
  (void)state;
  char yaml[4096];
  snprintf(yaml, sizeof yaml, "%spipeline_sessions:\n%s", POOLS, GOOD);
  sip_server_t *s = new_server_yaml(yaml);
  float x[8] = {0.5f, -1.0f, 2.0f, 1.25f, /* row 0 */ 3.0f, 0.0f, -2.5f, 1.0f /* row 1 */};
  sip_response_t *resp = NULL;
  assert_null(sip_server_infer(s, freq("good", "input", 2, 4, x), &resp));
  if (sip_response_code(resp) != SIP_OK)
    fail_msg("%s: %s", sip_code_name(sip_response_code(resp)), sip_response_message(resp));

  /* softmax along the last axis, and its top-2 indices, computed here. */
  float sm[8];
  int64_t top[4];
  for (int r = 0; r < 2; r++) {
    float mx = x[r * 4];
    for (int i = 1; i < 4; i++) mx = fmaxf(mx, x[r * 4 + i]);
    double sum = 0;
    for (int i = 0; i < 4; i++) sum += exp((double)(x[r * 4 + i] - mx));
    for (int i = 0; i < 4; i++) sm[r * 4 + i] = (float)(exp((double)(x[r * 4 + i] - mx)) / sum);
    int best = 0, second = -1;
    for (int i = 1; i < 4; i++)
      if (x[r * 4 + i] > x[r * 4 + best]) best = i;
    for (int i = 0; i < 4; i++)
      if (i != best && (second < 0 || x[r * 4 + i] > x[r * 4 + second])) second = i;
    top[r * 2] = best;
    top[r * 2 + 1] = second;
  }
  assert_int_equal(top[0], 2);
  assert_int_equal(top[1], 3);
  assert_int_equal(top[2], 0);
  assert_int_equal(top[3], 3);

  const sip_tensor_t *t = sip_response_output_by_name(resp, "sm.output");
  assert_non_null(t);
  assert_int_equal(t->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->dims[0], 2);
  assert_int_equal(t->dims[1], 4);
  for (int i = 0; i < 8; i++)
    if (fabsf(((const float *)t->data)[i] - sm[i]) > 1e-6f)
      fail_msg("sm.output[%d] = %g, want %g", i, ((const float *)t->data)[i], sm[i]);
  t = sip_response_output_by_name(resp, "indices");
  assert_non_null(t);
  assert_int_equal(t->dtype, SIP_DTYPE_INT64);
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->dims[1], 2);
  assert_memory_equal(t->data, top, sizeof top);
  t = sip_response_output_by_name(resp, "a.output");
  assert_non_null(t);
  assert_memory_equal(t->data, x, sizeof x);
  /* Each stage's outputs too, as stage/output. */
  t = sip_response_output_by_name(resp, "k/values");
  assert_non_null(t);
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 2; j++)
      assert_true(fabsf(((const float *)t->data)[r * 2 + j] - sm[r * 4 + top[r * 2 + j]]) <= 1e-6f);
  assert_non_null(sip_response_output_by_name(resp, "a/output"));
  assert_non_null(sip_response_output_by_name(resp, "sm/output"));
  assert_int_equal(sip_response_output_count(resp), 3 + 4);
  /* The message tells each stage's story. */
  json_error_t je;
  json_t *info = json_loads(sip_response_message(resp), 0, &je);
  assert_non_null(info);
  assert_string_equal(json_string_value(json_object_get(info, "pipeline")), "good");
  json_t *st = json_object_get(info, "stages");
  static const char *const names[] = {"a", "sm", "k"};
  for (int i = 0; i < 3; i++)
    assert_string_equal(json_string_value(json_object_get(json_object_get(st, names[i]), "status")), "ran");
  json_decref(info);
  sip_response_free(resp);

  /* Asking for one output by name gives just that. */
  sip_request_t *r = freq("good", "input", 2, 4, x);
  assert_null(sip_request_add_output(r, "indices"));
  assert_null(sip_server_infer(s, r, &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  assert_int_equal(sip_response_output_count(resp), 1);
  assert_memory_equal(sip_response_output(resp, 0)->data, top, sizeof top);
  sip_response_free(resp);
  /* And an output it cannot give is refused. */
  r = freq("good", "input", 2, 4, x);
  assert_null(sip_request_add_output(r, "nope"));
  sip_error_t *e = sip_server_infer(s, r, &resp);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "pipeline 'good' has no output 'nope'"));
  sip_error_free(e);
  sip_server_free(s);
}

/* A `when:` on a stage's output: skipped below the threshold, run above. */
static void test_run_condition(void **state) {
  (void)state;
  char yaml[4096];
  snprintf(yaml, sizeof yaml,
           "%spipeline_sessions:\n"
           "  - name: gate\n"
           "    stages:\n"
           "      - {name: a, pool: echo}\n"
           "      - {name: sm, type: transform, operation: softmax, when: 'max(a.output) > 10'}\n",
           POOLS);
  sip_server_t *s = new_server_yaml(yaml);
  float lo[4] = {1, 2, 3, 4}, hi[4] = {1, 2, 3, 40};
  sip_response_t *resp = NULL;
  assert_null(sip_server_infer(s, freq("gate", "input", 1, 4, lo), &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  assert_null(sip_response_output_by_name(resp, "sm/output"));
  assert_non_null(sip_response_output_by_name(resp, "a/output"));
  json_error_t je;
  json_t *info = json_loads(sip_response_message(resp), 0, &je);
  assert_non_null(info);
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(info, "stages"), "sm"), "status")),
                      "skipped");
  json_decref(info);
  sip_response_free(resp);

  assert_null(sip_server_infer(s, freq("gate", "input", 1, 4, hi), &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  const sip_tensor_t *t = sip_response_output_by_name(resp, "output");
  assert_non_null(t);
  double sum = 0;
  for (int i = 0; i < 4; i++) sum += exp((double)(hi[i] - 40.0f));
  for (int i = 0; i < 4; i++)
    assert_true(fabs(((const float *)t->data)[i] - exp((double)(hi[i] - 40.0f)) / sum) <= 1e-6);
  sip_response_free(resp);

  json_t *root = status(s);
  json_t *pls = json_object_get(root, "pipelines");
  json_t *g = json_array_get(pls, 0);
  assert_string_equal(json_string_value(json_object_get(g, "name")), "gate");
  json_t *sm = json_array_get(json_object_get(g, "stages"), 1);
  assert_int_equal(jint(sm, "ran"), 1);
  assert_int_equal(jint(sm, "skipped"), 1);
  assert_int_equal(jint(json_object_get(g, "requests"), "OK"), 2);
  json_decref(root);
  sip_server_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_numbers),
      cmocka_unit_test(test_run_condition),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
