/* Unit tests for the ONNX Runtime backend's refusals
 * (src/backend/onnxruntime.c): models that cannot load, load options (bad
 * ones refused, good ones used), bad inputs at execution, and every
 * allocation sip makes failing in turn.
 *
 * The group setup makes the test models with python3-onnx (ort_helpers.h);
 * without /usr/bin/python3 + onnx every test is skipped. */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ort_helpers.h"

static void test_load_errors(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = (void *)1;
  expect_code(load("missing.onnx", NULL, 0, &m), SIP_NOT_FOUND, "missing.onnx");
  assert_null(m);
  expect_code(load("corrupt.onnx", NULL, 0, &m), SIP_FAILED_PRECONDITION, "corrupt.onnx");
  assert_null(m);
  expect_code(B.load(backend, dir, NULL, 0, &m), SIP_FAILED_PRECONDITION, "directory");
  expect_code(B.load(backend, NULL, NULL, 0, &m), SIP_INVALID_ARGUMENT, NULL);
  /* A sequence input cannot be carried by sip: the error names it. */
  expect_code(load("seq.onnx", NULL, 0, &m), SIP_UNIMPLEMENTED, "'q'");
  assert_null(m);
}

static void test_options(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = NULL;
  sip_kv_t o1[] = {{"no_such_option", "1"}};
  expect_code(load("add.onnx", o1, 1, &m), SIP_INVALID_ARGUMENT, "graph_optimization_level");
  sip_kv_t o2[] = {{"execution_provider", "cuda"}};
  expect_code(load("add.onnx", o2, 1, &m), SIP_UNIMPLEMENTED, "cpu");
  sip_kv_t o3[] = {{"intra_op_threads", "4"}};
  expect_code(load("add.onnx", o3, 1, &m), SIP_INVALID_ARGUMENT, "server.intra_op_threads");
  sip_kv_t o4[] = {{"graph_optimization_level", "max"}};
  expect_code(load("add.onnx", o4, 1, &m), SIP_INVALID_ARGUMENT, "extended");
  sip_kv_t o5[] = {{"enable_mem_pattern", "maybe"}};
  expect_code(load("add.onnx", o5, 1, &m), SIP_INVALID_ARGUMENT, "true or false");
  assert_null(m);

  sip_kv_t ok[] = {{"graph_optimization_level", "disable"},
                   {"execution_provider", "cpu"},
                   {"enable_cpu_mem_arena", "false"},
                   {"enable_mem_pattern", "false"}};
  sip_error_t *err = load("add.onnx", ok, 4, &m);
  if (err) fail_msg("%s", sip_error_message(err));
  void *s = must_session(m);
  const int64_t dims[2] = {1, 3};
  float a[3] = {1, 2, 3};
  sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, a, sizeof a);
  sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 2, dims, a, sizeof a);
  const sip_tensor_t *ins[2] = {&ta, &tb};
  const char *names[1] = {"c"};
  sip_tensor_t *o = NULL;
  assert_null(B.execute(s, ins, 2, names, 1, &o));
  assert_true(((const float *)o->data)[2] == 6.0f);
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);
}

static void test_run_errors(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.onnx");
  void *s = must_session(m);
  const char *names[1] = {"c"};
  sip_tensor_t *o = NULL;

  /* Wrong dtype: ORT rejects it as INVALID_ARGUMENT. */
  const int64_t dims[2] = {1, 3};
  int32_t ia[3] = {1, 2, 3};
  float fa[3] = {1, 2, 3};
  sip_tensor_t ta = view("a", SIP_DTYPE_INT32, 2, dims, ia, sizeof ia);
  sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 2, dims, fa, sizeof fa);
  const sip_tensor_t *ins[2] = {&ta, &tb};
  expect_code(B.execute(s, ins, 2, names, 1, &o), SIP_INVALID_ARGUMENT, NULL);
  assert_null(o);

  /* Wrong static dim. */
  const int64_t bad[2] = {3, 1};
  ta = view("a", SIP_DTYPE_FLOAT32, 2, bad, fa, sizeof fa);
  tb = view("b", SIP_DTYPE_FLOAT32, 2, bad, fa, sizeof fa);
  expect_code(B.execute(s, ins, 2, names, 1, &o), SIP_INVALID_ARGUMENT, NULL);

  /* Byte count not matching the shape. */
  ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, fa, 8);
  expect_code(B.execute(s, ins, 2, names, 1, &o), SIP_INVALID_ARGUMENT, "'a'");

  /* Unknown output name. */
  ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, fa, sizeof fa);
  tb = view("b", SIP_DTYPE_FLOAT32, 2, dims, fa, sizeof fa);
  const char *nope[1] = {"nope"};
  expect_code(B.execute(s, ins, 2, nope, 1, &o), SIP_INVALID_ARGUMENT, NULL);
  assert_null(o);

  /* The session still works afterwards. */
  assert_null(B.execute(s, ins, 2, names, 1, &o));
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);
}

/* The memory quota (SIP_BACKEND_MEMORY_LIMIT): a run whose blocks would
 * pass the cap fails with RESOURCE_EXHAUSTED naming it and the model runs
 * on; outputs still held count, released ones are given back;
 * memory_limit moves the cap. */
static void test_memory_quota(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = NULL;
  const sip_kv_t bad[1] = {{SIP_BACKEND_OPTION_MAX_MEMORY_MB, "lots"}};
  expect_code(load("twice.onnx", bad, 1, &m), SIP_INVALID_ARGUMENT, "0..1048576");
  const sip_kv_t cap[1] = {{SIP_BACKEND_OPTION_MAX_MEMORY_MB, "4"}};
  assert_null(load("twice.onnx", cap, 1, &m));
  void *s = must_session(m);
  /* 100000 rows of 3 floats: a 1.2 MB input, a 2.4 MB output */
  enum { ROWS = 100000 };
  float *in = sip__calloc(ROWS * 3, sizeof *in);
  assert_non_null(in);
  for (size_t i = 0; i < ROWS * 3; i++) in[i] = (float)i;
  const int64_t dims[2] = {ROWS, 3};
  sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, in, ROWS * 3 * sizeof *in);
  const sip_tensor_t *ins[1] = {&ta};
  const char *names[1] = {"c"};
  sip_tensor_t *o1 = NULL, *o2 = NULL;
  assert_null(B.execute(s, ins, 1, names, 1, &o1));
  const float *c = o1->data;
  assert_true(c[0] == 0.0f && c[ROWS * 3 - 1] == (float)(ROWS * 3 - 1) &&
              c[ROWS * 3] == 0.0f);
  /* the first output still held: a second one would pass 4 MiB */
  expect_code(B.execute(s, ins, 1, names, 1, &o2), SIP_RESOURCE_EXHAUSTED,
              "resource_quota.max_memory_mb is 4 MiB");
  assert_null(o2);
  sip_tensor_free(o1);
  assert_null(B.execute(s, ins, 1, names, 1, &o2));
  sip_tensor_free(o2);
  B.memory_limit(m, 2);
  expect_code(B.execute(s, ins, 1, names, 1, &o2), SIP_RESOURCE_EXHAUSTED, "is 2 MiB");
  B.memory_limit(m, 0); /* none */
  assert_null(B.execute(s, ins, 1, names, 1, &o1));
  assert_null(B.execute(s, ins, 1, names, 1, &o2));
  sip_tensor_free(o1);
  sip_tensor_free(o2);
  sip__free(in);
  B.session_free(s);
  B.model_free(m);
}

/* Every allocation sip makes may fail: each failure point gives a clean
 * error and leaks nothing (LSan in CI). ORT's own allocations are not
 * counted. */
static void test_allocation_failures(void **state) {
  (void)state;
  NEED_MODELS();
  for (long n = 0;; n++) {
    void *m = NULL;
    sip__alloc_fail_after(n);
    sip_error_t *err = load("str.onnx", NULL, 0, &m);
    void *s = NULL;
    if (!err) err = B.session_new(m, &s);
    sip_tensor_t *o[1] = {NULL};
    if (!err) {
      const char *strs[2] = {"ab", "c"};
      const size_t lens[2] = {2, 1};
      unsigned char packed[16];
      size_t nb = pack(packed, strs, lens, 2);
      const int64_t dims[1] = {2};
      sip_tensor_t t = view("s", SIP_DTYPE_STRING, 1, dims, packed, nb);
      const sip_tensor_t *ins[1] = {&t};
      const char *names[1] = {"t"};
      err = B.execute(s, ins, 1, names, 1, o);
    }
    sip__alloc_fail_after(-1);
    B.session_free(s);
    B.model_free(m);
    if (!err) {
      assert_non_null(o[0]);
      sip_tensor_free(o[0]);
      break;
    }
    assert_null(o[0]);
    sip_error_free(err);
    assert_true(n < 1000);
  }
  /* Same for the zero-copy numeric path. */
  void *m = must_load("add.onnx");
  void *s = must_session(m);
  for (long n = 0;; n++) {
    const int64_t dims[2] = {1, 3};
    float a[3] = {1, 2, 3};
    sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, a, sizeof a);
    sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 2, dims, a, sizeof a);
    const sip_tensor_t *ins[2] = {&ta, &tb};
    const char *names[1] = {"c"};
    sip_tensor_t *o[1] = {NULL};
    sip__alloc_fail_after(n);
    sip_error_t *err = B.execute(s, ins, 2, names, 1, o);
    sip__alloc_fail_after(-1);
    if (!err) {
      sip_tensor_free(o[0]);
      break;
    }
    assert_null(o[0]);
    sip_error_free(err);
    assert_true(n < 1000);
  }
  B.session_free(s);
  B.model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_errors),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_run_errors),
      cmocka_unit_test(test_memory_quota),
      cmocka_unit_test(test_allocation_failures),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
