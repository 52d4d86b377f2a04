/* sip — pools: one loaded model, its sessions, and a priority queue that the
 * sessions' executor threads pull from. Scheduling is driven by arrivals
 * (a condition signal) and completions (the executor loops); nothing polls. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "session/preprocess.h"
#include "ops/transforms.h"
#include "backend/backends.h"
#include "session/engine.h"
#include "session/observe/events.h"
#include "session/isolation/isolation.h"
#include "session/sequence.h"
#include "session/observe/sla.h"
#include "session/autoscale.h"
#include "session/pool_impl.h"

static const char *pool_state_names[] = {"LOADING", "READY", "FAILED", "STOPPED", "UNLOADED"};

const char *sip__pool_state_name(sip__pool_state_t s) {
  return (unsigned)s <= SIP__POOL_UNLOADED ? pool_state_names[s] : "UNKNOWN";
}

/* ---- model path resolution: a file, or <dir>/<version>/<model file> ---- */

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int cmp_version_dir(const void *a, const void *b) {
  const sip__version_dir_t *x = a, *y = b;
  return x->num != y->num ? (x->num < y->num ? -1 : 1) : strcmp(x->name, y->name);
}

void sip__version_dirs_free(sip__version_dir_t *v, size_t n) {
  for (size_t i = 0; v && i < n; i++) sip__free(v[i].file);
  sip__free(v);
}

int sip__version_dirs(const char *dir, const char *const *files, sip__version_dir_t **out,
                      size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  DIR *d = opendir(dir);
  if (!d) return errno ? errno : ENOENT;
  sip__version_dir_t *v = NULL;
  size_t n = 0;
  int err = 0;
  struct dirent *de;
  while (!err && (de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (len == 0 || len > 18 || strspn(de->d_name, "0123456789") != len) continue;
    char *file = NULL;
    struct stat st;
    for (size_t k = 0; files[k] && !file && !err; k++) {
      if (!(file = sip__asprintf("%s/%s/%s", dir, de->d_name, files[k]))) err = ENOMEM;
      else if (lstat(file, &st) != 0) { /* not this backend's file */
        sip__free(file);
        file = NULL;
      }
    }
    if (err) break;
    if (!file) continue; /* a directory without a model is not a version */
    sip__version_dir_t *nv = sip__reallocarray(v, n + 1, sizeof *v);
    if (!nv) {
      sip__free(file);
      err = ENOMEM;
      break;
    }
    v = nv;
    v[n].num = strtoll(de->d_name, NULL, 10);
    memcpy(v[n].name, de->d_name, len + 1); /* len <= 18 was checked above */
    v[n].file = file;
    n++;
  }
  closedir(d);
  if (err) {
    sip__version_dirs_free(v, n);
    return err;
  }
  if (n) qsort(v, n, sizeof *v, cmp_version_dir);
  *out = v;
  *n_out = n;
  return 0;
}

int sip__version_current(const char *dir, char *target, size_t cap, const char **base) {
  char *link = sip__asprintf("%s/current", dir);
  if (!link) return -1;
  ssize_t len = readlink(link, target, cap - 1);
  sip__free(link);
  if (len <= 0) return 0;
  target[len] = '\0';
  while (len > 1 && target[len - 1] == '/') target[--len] = '\0';
  const char *b = strrchr(target, '/');
  *base = b ? b + 1 : target;
  return 1;
}

/* Picks the version a directory serves: the one `current` points to, else
 * the highest numeric version that has one of the backend's `files`. */
static sip_error_t *resolve_model(const char *path, const char *const *files, char **file,
                                  char **version) {
  struct stat st;
  *file = *version = NULL;
  if (stat(path, &st) != 0)
    return sip_error_new(SIP_NOT_FOUND, "model_path %s: %s; expected a model file or a model "
                                        "directory <name>/<version>/%s",
                         path, strerror(errno), files[0] ? files[0] : "<model file>");
  if (!S_ISDIR(st.st_mode)) {
    *file = sip__strdup(path);
    return *file ? NULL : SIP__OOM();
  }
  char target[PATH_MAX];
  const char *base = NULL;
  int link = sip__version_current(path, target, sizeof target, &base);
  if (link < 0) return SIP__OOM();
  if (link) {
    if (!base[0])
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "model_path %s: the 'current' link points to '%s'; expected a "
                           "version directory name",
                           path, target);
    *version = sip__strdup(base);
    /* The first of the backend's files present (else the first, named in
     * the error below). */
    for (size_t k = 0; files[k] && !*file; k++) {
      char *f = sip__asprintf("%s/%s/%s", path, base, files[k]);
      if (!f) return SIP__OOM();
      if (is_file(f)) *file = f;
      else sip__free(f);
    }
    if (!*file) *file = sip__asprintf("%s/%s/%s", path, base, files[0] ? files[0] : "model");
    if (!*version || !*file) return SIP__OOM();
    if (!is_file(*file))
      return sip_error_new(SIP_NOT_FOUND,
                           "model_path %s: 'current' names version '%s' but %s does not exist",
                           path, base, *file);
    return NULL;
  }
  sip__version_dir_t *v = NULL;
  size_t n = 0;
  int err = sip__version_dirs(path, files, &v, &n);
  if (err == ENOMEM) return SIP__OOM();
  if (err) return sip_error_new(SIP_NOT_FOUND, "model_path %s: %s", path, strerror(err));
  const sip__version_dir_t *best = NULL;
  for (size_t i = n; i-- > 0 && !best;)
    if (is_file(v[i].file)) best = &v[i];
  if (!best) {
    sip__version_dirs_free(v, n);
    return sip_error_new(SIP_NOT_FOUND,
                         "model_path %s is a directory without versions; expected "
                         "%s/<version>/%s with a numeric version (or a 'current' link)",
                         path, path, files[0] ? files[0] : "<model file>");
  }
  *version = sip__strdup(best->name);
  *file = sip__strdup(best->file);
  sip__version_dirs_free(v, n);
  return *version && *file ? NULL : SIP__OOM();
}

/* ---- completion ---- */

void sip__request_complete(sip_request_t *r, sip_code_t code, const char *message,
                           sip_tensor_t **outputs, size_t n_outputs, uint64_t queue_us,
                           uint64_t compute_us) {
  sip_response_t *resp =
      sip__response_new(code, sip__strdup(message ? message : ""), r->id, outputs, n_outputs,
                        queue_us, compute_us, sip__now_us() - r->sched.arrival_us);
  sip_infer_done_fn done = r->done;
  void *user = r->user;
  sip__pool_t *held = r->held, *fallback = r->held_fallback;
  r->held = r->held_fallback = NULL;
  if (resp && (r->retries || fallback)) sip__response_note_failover(resp, r->retries, r->served_by);
  if (r->trace && resp) { /* the answer carries the trace to the front-end's send */
    if (code != SIP_OK) sip__trace_root_end(r->trace, 0, 1);
    resp->trace = r->trace;
    r->trace = NULL;
  }
  sip_request_free(r);
  done(resp, user);
  /* After the answer: a retired pool is freed only once every request
   * admitted to it has been answered. */
  if (held) sip__pool_unref(held);
  if (fallback) sip__pool_unref(fallback);
}

/* ---- lifetime ---- */

/* A version directory name as a number (they order numerically: 10 > 9);
 * -1 for none or a name that is not a plain decimal number. */
static int64_t version_number(const char *v) {
  if (!v || v[0] < '0' || v[0] > '9') return -1;
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  return *end || errno ? -1 : (int64_t)n;
}

sip__pool_t *sip__pool_new(sip__engine_t *s, const sip__pool_config_t *cfg,
                          sip__pool_config_t *own_cfg, const char *version) {
  sip__pool_t *p = sip__calloc(1, sizeof *p);
  char *v = version ? sip__strdup(version) : NULL;
  if (!p || (version && !v)) {
    sip__free(p);
    sip__free(v);
    sip__config_pool_free(own_cfg);
    return NULL;
  }
  p->base.vt = &sip__pool_model_vt;
  p->eng = s;
  p->cfg = cfg;
  p->own_cfg = own_cfg;
  p->version = v;
  p->version_num = version_number(v);
  atomic_init(&p->base.refs, 0);
  atomic_init(&p->base.retired, 0);
  atomic_store(&p->state, SIP__POOL_LOADING);
  sip__sched_queue_init(&p->queue);
  pthread_mutex_init(&p->mu, NULL);
  pthread_mutex_init(&p->scale_mu, NULL);
  atomic_store(&p->size, cfg->pool_size);
  atomic_store(&p->quota_memory_mb, cfg->max_memory_mb);
  atomic_store(&p->quota_compute_percent, cfg->max_compute_percent);
  pthread_condattr_t pa;
  pthread_condattr_init(&pa);
  pthread_condattr_setclock(&pa, CLOCK_MONOTONIC); /* batch waits use sip__now_us */
  pthread_cond_init(&p->cv, &pa);
  pthread_condattr_destroy(&pa);
  sip__arb_account_init(&p->arb, (int)cfg->priority, cfg->max_compute_percent);
  if (sip__avail_init(p) || (cfg->sla.enabled && !(p->sla = sip__sla_new(&cfg->sla)))) {
    sip__pool_destroy(p);
    return NULL;
  }
  return p;
}

void sip__pool_destroy(sip__pool_t *p) {
  if (!p) return;
  for (int k = 0; k < p->n_sessions; k++) sip__arb_ticket_destroy(&p->sessions[k].ticket);
  sip__free(p->sessions);
  sip__free(p->resolved_path);
  sip__free(p->version);
  sip__free(p->fingerprint);
  sip__io_descs_free(p->inputs, p->n_inputs);
  sip__io_descs_free(p->outputs, p->n_outputs);
  sip__preprocess_free(p->pre);
  sip__seq_free(p->seq);
  sip__free(p->error);
  sip_error_free(p->load_error);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->scale_mu);
  pthread_cond_destroy(&p->cv);
  sip__avail_destroy(p);
  sip__sla_free(p->sla);
  sip__autoscale_free(atomic_load(&p->as));
  sip__config_pool_free(p->own_cfg);
  sip__free(p);
}

void sip__session_init(sip__pool_t *p, sip__session_t *s, int index) {
  const sip__pool_config_t *c = p->cfg;
  memset(s, 0, sizeof *s);
  s->pool = p;
  s->index = index;
  /* Versions of a repository model run side by side: their ids differ. */
  if (p->from_repo && p->version)
    snprintf(s->id, sizeof s->id, "%s:%s/%d", c->name, p->version, index);
  else
    snprintf(s->id, sizeof s->id, "%s/%d", c->name, index);
  atomic_store(&s->state, SIP__SESSION_INIT);
  atomic_store(&s->since_us, sip__wall_us());
  sip__arb_ticket_init(&s->ticket, &p->arb);
}

/* ---- load ---- */

static void pool_fail(sip__pool_t *p, sip_error_t *e) {
  p->error = sip__asprintf("%s: %s", sip_code_name(sip_error_code(e)), sip_error_message(e));
  sip__log(SIP__LOG_ERROR, "pool failed to load", "pool=%s code=%s reason=\"%s\"", p->cfg->name,
           sip_code_name(sip_error_code(e)), sip_error_message(e));
  p->load_error = e;
  atomic_store(&p->state, SIP__POOL_FAILED);
  sip__events_pool(p, SIP_EVENT_POOL_FAILED, sip_error_message(e));
}

void sip__pool_stop_sessions(sip__pool_t *p, sip__session_state_t final) {
  pthread_mutex_lock(&p->mu);
  p->stopping = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  sip__avail_stop(p);
  /* Executors drain what is queued before they exit. */
  for (int i = 0; i < p->n_sessions; i++) {
    sip__session_t *s = &p->sessions[i];
    if (s->thread_started) pthread_join(s->thread, NULL);
    s->thread_started = 0;
    if (s->ctx) p->backend->session_free(s->ctx);
    s->ctx = NULL;
    sip__session_set_state(s, final);
  }
  /* Executions the watchdog abandoned still use the model. */
  sip__pool_close_model(p, p->model && sip__avail_wait_abandoned(p));
}

/* Undoes a partial load, so a FAILED pool holds no memory. */
static void release(sip__pool_t *p) { sip__pool_stop_sessions(p, SIP__SESSION_FAILED); }

/* The pool keeps its own copy of the model's inputs and outputs: admission
 * checks and introspection read them without racing a model being freed at
 * shutdown. */

/* With dynamic batching, dim 0 of every input and output must be the batch
 * dim: dynamic, or one fixed size shared by all (then short batches are
 * padded). */
static sip_error_t *check_batching(sip__pool_t *p) {
  p->fixed_batch = 0;
  if (!p->cfg->max_batch_size) return NULL;
  const char *why = p->backend->batch_problem ? p->backend->batch_problem(p->model) : NULL;
  if (why)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "dynamic_batching cannot merge requests for %s; leave "
                         "dynamic_batching off for this pool", why);
  for (int io = 0; io < 2; io++) {
    const sip_io_desc_t *d = io ? p->outputs : p->inputs;
    size_t n = io ? p->n_outputs : p->n_inputs;
    for (size_t i = 0; i < n; i++) {
      char shape[256];
      sip__shape_str(shape, sizeof shape, d[i].rank, d[i].dims, ",");
      if (d[i].rank < 1 || d[i].dims[0] == 0 ||
          (d[i].dims[0] > 0 && p->fixed_batch && d[i].dims[0] != p->fixed_batch))
        return sip_error_new(SIP_FAILED_PRECONDITION,
                             "dynamic_batching needs dim 0 of every input and output to be the "
                             "batch dim (dynamic, or one fixed size); %s '%s' has shape %s",
                             io ? "output" : "input", d[i].name, d[i].rank < 0 ? "(unknown)" : shape);
      if (d[i].dims[0] > 0) p->fixed_batch = d[i].dims[0];
    }
  }
  return NULL;
}

/* A pool's memory is its model's and its sessions': a model the store
 * already held is counted as the load that made it measured it. */
static uint64_t with_shared(const sip__pool_t *p, uint64_t growth) {
  return p->stored && !p->store_loaded ? growth + p->store_bytes : growth;
}

static void load(sip__pool_t *p) {
  const sip__pool_config_t *c = p->cfg;
  uint64_t t0 = sip__now_us(), rss0 = sip__resident_settled();
  sip_error_t *e = NULL;
  p->backend = sip__backend_find(c->backend);
  if (!p->backend) {
    pool_fail(p, sip_error_new(SIP_UNIMPLEMENTED, "backend '%s' is not in this build; expected "
                                                  "one of: %s",
                               c->backend, sip__backend_names()));
    return;
  }
  if (p->version) {
    /* A repository version: the file was chosen by the repository. */
    if (c->model_path && !(p->resolved_path = sip__strdup(c->model_path))) {
      pool_fail(p, SIP__OOM());
      return;
    }
  } else if (c->model_path &&
             (e = resolve_model(c->model_path,
                                /* a backend without file names reads any backend's */
                                sip__backend_files(c->backend)[0] ? sip__backend_files(c->backend)
                                                                  : sip__backend_files(NULL),
                                &p->resolved_path, &p->version))) {
    pool_fail(p, e);
    return;
  }
  p->version_num = version_number(p->version);
  char real[PATH_MAX];
  if (p->resolved_path && realpath(p->resolved_path, real)) {
    char *r = sip__strdup(real);
    if (r) {
      sip__free(p->resolved_path);
      p->resolved_path = r;
    }
  }
  if ((e = sip__pool_open_model(p))) {
    pool_fail(p, e);
    return;
  }
  const sip_io_desc_t *ins, *outs;
  p->backend->describe(p->model, &ins, &p->n_inputs, &outs, &p->n_outputs);
  p->inputs = sip__io_descs_copy(ins, p->n_inputs);
  p->outputs = sip__io_descs_copy(outs, p->n_outputs);
  if (!p->inputs || !p->outputs) {
    release(p);
    pool_fail(p, SIP__OOM());
    return;
  }
  struct stat st;
  if (p->resolved_path && stat(p->resolved_path, &st) == 0) p->model_bytes = (uint64_t)st.st_size;

  /* What a seed-format model list entry declares (input_shapes,
   * output_nums) against the model's own inputs and outputs. */
  if ((e = sip__config_check_declared_io(c, p->inputs, p->n_inputs, p->outputs, p->n_outputs)) ||
      (e = check_batching(p)) || (e = sip__seq_setup(p)) ||
      (c->n_preprocess && (e = sip__preprocess_new(c, p->inputs, p->n_inputs, &p->pre)))) {
    release(p);
    pool_fail(p, e);
    return;
  }
  /* Clients send what the preprocess takes; batching was checked against
   * the model's own input above. */
  if (p->pre) sip__preprocess_raw_desc(p->pre, &p->inputs[sip__preprocess_input(p->pre)]);
  /* Room to grow at run time (sequence pools keep their size): calloc's
   * pages are touched only as sessions are added. */
  p->cap_sessions = c->sequence_batching ? c->pool_size : SIP__MAX_SESSIONS;
  p->sessions = sip__calloc((size_t)p->cap_sessions, sizeof *p->sessions);
  if (!p->sessions) {
    release(p);
    pool_fail(p, SIP__OOM());
    return;
  }
  /* The model's memory, then each session's: the growth across the
   * session contexts (in the worker for isolated pools). */
  int wpid = p->iso ? atomic_load(&p->worker_pid) : 0;
  uint64_t rssm = p->iso ? sip__resident_bytes_of(wpid) : sip__resident_settled();
  for (int i = 0; i < c->pool_size; i++) {
    sip__session_t *s = &p->sessions[i];
    sip__session_init(p, s, i);
    p->n_sessions = i + 1;
    if ((e = p->backend->session_new(p->model, &s->ctx))) {
      release(p);
      pool_fail(p, e);
      return;
    }
  }
  /* The quota is checked on what the model and every session context hold
   * before any request can run, so an over-quota pool never serves. */
  uint64_t rss1 = p->iso ? sip__resident_bytes_of(wpid) : sip__resident_settled();
  p->session_bytes = rss1 > rssm ? (rss1 - rssm) / (uint64_t)c->pool_size : 0;
  /* the model and its sessions live in the worker: all of it counts */
  p->memory_bytes = p->iso ? rss1 : with_shared(p, rss1 > rss0 ? rss1 - rss0 : 0);
  if (c->max_memory_mb && p->memory_bytes > (uint64_t)c->max_memory_mb << 20) {
    release(p);
    pool_fail(p, sip_error_new(SIP_RESOURCE_EXHAUSTED,
                               "the model and its %d sessions take %.1f MiB measured at load; the "
                               "pool's quota (resource_quota.max_memory_mb) allows %lld MiB",
                               c->pool_size, (double)p->memory_bytes / 1048576.0,
                               (long long)c->max_memory_mb));
    return;
  }
  /* Requests that queued while an on-demand model loaded are checked
   * against it before any session can run them. */
  sip__pool_admit_cold(p);
  for (int i = 0; i < c->pool_size; i++) {
    sip__session_t *s = &p->sessions[i];
    sip__session_set_state(s, SIP__SESSION_READY);
    if (pthread_create(&s->thread, NULL, sip__session_main, s) != 0) {
      release(p);
      pool_fail(p, sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start session thread %d", i));
      return;
    }
    s->thread_started = 1;
    sip__session_name_thread(s);
  }
  /* Measured again with the threads started (their stacks and allocator
   * arenas), as a session added later is (scale.c). */
  uint64_t rss2 = p->iso ? sip__resident_bytes_of(wpid) : sip__resident_settled();
  if (rss2 > rss1) {
    p->session_bytes = (rss2 - rssm) / (uint64_t)c->pool_size;
    p->memory_bytes = p->iso ? rss2 : with_shared(p, rss2 - rss0);
  }
  sip__avail_start(p);
  p->load_ms = (double)(sip__now_us() - t0) / 1000.0;
  atomic_store(&p->state, SIP__POOL_READY);
  sip__events_pool(p, SIP_EVENT_POOL_LOADED, NULL);
  sip__log(SIP__LOG_INFO, "pool loaded",
           "pool=%s backend=%s model=\"%s\" version=%s sessions=%d load_ms=%.1f model_bytes=%llu "
           "memory_bytes=%llu session_bytes=%llu",
           c->name, p->backend->name, p->resolved_path ? p->resolved_path : "-",
           p->version ? p->version : "-", c->pool_size, p->load_ms,
           (unsigned long long)p->model_bytes, (unsigned long long)p->memory_bytes,
           (unsigned long long)p->session_bytes);
}

/* ---- admission ---- */

/* "0-1,4": the CPUs of `set` for messages. */
static void format_cpus(const cpu_set_t *set, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; k < CPU_SETSIZE && used < n; k++) {
    if (!CPU_ISSET(k, set) || (k && CPU_ISSET(k - 1, set))) continue;
    int end = k;
    while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, set)) end++;
    int w = end > k ? snprintf(buf + used, n - used, "%s%d-%d", used ? "," : "", k, end)
                    : snprintf(buf + used, n - used, "%s%d", used ? "," : "", k);
    if (w < 0) break;
    used += (size_t)w;
  }
}

/* cpu_affinity: threads inherit the CPU set of the thread that creates
 * them, so the loading thread takes the pool's set while it loads: the
 * session threads it starts and the intra-op threads the backend creates
 * for the pool (own_intra_op_threads) run only there. Engine-wide threads
 * (the global intra-op pool) are created beforehand and keep theirs. */
void sip__pool_load(sip__pool_t *p) {
  const sip__pool_config_t *c = p->cfg;
  /* A large model takes a while: its start is logged, not only its end. */
  sip__log(SIP__LOG_INFO, "pool loading", "pool=%s model=\"%s\" version=%s sessions=%d", c->name,
           c->model_path ? c->model_path : "-", p->version ? p->version : "-", c->pool_size);
  if (!c->n_cpus) {
    load(p);
    return;
  }
  cpu_set_t old, want;
  CPU_ZERO(&want);
  for (int k = 0; k < SIP__MAX_CPUS && k < CPU_SETSIZE; k++)
    if (c->cpu_mask[k / 64] >> (k % 64) & 1) CPU_SET(k, &want);
  if (pthread_getaffinity_np(pthread_self(), sizeof old, &old) != 0) CPU_ZERO(&old);
  cpu_set_t outside;
  CPU_AND(&outside, &want, &old);
  if (!CPU_EQUAL(&outside, &want)) {
    char named[256], allowed[256];
    CPU_XOR(&outside, &outside, &want); /* the named CPUs this process may not use */
    format_cpus(&outside, named, sizeof named);
    format_cpus(&old, allowed, sizeof allowed);
    pool_fail(p, sip_error_new(SIP_FAILED_PRECONDITION,
                               "cpu_affinity names CPU %s, which this process may not run on; "
                               "expected CPUs among %s",
                               named, allowed[0] ? allowed : "(unknown)"));
    return;
  }
  /* The backend's engine-wide state (its global thread pool, say)
   * must not be born inside the pool's set. */
  const sip_backend_vtable_t *vt = sip__backend_find(c->backend);
  void *state;
  if (vt) sip_error_free(sip__engine_backend_state(p->eng, vt, &state));
  int rc = pthread_setaffinity_np(pthread_self(), sizeof want, &want), set = rc == 0;
  if (!set)
    sip__log(SIP__LOG_WARN, "cpu_affinity not applied", "pool=%s error=\"%s\"", c->name,
             strerror(rc));
  load(p);
  /* Threads this one starts later (other pools' sessions) inherit its set. */
  if (set && (rc = pthread_setaffinity_np(pthread_self(), sizeof old, &old)) != 0)
    sip__log(SIP__LOG_WARN, "cpu_affinity not restored after loading a pool",
             "pool=%s error=\"%s\"", c->name, strerror(rc));
}

sip_error_t *sip__pool_check_inputs(sip__pool_t *p, const sip_request_t *r) {
  const char *pool = p->cfg->name;
  if (r->n_inputs > 64)
    return sip_error_new(SIP_UNIMPLEMENTED, "pool '%s': more than 64 inputs per request", pool);
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
    if (t->dtype != d->dtype)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "input '%s' of pool '%s': received dtype %s; expected %s", t->name,
                           pool, sip_dtype_name(t->dtype), sip_dtype_name(d->dtype));
    /* Only a pool whose backend works in other memory (wrapped by
     * src/session/memory.c) copies; every other path reads inputs on the CPU. */
    if (t->memory_type != SIP_MEMORY_CPU && p->backend != &p->mem_vt)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "input '%s' of pool '%s' is in %s memory; expected host memory (this "
                           "pool's backend reads its inputs on the CPU)",
                           t->name, pool, sip_memory_type_name(t->memory_type));
    if (d->rank >= 0) {
      int ok = t->rank == d->rank;
      /* A fixed batch dim takes short batches when they can be padded. */
      int pad = p->fixed_batch && p->cfg->padding_strategy != SIP__PAD_NONE;
      for (int k = 0; ok && k < d->rank; k++)
        ok = d->dims[k] < 0 || d->dims[k] == t->dims[k] ||
             (k == 0 && pad && t->dims[0] >= 1 && t->dims[0] <= d->dims[0]);
      if (!ok) { /* the shapes are formatted only for the message: this runs per request */
        char want[256], got[256];
        sip__shape_str(got, sizeof got, t->rank, t->dims, ",");
        sip__shape_str(want, sizeof want, d->rank, d->dims, ",");
        return sip_error_new(SIP_INVALID_ARGUMENT,
                             "input '%s' of pool '%s': received shape %s; expected %s (-1 is "
                             "any size)",
                             t->name, pool, got, want);
      }
    }
  }
  for (size_t j = 0; j < p->n_inputs; j++) {
    int found = 0;
    for (size_t i = 0; i < r->n_inputs && !found; i++)
      found = strcmp(r->inputs[i]->name, p->inputs[j].name) == 0;
    if (!found) {
      char want[256];
      sip__shape_str(want, sizeof want, p->inputs[j].rank, p->inputs[j].dims, ",");
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
