/* sip — the response cache (docs/response_cache.md): answers of pools that
 * opt in (session_pools[].response_cache: true) are kept under a key made
 * of the model's name, the version that served it and a SHA-256 digest of
 * everything in the request that changes the result; an identical request
 * later gets the kept answer without running the model. Two places to keep
 * them, behind one small vtable (one file each): memory (an LRU bounded by
 * bytes, this process only) and redis (shared by every server using the
 * same Redis; hiredis).
 *
 * Never cached: requests with a sequence id or to a pool with
 * sequence_batching (the model has state), requests whose outputs go to
 * memory the client gave (output buffers, shared memory), answers other
 * than OK, outputs not in host memory. A backend that cannot answer (Redis
 * down) never fails a request: it runs uncached and the error is counted.
 * Thread-safe. */
#ifndef SIP_SERVER_RESPONSE_CACHE_H
#define SIP_SERVER_RESPONSE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "session/engine.h"

#define SIP__RCACHE_DIGEST 32 /* SHA-256 */

/* ---- keys and values (response_cache_codec.c) ---- */

/* The digest of request r to model `model` at version `version` (NULL or
 * "": unversioned), the version that serves it (as Triton's cache, the key
 * names the model and version, not its files: answers are shared by every
 * server of that version, wherever its files lie): over each
 * input's name, dtype, shape and bytes (in order), the requested output
 * names and the parameters that change a result (pipeline_config); not
 * over priority, timeouts, idempotency keys or trace context. Every field
 * is length-prefixed, so no two different requests share a digest input.
 * Returns 0, or -1 when the hash could not be computed (out of memory). */
int sip__rcache_key(const char *model, const char *version, const sip_request_t *r,
                    uint8_t out[SIP__RCACHE_DIGEST]);

/* Whether the outputs can be encoded (every one in host memory with a
 * valid dtype and rank): 1 or 0. */
int sip__rcache_encodable(sip_tensor_t *const *outputs, size_t n);
/* The value of outputs[0..n): "SRC1", u32 count, then per output u16 name
 * length, name, u8 dtype, u8 rank, rank x i64 dims, u64 byte count, bytes
 * (little-endian). Returns an owned buffer (sip__free) and its length in
 * *len, or NULL (out of memory, or not encodable). */
uint8_t *sip__rcache_encode(sip_tensor_t *const *outputs, size_t n, size_t *len);
/* Reads a value back (borrowed; untrusted: every length is checked).
 * *outputs gets an owned array (sip__malloc) of owned tensors, *n their
 * count. Returns 0, or -1 for a malformed value or out of memory (*why:
 * static text saying which). */
int sip__rcache_decode(const uint8_t *val, size_t len, sip_tensor_t ***outputs, size_t *n,
                       const char **why);

/* ---- backends ---- */

typedef struct sip__rcache_backend_vt {
  const char *name;
  /* 1: *val is an owned copy (sip__free) of the value kept under key;
   * 0: none kept; -1: the backend could not answer. */
  int (*get)(void *self, const uint8_t key[SIP__RCACHE_DIGEST], uint8_t **val, size_t *len);
  /* Keeps val (borrowed) under key; `gauge` (may be NULL) counts the bytes
   * kept for the entry's pool while it stays. 0 stored (or dropped as too
   * big), -1: the backend could not store it. */
  int (*put)(void *self, const uint8_t key[SIP__RCACHE_DIGEST], const uint8_t *val, size_t len,
             _Atomic int64_t *gauge);
  void (*free)(void *self);
} sip__rcache_backend_vt_t;

/* response_cache_memory.c: NULL when out of memory. */
void *sip__rcache_memory_new(size_t max_bytes);
extern const sip__rcache_backend_vt_t sip__rcache_memory_vt;
/* response_cache_redis.c: connects on first use. NULL (and *err) for an
 * address that is not HOST:PORT, or out of memory. */
void *sip__rcache_redis_new(const sip__rcache_config_t *cfg, sip_error_t **err);
extern const sip__rcache_backend_vt_t sip__rcache_redis_vt;

/* ---- the cache (response_cache.c) ---- */

typedef struct sip__rcache sip__rcache_t;
typedef struct sip__rcache_run sip__rcache_run_t;

/* The cache the config's server.response_cache describes (memory with
 * 64 MiB when absent). NULL and *err when it cannot be made. */
sip__rcache_t *sip__rcache_new(const sip__rcache_config_t *cfg, sip_error_t **err);
/* No request may be running through it. NULL is a no-op. */
void sip__rcache_free(sip__rcache_t *c);

typedef enum sip__rcache_outcome {
  SIP__RCACHE_RUN = 0, /* submit r; *run (may be NULL: not cached) stores its answer */
  SIP__RCACHE_HIT,     /* *hit is the kept answer for r (its id, cached flag set): the
                          caller delivers it to r->done/r->user and frees r */
} sip__rcache_outcome_t;

/* Looks request r (done/user set) to model m up. On RUN with *run set,
 * r's done/user are the cache's, which store an OK answer and then call
 * the original. Pools that did not opt in, pipelines and the requests
 * that are never cached give RUN with *run NULL. */
sip__rcache_outcome_t sip__rcache_begin(sip__rcache_t *c, sip__model_t *m, sip_request_t *r,
                                        sip_response_t **hit, sip__rcache_run_t **run);
/* The request of a RUN was refused at submission (its callback never
 * fires): forgets it. NULL is a no-op. */
void sip__rcache_abort(sip__rcache_run_t *run);

typedef struct sip__rcache_stats {
  uint64_t hits, misses, errors; /* errors: lookups or stores the backend could not do */
  int64_t bytes;                 /* bytes kept now (memory backend; 0 with redis) */
  uint64_t hit_us, miss_us;      /* time spent looking up hits; looking up and storing misses */
} sip__rcache_stats_t;

/* Calls fn for each pool and version that used the cache. */
void sip__rcache_each(sip__rcache_t *c,
                      void (*fn)(void *ctx, const char *pool, const char *version,
                                 const sip__rcache_stats_t *st),
                      void *ctx);
/* The backend's name ("memory", "redis"). */
const char *sip__rcache_backend(const sip__rcache_t *c);

#endif
