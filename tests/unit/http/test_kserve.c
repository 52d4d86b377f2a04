/* Unit tests for src/http/kserve_decode.c and kserve_encode.c: KServe v2
 * bodies <-> engine requests and responses, the binary tensor extension,
 * classification, half floats. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/core.h"
#include "http/http.h"
#include "session/engine.h"

static sip__ks_request_t *decode_ok(const char *body, int64_t hl) {
  sip__ks_request_t *k = NULL;
  sip_error_t *e = sip__ks_decode("m", NULL, (const uint8_t *)body, strlen(body), hl, NULL, NULL,
                                  0, &k);
  if (e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("unexpected error: %s\n--- body:\n%s", msg, body);
  }
  return k;
}

/* Decodes `body` expecting `code` and a message containing `want`. */
static void decode_err(const char *body, size_t len, int64_t hl, sip_code_t code, const char *want) {
  sip__ks_request_t *k = (sip__ks_request_t *)1;
  sip_error_t *e = sip__ks_decode("m", NULL, (const uint8_t *)body, len, hl, NULL, NULL, 0, &k);
  if (!e) fail_msg("expected an error for: %.*s", (int)len, body);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t got = sip_error_code(e);
  sip_error_free(e);
  assert_null(k);
  if (got != code) fail_msg("code %s, want %s: %s", sip_code_name(got), sip_code_name(code), msg);
  if (!strstr(msg, want)) fail_msg("message lacks \"%s\": %s", want, msg);
}
#define DECODE_ERR(body, want) decode_err(body, strlen(body), -1, SIP_INVALID_ARGUMENT, want)
#define DECODE_ERR_CODE(body, code, want) decode_err(body, strlen(body), -1, code, want)

static void test_datatypes(void **state) {
  (void)state;
  static const char *const names[] = {"BOOL",  "UINT8", "UINT16", "UINT32", "UINT64",
                                      "INT8",  "INT16", "INT32",  "INT64",  "FP16",
                                      "FP32",  "FP64",  "BYTES"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    sip_dtype_t dt = sip__ks_dtype(names[i]);
    assert_int_not_equal(dt, SIP_DTYPE_INVALID);
    assert_string_equal(sip__ks_datatype(dt), names[i]);
  }
  assert_int_equal(sip__ks_dtype("fp32"), SIP_DTYPE_INVALID);
  assert_int_equal(sip__ks_dtype("BF16"), SIP_DTYPE_INVALID);
  assert_int_equal(sip__ks_dtype(NULL), SIP_DTYPE_INVALID);
  assert_null(sip__ks_datatype(SIP_DTYPE_INVALID));
  assert_int_equal(sip__ks_dtype("BYTES"), SIP_DTYPE_STRING);
  assert_int_equal(sip__ks_dtype("FP16"), SIP_DTYPE_FLOAT16);
}

static void test_half(void **state) {
  (void)state;
  static const struct {
    double d;
    uint16_t h;
  } cases[] = {
      {0.0, 0x0000},     {-0.0, 0x8000},      {1.0, 0x3c00},     {-2.0, 0xc000},
      {0.1, 0x2e66},     {65504.0, 0x7bff},   {65519.0, 0x7bff}, {65520.0, 0x7c00},
      {1e9, 0x7c00},     {-1e9, 0xfc00},      {5.960464477539063e-08, 0x0001},
      {2.98e-08, 0x0000}, {2.99e-08, 0x0001}, {6.097555160522461e-05, 0x03ff},
      {6.103515625e-05, 0x0400}, {2049.0, 0x6800}, {2051.0, 0x6802}, {1e-30, 0x0000},
      {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint16_t got = sip__f64_to_f16(cases[i].d);
    if (got != cases[i].h) fail_msg("%.17g -> 0x%04x, want 0x%04x", cases[i].d, got, cases[i].h);
  }
  assert_true((sip__f64_to_f16(NAN) & 0x7c00) == 0x7c00 && (sip__f64_to_f16(NAN) & 0x3ff));
  assert_true(isnan(sip__f16_to_f64(0x7e00)));
  assert_true(isinf(sip__f16_to_f64(0xfc00)) && sip__f16_to_f64(0xfc00) < 0);
  /* Every half survives half -> double -> half. */
  for (uint32_t h = 0; h < 65536; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
    uint16_t back = sip__f64_to_f16(sip__f16_to_f64((uint16_t)h));
    if (back != h) fail_msg("0x%04x -> %g -> 0x%04x", h, sip__f16_to_f64((uint16_t)h), back);
  }
}

static void test_depth(void **state) {
  (void)state;
  char deep[300];
  memset(deep, '[', 100);
  memset(deep + 100, ']', 100);
  assert_false(sip__ks_depth_ok((const uint8_t *)deep, 200, 64));
  assert_true(sip__ks_depth_ok((const uint8_t *)deep, 200, 100));
  /* Brackets inside strings (and escaped quotes) do not count. */
  const char *s = "{\"a\": \"[[[[[[\\\"[[[[\"}";
  assert_true(sip__ks_depth_ok((const uint8_t *)s, strlen(s), 1));
}

static void test_decode_json(void **state) {
  (void)state;
  sip__ks_request_t *k = decode_ok(
      "{\"id\": \"r1\", \"parameters\": {\"priority\": 2, \"timeout\": 1001, "
      "\"binary_data_output\": true, \"sequence_id\": 7},"
      " \"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [2, 2],"
      "   \"data\": [[1, 2.5], [-3, \"NaN\"]]},"
      "  {\"name\": \"b\", \"datatype\": \"BYTES\", \"shape\": [3], \"data\": [\"x\", \"\", \"h\\u00e9\"]},"
      "  {\"name\": \"c\", \"datatype\": \"BOOL\", \"shape\": [], \"data\": [true]},"
      "  {\"name\": \"d\", \"datatype\": \"FP16\", \"shape\": [2], \"data\": [1, -2]},"
      "  {\"name\": \"e\", \"datatype\": \"UINT16\", \"shape\": [0, 3], \"data\": []},"
      "  {\"name\": \"f\", \"datatype\": \"INT64\", \"shape\": [2], \"data\": [-9223372036854775808, 9223372036854775807]}],"
      " \"outputs\": [{\"name\": \"y\", \"parameters\": {\"binary_data\": false, \"classification\": 3}},"
      "  {\"name\": \"z\"}]}",
      -1);
  sip_request_t *r = k->req;
  assert_string_equal(k->id, "r1");
  assert_int_equal(k->binary_output, 1);
  assert_int_equal(r->priority, 2);
  assert_int_equal(r->timeout_ms, 2); /* 1001 us rounds up */
  assert_string_equal(r->pool, "m");
  assert_int_equal(r->n_inputs, 6);
  const sip_tensor_t *a = r->inputs[0];
  assert_int_equal(a->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(a->rank, 2);
  const float *fa = a->data;
  assert_true(fa[0] == 1 && fa[1] == 2.5f && fa[2] == -3 && isnan(fa[3]));
  const sip_tensor_t *b = r->inputs[1];
  assert_int_equal(b->nbytes, 4 + 1 + 4 + 0 + 4 + 3);
  assert_memory_equal(b->data, "\1\0\0\0x\0\0\0\0\3\0\0\0h\xc3\xa9", b->nbytes);
  assert_int_equal(r->inputs[2]->rank, 0);
  assert_int_equal(*(const uint8_t *)r->inputs[2]->data, 1);
  const uint16_t *h = r->inputs[3]->data;
  assert_int_equal(h[0], 0x3c00);
  assert_int_equal(h[1], 0xc000);
  assert_int_equal(r->inputs[4]->nbytes, 0);
  const int64_t *i64 = r->inputs[5]->data;
  assert_true(i64[0] == INT64_MIN && i64[1] == INT64_MAX);
  assert_int_equal(k->n_outputs, 2);
  assert_string_equal(k->outputs[0].name, "y");
  assert_int_equal(k->outputs[0].binary, 0);
  assert_int_equal(k->outputs[0].classification, 3);
  assert_int_equal(k->outputs[1].binary, -1);
  assert_int_equal(r->n_outputs, 2);
  sip__ks_request_free(k);

  /* Priorities past 3 are the lowest; 0 is the pool's default. */
  k = decode_ok("{\"parameters\": {\"priority\": 100, \"timeout\": 0}, \"inputs\": []}", -1);
  assert_int_equal(k->req->priority, 3);
  assert_int_equal(k->req->timeout_ms, 0);
  assert_null(k->id);
  sip__ks_request_free(k);
  k = decode_ok("{\"parameters\": {\"timeout\": 1000}, \"inputs\": []}", -1);
  assert_int_equal(k->req->timeout_ms, 1);
  sip__ks_request_free(k);
}

static void test_decode_binary(void **state) {
  (void)state;
  const char *head =
      "{\"inputs\":[{\"name\":\"a\",\"datatype\":\"INT32\",\"shape\":[2],"
      "\"parameters\":{\"binary_data_size\":8}},"
      "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],\"parameters\":{\"binary_data_size\":10}},"
      "{\"name\":\"j\",\"datatype\":\"INT8\",\"shape\":[1],\"data\":[-1]}]}";
  size_t hl = strlen(head), pad = (64 - hl % 64) % 64;
  /* Lay the body out as the front-end does: binary section 64-byte aligned. */
  uint8_t *mem = sip__malloc(pad + hl + 18);
  uint8_t *body = mem + pad;
  memcpy(body, head, hl);
  int32_t ints[2] = {7, -8};
  memcpy(body + hl, ints, 8);
  memcpy(body + hl + 8, "\1\0\0\0a\1\0\0\0b", 10);
  sip_buf_t *owner = sip_buf_wrap(mem, pad + hl + 18, sip__free, mem);
  sip__ks_request_t *k = NULL;
  sip_error_t *e = sip__ks_decode("m", "3", body, hl + 18, (int64_t)hl, owner, NULL, 0, &k);
  assert_null(e);
  sip_buf_unref(owner); /* the tensors keep the body alive */
  assert_string_equal(k->req->version, "3");
  const sip_tensor_t *a = k->req->inputs[0];
  assert_ptr_equal(a->data, body + hl); /* aligned: a view, no copy */
  assert_memory_equal(a->data, ints, 8);
  assert_int_equal(k->req->inputs[1]->nbytes, 10);
  assert_int_equal(*(const int8_t *)k->req->inputs[2]->data, -1);
  sip__ks_request_free(k);

  /* Misaligned binary data is copied. */
  char buf[256];
  const char *h2 = "{\"inputs\":[{\"name\":\"a\",\"datatype\":\"INT32\",\"shape\":[1],"
                   "\"parameters\":{\"binary_data_size\":4}}]}";
  size_t l2 = strlen(h2);
  memcpy(buf + 1, h2, l2);
  memcpy(buf + 1 + l2, ints, 4);
  mem = sip__malloc(l2 + 5);
  memcpy(mem, buf + 1, l2 + 4);
  owner = sip_buf_wrap(mem, l2 + 4, sip__free, mem);
  e = sip__ks_decode("m", NULL, mem, l2 + 4, (int64_t)l2, owner, NULL, 0, &k);
  assert_null(e);
  if ((uintptr_t)(mem + l2) % 8) assert_ptr_not_equal(k->req->inputs[0]->data, mem + l2);
  assert_memory_equal(k->req->inputs[0]->data, ints, 4);
  sip__ks_request_free(k);
  sip_buf_unref(owner);

  /* Framing errors. */
  memcpy(buf, h2, l2);
  decode_err(buf, l2 + 2, (int64_t)l2, SIP_INVALID_ARGUMENT, "only 2 bytes");
  memcpy(buf + l2, "\0\0\0\0\0", 5);
  decode_err(buf, l2 + 5, (int64_t)l2, SIP_INVALID_ARGUMENT, "1 bytes of binary data follow");
  decode_err(buf, l2, (int64_t)l2 + 1, SIP_INVALID_ARGUMENT, "has only");
  decode_err(h2, l2, -1, SIP_INVALID_ARGUMENT, "no binary section");
  const char *h3 = "{\"inputs\":[{\"name\":\"a\",\"datatype\":\"INT32\",\"shape\":[2],"
                   "\"parameters\":{\"binary_data_size\":4}}]}";
  memcpy(buf, h3, strlen(h3));
  decode_err(buf, strlen(h3) + 4, (int64_t)strlen(h3), SIP_INVALID_ARGUMENT, "need 8 bytes");
  const char *h4 = "{\"inputs\":[{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],"
                   "\"parameters\":{\"binary_data_size\":5}}]}";
  memcpy(buf, h4, strlen(h4));
  memcpy(buf + strlen(h4), "\1\0\0\0a", 5);
  decode_err(buf, strlen(h4) + 5, (int64_t)strlen(h4), SIP_INVALID_ARGUMENT, "string data ends");
}

static void test_decode_raw(void **state) {
  (void)state;
  sip_io_desc_t in = {.name = "x", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 4}};
  float v[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  sip__ks_request_t *k = NULL;
  sip_error_t *e = sip__ks_decode("m", NULL, (const uint8_t *)v, sizeof v, 0, NULL, &in, 1, &k);
  assert_null(e);
  assert_int_equal(k->binary_output, 1);
  assert_int_equal(k->req->inputs[0]->dims[0], 2);
  assert_int_equal(k->req->inputs[0]->dims[1], 4);
  sip__ks_request_free(k);
  e = sip__ks_decode("m", NULL, (const uint8_t *)v, 12, 0, NULL, &in, 1, &k);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "do not fill"));
  sip_error_free(e);
  e = sip__ks_decode("m", NULL, (const uint8_t *)v, 6, 0, NULL, &in, 1, &k);
  assert_non_null(strstr(sip_error_message(e), "whole number"));
  sip_error_free(e);
  sip_io_desc_t two[2] = {in, in};
  e = sip__ks_decode("m", NULL, (const uint8_t *)v, 16, 0, NULL, two, 2, &k);
  assert_non_null(strstr(sip_error_message(e), "has 2 inputs"));
  sip_error_free(e);
  sip_io_desc_t dyn = {.name = "x", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, -1}};
  e = sip__ks_decode("m", NULL, (const uint8_t *)v, 16, 0, NULL, &dyn, 1, &k);
  assert_non_null(strstr(sip_error_message(e), "more than one dynamic dim"));
  sip_error_free(e);
  sip_io_desc_t str = {.name = "s", .dtype = SIP_DTYPE_STRING, .rank = 1, .dims = {-1}};
  e = sip__ks_decode("m", NULL, (const uint8_t *)"\2\0\0\0ab\0\0\0\0", 10, 0, NULL, &str, 1, &k);
  assert_null(e);
  assert_int_equal(k->req->inputs[0]->dims[0], 2);
  sip__ks_request_free(k);
  sip_io_desc_t unknown = {.name = "u", .dtype = SIP_DTYPE_UINT8, .rank = -1};
  e = sip__ks_decode("m", NULL, (const uint8_t *)"abc", 3, 0, NULL, &unknown, 1, &k);
  assert_null(e);
  assert_int_equal(k->req->inputs[0]->rank, 1);
  assert_int_equal(k->req->inputs[0]->dims[0], 3);
  sip__ks_request_free(k);
}

static void test_decode_errors(void **state) {
  (void)state;
  DECODE_ERR("", "malformed");
  DECODE_ERR("{\"inputs\": [", "malformed");
  DECODE_ERR("[]", "not an object");
  DECODE_ERR("{\"inputs\": [], \"inputs\": []}", "malformed"); /* duplicate keys */
  DECODE_ERR("{}", "inputs is missing");
  DECODE_ERR("{\"inputs\": {}}", "inputs is not an array");
  DECODE_ERR("{\"id\": 5, \"inputs\": []}", "id is not a string");
  DECODE_ERR("{\"parameters\": [], \"inputs\": []}", "parameters is not an object");
  DECODE_ERR("{\"parameters\": {\"priority\": -1}, \"inputs\": []}", "priority");
  DECODE_ERR("{\"parameters\": {\"timeout\": 1.5}, \"inputs\": []}", "timeout");
  DECODE_ERR("{\"parameters\": {\"binary_data_output\": 1}, \"inputs\": []}", "binary_data_output");
  DECODE_ERR("{\"inputs\": [1]}", "inputs[0] is not an object");
  DECODE_ERR("{\"inputs\": [{}]}", "inputs[0].name is missing");
  DECODE_ERR("{\"inputs\": [{\"name\": \"\"}]}", "1..1024 bytes");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\\u0000b\"}]}", "with a NUL");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\"}]}", "datatype is missing");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"X\"}]}", "'X' is unknown");
  DECODE_ERR_CODE("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"BF16\"}]}",
                  SIP_UNIMPLEMENTED, "BF16");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\"}]}", "shape is missing");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [-1]}]}",
             "shape[0] is not an integer >= 0");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": "
             "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}",
             "at most 16");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": "
             "[65536, 65536], \"data\": []}]}",
             "more than the request's data holds");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1]}]}",
             "neither data nor");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [2], \"data\": [1]}]}",
             "data has 1 elements; its shape needs 2");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [1, 2]}]}",
             "data has 2 elements");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [null]}]}",
             "is null");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [\"x\"]}]}",
             "is a string; expected a number");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"INT32\", \"shape\": [1], \"data\": [1.5]}]}",
             "non-integer number; expected an integer");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"UINT8\", \"shape\": [1], \"data\": [256]}]}",
             "(256) is out of range for UINT8");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"INT16\", \"shape\": [1], \"data\": [-32769]}]}",
             "out of range for INT16");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"UINT64\", \"shape\": [1], \"data\": [-1]}]}",
             "out of range");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"BOOL\", \"shape\": [1], \"data\": [1]}]}",
             "expected true or false");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"BYTES\", \"shape\": [1], \"data\": [1]}]}",
             "expected a string");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [1],"
             " \"parameters\": {\"binary_data_size\": 4}}]}",
             "both data and binary_data_size");
  DECODE_ERR_CODE("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1], "
                  "\"data\": [1], \"parameters\": {\"shared_memory_region\": \"r\"}}]}",
                  SIP_UNIMPLEMENTED, "shared memory");
  DECODE_ERR("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [1]},"
             " {\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [1]}]}",
             "given twice");
  DECODE_ERR("{\"inputs\": [], \"outputs\": {}}", "outputs is not an array");
  DECODE_ERR("{\"inputs\": [], \"outputs\": [{\"name\": \"y\"}, {\"name\": \"y\"}]}", "listed twice");
  DECODE_ERR("{\"inputs\": [], \"outputs\": [{\"name\": \"y\", \"parameters\": "
             "{\"binary_data\": \"yes\"}}]}",
             "binary_data is not a boolean");
  DECODE_ERR("{\"inputs\": [], \"outputs\": [{\"name\": \"y\", \"parameters\": "
             "{\"classification\": -2}}]}",
             "classification");
  char deep[400];
  snprintf(deep, sizeof deep, "{\"inputs\": %.*s%.*s}", 70,
           "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", 70,
           "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
  DECODE_ERR(deep, "deeper than 64");
}

/* Encodes `outs` for a request decoded from `req_json`. */
static char *encode_json(const char *req_json, sip_tensor_t **outs, size_t n, sip__ks_body_t *b) {
  sip__ks_request_t *k = decode_ok(req_json, -1);
  sip_error_t *e = sip__ks_encode(k, "m", "2", (const sip_tensor_t *const *)outs, n, b);
  sip__ks_request_free(k);
  if (e) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("encode failed: %s", msg);
  }
  return b->json;
}

static void test_encode(void **state) {
  (void)state;
  int64_t d2[2] = {2, 2}, d1[1] = {3};
  float f[4] = {1.5f, -0.0f, NAN, -INFINITY};
  uint64_t u[3] = {0, 1, UINT64_MAX};
  int8_t i8[3] = {-128, 0, 127};
  uint8_t bo[3] = {1, 0, 1};
  uint16_t h[3] = {0x3c00, 0x2e66, 0x7c00};
  double dd[3] = {0.1, 1e300, -2};
  sip_tensor_t *outs[] = {
      sip_tensor_new_copy("f", SIP_DTYPE_FLOAT32, 2, d2, f, sizeof f),
      sip_tensor_new_copy("u", SIP_DTYPE_UINT64, 1, d1, u, sizeof u),
      sip_tensor_new_copy("i", SIP_DTYPE_INT8, 1, d1, i8, sizeof i8),
      sip_tensor_new_copy("b", SIP_DTYPE_BOOL, 1, d1, bo, sizeof bo),
      sip_tensor_new_copy("h", SIP_DTYPE_FLOAT16, 1, d1, h, sizeof h),
      sip_tensor_new_copy("d", SIP_DTYPE_FLOAT64, 1, d1, dd, sizeof dd),
      sip_tensor_new_copy("s", SIP_DTYPE_STRING, 1, d1, "\1\0\0\0\"\0\0\0\0\3\0\0\0\xe4\xb8\xad",
                          16),
  };
  sip__ks_body_t b;
  const char *js = encode_json("{\"id\": \"q\\\"\\n\\u0001\", \"inputs\": []}", outs, 7, &b);
  assert_string_equal(
      js,
      "{\"model_name\":\"m\",\"model_version\":\"2\",\"id\":\"q\\\"\\n\\u0001\",\"outputs\":["
      "{\"name\":\"f\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[1.5,-0.0,NaN,-Infinity]},"
      "{\"name\":\"u\",\"datatype\":\"UINT64\",\"shape\":[3],\"data\":[0,1,18446744073709551615]},"
      "{\"name\":\"i\",\"datatype\":\"INT8\",\"shape\":[3],\"data\":[-128,0,127]},"
      "{\"name\":\"b\",\"datatype\":\"BOOL\",\"shape\":[3],\"data\":[true,false,true]},"
      "{\"name\":\"h\",\"datatype\":\"FP16\",\"shape\":[3],\"data\":[1,0.099975586,Infinity]},"
      "{\"name\":\"d\",\"datatype\":\"FP64\",\"shape\":[3],\"data\":[0.1,1e+300,-2]},"
      "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[3],\"data\":[\"\\\"\",\"\",\"\xe4\xb8\xad\"]}]}");
  assert_int_equal(b.json_len, strlen(js));
  assert_int_equal(b.binary, 0);
  assert_int_equal(b.n_segs, 0);
  sip__ks_body_clear(&b);

  /* Binary outputs: segments point into the tensors, in order. */
  js = encode_json("{\"inputs\": [], \"parameters\": {\"binary_data_output\": true},"
                   " \"outputs\": [{\"name\": \"f\"}, {\"name\": \"i\", \"parameters\": "
                   "{\"binary_data\": false}}, {\"name\": \"s\"}]}",
                   (sip_tensor_t *[]){outs[0], outs[2], outs[6]}, 3, &b);
  assert_non_null(strstr(js, "{\"name\":\"f\",\"datatype\":\"FP32\",\"shape\":[2,2],"
                             "\"parameters\":{\"binary_data_size\":16}}"));
  assert_non_null(strstr(js, "\"data\":[-128,0,127]"));
  assert_int_equal(b.binary, 1);
  assert_int_equal(b.n_segs, 2);
  assert_ptr_equal(b.segs[0].data, outs[0]->data);
  assert_int_equal(b.segs[1].len, 16);
  sip__ks_body_clear(&b);

  /* Non-UTF-8 BYTES cannot go as JSON, but can as binary. */
  sip_tensor_t *bad = sip_tensor_new_copy("s", SIP_DTYPE_STRING, 1, d1 /* 3 */,
                                          "\1\0\0\0\xff\0\0\0\0\0\0\0\0", 13);
  sip__ks_request_t *k = decode_ok("{\"inputs\": []}", -1);
  sip_error_t *e = sip__ks_encode(k, "m", NULL, (const sip_tensor_t *const *)&bad, 1, &b);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "not UTF-8"));
  sip_error_free(e);
  k->binary_output = 1;
  assert_null(sip__ks_encode(k, "m", NULL, (const sip_tensor_t *const *)&bad, 1, &b));
  assert_null(strstr(b.json, "model_version"));
  sip__ks_body_clear(&b);
  sip__ks_request_free(k);
  sip_tensor_free(bad);
  for (size_t i = 0; i < 7; i++) sip_tensor_free(outs[i]);
}

static void test_classification(void **state) {
  (void)state;
  int64_t dims[2] = {2, 4};
  float v[8] = {0.1f, 0.7f, 0.2f, 0.7f, -1, NAN, 3, 2};
  sip_tensor_t *t = sip_tensor_new_copy("y", SIP_DTYPE_FLOAT32, 2, dims, v, sizeof v);
  sip__ks_body_t b;
  const char *js = encode_json(
      "{\"inputs\": [], \"outputs\": [{\"name\": \"y\", \"parameters\": {\"classification\": 3}}]}",
      &t, 1, &b);
  assert_non_null(strstr(js, "{\"name\":\"y\",\"datatype\":\"BYTES\",\"shape\":[2,3],\"data\":["
                             "\"0.700000:1\",\"0.700000:3\",\"0.200000:2\","
                             "\"3.000000:2\",\"2.000000:3\",\"-1.000000:0\"]}"));
  sip__ks_body_clear(&b);
  /* N larger than the classes: all of them; binary form packs BYTES. */
  js = encode_json("{\"inputs\": [], \"outputs\": [{\"name\": \"y\", \"parameters\": "
                   "{\"classification\": 9, \"binary_data\": true}}]}",
                   &t, 1, &b);
  assert_non_null(strstr(js, "\"shape\":[2,4]"));
  assert_int_equal(b.n_segs, 1);
  assert_memory_equal(b.segs[0].data, "\x0a\0\0\0" "0.700000:1", 14);
  sip_tensor_free(t); /* the body keeps the classification buffer itself */
  assert_memory_equal(b.segs[0].data, "\x0a\0\0\0" "0.700000:1", 14);
  sip__ks_body_clear(&b);

  uint64_t u[3] = {5, UINT64_MAX, 0};
  int64_t d1[1] = {3};
  t = sip_tensor_new_copy("y", SIP_DTYPE_UINT64, 1, d1, u, sizeof u);
  js = encode_json("{\"inputs\": [], \"outputs\": [{\"name\": \"y\", \"parameters\": "
                   "{\"classification\": 2}}]}",
                   &t, 1, &b);
  assert_non_null(strstr(js, "\"shape\":[2],\"data\":[\"18446744073709551615:1\",\"5:0\"]"));
  sip__ks_body_clear(&b);
  sip_tensor_free(t);

  t = sip_tensor_new_copy("y", SIP_DTYPE_BOOL, 1, d1, "\1\0\1", 3);
  sip__ks_request_t *k = decode_ok(
      "{\"inputs\": [], \"outputs\": [{\"name\": \"y\", \"parameters\": {\"classification\": 1}}]}",
      -1);
  sip_error_t *e = sip__ks_encode(k, "m", NULL, (const sip_tensor_t *const *)&t, 1, &b);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "numeric output; it is BOOL"));
  sip_error_free(e);
  sip__ks_request_free(k);
  sip_tensor_free(t);
}

static void test_error_json(void **state) {
  (void)state;
  size_t len;
  char *s = sip__ks_error_json("bad \"x\"\n\xff", &len);
  assert_string_equal(s, "{\"error\":\"bad \\\"x\\\"\\n\\ufffd\"}");
  assert_int_equal(len, strlen(s));
  json_t *v = json_loads(s, 0, NULL);
  assert_non_null(v);
  json_decref(v);
  sip__free(s);
}

/* Every allocation failure in decode and encode is an error, never a crash
 * or a leak (LeakSanitizer checks the latter in make test-asan). */
static void test_alloc_failures(void **state) {
  (void)state;
  const char *body =
      "{\"id\":\"x\",\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1,2]},"
      "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"hi\"]}],"
      "\"outputs\":[{\"name\":\"a\",\"parameters\":{\"classification\":1}},{\"name\":\"s\"}]}";
  int ok = 0;
  for (long n = 0; n < 200 && !ok; n++) {
    sip__alloc_fail_after(n);
    sip__ks_request_t *k = NULL;
    sip_error_t *e =
        sip__ks_decode("m", NULL, (const uint8_t *)body, strlen(body), -1, NULL, NULL, 0, &k);
    if (!e) {
      sip__ks_body_t b;
      e = sip__ks_encode(k, "m", NULL, (const sip_tensor_t *const *)k->req->inputs,
                         k->req->n_inputs, &b);
      if (!e) {
        ok = 1;
        sip__ks_body_clear(&b);
      }
    }
    sip__alloc_fail_after(-1);
    if (e) assert_int_equal(sip_error_code(e), SIP_RESOURCE_EXHAUSTED);
    sip_error_free(e);
    sip__ks_request_free(k);
  }
  assert_true(ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_datatypes),     cmocka_unit_test(test_half),
      cmocka_unit_test(test_depth),         cmocka_unit_test(test_decode_json),
      cmocka_unit_test(test_decode_binary), cmocka_unit_test(test_decode_raw),
      cmocka_unit_test(test_decode_errors), cmocka_unit_test(test_encode),
      cmocka_unit_test(test_classification), cmocka_unit_test(test_error_json),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
