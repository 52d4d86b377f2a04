/* sip — internal core: allocation, logging, time. */
#ifndef SIP_CORE_H
#define SIP_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "sip/error.h"
#include "sip/tensor.h"

/* Every allocation in libsip goes through these, so tests can make the Nth
 * one fail (sip__alloc_fail_after). They return NULL on failure; sizes
 * overflowing in calloc/reallocarray also fail. */
void *sip__malloc(size_t n);
void *sip__calloc(size_t count, size_t size);
void *sip__realloc(void *p, size_t n);
void *sip__reallocarray(void *p, size_t count, size_t size);
char *sip__strdup(const char *s);
char *sip__strndup(const char *s, size_t n);
void sip__free(void *p);
/* Test hook: the (n+1)th allocation from now fails, and all later ones too
 * until reset with n < 0. Thread-safe. */
void sip__alloc_fail_after(long n);

/* printf into a fresh heap string; NULL on failure. */
char *sip__asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Out-of-memory error shorthand. */
#define SIP__OOM() sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory")

/* Logging: one line per event, logfmt ("ts=... level=info msg=\"...\" k=v").
 * `kv` is a preformatted suffix such as "pool=a code=NOT_FOUND" (may be NULL). */
enum { SIP__LOG_DEBUG = 0, SIP__LOG_INFO, SIP__LOG_WARN, SIP__LOG_ERROR };
void sip__log_set_level(int level);
/* Line format: logfmt (the default) or one JSON object per line with the
 * same keys (server.log_format). */
enum { SIP__LOG_TEXT = 0, SIP__LOG_JSON = 1 };
void sip__log_set_format(int format);
int sip__log_enabled(int level);
void sip__log(int level, const char *msg, const char *kv_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A "request failed" warning with `kv` fields, rate-limited process-wide
 * (at most 50 lines a second; the next line counts those left out). */
void sip__log_failure(const char *kv_fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic and wall clocks in microseconds / nanoseconds. */
uint64_t sip__now_us(void);
uint64_t sip__now_ns(void);
uint64_t sip__wall_us(void);

/* A character allowed in pool, pipeline, model and version names:
 * [A-Za-z0-9_.-] (config, repository and HTTP paths all check it). */
static inline int sip__name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '.' || ch == '-';
}

/* The KServe v2 / Triton protocol's datatype names ("FP32", "BYTES"...):
 * NULL / SIP_DTYPE_INVALID when there is none (src/core/tensor.c). Every
 * front-end and the Triton model config use these. */
#define SIP__PROTOCOL_DTYPE_LIST \
  "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES"
const char *sip__dtype_protocol_name(sip_dtype_t dt);
sip_dtype_t sip__dtype_from_protocol(const char *name);

/* Triton's classification extension: the top `topn` classes of the last
 * dim of `t` (numeric), per row of the leading dims, as a STRING tensor of
 * "value:index" (values as C's %f, Triton's std::to_string; ties in index
 * order, NaN last) in a new buffer (src/core/classify.c). INVALID_ARGUMENT
 * for a non-numeric output. */
sip_error_t *sip__classify(const sip_tensor_t *t, uint32_t topn, sip_tensor_t **out);

/* A shape as text for messages: "[2,3,-1]" with sep "," or "[2, 3, -1]" with
 * sep ", "; rank 0 (or less) gives "[]". A shape that does not fit in size
 * bytes keeps the dims that do and ends in "...]" ("[1, 2, ...]"). Always
 * NUL-terminated when size > 0. Returns buf (src/core/tensor.c). */
const char *sip__shape_str(char *buf, size_t size, int rank, const int64_t *dims, const char *sep);

/* IEEE half <-> double (src/core/half.c); to half rounds to nearest even. */
uint16_t sip__f64_to_f16(double d);
double sip__f16_to_f64(uint16_t h);

#endif
