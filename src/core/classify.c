/* sip — Triton's classification extension, for every front-end: the top-N
 * classes of an output's last dim as BYTES "value:index" (core.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define LOAD(T, p, i)                                                      \
  __extension__({                                                          \
    T v_;                                                                  \
    memcpy(&v_, (const uint8_t *)(p) + (size_t)(i) * sizeof(T), sizeof(T)); \
    v_;                                                                    \
  })

typedef struct cls_item {
  double v;      /* float types */
  int64_t s;     /* signed integers */
  uint64_t u;    /* unsigned integers */
  int64_t index;
} cls_item_t;

/* Highest value first; ties (and NaNs, last) in index order, so results are
 * deterministic. */
static int cmp_float(const void *a, const void *b) {
  const cls_item_t *x = a, *y = b;
  int xn = isnan(x->v), yn = isnan(y->v);
  if (xn != yn) return xn - yn;
  if (!xn && x->v != y->v) return x->v > y->v ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}
static int cmp_signed(const void *a, const void *b) {
  const cls_item_t *x = a, *y = b;
  if (x->s != y->s) return x->s > y->s ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}
static int cmp_unsigned(const void *a, const void *b) {
  const cls_item_t *x = a, *y = b;
  if (x->u != y->u) return x->u > y->u ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Triton's classification extension: the top-N classes of the last dim as
 * BYTES "value:index", per row of the leading dims. Values print as C's %f
 * (Triton's std::to_string). The result is a STRING tensor in a new buffer. */
sip_error_t *sip__classify(const sip_tensor_t *t, uint32_t topn, sip_tensor_t **out) {
  sip_dtype_t dt = t->dtype;
  int kind; /* 0 float, 1 signed, 2 unsigned */
  switch (dt) {
  case SIP_DTYPE_FLOAT16: case SIP_DTYPE_FLOAT32: case SIP_DTYPE_FLOAT64: kind = 0; break;
  case SIP_DTYPE_INT8: case SIP_DTYPE_INT16: case SIP_DTYPE_INT32: case SIP_DTYPE_INT64: kind = 1; break;
  case SIP_DTYPE_UINT8: case SIP_DTYPE_UINT16: case SIP_DTYPE_UINT32: case SIP_DTYPE_UINT64: kind = 2; break;
  default:
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "output '%s': classification needs a numeric output; it is %s", t->name,
                         sip__dtype_protocol_name(dt) ? sip__dtype_protocol_name(dt) : "unknown");
  }
  int64_t classes = t->rank ? t->dims[t->rank - 1] : 1, rows = 1;
  for (int i = 0; i + 1 < t->rank; i++) rows *= t->dims[i];
  int64_t n = classes < (int64_t)topn ? classes : (int64_t)topn;
  /* With no rows there is nothing to rank; with rows, classes <= elements,
   * so the scratch array is bounded by the tensor's own size. */
  cls_item_t *items = sip__calloc(rows && classes ? (size_t)classes : 1, sizeof *items);
  if (!items) return SIP__OOM();
  /* "%f" of a double is at most ~320 bytes; indices at most 20. */
  size_t per = 4 + 352;
  if ((uint64_t)rows * (uint64_t)n > SIZE_MAX / per) {
    sip__free(items);
    return SIP__OOM();
  }
  sip_buf_t *b = sip_buf_new((size_t)(rows * n) * per);
  if (!b) {
    sip__free(items);
    return SIP__OOM();
  }
  uint8_t *dst = sip_buf_data(b);
  size_t off = 0;
  const void *d = t->data;
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < classes; c++) {
      int64_t i = r * classes + c;
      cls_item_t *it = &items[c];
      it->index = c;
      switch (dt) {
      case SIP_DTYPE_FLOAT16: it->v = sip__f16_to_f64(LOAD(uint16_t, d, i)); break;
      case SIP_DTYPE_FLOAT32: it->v = LOAD(float, d, i); break;
      case SIP_DTYPE_FLOAT64: it->v = LOAD(double, d, i); break;
      case SIP_DTYPE_INT8: it->s = LOAD(int8_t, d, i); break;
      case SIP_DTYPE_INT16: it->s = LOAD(int16_t, d, i); break;
      case SIP_DTYPE_INT32: it->s = LOAD(int32_t, d, i); break;
      case SIP_DTYPE_INT64: it->s = LOAD(int64_t, d, i); break;
      case SIP_DTYPE_UINT8: it->u = LOAD(uint8_t, d, i); break;
      case SIP_DTYPE_UINT16: it->u = LOAD(uint16_t, d, i); break;
      case SIP_DTYPE_UINT32: it->u = LOAD(uint32_t, d, i); break;
      default: it->u = LOAD(uint64_t, d, i); break;
      }
    }
    qsort(items, (size_t)classes, sizeof *items,
          kind == 0 ? cmp_float : kind == 1 ? cmp_signed : cmp_unsigned);
    for (int64_t j = 0; j < n; j++) {
      char s[352];
      int len = kind == 0   ? snprintf(s, sizeof s, "%f:%" PRId64, items[j].v, items[j].index)
                : kind == 1 ? snprintf(s, sizeof s, "%" PRId64 ":%" PRId64, items[j].s, items[j].index)
                            : snprintf(s, sizeof s, "%" PRIu64 ":%" PRId64, items[j].u, items[j].index);
      if (len < 0 || (size_t)len >= sizeof s) len = 0;
      for (int k = 0; k < 4; k++) dst[off + (size_t)k] = (uint8_t)((uint32_t)len >> (8 * k));
      memcpy(dst + off + 4, s, (size_t)len);
      off += 4 + (size_t)len;
    }
  }
  sip__free(items);
  int64_t dims[SIP_MAX_RANK];
  int rank = t->rank ? t->rank : 1;
  for (int i = 0; i + 1 < rank; i++) dims[i] = t->dims[i];
  dims[rank - 1] = n;
  *out = sip_tensor_new_view(t->name, SIP_DTYPE_STRING, rank, dims, dst, off, b);
  sip_buf_unref(b);
  return *out ? NULL : SIP__OOM();
}

