/* Helpers shared by the transform unit tests (test_transforms.c,
 * test_transforms_robust.c): build a transform, run it on one input, and
 * assert on errors. */
#ifndef SIP_TEST_TRANSFORM_HELPERS_H
#define SIP_TEST_TRANSFORM_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "ops/transform_impl.h" /* sip__tf_homography */
#include "ops/transforms.h"

#define KV(k, v) ((sip_kv_t){(k), (v)})

static inline sip__transform_t *make(const char *op, const sip_kv_t *kv, size_t n) {
  sip__transform_t *t = NULL;
  sip_error_t *e = sip__transform_new(op, kv, n, &t);
  if (e) fail_msg("sip__transform_new(%s): %s", op, sip_error_message(e));
  assert_non_null(t);
  return t;
}

/* Asserts that creating `op` fails with `code` and a message holding each
 * of the NULL-terminated fragments. */
static inline void expect_new_error(const char *op, const sip_kv_t *kv, size_t n, sip_code_t code, ...) {
  sip__transform_t *t = (sip__transform_t *)1;
  sip_error_t *e = sip__transform_new(op, kv, n, &t);
  assert_non_null(e);
  assert_null(t);
  if (sip_error_code(e) != code)
    fail_msg("%s: code %s, want %s: %s", op, sip_code_name(sip_error_code(e)), sip_code_name(code),
             sip_error_message(e));
  va_list ap;
  va_start(ap, code);
  for (const char *w; (w = va_arg(ap, const char *));)
    if (!strstr(sip_error_message(e), w)) fail_msg("'%s' not in: %s", w, sip_error_message(e));
  va_end(ap);
  sip_error_free(e);
}

static inline void expect_error(sip_error_t *e, sip_code_t code, const char *frag) {
  assert_non_null(e);
  if (sip_error_code(e) != code || !strstr(sip_error_message(e), frag))
    fail_msg("got %s '%s'; want %s with '%s'", sip_code_name(sip_error_code(e)),
             sip_error_message(e), sip_code_name(code), frag);
  sip_error_free(e);
}

static inline sip_tensor_t *tensor(const char *name, sip_dtype_t dt, int rank, const int64_t *dims,
                            const void *data) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  sip_tensor_t *t = sip_tensor_new_copy(name, dt, rank, dims, data, (size_t)n * sip_dtype_size(dt));
  assert_non_null(t);
  return t;
}

/* Runs with one input; returns the error (outputs freed) or NULL with *outs. */
static inline sip_error_t *run1(const sip__transform_t *t, const sip_tensor_t *in, sip_tensor_t ***outs,
                         size_t *n) {
  const sip_tensor_t *ins[1] = {in};
  return sip__transform_run(t, ins, 1, outs, n);
}

#endif
