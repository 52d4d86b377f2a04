/* sip — the config's tracing block: where spans go and how many requests
 * are sampled (docs/tracing.md). */
#include "config/parse.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define RATIO_EXPECT "a number from 0 (none) to 1 (every request)"

static int parse_ratio(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__config_t *cfg = base;
  char buf[64], shown[SHOW_MAX * 4 + 8], *end;
  if (sip__cfg_want_scalar(c, v, key, RATIO_EXPECT)) return -1;
  size_t len = v->data.scalar.length;
  if (len >= sizeof buf || !is_plain(v))
    return sip__cfg_fail(c, v->start_mark, key, "%s is not a number; expected " RATIO_EXPECT,
                    sip__cfg_show(shown, sizeof shown, text(v), len));
  memcpy(buf, text(v), len);
  buf[len] = '\0';
  double r = strtod(buf, &end);
  if (end == buf || *end || !(r >= 0 && r <= 1))
    return sip__cfg_fail(c, v->start_mark, key, "%s is not a number from 0 to 1; expected " RATIO_EXPECT,
                    sip__cfg_show(shown, sizeof shown, text(v), len));
  cfg->tracing.sample_ratio = r;
  cfg->tracing.sample_ratio_set = 1;
  return 0;
}

/* http://HOST[:PORT]/PATH or https://..., no spaces or controls. */
static bool valid_url(const char *s, size_t len) {
  size_t skip = len >= 7 && !strncmp(s, "http://", 7)    ? 7
                : len >= 8 && !strncmp(s, "https://", 8) ? 8
                                                         : 0;
  if (!skip || len == skip || s[skip] == '/') return false;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f) return false;
  return true;
}

enum { T_ENDPOINT, T_RATIO, T_SERVICE, T_QUEUE, T_BATCH, T_FLUSH, T_TIMEOUT, T_COUNT };
static const sip__field_t tracing_fields[T_COUNT] = {
    [T_ENDPOINT] = {.name = "otlp_endpoint", .type = F_STRING,
                    .offset = offsetof(sip__config_t, tracing.otlp_endpoint), .valid = valid_url,
                    .expect = "an OTLP/HTTP traces URL, e.g. http://collector:4318/v1/traces",
                    .doc = "Where finished traces are POSTed as OTLP/HTTP JSON; unset: "
                           "tracing is off."},
    [T_RATIO] = {.name = "sample_ratio", .type = F_CUSTOM, .parse = parse_ratio,
                 .expect = RATIO_EXPECT,
                 .doc = "Share of requests traced (default 1); sets the global trace settings "
                        "(trace_level TIMESTAMPS, trace_rate round(1/ratio); 0: OFF), which "
                        "/v2/trace/setting changes live."},
    [T_SERVICE] = {.name = "service_name", .type = F_STRING,
                   .offset = offsetof(sip__config_t, tracing.service_name),
                   .expect = "a service name",
                   .doc = "The spans' service.name resource attribute; default sip."},
    [T_QUEUE] = {.name = "max_queue", .type = F_INT,
                 .offset = offsetof(sip__config_t, tracing.max_queue), .def = 2048, .min = 1,
                 .max = 1048576,
                 .doc = "Finished traces waiting for the exporter; more are dropped (counted in "
                        "sip_trace_spans_dropped_total)."},
    [T_BATCH] = {.name = "batch_traces", .type = F_INT,
                 .offset = offsetof(sip__config_t, tracing.batch_traces), .def = 64, .min = 1,
                 .max = 4096, .doc = "Traces sent in one POST at most."},
    [T_FLUSH] = {.name = "flush_ms", .type = F_INT,
                 .offset = offsetof(sip__config_t, tracing.flush_ms), .def = 200, .min = 0,
                 .max = 60000,
                 .doc = "A batch is POSTed when it holds batch_traces traces or this long after "
                        "its first one finished."},
    [T_TIMEOUT] = {.name = "timeout_ms", .type = F_INT,
                   .offset = offsetof(sip__config_t, tracing.timeout_ms), .def = 2000, .min = 10,
                   .max = 60000,
                   .doc = "How long one POST to the collector may take; a failed POST drops its "
                          "spans, and the next waits 1 s, doubling up to 30 s while POSTs fail."},
};
const sip__section_t sip__cfg_tracing_section = {tracing_fields, T_COUNT};
_Static_assert(COUNT(tracing_fields) <= MAX_FIELDS, "raise MAX_FIELDS");
