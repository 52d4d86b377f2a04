/* Helpers shared by the scheduler tests through the public in-process API
 * (test_batching_form.c, test_batching_queue.c, test_batching_capacity.c):
 * builtin pools (identity "input" -> "output", backend_options delay_ms /
 * shape), requests whose values say which request and row they came from,
 * the pools' counters from the status, bounded waits, and the ONNX models
 * made with python3-onnx for the tests that need them.
 *
 * Timing: a pool_size 1 pool whose only session runs an "occupier" request
 * (delay_ms) holds everything submitted meanwhile in its queue, so what
 * forms next is known. With server.execution_slots: 1, a "hog" pool
 * running a long request holds the only compute slot, so another pool's
 * session waits in the arbiter with its request taken off the queue. */
#ifndef SIP_TEST_BATCHING_HELPERS_H
#define SIP_TEST_BATCHING_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "inproc.h"
#include "sip/sip.h"

/* ---- completion recorder: inproc.h ---- */

/* A copy of request id's entry (fails when it has not completed). */
static inline entry_t rec_get(rec_t *r, uint64_t id) {
  entry_t e;
  pthread_mutex_lock(&r->mu);
  int i = 0;
  while (i < r->n && i < MAXR && r->e[i].id != id) i++;
  int found = i < r->n && i < MAXR;
  if (found) e = r->e[i];
  pthread_mutex_unlock(&r->mu);
  if (!found) fail_msg("request %llu has not completed", (unsigned long long)id);
  return e;
}

/* Position of request id in completion order. */
static inline int rec_pos(rec_t *r, uint64_t id) {
  pthread_mutex_lock(&r->mu);
  int i = 0;
  while (i < r->n && i < MAXR && r->e[i].id != id) i++;
  int pos = i < r->n && i < MAXR ? i : -1;
  pthread_mutex_unlock(&r->mu);
  if (pos < 0) fail_msg("request %llu has not completed", (unsigned long long)id);
  return pos;
}

static inline void assert_order(rec_t *r, const uint64_t *want, int n) {
  char got_s[256] = "", want_s[256] = "";
  pthread_mutex_lock(&r->mu);
  int have = r->n;
  for (int i = 0; i < n; i++) {
    snprintf(got_s + strlen(got_s), sizeof got_s - strlen(got_s), "%s%llu", i ? "," : "",
             (unsigned long long)(i < have ? r->e[i].id : 0));
    snprintf(want_s + strlen(want_s), sizeof want_s - strlen(want_s), "%s%llu", i ? "," : "",
             (unsigned long long)want[i]);
  }
  pthread_mutex_unlock(&r->mu);
  assert_int_equal(have, n);
  if (strcmp(got_s, want_s) != 0) fail_msg("completion order %s, want %s", got_s, want_s);
}

/* ---- values: request `id` row r column c holds id * 1000 + r * 10 + c ---- */

static inline float val(uint64_t id, int64_t r, int64_t c) {
  return (float)(id * 1000 + r * 10 + c);
}

/* Asserts e is OK with output "output" [rows, cols] equal to request id's input. */
static inline void assert_echo(const entry_t *e, int64_t rows, int64_t cols) {
  if (e->code != SIP_OK)
    fail_msg("request %llu: %s %s", (unsigned long long)e->id, sip_code_name(e->code), e->msg);
  if (e->n_outputs != 1 || strcmp(e->out_name, "output") != 0 || e->rank != 2 ||
      e->dims[0] != rows || e->dims[1] != cols || e->nv != (size_t)(rows * cols))
    fail_msg("request %llu: %zu outputs, first '%s' rank %d [%lld,%lld] with %zu values; want "
             "'output' [%lld,%lld]",
             (unsigned long long)e->id, e->n_outputs, e->out_name, e->rank,
             (long long)e->dims[0], (long long)e->dims[1], e->nv, (long long)rows,
             (long long)cols);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      if (e->v[r * cols + c] != val(e->id, r, c))
        fail_msg("request %llu: output [%lld,%lld] is %g, want %g (another request's data?)",
                 (unsigned long long)e->id, (long long)r, (long long)c,
                 (double)e->v[r * cols + c], (double)val(e->id, r, c));
}

static inline void assert_code(const entry_t *e, sip_code_t code) {
  if (e->code != code)
    fail_msg("request %llu: %s (%s), want %s", (unsigned long long)e->id, sip_code_name(e->code),
             e->msg, sip_code_name(code));
}

/* ---- server and request helpers --------------------------------------- */


static inline sip_server_t *new_server(const char *pools_yaml) {
  return new_server_ex("", pools_yaml);
}

/* A builtin pool of one session. */
#define POOL(name, extra, opts)                                                             \
  "  - {name: " name ", backend: builtin, pool_size: 1" extra ", backend_options: {" opts \
  "}}\n"
#define BATCHING(max, delay_us, more) \
  ", dynamic_batching: {max_batch_size: " #max ", max_queue_delay_us: " #delay_us more "}"

/* A [rows, cols] float32 request; outputs: NULL-terminated names or NULL. */
static inline sip_request_t *req_ex(const char *pool, uint64_t id, int64_t rows, int64_t cols,
                                    int prio, uint32_t timeout_ms, const char *const *outputs) {
  sip_request_t *r = sip_request_new(pool);
  assert_non_null(r);
  sip_request_set_id(r, id);
  assert_null(sip_request_set_priority(r, prio));
  sip_request_set_timeout_ms(r, timeout_ms);
  float v[MAXV];
  assert_true(rows * cols <= MAXV);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t c = 0; c < cols; c++) v[i * cols + c] = val(id, i, c);
  int64_t d[2] = {rows, cols};
  assert_null(sip_request_add_input(
      r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d, v, (size_t)(rows * cols) * 4)));
  for (size_t i = 0; outputs && outputs[i]; i++) assert_null(sip_request_add_output(r, outputs[i]));
  return r;
}

static inline sip_request_t *req(const char *pool, uint64_t id, int64_t rows) {
  return req_ex(pool, id, rows, 2, 0, 0, NULL);
}

static inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- status (status(), pool_status(), jint(): inproc.h) ---- */

/* Counters of one pool at one moment. */
typedef struct counts {
  json_int_t executions, inferences, session_inferences, queued, batches, rows;
  json_int_t cum[14]; /* batch_sizes buckets, cumulative: <=1, <=2, <=4, ... */
  json_int_t ok, deadline, cancelled, exhausted, invalid;
  char state[16], level[16], error[512];
  json_int_t memory_bytes, compute_ns;
} counts_t;

static inline counts_t counts(sip_server_t *s, const char *name) {
  counts_t c;
  memset(&c, 0, sizeof c);
  json_t *root = status(s);
  json_t *p = pool_status(root, name);
  json_t *st = json_object_get(p, "stats");
  c.executions = jint(st, "execution_count");
  c.inferences = jint(st, "inference_count");
  json_t *sessions = json_object_get(p, "sessions");
  for (size_t i = 0; i < json_array_size(sessions); i++)
    c.session_inferences += jint(json_array_get(sessions, i), "inferences");
  c.queued = jint(p, "queued_requests");
  json_t *bs = json_object_get(p, "batch_sizes");
  c.batches = jint(bs, "count");
  c.rows = jint(bs, "sum");
  json_t *buckets = json_object_get(bs, "buckets");
  for (size_t i = 0; i < json_array_size(buckets) && i < 14; i++)
    c.cum[i] = json_integer_value(json_array_get(json_array_get(buckets, i), 1));
  json_t *codes = json_object_get(p, "requests");
  c.ok = jint(codes, "OK");
  c.deadline = jint(codes, "DEADLINE_EXCEEDED");
  c.cancelled = jint(codes, "CANCELLED");
  c.exhausted = jint(codes, "RESOURCE_EXHAUSTED");
  c.invalid = jint(codes, "INVALID_ARGUMENT");
  snprintf(c.state, sizeof c.state, "%s", json_string_value(json_object_get(p, "state")));
  const char *lv = json_string_value(json_object_get(p, "batch_level"));
  snprintf(c.level, sizeof c.level, "%s", lv ? lv : "");
  const char *er = json_string_value(json_object_get(p, "error"));
  snprintf(c.error, sizeof c.error, "%s", er ? er : "");
  c.memory_bytes = jint(p, "memory_bytes");
  c.compute_ns = jint(p, "compute_ns");
  json_decref(root);
  return c;
}

/* Waits until pool `name` has nothing queued and a session RUNNING (in the
 * backend, holding a compute slot): the request just submitted occupies it. */
static inline void wait_running(sip_server_t *s, const char *name) {
  for (int i = 0; i < 4000; i++) {
    json_t *root = status(s);
    json_t *p = pool_status(root, name);
    json_t *sessions = json_object_get(p, "sessions");
    int running = 0;
    for (size_t k = 0; k < json_array_size(sessions); k++)
      running |= strcmp(json_string_value(json_object_get(json_array_get(sessions, k), "state")),
                        "RUNNING") == 0;
    running &= jint(p, "queued_requests") == 0;
    json_decref(root);
    if (running) return;
    sleep_ms(1);
  }
  fail_msg("pool '%s' never started running its request", name);
}

/* Waits until pool `name` has nothing queued (a session took it). */
static inline void wait_taken(sip_server_t *s, const char *name) {
  for (int i = 0; i < 4000; i++) {
    if (counts(s, name).queued == 0) return;
    sleep_ms(1);
  }
  fail_msg("pool '%s' never took its queued request", name);
}

/* ---- models made with python3-onnx (tests that need them skip without) ---- */

static char model_dir[64];
static int models_state; /* 0 not tried, 1 made, -1 unavailable */

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
    "save('two_out', [N('Add', ['x', 'x'], ['sum']), N('Mul', ['x', 'x'], ['prod'])],\n"
    "     [V('x', T.FLOAT, ['N', 2])],\n"
    "     [V('sum', T.FLOAT, ['N', 2]), V('prod', T.FLOAT, ['N', 2])])\n"
    "n = 16 << 20  # 64 MiB of float32 weights, all used by Gather\n"
    "w = helper.make_tensor('w', T.FLOAT, [n], b'\\x01\\x02\\x03\\x04' * n, raw=True)\n"
    "save('big', [N('Gather', ['w', 'idx'], ['y'], axis=0)], [V('idx', T.INT64, ['N'])],\n"
    "     [V('y', T.FLOAT, ['N'])], [w])\n";

/* Makes the models once; skips the calling test when python3-onnx is missing. */
static inline void need_models(void) {
  if (!models_state) {
    models_state = -1;
    if (system("/usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") != 0)
      SKIP_UNLESS_CI("python3-onnx is missing");
    snprintf(model_dir, sizeof model_dir, "/tmp/sip_batching_XXXXXX");
    if (!mkdtemp(model_dir)) fail_msg("mkdtemp: %s", strerror(errno));
    char script[128], cmd[512];
    snprintf(script, sizeof script, "%s/gen.py", model_dir);
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fputs(gen_py, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, model_dir);
    if (system(cmd) != 0) fail_msg("model generation failed: %s", cmd);
    models_state = 1;
  }
  if (models_state < 0) SKIP_UNLESS_CI("the test models could not be made");
}

static inline int group_teardown(void **state) {
  (void)state;
  if (model_dir[0]) rm_tree(model_dir);
  return 0;
}

#endif
