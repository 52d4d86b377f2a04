/* Unit tests for the system shared memory parameters of the KServe codec
 * (src/http/shm.c, as kserve_decode.c and kserve_encode.c call it): inputs
 * viewed in place from a region, outputs written into one, and every
 * refusal with its code and wording. The region is a memfd registered with
 * sip__shm_register_fd (the HTTP routes' /dev/shm path is covered by
 * tests/integration/test_shm_http.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/core.h"
#include "http/http.h"
#include "session/engine.h"

#define REGION_BYTES 4096

static sip__shm_set_t *set;
static uint8_t *mem; /* the test's own mapping of the region */
static int mfd;      /* the memfd behind every region */

static int setup(void **state) {
  (void)state;
  mfd = memfd_create("sip_test_kserve_shm", MFD_CLOEXEC);
  if (mfd < 0 || ftruncate(mfd, REGION_BYTES) != 0) return -1;
  mem = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  if (mem == MAP_FAILED) return -1;
  set = sip__shm_set_new(0);
  sip_error_t *e = sip__shm_register_fd(set, "r", dup(mfd), "memfd", 0, REGION_BYTES);
  /* A second region over the same memory, starting 3 bytes in: misaligned. */
  if (!e) e = sip__shm_register_fd(set, "odd", dup(mfd), "memfd", 3, 64);
  if (e) {
    sip_error_free(e);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  sip__shm_set_free(set);
  munmap(mem, REGION_BYTES);
  close(mfd);
  return 0;
}

static sip__ks_request_t *decode(sip__shm_set_t *s, const char *body, sip_error_t **err) {
  sip__ks_request_t *k = NULL;
  *err = sip__ks_decode_shm(s, "m", NULL, (const uint8_t *)body, strlen(body), -1, NULL, NULL, 0,
                            &k);
  return k;
}

static sip__ks_request_t *decode_ok(const char *body) {
  sip_error_t *e;
  sip__ks_request_t *k = decode(set, body, &e);
  if (e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("unexpected error: %s\n--- body:\n%s", msg, body);
  }
  return k;
}

/* `e` is an error of `code` whose message holds `want` (freed). */
static void expect_err(sip_error_t *e, sip_code_t code, const char *want) {
  if (!e) fail_msg("expected an error holding \"%s\"", want);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t got = sip_error_code(e);
  sip_error_free(e);
  if (got != code) fail_msg("code %s, want %s: %s", sip_code_name(got), sip_code_name(code), msg);
  if (!strstr(msg, want)) fail_msg("message lacks \"%s\": %s", want, msg);
}

static void decode_err(const char *body, sip_code_t code, const char *want) {
  sip_error_t *e;
  sip__ks_request_t *k = decode(set, body, &e);
  assert_null(k);
  expect_err(e, code, want);
}

#define INPUT(params) \
  "{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [2, 2], \"parameters\": " \
  params "}]}"

static void test_input_in_place(void **state) {
  (void)state;
  float v[4] = {1.5f, -2, 3, 4};
  memcpy(mem + 64, v, sizeof v);
  sip__ks_request_t *k = decode_ok(INPUT(
      "{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 16, "
      "\"shared_memory_offset\": 64}"));
  sip_request_t *r = k->req;
  assert_int_equal(r->n_inputs, 1);
  const sip_tensor_t *t = r->inputs[0];
  assert_int_equal(t->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->nbytes, 16);
  assert_non_null(t->owner);
  assert_memory_equal(t->data, v, sizeof v);
  /* No copy: the region's own bytes, which the client's writes reach. */
  mem[64] ^= 0xff;
  assert_int_equal(((const uint8_t *)t->data)[0], mem[64]);
  /* Unregistered while the request holds the view: the bytes stay mapped. */
  sip__shm_unregister(set, "r");
  mem[64] ^= 0xff;
  assert_memory_equal(t->data, v, sizeof v);
  sip__ks_request_free(k);
  assert_null(sip__shm_register_fd(set, "r", dup(mfd), "memfd", 0, REGION_BYTES));
}

static void test_input_misaligned_is_copied(void **state) {
  (void)state;
  int32_t v[2] = {7, -9};
  memcpy(mem + 3 + 8, v, sizeof v);
  sip__ks_request_t *k = decode_ok(
      "{\"inputs\": [{\"name\": \"a\", \"datatype\": \"INT32\", \"shape\": [2], \"parameters\": "
      "{\"shared_memory_region\": \"odd\", \"shared_memory_byte_size\": 8, "
      "\"shared_memory_offset\": 8}}]}");
  const sip_tensor_t *t = k->req->inputs[0];
  assert_true((uintptr_t)t->data % 8 == 0);
  assert_memory_equal(t->data, v, sizeof v);
  sip__ks_request_free(k);
}

static void test_bytes_input(void **state) {
  (void)state;
  memcpy(mem + 128, "\2\0\0\0hi\0\0\0\0", 10);
  sip__ks_request_t *k = decode_ok(
      "{\"inputs\": [{\"name\": \"s\", \"datatype\": \"BYTES\", \"shape\": [2], \"parameters\": "
      "{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 10, "
      "\"shared_memory_offset\": 128}}]}");
  assert_int_equal(k->req->inputs[0]->nbytes, 10);
  /* A copy: a length rewritten after the packing was checked changes nothing. */
  mem[128] = 0xff;
  assert_memory_equal(k->req->inputs[0]->data, "\2\0\0\0hi\0\0\0\0", 10);
  sip__ks_request_free(k);
  /* The packing is checked like binary data's. */
  memcpy(mem + 128, "\x09\0\0\0hi", 6);
  decode_err("{\"inputs\": [{\"name\": \"s\", \"datatype\": \"BYTES\", \"shape\": [1], \"parameters\": "
             "{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 6, "
             "\"shared_memory_offset\": 128}}]}",
             SIP_INVALID_ARGUMENT, "'s'");
}

static void test_input_errors(void **state) {
  (void)state;
  decode_err(INPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 12}"),
             SIP_INVALID_ARGUMENT, "shared_memory_byte_size is 12; shape and FP32 need 16 bytes");
  decode_err(INPUT("{\"shared_memory_region\": \"nope\", \"shared_memory_byte_size\": 16}"),
             SIP_INVALID_ARGUMENT, "input 'a': no shared memory region named 'nope'");
  decode_err(INPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 16, "
                   "\"shared_memory_offset\": 4090}"),
             SIP_INVALID_ARGUMENT, "offset 4090 + byte size 16 is past the end");
  decode_err(INPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 16, "
                   "\"shared_memory_offset\": 9223372036854775807}"),
             SIP_INVALID_ARGUMENT, "past the end");
  decode_err(INPUT("{\"shared_memory_region\": \"r\"}"), SIP_INVALID_ARGUMENT,
             "input 'a': parameters.shared_memory_byte_size is missing");
  decode_err(INPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": -16}"),
             SIP_INVALID_ARGUMENT, "input 'a': parameters.shared_memory_byte_size is not an "
             "integer >= 0");
  decode_err(INPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 16, "
                   "\"shared_memory_offset\": \"0\"}"),
             SIP_INVALID_ARGUMENT, "shared_memory_offset is not an integer");
  decode_err(INPUT("{\"shared_memory_region\": 5, \"shared_memory_byte_size\": 16}"),
             SIP_INVALID_ARGUMENT, "shared_memory_region is not a region name");
  decode_err(INPUT("{\"shared_memory_region\": \"\", \"shared_memory_byte_size\": 16}"),
             SIP_INVALID_ARGUMENT, "shared_memory_region is not a region name");
  decode_err("{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [1],"
             " \"parameters\": {\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 4}}]}",
             SIP_INVALID_ARGUMENT, "both shared_memory_region and data");
  decode_err(INPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 16, "
                   "\"binary_data_size\": 16}"),
             SIP_INVALID_ARGUMENT, "both shared_memory_region and binary_data_size");
  /* Without a set (sip__ks_decode): the extension is not there. */
  sip_error_t *e;
  assert_null(decode(NULL, INPUT("{\"shared_memory_region\": \"r\", "
                                 "\"shared_memory_byte_size\": 16}"), &e));
  expect_err(e, SIP_UNIMPLEMENTED, "shared memory is not available");
}

#define OUTPUT(params)                                                                     \
  "{\"inputs\": [{\"name\": \"y\", \"datatype\": \"INT16\", \"shape\": [3], \"data\": [1, -2, 3]}," \
  " {\"name\": \"z\", \"datatype\": \"FP32\", \"shape\": [1], \"data\": [0.5]}],"                \
  " \"outputs\": [{\"name\": \"y\", \"parameters\": " params "}, {\"name\": \"z\", "            \
  "\"parameters\": {\"binary_data\": true}}]}"

/* Encodes k's inputs as the outputs of an inference (the outputs are named
 * like the inputs). */
static sip_error_t *encode(sip__ks_request_t *k, sip__ks_body_t *b) {
  return sip__ks_encode(k, "m", NULL, (const sip_tensor_t *const *)k->req->inputs,
                        k->req->n_inputs, b);
}

static void test_output_written(void **state) {
  (void)state;
  memset(mem + 256, 0xee, 16);
  sip__ks_request_t *k = decode_ok(OUTPUT(
      "{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 8, "
      "\"shared_memory_offset\": 256}"));
  assert_string_equal(k->outputs[0].shm_region, "r");
  sip__ks_body_t b;
  assert_null(encode(k, &b));
  int16_t want[3] = {1, -2, 3};
  assert_memory_equal(mem + 256, want, sizeof want);
  assert_int_equal(mem[262], 0xee); /* nothing past the output's 6 bytes */
  /* Listed with its parameters and no data; the other output in binary. */
  json_t *doc = json_loadb(b.json, b.json_len, 0, NULL);
  assert_non_null(doc);
  json_t *y = json_array_get(json_object_get(doc, "outputs"), 0);
  assert_null(json_object_get(y, "data"));
  json_t *p = json_object_get(y, "parameters");
  assert_string_equal(json_string_value(json_object_get(p, "shared_memory_region")), "r");
  assert_int_equal(json_integer_value(json_object_get(p, "shared_memory_byte_size")), 6);
  assert_int_equal(json_integer_value(json_object_get(p, "shared_memory_offset")), 256);
  assert_null(json_object_get(p, "binary_data_size"));
  json_t *z = json_array_get(json_object_get(doc, "outputs"), 1);
  assert_int_equal(json_integer_value(
                       json_object_get(json_object_get(z, "parameters"), "binary_data_size")), 4);
  assert_true(b.binary);
  assert_int_equal(b.n_segs, 1);
  json_decref(doc);
  sip__ks_body_clear(&b);
  sip__ks_request_free(k);
}

static void test_output_errors(void **state) {
  (void)state;
  /* Too small: known only once the output is there; the message names the
   * size needed. */
  sip__ks_request_t *k = decode_ok(OUTPUT(
      "{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 4}"));
  sip__ks_body_t b;
  expect_err(encode(k, &b), SIP_INVALID_ARGUMENT,
             "output 'y' is 6 bytes, more than the 4 bytes asked into shared memory region 'r'; "
             "expected shared_memory_byte_size >= 6");
  sip__ks_request_free(k);
  decode_err(OUTPUT("{\"shared_memory_region\": \"gone\", \"shared_memory_byte_size\": 8}"),
             SIP_INVALID_ARGUMENT, "output 'y': no shared memory region named 'gone'");
  decode_err(OUTPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 8, "
                    "\"shared_memory_offset\": 4095}"),
             SIP_INVALID_ARGUMENT, "output 'y': offset 4095 + byte size 8 is past the end");
  decode_err(OUTPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 8, "
                    "\"binary_data\": true}"),
             SIP_INVALID_ARGUMENT, "both shared_memory_region and binary_data");
  decode_err(OUTPUT("{\"shared_memory_region\": \"r\"}"), SIP_INVALID_ARGUMENT,
             "output 'y': parameters.shared_memory_byte_size is missing");
  sip_error_t *e;
  assert_null(decode(NULL, OUTPUT("{\"shared_memory_region\": \"r\", "
                                  "\"shared_memory_byte_size\": 8}"), &e));
  expect_err(e, SIP_UNIMPLEMENTED, "shared memory is not available");
}

/* The same bytes as input and output (an identity backend hands the input
 * view back): written over themselves, unchanged. */
static void test_output_over_its_input(void **state) {
  (void)state;
  float v[4] = {1, 2, 3, 4};
  memcpy(mem + 512, v, sizeof v);
  sip__ks_request_t *k = decode_ok(
      "{\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [4], \"parameters\": "
      "{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 16, "
      "\"shared_memory_offset\": 512}}], \"outputs\": [{\"name\": \"a\", \"parameters\": "
      "{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 16, "
      "\"shared_memory_offset\": 512}}]}");
  sip__ks_body_t b;
  assert_null(encode(k, &b));
  assert_memory_equal(mem + 512, v, sizeof v);
  sip__ks_body_clear(&b);
  sip__ks_request_free(k);
}

static void test_alloc_failures(void **state) {
  (void)state;
  const char *body = OUTPUT("{\"shared_memory_region\": \"r\", \"shared_memory_byte_size\": 8}");
  int ok = 0;
  for (long n = 0; n < 200 && !ok; n++) {
    sip__alloc_fail_after(n);
    sip_error_t *e;
    sip__ks_request_t *k = decode(set, body, &e);
    if (!e) {
      sip__ks_body_t b;
      if (!(e = encode(k, &b))) {
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
      cmocka_unit_test(test_input_in_place),
      cmocka_unit_test(test_input_misaligned_is_copied),
      cmocka_unit_test(test_bytes_input),
      cmocka_unit_test(test_input_errors),
      cmocka_unit_test(test_output_written),
      cmocka_unit_test(test_output_errors),
      cmocka_unit_test(test_output_over_its_input),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
