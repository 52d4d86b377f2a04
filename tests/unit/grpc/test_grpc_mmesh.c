/* Unit tests for the ModelMesh runtime SPI's pure parts (src/grpc/mmesh.c,
 * src/grpc/codec.c): model ids to repository model names (kept bytes,
 * escapes, no two ids on one name, names the repository accepts, the
 * refusals), and a ModelInferRequest decoded for the model `mm-model-id`
 * names whatever model_name says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc/grpc_impl.h"
#include "grpc_service.pb-c.h"
#include "server/repository/repository.h"

static void expect_name(const char *id, const char *name) {
  char out[160];
  sip_error_t *e = sip__grpc_mmesh_name(id, out, sizeof out);
  assert_null(e);
  assert_string_equal(out, name);
  e = sip__repo_check_name(out, strlen(out)); /* a name the repository takes */
  assert_null(e);
}

static void expect_refused(const char *id, const char *words) {
  char out[160];
  sip_error_t *e = sip__grpc_mmesh_name(id, out, sizeof out);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), words));
  sip_error_free(e);
}

static void test_names(void **state) {
  (void)state;
  expect_name("mnist__isvc-6b1e", "mnist__isvc-6b1e");
  expect_name("ABC_9-x", "ABC_9-x");
  expect_name("team/mnist.v2", "team.2fmnist.2ev2");
  expect_name("a:b c", "a.3ab.20c");
  expect_name("a.2fb", "a.2e2fb"); /* not "a/b"'s name: '.' is escaped too */
  expect_name("a/b", "a.2fb");
  expect_name("x\xc3\xa9", "x.c3.a9");
  char id[129];
  memset(id, 'm', 128);
  id[128] = '\0';
  char out[160];
  assert_null(sip__grpc_mmesh_name(id, out, sizeof out)); /* 128 bytes: the longest */
  assert_int_equal(strlen(out), 128);
}

static void test_refused(void **state) {
  (void)state;
  expect_refused("", "modelId is empty");
  expect_refused("/abs", "starts with '/'");
  expect_refused(".hidden", "starts with '.'");
  char id[130];
  memset(id, 'm', 129);
  id[129] = '\0';
  expect_refused(id, "too long");
  memset(id, 'm', 126);
  memcpy(id + 126, "/", 2); /* 126 + 3 escaped bytes: 129 */
  expect_refused(id, "too long");
  char small[8];
  sip_error_t *e = sip__grpc_mmesh_name("abcdefghij", small, sizeof small);
  assert_non_null(e); /* never past the buffer */
  sip_error_free(e);
}

/* A ModelInferRequest with one FP32 input "x" of shape [1] and `model`. */
static uint8_t *infer_msg(const char *model, size_t *len) {
  Inference__ModelInferRequest r = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor in =
      INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT, *inp = &in;
  int64_t shape = 1;
  float x = 2.5f;
  ProtobufCBinaryData raw = {sizeof x, (uint8_t *)&x};
  in.name = "x";
  in.datatype = "FP32";
  in.shape = &shape;
  in.n_shape = 1;
  r.model_name = (char *)model;
  r.inputs = &inp;
  r.n_inputs = 1;
  r.raw_input_contents = &raw;
  r.n_raw_input_contents = 1;
  *len = protobuf_c_message_get_packed_size(&r.base);
  uint8_t *buf = malloc(*len);
  assert_non_null(buf);
  protobuf_c_message_pack(&r.base, buf);
  return buf;
}

static void test_decode_for_model(void **state) {
  (void)state;
  size_t len;
  uint8_t *buf = infer_msg("", &len);
  sip__grpc_infer_t *k = NULL;
  /* model_name empty: refused, unless mm-model-id names the model */
  sip_error_t *e = sip__grpc_decode_infer_in(buf, len, NULL, NULL, &k);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  sip__grpc_infer_free(k);
  assert_null(sip__grpc_decode_infer_as(buf, len, NULL, NULL, "mm-model", &k));
  assert_string_equal(k->model, "mm-model");
  assert_non_null(k->req);
  sip__grpc_infer_free(k);
  free(buf);
  buf = infer_msg("other", &len);
  assert_null(sip__grpc_decode_infer_as(buf, len, NULL, NULL, "mm-model", &k));
  assert_string_equal(k->model, "mm-model"); /* the header wins */
  sip__grpc_infer_free(k);
  assert_null(sip__grpc_decode_infer_as(buf, len, NULL, NULL, NULL, &k));
  assert_string_equal(k->model, "other");
  sip__grpc_infer_free(k);
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_decode_for_model),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
