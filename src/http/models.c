/* sip — KServe model endpoints: metadata, configuration (Triton's field
 * names), readiness and statistics (Triton's statistics extension), read
 * from the server's typed model views (server/introspect.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "server/introspect.h"

/* ---- endpoints ----------------------------------------------------------- */

/* KServe tensor metadata of typed inputs or outputs. Model config
 * (`config` != 0) uses Triton's config names instead. */
static json_t *ks_io(const sip_io_desc_t *d, size_t n, int config) {
  json_t *out = json_array();
  for (size_t i = 0; i < n; i++) {
    const char *ks = sip__ks_datatype(d[i].dtype);
    json_t *dims = json_array();
    /* Unknown rank: one dynamic dim is the closest KServe can say. */
    if (d[i].rank < 0) json_array_append_new(dims, json_integer(-1));
    for (int k = 0; k < d[i].rank; k++) json_array_append_new(dims, json_integer(d[i].dims[k]));
    char cfg_type[32];
    snprintf(cfg_type, sizeof cfg_type, "TYPE_%s", ks ? (strcmp(ks, "BYTES") ? ks : "STRING")
                                                      : "INVALID");
    json_array_append_new(out, config ? json_pack("{s:s,s:s,s:o}", "name", d[i].name,
                                                  "data_type", cfg_type, "dims", dims)
                                      : json_pack("{s:s,s:s,s:o}", "name", d[i].name,
                                                  "datatype", ks ? ks : "INVALID", "shape",
                                                  dims));
  }
  return out;
}

/* Triton's ensemble_scheduling steps, one per stage; transform stages name
 * their operation instead of a model. */
static json_t *ensemble_config(const sip__model_view_t *m) {
  json_t *steps = json_array();
  const sip__pipeline_config_t *pc = m->pipeline_cfg;
  for (size_t i = 0; i < pc->n_stages; i++) {
    const sip__stage_config_t *st = &pc->stages[i];
    json_array_append_new(steps, !st->is_transform
                                     ? json_pack("{s:s,s:s,s:i}", "stage", st->name, "model_name",
                                                 st->pool, "model_version", -1)
                                     : json_pack("{s:s,s:s}", "stage", st->name, "transform",
                                                 st->operation ? st->operation : ""));
  }
  return json_pack("{s:s,s:s,s:I,s:o,s:o,s:{s:o}}", "name", m->name, "platform", "ensemble",
                   "max_batch_size", (json_int_t)0, "input",
                   ks_io(m->inputs, m->n_inputs, 1), "output", ks_io(m->outputs, m->n_outputs, 1),
                   "ensemble_scheduling", "step", steps);
}

/* Triton's model configuration field names where they exist; sip's own
 * settings (priority, quota, backend options) under their config names. */
static json_t *pool_config(const sip__model_view_t *m) {
  const sip__pool_config_t *c = m->pool_cfg;
  json_t *opts = json_object();
  for (size_t k = 0; k < c->n_backend_options; k++)
    json_object_set_new(opts, c->backend_options[k].key, json_string(c->backend_options[k].value));
  json_t *out = json_pack(
      "{s:s,s:s,s:s,s:I,s:o,s:o,s:[{s:I,s:s}],s:s,s:{s:I,s:i},s:o,s:o,s:o}", "name", m->name,
      "platform", m->platform, "backend", c->backend, "max_batch_size",
      (json_int_t)c->max_batch_size, "input", ks_io(m->inputs, m->n_inputs, 1), "output",
      ks_io(m->outputs, m->n_outputs, 1), "instance_group", "count", (json_int_t)m->pool_size,
      "kind", "KIND_CPU", "priority", sip__priority_name(c->priority), "resource_quota",
      "max_memory_mb", (json_int_t)m->max_memory_mb, "max_compute_percent",
      m->max_compute_percent, "backend_options", opts, "model_path",
      m->model_path ? json_string(m->model_path) : json_null(), "version",
      m->version ? json_string(m->version) : json_null());
  /* Triton's names: dynamic_batching.max_queue_delay_microseconds. */
  if (out && c->max_batch_size) {
    static const char *const pads[] = {"none", "replicate_last", "zero"};
    json_t *pref = json_array();
    for (size_t k = 0; k < c->n_preferred; k++)
      json_array_append_new(pref, json_integer(c->preferred_batch_sizes[k]));
    json_object_set_new(out, "dynamic_batching",
                        json_pack("{s:o,s:I,s:s}", "preferred_batch_size", pref,
                                  "max_queue_delay_microseconds",
                                  (json_int_t)c->max_queue_delay_us, "padding_strategy",
                                  pads[c->padding_strategy]));
  }
  /* Triton's names: sequence_batching.max_sequence_idle_microseconds and
   * control_input[{name, control: [{kind}]}]. */
  if (out && c->sequence_batching) {
    static const char *const kinds[SIP__SEQ_CONTROLS] = {
        "CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY",
        "CONTROL_SEQUENCE_CORRID"};
    json_t *ctl = json_array();
    for (int k = 0; k < SIP__SEQ_CONTROLS; k++)
      if (c->seq_control[k])
        json_array_append_new(ctl, json_pack("{s:s,s:[{s:s}]}", "name", c->seq_control[k],
                                             "control", "kind", kinds[k]));
    json_object_set_new(out, "sequence_batching",
                        json_pack("{s:I,s:i,s:I,s:o}", "max_sequence_idle_microseconds",
                                  (json_int_t)c->seq_idle_timeout_us, "max_sequences",
                                  c->seq_max_sequences, "max_backlog",
                                  (json_int_t)c->seq_max_backlog, "control_input", ctl));
  }
  return out;
}

static enum MHD_Result model_meta(sip__hreq_t *q, int config) {
  /* Pools' inputs and outputs are freed while the server drains. */
  if (sip_server_draining(q->h->s))
    return sip__http_send_error_msg(q->conn, 503,
                                    "server is draining: model metadata is unavailable");
  size_t n = 0;
  sip__model_view_t *v = sip__server_models(q->h->s, &n);
  const sip__model_view_t *m = NULL;
  sip_error_t *e = sip__model_views_lookup(q->h->s, v, n, q->model, q->version, &m);
  if (!e) e = sip__model_view_need_loaded(m);
  if (e) {
    sip__server_models_free(v, n);
    return sip__http_send_error(q->conn, e);
  }
  json_t *out;
  if (!config) {
    out = json_pack("{s:s,s:[],s:s,s:o,s:o}", "name", q->model, "versions", "platform",
                    m->platform, "inputs", ks_io(m->inputs, m->n_inputs, 0), "outputs",
                    ks_io(m->outputs, m->n_outputs, 0));
    /* Every version the model serves (a repository model may serve several). */
    for (size_t i = 0; out && i < n; i++)
      if (v[i].version && !strcmp(v[i].name, q->model))
        json_array_append_new(json_object_get(out, "versions"), json_string(v[i].version));
  } else {
    out = m->is_pipeline ? ensemble_config(m) : pool_config(m);
  }
  sip__server_models_free(v, n);
  return sip__http_send_json(q->conn, 200, out);
}

enum MHD_Result sip__http_model_ready(sip__hreq_t *q) {
  size_t n = 0;
  sip__model_view_t *v = sip__server_models(q->h->s, &n);
  const sip__model_view_t *m = NULL;
  sip_error_t *e = sip__model_views_lookup(q->h->s, v, n, q->model, q->version, &m);
  /* An on_demand model not loaded yet serves: its request loads it. */
  if (!e && strcmp(m->state, "READY") && strcmp(m->state, "UNLOADED"))
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' is not ready: it is %s%s%s", q->model,
                      m->state, m->error ? ": " : "", m->error ? m->error : "");
  sip__server_models_free(v, n);
  if (e) return sip__http_send_error(q->conn, e);
  return sip__http_send_json(q->conn, 200, json_pack("{s:s,s:b}", "name", q->model, "ready", 1));
}

static json_t *stat_pair(sip__stat_read_t s) {
  return json_pack("{s:I,s:I}", "count", (json_int_t)s.count, "ns", (json_int_t)s.ns);
}

/* Triton's statistics extension. Pipelines count their requests end to
 * end; their stages' queue and compute time are in the stages' pools'
 * entries. */
static enum MHD_Result stats(sip__hreq_t *q, int all) {
  size_t n = 0;
  sip__model_view_t *v = sip__server_models(q->h->s, &n);
  if (!all) {
    const sip__model_view_t *m = NULL;
    sip_error_t *e = sip__model_views_lookup(q->h->s, v, n, q->model, q->version, &m);
    if (e) {
      sip__server_models_free(v, n);
      return sip__http_send_error(q->conn, e);
    }
  }
  json_t *list = json_array();
  for (size_t i = 0; i < n; i++) {
    const sip__model_view_t *m = &v[i];
    if (!all && strcmp(m->name, q->model)) continue;
    if (!all && q->version && (!m->version || strcmp(m->version, q->version))) continue;
    const sip__model_stats_t *st = &m->stats;
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:I,s:I,s:{s:o,s:o,s:o,s:o,s:o,s:o},s:[]}", "name", m->name, "version",
        m->version ? m->version : "", "last_inference", (json_int_t)st->last_inference_ms,
        "inference_count", (json_int_t)st->inference_count, "execution_count",
        (json_int_t)st->execution_count, "inference_stats", "success", stat_pair(st->success),
        "fail", stat_pair(st->fail), "queue", stat_pair(st->queue), "compute_input",
        stat_pair(st->compute_input), "compute_infer", stat_pair(st->compute_infer),
        "compute_output", stat_pair(st->compute_output), "batch_stats");
    if (o && !m->is_pipeline)
      json_object_set_new(o, "memory_usage",
                          json_pack("[{s:s,s:i,s:I}]", "type", "CPU", "id", 0, "byte_size",
                                    (json_int_t)st->memory_bytes));
    json_array_append_new(list, o);
  }
  sip__server_models_free(v, n);
  return sip__http_send_json(q->conn, 200, json_pack("{s:o}", "model_stats", list));
}

enum MHD_Result sip__http_model_meta(sip__hreq_t *q) { return model_meta(q, 0); }
enum MHD_Result sip__http_model_config(sip__hreq_t *q) { return model_meta(q, 1); }
enum MHD_Result sip__http_model_stats(sip__hreq_t *q) { return stats(q, 0); }
enum MHD_Result sip__http_all_stats(sip__hreq_t *q) { return stats(q, 1); }
