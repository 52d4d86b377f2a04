/* Helpers shared by the native protocol codec's unit tests
 * (test_frame_round_trip.c, test_frame_malformed.c, test_frame_alloc.c,
 * test_frame_shm.c): exact heap copies of payloads, error checks, decode
 * expectations, and raw payload builders for frames the encoder cannot
 * write. Decoders always get an exactly sized heap copy of the payload, so
 * ASan catches any read past its end. */
#ifndef SIP_TEST_FRAME_HELPERS_H
#define SIP_TEST_FRAME_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "sip/tensor.h"
#include "transport/frame.h"

#define HDR SIP__FRAME_HEADER_SIZE

/* An exactly sized heap copy (1 byte for an empty one, never read). */
static inline uint8_t *dup_exact(const uint8_t *p, size_t len) {
  uint8_t *d = malloc(len ? len : 1);
  assert_non_null(d);
  if (len) memcpy(d, p, len);
  return d;
}

/* Checks an error's code and that its message contains every string of the
 * NULL-terminated list; frees the error first so a failure does not leak. */
static inline void check_errv(sip_error_t *err, sip_code_t code, const char *what, va_list ap) {
  if (!err) fail_msg("%s: expected %s, got success", what, sip_code_name(code));
  char msg[4096];
  snprintf(msg, sizeof msg, "%s", sip_error_message(err));
  sip_code_t got = sip_error_code(err);
  sip_error_free(err);
  if (got != code) fail_msg("%s: code %s, want %s: %s", what, sip_code_name(got), sip_code_name(code), msg);
  for (const char *sub; (sub = va_arg(ap, const char *));)
    if (!strstr(msg, sub)) fail_msg("%s: message lacks \"%s\":\n  %s", what, sub, msg);
}

static inline void check_err(sip_error_t *err, sip_code_t code, const char *what, ...) {
  va_list ap;
  va_start(ap, what);
  check_errv(err, code, what, ap);
  va_end(ap);
}
#define CHECK_ERR(err, code, ...) check_err(err, code, #err, __VA_ARGS__, NULL)

static inline void assert_ok(sip_error_t *err) {
  if (err) {
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sip_error_message(err));
    sip_code_t c = sip_error_code(err);
    sip_error_free(err);
    fail_msg("unexpected error %s: %s", sip_code_name(c), msg);
  }
}

static inline int is_zeroed_request(const sip__wire_request_t *r) {
  return !r->pool && !r->priority && !r->timeout_ms && !r->outputs && !r->n_outputs &&
         !r->inputs && !r->n_inputs && !r->input_shm && !r->output_shm && !r->parameters;
}

/* Decodes a request payload (copied exactly) expecting an error. */
static inline void expect_req_err(const uint8_t *p, size_t len, int line, sip_code_t code, ...) {
  uint8_t *d = dup_exact(p, len);
  sip__wire_request_t out;
  memset(&out, 0xa5, sizeof out);
  sip_error_t *err = sip__decode_infer_request(d, len, NULL, &out);
  int zeroed = is_zeroed_request(&out);
  if (!err) sip__wire_request_clear(&out);
  free(d);
  char what[64];
  snprintf(what, sizeof what, "decode_infer_request (line %d)", line);
  va_list ap;
  va_start(ap, code);
  check_errv(err, code, what, ap);
  va_end(ap);
  assert_true(zeroed); /* nothing left allocated on failure */
}
#define EXPECT_REQ_ERR(w, ...) \
  expect_req_err((w)->data, (w)->len, __LINE__, SIP_INVALID_ARGUMENT, __VA_ARGS__, NULL)

static inline void expect_resp_err(const uint8_t *p, size_t len, sip_code_t code, ...) {
  uint8_t *d = dup_exact(p, len);
  sip__wire_response_t out;
  memset(&out, 0xa5, sizeof out);
  sip_error_t *err = sip__decode_infer_response(d, len, NULL, &out);
  int zeroed = !out.message && !out.outputs && !out.n_outputs && !out.code && !out.output_shm;
  if (!err) sip__wire_response_clear(&out);
  free(d);
  va_list ap;
  va_start(ap, code);
  check_errv(err, code, "decode_infer_response", ap);
  va_end(ap);
  assert_true(zeroed);
}

/* Packs strings in the STRING tensor format into buf; returns the length. */
static inline size_t pack_strings(uint8_t *buf, const char *const *s, size_t n) {
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t l = (uint32_t)strlen(s[i]);
    for (int k = 0; k < 4; k++) buf[off++] = (uint8_t)(l >> (8 * k));
    memcpy(buf + off, s[i], l);
    off += l;
  }
  return off;
}

static inline void assert_tensor_eq(const sip_tensor_t *a, const sip_tensor_t *b) {
  assert_string_equal(a->name, b->name);
  assert_int_equal(a->dtype, b->dtype);
  assert_int_equal(a->rank, b->rank);
  for (int i = 0; i < a->rank; i++) assert_int_equal(a->dims[i], b->dims[i]);
  assert_int_equal(a->nbytes, b->nbytes);
  if (a->nbytes) assert_memory_equal(a->data, b->data, a->nbytes);
}

static inline void assert_aligned(const sip_tensor_t *t, const uint8_t *payload, size_t len) {
  const uint8_t *d = t->data;
  assert_true(d >= payload && d + t->nbytes <= payload + len);
  if ((size_t)(d - payload) % 8 != 0)
    fail_msg("tensor '%s' data at payload offset %zu is not 8-byte aligned", t->name,
             (size_t)(d - payload));
}

/* Decodes the header at w->data + at, checks it, returns the payload. */
static inline const uint8_t *frame_at(const sip__wbuf_t *w, size_t at, uint16_t type, uint64_t id,
                                      size_t *len) {
  assert_false(w->oom);
  assert_true(w->len >= at + HDR);
  sip__frame_header_t h;
  assert_ok(sip__frame_header_decode(w->data + at, SIZE_MAX, &h));
  assert_int_equal(h.version, SIP__FRAME_VERSION);
  assert_int_equal(h.type, type);
  assert_int_equal(h.flags, 0);
  assert_int_equal(h.request_id, id);
  assert_int_equal(at + HDR + h.length, w->len);
  *len = h.length;
  return w->data + at + HDR;
}

/* Raw payload builders (payload starts at offset 0 of the buffer). */
static inline void raw_str(sip__wbuf_t *w, const char *s, size_t n) {
  sip__wbuf_u16(w, (uint16_t)n);
  sip__wbuf_put(w, s, n);
}

static inline void raw_req_head(sip__wbuf_t *w, const char *pool, uint8_t prio, uint32_t reserved,
                                uint32_t timeout, uint16_t n_out, uint16_t n_in) {
  raw_str(w, pool, strlen(pool));
  sip__wbuf_u8(w, prio);
  sip__wbuf_u8(w, (uint8_t)reserved);
  sip__wbuf_u8(w, (uint8_t)(reserved >> 8));
  sip__wbuf_u8(w, (uint8_t)(reserved >> 16));
  sip__wbuf_u32(w, timeout);
  sip__wbuf_u16(w, n_out);
  sip__wbuf_u16(w, n_in);
}

static inline void raw_tensor(sip__wbuf_t *w, const char *name, size_t name_len, uint8_t dtype,
                              uint8_t rank, uint16_t reserved, const uint64_t *dims, size_t n_dims,
                              uint64_t nbytes, const void *data, size_t data_len) {
  raw_str(w, name, name_len);
  sip__wbuf_u8(w, dtype);
  sip__wbuf_u8(w, rank);
  sip__wbuf_u16(w, reserved);
  for (size_t i = 0; i < n_dims; i++) sip__wbuf_u64(w, dims[i]);
  sip__wbuf_u64(w, nbytes);
  static const uint8_t zeros[8];
  sip__wbuf_put(w, zeros, (8 - w->len % 8) % 8);
  sip__wbuf_put(w, data, data_len);
}

/* A request with a misaligning uint8 input, a float32 matrix and a string
 * vector: used by the truncation and allocation-failure tests. */
static inline void encode_sample_request(sip__wbuf_t *w, uint64_t id) {
  static const uint8_t u8[3] = {1, 2, 3};
  static const float f[6] = {1.5f, -2, 3, 4, 5, 6.25f};
  static const char *const strs[] = {"", "a", "hello"};
  uint8_t sbuf[64];
  size_t sn = pack_strings(sbuf, strs, 3);
  int64_t d3[] = {3}, d23[] = {2, 3};
  sip_tensor_t *in[3] = {
      sip_tensor_new_view("bytes", SIP_DTYPE_UINT8, 1, d3, u8, 3, NULL),
      sip_tensor_new_view("x", SIP_DTYPE_FLOAT32, 2, d23, f, sizeof f, NULL),
      sip_tensor_new_view("words", SIP_DTYPE_STRING, 1, d3, sbuf, sn, NULL),
  };
  const char *outs[] = {"y", "z"};
  sip__encode_infer_request(w, id, "pool.a", 2, 250, outs, 2, (const sip_tensor_t *const *)in, 3);
  for (int i = 0; i < 3; i++) sip_tensor_free(in[i]);
  assert_false(w->oom);
}

#endif
