/* sip — request tracing in the server (docs/tracing.md): which requests
 * are traced (the caller's traceparent, Triton's trace settings), the
 * spans front-ends add (receive, send), and the exporter that POSTs
 * finished traces as OTLP/HTTP JSON from a thread of its own.
 *
 * Front-ends: take t0 = sip__now_ns() when a request starts arriving, set
 * sip_request_set_traceparent from the header or metadata and
 * sip__trace_received(r, t0) before submitting; in the completion
 * callback take t = sip__trace_send_begin(resp) before encoding and call
 * sip__trace_sent(resp, t) once the answer is written (or handed to the
 * transport). Untraced requests cost one branch in each.
 */
#ifndef SIP_SERVER_TRACING_H
#define SIP_SERVER_TRACING_H

#include <stdint.h>

#include "core/settings.h"
#include "sip/server.h"

struct sip__tracing_config;

typedef struct sip__tracer sip__tracer_t;

/* The exporter for `cfg` (borrowed: the config outlives it); NULL when
 * cfg has no otlp_endpoint or out of memory (tracing then stays off). */
sip__tracer_t *sip__tracer_new(const struct sip__tracing_config *cfg);
/* Sends what is queued (until a POST fails: the rest is dropped), stops
 * the thread, frees. NULL: no-op.
 * Every trace must have finished (no request or response left). */
void sip__tracer_free(sip__tracer_t *t);
/* Counters for /metrics (all 0 for NULL). */
void sip__tracer_counts(sip__tracer_t *t, uint64_t *sampled, uint64_t *exported,
                        uint64_t *dropped);

/* Decides whether `r` is traced and, when it is, gives it its trace (the
 * root span "request" from its receive time, the receive span). Called by
 * the server when the request is admitted. */
void sip__tracer_sample(sip__tracer_t *t, sip__trace_set_t *settings, sip_request_t *r);

/* When the front-end began receiving `r` (sip__now_ns clock). */
void sip__trace_received(sip_request_t *r, uint64_t t0_ns);
/* sip__now_ns() when `resp` is traced, else 0 (nothing to time). */
uint64_t sip__trace_send_begin(const sip_response_t *resp);
/* Records the send span [t0_ns, now] and ends the request's root span;
 * nothing when t0_ns is 0 or the response untraced. */
void sip__trace_sent(sip_response_t *resp, uint64_t t0_ns);

#endif
