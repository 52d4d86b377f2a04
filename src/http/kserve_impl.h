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
/* ---- JSON tensor data fast path (kserve_numbers.c) --------------------- */

/* One JSON number as jansson reads it: integers (no '.' or exponent) as
 * int64 (d is their double), others as strtod's correctly rounded double. */
typedef struct sip__ks_num {
  int is_int;
  int64_t i;
  double d;
} sip__ks_num_t;

/* Reads the JSON number at p[0..n): its length, or 0 when p does not start
 * with one jansson accepts (bad syntax, an integer past int64, a real that
 * overflows). */
size_t sip__ks_number(const char *p, size_t n, sip__ks_num_t *out);

typedef struct sip__ks_span {
  size_t off, len;
} sip__ks_span_t;

/* A body whose number-only "data" arrays are cut out: `json` is the text
 * with each replaced by the string "\u0000<index of its span>". */
typedef struct sip__ks_cut {
  const uint8_t *text; /* the original body */
  sip__ks_span_t *spans;
  size_t n_spans, cap_spans;
  size_t used; /* spans read into tensors */
  char *json;
  size_t json_len, json_cap;
} sip__ks_cut_t;

/* Cuts p[0..n): 1 when arrays were cut (free with sip__ks_cut_free), 0 when
 * there is nothing to cut or the text is unusual (an escaped NUL, nesting
 * past max_depth, an unterminated string), -1 when out of memory. */
int sip__ks_cut(const uint8_t *p, size_t n, int max_depth, sip__ks_cut_t *c);
void sip__ks_cut_free(sip__ks_cut_t *c);
/* The span a placeholder string (s, len) names, or -1. */
int sip__ks_cut_index(const sip__ks_cut_t *c, const char *s, size_t len);
/* Stores x as element k of integer dtype dt in dst: 1, 0 when x is out of
 * the dtype's range, -1 when dt is not an integer dtype. */
int sip__ks_store_int(sip_dtype_t dt, uint8_t *dst, int64_t k, int64_t x);
/* Reads the JSON array p[0..n) (flat or nested) as exactly `count` elements
 * of dt into dst: 0, or -1 when anything differs from what the classic
 * decoder accepts without an error. */
int sip__ks_fill(const char *p, size_t n, sip_dtype_t dt, void *dst, int64_t count);

/* Number text for JSON responses, into out (at least 32 bytes, NUL-ended):
 * its length. sip__ks_format_double: prec 9 (a float32 or float16 value)
 * and 17 (float64) write the shortest text that reads back to the same
 * float32 / float64 (core/fmt.h: NaN, Infinity, -Infinity for the values
 * JSON lacks); other precisions as sip__ks_format_g. sip__ks_format_g:
 * exactly what printf's "%.<prec>g" writes (prec 1..17; NaN and infinities
 * too), most without printf. sip__ks_format_int: an integer (v when
 * is_signed, else u) in decimal. */
size_t sip__ks_format_double(double v, int prec, char *out);
size_t sip__ks_format_g(double v, int prec, char *out);
size_t sip__ks_format_int(int64_t v, uint64_t u, int is_signed, char *out);

#endif
