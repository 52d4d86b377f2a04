/* sip — the idempotency cache of one model (docs/idempotency.md): a request
 * carrying an idempotency key runs at most once while its entry lives. A
 * duplicate that arrives while the first runs joins it (and gets the same
 * answer with its own request id); one that arrives after it finished gets
 * the kept answer. Answers of UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED and INTERNAL are not kept (a retry may run again);
 * every other answer is, the request's own errors included. Duplicates
 * that joined a request that was cancelled (its client went away) get
 * UNAVAILABLE, so that they send it again. Finished
 * entries expire ttl after they finished and are evicted least recently
 * used first to keep the entry count and the bytes kept within bounds.
 * Thread-safe. */
#ifndef SIP_SERVER_IDEMPOTENCY_H
#define SIP_SERVER_IDEMPOTENCY_H

#include <stddef.h>
#include <stdint.h>

#include "sip/server.h"

typedef struct sip__idem sip__idem_t;
typedef struct sip__idem_entry sip__idem_entry_t;

typedef struct sip__idem_limits {
  uint64_t ttl_us;    /* how long a finished answer is kept */
  size_t max_entries; /* entries, running ones included (>= 1) */
  size_t max_bytes;   /* bytes of kept answers (outputs and messages) */
} sip__idem_limits_t;

typedef struct sip__idem_stats {
  uint64_t hits;      /* duplicates answered from a kept answer */
  uint64_t joins;     /* duplicates that joined a running request */
  uint64_t evictions; /* finished entries dropped by TTL or to stay in bounds */
  uint64_t entries;   /* entries now (running and finished) */
  uint64_t bytes;     /* bytes of kept answers now */
} sip__idem_stats_t;

/* now_us: the clock for TTLs (NULL: sip__now_us). NULL when out of memory. */
sip__idem_t *sip__idem_new(uint64_t (*now_us)(void));
/* Frees the cache and its kept answers. No request may be running through
 * it. NULL is a no-op. */
void sip__idem_free(sip__idem_t *c);

typedef enum sip__idem_outcome {
  SIP__IDEM_RUN = 0, /* submit r; *entry (may be NULL: not tracked) gets its answer */
  SIP__IDEM_JOINED,  /* r was taken: its callback fires with the first one's answer */
  SIP__IDEM_REPLAY,  /* *replay is the kept answer for r (its id): the caller calls
                        r->done(*replay, r->user) and frees r */
} sip__idem_outcome_t;

/* Looks `key` (borrowed) up for request r, whose done/user are set. On RUN
 * with an entry, r's done/user are replaced by the cache's, which answer
 * every joined duplicate then call the original. `keep`: the answer may be
 * kept once finished (0 when outputs went to memory the client owns). */
sip__idem_outcome_t sip__idem_begin(sip__idem_t *c, const sip__idem_limits_t *lim,
                                    const char *key, int keep, sip_request_t *r,
                                    sip__idem_entry_t **entry, sip_response_t **replay);
/* The request of a RUN entry was refused at submission (its callback never
 * fires): the duplicates that joined get `code` and `message`, and the entry
 * goes. */
void sip__idem_abort(sip__idem_t *c, sip__idem_entry_t *entry, sip_code_t code,
                     const char *message);
void sip__idem_stats(sip__idem_t *c, sip__idem_stats_t *out);

/* Told of an answer kept for `key`, with its expiry on the wall clock
 * (microseconds since the epoch); `resp` is borrowed. */
typedef void (*sip__idem_sink_fn)(void *ctx, const char *key, uint64_t expires_wall_us,
                                  const sip_response_t *resp);
/* From now on fn is called with each answer kept, before the request and
 * its duplicates are answered (the idempotency journal). */
void sip__idem_set_sink(sip__idem_t *c, sip__idem_sink_fn fn, void *ctx);
/* Puts a kept answer back (from the journal): `key` finished with `resp`
 * (taken), kept for ttl_left_us more. A key running now keeps its run; a
 * key kept already is replaced. Out of memory drops it. */
void sip__idem_restore(sip__idem_t *c, const char *key, uint64_t ttl_left_us,
                       sip_response_t *resp);
/* Calls fn for every kept answer that has not expired, least recently used
 * first, with the cache locked (fn must not use the cache). */
void sip__idem_foreach(sip__idem_t *c, sip__idem_sink_fn fn, void *ctx);

#endif
