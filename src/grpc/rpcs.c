/* sip — the gRPC service's RPCs other than inference, answered from the
 * same server-facing calls the HTTP front-end uses: typed model views
 * (server/introspect.h), the repository calls, the server's shared-memory
 * set. Also the method table and grpc.health.v1.Health/Check.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/settings.h"
#include "core/shm.h"
#include "grpc/grpc_frontend.h"
#include "grpc/grpc_impl.h"
#include "grpc_service.pb-c.h"
#include "health.pb-c.h"
#include "mmesh_model_runtime.pb-c.h"
#include "server/introspect.h"

#define SVC "/inference.GRPCInferenceService/"

/* ---- health ---------------------------------------------------------------------- */

/* NULL when the server is ready: not draining, loaded, no pool loading. */
static sip_error_t *not_ready(sip_server_t *s) {
  if (sip_server_draining(s))
    return sip_error_new(SIP_UNAVAILABLE, "server is draining: it answers requests in flight and "
                         "accepts no new ones");
  if (sip__server_leaving(s))
    return sip_error_new(SIP_UNAVAILABLE, "server is shutting down: it serves until "
                         "server.drain_delay_ms passes, then drains");
  char why[512];
  if (sip__server_unready(s, why, sizeof why))
    return sip_error_new(SIP_UNAVAILABLE, "server is not ready: %s", why);
  if (!sip_server_ready(s)) return sip_error_new(SIP_UNAVAILABLE, "server is not ready: starting");
  return NULL;
}

static void server_live(sip__gcall_t *c, const ProtobufCMessage *req) {
  (void)req;
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = 1;
  sip__grpc_reply(c, NULL, &r.base);
}

static void server_ready(sip__gcall_t *c, const ProtobufCMessage *req) {
  (void)req;
  Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
  sip_error_t *e = not_ready(c->g->s);
  r.ready = !e;
  sip_error_free(e);
  sip__grpc_reply(c, NULL, &r.base);
}

static void health_check(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Grpc__Health__V1__HealthCheckRequest *q = (const void *)req;
  if (q->service[0] && strcmp(q->service, "inference.GRPCInferenceService")) {
    sip__grpc_reply(c, sip_error_new(SIP_NOT_FOUND, "unknown service '%s'; expected \"\" or "
                                     "inference.GRPCInferenceService", q->service), NULL);
    return;
  }
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  sip_error_t *e = not_ready(c->g->s);
  r.status = e ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
               : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  sip_error_free(e);
  sip__grpc_reply(c, NULL, &r.base);
}

static void server_metadata(sip__gcall_t *c, const ProtobufCMessage *req) {
  (void)req;
  Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
  char *ext[] = {"model_configuration", "statistics", "system_shared_memory",
                 "cuda_shared_memory",  "logging",    "trace",
                 "model_repository"};
  r.name = "sip";
  r.version = (char *)sip_version();
  r.extensions = ext;
  r.n_extensions = sizeof ext / sizeof *ext - (c->g->cfg->model_repository ? 0 : 1);
  sip__grpc_reply(c, NULL, &r.base);
}

/* ---- models ------------------------------------------------------------------------ */

sip_error_t *sip__grpc_find_model(sip__gcall_t *c, const char *name, const char *version, int loaded,
                                  sip__model_view_t **v, size_t *n, const sip__model_view_t **m) {
  *v = NULL, *n = 0;
  if (!name[0]) return sip_error_new(SIP_INVALID_ARGUMENT, "name is empty; expected a model name");
  /* Pools' inputs and outputs are freed while the server drains. */
  if (loaded && sip_server_draining(c->g->s))
    return sip_error_new(SIP_UNAVAILABLE, "server is draining: model metadata is unavailable");
  *v = sip__server_models(c->g->s, n);
  sip_error_t *e = sip__model_views_lookup(c->g->s, *v, *n, name, version[0] ? version : NULL, m);
  if (!e && loaded) e = sip__model_view_need_loaded(*m);
  if (e) {
    sip__server_models_free(*v, *n);
    *v = NULL, *n = 0;
  }
  return e;
}

static void model_ready(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__ModelReadyRequest *q = (const void *)req;
  sip__model_view_t *v;
  size_t n;
  const sip__model_view_t *m;
  sip_error_t *e = sip__grpc_find_model(c, q->name, q->version, 0, &v, &n, &m);
  Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
  /* An on_demand model not loaded yet serves: its request loads it. */
  if (!e) r.ready = !strcmp(m->state, "READY") || !strcmp(m->state, "UNLOADED");
  /* As Triton: a model (or version) that is not served is simply not
   * ready; clients poll ModelReady after a load and expect OK. */
  if (e && sip_error_code(e) == SIP_NOT_FOUND) {
    sip_error_free(e);
    e = NULL;
  }
  sip__server_models_free(v, n);
  sip__grpc_reply(c, e, &r.base);
}

typedef Inference__ModelMetadataResponse__TensorMetadata tmeta_t;

/* Tensor metadata of typed inputs or outputs (owned arrays: io_free). */
static tmeta_t **io_meta(const sip_io_desc_t *d, size_t n, int64_t *minus_one) {
  tmeta_t **out = sip__calloc(n + 1, sizeof *out);
  for (size_t i = 0; out && i < n; i++) {
    tmeta_t init = INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
    if (!(out[i] = sip__malloc(sizeof **out))) break;
    *out[i] = init;
    const char *dt = sip__dtype_protocol_name(d[i].dtype);
    out[i]->name = (char *)(d[i].name ? d[i].name : "");
    out[i]->datatype = (char *)(dt ? dt : "INVALID");
    /* Unknown rank: one dynamic dim is the closest KServe can say. */
    out[i]->n_shape = d[i].rank < 0 ? 1 : (size_t)d[i].rank;
    out[i]->shape = d[i].rank < 0 ? minus_one : (int64_t *)d[i].dims;
  }
  return out;
}

static void io_free(void **p, size_t n) {
  for (size_t i = 0; p && i < n; i++) sip__free(p[i]);
  sip__free(p);
}

static void model_metadata(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__ModelMetadataRequest *q = (const void *)req;
  sip__model_view_t *v = NULL;
  size_t n = 0;
  const sip__model_view_t *m;
  char mm[160]; /* forwarded by ModelMesh: the model its mm-model-id names */
  sip_error_t *e = sip__grpc_mm_model(c, mm, sizeof mm);
  if (!e) e = sip__grpc_find_model(c, mm[0] ? mm : q->name, q->version, 1, &v, &n, &m);
  if (e) {
    sip__grpc_reply(c, e, NULL);
    return;
  }
  int64_t minus_one = -1;
  Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
  r.name = (char *)m->name;
  r.platform = (char *)m->platform;
  char **versions = sip__calloc(n + 1, sizeof *versions);
  for (size_t i = 0; versions && i < n; i++)
    if (v[i].version && !strcmp(v[i].name, m->name)) versions[r.n_versions++] = (char *)v[i].version;
  r.versions = versions;
  r.inputs = io_meta(m->inputs, m->n_inputs, &minus_one);
  r.n_inputs = m->n_inputs;
  r.outputs = io_meta(m->outputs, m->n_outputs, &minus_one);
  r.n_outputs = m->n_outputs;
  int ok = versions && r.inputs && r.outputs;
  for (size_t i = 0; ok && i < r.n_inputs; i++) ok = r.inputs[i] != NULL;
  for (size_t i = 0; ok && i < r.n_outputs; i++) ok = r.outputs[i] != NULL;
  sip__grpc_reply(c, ok ? NULL : SIP__OOM(), &r.base);
  io_free((void **)r.inputs, r.n_inputs);
  io_free((void **)r.outputs, r.n_outputs);
  sip__free(versions);
  sip__server_models_free(v, n);
}

/* ---- statistics ------------------------------------------------------------------- */

typedef struct stat_parts {
  Inference__ModelStatistics ms;
  Inference__InferStatistics is;
  Inference__StatisticDuration d[6];
  Inference__MemoryUsage mu, *mup;
} stat_parts_t;

static void duration(Inference__StatisticDuration *d, sip__stat_read_t s) {
  Inference__StatisticDuration init = INFERENCE__STATISTIC_DURATION__INIT;
  *d = init;
  d->count = s.count;
  d->ns = s.ns;
}

static void model_statistics(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__ModelStatisticsRequest *q = (const void *)req;
  size_t n = 0;
  sip__model_view_t *v = sip__server_models(c->g->s, &n);
  const sip__model_view_t *m = NULL;
  if (q->name[0]) {
    sip_error_t *e = sip__model_views_lookup(c->g->s, v, n, q->name,
                                             q->version[0] ? q->version : NULL, &m);
    if (e) {
      sip__server_models_free(v, n);
      sip__grpc_reply(c, e, NULL);
      return;
    }
  }
  stat_parts_t *p = sip__calloc(n + 1, sizeof *p);
  Inference__ModelStatistics **list = sip__calloc(n + 1, sizeof *list);
  Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
  for (size_t i = 0; p && list && i < n; i++) {
    const sip__model_view_t *x = &v[i];
    if (q->name[0] && strcmp(x->name, q->name)) continue;
    if (q->version[0] && (!x->version || strcmp(x->version, q->version))) continue;
    stat_parts_t *s = &p[r.n_model_stats];
    Inference__ModelStatistics ms = INFERENCE__MODEL_STATISTICS__INIT;
    Inference__InferStatistics is = INFERENCE__INFER_STATISTICS__INIT;
    const sip__model_stats_t *st = &x->stats;
    s->ms = ms, s->is = is;
    s->ms.name = (char *)x->name;
    s->ms.version = (char *)(x->version ? x->version : "");
    s->ms.last_inference = st->last_inference_ms;
    s->ms.inference_count = st->inference_count;
    s->ms.execution_count = st->execution_count;
    duration(&s->d[0], st->success), s->is.success = &s->d[0];
    duration(&s->d[1], st->fail), s->is.fail = &s->d[1];
    duration(&s->d[2], st->queue), s->is.queue = &s->d[2];
    duration(&s->d[3], st->compute_input), s->is.compute_input = &s->d[3];
    duration(&s->d[4], st->compute_infer), s->is.compute_infer = &s->d[4];
    duration(&s->d[5], st->compute_output), s->is.compute_output = &s->d[5];
    s->ms.inference_stats = &s->is;
    if (!x->is_pipeline) {
      Inference__MemoryUsage mu = INFERENCE__MEMORY_USAGE__INIT;
      s->mu = mu;
      s->mu.type = "CPU";
      s->mu.byte_size = st->memory_bytes;
      s->mup = &s->mu;
      s->ms.memory_usage = &s->mup;
      s->ms.n_memory_usage = 1;
    }
    list[r.n_model_stats++] = &s->ms;
  }
  r.model_stats = list;
  sip__grpc_reply(c, p && list ? NULL : SIP__OOM(), &r.base);
  sip__free(p);
  sip__free(list);
  sip__server_models_free(v, n);
}

/* ---- model repository --------------------------------------------------------------- */

static void repository_index(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__RepositoryIndexRequest *q = (const void *)req;
  char *txt = sip_server_repository_index(c->g->s, q->ready);
  json_t *root = txt ? json_loads(txt, 0, NULL) : NULL;
  sip_free(txt);
  json_t *models = json_object_get(root, "models");
  size_t n = json_array_size(models);
  Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
  Inference__RepositoryIndexResponse__ModelIndex *mi = sip__calloc(n + 1, sizeof *mi);
  Inference__RepositoryIndexResponse__ModelIndex **mp = sip__calloc(n + 1, sizeof *mp);
  for (size_t i = 0; root && mi && mp && i < n; i++) {
    json_t *o = json_array_get(models, i);
    Inference__RepositoryIndexResponse__ModelIndex init =
        INFERENCE__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
    mi[i] = init;
    const char *s;
    if ((s = json_string_value(json_object_get(o, "name")))) mi[i].name = (char *)s;
    if ((s = json_string_value(json_object_get(o, "version")))) mi[i].version = (char *)s;
    if ((s = json_string_value(json_object_get(o, "state")))) mi[i].state = (char *)s;
    if ((s = json_string_value(json_object_get(o, "reason")))) mi[i].reason = (char *)s;
    mp[r.n_models++] = &mi[i];
  }
  r.models = mp;
  sip__grpc_reply(c, root && mi && mp ? NULL : SIP__OOM(), &r.base);
  sip__free(mi);
  sip__free(mp);
  json_decref(root);
}

/* A load or unload finished (the loader thread). */
static void on_repo_done(sip_error_t *e, void *user) {
  sip__gcall_t *c = user;
  Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
  sip__grpc_reply(c, e, &r.base);
  sip__grpc_call_unref(c);
}

/* `config`: a load's Triton model config (JSON text), or NULL. */
static void repo_action(sip__gcall_t *c, const char *model, int load, const char *config) {
  if (!model[0]) {
    sip__grpc_reply(c, sip_error_new(SIP_INVALID_ARGUMENT, "model_name is empty; expected the "
                                     "name of a repository model"), NULL);
    return;
  }
  sip__grpc_call_ref(c);
  sip_error_t *e =
      load ? sip_server_load_model_config_async(c->g->s, model, config, on_repo_done, c)
           : sip_server_unload_model_async(c->g->s, model, on_repo_done, c);
  if (e) {
    sip__grpc_reply(c, e, NULL);
    sip__grpc_call_unref(c); /* never the last: the caller holds one */
  }
}

static void repository_load(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__RepositoryModelLoadRequest *q = (const void *)req;
  const char *config = NULL;
  for (size_t i = 0; i < q->n_parameters; i++) {
    const Inference__ModelRepositoryParameter *p = q->parameters[i]->value;
    int text = p && p->parameter_choice_case ==
                        INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    sip_error_t *e = sip__repo_parameter_check(1, q->parameters[i]->key, text, "a bool_param",
                                               "a string_param");
    if (e) {
      sip__grpc_reply(c, e, NULL);
      return;
    }
    config = p->string_param;
  }
  repo_action(c, q->model_name, 1, config);
}

static void repository_unload(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__RepositoryModelUnloadRequest *q = (const void *)req;
  for (size_t i = 0; i < q->n_parameters; i++) {
    const Inference__ModelRepositoryParameter *p = q->parameters[i]->value;
    int flag = p && p->parameter_choice_case ==
                        INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    sip_error_t *e = sip__repo_parameter_check(0, q->parameters[i]->key, flag, "a bool_param",
                                               "a string_param");
    if (e) {
      sip__grpc_reply(c, e, NULL);
      return;
    }
  }
  repo_action(c, q->model_name, 0, NULL);
}

/* ---- shared memory -------------------------------------------------------------------- */

static void sysshm_status(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__SystemSharedMemoryStatusRequest *q = (const void *)req;
  sip__shm_info_t *info = NULL;
  size_t n = 0;
  sip_error_t *e = sip__shm_status(sip__server_shm(c->g->s), q->name, &info, &n);
  if (e) {
    sip__grpc_reply(c, e, NULL);
    return;
  }
  typedef Inference__SystemSharedMemoryStatusResponse__RegionStatus rs_t;
  typedef Inference__SystemSharedMemoryStatusResponse__RegionsEntry re_t;
  rs_t *rs = sip__calloc(n + 1, sizeof *rs);
  re_t *re = sip__calloc(n + 1, sizeof *re);
  re_t **rp = sip__calloc(n + 1, sizeof *rp);
  Inference__SystemSharedMemoryStatusResponse r = INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__INIT;
  for (size_t i = 0; rs && re && rp && i < n; i++) {
    rs_t si = INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__REGION_STATUS__INIT;
    re_t ei = INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__REGIONS_ENTRY__INIT;
    rs[i] = si, re[i] = ei;
    rs[i].name = info[i].name;
    rs[i].key = info[i].key;
    rs[i].offset = info[i].offset;
    rs[i].byte_size = info[i].byte_size;
    re[i].key = info[i].name;
    re[i].value = &rs[i];
    rp[r.n_regions++] = &re[i];
  }
  r.regions = rp;
  sip__grpc_reply(c, rs && re && rp ? NULL : SIP__OOM(), &r.base);
  sip__free(rs), sip__free(re), sip__free(rp);
  sip__shm_info_free(info, n);
}

static void sysshm_register(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__SystemSharedMemoryRegisterRequest *q = (const void *)req;
  sip_error_t *e = sip__shm_register(sip__server_shm(c->g->s), q->name, q->key, q->offset,
                                     q->byte_size);
  Inference__SystemSharedMemoryRegisterResponse r =
      INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
  sip__grpc_reply(c, e, &r.base);
}

static void sysshm_unregister(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__SystemSharedMemoryUnregisterRequest *q = (const void *)req;
  sip__shm_unregister(sip__server_shm(c->g->s), q->name);
  Inference__SystemSharedMemoryUnregisterResponse r =
      INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
  sip__grpc_reply(c, NULL, &r.base);
}

/* CUDA shared memory as a server without GPUs answers it: nothing is ever
 * registered. */
static void cudashm_status(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__CudaSharedMemoryStatusRequest *q = (const void *)req;
  Inference__CudaSharedMemoryStatusResponse r = INFERENCE__CUDA_SHARED_MEMORY_STATUS_RESPONSE__INIT;
  sip__grpc_reply(c, q->name[0] ? sip_error_new(SIP_NOT_FOUND, "no CUDA shared memory region "
                                                "'%s' is registered: this server has no GPUs",
                                                q->name)
                                : NULL,
                  &r.base);
}

static void cudashm_register(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__CudaSharedMemoryRegisterRequest *q = (const void *)req;
  sip__grpc_reply(c, sip_error_new(SIP_INVALID_ARGUMENT, "cannot register CUDA shared memory "
                                   "region '%s': this server has no GPUs; expected system shared "
                                   "memory instead", q->name), NULL);
}

static void cudashm_unregister(sip__gcall_t *c, const ProtobufCMessage *req) {
  (void)req;
  Inference__CudaSharedMemoryUnregisterResponse r =
      INFERENCE__CUDA_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
  sip__grpc_reply(c, NULL, &r.base);
}

/* ---- trace and log settings (core/settings.h, shared with HTTP) ------------------------ */

typedef Inference__TraceSettingResponse__SettingsEntry tentry_t;
typedef Inference__TraceSettingResponse__SettingValue tvalue_t;

/* The settings document as the response's map: every value a list of
 * strings. */
static void trace_reply(sip__gcall_t *c, json_t *doc) {
  size_t n = json_object_size(doc), i = 0, n_str = 0;
  const char *k;
  json_t *v;
  json_object_foreach(doc, k, v) n_str += json_is_array(v) ? json_array_size(v) : 1;
  tentry_t *ents = sip__calloc(n + 1, sizeof *ents), **ep = sip__calloc(n + 1, sizeof *ep);
  tvalue_t *vals = sip__calloc(n + 1, sizeof *vals);
  char **strs = sip__calloc(n_str + 1, sizeof *strs), **sp = strs;
  Inference__TraceSettingResponse r = INFERENCE__TRACE_SETTING_RESPONSE__INIT;
  int ok = ents && ep && vals && strs;
  json_object_foreach(doc, k, v) {
    if (!ok) break;
    tentry_t ei = INFERENCE__TRACE_SETTING_RESPONSE__SETTINGS_ENTRY__INIT;
    tvalue_t vi = INFERENCE__TRACE_SETTING_RESPONSE__SETTING_VALUE__INIT;
    ents[i] = ei, vals[i] = vi;
    ents[i].key = (char *)k;
    ents[i].value = &vals[i];
    vals[i].value = sp;
    size_t j;
    json_t *x;
    if (json_is_array(v)) {
      json_array_foreach(v, j, x) if (json_is_string(x)) sp[vals[i].n_value++] = (char *)json_string_value(x);
    } else if (json_is_string(v)) {
      sp[vals[i].n_value++] = (char *)json_string_value(v);
    }
    sp += vals[i].n_value;
    ep[r.n_settings++] = &ents[i];
    i++;
  }
  r.settings = ep;
  sip__grpc_reply(c, ok ? NULL : SIP__OOM(), &r.base);
  sip__free(ents), sip__free(ep), sip__free(vals), sip__free(strs);
}

static void trace_setting(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__TraceSettingRequest *q = (const void *)req;
  const char *model = q->model_name[0] ? q->model_name : NULL;
  sip_error_t *e = model ? sip__server_model_check(c->g->s, model, NULL) : NULL;
  json_t *b = json_object(), *doc = NULL;
  if (!e && !b) e = SIP__OOM();
  /* One value is a string (trace_level is always a list); none clears a
   * model's own value. */
  for (size_t i = 0; !e && i < q->n_settings; i++) {
    const char *k = q->settings[i]->key;
    const Inference__TraceSettingRequest__SettingValue *v = q->settings[i]->value;
    size_t nv = v ? v->n_value : 0;
    json_t *j;
    if (nv == 0) {
      j = json_null();
    } else if (nv == 1 && strcmp(k, "trace_level")) {
      j = json_string(v->value[0]);
    } else {
      j = json_array();
      for (size_t x = 0; j && x < nv; x++) json_array_append_new(j, json_string(v->value[x]));
    }
    if (!j) e = sip_error_new(SIP_INVALID_ARGUMENT, "setting '%s' is not UTF-8 text", k);
    else json_object_set_new(b, k, j);
  }
  if (!e) {
    if (q->n_settings) e = sip__trace_apply(sip__server_trace(c->g->s), model, b, &doc);
    else if (!(doc = sip__trace_get(sip__server_trace(c->g->s), model))) e = SIP__OOM();
  }
  json_decref(b);
  if (e) sip__grpc_reply(c, e, NULL);
  else trace_reply(c, doc);
  json_decref(doc);
}

typedef Inference__LogSettingsResponse__SettingsEntry lentry_t;
typedef Inference__LogSettingsResponse__SettingValue lvalue_t;

static void log_settings(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Inference__LogSettingsRequest *q = (const void *)req;
  json_t *b = json_object();
  sip_error_t *e = b ? NULL : SIP__OOM();
  for (size_t i = 0; !e && i < q->n_settings; i++) {
    const char *k = q->settings[i]->key;
    const Inference__LogSettingsRequest__SettingValue *v = q->settings[i]->value;
    json_t *j = NULL;
    switch (v ? v->parameter_choice_case : 0) {
    case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM:
      j = json_boolean(v->bool_param); break;
    case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM:
      j = json_integer(v->uint32_param); break;
    case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM:
      j = json_string(v->string_param); break;
    default:
      e = sip_error_new(SIP_INVALID_ARGUMENT, "log setting '%s' has no value; expected a "
                        "bool_param, uint32_param or string_param", k);
      continue;
    }
    if (!j) e = sip_error_new(SIP_INVALID_ARGUMENT, "log setting '%s' is not UTF-8 text", k);
    else json_object_set_new(b, k, j);
  }
  if (!e && q->n_settings) e = sip__log_settings_apply(b);
  json_decref(b);
  json_t *doc = e ? NULL : sip__log_settings_doc();
  if (!e && !doc) e = SIP__OOM();
  size_t n = json_object_size(doc), i = 0;
  lentry_t *ents = sip__calloc(n + 1, sizeof *ents), **ep = sip__calloc(n + 1, sizeof *ep);
  lvalue_t *vals = sip__calloc(n + 1, sizeof *vals);
  if (!e && (!ents || !ep || !vals)) e = SIP__OOM();
  Inference__LogSettingsResponse r = INFERENCE__LOG_SETTINGS_RESPONSE__INIT;
  const char *k;
  json_t *v;
  json_object_foreach(doc, k, v) {
    if (e) break;
    lentry_t ei = INFERENCE__LOG_SETTINGS_RESPONSE__SETTINGS_ENTRY__INIT;
    lvalue_t vi = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__INIT;
    ents[i] = ei, vals[i] = vi;
    ents[i].key = (char *)k;
    ents[i].value = &vals[i];
    if (json_is_boolean(v)) {
      vals[i].parameter_choice_case =
          INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM;
      vals[i].bool_param = json_is_true(v);
    } else if (json_is_integer(v)) {
      vals[i].parameter_choice_case =
          INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM;
      vals[i].uint32_param = (uint32_t)json_integer_value(v);
    } else {
      vals[i].parameter_choice_case =
          INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
      vals[i].string_param = (char *)(json_string_value(v) ? json_string_value(v) : "");
    }
    ep[r.n_settings++] = &ents[i];
    i++;
  }
  r.settings = ep;
  sip__grpc_reply(c, e, &r.base);
  sip__free(ents), sip__free(ep), sip__free(vals);
  json_decref(doc);
}

/* ---- the method table ------------------------------------------------------------------ */

#define UNARY(name, type, fn) {SVC name, &inference__##type##__descriptor, fn, NULL, 0}
/* ModelMesh's model runtime SPI (mmesh.c). */
#define MMESH(name, type, fn) {"/mmesh.ModelRuntime/" name, &mmesh__##type##__descriptor, fn, NULL, 0}

const sip__gmethod_t sip__grpc_methods[] = {
    UNARY("ServerLive", server_live_request, server_live),
    UNARY("ServerReady", server_ready_request, server_ready),
    UNARY("ModelReady", model_ready_request, model_ready),
    UNARY("ServerMetadata", server_metadata_request, server_metadata),
    UNARY("ModelMetadata", model_metadata_request, model_metadata),
    {SVC "ModelInfer", NULL, NULL, sip__grpc_infer, 0},
    {SVC "ModelStreamInfer", NULL, NULL, NULL, 1},
    UNARY("ModelConfig", model_config_request, sip__grpc_model_config),
    UNARY("ModelStatistics", model_statistics_request, model_statistics),
    UNARY("RepositoryIndex", repository_index_request, repository_index),
    UNARY("RepositoryModelLoad", repository_model_load_request, repository_load),
    UNARY("RepositoryModelUnload", repository_model_unload_request, repository_unload),
    UNARY("SystemSharedMemoryStatus", system_shared_memory_status_request, sysshm_status),
    UNARY("SystemSharedMemoryRegister", system_shared_memory_register_request, sysshm_register),
    UNARY("SystemSharedMemoryUnregister", system_shared_memory_unregister_request,
          sysshm_unregister),
    UNARY("CudaSharedMemoryStatus", cuda_shared_memory_status_request, cudashm_status),
    UNARY("CudaSharedMemoryRegister", cuda_shared_memory_register_request, cudashm_register),
    UNARY("CudaSharedMemoryUnregister", cuda_shared_memory_unregister_request,
          cudashm_unregister),
    UNARY("TraceSetting", trace_setting_request, trace_setting),
    UNARY("LogSettings", log_settings_request, log_settings),
    {"/grpc.health.v1.Health/Check", &grpc__health__v1__health_check_request__descriptor,
     health_check, NULL, 0},
    MMESH("loadModel", load_model_request, sip__grpc_mmesh_load),
    MMESH("unloadModel", unload_model_request, sip__grpc_mmesh_unload),
    MMESH("predictModelSize", predict_model_size_request, sip__grpc_mmesh_predict),
    MMESH("modelSize", model_size_request, sip__grpc_mmesh_size),
    MMESH("runtimeStatus", runtime_status_request, sip__grpc_mmesh_status),
};
const size_t sip__grpc_n_methods = sizeof sip__grpc_methods / sizeof *sip__grpc_methods;
