/* sip — the pool registry: the pools a server serves, changed while it
 * serves (model repository loads, reloads and unloads).
 *
 * An array of pool pointers under a rwlock. Every pool carries a reference
 * count: the registry holds one, a request takes one at admission (the
 * lookup) and drops it after its completion callback returned, and
 * iterators (housekeeping, cancellation, introspection) hold one while they
 * look. Retiring a pool is two steps: sip__registry_swap marks it retired
 * (lookups skip it from then on, in the same write-locked step that lists
 * its replacement), and sip__registry_drain_free waits until the requests
 * admitted to it completed (its sessions keep serving its queue), stops its
 * sessions, unlists it and frees it once the last iterator let go. So a
 * request never finds a pool that stops under it, and a pool is never freed
 * while anything can still reach it. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "session/engine.h"

void sip__registry_init(sip__engine_t *s) {
  pthread_rwlock_init(&s->reg_lock, NULL);
  pthread_mutex_init(&s->reg_mu, NULL);
  pthread_cond_init(&s->reg_cv, NULL);
}

void sip__registry_destroy(sip__engine_t *s) {
  sip__free(s->named);
  s->named = NULL;
  s->n_named = 0;
  sip__free(s->pools);
  s->pools = NULL;
  s->n_pools = s->cap_pools = 0;
  pthread_rwlock_destroy(&s->reg_lock);
  pthread_mutex_destroy(&s->reg_mu);
  pthread_cond_destroy(&s->reg_cv);
}

void sip__pool_ref(sip__pool_t *p) { atomic_fetch_add(&p->refs, 1); }

void sip__pool_unref(sip__pool_t *p) {
  /* Only the registry's own reference is dropped by the thread that frees
   * the pool, so this never frees; it wakes a drain waiting for the count
   * to reach that last reference. `p` may be freed as soon as the count
   * drops, so nothing of it is read afterwards. A drain announces itself in
   * reg_waiters before it reads the count (both sequentially consistent):
   * either it sees this decrement, or this sees it waiting and wakes it
   * under reg_mu, which it holds from its check to its wait. */
  sip__engine_t *s = p->eng;
  if (atomic_fetch_sub(&p->refs, 1) == 2 && atomic_load(&s->reg_waiters)) {
    pthread_mutex_lock(&s->reg_mu);
    pthread_cond_broadcast(&s->reg_cv);
    pthread_mutex_unlock(&s->reg_mu);
  }
}

sip_error_t *sip__registry_swap(sip__engine_t *s, sip__pool_t *const *add, size_t n_add,
                                sip__pool_t *const *retire, size_t n_retire) {
  pthread_rwlock_wrlock(&s->reg_lock);
  if (s->n_pools + n_add > s->cap_pools) {
    size_t cap = s->cap_pools ? s->cap_pools * 2 : 8;
    while (cap < s->n_pools + n_add) cap *= 2;
    sip__pool_t **v = sip__reallocarray(s->pools, cap, sizeof *v);
    if (!v) {
      pthread_rwlock_unlock(&s->reg_lock);
      return SIP__OOM();
    }
    s->pools = v;
    s->cap_pools = cap;
  }
  for (size_t i = 0; i < n_add; i++) {
    atomic_store(&add[i]->refs, 1);
    s->pools[s->n_pools++] = add[i];
  }
  for (size_t i = 0; i < n_retire; i++) atomic_store(&retire[i]->retired, 1);
  atomic_fetch_add(&s->reg_gen, 1);
  pthread_rwlock_unlock(&s->reg_lock);
  return NULL;
}

/* Default version of a model: the one a `current` link names, else the
 * highest number, else the first listed (an unversioned pool). */
static int better_default(const sip__pool_t *a, const sip__pool_t *b) {
  if (a->pinned != b->pinned) return a->pinned;
  return a->version_num > b->version_num;
}

int sip__registry_is_default_locked(sip__engine_t *s, const sip__pool_t *p) {
  for (size_t i = 0; i < s->n_pools; i++) {
    const sip__pool_t *q = s->pools[i];
    if (q != p && !atomic_load(&q->retired) && !strcmp(q->cfg->name, p->cfg->name) &&
        better_default(q, p))
      return 0;
  }
  return !atomic_load(&p->retired);
}

/* Why nothing serves name/version (called without a match, so off the hot
 * path). The one not-found wording: every front-end answers with it. */
static sip_error_t *not_found(sip__engine_t *s, const char *name, const char *version) {
  int named = 0, unversioned = 0;
  char versions[256] = "";
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_pools; i++) {
    const sip__pool_t *p = s->pools[i];
    if (atomic_load(&p->retired) || strcmp(p->cfg->name, name)) continue;
    named++;
    if (!p->version) unversioned = 1;
    else
      snprintf(versions + strlen(versions), sizeof versions - strlen(versions), "%s'%s'",
               versions[0] ? ", " : "", p->version);
  }
  pthread_rwlock_unlock(&s->reg_lock);
  /* Triton's wording, which its clients and examples look for; the
   * versions a model serves are said, never other models. */
  if (!named || !version)
    return sip_error_new(SIP_NOT_FOUND, "Request for unknown model: '%s' is not found", name);
  if (unversioned)
    return sip_error_new(SIP_NOT_FOUND,
                         "Request for unknown model: '%s' version %s is not found; it serves an "
                         "unversioned model",
                         name, version);
  return sip_error_new(SIP_NOT_FOUND,
                       "Request for unknown model: '%s' version %s is not found; it serves %s %s",
                       name, version, named > 1 ? "versions" : "version", versions);
}

sip__pool_t *sip__registry_find(sip__engine_t *s, const char *name, const char *version,
                               sip_error_t **err) {
  *err = NULL;
  sip__pool_t *best = NULL;
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_pools; i++) {
    sip__pool_t *p = s->pools[i];
    if (atomic_load(&p->retired) || strcmp(p->cfg->name, name)) continue;
    if (version) {
      if (p->version && !strcmp(p->version, version)) {
        best = p;
        break;
      }
    } else if (!best || better_default(p, best)) {
      best = p;
    }
  }
  if (best) sip__pool_ref(best);
  pthread_rwlock_unlock(&s->reg_lock);
  if (!best) *err = not_found(s, name, version);
  return best;
}

int sip__registry_has(sip__engine_t *s, const char *name) {
  int found = 0;
  pthread_rwlock_rdlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_pools && !found; i++)
    found = !atomic_load(&s->pools[i]->retired) && !strcmp(s->pools[i]->cfg->name, name);
  pthread_rwlock_unlock(&s->reg_lock);
  return found;
}

sip__pool_t **sip__registry_snapshot(sip__engine_t *s, int only_live, size_t *n) {
  *n = 0;
  pthread_rwlock_rdlock(&s->reg_lock);
  sip__pool_t **v = s->n_pools ? sip__calloc(s->n_pools, sizeof *v) : NULL;
  for (size_t i = 0; v && i < s->n_pools; i++) {
    sip__pool_t *p = s->pools[i];
    if (only_live && atomic_load(&p->retired)) continue;
    sip__pool_ref(p);
    v[(*n)++] = p;
  }
  pthread_rwlock_unlock(&s->reg_lock);
  return v;
}

void sip__registry_release(sip__pool_t **v, size_t n) {
  for (size_t i = 0; i < n; i++) sip__pool_unref(v[i]);
  sip__free(v);
}

/* Waits until only the registry's reference is left on a retired pool. */
static void wait_last_ref(sip__engine_t *s, sip__pool_t *p) {
  atomic_fetch_add(&s->reg_waiters, 1);
  pthread_mutex_lock(&s->reg_mu);
  while (atomic_load(&p->refs) > 1) pthread_cond_wait(&s->reg_cv, &s->reg_mu);
  pthread_mutex_unlock(&s->reg_mu);
  atomic_fetch_sub(&s->reg_waiters, 1);
}

void sip__registry_drain_free(sip__engine_t *s, sip__pool_t *p) {
  atomic_store(&p->retired, 1);
  /* Every admitted request holds a reference until it is answered, so once
   * only ours is left the queue is empty and nothing can be added to it. */
  wait_last_ref(s, p);
  sip__pool_shutdown(p);
  pthread_rwlock_wrlock(&s->reg_lock);
  for (size_t i = 0; i < s->n_pools; i++) {
    if (s->pools[i] != p) continue;
    memmove(&s->pools[i], &s->pools[i + 1], (s->n_pools - i - 1) * sizeof s->pools[0]);
    s->n_pools--;
    break;
  }
  atomic_fetch_add(&s->reg_gen, 1);
  pthread_rwlock_unlock(&s->reg_lock);
  /* An iterator that listed it before it was unlisted may still look. */
  wait_last_ref(s, p);
  sip__pool_destroy(p);
}

sip_error_t *sip__registry_add_named(sip__engine_t *s, const char *name, sip__model_t *m) {
  void *v = sip__reallocarray(s->named, s->n_named + 1, sizeof *s->named);
  if (!v) return SIP__OOM();
  s->named = v;
  s->named[s->n_named].name = name;
  s->named[s->n_named].model = m;
  s->n_named++;
  return NULL;
}

static sip__model_t *named(sip__engine_t *s, const char *name) {
  for (size_t i = 0; i < s->n_named; i++)
    if (!strcmp(s->named[i].name, name)) return s->named[i].model;
  return NULL;
}

int sip__registry_is_named(sip__engine_t *s, const char *name) { return named(s, name) != NULL; }

sip__model_t *sip__registry_find_model(sip__engine_t *s, const char *name, const char *version,
                                       sip_error_t **err) {
  *err = NULL;
  sip__model_t *m = named(s, name);
  if (m) {
    m->vt->ref(m);
    return m;
  }
  sip__pool_t *p = sip__registry_find(s, name, version, err);
  return p ? &p->base : NULL;
}
