/* sip — a pool's queue, between admission (admission.c) and the session
 * executors (executor.c): what both sides of it use. */
#ifndef SIP_SESSION_ADMISSION_H
#define SIP_SESSION_ADMISSION_H

#include <stddef.h>
#include <stdint.h>

#include "session/engine.h"

/* The request a queue item belongs to. */
#define SIP__QUEUED_REQ(it) ((sip_request_t *)((char *)(it) - offsetof(sip_request_t, sched)))

/* Whether the request's cancel token (if any) has been cancelled. */
int sip__request_cancelled(const sip_request_t *r);
/* Requests queued in the pool (caller holds p->mu). */
size_t sip__pool_queued(const sip__pool_t *p);
/* The best queued request (src/sched/queue.h: lowest effective level after
 * ageing, then oldest; the delayed queue last), taken off the queue; NULL
 * when none. Caller holds p->mu. */
sip_request_t *sip__pool_pop(sip__pool_t *p, uint64_t now);
/* Every queued request ends here: metrics, a log line for failures, the
 * answer (outs: owned by the request from here on). */
void sip__pool_finish(sip__pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                      sip_tensor_t **outs, size_t n_outs, uint64_t queue_us, uint64_t compute_us);
/* Fails a request that waited past its deadline (DEADLINE_EXCEEDED) or
 * whose client went away (CANCELLED); r is off the queue. */
void sip__pool_expire_request(sip__pool_t *p, sip_request_t *r, uint64_t now);
void sip__pool_cancel_request(sip__pool_t *p, sip_request_t *r, uint64_t now);
/* Takes off the queue every queued request (those whose cancel token is
 * `match` when it is not NULL), under p->mu; returns them linked through
 * next, for the caller to answer. */
sip__sched_item_t *sip__pool_unqueue(sip__pool_t *p, const sip_cancel_token_t *match);

#endif
