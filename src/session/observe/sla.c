/* sip — a pool's service-level accounting: windows, compliance and the
 * alert state machine (session/observe/sla.h, docs/sla.md). */
#include "session/observe/sla.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

/* ---- the latency histogram ---- */

#define OCTAVE_SHIFT 5 /* log2(SIP__SLA_SUB) */
_Static_assert(SIP__SLA_SUB == 1 << OCTAVE_SHIFT, "SIP__SLA_SUB is 2^OCTAVE_SHIFT");

int sip__sla_bucket(uint64_t us) {
  if (us < SIP__SLA_SUB) return (int)us;
  int e = 63 - __builtin_clzll(us); /* us in [2^e, 2^(e+1)), e >= OCTAVE_SHIFT */
  int b = SIP__SLA_SUB + (e - OCTAVE_SHIFT) * SIP__SLA_SUB +
          (int)((us >> (e - OCTAVE_SHIFT)) & (SIP__SLA_SUB - 1));
  return b < SIP__SLA_BUCKETS ? b : SIP__SLA_BUCKETS - 1;
}

double sip__sla_bucket_value_us(int b) {
  if (b < SIP__SLA_SUB) return b;
  int octave = (b - SIP__SLA_SUB) / SIP__SLA_SUB, sub = (b - SIP__SLA_SUB) % SIP__SLA_SUB;
  double width = ldexp(1.0, octave);
  return (SIP__SLA_SUB + sub) * width + (width > 1 ? width / 2 : 0);
}

int sip__sla_code_excluded(sip_code_t code) {
  switch (code) {
  case SIP_INVALID_ARGUMENT:
  case SIP_NOT_FOUND:
  case SIP_ALREADY_EXISTS:
  case SIP_CANCELLED:
  case SIP_UNIMPLEMENTED:
  case SIP_FAILED_PRECONDITION:
  case SIP_PERMISSION_DENIED:
    return 1;
  default:
    return 0;
  }
}

const char *sip__alert_level_name(int level) {
  static const char *const names[SIP__ALERT_LEVELS] = {"none", "warning", "critical"};
  return level >= 0 && level < SIP__ALERT_LEVELS ? names[level] : "unknown";
}

/* ---- windows ---- */

void sip__sla_window_compute(const sip__sla_config_t *t, const sip__sla_counts_t *prev,
                             const sip__sla_counts_t *cur, double seconds, uint64_t end_us,
                             sip__sla_window_t *w) {
  memset(w, 0, sizeof *w);
  w->end_us = end_us;
  w->seconds = seconds > 0 ? seconds : 1e-9;
  w->ok = cur->ok - prev->ok;
  w->failed = cur->failed - prev->failed;
  w->excluded = cur->excluded - prev->excluded;
  w->requests = w->ok + w->failed;
  w->p99_ms = -1;
  w->availability = w->requests ? (double)w->ok / (double)w->requests : -1;
  w->throughput_rps = (double)w->ok / w->seconds;
  /* The 99th percentile: the smallest latency at or above 99% of the
   * window's successful requests (nearest rank). Latencies are counted
   * per bucket, so the rank is found in the differences of two readings;
   * a request recorded between reading `ok` and the buckets may make the
   * buckets hold one more than `ok` says, which the rank tolerates. */
  if (w->ok) {
    uint64_t rank = (uint64_t)ceil(0.99 * (double)w->ok), cum = 0;
    int b = 0;
    for (; b < SIP__SLA_BUCKETS - 1; b++) {
      cum += cur->lat[b] - prev->lat[b];
      if (cum >= rank) break;
    }
    w->p99_ms = sip__sla_bucket_value_us(b) / 1000.0;
  }
  if (t->latency_p99_ms && w->p99_ms >= 0 && w->p99_ms > t->latency_p99_ms)
    w->violated |= SIP__SLA_V_LATENCY;
  if (t->availability && w->availability >= 0 && w->availability < t->availability)
    w->violated |= SIP__SLA_V_AVAILABILITY;
  if (t->min_throughput_rps && w->throughput_rps < t->min_throughput_rps)
    w->violated |= SIP__SLA_V_THROUGHPUT;
  w->good = !w->violated;
}

void sip__sla_describe(const sip__sla_config_t *t, const sip__sla_window_t *w, char *buf,
                       size_t n) {
  size_t o = 0;
  buf[0] = '\0';
#define PUT(...)                                                   \
  do {                                                             \
    int k_ = snprintf(buf + o, o < n ? n - o : 0, __VA_ARGS__);    \
    if (k_ > 0) o = o + (size_t)k_ < n ? o + (size_t)k_ : n - 1;   \
  } while (0)
  if (w->violated & SIP__SLA_V_LATENCY)
    PUT("p99 latency %.3g ms > %.3g ms", w->p99_ms, t->latency_p99_ms);
  if (w->violated & SIP__SLA_V_AVAILABILITY)
    PUT("%savailability %.2f%% < %.2f%% (%llu of %llu requests failed)", o ? "; " : "",
        w->availability * 100, t->availability * 100, (unsigned long long)w->failed,
        (unsigned long long)w->requests);
  if (w->violated & SIP__SLA_V_THROUGHPUT)
    PUT("%sthroughput %.3g rps < %.3g rps", o ? "; " : "", w->throughput_rps,
        t->min_throughput_rps);
#undef PUT
}

/* ---- the alert state machine ---- */

int sip__sla_state_init(sip__sla_state_t *st, const sip__sla_config_t *t, uint64_t start_us) {
  memset(st, 0, sizeof *st);
  st->t = *t;
  size_t cap = t->horizon_windows > 0 ? (size_t)t->horizon_windows : 1;
  st->t.horizon_windows = (int)cap;
  if (!(st->hist = sip__calloc(cap, 1))) return -1;
  st->since_us = start_us;
  return 0;
}

void sip__sla_state_destroy(sip__sla_state_t *st) {
  sip__free(st->hist);
  st->hist = NULL;
}

double sip__sla_state_compliance(const sip__sla_state_t *st) {
  return st->hist_n ? (double)st->hist_good / (double)st->hist_n : -1;
}

int sip__sla_state_step(sip__sla_state_t *st, const sip__alerts_config_t *pol,
                        const sip__sla_window_t *w, sip__sla_alert_t *out) {
  size_t cap = (size_t)st->t.horizon_windows;
  if (st->hist_n == cap) { /* the oldest leaves the horizon */
    st->hist_good -= st->hist[st->hist_head];
    st->hist_head = (st->hist_head + 1) % cap;
    st->hist_n--;
  }
  st->hist[(st->hist_head + st->hist_n) % cap] = (unsigned char)(w->good ? 1 : 0);
  st->hist_n++;
  st->hist_good += w->good ? 1 : 0;
  st->windows++;
  st->good_windows += w->good ? 1 : 0;
  st->last = *w;
  st->have_last = 1;
  if (w->good) {
    st->good_streak++;
    st->bad_streak = 0;
  } else {
    st->bad_streak++;
    st->good_streak = 0;
  }

  memset(out, 0, sizeof *out);
  out->window = *w;
  out->time_us = w->end_us;
  out->previous = st->level;
  if (!w->good) {
    int to = SIP__ALERT_NONE;
    if (pol->critical_after && st->bad_streak >= pol->critical_after) to = SIP__ALERT_CRITICAL;
    else if (pol->warning_after && st->bad_streak >= pol->warning_after) to = SIP__ALERT_WARNING;
    if (to <= st->level) return 0; /* never lower while windows stay bad */
    char what[200];
    sip__sla_describe(&st->t, w, what, sizeof what);
    snprintf(st->reason, sizeof st->reason, "%s; %d bad window%s in a row", what, st->bad_streak,
             st->bad_streak == 1 ? "" : "s");
    st->level = to;
    st->since_us = w->end_us;
    st->fired[to]++;
    out->level = to;
    out->streak = st->bad_streak;
    memcpy(out->reason, st->reason, sizeof out->reason);
    return 1;
  }
  if (st->level == SIP__ALERT_NONE || st->good_streak < pol->resolve_after) return 0;
  out->level = st->level;
  out->resolved = 1;
  out->streak = st->good_streak;
  snprintf(out->reason, sizeof out->reason, "every target met for %d consecutive window%s",
           st->good_streak, st->good_streak == 1 ? "" : "s");
  memcpy(st->reason, out->reason, sizeof st->reason);
  st->level = SIP__ALERT_NONE;
  st->since_us = w->end_us;
  st->resolved++;
  return 1;
}

/* ---- JSON ---- */

static json_t *number_or_null(double x, int have) { return have ? json_real(x) : json_null(); }

static json_t *targets_json(const sip__sla_config_t *t) {
  return json_pack("{s:o,s:o,s:o}", "latency_p99_ms",
                   number_or_null(t->latency_p99_ms, t->latency_p99_ms > 0), "availability",
                   number_or_null(t->availability, t->availability > 0), "min_throughput_rps",
                   number_or_null(t->min_throughput_rps, t->min_throughput_rps > 0));
}

static json_t *violations_json(const sip__sla_config_t *t, const sip__sla_window_t *w) {
  json_t *v = json_array();
  if (w->violated & SIP__SLA_V_LATENCY)
    json_array_append_new(v, json_pack("{s:s,s:f,s:f}", "metric", "latency_p99_ms", "measured",
                                        w->p99_ms, "target", t->latency_p99_ms));
  if (w->violated & SIP__SLA_V_AVAILABILITY)
    json_array_append_new(v, json_pack("{s:s,s:f,s:f}", "metric", "availability", "measured",
                                       w->availability, "target", t->availability));
  if (w->violated & SIP__SLA_V_THROUGHPUT)
    json_array_append_new(v, json_pack("{s:s,s:f,s:f}", "metric", "min_throughput_rps",
                                       "measured", w->throughput_rps, "target",
                                       t->min_throughput_rps));
  return v;
}

static json_t *window_json(const sip__sla_config_t *t, const sip__sla_window_t *w) {
  return json_pack("{s:o,s:o,s:f,s:b,s:I,s:I,s:I,s:I,s:f,s:I,s:o}", "p99_ms",
                   number_or_null(w->p99_ms, w->p99_ms >= 0), "availability",
                   number_or_null(w->availability, w->availability >= 0), "throughput_rps",
                   w->throughput_rps, "ok", w->good, "requests", (json_int_t)w->requests,
                   "succeeded", (json_int_t)w->ok, "failed", (json_int_t)w->failed, "excluded",
                   (json_int_t)w->excluded, "seconds", w->seconds, "end_us",
                   (json_int_t)w->end_us, "violations", violations_json(t, w));
}

json_t *sip__sla_alert_json(const char *pool, const char *version, const sip__sla_config_t *t,
                            const sip__sla_alert_t *a) {
  char when[40];
  time_t secs = (time_t)(a->time_us / 1000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  size_t k = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(when + k, sizeof when - k, ".%03uZ", (unsigned)(a->time_us / 1000 % 1000));
  sip__sla_window_t quiet = a->window;
  if (a->resolved) quiet.violated = 0;
  return json_pack("{s:s,s:o,s:s,s:s,s:s,s:s,s:I,s:s,s:i,s:o,s:o,s:o,s:i}", "pool", pool,
                   "version", version ? json_string(version) : json_null(), "level",
                   sip__alert_level_name(a->level), "state", a->resolved ? "resolved" : "firing",
                   "previous_level", sip__alert_level_name(a->previous), "reason", a->reason,
                   "time_us", (json_int_t)a->time_us, "time", when, "consecutive_windows",
                   a->streak, "violations", violations_json(t, &quiet), "window",
                   window_json(t, &a->window), "targets", targets_json(t), "window_s",
                   t->window_s);
}

/* ---- one pool's SLA ---- */

sip__sla_t *sip__sla_new(const sip__sla_config_t *t) {
  static atomic_uint_fast64_t next_id = 1;
  if (!t || !t->enabled) return NULL;
  sip__sla_t *s = sip__calloc(1, sizeof *s);
  if (!s) return NULL;
  s->id = atomic_fetch_add(&next_id, 1);
  if (sip__sla_state_init(&s->st, t, sip__wall_us())) {
    sip__free(s);
    return NULL;
  }
  pthread_mutex_init(&s->mu, NULL);
  return s;
}

void sip__sla_free(sip__sla_t *s) {
  if (!s) return;
  sip__sla_state_destroy(&s->st);
  pthread_mutex_destroy(&s->mu);
  sip__free(s);
}

void sip__sla_record(sip__sla_t *s, sip_code_t code, uint64_t latency_us) {
  if (code == SIP_OK) {
    /* The bucket first: a reading that sees the count sees its latency. */
    atomic_fetch_add_explicit(&s->lat[sip__sla_bucket(latency_us)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ok, 1, memory_order_release);
  } else if (sip__sla_code_excluded(code)) {
    atomic_fetch_add_explicit(&s->excluded, 1, memory_order_relaxed);
  } else {
    atomic_fetch_add_explicit(&s->failed, 1, memory_order_relaxed);
  }
}

void sip__sla_counts_read(sip__sla_t *s, sip__sla_counts_t *out) {
  out->ok = atomic_load_explicit(&s->ok, memory_order_acquire);
  out->failed = atomic_load_explicit(&s->failed, memory_order_relaxed);
  out->excluded = atomic_load_explicit(&s->excluded, memory_order_relaxed);
  for (int b = 0; b < SIP__SLA_BUCKETS; b++)
    out->lat[b] = atomic_load_explicit(&s->lat[b], memory_order_relaxed);
}

uint64_t sip__sla_tick(sip__sla_t *s, const sip__alerts_config_t *pol, uint64_t now_us,
                       uint64_t wall_us, sip__sla_alert_t *alert, int *fired) {
  *fired = 0;
  uint64_t len_us = (uint64_t)s->st.t.window_s * 1000000u;
  pthread_mutex_lock(&s->mu);
  if (!s->window_start_us) {
    sip__sla_counts_read(s, &s->prev);
    s->window_start_us = now_us ? now_us : 1;
    s->st.since_us = wall_us;
  } else if (now_us >= s->window_start_us + len_us) {
    /* The counters are read in a local and copied: `prev` is the next
     * window's start. */
    sip__sla_counts_t *cur = sip__malloc(sizeof *cur);
    if (cur) {
      sip__sla_counts_read(s, cur);
      sip__sla_window_t w;
      sip__sla_window_compute(&s->st.t, &s->prev, cur,
                              (double)(now_us - s->window_start_us) / 1e6, wall_us, &w);
      *fired = sip__sla_state_step(&s->st, pol, &w, alert);
      s->prev = *cur;
      s->window_start_us = now_us;
      sip__free(cur);
    }
  }
  uint64_t next = s->window_start_us + len_us;
  pthread_mutex_unlock(&s->mu);
  return next;
}

void sip__sla_read(sip__sla_t *s, sip__sla_view_t *v) {
  pthread_mutex_lock(&s->mu);
  v->compliance = sip__sla_state_compliance(&s->st);
  v->have_last = s->st.have_last;
  v->last = s->st.last;
  v->level = s->st.level;
  v->since_us = s->st.since_us;
  memcpy(v->fired, s->st.fired, sizeof v->fired);
  v->resolved = s->st.resolved;
  pthread_mutex_unlock(&s->mu);
}

int sip__sla_level(sip__sla_t *s) {
  pthread_mutex_lock(&s->mu);
  int level = s->st.level;
  pthread_mutex_unlock(&s->mu);
  return level;
}

json_t *sip__sla_json(sip__sla_t *s) {
  pthread_mutex_lock(&s->mu);
  const sip__sla_state_t *st = &s->st;
  double c = sip__sla_state_compliance(st);
  json_t *o = json_pack(
      "{s:o,s:i,s:i,s:o,s:I,s:I,s:o,s:{s:s,s:I,s:s},s:{s:I,s:I,s:I}}", "targets",
      targets_json(&st->t), "window_s", st->t.window_s, "horizon_windows", st->t.horizon_windows,
      "compliance", number_or_null(c, c >= 0), "windows", (json_int_t)st->hist_n, "good_windows",
      (json_int_t)st->hist_good, "last_window",
      st->have_last ? window_json(&st->t, &st->last) : json_null(), "alert", "level",
      sip__alert_level_name(st->level), "since_us", (json_int_t)st->since_us, "reason",
      st->level == SIP__ALERT_NONE && !st->resolved ? "" : st->reason, "alerts_fired",
      "warning", (json_int_t)st->fired[SIP__ALERT_WARNING], "critical",
      (json_int_t)st->fired[SIP__ALERT_CRITICAL], "resolved", (json_int_t)st->resolved);
  pthread_mutex_unlock(&s->mu);
  return o;
}
