/* sip — introspection for the layers above the server (front-ends): the
 * document sip_server_info_json sends, as jansson values. */
#ifndef SIP_SERVER_INTROSPECT_H
#define SIP_SERVER_INTROSPECT_H

#include <jansson.h>

#include "config/config.h"
#include "core/metrics.h"
#include "core/settings.h"
#include "core/shm.h"
#include "sip/backend.h"
#include "sip/server.h"

/* sip_server_info_json's document itself (owned; NULL for an unknown kind),
 * for the modules that read it rather than send it. */
json_t *sip__server_info(sip_server_t *s, int kind);

/* The server's system shared memory regions (KServe/Triton's extension),
 * one set shared by the HTTP and gRPC front-ends; lives as long as `s`. */
sip__shm_set_t *sip__server_shm(sip_server_t *s);
/* The server's trace settings (Triton's trace extension), shared by the
 * HTTP and gRPC front-ends; lives as long as `s`. */
sip__trace_set_t *sip__server_trace(sip_server_t *s);

/* Checks one parameter of a Triton repository request, for every
 * front-end: an unload takes only unload_dependents (a boolean), a load only
 * config (a model config as JSON text); "file:<path>" model files are
 * refused. `typed`: the value has the type asked for; `bool_word` and
 * `text_word` name those types in the front-end's terms ("a boolean",
 * "a bool_param"). INVALID_ARGUMENT saying what is wrong; NULL when good. */
sip_error_t *sip__repo_parameter_check(int load, const char *key, int typed,
                                       const char *bool_word, const char *text_word);

/* The server's memory, measured (memory.c; docs/elastic.md "Memory"). */
typedef struct sip__server_memory {
  uint64_t resident; /* the process's resident bytes now */
  uint64_t models;   /* what the pools in service measured at load (memory_bytes summed) */
  uint64_t budget;   /* server.memory_budget_mb in bytes; 0: none */
  int budget_auto;   /* memory_budget_mb: auto */
  /* What models may take in all (ModelMesh's capacity): the budget when
   * set; else the cgroup's limit less what the process holds beside its
   * models; else MemAvailable plus what the models hold. */
  uint64_t capacity;
} sip__server_memory_t;
void sip__server_memory(sip_server_t *s, sip__server_memory_t *out);
/* The same as the status document's "memory" object (owned). */
json_t *sip__server_memory_json(sip_server_t *s);

/* Triton's per-model statistics, typed. */
typedef struct sip__model_stats {
  uint64_t inference_count, execution_count, last_inference_ms;
  sip__stat_read_t success, fail, queue, compute_input, compute_infer, compute_output;
  uint64_t memory_bytes;
} sip__model_stats_t;

/* A model in service as front-ends see it, typed: a pool (one version of a
 * model) or a pipeline. Borrowed pointers stay valid until
 * sip__server_models_free. */
typedef struct sip__model_view {
  const char *name;
  const char *version;  /* NULL: unversioned, or a pipeline */
  int is_pipeline;
  int is_default;       /* the version asked for when none is named */
  const char *state;    /* "LOADING", "READY", "FAILED", "STOPPED", "UNLOADED" */
  int loaded;           /* READY or STOPPED: inputs and outputs are known */
  const char *error;    /* why FAILED, else NULL */
  const char *platform; /* the backend's KServe platform; "ensemble" for pipelines */
  const char *model_path;                     /* pools: the file loaded, else the config's */
  const sip__pool_config_t *pool_cfg;         /* pools: their settings; else NULL */
  /* pools: size and quotas now (pool_cfg's, or as changed at run time) */
  int pool_size, max_compute_percent;
  int64_t max_memory_mb;
  const sip__pipeline_config_t *pipeline_cfg; /* pipelines: their stages; else NULL */
  const sip_io_desc_t *inputs, *outputs;      /* when loaded */
  size_t n_inputs, n_outputs;
  sip__model_stats_t stats;
  void *held_; /* the reference that keeps the pool alive */
} sip__model_view_t;

/* Every model in service: the pools (a retired version still draining is
 * not listed), then the pipelines once built. *n set; NULL when there are
 * none or out of memory. */
sip__model_view_t *sip__server_models(sip_server_t *s, size_t *n);
void sip__server_models_free(sip__model_view_t *v, size_t n);
/* The view serving `name` and `version` (NULL: the default version; a
 * pipeline only without a version), or NULL. */
const sip__model_view_t *sip__model_views_find(const sip__model_view_t *v, size_t n,
                                               const char *name, const char *version);

/* The view serving `model` (`version`; NULL: the default one) among `v`
 * (sip__server_models) in *out, or the engine's NOT_FOUND (UNAVAILABLE
 * when the model changed between the snapshot and the check). For every
 * front-end. */
sip_error_t *sip__model_views_lookup(sip_server_t *s, const sip__model_view_t *v, size_t n,
                                     const char *model, const char *version,
                                     const sip__model_view_t **out);
/* UNAVAILABLE unless the model is loaded (READY or STOPPED): what model
 * metadata and config need. */
sip_error_t *sip__model_view_need_loaded(const sip__model_view_t *m);

/* NULL when `name` (`version`; NULL: the default) is served, else the
 * NOT_FOUND every front-end answers with (the engine's one wording). */
sip_error_t *sip__server_model_check(sip_server_t *s, const char *name, const char *version);

/* How many models hold readiness back (readiness.c): those still loading,
 * and with server.strict_readiness those FAILED; `buf` (may be NULL) gets
 * them as "'name' still loading, 'other' FAILED: reason". */
size_t sip__server_unready(sip_server_t *s, char *buf, size_t cap);
/* 1 once a drain was asked for (server.c): readiness is false; while
 * server.drain_delay_ms lasts requests are still served
 * (sip_server_draining is 0 until the drain proper begins). */
int sip__server_leaving(sip_server_t *s);

/* The front-ends, as metrics and logs name them. */
typedef enum { SIP__PROTOCOL_HTTP, SIP__PROTOCOL_GRPC, SIP__PROTOCOL_NATIVE, SIP__PROTOCOLS } sip__protocol_t;
/* Notes a request refused before it reached a model (rejections.c): its
 * body or message could not be decoded (`malformed`), or `e` refused what
 * it asked for while decoding (a wrong datatype, shape or parameter; an
 * unknown model). Counted in sip_requests_rejected_total{model, protocol,
 * reason} — model: the name asked for when the server serves it, else
 * "unknown"; reason: malformed, invalid, unknown_model, too_large,
 * unauthorized — and logged at info with a rate limit. Borrows everything;
 * thread-safe; NULL `s` or `e` is fine. */
void sip__server_note_rejected(sip_server_t *s, sip__protocol_t protocol, const char *model,
                               int malformed, const sip_error_t *e);
/* Each counted row, under the table's lock (prometheus.c). */
typedef void (*sip__rejection_fn)(void *ctx, const char *model, const char *protocol,
                                  const char *reason, uint64_t n);
void sip__rejections_each(sip_server_t *s, sip__rejection_fn fn, void *ctx);

#endif
