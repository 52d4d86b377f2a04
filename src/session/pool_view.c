/* sip — a pool seen from outside the session layer (session/pool_view.h). */
#include "session/pool_view.h"

#include "session/preprocess.h"
#include "session/pool_impl.h"

void sip__pool_info(const sip__pool_t *p, sip__pool_info_t *out) {
  sip__pool_state_t st = (sip__pool_state_t)atomic_load(&p->state);
  *out = (sip__pool_info_t){
      .name = p->cfg->name,
      .version = p->version,
      .version_num = p->version_num,
      .pinned = p->pinned,
      .from_repo = p->from_repo,
      .retired = atomic_load(&p->base.retired),
      .fingerprint = p->fingerprint,
      .cfg = p->cfg,
      .state = st,
      .error = st == SIP__POOL_FAILED ? p->error : NULL,
      .load_error = p->load_error,
      .platform = p->backend ? (p->backend->platform ? p->backend->platform : p->backend->name)
                             : NULL,
      .model_path = p->resolved_path ? p->resolved_path : p->cfg->model_path,
      .pool_size = atomic_load(&p->size),
      .max_memory_mb = atomic_load(&p->quota_memory_mb),
      .max_compute_percent = atomic_load(&p->quota_compute_percent),
      .sla = p->sla,
      .memory_bytes = p->memory_bytes,
  };
  if (st == SIP__POOL_READY || st == SIP__POOL_STOPPED) {
    out->inputs = p->inputs, out->n_inputs = p->n_inputs;
    out->outputs = p->outputs, out->n_outputs = p->n_outputs;
    out->preprocess = p->pre ? sip__preprocess_steps(p->pre) : NULL;
  }
  if (st == SIP__POOL_READY && p->stored) {
    out->store_key = p->stored;
    out->store_bytes = p->store_bytes;
    out->store_pools = sip__store_refs(&p->eng->store, p->stored);
  }
}

const char *sip__pool_name(const sip__pool_t *p) { return p->cfg->name; }
const char *sip__pool_version(const sip__pool_t *p) { return p->version; }
const sip__pool_config_t *sip__pool_config(const sip__pool_t *p) { return p->cfg; }
sip__pool_state_t sip__pool_state(const sip__pool_t *p) {
  return (sip__pool_state_t)atomic_load(&p->state);
}

int sip__pool_from_repo(const sip__pool_t *p) { return p->from_repo; }

int sip__pool_serving(const sip__pool_t *p) {
  return atomic_load(&p->state) == SIP__POOL_READY && !atomic_load(&p->base.retired);
}

sip__pool_t *sip__pool_of(sip__model_t *m) {
  return m && m->vt == &sip__pool_model_vt ? (sip__pool_t *)m : NULL;
}

sip__model_t *sip__pool_model(sip__pool_t *p) { return &p->base; }

void sip__pool_set_origin(sip__pool_t *p, int pinned, char *fingerprint) {
  p->from_repo = 1;
  p->pinned = pinned;
  p->fingerprint = fingerprint;
}

void sip__pool_set_pinned(sip__pool_t *p, int pinned) { p->pinned = pinned; }

void sip__pool_stop_admitting(sip__pool_t *p) {
  pthread_mutex_lock(&p->mu);
  p->stopping = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}
