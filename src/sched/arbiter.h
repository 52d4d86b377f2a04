/* sip — the compute arbiter: a fixed number of execution slots (about one
 * per core) shared by every pool's sessions. When sessions of several pools
 * wait for a slot, pool priority decides who runs first, within shares set
 * by max_compute_percent (weighted fair queuing on measured execution time;
 * unused share is lent to whoever is busy). Uncontended, a slot is one
 * mutex round trip. */
#ifndef SIP_ARBITER_H
#define SIP_ARBITER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/queue.h"

/* Execution time over the last SIP__ARB_WINDOW_S seconds, in one-second
 * buckets: what a pool's compute share is measured on (a pool's against
 * the arbiter's total, both charged at the same instant). */
#define SIP__ARB_WINDOW_S 10
typedef struct sip__arb_window {
  uint64_t ns[SIP__ARB_WINDOW_S];
  uint64_t sec[SIP__ARB_WINDOW_S]; /* the second (monotonic) each bucket holds */
} sip__arb_window_t;

/* Adds exec_ns to the bucket of second now_s. */
void sip__arb_window_add(sip__arb_window_t *w, uint64_t exec_ns, uint64_t now_s);
/* The execution time of seconds (now_s - SIP__ARB_WINDOW_S, now_s]. */
uint64_t sip__arb_window_sum(const sip__arb_window_t *w, uint64_t now_s);

/* One pool's account with the arbiter. Fields are owned by the arbiter and
 * read under its lock. */
typedef struct sip__arb_account {
  int priority;     /* 0 high, 1 medium, 2 low */
  uint64_t weight;  /* max_compute_percent, or 100 when unset */
  uint64_t vtime;   /* virtual time: sum of exec_ns * 100 / weight */
  uint64_t used_ns; /* measured execution time, for shares */
  sip__arb_window_t recent; /* used_ns over the last seconds */
  int active;       /* tickets of this account waiting or holding a slot */
} sip__arb_account_t;

/* One session's place in line. */
typedef struct sip__arb_ticket {
  SIP__FIFO_LINK(struct sip__arb_ticket); /* in the arbiter's waiters */
  sip__arb_account_t *acc;
  pthread_cond_t cv;
  int state; /* TICKET_IDLE, _WAITING, _GRANTED (arbiter.c) */
} sip__arb_ticket_t;

typedef struct sip__arbiter {
  pthread_mutex_t mu;
  int slots, free_slots;
  uint64_t vclock;            /* virtual time of the last grant */
  uint64_t window;            /* virtual ns a pool may run ahead of the slowest waiter */
  sip__arb_window_t recent;   /* every account's execution time, for shares */
  struct sip__arb_waiters {    /* waiting tickets in arrival order (src/core/queue.h) */
    SIP__FIFO_FIELDS(sip__arb_ticket_t);
  } waiters;
} sip__arbiter_t;

void sip__arbiter_init(sip__arbiter_t *a, int slots);
void sip__arbiter_destroy(sip__arbiter_t *a);
void sip__arb_account_init(sip__arb_account_t *acc, int priority, int compute_percent);
/* A new share for `acc` (compute_percent 0: unset, 100), under a's lock. */
void sip__arbiter_set_weight(sip__arbiter_t *a, sip__arb_account_t *acc, int compute_percent);
void sip__arb_ticket_init(sip__arb_ticket_t *t, sip__arb_account_t *acc);
void sip__arb_ticket_destroy(sip__arb_ticket_t *t);

/* The policy, as a pure function for tests: which of n waiting accounts
 * (in arrival order) gets the next slot. */
size_t sip__arb_choose(sip__arb_account_t *const *waiting, size_t n, uint64_t window);
/* Charges `exec_ns` of execution to `acc` (virtual time and used time). */
void sip__arb_charge(sip__arb_account_t *acc, uint64_t exec_ns);

/* acc's execution time over the window ending at second now_s and every
 * pool's (*total), under a's lock: acc's compute share is recent/total. */
uint64_t sip__arbiter_recent(sip__arbiter_t *a, const sip__arb_account_t *acc, uint64_t now_s,
                             uint64_t *total);

/* Blocks until the ticket holds a slot (at once if it was granted while
 * queued by a release with again = 1). */
void sip__arbiter_acquire(sip__arbiter_t *a, sip__arb_ticket_t *t);
/* Returns the slot and charges exec_ns. With again = 1 (the pool has more
 * work) the ticket goes back in line *before* the slot is handed on, so a
 * busy pool competes for the slot it just released instead of losing it to
 * whoever happened to be waiting; the next acquire then waits its turn. */
void sip__arbiter_release(sip__arbiter_t *a, sip__arb_ticket_t *t, uint64_t exec_ns, int again);
/* Takes a ticket out of line (a session that found no work after all):
 * a waiting ticket leaves the queue, a granted one gives its slot on. */
void sip__arbiter_cancel(sip__arbiter_t *a, sip__arb_ticket_t *t);

#endif
