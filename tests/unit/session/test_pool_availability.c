/* Unit tests of a pool's availability (src/session/availability.c):
 * injected faults and their counts, and the failover paths a pool takes
 * when a session fails. */
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

/* Faults: a count hits the next executions of the pool (or of one session)
 * and then disarms; rate 1 hits every one; kind none clears; a session out
 * of range and a pool not serving are refused. */
static void test_fault_counts(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: a, backend: builtin, pool_size: 2}\n");
  sip__pool_t *p = t->pools[0];
  sip__fault_t f = {.kind = SIP__FAULT_CRASH, .session = -1, .count = 2};
  sip_error_t *e = sip__pool_set_fault(p, &f); /* LOADING */
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  sip_error_free(e);
  load_all(t);
  int64_t delay = -1;
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_NONE);
  assert_null(sip__pool_set_fault(p, &f));
  assert_int_equal(sip__fault_take(p, &p->sessions[1], &delay), SIP__FAULT_CRASH);
  assert_int_equal(delay, 0);
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_CRASH);
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_NONE);
  assert_int_equal(atomic_load(&p->fault_armed), 0);
  f = (sip__fault_t){.kind = SIP__FAULT_SLOW, .session = 1, .count = 1, .delay_ms = 7};
  assert_null(sip__pool_set_fault(p, &f));
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_NONE);
  assert_int_equal(sip__fault_take(p, &p->sessions[1], &delay), SIP__FAULT_SLOW);
  assert_int_equal(delay, 7);
  f = (sip__fault_t){.kind = SIP__FAULT_ERROR, .session = -1, .count = -1, .rate = 1.0};
  assert_null(sip__pool_set_fault(p, &f));
  for (int i = 0; i < 50; i++)
    assert_int_equal(sip__fault_take(p, &p->sessions[i % 2], &delay), SIP__FAULT_ERROR);
  f = (sip__fault_t){.kind = SIP__FAULT_NONE, .session = -1};
  assert_null(sip__pool_set_fault(p, &f));
  assert_int_equal(sip__fault_take(p, &p->sessions[0], &delay), SIP__FAULT_NONE);
  f = (sip__fault_t){.kind = SIP__FAULT_HANG, .session = 2, .count = 1};
  assert_non_null(e = sip__pool_set_fault(p, &f));
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "sessions 0..1; got session 2"));
  sip_error_free(e);
  eng_free(t);
}

/* Failover decisions: a crashed execution's request is retried up to
 * max_retries, then goes to the fallback pool once; an injected error is
 * answered as is; a drained session takes nothing until resumed. */
static void test_failover_paths(void **state) {
  (void)state;
  eng_t *t = eng_new("  - {name: a, backend: builtin, pool_size: 2,\n"
                     "     failover: {strategy: immediate_retry, max_retries: 2, fallback_pool: b}}\n"
                     "  - {name: b, backend: builtin}\n"
                     "  - {name: n, backend: builtin}\n");
  load_all(t);
  sip__pool_t *a = t->pools[0], *b = t->pools[1], *n = t->pools[2];
  rec_t rec;
  rec_init(&rec);
  sip__fault_t f = {.kind = SIP__FAULT_CRASH, .session = -1, .count = 2};
  assert_null(sip__pool_set_fault(a, &f));
  vt_submit_ok(t, "a", make_req("a", 1, 0, 0), &rec); /* two crashes, answered by a */
  assert_int_equal(rec_wait(&rec, 1, 10000), 1);
  assert_echo(find_id(&rec, 1));
  assert_int_equal(atomic_load(&a->n_retries), 2);
  assert_int_equal(atomic_load(&a->n_fallbacks), 0);
  assert_int_equal(atomic_load(&a->n_session_failures), 2);
  f.count = 3;
  assert_null(sip__pool_set_fault(a, &f));
  vt_submit_ok(t, "a", make_req("a", 2, 0, 0), &rec); /* three: answered by b */
  assert_int_equal(rec_wait(&rec, 2, 10000), 2);
  assert_echo(find_id(&rec, 2));
  assert_int_equal(atomic_load(&a->n_fallbacks), 1);
  assert_int_equal(atomic_load(&b->by_code[SIP_OK]), 1);
  for (int i = 0; i < 2; i++) assert_non_null(a->sessions[i].ctx);
  f = (sip__fault_t){.kind = SIP__FAULT_ERROR, .session = -1, .count = 1};
  assert_null(sip__pool_set_fault(a, &f));
  vt_submit_ok(t, "a", make_req("a", 3, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 3, 10000), 3);
  assert_int_equal(find_id(&rec, 3)->code, SIP_INTERNAL);
  assert_int_equal(atomic_load(&a->n_retries), 4); /* 2 + 2 before the fallback, none more */
  f = (sip__fault_t){.kind = SIP__FAULT_CRASH, .session = -1, .count = 1};
  assert_null(sip__pool_set_fault(n, &f)); /* no failover: answered UNAVAILABLE */
  vt_submit_ok(t, "n", make_req("n", 4, 0, 0), &rec);
  assert_int_equal(rec_wait(&rec, 4, 10000), 4);
  assert_int_equal(find_id(&rec, 4)->code, SIP_UNAVAILABLE);
  assert_non_null(strstr(find_id(&rec, 4)->msg, "injected crash"));
  assert_int_equal(atomic_load(&n->sessions[0].state), SIP__SESSION_READY);

  /* Drain: session 0 of n (its only one) takes nothing until resumed. */
  assert_null(sip__session_drain(n, 0, 1));
  for (int i = 0; i < 2000 && atomic_load(&n->sessions[0].state) != SIP__SESSION_SUSPENDED; i++)
    sleep_ms(1);
  assert_int_equal(atomic_load(&n->sessions[0].state), SIP__SESSION_SUSPENDED);
  vt_submit_ok(t, "n", make_req("n", 5, 0, 0), &rec);
  /* Queued behind the suspended session, and not run. */
  for (int i = 0; i < 20000 && atomic_load(&n->queue.n) != 1; i++) sleep_ms(1);
  assert_int_equal(atomic_load(&n->queue.n), 1);
  assert_int_equal(rec_count(&rec), 4);
  assert_null(sip__session_drain(n, 0, 0));
  assert_int_equal(rec_wait(&rec, 5, 10000), 5);
  assert_echo(find_id(&rec, 5));
  sip_error_t *e = sip__session_drain(n, 1, 1);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  rec_destroy(&rec);
  eng_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fault_counts),
      cmocka_unit_test(test_failover_paths),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
