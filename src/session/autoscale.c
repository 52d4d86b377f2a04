/* sip — a pool's autoscaling sampler and step (see autoscale.h).
 *
 * Every tick (100 ms) the sampler counts the pool's sessions that are
 * executing and the requests queued: utilisation = busy / sessions and
 * demand = busy + queued, averaged over the ticks since the window began
 * (at most window_s; a change of size starts a new window, so the sessions
 * just added are seen before more are asked for). Once a second it closes
 * a second of arrivals, refits Holt's linear trend (core/forecast.h) to
 * the last history_window_s of them, forecasts prediction_horizon_s ahead,
 * scores the forecast made for this second against what arrived, and takes
 * a snapshot of the latency histogram and the execution time for the p99
 * and the service time over the window. */
#include "session/autoscale.h"

#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/forecast.h"
#include "session/admission.h"
#include "session/autoscale_policy.h"
#include "session/observe/events.h"
#include "session/pool_impl.h"

struct sip__autoscale {
  pthread_mutex_t mu;  /* the view (status and /metrics read it) */
  /* Tick samples of the current window. */
  double *util, *demand;
  int n_ticks, head, filled;
  /* Seconds: arrivals, forecasts waiting for their second, snapshots. */
  uint64_t sec_start_us, sec_arrivals, seconds;
  double *rates;        /* arrivals per second, ring of history_window_s */
  int n_hist, hist_filled;
  double *pending;      /* forecast for second k at [k % (horizon + 1)], NAN: none */
  double *errs;         /* absolute errors of the last history_window_s checked forecasts */
  int errs_filled;
  sip__hist_read_t *snaps; /* the latency histogram at the end of each of the last window_s + 1 seconds */
  uint64_t *svc_ns, *svc_n; /* execution ns and requests executed, same seconds */
  int n_snaps;
  uint64_t last_change_us, last_up_us;
  int cap_noted;
  sip__autoscale_view_t v; /* under mu */
};

void sip__autoscale_free(sip__autoscale_t *a) {
  if (!a) return;
  pthread_mutex_destroy(&a->mu);
  sip__free(a->util);
  sip__free(a->demand);
  sip__free(a->rates);
  sip__free(a->pending);
  sip__free(a->errs);
  sip__free(a->snaps);
  sip__free(a->svc_ns);
  sip__free(a->svc_n);
  sip__free(a);
}

static sip__autoscale_t *as_new(const sip__autoscale_config_t *c, uint64_t now) {
  sip__autoscale_t *a = sip__calloc(1, sizeof *a);
  if (!a) return NULL;
  pthread_mutex_init(&a->mu, NULL);
  a->n_ticks = (int)((uint64_t)c->window_s * 1000000 / SIP__AS_TICK_US);
  a->n_hist = c->history_window_s;
  a->n_snaps = c->window_s + 1;
  a->util = sip__calloc((size_t)a->n_ticks, sizeof *a->util);
  a->demand = sip__calloc((size_t)a->n_ticks, sizeof *a->demand);
  a->rates = sip__calloc((size_t)a->n_hist, sizeof *a->rates);
  a->errs = sip__calloc((size_t)a->n_hist, sizeof *a->errs);
  a->pending = sip__calloc((size_t)c->prediction_horizon_s + 1, sizeof *a->pending);
  a->snaps = sip__calloc((size_t)a->n_snaps, sizeof *a->snaps);
  a->svc_ns = sip__calloc((size_t)a->n_snaps, sizeof *a->svc_ns);
  a->svc_n = sip__calloc((size_t)a->n_snaps, sizeof *a->svc_n);
  if (!a->util || !a->demand || !a->rates || !a->errs || !a->pending || !a->snaps || !a->svc_ns ||
      !a->svc_n) {
    sip__autoscale_free(a);
    return NULL;
  }
  for (int i = 0; i <= c->prediction_horizon_s; i++) a->pending[i] = NAN;
  a->sec_start_us = now;
  a->last_change_us = now; /* the sessions just made count as a change: the cooldown runs */
  a->v.forecast_error = -1;
  a->v.last_reason = sip__as_reason_name(SIP__AS_NONE);
  return a;
}

/* The p99 in ms between two readings of a latency histogram, interpolated
 * inside its bucket; 0 when nothing was answered. */
static double p99_between(const sip__hist_read_t *old, const sip__hist_read_t *now) {
  uint64_t total = now->cum[SIP__HIST_BUCKETS] - old->cum[SIP__HIST_BUCKETS];
  if (!total) return 0;
  double target = ceil(0.99 * (double)total);
  uint64_t below = 0;
  for (int i = 0; i <= SIP__HIST_BUCKETS; i++) {
    uint64_t c = now->cum[i] - old->cum[i];
    if ((double)c < target) {
      below = c;
      continue;
    }
    double lo = i ? (double)sip__hist_bounds_us[i - 1] : 0;
    double hi = i < SIP__HIST_BUCKETS ? (double)sip__hist_bounds_us[i] : lo;
    double in = (double)(c - below);
    return (lo + (hi - lo) * (in > 0 ? (target - (double)below) / in : 1)) / 1000.0;
  }
  return (double)sip__hist_bounds_us[SIP__HIST_BUCKETS - 1] / 1000.0;
}

static uint64_t compute_ns(sip__pool_t *p) {
  return atomic_load(&p->st_compute_input.ns) + atomic_load(&p->st_compute_infer.ns) +
         atomic_load(&p->st_compute_output.ns);
}

/* Closes a second: its arrival rate, the forecast, its error, the
 * snapshots for the p99 and the service time. */
static void second_done(sip__pool_t *p, sip__autoscale_t *a, const sip__autoscale_config_t *c,
                        uint64_t now) {
  uint64_t arr = atomic_load(&p->arrivals), k = a->seconds++;
  double el = (double)(now - a->sec_start_us) / 1e6;
  double rate = (double)(arr - a->sec_arrivals) / (el > 0 ? el : 1);
  a->sec_arrivals = arr;
  a->sec_start_us = now;
  /* The ring holds the last n_hist seconds, oldest first from hist_filled. */
  if (a->hist_filled < a->n_hist) {
    a->rates[a->hist_filled++] = rate;
  } else {
    memmove(a->rates, a->rates + 1, (size_t)(a->n_hist - 1) * sizeof *a->rates);
    a->rates[a->n_hist - 1] = rate;
  }
  int h = c->prediction_horizon_s;
  double was = a->pending[k % (uint64_t)(h + 1)];
  double err = NAN;
  if (!isnan(was)) {
    int at = a->errs_filled < a->n_hist ? a->errs_filled++ : (int)(k % (uint64_t)a->n_hist);
    a->errs[at] = fabs(was - rate);
    double sum = 0;
    for (int i = 0; i < a->errs_filled; i++) sum += a->errs[i];
    err = sum / a->errs_filled;
  }
  double f = sip__holt_fit_forecast(SIP__AS_ALPHA, SIP__AS_BETA, a->rates,
                                    (size_t)a->hist_filled, (double)h);
  a->pending[(k + (uint64_t)h) % (uint64_t)(h + 1)] = f;
  /* Snapshots: slot k % n_snaps is this second's; the oldest kept is the
   * window's start. */
  int s = (int)(k % (uint64_t)a->n_snaps);
  sip__hist_read(&p->h_total, &a->snaps[s]);
  a->svc_ns[s] = compute_ns(p);
  a->svc_n[s] = atomic_load(&p->inference_count);
  int o = k + 1 >= (uint64_t)a->n_snaps ? (int)((k + 1) % (uint64_t)a->n_snaps) : 0;
  double p99 = p99_between(&a->snaps[o], &a->snaps[s]);
  uint64_t dn = a->svc_n[s] - a->svc_n[o];
  double svc = dn ? (double)(a->svc_ns[s] - a->svc_ns[o]) / (double)dn / 1e6 : 0;
  if (!svc && a->svc_n[s]) svc = (double)a->svc_ns[s] / (double)a->svc_n[s] / 1e6;
  pthread_mutex_lock(&a->mu);
  a->v.arrival_rps = rate;
  a->v.forecast_rps = f;
  if (!isnan(err)) a->v.forecast_error = err;
  a->v.p99_ms = p99;
  if (svc > 0) a->v.service_ms = svc;
  a->v.forecast_sessions =
      sip__as_sessions_for(f, a->v.service_ms / 1000.0, c->scale_up_threshold);
  pthread_mutex_unlock(&a->mu);
}

void sip__autoscale_tick(sip__pool_t *p, uint64_t now, uint64_t room_bytes) {
  const sip__autoscale_config_t *c = &p->cfg->autoscale;
  sip__autoscale_t *a = atomic_load(&p->as);
  if (!a) {
    if (!(a = as_new(c, now))) return; /* out of memory: the pool keeps its size */
    a->sec_arrivals = atomic_load(&p->arrivals);
    atomic_store(&p->as, a);
  }
  pthread_mutex_lock(&p->mu);
  int n = p->n_sessions, busy = 0;
  for (int i = 0; i < n; i++)
    busy += atomic_load(&p->sessions[i].state) == SIP__SESSION_RUNNING;
  int queued = (int)sip__pool_queued(p);
  pthread_mutex_unlock(&p->mu);
  a->util[a->head] = n ? (double)busy / n : queued ? 1 : 0;
  a->demand[a->head] = busy + queued;
  a->head = (a->head + 1) % a->n_ticks;
  if (a->filled < a->n_ticks) a->filled++;
  double us = 0, ds = 0;
  for (int i = 0; i < a->filled; i++) {
    us += a->util[i];
    ds += a->demand[i];
  }
  if (now - a->sec_start_us >= 1000000) second_done(p, a, c, now);

  sip__as_input_t in = {.sessions = n, .utilization = us / a->filled, .demand = ds / a->filled,
                        .queued_now = queued, .now_us = now,
                        .last_change_us = a->last_change_us, .last_up_us = a->last_up_us};
  pthread_mutex_lock(&a->mu);
  in.p99_ms = a->v.p99_ms;
  if (c->predictive) in.forecast_sessions = a->v.forecast_sessions;
  a->v.sessions = n;
  a->v.min_sessions = c->min_sessions;
  a->v.max_sessions = c->max_sessions;
  a->v.utilization = in.utilization;
  a->v.demand = in.demand;
  a->v.predictive = c->predictive;
  pthread_mutex_unlock(&a->mu);
  /* A window of at least a second (or the whole window when shorter)
   * before utilisation decides; a pool with no session and requests
   * waiting does not wait for it. */
  int enough = a->filled >= (a->n_ticks < 10 ? a->n_ticks : 10);
  if (!enough && !(n == 0 && queued)) return;
  sip__as_reason_t why;
  int want = sip__as_decide(c, &in, &why);
  if (want == n) return;
  char note[256];
  int capped = 0;
  int got = sip__pool_scale_to(p, want, room_bytes, sip__as_reason_name(why), note, sizeof note,
                               &capped);
  if (capped && !a->cap_noted) {
    if (got == n) { /* no change to report it with: say it once */
      sip__log(SIP__LOG_WARN, "pool autoscale capped", "pool=%s note=\"%s\"", p->cfg->name, note);
      sip__events_pool(p, SIP_EVENT_POOL_SCALED, note);
    }
  }
  if (capped && !a->cap_noted) {
    pthread_mutex_lock(&a->mu);
    a->v.capped++;
    pthread_mutex_unlock(&a->mu);
  }
  a->cap_noted = capped;
  if (got == n) return;
  a->last_change_us = now;
  if (got > n) a->last_up_us = now;
  a->filled = a->head = 0; /* a new window for the new size */
  pthread_mutex_lock(&a->mu);
  if (got > n) a->v.scaled_up++;
  else a->v.scaled_down++;
  a->v.sessions = got;
  a->v.last_reason = sip__as_reason_name(why);
  pthread_mutex_unlock(&a->mu);
}

int sip__autoscale_view(sip__pool_t *p, sip__autoscale_view_t *out) {
  sip__autoscale_t *a = atomic_load(&p->as);
  if (!p->cfg->autoscale.enabled || !a) return 0;
  pthread_mutex_lock(&a->mu);
  *out = a->v;
  pthread_mutex_unlock(&a->mu);
  return 1;
}
