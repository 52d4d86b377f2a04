/* sip — requests refused before they reached a model (introspect.h): a
 * body that is not JSON, a protobuf message that does not parse, a wrong
 * datatype or shape, a bad parameter. The front-ends answer them with an
 * error at once; this counts them by model, protocol and reason for
 * /metrics (sip_requests_rejected_total) and logs them at info, at most
 * REJECT_LINES_PER_S lines a second (the next line says how many were left
 * out), so that a client sending garbage is visible to operators without
 * flooding the log. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/core.h"
#include "server/introspect.h"
#include "server/server_impl.h"

#define REJECT_LINES_PER_S 20
/* Distinct (model, protocol, reason) rows kept; past it, rows of models
 * not yet counted go to "unknown" (model names come from the server's own
 * list, so this is only reached by a server with very many models). */
#define MAX_ROWS 4096

typedef struct row {
  char *model;
  int protocol, reason;
  uint64_t n;
} row_t;

struct sip__rejections {
  pthread_mutex_t mu;
  row_t *v;
  size_t n, cap;
};

static const char *const protocol_names[SIP__PROTOCOLS] = {"http", "grpc", "native"};
enum { R_MALFORMED, R_INVALID, R_UNKNOWN_MODEL, R_TOO_LARGE, R_UNAUTHORIZED, REASONS };
static const char *const reason_names[REASONS] = {"malformed", "invalid", "unknown_model",
                                                  "too_large", "unauthorized"};

sip__rejections_t *sip__rejections_new(void) {
  sip__rejections_t *r = sip__calloc(1, sizeof *r);
  if (r) pthread_mutex_init(&r->mu, NULL);
  return r;
}

void sip__rejections_free(sip__rejections_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) sip__free(r->v[i].model);
  sip__free(r->v);
  pthread_mutex_destroy(&r->mu);
  sip__free(r);
}

static int reason_of(int malformed, sip_code_t code) {
  if (malformed) return R_MALFORMED;
  switch (code) {
  case SIP_NOT_FOUND:
    return R_UNKNOWN_MODEL;
  case SIP_RESOURCE_EXHAUSTED:
    return R_TOO_LARGE;
  case SIP_UNAUTHENTICATED:
  case SIP_PERMISSION_DENIED:
    return R_UNAUTHORIZED;
  default:
    return R_INVALID;
  }
}

static void count(sip__rejections_t *r, const char *model, int protocol, int reason) {
  pthread_mutex_lock(&r->mu);
  for (int pass = 0; pass < 2; pass++, model = "unknown") {
    for (size_t i = 0; i < r->n; i++)
      if (r->v[i].protocol == protocol && r->v[i].reason == reason && !strcmp(r->v[i].model, model)) {
        r->v[i].n++;
        pthread_mutex_unlock(&r->mu);
        return;
      }
    if (r->n == r->cap && r->n < MAX_ROWS) {
      size_t cap = r->cap ? r->cap * 2 : 16;
      row_t *v = sip__reallocarray(r->v, cap, sizeof *v);
      if (v) r->v = v, r->cap = cap;
    }
    char *name = r->n < r->cap ? sip__strdup(model) : NULL;
    if (name) {
      r->v[r->n++] = (row_t){name, protocol, reason, 1};
      break;
    }
  }
  pthread_mutex_unlock(&r->mu);
}

static atomic_uint_fast64_t log_second, log_lines, log_suppressed;

void sip__server_note_rejected(sip_server_t *s, sip__protocol_t protocol, const char *model,
                               int malformed, const sip_error_t *e) {
  if (!s || !s->rejections || (unsigned)protocol >= SIP__PROTOCOLS) return;
  sip_code_t code = e ? sip_error_code(e) : SIP_INVALID_ARGUMENT;
  int reason = reason_of(malformed, code);
  /* Only names the server serves become label values: a client cannot
   * grow /metrics by sending made-up model names. */
  sip_error_t *unknown = model && model[0] ? sip__server_model_check(s, model, NULL) : NULL;
  int known = model && model[0] && !unknown;
  sip_error_free(unknown);
  count(s->rejections, known ? model : "unknown", (int)protocol, reason);
  if (!sip__log_enabled(SIP__LOG_INFO)) return;
  uint64_t sec = sip__now_us() / 1000000, cur = atomic_load(&log_second);
  if (sec != cur && atomic_compare_exchange_strong(&log_second, &cur, sec))
    atomic_store(&log_lines, 0);
  if (atomic_fetch_add(&log_lines, 1) >= REJECT_LINES_PER_S) {
    atomic_fetch_add(&log_suppressed, 1);
    return;
  }
  uint64_t dropped = atomic_exchange(&log_suppressed, 0);
  sip__log(SIP__LOG_INFO, "request rejected",
           "protocol=%s model=\"%.200s\" reason=%s code=%s detail=\"%.300s\" suppressed_before=%llu",
           protocol_names[protocol], model && model[0] ? model : "-", reason_names[reason],
           sip_code_name(code), e ? sip_error_message(e) : "-", (unsigned long long)dropped);
}

void sip__rejections_each(sip_server_t *s, sip__rejection_fn fn, void *ctx) {
  sip__rejections_t *r = s->rejections;
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->n; i++)
    fn(ctx, r->v[i].model, protocol_names[r->v[i].protocol], reason_names[r->v[i].reason],
       r->v[i].n);
  pthread_mutex_unlock(&r->mu);
}
