/* Scheduler tests through the public in-process API with builtin pools
 * (identity "input" -> "output", backend_options delay_ms / shape): dynamic
 * batching (formation, scatter, what may share a batch, preferred sizes,
 * max_queue_delay, deadlines, fixed batch dims and padding), queue policy
 * (max_size, default_timeout_ms, timeout_action delay, ageing),
 * cancellation, elastic batch levels and the memory quota.
 *
 * Timing: a pool_size 1 pool whose only session runs an "occupier" request
 * (delay_ms) holds everything submitted meanwhile in its queue, so what
 * forms next is known. With server.execution_slots: 1, a "hog" pool
 * running a long request holds the only compute slot, so another pool's
 * session waits in the arbiter with its request taken off the queue. */
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
static entry_t rec_get(rec_t *r, uint64_t id) {
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
static int rec_pos(rec_t *r, uint64_t id) {
  pthread_mutex_lock(&r->mu);
  int i = 0;
  while (i < r->n && i < MAXR && r->e[i].id != id) i++;
  int pos = i < r->n && i < MAXR ? i : -1;
  pthread_mutex_unlock(&r->mu);
  if (pos < 0) fail_msg("request %llu has not completed", (unsigned long long)id);
  return pos;
}

static void assert_order(rec_t *r, const uint64_t *want, int n) {
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

static float val(uint64_t id, int64_t r, int64_t c) { return (float)(id * 1000 + r * 10 + c); }

/* Asserts e is OK with output "output" [rows, cols] equal to request id's input. */
static void assert_echo(const entry_t *e, int64_t rows, int64_t cols) {
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

static void assert_code(const entry_t *e, sip_code_t code) {
  if (e->code != code)
    fail_msg("request %llu: %s (%s), want %s", (unsigned long long)e->id, sip_code_name(e->code),
             e->msg, sip_code_name(code));
}

/* ---- server and request helpers --------------------------------------- */


static sip_server_t *new_server(const char *pools_yaml) { return new_server_ex("", pools_yaml); }

/* A builtin pool of one session. */
#define POOL(name, extra, opts)                                                             \
  "  - {name: " name ", backend: builtin, pool_size: 1" extra ", backend_options: {" opts \
  "}}\n"
#define BATCHING(max, delay_us, more) \
  ", dynamic_batching: {max_batch_size: " #max ", max_queue_delay_us: " #delay_us more "}"

/* A [rows, cols] float32 request; outputs: NULL-terminated names or NULL. */
static sip_request_t *req_ex(const char *pool, uint64_t id, int64_t rows, int64_t cols, int prio,
                             uint32_t timeout_ms, const char *const *outputs) {
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

static sip_request_t *req(const char *pool, uint64_t id, int64_t rows) {
  return req_ex(pool, id, rows, 2, 0, 0, NULL);
}


static void sleep_ms(int ms) {
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

static counts_t counts(sip_server_t *s, const char *name) {
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
static void wait_running(sip_server_t *s, const char *name) {
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
static void wait_taken(sip_server_t *s, const char *name) {
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
static void need_models(void) {
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

static int group_teardown(void **state) {
  (void)state;
  if (model_dir[0]) rm_tree(model_dir);
  return 0;
}

/* ==== dynamic batching ================================================== */

/* Five one-row requests queued behind an occupier run as ONE execution and
 * each gets exactly its own row back. */
static void test_batch_formation_and_scatter(void **state) {
  (void)state;
  sip_server_t *s =
      new_server(POOL("b", BATCHING(8, 200000, ""), "shape: '-1,2', delay_ms: 100"));
  rec_t rec;
  rec_init(&rec);
  submit(s, req("b", 100, 8), &rec); /* a full batch: dispatched at once */
  wait_running(s, "b");
  counts_t c0 = counts(s, "b");
  assert_int_equal(c0.executions, 0); /* counted when it ends */
  for (uint64_t id = 1; id <= 5; id++) submit(s, req("b", id, 1), &rec);
  counts_t mid = counts(s, "b");
  if (rec_count(&rec) == 0) assert_int_equal(mid.queued, 5); /* all five wait together */

  assert_int_equal(rec_wait(&rec, 6, 5000), 6);
  assert_echo(&rec.e[0], 8, 2);
  assert_int_equal(rec.e[0].id, 100);
  for (uint64_t id = 1; id <= 5; id++) {
    entry_t e = rec_get(&rec, id);
    assert_echo(&e, 1, 2);
  }
  counts_t c = counts(s, "b");
  if (c.executions != 2)
    fail_msg("%lld executions; want 2 (the occupier, then the 5 queued requests as one batch)",
             (long long)c.executions);
  assert_int_equal(c.inferences, 6);
  assert_int_equal(c.session_inferences, 6);
  assert_int_equal(c.ok, 6);
  /* batch_sizes: one execution of 8 rows, one of 5. */
  assert_int_equal(c.batches, 2);
  assert_int_equal(c.rows, 13);
  assert_int_equal(c.cum[2], 0); /* none <= 4 rows */
  assert_int_equal(c.cum[3], 2); /* both <= 8 */
  assert_int_equal(c.cum[13], 2);
  /* The batch's requests finished together, after the occupier. */
  for (uint64_t id = 1; id <= 5; id++) assert_true(rec_get(&rec, id).t_us >= rec.e[0].t_us);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* Batched requests that name the outputs they want each get them (the
 * names outlive the first request of the batch, answered first). */
static void test_batched_requests_naming_outputs(void **state) {
  (void)state;
  sip_server_t *s =
      new_server(POOL("b", BATCHING(8, 50000, ""), "shape: '-1,2', delay_ms: 50"));
  rec_t rec;
  rec_init(&rec);
  static const char *const out[] = {"output", NULL};
  submit(s, req("b", 100, 8), &rec);
  wait_running(s, "b");
  for (uint64_t id = 1; id <= 3; id++) submit(s, req_ex("b", id, 1, 2, 0, 0, out), &rec);
  assert_int_equal(rec_wait(&rec, 4, 5000), 4);
  for (uint64_t id = 1; id <= 3; id++) {
    entry_t e = rec_get(&rec, id);
    assert_echo(&e, 1, 2);
  }
  assert_int_equal(counts(s, "b").executions, 2);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* Requests whose non-batch dims differ are never in one execution. */
static void test_different_dims_not_mixed(void **state) {
  (void)state;
  sip_server_t *s =
      new_server(POOL("b", BATCHING(8, 100000, ""), "shape: '-1,-1', delay_ms: 100"));
  rec_t rec;
  rec_init(&rec);
  submit(s, req_ex("b", 100, 8, 2, 0, 0, NULL), &rec);
  wait_running(s, "b");
  submit(s, req_ex("b", 1, 1, 2, 0, 0, NULL), &rec);
  submit(s, req_ex("b", 2, 1, 3, 0, 0, NULL), &rec);
  submit(s, req_ex("b", 3, 1, 2, 0, 0, NULL), &rec);
  submit(s, req_ex("b", 4, 2, 3, 0, 0, NULL), &rec);
  submit(s, req_ex("b", 5, 2, 2, 0, 0, NULL), &rec);
  assert_int_equal(rec_wait(&rec, 6, 5000), 6);
  static const int64_t rows[] = {0, 1, 1, 1, 2, 2}, cols[] = {0, 2, 3, 2, 3, 2};
  for (uint64_t id = 1; id <= 5; id++) {
    entry_t e = rec_get(&rec, id);
    assert_echo(&e, rows[id], cols[id]);
  }
  counts_t c = counts(s, "b");
  if (c.executions != 3)
    fail_msg("%lld executions; want 3: the occupier, [1,3,5] (dim 1 = 2), [2,4] (dim 1 = 3)",
             (long long)c.executions);
  assert_int_equal(c.rows, 8 + 4 + 3);
  assert_int_equal(c.inferences, 6);
  /* [1,3,5] formed first (1 is the oldest) and completed together. */
  assert_true(rec_pos(&rec, 5) < rec_pos(&rec, 2));
  assert_true(rec_pos(&rec, 3) < rec_pos(&rec, 4));
  sip_server_free(s);
  rec_destroy(&rec);
}

/* Requests asking for different outputs are never in one execution (an
 * ONNX model with outputs sum = x + x and prod = x * x). */
static void test_different_outputs_not_mixed(void **state) {
  (void)state;
  need_models();
  char pools[1024];
  snprintf(pools, sizeof pools,
           "  - {name: two, model_path: %s/two_out.onnx, pool_size: 1, dynamic_batching: "
           "{max_batch_size: 8, max_queue_delay_us: 150000}}\n",
           model_dir);
  sip_server_t *s = new_server(pools);
  rec_t rec;
  rec_init(&rec);
  static const char *const sum[] = {"sum", NULL}, *const prod[] = {"prod", NULL};
  /* Within the first request's 150 ms wait, all four arrive. */
  for (uint64_t id = 1; id <= 4; id++) {
    sip_request_t *r = sip_request_new("two");
    sip_request_set_id(r, id);
    float v[2] = {(float)id, (float)id + 0.5f};
    int64_t d[2] = {1, 2};
    assert_null(
        sip_request_add_input(r, sip_tensor_new_copy("x", SIP_DTYPE_FLOAT32, 2, d, v, sizeof v)));
    for (const char *const *o = id % 2 ? sum : prod; *o; o++)
      assert_null(sip_request_add_output(r, *o));
    submit(s, r, &rec);
  }
  assert_int_equal(rec_wait(&rec, 4, 5000), 4);
  for (uint64_t id = 1; id <= 4; id++) {
    entry_t e = rec_get(&rec, id);
    assert_code(&e, SIP_OK);
    assert_int_equal(e.n_outputs, 1);
    float x0 = (float)id, x1 = (float)id + 0.5f;
    const char *want = id % 2 ? "sum" : "prod";
    if (strcmp(e.out_name, want) != 0)
      fail_msg("request %llu asked for '%s' and got '%s'", (unsigned long long)id, want,
               e.out_name);
    assert_int_equal(e.dims[0], 1);
    assert_int_equal(e.nv, 2);
    float w0 = id % 2 ? x0 + x0 : x0 * x0, w1 = id % 2 ? x1 + x1 : x1 * x1;
    if (e.v[0] != w0 || e.v[1] != w1)
      fail_msg("request %llu: %s = [%g, %g], want [%g, %g]", (unsigned long long)id, want,
               (double)e.v[0], (double)e.v[1], (double)w0, (double)w1);
  }
  counts_t c = counts(s, "two");
  if (c.executions != 2)
    fail_msg("%lld executions; want 2 ([1,3] for sum, [2,4] for prod)", (long long)c.executions);
  assert_int_equal(c.rows, 4);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* A preferred batch size dispatches as soon as it is reached. */
static void test_preferred_size_dispatches_at_once(void **state) {
  (void)state;
  sip_server_t *s = new_server(
      POOL("b", BATCHING(8, 1000000, ", preferred_batch_sizes: [4]"), "shape: '-1,2', "
                                                                       "delay_ms: 50"));
  rec_t rec;
  rec_init(&rec);
  /* (a) reached from the queue: four queued behind an occupier. */
  submit(s, req("b", 100, 8), &rec);
  wait_running(s, "b");
  for (uint64_t id = 1; id <= 4; id++) submit(s, req("b", id, 1), &rec);
  assert_int_equal(rec_wait(&rec, 5, 5000), 5);
  uint64_t occ_done = rec_get(&rec, 100).t_us, last = 0;
  for (uint64_t id = 1; id <= 4; id++) {
    entry_t e = rec_get(&rec, id);
    assert_echo(&e, 1, 2);
    if (e.t_us > last) last = e.t_us;
  }
  /* Without the preferred size the batch would wait ~1 s for more. */
  if (last - occ_done > 400000)
    fail_msg("the batch of 4 completed %llu ms after the occupier; want < 400 ms (preferred "
             "size 4 dispatches at once, max_queue_delay is 1 s)",
             (unsigned long long)(last - occ_done) / 1000);
  counts_t c = counts(s, "b");
  assert_int_equal(c.executions, 2);
  assert_int_equal(c.rows, 12);

  /* (b) reached while a batch forms: it stops waiting when the 4th arrives. */
  uint64_t t0 = sip__now_us();
  submit(s, req("b", 11, 1), &rec);
  wait_taken(s, "b"); /* the session holds it and waits for more now */
  submit(s, req("b", 12, 2), &rec);
  submit(s, req("b", 13, 1), &rec);
  assert_int_equal(rec_wait(&rec, 8, 5000), 8);
  for (uint64_t id = 11; id <= 13; id++) {
    entry_t e = rec_get(&rec, id);
    assert_echo(&e, id == 12 ? 2 : 1, 2);
    if (e.t_us - t0 > 500000)
      fail_msg("request %llu completed after %llu ms; want < 500 ms", (unsigned long long)id,
               (unsigned long long)(e.t_us - t0) / 1000);
  }
  c = counts(s, "b");
  assert_int_equal(c.executions, 3);
  assert_int_equal(c.rows, 16);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* max_queue_delay: a lone request waits about the delay, then runs alone;
 * without a delay it is dispatched at once. */
static void test_max_queue_delay(void **state) {
  (void)state;
  sip_server_t *s = new_server(POOL("d", BATCHING(8, 150000, ""), "shape: '-1,2'")
                                   POOL("z", BATCHING(8, 0, ""), "shape: '-1,2'"));
  sip_response_t *resp = NULL;
  uint64_t t0 = sip__now_us();
  assert_null(sip_server_infer(s, req("d", 1, 1), &resp));
  uint64_t took = sip__now_us() - t0;
  assert_int_equal(sip_response_code(resp), SIP_OK);
  uint64_t q = 0;
  sip_response_timings(resp, &q, NULL, NULL);
  sip_response_free(resp);
  if (took < 145000 || took > 450000)
    fail_msg("a lone request took %llu ms; want about max_queue_delay (150 ms)",
             (unsigned long long)took / 1000);
  assert_true(q >= 140000); /* the wait is queue time */
  counts_t c = counts(s, "d");
  assert_int_equal(c.executions, 1);
  assert_int_equal(c.rows, 1);
  assert_int_equal(c.cum[0], 1);

  for (int i = 0; i < 3; i++) {
    t0 = sip__now_us();
    assert_null(sip_server_infer(s, req("z", 1, 1), &resp));
    took = sip__now_us() - t0;
    assert_int_equal(sip_response_code(resp), SIP_OK);
    sip_response_free(resp);
    if (took > 100000)
      fail_msg("a lone request without a delay took %llu ms; want it dispatched at once",
               (unsigned long long)took / 1000);
  }
  assert_int_equal(counts(s, "z").executions, 3);
  sip_server_free(s);
}

/* A batch never waits past the earliest deadline in it: a request whose
 * timeout is shorter than max_queue_delay still runs, on time. */
static void test_batch_never_waits_past_deadline(void **state) {
  (void)state;
  sip_server_t *s =
      new_server(POOL("b", BATCHING(8, 1000000, ""), "shape: '-1,2', delay_ms: 20"));
  rec_t rec;
  rec_init(&rec);
  /* A full batch first, so the pool knows what an execution costs. */
  sip_response_t *resp = NULL;
  assert_null(sip_server_infer(s, req("b", 9, 8), &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  sip_response_free(resp);
  uint64_t t0 = sip__now_us();
  submit(s, req_ex("b", 1, 1, 2, 0, 0, NULL), &rec);   /* no deadline: would wait 1 s */
  submit(s, req_ex("b", 2, 1, 2, 0, 150, NULL), &rec); /* joins; 150 ms to live */
  assert_int_equal(rec_wait(&rec, 2, 5000), 2);
  for (uint64_t id = 1; id <= 2; id++) {
    entry_t e = rec_get(&rec, id);
    assert_echo(&e, 1, 2);
    if (e.t_us - t0 > 500000)
      fail_msg("request %llu completed after %llu ms; the batch waited past the 150 ms deadline "
               "toward max_queue_delay (1 s)",
               (unsigned long long)id, (unsigned long long)(e.t_us - t0) / 1000);
  }
  counts_t c = counts(s, "b");
  assert_int_equal(c.executions, 2); /* the first, then 1 and 2 together */
  assert_int_equal(c.rows, 10);
  assert_int_equal(c.deadline, 0);

  /* Alone, too. */
  t0 = sip__now_us();
  submit(s, req_ex("b", 3, 1, 2, 0, 100, NULL), &rec);
  assert_int_equal(rec_wait(&rec, 3, 5000), 3);
  entry_t e = rec_get(&rec, 3);
  assert_echo(&e, 1, 2);
  assert_true(e.t_us - t0 < 500000);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* A request whose deadline passes after its batch formed but before the
 * batch could run (the only compute slot is busy) is DEADLINE_EXCEEDED,
 * never executed; the rest of the batch runs. */
static void test_deadline_expires_inside_batch(void **state) {
  (void)state;
  sip_server_t *s = new_server_ex(", execution_slots: 1",
                                  POOL("hog", "", "shape: '-1,2', delay_ms: 400")
                                      POOL("b", BATCHING(8, 20000, ""), "shape: '-1,2'"));
  rec_t rec, hog;
  rec_init(&rec);
  rec_init(&hog);
  submit(s, req("hog", 1, 1), &hog);
  wait_running(s, "hog");
  submit(s, req_ex("b", 1, 1, 2, 0, 0, NULL), &rec);
  submit(s, req_ex("b", 2, 1, 2, 0, 100, NULL), &rec);
  assert_int_equal(rec_wait(&rec, 2, 5000), 2);
  assert_int_equal(rec_wait(&hog, 1, 5000), 1);
  entry_t e1 = rec_get(&rec, 1), e2 = rec_get(&rec, 2);
  assert_echo(&e1, 1, 2);
  if (e2.code != SIP_DEADLINE_EXCEEDED)
    fail_msg("request 2 (timeout 100 ms) got %s after %llu ms queued; it waited in its batch for "
             "the compute slot past its deadline, so it must not run: want DEADLINE_EXCEEDED",
             sip_code_name(e2.code), (unsigned long long)e2.queue_us / 1000);
  assert_non_null(strstr(e2.msg, "timeout of 100 ms"));
  assert_int_equal(e2.n_outputs, 0);
  counts_t c = counts(s, "b");
  assert_int_equal(c.inferences, 1); /* request 2 never counted */
  assert_int_equal(c.session_inferences, 1);
  assert_int_equal(c.rows, 1);
  assert_int_equal(c.deadline, 1);
  assert_int_equal(c.ok, 1);
  sip_server_free(s);
  rec_destroy(&rec);
  rec_destroy(&hog);
}

/* Fixed batch dim (builtin shape "4,2"): short batches are padded, and the
 * padding never reaches a response. */
static void test_fixed_batch_padding(void **state) {
  (void)state;
  sip_server_t *s = new_server(
      POOL("rep", BATCHING(8, 60000, ", padding_strategy: replicate_last"),
           "shape: '4,2', delay_ms: 50")
          POOL("zero", BATCHING(8, 60000, ", padding_strategy: zero"), "shape: '4,2', delay_ms: 50"));
  static const char *const pools[] = {"rep", "zero"};
  for (int k = 0; k < 2; k++) {
    const char *p = pools[k];
    rec_t rec;
    rec_init(&rec);
    /* One request of 1 row, alone. */
    submit(s, req(p, 1, 1), &rec);
    assert_int_equal(rec_wait(&rec, 1, 5000), 1);
    assert_echo(&rec.e[0], 1, 2);
    counts_t c = counts(s, p);
    assert_int_equal(c.executions, 1);
    assert_int_equal(c.rows, 4); /* the model ran on 4 rows */
    /* 1 + 2 rows padded to 4; then 3 rows, as 2 rows do not fit with them. */
    submit(s, req(p, 100, 4), &rec); /* exactly the model's batch: no padding */
    wait_running(s, p);
    submit(s, req(p, 2, 1), &rec);
    submit(s, req(p, 3, 2), &rec);
    submit(s, req(p, 4, 3), &rec);
    assert_int_equal(rec_wait(&rec, 5, 5000), 5);
    assert_echo(&rec.e[1], 4, 2);
    for (uint64_t id = 2; id <= 4; id++) {
      entry_t e = rec_get(&rec, id);
      assert_echo(&e, (int64_t)id - 1, 2);
    }
    c = counts(s, p);
    if (c.executions != 4)
      fail_msg("pool %s: %lld executions; want 4 (1 | occupier | 1+2 padded | 3 padded)", p,
               (long long)c.executions);
    assert_int_equal(c.rows, 16);
    assert_int_equal(c.inferences, 5);
    /* More rows than the model takes: refused at admission. */
    EXPECT_REJECT(s, req(p, 9, 5), &rec, SIP_INVALID_ARGUMENT, "received shape [5,2]",
                  "expected [4,2]");
    assert_int_equal(rec_count(&rec), 5);
    rec_destroy(&rec);
  }
  sip_server_free(s);
}

/* padding_strategy none with a fixed batch dim: short requests are refused. */
static void test_fixed_batch_without_padding(void **state) {
  (void)state;
  sip_server_t *s = new_server(POOL("n", BATCHING(4, 1000, ""), "shape: '4,2'"));
  rec_t rec;
  rec_init(&rec);
  EXPECT_REJECT(s, req("n", 1, 1), &rec, SIP_INVALID_ARGUMENT, "input 'input'", "pool 'n'",
                "received shape [1,2]", "expected [4,2]");
  EXPECT_REJECT(s, req("n", 2, 3), &rec, SIP_INVALID_ARGUMENT, "received shape [3,2]");
  sip_response_t *resp = NULL;
  assert_null(sip_server_infer(s, req("n", 3, 4), &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  sip_response_free(resp);
  counts_t c = counts(s, "n");
  assert_int_equal(c.invalid, 2);
  assert_int_equal(c.executions, 1);
  assert_int_equal(rec_count(&rec), 0);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* ==== queue policy ====================================================== */

static void test_queue_full(void **state) {
  (void)state;
  sip_server_t *s = new_server(POOL("q", ", queue: {max_size: 2}", "shape: '-1,2', delay_ms: 100"));
  rec_t rec;
  rec_init(&rec);
  submit(s, req("q", 1, 1), &rec);
  wait_running(s, "q"); /* running requests do not count against the queue */
  submit(s, req("q", 2, 1), &rec);
  submit(s, req("q", 3, 1), &rec);
  uint64_t t0 = sip__now_us();
  EXPECT_REJECT(s, req("q", 4, 1), &rec, SIP_RESOURCE_EXHAUSTED, "queue of pool 'q' is full",
                "2 requests", "queue.max_size");
  assert_true(sip__now_us() - t0 < 50000); /* at once, not after waiting */
  assert_int_equal(rec_wait(&rec, 3, 5000), 3);
  for (uint64_t id = 1; id <= 3; id++) {
    entry_t e = rec_get(&rec, id);
    assert_echo(&e, 1, 2);
  }
  counts_t c = counts(s, "q");
  assert_int_equal(c.exhausted, 1);
  assert_int_equal(c.ok, 3);
  assert_int_equal(c.inferences, 3);
  /* Room again once drained. */
  sip_response_t *resp = NULL;
  assert_null(sip_server_infer(s, req("q", 5, 1), &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  sip_response_free(resp);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* queue.default_timeout_ms applies to requests without a timeout;
 * an explicit one wins. */
static void test_default_timeout(void **state) {
  (void)state;
  sip_server_t *s = new_server(
      POOL("t", ", queue: {default_timeout_ms: 40}", "shape: '-1,2', delay_ms: 150"));
  rec_t rec;
  rec_init(&rec);
  submit(s, req("t", 1, 1), &rec);
  wait_running(s, "t");
  submit(s, req("t", 2, 1), &rec);                     /* default: 40 ms */
  submit(s, req_ex("t", 3, 1, 2, 0, 5000, NULL), &rec); /* explicit: 5 s */
  assert_int_equal(rec_wait(&rec, 3, 5000), 3);
  entry_t e2 = rec_get(&rec, 2), e3 = rec_get(&rec, 3);
  assert_code(&e2, SIP_DEADLINE_EXCEEDED);
  assert_non_null(strstr(e2.msg, "timeout of 40 ms"));
  assert_int_equal(rec_pos(&rec, 2), 0); /* expired while the occupier ran */
  assert_echo(&e3, 1, 2);
  counts_t c = counts(s, "t");
  assert_int_equal(c.inferences, 2);
  assert_int_equal(c.deadline, 1);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* timeout_action delay: an expired request is not rejected; it runs later,
 * after every request that did not expire. */
static void test_timeout_action_delay(void **state) {
  (void)state;
  sip_server_t *s = new_server(
      POOL("t", ", queue: {timeout_action: delay}", "shape: '-1,2', delay_ms: 150"));
  rec_t rec;
  rec_init(&rec);
  submit(s, req("t", 1, 1), &rec);
  wait_running(s, "t");
  submit(s, req_ex("t", 2, 1, 2, 1, 30, NULL), &rec); /* high priority, expires at 30 ms */
  submit(s, req_ex("t", 3, 1, 2, 3, 0, NULL), &rec);  /* low priority, no deadline */
  /* Until request 2 has moved to the delayed queue (its deadline passed
   * while the occupier ran) or, on a machine slow enough, answers began. */
  for (int i = 0;; i++) {
    json_t *root = status(s);
    json_t *qb = json_object_get(pool_status(root, "t"), "queued_by_priority");
    int delayed = (int)jint(qb, "delayed"), high = (int)jint(qb, "high"), low = (int)jint(qb, "low");
    json_decref(root);
    if (rec_count(&rec) != 0) break;
    if (delayed == 1) {
      assert_int_equal(high, 0);
      assert_int_equal(low, 1);
      break;
    }
    if (i > 5000) fail_msg("request 2 never moved to the delayed queue");
    sleep_ms(1);
  }
  assert_int_equal(rec_wait(&rec, 3, 5000), 3);
  static const uint64_t want[] = {1, 3, 2};
  assert_order(&rec, want, 3);
  for (uint64_t id = 1; id <= 3; id++) {
    entry_t e = rec_get(&rec, id);
    assert_echo(&e, 1, 2);
  }
  counts_t c = counts(s, "t");
  assert_int_equal(c.deadline, 0);
  assert_int_equal(c.ok, 3);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* Ageing: a low-priority request that has waited 200 ms (ageing_ms 50: it
 * rose to the top level after 100 ms) runs before high-priority requests
 * that arrived after it; with ageing off it runs last. */
static void run_ageing(int ageing_ms, const uint64_t *want) {
  char pools[1024];
  snprintf(pools, sizeof pools,
           POOL("hog", "", "shape: '-1,2', delay_ms: 450")
               POOL("ag", ", queue: {ageing_ms: %d}", "shape: '-1,2', delay_ms: 5"),
           ageing_ms);
  sip_server_t *s = new_server_ex(", execution_slots: 1", pools);
  rec_t rec, hog;
  rec_init(&rec);
  rec_init(&hog);
  submit(s, req("hog", 1, 1), &hog);
  wait_running(s, "hog"); /* holds the only compute slot for 450 ms */
  submit(s, req_ex("ag", 100, 1, 2, 1, 0, NULL), &rec);
  wait_taken(s, "ag"); /* ag's session holds 100, waiting for the slot */
  submit(s, req_ex("ag", 1, 1, 2, 3, 0, NULL), &rec); /* low */
  sleep_ms(200); /* the scenario: request 1 ages for 200 ms in the queue */
  if (rec_count(&hog) != 0) fail_msg("the hog finished early; the test cannot tell the order");
  for (uint64_t id = 2; id <= 4; id++) submit(s, req_ex("ag", id, 1, 2, 1, 0, NULL), &rec);
  assert_int_equal(rec_wait(&rec, 5, 5000), 5);
  assert_order(&rec, want, 5);
  for (int i = 0; i < 5; i++) assert_echo(&rec.e[i], 1, 2);
  assert_true(rec_get(&rec, 1).queue_us >= 200000); /* it did wait 200 ms */
  assert_int_equal(rec_wait(&hog, 1, 5000), 1);
  sip_server_free(s);
  rec_destroy(&rec);
  rec_destroy(&hog);
}

static void test_ageing(void **state) {
  (void)state;
  static const uint64_t aged[] = {100, 1, 2, 3, 4};
  run_ageing(50, aged);
  static const uint64_t strict[] = {100, 2, 3, 4, 1};
  run_ageing(0, strict);
}

/* ==== cancellation ====================================================== */

static void test_cancel_queued(void **state) {
  (void)state;
  sip_server_t *s = new_server(POOL("c", "", "shape: '-1,2', delay_ms: 150"));
  rec_t rec;
  rec_init(&rec);
  sip_cancel_token_t *tok = sip_cancel_token_new();
  assert_non_null(tok);
  submit(s, req("c", 100, 1), &rec);
  wait_running(s, "c");
  for (uint64_t id = 1; id <= 3; id++) {
    sip_request_t *r = req("c", id, 1);
    sip_request_set_cancel_token(r, tok);
    submit(s, r, &rec);
  }
  submit(s, req("c", 4, 1), &rec); /* not carrying the token */
  sip_server_cancel(s, tok);
  /* The three complete at once, while the occupier still runs. */
  assert_true(rec_wait(&rec, 3, 5000) >= 3);
  for (int i = 0; i < 3; i++) {
    pthread_mutex_lock(&rec.mu);
    entry_t e = rec.e[i];
    pthread_mutex_unlock(&rec.mu);
    assert_true(e.id >= 1 && e.id <= 3);
    assert_code(&e, SIP_CANCELLED);
    assert_int_equal(e.n_outputs, 0);
  }
  /* Later submissions with the token are refused, without a callback. */
  sip_request_t *r = req("c", 5, 1);
  sip_request_set_cancel_token(r, tok);
  EXPECT_REJECT(s, r, &rec, SIP_CANCELLED, "cancelled");
  sip_cancel_token_free(tok); /* the queued requests held their own references */

  assert_int_equal(rec_wait(&rec, 5, 5000), 5);
  entry_t occ = rec_get(&rec, 100), four = rec_get(&rec, 4);
  assert_echo(&occ, 1, 2);
  assert_echo(&four, 1, 2);
  assert_true(rec_pos(&rec, 100) == 3);
  counts_t c = counts(s, "c");
  assert_int_equal(c.cancelled, 4); /* 3 queued + 1 refused */
  assert_int_equal(c.ok, 2);
  assert_int_equal(c.inferences, 2); /* the cancelled never ran */
  assert_int_equal(c.session_inferences, 2);
  assert_int_equal(c.executions, 2);
  sip_server_free(s);
  assert_int_equal(rec.n, 5);
  rec_destroy(&rec);
}

/* A request cancelled while its batch is forming never runs; the rest of
 * the batch does. */
static void test_cancel_in_forming_batch(void **state) {
  (void)state;
  sip_server_t *s = new_server(POOL("b", BATCHING(8, 250000, ""), "shape: '-1,2'"));
  rec_t rec;
  rec_init(&rec);
  sip_cancel_token_t *tok = sip_cancel_token_new();
  sip_request_t *r = req("b", 1, 1);
  sip_request_set_cancel_token(r, tok);
  submit(s, r, &rec);
  submit(s, req("b", 2, 2), &rec);
  wait_taken(s, "b"); /* both are in the forming batch now (250 ms to go) */
  sip_server_cancel(s, tok);
  sip_cancel_token_free(tok);
  assert_int_equal(rec_wait(&rec, 2, 5000), 2);
  entry_t e1 = rec_get(&rec, 1), e2 = rec_get(&rec, 2);
  assert_code(&e1, SIP_CANCELLED);
  assert_echo(&e2, 2, 2);
  counts_t c = counts(s, "b");
  assert_int_equal(c.executions, 1);
  assert_int_equal(c.rows, 2); /* request 1's row was not in it */
  assert_int_equal(c.inferences, 1);
  assert_int_equal(c.cancelled, 1);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* ==== elastic batching ================================================== */

/* Submits at about `rps` until pool `name` reports batch_level `want` or
 * `limit_ms` passes; returns 1 when it did. */
static int drive_to_level(sip_server_t *s, rec_t *rec, uint64_t *id, int rps, const char *want,
                          int limit_ms) {
  uint64_t t0 = sip__now_us(), next = t0, period = 1000000 / (uint64_t)rps;
  while (sip__now_us() - t0 < (uint64_t)limit_ms * 1000) {
    submit(s, req("e", (*id)++, 1), rec);
    next += period;
    if (strcmp(counts(s, "e").level, want) == 0) return 1;
    uint64_t now = sip__now_us();
    if (next > now) sleep_ms((int)((next - now + 999) / 1000));
  }
  return strcmp(counts(s, "e").level, want) == 0;
}

static void test_elastic_levels(void **state) {
  (void)state;
  sip_server_t *s = new_server(POOL(
      "e",
      ", batch_strategies: {low: {max_batch: 1, timeout: 0}, medium: {max_batch: 4, timeout: 1}, "
      "high: {max_batch: 8, timeout: 2}, rate_thresholds: [20, 100]}",
      "shape: '-1,2'"));
  rec_t rec;
  rec_init(&rec);
  uint64_t id = 1;
  assert_string_equal(counts(s, "e").level, "low");
  /* Low traffic (~8 req/s) stays low. */
  for (int i = 0; i < 3; i++) {
    if (i) sleep_ms(120);
    submit(s, req("e", id++, 1), &rec);
  }
  assert_string_equal(counts(s, "e").level, "low");
  /* ~50 req/s: medium. */
  if (!drive_to_level(s, &rec, &id, 50, "medium", 700))
    fail_msg("50 req/s for 0.7 s did not reach level medium (thresholds [20, 100]); level %s",
             counts(s, "e").level);
  /* A burst of ~500 req/s: high within half a second. */
  if (!drive_to_level(s, &rec, &id, 500, "high", 600))
    fail_msg("a burst of 500 req/s for 0.6 s did not reach level high; level %s",
             counts(s, "e").level);
  int n = (int)id - 1;
  if (rec_wait(&rec, n, 5000) != n) fail_msg("only %d of %d requests completed", rec.n, n);
  for (int i = 0; i < MAXR && i < n; i++) assert_code(&rec.e[i], SIP_OK);
  counts_t c = counts(s, "e");
  assert_int_equal(c.inferences, n);
  assert_int_equal(c.rows, n);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* ==== memory quota ====================================================== */

static void test_memory_quota(void **state) {
  (void)state;
  need_models();
  char pools[2048];
  snprintf(pools, sizeof pools,
           POOL("tiny", ", resource_quota: {max_memory_mb: 1}", "shape: '-1,2'")
           "  - {name: big, model_path: %s/big.onnx, pool_size: 1, resource_quota: "
           "{max_memory_mb: 16}}\n" POOL("other", "", "shape: '-1,2'"),
           model_dir);
  sip_server_t *s = new_server(pools);
  counts_t tiny = counts(s, "tiny"), big = counts(s, "big"), other = counts(s, "other");
  assert_string_equal(tiny.state, "READY"); /* the builtin backend takes ~0 MiB */
  assert_true(tiny.memory_bytes <= (1 << 20));
  assert_string_equal(other.state, "READY");
  if (strcmp(big.state, "FAILED") != 0)
    fail_msg("pool big (64 MiB of weights, quota 16 MiB) is %s, want FAILED", big.state);
  const char *e = big.error;
  if (!strstr(e, "RESOURCE_EXHAUSTED") || !strstr(e, "measured at load") ||
      !strstr(e, "max_memory_mb") || !strstr(e, "allows 16 MiB"))
    fail_msg("error of pool big: \"%s\"; want RESOURCE_EXHAUSTED naming the measured size and "
             "the 16 MiB allowed",
             e);
  const char *take = strstr(e, "take ");
  assert_non_null(take);
  double mib = strtod(take + 5, NULL);
  if (mib <= 16.0) fail_msg("measured %.1f MiB in \"%s\"; want > 16", mib, e);

  rec_t rec;
  rec_init(&rec);
  sip_request_t *r = sip_request_new("big");
  int64_t idx[1] = {0}, d[1] = {1};
  assert_null(sip_request_add_input(
      r, sip_tensor_new_copy("idx", SIP_DTYPE_INT64, 1, d, idx, sizeof idx)));
  EXPECT_REJECT(s, r, &rec, SIP_UNAVAILABLE, "pool 'big' failed to load", "RESOURCE_EXHAUSTED");
  for (int k = 0; k < 2; k++) {
    sip_response_t *resp = NULL;
    assert_null(sip_server_infer(s, req(k ? "other" : "tiny", 7, 2), &resp));
    assert_int_equal(sip_response_code(resp), SIP_OK);
    sip_response_free(resp);
  }
  sip_server_free(s);
  rec_destroy(&rec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batch_formation_and_scatter),
      cmocka_unit_test(test_batched_requests_naming_outputs),
      cmocka_unit_test(test_different_dims_not_mixed),
      cmocka_unit_test(test_different_outputs_not_mixed),
      cmocka_unit_test(test_preferred_size_dispatches_at_once),
      cmocka_unit_test(test_max_queue_delay),
      cmocka_unit_test(test_batch_never_waits_past_deadline),
      cmocka_unit_test(test_deadline_expires_inside_batch),
      cmocka_unit_test(test_fixed_batch_padding),
      cmocka_unit_test(test_fixed_batch_without_padding),
      cmocka_unit_test(test_queue_full),
      cmocka_unit_test(test_default_timeout),
      cmocka_unit_test(test_timeout_action_delay),
      cmocka_unit_test(test_ageing),
      cmocka_unit_test(test_cancel_queued),
      cmocka_unit_test(test_cancel_in_forming_batch),
      cmocka_unit_test(test_elastic_levels),
      cmocka_unit_test(test_memory_quota),
  };
  /* e.g. SIP_TEST_FILTER='test_ageing' or SIP_TEST_SKIP='*deadline*' */
  if (getenv("SIP_TEST_FILTER")) cmocka_set_test_filter(getenv("SIP_TEST_FILTER"));
  if (getenv("SIP_TEST_SKIP")) cmocka_set_skip_filter(getenv("SIP_TEST_SKIP"));
  return cmocka_run_group_tests(tests, NULL, group_teardown);
}
