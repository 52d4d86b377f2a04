/* sip — typed configuration, parsed from YAML (libyaml).
 *
 * Parsing is separate from the runtime: this module only turns text into the
 * structs below and validates them. Every error names file:line:column, the
 * key, what was wrong and what was expected. Unknown keys are errors.
 */
#ifndef SIP_CONFIG_H
#define SIP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/auth.h"
#include "core/core.h"
#include "sip/error.h"
#include "sip/backend.h"
#include "config/backend_catalog.h"

typedef enum sip__priority_level {
  SIP__PRIO_HIGH = 0,
  SIP__PRIO_MEDIUM = 1,
  SIP__PRIO_LOW = 2,
  SIP__PRIO_LEVELS = 3
} sip__priority_level_t;

/* server.log_level: one of SIP__LOG_* (src/core/core.h). */
typedef int sip__log_level_t;

typedef enum sip__padding {
  SIP__PAD_NONE = 0,           /* never pad: a fixed batch dim only takes exact batches */
  SIP__PAD_REPLICATE_LAST = 1, /* fill with copies of the last row */
  SIP__PAD_ZERO = 2,           /* fill with zeros */
} sip__padding_t;

typedef enum sip__timeout_action {
  SIP__TIMEOUT_REJECT = 0, /* an expired queued request is answered DEADLINE_EXCEEDED */
  SIP__TIMEOUT_DELAY = 1,  /* it loses its deadline and moves behind everything else */
} sip__timeout_action_t;

#define SIP__MAX_PREFERRED 16
#define SIP__MAX_CPUS 1024 /* cpu_affinity names logical CPUs 0..SIP__MAX_CPUS-1 */
#define SIP__MAX_SPECIFIC_VERSIONS 64

/* Which version directories of a repository model are served. */
typedef enum sip__version_policy {
  SIP__VERSIONS_LATEST = 0,   /* the `latest` highest numbers (default: 1) */
  SIP__VERSIONS_SPECIFIC = 1, /* the numbers listed */
  SIP__VERSIONS_ALL = 2,      /* every version directory */
} sip__version_policy_t;

typedef enum sip__model_control {
  SIP__MODEL_CONTROL_STARTUP = 0,  /* every repository model is loaded at start */
  SIP__MODEL_CONTROL_EXPLICIT = 1, /* repository models load only when asked */
} sip__model_control_t;

/* The control inputs of sequence batching, in config order. */
typedef enum sip__seq_control {
  SIP__SEQ_START = 0, /* 1 on a sequence's first request */
  SIP__SEQ_END,       /* 1 on its last */
  SIP__SEQ_READY,     /* 1 on every request */
  SIP__SEQ_CORRID,    /* the sequence id */
  SIP__SEQ_CONTROLS
} sip__seq_control_t;

/* One traffic level of elastic batching (seed 001). */
typedef struct sip__batch_level {
  int max_batch;      /* 0: level not configured */
  int64_t timeout_ms; /* how long a batch may wait to fill */
} sip__batch_level_t;

/* A pool's sla block (docs/sla.md): targets checked per window; a target
 * of 0 is not set. */
typedef struct sip__sla_config {
  int enabled;               /* the block is present (with at least one target) */
  double latency_p99_ms;     /* p99 of successful requests' latency must stay at or below */
  double availability;       /* successful / counted requests, a fraction 0..1 */
  double min_throughput_rps; /* successful requests per second must reach */
  int window_s;              /* window length, seconds */
  int horizon_windows;       /* compliance: good windows among the last this many */
} sip__sla_config_t;

/* A pool's autoscale block (docs/elastic.md, "Autoscaling"): sessions
 * between min and max, by utilisation (busy sessions / sessions averaged
 * over window_s) and optionally a forecast of the arrival rate. */
typedef struct sip__autoscale_config {
  int enabled;                 /* the section is present */
  int min_sessions;            /* 0..256; 0: an idle pool releases every session */
  int max_sessions;            /* 1..256, >= min_sessions */
  double scale_up_threshold;   /* utilisation at or above: more sessions (0 < x <= 1) */
  double scale_down_threshold; /* at or below: fewer (0 <= x < up) */
  int cooldown_s;              /* no scale-down this long after any change */
  int window_s;                /* utilisation averaged over this many seconds */
  double target_p99_ms;        /* p99 over window_s above this: scale up; 0: none */
  int predictive;              /* scale ahead of the forecast arrival rate */
  int history_window_s;        /* seconds of per-second arrival counts the forecast fits */
  int prediction_horizon_s;    /* seconds ahead it forecasts */
} sip__autoscale_config_t;

#define SIP__MAX_WEBHOOKS 8

/* The top-level alerts block (docs/sla.md): when SLA alerts fire and
 * resolve, and where they are posted. */
typedef struct sip__alerts_config {
  int warning_after;  /* consecutive bad windows before a warning; 0: no warnings */
  int critical_after; /* consecutive bad windows before a critical alert; 0: none */
  int resolve_after;  /* consecutive good windows before an alert resolves */
  char **webhooks;    /* http:// or https:// URLs, owned */
  size_t n_webhooks;
  int timeout_ms;     /* one POST attempt at most */
  int retries;        /* attempts after the first */
  int backoff_ms;     /* wait before the first retry, doubled each time */
  int queue_size;     /* alerts waiting per webhook at most; more are dropped */
} sip__alerts_config_t;

/* One step of a pool's preprocess block: a single-input transform. */
typedef struct sip__preprocess_step {
  char *op;          /* transform operation (docs/transforms.md), e.g. "resize" */
  sip_kv_t *options; /* its options; keys and values owned */
  size_t n_options;
} sip__preprocess_step_t;

/* One input_shapes entry of a seed-format model list (model_list.c). */
typedef enum sip__input_format {
  SIP__FORMAT_ANY = 0, /* not written */
  SIP__FORMAT_NCHW,
  SIP__FORMAT_NHWC,
} sip__input_format_t;
typedef struct sip__declared_input {
  char *name;                  /* owned */
  int rank;
  int64_t dims[SIP_MAX_RANK];  /* -1: any size */
  sip_dtype_t dtype;
  int format;                  /* sip__input_format_t, recorded */
} sip__declared_input_t;

typedef struct sip__pool_config {
  char *name;
  char *model_path;     /* as written, resolved against the config file's directory; NULL for builtin */
  char *backend;        /* a backend's name (default: the one claiming model_path) */
  const char *platform; /* its platform (static storage; repository models only, else NULL) */
  int pool_size;        /* 1..256, default 1 */
  sip__priority_level_t priority; /* default medium */
  int64_t max_memory_mb;         /* 0: unlimited; else 1..1048576 */
  int max_compute_percent;       /* 0: unlimited; else 1..100 */
  /* dynamic_batching: max_batch_size 0 = no batching. */
  int max_batch_size;              /* rows per execution, 1..65536 */
  int64_t max_queue_delay_us;      /* how long a batch may wait to fill, 0..60 s */
  int preferred_batch_sizes[SIP__MAX_PREFERRED];
  size_t n_preferred;
  int padding_strategy;            /* sip__padding_t */
  /* queue */
  int64_t queue_max_size;          /* default 10000; 0: unbounded */
  int64_t default_timeout_ms;      /* for requests without one; 0: none */
  int timeout_action;              /* sip__timeout_action_t */
  int64_t ageing_ms;               /* a waiting request rises one level per ageing_ms; 0: off */
  /* batch_strategies (elastic batching): levels low, medium, high by arrival rate. */
  sip__batch_level_t batch_levels[3];
  double rate_thresholds[2];       /* req/s: < [0] low, < [1] medium, else high */
  sip_kv_t *backend_options;     /* keys and values owned (strdup'd) */
  size_t n_backend_options;
  /* preprocess (docs/preprocess.md): steps applied in order to one input of
   * each request, on the pool's executor, before the model; none: empty. */
  char *preprocess_input;            /* the model input they make; NULL: its only input */
  sip__preprocess_step_t *preprocess; /* owned */
  size_t n_preprocess;
  int preprocess_fixed;              /* the steps give one size whatever the image (resize
                                        to a size, letterbox): any two images can batch */
  /* cpu_affinity: the logical CPUs the pool's session threads (and its own
   * intra-op threads) run on, as a bit set; n_cpus 0: wherever the OS
   * places them. */
  uint64_t cpu_mask[SIP__MAX_CPUS / 64];
  int n_cpus;
  /* idempotency (docs/idempotency.md): requests carrying a key run once. */
  int idem_enabled;              /* requests with a client id are keyed too */
  int64_t idem_ttl_s, idem_max_entries, idem_max_bytes;
  int line;                      /* where the pool's entry starts, for messages */
  /* version_policy (repository models' config.yaml only). */
  int version_policy;            /* sip__version_policy_t */
  int version_latest;            /* latest: N, 1..1024 */
  int64_t versions[SIP__MAX_SPECIFIC_VERSIONS]; /* specific: [...], increasing */
  size_t n_versions;
  /* Availability (docs/availability.md). */
  int64_t hang_timeout_ms;          /* an execute running longer fails its session; 0: off */
  int64_t health_check_interval_ms; /* session heartbeat period; 0: off */
  int failover_strategy;            /* sip__failover_t */
  int failover_max_retries;         /* retries on other sessions of the pool, 0..16 */
  char *fallback_pool;              /* tried after the retries; NULL: none */
  int standby_enabled;              /* hot_standby.enabled */
  int standby_count;                /* hot_standby.standby_count, 0..16 */
  int64_t standby_health_ms;        /* hot_standby.health_check_interval_ms */
  int isolation;                    /* sip__isolation_t */
  int64_t idle_spin_us;             /* poll window after work, 0..1000 us; -1: absent */
  int residency;                    /* sip__residency_t (docs/elastic.md) */
  /* sequence_batching (docs/sequences.md): requests of one sequence id run
   * in order on the session the sequence is bound to. */
  int sequence_batching;         /* the section is present */
  int64_t seq_idle_timeout_us;   /* a sequence with no request for this long is released */
  int seq_max_sequences;         /* sequences bound at once; 0: pool_size */
  int64_t seq_max_backlog;       /* new sequences waiting for a free slot at most */
  char *seq_control[SIP__SEQ_CONTROLS]; /* model inputs the server fills (start, end, ready,
                                           corrid); NULL: none */
  sip__sla_config_t sla;         /* sla (docs/sla.md) */
  sip__autoscale_config_t autoscale; /* autoscale (docs/elastic.md) */
  int response_cache;            /* answers kept in the server's response cache */
  /* A seed-format model list entry (docs/seed-models.md; model_list.c):
   * what it declares about the model, checked when the model loads. */
  char *model_type;                 /* a label ("detection"); NULL: none */
  sip__declared_input_t *declared_inputs; /* input_shapes, owned; none: not declared */
  size_t n_declared_inputs;
  int output_nums;                  /* outputs the model must have; 0: not declared */
} sip__pool_config_t;

/* residency: absent (pinned for the config file's pools; on_demand for
 * repository models when server.memory_budget_mb is set), pinned (loaded at
 * start, never evicted), on_demand (loaded at its first request, evicted when
 * idle and its memory is wanted). */
typedef enum sip__residency {
  SIP__RESIDENCY_DEFAULT = 0,
  SIP__RESIDENCY_PINNED,
  SIP__RESIDENCY_ON_DEMAND
} sip__residency_t;

typedef enum sip__isolation { SIP__ISOLATION_THREAD = 0, SIP__ISOLATION_PROCESS } sip__isolation_t;

typedef enum sip__failover { SIP__FAILOVER_NONE = 0, SIP__FAILOVER_RETRY, SIP__FAILOVER_FALLBACK } sip__failover_t;

/* One stage of a pipeline (pipeline_sessions[].stages[]). */
typedef struct sip__stage_config {
  char *name;
  int is_transform;       /* type: transform */
  char *pool;             /* model stage: the pool it runs on (an implicit one for model_path) */
  char *operation;        /* transform stage */
  sip_kv_t *options;      /* transform options: the stage's other keys, lists as "a,b" */
  size_t n_options;
  sip_kv_t *input_mapping; /* input name -> "pipeline.<input>" or "<stage>.<output>" */
  size_t n_input_mapping;
  char **output_filter;   /* outputs kept (all when none) */
  size_t n_output_filter;
  char *when;             /* condition (docs/expressions.md); NULL: always */
  int line;
} sip__stage_config_t;

typedef struct sip__pipeline_config {
  char *name;
  sip__stage_config_t *stages;
  size_t n_stages;
  char *early_exit_condition; /* NULL: none */
  char **outputs;             /* "stage.output" the pipeline returns; none: every sink's outputs */
  size_t n_outputs;
  uint32_t *stage_timeout_ms; /* per stage in stage order (0: none); a request's pipeline_config overrides */
  size_t n_stage_timeout_ms;
  int line;
} sip__pipeline_config_t;

/* server.response_cache (docs/response_cache.md; src/config/response_cache.c). */
typedef enum sip__rcache_backend { SIP__RCACHE_MEMORY = 0, SIP__RCACHE_REDIS } sip__rcache_backend_t;
typedef struct sip__rcache_config {
  int backend;          /* sip__rcache_backend_t, default memory */
  size_t max_bytes;     /* memory: bytes of kept answers, default 64 MiB */
  char *redis_address;  /* redis: "HOST:PORT"; NULL: 127.0.0.1:6379 */
  int redis_ttl_s;      /* redis: SET EX seconds, 0: none */
  int redis_timeout_ms; /* redis: connect and command timeout */
} sip__rcache_config_t;

/* The top-level tracing block (docs/tracing.md). */
typedef struct sip__tracing_config {
  char *otlp_endpoint;  /* "http://host:port/v1/traces"; NULL: no export (tracing off) */
  double sample_ratio;  /* 0..1, the share of requests without a caller's context sampled */
  int sample_ratio_set; /* sample_ratio was written (default 1) */
  char *service_name;   /* service.name of the spans; NULL: "sip" */
  int max_queue;        /* finished traces waiting for the exporter; more are dropped */
  int batch_traces;     /* traces per POST */
  int timeout_ms;       /* one POST's limit */
  int flush_ms;         /* a batch leaves this long after its first trace came, or when full */
} sip__tracing_config_t;

typedef struct sip__config {
  char *path;                 /* the file it came from ("<string>" for text) */
  char **endpoints;           /* "ipc:///p", "unix:///p", "tcp://host:port" */
  size_t n_endpoints;         /* default: one, ipc:///tmp/sip_service.sock */
  sip_engine_settings_t engine; /* server.intra_op_threads, inter_op_threads, allow_spinning */
  size_t max_frame_bytes;     /* server.max_frame_bytes, default 256 MiB, 1 KiB..4 GiB */
  size_t max_unsent_bytes;    /* server.max_unsent_bytes, default 16 MiB, 4 KiB..4 GiB */
  int max_connections;        /* server.max_connections (native), default 1024 */
  int frame_timeout_ms;       /* server.frame_timeout_ms, default 30000, 0: never */
  size_t max_receive_bytes;   /* server.max_receive_bytes, all native connections, default 1 GiB */
  size_t max_connection_receive_bytes; /* server.max_connection_receive_bytes, default 512 MiB */
  int http_max_connections;   /* server.http_max_connections, default 1000 */
  int http_max_connections_per_ip; /* server.http_max_connections_per_ip, default 256, 0: none */
  int http_header_timeout_ms; /* server.http_header_timeout_ms, default 30000 */
  sip__log_level_t log_level;  /* server.log_level: debug|info|warn|error, default info */
  int log_format;              /* server.log_format: SIP__LOG_TEXT or SIP__LOG_JSON */
  char *http;                 /* server.http "host:port" (KServe v2 HTTP front-end); NULL: off */
  size_t http_max_body_bytes; /* server.http_max_body_bytes, default 64 MiB, 1 KiB..4 GiB */
  int http_threads;           /* server.http_threads, 1..64, default 2 */
  char *grpc;                 /* server.grpc "host:port" (KServe v2 gRPC front-end); NULL: off */
  size_t grpc_max_message_bytes; /* server.grpc_max_message_bytes, default 64 MiB */
  int grpc_threads;           /* server.grpc_threads, 1..64, default 1 */
  char *dashboard;            /* server.dashboard "host:port" (the dashboard alone); NULL: off */
  int execution_slots;        /* server.execution_slots, 0 = number of cores */
  char *model_repository;     /* server.model_repository, resolved; NULL: none */
  int model_control;          /* server.model_control: sip__model_control_t */
  int drain_timeout_ms;       /* server.drain_timeout_ms, 0..3600000, default 30000 */
  int drain_delay_ms;         /* server.drain_delay_ms, 0..600000, default 0: unready, serving */
  char *state_dir;            /* server.state_dir, resolved; NULL: no checkpoint */
  int allow_fault_injection;  /* server.allow_fault_injection (docs/availability.md) */
  int strict_readiness;       /* server.strict_readiness: ready only when every model is READY */
  int64_t memory_budget_mb;   /* server.memory_budget_mb: MiB; -1: auto; 0: none (docs/elastic.md) */
  /* Security settings (docs/security.md; config_security.c). */
  sip__auth_t auth;           /* server.auth: tokens per API group; none: open */
  char *tls_cert_file;        /* server.tls.cert_file, resolved; NULL: plain HTTP/gRPC */
  char *tls_key_file;         /* server.tls.key_file, resolved */
  int socket_mode;            /* server.socket_mode, default 0600 */
  char *socket_owner;         /* server.socket_owner: user name or uid; NULL: the process's */
  char *socket_group;         /* server.socket_group: group name or gid; NULL: the process's */
  char **allowed_hosts;       /* server.allowed_hosts; NULL: the defaults (docs/security.md) */
  size_t n_allowed_hosts;
  sip__pool_config_t *pools;
  size_t n_pools;
  sip__pipeline_config_t *pipelines; /* pipeline_sessions[] */
  size_t n_pipelines;
  sip__alerts_config_t alerts; /* alerts (docs/sla.md) */
  sip__tracing_config_t tracing; /* tracing: (src/config/tracing.c) */
  sip__rcache_config_t response_cache; /* server.response_cache (src/config/response_cache.c) */
  struct {
    int triton_names; /* metrics.triton_names: Triton's nv_* families on /metrics, default 1 */
  } metrics;          /* metrics: (src/config/metrics.c; docs/metrics.md) */
} sip__config_t;

/* 1 when two pool configs ask for the same pool: every setting equal (the
 * `line` where it was written aside). A config reload keeps such a pool
 * running untouched. */
int sip__config_pool_same(const sip__pool_config_t *a, const sip__pool_config_t *b);
/* 1 when two configs have the same pipeline_sessions (names, stages and
 * their wiring, conditions, outputs). */
int sip__config_pipelines_same(const sip__config_t *x, const sip__config_t *y);
/* 1 when the security settings (auth tokens, tls, socket mode and owner,
 * allowed_hosts) of two configs are the same (config_security.c). */
int sip__config_security_same(const sip__config_t *x, const sip__config_t *y);

/* Parses and validates a YAML file / a YAML string. On success *out is owned
 * by the caller (sip__config_free). `name` labels the text in messages.
 * `backends` is the table backend names and capabilities are checked
 * against (the server passes sip__backend_catalog()). */
/* Replaces the listening addresses of a loaded config (the server
 * options' overrides: sipd --http / --grpc / --endpoint, SIP_HTTP,
 * SIP_GRPC): `http`, `grpc` (NULL: kept) and `endpoints` (n 0: kept), each
 * checked against the grammar server.http and server.endpoints have.
 * INVALID_ARGUMENT names the address, what is wrong and what is expected. */
sip_error_t *sip__config_set_addresses(sip__config_t *cfg, const char *http, const char *grpc,
                                       const char *const *endpoints, size_t n);
sip_error_t *sip__config_load_file(const char *path, const sip__backend_catalog_t *backends,
                                   sip__config_t **out);
sip_error_t *sip__config_load_string(const char *yaml, size_t len, const char *name,
                                     const char *base_dir, const sip__backend_catalog_t *backends,
                                     sip__config_t **out);
void sip__config_free(sip__config_t *cfg);

/* Parses a model repository's <model>/config.yaml: the settings of one pool
 * (every session_pools key but name and model_path, plus version_policy),
 * with FILE:LINE:COL errors. `path` NULL (no config.yaml): all defaults.
 * The pool is named `name` and serves `model_path` (both copied). On
 * success *out is owned by the caller (sip__config_pool_free). */
sip_error_t *sip__config_load_model(const char *path, const char *name, const char *model_path,
                                    const sip__backend_catalog_t *backends,
                                    sip__pool_config_t **out);
/* Reads a whole config file (at most 16 MiB; owned, *len bytes). Errors:
 * NOT_FOUND naming the file (cannot open or read it), INVALID_ARGUMENT
 * (larger than the limit). */
sip_error_t *sip__config_read_file(const char *path, char **buf, size_t *len);
/* The same from YAML text (len bytes) in place of a file; `source` names
 * it in FILE:LINE:COL messages (a config.yaml made from config.pbtxt). */
sip_error_t *sip__config_load_model_text(const char *text, size_t len, const char *source,
                                         const char *name, const char *model_path,
                                         const sip__backend_catalog_t *backends,
                                         sip__pool_config_t **out);
/* Frees a pool config from sip__config_load_model; NULL is a no-op. */
void sip__config_pool_free(sip__pool_config_t *p);

/* A Triton model config (JSON) given with a repository load, mapped onto
 * the model's pool settings (src/config/model_override.c; docs/http.md). */
typedef struct sip__model_override sip__model_override_t;
/* Parses `text` for model `model`. INVALID_ARGUMENT naming the field that is
 * wrong or unsupported and what was expected. */
sip_error_t *sip__model_override_parse(const char *text, size_t len, const char *model,
                                       sip__model_override_t **out);
void sip__model_override_free(sip__model_override_t *o);
/* The config in canonical form ("" for NULL): part of a version's identity. */
const char *sip__model_override_text(const sip__model_override_t *o);
/* Applies the version_policy only (to choose versions before loading). */
void sip__model_override_versions(const sip__model_override_t *o, sip__pool_config_t *pc);
/* Applies every setting to `pc` and checks the result (batch sizes against
 * max_batch_size...). NULL `o`: nothing. */
sip_error_t *sip__model_override_apply(const sip__model_override_t *o, sip__pool_config_t *pc);
/* Checks declared inputs (io[0]) and outputs (io[1]) against the loaded
 * model's; `batched`: the pool batches (dims may leave out dim 0). */
sip_error_t *sip__model_override_check_io(const sip__model_override_t *o,
                                          const sip_io_desc_t *const io[2], const size_t n[2],
                                          int batched);

/* Checks what a seed-format model list entry declares (input_shapes:
 * name, shape, dtype; output_nums) against the loaded model's inputs and
 * outputs (all borrowed; outs NULL: outputs not checked). NULL when it
 * fits or nothing is declared; else FAILED_PRECONDITION naming the input,
 * what the model has and what the list declares (model_list.c). */
sip_error_t *sip__config_check_declared_io(const sip__pool_config_t *c, const sip_io_desc_t *ins,
                                           size_t n_in, const sip_io_desc_t *outs, size_t n_out);

/* Writes the configuration reference (docs/config.md) as Markdown, from
 * the parser's tables. 0, or -1 when writing failed. */
int sip__config_doc_markdown(FILE *out);
/* Writes the reference's backends section: each backend of `b`, its
 * platform, model files and option table. 0, or -1 when writing failed. */
int sip__config_doc_backends(FILE *out, const sip__backend_catalog_t *b);

/* "high" | "medium" | "low" */
const char *sip__priority_name(sip__priority_level_t p);

#endif
