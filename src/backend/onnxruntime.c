/* sip — the ONNX Runtime backend (C API): init, load options, load,
 * describe and sessions; src/backend/onnxruntime_exec.c runs them.
 *
 * Shape of the thing:
 *  - init creates the one OrtEnv of the process with *global* thread pools;
 *    every OrtSession opts out of its own pools (DisablePerSessionThreads),
 *    so N models x M sessions share one intra-op pool instead of
 *    oversubscribing a small box with N pools.
 *  - load creates one OrtSession per model. OrtSession::Run is thread-safe,
 *    so all sip sessions of a pool run on that one OrtSession and the
 *    weights are in memory once.
 *  - session_new only builds cheap per-context state (run options, scratch
 *    arrays), so executions of different sip sessions proceed concurrently.
 *  - execute wraps the borrowed request bytes as input OrtValues without a
 *    copy, and hands the output OrtValues' memory back zero-copy inside
 *    refcounted sip buffers whose release drops the OrtValue. Only STRING
 *    tensors are converted, because ORT stores them as std::string objects.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnxruntime_c_api.h"

#include "backend/onnxruntime_impl.h"
#include "core/core.h"
#include "sip/backend.h"


/* The newest OrtApi entries used here (TensorTypeAndShape_HasShape,
 * GetTensorElementTypeAndShapeDataReference) appeared in 1.24. Asking for
 * that version rather than ORT_API_VERSION keeps the backend working with
 * any runtime library >= 1.24, not just the headers' exact release. */
#define ORT_API_MIN 24
_Static_assert(ORT_API_VERSION >= ORT_API_MIN, "onnxruntime headers older than 1.24");

/* Set once by pthread_once in init. */
const OrtApi *sip__ort;
static pthread_once_t ort_once = PTHREAD_ONCE_INIT;

static void ort_api_init(void) {
  const OrtApiBase *base = OrtGetApiBase();
  sip__ort = base ? base->GetApi(ORT_API_MIN) : NULL;
}

const OrtApi *sip__ort_api(void) {
  pthread_once(&ort_once, ort_api_init);
  return sip__ort;
}


/* ---- errors ------------------------------------------------------------ */

sip_error_t *sip__ort_status_error(OrtStatus *st, sip_code_t code, const char *fmt, ...) {
  char ctx[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  /* ORT's messages span lines (shape mismatches list one index per line);
   * sip errors travel in logfmt lines and protocol headers, so fold them. */
  const char *msg = sip__ort->GetErrorMessage(st);
  char *flat = sip__strdup(msg ? msg : "(no message)");
  if (flat) {
    for (char *p = flat; *p; p++)
      if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
  }
  sip_error_t *err = sip_error_new(code, "%s: %s", ctx, flat ? flat : msg ? msg : "");
  sip__free(flat);
  sip__ort->ReleaseStatus(st);
  return err;
}

/* Loading: a file ORT cannot find is NOT_FOUND; anything else (bad
 * protobuf, invalid graph, unsupported opset) is a model this server cannot
 * serve as configured, i.e. FAILED_PRECONDITION. */
static sip_code_t load_code(OrtStatus *st) {
  return sip__ort->GetErrorCode(st) == ORT_NO_SUCHFILE ? SIP_NOT_FOUND : SIP_FAILED_PRECONDITION;
}

/* ---- types ------------------------------------------------------------- */

/* sip's dtype numbers are ONNX's, and so are ORT's element types; the switch
 * exists to say which of them sip can carry. */
sip_dtype_t sip__ort_dtype(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return SIP_DTYPE_FLOAT32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return SIP_DTYPE_UINT8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return SIP_DTYPE_INT8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return SIP_DTYPE_UINT16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return SIP_DTYPE_INT16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return SIP_DTYPE_INT32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return SIP_DTYPE_INT64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING: return SIP_DTYPE_STRING;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return SIP_DTYPE_BOOL;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return SIP_DTYPE_FLOAT16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return SIP_DTYPE_FLOAT64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return SIP_DTYPE_UINT32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return SIP_DTYPE_UINT64;
    default: return SIP_DTYPE_INVALID;
  }
}

/* Names for the element types sip cannot carry, for error messages. */
static const char *ort_elem_name(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64: return "complex64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128: return "complex128";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN: return "float8e4m3fn";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ: return "float8e4m3fnuz";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2: return "float8e5m2";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ: return "float8e5m2fnuz";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4: return "uint4";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4: return "int4";
    default: return "an unknown element type";
  }
}

const char *sip__ort_type_name(enum ONNXType t) {
  switch (t) {
    case ONNX_TYPE_TENSOR: return "tensor";
    case ONNX_TYPE_SEQUENCE: return "sequence";
    case ONNX_TYPE_MAP: return "map";
    case ONNX_TYPE_OPAQUE: return "opaque";
    case ONNX_TYPE_SPARSETENSOR: return "sparse tensor";
    case ONNX_TYPE_OPTIONAL: return "optional";
    default: return "unknown";
  }
}

/* ---- init / shutdown --------------------------------------------------- */

/* Routes ORT's own log lines into sip's logfmt log instead of its default
 * stderr format. Called from any ORT thread; sip__log is thread-safe. */
static void ort_log(void *param, OrtLoggingLevel severity, const char *category, const char *logid,
                    const char *code_location, const char *message) {
  (void)param;
  int level;
  switch (severity) {
    case ORT_LOGGING_LEVEL_VERBOSE: level = SIP__LOG_DEBUG; break;
    case ORT_LOGGING_LEVEL_INFO: level = SIP__LOG_INFO; break;
    case ORT_LOGGING_LEVEL_WARNING: level = SIP__LOG_WARN; break;
    default: level = SIP__LOG_ERROR; break;
  }
  if (!sip__log_enabled(level)) return;
  sip__log(level, message ? message : "", "component=onnxruntime category=%s logid=%s at=%s",
           category ? category : "-", logid ? logid : "-", code_location ? code_location : "-");
}

static sip_error_t *ort_init(const sip_engine_settings_t *settings, void **backend_state) {
  *backend_state = NULL;
  pthread_once(&ort_once, ort_api_init);
  if (!sip__ort)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "onnxruntime: the loaded library does not provide C API version %d "
                         "(onnxruntime >= 1.%d is required; found %s)",
                         ORT_API_MIN, ORT_API_MIN,
                         OrtGetApiBase() ? OrtGetApiBase()->GetVersionString() : "none");

  sip_engine_settings_t s = {0, 0, 0};
  if (settings) s = *settings;
  if (s.intra_op_threads < 0 || s.inter_op_threads < 0)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "onnxruntime: thread counts must be >= 0 (intra_op_threads=%d, "
                         "inter_op_threads=%d)",
                         s.intra_op_threads, s.inter_op_threads);

  sip__ort_backend_t *be = sip__calloc(1, sizeof *be);
  if (!be) return SIP__OOM();

  OrtThreadingOptions *tp = NULL;
  OrtStatus *st = sip__ort->CreateThreadingOptions(&tp);
  /* intra 0 is ORT's "one per physical core", which is what sip's 0 means.
   * inter 0 means 1 in sip: sessions run sequentially, so a larger inter-op
   * pool would only hold idle threads. */
  if (!st) st = sip__ort->SetGlobalIntraOpNumThreads(tp, s.intra_op_threads);
  if (!st) st = sip__ort->SetGlobalInterOpNumThreads(tp, s.inter_op_threads ? s.inter_op_threads : 1);
  /* Spinning burns cores that other sessions and the event loops need;
   * off unless asked for. */
  if (!st) st = sip__ort->SetGlobalSpinControl(tp, s.allow_spinning ? 1 : 0);
  /* ORT keeps one env per process: a second init while one is alive gets
   * the same env (with the first init's thread settings). */
  if (!st)
    st = sip__ort->CreateEnvWithCustomLoggerAndGlobalThreadPools(
        ort_log, NULL, ORT_LOGGING_LEVEL_WARNING, "sip", tp, &be->env);
  if (tp) sip__ort->ReleaseThreadingOptions(tp);
  if (!st) st = sip__ort_quota_register(be->env);
  if (st) {
    if (be->env) sip__ort->ReleaseEnv(be->env);
    sip__free(be);
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: cannot create the environment");
  }
  atomic_init(&be->refs, 1);
  *backend_state = be;
  return NULL;
}

static void backend_unref(sip__ort_backend_t *be) {
  if (atomic_fetch_sub_explicit(&be->refs, 1, memory_order_acq_rel) != 1) return;
  if (be->env) sip__ort->ReleaseEnv(be->env);
  sip__free(be);
}

static void ort_shutdown(void *backend_state) {
  if (backend_state) backend_unref(backend_state);
}

/* ---- load / describe --------------------------------------------------- */

/* A clear message for the common mistakes before ORT's more cryptic one. */
static sip_error_t *check_model_file(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    int e = errno;
    sip_code_t code = e == ENOENT || e == ENOTDIR ? SIP_NOT_FOUND
                      : e == EACCES               ? SIP_PERMISSION_DENIED
                                                  : SIP_FAILED_PRECONDITION;
    return sip_error_new(code, "onnxruntime: cannot open model '%s': %s", path, strerror(e));
  }
  if (S_ISDIR(sb.st_mode))
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "onnxruntime: model path '%s' is a directory; expected an .onnx file",
                         path);
  return NULL;
}

static void free_descs(sip_io_desc_t *d, size_t n) {
  if (!d) return;
  for (size_t i = 0; i < n; i++) sip__free(d[i].name);
  sip__free(d);
}

static void free_syms(sip__ort_dim_syms_t *v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < SIP_MAX_RANK; k++) sip__free(v[i].name[k]);
  sip__free(v);
}

/* Fills one input or output description from the session's metadata. */
static sip_error_t *describe_one(OrtSession *sess, OrtAllocator *alloc, int is_input, size_t index,
                                 const char *path, sip_io_desc_t *d, sip__ort_dim_syms_t *syms) {
  const char *kind = is_input ? "input" : "output";
  char *ort_name = NULL;
  OrtStatus *st = is_input ? sip__ort->SessionGetInputName(sess, index, alloc, &ort_name)
                           : sip__ort->SessionGetOutputName(sess, index, alloc, &ort_name);
  if (st)
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: model '%s': %s %zu", path, kind, index);
  d->name = sip__strdup(ort_name);
  OrtStatus *fst = sip__ort->AllocatorFree(alloc, ort_name);
  if (fst) sip__ort->ReleaseStatus(fst); /* cannot fail for the default allocator */
  if (!d->name) return SIP__OOM();

  OrtTypeInfo *ti = NULL;
  st = is_input ? sip__ort->SessionGetInputTypeInfo(sess, index, &ti)
                : sip__ort->SessionGetOutputTypeInfo(sess, index, &ti);
  if (st)
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: model '%s': %s '%s'", path, kind, d->name);

  sip_error_t *err = NULL;
  enum ONNXType otype = ONNX_TYPE_UNKNOWN;
  const OrtTensorTypeAndShapeInfo *tinfo = NULL;
  ONNXTensorElementDataType et = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
  st = sip__ort->GetOnnxTypeFromTypeInfo(ti, &otype);
  if (!st && otype != ONNX_TYPE_TENSOR) {
    err = sip_error_new(SIP_UNIMPLEMENTED,
                        "onnxruntime: model '%s': %s '%s' is a %s; sip supports only tensor "
                        "inputs and outputs",
                        path, kind, d->name, sip__ort_type_name(otype));
    goto out;
  }
  if (!st) st = sip__ort->CastTypeInfoToTensorInfo(ti, &tinfo);
  if (!st && !tinfo) {
    err = sip_error_new(SIP_INTERNAL, "onnxruntime: model '%s': %s '%s' has no tensor info", path,
                        kind, d->name);
    goto out;
  }
  if (!st) st = sip__ort->GetTensorElementType(tinfo, &et);
  if (st) goto out;
  d->dtype = sip__ort_dtype(et);
  if (d->dtype == SIP_DTYPE_INVALID) {
    err = sip_error_new(SIP_UNIMPLEMENTED,
                        "onnxruntime: model '%s': %s '%s' has element type %s (ONNX type %d), "
                        "which sip does not support",
                        path, kind, d->name, ort_elem_name(et), (int)et);
    goto out;
  }
  /* A graph input may declare no shape at all; ORT then reports rank 0,
   * which would wrongly read as "scalar only". */
  if (!sip__ort->TensorTypeAndShape_HasShape(tinfo)) {
    d->rank = -1;
    goto out;
  }
  st = sip__ort->GetDimensionsCount(tinfo, &rank);
  if (st) goto out;
  if (rank > SIP_MAX_RANK) {
    err = sip_error_new(SIP_UNIMPLEMENTED,
                        "onnxruntime: model '%s': %s '%s' has rank %zu; sip supports at most %d",
                        path, kind, d->name, rank, SIP_MAX_RANK);
    goto out;
  }
  d->rank = (int)rank;
  if (rank) st = sip__ort->GetDimensions(tinfo, d->dims, rank);
  /* Symbolic ("batch") and unnamed dims come back as -1 already; anything
   * negative is normalised so callers test only for -1. */
  for (size_t i = 0; !st && i < rank; i++)
    if (d->dims[i] < 0) d->dims[i] = -1;
  const char *sym[SIP_MAX_RANK] = {0};
  if (!st && rank) st = sip__ort->GetSymbolicDimensions(tinfo, sym, rank);
  for (size_t i = 0; !st && i < rank; i++)
    if (d->dims[i] < 0 && sym[i] && *sym[i] && !(syms->name[i] = sip__strdup(sym[i])))
      err = SIP__OOM();

out:
  if (st)
    err = sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: model '%s': %s '%s'", path, kind, d->name);
  sip__ort->ReleaseTypeInfo(ti);
  return err;
}

static sip_error_t *describe_all(sip__ort_model_t *m, const char *path) {
  OrtAllocator *alloc = NULL;
  OrtStatus *st = sip__ort->GetAllocatorWithDefaultOptions(&alloc);
  if (!st) st = sip__ort->SessionGetInputCount(m->session, &m->n_inputs);
  if (!st) st = sip__ort->SessionGetOutputCount(m->session, &m->n_outputs);
  if (st) return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: model '%s'", path);
  /* Zeroed, so that a failure half way leaves only NULL names to free. */
  m->inputs = sip__calloc(m->n_inputs ? m->n_inputs : 1, sizeof *m->inputs);
  m->outputs = sip__calloc(m->n_outputs ? m->n_outputs : 1, sizeof *m->outputs);
  m->in_syms = sip__calloc(m->n_inputs ? m->n_inputs : 1, sizeof *m->in_syms);
  m->out_syms = sip__calloc(m->n_outputs ? m->n_outputs : 1, sizeof *m->out_syms);
  if (!m->inputs || !m->outputs || !m->in_syms || !m->out_syms) return SIP__OOM();
  for (size_t i = 0; i < m->n_inputs; i++) {
    sip_error_t *err = describe_one(m->session, alloc, 1, i, path, &m->inputs[i], &m->in_syms[i]);
    if (err) return err;
  }
  for (size_t i = 0; i < m->n_outputs; i++) {
    sip_error_t *err =
        describe_one(m->session, alloc, 0, i, path, &m->outputs[i], &m->out_syms[i]);
    if (err) return err;
  }
  return NULL;
}

/* The session options a model is loaded with (*so owned on success). */
static OrtStatus *session_options(const sip__ort_load_options_t *lo, OrtSessionOptions **so) {
  *so = NULL;
  OrtStatus *st = sip__ort->CreateSessionOptions(so);
  if (!st && !lo->own_threads) st = sip__ort->DisablePerSessionThreads(*so);
  if (!st && lo->own_threads) st = sip__ort->SetIntraOpNumThreads(*so, lo->own_threads);
  if (!st && lo->own_threads) st = sip__ort->SetInterOpNumThreads(*so, 1);
  if (!st) st = sip__ort->SetSessionGraphOptimizationLevel(*so, lo->opt_level);
  if (!st && lo->mem_arena >= 0)
    st = lo->mem_arena ? sip__ort->EnableCpuMemArena(*so) : sip__ort->DisableCpuMemArena(*so);
  if (!st && lo->mem_pattern >= 0)
    st = lo->mem_pattern ? sip__ort->EnableMemPattern(*so) : sip__ort->DisableMemPattern(*so);
  /* A quota: the model's memory comes from the accounting allocator
   * registered with the env (onnxruntime_quota.cc). */
  if (!st && lo->max_memory_mb >= 0)
    st = sip__ort->AddSessionConfigEntry(*so, "session.use_env_allocators", "1");
  if (!st) st = sip__ort_append_providers(lo, *so);
  if (st && *so) {
    sip__ort->ReleaseSessionOptions(*so);
    *so = NULL;
  }
  return st;
}

static sip_error_t *ort_load(void *backend_state, const char *path, const sip_kv_t *options,
                             size_t n_options, void **model) {
  *model = NULL;
  sip__ort_backend_t *be = backend_state;
  if (!be || !be->env)
    return sip_error_new(SIP_FAILED_PRECONDITION, "onnxruntime: load called before init");
  if (!path || !*path)
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: a model_path is required");

  sip__ort_load_options_t lo;
  sip_error_t *err = sip__ort_parse_options(options, n_options, &lo);
  if (!err) err = check_model_file(path);
  if (err) {
    sip__ort_load_options_clear(&lo);
    return err;
  }

  OrtSessionOptions *so = NULL;
  OrtStatus *st = session_options(&lo, &so);
  if (st) {
    sip__ort_load_options_clear(&lo);
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: session options for '%s'", path);
  }

  /* What the model holds from load on (weights it copies) is charged to
   * its account too. */
  sip__ort_quota_t *q = NULL;
  if (lo.max_memory_mb >= 0 && !(q = sip__ort_quota_new((uint64_t)lo.max_memory_mb << 20))) {
    sip__ort->ReleaseSessionOptions(so);
    sip__ort_load_options_clear(&lo);
    return SIP__OOM();
  }
  OrtSession *sess = NULL;
  sip__ort_quota_t *prev = sip__ort_quota_enter(q);
  st = sip__ort->CreateSession(be->env, path, so, &sess);
  sip__ort_quota_refusal_t refused = sip__ort_quota_refusal();
  sip__ort_quota_leave(prev);
  sip__ort->ReleaseSessionOptions(so);
  if (st) {
    sip__ort_load_options_clear(&lo);
    sip__ort_quota_unref(q);
    if (refused.refused)
      return sip__ort_status_error(st, SIP_RESOURCE_EXHAUSTED, "onnxruntime: model '%s' needs "
                                   "more than the pool's quota (resource_quota.max_memory_mb) of "
                                   "%lld MiB to load", path, (long long)(refused.limit >> 20));
    return sip__ort_status_error(st, load_code(st), "onnxruntime: cannot load model '%s'", path);
  }

  sip__ort_model_t *m = sip__calloc(1, sizeof *m);
  if (!m) {
    sip__ort_load_options_clear(&lo);
    sip__ort->ReleaseSession(sess);
    sip__ort_quota_unref(q);
    return SIP__OOM();
  }
  m->session = sess;
  m->quota = q;
  m->backend = be;
  m->lo = lo;
  atomic_fetch_add_explicit(&be->refs, 1, memory_order_relaxed);
  atomic_init(&m->refs, 1);
  err = (m->path = sip__strdup(path)) ? describe_all(m, path) : SIP__OOM();
  if (err) {
    sip__ort_model_unref(m);
    return err;
  }
  *model = m;
  return NULL;
}

static void ort_describe(void *model, const sip_io_desc_t **inputs, size_t *n_inputs,
                         const sip_io_desc_t **outputs, size_t *n_outputs) {
  const sip__ort_model_t *m = model;
  *inputs = m->inputs;
  *n_inputs = m->n_inputs;
  *outputs = m->outputs;
  *n_outputs = m->n_outputs;
}

void sip__ort_model_unref(sip__ort_model_t *m) {
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  if (m->session) sip__ort->ReleaseSession(m->session);
  sip__free(m->path);
  if (m->parent) { /* a profiled copy: the arrays are the parent's */
    sip__ort_model_unref(m->parent);
    backend_unref(m->backend);
    sip__free(m);
    return;
  }
  sip__ort_load_options_clear(&m->lo);
  sip__ort_quota_unref(m->quota); /* blocks still out keep the account */
  free_descs(m->inputs, m->n_inputs);
  free_descs(m->outputs, m->n_outputs);
  free_syms(m->in_syms, m->n_inputs);
  free_syms(m->out_syms, m->n_outputs);
  backend_unref(m->backend);
  sip__free(m);
}

/* Drops the loader's reference; sessions and outputs still alive keep the
 * OrtSession (and the describe arrays) until they go. */
static void ort_model_free(void *model) {
  if (model) sip__ort_model_unref(model);
}

/* ---- sessions ---------------------------------------------------------- */

static void ort_session_free(void *session) {
  sip__ort_session_t *s = session;
  if (!s) return;
  if (s->run_options) sip__ort->ReleaseRunOptions(s->run_options);
  if (s->mem_info) sip__ort->ReleaseMemoryInfo(s->mem_info);
  sip__ort_session_device_free(s);
  sip__free(s->in_names);
  sip__free(s->in_values);
  sip__free(s->out_values);
  sip__free(s->out_bound);
  if (s->model) sip__ort_model_unref(s->model);
  sip__free(s);
}

static sip_error_t *ort_session_new(void *model, void **session) {
  *session = NULL;
  sip__ort_model_t *m = model;
  sip__ort_session_t *s = sip__calloc(1, sizeof *s);
  if (!s) return SIP__OOM();
  s->model = m;
  atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
  s->in_names = sip__calloc(m->n_inputs ? m->n_inputs : 1, sizeof *s->in_names);
  s->in_values = sip__calloc(m->n_inputs ? m->n_inputs : 1, sizeof *s->in_values);
  s->out_values = sip__calloc(m->n_outputs ? m->n_outputs : 1, sizeof *s->out_values);
  s->out_bound = sip__calloc(m->n_outputs ? m->n_outputs : 1, sizeof *s->out_bound);
  if (!s->in_names || !s->in_values || !s->out_values || !s->out_bound) {
    ort_session_free(s);
    return SIP__OOM();
  }
  OrtStatus *st = sip__ort->CreateRunOptions(&s->run_options);
  if (!st) st = sip__ort->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &s->mem_info);
  if (!st) st = sip__ort->GetAllocatorWithDefaultOptions(&s->allocator);
  if (st) {
    ort_session_free(s);
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: cannot create a session");
  }
  sip_error_t *e = m->lo.device ? sip__ort_session_device(s) : NULL;
  if (e) {
    ort_session_free(s);
    return e;
  }
  *session = s;
  return NULL;
}

/* ---- operator profiling -------------------------------------------------- */

/* A context on a copy of the model's OrtSession made with ONNX Runtime's
 * profiler on (the shared OrtSession cannot turn it on for one context):
 * the model is read again from its file, with the same options. */
static sip_error_t *ort_session_new_profiled(void *model, const char *prefix, void **session) {
  *session = NULL;
  sip__ort_model_t *m = model;
  OrtSessionOptions *so = NULL;
  OrtStatus *st = session_options(&m->lo, &so);
  if (!st) st = sip__ort->EnableProfiling(so, prefix);
  OrtSession *sess = NULL;
  if (!st) st = sip__ort->CreateSession(m->backend->env, m->path, so, &sess);
  if (so) sip__ort->ReleaseSessionOptions(so);
  if (st)
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: cannot make a profiled session "
                                 "of '%s'", m->path);
  sip__ort_model_t *c = sip__calloc(1, sizeof *c);
  if (!c) {
    sip__ort->ReleaseSession(sess);
    return SIP__OOM();
  }
  *c = *m;
  c->session = sess;
  c->path = NULL;
  c->parent = m;
  atomic_init(&c->refs, 1);
  atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&m->backend->refs, 1, memory_order_relaxed);
  sip_error_t *e = ort_session_new(c, session);
  sip__ort_model_unref(c); /* the context holds it now (or nobody) */
  return e;
}

/* Stops the profiler of a profiled context and returns the trace it wrote
 * (Chrome trace JSON, owned), removing its file. */
static sip_error_t *ort_profile_end(void *session, char **trace) {
  *trace = NULL;
  sip__ort_session_t *s = session;
  char *path = NULL;
  OrtStatus *st = sip__ort->SessionEndProfiling(s->model->session, s->allocator, &path);
  if (st) return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: cannot end profiling");
  FILE *f = fopen(path, "rb");
  sip_error_t *e = NULL;
  if (!f) {
    e = sip_error_new(SIP_INTERNAL, "onnxruntime: the profile %s cannot be read: %s", path,
                      strerror(errno));
  } else {
    size_t n = 0, cap = 1 << 16;
    char *buf = sip__malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
      n += got;
      char *nb = n == cap ? sip__realloc(buf, (cap *= 2) + 1) : buf;
      if (!nb) sip__free(buf);
      buf = nb;
    }
    fclose(f);
    if (!buf) {
      e = SIP__OOM();
    } else {
      buf[n] = '\0';
      *trace = buf;
    }
  }
  unlink(path);
  s->allocator->Free(s->allocator, path);
  return e;
}

/* ---- formats -------------------------------------------------------------- */

/* An ONNX model is a protobuf ModelProto: claimed by its extension. */
static int ort_probe(const char *path) {
  const char *base = strrchr(path, '/');
  const char *dot = strrchr(base ? base + 1 : path, '.');
  return dot && !strcasecmp(dot, ".onnx");
}

static const char *const ort_files[] = {"model.onnx", NULL};

const sip_backend_vtable_t sip__backend_onnxruntime = {
    .name = "onnxruntime",
    .flags = SIP_BACKEND_NEEDS_FILE | SIP_BACKEND_MEMORY_ARENA | SIP_BACKEND_MEMORY_LIMIT,
    .platform = "onnxruntime_onnx",
    .init = ort_init,
    .shutdown = ort_shutdown,
    .load = ort_load,
    .describe = ort_describe,
    .session_new = ort_session_new,
    .execute = sip__ort_execute,
    .execute_into = sip__ort_execute_into,
    .session_free = ort_session_free,
    .model_free = ort_model_free,
    .session_new_profiled = ort_session_new_profiled,
    .profile_end = ort_profile_end,
    .probe = ort_probe,
    .default_files = ort_files,
    .options = sip__ort_options,
    .n_options = SIP__ORT_N_OPTIONS,
    .check_options = sip__ort_check_options,
    .memory = sip__ort_memory,
    .alloc = sip__ort_alloc,
    .copy = sip__ort_copy,
    .memory_limit = sip__ort_memory_limit,
};
