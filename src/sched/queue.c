/* sip — a pool's priority queues with ageing (see queue.h). */
#include "sched/queue.h"

SIP__FIFO_DEFINE(fifo, sip__sched_fifo_t, sip__sched_item_t)

void sip__sched_queue_init(sip__sched_queue_t *sq) {
  for (int i = 0; i < SIP__SCHED_QUEUES; i++) fifo_init(&sq->q[i]);
  atomic_init(&sq->n, 0);
}

void sip__sched_push(sip__sched_queue_t *sq, int q, sip__sched_item_t *it) {
  atomic_fetch_add_explicit(&sq->n, 1, memory_order_relaxed);
  fifo_push(&sq->q[q], it);
}

void sip__sched_remove(sip__sched_queue_t *sq, int q, sip__sched_item_t *it) {
  atomic_fetch_sub_explicit(&sq->n, 1, memory_order_relaxed);
  fifo_remove(&sq->q[q], it);
}

size_t sip__sched_count(const sip__sched_queue_t *sq) {
  size_t n = 0;
  for (int i = 0; i < SIP__SCHED_QUEUES; i++) n += sq->q[i].count;
  return n;
}

int sip__sched_effective_level(const sip__sched_item_t *it, uint64_t now, int64_t ageing_us) {
  if (!ageing_us) return it->level;
  uint64_t steps = (now - it->arrival_us) / (uint64_t)ageing_us;
  return steps >= (uint64_t)it->level ? 0 : it->level - (int)steps;
}

sip__sched_item_t *sip__sched_pop(sip__sched_queue_t *sq, uint64_t now, int64_t ageing_us) {
  sip__sched_item_t *best = NULL;
  int best_q = SIP__SCHED_DELAYED, best_eff = SIP__PRIO_LEVELS;
  for (int l = 0; l < SIP__PRIO_LEVELS; l++) {
    sip__sched_item_t *h = sq->q[l].head;
    if (!h) continue;
    int e = sip__sched_effective_level(h, now, ageing_us);
    if (!best || e < best_eff || (e == best_eff && h->arrival_us < best->arrival_us)) {
      best = h;
      best_q = l;
      best_eff = e;
    }
  }
  if (!best) best = sq->q[SIP__SCHED_DELAYED].head;
  if (best) sip__sched_remove(sq, best_q, best);
  return best;
}
