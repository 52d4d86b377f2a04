/* sip — a pool's internals: struct sip__pool and its sessions.
 *
 * Private to the files that implement the pool (src/session: pool*.c,
 * executor.c, availability.c, isolation*, worker*, split.c, scale.c, ...;
 * scripts/check_layers.py lists them and fails the build's `layers` test
 * when any other file includes this header). Everything else reaches a pool
 * through the model vtable and the views and functions of
 * session/engine.h and session/pool_view.h. */
#ifndef SIP_POOL_IMPL_H
#define SIP_POOL_IMPL_H

#include "session/engine.h"
#include "session/registry.h"

typedef struct sip__pool_life sip__pool_life_t;

struct sip__session {
  sip__pool_t *pool;
  int index;
  char id[160];
  void *ctx; /* backend session */
  pthread_t thread;
  int thread_started;
  _Atomic int state;
  _Atomic uint64_t since_us; /* wall clock of the last transition */
  atomic_uint_fast64_t inferences, errors;
  sip__arb_ticket_t ticket; /* place in line for a compute slot */
  /* Availability (src/session/availability.c). Under the pool's mu: */
  struct sip__exec *exec; /* the execution running (pools with a watchdog), or NULL */
  _Atomic int drain;      /* taken out of service (sip session drain): SUSPENDED when idle */
  atomic_uint_fast64_t failures; /* times the session failed and was replaced */
  char last_failure[256];        /* why it last failed ("" never), under the pool's mu */
  _Atomic int retire;            /* scaled away: the thread ends once it holds no work */
  uint64_t failed_at_us;         /* a replaced session: when the failure was seen, until its first answer */
};

/* What outlives a pool for executions the watchdog abandoned. */
struct sip__pool_life {
  atomic_long refs;    /* the pool's + one per abandoned execution */
  atomic_long running; /* abandoned executions still running */
};

struct sip__pool {
  /* First: a pool is a model (sip__pool_model_vt); base.refs and
   * base.retired are the registry's. */
  sip__model_t base;
  struct sip__engine *eng;
  const sip__pool_config_t *cfg; /* the server's config's, or own_cfg */
  sip__pool_config_t *own_cfg;   /* repository pools: their config.yaml, owned */
  int from_repo;         /* loaded from server.model_repository */
  int64_t version_num;   /* the version as a number; -1: unversioned or not numeric */
  int pinned;            /* a `current` link names this version: the model's default */
  char *fingerprint;     /* identity of the files loaded (repository pools), NULL: none */
  const sip_backend_vtable_t *backend;
  void *model;
  sip_io_desc_t *inputs, *outputs; /* the pool's copies, freed with the server */
  size_t n_inputs, n_outputs;
  char *resolved_path; /* the model file actually loaded */
  char *version;       /* version directory name, or NULL; preset for repository pools */
  _Atomic int state;   /* sip__pool_state_t */
  char *error;         /* why FAILED, "CODE: message"; set before state becomes FAILED */
  sip_error_t *load_error; /* the same, typed (owned) */
  double load_ms;
  uint64_t model_bytes;  /* size of the model file */
  uint64_t memory_bytes; /* resident memory the load added (model + sessions) */
  uint64_t session_bytes; /* what one session added, measured (mean of those made together) */

  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  /* Queued requests by level, and the delayed ones (src/sched/queue.h);
   * queue.n counts them all without the lock. */
  sip__sched_queue_t queue;
  int stopping;
  int forming;         /* a session is waiting for a batch to fill */
  int spinning;        /* a session polls the queue before sleeping (executor.c) */
  int64_t fixed_batch; /* > 0: the model's dim 0 is fixed at this size */
  /* preprocess block: run on each request by the executor before batching;
   * inputs[] then describes the raw input clients send (src/session/preprocess.h). */
  struct sip__preprocess *pre;
  /* sequence_batching: sequences bound to sessions (src/session/sequence.c);
   * NULL for other pools. Guarded by mu. */
  struct sip__seq *seq;
  /* Elastic batching: arrival-rate estimate and the traffic level it picks. */
  uint64_t rate_win_start_us;
  uint64_t rate_win_count;
  double rate_rps;
  _Atomic int batch_level; /* 0 low, 1 medium, 2 high */
  sip__arb_account_t arb;   /* guarded by the server's arbiter */
  atomic_uint_fast64_t batch_hist[SIP__BATCH_BUCKETS];
  atomic_uint_fast64_t batch_rows_sum;
  /* Sessions [0, n_sessions) run; the array holds cap_sessions, so that a
   * pool scaled at run time (src/session/scale.c) never moves a session. */
  sip__session_t *sessions;
  int n_sessions, cap_sessions;
  /* Run-time settings over cfg's (sip__pool_update): the pool's size and
   * quotas as they are now. */
  atomic_int size;
  _Atomic int64_t quota_memory_mb; /* 0: unlimited */
  atomic_int quota_compute_percent; /* 0: unset (100) */
  pthread_mutex_t scale_mu;         /* one update at a time */

  atomic_uint_fast64_t by_code[SIP_CODE_COUNT_];
  sip__hist_t h_queue, h_compute, h_total;
  /* Triton-style cumulative statistics (count and nanoseconds). */
  sip__stat_t st_success, st_fail, st_queue, st_compute_input, st_compute_infer, st_compute_output;
  atomic_uint_fast64_t inference_count; /* requests executed */
  atomic_uint_fast64_t execution_count; /* backend executions (batches) */
  atomic_uint_fast64_t last_inference_ms; /* wall clock of the last completion */
  /* Availability (src/session/availability.c). */
  sip__fault_t fault;       /* under mu */
  atomic_int fault_armed;   /* a fault is set: executions look */
  pthread_t watchdog;
  int watchdog_started;
  pthread_cond_t wd_cv;     /* with mu, CLOCK_MONOTONIC: wakes the watchdog to stop */
  sip__pool_life_t *life;
  atomic_uint_fast64_t n_retries, n_fallbacks, n_session_failures;
  atomic_int n_drained; /* sessions drained: arrivals wake every session */
  /* hot_standby: warmed backend contexts that take no traffic, promoted
   * into a failed session (under mu); refilled by the watchdog thread. */
  void **standby;
  int n_standby;
  int standby_broken;                 /* a warm-up failed: no more refills */
  atomic_uint_fast64_t n_promotions;
  atomic_uint_fast64_t last_recovery_us; /* failure seen → first answer of its replacement */
  struct sip__sla *sla; /* the sla block's accounting (src/session/observe/sla.h), or NULL */
  /* isolation: process (src/session/isolation/isolation.c): the worker's handle
   * (p->model while loaded) and the forwarding backend p->backend points
   * to; what status shows of the worker processes. */
  struct sip__iso *iso;
  sip_backend_vtable_t iso_vt;
  atomic_int worker_pid, standby_pid; /* 0: none running */
  atomic_uint_fast64_t worker_restarts;
  char worker_exit[192]; /* why the last worker ended ("" none); under mu */
  /* A backend that wants device memory runs through a copying wrapper
   * (src/session/memory.c) p->backend points to; its copies, counted. */
  sip_backend_vtable_t mem_vt;
  sip__copy_counters_t copies;
  /* Residency (src/session/residency.c): on_demand pools start UNLOADED
   * and load at their first request; until the model's inputs are known
   * (io_known, under mu) requests queue unchecked and are checked by
   * sip__pool_admit_cold before any session runs. */
  int on_demand;
  int io_known;
  atomic_int load_asked;          /* a load was asked for and is not yet done */
  _Atomic uint64_t last_used_us;  /* monotonic time of the last request admitted */
  uint64_t expected_bytes;        /* what a load is expected to take (last measured), 0: unknown */
  uint64_t load_extra_bytes;      /* how far its last load peaked above what it kept, 0: unknown */
  /* The engine's model store (src/session/store.c, pool_open.c): the entry
   * whose model this pool runs on (NULL: isolated or not loaded; kept,
   * only compared, once released), the
   * bytes its load measured (counted in memory_bytes), and whether this
   * pool's load made it (else it was shared). */
  struct sip__store_entry *stored;
  uint64_t store_bytes;
  int store_loaded;
  /* Autoscaling (src/session/autoscale.c): requests admitted (the
   * forecast's arrivals) and the sampler's state, made by its first tick
   * and freed with the pool. */
  atomic_uint_fast64_t arrivals;
  struct sip__autoscale *_Atomic as;
};

/* ---- the pool's own calls (availability.c, executor.c, pool.c, session.c, admission.c) ---- */
/* Moves a session to `to`; returns 0 (and changes nothing) when illegal. */
int sip__session_set_state(sip__session_t *s, sip__session_state_t to);

/* Sets up / frees the pool's availability state (pool_new / pool_destroy). */
int sip__avail_init(sip__pool_t *p);
void sip__avail_destroy(sip__pool_t *p);
/* Starts the watchdog when the pool has hang_timeout_ms or
 * health_check_interval_ms; stops it (before the sessions are joined). */
void sip__avail_start(sip__pool_t *p);
void sip__avail_stop(sip__pool_t *p);
/* Waits for abandoned executions (bounded); 0 when some still run and the
 * model must be kept. */
int sip__avail_wait_abandoned(sip__pool_t *p);
/* The fault the next execution of session `s` takes (consumed), with its
 * delay; SIP__FAULT_NONE mostly. */
sip__fault_kind_t sip__fault_take(sip__pool_t *p, const sip__session_t *s, int64_t *delay_ms);
/* Answers `r`, whose session failed with (code, msg): retried on the pool,
 * sent to the fallback pool, or failed, as the pool's failover says. */
void sip__pool_fail_over(sip__pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                         uint64_t queue_us);
/* Session `s` (its execution just failed with `why`) gets a new backend
 * context: FAILED, then READY (1) or FAILED when none could be made (0).
 * Called by the session's own thread. */
int sip__session_renew(sip__session_t *s, const char *why);
/* The execution record of pools with a watchdog (executor.c). */
typedef struct sip__exec sip__exec_t;
sip__exec_t *sip__exec_begin(sip__session_t *s, sip_request_t *const *reqs, size_t n);
/* 1: the execution is still the session's (normal completion; the record
 * is freed); 0: the watchdog abandoned it: the caller frees what it holds,
 * calls sip__exec_abandoned_exit and ends without touching the session or
 * the pool. */
int sip__exec_end(sip__session_t *s, sip__exec_t *x);
void sip__exec_abandoned_exit(sip__exec_t *x);
/* For an injected hang: 1 once the watchdog abandoned the execution. */
int sip__exec_abandoned(const sip__exec_t *x);
/* A replaced session answered: records the time from its failure to this
 * first answer. */
void sip__session_first_answer(sip__session_t *s);
/* The failure path of a finished request (executor.c's). */
void sip__pool_finish_failed(sip__pool_t *p, sip_request_t *r, sip_code_t code,
                             const char *msg, uint64_t queue_us);
/* Admission checks of a request against the model (names, dtypes, shapes). */
sip_error_t *sip__pool_check_inputs(sip__pool_t *p, const sip_request_t *r);
/* The executor loop of one session (src/session/executor.c). */
void *sip__session_main(void *session);
/* Gives session `s` (index set, in the pool's array) its id, clock and
 * ticket, INIT state (pool.c; used again when a pool grows). */
void sip__session_init(sip__pool_t *p, sip__session_t *s, int index);
/* Names a started session thread after its session ("pool/0"). */
void sip__session_name_thread(sip__session_t *s);
/* Validates and queues; takes `r` on success only. */
sip_error_t *sip__pool_submit(sip__pool_t *p, sip_request_t *r);
/* Loads p->cfg's model for `p` (p->backend and p->resolved_path set):
 * from the engine's model store, shared with the pools that load the same,
 * or in the pool's worker (isolation: process); wraps it when its backend
 * wants device memory. Sets p->model (pool_open.c). */
sip_error_t *sip__pool_open_model(sip__pool_t *p);
/* Lets go of the model: the store's reference (freed at its last), the
 * worker's model, the wrapper; with `free_it` 0 (executions still use it)
 * only forgets it. */
void sip__pool_close_model(sip__pool_t *p, int free_it);
/* The bytes of the model p's config would share from the store were it
 * loaded now (judged by the file's identity), 0: none loaded. */
uint64_t sip__pool_shared_bytes(sip__pool_t *p);
/* Stops admitting, lets the executors drain the queue, joins them, frees
 * their contexts (sessions end in `final`) and the model. */
void sip__pool_stop_sessions(sip__pool_t *p, sip__session_state_t final);
/* A request to an on-demand pool that is UNLOADED or LOADING: queued
 * unchecked (*queued 1) until the model's inputs are known, asking for a
 * load; *queued 0 (and NULL) once they are: the caller admits it the usual
 * way. Takes `r` when *queued (admission.c). */
sip_error_t *sip__pool_submit_cold(sip__pool_t *p, sip_request_t *r, int *queued);
/* Checks the requests queued during a cold load against the loaded model
 * (failing those that do not fit), counts them as cold starts and marks the
 * inputs known; before the sessions start (load in pool.c). */
void sip__pool_admit_cold(sip__pool_t *p);
/* Counts the outcome of a request in the pool's metrics; total_ns is its
 * time from arrival (0 for requests refused at admission). */
void sip__pool_count(sip__pool_t *p, sip_code_t code, uint64_t total_ns);

#endif
