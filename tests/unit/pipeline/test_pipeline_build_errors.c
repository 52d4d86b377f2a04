/* Unit tests of the pipeline builder's errors (src/pipeline:
 * sip__pipelines_new, _build) on an engine set up by hand from a config's
 * builtin pools: unknown or failed pools, input mappings, output filters,
 * default wiring, conditions, transforms' options and declared outputs.
 *
 * Errors the config parser refuses (a reference to an unknown stage, a
 * transform's bad option) never reach the builder from a config file; to
 * exercise the builder's own checks the parsed config is changed before
 * the build, and the parser's refusal is checked separately. */
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

static void test_unknown_pool(void **state) {
  (void)state;
  /* The parser refuses an unknown pool outright (no repository could
   * provide it); a pool can also be gone by build time. */
  static const char *const pfrags[] = {"<test>:", "ghost", NULL};
  expect_refused(GOOD "  - {name: bad, stages: [{name: a, pool: ghost}]}\n", pfrags);

  sip__config_t *cfg = parse_ok(GOOD "  - {name: bad, stages: [{name: a, pool: echo}, {name: b, pool: echo}]}\n");
  set_str(&stage_cfg(cfg, "bad", "a")->pool, "ghost");
  static const char *const frags[] = {"stage 'a'", "no pool named 'ghost'", NULL};
  build_failed(cfg, frags);
}

static void test_failed_pool(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 's'", "pool 'rotten' is FAILED",
                                      "builtin backend option dtype: 'nope'", NULL};
  build_failed(parse_ok(GOOD "  - {name: bad, stages: [{name: s, pool: rotten}]}\n"), frags);
}

static void test_input_mapping_unknown_stage(void **state) {
  (void)state;
  static const char *const pfrags[] = {"<test>:", "nosuch.output", "names no earlier stage of pipeline 'bad'", NULL};
  expect_refused(GOOD "  - name: bad\n"
                      "    stages:\n"
                      "      - {name: a, pool: echo}\n"
                      "      - {name: b, pool: echo, input_mapping: {input: nosuch.output}}\n",
                 pfrags);

  /* Past the parser: the builder says the same. */
  sip__config_t *cfg = parse_ok(GOOD "  - name: bad\n"
                                    "    stages:\n"
                                    "      - {name: a, pool: echo}\n"
                                    "      - {name: b, pool: echo, input_mapping: {input: a.output}}\n");
  sip__stage_config_t *b = stage_cfg(cfg, "bad", "b");
  assert_int_equal(b->n_input_mapping, 1);
  set_kv_value(&b->input_mapping[0], "nosuch.output");
  static const char *const frags[] = {"stage 'b' input 'input'", "'nosuch.output' names no earlier stage", NULL};
  build_failed(cfg, frags);
}

static void test_input_mapping_unknown_output(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'b' input 'input'", "stage 'a' has no output 'nope'",
                                      "(it keeps: 'output')", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: a, pool: echo}\n"
                             "      - {name: b, pool: echo, input_mapping: {input: a.nope}}\n"), frags);
}

static void test_input_mapping_not_an_input(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'a'", "input_mapping names 'q'", "not an input of the stage", NULL};
  build_failed(parse_ok(GOOD "  - {name: bad, stages: [{name: a, pool: echo, input_mapping: {q: pipeline.x}}]}\n"), frags);
}

static void test_output_filter_unknown(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'k'", "output_filter names 'probs'",
                                      "which the stage does not produce", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: a, pool: echo}\n"
                             "      - {name: k, type: transform, operation: topk, output_filter: [indices, probs]}\n"), frags);
}

/* A reference to an output the previous stage filtered away. */
static void test_filtered_output(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'c' input 'input'", "stage 'k' has no output 'values'",
                                      "(it keeps: 'indices')", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: k, type: transform, operation: topk, output_filter: [indices]}\n"
                             "      - {name: c, type: transform, operation: cast, to: float32, from: float32, "
                             "input_mapping: {input: k.values}}\n"), frags);
}

/* Default wiring: the previous stage keeps no output of the input's name
 * nor at its position, no earlier stage has one and the pipeline has no
 * input of that name (a pipeline input of that name would be taken). */
static void test_default_wiring_no_output(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'e' input 'input'", "the previous stage 'k'",
                                      "no output of that name or position", "add an input_mapping", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: k, type: transform, operation: topk, output_filter: [indices], "
                             "input_mapping: {input: pipeline.x}}\n"
                             "      - {name: e, pool: echo}\n"), frags);
}

static void test_when_unknown_stage(void **state) {
  (void)state;
  static const char *const pfrags[] = {"<test>:", "'ghost.output' names no earlier stage of pipeline 'bad'", NULL};
  expect_refused(GOOD "  - name: bad\n"
                      "    stages:\n"
                      "      - {name: a, pool: echo}\n"
                      "      - {name: b, pool: echo, when: 'len(ghost.output) > 0'}\n",
                 pfrags);

  /* Past the parser: the builder refuses it too. */
  sip__config_t *cfg = parse_ok(GOOD "  - name: bad\n"
                                    "    stages:\n"
                                    "      - {name: a, pool: echo}\n"
                                    "      - {name: b, pool: echo, when: 'len(a.output) > 0'}\n");
  set_str(&stage_cfg(cfg, "bad", "b")->when, "len(ghost.output) > 0");
  static const char *const frags[] = {"stage 'b' when", "'ghost.output' names no earlier stage", NULL};
  build_failed(cfg, frags);
}

static void test_when_unknown_output(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'b' when", "stage 'a' has no output 'nope'", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: a, pool: echo}\n"
                             "      - {name: b, pool: echo, when: 'max(a.nope) > 0', input_mapping: {input: a.output}}\n"), frags);
}

static void test_transform_bad_option(void **state) {
  (void)state;
  static const char *const pfrags[] = {"<test>:", "transform softmax: option axis: 'zz'", NULL};
  expect_refused(GOOD "  - {name: bad, stages: [{name: t, type: transform, operation: softmax, axis: zz}]}\n",
                 pfrags);
  static const char *const kfrags[] = {"<test>:", "axiz", NULL};
  expect_refused(GOOD "  - {name: bad, stages: [{name: t, type: transform, operation: softmax, axiz: 1}]}\n",
                 kfrags);

  /* Past the parser: the builder fails the pipeline with the transform's
   * own message. */
  sip__config_t *cfg = parse_ok(GOOD "  - name: bad\n"
                      "    stages:\n"
                      "      - {name: a, pool: echo}\n"
                      "      - {name: t, type: transform, operation: softmax, axis: 1}\n");
  set_option(stage_cfg(cfg, "bad", "t"), "axis", "zz");
  static const char *const frags[] = {"stage 't'", "transform softmax: option axis: 'zz'",
                                      "expected an integer", NULL};
  build_failed(cfg, frags);
}

static void test_outputs_unknown(void **state) {
  (void)state;
  static const char *const frags[] = {"outputs:", "stage 'a' has no output 'nope'", NULL};
  build_failed(parse_ok(GOOD "  - {name: bad, outputs: [a.output, a.nope], stages: [{name: a, pool: echo}]}\n"), frags);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unknown_pool),
      cmocka_unit_test(test_failed_pool),
      cmocka_unit_test(test_input_mapping_unknown_stage),
      cmocka_unit_test(test_input_mapping_unknown_output),
      cmocka_unit_test(test_input_mapping_not_an_input),
      cmocka_unit_test(test_output_filter_unknown),
      cmocka_unit_test(test_filtered_output),
      cmocka_unit_test(test_default_wiring_no_output),
      cmocka_unit_test(test_when_unknown_stage),
      cmocka_unit_test(test_when_unknown_output),
      cmocka_unit_test(test_transform_bad_option),
      cmocka_unit_test(test_outputs_unknown),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
