/* libFuzzer target for the HTTP request -> inference request decoding
 * (src/http/kserve_decode.c), and the response encoding of what it decoded;
 * and for the system shared memory extension (src/http/shm.c): its
 * parameters on inputs and outputs, and the register route's body.
 *
 * Input: byte 0 picks the framing (all JSON; JSON header + binary data with
 * the header length from bytes 1-2; or a raw binary body for a one-input
 * model whose dtype and shape byte 1 picks; or, 3, a shared memory region's
 * registration: its name up to the first newline, put in the route's path,
 * then the body); the rest is the HTTP body, in an
 * exactly sized heap buffer owned by a sip_buf (so binary inputs are views
 * and any read past the body is an ASan report). Beyond "no crash, no leak"
 * it checks the contract: exactly one of error and result; errors carry the
 * documented codes; decoded tensors validate; and the decoded inputs,
 * encoded back as a response with the request's output options, give JSON
 * that jansson parses (NaN/Infinity aside) followed by exactly the announced
 * binary sections. Inputs and outputs may name two shared memory regions of
 * a memfd ("r": 4096 bytes, "odd": 64 bytes from offset 3, misaligned):
 * views stay inside them and outputs are written into them, viewed through
 * a request's scope of the set as the front-end does. A registration
 * body that passes the route's checks is registered (over the memfd, not
 * /dev/shm), listed and unregistered. JSON bodies are decoded twice, by the
 * fast path for number arrays (src/http/kserve_numbers.c) and by the classic
 * decoder, which must agree: the same error, or the same tensors bit for bit.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/shm.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "session/engine.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

static void release(void *ctx) { free(ctx); }

static int memfd = -1;
static sip__shm_set_t *regions; /* what requests may name */

/* The regions, made once (they live as long as the process). */
static void make_regions(void) {
  if (regions) return;
  memfd = memfd_create("fuzz_http", MFD_CLOEXEC);
  CHECK(memfd >= 0 && ftruncate(memfd, 4096) == 0);
  regions = sip__shm_set_new(0);
  CHECK(regions);
  CHECK(!sip__shm_register_fd(regions, "r", dup(memfd), "memfd", 0, 4096));
  CHECK(!sip__shm_register_fd(regions, "odd", dup(memfd), "memfd", 3, 64));
}

/* A region name in the register route's path: matched exactly when it is
 * 1..SIP__SHM_MAX_NAME name characters, and then handed over whole. */
static void check_route(const uint8_t *name, size_t n) {
  char url[2 * SIP__SHM_MAX_NAME + 64];
  if (n > 2 * SIP__SHM_MAX_NAME || memchr(name, '\0', n)) return;
  snprintf(url, sizeof url, "/v2/systemsharedmemory/region/%.*s/register", (int)n,
           (const char *)name);
  int good = n >= 1 && n <= SIP__SHM_MAX_NAME;
  for (size_t i = 0; i < n; i++) good &= sip__name_char((char)name[i]);
  char *m = NULL, *v = NULL;
  const sip__http_route_t *r = sip__http_route_match(url, &m, &v);
  CHECK(!r == !good);
  if (r) CHECK(r->kind == R_SYS_SHM && r->post && m && strlen(m) == n && !memcmp(m, name, n) && !v);
  free(m);
  free(v);
}

/* A registration body: the route's checks, then the region's own (on a set
 * of its own, so requests never see it). */
static void check_register(const uint8_t *body, size_t len) {
  json_t *b = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, NULL);
  if (!b || !json_is_object(b)) {
    json_decref(b);
    return;
  }
  const char *key = NULL;
  uint64_t offset = 1, size = 1;
  sip_error_t *e = sip__http_shm_register_args(b, &key, &offset, &size);
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT && *sip_error_message(e));
    sip_error_free(e);
    json_decref(b);
    return;
  }
  CHECK(key && strlen(key) == json_string_length(json_object_get(b, "key")));
  sip_error_t *ke = sip__shm_check_key(key);
  CHECK(!ke || sip_error_code(ke) == SIP_INVALID_ARGUMENT);
  sip_error_free(ke);
  sip__shm_set_t *set = sip__shm_set_new(1);
  CHECK(set);
  e = sip__shm_register_fd(set, "f", dup(memfd), key, offset, size);
  sip__shm_info_t *v;
  size_t n;
  CHECK(!sip__shm_status(set, NULL, &v, &n));
  if (e) {
    sip_code_t c = sip_error_code(e);
    CHECK(c == SIP_INVALID_ARGUMENT || c == SIP_RESOURCE_EXHAUSTED);
    CHECK(n == 0);
    /* Only a range inside the 4096-byte object registers. */
    CHECK(size == 0 || offset > 4096 || size > 4096 - offset || c == SIP_RESOURCE_EXHAUSTED);
    sip_error_free(e);
  } else {
    CHECK(size > 0 && offset <= 4096 && size <= 4096 - offset);
    CHECK(n == 1 && v[0].offset == offset && v[0].byte_size == size && !strcmp(v[0].key, key));
  }
  sip__shm_info_free(v, n);
  sip__shm_unregister(set, NULL);
  sip__shm_set_free(set);
  json_decref(b);
}

static void check_response(const sip__ks_request_t *k, const sip_request_t *r) {
  sip__ks_body_t b;
  sip_error_t *e = sip__ks_encode(k, "model", "1", (const sip_tensor_t *const *)r->inputs,
                                  r->n_inputs, &b);
  if (e) {
    sip_code_t c = sip_error_code(e);
    CHECK(c == SIP_INVALID_ARGUMENT || c == SIP_RESOURCE_EXHAUSTED);
    sip_error_free(e);
    return;
  }
  CHECK(b.json && strlen(b.json) == b.json_len);
  json_error_t jerr;
  json_t *doc = json_loadb(b.json, b.json_len, JSON_ALLOW_NUL, &jerr); /* BYTES may hold NUL */
  if (!doc) {
    /* The only non-JSON tokens the encoder writes. */
    CHECK(strstr(b.json, "NaN") || strstr(b.json, "Infinity"));
  } else {
    json_t *outs = json_object_get(doc, "outputs");
    CHECK(json_array_size(outs) == r->n_inputs);
    size_t announced = 0, segs = 0;
    for (size_t i = 0; i < json_array_size(outs); i++) {
      json_t *o = json_array_get(outs, i), *p = json_object_get(o, "parameters");
      json_t *sz = json_object_get(p, "binary_data_size");
      if (json_object_get(p, "shared_memory_region")) /* written there, not sent */
        CHECK(!sz && !json_object_get(o, "data") &&
              json_integer_value(json_object_get(p, "shared_memory_byte_size")) <= 4096);
      if (sz) {
        announced += (size_t)json_integer_value(sz);
        CHECK(b.binary);
      }
    }
    for (size_t i = 0; i < b.n_segs; i++) segs += b.segs[i].len;
    CHECK(announced == segs);
    json_decref(doc);
  }
  sip__ks_body_clear(&b);
}

/* The classic decoder's answer for the same body equals (e, k). */
static void check_classic(const char *version, const uint8_t *body, size_t len, int64_t header_len,
                          sip_buf_t *owner, const sip_io_desc_t *raw, const sip_error_t *e,
                          const sip__ks_request_t *k) {
  sip__ks_request_t *c = NULL;
  sip__ks_json_classic(1);
  sip_error_t *ce =
      sip__ks_decode_shm(regions, "model", version, body, len, header_len, owner, raw, 1, &c);
  sip__ks_json_classic(0);
  CHECK(!e == !ce);
  if (e) {
    CHECK(sip_error_code(e) == sip_error_code(ce));
    CHECK(!strcmp(sip_error_message(e), sip_error_message(ce)));
    sip_error_free(ce);
    return;
  }
  const sip_request_t *a = k->req, *b = c->req;
  CHECK(a->n_inputs == b->n_inputs && a->n_outputs == b->n_outputs);
  CHECK(k->binary_output == c->binary_output && k->n_outputs == c->n_outputs);
  for (size_t i = 0; i < a->n_inputs; i++) {
    const sip_tensor_t *x = a->inputs[i], *y = b->inputs[i];
    CHECK(!strcmp(x->name, y->name) && x->dtype == y->dtype && x->rank == y->rank);
    CHECK(!memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)x->rank));
    CHECK(x->nbytes == y->nbytes && (!x->nbytes || !memcmp(x->data, y->data, x->nbytes)));
  }
  sip__ks_request_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  make_regions();
  int mode = data[0] % 4;
  if (mode == 3) {
    const uint8_t *nl = memchr(data + 3, '\n', size - 3);
    size_t name_n = nl ? (size_t)(nl - (data + 3)) : 0;
    check_route(data + 3, name_n);
    check_register(data + 3 + name_n + (nl != NULL), size - 3 - name_n - (nl != NULL));
    return 0;
  }
  int64_t header_len = -1;
  sip_io_desc_t raw = {.name = (char *)"x", .rank = 2, .dims = {-1, 4}};
  static const sip_dtype_t raw_types[] = {SIP_DTYPE_FLOAT32, SIP_DTYPE_STRING, SIP_DTYPE_UINT8,
                                          SIP_DTYPE_FLOAT16};
  const uint8_t *body = data + 3;
  size_t len = size - 3;
  if (mode == 1) {
    header_len = (int64_t)((data[1] | (size_t)data[2] << 8) % (len + 1));
    if (header_len == 0) header_len = -1;
  } else if (mode == 2) {
    header_len = 0;
    raw.dtype = raw_types[data[1] % 4];
    if (data[2] & 1) raw.rank = -1;
    if (data[2] & 2) raw.dims[1] = -1;
  }
  /* The body, exactly sized, refcounted as the front-end holds it. */
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy) return 0;
  if (len) memcpy(copy, body, len);
  sip_buf_t *owner = sip_buf_wrap(copy, len, release, copy);
  if (!owner) return 0;
  sip__ks_request_t *k = (sip__ks_request_t *)1;
  /* Through a request's scope of the regions, as the front-end decodes. */
  sip__shm_set_t *scope = sip__shm_scope_new(regions);
  CHECK(scope);
  sip_error_t *e = sip__ks_decode_shm(scope, "model", (data[1] & 0x80) ? "1" : NULL, copy,
                                      len, header_len, owner, &raw, 1, &k);
  if (header_len != 0)
    check_classic((data[1] & 0x80) ? "1" : NULL, copy, len, header_len, owner, &raw, e, k);
  sip_buf_unref(owner);
  if (e) {
    sip_code_t c = sip_error_code(e);
    CHECK(c == SIP_INVALID_ARGUMENT || c == SIP_UNIMPLEMENTED || c == SIP_RESOURCE_EXHAUSTED);
    CHECK(strlen(sip_error_message(e)) > 0);
    sip_error_free(e);
    sip__shm_set_free(scope);
    return 0;
  }
  CHECK(k && k->req && !strcmp(k->req->pool, "model"));
  sip_request_t *r = k->req;
  for (size_t i = 0; i < r->n_inputs; i++) {
    sip_error_t *v = sip_tensor_validate(r->inputs[i]);
    CHECK(!v);
    CHECK(sip__ks_datatype(r->inputs[i]->dtype));
  }
  CHECK(r->priority >= 0 && r->priority <= 3);
  CHECK(k->n_outputs == r->n_outputs && k->n_outputs <= 64);
  /* Outputs "named" like the inputs: rename so options apply to them. */
  for (size_t i = 0; i < r->n_inputs && i < k->n_outputs; i++) {
    char *n = strdup(k->outputs[i].name);
    if (!n) break;
    free(r->inputs[i]->name); /* sip__free is free() (src/core/alloc.c) */
    r->inputs[i]->name = n;
  }
  check_response(k, r);
  /* The memfd regions are sealed, not guarded: nothing to report. */
  CHECK(!sip__shm_scope_check(scope));
  sip__shm_set_free(scope);
  sip__ks_request_free(k);
  return 0;
}
