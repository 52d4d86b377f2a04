/* sip — the models in service as typed views for the front-ends
 * (server/introspect.h): names, versions, state, typed inputs and outputs,
 * settings and statistics, read from the registry and the counters rather
 * than from a document. */
#include <string.h>

#include "core/core.h"
#include "core/redact.h"
#include "pipeline/pipeline.h"
#include "server/introspect.h"
#include "server/server_impl.h"
#include "session/observe/counters.h"

static const char *const state_names[] = {"LOADING", "READY", "FAILED", "STOPPED"};

static void pool_view(sip__engine_t *eng, sip__pool_t *p, sip__model_view_t *v) {
  sip__pool_counters_t c;
  sip__pool_counters_read(p, &c);
  sip__pool_info_t in;
  sip__pool_info(p, &in);
  v->name = in.name;
  v->version = in.version;
  v->state = sip__pool_state_name((sip__pool_state_t)c.state);
  v->loaded = c.state == SIP__POOL_READY || c.state == SIP__POOL_STOPPED;
  v->error = c.state == SIP__POOL_FAILED ? in.error : NULL;
  v->platform = in.platform ? in.platform : "unknown";
  /* Relative to the model repository (or the config's directory): answers
   * do not show the server's directories (docs/security.md). */
  v->model_path = sip__redact_path(in.model_path);
  v->pool_cfg = in.cfg;
  v->pool_size = in.pool_size;
  v->max_memory_mb = in.max_memory_mb;
  v->max_compute_percent = in.max_compute_percent;
  if (v->loaded) {
    v->inputs = in.inputs, v->n_inputs = in.n_inputs;
    v->outputs = in.outputs, v->n_outputs = in.n_outputs;
  }
  v->stats = (sip__model_stats_t){
      .inference_count = c.inference_count, .execution_count = c.execution_count,
      .last_inference_ms = c.last_inference_ms, .success = c.success, .fail = c.fail,
      .queue = c.queue_stat, .compute_input = c.compute_input, .compute_infer = c.compute_infer,
      .compute_output = c.compute_output, .memory_bytes = c.memory_bytes};
  pthread_rwlock_rdlock(&eng->reg_lock);
  v->is_default = sip__registry_is_default_locked(eng, p);
  pthread_rwlock_unlock(&eng->reg_lock);
  v->held_ = p;
}

/* A pipeline's statistics are its requests end to end: as Triton counts,
 * the inference and execution counts are the successful ones; refused and
 * failed ones are the fail count. Queue and compute time are in its stages'
 * pools. */
static void pipeline_view(const sip__pipeline_set_t *ps, size_t i, sip__model_view_t *v) {
  sip__pipeline_counters_t pc;
  sip__pipelines_counters(ps, i, &pc);
  sip__model_t *m = sip__pipelines_model(ps, i);
  const char *err = NULL;
  sip__model_state_t st = m->vt->state(m, &err);
  v->name = pc.name;
  v->is_pipeline = v->is_default = 1;
  v->state = state_names[st];
  v->loaded = st == SIP__MODEL_READY;
  v->error = err;
  v->platform = "ensemble";
  v->pipeline_cfg = sip__pipelines_config(ps, i);
  sip__model_io_t io;
  if (m->vt->describe_io(m, &io)) {
    v->inputs = io.inputs, v->n_inputs = io.n_inputs;
    v->outputs = io.outputs, v->n_outputs = io.n_outputs;
  }
  uint64_t total = 0, ok = pc.by_code[SIP_OK];
  for (int k = 0; k < SIP_CODE_COUNT_; k++) total += pc.by_code[k];
  v->stats.inference_count = v->stats.execution_count = ok;
  v->stats.last_inference_ms = pc.last_ms;
  v->stats.success = (sip__stat_read_t){ok, pc.ok_us * 1000};
  v->stats.fail = (sip__stat_read_t){total - ok, pc.fail_us * 1000};
}

sip__model_view_t *sip__server_models(sip_server_t *s, size_t *n) {
  size_t np = 0;
  sip__pool_t **pools = sip__registry_snapshot(&s->eng, 1, &np);
  const sip__pipeline_set_t *ps = atomic_load(&s->loaded) ? s->pipelines : NULL;
  size_t nl = sip__pipelines_count(ps);
  *n = 0;
  sip__model_view_t *v = sip__calloc(np + nl + 1, sizeof *v);
  if (!v) {
    sip__registry_release(pools, np);
    return NULL;
  }
  for (size_t i = 0; i < np; i++) pool_view(&s->eng, pools[i], &v[i]);
  for (size_t i = 0; i < nl; i++) pipeline_view(ps, i, &v[np + i]);
  sip__free(pools); /* each view holds its pool's reference */
  *n = np + nl;
  return v;
}

void sip__server_models_free(sip__model_view_t *v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    if (v[i].held_) sip__pool_unref(v[i].held_);
  sip__free(v);
}

const sip__model_view_t *sip__model_views_find(const sip__model_view_t *v, size_t n,
                                               const char *name, const char *version) {
  const sip__model_view_t *first = NULL;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(v[i].name, name)) continue;
    if (v[i].is_pipeline) {
      if (!version) return &v[i];
    } else if (version) {
      if (v[i].version && !strcmp(v[i].version, version)) return &v[i];
    } else if (v[i].is_default) {
      return &v[i];
    } else if (!first) {
      first = &v[i];
    }
  }
  return first;
}

sip_error_t *sip__model_views_lookup(sip_server_t *s, const sip__model_view_t *v, size_t n,
                                     const char *model, const char *version,
                                     const sip__model_view_t **out) {
  *out = sip__model_views_find(v, n, model, version);
  if (*out) return NULL;
  /* The engine's one not-found wording. */
  sip_error_t *e = sip__server_model_check(s, model, version);
  return e ? e
           : sip_error_new(SIP_UNAVAILABLE, "model '%s' was loaded or unloaded while answering; "
                           "expected a retry to see it settled", model);
}

sip_error_t *sip__model_view_need_loaded(const sip__model_view_t *m) {
  if (m->loaded) return NULL;
  if (!strcmp(m->state, "FAILED"))
    return sip_error_new(SIP_UNAVAILABLE, "model '%s' failed to load: %s", m->name,
                         m->error ? m->error : "unknown reason");
  return sip_error_new(SIP_UNAVAILABLE, "model '%s' is still loading", m->name);
}
