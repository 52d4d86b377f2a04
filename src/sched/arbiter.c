/* sip — compute arbiter (see arbiter.h).
 *
 * Policy when a slot frees and sessions wait: a waiting pool is *eligible*
 * while its virtual time is within `window` of the smallest virtual time
 * among waiting pools (it has not run ahead of its share). Among eligible
 * waiters the highest pool priority wins, then the smallest virtual time,
 * then arrival order. So priority orders work inside the shares, and a
 * pool that ran ahead of its share waits until the others catch up. A pool
 * that was idle re-enters at the current virtual clock: idleness earns no
 * credit to burst with later. */
#include "sched/arbiter.h"

#include <string.h>

#include "core/core.h"

enum { TICKET_IDLE = 0, TICKET_WAITING, TICKET_GRANTED };

SIP__FIFO_DEFINE(waiters, struct sip__arb_waiters, sip__arb_ticket_t)

void sip__arbiter_init(sip__arbiter_t *a, int slots) {
  pthread_mutex_init(&a->mu, NULL);
  memset(&a->recent, 0, sizeof a->recent);
  a->slots = a->free_slots = slots > 0 ? slots : 1;
  a->vclock = 0;
  a->window = 2000000; /* 2 ms of virtual time: a few executions of a small model */
  waiters_init(&a->waiters);
}

void sip__arbiter_destroy(sip__arbiter_t *a) { pthread_mutex_destroy(&a->mu); }

void sip__arb_account_init(sip__arb_account_t *acc, int priority, int compute_percent) {
  acc->priority = priority;
  acc->weight = compute_percent > 0 ? (uint64_t)compute_percent : 100;
  acc->vtime = 0;
  acc->used_ns = 0;
  memset(&acc->recent, 0, sizeof acc->recent);
  acc->active = 0;
}

void sip__arbiter_set_weight(sip__arbiter_t *a, sip__arb_account_t *acc, int compute_percent) {
  pthread_mutex_lock(&a->mu);
  acc->weight = compute_percent > 0 ? (uint64_t)compute_percent : 100;
  pthread_mutex_unlock(&a->mu);
}

void sip__arb_ticket_init(sip__arb_ticket_t *t, sip__arb_account_t *acc) {
  t->next = t->prev = NULL;
  t->acc = acc;
  t->state = TICKET_IDLE;
  pthread_cond_init(&t->cv, NULL);
}

void sip__arb_ticket_destroy(sip__arb_ticket_t *t) { pthread_cond_destroy(&t->cv); }

size_t sip__arb_choose(sip__arb_account_t *const *waiting, size_t n, uint64_t window) {
  uint64_t vmin = UINT64_MAX;
  for (size_t i = 0; i < n; i++)
    if (waiting[i]->vtime < vmin) vmin = waiting[i]->vtime;
  size_t best = n;
  for (size_t i = 0; i < n; i++) {
    const sip__arb_account_t *w = waiting[i];
    if (w->vtime > vmin + window) continue; /* ran ahead of its share */
    if (best == n) {
      best = i;
      continue;
    }
    const sip__arb_account_t *b = waiting[best];
    /* Earlier arrivals win ties: i > best here, so only strictly better. */
    if (w->priority < b->priority || (w->priority == b->priority && w->vtime < b->vtime))
      best = i;
  }
  return best;
}

void sip__arb_charge(sip__arb_account_t *acc, uint64_t exec_ns) {
  acc->vtime += exec_ns * 100 / acc->weight;
  acc->used_ns += exec_ns;
}

void sip__arb_window_add(sip__arb_window_t *w, uint64_t exec_ns, uint64_t now_s) {
  size_t k = now_s % SIP__ARB_WINDOW_S;
  if (w->sec[k] != now_s) { /* a bucket of an older second: starts over */
    w->sec[k] = now_s;
    w->ns[k] = 0;
  }
  w->ns[k] += exec_ns;
}

uint64_t sip__arb_window_sum(const sip__arb_window_t *w, uint64_t now_s) {
  uint64_t sum = 0;
  for (size_t k = 0; k < SIP__ARB_WINDOW_S; k++)
    if (w->sec[k] <= now_s && now_s - w->sec[k] < SIP__ARB_WINDOW_S) sum += w->ns[k];
  return sum;
}

uint64_t sip__arbiter_recent(sip__arbiter_t *a, const sip__arb_account_t *acc, uint64_t now_s,
                             uint64_t *total) {
  pthread_mutex_lock(&a->mu);
  uint64_t mine = sip__arb_window_sum(&acc->recent, now_s);
  *total = sip__arb_window_sum(&a->recent, now_s);
  pthread_mutex_unlock(&a->mu);
  return mine;
}

/* Enqueues a ticket. Caller holds a->mu. */
static void enqueue(sip__arbiter_t *a, sip__arb_ticket_t *t) {
  sip__arb_account_t *acc = t->acc;
  if (acc->active++ == 0 && acc->vtime < a->vclock) acc->vtime = a->vclock;
  t->state = TICKET_WAITING;
  waiters_push(&a->waiters, t);
}

/* Hands free slots to the chosen waiters. Caller holds a->mu. */
static void grant(sip__arbiter_t *a) {
  while (a->free_slots > 0 && a->waiters.head) {
    sip__arb_account_t *cands[64];
    sip__arb_ticket_t *tickets[64];
    size_t n = 0;
    /* The first 64 waiters compete; more wait their turn in arrival order. */
    for (sip__arb_ticket_t *w = a->waiters.head; w && n < 64; w = w->next) {
      cands[n] = w->acc;
      tickets[n++] = w;
    }
    sip__arb_ticket_t *t = tickets[sip__arb_choose(cands, n, a->window)];
    waiters_remove(&a->waiters, t);
    a->free_slots--;
    t->state = TICKET_GRANTED;
    if (t->acc->vtime > a->vclock) a->vclock = t->acc->vtime;
    pthread_cond_signal(&t->cv);
  }
}

void sip__arbiter_acquire(sip__arbiter_t *a, sip__arb_ticket_t *t) {
  pthread_mutex_lock(&a->mu);
  if (t->state == TICKET_IDLE) {
    enqueue(a, t);
    grant(a);
  }
  while (t->state != TICKET_GRANTED) pthread_cond_wait(&t->cv, &a->mu);
  pthread_mutex_unlock(&a->mu);
}

void sip__arbiter_release(sip__arbiter_t *a, sip__arb_ticket_t *t, uint64_t exec_ns, int again) {
  uint64_t now_s = sip__now_us() / 1000000;
  pthread_mutex_lock(&a->mu);
  sip__arb_charge(t->acc, exec_ns);
  sip__arb_window_add(&t->acc->recent, exec_ns, now_s);
  sip__arb_window_add(&a->recent, exec_ns, now_s);
  t->acc->active--;
  t->state = TICKET_IDLE;
  a->free_slots++;
  if (again) enqueue(a, t);
  grant(a);
  pthread_mutex_unlock(&a->mu);
}

void sip__arbiter_cancel(sip__arbiter_t *a, sip__arb_ticket_t *t) {
  pthread_mutex_lock(&a->mu);
  if (t->state == TICKET_WAITING) {
    waiters_remove(&a->waiters, t);
    t->acc->active--;
  } else if (t->state == TICKET_GRANTED) {
    t->acc->active--;
    a->free_slots++;
  }
  t->state = TICKET_IDLE;
  grant(a);
  pthread_mutex_unlock(&a->mu);
}
