/* sip — pools: one loaded model, its sessions, and a priority queue that the
 * sessions' executor threads pull from. Scheduling is driven by arrivals
 * (a condition signal) and completions (the executor loops); nothing polls. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "session/engine.h"

static const char *pool_state_names[] = {"LOADING", "READY", "FAILED", "STOPPED"};

const char *sip__pool_state_name(sip_pool_state_t s) {
  return (unsigned)s <= SIP_POOL_STOPPED ? pool_state_names[s] : "UNKNOWN";
}

/* ---- model path resolution: a file, or <dir>/<version>/model.onnx ---- */

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Picks the version a directory serves: the one `current` points to, else
 * the highest numeric version that has a model.onnx. */
static sip_error_t *resolve_model(const char *path, char **file, char **version) {
  struct stat st;
  *file = *version = NULL;
  if (stat(path, &st) != 0)
    return sip_error_new(SIP_NOT_FOUND, "model_path %s: %s; expected an .onnx file or a model "
                                        "directory <name>/<version>/model.onnx",
                         path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    *file = sip__strdup(path);
    return *file ? NULL : SIP_OOM();
  }
  char *cur = sip__asprintf("%s/current", path);
  if (!cur) return SIP_OOM();
  char target[PATH_MAX];
  ssize_t n = readlink(cur, target, sizeof target - 1);
  sip__free(cur);
  if (n > 0) {
    target[n] = '\0';
    const char *base = strrchr(target, '/');
    base = base ? base + 1 : target;
    if (!base[0])
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "model_path %s: the 'current' link points to '%s'; expected a "
                           "version directory name",
                           path, target);
    *version = sip__strdup(base);
    *file = sip__asprintf("%s/%s/model.onnx", path, base);
    if (!*version || !*file) return SIP_OOM();
    if (!is_file(*file))
      return sip_error_new(SIP_NOT_FOUND,
                           "model_path %s: 'current' names version '%s' but %s does not exist",
                           path, base, *file);
    return NULL;
  }
  DIR *d = opendir(path);
  if (!d) return sip_error_new(SIP_NOT_FOUND, "model_path %s: %s", path, strerror(errno));
  long best = -1;
  struct dirent *de;
  while ((de = readdir(d))) {
    char *end;
    errno = 0;
    long v = strtol(de->d_name, &end, 10);
    if (!de->d_name[0] || *end || errno || v < 0 || v <= best) continue;
    char *f = sip__asprintf("%s/%s/model.onnx", path, de->d_name);
    if (f && is_file(f)) best = v;
    sip__free(f);
  }
  closedir(d);
  if (best < 0)
    return sip_error_new(SIP_NOT_FOUND,
                         "model_path %s is a directory without versions; expected "
                         "%s/<version>/model.onnx with a numeric version (or a 'current' link)",
                         path, path);
  *version = sip__asprintf("%ld", best);
  *file = sip__asprintf("%s/%ld/model.onnx", path, best);
  return *version && *file ? NULL : SIP_OOM();
}

/* ---- queue ---- */

static void q_push(sip_queue_t *q, sip_request_t *r) {
  r->next = NULL;
  r->prev = q->tail;
  if (q->tail)
    q->tail->next = r;
  else
    q->head = r;
  q->tail = r;
  q->n++;
}

static void q_remove(sip_queue_t *q, sip_request_t *r) {
  if (r->prev)
    r->prev->next = r->next;
  else
    q->head = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    q->tail = r->prev;
  r->next = r->prev = NULL;
  q->n--;
}

/* Highest level first, FIFO within a level. Caller holds p->mu. */
static sip_request_t *q_pop(sip_pool_t *p) {
  for (int l = 0; l < SIP_PRIO_LEVELS; l++) {
    sip_request_t *r = p->queue[l].head;
    if (r) {
      q_remove(&p->queue[l], r);
      return r;
    }
  }
  return NULL;
}

/* ---- completion ---- */

void sip__request_complete(sip_request_t *r, sip_code_t code, const char *message,
                           sip_tensor_t **outputs, size_t n_outputs, uint64_t queue_us,
                           uint64_t compute_us) {
  sip_response_t *resp = sip__calloc(1, sizeof *resp);
  if (resp) {
    resp->code = code;
    resp->message = sip__strdup(message ? message : "");
    resp->request_id = r->id;
    resp->outputs = outputs;
    resp->n_outputs = n_outputs;
    resp->queue_us = queue_us;
    resp->compute_us = compute_us;
    resp->total_us = sip__now_us() - r->arrival_us;
  }
  if (!resp || !resp->message) {
    /* Out of memory: still answer, with the least we can allocate. */
    for (size_t i = 0; i < n_outputs; i++) sip_tensor_free(outputs[i]);
    sip__free(outputs);
    if (resp) {
      resp->outputs = NULL;
      resp->n_outputs = 0;
      resp->code = SIP_RESOURCE_EXHAUSTED;
    }
  }
  sip_infer_done_fn done = r->done;
  void *user = r->user;
  sip_request_free(r);
  done(resp, user);
}

void sip__pool_count(sip_pool_t *p, sip_code_t code, uint64_t total_ns) {
  if ((unsigned)code < SIP_CODE_COUNT_) atomic_fetch_add(&p->by_code[code], 1);
  sip__stat_add(code == SIP_OK ? &p->st_success : &p->st_fail, total_ns);
}

/* Every queued request ends here: metrics, a log line for failures, the
 * answer. */
static void finish(sip_pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                   sip_tensor_t **outs, size_t n_outs, uint64_t queue_us, uint64_t compute_us) {
  uint64_t total_us = sip__now_us() - r->arrival_us;
  sip__hist_observe(&p->h_total, total_us);
  sip__pool_count(p, code, total_us * 1000);
  atomic_store(&p->last_inference_ms, sip__wall_us() / 1000);
  if (code != SIP_OK)
    sip__log(SIP__LOG_WARN, "request failed", "pool=%s code=%s reason=\"%s\"", p->cfg->name,
             sip_code_name(code), msg);
  sip__request_complete(r, code, msg, outs, n_outs, queue_us, compute_us);
}

static void fail_request(sip_pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                         uint64_t queue_us) {
  finish(p, r, code, msg, NULL, 0, queue_us, 0);
}

/* ---- executor ---- */

static void run_one(sip_session_t *s, sip_request_t *r) {
  sip_pool_t *p = s->pool;
  uint64_t start = sip__now_us();
  uint64_t queue_us = start - r->arrival_us;
  sip__hist_observe(&p->h_queue, queue_us);
  sip__stat_add(&p->st_queue, queue_us * 1000);
  if (r->deadline_us && start >= r->deadline_us) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "request waited %.1f ms in the queue of pool '%s', past its timeout of %u ms; it "
             "was not executed",
             (double)queue_us / 1000.0, p->cfg->name, r->timeout_ms);
    fail_request(p, r, SIP_DEADLINE_EXCEEDED, msg, queue_us);
    return;
  }
  uint64_t t_in = sip__now_ns();
  const char *all[64];
  const char *const *names = (const char *const *)r->outputs;
  size_t n_out = r->n_outputs;
  if (!n_out) {
    n_out = p->n_outputs < 64 ? p->n_outputs : 64;
    for (size_t i = 0; i < n_out; i++) all[i] = p->outputs[i].name;
    names = all;
  }
  sip_tensor_t **outs = sip__calloc(n_out ? n_out : 1, sizeof *outs);
  if (!outs) {
    fail_request(p, r, SIP_RESOURCE_EXHAUSTED, "out of memory allocating outputs", queue_us);
    return;
  }
  sip__session_set_state(s, SIP_SESSION_RUNNING);
  uint64_t t_run = sip__now_ns();
  sip__stat_add(&p->st_compute_input, t_run - t_in);
  sip_error_t *e = p->backend->execute(s->ctx, (const sip_tensor_t *const *)r->inputs,
                                       r->n_inputs, names, n_out, outs);
  uint64_t t_done = sip__now_ns();
  sip__stat_add(&p->st_compute_infer, t_done - t_run);
  uint64_t compute_us = sip__now_us() - start;
  sip__session_set_state(s, SIP_SESSION_READY);
  atomic_fetch_add(&s->inferences, 1);
  atomic_fetch_add(&p->inference_count, 1);
  atomic_fetch_add(&p->execution_count, 1);
  sip__hist_observe(&p->h_compute, compute_us);
  if (e) {
    atomic_fetch_add(&s->errors, 1);
    sip__free(outs);
    char *msg = sip__asprintf("pool '%s' session %d: %s", p->cfg->name, s->index,
                              sip_error_message(e));
    sip_code_t code = sip_error_code(e);
    sip_error_free(e);
    fail_request(p, r, code, msg ? msg : "execution failed", queue_us);
    sip__free(msg);
    return;
  }
  sip__stat_add(&p->st_compute_output, sip__now_ns() - t_done);
  finish(p, r, SIP_OK, NULL, outs, n_out, queue_us, compute_us);
}

static void *session_main(void *arg) {
  sip_session_t *s = arg;
  sip_pool_t *p = s->pool;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    sip_request_t *r;
    while (!(r = q_pop(p)) && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
    if (!r) break; /* stopping and the queue is drained */
    pthread_mutex_unlock(&p->mu);
    run_one(s, r);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ---- load ---- */

/* Resident bytes of this process. Pools load one at a time, so the growth
 * across a load is the memory that model and its sessions brought. */
static uint64_t resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%llu %llu", &size, &rss) != 2) rss = 0;
    fclose(f);
  }
  return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void pool_fail(sip_pool_t *p, sip_error_t *e) {
  p->error = sip__asprintf("%s: %s", sip_code_name(sip_error_code(e)), sip_error_message(e));
  sip__log(SIP__LOG_ERROR, "pool failed to load", "pool=%s code=%s reason=\"%s\"", p->cfg->name,
           sip_code_name(sip_error_code(e)), sip_error_message(e));
  sip_error_free(e);
  atomic_store(&p->state, SIP_POOL_FAILED);
}

void sip__pool_load(sip_pool_t *p) {
  const sip_pool_config_t *c = p->cfg;
  uint64_t t0 = sip__now_us(), rss0 = resident_bytes();
  sip_error_t *e = NULL;
  p->backend = sip__backend_find(c->backend);
  if (!p->backend) {
    pool_fail(p, sip_error_new(SIP_UNIMPLEMENTED, "backend '%s' is not in this build; expected "
                                                  "one of: %s",
                               c->backend, sip__backend_names()));
    return;
  }
  if (c->model_path && (e = resolve_model(c->model_path, &p->resolved_path, &p->version))) {
    pool_fail(p, e);
    return;
  }
  char real[PATH_MAX];
  if (p->resolved_path && realpath(p->resolved_path, real)) {
    char *r = sip__strdup(real);
    if (r) {
      sip__free(p->resolved_path);
      p->resolved_path = r;
    }
  }
  void *state = NULL;
  if ((e = sip__server_backend_state(p->server, p->backend, &state)) ||
      (e = p->backend->load(state, p->resolved_path, c->backend_options, c->n_backend_options,
                            &p->model))) {
    pool_fail(p, e);
    return;
  }
  p->backend->describe(p->model, &p->inputs, &p->n_inputs, &p->outputs, &p->n_outputs);
  struct stat st;
  if (p->resolved_path && stat(p->resolved_path, &st) == 0) p->model_bytes = (uint64_t)st.st_size;

  p->sessions = sip__calloc((size_t)c->pool_size, sizeof *p->sessions);
  if (!p->sessions) {
    pool_fail(p, SIP_OOM());
    return;
  }
  for (int i = 0; i < c->pool_size; i++) {
    sip_session_t *s = &p->sessions[i];
    s->pool = p;
    s->index = i;
    snprintf(s->id, sizeof s->id, "%s/%d", c->name, i);
    atomic_store(&s->state, SIP_SESSION_INIT);
    atomic_store(&s->since_us, sip__wall_us());
    p->n_sessions = i + 1;
    if ((e = p->backend->session_new(p->model, &s->ctx))) {
      sip__session_set_state(s, SIP_SESSION_FAILED);
      pool_fail(p, e);
      return;
    }
    sip__session_set_state(s, SIP_SESSION_READY);
    if (pthread_create(&s->thread, NULL, session_main, s) != 0) {
      sip__session_set_state(s, SIP_SESSION_FAILED);
      pool_fail(p, sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start session thread %d", i));
      return;
    }
    s->thread_started = 1;
  }
  p->load_ms = (double)(sip__now_us() - t0) / 1000.0;
  uint64_t rss1 = resident_bytes();
  p->memory_bytes = rss1 > rss0 ? rss1 - rss0 : 0;
  atomic_store(&p->state, SIP_POOL_READY);
  sip__log(SIP__LOG_INFO, "pool loaded",
           "pool=%s backend=%s model=\"%s\" version=%s sessions=%d load_ms=%.1f model_bytes=%llu "
           "memory_bytes=%llu",
           c->name, p->backend->name, p->resolved_path ? p->resolved_path : "-",
           p->version ? p->version : "-", c->pool_size, p->load_ms,
           (unsigned long long)p->model_bytes, (unsigned long long)p->memory_bytes);
}

/* ---- admission ---- */

static void format_shape(char *buf, size_t n, int rank, const int64_t *dims) {
  size_t off = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && off < n; i++)
    off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (off < n) snprintf(buf + off, n - off, "]");
}

static sip_error_t *check_inputs(sip_pool_t *p, const sip_request_t *r) {
  const char *pool = p->cfg->name;
  for (size_t i = 0; i < r->n_inputs; i++) {
    const sip_tensor_t *t = r->inputs[i];
    for (size_t j = 0; j < i; j++)
      if (strcmp(r->inputs[j]->name, t->name) == 0)
        return sip_error_new(SIP_INVALID_ARGUMENT, "input '%s' of pool '%s' is given twice",
                             t->name, pool);
    const sip_io_desc_t *d = NULL;
    for (size_t j = 0; j < p->n_inputs && !d; j++)
      if (strcmp(p->inputs[j].name, t->name) == 0) d = &p->inputs[j];
    if (!d) {
      char names[512] = "";
      for (size_t j = 0; j < p->n_inputs; j++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", j ? ", " : "",
                 p->inputs[j].name);
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "pool '%s' has no input '%s'; expected one of: %s", pool, t->name,
                           names);
    }
    char want[256], got[256];
    format_shape(got, sizeof got, t->rank, t->dims);
    if (t->dtype != d->dtype)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "input '%s' of pool '%s': received dtype %s; expected %s", t->name,
                           pool, sip_dtype_name(t->dtype), sip_dtype_name(d->dtype));
    if (d->rank >= 0) {
      format_shape(want, sizeof want, d->rank, d->dims);
      int ok = t->rank == d->rank;
      for (int k = 0; ok && k < d->rank; k++) ok = d->dims[k] < 0 || d->dims[k] == t->dims[k];
      if (!ok)
        return sip_error_new(SIP_INVALID_ARGUMENT,
                             "input '%s' of pool '%s': received shape %s; expected %s (-1 is "
                             "any size)",
                             t->name, pool, got, want);
    }
  }
  for (size_t j = 0; j < p->n_inputs; j++) {
    int found = 0;
    for (size_t i = 0; i < r->n_inputs && !found; i++)
      found = strcmp(r->inputs[i]->name, p->inputs[j].name) == 0;
    if (!found) {
      char want[256];
      format_shape(want, sizeof want, p->inputs[j].rank, p->inputs[j].dims);
      return sip_error_new(SIP_INVALID_ARGUMENT, "missing input '%s' of pool '%s'; expected %s %s",
                           p->inputs[j].name, pool, sip_dtype_name(p->inputs[j].dtype),
                           p->inputs[j].rank >= 0 ? want : "(any shape)");
    }
  }
  for (size_t i = 0; i < r->n_outputs; i++) {
    for (size_t j = 0; j < i; j++)
      if (strcmp(r->outputs[j], r->outputs[i]) == 0)
        return sip_error_new(SIP_INVALID_ARGUMENT, "output '%s' of pool '%s' is requested twice",
                             r->outputs[i], pool);
    int found = 0;
    for (size_t j = 0; j < p->n_outputs && !found; j++)
      found = strcmp(r->outputs[i], p->outputs[j].name) == 0;
    if (!found)
      return sip_error_new(SIP_INVALID_ARGUMENT, "pool '%s' has no output '%s'", pool,
                           r->outputs[i]);
  }
  if (r->n_outputs > 64 || (!r->n_outputs && p->n_outputs > 64))
    return sip_error_new(SIP_UNIMPLEMENTED, "pool '%s': more than 64 outputs per request", pool);
  return NULL;
}

sip_error_t *sip__pool_submit(sip_pool_t *p, sip_request_t *r) {
  int st = atomic_load(&p->state);
  if (st == SIP_POOL_LOADING)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is still loading", p->cfg->name);
  if (st == SIP_POOL_FAILED)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' failed to load: %s", p->cfg->name,
                         p->error ? p->error : "unknown reason");
  if (st != SIP_POOL_READY)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is shutting down", p->cfg->name);
  sip_error_t *e = check_inputs(p, r);
  if (e) return e;
  static const int level_of[] = {0, SIP_PRIO_HIGH, SIP_PRIO_MEDIUM, SIP_PRIO_LOW};
  r->level = r->priority ? level_of[r->priority] : (int)p->cfg->priority;
  r->arrival_us = sip__now_us();
  r->deadline_us = r->timeout_ms ? r->arrival_us + (uint64_t)r->timeout_ms * 1000 : 0;
  uint64_t deadline = r->deadline_us;
  pthread_mutex_lock(&p->mu);
  if (p->stopping) {
    pthread_mutex_unlock(&p->mu);
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is shutting down", p->cfg->name);
  }
  q_push(&p->queue[r->level], r);
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  /* r may already be completed and freed by an executor here. */
  if (deadline) sip__server_note_deadline(p->server, deadline);
  return NULL;
}

uint64_t sip__pool_expire(sip_pool_t *p, uint64_t now) {
  sip_request_t *expired = NULL;
  uint64_t next = 0;
  pthread_mutex_lock(&p->mu);
  for (int l = 0; l < SIP_PRIO_LEVELS; l++) {
    for (sip_request_t *r = p->queue[l].head, *nx; r; r = nx) {
      nx = r->next;
      if (!r->deadline_us) continue;
      if (r->deadline_us <= now) {
        q_remove(&p->queue[l], r);
        r->next = expired;
        expired = r;
      } else if (!next || r->deadline_us < next) {
        next = r->deadline_us;
      }
    }
  }
  pthread_mutex_unlock(&p->mu);
  while (expired) {
    sip_request_t *r = expired;
    expired = r->next;
    uint64_t waited = now - r->arrival_us;
    sip__hist_observe(&p->h_queue, waited);
    sip__stat_add(&p->st_queue, waited * 1000);
    char msg[256];
    snprintf(msg, sizeof msg,
             "request waited %.1f ms in the queue of pool '%s', past its timeout of %u ms; it "
             "was not executed",
             (double)waited / 1000.0, p->cfg->name, r->timeout_ms);
    fail_request(p, r, SIP_DEADLINE_EXCEEDED, msg, waited);
  }
  return next;
}

void sip__pool_shutdown(sip_pool_t *p) {
  pthread_mutex_lock(&p->mu);
  p->stopping = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n_sessions; i++) {
    sip_session_t *s = &p->sessions[i];
    if (s->thread_started) pthread_join(s->thread, NULL);
    if (s->ctx) p->backend->session_free(s->ctx);
    s->ctx = NULL;
    sip__session_set_state(s, SIP_SESSION_DESTROYED);
  }
  /* A pool that never started sessions may still hold queued requests. */
  sip_request_t *r;
  while ((r = q_pop(p))) fail_request(p, r, SIP_UNAVAILABLE, "server is shutting down", 0);
  if (p->model) p->backend->model_free(p->model);
  p->model = NULL;
  if (atomic_load(&p->state) != SIP_POOL_FAILED) atomic_store(&p->state, SIP_POOL_STOPPED);
}
