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
#include "session/store.h"
#include "session/request/request.h"

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
struct sip__engine;

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

/* Who a model is: what the registry finds it by (borrowed; valid while a
 * reference is held). */
typedef struct sip__model_id {
  const char *name;
  const char *version; /* NULL: unversioned (a pipeline, a pool without versions) */
  int64_t version_num; /* the version as a number; -1: none or not numeric */
  int pinned;          /* a `current` link names this version: the model's default */
} sip__model_id_t;

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
  /* Its name and version (the registry's lookups and every listing). */
  void (*identity)(const sip__model_t *m, sip__model_id_t *id);
} sip__model_vt_t;

/* Fields every model has: its vtable, and the registry's bookkeeping
 * (src/session/registry.c) for models it lists. */
struct sip__model {
  const sip__model_vt_t *vt;
  /* Pools: the registry's one + admitted requests + iterators. Pipelines
   * live as long as the engine and count nothing. */
  atomic_long refs;
  _Atomic int retired; /* out of service: lookups skip it; it drains, then is freed */
};

extern const sip__model_vt_t sip__pool_model_vt;
/* sip__pool_model_vt.submit_batch (src/session/split.c). */
sip_error_t *sip__pool_submit_batch(sip__model_t *m, sip_request_t *r, int max_batch_size,
                                    int padding);

typedef struct sip__session sip__session_t;

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

typedef enum sip__pool_state {
  SIP__POOL_LOADING = 0,
  SIP__POOL_READY,
  SIP__POOL_FAILED,
  SIP__POOL_STOPPED,
  /* residency: on_demand, not loaded (never yet, or evicted): its first
   * request queues and asks for a load (src/session/residency.c). */
  SIP__POOL_UNLOADED
} sip__pool_state_t;
const char *sip__pool_state_name(sip__pool_state_t s);

/* Batch-size histogram: executions by rows, bounds 1, 2, 4, ... 4096, +Inf. */
#define SIP__BATCH_BUCKETS 14

struct sip_cancel_token {
  atomic_long refs;
  atomic_int cancelled;
};

/* ---- a pool's life and run-time changes, as the server drives them ----
 * (the pool's own calls are in session/pool_impl.h; what it shows is read
 * through session/pool_view.h and session/observe/counters.h) */
/* Sets (count > 0 or rate > 0) or clears (kind NONE) the pool's fault. */
sip_error_t *sip__pool_set_fault(sip__pool_t *p, const sip__fault_t *f);
/* sip session drain / resume. */
sip_error_t *sip__session_drain(sip__pool_t *p, int index, int drain);
/* A pool whose failover.fallback_pool (among `all`) takes other inputs or
 * gives other outputs becomes FAILED (after both loaded). */
void sip__pool_check_fallback(sip__pool_t *p, sip__pool_t *const *all, size_t n);
/* 1 when fallback pool `fb` takes the inputs and gives the outputs of `p`
 * (both loaded). */
int sip__pool_fallback_fits(const sip__pool_t *p, const sip__pool_t *fb);

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
/* Memory, measured (footprint.c; docs/elastic.md "Memory"). Resident
 * bytes of process `pid` (0: this one) from /proc/<pid>/statm; 0 when
 * unreadable. */
uint64_t sip__resident_bytes_of(int pid);
uint64_t sip__resident_bytes(void);
/* This process's resident bytes after glibc gave its free heap pages back
 * (malloc_trim): what a growth across a load is measured between. */
uint64_t sip__resident_settled(void);
/* The process's peak resident bytes since the last sip__resident_peak_reset
 * (VmHWM of /proc/self/status, which the reset brings down to the resident
 * set by writing 5 to /proc/self/clear_refs): what a load costs at its
 * highest, its parsing buffers and copies included. The reset returns 0
 * when the kernel refused it; the peak is then 0 too. */
int sip__resident_peak_reset(void);
uint64_t sip__resident_peak(void);
/* The cgroup's memory limit (v2 memory.max, else v1), 0 when none. */
uint64_t sip__cgroup_limit_bytes(void);
/* The machine's MemAvailable, 0 when unknown. */
uint64_t sip__mem_available_bytes(void);
/* Sessions a pool holds at most (pool_size's upper bound). */
#define SIP__MAX_SESSIONS 256
/* Run-time changes of a READY pool (src/session/scale.c): pool_size (0:
 * unchanged) and quotas (max_memory_mb: -1 unchanged, 0 unlimited;
 * max_compute_percent: -1 unchanged, 0 unset). Growing starts sessions on
 * new backend contexts (no model load); shrinking lets the last sessions
 * finish what they run and stops them. A grown pool over its memory quota
 * is shrunk back and RESOURCE_EXHAUSTED returned. Emits POOL_SCALED. */
sip_error_t *sip__pool_update(sip__pool_t *p, int size, int64_t max_memory_mb,
                              int max_compute_percent);
/* The autoscaler's resize (src/session/scale.c): toward `want` sessions
 * (0 allowed: every session released; the model stays loaded), stopping at
 * what the pool's memory quota and `room_bytes` (what the server's budget
 * has left; UINT64_MAX: no budget) hold at the measured bytes per session;
 * *capped 1 when that stopped it short. Sessions going finish what they
 * run first. A change is logged and emits POOL_SCALED with `note`
 * ("sessions 2 -> 4 (utilization)", plus the cap when there was one;
 * `why` names the reason). Returns the size now; never fails a request. */
int sip__pool_scale_to(sip__pool_t *p, int want, uint64_t room_bytes, const char *why,
                       char *note, size_t note_cap, int *capped);
/* Profiles session `index` of READY pool p for `ms` milliseconds with its
 * backend's operator profiler (blocking): *trace is the backend's Chrome
 * trace JSON (owned). Errors: FAILED_PRECONDITION (a backend without a
 * profiler, a sequence pool), INVALID_ARGUMENT (no such session),
 * UNAVAILABLE (not serving, or the session failed meanwhile). */
sip_error_t *sip__pool_profile(sip__pool_t *p, int index, uint64_t ms, char **trace);
/* Completes queued requests carrying `t` with CANCELLED. */
void sip__pool_cancel(sip__pool_t *p, const sip_cancel_token_t *t);
/* Completes every queued request with UNAVAILABLE (a drain whose timeout
 * passed); executions already running finish. Counted in drain_shed. */
void sip__pool_shed(sip__pool_t *p);
/* Completes queued requests whose deadline passed; returns the earliest
 * remaining deadline (0 when none). */
uint64_t sip__pool_expire(sip__pool_t *p, uint64_t now_us);
/* Stops sessions after the queue drains, frees everything but the struct. */
void sip__pool_shutdown(sip__pool_t *p);

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
  /* The registry (src/session/registry.c): one list of models, pools (in
   * service or draining) and pipelines, changed while serving under
   * reg_lock. Each entry holds one reference; admitted requests and
   * iterators hold their own. */
  pthread_rwlock_t reg_lock;
  sip__model_t **models;
  size_t n_models, cap_models;
  pthread_mutex_t reg_mu; /* with reg_cv: a drain waits for references to go */
  pthread_cond_t reg_cv;
  atomic_int reg_waiters;   /* drains waiting on reg_cv */
  _Atomic uint64_t reg_gen; /* bumped on every change (front-end caches compare it) */
  _Atomic uint64_t drain_shed; /* requests answered UNAVAILABLE by sip__pool_shed */
  int registry_inited;      /* reg_lock & co exist */
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
  sip__store_t store;     /* loaded models, shared by the pools that name them (session/store.h) */
  /* Told when a queued request has a deadline (housekeeping expires it). */
  void (*note_deadline)(void *ctx, uint64_t deadline_us);
  void *note_ctx;
  struct sip__event_bus *events; /* subscribers of engine events (src/session/observe/events.h) */
  /* Residency (src/session/residency.c; docs/elastic.md): told when a
   * request reaches an UNLOADED pool (name and version borrowed for the
   * call; NULL version: unversioned); the server loads it on its loader. */
  void (*want_load)(void *ctx, const char *name, const char *version);
  void *want_load_ctx;
  /* Autoscaling (src/session/autoscale.c): told when a request reaches a
   * pool that released every session, so the autoscaler starts one now
   * rather than at its next tick. */
  void (*want_scale)(void *ctx);
  void *want_scale_ctx;
  /* Requests to on-demand pools: served by a loaded model (hits), waited
   * for a load (cold starts, with the wait from arrival until the model was
   * loaded), and the models evicted (the server counts those). */
  atomic_uint_fast64_t res_hits, res_cold_starts, res_evictions;
  sip__hist_t res_cold_wait;
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

#endif
