/* sip — alert webhooks over libcurl (server/observe/webhook.h, docs/sla.md).
 *
 * One worker per URL: it takes bodies from its queue in order and POSTs
 * each until a 2xx answer or the retries are spent, waiting backoff_ms,
 * then twice that, ... between attempts. Posting only appends to the queue
 * under a short lock, so the SLA monitor (and inference, which never sees
 * any of this) never waits for a receiver. */
#include "server/observe/webhook.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "sip/server.h"

#define BACKOFF_MAX_MS 60000
#define SHUTDOWN_GRACE_MS 2000

typedef struct item {
  struct item *next;
  char *body;
} item_t;

typedef struct worker {
  struct sip__webhooks *owner;
  char *url;
  pthread_t thread;
  int started;
  pthread_mutex_t mu; /* guards the queue, stop and the counters */
  pthread_cond_t cv;  /* CLOCK_MONOTONIC */
  item_t *head, *tail;
  size_t n;
  int busy; /* delivering one taken from the queue */
  uint64_t delivered, failed, dropped, attempts;
} worker_t;

struct sip__webhooks {
  worker_t *w;
  size_t n;
  int timeout_ms, retries, backoff_ms;
  size_t queue_size;
  _Atomic int stop;
  _Atomic uint64_t grace_until_us; /* monotonic; 0 before stop */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ok;
static void curl_init(void) { curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }

static size_t discard(char *p, size_t size, size_t n, void *user) {
  (void)p, (void)user;
  return size * n;
}

/* Aborts a transfer once the server stops and the grace has passed. */
static int progress(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  (void)dt, (void)dn, (void)ut, (void)un;
  struct sip__webhooks *hs = user;
  uint64_t until = atomic_load(&hs->grace_until_us);
  return until && sip__now_us() >= until;
}

/* One POST; 1 when answered 2xx. `why` gets the failure. */
static int post_once(worker_t *w, CURL *h, const char *body, char *why, size_t n) {
  struct sip__webhooks *hs = w->owner;
  char err[CURL_ERROR_SIZE] = "";
  long timeout = hs->timeout_ms;
  uint64_t until = atomic_load(&hs->grace_until_us);
  if (until) { /* shutting down: what is left of the grace at most */
    uint64_t now = sip__now_us();
    long left = until > now ? (long)((until - now) / 1000) : 0;
    if (left < 1) {
      snprintf(why, n, "server stopping");
      return 0;
    }
    if (left < timeout) timeout = left;
  }
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(h, CURLOPT_URL, w->url);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout);
  CURLcode rc = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
  if (rc != CURLE_OK) {
    snprintf(why, n, "%s", err[0] ? err : curl_easy_strerror(rc));
    return 0;
  }
  if (status < 200 || status > 299) {
    snprintf(why, n, "answered HTTP %ld", status);
    return 0;
  }
  return 1;
}

/* Waits ms on the worker's condition; 1 when the server stops meanwhile. */
static int wait_backoff(worker_t *w, long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&w->mu);
  while (!atomic_load(&w->owner->stop))
    if (pthread_cond_timedwait(&w->cv, &w->mu, &ts)) break;
  pthread_mutex_unlock(&w->mu);
  return atomic_load(&w->owner->stop);
}

static CURL *handle_new(worker_t *w, struct curl_slist *headers) {
  CURL *h = curl_easy_init();
  if (!h) return NULL;
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* timeouts without SIGALRM: threads */
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  char agent[64];
  snprintf(agent, sizeof agent, "sipd/%s", sip_version());
  curl_easy_setopt(h, CURLOPT_USERAGENT, agent); /* libcurl keeps a copy */
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, w->owner);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
  return h;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  struct sip__webhooks *hs = w->owner;
  struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
  CURL *h = headers ? handle_new(w, headers) : NULL;
  for (;;) {
    pthread_mutex_lock(&w->mu);
    while (!w->head && !atomic_load(&hs->stop)) pthread_cond_wait(&w->cv, &w->mu);
    item_t *it = w->head;
    if (it) {
      w->head = it->next;
      if (!w->head) w->tail = NULL;
      w->n--;
      w->busy = 1;
    }
    pthread_mutex_unlock(&w->mu);
    if (!it) break; /* stopping, and nothing left */
    uint64_t until = atomic_load(&hs->grace_until_us);
    if (until && sip__now_us() >= until) { /* stopped, and the grace is spent */
      pthread_mutex_lock(&w->mu);
      w->dropped++;
      w->busy = 0;
      pthread_mutex_unlock(&w->mu);
      sip__free(it->body);
      sip__free(it);
      continue;
    }
    int ok = 0, tries = 0;
    char why[CURL_ERROR_SIZE + 64] = "cannot set up libcurl";
    long backoff = hs->backoff_ms;
    for (int attempt = 0; h && attempt <= hs->retries; attempt++) {
      tries++;
      ok = post_once(w, h, it->body, why, sizeof why);
      pthread_mutex_lock(&w->mu);
      w->attempts++;
      pthread_mutex_unlock(&w->mu);
      if (ok) break;
      /* Stopping: one attempt each, no retries. */
      if (attempt == hs->retries || atomic_load(&hs->stop) || wait_backoff(w, backoff)) break;
      backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    pthread_mutex_lock(&w->mu);
    if (ok) w->delivered++;
    else w->failed++;
    w->busy = 0;
    pthread_mutex_unlock(&w->mu);
    if (!ok)
      sip__log(SIP__LOG_WARN, "alert webhook failed", "url=\"%s\" attempts=%d reason=\"%s\"",
               w->url, tries, why);
    sip__free(it->body);
    sip__free(it);
  }
  if (h) curl_easy_cleanup(h);
  curl_slist_free_all(headers);
  return NULL;
}

sip__webhooks_t *sip__webhooks_new(const sip__alerts_config_t *a) {
  if (!a || !a->n_webhooks) return NULL;
  pthread_once(&curl_once, curl_init);
  if (!curl_ok) {
    sip__log(SIP__LOG_ERROR, "alert webhooks off", "reason=\"libcurl failed to initialise\"");
    return NULL;
  }
  sip__webhooks_t *hs = sip__calloc(1, sizeof *hs);
  if (!hs || !(hs->w = sip__calloc(a->n_webhooks, sizeof *hs->w))) {
    sip__free(hs);
    return NULL;
  }
  hs->timeout_ms = a->timeout_ms;
  hs->retries = a->retries;
  hs->backoff_ms = a->backoff_ms;
  hs->queue_size = (size_t)a->queue_size;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  for (size_t i = 0; i < a->n_webhooks; i++) {
    worker_t *w = &hs->w[i];
    w->owner = hs;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    hs->n = i + 1;
    if (!(w->url = sip__strdup(a->webhooks[i])) ||
        pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      sip__log(SIP__LOG_ERROR, "alert webhooks off", "reason=\"cannot start a delivery thread\"");
      pthread_condattr_destroy(&ca);
      sip__webhooks_free(hs);
      return NULL;
    }
    w->started = 1;
  }
  pthread_condattr_destroy(&ca);
  return hs;
}

void sip__webhooks_free(sip__webhooks_t *hs) {
  if (!hs) return;
  uint64_t grace = (uint64_t)(hs->timeout_ms < SHUTDOWN_GRACE_MS ? hs->timeout_ms
                                                                  : SHUTDOWN_GRACE_MS);
  atomic_store(&hs->grace_until_us, sip__now_us() + grace * 1000);
  atomic_store(&hs->stop, 1);
  for (size_t i = 0; i < hs->n; i++) {
    pthread_mutex_lock(&hs->w[i].mu);
    pthread_cond_broadcast(&hs->w[i].cv);
    pthread_mutex_unlock(&hs->w[i].mu);
  }
  for (size_t i = 0; i < hs->n; i++) {
    worker_t *w = &hs->w[i];
    if (w->started) pthread_join(w->thread, NULL);
    /* A worker that ended early (no thread) may leave bodies queued. */
    while (w->head) {
      item_t *it = w->head;
      w->head = it->next;
      sip__free(it->body);
      sip__free(it);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    sip__free(w->url);
  }
  sip__free(hs->w);
  sip__free(hs);
}

void sip__webhooks_post(sip__webhooks_t *hs, const char *body) {
  if (!hs || !body) return;
  for (size_t i = 0; i < hs->n; i++) {
    worker_t *w = &hs->w[i];
    item_t *it = sip__calloc(1, sizeof *it);
    if (it && !(it->body = sip__strdup(body))) {
      sip__free(it);
      it = NULL;
    }
    pthread_mutex_lock(&w->mu);
    if (!it || w->n >= hs->queue_size || atomic_load(&hs->stop)) {
      w->dropped++;
      pthread_mutex_unlock(&w->mu);
      if (it) sip__free(it->body);
      sip__free(it);
      sip__log(SIP__LOG_WARN, "alert webhook queue full", "url=\"%s\" queue_size=%zu", w->url,
               hs->queue_size);
      continue;
    }
    if (w->tail) w->tail->next = it;
    else w->head = it;
    w->tail = it;
    w->n++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
  }
}

size_t sip__webhooks_count(const sip__webhooks_t *hs) { return hs ? hs->n : 0; }

const char *sip__webhooks_read(sip__webhooks_t *hs, size_t i, sip__webhook_stats_t *out) {
  worker_t *w = &hs->w[i];
  pthread_mutex_lock(&w->mu);
  out->delivered = w->delivered;
  out->failed = w->failed;
  out->dropped = w->dropped;
  out->attempts = w->attempts;
  out->queued = w->n + (size_t)w->busy;
  pthread_mutex_unlock(&w->mu);
  return w->url;
}
