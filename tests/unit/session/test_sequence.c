/* Sequence batching (src/session/sequence.c) on an in-process server with a
 * small generated ONNX model whose output shows the control inputs the
 * server filled: out = START*1000 + END*100 + READY*10 + x, and corr =
 * CORRID. Without /usr/bin/python3 + onnx every test is skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "backend/backends.h"
#include "config/config.h"
#include "inproc.h"
#include "server/observe/prometheus.h"

static char dir[64];
static int have_models;

static const char gen_py[] =
    "import sys, onnx\n"
    "from onnx import helper, TensorProto as T\n"
    "d = sys.argv[1]\n"
    "V = helper.make_tensor_value_info\n"
    "N = helper.make_node\n"
    "k = lambda n, v: helper.make_tensor(n, T.FLOAT, [1], [v])\n"
    "nodes = [N('Cast', ['START'], ['s'], to=T.FLOAT), N('Cast', ['END'], ['e'], to=T.FLOAT),\n"
    "         N('Cast', ['READY'], ['r'], to=T.FLOAT),\n"
    "         N('Mul', ['s', 'k1000'], ['s2']), N('Mul', ['e', 'k100'], ['e2']),\n"
    "         N('Mul', ['r', 'k10'], ['r2']), N('Add', ['s2', 'e2'], ['a1']),\n"
    "         N('Add', ['a1', 'r2'], ['a2']), N('Add', ['a2', 'x'], ['out']),\n"
    "         N('Identity', ['CORRID'], ['corr'])]\n"
    "g = helper.make_graph(nodes, 'seq',\n"
    "    [V('x', T.FLOAT, [1]), V('START', T.INT32, [1]), V('END', T.BOOL, []),\n"
    "     V('READY', T.FLOAT, [1]), V('CORRID', T.UINT64, [1])],\n"
    "    [V('out', T.FLOAT, [1]), V('corr', T.UINT64, [1])],\n"
    "    initializer=[k('k1000', 1000.0), k('k100', 100.0), k('k10', 10.0)])\n"
    "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])\n"
    "m.ir_version = 7\n"
    "onnx.save(m, d + '/seq.onnx')\n";

static int setup(void **state) {
  (void)state;
  int made = gen_models(dir, "sip_seq_test", gen_py);
  if (made <= 0) return made;
  have_models = 1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (have_models) rm_tree(dir);
  return 0;
}

#define NEED_MODELS()                                                                  \
  do {                                                                                 \
    if (!have_models)                                                                  \
      SKIP_UNLESS_CI("no test models (python3-onnx missing or their generation failed)"); \
  } while (0)

/* A server with one pool "s" over the model; `extra` goes into the pool's
 * sequence_batching map. */
static sip_server_t *seq_server(int sessions, const char *extra) {
  char pools[2048];
  snprintf(pools, sizeof pools,
           "  - name: s\n    model_path: %s/seq.onnx\n    pool_size: %d\n"
           "    sequence_batching: {control_inputs: {start: START, end: END, ready: READY, "
           "corrid: CORRID}%s}\n",
           dir, sessions, extra);
  return new_server_ex(", execution_slots: 2", pools);
}

static sip_request_t *seq_req(uint64_t seq, float x, bool start, bool end) {
  sip_request_t *r = sip_request_new("s");
  assert_non_null(r);
  sip_request_set_id(r, (uint64_t)x);
  int64_t d[1] = {1};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("x", SIP_DTYPE_FLOAT32, 1, d, &x, 4)));
  if (seq) assert_null(sip_request_set_sequence(r, seq, start, end));
  return r;
}

/* Runs one request synchronously; returns its code, the value of `out` and
 * of `corr`. */
static sip_code_t run(sip_server_t *s, sip_request_t *r, float *out, uint64_t *corr, char *msg,
                      size_t n) {
  sip_response_t *resp = NULL;
  sip_error_t *e = sip_server_infer(s, r, &resp);
  if (e) {
    sip_code_t c = sip_error_code(e);
    if (msg) snprintf(msg, n, "%s", sip_error_message(e));
    sip_error_free(e);
    return c;
  }
  sip_code_t c = sip_response_code(resp);
  if (msg) snprintf(msg, n, "%s", sip_response_message(resp));
  const sip_tensor_t *o = sip_response_output_by_name(resp, "out");
  const sip_tensor_t *k = sip_response_output_by_name(resp, "corr");
  if (c == SIP_OK) {
    assert_non_null(o);
    assert_non_null(k);
    memcpy(out, o->data, 4);
    memcpy(corr, k->data, 8);
  }
  sip_response_free(resp);
  return c;
}

static void expect_out(sip_server_t *s, uint64_t seq, float x, bool start, bool end,
                         float want, uint64_t want_corr) {
  float out = -1;
  uint64_t corr = 0;
  char msg[512] = "";
  sip_code_t c = run(s, seq_req(seq, x, start, end), &out, &corr, msg, sizeof msg);
  if (c != SIP_OK) fail_msg("sequence %llu x=%g: %s: %s", (unsigned long long)seq, x,
                            sip_code_name(c), msg);
  assert_float_equal(out, want, 1e-6);
  assert_int_equal(corr, want_corr);
}

static void expect_code(sip_server_t *s, sip_request_t *r, sip_code_t code, const char *sub) {
  float out;
  uint64_t corr;
  char msg[512] = "";
  sip_code_t c = run(s, r, &out, &corr, msg, sizeof msg);
  if (c != code) fail_msg("code %s, want %s: %s", sip_code_name(c), sip_code_name(code), msg);
  if (!strstr(msg, sub)) fail_msg("message lacks \"%s\": %s", sub, msg);
}

/* session i's inference count in the status. */
static json_int_t session_inferences(sip_server_t *s, int i) {
  json_t *root = status(s);
  json_t *ss = json_object_get(pool_status(root, "s"), "sessions");
  json_int_t n = jint(json_array_get(ss, (size_t)i), "inferences");
  json_decref(root);
  return n;
}

/* Waits (2 s at most) until /metrics has the line `want`: a slot frees just
 * after its END request was answered. */
static void expect_metric(sip_server_t *s, const char *want) {
  for (int i = 0; i < 200; i++) {
    char *m = sip__prometheus_text(s);
    assert_non_null(m);
    int found = strstr(m, want) != NULL;
    sip__free(m);
    if (found) return;
    usleep(10000);
  }
  fail_msg("no \"%s\" in /metrics", want);
}

static void test_control_inputs(void **state) {
  (void)state;
  NEED_MODELS();
  sip_server_t *s = seq_server(1, "");
  expect_out(s, 42, 1, true, false, 1011, 42);  /* START, READY */
  expect_out(s, 42, 2, false, false, 12, 42);   /* READY */
  expect_out(s, 42, 3, false, true, 113, 42);   /* END, READY */
  /* Ended: the slot is free, a request of the sequence without START fails. */
  expect_code(s, seq_req(42, 4, false, false), SIP_FAILED_PRECONDITION,
              "sequence 42 is not active");
  /* A request may start and end a sequence at once. */
  expect_out(s, 7, 5, true, true, 1115, 7);
  sip_server_free(s);
}

static void test_refusals(void **state) {
  (void)state;
  NEED_MODELS();
  sip_server_t *s = seq_server(1, "");
  expect_code(s, seq_req(0, 1, false, false), SIP_INVALID_ARGUMENT, "needs a sequence id");
  sip_request_t *r = seq_req(9, 1, true, false);
  int32_t one = 1;
  int64_t d[1] = {1};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("START", SIP_DTYPE_INT32, 1, d, &one, 4)));
  expect_code(s, r, SIP_INVALID_ARGUMENT, "control input");
  r = seq_req(0, 1, true, false);
  assert_null(sip_request_set_sequence_str(r, "abc", true, false));
  expect_code(s, r, SIP_INVALID_ARGUMENT, "expected a numeric sequence_id");
  r = sip_request_new("s");
  sip_error_t *e = sip_request_set_sequence(r, 0, true, false);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  assert_non_null(e = sip_request_set_sequence_str(r, "", true, false));
  sip_error_free(e);
  sip_request_free(r);
  /* Clients do not see the control inputs; the pool's settings name them. */
  char *txt = sip_server_info_json(s, SIP_INFO_POOLS);
  assert_non_null(txt);
  json_t *root = json_loads(txt, 0, NULL);
  sip_free(txt);
  assert_non_null(root);
  json_t *p = pool_status(root, "s");
  json_t *ins = json_object_get(p, "inputs");
  assert_int_equal(json_array_size(ins), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(ins, 0), "name")), "x");
  json_t *sb = json_object_get(p, "sequence_batching");
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(sb, "control_inputs"), "corrid")),
      "CORRID");
  assert_int_equal(jint(sb, "idle_timeout_us"), 1000000);
  json_decref(root);
  root = status(s);
  json_t *sq = json_object_get(pool_status(root, "s"), "sequences");
  assert_non_null(sq);
  assert_int_equal(jint(sq, "active"), 0);
  json_decref(root);
  sip_server_free(s);
}

/* Two sequences on two sessions: each stays on the session it was bound
 * to, and each one's requests complete in the order submitted. */
static void test_sticky_and_ordered(void **state) {
  (void)state;
  NEED_MODELS();
  sip_server_t *s = seq_server(2, "");
  rec_t rec;
  rec_init(&rec);
  submit(s, seq_req(1, 1, true, false), &rec);
  submit(s, seq_req(2, 2, true, false), &rec);
  for (int i = 0; i < 4; i++) {
    submit(s, seq_req(1, (float)(10 + 2 * i), false, i == 3), &rec);
    submit(s, seq_req(2, (float)(11 + 2 * i), false, false), &rec);
  }
  assert_int_equal(rec_wait(&rec, 10, 10000), 10);
  float last1 = -1, last2 = -1;
  for (int i = 0; i < 10; i++) {
    entry_t *e = &rec.e[i];
    assert_int_equal(e->code, SIP_OK);
    int id = (int)e->id;
    float *last = id == 1 || (id >= 10 && id % 2 == 0) ? &last1 : &last2;
    assert_true((float)id > *last); /* in order within a sequence */
    *last = (float)id;
  }
  /* Sequence 1 (5 requests) went to session 0, sequence 2 (5) to session 1. */
  assert_int_equal(session_inferences(s, 0), 5);
  assert_int_equal(session_inferences(s, 1), 5);
  /* Sequence 1 ended: its slot is free; a new sequence takes session 0,
   * the one with fewer sequences. */
  expect_out(s, 3, 1, true, false, 1011, 3);
  assert_int_equal(session_inferences(s, 0), 6);
  assert_int_equal(session_inferences(s, 1), 5);
  rec_destroy(&rec);
  sip_server_free(s);
}

static void test_backlog(void **state) {
  (void)state;
  NEED_MODELS();
  sip_server_t *s = seq_server(1, ", max_backlog: 1");
  expect_out(s, 100, 1, true, false, 1011, 100);
  rec_t rec;
  rec_init(&rec);
  /* The one slot is taken: sequence 200 waits in the backlog... */
  submit(s, seq_req(200, 2, true, false), &rec);
  submit(s, seq_req(200, 3, false, true), &rec);
  /* ...which is then full. */
  expect_code(s, seq_req(300, 1, true, false), SIP_RESOURCE_EXHAUSTED, "max_backlog");
  expect_metric(s, "sip_sequences_active{pool=\"s\",version=\"\"} 1\n");
  expect_metric(s, "sip_sequences_waiting{pool=\"s\",version=\"\"} 1\n");
  assert_int_equal(rec_count(&rec), 0); /* in the backlog: not run */
  /* END of sequence 100 frees the slot: 200 starts, in order. */
  expect_out(s, 100, 4, false, true, 114, 100);
  assert_int_equal(rec_wait(&rec, 2, 5000), 2);
  assert_int_equal(rec.e[0].code, SIP_OK);
  assert_float_equal(rec.e[0].v[0], 1012, 1e-6);
  assert_float_equal(rec.e[1].v[0], 113, 1e-6);
  rec_destroy(&rec);
  sip_server_free(s);
}

static void test_idle_expiry_and_restart(void **state) {
  (void)state;
  NEED_MODELS();
  sip_server_t *s = seq_server(1, ", idle_timeout_us: 50000");
  expect_out(s, 5, 1, true, false, 1011, 5);
  /* START again on an active sequence restarts it (START is 1 again). */
  expect_out(s, 5, 2, true, false, 1012, 5);
  /* Housekeeping expires it 50 ms after its last request. */
  expect_metric(s, "sip_sequences_expired_total{pool=\"s\",version=\"\"} 1\n");
  expect_code(s, seq_req(5, 3, false, false), SIP_FAILED_PRECONDITION,
              "expired after the idle timeout of 50000 us");
  /* The slot was released: a new sequence gets it at once. */
  expect_out(s, 6, 1, true, false, 1011, 6);
  sip_server_free(s);
}

static void expect_failed_pool(const char *seq_yaml, const char *sub) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "server: {log_level: error}\nsession_pools:\n  - name: s\n    model_path: %s/seq.onnx\n"
           "    sequence_batching: %s\n",
           dir, seq_yaml);
  sip_server_t *s = new_server_yaml(yaml);
  json_t *root = status(s);
  json_t *p = pool_status(root, "s");
  const char *err = json_string_value(json_object_get(p, "error"));
  if (!err || !strstr(err, sub)) fail_msg("pool error \"%s\" lacks \"%s\"", err ? err : "", sub);
  json_decref(root);
  sip_server_free(s);
}

static sip_error_t *load_config(const char *yaml, sip__config_t **cfg) {
  return sip__config_load_string(yaml, strlen(yaml), "t", NULL, sip__backend_catalog(), cfg);
}

static void test_config(void **state) {
  (void)state;
  NEED_MODELS();
  expect_failed_pool("{control_inputs: {start: NOPE}}",
                     "control_inputs.start names input 'NOPE', which the model does not have");
  expect_failed_pool("{control_inputs: {corrid: x}}", "input 'x' is float32; expected uint64");
  expect_failed_pool("{control_inputs: {ready: CORRID}}", "expected int32, float32 or bool");
  /* Parse-time errors. */
  const char *bad[][2] = {
      {"{control_inputs: {start: A, end: A}}", "both name input 'A'"},
      {"{idle_timeout_us: 5}", "idle_timeout_us"},
      {"{max_sequences: 0}", "max_sequences"},
      {"{nope: 1}", "unknown key"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "session_pools:\n  - name: s\n    backend: builtin\n    sequence_batching: %s\n",
             bad[i][0]);
    sip__config_t *cfg = NULL;
    sip_error_t *e = load_config(yaml, &cfg);
    if (!e) fail_msg("config accepted: %s", bad[i][0]);
    if (!strstr(sip_error_message(e), bad[i][1]))
      fail_msg("\"%s\" lacks \"%s\"", sip_error_message(e), bad[i][1]);
    sip_error_free(e);
  }
  sip__config_t *cfg = NULL;
  sip_error_t *e = load_config(
      "session_pools:\n  - {name: s, backend: builtin, dynamic_batching: {max_batch_size: 4},\n"
      "     sequence_batching: {}}\n",
      &cfg);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "cannot be combined with dynamic_batching"));
  sip_error_free(e);
  assert_null(load_config(
      "session_pools:\n  - {name: s, backend: builtin, pool_size: 3, sequence_batching: {}}\n",
      &cfg));
  assert_int_equal(cfg->pools[0].sequence_batching, 1);
  assert_int_equal(cfg->pools[0].seq_max_sequences, 3);
  assert_int_equal(cfg->pools[0].seq_idle_timeout_us, 1000000);
  sip__config_free(cfg);
  /* A repository model's config.yaml takes the same section. */
  char path[] = "/tmp/sip_seq_cfg_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *y = "pool_size: 2\nsequence_batching: {max_backlog: 3, control_inputs: {ready: R}}\n";
  assert_int_equal(write(fd, y, strlen(y)), (ssize_t)strlen(y));
  close(fd);
  sip__pool_config_t *pc = NULL;
  e = sip__config_load_model(path, "m", "/models/m/1/model.onnx", sip__backend_catalog(), &pc);
  unlink(path);
  if (e) fail_msg("%s", sip_error_message(e));
  assert_int_equal(pc->sequence_batching, 1);
  assert_int_equal(pc->seq_max_sequences, 2);
  assert_int_equal(pc->seq_max_backlog, 3);
  assert_int_equal(pc->seq_idle_timeout_us, 1000000);
  assert_string_equal(pc->seq_control[SIP__SEQ_READY], "R");
  assert_null(pc->seq_control[SIP__SEQ_START]);
  sip__config_pool_free(pc);
}

/* Many sequences, numeric and string ids, on a builtin pool (no control
 * inputs): the id index grows past its first size and every sequence is
 * still found, ended and released; the backlog drains as slots free. */
static void test_many_sequences(void **state) {
  (void)state;
  sip_server_t *s = new_server_ex(
      "", "  - {name: b, backend: builtin, pool_size: 2, backend_options: {shape: '-1'},\n"
          "     sequence_batching: {max_sequences: 300}}\n"
          "  - {name: q, backend: builtin, pool_size: 1, backend_options: {shape: '-1'},\n"
          "     sequence_batching: {max_sequences: 4, max_backlog: 500}}\n");
  enum { N = 150 };
  for (int step = 0; step < 3; step++)
    for (int i = 0; i < N; i++) {
      sip_request_t *r = make_req("b", (uint64_t)i, 0, 0);
      char sid[32];
      snprintf(sid, sizeof sid, "seq-%d", i);
      sip_error_t *e = i % 2 ? sip_request_set_sequence_str(r, sid, step == 0, step == 2)
                             : sip_request_set_sequence(r, (uint64_t)i + 1, step == 0, step == 2);
      assert_null(e);
      sip_response_t *resp = NULL;
      assert_null(sip_server_infer(s, r, &resp));
      if (sip_response_code(resp) != SIP_OK)
        fail_msg("step %d sequence %d: %s", step, i, sip_response_message(resp));
      sip_response_free(resp);
    }
  expect_metric(s, "sip_sequences_active{pool=\"b\",version=\"\"} 0\n");
  sip_request_t *r = make_req("b", 1, 0, 0);
  assert_null(sip_request_set_sequence_str(r, "seq-3", false, false));
  expect_code(s, r, SIP_FAILED_PRECONDITION, "sequence 'seq-3' is not active");

  /* 4 slots, 100 one-request sequences at once: 96 wait, all run. */
  rec_t rec;
  rec_init(&rec);
  for (int i = 0; i < 100; i++) {
    r = make_req("q", (uint64_t)i, 0, 0);
    assert_null(sip_request_set_sequence(r, (uint64_t)i + 1, true, true));
    submit(s, r, &rec);
  }
  assert_int_equal(rec_wait(&rec, 100, 10000), 100);
  for (int i = 0; i < MAXR; i++) assert_int_equal(rec.e[i].code, SIP_OK);
  rec_destroy(&rec);
  sip_server_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_control_inputs),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_sticky_and_ordered),
      cmocka_unit_test(test_backlog),
      cmocka_unit_test(test_idle_expiry_and_restart),
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_many_sequences),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
