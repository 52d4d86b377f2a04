/* sip — tensors, data types and refcounted buffers. */
#ifndef SIP_TENSOR_H
#define SIP_TENSOR_H

#include "sip/export.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. The numbers are ONNX's TensorProto.DataType values, so that
 * they mean the same on the wire, in the engine and in ONNX Runtime. */
typedef enum sip_dtype {
  SIP_DTYPE_INVALID = 0,
  SIP_DTYPE_FLOAT32 = 1,
  SIP_DTYPE_UINT8 = 2,
  SIP_DTYPE_INT8 = 3,
  SIP_DTYPE_UINT16 = 4,
  SIP_DTYPE_INT16 = 5,
  SIP_DTYPE_INT32 = 6,
  SIP_DTYPE_INT64 = 7,
  SIP_DTYPE_STRING = 8,
  SIP_DTYPE_BOOL = 9,
  SIP_DTYPE_FLOAT16 = 10,
  SIP_DTYPE_FLOAT64 = 11,
  SIP_DTYPE_UINT32 = 12,
  SIP_DTYPE_UINT64 = 13,
} sip_dtype_t;

#define SIP_MAX_RANK 16

/* Size in bytes of one element; 0 for STRING (variable) and invalid types. */
SIP_API size_t sip_dtype_size(sip_dtype_t dt);
/* Lower-case numpy-style name ("float32", "string"); "invalid" otherwise. */
SIP_API const char *sip_dtype_name(sip_dtype_t dt);
/* Parses a name from sip_dtype_name (also "fp32", "float", "double", "str");
 * returns SIP_DTYPE_INVALID when unknown. */
SIP_API sip_dtype_t sip_dtype_from_name(const char *name);

/* A refcounted byte buffer. `release(ctx)` runs when the last reference
 * goes; it frees whatever backs `data` (a received frame, an ONNX Runtime
 * value, a heap block). Thread-safe reference counting. */
typedef struct sip_buf sip_buf_t;
/* Wraps memory; takes ownership of ctx (release is called exactly once).
 * Returns NULL on allocation failure, after calling release(ctx). */
SIP_API sip_buf_t *sip_buf_wrap(void *data, size_t len, void (*release)(void *ctx), void *ctx);
/* Allocates len bytes (zeroed) owned by the buffer. NULL when out of memory. */
SIP_API sip_buf_t *sip_buf_new(size_t len);
SIP_API void *sip_buf_data(const sip_buf_t *b);
SIP_API size_t sip_buf_len(const sip_buf_t *b);
SIP_API sip_buf_t *sip_buf_ref(sip_buf_t *b);
/* Drops a reference; NULL is a no-op. */
SIP_API void sip_buf_unref(sip_buf_t *b);

/* Where a tensor's bytes live (after Triton's TRITONSERVER_MemoryType).
 * CPU is 0, so a zeroed or designated-initialised tensor is host memory. */
typedef enum sip_memory_type {
  SIP_MEMORY_CPU = 0,        /* ordinary host memory */
  SIP_MEMORY_CPU_PINNED = 1, /* page-locked host memory a device copies from directly */
  SIP_MEMORY_DEVICE = 2,     /* an accelerator's memory (device_id names which) */
} sip_memory_type_t;
/* "cpu", "cpu_pinned", "device"; "invalid" otherwise. Static storage. */
SIP_API const char *sip_memory_type_name(sip_memory_type_t m);

/* A tensor: a typed, shaped view over bytes. For STRING tensors `data` holds
 * the elements one after another, each as a little-endian u32 byte length
 * followed by that many bytes (the wire encoding). `owner` (may be NULL for
 * borrowed views) keeps `data` alive. `data` is in `memory_type` memory
 * (SIP_MEMORY_DEVICE: a device pointer the host must not read); STRING
 * tensors are always host memory. */
typedef struct sip_tensor {
  char *name;          /* owned by the tensor */
  sip_dtype_t dtype;
  int rank;            /* 0 for a scalar */
  int64_t dims[SIP_MAX_RANK];
  const void *data;
  size_t nbytes;
  sip_buf_t *owner;    /* one reference held by the tensor, or NULL */
  sip_memory_type_t memory_type; /* SIP_MEMORY_CPU unless a backend says otherwise */
  int device_id;                 /* the device of DEVICE memory (0 otherwise) */
} sip_tensor_t;

/* Number of elements (product of dims; 1 for a scalar). Returns -1 when a dim
 * is negative or the product overflows. */
SIP_API int64_t sip_tensor_count(const sip_tensor_t *t);

/* Creates a tensor viewing `data` (nbytes) kept alive by `owner` (a new
 * reference is taken; owner may be NULL to borrow memory that outlives the
 * tensor). Copies the name and dims. NULL when out of memory. */
SIP_API sip_tensor_t *sip_tensor_new_view(const char *name, sip_dtype_t dtype, int rank,
                                  const int64_t *dims, const void *data, size_t nbytes,
                                  sip_buf_t *owner);
/* Creates a tensor owning a copy of `data`. NULL when out of memory. */
SIP_API sip_tensor_t *sip_tensor_new_copy(const char *name, sip_dtype_t dtype, int rank,
                                  const int64_t *dims, const void *data, size_t nbytes);
/* Frees the tensor and drops its owner reference; NULL is a no-op. */
SIP_API void sip_tensor_free(sip_tensor_t *t);

/* Checks that nbytes matches dtype and dims (for STRING: that the packed
 * elements parse exactly and their count matches). Returns NULL or an owned
 * INVALID_ARGUMENT error naming the tensor. */
SIP_API struct sip_error *sip_tensor_validate(const sip_tensor_t *t);

#ifdef __cplusplus
}
#endif
#endif
