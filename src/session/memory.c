/* sip — tensors between memory types: the one place host↔device copies
 * happen (sip__tensor_to_memory), counted per pool, and the wrapper a pool
 * runs a device backend through (its vtable's execute puts inputs where
 * the backend's memory hook wants them and brings device outputs back to
 * host memory; see include/sip/backend.h). Backends that keep everything
 * in host memory are never wrapped: their requests copy nothing. */
#include <string.h>

#include "core/core.h"
#include "session/memory.h"

const char *sip__copy_direction_name(int dir) {
  return dir == SIP__COPY_TO_DEVICE ? "host_to_device" : "device_to_host";
}

sip_error_t *sip__tensor_to_memory(const sip_backend_vtable_t *vt, void *model,
                                   const sip_tensor_t *src, sip_memory_type_t type, int device,
                                   sip__copy_counters_t *cnt, sip_tensor_t **out) {
  *out = NULL;
  if (src->dtype == SIP_DTYPE_STRING && type == SIP_MEMORY_DEVICE)
    return sip_error_new(SIP_INVALID_ARGUMENT, "tensor '%s': string tensors cannot be put in "
                         "device memory; expected the backend to take them in host memory",
                         src->name ? src->name : "");
  sip_buf_t *buf = NULL;
  sip_error_t *e = NULL;
  int hooks = vt && vt->alloc && vt->copy;
  if (type == SIP_MEMORY_CPU || !hooks) {
    if (type != SIP_MEMORY_CPU)
      return sip_error_new(SIP_FAILED_PRECONDITION, "backend '%s' names %s memory but has no "
                           "alloc/copy hooks", vt ? vt->name : "-", sip_memory_type_name(type));
    if (!(buf = sip_buf_new(src->nbytes))) return SIP__OOM();
  } else if ((e = vt->alloc(model, type, device, src->nbytes, &buf))) {
    return e;
  }
  void *dst = sip_buf_data(buf);
  if (src->memory_type == SIP_MEMORY_DEVICE || type == SIP_MEMORY_DEVICE) {
    if (!hooks)
      e = sip_error_new(SIP_FAILED_PRECONDITION, "tensor '%s' is in device memory but backend "
                        "'%s' has no copy hook", src->name ? src->name : "", vt ? vt->name : "-");
    else
      e = vt->copy(model, dst, type, device, src->data, src->memory_type, src->device_id,
                   src->nbytes);
  } else if (src->nbytes) {
    memcpy(dst, src->data, src->nbytes);
  }
  if (e) {
    sip_buf_unref(buf);
    return e;
  }
  if (cnt) {
    /* Host to host (pinned staging) counts as going towards the device. */
    int dir = type == SIP_MEMORY_CPU ? SIP__COPY_TO_HOST : SIP__COPY_TO_DEVICE;
    atomic_fetch_add_explicit(&cnt->copies[dir], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&cnt->bytes[dir], src->nbytes, memory_order_relaxed);
  }
  *out = sip_tensor_new_view(src->name, src->dtype, src->rank, src->dims, dst, src->nbytes, buf);
  sip_buf_unref(buf);
  if (!*out) return SIP__OOM();
  (*out)->memory_type = type;
  (*out)->device_id = type == SIP_MEMORY_DEVICE ? device : 0;
  return NULL;
}

int sip__memory_needs_copies(const sip_backend_vtable_t *vt, void *model) {
  if (!vt->memory) return 0;
  const sip_io_desc_t *ins, *outs;
  size_t n_in, n_out;
  vt->describe(model, &ins, &n_in, &outs, &n_out);
  for (int io = 0; io < 2; io++)
    for (size_t i = 0; i < (io ? n_out : n_in); i++) {
      sip_memory_type_t t = SIP_MEMORY_CPU;
      int d = 0;
      vt->memory(model, !io, i, &t, &d);
      if (t != SIP_MEMORY_CPU) return 1;
    }
  return 0;
}

/* ---- the wrapper -------------------------------------------------------------- */

typedef struct wrap {
  const sip_backend_vtable_t *real;
  void *model;
  sip__copy_counters_t *cnt;
  size_t n_in;
  const sip_io_desc_t *ins;
} wrap_t;

typedef struct wrap_session {
  wrap_t *w;
  void *ctx;
} wrap_session_t;

static void w_describe(void *model, const sip_io_desc_t **inputs, size_t *n_inputs,
                       const sip_io_desc_t **outputs, size_t *n_outputs) {
  wrap_t *w = model;
  w->real->describe(w->model, inputs, n_inputs, outputs, n_outputs);
}

static void w_memory_limit(void *model, int64_t max_memory_mb) {
  wrap_t *w = model;
  w->real->memory_limit(w->model, max_memory_mb);
}

static const char *w_batch_problem(void *model) {
  wrap_t *w = model;
  return w->real->batch_problem ? w->real->batch_problem(w->model) : NULL;
}

static void w_model_free(void *model) {
  wrap_t *w = model;
  if (!w) return;
  w->real->model_free(w->model);
  sip__free(w);
}

void sip__memory_unwrap(void *wrapped) { sip__free(wrapped); }

static sip_error_t *wrap_ctx(wrap_t *w, void *ctx, void **session) {
  wrap_session_t *s = sip__calloc(1, sizeof *s);
  if (!s) {
    w->real->session_free(ctx);
    return SIP__OOM();
  }
  s->w = w;
  s->ctx = ctx;
  *session = s;
  return NULL;
}

static sip_error_t *w_session_new(void *model, void **session) {
  wrap_t *w = model;
  void *ctx = NULL;
  *session = NULL;
  sip_error_t *e = w->real->session_new(w->model, &ctx);
  return e ? e : wrap_ctx(w, ctx, session);
}

static sip_error_t *w_session_new_profiled(void *model, const char *prefix, void **session) {
  wrap_t *w = model;
  void *ctx = NULL;
  *session = NULL;
  sip_error_t *e = w->real->session_new_profiled(w->model, prefix, &ctx);
  return e ? e : wrap_ctx(w, ctx, session);
}

static sip_error_t *w_profile_end(void *session, char **trace) {
  wrap_session_t *s = session;
  return s->w->real->profile_end(s->ctx, trace);
}

static void w_session_free(void *session) {
  wrap_session_t *s = session;
  if (!s) return;
  s->w->real->session_free(s->ctx);
  sip__free(s);
}

/* The index of input `t` among the model's (by name; else its position). */
static size_t input_index(const wrap_t *w, const sip_tensor_t *t, size_t pos) {
  for (size_t i = 0; t->name && i < w->n_in; i++)
    if (!strcmp(w->ins[i].name, t->name)) return i;
  return pos;
}

static sip_error_t *w_execute(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                              const char *const *out_names, size_t n_outputs,
                              sip_tensor_t **outputs) {
  wrap_session_t *s = session;
  wrap_t *w = s->w;
  sip_tensor_t *moved_stack[16], **moved = moved_stack;
  const sip_tensor_t *use_stack[16] = {0}, **use = use_stack;
  if (n_inputs > 16) {
    moved = sip__calloc(n_inputs, sizeof *moved);
    use = sip__calloc(n_inputs, sizeof *use);
    if (!moved || !use) {
      if (moved != moved_stack) sip__free(moved);
      if (use != use_stack) sip__free(use);
      return SIP__OOM();
    }
  }
  sip_error_t *e = NULL;
  for (size_t i = 0; i < n_inputs; i++) moved[i] = NULL;
  for (size_t i = 0; i < n_inputs && !e; i++) {
    sip_memory_type_t t = SIP_MEMORY_CPU;
    int d = 0;
    w->real->memory(w->model, 1, input_index(w, inputs[i], i), &t, &d);
    use[i] = inputs[i];
    if (t == inputs[i]->memory_type && (t != SIP_MEMORY_DEVICE || d == inputs[i]->device_id))
      continue;
    e = sip__tensor_to_memory(w->real, w->model, inputs[i], t, d, w->cnt, &moved[i]);
    use[i] = moved[i];
  }
  if (!e) e = w->real->execute(s->ctx, use, n_inputs, out_names, n_outputs, outputs);
  /* Outputs in device memory come back to host memory for the response. */
  for (size_t j = 0; !e && j < n_outputs; j++) {
    if (!outputs[j] || outputs[j]->memory_type == SIP_MEMORY_CPU) continue;
    sip_tensor_t *host = NULL;
    e = sip__tensor_to_memory(w->real, w->model, outputs[j], SIP_MEMORY_CPU, 0, w->cnt, &host);
    if (!e) {
      sip_tensor_free(outputs[j]);
      outputs[j] = host;
    } else {
      for (size_t k = 0; k < n_outputs; k++) {
        sip_tensor_free(outputs[k]);
        outputs[k] = NULL;
      }
    }
  }
  for (size_t i = 0; i < n_inputs; i++) sip_tensor_free(moved[i]);
  if (moved != moved_stack) sip__free(moved);
  if (use != use_stack) sip__free(use);
  return e;
}

sip_error_t *sip__memory_wrap(const sip_backend_vtable_t *real, void *model,
                              sip__copy_counters_t *cnt, sip_backend_vtable_t *vt,
                              void **out_model) {
  wrap_t *w = sip__calloc(1, sizeof *w);
  if (!w) return SIP__OOM();
  w->real = real;
  w->model = model;
  w->cnt = cnt;
  const sip_io_desc_t *outs;
  size_t n_out;
  real->describe(model, &w->ins, &w->n_in, &outs, &n_out);
  /* Everything a pool calls, forwarded; memory hooks are the wrapper's
   * own business, so the engine sees a host-memory backend. */
  *vt = (sip_backend_vtable_t){
      .name = real->name,
      .flags = real->flags,
      .platform = real->platform,
      .load = real->load,
      .describe = w_describe,
      .session_new = w_session_new,
      .execute = w_execute,
      .session_free = w_session_free,
      .model_free = w_model_free,
      .batch_problem = w_batch_problem,
      .session_new_profiled = real->session_new_profiled ? w_session_new_profiled : NULL,
      .profile_end = real->profile_end ? w_profile_end : NULL,
      .memory_limit = real->memory_limit ? w_memory_limit : NULL,
      .probe = real->probe,
      .default_files = real->default_files,
      .options = real->options,
      .n_options = real->n_options,
      .check_options = real->check_options,
  };
  *out_model = w;
  return NULL;
}
