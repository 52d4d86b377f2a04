/* Unit tests for the session state machine (src/session/session.c):
 * INIT → READY | FAILED | DESTROYED
 * READY → RUNNING | SUSPENDED | FAILED | DESTROYED
 * RUNNING → READY | FAILED
 * SUSPENDED → READY | FAILED | DESTROYED
 * FAILED → INIT | DESTROYED
 * DESTROYED → nothing */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/pool_impl.h"

#define NS SIP__SESSION_STATES_

/* The documented machine, independently of session.c's table. */
static const int legal[NS][NS] = {
    /*                INIT READY RUNNING SUSPENDED FAILED DESTROYED */
    [SIP__SESSION_INIT] = {0, 1, 0, 0, 1, 1},
    [SIP__SESSION_READY] = {0, 0, 1, 1, 1, 1},
    [SIP__SESSION_RUNNING] = {0, 1, 0, 0, 1, 0},
    [SIP__SESSION_SUSPENDED] = {0, 1, 0, 0, 1, 1},
    [SIP__SESSION_FAILED] = {1, 0, 0, 0, 0, 1},
    [SIP__SESSION_DESTROYED] = {0, 0, 0, 0, 0, 0},
};

static void init_session(sip__session_t *s, sip__session_state_t st) {
  memset(s, 0, sizeof *s);
  snprintf(s->id, sizeof s->id, "test/0");
  atomic_store(&s->state, (int)st);
  atomic_store(&s->since_us, 0);
}

static int setup(void **state) {
  (void)state;
  sip__log_set_level(SIP__LOG_ERROR + 1); /* illegal moves log errors: keep output quiet */
  return 0;
}

static void test_state_count_and_names(void **state) {
  (void)state;
  assert_int_equal(NS, 6);
  assert_string_equal(sip__session_state_name(SIP__SESSION_INIT), "INIT");
  assert_string_equal(sip__session_state_name(SIP__SESSION_READY), "READY");
  assert_string_equal(sip__session_state_name(SIP__SESSION_RUNNING), "RUNNING");
  assert_string_equal(sip__session_state_name(SIP__SESSION_SUSPENDED), "SUSPENDED");
  assert_string_equal(sip__session_state_name(SIP__SESSION_FAILED), "FAILED");
  assert_string_equal(sip__session_state_name(SIP__SESSION_DESTROYED), "DESTROYED");
  assert_string_equal(sip__session_state_name(SIP__SESSION_STATES_), "UNKNOWN");
  assert_string_equal(sip__session_state_name((sip__session_state_t)-1), "UNKNOWN");
}

static void test_transition_table(void **state) {
  (void)state;
  for (int from = 0; from < NS; from++)
    for (int to = 0; to < NS; to++) {
      int got = sip__session_transition_ok((sip__session_state_t)from, (sip__session_state_t)to);
      if (got != legal[from][to])
        fail_msg("%s -> %s: transition_ok %d, documented %d",
                 sip__session_state_name((sip__session_state_t)from),
                 sip__session_state_name((sip__session_state_t)to), got, legal[from][to]);
    }
  /* No self-loops, DESTROYED is terminal. */
  for (int s = 0; s < NS; s++) {
    assert_false(sip__session_transition_ok((sip__session_state_t)s, (sip__session_state_t)s));
    assert_false(sip__session_transition_ok(SIP__SESSION_DESTROYED, (sip__session_state_t)s));
  }
}

static void test_transition_out_of_range(void **state) {
  (void)state;
  static const int bad[] = {-1, NS, NS + 1, 31, 32, 1000, -2147483647 - 1};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    for (int s = 0; s < NS; s++) {
      assert_false(sip__session_transition_ok((sip__session_state_t)bad[i], (sip__session_state_t)s));
      assert_false(sip__session_transition_ok((sip__session_state_t)s, (sip__session_state_t)bad[i]));
    }
}

static void test_set_state_every_pair(void **state) {
  (void)state;
  for (int from = 0; from < NS; from++)
    for (int to = 0; to < NS; to++) {
      sip__session_t s;
      init_session(&s, (sip__session_state_t)from);
      uint64_t before = sip__wall_us();
      int ok = sip__session_set_state(&s, (sip__session_state_t)to);
      uint64_t after = sip__wall_us();
      const char *f = sip__session_state_name((sip__session_state_t)from);
      const char *t = sip__session_state_name((sip__session_state_t)to);
      if (ok != legal[from][to]) fail_msg("set_state %s -> %s returned %d", f, t, ok);
      if (ok) {
        if (atomic_load(&s.state) != to) fail_msg("%s -> %s: state not updated", f, t);
        uint64_t since = atomic_load(&s.since_us);
        if (since < before || since > after)
          fail_msg("%s -> %s: since_us %llu outside [%llu, %llu]", f, t,
                   (unsigned long long)since, (unsigned long long)before,
                   (unsigned long long)after);
      } else {
        if (atomic_load(&s.state) != from) fail_msg("%s -> %s refused but state changed", f, t);
        if (atomic_load(&s.since_us) != 0) fail_msg("%s -> %s refused but since_us changed", f, t);
      }
    }
}

static void test_set_state_out_of_range_target(void **state) {
  (void)state;
  sip__session_t s;
  init_session(&s, SIP__SESSION_READY);
  assert_false(sip__session_set_state(&s, SIP__SESSION_STATES_));
  assert_false(sip__session_set_state(&s, (sip__session_state_t)-1));
  assert_int_equal(atomic_load(&s.state), SIP__SESSION_READY);
  assert_int_equal(atomic_load(&s.since_us), 0);
}

static void test_lifecycle_walk(void **state) {
  (void)state;
  sip__session_t s;
  init_session(&s, SIP__SESSION_INIT);
  static const sip__session_state_t path[] = {
      SIP__SESSION_READY,  SIP__SESSION_RUNNING, SIP__SESSION_READY,  SIP__SESSION_SUSPENDED,
      SIP__SESSION_READY,  SIP__SESSION_RUNNING, SIP__SESSION_FAILED, SIP__SESSION_INIT,
      SIP__SESSION_READY,  SIP__SESSION_SUSPENDED, SIP__SESSION_DESTROYED,
  };
  uint64_t last = 0;
  for (size_t i = 0; i < sizeof path / sizeof path[0]; i++) {
    assert_true(sip__session_set_state(&s, path[i]));
    assert_int_equal(atomic_load(&s.state), path[i]);
    uint64_t since = atomic_load(&s.since_us);
    assert_true(since >= last); /* wall clock, non-decreasing in practice */
    last = since;
  }
  /* DESTROYED is terminal: nothing leaves it and since_us stays. */
  for (int to = 0; to < NS; to++) {
    assert_false(sip__session_set_state(&s, (sip__session_state_t)to));
    assert_int_equal(atomic_load(&s.state), SIP__SESSION_DESTROYED);
    assert_int_equal(atomic_load(&s.since_us), last);
  }
}

/* Many threads race READY → RUNNING: exactly one wins (the compare-and-swap
 * re-checks the table against the state it lost to). */
typedef struct race {
  sip__session_t *s;
  pthread_barrier_t *barrier;
  sip__session_state_t to;
  int won;
} race_t;

static void *racer(void *arg) {
  race_t *r = arg;
  pthread_barrier_wait(r->barrier);
  r->won = sip__session_set_state(r->s, r->to);
  return NULL;
}

static void test_set_state_race(void **state) {
  (void)state;
  enum { N = 8, ROUNDS = 200 };
  for (int round = 0; round < ROUNDS; round++) {
    sip__session_t s;
    init_session(&s, SIP__SESSION_READY);
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, N);
    pthread_t th[N];
    race_t r[N];
    for (int i = 0; i < N; i++) {
      r[i] = (race_t){&s, &b, SIP__SESSION_RUNNING, 0};
      assert_int_equal(pthread_create(&th[i], NULL, racer, &r[i]), 0);
    }
    int winners = 0;
    for (int i = 0; i < N; i++) {
      pthread_join(th[i], NULL);
      winners += r[i].won;
    }
    pthread_barrier_destroy(&b);
    assert_int_equal(winners, 1);
    assert_int_equal(atomic_load(&s.state), SIP__SESSION_RUNNING);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_state_count_and_names),
      cmocka_unit_test(test_transition_table),
      cmocka_unit_test(test_transition_out_of_range),
      cmocka_unit_test(test_set_state_every_pair),
      cmocka_unit_test(test_set_state_out_of_range_target),
      cmocka_unit_test(test_lifecycle_walk),
      cmocka_unit_test(test_set_state_race),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
