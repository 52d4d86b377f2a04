/* Unit tests of a built pipeline's interface (src/pipeline:
 * sip__pipelines_build, _check_pool, _json): a good pipeline's typed
 * inputs and outputs, and the re-check when one of its pools changes. */
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

/* ---- a good pipeline's typed inputs and outputs ------------------------------ */

static const sip_io_desc_t *desc(const sip_io_desc_t *d, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return &d[i];
  fail_msg("no descriptor '%s'", name);
  return NULL;
}

static void test_typed_io(void **state) {
  (void)state;
  world_t w;
  world_up(&w, parse_ok(GOOD
                        "  - name: two\n"
                        "    stages:\n"
                        "      - {name: a, pool: echo, input_mapping: {input: pipeline.x}}\n"
                        "      - {name: b, pool: ints, input_mapping: {input: pipeline.ids}, "
                        "when: 'len(pipeline.flag) > 0'}\n"));
  /* good: one input as stage a takes it; outputs in the order listed,
   * the two named "output" qualified by their stage. */
  sip__model_t *m = model(&w, "good");
  sip__model_io_t io;
  assert_int_equal(m->vt->describe_io(m, &io), 1);
  assert_int_equal(io.n_inputs, 1);
  assert_string_equal(io.inputs[0].name, "input");
  assert_int_equal(io.inputs[0].dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(io.inputs[0].rank, 2);
  assert_int_equal(io.inputs[0].dims[0], -1);
  assert_int_equal(io.inputs[0].dims[1], 4);
  assert_int_equal(io.n_outputs, 3);
  assert_string_equal(io.outputs[0].name, "sm.output");
  assert_int_equal(io.outputs[0].dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(io.outputs[0].rank, -1); /* a transform's output: any shape */
  assert_string_equal(io.outputs[1].name, "indices");
  assert_int_equal(io.outputs[1].dtype, SIP_DTYPE_INT64);
  assert_string_equal(io.outputs[2].name, "a.output");
  assert_int_equal(io.outputs[2].dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(io.outputs[2].rank, 2);
  assert_int_equal(io.outputs[2].dims[1], 4);

  /* two: inputs by the pipeline names the stages map; one only a
   * condition reads (no type); default outputs: every sink's. */
  m = model(&w, "two");
  assert_int_equal(m->vt->describe_io(m, &io), 1);
  assert_int_equal(io.n_inputs, 3);
  const sip_io_desc_t *x = desc(io.inputs, io.n_inputs, "x");
  assert_int_equal(x->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(x->rank, 2);
  const sip_io_desc_t *ids = desc(io.inputs, io.n_inputs, "ids");
  assert_int_equal(ids->dtype, SIP_DTYPE_INT64);
  assert_int_equal(ids->rank, 1);
  assert_int_equal(ids->dims[0], -1);
  const sip_io_desc_t *flag = desc(io.inputs, io.n_inputs, "flag");
  assert_int_equal(flag->dtype, SIP_DTYPE_INVALID);
  assert_int_equal(flag->rank, -1);
  assert_int_equal(io.n_outputs, 2);
  assert_int_equal(desc(io.outputs, 2, "a.output")->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(desc(io.outputs, 2, "b.output")->dtype, SIP_DTYPE_INT64);

  /* The same in the pools introspection. */
  json_t *a = sip__pipelines_json(w.ps, SIP_INFO_POOLS);
  json_error_t je;
  json_t *want = json_loads(
      "[{\"name\": \"input\", \"dtype\": \"float32\", \"shape\": [-1, 4]}]", 0, &je);
  json_t *want_out = json_loads(
      "[{\"name\": \"sm.output\", \"dtype\": \"float32\", \"shape\": null},"
      " {\"name\": \"indices\", \"dtype\": \"int64\", \"shape\": null},"
      " {\"name\": \"a.output\", \"dtype\": \"float32\", \"shape\": [-1, 4]}]", 0, &je);
  int seen = 0;
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *o = json_array_get(a, i);
    if (strcmp(json_string_value(json_object_get(o, "name")), "good")) continue;
    seen = 1;
    assert_string_equal(json_string_value(json_object_get(o, "state")), "READY");
    assert_true(json_is_null(json_object_get(o, "error")));
    assert_true(json_equal(json_object_get(o, "inputs"), want));
    assert_true(json_equal(json_object_get(o, "outputs"), want_out));
    json_t *st = json_object_get(o, "stages");
    assert_int_equal(json_array_size(st), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(st, 0), "pool")), "echo");
    assert_string_equal(json_string_value(json_object_get(json_array_get(st, 1), "operation")), "softmax");
  }
  assert_true(seen);
  json_decref(want);
  json_decref(want_out);
  json_decref(a);
  world_down(&w);
}

/* ---- the re-check when a pool changes ------------------------------------------ */

static void test_check_pool(void **state) {
  (void)state;
  world_t w;
  world_up(&w, parse_ok(GOOD "  - {name: bad, stages: [{name: s, pool: rotten}]}\n"
                             "  - {name: also_ints, stages: [{name: i, pool: ints, output_filter: [output]}]}\n"));
  sip_io_desc_t in = {.name = "input", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 4}};
  sip_io_desc_t out = {.name = "output", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 4}};
  sip__model_io_t io = {&in, &out, 1, 1};
  /* The same I/O fits, and so does a dim the old version left dynamic
   * becoming fixed. */
  assert_null(sip__pipelines_check_pool(w.ps, "echo", &io));
  in.dims[0] = 2;
  out.dims[0] = 2;
  assert_null(sip__pipelines_check_pool(w.ps, "echo", &io));
  in.dims[0] = out.dims[0] = -1;

  char *why;
  /* A fixed dim that changes, or a rank, does not fit. */
  in.dims[1] = 8;
  why = sip__pipelines_check_pool(w.ps, "echo", &io);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': input 'input' has shape [-1, 8] in the new "
                           "version; the stage feeds [-1, 4]");
  sip__free(why);
  in.dims[1] = 4;
  out.rank = 3;
  out.dims[2] = 1;
  why = sip__pipelines_check_pool(w.ps, "echo", &io);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': output 'output' has shape [-1, 4, 1] in the "
                           "new version; the pipeline reads [-1, 4]");
  sip__free(why);
  out.rank = 2;
  /* A pool no pipeline uses. */
  assert_null(sip__pipelines_check_pool(w.ps, "nobody", NULL));

  in.dtype = SIP_DTYPE_INT64;
  why = sip__pipelines_check_pool(w.ps, "echo", &io);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': input 'input' is int64 in the new version; "
                           "the stage feeds float32");
  sip__free(why);
  in.dtype = SIP_DTYPE_FLOAT32;

  out.dtype = SIP_DTYPE_FLOAT16;
  why = sip__pipelines_check_pool(w.ps, "echo", &io);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': output 'output' is float16 in the new "
                           "version; the pipeline reads float32");
  sip__free(why);
  out.dtype = SIP_DTYPE_FLOAT32;

  sip_io_desc_t out_y = out;
  out_y.name = "y";
  sip__model_io_t io_y = {&in, &out_y, 1, 1};
  why = sip__pipelines_check_pool(w.ps, "echo", &io_y);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': it gives output 'output', which the new "
                           "version does not make");
  sip__free(why);

  sip_io_desc_t two_in[2] = {in, {.name = "mask", .dtype = SIP_DTYPE_BOOL, .rank = 1, .dims = {-1}}};
  sip__model_io_t io2 = {two_in, &out, 2, 1};
  why = sip__pipelines_check_pool(w.ps, "echo", &io2);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': the new version also takes input 'mask', "
                           "which the stage does not feed");
  sip__free(why);

  sip_io_desc_t in_z = in;
  in_z.name = "z";
  sip__model_io_t io_z = {&in_z, &out, 1, 1};
  why = sip__pipelines_check_pool(w.ps, "echo", &io_z);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': it feeds input 'input', which the new "
                           "version does not take");
  sip__free(why);

  /* The pool going away. */
  why = sip__pipelines_check_pool(w.ps, "ints", NULL);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'also_ints' stage 'i' runs on it");
  sip__free(why);
  /* A FAILED pipeline is not checked. */
  assert_null(sip__pipelines_check_pool(w.ps, "rotten", NULL));
  world_down(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_typed_io),
      cmocka_unit_test(test_check_pool),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
