/* sip — sequence batching: sequences bound to sessions, control inputs,
 * idle expiry and the backlog of new sequences (session/sequence.h).
 *
 * A pool holds max_sequences slots. START binds a sequence to a free slot
 * and the slot to the session with the fewest sequences; the slot keeps the
 * sequence's requests in arrival order (linked through their sched item,
 * as the pool's queues do) and at most one of them runs at a time, on that
 * session. With every slot taken a new sequence waits in the backlog, its
 * requests with it, until a slot frees. */
#include "session/sequence.h"
#include "session/pool_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

SIP__FIFO_DEFINE(rq, sip__sched_fifo_t, sip__sched_item_t)
#define REQ(it) ((sip_request_t *)((char *)(it) - offsetof(sip_request_t, sched)))

/* A sequence, bound to a slot or waiting in the backlog. */
typedef struct seq {
  struct seq *hnext; /* the id index's chain; only while not ending */
  uint64_t id;
  char *sid;  /* string id (owned), or NULL for a numeric one */
  int ending; /* its END request is queued: nothing joins any more */
  int waiting; /* in the backlog (a waiter_t), else a slot_t */
  sip__sched_fifo_t pending; /* its requests, in arrival order */
} seq_t;

typedef struct slot {
  seq_t q;     /* first */
  int active;  /* bound to a sequence */
  int running; /* one of its requests is executing */
  int session; /* the session it runs on */
  uint64_t last_us; /* last admission or completion: the idle clock */
} slot_t;

/* A new sequence waiting for a slot. */
typedef struct waiter {
  seq_t q; /* first */
  SIP__FIFO_LINK(struct waiter);
} waiter_t;

typedef struct waiter_fifo {
  SIP__FIFO_FIELDS(waiter_t);
} waiter_fifo_t;
SIP__FIFO_DEFINE(wq, waiter_fifo_t, waiter_t)

struct sip__seq {
  slot_t *slots;
  int n_slots;
  int *load; /* sequences bound per session */
  waiter_fifo_t backlog;
  /* Active sequences that take more requests (not ending) by id: chained
   * buckets, a power of two of them, grown with the count. */
  seq_t **index;
  size_t n_buckets, n_indexed;
  sip_io_desc_t ctl[SIP__SEQ_CONTROLS]; /* name NULL: not used */
  uint64_t expired;
  atomic_long queued; /* requests behind their sequences (slots and backlog) */
};

/* ---- the id index ---- */

static uint64_t hash_id(uint64_t id, const char *sid) {
  if (sid) { /* FNV-1a */
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *c = (const unsigned char *)sid; *c; c++)
      h = (h ^ *c) * 1099511628211ULL;
    return h;
  }
  id += 0x9e3779b97f4a7c15ULL; /* splitmix64's finaliser */
  id = (id ^ (id >> 30)) * 0xbf58476d1ce4e5b9ULL;
  id = (id ^ (id >> 27)) * 0x94d049bb133111ebULL;
  return id ^ (id >> 31);
}

static seq_t **bucket(sip__seq_t *q, uint64_t id, const char *sid) {
  return &q->index[hash_id(id, sid) & (q->n_buckets - 1)];
}

/* Doubles the buckets when they are fewer than the entries; stays as it is
 * when out of memory (chains grow longer). */
static void index_grow(sip__seq_t *q) {
  if (q->n_indexed < q->n_buckets) return;
  size_t nb = q->n_buckets * 2;
  seq_t **v = sip__calloc(nb, sizeof *v);
  if (!v) return;
  seq_t **old = q->index;
  size_t on = q->n_buckets;
  q->index = v;
  q->n_buckets = nb;
  for (size_t i = 0; i < on; i++)
    for (seq_t *e = old[i], *nx; e; e = nx) {
      nx = e->hnext;
      seq_t **b = bucket(q, e->id, e->sid);
      e->hnext = *b;
      *b = e;
    }
  sip__free(old);
}

static void index_add(sip__seq_t *q, seq_t *e) {
  seq_t **b = bucket(q, e->id, e->sid);
  e->hnext = *b;
  *b = e;
  q->n_indexed++;
  index_grow(q);
}

static void index_del(sip__seq_t *q, seq_t *e) {
  for (seq_t **b = bucket(q, e->id, e->sid); *b; b = &(*b)->hnext)
    if (*b == e) {
      *b = e->hnext;
      e->hnext = NULL;
      q->n_indexed--;
      return;
    }
}

static const char *const control_key[SIP__SEQ_CONTROLS] = {"start", "end", "ready", "corrid"};

/* ---- setup ---- */

static int flag_dtype(sip_dtype_t t) {
  return t == SIP_DTYPE_INT32 || t == SIP_DTYPE_FLOAT32 || t == SIP_DTYPE_BOOL;
}

static int corrid_dtype(sip_dtype_t t) {
  return t == SIP_DTYPE_UINT64 || t == SIP_DTYPE_INT64 || t == SIP_DTYPE_UINT32 ||
         t == SIP_DTYPE_INT32 || t == SIP_DTYPE_STRING;
}

static sip_error_t *take_control(sip__pool_t *p, int k, const char *name) {
  sip__seq_t *q = p->seq;
  size_t i = 0;
  while (i < p->n_inputs && strcmp(p->inputs[i].name, name)) i++;
  if (i == p->n_inputs) {
    char names[512] = "";
    for (size_t j = 0; j < p->n_inputs; j++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", j ? ", " : "",
               p->inputs[j].name);
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "sequence_batching.control_inputs.%s names input '%s', which the model "
                         "does not have; expected one of: %s",
                         control_key[k], name, names);
  }
  sip_io_desc_t *d = &p->inputs[i];
  int ok = k == SIP__SEQ_CORRID ? corrid_dtype(d->dtype) : flag_dtype(d->dtype);
  if (!ok)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "sequence_batching.control_inputs.%s: input '%s' is %s; expected %s",
                         control_key[k], name, sip_dtype_name(d->dtype),
                         k == SIP__SEQ_CORRID ? "uint64, int64, uint32, int32 or string"
                                              : "int32, float32 or bool");
  /* One element: a scalar or dims that are all 1 or dynamic (sent as 1). */
  for (int j = 0; j < d->rank; j++)
    if (d->dims[j] != 1 && d->dims[j] >= 0) {
      char shape[256];
      sip__shape_str(shape, sizeof shape, d->rank, d->dims, ",");
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "sequence_batching.control_inputs.%s: input '%s' has shape %s; "
                           "expected one element (a scalar, or every dim 1 or dynamic)",
                           control_key[k], name, shape);
    }
  q->ctl[k] = *d;
  if (q->ctl[k].rank < 0) { /* any shape: send [1] */
    q->ctl[k].rank = 1;
    q->ctl[k].dims[0] = 1;
  }
  for (int j = 0; j < q->ctl[k].rank; j++) q->ctl[k].dims[j] = 1;
  /* Clients do not send it: it leaves the inputs they see. */
  memmove(d, d + 1, (p->n_inputs - i - 1) * sizeof *d);
  p->n_inputs--;
  return NULL;
}

sip_error_t *sip__seq_setup(sip__pool_t *p) {
  const sip__pool_config_t *c = p->cfg;
  if (!c->sequence_batching) return NULL;
  sip__seq_t *q = p->seq = sip__calloc(1, sizeof *q);
  if (!q) return SIP__OOM();
  int n = c->seq_max_sequences ? c->seq_max_sequences : c->pool_size;
  q->slots = sip__calloc((size_t)n, sizeof *q->slots);
  q->load = sip__calloc((size_t)c->pool_size, sizeof *q->load);
  q->n_buckets = 64;
  while (q->n_buckets < (size_t)n) q->n_buckets *= 2;
  q->index = sip__calloc(q->n_buckets, sizeof *q->index);
  wq_init(&q->backlog);
  sip_error_t *e = q->slots && q->load && q->index ? NULL : SIP__OOM();
  q->n_slots = e ? 0 : n;
  for (int k = 0; k < SIP__SEQ_CONTROLS && !e; k++)
    if (c->seq_control[k]) e = take_control(p, k, c->seq_control[k]);
  if (e) { /* a FAILED pool has no sequences */
    sip__seq_free(q);
    p->seq = NULL;
  }
  return e;
}

void sip__seq_free(sip__seq_t *q) {
  if (!q) return;
  for (int i = 0; i < q->n_slots; i++) sip__free(q->slots[i].q.sid);
  for (waiter_t *w; (w = wq_pop(&q->backlog));) {
    sip__free(w->q.sid);
    sip__free(w);
  }
  for (int k = 0; k < SIP__SEQ_CONTROLS; k++) sip__free(q->ctl[k].name);
  sip__free(q->index);
  sip__free(q->slots);
  sip__free(q->load);
  sip__free(q);
}

/* ---- admission ---- */

/* The active sequence of r's id that still takes requests, or NULL. */
static seq_t *find(sip__seq_t *q, const sip_request_t *r) {
  for (seq_t *e = *bucket(q, r->seq_id, r->seq_sid); e; e = e->hnext)
    if (r->seq_sid ? e->sid && !strcmp(e->sid, r->seq_sid) : !e->sid && e->id == r->seq_id)
      return e;
  return NULL;
}

static const char *id_text(char *buf, size_t n, const sip_request_t *r) {
  if (r->seq_sid)
    snprintf(buf, n, "'%.200s'", r->seq_sid);
  else
    snprintf(buf, n, "%" PRIu64, r->seq_id);
  return buf;
}

/* What no lock is needed for: a sequence id, no control input sent, an id
 * that fits CORRID. */
sip_error_t *sip__seq_check(sip__pool_t *p, const sip_request_t *r) {
  sip__seq_t *q = p->seq;
  const char *pool = p->cfg->name;
  if (!(r->seq_flags & SIP__SEQF_SET))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "pool '%s' serves sequences (sequence_batching): every request needs a "
                         "sequence id (parameter sequence_id, with sequence_start on a "
                         "sequence's first request and sequence_end on its last)",
                         pool);
  for (size_t i = 0; i < r->n_inputs; i++)
    for (int k = 0; k < SIP__SEQ_CONTROLS; k++)
      if (q->ctl[k].name && !strcmp(q->ctl[k].name, r->inputs[i]->name))
        return sip_error_new(SIP_INVALID_ARGUMENT,
                             "input '%s' of pool '%s' is a sequence control input "
                             "(sequence_batching.control_inputs.%s) that the server fills; do "
                             "not send it",
                             r->inputs[i]->name, pool, control_key[k]);
  sip_dtype_t ct = q->ctl[SIP__SEQ_CORRID].name ? q->ctl[SIP__SEQ_CORRID].dtype : SIP_DTYPE_STRING;
  char idb[256];
  if (r->seq_sid && ct != SIP_DTYPE_STRING)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "pool '%s' passes the sequence id to its %s input '%s'; expected a "
                         "numeric sequence_id, got the string %s",
                         pool, sip_dtype_name(ct), q->ctl[SIP__SEQ_CORRID].name,
                         id_text(idb, sizeof idb, r));
  uint64_t most = ct == SIP_DTYPE_INT32 ? INT32_MAX
                  : ct == SIP_DTYPE_UINT32 ? UINT32_MAX
                  : ct == SIP_DTYPE_INT64 ? INT64_MAX
                                          : UINT64_MAX;
  if (!r->seq_sid && r->seq_id > most)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "sequence id %" PRIu64 " does not fit the %s input '%s' of pool '%s'; "
                         "expected 1..%" PRIu64,
                         r->seq_id, sip_dtype_name(ct), q->ctl[SIP__SEQ_CORRID].name, pool, most);
  return NULL;
}

/* The session with the fewest sequences (the lowest index on ties). */
static int least_loaded(const sip__pool_t *p) {
  int best = 0;
  for (int i = 1; i < p->cfg->pool_size; i++)
    if (p->seq->load[i] < p->seq->load[best]) best = i;
  return best;
}

/* Binds the sequence (id, sid: taken) to free slot s, on the session with
 * the fewest sequences; indexed unless `ending`. */
static void bind(sip__pool_t *p, slot_t *s, uint64_t id, char *sid, int ending, uint64_t now) {
  s->active = 1;
  s->running = 0;
  s->q.id = id;
  s->q.sid = sid;
  s->q.ending = ending;
  s->q.waiting = 0;
  rq_init(&s->q.pending);
  s->session = least_loaded(p);
  s->last_us = now;
  p->seq->load[s->session]++;
  if (!ending) index_add(p->seq, &s->q);
}

static slot_t *free_slot(sip__seq_t *q) {
  for (int i = 0; i < q->n_slots; i++)
    if (!q->slots[i].active) return &q->slots[i];
  return NULL;
}

sip_error_t *sip__seq_admit(sip__pool_t *p, sip_request_t *r, uint64_t now, int *wake) {
  sip__seq_t *q = p->seq;
  int start = r->seq_flags & SIP__SEQF_START, end = r->seq_flags & SIP__SEQF_END;
  char idb[256];
  seq_t *e = find(q, r);
  if (start && e) /* as Triton: the sequence before ends early */
    sip__log(SIP__LOG_WARN, "sequence restarted before it ended", "pool=%s sequence=%s",
             p->cfg->name, id_text(idb, sizeof idb, r));
  if (!e) {
    if (!start)
      return sip_error_new(SIP_FAILED_PRECONDITION,
                           "pool '%s': sequence %s is not active (it ended, expired after the "
                           "idle timeout of %lld us, or never started); start it with "
                           "sequence_start",
                           p->cfg->name, id_text(idb, sizeof idb, r),
                           (long long)p->cfg->seq_idle_timeout_us);
    char *sid = NULL;
    if (r->seq_sid && !(sid = sip__strdup(r->seq_sid))) return SIP__OOM();
    slot_t *s;
    waiter_t *w = NULL;
    if ((s = free_slot(q))) {
      bind(p, s, r->seq_id, sid, 0, now);
      e = &s->q;
    } else if ((int64_t)q->backlog.count < p->cfg->seq_max_backlog &&
               (w = sip__calloc(1, sizeof *w))) {
      w->q.id = r->seq_id;
      w->q.sid = sid;
      w->q.waiting = 1;
      rq_init(&w->q.pending);
      wq_push(&q->backlog, w);
      index_add(q, &w->q);
      e = &w->q;
    } else {
      sip__free(sid);
      if ((int64_t)q->backlog.count < p->cfg->seq_max_backlog) return SIP__OOM();
      return sip_error_new(SIP_RESOURCE_EXHAUSTED,
                           "pool '%s': all %d sequence slots are taken and %zu new sequences "
                           "already wait (sequence_batching.max_backlog); retry later or end "
                           "sequences sooner",
                           p->cfg->name, q->n_slots, q->backlog.count);
    }
  }
  /* Its session needs waking only when this request can run now. */
  *wake = !e->waiting && !((slot_t *)e)->running && !e->pending.head;
  rq_push(&e->pending, &r->sched);
  atomic_fetch_add_explicit(&q->queued, 1, memory_order_relaxed);
  if (!e->waiting) ((slot_t *)e)->last_us = now;
  if (end) { /* later requests of this id are another sequence's */
    e->ending = 1;
    index_del(q, e);
  }
  return NULL;
}

/* ---- running ---- */

static void release(sip__pool_t *p, slot_t *s, uint64_t now);

sip_request_t *sip__seq_pop(sip__pool_t *p, int session, int *slot) {
  sip__seq_t *q = p->seq;
  slot_t *best = NULL;
  for (int i = 0; i < q->n_slots; i++) {
    slot_t *s = &q->slots[i];
    if (!s->active || s->session != session || s->running || !s->q.pending.head) continue;
    if (!best || s->q.pending.head->arrival_us < best->q.pending.head->arrival_us) best = s;
  }
  if (!best) return NULL;
  best->running = 1;
  *slot = (int)(best - q->slots);
  sip_request_t *r = REQ(rq_pop(&best->q.pending));
  atomic_fetch_sub_explicit(&q->queued, 1, memory_order_relaxed);
  /* The END request, its sequence's last: nothing can join the sequence
   * any more, so its slot is free for the next one (a backlogged sequence
   * may take it) while this request runs. */
  if (best->q.ending && !best->q.pending.head) {
    release(p, best, sip__now_us());
    *slot = -1;
  }
  return r;
}

/* A control input's one element. */
static sip_tensor_t *control_tensor(const sip_io_desc_t *d, const sip_request_t *r, int k) {
  int on = k == SIP__SEQ_READY || (k == SIP__SEQ_START && (r->seq_flags & SIP__SEQF_START)) ||
           (k == SIP__SEQ_END && (r->seq_flags & SIP__SEQF_END));
  union {
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f;
    uint8_t b;
    char s[4 + 32];
  } v;
  size_t n = sip_dtype_size(d->dtype);
  switch (d->dtype) {
  case SIP_DTYPE_INT32: v.i32 = k == SIP__SEQ_CORRID ? (int32_t)r->seq_id : on; break;
  case SIP_DTYPE_UINT32: v.u32 = (uint32_t)r->seq_id; break;
  case SIP_DTYPE_INT64: v.i64 = (int64_t)r->seq_id; break;
  case SIP_DTYPE_UINT64: v.u64 = r->seq_id; break;
  case SIP_DTYPE_FLOAT32: v.f = (float)on; break;
  case SIP_DTYPE_BOOL: v.b = (uint8_t)on; break;
  case SIP_DTYPE_STRING: {
    /* One string, as the engine keeps them: a 4-byte little-endian length,
     * then the bytes. A string id is copied in full. */
    char num[24];
    const char *text = r->seq_sid;
    if (!text) snprintf(num, sizeof num, "%" PRIu64, r->seq_id), text = num;
    size_t len = strlen(text);
    sip_buf_t *b = sip_buf_new(4 + len);
    if (!b) return NULL;
    uint8_t *o = sip_buf_data(b);
    for (int i = 0; i < 4; i++) o[i] = (uint8_t)(len >> (8 * i));
    memcpy(o + 4, text, len);
    sip_tensor_t *t = sip_tensor_new_view(d->name, d->dtype, d->rank, d->dims, o, 4 + len, b);
    sip_buf_unref(b);
    return t;
  }
  default: return NULL; /* refused at setup */
  }
  return sip_tensor_new_copy(d->name, d->dtype, d->rank, d->dims, &v, n);
}

sip_error_t *sip__seq_fill(sip__pool_t *p, sip_request_t *r) {
  sip__seq_t *q = p->seq;
  for (int k = 0; k < SIP__SEQ_CONTROLS; k++) {
    if (!q->ctl[k].name) continue;
    sip_tensor_t *t = control_tensor(&q->ctl[k], r, k);
    sip_tensor_t **v = t ? sip__reallocarray(r->inputs, r->n_inputs + 1, sizeof *v) : NULL;
    if (!v) {
      sip_tensor_free(t);
      return SIP__OOM();
    }
    r->inputs = v;
    v[r->n_inputs++] = t;
  }
  return NULL;
}

/* Unbinds `s`; the oldest backlogged sequence takes it. p->mu held. */
static void release(sip__pool_t *p, slot_t *s, uint64_t now) {
  sip__seq_t *q = p->seq;
  q->load[s->session]--;
  if (!s->q.ending) index_del(q, &s->q);
  sip__free(s->q.sid);
  s->q.sid = NULL;
  s->active = 0;
  s->running = 0;
  waiter_t *w = wq_pop(&q->backlog);
  if (!w) return;
  if (!w->q.ending) index_del(q, &w->q);
  bind(p, s, w->q.id, w->q.sid, w->q.ending, now);
  for (sip__sched_item_t *it; (it = rq_pop(&w->q.pending));) rq_push(&s->q.pending, it);
  sip__free(w);
  /* Its session may be another one, waiting on the pool's cv. */
  pthread_cond_broadcast(&p->cv);
}

uint64_t sip__seq_done(sip__pool_t *p, int i, uint64_t now) {
  if (i < 0) return 0; /* an END request: its slot was released when it started */
  slot_t *s = &p->seq->slots[i];
  s->running = 0;
  s->last_us = now;
  if (s->q.pending.head) return 0;
  if (s->q.ending) {
    release(p, s, now);
    return 0;
  }
  return now + (uint64_t)p->cfg->seq_idle_timeout_us;
}

uint64_t sip__seq_expire(sip__pool_t *p, uint64_t now) {
  sip__seq_t *q = p->seq;
  uint64_t next = 0, idle = (uint64_t)p->cfg->seq_idle_timeout_us;
  if (!q) return 0;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < q->n_slots; i++) {
    slot_t *s = &q->slots[i];
    if (!s->active) continue;
    uint64_t due = s->last_us + idle;
    if (s->running || s->q.pending.head) {
      /* Busy: it cannot expire before `due` either. Counting it keeps a
       * deadline in housekeeping's view, so that the completions of busy
       * sequences (each noting its idle deadline) do not wake it each time. */
      if (due <= now) due = now + idle;
      if (!next || due < next) next = due;
      continue;
    }
    if (due <= now) {
      char idb[256];
      if (s->q.sid) snprintf(idb, sizeof idb, "'%.200s'", s->q.sid);
      else snprintf(idb, sizeof idb, "%" PRIu64, s->q.id);
      sip__log(SIP__LOG_INFO, "sequence expired", "pool=%s sequence=%s idle_timeout_us=%lld",
               p->cfg->name, idb, (long long)idle);
      q->expired++;
      release(p, s, now); /* a backlogged sequence may take it, with requests to run */
      if (s->active && (!next || now + idle < next)) next = now + idle;
    } else if (!next || due < next) {
      next = due;
    }
  }
  pthread_mutex_unlock(&p->mu);
  return next;
}

void sip__seq_drain(sip__pool_t *p, void (*fail)(sip__pool_t *, sip_request_t *)) {
  sip__seq_t *q = p->seq;
  if (!q) return;
  sip__sched_fifo_t gone;
  rq_init(&gone);
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < q->n_slots; i++)
    for (sip__sched_item_t *it; (it = rq_pop(&q->slots[i].q.pending));) rq_push(&gone, it);
  for (waiter_t *w; (w = wq_pop(&q->backlog));) {
    if (!w->q.ending) index_del(q, &w->q);
    for (sip__sched_item_t *it; (it = rq_pop(&w->q.pending));) rq_push(&gone, it);
    sip__free(w->q.sid);
    sip__free(w);
  }
  atomic_store(&q->queued, 0);
  pthread_mutex_unlock(&p->mu);
  for (sip__sched_item_t *it; (it = rq_pop(&gone));) fail(p, REQ(it));
}

long sip__seq_queued(const sip__pool_t *p) {
  return p->seq ? atomic_load_explicit(&p->seq->queued, memory_order_relaxed) : 0;
}

void sip__seq_counts(sip__pool_t *p, uint64_t *active, uint64_t *waiting, uint64_t *expired) {
  sip__seq_t *q = p->seq;
  *active = *waiting = *expired = 0;
  if (!q) return;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < q->n_slots; i++) *active += q->slots[i].active;
  *waiting = q->backlog.count;
  *expired = q->expired;
  pthread_mutex_unlock(&p->mu);
}

