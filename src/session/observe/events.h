/* sip — the engine's event bus (include/sip/events.h; docs/events.md).
 * Emission points call the one-line helpers below; with no subscriber each
 * costs one relaxed atomic load. */
#ifndef SIP_SESSION_EVENTS_H
#define SIP_SESSION_EVENTS_H

#include <stdint.h>

#include "sip/events.h"

struct sip__engine;
struct sip__session;
struct sip__pool;
struct sip_request;

typedef struct sip__event_bus sip__event_bus_t;

/* A bus with no subscribers; NULL when out of memory (the engine then
 * refuses subscriptions and emits nothing). */
sip__event_bus_t *sip__event_bus_new(void);
void sip__event_bus_free(sip__event_bus_t *b);
/* Calls every matching subscriber with `ev` (its pool names the pool). */
void sip__event_emit(sip__event_bus_t *b, sip_event_t *ev);
sip_error_t *sip__event_subscribe(sip__event_bus_t *b, const char *pool, sip_event_fn fn,
                                  void *user, sip_event_sub_t **out);
void sip__event_unsubscribe(sip__event_bus_t *b, sip_event_sub_t *sub);

/* ---- emission points ---- */
/* A session moved from `from` to `to` (sip__session_state_t values). */
void sip__events_state(struct sip__session *s, int from, int to);
/* The executor thread runs a batch of `n` requests on `s` (NULL, 0: none
 * now): completions on this thread name it. */
void sip__events_executing(struct sip__session *s, int64_t n);
/* A request of `p` completed with `code` (INFERENCE_COMPLETE or ERROR). */
void sip__events_request(struct sip__pool *p, const struct sip_request *r, int code,
                         const char *msg, uint64_t queue_us, uint64_t total_us);
/* A pool event (LOADED, FAILED, SCALED, FAILOVER); `text` may be NULL. */
void sip__events_pool(struct sip__pool *p, sip_event_type_t type, const char *text);

#endif
