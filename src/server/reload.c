/* sip — reloading the config file's pools while serving (SIGHUP in sipd,
 * sip_server_reload_config), on the loader thread.
 *
 * The file is read again and its session_pools compared with those
 * serving: a pool whose settings are unchanged keeps running untouched (the
 * same sessions, nothing reloaded); a changed pool is loaded beside the old
 * one, swapped in by name, and the old one drained and freed, as a
 * repository reload does (src/server/repository/repository_load.c); a removed pool is
 * drained and freed; an added pool is loaded. All of it happens in one
 * registry swap, or not at all: a config that does not parse, a pool that
 * fails to load, a new pool a pipeline could not run on, a change to
 * pipeline_sessions (pipelines are built at start) or a name a repository
 * model uses refuse the reload with the reason, and everything keeps
 * serving as before (a pool that failed to load at start and is unchanged
 * is tried again, and stays FAILED without refusing the rest when it fails
 * again). Of the server section, log_level, drain_timeout_ms and
 * drain_delay_ms apply at once; the other settings are read at start only (a change is
 * logged). */
#include <malloc.h>
#include <string.h>

#include "backend/backends.h"
#include "core/core.h"
#include "pipeline/pipeline.h"
#include "server/repository/repository_impl.h"
#include "session/residency.h"

static int same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

/* 1 when a server setting read only at start differs. */
static int start_settings_changed(const sip__config_t *a, const sip__config_t *b) {
  if (a->n_endpoints != b->n_endpoints) return 1;
  for (size_t i = 0; i < a->n_endpoints; i++)
    if (strcmp(a->endpoints[i], b->endpoints[i])) return 1;
  return !same_str(a->http, b->http) || !same_str(a->model_repository, b->model_repository) ||
         !same_str(a->state_dir, b->state_dir) || a->model_control != b->model_control ||
         a->execution_slots != b->execution_slots || a->max_frame_bytes != b->max_frame_bytes ||
         a->max_unsent_bytes != b->max_unsent_bytes || a->max_connections != b->max_connections ||
         a->frame_timeout_ms != b->frame_timeout_ms || a->max_receive_bytes != b->max_receive_bytes ||
         a->max_connection_receive_bytes != b->max_connection_receive_bytes ||
         a->http_max_connections != b->http_max_connections ||
         a->http_max_connections_per_ip != b->http_max_connections_per_ip ||
         a->http_header_timeout_ms != b->http_header_timeout_ms ||
         a->http_max_body_bytes != b->http_max_body_bytes || a->http_threads != b->http_threads ||
         memcmp(&a->engine, &b->engine, sizeof a->engine) != 0 ||
         !same_str(a->grpc, b->grpc) || !sip__config_security_same(a, b);
}

/* Why `name` (a session_pools entry of the new config) cannot be a config
 * pool: a loaded repository model has it. NULL when it can (a repository
 * model of that name that is not loaded is refused from then on). */
static sip_error_t *repo_name_taken(sip__pool_t **live, size_t n, const char *name) {
  int taken = 0;
  for (size_t i = 0; i < n && !taken; i++)
    taken = sip__pool_from_repo(live[i]) && !strcmp(sip__pool_name(live[i]), name);
  return taken ? sip_error_new(SIP_FAILED_PRECONDITION,
                               "session_pools entry '%s' has the name of a repository model; "
                               "unload that model first or name the pool otherwise", name)
               : NULL;
}

/* Among the pools that would serve after the reload (live, less retire,
 * plus add): a pool whose failover.fallback_pool takes other inputs or
 * gives other outputs refuses the reload (only pairs with a new pool on
 * either side are checked: the others were checked when they loaded). */
static sip_error_t *fallbacks_fit(sip__pool_t **live, size_t n_live, sip__pool_t **add,
                                  size_t n_add, sip__pool_t **retire, size_t n_retire) {
  size_t n = 0;
  sip__pool_t **after = sip__calloc(n_live + n_add + 1, sizeof *after);
  if (!after) return SIP__OOM();
  for (size_t i = 0; i < n_live; i++) {
    int gone = 0;
    for (size_t k = 0; k < n_retire && !gone; k++) gone = retire[k] == live[i];
    if (gone) continue;
    sip__pool_info_t in;
    sip__pool_info(live[i], &in);
    if (!in.retired) after[n++] = live[i];
  }
  size_t first_new = n;
  for (size_t i = 0; i < n_add; i++) after[n++] = add[i];
  sip_error_t *e = NULL;
  for (size_t i = 0; i < n && !e; i++) {
    const char *fb = sip__pool_config(after[i])->fallback_pool;
    if (!fb || sip__pool_state(after[i]) != SIP__POOL_READY) continue;
    for (size_t k = 0; k < n && !e; k++) {
      sip__pool_t *f = after[k];
      if ((i < first_new && k < first_new) || strcmp(sip__pool_name(f), fb) ||
          sip__pool_state(f) != SIP__POOL_READY || sip__pool_fallback_fits(after[i], f))
        continue;
      e = sip_error_new(SIP_FAILED_PRECONDITION,
                        "failover.fallback_pool '%s' of pool '%s' would take other inputs or "
                        "give other outputs than it; expected a pool of the same model "
                        "signature",
                        fb, sip__pool_name(after[i]));
    }
  }
  sip__free(after);
  return e;
}

static sip_error_t *reload(sip_server_t *s, sip__config_t *ncfg, size_t *counts) {
  size_t n_live = 0, n_add = 0, n_retire = 0;
  sip__pool_t **live = sip__registry_snapshot(&s->eng, 1, &n_live);
  sip__pool_t **add = sip__calloc(ncfg->n_pools + 1, sizeof *add);
  sip__pool_t **retire = sip__calloc(n_live + 1, sizeof *retire);
  sip_error_t *e = !add || !retire || (!live && sip__registry_pool_count(&s->eng)) ? SIP__OOM() : NULL;
  if (!e && !sip__config_pipelines_same(s->cfg, ncfg))
    e = sip_error_new(SIP_FAILED_PRECONDITION,
                      "pipeline_sessions changed; pipelines are built at start: restart sipd to "
                      "apply them");
  /* Each pool of the new config: the running one when nothing changed,
   * else a new one. An unchanged pool that failed to load is tried again
   * (its model file may have been fixed); if it fails again it stays as it
   * was, without refusing the rest. */
  for (size_t i = 0; !e && i < ncfg->n_pools; i++) {
    const sip__pool_config_t *pc = &ncfg->pools[i];
    sip__pool_t *old = NULL;
    for (size_t j = 0; j < n_live && !old; j++)
      if (!sip__pool_from_repo(live[j]) && !strcmp(sip__pool_name(live[j]), pc->name))
        old = live[j];
    int retry = 0;
    if (old && sip__config_pool_same(sip__pool_config(old), pc)) {
      retry = sip__pool_state(old) == SIP__POOL_FAILED;
      if (!retry) {
        counts[3]++;
        continue;
      }
    }
    if (!old && (e = repo_name_taken(live, n_live, pc->name))) break;
    sip__pool_t *p = sip__pool_new(&s->eng, pc, NULL, NULL);
    if (!p) {
      e = SIP__OOM();
      break;
    }
    int lazy = sip__residency_on_demand(s, pc, 0);
    if (lazy)
      sip__pool_set_on_demand(p, 0); /* loads at its first request */
    else
      sip__pool_load(p);
    sip__pool_info_t in;
    sip__pool_info(p, &in);
    if (!lazy && in.state != SIP__POOL_READY) {
      if (!retry)
        e = sip_error_new(in.load_error ? sip_error_code(in.load_error) : SIP_INTERNAL,
                          "pool '%s' failed to load: %s", pc->name,
                          in.load_error ? sip_error_message(in.load_error) : "unknown reason");
      else
        counts[3]++; /* still failing: the FAILED pool stays, with its reason */
      sip__pool_destroy(p);
      if (e) break;
      continue;
    }
    add[n_add++] = p;
    sip__model_io_t io;
    sip__model_t *pm = sip__pool_model(p);
    char *why = pm->vt->describe_io(pm, &io)
                    ? sip__pipelines_check_pool(s->pipelines, pc->name, &io)
                    : NULL;
    if (why) e = sip_error_new(SIP_FAILED_PRECONDITION, "pool '%s' would not fit %s", pc->name, why);
    sip__free(why);
    if (old) {
      retire[n_retire++] = old;
      counts[1]++;
    } else {
      counts[0]++;
    }
  }
  /* Config pools the new config no longer lists. */
  for (size_t j = 0; !e && j < n_live; j++) {
    if (sip__pool_from_repo(live[j])) continue;
    int listed = 0;
    for (size_t i = 0; i < ncfg->n_pools && !listed; i++)
      listed = !strcmp(ncfg->pools[i].name, sip__pool_name(live[j]));
    if (!listed) {
      retire[n_retire++] = live[j];
      counts[2]++;
    }
  }
  if (!e) e = fallbacks_fit(live, n_live, add, n_add, retire, n_retire);
  if (!e && (n_add || n_retire)) e = sip__registry_swap(&s->eng, add, n_add, retire, n_retire);
  if (e) { /* nothing changes: the pools loaded for nothing go */
    for (size_t i = 0; i < n_add; i++) {
      sip__pool_shutdown(add[i]);
      sip__pool_destroy(add[i]);
    }
    n_retire = 0;
  }
  /* Our references go first: a drain waits for every other one. */
  sip__registry_release(live, n_live);
  for (size_t i = 0; i < n_retire; i++) {
    sip__log(SIP__LOG_INFO, "retiring pool", "pool=%s", sip__pool_name(retire[i]));
    sip__repo_forget_pool(s, sip__pool_name(retire[i])); /* serves as its new config says */
    sip__registry_drain_free(&s->eng, retire[i]);
  }
  if (n_retire) malloc_trim(0); /* as a repository reload does: freed pages go back */
  sip__free(add);
  sip__free(retire);
  return e;
}

sip_error_t *sip__server_reload(sip_server_t *s) {
  if (!s->config_path)
    return sip_error_new(SIP_FAILED_PRECONDITION, "this server was started from a config "
                         "string; there is no config file to reload");
  uint64_t t0 = sip__now_us();
  sip__config_t *ncfg = NULL;
  sip_error_t *e = sip__config_load_file(s->config_path, sip__backend_catalog(), &ncfg);
  /* Pools of the new config point into it: it stays until the server goes. */
  sip__config_t **v = e ? NULL : sip__reallocarray(s->reloaded, s->n_reloaded + 1, sizeof *v);
  if (!e && !v) e = SIP__OOM();
  size_t counts[4] = {0}; /* added, changed, removed, unchanged */
  if (!e) {
    s->reloaded = v;
    e = reload(s, ncfg, counts);
  }
  if (e) {
    sip__config_free(ncfg);
    sip__log(SIP__LOG_ERROR, "config reload refused; everything keeps serving as before",
             "file=%s reason=\"%s\"", s->config_path, sip_error_message(e));
    return e;
  }
  s->reloaded[s->n_reloaded++] = ncfg;
  if (start_settings_changed(s->cfg, ncfg))
    sip__log(SIP__LOG_WARN, "server settings changed; they are read at start only",
             "file=%s applied=log_level,drain_timeout_ms,drain_delay_ms", s->config_path);
  sip__log_set_level((int)ncfg->log_level);
  sip__log_set_format(ncfg->log_format);
  atomic_store(&s->drain_timeout_ms, ncfg->drain_timeout_ms);
  atomic_store(&s->drain_delay_ms, ncfg->drain_delay_ms);
  atomic_store(&s->pools_cfg, ncfg);
  sip__log(SIP__LOG_INFO, "config reloaded",
           "file=%s pools_added=%zu pools_changed=%zu pools_removed=%zu pools_unchanged=%zu "
           "ms=%.1f",
           s->config_path, counts[0], counts[1], counts[2], counts[3],
           (double)(sip__now_us() - t0) / 1000.0);
  return NULL;
}
