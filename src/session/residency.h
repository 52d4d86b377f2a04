/* sip — residency of on-demand pools, as the management plane drives it
 * (src/session/residency.c; docs/elastic.md "Residency"). A pool with
 * residency on_demand is listed UNLOADED: its first request queues (with its
 * deadline and priority) and asks the engine's want_load hook for a load;
 * the server loads it on its loader thread, evicting idle on-demand pools
 * first when the memory budget wants room. */
#ifndef SIP_SESSION_RESIDENCY_H
#define SIP_SESSION_RESIDENCY_H

#include <stdint.h>

#include "session/engine.h"

/* What the loader reads of a pool to choose what to evict. */
typedef struct sip__residency_info {
  int on_demand;          /* residency on_demand (else pinned) */
  sip__pool_state_t state;
  uint64_t last_used_us;  /* monotonic time of its last admitted request; 0: none */
  uint64_t held_bytes;    /* measured memory while loaded (READY or LOADING), else 0 */
  uint64_t expected_bytes; /* what loading it is expected to take: its last measured
                              memory, else its model file's size, else 0; less the
                              model's bytes when the store holds its model already */
  uint64_t file_bytes;     /* its model file's size, 0: none or unknown */
  uint64_t load_extra_bytes; /* how far its last load rose above what it kept (parsing
                                buffers, copies of the weights), measured; 0: unknown */
  int model_held;          /* UNLOADED and the store holds its model already: its load
                              makes sessions only */
  size_t queued;          /* requests in its queue */
  /* Its loaded model in the engine's model store (docs/elastic.md "One
   * model store"): an opaque key (NULL: none), the bytes of held_bytes
   * that are the model's (held while any pool shares it) and how many
   * pools share it. */
  const void *store_key;
  uint64_t store_bytes;
  long store_pools;
} sip__residency_info_t;

/* Marks a pool not yet listed on-demand and UNLOADED; `expected_bytes` (0:
 * unknown) is what its load is expected to take. */
void sip__pool_set_on_demand(sip__pool_t *p, uint64_t expected_bytes);
void sip__pool_residency(sip__pool_t *p, sip__residency_info_t *out);
/* 1 when nothing runs on or waits for `p`: its queue is empty and none of
 * its sessions is running a request. References held by readers (status,
 * metrics, the autoscaler's snapshots) do not make it busy; a request
 * between its lookup and its queue is served by the pool's drain if the
 * pool is evicted meanwhile. */
int sip__pool_idle(sip__pool_t *p);
/* UNLOADED → LOADING: 1 when this call moved it (the caller then loads it
 * with sip__pool_load), 0 when it was not UNLOADED. */
int sip__pool_begin_load(sip__pool_t *p);
/* A load asked for could not be done (no room): the next request asks
 * again. */
void sip__pool_load_refused(sip__pool_t *p);
/* A new UNLOADED on-demand pool serving what `old` serves (its config,
 * taken over when `old` owns it, its version and origin), expecting the
 * memory `old` measured; to be swapped in for `old` (then
 * sip__pool_take_config), which is then drained and freed before anything
 * else may free the new one. NULL when out of memory. */
sip__pool_t *sip__pool_renew_unloaded(sip__pool_t *old);
/* Hands the config `old` owns to `p` (its renewal, swapped in for it). */
void sip__pool_take_config(sip__pool_t *p, sip__pool_t *old);
/* Records how far `p`'s load peaked above what it kept (bytes). */
void sip__pool_set_load_extra(sip__pool_t *p, uint64_t bytes);
/* The sessions `p` runs now (0: all released, or none started). */
int sip__pool_running_sessions(sip__pool_t *p);
/* Answers every queued request with (code, msg). */
void sip__pool_fail_queued(sip__pool_t *p, sip_code_t code, const char *msg);

#endif
