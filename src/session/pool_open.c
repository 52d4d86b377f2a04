/* sip — a pool's model: the backend options it loads with, where it loads
 * (the engine's model store, shared with every pool that loads the same
 * file with the same options; or, for isolation: process, the pool's own
 * worker), the device-memory wrapper, and its release
 * (docs/elastic.md "One model store"). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "backend/backends.h"
#include "core/core.h"
#include "session/isolation/isolation.h"
#include "session/pool_impl.h"
#include "session/store.h"

#define MAX_OPTS 64

/* The backend options a pool loads with: its backend_options, and what the
 * pool adds itself. A memory quota also caps growth after load: a
 * backend's CPU arena (SIP_BACKEND_MEMORY_ARENA) keeps the high-water mark
 * of every run, so a pool with a quota runs without it (each run's scratch
 * memory is returned), unless the pool's backend_options say otherwise;
 * and, where the backend can, the quota caps what it allocates while it
 * serves (`quota`: the pool's max_memory_mb as `sip pool update` left it,
 * written into quota_mb; scale.c passes later changes on). */
static sip_error_t *pool_options(const sip__pool_config_t *c, const sip_backend_vtable_t *vt,
                                 int64_t quota, char quota_mb[24], sip_kv_t *opts, size_t *n_out) {
  if (c->n_backend_options > MAX_OPTS - 2)
    return sip_error_new(SIP_INVALID_ARGUMENT, "%zu backend_options; at most %d are supported",
                         c->n_backend_options, MAX_OPTS - 2);
  size_t n = c->n_backend_options;
  if (n) memcpy(opts, c->backend_options, n * sizeof *opts); /* NULL when none */
  int arena_set = 0;
  for (size_t k = 0; k < n; k++) arena_set |= !strcmp(opts[k].key, "enable_cpu_mem_arena");
  if (c->max_memory_mb && !arena_set && (vt->flags & SIP_BACKEND_MEMORY_ARENA))
    opts[n++] = (sip_kv_t){"enable_cpu_mem_arena", "false"};
  if (quota > 0 && (vt->flags & SIP_BACKEND_MEMORY_LIMIT)) {
    snprintf(quota_mb, 24, "%lld", (long long)quota);
    opts[n++] = (sip_kv_t){SIP_BACKEND_OPTION_MAX_MEMORY_MB, quota_mb};
  }
  *n_out = n;
  return NULL;
}

/* What else a loaded model depends on: the CPU set it was loaded under
 * (threads the backend makes for it inherit it); and, for a model whose
 * allocations the pool's memory quota caps (its account is the model's),
 * the pool itself: such a model is the pool's own, never shared. */
static void key_extra(const sip__pool_config_t *c, size_t n, const sip_kv_t *opts, char *buf,
                      size_t cap) {
  size_t used = 0;
  for (size_t k = 0; k < n; k++)
    if (!strcmp(opts[k].key, SIP_BACKEND_OPTION_MAX_MEMORY_MB))
      used = (size_t)snprintf(buf, cap, "quota_of=%s;", c->name);
  if (used >= cap) used = cap - 1;
  used += (size_t)snprintf(buf + used, cap - used, "cpus=");
  for (int w = 0; c->n_cpus && w < SIP__MAX_CPUS / 64 && used < cap; w++)
    used += (size_t)snprintf(buf + used, cap - used, "%016llx", (unsigned long long)c->cpu_mask[w]);
}

sip_error_t *sip__pool_open_model(sip__pool_t *p) {
  const sip__pool_config_t *c = p->cfg;
  sip_kv_t opts[MAX_OPTS];
  size_t n = 0;
  void *state = NULL;
  char quota_mb[24];
  sip_error_t *e =
      pool_options(c, p->backend, atomic_load(&p->quota_memory_mb), quota_mb, opts, &n);
  if (e) return e;
  if (c->isolation == SIP__ISOLATION_PROCESS) {
    /* The model loads in the pool's own worker process, never shared; the
     * pool runs on a backend that forwards to it (isolation.c). */
    if ((e = sip__iso_load(p, p->backend, p->resolved_path, n ? opts : NULL, n, &p->model)))
      return e;
    p->backend = &p->iso_vt;
    return NULL;
  }
  char extra[16 + SIP__MAX_CPUS / 4 + 256];
  key_extra(c, n, opts, extra, sizeof extra);
  int loaded = 0;
  if ((e = sip__engine_backend_state(p->eng, p->backend, &state))) return e;
  if (!p->resolved_path) {
    /* A backend without a file (builtin) holds no weights to share; its
     * model may keep per-pool state (builtin's run count): the pool's own. */
    if ((e = p->backend->load(state, NULL, n ? opts : NULL, n, &p->model))) return e;
  } else {
    if ((e = sip__store_acquire(&p->eng->store, p->backend, state, p->resolved_path, opts, n,
                                extra, &p->stored, &loaded)))
      return e;
    p->model = sip__store_model(p->stored);
    p->store_bytes = sip__store_bytes(p->stored);
    p->store_loaded = loaded;
    if (!loaded)
      sip__log(SIP__LOG_INFO, "model shared",
               "pool=%s model=\"%s\" pools=%ld model_memory_bytes=%llu", c->name,
               p->resolved_path, sip__store_refs(&p->eng->store, p->stored),
               (unsigned long long)p->store_bytes);
  }
  if (sip__memory_needs_copies(p->backend, p->model)) {
    /* Its tensors live in device memory: the pool's requests run through
     * its own wrapper that copies them there and back (counted in
     * p->copies); the model under it stays the store's. */
    void *wrapped = NULL;
    if ((e = sip__memory_wrap(p->backend, p->model, &p->copies, &p->mem_vt, &wrapped))) {
      sip__pool_close_model(p, 1); /* p->backend is still the one that loaded it */
      return e;
    }
    p->model = wrapped;
    p->backend = &p->mem_vt;
  }
  return NULL;
}

void sip__pool_close_model(sip__pool_t *p, int free_it) {
  if (p->model && free_it) {
    if (!p->stored) p->backend->model_free(p->model); /* the worker's, or a file-less one */
    else if (p->backend == &p->mem_vt) sip__memory_unwrap(p->model);
    sip__store_release(&p->eng->store, p->stored);
  }
  /* else executions the watchdog abandoned still use it: it stays held.
   * p->stored stays as the key status shows while the pool is READY. */
  p->model = NULL;
}

uint64_t sip__pool_shared_bytes(sip__pool_t *p) {
  const sip__pool_config_t *c = p->cfg;
  const sip_backend_vtable_t *vt = sip__backend_find(c->backend);
  sip_kv_t opts[MAX_OPTS];
  size_t n = 0;
  char extra[16 + SIP__MAX_CPUS / 4 + 256], quota_mb[24];
  if (!vt || !c->model_path || c->isolation == SIP__ISOLATION_PROCESS) return 0;
  sip_error_t *e = pool_options(c, vt, atomic_load(&p->quota_memory_mb), quota_mb, opts, &n);
  if (e) {
    sip_error_free(e);
    return 0;
  }
  key_extra(c, n, opts, extra, sizeof extra);
  return sip__store_peek(&p->eng->store, vt, c->model_path, opts, n, extra);
}
