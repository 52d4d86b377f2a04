/* sip — a pool's admission and the requests' ends outside execution:
 * cancellation tokens, the admission checks (queue limits, rate, sequence
 * slots), deadlines expiring in the queue, cancellation, shedding, and the
 * completion every request goes through (metrics, events, the answer).
 * The session executors that take requests off the queue are executor.c. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "session/admission.h"
#include "session/engine.h"
#include "session/preprocess.h"
#include "session/observe/events.h"
#include "session/sequence.h"
#include "session/observe/sla.h"
#include "session/pool_impl.h"

#define RATE_WINDOW_US 200000

/* ---- cancellation tokens ---- */

sip_cancel_token_t *sip_cancel_token_new(void) {
  sip_cancel_token_t *t = sip__calloc(1, sizeof *t);
  if (t) atomic_init(&t->refs, 1);
  return t;
}

static sip_cancel_token_t *token_ref(sip_cancel_token_t *t) {
  if (t) atomic_fetch_add(&t->refs, 1);
  return t;
}

void sip_cancel_token_free(sip_cancel_token_t *t) {
  if (t && atomic_fetch_sub(&t->refs, 1) == 1) sip__free(t);
}

void sip_request_set_cancel_token(sip_request_t *r, sip_cancel_token_t *t) {
  sip_cancel_token_free(r->cancel);
  r->cancel = token_ref(t);
}

int sip__request_cancelled(const sip_request_t *r) {
  return r->cancel && atomic_load(&r->cancel->cancelled);
}

/* ---- queues ---- */


size_t sip__pool_queued(const sip__pool_t *p) { return sip__sched_count(&p->queue); }

/* The best queued request (src/sched/queue.h: lowest effective level after
 * ageing, then oldest; the delayed queue last). Caller holds p->mu. */
sip_request_t *sip__pool_pop(sip__pool_t *p, uint64_t now) {
  sip__sched_item_t *it = sip__sched_pop(&p->queue, now, p->cfg->ageing_ms * 1000);
  return it ? SIP__QUEUED_REQ(it) : NULL;
}

/* ---- admission ---- */

/* Dim 0 shared by every input: the rows a request adds to a batch. */
static int64_t request_rows(const sip_request_t *r) {
  if (!r->n_inputs || r->inputs[0]->rank < 1) return -1;
  int64_t rows = r->inputs[0]->dims[0];
  for (size_t i = 1; i < r->n_inputs; i++)
    if (r->inputs[i]->rank < 1 || r->inputs[i]->dims[0] != rows) return -1;
  return rows;
}

/* Arrival-rate estimate for elastic batching: an exponentially weighted
 * average of the rate over 200 ms windows. The level is low below
 * rate_thresholds[0] req/s, medium below rate_thresholds[1], else high.
 * Caller holds p->mu. */
static void note_arrival(sip__pool_t *p, uint64_t now) {
  if (!p->cfg->batch_levels[0].max_batch) return;
  if (!p->rate_win_start_us) p->rate_win_start_us = now;
  p->rate_win_count++;
  uint64_t el = now - p->rate_win_start_us;
  if (el < RATE_WINDOW_US) return;
  double inst = (double)p->rate_win_count * 1e6 / (double)el;
  p->rate_rps = p->rate_rps > 0 ? 0.5 * p->rate_rps + 0.5 * inst : inst;
  p->rate_win_start_us = now;
  p->rate_win_count = 0;
  int level = p->rate_rps < p->cfg->rate_thresholds[0]   ? 0
              : p->rate_rps < p->cfg->rate_thresholds[1] ? 1
                                                         : 2;
  if (level != atomic_load(&p->batch_level)) {
    sip__log(SIP__LOG_DEBUG, "batch level changed", "pool=%s level=%d rate_rps=%.1f",
             p->cfg->name, level, p->rate_rps);
    atomic_store(&p->batch_level, level);
  }
}

/* Priority, rows, arrival and deadline of a request being admitted. */
static void stamp(sip__pool_t *p, sip_request_t *r) {
  static const int level_of[] = {0, SIP__PRIO_HIGH, SIP__PRIO_MEDIUM, SIP__PRIO_LOW};
  r->sched.level = r->priority ? level_of[r->priority] : (int)p->cfg->priority;
  r->rows = p->pre ? sip__preprocess_rows(p->pre, (const sip_tensor_t *const *)r->inputs,
                                          r->n_inputs)
                   : request_rows(r);
  r->sched.arrival_us = sip__now_us();
  atomic_fetch_add(&p->arrivals, 1);
  uint32_t timeout = r->timeout_ms ? r->timeout_ms : (uint32_t)p->cfg->default_timeout_ms;
  r->timeout_ms = timeout;
  r->deadline_us = timeout ? r->sched.arrival_us + (uint64_t)timeout * 1000 : 0;
}

/* RESOURCE_EXHAUSTED when the pool's queue holds queue.max_size requests,
 * else NULL. Caller holds p->mu. */
static sip_error_t *queue_full(const sip__pool_t *p) {
  size_t n = sip__pool_queued(p);
  if (!p->cfg->queue_max_size || n < (size_t)p->cfg->queue_max_size) return NULL;
  return sip_error_new(SIP_RESOURCE_EXHAUSTED,
                       "the queue of pool '%s' is full (%zu requests, queue.max_size); retry later",
                       p->cfg->name, n);
}

sip_error_t *sip__pool_submit_cold(sip__pool_t *p, sip_request_t *r, int *queued) {
  *queued = 0;
  sip_error_t *e;
  if (sip__request_cancelled(r)) return sip_error_new(SIP_CANCELLED, "request was cancelled");
  if (r->seq_flags & SIP__SEQF_SET)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "pool '%s' does not serve sequences (residency: on_demand); expected no "
                         "sequence_id, sequence_start or sequence_end parameters",
                         p->cfg->name);
  /* Copied now: once queued, r may be answered (its deadline) and p freed. */
  char name[256], version[64];
  snprintf(name, sizeof name, "%s", p->cfg->name);
  snprintf(version, sizeof version, "%s", p->from_repo && p->version ? p->version : "");
  sip__engine_t *eng = p->eng;
  pthread_mutex_lock(&p->mu);
  if (p->io_known) { /* loaded far enough: admitted the usual way */
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  if (p->stopping) {
    pthread_mutex_unlock(&p->mu);
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is shutting down", p->cfg->name);
  }
  /* Unlisted (an eviction, reload or unload swapped it out) or its load
   * failed: nothing would load it again, so nothing would answer a request
   * queued now (the drain or the failed load answered those before). */
  int st = atomic_load(&p->state);
  if (atomic_load(&p->base.retired) || (st != SIP__POOL_UNLOADED && st != SIP__POOL_LOADING)) {
    pthread_mutex_unlock(&p->mu);
    return sip_error_new(SIP_UNAVAILABLE,
                         "pool '%s' was unloaded or failed to load while the request arrived; "
                         "retry",
                         p->cfg->name);
  }
  if ((e = queue_full(p))) {
    pthread_mutex_unlock(&p->mu);
    return e;
  }
  stamp(p, r); /* rows: counted again once the model (and its preprocess) is known */
  uint64_t deadline = r->deadline_us;
  atomic_store(&p->last_used_us, r->sched.arrival_us);
  sip__sched_push(&p->queue, r->sched.level, &r->sched);
  int ask = !atomic_exchange(&p->load_asked, 1);
  pthread_mutex_unlock(&p->mu);
  *queued = 1;
  if (deadline) sip__engine_note_deadline(eng, deadline);
  if (ask && eng->want_load) eng->want_load(eng->want_load_ctx, name, version[0] ? version : NULL);
  return NULL;
}

void sip__pool_admit_cold(sip__pool_t *p) {
  sip__sched_item_t *bad = NULL; /* linked through next, out of the queues */
  sip_error_t *why[64] = {0};
  size_t n_bad = 0, n_cold = 0;
  uint64_t now = sip__now_us();
  pthread_mutex_lock(&p->mu);
  for (int l = 0; l < SIP__SCHED_QUEUES; l++) {
    for (sip__sched_item_t *it = p->queue.q[l].head, *nx; it; it = nx) {
      nx = it->next;
      sip_request_t *r = SIP__QUEUED_REQ(it);
      n_cold++;
      sip__hist_observe(&p->eng->res_cold_wait, now - r->sched.arrival_us);
      sip_error_t *e = sip__pool_check_inputs(p, r);
      if (!e) {
        r->rows = p->pre ? sip__preprocess_rows(p->pre, (const sip_tensor_t *const *)r->inputs,
                                                r->n_inputs)
                         : request_rows(r);
        continue;
      }
      sip__sched_remove(&p->queue, l, it);
      if (n_bad < 64) why[n_bad] = e; else sip_error_free(e);
      n_bad++;
      it->next = bad;
      bad = it;
    }
  }
  p->io_known = 1;
  pthread_mutex_unlock(&p->mu);
  atomic_fetch_add(&p->eng->res_cold_starts, n_cold);
  /* `bad` is in reverse order of why[]. */
  for (size_t k = n_bad; bad; k--) {
    sip__sched_item_t *it = bad;
    bad = it->next;
    it->next = NULL;
    sip_error_t *e = k - 1 < 64 ? why[k - 1] : NULL;
    sip__pool_finish_failed(p, SIP__QUEUED_REQ(it), e ? sip_error_code(e) : SIP_INVALID_ARGUMENT,
                            e ? sip_error_message(e) : "the request does not fit the model's inputs",
                            now - SIP__QUEUED_REQ(it)->sched.arrival_us);
    sip_error_free(e);
  }
}

sip_error_t *sip__pool_submit(sip__pool_t *p, sip_request_t *r) {
  int st = atomic_load(&p->state);
  if (p->on_demand && (st == SIP__POOL_UNLOADED || st == SIP__POOL_LOADING)) {
    int queued = 0;
    sip_error_t *ce = sip__pool_submit_cold(p, r, &queued);
    if (ce || queued) return ce;
    st = SIP__POOL_READY; /* its inputs are known: sessions start at once */
    atomic_fetch_add(&p->eng->res_hits, 1);
  } else if (p->on_demand && st == SIP__POOL_READY) {
    atomic_fetch_add(&p->eng->res_hits, 1);
  }
  if (st == SIP__POOL_LOADING)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is still loading", p->cfg->name);
  if (st == SIP__POOL_FAILED)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' failed to load: %s", p->cfg->name,
                         p->error ? p->error : "unknown reason");
  if (st != SIP__POOL_READY)
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is shutting down", p->cfg->name);
  if (sip__request_cancelled(r)) return sip_error_new(SIP_CANCELLED, "request was cancelled");
  sip_error_t *e = p->seq ? sip__seq_check(p, r) : NULL;
  /* A sequence id sent to a stateless pool would be dropped in silence and
   * the client would believe its state is kept. */
  if (!p->seq && (r->seq_flags & SIP__SEQF_SET))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "pool '%s' does not serve sequences (no sequence_batching); expected no "
                         "sequence_id, sequence_start or sequence_end parameters",
                         p->cfg->name);
  if (e || (e = sip__pool_check_inputs(p, r))) return e;
  stamp(p, r);
  if (p->on_demand) atomic_store(&p->last_used_us, r->sched.arrival_us);
  uint64_t deadline = r->deadline_us;
  /* Read now: once queued, r may be answered and its pool reference
   * dropped, after which a retired pool may be freed. */
  sip__engine_t *srv = p->eng;
  pthread_mutex_lock(&p->mu);
  if (p->stopping) {
    pthread_mutex_unlock(&p->mu);
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is shutting down", p->cfg->name);
  }
  if (p->seq) { /* behind its sequence, on the session the sequence is bound to */
    int wake = 0;
    e = sip__seq_admit(p, r, r->sched.arrival_us, &wake);
    if (!e && wake) pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (!e && deadline) sip__engine_note_deadline(srv, deadline);
    return e;
  }
  /* Without a session (autoscale min_sessions 0) and unlisted, nothing
   * would start one to serve it: the drain failed those queued before. */
  if (!p->n_sessions && atomic_load(&p->base.retired)) {
    pthread_mutex_unlock(&p->mu);
    return sip_error_new(SIP_UNAVAILABLE, "pool '%s' is being unloaded; retry", p->cfg->name);
  }
  if ((e = queue_full(p))) {
    pthread_mutex_unlock(&p->mu);
    return e;
  }
  note_arrival(p, r->sched.arrival_us);
  sip__sched_push(&p->queue, r->sched.level, &r->sched);
  /* Every session released (autoscale min_sessions 0): one starts now. */
  int wake_scaler = !p->n_sessions && p->cfg->autoscale.enabled;
  /* A session forming a batch wants to see arrivals too; with a session
   * drained, the one woken might be it. */
  if (p->cfg->max_batch_size || atomic_load(&p->n_drained))
    pthread_cond_broadcast(&p->cv);
  else
    pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  /* r (and p) may already be completed and freed by an executor here. */
  if (deadline) sip__engine_note_deadline(srv, deadline);
  if (wake_scaler && srv->want_scale) srv->want_scale(srv->want_scale_ctx);
  return NULL;
}

/* ---- completion ---- */

void sip__pool_count(sip__pool_t *p, sip_code_t code, uint64_t total_ns) {
  if ((unsigned)code < SIP_CODE_COUNT_) atomic_fetch_add(&p->by_code[code], 1);
  sip__stat_add(code == SIP_OK ? &p->st_success : &p->st_fail, total_ns);
  if (p->sla) sip__sla_record(p->sla, code, total_ns / 1000);
}

/* Every queued request ends here: metrics, a log line for failures, the
 * answer. */
void sip__pool_finish(sip__pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                   sip_tensor_t **outs, size_t n_outs, uint64_t queue_us, uint64_t compute_us) {
  uint64_t total_us = sip__now_us() - r->sched.arrival_us;
  sip__hist_observe(&p->h_total, total_us);
  sip__pool_count(p, code, total_us * 1000);
  atomic_store(&p->last_inference_ms, sip__wall_us() / 1000);
  if (code != SIP_OK)
    sip__log_failure("pool=%s code=%s reason=\"%s\"", p->cfg->name,
             sip_code_name(code), msg);
  sip__events_request(p, r, code, msg, queue_us, total_us);
  sip__request_complete(r, code, msg, outs, n_outs, queue_us, compute_us);
}

void sip__pool_finish_failed(sip__pool_t *p, sip_request_t *r, sip_code_t code, const char *msg,
                             uint64_t queue_us) {
  sip__pool_finish(p, r, code, msg, NULL, 0, queue_us, 0);
}

void sip__pool_expire_request(sip__pool_t *p, sip_request_t *r, uint64_t now) {
  uint64_t waited = now - r->sched.arrival_us;
  sip__hist_observe(&p->h_queue, waited);
  sip__stat_add(&p->st_queue, waited * 1000);
  char msg[256];
  snprintf(msg, sizeof msg,
           "request waited %.1f ms in the queue of pool '%s', past its timeout of %u ms; it "
           "was not executed",
           (double)waited / 1000.0, p->cfg->name, r->timeout_ms);
  sip__pool_finish_failed(p, r, SIP_DEADLINE_EXCEEDED, msg, waited);
}

void sip__pool_cancel_request(sip__pool_t *p, sip_request_t *r, uint64_t now) {
  sip__pool_finish_failed(p, r, SIP_CANCELLED, "request was cancelled before it ran (client gone)",
               now - r->sched.arrival_us);
}

uint64_t sip__pool_expire(sip__pool_t *p, uint64_t now) {
  sip__sched_item_t *expired = NULL; /* linked through next, out of the queues */
  uint64_t next = 0;
  int delay = p->cfg->timeout_action == SIP__TIMEOUT_DELAY;
  pthread_mutex_lock(&p->mu);
  for (int l = 0; l < SIP__PRIO_LEVELS; l++) {
    for (sip__sched_item_t *it = p->queue.q[l].head, *nx; it; it = nx) {
      nx = it->next;
      sip_request_t *r = SIP__QUEUED_REQ(it);
      if (!r->deadline_us) continue;
      if (r->deadline_us <= now) {
        sip__sched_remove(&p->queue, l, it);
        if (delay) { /* runs last, whenever the pool is otherwise idle */
          r->deadline_us = 0;
          sip__sched_push(&p->queue, SIP__SCHED_DELAYED, it);
          continue;
        }
        it->next = expired;
        expired = it;
      } else if (!next || r->deadline_us < next) {
        next = r->deadline_us;
      }
    }
  }
  pthread_mutex_unlock(&p->mu);
  uint64_t idle = sip__seq_expire(p, now);
  if (idle && (!next || idle < next)) next = idle;
  while (expired) {
    sip__sched_item_t *it = expired;
    expired = it->next;
    it->next = NULL;
    sip__pool_expire_request(p, SIP__QUEUED_REQ(it), now);
  }
  return next;
}

/* Takes the queued requests `match` picks (all when NULL) out of every
 * queue, and answers each with `answer`. */
sip__sched_item_t *sip__pool_unqueue(sip__pool_t *p, const sip_cancel_token_t *match) {
  sip__sched_item_t *gone = NULL; /* linked through next, out of the queues */
  pthread_mutex_lock(&p->mu);
  for (int l = 0; l < SIP__SCHED_QUEUES; l++) {
    for (sip__sched_item_t *it = p->queue.q[l].head, *nx; it; it = nx) {
      nx = it->next;
      if (match && SIP__QUEUED_REQ(it)->cancel != match) continue;
      sip__sched_remove(&p->queue, l, it);
      it->next = gone;
      gone = it;
    }
  }
  pthread_mutex_unlock(&p->mu);
  return gone;
}

static void take_queued(sip__pool_t *p, const sip_cancel_token_t *match,
                        void (*answer)(sip__pool_t *, sip_request_t *, uint64_t)) {
  sip__sched_item_t *gone = sip__pool_unqueue(p, match);
  uint64_t now = sip__now_us();
  while (gone) {
    sip__sched_item_t *it = gone;
    gone = it->next;
    it->next = NULL;
    answer(p, SIP__QUEUED_REQ(it), now);
  }
}

void sip__pool_cancel(sip__pool_t *p, const sip_cancel_token_t *t) {
  take_queued(p, t, sip__pool_cancel_request);
}

static void shed_request(sip__pool_t *p, sip_request_t *r, uint64_t now) {
  atomic_fetch_add(&p->eng->drain_shed, 1);
  sip__pool_finish_failed(p, r, SIP_UNAVAILABLE,
               "server is shutting down: its drain_timeout_ms passed before this request ran",
               now - r->sched.arrival_us);
}

void sip__pool_shed(sip__pool_t *p) { take_queued(p, NULL, shed_request); }

