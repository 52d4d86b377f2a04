/* sip — request tracing: trace context, spans, OTLP JSON (core/trace.h). */
#include "core/trace.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

/* ---- W3C trace context ---------------------------------------------------- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1; /* uppercase is invalid in traceparent */
}

/* `n` lowercase hex digits into out[n/2]; 0 when one is not. */
static int unhex(const char *s, size_t n, uint8_t *out) {
  for (size_t i = 0; i < n; i += 2) {
    int hi = hexval(s[i]), lo = hexval(s[i + 1]);
    if (hi < 0 || lo < 0) return 0;
    out[i / 2] = (uint8_t)(hi << 4 | lo);
  }
  return 1;
}

static int all_zero(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

int sip__traceparent_parse(const char *s, size_t len, sip__trace_ctx_t *out) {
  /* vv-<32>-<16>-ff: 2+1+32+1+16+1+2 = 55 */
  uint8_t ver, id[16], parent[8], flags;
  if (!s || len < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-') return 0;
  if (!unhex(s, 2, &ver) || ver == 0xff) return 0;
  if (ver == 0 ? len != 55 : len > 55 && s[55] != '-') return 0;
  if (!unhex(s + 3, 32, id) || !unhex(s + 36, 16, parent) || !unhex(s + 53, 2, &flags)) return 0;
  if (all_zero(id, 16) || all_zero(parent, 8)) return 0;
  memcpy(out->trace_id, id, 16);
  out->parent = 0;
  for (int i = 0; i < 8; i++) out->parent = out->parent << 8 | parent[i];
  out->sampled = flags & 1;
  return 1;
}

static void hex(const uint8_t *b, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) out[2 * i] = d[b[i] >> 4], out[2 * i + 1] = d[b[i] & 15];
  out[2 * n] = '\0';
}

static void span_hex(uint64_t id, char out[17]) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(id >> (56 - 8 * i));
  hex(b, 8, out);
}

void sip__traceparent_format(const uint8_t trace_id[16], uint64_t span, int sampled, char *buf) {
  char t[33], sp[17];
  hex(trace_id, 16, t);
  span_hex(span, sp);
  snprintf(buf, 56, "00-%s-%s-%02x", t, sp, sampled ? 1 : 0);
}

int sip__tracestate_ok(const char *s, size_t len) {
  if (!s || !len || len > 512) return 0;
  for (size_t i = 0; i < len; i++)
    if (s[i] < 0x20 || s[i] > 0x7e) return 0;
  return 1;
}

/* splitmix64 over a per-thread state seeded from the clock and the
 * thread's own address: ids need to be unique, not secret. */
uint64_t sip__trace_rand64(void) {
  static _Thread_local uint64_t state;
  static atomic_uint_fast64_t salt;
  if (!state) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    state = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&state ^
            (atomic_fetch_add(&salt, 1) * UINT64_C(0x9E3779B97F4A7C15));
  }
  uint64_t z;
  do {
    z = (state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
  } while (!z);
  return z;
}

/* ---- traces -------------------------------------------------------------- */

struct sip__trace {
  atomic_long refs;
  pthread_mutex_t mu;
  uint8_t trace_id[16];
  char *tracestate;
  int64_t wall_off_ns; /* Unix time - sip__now_ns, taken when the trace began */
  sip__span_t *spans;  /* spans[0] is the root */
  size_t n, cap;
  sip__trace_sink_fn sink;
  void *user;
};

static int64_t wall_offset(void) {
  struct timespec w;
  clock_gettime(CLOCK_REALTIME, &w);
  return (int64_t)((uint64_t)w.tv_sec * 1000000000u + (uint64_t)w.tv_nsec) -
         (int64_t)sip__now_ns();
}

static void copy_str(char *dst, size_t cap, const char *src) {
  size_t n = src ? strlen(src) : 0;
  if (n >= cap) n = cap - 1;
  if (n) memcpy(dst, src, n);
  dst[n] = '\0';
}

sip__trace_t *sip__trace_new(const sip__trace_ctx_t *parent, const char *tracestate,
                             const char *name, uint64_t start_ns, sip__trace_sink_fn sink,
                             void *user) {
  sip__trace_t *t = sip__calloc(1, sizeof *t);
  if (!t) return NULL;
  t->cap = 8;
  t->spans = sip__calloc(t->cap, sizeof *t->spans);
  if (tracestate) t->tracestate = sip__strdup(tracestate);
  if (!t->spans || (tracestate && !t->tracestate)) {
    sip__free(t->spans);
    sip__free(t);
    return NULL;
  }
  atomic_init(&t->refs, 1);
  pthread_mutex_init(&t->mu, NULL);
  if (parent) {
    memcpy(t->trace_id, parent->trace_id, 16);
  } else {
    uint64_t a = sip__trace_rand64(), b = sip__trace_rand64();
    for (int i = 0; i < 8; i++)
      t->trace_id[i] = (uint8_t)(a >> (56 - 8 * i)), t->trace_id[8 + i] = (uint8_t)(b >> (56 - 8 * i));
  }
  t->wall_off_ns = wall_offset();
  sip__span_t *root = &t->spans[0];
  root->id = sip__trace_rand64();
  root->parent = parent ? parent->parent : 0;
  root->start_ns = start_ns;
  root->kind = SIP__SPAN_SERVER;
  copy_str(root->name, sizeof root->name, name);
  t->n = 1;
  t->sink = sink;
  t->user = user;
  return t;
}

void sip__trace_ref(sip__trace_t *t) { atomic_fetch_add(&t->refs, 1); }

void sip__trace_unref(sip__trace_t *t) {
  if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
  if (!t->spans[0].end_ns) t->spans[0].end_ns = sip__now_ns();
  if (t->sink)
    t->sink(t, t->user);
  else
    sip__trace_destroy(t);
}

void sip__trace_destroy(sip__trace_t *t) {
  if (!t) return;
  pthread_mutex_destroy(&t->mu);
  sip__free(t->spans);
  sip__free(t->tracestate);
  sip__free(t);
}

uint64_t sip__trace_root(const sip__trace_t *t) { return t->spans[0].id; }
const uint8_t *sip__trace_id(const sip__trace_t *t) { return t->trace_id; }
size_t sip__trace_span_count(const sip__trace_t *t) { return t->n; }

uint64_t sip__trace_add(sip__trace_t *t, const sip__span_t *sp) {
  uint64_t id = sp->id ? sp->id : sip__trace_rand64();
  pthread_mutex_lock(&t->mu);
  if (t->n == t->cap) {
    sip__span_t *g = t->cap < 4096 ? sip__reallocarray(t->spans, t->cap * 2, sizeof *g) : NULL;
    if (!g) {
      pthread_mutex_unlock(&t->mu);
      return 0;
    }
    t->spans = g;
    t->cap *= 2;
  }
  t->spans[t->n] = *sp;
  t->spans[t->n].id = id;
  if (!t->spans[t->n].kind) t->spans[t->n].kind = SIP__SPAN_INTERNAL;
  t->n++;
  pthread_mutex_unlock(&t->mu);
  return id;
}

uint64_t sip__trace_span(sip__trace_t *t, const char *name, uint64_t parent, uint64_t start_ns,
                         uint64_t end_ns, const char *int_key, int64_t int_val) {
  sip__span_t sp = {.parent = parent, .start_ns = start_ns, .end_ns = end_ns,
                    .int_key = int_key, .int_val = int_val};
  copy_str(sp.name, sizeof sp.name, name);
  return sip__trace_add(t, &sp);
}

void sip__trace_root_attr(sip__trace_t *t, const char *key, const char *val) {
  pthread_mutex_lock(&t->mu);
  t->spans[0].str_key = key;
  copy_str(t->spans[0].str_val, sizeof t->spans[0].str_val, val);
  pthread_mutex_unlock(&t->mu);
}

void sip__trace_root_end(sip__trace_t *t, uint64_t end_ns, int error) {
  pthread_mutex_lock(&t->mu);
  t->spans[0].end_ns = end_ns;
  if (error) t->spans[0].error = 1;
  pthread_mutex_unlock(&t->mu);
}

/* ---- OTLP/HTTP JSON ------------------------------------------------------ */

/* A Unix-nanosecond time as the decimal string the JSON mapping wants
 * (int64 fields are strings). */
static json_t *nanos(const sip__trace_t *t, uint64_t mono_ns) {
  char b[32];
  snprintf(b, sizeof b, "%" PRIu64, (uint64_t)((int64_t)mono_ns + t->wall_off_ns));
  return json_string(b);
}

static json_t *attr(const char *key, json_t *value) {
  return json_pack("{s:s,s:o}", "key", key, "value", value);
}

static json_t *span_json(const sip__trace_t *t, const sip__span_t *sp, int root) {
  char tid[33], sid[17], pid[17];
  hex(t->trace_id, 16, tid);
  span_hex(sp->id, sid);
  json_t *attrs = json_array();
  if (sp->str_key) json_array_append_new(attrs, attr(sp->str_key, json_pack("{s:s}", "stringValue", sp->str_val)));
  if (sp->int_key) {
    char v[32];
    snprintf(v, sizeof v, "%" PRId64, sp->int_val);
    json_array_append_new(attrs, attr(sp->int_key, json_pack("{s:s}", "intValue", v)));
  }
  json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:o,s:o,s:o,s:{s:i}}", "traceId", tid, "spanId", sid,
                        "name", sp->name, "kind", sp->kind, "startTimeUnixNano",
                        nanos(t, sp->start_ns), "endTimeUnixNano",
                        nanos(t, sp->end_ns < sp->start_ns ? sp->start_ns : sp->end_ns),
                        "attributes", attrs, "status", "code", sp->error ? 2 : 0);
  if (!o) return NULL;
  uint64_t parent = root ? sp->parent : sp->parent ? sp->parent : t->spans[0].id;
  if (parent) {
    span_hex(parent, pid);
    json_object_set_new(o, "parentSpanId", json_string(pid));
  }
  if (root && t->tracestate) json_object_set_new(o, "traceState", json_string(t->tracestate));
  return o;
}

char *sip__otlp_encode(const char *service, sip__trace_t *const *traces, size_t n) {
  json_t *spans = json_array();
  for (size_t i = 0; spans && i < n; i++)
    for (size_t k = 0; k < traces[i]->n; k++) {
      json_t *s = span_json(traces[i], &traces[i]->spans[k], k == 0);
      if (!s || json_array_append_new(spans, s)) {
        json_decref(spans);
        return NULL;
      }
    }
  if (!spans) return NULL;
  json_t *doc = json_pack(
      "{s:[{s:{s:[{s:s,s:{s:s}}]},s:[{s:{s:s},s:o}]}]}", "resourceSpans", "resource",
      "attributes", "key", "service.name", "value", "stringValue", service ? service : "sip",
      "scopeSpans", "scope", "name", "sip", "spans", spans);
  if (!doc) return NULL;
  char *txt = json_dumps(doc, JSON_COMPACT);
  json_decref(doc);
  return txt;
}
