/* Queue policy through the public in-process API with builtin pools:
 * max_size, default_timeout_ms, timeout_action delay, ageing, and the
 * cancellation of queued requests and of requests in a forming batch.
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_queue_full),
      cmocka_unit_test(test_default_timeout),
      cmocka_unit_test(test_timeout_action_delay),
      cmocka_unit_test(test_ageing),
      cmocka_unit_test(test_cancel_queued),
      cmocka_unit_test(test_cancel_in_forming_batch),
  };
  /* e.g. SIP_TEST_FILTER='test_ageing' or SIP_TEST_SKIP='*deadline*' */
  if (getenv("SIP_TEST_FILTER")) cmocka_set_test_filter(getenv("SIP_TEST_FILTER"));
  if (getenv("SIP_TEST_SKIP")) cmocka_set_skip_filter(getenv("SIP_TEST_SKIP"));
  return cmocka_run_group_tests(tests, NULL, group_teardown);
}
