/* sip — batch assembly: concatenating requests' inputs along dim 0 (with
 * padding for fixed batch dims) and slicing a batch's outputs back. */
#ifndef SIP_BATCH_H
#define SIP_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "sip/error.h"
#include "sip/tensor.h"

/* Joins `parts` (same dtype, rank >= 1, equal dims after dim 0) along dim 0
 * into one new tensor named `name`. When pad_to exceeds the rows given, the
 * rest is filled per `padding` (SIP__PAD_REPLICATE_LAST: copies of the last
 * row; SIP__PAD_ZERO: zeros / empty strings). */
sip_error_t *sip__batch_concat(const char *name, const sip_tensor_t *const *parts, size_t n,
                               int64_t pad_to, int padding, sip_tensor_t **out);

/* Rows [row0, row0 + rows) of `t` as a tensor named `name`: a view sharing
 * t's buffer when it has an owner, else a copy. */
sip_error_t *sip__batch_slice(const sip_tensor_t *t, const char *name, int64_t row0, int64_t rows,
                              sip_tensor_t **out);

/* 1 when the two tensors can share a batch: same dtype and rank, rank >= 1,
 * equal dims after dim 0. */
int sip__batch_compatible(const sip_tensor_t *a, const sip_tensor_t *b);

#endif
