/* sip — the gRPC inference codec's other half: engine outputs to
 * ModelInferResponse (and ModelStreamInferResponse) messages; outputs asked
 * in shared memory are written there (decoding: codec.c).
 */
#include <inttypes.h>
#include <string.h>

#include "core/core.h"
#include "grpc/grpc_frontend.h"
#include "grpc/grpc_impl.h"
#include "grpc_service.pb-c.h"

#define BAD(...) sip_error_new(SIP_INVALID_ARGUMENT, __VA_ARGS__)

typedef Inference__InferParameter param_t;

typedef Inference__ModelInferResponse__InferOutputTensor otensor_t;
typedef Inference__ModelInferResponse__InferOutputTensor__ParametersEntry oparam_t;

/* Per output: the tensor message, its shape and, when written to shared
 * memory, the three parameters that say where. */
typedef struct out_parts {
  otensor_t t, *tp;
  int64_t shape[SIP_MAX_RANK];
  oparam_t pe[3], *pep[3];
  param_t pv[3];
} out_parts_t;

static const sip__grpc_shm_out_t *shm_out_of(const sip__grpc_infer_t *k, const char *name) {
  for (size_t i = 0; i < k->n_shm_out; i++)
    if (!strcmp(k->shm_out[i].name, name)) return &k->shm_out[i];
  return NULL;
}

/* Copies output `t` into its region and describes it in `p`. */
static sip_error_t *write_shm(const sip__grpc_shm_out_t *o, const sip_tensor_t *t, out_parts_t *p) {
  if (t->nbytes > o->size)
    return BAD("output '%s' holds %zu bytes; its shared_memory_byte_size is %" PRIu64
               "; expected a region at least that large", t->name, t->nbytes, o->size);
  if (t->nbytes && t->data != o->data) memmove(o->data, t->data, t->nbytes);
  static const char *const keys[3] = {"shared_memory_region", "shared_memory_byte_size",
                                      "shared_memory_offset"};
  for (int j = 0; j < 3; j++) {
    oparam_t e = INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__PARAMETERS_ENTRY__INIT;
    param_t v = INFERENCE__INFER_PARAMETER__INIT;
    p->pe[j] = e, p->pv[j] = v;
    p->pe[j].key = (char *)keys[j];
    p->pe[j].value = &p->pv[j];
    p->pep[j] = &p->pe[j];
  }
  p->pv[0].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
  p->pv[0].string_param = o->region;
  p->pv[1].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
  p->pv[1].int64_param = (int64_t)t->nbytes;
  p->pv[2].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
  p->pv[2].int64_param = (int64_t)o->offset;
  p->t.parameters = p->pep;
  p->t.n_parameters = 3;
  return NULL;
}

sip_error_t *sip__grpc_encode_infer(const sip__grpc_infer_t *k, const char *version,
                                    const sip_tensor_t *const *outputs, size_t n_outputs,
                                    int stream, uint8_t **out, size_t *len) {
  Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  r.model_name = k->model;
  r.model_version = (char *)(version ? version : "");
  r.id = k->id ? k->id : "";
  /* Response parameters: idempotent_replay; cached; retries and served_by
   * after a failover. */
  Inference__ModelInferResponse__ParametersEntry rp[4], *rpp[4];
  param_t rv[4];
  size_t np = 0;
  for (size_t i = 0; i < 4; i++) {
    Inference__ModelInferResponse__ParametersEntry e0 =
        INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    param_t v0 = INFERENCE__INFER_PARAMETER__INIT;
    rp[i] = e0;
    rv[i] = v0;
    rp[i].value = &rv[i];
    rpp[i] = &rp[i];
  }
  if (k->replayed) {
    rv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    rv[np].bool_param = 1;
    rp[np++].key = (char *)"idempotent_replay";
  }
  if (k->cached) {
    rv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    rv[np].bool_param = 1;
    rp[np++].key = (char *)"cached";
  }
  if (k->served_by) {
    rv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    rv[np].int64_param = k->retries;
    rp[np++].key = (char *)"retries";
    rv[np].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    rv[np].string_param = (char *)k->served_by;
    rp[np++].key = (char *)"served_by";
  }
  if (np) {
    r.parameters = rpp;
    r.n_parameters = np;
  }
  out_parts_t *parts = sip__calloc(n_outputs + 1, sizeof *parts);
  otensor_t **tp = sip__calloc(n_outputs + 1, sizeof *tp);
  ProtobufCBinaryData *raw = sip__calloc(n_outputs + 1, sizeof *raw);
  sip_tensor_t **cls = sip__calloc(n_outputs + 1, sizeof *cls); /* classifications made */
  sip_error_t *e = NULL;
  if (!parts || !tp || !raw || !cls) {
    e = SIP__OOM();
    goto done;
  }
  for (size_t i = 0; i < n_outputs && !e; i++) {
    const sip_tensor_t *t = outputs[i];
    for (size_t c = 0; c < k->n_cls; c++)
      if (!strcmp(k->cls_name[c], t->name)) {
        if ((e = sip__classify(t, k->cls_topn[c], &cls[i]))) break;
        t = cls[i];
      }
    if (e) break;
    out_parts_t *p = &parts[i];
    otensor_t init = INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    p->t = init;
    p->t.name = t->name;
    const char *dt = sip__dtype_protocol_name(t->dtype);
    p->t.datatype = (char *)(dt ? dt : "");
    size_t rank = (size_t)(t->rank > 0 ? t->rank : 0);
    if (rank) memcpy(p->shape, t->dims, sizeof t->dims[0] * rank);
    p->t.n_shape = rank;
    p->t.shape = p->shape;
    tp[i] = &p->t;
    const sip__grpc_shm_out_t *o = shm_out_of(k, t->name);
    if (o) {
      e = write_shm(o, t, p); /* its raw entry stays empty, keeping the order */
    } else {
      raw[i].data = (uint8_t *)t->data;
      raw[i].len = t->nbytes;
    }
  }
  if (e) goto done;
  r.n_outputs = r.n_raw_output_contents = n_outputs;
  r.outputs = tp;
  r.raw_output_contents = raw;
  if (stream) {
    Inference__ModelStreamInferResponse s = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    s.infer_response = &r;
    e = sip__grpc_pack(&s.base, out, len);
  } else {
    e = sip__grpc_pack(&r.base, out, len);
  }
  /* Outputs that point into a client's region (an identity's view of its
   * input) were read by the packing, and outputs were written into
   * regions: a region that shrank meanwhile gave zeros or took nothing. */
  for (size_t i = 0; i < n_outputs && !e; i++) {
    const sip__grpc_shm_out_t *o = shm_out_of(k, outputs[i]->name);
    e = sip__shm_check_bytes(outputs[i]->data, outputs[i]->nbytes);
    if (!e && o) e = sip__shm_check_bytes(o->data, o->size);
    if (e) {
      sip__free(*out);
      *out = NULL;
      *len = 0;
    }
  }
done:
  for (size_t i = 0; cls && i < n_outputs; i++) sip_tensor_free(cls[i]);
  sip__free(cls);
  sip__free(parts);
  sip__free(tp);
  sip__free(raw);
  return e;
}

sip_error_t *sip__grpc_encode_stream_error(const sip__grpc_infer_t *k, const char *msg,
                                           uint8_t **out, size_t *len) {
  Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  Inference__ModelStreamInferResponse s = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
  s.error_message = (char *)msg;
  if (k) {
    r.model_name = k->model;
    r.model_version = k->version ? k->version : "";
    r.id = k->id ? k->id : "";
    s.infer_response = &r;
  }
  return sip__grpc_pack(&s.base, out, len);
}
