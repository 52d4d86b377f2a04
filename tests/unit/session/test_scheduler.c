/* Scheduler tests through the public in-process API (include/sip/server.h)
 * with builtin pools: priority order, the pool's default priority, deadlines
 * expired while queued, admission errors, injected failures and drain on
 * shutdown. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "inproc.h"
#include "session/engine.h" /* struct sip_request: to build what only the wire can send */
#include "sip/sip.h"

/* ---- completion recorder: inproc.h ---- */

/* make_req's input: [id, id + 0.5]. */
static int echo_matches(const sip_response_t *resp) {
  const sip_tensor_t *t = sip_response_output_by_name(resp, "output");
  if (!t || t->dtype != SIP_DTYPE_FLOAT32 || t->rank != 1 || t->dims[0] != 2 || t->nbytes != 8)
    return 0;
  const float *f = t->data;
  float id = (float)sip_response_request_id(resp);
  return f[0] == id && f[1] == id + 0.5f;
}

/* The recorded answer is OK with output "output" equal to make_req's input. */
static int echo_ok(const entry_t *e) {
  float id = (float)e->id;
  return e->code == SIP_OK && !strcmp(e->out_name, "output") && e->rank == 1 &&
         e->dims[0] == 2 && e->nv == 2 && e->v[0] == id && e->v[1] == id + 0.5f;
}


static const entry_t *rec_find(rec_t *r, uint64_t id) {
  for (int i = 0; i < r->n && i < MAXR; i++)
    if (r->e[i].id == id) return &r->e[i];
  return NULL;
}

static void assert_order(rec_t *r, const uint64_t *want, int n) {
  char got_s[256] = "", want_s[256] = "";
  for (int i = 0; i < n; i++) {
    snprintf(got_s + strlen(got_s), sizeof got_s - strlen(got_s), "%s%llu", i ? "," : "",
             (unsigned long long)(i < r->n ? r->e[i].id : 0));
    snprintf(want_s + strlen(want_s), sizeof want_s - strlen(want_s), "%s%llu", i ? "," : "",
             (unsigned long long)want[i]);
  }
  assert_int_equal(r->n, n);
  if (strcmp(got_s, want_s) != 0) fail_msg("completion order %s, want %s", got_s, want_s);
  for (int i = 0; i < n; i++) {
    if (r->e[i].code != SIP_OK)
      fail_msg("request %llu: %s %s", (unsigned long long)r->e[i].id, sip_code_name(r->e[i].code),
               r->e[i].msg);
    assert_true(echo_ok(&r->e[i]));
  }
}

/* ---- server and request helpers --------------------------------------- */

static sip_server_t *new_server(const char *pools_yaml) {
  sip_server_t *s = new_server_ex("", pools_yaml);
  assert_int_equal(sip_server_endpoint_count(s), 0);
  return s;
}



/* Waits until pool `name` has nothing queued and session 0 RUNNING, i.e. the
 * request just submitted occupies it. */
static void wait_running(sip_server_t *s, const char *name) {
  for (int i = 0; i < 4000; i++) {
    json_t *root = status(s);
    json_t *p = pool_status(root, name);
    json_t *s0 = json_array_get(json_object_get(p, "sessions"), 0);
    int running = jint(p, "queued_requests") == 0 &&
                  strcmp(json_string_value(json_object_get(s0, "state")), "RUNNING") == 0;
    json_decref(root);
    if (running) return;
    struct timespec ts = {0, 500000};
    nanosleep(&ts, NULL);
  }
  fail_msg("pool '%s' never started running its request", name);
}

#define BUILTIN(name, extra, opts)                                                           \
  "  - {name: " name ", backend: builtin, pool_size: 1" extra ", backend_options: {" opts \
  "}}\n"

/* ---- (a) priority order ----------------------------------------------- */

static void test_priority_order(void **state) {
  (void)state;
  sip_server_t *s = new_server(BUILTIN("p", "", "delay_ms: 150, shape: '-1'"));
  rec_t rec;
  rec_init(&rec);
  submit(s, make_req("p", 100, 2, 0), &rec); /* occupies the only session */
  wait_running(s, "p");
  submit(s, make_req("p", 1, 3, 0), &rec); /* low */
  submit(s, make_req("p", 2, 2, 0), &rec); /* medium */
  submit(s, make_req("p", 3, 1, 0), &rec); /* high */
  submit(s, make_req("p", 4, 3, 0), &rec); /* low */
  submit(s, make_req("p", 5, 1, 0), &rec); /* high */

  json_t *root = status(s);
  json_t *p = pool_status(root, "p");
  json_t *qb = json_object_get(p, "queued_by_priority");
  int early = rec_count(&rec) == 0; /* the status was taken while all five queued */
  if (early) {
    assert_int_equal(jint(p, "queued_requests"), 5);
    assert_int_equal(jint(qb, "high"), 2);
    assert_int_equal(jint(qb, "medium"), 1);
    assert_int_equal(jint(qb, "low"), 2);
    assert_int_equal(jint(p, "active_sessions"), 1);
  }
  json_decref(root);

  assert_int_equal(rec_wait(&rec, 6, 5000), 6);
  static const uint64_t want[] = {100, 3, 5, 2, 1, 4}; /* high, high, medium, low, low */
  assert_order(&rec, want, 6);
  /* Each waited for those ahead of it. */
  for (int i = 1; i < 6; i++) assert_true(rec.e[i].t_us >= rec.e[i - 1].t_us);
  assert_true(rec.e[5].queue_us >= rec.e[1].queue_us);

  root = status(s);
  p = pool_status(root, "p");
  assert_int_equal(jint(p, "queued_requests"), 0);
  assert_int_equal(jint(json_object_get(p, "requests"), "OK"), 6);
  assert_int_equal(jint(json_array_get(json_object_get(p, "sessions"), 0), "inferences"), 6);
  json_decref(root);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* ---- (b) the pool's default priority ---------------------------------- */

static void test_pool_default_priority(void **state) {
  (void)state;
  sip_server_t *s = new_server(BUILTIN("lowp", ", priority: low", "delay_ms: 150, shape: '-1'")
                                   BUILTIN("highp", ", priority: high",
                                           "delay_ms: 150, shape: '-1'"));
  rec_t lo, hi;
  rec_init(&lo);
  rec_init(&hi);
  /* One pool at a time: the occupying request must still run when the
   * pool's other requests queue, however slow the machine is. */
  submit(s, make_req("lowp", 100, 0, 0), &lo);
  wait_running(s, "lowp");
  /* lowp (default low): a priority-0 request queues behind explicit high and
   * medium ones, and FIFO with an explicit low one submitted after it. */
  submit(s, make_req("lowp", 1, 0, 0), &lo);
  submit(s, make_req("lowp", 2, 3, 0), &lo);
  submit(s, make_req("lowp", 3, 2, 0), &lo);
  submit(s, make_req("lowp", 4, 1, 0), &lo);
  json_t *root = status(s);
  if (rec_count(&lo) == 0) {
    json_t *qb = json_object_get(pool_status(root, "lowp"), "queued_by_priority");
    assert_int_equal(jint(qb, "low"), 2);
    assert_int_equal(jint(qb, "medium"), 1);
    assert_int_equal(jint(qb, "high"), 1);
  }
  json_decref(root);
  assert_int_equal(rec_wait(&lo, 5, 5000), 5);

  submit(s, make_req("highp", 100, 0, 0), &hi);
  wait_running(s, "highp");
  /* highp (default high): a priority-0 request overtakes an earlier medium
   * one and is FIFO with an explicit high one submitted after it. */
  submit(s, make_req("highp", 1, 2, 0), &hi);
  submit(s, make_req("highp", 2, 0, 0), &hi);
  submit(s, make_req("highp", 3, 1, 0), &hi);
  root = status(s);
  if (rec_count(&hi) == 0) {
    json_t *qb = json_object_get(pool_status(root, "highp"), "queued_by_priority");
    assert_int_equal(jint(qb, "high"), 2);
    assert_int_equal(jint(qb, "medium"), 1);
    assert_int_equal(jint(qb, "low"), 0);
  }
  json_decref(root);
  assert_int_equal(rec_wait(&hi, 4, 5000), 4);
  static const uint64_t want_lo[] = {100, 4, 3, 1, 2};
  static const uint64_t want_hi[] = {100, 2, 3, 1};
  assert_order(&lo, want_lo, 5);
  assert_order(&hi, want_hi, 4);
  sip_server_free(s);
  rec_destroy(&lo);
  rec_destroy(&hi);
}

/* ---- (c) deadlines ---------------------------------------------------- */

static void test_deadline_expires_while_queued(void **state) {
  (void)state;
  sip_server_t *s = new_server(BUILTIN("d", "", "delay_ms: 200, shape: '-1'"));
  rec_t rec;
  rec_init(&rec);
  submit(s, make_req("d", 1, 0, 0), &rec);
  wait_running(s, "d");
  uint64_t t0 = sip__now_us();
  submit(s, make_req("d", 2, 0, 50), &rec);   /* expires while queued */
  submit(s, make_req("d", 3, 0, 5000), &rec); /* has time to spare: runs */

  /* The expired one completes on its own, long before the occupier. */
  assert_true(rec_wait(&rec, 1, 2000) >= 1);
  pthread_mutex_lock(&rec.mu);
  entry_t first = rec.e[0];
  pthread_mutex_unlock(&rec.mu);
  assert_int_equal(first.id, 2);
  if (first.code != SIP_DEADLINE_EXCEEDED)
    fail_msg("code %s: %s", sip_code_name(first.code), first.msg);
  uint64_t took = first.t_us - t0;
  if (took >= 150000) fail_msg("expired request completed %llu us after submit; want < 150 ms",
                               (unsigned long long)took);
  assert_true(took >= 50000);
  assert_non_null(strstr(first.msg, "timeout of 50 ms"));
  assert_non_null(strstr(first.msg, "not executed"));
  assert_non_null(strstr(first.msg, "'d'"));
  assert_true(first.queue_us >= 50000);
  assert_int_equal(first.compute_us, 0);

  assert_int_equal(rec_wait(&rec, 3, 5000), 3);
  const entry_t *occ = rec_find(&rec, 1), *late = rec_find(&rec, 3);
  assert_non_null(occ);
  assert_non_null(late);
  assert_int_equal(occ->code, SIP_OK);
  assert_int_equal(late->code, SIP_OK);
  assert_true(echo_ok(late));
  assert_true(first.t_us < occ->t_us);
  assert_true(occ->t_us <= late->t_us);

  json_t *root = status(s);
  json_t *p = pool_status(root, "d");
  json_t *s0 = json_array_get(json_object_get(p, "sessions"), 0);
  assert_int_equal(jint(s0, "inferences"), 2); /* 1 and 3; 2 never ran */
  assert_int_equal(jint(s0, "errors"), 0);
  json_t *codes = json_object_get(p, "requests");
  assert_int_equal(jint(codes, "OK"), 2);
  assert_int_equal(jint(codes, "DEADLINE_EXCEEDED"), 1);
  assert_int_equal(json_object_size(codes), 2);
  json_decref(root);
  sip_server_free(s);
  rec_destroy(&rec);
}

/* ---- (d) admission errors --------------------------------------------- */

static void test_admission_errors(void **state) {
  (void)state;
  sip_server_t *s = new_server(BUILTIN("p", "", "shape: '-1,4'") BUILTIN("q", "", ""));
  rec_t rec;
  rec_init(&rec);
  float f8[8] = {0};
  int32_t i4[4] = {0};
  int64_t d14[2] = {1, 4}, d23[2] = {2, 3}, d4[1] = {4}, d24[2] = {2, 4};

  /* Unknown pool. */
  sip_request_t *r = sip_request_new("nope");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d14, f8, 16)));
  EXPECT_REJECT(s, r, &rec, SIP_NOT_FOUND, "Request for unknown model: 'nope' is not found");

  /* Wrong dtype. */
  r = sip_request_new("p");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_INT32, 2, d14, i4, 16)));
  EXPECT_REJECT(s, r, &rec, SIP_INVALID_ARGUMENT, "input 'input'", "pool 'p'",
                "received dtype int32", "expected float32");

  /* Wrong shape: a fixed dim, and the rank. */
  r = sip_request_new("p");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d23, f8, 24)));
  EXPECT_REJECT(s, r, &rec, SIP_INVALID_ARGUMENT, "input 'input'", "received shape [2,3]",
                "expected [-1,4]");
  r = sip_request_new("p");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, d4, f8, 16)));
  EXPECT_REJECT(s, r, &rec, SIP_INVALID_ARGUMENT, "input 'input'", "received shape [4]",
                "expected [-1,4]");

  /* Missing input. */
  r = sip_request_new("p");
  EXPECT_REJECT(s, r, &rec, SIP_INVALID_ARGUMENT, "missing input 'input'", "pool 'p'",
                "expected float32 [-1,4]");

  /* Unknown input (next to a good one). */
  r = sip_request_new("p");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d24, f8, 32)));
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("extra", SIP_DTYPE_FLOAT32, 2, d24, f8, 32)));
  EXPECT_REJECT(s, r, &rec, SIP_INVALID_ARGUMENT, "pool 'p' has no input 'extra'",
                "expected one of: 'input'");

  /* Unknown requested output. */
  r = sip_request_new("p");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d24, f8, 32)));
  assert_null(sip_request_add_output(r, "logits"));
  EXPECT_REJECT(s, r, &rec, SIP_INVALID_ARGUMENT, "pool 'p' has no output 'logits'");

  /* A duplicate input: refused when added through the API... */
  r = sip_request_new("p");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d24, f8, 32)));
  sip_error_t *e = sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d24, f8, 32));
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "input 'input' given twice"));
  sip_error_free(e);
  /* ...and by admission when it comes from the wire (which decodes it). */
  sip_tensor_t **v = realloc(r->inputs, 2 * sizeof *v);
  assert_non_null(v);
  r->inputs = v;
  v[r->n_inputs++] = sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d24, f8, 32);
  EXPECT_REJECT(s, r, &rec, SIP_INVALID_ARGUMENT, "input 'input' of pool 'p' is given twice");

  /* Bad priority is refused by the setter. */
  r = sip_request_new("p");
  e = sip_request_set_priority(r, 4);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  e = sip_request_set_priority(r, -1);
  assert_non_null(e);
  sip_error_free(e);
  sip_request_free(r);

  /* The synchronous form reports admission errors the same way. */
  r = sip_request_new("p");
  sip_response_t *resp = (sip_response_t *)1;
  e = sip_server_infer(s, r, &resp);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_null(resp);
  sip_error_free(e);
  r = sip_request_new("nope");
  e = sip_server_infer(s, r, &resp);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_null(resp);
  sip_error_free(e);
  e = sip_server_infer_async(s, NULL, on_done, &rec);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);

  /* A good request still works, and none of the rejected fired a callback. */
  r = sip_request_new("p");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d24, f8, 32)));
  assert_null(sip_server_infer(s, r, &resp));
  assert_non_null(resp);
  assert_int_equal(sip_response_code(resp), SIP_OK);
  assert_int_equal(sip_response_output_count(resp), 1);
  sip_response_free(resp);
  assert_int_equal(rec_count(&rec), 0);

  /* Admission errors on a known pool are counted; NOT_FOUND has no pool. */
  json_t *root = status(s);
  json_t *codes = json_object_get(pool_status(root, "p"), "requests");
  assert_int_equal(jint(codes, "OK"), 1);
  assert_int_equal(jint(codes, "INVALID_ARGUMENT"), 8);
  assert_int_equal(json_object_size(json_object_get(pool_status(root, "q"), "requests")), 0);
  json_decref(root);

  sip_server_free(s);
  assert_int_equal(rec.n, 0);
  rec_destroy(&rec);
}

/* ---- (e) injected failures -------------------------------------------- */

static void test_fail_every(void **state) {
  (void)state;
  sip_server_t *s = new_server(BUILTIN("f", "", "fail_every: 2, shape: '-1'"));
  for (uint64_t id = 1; id <= 6; id++) {
    sip_response_t *resp = NULL;
    assert_null(sip_server_infer(s, make_req("f", id, 0, 0), &resp));
    assert_non_null(resp);
    assert_int_equal(sip_response_request_id(resp), id);
    if (id % 2) {
      assert_int_equal(sip_response_code(resp), SIP_OK);
      assert_true(echo_matches(resp));
    } else {
      if (sip_response_code(resp) != SIP_INTERNAL)
        fail_msg("request %llu: %s, want INTERNAL", (unsigned long long)id,
                 sip_code_name(sip_response_code(resp)));
      const char *m = sip_response_message(resp);
      assert_non_null(strstr(m, "pool 'f' session 0"));
      assert_non_null(strstr(m, "injected failure"));
      assert_int_equal(sip_response_output_count(resp), 0);
    }
    sip_response_free(resp);
  }
  json_t *root = status(s);
  json_t *p = pool_status(root, "f");
  json_t *s0 = json_array_get(json_object_get(p, "sessions"), 0);
  assert_string_equal(json_string_value(json_object_get(s0, "id")), "f/0");
  assert_string_equal(json_string_value(json_object_get(s0, "state")), "READY");
  assert_int_equal(jint(s0, "inferences"), 6);
  assert_int_equal(jint(s0, "errors"), 3);
  json_t *codes = json_object_get(p, "requests");
  assert_int_equal(jint(codes, "OK"), 3);
  assert_int_equal(jint(codes, "INTERNAL"), 3);
  json_decref(root);
  sip_server_free(s);
}

/* ---- (f) drain on shutdown -------------------------------------------- */

static void test_free_drains_queue(void **state) {
  (void)state;
  sip_server_t *s = new_server(BUILTIN("p", "", "delay_ms: 50, shape: '-1'"));
  rec_t rec;
  rec_init(&rec);
  for (uint64_t id = 1; id <= 5; id++) submit(s, make_req("p", id, 0, 0), &rec);
  sip_server_free(s); /* returns only after every queued request is answered */
  static const uint64_t want[] = {1, 2, 3, 4, 5};
  assert_order(&rec, want, 5);
  assert_true(rec.e[4].t_us - rec.e[0].t_us >= 4 * 50000 - 5000);
  rec_destroy(&rec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_priority_order),
      cmocka_unit_test(test_pool_default_priority),
      cmocka_unit_test(test_deadline_expires_while_queued),
      cmocka_unit_test(test_admission_errors),
      cmocka_unit_test(test_fail_every),
      cmocka_unit_test(test_free_drains_queue),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
