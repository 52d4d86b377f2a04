/* Unit tests for the TorchScript backend (src/backend/torchscript.cc),
 * through its C vtable as the engine calls it.
 *
 * The group setup writes a Python script that makes TorchScript models
 * with python3-torch into a temporary directory. A build without libtorch
 * has no such backend: then the tests check that the backend table says so.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backends.h"
#include "core/core.h"
#include "inproc.h"
#include "sip/backend.h"

#ifdef SIP_HAVE_TORCH

#define B sip__backend_torchscript

static char dir[64];
static int have_models;
static void *backend;

static const char gen_py[] =
    "import sys, torch\n"
    "from typing import Dict, List, Tuple\n"
    "d = sys.argv[1]\n"
    "class Add(torch.nn.Module):\n"
    "    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
    "        return a + b\n"
    "class Ident(torch.nn.Module):\n"
    "    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:\n"
    "        return x, x[1:]\n"
    "class Weight(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.w = torch.nn.Parameter(torch.tensor([1.5, 2.5, 3.5]))\n"
    "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
    "        return self.w * x\n"
    "class Lst(torch.nn.Module):\n"
    "    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:\n"
    "        return [x * 2, x.t()]\n"
    "class Dflt(torch.nn.Module):\n"
    "    def forward(self, x: torch.Tensor, k: int = 3) -> torch.Tensor:\n"
    "        return x * k\n"
    "for n, c in (('add', Add), ('ident', Ident), ('weight', Weight), ('lst', Lst),\n"
    "             ('dflt', Dflt)):\n"
    "    torch.jit.save(torch.jit.script(c().eval()), d + '/' + n + '.pt')\n"
    "open(d + '/junk.pt', 'wb').write(b'PK\\x03\\x04 but not a TorchScript archive')\n"
    "open(d + '/text.pt', 'wb').write(b'not a zip at all')\n";

/* ---- helpers ----------------------------------------------------------- */

static sip_error_t *load(const char *name, const char *inputs, const char *outputs,
                         void **model) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  sip_kv_t kv[2] = {{"inputs", inputs}, {"outputs", outputs}};
  size_t n = (inputs ? 1 : 0) + (outputs ? 1 : 0);
  if (!inputs) kv[0] = kv[1];
  return B.load(backend, p, kv, n, model);
}

static void *must_load(const char *name, const char *inputs, const char *outputs) {
  void *m = NULL;
  sip_error_t *err = load(name, inputs, outputs, &m);
  if (err) fail_msg("load %s: %s", name, sip_error_message(err));
  return m;
}

static void *must_session(void *model) {
  void *s = NULL;
  sip_error_t *err = B.session_new(model, &s);
  if (err) fail_msg("session_new: %s", sip_error_message(err));
  return s;
}

static sip_tensor_t view(const char *name, sip_dtype_t dt, int rank, const int64_t *dims,
                         const void *data, size_t nbytes) {
  sip_tensor_t t;
  memset(&t, 0, sizeof t);
  t.name = (char *)name;
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  t.data = data;
  t.nbytes = nbytes;
  return t;
}

static void expect_code(sip_error_t *err, sip_code_t code, const char *needle) {
  if (!err) fail_msg("expected %s, got success", sip_code_name(code));
  if (sip_error_code(err) != code || (needle && !strstr(sip_error_message(err), needle)))
    fail_msg("expected %s mentioning '%s', got %s: %s", sip_code_name(code), needle ? needle : "",
             sip_code_name(sip_error_code(err)), sip_error_message(err));
  sip_error_free(err);
}

static int group_setup(void **state) {
  (void)state;
  sip_engine_settings_t settings = {.intra_op_threads = 1};
  sip_error_t *err = B.init(&settings, &backend);
  if (err) {
    fprintf(stderr, "init: %s\n", sip_error_message(err));
    sip_error_free(err);
    return -1;
  }
  if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) return 0;
  int made = gen_models(dir, "sip_torch_test", gen_py);
  if (made <= 0) return made;
  have_models = 1;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  B.shutdown(backend);
  if (dir[0]) rm_tree(dir);
  return 0;
}

#define NEED_MODELS()                                                                    \
  do {                                                                                   \
    if (!have_models)                                                                    \
      SKIP_UNLESS_CI("no test models (python3-torch missing or their generation failed)"); \
  } while (0)

/* ---- tests ------------------------------------------------------------- */

static void test_table_and_probe(void **state) {
  (void)state;
  NEED_MODELS();
  assert_ptr_equal(sip__backend_find("torchscript"), &B);
  assert_string_equal(B.platform, "pytorch_libtorch");
  assert_string_equal(B.default_files[0], "model.pt");
  char p[256];
  snprintf(p, sizeof p, "%s/add.pt", dir);
  assert_int_equal(B.probe(p), 1);
  snprintf(p, sizeof p, "%s/text.pt", dir); /* .pt but not a zip archive */
  assert_int_equal(B.probe(p), 0);
  snprintf(p, sizeof p, "%s/gen.py", dir);
  assert_int_equal(B.probe(p), 0);
  snprintf(p, sizeof p, "%s/none.pt", dir);
  assert_int_equal(B.probe(p), 0);
}

static void test_describe_from_declarations(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.pt", "b:int64[-1,3]; a:int64[-1,3]", "c:int64[-1,3]");
  const sip_io_desc_t *in, *out;
  size_t nin, nout;
  B.describe(m, &in, &nin, &out, &nout);
  assert_int_equal(nin, 2);
  assert_int_equal(nout, 1);
  assert_string_equal(in[0].name, "b");
  assert_int_equal(in[0].dtype, SIP_DTYPE_INT64);
  assert_int_equal(in[0].rank, 2);
  assert_int_equal(in[0].dims[0], -1);
  assert_int_equal(in[0].dims[1], 3);
  assert_string_equal(out[0].name, "c");

  /* Inputs go to forward()'s parameters by name, whatever their order. */
  void *s = must_session(m);
  int64_t a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60}, dims[2] = {2, 3};
  sip_tensor_t ta = view("a", SIP_DTYPE_INT64, 2, dims, a, sizeof a);
  sip_tensor_t tb = view("b", SIP_DTYPE_INT64, 2, dims, b, sizeof b);
  const sip_tensor_t *ins[2] = {&ta, &tb};
  const char *names[1] = {"c"};
  sip_tensor_t *o[1] = {NULL};
  sip_error_t *err = B.execute(s, ins, 2, names, 1, o);
  if (err) fail_msg("execute: %s", sip_error_message(err));
  assert_string_equal(o[0]->name, "c");
  assert_int_equal(o[0]->rank, 2);
  assert_int_equal(o[0]->nbytes, sizeof a);
  const int64_t *c = o[0]->data;
  for (int i = 0; i < 6; i++) assert_int_equal(c[i], a[i] + b[i]);
  /* The output outlives the session and the model (it holds its tensor). */
  B.session_free(s);
  B.model_free(m);
  for (int i = 0; i < 6; i++) assert_int_equal(c[i], a[i] + b[i]);
  sip_tensor_free(o[0]);
}

static void test_outputs_sharing_inputs_are_copied(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("ident.pt", "x:float32[-1]", "same:float32[-1]; tail:float32[-1]");
  void *s = must_session(m);
  float x[3] = {1, 2, 3};
  int64_t dims[1] = {3};
  sip_tensor_t tx = view("x", SIP_DTYPE_FLOAT32, 1, dims, x, sizeof x);
  const sip_tensor_t *ins[1] = {&tx};
  const char *names[2] = {"tail", "same"};
  sip_tensor_t *o[2] = {NULL, NULL};
  sip_error_t *err = B.execute(s, ins, 1, names, 2, o);
  if (err) fail_msg("execute: %s", sip_error_message(err));
  assert_string_equal(o[0]->name, "tail");
  assert_int_equal(o[0]->dims[0], 2);
  assert_string_equal(o[1]->name, "same");
  /* Neither points into the request's memory. */
  for (int i = 0; i < 2; i++) {
    uintptr_t p = (uintptr_t)o[i]->data;
    assert_true(p + o[i]->nbytes <= (uintptr_t)x || p >= (uintptr_t)(x + 3));
  }
  x[1] = 99; /* the request's memory changes: the outputs do not */
  assert_true(((const float *)o[0]->data)[0] == 2.0f);
  assert_true(((const float *)o[1]->data)[1] == 2.0f);
  sip_tensor_free(o[0]);
  sip_tensor_free(o[1]);
  B.session_free(s);
  B.model_free(m);
}

static void test_weights_list_and_defaults(void **state) {
  (void)state;
  NEED_MODELS();
  /* An output computed from the module's weights, a list result, and a
   * parameter left to its default. */
  void *m = must_load("weight.pt", "x:float32[3]", "y:float32[3]");
  void *s = must_session(m);
  float x[3] = {2, 2, 2};
  int64_t d1[1] = {3};
  sip_tensor_t tx = view("x", SIP_DTYPE_FLOAT32, 1, d1, x, sizeof x);
  const sip_tensor_t *ins[1] = {&tx};
  const char *y[1] = {"y"};
  sip_tensor_t *o[2] = {NULL, NULL};
  sip_error_t *err = B.execute(s, ins, 1, y, 1, o);
  if (err) fail_msg("execute: %s", sip_error_message(err));
  const float *v = o[0]->data;
  assert_true(v[0] == 3.0f && v[1] == 5.0f && v[2] == 7.0f);
  sip_tensor_free(o[0]);
  B.session_free(s);
  B.model_free(m);

  m = must_load("lst.pt", "x:float32[-1,-1]", "twice:float32[-1,-1]; t:float32[-1,-1]");
  s = must_session(m);
  float a[6] = {1, 2, 3, 4, 5, 6};
  int64_t d2[2] = {2, 3};
  sip_tensor_t ta = view("x", SIP_DTYPE_FLOAT32, 2, d2, a, sizeof a);
  ins[0] = &ta;
  const char *both[2] = {"t", "twice"};
  err = B.execute(s, ins, 1, both, 2, o);
  if (err) fail_msg("execute: %s", sip_error_message(err));
  assert_int_equal(o[0]->dims[0], 3); /* the transpose, made contiguous */
  assert_int_equal(o[0]->dims[1], 2);
  const float *t = o[0]->data;
  assert_true(t[0] == 1 && t[1] == 4 && t[2] == 2 && t[3] == 5 && t[4] == 3 && t[5] == 6);
  assert_true(((const float *)o[1]->data)[5] == 12.0f);
  sip_tensor_free(o[0]);
  sip_tensor_free(o[1]);
  B.session_free(s);
  B.model_free(m);

  m = must_load("dflt.pt", "x:int32[-1]", "y:int32[-1]");
  s = must_session(m);
  int32_t i3[2] = {5, -1};
  int64_t d3[1] = {2};
  sip_tensor_t ti = view("x", SIP_DTYPE_INT32, 1, d3, i3, sizeof i3);
  ins[0] = &ti;
  err = B.execute(s, ins, 1, y, 1, o);
  if (err) fail_msg("execute: %s", sip_error_message(err));
  assert_int_equal(((const int32_t *)o[0]->data)[0], 15);
  assert_int_equal(((const int32_t *)o[0]->data)[1], -3);
  sip_tensor_free(o[0]);
  /* the model goes first; the session keeps it until it goes too */
  B.model_free(m);
  err = B.execute(s, ins, 1, y, 1, o);
  if (err) fail_msg("execute after model_free: %s", sip_error_message(err));
  sip_tensor_free(o[0]);
  B.session_free(s);
}

static void test_load_errors(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = NULL;
  expect_code(load("add.pt", NULL, "c:float32", &m), SIP_INVALID_ARGUMENT,
              "backend_options must declare inputs");
  expect_code(load("add.pt", "a:float32; b:float32", NULL, &m), SIP_INVALID_ARGUMENT,
              "backend_options must declare outputs");
  expect_code(load("add.pt", "a:float32; b:string", "c:float32", &m), SIP_INVALID_ARGUMENT,
              "dtype string has no libtorch equivalent");
  expect_code(load("add.pt", "a:float32[-2]; b:float32", "c:float32", &m), SIP_INVALID_ARGUMENT,
              "has a dim that is not -1 or >= 0");
  expect_code(load("add.pt", "a:float32; a:float32", "c:float32", &m), SIP_INVALID_ARGUMENT,
              "repeats a name");
  expect_code(load("add.pt", "a:float32", "c:float32", &m), SIP_FAILED_PRECONDITION,
              "forward() parameter 'b' has no default and is not declared");
  expect_code(load("dflt.pt", "x:float32; k:int64", "y:float32", &m), SIP_FAILED_PRECONDITION,
              "forward() parameter 'k' has type int; sip passes only tensors");
  expect_code(load("ident.pt", "x:float32", "y:float32", &m), SIP_FAILED_PRECONDITION,
              "forward() returns a tuple of 2; backend option outputs declares 1");
  expect_code(load("none.pt", "x:float32", "y:float32", &m), SIP_NOT_FOUND, "cannot open model");
  expect_code(load("junk.pt", "x:float32", "y:float32", &m), SIP_FAILED_PRECONDITION,
              "cannot load model");
  sip_kv_t bad[3] = {{"inputs", "x:float32"}, {"outputs", "y:float32"}, {"threads", "2"}};
  char p[256];
  snprintf(p, sizeof p, "%s/dflt.pt", dir);
  expect_code(B.load(backend, p, bad, 3, &m), SIP_INVALID_ARGUMENT,
              "unknown backend option 'threads' (known: inputs, outputs)");
  assert_null(m);
}

static void test_run_errors(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.pt", "a:float32[-1]; b:float32[-1]", "c:float64[-1]");
  void *s = must_session(m);
  float a[2] = {1, 2}, b[3] = {1, 2, 3};
  int64_t d2[1] = {2}, d3[1] = {3};
  sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 1, d2, a, sizeof a);
  sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 1, d2, b, 2 * sizeof(float));
  const sip_tensor_t *ins[2] = {&ta, &tb};
  const char *c[1] = {"c"};
  sip_tensor_t *o[1] = {NULL};
  expect_code(B.execute(s, ins, 2, c, 1, o), SIP_FAILED_PRECONDITION,
              "output 'c' is Float; backend option outputs declares float64");
  assert_null(o[0]);
  B.session_free(s);
  B.model_free(m);

  m = must_load("add.pt", "a:float32[-1]; b:float32[-1]", "c:float32[-1]");
  s = must_session(m);
  tb = view("b", SIP_DTYPE_FLOAT32, 1, d3, b, sizeof b);
  expect_code(B.execute(s, ins, 2, c, 1, o), SIP_INVALID_ARGUMENT,
              "The size of tensor a (2) must match the size of tensor b (3)");
  tb = view("b", SIP_DTYPE_FLOAT32, 1, d3, b, 4);
  expect_code(B.execute(s, ins, 2, c, 1, o), SIP_INVALID_ARGUMENT,
              "input 'b' has 4 bytes of data; its shape and dtype need 12");
  B.session_free(s);
  B.model_free(m);
}

typedef struct {
  void *model;
  int id;
  int bad;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  void *s = NULL;
  sip_error_t *err = B.session_new(w->model, &s);
  if (err) {
    sip_error_free(err);
    w->bad = -1;
    return NULL;
  }
  for (int i = 0; i < 300; i++) {
    int64_t a[3], b[3], dims[2] = {1, 3};
    for (int k = 0; k < 3; k++) a[k] = w->id * 1000 + i, b[k] = k;
    sip_tensor_t ta = view("a", SIP_DTYPE_INT64, 2, dims, a, sizeof a);
    sip_tensor_t tb = view("b", SIP_DTYPE_INT64, 2, dims, b, sizeof b);
    const sip_tensor_t *ins[2] = {&ta, &tb};
    const char *names[1] = {"c"};
    sip_tensor_t *o[1] = {NULL};
    err = B.execute(s, ins, 2, names, 1, o);
    if (err) {
      sip_error_free(err);
      w->bad++;
      continue;
    }
    const int64_t *c = o[0]->data;
    for (int k = 0; k < 3; k++) w->bad += c[k] != a[k] + b[k];
    sip_tensor_free(o[0]);
  }
  B.session_free(s);
  return NULL;
}

/* Sessions on threads of their own share the one module. */
static void test_sessions_share_the_module(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.pt", "a:int64[-1,3]; b:int64[-1,3]", "c:int64[-1,3]");
  pthread_t th[4];
  worker_t w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker_t){m, i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(w[i].bad, 0);
  }
  B.model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_and_probe),
      cmocka_unit_test(test_describe_from_declarations),
      cmocka_unit_test(test_outputs_sharing_inputs_are_copied),
      cmocka_unit_test(test_weights_list_and_defaults),
      cmocka_unit_test(test_load_errors),
      cmocka_unit_test(test_run_errors),
      cmocka_unit_test(test_sessions_share_the_module),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

#else /* a build without libtorch */

static void test_no_torchscript_backend(void **state) {
  (void)state;
  assert_null(sip__backend_find("torchscript"));
  assert_non_null(strstr(sip__backend_names(), "this build has no TorchScript backend"));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_torchscript_backend)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
