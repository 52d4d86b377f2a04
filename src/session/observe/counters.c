/* sip — a pool's counters read at one instant (session/observe/counters.h). */
#include <string.h>

#include "session/observe/counters.h"
#include "session/sequence.h"
#include "session/pool_impl.h"

void sip__pool_counters_read(sip__pool_t *p, sip__pool_counters_t *c) {
  memset(c, 0, sizeof *c);
  c->state = atomic_load(&p->state);
  pthread_mutex_lock(&p->mu);
  for (int l = 0; l < SIP__SCHED_QUEUES; l++) {
    c->queued[l] = p->queue.q[l].count;
    c->queued_total += p->queue.q[l].count;
  }
  c->standby_sessions = p->n_standby;
  memcpy(c->worker_exit, p->worker_exit, sizeof c->worker_exit);
  pthread_mutex_unlock(&p->mu);
  c->isolation = p->cfg->isolation;
  c->worker_pid = atomic_load(&p->worker_pid);
  c->standby_worker_pid = atomic_load(&p->standby_pid);
  c->worker_restarts = atomic_load(&p->worker_restarts);
  for (int i = 0; i < sip__pool_session_count(p); i++) {
    int ss = atomic_load(&p->sessions[i].state);
    c->active_sessions += ss == SIP__SESSION_READY || ss == SIP__SESSION_RUNNING;
  }
  for (int k = 0; k < SIP_CODE_COUNT_; k++) c->by_code[k] = atomic_load(&p->by_code[k]);
  sip__hist_read(&p->h_queue, &c->queue);
  sip__hist_read(&p->h_compute, &c->compute);
  sip__hist_read(&p->h_total, &c->total);
  uint64_t cum = 0;
  for (int i = 0; i < SIP__BATCH_BUCKETS; i++) c->batch_cum[i] = cum += atomic_load(&p->batch_hist[i]);
  c->batch_rows_sum = atomic_load(&p->batch_rows_sum);
  c->batch_level = p->cfg->batch_levels[0].max_batch ? atomic_load(&p->batch_level) : -1;
  pthread_mutex_lock(&p->eng->arbiter.mu);
  c->compute_ns = p->arb.used_ns;
  pthread_mutex_unlock(&p->eng->arbiter.mu);
  c->recent_compute_ns = sip__arbiter_recent(&p->eng->arbiter, &p->arb, sip__now_us() / 1000000,
                                             &c->recent_total_ns);
  c->compute_percent = atomic_load(&p->quota_compute_percent);
  c->inference_count = atomic_load(&p->inference_count);
  c->execution_count = atomic_load(&p->execution_count);
  c->last_inference_ms = atomic_load(&p->last_inference_ms);
  c->success = sip__stat_read(&p->st_success);
  c->fail = sip__stat_read(&p->st_fail);
  c->queue_stat = sip__stat_read(&p->st_queue);
  c->compute_input = sip__stat_read(&p->st_compute_input);
  c->compute_infer = sip__stat_read(&p->st_compute_infer);
  c->compute_output = sip__stat_read(&p->st_compute_output);
  c->load_ms = p->load_ms;
  c->model_bytes = p->model_bytes;
  c->memory_bytes = p->memory_bytes;
  c->session_bytes = p->session_bytes;
  c->load_extra_bytes = p->load_extra_bytes;
  if (p->stored && atomic_load(&p->state) == SIP__POOL_READY)
    c->store_pools = sip__store_refs(&p->eng->store, p->stored);
  c->retries = atomic_load(&p->n_retries);
  c->fallbacks = atomic_load(&p->n_fallbacks);
  c->session_failures = atomic_load(&p->n_session_failures);
  c->promotions = atomic_load(&p->n_promotions);
  c->last_recovery_us = atomic_load(&p->last_recovery_us);
  c->sequences = p->seq != NULL;
  sip__seq_counts(p, &c->seq_active, &c->seq_waiting, &c->seq_expired);
  for (int d = 0; d < SIP__COPY_DIRECTIONS; d++) {
    c->copies[d] = atomic_load(&p->copies.copies[d]);
    c->copy_bytes[d] = atomic_load(&p->copies.bytes[d]);
  }
}

int sip__pool_session_count(const sip__pool_t *p) {
  int st = atomic_load(&p->state);
  return st == SIP__POOL_READY || st == SIP__POOL_STOPPED || st == SIP__POOL_FAILED ? p->n_sessions : 0;
}

void sip__pool_session_read(const sip__pool_t *p, int i, sip__session_counters_t *out) {
  sip__session_t *s = &p->sessions[i];
  out->id = s->id;
  out->state = atomic_load(&s->state);
  out->since_us = atomic_load(&s->since_us);
  out->inferences = atomic_load(&s->inferences);
  out->errors = atomic_load(&s->errors);
  out->failures = atomic_load(&s->failures);
  out->drained = atomic_load(&s->drain);
}
