/* sip — availability of a pool's sessions (docs/availability.md): the
 * watchdog that fails a session whose execution hangs and replaces it,
 * failover of the requests a failed session held (retry on the pool, then
 * the fallback pool), injected faults, and draining one session.
 *
 * Sessions are threads of the server process. A hung execution cannot be
 * stopped: the watchdog abandons it instead. Its thread is detached and
 * keeps only what it owns (its execution record, its backend context and
 * the tensors it built); its requests are answered or failed over at once
 * and the session slot gets a new backend context and a new thread. The
 * abandoned thread, when its execute returns, frees what it owns and ends
 * without touching the session or the pool; the pool keeps its model until
 * such threads ended (sip__avail_wait_abandoned). A process-isolated pool
 * (isolation.c) is not abandoned: its worker process is killed, the
 * execution fails as a session failure and the worker restarts. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/observe/events.h"
#include "session/isolation/isolation.h"
#include "session/pool_impl.h"

#define ABANDONED_WAIT_MS 5000

struct sip__exec {
  _Atomic int state; /* 0 running, 1 finished by its thread, 2 abandoned by the watchdog */
  uint64_t start_us;
  sip_request_t *const *reqs; /* the batch (the executing thread's) */
  size_t n;
  void *ctx; /* the backend context it runs on */
  const sip_backend_vtable_t *backend;
  sip__pool_life_t *life;
  int killed; /* a process-isolated pool's worker was killed for it (under mu) */
};

static void life_unref(sip__pool_life_t *l) {
  if (l && atomic_fetch_sub(&l->refs, 1) == 1) sip__free(l);
}

int sip__avail_init(sip__pool_t *p) {
  p->life = sip__calloc(1, sizeof *p->life);
  if (!p->life) return -1;
  atomic_init(&p->life->refs, 1);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&p->wd_cv, &a);
  pthread_condattr_destroy(&a);
  p->fault.rng = sip__now_us() | 1;
  return 0;
}

void sip__avail_destroy(sip__pool_t *p) {
  if (!p->life) return;
  pthread_cond_destroy(&p->wd_cv);
  life_unref(p->life);
  p->life = NULL;
}

/* ---- execution records ---- */

sip__exec_t *sip__exec_begin(sip__session_t *s, sip_request_t *const *reqs, size_t n) {
  sip__pool_t *p = s->pool;
  sip__exec_t *x = sip__calloc(1, sizeof *x);
  if (!x) return NULL; /* runs unwatched */
  x->start_us = sip__now_us();
  x->reqs = reqs;
  x->n = n;
  x->ctx = s->ctx;
  x->backend = p->backend;
  x->life = p->life;
  pthread_mutex_lock(&p->mu);
  s->exec = x;
  pthread_mutex_unlock(&p->mu);
  return x;
}

int sip__exec_end(sip__session_t *s, sip__exec_t *x) {
  if (!x) return 1;
  int running = 0;
  if (!atomic_compare_exchange_strong(&x->state, &running, 1)) return 0;
  pthread_mutex_lock(&s->pool->mu);
  if (s->exec == x) s->exec = NULL;
  pthread_mutex_unlock(&s->pool->mu);
  sip__free(x);
  return 1;
}

int sip__exec_abandoned(const sip__exec_t *x) { return x && atomic_load(&x->state) == 2; }

void sip__exec_abandoned_exit(sip__exec_t *x) {
  sip__pool_life_t *l = x->life;
  /* The model is alive: the pool waits for this thread before freeing it
   * (or, past the wait, never frees it). */
  if (x->ctx) x->backend->session_free(x->ctx);
  sip__free(x);
  atomic_fetch_sub(&l->running, 1);
  life_unref(l);
}

int sip__avail_wait_abandoned(sip__pool_t *p) {
  for (int ms = 0; atomic_load(&p->life->running) > 0; ms += 2) {
    if (ms >= ABANDONED_WAIT_MS) {
      sip__log(SIP__LOG_WARN, "hung executions still running at stop; the model stays in memory",
               "pool=%s executions=%ld", p->cfg->name, (long)atomic_load(&p->life->running));
      return 0;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  return 1;
}

/* ---- session failure and replacement ---- */

static void note_failure(sip__session_t *s, const char *why) {
  sip__pool_t *p = s->pool;
  s->failed_at_us = sip__now_us();
  atomic_fetch_add(&s->failures, 1);
  atomic_fetch_add(&p->n_session_failures, 1);
  sip__session_set_state(s, SIP__SESSION_FAILED);
  pthread_mutex_lock(&p->mu);
  snprintf(s->last_failure, sizeof s->last_failure, "%s", why);
  pthread_mutex_unlock(&p->mu);
  sip__log(SIP__LOG_WARN, "session failed", "session=%s reason=\"%s\"", s->id, why);
}

/* FAILED → INIT → READY on a new context (a warm standby when the pool
 * has one); 0 when none could be made (the session stays FAILED). */
static int new_context(sip__session_t *s) {
  sip__pool_t *p = s->pool;
  sip__session_set_state(s, SIP__SESSION_INIT);
  pthread_mutex_lock(&p->mu);
  s->ctx = p->n_standby ? p->standby[--p->n_standby] : NULL;
  if (s->ctx) pthread_cond_broadcast(&p->wd_cv); /* the watchdog makes a new one */
  pthread_mutex_unlock(&p->mu);
  if (s->ctx) {
    atomic_fetch_add(&p->n_promotions, 1);
    sip__session_set_state(s, SIP__SESSION_READY);
    return 1;
  }
  sip_error_t *e = p->backend->session_new(p->model, &s->ctx);
  if (e) {
    s->ctx = NULL;
    sip__session_set_state(s, SIP__SESSION_FAILED);
    sip__log(SIP__LOG_ERROR, "session not replaced", "session=%s reason=\"%s\"", s->id,
             sip_error_message(e));
    sip_error_free(e);
    return 0;
  }
  sip__session_set_state(s, SIP__SESSION_READY);
  return 1;
}

int sip__session_renew(sip__session_t *s, const char *why) {
  note_failure(s, why);
  if (s->ctx) s->pool->backend->session_free(s->ctx);
  s->ctx = NULL;
  return new_context(s);
}

/* The watchdog found `x` (abandoned, taken out of `s`) running too long. */
static void handle_hung(sip__pool_t *p, sip__session_t *s, pthread_t old, sip_request_t **reqs,
                        size_t n, uint64_t start_us, uint64_t now) {
  pthread_detach(old);
  sip__arbiter_release(&p->eng->arbiter, &s->ticket, (now - start_us) * 1000, 0);
  char why[256];
  snprintf(why, sizeof why, "session %s hung for %llu ms", s->id,
           (unsigned long long)((now - start_us) / 1000));
  note_failure(s, why);
  s->ctx = NULL; /* the abandoned thread frees its own */
  s->thread_started = 0;
  /* A new thread on a new context takes the slot before the requests are
   * failed over, so that a retry finds the pool at full strength. */
  if (new_context(s)) {
    if (pthread_create(&s->thread, NULL, sip__session_main, s) == 0) {
      s->thread_started = 1;
      sip__session_name_thread(s);
    } else
      sip__log(SIP__LOG_ERROR, "session not replaced", "session=%s reason=\"no thread\"", s->id);
  }
  for (size_t i = 0; i < n; i++)
    sip__pool_fail_over(p, reqs[i], SIP_UNAVAILABLE, why, start_us - reqs[i]->sched.arrival_us);
}

void sip__session_first_answer(sip__session_t *s) {
  uint64_t us = sip__now_us() - s->failed_at_us;
  s->failed_at_us = 0;
  atomic_store(&s->pool->last_recovery_us, us);
  sip__log(SIP__LOG_INFO, "session recovered", "session=%s failure_to_first_answer_us=%llu",
           s->id, (unsigned long long)us);
}

/* ---- hot standby ---- */

/* A new backend context, warmed by one execution on zeros of the model's
 * own input shapes (dynamic dims 1); NULL after logging why not. */
static void *warm_context(sip__pool_t *p) {
  void *ctx = NULL;
  sip_error_t *e = p->backend->session_new(p->model, &ctx);
  const sip_io_desc_t *ins, *outs;
  size_t n_in = 0, n_out = 0;
  p->backend->describe(p->model, &ins, &n_in, &outs, &n_out);
  sip_tensor_t *in[64] = {0}, *out[64] = {0};
  const char *names[64];
  if (!e && (n_in > 64 || n_out > 64))
    e = sip_error_new(SIP_UNIMPLEMENTED, "more than 64 inputs or outputs");
  for (size_t i = 0; !e && i < n_in; i++) {
    int64_t dims[SIP_MAX_RANK];
    int rank = ins[i].rank < 0 ? 1 : ins[i].rank;
    size_t count = 1;
    for (int k = 0; k < rank; k++) count *= (size_t)(dims[k] = ins[i].rank < 0 || ins[i].dims[k] < 0 ? 1 : ins[i].dims[k]);
    size_t bytes = count * sip_dtype_size(ins[i].dtype);
    void *zeros = sip__calloc(1, bytes ? bytes : 1);
    if (ins[i].dtype == SIP_DTYPE_STRING || !zeros)
      e = zeros ? sip_error_new(SIP_UNIMPLEMENTED, "input '%s' is STRING", ins[i].name)
                : SIP__OOM();
    else if (!(in[i] = sip_tensor_new_copy(ins[i].name, ins[i].dtype, rank, dims, zeros, bytes)))
      e = SIP__OOM();
    sip__free(zeros);
  }
  for (size_t j = 0; j < n_out; j++) names[j] = outs[j].name;
  if (!e) e = p->backend->execute(ctx, (const sip_tensor_t *const *)in, n_in, names, n_out, out);
  for (size_t i = 0; i < 64; i++) sip_tensor_free(in[i]), sip_tensor_free(out[i]);
  if (!e) return ctx;
  sip__log(SIP__LOG_ERROR, "standby session not made", "pool=%s reason=\"%s\"", p->cfg->name,
           sip_error_message(e));
  sip_error_free(e);
  if (ctx) p->backend->session_free(ctx);
  return NULL;
}

/* Tops the standbys up (caller holds mu; released while a context is made). */
static void refill_standby(sip__pool_t *p) {
  int want = p->cfg->standby_enabled ? p->cfg->standby_count : 0;
  while (!p->stopping && !p->standby_broken && p->n_standby < want) {
    pthread_mutex_unlock(&p->mu);
    void *ctx = warm_context(p);
    pthread_mutex_lock(&p->mu);
    if (!ctx) p->standby_broken = 1;
    else p->standby[p->n_standby++] = ctx;
  }
}

static void *watchdog_main(void *arg) {
  sip__pool_t *p = arg;
  pthread_setname_np(pthread_self(), "sip-watchdog");
  uint64_t hang_us = (uint64_t)p->cfg->hang_timeout_ms * 1000;
  uint64_t period_us = (uint64_t)p->cfg->health_check_interval_ms * 1000;
  if (!period_us) period_us = (uint64_t)p->cfg->standby_health_ms * 1000;
  /* A hung execution is answered within a twentieth of hang_timeout_ms
   * (at most 25 ms) of the timeout. */
  if (hang_us && (!period_us || period_us > hang_us / 20)) period_us = hang_us / 20;
  if (period_us > 25000 && hang_us) period_us = 25000;
  if (!period_us) period_us = 1000000; /* only standbys to keep: woken when one is taken */
  if (period_us < 1000) period_us = 1000;
  pthread_mutex_lock(&p->mu);
  refill_standby(p);
  while (!p->stopping) {
    struct timespec ts;
    uint64_t until = sip__now_us() + period_us;
    ts.tv_sec = (time_t)(until / 1000000);
    ts.tv_nsec = (long)(until % 1000000) * 1000;
    pthread_cond_timedwait(&p->wd_cv, &p->mu, &ts);
    refill_standby(p);
    if (p->stopping || !hang_us) continue;
    for (int i = 0; i < p->n_sessions && !p->stopping; i++) {
      sip__session_t *s = &p->sessions[i];
      sip__exec_t *x = s->exec;
      int running = 0;
      /* Read per session: a failed-over request may have started on the
       * next one while the lock was released for the previous one. */
      uint64_t now = sip__now_us();
      if (!x || now < x->start_us + hang_us) continue;
      if (p->iso) {
        /* A worker process can be stopped: it is killed, the execution
         * fails as its session's failure, and the worker restarts. */
        if (!x->killed) {
          char why[256];
          snprintf(why, sizeof why, "session %s hung for %llu ms", s->id,
                   (unsigned long long)((now - x->start_us) / 1000));
          x->killed = 1;
          sip__iso_t *iso = p->iso;
          pthread_mutex_unlock(&p->mu);
          sip__iso_kill(iso, why);
          pthread_mutex_lock(&p->mu);
        }
        continue;
      }
      /* Read before the claim: once x is abandoned its thread may free it
       * at any moment (while it is not, p->mu keeps it: a thread that
       * finished first clears s->exec under the lock before freeing). */
      uint64_t start = x->start_us;
      size_t n = x->n;
      sip_request_t **reqs = sip__calloc(n ? n : 1, sizeof *reqs);
      if (!reqs) continue; /* out of memory: tried again next period */
      memcpy(reqs, x->reqs, n * sizeof *reqs);
      if (!atomic_compare_exchange_strong(&x->state, &running, 2)) {
        sip__free(reqs);
        continue;
      }
      s->exec = NULL;
      atomic_fetch_add(&p->life->refs, 1);
      atomic_fetch_add(&p->life->running, 1);
      pthread_t old = s->thread;
      pthread_mutex_unlock(&p->mu);
      /* The abandoned thread owns x now and touches nothing else. */
      handle_hung(p, s, old, reqs, n, start, now);
      sip__free(reqs);
      pthread_mutex_lock(&p->mu);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void sip__avail_start(sip__pool_t *p) {
  int standby = p->cfg->standby_enabled ? p->cfg->standby_count : 0;
  if (standby && !(p->standby = sip__calloc((size_t)standby, sizeof *p->standby))) return;
  if (!p->cfg->hang_timeout_ms && !p->cfg->health_check_interval_ms && !standby) return;
  if (pthread_create(&p->watchdog, NULL, watchdog_main, p) == 0)
    p->watchdog_started = 1;
  else
    sip__log(SIP__LOG_ERROR, "watchdog not started", "pool=%s", p->cfg->name);
}

void sip__avail_stop(sip__pool_t *p) {
  if (p->watchdog_started) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wd_cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->watchdog, NULL);
    p->watchdog_started = 0;
  }
  /* Sessions still draining the queue may look for a standby meanwhile. */
  pthread_mutex_lock(&p->mu);
  void **standby = p->standby;
  int n = p->n_standby;
  p->standby = NULL;
  p->n_standby = 0;
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < n; i++) p->backend->session_free(standby[i]);
  sip__free(standby);
}

/* ---- failover ---- */

/* Puts `r` back in the pool's queue (its arrival, level and deadline
 * kept); 0 when the pool is stopping. */
static int requeue(sip__pool_t *p, sip_request_t *r) {
  pthread_mutex_lock(&p->mu);
  int ok = !p->stopping;
  if (ok) {
    sip__sched_push(&p->queue, r->sched.level, &r->sched);
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return ok;
}

/* POOL_FAILOVER for subscribers (docs/events.md): what took the request
 * ("retried on another session of the pool", or the fallback pool's name)
 * and why. */
static void failover_event(sip__pool_t *p, const char *to, const char *why) {
  char *text = sip__asprintf("%s: %s", to, why);
  sip__events_pool(p, SIP_EVENT_POOL_FAILOVER, text ? text : to);
  sip__free(text);
}

void sip__pool_fail_over(sip__pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                         uint64_t queue_us) {
  const sip__pool_config_t *c = p->cfg;
  /* A sequence's state lives in its session: its requests are not moved. */
  if (p->seq) {
    sip__pool_finish_failed(p, r, code, msg, queue_us);
    return;
  }
  if (c->failover_strategy == SIP__FAILOVER_RETRY && r->retries < (uint32_t)c->failover_max_retries) {
    r->retries++;
    atomic_fetch_add(&p->n_retries, 1);
    sip__log(SIP__LOG_INFO, "request retried", "pool=%s retry=%u reason=\"%s\"", c->name,
             r->retries, msg);
    failover_event(p, "retried on another session of the pool", msg);
    if (requeue(p, r)) return;
  }
  char *why = NULL;
  if (c->failover_strategy != SIP__FAILOVER_NONE && c->fallback_pool && !r->held_fallback) {
    sip_error_t *e = NULL;
    sip__pool_t *fb = sip__registry_find(p->eng, c->fallback_pool, NULL, &e);
    if (fb) {
      r->held_fallback = fb;
      r->retries++;
      atomic_fetch_add(&p->n_fallbacks, 1);
      sip__log(SIP__LOG_INFO, "request sent to the fallback pool", "pool=%s fallback=%s "
               "reason=\"%s\"", c->name, c->fallback_pool, msg);
      failover_event(p, c->fallback_pool, msg);
      /* The fallback pool takes r; its own failover applies there. */
      if (!(e = sip__pool_submit(fb, r))) return;
      r->held_fallback = NULL;
      sip__pool_unref(fb);
    }
    why = sip__asprintf("%s; the fallback pool '%s' refused it: %s", msg, c->fallback_pool,
                        sip_error_message(e));
    sip_error_free(e);
  }
  sip__pool_finish_failed(p, r, code, why ? why : msg, queue_us);
  sip__free(why);
}

/* ---- injected faults ---- */

sip__fault_kind_t sip__fault_take(sip__pool_t *p, const sip__session_t *s, int64_t *delay_ms) {
  if (!atomic_load_explicit(&p->fault_armed, memory_order_relaxed)) return SIP__FAULT_NONE;
  sip__fault_kind_t k = SIP__FAULT_NONE;
  pthread_mutex_lock(&p->mu);
  sip__fault_t *f = &p->fault;
  if (f->kind && (f->session < 0 || f->session == s->index)) {
    if (f->count > 0) {
      k = f->kind;
      if (--f->count == 0) atomic_store(&p->fault_armed, 0);
    } else if (f->rate > 0) {
      f->rng ^= f->rng << 13, f->rng ^= f->rng >> 7, f->rng ^= f->rng << 17; /* xorshift64 */
      if ((double)(f->rng >> 11) / 9007199254740992.0 < f->rate) k = f->kind;
    }
    *delay_ms = f->delay_ms;
  }
  pthread_mutex_unlock(&p->mu);
  return k;
}

sip_error_t *sip__pool_set_fault(sip__pool_t *p, const sip__fault_t *f) {
  if (atomic_load(&p->state) != SIP__POOL_READY)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is not serving (state %s)", p->cfg->name,
                         sip__pool_state_name(atomic_load(&p->state)));
  if (f->session >= p->n_sessions)
    return sip_error_new(SIP_INVALID_ARGUMENT, "pool '%s' has sessions 0..%d; got session %d",
                         p->cfg->name, p->n_sessions - 1, f->session);
  pthread_mutex_lock(&p->mu);
  uint64_t rng = p->fault.rng;
  p->fault = *f;
  p->fault.rng = rng;
  atomic_store(&p->fault_armed, f->kind != SIP__FAULT_NONE);
  pthread_mutex_unlock(&p->mu);
  sip__log(SIP__LOG_WARN, "fault injected", "pool=%s kind=%d session=%d count=%lld rate=%g "
           "delay_ms=%lld", p->cfg->name, f->kind, f->session, (long long)f->count, f->rate,
           (long long)f->delay_ms);
  return NULL;
}

/* ---- drain ---- */

sip_error_t *sip__session_drain(sip__pool_t *p, int index, int drain) {
  if (atomic_load(&p->state) != SIP__POOL_READY)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is not serving (state %s)", p->cfg->name,
                         sip__pool_state_name(atomic_load(&p->state)));
  if (index < 0 || index >= p->n_sessions)
    return sip_error_new(SIP_INVALID_ARGUMENT, "pool '%s' has sessions 0..%d; got session %d",
                         p->cfg->name, p->n_sessions - 1, index);
  sip__session_t *s = &p->sessions[index];
  pthread_mutex_lock(&p->mu);
  if (atomic_exchange(&s->drain, drain) != drain) atomic_fetch_add(&p->n_drained, drain ? 1 : -1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  sip__log(SIP__LOG_INFO, drain ? "session drained" : "session resumed", "session=%s", s->id);
  return NULL;
}

/* ---- the fallback pool's inputs and outputs ---- */

static int io_same(const sip_io_desc_t *a, size_t na, const sip_io_desc_t *b, size_t nb) {
  if (na != nb) return 0;
  for (size_t i = 0; i < na; i++) {
    size_t j = 0;
    while (j < nb && strcmp(a[i].name, b[j].name)) j++;
    if (j == nb || a[i].dtype != b[j].dtype || a[i].rank != b[j].rank) return 0;
    for (int k = 0; k < a[i].rank; k++)
      if (a[i].dims[k] != b[j].dims[k]) return 0;
  }
  return 1;
}

int sip__pool_fallback_fits(const sip__pool_t *p, const sip__pool_t *fb) {
  return io_same(p->inputs, p->n_inputs, fb->inputs, fb->n_inputs) &&
         io_same(p->outputs, p->n_outputs, fb->outputs, fb->n_outputs);
}

void sip__pool_check_fallback(sip__pool_t *p, sip__pool_t *const *all, size_t n) {
  const char *fb_name = p->cfg->fallback_pool;
  if (!fb_name || atomic_load(&p->state) != SIP__POOL_READY) return;
  for (size_t i = 0; i < n; i++) {
    sip__pool_t *fb = all[i];
    if (strcmp(fb->cfg->name, fb_name) || atomic_load(&fb->state) != SIP__POOL_READY) continue;
    if (sip__pool_fallback_fits(p, fb)) return;
    sip_error_t *e = sip_error_new(SIP_FAILED_PRECONDITION,
                                   "failover.fallback_pool '%s' takes other inputs or gives other "
                                   "outputs than pool '%s'; expected a pool of the same model "
                                   "signature",
                                   fb_name, p->cfg->name);
    sip__pool_stop_sessions(p, SIP__SESSION_FAILED);
    p->error = sip__asprintf("%s: %s", sip_code_name(sip_error_code(e)), sip_error_message(e));
    sip__log(SIP__LOG_ERROR, "pool failed to load", "pool=%s code=%s reason=\"%s\"",
             p->cfg->name, sip_code_name(sip_error_code(e)), sip_error_message(e));
    p->load_error = e;
    atomic_store(&p->state, SIP__POOL_FAILED);
    return;
  }
}
