/* sip — the idempotency cache (idempotency.h): a hash table of entries by
 * key; finished entries also sit on an LRU list (most recent first). */
#include "server/state/idempotency.h"

#include <pthread.h>
#include <string.h>

#include "core/core.h"
#include "session/engine.h"

#define N_BUCKETS 4096u

typedef struct waiter {
  sip_infer_done_fn done;
  void *user;
  uint64_t id;
  struct waiter *next;
} waiter_t;

struct sip__idem_entry {
  sip__idem_t *c;
  char *key;
  uint32_t hash;
  struct sip__idem_entry *hnext;       /* bucket chain */
  struct sip__idem_entry *prev, *next; /* LRU list (finished entries only) */
  int done;                            /* 0 running, 1 finished (resp kept) */
  int keep;
  uint64_t ttl_us;
  sip_infer_done_fn orig_done; /* the first request's callback */
  void *orig_user;
  waiter_t *waiters; /* joined duplicates, newest first */
  sip_response_t *resp;
  size_t bytes;
  uint64_t expires_us;
};

struct sip__idem {
  pthread_mutex_t mu;
  uint64_t (*now_us)(void);
  sip__idem_entry_t *buckets[N_BUCKETS];
  sip__idem_entry_t *lru_head, *lru_tail;
  size_t n_entries, bytes;
  size_t max_bytes; /* the last limits seen, for evictions at completion */
  uint64_t hits, joins, evictions;
  sip__idem_sink_fn sink; /* told of each answer kept, before it is sent */
  void *sink_ctx;
};

static uint32_t hash_key(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

sip__idem_t *sip__idem_new(uint64_t (*now_us)(void)) {
  sip__idem_t *c = sip__calloc(1, sizeof *c);
  if (!c) return NULL;
  pthread_mutex_init(&c->mu, NULL);
  c->now_us = now_us ? now_us : sip__now_us;
  return c;
}

static void entry_free(sip__idem_entry_t *e) {
  sip_response_free(e->resp);
  sip__free(e->key);
  sip__free(e);
}

void sip__idem_free(sip__idem_t *c) {
  if (!c) return;
  for (size_t i = 0; i < N_BUCKETS; i++)
    for (sip__idem_entry_t *e = c->buckets[i], *n; e; e = n) {
      n = e->hnext;
      entry_free(e);
    }
  pthread_mutex_destroy(&c->mu);
  sip__free(c);
}

static void lru_unlink(sip__idem_t *c, sip__idem_entry_t *e) {
  if (e->prev) e->prev->next = e->next;
  else c->lru_head = e->next;
  if (e->next) e->next->prev = e->prev;
  else c->lru_tail = e->prev;
  e->prev = e->next = NULL;
}

static void lru_push(sip__idem_t *c, sip__idem_entry_t *e) {
  e->prev = NULL;
  e->next = c->lru_head;
  if (c->lru_head) c->lru_head->prev = e;
  else c->lru_tail = e;
  c->lru_head = e;
}

/* Takes e out of the table (and the LRU list when finished). */
static void unlink_entry(sip__idem_t *c, sip__idem_entry_t *e) {
  sip__idem_entry_t **pp = &c->buckets[e->hash % N_BUCKETS];
  while (*pp != e) pp = &(*pp)->hnext;
  *pp = e->hnext;
  if (e->done) {
    lru_unlink(c, e);
    c->bytes -= e->bytes;
  }
  c->n_entries--;
}

static void evict(sip__idem_t *c, sip__idem_entry_t *e) {
  unlink_entry(c, e);
  c->evictions++;
  entry_free(e);
}

/* Drops expired finished entries from the LRU end, then the least recently
 * used ones while more than `max_entries` entries or `max_bytes` are kept. */
static void trim(sip__idem_t *c, size_t max_entries, size_t max_bytes, uint64_t now) {
  while (c->lru_tail && (c->lru_tail->expires_us <= now || c->n_entries > max_entries ||
                         c->bytes > max_bytes))
    evict(c, c->lru_tail);
}

static sip__idem_entry_t *find(sip__idem_t *c, const char *key, uint32_t h) {
  for (sip__idem_entry_t *e = c->buckets[h % N_BUCKETS]; e; e = e->hnext)
    if (e->hash == h && !strcmp(e->key, key)) return e;
  return NULL;
}

/* A copy of `src` for request `id`: outputs view the same buffers (copied
 * when src's tensor borrows its memory). NULL when out of memory. */
static sip_response_t *copy_response(const sip_response_t *src, uint64_t id) {
  sip_tensor_t **outs = src->n_outputs ? sip__calloc(src->n_outputs, sizeof *outs) : NULL;
  char *msg = sip__strdup(src->message ? src->message : "");
  int ok = msg && (outs || !src->n_outputs);
  for (size_t i = 0; ok && i < src->n_outputs; i++) {
    const sip_tensor_t *t = src->outputs[i];
    outs[i] = t->owner ? sip_tensor_new_view(t->name, t->dtype, t->rank, t->dims, t->data,
                                             t->nbytes, t->owner)
                       : sip_tensor_new_copy(t->name, t->dtype, t->rank, t->dims, t->data,
                                             t->nbytes);
    ok = outs[i] != NULL;
  }
  if (!ok) {
    for (size_t i = 0; outs && i < src->n_outputs; i++) sip_tensor_free(outs[i]);
    sip__free(outs);
    sip__free(msg);
    return NULL;
  }
  sip_response_t *r = sip__response_new(src->code, msg, id, outs, src->n_outputs, src->queue_us,
                                         src->compute_us, src->total_us);
  if (r) r->replayed = 1;
  return r;
}

static size_t response_bytes(const sip_response_t *r) {
  size_t n = sizeof *r + strlen(r->message ? r->message : "");
  for (size_t i = 0; i < r->n_outputs; i++) n += r->outputs[i]->nbytes + sizeof *r->outputs[i];
  return n;
}

/* Answers a duplicate: a copy of `resp`, or a short error when out of memory. */
static void answer(const sip_response_t *resp, sip_infer_done_fn done, void *user, uint64_t id) {
  sip_response_t *r = copy_response(resp, id);
  if (!r) r = sip__response_new(SIP_RESOURCE_EXHAUSTED, sip__strdup("out of memory"), id, NULL, 0,
                                0, 0, 0);
  done(r, user);
}

/* Failures a retry may get past: not kept. */
static int transient(sip_code_t code) {
  return code == SIP_UNAVAILABLE || code == SIP_CANCELLED || code == SIP_DEADLINE_EXCEEDED ||
         code == SIP_RESOURCE_EXHAUSTED || code == SIP_INTERNAL;
}

/* The first request's callback: keeps the answer, answers the duplicates
 * that joined, then the first request. */
static void entry_done(sip_response_t *resp, void *user) {
  sip__idem_entry_t *e = user;
  sip__idem_t *c = e->c;
  sip_infer_done_fn done = e->orig_done;
  void *ouser = e->orig_user;
  sip_response_t *kept = resp && e->keep && !transient(resp->code) ? copy_response(resp, 0) : NULL;
  pthread_mutex_lock(&c->mu);
  waiter_t *w = e->waiters;
  e->waiters = NULL;
  uint64_t ttl = e->ttl_us;
  char *key = NULL; /* for the sink: a kept answer's key */
  if (kept) {
    uint32_t h = e->hash;
    key = c->sink ? sip__strdup(e->key) : NULL;
    e->done = 1;
    e->resp = kept;
    e->bytes = response_bytes(kept);
    e->expires_us = c->now_us() + e->ttl_us;
    c->bytes += e->bytes;
    lru_push(c, e);
    trim(c, SIZE_MAX, c->max_bytes, 0); /* may evict e itself (an answer over max_bytes) */
    if (key && !find(c, key, h)) { /* not kept after all: nothing to record */
      sip__free(key);
      key = NULL;
    }
  } else {
    unlink_entry(c, e);
  }
  pthread_mutex_unlock(&c->mu); /* a kept e may be evicted from here on */
  if (!kept) entry_free(e);
  if (key) { /* recorded before anyone hears the answer */
    c->sink(c->sink_ctx, key, sip__wall_us() + ttl, resp);
    sip__free(key);
  }
  while (w) {
    waiter_t *n = w->next;
    if (resp && resp->code == SIP_CANCELLED) /* the first one's caller went, not theirs */
      w->done(sip__response_new(SIP_UNAVAILABLE,
                                sip__strdup("the request this one joined (same idempotency key) "
                                            "was cancelled; send it again"),
                                w->id, NULL, 0, 0, 0, 0),
              w->user);
    else if (resp) answer(resp, w->done, w->user, w->id);
    else w->done(NULL, w->user);
    sip__free(w);
    w = n;
  }
  done(resp, ouser);
}

sip__idem_outcome_t sip__idem_begin(sip__idem_t *c, const sip__idem_limits_t *lim,
                                    const char *key, int keep, sip_request_t *r,
                                    sip__idem_entry_t **entry, sip_response_t **replay) {
  *entry = NULL;
  *replay = NULL;
  uint32_t h = hash_key(key);
  uint64_t now = c->now_us();
  size_t max_entries = lim->max_entries ? lim->max_entries : 1;
  pthread_mutex_lock(&c->mu);
  c->max_bytes = lim->max_bytes;
  sip__idem_entry_t *e = find(c, key, h);
  if (e && e->done && e->expires_us <= now) {
    evict(c, e);
    e = NULL;
  }
  if (e && e->done) {
    *replay = copy_response(e->resp, r->id);
    if (*replay) {
      c->hits++;
      lru_unlink(c, e);
      lru_push(c, e);
      pthread_mutex_unlock(&c->mu);
      return SIP__IDEM_REPLAY;
    }
    pthread_mutex_unlock(&c->mu); /* out of memory: run it untracked */
    return SIP__IDEM_RUN;
  }
  if (e) {
    waiter_t *w = sip__malloc(sizeof *w);
    if (!w) {
      pthread_mutex_unlock(&c->mu);
      return SIP__IDEM_RUN;
    }
    *w = (waiter_t){r->done, r->user, r->id, e->waiters};
    e->waiters = w;
    c->joins++;
    pthread_mutex_unlock(&c->mu);
    sip_request_free(r);
    return SIP__IDEM_JOINED;
  }
  /* A new entry: room first (running entries are never evicted; when they
   * fill the cache the request runs untracked). */
  trim(c, max_entries - 1, lim->max_bytes, now);
  e = c->n_entries < max_entries ? sip__calloc(1, sizeof *e) : NULL;
  if (e && !(e->key = sip__strdup(key))) {
    sip__free(e);
    e = NULL;
  }
  if (!e) {
    pthread_mutex_unlock(&c->mu);
    return SIP__IDEM_RUN;
  }
  e->c = c;
  e->hash = h;
  e->keep = keep;
  e->ttl_us = lim->ttl_us;
  e->orig_done = r->done;
  e->orig_user = r->user;
  e->hnext = c->buckets[h % N_BUCKETS];
  c->buckets[h % N_BUCKETS] = e;
  c->n_entries++;
  pthread_mutex_unlock(&c->mu);
  r->done = entry_done;
  r->user = e;
  *entry = e;
  return SIP__IDEM_RUN;
}

void sip__idem_abort(sip__idem_t *c, sip__idem_entry_t *e, sip_code_t code, const char *message) {
  if (!e) return;
  pthread_mutex_lock(&c->mu);
  unlink_entry(c, e);
  waiter_t *w = e->waiters;
  pthread_mutex_unlock(&c->mu);
  entry_free(e);
  while (w) {
    waiter_t *n = w->next;
    w->done(sip__response_new(code, sip__strdup(message), w->id, NULL, 0, 0, 0, 0), w->user);
    sip__free(w);
    w = n;
  }
}

void sip__idem_set_sink(sip__idem_t *c, sip__idem_sink_fn fn, void *ctx) {
  pthread_mutex_lock(&c->mu);
  c->sink = fn;
  c->sink_ctx = ctx;
  pthread_mutex_unlock(&c->mu);
}

void sip__idem_restore(sip__idem_t *c, const char *key, uint64_t ttl_left_us,
                       sip_response_t *resp) {
  uint32_t h = hash_key(key);
  sip__idem_entry_t *e = sip__calloc(1, sizeof *e);
  if (e && !(e->key = sip__strdup(key))) {
    sip__free(e);
    e = NULL;
  }
  if (!e) {
    sip_response_free(resp);
    return;
  }
  pthread_mutex_lock(&c->mu);
  sip__idem_entry_t *old = find(c, key, h);
  if (old && !old->done) { /* running here already: it answers */
    pthread_mutex_unlock(&c->mu);
    entry_free(e);
    sip_response_free(resp);
    return;
  }
  if (old) evict(c, old); /* a later record of the key wins */
  e->c = c;
  e->hash = h;
  e->keep = 1;
  e->done = 1;
  e->resp = resp;
  e->bytes = response_bytes(resp);
  e->expires_us = c->now_us() + ttl_left_us;
  e->hnext = c->buckets[h % N_BUCKETS];
  c->buckets[h % N_BUCKETS] = e;
  c->n_entries++;
  c->bytes += e->bytes;
  lru_push(c, e);
  pthread_mutex_unlock(&c->mu);
}

void sip__idem_foreach(sip__idem_t *c, sip__idem_sink_fn fn, void *ctx) {
  pthread_mutex_lock(&c->mu);
  uint64_t now = c->now_us(), wall = sip__wall_us();
  /* Least recently used first: read back in this order, the LRU order
   * comes back the same. */
  for (sip__idem_entry_t *e = c->lru_tail; e; e = e->prev)
    if (e->expires_us > now) fn(ctx, e->key, wall + (e->expires_us - now), e->resp);
  pthread_mutex_unlock(&c->mu);
}

void sip__idem_stats(sip__idem_t *c, sip__idem_stats_t *out) {
  pthread_mutex_lock(&c->mu);
  *out = (sip__idem_stats_t){c->hits, c->joins, c->evictions, c->n_entries, c->bytes};
  pthread_mutex_unlock(&c->mu);
}
