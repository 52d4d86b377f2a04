/* sip — a pool seen from outside the session layer: who it is, what it
 * serves, and the few changes the management plane makes to it.
 *
 * struct sip__pool is private to the pool's own files (session/pool_impl.h);
 * the server, the pipelines and the front-ends read a pool through these
 * functions, the typed snapshot sip__pool_info_t, the counters of
 * session/observe/counters.h and the model vtable (session/engine.h). */
#ifndef SIP_SESSION_POOL_VIEW_H
#define SIP_SESSION_POOL_VIEW_H

#include <stdint.h>

#include "session/engine.h"

/* What a pool is and serves, read at one instant. Every pointer is
 * borrowed from the pool: valid while the caller holds a reference. */
typedef struct sip__pool_info {
  const char *name;              /* the model's name (cfg->name) */
  const char *version;           /* version served, NULL: unversioned */
  int64_t version_num;           /* the version as a number; -1: none or not numeric */
  int pinned;                    /* a `current` link names this version */
  int from_repo;                 /* loaded from server.model_repository */
  int retired;                   /* out of service: draining */
  const char *fingerprint;       /* identity of the files loaded (repository pools), or NULL */
  const sip__pool_config_t *cfg; /* the config it serves */
  sip__pool_state_t state;
  const char *error;             /* "CODE: message" when FAILED, else NULL */
  const sip_error_t *load_error; /* the same, typed; NULL when it did not fail */
  const char *platform;          /* the backend's platform (else its name); NULL before a load */
  const char *model_path;        /* the model file loaded, else the config's model_path */
  int pool_size;                 /* run-time settings (sip__pool_update) */
  int64_t max_memory_mb;         /* 0: unlimited */
  int max_compute_percent;       /* 0: unset */
  /* Inputs and outputs clients send and get, and the preprocess steps
   * (NULL: none): set once loaded (READY or STOPPED), else empty. */
  const sip_io_desc_t *inputs, *outputs;
  size_t n_inputs, n_outputs;
  const char *preprocess;
  struct sip__sla *sla;          /* the sla block's accounting (session/observe/sla.h), or NULL */
  uint64_t memory_bytes;         /* resident memory its load added, measured */
  /* The engine's model store, while READY: the loaded model it runs on
   * (an opaque key, compared only; NULL: none, as for isolated pools), the
   * bytes of memory_bytes that are that model's (held once however many
   * pools share it) and how many pools run on it (1: this one alone). */
  const void *store_key;
  uint64_t store_bytes;
  long store_pools;
} sip__pool_info_t;

/* Fills `out` (borrowed pointers into `p`). */
void sip__pool_info(const sip__pool_t *p, sip__pool_info_t *out);
/* The model's name, its version (NULL: unversioned), its config and its
 * state: the fields read on every request (borrowed, like the info). */
const char *sip__pool_name(const sip__pool_t *p);
const char *sip__pool_version(const sip__pool_t *p);
const sip__pool_config_t *sip__pool_config(const sip__pool_t *p);
sip__pool_state_t sip__pool_state(const sip__pool_t *p);
/* 1 when the model repository made `p` (0: the config file's pools). */
int sip__pool_from_repo(const sip__pool_t *p);
/* 1 when `p` is READY and not retired. */
int sip__pool_serving(const sip__pool_t *p);
/* The pool of model `m`, NULL when `m` is no pool (a pipeline); and the
 * model a pool is (its vtable: sip__pool_model_vt). Borrowed. */
sip__pool_t *sip__pool_of(sip__model_t *m);
sip__model_t *sip__pool_model(sip__pool_t *p);

/* Marks a pool the model repository made (before it is listed): `pinned`
 * when the model's `current` link names its version, `fingerprint` the
 * identity of its files (taken; may be NULL). */
void sip__pool_set_origin(sip__pool_t *p, int pinned, char *fingerprint);
/* Whether a `current` link names its version (a repository reload). */
void sip__pool_set_pinned(sip__pool_t *p, int pinned);
/* Refuses new requests from now on (UNAVAILABLE) and wakes its sessions,
 * which serve what is queued (server drain). */
void sip__pool_stop_admitting(sip__pool_t *p);

#endif
