/* sip — the front-end interface.
 *
 * A front-end brings requests to the engine over some protocol: the native
 * framed protocol on unix/tcp endpoints and KServe v2 HTTP are the two this
 * build carries; an embedder may attach its own. The engine only ever talks
 * to this vtable and knows no front-end by name; a front-end reaches the
 * engine through the public calls (sip/server.h) only.
 *
 * Lifecycle: `start` runs once when the front-end is attached; `stop` runs
 * while the server is freed, after every pool drained — every request the
 * front-end submitted has completed by then — and must close its
 * connections and free `state`.
 */
#ifndef SIP_FRONTEND_H
#define SIP_FRONTEND_H

#include "sip/export.h"

#include <stddef.h>

#include "sip/error.h"
#include "sip/server.h"
#include "sip/events.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reports one kind of connection and how many are open (e.g. "unix", 3). */
typedef void (*sip_frontend_count_fn)(void *ctx, const char *kind, long open);

typedef struct sip_frontend_vtable {
  const char *name; /* "native", "http" */
  /* Starts serving `s`. `options` is what the caller of
   * sip_server_add_frontend passed (the built-in front-ends take the
   * server's parsed config). Errors name the address that failed. */
  sip_error_t *(*start)(sip_server_t *s, const void *options, void **state);
  void (*stop)(void *state);
  /* The addresses it serves ("unix:///run/sip.sock", "http://host:port"). */
  size_t (*address_count)(void *state);
  const char *(*address)(void *state, size_t i);
  /* Open connections, by kind (may be NULL). Thread-safe. */
  void (*connections)(void *state, sip_frontend_count_fn emit, void *ctx);
} sip_frontend_vtable_t;

/* Starts `vt` on `s` and keeps it until sip_server_free (at most 8 per
 * server). Errors: what `start` returned; RESOURCE_EXHAUSTED when full. */
SIP_API sip_error_t *sip_server_add_frontend(sip_server_t *s, const sip_frontend_vtable_t *vt,
                                     const void *options);

/* Encodes one event for the wire: owned bytes (free with sip_free) and
 * their length, or NULL when out of memory (the stream then ends).
 * `dropped`: events lost before it because the reader was slow. */
typedef void *(*sip_event_encode_fn)(const sip_event_t *ev, uint64_t dropped, size_t *len,
                                     void *user);
/* Streams the events of `pool` (NULL or "": every pool) to socket `fd`
 * (taken: closed when the stream ends, also on error) from a thread of the
 * server's: first the `first_len` bytes at `first` (copied), then each
 * event as `enc` encodes it. Events wait in a ring of `capacity` events
 * (0: 1024); when the reader is slower than the engine the newest are
 * dropped and counted, and the next event sent carries the count, so
 * inference never waits for a reader. The stream ends when the peer closes
 * or a write fails, and at sip_server_free. At most 64 streams at once.
 * Errors: RESOURCE_EXHAUSTED. */
SIP_API sip_error_t *sip_server_stream_events(sip_server_t *s, int fd, const char *pool,
                                      size_t capacity, const void *first, size_t first_len,
                                      sip_event_encode_fn enc, void *user);

#ifdef __cplusplus
}
#endif
#endif
