/* sip — the SLA monitor (docs/sla.md): a thread of its own closes each
 * pool's SLA windows when they are due (src/session/observe/sla.c does the
 * arithmetic) and sends the alerts that fire or resolve to the event
 * stream (ALERT), the log and the webhooks (src/server/observe/webhook.c). It reads
 * counters the executors keep with atomic increments and takes no lock an
 * inference takes, so a slow monitor or webhook never slows a request. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "server/server_impl.h"
#include "server/observe/sla_monitor.h"
#include "server/observe/webhook.h"
#include "session/observe/events.h"
#include "session/observe/sla.h"

/* The longest the thread sleeps when no window is due (a pool that loads
 * meanwhile starts its first window within this). */
#define IDLE_TICK_US 1000000u

/* A pool whose alert is on, remembered so that its alert can be resolved
 * if the pool goes away (unloaded, or replaced by a reload) while on. */
typedef struct firing {
  uint64_t id; /* the pool's sip__sla_t id */
  char *pool, *version;
  sip__sla_config_t t;
  int level;
  int seen; /* in the latest snapshot */
} firing_t;

struct sip__sla_monitor {
  sip_server_t *srv;
  const sip__alerts_config_t *pol; /* the server's config's */
  sip__webhooks_t *hooks;
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  int stop;
  _Atomic uint64_t alerts_sent;
  firing_t *firing; /* the monitor thread's own */
  size_t n_firing, cap_firing;
};

/* Strings copied into an event's fixed arrays, cut to fit. */
static void copy(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static void dispatch(sip__sla_monitor_t *m, const char *pool, const char *version,
                     const sip__sla_config_t *t, const sip__sla_alert_t *a) {
  const char *level = sip__alert_level_name(a->level);
  const char *state = a->resolved ? "resolved" : "firing";
  sip_event_t ev = {.type = SIP_EVENT_ALERT};
  copy(ev.pool, sizeof ev.pool, pool);
  copy(ev.old_state, sizeof ev.old_state, sip__alert_level_name(a->previous));
  copy(ev.new_state, sizeof ev.new_state, a->resolved ? "none" : level);
  copy(ev.text, sizeof ev.text, a->reason);
  sip__event_emit(m->srv->eng.events, &ev);
  int lv = a->resolved ? SIP__LOG_INFO
           : a->level == SIP__ALERT_CRITICAL ? SIP__LOG_ERROR
                                             : SIP__LOG_WARN;
  sip__log(lv, "sla alert", "pool=%s level=%s state=%s reason=\"%s\"", pool, level, state,
           a->reason);
  if (m->hooks) {
    json_t *o = sip__sla_alert_json(pool, version, t, a);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    sip__webhooks_post(m->hooks, body);
    free(body);
  }
  atomic_fetch_add(&m->alerts_sent, 1);
}

static firing_t *firing_find(sip__sla_monitor_t *m, uint64_t id) {
  for (size_t i = 0; i < m->n_firing; i++)
    if (m->firing[i].id == id) return &m->firing[i];
  return NULL;
}

static void firing_drop(sip__sla_monitor_t *m, firing_t *f) {
  sip__free(f->pool);
  sip__free(f->version);
  *f = m->firing[--m->n_firing];
}

/* Remembers (or forgets) that the alert of the pool `p` describes is on at
 * `level`. Out of memory: not remembered (its resolution is then not sent
 * if it goes). */
static void firing_note(sip__sla_monitor_t *m, const sip__pool_info_t *p, int level) {
  firing_t *f = firing_find(m, p->sla->id);
  if (f) f->seen = 1;
  if (level == SIP__ALERT_NONE) {
    if (f) firing_drop(m, f);
    return;
  }
  if (f) {
    f->level = level;
    return;
  }
  if (m->n_firing == m->cap_firing) {
    size_t cap = m->cap_firing ? m->cap_firing * 2 : 8;
    firing_t *v = sip__realloc(m->firing, cap * sizeof *v);
    if (!v) return;
    m->firing = v;
    m->cap_firing = cap;
  }
  f = &m->firing[m->n_firing];
  *f = (firing_t){.id = p->sla->id, .t = p->cfg->sla, .level = level, .seen = 1};
  if (!(f->pool = sip__strdup(p->name)) ||
      (p->version && !(f->version = sip__strdup(p->version)))) {
    sip__free(f->pool);
    return;
  }
  m->n_firing++;
}

/* Alerts of pools that went away (unloaded, or replaced by a reload)
 * while on: resolved, as nothing will measure them again. */
static void firing_sweep(sip__sla_monitor_t *m, uint64_t wall) {
  for (size_t i = 0; i < m->n_firing;) {
    firing_t *f = &m->firing[i];
    if (f->seen) {
      f->seen = 0;
      i++;
      continue;
    }
    sip__sla_alert_t a = {.level = f->level, .previous = f->level, .resolved = 1,
                          .time_us = wall};
    a.window.end_us = wall;
    a.window.p99_ms = a.window.availability = -1;
    a.window.good = 1;
    snprintf(a.reason, sizeof a.reason,
             "the pool was unloaded or replaced: its windows are no longer measured");
    dispatch(m, f->pool, f->version, &f->t, &a);
    firing_drop(m, f); /* the last entry moves to i: looked at next */
  }
}

/* Closes the windows that are due; returns when the next one is. */
static uint64_t tick(sip__sla_monitor_t *m) {
  uint64_t now = sip__now_us(), wall = sip__wall_us(), next = now + IDLE_TICK_US;
  /* A draining server refuses requests on purpose: not an SLA breach. */
  if (atomic_load(&m->srv->draining)) return next;
  size_t n = 0;
  sip__pool_t **v = sip__registry_snapshot(&m->srv->eng, 1, &n);
  for (size_t i = 0; i < n; i++) {
    sip__pool_info_t in;
    sip__pool_info(v[i], &in);
    /* Windows start once the pool has loaded (or failed: a failed pool
     * answers UNAVAILABLE, which is a breach). */
    if (!in.sla || in.state == SIP__POOL_LOADING) continue;
    sip__sla_alert_t a;
    int fired = 0;
    uint64_t due = sip__sla_tick(in.sla, m->pol, now, wall, &a, &fired);
    if (fired) dispatch(m, in.name, in.version, &in.cfg->sla, &a);
    if (due < next) next = due;
    firing_note(m, &in, sip__sla_level(in.sla));
  }
  /* A snapshot that failed (out of memory) says nothing about what went. */
  int listed = 1;
  if (!v) {
    listed = sip__registry_pool_count(&m->srv->eng) == 0;
  }
  if (listed) firing_sweep(m, wall);
  sip__registry_release(v, n);
  return next;
}

static void *monitor_main(void *arg) {
  sip__sla_monitor_t *m = arg;
  pthread_mutex_lock(&m->mu);
  while (!m->stop) {
    pthread_mutex_unlock(&m->mu);
    uint64_t next = tick(m);
    pthread_mutex_lock(&m->mu);
    if (m->stop) break;
    struct timespec ts = {(time_t)(next / 1000000u), (long)(next % 1000000u) * 1000L};
    pthread_cond_timedwait(&m->cv, &m->mu, &ts);
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

sip_error_t *sip__sla_monitor_start(sip_server_t *s) {
  sip__sla_monitor_t *m = sip__calloc(1, sizeof *m);
  if (!m) return SIP__OOM();
  m->srv = s;
  m->pol = &s->cfg->alerts;
  pthread_mutex_init(&m->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  m->hooks = sip__webhooks_new(m->pol);
  if (pthread_create(&m->thread, NULL, monitor_main, m) != 0) {
    sip__webhooks_free(m->hooks);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    sip__free(m);
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start the SLA monitor thread");
  }
  m->started = 1;
  s->sla = m;
  return NULL;
}

void sip__sla_monitor_stop(sip_server_t *s) {
  sip__sla_monitor_t *m = s->sla;
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->stop = 1;
  pthread_cond_signal(&m->cv);
  pthread_mutex_unlock(&m->mu);
  if (m->started) pthread_join(m->thread, NULL);
  sip__webhooks_free(m->hooks); /* after the thread: it posts to them */
  while (m->n_firing) firing_drop(m, &m->firing[0]);
  sip__free(m->firing);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  sip__free(m);
  s->sla = NULL;
}

json_t *sip__sla_monitor_json(sip_server_t *s) {
  sip__sla_monitor_t *m = s->sla;
  const sip__alerts_config_t *a = &s->cfg->alerts;
  json_t *hooks = json_array();
  for (size_t i = 0; m && i < sip__webhooks_count(m->hooks); i++) {
    sip__webhook_stats_t st;
    const char *url = sip__webhooks_read(m->hooks, i, &st);
    json_array_append_new(
        hooks, json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "url", url, "delivered",
                         (json_int_t)st.delivered, "failed", (json_int_t)st.failed, "dropped",
                         (json_int_t)st.dropped, "attempts", (json_int_t)st.attempts, "queued",
                         (json_int_t)st.queued));
  }
  return json_pack("{s:i,s:i,s:i,s:I,s:o}", "warning_after", a->warning_after, "critical_after",
                   a->critical_after, "resolve_after", a->resolve_after, "sent",
                   (json_int_t)(m ? atomic_load(&m->alerts_sent) : 0), "webhooks", hooks);
}

void sip__sla_monitor_webhooks(sip_server_t *s,
                               void (*fn)(void *ctx, const char *url,
                                          const sip__webhook_stats_t *st),
                               void *ctx) {
  sip__sla_monitor_t *m = s->sla;
  for (size_t i = 0; m && i < sip__webhooks_count(m->hooks); i++) {
    sip__webhook_stats_t st;
    const char *url = sip__webhooks_read(m->hooks, i, &st);
    fn(ctx, url, &st);
  }
}
