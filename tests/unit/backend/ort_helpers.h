/* Helpers shared by the ONNX Runtime backend's unit tests
 * (test_backend_ort_types.c, test_backend_ort_outputs.c,
 * test_backend_ort_errors.c, test_backend_ort_threads.c).
 *
 * C cannot easily build ONNX models, so the group setup writes a small
 * Python script that makes them with python3-onnx into a temporary
 * directory. Without /usr/bin/python3 + onnx every test is skipped.
 */
#ifndef SIP_TEST_ORT_HELPERS_H
#define SIP_TEST_ORT_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static inline void path_of(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", dir, name);
}

static inline sip_error_t *load(const char *name, const sip_kv_t *opts, size_t n, void **model) {
  char p[256];
  path_of(p, sizeof p, name);
  return B.load(backend, p, opts, n, model);
}

static inline void *must_load(const char *name) {
  void *m = NULL;
  sip_error_t *err = load(name, NULL, 0, &m);
  if (err) fail_msg("load %s: %s", name, sip_error_message(err));
  assert_non_null(m);
  return m;
}

static inline void *must_session(void *model) {
  void *s = NULL;
  sip_error_t *err = B.session_new(model, &s);
  if (err) fail_msg("session_new: %s", sip_error_message(err));
  return s;
}

/* A borrowed view: what the scheduler hands to execute. */
static inline sip_tensor_t view(const char *name, sip_dtype_t dt, int rank, const int64_t *dims,
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

static inline void expect_code(sip_error_t *err, sip_code_t code, const char *needle) {
  if (!err) fail_msg("expected %s, got success", sip_code_name(code));
  if (sip_error_code(err) != code || (needle && !strstr(sip_error_message(err), needle)))
    fail_msg("expected %s mentioning '%s', got %s: %s", sip_code_name(code), needle ? needle : "",
             sip_code_name(sip_error_code(err)), sip_error_message(err));
  sip_error_free(err);
}

static inline const sip_io_desc_t *find_desc(const sip_io_desc_t *d, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return &d[i];
  fail_msg("no io named %s", name);
  return NULL;
}

static inline size_t pack(unsigned char *out, const char *const *s, const size_t *len, size_t n) {
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

static inline int group_setup(void **state) {
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

static inline int group_teardown(void **state) {
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

#endif
