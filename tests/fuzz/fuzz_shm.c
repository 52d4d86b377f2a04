/* libFuzzer target for system shared memory as both front-ends register,
 * list, unregister and use it: the HTTP register route's body
 * (src/http/shm.c) and the gRPC SystemSharedMemory* request messages
 * (unpacked by src/grpc/codec.c, handed to core as src/grpc/rpcs.c does)
 * into one set of regions (src/core/shm.c) over real /dev/shm objects,
 * which the input shrinks and grows while requests' views of them are in
 * use, so accesses fault (SIGBUS) and must be survived and reported.
 *
 * Input: a program: a byte (its value mod 8 picks the operation) and the
 * operation's operands, again and again:
 *   0 HTTP register: a name (a length byte, the bytes), a JSON body (a
 *     length byte, the bytes);
 *   1 gRPC register: a SystemSharedMemoryRegisterRequest (length, bytes);
 *   2 unregister: a name (length, bytes; empty: all) as HTTP's route has
 *     it, or with bit 3 of the byte set a SystemSharedMemoryUnregisterRequest
 *     (length, bytes) as gRPC's;
 *   3 status: the same, with SystemSharedMemoryStatusRequest;
 *   4 view: a region (index byte), offset and size bytes (x 64), through
 *     the request's scope, then a read and a write of every byte;
 *   5 resize object A or B (bit 7 of the byte): a size byte (x 256 bytes);
 *   6 answer: the scope is checked, outputs viewing the last view are
 *     encoded as both front-ends do (binary over HTTP, raw over gRPC), and
 *     a new scope begins;
 *   7 read and write every byte of the last view again.
 * Keys "/A" and "/B" in a registration stand for the target's own two
 * objects (their names hold the process id); other keys are opened as
 * they are (objects of others are registered, listed and unregistered,
 * never viewed). Every input starts from an empty set and new objects.
 *
 * Checks: a registration succeeds only for a usable name (1..255 bytes,
 * not "." or "..", no '/' or control characters) and is then listed as
 * registered; refusals carry the documented codes; a view is refused
 * exactly when the object is smaller than its registration; an access to
 * bytes past the object's end never ends the process, and the answer's
 * check reports an error exactly when an access faulted or an object is
 * smaller than a viewed registration; bytes written through an intact view
 * are in the object; encoded answers never point into a region and carry
 * its bytes.
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"
#include "core/shm.h"
#include "grpc/grpc_frontend.h"
#include "grpc/grpc_impl.h"
#include "grpc_service.pb-c.h"
#include "http/http.h"
#include "http/http_impl.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

#define OBJ_BYTES 16384
#define MAX_VIEWS 8

typedef struct obj {
  char key[64];
  int fd;
  size_t size; /* now */
} obj_t;

static obj_t objs[2];
static sip__shm_set_t *set;
static size_t page;

static void resize(obj_t *o, size_t n) {
  CHECK(ftruncate(o->fd, (off_t)n) == 0);
  o->size = n;
}

/* The objects exist while an input runs (nothing is left in /dev/shm
 * however the fuzzer ends); the set lives as long as the process. */
static void begin(void) {
  if (!set) {
    page = (size_t)sysconf(_SC_PAGESIZE);
    CHECK((set = sip__shm_set_new(16)));
  }
  for (int i = 0; i < 2; i++) {
    snprintf(objs[i].key, sizeof objs[i].key, "/sip_fuzz_shm_%d_%c", (int)getpid(), 'A' + i);
    shm_unlink(objs[i].key);
    objs[i].fd = shm_open(objs[i].key, O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(objs[i].fd >= 0);
    resize(&objs[i], OBJ_BYTES);
  }
}

static void end(void) {
  sip__shm_unregister(set, NULL);
  for (int i = 0; i < 2; i++) {
    close(objs[i].fd);
    shm_unlink(objs[i].key);
  }
}

/* ---- the program's reader ------------------------------------------------- */

typedef struct prog {
  const uint8_t *p;
  size_t n;
} prog_t;

static int byte(prog_t *g) {
  if (!g->n) return -1;
  g->n--;
  return *g->p++;
}

/* A length byte and that many bytes (fewer at the end). */
static const uint8_t *chunk(prog_t *g, size_t *len) {
  int l = byte(g);
  *len = l < 0 ? 0 : (size_t)l < g->n ? (size_t)l : g->n;
  const uint8_t *at = g->p;
  g->p += *len;
  g->n -= *len;
  return at;
}

/* ---- registrations --------------------------------------------------------- */

static int usable_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > SIP__SHM_MAX_NAME || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '/' || (unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
  return 1;
}

/* The object a key stands for: "/A" and "/B" are the target's own. */
static const char *real_key(const char *key, int *own) {
  *own = -1;
  if (!strcmp(key, "/A") || !strcmp(key, "/B")) *own = key[1] - 'A';
  return *own >= 0 ? objs[*own].key : key;
}

static void do_register(const char *name, const char *key, uint64_t offset, uint64_t size) {
  int own;
  const char *k = real_key(key, &own);
  sip_error_t *e = sip__shm_register(set, name, k, offset, size);
  sip__shm_info_t *v = NULL;
  size_t n = 0;
  sip_error_t *se = sip__shm_status(set, name, &v, &n);
  if (e) {
    sip_code_t c = sip_error_code(e);
    CHECK(c == SIP_INVALID_ARGUMENT || c == SIP_NOT_FOUND || c == SIP_PERMISSION_DENIED ||
          c == SIP_ALREADY_EXISTS || c == SIP_RESOURCE_EXHAUSTED);
    CHECK(*sip_error_message(e));
    if (!usable_name(name)) CHECK(c == SIP_INVALID_ARGUMENT);
    /* Refused: an earlier region of that name, or none. */
    CHECK(c == SIP_ALREADY_EXISTS ? !se : 1);
    sip_error_free(e);
  } else {
    CHECK(usable_name(name) && !sip__shm_check_key(k) && size > 0);
    if (own >= 0) CHECK(offset + size <= objs[own].size);
    CHECK(!se && n == 1 && !strcmp(v[0].key, k) && v[0].offset == offset &&
          v[0].byte_size == size);
  }
  sip_error_free(se);
  sip__shm_info_free(v, n);
}

static void http_register(prog_t *g) {
  size_t nl, bl;
  const uint8_t *nm = chunk(g, &nl);
  const uint8_t *body = chunk(g, &bl);
  char name[256];
  memcpy(name, nm, nl);
  name[nl] = '\0';
  json_t *b = json_loadb((const char *)body, bl, JSON_REJECT_DUPLICATES, NULL);
  const char *key = NULL;
  uint64_t offset = 0, size = 0;
  sip_error_t *e = json_is_object(b) ? sip__http_shm_register_args(b, &key, &offset, &size)
                                     : NULL;
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT);
    sip_error_free(e);
  } else if (key) {
    do_register(name, key, offset, size);
  }
  json_decref(b);
}

static ProtobufCMessage *message(prog_t *g, const ProtobufCMessageDescriptor *d) {
  size_t len;
  const uint8_t *m = chunk(g, &len);
  return sip__grpc_unpack(d, m, len);
}

static void grpc_register(prog_t *g) {
  Inference__SystemSharedMemoryRegisterRequest *q = (void *)message(
      g, &inference__system_shared_memory_register_request__descriptor);
  if (q) do_register(q->name, q->key, q->offset, q->byte_size);
  sip__grpc_msg_free((ProtobufCMessage *)q);
}

/* A region's name for unregister and status: HTTP's path segment or
 * gRPC's message field. *m holds the message to free. */
static const char *region_name(prog_t *g, int grpc, const ProtobufCMessageDescriptor *d,
                               char *buf, ProtobufCMessage **m) {
  *m = NULL;
  if (grpc) {
    if (!(*m = message(g, d))) return NULL;
    /* Both messages hold the name as their first field. */
    return d == &inference__system_shared_memory_unregister_request__descriptor
               ? ((Inference__SystemSharedMemoryUnregisterRequest *)*m)->name
               : ((Inference__SystemSharedMemoryStatusRequest *)*m)->name;
  }
  size_t n;
  const uint8_t *p = chunk(g, &n);
  memcpy(buf, p, n);
  buf[n] = '\0';
  return buf;
}

static void unregister(prog_t *g, int grpc) {
  char buf[256];
  ProtobufCMessage *m;
  const char *name = region_name(
      g, grpc, &inference__system_shared_memory_unregister_request__descriptor, buf, &m);
  if (name) {
    sip__shm_unregister(set, name);
    sip__shm_info_t *v = NULL;
    size_t n = 0;
    sip_error_t *e = sip__shm_status(set, name, &v, &n);
    CHECK(*name ? e && sip_error_code(e) == SIP_NOT_FOUND : !e && n == 0);
    sip_error_free(e);
    sip__shm_info_free(v, n);
  }
  sip__grpc_msg_free(m);
}

static void status(prog_t *g, int grpc) {
  char buf[256];
  ProtobufCMessage *m;
  const char *name = region_name(
      g, grpc, &inference__system_shared_memory_status_request__descriptor, buf, &m);
  if (name) {
    sip__shm_info_t *v = NULL;
    size_t n = 0;
    sip_error_t *e = sip__shm_status(set, name, &v, &n);
    if (e) {
      CHECK(*name && sip_error_code(e) == SIP_NOT_FOUND);
      sip_error_free(e);
    } else {
      CHECK(*name ? n == 1 && !strcmp(v[0].name, name) : n <= 16);
      for (size_t i = 1; i < n; i++) CHECK(strcmp(v[i - 1].name, v[i].name) < 0);
    }
    sip__shm_info_free(v, n);
  }
  sip__grpc_msg_free(m);
}

/* ---- a request's views ------------------------------------------------------ */

typedef struct req {
  sip__shm_set_t *scope;
  int faulted;    /* an access went past its object's end */
  int last_faulted; /* the last view's access did */
  struct {
    obj_t *o;
    uint64_t need; /* the registration's offset + byte size */
  } used[MAX_VIEWS];
  size_t n_used;
  sip_buf_t *last; /* the last view (a reference), for the answer */
  uint8_t *last_data;
  size_t last_len;
  uint64_t last_at; /* its offset in its object */
  obj_t *last_obj;
} req_t;

static void req_begin(req_t *r) {
  memset(r, 0, sizeof *r);
  CHECK((r->scope = sip__shm_scope_new(set)));
}

static void req_end(req_t *r) {
  sip_buf_unref(r->last);
  sip__shm_set_free(r->scope);
}

/* Reads and writes every byte of the last view, as a backend or an encoder
 * would. Bytes past the end of the object's last page fault (the first
 * time: then the mapping is zeros): survived. */
static void access_last(req_t *r) {
  if (!r->last) return;
  obj_t *o = r->last_obj;
  size_t n = r->last_len, end_page = (o->size + page - 1) / page * page;
  int fault = n && r->last_at + n > end_page;
  r->faulted |= fault;
  r->last_faulted |= fault;
  uint8_t sum = 0, *p = r->last_data;
  for (size_t i = 0; i < n; i++) sum += p[i];
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 7 + sum + 1);
  /* An intact view writes the object (bytes past its end in its last page
   * neither fault nor land anywhere). */
  if (!r->last_faulted && n && r->last_at + n <= o->size) {
    uint8_t *back = malloc(n);
    CHECK(back && pread(o->fd, back, n, (off_t)r->last_at) == (ssize_t)n);
    for (size_t i = 0; i < n; i++) CHECK(back[i] == (uint8_t)(i * 7 + sum + 1));
    free(back);
  }
}

static void view(prog_t *g, req_t *r) {
  sip__shm_info_t *v = NULL;
  size_t n = 0;
  CHECK(!sip__shm_status(set, NULL, &v, &n));
  int idx = byte(g), off = byte(g), sz = byte(g);
  const sip__shm_info_t *x = n && idx >= 0 ? &v[(size_t)idx % n] : NULL;
  obj_t *o = NULL;
  for (int i = 0; x && i < 2; i++)
    if (!strcmp(x->key, objs[i].key)) o = &objs[i];
  if (!o || off < 0 || sz < 0 || r->n_used == MAX_VIEWS) { /* others' objects: never viewed */
    sip__shm_info_free(v, n);
    return;
  }
  uint64_t offset = (uint64_t)off * 64 % (x->byte_size + 1);
  uint64_t size = (uint64_t)sz * 64 % (x->byte_size - offset + 1);
  uint64_t need = x->offset + x->byte_size, at = x->offset + offset;
  sip_buf_t *b = NULL;
  uint8_t *p = NULL;
  sip_error_t *e = sip__shm_view(r->scope, x->name, offset, size, "input 'x'", &b, &p);
  sip__shm_info_free(v, n);
  /* Refused exactly when the object no longer holds the registration. */
  CHECK(!e == (o->size >= need));
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT && strstr(sip_error_message(e), "truncated"));
    sip_error_free(e);
    return;
  }
  r->used[r->n_used].o = o;
  r->used[r->n_used++].need = need;
  sip_buf_unref(r->last);
  r->last = b;
  r->last_data = p;
  r->last_len = (size_t)size;
  r->last_at = at;
  r->last_obj = o;
  r->last_faulted = 0;
  access_last(r);
}

/* The encoders' part: an output viewing the last view's bytes (an
 * identity's answer), sent binary over HTTP and raw over gRPC. */
static void encode(req_t *r, int expect_error) {
  if (!r->last) return;
  int64_t dims[1] = {(int64_t)r->last_len};
  sip_tensor_t *t = sip_tensor_new_view("y", SIP_DTYPE_UINT8, 1, dims, r->last_data, r->last_len,
                                        r->last);
  CHECK(t);
  const sip_tensor_t *outs[1] = {t};
  uint8_t *want = malloc(r->last_len + 1);
  CHECK(want);
  int intact = !expect_error &&
               pread(r->last_obj->fd, want, r->last_len, (off_t)r->last_at) == (ssize_t)r->last_len;
  sip__ks_request_t k;
  memset(&k, 0, sizeof k);
  k.binary_output = 1;
  sip__ks_body_t body;
  sip_error_t *e = sip__ks_encode(&k, "m", NULL, outs, 1, &body);
  CHECK(!e == !expect_error);
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT && strstr(sip_error_message(e), "shrank"));
    sip_error_free(e);
  } else {
    size_t total = 0;
    for (size_t i = 0; i < body.n_segs; i++) {
      CHECK(!sip__shm_guarded(body.segs[i].data, body.segs[i].len));
      if (intact) CHECK(!memcmp(body.segs[i].data, want + total, body.segs[i].len));
      total += body.segs[i].len;
    }
    CHECK(total == r->last_len);
    sip__ks_body_clear(&body);
  }
  sip__grpc_infer_t gk;
  memset(&gk, 0, sizeof gk);
  gk.model = (char *)"m";
  uint8_t *msg = NULL;
  size_t len = 0;
  e = sip__grpc_encode_infer(&gk, NULL, outs, 1, 0, &msg, &len);
  CHECK(!e == !expect_error);
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT && !msg);
    sip_error_free(e);
  } else {
    Inference__ModelInferResponse *m = (void *)sip__grpc_unpack(
        &inference__model_infer_response__descriptor, msg, len);
    CHECK(m && m->n_raw_output_contents == 1 && m->raw_output_contents[0].len == r->last_len);
    if (intact && r->last_len) CHECK(!memcmp(m->raw_output_contents[0].data, want, r->last_len));
    sip__grpc_msg_free(&m->base);
    sip__free(msg);
  }
  free(want);
  sip_tensor_free(t);
}

static void answer(req_t *r) {
  int small = 0;
  for (size_t i = 0; i < r->n_used; i++) small |= r->used[i].o->size < r->used[i].need;
  sip_error_t *e = sip__shm_scope_check(r->scope);
  /* An error exactly when an access faulted or an object shrank under a
   * registration the request viewed. */
  CHECK(!e == !(r->faulted || small));
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT && strstr(sip_error_message(e), "shrank"));
    sip_error_free(e);
  }
  /* The last view's mapping alone: its own access faulted (an earlier
   * fault in that region made the view map it afresh), or its object is
   * smaller than the registration. (No bytes, at the mapping's very end:
   * nothing to check.) */
  if (r->last) {
    int hurt = r->last_faulted || r->last_obj->size < r->used[r->n_used - 1].need;
    sip_error_t *le = sip__shm_check_bytes(r->last_data, r->last_len);
    if (r->last_len) CHECK(!le == !hurt);
    encode(r, le != NULL);
    sip_error_free(le);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  begin();
  prog_t g = {data, size};
  req_t r;
  req_begin(&r);
  int op;
  while ((op = byte(&g)) >= 0) {
    switch (op % 8) {
    case 0: http_register(&g); break;
    case 1: grpc_register(&g); break;
    case 2: unregister(&g, op & 8); break;
    case 3: status(&g, op & 8); break;
    case 4: view(&g, &r); break;
    case 5: {
      int s = byte(&g);
      if (s >= 0) resize(&objs[op >> 7], (size_t)s * 256);
      break;
    }
    case 6:
      answer(&r);
      req_end(&r);
      req_begin(&r);
      break;
    case 7: access_last(&r); break;
    }
  }
  answer(&r);
  req_end(&r);
  end();
  return 0;
}
