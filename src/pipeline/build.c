/* sip — building pipelines: each stage's inputs wired (input_mapping, or by
 * default the previous stage's outputs / the pipeline's inputs), names
 * checked against the pools' and transforms' inputs and outputs, the
 * pipeline's typed inputs and outputs described; the set's lifetime; and
 * the re-check of the pipelines when a pool their stages use changes. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "pipeline/pipeline_impl.h"

/* ---- building ---- */

static char **names_of_descs(const sip_io_desc_t *d, size_t n) {
  char **v = sip__calloc(n ? n : 1, sizeof *v);
  for (size_t i = 0; v && i < n; i++) v[i] = sip__strdup(d[i].name);
  return v;
}

static void free_strs(char **v, size_t n) {
  for (size_t i = 0; v && i < n; i++) sip__free(v[i]);
  sip__free(v);
}

static void add_dep(sip__stage_t *s, int d) {
  for (size_t i = 0; i < s->n_deps; i++)
    if (s->deps[i] == d) return;
  s->deps[s->n_deps++] = d;
}

static void add_input(sip__pipeline_t *pl, const char *name) {
  if (find_str(pl->inputs, pl->n_inputs, name) >= 0) return;
  char **v = sip__reallocarray(pl->inputs, pl->n_inputs + 1, sizeof *v);
  if (!v) return;
  pl->inputs = v;
  v[pl->n_inputs] = sip__strdup(name);
  if (v[pl->n_inputs]) pl->n_inputs++;
}

/* Resolves "stage.output" / "pipeline.input" into (src, out); NULL or an
 * owned message. */
static char *resolve_ref(sip__pipeline_t *pl, size_t before, const char *ref, int *src, char **out) {
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
static char *describe(sip__pipeline_t *pl) {
  pl->io_in = sip__calloc(pl->n_inputs ? pl->n_inputs : 1, sizeof *pl->io_in);
  pl->io_out = sip__calloc(pl->n_po ? pl->n_po : 1, sizeof *pl->io_out);
  if (!pl->io_in || !pl->io_out) return sip__strdup("out of memory");
  for (size_t i = 0; i < pl->n_inputs; i++) {
    const sip__stage_t *by = NULL;
    const char *as = "";
    for (size_t k = 0; k < pl->n && !by; k++)
      for (size_t w = 0; w < pl->st[k].n_in && !by; w++) {
        const sip__wire_t *wi = &pl->st[k].in[w];
        if (wi->src == -1 && wi->out && !strcmp(wi->out, pl->inputs[i])) by = &pl->st[k], as = wi->name;
      }
    if (!desc_as(by ? by->in_desc : NULL, by ? by->n_in_desc : 0, as, pl->inputs[i], &pl->io_in[i]))
      return sip__strdup("out of memory");
  }
  for (size_t o = 0; o < pl->n_po; o++) {
    const sip__stage_t *st = &pl->st[pl->po[o].stage];
    if (!desc_as(st->out_desc, st->n_out_desc, pl->po[o].out, pl->po[o].name, &pl->io_out[o]))
      return sip__strdup("out of memory");
  }
  return NULL;
}

/* The descriptor of `name` among `d` (NULL when none). */
static const sip_io_desc_t *desc_of(const sip_io_desc_t *d, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return &d[i];
  return NULL;
}

/* What wire `w` delivers, as its source describes it (NULL: unknown). */
static const sip_io_desc_t *wire_desc(const sip__pipeline_t *pl, size_t before, const sip__wire_t *w) {
  if (w->src >= 0) return desc_of(pl->st[w->src].out_desc, pl->st[w->src].n_out_desc, w->out);
  for (size_t k = 0; k < before; k++)
    for (size_t i = 0; i < pl->st[k].n_in; i++)
      if (pl->st[k].in[i].src == -1 && pl->st[k].in[i].out && !strcmp(pl->st[k].in[i].out, w->out))
        return desc_of(pl->st[k].in_desc, pl->st[k].n_in_desc, pl->st[k].in[i].name);
  return NULL;
}

static int is_nchw_f32(const sip_io_desc_t *d) {
  return d && d->dtype == SIP_DTYPE_FLOAT32 && d->rank == 4;
}
static int is_hwc_u8(const sip_io_desc_t *d) {
  return d && d->dtype == SIP_DTYPE_UINT8 && d->rank == 3;
}
static int is_image(const sip_io_desc_t *d) { return is_nchw_f32(d) || is_hwc_u8(d); }

/* Whether `got` can feed `want` as it is (unknown descriptors: assumed so). */
static int fits(const sip_io_desc_t *got, const sip_io_desc_t *want) {
  if (!got || !want || got->dtype == SIP_DTYPE_INVALID || want->dtype == SIP_DTYPE_INVALID)
    return 1;
  return got->dtype == want->dtype && (got->rank < 0 || want->rank < 0 || got->rank == want->rank);
}

/* The conversion default wiring applies between an image as one side
 * gives it and as the other takes it. */
static int wire_conv(const sip_io_desc_t *got, const sip_io_desc_t *want) {
  if (is_nchw_f32(got) && is_hwc_u8(want)) return CONV_NCHW_F32_TO_HWC_U8;
  if (is_hwc_u8(got) && is_nchw_f32(want)) return CONV_HWC_U8_TO_NCHW_F32;
  return CONV_NONE;
}

static int wire_to(sip__wire_t *w, int src, const char *out) {
  w->src = src;
  return (w->out = sip__strdup(out)) != NULL ? 1 : -1;
}

/* Default wiring of stage `k`'s input `name` (no input_mapping): the
 * previous stage's output of that name; else its output at the same
 * position when its type fits or converts; else the nearest earlier stage's output of
 * that name; else the pipeline input of that name; else, for an image
 * input, the pipeline's image (the first pipeline input an earlier stage
 * reads as an image); else the previous stage's positional output
 * regardless. 1: wired, 0: nothing fits, -1: out of memory. */
static int wire_default(sip__pipeline_t *pl, size_t k, size_t i, const char *name, sip__wire_t *w) {
  const sip_io_desc_t *want = desc_of(pl->st[k].in_desc, pl->st[k].n_in_desc, name);
  sip__stage_t *prev = &pl->st[k - 1];
  if (keeps(prev, name)) return wire_to(w, (int)k - 1, name);
  int positional = i < prev->n_outs && keeps(prev, prev->outs[i]);
  const sip_io_desc_t *got = positional ? desc_of(prev->out_desc, prev->n_out_desc, prev->outs[i])
                                        : NULL;
  if (positional && (fits(got, want) || wire_conv(got, want)))
    return wire_to(w, (int)k - 1, prev->outs[i]);
  for (size_t j = k - 1; j-- > 0;)
    if (keeps(&pl->st[j], name)) return wire_to(w, (int)j, name);
  if (find_str(pl->inputs, pl->n_inputs, name) >= 0) return wire_to(w, -1, name);
  if (is_image(want))
    for (size_t p = 0; p < pl->n_inputs; p++) {
      sip__wire_t probe = {.src = -1, .out = pl->inputs[p]};
      if (is_image(wire_desc(pl, k, &probe))) return wire_to(w, -1, pl->inputs[p]);
    }
  return positional ? wire_to(w, (int)k - 1, prev->outs[i]) : 0;
}

static char *build_one(sip__pipeline_t *pl, sip__engine_t *eng) {
  const sip__pipeline_config_t *c = pl->cfg;
  if (c->n_stages > MAX_STAGES)
    return sip__asprintf("%zu stages; at most %d are supported", c->n_stages, MAX_STAGES);
  pl->st = sip__calloc(c->n_stages, sizeof *pl->st);
  if (!pl->st) return sip__strdup("out of memory");
  pl->n = c->n_stages;
  /* Every stage names its config before any can fail: introspection of a
   * pipeline that failed to build reads them all. */
  for (size_t k = 0; k < pl->n; k++) pl->st[k].cfg = &c->stages[k];
  for (size_t k = 0; k < pl->n; k++) {
    sip__stage_t *s = &pl->st[k];
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
      sip__wire_t *w = &s->in[i];
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
        int got = wire_default(pl, k, i, in_names[i], w);
        if (got <= 0)
          err = got < 0 ? sip__strdup("out of memory")
                        : sip__asprintf("stage '%s' input '%s': no earlier stage has an output of "
                                        "that name, the pipeline has no such input, and the "
                                        "previous stage '%s' has no output of that name or "
                                        "position; add an input_mapping",
                                        s->cfg->name, in_names[i], pl->st[k - 1].cfg->name);
        else
          w->conv = wire_conv(wire_desc(pl, k, w),
                            desc_of(s->in_desc, s->n_in_desc, in_names[i]));
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
      sip__stage_t *src = &pl->st[pl->st[k].deps[d]];
      src->users[src->n_users++] = (int)k;
    }
  if (c->early_exit_condition) {
    sip_error_t *e = sip__expr_parse(c->early_exit_condition, &pl->exit);
    if (e) {
      char *m = sip__asprintf("early_exit_condition: %s", sip_error_message(e));
      sip_error_free(e);
      return m;
    }
    /* What it reads must exist, as for `when:` and `outputs:`. */
    const char *const *refs;
    size_t nr = sip__expr_refs(pl->exit, &refs);
    for (size_t r = 0; r < nr; r++) {
      int src;
      char *out = NULL, *e2 = resolve_ref(pl, pl->n, refs[r], &src, &out);
      sip__free(out);
      if (e2) {
        char *m = sip__asprintf("early_exit_condition: %s", e2);
        sip__free(e2);
        return m;
      }
    }
  }
  /* Outputs: the configured ones, else every kept output of the sinks. */
  size_t cap = 0;
  for (size_t k = 0; k < pl->n; k++) cap += pl->st[k].n_outs;
  pl->po = sip__calloc(cap + c->n_outputs + 1, sizeof *pl->po);
  if (!pl->po) return sip__strdup("out of memory");
  for (size_t o = 0; o < c->n_outputs; o++) {
    sip__pout_t *po = &pl->po[pl->n_po];
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

static void pipeline_clear(sip__pipeline_t *pl) {
  for (size_t k = 0; k < pl->n; k++) {
    sip__stage_t *s = &pl->st[k];
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

sip__pipeline_set_t *sip__pipelines_new(sip__engine_t *eng, const sip__config_t *cfg) {
  sip__pipeline_set_t *ps = sip__calloc(1, sizeof *ps);
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
    sip__pipeline_t *pl = &ps->p[i];
    pl->base.vt = &sip__pipeline_vt;
    pl->ps = ps;
    pl->cfg = &cfg->pipelines[i];
    atomic_store(&pl->state, SIP__MODEL_LOADING);
    sip_error_t *e = sip__registry_add_model(eng, &pl->base);
    if (e) {
      sip_error_free(e);
      sip__pipelines_free(ps);
      return NULL;
    }
  }
  return ps;
}

void sip__pipelines_build(sip__pipeline_set_t *ps) {
  for (size_t i = 0; ps && i < ps->n; i++) {
    sip__pipeline_t *pl = &ps->p[i];
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
  sip__pipeline_workers_start(ps);
}

void sip__pipelines_free(sip__pipeline_set_t *ps) {
  if (!ps) return;
  sip__pipelines_quiesce(ps);
  for (size_t i = 0; i < ps->n; i++) sip__registry_remove_model(ps->eng, &ps->p[i].base);
  pthread_mutex_destroy(&ps->mu);
  pthread_cond_destroy(&ps->cv);
  pthread_cond_destroy(&ps->idle_cv);
  for (size_t i = 0; i < ps->n; i++) pipeline_clear(&ps->p[i]);
  sip__free(ps->p);
  sip__free(ps);
}

/* ---- a pool that stages use changes ---- */

static const sip_io_desc_t *desc_named(const sip_io_desc_t *d, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return &d[i];
  return NULL;
}

/* Why stage `s` cannot run on a pool with `io` instead of what it was built
 * with (owned), or NULL: every input it feeds is there with its dtype and
 * nothing more is needed; every output it keeps is made with its dtype. */
/* Whether a new version's shape `now` takes what the old one (`was`) did:
 * the same rank, and the same size wherever both fix a dim (a dim the old
 * version left dynamic may become fixed: requests that do not fit it are
 * refused one by one). NULL when it does, else the two shapes. */
static char *shape_change(const sip_io_desc_t *was, const sip_io_desc_t *now, const char *what,
                          const char *side) {
  if (!was || was->rank < 0 || now->rank < 0) return NULL;
  int same = was->rank == now->rank;
  for (int d = 0; same && d < now->rank; d++)
    same = was->dims[d] <= 0 || now->dims[d] <= 0 || was->dims[d] == now->dims[d];
  if (same) return NULL;
  char a[128], b[128];
  return sip__asprintf("%s '%s' has shape %s in the new version; %s %s", what, now->name,
                       sip__shape_str(a, sizeof a, now->rank, now->dims, ", "), side,
                       sip__shape_str(b, sizeof b, was->rank, was->dims, ", "));
}

static char *stage_fits(const sip__stage_t *s, const sip__model_io_t *io) {
  for (size_t i = 0; i < s->n_in; i++) {
    const sip_io_desc_t *now = desc_named(io->inputs, io->n_inputs, s->in[i].name);
    const sip_io_desc_t *was = desc_named(s->in_desc, s->n_in_desc, s->in[i].name);
    if (!now) return sip__asprintf("it feeds input '%s', which the new version does not take",
                                   s->in[i].name);
    if (was && was->dtype != now->dtype)
      return sip__asprintf("input '%s' is %s in the new version; the stage feeds %s",
                           s->in[i].name, sip_dtype_name(now->dtype), sip_dtype_name(was->dtype));
    char *why = shape_change(was, now, "input", "the stage feeds");
    if (why) return why;
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
    char *why = shape_change(was, now, "output", "the pipeline reads");
    if (why) return why;
  }
  return NULL;
}

char *sip__pipelines_check_pool(const sip__pipeline_set_t *ps, const char *name,
                                const sip__model_io_t *io) {
  for (size_t i = 0; ps && i < ps->n; i++) {
    const sip__pipeline_t *pl = &ps->p[i];
    if (atomic_load(&pl->state) != SIP__MODEL_READY) continue;
    for (size_t k = 0; k < pl->n; k++) {
      const sip__stage_t *s = &pl->st[k];
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
