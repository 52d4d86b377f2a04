/* sip — session layer internals: requests, sessions, pools, the server. */
#ifndef SIP_ENGINE_H
#define SIP_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "config/config.h"
#include "core/trace.h"
#include "core/metrics.h"
#include "sched/arbiter.h"
#include "sched/queue.h"
#include "sip/backend.h"
#include "sip/server.h"
#include "session/memory.h"
#include "session/request.h"

/* Session states (the seeds' state machine). */
typedef enum sip__session_state {
  SIP__SESSION_INIT = 0,
  SIP__SESSION_READY,
  SIP__SESSION_RUNNING,
  SIP__SESSION_SUSPENDED,
  SIP__SESSION_FAILED,
  SIP__SESSION_DESTROYED,
  SIP__SESSION_STATES_
} sip__session_state_t;

const char *sip__session_state_name(sip__session_state_t s);
/* 1 when `from → to` is a legal transition. */
int sip__session_transition_ok(sip__session_state_t from, sip__session_state_t to);

typedef struct sip__pool sip__pool_t;

/* ---- models: what the registry serves by name ----
 * A pool (one version of a model) or a pipeline (src/pipeline), behind one
 * vtable: sip_server_infer_async is a lookup plus submit. */
typedef struct sip__model sip__model_t;

typedef enum sip__model_state {
  SIP__MODEL_LOADING = 0,
  SIP__MODEL_READY,
  SIP__MODEL_FAILED,
  SIP__MODEL_STOPPED
} sip__model_state_t;

/* What a model takes and gives (borrowed; valid while a reference is held). */
typedef struct sip__model_io {
  const sip_io_desc_t *inputs, *outputs;
  size_t n_inputs, n_outputs;
} sip__model_io_t;

typedef struct sip__model_vt {
  const char *kind; /* "pool", "pipeline" */
  /* Runs `r` (its done/user set) and answers through r->done. Takes `r` and
   * the caller's reference, also on error (the callback then never fires). */
  sip_error_t *(*submit)(sip__model_t *m, sip_request_t *r);
  /* The same for a client batch split into chunks of max_batch_size rows
   * (sip_server_infer_batch); NULL: plain submit. */
  sip_error_t *(*submit_batch)(sip__model_t *m, sip_request_t *r, int max_batch_size,
                               int padding);
  /* Inputs and outputs; 0 when not known (not READY). */
  int (*describe_io)(sip__model_t *m, sip__model_io_t *io);
  /* The state and, when FAILED, why (borrowed). */
  sip__model_state_t (*state)(sip__model_t *m, const char **error);
  void (*ref)(sip__model_t *m);
  void (*unref)(sip__model_t *m);
} sip__model_vt_t;

struct sip__model {
  const sip__model_vt_t *vt;
};

extern const sip__model_vt_t sip__pool_model_vt;
/* sip__pool_model_vt.submit_batch (src/session/split.c). */
sip_error_t *sip__pool_submit_batch(sip__model_t *m, sip_request_t *r, int max_batch_size,
                                    int padding);

typedef struct sip__session {
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
} sip__session_t;

/* An injected fault (sip fault; server.allow_fault_injection). */
typedef enum sip__fault_kind {
  SIP__FAULT_NONE = 0,
  SIP__FAULT_CRASH,
  SIP__FAULT_HANG,
  SIP__FAULT_SLOW,
  SIP__FAULT_ERROR
} sip__fault_kind_t;
typedef struct sip__fault {
  int kind;       /* sip__fault_kind_t */
  int session;    /* -1: any session */
  int64_t count;  /* executions left to hit; -1: by rate */
  double rate;    /* 0..1, with count -1 */
  int64_t delay_ms;
  uint64_t rng;
} sip__fault_t;
/* What outlives a pool for executions the watchdog abandoned. */
typedef struct sip__pool_life {
  atomic_long refs;    /* the pool's + one per abandoned execution */
  atomic_long running; /* abandoned executions still running */
} sip__pool_life_t;

/* Moves a session to `to`; returns 0 (and changes nothing) when illegal. */
int sip__session_set_state(sip__session_t *s, sip__session_state_t to);

typedef enum sip__pool_state {
  SIP__POOL_LOADING = 0,
  SIP__POOL_READY,
  SIP__POOL_FAILED,
  SIP__POOL_STOPPED
} sip__pool_state_t;
const char *sip__pool_state_name(sip__pool_state_t s);

/* Batch-size histogram: executions by rows, bounds 1, 2, 4, ... 4096, +Inf. */
#define SIP__BATCH_BUCKETS 14

struct sip_cancel_token {
  atomic_long refs;
  atomic_int cancelled;
};

struct sip__pool {
  sip__model_t base; /* first: a pool is a model (sip__pool_model_vt) */
  struct sip__engine *eng;
  const sip__pool_config_t *cfg; /* the server's config's, or own_cfg */
  sip__pool_config_t *own_cfg;   /* repository pools: their config.yaml, owned */
  /* Registry (src/session/registry.c). */
  atomic_long refs;      /* the registry's one + admitted requests + iterators */
  _Atomic int retired;   /* out of service: lookups skip it; it drains, then is freed */
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
  struct sip__sla *sla; /* the sla block's accounting (src/session/sla.h), or NULL */
  /* isolation: process (src/session/isolation.c): the worker's handle
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
};

/* ---- availability (src/session/availability.c) ---- */
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
/* Sets (count > 0 or rate > 0) or clears (kind NONE) the pool's fault. */
sip_error_t *sip__pool_set_fault(sip__pool_t *p, const sip__fault_t *f);
/* Answers `r`, whose session failed with (code, msg): retried on the pool,
 * sent to the fallback pool, or failed, as the pool's failover says. */
void sip__pool_fail_over(sip__pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                         uint64_t queue_us);
/* Session `s` (its execution just failed with `why`) gets a new backend
 * context: FAILED, then READY (1) or FAILED when none could be made (0).
 * Called by the session's own thread. */
int sip__session_renew(sip__session_t *s, const char *why);
/* sip session drain / resume. */
sip_error_t *sip__session_drain(sip__pool_t *p, int index, int drain);
/* A pool whose failover.fallback_pool (among `all`) takes other inputs or
 * gives other outputs becomes FAILED (after both loaded). */
void sip__pool_check_fallback(sip__pool_t *p, sip__pool_t *const *all, size_t n);
/* 1 when fallback pool `fb` takes the inputs and gives the outputs of `p`
 * (both loaded). */
int sip__pool_fallback_fits(const sip__pool_t *p, const sip__pool_t *fb);
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

/* A pool in state LOADING for `cfg` (borrowed; own_cfg, when given, is
 * cfg's owner and is freed with the pool). `version` (copied, may be NULL)
 * presets the version served: the model file is then cfg->model_path as is.
 * NULL when out of memory (own_cfg is then freed). */
sip__pool_t *sip__pool_new(struct sip__engine *s, const sip__pool_config_t *cfg,
                          sip__pool_config_t *own_cfg, const char *version);
/* Frees what shutdown left (sessions array, copies, the struct). */
void sip__pool_destroy(sip__pool_t *p);
/* Loads the model and starts the sessions (blocking). On failure the pool
 * is FAILED with `error` set. */
void sip__pool_load(sip__pool_t *p);
/* Admission checks of a request against the model (names, dtypes, shapes). */
sip_error_t *sip__pool_check_inputs(sip__pool_t *p, const sip_request_t *r);
/* The executor loop of one session (src/session/executor.c). */
void *sip__session_main(void *session);
/* Memory, measured (footprint.c; docs/elastic.md "Memory"). Resident
 * bytes of process `pid` (0: this one) from /proc/<pid>/statm; 0 when
 * unreadable. */
uint64_t sip__resident_bytes_of(int pid);
uint64_t sip__resident_bytes(void);
/* This process's resident bytes after glibc gave its free heap pages back
 * (malloc_trim): what a growth across a load is measured between. */
uint64_t sip__resident_settled(void);
/* The cgroup's memory limit (v2 memory.max, else v1), 0 when none. */
uint64_t sip__cgroup_limit_bytes(void);
/* The machine's MemAvailable, 0 when unknown. */
uint64_t sip__mem_available_bytes(void);
/* Sessions a pool holds at most (pool_size's upper bound). */
#define SIP__MAX_SESSIONS 256
/* Gives session `s` (index set, in the pool's array) its id, clock and
 * ticket, INIT state (pool.c; used again when a pool grows). */
void sip__session_init(sip__pool_t *p, sip__session_t *s, int index);
/* Run-time changes of a READY pool (src/session/scale.c): pool_size (0:
 * unchanged) and quotas (max_memory_mb: -1 unchanged, 0 unlimited;
 * max_compute_percent: -1 unchanged, 0 unset). Growing starts sessions on
 * new backend contexts (no model load); shrinking lets the last sessions
 * finish what they run and stops them. A grown pool over its memory quota
 * is shrunk back and RESOURCE_EXHAUSTED returned. Emits POOL_SCALED. */
sip_error_t *sip__pool_update(sip__pool_t *p, int size, int64_t max_memory_mb,
                              int max_compute_percent);
/* Profiles session `index` of READY pool p for `ms` milliseconds with its
 * backend's operator profiler (blocking): *trace is the backend's Chrome
 * trace JSON (owned). Errors: FAILED_PRECONDITION (a backend without a
 * profiler, a sequence pool), INVALID_ARGUMENT (no such session),
 * UNAVAILABLE (not serving, or the session failed meanwhile). */
sip_error_t *sip__pool_profile(sip__pool_t *p, int index, uint64_t ms, char **trace);
/* Names a started session thread after its session ("pool/0"). */
void sip__session_name_thread(sip__session_t *s);
/* Completes queued requests carrying `t` with CANCELLED. */
void sip__pool_cancel(sip__pool_t *p, const sip_cancel_token_t *t);
/* Completes every queued request with UNAVAILABLE (a drain whose timeout
 * passed); executions already running finish. Counted in drain_shed. */
void sip__pool_shed(sip__pool_t *p);
/* Validates and queues; takes `r` on success only. */
sip_error_t *sip__pool_submit(sip__pool_t *p, sip_request_t *r);
/* Completes queued requests whose deadline passed; returns the earliest
 * remaining deadline (0 when none). */
uint64_t sip__pool_expire(sip__pool_t *p, uint64_t now_us);
/* Stops admitting, lets the executors drain the queue, joins them, frees
 * their contexts (sessions end in `final`) and the model. */
void sip__pool_stop_sessions(sip__pool_t *p, sip__session_state_t final);
/* Stops sessions after the queue drains, frees everything but the struct. */
void sip__pool_shutdown(sip__pool_t *p);
/* Counts the outcome of a request in the pool's metrics; total_ns is its
 * time from arrival (0 for requests refused at admission). */
void sip__pool_count(sip__pool_t *p, sip_code_t code, uint64_t total_ns);

/* ---- versioned model directories (src/session/pool.c) ----
 * A model directory holds <dir>/<version>/<model file>, <version> a name of
 * 1..18 decimal digits and <model file> a default file name of a backend
 * (sip__backend_files), and optionally a `current` link naming the version
 * served by default. A config file's model_path that is a directory and the
 * model repository's models are both read through these. */
typedef struct sip__version_dir {
  int64_t num;   /* the name as a number */
  char name[24]; /* the directory's name */
  char *file;    /* "<dir>/<name>/<model file>" as found, not resolved (owned) */
} sip__version_dir_t;
/* The version directories of `dir` that hold one of `files` (a NULL-
 * terminated list of file names, the first present wins; whatever it is:
 * a link, even one that leads nowhere, or not a regular file; callers
 * check), sorted by number (then name). 0, or an errno (opendir's; ENOMEM)
 * with *out NULL. Free with sip__version_dirs_free. */
int sip__version_dirs(const char *dir, const char *const *files, sip__version_dir_t **out,
                      size_t *n);
void sip__version_dirs_free(sip__version_dir_t *v, size_t n);
/* Reads `dir`'s `current` link: 1 with its target in `target` (`cap`
 * bytes; trailing '/' dropped) and *base at the target's last part (the
 * version's name; "" for "/"), 0 when there is no link, -1 when out of
 * memory. */
int sip__version_current(const char *dir, char *target, size_t cap, const char **base);

/* The response of every completion path. Takes `message` (NULL: "") and
 * `outputs` (an array from malloc with its tensors; dropped unless code is
 * OK). Out of memory gives a RESOURCE_EXHAUSTED response without outputs,
 * or NULL when not even that can be allocated. */
sip_response_t *sip__response_new(sip_code_t code, char *message, uint64_t request_id,
                                  sip_tensor_t **outputs, size_t n_outputs, uint64_t queue_us,
                                  uint64_t compute_us, uint64_t total_us);
/* Records on a response that its request was failed over (retries, the
 * session that answered; copied). */
void sip__response_note_failover(sip_response_t *resp, uint32_t retries, const char *served_by);
/* Completes a request: builds the response, calls done, frees the request. */
void sip__request_complete(sip_request_t *r, sip_code_t code, const char *message,
                           sip_tensor_t **outputs, size_t n_outputs, uint64_t queue_us,
                           uint64_t compute_us);


#define SIP__MAX_BACKENDS 8

/* The engine a server runs (embedded in struct sip_server, src/server): the
 * pool registry, the backends' process state, the execution-slot arbiter,
 * and who to tell about request deadlines. Pools point to it. */
typedef struct sip__engine {
  /* The pool registry (src/session/registry.c): every pool in service or
   * draining, changed while serving under reg_lock. Each entry holds one
   * reference; admitted requests and iterators hold their own. */
  pthread_rwlock_t reg_lock;
  sip__pool_t **pools;
  size_t n_pools, cap_pools;
  pthread_mutex_t reg_mu; /* with reg_cv: a drain waits for references to go */
  pthread_cond_t reg_cv;
  atomic_int reg_waiters;   /* drains waiting on reg_cv */
  _Atomic uint64_t reg_gen; /* bumped on every change (front-end caches compare it) */
  _Atomic uint64_t drain_shed; /* requests answered UNAVAILABLE by sip__pool_shed */
  int registry_inited;      /* reg_lock & co exist */
  /* Models served by name besides pools (pipelines), fixed once the server
   * is set up; found before pools. Not reference counted: they live as
   * long as the engine. */
  struct {
    const char *name;
    sip__model_t *model;
  } *named;
  size_t n_named;
  /* Per-backend process state, initialised on first use. */
  const sip_engine_settings_t *settings;
  struct {
    const sip_backend_vtable_t *vt;
    void *state;
    int inited;
  } backends[SIP__MAX_BACKENDS];
  size_t n_backends;
  pthread_mutex_t backend_mu;
  sip__arbiter_t arbiter; /* execution slots shared by every pool */
  /* Told when a queued request has a deadline (housekeeping expires it). */
  void (*note_deadline)(void *ctx, uint64_t deadline_us);
  void *note_ctx;
  struct sip__event_bus *events; /* subscribers of engine events (src/session/events.h) */
} sip__engine_t;

/* Sets up the engine (registry, backends table, arbiter with `slots`). */
void sip__engine_init(sip__engine_t *e, const sip_engine_settings_t *settings, int slots,
                      void (*note_deadline)(void *, uint64_t), void *note_ctx);
/* Shuts the backends down and frees what init set up (pools are gone). */
void sip__engine_destroy(sip__engine_t *e);
/* Returns the backend's process state, initialising it once. */
sip_error_t *sip__engine_backend_state(sip__engine_t *e, const sip_backend_vtable_t *vt,
                                       void **state);
static inline void sip__engine_note_deadline(sip__engine_t *e, uint64_t deadline_us) {
  if (e->note_deadline) e->note_deadline(e->note_ctx, deadline_us);
}



/* [{name, dtype, shape (null: any rank)}] of descriptors, as the pools
 * introspection lists a pool's inputs and outputs (src/session/describe.c). */
json_t *sip__io_json(const sip_io_desc_t *d, size_t n);
/* A copy of `d` (names copied too), NULL when out of memory; and its free. */
sip_io_desc_t *sip__io_descs_copy(const sip_io_desc_t *d, size_t n);
void sip__io_descs_free(sip_io_desc_t *d, size_t n);

/* ---- pool registry (src/session/registry.c) ---- */
void sip__registry_init(sip__engine_t *s);
void sip__registry_destroy(sip__engine_t *s);
/* Adds pools and retires others in one step (lookups see either the old or
 * the new set); the registry takes a reference on each added pool. Retired
 * pools stay listed (housekeeping and cancellation still reach their queues)
 * until sip__registry_drain_free. Errors: RESOURCE_EXHAUSTED. */
sip_error_t *sip__registry_swap(sip__engine_t *s, sip__pool_t *const *add, size_t n_add,
                                sip__pool_t *const *retire, size_t n_retire);
/* The pool serving `name` (and `version`, NULL: the default one) with a
 * reference for the caller (sip__pool_unref), or NULL with *err set:
 * NOT_FOUND for an unknown name or version. */
sip__pool_t *sip__registry_find(sip__engine_t *s, const char *name, const char *version,
                               sip_error_t **err);
/* 1 when a pool named `name` is in service. */
int sip__registry_has(sip__engine_t *s, const char *name);
void sip__pool_ref(sip__pool_t *p);
void sip__pool_unref(sip__pool_t *p);
/* Every listed pool (retired ones too unless only_live), each with a
 * reference; release with sip__registry_release. NULL (n = 0) when empty or
 * out of memory. */
sip__pool_t **sip__registry_snapshot(sip__engine_t *s, int only_live, size_t *n);
void sip__registry_release(sip__pool_t **v, size_t n);
/* Lists `m` under `name` (borrowed; both outlive the engine's use): found
 * by sip__registry_find_model before any pool. Set-up time only (not
 * thread-safe with lookups). Errors: RESOURCE_EXHAUSTED. */
sip_error_t *sip__registry_add_named(sip__engine_t *s, const char *name, sip__model_t *m);
/* The model serving `name`: a named model (whatever `version` says: it
 * refuses versions itself), else the pool as sip__registry_find; with a
 * reference for the caller; NULL with *err (NOT_FOUND) otherwise. */
sip__model_t *sip__registry_find_model(sip__engine_t *s, const char *name, const char *version,
                                       sip_error_t **err);
/* 1 when `name` is a named model (a pipeline). */
int sip__registry_is_named(sip__engine_t *s, const char *name);
/* Retires `p` (if it is not yet) and, on a thread that is none of its
 * executors, waits until the requests admitted to it completed (its sessions
 * serve its queue meanwhile), stops its sessions, unlists it, waits out
 * iterators and frees it. Blocking. */
void sip__registry_drain_free(sip__engine_t *s, sip__pool_t *p);
/* 1 when `p` is the default version of its model among live pools. Caller
 * holds reg_lock. */
int sip__registry_is_default_locked(sip__engine_t *s, const sip__pool_t *p);

#endif
