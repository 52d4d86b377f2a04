/* sip — residency of on-demand pools: the UNLOADED state, what the loader
 * reads to choose evictions, and a pool renewed UNLOADED in place of an
 * evicted one (session/residency.h; docs/elastic.md "Residency"). The
 * admission of requests to an UNLOADED pool is admission.c's
 * (sip__pool_submit_cold, sip__pool_admit_cold). */
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "session/admission.h"
#include "session/pool_impl.h"
#include "session/pool_view.h"
#include "session/residency.h"

void sip__pool_set_on_demand(sip__pool_t *p, uint64_t expected_bytes) {
  p->on_demand = 1;
  p->expected_bytes = expected_bytes;
  atomic_store(&p->state, SIP__POOL_UNLOADED);
}

void sip__pool_residency(sip__pool_t *p, sip__residency_info_t *out) {
  *out = (sip__residency_info_t){0};
  out->on_demand = p->on_demand;
  out->state = (sip__pool_state_t)atomic_load(&p->state);
  out->last_used_us = atomic_load(&p->last_used_us);
  out->queued = sip__sched_count(&p->queue);
  if (out->state == SIP__POOL_READY || out->state == SIP__POOL_LOADING)
    out->held_bytes = p->memory_bytes;
  if (out->state == SIP__POOL_READY && p->stored) {
    out->store_key = p->stored;
    out->store_bytes = p->store_bytes;
    out->store_pools = sip__store_refs(&p->eng->store, p->stored);
  }
  out->expected_bytes = p->memory_bytes ? p->memory_bytes : p->expected_bytes;
  out->load_extra_bytes = p->load_extra_bytes;
  out->file_bytes = p->model_bytes;
  struct stat st;
  if (!out->file_bytes && p->cfg->model_path && stat(p->cfg->model_path, &st) == 0 &&
      S_ISREG(st.st_mode))
    out->file_bytes = (uint64_t)st.st_size;
  if (!out->expected_bytes) out->expected_bytes = out->file_bytes;
  if (out->state == SIP__POOL_UNLOADED) { /* a model loaded already costs its sessions only */
    uint64_t shared = sip__pool_shared_bytes(p);
    out->model_held = shared > 0;
    out->expected_bytes = out->expected_bytes > shared ? out->expected_bytes - shared : 0;
  }
}

void sip__pool_set_load_extra(sip__pool_t *p, uint64_t bytes) { p->load_extra_bytes = bytes; }

int sip__pool_running_sessions(sip__pool_t *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->n_sessions;
  pthread_mutex_unlock(&p->mu);
  return n;
}

int sip__pool_idle(sip__pool_t *p) {
  pthread_mutex_lock(&p->mu);
  int idle = sip__sched_count(&p->queue) == 0;
  for (int i = 0; idle && i < p->n_sessions; i++)
    idle = atomic_load(&p->sessions[i].state) != SIP__SESSION_RUNNING;
  pthread_mutex_unlock(&p->mu);
  return idle;
}

int sip__pool_begin_load(sip__pool_t *p) {
  int want = SIP__POOL_UNLOADED;
  return atomic_compare_exchange_strong(&p->state, &want, SIP__POOL_LOADING);
}

void sip__pool_load_refused(sip__pool_t *p) { atomic_store(&p->load_asked, 0); }

sip__pool_t *sip__pool_renew_unloaded(sip__pool_t *old) {
  char *fp = old->fingerprint ? sip__strdup(old->fingerprint) : NULL;
  if (old->fingerprint && !fp) return NULL;
  /* A repository pool's version was chosen by the repository; a config
   * file's pool resolves its model directory again at load. */
  sip__pool_t *p = sip__pool_new(old->eng, old->cfg, NULL, old->from_repo ? old->version : NULL);
  if (!p) {
    sip__free(fp);
    return NULL;
  }
  if (old->from_repo) sip__pool_set_origin(p, old->pinned, fp);
  /* Quotas `sip pool update` changed hold for the next load too. */
  atomic_store(&p->quota_memory_mb, atomic_load(&old->quota_memory_mb));
  int pct = atomic_load(&old->quota_compute_percent);
  atomic_store(&p->quota_compute_percent, pct);
  sip__arbiter_set_weight(&p->eng->arbiter, &p->arb, pct);
  sip__pool_set_on_demand(p, old->memory_bytes ? old->memory_bytes : old->expected_bytes);
  p->load_extra_bytes = old->load_extra_bytes;
  return p;
}

void sip__pool_take_config(sip__pool_t *p, sip__pool_t *old) {
  /* `old` keeps pointing to it until it is freed, which happens first. */
  p->own_cfg = old->own_cfg;
  old->own_cfg = NULL;
}

static void fail_one(sip__pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                     uint64_t now) {
  sip__pool_finish_failed(p, r, code, msg, now - r->sched.arrival_us);
}

void sip__pool_fail_queued(sip__pool_t *p, sip_code_t code, const char *msg) {
  sip__sched_item_t *gone = sip__pool_unqueue(p, NULL);
  uint64_t now = sip__now_us();
  while (gone) {
    sip__sched_item_t *it = gone;
    gone = it->next;
    it->next = NULL;
    fail_one(p, SIP__QUEUED_REQ(it), code, msg, now);
  }
}
