/* Unit tests for the idempotency cache (src/server/state/idempotency.c): a
 * duplicate joins a running request or gets the kept answer with its own
 * id; transient failures are not kept; TTL (on an injected clock), LRU and
 * the entry and byte bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "server/state/idempotency.h"
#include "session/engine.h"

static uint64_t fake_now;
static uint64_t clock_fn(void) { return fake_now; }

/* What a request's callback saw. */
typedef struct seen {
  int calls;
  sip_code_t code;
  uint64_t id;
  int replayed;
  float value;
} seen_t;

static void on_done(sip_response_t *resp, void *user) {
  seen_t *s = user;
  s->calls++;
  s->code = resp->code;
  s->id = resp->request_id;
  s->replayed = resp->replayed;
  s->value = resp->n_outputs ? *(const float *)resp->outputs[0]->data : -1.0f;
  sip_response_free(resp);
}

static sip_request_t *req(uint64_t id, seen_t *s) {
  sip_request_t *r = sip_request_new("m");
  assert_non_null(r);
  r->id = id;
  r->done = on_done;
  r->user = s;
  return r;
}

/* An answer with one float output holding v (in a refcounted buffer). */
static sip_response_t *answer(sip_code_t code, uint64_t id, float v) {
  sip_buf_t *b = sip_buf_new(sizeof v);
  memcpy(sip_buf_data(b), &v, sizeof v);
  int64_t dims[1] = {1};
  sip_tensor_t **outs = sip__calloc(1, sizeof *outs);
  outs[0] = sip_tensor_new_view("y", SIP_DTYPE_FLOAT32, 1, dims, sip_buf_data(b), sizeof v, b);
  sip_buf_unref(b);
  return sip__response_new(code, NULL, id, outs, 1, 0, 0, 0);
}

static const sip__idem_limits_t LIM = {1000000, 100, 1 << 20};

/* Runs request `id` keyed `key` through the cache: returns the outcome and,
 * for RUN, finishes it with `code` and value v. */
static sip__idem_outcome_t run(sip__idem_t *c, const sip__idem_limits_t *lim, const char *key,
                               uint64_t id, seen_t *s, sip_code_t code, float v) {
  sip_request_t *r = req(id, s);
  sip__idem_entry_t *e;
  sip_response_t *rep;
  sip__idem_outcome_t o = sip__idem_begin(c, lim, key, 1, r, &e, &rep);
  if (o == SIP__IDEM_RUN) {
    r->done(answer(code, id, v), r->user);
    sip_request_free(r);
  } else if (o == SIP__IDEM_REPLAY) {
    r->done(rep, r->user);
    sip_request_free(r);
  }
  return o;
}

/* Request 1 (seen by a) runs keyed "k"; request 2 (seen by b) joins it.
 * Returns the first request, still to be answered. */
static sip_request_t *run_and_join(sip__idem_t *c, seen_t *a, seen_t *b) {
  sip_request_t *first = req(1, a);
  sip__idem_entry_t *e;
  sip_response_t *rep;
  assert_int_equal(sip__idem_begin(c, &LIM, "k", 1, first, &e, &rep), SIP__IDEM_RUN);
  assert_non_null(e);
  assert_int_equal(sip__idem_begin(c, &LIM, "k", 1, req(2, b), &e, &rep), SIP__IDEM_JOINED);
  assert_int_equal(b->calls, 0);
  return first;
}

static void test_join_then_replay(void **unused) {
  (void)unused;
  fake_now = 1;
  sip__idem_t *c = sip__idem_new(clock_fn);
  seen_t a = {0}, b = {0}, d = {0};
  /* A duplicate while the first runs joins it. */
  sip_request_t *first = run_and_join(c, &a, &b);
  first->done(answer(SIP_OK, 1, 7.0f), first->user);
  sip_request_free(first);
  assert_int_equal(a.calls, 1);
  assert_int_equal(a.id, 1);
  assert_false(a.replayed);
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.id, 2);
  assert_true(b.replayed);
  assert_true(b.value == 7.0f);
  /* After it finished: the kept answer, with the duplicate's id. */
  assert_int_equal(run(c, &LIM, "k", 3, &d, SIP_OK, 99.0f), SIP__IDEM_REPLAY);
  assert_int_equal(d.id, 3);
  assert_true(d.replayed);
  assert_true(d.value == 7.0f);
  sip__idem_stats_t st;
  sip__idem_stats(c, &st);
  assert_int_equal(st.hits, 1);
  assert_int_equal(st.joins, 1);
  assert_int_equal(st.entries, 1);
  assert_true(st.bytes > 0);
  sip__idem_free(c);
}

static void test_transient_not_kept(void **unused) {
  (void)unused;
  fake_now = 1;
  sip__idem_t *c = sip__idem_new(clock_fn);
  seen_t s = {0};
  const sip_code_t transient[] = {SIP_UNAVAILABLE, SIP_CANCELLED, SIP_DEADLINE_EXCEEDED,
                                  SIP_RESOURCE_EXHAUSTED, SIP_INTERNAL};
  for (size_t i = 0; i < sizeof transient / sizeof transient[0]; i++) {
    assert_int_equal(run(c, &LIM, "k", i, &s, transient[i], 1.0f), SIP__IDEM_RUN);
    assert_int_equal(s.code, transient[i]);
  }
  /* Nothing was kept: the next one runs and its OK answer is kept. */
  assert_int_equal(run(c, &LIM, "k", 10, &s, SIP_OK, 2.0f), SIP__IDEM_RUN);
  assert_int_equal(run(c, &LIM, "k", 11, &s, SIP_OK, 3.0f), SIP__IDEM_REPLAY);
  assert_true(s.value == 2.0f);
  /* The request's own error is kept (same answer again). */
  assert_int_equal(run(c, &LIM, "bad", 12, &s, SIP_INVALID_ARGUMENT, 0), SIP__IDEM_RUN);
  assert_int_equal(run(c, &LIM, "bad", 13, &s, SIP_OK, 0), SIP__IDEM_REPLAY);
  assert_int_equal(s.code, SIP_INVALID_ARGUMENT);
  sip__idem_free(c);
}

/* The first one's client went away: its duplicates hear UNAVAILABLE (they
 * may send it again), not CANCELLED, and nothing is kept. */
static void test_joined_first_cancelled(void **unused) {
  (void)unused;
  fake_now = 1;
  sip__idem_t *c = sip__idem_new(clock_fn);
  seen_t a = {0}, b = {0}, d = {0};
  sip_request_t *first = run_and_join(c, &a, &b);
  first->done(answer(SIP_CANCELLED, 1, 0), first->user);
  sip_request_free(first);
  assert_int_equal(a.code, SIP_CANCELLED);
  assert_int_equal(b.code, SIP_UNAVAILABLE);
  assert_int_equal(b.id, 2);
  assert_int_equal(run(c, &LIM, "k", 3, &d, SIP_OK, 5.0f), SIP__IDEM_RUN);
  sip__idem_free(c);
}

static void test_ttl(void **unused) {
  (void)unused;
  fake_now = 1000;
  sip__idem_t *c = sip__idem_new(clock_fn);
  seen_t s = {0};
  assert_int_equal(run(c, &LIM, "k", 1, &s, SIP_OK, 1.0f), SIP__IDEM_RUN);
  fake_now += LIM.ttl_us - 1;
  assert_int_equal(run(c, &LIM, "k", 2, &s, SIP_OK, 2.0f), SIP__IDEM_REPLAY);
  fake_now += 1; /* expired: runs again */
  assert_int_equal(run(c, &LIM, "k", 3, &s, SIP_OK, 3.0f), SIP__IDEM_RUN);
  assert_int_equal(run(c, &LIM, "k", 4, &s, SIP_OK, 4.0f), SIP__IDEM_REPLAY);
  assert_true(s.value == 3.0f);
  sip__idem_stats_t st;
  sip__idem_stats(c, &st);
  assert_int_equal(st.evictions, 1);
  sip__idem_free(c);
}

static void test_lru_and_bounds(void **unused) {
  (void)unused;
  fake_now = 1;
  sip__idem_t *c = sip__idem_new(clock_fn);
  seen_t s = {0};
  sip__idem_limits_t lim = {1000000, 3, 1 << 20};
  assert_int_equal(run(c, &lim, "a", 1, &s, SIP_OK, 1), SIP__IDEM_RUN);
  assert_int_equal(run(c, &lim, "b", 2, &s, SIP_OK, 2), SIP__IDEM_RUN);
  assert_int_equal(run(c, &lim, "c", 3, &s, SIP_OK, 3), SIP__IDEM_RUN);
  assert_int_equal(run(c, &lim, "a", 4, &s, SIP_OK, 0), SIP__IDEM_REPLAY); /* a is recent now */
  assert_int_equal(run(c, &lim, "d", 5, &s, SIP_OK, 4), SIP__IDEM_RUN);    /* evicts b */
  sip__idem_stats_t st;
  sip__idem_stats(c, &st);
  assert_int_equal(st.entries, 3);
  assert_int_equal(st.evictions, 1);
  assert_int_equal(run(c, &lim, "a", 6, &s, SIP_OK, 0), SIP__IDEM_REPLAY);
  assert_int_equal(run(c, &lim, "c", 7, &s, SIP_OK, 0), SIP__IDEM_REPLAY);
  assert_int_equal(run(c, &lim, "b", 8, &s, SIP_OK, 5), SIP__IDEM_RUN);
  /* A byte bound smaller than one answer keeps nothing. */
  sip__idem_limits_t tiny = {1000000, 100, 16};
  assert_int_equal(run(c, &tiny, "e", 9, &s, SIP_OK, 6), SIP__IDEM_RUN);
  assert_int_equal(run(c, &tiny, "e", 10, &s, SIP_OK, 7), SIP__IDEM_RUN);
  sip__idem_stats(c, &st);
  assert_int_equal(st.entries, 0);
  assert_int_equal(st.bytes, 0);
  sip__idem_free(c);
}

static void test_running_fill_and_abort(void **unused) {
  (void)unused;
  fake_now = 1;
  sip__idem_t *c = sip__idem_new(clock_fn);
  sip__idem_limits_t lim = {1000000, 1, 1 << 20};
  seen_t a = {0}, b = {0}, x = {0};
  sip_request_t *first = req(1, &a);
  sip__idem_entry_t *e, *e2;
  sip_response_t *rep;
  assert_int_equal(sip__idem_begin(c, &lim, "k", 1, first, &e, &rep), SIP__IDEM_RUN);
  assert_int_equal(sip__idem_begin(c, &lim, "k", 1, req(2, &b), &e2, &rep), SIP__IDEM_JOINED);
  /* The one entry is running: another key runs untracked. */
  sip_request_t *other = req(3, &x);
  assert_int_equal(sip__idem_begin(c, &lim, "z", 1, other, &e2, &rep), SIP__IDEM_RUN);
  assert_null(e2);
  sip_request_free(other);
  /* The first is refused at submission: the duplicate gets its error. */
  sip_request_free(first);
  sip__idem_abort(c, e, SIP_INVALID_ARGUMENT, "bad input");
  assert_int_equal(a.calls, 0);
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.code, SIP_INVALID_ARGUMENT);
  assert_int_equal(b.id, 2);
  sip__idem_stats_t st;
  sip__idem_stats(c, &st);
  assert_int_equal(st.entries, 0);
  sip__idem_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_join_then_replay),   cmocka_unit_test(test_transient_not_kept),
      cmocka_unit_test(test_ttl),                cmocka_unit_test(test_lru_and_bounds),
      cmocka_unit_test(test_running_fill_and_abort), cmocka_unit_test(test_joined_first_cancelled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
