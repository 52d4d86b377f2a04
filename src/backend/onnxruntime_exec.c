/* sip — the ONNX Runtime backend's execute: wraps the borrowed request
 * bytes as input OrtValues without a copy, runs the model's OrtSession, and
 * hands the output OrtValues' memory back zero-copy inside refcounted sip
 * buffers whose release drops the OrtValue. Only STRING tensors are
 * converted, because ORT stores them as std::string objects. Loading and
 * sessions are in src/backend/onnxruntime.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "onnxruntime_c_api.h"

#include "backend/onnxruntime_impl.h"
#include "core/core.h"
#include "sip/backend.h"

/* ORT needs a non-NULL data pointer even for a 0-byte tensor (empty dims or
 * an absent payload); this stands in for one. Never written. */
static int64_t empty_data[1];

/* Running: ORT says INVALID_ARGUMENT for inputs it rejects (shape, type,
 * unknown name); that is the client's fault. Anything else is ours. */
static sip_code_t run_code(OrtStatus *st) {
  return sip__ort->GetErrorCode(st) == ORT_INVALID_ARGUMENT ? SIP_INVALID_ARGUMENT : SIP_INTERNAL;
}


/* Bytes per element of the fixed-size types; 0 for STRING and the rest. Kept
 * local because it also decides what execute accepts. */
static size_t elem_size(sip_dtype_t dt) {
  switch (dt) {
    case SIP_DTYPE_BOOL:
    case SIP_DTYPE_INT8:
    case SIP_DTYPE_UINT8: return 1;
    case SIP_DTYPE_INT16:
    case SIP_DTYPE_UINT16:
    case SIP_DTYPE_FLOAT16: return 2;
    case SIP_DTYPE_INT32:
    case SIP_DTYPE_UINT32:
    case SIP_DTYPE_FLOAT32: return 4;
    case SIP_DTYPE_INT64:
    case SIP_DTYPE_UINT64:
    case SIP_DTYPE_FLOAT64: return 8;
    default: return 0;
  }
}


/* Element count of a shape; -1 when a dim is negative or the product
 * overflows (so a hostile shape cannot wrap the byte size). */
static int64_t shape_count(const int64_t *dims, size_t rank) {
  int64_t n = 1;
  for (size_t i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    if (dims[i] != 0 && n > INT64_MAX / dims[i]) return -1;
    n *= dims[i];
  }
  return n;
}


/* ---- execute: inputs --------------------------------------------------- */

static uint32_t get_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

/* Builds an ORT string tensor from sip's packed form (u32 LE length +
 * bytes per element). Each element is written straight into ORT's
 * std::string buffer, so embedded NULs survive and no NUL-terminated
 * temporaries are needed. */
static sip_error_t *make_string_input(sip__ort_session_t *s, const sip_tensor_t *t, const char *name,
                                      int64_t count, OrtValue **out) {
  OrtValue *v = NULL;
  OrtStatus *st = sip__ort->CreateTensorAsOrtValue(s->allocator, t->dims, (size_t)t->rank,
                                              ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, &v);
  if (st) return sip__ort_status_error(st, run_code(st), "onnxruntime: input '%s'", name);
  const unsigned char *p = t->data, *end = p ? p + t->nbytes : p;
  for (int64_t i = 0; i < count; i++) {
    if (!p || end - p < 4) goto malformed;
    uint32_t len = get_le32(p);
    p += 4;
    if ((size_t)(end - p) < len) goto malformed;
    char *dst = NULL;
    st = sip__ort->GetResizedStringTensorElementBuffer(v, (size_t)i, len, &dst);
    if (st) {
      sip__ort->ReleaseValue(v);
      return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: input '%s' element %lld", name,
                          (long long)i);
    }
    if (len) memcpy(dst, p, len);
    p += len;
  }
  if (p != end) goto malformed;
  *out = v;
  return NULL;
malformed:
  sip__ort->ReleaseValue(v);
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "onnxruntime: string input '%s' does not hold exactly %lld packed elements "
                       "(u32 little-endian length + bytes each) in %zu bytes",
                       name, (long long)count, t->nbytes);
}

static sip_error_t *make_input(sip__ort_session_t *s, const sip_tensor_t *t, const char *name,
                               OrtValue **out) {
  if (t->rank < 0 || t->rank > SIP_MAX_RANK)
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: input '%s' has rank %d", name,
                         t->rank);
  int64_t count = shape_count(t->dims, (size_t)t->rank);
  if (count < 0)
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: input '%s' has an invalid shape",
                         name);
  if (t->dtype == SIP_DTYPE_STRING) return make_string_input(s, t, name, count, out);

  size_t es = elem_size(t->dtype);
  if (!es)
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: input '%s' has unsupported dtype %d",
                         name, (int)t->dtype);
  if ((uint64_t)count > SIZE_MAX / es || (size_t)count * es != t->nbytes || (t->nbytes && !t->data))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "onnxruntime: input '%s' has %zu bytes of data; its shape and dtype need "
                         "%llu",
                         name, t->nbytes, (unsigned long long)count * es);
  /* Zero-copy: ORT reads the caller's bytes in place and never writes an
   * input, so dropping const is safe. */
  void *data = t->nbytes ? (void *)t->data : (void *)empty_data;
  /* Device memory is read in place through the I/O binding (a session of a
   * model on that device); pinned memory is host memory to ORT. */
  const OrtMemoryInfo *mi = s->mem_info;
  if (t->memory_type == SIP_MEMORY_DEVICE) {
    if (!s->dev_mem_info || t->device_id != s->model->lo.device_id)
      return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: input '%s' is in the memory of "
                           "device %d; this model runs on %s", name, t->device_id,
                           s->dev_mem_info ? "another device" : "the CPU (host memory expected)");
    if (!t->nbytes)
      return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: input '%s' is empty device memory; "
                           "expected empty tensors in host memory", name);
    mi = s->dev_mem_info;
  }
  OrtStatus *st =
      sip__ort->CreateTensorWithDataAsOrtValue(mi, data, t->nbytes, t->dims, (size_t)t->rank,
                                          (ONNXTensorElementDataType)t->dtype, out);
  if (st) return sip__ort_status_error(st, run_code(st), "onnxruntime: input '%s'", name);
  return NULL;
}

/* ---- execute: outputs -------------------------------------------------- */

static void release_output(void *ctx) {
  sip__ort_output_ref_t *r = ctx;
  sip__ort->ReleaseValue(r->value);
  sip__ort_model_unref(r->model);
  sip__free(r);
}

/* True when `p` points into one of the request's borrowed input buffers.
 * ORT hands a feed straight back when a graph output *is* a graph input
 * (and alias kernels such as Reshape may do the same), and such an output
 * must not outlive the request's memory. */
static int points_into_inputs(const void *p, const sip_tensor_t *const *inputs, size_t n) {
  uintptr_t a = (uintptr_t)p;
  for (size_t i = 0; i < n; i++) {
    uintptr_t lo = (uintptr_t)inputs[i]->data;
    if (inputs[i]->dtype != SIP_DTYPE_STRING && inputs[i]->nbytes && a >= lo &&
        a - lo < inputs[i]->nbytes)
      return 1;
  }
  return 0;
}

/* Packs an ORT string tensor into sip's format in a fresh buffer. */
static sip_error_t *pack_strings(OrtValue *v, const char *name, size_t count, sip_buf_t **out) {
  size_t total = 0;
  OrtStatus *st = sip__ort->GetStringTensorDataLength(v, &total);
  if (st) return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: output '%s'", name);
  if (count > (SIZE_MAX - total) / 4)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "onnxruntime: output '%s' is too large", name);
  sip_buf_t *buf = sip_buf_new(4 * count + total);
  if (!buf) return SIP__OOM();
  unsigned char *p = sip_buf_data(buf), *end = p + 4 * count + total;
  for (size_t i = 0; i < count; i++) {
    size_t len = 0;
    st = sip__ort->GetStringTensorElementLength(v, i, &len);
    if (!st && (len > UINT32_MAX || (size_t)(end - p) < 4 || (size_t)(end - p) - 4 < len)) {
      sip_buf_unref(buf);
      return sip_error_new(SIP_INTERNAL,
                           "onnxruntime: output '%s' element %zu does not fit the packed format",
                           name, i);
    }
    if (!st) {
      put_le32(p, (uint32_t)len);
      p += 4;
      /* An empty string has nothing to copy (and p may sit at end). */
      if (len) st = sip__ort->GetStringTensorElement(v, len, i, p);
      p += len;
    }
    if (st) {
      sip_buf_unref(buf);
      return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: output '%s' element %zu", name, i);
    }
  }
  *out = buf;
  return NULL;
}

/* Turns one output OrtValue into a sip tensor. Always takes ownership of
 * `v`: on success it lives on inside the tensor's buffer (numeric) or is
 * released after packing (STRING); on failure it is released. */
static sip_error_t *make_output(sip__ort_model_t *m, OrtValue *v, const char *name,
                                const sip_tensor_t *const *inputs, size_t n_inputs,
                                sip_tensor_t **out) {
  sip_error_t *err = NULL;
  /* Outputs bound to a device (I/O binding) stay there: a view of them. */
  int on_device = 0;
  const OrtMemoryInfo *vmi = NULL;
  OrtStatus *mst = m->lo.device ? sip__ort->GetTensorMemoryInfo(v, &vmi) : NULL;
  if (mst) sip__ort->ReleaseStatus(mst);
  else if (vmi) {
    OrtMemoryInfoDeviceType dt_ = OrtMemoryInfoDeviceType_CPU;
    sip__ort->MemoryInfoGetDeviceType(vmi, &dt_);
    on_device = dt_ != OrtMemoryInfoDeviceType_CPU;
  }
  enum ONNXType otype = ONNX_TYPE_UNKNOWN;
  OrtStatus *st = sip__ort->GetValueType(v, &otype);
  if (st) {
    sip__ort->ReleaseValue(v);
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: output '%s'", name);
  }
  if (otype != ONNX_TYPE_TENSOR) {
    sip__ort->ReleaseValue(v);
    return sip_error_new(SIP_UNIMPLEMENTED,
                         "onnxruntime: output '%s' is a %s; sip returns only tensors", name,
                         sip__ort_type_name(otype));
  }
  ONNXTensorElementDataType et;
  const int64_t *shape = NULL;
  size_t rank = 0;
  /* Shape by reference: no allocation per output on the hot path. */
  st = sip__ort->GetTensorElementTypeAndShapeDataReference(v, &et, &shape, &rank);
  if (st) {
    sip__ort->ReleaseValue(v);
    return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: output '%s'", name);
  }
  sip_dtype_t dt = sip__ort_dtype(et);
  int64_t count = rank <= SIP_MAX_RANK ? shape_count(shape, rank) : -1;
  if (dt == SIP_DTYPE_INVALID || count < 0) {
    err = sip_error_new(SIP_UNIMPLEMENTED,
                        "onnxruntime: output '%s' (element type %d, rank %zu) cannot be returned "
                        "by sip",
                        name, (int)et, rank);
    sip__ort->ReleaseValue(v);
    return err;
  }
  /* Copy the dims now: `shape` dies with the value, which the STRING path
   * releases before the tensor is built. */
  int64_t dims[SIP_MAX_RANK];
  if (rank) memcpy(dims, shape, rank * sizeof *dims);

  sip_buf_t *buf = NULL;
  void *data = NULL;
  size_t nbytes = 0;
  if (dt == SIP_DTYPE_STRING) {
    err = pack_strings(v, name, (size_t)count, &buf);
    sip__ort->ReleaseValue(v);
    if (err) return err;
    data = sip_buf_data(buf);
    nbytes = sip_buf_len(buf);
  } else {
    size_t es = elem_size(dt);
    if ((uint64_t)count > SIZE_MAX / es) {
      sip__ort->ReleaseValue(v);
      return sip_error_new(SIP_INTERNAL, "onnxruntime: output '%s' is too large", name);
    }
    nbytes = (size_t)count * es;
    st = sip__ort->GetTensorMutableData(v, &data);
    if (st) {
      sip__ort->ReleaseValue(v);
      return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: output '%s'", name);
    }
    if (!data || !nbytes) {
      /* Empty outputs may have no storage; give consumers a valid pointer
       * and do not keep the value for nothing. */
      sip__ort->ReleaseValue(v);
      data = empty_data;
      nbytes = 0;
    } else if (!on_device && points_into_inputs(data, inputs, n_inputs)) {
      buf = sip_buf_new(nbytes);
      if (buf) memcpy(sip_buf_data(buf), data, nbytes);
      sip__ort->ReleaseValue(v);
      if (!buf) return SIP__OOM();
      data = sip_buf_data(buf);
    } else {
      /* Zero-copy: the buffer owns the OrtValue and a model reference
       * (sip_buf_wrap releases them itself when it cannot allocate). */
      sip__ort_output_ref_t *r = sip__malloc(sizeof *r);
      if (!r) {
        sip__ort->ReleaseValue(v);
        return SIP__OOM();
      }
      r->value = v;
      r->model = m;
      atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
      buf = sip_buf_wrap(data, nbytes, release_output, r);
      if (!buf) return SIP__OOM();
    }
  }
  *out = sip_tensor_new_view(name, dt, (int)rank, dims, data, nbytes, buf);
  sip_buf_unref(buf); /* the tensor holds its own reference; NULL is a no-op */
  if (*out && on_device && data != empty_data) {
    (*out)->memory_type = SIP_MEMORY_DEVICE;
    (*out)->device_id = m->lo.device_id;
  }
  return *out ? NULL : SIP__OOM();
}

/* ---- execute ----------------------------------------------------------- */

/* Output `name`'s shape before running, from the model's fixed dims and
 * its symbolic dims named like a dim of a given input; 0 when some dim
 * cannot be known. */
static int known_shape(const sip__ort_model_t *m, const char *name, const sip_tensor_t *const *inputs,
                       size_t n_inputs, sip_dtype_t *dt, int *rank, int64_t *dims) {
  size_t o = 0;
  while (o < m->n_outputs && strcmp(m->outputs[o].name, name)) o++;
  if (o == m->n_outputs || m->outputs[o].rank < 0) return 0;
  const sip_io_desc_t *d = &m->outputs[o];
  for (int k = 0; k < d->rank; k++) {
    dims[k] = d->dims[k];
    const char *sym = m->out_syms[o].name[k];
    for (size_t i = 0; dims[k] < 0 && sym && i < n_inputs; i++) {
      const sip_tensor_t *t = inputs[i];
      size_t mi = 0;
      while (mi < m->n_inputs && !(t->name ? !strcmp(m->inputs[mi].name, t->name) : mi == i)) mi++;
      for (int kk = 0; mi < m->n_inputs && kk < t->rank && kk < m->inputs[mi].rank; kk++) {
        const char *isym = m->in_syms[mi].name[kk];
        if (isym && !strcmp(isym, sym)) {
          dims[k] = t->dims[kk];
          break;
        }
      }
    }
    if (dims[k] < 0) return 0;
  }
  *dt = d->dtype;
  *rank = d->rank;
  return 1;
}

/* Pre-allocated outputs over the request's destinations, where an
 * output's shape is known and its bytes fit (s->out_values / out_bound). */
static void bind_destinations(sip__ort_session_t *s, const sip_tensor_t *const *inputs, size_t n_inputs,
                              const char *const *out_names, size_t n_outputs,
                              const sip_out_dest_t *dests) {
  for (size_t j = 0; dests && j < n_outputs; j++) {
    sip_dtype_t dt;
    int rank;
    int64_t dims[SIP_MAX_RANK];
    if (!dests[j].data ||
        !known_shape(s->model, out_names[j], inputs, n_inputs, &dt, &rank, dims))
      continue;
    size_t es = elem_size(dt);
    int64_t count = shape_count(dims, (size_t)rank);
    if (dt == SIP_DTYPE_STRING || !es || count <= 0 || (uint64_t)count > SIZE_MAX / es ||
        (size_t)count * es > dests[j].size || (uintptr_t)dests[j].data % es)
      continue;
    OrtValue *v = NULL;
    OrtStatus *st = sip__ort->CreateTensorWithDataAsOrtValue(
        s->mem_info, dests[j].data, (size_t)count * es, dims, (size_t)rank,
        (ONNXTensorElementDataType)dt, &v);
    if (st) {
      sip__ort->ReleaseStatus(st); /* written elsewhere and copied, as without one */
      continue;
    }
    s->out_values[j] = s->out_bound[j] = v;
  }
}

static void unbind_destinations(sip__ort_session_t *s, size_t n_outputs) {
  for (size_t j = 0; j < n_outputs; j++) {
    if (!s->out_bound[j]) continue;
    if (s->out_values[j] == s->out_bound[j]) s->out_values[j] = NULL;
    sip__ort->ReleaseValue(s->out_bound[j]);
    s->out_bound[j] = NULL;
  }
}

/* Output j written into its destination: a tensor viewing it. */
static sip_error_t *bound_output(sip__ort_session_t *s, size_t j, const char *name,
                                 const sip_out_dest_t *dest, sip_tensor_t **out) {
  ONNXTensorElementDataType et;
  const int64_t *shape = NULL;
  size_t rank = 0;
  OrtStatus *st =
      sip__ort->GetTensorElementTypeAndShapeDataReference(s->out_bound[j], &et, &shape, &rank);
  if (st) return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: output '%s'", name);
  sip_dtype_t dt = sip__ort_dtype(et);
  size_t nbytes = (size_t)shape_count(shape, rank) * elem_size(dt);
  *out = sip_tensor_new_view(name, dt, (int)rank, shape, dest->data, nbytes, dest->owner);
  return *out ? NULL : SIP__OOM();
}

static sip_error_t *run(sip__ort_session_t *s, const sip_tensor_t *const *inputs, size_t n_inputs,
                        const char *const *out_names, size_t n_outputs,
                        const sip_out_dest_t *dests, sip_tensor_t **outputs) {
  sip__ort_model_t *m = s->model;
  for (size_t j = 0; j < n_outputs; j++) outputs[j] = NULL;
  if (n_inputs > m->n_inputs)
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: %zu inputs given; the model has %zu",
                         n_inputs, m->n_inputs);
  if (n_outputs > m->n_outputs)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "onnxruntime: %zu outputs requested; the model has %zu", n_outputs,
                         m->n_outputs);

  sip_error_t *err = NULL;
  size_t built = 0, done = 0;
  /* Run fills only NULL slots with fresh values; the cleanup below relies on
   * every slot being NULL or ours. */
  for (size_t j = 0; j < n_outputs; j++) s->out_values[j] = s->out_bound[j] = NULL;
  for (; built < n_inputs; built++) {
    const sip_tensor_t *t = inputs[built];
    /* Inputs are matched by name, so their order is free; an unnamed one
     * falls back to the model's input at the same position. */
    const char *name = t->name ? t->name : m->inputs[built].name;
    s->in_names[built] = name;
    err = make_input(s, t, name, &s->in_values[built]);
    if (err) goto out;
  }

  if (s->binding) { /* a model on a device: its outputs stay there */
    err = sip__ort_run_bound(s, n_inputs, out_names, n_outputs);
    if (err) goto out;
    for (; done < n_outputs; done++) {
      OrtValue *v = s->out_values[done];
      s->out_values[done] = NULL;
      if ((err = make_output(m, v, out_names[done], inputs, n_inputs, &outputs[done]))) goto out;
    }
    goto out;
  }
  bind_destinations(s, inputs, n_inputs, out_names, n_outputs, dests);
  OrtStatus *st =
      sip__ort->Run(m->session, s->run_options, s->in_names, (const OrtValue *const *)s->in_values,
               n_inputs, out_names, n_outputs, s->out_values);
  int bound = 0;
  for (size_t j = 0; j < n_outputs; j++) bound |= s->out_bound[j] != NULL;
  if (st && bound) {
    /* A destination's shape guessed wrong (a model whose output does not
     * follow the named dim): run again with outputs of ORT's own. */
    sip__ort->ReleaseStatus(st);
    for (size_t j = 0; j < n_outputs; j++)
      if (s->out_values[j] != s->out_bound[j] && s->out_values[j]) {
        sip__ort->ReleaseValue(s->out_values[j]);
        s->out_values[j] = NULL;
      }
    unbind_destinations(s, n_outputs);
    st = sip__ort->Run(m->session, s->run_options, s->in_names,
                       (const OrtValue *const *)s->in_values, n_inputs, out_names, n_outputs,
                       s->out_values);
  }
  if (st) {
    err = sip__ort_status_error(st, run_code(st), "onnxruntime: run failed");
    goto out;
  }
  for (; done < n_outputs; done++) {
    OrtValue *v = s->out_values[done];
    s->out_values[done] = NULL; /* make_output owns it from here */
    if (!v) {
      err =
          sip_error_new(SIP_INTERNAL, "onnxruntime: output '%s' was not produced", out_names[done]);
      goto out;
    }
    if (v == s->out_bound[done]) /* released with the bindings below */
      err = bound_output(s, done, out_names[done], &dests[done], &outputs[done]);
    else
      err = make_output(m, v, out_names[done], inputs, n_inputs, &outputs[done]);
    if (err) goto out;
  }

out:
  for (size_t i = 0; i < built; i++) {
    sip__ort->ReleaseValue(s->in_values[i]);
    s->in_values[i] = NULL;
  }
  if (err) {
    /* Run may have produced values we never converted; and per the
     * contract no outputs stay allocated on failure. */
    for (size_t j = done; j < n_outputs; j++) {
      if (s->out_values[j] && s->out_values[j] != s->out_bound[j])
        sip__ort->ReleaseValue(s->out_values[j]);
      s->out_values[j] = NULL;
    }
    for (size_t j = 0; j < n_outputs; j++) {
      sip_tensor_free(outputs[j]);
      outputs[j] = NULL;
    }
  }
  unbind_destinations(s, n_outputs);
  return err;
}

/* run, with the model's blocks charged to its quota account: a block the
 * quota refused fails the run as RESOURCE_EXHAUSTED, naming the quota. */
static sip_error_t *run_capped(sip__ort_session_t *s, const sip_tensor_t *const *inputs,
                               size_t n_inputs, const char *const *out_names, size_t n_outputs,
                               const sip_out_dest_t *dests, sip_tensor_t **outputs) {
  sip__ort_quota_t *q = s->model->quota;
  if (!q) return run(s, inputs, n_inputs, out_names, n_outputs, dests, outputs);
  sip__ort_quota_t *prev = sip__ort_quota_enter(q);
  sip_error_t *e = run(s, inputs, n_inputs, out_names, n_outputs, dests, outputs);
  sip__ort_quota_refusal_t r = sip__ort_quota_refusal();
  sip__ort_quota_leave(prev);
  if (!e || !r.refused) return e;
  sip_error_free(e);
  return sip_error_new(SIP_RESOURCE_EXHAUSTED,
                       "the request needs more memory than the pool's quota allows: "
                       "resource_quota.max_memory_mb is %llu MiB, the model held %.1f MiB and "
                       "asked for %.1f MiB more; nothing was kept",
                       (unsigned long long)(r.limit >> 20), (double)r.used / 1048576.0,
                       (double)r.asked / 1048576.0);
}

sip_error_t *sip__ort_execute(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                              const char *const *out_names, size_t n_outputs,
                              sip_tensor_t **outputs) {
  return run_capped(session, inputs, n_inputs, out_names, n_outputs, NULL, outputs);
}

sip_error_t *sip__ort_execute_into(void *session, const sip_tensor_t *const *inputs,
                                   size_t n_inputs, const char *const *out_names,
                                   size_t n_outputs, const sip_out_dest_t *dests,
                                   sip_tensor_t **outputs) {
  return run_capped(session, inputs, n_inputs, out_names, n_outputs, dests, outputs);
}

void sip__ort_memory_limit(void *model, int64_t max_memory_mb) {
  sip__ort_model_t *m = model;
  if (m->quota)
    sip__ort_quota_set_limit(m->quota, max_memory_mb > 0 ? (uint64_t)max_memory_mb << 20 : 0);
}
