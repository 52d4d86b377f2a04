/* sip — errors and the code → HTTP / gRPC mapping table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct sip_error {
  sip_code_t code;
  char *message;
};

/* Returned when the error itself cannot be allocated; never freed. */
static struct sip_error oom_error = {SIP_RESOURCE_EXHAUSTED, (char *)"out of memory"};

/* One row per code: name, HTTP status, gRPC status. Append-only. */
static const struct {
  const char *name;
  int http;
  int grpc;
} code_table[SIP_CODE_COUNT_] = {
    [SIP_OK] = {"OK", 200, 0},
    [SIP_INVALID_ARGUMENT] = {"INVALID_ARGUMENT", 400, 3},
    [SIP_NOT_FOUND] = {"NOT_FOUND", 404, 5},
    [SIP_ALREADY_EXISTS] = {"ALREADY_EXISTS", 409, 6},
    [SIP_RESOURCE_EXHAUSTED] = {"RESOURCE_EXHAUSTED", 429, 8},
    [SIP_DEADLINE_EXCEEDED] = {"DEADLINE_EXCEEDED", 504, 4},
    [SIP_UNAVAILABLE] = {"UNAVAILABLE", 503, 14},
    [SIP_CANCELLED] = {"CANCELLED", 499, 1},
    [SIP_UNIMPLEMENTED] = {"UNIMPLEMENTED", 501, 12},
    [SIP_FAILED_PRECONDITION] = {"FAILED_PRECONDITION", 400, 9},
    [SIP_PERMISSION_DENIED] = {"PERMISSION_DENIED", 403, 7},
    [SIP_INTERNAL] = {"INTERNAL", 500, 13},
    [SIP_UNAUTHENTICATED] = {"UNAUTHENTICATED", 401, 16},
};

sip_error_t *sip_error_newv(sip_code_t code, const char *fmt, va_list ap) {
  struct sip_error *e = sip__malloc(sizeof *e);
  if (!e) return &oom_error;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  e->code = code;
  e->message = n < 0 ? NULL : sip__malloc((size_t)n + 1);
  if (!e->message) {
    sip__free(e);
    return &oom_error;
  }
  vsnprintf(e->message, (size_t)n + 1, fmt, ap);
  return e;
}

sip_error_t *sip_error_new(sip_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sip_error_t *e = sip_error_newv(code, fmt, ap);
  va_end(ap);
  return e;
}

sip_code_t sip_error_code(const sip_error_t *err) { return err ? err->code : SIP_OK; }
const char *sip_error_message(const sip_error_t *err) { return err ? err->message : ""; }

void sip_error_free(sip_error_t *err) {
  if (!err || err == &oom_error) return;
  sip__free(err->message);
  sip__free(err);
}

const char *sip_code_name(sip_code_t code) {
  if ((unsigned)code >= SIP_CODE_COUNT_) return "UNKNOWN";
  return code_table[code].name;
}

int sip_code_from_name(const char *name) {
  for (int i = 0; i < SIP_CODE_COUNT_; i++)
    if (name && strcmp(code_table[i].name, name) == 0) return i;
  return -1;
}

int sip_code_http_status(sip_code_t code) {
  return (unsigned)code < SIP_CODE_COUNT_ ? code_table[code].http : 500;
}

int sip_code_grpc_status(sip_code_t code) {
  return (unsigned)code < SIP_CODE_COUNT_ ? code_table[code].grpc : 13;
}
