/* sip — the response cache's families on /metrics (docs/metrics.md,
 * docs/response_cache.md): sip_response_cache_* per pool and version, and
 * with metrics.triton_names Triton's nv_cache_*_per_model with its labels
 * (model, version; an unversioned pool reports "1"). */
#include <stddef.h>
#include <stdio.h>

#include "server/observe/prometheus_impl.h"
#include "server/cache/response_cache.h"

typedef struct emit_ctx {
  sip__sb_t *b;
  const char *name;
  size_t field; /* offset into sip__rcache_stats_t */
  int triton, is_signed;
} emit_ctx_t;

static void emit(void *ctx, const char *pool, const char *version, const sip__rcache_stats_t *st) {
  emit_ctx_t *x = ctx;
  char e1[300], e2[300], labels[640];
  if (x->triton)
    sip__prom_triton_labels(labels, sizeof labels, pool, version);
  else
    snprintf(labels, sizeof labels, "pool=\"%s\",version=\"%s\"", sip__prom_esc(e1, sizeof e1, pool),
             sip__prom_esc(e2, sizeof e2, version));
  const char *f = (const char *)st + x->field;
  long long val = x->is_signed ? (long long)*(const int64_t *)f
                               : (long long)*(const uint64_t *)f;
  sip__sb_add(x->b, "%s{%s} %lld\n", x->name, labels, val);
}

void sip__prometheus_rcache(sip__sb_t *b, struct sip__rcache *c, int triton) {
  static const struct {
    const char *name, *type, *help;
    size_t field;
    int triton, is_signed;
  } fams[] = {
      {"sip_response_cache_hits_total", "counter",
       "Requests answered from the response cache (docs/response_cache.md).",
       offsetof(sip__rcache_stats_t, hits), 0, 0},
      {"sip_response_cache_misses_total", "counter",
       "Cacheable requests the response cache did not have: they ran, and an OK answer was kept.",
       offsetof(sip__rcache_stats_t, misses), 0, 0},
      {"sip_response_cache_errors_total", "counter",
       "Lookups or stores the response cache's backend could not do (Redis unreachable, a value "
       "it could not read); those requests ran uncached.",
       offsetof(sip__rcache_stats_t, errors), 0, 0},
      {"sip_response_cache_bytes", "gauge",
       "Bytes of answers the memory backend keeps for the pool (0 with redis).",
       offsetof(sip__rcache_stats_t, bytes), 0, 1},
      {"nv_cache_num_hits_per_model", "counter",
       "Response cache hits (sip_response_cache_hits_total).",
       offsetof(sip__rcache_stats_t, hits), 1, 0},
      {"nv_cache_num_misses_per_model", "counter",
       "Response cache misses (sip_response_cache_misses_total).",
       offsetof(sip__rcache_stats_t, misses), 1, 0},
      {"nv_cache_hit_duration_per_model", "counter",
       "Cumulative time looking up hits in microseconds.",
       offsetof(sip__rcache_stats_t, hit_us), 1, 0},
      {"nv_cache_miss_duration_per_model", "counter",
       "Cumulative time looking up and storing misses in microseconds.",
       offsetof(sip__rcache_stats_t, miss_us), 1, 0},
  };
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
    if (fams[i].triton && !triton) continue;
    sip__prom_family(b, fams[i].name, fams[i].type, fams[i].help);
    emit_ctx_t x = {b, fams[i].name, fams[i].field, fams[i].triton, fams[i].is_signed};
    sip__rcache_each(c, emit, &x);
  }
}
