/* sip — native protocol codec: the frame header and the encoders (the
 * decoders are frame_decode.c). */
#include "transport/frame.h"

#include <string.h>

#include "core/core.h"
#include "core/redact.h"

static const char *type_names[SIP__MSG_MAX + 1] = {
    "?",           "INFER_REQUEST",       "INFER_RESPONSE", "INFO_REQUEST",
    "INFO_RESPONSE", "ERROR",             "BATCH_INFER_REQUEST", "REPO_REQUEST",
    "SHM_REGISTER", "SHM_UNREGISTER",     "SHM_STATUS",     "SUBSCRIBE",
    "EVENT",       "ADMIN_REQUEST",       "AUTH"};

sip_error_t *sip__frame_header_decode(const uint8_t *p, size_t max_payload,
                                      sip__frame_header_t *h) {
  if (memcmp(p, SIP__FRAME_MAGIC, 4) != 0)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "bad frame magic %02x %02x %02x %02x; expected \"SIPF\" (this is not a "
                         "sip native-protocol client, see docs/protocol.md)",
                         p[0], p[1], p[2], p[3]);
  h->version = (uint16_t)(p[4] | p[5] << 8);
  h->type = (uint16_t)(p[6] | p[7] << 8);
  h->length = (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
  h->flags = (uint32_t)p[12] | (uint32_t)p[13] << 8 | (uint32_t)p[14] << 16 | (uint32_t)p[15] << 24;
  h->request_id = 0;
  for (int i = 7; i >= 0; i--) h->request_id = h->request_id << 8 | p[16 + i];
  if (h->version != SIP__FRAME_VERSION)
    return sip_error_new(SIP_INVALID_ARGUMENT, "unsupported protocol version %u; expected %d",
                         h->version, SIP__FRAME_VERSION);
  if (h->flags != 0)
    return sip_error_new(SIP_INVALID_ARGUMENT, "frame flags 0x%x set; expected 0", h->flags);
  if (h->type < SIP__MSG_INFER_REQUEST || h->type > SIP__MSG_MAX)
    return sip_error_new(SIP_UNIMPLEMENTED, "unknown message type %u; expected 1..%d", h->type,
                         SIP__MSG_MAX);
  if (h->length > max_payload)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED,
                         "%s frame of %u bytes exceeds the limit of %zu bytes (max_frame_bytes)",
                         type_names[h->type], h->length, max_payload);
  return NULL;
}

void sip__frame_header_encode(uint8_t *p, uint16_t type, uint32_t length, uint64_t request_id) {
  memcpy(p, SIP__FRAME_MAGIC, 4);
  sip__put_le(p + 4, SIP__FRAME_VERSION, 2);
  sip__put_le(p + 6, type, 2);
  sip__put_le(p + 8, length, 4);
  sip__put_le(p + 12, 0, 4);
  sip__put_le(p + 16, request_id, 8);
}

/* ---- writer (the buffer is core/wbuf.c) ---- */

void sip__wbuf_str16(sip__wbuf_t *w, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > 0xffff) n = 0xffff;
  sip__wbuf_u16(w, (uint16_t)n);
  sip__wbuf_put(w, s, n);
}

/* A tensor's name, dtype, rank, reserved bits and dims. */
static void tensor_head(sip__wbuf_t *w, const sip_tensor_t *t, uint16_t reserved) {
  sip__wbuf_str16(w, t->name);
  sip__wbuf_u8(w, (uint8_t)t->dtype);
  sip__wbuf_u8(w, (uint8_t)t->rank);
  sip__wbuf_u16(w, reserved);
  for (int i = 0; i < t->rank; i++) sip__wbuf_u64(w, (uint64_t)t->dims[i]);
}

void sip__wbuf_tensor_shm(sip__wbuf_t *w, const sip_tensor_t *t, const char *region,
                          uint64_t offset) {
  tensor_head(w, t, SIP__TENSOR_SHM);
  sip__wbuf_str16(w, region);
  sip__wbuf_u64(w, offset);
  sip__wbuf_u64(w, t->nbytes);
}

void sip__wbuf_tensor(sip__wbuf_t *w, size_t payload_start, const sip_tensor_t *t) {
  tensor_head(w, t, 0);
  sip__wbuf_u64(w, t->nbytes);
  static const uint8_t zeros[8];
  size_t pad = (8 - (w->len - payload_start) % 8) % 8;
  sip__wbuf_put(w, zeros, pad);
  sip__wbuf_put(w, t->data, t->nbytes);
}

/* Starts a frame: reserves the header; finish() fills it once the payload
 * length is known. */
static size_t begin(sip__wbuf_t *w) {
  size_t at = w->len;
  static const uint8_t zero[SIP__FRAME_HEADER_SIZE];
  sip__wbuf_put(w, zero, sizeof zero);
  return at;
}

static void finish(sip__wbuf_t *w, size_t at, uint16_t type, uint64_t request_id) {
  if (w->oom) return;
  size_t payload = w->len - at - SIP__FRAME_HEADER_SIZE;
  if (payload > UINT32_MAX) {
    w->oom = 1;
    return;
  }
  sip__frame_header_encode(w->data + at, type, (uint32_t)payload, request_id);
}

static void infer_body(sip__wbuf_t *w, size_t ps, const char *pool, int priority,
                       uint32_t timeout_ms, const char *const *outputs,
                       const sip__wire_shm_ref_t *output_shm, size_t n_outputs,
                       const sip_tensor_t *const *inputs, const sip__wire_shm_ref_t *input_shm,
                       size_t n_inputs, const char *parameters) {
  sip__wbuf_str16(w, pool);
  sip__wbuf_u8(w, (uint8_t)priority);
  sip__wbuf_u8(w, (uint8_t)((parameters ? SIP__REQ_HAS_PARAMETERS : 0) |
                            (output_shm ? SIP__REQ_OUTPUT_SHM : 0)));
  sip__wbuf_put(w, "\0\0", 2);
  sip__wbuf_u32(w, timeout_ms);
  sip__wbuf_u16(w, (uint16_t)n_outputs);
  sip__wbuf_u16(w, (uint16_t)n_inputs);
  for (size_t i = 0; i < n_outputs; i++) {
    sip__wbuf_str16(w, outputs[i]);
    if (!output_shm) continue;
    sip__wbuf_str16(w, output_shm[i].region);
    sip__wbuf_u64(w, output_shm[i].region ? output_shm[i].offset : 0);
    sip__wbuf_u64(w, output_shm[i].region ? output_shm[i].size : 0);
  }
  for (size_t i = 0; i < n_inputs; i++) {
    if (input_shm && input_shm[i].region)
      sip__wbuf_tensor_shm(w, inputs[i], input_shm[i].region, input_shm[i].offset);
    else
      sip__wbuf_tensor(w, ps, inputs[i]);
  }
  if (parameters) {
    size_t n = strlen(parameters);
    sip__wbuf_u32(w, (uint32_t)n);
    sip__wbuf_put(w, parameters, n);
  }
}

void sip__encode_infer_request(sip__wbuf_t *w, uint64_t request_id, const char *pool, int priority,
                               uint32_t timeout_ms, const char *const *outputs, size_t n_outputs,
                               const sip_tensor_t *const *inputs, size_t n_inputs) {
  sip__encode_infer_request_params(w, request_id, pool, priority, timeout_ms, outputs, n_outputs,
                                   inputs, n_inputs, NULL);
}

void sip__encode_infer_request_params(sip__wbuf_t *w, uint64_t request_id, const char *pool,
                                      int priority, uint32_t timeout_ms,
                                      const char *const *outputs, size_t n_outputs,
                                      const sip_tensor_t *const *inputs, size_t n_inputs,
                                      const char *parameters) {
  sip__encode_infer_request_shm(w, request_id, pool, priority, timeout_ms, outputs, NULL,
                                n_outputs, inputs, NULL, n_inputs, parameters);
}

void sip__encode_infer_request_shm(sip__wbuf_t *w, uint64_t request_id, const char *pool,
                                   int priority, uint32_t timeout_ms, const char *const *outputs,
                                   const sip__wire_shm_ref_t *output_shm, size_t n_outputs,
                                   const sip_tensor_t *const *inputs,
                                   const sip__wire_shm_ref_t *input_shm, size_t n_inputs,
                                   const char *parameters) {
  size_t at = begin(w);
  infer_body(w, at + SIP__FRAME_HEADER_SIZE, pool, priority, timeout_ms, outputs, output_shm,
             n_outputs, inputs, input_shm, n_inputs, parameters);
  finish(w, at, SIP__MSG_INFER_REQUEST, request_id);
}

void sip__encode_batch_infer_request(sip__wbuf_t *w, uint64_t request_id, uint32_t max_batch_size,
                                     uint8_t padding, const char *pool, int priority,
                                     uint32_t timeout_ms, const char *const *outputs,
                                     size_t n_outputs, const sip_tensor_t *const *inputs,
                                     size_t n_inputs) {
  size_t at = begin(w);
  sip__wbuf_u32(w, max_batch_size);
  sip__wbuf_u8(w, padding);
  sip__wbuf_put(w, "\0\0\0", 3);
  /* The 8-byte prefix keeps tensor data 8-aligned for the embedded request. */
  infer_body(w, at + SIP__FRAME_HEADER_SIZE + SIP__BATCH_PREFIX_SIZE, pool, priority, timeout_ms,
             outputs, NULL, n_outputs, inputs, NULL, n_inputs, NULL);
  finish(w, at, SIP__MSG_BATCH_INFER_REQUEST, request_id);
}


void sip__encode_infer_response(sip__wbuf_t *w, uint64_t request_id, uint32_t code,
                                const char *message, uint64_t queue_us, uint64_t compute_us,
                                uint64_t total_us, const sip_tensor_t *const *outputs,
                                size_t n_outputs) {
  sip__encode_infer_response_shm(w, request_id, code, message, queue_us, compute_us, total_us,
                                 outputs, NULL, n_outputs, 0);
}

/* u32 code, u32 length, the message: without the server's directories
 * (core/redact.h). */
static void put_message(sip__wbuf_t *w, uint32_t code, const char *message) {
  size_t mlen = message ? strlen(message) : 0, rn = 0;
  char *red = sip__redacted(message, mlen, &rn);
  sip__wbuf_u32(w, code);
  sip__wbuf_u32(w, (uint32_t)(red ? rn : mlen));
  sip__wbuf_put(w, red ? red : message, red ? rn : mlen);
  sip__free(red);
}

void sip__encode_infer_response_shm(sip__wbuf_t *w, uint64_t request_id, uint32_t code,
                                    const char *message, uint64_t queue_us, uint64_t compute_us,
                                    uint64_t total_us, const sip_tensor_t *const *outputs,
                                    const sip__wire_shm_ref_t *output_shm, size_t n_outputs,
                                    uint16_t flags) {
  size_t at = begin(w);
  size_t ps = at + SIP__FRAME_HEADER_SIZE;
  put_message(w, code, message);
  sip__wbuf_u64(w, queue_us);
  sip__wbuf_u64(w, compute_us);
  sip__wbuf_u64(w, total_us);
  sip__wbuf_u16(w, (uint16_t)n_outputs);
  sip__wbuf_u16(w, flags);
  sip__wbuf_u32(w, 0);
  for (size_t i = 0; i < n_outputs; i++) {
    if (output_shm && output_shm[i].region)
      sip__wbuf_tensor_shm(w, outputs[i], output_shm[i].region, output_shm[i].offset);
    else
      sip__wbuf_tensor(w, ps, outputs[i]);
  }
  finish(w, at, SIP__MSG_INFER_RESPONSE, request_id);
}

void sip__encode_shm_register(sip__wbuf_t *w, uint64_t request_id, const char *name,
                              uint64_t offset, uint64_t byte_size) {
  size_t at = begin(w);
  sip__wbuf_str16(w, name);
  sip__wbuf_u64(w, offset);
  sip__wbuf_u64(w, byte_size);
  finish(w, at, SIP__MSG_SHM_REGISTER, request_id);
}

void sip__encode_shm_name(sip__wbuf_t *w, uint16_t type, uint64_t request_id, const char *name) {
  size_t at = begin(w);
  sip__wbuf_str16(w, name);
  finish(w, at, type, request_id);
}

void sip__encode_info_request(sip__wbuf_t *w, uint64_t request_id, uint8_t kind) {
  size_t at = begin(w);
  sip__wbuf_u8(w, kind);
  finish(w, at, SIP__MSG_INFO_REQUEST, request_id);
}

void sip__encode_repo_request(sip__wbuf_t *w, uint64_t request_id, const char *json,
                              size_t json_len) {
  sip__encode_json_request(w, SIP__MSG_REPO_REQUEST, request_id, json, json_len);
}

void sip__encode_json_request(sip__wbuf_t *w, uint16_t type, uint64_t request_id,
                              const char *json, size_t json_len) {
  size_t at = begin(w);
  sip__wbuf_put(w, json, json_len);
  finish(w, at, type, request_id);
}

void sip__encode_info_response(sip__wbuf_t *w, uint64_t request_id, uint32_t code,
                               const char *json, size_t json_len) {
  size_t at = begin(w);
  sip__wbuf_u32(w, code);
  size_t rn = 0;
  char *red = sip__redacted(json, json_len, &rn); /* no server directories (core/redact.h) */
  sip__wbuf_put(w, red ? red : json, red ? rn : json_len);
  sip__free(red);
  finish(w, at, SIP__MSG_INFO_RESPONSE, request_id);
}

void sip__encode_error(sip__wbuf_t *w, uint64_t request_id, uint32_t code, const char *message) {
  size_t at = begin(w);
  put_message(w, code, message);
  finish(w, at, SIP__MSG_ERROR, request_id);
}


void sip__encode_subscribe(sip__wbuf_t *w, uint64_t request_id, const char *pool,
                           uint32_t buffer) {
  size_t at = begin(w);
  sip__wbuf_str16(w, pool);
  sip__wbuf_u32(w, buffer);
  finish(w, at, SIP__MSG_SUBSCRIBE, request_id);
}

void sip__encode_event(sip__wbuf_t *w, const char *json, size_t json_len) {
  size_t at = begin(w);
  sip__wbuf_put(w, json, json_len);
  finish(w, at, SIP__MSG_EVENT, 0);
}
