/* sip — what the KServe codec's two halves share (kserve_decode.c reads
 * request bodies, kserve_encode.c writes response bodies): element access
 * and the INVALID_ARGUMENT shorthand. Private to src/http/kserve_*.c. */
#ifndef SIP_HTTP_KSERVE_IMPL_H
#define SIP_HTTP_KSERVE_IMPL_H

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

#endif
