/* Dynamic batching through the public in-process API with builtin pools:
 * batch formation and scatter, what may share a batch (dims, requested
 * outputs), preferred sizes, max_queue_delay, deadlines around a forming
 * batch, and fixed batch dims with and without padding.
 *
 * Timing (batching_helpers.h): a pool_size 1 pool whose only session runs
 * an "occupier" request (delay_ms) holds everything submitted meanwhile in
 * its queue, so what forms next is known. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching_helpers.h"

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
  };
  /* e.g. SIP_TEST_FILTER='test_ageing' or SIP_TEST_SKIP='*deadline*' */
  if (getenv("SIP_TEST_FILTER")) cmocka_set_test_filter(getenv("SIP_TEST_FILTER"));
  if (getenv("SIP_TEST_SKIP")) cmocka_set_skip_filter(getenv("SIP_TEST_SKIP"));
  return cmocka_run_group_tests(tests, NULL, group_teardown);
}
