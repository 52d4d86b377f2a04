/* sip — KServe v2 (Open Inference Protocol) request bodies -> engine
 * requests, with Triton's binary tensor data extension; the KServe datatype
 * names. Requests are parsed with jansson after a linear depth pre-check.
 * The answers are written by kserve_encode.c.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "http/kserve_impl.h"

/* ---- datatypes --------------------------------------------------------- */

/* The protocol's names (one table in src/core/tensor.c). */
#define KS_TYPE_LIST SIP__PROTOCOL_DTYPE_LIST

const char *sip__ks_datatype(sip_dtype_t dt) { return sip__dtype_protocol_name(dt); }

sip_dtype_t sip__ks_dtype(const char *name) { return sip__dtype_from_protocol(name); }

/* ---- depth pre-check --------------------------------------------------- */

int sip__ks_depth_ok(const uint8_t *p, size_t n, int max_depth) {
  int depth = 0, in_str = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return 0;
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  return 1;
}

/* ---- requests ---------------------------------------------------------- */

void sip__ks_request_free(sip__ks_request_t *k) {
  if (!k) return;
  sip_request_free(k->req);
  sip__free(k->id);
  for (size_t i = 0; i < k->n_outputs; i++) {
    sip__free(k->outputs[i].name);
    sip__free(k->outputs[i].shm_region);
    sip_buf_unref(k->outputs[i].shm_owner);
  }
  sip__free(k->outputs);
  sip__free(k);
}


/* A non-negative JSON integer. */
static int as_uint(const json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
  *out = (uint64_t)json_integer_value(v);
  return 1;
}

/* A name: a non-empty string without NUL of at most 1024 bytes. */
static sip_error_t *get_name(const json_t *obj, const char *what, size_t idx, const char **out) {
  json_t *n = json_object_get(obj, "name");
  if (!json_is_string(n))
    return BAD("%s[%zu].name is %s; expected a string", what, idx, n ? "not a string" : "missing");
  const char *s = json_string_value(n);
  size_t len = json_string_length(n);
  if (len == 0 || len > 1024 || strlen(s) != len)
    return BAD("%s[%zu].name has %zu bytes%s; expected 1..1024 bytes without NUL", what, idx, len,
               strlen(s) != len ? " with a NUL" : "");
  *out = s;
  return NULL;
}

typedef struct jfloat {
  int ok;
  double v;
} jfloat_t;

/* A number for a floating-point input: JSON numbers, plus the strings
 * "NaN", "Infinity"/"Inf" and "-Infinity"/"-Inf" JSON has no literal for. */
static jfloat_t as_float(const json_t *v) {
  jfloat_t r = {1, 0};
  if (json_is_number(v)) {
    r.v = json_number_value(v);
  } else if (json_is_string(v)) {
    const char *s = json_string_value(v);
    if (!strcmp(s, "NaN") || !strcmp(s, "nan"))
      r.v = NAN;
    else if (!strcmp(s, "Infinity") || !strcmp(s, "Inf") || !strcmp(s, "inf"))
      r.v = INFINITY;
    else if (!strcmp(s, "-Infinity") || !strcmp(s, "-Inf") || !strcmp(s, "-inf"))
      r.v = -INFINITY;
    else
      r.ok = 0;
  } else {
    r.ok = 0;
  }
  return r;
}

/* Walks nested or flat "data" in row-major order, calling put() on each
 * leaf. Nesting is bounded by the depth pre-check. */
typedef struct fill {
  sip_dtype_t dt;
  uint8_t *dst;    /* fixed-size types: count * size bytes */
  int64_t count;   /* elements expected */
  int64_t i;       /* elements written */
  /* BYTES: a first pass measures, a second one packs. */
  size_t str_bytes;
  const char *input;
  sip_error_t *err;
} fill_t;

static int put(fill_t *f, const json_t *v) {
  if (f->i >= f->count) {
    f->i++; /* only counted: the size error names the total */
    return 0;
  }
  int64_t i = f->i++;
  json_int_t iv = 0;
  switch (f->dt) {
  case SIP_DTYPE_BOOL:
    if (!json_is_boolean(v)) goto bad;
    f->dst[i] = json_is_true(v) ? 1 : 0;
    return 0;
  case SIP_DTYPE_FLOAT16:
  case SIP_DTYPE_FLOAT32:
  case SIP_DTYPE_FLOAT64: {
    jfloat_t x = as_float(v);
    if (!x.ok) goto bad;
    if (f->dt == SIP_DTYPE_FLOAT64) {
      memcpy(f->dst + 8 * i, &x.v, 8);
    } else if (f->dt == SIP_DTYPE_FLOAT32) {
      float y = (float)x.v;
      memcpy(f->dst + 4 * i, &y, 4);
    } else {
      uint16_t h = sip__f64_to_f16(x.v);
      memcpy(f->dst + 2 * i, &h, 2);
    }
    return 0;
  }
  case SIP_DTYPE_STRING: {
    if (!json_is_string(v)) goto bad;
    size_t len = json_string_length(v);
    if (len > UINT32_MAX) goto bad;
    if (f->dst) {
      wr_u32(f->dst + f->str_bytes, (uint32_t)len);
      memcpy(f->dst + f->str_bytes + 4, json_string_value(v), len);
    }
    f->str_bytes += 4 + len;
    return 0;
  }
  default:
    break;
  }
  /* Integers: exact JSON integers within the type's range. */
  if (!json_is_integer(v)) goto bad;
  iv = json_integer_value(v);
  switch (sip__ks_store_int(f->dt, f->dst, i, iv)) {
  case 1: return 0;
  case 0: goto range;
  default: break;
  }
bad:
  f->err = BAD("input '%s': data element %lld is %s; expected %s", f->input, (long long)i,
               json_is_string(v) ? "a string" : json_is_boolean(v) ? "a boolean"
               : json_is_null(v) ? "null" : json_is_real(v) ? "a non-integer number"
               : json_is_object(v) ? "an object" : "a number",
               f->dt == SIP_DTYPE_BOOL ? "true or false"
               : f->dt == SIP_DTYPE_STRING ? "a string"
               : (f->dt == SIP_DTYPE_FLOAT16 || f->dt == SIP_DTYPE_FLOAT32 ||
                  f->dt == SIP_DTYPE_FLOAT64)
                   ? "a number (or \"NaN\", \"Infinity\", \"-Infinity\")"
                   : "an integer");
  return -1;
range:
  f->err = BAD("input '%s': data element %lld (%lld) is out of range for %s", f->input,
               (long long)i, (long long)iv, sip__ks_datatype(f->dt));
  return -1;
}

static int walk(fill_t *f, const json_t *v) {
  if (!json_is_array(v)) return put(f, v);
  size_t n = json_array_size(v);
  for (size_t j = 0; j < n; j++)
    if (walk(f, json_array_get(v, j))) return -1;
  return 0;
}

/* Builds the tensor of a JSON "data" input. */
static sip_error_t *json_tensor(const char *name, sip_dtype_t dt, int rank, const int64_t *dims,
                                int64_t count, const json_t *data, sip_tensor_t **out) {
  fill_t f = {.dt = dt, .count = count, .input = name};
  size_t nbytes;
  if (dt == SIP_DTYPE_STRING) {
    /* Pass 1 measures the packed size (and checks every element). */
    if (walk(&f, data)) return f.err;
    if (f.i != count) goto count_err;
    nbytes = f.str_bytes;
  } else {
    nbytes = (size_t)count * sip_dtype_size(dt);
  }
  sip_buf_t *b = sip_buf_new(nbytes);
  if (!b) return SIP__OOM();
  f.dst = sip_buf_data(b);
  f.i = 0;
  f.str_bytes = 0;
  if (walk(&f, data)) {
    sip_buf_unref(b);
    return f.err;
  }
  if (f.i != count) {
    sip_buf_unref(b);
    goto count_err;
  }
  *out = sip_tensor_new_view(name, dt, rank, dims, f.dst, nbytes, b);
  sip_buf_unref(b);
  return *out ? NULL : SIP__OOM();
count_err:
  return BAD("input '%s': data has %lld elements; its shape needs %lld", name, (long long)f.i,
             (long long)count);
}

/* Number of packed BYTES elements in p[0..n), or -1 when the packing is off. */
static int64_t count_strings(const uint8_t *p, size_t n) {
  int64_t c = 0;
  size_t off = 0;
  while (off < n) {
    if (n - off < 4) return -1;
    uint32_t len = rd_u32(p + off);
    off += 4;
    if (n - off < len) return -1;
    off += len;
    c++;
  }
  return c;
}

/* A view of body bytes, or a copy when they are misaligned or unowned:
 * backends may read elements in place, and the native protocol guarantees
 * them 8-byte alignment too. */
static sip_tensor_t *binary_tensor(const char *name, sip_dtype_t dt, int rank, const int64_t *dims,
                                   const uint8_t *p, size_t n, sip_buf_t *owner) {
  if (owner && ((uintptr_t)p % 8 == 0 || dt == SIP_DTYPE_STRING || n == 0))
    return sip_tensor_new_view(name, dt, rank, dims, p, n, owner);
  return sip_tensor_new_copy(name, dt, rank, dims, p, n);
}

static sip_error_t *decode_raw(const uint8_t *body, size_t len, sip_buf_t *owner,
                               const sip_io_desc_t *in, size_t n_in, sip__ks_request_t *k) {
  if (n_in != 1)
    return BAD("a raw binary request body is the model's single input, but the model has %zu "
               "inputs; send a JSON header (Inference-Header-Content-Length) naming them",
               n_in);
  sip_dtype_t dt = in->dtype;
  int64_t count;
  if (dt == SIP_DTYPE_STRING) {
    count = count_strings(body, len);
    if (count < 0)
      return BAD("raw binary input '%s': BYTES elements must each be a 4-byte little-endian "
                 "length followed by that many bytes",
                 in->name);
  } else {
    size_t es = sip_dtype_size(dt);
    if (!es) return BAD("raw binary input '%s' has an unsupported dtype", in->name);
    if (len % es)
      return BAD("raw binary input '%s': %zu bytes is not a whole number of %s elements (%zu "
                 "bytes each)",
                 in->name, len, sip__ks_datatype(dt) ? sip__ks_datatype(dt) : "?", es);
    count = (int64_t)(len / es);
  }
  int64_t dims[SIP_MAX_RANK];
  int rank = in->rank;
  if (rank < 0) {
    rank = 1;
    dims[0] = count;
  } else {
    int dyn = -1;
    int64_t fixed = 1;
    for (int i = 0; i < rank; i++) {
      dims[i] = in->dims[i];
      if (dims[i] < 0) {
        if (dyn >= 0)
          return BAD("raw binary input '%s' has more than one dynamic dim; send a JSON header "
                     "(Inference-Header-Content-Length) with its shape",
                     in->name);
        dyn = i;
      } else if (dims[i] && fixed > INT64_MAX / dims[i]) {
        return BAD("raw binary input '%s': the model's shape overflows", in->name);
      } else {
        fixed *= dims[i];
      }
    }
    if (dyn >= 0) {
      if (fixed == 0 || count % fixed)
        return BAD("raw binary input '%s': %lld elements do not fill its shape (other dims "
                   "hold %lld)",
                   in->name, (long long)count, (long long)fixed);
      dims[dyn] = count / fixed;
    } else if (fixed != count) {
      return BAD("raw binary input '%s': %lld elements; its fixed shape needs %lld", in->name,
                 (long long)count, (long long)fixed);
    }
  }
  sip_tensor_t *t = binary_tensor(in->name, dt, rank, dims, body, len, owner);
  if (!t) return SIP__OOM();
  k->binary_output = 1; /* as Triton: a raw request gets raw outputs */
  return sip_request_add_input(k->req, t);
}

/* The request's "parameters": binary_data_output is this front-end's own;
 * every other key goes through the engine's parameter table
 * (sip_request_set_parameter), which ignores none it knows; keys it does not
 * know are other clients' (KServe lets them add their own) and pass. */
static sip_error_t *decode_params(const json_t *params, sip__ks_request_t *k) {
  if (!params) return NULL;
  if (!json_is_object(params)) return BAD("parameters is not an object");
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)params, key, v) {
    if (!strcmp(key, "binary_data_output")) {
      if (!json_is_boolean(v)) return BAD("parameters.binary_data_output is not a boolean");
      k->binary_output = json_is_true(v);
      continue;
    }
    sip_param_value_t pv = {.type = SIP_PARAM_JSON, .json = v};
    sip_error_t *e = sip_request_set_parameter(k->req, key, &pv);
    if (e && sip_error_code(e) != SIP_NOT_FOUND) return e;
    sip_error_free(e);
  }
  return NULL;
}

/* What the model takes, when known: datatypes are checked against it. */
typedef struct model_inputs {
  const char *model;
  const sip_io_desc_t *d;
  size_t n;
  sip__ks_cut_t *cut; /* the fast path's number arrays, NULL: classic */
} model_inputs_t;

/* The tensor of a data array the fast path cut out (kserve_numbers.c), NULL
 * when it gives up: the caller then decodes the request the classic way. */
static sip_tensor_t *cut_tensor(sip__ks_cut_t *c, int span, const char *name, sip_dtype_t dt,
                                int rank, const int64_t *dims, int64_t count) {
  size_t es = sip_dtype_size(dt);
  sip_buf_t *b = es && dt != SIP_DTYPE_STRING ? sip_buf_new((size_t)count * es) : NULL;
  if (!b) return NULL;
  const sip__ks_span_t *sp = &c->spans[span];
  sip_tensor_t *t = NULL;
  if (!sip__ks_fill((const char *)c->text + sp->off, sp->len, dt, sip_buf_data(b), count))
    t = sip_tensor_new_view(name, dt, rank, dims, sip_buf_data(b), (size_t)count * es, b);
  sip_buf_unref(b);
  c->used += t != NULL;
  return t;
}

static sip_error_t *check_datatype(const model_inputs_t *mi, const char *name, sip_dtype_t dt) {
  for (size_t i = 0; i < mi->n; i++) {
    const sip_io_desc_t *d = &mi->d[i];
    if (strcmp(d->name, name)) continue;
    if (d->dtype == SIP_DTYPE_INVALID || d->dtype == dt || !sip__ks_datatype(d->dtype)) return NULL;
    return BAD("inference input '%s' data-type is '%s', but model '%s' expects '%s'", name,
               sip__ks_datatype(dt), mi->model, sip__ks_datatype(d->dtype));
  }
  return NULL; /* an unknown input: the engine says so */
}

static sip_error_t *decode_input(const json_t *in, size_t idx, size_t json_len,
                                 const uint8_t *bin, size_t bin_len, size_t *bin_off,
                                 sip_buf_t *owner, const model_inputs_t *mi,
                                 sip__shm_set_t *shm, sip__ks_request_t *k) {
  if (!json_is_object(in)) return BAD("inputs[%zu] is not an object", idx);
  const char *name;
  sip_error_t *e = get_name(in, "inputs", idx, &name);
  if (e) return e;
  json_t *dtj = json_object_get(in, "datatype");
  if (!json_is_string(dtj))
    return BAD("input '%s': datatype is %s; expected one of " KS_TYPE_LIST, name,
               dtj ? "not a string" : "missing");
  sip_dtype_t dt = sip__ks_dtype(json_string_value(dtj));
  if (dt == SIP_DTYPE_INVALID) {
    if (!strcmp(json_string_value(dtj), "BF16"))
      return sip_error_new(SIP_UNIMPLEMENTED, "input '%s': datatype BF16 is not supported by sip",
                           name);
    return BAD("input '%s': datatype '%.32s' is unknown; expected one of " KS_TYPE_LIST, name,
               json_string_value(dtj));
  }
  if ((e = check_datatype(mi, name, dt))) return e;
  json_t *shape = json_object_get(in, "shape");
  if (!json_is_array(shape))
    return BAD("input '%s': shape is %s; expected an array of integers >= 0", name,
               shape ? "not an array" : "missing");
  size_t rank = json_array_size(shape);
  if (rank > SIP_MAX_RANK)
    return BAD("input '%s': shape has %zu dims; at most %d are supported", name, rank,
               SIP_MAX_RANK);
  int64_t dims[SIP_MAX_RANK], count = 1;
  for (size_t i = 0; i < rank; i++) {
    uint64_t d;
    if (!as_uint(json_array_get(shape, i), &d))
      return BAD("input '%s': shape[%zu] is not an integer >= 0", name, i);
    dims[i] = (int64_t)d;
    if (d && (uint64_t)count > (uint64_t)INT64_MAX / d)
      return BAD("input '%s': shape overflows", name);
    count *= (int64_t)d;
  }
  json_t *params = json_object_get(in, "parameters");
  json_t *bds = NULL;
  if (params) {
    if (!json_is_object(params)) return BAD("input '%s': parameters is not an object", name);
    if (json_object_get(params, "shared_memory_region")) { /* shm.c */
      sip_tensor_t *t;
      e = sip__ks_shm_input(shm, in, params, name, dt, (int)rank, dims, count, &t);
      return e ? e : sip_request_add_input(k->req, t);
    }
    bds = json_object_get(params, "binary_data_size");
  }
  json_t *data = json_object_get(in, "data");
  sip_tensor_t *t = NULL;
  if (bds) {
    uint64_t n;
    if (!as_uint(bds, &n)) return BAD("input '%s': binary_data_size is not an integer >= 0", name);
    if (data) return BAD("input '%s' has both data and binary_data_size; expected one", name);
    if (!bin)
      return BAD("input '%s' has binary_data_size but the request has no binary section; set "
                 "the Inference-Header-Content-Length header to the JSON's length",
                 name);
    if (n > bin_len - *bin_off)
      return BAD("input '%s': binary_data_size %llu but only %zu bytes of binary data remain",
                 name, (unsigned long long)n, bin_len - *bin_off);
    if (dt != SIP_DTYPE_STRING) {
      size_t es = sip_dtype_size(dt);
      if ((uint64_t)count > SIZE_MAX / es || (uint64_t)count * es != n)
        return BAD("input '%s': binary_data_size is %llu; shape and %s need %llu bytes", name,
                   (unsigned long long)n, json_string_value(dtj),
                   (unsigned long long)((uint64_t)count * es));
    }
    t = binary_tensor(name, dt, (int)rank, dims, bin + *bin_off, (size_t)n, owner);
    *bin_off += (size_t)n;
    if (!t) return SIP__OOM();
  } else {
    if (!data)
      return BAD("input '%s' has neither data nor parameters.binary_data_size", name);
    /* Every JSON element takes at least one byte of the text: a shape asking
     * for more cannot be filled, and must not size an allocation. */
    if ((uint64_t)count > json_len)
      return BAD("input '%s': shape needs %lld elements, more than the request's data holds",
                 name, (long long)count);
    int span = json_is_string(data) ? sip__ks_cut_index(mi->cut, json_string_value(data),
                                                         json_string_length(data)) : -1;
    if (span >= 0) {
      if (!(t = cut_tensor(mi->cut, span, name, dt, (int)rank, dims, count)))
        return BAD("input '%s': data left to the classic decoder", name);
    } else if ((e = json_tensor(name, dt, (int)rank, dims, count, data, &t))) {
      return e;
    }
  }
  return sip_request_add_input(k->req, t); /* checks BYTES packing and duplicates */
}

static sip_error_t *decode_outputs(const json_t *outs, sip__shm_set_t *shm,
                                   sip__ks_request_t *k) {
  if (!outs) return NULL;
  if (!json_is_array(outs)) return BAD("outputs is not an array");
  size_t n = json_array_size(outs);
  if (n > 64) return BAD("outputs lists %zu outputs; at most 64 are supported", n);
  if (!n) return NULL;
  k->outputs = sip__calloc(n, sizeof *k->outputs);
  if (!k->outputs) return SIP__OOM();
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(outs, i);
    if (!json_is_object(o)) return BAD("outputs[%zu] is not an object", i);
    const char *name;
    sip_error_t *e = get_name(o, "outputs", i, &name);
    if (e) return e;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(k->outputs[j].name, name)) return BAD("output '%s' is listed twice", name);
    sip__ks_output_t *ko = &k->outputs[i];
    if (!(ko->name = sip__strdup(name))) return SIP__OOM();
    k->n_outputs = i + 1;
    ko->binary = -1;
    json_t *params = json_object_get(o, "parameters");
    if (params) {
      if (!json_is_object(params)) return BAD("output '%s': parameters is not an object", name);
      if ((e = sip__ks_shm_output(shm, params, ko))) return e; /* shm.c */
      /* The backend may write straight into the region (no copy then). */
      if (ko->shm_region && ko->shm_size &&
          (e = sip_request_set_output_buffer(k->req, name, ko->shm_data, ko->shm_size,
                                             ko->shm_owner)))
        return e;
      json_t *v = json_object_get(params, "binary_data");
      if (v) {
        if (!json_is_boolean(v)) return BAD("output '%s': binary_data is not a boolean", name);
        ko->binary = json_is_true(v);
      }
      if ((v = json_object_get(params, "classification"))) {
        uint64_t c;
        if (!as_uint(v, &c) || c > UINT32_MAX)
          return BAD("output '%s': classification is not an integer 0..4294967295", name);
        ko->classification = (uint32_t)c;
      }
    }
    if ((e = sip_request_add_output(k->req, name))) return e;
  }
  return NULL;
}

/* Decodes with the JSON text `jtext` standing for body[0..header_len) (the
 * body itself, or its cut, mi->cut). */
static sip_error_t *decode(sip__shm_set_t *shm, const char *model, const char *version,
                           const uint8_t *body, size_t len, int64_t header_len, sip_buf_t *owner,
                           const sip_io_desc_t *model_inputs, size_t n_model_inputs,
                           const char *jtext, size_t jlen, sip__ks_cut_t *cut,
                           sip__ks_request_t **out) {
  const model_inputs_t mi = {model, model_inputs, model_inputs ? n_model_inputs : 0, cut};
  *out = NULL;
  sip__ks_request_t *k = sip__calloc(1, sizeof *k);
  if (!k) return SIP__OOM();
  sip_error_t *e = NULL;
  json_t *root = NULL;
  if (!(k->req = sip_request_new(model))) {
    e = SIP__OOM();
    goto done;
  }
  if (version && (e = sip_request_set_version(k->req, version))) goto done;
  if (header_len == 0) {
    e = decode_raw(body, len, owner, model_inputs, n_model_inputs, k);
    goto done;
  }
  size_t hlen = header_len < 0 ? len : (size_t)header_len;
  if (header_len > 0 && (uint64_t)header_len > len) {
    e = BAD("Inference-Header-Content-Length is %lld but the body has only %zu bytes",
            (long long)header_len, len);
    goto done;
  }
  if (!cut && !sip__ks_depth_ok(body, hlen, SIP__KS_MAX_DEPTH)) {
    e = BAD("request JSON nests deeper than %d levels", SIP__KS_MAX_DEPTH);
    goto done;
  }
  json_error_t jerr;
  root = json_loadb(jtext, jlen, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
  if (!root) {
    e = BAD("request JSON is malformed: %s (line %d, column %d)", jerr.text, jerr.line,
            jerr.column);
    goto done;
  }
  if (!json_is_object(root)) {
    e = BAD("request JSON is not an object; expected {\"inputs\": [...]}");
    goto done;
  }
  json_t *id = json_object_get(root, "id");
  if (id) {
    if (!json_is_string(id)) {
      e = BAD("id is not a string");
      goto done;
    }
    k->id_len = json_string_length(id);
    if (!(k->id = sip__malloc(k->id_len + 1))) {
      e = SIP__OOM();
      goto done;
    }
    memcpy(k->id, json_string_value(id), k->id_len + 1);
    if ((e = sip_request_set_client_id(k->req, k->id))) goto done;
  }
  if ((e = decode_params(json_object_get(root, "parameters"), k))) goto done;
  json_t *inputs = json_object_get(root, "inputs");
  if (!json_is_array(inputs)) {
    e = BAD("inputs is %s; expected an array of tensors", inputs ? "not an array" : "missing");
    goto done;
  }
  const uint8_t *bin = header_len > 0 ? body + hlen : NULL;
  size_t bin_len = header_len > 0 ? len - hlen : 0, bin_off = 0;
  for (size_t i = 0; i < json_array_size(inputs); i++)
    if ((e = decode_input(json_array_get(inputs, i), i, hlen, bin, bin_len, &bin_off, owner, &mi,
                          shm, k)))
      goto done;
  if (bin_off != bin_len) {
    e = BAD("%zu bytes of binary data follow the last binary input; expected none",
            bin_len - bin_off);
    goto done;
  }
  e = decode_outputs(json_object_get(root, "outputs"), shm, k);
done:
  json_decref(root);
  if (e) {
    sip__ks_request_free(k);
    return e;
  }
  *out = k;
  return NULL;
}

static atomic_int classic_only;

void sip__ks_json_classic(int on) { atomic_store(&classic_only, on); }

sip_error_t *sip__ks_decode(const char *model, const char *version, const uint8_t *body,
                            size_t len, int64_t header_len, sip_buf_t *owner,
                            const sip_io_desc_t *model_inputs, size_t n_model_inputs,
                            sip__ks_request_t **out) {
  return sip__ks_decode_shm(NULL, model, version, body, len, header_len, owner, model_inputs,
                            n_model_inputs, out);
}

sip_error_t *sip__ks_decode_shm(sip__shm_set_t *shm, const char *model, const char *version,
                                const uint8_t *body, size_t len, int64_t header_len,
                                sip_buf_t *owner, const sip_io_desc_t *model_inputs,
                                size_t n_model_inputs, sip__ks_request_t **out) {
  size_t hlen = header_len < 0 ? len : (size_t)header_len;
  sip__ks_cut_t cut;
  /* The fast path first; where it gives up or fails, the classic decoder
   * decides (and words the error). */
  if (header_len && hlen <= len && !atomic_load(&classic_only) &&
      sip__ks_cut(body, hlen, SIP__KS_MAX_DEPTH, &cut) > 0) {
    sip_error_t *e = decode(shm, model, version, body, len, header_len, owner, model_inputs,
                            n_model_inputs, cut.json, cut.json_len, &cut, out);
    int all = cut.used == cut.n_spans;
    sip__ks_cut_free(&cut);
    if (!e && all) return NULL;
    if (!e) sip__ks_request_free(*out);
    sip_error_free(e);
  }
  return decode(shm, model, version, body, len, header_len, owner, model_inputs, n_model_inputs,
                (const char *)body, hlen, NULL, out);
}

int sip__ks_error_malformed(const sip_error_t *e) {
  /* The wordings decode() gives a body that is not a KServe request at all
   * (the JSON itself, its nesting, the binary header's length). */
  const char *m = e ? sip_error_message(e) : "";
  return !strncmp(m, "request JSON ", 13) || !strncmp(m, "Inference-Header-Content-Length ", 32);
}
