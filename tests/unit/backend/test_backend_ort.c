/* Unit tests for the ONNX Runtime backend (src/backend/onnxruntime.c).
 *
 * C cannot easily build ONNX models, so the group setup writes a small
 * Python script that makes them with python3-onnx into a temporary
 * directory. Without /usr/bin/python3 + onnx every test is skipped.
 */
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

#include "core/core.h"
#include "inproc.h"
#include "sip/backend.h"

extern const sip_backend_vtable_t sip__backend_onnxruntime;
#define B sip__backend_onnxruntime

static char dir[64];
static int have_models;
static void *backend;

static const char gen_py[] =
    "import sys, onnx\n"
    "from onnx import helper, TensorProto as T\n"
    "d = sys.argv[1]\n"
    "V = helper.make_tensor_value_info\n"
    "def save(name, nodes, ins, outs, inits=()):\n"
    "    g = helper.make_graph(nodes, name, ins, outs, initializer=list(inits))\n"
    "    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])\n"
    "    m.ir_version = 7\n"
    "    onnx.save(m, d + '/' + name + '.onnx')\n"
    "N = helper.make_node\n"
    "save('add', [N('Add', ['a', 'b'], ['c'])],\n"
    "     [V('a', T.FLOAT, ['N', 3]), V('b', T.FLOAT, ['N', 3])], [V('c', T.FLOAT, ['N', 3])])\n"
    "save('str', [N('Identity', ['s'], ['t'])], [V('s', T.STRING, [None])],\n"
    "     [V('t', T.STRING, [None])])\n"
    "save('scalar', [N('Identity', ['x'], ['y'])], [V('x', T.INT64, [])], [V('y', T.INT64, [])])\n"
    "save('noshape', [N('Identity', ['x'], ['y'])], [V('x', T.FLOAT, None)],\n"
    "     [V('y', T.FLOAT, None)])\n"
    "ts = [('bool', T.BOOL), ('int8', T.INT8), ('int16', T.INT16), ('int32', T.INT32),\n"
    "      ('int64', T.INT64), ('uint8', T.UINT8), ('uint16', T.UINT16), ('uint32', T.UINT32),\n"
    "      ('uint64', T.UINT64), ('float16', T.FLOAT16), ('float32', T.FLOAT),\n"
    "      ('float64', T.DOUBLE)]\n"
    "save('types', [N('Identity', ['x_' + n], ['y_' + n]) for n, _ in ts],\n"
    "     [V('x_' + n, t, ['N']) for n, t in ts], [V('y_' + n, t, ['N']) for n, t in ts])\n"
    "save('reshape', [N('Reshape', ['x', 'shape'], ['y'])], [V('x', T.FLOAT, [2, 2])],\n"
    "     [V('y', T.FLOAT, [4])], [helper.make_tensor('shape', T.INT64, [1], [4])])\n"
    "save('passthru', [], [V('x', T.FLOAT, [2])], [V('x', T.FLOAT, [2])])\n"
    "save('const', [N('Identity', ['w'], ['y'])], [V('x', T.FLOAT, [1])], [V('y', T.FLOAT, [3])],\n"
    "     [helper.make_tensor('w', T.FLOAT, [3], [1.5, 2.5, 3.5])])\n"
    "save('seq', [N('SequenceLength', ['q'], ['n'])],\n"
    "     [helper.make_tensor_sequence_value_info('q', T.FLOAT, None)], [V('n', T.INT64, [])])\n"
    "save('ident', [N('Identity', ['x'], ['y'])], [V('x', T.FLOAT, ['N'])],\n"
    "     [V('y', T.FLOAT, ['N'])])\n"
    "save('twice', [N('Concat', ['a', 'a'], ['c'], axis=0)], [V('a', T.FLOAT, ['N', 3])],\n"
    "     [V('c', T.FLOAT, ['N', 3])])\n"
    "open(d + '/corrupt.onnx', 'wb').write(b'\\x08\\x07this is not a protobuf model\\xff\\xff')\n";

/* ---- helpers ----------------------------------------------------------- */

static void path_of(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", dir, name);
}

static sip_error_t *load(const char *name, const sip_kv_t *opts, size_t n, void **model) {
  char p[256];
  path_of(p, sizeof p, name);
  return B.load(backend, p, opts, n, model);
}

static void *must_load(const char *name) {
  void *m = NULL;
  sip_error_t *err = load(name, NULL, 0, &m);
  if (err) fail_msg("load %s: %s", name, sip_error_message(err));
  assert_non_null(m);
  return m;
}

static void *must_session(void *model) {
  void *s = NULL;
  sip_error_t *err = B.session_new(model, &s);
  if (err) fail_msg("session_new: %s", sip_error_message(err));
  return s;
}

/* A borrowed view: what the scheduler hands to execute. */
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

static const sip_io_desc_t *find_desc(const sip_io_desc_t *d, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return &d[i];
  fail_msg("no io named %s", name);
  return NULL;
}

static size_t pack(unsigned char *out, const char *const *s, const size_t *len, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t l = (uint32_t)len[i];
    out[o++] = (unsigned char)l;
    out[o++] = (unsigned char)(l >> 8);
    out[o++] = (unsigned char)(l >> 16);
    out[o++] = (unsigned char)(l >> 24);
    memcpy(out + o, s[i], len[i]);
    o += len[i];
  }
  return o;
}

/* ---- setup ------------------------------------------------------------- */

static int group_setup(void **state) {
  (void)state;
  sip_engine_settings_t settings = {
      .intra_op_threads = 2, .inter_op_threads = 0, .allow_spinning = 0};
  sip_error_t *err = B.init(&settings, &backend);
  if (err) {
    fprintf(stderr, "init: %s\n", sip_error_message(err));
    sip_error_free(err);
    return -1;
  }
  int made = gen_models(dir, "sip_ort_test", gen_py);
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

#define NEED_MODELS()                                                                  \
  do {                                                                                 \
    if (!have_models)                                                                  \
      SKIP_UNLESS_CI("no test models (python3-onnx missing or their generation failed)"); \
  } while (0)

/* ---- tests ------------------------------------------------------------- */

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

/* Sessions of one model run concurrently on the shared OrtSession. */
struct worker {
  void *model;
  int id;
  int failures;
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  void *s = NULL;
  sip_error_t *err = B.session_new(w->model, &s);
  if (err) {
    sip_error_free(err);
    w->failures++;
    return NULL;
  }
  const int64_t dims[2] = {4, 3};
  float a[12], b[12];
  const char *names[1] = {"c"};
  for (int it = 0; it < 200; it++) {
    for (int i = 0; i < 12; i++) a[i] = (float)(w->id * 1000 + it), b[i] = (float)i;
    sip_tensor_t ta = view("a", SIP_DTYPE_FLOAT32, 2, dims, a, sizeof a);
    sip_tensor_t tb = view("b", SIP_DTYPE_FLOAT32, 2, dims, b, sizeof b);
    const sip_tensor_t *ins[2] = {&ta, &tb};
    sip_tensor_t *o = NULL;
    err = B.execute(s, ins, 2, names, 1, &o);
    if (err) {
      sip_error_free(err);
      w->failures++;
      continue;
    }
    const float *c = o->data;
    for (int i = 0; i < 12; i++)
      if (c[i] != a[i] + b[i]) w->failures++;
    sip_tensor_free(o);
  }
  B.session_free(s);
  return NULL;
}

static void test_concurrent_sessions(void **state) {
  (void)state;
  NEED_MODELS();
  void *m = must_load("add.onnx");
  enum { NW = 4 };
  pthread_t th[NW];
  struct worker w[NW];
  for (int i = 0; i < NW; i++) {
    w[i] = (struct worker){m, i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < NW; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(w[i].failures, 0);
  }
  B.model_free(m);
}

static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* Models and sessions use the env's global pool: loading more of them must
 * not start threads (per-session pools would add intra_op_threads - 1 each). */
static void test_no_per_session_threads(void **state) {
  (void)state;
  NEED_MODELS();
  int before = count_threads();
  if (before < 0) skip();
  void *m[3], *s[3];
  for (int i = 0; i < 3; i++) {
    m[i] = must_load(i == 1 ? "types.onnx" : "add.onnx");
    s[i] = must_session(m[i]);
  }
  assert_int_equal(count_threads(), before);
  for (int i = 0; i < 3; i++) {
    B.session_free(s[i]);
    B.model_free(m[i]);
  }
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
      cmocka_unit_test(test_describe),
      cmocka_unit_test(test_add_two_sessions),
      cmocka_unit_test(test_empty_and_scalar),
      cmocka_unit_test(test_strings),
      cmocka_unit_test(test_all_types),
      cmocka_unit_test(test_output_never_aliases_input),
      cmocka_unit_test(test_outputs_outlive_model),
      cmocka_unit_test(test_outputs_into_destinations),
      cmocka_unit_test(test_load_errors),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_run_errors),
      cmocka_unit_test(test_concurrent_sessions),
      cmocka_unit_test(test_no_per_session_threads),
      cmocka_unit_test(test_allocation_failures),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
