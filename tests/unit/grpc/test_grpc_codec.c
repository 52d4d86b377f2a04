/* Unit tests for src/grpc/codec.c: serialized ModelInferRequest messages
 * (built with the generated protobuf-c code) to engine requests, raw and
 * typed contents of each datatype family, the errors and their codes,
 * allocation failures, and the encoded ModelInferResponse /
 * ModelStreamInferResponse read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "grpc/grpc_frontend.h"
#include "grpc_service.pb-c.h"
#include "session/engine.h"

typedef Inference__ModelInferRequest req_t;
typedef Inference__ModelInferRequest__InferInputTensor in_t;

/* A request builder: up to 4 inputs, each with raw or typed contents. */
typedef struct builder {
  req_t r;
  in_t in[4], *inp[4];
  Inference__InferTensorContents c[4];
  ProtobufCBinaryData raw[4];
  int64_t shape[4][4];
  Inference__ModelInferRequest__InferRequestedOutputTensor out[2], *outp[2];
  Inference__ModelInferRequest__ParametersEntry pe[8], *pep[8];
  Inference__InferParameter pv[8];
} builder_t;

static void b_init(builder_t *b, const char *model) {
  req_t r = INFERENCE__MODEL_INFER_REQUEST__INIT;
  memset(b, 0, sizeof *b);
  b->r = r;
  b->r.model_name = (char *)model;
  b->r.inputs = b->inp;
  b->r.raw_input_contents = b->raw;
  b->r.outputs = b->outp;
  b->r.parameters = b->pep;
}

static in_t *b_input(builder_t *b, const char *name, const char *dt, int rank, ...) {
  size_t i = b->r.n_inputs++;
  in_t init = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
  b->in[i] = init;
  b->in[i].name = (char *)name;
  b->in[i].datatype = (char *)dt;
  va_list ap;
  va_start(ap, rank);
  for (int k = 0; k < rank; k++) b->shape[i][k] = va_arg(ap, int64_t);
  va_end(ap);
  b->in[i].shape = b->shape[i];
  b->in[i].n_shape = (size_t)rank;
  b->inp[i] = &b->in[i];
  return &b->in[i];
}

static Inference__InferTensorContents *b_typed(builder_t *b, size_t i) {
  Inference__InferTensorContents init = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
  b->c[i] = init;
  b->in[i].contents = &b->c[i];
  return &b->c[i];
}

static void b_raw(builder_t *b, const void *data, size_t len) {
  b->raw[b->r.n_raw_input_contents].data = (uint8_t *)data;
  b->raw[b->r.n_raw_input_contents++].len = len;
}

/* A request-level parameter entry, its value for the caller to set. */
static Inference__InferParameter *b_param(builder_t *b, const char *key) {
  size_t i = b->r.n_parameters++;
  Inference__ModelInferRequest__ParametersEntry e =
      INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
  Inference__InferParameter p = INFERENCE__INFER_PARAMETER__INIT;
  b->pe[i] = e, b->pv[i] = p;
  b->pe[i].key = (char *)key;
  b->pe[i].value = &b->pv[i];
  b->pep[i] = &b->pe[i];
  return &b->pv[i];
}

static void b_param_int(builder_t *b, const char *key, int64_t v) {
  Inference__InferParameter *p = b_param(b, key);
  p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
  p->int64_param = v;
}

static void b_param_str(builder_t *b, const char *key, const char *v) {
  Inference__InferParameter *p = b_param(b, key);
  p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
  p->string_param = (char *)v;
}

static void b_output(builder_t *b, const char *name) {
  size_t i = b->r.n_outputs++;
  Inference__ModelInferRequest__InferRequestedOutputTensor init =
      INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT;
  b->out[i] = init;
  b->out[i].name = (char *)name;
  b->outp[i] = &b->out[i];
}

static sip_error_t *b_decode_set(builder_t *b, sip__shm_set_t *set, sip__grpc_infer_t **k) {
  size_t n = protobuf_c_message_get_packed_size(&b->r.base);
  uint8_t *buf = malloc(n + 1);
  protobuf_c_message_pack(&b->r.base, buf);
  sip_error_t *e = sip__grpc_decode_infer(buf, n, set, k);
  free(buf); /* raw inputs must not point into the caller's buffer */
  return e;
}

static sip_error_t *b_decode(builder_t *b, sip__grpc_infer_t **k) {
  return b_decode_set(b, NULL, k);
}

static void expect_error(builder_t *b, sip_code_t code, const char *want) {
  sip__grpc_infer_t *k = NULL;
  sip_error_t *e = b_decode(b, &k);
  assert_non_null(e);
  if (!strstr(sip_error_message(e), want))
    fail_msg("message '%s' lacks '%s'", sip_error_message(e), want);
  assert_int_equal(sip_error_code(e), code);
  if (k) assert_null(k->req);
  sip_error_free(e);
  sip__grpc_infer_free(k);
}

static void test_raw_inputs(void **state) {
  (void)state;
  builder_t b;
  b_init(&b, "m");
  b.r.model_version = "3";
  b.r.id = "abc";
  float x[6] = {1, 2, 3, 4, 5, 6};
  b_input(&b, "x", "FP32", 2, (int64_t)2, (int64_t)3);
  b_raw(&b, x, sizeof x);
  const uint8_t s[] = {2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0};
  b_input(&b, "s", "BYTES", 1, (int64_t)2);
  b_raw(&b, s, sizeof s);
  b_output(&b, "y");
  b_param_int(&b, "priority", 1);
  b_param_int(&b, "timeout", 2500);
  sip__grpc_infer_t *k = NULL;
  sip_error_t *e = b_decode(&b, &k);
  assert_null(e);
  assert_string_equal(k->model, "m");
  assert_string_equal(k->version, "3");
  assert_string_equal(k->id, "abc");
  sip_request_t *r = k->req;
  assert_int_equal(r->n_inputs, 2);
  assert_int_equal(r->inputs[0]->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(r->inputs[0]->rank, 2);
  assert_int_equal(r->inputs[0]->dims[1], 3);
  assert_memory_equal(r->inputs[0]->data, x, sizeof x);
  assert_int_equal(r->inputs[1]->dtype, SIP_DTYPE_STRING);
  assert_memory_equal(r->inputs[1]->data, s, sizeof s);
  assert_int_equal(r->n_outputs, 1);
  assert_string_equal(r->outputs[0], "y");
  assert_int_equal(r->priority, 1);
  assert_int_equal(r->timeout_ms, 3); /* microseconds, rounded up */
  sip__grpc_infer_free(k);
}

/* With the received bytes held by a buffer, raw inputs view them in place:
 * no copy on the way in, and the buffer lives as long as the tensors do. */
static void test_raw_inputs_in_place(void **state) {
  (void)state;
  builder_t b;
  b_init(&b, "m");
  float x[6] = {1, 2, 3, 4, 5, 6}, y[2] = {7, 8};
  b_input(&b, "x", "FP32", 2, (int64_t)2, (int64_t)3);
  b_raw(&b, x, sizeof x);
  b_input(&b, "y", "FP32", 1, (int64_t)2);
  b_raw(&b, y, sizeof y);
  b_param_int(&b, "priority", 2);
  size_t n = protobuf_c_message_get_packed_size(&b.r.base);
  sip_buf_t *held = sip_buf_new(n);
  uint8_t *buf = sip_buf_data(held);
  protobuf_c_message_pack(&b.r.base, buf);
  sip__grpc_infer_t *k = NULL;
  assert_null(sip__grpc_decode_infer_in(buf, n, held, NULL, &k));
  sip_buf_unref(held); /* the tensors keep it */
  sip_request_t *r = k->req;
  assert_int_equal(r->n_inputs, 2);
  for (size_t i = 0; i < 2; i++) {
    const uint8_t *d = r->inputs[i]->data;
    assert_true(d >= buf && d + r->inputs[i]->nbytes <= buf + n); /* a view, not a copy */
  }
  assert_memory_equal(r->inputs[0]->data, x, sizeof x);
  assert_memory_equal(r->inputs[1]->data, y, sizeof y);
  assert_int_equal(r->priority, 2); /* the other fields still read */
  sip__grpc_infer_free(k);
}

static void test_typed_inputs(void **state) {
  (void)state;
  builder_t b;
  b_init(&b, "m");
  int32_t ints[3] = {-128, 5, 127};
  b_input(&b, "i8", "INT8", 1, (int64_t)3);
  b_typed(&b, 0)->int_contents = ints, b.c[0].n_int_contents = 3;
  uint32_t u[2] = {65535, 7};
  b_input(&b, "u16", "UINT16", 2, (int64_t)1, (int64_t)2);
  b_typed(&b, 1)->uint_contents = u, b.c[1].n_uint_contents = 2;
  protobuf_c_boolean bl[2] = {1, 0};
  b_input(&b, "b", "BOOL", 1, (int64_t)2);
  b_typed(&b, 2)->bool_contents = bl, b.c[2].n_bool_contents = 2;
  ProtobufCBinaryData by[2] = {{3, (uint8_t *)"a\0b"}, {0, NULL}};
  b_input(&b, "s", "BYTES", 1, (int64_t)2);
  b_typed(&b, 3)->bytes_contents = by, b.c[3].n_bytes_contents = 2;
  sip__grpc_infer_t *k = NULL;
  sip_error_t *e = b_decode(&b, &k);
  assert_null(e);
  sip_request_t *r = k->req;
  const int8_t want8[3] = {-128, 5, 127};
  assert_memory_equal(r->inputs[0]->data, want8, 3);
  const uint16_t want16[2] = {65535, 7};
  assert_memory_equal(r->inputs[1]->data, want16, 4);
  const uint8_t wantb[2] = {1, 0};
  assert_memory_equal(r->inputs[2]->data, wantb, 2);
  const uint8_t wants[] = {3, 0, 0, 0, 'a', 0, 'b', 0, 0, 0, 0};
  assert_int_equal(r->inputs[3]->nbytes, sizeof wants);
  assert_memory_equal(r->inputs[3]->data, wants, sizeof wants);
  assert_null(k->version);
  assert_null(k->id);
  sip__grpc_infer_free(k);
}

static void test_errors(void **state) {
  (void)state;
  sip__grpc_infer_t *k = NULL;
  const uint8_t junk[] = {0xff, 0xff, 0xff};
  sip_error_t *e = sip__grpc_decode_infer(junk, sizeof junk, NULL, &k);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "not a valid inference.ModelInferRequest"));
  sip_error_free(e);
  assert_null(k);

  builder_t b;
  float x[4] = {0};
  b_init(&b, "");
  expect_error(&b, SIP_INVALID_ARGUMENT, "model_name is empty");

  b_init(&b, "m");
  b.r.id = "keep";
  b_input(&b, "x", "FP32", 1, (int64_t)4);
  b_raw(&b, x, 12);
  expect_error(&b, SIP_INVALID_ARGUMENT, "raw_input_contents[0] holds 12 bytes; expected 16");
  sip__grpc_infer_t *kk = NULL;
  e = b_decode(&b, &kk);
  assert_string_equal(kk->id, "keep"); /* for a stream's error answer */
  sip_error_free(e);
  sip__grpc_infer_free(kk);

  b_init(&b, "m");
  b_input(&b, "x", "FP32", 1, (int64_t)4);
  b_input(&b, "y", "FP32", 1, (int64_t)4);
  b_raw(&b, x, 16);
  expect_error(&b, SIP_INVALID_ARGUMENT, "raw_input_contents has 1 entries; expected one per input not in shared memory");

  b_init(&b, "m");
  b_input(&b, "x", "FP32", 1, (int64_t)4);
  expect_error(&b, SIP_INVALID_ARGUMENT, "input 'x' has no data");

  b_init(&b, "m");
  b_input(&b, "x", "FP32", 1, (int64_t)4);
  b_typed(&b, 0)->fp32_contents = x, b.c[0].n_fp32_contents = 3;
  expect_error(&b, SIP_INVALID_ARGUMENT, "contents.fp32_contents holds 3 elements; expected 4");

  b_init(&b, "m");
  b_input(&b, "x", "FP32", 1, (int64_t)4);
  b_typed(&b, 0)->fp32_contents = x, b.c[0].n_fp32_contents = 4;
  b_raw(&b, x, 16);
  expect_error(&b, SIP_INVALID_ARGUMENT, "both contents and raw_input_contents");

  b_init(&b, "m");
  b_input(&b, "x", "FP16", 1, (int64_t)1);
  b_typed(&b, 0)->fp32_contents = x, b.c[0].n_fp32_contents = 1;
  expect_error(&b, SIP_INVALID_ARGUMENT, "FP16 has no typed contents field");

  b_init(&b, "m");
  b_input(&b, "x", "float", 1, (int64_t)1);
  expect_error(&b, SIP_INVALID_ARGUMENT, "datatype 'float' is not a datatype");

  b_init(&b, "m");
  b_input(&b, "x", "FP32", 2, (int64_t)2, (int64_t)-1);
  expect_error(&b, SIP_INVALID_ARGUMENT, "shape[1] is -1");

  b_init(&b, "m");
  b_input(&b, "", "FP32", 1, (int64_t)1);
  expect_error(&b, SIP_INVALID_ARGUMENT, "inputs[0] has no name");

  const uint8_t bad_s[] = {9, 0, 0, 0, 'x'};
  b_init(&b, "m");
  b_input(&b, "s", "BYTES", 1, (int64_t)1);
  b_raw(&b, bad_s, sizeof bad_s);
  expect_error(&b, SIP_INVALID_ARGUMENT, "'s'");

  b_init(&b, "m");
  b_input(&b, "x", "FP32", 1, (int64_t)1);
  b_raw(&b, x, 4);
  b_param_int(&b, "priority", -1);
  expect_error(&b, SIP_INVALID_ARGUMENT, "parameters.priority is -1; expected an integer in 0..2^63-1");

  b_init(&b, "m");
  b_output(&b, "");
  expect_error(&b, SIP_INVALID_ARGUMENT, "outputs[0] has no name");
}

/* Every allocation failing in turn: an error (RESOURCE_EXHAUSTED) or the
 * request, never a leak (LSan) or a crash. */
static void test_alloc_failures(void **state) {
  (void)state;
  builder_t b;
  b_init(&b, "m");
  b.r.id = "i";
  float x[4] = {1, 2, 3, 4};
  b_input(&b, "x", "FP32", 1, (int64_t)4);
  b_raw(&b, x, sizeof x);
  b_output(&b, "y");
  size_t n = protobuf_c_message_get_packed_size(&b.r.base);
  uint8_t *buf = malloc(n);
  protobuf_c_message_pack(&b.r.base, buf);
  for (long i = 0;; i++) {
    sip__grpc_infer_t *k = NULL;
    sip__alloc_fail_after(i);
    sip_error_t *e = sip__grpc_decode_infer(buf, n, NULL, &k);
    sip__alloc_fail_after(-1);
    sip__grpc_infer_free(k);
    if (!e) break;
    assert_int_equal(sip_error_code(e), SIP_RESOURCE_EXHAUSTED);
    sip_error_free(e);
    assert_true(i < 200);
  }
  free(buf);
}

static void test_encode(void **state) {
  (void)state;
  sip__grpc_infer_t k = {.model = "m", .version = NULL, .id = "7"};
  float y[3] = {1.5f, -2, 3};
  int64_t dims[2] = {1, 3};
  sip_tensor_t *t = sip_tensor_new_copy("y", SIP_DTYPE_FLOAT32, 2, dims, y, sizeof y);
  const sip_tensor_t *outs[1] = {t};
  for (int stream = 0; stream < 2; stream++) {
    uint8_t *msg = NULL;
    size_t len = 0;
    assert_null(sip__grpc_encode_infer(&k, "2", outs, 1, stream, &msg, &len));
    Inference__ModelStreamInferResponse *s = NULL;
    Inference__ModelInferResponse *r;
    if (stream) {
      s = inference__model_stream_infer_response__unpack(NULL, len, msg);
      assert_non_null(s);
      assert_string_equal(s->error_message, "");
      r = s->infer_response;
    } else {
      r = inference__model_infer_response__unpack(NULL, len, msg);
    }
    assert_non_null(r);
    assert_string_equal(r->model_name, "m");
    assert_string_equal(r->model_version, "2");
    assert_string_equal(r->id, "7");
    assert_int_equal(r->n_outputs, 1);
    assert_string_equal(r->outputs[0]->name, "y");
    assert_string_equal(r->outputs[0]->datatype, "FP32");
    assert_int_equal(r->outputs[0]->n_shape, 2);
    assert_int_equal(r->outputs[0]->shape[1], 3);
    assert_int_equal(r->n_raw_output_contents, 1);
    assert_int_equal(r->raw_output_contents[0].len, sizeof y);
    assert_memory_equal(r->raw_output_contents[0].data, y, sizeof y);
    if (s) inference__model_stream_infer_response__free_unpacked(s, NULL);
    else inference__model_infer_response__free_unpacked(r, NULL);
    sip__free(msg);
  }
  uint8_t *msg = NULL;
  size_t len = 0;
  assert_null(sip__grpc_encode_stream_error(&k, "went wrong", &msg, &len));
  Inference__ModelStreamInferResponse *s = inference__model_stream_infer_response__unpack(NULL, len, msg);
  assert_string_equal(s->error_message, "went wrong");
  assert_string_equal(s->infer_response->id, "7");
  inference__model_stream_infer_response__free_unpacked(s, NULL);
  sip__free(msg);
  sip_tensor_free(t);
}

/* Points input or output parameters at the entries the builder filled
 * from `from` on (the entry types share one layout). */
static void b_take_params(builder_t *b, size_t from, size_t *n, void ***params) {
  *n = b->r.n_parameters - from;
  *params = (void **)&b->pep[from];
}

/* Inputs read from and outputs written to a region of a set. */
static void test_shared_memory(void **state) {
  (void)state;
  sip__shm_set_t *set = sip__shm_set_new(0);
  int fd = memfd_create("sip-test", 0);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 64), 0);
  float x[4] = {1, 2, 3, 4};
  assert_int_equal(pwrite(fd, x, sizeof x, 8), (ssize_t)sizeof x);
  assert_null(sip__shm_register_fd(set, "r", fd, "memfd", 0, 64));

  builder_t b;
  b_init(&b, "m");
  b_input(&b, "x", "FP32", 1, (int64_t)4);
  b_param_str(&b, "shared_memory_region", "r");
  b_param_int(&b, "shared_memory_byte_size", 16);
  b_param_int(&b, "shared_memory_offset", 8);
  b_take_params(&b, 0, &b.in[0].n_parameters, (void ***)&b.in[0].parameters);
  b_output(&b, "y");
  b_param_str(&b, "shared_memory_region", "r");
  b_param_int(&b, "shared_memory_byte_size", 16);
  b_param_int(&b, "shared_memory_offset", 32);
  b_take_params(&b, 3, &b.out[0].n_parameters, (void ***)&b.out[0].parameters);
  b.r.n_parameters = 0; /* none for the request itself */
  sip__grpc_infer_t *k = NULL;
  sip_error_t *e = b_decode_set(&b, set, &k);
  if (e) fail_msg("%s", sip_error_message(e));
  assert_memory_equal(k->req->inputs[0]->data, x, sizeof x);
  assert_int_equal(k->n_shm_out, 1);
  float y[4] = {5, 6, 7, 8};
  int64_t dims[1] = {4};
  sip_tensor_t *t = sip_tensor_new_copy("y", SIP_DTYPE_FLOAT32, 1, dims, y, sizeof y);
  const sip_tensor_t *outs[1] = {t};
  uint8_t *msg = NULL;
  size_t len = 0;
  assert_null(sip__grpc_encode_infer(k, NULL, outs, 1, 0, &msg, &len));
  float got[4];
  assert_int_equal(pread(fd, got, sizeof got, 32), (ssize_t)sizeof got);
  assert_memory_equal(got, y, sizeof y);
  Inference__ModelInferResponse *r = inference__model_infer_response__unpack(NULL, len, msg);
  assert_int_equal(r->n_raw_output_contents, 1);
  assert_int_equal(r->raw_output_contents[0].len, 0);
  assert_int_equal(r->outputs[0]->n_parameters, 3);
  inference__model_infer_response__free_unpacked(r, NULL);
  sip__free(msg);
  sip_tensor_free(t);
  /* An output larger than its region's byte size. */
  float big[8] = {0};
  dims[0] = 8;
  t = sip_tensor_new_copy("y", SIP_DTYPE_FLOAT32, 1, dims, big, sizeof big);
  outs[0] = t;
  e = sip__grpc_encode_infer(k, NULL, outs, 1, 0, &msg, &len);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "shared_memory_byte_size is 16"));
  sip_error_free(e);
  sip_tensor_free(t);
  sip__grpc_infer_free(k);

  /* Unknown region; a size past the region's end; no set at all. */
  b.in[0].parameters[0]->value->string_param = "nope";
  e = b_decode_set(&b, set, &k);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  sip_error_free(e);
  sip__grpc_infer_free(k);
  e = b_decode(&b, &k);
  assert_int_equal(sip_error_code(e), SIP_UNIMPLEMENTED);
  sip_error_free(e);
  sip__grpc_infer_free(k);
  b.in[0].parameters[0]->value->string_param = "r";
  b.in[0].parameters[2]->value->int64_param = 56;
  e = b_decode_set(&b, set, &k);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "past the end"));
  sip_error_free(e);
  sip__grpc_infer_free(k);
  sip__shm_set_free(set);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_raw_inputs),     cmocka_unit_test(test_raw_inputs_in_place),     cmocka_unit_test(test_typed_inputs),
      cmocka_unit_test(test_errors),         cmocka_unit_test(test_alloc_failures),
      cmocka_unit_test(test_encode),         cmocka_unit_test(test_shared_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
