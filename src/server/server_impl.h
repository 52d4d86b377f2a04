/* sip — the server layer's private state: the engine plus lifecycle,
 * model repository, housekeeping, pipelines and front-ends. Only src/server
 * includes this. */
#ifndef SIP_SERVER_SERVER_IMPL_H
#define SIP_SERVER_SERVER_IMPL_H

#include "server/introspect.h"
#include "server/state/idempotency.h"
#include "session/engine.h"
#include "session/pool_view.h"
#include "session/registry.h"

#define SIP__MAX_FRONTENDS 8

/* sip_server_options_t (options.c). */
struct sip_server_options {
  char *config_file;
  char *config_text;
  char *base_dir;
  int listen;
  int wait_for_load;
  /* Listening addresses that replace the config's (sipd --http, --grpc,
   * --endpoint; SIP_HTTP, SIP_GRPC): NULL / none: the config's. */
  char *http, *grpc;
  char **endpoints;
  size_t n_endpoints;
};

/* Puts the options' address overrides into cfg, checked as the config's
 * own are (INVALID_ARGUMENT naming the address and what is expected). */
sip_error_t *sip__server_options_apply(const sip_server_options_t *o, sip__config_t *cfg);

typedef struct sip__repo sip__repo_t;

struct sip_server {
  sip__engine_t eng; /* pools, backends, arbiter (src/session) */
  sip__config_t *cfg;
  sip__repo_t *repo;         /* model repository and its worker (src/server/repository/repository.c) */
  uint64_t started_us;
  /* server.memory_budget_mb in bytes, auto resolved at start (memory.c);
   * 0: none */
  uint64_t memory_budget;
  /* The highest rise of an on-demand load above what it kept, as a share
   * of its model file's size (residency.c; the loader thread's only). */
  double load_extra_ratio;

  _Atomic int loaded; /* all pools finished loading */
  int serving;        /* sip__server_start succeeded */

  /* Housekeeping: expires queued requests at their deadline. */
  pthread_t hk;
  int hk_started;
  pthread_mutex_t hk_mu;
  pthread_cond_t hk_cv;
  _Atomic uint64_t hk_next_us; /* earliest known deadline, UINT64_MAX: none */
  int hk_stop;

  /* Front-ends attached (sip_server_add_frontend), stopped last first. */
  struct {
    const struct sip_frontend_vtable *vt;
    void *state;
  } frontends[SIP__MAX_FRONTENDS];
  size_t n_frontends;
  /* Set when a drain begins (sip_server_drain, or sip_server_free): every
   * front-end's readiness is false and new requests get UNAVAILABLE. */
  _Atomic int draining;
  _Atomic int drain_called;
  /* Set when a drain is asked for (with `draining` when there is no
   * server.drain_delay_ms): readiness is false from then on, while
   * requests are still admitted for drain_delay_ms before `draining`. */
  _Atomic int leaving;
  _Atomic int drain_delay_ms; /* server.drain_delay_ms, as last read */
  _Atomic uint64_t drain_deadline_us; /* 0: no drain; then queues are shed */
  sip__shm_set_t *shm; /* system shared memory regions (core/shm.h) */
  sip__trace_set_t *trace; /* Triton's trace settings (core/settings.h) */
  struct sip__tracer *tracer; /* the OTLP exporter (server/observe/tracing.h); NULL: tracing off */
  /* Config reloads (src/server/reload.c): the file read again; the config
   * whose session_pools serve (cfg, then the last reload's); every config
   * a reload read, kept while pools point into them. cfg keeps the
   * server settings and the pipelines read at start. */
  char *config_path; /* NULL: started from a string */
  _Atomic(sip__config_t *) pools_cfg;
  sip__config_t **reloaded;
  size_t n_reloaded;
  _Atomic int drain_timeout_ms; /* server.drain_timeout_ms, as last read */
  struct sip__pipeline_set *pipelines; /* built after the pools load (src/pipeline/) */
  /* Idempotency caches by model name (idempotency.c), under hk_mu; kept
   * answers wait in `replays` for the housekeeping thread to deliver them
   * (never inside the submitting call); `replaying` counts those queued or
   * being delivered, and a drain waits for it to reach 0 (idem_cv). */
  struct sip__idem_slot *idem;
  /* server.state_dir's idempotency journal (src/server/state/idem_journal.c);
   * NULL: none. journal_floor: its size after it was last started afresh. */
  struct sip__journal *journal;
  _Atomic uint64_t journal_floor;
  atomic_int journal_compact; /* the housekeeping thread starts it afresh */
  struct sip__replay *replays;
  struct sip__replay **replays_tail; /* the last one's next (while replays is not NULL) */
  size_t replaying;
  pthread_cond_t idem_cv;
  struct sip__event_streams *streams; /* sip_server_stream_events (src/server/observe/events.c) */
  struct sip__sla_monitor *sla; /* SLA windows and alerts (src/server/observe/sla_monitor.c) */
  struct sip__autoscaler *autoscaler; /* pools' autoscaling (src/server/autoscale.c) */
  struct sip__rejections *rejections; /* requests refused while decoding (rejections.c) */
  struct sip__rcache *rcache; /* the response cache (response_cache.c) */
};

/* Answers given without running a model (replay.c): queued for the
 * housekeeping thread, which delivers them with hk_mu held (unlocked while
 * it calls each `done`). */
void sip__server_queue_replay(sip_server_t *s, sip_infer_done_fn done, void *user,
                              sip_response_t *resp);
void sip__server_deliver_replays(sip_server_t *s);

/* The table of rejected requests (rejections.c); NULL when out of memory. */
typedef struct sip__rejections sip__rejections_t;
sip__rejections_t *sip__rejections_new(void);
void sip__rejections_free(sip__rejections_t *r);

/* ---- residency (residency.c; docs/elastic.md "Residency") ---- */
/* 1 when a pool of `pc` (from the model repository or not) is on-demand:
 * residency on_demand, or absent for a repository model under a budget. */
int sip__residency_on_demand(const sip_server_t *s, const sip__pool_config_t *pc, int from_repo);
/* The engine's want_load hook (ctx: the server): queues the load of an
 * UNLOADED pool on the loader thread. */
void sip__residency_want_load(void *ctx, const char *name, const char *version);
/* On the loader thread: makes room under the budget (evicting idle
 * on-demand pools, least recently used first) and loads the UNLOADED pool
 * `name` (`version`, NULL: the default); without room its queued requests
 * are answered RESOURCE_EXHAUSTED. Returns that error (owned), else NULL. */
sip_error_t *sip__residency_load(sip_server_t *s, const char *name, const char *version);

/* server.memory_budget_mb in bytes (memory.c): auto is 80% of the
 * cgroup's limit, else of MemAvailable, read now (and logged); 0: none. */
uint64_t sip__server_memory_budget(const sip__config_t *cfg);

/* Ends every event stream (src/server/observe/events.c); before the engine goes. */
void sip__event_streams_stop(sip_server_t *s);

/* ---- model repository (src/server/repository/repository.c) ---- */
/* Starts the loader thread: it loads the config file's pools, then the
 * repository's models (unless model_control is explicit), sets `loaded`,
 * then runs load/unload requests (`wait`: the initial loads happen before
 * this returns). Errors: a repository that is not a directory (NOT_FOUND). */
sip_error_t *sip__repo_start(struct sip_server *s, int wait);
/* Stops the worker: a load in progress completes, queued ones are answered
 * UNAVAILABLE. Safe when never started. */
void sip__repo_stop(struct sip_server *s);
void sip__repo_free(struct sip_server *s);
/* sip_server_admin's "profile" (src/server/observe/profile.c): with done, answered
 * from a thread of its own (NULL returned); without, at once in *answer.
 * Errors: the request's arguments (INVALID_ARGUMENT). */
sip_error_t *sip__admin_profile(struct sip__pool *p, json_t *req, sip_admin_done_fn done,
                                void *user, char **answer);
/* The answer of a profile from the backend's Chrome trace (docs/profiling.md). */
sip_error_t *sip__profile_summary(const char *trace_text, const char *pool, int session,
                                  double seconds, int with_trace, json_t **out);
/* Records pool p's run-time settings (size, quotas, drained sessions) in
 * the state checkpoint, or forgets them when they match its config; a
 * no-op without server.state_dir. Thread-safe. */
void sip__repo_checkpoint_pool(struct sip_server *s, struct sip__pool *p);
/* Forgets what the checkpoint recorded of pool `name` (it was reloaded
 * from its config). */
void sip__repo_forget_pool(struct sip_server *s, const char *name);
/* Reads the config file again and applies its session_pools (reload.c);
 * on the loader thread. */
sip_error_t *sip__server_reload(struct sip_server *s);
/* Why `name` has no pool when the repository knows it (loading, unloaded,
 * failed: UNAVAILABLE with the reason), else NULL. */
sip_error_t *sip__repo_unavailable(struct sip_server *s, const char *name);

/* Calls fn for each model's idempotency cache (prometheus.c), under hk_mu. */
void sip__server_idem_stats(struct sip_server *s,
                            void (*fn)(void *ctx, const char *model, const sip__idem_stats_t *st),
                            void *ctx);

#endif
