/* sip — the in-process engine API (libsip).
 *
 * Lifecycle: sip_server_options_new → setters → sip_server_new → infer …
 * → sip_server_free. Pools load in the background after sip_server_new
 * returns; sip_server_ready() tells when every pool has finished loading
 * (READY or FAILED). A pool that fails to load is reported, never fatal.
 */
#ifndef SIP_SERVER_H
#define SIP_SERVER_H

#include "sip/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sip/error.h"
#include "sip/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sip_server sip_server_t;
typedef struct sip_server_options sip_server_options_t;
typedef struct sip_request sip_request_t;
typedef struct sip_response sip_response_t;

/* Runtime version of this API ("0.1.0") and its number (major*10000 + minor*100 + patch). */
SIP_API const char *sip_version(void);
SIP_API int sip_api_version(void);

/* ---- options ---- */
/* Returns owned options (NULL when out of memory). */
SIP_API sip_server_options_t *sip_server_options_new(void);
SIP_API void sip_server_options_free(sip_server_options_t *o);
/* Config from a YAML file (copied path). */
SIP_API sip_error_t *sip_server_options_set_config_file(sip_server_options_t *o, const char *path);
/* Config from YAML text; relative model paths resolve against base_dir (NULL: cwd). */
SIP_API sip_error_t *sip_server_options_set_config_string(sip_server_options_t *o, const char *yaml,
                                                  const char *base_dir);
/* Whether to open the config's endpoints (default 1). Embedders that only
 * call sip_server_infer set 0. */
SIP_API void sip_server_options_set_listen(sip_server_options_t *o, int listen);
/* Load pools synchronously inside sip_server_new (default 0: in the background). */
SIP_API void sip_server_options_set_wait_for_load(sip_server_options_t *o, int wait);
/* Listening addresses that replace the config's server.http, server.grpc
 * and server.endpoints (every endpoint added replaces the config's list).
 * Copied. Errors: INVALID_ARGUMENT for an empty address; an address the
 * config's grammar refuses makes sip_server_new fail with INVALID_ARGUMENT
 * naming it. */
SIP_API sip_error_t *sip_server_options_set_http_address(sip_server_options_t *o, const char *address);
SIP_API sip_error_t *sip_server_options_set_grpc_address(sip_server_options_t *o, const char *address);
SIP_API sip_error_t *sip_server_options_add_endpoint(sip_server_options_t *o, const char *url);

/* ---- server ---- */
/* Parses and validates a config file without loading or serving anything
 * (sipd --check-config), and checks that every model file or directory it
 * names exists and can be read. On success *summary (free with sip_free)
 * tells what it holds: "3 pools, 2 endpoints, model repository /srv/models".
 * Errors name the file, line and column of the problem; NOT_FOUND lists
 * every model path that cannot be read, and why. */
SIP_API sip_error_t *sip_config_check_file(const char *path, char **summary);
/* sip_config_check_file, then loads every pool and pipeline (nothing
 * listens) and frees them again (sipd --check-config FILE --load). On
 * success *summary (sip_free) says how many loaded. FAILED_PRECONDITION
 * lists each model that failed to load with its reason. */
SIP_API sip_error_t *sip_config_check_load(const char *path, char **summary);

/* Parses the config, starts listeners and pool loading. Errors: bad config
 * (INVALID_ARGUMENT with file:line:col), an endpoint that cannot be opened
 * (UNAVAILABLE naming it). Borrows `o`. */
SIP_API sip_error_t *sip_server_new(const sip_server_options_t *o, sip_server_t **out);
/* Drains the server and returns once no admitted request is left:
 * readiness turns false on every front-end at once (sip_server_ready 0);
 * with server.drain_delay_ms set, a server that serves keeps admitting
 * requests for that long first (so that load balancers see it unready and
 * stop sending); then (sip_server_draining 1) new requests and repository loads are refused
 * with UNAVAILABLE, and the requests already admitted (running or queued)
 * may finish for `timeout_ms` (negative: the config's
 * server.drain_timeout_ms); then what is still queued is answered
 * UNAVAILABLE (executions already running complete). Front-ends stay up, so
 * every answer is delivered; sip_server_free closes them. A second call
 * returns at once. Must not be called from a completion callback. */
SIP_API void sip_server_drain(sip_server_t *s, int timeout_ms);
/* Drains (sip_server_drain with server.drain_timeout_ms, unless a drain was
 * done), stops the front-ends, frees all. NULL is a no-op. Must not be
 * called from a completion callback. */
SIP_API void sip_server_free(sip_server_t *s);
/* 1 when every pool has finished loading, no drain was asked for and, with
 * server.strict_readiness (the default), every pool and pipeline is READY
 * (none FAILED). Thread-safe. */
SIP_API int sip_server_ready(sip_server_t *s);
/* Number of open listeners and their addresses as "unix:///p" / "tcp://h:port"
 * (with the real port when 0 was configured). Borrowed strings. */
SIP_API size_t sip_server_endpoint_count(sip_server_t *s);
SIP_API const char *sip_server_endpoint(sip_server_t *s, size_t i);
/* Kinds of introspection (the native protocol's INFO_REQUEST kinds). */
enum { SIP_INFO_READY = 1, SIP_INFO_POOLS = 2, SIP_INFO_STATUS = 3 };
/* Frees memory libsip returned as owned (strings from sip_server_info_json). */
SIP_API void sip_free(void *p);

/* A number that changes whenever the set of models served changes (a load,
 * reload or unload): front-ends compare it to know when what they cached
 * about the models is stale. */
SIP_API uint64_t sip_server_generation(sip_server_t *s);
/* 1 once a drain has begun (sip_server_drain or sip_server_free): the
 * server answers what is in flight and accepts nothing new; every
 * front-end's readiness check (HTTP /v2/health/ready, gRPC ServerReady and
 * health, native INFO ready) answers not ready. Thread-safe. */
SIP_API int sip_server_draining(sip_server_t *s);

/* Introspection as JSON text (docs/protocol.md, INFO_RESPONSE): kind 1 ready,
 * 2 pools, 3 status. Returns an owned NUL-terminated string (sip_free), NULL on
 * OOM or an unknown kind. Thread-safe. */
SIP_API char *sip_server_info_json(sip_server_t *s, int kind);

/* ---- model repository (server.model_repository) ----
 * Models of the repository can be loaded, reloaded and unloaded while the
 * server serves. A load brings the versions the model's version_policy
 * selects to READY beside the running ones, switches new requests to them
 * at once, lets requests already admitted finish on the old versions, then
 * frees those: no request fails because of the switch. A load that fails
 * leaves what was serving in place and its reason in the index. Unload
 * stops admitting (later requests: UNAVAILABLE), drains and frees.
 * Loads and unloads run one at a time on the server's loader thread. */

/* Called exactly once when a load or unload finished, from the loader
 * thread: `err` is NULL on success, else owned by the callee
 * (sip_error_free). Must not call the blocking sip_server_load_model or
 * sip_server_unload_model. */
typedef void (*sip_repo_done_fn)(sip_error_t *err, void *user);
/* Queues a load (or reload) of model `name` (borrowed). Errors, when the
 * callback never fires: INVALID_ARGUMENT (a name that is not a plain
 * directory name: '/', '..', absolute, NUL...), NOT_FOUND (not in the
 * repository), FAILED_PRECONDITION (no repository; a session_pools name),
 * UNAVAILABLE (shutting down). Thread-safe. */
SIP_API sip_error_t *sip_server_load_model_async(sip_server_t *s, const char *name, sip_repo_done_fn done,
                                         void *user);
/* Queues an unload of `name`; errors as for load. Unloading a model that is
 * not loaded succeeds. Thread-safe. */
SIP_API sip_error_t *sip_server_unload_model_async(sip_server_t *s, const char *name,
                                           sip_repo_done_fn done, void *user);
/* Blocking forms: return when the model serves its new versions (the old
 * ones are freed) or is unloaded; the load's failure otherwise (what was
 * serving stays). Must not be called from a completion callback. */
SIP_API sip_error_t *sip_server_load_model(sip_server_t *s, const char *name);
SIP_API sip_error_t *sip_server_unload_model(sip_server_t *s, const char *name);
/* Reads the config file again (SIGHUP in sipd) and applies its
 * session_pools without dropping a request: pools whose settings are
 * unchanged keep running untouched; a changed pool is loaded beside the old
 * one, swapped in, and the old one drained; a removed pool is drained and
 * freed; an added pool is loaded. Of the server section, log_level and
 * drain_timeout_ms apply at once, the rest at the next start. Blocks until
 * done (on the loader thread, after the loads queued before it). Errors,
 * with nothing changed: the file does not parse (its message), a pool fails
 * to load or would not fit a pipeline, pipeline_sessions changed, a pool
 * takes a repository model's name (FAILED_PRECONDITION), a server started
 * from a string (FAILED_PRECONDITION), draining (UNAVAILABLE). */
SIP_API sip_error_t *sip_server_reload_config(sip_server_t *s);
/* Load (or reload) with a Triton model configuration (JSON text, borrowed)
 * applied over the model's config.yaml for this load: max_batch_size,
 * dynamic_batching, instance_group counts (the pool size), version_policy,
 * priority and resource_quota; inputs and outputs it declares are checked
 * against the model (docs/http.md). A later load without one goes back to
 * config.yaml. Errors as for a load, plus INVALID_ARGUMENT naming a field
 * that is wrong or that this server does not support. */
SIP_API sip_error_t *sip_server_load_model_config_async(sip_server_t *s, const char *name,
                                                const char *config, sip_repo_done_fn done,
                                                void *user);
SIP_API sip_error_t *sip_server_load_model_config(sip_server_t *s, const char *name, const char *config);
/* A Triton model directory's config.pbtxt (`model_dir`/config.pbtxt, the
 * model named by the directory) as the config.yaml a sip repository model
 * takes: *yaml (owned, sip_free) and, when `warnings` is not NULL, one line
 * per field sip does not act on (owned; NULL when none). A repository
 * model directory with config.pbtxt and no config.yaml loads with exactly
 * these settings (docs/triton.md). Errors: NOT_FOUND (no config.pbtxt),
 * INVALID_ARGUMENT (text that does not parse, with its line and column; a
 * name other than the directory's; a platform this build does not serve;
 * values out of range). */
SIP_API sip_error_t *sip_import_triton(const char *model_dir, char **yaml, char **warnings);
/* The repository index as JSON: {"models": [{"name", "version" (absent for a
 * model as a whole), "state" (READY | LOADING | UNLOADING | UNAVAILABLE),
 * "reason", "source" ("repository" | "config"), "default" (served
 * versions)}, ...]}, sorted by name and version; with ready_only only READY
 * entries. Owned string (sip_free), NULL when out of memory. Thread-safe. */
SIP_API char *sip_server_repository_index(sip_server_t *s, int ready_only);

/* ---- models imported into the repository ----
 * For a model manager that fetches model files itself (ModelMesh's puller;
 * docs/grpc.md "ModelMesh model runtime"). */
/* Queues an import of the model at `path` as repository model `name` (both
 * borrowed): `path` is a model file some backend claims (x.onnx), a
 * directory holding a default model file (model.onnx) or exactly one such
 * file, or a directory of <version>/<model file>; a config.yaml beside them
 * comes along. On the loader thread the files are hard-linked (copied when
 * they cannot be) into <repository>/<name>/ with a marker file .sip-import,
 * then the model loads as sip_server_load_model_async loads it. An import
 * of the same name from the same path while it serves succeeds at once;
 * from another path it replaces the earlier import. A load that fails
 * leaves no files behind (its reason stays in the index). Errors, when
 * `done` never fires: INVALID_ARGUMENT (an empty path, a bad name),
 * NOT_FOUND (no such path), FAILED_PRECONDITION (no repository; a
 * session_pools name), UNAVAILABLE (shutting down). Through `done`:
 * NOT_FOUND (no model in the path), INVALID_ARGUMENT (a file of no known
 * format), FAILED_PRECONDITION (a repository model of that name that was
 * not imported), a load's errors. Thread-safe. */
SIP_API sip_error_t *sip_server_import_model_async(sip_server_t *s, const char *name,
                                                   const char *path, sip_repo_done_fn done,
                                                   void *user);
/* Queues a removal: unloads `name` (borrowed) and, when it was imported,
 * deletes its files and forgets it. A name neither served nor in the
 * repository succeeds (it is gone already). "" removes every imported
 * model (a model manager's fresh start). Errors, when `done` never fires:
 * as for sip_server_unload_model_async, but for NOT_FOUND. Thread-safe. */
SIP_API sip_error_t *sip_server_remove_model_async(sip_server_t *s, const char *name,
                                                   sip_repo_done_fn done, void *user);

/* An operator request on sessions (docs/availability.md), JSON:
 * {"action": "fault", "pool": P, "kind": "crash"|"hang"|"slow"|"error"|"none",
 *  "count": N | "rate": R, "delay_ms": D, "session": N} (refused with
 * PERMISSION_DENIED unless server.allow_fault_injection) or
 * {"action": "drain"|"resume", "pool": P, "session": N} or
 * {"action": "update", "pool": P, "pool_size": N, "max_memory_mb": M,
 *  "max_compute_percent": C} (any of the three; a pool grows on new
 * sessions of the loaded model and shrinks as its last sessions finish
 * their work; RESOURCE_EXHAUSTED when the grown pool passes its memory
 * quota, FAILED_PRECONDITION for a sequence pool's size). Drains and
 * updates are recorded in server.state_dir's checkpoint and last until the
 * pool is reloaded. On success *answer is a JSON object (sip_free).
 * Thread-safe. */
SIP_API sip_error_t *sip_server_admin(sip_server_t *s, const char *json, size_t len, char **answer);
/* The same, answered through done(err, answer, user) (err and answer owned
 * by done; answer a JSON object, NULL on error): at once, on the calling
 * thread, for every action but {"action": "profile", "pool": P, "seconds":
 * N (1..60, default 5), "session": K (default 0), "trace": true|false
 * (default true)}, which is answered from a thread of its own once the
 * session was profiled: {"pool", "session", "seconds", "executions",
 * "operators": [{"op", "count", "total_us", "mean_us", "p99_us", "share"}]
 * (most time first), "nodes": [the 20 nodes that took most time: {"node",
 * "op", "count", "total_us", "mean_us"}], "trace": the Chrome trace events
 * (docs/profiling.md)}. A non-NULL return means done will not be called. */
typedef void (*sip_admin_done_fn)(sip_error_t *e, char *answer, void *user);
SIP_API sip_error_t *sip_server_admin_async(sip_server_t *s, const char *json, size_t len,
                                    sip_admin_done_fn done, void *user);

/* ---- requests ---- */
/* Returns an owned request for `pool` (copied), NULL when out of memory.
 * "model:version" names one version of a model (':' is not allowed in pool
 * names); it is the same as sip_request_set_version. */
SIP_API sip_request_t *sip_request_new(const char *pool);
SIP_API void sip_request_free(sip_request_t *r);
SIP_API void sip_request_set_id(sip_request_t *r, uint64_t id);
/* Idempotency (docs/idempotency.md): a request carrying a key (copied; up
 * to 1024 bytes; NULL or "" clears it) runs at most once per model while
 * its entry lives (the pool's idempotency.ttl_s after it finished): a
 * duplicate submitted while it runs gets the same answer when it finishes,
 * one submitted later gets the kept answer, each with its own request id
 * and sip_response_replayed 1. UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED and INTERNAL answers are not kept (a retry runs). */
SIP_API sip_error_t *sip_request_set_idempotency_key(sip_request_t *r, const char *key);
/* The client's id for the request (KServe "id"; copied, up to 64 KiB):
 * the idempotency key when the pool sets idempotency.enabled and the
 * request has no key of its own. */
SIP_API sip_error_t *sip_request_set_client_id(sip_request_t *r, const char *id);
/* Asks for one version of the model (copied); NULL: the default version.
 * A version the pool does not serve is NOT_FOUND at submission. */
SIP_API sip_error_t *sip_request_set_version(sip_request_t *r, const char *version);
/* 0 = the pool's default, 1 = high, 2 = medium, 3 = low. */
SIP_API sip_error_t *sip_request_set_priority(sip_request_t *r, int priority);
/* 0 = no deadline. Counted from sip_server_infer*. */
SIP_API void sip_request_set_timeout_ms(sip_request_t *r, uint32_t timeout_ms);
/* The longest the request waits in its pool's dynamic batcher for others
 * to fill a batch (a BatchInferenceRequest's batch_config.timeout_ms), in
 * place of the pool's max_queue_delay; 0 = the pool's. Not a deadline. */
SIP_API void sip_request_set_batch_wait_ms(sip_request_t *r, uint32_t ms);
/* Adds an input; takes ownership of `t` (freed on error too). Errors:
 * a duplicate name or bytes that do not match dtype × shape. */
SIP_API sip_error_t *sip_request_add_input(sip_request_t *r, sip_tensor_t *t);
/* Per-request settings of a pipeline (copied JSON text):
 * {"stage_timeout_ms": [50, 20, 30], "early_exit_condition": "len(det.boxes) == 0"}.
 * Checked when the request is submitted to a pipeline (INVALID_ARGUMENT
 * naming the problem); ignored by pools. */
SIP_API sip_error_t *sip_request_set_pipeline_config(sip_request_t *r, const char *json);

/* ---- request parameters: one table for every front-end ----
 * A parameter by name, as KServe's "parameters" carry them (HTTP/REST and
 * gRPC) and the native protocol's parameter object does:
 *   priority          integer >= 0 (0: the pool's default, 1 the highest;
 *                     past 3 the lowest)
 *   timeout           integer >= 0, microseconds (rounded up to ms; 0: none)
 *   batch_timeout_ms  integer 0..86400000 (sip_request_set_batch_wait_ms)
 *   sequence_id       integer >= 0 or string of 0..256 bytes (0, "": none)
 *   sequence_start, sequence_end   booleans (true only with a sequence_id)
 *   idempotency_key   string (sip_request_set_idempotency_key)
 *   traceparent, tracestate        W3C strings (invalid ones are ignored)
 *   pipeline_config   JSON object, or a string holding one
 *                     (sip_request_set_pipeline_config)
 * Setting a parameter again replaces it. */
typedef enum sip_param_type {
  SIP_PARAM_INT = 0,
  SIP_PARAM_UINT,
  SIP_PARAM_BOOL,
  SIP_PARAM_DOUBLE,
  SIP_PARAM_STRING,
  SIP_PARAM_JSON
} sip_param_type_t;

/* One value; only the member of its type is read. */
typedef struct sip_param_value {
  sip_param_type_t type;
  int64_t i;
  uint64_t u;
  int b;
  double d;
  const char *s;    /* STRING: NUL-terminated, borrowed */
  const void *json; /* JSON: a jansson json_t * (any JSON value), borrowed */
} sip_param_value_t;

/* Sets parameter `key` (borrowed; values are copied). Errors: NOT_FOUND for
 * a key that is no request parameter (the message lists them; KServe
 * front-ends ignore those, the native protocol refuses them),
 * INVALID_ARGUMENT naming the parameter and what was expected. */
SIP_API sip_error_t *sip_request_set_parameter(sip_request_t *r, const char *key,
                                               const sip_param_value_t *v);
/* The names sip_request_set_parameter takes, ", "-separated (static). */
SIP_API const char *sip_request_parameter_names(void);
/* Offers [data, data + size) for output `name` (a client's shared memory
 * region, say), kept alive by a reference to `owner` (may be NULL when the
 * caller keeps the memory alive until the response is freed). When the
 * backend can write the output there directly (the request runs alone, the
 * output's shape is known before running, its bytes fit) the response's
 * tensor views that memory and nothing is copied; otherwise the output is
 * elsewhere as usual: compare the tensor's data pointer with `data`.
 * Errors: INVALID_ARGUMENT (NULL name or data, a second buffer for one
 * output). */
SIP_API sip_error_t *sip_request_set_output_buffer(sip_request_t *r, const char *name, void *data,
                                           size_t size, sip_buf_t *owner);
/* Makes the request part of a sequence, for pools with sequence_batching
 * (docs/sequences.md): `id` (>= 1, or a string of 1..256 bytes, copied)
 * names the sequence; `start` marks its first request (binding it to a
 * session), `end` its last (freeing the slot as it starts). Every request
 * of a sequence runs on the same session, in the order submitted. Such a
 * pool refuses requests without a sequence (INVALID_ARGUMENT), a request of
 * a sequence that is not active without start (FAILED_PRECONDITION) and new
 * sequences when its slots and backlog are full (RESOURCE_EXHAUSTED); other
 * pools ignore the sequence. Errors here: INVALID_ARGUMENT for id 0 or an
 * empty or too long string. */
SIP_API sip_error_t *sip_request_set_sequence(sip_request_t *r, uint64_t id, bool start, bool end);
SIP_API sip_error_t *sip_request_set_sequence_str(sip_request_t *r, const char *id, bool start,
                                          bool end);
/* Asks for one output by name (default: all of them, in model order). */
SIP_API sip_error_t *sip_request_add_output(sip_request_t *r, const char *name);
/* Bulk forms for front-ends whose decoder already checked what it decoded
 * (each tensor valid per sip_tensor_validate, names unique): the request
 * takes `inputs` (an array from malloc, and its tensors) or `names` (an
 * array from malloc of strings from malloc) as they are, without checking
 * again. Only on a request that has none yet: INVALID_ARGUMENT otherwise
 * (and nothing is taken). */
SIP_API sip_error_t *sip_request_adopt_inputs(sip_request_t *r, sip_tensor_t **inputs, size_t n);
SIP_API sip_error_t *sip_request_adopt_outputs(sip_request_t *r, char **names, size_t n);

/* The caller's W3C trace context (docs/tracing.md): `traceparent` (the
 * header's value, borrowed) makes a traced request part of the caller's
 * trace, its root span a child of the caller's span; `tracestate` (may be
 * NULL) is passed on. An invalid traceparent is ignored, as the W3C spec
 * asks (and its tracestate with it): never an error. Whether the request
 * is traced at all follows tracing.sample_ratio and the trace settings;
 * a caller's context whose sampled flag is set is traced whenever tracing
 * is on for the model. Errors: none but out of memory. */
SIP_API sip_error_t *sip_request_set_trace_context(sip_request_t *r, const char *traceparent,
                                           const char *tracestate);

/* A cancellation token: requests carrying it can be cancelled together
 * (for example every request of a client connection that closed). */
typedef struct sip_cancel_token sip_cancel_token_t;
/* Returns a token holding one reference (NULL when out of memory). */
SIP_API sip_cancel_token_t *sip_cancel_token_new(void);
/* Drops the caller's reference; NULL is a no-op. */
SIP_API void sip_cancel_token_free(sip_cancel_token_t *t);
/* Attaches `t` to the request (the request takes its own reference). */
SIP_API void sip_request_set_cancel_token(sip_request_t *r, sip_cancel_token_t *t);

/* Called exactly once per accepted request, from an engine thread. Owns
 * `resp` (free it with sip_response_free). Must not block for long. */
typedef void (*sip_infer_done_fn)(sip_response_t *resp, void *user);

/* Queues `r` (ownership taken, even on error). On error (unknown pool:
 * NOT_FOUND; pool not ready: UNAVAILABLE; bad inputs: INVALID_ARGUMENT) the
 * callback never fires. Thread-safe. */
SIP_API sip_error_t *sip_server_infer_async(sip_server_t *s, sip_request_t *r, sip_infer_done_fn done,
                                    void *user);
/* A client-side batch (seed 000's BatchInferenceRequest): the request's
 * inputs hold many items stacked along dim 0. The server splits them into
 * chunks of at most `max_batch_size` rows (0: the pool's max_batch_size, or
 * no split), pads the last chunk per `padding` (0 none, 1 replicate_last,
 * 2 zero), runs the chunks through the pool's queue (where they batch and
 * interleave with other work) and answers once with every output
 * concatenated in input order, padding removed. Admission errors of the
 * first chunk are returned (callback never fires); later failures arrive
 * through the callback with the first failing chunk's code. */
SIP_API sip_error_t *sip_server_infer_batch(sip_server_t *s, sip_request_t *r, int max_batch_size,
                                    int padding, sip_infer_done_fn done, void *user);

/* Cancels `t`: every queued request carrying it completes with CANCELLED
 * without running; later submissions carrying it are refused with
 * CANCELLED. Requests already executing finish normally. Thread-safe. */
SIP_API void sip_server_cancel(sip_server_t *s, sip_cancel_token_t *t);

/* Synchronous form: *out is an owned response (also for execution errors,
 * see sip_response_code); the return value is an admission error. */
SIP_API sip_error_t *sip_server_infer(sip_server_t *s, sip_request_t *r, sip_response_t **out);

/* ---- responses (borrowed views valid until sip_response_free) ---- */
SIP_API sip_code_t sip_response_code(const sip_response_t *resp);
SIP_API const char *sip_response_message(const sip_response_t *resp);
SIP_API uint64_t sip_response_request_id(const sip_response_t *resp);
SIP_API size_t sip_response_output_count(const sip_response_t *resp);
SIP_API const sip_tensor_t *sip_response_output(const sip_response_t *resp, size_t i);
SIP_API const sip_tensor_t *sip_response_output_by_name(const sip_response_t *resp, const char *name);
/* Every output at once (borrowed, valid until the response is freed). */
SIP_API const sip_tensor_t *const *sip_response_outputs(const sip_response_t *resp, size_t *n);
/* Server-side timings in microseconds. */
SIP_API void sip_response_timings(const sip_response_t *resp, uint64_t *queue_us, uint64_t *compute_us,
                          uint64_t *total_us);
/* Takes the outputs out of the response (caller owns the array and tensors). */
SIP_API sip_tensor_t **sip_response_take_outputs(sip_response_t *resp, size_t *n);
SIP_API void sip_response_free(sip_response_t *resp);
/* 1 when the answer is another request's with the same idempotency key
 * (joined while it ran, or kept after), not an execution of this one. */
SIP_API int sip_response_replayed(const sip_response_t *resp);
/* 1 when the answer came from the response cache (docs/response_cache.md):
 * an identical earlier request's outputs, the model not run for this one.
 * Borrows resp. */
SIP_API int sip_response_cached(const sip_response_t *resp);
/* Failover (docs/availability.md): how often the request was retried after
 * its session failed (a move to the fallback pool counts), and the session
 * that answered it ("pool/1"; NULL when it was never retried). */
SIP_API uint32_t sip_response_retries(const sip_response_t *resp);
SIP_API const char *sip_response_served_by(const sip_response_t *resp);

#ifdef __cplusplus
}
#endif
#endif
