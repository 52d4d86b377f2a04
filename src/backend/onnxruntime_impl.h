/* sip — the ONNX Runtime backend's shared state, between
 * src/backend/onnxruntime.c (init, load, describe, sessions),
 * onnxruntime_exec.c (execute: request bytes in as OrtValues, OrtValues out
 * as zero-copy sip tensors), onnxruntime_options.c (the option table,
 * execution providers) and onnxruntime_device.c (device memory, I/O
 * binding) and onnxruntime_quota.cc (the memory quota's accounting
 * allocator). Internal to those files. */
#ifndef SIP_BACKEND_ONNXRUNTIME_IMPL_H
#define SIP_BACKEND_ONNXRUNTIME_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "onnxruntime_c_api.h"

#include "backend/onnxruntime_quota.h"
#include "sip/backend.h"

/* The OrtApi table is a process-wide constant, so one pointer serves every
 * backend instance, including buffer-release callbacks that run on any
 * thread after shutdown. Set once, by init (src/backend/onnxruntime.c). */
extern const OrtApi *sip__ort;

/* Lifetimes. Output tensors are zero-copy views of OrtValues, and an
 * OrtValue may point into memory its OrtSession owns (an initializer that is
 * also a graph output). Responses can outlive an unload, so outputs hold a
 * reference on their model, sessions too, and models on the backend (whose
 * OrtEnv owns the thread pools every OrtSession uses). The last reference
 * releases the ORT object, whichever of shutdown/model_free/buffer release
 * comes last. */
typedef struct sip__ort_backend {
  OrtEnv *env;
  atomic_long refs;
} sip__ort_backend_t;

/* The symbolic names of one tensor's dims ("batch", "N"; NULL for fixed
 * and unnamed dims): an output dim named like an input dim takes that
 * input's size, so an output's shape can be known before running. */
typedef struct sip__ort_dim_syms {
  char *name[SIP_MAX_RANK];
} sip__ort_dim_syms_t;

/* One execution provider of execution_providers: ORT's name
 * ("CUDAExecutionProvider") and its provider options (all owned). */
typedef struct sip__ort_provider {
  char *name;
  char **keys, **values;
  size_t n;
  int device_id; /* its device_id option (0 when absent) */
} sip__ort_provider_t;

/* What a model was loaded with (onnxruntime_options.c's parse): kept so
 * that a profiled copy of its OrtSession can be made the same way. */
typedef struct sip__ort_load_options {
  GraphOptimizationLevel opt_level;
  int mem_arena;   /* -1: ORT default */
  int mem_pattern; /* -1: ORT default */
  int own_threads; /* > 0: this model gets its own intra-op pool of that many threads */
  sip__ort_provider_t *providers; /* in order; owned by the model (NULL: CPU only) */
  size_t n_providers;
  int device;      /* the first provider is a device's (cuda, tensorrt): tensors live there */
  int device_id;
  int64_t max_memory_mb; /* the pool's quota (sip.max_memory_mb); -1: none given */
} sip__ort_load_options_t;

typedef struct sip__ort_model {
  OrtSession *session;
  sip__ort_quota_t *quota; /* loaded with a quota: its account (shared with profiled copies) */
  sip__ort_backend_t *backend;
  atomic_long refs;
  char *path;          /* the model file (for a profiled copy) */
  sip__ort_load_options_t lo;
  struct sip__ort_model *parent; /* a profiled copy: its describe arrays are the parent's */
  sip_io_desc_t *inputs;
  size_t n_inputs;
  sip_io_desc_t *outputs;
  size_t n_outputs;
  sip__ort_dim_syms_t *in_syms, *out_syms; /* one per input / output */
} sip__ort_model_t;

/* What a zero-copy output buffer owns. */
typedef struct sip__ort_output_ref {
  OrtValue *value;
  sip__ort_model_t *model;
} sip__ort_output_ref_t;

typedef struct sip__ort_session {
  sip__ort_model_t *model;
  OrtRunOptions *run_options;
  OrtMemoryInfo *mem_info; /* CPU memory, for wrapping request bytes */
  OrtAllocator *allocator; /* ORT's default CPU allocator (not owned) */
  /* Scratch arrays sized for the model, reused by every execute so the hot
   * path does not allocate for them. */
  const char **in_names;
  OrtValue **in_values;
  OrtValue **out_values;
  /* Per output: the request's destination memory Run writes into (an
   * OrtValue over it, given to Run pre-allocated), or NULL. */
  OrtValue **out_bound;
  /* A model on a device (sip__ort_load_options_t.device): its memory, and the I/O
   * binding device tensors go through (onnxruntime_device.c). */
  OrtMemoryInfo *dev_mem_info;
  OrtIoBinding *binding;
} sip__ort_session_t;

/* Turns an OrtStatus into a sip error with `code`, prefixing ORT's message
 * with a formatted context. Releases the status. */
sip_error_t *sip__ort_status_error(OrtStatus *st, sip_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The sip dtype of an ORT element type; SIP_DTYPE_INVALID for those sip
 * cannot carry. */
sip_dtype_t sip__ort_dtype(ONNXTensorElementDataType t);
/* "sequence", "map"...: an ONNX value type, for messages. */
const char *sip__ort_type_name(enum ONNXType t);
/* Drops a reference on a model; the last one releases its OrtSession. */
void sip__ort_model_unref(sip__ort_model_t *m);

/* The OrtApi, initialised once (NULL when the library lacks the version). */
const OrtApi *sip__ort_api(void);

/* ---- options (src/backend/onnxruntime_options.c) ---- */
#define SIP__ORT_N_OPTIONS 6
extern const sip_backend_option_t sip__ort_options[SIP__ORT_N_OPTIONS];
/* Parses a pool's backend_options into *lo (providers owned by *lo: clear
 * with sip__ort_load_options_clear) and checks that this build has every
 * provider. */
sip_error_t *sip__ort_parse_options(const sip_kv_t *options, size_t n, sip__ort_load_options_t *lo);
void sip__ort_load_options_clear(sip__ort_load_options_t *lo);
void sip__ort_providers_free(sip__ort_provider_t *p, size_t n);
/* The vtable's check_options: the same parse, at config check. */
sip_error_t *sip__ort_check_options(const sip_kv_t *options, size_t n);
/* Appends lo's providers to `so`, in order (cpu is implicit). */
OrtStatus *sip__ort_append_providers(const sip__ort_load_options_t *lo, OrtSessionOptions *so);

/* ---- device memory (src/backend/onnxruntime_device.c) ---- */
/* The vtable's memory, alloc and copy hooks. */
void sip__ort_memory(void *model, int is_input, size_t index, sip_memory_type_t *type,
                     int *device_id);
sip_error_t *sip__ort_alloc(void *model, sip_memory_type_t type, int device_id, size_t size,
                            sip_buf_t **out);
sip_error_t *sip__ort_copy(void *model, void *dst, sip_memory_type_t dst_type, int dst_device,
                           const void *src, sip_memory_type_t src_type, int src_device,
                           size_t size);
/* A device model's session: its device memory info and I/O binding. */
sip_error_t *sip__ort_session_device(sip__ort_session_t *s);
void sip__ort_session_device_free(sip__ort_session_t *s);
/* Runs with the I/O binding: inputs (their OrtValues built already, in
 * s->in_values) bound as they are, outputs bound to the device; fills
 * s->out_values with the bound outputs (owned). */
sip_error_t *sip__ort_run_bound(sip__ort_session_t *s, size_t n_inputs, const char *const *out_names,
                                size_t n_outputs);

/* The vtable's execute (src/backend/onnxruntime_exec.c). */
sip_error_t *sip__ort_execute(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                              const char *const *out_names, size_t n_outputs,
                              sip_tensor_t **outputs);
/* The vtable's memory_limit (the model's quota account). */
void sip__ort_memory_limit(void *model, int64_t max_memory_mb);
/* execute with destinations for outputs (sip_backend_vtable_t.execute_into). */
sip_error_t *sip__ort_execute_into(void *session, const sip_tensor_t *const *inputs,
                                   size_t n_inputs, const char *const *out_names,
                                   size_t n_outputs, const sip_out_dest_t *dests,
                                   sip_tensor_t **outputs);

#endif
