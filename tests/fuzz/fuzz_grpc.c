/* libFuzzer target for the gRPC front-end's request decoding
 * (src/grpc/codec.c and the protobuf-c messages of proto/grpc_service.proto).
 *
 * Shared memory: fuzz_shm.c registers, lists, unregisters and uses regions
 * over both front-ends' paths.
 *
 * Input: byte 0 picks what the rest is: a ModelInferRequest (decoded into
 * an engine request, then its inputs encoded back as a ModelInferResponse
 * or a stream answer, which must read back the same), or the request
 * message of one of the other methods (unpacked as the server does).
 * Beyond "no crash, no leak" it checks the contract: exactly one of error
 * and request; errors carry a code and a message; every decoded input is
 * a valid tensor.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "grpc/grpc_frontend.h"
#include "grpc/grpc_impl.h"
#include "grpc_service.pb-c.h"
#include "session/engine.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

static void infer(const uint8_t *data, size_t size, int stream) {
  sip__grpc_infer_t *k = NULL;
  /* An empty set, through a request's scope of it as the front-end decodes:
   * shared-memory tensors reach the lookup and are not found. */
  static sip__shm_set_t *set;
  if (!set) set = sip__shm_set_new(0);
  sip__shm_set_t *scope = sip__shm_scope_new(set);
  CHECK(scope);
  sip_error_t *e = sip__grpc_decode_infer(data, size, scope, &k);
  sip__shm_set_free(scope);
  if (e) {
    CHECK(sip_error_code(e) != SIP_OK && sip_error_message(e)[0]);
    CHECK(!k || !k->req);
    sip_error_free(e);
    sip__grpc_infer_free(k);
    return;
  }
  CHECK(k && k->req && k->model && k->model[0]);
  sip_request_t *r = k->req;
  for (size_t i = 0; i < r->n_inputs; i++) {
    sip_error_t *v = sip_tensor_validate(r->inputs[i]);
    CHECK(!v);
  }
  uint8_t *msg = NULL;
  size_t len = 0;
  e = sip__grpc_encode_infer(k, k->version, (const sip_tensor_t *const *)r->inputs, r->n_inputs,
                             stream, &msg, &len);
  if (!e) {
    ProtobufCMessage *m = sip__grpc_unpack(stream ? &inference__model_stream_infer_response__descriptor
                                                  : &inference__model_infer_response__descriptor,
                                           msg, len);
    CHECK(m);
    const Inference__ModelInferResponse *resp =
        stream ? ((Inference__ModelStreamInferResponse *)m)->infer_response
               : (Inference__ModelInferResponse *)m;
    CHECK(resp && resp->n_raw_output_contents == r->n_inputs);
    for (size_t i = 0; i < r->n_inputs; i++)
      CHECK(resp->raw_output_contents[i].len == r->inputs[i]->nbytes &&
            (!r->inputs[i]->nbytes ||
             !memcmp(resp->raw_output_contents[i].data, r->inputs[i]->data, r->inputs[i]->nbytes)));
    sip__grpc_msg_free(m);
  }
  sip_error_free(e);
  sip__free(msg);
  sip__grpc_infer_free(k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t pick = data[0] % (sip__grpc_n_methods + 1);
  if (pick >= sip__grpc_n_methods || !sip__grpc_methods[pick].req) {
    infer(data + 1, size - 1, data[0] & 1);
    return 0;
  }
  ProtobufCMessage *m = sip__grpc_unpack(sip__grpc_methods[pick].req, data + 1, size - 1);
  if (m) {
    /* What unpacks packs again. */
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    CHECK(buf && protobuf_c_message_pack(m, buf) == n);
    free(buf);
  }
  sip__grpc_msg_free(m);
  return 0;
}
