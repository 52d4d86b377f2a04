/* sip — per-pool preprocess (docs/preprocess.md): a chain of single-input
 * transforms that turns what a client sends to one model input (PNG/JPEG
 * bytes, or a raw uint8 HxWxC image) into the tensor the model takes.
 *
 * The pool advertises the raw input in place of the model's; the scheduler
 * runs the chain on its session executor for each request, before batching
 * (never on a transport thread). The chain is immutable once built, so every
 * session shares it. */
#ifndef SIP_PIPELINE_PREPROCESS_H
#define SIP_PIPELINE_PREPROCESS_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "sip/backend.h"
#include "sip/error.h"
#include "sip/tensor.h"

typedef struct sip__preprocess sip__preprocess_t;

/* Builds the chain of pool config `c` (c->n_preprocess > 0) in front of the
 * model inputs `in`: finds the input it feeds (c->preprocess_input, or the
 * only one) and checks that the last step's output fits it (dtype, and rank
 * equal or one less: a batch dim of 1 is then added). Errors name the pool's
 * problem (INVALID_ARGUMENT, FAILED_PRECONDITION); *out is owned. */
sip_error_t *sip__preprocess_new(const sip__pool_config_t *c, const sip_io_desc_t *in,
                                 size_t n_in, sip__preprocess_t **out);
void sip__preprocess_free(sip__preprocess_t *pp);

/* Index (into `in` above) of the model input the chain makes. */
size_t sip__preprocess_input(const sip__preprocess_t *pp);
/* What clients send instead: *d gets dtype, rank and dims (-1 = any); the
 * name is left to the caller. */
void sip__preprocess_raw_desc(const sip__preprocess_t *pp, sip_io_desc_t *d);

/* The rows (batch dim) request inputs `ins` will have after preprocessing:
 * 1 for one image, N for a raw [N,...] batch that keeps its leading dim;
 * -1 when the other inputs disagree (not batchable). */
int64_t sip__preprocess_rows(const sip__preprocess_t *pp, const sip_tensor_t *const *ins,
                             size_t n);
/* 1 when two requests' raw inputs give tensors that can share a batch. */
int sip__preprocess_joinable(const sip__preprocess_t *pp, const sip_tensor_t *a,
                             const sip_tensor_t *b);

/* Runs the chain on `raw` (borrowed). On success *out is a new tensor named
 * like the model input. Errors: INVALID_ARGUMENT (what the step said about
 * the input), RESOURCE_EXHAUSTED. Thread-safe. */
sip_error_t *sip__preprocess_run(const sip__preprocess_t *pp, const sip_tensor_t *raw,
                                 sip_tensor_t **out);

/* The steps' operations, for introspection: "decode_image, resize, ...".
 * Static storage owned by pp. */
const char *sip__preprocess_steps(const sip__preprocess_t *pp);

#endif
