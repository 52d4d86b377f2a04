/* Unit tests for the native protocol codec's shared memory parts
 * (src/transport/frame.c, docs/protocol.md): requests and responses whose
 * tensors live in registered regions, their malformed forms, the
 * SHM_REGISTER / SHM_UNREGISTER / SHM_STATUS messages, and allocation
 * failures while decoding them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frame_helpers.h"

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
      cmocka_unit_test(test_shm_request_round_trip),
      cmocka_unit_test(test_shm_response_round_trip),
      cmocka_unit_test(test_shm_request_truncated_everywhere),
      cmocka_unit_test(test_shm_request_malformed),
      cmocka_unit_test(test_shm_messages),
      cmocka_unit_test(test_shm_decode_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
