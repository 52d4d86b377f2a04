/* sip — evaluation of a parsed condition (src/ops/expr.c builds the tree,
 * src/ops/expr_impl.h holds it): a tree walk over the request's tensors,
 * looked up by reference through the caller's callback. Parsing already
 * rejected everything that could fail whatever the data, so what fails here
 * is the data: a missing output, an empty tensor for max(), a division by
 * zero. docs/expressions.md is the reference.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/expr_impl.h"

/* ---- evaluation ---------------------------------------------------------- */

typedef struct eval {
  const sip__expr_t *e;
  sip__expr_lookup_fn lookup;
  void *ctx;
  sip_error_t *err;
} eval_t;

/* The source text of node i, for messages: "%.*s" arguments. */
#define SPAN(v, n) (int)((n)->end - (n)->start > 60 ? 60 : (n)->end - (n)->start), (v)->e->text + (n)->start, \
                   ((n)->end - (n)->start > 60 ? "..." : "")

__attribute__((format(printf, 2, 3))) static int efail(eval_t *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  v->err = sip_error_newv(SIP_FAILED_PRECONDITION, fmt, ap);
  va_end(ap);
  return -1;
}

static void shape_str(const sip_tensor_t *t, char *buf, size_t size) {
  sip__shape_str(buf, size, t->rank, t->dims, ", ");
}

/* Looks up reference r and checks its rank and dims; *count its elements. */
static int get_tensor(eval_t *v, int32_t r, const sip_tensor_t **out, int64_t *count) {
  const sip__ref_t *ref = &v->e->refs[r];
  const sip_tensor_t *t = v->lookup(v->ctx, ref->stage, ref->output);
  if (!t)
    return efail(v, "%s is not available: stage '%s' did not run (skipped or not reached) or has no output '%s'",
                 ref->full, ref->stage, ref->output);
  int64_t n = t->rank >= 0 && t->rank <= SIP_MAX_RANK ? sip_tensor_count(t) : -1;
  if (n < 0) return efail(v, "%s has an invalid shape (rank %d)", ref->full, t->rank);
  *out = t;
  *count = n;
  return 0;
}

#define CHUNK 256

/* Converts n elements from p (little-endian, possibly unaligned) to doubles. */
static void load_chunk(sip_dtype_t dt, const uint8_t *p, size_t n, double *out) {
#define LOAD_AS(T)                          \
  for (size_t i = 0; i < n; i++) {          \
    T x_;                                   \
    memcpy(&x_, p + i * sizeof x_, sizeof x_); \
    out[i] = (double)x_;                    \
  }                                         \
  break
  switch (dt) {
  case SIP_DTYPE_FLOAT32: LOAD_AS(float);
  case SIP_DTYPE_FLOAT64: LOAD_AS(double);
  case SIP_DTYPE_UINT8: LOAD_AS(uint8_t);
  case SIP_DTYPE_INT8: LOAD_AS(int8_t);
  case SIP_DTYPE_UINT16: LOAD_AS(uint16_t);
  case SIP_DTYPE_INT16: LOAD_AS(int16_t);
  case SIP_DTYPE_INT32: LOAD_AS(int32_t);
  case SIP_DTYPE_INT64: LOAD_AS(int64_t);
  case SIP_DTYPE_UINT32: LOAD_AS(uint32_t);
  case SIP_DTYPE_UINT64: LOAD_AS(uint64_t);
  case SIP_DTYPE_BOOL:
    for (size_t i = 0; i < n; i++) out[i] = p[i] != 0;
    break;
  case SIP_DTYPE_FLOAT16:
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      out[i] = sip__f16_to_f64(h);
    }
    break;
  default: break; /* excluded by the caller */
  }
#undef LOAD_AS
}

static int compare(double a, int op, double b) {
  switch (op) {
  case OP_EQ: return a == b;
  case OP_NE: return a != b;
  case OP_LT: return a < b;
  case OP_LE: return a <= b;
  case OP_GT: return a > b;
  default: return a >= b;
  }
}

static int eval_num(eval_t *v, int32_t i, double *out);

/* fn (not len) over the tensor `arg` or the mask `arg` (a K_TCMP). */
static int reduce(eval_t *v, const sip__node_t *call, double *out) {
  const sip__node_t *arg = &v->e->nodes[call->a];
  int masked = arg->kind == K_TCMP;
  const sip__node_t *tn = masked ? &v->e->nodes[arg->a] : arg;
  const sip__ref_t *ref = &v->e->refs[tn->ref];
  const sip_tensor_t *t = NULL;
  int64_t count = 0;
  if (get_tensor(v, tn->ref, &t, &count)) return -1;
  double rhs = 0;
  if (masked && eval_num(v, arg->b, &rhs)) return -1;
  const char *fn = sip__expr_fn_names[call->fn];
  size_t es = sip_dtype_size(t->dtype);
  if (t->dtype == SIP_DTYPE_STRING || !es)
    return efail(v, "%.*s%s: %s is a %s tensor; %s() needs numbers", SPAN(v, call), ref->full,
                 sip_dtype_name(t->dtype), fn);
  if ((uint64_t)count > SIZE_MAX / es || t->nbytes < (size_t)count * es || (count && !t->data)) {
    char sh[128];
    shape_str(t, sh, sizeof sh);
    return efail(v, "%s: %zu bytes do not hold a %s tensor of shape %s", ref->full, t->nbytes,
                 sip_dtype_name(t->dtype), sh);
  }
  if (count == 0) {
    if (call->fn == F_MAX || call->fn == F_MIN || call->fn == F_MEAN) {
      char sh[128];
      shape_str(t, sh, sizeof sh);
      return efail(v, "%.*s%s: %s is empty (shape %s); %s() of no elements is undefined", SPAN(v, call), ref->full,
                   sh, fn);
    }
    *out = call->fn == F_ALL; /* any: false, all: true, sum: 0 */
    return 0;
  }
  double buf[CHUNK];
  double acc = call->fn == F_MAX ? -INFINITY : call->fn == F_MIN ? INFINITY : 0;
  const uint8_t *p = t->data;
  for (int64_t done = 0; done < count;) {
    size_t n = count - done < CHUNK ? (size_t)(count - done) : CHUNK;
    load_chunk(t->dtype, p + (size_t)done * es, n, buf);
    if (masked)
      for (size_t k = 0; k < n; k++) buf[k] = compare(buf[k], arg->op, rhs);
    done += (int64_t)n;
    switch (call->fn) {
    case F_ANY:
      for (size_t k = 0; k < n; k++)
        if (buf[k] != 0) return *out = 1, 0;
      break;
    case F_ALL:
      for (size_t k = 0; k < n; k++)
        if (buf[k] == 0) return *out = 0, 0;
      acc = 1;
      break;
    case F_MAX:
      for (size_t k = 0; k < n; k++) {
        if (isnan(buf[k])) return *out = NAN, 0;
        if (buf[k] > acc) acc = buf[k];
      }
      break;
    case F_MIN:
      for (size_t k = 0; k < n; k++) {
        if (isnan(buf[k])) return *out = NAN, 0;
        if (buf[k] < acc) acc = buf[k];
      }
      break;
    default: /* sum, mean */
      for (size_t k = 0; k < n; k++) acc += buf[k];
      break;
    }
  }
  *out = call->fn == F_MEAN ? acc / (double)count : acc;
  return 0;
}

/* len() of the tensor of n: a len() call or a tensor-vs-number comparison. */
static int tensor_len(eval_t *v, const sip__node_t *n, double *out) {
  const sip__node_t *tn = &v->e->nodes[n->a];
  const sip__ref_t *ref = &v->e->refs[tn->ref];
  const sip_tensor_t *t = NULL;
  int64_t count = 0;
  if (get_tensor(v, tn->ref, &t, &count)) return -1;
  if (t->rank == 0) {
    if (n->kind == K_CALL)
      return efail(v, "%.*s%s: %s is a scalar (rank 0) and has no length; use its value, e.g. max(%s)", SPAN(v, n),
                   ref->full, ref->full);
    return efail(v,
                 "%.*s%s compares len(%s), but %s is a scalar (rank 0) and has no length; compare its value with "
                 "any(%.*s%s) or max(%s)",
                 SPAN(v, n), ref->full, ref->full, SPAN(v, n), ref->full);
  }
  *out = (double)t->dims[0];
  return 0;
}

static int eval_cond(eval_t *v, int32_t i, int *out) {
  double d = 0;
  if (eval_num(v, i, &d)) return -1;
  if (isnan(d)) {
    const sip__node_t *n = &v->e->nodes[i];
    return efail(v, "%.*s%s is NaN, which is neither true nor false", SPAN(v, n));
  }
  *out = d != 0;
  return 0;
}

static int eval_num(eval_t *v, int32_t i, double *out) {
  const sip__node_t *n = &v->e->nodes[i];
  const sip_tensor_t *t = NULL;
  int64_t count = 0;
  int c = 0;
  double a = 0, b = 0;
  switch (n->kind) {
  case K_NUM: *out = n->num; return 0;
  case K_SHAPE: {
    if (get_tensor(v, n->ref, &t, &count)) return -1;
    int k = n->index < 0 ? t->rank + n->index : n->index;
    if (k < 0 || k >= t->rank) {
      char sh[128];
      shape_str(t, sh, sizeof sh);
      return efail(v, "%.*s%s: index %d is out of range for %s of rank %d (shape %s)", SPAN(v, n), n->index,
                   v->e->refs[n->ref].full, t->rank, sh);
    }
    *out = (double)t->dims[k];
    return 0;
  }
  case K_CALL:
    if (n->fn != F_LEN) return reduce(v, n, out);
    return tensor_len(v, n, out);
  case K_TCMP:
    if (tensor_len(v, n, &a) || eval_num(v, n->b, &b)) return -1;
    *out = compare(a, n->op, b);
    return 0;
  case K_NEG:
    if (eval_num(v, n->a, &a)) return -1;
    *out = -a;
    return 0;
  case K_NOT:
    if (eval_cond(v, n->a, &c)) return -1;
    *out = !c;
    return 0;
  case K_AND:
  case K_OR:
    if (eval_cond(v, n->a, &c)) return -1;
    if (c == (n->kind == K_OR)) { /* decided: the right side is not evaluated */
      *out = c;
      return 0;
    }
    if (eval_cond(v, n->b, &c)) return -1;
    *out = c;
    return 0;
  case K_CMP:
    if (eval_num(v, n->a, &a) || eval_num(v, n->b, &b)) return -1;
    *out = compare(a, n->op, b);
    return 0;
  case K_ARITH:
    if (eval_num(v, n->a, &a) || eval_num(v, n->b, &b)) return -1;
    switch (n->op) {
    case OP_ADD: *out = a + b; return 0;
    case OP_SUB: *out = a - b; return 0;
    case OP_MUL: *out = a * b; return 0;
    default:
      if (b == 0) return efail(v, "%.*s%s: division by zero", SPAN(v, n));
      if (n->op == OP_DIV) {
        *out = a / b;
      } else { /* floored, as in Python: the result has the sign of b */
        double r = fmod(a, b);
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        *out = r;
      }
      return 0;
    }
  default: /* K_REF: never a number (rejected when parsing) */
    return efail(v, "internal error: a tensor used as a number");
  }
}

sip_error_t *sip__expr_eval(const sip__expr_t *e, sip__expr_lookup_fn lookup, void *ctx, int *result) {
  eval_t v = {e, lookup, ctx, NULL};
  int c = 0;
  if (eval_cond(&v, e->root, &c)) return v.err;
  *result = c;
  return NULL;
}
