/* sip — autoscaling a pool's sessions (docs/elastic.md, "Autoscaling"):
 * the per-pool sampler (utilisation, demand, p99 over the window; arrivals
 * per second and their forecast) and the step that applies the decision of
 * session/autoscale_policy.h through sip__pool_scale_to. The server's
 * autoscaler thread (src/server/autoscale.c) calls the tick for every
 * serving pool with an autoscale block. */
#ifndef SIP_SESSION_AUTOSCALE_H
#define SIP_SESSION_AUTOSCALE_H

#include <stdint.h>

#include "session/engine.h"

typedef struct sip__autoscale sip__autoscale_t;

/* How often the sampler runs. */
#define SIP__AS_TICK_US 100000
/* Holt's factors for the arrival-rate forecast (docs/elastic.md). */
#define SIP__AS_ALPHA 0.5
#define SIP__AS_BETA 0.3

/* Frees a pool's sampler (the pool's destroy); NULL is a no-op. */
void sip__autoscale_free(sip__autoscale_t *a);
/* One tick for READY pool `p` (its config has an autoscale block): samples
 * its sessions and queue, and once the decision differs from its size,
 * scales it (`room_bytes`: what the server's memory budget has left,
 * UINT64_MAX without one). Called from one thread only. */
void sip__autoscale_tick(sip__pool_t *p, uint64_t now_us, uint64_t room_bytes);

/* What the autoscaler shows of a pool (status, /metrics). */
typedef struct sip__autoscale_view {
  int sessions, min_sessions, max_sessions;
  double utilization;     /* busy / sessions over the window */
  double demand;          /* busy + queued over the window */
  double p99_ms;          /* over the window, from the latency histogram's buckets */
  double arrival_rps;     /* arrivals in the last whole second */
  double service_ms;      /* mean execution time (over the window, else since start) */
  int predictive;
  double forecast_rps;    /* the arrival rate forecast prediction_horizon_s ahead */
  double forecast_error;  /* mean absolute error of past forecasts, req/s; -1: none checked yet */
  double forecast_sessions; /* sessions that rate needs */
  uint64_t scaled_up, scaled_down, capped; /* changes made; scale-ups the memory stopped short */
  const char *last_reason; /* static: "utilization", "idle", ..., "none" */
} sip__autoscale_view_t;
/* Fills `out` for pool `p` (a reference held); 0 when it has no autoscale
 * block or has not been sampled yet. */
int sip__autoscale_view(sip__pool_t *p, sip__autoscale_view_t *out);

#endif
