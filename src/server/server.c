/* sip — the engine's public API: options, server lifecycle, requests and
 * responses (introspection is in introspect.c). */
#include <limits.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "core/redact.h"
#include "server/autoscale.h"
#include "server/server.h"
#include "sip/frontend.h"
#include "pipeline/pipeline.h"
#include "server/server_impl.h"
#include "session/residency.h"
#include "server/state/idem_journal.h"
#include "server/observe/sla_monitor.h"
#include "server/state/idempotency.h"
#include "server/cache/response_cache.h"
#include "server/observe/tracing.h"
#include "backend/backends.h"

#define SIP__VERSION_STRING "0.1.0"
const char *sip_version(void) { return SIP__VERSION_STRING; }
int sip_api_version(void) { return 100; }

/* ---- idempotency caches and the answers they replay ---- */

struct sip__idem_slot {
  char *name; /* the model's */
  sip__idem_t *cache;
  sip_server_t *srv;
  struct sip__idem_slot *next;
};

/* The journal is started afresh (holding only live answers) once it grows
 * past max(JOURNAL_MIN, 4 x its size after the last time). */
#define JOURNAL_MIN (UINT64_C(16) << 20)

/* Each answer a cache keeps goes to the journal before it is sent. */
static void journal_sink(void *ctx, const char *key, uint64_t expires_wall_us,
                         const sip_response_t *resp) {
  struct sip__idem_slot *sl = ctx;
  sip_server_t *s = sl->srv;
  uint64_t size = sip__journal_append(s->journal, sl->name, key, expires_wall_us, resp);
  uint64_t floor = atomic_load(&s->journal_floor);
  if (size > (floor * 4 > JOURNAL_MIN ? floor * 4 : JOURNAL_MIN) &&
      !atomic_exchange(&s->journal_compact, 1)) {
    pthread_mutex_lock(&s->hk_mu);
    pthread_cond_signal(&s->hk_cv);
    pthread_mutex_unlock(&s->hk_mu);
  }
}

/* The cache of model `name`, made on first use; NULL when out of memory. */
static sip__idem_t *idem_cache(sip_server_t *s, const char *name) {
  pthread_mutex_lock(&s->hk_mu);
  struct sip__idem_slot *sl = s->idem;
  while (sl && strcmp(sl->name, name)) sl = sl->next;
  if (!sl && (sl = sip__calloc(1, sizeof *sl))) {
    sl->name = sip__strdup(name);
    sl->cache = sl->name ? sip__idem_new(NULL) : NULL;
    sl->srv = s;
    if (!sl->cache) {
      sip__free(sl->name);
      sip__free(sl);
      sl = NULL;
    } else {
      if (s->journal) sip__idem_set_sink(sl->cache, journal_sink, sl);
      sl->next = s->idem;
      s->idem = sl;
    }
  }
  pthread_mutex_unlock(&s->hk_mu);
  return sl ? sl->cache : NULL;
}

void sip__server_idem_stats(sip_server_t *s, void (*fn)(void *ctx, const char *model,
                                                        const sip__idem_stats_t *st),
                            void *ctx) {
  pthread_mutex_lock(&s->hk_mu);
  for (struct sip__idem_slot *sl = s->idem; sl; sl = sl->next) {
    sip__idem_stats_t st;
    sip__idem_stats(sl->cache, &st);
    fn(ctx, sl->name, &st);
  }
  pthread_mutex_unlock(&s->hk_mu);
}

/* A kept answer read back from the journal at start. */
static void journal_restore(void *ctx, const char *model, const char *key,
                            uint64_t expires_wall_us, sip_response_t *resp) {
  sip_server_t *s = ctx;
  sip__idem_t *c = idem_cache(s, model);
  uint64_t now = sip__wall_us();
  if (c && expires_wall_us > now) sip__idem_restore(c, key, expires_wall_us - now, resp);
  else sip_response_free(resp);
}

static void journal_emit(void *ctx, const char *key, uint64_t expires_wall_us,
                         const sip_response_t *resp) {
  void **a = ctx;
  sip__journal_emit(a[0], a[1], key, expires_wall_us, resp);
}

/* Writes every cache's live answers into the journal being rewritten. The
 * slot list only grows at its head while serving: walking it from a
 * snapshot of the head needs no lock. */
static void journal_each(void *ctx, sip__journal_t *j) {
  struct sip__idem_slot *sl = ctx;
  for (; sl; sl = sl->next) {
    void *a[2] = {j, sl->name};
    sip__idem_foreach(sl->cache, journal_emit, a);
  }
}

/* On the housekeeping thread: starts the journal afresh. */
static void journal_compact(sip_server_t *s) {
  pthread_mutex_lock(&s->hk_mu);
  struct sip__idem_slot *head = s->idem;
  pthread_mutex_unlock(&s->hk_mu);
  uint64_t before = sip__journal_size(s->journal), t0 = sip__now_us();
  sip__journal_rewrite(s->journal, journal_each, head);
  uint64_t after = sip__journal_size(s->journal);
  atomic_store(&s->journal_floor, after);
  atomic_store(&s->journal_compact, 0);
  sip__log(SIP__LOG_INFO, "idempotency journal rewritten", "bytes_before=%llu bytes_after=%llu "
           "ms=%.1f", (unsigned long long)before, (unsigned long long)after,
           (double)(sip__now_us() - t0) / 1000.0);
}

/* ---- housekeeping: deadlines of queued requests ---- */

static void note_deadline(void *ctx, uint64_t deadline_us) {
  sip_server_t *s = ctx;
  pthread_mutex_lock(&s->hk_mu);
  if (deadline_us < atomic_load(&s->hk_next_us)) {
    atomic_store(&s->hk_next_us, deadline_us);
    pthread_cond_signal(&s->hk_cv);
  }
  pthread_mutex_unlock(&s->hk_mu);
}

/* With hk_mu held: sleeps until `next` (UINT64_MAX: until signalled). */
static void hk_wait(sip_server_t *s, uint64_t next) {
  if (next == UINT64_MAX) {
    pthread_cond_wait(&s->hk_cv, &s->hk_mu);
  } else if (next > sip__now_us()) {
    struct timespec ts = {(time_t)(next / 1000000), (long)(next % 1000000) * 1000};
    pthread_cond_timedwait(&s->hk_cv, &s->hk_mu, &ts);
  }
}

static void *hk_main(void *arg) {
  sip_server_t *s = arg;
  pthread_mutex_lock(&s->hk_mu);
  while (!s->hk_stop) {
    if (s->journal && atomic_load(&s->journal_compact)) {
      pthread_mutex_unlock(&s->hk_mu);
      journal_compact(s);
      pthread_mutex_lock(&s->hk_mu);
    }
    if (s->replays) {
      sip__server_deliver_replays(s);
      /* Woken for kept answers only: while no deadline is due and no drain
       * runs, the queues need no scan (it walks them under their locks). */
      uint64_t due = atomic_load(&s->hk_next_us);
      if (!s->hk_stop && !s->replays && !atomic_load(&s->drain_deadline_us) &&
          due > sip__now_us()) {
        hk_wait(s, due);
        continue;
      }
    }
    /* Reset before scanning so a deadline noted during the scan lowers it. */
    atomic_store(&s->hk_next_us, UINT64_MAX);
    pthread_mutex_unlock(&s->hk_mu);
    uint64_t now = sip__now_us(), next = UINT64_MAX;
    size_t n = 0;
    /* Retired pools too: their queues still hold requests with deadlines. */
    sip__pool_t **pools = sip__registry_snapshot(&s->eng, 0, &n);
    if (!pools && sip__registry_pool_count(&s->eng)) next = now + 10000; /* out of memory: look again soon */
    for (size_t i = 0; i < n; i++) {
      uint64_t d = sip__pool_expire(pools[i], now);
      if (d && d < next) next = d;
    }
    /* A drain past its timeout answers what is still queued UNAVAILABLE;
     * it looks again while the drain lasts (a retried pipeline stage, a
     * delayed request may still arrive in a queue). */
    uint64_t drain_at = atomic_load(&s->drain_deadline_us);
    if (drain_at && now >= drain_at) {
      for (size_t i = 0; i < n; i++) sip__pool_shed(pools[i]);
      next = now + 50000;
    } else if (drain_at && drain_at < next) {
      next = drain_at;
    }
    sip__registry_release(pools, n);
    pthread_mutex_lock(&s->hk_mu);
    if (atomic_load(&s->hk_next_us) < next) next = atomic_load(&s->hk_next_us);
    atomic_store(&s->hk_next_us, next);
    if (s->hk_stop) break;
    if (s->replays) continue;
    hk_wait(s, next);
  }
  pthread_mutex_unlock(&s->hk_mu);
  return NULL;
}

/* ---- lifecycle ---- */

/* Pools load on the loader thread (src/server/repository/repository.c), which then
 * serves repository loads and unloads. */

/* Starts the exporter when the config has tracing.otlp_endpoint and sets
 * the global trace settings from tracing.sample_ratio (docs/tracing.md);
 * /v2/trace/setting changes them later. Without memory tracing stays off. */
static void start_tracing(sip_server_t *s) {
  const sip__tracing_config_t *tc = &s->cfg->tracing;
  if (!(s->tracer = sip__tracer_new(tc))) return;
  double ratio = tc->sample_ratio_set ? tc->sample_ratio : 1.0;
  char rate[32];
  snprintf(rate, sizeof rate, "%lld", ratio > 0 ? (long long)(1.0 / ratio + 0.5) : 1000LL);
  json_t *b = json_pack("{s:[s],s:s}", "trace_level", ratio > 0 ? "TIMESTAMPS" : "OFF",
                        "trace_rate", rate),
         *doc = NULL;
  sip_error_t *e = b ? sip__trace_apply(s->trace, NULL, b, &doc) : NULL;
  sip_error_free(e);
  json_decref(b);
  json_decref(doc);
}

sip_error_t *sip__server_create(const sip_server_options_t *o, sip_server_t **out) {
  *out = NULL;
  sip__config_t *cfg = NULL;
  sip_error_t *e;
  if (o->config_file)
    e = sip__config_load_file(o->config_file, sip__backend_catalog(), &cfg);
  else if (o->config_text)
    e = sip__config_load_string(o->config_text, strlen(o->config_text), "<string>", o->base_dir, sip__backend_catalog(),
                                &cfg);
  else
    e = sip_error_new(SIP_INVALID_ARGUMENT, "no config: set a file or a string in the options");
  if (!e && (e = sip__server_options_apply(o, cfg))) sip__config_free(cfg);
  if (e) return e;
  sip__log_set_level((int)cfg->log_level);
  sip__log_set_format(cfg->log_format);

  sip_server_t *s = sip__calloc(1, sizeof *s);
  if (!s) {
    sip__config_free(cfg);
    return SIP__OOM();
  }
  s->cfg = cfg;
  atomic_store(&s->pools_cfg, cfg);
  atomic_store(&s->drain_timeout_ms, cfg->drain_timeout_ms);
  atomic_store(&s->drain_delay_ms, cfg->drain_delay_ms);
  if (o->config_file && !(s->config_path = sip__strdup(o->config_file))) {
    sip__config_free(cfg);
    sip__free(s);
    return SIP__OOM();
  }
  s->rejections = sip__rejections_new(); /* NULL (out of memory): rejections are not counted */
  if (!(s->shm = sip__shm_set_new(0)) || !(s->trace = sip__trace_set_new())) {
    sip__rejections_free(s->rejections);
    sip__shm_set_free(s->shm);
    sip__config_free(cfg);
    sip__free(s->config_path);
    sip__free(s);
    return SIP__OOM();
  }
  start_tracing(s);
  s->started_us = sip__now_us();
  s->memory_budget = sip__server_memory_budget(cfg);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  sip__engine_init(&s->eng, &cfg->engine,
                   cfg->execution_slots ? cfg->execution_slots : cores > 0 ? (int)cores : 1,
                   note_deadline, s);
  s->eng.want_load = sip__residency_want_load; /* residency.c: on-demand pools */
  s->eng.want_load_ctx = s;
  pthread_mutex_init(&s->hk_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->hk_cv, &ca);
  pthread_cond_init(&s->idem_cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_store(&s->hk_next_us, UINT64_MAX);
  if (!(s->rcache = sip__rcache_new(&cfg->response_cache, &e))) {
    sip_server_free(s);
    return e;
  }
  /* Answers kept before a restart are kept again before anything runs. */
  if (cfg->state_dir &&
      (e = sip__journal_open(cfg->state_dir, journal_restore, s, &s->journal))) {
    sip_server_free(s);
    return e;
  }
  if (s->journal) {
    atomic_store(&s->journal_floor, sip__journal_size(s->journal));
    for (struct sip__idem_slot *sl = s->idem; sl; sl = sl->next)
      sip__idem_set_sink(sl->cache, journal_sink, sl);
  }
  /* The config file's pools are listed (LOADING) from the start, so their
   * requests hear "loading" rather than "unknown" until they are READY. */
  for (size_t i = 0; i < cfg->n_pools; i++) {
    sip__pool_t *p = sip__pool_new(&s->eng, &cfg->pools[i], NULL, NULL);
    if (p && sip__residency_on_demand(s, &cfg->pools[i], 0)) sip__pool_set_on_demand(p, 0);
    if (!p || (e = sip__registry_swap(&s->eng, &p, 1, NULL, 0))) {
      sip__pool_destroy(p);
      sip_server_free(s);
      return e ? e : SIP__OOM();
    }
  }
  /* Pipelines are models in the registry from the start (LOADING until
   * the loader builds them once the pools are READY). */
  if (!(s->pipelines = sip__pipelines_new(&s->eng, cfg))) {
    sip_server_free(s);
    return SIP__OOM();
  }
  if (pthread_create(&s->hk, NULL, hk_main, s) != 0) {
    sip_server_free(s);
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start the housekeeping thread");
  }
  s->hk_started = 1;
  if ((e = sip__autoscaler_start(s)) || (e = sip__sla_monitor_start(s))) {
    sip_server_free(s);
    return e;
  }
  *out = s;
  return NULL;
}

/* The directories answers must not show (core/redact.h): the model
 * repository, the config file's, the state directory, each pool's model
 * directory and the working directory. */
static void register_private_dirs(const sip__config_t *cfg) {
  char real[PATH_MAX], cwd[PATH_MAX];
  if (cfg->path && realpath(cfg->path, real)) sip__redact_add_parent(real);
  if (getcwd(cwd, sizeof cwd)) sip__redact_add_dir(cwd);
  sip__redact_add_dir(cfg->model_repository && realpath(cfg->model_repository, real)
                          ? real : cfg->model_repository);
  sip__redact_add_dir(cfg->state_dir);
  for (size_t i = 0; i < cfg->n_pools; i++) {
    const char *mp = cfg->pools[i].model_path;
    if (mp && realpath(mp, real)) sip__redact_add_parent(real);
    else sip__redact_add_parent(mp);
  }
}

sip_error_t *sip__server_start(sip_server_t *s, const sip_server_options_t *o) {
  register_private_dirs(s->cfg);
  /* The loader (src/server/repository/repository.c) loads the pools, then serves
   * repository loads and unloads. */
  sip_error_t *e = sip__repo_start(s, o->wait_for_load);
  s->serving = !e;
  return e;
}

int sip__server_options_listen(const sip_server_options_t *o) { return o->listen; }

const sip__config_t *sip__server_config(const sip_server_t *s) { return s->cfg; }

sip__shm_set_t *sip__server_shm(sip_server_t *s) { return s->shm; }
sip__trace_set_t *sip__server_trace(sip_server_t *s) { return s->trace; }

sip_error_t *sip_server_add_frontend(sip_server_t *s, const sip_frontend_vtable_t *vt,
                                     const void *options) {
  if (!vt || !vt->start || !vt->stop)
    return sip_error_new(SIP_INVALID_ARGUMENT, "a front-end needs start and stop");
  if (s->n_frontends == SIP__MAX_FRONTENDS)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "%d front-ends are attached; at most %d are "
                         "supported", SIP__MAX_FRONTENDS, SIP__MAX_FRONTENDS);
  void *state = NULL;
  sip_error_t *e = vt->start(s, options, &state);
  if (e) return e;
  s->frontends[s->n_frontends].vt = vt;
  s->frontends[s->n_frontends].state = state;
  s->n_frontends++;
  return NULL;
}

static void stop_admitting(sip__pool_t *p, void *ctx) {
  (void)ctx;
  sip__pool_stop_admitting(p);
}

static void cancel_queued(sip__pool_t *p, void *t) { sip__pool_cancel(p, t); }

void sip_server_drain(sip_server_t *s, int timeout_ms) {
  if (!s || atomic_exchange(&s->drain_called, 1)) return;
  /* A server that never started serving (a failed start) drains silently. */
  int serving = s->serving;
  /* server.drain_delay_ms: unready but serving, while load balancers'
   * health checks see the 503 and stop sending here. */
  uint32_t delay = (uint32_t)atomic_load(&s->drain_delay_ms);
  if (serving && delay) {
    atomic_store(&s->leaving, 1); /* readiness false */
    sip__log(SIP__LOG_INFO, "unready before the drain", "drain_delay_ms=%u", delay);
    struct timespec left = {(time_t)(delay / 1000), (long)(delay % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
  }
  atomic_store(&s->draining, 1); /* readiness false, new requests refused */
  atomic_store(&s->leaving, 1);
  uint32_t ms = (uint32_t)(timeout_ms < 0 ? atomic_load(&s->drain_timeout_ms) : timeout_ms);
  uint64_t t0 = sip__now_us();
  if (serving) sip__log(SIP__LOG_INFO, "draining", "timeout_ms=%u", ms);
  /* The housekeeping thread answers what is still queued at the deadline. */
  pthread_mutex_lock(&s->hk_mu);
  atomic_store(&s->drain_deadline_us, t0 + (uint64_t)ms * 1000 + (ms ? 0 : 1));
  pthread_cond_signal(&s->hk_cv);
  pthread_mutex_unlock(&s->hk_mu);
  /* The loader finishes the load in progress; queued ones are refused. */
  sip__repo_stop(s);
  /* New requests are refused at the door (infer); pipeline requests in
   * flight still submit their next stages, so the pools keep admitting
   * until those are answered (or the timeout passes). */
  sip__pipelines_wait_runs(s->pipelines, t0 + (uint64_t)ms * 1000);
  /* Drain: sessions finish what is queued; new requests get UNAVAILABLE;
   * transports stay up until then so every answer can be delivered. */
  if (s->eng.registry_inited) {
    /* Refuse new work everywhere first, so no pool keeps admitting while
     * another drains. Nothing else changes the registry any more. */
    sip__registry_each_pool(&s->eng, stop_admitting, NULL);
    for (;;) {
      sip__pool_t *p = sip__registry_first_pool(&s->eng);
      if (!p) break;
      sip__registry_drain_free(&s->eng, p);
    }
  }
  /* Kept answers already queued are delivered while front-ends are up. */
  pthread_mutex_lock(&s->hk_mu);
  while (s->replaying && s->hk_started) pthread_cond_wait(&s->idem_cv, &s->hk_mu);
  pthread_mutex_unlock(&s->hk_mu);
  if (serving)
    sip__log(SIP__LOG_INFO, "drained", "ms=%.1f answered_unavailable=%llu",
           (double)(sip__now_us() - t0) / 1000.0,
           (unsigned long long)atomic_load(&s->eng.drain_shed));
}

void sip_server_free(sip_server_t *s) {
  if (!s) return;
  /* No windows close while pools drain: a drain refuses requests on purpose. */
  sip__sla_monitor_stop(s);
  sip_server_drain(s, -1);
  sip__pipelines_quiesce(s->pipelines); /* queued transform stages answer while transports are up */
  /* Every request a front-end submitted has completed: close them, last first. */
  while (s->n_frontends) {
    s->n_frontends--;
    s->frontends[s->n_frontends].vt->stop(s->frontends[s->n_frontends].state);
  }
  sip__event_streams_stop(s);
  sip__pipelines_free(s->pipelines); /* no run is left once pools drained and workers quiesced */
  sip__autoscaler_stop(s); /* after the drain: a pool with no session gets one for its queue */
  if (s->hk_started) {
    pthread_mutex_lock(&s->hk_mu);
    s->hk_stop = 1;
    pthread_cond_signal(&s->hk_cv);
    pthread_mutex_unlock(&s->hk_mu);
    pthread_join(s->hk, NULL);
  }
  sip__repo_free(s);
  sip__shm_set_free(s->shm); /* no front-end is left to view a region */
  sip__trace_set_free(s->trace);
  sip__rejections_free(s->rejections);
  sip__engine_destroy(&s->eng);
  sip__rcache_free(s->rcache); /* after the engine: no request runs through it */
  sip__tracer_free(s->tracer); /* after the engine: every trace has finished */
  pthread_mutex_destroy(&s->hk_mu);
  pthread_cond_destroy(&s->hk_cv);
  pthread_cond_destroy(&s->idem_cv);
  sip__journal_close(s->journal);
  while (s->idem) {
    struct sip__idem_slot *sl = s->idem;
    s->idem = sl->next;
    sip__idem_free(sl->cache);
    sip__free(sl->name);
    sip__free(sl);
  }
  sip__config_free(s->cfg);
  for (size_t i = 0; i < s->n_reloaded; i++) sip__config_free(s->reloaded[i]);
  sip__free(s->reloaded);
  sip__free(s->config_path);
  sip__free(s);
}

uint64_t sip_server_generation(sip_server_t *s) { return atomic_load(&s->eng.reg_gen); }

int sip_server_draining(sip_server_t *s) { return atomic_load(&s->draining); }

int sip__server_leaving(sip_server_t *s) { return atomic_load(&s->leaving); }

size_t sip_server_endpoint_count(sip_server_t *s) {
  size_t n = 0;
  for (size_t f = 0; f < s->n_frontends; f++)
    if (s->frontends[f].vt->address_count)
      n += s->frontends[f].vt->address_count(s->frontends[f].state);
  return n;
}

/* Every front-end's addresses, in the order they were attached (the native
 * endpoints, then "http://host:port"). */
const char *sip_server_endpoint(sip_server_t *s, size_t i) {
  for (size_t f = 0; f < s->n_frontends; f++) {
    const sip_frontend_vtable_t *vt = s->frontends[f].vt;
    size_t n = vt->address_count ? vt->address_count(s->frontends[f].state) : 0;
    if (i < n) return vt->address(s->frontends[f].state, i);
    i -= n;
  }
  return NULL;
}

/* "model:version" in the pool name names a version (':' is not allowed in
 * pool names, so the split is unambiguous). */
static sip_error_t *split_version(sip_request_t *r) {
  char *colon = strchr(r->pool, ':');
  if (!colon) return NULL;
  if (r->version || !colon[1] || colon == r->pool)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "pool name '%s': expected POOL or MODEL:VERSION (and no other version)",
                         r->pool);
  char *v = sip__strdup(colon + 1);
  if (!v) return SIP__OOM();
  *colon = '\0';
  r->version = v;
  return NULL;
}

/* The model (pool or pipeline) a request goes to, with a reference for it;
 * NULL and the reason otherwise. "MODEL:VERSION" is split first (a
 * pipeline refuses the version itself). */
static sip__model_t *find_model(sip_server_t *s, sip_request_t *r, sip_error_t **err) {
  if ((*err = split_version(r))) return NULL;
  sip__model_t *m = sip__registry_find_model(&s->eng, r->pool, r->version, err);
  if (m) return m;
  /* Unknown to the registry: the repository may know why (loading,
   * unloaded, failed); a draining server has unlisted its pools. */
  sip_error_t *why = atomic_load(&s->draining)
                         ? sip_error_new(SIP_UNAVAILABLE, "server is shutting down")
                     : r->version && sip__registry_has(&s->eng, r->pool)
                         ? NULL
                         : sip__repo_unavailable(s, r->pool);
  if (why) {
    sip_error_free(*err);
    *err = why;
  }
  return NULL;
}

/* A lookup, then the model's submit (plain, or split into chunks). */
static sip_error_t *infer(sip_server_t *s, sip_request_t *r, int batch, int max_batch_size,
                          int padding, sip_infer_done_fn done, void *user) {
  if (!r) return sip_error_new(SIP_INVALID_ARGUMENT, "request is NULL");
  if (atomic_load(&s->draining)) {
    sip__log_failure("pool=%s code=UNAVAILABLE reason=draining", r->pool);
    sip_request_free(r);
    return sip_error_new(SIP_UNAVAILABLE, "server is shutting down: it accepts no new requests");
  }
  sip_error_t *e = sip__request_check_parameters(r);
  sip__model_t *m = e ? NULL : find_model(s, r, &e);
  if (!m) {
    sip__log_failure("pool=%s version=%s code=%s", r->pool, r->version ? r->version : "-",
                     sip_code_name(sip_error_code(e)));
    sip_request_free(r);
    return e;
  }
  r->done = done;
  r->user = user;
  if (s->tracer) sip__tracer_sample(s->tracer, s->trace, r);
  /* A keyed request runs at most once per model (docs/idempotency.md). */
  const sip__pool_t *mp = sip__pool_of(m);
  const sip__pool_config_t *pc = mp ? sip__pool_config(mp) : NULL;
  const char *key = r->idem_key ? r->idem_key : pc && pc->idem_enabled ? r->client_id : NULL;
  sip__idem_t *cache = key ? idem_cache(s, r->pool) : NULL;
  char *k = cache ? sip__asprintf("%s\n%s", r->version ? r->version : "", key) : NULL;
  sip__idem_entry_t *entry = NULL;
  if (k) {
    sip__idem_limits_t lim = {300 * UINT64_C(1000000), 10000, 64u << 20};
    if (pc)
      lim = (sip__idem_limits_t){(uint64_t)pc->idem_ttl_s * 1000000, (size_t)pc->idem_max_entries,
                                 (size_t)pc->idem_max_bytes};
    sip_response_t *replay = NULL;
    sip__idem_outcome_t o = sip__idem_begin(cache, &lim, k, r->n_dests == 0, r, &entry, &replay);
    sip__free(k);
    if (o != SIP__IDEM_RUN) {
      if (o == SIP__IDEM_REPLAY) {
        sip__server_queue_replay(s, r->done, r->user, replay);
        sip_request_free(r);
      }
      m->vt->unref(m);
      return NULL;
    }
  }
  /* An identical earlier request's answer (docs/response_cache.md). */
  sip_response_t *hit = NULL;
  sip__rcache_run_t *run = NULL;
  if (sip__rcache_begin(s->rcache, m, r, &hit, &run) == SIP__RCACHE_HIT) {
    sip__server_queue_replay(s, r->done, r->user, hit);
    sip_request_free(r);
    m->vt->unref(m);
    return NULL;
  }
  sip_error_t *err = batch && m->vt->submit_batch ? m->vt->submit_batch(m, r, max_batch_size, padding)
                                                  : m->vt->submit(m, r);
  if (err) sip__rcache_abort(run);
  if (err && entry) sip__idem_abort(cache, entry, sip_error_code(err), sip_error_message(err));
  return err;
}

sip_error_t *sip_server_infer_async(sip_server_t *s, sip_request_t *r, sip_infer_done_fn done,
                                    void *user) {
  return infer(s, r, 0, 0, 0, done, user);
}

sip_error_t *sip_server_infer_batch(sip_server_t *s, sip_request_t *r, int max_batch_size,
                                    int padding, sip_infer_done_fn done, void *user) {
  return infer(s, r, 1, max_batch_size, padding, done, user);
}

void sip_server_cancel(sip_server_t *s, sip_cancel_token_t *t) {
  if (!t) return;
  atomic_store(&t->cancelled, 1);
  /* Retired pools too: requests admitted to them are still queued there. */
  size_t n = 0;
  sip__pool_t **pools = sip__registry_snapshot(&s->eng, 0, &n);
  if (!pools) { /* out of memory: under the lock (a callback's submit nests a reader) */
    sip__registry_each_pool(&s->eng, cancel_queued, t);
    return;
  }
  for (size_t i = 0; i < n; i++) sip__pool_cancel(pools[i], t);
  sip__registry_release(pools, n);
}

typedef struct sync_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sip_response_t *resp;
  int done;
} sync_wait_t;

static void sync_done(sip_response_t *resp, void *user) {
  sync_wait_t *w = user;
  pthread_mutex_lock(&w->mu);
  w->resp = resp;
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

sip_error_t *sip_server_infer(sip_server_t *s, sip_request_t *r, sip_response_t **out) {
  *out = NULL;
  sync_wait_t w = {.done = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  sip_error_t *e = sip_server_infer_async(s, r, sync_done, &w);
  if (!e) {
    pthread_mutex_lock(&w.mu);
    while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    *out = w.resp;
    if (!w.resp) e = SIP__OOM();
  }
  pthread_mutex_destroy(&w.mu);
  pthread_cond_destroy(&w.cv);
  return e;
}

/* jansson allocates with malloc, as sip__malloc does. */
void sip_free(void *p) { free(p); }
