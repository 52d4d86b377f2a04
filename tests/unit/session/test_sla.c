/* A pool's SLA accounting (src/session/observe/sla.c): the latency histogram, the
 * window arithmetic (p99, availability with the client's own errors left
 * out, throughput), the alert state machine's hysteresis, the compliance
 * horizon, and windows driven by sip__sla_tick with a clock of the test's
 * own (no sleeps, no real time), plus the JSON documents the status, the
 * webhooks and the event stream carry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "session/observe/sla.h"
#include "sip/events.h"
#include "sip/server.h"

static const sip__alerts_config_t POLICY = {.warning_after = 1, .critical_after = 3,
                                            .resolve_after = 2};

static sip__sla_config_t targets(double p99_ms, double avail, double rps) {
  sip__sla_config_t t = {.enabled = 1, .latency_p99_ms = p99_ms, .availability = avail,
                         .min_throughput_rps = rps, .window_s = 10, .horizon_windows = 4};
  return t;
}

static void test_buckets(void **state) {
  (void)state;
  for (uint64_t us = 0; us < SIP__SLA_SUB * 2; us++) /* exact at first */
    assert_true(sip__sla_bucket_value_us(sip__sla_bucket(us)) == (double)us);
  int prev = -1;
  for (uint64_t us = 1; us < (UINT64_C(1) << 36); us = us * 17 / 16 + 1) {
    int b = sip__sla_bucket(us);
    assert_true(b >= prev && b < SIP__SLA_BUCKETS); /* monotone */
    prev = b;
    double v = sip__sla_bucket_value_us(b);
    assert_true(fabs(v - (double)us) <= (double)us / 60); /* within 1.6% */
  }
  assert_int_equal(sip__sla_bucket(UINT64_MAX), SIP__SLA_BUCKETS - 1);
}

static void test_excluded_codes(void **state) {
  (void)state;
  assert_true(sip__sla_code_excluded(SIP_INVALID_ARGUMENT));
  assert_true(sip__sla_code_excluded(SIP_CANCELLED));
  assert_true(sip__sla_code_excluded(SIP_NOT_FOUND));
  assert_false(sip__sla_code_excluded(SIP_OK));
  assert_false(sip__sla_code_excluded(SIP_INTERNAL));
  assert_false(sip__sla_code_excluded(SIP_UNAVAILABLE));
  assert_false(sip__sla_code_excluded(SIP_DEADLINE_EXCEEDED));
  assert_false(sip__sla_code_excluded(SIP_RESOURCE_EXHAUSTED));
}

/* Counts made by hand: `fast` successes at 1 ms, `slow` at `slow_us`. */
static void fill(sip__sla_counts_t *c, uint64_t fast, uint64_t slow, uint64_t slow_us,
                 uint64_t failed, uint64_t excluded) {
  memset(c, 0, sizeof *c);
  c->ok = fast + slow;
  c->failed = failed;
  c->excluded = excluded;
  c->lat[sip__sla_bucket(1000)] += fast;
  c->lat[sip__sla_bucket(slow_us)] += slow;
}

static void test_window_p99_availability_throughput(void **state) {
  (void)state;
  static sip__sla_counts_t zero, cur;
  sip__sla_config_t t = targets(50, 0.99, 20);
  sip__sla_window_t w;
  /* 989 fast + 11 slow of 1000: rank 990 is slow. */
  fill(&cur, 989, 11, 100000, 0, 0);
  sip__sla_window_compute(&t, &zero, &cur, 10, 123, &w);
  assert_true(fabs(w.p99_ms - 100) < 1.6);
  assert_int_equal(w.violated, SIP__SLA_V_LATENCY);
  assert_false(w.good);
  assert_int_equal(w.end_us, 123);
  assert_true(w.throughput_rps == 100);
  /* 990 fast + 10 slow: rank 990 is still fast. */
  fill(&cur, 990, 10, 100000, 0, 0);
  sip__sla_window_compute(&t, &zero, &cur, 10, 0, &w);
  assert_true(fabs(w.p99_ms - 1) < 0.02);
  assert_true(w.good);
  /* Failures count against availability, the client's own errors do not. */
  fill(&cur, 198, 0, 0, 2, 500);
  sip__sla_window_compute(&t, &zero, &cur, 5, 0, &w);
  assert_int_equal(w.requests, 200);
  assert_int_equal(w.excluded, 500);
  assert_true(fabs(w.availability - 0.99) < 1e-12);
  assert_true(w.good); /* 0.99 meets 0.99 */
  fill(&cur, 197, 0, 0, 3, 0);
  sip__sla_window_compute(&t, &zero, &cur, 5, 0, &w);
  assert_int_equal(w.violated, SIP__SLA_V_AVAILABILITY);
  /* Throughput is per second of the window's real length. */
  fill(&cur, 300, 0, 0, 0, 0);
  sip__sla_window_compute(&t, &zero, &cur, 20, 0, &w);
  assert_true(w.throughput_rps == 15);
  assert_int_equal(w.violated, SIP__SLA_V_THROUGHPUT);
  char why[256];
  sip__sla_describe(&t, &w, why, sizeof why);
  assert_string_equal(why, "throughput 15 rps < 20 rps");
  /* The difference of two readings is the window. */
  static sip__sla_counts_t before;
  fill(&before, 1000, 0, 0, 0, 0);
  fill(&cur, 1100, 100, 200000, 50, 0);
  sip__sla_window_compute(&t, &before, &cur, 10, 0, &w);
  assert_int_equal(w.ok, 200);
  assert_int_equal(w.failed, 50);
  assert_true(fabs(w.p99_ms - 200) < 3.2);
  assert_int_equal(w.violated, SIP__SLA_V_LATENCY | SIP__SLA_V_AVAILABILITY);
  sip__sla_describe(&t, &w, why, sizeof why);
  /* 200 ms reads back as its bucket's middle, 198.656 ms; 20 rps meets 20. */
  assert_string_equal(why, "p99 latency 199 ms > 50 ms; availability 80.00% < 99.00% (50 of 250 "
                           "requests failed)");
}

static void test_window_idle(void **state) {
  (void)state;
  static sip__sla_counts_t zero;
  sip__sla_window_t w;
  /* Nothing measured: only a throughput target can be missed. */
  sip__sla_config_t t = targets(50, 0.999, 0);
  sip__sla_window_compute(&t, &zero, &zero, 10, 0, &w);
  assert_true(w.p99_ms < 0 && w.availability < 0);
  assert_true(w.good);
  t = targets(50, 0.999, 1);
  sip__sla_window_compute(&t, &zero, &zero, 10, 0, &w);
  assert_int_equal(w.violated, SIP__SLA_V_THROUGHPUT);
  /* Only failures: availability 0, no latency. */
  static sip__sla_counts_t cur;
  fill(&cur, 0, 0, 0, 5, 0);
  sip__sla_window_compute(&t, &zero, &cur, 10, 0, &w);
  assert_true(w.availability == 0 && w.p99_ms < 0);
  assert_int_equal(w.violated, SIP__SLA_V_AVAILABILITY | SIP__SLA_V_THROUGHPUT);
}

static sip__sla_window_t win(int good, uint64_t end_us) {
  sip__sla_window_t w = {.end_us = end_us, .seconds = 10, .good = good};
  if (!good) {
    w.violated = SIP__SLA_V_LATENCY;
    w.p99_ms = 80;
  }
  return w;
}

/* Feeds windows good/bad as `pattern` ('g'/'b') and returns the alerts as
 * "W" (warning fired), "C" (critical fired), "R" (resolved), "." (none)
 * per window. */
static void run(sip__sla_state_t *st, const sip__alerts_config_t *pol, const char *pattern,
                char *out) {
  for (size_t i = 0; pattern[i]; i++) {
    sip__sla_window_t w = win(pattern[i] == 'g', 1000 + i);
    sip__sla_alert_t a;
    int fired = sip__sla_state_step(st, pol, &w, &a);
    out[i] = !fired        ? '.'
             : a.resolved ? 'R'
             : a.level == SIP__ALERT_CRITICAL ? 'C'
                                              : 'W';
  }
  out[strlen(pattern)] = '\0';
}

static void test_hysteresis(void **state) {
  (void)state;
  sip__sla_config_t t = targets(50, 0, 0);
  t.horizon_windows = 100;
  sip__sla_state_t st;
  char got[64];
  assert_int_equal(sip__sla_state_init(&st, &t, 7), 0);
  assert_true(sip__sla_state_compliance(&st) < 0); /* no window yet */
  assert_int_equal(st.since_us, 7);
  /* warning after 1 bad, critical after 3; a good window alone does not
   * resolve (2 needed); a bad one in between restarts the count. */
  run(&st, &POLICY, "gbbbgbggg", got);
  assert_string_equal(got, ".W.C...R.");
  sip__sla_state_destroy(&st);

  assert_int_equal(sip__sla_state_init(&st, &t, 0), 0);
  run(&st, &POLICY, "bbbbbbgg", got);
  assert_string_equal(got, "W.C....R");
  assert_int_equal(st.level, SIP__ALERT_NONE);
  assert_int_equal(st.fired[SIP__ALERT_WARNING], 1);
  assert_int_equal(st.fired[SIP__ALERT_CRITICAL], 1);
  assert_int_equal(st.resolved, 1);
  assert_string_equal(st.reason, "every target met for 2 consecutive windows");
  assert_true(sip__sla_state_compliance(&st) == 2.0 / 8);
  sip__sla_state_destroy(&st);

  /* A warning that resolves before turning critical. */
  assert_int_equal(sip__sla_state_init(&st, &t, 0), 0);
  run(&st, &POLICY, "bbggbb", got);
  assert_string_equal(got, "W..RW.");
  sip__sla_state_destroy(&st);

  /* critical_after 0: warnings only; warning_after 0: critical only. */
  sip__alerts_config_t warn_only = {.warning_after = 2, .critical_after = 0, .resolve_after = 1};
  assert_int_equal(sip__sla_state_init(&st, &t, 0), 0);
  run(&st, &warn_only, "bbbbbg", got);
  assert_string_equal(got, ".W...R");
  sip__sla_state_destroy(&st);
  sip__alerts_config_t crit_only = {.warning_after = 0, .critical_after = 2, .resolve_after = 1};
  assert_int_equal(sip__sla_state_init(&st, &t, 0), 0);
  run(&st, &crit_only, "bbbg", got);
  assert_string_equal(got, ".C.R");
  sip__sla_state_destroy(&st);
  /* Equal counts: straight to critical, no warning first. */
  sip__alerts_config_t same = {.warning_after = 2, .critical_after = 2, .resolve_after = 1};
  assert_int_equal(sip__sla_state_init(&st, &t, 0), 0);
  run(&st, &same, "bbb", got);
  assert_string_equal(got, ".C.");
  sip__sla_state_destroy(&st);
}

static void test_alert_contents(void **state) {
  (void)state;
  sip__sla_config_t t = targets(50, 0, 0);
  sip__sla_state_t st;
  assert_int_equal(sip__sla_state_init(&st, &t, 0), 0);
  sip__sla_window_t w = win(0, 5000000);
  sip__sla_alert_t a;
  assert_int_equal(sip__sla_state_step(&st, &POLICY, &w, &a), 1);
  assert_int_equal(a.level, SIP__ALERT_WARNING);
  assert_int_equal(a.previous, SIP__ALERT_NONE);
  assert_int_equal(a.resolved, 0);
  assert_int_equal(a.streak, 1);
  assert_int_equal(a.time_us, 5000000);
  assert_string_equal(a.reason, "p99 latency 80 ms > 50 ms; 1 bad window in a row");
  assert_int_equal(st.since_us, 5000000);

  json_t *o = sip__sla_alert_json("p", NULL, &t, &a);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(o, "pool")), "p");
  assert_true(json_is_null(json_object_get(o, "version")));
  assert_string_equal(json_string_value(json_object_get(o, "level")), "warning");
  assert_string_equal(json_string_value(json_object_get(o, "state")), "firing");
  assert_string_equal(json_string_value(json_object_get(o, "previous_level")), "none");
  assert_string_equal(json_string_value(json_object_get(o, "time")), "1970-01-01T00:00:05.000Z");
  assert_int_equal(json_integer_value(json_object_get(o, "time_us")), 5000000);
  json_t *v = json_array_get(json_object_get(o, "violations"), 0);
  assert_string_equal(json_string_value(json_object_get(v, "metric")), "latency_p99_ms");
  assert_true(json_real_value(json_object_get(v, "measured")) == 80);
  assert_true(json_real_value(json_object_get(v, "target")) == 50);
  assert_int_equal(json_array_size(json_object_get(o, "violations")), 1);
  assert_true(json_real_value(json_object_get(json_object_get(o, "targets"), "latency_p99_ms")) == 50);
  assert_true(json_is_null(json_object_get(json_object_get(o, "targets"), "availability")));
  json_decref(o);

  /* Resolved: no violations, the level that ended. */
  sip__sla_window_t g = win(1, 6000000);
  assert_int_equal(sip__sla_state_step(&st, &POLICY, &g, &a), 0);
  assert_int_equal(sip__sla_state_step(&st, &POLICY, &g, &a), 1);
  o = sip__sla_alert_json("p", "3", &t, &a);
  assert_string_equal(json_string_value(json_object_get(o, "level")), "warning");
  assert_string_equal(json_string_value(json_object_get(o, "state")), "resolved");
  assert_string_equal(json_string_value(json_object_get(o, "version")), "3");
  assert_int_equal(json_array_size(json_object_get(o, "violations")), 0);
  assert_int_equal(json_integer_value(json_object_get(o, "consecutive_windows")), 2);
  json_decref(o);
  sip__sla_state_destroy(&st);
}

static void test_compliance_horizon(void **state) {
  (void)state;
  sip__sla_config_t t = targets(50, 0, 0); /* horizon_windows 4 */
  sip__sla_state_t st;
  sip__alerts_config_t quiet = {.resolve_after = 1};
  char got[16];
  assert_int_equal(sip__sla_state_init(&st, &t, 0), 0);
  run(&st, &quiet, "bgg", got);
  assert_true(sip__sla_state_compliance(&st) == 2.0 / 3);
  run(&st, &quiet, "g", got);
  assert_true(sip__sla_state_compliance(&st) == 3.0 / 4);
  run(&st, &quiet, "g", got); /* the bad one leaves the horizon */
  assert_true(sip__sla_state_compliance(&st) == 1.0);
  run(&st, &quiet, "bbbb", got);
  assert_true(sip__sla_state_compliance(&st) == 0.0);
  assert_int_equal(st.windows, 9);
  assert_int_equal(st.good_windows, 4);
  assert_string_equal(got, "....");
  sip__sla_state_destroy(&st);
}

static void rec(sip__sla_t *s, int n, sip_code_t code, uint64_t us) {
  for (int i = 0; i < n; i++) sip__sla_record(s, code, us);
}

/* Windows driven by the test's clock: nothing closes before window_s,
 * and a late tick measures the time the window really lasted. */
static void test_tick_with_injected_clock(void **state) {
  (void)state;
  sip__sla_config_t t = targets(50, 0.9, 0);
  t.window_s = 2;
  sip__sla_t *s = sip__sla_new(&t);
  assert_non_null(s);
  assert_null(sip__sla_new(&(sip__sla_config_t){.latency_p99_ms = 5})); /* not enabled */
  sip__sla_alert_t a;
  int fired = -1;
  uint64_t t0 = 1000000000, wall = 1700000000000000;
  rec(s, 5, SIP_OK, 500); /* before the first tick: not in any window */
  assert_int_equal(sip__sla_tick(s, &POLICY, t0, wall, &a, &fired), t0 + 2000000);
  assert_int_equal(fired, 0);
  rec(s, 99, SIP_OK, 2000);
  rec(s, 1, SIP_OK, 3000);
  rec(s, 10, SIP_INVALID_ARGUMENT, 0);
  assert_int_equal(sip__sla_tick(s, &POLICY, t0 + 1999999, wall, &a, &fired), t0 + 2000000);
  sip__sla_view_t v;
  sip__sla_read(s, &v);
  assert_int_equal(v.have_last, 0); /* not due yet */
  assert_true(v.compliance < 0);
  /* Closed 0.5 s late: 100 requests over 2.5 s. */
  assert_int_equal(sip__sla_tick(s, &POLICY, t0 + 2500000, wall + 2500000, &a, &fired),
                   t0 + 4500000);
  assert_int_equal(fired, 0);
  sip__sla_read(s, &v);
  assert_int_equal(v.have_last, 1);
  assert_true(v.last.good);
  assert_int_equal(v.last.ok, 100);
  assert_int_equal(v.last.excluded, 10);
  assert_true(fabs(v.last.p99_ms - 2) < 0.04);
  assert_true(fabs(v.last.throughput_rps - 40) < 1e-9);
  assert_true(v.compliance == 1);
  /* A slow window fires a warning, timestamped with the wall clock given. */
  rec(s, 50, SIP_OK, 90000);
  rec(s, 10, SIP_INTERNAL, 1000);
  sip__sla_tick(s, &POLICY, t0 + 4500000, wall + 4500000, &a, &fired);
  assert_int_equal(fired, 1);
  assert_int_equal(a.level, SIP__ALERT_WARNING);
  assert_int_equal(a.time_us, wall + 4500000);
  assert_int_equal(a.window.violated, SIP__SLA_V_LATENCY | SIP__SLA_V_AVAILABILITY);
  assert_non_null(strstr(a.reason, "availability 83.33% < 90.00% (10 of 60 requests failed)"));

  /* The status object, with the key names the dashboard reads. */
  json_t *o = sip__sla_json(s);
  assert_non_null(o);
  json_t *tg = json_object_get(o, "targets");
  assert_true(json_real_value(json_object_get(tg, "latency_p99_ms")) == 50);
  assert_true(json_real_value(json_object_get(tg, "availability")) == 0.9);
  assert_true(json_is_null(json_object_get(tg, "min_throughput_rps")));
  assert_int_equal(json_integer_value(json_object_get(o, "window_s")), 2);
  assert_true(json_real_value(json_object_get(o, "compliance")) == 0.5);
  json_t *lw = json_object_get(o, "last_window");
  assert_true(json_real_value(json_object_get(lw, "p99_ms")) > 85);
  assert_true(fabs(json_real_value(json_object_get(lw, "availability")) - 50.0 / 60) < 1e-9);
  assert_true(fabs(json_real_value(json_object_get(lw, "throughput_rps")) - 25) < 1e-9);
  assert_true(json_is_false(json_object_get(lw, "ok")));
  json_t *al = json_object_get(o, "alert");
  assert_string_equal(json_string_value(json_object_get(al, "level")), "warning");
  assert_int_equal(json_integer_value(json_object_get(al, "since_us")), wall + 4500000);
  assert_non_null(strstr(json_string_value(json_object_get(al, "reason")), "p99 latency"));
  json_decref(o);
  sip__sla_free(s);
  sip__sla_free(NULL);
}

/* The ALERT event as sip_event_json writes it. */
static void test_alert_event_json(void **state) {
  (void)state;
  assert_string_equal(sip_event_type_name(SIP_EVENT_ALERT), "ALERT");
  sip_event_t ev = {.type = SIP_EVENT_ALERT, .time_us = 9};
  strcpy(ev.pool, "p");
  strcpy(ev.old_state, "warning");
  strcpy(ev.new_state, "critical");
  strcpy(ev.text, "p99 latency 80 ms > 50 ms; 3 bad windows in a row");
  char *s = sip_event_json(&ev, 0);
  json_t *o = json_loads(s, 0, NULL);
  sip_free(s);
  assert_string_equal(json_string_value(json_object_get(o, "event")), "ALERT");
  assert_string_equal(json_string_value(json_object_get(o, "level")), "critical");
  assert_string_equal(json_string_value(json_object_get(o, "state")), "firing");
  assert_string_equal(json_string_value(json_object_get(o, "previous_level")), "warning");
  assert_string_equal(json_string_value(json_object_get(o, "reason")), ev.text);
  json_decref(o);
  strcpy(ev.old_state, "critical");
  strcpy(ev.new_state, "none");
  s = sip_event_json(&ev, 0);
  o = json_loads(s, 0, NULL);
  sip_free(s);
  assert_string_equal(json_string_value(json_object_get(o, "level")), "critical");
  assert_string_equal(json_string_value(json_object_get(o, "state")), "resolved");
  json_decref(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buckets),
      cmocka_unit_test(test_excluded_codes),
      cmocka_unit_test(test_window_p99_availability_throughput),
      cmocka_unit_test(test_window_idle),
      cmocka_unit_test(test_hysteresis),
      cmocka_unit_test(test_alert_contents),
      cmocka_unit_test(test_compliance_horizon),
      cmocka_unit_test(test_tick_with_injected_clock),
      cmocka_unit_test(test_alert_event_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
