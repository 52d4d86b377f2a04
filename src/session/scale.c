/* sip — changing a serving pool at run time (sip pool update): its size
 * and its quotas.
 *
 * A pool's session array has room for SIP__MAX_SESSIONS from the start, so
 * growing never moves a session: a new session gets a backend context on
 * the model already loaded (nothing is read from disk) and a thread, and
 * serves as soon as it starts. Shrinking marks the last sessions retired:
 * each finishes what it runs, ends its thread when it holds no work, and is
 * freed; requests queued meanwhile go to the sessions that stay. */
#include <string.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/observe/events.h"
#include "session/pool_impl.h"

/* Starts sessions [n_sessions, n); on failure stops at the first that
 * could not start (the error says why). */
static sip_error_t *grow(sip__pool_t *p, int n) {
  for (int i = p->n_sessions; i < n; i++) {
    sip__session_t *s = &p->sessions[i];
    pthread_mutex_lock(&p->mu);
    int stopping = p->stopping; /* a shutdown joins the sessions it sees: start no more */
    pthread_mutex_unlock(&p->mu);
    if (stopping) return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is shutting down", p->cfg->name);
    sip__session_init(p, s, i);
    sip_error_t *e = p->backend->session_new(p->model, &s->ctx);
    if (!e) {
      sip__session_set_state(s, SIP__SESSION_READY);
      if (pthread_create(&s->thread, NULL, sip__session_main, s) != 0) {
        p->backend->session_free(s->ctx);
        s->ctx = NULL;
        e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start a thread for session %d", i);
      }
    }
    if (e) {
      sip__arb_ticket_destroy(&s->ticket);
      return e;
    }
    s->thread_started = 1;
    sip__session_name_thread(s);
    pthread_mutex_lock(&p->mu);
    p->n_sessions = i + 1;
    pthread_mutex_unlock(&p->mu);
  }
  return NULL;
}

/* Stops sessions [n, n_sessions): each ends once it holds no work. */
static void shrink(sip__pool_t *p, int n) {
  int top = p->n_sessions;
  pthread_mutex_lock(&p->mu);
  for (int i = n; i < top; i++) {
    sip__session_t *s = &p->sessions[i];
    atomic_store(&s->retire, 1);
    /* A drained session that goes no longer counts as drained. */
    if (atomic_exchange(&s->drain, 0)) atomic_fetch_sub(&p->n_drained, 1);
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = top - 1; i >= n; i--) {
    sip__session_t *s = &p->sessions[i];
    if (s->thread_started) pthread_join(s->thread, NULL);
    s->thread_started = 0;
    pthread_mutex_lock(&p->mu);
    void *ctx = s->ctx;
    s->ctx = NULL;
    p->n_sessions = i;
    pthread_mutex_unlock(&p->mu);
    if (ctx) p->backend->session_free(ctx);
    sip__session_set_state(s, SIP__SESSION_DESTROYED);
    sip__arb_ticket_destroy(&s->ticket);
  }
}

/* Grows to `size` measuring what the new sessions add (*grown, and *each
 * per session); on failure the pool is back at its old size. What new
 * sessions add is measured as a load's is (footprint.c): the growth of the
 * process holding them (the worker for isolated pools); sessions that go
 * take back what one session was measured to add. */
static sip_error_t *grow_measured(sip__pool_t *p, int size, uint64_t *grown, uint64_t *each) {
  int old = p->n_sessions;
  int wpid = p->iso ? atomic_load(&p->worker_pid) : 0;
  uint64_t rss0 = wpid ? sip__resident_bytes_of(wpid) : sip__resident_settled();
  sip_error_t *e = grow(p, size);
  uint64_t rss1 = wpid ? sip__resident_bytes_of(wpid) : sip__resident_settled();
  *grown = rss1 > rss0 ? rss1 - rss0 : 0;
  *each = *grown / (uint64_t)(size - old);
  if (e) {
    shrink(p, old);
    *grown = 0;
  }
  return e;
}

sip_error_t *sip__pool_update(sip__pool_t *p, int size, int64_t max_memory_mb,
                              int max_compute_percent) {
  const char *name = p->cfg->name;
  if (size < 0 || size > SIP__MAX_SESSIONS)
    return sip_error_new(SIP_INVALID_ARGUMENT, "pool_size must be 1..%d; got %d",
                         SIP__MAX_SESSIONS, size);
  if (max_memory_mb < -1 || max_memory_mb > 1048576)
    return sip_error_new(SIP_INVALID_ARGUMENT, "max_memory_mb must be 0 (unlimited) .. 1048576; "
                         "got %lld", (long long)max_memory_mb);
  if (max_compute_percent < -1 || max_compute_percent > 100)
    return sip_error_new(SIP_INVALID_ARGUMENT, "max_compute_percent must be 0 (unset) .. 100; "
                         "got %d", max_compute_percent);
  pthread_mutex_lock(&p->scale_mu);
  sip_error_t *e = NULL;
  int old = p->n_sessions;
  if (atomic_load(&p->state) != SIP__POOL_READY)
    e = sip_error_new(SIP_UNAVAILABLE, "pool '%s' is not serving (state %s)", name,
                      sip__pool_state_name(atomic_load(&p->state)));
  else if (size && size != old && p->seq)
    e = sip_error_new(SIP_FAILED_PRECONDITION, "pool '%s' batches sequences: its sessions hold "
                      "sequence state, so its size changes only with its config (reload)", name);
  else if (size > p->cap_sessions)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "pool '%s' holds at most %d sessions; got %d", name,
                      p->cap_sessions, size);
  int64_t mem = max_memory_mb >= 0 ? max_memory_mb : atomic_load(&p->quota_memory_mb);
  uint64_t grown = 0, each = p->session_bytes;
  if (!e && size > old) e = grow_measured(p, size, &grown, &each);
  uint64_t bytes = p->memory_bytes + grown;
  if (size && size < old) {
    uint64_t gone = (uint64_t)(old - size) * p->session_bytes;
    bytes = bytes > gone ? bytes - gone : 0;
  }
  if (!e && mem && bytes > (uint64_t)mem << 20) {
    int now = p->n_sessions;
    if (now > old) shrink(p, old);
    e = sip_error_new(SIP_RESOURCE_EXHAUSTED,
                      "pool '%s' with %d sessions takes %.1f MiB (measured); its quota "
                      "(max_memory_mb) allows %lld MiB",
                      name, now, (double)bytes / 1048576.0, (long long)mem);
  }
  char what[160] = "";
  size_t w = 0;
  if (!e) {
    if (size && size < old) shrink(p, size);
    if (size && size != old) {
      p->memory_bytes = bytes;
      p->session_bytes = each;
      atomic_store(&p->size, size);
      w += (size_t)snprintf(what + w, sizeof what - w, "pool_size %d -> %d", old, size);
    }
    if (max_memory_mb >= 0 && max_memory_mb != atomic_load(&p->quota_memory_mb)) {
      w += (size_t)snprintf(what + w, sizeof what - w, "%smax_memory_mb %lld -> %lld",
                            w ? ", " : "", (long long)atomic_load(&p->quota_memory_mb),
                            (long long)max_memory_mb);
      atomic_store(&p->quota_memory_mb, max_memory_mb);
      /* the backend's cap on what the model allocates while it serves */
      if (p->backend->memory_limit) p->backend->memory_limit(p->model, max_memory_mb);
    }
    if (max_compute_percent >= 0 &&
        max_compute_percent != atomic_load(&p->quota_compute_percent)) {
      w += (size_t)snprintf(what + w, sizeof what - w, "%smax_compute_percent %d -> %d",
                            w ? ", " : "", atomic_load(&p->quota_compute_percent),
                            max_compute_percent);
      atomic_store(&p->quota_compute_percent, max_compute_percent);
      sip__arbiter_set_weight(&p->eng->arbiter, &p->arb, max_compute_percent);
    }
  }
  pthread_mutex_unlock(&p->scale_mu);
  if (e) return e;
  if (w) {
    sip__log(SIP__LOG_INFO, "pool updated", "pool=%s change=\"%s\"", name, what);
    sip__events_pool(p, SIP_EVENT_POOL_SCALED, what);
  }
  return NULL;
}

int sip__pool_scale_to(sip__pool_t *p, int want, uint64_t room_bytes, const char *why,
                       char *note, size_t note_cap, int *capped) {
  const char *name = p->cfg->name;
  if (note_cap) note[0] = '\0';
  *capped = 0;
  if (want < 0) want = 0;
  if (want > p->cap_sessions) want = p->cap_sessions;
  pthread_mutex_lock(&p->scale_mu);
  pthread_mutex_lock(&p->mu);
  int old = p->n_sessions, stopping = p->stopping;
  pthread_mutex_unlock(&p->mu);
  if (stopping || p->seq || atomic_load(&p->state) != SIP__POOL_READY || want == old) {
    pthread_mutex_unlock(&p->scale_mu);
    return old;
  }
  /* What fits: the pool's quota and the server's room, at the measured
   * bytes per session (none measured yet: one session at a time). */
  int fit = want;
  const char *cap_by = NULL;
  uint64_t each = p->session_bytes, quota = (uint64_t)atomic_load(&p->quota_memory_mb) << 20;
  if (want > old && each) {
    uint64_t by_quota = !quota ? UINT64_MAX
                        : quota > p->memory_bytes ? (quota - p->memory_bytes) / each : 0;
    uint64_t by_room = room_bytes / each, more = (uint64_t)(want - old);
    if (by_quota < more) {
      more = by_quota;
      cap_by = "resource_quota.max_memory_mb";
    }
    if (by_room < more) {
      more = by_room;
      cap_by = "server.memory_budget_mb";
    }
    fit = old + (int)more;
  } else if (want > old && (quota || room_bytes != UINT64_MAX) && want > old + 1) {
    fit = old + 1;
  }
  /* A pool whose sessions were all released gets its first one back
   * whatever the room: its requests wait for it, and a pool with requests
   * queued is never evicted to make that room. */
  if (!old && want > 0 && fit < 1) fit = 1;
  uint64_t grown = 0, bytes = p->memory_bytes;
  sip_error_t *e = NULL;
  if (fit > old) {
    e = grow_measured(p, fit, &grown, &each);
    if (!e) bytes += grown;
  } else if (fit < old) {
    uint64_t gone = (uint64_t)(old - fit) * p->session_bytes;
    shrink(p, fit);
    bytes = bytes > gone ? bytes - gone : 0;
    /* The heap pages the sessions freed go back to the system now, not at
     * the allocator's next trim: releasing idle sessions is for memory. */
    (void)sip__resident_settled();
  }
  int now = p->n_sessions;
  if (now != old) {
    p->memory_bytes = bytes;
    if (grown) p->session_bytes = each;
    atomic_store(&p->size, now);
  }
  pthread_mutex_unlock(&p->scale_mu);
  int w = 0;
  *capped = cap_by && fit < want;
  if (now != old)
    w = snprintf(note, note_cap, "sessions %d -> %d (%s)", old, now, why);
  if (cap_by && fit < want && note_cap > (size_t)(w > 0 ? w : 0))
    w += snprintf(note + w, note_cap - (size_t)w, "%swanted %d, capped at %d by %s (%.1f KiB per "
                  "session measured)", w ? "; " : "", want, fit, cap_by, (double)each / 1024.0);
  if (e) {
    sip__log(SIP__LOG_WARN, "autoscale failed to add sessions", "pool=%s wanted=%d reason=\"%s\"",
             name, fit, sip_error_message(e));
    sip_error_free(e);
  }
  if (now != old) {
    sip__log(SIP__LOG_INFO, "pool autoscaled", "pool=%s change=\"%s\"", name, note);
    sip__events_pool(p, SIP_EVENT_POOL_SCALED, note);
  }
  return now;
}
