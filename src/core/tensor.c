/* sip — dtypes, refcounted buffers and tensors. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "sip/tensor.h"

static const struct {
  const char *name;
  size_t size;
} dtype_table[] = {
    [SIP_DTYPE_INVALID] = {"invalid", 0}, [SIP_DTYPE_FLOAT32] = {"float32", 4},
    [SIP_DTYPE_UINT8] = {"uint8", 1},     [SIP_DTYPE_INT8] = {"int8", 1},
    [SIP_DTYPE_UINT16] = {"uint16", 2},   [SIP_DTYPE_INT16] = {"int16", 2},
    [SIP_DTYPE_INT32] = {"int32", 4},     [SIP_DTYPE_INT64] = {"int64", 8},
    [SIP_DTYPE_STRING] = {"string", 0},   [SIP_DTYPE_BOOL] = {"bool", 1},
    [SIP_DTYPE_FLOAT16] = {"float16", 2}, [SIP_DTYPE_FLOAT64] = {"float64", 8},
    [SIP_DTYPE_UINT32] = {"uint32", 4},   [SIP_DTYPE_UINT64] = {"uint64", 8},
};
#define DTYPE_MAX SIP_DTYPE_UINT64

size_t sip_dtype_size(sip_dtype_t dt) {
  return (unsigned)dt <= DTYPE_MAX ? dtype_table[dt].size : 0;
}

const char *sip_dtype_name(sip_dtype_t dt) {
  return (unsigned)dt <= DTYPE_MAX ? dtype_table[dt].name : "invalid";
}

/* The KServe v2 / Triton protocol's datatype names. */
static const struct {
  sip_dtype_t dt;
  const char *name;
} protocol_types[] = {
    {SIP_DTYPE_BOOL, "BOOL"},     {SIP_DTYPE_UINT8, "UINT8"},   {SIP_DTYPE_UINT16, "UINT16"},
    {SIP_DTYPE_UINT32, "UINT32"}, {SIP_DTYPE_UINT64, "UINT64"}, {SIP_DTYPE_INT8, "INT8"},
    {SIP_DTYPE_INT16, "INT16"},   {SIP_DTYPE_INT32, "INT32"},   {SIP_DTYPE_INT64, "INT64"},
    {SIP_DTYPE_FLOAT16, "FP16"},  {SIP_DTYPE_FLOAT32, "FP32"},  {SIP_DTYPE_FLOAT64, "FP64"},
    {SIP_DTYPE_STRING, "BYTES"},
};

const char *sip__dtype_protocol_name(sip_dtype_t dt) {
  for (size_t i = 0; i < sizeof protocol_types / sizeof protocol_types[0]; i++)
    if (protocol_types[i].dt == dt) return protocol_types[i].name;
  return NULL;
}

sip_dtype_t sip__dtype_from_protocol(const char *name) {
  for (size_t i = 0; name && i < sizeof protocol_types / sizeof protocol_types[0]; i++)
    if (strcmp(protocol_types[i].name, name) == 0) return protocol_types[i].dt;
  return SIP_DTYPE_INVALID;
}

sip_dtype_t sip_dtype_from_name(const char *name) {
  if (!name) return SIP_DTYPE_INVALID;
  for (int i = 1; i <= DTYPE_MAX; i++)
    if (strcasecmp(name, dtype_table[i].name) == 0) return (sip_dtype_t)i;
  static const struct {
    const char *alias;
    sip_dtype_t dt;
  } aliases[] = {{"float", SIP_DTYPE_FLOAT32}, {"fp32", SIP_DTYPE_FLOAT32},
                 {"double", SIP_DTYPE_FLOAT64}, {"fp64", SIP_DTYPE_FLOAT64},
                 {"half", SIP_DTYPE_FLOAT16},   {"fp16", SIP_DTYPE_FLOAT16},
                 {"str", SIP_DTYPE_STRING},     {"bytes", SIP_DTYPE_STRING}};
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcasecmp(name, aliases[i].alias) == 0) return aliases[i].dt;
  return SIP_DTYPE_INVALID;
}

struct sip_buf {
  atomic_long refs;
  void *data;
  size_t len;
  void (*release)(void *ctx);
  void *ctx;
};

sip_buf_t *sip_buf_wrap(void *data, size_t len, void (*release)(void *), void *ctx) {
  sip_buf_t *b = sip__malloc(sizeof *b);
  if (!b) {
    if (release) release(ctx);
    return NULL;
  }
  atomic_init(&b->refs, 1);
  b->data = data;
  b->len = len;
  b->release = release;
  b->ctx = ctx;
  return b;
}

sip_buf_t *sip_buf_new(size_t len) {
  void *p = sip__calloc(1, len);
  if (!p) return NULL;
  return sip_buf_wrap(p, len, sip__free, p);
}

void *sip_buf_data(const sip_buf_t *b) { return b->data; }
size_t sip_buf_len(const sip_buf_t *b) { return b->len; }

sip_buf_t *sip_buf_ref(sip_buf_t *b) {
  if (b) atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
  return b;
}

void sip_buf_unref(sip_buf_t *b) {
  if (!b) return;
  if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
  if (b->release) b->release(b->ctx);
  sip__free(b);
}

int64_t sip_tensor_count(const sip_tensor_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    if (t->dims[i] && n > INT64_MAX / t->dims[i]) return -1;
    n *= t->dims[i];
  }
  return n;
}

sip_tensor_t *sip_tensor_new_view(const char *name, sip_dtype_t dtype, int rank,
                                  const int64_t *dims, const void *data, size_t nbytes,
                                  sip_buf_t *owner) {
  if (rank < 0 || rank > SIP_MAX_RANK) return NULL;
  sip_tensor_t *t = sip__calloc(1, sizeof *t);
  if (!t) return NULL;
  t->name = sip__strdup(name ? name : "");
  if (!t->name) {
    sip__free(t);
    return NULL;
  }
  t->dtype = dtype;
  t->rank = rank;
  if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
  t->data = data;
  t->nbytes = nbytes;
  t->owner = sip_buf_ref(owner);
  return t;
}

sip_tensor_t *sip_tensor_new_copy(const char *name, sip_dtype_t dtype, int rank,
                                  const int64_t *dims, const void *data, size_t nbytes) {
  sip_buf_t *b = sip_buf_new(nbytes);
  if (!b) return NULL;
  if (nbytes) memcpy(sip_buf_data(b), data, nbytes);
  sip_tensor_t *t = sip_tensor_new_view(name, dtype, rank, dims, sip_buf_data(b), nbytes, b);
  sip_buf_unref(b);
  return t;
}

void sip_tensor_free(sip_tensor_t *t) {
  if (!t) return;
  sip_buf_unref(t->owner);
  sip__free(t->name);
  sip__free(t);
}

const char *sip_memory_type_name(sip_memory_type_t m) {
  switch (m) {
    case SIP_MEMORY_CPU: return "cpu";
    case SIP_MEMORY_CPU_PINNED: return "cpu_pinned";
    case SIP_MEMORY_DEVICE: return "device";
  }
  return "invalid";
}

sip_error_t *sip_tensor_validate(const sip_tensor_t *t) {
  if (t->dtype <= SIP_DTYPE_INVALID || t->dtype > DTYPE_MAX)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "tensor '%s': unknown dtype %d; expected one of the element type "
                         "numbers 1..13 (float32 1 .. uint64 13)",
                         t->name, (int)t->dtype);
  if ((unsigned)t->memory_type > SIP_MEMORY_DEVICE)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "tensor '%s': unknown memory type %d; expected cpu (0), cpu_pinned (1) "
                         "or device (2)", t->name, (int)t->memory_type);
  if (t->dtype == SIP_DTYPE_STRING && t->memory_type == SIP_MEMORY_DEVICE)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "tensor '%s': a string tensor in device memory; expected string "
                         "tensors in host memory", t->name);
  int64_t count = sip_tensor_count(t);
  if (count < 0)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "tensor '%s': shape has a negative dim or overflows; expected dims >= 0",
                         t->name);
  if (t->dtype != SIP_DTYPE_STRING) {
    size_t es = sip_dtype_size(t->dtype);
    if ((uint64_t)count > SIZE_MAX / es || (size_t)count * es != t->nbytes)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "tensor '%s': %zu data bytes do not match %s x %lld elements; "
                           "expected %llu bytes",
                           t->name, t->nbytes, sip_dtype_name(t->dtype), (long long)count,
                           (unsigned long long)count * es);
    return NULL;
  }
  const unsigned char *p = t->data;
  size_t off = 0;
  for (int64_t i = 0; i < count; i++) {
    if (t->nbytes - off < 4)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "tensor '%s': string data ends at element %lld of %lld; expected a "
                           "4-byte length prefix",
                           t->name, (long long)i, (long long)count);
    uint32_t len = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
                   (uint32_t)p[off + 3] << 24;
    off += 4;
    if (t->nbytes - off < len)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "tensor '%s': string element %lld claims %u bytes but only %zu remain",
                           t->name, (long long)i, len, t->nbytes - off);
    off += len;
  }
  if (off != t->nbytes)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "tensor '%s': %zu bytes follow the last of %lld string elements; "
                         "expected exactly %zu bytes",
                         t->name, t->nbytes - off, (long long)count, off);
  return NULL;
}

const char *sip__shape_str(char *buf, size_t size, int rank, const int64_t *dims, const char *sep) {
  static const char more[] = "...]";
  if (!size) return buf;
  size_t seplen = strlen(sep), o = 0, keep;
  buf[o++] = '[';
  keep = o; /* where "...]" goes if a later dim does not fit */
  for (int i = 0; i < rank; i++) {
    char num[24];
    size_t n = (size_t)snprintf(num, sizeof num, "%lld", (long long)dims[i]);
    size_t s = i ? seplen : 0;
    if (o + s + n + 2 > size) { /* this dim, then ']' and the NUL */
      o = keep;
      if (o > 1 && o + seplen < size) {
        memcpy(buf + o, sep, seplen);
        o += seplen;
      }
      if (o < size) snprintf(buf + o, size - o, "%s", more);
      else buf[size - 1] = '\0';
      return buf;
    }
    memcpy(buf + o, sep, s);
    memcpy(buf + o + s, num, n);
    o += s + n;
    if (o + seplen + sizeof more <= size) keep = o;
  }
  if (o + 2 <= size) {
    buf[o++] = ']';
    buf[o] = '\0';
  } else {
    buf[size - 1] = '\0';
  }
  return buf;
}
