/* sip — the autoscaler's /metrics families (docs/elastic.md,
 * "Autoscaling"): per autoscaled pool its utilisation over the window, the
 * demand, the sessions it may have, the arrival rate and its forecast with
 * the forecast's error, and the changes made by direction. */
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "server/observe/prometheus_impl.h"
#include "session/autoscale.h"

/* Three rows of one family for one pool, each with one more label. */
static void rows3(sip__sb_t *b, const char *fam, const char *labels, const char *const more[3],
                  const uint64_t x[3]) {
  for (int k = 0; k < 3; k++)
    sip__sb_add(b, "%s{%s,%s} %llu\n", fam, labels, more[k], (unsigned long long)x[k]);
}

void sip__prometheus_autoscale(sip__sb_t *b, const sip__prom_pool_row_t *pl, size_t n) {
  sip__autoscale_view_t *v = n ? sip__calloc(n, sizeof *v) : NULL;
  int *has = n ? sip__calloc(n, sizeof *has) : NULL;
  if (n && (!v || !has)) {
    sip__free(v);
    sip__free(has);
    b->oom = 1;
    return;
  }
  for (size_t i = 0; i < n; i++) has[i] = pl[i].pool && sip__autoscale_view(pl[i].pool, &v[i]);
  static const struct {
    const char *name, *help;
    size_t off;
  } gauges[] = {
#define G(f) offsetof(sip__autoscale_view_t, f)
      {"sip_autoscale_utilization",
       "Busy sessions / sessions, averaged over autoscale.window_s.", G(utilization)},
      {"sip_autoscale_demand", "Busy sessions plus queued requests, averaged over the window.",
       G(demand)},
      {"sip_autoscale_p99_seconds", "The p99 of requests answered over the window (from the "
       "latency histogram), in seconds.", G(p99_ms)},
      {"sip_autoscale_arrival_rps", "Requests admitted in the last whole second.", G(arrival_rps)},
      {"sip_autoscale_service_seconds", "Mean execution time per request over the window.",
       G(service_ms)},
      {"sip_autoscale_forecast_rps", "The arrival rate forecast prediction_horizon_s ahead "
       "(Holt's linear trend over history_window_s).", G(forecast_rps)},
      {"sip_autoscale_forecast_error", "Mean absolute error of past forecasts against the rate "
       "that arrived, in requests per second (-1: none checked yet).", G(forecast_error)},
      {"sip_autoscale_forecast_sessions", "Sessions the forecast rate needs at "
       "scale_up_threshold.", G(forecast_sessions)},
#undef G
  };
  for (size_t g = 0; g < sizeof gauges / sizeof *gauges; g++) {
    sip__prom_family(b, gauges[g].name, "gauge", gauges[g].help);
    int ms = gauges[g].off == offsetof(sip__autoscale_view_t, p99_ms) ||
             gauges[g].off == offsetof(sip__autoscale_view_t, service_ms);
    for (size_t i = 0; i < n; i++) {
      if (!has[i]) continue;
      double x = *(const double *)((const char *)&v[i] + gauges[g].off);
      sip__sb_add(b, "%s{%s} %.6g\n", gauges[g].name, pl[i].labels, ms ? x / 1000.0 : x);
    }
  }
  sip__prom_family(b, "sip_autoscale_sessions", "gauge",
                   "Sessions of an autoscaled pool now, and its bounds (bound=\"current\", "
                   "\"min\", \"max\").");
  static const char *const bounds[3] = {"bound=\"current\"", "bound=\"min\"", "bound=\"max\""};
  for (size_t i = 0; i < n; i++)
    if (has[i])
      rows3(b, "sip_autoscale_sessions", pl[i].labels, bounds,
            (uint64_t[3]){(uint64_t)v[i].sessions, (uint64_t)v[i].min_sessions,
                          (uint64_t)v[i].max_sessions});
  sip__prom_family(b, "sip_pool_scaled_total", "counter",
                   "Changes of an autoscaled pool's size by direction (up, down), and scale-ups "
                   "the memory quota or budget stopped short (capped).");
  static const char *const dirs[3] = {"direction=\"up\"", "direction=\"down\"",
                                      "direction=\"capped\""};
  for (size_t i = 0; i < n; i++)
    if (has[i])
      rows3(b, "sip_pool_scaled_total", pl[i].labels, dirs,
            (uint64_t[3]){v[i].scaled_up, v[i].scaled_down, v[i].capped});
  sip__free(v);
  sip__free(has);
}
