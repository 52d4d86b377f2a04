/* Unit tests for the ONNX Runtime backend's outputs
 * (src/backend/onnxruntime.c): an output never aliases an input, outputs
 * outlive their model, and outputs written into caller-given
 * destinations.
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

/* An output that aliases the request's own memory (Reshape may do it) must
 * not be handed back as a view of that borrowed memory. */
static void check_no_alias(const char *model, const char *out_name, int rank, const int64_t *dims,
                           int out_rank) {
  void *m = must_load(model);
  void *s = must_session(m);
  float x[4] = {1, 2, 3, 4};
  size_t nb = (size_t)(rank == 2 ? dims[0] * dims[1] : dims[0]) * sizeof(float);
  sip_tensor_t t = view("x", SIP_DTYPE_FLOAT32, rank, dims, x, nb);
  const sip_tensor_t *ins[1] = {&t};
  const char *names[1] = {out_name};
  sip_tensor_t *o = NULL;
  sip_error_t *err = B.execute(s, ins, 1, names, 1, &o);
  if (err) fail_msg("%s: %s", model, sip_error_message(err));
  assert_true((const char *)o->data < (const char *)x ||
              (const char *)o->data >= (const char *)x + nb);
  x[0] = 99;
  assert_true(((const float *)o->data)[0] == 1.0f);
  assert_int_equal(o->rank, out_rank);
  assert_int_equal(o->nbytes, nb);
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);
}

static void test_output_never_aliases_input(void **state) {
  (void)state;
  NEED_MODELS();
  const int64_t d22[2] = {2, 2}, d2[1] = {2};
  check_no_alias("reshape.onnx", "y", 2, d22, 1);
  /* A graph output that is the graph input itself: ORT returns the feed. */
  check_no_alias("passthru.onnx", "x", 1, d2, 1);
}

/* execute_into: an output whose shape is known before running (fixed
 * dims, or a symbolic dim named like an input's) and whose bytes fit its
 * destination is written there, the tensor viewing it with a reference
 * to the destination's owner; every other output comes back as execute
 * gives it, with the same values. */
static void test_outputs_into_destinations(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.onnx");
  void *s = must_session(m);
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60};
  const int64_t d23[2] = {2, 3};
  sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 2, d23, a, sizeof a);
  sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 2, d23, b, sizeof b);
  const sip_tensor_t *ins[2] = {&ta, &tb};
  const char *names[1] = {"c"};
  sip_buf_t *owner = sip_buf_new(64);
  char *mem = sip_buf_data(owner);
  struct {
    void *data;
    size_t size;
    int direct;
  } cases[] = {
      {mem, 24, 1},      /* fits exactly */
      {mem, 64, 1},      /* room to spare */
      {mem, 20, 0},      /* too small: elsewhere */
      {mem + 1, 60, 0},  /* not aligned for float32: elsewhere */
      {NULL, 0, 0},      /* no destination */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    memset(mem, 0, 64);
    sip_out_dest_t d = {.data = cases[i].data, .size = cases[i].size, .owner = owner};
    sip_tensor_t *o = NULL;
    sip_error_t *err = B.execute_into(s, ins, 2, names, 1, &d, &o);
    if (err) fail_msg("case %zu: %s", i, sip_error_message(err));
    assert_int_equal(o->data == (const void *)cases[i].data, cases[i].direct);
    assert_int_equal(o->nbytes, sizeof a);
    assert_int_equal(o->rank, 2);
    for (int k = 0; k < 6; k++) assert_true(((const float *)o->data)[k] == a[k] + b[k]);
    if (cases[i].direct) assert_ptr_equal(o->owner, owner);
    sip_tensor_free(o);
  }
  /* The tensor keeps the destination alive past its owner's last holder. */
  sip_out_dest_t d = {.data = mem, .size = 24, .owner = owner};
  sip_tensor_t *o = NULL;
  assert_null(B.execute_into(s, ins, 2, names, 1, &d, &o));
  sip_buf_unref(owner);
  assert_true(((const float *)o->data)[5] == 66.0f);
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);

  /* An identity written over its own input: the bytes stay right. */
  m = must_load("ident.onnx");
  s = must_session(m);
  float x[4] = {1.5f, -2, 3, 4};
  const int64_t d4[1] = {4};
  sip_tensor_t tx = view("x", SIP_DTYPE_FLOAT32, 1, d4, x, sizeof x);
  const sip_tensor_t *one[1] = {&tx};
  const char *yn[1] = {"y"};
  d = (sip_out_dest_t){.data = x, .size = sizeof x};
  assert_null(B.execute_into(s, one, 1, yn, 1, &d, &o));
  assert_ptr_equal(o->data, x);
  assert_true(x[0] == 1.5f && x[1] == -2 && x[3] == 4);
  assert_null(o->owner);
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);

  /* A model whose output does not follow its declared dims (c is [2N, 3],
   * declared [N, 3]): the guess fails, the run is repeated, the answer is
   * right and elsewhere. */
  m = must_load("twice.onnx");
  s = must_session(m);
  float dst[6];
  const char *cn[1] = {"c"};
  const sip_tensor_t *ia[1] = {&ta};
  d = (sip_out_dest_t){.data = dst, .size = sizeof dst};
  sip_error_t *err = B.execute_into(s, ia, 1, cn, 1, &d, &o);
  if (err) fail_msg("twice: %s", sip_error_message(err));
  assert_true(o->data != (const void *)dst);
  assert_int_equal(o->dims[0], 4);
  for (int k = 0; k < 12; k++) assert_true(((const float *)o->data)[k] == a[k % 6]);
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);

  /* Strings never go into a destination. */
  m = must_load("str.onnx");
  s = must_session(m);
  unsigned char packed[16];
  const char *sv[1] = {"hi"};
  const size_t sl[1] = {2};
  size_t pn = pack(packed, sv, sl, 1);
  const int64_t d1[1] = {1};
  sip_tensor_t ts = view("s", SIP_DTYPE_STRING, 1, d1, packed, pn);
  const sip_tensor_t *is[1] = {&ts};
  const char *tn[1] = {"t"};
  unsigned char sd[64];
  d = (sip_out_dest_t){.data = sd, .size = sizeof sd};
  assert_null(B.execute_into(s, is, 1, tn, 1, &d, &o));
  assert_true(o->data != (const void *)sd);
  assert_int_equal(o->nbytes, pn);
  sip_tensor_free(o);
  B.session_free(s);
  B.model_free(m);
}

/* Outputs may outlive their session and model (a response still being
 * sent when the pool is unloaded); ASan checks the memory stays valid. */
static void test_outputs_outlive_model(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("const.onnx");
  void *s = must_session(m);
  const int64_t dims[1] = {1};
  float x = 0;
  sip_tensor_t t = view("x", SIP_DTYPE_FLOAT32, 1, dims, &x, sizeof x);
  const sip_tensor_t *ins[1] = {&t};
  const char *names[1] = {"y"};
  sip_tensor_t *o = NULL;
  assert_null(B.execute(s, ins, 1, names, 1, &o));
  B.session_free(s);
  B.model_free(m);
  const float *y = o->data;
  assert_true(y[0] == 1.5f && y[1] == 2.5f && y[2] == 3.5f);
  sip_tensor_free(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_output_never_aliases_input),
      cmocka_unit_test(test_outputs_outlive_model),
      cmocka_unit_test(test_outputs_into_destinations),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
