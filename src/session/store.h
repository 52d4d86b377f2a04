/* sip — the engine's model store (src/session/store.c; docs/elastic.md "One
 * model store"): a model file is loaded once per engine and shared by every
 * pool that loads the same thing, each pool making its own sessions (run
 * contexts) on it. An entry is keyed by the backend, the file's real path,
 * its size and the SHA-256 of its bytes, and the final backend options
 * (with what the pool adds itself, its CPU set among them); it is reference
 * counted and freed by the backend's model_free at the last release.
 * Thread-safe: pools load on the loader thread and release anywhere. */
#ifndef SIP_SESSION_STORE_H
#define SIP_SESSION_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sip/backend.h"

typedef struct sip__store_entry sip__store_entry_t;

typedef struct sip__store {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* an entry finished loading (or failed) */
  sip__store_entry_t *head;
  atomic_uint_fast64_t loads;  /* backend loads the store made */
  atomic_uint_fast64_t shares; /* acquisitions answered by a model already loaded */
} sip__store_t;

/* What the store holds now (sip__store_read). */
typedef struct sip__store_stats {
  uint64_t loads, shares;
  uint64_t models; /* entries loaded */
  uint64_t bytes;  /* their measured bytes, summed */
} sip__store_stats_t;

void sip__store_init(sip__store_t *st);
/* Frees the store; entries still held are the backends' to leak (none are
 * after every pool was freed). */
void sip__store_destroy(sip__store_t *st);

/* The loaded model for (vt, path, options, extra), loading it with
 * vt->load(state, path, options) when no entry matches: *entry holds one
 * reference (sip__store_release). `path`: the model file (NULL for a
 * backend that needs none); `extra`: what else the model depends on
 * ("" or NULL: nothing). *loaded_now: 1 when this call loaded it. A load
 * another thread is making is waited for. Errors: the backend's load's,
 * NOT_FOUND (the file cannot be read), RESOURCE_EXHAUSTED. */
sip_error_t *sip__store_acquire(sip__store_t *st, const sip_backend_vtable_t *vt, void *state,
                                const char *path, const sip_kv_t *options, size_t n_options,
                                const char *extra, sip__store_entry_t **entry, int *loaded_now);
/* Drops one reference; the last frees the model (vt->model_free). */
void sip__store_release(sip__store_t *st, sip__store_entry_t *e);
/* The entry's model (borrowed while a reference is held). */
void *sip__store_model(const sip__store_entry_t *e);
/* Resident bytes the entry's load added (measured), and the references
 * held now (the pools sharing it; 0 when `e` is no longer in the store:
 * it is only compared, so it may have been released). */
uint64_t sip__store_bytes(const sip__store_entry_t *e);
long sip__store_refs(sip__store_t *st, const sip__store_entry_t *e);
/* Bytes of a loaded entry that (vt, path, options, extra) would share,
 * judged by the file's identity (device, inode, size, mtime) without
 * reading it; 0 when none is loaded. For what a load is expected to take. */
uint64_t sip__store_peek(sip__store_t *st, const sip_backend_vtable_t *vt, const char *path,
                         const sip_kv_t *options, size_t n_options, const char *extra);
void sip__store_read(sip__store_t *st, sip__store_stats_t *out);

#endif
