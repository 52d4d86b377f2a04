/* sip — a pool's counters read at one instant, typed: what the status
 * document, the statistics endpoint and /metrics report, read in one place. */
#ifndef SIP_SESSION_COUNTERS_H
#define SIP_SESSION_COUNTERS_H

#include "core/metrics.h"
#include "session/engine.h"

typedef struct sip__pool_counters {
  int state;                           /* sip__pool_state_t */
  size_t queued[SIP__SCHED_QUEUES];         /* by priority level, then the delayed queue */
  size_t queued_total;
  int active_sessions;                 /* READY or RUNNING */
  uint64_t by_code[SIP_CODE_COUNT_];   /* requests answered, by result code */
  sip__hist_read_t queue, compute, total; /* latency histograms, microseconds */
  uint64_t batch_cum[SIP__BATCH_BUCKETS]; /* rows per execution, cumulative; bucket i <= 2^i, last +Inf */
  uint64_t batch_rows_sum;
  int batch_level;                     /* elastic batching: 0 low, 1 medium, 2 high; -1 off */
  uint64_t compute_ns;                 /* execution time charged by the arbiter */
  /* Its execution time and every pool's over the arbiter's recent window
   * (SIP__ARB_WINDOW_S): the compute share is recent/recent_total, against
   * max_compute_percent (0: unset) as it is now. */
  uint64_t recent_compute_ns, recent_total_ns;
  int compute_percent;
  uint64_t inference_count, execution_count, last_inference_ms;
  sip__stat_read_t success, fail, queue_stat, compute_input, compute_infer, compute_output;
  double load_ms;
  uint64_t model_bytes, memory_bytes, session_bytes; /* measured (footprint.c) */
  uint64_t load_extra_bytes; /* how far its last on-demand load rose above what it kept */
  long store_pools; /* pools running on its loaded model (session/store.h); 0: none */
  uint64_t retries, fallbacks, session_failures; /* failover (docs/availability.md) */
  int standby_sessions;                          /* hot_standby contexts ready */
  uint64_t promotions, last_recovery_us;
  int isolation;                       /* sip__isolation_t */
  int worker_pid, standby_worker_pid;  /* isolation: process; 0: none running */
  uint64_t worker_restarts;
  char worker_exit[192];               /* why the last worker ended; "" none */
  int sequences;                       /* sequence_batching is on: the next three mean something */
  uint64_t seq_active, seq_waiting, seq_expired; /* bound, in the backlog, released idle */
  /* Copies between host and device memory by direction (session/memory.h). */
  uint64_t copies[SIP__COPY_DIRECTIONS], copy_bytes[SIP__COPY_DIRECTIONS];
} sip__pool_counters_t;

/* A compute share: recent / total, 0 when nothing ran in the window. */
static inline double sip__compute_share(uint64_t recent, uint64_t total) {
  return total ? (double)recent / (double)total : 0.0;
}

/* One session of a pool, read at one instant. */
typedef struct sip__session_counters {
  const char *id; /* "pool/0"; valid while the pool is referenced */
  int state;      /* sip__session_state_t */
  uint64_t since_us, inferences, errors;
  uint64_t failures; /* times it failed and was replaced */
  int drained;       /* taken out of service (sip session drain) */
} sip__session_counters_t;

/* Reads `p`'s counters (takes the pool's and the arbiter's locks briefly). */
void sip__pool_counters_read(sip__pool_t *p, sip__pool_counters_t *out);
/* Sessions worth listing: those of a READY, STOPPED or FAILED pool; 0 while
 * it loads. */
int sip__pool_session_count(const sip__pool_t *p);
/* Session `i` (< sip__pool_session_count). */
void sip__pool_session_read(const sip__pool_t *p, int i, sip__session_counters_t *out);

#endif
