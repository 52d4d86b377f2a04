/* sip — the elastic-capacity families on /metrics that are the engine's,
 * not a pool's (docs/elastic.md): residency of on-demand models
 * (sip_residency_*) and the model store (sip_model_store_*). */
#include <stdatomic.h>

#include "server/observe/prometheus_impl.h"
#include "session/engine.h"
#include "session/store.h"

typedef sip__sb_t sb_t;
#define sb_add sip__sb_add
#define family sip__prom_family

/* Residency of on-demand models (docs/elastic.md "Residency"). */
static void residency_metrics(sb_t *b, sip__engine_t *e) {
  family(b, "sip_residency_hits_total", "counter",
         "Requests to on_demand models that found the model loaded.");
  sb_add(b, "sip_residency_hits_total %llu\n", (unsigned long long)atomic_load(&e->res_hits));
  family(b, "sip_residency_cold_starts_total", "counter",
         "Requests to on_demand models that waited for the model to load.");
  sb_add(b, "sip_residency_cold_starts_total %llu\n",
         (unsigned long long)atomic_load(&e->res_cold_starts));
  family(b, "sip_residency_evictions_total", "counter",
         "on_demand models unloaded to make room under server.memory_budget_mb.");
  sb_add(b, "sip_residency_evictions_total %llu\n",
         (unsigned long long)atomic_load(&e->res_evictions));
  const char *name = "sip_residency_cold_start_seconds";
  family(b, name, "histogram",
         "Seconds a request to an on_demand model waited, from arrival until the model was "
         "loaded.");
  sip__hist_read_t h;
  sip__hist_read(&e->res_cold_wait, &h);
  for (int j = 0; j < SIP__HIST_BUCKETS; j++)
    sb_add(b, "%s_bucket{le=\"%g\"} %llu\n", name, (double)sip__hist_bounds_us[j] / 1e6,
           (unsigned long long)h.cum[j]);
  sb_add(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
         (unsigned long long)h.cum[SIP__HIST_BUCKETS], name, (double)h.sum_us / 1e6, name,
         (unsigned long long)h.cum[SIP__HIST_BUCKETS]);
}

/* The engine's model store (session/store.h). */
static void store_metrics(sb_t *b, sip__engine_t *e) {
  sip__store_stats_t st;
  sip__store_read(&e->store, &st);
  family(b, "sip_model_store_loads_total", "counter", "Model files the model store loaded.");
  sb_add(b, "sip_model_store_loads_total %llu\n", (unsigned long long)st.loads);
  family(b, "sip_model_store_shares_total", "counter",
         "Pool loads answered with a model the store held already.");
  sb_add(b, "sip_model_store_shares_total %llu\n", (unsigned long long)st.shares);
  family(b, "sip_model_store_models", "gauge", "Models loaded in the model store.");
  sb_add(b, "sip_model_store_models %llu\n", (unsigned long long)st.models);
  family(b, "sip_model_store_bytes", "gauge", "What the store's models measured at load, in bytes.");
  sb_add(b, "sip_model_store_bytes %llu\n", (unsigned long long)st.bytes);
}

void sip__prometheus_elastic(sip__sb_t *b, sip__engine_t *e) {
  residency_metrics(b, e);
  store_metrics(b, e);
}
