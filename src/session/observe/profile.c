/* sip — operator profiling of one session (sip profile): the session's
 * backend context is swapped for a profiled one for a while, then back.
 *
 * The swap happens while the session is out of service and idle (drained,
 * SUSPENDED): the executor reads its context only while it runs, so neither
 * context is touched mid-execution. The pool keeps serving on its other
 * sessions meanwhile; a pool of one session queues for the instant of each
 * swap. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/pool_impl.h"

/* Waits (bounded) until drained session s holds no work. */
static sip_error_t *wait_idle(sip__session_t *s, uint64_t timeout_us) {
  uint64_t until = sip__now_us() + timeout_us;
  for (;;) {
    int st = atomic_load(&s->state);
    if (st == SIP__SESSION_SUSPENDED || st == SIP__SESSION_FAILED) return NULL;
    if (sip__now_us() > until)
      return sip_error_new(SIP_DEADLINE_EXCEEDED, "session %s did not finish its work within "
                           "%llu ms to be profiled", s->id,
                           (unsigned long long)(timeout_us / 1000));
    usleep(200);
  }
}

/* Drains session `s`, waits for it, puts `ctx` in its place (the old one
 * in *old), and gives it back to service unless it was drained before. */
static sip_error_t *swap_ctx(sip__pool_t *p, sip__session_t *s, void *ctx, void **old,
                             int was_drained) {
  sip_error_t *e = sip__session_drain(p, s->index, 1);
  if (!e) e = wait_idle(s, 30 * UINT64_C(1000000));
  if (!e) {
    pthread_mutex_lock(&p->mu);
    if (!s->ctx) {
      e = sip_error_new(SIP_UNAVAILABLE, "session %s failed while it was being profiled", s->id);
    } else {
      *old = s->ctx;
      s->ctx = ctx;
    }
    pthread_mutex_unlock(&p->mu);
  }
  if (!was_drained) sip_error_free(sip__session_drain(p, s->index, 0));
  return e;
}

sip_error_t *sip__pool_profile(sip__pool_t *p, int index, uint64_t ms, char **trace) {
  *trace = NULL;
  const sip_backend_vtable_t *vt = p->backend;
  if (atomic_load(&p->state) != SIP__POOL_READY)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is not serving (state %s)", p->cfg->name,
                         sip__pool_state_name(atomic_load(&p->state)));
  if (p->iso)
    return sip_error_new(SIP_FAILED_PRECONDITION, "pool '%s' runs in a worker process "
                         "(isolation: process), where the operator profiler does not reach; "
                         "expected a pool with isolation: thread", p->cfg->name);
  if (!vt->session_new_profiled || !vt->profile_end)
    return sip_error_new(SIP_FAILED_PRECONDITION, "pool '%s': backend %s has no operator "
                         "profiler; expected a pool whose backend has one (session_new_profiled)",
                         p->cfg->name, vt->name);
  if (p->seq)
    return sip_error_new(SIP_FAILED_PRECONDITION, "pool '%s' batches sequences: its sessions hold "
                         "sequence state and are not profiled", p->cfg->name);
  pthread_mutex_lock(&p->scale_mu); /* the session stays while it is profiled */
  sip_error_t *e = NULL;
  if (index < 0 || index >= p->n_sessions)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "pool '%s' has sessions 0..%d; got session %d",
                      p->cfg->name, p->n_sessions - 1, index);
  char dir[] = "/tmp/sip-profile-XXXXXX";
  if (!e && !mkdtemp(dir))
    e = sip_error_new(SIP_INTERNAL, "cannot make a directory for the profile");
  char *prefix = e ? NULL : sip__asprintf("%s/profile", dir);
  if (!e && !prefix) e = SIP__OOM();
  void *prof = NULL, *orig = NULL, *back = NULL;
  if (!e) e = vt->session_new_profiled(p->model, prefix, &prof);
  sip__session_t *s = e ? NULL : &p->sessions[index];
  int was_drained = s && atomic_load(&s->drain);
  if (!e) e = swap_ctx(p, s, prof, &orig, was_drained);
  if (!e) {
    sip__log(SIP__LOG_INFO, "profiling session", "session=%s ms=%llu", s->id,
             (unsigned long long)ms);
    /* The wait ends early when the pool stops (a drain, an unload). */
    uint64_t until = sip__now_us() + ms * 1000;
    for (int stop = 0; !stop && sip__now_us() < until;) {
      usleep(20000);
      pthread_mutex_lock(&p->mu);
      stop = p->stopping;
      pthread_mutex_unlock(&p->mu);
    }
    e = swap_ctx(p, s, orig, &back, was_drained);
    if (e) { /* the session failed meanwhile: the profiled context went with it */
      vt->session_free(orig);
      prof = NULL;
    } else if (back != prof) { /* it failed and was given a new context */
      vt->session_free(back);
      prof = NULL;
      e = sip_error_new(SIP_UNAVAILABLE, "session %s failed while it was being profiled", s->id);
    } else {
      e = vt->profile_end(back, trace);
    }
  }
  if (prof) vt->session_free(prof);
  pthread_mutex_unlock(&p->scale_mu);
  if (prefix) rmdir(dir); /* the backend removed its file */
  sip__free(prefix);
  return e;
}
