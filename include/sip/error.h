/* sip — errors.
 *
 * Every public call that can fail returns `sip_error_t *`: NULL on success,
 * otherwise an error owned by the caller (free it with sip_error_free).
 * Codes are append-only and stable; they travel unchanged on the wire.
 */
#ifndef SIP_ERROR_H
#define SIP_ERROR_H

#include "sip/export.h"

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sip_code {
  SIP_OK = 0,
  SIP_INVALID_ARGUMENT = 1,
  SIP_NOT_FOUND = 2,
  SIP_ALREADY_EXISTS = 3,
  SIP_RESOURCE_EXHAUSTED = 4,
  SIP_DEADLINE_EXCEEDED = 5,
  SIP_UNAVAILABLE = 6,
  SIP_CANCELLED = 7,
  SIP_UNIMPLEMENTED = 8,
  SIP_FAILED_PRECONDITION = 9,
  SIP_PERMISSION_DENIED = 10,
  SIP_INTERNAL = 11,
  SIP_UNAUTHENTICATED = 12, /* no valid credentials (HTTP 401, gRPC 16; docs/security.md) */
  SIP_CODE_COUNT_ /* not a code: one past the last */
} sip_code_t;

typedef struct sip_error sip_error_t;

/* Creates an error with a printf-style message. Returns owned memory; never
 * NULL (falls back to a static out-of-memory error that sip_error_free
 * recognises). Thread-safe. */
SIP_API sip_error_t *sip_error_new(sip_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
SIP_API sip_error_t *sip_error_newv(sip_code_t code, const char *fmt, va_list ap);

/* Borrowed accessors; valid until sip_error_free. */
SIP_API sip_code_t sip_error_code(const sip_error_t *err);
SIP_API const char *sip_error_message(const sip_error_t *err);

/* Frees an error; NULL is a no-op. */
SIP_API void sip_error_free(sip_error_t *err);

/* Stable upper-case name of a code ("INVALID_ARGUMENT"); "UNKNOWN" when out
 * of range. Static storage. */
SIP_API const char *sip_code_name(sip_code_t code);
/* Parses a name from sip_code_name; returns -1 when unknown. */
SIP_API int sip_code_from_name(const char *name);
/* The HTTP status and gRPC status code that stand for a code. */
SIP_API int sip_code_http_status(sip_code_t code);
SIP_API int sip_code_grpc_status(sip_code_t code);

#ifdef __cplusplus
}
#endif
#endif
