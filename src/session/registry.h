/* sip — the registry's calls (src/session/registry.c): one list of models,
 * pools and pipelines, behind the model vtable; lookups, references, swap,
 * drain. Its data lives in sip__engine_t (session/engine.h). */
#ifndef SIP_SESSION_REGISTRY_H
#define SIP_SESSION_REGISTRY_H

#include "session/engine.h"

/* One list of models behind sip__model_vt_t: pools (one per version of a
 * model, reference counted, retired and drained while serving) and
 * pipelines (listed once the server is set up; they live as long as the
 * engine). Names are found through the vtable's identity. */
void sip__registry_init(sip__engine_t *s);
void sip__registry_destroy(sip__engine_t *s);
/* Adds pools and retires others in one step (lookups see either the old or
 * the new set); the registry takes a reference on each added pool. Retired
 * pools stay listed (housekeeping and cancellation still reach their queues)
 * until sip__registry_drain_free. Errors: RESOURCE_EXHAUSTED. */
sip_error_t *sip__registry_swap(sip__engine_t *s, sip__pool_t *const *add, size_t n_add,
                                sip__pool_t *const *retire, size_t n_retire);
/* Lists model `m` (borrowed: a pipeline, which outlives the engine's use of
 * it), found by its identity's name before any pool of that name, whatever
 * version is asked for (it refuses versions itself). Set-up time.
 * Errors: RESOURCE_EXHAUSTED. */
sip_error_t *sip__registry_add_model(sip__engine_t *s, sip__model_t *m);
/* Unlists a model sip__registry_add_model listed (before it is freed; no
 * request may be running on it). Nothing when it is not listed. */
void sip__registry_remove_model(sip__engine_t *s, sip__model_t *m);
/* The pool serving `name` (and `version`, NULL: the default one) with a
 * reference for the caller (sip__pool_unref), or NULL with *err set:
 * NOT_FOUND for an unknown name or version (a pipeline's name too). */
sip__pool_t *sip__registry_find(sip__engine_t *s, const char *name, const char *version,
                               sip_error_t **err);
/* The model serving `name`: a pipeline of that name (whatever `version`
 * says), else the pool as sip__registry_find; with a reference for the
 * caller (m->vt->unref); NULL with *err (NOT_FOUND, the same wording)
 * otherwise. */
sip__model_t *sip__registry_find_model(sip__engine_t *s, const char *name, const char *version,
                                       sip_error_t **err);
/* 1 when a pool named `name` is in service. */
int sip__registry_has(sip__engine_t *s, const char *name);
/* 1 when `name` is a listed model that is not a pool (a pipeline). */
int sip__registry_is_named(sip__engine_t *s, const char *name);
/* A pool's reference (the registry's count on its base model). unref
 * never frees: it wakes a drain waiting for the last other reference. */
void sip__pool_ref(sip__pool_t *p);
void sip__pool_unref(sip__pool_t *p);
/* Drops a reference on listed model `m` of engine `s` (the body of
 * sip__pool_unref). */
void sip__registry_unref(sip__engine_t *s, sip__model_t *m);
/* Every listed pool (retired ones too unless only_live), each with a
 * reference; release with sip__registry_release. NULL (n = 0) when nothing
 * is listed or out of memory (sip__registry_pool_count tells which). */
sip__pool_t **sip__registry_snapshot(sip__engine_t *s, int only_live, size_t *n);
void sip__registry_release(sip__pool_t **v, size_t n);
/* Listed pools, retired ones too. */
size_t sip__registry_pool_count(sip__engine_t *s);
/* Calls fn on every listed pool under the registry's read lock (fn must
 * not change the registry). */
void sip__registry_each_pool(sip__engine_t *s, void (*fn)(sip__pool_t *p, void *ctx), void *ctx);
/* The first listed pool (no reference: for the one thread that drains
 * them all at shutdown), NULL when none is left. */
sip__pool_t *sip__registry_first_pool(sip__engine_t *s);
/* Retires `p` (if it is not yet) and, on a thread that is none of its
 * executors, waits until the requests admitted to it completed (its sessions
 * serve its queue meanwhile), stops its sessions, unlists it, waits out
 * iterators and frees it. Blocking. */
void sip__registry_drain_free(sip__engine_t *s, sip__pool_t *p);
/* 1 when `p` is the default version of its model among live pools. Caller
 * holds reg_lock. */
int sip__registry_is_default_locked(sip__engine_t *s, const sip__pool_t *p);

#endif
