/* sip — the KServe v2 gRPC front-end (server.c and the files of
 * grpc_impl.h, on gRPC's C core with protobuf-c messages generated from
 * proto/grpc_service.proto) and the codec between ModelInferRequest /
 * ModelInferResponse messages and engine requests/responses (codec.c).
 *
 * The codec holds no gRPC or engine state, so it can be unit-tested and
 * fuzzed on its own (tests/unit/grpc/test_grpc_codec.c,
 * tests/fuzz/fuzz_grpc.c). docs/grpc.md documents the service.
 */
#ifndef SIP_GRPC_FRONTEND_H
#define SIP_GRPC_FRONTEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/shm.h"
#include "sip/frontend.h"
#include "sip/server.h"

/* ---- the front-end (server.c) -------------------------------------------- */

/* The front-end (sip/frontend.h). start() takes the server's
 * `const sip__config_t *` and binds cfg->grpc (which must be set):
 * UNAVAILABLE naming the address when it cannot. server.grpc_threads
 * completion-queue threads decode, submit and answer; a request waiting for
 * inference holds no thread. stop() cancels the calls still open. */
extern const sip_frontend_vtable_t sip__frontend_grpc;

/* ---- the codec (codec.c) ------------------------------------------------- */

/* An output the client wants written into a shared memory region. */
typedef struct sip__grpc_shm_out {
  char *name;      /* the output */
  char *region;
  uint64_t offset; /* as asked (reported back) */
  sip_buf_t *owner; /* keeps the mapping alive */
  uint8_t *data;
  uint64_t size;   /* shared_memory_byte_size */
} sip__grpc_shm_out_t;

/* A decoded ModelInferRequest. */
typedef struct sip__grpc_infer {
  sip_request_t *req; /* owned until submitted (set to NULL then) */
  char *model;        /* model_name */
  char *version;      /* model_version, NULL when empty */
  char *id;           /* id to echo, NULL when empty */
  sip__grpc_shm_out_t *shm_out; /* outputs asked in shared memory */
  size_t n_shm_out;
  /* Outputs asked as Triton classifications (parameter classification:
   * the top N): names and N, n_cls of them. */
  char **cls_name;
  uint32_t *cls_topn;
  size_t n_cls;
  int replayed; /* the answer is a duplicate's: parameter idempotent_replay */
  int cached;   /* from the response cache: parameter cached */
  /* Failover: retries before the answer and the session that gave it
   * (borrowed from the response; NULL: not retried): parameters retries
   * and served_by, as over HTTP. */
  uint32_t retries;
  const char *served_by;
} sip__grpc_infer_t;

/* Decodes a serialized inference.ModelInferRequest into an engine request.
 * Inputs come from raw_input_contents (viewed in place: the decoded message
 * is kept alive by the tensors; one entry per input not in shared memory),
 * from each input's typed contents (converted) or, with the parameters
 * shared_memory_region, shared_memory_byte_size and shared_memory_offset,
 * from a region of `shm` (viewed in place; NULL: shared memory is refused;
 * a request's scope, sip__shm_scope_new, records the mappings it used).
 * Outputs with those parameters are written into their region by
 * sip__grpc_encode_infer. Request parameters: priority and timeout
 * (microseconds) are used, others are ignored. Errors: INVALID_ARGUMENT
 * naming the field and what was expected (not a ModelInferRequest, bad
 * datatype or shape, contents that do not match the shape, a region too
 * small), NOT_FOUND (no such region), UNIMPLEMENTED (classification; shared
 * memory without a set), RESOURCE_EXHAUSTED. *out is owned by the
 * caller (sip__grpc_infer_free), on error too when set: it then holds the
 * model and id decoded so far (req NULL), for a stream's error answer. */
sip_error_t *sip__grpc_decode_infer(const uint8_t *data, size_t len, sip__shm_set_t *shm,
                                    sip__grpc_infer_t **out);
/* The same where `backing` (a reference is taken; NULL: none) holds `data`
 * for as long as it lives: raw_input_contents are then tensors viewing the
 * received bytes, never copied. Without it they view one copy of `data`. */
sip_error_t *sip__grpc_decode_infer_in(const uint8_t *data, size_t len, sip_buf_t *backing,
                                       sip__shm_set_t *shm, sip__grpc_infer_t **out);
/* The same for model `model` (borrowed; NULL: the message's model_name),
 * whatever model_name says: ModelMesh's `mm-model-id`. */
sip_error_t *sip__grpc_decode_infer_as(const uint8_t *data, size_t len, sip_buf_t *backing,
                                       sip__shm_set_t *shm, const char *model,
                                       sip__grpc_infer_t **out);
void sip__grpc_infer_free(sip__grpc_infer_t *k);

/* Encodes the outputs as a serialized inference.ModelInferResponse for `k`
 * (outputs in raw_output_contents, in order; an output asked in shared
 * memory is copied there, gets an empty entry and the shared_memory_*
 * parameters), wrapped in a ModelStreamInferResponse when `stream`.
 * `version` (may be NULL) becomes model_version. *out is owned by the
 * caller (sip__free). Errors: INVALID_ARGUMENT (an output larger than its
 * shared_memory_byte_size; a shared memory region an output was read from
 * or written into shrank, core/shm.h), RESOURCE_EXHAUSTED. */
sip_error_t *sip__grpc_encode_infer(const sip__grpc_infer_t *k, const char *version,
                                    const sip_tensor_t *const *outputs, size_t n_outputs,
                                    int stream, uint8_t **out, size_t *len);
/* A serialized ModelStreamInferResponse carrying `msg` as error_message,
 * with the request's model and id (k may be NULL). Owned (sip__free). */
sip_error_t *sip__grpc_encode_stream_error(const sip__grpc_infer_t *k, const char *msg,
                                           uint8_t **out, size_t *len);

#endif
