/* sip — the KServe v2 HTTP/REST front-end (http.c and the files of
 * http_impl.h, on libmicrohttpd) and the codec between HTTP bodies and
 * engine requests/responses (kserve_decode.c, kserve_encode.c).
 *
 * The codec has no HTTP or engine state in it, so it can be unit-tested and
 * fuzzed on its own (tests/unit/http/test_kserve.c, tests/fuzz/fuzz_http.c).
 * docs/http.md documents the endpoints; docs/internals/http.md the design.
 */
#ifndef SIP_HTTP_H
#define SIP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/shm.h"
#include "sip/backend.h"
#include "sip/frontend.h"
#include "sip/server.h"

typedef struct sip__http sip__http_t;

/* ---- the front-end (http.c) ---------------------------------------------- */

/* The front-end (sip/frontend.h). start() takes the server's
 * `const sip__config_t *` and binds cfg->http (which must be set): UNAVAILABLE
 * naming the address when it cannot. Its threads only decode, submit and
 * encode: a request waiting for inference holds no thread (the connection is
 * suspended and resumed by the completion). stop() gives responses still
 * being written up to a second, then closes every connection. Connections
 * are reported as "http". */
extern const sip_frontend_vtable_t sip__frontend_http;
/* The live dashboard on a port of its own (server.dashboard, which must be
 * set; docs/dashboard.md): the same front-end serving only the dashboard's
 * page, data and report, the event stream, /metrics and the health checks
 * (others: 404), on one event-loop thread. Its address is
 * "http://HOST:PORT/dashboard"; connections are reported as "dashboard". */
extern const sip_frontend_vtable_t sip__frontend_dashboard;

/* ---- the codec (kserve_decode.c, kserve_encode.c) ------------------------ */

/* Deepest JSON nesting accepted in a request header (objects and arrays).
 * Rank <= 16 data plus the request's own structure needs about 20. */
#define SIP__KS_MAX_DEPTH 64

/* One output the client asked for, with its KServe parameters. */
typedef struct sip__ks_output {
  char *name;
  int binary;              /* parameters.binary_data: 1 / 0, or -1 when not given */
  uint32_t classification; /* parameters.classification: top-N, 0 = off */
  /* parameters.shared_memory_region: the output is written there, not sent
   * (NULL: not asked). The view is taken when the request is decoded, so a
   * region unregistered meanwhile is still written. */
  char *shm_region;
  uint64_t shm_offset, shm_size; /* shared_memory_offset, shared_memory_byte_size */
  sip_buf_t *shm_owner;          /* a reference on the region's mapping */
  uint8_t *shm_data;             /* its byte at shm_offset */
} sip__ks_output_t;

/* A decoded KServe inference request. */
typedef struct sip__ks_request {
  sip_request_t *req;          /* owned until submitted (set to NULL then) */
  char *id;                    /* the request's "id" to echo, or NULL */
  size_t id_len;               /* (ids may hold NUL: echoed byte for byte) */
  int binary_output;           /* default for outputs without binary_data */
  int replayed;                /* the answer is a duplicate's: "idempotent_replay": true */
  int cached;                  /* from the response cache: "cached": true */
  sip__ks_output_t *outputs;   /* as listed in "outputs" (none: all, default kind) */
  size_t n_outputs;
} sip__ks_request_t;

/* Decodes one POST .../infer body into a request for `model` (and
 * `version`, may be NULL).
 *
 * header_len < 0: the body is all JSON. header_len > 0: the first header_len
 * bytes are JSON and the rest is binary tensor data, consumed in input order
 * by inputs with parameters.binary_data_size. header_len == 0: a raw binary
 * request: the whole body is the model's single input, described by
 * `model_inputs` (the request is refused unless there is exactly one) and
 * outputs default to binary.
 *
 * `model_inputs` (the model's inputs, NULL when not known) also checks each
 * JSON-described input's datatype, in the protocol's names and Triton's
 * wording ("inference input 'x' data-type is 'INT32', but model 'm' expects
 * 'FP32'").
 *
 * Binary inputs view the body without a copy when `owner` (a buffer keeping
 * `body` alive; a reference is taken per tensor) is given and the data is
 * 8-byte aligned; otherwise they are copied. Errors: INVALID_ARGUMENT with a
 * message naming the field, UNIMPLEMENTED for extensions sip does not have
 * (BF16; shared memory without a set of regions), RESOURCE_EXHAUSTED when
 * out of memory. On success *out is owned by the caller
 * (sip__ks_request_free). */
sip_error_t *sip__ks_decode(const char *model, const char *version, const uint8_t *body,
                            size_t len, int64_t header_len, sip_buf_t *owner,
                            const sip_io_desc_t *model_inputs, size_t n_model_inputs,
                            sip__ks_request_t **out);
/* The same with the system shared memory extension over `shm` (the
 * server's regions): an input with parameters.shared_memory_region (and
 * shared_memory_byte_size, optional shared_memory_offset) views the region
 * in place (copied when not 8-byte aligned, and BYTES); an output with them is written
 * into the region by sip__ks_encode. Unknown regions and ranges outside
 * them are INVALID_ARGUMENT naming the input or output. */
sip_error_t *sip__ks_decode_shm(sip__shm_set_t *shm, const char *model, const char *version,
                                const uint8_t *body, size_t len, int64_t header_len,
                                sip_buf_t *owner, const sip_io_desc_t *model_inputs,
                                size_t n_model_inputs, sip__ks_request_t **out);
/* 1 when `e` (from sip__ks_decode*) says the body is not a KServe request
 * at all (malformed JSON, nesting, the binary header's length), not that
 * what it asks for was refused: counted apart (sip__server_note_rejected). */
int sip__ks_error_malformed(const sip_error_t *e);
/* on: JSON tensor data is read through jansson only (the classic decoder),
 * not the fast path; for comparison (SIP_HTTP_JSON_CLASSIC=1 in sipd's
 * environment) and tests. */
void sip__ks_json_classic(int on);
/* Frees a decoded request (and its engine request if still owned). NULL is a
 * no-op. */
void sip__ks_request_free(sip__ks_request_t *k);

/* A piece of the binary section of a response. */
typedef struct sip__ks_segment {
  const void *data;
  size_t len;
} sip__ks_segment_t;

/* An encoded response body: `json` then each segment in order. Segments
 * point into the output tensors passed to sip__ks_encode (which must outlive
 * the body) or into buffers the body keeps itself (classification results). */
typedef struct sip__ks_body {
  char *json;
  size_t json_len;
  sip__ks_segment_t *segs;
  size_t n_segs;
  sip_buf_t **keep;
  size_t n_keep;
  int binary; /* 1: binary sections follow; send Inference-Header-Content-Length */
} sip__ks_body_t;

/* Encodes the outputs of a successful inference as a KServe response for
 * request `k`: JSON "data" or binary sections as asked, classification
 * applied, the request id echoed. `version` (may be NULL) becomes
 * "model_version". An output asked into shared memory is copied there and
 * listed without data, with parameters shared_memory_region,
 * shared_memory_byte_size (the bytes written) and shared_memory_offset.
 * Errors: INVALID_ARGUMENT (classification of a non-numeric output; a BYTES
 * element that is not UTF-8 asked as JSON; an output larger than its shared
 * memory region's byte size, naming the size needed; a shared memory
 * region an output was read from or written into shrank, core/shm.h),
 * RESOURCE_EXHAUSTED.
 * On success the caller owns *out's contents (sip__ks_body_clear). */
sip_error_t *sip__ks_encode(const sip__ks_request_t *k, const char *model, const char *version,
                            const sip_tensor_t *const *outputs, size_t n_outputs,
                            sip__ks_body_t *out);
void sip__ks_body_clear(sip__ks_body_t *b);

/* {"error":"<msg>"} as an owned string (sip__free), NULL when out of memory. */
char *sip__ks_error_json(const char *msg, size_t *len);
/* KServe datatype name of a dtype ("FP32", "BYTES"), NULL for invalid. */
const char *sip__ks_datatype(sip_dtype_t dt);
/* Inverse of sip__ks_datatype; SIP_DTYPE_INVALID when unknown. */
sip_dtype_t sip__ks_dtype(const char *datatype);
/* 1 when the JSON text nests no deeper than max_depth (strings skipped).
 * Linear and allocation-free: run before parsing, so a hostile body costs
 * neither recursion nor memory. */
int sip__ks_depth_ok(const uint8_t *p, size_t n, int max_depth);

#endif
