/* sip — the response cache's memory backend: values in a hash table by
 * digest, on an LRU list (most recent first), the least recently used
 * evicted to keep the bytes within max_bytes (a value with its key and
 * bookkeeping counts). A value bigger than max_bytes is not kept. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/core.h"
#include "server/cache/response_cache.h"

#define N_BUCKETS 4096u

typedef struct entry {
  uint8_t key[SIP__RCACHE_DIGEST];
  struct entry *hnext;       /* bucket chain */
  struct entry *prev, *next; /* LRU list */
  uint8_t *val;
  size_t len, bytes;
  _Atomic int64_t *gauge; /* the pool's bytes, or NULL */
} entry_t;

typedef struct mem {
  pthread_mutex_t mu;
  entry_t *buckets[N_BUCKETS];
  entry_t *head, *tail;
  size_t bytes, max_bytes;
} mem_t;

static unsigned bucket(const uint8_t *key) {
  return ((unsigned)key[0] | (unsigned)key[1] << 8 | (unsigned)key[2] << 16) % N_BUCKETS;
}

void *sip__rcache_memory_new(size_t max_bytes) {
  mem_t *m = sip__calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_init(&m->mu, NULL);
  m->max_bytes = max_bytes;
  return m;
}

static void lru_unlink(mem_t *m, entry_t *e) {
  if (e->prev) e->prev->next = e->next;
  else m->head = e->next;
  if (e->next) e->next->prev = e->prev;
  else m->tail = e->prev;
  e->prev = e->next = NULL;
}

static void lru_push(mem_t *m, entry_t *e) {
  e->prev = NULL;
  e->next = m->head;
  if (m->head) m->head->prev = e;
  else m->tail = e;
  m->head = e;
}

static entry_t *find(mem_t *m, const uint8_t *key) {
  for (entry_t *e = m->buckets[bucket(key)]; e; e = e->hnext)
    if (!memcmp(e->key, key, SIP__RCACHE_DIGEST)) return e;
  return NULL;
}

static void drop(mem_t *m, entry_t *e) {
  entry_t **pp = &m->buckets[bucket(e->key)];
  while (*pp != e) pp = &(*pp)->hnext;
  *pp = e->hnext;
  lru_unlink(m, e);
  m->bytes -= e->bytes;
  if (e->gauge) atomic_fetch_sub(e->gauge, (int64_t)e->bytes);
  sip__free(e->val);
  sip__free(e);
}

static int mem_get(void *self, const uint8_t key[SIP__RCACHE_DIGEST], uint8_t **val,
                   size_t *len) {
  mem_t *m = self;
  *val = NULL;
  *len = 0;
  pthread_mutex_lock(&m->mu);
  entry_t *e = find(m, key);
  if (!e) {
    pthread_mutex_unlock(&m->mu);
    return 0;
  }
  lru_unlink(m, e);
  lru_push(m, e);
  uint8_t *copy = sip__malloc(e->len ? e->len : 1);
  if (copy) memcpy(copy, e->val, e->len);
  size_t n = e->len;
  pthread_mutex_unlock(&m->mu);
  if (!copy) return -1;
  *val = copy;
  *len = n;
  return 1;
}

static int mem_put(void *self, const uint8_t key[SIP__RCACHE_DIGEST], const uint8_t *val,
                   size_t len, _Atomic int64_t *gauge) {
  mem_t *m = self;
  size_t bytes = len + sizeof(entry_t);
  if (bytes > m->max_bytes || len < 1) return 0; /* never fits */
  entry_t *e = sip__calloc(1, sizeof *e);
  uint8_t *copy = e ? sip__malloc(len) : NULL;
  if (!copy) {
    sip__free(e);
    return -1;
  }
  memcpy(copy, val, len);
  memcpy(e->key, key, SIP__RCACHE_DIGEST);
  e->val = copy;
  e->len = len;
  e->bytes = bytes;
  e->gauge = gauge;
  pthread_mutex_lock(&m->mu);
  entry_t *old = find(m, key);
  if (old) drop(m, old); /* the same answer computed twice: the newer one stays */
  while (m->tail && m->bytes + bytes > m->max_bytes) drop(m, m->tail);
  unsigned b = bucket(key);
  e->hnext = m->buckets[b];
  m->buckets[b] = e;
  lru_push(m, e);
  m->bytes += bytes;
  if (gauge) atomic_fetch_add(gauge, (int64_t)bytes);
  pthread_mutex_unlock(&m->mu);
  return 0;
}

static void mem_free(void *self) {
  mem_t *m = self;
  if (!m) return;
  while (m->tail) drop(m, m->tail);
  pthread_mutex_destroy(&m->mu);
  sip__free(m);
}

const sip__rcache_backend_vt_t sip__rcache_memory_vt = {"memory", mem_get, mem_put, mem_free};
