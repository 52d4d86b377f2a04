/* sip — libsipclient: a client of the native protocol (docs/protocol.md).
 *
 * One sip_client_t is one connection at a time. It is thread-safe: many
 * threads may issue requests on it at once; requests are pipelined and
 * answered out of order, matched by id. Asynchronous callbacks run on the
 * client's reader thread and must not block for long or call
 * sip_client_free.
 *
 * When the connection drops, the requests waiting on it complete with
 * UNAVAILABLE, except those with an idempotency key whose resend window is
 * not over: they are sent again on the next connection (the server runs
 * them at most once, docs/idempotency.md). The reader thread reconnects
 * with an exponential backoff with jitter (sip_client_set_reconnect) and
 * registers the shared memory regions again; meanwhile new requests get
 * UNAVAILABLE at once (keyed ones wait for the connection). A client is
 * never rebuilt by its user; sip_client_free stops it for good.
 */
#ifndef SIP_CLIENT_H
#define SIP_CLIENT_H

#include "sip/export.h"

#include <stddef.h>
#include <stdint.h>

#include "sip/error.h"
#include "sip/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sip_client sip_client_t;

/* Where a tensor's bytes are in (or go to) one of the connection's shared
 * memory regions (sip_client_shm_create). */
typedef struct sip_client_shm_ref {
  const char *region; /* NULL: inline (on the socket) */
  uint64_t offset;
  uint64_t byte_size; /* outputs: the room at offset; inputs: ignored (the tensor's nbytes) */
} sip_client_shm_ref_t;

/* What to run. Everything is borrowed for the duration of the call only. */
typedef struct sip_client_request {
  const char *pool;
  int priority;        /* 0 pool default, 1 high, 2 medium, 3 low */
  uint32_t timeout_ms; /* 0: none */
  uint64_t request_id; /* 0: assigned by the client */
  const sip_tensor_t *const *inputs;
  size_t n_inputs;
  const char *const *outputs; /* requested outputs; NULL/0: all */
  size_t n_outputs;
  /* For pipelines: JSON {"stage_timeout_ms": [...], "early_exit_condition": "..."}; NULL: none. */
  const char *pipeline_config;
  /* Shared memory (sip_client_infer / sip_client_infer_async only): NULL,
   * or one entry per input: an input whose entry names a region is sent as
   * a reference to its bytes there (its `data` is not read), not copied. */
  const sip_client_shm_ref_t *input_shm;
  /* NULL, or one entry per requested output: the server writes an output
   * whose entry names a region there, and the response's tensor views the
   * region (no copy). */
  const sip_client_shm_ref_t *output_shm;
  /* For pools with sequence_batching (docs/sequences.md): the sequence this
   * request belongs to, a number >= 1 or (when non-NULL, instead) a string;
   * 0 and NULL: none. sequence_start marks its first request, sequence_end
   * its last. */
  uint64_t sequence_id;
  const char *sequence_id_str;
  int sequence_start, sequence_end;
  /* NULL, or a key (1..1024 bytes) under which the server runs the request
   * at most once while it keeps the key (docs/idempotency.md); the client
   * then keeps a copy of the frame and resends it after a reconnection,
   * until timeout_ms (or the resend window when 0) after it was sent. */
  const char *idempotency_key;
  /* NULL, or the caller's W3C trace context (docs/tracing.md): the
   * traceparent header value, and a tracestate (NULL: none) sent with it.
   * The server ignores an invalid traceparent. */
  const char *traceparent, *tracestate;
} sip_client_request_t;

/* A successful answer. Owned by the caller: sip_client_response_free. */
typedef struct sip_client_response {
  uint64_t request_id;
  sip_tensor_t **outputs;
  size_t n_outputs;
  uint64_t queue_us, compute_us, total_us; /* server-side */
  double latency_ms;                       /* client-side round trip */
  int replayed; /* 1: the answer of an earlier request with the same idempotency key */
} sip_client_response_t;

/* Connects to "ipc:///path", "unix:///path" or "tcp://host:port". A unix
 * socket connect refused because the server's listen backlog is full
 * (EAGAIN) is retried, with a backoff from 1 ms to 100 ms, for up to 5 s.
 * Errors: INVALID_ARGUMENT (bad endpoint), UNAVAILABLE (cannot connect). */
SIP_API sip_error_t *sip_client_connect(const char *endpoint, sip_client_t **out);
/* Sends an AUTH message with a bearer token of the server's server.auth
 * (docs/security.md) and waits for its answer: *json (owned; free with
 * sip_client_free_string) is {"authenticated": true, "groups": [...]}. The
 * token (borrowed; copied) is sent first again on every reconnection.
 * Thread-safe. Errors: INVALID_ARGUMENT (NULL or empty token),
 * UNAUTHENTICATED (the server takes no such token; it then closes the
 * connection and the client reconnects without a token), UNAVAILABLE. */
SIP_API sip_error_t *sip_client_authenticate(sip_client_t *c, const char *token, char **json);
/* Closes the connection for good; pending requests complete with
 * UNAVAILABLE. NULL is a no-op. */
SIP_API void sip_client_free(sip_client_t *c);
/* Reconnection: the first delay between attempts (default 50 ms), doubled
 * after each failure up to max_backoff_ms (default 2000; each delay is
 * jittered down to half), and how long keyed requests without a timeout_ms
 * are resent (default 30000 ms). Thread-safe. */
SIP_API void sip_client_set_reconnect(sip_client_t *c, uint32_t backoff_ms, uint32_t max_backoff_ms,
                              uint32_t resend_window_ms);
/* How many times the client reconnected. */
SIP_API uint64_t sip_client_reconnects(sip_client_t *c);

/* Synchronous inference. On success *out is owned by the caller; otherwise
 * the returned error carries the server's code and message. */
SIP_API sip_error_t *sip_client_infer(sip_client_t *c, const sip_client_request_t *req,
                              sip_client_response_t **out);

/* Completion of an asynchronous request: exactly one of resp / err is
 * non-NULL and owned by the callback. */
typedef void (*sip_client_done_fn)(sip_client_response_t *resp, sip_error_t *err, void *user);
/* Sends the request and returns; `done` fires later, exactly once, unless
 * this call returns an error. */
SIP_API sip_error_t *sip_client_infer_async(sip_client_t *c, const sip_client_request_t *req,
                                    sip_client_done_fn done, void *user);

/* A client-side batch (BatchInferenceRequest): the request's inputs stack
 * the items along dim 0; the server splits them into chunks of at most
 * max_batch_size rows (0: the pool's), pads the last chunk per `padding`
 * (0 none, 1 replicate_last, 2 zero) and answers once with outputs in input
 * order (padding removed). Same ownership rules as sip_client_infer*. */
SIP_API sip_error_t *sip_client_batch_infer(sip_client_t *c, const sip_client_request_t *req,
                                    uint32_t max_batch_size, int padding,
                                    sip_client_response_t **out);
SIP_API sip_error_t *sip_client_batch_infer_async(sip_client_t *c, const sip_client_request_t *req,
                                          uint32_t max_batch_size, int padding,
                                          sip_client_done_fn done, void *user);

/* Introspection (INFO_REQUEST kinds 1 ready, 2 pools, 3 status): *json is an
 * owned NUL-terminated string (free with sip_client_free_string). */
SIP_API sip_error_t *sip_client_info(sip_client_t *c, int kind, char **json);
/* Model repository request (REPO_REQUEST): `request` is the JSON text
 * {"action": "index" | "load" | "unload", "model": NAME} (borrowed). Blocks
 * until the server answers (a load answers once the model serves). *json
 * is the answer's JSON, owned (sip_client_free_string); the error carries
 * the server's code and message. */
SIP_API sip_error_t *sip_client_repository(sip_client_t *c, const char *request, char **json);
/* An operator request on sessions (ADMIN_REQUEST; docs/availability.md):
 * injected faults, drain and resume. *json is the answer (free with
 * sip_client_free_string). */
SIP_API sip_error_t *sip_client_admin(sip_client_t *c, const char *request, char **json);
SIP_API void sip_client_free_string(char *s);

/* ---- engine events (docs/events.md) ----
 * A subscription is a connection of its own to `endpoint`: SUBSCRIBE, then
 * the server streams EVENT frames. fn(event_json, user) is called on the
 * subscription's reader thread for every event of pool `pool` (NULL or "":
 * every pool), in the order the engine emitted them; event_json is one
 * event object (docs/events.md: "event", "pool", "session", "time_us",
 * "dropped" and the type's keys), valid during the call. `buffer`: events
 * the server keeps for this subscriber when it falls behind (0: 1024; at
 * most 65536); what does not fit is dropped and counted in the next
 * event's "dropped". `token` (NULL: none) is sent first (server.auth). When
 * the stream ends (the server stopped, the connection broke) fn is called
 * once with NULL. Errors: the server's (NOT_FOUND is not one: a pool that
 * does not exist yet is subscribed to), UNAVAILABLE (cannot connect). */
typedef struct sip_client_sub sip_client_sub_t;
typedef void (*sip_client_event_fn)(const char *event_json, void *user);
SIP_API sip_error_t *sip_client_subscribe(const char *endpoint, const char *pool, uint32_t buffer,
                                  const char *token, sip_client_event_fn fn, void *user,
                                  sip_client_sub_t **out);
/* Ends a subscription: once it returns fn is not called again. Not from
 * inside fn. NULL is a no-op. */
SIP_API void sip_client_unsubscribe(sip_client_sub_t *sub);

SIP_API void sip_client_response_free(sip_client_response_t *r);

/* ---- shared memory (unix socket connections only) ---- */

/* A region: a memfd of the client's, sealed against resizing, mapped here
 * and registered with the server on this connection only (no other process
 * can name it). */
typedef struct sip_client_shm sip_client_shm_t;

/* Creates a region of `byte_size` bytes and registers it as `name`.
 * Errors: INVALID_ARGUMENT (bad name or size), ALREADY_EXISTS (the name is
 * in use on this connection), FAILED_PRECONDITION (a TCP connection),
 * RESOURCE_EXHAUSTED (too many regions; memfd_create or mmap failed). */
SIP_API sip_error_t *sip_client_shm_create(sip_client_t *c, const char *name, size_t byte_size,
                                   sip_client_shm_t **out);
/* The region's first byte (write inputs there, read outputs there) and size. */
SIP_API void *sip_client_shm_data(const sip_client_shm_t *r);
SIP_API size_t sip_client_shm_size(const sip_client_shm_t *r);
/* Unregisters the region and drops the client's hold on it; response
 * tensors that view it keep the mapping until they are freed. NULL is a
 * no-op. Returns the server's error, if any (the region is released
 * anyway). */
SIP_API sip_error_t *sip_client_shm_destroy(sip_client_t *c, sip_client_shm_t *r);
/* The connection's regions as JSON {"regions": [{"name", "offset",
 * "byte_size"}]} (`name` NULL: all); *json owned (sip_client_free_string). */
SIP_API sip_error_t *sip_client_shm_status(sip_client_t *c, const char *name, char **json);
/* Output by name (borrowed), NULL when absent. */
SIP_API const sip_tensor_t *sip_client_response_output(const sip_client_response_t *r, const char *name);

#ifdef __cplusplus
}
#endif
#endif
