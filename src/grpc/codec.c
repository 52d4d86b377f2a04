/* sip — the gRPC inference codec: ModelInferRequest messages (protobuf-c)
 * to engine requests (engine outputs to ModelInferResponse messages:
 * encode.c).
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

/* A varint at p[*i] (n bytes in all) into *v; 0 when cut short. */
static int varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v) {
  *v = 0;
  for (unsigned sh = 0; *i < n && sh < 64; sh += 7) {
    uint8_t b = p[(*i)++];
    *v |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) return 1;
  }
  return 0;
}

/* 0 when a string field of the message in p[0, n) (of type d; nested
 * messages and map entries too) holds a NUL byte. protobuf-c keeps strings
 * as C strings, which end at the first NUL: a region named "a\0b" would be
 * registered as "a", a model "m\0x" looked up as "m". The message unpacked
 * already, so its framing is sound; what this cannot read is left to it. */
static int strings_whole(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n,
                         int depth) {
  size_t i = 0;
  uint64_t tag, v;
  while (depth < 64 && i < n && varint(p, n, &i, &tag)) {
    switch (tag & 7) {
    case 0:
      if (!varint(p, n, &i, &v)) return 1;
      break;
    case 1: i += 8; break;
    case 5: i += 4; break;
    case 2: {
      if (!varint(p, n, &i, &v) || v > n - i) return 1;
      const ProtobufCFieldDescriptor *f =
          protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3));
      if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, (size_t)v)) return 0;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
          !strings_whole(f->descriptor, p + i, (size_t)v, depth + 1))
        return 0;
      i += (size_t)v;
      break;
    }
    default: return 1;
    }
  }
  return 1;
}

ProtobufCMessage *sip__grpc_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                                   size_t len) {
  ProtobufCMessage *m = protobuf_c_message_unpack(d, &sip__grpc_pb_allocator, len, data);
  if (m && !strings_whole(d, data, len, 0)) { /* refused whole rather than read cut */
    sip__grpc_msg_free(m);
    return NULL;
  }
  return m;
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
  for (size_t i = 0; i < k->n_shm_out; i++) {
    sip__free(k->shm_out[i].name);
    sip__free(k->shm_out[i].region);
    sip_buf_unref(k->shm_out[i].owner);
  }
  for (size_t i = 0; i < k->n_cls; i++) sip__free(k->cls_name[i]);
  sip__free(k->cls_name);
  sip__free(k->cls_topn);
  sip__free(k->shm_out);
  sip_request_free(k->req);
  sip__free(k->model);
  sip__free(k->version);
  sip__free(k->id);
  sip__free(k);
}

static void release_msg(void *m) { sip__grpc_msg_free(m); }

/* An integer parameter (int64 or uint64, 0..2^63-1): 1 with *v set, 0 when
 * the parameter holds another type or a value past 2^63-1 (what a negative
 * number cast to uint64 becomes: -1 must not turn into "forever"). */
static int param_uint(const param_t *p, uint64_t *v) {
  if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM &&
      p->int64_param >= 0) {
    *v = (uint64_t)p->int64_param;
    return 1;
  }
  if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM &&
      p->uint64_param <= (uint64_t)INT64_MAX) {
    *v = p->uint64_param;
    return 1;
  }
  return 0;
}

/* The request's parameters, each through the engine's parameter table
 * (sip_request_set_parameter); keys it does not know are other clients'
 * (KServe lets them add their own) and pass. */
static sip_error_t *decode_params(const infer_req_t *m, sip_request_t *r) {
  for (size_t i = 0; i < m->n_parameters; i++) {
    const char *key = m->parameters[i]->key;
    const param_t *p = m->parameters[i]->value;
    if (!p) continue;
    sip_param_value_t v = {0};
    switch (p->parameter_choice_case) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
      v = (sip_param_value_t){.type = SIP_PARAM_BOOL, .b = p->bool_param != 0};
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
      v = (sip_param_value_t){.type = SIP_PARAM_INT, .i = p->int64_param};
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
      v = (sip_param_value_t){.type = SIP_PARAM_UINT, .u = p->uint64_param};
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
      v = (sip_param_value_t){.type = SIP_PARAM_DOUBLE, .d = p->double_param};
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
      v = (sip_param_value_t){.type = SIP_PARAM_STRING, .s = p->string_param};
      break;
    default:
      continue; /* no value set */
    }
    sip_error_t *e = sip_request_set_parameter(r, key, &v);
    if (e && sip_error_code(e) != SIP_NOT_FOUND) return e;
    sip_error_free(e);
  }
  return NULL;
}

typedef Inference__ModelInferRequest__InferInputTensor__ParametersEntry tparam_t;

/* A tensor's shared-memory parameters (region NULL: none), after refusing
 * the ones sip does not have. The input and output parameter entries have
 * the same layout. */
typedef struct shm_ref {
  const char *region;
  uint64_t size, offset;
} shm_ref_t;

/* `topn`: where an output's classification count goes (NULL for inputs,
 * where it is refused); 0 when not asked. */
static sip_error_t *tensor_params(const char *what, const char *name, tparam_t *const *params,
                                  size_t n, shm_ref_t *shm, uint32_t *topn) {
  memset(shm, 0, sizeof *shm);
  if (topn) *topn = 0;
  int has_size = 0;
  for (size_t i = 0; i < n; i++) {
    const char *key = params[i]->key;
    const param_t *p = params[i]->value;
    if (!p) continue;
    if (!strcmp(key, "classification")) {
      uint64_t u = 0;
      if (!topn) return BAD("%s '%s': classification is for outputs", what, name);
      if (!param_uint(p, &u) || u < 1 || u > UINT32_MAX)
        return BAD("%s '%s': classification is not an integer >= 1 (the number of classes)",
                   what, name);
      *topn = (uint32_t)u;
      continue;
    }
    if (!strcmp(key, "shared_memory_region")) {
      if (p->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM ||
          !p->string_param[0])
        return BAD("%s '%s': shared_memory_region is not a region name (string_param)", what,
                   name);
      shm->region = p->string_param;
    } else if (!strcmp(key, "shared_memory_byte_size")) {
      if (!param_uint(p, &shm->size))
        return BAD("%s '%s': shared_memory_byte_size is not an integer >= 0", what, name);
      has_size = 1;
    } else if (!strcmp(key, "shared_memory_offset")) {
      if (!param_uint(p, &shm->offset))
        return BAD("%s '%s': shared_memory_offset is not an integer >= 0", what, name);
    }
  }
  if (shm->region && !has_size)
    return BAD("%s '%s': shared_memory_region without shared_memory_byte_size; expected both",
               what, name);
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

/* raw_input_contents (field 7 of ModelInferRequest) read in place: the
 * message's other fields are unpacked from a copy without them (small),
 * and each raw entry is a view of the received bytes, so a tensor's bytes
 * are never copied on their way in (protobuf-c copies every bytes field it
 * unpacks). */
#define RAW_FIELD 7

typedef struct raw_views {
  const uint8_t **data;
  size_t *len;
  size_t n;
} raw_views_t;

/* Splits `data` into the raw entries (views, in order) and the rest
 * (*rest, owned, NULL when there were no raw entries). 0 when the bytes
 * are not a well-formed message: the caller then unpacks them as they
 * are, and protobuf-c says no. */
static int split_raw(const uint8_t *data, size_t len, raw_views_t *rv, uint8_t **rest,
                     size_t *rest_len) {
  size_t i = 0, n = 0, raw_bytes = 0;
  *rest = NULL;
  *rest_len = 0;
  memset(rv, 0, sizeof *rv);
  while (i < len) { /* first pass: count and check */
    uint64_t key, v;
    if (!varint(data, len, &i, &key)) return 0;
    switch (key & 7) {
    case 0: if (!varint(data, len, &i, &v)) return 0; break;
    case 1: if (len - i < 8) return 0; i += 8; break;
    case 5: if (len - i < 4) return 0; i += 4; break;
    case 2:
      if (!varint(data, len, &i, &v) || v > len - i) return 0;
      if ((key >> 3) == RAW_FIELD) n++, raw_bytes += (size_t)v;
      i += (size_t)v;
      break;
    default: return 0;
    }
  }
  if (!n) return 1;
  rv->data = sip__calloc(n, sizeof *rv->data);
  rv->len = sip__calloc(n, sizeof *rv->len);
  *rest = sip__malloc(len - raw_bytes); /* the other fields: the tensors' bytes stay put */
  if (!rv->data || !rv->len || !*rest) return -1;
  for (i = 0; i < len;) { /* second pass: views out, everything else copied */
    size_t start = i;
    uint64_t key, v = 0;
    varint(data, len, &i, &key);
    switch (key & 7) {
    case 0: varint(data, len, &i, &v); break;
    case 1: i += 8; break;
    case 5: i += 4; break;
    default:
      varint(data, len, &i, &v);
      if ((key >> 3) == RAW_FIELD) {
        rv->data[rv->n] = data + i;
        rv->len[rv->n++] = (size_t)v;
        i += (size_t)v;
        continue;
      }
      i += (size_t)v;
    }
    memcpy(*rest + *rest_len, data + start, i - start);
    *rest_len += i - start;
  }
  return 1;
}

static void raw_views_clear(raw_views_t *rv) {
  sip__free(rv->data);
  sip__free(rv->len);
  memset(rv, 0, sizeof *rv);
}

/* Decodes input i; *raw_i counts the raw_input_contents entries used. */
static sip_error_t *decode_input(const infer_req_t *m, const raw_views_t *rv, size_t i,
                                 size_t *raw_i, sip_buf_t *owner, sip__shm_set_t *set,
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
  shm_ref_t shm;
  sip_error_t *e = tensor_params("input", name, (tparam_t *const *)in->parameters,
                                 in->n_parameters, &shm, NULL);
  if (e) return e;
  int has_typed = in->contents != NULL;
  uint64_t want = (uint64_t)count * sip_dtype_size(dt);
  char shape[128];
  sip__shape_str(shape, sizeof shape, (int)in->n_shape, in->shape, ",");
  sip_tensor_t *t = NULL;
  if (shm.region) {
    if (has_typed)
      return BAD("input '%s' has both contents and shared_memory_region; expected one of them",
                 name);
    if (!set)
      return sip_error_new(SIP_UNIMPLEMENTED, "input '%s': shared memory is not available here",
                           name);
    if (dt != SIP_DTYPE_STRING && shm.size != want)
      return BAD("input '%s': shared_memory_byte_size is %" PRIu64 "; expected %" PRIu64
                 " (shape %s of %s)", name, shm.size, want, shape, in->datatype);
    char what[300];
    snprintf(what, sizeof what, "input '%s'", name);
    sip_buf_t *view = NULL;
    uint8_t *p = NULL;
    if ((e = sip__shm_view(set, shm.region, shm.offset, shm.size, what, &view, &p))) return e;
    t = sip_tensor_new_view(name, dt, (int)in->n_shape, in->shape, p, shm.size, view);
    sip_buf_unref(view);
  } else if (rv->n) {
    if (has_typed)
      return BAD("input '%s' has both contents and raw_input_contents; expected one of them",
                 name);
    size_t ri = (*raw_i)++;
    if (ri >= rv->n)
      return BAD("raw_input_contents has %zu entries; expected one per input not in shared "
                 "memory", rv->n);
    if (dt != SIP_DTYPE_STRING && rv->len[ri] != want)
      return BAD("input '%s': raw_input_contents[%zu] holds %zu bytes; expected %" PRIu64
                 " (shape %s of %s)", name, ri, rv->len[ri], want, shape, in->datatype);
    t = sip_tensor_new_view(name, dt, (int)in->n_shape, in->shape,
                            rv->len[ri] ? (void *)rv->data[ri] : NULL, rv->len[ri], owner);
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

/* An output asked in shared memory: its region viewed now, written once
 * the answer is in. */
static sip_error_t *shm_output(sip__grpc_infer_t *k, const char *name, const shm_ref_t *shm,
                               sip__shm_set_t *set) {
  if (!set)
    return sip_error_new(SIP_UNIMPLEMENTED, "output '%s': shared memory is not available here",
                         name);
  sip__grpc_shm_out_t *o = &k->shm_out[k->n_shm_out];
  char what[300];
  snprintf(what, sizeof what, "output '%s'", name);
  sip_error_t *e = sip__shm_view(set, shm->region, shm->offset, shm->size, what, &o->owner,
                                 &o->data);
  if (e) return e;
  k->n_shm_out++;
  o->size = shm->size;
  o->offset = shm->offset;
  o->name = sip__strdup(name);
  o->region = sip__strdup(shm->region);
  if (!o->name || !o->region) return SIP__OOM();
  /* The backend may write straight into the region (no copy then). */
  return o->size ? sip_request_set_output_buffer(k->req, name, o->data, o->size, o->owner)
                 : NULL;
}

sip_error_t *sip__grpc_decode_infer(const uint8_t *data, size_t len, sip__shm_set_t *set,
                                    sip__grpc_infer_t **out) {
  return sip__grpc_decode_infer_in(data, len, NULL, set, out);
}

sip_error_t *sip__grpc_decode_infer_in(const uint8_t *data, size_t len, sip_buf_t *backing,
                                       sip__shm_set_t *set, sip__grpc_infer_t **out) {
  return sip__grpc_decode_infer_as(data, len, backing, set, NULL, out);
}

sip_error_t *sip__grpc_decode_infer_as(const uint8_t *data, size_t len, sip_buf_t *backing,
                                       sip__shm_set_t *set, const char *model,
                                       sip__grpc_infer_t **out) {
  *out = NULL;
  raw_views_t rv;
  uint8_t *rest = NULL;
  size_t rest_len = 0;
  int split = split_raw(data, len, &rv, &rest, &rest_len);
  sip_buf_t *raw_owner = NULL; /* what the raw views point into */
  if (split > 0 && rv.n) {
    if (backing) {
      raw_owner = sip_buf_ref(backing);
    } else { /* nobody keeps the received bytes: one copy of them, not one per tensor */
      uint8_t *copy = sip__malloc(len ? len : 1);
      if (copy) memcpy(copy, data, len);
      raw_owner = copy ? sip_buf_wrap(copy, len, sip__free, copy) : NULL; /* frees on failure */
      for (size_t i = 0; raw_owner && i < rv.n; i++) rv.data[i] = copy + (rv.data[i] - data);
    }
  }
  infer_req_t *m = split < 0 || (rv.n && !raw_owner) ? NULL
                   : (infer_req_t *)sip__grpc_unpack(&inference__model_infer_request__descriptor,
                                                      rv.n ? rest : data, rv.n ? rest_len : len);
  sip__free(rest);
  if (!m) {
    int oom = split < 0 || (rv.n && !raw_owner);
    raw_views_clear(&rv);
    sip_buf_unref(raw_owner);
    return oom ? SIP__OOM() : BAD("the message is not a valid inference.ModelInferRequest");
  }
  /* The message backs what was unpacked from it: it lives as long as that does. */
  sip_buf_t *owner = sip_buf_wrap(m, len, release_msg, m);
  if (!owner) { /* sip_buf_wrap freed the message */
    raw_views_clear(&rv);
    sip_buf_unref(raw_owner);
    return SIP__OOM();
  }
  /* split_raw reads every wire type protobuf-c does: a message it could
   * not split does not unpack either, so raw entries are always views. */
  if (!raw_owner) raw_owner = sip_buf_ref(owner);
  sip_error_t *e = NULL;
  sip__grpc_infer_t *k = sip__calloc(1, sizeof *k);
  if (!k) {
    e = SIP__OOM();
    goto done;
  }
  if (!model) model = m->model_name;
  if (!model[0]) {
    e = BAD("model_name is empty; expected the name of a model");
    goto done;
  }
  k->model = sip__strdup(model);
  k->version = m->model_version[0] ? sip__strdup(m->model_version) : NULL;
  k->id = m->id[0] ? sip__strdup(m->id) : NULL;
  k->req = sip_request_new(model);
  if (!k->model || (m->model_version[0] && !k->version) || (m->id[0] && !k->id) || !k->req) {
    e = SIP__OOM();
    goto done;
  }
  if (k->version && (e = sip_request_set_version(k->req, k->version))) goto done;
  if ((e = decode_params(m, k->req)) || (k->id && (e = sip_request_set_client_id(k->req, k->id))))
    goto done;
  size_t raw_i = 0;
  for (size_t i = 0; i < m->n_inputs && !e; i++)
    e = decode_input(m, &rv, i, &raw_i, raw_owner, set, k->req);
  if (!e && raw_i != rv.n)
    e = BAD("raw_input_contents has %zu entries; expected one per input not in shared memory "
            "(%zu)", rv.n, raw_i);
  if (!e && m->n_outputs &&
      (!(k->shm_out = sip__calloc(m->n_outputs, sizeof *k->shm_out)) ||
       !(k->cls_name = sip__calloc(m->n_outputs, sizeof *k->cls_name)) ||
       !(k->cls_topn = sip__calloc(m->n_outputs, sizeof *k->cls_topn))))
    e = SIP__OOM();
  for (size_t i = 0; i < m->n_outputs && !e; i++) {
    const Inference__ModelInferRequest__InferRequestedOutputTensor *o = m->outputs[i];
    shm_ref_t shm;
    uint32_t topn = 0;
    if (!o->name[0])
      e = BAD("outputs[%zu] has no name; expected the model's output name", i);
    else if (!(e = tensor_params("output", o->name, (tparam_t *const *)o->parameters,
                                 o->n_parameters, &shm, &topn)) &&
             !(e = sip_request_add_output(k->req, o->name)) && shm.region)
      e = shm_output(k, o->name, &shm, set);
    if (!e && topn && shm.region)
      e = BAD("output '%s' asks for both classification and shared memory; expected one",
              o->name);
    if (!e && topn) {
      if (!(k->cls_name[k->n_cls] = sip__strdup(o->name))) e = SIP__OOM();
      else k->cls_topn[k->n_cls++] = topn;
    }
  }
done:
  sip_buf_unref(owner);
  sip_buf_unref(raw_owner);
  raw_views_clear(&rv);
  if (e && k) { /* the model and id stay, for a stream's error answer */
    sip_request_free(k->req);
    k->req = NULL;
  }
  *out = k;
  return e;
}
