/* sip — the registry: the models a server serves, one list behind the
 * model vtable (session/engine.h): pools, changed while it serves (model
 * repository loads, reloads and unloads), and pipelines, listed once the
 * server is set up.
 *
 * An array of model pointers under a rwlock; a model's name and version
 * come from its vtable's identity. Every pool carries a reference count
 * (its base model's refs): the registry holds one, a request takes one at
 * admission (the lookup) and drops it after its completion callback
 * returned, and iterators (housekeeping, cancellation, introspection) hold
 * one while they look. Retiring a pool is two steps: sip__registry_swap
 * marks it retired (lookups skip it from then on, in the same write-locked
 * step that lists its replacement), and sip__registry_drain_free waits
 * until the requests admitted to it completed (its sessions keep serving
 * its queue), stops its sessions, unlists it and frees it once the last
 * iterator let go. So a request never finds a pool that stops under it, and
 * a pool is never freed while anything can still reach it. Pipelines live
 * as long as the engine: their ref and unref count nothing, and they are
 * never retired. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/pool_view.h"
#include "session/registry.h"
#include "session/residency.h"

void sip__registry_init(sip__engine_t *s) {
  pthread_rwlock_init(&s->reg_lock, NULL);
  pthread_mutex_init(&s->reg_mu, NULL);
  pthread_cond_init(&s->reg_cv, NULL);
}

void sip__registry_destroy(sip__engine_t *s) {
  sip__free(s->models);
  s->models = NULL;
  s->n_models = s->cap_models = 0;
  pthread_rwlock_destroy(&s->reg_lock);
  pthread_mutex_destroy(&s->reg_mu);
  pthread_cond_destroy(&s->reg_cv);
}

static int is_pool(const sip__model_t *m) { return m->vt == &sip__pool_model_vt; }

static void id_of(const sip__model_t *m, sip__model_id_t *id) { m->vt->identity(m, id); }

static int named(const sip__model_t *m, const char *name) {
  sip__model_id_t id;
  id_of(m, &id);
  return !strcmp(id.name, name);
}

void sip__pool_ref(sip__pool_t *p) { atomic_fetch_add(&sip__pool_model(p)->refs, 1); }

void sip__registry_unref(sip__engine_t *s, sip__model_t *m) {
  /* Only the registry's own reference is dropped by the thread that frees
   * the model, so this never frees; it wakes a drain waiting for the count
   * to reach that last reference. `m` may be freed as soon as the count
   * drops, so nothing of it is read afterwards. A drain announces itself in
   * reg_waiters before it reads the count (both sequentially consistent):
   * either it sees this decrement, or this sees it waiting and wakes it
   * under reg_mu, which it holds from its check to its wait. */
  if (atomic_fetch_sub(&m->refs, 1) == 2 && atomic_load(&s->reg_waiters)) {
    pthread_mutex_lock(&s->reg_mu);
    pthread_cond_broadcast(&s->reg_cv);
    pthread_mutex_unlock(&s->reg_mu);
  }
}

/* Room for `more` entries; under the write lock. 0 when out of memory. */
static int reserve(sip__engine_t *s, size_t more) {
  if (s->n_models + more <= s->cap_models) return 1;
  size_t cap = s->cap_models ? s->cap_models * 2 : 8;
  while (cap < s->n_models + more) cap *= 2;
  sip__model_t **v = sip__reallocarray(s->models, cap, sizeof *v);
  if (!v) return 0;
  s->models = v;
  s->cap_models = cap;
  return 1;
}

sip_error_t *sip__registry_swap(sip__engine_t *s, sip__pool_t *const *add, size_t n_add,
                                sip__pool_t *const *retire, size_t n_retire) {
  pthread_rwlock_wrlock(&s->reg_lock);
  if (!reserve(s, n_add)) {
    pthread_rwlock_unlock(&s->reg_lock);
    return SIP__OOM();
  }
  for (size_t i = 0; i < n_add; i++) {
    sip__model_t *m = sip__pool_model(add[i]);
    atomic_store(&m->refs, 1);
    s->models[s->n_models++] = m;
  }
  for (size_t i = 0; i < n_retire; i++) atomic_store(&sip__pool_model(retire[i])->retired, 1);
  atomic_fetch_add(&s->reg_gen, 1);
  pthread_rwlock_unlock(&s->reg_lock);
  return NULL;
}

sip_error_t *sip__registry_add_model(sip__engine_t *s, sip__model_t *m) {
  pthread_rwlock_wrlock(&s->reg_lock);
  if (!reserve(s, 1)) {
    pthread_rwlock_unlock(&s->reg_lock);
    return SIP__OOM();
  }
  atomic_store(&m->refs, 1);
  atomic_store(&m->retired, 0);
  s->models[s->n_models++] = m;
  atomic_fetch_add(&s->reg_gen, 1);
  pthread_rwlock_unlock(&s->reg_lock);
  return NULL;
}

void sip__registry_remove_model(sip__engine_t *s, sip__model_t *m) {
  pthread_rwlock_wrlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_models; i++) {
    if (s->models[i] != m) continue;
    memmove(&s->models[i], &s->models[i + 1], (s->n_models - i - 1) * sizeof s->models[0]);
    s->n_models--;
    atomic_fetch_add(&s->reg_gen, 1);
    break;
  }
  pthread_rwlock_unlock(&s->reg_lock);
}

/* Default version of a model: the one a `current` link names, else the
 * highest number, else the first listed (an unversioned pool). */
static int better_default(const sip__model_id_t *a, const sip__model_id_t *b) {
  if (a->pinned != b->pinned) return a->pinned;
  return a->version_num > b->version_num;
}

int sip__registry_is_default_locked(sip__engine_t *s, const sip__pool_t *p) {
  const sip__model_t *pm = sip__pool_model((sip__pool_t *)p);
  sip__model_id_t pid;
  id_of(pm, &pid);
  for (size_t i = 0; i < s->n_models; i++) {
    const sip__model_t *q = s->models[i];
    if (q == pm || !is_pool(q) || atomic_load(&q->retired)) continue;
    sip__model_id_t qid;
    id_of(q, &qid);
    if (!strcmp(qid.name, pid.name) && better_default(&qid, &pid)) return 0;
  }
  return !atomic_load(&pm->retired);
}

/* Why nothing serves name/version (called without a match, so off the hot
 * path). The one not-found wording: every front-end answers with it. */
static sip_error_t *not_found(sip__engine_t *s, const char *name, const char *version) {
  int n_named = 0, unversioned = 0;
  char versions[256] = "";
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_models; i++) {
    const sip__model_t *m = s->models[i];
    if (!is_pool(m) || atomic_load(&m->retired)) continue;
    sip__model_id_t id;
    id_of(m, &id);
    if (strcmp(id.name, name)) continue;
    n_named++;
    if (!id.version) unversioned = 1;
    else
      snprintf(versions + strlen(versions), sizeof versions - strlen(versions), "%s'%s'",
               versions[0] ? ", " : "", id.version);
  }
  pthread_rwlock_unlock(&s->reg_lock);
  /* Triton's wording, which its clients and examples look for; the
   * versions a model serves are said, never other models. */
  if (!n_named || !version)
    return sip_error_new(SIP_NOT_FOUND, "Request for unknown model: '%s' is not found", name);
  if (unversioned)
    return sip_error_new(SIP_NOT_FOUND,
                         "Request for unknown model: '%s' version %s is not found; it serves an "
                         "unversioned model",
                         name, version);
  return sip_error_new(SIP_NOT_FOUND,
                       "Request for unknown model: '%s' version %s is not found; it serves %s %s",
                       name, version, n_named > 1 ? "versions" : "version", versions);
}

/* The live model serving name/version, with a reference; pools_only skips
 * pipelines. A pipeline of that name is found before any pool and whatever
 * the version. */
static sip__model_t *lookup(sip__engine_t *s, const char *name, const char *version,
                            int pools_only, sip_error_t **err) {
  *err = NULL;
  sip__model_t *pipe = NULL, *exact = NULL, *best = NULL;
  sip__model_id_t best_id = {0};
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_models && !pipe; i++) {
    sip__model_t *m = s->models[i];
    if (atomic_load(&m->retired)) continue;
    sip__model_id_t id;
    id_of(m, &id);
    if (strcmp(id.name, name)) continue;
    if (!is_pool(m)) {
      if (!pools_only) pipe = m;
    } else if (version) {
      if (!exact && id.version && !strcmp(id.version, version)) exact = m;
    } else if (!best || better_default(&id, &best_id)) {
      best = m;
      best_id = id;
    }
  }
  best = pipe ? pipe : version ? exact : best;
  if (best) best->vt->ref(best);
  pthread_rwlock_unlock(&s->reg_lock);
  if (!best) *err = not_found(s, name, version);
  return best;
}

sip__pool_t *sip__registry_find(sip__engine_t *s, const char *name, const char *version,
                               sip_error_t **err) {
  return sip__pool_of(lookup(s, name, version, 1, err));
}

sip__model_t *sip__registry_find_model(sip__engine_t *s, const char *name, const char *version,
                                       sip_error_t **err) {
  return lookup(s, name, version, 0, err);
}

/* 1 when a live model named `name` is listed that is (pool) or is not a pool. */
static int listed(sip__engine_t *s, const char *name, int pool) {
  int found = 0;
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_models && !found; i++) {
    const sip__model_t *m = s->models[i];
    found = is_pool(m) == pool && !atomic_load(&m->retired) && named(m, name);
  }
  pthread_rwlock_unlock(&s->reg_lock);
  return found;
}

int sip__registry_has(sip__engine_t *s, const char *name) { return listed(s, name, 1); }

int sip__registry_is_named(sip__engine_t *s, const char *name) { return listed(s, name, 0); }

sip__pool_t **sip__registry_snapshot(sip__engine_t *s, int only_live, size_t *n) {
  *n = 0;
  pthread_rwlock_rdlock(&s->reg_lock);
  sip__pool_t **v = s->n_models ? sip__calloc(s->n_models, sizeof *v) : NULL;
  for (size_t i = 0; v && i < s->n_models; i++) {
    sip__model_t *m = s->models[i];
    if (!is_pool(m) || (only_live && atomic_load(&m->retired))) continue;
    atomic_fetch_add(&m->refs, 1);
    v[(*n)++] = sip__pool_of(m);
  }
  pthread_rwlock_unlock(&s->reg_lock);
  return v;
}

void sip__registry_release(sip__pool_t **v, size_t n) {
  for (size_t i = 0; i < n; i++) sip__pool_unref(v[i]);
  sip__free(v);
}

size_t sip__registry_pool_count(sip__engine_t *s) {
  size_t n = 0;
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_models; i++) n += is_pool(s->models[i]);
  pthread_rwlock_unlock(&s->reg_lock);
  return n;
}

void sip__registry_each_pool(sip__engine_t *s, void (*fn)(sip__pool_t *p, void *ctx), void *ctx) {
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_models; i++)
    if (is_pool(s->models[i])) fn(sip__pool_of(s->models[i]), ctx);
  pthread_rwlock_unlock(&s->reg_lock);
}

sip__pool_t *sip__registry_first_pool(sip__engine_t *s) {
  sip__pool_t *p = NULL;
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_models && !p; i++) p = sip__pool_of(s->models[i]);
  pthread_rwlock_unlock(&s->reg_lock);
  return p;
}

/* Waits until only the registry's reference is left on a retired model. */
static void wait_last_ref(sip__engine_t *s, sip__model_t *m) {
  atomic_fetch_add(&s->reg_waiters, 1);
  pthread_mutex_lock(&s->reg_mu);
  while (atomic_load(&m->refs) > 1) pthread_cond_wait(&s->reg_cv, &s->reg_mu);
  pthread_mutex_unlock(&s->reg_mu);
  atomic_fetch_sub(&s->reg_waiters, 1);
}

void sip__registry_drain_free(sip__engine_t *s, sip__pool_t *p) {
  sip__model_t *m = sip__pool_model(p);
  atomic_store(&m->retired, 1);
  /* An on-demand pool never loaded has no sessions to serve its queue. */
  if (sip__pool_state(p) == SIP__POOL_UNLOADED)
    sip__pool_fail_queued(p, SIP_UNAVAILABLE,
                          "the model was unloaded before its on-demand load ran");
  /* Nor one whose sessions were all released (autoscale min_sessions 0):
   * the autoscaler starts none on an unlisted pool. */
  else if (!sip__pool_running_sessions(p))
    sip__pool_fail_queued(p, SIP_UNAVAILABLE, "the pool was unloaded while it had no session");
  /* Every admitted request holds a reference until it is answered, so once
   * only ours is left the queue is empty and nothing can be added to it. */
  wait_last_ref(s, m);
  sip__pool_shutdown(p);
  pthread_rwlock_wrlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_models; i++) {
    if (s->models[i] != m) continue;
    memmove(&s->models[i], &s->models[i + 1], (s->n_models - i - 1) * sizeof s->models[0]);
    s->n_models--;
    break;
  }
  atomic_fetch_add(&s->reg_gen, 1);
  pthread_rwlock_unlock(&s->reg_lock);
  /* An iterator that listed it before it was unlisted may still look. */
  wait_last_ref(s, m);
  sip__pool_destroy(p);
}
