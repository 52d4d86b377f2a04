/* sip — request tracing in the server: sampling, front-end spans and the
 * OTLP/HTTP JSON exporter (server/observe/tracing.h, docs/tracing.md). */
#include "server/observe/tracing.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/settings.h"
#include "core/trace.h"
#include "session/engine.h"

struct sip__tracer {
  const sip__tracing_config_t *cfg;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sip__trace_t **q; /* ring of finished traces */
  size_t head, n, cap;
  int stop;
  atomic_uint_fast64_t sampled, exported, dropped; /* traces; spans; spans */
};

/* ---- the caller's context ------------------------------------------------ */

void sip__trace_received(sip_request_t *r, uint64_t t0_ns) { r->recv_ns = t0_ns; }

/* ---- sampling ------------------------------------------------------------ */

static void enqueue(sip__trace_t *tr, void *user);

void sip__tracer_sample(sip__tracer_t *t, sip__trace_set_t *settings, sip_request_t *r) {
  if (!t || r->trace) return; /* a pipeline stage's request: traced with its pipeline */
  int rate = sip__trace_rate(settings, r->pool);
  if (!rate) return;
  /* A caller that sampled its trace is followed; otherwise one in `rate`. */
  if (r->has_trace_ctx ? !r->trace_ctx.sampled : sip__trace_rand64() % (uint64_t)rate != 0) return;
  uint64_t now = sip__now_ns(), t0 = r->recv_ns && r->recv_ns <= now ? r->recv_ns : now;
  t0 -= t0 % 1000; /* engine spans start at microseconds (arrival_us): never before the root */
  r->trace = sip__trace_new(r->has_trace_ctx ? &r->trace_ctx : NULL,
                            r->has_trace_ctx ? r->tracestate : NULL, "request", t0,
                            enqueue, t);
  if (!r->trace) return;
  atomic_fetch_add(&t->sampled, 1);
  sip__trace_root_attr(r->trace, "sip.model", r->pool);
  if (t0 < now) sip__trace_span(r->trace, "receive", 0, t0, now, NULL, 0);
}

uint64_t sip__trace_send_begin(const sip_response_t *resp) {
  return resp && resp->trace ? sip__now_ns() : 0;
}

void sip__trace_sent(sip_response_t *resp, uint64_t t0_ns) {
  if (!t0_ns || !resp || !resp->trace) return;
  uint64_t now = sip__now_ns();
  sip__trace_span(resp->trace, "send", 0, t0_ns, now, NULL, 0);
  sip__trace_root_end(resp->trace, now, resp->code != SIP_OK);
}

/* ---- the exporter -------------------------------------------------------- */

static void drop(sip__tracer_t *t, sip__trace_t *tr) {
  atomic_fetch_add(&t->dropped, sip__trace_span_count(tr));
  sip__trace_destroy(tr);
}

/* The trace sink: never blocks (a full queue drops the trace). */
static void enqueue(sip__trace_t *tr, void *user) {
  sip__tracer_t *t = user;
  pthread_mutex_lock(&t->mu);
  if (t->n == t->cap || t->stop) {
    pthread_mutex_unlock(&t->mu);
    drop(t, tr);
    return;
  }
  t->q[(t->head + t->n++) % t->cap] = tr;
  /* The exporter waits for a first trace, then for a full batch: no
   * wake-up per request. */
  if (t->n == 1 || t->n == (size_t)t->cfg->batch_traces) pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

static size_t discard(char *p, size_t size, size_t n, void *user) {
  (void)p, (void)user;
  return size * n;
}

/* POSTs `batch`; counts its spans exported or dropped; frees it. 1 when
 * the collector took it. */
static int post(sip__tracer_t *t, CURL *c, sip__trace_t **batch, size_t n) {
  size_t spans = 0;
  for (size_t i = 0; i < n; i++) spans += sip__trace_span_count(batch[i]);
  char *body = sip__otlp_encode(t->cfg->service_name, batch, n);
  int ok = 0;
  if (body && c) {
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, t->cfg->otlp_endpoint);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)t->cfg->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    long status = 0;
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    ok = rc == CURLE_OK && status >= 200 && status < 300;
    if (!ok)
      sip__log(SIP__LOG_DEBUG, "trace export failed", "endpoint=%s curl=\"%s\" status=%ld spans=%zu",
               t->cfg->otlp_endpoint, curl_easy_strerror(rc), status, spans);
    curl_slist_free_all(h);
  }
  free(body); /* jansson's allocation */
  atomic_fetch_add(ok ? &t->exported : &t->dropped, spans);
  for (size_t i = 0; i < n; i++) sip__trace_destroy(batch[i]);
  return ok;
}

/* Waits on t->cv until `until_us` (sip__now_us clock). Caller holds t->mu. */
static void wait_until(sip__tracer_t *t, uint64_t until_us) {
  struct timespec ts = {(time_t)(until_us / 1000000), (long)(until_us % 1000000) * 1000};
  pthread_cond_timedwait(&t->cv, &t->mu, &ts);
}

/* Takes what is queued, up to `max`, into batch. Caller holds t->mu. */
static size_t take(sip__tracer_t *t, sip__trace_t **batch, size_t max) {
  size_t n = 0;
  while (t->n && n < max) {
    batch[n++] = t->q[t->head];
    t->head = (t->head + 1) % t->cap;
    t->n--;
  }
  return n;
}

/* The exporter: a batch leaves when it is full or flush_ms after its first
 * trace came. After a failed POST it waits (1 s, doubling up to 30 s)
 * before the next, so a collector that is down costs the server a
 * connection attempt now and then, not one per request; what arrives
 * meanwhile waits in the queue, and what does not fit is dropped. */
static void *exporter_main(void *arg) {
  sip__tracer_t *t = arg;
  CURL *c = curl_easy_init();
  size_t max = (size_t)t->cfg->batch_traces;
  sip__trace_t **batch = sip__calloc(max, sizeof *batch);
  uint64_t backoff_ms = 0;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    while (!t->n && !t->stop) pthread_cond_wait(&t->cv, &t->mu);
    if (!t->n) break; /* stopping, nothing left */
    uint64_t until = sip__now_us() + 1000 * (backoff_ms ? backoff_ms : (uint64_t)t->cfg->flush_ms);
    while (!t->stop && (t->n < max || backoff_ms) && sip__now_us() < until) wait_until(t, until);
    int stopping = t->stop;
    size_t n = batch ? take(t, batch, max) : 0;
    pthread_mutex_unlock(&t->mu);
    int ok = batch && post(t, c, batch, n);
    pthread_mutex_lock(&t->mu);
    backoff_ms = ok ? 0 : backoff_ms ? (backoff_ms * 2 > 30000 ? 30000 : backoff_ms * 2) : 1000;
    /* At shutdown the queue is sent while the collector takes it; after a
     * failure (or without memory for a batch) the rest is dropped. */
    if ((stopping && !ok) || !batch) {
      while (t->n) {
        sip__trace_t *tr = t->q[t->head];
        t->head = (t->head + 1) % t->cap;
        t->n--;
        drop(t, tr);
      }
      if (stopping) break;
    }
  }
  pthread_mutex_unlock(&t->mu);
  sip__free(batch);
  curl_easy_cleanup(c);
  return NULL;
}

sip__tracer_t *sip__tracer_new(const sip__tracing_config_t *cfg) {
  if (!cfg->otlp_endpoint) return NULL;
  /* Not thread-safe: here, while the server starts (paired in free). */
  if (curl_global_init(CURL_GLOBAL_DEFAULT)) return NULL;
  sip__tracer_t *t = sip__calloc(1, sizeof *t);
  if (!t) {
    curl_global_cleanup();
    return NULL;
  }
  t->cfg = cfg;
  t->cap = (size_t)cfg->max_queue;
  if (!(t->q = sip__calloc(t->cap, sizeof *t->q))) {
    curl_global_cleanup();
    sip__free(t);
    return NULL;
  }
  pthread_mutex_init(&t->mu, NULL);
  pthread_condattr_t ca; /* timed waits on the monotonic clock (sip__now_us) */
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&t->thread, NULL, exporter_main, t)) {
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    sip__free(t->q);
    sip__free(t);
    curl_global_cleanup();
    return NULL;
  }
  sip__log(SIP__LOG_INFO, "tracing on", "otlp_endpoint=%s", cfg->otlp_endpoint);
  return t;
}

void sip__tracer_free(sip__tracer_t *t) {
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  t->stop = 1;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->thread, NULL);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  sip__free(t->q);
  sip__free(t);
  curl_global_cleanup();
}

void sip__tracer_counts(sip__tracer_t *t, uint64_t *sampled, uint64_t *exported,
                        uint64_t *dropped) {
  *sampled = t ? atomic_load(&t->sampled) : 0;
  *exported = t ? atomic_load(&t->exported) : 0;
  *dropped = t ? atomic_load(&t->dropped) : 0;
}
