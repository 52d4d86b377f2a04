/* Unit tests for the ONNX Runtime backend (src/backend/onnxruntime.c):
 * describe_io, and execution with two sessions of one model, empty and
 * scalar tensors, strings and every dtype.
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

static void test_describe(void **state) {
  (void)state;
  NEED_MODELS();
  const sip_io_desc_t *in, *out;
  size_t nin, nout;

  void *m = must_load("add.onnx");
  B.describe(m, &in, &nin, &out, &nout);
  assert_int_equal(nin, 2);
  assert_int_equal(nout, 1);
  const sip_io_desc_t *a = find_desc(in, nin, "a");
  assert_int_equal(a->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(a->rank, 2);
  assert_int_equal(a->dims[0], -1); /* symbolic "N" */
  assert_int_equal(a->dims[1], 3);
  assert_string_equal(out[0].name, "c");
  assert_int_equal(out[0].rank, 2);
  B.model_free(m);

  m = must_load("str.onnx");
  B.describe(m, &in, &nin, &out, &nout);
  assert_int_equal(in[0].dtype, SIP_DTYPE_STRING);
  assert_int_equal(in[0].rank, 1);
  assert_int_equal(in[0].dims[0], -1); /* unnamed dynamic dim */
  B.model_free(m);

  m = must_load("scalar.onnx");
  B.describe(m, &in, &nin, &out, &nout);
  assert_int_equal(in[0].dtype, SIP_DTYPE_INT64);
  assert_int_equal(in[0].rank, 0);
  B.model_free(m);

  m = must_load("noshape.onnx");
  B.describe(m, &in, &nin, &out, &nout);
  assert_int_equal(in[0].rank, -1);
  B.model_free(m);

  m = must_load("types.onnx");
  B.describe(m, &in, &nin, &out, &nout);
  assert_int_equal(nin, 12);
  assert_int_equal(find_desc(in, nin, "x_bool")->dtype, SIP_DTYPE_BOOL);
  assert_int_equal(find_desc(in, nin, "x_float16")->dtype, SIP_DTYPE_FLOAT16);
  assert_int_equal(find_desc(out, nout, "y_uint64")->dtype, SIP_DTYPE_UINT64);
  assert_int_equal(find_desc(out, nout, "y_float64")->dtype, SIP_DTYPE_FLOAT64);
  B.model_free(m);
}

static void test_add_two_sessions(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.onnx");
  void *s1 = must_session(m), *s2 = must_session(m);
  const int64_t dims[2] = {2, 3};
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60};
  sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, a, sizeof a);
  sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 2, dims, b, sizeof b);
  /* Inputs in reverse order: they are matched by name. */
  const sip_tensor_t *ins[2] = {&tb, &ta};
  const char *names[1] = {"c"};

  sip_tensor_t *o1 = NULL, *o2 = NULL;
  assert_null(B.execute(s1, ins, 2, names, 1, &o1));
  a[0] = 100; /* second session, different data */
  assert_null(B.execute(s2, ins, 2, names, 1, &o2));

  assert_string_equal(o1->name, "c");
  assert_int_equal(o1->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(o1->rank, 2);
  assert_int_equal(o1->dims[0], 2);
  assert_int_equal(o1->dims[1], 3);
  assert_int_equal(o1->nbytes, sizeof a);
  assert_non_null(o1->owner);
  const float *c1 = o1->data, *c2 = o2->data;
  for (int i = 0; i < 6; i++) assert_true(c1[i] == (i ? a[i] : 1) + b[i]);
  assert_true(c2[0] == 110.0f);
  sip_tensor_free(o1);
  sip_tensor_free(o2);
  B.session_free(s1);
  B.session_free(s2);
  B.model_free(m);
}

static void test_empty_and_scalar(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.onnx");
  void *s = must_session(m);
  const int64_t dims[2] = {0, 3};
  /* NULL data: an empty tensor from the wire may have no payload at all. */
  sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, NULL, 0);
  sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 2, dims, NULL, 0);
  const sip_tensor_t *ins[2] = {&ta, &tb};
  const char *names[1] = {"c"};
  sip_tensor_t *o = NULL;
  sip_error_t *err = B.execute(s, ins, 2, names, 1, &o);
  if (err) fail_msg("%s", sip_error_message(err));
  assert_int_equal(o->rank, 2);
  assert_int_equal(o->dims[0], 0);
  assert_int_equal(o->dims[1], 3);
  assert_int_equal(o->nbytes, 0);
  assert_non_null(o->data);
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);

  m = must_load("scalar.onnx");
  s = must_session(m);
  int64_t v = -1234567890123LL;
  sip_tensor_t tx = view("x", SIP_DTYPE_INT64, 0, NULL, &v, sizeof v);
  const sip_tensor_t *in1[1] = {&tx};
  const char *yn[1] = {"y"};
  assert_null(B.execute(s, in1, 1, yn, 1, &o));
  assert_int_equal(o->rank, 0);
  assert_int_equal(o->dtype, SIP_DTYPE_INT64);
  assert_int_equal(o->nbytes, 8);
  assert_true(*(const int64_t *)o->data == v);
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);
}

static void test_strings(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("str.onnx");
  void *s = must_session(m);
  const char *strs[3] = {"hello", "", "wo\0rld"};
  const size_t lens[3] = {5, 0, 6};
  unsigned char packed[64];
  size_t n = pack(packed, strs, lens, 3);
  const int64_t dims[1] = {3};
  sip_tensor_t t = view("s", SIP_DTYPE_STRING, 1, dims, packed, n);
  const sip_tensor_t *ins[1] = {&t};
  const char *names[1] = {"t"};
  sip_tensor_t *o = NULL;
  assert_null(B.execute(s, ins, 1, names, 1, &o));
  assert_int_equal(o->dtype, SIP_DTYPE_STRING);
  assert_int_equal(o->rank, 1);
  assert_int_equal(o->dims[0], 3);
  assert_int_equal(o->nbytes, n);
  assert_memory_equal(o->data, packed, n); /* embedded NUL survives */
  sip_tensor_free(o);

  /* Empty string tensor. */
  const int64_t zero[1] = {0};
  t = view("s", SIP_DTYPE_STRING, 1, zero, NULL, 0);
  assert_null(B.execute(s, ins, 1, names, 1, &o));
  assert_int_equal(o->dims[0], 0);
  assert_int_equal(o->nbytes, 0);
  sip_tensor_free(o);

  /* Malformed: a length running past the end, and trailing bytes. */
  t = view("s", SIP_DTYPE_STRING, 1, dims, packed, n - 1);
  o = (sip_tensor_t *)1;
  expect_code(B.execute(s, ins, 1, names, 1, &o), SIP_INVALID_ARGUMENT, "'s'");
  assert_null(o);
  const int64_t two[1] = {2};
  t = view("s", SIP_DTYPE_STRING, 1, two, packed, n);
  expect_code(B.execute(s, ins, 1, names, 1, &o), SIP_INVALID_ARGUMENT, "packed");
  B.session_free(s);
  B.model_free(m);
}

static void test_all_types(void **state) {
  (void)state;
  NEED_MODELS();
  static const struct {
    const char *name;
    sip_dtype_t dt;
    size_t size;
  } ts[] = {{"bool", SIP_DTYPE_BOOL, 1},       {"int8", SIP_DTYPE_INT8, 1},
            {"int16", SIP_DTYPE_INT16, 2},     {"int32", SIP_DTYPE_INT32, 4},
            {"int64", SIP_DTYPE_INT64, 8},     {"uint8", SIP_DTYPE_UINT8, 1},
            {"uint16", SIP_DTYPE_UINT16, 2},   {"uint32", SIP_DTYPE_UINT32, 4},
            {"uint64", SIP_DTYPE_UINT64, 8},   {"float16", SIP_DTYPE_FLOAT16, 2},
            {"float32", SIP_DTYPE_FLOAT32, 4}, {"float64", SIP_DTYPE_FLOAT64, 8}};
  enum { NT = sizeof ts / sizeof ts[0] };
  void *m = must_load("types.onnx");
  void *s = must_session(m);
  const int64_t dims[1] = {3};
  unsigned char data[NT][24];
  char xn[NT][16], yn[NT][16];
  sip_tensor_t tin[NT];
  const sip_tensor_t *ins[NT];
  const char *names[NT];
  for (size_t i = 0; i < NT; i++) {
    for (size_t k = 0; k < sizeof data[i]; k++) data[i][k] = (unsigned char)(k * 7 + i);
    /* bool must hold 0/1; float16 bytes chosen as finite halves. */
    if (ts[i].dt == SIP_DTYPE_BOOL) data[i][0] = 1, data[i][1] = 0, data[i][2] = 1;
    if (ts[i].dt == SIP_DTYPE_FLOAT16)
      for (int k = 0; k < 3; k++)
        data[i][2 * k] = 0, data[i][2 * k + 1] = (unsigned char)(0x3c + k);
    snprintf(xn[i], sizeof xn[i], "x_%s", ts[i].name);
    snprintf(yn[i], sizeof yn[i], "y_%s", ts[i].name);
    tin[i] = view(xn[i], ts[i].dt, 1, dims, data[i], 3 * ts[i].size);
    ins[i] = &tin[i];
    names[NT - 1 - i] = yn[i]; /* outputs requested in another order */
  }
  sip_tensor_t *outs[NT];
  sip_error_t *err = B.execute(s, ins, NT, names, NT, outs);
  if (err) fail_msg("%s", sip_error_message(err));
  for (size_t i = 0; i < NT; i++) {
    sip_tensor_t *o = outs[NT - 1 - i];
    assert_string_equal(o->name, yn[i]);
    assert_int_equal(o->dtype, ts[i].dt);
    assert_int_equal(o->nbytes, 3 * ts[i].size);
    assert_memory_equal(o->data, data[i], 3 * ts[i].size);
    sip_tensor_free(o);
  }
  B.session_free(s);
  B.model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_describe),
      cmocka_unit_test(test_add_two_sessions),
      cmocka_unit_test(test_empty_and_scalar),
      cmocka_unit_test(test_strings),
      cmocka_unit_test(test_all_types),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
