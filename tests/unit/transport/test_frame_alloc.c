/* Unit tests for the native protocol codec (src/transport/frame.c): every
 * allocation of a decode or an encode fails in turn, and each gives
 * RESOURCE_EXHAUSTED (or the input's own error), releases the received
 * frame once and leaks nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frame_helpers.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_request_alloc_failures),
      cmocka_unit_test(test_decode_response_alloc_failures),
      cmocka_unit_test(test_decode_malformed_under_alloc_failures),
      cmocka_unit_test(test_encode_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
