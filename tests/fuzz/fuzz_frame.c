/* libFuzzer target for the native protocol codec (src/transport/frame.c).
 *
 * The input is a stream of frames, as a connection would carry: each header
 * is decoded with a 1 MiB limit, then its payload with the decoder for its
 * type, from an exactly sized heap copy (so any read past the payload is an
 * ASan report). Beyond "no crash, no leak" it checks the contract: exactly
 * one of error and result, errors carry the documented codes, decoded
 * tensors lie 8-byte aligned inside the payload and validate, and decoded
 * requests and responses survive encode → decode unchanged (abort on any
 * mismatch), shared memory references included; the shared memory
 * messages (SHM_REGISTER, SHM_UNREGISTER, SHM_STATUS) too, and SUBSCRIBE
 * (decode, then encode → the same bytes) and EVENT (a JSON object, as
 * clients read it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/core.h"
#include "transport/frame.h"

#define MAX_PAYLOAD ((size_t)1 << 20)

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

static void release(void *ctx) { free(ctx); }

/* `refs` (may be NULL) holds the shared memory references of the tensors. */
static void check_tensor_at(const sip_tensor_t *t, const uint8_t *p, size_t len,
                            const sip__wire_shm_ref_t *refs, size_t i) {
  CHECK(t && t->name && strlen(t->name) <= SIP__MAX_NAME);
  CHECK(t->dtype >= SIP_DTYPE_FLOAT32 && t->dtype <= SIP_DTYPE_UINT64);
  CHECK(t->rank >= 0 && t->rank <= SIP_MAX_RANK);
  for (int k = 0; k < t->rank; k++) CHECK(t->dims[k] >= 0);
  if (refs && refs[i].region) {
    /* In shared memory: no bytes in the payload, the size checked. */
    CHECK(refs[i].region[0] && strlen(refs[i].region) <= SIP__MAX_NAME);
    CHECK(!t->data && !t->owner && t->nbytes == refs[i].size);
    if (t->dtype != SIP_DTYPE_STRING) {
      sip_error_t *e = sip_tensor_validate(t);
      CHECK(!e);
    }
    return;
  }
  const uint8_t *d = t->data;
  CHECK(d >= p && (size_t)(d - p) <= len && t->nbytes <= len - (size_t)(d - p));
  CHECK((size_t)(d - p) % 8 == 0);
  sip_error_t *e = sip_tensor_validate(t);
  CHECK(!e);
}

static void check_same_tensor(const sip_tensor_t *a, const sip_tensor_t *b) {
  CHECK(strcmp(a->name, b->name) == 0);
  CHECK(a->dtype == b->dtype && a->rank == b->rank && a->nbytes == b->nbytes);
  for (int i = 0; i < a->rank; i++) CHECK(a->dims[i] == b->dims[i]);
  CHECK(!a->nbytes || !a->data || memcmp(a->data, b->data, a->nbytes) == 0);
}

/* Two sets of references (n entries, or NULL) say the same. */
static void check_same_refs(const sip__wire_shm_ref_t *a, const sip__wire_shm_ref_t *b,
                            size_t n) {
  CHECK(!a == !b);
  for (size_t i = 0; a && i < n; i++) {
    CHECK(!a[i].region == !b[i].region);
    if (!a[i].region) continue;
    CHECK(strcmp(a[i].region, b[i].region) == 0);
    CHECK(a[i].offset == b[i].offset && a[i].size == b[i].size);
  }
}

/* Decodes the single frame in w (header + payload); returns its payload. */
static const uint8_t *reframe(const sip__wbuf_t *w, uint16_t type, uint64_t id, size_t want_len,
                              size_t *len) {
  CHECK(!w->oom && w->len >= SIP__FRAME_HEADER_SIZE);
  sip__frame_header_t h;
  sip_error_t *e = sip__frame_header_decode(w->data, SIZE_MAX, &h);
  CHECK(!e);
  CHECK(h.type == type && h.request_id == id && h.flags == 0);
  CHECK(w->len == SIP__FRAME_HEADER_SIZE + (size_t)h.length);
  /* Same fields and sizes, so the same length (padding bytes may differ). */
  CHECK(h.length == want_len);
  *len = h.length;
  return w->data + SIP__FRAME_HEADER_SIZE;
}

static void round_trip_request(const sip__wire_request_t *r, uint64_t id, size_t len) {
  sip__wbuf_t w = {0};
  /* Parameters (flag bit 0) travel too: without them the frame is shorter. */
  sip__encode_infer_request_shm(&w, id, r->pool, r->priority, r->timeout_ms,
                                (const char *const *)r->outputs, r->output_shm, r->n_outputs,
                                (const sip_tensor_t *const *)r->inputs, r->input_shm,
                                r->n_inputs, r->parameters);
  size_t len2;
  const uint8_t *p2 = reframe(&w, SIP__MSG_INFER_REQUEST, id, len, &len2);
  sip__wire_request_t r2;
  sip_error_t *e = sip__decode_infer_request(p2, len2, NULL, &r2);
  CHECK(!e);
  CHECK(strcmp(r->pool, r2.pool) == 0);
  CHECK(r->priority == r2.priority && r->timeout_ms == r2.timeout_ms);
  CHECK(r->n_outputs == r2.n_outputs && r->n_inputs == r2.n_inputs);
  CHECK(!r->parameters == !r2.parameters &&
        (!r->parameters || strcmp(r->parameters, r2.parameters) == 0));
  if (r->parameters) { /* what the server does with them (handlers.c) */
    sip_request_t *req = sip_request_new("p");
    sip_error_t *pe = req ? sip__apply_request_parameters(req, r->parameters) : NULL;
    CHECK(!pe || sip_error_code(pe) == SIP_INVALID_ARGUMENT ||
          sip_error_code(pe) == SIP_RESOURCE_EXHAUSTED);
    sip_error_free(pe);
    sip_request_free(req);
  }
  for (size_t i = 0; i < r->n_outputs; i++) CHECK(strcmp(r->outputs[i], r2.outputs[i]) == 0);
  /* A request that flags output destinations but has no outputs loses
   * the flag (nothing to say), so compare the destinations only when
   * there are outputs. */
  if (r->n_outputs) check_same_refs(r->output_shm, r2.output_shm, r->n_outputs);
  check_same_refs(r->input_shm, r2.input_shm, r->n_inputs);
  for (size_t i = 0; i < r->n_inputs; i++) {
    check_tensor_at(r2.inputs[i], p2, len2, r2.input_shm, i);
    check_same_tensor(r->inputs[i], r2.inputs[i]);
  }
  sip__wire_request_clear(&r2);
  sip__wbuf_free(&w);
}

static void round_trip_response(const sip__wire_response_t *r, uint64_t id, const uint8_t *p,
                                size_t len) {
  sip__wbuf_t w = {0};
  sip__encode_infer_response_shm(&w, id, r->code, r->message, r->queue_us, r->compute_us,
                                 r->total_us, (const sip_tensor_t *const *)r->outputs,
                                 r->output_shm, r->n_outputs,
                                 r->replayed ? SIP__RESP_REPLAYED : 0);
  /* The message is kept as a C string: an embedded NUL shortens it, and so
   * the frame (alignment is monotone, so it never grows). */
  uint32_t mlen = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                  (uint32_t)p[7] << 24;
  CHECK(!w.oom);
  sip__frame_header_t h;
  sip_error_t *e = sip__frame_header_decode(w.data, SIZE_MAX, &h);
  CHECK(!e);
  CHECK(h.type == SIP__MSG_INFER_RESPONSE && h.request_id == id);
  size_t len2 = h.length;
  const uint8_t *p2 = w.data + SIP__FRAME_HEADER_SIZE;
  CHECK(w.len == SIP__FRAME_HEADER_SIZE + len2);
  if (strlen(r->message) == mlen)
    CHECK(len2 == len);
  else
    CHECK(strlen(r->message) < mlen && len2 <= len);
  sip__wire_response_t r2;
  e = sip__decode_infer_response(p2, len2, NULL, &r2);
  CHECK(!e);
  CHECK(r->code == r2.code && strcmp(r->message, r2.message) == 0);
  CHECK(r->queue_us == r2.queue_us && r->compute_us == r2.compute_us &&
        r->total_us == r2.total_us);
  CHECK(r->n_outputs == r2.n_outputs);
  check_same_refs(r->output_shm, r2.output_shm, r->n_outputs);
  for (size_t i = 0; i < r->n_outputs; i++) {
    check_tensor_at(r2.outputs[i], p2, len2, r2.output_shm, i);
    check_same_tensor(r->outputs[i], r2.outputs[i]);
  }
  sip__wire_response_clear(&r2);
  sip__wbuf_free(&w);
}

static int is_request_zeroed(const sip__wire_request_t *r) {
  return !r->pool && !r->outputs && !r->n_outputs && !r->inputs && !r->n_inputs &&
         !r->input_shm && !r->output_shm && !r->parameters;
}

/* SHM_REGISTER, SHM_UNREGISTER, SHM_STATUS: decode, then encode → the
 * same bytes. */
static sip_error_t *shm_message(const sip__frame_header_t *h, const uint8_t *p, size_t len) {
  char *name = NULL;
  uint64_t offset = 0, size = 0;
  sip_error_t *e = h->type == SIP__MSG_SHM_REGISTER
                       ? sip__decode_shm_register(p, len, &name, &offset, &size)
                       : sip__decode_shm_name(p, len, h->type, &name);
  if (e) {
    CHECK(!name);
    return e;
  }
  CHECK(name && strlen(name) <= SIP__MAX_NAME);
  sip__wbuf_t w = {0};
  if (h->type == SIP__MSG_SHM_REGISTER)
    sip__encode_shm_register(&w, h->request_id, name, offset, size);
  else
    sip__encode_shm_name(&w, h->type, h->request_id, name);
  size_t l2;
  const uint8_t *p2 = reframe(&w, h->type, h->request_id, len, &l2);
  CHECK(memcmp(p2, p, len) == 0);
  sip__wbuf_free(&w);
  sip__free(name);
  return NULL;
}

/* SUBSCRIBE: decode, then encode → the same bytes. */
static sip_error_t *subscribe_message(const sip__frame_header_t *h, const uint8_t *p,
                                      size_t len) {
  char *pool = NULL;
  uint32_t buffer = 0;
  sip_error_t *e = sip__decode_subscribe(p, len, &pool, &buffer);
  if (e) {
    CHECK(!pool);
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT);
    return e;
  }
  CHECK(pool && strlen(pool) <= SIP__MAX_NAME && buffer <= SIP__MAX_EVENT_BUFFER);
  sip__wbuf_t w = {0};
  sip__encode_subscribe(&w, h->request_id, pool, buffer);
  size_t l2;
  const uint8_t *p2 = reframe(&w, h->type, h->request_id, len, &l2);
  CHECK(memcmp(p2, p, len) == 0);
  sip__wbuf_free(&w);
  sip__free(pool);
  return NULL;
}

/* EVENT: a JSON object; re-encoded frames carry the same bytes. */
static void event_message(const uint8_t *p, size_t len) {
  json_error_t je;
  json_t *o = json_loadb((const char *)p, len, 0, &je);
  if (json_is_object(o)) {
    sip__wbuf_t w = {0};
    sip__encode_event(&w, (const char *)p, len);
    size_t l2;
    const uint8_t *p2 = reframe(&w, SIP__MSG_EVENT, 0, len, &l2);
    CHECK(l2 == len && memcmp(p2, p, len) == 0);
    sip__wbuf_free(&w);
  }
  json_decref(o);
}

/* Returns 0 to stop the stream (the server closes the connection). */
static int one_frame(const sip__frame_header_t *h, const uint8_t *payload) {
  size_t len = h->length;
  /* An exactly sized copy owned by a refcounted buffer, as the server holds
   * a received frame. */
  uint8_t *p = malloc(len ? len : 1);
  CHECK(p);
  if (len) memcpy(p, payload, len);
  sip_buf_t *owner = sip_buf_wrap(p, len, release, p);
  CHECK(owner);
  int ok = 1;
  sip_error_t *e = NULL;
  switch (h->type) {
    case SIP__MSG_INFER_REQUEST: {
      sip__wire_request_t r;
      e = sip__decode_infer_request(p, len, owner, &r);
      if (e) {
        CHECK(is_request_zeroed(&r));
        break;
      }
      CHECK(r.pool && strlen(r.pool) <= SIP__MAX_NAME);
      CHECK(r.priority >= 0 && r.priority <= 3);
      CHECK(!r.n_outputs || r.outputs);
      CHECK(!r.n_inputs || r.inputs);
      for (size_t i = 0; i < r.n_outputs; i++) CHECK(r.outputs[i]);
      CHECK(!r.output_shm || r.n_outputs);
      for (size_t i = 0; i < r.n_inputs; i++) {
        check_tensor_at(r.inputs[i], p, len, r.input_shm, i);
        CHECK(r.inputs[i]->owner == (r.input_shm && r.input_shm[i].region ? NULL : owner));
      }
      /* Only a flag without outputs changes the length on a round trip. */
      if (!(p[2 + strlen(r.pool) + 1] & SIP__REQ_OUTPUT_SHM) || r.n_outputs)
        round_trip_request(&r, h->request_id, len);
      sip__wire_request_clear(&r);
      break;
    }
    case SIP__MSG_BATCH_INFER_REQUEST: {
      uint32_t max_batch;
      uint8_t padding;
      e = sip__decode_batch_prefix(p, len, &max_batch, &padding);
      if (e) break;
      CHECK(padding <= 2);
      sip__wire_request_t r;
      e = sip__decode_infer_request(p + SIP__BATCH_PREFIX_SIZE, len - SIP__BATCH_PREFIX_SIZE, owner,
                                    &r);
      if (e) {
        CHECK(is_request_zeroed(&r));
        break;
      }
      for (size_t i = 0; i < r.n_inputs; i++) check_tensor_at(r.inputs[i], p, len, r.input_shm, i);
      sip__wire_request_clear(&r);
      break;
    }
    case SIP__MSG_INFER_RESPONSE: {
      sip__wire_response_t r;
      e = sip__decode_infer_response(p, len, owner, &r);
      if (e) {
        CHECK(!r.message && !r.outputs && !r.n_outputs);
        break;
      }
      CHECK(r.message);
      CHECK(!r.n_outputs || r.outputs);
      for (size_t i = 0; i < r.n_outputs; i++)
        check_tensor_at(r.outputs[i], p, len, r.output_shm, i);
      round_trip_response(&r, h->request_id, p, len);
      sip__wire_response_clear(&r);
      break;
    }
    case SIP__MSG_INFO_REQUEST:
      /* u8 kind; the server answers anything else with an error. */
      ok = len == 1;
      break;
    case SIP__MSG_REPO_REQUEST:
    case SIP__MSG_ADMIN_REQUEST:
      /* JSON text, parsed by the engine's repository and admin code
       * (jansson; fuzz_admin). */
      break;
    case SIP__MSG_AUTH:
      /* The token's bytes, checked by core/auth (fuzz_auth). */
      break;
    case SIP__MSG_SHM_REGISTER:
    case SIP__MSG_SHM_UNREGISTER:
    case SIP__MSG_SHM_STATUS:
      e = shm_message(h, p, len);
      break;
    case SIP__MSG_SUBSCRIBE:
      e = subscribe_message(h, p, len);
      break;
    case SIP__MSG_EVENT:
      event_message(p, len);
      break;
    case SIP__MSG_INFO_RESPONSE:
    case SIP__MSG_ERROR: {
      int is_error = h->type == SIP__MSG_ERROR;
      uint32_t code = 0;
      const char *text = NULL;
      size_t tl = 0;
      e = sip__decode_code_text(p, len, is_error, &code, &text, &tl);
      if (!e) {
        CHECK(text >= (const char *)p && tl <= len && (const uint8_t *)text + tl == p + len);
        CHECK(tl == len - (is_error ? 8u : 4u));
        /* Round trip. */
        sip__wbuf_t w = {0};
        if (is_error) {
          /* sip__encode_error takes a C string. */
          if (!memchr(text, 0, tl)) {
            char *m = malloc(tl + 1);
            CHECK(m);
            memcpy(m, text, tl);
            m[tl] = '\0';
            sip__encode_error(&w, h->request_id, code, m);
            free(m);
          }
        } else {
          sip__encode_info_response(&w, h->request_id, code, text, tl);
        }
        if (w.len) {
          size_t l2;
          const uint8_t *p2 = reframe(&w, h->type, h->request_id, len, &l2);
          CHECK(memcmp(p2, p, len) == 0);
        }
        sip__wbuf_free(&w);
      }
      break;
    }
    default:
      abort(); /* the header decoder lets no other type through */
  }
  if (e) {
    sip_code_t c = sip_error_code(e);
    CHECK(c == SIP_INVALID_ARGUMENT || c == SIP_RESOURCE_EXHAUSTED);
    CHECK(sip_error_message(e)[0]);
    sip_error_free(e);
    ok = 0;
  }
  sip_buf_unref(owner);
  return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t off = 0;
  while (size - off >= SIP__FRAME_HEADER_SIZE) {
    sip__frame_header_t h;
    sip_error_t *e = sip__frame_header_decode(data + off, MAX_PAYLOAD, &h);
    if (e) {
      sip_code_t c = sip_error_code(e);
      CHECK(c == SIP_INVALID_ARGUMENT || c == SIP_UNIMPLEMENTED || c == SIP_RESOURCE_EXHAUSTED);
      sip_error_free(e);
      break;
    }
    CHECK(h.version == SIP__FRAME_VERSION && h.flags == 0 && h.length <= MAX_PAYLOAD);
    CHECK(h.type >= SIP__MSG_INFER_REQUEST && h.type <= SIP__MSG_MAX);
    off += SIP__FRAME_HEADER_SIZE;
    if (size - off < h.length) break; /* the connection would wait for more */
    int go_on = one_frame(&h, data + off);
    off += h.length;
    if (!go_on) break;
  }
  return 0;
}
