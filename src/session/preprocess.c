/* sip — per-pool preprocess: transform chains in front of a model input
 * (docs/preprocess.md). */
#include "session/preprocess.h"

#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "ops/transforms.h"

#define PRE_MAX 16

struct sip__preprocess {
  sip__transform_t *tf[PRE_MAX];
  size_t n;
  int decode;     /* the first step is decode_image: raw images skip it */
  int fixed;      /* every image comes out one size (resize to a size, letterbox) */
  size_t input;   /* the model input it makes */
  char *name;     /* that input's name */
  int model_rank; /* that input's rank (-1: any) */
  int64_t model_dims[SIP_MAX_RANK]; /* and dims (-1: any) */
  int add_batch;  /* the chain gives one rank less than the model: prepend 1 */
  sip_io_desc_t raw;
  char steps[256];
};

void sip__preprocess_free(sip__preprocess_t *pp) {
  if (!pp) return;
  for (size_t i = 0; i < pp->n; i++) sip__transform_free(pp->tf[i]);
  sip__free(pp->name);
  sip__free(pp);
}

sip_error_t *sip__preprocess_new(const sip__pool_config_t *c, const sip_io_desc_t *in,
                                 size_t n_in, sip__preprocess_t **out) {
  *out = NULL;
  if (c->n_preprocess > PRE_MAX)
    return sip_error_new(SIP_INVALID_ARGUMENT, "preprocess has %zu steps; at most %d are supported",
                         c->n_preprocess, PRE_MAX);
  size_t idx = n_in;
  if (c->preprocess_input) {
    for (size_t i = 0; i < n_in && idx == n_in; i++)
      if (!strcmp(in[i].name, c->preprocess_input)) idx = i;
  } else if (n_in == 1) {
    idx = 0;
  }
  if (idx == n_in) {
    char names[512] = "";
    for (size_t i = 0; i < n_in; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "",
               in[i].name);
    return c->preprocess_input
               ? sip_error_new(SIP_INVALID_ARGUMENT,
                               "preprocess.input: the model has no input '%s'; expected one of: %s",
                               c->preprocess_input, names)
               : sip_error_new(SIP_INVALID_ARGUMENT,
                               "preprocess: the model has %zu inputs (%s); expected "
                               "preprocess.input to name the one the steps make",
                               n_in, names);
  }
  sip__preprocess_t *pp = sip__calloc(1, sizeof *pp);
  if (!pp) return SIP__OOM();
  pp->input = idx;
  pp->model_rank = in[idx].rank;
  memcpy(pp->model_dims, in[idx].dims, sizeof pp->model_dims);
  pp->fixed = c->preprocess_fixed;
  sip_error_t *e = (pp->name = sip__strdup(in[idx].name)) ? NULL : SIP__OOM();
  const sip_io_desc_t *last = NULL;
  for (size_t i = 0; !e && i < c->n_preprocess; i++) {
    const sip__preprocess_step_t *st = &c->preprocess[i];
    e = sip__transform_new(st->op, st->options, st->n_options, &pp->tf[i]);
    if (e) break;
    pp->n++;
    const sip_io_desc_t *ins, *outs;
    size_t ni, no;
    sip__transform_describe(pp->tf[i], &ins, &ni, &outs, &no);
    if (i == 0) {
      pp->decode = !strcmp(st->op, "decode_image");
      pp->raw = ins[0];
      pp->raw.name = NULL;
      if (pp->decode) pp->raw.rank = -1; /* bytes [N], or an image [H,W,C] */
    }
    last = &outs[0];
    snprintf(pp->steps + strlen(pp->steps), sizeof pp->steps - strlen(pp->steps), "%s%s",
             i ? ", " : "", st->op);
  }
  if (!e && last) {
    const sip_io_desc_t *m = &in[idx];
    int r = last->rank, mr = m->rank;
    pp->add_batch = r >= 0 && mr >= 0 && r + 1 == mr;
    if (last->dtype != m->dtype || (r >= 0 && mr >= 0 && r != mr && !pp->add_batch))
      e = sip_error_new(SIP_FAILED_PRECONDITION,
                        "preprocess: the last step (%s) gives %s of rank %d but the model's input "
                        "'%s' takes %s of rank %d; expected steps that end in the model's dtype "
                        "(to_tensor, normalize or cast) and rank",
                        sip__transform_op(pp->tf[pp->n - 1]), sip_dtype_name(last->dtype), r,
                        m->name, sip_dtype_name(m->dtype), mr);
  }
  if (e) {
    sip__preprocess_free(pp);
    return e;
  }
  *out = pp;
  return NULL;
}

size_t sip__preprocess_input(const sip__preprocess_t *pp) { return pp->input; }

void sip__preprocess_raw_desc(const sip__preprocess_t *pp, sip_io_desc_t *d) {
  char *name = d->name;
  *d = pp->raw;
  d->name = name;
}

const char *sip__preprocess_steps(const sip__preprocess_t *pp) { return pp->steps; }

static const sip_tensor_t *raw_of(const sip__preprocess_t *pp, const sip_tensor_t *const *ins,
                                  size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(ins[i]->name, pp->name)) return ins[i];
  return NULL;
}

/* A raw tensor of the model's rank keeps its leading (batch) dim through
 * the chain; anything else is one image. */
static int64_t rows_of(const sip__preprocess_t *pp, const sip_tensor_t *raw) {
  if (pp->model_rank >= 1 && raw->rank == pp->model_rank && !(pp->decode && raw->rank == 1))
    return raw->dims[0];
  return 1;
}

int64_t sip__preprocess_rows(const sip__preprocess_t *pp, const sip_tensor_t *const *ins,
                             size_t n) {
  const sip_tensor_t *raw = raw_of(pp, ins, n);
  if (!raw) return -1;
  int64_t rows = rows_of(pp, raw);
  for (size_t i = 0; i < n; i++)
    if (ins[i] != raw && (ins[i]->rank < 1 || ins[i]->dims[0] != rows)) return -1;
  return rows;
}

int sip__preprocess_joinable(const sip__preprocess_t *pp, const sip_tensor_t *a,
                             const sip_tensor_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return 0;
  int bytes = pp->decode && a->rank == 1;
  if (pp->fixed) /* one output size: only the channels must agree */
    return bytes || (a->rank >= 1 && a->dims[a->rank - 1] == b->dims[b->rank - 1]);
  if (bytes) return 0; /* two files may decode to any two sizes */
  for (int i = 1; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

sip_error_t *sip__preprocess_run(const sip__preprocess_t *pp, const sip_tensor_t *raw,
                                 sip_tensor_t **out) {
  *out = NULL;
  size_t first = 0;
  if (pp->decode) {
    if (raw->rank == 3)
      first = 1; /* already an image: no decoding */
    else if (raw->rank != 1)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "preprocess of input '%s': received a tensor of rank %d; expected "
                           "PNG or JPEG bytes (uint8 [N]) or an image (uint8 [H,W,C])",
                           pp->name, raw->rank);
  }
  /* Each step takes its input by position: views named "" (borrowed data). */
  sip_tensor_t *cur = sip_tensor_new_view("", raw->dtype, raw->rank, raw->dims, raw->data,
                                          raw->nbytes, raw->owner);
  if (!cur) return SIP__OOM();
  sip_error_t *e = NULL;
  for (size_t i = first; i < pp->n; i++) {
    sip_tensor_t **outs = NULL;
    size_t no = 0;
    const sip_tensor_t *ins[1] = {cur};
    e = sip__transform_run(pp->tf[i], ins, 1, &outs, &no);
    if (e) {
      sip_error_t *w = sip_error_new(sip_error_code(e), "preprocess of input '%s': %s",
                                     pp->name, sip_error_message(e));
      sip_error_free(e);
      e = w;
      break;
    }
    sip_tensor_t *next = sip_tensor_new_view("", outs[0]->dtype, outs[0]->rank, outs[0]->dims,
                                             outs[0]->data, outs[0]->nbytes, outs[0]->owner);
    sip__transform_outputs_free(outs, no);
    sip_tensor_free(cur);
    cur = next;
    if (!cur) return SIP__OOM();
  }
  if (e) {
    sip_tensor_free(cur);
    return e;
  }
  int64_t dims[SIP_MAX_RANK];
  int rank = cur->rank;
  if (pp->add_batch && rank < SIP_MAX_RANK) {
    dims[0] = 1;
    memcpy(dims + 1, cur->dims, (size_t)rank * sizeof *dims);
    rank++;
  } else {
    memcpy(dims, cur->dims, (size_t)rank * sizeof *dims);
  }
  /* The model's fixed dims (past the batch) must come out as they are: a
   * resize to another size is reported here, not by the backend. */
  int fits = pp->model_rank < 0 || rank == pp->model_rank;
  for (int k = 1; fits && pp->model_rank >= 0 && k < rank; k++)
    fits = pp->model_dims[k] < 0 || pp->model_dims[k] == dims[k];
  if (!fits) {
    char got[128], want[128];
    sip__shape_str(got, sizeof got, rank, dims, ",");
    sip__shape_str(want, sizeof want, pp->model_rank, pp->model_dims, ",");
    sip_tensor_free(cur);
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "preprocess of input '%s' made shape %s; the model takes %s (-1: any "
                         "size); check the preprocess steps' sizes",
                         pp->name, got, want);
  }
  *out = sip_tensor_new_view(pp->name, cur->dtype, rank, dims, cur->data, cur->nbytes, cur->owner);
  sip_tensor_free(cur);
  return *out ? NULL : SIP__OOM();
}
