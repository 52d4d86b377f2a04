/* sip — KServe/Triton's system shared memory extension over HTTP.
 *
 * The routes register, unregister and list the regions of the server's one
 * set (core/shm.h; the gRPC front-end serves the same set):
 *   POST /v2/systemsharedmemory/region/{r}/register {"key", "offset", "byte_size"}
 *   POST /v2/systemsharedmemory[/region/{r}]/unregister
 *   GET  /v2/systemsharedmemory[/region/{r}]/status
 * and the codec's part: an input whose parameters name a region is a view of
 * the region's bytes (no copy); an output whose parameters name one is
 * copied into it when the answer is encoded. Views are refcounted, so a
 * region unregistered while a request uses it stays mapped until the request
 * is done. An object its client shrinks under a request does not end the
 * process (core/shm.h): the request's views are checked when it completes
 * (infer.c), and what is written into a region right after the write.
 */
#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "core/core.h"
#include "core/shm.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "http/kserve_impl.h"
#include "server/introspect.h"

/* ---- the routes ------------------------------------------------------------ */

enum MHD_Result sip__http_shm_status(sip__hreq_t *q) {
  sip__shm_info_t *v = NULL;
  size_t n = 0;
  sip_error_t *e = sip__shm_status(sip__server_shm(q->h->s), q->model, &v, &n);
  if (e) return sip__http_send_error(q->conn, e);
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++) {
    /* Offsets and sizes are below 2^63 (sip__shm_register checks). */
    json_t *r = json_pack("{s:s,s:s,s:I,s:I}", "name", v[i].name, "key", v[i].key, "offset",
                          (json_int_t)v[i].offset, "byte_size", (json_int_t)v[i].byte_size);
    if (json_array_append_new(a, r)) {
      json_decref(a);
      a = NULL;
    }
  }
  sip__shm_info_free(v, n);
  return sip__http_send_json(q->conn, 200, a);
}

static enum MHD_Result small_body(sip__hreq_t *q, const char *data, size_t n) {
  return sip__http_small_body(q, data, n, "system shared memory request");
}

/* An integer >= 0 of a JSON object: *out, 1 when present, 0 when absent
 * (then *out is left alone), or an error naming `what`. */
static sip_error_t *get_uint(const json_t *obj, const char *key, const char *what, uint64_t *out,
                             int *present) {
  json_t *v = json_object_get(obj, key);
  *present = v != NULL;
  if (!v) return NULL;
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return BAD("%s%s is not an integer >= 0", what, key);
  *out = (uint64_t)json_integer_value(v);
  return NULL;
}

#define REGISTER_FIELDS "{\"key\": \"/shm_name\", \"offset\": 0, \"byte_size\": N}"

sip_error_t *sip__http_shm_register_args(const json_t *b, const char **key, uint64_t *offset,
                                         uint64_t *byte_size) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)b, k, v) {
    if (strcmp(k, "key") && strcmp(k, "offset") && strcmp(k, "byte_size"))
      return BAD("unknown field '%.64s' in a register request; expected " REGISTER_FIELDS, k);
  }
  json_t *kj = json_object_get(b, "key");
  if (!json_is_string(kj))
    return BAD("key is %s; expected the POSIX shared memory object's name, e.g. \"/shm_name\"",
               kj ? "not a string" : "missing");
  if (strlen(json_string_value(kj)) != json_string_length(kj))
    return BAD("key holds a NUL byte; expected a POSIX shared memory object's name");
  int present;
  *offset = 0;
  sip_error_t *e = get_uint(b, "offset", "", offset, &present);
  if (!e) e = get_uint(b, "byte_size", "", byte_size, &present);
  if (!e && !present) e = BAD("byte_size is missing; expected " REGISTER_FIELDS);
  if (e) return e;
  *key = json_string_value(kj);
  return NULL;
}

static enum MHD_Result register_start(sip__hreq_t *q) {
  json_t *b = sip__http_body_object(q, REGISTER_FIELDS);
  if (!b) return MHD_YES;
  const char *key = NULL;
  uint64_t offset = 0, byte_size = 0;
  sip_error_t *e = sip__http_shm_register_args(b, &key, &offset, &byte_size);
  if (!e) e = sip__shm_register(sip__server_shm(q->h->s), q->model, key, offset, byte_size);
  json_decref(b);
  if (e) return sip__http_send_error(q->conn, e);
  /* The name is made of name characters (the route's rule). */
  sip__log(SIP__LOG_INFO, "shared memory region registered", "region=%s byte_size=%" PRIu64,
           q->model, byte_size);
  return sip__http_send_json(q->conn, 200, json_object());
}

/* Unknown names succeed, as Triton's do. */
static enum MHD_Result unregister_start(sip__hreq_t *q) {
  sip__shm_unregister(sip__server_shm(q->h->s), q->model);
  sip__log(SIP__LOG_INFO, "shared memory unregistered", "region=%s", q->model ? q->model : "*");
  return sip__http_send_json(q->conn, 200, json_object());
}

const sip__http_post_ops_t sip__http_shm_register_ops = {.body = small_body, .start = register_start};
const sip__http_post_ops_t sip__http_shm_unregister_ops = {.body = small_body,
                                                      .start = unregister_start};

/* ---- the codec's part ------------------------------------------------------- */

/* The region, byte size and offset `params` give for `what` ("input 'x'"). */
static sip_error_t *region_params(const json_t *params, const char *what, const char **region,
                                  uint64_t *offset, uint64_t *size) {
  json_t *r = json_object_get(params, "shared_memory_region");
  if (!json_is_string(r) || !json_string_length(r) ||
      strlen(json_string_value(r)) != json_string_length(r))
    return BAD("%s: parameters.shared_memory_region is not a region name; expected the name a "
               "region was registered under", what);
  int present;
  *offset = 0;
  sip_error_t *e = get_uint(params, "shared_memory_byte_size", "parameters.", size, &present);
  if (!e) e = get_uint(params, "shared_memory_offset", "parameters.", offset, &(int){0});
  if (e) {
    /* get_uint's message names the field; say whose it is. */
    sip_error_t *w = BAD("%s: %s", what, sip_error_message(e));
    sip_error_free(e);
    return w;
  }
  if (!present)
    return BAD("%s: parameters.shared_memory_byte_size is missing; expected the byte size of "
               "the data in shared memory region '%s'", what, json_string_value(r));
  *region = json_string_value(r);
  return NULL;
}

/* A view of the region: an unknown region is the request's fault (400, as
 * Triton answers it), not a missing endpoint. */
static sip_error_t *view(sip__shm_set_t *shm, const char *region, uint64_t offset, uint64_t size,
                         const char *what, sip_buf_t **owner, uint8_t **data) {
  sip_error_t *e = sip__shm_view(shm, region, offset, size, what, owner, data);
  if (e && sip_error_code(e) == SIP_NOT_FOUND) {
    sip_error_t *w = BAD("%s", sip_error_message(e));
    sip_error_free(e);
    e = w;
  }
  return e;
}

sip_error_t *sip__ks_shm_input(sip__shm_set_t *shm, const json_t *in, const json_t *params,
                               const char *name, sip_dtype_t dt, int rank, const int64_t *dims,
                               int64_t count, sip_tensor_t **out) {
  *out = NULL;
  if (!shm)
    return sip_error_new(SIP_UNIMPLEMENTED, "input '%s': shared memory is not available here; "
                         "send the data in JSON or as binary", name);
  if (json_object_get(in, "data") || json_object_get(params, "binary_data_size"))
    return BAD("input '%s' has both shared_memory_region and %s; expected one", name,
               json_object_get(in, "data") ? "data" : "binary_data_size");
  char what[1100];
  snprintf(what, sizeof what, "input '%s'", name);
  const char *region;
  uint64_t offset, size;
  sip_error_t *e = region_params(params, what, &region, &offset, &size);
  if (e) return e;
  if (dt != SIP_DTYPE_STRING) {
    size_t es = sip_dtype_size(dt);
    if ((uint64_t)count > SIZE_MAX / es || (uint64_t)count * es != size)
      return BAD("input '%s': shared_memory_byte_size is %" PRIu64 "; shape and %s need %" PRIu64
                 " bytes", name, size, sip__ks_datatype(dt), (uint64_t)count * es);
  }
  sip_buf_t *owner;
  uint8_t *data;
  if ((e = view(shm, region, offset, size, what, &owner, &data))) return e;
  /* In place when aligned (backends may read elements there; the native
   * protocol guarantees 8 bytes too), else a copy. BYTES are always copied:
   * their packing is checked once, and a client rewriting a length after
   * that must not send a backend past the region. */
  if (dt != SIP_DTYPE_STRING && ((uintptr_t)data % 8 == 0 || size == 0))
    *out = sip_tensor_new_view(name, dt, rank, dims, data, (size_t)size, owner);
  else
    *out = sip_tensor_new_copy(name, dt, rank, dims, data, (size_t)size);
  sip_buf_unref(owner);
  return *out ? NULL : SIP__OOM();
}

sip_error_t *sip__ks_shm_output(sip__shm_set_t *shm, const json_t *params, sip__ks_output_t *o) {
  if (!json_object_get(params, "shared_memory_region")) return NULL;
  if (!shm)
    return sip_error_new(SIP_UNIMPLEMENTED, "output '%s': shared memory is not available here",
                         o->name);
  if (json_is_true(json_object_get(params, "binary_data")))
    return BAD("output '%s' asks for both shared_memory_region and binary_data; expected one",
               o->name);
  char what[1100];
  snprintf(what, sizeof what, "output '%s'", o->name);
  const char *region;
  sip_error_t *e = region_params(params, what, &region, &o->shm_offset, &o->shm_size);
  if (!e) e = view(shm, region, o->shm_offset, o->shm_size, what, &o->shm_owner, &o->shm_data);
  if (e) return e;
  return (o->shm_region = sip__strdup(region)) ? NULL : SIP__OOM();
}

sip_error_t *sip__ks_shm_write(const sip__ks_output_t *o, const sip_tensor_t *t) {
  if (t->nbytes > o->shm_size)
    return BAD("output '%s' is %zu bytes, more than the %" PRIu64 " bytes asked into shared "
               "memory region '%s'; expected shared_memory_byte_size >= %zu", t->name, t->nbytes,
               o->shm_size, o->shm_region, t->nbytes);
  /* memmove: an input may have been read from the very same bytes, and a
   * backend may hand that view back as its output. */
  if (t->nbytes && t->data != o->shm_data) memmove(o->shm_data, t->data, t->nbytes);
  /* A region its client shrank meanwhile took nothing (core/shm.h). */
  return sip__shm_check_bytes(o->shm_data, t->nbytes);
}
