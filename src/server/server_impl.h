/* sip — the server layer's private state: the engine plus lifecycle,
 * model repository, housekeeping, pipelines and front-ends. Only src/server
 * includes this. */
#ifndef SIP_SERVER_SERVER_IMPL_H
#define SIP_SERVER_SERVER_IMPL_H

#include "server/introspect.h"
#include "session/engine.h"

#define SIP__MAX_FRONTENDS 8

typedef struct sip__repo sip__repo_t;

struct sip_server {
  sip__engine_t eng; /* pools, backends, arbiter (src/session) */
  sip__config_t *cfg;
  sip__repo_t *repo;         /* model repository and its worker (src/server/repository.c) */
  uint64_t started_us;

  _Atomic int loaded; /* all pools finished loading */

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
  /* Set when sip_server_free begins: health/ready answers 503 from then on. */
  _Atomic int draining;
  sip__shm_set_t *shm; /* system shared memory regions (core/shm.h) */
  sip__trace_set_t *trace; /* Triton's trace settings (core/settings.h) */
  struct sip__pipeline_set *pipelines; /* built after the pools load (src/pipeline/) */
};

/* ---- model repository (src/server/repository.c) ---- */
/* Starts the loader thread: it loads the config file's pools, then the
 * repository's models (unless model_control is explicit), sets `loaded`,
 * then runs load/unload requests (`wait`: the initial loads happen before
 * this returns). Errors: a repository that is not a directory (NOT_FOUND). */
sip_error_t *sip__repo_start(struct sip_server *s, int wait);
/* Stops the worker: a load in progress completes, queued ones are answered
 * UNAVAILABLE. Safe when never started. */
void sip__repo_stop(struct sip_server *s);
void sip__repo_free(struct sip_server *s);
/* Why `name` has no pool when the repository knows it (loading, unloaded,
 * failed: UNAVAILABLE with the reason), else NULL. */
sip_error_t *sip__repo_unavailable(struct sip_server *s, const char *name);


#endif
