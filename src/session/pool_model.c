/* sip — a pool as a model (sip__model_vt_t): what the registry hands out
 * for a pool's name. */
#include "core/core.h"
#include "session/engine.h"
#include "session/pool_impl.h"

static sip_error_t *pool_submit(sip__model_t *m, sip_request_t *r) {
  sip__pool_t *p = (sip__pool_t *)m;
  r->held = p; /* dropped after the answer (sip__request_complete) */
  sip_error_t *e = sip__pool_submit(p, r);
  if (!e) return NULL; /* p may be gone already: not touched again */
  r->held = NULL;
  sip__pool_count(p, sip_error_code(e), 0);
  sip__log_failure("pool=%s code=%s reason=\"%s\"", r->pool, sip_code_name(sip_error_code(e)),
                   sip_error_message(e));
  sip__pool_unref(p);
  sip_request_free(r);
  return e;
}

static int pool_describe_io(sip__model_t *m, sip__model_io_t *io) {
  sip__pool_t *p = (sip__pool_t *)m;
  if (atomic_load(&p->state) != SIP__POOL_READY) return 0;
  io->inputs = p->inputs;
  io->n_inputs = p->n_inputs;
  io->outputs = p->outputs;
  io->n_outputs = p->n_outputs;
  return 1;
}

static sip__model_state_t pool_state(sip__model_t *m, const char **error) {
  sip__pool_t *p = (sip__pool_t *)m;
  int st = atomic_load(&p->state);
  if (error) *error = st == SIP__POOL_FAILED ? p->error : NULL;
  return st == SIP__POOL_READY    ? SIP__MODEL_READY
         : st == SIP__POOL_FAILED ? SIP__MODEL_FAILED
         : st == SIP__POOL_STOPPED ? SIP__MODEL_STOPPED
                                 : SIP__MODEL_LOADING;
}

static void pool_ref(sip__model_t *m) { sip__pool_ref((sip__pool_t *)m); }
static void pool_unref(sip__model_t *m) { sip__pool_unref((sip__pool_t *)m); }

void sip__pool_unref(sip__pool_t *p) { sip__registry_unref(p->eng, &p->base); }

static void pool_identity(const sip__model_t *m, sip__model_id_t *id) {
  const sip__pool_t *p = (const sip__pool_t *)m;
  *id = (sip__model_id_t){.name = p->cfg->name, .version = p->version,
                          .version_num = p->version_num, .pinned = p->pinned};
}

const sip__model_vt_t sip__pool_model_vt = {
    .kind = "pool",
    .submit = pool_submit,
    .submit_batch = sip__pool_submit_batch,
    .describe_io = pool_describe_io,
    .state = pool_state,
    .ref = pool_ref,
    .unref = pool_unref,
    .identity = pool_identity,
};
