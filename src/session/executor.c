/* sip — the per-pool scheduler's session executors: the dynamic batcher
 * and the executor loop (admission, deadlines in the queue, cancellation
 * and completion are admission.c).
 *
 * Each pool embeds one queue per priority level plus a "delayed" queue
 * (src/sched/queue.h, which also picks the best request with ageing). Idle
 * session executors wait on the pool's condition variable; an arrival wakes
 * them. An executor takes the best request (highest effective level, then
 * oldest), and with dynamic batching gathers compatible requests into one
 * execution, waiting up to max_queue_delay_us (never past the earliest
 * deadline in the batch) while only one session at a time forms a batch.
 * Before executing it takes a slot from the server's compute arbiter, which
 * orders pools by priority within their compute shares. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/spin.h"
#include "session/admission.h"
#include "session/preprocess.h"
#include "sched/batch.h"
#include "session/engine.h"
#include "session/observe/events.h"
#include "session/isolation/isolation.h"
#include "session/sequence.h"
#include "session/observe/sla.h"
#include "session/pool_impl.h"

#define MAX_BATCH_REQUESTS 1024

/* ---- batching ---- */

static int same_outputs(const sip_request_t *a, const sip_request_t *b) {
  if (a->n_outputs != b->n_outputs) return 0;
  for (size_t i = 0; i < a->n_outputs; i++)
    if (strcmp(a->outputs[i], b->outputs[i])) return 0;
  return 1;
}

static const sip_tensor_t *input_named(const sip_request_t *r, const char *name) {
  for (size_t i = 0; i < r->n_inputs; i++)
    if (strcmp(r->inputs[i]->name, name) == 0) return r->inputs[i];
  return NULL;
}

/* Requests may share an execution when their inputs agree in everything
 * but dim 0 and they want the same outputs; a raw input of a preprocess
 * when its results will (e.g. any two images resized to one size). */
static int can_join(const sip__pool_t *p, const sip_request_t *a, const sip_request_t *b) {
  if (b->rows < 0 || a->n_inputs != b->n_inputs || !same_outputs(a, b)) return 0;
  const char *raw = p->pre ? p->inputs[sip__preprocess_input(p->pre)].name : NULL;
  for (size_t i = 0; i < a->n_inputs; i++) {
    const sip_tensor_t *o = input_named(b, a->inputs[i]->name);
    if (!o) return 0;
    if (raw && !strcmp(raw, o->name) ? !sip__preprocess_joinable(p->pre, a->inputs[i], o)
                                     : !sip__batch_compatible(a->inputs[i], o))
      return 0;
  }
  return 1;
}

typedef struct batch {
  sip_request_t *reqs[MAX_BATCH_REQUESTS];
  size_t n;
  int64_t rows;
  uint64_t formed_ns; /* when its first request left the queue (0: not known) */
} batch_t;

/* Moves compatible queued requests into the batch while they fit, in
 * scheduling order (levels, then the delayed queue). Caller holds p->mu. */
static void gather(sip__pool_t *p, batch_t *b, int64_t max_rows) {
  for (int l = 0; l < SIP__SCHED_QUEUES && b->rows < max_rows; l++) {
    for (sip__sched_item_t *it = p->queue.q[l].head, *nx; it && b->n < MAX_BATCH_REQUESTS; it = nx) {
      nx = it->next;
      sip_request_t *r = SIP__QUEUED_REQ(it);
      if (b->rows + r->rows > max_rows || !can_join(p, b->reqs[0], r)) continue;
      sip__sched_remove(&p->queue, l, it);
      b->reqs[b->n++] = r;
      b->rows += r->rows;
    }
  }
}

static int is_preferred(const sip__pool_t *p, int64_t rows) {
  for (size_t i = 0; i < p->cfg->n_preferred; i++)
    if (p->cfg->preferred_batch_sizes[i] == rows) return 1;
  return 0;
}

static void deadline_timespec(uint64_t mono_us, struct timespec *ts) {
  ts->tv_sec = (time_t)(mono_us / 1000000);
  ts->tv_nsec = (long)(mono_us % 1000000) * 1000;
}

/* Fills the batch starting from b->reqs[0]. Caller holds p->mu; it is
 * released while waiting for more requests. */
static void form_batch(sip__pool_t *p, sip__session_t *s, batch_t *b) {
  int64_t max_rows = p->cfg->max_batch_size;
  uint64_t delay_us = (uint64_t)p->cfg->max_queue_delay_us;
  if (p->cfg->batch_levels[0].max_batch) {
    const sip__batch_level_t *lv = &p->cfg->batch_levels[atomic_load(&p->batch_level)];
    max_rows = lv->max_batch;
    delay_us = (uint64_t)lv->timeout_ms * 1000;
  }
  if (b->reqs[0]->batch_wait_ms) delay_us = (uint64_t)b->reqs[0]->batch_wait_ms * 1000;
  if (p->fixed_batch && p->fixed_batch < max_rows) max_rows = p->fixed_batch;
  if (b->reqs[0]->rows < 0 || max_rows <= 1) return;
  for (;;) {
    gather(p, b, max_rows);
    if (b->rows >= max_rows || b->n == MAX_BATCH_REQUESTS || is_preferred(p, b->rows) ||
        p->stopping)
      return;
    /* Leave before the earliest deadline by the pool's mean execution time
     * (at least 1 ms): a request whose deadline passes while it waits in a
     * forming batch would not run at all. */
    uint64_t n_exec = atomic_load(&p->st_compute_infer.count);
    uint64_t margin = n_exec ? atomic_load(&p->st_compute_infer.ns) / n_exec / 1000 : 0;
    if (margin < 1000) margin = 1000;
    uint64_t until = b->reqs[0]->sched.arrival_us + delay_us;
    for (size_t i = 0; i < b->n; i++) {
      uint64_t d = b->reqs[i]->deadline_us;
      if (d && d - (d > margin ? margin : d) < until) until = d > margin ? d - margin : 0;
    }
    if (sip__now_us() >= until) return;
    struct timespec ts;
    deadline_timespec(until, &ts);
    /* Waiting for a batch to fill is not computing: give up a kept slot. */
    if (s->ticket.state) sip__arbiter_cancel(&p->eng->arbiter, &s->ticket);
    p->forming = 1;
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    p->forming = 0;
  }
}

/* ---- execution ---- */

static void count_batch(sip__pool_t *p, int64_t rows) {
  int i = 0;
  while (i < SIP__BATCH_BUCKETS - 1 && rows > (1 << i)) i++;
  atomic_fetch_add(&p->batch_hist[i], 1);
  atomic_fetch_add(&p->batch_rows_sum, (uint64_t)rows);
}

/* Runs each request's preprocess (here, on the session's thread: never on
 * a transport's), replacing its raw input by the model's tensor. A request
 * whose input does not decode or convert fails alone and leaves the batch.
 * Caller holds no lock. */
static void preprocess_batch(sip__pool_t *p, batch_t *b, uint64_t start) {
  const char *raw = p->inputs[sip__preprocess_input(p->pre)].name;
  size_t n = 0;
  for (size_t i = 0; i < b->n; i++) {
    sip_request_t *r = b->reqs[i];
    sip_error_t *e = NULL;
    for (size_t k = 0; k < r->n_inputs && !e; k++) {
      if (strcmp(r->inputs[k]->name, raw)) continue;
      sip_tensor_t *t = NULL;
      if (!(e = sip__preprocess_run(p->pre, r->inputs[k], &t))) {
        sip_tensor_free(r->inputs[k]);
        r->inputs[k] = t;
        r->rows = t->rank ? t->dims[0] : -1;
      }
    }
    if (e) {
      sip__pool_finish_failed(p, r, sip_error_code(e), sip_error_message(e), start - r->sched.arrival_us);
      sip_error_free(e);
      continue;
    }
    b->reqs[n++] = r;
  }
  b->n = n;
}

/* The memory request `r` offers for each of `names` (data NULL: none);
 * 0 when it offers none for them. */
static int output_dests(const sip_request_t *r, const char *const *names, size_t n,
                        sip_out_dest_t *dests) {
  int any = 0;
  for (size_t j = 0; j < n; j++) {
    dests[j] = (sip_out_dest_t){0};
    for (size_t i = 0; i < r->n_dests; i++)
      if (!strcmp(r->dest_names[i], names[j])) {
        dests[j] = r->dests[i];
        any = 1;
      }
  }
  return any;
}

/* An injected slow or hung execution: waits delay_ms (a hang without one:
 * until the watchdog abandons it, at most a minute) or until the pool
 * stops. */
static void fault_wait(sip__pool_t *p, const sip__exec_t *x, sip__fault_kind_t kind,
                       int64_t delay_ms) {
  if (kind == SIP__FAULT_HANG && !delay_ms) delay_ms = 60000;
  uint64_t until = sip__now_us() + (uint64_t)delay_ms * 1000;
  while (sip__now_us() < until && !sip__exec_abandoned(x)) {
    pthread_mutex_lock(&p->mu);
    int stop = p->stopping;
    pthread_mutex_unlock(&p->mu);
    if (stop) break;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

/* The spans of a traced request's execution, under its parent: queue (from
 * arrival until its batch began forming, or its own arrival when it joined
 * a batch already forming), batch (forming and waiting for the compute
 * slot, with the batch's request count) and execute (the backend). */
static void trace_execution(sip_request_t *r, const batch_t *b, uint64_t start_us, uint64_t t_run,
                            uint64_t t_done, size_t n) {
  uint64_t arrival = r->sched.arrival_us * 1000, start = start_us * 1000;
  uint64_t formed = b->formed_ns && b->formed_ns < start ? b->formed_ns : start;
  if (formed < arrival) formed = arrival;
  if (start < formed) start = formed;
  sip__trace_span(r->trace, "queue", r->trace_parent, arrival, formed, NULL, 0);
  sip__trace_span(r->trace, "batch", r->trace_parent, formed, start, "sip.batch_size",
                  (int64_t)n);
  if (t_done > t_run)
    sip__trace_span(r->trace, "execute", r->trace_parent, t_run < start ? start : t_run, t_done,
                    "sip.batch_rows", b->rows);
}

/* Runs the batch (one request or many) and answers every request in it;
 * 1 when the watchdog abandoned the execution (the caller's thread then
 * ends without touching the session or the pool). */
static int run_batch(sip__session_t *s, batch_t *b) {
  sip__pool_t *p = s->pool;
  sip__arbiter_t *arb = &p->eng->arbiter;
  /* Take the compute slot first: waiting for it may take a request past its
   * deadline, and such a request must not run. */
  sip__arbiter_acquire(arb, &s->ticket);
  uint64_t start = sip__now_us();
  size_t n = 0;
  /* Requests that expired or were cancelled while waiting never run. */
  for (size_t i = 0; i < b->n; i++) {
    sip_request_t *r = b->reqs[i];
    uint64_t queue_us = start - r->sched.arrival_us;
    if (sip__request_cancelled(r)) {
      sip__pool_cancel_request(p, r, start);
    } else if (r->deadline_us && start >= r->deadline_us) {
      sip__pool_expire_request(p, r, start);
    } else {
      sip__hist_observe(&p->h_queue, queue_us);
      sip__stat_add(&p->st_queue, queue_us * 1000);
      b->reqs[n++] = r;
    }
  }
  b->n = n;
  uint64_t t_pre = sip__now_ns();
  if (p->pre && n) {
    preprocess_batch(p, b, start);
    n = b->n;
  }
  if (!n) {
    sip__arbiter_release(arb, &s->ticket, 0, 0);
    return 0;
  }
  /* With a watchdog, the execution may be abandoned while it runs: it then
   * holds only tensors of its own, and writes into no client memory. */
  int watched = p->cfg->hang_timeout_ms > 0 && !p->seq; /* a sequence's state is its session's */
  sip_request_t *r0 = b->reqs[0];
  b->rows = 0;
  for (size_t i = 0; i < n; i++) b->rows += b->reqs[i]->rows;
  sip__events_executing(s, (int64_t)n);

  uint64_t t_in = sip__now_ns();
  const char *names[64];
  size_t n_out = r0->n_outputs ? r0->n_outputs : (p->n_outputs < 64 ? p->n_outputs : 64);
  for (size_t i = 0; i < n_out; i++)
    names[i] = r0->n_outputs ? r0->outputs[i] : p->outputs[i].name;

  /* One request that fills the model as is runs on its own tensors: no copy. */
  int direct = n == 1 && (!p->fixed_batch || r0->rows == p->fixed_batch);
  sip_tensor_t *joined[64] = {0};
  const sip_tensor_t *inputs[64];
  sip_error_t *e = NULL;
  size_t n_in = r0->n_inputs < 64 ? r0->n_inputs : 64;
  for (size_t i = 0; i < n_in && !e; i++) {
    if (direct && watched) {
      const sip_tensor_t *t = r0->inputs[i];
      joined[i] = t->owner ? sip_tensor_new_view(t->name, t->dtype, t->rank, t->dims, t->data,
                                                 t->nbytes, t->owner)
                           : sip_tensor_new_copy(t->name, t->dtype, t->rank, t->dims, t->data,
                                                 t->nbytes);
      if (!joined[i]) e = SIP__OOM();
      inputs[i] = joined[i];
      continue;
    }
    if (direct) {
      inputs[i] = r0->inputs[i];
      continue;
    }
    const sip_tensor_t *parts[MAX_BATCH_REQUESTS];
    for (size_t k = 0; k < n; k++) parts[k] = input_named(b->reqs[k], r0->inputs[i]->name);
    e = sip__batch_concat(r0->inputs[i]->name, parts, n, p->fixed_batch,
                          p->cfg->padding_strategy, &joined[i]);
    inputs[i] = joined[i];
  }
  sip_tensor_t *outs[64] = {0};
  uint64_t t_run = sip__now_ns(), t_done = t_run;
  /* Preprocessing is the input stage of the computation (Triton's
   * compute_input). */
  sip__stat_add(&p->st_compute_input, t_run - (p->pre ? t_pre : t_in));
  if (e) sip__arbiter_release(arb, &s->ticket, 0, 0);
  int crashed = 0;
  if (!e) {
    sip__session_set_state(s, SIP__SESSION_RUNNING);
    t_run = sip__now_ns();
    int64_t delay_ms = 0;
    sip__fault_kind_t fault = sip__fault_take(p, s, &delay_ms);
    /* The context this execution runs on (read before the watchdog can
     * abandon it: the session's is then another one). */
    void *ctx = s->ctx;
    /* A process-isolated pool takes its faults in the worker, where a
     * crash ends the worker process. */
    if (p->iso && fault != SIP__FAULT_NONE) {
      sip__iso_fault(ctx, fault, delay_ms);
      fault = SIP__FAULT_NONE;
    }
    sip__exec_t *x = watched ? sip__exec_begin(s, b->reqs, n) : NULL;
    if (fault == SIP__FAULT_SLOW || fault == SIP__FAULT_HANG) fault_wait(p, x, fault, delay_ms);
    sip_out_dest_t dests[64];
    if (sip__exec_abandoned(x))
      e = sip_error_new(SIP_UNAVAILABLE, "abandoned");
    else if (fault == SIP__FAULT_ERROR)
      e = sip_error_new(SIP_INTERNAL, "injected error");
    else if ((crashed = fault == SIP__FAULT_CRASH))
      e = sip_error_new(SIP_UNAVAILABLE, "session %s failed: injected crash", s->id);
    else if (!watched && direct && r0->n_dests && p->backend->execute_into &&
             output_dests(r0, names, n_out, dests))
      e = p->backend->execute_into(ctx, inputs, n_in, names, n_out, dests, outs);
    else
      e = p->backend->execute(ctx, inputs, n_in, names, n_out, outs);
    /* The worker process ended under the execution: a session failure. */
    if (e && p->iso && sip__iso_lost(ctx)) crashed = 1;
    t_done = sip__now_ns();
    if (!sip__exec_end(s, x)) { /* abandoned by the watchdog: its requests are answered */
      for (size_t i = 0; i < n_in; i++) sip_tensor_free(joined[i]);
      for (size_t j = 0; j < n_out; j++) sip_tensor_free(outs[j]);
      sip_error_free(e);
      sip__exec_abandoned_exit(x);
      return 1;
    }
    if (!crashed) sip__session_set_state(s, SIP__SESSION_READY);
    /* With more work queued this session stays in line for the slot. */
    sip__arbiter_release(arb, &s->ticket, t_done - t_run,
                         atomic_load_explicit(&p->queue.n, memory_order_relaxed) > 0 ||
                             sip__seq_queued(p) > 0);
    sip__stat_add(&p->st_compute_infer, t_done - t_run);
    atomic_fetch_add(&p->execution_count, 1);
    count_batch(p, direct ? r0->rows : (p->fixed_batch ? p->fixed_batch : b->rows));
  }
  for (size_t i = 0; i < n_in; i++) sip_tensor_free(joined[i]);
  /* A crashed session is replaced before its requests are failed over. */
  if (crashed) sip__session_renew(s, p->iso ? sip_error_message(e) : "injected crash");
  uint64_t compute_us = (t_done - t_run) / 1000;
  sip__hist_observe(&p->h_compute, compute_us);
  atomic_fetch_add(&s->inferences, n);
  atomic_fetch_add(&p->inference_count, n);

  /* Scatter: each request gets its rows of every output, as views. */
  int64_t row0 = 0;
  for (size_t k = 0; k < n; k++) {
    sip_request_t *r = b->reqs[k];
    uint64_t queue_us = start - r->sched.arrival_us;
    if (r->trace) trace_execution(r, b, start, t_run, t_done, n);
    sip_tensor_t **mine = NULL;
    if (!e && direct) {
      mine = sip__calloc(n_out ? n_out : 1, sizeof *mine);
      if (mine) memcpy(mine, outs, n_out * sizeof *mine), memset(outs, 0, sizeof outs);
    } else if (!e) {
      mine = sip__calloc(n_out ? n_out : 1, sizeof *mine);
      for (size_t j = 0; mine && j < n_out && !e; j++)
        e = sip__batch_slice(outs[j], outs[j]->name, row0, r->rows, &mine[j]);
      if (e) { /* the model does not batch like its inputs: every request fails */
        for (size_t j = 0; j < n_out; j++) sip_tensor_free(mine[j]);
        sip__free(mine);
        mine = NULL;
      }
    }
    row0 += r->rows;
    if (crashed) {
      sip__pool_fail_over(p, r, SIP_UNAVAILABLE, sip_error_message(e), queue_us);
      continue;
    }
    if (e || !mine) {
      atomic_fetch_add(&s->errors, 1);
      char *msg = e ? sip__asprintf("pool '%s' session %d: %s", p->cfg->name, s->index,
                                    sip_error_message(e))
                    : NULL;
      sip__pool_finish_failed(p, r, e ? sip_error_code(e) : SIP_RESOURCE_EXHAUSTED,
                   msg ? msg : "out of memory", queue_us);
      sip__free(msg);
      continue;
    }
    if (k == n - 1) sip__stat_add(&p->st_compute_output, sip__now_ns() - t_done);
    r->served_by = s->id;
    sip__pool_finish(p, r, SIP_OK, NULL, mine, n_out, queue_us, compute_us);
    if (s->failed_at_us) sip__session_first_answer(s);
  }
  sip__events_executing(NULL, 0);
  sip_error_free(e);
  for (size_t j = 0; j < n_out; j++) sip_tensor_free(outs[j]);
  return 0;
}

/* The next request for session `s`: its sequences' under sequence
 * batching (*slot says which), else the best of the pool's queues. Caller
 * holds p->mu. */
static sip_request_t *next_request(sip__pool_t *p, sip__session_t *s, int *slot) {
  return p->seq ? sip__seq_pop(p, s->index, slot) : sip__pool_pop(p, sip__now_us());
}

/* Runs one request of a sequence: the control inputs, then the model; the
 * sequence's next request may go once this one is answered. Called and
 * returns with p->mu held. */
static void run_sequenced(sip__session_t *s, sip_request_t *r, int slot) {
  sip__pool_t *p = s->pool;
  pthread_mutex_unlock(&p->mu);
  sip_error_t *e = sip__seq_fill(p, r);
  if (e) {
    sip__pool_finish_failed(p, r, sip_error_code(e), sip_error_message(e), sip__now_us() - r->sched.arrival_us);
    sip_error_free(e);
  } else {
    batch_t one = {.reqs = {r}, .n = 1, .rows = r->rows};
    run_batch(s, &one); /* never abandoned: sequence pools run unwatched */
  }
  pthread_mutex_lock(&p->mu);
  uint64_t idle = sip__seq_done(p, slot, sip__now_us());
  /* Housekeeping releases the sequence if nothing comes before then (its
   * lock is a leaf, taken under p->mu). */
  if (idle) sip__engine_note_deadline(p->eng, idle);
}

/* Polls the queue until something arrives or `until` passes; the caller
 * holds p->mu, which is let go while polling. */
static void spin_for_work(sip__pool_t *p, uint64_t until) {
  p->spinning = 1;
  pthread_mutex_unlock(&p->mu);
  while (!atomic_load_explicit(&p->queue.n, memory_order_acquire) && sip__now_us() < until)
    for (int i = 0; i < 32; i++) sip__cpu_relax();
  pthread_mutex_lock(&p->mu);
  p->spinning = 0;
}

/* "pool/0" (Linux keeps 15 bytes): `top -H` and /proc show which pool's
 * session a thread is. Named by the thread that starts it, before the pool
 * reports READY, so that the name is there as soon as the pool serves. */
void sip__session_name_thread(sip__session_t *s) {
  char name[16];
  const char *slash = strrchr(s->id, '/');
  size_t tail = slash ? strlen(slash) : 0, head = strlen(s->id) - tail;
  if (tail > 15) tail = 15;
  if (head > 15 - tail) head = 15 - tail; /* a long name keeps its /index */
  memcpy(name, s->id, head);
  memcpy(name + head, s->id + strlen(s->id) - tail, tail);
  name[head + tail] = '\0';
  pthread_setname_np(s->thread, name);
}

void *sip__session_main(void *arg) {
  sip__session_t *s = arg;
  sip__pool_t *p = s->pool;
  batch_t *b = sip__malloc(sizeof *b);
  /* How long a session that just finished work polls the queue before it
   * sleeps: a client that waits for each answer sends its next request
   * about one round trip later, and catching it while polling saves a sleep
   * and a wake-up on both sides. One session per pool polls at a time, and
   * only right after work, so an idle server stays idle. The window is the
   * pool's idle_spin_us, else SIP_IDLE_SPIN_US, else the default (spin.h).
   * A process-isolated pool polls at its worker's channel instead, yielding
   * between polls (isolation_exec.c, worker.c): this poll keeps its core
   * from the worker (measured on 2 cores: +30..+100 us, the other busy). */
  int64_t spin_us = p->seq || p->iso ? 0 : sip__spin_window_us(p->cfg->idle_spin_us);
  uint64_t spin_until = 0; /* after work: poll until then before sleeping */
  pthread_mutex_lock(&p->mu);
  for (;;) {
    sip_request_t *r = NULL;
    int slot = -1;
    /* While another session forms a batch, it owns the queue. */
    /* A drained session takes nothing (SUSPENDED while it waits). */
    while ((atomic_load(&s->drain) || p->forming || !(r = next_request(p, s, &slot))) &&
           !p->stopping && !atomic_load(&s->retire)) {
      if (spin_until && !p->spinning && !p->forming && !atomic_load(&s->drain)) {
        spin_for_work(p, spin_until);
        spin_until = 0;
        continue;
      }
      spin_until = 0;
      int drain = atomic_load(&s->drain), st = atomic_load(&s->state);
      if (drain && st == SIP__SESSION_READY)
        sip__session_set_state(s, SIP__SESSION_SUSPENDED);
      else if (!drain && st == SIP__SESSION_SUSPENDED) /* resumed while idle */
        sip__session_set_state(s, SIP__SESSION_READY);
      /* Idle: a place kept in line for the compute slot goes to others. */
      if (s->ticket.state) sip__arbiter_cancel(&p->eng->arbiter, &s->ticket);
      pthread_cond_wait(&p->cv, &p->mu);
    }
    if (atomic_load(&s->state) == SIP__SESSION_SUSPENDED)
      sip__session_set_state(s, SIP__SESSION_READY);
    if (!r && atomic_load(&s->retire) && !p->stopping) break; /* scaled away, idle */
    if (!r && !(r = next_request(p, s, &slot))) break; /* stopping and drained */
    if (!s->ctx) { /* failed and not replaced: serves nothing */
      if (p->seq) {
        pthread_mutex_unlock(&p->mu);
        sip__pool_finish_failed(p, r, SIP_UNAVAILABLE, "the session of this sequence failed",
                     sip__now_us() - r->sched.arrival_us);
        pthread_mutex_lock(&p->mu);
        sip__seq_done(p, slot, sip__now_us());
      } else {
        sip__sched_push(&p->queue, r->sched.level, &r->sched);
        pthread_cond_broadcast(&p->cv);
      }
      break;
    }
    if (p->seq) {
      run_sequenced(s, r, slot);
      continue;
    }
    if (!b) { /* no memory for a batch: run requests one by one */
      pthread_mutex_unlock(&p->mu);
      batch_t one = {.reqs = {r}, .n = 1, .rows = r->rows};
      if (run_batch(s, &one)) return NULL;
      pthread_mutex_lock(&p->mu);
      continue;
    }
    b->reqs[0] = r;
    b->n = 1;
    b->rows = r->rows;
    b->formed_ns = sip__now_ns();
    if (p->cfg->max_batch_size) form_batch(p, s, b);
    /* Let the next idle session start on what is left. */
    if (sip__pool_queued(p)) {
      if (atomic_load(&p->n_drained))
        pthread_cond_broadcast(&p->cv);
      else
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (run_batch(s, b)) { /* abandoned: this thread is no longer the session's */
      sip__free(b);
      return NULL;
    }
    if (spin_us) spin_until = sip__now_us() + (uint64_t)spin_us;
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  if (s->ticket.state) sip__arbiter_cancel(&p->eng->arbiter, &s->ticket);
  sip__free(b);
  return NULL;
}

static void fail_shutdown(sip__pool_t *p, sip_request_t *r) {
  sip__pool_finish_failed(p, r, SIP_UNAVAILABLE, "server is shutting down", 0);
}

void sip__pool_shutdown(sip__pool_t *p) {
  sip__pool_stop_sessions(p, SIP__SESSION_DESTROYED);
  /* A pool that never started sessions may still hold queued requests. */
  sip_request_t *r;
  while ((r = sip__pool_pop(p, sip__now_us())))
    sip__pool_finish_failed(p, r, SIP_UNAVAILABLE, "server is shutting down", 0);
  sip__seq_drain(p, fail_shutdown);
  if (atomic_load(&p->state) != SIP__POOL_FAILED) atomic_store(&p->state, SIP__POOL_STOPPED);
}
