/* Unit tests for the native protocol codec (src/transport/frame.c,
 * docs/protocol.md): round trips of every message and dtype, and every
 * malformed path with its code and message. Decoders always get an exactly
 * sized heap copy of the payload, so ASan catches any read past its end. */
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

/* ---- helpers ---------------------------------------------------------- */

/* An exactly sized heap copy (1 byte for an empty one, never read). */
static uint8_t *dup_exact(const uint8_t *p, size_t len) {
  uint8_t *d = malloc(len ? len : 1);
  assert_non_null(d);
  if (len) memcpy(d, p, len);
  return d;
}

/* Checks an error's code and that its message contains every string of the
 * NULL-terminated list; frees the error first so a failure does not leak. */
static void check_errv(sip_error_t *err, sip_code_t code, const char *what, va_list ap) {
  if (!err) fail_msg("%s: expected %s, got success", what, sip_code_name(code));
  char msg[4096];
  snprintf(msg, sizeof msg, "%s", sip_error_message(err));
  sip_code_t got = sip_error_code(err);
  sip_error_free(err);
  if (got != code) fail_msg("%s: code %s, want %s: %s", what, sip_code_name(got), sip_code_name(code), msg);
  for (const char *sub; (sub = va_arg(ap, const char *));)
    if (!strstr(msg, sub)) fail_msg("%s: message lacks \"%s\":\n  %s", what, sub, msg);
}

static void check_err(sip_error_t *err, sip_code_t code, const char *what, ...) {
  va_list ap;
  va_start(ap, what);
  check_errv(err, code, what, ap);
  va_end(ap);
}
#define CHECK_ERR(err, code, ...) check_err(err, code, #err, __VA_ARGS__, NULL)

static void assert_ok(sip_error_t *err) {
  if (err) {
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sip_error_message(err));
    sip_code_t c = sip_error_code(err);
    sip_error_free(err);
    fail_msg("unexpected error %s: %s", sip_code_name(c), msg);
  }
}

static int is_zeroed_request(const sip__wire_request_t *r) {
  return !r->pool && !r->priority && !r->timeout_ms && !r->outputs && !r->n_outputs &&
         !r->inputs && !r->n_inputs && !r->input_shm && !r->output_shm && !r->parameters;
}

/* Decodes a request payload (copied exactly) expecting an error. */
static void expect_req_err(const uint8_t *p, size_t len, int line, sip_code_t code, ...) {
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

static void expect_resp_err(const uint8_t *p, size_t len, sip_code_t code, ...) {
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
static size_t pack_strings(uint8_t *buf, const char *const *s, size_t n) {
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t l = (uint32_t)strlen(s[i]);
    for (int k = 0; k < 4; k++) buf[off++] = (uint8_t)(l >> (8 * k));
    memcpy(buf + off, s[i], l);
    off += l;
  }
  return off;
}

static void assert_tensor_eq(const sip_tensor_t *a, const sip_tensor_t *b) {
  assert_string_equal(a->name, b->name);
  assert_int_equal(a->dtype, b->dtype);
  assert_int_equal(a->rank, b->rank);
  for (int i = 0; i < a->rank; i++) assert_int_equal(a->dims[i], b->dims[i]);
  assert_int_equal(a->nbytes, b->nbytes);
  if (a->nbytes) assert_memory_equal(a->data, b->data, a->nbytes);
}

static void assert_aligned(const sip_tensor_t *t, const uint8_t *payload, size_t len) {
  const uint8_t *d = t->data;
  assert_true(d >= payload && d + t->nbytes <= payload + len);
  if ((size_t)(d - payload) % 8 != 0)
    fail_msg("tensor '%s' data at payload offset %zu is not 8-byte aligned", t->name,
             (size_t)(d - payload));
}

/* Decodes the header at w->data + at, checks it, returns the payload. */
static const uint8_t *frame_at(const sip__wbuf_t *w, size_t at, uint16_t type, uint64_t id,
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
static void raw_str(sip__wbuf_t *w, const char *s, size_t n) {
  sip__wbuf_u16(w, (uint16_t)n);
  sip__wbuf_put(w, s, n);
}

static void raw_req_head(sip__wbuf_t *w, const char *pool, uint8_t prio, uint32_t reserved,
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

static void raw_tensor(sip__wbuf_t *w, const char *name, size_t name_len, uint8_t dtype,
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
static void encode_sample_request(sip__wbuf_t *w, uint64_t id) {
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

/* ---- header ----------------------------------------------------------- */

static void test_header_round_trip(void **state) {
  (void)state;
  uint8_t b[HDR];
  for (uint16_t type = SIP__MSG_INFER_REQUEST; type <= SIP__MSG_ERROR; type++) {
    sip__frame_header_encode(b, type, 0xfffffffeu, 0xfedcba9876543210ull);
    assert_memory_equal(b, "SIPF", 4);
    assert_int_equal(b[4], 1);
    assert_int_equal(b[5], 0);
    assert_int_equal(b[6], type);
    assert_int_equal(b[8], 0xfe); /* little-endian */
    assert_int_equal(b[16], 0x10);
    assert_int_equal(b[23], 0xfe);
    sip__frame_header_t h;
    assert_ok(sip__frame_header_decode(b, SIZE_MAX, &h));
    assert_int_equal(h.version, 1);
    assert_int_equal(h.type, type);
    assert_int_equal(h.length, 0xfffffffeu);
    assert_int_equal(h.flags, 0);
    assert_true(h.request_id == 0xfedcba9876543210ull);
  }
  /* length exactly at the limit is accepted; zero length too */
  sip__frame_header_t h;
  sip__frame_header_encode(b, SIP__MSG_INFER_REQUEST, 1024, 1);
  assert_ok(sip__frame_header_decode(b, 1024, &h));
  sip__frame_header_encode(b, SIP__MSG_INFO_REQUEST, 0, 0);
  assert_ok(sip__frame_header_decode(b, 0, &h));
  assert_int_equal(h.length, 0);
}

/* SUBSCRIBE round trip, its limits, and EVENT's bytes. */
static void test_subscribe_and_event(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  sip__encode_subscribe(&w, 9, "image_classification", 16);
  sip__frame_header_t h;
  assert_null(sip__frame_header_decode(w.data, 1 << 20, &h));
  assert_int_equal(h.type, SIP__MSG_SUBSCRIBE);
  assert_int_equal(h.request_id, 9);
  char *pool = NULL;
  uint32_t buffer = 0;
  assert_null(sip__decode_subscribe(w.data + HDR, h.length, &pool, &buffer));
  assert_string_equal(pool, "image_classification");
  assert_int_equal(buffer, 16);
  sip__free(pool);
  /* Truncated anywhere, or with a byte too many: refused, nothing kept. */
  for (size_t n = 0; n < h.length; n++) {
    CHECK_ERR(sip__decode_subscribe(w.data + HDR, n, &pool, &buffer), SIP_INVALID_ARGUMENT,
              "SUBSCRIBE");
    assert_null(pool);
  }
  sip__wbuf_free(&w);
  sip__encode_subscribe(&w, 1, "", SIP__MAX_EVENT_BUFFER + 1);
  CHECK_ERR(sip__decode_subscribe(w.data + HDR, w.len - HDR, &pool, &buffer),
            SIP_INVALID_ARGUMENT, "buffer of 65537 events is too large", "0 (the default, 1024) to 65536");
  assert_null(pool);
  sip__wbuf_free(&w);
  sip__encode_event(&w, "{\"event\":\"ERROR\"}", 17);
  assert_null(sip__frame_header_decode(w.data, 1 << 20, &h));
  assert_int_equal(h.type, SIP__MSG_EVENT);
  assert_int_equal(h.length, 17);
  assert_memory_equal(w.data + HDR, "{\"event\":\"ERROR\"}", 17);
  sip__wbuf_free(&w);
}

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

/* ---- INFER_REQUEST round trips ---------------------------------------- */

/* Element data of n elements of dtype (numeric), deterministic. */
static size_t fill(uint8_t *buf, sip_dtype_t dt, size_t n) {
  size_t nb = n * sip_dtype_size(dt);
  for (size_t i = 0; i < nb; i++) buf[i] = (uint8_t)(i * 37 + (size_t)dt * 11 + 1);
  return nb;
}

static void request_round_trip_dtype(sip_dtype_t dt, int priority) {
  uint8_t mat[6 * 8], scalar[16], pre[3] = {9, 8, 7};
  size_t mat_n, scalar_n;
  int64_t dmat[2] = {2, 3}, dempty[2] = {0, 5}, dpre[1] = {3};
  int mat_rank = 2;
  if (dt == SIP_DTYPE_STRING) {
    static const char *const s[] = {"", "a", "h\xc3\xa9llo", "xyz", "0123456789", "q"};
    mat_n = pack_strings(mat, s, 6);
    static const char *const one[] = {"scalar!"};
    scalar_n = pack_strings(scalar, one, 1);
  } else {
    mat_n = fill(mat, dt, 6);
    scalar_n = fill(scalar, dt, 1);
  }
  sip_tensor_t *in[4] = {
      sip_tensor_new_view("pre", SIP_DTYPE_UINT8, 1, dpre, pre, 3, NULL),
      sip_tensor_new_view("m", dt, mat_rank, dmat, mat, mat_n, NULL),
      sip_tensor_new_view("s", dt, 0, NULL, scalar, scalar_n, NULL),
      sip_tensor_new_view("empty", dt, 2, dempty, NULL, 0, NULL),
  };
  for (int i = 0; i < 4; i++) {
    assert_non_null(in[i]);
    assert_ok(sip_tensor_validate(in[i]));
  }
  const char *outs[] = {"out_a", "b"};
  sip__wbuf_t w = {0};
  /* A leading frame of odd length: padding must be relative to the payload
   * start, not to the buffer. */
  sip__encode_info_request(&w, 99, SIP_INFO_STATUS);
  size_t at = w.len;
  assert_int_equal(at, HDR + 1);
  sip__encode_infer_request(&w, 0x1122334455667788ull, "det.v2-x", priority, 123456, outs, 2,
                            (const sip_tensor_t *const *)in, 4);
  size_t len;
  const uint8_t *pl = frame_at(&w, at, SIP__MSG_INFER_REQUEST, 0x1122334455667788ull, &len);
  uint8_t *copy = dup_exact(pl, len);

  /* With an owner: tensors reference the received frame. */
  sip_buf_t *owner = sip_buf_wrap(copy, len, free, copy);
  assert_non_null(owner);
  sip__wire_request_t r;
  assert_ok(sip__decode_infer_request(copy, len, owner, &r));
  sip_buf_unref(owner); /* the tensors keep the frame alive */
  assert_string_equal(r.pool, "det.v2-x");
  assert_int_equal(r.priority, priority);
  assert_int_equal(r.timeout_ms, 123456);
  assert_int_equal(r.n_outputs, 2);
  assert_string_equal(r.outputs[0], "out_a");
  assert_string_equal(r.outputs[1], "b");
  assert_int_equal(r.n_inputs, 4);
  for (int i = 0; i < 4; i++) {
    assert_tensor_eq(r.inputs[i], in[i]);
    assert_aligned(r.inputs[i], copy, len);
    assert_ptr_equal(r.inputs[i]->owner, owner);
    assert_ok(sip_tensor_validate(r.inputs[i]));
  }
  assert_int_equal(sip_tensor_count(r.inputs[2]), 1);
  assert_int_equal(sip_tensor_count(r.inputs[3]), 0);
  sip__wire_request_clear(&r); /* frees the frame (LSan checks) */
  assert_true(is_zeroed_request(&r));

  /* Without an owner: tensors borrow the payload. */
  assert_ok(sip__decode_infer_request(pl, len, NULL, &r));
  for (int i = 0; i < 4; i++) {
    assert_null(r.inputs[i]->owner);
    assert_aligned(r.inputs[i], pl, len);
  }
  sip__wire_request_clear(&r);

  for (int i = 0; i < 4; i++) sip_tensor_free(in[i]);
  sip__wbuf_free(&w);
}

static void test_request_round_trip_all_dtypes(void **state) {
  (void)state;
  for (int dt = SIP_DTYPE_FLOAT32; dt <= SIP_DTYPE_UINT64; dt++)
    request_round_trip_dtype((sip_dtype_t)dt, dt % 4);
}

static void test_request_minimal(void **state) {
  (void)state;
  /* No outputs, no inputs, empty pool name, defaults. */
  sip__wbuf_t w = {0};
  sip__encode_infer_request(&w, 0, "", 0, 0, NULL, 0, NULL, 0);
  size_t len;
  const uint8_t *pl = frame_at(&w, 0, SIP__MSG_INFER_REQUEST, 0, &len);
  assert_int_equal(len, 2 + 1 + 3 + 4 + 2 + 2);
  sip__wire_request_t r;
  assert_ok(sip__decode_infer_request(pl, len, NULL, &r));
  assert_string_equal(r.pool, "");
  assert_int_equal(r.priority, 0);
  assert_int_equal(r.timeout_ms, 0);
  assert_int_equal(r.n_outputs, 0);
  assert_null(r.outputs);
  assert_int_equal(r.n_inputs, 0);
  assert_null(r.inputs);
  sip__wire_request_clear(&r);
  sip__wbuf_free(&w);

  /* The largest field values. */
  sip__encode_infer_request(&w, UINT64_MAX, "p", 3, UINT32_MAX, NULL, 0, NULL, 0);
  pl = frame_at(&w, 0, SIP__MSG_INFER_REQUEST, UINT64_MAX, &len);
  assert_ok(sip__decode_infer_request(pl, len, NULL, &r));
  assert_int_equal(r.priority, 3);
  assert_true(r.timeout_ms == UINT32_MAX);
  sip__wire_request_clear(&r);
  sip__wbuf_free(&w);
}

static void test_request_wire_layout(void **state) {
  (void)state;
  /* Byte-exact check of one small request against docs/protocol.md. */
  uint8_t data[2] = {0xaa, 0xbb};
  int64_t d[1] = {2};
  sip_tensor_t *t = sip_tensor_new_view("in", SIP_DTYPE_UINT8, 1, d, data, 2, NULL);
  const char *outs[] = {"o"};
  sip__wbuf_t w = {0};
  sip__encode_infer_request(&w, 5, "ab", 1, 0x01020304, outs, 1, (const sip_tensor_t *const *)&t,
                            1);
  sip_tensor_free(t);
  static const uint8_t want[] = {
      2, 0, 'a', 'b',           /* pool */
      1, 0, 0, 0,               /* priority, reserved */
      4, 3, 2, 1,               /* timeout_ms */
      1, 0, 1, 0,               /* n_outputs, n_inputs */
      1, 0, 'o',                /* outputs */
      2, 0, 'i', 'n',           /* tensor name (offset 19) */
      2, 1, 0, 0,               /* dtype uint8, rank 1, reserved */
      2, 0, 0, 0, 0, 0, 0, 0,   /* dims (offset 27) */
      2, 0, 0, 0, 0, 0, 0, 0,   /* nbytes (offset 35, ends at 43) */
      0, 0, 0, 0, 0,            /* padding to 48 */
      0xaa, 0xbb,               /* data */
  };
  size_t len;
  const uint8_t *pl = frame_at(&w, 0, SIP__MSG_INFER_REQUEST, 5, &len);
  assert_int_equal(len, sizeof want);
  assert_memory_equal(pl, want, sizeof want);
  sip__wbuf_free(&w);
}

/* ---- INFER_RESPONSE / INFO / ERROR round trips ------------------------ */

static void test_response_round_trip(void **state) {
  (void)state;
  for (int dt = SIP_DTYPE_FLOAT32; dt <= SIP_DTYPE_UINT64; dt++) {
    uint8_t a[4 * 8], b[16];
    size_t an, bn;
    int64_t da[2] = {4, 1};
    if (dt == SIP_DTYPE_STRING) {
      static const char *const s[] = {"x", "", "yy", "zzz"};
      an = pack_strings(a, s, 4);
      static const char *const one[] = {""};
      bn = pack_strings(b, one, 1);
    } else {
      an = fill(a, (sip_dtype_t)dt, 4);
      bn = fill(b, (sip_dtype_t)dt, 1);
    }
    int64_t de[1] = {0};
    sip_tensor_t *o[3] = {
        sip_tensor_new_view("first", (sip_dtype_t)dt, 2, da, a, an, NULL),
        sip_tensor_new_view("scalar", (sip_dtype_t)dt, 0, NULL, b, bn, NULL),
        sip_tensor_new_view("none", (sip_dtype_t)dt, 1, de, NULL, 0, NULL),
    };
    sip__wbuf_t w = {0};
    sip__encode_info_request(&w, 1, 1); /* misalign the buffer */
    size_t at = w.len;
    sip__encode_infer_response(&w, 42, SIP_OK, NULL, 11, 22, 33, (const sip_tensor_t *const *)o,
                               3);
    size_t len;
    const uint8_t *pl = frame_at(&w, at, SIP__MSG_INFER_RESPONSE, 42, &len);
    uint8_t *copy = dup_exact(pl, len);
    sip_buf_t *owner = sip_buf_wrap(copy, len, free, copy);
    sip__wire_response_t r;
    assert_ok(sip__decode_infer_response(copy, len, owner, &r));
    sip_buf_unref(owner);
    assert_int_equal(r.code, 0);
    assert_string_equal(r.message, "");
    assert_int_equal(r.queue_us, 11);
    assert_int_equal(r.compute_us, 22);
    assert_int_equal(r.total_us, 33);
    assert_int_equal(r.n_outputs, 3);
    for (int i = 0; i < 3; i++) {
      assert_tensor_eq(r.outputs[i], o[i]);
      assert_aligned(r.outputs[i], copy, len);
    }
    sip__wire_response_clear(&r);
    for (int i = 0; i < 3; i++) sip_tensor_free(o[i]);
    sip__wbuf_free(&w);
  }

  /* An error answer: code and message, no outputs, large timings. */
  sip__wbuf_t w = {0};
  sip__encode_infer_response(&w, 7, SIP_INVALID_ARGUMENT, "input 'x': wrong dtype", UINT64_MAX,
                             0, 1ull << 40, NULL, 0);
  size_t len;
  const uint8_t *pl = frame_at(&w, 0, SIP__MSG_INFER_RESPONSE, 7, &len);
  assert_int_equal(len, 4 + 4 + strlen("input 'x': wrong dtype") + 24 + 8);
  sip__wire_response_t r;
  assert_ok(sip__decode_infer_response(pl, len, NULL, &r));
  assert_int_equal(r.code, SIP_INVALID_ARGUMENT);
  assert_string_equal(r.message, "input 'x': wrong dtype");
  assert_true(r.queue_us == UINT64_MAX);
  assert_int_equal(r.compute_us, 0);
  assert_true(r.total_us == 1ull << 40);
  assert_int_equal(r.n_outputs, 0);
  assert_null(r.outputs);
  sip__wire_response_clear(&r);
  sip__wbuf_free(&w);
}

static void test_info_and_error_round_trip(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  for (uint8_t kind = 1; kind <= 3; kind++) {
    sip__encode_info_request(&w, kind, kind);
    size_t len;
    const uint8_t *pl = frame_at(&w, 0, SIP__MSG_INFO_REQUEST, kind, &len);
    assert_int_equal(len, 1);
    assert_int_equal(pl[0], kind);
    sip__wbuf_free(&w);
  }

  const char *json = "{\"ready\": true, \"pools\": {}}";
  sip__encode_info_response(&w, 3, SIP_OK, json, strlen(json));
  size_t len;
  const uint8_t *pl = frame_at(&w, 0, SIP__MSG_INFO_RESPONSE, 3, &len);
  uint8_t *copy = dup_exact(pl, len);
  uint32_t code = 99;
  const char *text = NULL;
  size_t tl = 0;
  assert_ok(sip__decode_code_text(copy, len, 0, &code, &text, &tl));
  assert_int_equal(code, 0);
  assert_int_equal(tl, strlen(json));
  assert_memory_equal(text, json, tl);
  assert_ptr_equal(text, copy + 4); /* borrowed */
  free(copy);
  sip__wbuf_free(&w);

  /* Empty JSON text with a non-OK code. */
  sip__encode_info_response(&w, 4, SIP_UNIMPLEMENTED, NULL, 0);
  pl = frame_at(&w, 0, SIP__MSG_INFO_RESPONSE, 4, &len);
  assert_int_equal(len, 4);
  copy = dup_exact(pl, len);
  assert_ok(sip__decode_code_text(copy, len, 0, &code, &text, &tl));
  assert_int_equal(code, SIP_UNIMPLEMENTED);
  assert_int_equal(tl, 0);
  free(copy);
  sip__wbuf_free(&w);

  const char *msg = "bad frame magic 47 45 54 20";
  sip__encode_error(&w, 0, SIP_INVALID_ARGUMENT, msg);
  pl = frame_at(&w, 0, SIP__MSG_ERROR, 0, &len);
  assert_int_equal(len, 8 + strlen(msg));
  copy = dup_exact(pl, len);
  assert_ok(sip__decode_code_text(copy, len, 1, &code, &text, &tl));
  assert_int_equal(code, SIP_INVALID_ARGUMENT);
  assert_int_equal(tl, strlen(msg));
  assert_memory_equal(text, msg, tl);
  free(copy);
  sip__wbuf_free(&w);

  sip__encode_error(&w, 9, SIP_INTERNAL, NULL);
  pl = frame_at(&w, 0, SIP__MSG_ERROR, 9, &len);
  assert_int_equal(len, 8);
  assert_ok(sip__decode_code_text(pl, len, 1, &code, &text, &tl));
  assert_int_equal(code, SIP_INTERNAL);
  assert_int_equal(tl, 0);
  sip__wbuf_free(&w);
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

/* ---- INFER_REQUEST malformed ------------------------------------------ */

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

/* ---- allocation failures ---------------------------------------------- */

typedef struct release_count {
  int released;
  void *mem;
} release_count_t;

static void count_release(void *ctx) {
  release_count_t *rc = ctx;
  rc->released++;
  free(rc->mem);
}

static void test_decode_request_alloc_failures(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  encode_sample_request(&w, 1);
  size_t len = w.len - HDR;
  int succeeded = 0;
  long n;
  for (n = 0; n < 1000 && !succeeded; n++) {
    uint8_t *copy = dup_exact(w.data + HDR, len);
    release_count_t rc = {0, copy};
    sip_buf_t *owner = sip_buf_wrap(copy, len, count_release, &rc);
    assert_non_null(owner);
    sip__wire_request_t r;
    sip__alloc_fail_after(n);
    sip_error_t *e = sip__decode_infer_request(copy, len, owner, &r);
    sip__alloc_fail_after(-1);
    int zeroed = is_zeroed_request(&r);
    sip_code_t code = sip_error_code(e);
    sip_error_free(e);
    if (!e) {
      succeeded = 1;
      assert_int_equal(r.n_inputs, 3);
      assert_int_equal(r.n_outputs, 2);
      sip__wire_request_clear(&r);
    }
    sip_buf_unref(owner);
    if (e) {
      if (code != SIP_RESOURCE_EXHAUSTED)
        fail_msg("allocation %ld failing: code %s, want RESOURCE_EXHAUSTED", n, sip_code_name(code));
      assert_true(zeroed);
    }
    if (rc.released != 1) fail_msg("allocation %ld failing: frame released %d times", n, rc.released);
  }
  assert_true(succeeded);
  assert_true(n > 5); /* the hook did make allocations fail */
  sip__wbuf_free(&w);
}

static void test_decode_response_alloc_failures(void **state) {
  (void)state;
  int64_t d[1] = {2};
  int32_t v[2] = {1, 2};
  sip_tensor_t *o[2] = {sip_tensor_new_view("a", SIP_DTYPE_INT32, 1, d, v, 8, NULL),
                        sip_tensor_new_view("b", SIP_DTYPE_INT32, 1, d, v, 8, NULL)};
  sip__wbuf_t w = {0};
  sip__encode_infer_response(&w, 1, 0, "msg", 1, 2, 3, (const sip_tensor_t *const *)o, 2);
  sip_tensor_free(o[0]);
  sip_tensor_free(o[1]);
  size_t len = w.len - HDR;
  int succeeded = 0;
  for (long n = 0; n < 1000 && !succeeded; n++) {
    uint8_t *copy = dup_exact(w.data + HDR, len);
    release_count_t rc = {0, copy};
    sip_buf_t *owner = sip_buf_wrap(copy, len, count_release, &rc);
    sip__wire_response_t r;
    sip__alloc_fail_after(n);
    sip_error_t *e = sip__decode_infer_response(copy, len, owner, &r);
    sip__alloc_fail_after(-1);
    sip_code_t code = sip_error_code(e);
    sip_error_free(e);
    if (!e) {
      succeeded = 1;
      assert_int_equal(r.n_outputs, 2);
      sip__wire_response_clear(&r);
    } else {
      assert_null(r.message);
      assert_null(r.outputs);
    }
    sip_buf_unref(owner);
    if (e && code != SIP_RESOURCE_EXHAUSTED)
      fail_msg("allocation %ld failing: code %s", n, sip_code_name(code));
    assert_int_equal(rc.released, 1);
  }
  sip__wbuf_free(&w);
  assert_true(succeeded);
}

static void test_decode_malformed_under_alloc_failures(void **state) {
  (void)state;
  /* A request that is malformed late (after allocating: its second
   * tensor's bytes do not match its shape, found after the tensor is
   * built): every failure point gives an error and leaks nothing. */
  sip__wbuf_t w = {0};
  uint64_t d1 = 1, d2 = 2;
  uint8_t one = 1;
  raw_req_head(&w, "p", 0, 0, 0, 1, 2);
  raw_str(&w, "o", 1);
  raw_tensor(&w, "a", 1, SIP_DTYPE_UINT8, 1, 0, &d1, 1, 1, &one, 1);
  raw_tensor(&w, "b", 1, SIP_DTYPE_UINT8, 1, 0, &d2, 1, 1, &one, 1);
  for (long n = 0; n < 50; n++) {
    sip__wire_request_t r;
    sip__alloc_fail_after(n);
    sip_error_t *e = sip__decode_infer_request(w.data, w.len, NULL, &r);
    sip__alloc_fail_after(-1);
    assert_non_null(e);
    sip_code_t code = sip_error_code(e);
    sip_error_free(e);
    assert_true(code == SIP_RESOURCE_EXHAUSTED || code == SIP_INVALID_ARGUMENT);
    assert_true(is_zeroed_request(&r));
  }
  sip__wbuf_free(&w);
}

static void test_encode_alloc_failures(void **state) {
  (void)state;
  /* The encoder's out-of-memory flag is sticky and nothing leaks. */
  int ok = 0;
  for (long n = 0; n < 100 && !ok; n++) {
    sip__wbuf_t w = {0};
    static const float f[1] = {1};
    int64_t d[1] = {1};
    sip_tensor_t t = {.name = (char *)"x", .dtype = SIP_DTYPE_FLOAT32, .rank = 1, .data = f,
                      .nbytes = 4};
    t.dims[0] = d[0];
    const sip_tensor_t *in[1] = {&t};
    /* Large enough to need several reallocations. */
    char pool[1000];
    memset(pool, 'p', sizeof pool - 1);
    pool[sizeof pool - 1] = '\0';
    sip__alloc_fail_after(n);
    sip__encode_infer_request(&w, 1, pool, 0, 0, NULL, 0, in, 1);
    sip__encode_error(&w, 1, SIP_INTERNAL, pool);
    sip__alloc_fail_after(-1);
    if (!w.oom) {
      ok = 1;
      sip__frame_header_t h;
      assert_ok(sip__frame_header_decode(w.data, SIZE_MAX, &h));
      assert_int_equal(h.type, SIP__MSG_INFER_REQUEST);
      sip__wire_request_t r;
      assert_ok(sip__decode_infer_request(w.data + HDR, h.length, NULL, &r));
      assert_int_equal(strlen(r.pool), 999);
      sip__wire_request_clear(&r);
    } else {
      assert_true(n < 100);
    }
    sip__wbuf_free(&w);
  }
  assert_true(ok);
}

/* ---- shared memory ---------------------------------------------------- */

/* A request with an inline input, a float32 input in region "in" and a
 * STRING input in region "in", an inline output and two outputs to region
 * "out". */
static void encode_shm_request(sip__wbuf_t *w, uint64_t id) {
  static const uint8_t u8[3] = {7, 8, 9};
  int64_t d3[] = {3}, d23[] = {2, 3};
  sip_tensor_t *in[3] = {
      sip_tensor_new_view("inline", SIP_DTYPE_UINT8, 1, d3, u8, 3, NULL),
      sip_tensor_new_view("x", SIP_DTYPE_FLOAT32, 2, d23, NULL, 24, NULL),
      sip_tensor_new_view("s", SIP_DTYPE_STRING, 1, d3, NULL, 40, NULL),
  };
  sip__wire_shm_ref_t in_ref[3] = {{NULL, 0, 0}, {(char *)"in", 64, 24}, {(char *)"in", 4096, 40}};
  const char *outs[] = {"y", "z", "w"};
  sip__wire_shm_ref_t out_ref[3] = {{(char *)"out", 0, 1024}, {NULL, 0, 0}, {(char *)"out", 1024, 8}};
  sip__encode_infer_request_shm(w, id, "pool", 1, 5, outs, out_ref, 3,
                                (const sip_tensor_t *const *)in, in_ref, 3, "{}");
  for (int i = 0; i < 3; i++) sip_tensor_free(in[i]);
  assert_false(w->oom);
}

static void test_shm_request_round_trip(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  encode_shm_request(&w, 42);
  size_t len;
  const uint8_t *p = frame_at(&w, 0, SIP__MSG_INFER_REQUEST, 42, &len);
  uint8_t *copy = dup_exact(p, len);
  sip__wire_request_t r;
  assert_ok(sip__decode_infer_request(copy, len, NULL, &r));
  assert_string_equal(r.pool, "pool");
  assert_string_equal(r.parameters, "{}");
  assert_int_equal(r.n_inputs, 3);
  assert_non_null(r.input_shm);
  assert_null(r.input_shm[0].region);
  assert_aligned(r.inputs[0], copy, len);
  assert_memory_equal(r.inputs[0]->data, "\x07\x08\x09", 3);
  assert_string_equal(r.input_shm[1].region, "in");
  assert_int_equal(r.input_shm[1].offset, 64);
  assert_int_equal(r.input_shm[1].size, 24);
  assert_string_equal(r.inputs[1]->name, "x");
  assert_int_equal(r.inputs[1]->rank, 2);
  assert_int_equal(r.inputs[1]->dims[1], 3);
  assert_null(r.inputs[1]->data); /* the transport points it at the region */
  assert_int_equal(r.inputs[1]->nbytes, 24);
  assert_string_equal(r.input_shm[2].region, "in");
  assert_int_equal(r.input_shm[2].offset, 4096);
  assert_int_equal(r.inputs[2]->nbytes, 40);
  assert_int_equal(r.n_outputs, 3);
  assert_non_null(r.output_shm);
  assert_string_equal(r.outputs[0], "y");
  assert_string_equal(r.output_shm[0].region, "out");
  assert_int_equal(r.output_shm[0].size, 1024);
  assert_null(r.output_shm[1].region);
  assert_string_equal(r.outputs[2], "w");
  assert_int_equal(r.output_shm[2].offset, 1024);
  assert_int_equal(r.output_shm[2].size, 8);
  sip__wire_request_clear(&r);
  free(copy);
  sip__wbuf_free(&w);

  /* Without shared memory nothing changes on the wire or in the decode. */
  int64_t d1[] = {1};
  float f = 1;
  sip_tensor_t *t = sip_tensor_new_view("a", SIP_DTYPE_FLOAT32, 1, d1, &f, 4, NULL);
  sip__wbuf_t a = {0}, b = {0};
  const char *o[] = {"y"};
  sip__encode_infer_request(&a, 1, "p", 0, 0, o, 1, (const sip_tensor_t *const *)&t, 1);
  sip__encode_infer_request_shm(&b, 1, "p", 0, 0, o, NULL, 1, (const sip_tensor_t *const *)&t,
                                NULL, 1, NULL);
  assert_int_equal(a.len, b.len);
  assert_memory_equal(a.data, b.data, a.len);
  assert_ok(sip__decode_infer_request(a.data + HDR, a.len - HDR, NULL, &r));
  assert_null(r.input_shm);
  assert_null(r.output_shm);
  sip__wire_request_clear(&r);
  sip__wbuf_free(&a);
  sip__wbuf_free(&b);
  sip_tensor_free(t);
}

static void test_shm_response_round_trip(void **state) {
  (void)state;
  int64_t d[] = {2, 2};
  int32_t v[4] = {1, 2, 3, 4};
  sip_tensor_t *o[2] = {sip_tensor_new_view("inline", SIP_DTYPE_INT32, 2, d, v, 16, NULL),
                        sip_tensor_new_view("shm", SIP_DTYPE_INT32, 2, d, v, 16, NULL)};
  sip__wire_shm_ref_t refs[2] = {{NULL, 0, 0}, {(char *)"out", 128, 16}};
  sip__wbuf_t w = {0};
  sip__encode_infer_response_shm(&w, 9, 0, "", 1, 2, 3, (const sip_tensor_t *const *)o, refs, 2, 0);
  sip_tensor_free(o[0]);
  sip_tensor_free(o[1]);
  size_t len;
  const uint8_t *p = frame_at(&w, 0, SIP__MSG_INFER_RESPONSE, 9, &len);
  /* The shared memory output carries no data: the inline one's 16 bytes
   * plus headers only. */
  assert_true(len < 40 + 2 * 64);
  sip__wire_response_t r;
  assert_ok(sip__decode_infer_response(p, len, NULL, &r));
  assert_int_equal(r.n_outputs, 2);
  assert_non_null(r.output_shm);
  assert_null(r.output_shm[0].region);
  assert_memory_equal(r.outputs[0]->data, v, 16);
  assert_string_equal(r.output_shm[1].region, "out");
  assert_int_equal(r.output_shm[1].offset, 128);
  assert_int_equal(r.output_shm[1].size, 16);
  assert_null(r.outputs[1]->data);
  assert_int_equal(r.outputs[1]->dims[0], 2);
  sip__wire_response_clear(&r);
  sip__wbuf_free(&w);
}

static void test_shm_request_truncated_everywhere(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  encode_shm_request(&w, 1);
  size_t len = w.len - HDR;
  for (size_t n = 0; n < len; n++)
    expect_req_err(w.data + HDR, n, __LINE__, SIP_INVALID_ARGUMENT, "INFER_REQUEST", NULL);
  /* One trailing byte too many. */
  uint8_t *more = malloc(len + 1);
  memcpy(more, w.data + HDR, len);
  more[len] = 0;
  expect_req_err(more, len + 1, __LINE__, SIP_INVALID_ARGUMENT, "unexpected bytes", NULL);
  free(more);
  sip__wbuf_free(&w);
}

/* Writes a shared memory tensor by hand. */
static void raw_shm_tensor(sip__wbuf_t *w, const char *name, uint8_t dtype, uint8_t rank,
                           const uint64_t *dims, const char *region, uint64_t offset,
                           uint64_t nbytes) {
  raw_str(w, name, strlen(name));
  sip__wbuf_u8(w, dtype);
  sip__wbuf_u8(w, rank);
  sip__wbuf_u16(w, SIP__TENSOR_SHM);
  for (int i = 0; i < rank; i++) sip__wbuf_u64(w, dims[i]);
  raw_str(w, region, strlen(region));
  sip__wbuf_u64(w, offset);
  sip__wbuf_u64(w, nbytes);
}

static void test_shm_request_malformed(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  uint64_t d4 = 4, big[2] = {1ull << 40, 1ull << 40};

  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_shm_tensor(&w, "x", SIP_DTYPE_FLOAT32, 1, &d4, "", 0, 16);
  EXPECT_REQ_ERR(&w, "tensor 'x'", "names no region");
  sip__wbuf_free(&w);

  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_shm_tensor(&w, "x", SIP_DTYPE_FLOAT32, 1, &d4, "r", 0, 15);
  EXPECT_REQ_ERR(&w, "tensor 'x'", "15");
  sip__wbuf_free(&w);

  /* dims whose byte count overflows */
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_shm_tensor(&w, "x", SIP_DTYPE_FLOAT32, 2, big, "r", 0, 16);
  EXPECT_REQ_ERR(&w, "tensor 'x'");
  sip__wbuf_free(&w);

  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_shm_tensor(&w, "x", SIP_DTYPE_UINT8, 1, &d4, "r", 0, UINT64_MAX);
  EXPECT_REQ_ERR(&w, "tensor 'x'", "larger than this machine can address");
  sip__wbuf_free(&w);

  /* A region name with a NUL byte. */
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_str(&w, "x", 1);
  sip__wbuf_u8(&w, SIP_DTYPE_UINT8);
  sip__wbuf_u8(&w, 0);
  sip__wbuf_u16(&w, SIP__TENSOR_SHM);
  raw_str(&w, "r\0s", 3);
  sip__wbuf_u64(&w, 0);
  sip__wbuf_u64(&w, 1);
  EXPECT_REQ_ERR(&w, "NUL");
  sip__wbuf_free(&w);

  /* An inline output destination with an offset or size. */
  raw_req_head(&w, "p", 0, SIP__REQ_OUTPUT_SHM, 0, 1, 0);
  raw_str(&w, "y", 1);
  raw_str(&w, "", 0);
  sip__wbuf_u64(&w, 8);
  sip__wbuf_u64(&w, 0);
  EXPECT_REQ_ERR(&w, "output 'y' has no destination region", "expected 0 and 0");
  sip__wbuf_free(&w);

  /* Reserved tensor bits other than bit 0. */
  raw_req_head(&w, "p", 0, 0, 0, 0, 1);
  raw_str(&w, "x", 1);
  sip__wbuf_u8(&w, SIP_DTYPE_UINT8);
  sip__wbuf_u8(&w, 0);
  sip__wbuf_u16(&w, 2);
  EXPECT_REQ_ERR(&w, "reserved field is 2", "expected 0 or 1");
  sip__wbuf_free(&w);
}

static void test_shm_messages(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  sip__encode_shm_register(&w, 5, "region", 4096, 1 << 20);
  size_t len;
  const uint8_t *p = frame_at(&w, 0, SIP__MSG_SHM_REGISTER, 5, &len);
  assert_int_equal(len, 2 + 6 + 16);
  char *name;
  uint64_t off, size;
  assert_ok(sip__decode_shm_register(p, len, &name, &off, &size));
  assert_string_equal(name, "region");
  assert_int_equal(off, 4096);
  assert_int_equal(size, 1 << 20);
  sip__free(name);
  for (size_t n = 0; n < len; n++) {
    uint8_t *c = dup_exact(p, n);
    CHECK_ERR(sip__decode_shm_register(c, n, &name, &off, &size), SIP_INVALID_ARGUMENT,
              "SHM_REGISTER truncated");
    assert_null(name);
    free(c);
  }
  uint8_t *more = malloc(len + 1);
  memcpy(more, p, len);
  more[len] = 1;
  CHECK_ERR(sip__decode_shm_register(more, len + 1, &name, &off, &size), SIP_INVALID_ARGUMENT,
            "SHM_REGISTER has 1 unexpected bytes");
  free(more);
  sip__wbuf_free(&w);

  static const uint16_t types[] = {SIP__MSG_SHM_UNREGISTER, SIP__MSG_SHM_STATUS};
  for (int t = 0; t < 2; t++) {
    sip__encode_shm_name(&w, types[t], 6, t ? "" : "abc");
    p = frame_at(&w, 0, types[t], 6, &len);
    assert_ok(sip__decode_shm_name(p, len, types[t], &name));
    assert_string_equal(name, t ? "" : "abc");
    sip__free(name);
    uint8_t *c = dup_exact(p, len - 1);
    CHECK_ERR(sip__decode_shm_name(c, len - 1, types[t], &name), SIP_INVALID_ARGUMENT,
              t ? "SHM_STATUS" : "SHM_UNREGISTER", "truncated");
    free(c);
    sip__wbuf_free(&w);
  }
}

static void test_shm_decode_alloc_failures(void **state) {
  (void)state;
  sip__wbuf_t w = {0};
  encode_shm_request(&w, 1);
  int succeeded = 0;
  long n;
  for (n = 0; n < 1000 && !succeeded; n++) {
    sip__wire_request_t r;
    sip__alloc_fail_after(n);
    sip_error_t *e = sip__decode_infer_request(w.data + HDR, w.len - HDR, NULL, &r);
    sip__alloc_fail_after(-1);
    if (!e) {
      succeeded = 1;
      sip__wire_request_clear(&r);
      continue;
    }
    sip_code_t code = sip_error_code(e);
    sip_error_free(e);
    assert_int_equal(code, SIP_RESOURCE_EXHAUSTED);
    assert_true(is_zeroed_request(&r));
  }
  assert_true(succeeded);
  assert_true(n > 10);
  sip__wbuf_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_round_trip),
      cmocka_unit_test(test_header_malformed),
      cmocka_unit_test(test_subscribe_and_event),
      cmocka_unit_test(test_request_round_trip_all_dtypes),
      cmocka_unit_test(test_request_minimal),
      cmocka_unit_test(test_request_wire_layout),
      cmocka_unit_test(test_response_round_trip),
      cmocka_unit_test(test_info_and_error_round_trip),
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
      cmocka_unit_test(test_decode_request_alloc_failures),
      cmocka_unit_test(test_decode_response_alloc_failures),
      cmocka_unit_test(test_decode_malformed_under_alloc_failures),
      cmocka_unit_test(test_encode_alloc_failures),
      cmocka_unit_test(test_shm_request_round_trip),
      cmocka_unit_test(test_shm_response_round_trip),
      cmocka_unit_test(test_shm_request_truncated_everywhere),
      cmocka_unit_test(test_shm_request_malformed),
      cmocka_unit_test(test_shm_messages),
      cmocka_unit_test(test_shm_decode_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
