/* sip — request tracing: W3C trace context (traceparent, tracestate), the
 * spans of one traced request, and their OTLP/HTTP JSON encoding
 * (docs/tracing.md). Exporting is the server's (src/server/observe/tracing.c).
 *
 * A traced request carries one sip__trace_t (refcounted: the request, its
 * response, and a pipeline's stage requests share it). Spans are recorded
 * with monotonic sip__now_ns() times, converted to Unix time when encoded.
 * When the last reference goes, the trace is handed to its sink (the
 * exporter's queue). Untraced requests carry NULL: one branch.
 */
#ifndef SIP_CORE_TRACE_H
#define SIP_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* A parsed traceparent: version 00's fields. */
typedef struct sip__trace_ctx {
  uint8_t trace_id[16];
  uint64_t parent; /* the caller's span id (nonzero) */
  int sampled;     /* trace-flags bit 0 */
} sip__trace_ctx_t;

/* Parses a traceparent header value (`len` bytes, need not be
 * NUL-terminated) per W3C Trace Context level 1: version 00 exactly
 * "00-<32 hex>-<16 hex>-<2 hex>"; a later version at least as long with
 * '-' after the flags; lowercase hex; version ff, an all-zero trace id or
 * parent id are invalid. Returns 1 and fills *out when valid, 0 when not
 * (the caller then ignores the header). */
int sip__traceparent_parse(const char *s, size_t len, sip__trace_ctx_t *out);
/* "00-TRACE-SPAN-FLAGS" into buf (at least 56 bytes). */
void sip__traceparent_format(const uint8_t trace_id[16], uint64_t span, int sampled, char *buf);
/* 1 when `s` (len bytes) is a tracestate worth passing on: at most 512
 * bytes of printable ASCII (W3C: a header too long may be dropped). */
int sip__tracestate_ok(const char *s, size_t len);

/* Random ids (never zero), cheap and thread-safe (a per-thread generator). */
uint64_t sip__trace_rand64(void);

enum { SIP__SPAN_INTERNAL = 1, SIP__SPAN_SERVER = 2 };
#define SIP__SPAN_NAME_MAX 64
#define SIP__SPAN_STR_MAX 96

typedef struct sip__span {
  uint64_t id, parent; /* parent 0: the root's remote parent (or none) */
  uint64_t start_ns, end_ns; /* sip__now_ns clock */
  char name[SIP__SPAN_NAME_MAX];
  int kind;
  /* Attributes: one string and one integer (keys static, NULL: none). */
  const char *str_key;
  char str_val[SIP__SPAN_STR_MAX];
  const char *int_key;
  int64_t int_val;
  int error; /* status ERROR */
} sip__span_t;

typedef struct sip__trace sip__trace_t;
/* Called once with the finished trace, which it then owns (frees with
 * sip__trace_destroy). */
typedef void (*sip__trace_sink_fn)(sip__trace_t *t, void *user);

/* A new trace whose root span (named `name`, kind SERVER) starts at
 * start_ns; under `parent` (the caller's context; NULL: a new trace id).
 * tracestate (copied, may be NULL) is passed on. One reference. NULL when
 * out of memory. */
sip__trace_t *sip__trace_new(const sip__trace_ctx_t *parent, const char *tracestate,
                             const char *name, uint64_t start_ns, sip__trace_sink_fn sink,
                             void *user);
void sip__trace_ref(sip__trace_t *t);
/* Drops a reference; the last one ends the root (at now unless set) and
 * hands the trace to its sink. NULL is a no-op. */
void sip__trace_unref(sip__trace_t *t);
/* Frees a finished trace (the sink's). NULL is a no-op. */
void sip__trace_destroy(sip__trace_t *t);
/* The root span's id. */
uint64_t sip__trace_root(const sip__trace_t *t);
const uint8_t *sip__trace_id(const sip__trace_t *t);
/* Adds a finished span (copied); its id is assigned unless sp->id is set.
 * Returns the id (0 when out of memory: the span is lost). Thread-safe. */
uint64_t sip__trace_add(sip__trace_t *t, const sip__span_t *sp);
/* Sets the root's string/integer attribute, error status and end. */
void sip__trace_root_attr(sip__trace_t *t, const char *key, const char *val);
void sip__trace_root_end(sip__trace_t *t, uint64_t end_ns, int error);
/* A convenience: adds span `name` [start, end] under `parent`, with an
 * optional integer attribute (key NULL: none). */
uint64_t sip__trace_span(sip__trace_t *t, const char *name, uint64_t parent, uint64_t start_ns,
                         uint64_t end_ns, const char *int_key, int64_t int_val);
/* How many spans a finished trace holds (the root included). */
size_t sip__trace_span_count(const sip__trace_t *t);

/* OTLP/HTTP JSON (ExportTraceServiceRequest): one resourceSpans with
 * service.name = `service`, one scopeSpans, every span of `traces`.
 * Returns an owned string (free()), NULL when out of memory. */
char *sip__otlp_encode(const char *service, sip__trace_t *const *traces, size_t n);

#endif
