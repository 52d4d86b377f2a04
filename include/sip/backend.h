/* sip — the backend interface.
 *
 * A backend turns a model file into something sessions can execute. The
 * scheduler only ever talks to this vtable, so ONNX Runtime execution
 * providers, a CANN/ACL backend or test doubles plug in without touching it.
 *
 * Threading contract: load/describe/model_free are called from the
 * management plane; session_new/session_free from any thread; `execute` is
 * never called concurrently for one session, but different sessions of one
 * model run concurrently, so a model object must be safe to share.
 */
#ifndef SIP_BACKEND_H
#define SIP_BACKEND_H

#include "sip/export.h"

#include <stddef.h>
#include <stdint.h>

#include "sip/error.h"
#include "sip/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One input or output of a model. Dims of -1 are dynamic. */
typedef struct sip_io_desc {
  char *name;
  sip_dtype_t dtype;
  int rank; /* -1: unknown rank (any shape accepted) */
  int64_t dims[SIP_MAX_RANK];
} sip_io_desc_t;

/* Key/value options from the pool's `backend_options`: scalars as written in
 * the config; an option of type SIP_OPTION_LIST arrives as JSON text, an
 * array of objects each with a "name" and its other keys as strings
 * (`[cuda, {name: cpu}]` → `[{"name":"cuda"},{"name":"cpu"}]`). */
typedef struct sip_kv {
  const char *key;
  const char *value;
} sip_kv_t;

/* Memory a request offers for one output (sip_request_set_output_buffer):
 * a backend that can write the output there directly returns a tensor that
 * views `data` and holds a reference to `owner`. */
typedef struct sip_out_dest {
  void *data; /* NULL: no destination for this output */
  size_t size;
  sip_buf_t *owner; /* keeps `data` alive; may be NULL */
} sip_out_dest_t;

/* Engine-wide settings every backend may honour. */
typedef struct sip_engine_settings {
  int intra_op_threads;  /* 0: number of cores */
  int inter_op_threads;  /* 0: 1 */
  int allow_spinning;    /* 0: threads sleep when idle (default) */
} sip_engine_settings_t;

/* What a backend can do, for the engine and the config checks (flags). */
enum {
  /* load() needs a model file: a pool of this backend must name model_path. */
  SIP_BACKEND_NEEDS_FILE = 1u << 0,
  /* Takes the option enable_cpu_mem_arena; a pool's max_memory_mb turns the
   * arena off unless the pool sets it. */
  SIP_BACKEND_MEMORY_ARENA = 1u << 1,
  /* backend_options whose key ends in _file name files, relative to
   * the config file's folder. */
  SIP_BACKEND_PATH_OPTIONS = 1u << 2,
  /* Caps what a model holds while it serves (resource_quota.max_memory_mb):
   * for a pool with a quota the engine adds the option
   * SIP_BACKEND_OPTION_MAX_MEMORY_MB (the quota in MiB) to load's options,
   * and calls memory_limit when the quota changes while serving. An
   * execution that would take the model past the cap fails with
   * RESOURCE_EXHAUSTED, and the model serves on. */
  SIP_BACKEND_MEMORY_LIMIT = 1u << 3,
};

/* The option that carries a pool's memory quota to a SIP_BACKEND_MEMORY_LIMIT
 * backend's load (MiB, decimal). Set by the engine only: a pool's
 * backend_options cannot hold it. */
#define SIP_BACKEND_OPTION_MAX_MEMORY_MB "sip.max_memory_mb"

/* The type of one backend option, checked by the config before the
 * backend sees it. */
typedef enum sip_option_type {
  SIP_OPTION_STRING = 0, /* any scalar, passed as written */
  SIP_OPTION_BOOL = 1,   /* true/false (also yes/no, on/off, 1/0) */
  SIP_OPTION_INT = 2,    /* an integer within [min, max] */
  SIP_OPTION_ENUM = 3,   /* one of `values` */
  SIP_OPTION_LIST = 4,   /* a list of names or maps with a name: [cuda, {name: cpu}] */
} sip_option_type_t;

/* One entry of a backend's option table (sip_backend_vtable_t.options):
 * what a pool's backend_options may hold, for the config check and the
 * generated reference (docs/config.md). */
typedef struct sip_backend_option {
  const char *name;
  sip_option_type_t type;
  const char *def;           /* the default, as documented ("all"); NULL: none */
  const char *doc;           /* one sentence */
  const char *const *values; /* ENUM: the allowed values, NULL-terminated */
  int64_t min, max;          /* INT: the range */
} sip_backend_option_t;

typedef struct sip_backend_vtable {
  const char *name; /* "onnxruntime", "builtin"; letters, digits, '_' and '-' */
  unsigned flags;   /* SIP_BACKEND_* */
  /* The platform KServe/Triton clients see in model metadata ("onnxruntime_onnx");
   * NULL: the name. */
  const char *platform;

  /* Process-wide setup, called once before the first load (may be NULL). */
  sip_error_t *(*init)(const sip_engine_settings_t *settings, void **backend_state);
  void (*shutdown)(void *backend_state);

  /* Loads a model once; its weights are shared by every session of the pool.
   * `path` may be NULL for backends that need no file. */
  sip_error_t *(*load)(void *backend_state, const char *path, const sip_kv_t *options,
                       size_t n_options, void **model);
  /* Describes inputs and outputs. Arrays are owned by the model and valid
   * until model_free. */
  void (*describe)(void *model, const sip_io_desc_t **inputs, size_t *n_inputs,
                   const sip_io_desc_t **outputs, size_t *n_outputs);
  /* Creates an execution context (its own I/O bindings, run options). */
  sip_error_t *(*session_new)(void *model, void **session);
  /* Runs one request. `inputs` are validated against describe() already and
   * are borrowed. `out_names` lists the outputs wanted, in order (all when the
   * request asked for none). On success fills outputs[i] with owned tensors
   * named out_names[i]. On failure no outputs are left allocated. */
  sip_error_t *(*execute)(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                          const char *const *out_names, size_t n_outputs,
                          sip_tensor_t **outputs);
  void (*session_free)(void *session);
  void (*model_free)(void *model);
  /* Why requests for `model` cannot be concatenated along dim 0 into one
   * execution (dynamic batching), or NULL when they can. NULL hook: they
   * can whenever dim 0 of every input and output is the batch dim. */
  const char *(*batch_problem)(void *model);
  /* Optional: execute, where dests[i] is memory the request offers for
   * output i (dests[i].data NULL: none). An output the backend can write
   * there directly (its shape known before running, its bytes fitting)
   * is returned as a tensor viewing dests[i].data with a reference to
   * dests[i].owner; the others as execute returns them. The engine calls it
   * for a request that runs alone and offers destinations. */
  sip_error_t *(*execute_into)(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                               const char *const *out_names, size_t n_outputs,
                               const sip_out_dest_t *dests, sip_tensor_t **outputs);
  /* Optional, operator profiling (sip profile): a new context like
   * session_new's whose executions are recorded operator by operator
   * (`prefix`: where the backend may write its files), and the end of it:
   * the record as Chrome trace JSON (an array of events with "name",
   * "cat" ("Node" for an operator, with args.op_name), "ts" and "dur" in
   * microseconds), owned (sip_free). The context is then freed with
   * session_free. */
  sip_error_t *(*session_new_profiled)(void *model, const char *prefix, void **session);
  sip_error_t *(*profile_end)(void *session, char **trace_json);

  /* ---- The backend's formats. Every field is optional; NULL keeps the
   * behaviour of a backend that has none. ---- */
  /* Claims a model: 1 when the file at `path` is one this backend loads
   * (by its extension, or by its first bytes), else 0. Called for a
   * model_path that names a file and no backend, and for the files of a
   * version directory; must not load the model. */
  int (*probe)(const char *path);
  /* The file names a version directory <dir>/<version>/ holds for this
   * backend, in order of preference, NULL-terminated ("model.onnx"). */
  const char *const *default_files;
  /* The options a pool's backend_options may set (n_options entries). The
   * config refuses other keys and values of the wrong type. NULL: any key,
   * passed as written. */
  const sip_backend_option_t *options;
  size_t n_options;
  /* Checks option values beyond their type at config check (an execution
   * provider this build lacks...): NULL or an owned INVALID_ARGUMENT error
   * that says what was wrong and what is available. */
  sip_error_t *(*check_options)(const sip_kv_t *options, size_t n_options);

  /* ---- Memory types. NULL hooks: inputs and outputs in host memory. ---- */
  /* Where the model's sessions want input `index` (of describe's inputs;
   * is_input) or put output `index`: *type and *device_id. When any is not
   * SIP_MEMORY_CPU, the engine copies request inputs there before execute
   * (in one place, counted: sip_memory_copies_total) and outputs that come
   * back elsewhere than host memory to host memory after it; execute then
   * receives inputs in that memory and may return outputs in it (the
   * tensors' memory_type says where). */
  void (*memory)(void *model, int is_input, size_t index, sip_memory_type_t *type,
                 int *device_id);
  /* Allocates `size` bytes of `type` memory on `device_id` as a buffer whose
   * release frees it. Needed when memory() names a type other than CPU. */
  sip_error_t *(*alloc)(void *model, sip_memory_type_t type, int device_id, size_t size,
                        sip_buf_t **out);
  /* Copies `size` bytes from src (src_type/src_device) to dst
   * (dst_type/dst_device), waiting until the bytes are there. */
  sip_error_t *(*copy)(void *model, void *dst, sip_memory_type_t dst_type, int dst_device,
                       const void *src, sip_memory_type_t src_type, int src_device, size_t size);

  /* ---- Memory quota (SIP_BACKEND_MEMORY_LIMIT). ---- */
  /* A new cap for a model loaded with SIP_BACKEND_OPTION_MAX_MEMORY_MB, in
   * MiB (0: none), for the allocations that follow; called from the
   * management plane while sessions execute. A model loaded without the
   * option keeps running uncapped. */
  void (*memory_limit)(void *model, int64_t max_memory_mb);
} sip_backend_vtable_t;

/* Makes `vt` (which must outlive every server) available to configs as
 * `backend: <vt->name>`, process-wide, alongside the backends this build
 * carries. Call before creating the servers that use it. Errors:
 * INVALID_ARGUMENT (no name, a name taken, missing load/describe/
 * session_new/execute/session_free/model_free), RESOURCE_EXHAUSTED (more
 * than 16 backends). Thread-safe. */
SIP_API sip_error_t *sip_backend_register(const sip_backend_vtable_t *vt);

#ifdef __cplusplus
}
#endif
#endif
