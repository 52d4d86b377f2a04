/* sip — KServe model endpoints: metadata, configuration (Triton's field
 * names), readiness and statistics (Triton's statistics extension), all
 * read from the server's introspection JSON; and the pool lookups that
 * infer.c shares.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "server/introspect.h"

/* ---- lookups in the pools / status JSON --------------------------------- */

/* The pipeline named `model` in a pools/status JSON, or NULL. */
static json_t *find_pipeline(json_t *root, const char *model) {
  json_t *p;
  size_t i;
  json_array_foreach(json_object_get(root, "pipelines"), i, p) {
    const char *n = jstr(p, "name");
    if (n && !strcmp(n, model)) return p;
  }
  return NULL;
}

/* The pool object serving `model` (and `version`, NULL: the model's
 * default version) in a pools/status JSON array, else the pipeline of that
 * name (pipelines have no versions), or NULL. Pool and pipeline names never
 * collide (the config refuses it). */
json_t *sip__http_find_pool(json_t *root, const char *model, const char *version) {
  json_t *pools = json_object_get(root, "pools"), *p, *first = NULL;
  size_t i;
  if (!version && (p = find_pipeline(root, model))) return p;
  json_array_foreach(pools, i, p) {
    const char *n = jstr(p, "name");
    if (!n || strcmp(n, model)) continue;
    const char *v = jstr(p, "version");
    if (version) {
      if (v && !strcmp(v, version)) return p;
    } else if (json_is_true(json_object_get(p, "default"))) {
      return p;
    } else if (!first) {
      first = p;
    }
  }
  return first;
}

/* NOT_FOUND for an unknown model or a version it does not serve; NULL when
 * `pool` (from sip__http_find_pool) serves the request. */
sip_error_t *sip__http_check_model(sip_server_t *s, json_t *pool, const char *model,
                                   const char *version) {
  if (pool) return NULL;
  /* The engine's one not-found wording. */
  sip_error_t *e = sip__server_model_check(s, model, version);
  return e ? e
           : sip_error_new(SIP_UNAVAILABLE, "model '%s' was loaded or unloaded while answering; "
                           "expected a retry to see it settled", model);
}



/* Model metadata and config need a loaded pool. */
sip_error_t *sip__http_need_loaded(json_t *pool, const char *model) {
  const char *st = jstr(pool, "state");
  if (st && (!strcmp(st, "READY") || !strcmp(st, "STOPPED"))) return NULL;
  if (st && !strcmp(st, "FAILED"))
    return sip_error_new(SIP_UNAVAILABLE, "model '%s' failed to load: %s", model,
                         jstr(pool, "error") ? jstr(pool, "error") : "unknown reason");
  return sip_error_new(SIP_UNAVAILABLE, "model '%s' is still loading", model);
}

/* ---- endpoints ----------------------------------------------------------- */

/* Pipelines are "ensemble", Triton's platform for a graph of models. */
static const char *platform(json_t *pool) {
  if (sip__http_is_pipeline(pool)) return "ensemble";
  const char *b = jstr(pool, "platform");
  return b ? b : "unknown";
}

/* KServe tensor metadata from the pools JSON's {name, dtype, shape}. Model
 * config (`config` != 0) uses Triton's config names instead. */
static json_t *ks_io(json_t *list, int config) {
  json_t *out = json_array(), *io;
  size_t i;
  json_array_foreach(list, i, io) {
    sip_dtype_t dt = sip_dtype_from_name(jstr(io, "dtype"));
    const char *ks = sip__ks_datatype(dt);
    json_t *shape = json_object_get(io, "shape");
    /* Unknown rank: one dynamic dim is the closest KServe can say. */
    json_t *dims = json_is_array(shape) ? json_deep_copy(shape) : json_pack("[i]", -1);
    char cfg_type[32];
    snprintf(cfg_type, sizeof cfg_type, "TYPE_%s", ks ? (strcmp(ks, "BYTES") ? ks : "STRING")
                                                      : "INVALID");
    json_array_append_new(out, config ? json_pack("{s:s,s:s,s:o}", "name", jstr(io, "name"),
                                                  "data_type", cfg_type, "dims", dims)
                                      : json_pack("{s:s,s:s,s:o}", "name", jstr(io, "name"),
                                                  "datatype", ks ? ks : "INVALID", "shape",
                                                  dims));
  }
  return out;
}

static enum MHD_Result model_meta(hreq_t *q, int config) {
  /* The pools JSON lists each model's inputs and outputs, which a draining
   * server is freeing: answer from the status only from then on. */
  if (sip_server_draining(q->h->s))
    return sip__http_send_error_msg(q->conn, 503,
                                    "server is draining: model metadata is unavailable");
  json_t *root = sip__server_info(q->h->s, SIP_INFO_POOLS);
  json_t *pool = sip__http_find_pool(root, q->model, q->version);
  sip_error_t *e = sip__http_check_model(q->h->s, pool, q->model, q->version);
  if (!e) e = sip__http_need_loaded(pool, q->model);
  if (e) {
    json_decref(root);
    return sip__http_send_error(q->conn, e);
  }
  const char *v = jstr(pool, "version");
  json_t *out;
  if (!config) {
    out = json_pack("{s:s,s:[],s:s,s:o,s:o}", "name", q->model, "versions", "platform",
                    platform(pool), "inputs", ks_io(json_object_get(pool, "inputs"), 0),
                    "outputs", ks_io(json_object_get(pool, "outputs"), 0));
    /* Every version the model serves (a repository model may serve several). */
    json_t *p;
    size_t i;
    json_array_foreach(json_object_get(root, "pools"), i, p) {
      const char *pv = jstr(p, "version");
      if (out && pv && jstr(p, "name") && !strcmp(jstr(p, "name"), q->model))
        json_array_append_new(json_object_get(out, "versions"), json_string(pv));
    }
  } else if (sip__http_is_pipeline(pool)) {
    /* Triton's ensemble_scheduling steps, one per stage; transform stages
     * name their operation instead of a model. */
    json_t *steps = json_array(), *st;
    size_t i;
    json_array_foreach(json_object_get(pool, "stages"), i, st) {
      const char *m = jstr(st, "pool"), *op = jstr(st, "operation");
      json_array_append_new(steps, m ? json_pack("{s:s,s:s,s:i}", "stage", jstr(st, "name"),
                                                 "model_name", m, "model_version", -1)
                                     : json_pack("{s:s,s:s}", "stage", jstr(st, "name"),
                                                 "transform", op ? op : ""));
    }
    out = json_pack("{s:s,s:s,s:I,s:o,s:o,s:{s:o}}", "name", q->model, "platform", "ensemble",
                    "max_batch_size", (json_int_t)0, "input",
                    ks_io(json_object_get(pool, "inputs"), 1), "output",
                    ks_io(json_object_get(pool, "outputs"), 1), "ensemble_scheduling", "step",
                    steps);
  } else {
    /* Triton's model configuration field names where they exist; sip's own
     * settings (priority, quota, backend options) under their config names. */
    json_t *quota = json_object_get(pool, "resource_quota");
    json_t *opts = json_object_get(pool, "backend_options");
    out = json_pack("{s:s,s:s,s:s,s:I,s:o,s:o,s:[{s:I,s:s}],s:s,s:O,s:O,s:O}", "name", q->model,
                    "platform", platform(pool), "backend", jstr(pool, "backend"),
                    "max_batch_size", (json_int_t)0, "input",
                    ks_io(json_object_get(pool, "inputs"), 1), "output",
                    ks_io(json_object_get(pool, "outputs"), 1), "instance_group", "count",
                    json_integer_value(json_object_get(pool, "pool_size")), "kind", "KIND_CPU",
                    "priority", jstr(pool, "priority") ? jstr(pool, "priority") : "medium",
                    "resource_quota", quota ? quota : json_null(), "backend_options",
                    opts ? opts : json_null(), "model_path",
                    json_object_get(pool, "model_path") ? json_object_get(pool, "model_path")
                                                        : json_null());
    if (out) json_object_set_new(out, "version", v ? json_string(v) : json_null());
    /* Triton's names: max_batch_size and dynamic_batching.max_queue_delay_microseconds. */
    json_t *db = json_object_get(pool, "dynamic_batching");
    if (out && db) {
      json_object_set_new(out, "max_batch_size",
                          json_integer(json_integer_value(json_object_get(db, "max_batch_size"))));
      json_object_set_new(
          out, "dynamic_batching",
          json_pack("{s:O,s:O,s:O}", "preferred_batch_size",
                    json_object_get(db, "preferred_batch_sizes"),
                    "max_queue_delay_microseconds", json_object_get(db, "max_queue_delay_us"),
                    "padding_strategy", json_object_get(db, "padding_strategy")));
    }
  }
  json_decref(root);
  return sip__http_send_json(q->conn, 200, out);
}

enum MHD_Result sip__http_model_ready(hreq_t *q) {
  json_t *root = sip__server_info(q->h->s, SIP_INFO_STATUS);
  json_t *pool = sip__http_find_pool(root, q->model, q->version);
  sip_error_t *e = sip__http_check_model(q->h->s, pool, q->model, q->version);
  const char *st = pool ? jstr(pool, "state") : NULL;
  if (!e && (!st || strcmp(st, "READY")))
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' is not ready: it is %s%s%s", q->model,
                      st ? st : "UNKNOWN", jstr(pool, "error") ? ": " : "",
                      jstr(pool, "error") ? jstr(pool, "error") : "");
  json_decref(root);
  if (e) return sip__http_send_error(q->conn, e);
  return sip__http_send_json(q->conn, 200, json_pack("{s:s,s:b}", "name", q->model, "ready", 1));
}

static json_t *stat_pair(json_t *stats, const char *key) {
  json_t *s = json_object_get(stats, key);
  return json_pack("{s:I,s:I}", "count", json_integer_value(json_object_get(s, "count")), "ns",
                   json_integer_value(json_object_get(s, "ns")));
}

/* Triton's statistics extension, from the status JSON's per-pool "stats". */
static enum MHD_Result stats(hreq_t *q, int all) {
  json_t *status = sip__server_info(q->h->s, SIP_INFO_STATUS);
  if (!status) return sip__http_send_error_msg(q->conn, 500, "out of memory");
  if (!all) {
    json_t *pool = sip__http_find_pool(status, q->model, q->version);
    sip_error_t *e = sip__http_check_model(q->h->s, pool, q->model, q->version);
    if (e) {
      json_decref(status);
      return sip__http_send_error(q->conn, e);
    }
  }
  json_t *list = json_array(), *p;
  size_t i;
  json_array_foreach(json_object_get(status, "pools"), i, p) {
    const char *name = jstr(p, "name");
    if (!name || (!all && strcmp(name, q->model))) continue;
    const char *v = jstr(p, "version");
    if (!all && q->version && (!v || strcmp(v, q->version))) continue;
    json_t *st = json_object_get(p, "stats");
    json_array_append_new(
        list,
        json_pack("{s:s,s:s,s:I,s:I,s:I,s:{s:o,s:o,s:o,s:o,s:o,s:o},s:[],s:[{s:s,s:i,s:I}]}",
                  "name", name, "version", v ? v : "", "last_inference",
                  json_integer_value(json_object_get(st, "last_inference")), "inference_count",
                  json_integer_value(json_object_get(st, "inference_count")), "execution_count",
                  json_integer_value(json_object_get(st, "execution_count")), "inference_stats",
                  "success", stat_pair(st, "success"), "fail", stat_pair(st, "fail"), "queue",
                  stat_pair(st, "queue"), "compute_input", stat_pair(st, "compute_input"),
                  "compute_infer", stat_pair(st, "compute_infer"), "compute_output",
                  stat_pair(st, "compute_output"), "batch_stats", "memory_usage", "type", "CPU",
                  "id", 0, "byte_size", json_integer_value(json_object_get(p, "memory_bytes"))));
  }
  /* Pipelines: requests end to end; their stages' queue and compute time
   * are in the stages' pools' entries. As for Triton's models, the
   * inference and execution counts are of successful requests; refused and
   * failed ones are the fail count. */
  json_array_foreach(json_object_get(status, "pipelines"), i, p) {
    const char *name = jstr(p, "name");
    if (!name || (!all && (q->version || strcmp(name, q->model)))) continue;
    json_int_t total = 0, ok = json_integer_value(json_object_get(json_object_get(p, "requests"),
                                                                  "OK"));
    const char *code;
    json_t *n;
    json_object_foreach(json_object_get(p, "requests"), code, n) total += json_integer_value(n);
    json_t *lat = json_object_get(p, "latency_us"), *zero = json_pack("{s:i,s:i}", "count", 0,
                                                                        "ns", 0);
    json_array_append_new(
        list,
        json_pack("{s:s,s:s,s:I,s:I,s:I,s:{s:{s:I,s:I},s:{s:I,s:I},s:O,s:O,s:O,s:o},s:[]}",
                  "name", name, "version", "", "last_inference",
                  json_integer_value(json_object_get(p, "last_inference")), "inference_count",
                  ok, "execution_count", ok, "inference_stats", "success", "count", ok,
                  "ns", json_integer_value(json_object_get(lat, "ok")) * 1000, "fail", "count",
                  total - ok, "ns", json_integer_value(json_object_get(lat, "failed")) * 1000,
                  "queue", zero, "compute_input", zero, "compute_infer", zero, "compute_output",
                  zero, "batch_stats"));
  }
  json_decref(status);
  return sip__http_send_json(q->conn, 200, json_pack("{s:o}", "model_stats", list));
}

enum MHD_Result sip__http_model_meta(hreq_t *q) { return model_meta(q, 0); }
enum MHD_Result sip__http_model_config(hreq_t *q) { return model_meta(q, 1); }
enum MHD_Result sip__http_model_stats(hreq_t *q) { return stats(q, 0); }
enum MHD_Result sip__http_all_stats(hreq_t *q) { return stats(q, 1); }
