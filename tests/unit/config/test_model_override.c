/* Unit tests for the Triton model config of a repository load
 * (src/config/model_override.c): what maps onto a pool's settings, and
 * every refusal's message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"
#include "core/core.h"

static sip__model_override_t *parse_ok(const char *json) {
  sip__model_override_t *o = NULL;
  sip_error_t *e = sip__model_override_parse(json, strlen(json), "m", &o);
  if (e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("unexpected error: %s\n--- json: %s", msg, json);
  }
  assert_non_null(o);
  return o;
}

static void expect_err(const char *json, const char *want) {
  sip__model_override_t *o = (sip__model_override_t *)1;
  sip_error_t *e = sip__model_override_parse(json, strlen(json), "m", &o);
  if (!e) fail_msg("expected an error for %s", json);
  assert_null(o);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t code = sip_error_code(e);
  sip_error_free(e);
  assert_int_equal(code, SIP_INVALID_ARGUMENT);
  if (!strstr(msg, want)) fail_msg("message '%s' lacks '%s' (json %s)", msg, want, json);
  assert_non_null(strstr(msg, "model config: "));
}

static sip__pool_config_t base_pool(void) {
  sip__pool_config_t pc;
  memset(&pc, 0, sizeof pc);
  pc.pool_size = 1;
  pc.priority = SIP__PRIO_MEDIUM;
  pc.backend = (char *)"onnxruntime";
  pc.platform = "onnxruntime_onnx";
  return pc;
}

static void test_maps_onto_the_pool(void **st) {
  (void)st;
  sip__model_override_t *o = parse_ok(
      "{\"name\": \"m\", \"platform\": \"onnxruntime_onnx\", \"backend\": \"onnxruntime\","
      " \"max_batch_size\": 16, \"dynamic_batching\": {\"preferred_batch_size\": [4, 8],"
      " \"max_queue_delay_microseconds\": \"2500\", \"padding_strategy\": \"zero\"},"
      " \"instance_group\": [{\"count\": 2, \"kind\": \"KIND_CPU\"}, {\"kind\": \"KIND_AUTO\"}],"
      " \"priority\": \"high\", \"resource_quota\": {\"max_memory_mb\": 512},"
      " \"optimization\": {\"graph\": {\"level\": 0}}, \"model_warmup\": [], \"parameters\": {}}");
  sip__pool_config_t pc = base_pool();
  sip_error_t *e = sip__model_override_apply(o, &pc);
  assert_null(e);
  assert_int_equal(pc.max_batch_size, 16);
  assert_int_equal(pc.n_preferred, 2);
  assert_int_equal(pc.preferred_batch_sizes[0], 4);
  assert_int_equal(pc.preferred_batch_sizes[1], 8);
  assert_int_equal(pc.max_queue_delay_us, 2500);
  assert_int_equal(pc.padding_strategy, SIP__PAD_ZERO);
  assert_int_equal(pc.pool_size, 3); /* 2 + the default count 1 */
  assert_int_equal(pc.priority, SIP__PRIO_HIGH);
  assert_int_equal(pc.max_memory_mb, 512);
  /* Canonical text: key order does not matter, content does. */
  sip__model_override_t *a = parse_ok("{\"max_batch_size\": 2, \"name\": \"m\"}");
  sip__model_override_t *b = parse_ok("{\"name\": \"m\", \"max_batch_size\": 2}");
  sip__model_override_t *c = parse_ok("{\"name\": \"m\", \"max_batch_size\": 3}");
  assert_string_equal(sip__model_override_text(a), sip__model_override_text(b));
  assert_string_not_equal(sip__model_override_text(a), sip__model_override_text(c));
  assert_string_equal(sip__model_override_text(NULL), "");
  sip__model_override_free(a);
  sip__model_override_free(b);
  sip__model_override_free(c);
  sip__model_override_free(o);
}

static void test_zero_batch_clears_batching(void **st) {
  (void)st;
  sip__model_override_t *o = parse_ok("{\"max_batch_size\": 0}");
  sip__pool_config_t pc = base_pool();
  pc.max_batch_size = 8;
  pc.n_preferred = 1;
  pc.preferred_batch_sizes[0] = 4;
  pc.max_queue_delay_us = 100;
  assert_null(sip__model_override_apply(o, &pc));
  assert_int_equal(pc.max_batch_size, 0);
  assert_int_equal(pc.n_preferred, 0);
  assert_int_equal(pc.max_queue_delay_us, 0);
  sip__model_override_free(o);
  /* Preferred sizes checked against what the pool ends with. */
  o = parse_ok("{\"dynamic_batching\": {\"preferred_batch_size\": [16]}}");
  pc = base_pool();
  pc.max_batch_size = 8;
  sip_error_t *e = sip__model_override_apply(o, &pc);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "preferred_batch_size 16 is larger than "
                                               "max_batch_size 8"));
  sip_error_free(e);
  sip__model_override_free(o);
  o = parse_ok("{\"dynamic_batching\": {}}");
  pc = base_pool();
  e = sip__model_override_apply(o, &pc);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "give max_batch_size too"));
  sip_error_free(e);
  sip__model_override_free(o);
}

/* Triton's response_cache {enable} turns the server's response cache on or
 * off for the pool; anything else in it is refused. */
static void test_response_cache(void **st) {
  (void)st;
  sip__pool_config_t pc = base_pool();
  sip__model_override_t *o = parse_ok("{\"response_cache\": {\"enable\": true}}");
  assert_null(sip__model_override_apply(o, &pc));
  assert_int_equal(pc.response_cache, 1);
  sip__model_override_free(o);
  o = parse_ok("{\"response_cache\": {\"enable\": false}}");
  assert_null(sip__model_override_apply(o, &pc));
  assert_int_equal(pc.response_cache, 0);
  sip__model_override_free(o);
  o = parse_ok("{\"max_batch_size\": 0}"); /* not given: the pool's stays */
  pc.response_cache = 1;
  assert_null(sip__model_override_apply(o, &pc));
  assert_int_equal(pc.response_cache, 1);
  sip__model_override_free(o);
  expect_err("{\"response_cache\": {\"enable\": 1}}", "response_cache is not {\"enable\": true|false}");
  expect_err("{\"response_cache\": {\"size\": 3}}", "response_cache is not {\"enable\": true|false}");
}

static void test_versions(void **st) {
  (void)st;
  sip__model_override_t *o =
      parse_ok("{\"version_policy\": {\"specific\": {\"versions\": [\"3\", 1, 3]}}}");
  sip__pool_config_t pc = base_pool();
  sip__model_override_versions(o, &pc);
  assert_int_equal(pc.version_policy, SIP__VERSIONS_SPECIFIC);
  assert_int_equal(pc.n_versions, 2);
  assert_int_equal(pc.versions[0], 1);
  assert_int_equal(pc.versions[1], 3);
  sip__model_override_free(o);
  o = parse_ok("{\"version_policy\": {\"latest\": {\"num_versions\": 2}}}");
  sip__model_override_versions(o, &pc);
  assert_int_equal(pc.version_policy, SIP__VERSIONS_LATEST);
  assert_int_equal(pc.version_latest, 2);
  sip__model_override_free(o);
}

static void test_refusals(void **st) {
  (void)st;
  expect_err("", "not valid JSON");
  expect_err("[]", "not a JSON object");
  expect_err("{\"name\": \"n\"}", "name is not the model's; expected \"m\"");
  expect_err("{\"platform\": 3}", "platform is not a string");
  /* platform and backend are checked against the model's backend. */
  static const char *const wrong[] = {"{\"platform\": \"pytorch_libtorch\"}",
                                      "{\"backend\": \"python\"}"};
  static const char *const why[] = {"platform is not onnxruntime_onnx; this model is served by "
                                    "the onnxruntime backend",
                                    "backend is not onnxruntime"};
  for (int i = 0; i < 2; i++) {
    sip__model_override_t *o = parse_ok(wrong[i]);
    sip__pool_config_t pc = base_pool();
    sip_error_t *e = sip__model_override_apply(o, &pc);
    assert_non_null(e);
    assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
    if (!strstr(sip_error_message(e), why[i]))
      fail_msg("message '%s' lacks '%s'", sip_error_message(e), why[i]);
    sip_error_free(e);
    sip__model_override_free(o);
  }
  expect_err("{\"max_batch_size\": 1.5}", "max_batch_size is not an integer");
  expect_err("{\"max_batch_size\": 70000}", "max_batch_size 70000 is out of range");
  expect_err("{\"max_batch_size\": \"x\"}", "max_batch_size \"x\" is not an integer");
  expect_err("{\"max_batch_size\": \"99999999999999999999\"}", "is not an integer");
  expect_err("{\"max_batch_size\": 0, \"dynamic_batching\": {}}",
             "dynamic_batching needs max_batch_size > 0");
  expect_err("{\"max_batch_size\": 4, \"dynamic_batching\": {\"preferred_batch_size\": [2, 2]}}",
             "is not larger than the size before it");
  expect_err("{\"max_batch_size\": 4, \"dynamic_batching\": {\"preferred_batch_size\": [8]}}",
             "preferred_batch_size 8 is larger than max_batch_size 4");
  expect_err("{\"dynamic_batching\": {\"priority_levels\": 3}}",
             "dynamic_batching.priority_levels is not supported");
  expect_err("{\"dynamic_batching\": {\"speed\": 3}}", "dynamic_batching has unknown field 'speed'");
  expect_err("{\"dynamic_batching\": {\"padding_strategy\": \"wrap\"}}",
             "padding_strategy is not one of");
  expect_err("{\"instance_group\": []}", "instance_group is not a non-empty list");
  expect_err("{\"instance_group\": [{\"kind\": \"KIND_GPU\", \"gpus\": [0]}]}",
             "KIND_GPU cannot be served");
  expect_err("{\"instance_group\": [{\"kind\": \"KIND_TPU\"}]}", "kind is not one of");
  expect_err("{\"instance_group\": [{\"count\": 200}, {\"count\": 100}]}",
             "counts add up to 300; expected at most 256");
  expect_err("{\"instance_group\": [{\"count\": 1, \"passive\": true}]}",
             "instance_group passive is not supported");
  expect_err("{\"version_policy\": {}}", "version_policy has 0 policies");
  expect_err("{\"version_policy\": {\"all\": {}, \"latest\": {}}}", "has 2 policies");
  expect_err("{\"version_policy\": {\"specific\": {\"versions\": []}}}",
             "specific.versions is not a list of 1..");
  expect_err("{\"version_policy\": {\"latest\": {\"num_versions\": 0}}}",
             "num_versions 0 is out of range");
  expect_err("{\"input\": {}}", "input is not a list");
  expect_err("{\"input\": [{\"dims\": [1]}]}", "input 0 has no name");
  expect_err("{\"output\": [{\"name\": \"y\", \"data_type\": \"FP32\"}]}",
             "data_type is not a Triton type");
  expect_err("{\"input\": [{\"name\": \"x\", \"reshape\": {\"shape\": [2]}}]}",
             "field reshape is not supported");
  expect_err("{\"input\": [{\"name\": \"x\", \"dims\": [-2]}]}", "dims item -2 is out of range");
  expect_err("{\"priority\": \"urgent\"}", "priority is not one of high, medium, low");
  expect_err("{\"resource_quota\": {\"max_compute_percent\": 101}}",
             "max_compute_percent 101 is out of range");
  expect_err("{\"ensemble_scheduling\": {\"step\": [{}]}}",
             "field 'ensemble_scheduling' is not supported");
  expect_err("{\"colour\": 1}", "unknown field 'colour'; expected Triton model config fields");
  expect_err("{\"name\": \"m\", \"name\": \"m\"}", "not valid JSON");
}

static void test_io_check(void **st) {
  (void)st;
  sip_io_desc_t in[1] = {{.name = "x", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 4}}};
  sip_io_desc_t out[1] = {{.name = "y", .dtype = SIP_DTYPE_INT64, .rank = 1, .dims = {3}}};
  const sip_io_desc_t *const io[2] = {in, out};
  const size_t n[2] = {1, 1};
  struct {
    const char *json;
    int batched;
    const char *want; /* NULL: fits */
  } cases[] = {
      {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]}]}", 1, NULL},
      {"{\"input\": [{\"name\": \"x\", \"dims\": [4]}]}", 0, "dims [4] do not fit the model's "
                                                            "shape [-1,4]"},
      {"{\"input\": [{\"name\": \"x\", \"dims\": [7, 4]}]}", 0, NULL},
      {"{\"input\": [{\"name\": \"x\", \"dims\": [7, 5]}]}", 1, "do not fit"},
      {"{\"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_INT64\", \"dims\": [3]}]}", 0,
       NULL},
      {"{\"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_STRING\"}]}", 0,
       "output 'y' data_type is TYPE_STRING, but the model's is TYPE_INT64"},
      {"{\"output\": [{\"name\": \"x\"}]}", 0, "output 'x' is not an output of the model"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    sip__model_override_t *o = parse_ok(cases[i].json);
    sip_error_t *e = sip__model_override_check_io(o, io, n, cases[i].batched);
    char msg[512] = "";
    if (e) snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    sip__model_override_free(o);
    if (!cases[i].want && e) fail_msg("case %zu: unexpected error %s", i, msg);
    if (cases[i].want && !strstr(msg, cases[i].want))
      fail_msg("case %zu: '%s' lacks '%s'", i, msg, cases[i].want);
  }
  assert_null(sip__model_override_check_io(NULL, io, n, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_maps_onto_the_pool), cmocka_unit_test(test_zero_batch_clears_batching),
      cmocka_unit_test(test_versions),           cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_io_check),           cmocka_unit_test(test_response_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
