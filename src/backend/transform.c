/* sip — the `transform` backend: serves one transform operation
 * (src/ops/transforms.h) as a pool, so every operation can be called
 * like a model and tested end to end.
 *
 *   - name: resize_32x48
 *     backend: transform
 *     backend_options: {operation: resize, size: "32,48"}
 *
 * `operation` picks the operation; every other option goes to it. No
 * model_path is needed. The transform is created once at load and is
 * immutable, so all sessions of the pool share it without locking. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "ops/transforms.h"
#include "sip/backend.h"

static sip_error_t *load(void *state, const char *path, const sip_kv_t *opts, size_t n_opts,
                         void **out) {
  (void)state;
  (void)path;
  const char *op = NULL;
  sip_kv_t *rest = sip__calloc(n_opts, sizeof *rest);
  if (!rest) return SIP__OOM();
  size_t n = 0;
  for (size_t i = 0; i < n_opts; i++) {
    if (opts[i].key && !strcmp(opts[i].key, "operation"))
      op = opts[i].value;
    else
      rest[n++] = opts[i];
  }
  sip_error_t *e = NULL;
  if (!op)
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "transform backend needs backend_options.operation; expected one of: %s",
                      sip__transform_op_names());
  else
    e = sip__transform_new(op, rest, n, (sip__transform_t **)out);
  sip__free(rest);
  return e;
}

static void describe(void *model, const sip_io_desc_t **in, size_t *n_in,
                     const sip_io_desc_t **out, size_t *n_out) {
  sip__transform_describe(model, in, n_in, out, n_out);
}

static sip_error_t *session_new(void *model, void **session) {
  *session = model;
  return NULL;
}

static sip_error_t *execute(void *session, const sip_tensor_t *const *inputs, size_t n_inputs,
                            const char *const *out_names, size_t n_outputs,
                            sip_tensor_t **outputs) {
  const sip__transform_t *t = session;
  sip_tensor_t **all;
  size_t n_all;
  sip_error_t *e = sip__transform_run(t, inputs, n_inputs, &all, &n_all);
  if (e) return e;
  /* Hand over the requested outputs, in the requested order; drop the rest. */
  size_t filled = 0;
  for (; filled < n_outputs; filled++) {
    outputs[filled] = NULL;
    for (size_t j = 0; j < n_all && !outputs[filled]; j++)
      if (all[j] && !strcmp(all[j]->name, out_names[filled])) {
        outputs[filled] = all[j];
        all[j] = NULL;
      }
    if (!outputs[filled]) {
      e = sip_error_new(SIP_INVALID_ARGUMENT, "transform %s has no output '%s'",
                        sip__transform_op(t), out_names[filled]);
      break;
    }
  }
  if (e)
    for (size_t i = 0; i < filled; i++) {
      sip_tensor_free(outputs[i]);
      outputs[i] = NULL;
    }
  sip__transform_outputs_free(all, n_all);
  return e;
}

static void session_free(void *session) { (void)session; }

static void model_free(void *model) { sip__transform_free(model); }

/* Only transforms that work row by row may have requests concatenated.
 * The text lives until this thread asks again. */
static const char *batch_problem(void *model) {
  static _Thread_local char why[256];
  const char *p = sip__transform_batch_problem(model);
  if (!p) return NULL;
  snprintf(why, sizeof why, "transform %s: %s", sip__transform_op(model), p);
  return why;
}

const sip_backend_vtable_t sip__backend_transform = {
    .name = "transform",
    .flags = SIP_BACKEND_PATH_OPTIONS,
    .batch_problem = batch_problem,
    .load = load,
    .describe = describe,
    .session_new = session_new,
    .execute = execute,
    .session_free = session_free,
    .model_free = model_free,
};
