/* sip — logfmt logging to stderr and clocks. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "core/core.h"

static atomic_int log_level = SIP__LOG_INFO;
static const char *level_names[] = {"debug", "info", "warn", "error"};

void sip__log_set_level(int level) { atomic_store(&log_level, level); }
int sip__log_enabled(int level) { return level >= atomic_load(&log_level); }

void sip__log(int level, const char *msg, const char *kv_fmt, ...) {
  if (!sip__log_enabled(level)) return;
  char kv[2048] = "";
  if (kv_fmt) {
    va_list ap;
    va_start(ap, kv_fmt);
    vsnprintf(kv, sizeof kv, kv_fmt, ap);
    va_end(ap);
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  /* One fprintf per line so concurrent lines do not interleave (stdio locks). */
  fprintf(stderr, "ts=%s.%03ldZ level=%s msg=\"%s\"%s%s\n", when, ts.tv_nsec / 1000000,
          level_names[level < 0 ? 0 : level > 3 ? 3 : level], msg, kv[0] ? " " : "", kv);
}

/* Failed requests are logged one line each, but a client hammering a bad
 * request must not turn stderr into the bottleneck: at most
 * FAILURE_LINES_PER_S lines a second; the first line of the next second
 * says how many were left out. */
#define FAILURE_LINES_PER_S 50
static atomic_uint_fast64_t fail_second, fail_lines, fail_suppressed;

void sip__log_failure(const char *kv_fmt, ...) {
  if (!sip__log_enabled(SIP__LOG_WARN)) return;
  uint64_t sec = sip__now_us() / 1000000, cur = atomic_load(&fail_second);
  if (sec != cur && atomic_compare_exchange_strong(&fail_second, &cur, sec))
    atomic_store(&fail_lines, 0);
  if (atomic_fetch_add(&fail_lines, 1) >= FAILURE_LINES_PER_S) {
    atomic_fetch_add(&fail_suppressed, 1);
    return;
  }
  char kv[2048];
  va_list ap;
  va_start(ap, kv_fmt);
  vsnprintf(kv, sizeof kv, kv_fmt, ap);
  va_end(ap);
  uint64_t dropped = atomic_exchange(&fail_suppressed, 0);
  if (dropped)
    sip__log(SIP__LOG_WARN, "request failed", "%s suppressed_before=%llu", kv,
             (unsigned long long)dropped);
  else
    sip__log(SIP__LOG_WARN, "request failed", "%s", kv);
}

uint64_t sip__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
uint64_t sip__now_us(void) { return sip__now_ns() / 1000; }
uint64_t sip__wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}
