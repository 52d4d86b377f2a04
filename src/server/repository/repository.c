/* sip — the model repository (server.model_repository) and the loader.
 *
 * Layout: <repository>/<model>/<version>/<model file> (a backend's default
 * file name, include/sip/backend.h), an optional
 * <model>/config.yaml (the pool's settings and its version_policy) and an
 * optional <model>/current link naming the default version. Every served
 * version is a pool of its own in the registry (src/session/registry.c),
 * named by the model, told apart by version.
 *
 * One thread, the loader, does every load: first the config file's pools
 * and (unless model_control is explicit) every repository model, then the
 * load and unload requests queued by sip_server_load_model_async & co, one
 * at a time (repository_load.c loads and unloads a model;
 * repository_versions.c reads its directory). This file keeps the loader
 * and its queue, a record per model of what its last load did, and the
 * repository index. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "pipeline/pipeline.h"
#include "server/repository/repository_impl.h"
#include "server/state/state.h"
#include "session/observe/counters.h"

/* ---- records ------------------------------------------------------------ */

static const char *const rec_state_names[] = {"LOADING", "READY", "UNLOADING", "UNAVAILABLE",
                                              "UNAVAILABLE"};

static void failures_free(sip__failure_t *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    sip__free(f[i].version);
    sip__free(f[i].reason);
  }
  sip__free(f);
}

/* The record of `name`, created when missing (NULL on OOM). Caller holds mu. */
static sip__model_rec_t *rec_get(sip__repo_t *R, const char *name, int create) {
  for (sip__model_rec_t *m = R->models; m; m = m->next)
    if (!strcmp(m->name, name)) return m;
  if (!create) return NULL;
  sip__model_rec_t *m = sip__calloc(1, sizeof *m);
  if (!m || !(m->name = sip__strdup(name))) {
    sip__free(m);
    return NULL;
  }
  m->next = R->models;
  R->models = m;
  return m;
}

void sip__repo_rec_set_state(sip__repo_t *R, const char *name, int state) {
  pthread_mutex_lock(&R->mu);
  sip__model_rec_t *m = rec_get(R, name, 1);
  if (m) m->state = state;
  pthread_mutex_unlock(&R->mu);
}

/* Sets the outcome of a load: its state and failures (taken). */
void sip__repo_rec_finish(sip__repo_t *R, const char *name, int state, sip__failure_t *f, size_t n) {
  pthread_mutex_lock(&R->mu);
  sip__model_rec_t *m = rec_get(R, name, 1);
  if (m) {
    failures_free(m->failed, m->n_failed);
    m->state = state;
    m->failed = f;
    m->n_failed = n;
  } else {
    failures_free(f, n);
  }
  pthread_mutex_unlock(&R->mu);
}

void sip__repo_rec_drop(sip__repo_t *R, const char *name) {
  pthread_mutex_lock(&R->mu);
  for (sip__model_rec_t **pp = &R->models; *pp; pp = &(*pp)->next) {
    sip__model_rec_t *m = *pp;
    if (strcmp(m->name, name)) continue;
    *pp = m->next;
    failures_free(m->failed, m->n_failed);
    sip__free(m->name);
    sip__free(m);
    break;
  }
  pthread_mutex_unlock(&R->mu);
}

int sip__repo_rec_exists(sip__repo_t *R, const char *name) {
  pthread_mutex_lock(&R->mu);
  int found = rec_get(R, name, 0) != NULL;
  pthread_mutex_unlock(&R->mu);
  return found;
}

/* Records what could not be served: `e` (borrowed) for version `version`
 * (NULL: the model). -1 when out of memory. */
int sip__repo_add_failure(sip__failure_t **f, size_t *n, const char *version, const sip_error_t *e) {
  sip__failure_t *v = sip__reallocarray(*f, *n + 1, sizeof *v);
  if (!v) return -1;
  *f = v;
  v[*n].version = version ? sip__strdup(version) : NULL;
  v[*n].code = e ? sip_error_code(e) : SIP_INTERNAL;
  v[*n].reason = e ? sip__asprintf("%s: %s", sip_code_name(sip_error_code(e)), sip_error_message(e))
                   : sip__strdup("INTERNAL: failed to load");
  (*n)++;
  return 0;
}

/* ---- the loader thread ---------------------------------------------------- */

/* ---- the state checkpoint (server.state_dir) ------------------------------ */

/* 1 when the state file says what to do with `name`. */
static int restored(sip__repo_t *R, const char *name) {
  for (size_t i = 0; R->state && i < sip__state_model_count(R->state); i++)
    if (!strcmp(sip__state_model_at(R->state, i, NULL, NULL), name)) return 1;
  return 0;
}

/* Applies the state file's repository section at start: models it records
 * as loaded are loaded (with the model config their load carried), models
 * it records as unloaded stay unloaded. */
static void restore(sip_server_t *s) {
  sip__repo_t *R = s->repo;
  size_t n = R->state ? sip__state_model_count(R->state) : 0;
  for (size_t i = 0; i < n && !atomic_load(&s->draining); i++) {
    int loaded = 0;
    const char *config = NULL, *name = sip__state_model_at(R->state, i, &loaded, &config);
    sip_error_t *e = NULL;
    if (!loaded) {
      sip__repo_rec_finish(R, name, REC_UNLOADED, NULL, 0);
    } else {
      sip__model_override_t *ov = NULL;
      if (config) e = sip__model_override_parse(config, strlen(config), name, &ov);
      if (!e) e = sip__repo_load_model(s, name, ov);
      sip__model_override_free(ov);
    }
    sip__log(e ? SIP__LOG_ERROR : SIP__LOG_INFO, "state restored", "model=%s state=%s%s%s%s",
             name, loaded ? "loaded" : "unloaded", config ? " config=yes" : "",
             e ? " reason=\"" : "", e ? sip_error_message(e) : "");
    sip_error_free(e);
  }
}

/* Pool p's run-time settings as the checkpoint records them; 0 when they
 * are all its config's. */
static int pool_settings(sip__pool_t *p, sip__state_pool_t *c) {
  memset(c, 0, sizeof *c);
  sip__pool_info_t in;
  sip__pool_info(p, &in);
  c->pool_size = in.pool_size != in.cfg->pool_size ? in.pool_size : 0;
  c->max_memory_mb = in.max_memory_mb != in.cfg->max_memory_mb ? in.max_memory_mb : -1;
  c->max_compute_percent =
      in.max_compute_percent != in.cfg->max_compute_percent ? in.max_compute_percent : -1;
  int any = c->pool_size || c->max_memory_mb >= 0 || c->max_compute_percent >= 0;
  for (int i = 0; i < sip__pool_session_count(p) && i < 256; i++) {
    sip__session_counters_t sc;
    sip__pool_session_read(p, i, &sc);
    if (sc.drained) {
      c->drained[i / 64] |= UINT64_C(1) << (i % 64);
      any = 1;
    }
  }
  return any;
}

/* Records a load or unload that succeeded, and writes the file. A write
 * that fails is logged; serving goes on (the next change writes again). */
static void checkpoint(sip_server_t *s, const sip__repo_op_t *op) {
  sip__repo_t *R = s->repo;
  if (!R->state) return;
  /* A model loaded again serves as its config says, unless its files did
   * not change (the pool serving stays, with its run-time settings). */
  sip__state_pool_t c;
  sip_error_t *fe = NULL;
  sip__pool_t *p = op->unload ? NULL : sip__registry_find(&s->eng, op->name, NULL, &fe);
  int changed = p && pool_settings(p, &c);
  if (p) sip__pool_unref(p);
  sip_error_free(fe);
  pthread_mutex_lock(&R->state_mu);
  sip_error_t *e = sip__state_set_model(R->state, op->name, !op->unload, op->config_text);
  if (!e) e = sip__state_set_pool(R->state, op->name, changed ? &c : NULL);
  if (!e) e = sip__state_save(s->cfg->state_dir, R->state);
  pthread_mutex_unlock(&R->state_mu);
  if (e) {
    sip__log(SIP__LOG_ERROR, "state not saved", "model=%s reason=\"%s\"", op->name,
             sip_error_message(e));
    sip_error_free(e);
  }
}

static void save_pool(sip_server_t *s, const char *name, const sip__state_pool_t *c) {
  sip__repo_t *R = s->repo;
  if (!R || !R->state) return;
  pthread_mutex_lock(&R->state_mu);
  sip_error_t *e = sip__state_set_pool(R->state, name, c);
  if (!e) e = sip__state_save(s->cfg->state_dir, R->state);
  pthread_mutex_unlock(&R->state_mu);
  if (e) {
    sip__log(SIP__LOG_ERROR, "state not saved", "pool=%s reason=\"%s\"", name,
             sip_error_message(e));
    sip_error_free(e);
  }
}

void sip__repo_checkpoint_pool(sip_server_t *s, sip__pool_t *p) {
  sip__state_pool_t c;
  save_pool(s, sip__pool_name(p), pool_settings(p, &c) ? &c : NULL);
}

void sip__repo_forget_pool(sip_server_t *s, const char *name) { save_pool(s, name, NULL); }

/* Applies the checkpoint's pool settings at start, after the loads. */
static void restore_pools(sip_server_t *s) {
  sip__repo_t *R = s->repo;
  size_t n = R->state ? sip__state_pool_count(R->state) : 0;
  for (size_t i = 0; i < n; i++) {
    sip__state_pool_t c;
    const char *name = sip__state_pool_at(R->state, i, &c);
    sip_error_t *e = NULL;
    sip__pool_t *p = sip__registry_find(&s->eng, name, NULL, &e);
    if (p) e = sip__pool_update(p, c.pool_size, c.max_memory_mb, c.max_compute_percent);
    for (int k = 0; p && !e && k < 256; k++)
      if (c.drained[k / 64] >> (k % 64) & 1) e = sip__session_drain(p, k, 1);
    sip__log(e ? SIP__LOG_ERROR : SIP__LOG_INFO, "state restored",
             "pool=%s pool_size=%d max_memory_mb=%lld max_compute_percent=%d%s%s%s", name,
             c.pool_size, (long long)c.max_memory_mb, c.max_compute_percent,
             e ? " reason=\"" : "", e ? sip_error_message(e) : "", e ? "\"" : "");
    if (p) sip__pool_unref(p);
    sip_error_free(e);
  }
}

/* The config file's pools, then every repository model (unless explicit),
 * one at a time: loads compete for the same cores and memory bandwidth. */
static void initial_load(sip_server_t *s) {
  sip__repo_t *R = s->repo;
  /* Only this thread changes the registry while it loads. */
  size_t n_pools = 0;
  sip__pool_t **pools = sip__registry_snapshot(&s->eng, 0, &n_pools);
  for (size_t i = 0; i < n_pools; i++)
    if (sip__pool_state(pools[i]) == SIP__POOL_LOADING) sip__pool_load(pools[i]);
  for (size_t i = 0; i < n_pools; i++) sip__pool_check_fallback(pools[i], pools, n_pools);
  sip__registry_release(pools, n_pools);
  size_t n = 0;
  char **names = NULL;
  if (R->root && s->cfg->model_control == SIP__MODEL_CONTROL_STARTUP) {
    names = sip__repo_scan_models(R, &n);
    /* Known and loading from now on (requests hear "loading", not "unknown"). */
    for (size_t i = 0; i < n; i++)
      if (!sip__repo_config_name_taken(s, names[i]) && !restored(R, names[i]))
        sip__repo_rec_set_state(R, names[i], REC_LOADING);
    for (size_t i = 0; i < n && !atomic_load(&s->draining); i++) {
      if (restored(R, names[i])) continue; /* as the state file says, below */
      sip_error_t *e = sip__repo_load_model(s, names[i], NULL);
      sip_error_free(e); /* logged and recorded */
    }
  }
  sip__repo_free_names(names, n);
  restore(s);
  restore_pools(s);
  /* Pipelines hook (src/pipeline/): built once their pools have loaded. */
  sip__pipelines_build(s->pipelines);
  atomic_store(&s->loaded, 1);
  /* Counted with strict readiness on, whatever the setting: the line says
   * how many failed either way. */
  size_t nv = 0, failed = 0;
  sip__model_view_t *v = sip__server_models(s, &nv);
  for (size_t i = 0; i < nv; i++) failed += !strcmp(v[i].state, "FAILED");
  sip__server_models_free(v, nv);
  if (failed)
    sip__log(SIP__LOG_WARN, "pools loaded, some failed",
             "pools=%zu repository_models=%zu failed=%zu ready=%s strict_readiness=%s", n_pools,
             n, failed, s->cfg->strict_readiness ? "false" : "true",
             s->cfg->strict_readiness ? "true" : "false");
  else
    sip__log(SIP__LOG_INFO, "all pools loaded", "pools=%zu repository_models=%zu failed=0", n_pools,
             n);
}

SIP__FIFO_DEFINE(ops, sip__repo_op_queue_t, sip__repo_op_t)

static void op_free(sip__repo_op_t *op) {
  sip__model_override_free(op->config);
  sip__free(op->config_text);
  sip__free(op->name);
  sip__free(op->source);
  sip__free(op);
}

static void *loader_main(void *arg) {
  sip_server_t *s = arg;
  sip__repo_t *R = s->repo;
  if (!atomic_load(&s->loaded)) initial_load(s);
  pthread_mutex_lock(&R->mu);
  for (;;) {
    while (!R->ops.head && !R->stop) pthread_cond_wait(&R->cv, &R->mu);
    sip__repo_op_t *op = ops_pop(&R->ops);
    if (!op) break;
    int stopping = R->stop;
    pthread_mutex_unlock(&R->mu);
    sip_error_t *e = stopping ? sip_error_new(SIP_UNAVAILABLE, "server is shutting down")
                     : op->reload ? sip__server_reload(s)
                     : op->remove ? sip__repo_remove(s, op->name)
                     : op->residency ? sip__residency_load(s, op->name, op->source)
                     : op->source ? sip__repo_import(s, op->name, op->source)
                     : op->unload ? sip__repo_unload_model(s, op->name)
                                  : sip__repo_load_model(s, op->name, op->config);
    /* Imported models are their importer's to restore, not the checkpoint's. */
    if (!e && !op->reload && !op->remove && !op->source && !op->residency) checkpoint(s, op);
    op->done(e, op->user);
    op_free(op);
    pthread_mutex_lock(&R->mu);
  }
  pthread_mutex_unlock(&R->mu);
  return NULL;
}

sip_error_t *sip__repo_start(sip_server_t *s, int wait) {
  sip__repo_t *R = sip__calloc(1, sizeof *R);
  if (!R) return SIP__OOM();
  pthread_mutex_init(&R->mu, NULL);
  pthread_mutex_init(&R->state_mu, NULL);
  pthread_cond_init(&R->cv, NULL);
  s->repo = R;
  if (s->cfg->model_repository) {
    char real[PATH_MAX], eb[128];
    struct stat st;
    if (!realpath(s->cfg->model_repository, real) || stat(real, &st) != 0)
      return sip_error_new(SIP_NOT_FOUND, "server.model_repository %s: %s; expected a directory",
                           s->cfg->model_repository, strerror_r(errno, eb, sizeof eb));
    if (!S_ISDIR(st.st_mode))
      return sip_error_new(SIP_NOT_FOUND,
                           "server.model_repository %s is not a directory; expected a directory "
                           "of <model>/<version>/<model file>",
                           s->cfg->model_repository);
    if (!(R->root = sip__strdup(real))) return SIP__OOM();
    R->root_len = strlen(real);
  }
  if (s->cfg->state_dir) {
    sip_error_t *e = sip__state_open(s->cfg->state_dir, &R->state);
    if (e) return e;
  }
  if (wait) initial_load(s);
  if (pthread_create(&R->thread, NULL, loader_main, s) != 0)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start the loader thread");
  R->started = 1;
  return NULL;
}

void sip__repo_stop(sip_server_t *s) {
  sip__repo_t *R = s->repo;
  if (!R) return;
  pthread_mutex_lock(&R->mu);
  R->stop = 1; /* also refuses new requests (queue_op) */
  pthread_cond_signal(&R->cv);
  pthread_mutex_unlock(&R->mu);
  if (!R->started) return;
  pthread_join(R->thread, NULL);
  R->started = 0;
}

void sip__repo_free(sip_server_t *s) {
  sip__repo_t *R = s->repo;
  if (!R) return;
  for (sip__repo_op_t *op; (op = ops_pop(&R->ops));) { /* never started: nobody answered these */
    op->done(sip_error_new(SIP_UNAVAILABLE, "server is shutting down"), op->user);
    op_free(op);
  }
  sip__state_free(R->state);
  while (R->models) {
    sip__model_rec_t *m = R->models;
    R->models = m->next;
    failures_free(m->failed, m->n_failed);
    sip__free(m->name);
    sip__free(m);
  }
  sip__free(R->root);
  pthread_mutex_destroy(&R->mu);
  pthread_mutex_destroy(&R->state_mu);
  pthread_cond_destroy(&R->cv);
  sip__free(R);
  s->repo = NULL;
}

sip_error_t *sip__repo_unavailable(sip_server_t *s, const char *name) {
  sip__repo_t *R = s->repo;
  if (!R || !R->root) return NULL;
  sip_error_t *e = NULL;
  pthread_mutex_lock(&R->mu);
  sip__model_rec_t *m = rec_get(R, name, 0);
  if (m && m->state == REC_LOADING)
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' is loading", name);
  else if (m && m->state == REC_UNLOADING)
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' is being unloaded", name);
  else if (m && m->state == REC_FAILED && m->n_failed)
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' failed to load: %s", name, m->failed[0].reason);
  else if (m)
    e = sip_error_new(SIP_UNAVAILABLE,
                      "model '%s' is unloaded; load it (sip load %s, or POST "
                      "/v2/repository/models/%s/load)",
                      name, name, name);
  pthread_mutex_unlock(&R->mu);
  if (e) return e;
  sip_error_t *ne = sip__repo_check_name(name, strlen(name));
  if (ne) {
    sip_error_free(ne);
    return NULL;
  }
  char *dir = NULL;
  ne = sip__repo_model_dir(R, name, &dir);
  sip__free(dir);
  if (ne) {
    sip_error_free(ne);
    return NULL;
  }
  return sip_error_new(SIP_UNAVAILABLE,
                       "model '%s' is in the model repository but not loaded; load it (sip load "
                       "%s, or POST /v2/repository/models/%s/load)",
                       name, name, name);
}

/* ---- public API ------------------------------------------------------------ */

enum { OP_LOAD = SIP__REPO_OP_LOAD, OP_UNLOAD = SIP__REPO_OP_UNLOAD,
       OP_RELOAD = SIP__REPO_OP_RELOAD };

sip_error_t *sip__repo_queue_op(sip_server_t *s, const char *name, int kind, const char *config,
                                const char *source, sip_repo_done_fn done, void *user) {
  if (!name) return sip_error_new(SIP_INVALID_ARGUMENT, "model name is NULL");
  if (!done) return sip_error_new(SIP_INVALID_ARGUMENT, "completion callback is NULL");
  int unload = kind == OP_UNLOAD, remove_all = kind == SIP__REPO_OP_REMOVE && !name[0];
  sip_error_t *e = kind == OP_RELOAD || kind == SIP__REPO_OP_RESIDENCY ||
                           (remove_all && s->repo->root)
                       ? NULL
                       : sip__repo_check_request(s, name); /* "": no repository, or a bad name */
  if (e) return e;
  if (atomic_load(&s->draining))
    return sip_error_new(SIP_UNAVAILABLE, "server is shutting down");
  /* An unknown model is refused at once (the loader checks again); an
   * import brings its files, and a removal of an unknown one succeeds. */
  char *dir = NULL;
  if (kind == OP_LOAD ||
      (unload && !sip__registry_has(&s->eng, name) && !sip__repo_rec_exists(s->repo, name)))
    e = sip__repo_model_dir(s->repo, name, &dir);
  sip__free(dir);
  if (e) return e;
  sip__repo_op_t *op = sip__calloc(1, sizeof *op);
  if (!op || !(op->name = sip__strdup(name))) {
    sip__free(op);
    return SIP__OOM();
  }
  if (config && (e = sip__model_override_parse(config, strlen(config), name, &op->config))) {
    op_free(op);
    return e;
  }
  if (config && !(op->config_text = sip__strdup(config))) {
    op_free(op);
    return SIP__OOM();
  }
  if (source && !(op->source = sip__strdup(source))) {
    op_free(op);
    return SIP__OOM();
  }
  op->unload = unload;
  op->reload = kind == OP_RELOAD;
  op->remove = kind == SIP__REPO_OP_REMOVE;
  op->residency = kind == SIP__REPO_OP_RESIDENCY;
  op->done = done;
  op->user = user;
  sip__repo_t *R = s->repo;
  pthread_mutex_lock(&R->mu);
  if (R->stop) { /* the loader is gone: nobody would answer this one */
    pthread_mutex_unlock(&R->mu);
    op_free(op);
    return sip_error_new(SIP_UNAVAILABLE, "server is shutting down");
  }
  ops_push(&R->ops, op);
  pthread_cond_signal(&R->cv);
  pthread_mutex_unlock(&R->mu);
  return NULL;
}

sip_error_t *sip__repo_parameter_check(int load, const char *key, int typed,
                                       const char *bool_word, const char *text_word) {
  /* Pipelines are not repository models: an unload has no dependents, and
   * a pipeline running on the model refuses the unload either way. */
  if (!load && strcmp(key, "unload_dependents"))
    return sip_error_new(SIP_INVALID_ARGUMENT, "unknown unload parameter '%s'; expected "
                         "unload_dependents", key);
  if (!load)
    return typed ? NULL
                 : sip_error_new(SIP_INVALID_ARGUMENT, "unload_dependents is not %s; expected "
                                 "true or false", bool_word);
  if (!strncmp(key, "file:", 5))
    return sip_error_new(SIP_INVALID_ARGUMENT, "model files in a load request ('%s') are not "
                         "supported; the model loads from the server's repository", key);
  if (strcmp(key, "config"))
    return sip_error_new(SIP_INVALID_ARGUMENT, "unknown load parameter '%s'; expected config "
                         "(a Triton model config as JSON text in %s)", key, text_word);
  return typed ? NULL
               : sip_error_new(SIP_INVALID_ARGUMENT, "load parameter config is not %s; expected "
                               "a Triton model config as JSON text", text_word);
}

sip_error_t *sip_server_load_model_async(sip_server_t *s, const char *name, sip_repo_done_fn done,
                                         void *user) {
  return sip__repo_queue_op(s, name, OP_LOAD, NULL, NULL, done, user);
}

sip_error_t *sip_server_load_model_config_async(sip_server_t *s, const char *name,
                                                const char *config, sip_repo_done_fn done,
                                                void *user) {
  return sip__repo_queue_op(s, name, OP_LOAD, config, NULL, done, user);
}

sip_error_t *sip_server_unload_model_async(sip_server_t *s, const char *name,
                                           sip_repo_done_fn done, void *user) {
  return sip__repo_queue_op(s, name, OP_UNLOAD, NULL, NULL, done, user);
}

typedef struct op_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sip_error_t *err;
  int done;
} op_wait_t;

static void op_done(sip_error_t *e, void *user) {
  op_wait_t *w = user;
  pthread_mutex_lock(&w->mu);
  w->err = e;
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static sip_error_t *run_op(sip_server_t *s, const char *name, int kind, const char *config) {
  op_wait_t w = {.done = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  sip_error_t *e = sip__repo_queue_op(s, name, kind, config, NULL, op_done, &w);
  if (!e) {
    pthread_mutex_lock(&w.mu);
    while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    e = w.err;
  }
  pthread_mutex_destroy(&w.mu);
  pthread_cond_destroy(&w.cv);
  return e;
}

sip_error_t *sip_server_load_model(sip_server_t *s, const char *name) {
  return run_op(s, name, OP_LOAD, NULL);
}

sip_error_t *sip_server_load_model_config(sip_server_t *s, const char *name, const char *config) {
  return run_op(s, name, OP_LOAD, config);
}

sip_error_t *sip_server_unload_model(sip_server_t *s, const char *name) {
  return run_op(s, name, OP_UNLOAD, NULL);
}

sip_error_t *sip_server_reload_config(sip_server_t *s) {
  return run_op(s, "", OP_RELOAD, NULL);
}

/* ---- the index ------------------------------------------------------------- */

typedef struct entry {
  json_t *obj;
  const char *name; /* in obj */
  int64_t num;
} entry_t;

static int cmp_entry(const void *a, const void *b) {
  const entry_t *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : x->num < y->num ? -1 : x->num > y->num;
}

static int add_entry(entry_t **v, size_t *n, json_t *obj, int64_t num) {
  entry_t *nv = obj ? sip__reallocarray(*v, *n + 1, sizeof *nv) : NULL;
  if (!nv) {
    json_decref(obj);
    return -1;
  }
  *v = nv;
  nv[*n].obj = obj;
  nv[*n].name = json_string_value(json_object_get(obj, "name"));
  nv[*n].num = num;
  (*n)++;
  return 0;
}

static const char *index_state(int pool_state) {
  return pool_state == SIP__POOL_READY || pool_state == SIP__POOL_UNLOADED ? "READY"
         : pool_state == SIP__POOL_LOADING ? "LOADING"
                                          : "UNAVAILABLE";
}

static int64_t num_of(const char *v) {
  return v && v[0] >= '0' && v[0] <= '9' ? strtoll(v, NULL, 10) : -1;
}

char *sip_server_repository_index(sip_server_t *s, int ready_only) {
  sip__repo_t *R = s->repo;
  entry_t *v = NULL;
  size_t n = 0, n_pools = 0;
  int oom = 0;
  sip__pool_t **pools = sip__registry_snapshot(&s->eng, 1, &n_pools);
  int *is_default = sip__calloc(n_pools + 1, sizeof *is_default);
  if (!is_default) oom = 1;
  pthread_rwlock_rdlock(&s->eng.reg_lock);
  for (size_t i = 0; is_default && i < n_pools; i++)
    is_default[i] = sip__registry_is_default_locked(&s->eng, pools[i]);
  pthread_rwlock_unlock(&s->eng.reg_lock);
  for (size_t i = 0; !oom && i < n_pools; i++) {
    sip__pool_t *p = pools[i];
    sip__pool_info_t in;
    sip__pool_info(p, &in);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:b}", "name", in.name, "state",
                          index_state(in.state), "reason", in.error ? in.error : "", "source",
                          in.from_repo ? "repository" : "config", "default", is_default[i]);
    if (o && in.version) json_object_set_new(o, "version", json_string(in.version));
    oom = add_entry(&v, &n, o, in.version_num);
  }
  if (R && R->root) {
    pthread_mutex_lock(&R->mu);
    for (sip__model_rec_t *m = R->models; m && !oom; m = m->next) {
      int live = 0;
      for (size_t i = 0; i < n_pools && !live; i++) live = !strcmp(sip__pool_name(pools[i]), m->name);
      int listed = 0;
      for (size_t k = 0; k < m->n_failed && !oom; k++) {
        const sip__failure_t *fl = &m->failed[k];
        int served = 0;
        for (size_t i = 0; fl->version && i < n_pools && !served; i++)
          served = !strcmp(sip__pool_name(pools[i]), m->name) && sip__pool_version(pools[i]) &&
                   !strcmp(sip__pool_version(pools[i]), fl->version);
        if (served) continue;
        json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "name", m->name, "state", "UNAVAILABLE",
                              "reason", fl->reason, "source", "repository");
        if (o && fl->version) json_object_set_new(o, "version", json_string(fl->version));
        oom = add_entry(&v, &n, o, num_of(fl->version));
        listed = 1;
      }
      if (!live && !listed && !oom)
        oom = add_entry(&v, &n,
                        json_pack("{s:s,s:s,s:s,s:s}", "name", m->name, "state",
                                  rec_state_names[m->state], "reason",
                                  m->state == REC_UNLOADED ? "unloaded" : "", "source",
                                  "repository"),
                        -1);
    }
    pthread_mutex_unlock(&R->mu);
    /* Models on disk that were never loaded (model_control: explicit). */
    size_t nn = 0;
    char **names = oom ? NULL : sip__repo_scan_models(R, &nn);
    for (size_t i = 0; i < nn && !oom; i++) {
      int known = 0;
      for (size_t k = 0; k < n && !known; k++) known = !strcmp(v[k].name, names[i]);
      if (!known)
        oom = add_entry(&v, &n,
                        json_pack("{s:s,s:s,s:s,s:s}", "name", names[i], "state", "UNAVAILABLE",
                                  "reason", "not loaded", "source", "repository"),
                        -1);
    }
    sip__repo_free_names(names, nn);
  }
  sip__registry_release(pools, n_pools);
  sip__free(is_default);
  char *txt = NULL;
  json_t *models = oom ? NULL : json_array();
  if (models) {
    if (n) qsort(v, n, sizeof *v, cmp_entry);
    for (size_t i = 0; i < n; i++) {
      const char *st = json_string_value(json_object_get(v[i].obj, "state"));
      if (!ready_only || (st && !strcmp(st, "READY"))) json_array_append(models, v[i].obj);
    }
    json_t *root = json_pack("{s:o}", "models", models);
    if (root) txt = json_dumps(root, JSON_COMPACT);
    json_decref(root);
  }
  for (size_t i = 0; i < n; i++) json_decref(v[i].obj);
  sip__free(v);
  return txt;
}
