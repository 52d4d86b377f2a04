/* sip — native protocol codec (docs/protocol.md). Pure functions over bytes:
 * shared by the server transports and libsipclient. */
#ifndef SIP_FRAME_H
#define SIP_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "core/wbuf.h"
#include "sip/error.h"
#include "sip/server.h"
#include "sip/tensor.h"

#define SIP__FRAME_MAGIC "SIPF"
#define SIP__FRAME_VERSION 1
#define SIP__FRAME_HEADER_SIZE 24
#define SIP__MAX_NAME 1024

enum {
  SIP__MSG_INFER_REQUEST = 1,
  SIP__MSG_INFER_RESPONSE = 2,
  SIP__MSG_INFO_REQUEST = 3,
  SIP__MSG_INFO_RESPONSE = 4,
  SIP__MSG_ERROR = 5,
  SIP__MSG_BATCH_INFER_REQUEST = 6,
  SIP__MSG_REPO_REQUEST = 7, /* JSON {"action": "index"|"load"|"unload", "model": NAME} */
  /* Shared memory (unix sockets only), each answered by INFO_RESPONSE: */
  SIP__MSG_SHM_REGISTER = 8,   /* str16 name, u64 offset, u64 byte_size; one fd (SCM_RIGHTS) */
  SIP__MSG_SHM_UNREGISTER = 9, /* str16 name ("": every region of the connection) */
  SIP__MSG_SHM_STATUS = 10,    /* str16 name ("": every region of the connection) */
  /* Events (docs/events.md): str16 pool ("": every pool), u32 buffer (events
   * kept for a slow reader; 0: 1024). Answered by INFO_RESPONSE, then the
   * connection carries only EVENT frames. */
  SIP__MSG_SUBSCRIBE = 11,
  SIP__MSG_EVENT = 12, /* server to client: a JSON object (sip_event_json) */
  /* JSON {"action": "fault"|"drain"|"resume", "pool": P, ...} (sip_server_admin),
   * answered by INFO_RESPONSE. */
  SIP__MSG_ADMIN_REQUEST = 13,
  /* The token (the whole payload) that opens API groups for the rest of the
   * connection (docs/security.md); answered by INFO_RESPONSE
   * {"authenticated": true, "groups": [...]}, or ERROR UNAUTHENTICATED. */
  SIP__MSG_AUTH = 14,
};
#define SIP__MSG_MAX SIP__MSG_AUTH
/* The largest event buffer a subscriber may ask for. */
#define SIP__MAX_EVENT_BUFFER 65536
#define SIP__BATCH_PREFIX_SIZE 8
/* INFER_REQUEST flag (first reserved byte): a u32-length JSON object of
 * request parameters follows the inputs. */
#define SIP__REQ_HAS_PARAMETERS 0x01
/* INFER_REQUEST flag: each requested output is followed by its destination
 * (str16 region, u64 offset, u64 byte_size; an empty region: inline). */
#define SIP__REQ_OUTPUT_SHM 0x02
/* Tensor `reserved` bit: the data is in a shared memory region (str16
 * region, u64 offset, u64 nbytes follow the dims; no padding, no data). */
#define SIP__TENSOR_SHM 0x0001

/* Where a tensor's bytes are (or go) in a shared memory region. */
typedef struct sip__wire_shm_ref {
  char *region; /* NULL: inline */
  uint64_t offset, size;
} sip__wire_shm_ref_t;

typedef struct sip__frame_header {
  uint16_t version;
  uint16_t type;
  uint32_t length;
  uint32_t flags;
  uint64_t request_id;
} sip__frame_header_t;

/* Decodes and checks a 24-byte header: magic, version, flags, type, and
 * length <= max_payload. Errors: INVALID_ARGUMENT (bad magic/version/flags),
 * UNIMPLEMENTED (unknown type), RESOURCE_EXHAUSTED (too large). */
sip_error_t *sip__frame_header_decode(const uint8_t *p, size_t max_payload,
                                      sip__frame_header_t *h);
void sip__frame_header_encode(uint8_t *p, uint16_t type, uint32_t length, uint64_t request_id);

/* The encoding buffer (sip__wbuf_t) is core's; a u16 length, then s. */
void sip__wbuf_str16(sip__wbuf_t *w, const char *s);
/* Appends a tensor; padding is computed relative to `payload_start`. */
void sip__wbuf_tensor(sip__wbuf_t *w, size_t payload_start, const sip_tensor_t *t);
/* Appends a tensor whose t->nbytes bytes are at `offset` of shared memory
 * region `region` (t->data is not read). */
void sip__wbuf_tensor_shm(sip__wbuf_t *w, const sip_tensor_t *t, const char *region,
                          uint64_t offset);

/* A decoded INFER_REQUEST. Tensors view the payload and hold a reference to
 * `owner` (the received frame), so no tensor data is copied. */
typedef struct sip__wire_request {
  char *pool;
  int priority;          /* 0 default, 1 high, 2 medium, 3 low */
  uint32_t timeout_ms;   /* 0: none */
  char **outputs;
  size_t n_outputs;
  sip_tensor_t **inputs;
  size_t n_inputs;
  char *parameters; /* JSON text after the inputs (flag SIP__REQ_HAS_PARAMETERS), or NULL */
  /* n_inputs entries when an input is in shared memory, else NULL. Such an
   * input's tensor has data NULL and no owner until the region is viewed;
   * a STRING one is validated only then. */
  sip__wire_shm_ref_t *input_shm;
  /* n_outputs destinations with flag SIP__REQ_OUTPUT_SHM, else NULL. */
  sip__wire_shm_ref_t *output_shm;
} sip__wire_request_t;

typedef struct sip__wire_response {
  uint32_t code;
  char *message;
  uint64_t queue_us, compute_us, total_us;
  sip_tensor_t **outputs;
  size_t n_outputs;
  /* n_outputs entries when an output was written to shared memory (its
   * tensor has data NULL), else NULL. */
  sip__wire_shm_ref_t *output_shm;
  int replayed; /* flag SIP__RESP_REPLAYED */
} sip__wire_response_t;

/* Decode payloads (without the header). On error nothing is left allocated
 * and the error (INVALID_ARGUMENT) says which field was wrong at which
 * offset. `owner` may be NULL, in which case the tensors borrow `p`. */
sip_error_t *sip__decode_infer_request(const uint8_t *p, size_t len, sip_buf_t *owner,
                                       sip__wire_request_t *out);
sip_error_t *sip__decode_infer_response(const uint8_t *p, size_t len, sip_buf_t *owner,
                                        sip__wire_response_t *out);
void sip__wire_request_clear(sip__wire_request_t *r);
void sip__wire_response_clear(sip__wire_response_t *r);

/* Encode whole frames (header included) into `w` (appending). */
void sip__encode_infer_request(sip__wbuf_t *w, uint64_t request_id, const char *pool, int priority,
                               uint32_t timeout_ms, const char *const *outputs, size_t n_outputs,
                               const sip_tensor_t *const *inputs, size_t n_inputs);
void sip__encode_infer_response(sip__wbuf_t *w, uint64_t request_id, uint32_t code,
                                const char *message, uint64_t queue_us, uint64_t compute_us,
                                uint64_t total_us, const sip_tensor_t *const *outputs,
                                size_t n_outputs);
/* Applies an INFER_REQUEST's parameters (JSON text: pipeline_config,
 * idempotency_key) to r (handlers.c). Errors: INVALID_ARGUMENT naming the
 * parameter that is wrong. */
sip_error_t *sip__apply_request_parameters(sip_request_t *r, const char *text);
/* The same with request parameters (JSON text, e.g. {"pipeline_config": {...}}; NULL: none). */
void sip__encode_infer_request_params(sip__wbuf_t *w, uint64_t request_id, const char *pool,
                                      int priority, uint32_t timeout_ms,
                                      const char *const *outputs, size_t n_outputs,
                                      const sip_tensor_t *const *inputs, size_t n_inputs,
                                      const char *parameters);
/* The same with shared memory: `input_shm` (n_inputs entries, region NULL:
 * inline; NULL: all inline) and `output_shm` (n_outputs destinations;
 * NULL: all inline). */
void sip__encode_infer_request_shm(sip__wbuf_t *w, uint64_t request_id, const char *pool,
                                   int priority, uint32_t timeout_ms, const char *const *outputs,
                                   const sip__wire_shm_ref_t *output_shm, size_t n_outputs,
                                   const sip_tensor_t *const *inputs,
                                   const sip__wire_shm_ref_t *input_shm, size_t n_inputs,
                                   const char *parameters);
/* An INFER_RESPONSE whose outputs with output_shm[i].region set were
 * written to that region (NULL: all inline). */
void sip__encode_infer_response_shm(sip__wbuf_t *w, uint64_t request_id, uint32_t code,
                                    const char *message, uint64_t queue_us, uint64_t compute_us,
                                    uint64_t total_us, const sip_tensor_t *const *outputs,
                                    const sip__wire_shm_ref_t *output_shm, size_t n_outputs,
                                    uint16_t flags);
/* INFER_RESPONSE flags (the first reserved u16): the answer is another
 * request's with the same idempotency key (docs/idempotency.md). */
#define SIP__RESP_REPLAYED 0x1
void sip__wire_shm_refs_free(sip__wire_shm_ref_t *v, size_t n);

/* Shared memory messages. SHM_REGISTER's fd travels as SCM_RIGHTS with the
 * frame; the codec handles the bytes only. */
void sip__encode_shm_register(sip__wbuf_t *w, uint64_t request_id, const char *name,
                              uint64_t offset, uint64_t byte_size);
sip_error_t *sip__decode_shm_register(const uint8_t *p, size_t len, char **name,
                                      uint64_t *offset, uint64_t *byte_size);
/* SHM_UNREGISTER and SHM_STATUS: a str16 name, the whole payload. */
void sip__encode_shm_name(sip__wbuf_t *w, uint16_t type, uint64_t request_id, const char *name);
sip_error_t *sip__decode_shm_name(const uint8_t *p, size_t len, uint16_t type, char **name);

/* BATCH_INFER_REQUEST: an 8-byte prefix (u32 max_batch_size, u8 padding,
 * 3 reserved) followed by an INFER_REQUEST payload whose dim 0 stacks the
 * items. */
void sip__encode_batch_infer_request(sip__wbuf_t *w, uint64_t request_id, uint32_t max_batch_size,
                                     uint8_t padding, const char *pool, int priority,
                                     uint32_t timeout_ms, const char *const *outputs,
                                     size_t n_outputs, const sip_tensor_t *const *inputs,
                                     size_t n_inputs);
sip_error_t *sip__decode_batch_prefix(const uint8_t *p, size_t len, uint32_t *max_batch_size,
                                      uint8_t *padding);
void sip__encode_info_request(sip__wbuf_t *w, uint64_t request_id, uint8_t kind);
/* REPO_REQUEST: the JSON text is the whole payload; answered by INFO_RESPONSE. */
void sip__encode_repo_request(sip__wbuf_t *w, uint64_t request_id, const char *json,
                              size_t json_len);
/* A message whose payload is JSON text (REPO_REQUEST, ADMIN_REQUEST). */
void sip__encode_json_request(sip__wbuf_t *w, uint16_t type, uint64_t request_id,
                              const char *json, size_t json_len);
void sip__encode_info_response(sip__wbuf_t *w, uint64_t request_id, uint32_t code,
                               const char *json, size_t json_len);
void sip__encode_error(sip__wbuf_t *w, uint64_t request_id, uint32_t code, const char *message);

/* SUBSCRIBE: pool (owned; "" for every pool) and buffer (<= SIP__MAX_EVENT_BUFFER). */
void sip__encode_subscribe(sip__wbuf_t *w, uint64_t request_id, const char *pool,
                           uint32_t buffer);
sip_error_t *sip__decode_subscribe(const uint8_t *p, size_t len, char **pool, uint32_t *buffer);
/* EVENT: the JSON text is the whole payload. */
void sip__encode_event(sip__wbuf_t *w, const char *json, size_t json_len);

/* Decodes an ERROR or INFO_RESPONSE payload's code and text (borrowed). */
sip_error_t *sip__decode_code_text(const uint8_t *p, size_t len, int is_error, uint32_t *code,
                                   const char **text, size_t *text_len);

#endif
