/* sip — the response cache's Redis backend (hiredis): GET and SET EX of
 * "sip:rc:<hex digest>" on connections kept idle between requests. Connect
 * and every command have a timeout (redis.timeout_ms), so a request never
 * waits on Redis longer than that; a failure drops the connections and
 * Redis is not tried again for a while (100 ms, doubling up to 5 s while it
 * keeps failing): meanwhile lookups and stores fail at once and requests
 * run uncached. Failures are logged at most every 10 s. */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "server/cache/response_cache.h"

#define MAX_IDLE 16
#define BACKOFF_MIN_US 100000u
#define BACKOFF_MAX_US 5000000u
#define LOG_EVERY_US 10000000u
#define PREFIX "sip:rc:"

typedef struct redis {
  char host[256];
  int port;
  struct timeval tv;
  int ttl_s;
  pthread_mutex_t mu;
  redisContext *idle[MAX_IDLE];
  int n_idle;
  uint64_t retry_at_us, backoff_us; /* not tried before retry_at_us */
  uint64_t last_log_us, unlogged;
} redis_t;

/* HOST:PORT, the host possibly [IPv6]. */
static int parse_address(const char *a, char *host, size_t cap, int *port) {
  const char *colon = strrchr(a, ':');
  if (!colon || colon == a) return -1;
  const char *h = a;
  size_t hl = (size_t)(colon - a);
  if (*h == '[') {
    if (hl < 3 || h[hl - 1] != ']') return -1;
    h++;
    hl -= 2;
  } else if (memchr(h, ':', hl)) {
    return -1;
  }
  char *end;
  long p = strtol(colon + 1, &end, 10);
  if (!colon[1] || *end || p < 1 || p > 65535 || hl >= cap) return -1;
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = (int)p;
  return 0;
}

void *sip__rcache_redis_new(const sip__rcache_config_t *cfg, sip_error_t **err) {
  *err = NULL;
  redis_t *r = sip__calloc(1, sizeof *r);
  if (!r) {
    *err = SIP__OOM();
    return NULL;
  }
  const char *a = cfg->redis_address ? cfg->redis_address : "127.0.0.1:6379";
  if (parse_address(a, r->host, sizeof r->host, &r->port)) {
    *err = sip_error_new(SIP_INVALID_ARGUMENT, "response cache: Redis address '%.200s' is not "
                         "HOST:PORT (port 1..65535, IPv6 hosts in brackets)", a);
    sip__free(r);
    return NULL;
  }
  int ms = cfg->redis_timeout_ms > 0 ? cfg->redis_timeout_ms : 50;
  r->tv.tv_sec = ms / 1000;
  r->tv.tv_usec = (ms % 1000) * 1000;
  r->ttl_s = cfg->redis_ttl_s;
  r->backoff_us = BACKOFF_MIN_US;
  pthread_mutex_init(&r->mu, NULL);
  return r;
}

/* A connection: an idle one (when allowed; *reused set), or a new one.
 * NULL while backing off or when Redis cannot be reached (*why). */
static redisContext *take(redis_t *r, int idle_ok, int *reused, char *why, size_t cap) {
  *reused = 0;
  pthread_mutex_lock(&r->mu);
  if (idle_ok && r->n_idle) {
    redisContext *c = r->idle[--r->n_idle];
    pthread_mutex_unlock(&r->mu);
    *reused = 1;
    return c;
  }
  int backing_off = r->retry_at_us && sip__now_us() < r->retry_at_us;
  pthread_mutex_unlock(&r->mu);
  if (backing_off) {
    snprintf(why, cap, "not retried yet after a failure");
    return NULL;
  }
  redisContext *c = redisConnectWithTimeout(r->host, r->port, r->tv);
  if (!c || c->err || redisSetTimeout(c, r->tv) != REDIS_OK) {
    snprintf(why, cap, "%s", c && c->errstr[0] ? c->errstr : "cannot connect");
    if (c) redisFree(c);
    return NULL;
  }
  return c;
}

/* Drops every idle connection (Redis went away: they are dead). */
static void drop_idle(redis_t *r) {
  redisContext *drop[MAX_IDLE];
  pthread_mutex_lock(&r->mu);
  int n = r->n_idle;
  memcpy(drop, r->idle, (size_t)n * sizeof drop[0]);
  r->n_idle = 0;
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < n; i++) redisFree(drop[i]);
}

/* Gives a connection back after a command: kept when it worked, else
 * dropped with every idle one, and Redis left alone for a while. */
static void give(redis_t *r, redisContext *c, int ok, const char *why) {
  redisContext *drop[MAX_IDLE + 1];
  int n = 0;
  uint64_t now = sip__now_us(), unlogged = 0;
  int log = 0;
  pthread_mutex_lock(&r->mu);
  if (ok) {
    r->retry_at_us = 0;
    r->backoff_us = BACKOFF_MIN_US;
    if (r->n_idle < MAX_IDLE) r->idle[r->n_idle++] = c;
    else drop[n++] = c;
  } else {
    if (c) drop[n++] = c;
    while (r->n_idle) drop[n++] = r->idle[--r->n_idle];
    if (!r->retry_at_us || now >= r->retry_at_us) {
      r->retry_at_us = now + r->backoff_us;
      r->backoff_us = r->backoff_us * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : r->backoff_us * 2;
    }
    r->unlogged++;
    if (!r->last_log_us || now - r->last_log_us >= LOG_EVERY_US) {
      log = 1;
      unlogged = r->unlogged;
      r->unlogged = 0;
      r->last_log_us = now;
    }
  }
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < n; i++) redisFree(drop[i]);
  if (log)
    sip__log(SIP__LOG_WARN, "response cache: Redis failed; requests run uncached",
             "address=%s:%d error=\"%s\" failures=%llu", r->host, r->port, why ? why : "?",
             (unsigned long long)unlogged);
}

static void key_text(const uint8_t key[SIP__RCACHE_DIGEST], char *out) {
  static const char hex[] = "0123456789abcdef";
  memcpy(out, PREFIX, sizeof PREFIX - 1);
  char *p = out + sizeof PREFIX - 1;
  for (int i = 0; i < SIP__RCACHE_DIGEST; i++) {
    *p++ = hex[key[i] >> 4];
    *p++ = hex[key[i] & 15];
  }
  *p = '\0';
}

/* Runs one command. An idle connection that fails with an I/O error was
 * closed by a Redis that restarted: the command goes once more on a new
 * connection. A reply (owned) when Redis answered other than with an
 * error; NULL otherwise, counted as a failure. */
static redisReply *run(redis_t *r, int argc, const char **argv, const size_t *lens) {
  char why[128];
  for (int attempt = 0; attempt < 2; attempt++) {
    int reused = 0;
    redisContext *c = take(r, attempt == 0, &reused, why, sizeof why);
    if (!c) break;
    redisReply *rep = redisCommandArgv(c, argc, argv, lens);
    if (rep && rep->type != REDIS_REPLY_ERROR) {
      give(r, c, 1, NULL);
      return rep;
    }
    snprintf(why, sizeof why, "%s", rep ? rep->str : c->errstr);
    if (rep || !reused) {
      if (rep) freeReplyObject(rep);
      give(r, c, 0, why);
      return NULL;
    }
    redisFree(c);
    drop_idle(r);
  }
  give(r, NULL, 0, why);
  return NULL;
}

static int redis_get(void *self, const uint8_t key[SIP__RCACHE_DIGEST], uint8_t **val,
                     size_t *len) {
  redis_t *r = self;
  *val = NULL;
  *len = 0;
  char k[sizeof PREFIX + 2 * SIP__RCACHE_DIGEST];
  key_text(key, k);
  const char *argv[2] = {"GET", k};
  size_t lens[2] = {3, strlen(k)};
  redisReply *rep = run(r, 2, argv, lens);
  if (!rep) return -1;
  int rc = 0;
  if (rep->type == REDIS_REPLY_STRING) {
    *val = sip__malloc(rep->len ? (size_t)rep->len : 1);
    rc = *val ? 1 : -1;
    if (*val) {
      memcpy(*val, rep->str, (size_t)rep->len);
      *len = (size_t)rep->len;
    }
  } else if (rep->type != REDIS_REPLY_NIL) {
    rc = -1;
  }
  freeReplyObject(rep);
  return rc;
}

static int redis_put(void *self, const uint8_t key[SIP__RCACHE_DIGEST], const uint8_t *val,
                     size_t len, _Atomic int64_t *gauge) {
  (void)gauge; /* Redis keeps the bytes: INFO memory says how many */
  redis_t *r = self;
  char k[sizeof PREFIX + 2 * SIP__RCACHE_DIGEST], ttl[16];
  key_text(key, k);
  snprintf(ttl, sizeof ttl, "%d", r->ttl_s);
  const char *argv[5] = {"SET", k, (const char *)val, "EX", ttl};
  size_t lens[5] = {3, strlen(k), len, 2, strlen(ttl)};
  redisReply *rep = run(r, r->ttl_s > 0 ? 5 : 3, argv, lens);
  int ok = rep && rep->type == REDIS_REPLY_STATUS;
  if (rep) freeReplyObject(rep);
  return ok ? 0 : -1;
}

static void redis_free(void *self) {
  redis_t *r = self;
  if (!r) return;
  while (r->n_idle) redisFree(r->idle[--r->n_idle]);
  pthread_mutex_destroy(&r->mu);
  sip__free(r);
}

const sip__rcache_backend_vt_t sip__rcache_redis_vt = {"redis", redis_get, redis_put, redis_free};
