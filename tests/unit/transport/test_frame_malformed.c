/* Unit tests for the native protocol codec (src/transport/frame.c,
 * docs/protocol.md): every malformed header, request and response path
 * (truncation anywhere, trailing bytes, reserved fields, bad names, tensors
 * and strings) with its code and message, and nothing left allocated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frame_helpers.h"

static void test_header_malformed(void **state) {
  (void)state;
  uint8_t b[HDR], c[HDR];
  sip__frame_header_t h;
  sip__frame_header_encode(b, SIP__MSG_INFER_REQUEST, 100, 7);

  memcpy(c, b, HDR);
  memcpy(c, "GET ", 4);
  CHECK_ERR(sip__frame_header_decode(c, 1 << 20, &h), SIP_INVALID_ARGUMENT, "bad frame magic",
            "47 45 54 20", "expected \"SIPF\"");
  memcpy(c, b, HDR);
  c[3] = 'X';
  CHECK_ERR(sip__frame_header_decode(c, 1 << 20, &h), SIP_INVALID_ARGUMENT, "bad frame magic");

  memcpy(c, b, HDR);
  c[4] = 2;
  CHECK_ERR(sip__frame_header_decode(c, 1 << 20, &h), SIP_INVALID_ARGUMENT,
            "unsupported protocol version 2", "expected 1");
  memcpy(c, b, HDR);
  c[4] = 0;
  CHECK_ERR(sip__frame_header_decode(c, 1 << 20, &h), SIP_INVALID_ARGUMENT,
            "unsupported protocol version 0");
  memcpy(c, b, HDR);
  c[5] = 1; /* version 257 */
  CHECK_ERR(sip__frame_header_decode(c, 1 << 20, &h), SIP_INVALID_ARGUMENT,
            "unsupported protocol version 257");

  for (int byte = 12; byte < 16; byte++) {
    memcpy(c, b, HDR);
    c[byte] = 0x80;
    CHECK_ERR(sip__frame_header_decode(c, 1 << 20, &h), SIP_INVALID_ARGUMENT, "frame flags",
              "expected 0");
  }

  static const uint16_t bad_types[] = {0, 15, 16, 0x100, 0xffff};
  for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
    memcpy(c, b, HDR);
    c[6] = (uint8_t)bad_types[i];
    c[7] = (uint8_t)(bad_types[i] >> 8);
    char want[64];
    snprintf(want, sizeof want, "unknown message type %u", bad_types[i]);
    CHECK_ERR(sip__frame_header_decode(c, 1 << 20, &h), SIP_UNIMPLEMENTED, want, "expected 1..14");
  }

  sip__frame_header_encode(c, SIP__MSG_INFER_RESPONSE, 1025, 1);
  CHECK_ERR(sip__frame_header_decode(c, 1024, &h), SIP_RESOURCE_EXHAUSTED, "INFER_RESPONSE",
            "1025 bytes", "limit of 1024", "max_frame_bytes");
  sip__frame_header_encode(c, SIP__MSG_INFER_REQUEST, 0xffffffffu, 1);
  CHECK_ERR(sip__frame_header_decode(c, (size_t)256 << 20, &h), SIP_RESOURCE_EXHAUSTED,
            "INFER_REQUEST", "4294967295 bytes");
}

static void test_code_text_malformed(void **state) {
  (void)state;
  uint8_t b[16] = {5, 0, 0, 0, 3, 0, 0, 0, 'a', 'b', 'c', 'd'};
  uint32_t code;
  const char *text;
  size_t tl;
  for (size_t n = 0; n < 4; n++) {
    uint8_t *c = dup_exact(b, n);
    CHECK_ERR(sip__decode_code_text(c, n, 0, &code, &text, &tl), SIP_INVALID_ARGUMENT,
              "INFO_RESPONSE truncated", "code");
    CHECK_ERR(sip__decode_code_text(c, n, 1, &code, &text, &tl), SIP_INVALID_ARGUMENT,
              "ERROR truncated", "code");
    free(c);
  }
  for (size_t n = 4; n < 8; n++) {
    uint8_t *c = dup_exact(b, n);
    CHECK_ERR(sip__decode_code_text(c, n, 1, &code, &text, &tl), SIP_INVALID_ARGUMENT,
              "ERROR truncated", "message length");
    free(c);
  }
  for (size_t n = 8; n < 11; n++) { /* message shorter than msg_len */
    uint8_t *c = dup_exact(b, n);
    CHECK_ERR(sip__decode_code_text(c, n, 1, &code, &text, &tl), SIP_INVALID_ARGUMENT, "ERROR",
              "message");
    free(c);
  }
  uint8_t *c = dup_exact(b, 12); /* one byte after the message */
  CHECK_ERR(sip__decode_code_text(c, 12, 1, &code, &text, &tl), SIP_INVALID_ARGUMENT, "ERROR",
            "message");
  free(c);
  /* A hostile msg_len. */
  uint8_t h[8] = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  c = dup_exact(h, 8);
  CHECK_ERR(sip__decode_code_text(c, 8, 1, &code, &text, &tl), SIP_INVALID_ARGUMENT, "ERROR",
            "4294967295");
  free(c);
}

static void test_request_truncated_everywhere(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  encode_sample_request(&w, 1);
  size_t len;
  const uint8_t *pl = frame_at(&w, 0, SIP__MSG_INFER_REQUEST, 1, &len);
  sip__wire_request_t r;
  assert_ok(sip__decode_infer_request(pl, len, NULL, &r)); /* the whole is valid */
  sip__wire_request_clear(&r);
  for (size_t n = 0; n < len; n++) {
    char what[64];
    snprintf(what, sizeof what, "prefix of %zu/%zu bytes", n, len);
    uint8_t *c = dup_exact(pl, n);
    sip_error_t *err = sip__decode_infer_request(c, n, NULL, &r);
    int zeroed = is_zeroed_request(&r);
    if (!err) sip__wire_request_clear(&r);
    free(c);
    check_err(err, SIP_INVALID_ARGUMENT, what, "INFER_REQUEST", "truncated", NULL);
    assert_true(zeroed);
  }
  sip__wbuf_free(&w);
}

static void test_response_truncated_everywhere(void **state) {
  (void)state;
  static const char *const s[] = {"ab", "c"};
  uint8_t sb[16];
  size_t sn = pack_strings(sb, s, 2);
  int64_t d2[1] = {2};
  uint16_t v[2] = {1, 2};
  sip_tensor_t *o[2] = {sip_tensor_new_view("w", SIP_DTYPE_STRING, 1, d2, sb, sn, NULL),
                        sip_tensor_new_view("v", SIP_DTYPE_UINT16, 1, d2, v, 4, NULL)};
  sip__wbuf_t w = {0};
  sip__encode_infer_response(&w, 1, 0, "", 1, 2, 3, (const sip_tensor_t *const *)o, 2);
  sip_tensor_free(o[0]);
  sip_tensor_free(o[1]);
  size_t len;
  const uint8_t *pl = frame_at(&w, 0, SIP__MSG_INFER_RESPONSE, 1, &len);
  for (size_t n = 0; n < len; n++) {
    char what[64];
    snprintf(what, sizeof what, "prefix of %zu/%zu bytes", n, len);
    uint8_t *c = dup_exact(pl, n);
    sip__wire_response_t r;
    sip_error_t *err = sip__decode_infer_response(c, n, NULL, &r);
    if (!err) sip__wire_response_clear(&r);
    free(c);
    check_err(err, SIP_INVALID_ARGUMENT, what, "INFER_RESPONSE", "truncated", NULL);
  }
  sip__wbuf_free(&w);
}

static void test_request_trailing_bytes(void **state) {
  (void)state;
  for (size_t extra = 1; extra <= 9; extra++) {
    sip__wbuf_t w = {0};
    encode_sample_request(&w, 1);
    for (size_t i = 0; i < extra; i++) sip__wbuf_u8(&w, 0);
    char want[64];
    snprintf(want, sizeof want, "has %zu unexpected bytes", extra);
    expect_req_err(w.data + HDR, w.len - HDR, __LINE__, SIP_INVALID_ARGUMENT, "INFER_REQUEST", want,
                   "after its last field", NULL);
    sip__wbuf_free(&w);
  }
  /* Also after a request without inputs. */
  sip__wbuf_t w = {0};
  raw_req_head(&w, "p", 0, 0, 0, 0, 0);
  sip__wbuf_u8(&w, 1);
  EXPECT_REQ_ERR(&w, "1 unexpected bytes", "offset 15");
  sip__wbuf_free(&w);
}

static void test_response_trailing_bytes(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  sip__encode_infer_response(&w, 1, 0, "m", 0, 0, 0, NULL, 0);
  sip__wbuf_u8(&w, 0xee);
  expect_resp_err(w.data + HDR, w.len - HDR, SIP_INVALID_ARGUMENT, "INFER_RESPONSE",
                  "1 unexpected bytes", NULL);
  sip__wbuf_free(&w);
}

static void test_response_nonzero_reserved(void **state) {
  (void)state;
  /* docs/protocol.md: the response's reserved u16 + u32 are zero, as the
   * request's reserved bytes are (which the decoder rejects when set). */
  for (int byte = 0; byte < 6; byte++) {
    sip__wbuf_t w = {0};
    sip__encode_infer_response(&w, 1, 0, "", 0, 0, 0, NULL, 0);
    uint8_t pl[64];
    size_t len = w.len - HDR;
    assert_true(len == 40);
    memcpy(pl, w.data + HDR, len);
    sip__wbuf_free(&w); /* before a failing check longjmps out */
    /* Bit 0 of the first is the REPLAYED flag (docs/idempotency.md). */
    pl[4 + 4 + 24 + 2 + (size_t)byte] = byte ? 1 : 2;
    expect_resp_err(pl, len, SIP_INVALID_ARGUMENT, "INFER_RESPONSE", "reserved", NULL);
  }
  sip__wbuf_t w = {0};
  const sip_tensor_t *none[1] = {NULL};
  sip__encode_infer_response_shm(&w, 1, 0, "", 0, 0, 0, none, NULL, 0, SIP__RESP_REPLAYED);
  sip__wire_response_t wr;
  sip_error_t *e = sip__decode_infer_response(w.data + HDR, w.len - HDR, NULL, &wr);
  sip__wbuf_free(&w);
  assert_null(e);
  assert_int_equal(wr.replayed, 1);
  sip__wire_response_clear(&wr);
}

static void test_request_bad_header_fields(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  for (unsigned prio = 4; prio <= 255; prio += 251) {
    raw_req_head(&w, "p", (uint8_t)prio, 0, 0, 0, 0);
    char want[64];
    snprintf(want, sizeof want, "priority %u", prio);
    EXPECT_REQ_ERR(&w, want, "expected 0 (pool default), 1 (high), 2 (medium) or 3 (low)");
    sip__wbuf_free(&w);
  }
  /* Bits 0 and 1 of the first reserved byte are the parameters and output
   * destination flags; anything else is refused. */
  static const uint32_t reserved[] = {4, 0x100, 0x10000, 0xffffff};
  for (size_t i = 0; i < 4; i++) {
    raw_req_head(&w, "p", 1, reserved[i], 0, 0, 0);
    EXPECT_REQ_ERR(&w, "reserved bytes are not zero");
    sip__wbuf_free(&w);
  }
}

static void test_request_names(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  char big[1100];
  memset(big, 'n', sizeof big);

  /* NUL in the pool name. */
  raw_str(&w, "po\0l", 4);
  sip__wbuf_put(&w, "\0\0\0\0\0\0\0\0\0\0\0\0", 12);
  EXPECT_REQ_ERR(&w, "pool name", "offset 2", "NUL byte");
  sip__wbuf_free(&w);

  /* Pool name of 1025 bytes; 1024 is fine. */
  raw_str(&w, big, 1025);
  sip__wbuf_put(&w, "\0\0\0\0\0\0\0\0\0\0\0\0", 12);
  EXPECT_REQ_ERR(&w, "pool name of 1025 bytes is longer than 1024");
  sip__wbuf_free(&w);
  raw_str(&w, big, 1024);
  sip__wbuf_put(&w, "\0\0\0\0\0\0\0\0\0\0\0\0", 12);
  sip__wire_request_t r;
  assert_ok(sip__decode_infer_request(w.data, w.len, NULL, &r));
  assert_int_equal(strlen(r.pool), 1024);
  sip__wire_request_clear(&r);
  sip__wbuf_free(&w);

  /* Requested output names: NUL, too long; the first good one is freed. */
  raw_req_head(&w, "p", 0, 0, 0, 2, 0);
  raw_str(&w, "ok", 2);
  raw_str(&w, "\0", 1);
  EXPECT_REQ_ERR(&w, "requested output name", "NUL byte");
  sip__wbuf_free(&w);
  raw_req_head(&w, "p", 0, 0, 0, 2, 0);
  raw_str(&w, "ok", 2);
  raw_str(&w, big, 1025);
  EXPECT_REQ_ERR(&w, "requested output name of 1025 bytes is longer than 1024");
  sip__wbuf_free(&w);
  /* More outputs announced than bytes could hold. */
  raw_req_head(&w, "p", 0, 0, 0, 0xffff, 0);
  raw_str(&w, "ok", 2);
  EXPECT_REQ_ERR(&w, "truncated", "requested outputs");
  sip__wbuf_free(&w);

  /* Tensor names: NUL, too long. */
  float f = 1;
  uint64_t d1 = 1;
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "a\0", 2, SIP_DTYPE_FLOAT32, 1, 0, &d1, 1, 4, &f, 4);
  EXPECT_REQ_ERR(&w, "tensor name", "NUL byte");
  sip__wbuf_free(&w);
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, big, 1025, SIP_DTYPE_FLOAT32, 1, 0, &d1, 1, 4, &f, 4);
  EXPECT_REQ_ERR(&w, "tensor name of 1025 bytes is longer than 1024");
  sip__wbuf_free(&w);
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, big, 1024, SIP_DTYPE_FLOAT32, 1, 0, &d1, 1, 4, &f, 4);
  assert_ok(sip__decode_infer_request(w.data, w.len, NULL, &r));
  assert_int_equal(strlen(r.inputs[0]->name), 1024);
  sip__wire_request_clear(&r);
  sip__wbuf_free(&w);
}

static void test_request_bad_tensors(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  uint8_t data[64] = {0};
  uint64_t dims[17];
  for (int i = 0; i < 17; i++) dims[i] = 1;

  /* rank 17 (and 255); rank 16 is accepted. */
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "t", 1, SIP_DTYPE_UINT8, 17, 0, dims, 17, 1, data, 1);
  EXPECT_REQ_ERR(&w, "tensor 't' has rank 17; expected 0..16");
  sip__wbuf_free(&w);
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "t", 1, SIP_DTYPE_UINT8, 255, 0, dims, 0, 1, data, 1);
  EXPECT_REQ_ERR(&w, "has rank 255");
  sip__wbuf_free(&w);
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "t", 1, SIP_DTYPE_UINT8, 16, 0, dims, 16, 1, data, 1);
  sip__wire_request_t r;
  assert_ok(sip__decode_infer_request(w.data, w.len, NULL, &r));
  assert_int_equal(r.inputs[0]->rank, 16);
  sip__wire_request_clear(&r);
  sip__wbuf_free(&w);

  /* Negative dims: top bit set, in any position. */
  static const uint64_t negs[] = {0x8000000000000000ull, UINT64_MAX};
  for (int k = 0; k < 2; k++) {
    uint64_t d[3] = {1, 1, 1};
    d[k + 1] = negs[k];
    raw_req_head(&w, "p", 0, 0, 0, 0, 1);
    raw_tensor(&w, "neg", 3, SIP_DTYPE_UINT8, 3, 0, d, 3, 1, data, 1);
    char want[64];
    snprintf(want, sizeof want, "tensor 'neg' dim %d is negative", k + 1);
    EXPECT_REQ_ERR(&w, want, "expected >= 0");
    sip__wbuf_free(&w);
  }

  /* dtype 0 and 14 (and 255). */
  static const uint8_t bad_dt[] = {0, 14, 255};
  for (int k = 0; k < 3; k++) {
    raw_req_head(&w, "p", 0, 0, 0, 0, 1);
    raw_tensor(&w, "dt", 2, bad_dt[k], 1, 0, dims, 1, 1, data, 1);
    char want[64];
    snprintf(want, sizeof want, "tensor 'dt' has dtype %u; expected 1..13", bad_dt[k]);
    EXPECT_REQ_ERR(&w, want);
    sip__wbuf_free(&w);
  }

  /* Non-zero tensor reserved. */
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "r", 1, SIP_DTYPE_UINT8, 1, 0x100, dims, 1, 1, data, 1);
  EXPECT_REQ_ERR(&w, "tensor 'r' reserved field is 256; expected 0 or 1");
  sip__wbuf_free(&w);

  /* nbytes not dtype x dims: too few, too many, for a scalar, for empty. */
  uint64_t d23[2] = {2, 3}, d0[2] = {0, 7};
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "m", 1, SIP_DTYPE_FLOAT32, 2, 0, d23, 2, 20, data, 20);
  EXPECT_REQ_ERR(&w, "tensor 'm'", "20 data bytes do not match float32 x 6 elements",
                 "expected 24 bytes");
  sip__wbuf_free(&w);
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "m", 1, SIP_DTYPE_INT16, 2, 0, d23, 2, 13, data, 13);
  EXPECT_REQ_ERR(&w, "13 data bytes do not match int16 x 6 elements", "expected 12 bytes");
  sip__wbuf_free(&w);
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "s", 1, SIP_DTYPE_FLOAT64, 0, 0, NULL, 0, 4, data, 4);
  EXPECT_REQ_ERR(&w, "4 data bytes do not match float64 x 1 elements", "expected 8 bytes");
  sip__wbuf_free(&w);
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "e", 1, SIP_DTYPE_INT64, 2, 0, d0, 2, 8, data, 8);
  EXPECT_REQ_ERR(&w, "8 data bytes do not match int64 x 0 elements", "expected 0 bytes");
  sip__wbuf_free(&w);
  /* A shape whose element count overflows. */
  uint64_t huge[2] = {0x4000000000000000ull, 4};
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "o", 1, SIP_DTYPE_UINT8, 2, 0, huge, 2, 0, data, 0);
  EXPECT_REQ_ERR(&w, "tensor 'o'", "overflows");
  sip__wbuf_free(&w);
  /* nbytes claiming more than the payload holds. */
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "big", 3, SIP_DTYPE_UINT8, 1, 0, dims, 1, UINT64_MAX, data, 1);
  EXPECT_REQ_ERR(&w, "truncated", "tensor data");
  sip__wbuf_free(&w);

  /* Duplicate input names are well-formed framing (the engine answers them
   * with an INVALID_ARGUMENT response, keeping the connection: see
   * test_scheduler.c): the codec decodes all of them, in order. */
  uint8_t one = 1, two = 2;
  raw_req_head(&w, "p", 0, 0, 0, 0, 3);
  raw_tensor(&w, "a", 1, SIP_DTYPE_UINT8, 1, 0, dims, 1, 1, &one, 1);
  raw_tensor(&w, "b", 1, SIP_DTYPE_UINT8, 1, 0, dims, 1, 1, &one, 1);
  raw_tensor(&w, "a", 1, SIP_DTYPE_UINT8, 1, 0, dims, 1, 1, &two, 1);
  assert_ok(sip__decode_infer_request(w.data, w.len, NULL, &r));
  assert_int_equal(r.n_inputs, 3);
  assert_string_equal(r.inputs[0]->name, "a");
  assert_string_equal(r.inputs[2]->name, "a");
  assert_int_equal(((const uint8_t *)r.inputs[0]->data)[0], 1);
  assert_int_equal(((const uint8_t *)r.inputs[2]->data)[0], 2);
  sip__wire_request_clear(&r);
  sip__wbuf_free(&w);

  /* A hostile input count. */
  raw_req_head(&w, "p", 0, 0, 0, 0, 0xffff);
  raw_tensor(&w, "a", 1, SIP_DTYPE_UINT8, 1, 0, dims, 1, 1, &one, 1);
  EXPECT_REQ_ERR(&w, "truncated", "tensors");
  sip__wbuf_free(&w);
}

static void test_request_bad_strings(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  /* Element overrunning the data: claims 10 bytes, 3 remain. */
  uint8_t over[7] = {10, 0, 0, 0, 'a', 'b', 'c'};
  uint64_t d1 = 1, d3 = 3, d2 = 2;
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "s", 1, SIP_DTYPE_STRING, 1, 0, &d1, 1, 7, over, 7);
  EXPECT_REQ_ERR(&w, "tensor 's'", "string element 0 claims 10 bytes but only 3 remain");
  sip__wbuf_free(&w);
  /* A hostile length. */
  uint8_t huge[5] = {0xff, 0xff, 0xff, 0xff, 'x'};
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "s", 1, SIP_DTYPE_STRING, 1, 0, &d1, 1, 5, huge, 5);
  EXPECT_REQ_ERR(&w, "claims 4294967295 bytes but only 1 remain");
  sip__wbuf_free(&w);

  /* Count mismatch: dims say 3, data holds 2. */
  static const char *const two[] = {"ab", "c"};
  uint8_t sb[32];
  size_t sn = pack_strings(sb, two, 2);
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "s", 1, SIP_DTYPE_STRING, 1, 0, &d3, 1, sn, sb, sn);
  EXPECT_REQ_ERR(&w, "string data ends at element 2 of 3", "4-byte length prefix");
  sip__wbuf_free(&w);
  /* dims say 1, data holds 2. */
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "s", 1, SIP_DTYPE_STRING, 1, 0, &d1, 1, sn, sb, sn);
  EXPECT_REQ_ERR(&w, "5 bytes follow the last of 1 string elements", "expected exactly 6 bytes");
  sip__wbuf_free(&w);
  /* A partial length prefix. */
  uint8_t part[8] = {1, 0, 0, 0, 'z', 2, 0, 0};
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "s", 1, SIP_DTYPE_STRING, 1, 0, &d2, 1, 8, part, 8);
  EXPECT_REQ_ERR(&w, "string data ends at element 1 of 2");
  sip__wbuf_free(&w);
  /* An empty STRING tensor with stray bytes. */
  uint64_t d0 = 0;
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_tensor(&w, "s", 1, SIP_DTYPE_STRING, 1, 0, &d0, 1, 4, part, 4);
  EXPECT_REQ_ERR(&w, "4 bytes follow the last of 0 string elements");
  sip__wbuf_free(&w);
}

static void test_request_errors_free_earlier_tensors(void **state) {
  (void)state;
  /* The second tensor is bad: the first (allocated) one must be freed. */
  sip__wbuf_t w = {0};
  uint64_t d1 = 1;
  uint8_t one = 1;
  raw_req_head(&w, "p", 0, 0, 0, 1, 2);
  raw_str(&w, "out", 3);
  raw_tensor(&w, "a", 1, SIP_DTYPE_UINT8, 1, 0, &d1, 1, 1, &one, 1);
  raw_tensor(&w, "b", 1, 0, 1, 0, &d1, 1, 1, &one, 1);
  /* Through an owner as well: the owner must be released exactly once. */
  uint8_t *copy = dup_exact(w.data, w.len);
  sip_buf_t *owner = sip_buf_wrap(copy, w.len, free, copy);
  sip__wire_request_t r;
  sip_error_t *e = sip__decode_infer_request(copy, w.len, owner, &r);
  sip_buf_unref(owner); /* frees copy unless a tensor leaked a reference (LSan) */
  CHECK_ERR(e, SIP_INVALID_ARGUMENT, "tensor 'b' has dtype 0");
  assert_true(is_zeroed_request(&r));
  sip__wbuf_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_malformed),
      cmocka_unit_test(test_code_text_malformed),
      cmocka_unit_test(test_request_truncated_everywhere),
      cmocka_unit_test(test_response_truncated_everywhere),
      cmocka_unit_test(test_request_trailing_bytes),
      cmocka_unit_test(test_response_trailing_bytes),
      cmocka_unit_test(test_response_nonzero_reserved),
      cmocka_unit_test(test_request_bad_header_fields),
      cmocka_unit_test(test_request_names),
      cmocka_unit_test(test_request_bad_tensors),
      cmocka_unit_test(test_request_bad_strings),
      cmocka_unit_test(test_request_errors_free_earlier_tensors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
