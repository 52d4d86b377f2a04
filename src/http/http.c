/* sip — KServe v2 HTTP/REST front-end on libmicrohttpd.
 *
 * MHD runs its own event-loop threads (server.http_threads, epoll). An infer
 * request is decoded on that thread, then the connection is *suspended* and
 * the request submitted with sip_server_infer_async; the completion callback
 * (an engine thread) stores the response and resumes the connection, and MHD
 * calls the handler again on its thread to encode and queue the answer. So
 * no HTTP thread waits for inference, and the executor does no encoding.
 *
 * Only the public engine API and its introspection JSON are used here (plus
 * the server's `draining` flag), so the scheduler can change underneath.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "http/http.h"
#include "server/prometheus.h"
#include "server/introspect.h"

/* Per-connection memory MHD may use: request line, headers and its read
 * buffer. Headers that do not fit are answered 431. */
#define CONN_MEMORY_LIMIT ((size_t)64 << 10)
#define CONN_LIMIT 1000
#define IDLE_TIMEOUT_S 300
/* How long stop waits for answers still being written (sip__now_us is the
 * monotonic clock the condition variable uses). */
#define STOP_GRACE_US 1000000

/* What a model's inputs look like, for raw binary requests (which carry no
 * shape), and its version, for "model_version" in answers. Filled from the
 * pools JSON when the pool is READY, per model and requested version, and
 * rebuilt when the server's pools changed since (a model repository load
 * or unload). Reference-counted: a request keeps the one it used. */
typedef struct meta {
  char *model;
  char *asked;   /* the version asked for, NULL: the default one */
  uint64_t gen;  /* the registry generation it describes */
  char *version; /* NULL: unversioned */
  sip_io_desc_t *inputs;
  size_t n_inputs;
  atomic_int refs;
  struct meta *next;
} meta_t;

struct sip_http {
  sip_server_t *s;
  const sip_config_t *cfg;
  struct MHD_Daemon *d;
  char address[300];
  atomic_long conns;    /* open connections */
  atomic_long inflight; /* requests begun and not yet fully answered */
  pthread_mutex_t mu;   /* with cv: stop waits for inflight to reach 0 */
  pthread_cond_t cv;
  pthread_mutex_t cache_mu;
  meta_t *cache;
};

typedef enum route_kind {
  R_NONE = 0,
  R_LIVE,
  R_READY,
  R_SERVER,
  R_MODEL,
  R_MODEL_READY,
  R_INFER,
  R_CONFIG,
  R_STATS,
  R_ALL_STATS,
  R_METRICS,
  R_REPO_INDEX,  /* POST /v2/repository/index */
  R_REPO_LOAD,   /* POST /v2/repository/models/{m}/load */
  R_REPO_UNLOAD, /* POST /v2/repository/models/{m}/unload */
} route_kind_t;

/* One HTTP request (MHD's con_cls). */
typedef struct hreq {
  sip_http_t *h;
  struct MHD_Connection *conn;
  route_kind_t kind;
  char *model, *version;
  /* The body, written at buf + pad: pad puts the binary section (after the
   * JSON header) on a 64-byte boundary so binary inputs are used in place. */
  uint8_t *buf;
  size_t pad, len, cap;
  int64_t header_len; /* -1: all JSON, 0: raw binary, > 0: JSON header length */
  int started;        /* decoded and submitted (or failed): the rest is the answer */
  int refused;        /* answered before its body was read (MHD drops the body) */
  sip_error_t *early; /* found in the headers; answered once the body is read */
  sip__ks_request_t *ks;
  struct meta *meta; /* the model's metadata (a reference), or NULL */
  /* Set before the connection is resumed. */
  sip_response_t *resp;
  int resp_oom;
  sip_error_t *err;
} hreq_t;

/* ---- small helpers ----------------------------------------------------- */

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == '"')) msg[--n] = '\0';
  for (char *p = msg; *p; p++)
    if (*p == '"') *p = '\'';
  sip__log(SIP__LOG_DEBUG, "http", "mhd=\"%s\"", msg);
}

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r,
                             const char *ctype) {
  if (!r) return MHD_NO; /* out of memory: MHD closes the connection */
  if (ctype) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

/* Sends an owned sip__malloc'd body. */
static enum MHD_Result send_owned(struct MHD_Connection *c, unsigned status, const char *ctype,
                                  char *body, size_t len) {
  if (!body) return MHD_NO;
  struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, sip__free);
  if (!r) sip__free(body);
  return queue(c, status, r, ctype);
}

static enum MHD_Result send_error_msg(struct MHD_Connection *c, unsigned status, const char *msg) {
  size_t len = 0;
  char *body = sip__ks_error_json(msg, &len);
  return send_owned(c, status, "application/json", body, len);
}

static enum MHD_Result send_error(struct MHD_Connection *c, sip_error_t *e) {
  enum MHD_Result r = send_error_msg(c, (unsigned)sip_code_http_status(sip_error_code(e)),
                                     sip_error_message(e));
  sip_error_free(e);
  return r;
}

/* Sends a JSON value (consumed). */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *v) {
  char *txt = v ? json_dumps(v, JSON_COMPACT) : NULL;
  json_decref(v);
  if (!txt) return send_error_msg(c, 500, "out of memory");
  /* jansson allocates with malloc; sip_free is its documented deallocator. */
  struct MHD_Response *r =
      MHD_create_response_from_buffer_with_free_callback(strlen(txt), txt, sip_free);
  if (!r) sip_free(txt);
  return queue(c, status, r, "application/json");
}

static const char *jstr(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

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

/* A pipeline's entry (it has stages) rather than a pool's. */
static int is_pipeline(json_t *entry) { return json_object_get(entry, "stages") != NULL; }

/* The pool object serving `model` (and `version`, NULL: the model's
 * default version) in a pools/status JSON array, else the pipeline of that
 * name (pipelines have no versions), or NULL. Pool and pipeline names never
 * collide (the config refuses it). */
static json_t *find_pool(json_t *root, const char *model, const char *version) {
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
 * `pool` (from find_pool) serves the request. */
static sip_error_t *check_model(json_t *root, json_t *pool, const char *model,
                                const char *version) {
  if (pool) return NULL;
  char served[256] = "";
  int n = 0, unversioned = 0;
  json_t *p;
  size_t i;
  json_array_foreach(json_object_get(root, "pools"), i, p) {
    const char *name = jstr(p, "name"), *v = jstr(p, "version");
    if (!name || strcmp(name, model)) continue;
    n++;
    if (!v) unversioned = 1;
    else
      snprintf(served + strlen(served), sizeof served - strlen(served), "%s'%s'",
               served[0] ? ", " : "", v);
  }
  if (!n && find_pipeline(root, model))
    return sip_error_new(SIP_NOT_FOUND, "model '%s' is a pipeline and has no version '%s'; ask "
                                        "without a version", model, version);
  if (!n) return sip_error_new(SIP_NOT_FOUND, "unknown model '%s'", model);
  if (unversioned)
    return sip_error_new(SIP_NOT_FOUND, "model '%s' has no version '%s'; it serves an unversioned model",
                         model, version);
  return sip_error_new(SIP_NOT_FOUND, "model '%s' has no version '%s'; it serves %s %s", model,
                       version, n > 1 ? "versions" : "version", served);
}

/* ---- the model metadata cache ------------------------------------------ */

static void meta_free(meta_t *m) {
  if (!m) return;
  sip__free(m->model);
  sip__free(m->asked);
  sip__free(m->version);
  for (size_t i = 0; i < m->n_inputs; i++) sip__free(m->inputs[i].name);
  sip__free(m->inputs);
  sip__free(m);
}

static void meta_unref(meta_t *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) meta_free(m);
}

static meta_t *meta_build(json_t *pool, const char *model, const char *asked, uint64_t gen) {
  meta_t *m = sip__calloc(1, sizeof *m);
  if (!m) return NULL;
  atomic_init(&m->refs, 1);
  m->gen = gen;
  json_t *ins = json_object_get(pool, "inputs"), *in;
  m->model = sip__strdup(model);
  m->asked = asked ? sip__strdup(asked) : NULL;
  const char *v = jstr(pool, "version");
  m->version = v ? sip__strdup(v) : NULL;
  m->inputs = sip__calloc(json_array_size(ins) + 1, sizeof *m->inputs);
  if (!m->model || (v && !m->version) || (asked && !m->asked) || !m->inputs) goto fail;
  size_t i;
  json_array_foreach(ins, i, in) {
    sip_io_desc_t *d = &m->inputs[i];
    if (!(d->name = sip__strdup(jstr(in, "name") ? jstr(in, "name") : ""))) goto fail;
    m->n_inputs = i + 1;
    d->dtype = sip_dtype_from_name(jstr(in, "dtype"));
    json_t *shape = json_object_get(in, "shape");
    if (!json_is_array(shape) || json_array_size(shape) > SIP_MAX_RANK) {
      d->rank = -1;
      continue;
    }
    d->rank = (int)json_array_size(shape);
    for (int k = 0; k < d->rank; k++)
      d->dims[k] = (int64_t)json_integer_value(json_array_get(shape, (size_t)k));
  }
  return m;
fail:
  meta_free(m);
  return NULL;
}

static int meta_is(const meta_t *m, const char *model, const char *asked) {
  return !strcmp(m->model, model) && (asked ? m->asked && !strcmp(m->asked, asked) : !m->asked);
}

/* Metadata of a READY model (a reference for the caller: meta_unref), or
 * NULL (unknown, not ready, OOM). Entries describing an older set of pools
 * are replaced; requests still holding them keep them alive. */
static meta_t *meta_get(sip_http_t *h, const char *model, const char *asked) {
  uint64_t gen = sip_server_generation(h->s);
  pthread_mutex_lock(&h->cache_mu);
  meta_t **pp = &h->cache, *m;
  while ((m = *pp) && !meta_is(m, model, asked)) pp = &m->next;
  if (m && m->gen != gen) { /* the pools changed since: build it again */
    *pp = m->next;
    meta_unref(m);
    m = NULL;
  }
  if (m) atomic_fetch_add(&m->refs, 1);
  pthread_mutex_unlock(&h->cache_mu);
  /* While draining, pools free their models: their I/O is no longer asked. */
  if (m || sip_server_draining(h->s)) return m;
  json_t *root = sip__server_info(h->s, SIP_INFO_POOLS), *pool = find_pool(root, model, asked);
  const char *st = pool ? jstr(pool, "state") : NULL;
  if (st && !strcmp(st, "READY")) m = meta_build(pool, model, asked, gen);
  json_decref(root);
  if (!m) return NULL;
  pthread_mutex_lock(&h->cache_mu);
  meta_t *old = h->cache;
  while (old && !(meta_is(old, model, asked) && old->gen == gen)) old = old->next;
  if (old) { /* another thread won the race */
    meta_free(m);
    m = old;
  } else {
    m->next = h->cache;
    h->cache = m;
  }
  atomic_fetch_add(&m->refs, 1); /* the caller's, or the cache's for a new entry */
  pthread_mutex_unlock(&h->cache_mu);
  return m;
}

/* ---- routing ----------------------------------------------------------- */

/* Splits "/v2/models/{m}[/versions/{v}][/{action}]" and the fixed paths. MHD
 * has already percent-decoded the path and removed the query. */
static route_kind_t route(const char *url, hreq_t *q) {
  if (!strcmp(url, "/v2/health/live")) return R_LIVE;
  if (!strcmp(url, "/v2/health/ready")) return R_READY;
  if (!strcmp(url, "/v2") || !strcmp(url, "/v2/")) return R_SERVER;
  if (!strcmp(url, "/metrics")) return R_METRICS;
  if (!strcmp(url, "/v2/models/stats")) return R_ALL_STATS;
  if (!strcmp(url, "/v2/repository/index")) return R_REPO_INDEX;
  static const char repo[] = "/v2/repository/models/";
  if (!strncmp(url, repo, sizeof repo - 1)) {
    /* The name is everything up to the last '/', checked by the engine, so
     * that a traversal attempt ("..", "a/b") is answered 400 with the reason
     * rather than a bare 404. */
    const char *name = url + sizeof repo - 1, *slash = strrchr(name, '/');
    if (!slash || slash == name) return R_NONE;
    route_kind_t k = !strcmp(slash, "/load") ? R_REPO_LOAD : !strcmp(slash, "/unload") ? R_REPO_UNLOAD
                                                                                        : R_NONE;
    if (k != R_NONE && !(q->model = sip__strndup(name, (size_t)(slash - name)))) return R_NONE;
    return k;
  }
  static const char pre[] = "/v2/models/";
  if (strncmp(url, pre, sizeof pre - 1)) return R_NONE;
  const char *seg[4];
  size_t len[4], n = 0;
  const char *p = url + sizeof pre - 1;
  while (n < 4) {
    const char *slash = strchr(p, '/');
    seg[n] = p;
    len[n] = slash ? (size_t)(slash - p) : strlen(p);
    if (!len[n]) return R_NONE;
    n++;
    if (!slash) break;
    p = slash + 1;
    if (n == 4) return R_NONE;
  }
  /* Names as the config allows them (pool names; version directory names
   * likewise): anything else cannot exist, and must not reach the logs. */
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < len[i]; j++)
      if (!sip__name_char(seg[i][j])) return R_NONE;
  if (len[0] > 128) return R_NONE;
  size_t action = 1;
  if (n >= 3 && len[1] == 8 && !memcmp(seg[1], "versions", 8)) {
    if (!(q->version = sip__strndup(seg[2], len[2]))) return R_NONE;
    action = 3;
  }
  if (!(q->model = sip__strndup(seg[0], len[0]))) return R_NONE;
  if (action == n) return R_MODEL;
  if (action + 1 != n) return R_NONE;
  static const struct {
    const char *name;
    route_kind_t kind;
  } actions[] = {{"ready", R_MODEL_READY}, {"infer", R_INFER}, {"config", R_CONFIG},
                 {"stats", R_STATS}};
  for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++)
    if (len[action] == strlen(actions[i].name) &&
        !memcmp(seg[action], actions[i].name, len[action]))
      return actions[i].kind;
  return R_NONE;
}

/* ---- GET endpoints ----------------------------------------------------- */

static enum MHD_Result health_ready(hreq_t *q) {
  sip_http_t *h = q->h;
  if (sip_server_draining(h->s))
    return send_error_msg(q->conn, 503, "server is draining: it answers requests in flight and "
                                        "accepts no new ones");
  json_t *r = sip__server_info(h->s, SIP_INFO_READY);
  if (!r) return send_error_msg(q->conn, 500, "out of memory");
  char loading[512] = "";
  const char *name;
  json_t *st;
  json_object_foreach(json_object_get(r, "pools"), name, st) {
    if (json_string_value(st) && !strcmp(json_string_value(st), "LOADING"))
      snprintf(loading + strlen(loading), sizeof loading - strlen(loading), "%s'%s'",
               loading[0] ? ", " : "", name);
  }
  int ready = json_is_true(json_object_get(r, "ready")) && !loading[0];
  json_decref(r);
  if (!ready) {
    char msg[600];
    snprintf(msg, sizeof msg, "server is not ready: models still loading: %s",
             loading[0] ? loading : "(starting)");
    return send_error_msg(q->conn, 503, msg);
  }
  return send_json(q->conn, 200, json_pack("{s:b}", "ready", 1));
}

static enum MHD_Result server_meta(hreq_t *q) {
  json_t *v = json_pack("{s:s,s:s,s:[s,s,s,s]}", "name", "sip", "version", sip_version(),
                        "extensions", "binary_tensor_data", "classification",
                        "model_configuration", "statistics");
  if (v && q->h->cfg->model_repository)
    json_array_append_new(json_object_get(v, "extensions"), json_string("model_repository"));
  return send_json(q->conn, 200, v);
}

/* Pipelines are "ensemble", Triton's platform for a graph of models. */
static const char *platform(json_t *pool) {
  if (is_pipeline(pool)) return "ensemble";
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

/* Model metadata and config need a loaded pool. */
static sip_error_t *need_loaded(json_t *pool, const char *model) {
  const char *st = jstr(pool, "state");
  if (st && (!strcmp(st, "READY") || !strcmp(st, "STOPPED"))) return NULL;
  if (st && !strcmp(st, "FAILED"))
    return sip_error_new(SIP_UNAVAILABLE, "model '%s' failed to load: %s", model,
                         jstr(pool, "error") ? jstr(pool, "error") : "unknown reason");
  return sip_error_new(SIP_UNAVAILABLE, "model '%s' is still loading", model);
}

static enum MHD_Result model_meta(hreq_t *q, int config) {
  /* The pools JSON lists each model's inputs and outputs, which a draining
   * server is freeing: answer from the status only from then on. */
  if (sip_server_draining(q->h->s))
    return send_error_msg(q->conn, 503, "server is draining: model metadata is unavailable");
  json_t *root = sip__server_info(q->h->s, SIP_INFO_POOLS), *pool = find_pool(root, q->model, q->version);
  sip_error_t *e = check_model(root, pool, q->model, q->version);
  if (!e) e = need_loaded(pool, q->model);
  if (e) {
    json_decref(root);
    return send_error(q->conn, e);
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
  } else if (is_pipeline(pool)) {
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
                    opts ? opts : json_null(), "model_path", json_object_get(pool, "model_path")
                                                                 ? json_object_get(pool, "model_path")
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
  return send_json(q->conn, 200, out);
}

static enum MHD_Result model_ready(hreq_t *q) {
  json_t *root = sip__server_info(q->h->s, SIP_INFO_STATUS), *pool = find_pool(root, q->model, q->version);
  sip_error_t *e = check_model(root, pool, q->model, q->version);
  const char *st = pool ? jstr(pool, "state") : NULL;
  if (!e && (!st || strcmp(st, "READY")))
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' is not ready: it is %s%s%s", q->model,
                      st ? st : "UNKNOWN", jstr(pool, "error") ? ": " : "",
                      jstr(pool, "error") ? jstr(pool, "error") : "");
  json_decref(root);
  if (e) return send_error(q->conn, e);
  return send_json(q->conn, 200, json_pack("{s:s,s:b}", "name", q->model, "ready", 1));
}

static json_t *stat_pair(json_t *stats, const char *key) {
  json_t *s = json_object_get(stats, key);
  return json_pack("{s:I,s:I}", "count", json_integer_value(json_object_get(s, "count")), "ns",
                   json_integer_value(json_object_get(s, "ns")));
}

/* Triton's statistics extension, from the status JSON's per-pool "stats". */
static enum MHD_Result stats(hreq_t *q, int all) {
  json_t *status = sip__server_info(q->h->s, SIP_INFO_STATUS);
  if (!status) return send_error_msg(q->conn, 500, "out of memory");
  if (!all) {
    sip_error_t *e = check_model(status, find_pool(status, q->model, q->version), q->model,
                                 q->version);
    if (e) {
      json_decref(status);
      return send_error(q->conn, e);
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
  return send_json(q->conn, 200, json_pack("{s:o}", "model_stats", list));
}

static enum MHD_Result metrics(hreq_t *q) {
  char *txt = sip__prometheus_text(q->h->s);
  if (!txt) return send_error_msg(q->conn, 500, "out of memory");
  return send_owned(q->conn, 200, "text/plain; version=0.0.4; charset=utf-8", txt, strlen(txt));
}

/* ---- inference --------------------------------------------------------- */

/* The completion, on an engine thread: hand the answer to the connection's
 * own thread. */
static void on_done(sip_response_t *resp, void *user) {
  hreq_t *q = user;
  q->resp = resp;
  q->resp_oom = !resp;
  /* MHD's resume takes its own lock, which orders the stores above before
   * the handler's reads on the daemon thread. */
  MHD_resume_connection(q->conn);
}

static int64_t parse_len(const char *s) {
  if (!s || !*s) return -2;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10) return -2;
    v = v * 10 + (*s - '0');
  }
  return v;
}

/* First call of an infer request: headers are in, the body is not. */
static enum MHD_Result infer_begin(hreq_t *q) {
  struct MHD_Connection *c = q->conn;
  size_t limit = q->h->cfg->http_max_body_bytes;
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  int64_t content_len = cl ? parse_len(cl) : -1;
  char msg[256];
  if (content_len > (int64_t)limit) {
    /* Refused before reading: MHD closes the connection after this answer. */
    snprintf(msg, sizeof msg,
             "request body of %lld bytes is larger than the server's limit of %zu bytes "
             "(server.http_max_body_bytes)",
             (long long)content_len, limit);
    q->refused = 1;
    return send_error_msg(c, 413, msg);
  }
  const char *hl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
  if (hl) {
    q->header_len = parse_len(hl);
    if (q->header_len < 0) {
      q->early = sip_error_new(SIP_INVALID_ARGUMENT,
                               "Inference-Header-Content-Length '%.40s' is not a byte count; "
                               "expected the length of the JSON header",
                               hl);
      return MHD_YES;
    }
  } else if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
    q->header_len = 0; /* raw binary: the whole body is the single input */
  } else {
    q->header_len = -1;
  }
  size_t hdr = q->header_len > 0 ? (size_t)q->header_len : 0;
  q->pad = (64 - hdr % 64) % 64;
  /* Sized from Content-Length, but only up to 1 MiB before any data has
   * come: an announced body is not memory a client has spent yet. */
  size_t first = content_len > 0 ? (size_t)content_len : 4096;
  q->cap = q->pad + (first < ((size_t)1 << 20) ? first : ((size_t)1 << 20));
  if (!(q->buf = sip__malloc(q->cap))) {
    q->refused = 1;
    return send_error_msg(c, 429, "out of memory");
  }
  return MHD_YES;
}

static enum MHD_Result infer_body(hreq_t *q, const char *data, size_t n) {
  size_t limit = q->h->cfg->http_max_body_bytes;
  if (n > limit - q->len) {
    /* Only a chunked body gets here (a Content-Length was checked first).
     * MHD cannot answer in the middle of a body: close the connection. */
    sip__log(SIP__LOG_WARN, "http request refused", "reason=\"chunked body over %zu bytes\"",
             limit);
    return MHD_NO;
  }
  if (q->pad + q->len + n > q->cap) {
    size_t cap = q->cap * 2 > q->pad + q->len + n ? q->cap * 2 : q->pad + q->len + n;
    uint8_t *b = sip__realloc(q->buf, cap);
    if (!b) return MHD_NO;
    q->buf = b;
    q->cap = cap;
  }
  memcpy(q->buf + q->pad + q->len, data, n);
  q->len += n;
  return MHD_YES;
}

static enum MHD_Result infer_start(hreq_t *q) {
  q->started = 1;
  /* The body becomes a refcounted buffer: binary inputs view it, so it
   * lives as long as the engine request does. */
  uint8_t *base = q->buf;
  q->buf = NULL;
  sip_buf_t *body = sip_buf_wrap(base, q->pad + q->len, sip__free, base);
  if (!body) return send_error_msg(q->conn, 429, "out of memory");
  const sip_io_desc_t *ins = NULL;
  size_t n_ins = 0;
  /* Fetched now, while the pool is certainly alive: raw requests need the
   * input's shape, and the answer names the version that served. */
  q->meta = meta_get(q->h, q->model, q->version);
  if (q->header_len == 0) {
    if (q->meta) {
      ins = q->meta->inputs;
      n_ins = q->meta->n_inputs;
    } else {
      /* Say why there is no metadata: unknown model, or not loaded. */
      sip_buf_unref(body);
      json_t *root = sip__server_info(q->h->s, SIP_INFO_STATUS), *pool = find_pool(root, q->model, q->version);
      sip_error_t *e = check_model(root, pool, q->model, q->version);
      if (!e) e = need_loaded(pool, q->model);
      json_decref(root);
      if (!e && sip_server_draining(q->h->s))
        e = sip_error_new(SIP_UNAVAILABLE, "server is draining: it accepts no new requests");
      return send_error(q->conn, e ? e : SIP_OOM());
    }
  }
  sip_error_t *e = sip__ks_decode(q->model, q->version, (const uint8_t *)base + q->pad, q->len,
                                  q->header_len, body, ins, n_ins, &q->ks);
  sip_buf_unref(body);
  if (e) return send_error(q->conn, e);
  sip_request_t *r = q->ks->req;
  q->ks->req = NULL; /* the engine owns it from here, even on error */
  /* Suspend before submitting, so the completion can resume at once. */
  MHD_suspend_connection(q->conn);
  e = sip_server_infer_async(q->h->s, r, on_done, q);
  if (e) {
    q->err = e;
    MHD_resume_connection(q->conn);
  }
  return MHD_YES;
}

typedef struct sent {
  sip__ks_body_t body;
  sip_response_t *resp; /* the outputs the body's segments point into */
} sent_t;

static void sent_free(void *cls) {
  sent_t *s = cls;
  sip__ks_body_clear(&s->body);
  sip_response_free(s->resp);
  sip__free(s);
}

/* Called again after the resume: encode and queue the answer. */
static enum MHD_Result infer_answer(hreq_t *q) {
  struct MHD_Connection *c = q->conn;
  if (q->err) {
    sip_error_t *e = q->err;
    q->err = NULL;
    return send_error(c, e);
  }
  if (q->resp_oom) return send_error_msg(c, 429, "out of memory");
  sip_response_t *resp = q->resp;
  q->resp = NULL;
  if (sip_response_code(resp) != SIP_OK) {
    enum MHD_Result r = send_error_msg(
        c, (unsigned)sip_code_http_status(sip_response_code(resp)), sip_response_message(resp));
    sip_response_free(resp);
    return r;
  }
  size_t n = sip_response_output_count(resp);
  const sip_tensor_t *outs[64];
  for (size_t i = 0; i < n && i < 64; i++) outs[i] = sip_response_output(resp, i);
  const char *version = q->version ? q->version : q->meta ? q->meta->version : NULL;
  sent_t *s = sip__calloc(1, sizeof *s);
  sip_error_t *e = s ? sip__ks_encode(q->ks, q->model, version, outs, n < 64 ? n : 64, &s->body)
                     : SIP_OOM();
  if (e) {
    sip__free(s);
    sip_response_free(resp);
    return send_error(c, e);
  }
  s->resp = resp;
  struct MHD_IoVec iov[65];
  unsigned niov = 0;
  iov[niov].iov_base = s->body.json;
  iov[niov++].iov_len = s->body.json_len;
  for (size_t i = 0; i < s->body.n_segs && niov < 65; i++) {
    iov[niov].iov_base = s->body.segs[i].data;
    iov[niov++].iov_len = s->body.segs[i].len;
  }
  struct MHD_Response *r = MHD_create_response_from_iovec(iov, niov, sent_free, s);
  if (!r) {
    sent_free(s);
    return MHD_NO;
  }
  if (s->body.binary) {
    char hl[32];
    snprintf(hl, sizeof hl, "%zu", s->body.json_len);
    MHD_add_response_header(r, "Inference-Header-Content-Length", hl);
  }
  return queue(c, 200, r, s->body.binary ? "application/octet-stream" : "application/json");
}

/* ---- model repository extension ----------------------------------------- */

static int is_repo(route_kind_t k) {
  return k == R_REPO_INDEX || k == R_REPO_LOAD || k == R_REPO_UNLOAD;
}

#define REPO_BODY_MAX ((size_t)64 << 10)

/* Collects a repository request's (small JSON) body. */
static enum MHD_Result repo_body(hreq_t *q, const char *data, size_t n) {
  if (q->early) return MHD_YES;
  if (q->len + n > REPO_BODY_MAX) {
    q->early = sip_error_new(SIP_INVALID_ARGUMENT,
                             "repository request body is larger than %zu bytes; expected a "
                             "small JSON object",
                             REPO_BODY_MAX);
    return MHD_YES;
  }
  if (q->len + n > q->cap) {
    size_t cap = q->len + n > 4096 ? q->len + n : 4096;
    uint8_t *b = sip__realloc(q->buf, cap);
    if (!b) return MHD_NO;
    q->buf = b;
    q->cap = cap;
  }
  memcpy(q->buf + q->len, data, n);
  q->len += n;
  return MHD_YES;
}

/* A load or unload finished (the loader thread): resume the connection,
 * whose thread answers. */
static void on_repo_done(sip_error_t *e, void *user) {
  hreq_t *q = user;
  q->err = e;
  MHD_resume_connection(q->conn);
}

static enum MHD_Result repo_start(hreq_t *q) {
  struct MHD_Connection *c = q->conn;
  if (q->early) {
    sip_error_t *e = q->early;
    q->early = NULL;
    return send_error(c, e);
  }
  json_error_t je;
  json_t *body = q->len ? json_loadb((const char *)q->buf, q->len, JSON_REJECT_DUPLICATES, &je)
                        : json_object();
  if (!body || !json_is_object(body)) {
    json_decref(body);
    return send_error(c, sip_error_new(SIP_INVALID_ARGUMENT,
                                       "repository request body is not a JSON object; expected "
                                       "{} or {\"ready\": true} (index)"));
  }
  if (q->kind == R_REPO_INDEX) {
    /* Triton's format: a JSON array of {name, version, state, reason}. */
    char *txt = sip_server_repository_index(q->h->s, json_is_true(json_object_get(body, "ready")));
    json_decref(body);
    json_t *root = txt ? json_loads(txt, 0, NULL) : NULL;
    sip_free(txt);
    json_t *models = json_incref(json_object_get(root, "models"));
    json_decref(root);
    if (!models) return send_error_msg(c, 500, "out of memory");
    return send_json(c, 200, models);
  }
  json_t *params = json_object_get(body, "parameters");
  int overrides = json_object_size(params) > 0;
  json_decref(body);
  if (overrides)
    return send_error(c, sip_error_new(SIP_UNIMPLEMENTED,
                                       "load parameters (a config override, model files) are not "
                                       "supported; the model loads from the repository as it "
                                       "is"));
  q->started = 1;
  /* Suspend before queuing, so the completion can resume at once. */
  MHD_suspend_connection(c);
  sip_error_t *e = q->kind == R_REPO_LOAD
                       ? sip_server_load_model_async(q->h->s, q->model, on_repo_done, q)
                       : sip_server_unload_model_async(q->h->s, q->model, on_repo_done, q);
  if (e) {
    q->err = e;
    MHD_resume_connection(c);
  }
  return MHD_YES;
}

/* Called again after the resume. Triton answers a load or unload 200 with
 * an empty body; {} keeps every answer JSON. */
static enum MHD_Result repo_answer(hreq_t *q) {
  if (q->err) {
    sip_error_t *e = q->err;
    q->err = NULL;
    return send_error(q->conn, e);
  }
  return send_json(q->conn, 200, json_object());
}

/* ---- the MHD callbacks ------------------------------------------------- */

/* Non-infer endpoints, and infer with the wrong method: answered once the
 * whole request is in (answering earlier makes MHD close the connection). */
static enum MHD_Result answer(hreq_t *q, const char *url, const char *method) {
  struct MHD_Connection *c = q->conn;
  int is_get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
  char msg[300];
  if (q->kind == R_NONE) {
    snprintf(msg, sizeof msg, "no such endpoint: %s %.200s", method, url);
    return send_error_msg(c, 404, msg);
  }
  int post_only = q->kind == R_INFER || is_repo(q->kind);
  if (post_only || !is_get) {
    snprintf(msg, sizeof msg, "%s is not allowed on %.200s; use %s", method, url,
             post_only ? "POST" : "GET");
    size_t len;
    char *body = sip__ks_error_json(msg, &len);
    if (!body) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, sip__free);
    if (!r) {
      sip__free(body);
      return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, post_only ? "POST" : "GET, HEAD");
    return queue(c, 405, r, "application/json");
  }
  switch (q->kind) {
  case R_LIVE: return send_json(c, 200, json_pack("{s:b}", "live", 1));
  case R_READY: return health_ready(q);
  case R_SERVER: return server_meta(q);
  case R_MODEL: return model_meta(q, 0);
  case R_CONFIG: return model_meta(q, 1);
  case R_MODEL_READY: return model_ready(q);
  case R_STATS: return stats(q, 0);
  case R_ALL_STATS: return stats(q, 1);
  case R_METRICS: return metrics(q);
  case R_INFER:
  case R_REPO_INDEX:
  case R_REPO_LOAD:
  case R_REPO_UNLOAD:
  case R_NONE: break;
  }
  return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  sip_http_t *h = cls;
  hreq_t *q = *con_cls;
  int infer = 0;
  if (!q) {
    if (!(q = sip__calloc(1, sizeof *q))) return MHD_NO;
    q->h = h;
    q->conn = c;
    q->header_len = -1;
    *con_cls = q;
    atomic_fetch_add(&h->inflight, 1);
    q->kind = route(url, q);
    if (q->kind == R_INFER && !strcmp(method, MHD_HTTP_METHOD_POST)) return infer_begin(q);
    return MHD_YES;
  }
  infer = q->kind == R_INFER && !strcmp(method, MHD_HTTP_METHOD_POST);
  int repo = is_repo(q->kind) && !strcmp(method, MHD_HTTP_METHOD_POST);
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0; /* bodies of other requests are ignored */
    if (repo) return repo_body(q, upload_data, n);
    if (!infer || q->started || q->refused || q->early) return MHD_YES;
    return infer_body(q, upload_data, n);
  }
  if (repo) return q->started ? repo_answer(q) : repo_start(q);
  if (!infer) return answer(q, url, method);
  if (q->refused) return MHD_YES;
  if (q->early) {
    sip_error_t *e = q->early;
    q->early = NULL;
    return send_error(c, e);
  }
  return q->started ? infer_answer(q) : infer_start(q);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)c;
  (void)toe;
  sip_http_t *h = cls;
  hreq_t *q = *con_cls;
  if (!q) return;
  *con_cls = NULL;
  sip__free(q->model);
  sip__free(q->version);
  sip__free(q->buf);
  meta_unref(q->meta);
  sip__ks_request_free(q->ks);
  sip_response_free(q->resp);
  sip_error_free(q->err);
  sip_error_free(q->early);
  sip__free(q);
  if (atomic_fetch_sub(&h->inflight, 1) == 1) {
    pthread_mutex_lock(&h->mu);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
  }
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  (void)c;
  (void)socket_context;
  sip_http_t *h = cls;
  atomic_fetch_add(&h->conns, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
}

/* ---- lifecycle --------------------------------------------------------- */

/* Binds "host:port" (IPv6 hosts in brackets) and listens. */
static sip_error_t *bind_listen(const char *hostport, int *fd_out, char *addr, size_t addr_n) {
  char host[260];
  const char *colon = strrchr(hostport, ':');
  if (!colon || (size_t)(colon - hostport) >= sizeof host)
    return sip_error_new(SIP_INVALID_ARGUMENT, "server.http '%s': expected HOST:PORT", hostport);
  const char *h0 = hostport, *h1 = colon;
  if (*h0 == '[' && h1 > h0 && h1[-1] == ']') h0++, h1--;
  memcpy(host, h0, (size_t)(h1 - h0));
  host[h1 - h0] = '\0';
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
  int rc = getaddrinfo(host, colon + 1, &hints, &res);
  if (rc)
    return sip_error_new(SIP_UNAVAILABLE, "server.http %s: cannot resolve '%s': %s", hostport,
                         host, gai_strerror(rc));
  int fd = -1, err = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1024)) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    char eb[128];
    return sip_error_new(SIP_UNAVAILABLE, "server.http %s: cannot listen: %s", hostport,
                         strerror_r(err, eb, sizeof eb));
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                    : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  snprintf(addr, addr_n, "http://%s%s%s:%d", strchr(host, ':') ? "[" : "", host,
           strchr(host, ':') ? "]" : "", port);
  *fd_out = fd;
  return NULL;
}

static void free_http(sip_http_t *h) {
  while (h->cache) {
    meta_t *m = h->cache;
    h->cache = m->next;
    meta_unref(m);
  }
  pthread_mutex_destroy(&h->cache_mu);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  sip__free(h);
}

static sip_error_t *http_start(sip_server_t *s, const void *options, void **out_) {
  const sip_config_t *cfg = options;
  sip_http_t **out = (sip_http_t **)out_;
  *out = NULL;
  sip_http_t *h = sip__calloc(1, sizeof *h);
  if (!h) return SIP_OOM();
  h->s = s;
  h->cfg = cfg;
  pthread_mutex_init(&h->cache_mu, NULL);
  pthread_mutex_init(&h->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&h->cv, &ca);
  pthread_condattr_destroy(&ca);
  int fd = -1;
  sip_error_t *e = bind_listen(cfg->http, &fd, h->address, sizeof h->address);
  if (e) {
    free_http(h);
    return e;
  }
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  struct MHD_OptionItem opts[] = {
      {MHD_OPTION_LISTEN_SOCKET, fd, NULL},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)CONN_MEMORY_LIMIT, NULL},
      {MHD_OPTION_CONNECTION_LIMIT, CONN_LIMIT, NULL},
      {MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S, NULL},
      {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h},
      {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h},
      {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL},
      {cfg->http_threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
       cfg->http_threads, NULL},
      {MHD_OPTION_END, 0, NULL},
  };
  h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_ARRAY, opts,
                          MHD_OPTION_END);
  if (!h->d) {
    close(fd);
    free_http(h);
    return sip_error_new(SIP_UNAVAILABLE, "server.http %s: libmicrohttpd failed to start",
                         cfg->http);
  }
  sip__log(SIP__LOG_INFO, "http listening", "address=%s threads=%d max_body_bytes=%zu",
           h->address, cfg->http_threads, cfg->http_max_body_bytes);
  *out = h;
  return NULL;
}

static void http_stop(void *state) {
  sip_http_t *h = state;
  if (!h) return;
  /* Stop accepting, then let answers already queued reach their clients
   * (bounded: a client that stopped reading must not hold shutdown). */
  MHD_socket lfd = MHD_quiesce_daemon(h->d);
  uint64_t until = sip__now_us() + STOP_GRACE_US;
  struct timespec ts = {(time_t)(until / 1000000), (long)(until % 1000000) * 1000};
  pthread_mutex_lock(&h->mu);
  while (atomic_load(&h->inflight) > 0)
    if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&h->mu);
  MHD_stop_daemon(h->d);
  if (lfd != MHD_INVALID_SOCKET) close(lfd);
  free_http(h);
}

static size_t http_address_count(void *state) {
  (void)state;
  return 1;
}

static const char *http_address(void *state, size_t i) {
  return i == 0 ? ((sip_http_t *)state)->address : NULL;
}

static void http_connections(void *state, sip_frontend_count_fn emit, void *ctx) {
  emit(ctx, "http", atomic_load(&((sip_http_t *)state)->conns));
}

const sip_frontend_vtable_t sip__frontend_http = {
    .name = "http",
    .start = http_start,
    .stop = http_stop,
    .address_count = http_address_count,
    .address = http_address,
    .connections = http_connections,
};
