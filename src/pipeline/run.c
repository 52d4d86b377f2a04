/* sip — pipeline execution.
 *
 * A request to a pipeline becomes a `run`: every stage whose inputs are
 * ready is launched at once (independent branches run concurrently, and
 * stages of different requests overlap because each model stage is just a
 * request queued on its pool). A model stage is submitted to its pool with
 * the request's priority, remaining deadline and cancel token (end-to-end);
 * a transform stage runs inline on the thread that made its inputs ready,
 * except those ready at submission, which go to a few workers so that the
 * submitting transport thread never decodes or resizes.
 * When a stage ends, its dependents' counters drop; the early-exit
 * condition is checked; the run answers once nothing is in flight. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "pipeline/pipeline_impl.h"

/* ---- running ---- */

enum { ST_PENDING = 0, ST_RUNNING, ST_DONE, ST_SKIPPED, ST_FAILED, ST_NOT_REACHED };
static const char *status_names[] = {"pending", "running", "ran", "skipped", "failed",
                                     "not_reached"};

typedef struct sstate {
  int status;
  sip_tensor_t **outs; /* kept outputs, named as the stage's outputs */
  size_t n_outs;
  int deps_left;
  uint64_t start_us, end_us;
  uint64_t queue_us, compute_us;
  uint64_t span; /* a traced run: the stage's span id (its model request's parent) */
} sstate_t;

typedef struct run {
  sip__pipeline_t *pl;
  pthread_mutex_t mu;
  sip_request_t *req; /* owns the inputs; id, priority, cancel token */
  uint64_t arrival_us, deadline_us;
  uint32_t stage_timeout_ms[MAX_STAGES];
  sip__expr_t *exit; /* the request's own early exit (owned), else NULL */
  sstate_t st[MAX_STAGES];
  int pending; /* stages launched and not ended */
  sip_code_t code;
  char *message;
  int exit_stage; /* -1: no early exit */
  sip_infer_done_fn done;
  void *user;
} run_t;

typedef struct stage_call {
  run_t *r;
  int stage;
} stage_call_t;

static void launch(run_t *r, int k);

/* ---- the workers ---- */

SIP__FIFO_DEFINE(jobs, sip__job_queue_t, sip__job_t)

static void *worker_main(void *arg) {
  sip__pipeline_set_t *ps = arg;
  pthread_mutex_lock(&ps->mu);
  for (;;) {
    while (!ps->jobs.head && !ps->closed) pthread_cond_wait(&ps->cv, &ps->mu);
    sip__job_t *j = jobs_pop(&ps->jobs);
    if (!j) break; /* closed and drained */
    ps->busy++;
    pthread_mutex_unlock(&ps->mu);
    launch(j->r, j->stage);
    sip__free(j);
    pthread_mutex_lock(&ps->mu);
    ps->busy--;
    if (!ps->jobs.head && !ps->busy) pthread_cond_broadcast(&ps->idle_cv);
  }
  pthread_mutex_unlock(&ps->mu);
  return NULL;
}

void sip__pipeline_workers_start(sip__pipeline_set_t *ps) {
  int need = 0; /* workers only where a transform stage starts a pipeline */
  for (size_t i = 0; ps && i < ps->n; i++)
    for (size_t k = 0; !ps->p[i].error && k < ps->p[i].n; k++)
      need |= ps->p[i].st[k].tf && !ps->p[i].st[k].n_deps;
  for (int i = 0; need && i < N_WORKERS; i++)
    if (pthread_create(&ps->workers[ps->n_workers], NULL, worker_main, ps) == 0) ps->n_workers++;
}

void sip__pipelines_quiesce(sip__pipeline_set_t *ps) {
  if (!ps) return;
  pthread_mutex_lock(&ps->mu);
  ps->closed = 1;
  pthread_cond_broadcast(&ps->cv);
  while (ps->jobs.head || ps->busy) pthread_cond_wait(&ps->idle_cv, &ps->mu);
  pthread_mutex_unlock(&ps->mu);
  for (int i = 0; i < ps->n_workers; i++) pthread_join(ps->workers[i], NULL);
  ps->n_workers = 0;
}

void sip__pipelines_wait_runs(sip__pipeline_set_t *ps, uint64_t deadline_us) {
  if (!ps) return;
  pthread_mutex_lock(&ps->mu);
  for (uint64_t now; atomic_load(&ps->runs) > 0 && (now = sip__now_us()) < deadline_us;) {
    /* idle_cv runs on the realtime clock: wait the time left from now. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (deadline_us - now) * 1000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&ps->idle_cv, &ps->mu, &ts);
  }
  pthread_mutex_unlock(&ps->mu);
}

/* Queues stage k of r for a worker; 0 when it must run here instead (no
 * workers, quiesced, out of memory). */
static int hand_off(sip__pipeline_set_t *ps, run_t *r, int k) {
  sip__job_t *j = ps->n_workers ? sip__malloc(sizeof *j) : NULL;
  if (!j) return 0;
  j->r = r;
  j->stage = k;
  pthread_mutex_lock(&ps->mu);
  int ok = !ps->closed;
  if (ok) {
    jobs_push(&ps->jobs, j);
    pthread_cond_signal(&ps->cv);
  }
  pthread_mutex_unlock(&ps->mu);
  if (!ok) sip__free(j);
  return ok;
}

/* ---- a run ---- */

/* The request's input `name`, or NULL. */
static const sip_tensor_t *req_input(const run_t *r, const char *name) {
  for (size_t i = 0; i < r->req->n_inputs; i++)
    if (!strcmp(r->req->inputs[i]->name, name)) return r->req->inputs[i];
  return NULL;
}

/* Output `name` of stage k once it is done, or NULL. */
static const sip_tensor_t *stage_output(const run_t *r, int k, const char *name) {
  const sstate_t *ss = &r->st[k];
  for (size_t i = 0; ss->status == ST_DONE && i < ss->n_outs; i++)
    if (!strcmp(ss->outs[i]->name, name)) return ss->outs[i];
  return NULL;
}

static const sip_tensor_t *lookup(void *ctx, const char *stage, const char *output) {
  run_t *r = ctx;
  if (!strcmp(stage, "pipeline")) return req_input(r, output);
  int k = stage_index(r->pl, stage, strlen(stage));
  return k < 0 ? NULL : stage_output(r, k, output);
}

/* 1 when every stage the expression refers to has ended. */
static int refs_ready(run_t *r, const sip__expr_t *e) {
  const char *const *refs;
  size_t n = sip__expr_refs(e, &refs);
  for (size_t i = 0; i < n; i++) {
    const char *dot = strchr(refs[i], '.');
    if (!dot || ((size_t)(dot - refs[i]) == 8 && !strncmp(refs[i], "pipeline", 8))) continue;
    int k = stage_index(r->pl, refs[i], (size_t)(dot - refs[i]));
    if (k < 0 || r->st[k].status < ST_DONE) return 0;
  }
  return 1;
}

static void fail_locked(run_t *r, sip_code_t code, char *msg /* owned */) {
  if (r->code == SIP_OK) {
    r->code = code;
    r->message = msg;
  } else {
    sip__free(msg);
  }
}

static void stage_tensors_free(sip_tensor_t **t, size_t n) {
  for (size_t i = 0; t && i < n; i++) sip_tensor_free(t[i]);
  sip__free(t);
}

/* The response: pipeline outputs, each ran stage's outputs as
 * "<stage>/<output>", and the stages' story as JSON in the message. */
static void finish(run_t *r) {
  sip__pipeline_t *pl = r->pl;
  json_t *stages = json_object();
  for (size_t k = 0; k < pl->n; k++) {
    sstate_t *ss = &r->st[k];
    json_t *o = json_pack("{s:s}", "status", status_names[ss->status]);
    if (ss->end_us) {
      json_object_set_new(o, "us", json_integer((json_int_t)(ss->end_us - ss->start_us)));
      json_object_set_new(o, "queue_us", json_integer((json_int_t)ss->queue_us));
      json_object_set_new(o, "compute_us", json_integer((json_int_t)ss->compute_us));
    }
    json_object_set_new(stages, pl->st[k].cfg->name, o);
    sip__stage_t *s = &pl->st[k];
    if (ss->status == ST_DONE) {
      atomic_fetch_add(&s->ran, 1);
      atomic_fetch_add(&s->total_us, ss->end_us - ss->start_us);
    } else if (ss->status == ST_SKIPPED || ss->status == ST_NOT_REACHED) {
      atomic_fetch_add(&s->skipped, 1);
    } else if (ss->status == ST_FAILED) {
      atomic_fetch_add(&s->failed, 1);
    }
  }
  json_t *info = json_pack("{s:s,s:o,s:o}", "pipeline", pl->cfg->name, "stages", stages,
                           "early_exit",
                           r->exit_stage >= 0 ? json_string(pl->st[r->exit_stage].cfg->name)
                                              : json_null());
  if (r->exit_stage >= 0) atomic_fetch_add(&pl->early_exits, 1);
  char *info_txt = json_dumps(info, JSON_COMPACT);
  json_decref(info);
  uint64_t q = 0, c = 0;
  for (size_t k = 0; k < pl->n; k++) q += r->st[k].queue_us, c += r->st[k].compute_us;
  sip_tensor_t *outs[256];
  size_t n = 0;
  if (r->code == SIP_OK) {
    /* The request may ask for some outputs by name (plain or stage/output). */
    sip_request_t *rq = r->req;
#define WANTED(nm) (!rq->n_outputs || find_str(rq->outputs, rq->n_outputs, (nm)) >= 0)
    for (size_t i = 0; i < pl->n_po && n < 256; i++) {
      const sip_tensor_t *t = stage_output(r, pl->po[i].stage, pl->po[i].out);
      if (!t || !WANTED(pl->po[i].name)) continue;
      outs[n] = sip_tensor_new_view(pl->po[i].name, t->dtype, t->rank, t->dims, t->data,
                                    t->nbytes, t->owner);
      if (outs[n]) n++;
    }
    for (size_t k = 0; k < pl->n; k++) {
      sstate_t *ss = &r->st[k];
      for (size_t j = 0; ss->status == ST_DONE && j < ss->n_outs && n < 256; j++) {
        const sip_tensor_t *t = ss->outs[j];
        char name[512];
        snprintf(name, sizeof name, "%s/%s", pl->st[k].cfg->name, t->name);
        if (!WANTED(name)) continue;
        outs[n] = sip_tensor_new_view(name, t->dtype, t->rank, t->dims, t->data, t->nbytes,
                                      t->owner);
        if (outs[n]) n++;
      }
    }
#undef WANTED
  }
  atomic_fetch_add(&pl->by_code[r->code < SIP_CODE_COUNT_ ? r->code : SIP_INTERNAL], 1);
  atomic_fetch_add(r->code == SIP_OK ? &pl->ok_us : &pl->fail_us, sip__now_us() - r->arrival_us);
  atomic_store(&pl->last_ms, sip__wall_us() / 1000);
  sip_tensor_t **arr = n ? sip__calloc(n, sizeof *arr) : NULL;
  if (arr) memcpy(arr, outs, n * sizeof *outs);
  else
    for (size_t i = 0; i < n; i++) sip_tensor_free(outs[i]);
  char *msg = r->code == SIP_OK ? info_txt : r->message;
  sip__free(r->code == SIP_OK ? r->message : info_txt);
  r->message = NULL;
  sip_response_t *resp = sip__response_new(r->code, msg, r->req->id, arr, arr ? n : 0, q, c,
                                           sip__now_us() - r->arrival_us);
  if (resp && r->req->trace) { /* to the front-end's send span */
    if (r->code != SIP_OK) sip__trace_root_end(r->req->trace, 0, 1);
    resp->trace = r->req->trace;
    r->req->trace = NULL;
  }
  if (r->code != SIP_OK)
    sip__log_failure("pipeline=%s code=%s reason=\"%s\"", pl->cfg->name,
             sip_code_name(r->code), resp && resp->message ? resp->message : "");
  for (size_t k = 0; k < pl->n; k++) stage_tensors_free(r->st[k].outs, r->st[k].n_outs);
  sip_infer_done_fn done = r->done;
  void *user = r->user;
  sip__pipeline_set_t *ps = pl->ps;
  sip_request_free(r->req);
  sip__expr_free(r->exit);
  pthread_mutex_destroy(&r->mu);
  sip__free(r);
  done(resp, user);
  if (atomic_fetch_sub(&ps->runs, 1) == 1) { /* the last one: a drain may wait for it */
    pthread_mutex_lock(&ps->mu);
    pthread_cond_broadcast(&ps->idle_cv);
    pthread_mutex_unlock(&ps->mu);
  }
}

/* A traced run's span of stage k (child of the request's root span): from
 * its launch (microseconds, as its model request's arrival) to now. Caller
 * holds r->mu. */
static void trace_stage(run_t *r, int k, int status) {
  sstate_t *ss = &r->st[k];
  const char *name = r->pl->st[k].cfg->name;
  sip__span_t sp = {.id = ss->span ? ss->span : sip__trace_rand64(), .parent = r->req->trace_parent,
                    .start_ns = ss->start_us * 1000, .end_ns = sip__now_ns(),
                    .str_key = "sip.stage", .error = status == ST_FAILED};
  snprintf(sp.name, sizeof sp.name, "stage:%s", name);
  snprintf(sp.str_val, sizeof sp.str_val, "%s", name);
  sip__trace_add(r->req->trace, &sp);
}

/* A stage ended (ran, skipped, failed): record it, release its dependents,
 * launch those now ready, answer when nothing is left. `outs` is taken. */
static void stage_end(run_t *r, int k, int status, sip_tensor_t **outs, size_t n_outs,
                      sip_code_t code, char *msg /* owned */, uint64_t queue_us,
                      uint64_t compute_us) {
  sip__pipeline_t *pl = r->pl;
  sip__stage_t *s = &pl->st[k];
  int ready[MAX_STAGES], n_ready = 0;
  pthread_mutex_lock(&r->mu);
  sstate_t *ss = &r->st[k];
  ss->status = status;
  ss->end_us = ss->start_us ? sip__now_us() : 0;
  if (r->req->trace && ss->start_us) trace_stage(r, k, status);
  ss->queue_us = queue_us;
  ss->compute_us = compute_us;
  if (status == ST_DONE) {
    /* Keep what the stage keeps (output_filter), named as its outputs. */
    size_t kept = 0;
    for (size_t i = 0; i < n_outs; i++) {
      if (keeps(s, outs[i]->name))
        outs[kept++] = outs[i];
      else
        sip_tensor_free(outs[i]);
    }
    ss->outs = outs;
    ss->n_outs = kept;
    outs = NULL;
    uint32_t limit = r->stage_timeout_ms[k];
    if (limit && ss->end_us - ss->start_us > (uint64_t)limit * 1000) {
      ss->status = ST_FAILED;
      fail_locked(r, SIP_DEADLINE_EXCEEDED,
                  sip__asprintf("stage '%s' took %.1f ms, over its stage_timeout_ms of %u",
                                s->cfg->name, (double)(ss->end_us - ss->start_us) / 1000.0, limit));
    }
  } else if (status == ST_FAILED) {
    fail_locked(r, code, msg);
    msg = NULL;
  }
  stage_tensors_free(outs, n_outs);
  sip__free(msg);
  /* Early exit: once the condition can be evaluated and holds, nothing new
   * starts; what runs finishes and the answer has what was computed. */
  const sip__expr_t *ex = r->exit ? r->exit : pl->exit;
  if (ss->status == ST_DONE && ex && r->exit_stage < 0 && r->code == SIP_OK && refs_ready(r, ex)) {
    int yes = 0;
    sip_error_t *e = sip__expr_eval(ex, lookup, r, &yes);
    if (e) {
      fail_locked(r, SIP_FAILED_PRECONDITION,
                  sip__asprintf("early_exit_condition after stage '%s': %s", s->cfg->name,
                                sip_error_message(e)));
      sip_error_free(e);
    } else if (yes) {
      r->exit_stage = k;
    }
  }
  for (size_t u = 0; u < s->n_users; u++) {
    int d = s->users[u];
    if (--r->st[d].deps_left == 0) {
      ready[n_ready++] = d;
      r->pending++;
    }
  }
  int last = --r->pending == 0;
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < n_ready; i++) launch(r, ready[i]);
  if (last) finish(r);
}

static void model_done(sip_response_t *resp, void *user) {
  stage_call_t sc = *(stage_call_t *)user;
  sip__free(user);
  run_t *r = sc.r;
  const char *name = r->pl->st[sc.stage].cfg->name;
  if (!resp) {
    stage_end(r, sc.stage, ST_FAILED, NULL, 0, SIP_RESOURCE_EXHAUSTED,
              sip__asprintf("stage '%s': out of memory", name), 0, 0);
    return;
  }
  if (resp->code != SIP_OK) {
    char *m = resp->code == SIP_DEADLINE_EXCEEDED && r->stage_timeout_ms[sc.stage]
                  ? sip__asprintf("stage '%s' exceeded its stage_timeout_ms of %u: %s", name,
                                  r->stage_timeout_ms[sc.stage], resp->message)
                  : sip__asprintf("stage '%s': %s", name, resp->message);
    sip_code_t code = resp->code;
    sip_response_free(resp);
    stage_end(r, sc.stage, ST_FAILED, NULL, 0, code, m, 0, 0);
    return;
  }
  size_t n;
  uint64_t q = resp->queue_us, c = resp->compute_us;
  sip_tensor_t **outs = sip_response_take_outputs(resp, &n);
  sip_response_free(resp);
  stage_end(r, sc.stage, ST_DONE, outs, n, SIP_OK, NULL, q, c);
}

/* The source tensor of an input wire (NULL when its stage did not run). */
static const sip_tensor_t *source(run_t *r, const sip__wire_t *w) {
  return w->src < 0 ? req_input(r, w->out) : stage_output(r, w->src, w->out);
}

/* `t` converted per `conv` (sip__wire_conv_t) into a tensor named `name`: NULL
 * with *err set (owned) when it is not the image the wiring expected. */
static sip_tensor_t *convert(const char *name, int conv, const sip_tensor_t *t, char **err) {
  int64_t n = 1, c, h, w;
  if (conv == CONV_NCHW_F32_TO_HWC_U8) {
    if (t->dtype != SIP_DTYPE_FLOAT32 || t->rank != 4 || t->dims[0] != 1) {
      *err = sip__asprintf("input '%s': expected one float32 NCHW image [1,C,H,W] to convert to "
                           "uint8 HWC, got %s of rank %d", name, sip_dtype_name(t->dtype), t->rank);
      return NULL;
    }
    c = t->dims[1], h = t->dims[2], w = t->dims[3];
  } else {
    if (t->dtype != SIP_DTYPE_UINT8 || t->rank != 3) {
      *err = sip__asprintf("input '%s': expected a uint8 HWC image [H,W,C] to convert to float32 "
                           "NCHW, got %s of rank %d", name, sip_dtype_name(t->dtype), t->rank);
      return NULL;
    }
    h = t->dims[0], w = t->dims[1], c = t->dims[2];
  }
  size_t px = (size_t)(h * w * c);
  sip_buf_t *b = sip_buf_new(px * (conv == CONV_NCHW_F32_TO_HWC_U8 ? 1 : sizeof(float)));
  if (!b) {
    *err = sip__strdup("out of memory");
    return NULL;
  }
  void *out = sip_buf_data(b);
  for (int64_t y = 0; y < h; y++)
    for (int64_t x = 0; x < w; x++)
      for (int64_t ch = 0; ch < c; ch++) {
        size_t hwc = (size_t)((y * w + x) * c + ch), chw = (size_t)((ch * h + y) * w + x);
        if (conv == CONV_NCHW_F32_TO_HWC_U8) {
          float v = ((const float *)t->data)[chw];
          ((uint8_t *)out)[hwc] = v >= 255.f ? 255 : v > 0.f ? (uint8_t)(v + 0.5f) : 0;
        } else {
          ((float *)out)[chw] = ((const uint8_t *)t->data)[hwc];
        }
      }
  int64_t hwc_dims[3] = {h, w, c}, nchw_dims[4] = {n, c, h, w};
  sip_tensor_t *r = conv == CONV_NCHW_F32_TO_HWC_U8
                        ? sip_tensor_new_view(name, SIP_DTYPE_UINT8, 3, hwc_dims, out, px, b)
                        : sip_tensor_new_view(name, SIP_DTYPE_FLOAT32, 4, nchw_dims, out,
                                              px * sizeof(float), b);
  sip_buf_unref(b);
  if (!r) *err = sip__strdup("out of memory");
  return r;
}

static void launch(run_t *r, int k) {
  sip__pipeline_t *pl = r->pl;
  sip__stage_t *s = &pl->st[k];
  pthread_mutex_lock(&r->mu);
  int cancelled = r->req->cancel && atomic_load(&r->req->cancel->cancelled);
  if (cancelled) fail_locked(r, SIP_CANCELLED, sip__strdup("request was cancelled between stages"));
  int why_not = r->code != SIP_OK || r->exit_stage >= 0 ? ST_NOT_REACHED : 0;
  /* A stage whose inputs come from a stage that did not run does not run. */
  for (size_t d = 0; !why_not && d < s->n_deps; d++)
    if (r->st[s->deps[d]].status != ST_DONE) why_not = ST_SKIPPED;
  int yes = 1;
  char *err = NULL;
  sip_code_t code = SIP_INVALID_ARGUMENT; /* what err answers with */
  if (!why_not && s->when) {
    sip_error_t *e = sip__expr_eval(s->when, lookup, r, &yes);
    if (e) {
      err = sip__asprintf("stage '%s' when: %s", s->cfg->name, sip_error_message(e));
      sip_error_free(e);
    } else if (!yes) {
      why_not = ST_SKIPPED;
    }
  }
  uint64_t now = sip__now_us();
  r->st[k].start_us = why_not ? 0 : now;
  r->st[k].status = ST_RUNNING;
  uint32_t timeout = r->stage_timeout_ms[k];
  if (!why_not && !err && r->deadline_us) {
    if (now >= r->deadline_us) {
      err = sip__asprintf("the request's deadline passed before stage '%s'", s->cfg->name);
      code = SIP_DEADLINE_EXCEEDED;
    }
    uint64_t left_ms = r->deadline_us > now ? (r->deadline_us - now + 999) / 1000 : 1;
    if (!timeout || left_ms < timeout) timeout = (uint32_t)left_ms;
  }
  /* Inputs as views of their sources (the run keeps the sources alive). */
  sip_tensor_t *ins[MAX_STAGE_INPUTS]; /* build_one refuses stages with more */
  size_t n_in = 0;
  for (size_t i = 0; !why_not && !err && i < s->n_in; i++) {
    const sip_tensor_t *t = source(r, &s->in[i]);
    if (!t) {
      err = sip__asprintf("stage '%s': its input '%s' (from %s.%s) is missing", s->cfg->name,
                          s->in[i].name, s->in[i].src < 0 ? "pipeline" : pl->st[s->in[i].src].cfg->name,
                          s->in[i].out);
      break;
    }
    if (s->in[i].conv) {
      char *why = NULL;
      ins[n_in] = convert(s->in[i].name, s->in[i].conv, t, &why);
      if (why) {
        err = sip__asprintf("stage '%s': %s", s->cfg->name, why);
        sip__free(why);
        break;
      }
    } else {
      ins[n_in] = sip_tensor_new_view(s->in[i].name, t->dtype, t->rank, t->dims, t->data,
                                      t->nbytes, t->owner);
    }
    if (!ins[n_in]) err = sip__strdup("out of memory");
    else n_in++;
  }
  pthread_mutex_unlock(&r->mu);
  if (why_not || err) {
    for (size_t i = 0; i < n_in; i++) sip_tensor_free(ins[i]);
    stage_end(r, k, why_not ? why_not : ST_FAILED, NULL, 0, code, err, 0, 0);
    return;
  }
  if (s->tf) {
    sip_tensor_t **outs = NULL;
    size_t n_outs = 0;
    uint64_t t0 = sip__now_us();
    sip_error_t *e = sip__transform_run(s->tf, (const sip_tensor_t *const *)ins, n_in, &outs,
                                        &n_outs);
    for (size_t i = 0; i < n_in; i++) sip_tensor_free(ins[i]);
    if (e) {
      char *m = sip__asprintf("stage '%s' (%s): %s", s->cfg->name, s->cfg->operation,
                              sip_error_message(e));
      code = sip_error_code(e);
      sip_error_free(e);
      stage_end(r, k, ST_FAILED, NULL, 0, code, m, 0, 0);
      return;
    }
    /* Transform outputs carry the described names already; the stage owns the array. */
    stage_end(r, k, ST_DONE, outs, n_outs, SIP_OK, NULL, 0, sip__now_us() - t0);
    return;
  }
  sip_request_t *sub = sip_request_new(s->cfg->pool);
  stage_call_t *sc = sip__malloc(sizeof *sc);
  sip_error_t *e = sub && sc ? NULL : SIP__OOM();
  for (size_t i = 0; i < n_in; i++) {
    if (!e)
      e = sip_request_add_input(sub, ins[i]);
    else
      sip_tensor_free(ins[i]);
  }
  if (!e) {
    sub->id = r->req->id;
    sub->priority = r->req->priority;
    sub->timeout_ms = timeout;
    sip_request_set_cancel_token(sub, r->req->cancel);
    if (r->req->trace) { /* the model's spans go under the stage's */
      sip__trace_ref(r->req->trace);
      sub->trace = r->req->trace;
      sub->trace_parent = r->st[k].span = sip__trace_rand64();
    }
    sc->r = r;
    sc->stage = k;
    /* The stage's pool, found once through the registry (its default
     * version: the pipeline follows reloads) and submitted to directly. A
     * fan-out (N crops) goes in as one batch, split into the pool's
     * max_batch_size chunks when it has one. */
    sip__model_t *m = sip__registry_is_named(r->pl->ps->eng, s->cfg->pool)
                          ? NULL
                          : sip__registry_find_model(r->pl->ps->eng, s->cfg->pool, NULL, &e);
    if (m) {
      sub->done = model_done;
      sub->user = sc;
      e = m->vt->submit_batch ? m->vt->submit_batch(m, sub, 0, 0) : m->vt->submit(m, sub);
      sub = NULL;
      if (!e) return;
    } else if (!e) {
      e = sip_error_new(SIP_NOT_FOUND, "no pool named '%s'", s->cfg->pool);
    }
  }
  sip_request_free(sub);
  sip__free(sc);
  char *m = sip__asprintf("stage '%s': %s", s->cfg->name, sip_error_message(e));
  code = sip_error_code(e);
  sip_error_free(e);
  stage_end(r, k, ST_FAILED, NULL, 0, code, m, 0, 0);
}

/* ---- submission (the model interface) ---- */

/* pipeline_vt.submit: takes `req` (its done/user set), also on error. */
static sip_error_t *pipeline_submit(sip__model_t *m, sip_request_t *req) {
  sip__pipeline_t *pl = (sip__pipeline_t *)m;
  sip__pipeline_set_t *ps = pl->ps;
  sip_infer_done_fn done = req->done;
  void *user = req->user;
  sip_error_t *e = NULL;
  int state = atomic_load(&pl->state);
  if (state == SIP__MODEL_LOADING)
    e = sip_error_new(SIP_UNAVAILABLE, "pipeline '%s' is not ready: the server is still loading "
                      "its pools", pl->cfg->name);
  else if (pl->error)
    e = sip_error_new(SIP_UNAVAILABLE, "pipeline '%s' failed to build: %s", pl->cfg->name,
                      pl->error);
  else if (req->version)
    e = sip__pipeline_version_error(pl->cfg->name, req->version);
  /* The pipeline's inputs: each present, no others. */
  for (size_t i = 0; !e && i < pl->n_inputs; i++) {
    size_t j = 0;
    while (j < req->n_inputs && strcmp(req->inputs[j]->name, pl->inputs[i])) j++;
    if (j == req->n_inputs)
      e = sip_error_new(SIP_INVALID_ARGUMENT, "missing input '%s' of pipeline '%s'",
                        pl->inputs[i], pl->cfg->name);
  }
  for (size_t j = 0; !e && j < req->n_inputs; j++)
    if (find_str(pl->inputs, pl->n_inputs, req->inputs[j]->name) < 0)
      e = sip_error_new(SIP_INVALID_ARGUMENT, "pipeline '%s' has no input '%s'", pl->cfg->name,
                        req->inputs[j]->name);
  /* Outputs asked for by name: a pipeline output, or STAGE/OUTPUT of a
   * stage that keeps it. */
  for (size_t j = 0; !e && j < req->n_outputs; j++) {
    const char *want = req->outputs[j], *slash = strchr(want, '/');
    int ok = 0;
    for (size_t o = 0; o < pl->n_po && !ok; o++) ok = !strcmp(pl->po[o].name, want);
    int k = slash ? stage_index(pl, want, (size_t)(slash - want)) : -1;
    if (!ok && k >= 0) ok = keeps(&pl->st[k], slash + 1);
    if (!ok)
      e = sip_error_new(SIP_INVALID_ARGUMENT, "pipeline '%s' has no output '%s'; expected one of "
                        "its outputs or STAGE/OUTPUT of an output a stage keeps",
                        pl->cfg->name, want);
  }
  run_t *r = e ? NULL : sip__calloc(1, sizeof *r);
  if (!e && !r) e = SIP__OOM();
  if (!e) {
    r->pl = pl;
    r->req = req;
    r->exit_stage = -1;
    r->arrival_us = sip__now_us();
    r->deadline_us = req->timeout_ms ? r->arrival_us + (uint64_t)req->timeout_ms * 1000 : 0;
    r->done = done;
    r->user = user;
    pthread_mutex_init(&r->mu, NULL);
    for (size_t i = 0; i < pl->cfg->n_stage_timeout_ms; i++)
      r->stage_timeout_ms[i] = pl->cfg->stage_timeout_ms[i];
    e = sip__pipeline_request_config(pl, req, r->stage_timeout_ms, &r->exit);
    if (e) {
      sip__expr_free(r->exit);
      pthread_mutex_destroy(&r->mu);
      sip__free(r);
    }
  }
  if (e) {
    if (state != SIP__MODEL_LOADING) atomic_fetch_add(&pl->by_code[sip_error_code(e)], 1);
    sip_request_free(req);
    return e;
  }
  int ready[MAX_STAGES], n_ready = 0;
  for (size_t k = 0; k < pl->n; k++) {
    r->st[k].deps_left = (int)pl->st[k].n_deps;
    if (!pl->st[k].n_deps) ready[n_ready++] = (int)k;
  }
  r->pending = n_ready;
  atomic_fetch_add(&ps->runs, 1);
  for (int i = 0; i < n_ready; i++)
    if (!pl->st[ready[i]].tf || !hand_off(ps, r, ready[i])) launch(r, ready[i]);
  return NULL;
}

/* Pipelines live as long as the engine: nothing to count. */
static void pipeline_ref(sip__model_t *m) { (void)m; }

/* A pipeline is unversioned: it refuses versions itself (pipeline_submit). */
static void pipeline_identity(const sip__model_t *m, sip__model_id_t *id) {
  const sip__pipeline_t *pl = (const sip__pipeline_t *)m;
  *id = (sip__model_id_t){.name = pl->cfg->name, .version_num = -1};
}

const sip__model_vt_t sip__pipeline_vt = {
    .kind = "pipeline",
    .submit = pipeline_submit,
    .describe_io = sip__pipeline_describe_io,
    .state = sip__pipeline_state,
    .ref = pipeline_ref,
    .unref = pipeline_ref,
    .identity = pipeline_identity,
};
