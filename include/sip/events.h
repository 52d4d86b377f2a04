/* sip — engine events: what sessions and pools do, as it happens.
 *
 * The engine emits an event on every session state change, every request
 * completion (INFERENCE_COMPLETE when it succeeded, ERROR when it failed)
 * and on pool loads and failures (docs/events.md). A subscriber receives the
 * events of one pool or of all of them.
 *
 * A subscriber's callback runs on the thread that emitted the event (an
 * executor, the loader, housekeeping) with the bus lock held (shared:
 * several threads may call it at once): it must be thread-safe and short,
 * must not block and must not subscribe or unsubscribe. Anything
 * slower goes through a sip_event_ring_t, which a reader of its own drains:
 * the ring is bounded, and when it is full the newest event is dropped and
 * counted (inference never waits for a reader). */
#ifndef SIP_EVENTS_H
#define SIP_EVENTS_H

#include "sip/export.h"

#include <stddef.h>
#include <stdint.h>

#include "sip/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sip_event_type {
  SIP_EVENT_STATE_CHANGE = 1,       /* session, old_state, new_state, text = reason */
  SIP_EVENT_INFERENCE_COMPLETE = 2, /* session, request_id, latency_ms, queue_ms, batch_size */
  SIP_EVENT_ERROR = 3,              /* session ("" before any ran it), request_id, code, text */
  SIP_EVENT_POOL_LOADED = 4,        /* pool */
  SIP_EVENT_POOL_FAILED = 5,        /* pool, text = why */
  SIP_EVENT_POOL_SCALED = 6,        /* pool, text = what changed */
  SIP_EVENT_POOL_FAILOVER = 7,      /* pool, session, text = what took over */
  SIP_EVENT_ALERT = 8,              /* pool, old_state = the alert level before ("none",
                                       "warning", "critical"), new_state = the level now,
                                       text = reason (docs/sla.md) */
  SIP_EVENT_MODEL_LOADED = 9,       /* pool (residency on_demand), text = the load's memory
                                       and wait (docs/elastic.md) */
  SIP_EVENT_MODEL_EVICTED = 10,     /* pool (residency on_demand), text = why and what it held */
  SIP_EVENT_TYPES_
} sip_event_type_t;

/* One event. Strings are copied in (truncated to their arrays), so an
 * event outlives the pool and session it names. */
typedef struct sip_event {
  sip_event_type_t type;
  uint64_t time_us; /* wall clock, microseconds since the epoch */
  char pool[128];
  char session[160]; /* "<pool>/<index>" as listed by status */
  char old_state[16], new_state[16];
  char text[256]; /* reason (STATE_CHANGE), message (ERROR, POOL_*) */
  uint64_t request_id;
  double latency_ms, queue_ms; /* from arrival to completion; of it, waiting */
  int64_t batch_size;          /* requests executed together (0: none ran) */
  int code;                    /* sip_code_t of an ERROR */
} sip_event_t;

/* "STATE_CHANGE", "INFERENCE_COMPLETE", "ERROR", "POOL_LOADED", ...;
 * "UNKNOWN" for other values. */
SIP_API const char *sip_event_type_name(sip_event_type_t t);

/* The event as a JSON object (owned, free with sip_free), with
 * "dropped": events lost before it; NULL when out of memory. Keys:
 * event, time_us, pool, session, and per type old_state/new_state/reason,
 * request_id/latency_ms/queue_ms/batch_size, request_id/code/message,
 * (ALERT) level/state/previous_level/reason: level is the level that fired
 * or (state "resolved") the one that ended; state "firing" or "resolved". */
SIP_API char *sip_event_json(const sip_event_t *ev, uint64_t dropped);

typedef void (*sip_event_fn)(const sip_event_t *ev, void *user);

typedef struct sip_server sip_server_t;
typedef struct sip_event_sub sip_event_sub_t;

/* Calls fn(ev, user) for every event of pool `pool` (copied; NULL or "":
 * every pool) from now until sip_server_unsubscribe_events. *out is the
 * subscription (owned; unsubscribe frees it). Thread-safe.
 * Errors: RESOURCE_EXHAUSTED. */
SIP_API sip_error_t *sip_server_subscribe_events(sip_server_t *srv, const char *pool, sip_event_fn fn,
                                         void *user, sip_event_sub_t **out);
/* Ends a subscription: once it returns fn is not called again. Frees
 * `sub`; NULL is a no-op. Not from inside an event callback. */
SIP_API void sip_server_unsubscribe_events(sip_server_t *srv, sip_event_sub_t *sub);

/* ---- a bounded buffer between the emitting threads and one reader ---- */
typedef struct sip_event_ring sip_event_ring_t;

/* A ring holding up to `capacity` events (0: 1024). NULL when out of memory. */
SIP_API sip_event_ring_t *sip_event_ring_new(size_t capacity);
/* Frees the ring (no push or pop may be running); NULL is a no-op. */
SIP_API void sip_event_ring_free(sip_event_ring_t *r);
/* Appends a copy of `ev`; when the ring is full the event is dropped and
 * counted instead. Returns 1 when kept. Never blocks for long (one short
 * lock). A sip_event_fn: sip_server_subscribe_events(srv, pool,
 * sip_event_ring_push_fn, ring, &sub) fills a ring. */
SIP_API int sip_event_ring_push(sip_event_ring_t *r, const sip_event_t *ev);
SIP_API void sip_event_ring_push_fn(const sip_event_t *ev, void *ring);
/* Takes the oldest event into *ev, waiting up to timeout_ms (0: do not
 * wait; < 0: until one comes or the ring is closed). *dropped is the
 * number of events lost (ring full) since the previous pop. Returns 1 with
 * an event, 0 on timeout or when closed and empty. */
SIP_API int sip_event_ring_pop(sip_event_ring_t *r, sip_event_t *ev, uint64_t *dropped, int timeout_ms);
/* Wakes every waiting pop; later pops do not wait. */
SIP_API void sip_event_ring_close(sip_event_ring_t *r);
/* Events dropped so far in all (for tests and status). */
SIP_API uint64_t sip_event_ring_dropped_total(sip_event_ring_t *r);

#ifdef __cplusplus
}
#endif
#endif
