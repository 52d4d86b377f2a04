/* sip — KServe v2 (Open Inference Protocol) bodies <-> engine requests and
 * responses, with Triton's binary tensor data and classification extensions.
 *
 * Requests are parsed with jansson after a linear depth pre-check. Responses
 * are written by hand into one growing buffer: a jansson node per element
 * would cost an allocation per number for tensors of millions of elements,
 * and binary outputs are not copied at all (the body lists segments that
 * point into the output tensors).
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"

/* ---- datatypes --------------------------------------------------------- */

static const struct {
  sip_dtype_t dt;
  const char *name;
} ks_types[] = {
    {SIP_DTYPE_BOOL, "BOOL"},     {SIP_DTYPE_UINT8, "UINT8"},   {SIP_DTYPE_UINT16, "UINT16"},
    {SIP_DTYPE_UINT32, "UINT32"}, {SIP_DTYPE_UINT64, "UINT64"}, {SIP_DTYPE_INT8, "INT8"},
    {SIP_DTYPE_INT16, "INT16"},   {SIP_DTYPE_INT32, "INT32"},   {SIP_DTYPE_INT64, "INT64"},
    {SIP_DTYPE_FLOAT16, "FP16"},  {SIP_DTYPE_FLOAT32, "FP32"},  {SIP_DTYPE_FLOAT64, "FP64"},
    {SIP_DTYPE_STRING, "BYTES"},
};
#define N_KS_TYPES (sizeof ks_types / sizeof ks_types[0])
#define KS_TYPE_LIST "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES"

const char *sip__ks_datatype(sip_dtype_t dt) {
  for (size_t i = 0; i < N_KS_TYPES; i++)
    if (ks_types[i].dt == dt) return ks_types[i].name;
  return NULL;
}

sip_dtype_t sip__ks_dtype(const char *name) {
  for (size_t i = 0; name && i < N_KS_TYPES; i++)
    if (strcmp(ks_types[i].name, name) == 0) return ks_types[i].dt;
  return SIP_DTYPE_INVALID;
}

/* ---- little-endian element access -------------------------------------- */

/* Tensor data is little-endian on the wire and in memory on every platform
 * sip builds for; memcpy keeps unaligned reads defined. */
#define LOAD(T, p, i) \
  __extension__({     \
    T v_;             \
    memcpy(&v_, (const uint8_t *)(p) + (size_t)(i) * sizeof(T), sizeof(T)); \
    v_;               \
  })

static uint32_t rd_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

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
  for (size_t i = 0; i < k->n_outputs; i++) sip__free(k->outputs[i].name);
  sip__free(k->outputs);
  sip__free(k);
}

#define BAD(...) sip_error_new(SIP_INVALID_ARGUMENT, __VA_ARGS__)

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
  switch (f->dt) {
#define INT_CASE(DT, T, LO, HI)                          \
  case DT: {                                             \
    if (iv < (json_int_t)(LO) || iv > (json_int_t)(HI)) goto range; \
    T y = (T)iv;                                         \
    memcpy(f->dst + sizeof(T) * (size_t)i, &y, sizeof y); \
    return 0;                                            \
  }
    INT_CASE(SIP_DTYPE_INT8, int8_t, INT8_MIN, INT8_MAX)
    INT_CASE(SIP_DTYPE_INT16, int16_t, INT16_MIN, INT16_MAX)
    INT_CASE(SIP_DTYPE_INT32, int32_t, INT32_MIN, INT32_MAX)
    INT_CASE(SIP_DTYPE_INT64, int64_t, INT64_MIN, INT64_MAX)
    INT_CASE(SIP_DTYPE_UINT8, uint8_t, 0, UINT8_MAX)
    INT_CASE(SIP_DTYPE_UINT16, uint16_t, 0, UINT16_MAX)
    INT_CASE(SIP_DTYPE_UINT32, uint32_t, 0, UINT32_MAX)
    /* jansson parses integers into int64: larger UINT64 values need binary. */
    INT_CASE(SIP_DTYPE_UINT64, uint64_t, 0, INT64_MAX)
#undef INT_CASE
  default:
    break;
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
  if (!b) return SIP_OOM();
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
  return *out ? NULL : SIP_OOM();
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
  if (!t) return SIP_OOM();
  k->binary_output = 1; /* as Triton: a raw request gets raw outputs */
  return sip_request_add_input(k->req, t);
}

static sip_error_t *decode_params(const json_t *params, sip__ks_request_t *k) {
  if (!params) return NULL;
  if (!json_is_object(params)) return BAD("parameters is not an object");
  json_t *v;
  uint64_t u;
  if ((v = json_object_get(params, "priority"))) {
    if (!as_uint(v, &u)) return BAD("parameters.priority is not an integer >= 0");
    /* KServe/Triton: 0 is the default, 1 the highest; sip has 3 levels, so
     * everything past 3 is the lowest. */
    sip_error_t *e = sip_request_set_priority(k->req, u > 3 ? 3 : (int)u);
    if (e) return e;
  }
  if ((v = json_object_get(params, "timeout"))) {
    if (!as_uint(v, &u)) return BAD("parameters.timeout is not an integer >= 0 (microseconds)");
    uint64_t ms = u / 1000 + (u % 1000 != 0); /* round up: never earlier than asked */
    sip_request_set_timeout_ms(k->req, ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms);
  }
  if ((v = json_object_get(params, "binary_data_output"))) {
    if (!json_is_boolean(v)) return BAD("parameters.binary_data_output is not a boolean");
    k->binary_output = json_is_true(v);
  }
  return NULL;
}

static sip_error_t *decode_input(const json_t *in, size_t idx, size_t json_len,
                                 const uint8_t *bin, size_t bin_len, size_t *bin_off,
                                 sip_buf_t *owner, sip__ks_request_t *k) {
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
    if (json_object_get(params, "shared_memory_region"))
      return sip_error_new(SIP_UNIMPLEMENTED,
                           "input '%s': the shared memory extension is not supported over HTTP; "
                           "send the data in JSON or as binary",
                           name);
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
    if (!t) return SIP_OOM();
  } else {
    if (!data)
      return BAD("input '%s' has neither data nor parameters.binary_data_size", name);
    /* Every JSON element takes at least one byte of the text: a shape asking
     * for more cannot be filled, and must not size an allocation. */
    if ((uint64_t)count > json_len)
      return BAD("input '%s': shape needs %lld elements, more than the request's data holds",
                 name, (long long)count);
    e = json_tensor(name, dt, (int)rank, dims, count, data, &t);
    if (e) return e;
  }
  return sip_request_add_input(k->req, t); /* checks BYTES packing and duplicates */
}

static sip_error_t *decode_outputs(const json_t *outs, sip__ks_request_t *k) {
  if (!outs) return NULL;
  if (!json_is_array(outs)) return BAD("outputs is not an array");
  size_t n = json_array_size(outs);
  if (n > 64) return BAD("outputs lists %zu outputs; at most 64 are supported", n);
  if (!n) return NULL;
  k->outputs = sip__calloc(n, sizeof *k->outputs);
  if (!k->outputs) return SIP_OOM();
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(outs, i);
    if (!json_is_object(o)) return BAD("outputs[%zu] is not an object", i);
    const char *name;
    sip_error_t *e = get_name(o, "outputs", i, &name);
    if (e) return e;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(k->outputs[j].name, name)) return BAD("output '%s' is listed twice", name);
    sip__ks_output_t *ko = &k->outputs[i];
    if (!(ko->name = sip__strdup(name))) return SIP_OOM();
    k->n_outputs = i + 1;
    ko->binary = -1;
    json_t *params = json_object_get(o, "parameters");
    if (params) {
      if (!json_is_object(params)) return BAD("output '%s': parameters is not an object", name);
      if (json_object_get(params, "shared_memory_region"))
        return sip_error_new(SIP_UNIMPLEMENTED,
                             "output '%s': the shared memory extension is not supported over "
                             "HTTP",
                             name);
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

sip_error_t *sip__ks_decode(const char *model, const char *version, const uint8_t *body,
                            size_t len, int64_t header_len, sip_buf_t *owner,
                            const sip_io_desc_t *raw_inputs, size_t n_raw_inputs,
                            sip__ks_request_t **out) {
  *out = NULL;
  sip__ks_request_t *k = sip__calloc(1, sizeof *k);
  if (!k) return SIP_OOM();
  sip_error_t *e = NULL;
  json_t *root = NULL;
  if (!(k->req = sip_request_new(model))) {
    e = SIP_OOM();
    goto done;
  }
  if (version && (e = sip_request_set_version(k->req, version))) goto done;
  if (header_len == 0) {
    e = decode_raw(body, len, owner, raw_inputs, n_raw_inputs, k);
    goto done;
  }
  size_t hlen = header_len < 0 ? len : (size_t)header_len;
  if (header_len > 0 && (uint64_t)header_len > len) {
    e = BAD("Inference-Header-Content-Length is %lld but the body has only %zu bytes",
            (long long)header_len, len);
    goto done;
  }
  if (!sip__ks_depth_ok(body, hlen, SIP_KS_MAX_DEPTH)) {
    e = BAD("request JSON nests deeper than %d levels", SIP_KS_MAX_DEPTH);
    goto done;
  }
  json_error_t jerr;
  root = json_loadb((const char *)body, hlen, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
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
      e = SIP_OOM();
      goto done;
    }
    memcpy(k->id, json_string_value(id), k->id_len + 1);
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
    if ((e = decode_input(json_array_get(inputs, i), i, hlen, bin, bin_len, &bin_off, owner, k)))
      goto done;
  if (bin_off != bin_len) {
    e = BAD("%zu bytes of binary data follow the last binary input; expected none",
            bin_len - bin_off);
    goto done;
  }
  e = decode_outputs(json_object_get(root, "outputs"), k);
done:
  json_decref(root);
  if (e) {
    sip__ks_request_free(k);
    return e;
  }
  *out = k;
  return NULL;
}

/* ---- JSON writer ------------------------------------------------------- */

typedef struct jw {
  char *p;
  size_t n, cap;
  int oom;
} jw_t;

static int jw_reserve(jw_t *w, size_t more) {
  if (w->oom) return -1;
  if (w->cap - w->n > more) return 0;
  size_t cap = w->cap ? w->cap : 256;
  while (cap - w->n <= more) {
    if (cap > SIZE_MAX / 2) return w->oom = 1, -1;
    cap *= 2;
  }
  char *p = sip__realloc(w->p, cap);
  if (!p) return w->oom = 1, -1;
  w->p = p;
  w->cap = cap;
  return 0;
}

static void jw_raw(jw_t *w, const char *s, size_t len) {
  if (jw_reserve(w, len)) return;
  memcpy(w->p + w->n, s, len);
  w->n += len;
  w->p[w->n] = '\0';
}

static void jw_lit(jw_t *w, const char *s) { jw_raw(w, s, strlen(s)); }

static void jw_fmt(jw_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jw_fmt(jw_t *w, const char *fmt, ...) {
  if (jw_reserve(w, 64)) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(w->p + w->n, w->cap - w->n, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= w->cap - w->n) {
    if (jw_reserve(w, (size_t)n + 1)) return;
    va_start(ap, fmt);
    vsnprintf(w->p + w->n, w->cap - w->n, fmt, ap);
    va_end(ap);
  }
  w->n += (size_t)n;
}

/* Length of the UTF-8 sequence at s (at most n bytes), 0 when invalid. */
static size_t utf8_len(const uint8_t *s, size_t n) {
  uint8_t c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

/* A JSON string. strict: fail (-1) on invalid UTF-8; otherwise replace each
 * bad byte with U+FFFD (names and messages must still produce valid JSON). */
static int jw_str(jw_t *w, const char *s, size_t len, int strict) {
  const uint8_t *p = (const uint8_t *)s;
  if (jw_reserve(w, len + 2)) return 0;
  w->p[w->n++] = '"';
  size_t i = 0;
  while (i < len) {
    size_t run = i;
    /* Copy runs of plain bytes at once. */
    while (run < len && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\') run++;
    if (run > i) jw_raw(w, s + i, run - i);
    i = run;
    if (i >= len) break;
    uint8_t c = p[i];
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      jw_raw(w, esc, 2);
      i++;
    } else if (c < 0x20) {
      static const char *const named[] = {['\b'] = "\\b", ['\f'] = "\\f", ['\n'] = "\\n",
                                          ['\r'] = "\\r", ['\t'] = "\\t"};
      if (c < sizeof named / sizeof named[0] && named[c])
        jw_lit(w, named[c]);
      else
        jw_fmt(w, "\\u%04x", c);
      i++;
    } else {
      size_t l = utf8_len(p + i, len - i);
      if (!l) {
        if (strict) return -1;
        jw_lit(w, "\\ufffd");
        i++;
      } else {
        jw_raw(w, s + i, l);
        i += l;
      }
    }
  }
  jw_raw(w, "\"", 1);
  return 0;
}

static void jw_double(jw_t *w, double v, int digits) {
  if (isnan(v))
    jw_lit(w, "NaN");
  else if (isinf(v))
    jw_lit(w, v > 0 ? "Infinity" : "-Infinity");
  else
    jw_fmt(w, "%.*g", digits, v);
}

char *sip__ks_error_json(const char *msg, size_t *len) {
  jw_t w = {0};
  jw_lit(&w, "{\"error\":");
  jw_str(&w, msg ? msg : "", msg ? strlen(msg) : 0, 0);
  jw_lit(&w, "}");
  if (w.oom) {
    sip__free(w.p);
    return NULL;
  }
  if (len) *len = w.n;
  return w.p;
}

/* ---- responses --------------------------------------------------------- */

void sip__ks_body_clear(sip__ks_body_t *b) {
  sip__free(b->json);
  sip__free(b->segs);
  for (size_t i = 0; i < b->n_keep; i++) sip_buf_unref(b->keep[i]);
  sip__free(b->keep);
  memset(b, 0, sizeof *b);
}

/* Writes a tensor's elements as a flat JSON array. */
static sip_error_t *write_data(jw_t *w, const sip_tensor_t *t, int64_t count) {
  const void *d = t->data;
  jw_raw(w, "[", 1);
  if (t->dtype == SIP_DTYPE_STRING) {
    const uint8_t *p = d;
    size_t off = 0;
    for (int64_t i = 0; i < count; i++) {
      if (t->nbytes - off < 4) return sip_error_new(SIP_INTERNAL, "output '%s': bad BYTES data", t->name);
      uint32_t len = rd_u32(p + off);
      off += 4;
      if (t->nbytes - off < len)
        return sip_error_new(SIP_INTERNAL, "output '%s': bad BYTES data", t->name);
      if (i) jw_raw(w, ",", 1);
      if (jw_str(w, (const char *)p + off, len, 1))
        return BAD("output '%s': element %lld is not UTF-8 text, which JSON cannot carry; ask "
                   "for it with parameters.binary_data: true",
                   t->name, (long long)i);
      off += len;
    }
  } else {
    for (int64_t i = 0; i < count && !w->oom; i++) {
      if (i) jw_raw(w, ",", 1);
      switch (t->dtype) {
      case SIP_DTYPE_BOOL: jw_lit(w, LOAD(uint8_t, d, i) ? "true" : "false"); break;
      case SIP_DTYPE_INT8: jw_fmt(w, "%d", LOAD(int8_t, d, i)); break;
      case SIP_DTYPE_INT16: jw_fmt(w, "%d", LOAD(int16_t, d, i)); break;
      case SIP_DTYPE_INT32: jw_fmt(w, "%" PRId32, LOAD(int32_t, d, i)); break;
      case SIP_DTYPE_INT64: jw_fmt(w, "%" PRId64, LOAD(int64_t, d, i)); break;
      case SIP_DTYPE_UINT8: jw_fmt(w, "%u", LOAD(uint8_t, d, i)); break;
      case SIP_DTYPE_UINT16: jw_fmt(w, "%u", LOAD(uint16_t, d, i)); break;
      case SIP_DTYPE_UINT32: jw_fmt(w, "%" PRIu32, LOAD(uint32_t, d, i)); break;
      case SIP_DTYPE_UINT64: jw_fmt(w, "%" PRIu64, LOAD(uint64_t, d, i)); break;
      /* 9 and 17 significant digits read back to the same float / double. */
      case SIP_DTYPE_FLOAT16: jw_double(w, sip__f16_to_f64(LOAD(uint16_t, d, i)), 9); break;
      case SIP_DTYPE_FLOAT32: jw_double(w, LOAD(float, d, i), 9); break;
      case SIP_DTYPE_FLOAT64: jw_double(w, LOAD(double, d, i), 17); break;
      default: return sip_error_new(SIP_INTERNAL, "output '%s' has dtype %d", t->name, t->dtype);
      }
    }
  }
  jw_raw(w, "]", 1);
  return NULL;
}

typedef struct cls_item {
  double v;      /* float types */
  int64_t s;     /* signed integers */
  uint64_t u;    /* unsigned integers */
  int64_t index;
} cls_item_t;

/* Highest value first; ties (and NaNs, last) in index order, so results are
 * deterministic. */
static int cmp_float(const void *a, const void *b) {
  const cls_item_t *x = a, *y = b;
  int xn = isnan(x->v), yn = isnan(y->v);
  if (xn != yn) return xn - yn;
  if (!xn && x->v != y->v) return x->v > y->v ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}
static int cmp_signed(const void *a, const void *b) {
  const cls_item_t *x = a, *y = b;
  if (x->s != y->s) return x->s > y->s ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}
static int cmp_unsigned(const void *a, const void *b) {
  const cls_item_t *x = a, *y = b;
  if (x->u != y->u) return x->u > y->u ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Triton's classification extension: the top-N classes of the last dim as
 * BYTES "value:index", per row of the leading dims. Values print as C's %f
 * (Triton's std::to_string). The result is a STRING tensor in a new buffer. */
static sip_error_t *classify(const sip_tensor_t *t, uint32_t topn, sip_tensor_t **out) {
  sip_dtype_t dt = t->dtype;
  int kind; /* 0 float, 1 signed, 2 unsigned */
  switch (dt) {
  case SIP_DTYPE_FLOAT16: case SIP_DTYPE_FLOAT32: case SIP_DTYPE_FLOAT64: kind = 0; break;
  case SIP_DTYPE_INT8: case SIP_DTYPE_INT16: case SIP_DTYPE_INT32: case SIP_DTYPE_INT64: kind = 1; break;
  case SIP_DTYPE_UINT8: case SIP_DTYPE_UINT16: case SIP_DTYPE_UINT32: case SIP_DTYPE_UINT64: kind = 2; break;
  default:
    return BAD("output '%s': classification needs a numeric output; it is %s", t->name,
               sip__ks_datatype(dt) ? sip__ks_datatype(dt) : "unknown");
  }
  int64_t classes = t->rank ? t->dims[t->rank - 1] : 1, rows = 1;
  for (int i = 0; i + 1 < t->rank; i++) rows *= t->dims[i];
  int64_t n = classes < (int64_t)topn ? classes : (int64_t)topn;
  /* With no rows there is nothing to rank; with rows, classes <= elements,
   * so the scratch array is bounded by the tensor's own size. */
  cls_item_t *items = sip__calloc(rows && classes ? (size_t)classes : 1, sizeof *items);
  if (!items) return SIP_OOM();
  /* "%f" of a double is at most ~320 bytes; indices at most 20. */
  size_t per = 4 + 352;
  if ((uint64_t)rows * (uint64_t)n > SIZE_MAX / per) {
    sip__free(items);
    return SIP_OOM();
  }
  sip_buf_t *b = sip_buf_new((size_t)(rows * n) * per);
  if (!b) {
    sip__free(items);
    return SIP_OOM();
  }
  uint8_t *dst = sip_buf_data(b);
  size_t off = 0;
  const void *d = t->data;
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < classes; c++) {
      int64_t i = r * classes + c;
      cls_item_t *it = &items[c];
      it->index = c;
      switch (dt) {
      case SIP_DTYPE_FLOAT16: it->v = sip__f16_to_f64(LOAD(uint16_t, d, i)); break;
      case SIP_DTYPE_FLOAT32: it->v = LOAD(float, d, i); break;
      case SIP_DTYPE_FLOAT64: it->v = LOAD(double, d, i); break;
      case SIP_DTYPE_INT8: it->s = LOAD(int8_t, d, i); break;
      case SIP_DTYPE_INT16: it->s = LOAD(int16_t, d, i); break;
      case SIP_DTYPE_INT32: it->s = LOAD(int32_t, d, i); break;
      case SIP_DTYPE_INT64: it->s = LOAD(int64_t, d, i); break;
      case SIP_DTYPE_UINT8: it->u = LOAD(uint8_t, d, i); break;
      case SIP_DTYPE_UINT16: it->u = LOAD(uint16_t, d, i); break;
      case SIP_DTYPE_UINT32: it->u = LOAD(uint32_t, d, i); break;
      default: it->u = LOAD(uint64_t, d, i); break;
      }
    }
    qsort(items, (size_t)classes, sizeof *items,
          kind == 0 ? cmp_float : kind == 1 ? cmp_signed : cmp_unsigned);
    for (int64_t j = 0; j < n; j++) {
      char s[352];
      int len = kind == 0   ? snprintf(s, sizeof s, "%f:%" PRId64, items[j].v, items[j].index)
                : kind == 1 ? snprintf(s, sizeof s, "%" PRId64 ":%" PRId64, items[j].s, items[j].index)
                            : snprintf(s, sizeof s, "%" PRIu64 ":%" PRId64, items[j].u, items[j].index);
      if (len < 0 || (size_t)len >= sizeof s) len = 0;
      wr_u32(dst + off, (uint32_t)len);
      memcpy(dst + off + 4, s, (size_t)len);
      off += 4 + (size_t)len;
    }
  }
  sip__free(items);
  int64_t dims[SIP_MAX_RANK];
  int rank = t->rank ? t->rank : 1;
  for (int i = 0; i + 1 < rank; i++) dims[i] = t->dims[i];
  dims[rank - 1] = n;
  *out = sip_tensor_new_view(t->name, SIP_DTYPE_STRING, rank, dims, dst, off, b);
  sip_buf_unref(b);
  return *out ? NULL : SIP_OOM();
}

static int push_seg(sip__ks_body_t *b, const void *data, size_t len) {
  sip__ks_segment_t *s = sip__reallocarray(b->segs, b->n_segs + 1, sizeof *s);
  if (!s) return -1;
  b->segs = s;
  s[b->n_segs].data = data;
  s[b->n_segs].len = len;
  b->n_segs++;
  return 0;
}

static int push_keep(sip__ks_body_t *b, sip_buf_t *buf) {
  sip_buf_t **k = sip__reallocarray(b->keep, b->n_keep + 1, sizeof *k);
  if (!k) return -1;
  b->keep = k;
  k[b->n_keep++] = sip_buf_ref(buf);
  return 0;
}

sip_error_t *sip__ks_encode(const sip__ks_request_t *k, const char *model, const char *version,
                            const sip_tensor_t *const *outputs, size_t n_outputs,
                            sip__ks_body_t *out) {
  memset(out, 0, sizeof *out);
  jw_t w = {0};
  sip_error_t *e = NULL;
  jw_lit(&w, "{\"model_name\":");
  jw_str(&w, model, strlen(model), 0);
  if (version) {
    jw_lit(&w, ",\"model_version\":");
    jw_str(&w, version, strlen(version), 0);
  }
  if (k->id) {
    jw_lit(&w, ",\"id\":");
    jw_str(&w, k->id, k->id_len, 0);
  }
  jw_lit(&w, ",\"outputs\":[");
  for (size_t i = 0; i < n_outputs && !e; i++) {
    const sip_tensor_t *t = outputs[i];
    sip_tensor_t *cls = NULL;
    const sip__ks_output_t *ko = NULL;
    for (size_t j = 0; j < k->n_outputs && !ko; j++)
      if (!strcmp(k->outputs[j].name, t->name)) ko = &k->outputs[j];
    int binary = ko && ko->binary >= 0 ? ko->binary : k->binary_output;
    if (ko && ko->classification) {
      if ((e = classify(t, ko->classification, &cls))) break;
      t = cls;
    }
    int64_t count = sip_tensor_count(t);
    const char *dtn = sip__ks_datatype(t->dtype);
    if (count < 0 || !dtn) {
      e = sip_error_new(SIP_INTERNAL, "output '%s' has an invalid shape or dtype", t->name);
      sip_tensor_free(cls);
      break;
    }
    jw_lit(&w, i ? ",{\"name\":" : "{\"name\":");
    jw_str(&w, t->name, strlen(t->name), 0);
    jw_fmt(&w, ",\"datatype\":\"%s\",\"shape\":[", dtn);
    for (int d = 0; d < t->rank; d++) jw_fmt(&w, "%s%" PRId64, d ? "," : "", t->dims[d]);
    jw_lit(&w, "]");
    if (binary) {
      jw_fmt(&w, ",\"parameters\":{\"binary_data_size\":%zu}}", t->nbytes);
      out->binary = 1;
      if (t->nbytes && (push_seg(out, t->data, t->nbytes) || (cls && push_keep(out, cls->owner))))
        e = SIP_OOM();
    } else {
      jw_lit(&w, ",\"data\":");
      e = write_data(&w, t, count);
      jw_lit(&w, "}");
    }
    sip_tensor_free(cls); /* the body keeps its buffer when it is sent binary */
  }
  jw_lit(&w, "]}");
  if (!e && w.oom) e = SIP_OOM();
  if (e) {
    sip__free(w.p);
    sip__ks_body_clear(out);
    return e;
  }
  out->json = w.p;
  out->json_len = w.n;
  return NULL;
}
