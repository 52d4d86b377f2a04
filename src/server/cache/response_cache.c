/* sip — the response cache (response_cache.h): which requests may be
 * cached, the lookup in front of the model, the completion wrapper that
 * stores an OK answer, and the counters per pool and version. */
#include "server/cache/response_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/core.h"
#include "session/pool_view.h"
#include "session/request/request.h"

typedef struct slot {
  char *pool, *version;
  atomic_uint_fast64_t hits, misses, errors, hit_us, miss_us;
  _Atomic int64_t bytes;
  struct slot *next;
} slot_t;

struct sip__rcache {
  const sip__rcache_backend_vt_t *vt;
  void *be;
  pthread_mutex_t mu; /* the slot list (it only grows) */
  slot_t *slots;
  atomic_uint_fast64_t bad_values; /* for the rate of "malformed value" lines */
};

struct sip__rcache_run {
  sip__rcache_t *c;
  slot_t *sl;
  uint8_t key[SIP__RCACHE_DIGEST];
  sip_infer_done_fn done;
  void *user;
  uint64_t lookup_us;
};

sip__rcache_t *sip__rcache_new(const sip__rcache_config_t *cfg, sip_error_t **err) {
  *err = NULL;
  sip__rcache_t *c = sip__calloc(1, sizeof *c);
  if (!c) {
    *err = SIP__OOM();
    return NULL;
  }
  if (cfg && cfg->backend == SIP__RCACHE_REDIS) {
    c->vt = &sip__rcache_redis_vt;
    c->be = sip__rcache_redis_new(cfg, err);
  } else {
    c->vt = &sip__rcache_memory_vt;
    c->be = sip__rcache_memory_new(cfg && cfg->max_bytes > 0 ? (size_t)cfg->max_bytes
                                                             : (size_t)64 << 20);
    if (!c->be) *err = SIP__OOM();
  }
  if (!c->be) {
    sip__free(c);
    return NULL;
  }
  pthread_mutex_init(&c->mu, NULL);
  return c;
}

void sip__rcache_free(sip__rcache_t *c) {
  if (!c) return;
  c->vt->free(c->be); /* first: its entries point at the slots' gauges */
  while (c->slots) {
    slot_t *s = c->slots;
    c->slots = s->next;
    sip__free(s->pool);
    sip__free(s->version);
    sip__free(s);
  }
  pthread_mutex_destroy(&c->mu);
  sip__free(c);
}

const char *sip__rcache_backend(const sip__rcache_t *c) { return c->vt->name; }

/* The counters of pool@version, made on first use; NULL when out of memory. */
static slot_t *slot_for(sip__rcache_t *c, const char *pool, const char *version) {
  if (!version) version = "";
  pthread_mutex_lock(&c->mu);
  slot_t *s = c->slots;
  while (s && (strcmp(s->pool, pool) || strcmp(s->version, version))) s = s->next;
  if (!s && (s = sip__calloc(1, sizeof *s))) {
    s->pool = sip__strdup(pool);
    s->version = sip__strdup(version);
    if (!s->pool || !s->version) {
      sip__free(s->pool);
      sip__free(s->version);
      sip__free(s);
      s = NULL;
    } else {
      s->next = c->slots;
      c->slots = s;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return s;
}

/* Requests whose answer may be kept: to a pool that opted in and has no
 * state (sequence_batching) and is serving, without a sequence, outputs to the client's
 * memory, or inputs in device memory. */
static int cacheable(sip__pool_t *p, const sip_request_t *r) {
  const sip__pool_config_t *cfg = sip__pool_config(p);
  if (!cfg->response_cache || cfg->sequence_batching) return 0;
  /* A pool not serving answers as it would without a cache. */
  if (!sip__pool_serving(p)) return 0;
  if (r->seq_flags || r->seq_id || r->seq_sid || r->n_dests) return 0;
  for (size_t i = 0; i < r->n_inputs; i++)
    if (r->inputs[i]->memory_type == SIP_MEMORY_DEVICE) return 0;
  return 1;
}

/* The completion of a miss: an OK answer is kept, then the caller hears it. */
static void run_done(sip_response_t *resp, void *user) {
  sip__rcache_run_t *run = user;
  sip__rcache_t *c = run->c;
  uint64_t t0 = sip__now_us();
  if (resp && resp->code == SIP_OK && sip__rcache_encodable(resp->outputs, resp->n_outputs)) {
    size_t len = 0;
    uint8_t *val = sip__rcache_encode(resp->outputs, resp->n_outputs, &len);
    if (!val || c->vt->put(c->be, run->key, val, len, &run->sl->bytes) < 0)
      atomic_fetch_add(&run->sl->errors, 1);
    sip__free(val);
  }
  atomic_fetch_add(&run->sl->miss_us, run->lookup_us + (sip__now_us() - t0));
  sip_infer_done_fn done = run->done;
  void *u = run->user;
  sip__free(run);
  done(resp, u);
}

sip__rcache_outcome_t sip__rcache_begin(sip__rcache_t *c, sip__model_t *m, sip_request_t *r,
                                        sip_response_t **hit, sip__rcache_run_t **run) {
  *hit = NULL;
  *run = NULL;
  sip__pool_t *p = sip__pool_of(m);
  if (!c || !p || !cacheable(p, r)) return SIP__RCACHE_RUN;
  slot_t *sl = slot_for(c, r->pool, sip__pool_version(p));
  if (!sl) return SIP__RCACHE_RUN;
  uint64_t t0 = sip__now_us();
  uint8_t key[SIP__RCACHE_DIGEST];
  if (sip__rcache_key(r->pool, sip__pool_version(p), r, key)) {
    atomic_fetch_add(&sl->errors, 1);
    return SIP__RCACHE_RUN;
  }
  uint8_t *val = NULL;
  size_t len = 0;
  int got = c->vt->get(c->be, key, &val, &len);
  if (got < 0) { /* the backend cannot answer: run uncached */
    atomic_fetch_add(&sl->errors, 1);
    return SIP__RCACHE_RUN;
  }
  if (got > 0) {
    sip_tensor_t **outs = NULL;
    size_t n = 0;
    const char *why = NULL;
    int bad = sip__rcache_decode(val, len, &outs, &n, &why);
    sip__free(val);
    if (!bad) {
      uint64_t dt = sip__now_us() - t0;
      sip_response_t *resp = sip__response_new(SIP_OK, NULL, r->id, outs, n, 0, 0, dt);
      if (resp && resp->code == SIP_OK) {
        resp->cached = 1;
        atomic_fetch_add(&sl->hits, 1);
        atomic_fetch_add(&sl->hit_us, dt);
        *hit = resp;
        return SIP__RCACHE_HIT;
      }
      sip_response_free(resp); /* out of memory: run it */
    }
    /* A value this server cannot read: counted, and replaced by the answer. */
    atomic_fetch_add(&sl->errors, 1);
    if (bad && atomic_fetch_add(&c->bad_values, 1) % 1000 == 0)
      sip__log(SIP__LOG_WARN, "response cache: a kept value is unreadable; the request runs",
               "pool=%s backend=%s reason=\"%s\"", r->pool, c->vt->name, why ? why : "?");
  }
  sip__rcache_run_t *rn = sip__malloc(sizeof *rn);
  if (!rn) return SIP__RCACHE_RUN;
  atomic_fetch_add(&sl->misses, 1);
  *rn = (sip__rcache_run_t){c, sl, {0}, r->done, r->user, sip__now_us() - t0};
  memcpy(rn->key, key, sizeof key);
  r->done = run_done;
  r->user = rn;
  *run = rn;
  return SIP__RCACHE_RUN;
}

void sip__rcache_abort(sip__rcache_run_t *run) { sip__free(run); }

void sip__rcache_each(sip__rcache_t *c,
                      void (*fn)(void *ctx, const char *pool, const char *version,
                                 const sip__rcache_stats_t *st),
                      void *ctx) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  slot_t *head = c->slots;
  pthread_mutex_unlock(&c->mu);
  /* The list only grows at its head: walking it from a snapshot needs no lock. */
  for (slot_t *s = head; s; s = s->next) {
    sip__rcache_stats_t st = {atomic_load(&s->hits),  atomic_load(&s->misses),
                              atomic_load(&s->errors), atomic_load(&s->bytes),
                              atomic_load(&s->hit_us), atomic_load(&s->miss_us)};
    fn(ctx, s->pool, s->version, &st);
  }
}
