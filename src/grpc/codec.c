/* sip — the gRPC inference codec: ModelInferRequest messages (protobuf-c)
 * to engine requests, engine outputs to ModelInferResponse messages.
 */
#include <inttypes.h>
#include <string.h>

#include "core/core.h"
#include "grpc/grpc_frontend.h"
#include "grpc/grpc_impl.h"
#include "grpc_service.pb-c.h"

#define BAD(...) sip_error_new(SIP_INVALID_ARGUMENT, __VA_ARGS__)

typedef Inference__ModelInferRequest infer_req_t;
typedef Inference__ModelInferRequest__InferInputTensor input_t;
typedef Inference__InferParameter param_t;

/* ---- allocation ------------------------------------------------------------ */

static void *pb_alloc(void *data, size_t n) {
  (void)data;
  return sip__malloc(n ? n : 1);
}
static void pb_free(void *data, void *p) {
  (void)data;
  sip__free(p);
}
ProtobufCAllocator sip__grpc_pb_allocator = {pb_alloc, pb_free, NULL};

ProtobufCMessage *sip__grpc_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                                   size_t len) {
  return protobuf_c_message_unpack(d, &sip__grpc_pb_allocator, len, data);
}

void sip__grpc_msg_free(ProtobufCMessage *m) {
  if (m) protobuf_c_message_free_unpacked(m, &sip__grpc_pb_allocator);
}

sip_error_t *sip__grpc_pack(const ProtobufCMessage *m, uint8_t **out, size_t *len) {
  size_t n = protobuf_c_message_get_packed_size(m);
  *out = sip__malloc(n ? n : 1);
  if (!*out) return SIP__OOM();
  *len = protobuf_c_message_pack(m, *out);
  return NULL;
}

/* ---- decoding ---------------------------------------------------------------- */

void sip__grpc_infer_free(sip__grpc_infer_t *k) {
  if (!k) return;
  sip_request_free(k->req);
  sip__free(k->model);
  sip__free(k->version);
  sip__free(k->id);
  sip__free(k);
}

static void release_msg(void *m) { sip__grpc_msg_free(m); }

/* An integer parameter (int64 or uint64 >= 0): 1 with *v set, 0 when the
 * parameter holds another type. */
static int param_uint(const param_t *p, uint64_t *v) {
  if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM &&
      p->int64_param >= 0) {
    *v = (uint64_t)p->int64_param;
    return 1;
  }
  if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM) {
    *v = p->uint64_param;
    return 1;
  }
  return 0;
}

static sip_error_t *decode_params(const infer_req_t *m, sip_request_t *r) {
  for (size_t i = 0; i < m->n_parameters; i++) {
    const char *key = m->parameters[i]->key;
    const param_t *p = m->parameters[i]->value;
    uint64_t u = 0;
    if (!p) continue;
    if (!strcmp(key, "priority")) {
      if (!param_uint(p, &u)) return BAD("parameters.priority is not an integer >= 0");
      sip_error_t *e = sip_request_set_priority(r, u > 3 ? 3 : (int)u);
      if (e) return e;
    } else if (!strcmp(key, "timeout")) {
      if (!param_uint(p, &u)) return BAD("parameters.timeout is not an integer >= 0 (microseconds)");
      uint64_t ms = (u + 999) / 1000;
      sip_request_set_timeout_ms(r, ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms);
    }
  }
  return NULL;
}

/* The parameters of an input or output that sip does not have. */
static sip_error_t *refuse_params(const char *what, const char *name,
                                  Inference__ModelInferRequest__InferInputTensor__ParametersEntry
                                      *const *params,
                                  size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char *key = params[i]->key;
    if (!strncmp(key, "shared_memory_", 14))
      return sip_error_new(SIP_UNIMPLEMENTED, "%s '%s': parameter '%s': shared-memory tensors are "
                           "not supported over gRPC; expected the data in the message", what,
                           name, key);
    if (!strcmp(key, "classification"))
      return sip_error_new(SIP_UNIMPLEMENTED, "%s '%s': the classification extension is not "
                           "supported over gRPC; expected the output tensor itself", what, name);
  }
  return NULL;
}

/* Typed contents of `in` as raw bytes (owned, in *buf) for `dt` and
 * `count` elements. */
static sip_error_t *typed_contents(const input_t *in, sip_dtype_t dt, int64_t count,
                                   uint8_t **buf, size_t *nbytes) {
  const Inference__InferTensorContents *c = in->contents;
  const char *field = NULL;
  size_t have = 0;
  switch (dt) {
  case SIP_DTYPE_BOOL: field = "bool_contents", have = c->n_bool_contents; break;
  case SIP_DTYPE_INT8: case SIP_DTYPE_INT16: case SIP_DTYPE_INT32:
    field = "int_contents", have = c->n_int_contents; break;
  case SIP_DTYPE_INT64: field = "int64_contents", have = c->n_int64_contents; break;
  case SIP_DTYPE_UINT8: case SIP_DTYPE_UINT16: case SIP_DTYPE_UINT32:
    field = "uint_contents", have = c->n_uint_contents; break;
  case SIP_DTYPE_UINT64: field = "uint64_contents", have = c->n_uint64_contents; break;
  case SIP_DTYPE_FLOAT32: field = "fp32_contents", have = c->n_fp32_contents; break;
  case SIP_DTYPE_FLOAT64: field = "fp64_contents", have = c->n_fp64_contents; break;
  case SIP_DTYPE_STRING: field = "bytes_contents", have = c->n_bytes_contents; break;
  default:
    return BAD("input '%s': %s has no typed contents field; expected its data in "
               "raw_input_contents", in->name, in->datatype);
  }
  if ((int64_t)have != count) {
    char shape[128];
    sip__shape_str(shape, sizeof shape, (int)in->n_shape, in->shape, ",");
    return BAD("input '%s': contents.%s holds %zu elements; expected %" PRId64 " (shape %s)",
               in->name, field, have, count, shape);
  }
  size_t n = 0;
  if (dt == SIP_DTYPE_STRING) {
    for (size_t i = 0; i < have; i++) {
      if (c->bytes_contents[i].len > UINT32_MAX)
        return BAD("input '%s': element %zu is longer than 4 GiB", in->name, i);
      n += 4 + c->bytes_contents[i].len;
    }
  } else {
    n = have * sip_dtype_size(dt);
  }
  uint8_t *b = sip__malloc(n ? n : 1), *p = b;
  if (!b) return SIP__OOM();
  for (size_t i = 0; i < have; i++) {
    switch (dt) {
    case SIP_DTYPE_BOOL: *p++ = c->bool_contents[i] ? 1 : 0; break;
    case SIP_DTYPE_INT8: { int8_t v = (int8_t)c->int_contents[i]; memcpy(p, &v, 1), p += 1; break; }
    case SIP_DTYPE_INT16: { int16_t v = (int16_t)c->int_contents[i]; memcpy(p, &v, 2), p += 2; break; }
    case SIP_DTYPE_INT32: memcpy(p, &c->int_contents[i], 4), p += 4; break;
    case SIP_DTYPE_INT64: memcpy(p, &c->int64_contents[i], 8), p += 8; break;
    case SIP_DTYPE_UINT8: *p++ = (uint8_t)c->uint_contents[i]; break;
    case SIP_DTYPE_UINT16: { uint16_t v = (uint16_t)c->uint_contents[i]; memcpy(p, &v, 2), p += 2; break; }
    case SIP_DTYPE_UINT32: memcpy(p, &c->uint_contents[i], 4), p += 4; break;
    case SIP_DTYPE_UINT64: memcpy(p, &c->uint64_contents[i], 8), p += 8; break;
    case SIP_DTYPE_FLOAT32: memcpy(p, &c->fp32_contents[i], 4), p += 4; break;
    case SIP_DTYPE_FLOAT64: memcpy(p, &c->fp64_contents[i], 8), p += 8; break;
    case SIP_DTYPE_STRING: {
      uint32_t l = (uint32_t)c->bytes_contents[i].len;
      memcpy(p, &l, 4);
      if (l) memcpy(p + 4, c->bytes_contents[i].data, l);
      p += 4 + l;
      break;
    }
    default: break;
    }
  }
  *buf = b;
  *nbytes = n;
  return NULL;
}

static sip_error_t *decode_input(const infer_req_t *m, size_t i, sip_buf_t *owner,
                                 sip_request_t *r) {
  const input_t *in = m->inputs[i];
  const char *name = in->name;
  if (!name[0]) return BAD("inputs[%zu] has no name; expected the model's input name", i);
  sip_dtype_t dt = sip__dtype_from_protocol(in->datatype);
  if (dt == SIP_DTYPE_INVALID)
    return BAD("input '%s': datatype '%.40s' is not a datatype; expected one of "
               SIP__PROTOCOL_DTYPE_LIST, name, in->datatype);
  if (in->n_shape > SIP_MAX_RANK)
    return BAD("input '%s': shape has %zu dims; at most %d are supported", name, in->n_shape,
               SIP_MAX_RANK);
  int64_t count = 1;
  for (size_t k = 0; k < in->n_shape; k++) {
    if (in->shape[k] < 0)
      return BAD("input '%s': shape[%zu] is %" PRId64 "; expected a size >= 0", name, k,
                 in->shape[k]);
    if (in->shape[k] && count > INT64_MAX / 16 / in->shape[k])
      return BAD("input '%s': shape is too large", name);
    count *= in->shape[k];
  }
  sip_error_t *e = refuse_params("input", name, (void *)in->parameters, in->n_parameters);
  if (e) return e;
  int has_typed = in->contents != NULL;
  sip_tensor_t *t = NULL;
  if (m->n_raw_input_contents) {
    if (has_typed)
      return BAD("input '%s' has both contents and raw_input_contents; expected one of them",
                 name);
    const ProtobufCBinaryData *raw = &m->raw_input_contents[i];
    if (dt != SIP_DTYPE_STRING && raw->len != (uint64_t)count * sip_dtype_size(dt)) {
      char shape[128];
      sip__shape_str(shape, sizeof shape, (int)in->n_shape, in->shape, ",");
      return BAD("input '%s': raw_input_contents[%zu] holds %zu bytes; expected %" PRIu64
                 " (shape %s of %s)", name, i, raw->len, (uint64_t)count * sip_dtype_size(dt),
                 shape, in->datatype);
    }
    t = sip_tensor_new_view(name, dt, (int)in->n_shape, in->shape, raw->len ? raw->data : NULL,
                            raw->len, owner);
  } else {
    if (!has_typed)
      return BAD("input '%s' has no data; expected contents or raw_input_contents", name);
    uint8_t *b = NULL;
    size_t nb = 0;
    if ((e = typed_contents(in, dt, count, &b, &nb))) return e;
    sip_buf_t *bb = sip_buf_wrap(b, nb, sip__free, b);
    if (!bb) return SIP__OOM();
    t = sip_tensor_new_view(name, dt, (int)in->n_shape, in->shape, b, nb, bb);
    sip_buf_unref(bb);
  }
  if (!t) return SIP__OOM();
  if (dt == SIP_DTYPE_STRING && (e = sip_tensor_validate(t))) {
    sip_tensor_free(t);
    return e;
  }
  return sip_request_add_input(r, t);
}

sip_error_t *sip__grpc_decode_infer(const uint8_t *data, size_t len, sip__grpc_infer_t **out) {
  *out = NULL;
  infer_req_t *m = (infer_req_t *)sip__grpc_unpack(&inference__model_infer_request__descriptor,
                                                   data, len);
  if (!m) return BAD("the message is not a valid inference.ModelInferRequest");
  /* The message backs the raw inputs: it lives as long as they do. */
  sip_buf_t *owner = sip_buf_wrap(m, len, release_msg, m);
  if (!owner) return SIP__OOM();
  sip_error_t *e = NULL;
  sip__grpc_infer_t *k = sip__calloc(1, sizeof *k);
  if (!k) {
    e = SIP__OOM();
    goto done;
  }
  if (!m->model_name[0]) {
    e = BAD("model_name is empty; expected the name of a model");
    goto done;
  }
  k->model = sip__strdup(m->model_name);
  k->version = m->model_version[0] ? sip__strdup(m->model_version) : NULL;
  k->id = m->id[0] ? sip__strdup(m->id) : NULL;
  k->req = sip_request_new(m->model_name);
  if (!k->model || (m->model_version[0] && !k->version) || (m->id[0] && !k->id) || !k->req) {
    e = SIP__OOM();
    goto done;
  }
  if (k->version && (e = sip_request_set_version(k->req, k->version))) goto done;
  if ((e = decode_params(m, k->req))) goto done;
  if (m->n_raw_input_contents && m->n_raw_input_contents != m->n_inputs) {
    e = BAD("raw_input_contents has %zu entries; expected one per input (%zu)",
            m->n_raw_input_contents, m->n_inputs);
    goto done;
  }
  for (size_t i = 0; i < m->n_inputs && !e; i++) e = decode_input(m, i, owner, k->req);
  for (size_t i = 0; i < m->n_outputs && !e; i++) {
    const Inference__ModelInferRequest__InferRequestedOutputTensor *o = m->outputs[i];
    if (!o->name[0])
      e = BAD("outputs[%zu] has no name; expected the model's output name", i);
    else if (!(e = refuse_params("output", o->name, (void *)o->parameters, o->n_parameters)))
      e = sip_request_add_output(k->req, o->name);
  }
done:
  sip_buf_unref(owner);
  if (e && k) { /* the model and id stay, for a stream's error answer */
    sip_request_free(k->req);
    k->req = NULL;
  }
  *out = k;
  return e;
}

/* ---- encoding ---------------------------------------------------------------- */

sip_error_t *sip__grpc_encode_infer(const sip__grpc_infer_t *k, const char *version,
                                    const sip_tensor_t *const *outputs, size_t n_outputs,
                                    int stream, uint8_t **out, size_t *len) {
  Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  r.model_name = k->model;
  r.model_version = (char *)(version ? version : "");
  r.id = k->id ? k->id : "";
  Inference__ModelInferResponse__InferOutputTensor *ts = sip__calloc(n_outputs + 1, sizeof *ts);
  Inference__ModelInferResponse__InferOutputTensor **tp = sip__calloc(n_outputs + 1, sizeof *tp);
  ProtobufCBinaryData *raw = sip__calloc(n_outputs + 1, sizeof *raw);
  int64_t(*shapes)[SIP_MAX_RANK] = sip__calloc(n_outputs + 1, sizeof *shapes);
  sip_error_t *e = NULL;
  if (!ts || !tp || !raw || !shapes) {
    e = SIP__OOM();
    goto done;
  }
  for (size_t i = 0; i < n_outputs; i++) {
    const sip_tensor_t *t = outputs[i];
    Inference__ModelInferResponse__InferOutputTensor init =
        INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    ts[i] = init;
    ts[i].name = t->name;
    const char *dt = sip__dtype_protocol_name(t->dtype);
    ts[i].datatype = (char *)(dt ? dt : "");
    memcpy(shapes[i], t->dims, sizeof t->dims[0] * (size_t)(t->rank > 0 ? t->rank : 0));
    ts[i].n_shape = (size_t)(t->rank > 0 ? t->rank : 0);
    ts[i].shape = shapes[i];
    tp[i] = &ts[i];
    raw[i].data = (uint8_t *)t->data;
    raw[i].len = t->nbytes;
  }
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
done:
  sip__free(ts);
  sip__free(tp);
  sip__free(raw);
  sip__free(shapes);
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
