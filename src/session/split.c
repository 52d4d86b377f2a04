/* sip — client batches (sip_server_infer_batch) on a pool: a request of
 * more rows than max_batch_size is split into chunks of at most that many
 * rows (the last padded when asked), each submitted to the pool on its own,
 * and their outputs joined in order into one response. */
#include <string.h>

#include "core/core.h"
#include "sched/batch.h"
#include "session/engine.h"
#include "session/pool_impl.h"

typedef struct split {
  pthread_mutex_t mu;
  size_t n_chunks, remaining;
  int64_t *rows;             /* real rows of each chunk (padding excluded) */
  sip_response_t **answers;  /* per chunk */
  sip_code_t code;           /* first failure */
  char *message;
  uint64_t id;
  sip_infer_done_fn done;
  void *user;
  sip__trace_t *trace; /* the request's, carried to the joined answer (or NULL) */
  uint64_t trace_parent; /* the span the chunks' spans go under */
} split_t;

typedef struct chunk_ctx {
  split_t *sp;
  size_t index;
} chunk_ctx_t;

static void split_free(split_t *sp) {
  for (size_t i = 0; i < sp->n_chunks; i++) sip_response_free(sp->answers[i]);
  sip__free(sp->answers);
  sip__free(sp->rows);
  sip__free(sp->message);
  sip__trace_unref(sp->trace);
  pthread_mutex_destroy(&sp->mu);
  sip__free(sp);
}

/* Joins the chunks' outputs (their real rows) into one response. */
static void split_finish(split_t *sp) {
  sip_code_t code = sp->code;
  char *msg = sp->message;
  sp->message = NULL;
  uint64_t q = 0, c = 0, t = 0;
  sip_tensor_t **outs = NULL;
  size_t n_outs = 0;
  if (code == SIP_OK) {
    sip_response_t *a0 = sp->answers[0];
    outs = sip__calloc(a0->n_outputs ? a0->n_outputs : 1, sizeof *outs);
    if (!outs) code = SIP_RESOURCE_EXHAUSTED;
    for (size_t j = 0; code == SIP_OK && j < a0->n_outputs; j++) {
      sip_tensor_t *parts[1024];
      const sip_tensor_t *cparts[1024];
      size_t n = 0;
      sip_error_t *e = NULL;
      for (size_t k = 0; k < sp->n_chunks && !e; k++) {
        const sip_tensor_t *ct = sp->answers[k]->outputs[j];
        e = sip__batch_slice(ct, ct->name, 0, sp->rows[k], &parts[n]);
        if (!e) cparts[n] = parts[n], n++;
      }
      if (!e) e = sip__batch_concat(a0->outputs[j]->name, cparts, n, 0, 0, &outs[j]);
      for (size_t k = 0; k < n; k++) sip_tensor_free(parts[k]);
      if (e) {
        code = sip_error_code(e);
        sip__free(msg);
        msg = sip__strdup(sip_error_message(e));
        sip_error_free(e);
      } else {
        n_outs = j + 1;
      }
    }
  }
  for (size_t k = 0; k < sp->n_chunks; k++)
    if (sp->answers[k]) {
      q = sp->answers[k]->queue_us > q ? sp->answers[k]->queue_us : q;
      c += sp->answers[k]->compute_us;
      t = sp->answers[k]->total_us > t ? sp->answers[k]->total_us : t;
    }
  sip_response_t *resp = sip__response_new(code, msg, sp->id, outs, n_outs, q, c, t);
  if (resp && sp->trace) { /* to the front-end's send span */
    if (code != SIP_OK) sip__trace_root_end(sp->trace, 0, 1);
    resp->trace = sp->trace;
    sp->trace = NULL;
  }
  sip_infer_done_fn done = sp->done;
  void *user = sp->user;
  split_free(sp);
  done(resp, user);
}

/* Records one chunk's end (an answer, or a failure to submit it). */
static void chunk_end(split_t *sp, size_t index, sip_response_t *resp, sip_code_t code,
                      const char *message) {
  pthread_mutex_lock(&sp->mu);
  sp->answers[index] = resp;
  if (resp && resp->code != SIP_OK) {
    code = resp->code;
    message = resp->message;
  } else if (!resp && code == SIP_OK) {
    code = SIP_RESOURCE_EXHAUSTED;
    message = "out of memory";
  }
  if (code != SIP_OK && sp->code == SIP_OK) {
    sp->code = code;
    sp->message = sip__asprintf("chunk %zu of %zu: %s", index + 1, sp->n_chunks, message);
  }
  int last = --sp->remaining == 0;
  pthread_mutex_unlock(&sp->mu);
  if (last) split_finish(sp);
}

static void chunk_done(sip_response_t *resp, void *user) {
  chunk_ctx_t ctx = *(chunk_ctx_t *)user;
  sip__free(user);
  chunk_end(ctx.sp, ctx.index, resp, SIP_OK, NULL);
}

/* Builds chunk i: rows [row0, row0 + rows) of every input, padded to pad_to. */
static sip_error_t *make_chunk(const sip_request_t *r, int64_t row0, int64_t rows, int64_t pad_to,
                               int padding, sip_request_t **out) {
  sip_request_t *c = sip_request_new(r->pool);
  sip_error_t *e = c ? NULL : SIP__OOM();
  if (!e) {
    c->priority = r->priority;
    c->timeout_ms = r->timeout_ms;
    c->batch_wait_ms = r->batch_wait_ms;
    c->id = r->id;
    sip_request_set_cancel_token(c, r->cancel);
    if (r->version) e = sip_request_set_version(c, r->version);
  }
  for (size_t i = 0; !e && i < r->n_outputs; i++) e = sip_request_add_output(c, r->outputs[i]);
  for (size_t i = 0; !e && i < r->n_inputs; i++) {
    sip_tensor_t *slice = NULL, *padded = NULL;
    e = sip__batch_slice(r->inputs[i], r->inputs[i]->name, row0, rows, &slice);
    if (!e && pad_to > rows) {
      const sip_tensor_t *parts[1] = {slice};
      e = sip__batch_concat(slice->name, parts, 1, pad_to, padding, &padded);
      sip_tensor_free(slice);
      slice = padded;
    }
    if (!e) e = sip_request_add_input(c, slice);
  }
  if (e) {
    sip_request_free(c);
    return e;
  }
  *out = c;
  return NULL;
}

/* Drops a request refused before it reached the pool, and the caller's
 * reference. */
static void refuse(sip__pool_t *p, sip_request_t *r) {
  sip_request_free(r);
  sip__pool_unref(p);
}

/* Submits chunk `c` to `p` on a reference the caller took for it. */
static sip_error_t *submit_chunk(sip__pool_t *p, sip_request_t *c, chunk_ctx_t *ctx) {
  if (ctx->sp->trace) { /* each chunk's queue, batch and execute spans */
    sip__trace_ref(ctx->sp->trace);
    c->trace = ctx->sp->trace;
    c->trace_parent = ctx->sp->trace_parent;
  }
  c->done = chunk_done;
  c->user = ctx;
  return sip__pool_model_vt.submit(&p->base, c);
}

sip_error_t *sip__pool_submit_batch(sip__model_t *m, sip_request_t *r, int max_batch_size,
                                    int padding) {
  sip__pool_t *p = (sip__pool_t *)m;
  sip_infer_done_fn done = r->done;
  void *user = r->user;
  int pool_max = p->cfg->max_batch_size;
  /* A preprocess pool's raw input has no rows to split (bytes, one image):
   * the request goes in whole and is batched after preprocessing. */
  if (p->pre) return sip__pool_model_vt.submit(m, r);
  int64_t rows = -1;
  for (size_t i = 0; i < r->n_inputs; i++) {
    int64_t d = r->inputs[i]->rank ? r->inputs[i]->dims[0] : -1;
    rows = i == 0 ? d : (d == rows ? rows : -1);
  }
  /* The client's chunk size is bounded by what the pool itself runs in one
   * execution: a fixed batch dim, else dynamic_batching.max_batch_size. A
   * larger one is refused (padding one row up to it could allocate without
   * bound on the caller's thread). Without either limit a chunk is never
   * larger than the request, so padding adds fewer rows than it has. */
  int64_t limit = p->fixed_batch > 0 ? p->fixed_batch : pool_max;
  if (max_batch_size <= 0) max_batch_size = limit > 0 && pool_max > limit ? (int)limit : pool_max;
  if (limit > 0 && max_batch_size > limit) {
    sip_error_t *e = sip_error_new(
        SIP_INVALID_ARGUMENT,
        "max_batch_size %d is larger than pool '%s' runs in one execution (%s %lld); expected 0 "
        "(the pool's) or 1..%lld",
        max_batch_size, r->pool, p->fixed_batch > 0 ? "the model's fixed batch dim" :
        "dynamic_batching.max_batch_size", (long long)limit, (long long)limit);
    refuse(p, r);
    return e;
  }
  if (limit <= 0 && rows > 0 && max_batch_size > rows) max_batch_size = (int)rows;
  if (rows <= 0 || max_batch_size <= 0 || rows <= max_batch_size ||
      padding < SIP__PAD_NONE || padding > SIP__PAD_ZERO) {
    if (rows < 0) {
      sip_error_t *e = sip_error_new(SIP_INVALID_ARGUMENT,
                                     "a batch request's inputs must share dim 0 (the items); pool "
                                     "'%s'", r->pool);
      refuse(p, r);
      return e;
    }
    if (padding < SIP__PAD_NONE || padding > SIP__PAD_ZERO) {
      refuse(p, r);
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "padding %d; expected 0 (none), 1 (replicate_last) or 2 (zero)",
                           padding);
    }
    /* Fits one execution (or cannot be split): an ordinary request, padded
     * when asked so the model sees max_batch_size rows. */
    if (rows > 0 && max_batch_size > 0 && rows < max_batch_size && padding != SIP__PAD_NONE) {
      split_t *sp = sip__calloc(1, sizeof *sp);
      sip_request_t *c = NULL;
      sip_error_t *e = sp ? make_chunk(r, 0, rows, max_batch_size, padding, &c) : SIP__OOM();
      chunk_ctx_t *ctx = e ? NULL : sip__malloc(sizeof *ctx);
      if (!e && !ctx) e = SIP__OOM();
      if (!e) {
        sp->rows = sip__calloc(1, sizeof *sp->rows);
        sp->answers = sip__calloc(1, sizeof *sp->answers);
        if (!sp->rows || !sp->answers) e = SIP__OOM();
      }
      if (e) {
        sip__free(ctx);
        sip_request_free(c);
        if (sp) {
          sip__free(sp->rows);
          sip__free(sp->answers);
          sip__free(sp);
        }
        refuse(p, r);
        return e;
      }
      pthread_mutex_init(&sp->mu, NULL);
      sp->n_chunks = sp->remaining = 1;
      sp->rows[0] = rows;
      sp->id = r->id;
      sp->done = done;
      sp->user = user;
      sp->trace = r->trace;
      sp->trace_parent = r->trace_parent;
      r->trace = NULL;
      ctx->sp = sp;
      ctx->index = 0;
      sip_request_free(r);
      e = submit_chunk(p, c, ctx); /* takes the caller's reference */
      if (e) {
        sip__free(ctx);
        split_free(sp);
      }
      return e;
    }
    return sip__pool_model_vt.submit(m, r);
  }
  size_t n = (size_t)((rows + max_batch_size - 1) / max_batch_size);
  if (n > 1024) {
    sip_error_t *e = sip_error_new(SIP_INVALID_ARGUMENT, "%lld items in chunks of %d make %zu "
                                   "chunks; at most 1024 are supported",
                                   (long long)rows, max_batch_size, n);
    refuse(p, r);
    return e;
  }
  split_t *sp = sip__calloc(1, sizeof *sp);
  if (sp) {
    sp->rows = sip__calloc(n, sizeof *sp->rows);
    sp->answers = sip__calloc(n, sizeof *sp->answers);
  }
  if (!sp || !sp->rows || !sp->answers) {
    if (sp) {
      sip__free(sp->rows);
      sip__free(sp->answers);
    }
    sip__free(sp);
    refuse(p, r);
    return SIP__OOM();
  }
  pthread_mutex_init(&sp->mu, NULL);
  sp->n_chunks = n;
  sp->remaining = n;
  sp->id = r->id;
  sp->done = done;
  sp->user = user;
  sp->trace = r->trace;
  sp->trace_parent = r->trace_parent;
  r->trace = NULL;
  for (size_t i = 0; i < n; i++) {
    int64_t row0 = (int64_t)i * max_batch_size;
    sp->rows[i] = rows - row0 < max_batch_size ? rows - row0 : max_batch_size;
  }
  for (size_t i = 0; i < n; i++) {
    sip_request_t *c = NULL;
    int64_t pad_to = padding != SIP__PAD_NONE ? max_batch_size : 0;
    sip_error_t *e = make_chunk(r, (int64_t)i * max_batch_size, sp->rows[i], pad_to, padding, &c);
    chunk_ctx_t *ctx = e ? NULL : sip__malloc(sizeof *ctx);
    if (!e && !ctx) {
      sip_request_free(c);
      e = SIP__OOM();
    }
    if (!e) {
      ctx->sp = sp;
      ctx->index = i;
      sip__pool_ref(p); /* each chunk holds one */
      e = submit_chunk(p, c, ctx);
      if (e) sip__free(ctx);
    }
    if (e && i == 0) { /* nothing is in flight: a plain admission error */
      refuse(p, r);
      split_free(sp);
      return e;
    }
    if (e) {
      /* Earlier chunks are in flight: the rest end now, failed; the answer
       * goes through the callback once the others are done. */
      for (size_t k = i; k < n; k++)
        chunk_end(sp, k, NULL, k == i ? sip_error_code(e) : SIP_CANCELLED,
                  k == i ? sip_error_message(e) : "an earlier chunk was refused");
      sip_error_free(e);
      break;
    }
  }
  sip_request_free(r);
  sip__pool_unref(p); /* the caller's: each chunk holds its own */
  return NULL;
}

