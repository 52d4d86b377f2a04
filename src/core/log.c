/* sip — logfmt logging to stderr and clocks. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

static atomic_int log_level = SIP__LOG_INFO;
static atomic_int log_format = SIP__LOG_TEXT;
static const char *level_names[] = {"debug", "info", "warn", "error"};

void sip__log_set_level(int level) { atomic_store(&log_level, level); }
void sip__log_set_format(int format) { atomic_store(&log_format, format); }

/* ---- JSON lines (server.log_format: json) ---- */

typedef struct jbuf {
  char p[12288];
  size_t n;
} jbuf_t;

static void jput(jbuf_t *b, const char *s, size_t n) {
  if (n > sizeof b->p - 8 - b->n) n = sizeof b->p - 8 - b->n; /* cut: room for the closing */
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

/* s[0..n) as a JSON string, quotes included (bytes from 0x80 up pass as
 * they are: the engine's text is UTF-8). */
static void jstr(jbuf_t *b, const char *s, size_t n) {
  jput(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c;
      jput(b, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      jput(b, esc, 6);
    } else {
      jput(b, (const char *)&c, 1);
    }
  }
  jput(b, "\"", 1);
}

/* The logfmt pairs of `kv` (key=value, key="value") as JSON members. A
 * quoted value runs to the quote followed by a space or the end (values
 * quote messages, which may hold quotes of their own); a word without '='
 * is kept under its own name with an empty value. */
static void kv_members(jbuf_t *b, const char *kv) {
  const char *p = kv;
  while (*p) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *key = p;
    while (*p && *p != '=' && *p != ' ') p++;
    size_t klen = (size_t)(p - key);
    const char *val = p;
    size_t vlen = 0;
    if (*p == '=') {
      p++;
      if (*p == '"') {
        const char *end = ++p;
        while (*end && !(*end == '"' && (end[1] == ' ' || !end[1]))) end++;
        val = p, vlen = (size_t)(end - p);
        p = *end ? end + 1 : end;
      } else {
        val = p;
        while (*p && *p != ' ') p++;
        vlen = (size_t)(p - val);
      }
    }
    jput(b, ",", 1);
    jstr(b, key, klen);
    jput(b, ":", 1);
    jstr(b, val, vlen);
  }
}
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
  const char *lv = level_names[level < 0 ? 0 : level > 3 ? 3 : level];
  if (atomic_load(&log_format) == SIP__LOG_JSON) {
    jbuf_t b;
    b.n = 0;
    char head[64];
    int hn = snprintf(head, sizeof head, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"msg\":", when,
                      ts.tv_nsec / 1000000, lv);
    jput(&b, head, (size_t)hn);
    jstr(&b, msg, strlen(msg));
    kv_members(&b, kv);
    memcpy(b.p + b.n, "}\n", 2); /* jput keeps room for it */
    fwrite(b.p, 1, b.n + 2, stderr);
    return;
  }
  /* One fprintf per line so concurrent lines do not interleave (stdio locks). */
  fprintf(stderr, "ts=%s.%03ldZ level=%s msg=\"%s\"%s%s\n", when, ts.tv_nsec / 1000000, lv, msg,
          kv[0] ? " " : "", kv);
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
