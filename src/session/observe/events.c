/* sip — the engine's event bus and the bounded event ring
 * (include/sip/events.h, src/session/observe/events.h, docs/events.md).
 *
 * Subscribers are few and change rarely; events are many. Emitting takes
 * the bus lock (shared) only when someone listens (an atomic count says
 * so), and a subscriber's callback is expected to be a ring push: one short
 * lock and a copy. Readers of a ring never hold the bus. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/redact.h"
#include "core/core.h"
#include "session/engine.h"
#include "session/observe/events.h"
#include "session/pool_impl.h"

/* ---- types ---- */

static const char *type_names[SIP_EVENT_TYPES_] = {
    [SIP_EVENT_STATE_CHANGE] = "STATE_CHANGE", [SIP_EVENT_INFERENCE_COMPLETE] = "INFERENCE_COMPLETE",
    [SIP_EVENT_ERROR] = "ERROR",               [SIP_EVENT_POOL_LOADED] = "POOL_LOADED",
    [SIP_EVENT_POOL_FAILED] = "POOL_FAILED",   [SIP_EVENT_POOL_SCALED] = "POOL_SCALED",
    [SIP_EVENT_POOL_FAILOVER] = "POOL_FAILOVER", [SIP_EVENT_ALERT] = "ALERT",
    [SIP_EVENT_MODEL_LOADED] = "MODEL_LOADED", [SIP_EVENT_MODEL_EVICTED] = "MODEL_EVICTED"};

const char *sip_event_type_name(sip_event_type_t t) {
  return (unsigned)t < SIP_EVENT_TYPES_ && type_names[t] ? type_names[t] : "UNKNOWN";
}

char *sip_event_json(const sip_event_t *ev, uint64_t dropped) {
  json_t *o = json_pack("{s:s,s:I,s:s,s:s,s:I}", "event", sip_event_type_name(ev->type),
                        "time_us", (json_int_t)ev->time_us, "pool", ev->pool, "session",
                        ev->session, "dropped", (json_int_t)dropped);
  int bad = !o;
  switch (ev->type) {
  case SIP_EVENT_STATE_CHANGE:
    bad = bad || json_object_set_new(o, "old_state", json_string(ev->old_state)) ||
          json_object_set_new(o, "new_state", json_string(ev->new_state)) ||
          json_object_set_new(o, "reason", json_string(ev->text));
    break;
  case SIP_EVENT_INFERENCE_COMPLETE:
    bad = bad || json_object_set_new(o, "request_id", json_integer((json_int_t)ev->request_id)) ||
          json_object_set_new(o, "latency_ms", json_real(ev->latency_ms)) ||
          json_object_set_new(o, "queue_ms", json_real(ev->queue_ms)) ||
          json_object_set_new(o, "batch_size", json_integer(ev->batch_size));
    break;
  case SIP_EVENT_ERROR:
    bad = bad || json_object_set_new(o, "request_id", json_integer((json_int_t)ev->request_id)) ||
          json_object_set_new(o, "code", json_string(sip_code_name((sip_code_t)ev->code))) ||
          json_object_set_new(o, "message", json_string(ev->text)) ||
          json_object_set_new(o, "latency_ms", json_real(ev->latency_ms));
    break;
  case SIP_EVENT_ALERT: {
    /* old_state → new_state is the level's change: up is a firing, down to
     * "none" a resolution of the level that was on. */
    int resolved = !strcmp(ev->new_state, "none");
    bad = bad ||
          json_object_set_new(o, "level", json_string(resolved ? ev->old_state : ev->new_state)) ||
          json_object_set_new(o, "state", json_string(resolved ? "resolved" : "firing")) ||
          json_object_set_new(o, "previous_level", json_string(ev->old_state)) ||
          json_object_set_new(o, "reason", json_string(ev->text));
    break;
  }
  default:
    bad = bad || json_object_set_new(o, "message", json_string(ev->text));
  }
  char *txt = bad ? NULL : json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!txt) return NULL;
  /* Streamed to clients: without the server's directories (core/redact.h). */
  size_t rn = 0;
  char *out = sip__redacted(txt, strlen(txt), &rn);
  if (!out) out = sip__strdup(txt); /* sip_free-able */
  free(txt);
  return out;
}

/* ---- the bus ---- */

struct sip_event_sub {
  char *pool; /* NULL: every pool */
  sip_event_fn fn;
  void *user;
};

struct sip__event_bus {
  /* Emitters read-lock (executors of different sessions emit at once);
   * subscribing and unsubscribing write-lock. */
  pthread_rwlock_t mu;
  atomic_int n; /* subscribers, read without the lock */
  sip_event_sub_t **subs;
  size_t cap;
};

sip__event_bus_t *sip__event_bus_new(void) {
  sip__event_bus_t *b = sip__calloc(1, sizeof *b);
  if (b) pthread_rwlock_init(&b->mu, NULL);
  return b;
}

void sip__event_bus_free(sip__event_bus_t *b) {
  if (!b) return;
  for (int i = 0; i < atomic_load(&b->n); i++) {
    sip__free(b->subs[i]->pool);
    sip__free(b->subs[i]);
  }
  sip__free(b->subs);
  pthread_rwlock_destroy(&b->mu);
  sip__free(b);
}

sip_error_t *sip__event_subscribe(sip__event_bus_t *b, const char *pool, sip_event_fn fn,
                                  void *user, sip_event_sub_t **out) {
  *out = NULL;
  if (!fn) return sip_error_new(SIP_INVALID_ARGUMENT, "event subscription without a callback");
  if (!b) return SIP__OOM();
  sip_event_sub_t *s = sip__calloc(1, sizeof *s);
  if (!s || (pool && *pool && !(s->pool = sip__strdup(pool)))) {
    sip__free(s);
    return SIP__OOM();
  }
  s->fn = fn;
  s->user = user;
  pthread_rwlock_wrlock(&b->mu);
  size_t n = (size_t)atomic_load(&b->n);
  if (n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 8;
    sip_event_sub_t **v = sip__realloc(b->subs, cap * sizeof *v);
    if (!v) {
      pthread_rwlock_unlock(&b->mu);
      sip__free(s->pool);
      sip__free(s);
      return SIP__OOM();
    }
    b->subs = v;
    b->cap = cap;
  }
  b->subs[n] = s;
  atomic_store(&b->n, (int)n + 1);
  pthread_rwlock_unlock(&b->mu);
  *out = s;
  return NULL;
}

void sip__event_unsubscribe(sip__event_bus_t *b, sip_event_sub_t *sub) {
  if (!b || !sub) return;
  pthread_rwlock_wrlock(&b->mu);
  int n = atomic_load(&b->n);
  for (int i = 0; i < n; i++) {
    if (b->subs[i] != sub) continue;
    memmove(&b->subs[i], &b->subs[i + 1], (size_t)(n - i - 1) * sizeof *b->subs);
    atomic_store(&b->n, n - 1);
    break;
  }
  pthread_rwlock_unlock(&b->mu);
  sip__free(sub->pool);
  sip__free(sub);
}

void sip__event_emit(sip__event_bus_t *b, sip_event_t *ev) {
  if (!b || !atomic_load_explicit(&b->n, memory_order_relaxed)) return;
  pthread_rwlock_rdlock(&b->mu);
  int n = atomic_load(&b->n);
  ev->time_us = 0;
  for (int i = 0; i < n; i++) {
    sip_event_sub_t *s = b->subs[i];
    if (s->pool && strcmp(s->pool, ev->pool)) continue;
    if (!ev->time_us) ev->time_us = sip__wall_us(); /* only for events someone takes */
    s->fn(ev, s->user);
  }
  pthread_rwlock_unlock(&b->mu);
}

/* ---- emission points ---- */

static int listening(const sip__engine_t *e) {
  return e && e->events && atomic_load_explicit(&((sip__event_bus_t *)e->events)->n,
                                                memory_order_relaxed);
}

/* Truncating copy; snprintf's formatting costs more than the rest of an
 * emission. */
static void copy(char *dst, size_t cap, const char *src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  memcpy(dst, src ? src : "", n);
  dst[n] = '\0';
}

/* Why a session moved, from where it went. */
static const char *reason_of(int from, int to) {
  switch (to) {
  case SIP__SESSION_READY:
    return from == SIP__SESSION_RUNNING ? "execution finished"
           : from == SIP__SESSION_INIT  ? "loaded"
                                        : "resumed";
  case SIP__SESSION_RUNNING: return "execution started";
  case SIP__SESSION_SUSPENDED: return "suspended";
  case SIP__SESSION_FAILED: return "failed";
  case SIP__SESSION_DESTROYED: return "stopped";
  default: return "reset";
  }
}

void sip__events_state(sip__session_t *s, int from, int to) {
  sip__engine_t *e = s->pool ? s->pool->eng : NULL;
  if (!listening(e)) return;
  sip_event_t ev = {.type = SIP_EVENT_STATE_CHANGE};
  copy(ev.pool, sizeof ev.pool, s->pool->cfg ? s->pool->cfg->name : "");
  copy(ev.session, sizeof ev.session, s->id);
  copy(ev.old_state, sizeof ev.old_state, sip__session_state_name((sip__session_state_t)from));
  copy(ev.new_state, sizeof ev.new_state, sip__session_state_name((sip__session_state_t)to));
  copy(ev.text, sizeof ev.text, reason_of(from, to));
  sip__event_emit(e->events, &ev);
}

static _Thread_local sip__session_t *cur_session;
static _Thread_local int64_t cur_batch;

void sip__events_executing(sip__session_t *s, int64_t n) {
  cur_session = s;
  cur_batch = n;
}

void sip__events_request(sip__pool_t *p, const sip_request_t *r, int code, const char *msg,
                         uint64_t queue_us, uint64_t total_us) {
  if (!listening(p->eng)) return;
  sip_event_t ev = {.type = code == SIP_OK ? SIP_EVENT_INFERENCE_COMPLETE : SIP_EVENT_ERROR,
                    .request_id = r->id,
                    .latency_ms = (double)total_us / 1000.0,
                    .queue_ms = (double)queue_us / 1000.0,
                    .code = code};
  int mine = cur_session && cur_session->pool == p;
  ev.batch_size = mine ? cur_batch : 0;
  copy(ev.pool, sizeof ev.pool, p->cfg->name);
  copy(ev.session, sizeof ev.session, mine ? cur_session->id : "");
  copy(ev.text, sizeof ev.text, msg);
  sip__event_emit(p->eng->events, &ev);
}

void sip__events_pool(sip__pool_t *p, sip_event_type_t type, const char *text) {
  if (!listening(p->eng)) return;
  sip_event_t ev = {.type = type};
  copy(ev.pool, sizeof ev.pool, p->cfg->name);
  copy(ev.text, sizeof ev.text, text);
  sip__event_emit(p->eng->events, &ev);
}

/* ---- the ring ---- */

struct sip_event_ring {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  sip_event_t *v;
  size_t cap, head, n;
  uint64_t dropped, dropped_total;
  int closed;
};

sip_event_ring_t *sip_event_ring_new(size_t capacity) {
  if (!capacity) capacity = 1024;
  sip_event_ring_t *r = sip__calloc(1, sizeof *r);
  if (!r || !(r->v = sip__calloc(capacity, sizeof *r->v))) {
    sip__free(r);
    return NULL;
  }
  r->cap = capacity;
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  return r;
}

void sip_event_ring_free(sip_event_ring_t *r) {
  if (!r) return;
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  sip__free(r->v);
  sip__free(r);
}

int sip_event_ring_push(sip_event_ring_t *r, const sip_event_t *ev) {
  pthread_mutex_lock(&r->mu);
  int kept = r->n < r->cap && !r->closed;
  if (kept) {
    r->v[(r->head + r->n) % r->cap] = *ev;
    r->n++;
    pthread_cond_signal(&r->cv);
  } else {
    r->dropped++;
    r->dropped_total++;
  }
  pthread_mutex_unlock(&r->mu);
  return kept;
}

void sip_event_ring_push_fn(const sip_event_t *ev, void *ring) { sip_event_ring_push(ring, ev); }

int sip_event_ring_pop(sip_event_ring_t *r, sip_event_t *ev, uint64_t *dropped, int timeout_ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  if (timeout_ms > 0) {
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&r->mu);
  while (!r->n && !r->closed && timeout_ms) {
    if (timeout_ms < 0)
      pthread_cond_wait(&r->cv, &r->mu);
    else if (pthread_cond_timedwait(&r->cv, &r->mu, &until))
      break;
  }
  int got = r->n > 0;
  if (got) {
    *ev = r->v[r->head];
    r->head = (r->head + 1) % r->cap;
    r->n--;
    *dropped = r->dropped;
    r->dropped = 0;
  } else {
    *dropped = 0;
  }
  pthread_mutex_unlock(&r->mu);
  return got;
}

void sip_event_ring_close(sip_event_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  r->closed = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

uint64_t sip_event_ring_dropped_total(sip_event_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  uint64_t n = r->dropped_total;
  pthread_mutex_unlock(&r->mu);
  return n;
}
