/* sip — batch assembly. */
#include "sched/batch.h"

#include <string.h>

#include "config/config.h"
#include "core/core.h"

int sip__batch_compatible(const sip_tensor_t *a, const sip_tensor_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->rank < 1) return 0;
  for (int i = 1; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Byte offset of string element `idx` in packed data (idx may equal the count). */
static size_t string_offset(const sip_tensor_t *t, int64_t idx) {
  const unsigned char *p = t->data;
  size_t off = 0;
  for (int64_t i = 0; i < idx; i++) off += 4 + le32(p + off);
  return off;
}

static int64_t row_elems(const sip_tensor_t *t) {
  int64_t n = 1;
  for (int i = 1; i < t->rank; i++) n *= t->dims[i];
  return n;
}

sip_error_t *sip__batch_concat(const char *name, const sip_tensor_t *const *parts, size_t n,
                               int64_t pad_to, int padding, sip_tensor_t **out) {
  *out = NULL;
  if (!n) return sip_error_new(SIP_INTERNAL, "empty batch");
  const sip_tensor_t *first = parts[0], *last = parts[n - 1];
  int64_t rows = 0;
  size_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    if (!sip__batch_compatible(first, parts[i]))
      return sip_error_new(SIP_INTERNAL, "input '%s': batch parts differ in dtype or shape", name);
    rows += parts[i]->dims[0];
    bytes += parts[i]->nbytes;
  }
  int64_t pad_rows = pad_to > rows ? pad_to - rows : 0;
  int is_str = first->dtype == SIP_DTYPE_STRING;
  int64_t per_row = row_elems(first);
  size_t last_row_bytes = 0;
  const unsigned char *last_row = NULL;
  if (pad_rows) {
    if (padding == SIP__PAD_REPLICATE_LAST) {
      if (last->dims[0] == 0)
        return sip_error_new(SIP_INVALID_ARGUMENT, "input '%s': cannot replicate an empty row",
                             name);
      size_t start = is_str ? string_offset(last, (last->dims[0] - 1) * per_row)
                            : last->nbytes - (size_t)per_row * sip_dtype_size(last->dtype);
      last_row = (const unsigned char *)last->data + start;
      last_row_bytes = last->nbytes - start;
    } else {
      last_row_bytes = is_str ? (size_t)per_row * 4 : (size_t)per_row * sip_dtype_size(first->dtype);
    }
    bytes += last_row_bytes * (size_t)pad_rows;
  }
  sip_buf_t *b = sip_buf_new(bytes); /* zeroed: zero padding and empty strings come free */
  if (!b) return SIP__OOM();
  unsigned char *dst = sip_buf_data(b);
  for (size_t i = 0; i < n; i++) {
    if (parts[i]->nbytes) memcpy(dst, parts[i]->data, parts[i]->nbytes);
    dst += parts[i]->nbytes;
  }
  for (int64_t r = 0; r < pad_rows; r++) {
    if (last_row) memcpy(dst, last_row, last_row_bytes);
    dst += last_row_bytes;
  }
  int64_t dims[SIP_MAX_RANK];
  memcpy(dims, first->dims, sizeof dims);
  dims[0] = rows + pad_rows;
  *out = sip_tensor_new_view(name, first->dtype, first->rank, dims, sip_buf_data(b), bytes, b);
  sip_buf_unref(b);
  return *out ? NULL : SIP__OOM();
}

sip_error_t *sip__batch_slice(const sip_tensor_t *t, const char *name, int64_t row0, int64_t rows,
                              sip_tensor_t **out) {
  *out = NULL;
  if (t->rank < 1 || row0 < 0 || rows < 0 || row0 + rows > t->dims[0])
    return sip_error_new(SIP_INTERNAL,
                         "output '%s' has %lld rows; the batch needs rows %lld..%lld", t->name,
                         t->rank ? (long long)t->dims[0] : 0LL, (long long)row0,
                         (long long)(row0 + rows));
  int64_t per_row = row_elems(t);
  size_t start, end;
  if (t->dtype == SIP_DTYPE_STRING) {
    start = string_offset(t, row0 * per_row);
    end = start + string_offset(&(sip_tensor_t){.data = (const unsigned char *)t->data + start},
                                rows * per_row);
  } else {
    size_t row_bytes = (size_t)per_row * sip_dtype_size(t->dtype);
    start = (size_t)row0 * row_bytes;
    end = start + (size_t)rows * row_bytes;
  }
  int64_t dims[SIP_MAX_RANK];
  memcpy(dims, t->dims, sizeof dims);
  dims[0] = rows;
  const unsigned char *p = (const unsigned char *)t->data + start;
  *out = t->owner ? sip_tensor_new_view(name, t->dtype, t->rank, dims, p, end - start, t->owner)
                  : sip_tensor_new_copy(name, t->dtype, t->rank, dims, p, end - start);
  return *out ? NULL : SIP__OOM();
}
