/* sip — a pool's request queues as a data structure: one FIFO per priority
 * level plus a "delayed" one, with ageing. What is queued embeds a
 * sip__sched_item_t (its links, arrival time and level); the queue knows
 * nothing else of it, and nothing of pools. Not thread-safe: the owner
 * holds its lock around every call; only `n` may be read without it.
 *
 * Pop-the-best: each level is FIFO, so only the heads compete. A head's
 * effective level is its level minus one per `ageing_us` waited (down to
 * 0); the lowest effective level wins, then the oldest arrival. The
 * delayed queue is served only when every level queue is empty. */
#ifndef SIP_SCHED_QUEUE_H
#define SIP_SCHED_QUEUE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/queue.h"

#define SIP__SCHED_DELAYED SIP__PRIO_LEVELS      /* the delayed queue's index */
#define SIP__SCHED_QUEUES (SIP__PRIO_LEVELS + 1) /* levels, then delayed */

/* Embedded in what is queued; the owner sets arrival_us and level before
 * pushing it to its level. */
typedef struct sip__sched_item {
  SIP__FIFO_LINK(struct sip__sched_item);
  uint64_t arrival_us; /* monotonic; ageing and ties */
  int level;           /* 0 (highest) .. SIP__PRIO_LEVELS - 1 */
} sip__sched_item_t;

typedef struct sip__sched_fifo {
  SIP__FIFO_FIELDS(sip__sched_item_t);
} sip__sched_fifo_t;

typedef struct sip__sched_queue {
  sip__sched_fifo_t q[SIP__SCHED_QUEUES]; /* q[l].head: level l's oldest */
  atomic_long n;                        /* items in all queues, readable without the lock */
} sip__sched_queue_t;

void sip__sched_queue_init(sip__sched_queue_t *sq);
/* Appends `it` to queue `q` (a level or SIP__SCHED_DELAYED). */
void sip__sched_push(sip__sched_queue_t *sq, int q, sip__sched_item_t *it);
/* Takes `it` out of queue `q`, which holds it. */
void sip__sched_remove(sip__sched_queue_t *sq, int q, sip__sched_item_t *it);
/* Takes the best item out (see above); NULL when all queues are empty.
 * ageing_us 0: no ageing. */
sip__sched_item_t *sip__sched_pop(sip__sched_queue_t *sq, uint64_t now, int64_t ageing_us);
/* The item's level after ageing. */
int sip__sched_effective_level(const sip__sched_item_t *it, uint64_t now, int64_t ageing_us);
/* Items in all queues (exact under the owner's lock). */
size_t sip__sched_count(const sip__sched_queue_t *sq);

#endif
