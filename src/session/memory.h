/* sip — tensors between memory types (src/session/memory.c): the one place
 * the engine copies bytes between host and device memory, counted per pool
 * (sip_memory_copies_total, sip_memory_copy_bytes_total), and the backend
 * wrapper that puts a model's inputs where its backend wants them and its
 * outputs back in host memory. */
#ifndef SIP_SESSION_MEMORY_H
#define SIP_SESSION_MEMORY_H

#include <stdatomic.h>
#include <stddef.h>

#include "sip/backend.h"

/* Directions of a copy, for the counters. */
enum { SIP__COPY_TO_DEVICE = 0, SIP__COPY_TO_HOST = 1, SIP__COPY_DIRECTIONS = 2 };

/* One pool's copies and bytes by direction (zeroed: none). */
typedef struct sip__copy_counters {
  atomic_uint_fast64_t copies[SIP__COPY_DIRECTIONS];
  atomic_uint_fast64_t bytes[SIP__COPY_DIRECTIONS];
} sip__copy_counters_t;

/* "host_to_device" | "device_to_host". */
const char *sip__copy_direction_name(int dir);

/* A new tensor holding `src`'s bytes in (type, device) memory, allocated by
 * `vt`->alloc and filled by `vt`->copy for `model` (a plain copy between
 * host memory kinds without hooks), counted in `cnt` (may be NULL). *out
 * owned. Errors: the backend's, RESOURCE_EXHAUSTED. */
sip_error_t *sip__tensor_to_memory(const sip_backend_vtable_t *vt, void *model,
                                   const sip_tensor_t *src, sip_memory_type_t type, int device,
                                   sip__copy_counters_t *cnt, sip_tensor_t **out);

/* True when `vt`'s memory hook puts any input or output of `model` outside
 * host memory. */
int sip__memory_needs_copies(const sip_backend_vtable_t *vt, void *model);

/* Wraps a loaded model whose backend wants device memory: fills *vt (the
 * caller's storage, e.g. the pool's) with a backend that forwards to
 * `real`, copying inputs to where real->memory wants them and device
 * outputs to host memory, counted in `cnt` (which must outlive the model),
 * and *out_model with the wrapped model (freed by vt->model_free). Takes
 * `model` on success; on failure it is left to the caller. */
sip_error_t *sip__memory_wrap(const sip_backend_vtable_t *real, void *model,
                              sip__copy_counters_t *cnt, sip_backend_vtable_t *vt,
                              void **out_model);
/* Frees a wrapper made by sip__memory_wrap, leaving the model it wraps to
 * its owner (a model the store shares). */
void sip__memory_unwrap(void *wrapped);

#endif
