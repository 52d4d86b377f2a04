/* Request tracing (src/core/trace.c): the W3C traceparent parser against
 * the spec's valid and invalid forms, ids, traces handed to their sink with
 * their spans, and the OTLP/HTTP JSON encoding (field names, hex ids,
 * times as decimal strings in Unix nanoseconds, parents, attributes). Also
 * the trace rate Triton's settings give a model (src/core/settings.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/settings.h"
#include "core/trace.h"

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define SID "00f067aa0ba902b7"

static int parse(const char *s, sip__trace_ctx_t *c) { return sip__traceparent_parse(s, strlen(s), c); }

static void test_traceparent_valid(void **state) {
  (void)state;
  sip__trace_ctx_t c;
  assert_int_equal(parse("00-" TID "-" SID "-01", &c), 1);
  static const uint8_t want[16] = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                                   0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
  assert_memory_equal(c.trace_id, want, 16);
  assert_true(c.parent == UINT64_C(0x00f067aa0ba902b7));
  assert_int_equal(c.sampled, 1);
  assert_int_equal(parse("00-" TID "-" SID "-00", &c), 1);
  assert_int_equal(c.sampled, 0);
  /* Other flag bits are kept out of "sampled". */
  assert_int_equal(parse("00-" TID "-" SID "-02", &c), 1);
  assert_int_equal(c.sampled, 0);
  /* A later version may be longer, with '-' after the flags. */
  assert_int_equal(parse("01-" TID "-" SID "-01", &c), 1);
  assert_int_equal(parse("cc-" TID "-" SID "-01-what-the-future-adds", &c), 1);
  assert_int_equal(c.sampled, 1);
  /* Not NUL-terminated: only len bytes are read. */
  const char *s = "00-" TID "-" SID "-01trailing";
  assert_int_equal(sip__traceparent_parse(s, 55, &c), 1);
}

static void test_traceparent_invalid(void **state) {
  (void)state;
  static const char *const bad[] = {
      "",
      "00",
      "00-" TID "-" SID "-0",                      /* short */
      "00-" TID "-" SID "-01-",                    /* version 00 is exactly 55 bytes */
      "00-" TID "-" SID "-01 ",
      "ff-" TID "-" SID "-01",                     /* version ff */
      "00-00000000000000000000000000000000-" SID "-01",
      "00-" TID "-0000000000000000-01",
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-" SID "-01", /* uppercase */
      "00-" TID "-00F067AA0BA902B7-01",
      "0g-" TID "-" SID "-01",
      "00-" TID "-" SID "-0x",
      "00_" TID "-" SID "-01",
      "00-" TID "_" SID "-01",
      "00-" TID "-" SID "_01",
      "01-" TID "-" SID "-01x",                    /* a longer later version needs '-' */
      "00-4bf92f3577b34da6a3ce929d0e0e473-" SID "-011",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sip__trace_ctx_t c;
    if (parse(bad[i], &c)) fail_msg("accepted invalid traceparent '%s'", bad[i]);
  }
  sip__trace_ctx_t c;
  assert_int_equal(sip__traceparent_parse(NULL, 0, &c), 0);
}

static void test_traceparent_format_round_trip(void **state) {
  (void)state;
  sip__trace_ctx_t c, d;
  assert_int_equal(parse("00-" TID "-" SID "-01", &c), 1);
  char buf[56];
  sip__traceparent_format(c.trace_id, c.parent, 1, buf);
  assert_string_equal(buf, "00-" TID "-" SID "-01");
  sip__traceparent_format(c.trace_id, 0x1234, 0, buf);
  assert_string_equal(buf, "00-" TID "-0000000000001234-00");
  assert_int_equal(parse(buf, &d), 1);
  assert_true(d.parent == 0x1234 && !d.sampled);
}

static void test_tracestate(void **state) {
  (void)state;
  assert_int_equal(sip__tracestate_ok("congo=t61rcWkgMzE", 17), 1);
  assert_int_equal(sip__tracestate_ok("a=b\n", 4), 0);
  assert_int_equal(sip__tracestate_ok("", 0), 0);
  char big[600];
  memset(big, 'a', sizeof big);
  assert_int_equal(sip__tracestate_ok(big, 512), 1);
  assert_int_equal(sip__tracestate_ok(big, 513), 0);
}

static void test_ids_unique_nonzero(void **state) {
  (void)state;
  uint64_t seen[1000];
  for (int i = 0; i < 1000; i++) {
    seen[i] = sip__trace_rand64();
    assert_true(seen[i] != 0);
    for (int j = 0; j < i; j++) assert_true(seen[i] != seen[j]);
  }
}

typedef struct sink {
  int calls;
  sip__trace_t *got;
} sink_t;

static void keep(sip__trace_t *t, void *user) {
  sink_t *s = user;
  s->calls++;
  s->got = t;
}

static json_t *span_named(json_t *spans, const char *name) {
  size_t i;
  json_t *s;
  json_array_foreach(spans, i, s) if (!strcmp(json_string_value(json_object_get(s, "name")), name)) return s;
  return NULL;
}

static const char *str(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static void test_trace_and_otlp_json(void **state) {
  (void)state;
  sip__trace_ctx_t c;
  assert_int_equal(parse("00-" TID "-" SID "-01", &c), 1);
  sink_t sk = {0};
  uint64_t t0 = sip__now_ns();
  struct timespec w;
  clock_gettime(CLOCK_REALTIME, &w);
  uint64_t wall0 = (uint64_t)w.tv_sec * 1000000000u + (uint64_t)w.tv_nsec;
  sip__trace_t *t = sip__trace_new(&c, "rojo=1", "request", t0, keep, &sk);
  assert_non_null(t);
  assert_memory_equal(sip__trace_id(t), c.trace_id, 16);
  uint64_t root = sip__trace_root(t);
  uint64_t stage = sip__trace_span(t, "stage:a", 0, t0 + 1000, t0 + 9000, NULL, 0);
  assert_true(stage != 0 && stage != root);
  sip__trace_span(t, "batch", stage, t0 + 2000, t0 + 3000, "sip.batch_size", 4);
  sip__trace_root_attr(t, "sip.model", "pool_a");
  sip__trace_ref(t);
  sip__trace_unref(t);
  assert_int_equal(sk.calls, 0); /* a reference is left */
  sip__trace_root_end(t, t0 + 10000, 1);
  sip__trace_unref(t);
  assert_int_equal(sk.calls, 1);
  assert_ptr_equal(sk.got, t);
  assert_int_equal(sip__trace_span_count(t), 3);

  sip__trace_t *two[] = {t};
  char *txt = sip__otlp_encode("svc", two, 1);
  assert_non_null(txt);
  json_error_t je;
  json_t *doc = json_loads(txt, 0, &je);
  free(txt);
  assert_non_null(doc);
  json_t *rs = json_array_get(json_object_get(doc, "resourceSpans"), 0);
  json_t *ra = json_array_get(json_object_get(json_object_get(rs, "resource"), "attributes"), 0);
  assert_string_equal(str(ra, "key"), "service.name");
  assert_string_equal(str(json_object_get(ra, "value"), "stringValue"), "svc");
  json_t *ss = json_array_get(json_object_get(rs, "scopeSpans"), 0);
  assert_string_equal(str(json_object_get(ss, "scope"), "name"), "sip");
  json_t *spans = json_object_get(ss, "spans");
  assert_int_equal(json_array_size(spans), 3);
  json_t *r = span_named(spans, "request"), *st = span_named(spans, "stage:a"),
         *b = span_named(spans, "batch");
  assert_non_null(r);
  assert_non_null(st);
  assert_non_null(b);
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)root);
  assert_string_equal(str(r, "spanId"), hex);
  assert_string_equal(str(r, "traceId"), TID);
  assert_string_equal(str(r, "parentSpanId"), SID);
  assert_string_equal(str(r, "traceState"), "rojo=1");
  assert_int_equal(json_integer_value(json_object_get(r, "kind")), 2);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "status"), "code")), 2);
  assert_string_equal(str(st, "parentSpanId"), hex); /* parent 0: under the root */
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)stage);
  assert_string_equal(str(b, "parentSpanId"), hex);
  assert_string_equal(str(b, "traceId"), TID);
  assert_null(json_object_get(b, "traceState"));
  assert_int_equal(json_integer_value(json_object_get(b, "kind")), 1);
  json_t *ba = json_array_get(json_object_get(b, "attributes"), 0);
  assert_string_equal(str(ba, "key"), "sip.batch_size");
  assert_string_equal(str(json_object_get(ba, "value"), "intValue"), "4");
  json_t *rattr = json_array_get(json_object_get(r, "attributes"), 0);
  assert_string_equal(str(json_object_get(rattr, "value"), "stringValue"), "pool_a");
  /* Times: decimal strings, Unix nanoseconds, offsets kept exactly. */
  unsigned long long rs0 = strtoull(str(r, "startTimeUnixNano"), NULL, 10),
                     re0 = strtoull(str(r, "endTimeUnixNano"), NULL, 10),
                     bs = strtoull(str(b, "startTimeUnixNano"), NULL, 10),
                     be = strtoull(str(b, "endTimeUnixNano"), NULL, 10);
  assert_true(re0 - rs0 == 10000);
  assert_true(bs - rs0 == 2000 && be - rs0 == 3000);
  assert_true(rs0 + 1000000000ull > wall0 && rs0 < wall0 + 1000000000ull);
  json_decref(doc);
  sip__trace_destroy(t);
}

static void test_new_trace_id_without_parent(void **state) {
  (void)state;
  sip__trace_t *a = sip__trace_new(NULL, NULL, "request", sip__now_ns(), NULL, NULL);
  sip__trace_t *b = sip__trace_new(NULL, NULL, "request", sip__now_ns(), NULL, NULL);
  static const uint8_t zero[16];
  assert_memory_not_equal(sip__trace_id(a), zero, 16);
  assert_memory_not_equal(sip__trace_id(a), sip__trace_id(b), 16);
  sip__trace_t *both[] = {a, b};
  char *txt = sip__otlp_encode(NULL, both, 2);
  json_t *doc = json_loads(txt, 0, NULL);
  free(txt);
  json_t *spans = json_object_get(
      json_array_get(json_object_get(json_array_get(json_object_get(doc, "resourceSpans"), 0),
                                     "scopeSpans"),
                     0),
      "spans");
  assert_int_equal(json_array_size(spans), 2);
  /* Roots of new traces have no parent. */
  assert_null(json_object_get(json_array_get(spans, 0), "parentSpanId"));
  json_decref(doc);
  sip__trace_unref(a); /* no sink: freed */
  sip__trace_unref(b);
}

static void apply(sip__trace_set_t *t, const char *model, const char *body) {
  json_t *b = json_loads(body, 0, NULL), *doc = NULL;
  sip_error_t *e = sip__trace_apply(t, model, b, &doc);
  assert_null(e);
  json_decref(b);
  json_decref(doc);
}

static void test_settings_trace_rate(void **state) {
  (void)state;
  sip__trace_set_t *t = sip__trace_set_new();
  assert_int_equal(sip__trace_rate(t, NULL), 0); /* Triton's default: OFF */
  assert_int_equal(sip__trace_rate(t, "m"), 0);
  apply(t, NULL, "{\"trace_level\": [\"TIMESTAMPS\"], \"trace_rate\": \"10\"}");
  assert_int_equal(sip__trace_rate(t, NULL), 10);
  assert_int_equal(sip__trace_rate(t, "m"), 10);
  apply(t, "m", "{\"trace_level\": [\"OFF\"]}");
  assert_int_equal(sip__trace_rate(t, "m"), 0);
  assert_int_equal(sip__trace_rate(t, "other"), 10);
  apply(t, NULL, "{\"trace_level\": [\"OFF\"]}");
  apply(t, "m", "{\"trace_level\": [\"TIMESTAMPS\", \"TENSORS\"], \"trace_rate\": 1}");
  assert_int_equal(sip__trace_rate(t, "m"), 1);
  assert_int_equal(sip__trace_rate(t, "other"), 0);
  apply(t, "m", "{\"trace_level\": null, \"trace_rate\": null}");
  assert_int_equal(sip__trace_rate(t, "m"), 0);
  apply(t, NULL, "{\"trace_level\": [\"TIMESTAMPS\"], \"trace_rate\": \"0\"}");
  assert_int_equal(sip__trace_rate(t, NULL), 0); /* rate 0: none */
  sip__trace_set_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_traceparent_valid),
      cmocka_unit_test(test_traceparent_invalid),
      cmocka_unit_test(test_traceparent_format_round_trip),
      cmocka_unit_test(test_tracestate),
      cmocka_unit_test(test_ids_unique_nonzero),
      cmocka_unit_test(test_trace_and_otlp_json),
      cmocka_unit_test(test_new_trace_id_without_parent),
      cmocka_unit_test(test_settings_trace_rate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
