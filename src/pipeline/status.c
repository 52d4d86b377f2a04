/* sip — what a pipeline is to its callers: the inputs and outputs it takes
 * and gives (typed as its stages take and give them), its state, and the
 * pipelines' introspection (pools and status JSON). */
#include "core/core.h"
#include "pipeline/pipeline_impl.h"

/* ---- the model interface: what it takes and gives, its state ---- */

int sip__pipeline_describe_io(sip__model_t *m, sip__model_io_t *io) {
  sip__pipeline_t *pl = (sip__pipeline_t *)m;
  if (atomic_load(&pl->state) != SIP__MODEL_READY) return 0;
  io->inputs = pl->io_in;
  io->n_inputs = pl->n_inputs;
  io->outputs = pl->io_out;
  io->n_outputs = pl->n_po;
  return 1;
}

sip__model_state_t sip__pipeline_state(sip__model_t *m, const char **error) {
  sip__pipeline_t *pl = (sip__pipeline_t *)m;
  sip__model_state_t st = (sip__model_state_t)atomic_load(&pl->state);
  if (error) *error = st == SIP__MODEL_FAILED ? pl->error : NULL;
  return st;
}

sip_error_t *sip__pipeline_version_error(const char *name, const char *version) {
  return sip_error_new(SIP_NOT_FOUND, "model '%s' is a pipeline and has no version '%s'; ask "
                       "without a version", name, version);
}

/* ---- counters ---- */

sip__model_t *sip__pipelines_model(const sip__pipeline_set_t *ps, size_t i) {
  return &ps->p[i].base;
}

const sip__pipeline_config_t *sip__pipelines_config(const sip__pipeline_set_t *ps, size_t i) {
  return ps->p[i].cfg;
}

size_t sip__pipelines_count(const sip__pipeline_set_t *ps) { return ps ? ps->n : 0; }

void sip__pipelines_counters(const sip__pipeline_set_t *ps, size_t i, sip__pipeline_counters_t *c) {
  const sip__pipeline_t *pl = &ps->p[i];
  c->name = pl->cfg->name;
  c->state = (sip__model_state_t)atomic_load(&pl->state);
  for (int k = 0; k < SIP_CODE_COUNT_; k++) c->by_code[k] = atomic_load(&pl->by_code[k]);
  c->early_exits = atomic_load(&pl->early_exits);
  c->ok_us = atomic_load(&pl->ok_us);
  c->fail_us = atomic_load(&pl->fail_us);
  c->last_ms = atomic_load(&pl->last_ms);
  c->n_stages = pl->n;
}

void sip__pipelines_stage_counters(const sip__pipeline_set_t *ps, size_t i, size_t k,
                                   sip__stage_counters_t *c) {
  const sip__stage_t *s = &ps->p[i].st[k];
  c->name = s->cfg->name;
  c->ran = atomic_load(&s->ran);
  c->skipped = atomic_load(&s->skipped);
  c->failed = atomic_load(&s->failed);
  c->total_us = atomic_load(&s->total_us);
}

/* ---- introspection ---- */

json_t *sip__pipelines_json(const sip__pipeline_set_t *ps, int kind) {
  json_t *a = json_array();
  for (size_t i = 0; i < sip__pipelines_count(ps); i++) {
    const sip__pipeline_t *pl = &ps->p[i];
    static const char *states[] = {"LOADING", "READY", "FAILED", "STOPPED"};
    sip__pipeline_counters_t pc;
    sip__pipelines_counters(ps, i, &pc);
    json_t *o = json_pack("{s:s,s:s,s:o}", "name", pc.name, "state", states[pc.state], "error",
                          pc.state == SIP__MODEL_FAILED ? json_string(pl->error) : json_null());
    json_t *stages = json_array();
    for (size_t k = 0; k < pl->n; k++) {
      const sip__stage_t *s = &pl->st[k];
      json_t *so = json_pack("{s:s,s:s}", "name", s->cfg->name, "type",
                             s->cfg->is_transform ? "transform" : "model");
      if (s->cfg->is_transform)
        json_object_set_new(so, "operation", json_string(s->cfg->operation));
      else
        json_object_set_new(so, "pool", json_string(s->cfg->pool));
      if (kind == SIP_INFO_STATUS) {
        sip__stage_counters_t sc;
        sip__pipelines_stage_counters(ps, i, k, &sc);
        json_object_set_new(so, "ran", json_integer((json_int_t)sc.ran));
        json_object_set_new(so, "skipped", json_integer((json_int_t)sc.skipped));
        json_object_set_new(so, "failed", json_integer((json_int_t)sc.failed));
        json_object_set_new(so, "total_us", json_integer((json_int_t)sc.total_us));
      }
      json_array_append_new(stages, so);
    }
    json_object_set_new(o, "stages", stages);
    if (kind == SIP_INFO_POOLS) {
      int built = pc.state == SIP__MODEL_READY;
      json_object_set_new(o, "inputs", built ? sip__io_json(pl->io_in, pl->n_inputs) : json_array());
      json_object_set_new(o, "outputs", built ? sip__io_json(pl->io_out, pl->n_po) : json_array());
    } else {
      json_t *codes = json_object();
      for (int c = 0; c < SIP_CODE_COUNT_; c++)
        if (pc.by_code[c])
          json_object_set_new(codes, sip_code_name((sip_code_t)c), json_integer((json_int_t)pc.by_code[c]));
      json_object_set_new(o, "requests", codes);
      json_object_set_new(o, "early_exits", json_integer((json_int_t)pc.early_exits));
      json_object_set_new(o, "latency_us", json_pack("{s:I,s:I}", "ok", (json_int_t)pc.ok_us,
                                                     "failed", (json_int_t)pc.fail_us));
      json_object_set_new(o, "last_inference", json_integer((json_int_t)pc.last_ms));
    }
    json_array_append_new(a, o);
  }
  return a;
}
