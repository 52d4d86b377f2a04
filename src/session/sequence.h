/* sip — sequence batching for stateful models (src/session/sequence.c).
 *
 * A pool with `sequence_batching` binds each sequence (a client-chosen id)
 * to one session on its START request and runs every later request of that
 * sequence on the same session, in arrival order, one at a time. Before a
 * request runs the server adds the control inputs the config names (START,
 * END, READY, CORRID). A sequence's slot frees when its END request starts,
 * or after idle_timeout_us without a request; new sequences wait in a bounded
 * backlog while every slot is taken.
 *
 * Everything here runs under the pool's p->mu except sip__seq_fill, the
 * setup and the free. docs/internals/scheduler.md describes how it sits in
 * the executor loop. */
#ifndef SIP_SESSION_SEQUENCE_H
#define SIP_SESSION_SEQUENCE_H

#include <stdint.h>

#include "session/engine.h"

/* Request flags (sip_request_t.seq_flags). */
enum { SIP__SEQF_SET = 1, SIP__SEQF_START = 2, SIP__SEQF_END = 4 };

typedef struct sip__seq sip__seq_t;

/* For a pool with sequence_batching: checks the control inputs against the
 * model (they exist; dtype and one element), takes them out of p->inputs
 * (clients never send them) and sets p->seq. FAILED_PRECONDITION naming the
 * problem otherwise. Called at load, before the sessions start. */
sip_error_t *sip__seq_setup(sip__pool_t *p);
void sip__seq_free(sip__seq_t *q);

/* Admission checks that need no lock: a sequence id, no control input sent
 * by the client, an id that fits the CORRID input. INVALID_ARGUMENT. */
sip_error_t *sip__seq_check(sip__pool_t *p, const sip_request_t *r);
/* Admission of `r` to a sequence pool, p->mu held: queues it behind its
 * sequence (binding a slot on START, or joining the backlog) or returns the
 * request's error (nothing taken). *wake: the sessions must be woken (the
 * request can run at once). */
sip_error_t *sip__seq_admit(sip__pool_t *p, sip_request_t *r, uint64_t now, int *wake);
/* The next request session `session` should run, p->mu held: the oldest
 * head among its sequences with no request executing; NULL when none.
 * *slot identifies the sequence for sip__seq_done; for its END request it
 * is -1: the slot is released as that request is taken (nothing can join
 * the sequence any more). */
sip_request_t *sip__seq_pop(sip__pool_t *p, int session, int *slot);
/* Adds the control input tensors to `r` (no lock; r is being run).
 * RESOURCE_EXHAUSTED when out of memory. */
sip_error_t *sip__seq_fill(sip__pool_t *p, sip_request_t *r);
/* The request of `slot` popped before finished, p->mu held (slot -1: an
 * END request, nothing to do). Returns the idle deadline to tell
 * housekeeping about (0: none). */
uint64_t sip__seq_done(sip__pool_t *p, int slot, uint64_t now);
/* Releases sequences idle past their timeout (takes p->mu); returns the
 * earliest idle deadline left (0: none). */
uint64_t sip__seq_expire(sip__pool_t *p, uint64_t now);
/* Fails every request still held by sequences (the pool stops) with
 * UNAVAILABLE through `fail`; takes p->mu. */
void sip__seq_drain(sip__pool_t *p, void (*fail)(sip__pool_t *, sip_request_t *));
/* Requests waiting behind their sequences (no lock: a hint). 0 for other
 * pools. */
long sip__seq_queued(const sip__pool_t *p);
/* Sequences bound, waiting in the backlog, and released by idle timeout
 * (all time). Takes p->mu. */
void sip__seq_counts(sip__pool_t *p, uint64_t *active, uint64_t *waiting, uint64_t *expired);

#endif
