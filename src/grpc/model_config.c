/* sip — the gRPC ModelConfig RPC: a model's configuration in Triton's
 * ModelConfig message (inputs and outputs as TYPE_*, instance_group,
 * dynamic_batching or ensemble_scheduling, sip's own settings as
 * parameters), from the model's typed view (server/introspect.h). */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "grpc/grpc_impl.h"
#include "grpc_service.pb-c.h"
#include "server/introspect.h"

static Inference__DataType config_type(sip_dtype_t dt) {
  switch (dt) {
  case SIP_DTYPE_BOOL: return INFERENCE__DATA_TYPE__TYPE_BOOL;
  case SIP_DTYPE_UINT8: return INFERENCE__DATA_TYPE__TYPE_UINT8;
  case SIP_DTYPE_UINT16: return INFERENCE__DATA_TYPE__TYPE_UINT16;
  case SIP_DTYPE_UINT32: return INFERENCE__DATA_TYPE__TYPE_UINT32;
  case SIP_DTYPE_UINT64: return INFERENCE__DATA_TYPE__TYPE_UINT64;
  case SIP_DTYPE_INT8: return INFERENCE__DATA_TYPE__TYPE_INT8;
  case SIP_DTYPE_INT16: return INFERENCE__DATA_TYPE__TYPE_INT16;
  case SIP_DTYPE_INT32: return INFERENCE__DATA_TYPE__TYPE_INT32;
  case SIP_DTYPE_INT64: return INFERENCE__DATA_TYPE__TYPE_INT64;
  case SIP_DTYPE_FLOAT16: return INFERENCE__DATA_TYPE__TYPE_FP16;
  case SIP_DTYPE_FLOAT32: return INFERENCE__DATA_TYPE__TYPE_FP32;
  case SIP_DTYPE_FLOAT64: return INFERENCE__DATA_TYPE__TYPE_FP64;
  case SIP_DTYPE_STRING: return INFERENCE__DATA_TYPE__TYPE_STRING;
  default: return INFERENCE__DATA_TYPE__TYPE_INVALID;
  }
}

/* Everything a ModelConfig points to, freed in one place. */
typedef struct cfg_parts {
  Inference__ModelInput *in, **inp;
  Inference__ModelOutput *out, **outp;
  Inference__ModelInstanceGroup group, *groupp;
  Inference__ModelDynamicBatching batching;
  int32_t preferred[64];
  Inference__ModelEnsembling ens;
  Inference__ModelEnsembling__Step *steps, **stepp;
  Inference__ModelConfig__ParametersEntry pe[8], *pep[8];
  Inference__ModelParameter pv[8];
  char num[4][32];
  int64_t minus_one;
} cfg_parts_t;

static void add_param(Inference__ModelConfig *cfg, cfg_parts_t *p, const char *key,
                      const char *value) {
  size_t i = cfg->n_parameters;
  if (i >= 8 || !value) return;
  Inference__ModelConfig__ParametersEntry e = INFERENCE__MODEL_CONFIG__PARAMETERS_ENTRY__INIT;
  Inference__ModelParameter v = INFERENCE__MODEL_PARAMETER__INIT;
  p->pe[i] = e, p->pv[i] = v;
  p->pe[i].key = (char *)key;
  p->pv[i].string_value = (char *)value;
  p->pe[i].value = &p->pv[i];
  p->pep[i] = &p->pe[i];
  cfg->parameters = p->pep;
  cfg->n_parameters = i + 1;
}

static int fill_config(const sip__model_view_t *m, Inference__ModelConfig *cfg, cfg_parts_t *p) {
  p->minus_one = -1;
  cfg->name = (char *)m->name;
  cfg->platform = (char *)m->platform;
  p->in = sip__calloc(m->n_inputs + 1, sizeof *p->in);
  p->inp = sip__calloc(m->n_inputs + 1, sizeof *p->inp);
  p->out = sip__calloc(m->n_outputs + 1, sizeof *p->out);
  p->outp = sip__calloc(m->n_outputs + 1, sizeof *p->outp);
  if (!p->in || !p->inp || !p->out || !p->outp) return 0;
  for (size_t i = 0; i < m->n_inputs; i++) {
    Inference__ModelInput init = INFERENCE__MODEL_INPUT__INIT;
    const sip_io_desc_t *d = &m->inputs[i];
    p->in[i] = init;
    p->in[i].name = (char *)(d->name ? d->name : "");
    p->in[i].data_type = config_type(d->dtype);
    p->in[i].n_dims = d->rank < 0 ? 1 : (size_t)d->rank;
    p->in[i].dims = d->rank < 0 ? &p->minus_one : (int64_t *)d->dims;
    p->inp[i] = &p->in[i];
  }
  for (size_t i = 0; i < m->n_outputs; i++) {
    Inference__ModelOutput init = INFERENCE__MODEL_OUTPUT__INIT;
    const sip_io_desc_t *d = &m->outputs[i];
    p->out[i] = init;
    p->out[i].name = (char *)(d->name ? d->name : "");
    p->out[i].data_type = config_type(d->dtype);
    p->out[i].n_dims = d->rank < 0 ? 1 : (size_t)d->rank;
    p->out[i].dims = d->rank < 0 ? &p->minus_one : (int64_t *)d->dims;
    p->outp[i] = &p->out[i];
  }
  cfg->input = p->inp, cfg->n_input = m->n_inputs;
  cfg->output = p->outp, cfg->n_output = m->n_outputs;
  if (m->is_pipeline) {
    const sip__pipeline_config_t *pc = m->pipeline_cfg;
    Inference__ModelEnsembling ens = INFERENCE__MODEL_ENSEMBLING__INIT;
    p->ens = ens;
    p->steps = sip__calloc(pc->n_stages + 1, sizeof *p->steps);
    p->stepp = sip__calloc(pc->n_stages + 1, sizeof *p->stepp);
    if (!p->steps || !p->stepp) return 0;
    for (size_t i = 0; i < pc->n_stages; i++) {
      Inference__ModelEnsembling__Step st = INFERENCE__MODEL_ENSEMBLING__STEP__INIT;
      const sip__stage_config_t *sc = &pc->stages[i];
      p->steps[i] = st;
      p->steps[i].model_name = (char *)(sc->is_transform ? (sc->operation ? sc->operation : "")
                                                         : sc->pool);
      p->steps[i].model_version = -1;
      p->stepp[p->ens.n_step++] = &p->steps[i];
    }
    p->ens.step = p->stepp;
    cfg->scheduling_choice_case = INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_ENSEMBLE_SCHEDULING;
    cfg->ensemble_scheduling = &p->ens;
    return 1;
  }
  const sip__pool_config_t *pc = m->pool_cfg;
  cfg->backend = pc->backend;
  cfg->max_batch_size = pc->max_batch_size;
  Inference__ModelInstanceGroup g = INFERENCE__MODEL_INSTANCE_GROUP__INIT;
  p->group = g;
  p->group.count = m->pool_size;
  p->group.kind = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
  p->groupp = &p->group;
  cfg->instance_group = &p->groupp;
  cfg->n_instance_group = 1;
  if (pc->max_batch_size) {
    Inference__ModelDynamicBatching b = INFERENCE__MODEL_DYNAMIC_BATCHING__INIT;
    p->batching = b;
    for (size_t i = 0; i < pc->n_preferred && i < 64; i++)
      p->preferred[p->batching.n_preferred_batch_size++] = pc->preferred_batch_sizes[i];
    p->batching.preferred_batch_size = p->preferred;
    p->batching.max_queue_delay_microseconds = (uint64_t)pc->max_queue_delay_us;
    cfg->scheduling_choice_case = INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING;
    cfg->dynamic_batching = &p->batching;
  }
  snprintf(p->num[0], sizeof p->num[0], "%lld", (long long)m->max_memory_mb);
  snprintf(p->num[1], sizeof p->num[1], "%d", m->max_compute_percent);
  add_param(cfg, p, "priority", sip__priority_name(pc->priority));
  add_param(cfg, p, "max_memory_mb", p->num[0]);
  add_param(cfg, p, "max_compute_percent", p->num[1]);
  add_param(cfg, p, "model_path", m->model_path);
  add_param(cfg, p, "version", m->version);
  return 1;
}

void sip__grpc_model_config(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__ModelConfigRequest *q = (const void *)req;
  sip__model_view_t *v;
  size_t n;
  const sip__model_view_t *m;
  sip_error_t *e = sip__grpc_find_model(c, q->name, q->version, 1, &v, &n, &m);
  if (e) {
    sip__grpc_reply(c, e, NULL);
    return;
  }
  Inference__ModelConfig cfg = INFERENCE__MODEL_CONFIG__INIT;
  Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
  cfg_parts_t *p = sip__calloc(1, sizeof *p);
  int ok = p && fill_config(m, &cfg, p);
  r.config = &cfg;
  sip__grpc_reply(c, ok ? NULL : SIP__OOM(), &r.base);
  if (p) {
    sip__free(p->in), sip__free(p->inp), sip__free(p->out), sip__free(p->outp);
    sip__free(p->steps), sip__free(p->stepp);
    sip__free(p);
  }
  sip__server_models_free(v, n);
}
