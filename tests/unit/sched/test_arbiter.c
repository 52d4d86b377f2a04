/* Unit tests for src/sched/arbiter.c. The policy is exercised through its
 * pure functions (sip__arb_choose picks, sip__arb_charge charges) with a
 * fake clock: execution times are numbers the test makes up, so shares are
 * exact and nothing depends on the machine. The real acquire/release are
 * tested with threads for mutual exclusion and progress. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "sched/arbiter.h"

#define WINDOW 2000000ull /* the arbiter's default: 2 ms of virtual time */
#define MS 1000000ull

/* ---- a simulated arbiter on the pure policy ---------------------------- */

/* Accounts that always have work waiting. The waiting list is in arrival
 * order; a granted account re-queues at the tail when its execution ends,
 * as a session does. One slot: a grant runs to completion before the next. */
typedef struct sim {
  sip__arb_account_t *order[8];
  size_t n;
} sim_t;

static size_t sim_grant(sim_t *s, uint64_t window) {
  size_t i = sip__arb_choose(s->order, s->n, window);
  assert_true(i < s->n);
  return i;
}

/* Grants `rounds` times; account k's executions cost cost[k] ns. */
static void simulate(sip__arb_account_t *acc, const uint64_t *cost, size_t n, int rounds) {
  sim_t s = {.n = n};
  for (size_t k = 0; k < n; k++) s.order[k] = &acc[k];
  for (int r = 0; r < rounds; r++) {
    size_t i = sim_grant(&s, WINDOW);
    sip__arb_account_t *a = s.order[i];
    memmove(&s.order[i], &s.order[i + 1], (s.n - i - 1) * sizeof s.order[0]);
    s.order[s.n - 1] = a;
    sip__arb_charge(a, cost[a - acc]);
  }
}

static double share(const sip__arb_account_t *acc, size_t n, size_t k) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += acc[i].used_ns;
  return total ? 100.0 * (double)acc[k].used_ns / (double)total : 0;
}

static void assert_share(const sip__arb_account_t *acc, size_t n, size_t k, double want) {
  double got = share(acc, n, k);
  if (got < want - 2.0 || got > want + 2.0)
    fail_msg("account %zu used %.2f%% of the compute (%llu ns), want %.0f%% +- 2", k, got,
             (unsigned long long)acc[k].used_ns, want);
}

static void test_shares_equal_cost(void **state) {
  (void)state;
  sip__arb_account_t acc[2];
  sip__arb_account_init(&acc[0], 1, 25);
  sip__arb_account_init(&acc[1], 1, 75);
  assert_int_equal(acc[0].weight, 25);
  assert_int_equal(acc[1].weight, 75);
  static const uint64_t cost[2] = {1 * MS, 1 * MS};
  simulate(acc, cost, 2, 4000);
  assert_share(acc, 2, 0, 25);
  assert_share(acc, 2, 1, 75);
  /* Shares hold at every scale, not only in the end. */
  sip__arb_account_init(&acc[0], 1, 25);
  sip__arb_account_init(&acc[1], 1, 75);
  simulate(acc, cost, 2, 100);
  assert_share(acc, 2, 0, 25);
}

static void test_shares_unequal_cost(void **state) {
  (void)state;
  /* The 25% pool runs slow executions, the 75% pool fast ones: shares are
   * of measured time, not of executions. */
  sip__arb_account_t acc[2];
  sip__arb_account_init(&acc[0], 1, 25);
  sip__arb_account_init(&acc[1], 1, 75);
  static const uint64_t cost[2] = {3 * MS, MS / 2};
  simulate(acc, cost, 2, 20000);
  assert_share(acc, 2, 0, 25);
  assert_share(acc, 2, 1, 75);

  /* And the other way round. */
  sip__arb_account_init(&acc[0], 1, 25);
  sip__arb_account_init(&acc[1], 1, 75);
  static const uint64_t cost2[2] = {MS / 4, 5 * MS};
  simulate(acc, cost2, 2, 20000);
  assert_share(acc, 2, 0, 25);
  assert_share(acc, 2, 1, 75);
}

static void test_shares_with_priorities(void **state) {
  (void)state;
  /* Priority orders work inside the shares; it does not break them. */
  sip__arb_account_t acc[2];
  sip__arb_account_init(&acc[0], 0, 25); /* high */
  sip__arb_account_init(&acc[1], 2, 75); /* low */
  static const uint64_t cost[2] = {MS, 2 * MS};
  simulate(acc, cost, 2, 20000);
  assert_share(acc, 2, 0, 25);
  assert_share(acc, 2, 1, 75);

  /* Three accounts, one without a quota (weight 100). */
  sip__arb_account_t three[3];
  sip__arb_account_init(&three[0], 1, 20);
  sip__arb_account_init(&three[1], 1, 30);
  sip__arb_account_init(&three[2], 1, 0);
  assert_int_equal(three[2].weight, 100);
  static const uint64_t c3[3] = {MS, 2 * MS, MS / 2};
  simulate(three, c3, 3, 30000);
  assert_share(three, 3, 0, 100.0 * 20 / 150);
  assert_share(three, 3, 1, 100.0 * 30 / 150);
  assert_share(three, 3, 2, 100.0 * 100 / 150);
}

static void test_charge(void **state) {
  (void)state;
  sip__arb_account_t a;
  sip__arb_account_init(&a, 2, 25);
  assert_int_equal(a.priority, 2);
  assert_int_equal(a.vtime, 0);
  assert_int_equal(a.used_ns, 0);
  sip__arb_charge(&a, 1000);
  assert_int_equal(a.used_ns, 1000);
  assert_int_equal(a.vtime, 4000); /* 100 / 25 */
  sip__arb_account_init(&a, 0, 100);
  sip__arb_charge(&a, 1000);
  assert_int_equal(a.vtime, 1000);
  sip__arb_account_init(&a, 0, -5); /* out of range: no quota */
  assert_int_equal(a.weight, 100);
}

static void test_lone_account(void **state) {
  (void)state;
  sip__arb_account_t a;
  sip__arb_account_init(&a, 2, 1);
  sip__arb_account_t *w[1] = {&a};
  /* However far ahead it is, a lone waiter gets the slot. */
  for (int i = 0; i < 100; i++) {
    assert_int_equal(sip__arb_choose(w, 1, WINDOW), 0);
    sip__arb_charge(&a, 10 * MS);
  }
  assert_int_equal(sip__arb_choose(w, 1, 0), 0);
  assert_true(a.vtime > 100 * WINDOW);
  /* Nobody waiting: nothing chosen. */
  assert_int_equal(sip__arb_choose(w, 0, WINDOW), 0);
}

static void set(sip__arb_account_t *a, int prio, uint64_t vtime) {
  sip__arb_account_init(a, prio, 50);
  a->vtime = vtime;
}

static void test_priority_within_window(void **state) {
  (void)state;
  sip__arb_account_t lo, hi, med;
  /* The high-priority account arrived later and has used a bit more, but
   * is within the window: it wins. */
  set(&lo, 2, 10 * MS);
  set(&hi, 0, 10 * MS + WINDOW / 2);
  sip__arb_account_t *w[3] = {&lo, &hi};
  assert_int_equal(sip__arb_choose(w, 2, WINDOW), 1);
  /* With less use it wins too. */
  hi.vtime = 1 * MS;
  assert_int_equal(sip__arb_choose(w, 2, WINDOW), 1);
  /* Exactly at the window's edge it is still eligible. */
  hi.vtime = lo.vtime + WINDOW;
  assert_int_equal(sip__arb_choose(w, 2, WINDOW), 1);
  /* Medium beats low, high beats medium, regardless of list order. */
  set(&med, 1, 10 * MS);
  hi.vtime = 10 * MS;
  sip__arb_account_t *w3[3] = {&lo, &med, &hi};
  assert_int_equal(sip__arb_choose(w3, 3, WINDOW), 2);
  sip__arb_account_t *w2[2] = {&lo, &med};
  assert_int_equal(sip__arb_choose(w2, 2, WINDOW), 1);
}

static void test_ran_ahead_skipped(void **state) {
  (void)state;
  sip__arb_account_t lo, hi;
  set(&lo, 2, 10 * MS);
  set(&hi, 0, 10 * MS + WINDOW + 1); /* one ns past its share */
  sip__arb_account_t *w[2] = {&hi, &lo};
  assert_int_equal(sip__arb_choose(w, 2, WINDOW), 1);
  sip__arb_account_t *w2[2] = {&lo, &hi};
  assert_int_equal(sip__arb_choose(w2, 2, WINDOW), 0);
  /* The smallest vtime is the reference: a third waiter far behind makes
   * both others ineligible. */
  sip__arb_account_t behind;
  set(&behind, 2, 0);
  lo.vtime = WINDOW + 1;
  hi.vtime = WINDOW + 1;
  sip__arb_account_t *w3[3] = {&hi, &lo, &behind};
  assert_int_equal(sip__arb_choose(w3, 3, WINDOW), 2);
  /* Window 0: pure weighted fair queuing, smallest virtual time first. */
  set(&lo, 2, 5);
  set(&hi, 0, 6);
  sip__arb_account_t *w4[2] = {&hi, &lo};
  assert_int_equal(sip__arb_choose(w4, 2, 0), 1);
}

static void test_ties_to_earlier_arrival(void **state) {
  (void)state;
  sip__arb_account_t a, b, c;
  set(&a, 1, 7 * MS);
  set(&b, 1, 7 * MS);
  set(&c, 1, 7 * MS);
  sip__arb_account_t *abc[3] = {&a, &b, &c}, *cba[3] = {&c, &b, &a}, *bca[3] = {&b, &c, &a};
  assert_int_equal(sip__arb_choose(abc, 3, WINDOW), 0);
  assert_int_equal(sip__arb_choose(cba, 3, WINDOW), 0);
  assert_int_equal(sip__arb_choose(bca, 3, WINDOW), 0);
  /* Same priority, different use: the one with less virtual time. */
  c.vtime = 7 * MS - 1;
  assert_int_equal(sip__arb_choose(abc, 3, WINDOW), 2);
  assert_int_equal(sip__arb_choose(cba, 3, WINDOW), 0);
  /* Equal priority and virtual time among the later ones: earliest of them. */
  c.vtime = 8 * MS;
  a.vtime = 8 * MS;
  assert_int_equal(sip__arb_choose(abc, 3, WINDOW), 1); /* b: least use */
  b.vtime = 8 * MS;
  assert_int_equal(sip__arb_choose(cba, 3, WINDOW), 0);
}

/* ---- the real arbiter -------------------------------------------------- */

static void test_idle_earns_no_credit(void **state) {
  (void)state;
  sip__arbiter_t arb;
  sip__arbiter_init(&arb, 1);
  sip__arb_account_t busy, idle;
  sip__arb_account_init(&busy, 1, 50);
  sip__arb_account_init(&idle, 1, 50);
  sip__arb_ticket_t tb, ti;
  sip__arb_ticket_init(&tb, &busy);
  sip__arb_ticket_init(&ti, &idle);
  for (int i = 0; i < 10; i++) {
    sip__arbiter_acquire(&arb, &tb);
    assert_int_equal(busy.active, 1);
    sip__arbiter_release(&arb, &tb, 1 * MS, 0);
    assert_int_equal(busy.active, 0);
  }
  assert_int_equal(busy.used_ns, 10 * MS);
  assert_int_equal(busy.vtime, 20 * MS);
  /* The idle account re-enters at the virtual clock (the last grant's
   * virtual time), not at 0: it cannot burst on credit saved while idle. */
  sip__arbiter_acquire(&arb, &ti);
  assert_int_equal(idle.vtime, 18 * MS);
  sip__arbiter_release(&arb, &ti, 0, 0);
  assert_int_equal(arb.free_slots, 1);
  assert_null(arb.waiters.head);
  sip__arb_ticket_destroy(&tb);
  sip__arb_ticket_destroy(&ti);
  sip__arbiter_destroy(&arb);
}

#define THREADS 8
#define ITERS 300

typedef struct shared {
  sip__arbiter_t arb;
  sip__arb_account_t acc[2];
  atomic_int holders, max_holders;
  atomic_int finished;
} shared_t;

typedef struct worker {
  shared_t *sh;
  int k;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  shared_t *sh = w->sh;
  sip__arb_ticket_t t;
  sip__arb_ticket_init(&t, &sh->acc[w->k]);
  for (int i = 0; i < ITERS; i++) {
    sip__arbiter_acquire(&sh->arb, &t);
    int h = atomic_fetch_add(&sh->holders, 1) + 1;
    int m = atomic_load(&sh->max_holders);
    while (h > m && !atomic_compare_exchange_weak(&sh->max_holders, &m, h)) {
    }
    if (i % 16 == 0) {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    } else {
      sched_yield();
    }
    atomic_fetch_sub(&sh->holders, 1);
    /* Every other round the worker stays in line, as a busy session does. */
    sip__arbiter_release(&sh->arb, &t, 1000, i % 2 && i + 1 < ITERS);
  }
  sip__arb_ticket_destroy(&t);
  atomic_fetch_add(&sh->finished, 1);
  return NULL;
}

static void run_threads(int slots) {
  static shared_t sh;
  memset(&sh, 0, sizeof sh);
  sip__arbiter_init(&sh.arb, slots);
  sip__arb_account_init(&sh.acc[0], 0, 25);
  sip__arb_account_init(&sh.acc[1], 2, 75);
  pthread_t th[THREADS];
  worker_t w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker_t){&sh, i % 2};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&sh.finished), THREADS);
  if (atomic_load(&sh.max_holders) > slots)
    fail_msg("%d executions held a slot at once; slots = %d", atomic_load(&sh.max_holders),
             slots);
  assert_true(atomic_load(&sh.max_holders) >= 1);
  /* Every release was charged; nothing is left waiting or held. */
  assert_int_equal(sh.acc[0].used_ns + sh.acc[1].used_ns, (uint64_t)THREADS * ITERS * 1000);
  assert_int_equal(sh.acc[0].used_ns, (uint64_t)THREADS / 2 * ITERS * 1000);
  assert_int_equal(sh.acc[0].active, 0);
  assert_int_equal(sh.acc[1].active, 0);
  assert_int_equal(sh.arb.free_slots, slots);
  assert_null(sh.arb.waiters.head);
  sip__arbiter_destroy(&sh.arb);
}

static void test_threads_one_slot(void **state) {
  (void)state;
  run_threads(1);
}

static void test_threads_two_slots(void **state) {
  (void)state;
  run_threads(2);
}

static void test_init_clamps_slots(void **state) {
  (void)state;
  sip__arbiter_t arb;
  sip__arbiter_init(&arb, 0);
  assert_int_equal(arb.slots, 1);
  assert_int_equal(arb.free_slots, 1);
  sip__arbiter_destroy(&arb);
  sip__arbiter_init(&arb, -3);
  assert_int_equal(arb.slots, 1);
  sip__arbiter_destroy(&arb);
}

/* The recent window: seconds (now - 10, now], a bucket reused by a later
 * second starts over, nothing counts before its second or past the window. */
static void test_recent_window(void **state) {
  (void)state;
  sip__arb_window_t w;
  memset(&w, 0, sizeof w);
  assert_int_equal(sip__arb_window_sum(&w, 1000), 0);
  sip__arb_window_add(&w, 5 * MS, 1000);
  sip__arb_window_add(&w, 7 * MS, 1000);
  sip__arb_window_add(&w, 3 * MS, 1004);
  assert_int_equal(sip__arb_window_sum(&w, 1004), 15 * MS);
  assert_int_equal(sip__arb_window_sum(&w, 1009), 15 * MS);
  assert_int_equal(sip__arb_window_sum(&w, 1010), 3 * MS); /* second 1000 left the window */
  assert_int_equal(sip__arb_window_sum(&w, 1014), 0);
  assert_int_equal(sip__arb_window_sum(&w, 999), 0); /* read before they happened */
  sip__arb_window_add(&w, 2 * MS, 1010); /* second 1000's bucket, reused */
  assert_int_equal(sip__arb_window_sum(&w, 1010), 5 * MS);
}

/* release charges the pool's window and the arbiter's at once: a pool's
 * share is its part of the total. */
static void test_recent_share(void **state) {
  (void)state;
  sip__arbiter_t a;
  sip__arbiter_init(&a, 1);
  sip__arb_account_t acc[2];
  sip__arb_ticket_t t[2];
  for (int k = 0; k < 2; k++) {
    sip__arb_account_init(&acc[k], 1, 50);
    sip__arb_ticket_init(&t[k], &acc[k]);
  }
  for (int r = 0; r < 4; r++)
    for (int k = 0; k < 2; k++) {
      sip__arbiter_acquire(&a, &t[k]);
      sip__arbiter_release(&a, &t[k], (uint64_t)(k ? 3 : 1) * MS, 0);
    }
  uint64_t total = 0, now = sip__now_us() / 1000000;
  uint64_t mine = sip__arbiter_recent(&a, &acc[1], now, &total);
  /* release and this read may straddle a second: both stay in the window */
  assert_int_equal(total, 16 * MS);
  assert_int_equal(mine, 12 * MS);
  for (int k = 0; k < 2; k++) sip__arb_ticket_destroy(&t[k]);
  sip__arbiter_destroy(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shares_equal_cost),
      cmocka_unit_test(test_shares_unequal_cost),
      cmocka_unit_test(test_shares_with_priorities),
      cmocka_unit_test(test_charge),
      cmocka_unit_test(test_lone_account),
      cmocka_unit_test(test_priority_within_window),
      cmocka_unit_test(test_ran_ahead_skipped),
      cmocka_unit_test(test_ties_to_earlier_arrival),
      cmocka_unit_test(test_idle_earns_no_credit),
      cmocka_unit_test(test_threads_one_slot),
      cmocka_unit_test(test_threads_two_slots),
      cmocka_unit_test(test_init_clamps_slots),
      cmocka_unit_test(test_recent_window),
      cmocka_unit_test(test_recent_share),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
