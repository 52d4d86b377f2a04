/* sip — the ONNX Runtime backend on a device (execution_providers with cuda
 * or tensorrt first): where its tensors live (the memory hook), device and
 * pinned memory and the copies between them (through the CUDA runtime,
 * loaded when first needed: the library the CUDA provider itself needs),
 * and execution through an OrtIoBinding so inputs already in device memory
 * are read in place and outputs stay there (the engine copies them back,
 * counted: src/session/memory.c). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "onnxruntime_c_api.h"

#include "backend/onnxruntime_impl.h"
#include "core/core.h"

/* ---- the CUDA runtime ------------------------------------------------------ */

typedef struct cudart {
  int (*set_device)(int);
  int (*malloc_)(void **, size_t);
  int (*free_)(void *);
  int (*malloc_host)(void **, size_t);
  int (*free_host)(void *);
  int (*memcpy_)(void *, const void *, size_t, int);
  const char *(*error_string)(int);
} cudart_t;

enum { CUDA_MEMCPY_DEFAULT = 4 }; /* cudaMemcpyDefault: direction from the pointers (UVA) */

static cudart_t rt;
static const char *rt_missing; /* why the runtime is unavailable, or NULL */
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

static void rt_load(void) {
  static const char *const names[] = {"libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
  void *h = NULL;
  for (size_t i = 0; !h && i < sizeof names / sizeof names[0]; i++) h = dlopen(names[i], RTLD_NOW);
  if (!h) {
    rt_missing = "the CUDA runtime (libcudart.so.12) cannot be loaded";
    return;
  }
  *(void **)&rt.set_device = dlsym(h, "cudaSetDevice");
  *(void **)&rt.malloc_ = dlsym(h, "cudaMalloc");
  *(void **)&rt.free_ = dlsym(h, "cudaFree");
  *(void **)&rt.malloc_host = dlsym(h, "cudaMallocHost");
  *(void **)&rt.free_host = dlsym(h, "cudaFreeHost");
  *(void **)&rt.memcpy_ = dlsym(h, "cudaMemcpy");
  *(void **)&rt.error_string = dlsym(h, "cudaGetErrorString");
  if (!rt.set_device || !rt.malloc_ || !rt.free_ || !rt.malloc_host || !rt.free_host ||
      !rt.memcpy_ || !rt.error_string)
    rt_missing = "the CUDA runtime lacks cudaMalloc/cudaMemcpy";
}

static sip_error_t *rt_ready(void) {
  pthread_once(&rt_once, rt_load);
  return rt_missing ? sip_error_new(SIP_FAILED_PRECONDITION, "onnxruntime: %s", rt_missing) : NULL;
}

static sip_error_t *rt_check(int rc, const char *what, size_t size) {
  if (!rc) return NULL;
  return sip_error_new(rc == 2 ? SIP_RESOURCE_EXHAUSTED : SIP_INTERNAL,
                       "onnxruntime: %s of %zu bytes failed: %s", what, size, rt.error_string(rc));
}

/* ---- the hooks ----------------------------------------------------------------- */

void sip__ort_memory(void *model, int is_input, size_t index, sip_memory_type_t *type,
                     int *device_id) {
  const sip__ort_model_t *m = model;
  const sip_io_desc_t *d = is_input ? (index < m->n_inputs ? &m->inputs[index] : NULL)
                                    : (index < m->n_outputs ? &m->outputs[index] : NULL);
  int dev = m->lo.device && (!d || d->dtype != SIP_DTYPE_STRING);
  *type = dev ? SIP_MEMORY_DEVICE : SIP_MEMORY_CPU;
  *device_id = dev ? m->lo.device_id : 0;
}

typedef struct dev_block {
  void *p;
  sip_memory_type_t type;
} dev_block_t;

static void release_block(void *ctx) {
  dev_block_t *b = ctx;
  if (b->type == SIP_MEMORY_DEVICE) rt.free_(b->p);
  else rt.free_host(b->p);
  sip__free(b);
}

sip_error_t *sip__ort_alloc(void *model, sip_memory_type_t type, int device_id, size_t size,
                            sip_buf_t **out) {
  (void)model;
  *out = NULL;
  if (type == SIP_MEMORY_CPU) return (*out = sip_buf_new(size)) ? NULL : SIP__OOM();
  sip_error_t *e = rt_ready();
  if (e) return e;
  dev_block_t *b = sip__calloc(1, sizeof *b);
  if (!b) return SIP__OOM();
  b->type = type;
  int rc = rt.set_device(device_id);
  if (!rc) rc = type == SIP_MEMORY_DEVICE ? rt.malloc_(&b->p, size ? size : 1)
                                          : rt.malloc_host(&b->p, size ? size : 1);
  if ((e = rt_check(rc, type == SIP_MEMORY_DEVICE ? "cudaMalloc" : "cudaMallocHost", size))) {
    sip__free(b);
    return e;
  }
  *out = sip_buf_wrap(b->p, size, release_block, b);
  return *out ? NULL : SIP__OOM();
}

sip_error_t *sip__ort_copy(void *model, void *dst, sip_memory_type_t dst_type, int dst_device,
                           const void *src, sip_memory_type_t src_type, int src_device,
                           size_t size) {
  (void)model;
  if (!size) return NULL;
  if (dst_type != SIP_MEMORY_DEVICE && src_type != SIP_MEMORY_DEVICE) {
    memcpy(dst, src, size);
    return NULL;
  }
  sip_error_t *e = rt_ready();
  if (e) return e;
  int rc = rt.set_device(dst_type == SIP_MEMORY_DEVICE ? dst_device : src_device);
  if (!rc) rc = rt.memcpy_(dst, src, size, CUDA_MEMCPY_DEFAULT);
  return rt_check(rc, "cudaMemcpy", size);
}

/* ---- sessions on a device ------------------------------------------------------ */

sip_error_t *sip__ort_session_device(sip__ort_session_t *s) {
  OrtStatus *st = sip__ort->CreateMemoryInfo("Cuda", OrtDeviceAllocator, s->model->lo.device_id,
                                             OrtMemTypeDefault, &s->dev_mem_info);
  if (!st) st = sip__ort->CreateIoBinding(s->model->session, &s->binding);
  if (st)
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: device %d: cannot bind memory",
                                 s->model->lo.device_id);
  return NULL;
}

void sip__ort_session_device_free(sip__ort_session_t *s) {
  if (s->binding) sip__ort->ReleaseIoBinding(s->binding);
  if (s->dev_mem_info) sip__ort->ReleaseMemoryInfo(s->dev_mem_info);
  s->binding = NULL;
  s->dev_mem_info = NULL;
}

/* The model's output `name` is a string (those stay in host memory). */
static int string_output(const sip__ort_model_t *m, const char *name) {
  for (size_t j = 0; j < m->n_outputs; j++)
    if (!strcmp(m->outputs[j].name, name)) return m->outputs[j].dtype == SIP_DTYPE_STRING;
  return 0;
}

sip_error_t *sip__ort_run_bound(sip__ort_session_t *s, size_t n_inputs, const char *const *out_names,
                                size_t n_outputs) {
  sip__ort_model_t *m = s->model;
  OrtStatus *st = NULL;
  sip__ort->ClearBoundInputs(s->binding);
  sip__ort->ClearBoundOutputs(s->binding);
  for (size_t i = 0; !st && i < n_inputs; i++)
    st = sip__ort->BindInput(s->binding, s->in_names[i], s->in_values[i]);
  for (size_t j = 0; !st && j < n_outputs; j++)
    st = sip__ort->BindOutputToDevice(s->binding, out_names[j],
                                      string_output(m, out_names[j]) ? s->mem_info
                                                                     : s->dev_mem_info);
  if (!st) st = sip__ort->RunWithBinding(m->session, s->run_options, s->binding);
  if (!st) st = sip__ort->SynchronizeBoundOutputs(s->binding);
  OrtValue **vals = NULL;
  size_t n = 0;
  if (!st) st = sip__ort->GetBoundOutputValues(s->binding, s->allocator, &vals, &n);
  sip_error_t *e = NULL;
  if (st) {
    e = sip__ort_status_error(st, sip__ort->GetErrorCode(st) == ORT_INVALID_ARGUMENT
                                      ? SIP_INVALID_ARGUMENT : SIP_INTERNAL,
                              "onnxruntime: run on device %d failed", m->lo.device_id);
  } else if (n != n_outputs) {
    e = sip_error_new(SIP_INTERNAL, "onnxruntime: %zu bound outputs for %zu requested", n,
                      n_outputs);
    for (size_t j = 0; j < n; j++) sip__ort->ReleaseValue(vals[j]);
  } else {
    for (size_t j = 0; j < n; j++) s->out_values[j] = vals[j];
  }
  if (vals) s->allocator->Free(s->allocator, vals);
  sip__ort->ClearBoundInputs(s->binding);
  sip__ort->ClearBoundOutputs(s->binding);
  return e;
}
