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
#include "pipeline/pipeline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "ops/expr.h"
#include "ops/transforms.h"
#include "session/engine.h"

#define MAX_STAGES 64
#define MAX_STAGE_INPUTS 64

typedef struct wire {
  char *name; /* the stage's input */
  int src;    /* -1: a pipeline input; else a stage index */
  char *out;  /* the source's output (or pipeline input) name */
} wire_t;

typedef struct stage {
  const sip_stage_config_t *cfg;
  sip_transform_t *tf;
  sip_expr_t *when;
  wire_t *in;
  size_t n_in;
  char **outs; /* what the stage produces (model outputs or the transform's) */
  size_t n_outs;
  sip_io_desc_t *in_desc, *out_desc; /* its inputs' and outputs' descriptors (copies) */
  size_t n_in_desc, n_out_desc;
  int deps[MAX_STAGES];
  size_t n_deps;
  int users[MAX_STAGES];
  size_t n_users;
  atomic_uint_fast64_t ran, skipped, failed, total_us;
} stage_t;

typedef struct pout {
  int stage;
  char *out;  /* the stage's output */
  char *name; /* the name in the response */
} pout_t;

typedef struct pipeline {
  sip__model_t base; /* first: a pipeline is a model (pipeline_vt) */
  struct sip_pipeline_set *ps;
  _Atomic int state; /* sip__model_state_t: LOADING until built, then READY or FAILED */
  const sip_pipeline_config_t *cfg;
  stage_t *st;
  size_t n;
  sip_expr_t *exit;
  char **inputs; /* pipeline.<name> references */
  size_t n_inputs;
  /* The pipeline's inputs and outputs, typed as the stages that read and
   * make them; an input only conditions read has dtype INVALID, rank -1. */
  sip_io_desc_t *io_in, *io_out;
  pout_t *po;
  size_t n_po;
  char *error; /* non-NULL: FAILED */
  atomic_uint_fast64_t by_code[SIP_CODE_COUNT_];
  atomic_uint_fast64_t early_exits;
  /* End-to-end time of answered requests, successful and failed; when the
   * last one arrived (ms since the epoch). */
  atomic_uint_fast64_t ok_us, fail_us, last_ms;
} pipeline_t;

/* A transform stage ready at submission, handed to a worker. */
typedef struct job {
  struct run *r;
  int stage;
  struct job *next;
} job_t;

#define N_WORKERS 4

struct sip_pipeline_set {
  sip__engine_t *eng; /* its stages find their pools in eng's registry */
  pipeline_t *p;
  size_t n;
  /* Transform stages that are ready when a request arrives (decode_image,
   * resize, ...) would otherwise run on the submitting thread, which is a
   * transport's event loop: a 20 ms decode there stalls every connection.
   * They run on these workers instead; later transforms run on the engine
   * thread that completed their inputs. */
  pthread_mutex_t mu;
  pthread_cond_t cv, idle_cv;
  job_t *head, *tail;
  int busy;   /* jobs being run */
  int closed; /* quiesced: submissions run their stages inline */
  pthread_t workers[N_WORKERS];
  int n_workers;
};

/* ---- building ---- */

static int find_str(char *const *v, size_t n, const char *s) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i], s)) return (int)i;
  return -1;
}

static char **names_of_descs(const sip_io_desc_t *d, size_t n) {
  char **v = sip__calloc(n ? n : 1, sizeof *v);
  for (size_t i = 0; v && i < n; i++) v[i] = sip__strdup(d[i].name);
  return v;
}

static void free_strs(char **v, size_t n) {
  for (size_t i = 0; v && i < n; i++) sip__free(v[i]);
  sip__free(v);
}

static void add_dep(stage_t *s, int d) {
  for (size_t i = 0; i < s->n_deps; i++)
    if (s->deps[i] == d) return;
  s->deps[s->n_deps++] = d;
}

static void add_input(pipeline_t *pl, const char *name) {
  if (find_str(pl->inputs, pl->n_inputs, name) >= 0) return;
  char **v = sip__reallocarray(pl->inputs, pl->n_inputs + 1, sizeof *v);
  if (!v) return;
  pl->inputs = v;
  v[pl->n_inputs] = sip__strdup(name);
  if (v[pl->n_inputs]) pl->n_inputs++;
}

static int stage_index(const pipeline_t *pl, const char *name, size_t len) {
  for (size_t i = 0; i < pl->n; i++)
    if (strlen(pl->st[i].cfg->name) == len && !strncmp(pl->st[i].cfg->name, name, len))
      return (int)i;
  return -1;
}

/* Outputs a stage keeps: all it produces, or its output_filter. */
static int keeps(const stage_t *s, const char *out) {
  if (find_str(s->outs, s->n_outs, out) < 0) return 0;
  if (!s->cfg->n_output_filter) return 1;
  return find_str(s->cfg->output_filter, s->cfg->n_output_filter, out) >= 0;
}

/* Resolves "stage.output" / "pipeline.input" into (src, out); NULL or an
 * owned message. */
static char *resolve_ref(pipeline_t *pl, size_t before, const char *ref, int *src, char **out) {
  const char *dot = strchr(ref, '.');
  if (!dot) return sip__asprintf("'%s' is not \"<stage>.<output>\"", ref);
  if ((size_t)(dot - ref) == 8 && !strncmp(ref, "pipeline", 8)) {
    *src = -1;
    *out = sip__strdup(dot + 1);
    add_input(pl, dot + 1);
    return NULL;
  }
  int si = stage_index(pl, ref, (size_t)(dot - ref));
  if (si < 0 || (size_t)si >= before) return sip__asprintf("'%s' names no earlier stage", ref);
  if (!keeps(&pl->st[si], dot + 1)) {
    char list[512] = "";
    for (size_t i = 0; i < pl->st[si].n_outs; i++)
      if (keeps(&pl->st[si], pl->st[si].outs[i]))
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", list[0] ? ", " : "",
                 pl->st[si].outs[i]);
    return sip__asprintf("stage '%s' has no output '%s' (it keeps: %s)", pl->st[si].cfg->name,
                         dot + 1, list);
  }
  *src = si;
  *out = sip__strdup(dot + 1);
  return NULL;
}

/* The descriptor named `name` among `d`, renamed `as` (into *out, whose
 * name is owned); dtype INVALID and rank -1 when there is none (an input only
 * a condition reads has no descriptor). 0 when out of memory. */
static int desc_as(const sip_io_desc_t *d, size_t n, const char *name, const char *as,
                   sip_io_desc_t *out) {
  memset(out, 0, sizeof *out);
  out->rank = -1;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) *out = d[i];
  out->name = sip__strdup(as);
  return out->name != NULL;
}

/* The pipeline's inputs as the first stage that consumes each describes
 * them, and its outputs as the stages that make them do: what a client (or
 * KServe's model metadata) needs to call the pipeline like a model. */
static char *describe(pipeline_t *pl) {
  pl->io_in = sip__calloc(pl->n_inputs ? pl->n_inputs : 1, sizeof *pl->io_in);
  pl->io_out = sip__calloc(pl->n_po ? pl->n_po : 1, sizeof *pl->io_out);
  if (!pl->io_in || !pl->io_out) return sip__strdup("out of memory");
  for (size_t i = 0; i < pl->n_inputs; i++) {
    const stage_t *by = NULL;
    const char *as = "";
    for (size_t k = 0; k < pl->n && !by; k++)
      for (size_t w = 0; w < pl->st[k].n_in && !by; w++) {
        const wire_t *wi = &pl->st[k].in[w];
        if (wi->src == -1 && wi->out && !strcmp(wi->out, pl->inputs[i])) by = &pl->st[k], as = wi->name;
      }
    if (!desc_as(by ? by->in_desc : NULL, by ? by->n_in_desc : 0, as, pl->inputs[i], &pl->io_in[i]))
      return sip__strdup("out of memory");
  }
  for (size_t o = 0; o < pl->n_po; o++) {
    const stage_t *st = &pl->st[pl->po[o].stage];
    if (!desc_as(st->out_desc, st->n_out_desc, pl->po[o].out, pl->po[o].name, &pl->io_out[o]))
      return sip__strdup("out of memory");
  }
  return NULL;
}

static char *build_one(pipeline_t *pl, sip__engine_t *eng) {
  const sip_pipeline_config_t *c = pl->cfg;
  if (c->n_stages > MAX_STAGES)
    return sip__asprintf("%zu stages; at most %d are supported", c->n_stages, MAX_STAGES);
  pl->st = sip__calloc(c->n_stages, sizeof *pl->st);
  if (!pl->st) return sip__strdup("out of memory");
  pl->n = c->n_stages;
  /* Every stage names its config before any can fail: introspection of a
   * pipeline that failed to build reads them all. */
  for (size_t k = 0; k < pl->n; k++) pl->st[k].cfg = &c->stages[k];
  for (size_t k = 0; k < pl->n; k++) {
    stage_t *s = &pl->st[k];
    char **in_names = NULL;
    size_t n_in_names = 0;
    if (s->cfg->is_transform) {
      sip_error_t *e = sip__transform_new(s->cfg->operation, s->cfg->options, s->cfg->n_options,
                                          &s->tf);
      if (e) {
        char *m = sip__asprintf("stage '%s': %s", s->cfg->name, sip_error_message(e));
        sip_error_free(e);
        return m;
      }
      const sip_io_desc_t *ins, *outs;
      size_t ni, no;
      sip__transform_describe(s->tf, &ins, &ni, &outs, &no);
      in_names = names_of_descs(ins, ni);
      n_in_names = ni;
      s->outs = names_of_descs(outs, no);
      s->n_outs = no;
      s->in_desc = sip__io_descs_copy(ins, ni);
      s->out_desc = sip__io_descs_copy(outs, no);
      s->n_in_desc = s->in_desc ? ni : 0;
      s->n_out_desc = s->out_desc ? no : 0;
    } else {
      /* The pool the stage names (its default version), through the
       * registry's model interface: its state, and what it takes and gives. */
      sip_error_t *fe = NULL;
      sip__model_t *m = sip__registry_is_named(eng, s->cfg->pool)
                            ? NULL
                            : sip__registry_find_model(eng, s->cfg->pool, NULL, &fe);
      sip_error_free(fe);
      if (!m) return sip__asprintf("stage '%s': no pool named '%s'", s->cfg->name, s->cfg->pool);
      const char *why = NULL;
      sip__model_state_t state = m->vt->state(m, &why);
      sip__model_io_t io;
      if (state != SIP__MODEL_READY || !m->vt->describe_io(m, &io)) {
        static const char *names[] = {"LOADING", "READY", "FAILED", "STOPPED"};
        char *msg = sip__asprintf("stage '%s': pool '%s' is %s%s%s", s->cfg->name, s->cfg->pool,
                                  names[state], why ? ": " : "", why ? why : "");
        m->vt->unref(m);
        return msg;
      }
      in_names = names_of_descs(io.inputs, io.n_inputs);
      n_in_names = io.n_inputs;
      s->outs = names_of_descs(io.outputs, io.n_outputs);
      s->n_outs = io.n_outputs;
      s->in_desc = sip__io_descs_copy(io.inputs, io.n_inputs);
      s->out_desc = sip__io_descs_copy(io.outputs, io.n_outputs);
      s->n_in_desc = s->in_desc ? io.n_inputs : 0;
      s->n_out_desc = s->out_desc ? io.n_outputs : 0;
      m->vt->unref(m);
    }
    for (size_t f = 0; f < s->cfg->n_output_filter; f++)
      if (find_str(s->outs, s->n_outs, s->cfg->output_filter[f]) < 0) {
        free_strs(in_names, n_in_names);
        return sip__asprintf("stage '%s': output_filter names '%s', which the stage does not "
                             "produce", s->cfg->name, s->cfg->output_filter[f]);
      }
    /* Inputs: input_mapping, else pipeline inputs (first stage) or the
     * previous stage's outputs, by name when they match, else by position. */
    if (n_in_names > MAX_STAGE_INPUTS) {
      free_strs(in_names, n_in_names);
      return sip__asprintf("stage '%s' has %zu inputs; at most %d are supported", s->cfg->name,
                           n_in_names, MAX_STAGE_INPUTS);
    }
    s->in = sip__calloc(n_in_names ? n_in_names : 1, sizeof *s->in);
    s->n_in = n_in_names;
    char *err = NULL;
    for (size_t i = 0; i < s->cfg->n_input_mapping && !err; i++)
      if (find_str(in_names, n_in_names, s->cfg->input_mapping[i].key) < 0)
        err = sip__asprintf("stage '%s': input_mapping names '%s', which is not an input of the "
                            "stage", s->cfg->name, s->cfg->input_mapping[i].key);
    for (size_t i = 0; i < n_in_names && !err; i++) {
      wire_t *w = &s->in[i];
      w->name = sip__strdup(in_names[i]);
      const char *mapped = NULL;
      for (size_t m = 0; m < s->cfg->n_input_mapping; m++)
        if (!strcmp(s->cfg->input_mapping[m].key, in_names[i])) mapped = s->cfg->input_mapping[m].value;
      if (mapped) {
        char *e = resolve_ref(pl, k, mapped, &w->src, &w->out);
        if (e) {
          err = sip__asprintf("stage '%s' input '%s': %s", s->cfg->name, in_names[i], e);
          sip__free(e);
        }
      } else if (k == 0 || s->cfg->n_input_mapping) {
        w->src = -1;
        w->out = sip__strdup(in_names[i]);
        add_input(pl, in_names[i]);
      } else {
        stage_t *prev = &pl->st[k - 1];
        w->src = (int)k - 1;
        if (keeps(prev, in_names[i]))
          w->out = sip__strdup(in_names[i]);
        else if (i < prev->n_outs && keeps(prev, prev->outs[i]))
          w->out = sip__strdup(prev->outs[i]);
        else
          err = sip__asprintf("stage '%s' input '%s': the previous stage '%s' has no output of "
                              "that name or position; add an input_mapping",
                              s->cfg->name, in_names[i], prev->cfg->name);
      }
      if (!err && w->src >= 0) add_dep(s, w->src);
    }
    free_strs(in_names, n_in_names);
    if (err) return err;
    if (s->cfg->when) {
      sip_error_t *e = sip__expr_parse(s->cfg->when, &s->when);
      if (e) {
        char *m = sip__asprintf("stage '%s' when: %s", s->cfg->name, sip_error_message(e));
        sip_error_free(e);
        return m;
      }
      const char *const *refs;
      size_t nr = sip__expr_refs(s->when, &refs);
      for (size_t r = 0; r < nr; r++) {
        int src;
        char *out = NULL, *e2 = resolve_ref(pl, k, refs[r], &src, &out);
        sip__free(out);
        if (e2) {
          char *m = sip__asprintf("stage '%s' when: %s", s->cfg->name, e2);
          sip__free(e2);
          return m;
        }
        if (src >= 0) add_dep(s, src);
      }
    }
  }
  for (size_t k = 0; k < pl->n; k++)
    for (size_t d = 0; d < pl->st[k].n_deps; d++) {
      stage_t *src = &pl->st[pl->st[k].deps[d]];
      src->users[src->n_users++] = (int)k;
    }
  if (c->early_exit_condition) {
    sip_error_t *e = sip__expr_parse(c->early_exit_condition, &pl->exit);
    if (e) {
      char *m = sip__asprintf("early_exit_condition: %s", sip_error_message(e));
      sip_error_free(e);
      return m;
    }
  }
  /* Outputs: the configured ones, else every kept output of the sinks. */
  size_t cap = 0;
  for (size_t k = 0; k < pl->n; k++) cap += pl->st[k].n_outs;
  pl->po = sip__calloc(cap + c->n_outputs + 1, sizeof *pl->po);
  if (!pl->po) return sip__strdup("out of memory");
  for (size_t o = 0; o < c->n_outputs; o++) {
    pout_t *po = &pl->po[pl->n_po];
    char *e = resolve_ref(pl, pl->n, c->outputs[o], &po->stage, &po->out);
    if (e) {
      char *m = sip__asprintf("outputs: %s", e);
      sip__free(e);
      return m;
    }
    pl->n_po++;
  }
  if (!c->n_outputs)
    for (size_t k = 0; k < pl->n; k++) {
      if (pl->st[k].n_users) continue;
      for (size_t o = 0; o < pl->st[k].n_outs; o++)
        if (keeps(&pl->st[k], pl->st[k].outs[o])) {
          pl->po[pl->n_po].stage = (int)k;
          pl->po[pl->n_po].out = sip__strdup(pl->st[k].outs[o]);
          pl->n_po++;
        }
    }
  /* Plain output names where they are unique, else "stage.output". */
  for (size_t i = 0; i < pl->n_po; i++) {
    int dup = 0;
    for (size_t j = 0; j < pl->n_po; j++)
      dup |= i != j && pl->po[i].out && pl->po[j].out && !strcmp(pl->po[i].out, pl->po[j].out);
    pl->po[i].name = dup ? sip__asprintf("%s.%s", pl->st[pl->po[i].stage].cfg->name, pl->po[i].out)
                         : sip__strdup(pl->po[i].out);
    if (!pl->po[i].name) return sip__strdup("out of memory");
  }
  return describe(pl);
}

static void pipeline_clear(pipeline_t *pl) {
  for (size_t k = 0; k < pl->n; k++) {
    stage_t *s = &pl->st[k];
    sip__transform_free(s->tf);
    sip__expr_free(s->when);
    for (size_t i = 0; i < s->n_in; i++) {
      sip__free(s->in[i].name);
      sip__free(s->in[i].out);
    }
    sip__free(s->in);
    free_strs(s->outs, s->n_outs);
    sip__io_descs_free(s->in_desc, s->n_in_desc);
    sip__io_descs_free(s->out_desc, s->n_out_desc);
  }
  sip__io_descs_free(pl->io_in, pl->io_in ? pl->n_inputs : 0);
  sip__io_descs_free(pl->io_out, pl->io_out ? pl->n_po : 0);
  sip__free(pl->st);
  sip__expr_free(pl->exit);
  free_strs(pl->inputs, pl->n_inputs);
  for (size_t i = 0; i < pl->n_po; i++) {
    sip__free(pl->po[i].out);
    sip__free(pl->po[i].name);
  }
  sip__free(pl->po);
  sip__free(pl->error);
}

static void *worker_main(void *arg);

static const sip__model_vt_t pipeline_vt;

sip_pipeline_set_t *sip__pipelines_new(sip__engine_t *eng, const sip_config_t *cfg) {
  sip_pipeline_set_t *ps = sip__calloc(1, sizeof *ps);
  if (!ps) return NULL;
  ps->p = sip__calloc(cfg->n_pipelines ? cfg->n_pipelines : 1, sizeof *ps->p);
  if (!ps->p) {
    sip__free(ps);
    return NULL;
  }
  ps->eng = eng;
  ps->n = cfg->n_pipelines;
  pthread_mutex_init(&ps->mu, NULL);
  pthread_cond_init(&ps->cv, NULL);
  pthread_cond_init(&ps->idle_cv, NULL);
  for (size_t i = 0; i < ps->n; i++) {
    pipeline_t *pl = &ps->p[i];
    pl->base.vt = &pipeline_vt;
    pl->ps = ps;
    pl->cfg = &cfg->pipelines[i];
    atomic_store(&pl->state, SIP__MODEL_LOADING);
    sip_error_t *e = sip__registry_add_named(eng, pl->cfg->name, &pl->base);
    if (e) {
      sip_error_free(e);
      sip__pipelines_free(ps);
      return NULL;
    }
  }
  return ps;
}

void sip__pipelines_build(sip_pipeline_set_t *ps) {
  for (size_t i = 0; ps && i < ps->n; i++) {
    pipeline_t *pl = &ps->p[i];
    pl->error = build_one(pl, ps->eng);
    if (pl->error)
      sip__log(SIP__LOG_ERROR, "pipeline failed to build", "pipeline=%s reason=\"%s\"",
               pl->cfg->name, pl->error);
    else
      sip__log(SIP__LOG_INFO, "pipeline ready", "pipeline=%s stages=%zu inputs=%zu outputs=%zu",
               pl->cfg->name, pl->n, pl->n_inputs, pl->n_po);
    /* Everything built is written before the state says so. */
    atomic_store(&pl->state, pl->error ? SIP__MODEL_FAILED : SIP__MODEL_READY);
  }
  int need = 0; /* workers only where a transform stage starts a pipeline */
  for (size_t i = 0; ps && i < ps->n; i++)
    for (size_t k = 0; !ps->p[i].error && k < ps->p[i].n; k++)
      need |= ps->p[i].st[k].tf && !ps->p[i].st[k].n_deps;
  for (int i = 0; need && i < N_WORKERS; i++)
    if (pthread_create(&ps->workers[ps->n_workers], NULL, worker_main, ps) == 0) ps->n_workers++;
}

void sip__pipelines_quiesce(sip_pipeline_set_t *ps) {
  if (!ps) return;
  pthread_mutex_lock(&ps->mu);
  ps->closed = 1;
  pthread_cond_broadcast(&ps->cv);
  while (ps->head || ps->busy) pthread_cond_wait(&ps->idle_cv, &ps->mu);
  pthread_mutex_unlock(&ps->mu);
  for (int i = 0; i < ps->n_workers; i++) pthread_join(ps->workers[i], NULL);
  ps->n_workers = 0;
}

void sip__pipelines_free(sip_pipeline_set_t *ps) {
  if (!ps) return;
  sip__pipelines_quiesce(ps);
  pthread_mutex_destroy(&ps->mu);
  pthread_cond_destroy(&ps->cv);
  pthread_cond_destroy(&ps->idle_cv);
  for (size_t i = 0; i < ps->n; i++) pipeline_clear(&ps->p[i]);
  sip__free(ps->p);
  sip__free(ps);
}

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
} sstate_t;

typedef struct run {
  pipeline_t *pl;
  pthread_mutex_t mu;
  sip_request_t *req; /* owns the inputs; id, priority, cancel token */
  uint64_t arrival_us, deadline_us;
  uint32_t stage_timeout_ms[MAX_STAGES];
  sip_expr_t *exit; /* the request's own early exit (owned), else NULL */
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

static void *worker_main(void *arg) {
  sip_pipeline_set_t *ps = arg;
  pthread_mutex_lock(&ps->mu);
  for (;;) {
    while (!ps->head && !ps->closed) pthread_cond_wait(&ps->cv, &ps->mu);
    job_t *j = ps->head;
    if (!j) break; /* closed and drained */
    ps->head = j->next;
    if (!ps->head) ps->tail = NULL;
    ps->busy++;
    pthread_mutex_unlock(&ps->mu);
    launch(j->r, j->stage);
    sip__free(j);
    pthread_mutex_lock(&ps->mu);
    ps->busy--;
    if (!ps->head && !ps->busy) pthread_cond_broadcast(&ps->idle_cv);
  }
  pthread_mutex_unlock(&ps->mu);
  return NULL;
}

/* Queues stage k of r for a worker; 0 when it must run here instead (no
 * workers, quiesced, out of memory). */
static int hand_off(sip_pipeline_set_t *ps, run_t *r, int k) {
  job_t *j = ps->n_workers ? sip__malloc(sizeof *j) : NULL;
  if (!j) return 0;
  j->r = r;
  j->stage = k;
  j->next = NULL;
  pthread_mutex_lock(&ps->mu);
  int ok = !ps->closed;
  if (ok) {
    if (ps->tail)
      ps->tail->next = j;
    else
      ps->head = j;
    ps->tail = j;
    pthread_cond_signal(&ps->cv);
  }
  pthread_mutex_unlock(&ps->mu);
  if (!ok) sip__free(j);
  return ok;
}

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
static int refs_ready(run_t *r, const sip_expr_t *e) {
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
  pipeline_t *pl = r->pl;
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
    stage_t *s = &pl->st[k];
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
  if (r->code != SIP_OK)
    sip__log_failure("pipeline=%s code=%s reason=\"%s\"", pl->cfg->name,
             sip_code_name(r->code), resp && resp->message ? resp->message : "");
  for (size_t k = 0; k < pl->n; k++) stage_tensors_free(r->st[k].outs, r->st[k].n_outs);
  sip_infer_done_fn done = r->done;
  void *user = r->user;
  sip_request_free(r->req);
  sip__expr_free(r->exit);
  pthread_mutex_destroy(&r->mu);
  sip__free(r);
  done(resp, user);
}

/* A stage ended (ran, skipped, failed): record it, release its dependents,
 * launch those now ready, answer when nothing is left. `outs` is taken. */
static void stage_end(run_t *r, int k, int status, sip_tensor_t **outs, size_t n_outs,
                      sip_code_t code, char *msg /* owned */, uint64_t queue_us,
                      uint64_t compute_us) {
  pipeline_t *pl = r->pl;
  stage_t *s = &pl->st[k];
  int ready[MAX_STAGES], n_ready = 0;
  pthread_mutex_lock(&r->mu);
  sstate_t *ss = &r->st[k];
  ss->status = status;
  ss->end_us = ss->start_us ? sip__now_us() : 0;
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
  const sip_expr_t *ex = r->exit ? r->exit : pl->exit;
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
static const sip_tensor_t *source(run_t *r, const wire_t *w) {
  return w->src < 0 ? req_input(r, w->out) : stage_output(r, w->src, w->out);
}

static void launch(run_t *r, int k) {
  pipeline_t *pl = r->pl;
  stage_t *s = &pl->st[k];
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
    ins[n_in] = sip_tensor_new_view(s->in[i].name, t->dtype, t->rank, t->dims, t->data, t->nbytes,
                                    t->owner);
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
  sip_error_t *e = sub && sc ? NULL : SIP_OOM();
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

/* Reads a request's pipeline_config JSON. NULL or an owned error. */
static sip_error_t *read_config(run_t *r, const char *text) {
  json_error_t je;
  json_t *root = json_loads(text, 0, &je);
  if (!root || !json_is_object(root)) {
    json_decref(root);
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "pipeline_config is not a JSON object (%s); expected {\"stage_timeout_ms\": "
                         "[...], \"early_exit_condition\": \"...\"}",
                         root ? "another JSON value" : je.text);
  }
  sip_error_t *e = NULL;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "stage_timeout_ms")) {
      if (!json_is_array(v) || json_array_size(v) > r->pl->n) {
        e = sip_error_new(SIP_INVALID_ARGUMENT,
                          "pipeline_config.stage_timeout_ms: expected a list of at most %zu "
                          "millisecond values, one per stage in config order (0: none)",
                          r->pl->n);
        break;
      }
      for (size_t i = 0; i < json_array_size(v) && !e; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 86400000)
          e = sip_error_new(SIP_INVALID_ARGUMENT,
                            "pipeline_config.stage_timeout_ms[%zu]: expected an integer 0..86400000",
                            i);
        else
          r->stage_timeout_ms[i] = (uint32_t)json_integer_value(x);
      }
    } else if (!strcmp(key, "early_exit_condition")) {
      if (!json_is_string(v)) {
        e = sip_error_new(SIP_INVALID_ARGUMENT,
                          "pipeline_config.early_exit_condition: expected a string");
        break;
      }
      sip_error_t *pe = sip__expr_parse(json_string_value(v), &r->exit);
      if (pe) {
        e = sip_error_new(SIP_INVALID_ARGUMENT, "pipeline_config.early_exit_condition: %s",
                          sip_error_message(pe));
        sip_error_free(pe);
        break;
      }
      const char *const *refs;
      size_t n = sip__expr_refs(r->exit, &refs);
      for (size_t i = 0; i < n && !e; i++) {
        const char *dot = strchr(refs[i], '.');
        if (dot && !((size_t)(dot - refs[i]) == 8 && !strncmp(refs[i], "pipeline", 8)) &&
            stage_index(r->pl, refs[i], (size_t)(dot - refs[i])) < 0)
          e = sip_error_new(SIP_INVALID_ARGUMENT,
                            "pipeline_config.early_exit_condition: '%s' names no stage of "
                            "pipeline '%s'",
                            refs[i], r->pl->cfg->name);
      }
    } else {
      e = sip_error_new(SIP_INVALID_ARGUMENT,
                        "pipeline_config has no key '%s'; expected stage_timeout_ms or "
                        "early_exit_condition",
                        key);
      break;
    }
  }
  json_decref(root);
  return e;
}

/* pipeline_vt.submit: takes `req` (its done/user set), also on error. */
static sip_error_t *pipeline_submit(sip__model_t *m, sip_request_t *req) {
  pipeline_t *pl = (pipeline_t *)m;
  sip_pipeline_set_t *ps = pl->ps;
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
    e = sip_error_new(SIP_NOT_FOUND, "model '%s' is a pipeline and has no version '%s'; ask "
                                     "without a version", pl->cfg->name, req->version);
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
  run_t *r = e ? NULL : sip__calloc(1, sizeof *r);
  if (!e && !r) e = SIP_OOM();
  if (!e) {
    r->pl = pl;
    r->req = req;
    r->exit_stage = -1;
    r->arrival_us = sip__now_us();
    r->deadline_us = req->timeout_ms ? r->arrival_us + (uint64_t)req->timeout_ms * 1000 : 0;
    r->done = done;
    r->user = user;
    pthread_mutex_init(&r->mu, NULL);
    if (req->pipeline_config) e = read_config(r, req->pipeline_config);
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
  for (int i = 0; i < n_ready; i++)
    if (!pl->st[ready[i]].tf || !hand_off(ps, r, ready[i])) launch(r, ready[i]);
  return NULL;
}

static int pipeline_describe_io(sip__model_t *m, sip__model_io_t *io) {
  pipeline_t *pl = (pipeline_t *)m;
  if (atomic_load(&pl->state) != SIP__MODEL_READY) return 0;
  io->inputs = pl->io_in;
  io->n_inputs = pl->n_inputs;
  io->outputs = pl->io_out;
  io->n_outputs = pl->n_po;
  return 1;
}

static sip__model_state_t pipeline_state(sip__model_t *m, const char **error) {
  pipeline_t *pl = (pipeline_t *)m;
  sip__model_state_t st = (sip__model_state_t)atomic_load(&pl->state);
  if (error) *error = st == SIP__MODEL_FAILED ? pl->error : NULL;
  return st;
}

/* Pipelines live as long as the engine: nothing to count. */
static void pipeline_ref(sip__model_t *m) { (void)m; }

static const sip__model_vt_t pipeline_vt = {
    .kind = "pipeline",
    .submit = pipeline_submit,
    .describe_io = pipeline_describe_io,
    .state = pipeline_state,
    .ref = pipeline_ref,
    .unref = pipeline_ref,
};

/* ---- a pool that stages use changes ---- */

static const sip_io_desc_t *desc_named(const sip_io_desc_t *d, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return &d[i];
  return NULL;
}

/* Why stage `s` cannot run on a pool with `io` instead of what it was built
 * with (owned), or NULL: every input it feeds is there with its dtype and
 * nothing more is needed; every output it keeps is made with its dtype. */
static char *stage_fits(const stage_t *s, const sip__model_io_t *io) {
  for (size_t i = 0; i < s->n_in; i++) {
    const sip_io_desc_t *now = desc_named(io->inputs, io->n_inputs, s->in[i].name);
    const sip_io_desc_t *was = desc_named(s->in_desc, s->n_in_desc, s->in[i].name);
    if (!now) return sip__asprintf("it feeds input '%s', which the new version does not take",
                                   s->in[i].name);
    if (was && was->dtype != now->dtype)
      return sip__asprintf("input '%s' is %s in the new version; the stage feeds %s",
                           s->in[i].name, sip_dtype_name(now->dtype), sip_dtype_name(was->dtype));
  }
  for (size_t i = 0; i < io->n_inputs; i++) {
    int fed = 0;
    for (size_t w = 0; w < s->n_in && !fed; w++) fed = !strcmp(s->in[w].name, io->inputs[i].name);
    if (!fed)
      return sip__asprintf("the new version also takes input '%s', which the stage does not feed",
                           io->inputs[i].name);
  }
  for (size_t o = 0; o < s->n_outs; o++) {
    if (!keeps(s, s->outs[o])) continue;
    const sip_io_desc_t *now = desc_named(io->outputs, io->n_outputs, s->outs[o]);
    const sip_io_desc_t *was = desc_named(s->out_desc, s->n_out_desc, s->outs[o]);
    if (!now) return sip__asprintf("it gives output '%s', which the new version does not make",
                                   s->outs[o]);
    if (was && was->dtype != now->dtype)
      return sip__asprintf("output '%s' is %s in the new version; the pipeline reads %s",
                           s->outs[o], sip_dtype_name(now->dtype), sip_dtype_name(was->dtype));
  }
  return NULL;
}

char *sip__pipelines_check_pool(const sip_pipeline_set_t *ps, const char *name,
                                const sip__model_io_t *io) {
  for (size_t i = 0; ps && i < ps->n; i++) {
    const pipeline_t *pl = &ps->p[i];
    if (atomic_load(&pl->state) != SIP__MODEL_READY) continue;
    for (size_t k = 0; k < pl->n; k++) {
      const stage_t *s = &pl->st[k];
      if (s->cfg->is_transform || strcmp(s->cfg->pool, name)) continue;
      if (!io)
        return sip__asprintf("pipeline '%s' stage '%s' runs on it", pl->cfg->name, s->cfg->name);
      char *why = stage_fits(s, io);
      if (why) {
        char *m = sip__asprintf("pipeline '%s' stage '%s': %s", pl->cfg->name, s->cfg->name, why);
        sip__free(why);
        return m ? m : sip__strdup("out of memory");
      }
    }
  }
  return NULL;
}

/* ---- introspection ---- */

json_t *sip__pipelines_json(const sip_pipeline_set_t *ps, int kind) {
  json_t *a = json_array();
  for (size_t i = 0; ps && i < ps->n; i++) {
    const pipeline_t *pl = &ps->p[i];
    static const char *states[] = {"LOADING", "READY", "FAILED", "STOPPED"};
    int st = atomic_load(&pl->state);
    json_t *o = json_pack("{s:s,s:s,s:o}", "name", pl->cfg->name, "state", states[st], "error",
                          st == SIP__MODEL_FAILED ? json_string(pl->error) : json_null());
    json_t *stages = json_array();
    for (size_t k = 0; k < pl->n; k++) {
      const stage_t *s = &pl->st[k];
      json_t *so = json_pack("{s:s,s:s}", "name", s->cfg->name, "type",
                             s->cfg->is_transform ? "transform" : "model");
      if (s->cfg->is_transform)
        json_object_set_new(so, "operation", json_string(s->cfg->operation));
      else
        json_object_set_new(so, "pool", json_string(s->cfg->pool));
      if (kind == SIP_INFO_STATUS) {
        json_object_set_new(so, "ran", json_integer((json_int_t)atomic_load(&s->ran)));
        json_object_set_new(so, "skipped", json_integer((json_int_t)atomic_load(&s->skipped)));
        json_object_set_new(so, "failed", json_integer((json_int_t)atomic_load(&s->failed)));
        json_object_set_new(so, "total_us", json_integer((json_int_t)atomic_load(&s->total_us)));
      }
      json_array_append_new(stages, so);
    }
    json_object_set_new(o, "stages", stages);
    if (kind == SIP_INFO_POOLS) {
      int built = atomic_load(&pl->state) == SIP__MODEL_READY;
      json_object_set_new(o, "inputs", built ? sip__io_json(pl->io_in, pl->n_inputs) : json_array());
      json_object_set_new(o, "outputs", built ? sip__io_json(pl->io_out, pl->n_po) : json_array());
    } else {
      json_t *codes = json_object();
      for (int c = 0; c < SIP_CODE_COUNT_; c++) {
        uint64_t n = atomic_load(&pl->by_code[c]);
        if (n) json_object_set_new(codes, sip_code_name((sip_code_t)c), json_integer((json_int_t)n));
      }
      json_object_set_new(o, "requests", codes);
      json_object_set_new(o, "early_exits", json_integer((json_int_t)atomic_load(&pl->early_exits)));
      json_object_set_new(o, "latency_us",
                          json_pack("{s:I,s:I}", "ok", (json_int_t)atomic_load(&pl->ok_us), "failed",
                                    (json_int_t)atomic_load(&pl->fail_us)));
      json_object_set_new(o, "last_inference", json_integer((json_int_t)atomic_load(&pl->last_ms)));
    }
    json_array_append_new(a, o);
  }
  return a;
}
