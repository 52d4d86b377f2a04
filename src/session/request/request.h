/* sip — the request and the response as the engine holds them (the public
 * API sees them as opaque sip_request_t / sip_response_t). A front-end
 * builds a request through the sip_request_* calls (session/request/request.c);
 * the engine fills the scheduling fields when it is submitted. */
#ifndef SIP_SESSION_REQUEST_H
#define SIP_SESSION_REQUEST_H

#include <stdint.h>

#include "core/trace.h"
#include "sched/queue.h"
#include "sip/backend.h"
#include "sip/server.h"

struct sip__pool;

struct sip_request {
  char *pool;
  char *version; /* NULL: default */
  uint64_t id;
  int priority; /* 0 default, 1 high, 2 medium, 3 low */
  uint32_t timeout_ms;
  uint32_t batch_wait_ms; /* 0: the pool's max_queue_delay (sip_request_set_batch_wait_ms) */
  sip_tensor_t **inputs;
  size_t n_inputs;
  char **outputs;
  size_t n_outputs;
  /* Set when queued. */
  sip__sched_item_t sched;           /* the pool's queues: links, arrival_us, level (SIP__PRIO_*) */
  uint64_t deadline_us;             /* 0: none */
  int64_t rows;                     /* dim 0 shared by every input (batchable), or -1 */
  sip_cancel_token_t *cancel;       /* one reference, or NULL */
  /* pipeline_config, read once by the parameter table (request_params.c)
   * and checked against the pipeline at submission (src/pipeline/run.c). */
  uint32_t *stage_timeout_ms; /* replaces the config's when has_stage_timeouts */
  size_t n_stage_timeouts;
  int has_stage_timeouts;
  char *early_exit; /* early_exit_condition, or NULL */
  char *idem_key;  /* idempotency key (src/server/state/idempotency.c), or NULL */
  char *client_id; /* the client's request id (KServe "id"), keyed when the pool enables it */
  /* Memory offered for outputs (sip_request_set_output_buffer), by name. */
  char **dest_names;
  sip_out_dest_t *dests;
  size_t n_dests;
  /* Sequence batching (src/session/sequence.c): SIP__SEQF_* flags, the id
   * (a number, or seq_sid when a string). */
  int seq_flags;
  uint64_t seq_id;
  char *seq_sid;
  sip_infer_done_fn done;
  void *user;
  /* The reference on the pool taken at admission (src/session/registry.c);
   * dropped after `done` returns, so a retired pool lives until then. */
  struct sip__pool *held;
  /* Failover (src/session/availability.c): retries so far, the fallback
   * pool's reference once sent there, and the session that answered. */
  uint32_t retries;
  struct sip__pool *held_fallback;
  const char *served_by; /* a session's id (the pool outlives the answer) */
  /* Tracing (src/server/observe/tracing.c): the caller's context when it sent a
   * valid traceparent (has_trace_ctx), its tracestate (owned), when the
   * front-end began receiving it; once sampled, the trace (one reference)
   * and the span engine spans go under (0: the root). */
  int has_trace_ctx;
  sip__trace_ctx_t trace_ctx;
  char *tracestate;
  uint64_t recv_ns;
  sip__trace_t *trace;
  uint64_t trace_parent;
};

struct sip_response {
  sip_code_t code;
  char *message;
  uint64_t request_id;
  sip_tensor_t **outputs;
  size_t n_outputs;
  uint64_t queue_us, compute_us, total_us;
  int replayed; /* answered from the idempotency cache (a duplicate's answer) */
  int cached;   /* answered from the response cache (src/server/cache/response_cache.c) */
  uint32_t retries; /* failover: retries before the answer */
  char *served_by;  /* failover: the session that answered a retried request; NULL: none */
  sip__trace_t *trace; /* the request's trace (one reference), or NULL */
};

/* What the parameters say together (request_params.c): INVALID_ARGUMENT
 * for sequence_start/sequence_end without a sequence_id; NULL when fine. */
sip_error_t *sip__request_check_parameters(const sip_request_t *r);

/* The pieces both the public setters and the parameter table set
 * (request.c). The caller's W3C traceparent: its context when valid, else
 * none (ignored, as W3C says). */
void sip__request_traceparent(sip_request_t *r, const char *traceparent);
/* Its tracestate: kept (copied) when valid, else dropped; NULL drops it. */
sip_error_t *sip__request_tracestate(sip_request_t *r, const char *tracestate);
/* The sequence id: a number (sid NULL) or a string (copied); 0 and "" mean
 * no sequence. The start/end flags stay as they are. */
sip_error_t *sip__request_sequence_id(sip_request_t *r, uint64_t id, const char *sid);

#endif
