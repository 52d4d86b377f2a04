/* Unit tests of what a pool admits and in which order (src/session:
 * pool.c, pool_model.c, executor.c): admission refusals and their codes,
 * priorities, the queue limit, deadlines expiring in the queue, the
 * default timeout, and cancellation of queued requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_helpers.h"

/* ---- admission ------------------------------------------------------------- */

static void test_admission_refusals(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: a, backend: builtin, backend_options: {shape: '-1'}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  int64_t d1[1] = {2}, d2[2] = {1, 2};
  float f2[2] = {1, 2};
  int32_t i2[2] = {1, 2};

  sip_request_t *r = sip_request_new("a");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("nope", SIP_DTYPE_FLOAT32, 1, d1, f2, sizeof f2)));
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "pool 'a' has no input 'nope'",
            "expected one of: 'input'");

  r = sip_request_new("a");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_INT32, 1, d1, i2, sizeof i2)));
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "input 'input' of pool 'a'",
            "received dtype int32", "expected float32");

  r = sip_request_new("a");
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d2, f2, sizeof f2)));
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "received shape [1,2]", "expected [-1]");

  r = sip_request_new("a");
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "missing input 'input' of pool 'a'",
            "expected float32 [-1]");

  r = make_req("a", 1, 0, 0);
  assert_null(sip_request_add_output(r, "logits"));
  VT_EXPECT(t, "a", r, &rec, SIP_INVALID_ARGUMENT, "pool 'a' has no output 'logits'");

  /* A token cancelled before submission. */
  sip_cancel_token_t *tok = sip_cancel_token_new();
  atomic_store(&tok->cancelled, 1);
  r = make_req("a", 2, 0, 0);
  sip_request_set_cancel_token(r, tok);
  VT_EXPECT(t, "a", r, &rec, SIP_CANCELLED, "request was cancelled");
  sip_cancel_token_free(tok);

  /* Unknown names never reach a pool. */
  sip_error_t *e = vt_submit(t, "zz", make_req("zz", 3, 0, 0), &rec);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "Request for unknown model: 'zz' is not found"));
  sip_error_free(e);

  /* Every refusal was counted with its code, none answered by callback. */
  assert_int_equal(atomic_load(&p->by_code[SIP_INVALID_ARGUMENT]), 5);
  assert_int_equal(atomic_load(&p->by_code[SIP_CANCELLED]), 1);
  assert_int_equal(atomic_load(&p->by_code[SIP_OK]), 0);
  assert_int_equal(atomic_load(&p->st_fail.count), 6);
  assert_int_equal(rec_count(&rec), 0);
  assert_int_equal(atomic_load(&p->base.refs), 1);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- priorities --------------------------------------------------------------- */

static void test_priority_order(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: p, backend: builtin, pool_size: 1, priority: low, "
                     "backend_options: {delay_ms: 100}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  vt_submit_ok(t, "p", make_req("p", 100, 2, 0), &rec); /* occupies the only session */
  wait_running(p);
  vt_submit_ok(t, "p", make_req("p", 1, 3, 0), &rec); /* low */
  vt_submit_ok(t, "p", make_req("p", 2, 0, 0), &rec); /* the pool's default: low */
  vt_submit_ok(t, "p", make_req("p", 3, 2, 0), &rec); /* medium */
  vt_submit_ok(t, "p", make_req("p", 4, 1, 0), &rec); /* high */
  vt_submit_ok(t, "p", make_req("p", 5, 3, 0), &rec); /* low */
  vt_submit_ok(t, "p", make_req("p", 6, 1, 0), &rec); /* high */
  if (rec_count(&rec) == 0) { /* still all queued: the levels they wait at */
    pthread_mutex_lock(&p->mu);
    size_t qh = p->queue.q[SIP__PRIO_HIGH].count, qm = p->queue.q[SIP__PRIO_MEDIUM].count,
           ql = p->queue.q[SIP__PRIO_LOW].count;
    pthread_mutex_unlock(&p->mu);
    assert_int_equal(qh, 2);
    assert_int_equal(qm, 1);
    assert_int_equal(ql, 3);
    assert_int_equal(atomic_load(&p->queue.n), 6);
    assert_int_equal(atomic_load(&p->base.refs), 1 + 7); /* each admitted request holds one */
  }
  assert_int_equal(rec_wait(&rec, 7, 20000), 7);
  static const uint64_t order[] = {100, 4, 6, 3, 1, 2, 5};
  for (int i = 0; i < 7; i++) {
    if (rec.e[i].id != order[i])
      fail_msg("completion %d is request %llu, want %llu", i, (unsigned long long)rec.e[i].id,
               (unsigned long long)order[i]);
    assert_echo(&rec.e[i]);
  }
  wait_refs(p, 1);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- queue limit ------------------------------------------------------------- */

static void test_queue_limit(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: q, backend: builtin, pool_size: 1, queue: {max_size: 2}, "
                     "backend_options: {delay_ms: 300}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  vt_submit_ok(t, "q", make_req("q", 1, 0, 0), &rec);
  wait_running(p); /* the running request is not in the queue */
  vt_submit_ok(t, "q", make_req("q", 2, 0, 0), &rec);
  vt_submit_ok(t, "q", make_req("q", 3, 0, 0), &rec);
  int refused = 0;
  if (atomic_load(&p->queue.n) == 2) { /* still full */
    VT_EXPECT(t, "q", make_req("q", 4, 1, 0), &rec, SIP_RESOURCE_EXHAUSTED,
              "the queue of pool 'q' is full (2 requests, queue.max_size)", "retry later");
    refused = 1;
    assert_int_equal(atomic_load(&p->by_code[SIP_RESOURCE_EXHAUSTED]), 1);
  }
  assert_int_equal(rec_wait(&rec, 3, 20000), 3);
  for (uint64_t id = 1; id <= 3; id++) assert_echo(find_id(&rec, id));
  /* Room again once it drained. */
  vt_submit_ok(t, "q", make_req("q", 5, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 4, 20000), 4);
  assert_echo(find_id(&rec, 5));
  wait_refs(p, 1);
  assert_int_equal(atomic_load(&p->by_code[SIP_OK]), 4);
  assert_int_equal(atomic_load(&p->st_fail.count), (uint64_t)refused);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- deadlines ----------------------------------------------------------------- */

static void test_deadline_in_queue(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: d, backend: builtin, pool_size: 1, backend_options: {delay_ms: 300}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  vt_submit_ok(t, "d", make_req("d", 1, 0, 0), &rec);
  wait_running(p);
  assert_int_equal(t->n_deadlines, 0); /* no deadline, nothing noted */
  uint64_t before = sip__now_us();
  vt_submit_ok(t, "d", make_req("d", 2, 0, 5), &rec); /* 5 ms */
  uint64_t after = sip__now_us();
  pthread_mutex_lock(&t->mu);
  assert_int_equal(t->n_deadlines, 1);
  assert_true(t->last_deadline >= before + 5000 && t->last_deadline <= after + 5000);
  pthread_mutex_unlock(&t->mu);
  vt_submit_ok(t, "d", make_req("d", 3, 0, 600000), &rec); /* 10 min: stays */
  /* Until request 2's deadline has passed (the condition is the clock). */
  while (sip__now_us() <= after + 5000) sleep_ms(1);
  uint64_t now = sip__now_us();
  uint64_t next = sip__pool_expire(p, now);
  /* Request 2 expired (here, or by its executor had it started first);
   * request 3's deadline is what is left. */
  assert_true(next > now + 500000000ULL);
  assert_int_equal(rec_wait(&rec, 3, 20000), 3);
  const entry_t *e2 = find_id(&rec, 2);
  assert_int_equal(e2->code, SIP_DEADLINE_EXCEEDED);
  assert_non_null(strstr(e2->msg, "in the queue of pool 'd', past its timeout of 5 ms"));
  assert_non_null(strstr(e2->msg, "it was not executed"));
  assert_int_equal(e2->n_outputs, 0);
  assert_true(e2->queue_us >= 5000);
  assert_echo(find_id(&rec, 1));
  assert_echo(find_id(&rec, 3));
  /* The expired one never ran and is counted as such. */
  assert_int_equal(atomic_load(&p->inference_count), 2);
  assert_int_equal(atomic_load(&p->by_code[SIP_DEADLINE_EXCEEDED]), 1);
  assert_int_equal(atomic_load(&p->by_code[SIP_OK]), 2);
  assert_int_equal(sip__pool_expire(p, sip__now_us()), 0); /* nothing queued */
  wait_refs(p, 1);
  rec_destroy(&rec);
  eng_free(t);
}

/* default_timeout_ms applies to requests without a timeout of their own. */
static void test_default_timeout(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: d, backend: builtin, pool_size: 1, queue: {default_timeout_ms: 100}, "
                     "backend_options: {delay_ms: 600}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  vt_submit_ok(t, "d", make_req("d", 1, 0, 60000), &rec); /* its own timeout wins */
  wait_running(p);
  vt_submit_ok(t, "d", make_req("d", 2, 0, 0), &rec); /* the default: 100 ms */
  assert_int_equal(rec_wait(&rec, 2, 20000), 2);
  /* The first runs 600 ms, far past the default, within its own timeout. */
  assert_echo(find_id(&rec, 1));
  const entry_t *e2 = find_id(&rec, 2);
  assert_int_equal(e2->code, SIP_DEADLINE_EXCEEDED);
  assert_non_null(strstr(e2->msg, "past its timeout of 100 ms"));
  assert_int_equal(t->n_deadlines, 2);
  rec_destroy(&rec);
  eng_free(t);
}

/* ---- cancellation ---------------------------------------------------------------- */

static void test_cancel_queued(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: c, backend: builtin, pool_size: 1, backend_options: {delay_ms: 500}}\n");
  load_all(t);
  sip__pool_t *p = t->pools[0];
  rec_t rec;
  rec_init(&rec);
  sip_cancel_token_t *a = sip_cancel_token_new(), *b = sip_cancel_token_new();
  sip_request_t *r = make_req("c", 1, 0, 0);
  sip_request_set_cancel_token(r, a); /* runs: cancelling does not stop it */
  vt_submit_ok(t, "c", r, &rec);
  wait_running(p);
  for (uint64_t id = 2; id <= 5; id++) {
    r = make_req("c", id, 0, 0);
    sip_request_set_cancel_token(r, id % 2 ? b : a); /* 2, 4: a; 3, 5: b */
    vt_submit_ok(t, "c", r, &rec);
  }
  atomic_store(&a->cancelled, 1);
  sip__pool_cancel(p, a);
  /* Answered on this thread, before anything queued behind them ran. */
  pthread_mutex_lock(&rec.mu);
  int n = rec.n;
  entry_t c0 = rec.e[0], c1 = rec.e[1];
  pthread_mutex_unlock(&rec.mu);
  assert_true(n >= 2);
  assert_int_equal(c0.code, SIP_CANCELLED);
  assert_int_equal(c1.code, SIP_CANCELLED);
  assert_true((c0.id == 2 && c1.id == 4) || (c0.id == 4 && c1.id == 2));
  assert_non_null(strstr(c0.msg, "request was cancelled before it ran"));
  assert_int_equal(c0.n_outputs, 0);
  assert_int_equal(c1.n_outputs, 0);
  assert_int_equal(rec_wait(&rec, 5, 20000), 5);
  assert_echo(find_id(&rec, 1));
  assert_echo(find_id(&rec, 3));
  assert_echo(find_id(&rec, 5));
  assert_int_equal(atomic_load(&p->by_code[SIP_CANCELLED]), 2);
  assert_int_equal(atomic_load(&p->inference_count), 3);
  /* Later submissions carrying a cancelled token are refused. */
  r = make_req("c", 6, 0, 0);
  sip_request_set_cancel_token(r, a);
  VT_EXPECT(t, "c", r, &rec, SIP_CANCELLED, "cancelled");
  wait_refs(p, 1);
  sip_cancel_token_free(a);
  sip_cancel_token_free(b);
  rec_destroy(&rec);
  eng_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_admission_refusals),
      cmocka_unit_test(test_priority_order),
      cmocka_unit_test(test_queue_limit),
      cmocka_unit_test(test_deadline_in_queue),
      cmocka_unit_test(test_default_timeout),
      cmocka_unit_test(test_cancel_queued),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
