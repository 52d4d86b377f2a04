/* sip — the ONNX Runtime backend's shared state, between
 * src/backend/onnxruntime.c (init, options, load, describe, sessions) and
 * src/backend/onnxruntime_exec.c (execute: request bytes in as OrtValues,
 * OrtValues out as zero-copy sip tensors). Internal to those two files. */
#ifndef SIP_BACKEND_ONNXRUNTIME_IMPL_H
#define SIP_BACKEND_ONNXRUNTIME_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "onnxruntime_c_api.h"

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
typedef struct backend {
  OrtEnv *env;
  atomic_long refs;
} backend_t;

/* The symbolic names of one tensor's dims ("batch", "N"; NULL for fixed
 * and unnamed dims): an output dim named like an input dim takes that
 * input's size, so an output's shape can be known before running. */
typedef struct dim_syms {
  char *name[SIP_MAX_RANK];
} dim_syms_t;

/* What a model was loaded with (options.c's parse): kept so that a
 * profiled copy of its OrtSession can be made the same way. */
typedef struct load_options {
  GraphOptimizationLevel opt_level;
  int mem_arena;   /* -1: ORT default */
  int mem_pattern; /* -1: ORT default */
  int own_threads; /* > 0: this model gets its own intra-op pool of that many threads */
} load_options_t;

typedef struct model {
  OrtSession *session;
  backend_t *backend;
  atomic_long refs;
  char *path;          /* the model file (for a profiled copy) */
  load_options_t lo;
  struct model *parent; /* a profiled copy: its describe arrays are the parent's */
  sip_io_desc_t *inputs;
  size_t n_inputs;
  sip_io_desc_t *outputs;
  size_t n_outputs;
  dim_syms_t *in_syms, *out_syms; /* one per input / output */
} model_t;

/* What a zero-copy output buffer owns. */
typedef struct output_ref {
  OrtValue *value;
  model_t *model;
} output_ref_t;

typedef struct session {
  model_t *model;
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
} session_t;

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
void sip__ort_model_unref(model_t *m);

/* The vtable's execute (src/backend/onnxruntime_exec.c). */
sip_error_t *sip__ort_execute(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                              const char *const *out_names, size_t n_outputs,
                              sip_tensor_t **outputs);
/* execute with destinations for outputs (sip_backend_vtable_t.execute_into). */
sip_error_t *sip__ort_execute_into(void *session, const sip_tensor_t *const *inputs,
                                   size_t n_inputs, const char *const *out_names,
                                   size_t n_outputs, const sip_out_dest_t *dests,
                                   sip_tensor_t **outputs);

#endif
