/* Unit tests for the native protocol codec (src/transport/frame.c,
 * docs/protocol.md): round trips of the header, SUBSCRIBE and EVENT, and
 * INFER_REQUEST, INFER_RESPONSE, INFO and ERROR with every dtype, and the
 * request's bytes on the wire. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frame_helpers.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_round_trip),
      cmocka_unit_test(test_subscribe_and_event),
      cmocka_unit_test(test_request_round_trip_all_dtypes),
      cmocka_unit_test(test_request_minimal),
      cmocka_unit_test(test_request_wire_layout),
      cmocka_unit_test(test_response_round_trip),
      cmocka_unit_test(test_info_and_error_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
