/* sip — the autoscaler thread (see autoscale.h). It wakes every 100 ms
 * (every second while no pool autoscales) and when a request reaches a pool
 * that released all its sessions (the engine's want_scale). */
#include "server/autoscale.h"

#include <pthread.h>
#include <time.h>

#include "core/core.h"
#include "server/server_impl.h"
#include "session/autoscale.h"
#include "session/pool_view.h"

struct sip__autoscaler {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  int stop, woken;
};

static void want_scale(void *ctx) {
  struct sip__autoscaler *as = ctx;
  pthread_mutex_lock(&as->mu);
  as->woken = 1;
  pthread_cond_signal(&as->cv);
  pthread_mutex_unlock(&as->mu);
}

/* Ticks every serving autoscaled pool; 1 when there was one. */
static int tick_all(sip_server_t *s) {
  size_t n = 0;
  uint64_t now = sip__now_us(), room = UINT64_MAX;
  if (s->memory_budget) {
    /* What the budget has left for every pool's new sessions, a model the
     * store shares counted once (each pool's own quota is checked by
     * sip__pool_scale_to); what one pool's sessions take here is not the
     * next one's. */
    sip__server_memory_t m;
    sip__server_memory(s, &m);
    room = m.budget > m.models ? m.budget - m.models : 0;
  }
  sip__pool_t **v = sip__registry_snapshot(&s->eng, 1, &n);
  int any = 0;
  for (size_t i = 0; i < n; i++) {
    if (!sip__pool_config(v[i])->autoscale.enabled) continue;
    any = 1;
    if (!sip__pool_serving(v[i])) continue;
    sip__pool_info_t before, after;
    sip__pool_info(v[i], &before);
    sip__autoscale_tick(v[i], now, room);
    sip__pool_info(v[i], &after);
    if (room != UINT64_MAX && after.memory_bytes > before.memory_bytes)
      room = room > after.memory_bytes - before.memory_bytes
                 ? room - (after.memory_bytes - before.memory_bytes)
                 : 0;
  }
  sip__registry_release(v, n);
  return any;
}

static void *main_loop(void *arg) {
  sip_server_t *s = arg;
  struct sip__autoscaler *as = s->autoscaler;
  uint64_t next = sip__now_us();
  pthread_mutex_lock(&as->mu);
  while (!as->stop) {
    if (as->woken || sip__now_us() >= next) {
      as->woken = 0;
      pthread_mutex_unlock(&as->mu);
      int any = tick_all(s);
      next = sip__now_us() + (any ? SIP__AS_TICK_US : 10 * SIP__AS_TICK_US);
      pthread_mutex_lock(&as->mu);
      continue;
    }
    struct timespec ts = {(time_t)(next / 1000000), (long)(next % 1000000) * 1000};
    pthread_cond_timedwait(&as->cv, &as->mu, &ts);
  }
  pthread_mutex_unlock(&as->mu);
  return NULL;
}

sip_error_t *sip__autoscaler_start(sip_server_t *s) {
  struct sip__autoscaler *as = sip__calloc(1, sizeof *as);
  if (!as) return SIP__OOM();
  pthread_mutex_init(&as->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&as->cv, &ca);
  pthread_condattr_destroy(&ca);
  s->autoscaler = as;
  if (pthread_create(&as->thread, NULL, main_loop, s) != 0) {
    pthread_cond_destroy(&as->cv);
    pthread_mutex_destroy(&as->mu);
    sip__free(as);
    s->autoscaler = NULL;
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start the autoscaler thread");
  }
  s->eng.want_scale_ctx = as;
  s->eng.want_scale = want_scale;
  return NULL;
}

void sip__autoscaler_stop(sip_server_t *s) {
  struct sip__autoscaler *as = s->autoscaler;
  if (!as) return;
  s->eng.want_scale = NULL;
  pthread_mutex_lock(&as->mu);
  as->stop = 1;
  pthread_cond_signal(&as->cv);
  pthread_mutex_unlock(&as->mu);
  pthread_join(as->thread, NULL);
  pthread_cond_destroy(&as->cv);
  pthread_mutex_destroy(&as->mu);
  sip__free(as);
  s->autoscaler = NULL;
}

json_t *sip__autoscale_json(sip__pool_t *p) {
  const sip__autoscale_config_t *c = &sip__pool_config(p)->autoscale;
  if (!c->enabled) return NULL;
  sip__autoscale_view_t v = {.forecast_error = -1, .last_reason = "none"};
  int seen = sip__autoscale_view(p, &v);
  json_t *o = json_pack("{s:i,s:i,s:f,s:f,s:i,s:i,s:b,s:i,s:i}", "min_sessions", c->min_sessions,
                        "max_sessions", c->max_sessions, "scale_up_threshold",
                        c->scale_up_threshold, "scale_down_threshold", c->scale_down_threshold,
                        "cooldown_s", c->cooldown_s, "window_s", c->window_s, "predictive",
                        c->predictive, "history_window_s", c->history_window_s,
                        "prediction_horizon_s", c->prediction_horizon_s);
  if (!o) return NULL;
  if (c->target_p99_ms > 0) json_object_set_new(o, "target_p99_ms", json_real(c->target_p99_ms));
  if (seen) {
    json_t *now = json_pack(
        "{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:s}", "utilization", v.utilization,
        "demand", v.demand, "p99_ms", v.p99_ms, "arrival_rps", v.arrival_rps, "service_ms",
        v.service_ms, "forecast_rps", v.forecast_rps, "forecast_error", v.forecast_error,
        "forecast_sessions", v.forecast_sessions, "scaled_up", (json_int_t)v.scaled_up,
        "scaled_down", (json_int_t)v.scaled_down, "capped", (json_int_t)v.capped, "last_reason",
        v.last_reason);
    if (now) json_object_update(o, now);
    json_decref(now);
  }
  return o;
}
