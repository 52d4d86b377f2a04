/* sip — what the KServe codec's two halves share (kserve_decode.c reads
 * request bodies, kserve_encode.c writes response bodies): element access,
 * the INVALID_ARGUMENT shorthand and the system shared memory parameters
 * (shm.c). Private to src/http/kserve_*.c and shm.c. */
#ifndef SIP_HTTP_KSERVE_IMPL_H
#define SIP_HTTP_KSERVE_IMPL_H

#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"

/* ---- little-endian element access -------------------------------------- */

/* Tensor data is little-endian on the wire and in memory on every platform
 * sip builds for; memcpy keeps unaligned reads defined. */
#define LOAD(T, p, i) \
  __extension__({     \
    T v_;             \
    memcpy(&v_, (const uint8_t *)(p) + (size_t)(i) * sizeof(T), sizeof(T)); \
    v_;               \
  })

static inline uint32_t rd_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void wr_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

/* An INVALID_ARGUMENT error; the message names the field at fault. */
#define BAD(...) sip_error_new(SIP_INVALID_ARGUMENT, __VA_ARGS__)

/* ---- system shared memory parameters (shm.c) ------------------------------ */

/* Input `name` of `in` (a request's input object) whose `params` name a
 * shared_memory_region: its tensor in *out, a view of the region's bytes
 * (a copy when they are not 8-byte aligned, and for BYTES, whose packing
 * must not change after it was checked). Refused: data or
 * binary_data_size given too, a missing or bad shared_memory_byte_size or
 * shared_memory_offset, a byte size that is not what shape and datatype
 * need, an unknown region, a range past the region's end. UNIMPLEMENTED
 * when `shm` is NULL. */
sip_error_t *sip__ks_shm_input(sip__shm_set_t *shm, const json_t *in, const json_t *params,
                               const char *name, sip_dtype_t dt, int rank, const int64_t *dims,
                               int64_t count, sip_tensor_t **out);
/* Output `o` whose `params` may name a shared_memory_region: fills o's shm_*
 * fields (a view of the region) when they do; NULL when they do not. */
sip_error_t *sip__ks_shm_output(sip__shm_set_t *shm, const json_t *params, sip__ks_output_t *o);
/* Copies output tensor `t` into o's region (INVALID_ARGUMENT naming the
 * bytes needed when it does not fit). */
sip_error_t *sip__ks_shm_write(const sip__ks_output_t *o, const sip_tensor_t *t);

#endif
