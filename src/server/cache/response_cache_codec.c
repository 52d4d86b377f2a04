/* sip — the response cache's keys (a SHA-256 digest of what changes a
 * result) and values (a compact binary encoding of the outputs). SHA-256
 * comes from OpenSSL's libcrypto (Debian's libssl-dev): a collision-
 * resistant hash is needed because a key shared by two different requests
 * would serve one the other's answer, across every server using one Redis;
 * libcrypto's EVP picks the CPU's SHA extensions where there are some. */
#include "server/cache/response_cache.h"

#include <openssl/evp.h>
#include <string.h>

#include "core/core.h"
#include "session/request/request.h"

#define MAGIC "SRC1"

/* ---- keys ---- */

static int put_u64(EVP_MD_CTX *h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  return EVP_DigestUpdate(h, b, 8);
}

/* A field: its length, then its bytes (NULL hashes as length 2^64-1). */
static int put_bytes(EVP_MD_CTX *h, const void *p, size_t n) {
  if (!p) return put_u64(h, UINT64_MAX);
  return put_u64(h, n) && (n == 0 || EVP_DigestUpdate(h, p, n));
}

static int put_str(EVP_MD_CTX *h, const char *s) { return put_bytes(h, s, s ? strlen(s) : 0); }

int sip__rcache_key(const char *model, const char *version, const sip_request_t *r,
                    uint8_t out[SIP__RCACHE_DIGEST]) {
  EVP_MD_CTX *h = EVP_MD_CTX_new();
  if (!h) return -1;
  int ok = EVP_DigestInit_ex(h, EVP_sha256(), NULL) && put_str(h, "sip response cache 1") &&
           put_str(h, model) && put_str(h, version && *version ? version : "") &&
           put_u64(h, r->n_inputs);
  for (size_t i = 0; ok && i < r->n_inputs; i++) {
    const sip_tensor_t *t = r->inputs[i];
    ok = put_str(h, t->name) && put_u64(h, (uint64_t)t->dtype) && put_u64(h, (uint64_t)t->rank);
    for (int d = 0; ok && d < t->rank; d++) ok = put_u64(h, (uint64_t)t->dims[d]);
    ok = ok && put_bytes(h, t->data ? t->data : "", t->nbytes);
  }
  ok = ok && put_u64(h, r->n_outputs);
  for (size_t i = 0; ok && i < r->n_outputs; i++) ok = put_str(h, r->outputs[i]);
  /* pipeline_config: the stage timeouts and the early exit condition. */
  ok = ok && put_u64(h, (uint64_t)r->has_stage_timeouts) && put_u64(h, r->n_stage_timeouts);
  for (size_t i = 0; ok && r->has_stage_timeouts && i < r->n_stage_timeouts; i++)
    ok = put_u64(h, r->stage_timeout_ms[i]);
  ok = ok && put_str(h, r->early_exit);
  unsigned int n = 0;
  ok = ok && EVP_DigestFinal_ex(h, out, &n) && n == SIP__RCACHE_DIGEST;
  EVP_MD_CTX_free(h);
  return ok ? 0 : -1;
}

/* ---- values ---- */

int sip__rcache_encodable(sip_tensor_t *const *outputs, size_t n) {
  if (n > UINT32_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    const sip_tensor_t *t = outputs[i];
    if (!t || t->memory_type == SIP_MEMORY_DEVICE || t->rank < 0 || t->rank > SIP_MAX_RANK ||
        t->dtype <= SIP_DTYPE_INVALID || t->dtype > SIP_DTYPE_UINT64 || !t->name ||
        strlen(t->name) > UINT16_MAX || (t->nbytes && !t->data))
      return 0;
  }
  return 1;
}

static uint8_t *w_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) *p++ = (uint8_t)(v >> (8 * i));
  return p;
}

uint8_t *sip__rcache_encode(sip_tensor_t *const *outputs, size_t n, size_t *len) {
  *len = 0;
  if (!sip__rcache_encodable(outputs, n)) return NULL;
  size_t total = 8;
  for (size_t i = 0; i < n; i++) {
    const sip_tensor_t *t = outputs[i];
    size_t add = 2 + strlen(t->name) + 2 + 8 * (size_t)t->rank + 8;
    if (t->nbytes > SIZE_MAX - total - add) return NULL;
    total += add + t->nbytes;
  }
  uint8_t *buf = sip__malloc(total), *p = buf;
  if (!buf) return NULL;
  memcpy(p, MAGIC, 4);
  p = w_le(p + 4, n, 4);
  for (size_t i = 0; i < n; i++) {
    const sip_tensor_t *t = outputs[i];
    size_t nl = strlen(t->name);
    p = w_le(p, nl, 2);
    memcpy(p, t->name, nl);
    p += nl;
    *p++ = (uint8_t)t->dtype;
    *p++ = (uint8_t)t->rank;
    for (int d = 0; d < t->rank; d++) p = w_le(p, (uint64_t)t->dims[d], 8);
    p = w_le(p, t->nbytes, 8);
    if (t->nbytes) memcpy(p, t->data, t->nbytes);
    p += t->nbytes;
  }
  *len = total;
  return buf;
}

/* A reader over untrusted bytes: every take checks what is left. */
typedef struct rd {
  const uint8_t *p;
  size_t left;
} rd_t;

static int take(rd_t *r, size_t n, const uint8_t **out) {
  if (n > r->left) return -1;
  *out = r->p;
  r->p += n;
  r->left -= n;
  return 0;
}

static int take_le(rd_t *r, int n, uint64_t *v) {
  const uint8_t *b;
  if (take(r, (size_t)n, &b)) return -1;
  *v = 0;
  for (int i = 0; i < n; i++) *v |= (uint64_t)b[i] << (8 * i);
  return 0;
}

static void free_outputs(sip_tensor_t **outs, size_t n) {
  for (size_t i = 0; outs && i < n; i++) sip_tensor_free(outs[i]);
  sip__free(outs);
}

int sip__rcache_decode(const uint8_t *val, size_t len, sip_tensor_t ***outputs, size_t *n,
                       const char **why) {
  *outputs = NULL;
  *n = 0;
  rd_t r = {val, len};
  const uint8_t *magic;
  uint64_t count;
  if (take(&r, 4, &magic) || memcmp(magic, MAGIC, 4) || take_le(&r, 4, &count)) {
    *why = "not a response cache value (no SRC1 header)";
    return -1;
  }
  /* Each output takes at least 13 bytes: a count past that is a lie. */
  if (count > r.left / 13) {
    *why = "output count larger than the value";
    return -1;
  }
  sip_tensor_t **outs = count ? sip__calloc((size_t)count, sizeof *outs) : NULL;
  if (count && !outs) {
    *why = "out of memory";
    return -1;
  }
  for (size_t i = 0; i < count; i++) {
    uint64_t nl, dtype, rank, nbytes;
    const uint8_t *name, *rk, *data;
    int64_t dims[SIP_MAX_RANK];
    *why = "truncated output";
    if (take_le(&r, 2, &nl) || take(&r, (size_t)nl, &name) || take_le(&r, 1, &dtype) ||
        take(&r, 1, &rk))
      goto bad;
    rank = rk[0];
    if (!nl || memchr(name, '\0', (size_t)nl)) {
      *why = "output name empty or with a NUL byte";
      goto bad;
    }
    if (dtype <= SIP_DTYPE_INVALID || dtype > SIP_DTYPE_UINT64 || rank > SIP_MAX_RANK) {
      *why = "output dtype or rank out of range";
      goto bad;
    }
    for (uint64_t d = 0; d < rank; d++) {
      uint64_t v;
      if (take_le(&r, 8, &v)) goto bad;
      if (v > INT64_MAX) {
        *why = "negative dimension";
        goto bad;
      }
      dims[d] = (int64_t)v;
    }
    if (take_le(&r, 8, &nbytes) || take(&r, (size_t)nbytes, &data))
      goto bad;
    char *nm = sip__strndup((const char *)name, (size_t)nl);
    outs[i] = nm ? sip_tensor_new_copy(nm, (sip_dtype_t)dtype, (int)rank, dims, data,
                                       (size_t)nbytes)
                 : NULL;
    sip__free(nm);
    if (!outs[i]) {
      *why = "out of memory";
      goto bad;
    }
    sip_error_t *e = sip_tensor_validate(outs[i]);
    if (e) {
      sip_error_free(e);
      *why = "output bytes do not match its dtype and shape";
      goto bad;
    }
  }
  if (r.left) {
    *why = "bytes after the last output";
    goto bad;
  }
  *outputs = outs;
  *n = (size_t)count;
  return 0;
bad:
  free_outputs(outs, (size_t)count);
  return -1;
}
