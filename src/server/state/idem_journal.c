/* sip — the idempotency journal: records, their reader, the file
 * (idem_journal.h). */
#include "server/state/idem_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/core.h"
#include "core/wbuf.h"
#include "server/state/state.h"
#include "session/engine.h"

#define MAGIC_LEN 8
#define MAX_RECORD (UINT64_C(1) << 31) /* a record larger than 2 GiB is not kept */

struct sip__journal {
  pthread_mutex_t mu;
  char *path, *tmp;
  int fd;       /* O_APPEND */
  int rewrite_fd; /* during a rewrite: the new file */
  uint64_t size;
  uint64_t last_error_us;
};

/* ---- encoding (little-endian, core/wbuf.h) ---- */

/* A string with a length prefix of `width` bytes (2 or 4). */
static int put_str(sip__wbuf_t *b, const char *s, int width) {
  size_t n = s ? strlen(s) : 0;
  if (width == 2 ? n > UINT16_MAX : n > UINT32_MAX) return -1;
  if (width == 2) sip__wbuf_u16(b, (uint16_t)n);
  else sip__wbuf_u32(b, (uint32_t)n);
  sip__wbuf_put(b, s, n);
  return 0;
}

sip_error_t *sip__journal_encode(const char *model, const char *key, uint64_t expires_wall_us,
                                 const sip_response_t *r, uint8_t **out, size_t *len) {
  *out = NULL;
  *len = 0;
  sip__wbuf_t b = {0};
  sip__wbuf_u64(&b, 0); /* length and CRC, set below */
  sip__wbuf_u64(&b, expires_wall_us);
  int bad = put_str(&b, model, 2) || put_str(&b, key, 4);
  sip__wbuf_u32(&b, (uint32_t)r->code);
  sip__wbuf_u64(&b, r->queue_us);
  sip__wbuf_u64(&b, r->compute_us);
  sip__wbuf_u64(&b, r->total_us);
  bad = bad || put_str(&b, r->message, 4);
  sip__wbuf_u32(&b, (uint32_t)r->n_outputs);
  for (size_t i = 0; !bad && i < r->n_outputs; i++) {
    const sip_tensor_t *t = r->outputs[i];
    bad = put_str(&b, t->name, 2);
    sip__wbuf_u32(&b, (uint32_t)t->dtype);
    sip__wbuf_u32(&b, (uint32_t)t->rank);
    for (int k = 0; k < t->rank; k++) sip__wbuf_u64(&b, (uint64_t)t->dims[k]);
    sip__wbuf_u64(&b, t->nbytes);
    sip__wbuf_put(&b, t->data, t->nbytes);
  }
  if (!bad && !b.oom && b.len - 8 >= MAX_RECORD) bad = 1;
  if (bad || b.oom) {
    sip__wbuf_free(&b);
    return bad ? sip_error_new(SIP_INVALID_ARGUMENT, "idempotency journal: an answer too large "
                               "to record (a name, key or message over its length limit, or "
                               "over 2 GiB in all)")
               : SIP__OOM();
  }
  uint32_t plen = (uint32_t)(b.len - 8);
  sip__put_le(b.data, plen, 4);
  sip__put_le(b.data + 4, (uint32_t)crc32(0, b.data + 8, plen), 4);
  *out = b.data;
  *len = b.len;
  return NULL;
}

/* ---- reading ---- */

typedef struct rbuf {
  const uint8_t *p;
  size_t n, off;
} rbuf_t;

/* An unsigned little-endian integer of n bytes. */
static int get_u(rbuf_t *b, int n, uint64_t *v) {
  if ((size_t)n > b->n - b->off) return -1;
  uint64_t x = 0;
  for (int i = n - 1; i >= 0; i--) x = x << 8 | b->p[b->off + (size_t)i];
  *v = x;
  b->off += (size_t)n;
  return 0;
}

/* A string with a length prefix (owned, NUL-terminated) into *out. */
static int get_str(rbuf_t *b, int width, char **out) {
  uint64_t n;
  if (get_u(b, width, &n) || n > b->n - b->off || memchr(b->p + b->off, 0, n)) return -1;
  *out = sip__malloc((size_t)n + 1);
  if (!*out) return -1;
  memcpy(*out, b->p + b->off, n);
  (*out)[n] = '\0';
  b->off += n;
  return 0;
}

/* One output tensor (owned) into *out; 0 when whole and valid. */
static int get_tensor(rbuf_t *b, sip_tensor_t **out) {
  char *name = NULL;
  uint64_t dtype = 0, rank = 0, nbytes = 0, d = 0;
  int64_t dims[SIP_MAX_RANK];
  int ok = !get_str(b, 2, &name) && !get_u(b, 4, &dtype) && !get_u(b, 4, &rank) &&
           rank <= SIP_MAX_RANK;
  for (uint64_t k = 0; ok && k < rank; k++)
    if ((ok = !get_u(b, 8, &d))) dims[k] = (int64_t)d;
  ok = ok && !get_u(b, 8, &nbytes) && nbytes <= b->n - b->off &&
       (dtype == SIP_DTYPE_STRING || sip_dtype_size((sip_dtype_t)dtype) > 0);
  *out = ok ? sip_tensor_new_copy(name, (sip_dtype_t)dtype, (int)rank, dims, b->p + b->off,
                                  (size_t)nbytes)
            : NULL;
  sip__free(name);
  if (!*out) return -1;
  b->off += (size_t)nbytes;
  sip_error_t *e = sip_tensor_validate(*out);
  sip_error_free(e);
  return e ? -1 : 0;
}

/* One payload into its parts; 0 when whole and valid. */
static int decode(rbuf_t *b, char **model, char **key, uint64_t *expires, sip_response_t **resp) {
  uint64_t code = 0, q = 0, c = 0, t = 0, n_out = 0;
  char *msg = NULL;
  sip_tensor_t **outs = NULL;
  *model = *key = NULL;
  *resp = NULL;
  int ok = !get_u(b, 8, expires) && !get_str(b, 2, model) && !get_str(b, 4, key) &&
           !get_u(b, 4, &code) && !get_u(b, 8, &q) && !get_u(b, 8, &c) && !get_u(b, 8, &t) &&
           !get_str(b, 4, &msg) && !get_u(b, 4, &n_out) && code < SIP_CODE_COUNT_ &&
           n_out <= 4096 && n_out * 16 <= b->n - b->off;
  if (ok && n_out) ok = (outs = sip__calloc(n_out, sizeof *outs)) != NULL;
  for (uint64_t i = 0; ok && i < n_out; i++) ok = !get_tensor(b, &outs[i]);
  ok = ok && b->off == b->n; /* bytes left over: not a record of ours */
  if (ok) {
    *resp = sip__response_new((sip_code_t)code, msg, 0, outs, n_out, q, c, t);
    msg = NULL;
    outs = NULL; /* the response's now */
    ok = *resp && (uint64_t)(*resp)->code == code;
  }
  for (uint64_t i = 0; outs && i < n_out; i++) sip_tensor_free(outs[i]);
  sip__free(outs);
  sip__free(msg);
  if (!ok) {
    sip_response_free(*resp);
    *resp = NULL;
    sip__free(*model);
    sip__free(*key);
    *model = *key = NULL;
    return -1;
  }
  return 0;
}

/* Smallest payload: expires, two empty strings' lengths, code, three
 * timings, an empty message's length and the output count. */
#define MIN_PAYLOAD (8 + 2 + 4 + 4 + 24 + 4 + 4)

/* The record at buf[off..len): its size (header included) when it is whole
 * and valid, fn having been called with it; else 0 with *why set. Cheap
 * checks come before the CRC so that resynchronising through damaged bytes
 * (one candidate offset at a time) stays fast. */
static size_t record_at(const uint8_t *buf, size_t len, size_t off, sip__journal_fn fn, void *ctx,
                        const char **why) {
  if (len - off < 8) {
    *why = "a record cut short (its header)";
    return 0;
  }
  rbuf_t h = {buf + off, 8, 0};
  uint64_t plen = 0, crc = 0, mlen = 0, klen = 0;
  get_u(&h, 4, &plen);
  get_u(&h, 4, &crc);
  if (plen > len - off - 8) {
    *why = "a record cut short";
    return 0;
  }
  rbuf_t f = {buf + off + 8, plen, 8}; /* past expires: the model's and key's lengths */
  if (plen < MIN_PAYLOAD || get_u(&f, 2, &mlen) || mlen > plen - f.off ||
      (f.off += mlen, get_u(&f, 4, &klen)) || klen > plen - f.off ||
      (uint32_t)crc32(0, buf + off + 8, plen) != crc) {
    *why = "a record whose CRC does not match";
    return 0;
  }
  rbuf_t b = {buf + off + 8, plen, 0};
  char *model, *key;
  uint64_t expires;
  sip_response_t *resp;
  if (decode(&b, &model, &key, &expires, &resp)) {
    *why = "a malformed record";
    return 0;
  }
  fn(ctx, model, key, expires, resp);
  sip__free(model);
  sip__free(key);
  return 8 + (size_t)plen;
}

size_t sip__journal_read(const uint8_t *buf, size_t len, sip__journal_fn fn, void *ctx,
                         const char **why) {
  *why = NULL;
  if (len < MAGIC_LEN || memcmp(buf, SIP__JOURNAL_MAGIC, MAGIC_LEN)) {
    *why = "not an idempotency journal (no \"" SIP__JOURNAL_MAGIC "\" at its start)";
    return 0;
  }
  size_t off = MAGIC_LEN, good = MAGIC_LEN;
  while (off < len) {
    const char *bad = NULL;
    size_t n = record_at(buf, len, off, fn, ctx, &bad);
    if (!n) {
      /* Damage: the first reason is kept, and reading goes on at the next
       * offset where a whole record with its own CRC starts, so the
       * answers after a damaged stretch are not lost (and not run again). */
      if (!*why) *why = bad;
      while (++off < len && !(n = record_at(buf, len, off, fn, ctx, &bad))) {
      }
      if (!n) break;
    }
    off += n;
    good += n;
  }
  return good;
}

/* ---- the file ---- */

static int write_all(int fd, const void *p, size_t n) {
  const uint8_t *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int sync_dir_of(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* A new file at j->tmp holding the magic; its fd or -1. */
static int start_tmp(sip__journal_t *j) {
  int fd = open(j->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0 && write_all(fd, SIP__JOURNAL_MAGIC, MAGIC_LEN)) {
    close(fd);
    unlink(j->tmp);
    fd = -1;
  }
  return fd;
}

/* Puts the finished temporary file in place and opens it for appending;
 * 0 on success (j->fd replaced). */
static int commit_tmp(sip__journal_t *j, int tfd, const char *dir) {
  int ok = fsync(tfd) == 0;
  ok = close(tfd) == 0 && ok;
  ok = ok && rename(j->tmp, j->path) == 0;
  if (!ok) {
    unlink(j->tmp);
    return -1;
  }
  sync_dir_of(dir);
  int fd = open(j->path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return -1;
  if (j->fd >= 0) close(j->fd);
  j->fd = fd;
  struct stat st;
  j->size = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
  return 0;
}

static void log_error(sip__journal_t *j, const char *what) {
  uint64_t now = sip__now_us();
  if (j->last_error_us && now - j->last_error_us < 60 * UINT64_C(1000000)) return;
  j->last_error_us = now;
  char eb[128];
  sip__log(SIP__LOG_ERROR, "idempotency journal not written", "file=%s what=\"%s\" error=\"%s\"",
           j->path, what, strerror_r(errno, eb, sizeof eb));
}

typedef struct open_ctx {
  sip__journal_fn fn;
  void *ctx;
  int tfd;
  int failed;
  size_t kept, expired;
  uint64_t now;
} open_ctx_t;

static void keep_live(void *c, const char *model, const char *key, uint64_t expires,
                      sip_response_t *resp) {
  open_ctx_t *o = c;
  if (expires <= o->now) {
    o->expired++;
    sip_response_free(resp);
    return;
  }
  uint8_t *rec;
  size_t len;
  sip_error_t *e = sip__journal_encode(model, key, expires, resp, &rec, &len);
  if (!e && write_all(o->tfd, rec, len)) o->failed = 1;
  sip_error_free(e);
  sip__free(rec);
  o->kept++;
  o->fn(o->ctx, model, key, expires, resp);
}

/* The whole file, or NULL (errno ENOENT: none). */
static uint8_t *slurp(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0) return NULL;
  uint8_t *buf = NULL;
  if (fstat(fd, &st) == 0 && (buf = sip__malloc((size_t)st.st_size + 1))) {
    size_t n = 0;
    while (n < (size_t)st.st_size) {
      ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      n += (size_t)r;
    }
    *len = n;
  }
  close(fd);
  if (!buf) errno = ENOMEM;
  return buf;
}

sip_error_t *sip__journal_open(const char *dir, sip__journal_fn fn, void *ctx,
                               sip__journal_t **out) {
  *out = NULL;
  sip__journal_t *j = sip__calloc(1, sizeof *j);
  if (!j) return SIP__OOM();
  pthread_mutex_init(&j->mu, NULL);
  j->fd = j->rewrite_fd = -1;
  j->path = sip__asprintf("%s/" SIP__JOURNAL_FILE, dir);
  j->tmp = sip__asprintf("%s/" SIP__JOURNAL_FILE ".tmp", dir);
  if (!j->path || !j->tmp) {
    sip__journal_close(j);
    return SIP__OOM();
  }
  char eb[128];
  sip_error_t *de = sip__state_dir_check(dir);
  if (de) {
    sip__journal_close(j);
    return de;
  }
  size_t len = 0;
  uint8_t *buf = slurp(j->path, &len);
  if (!buf && errno != ENOENT) {
    sip_error_t *e = sip_error_new(SIP_INTERNAL, "cannot read %s: %s", j->path,
                                   strerror_r(errno, eb, sizeof eb));
    sip__journal_close(j);
    return e;
  }
  open_ctx_t o = {fn, ctx, start_tmp(j), 0, 0, 0, sip__wall_us()};
  if (o.tfd < 0) {
    sip_error_t *e = sip_error_new(SIP_INTERNAL, "cannot create %s: %s", j->tmp,
                                   strerror_r(errno, eb, sizeof eb));
    sip__free(buf);
    sip__journal_close(j);
    return e;
  }
  const char *why = NULL;
  size_t used = buf ? sip__journal_read(buf, len, keep_live, &o, &why) : 0;
  sip__free(buf);
  if (why)
    sip__log(SIP__LOG_ERROR, "idempotency journal damaged", "file=%s bytes=%zu read=%zu "
             "skipped=%zu reason=\"%s\"", j->path, len, used, len - used, why);
  if (o.failed || commit_tmp(j, o.tfd, dir)) {
    if (!o.failed) o.tfd = -1; /* closed by commit_tmp */
    if (o.tfd >= 0) close(o.tfd);
    unlink(j->tmp);
    sip_error_t *e = sip_error_new(SIP_INTERNAL, "cannot write %s: %s", j->path,
                                   strerror_r(errno, eb, sizeof eb));
    sip__journal_close(j);
    return e;
  }
  if (buf || o.kept)
    sip__log(SIP__LOG_INFO, "idempotency journal read", "file=%s answers=%zu expired=%zu",
             j->path, o.kept, o.expired);
  *out = j;
  return NULL;
}

uint64_t sip__journal_append(sip__journal_t *j, const char *model, const char *key,
                         uint64_t expires_wall_us, const sip_response_t *resp) {
  uint8_t *rec;
  size_t len;
  sip_error_t *e = sip__journal_encode(model, key, expires_wall_us, resp, &rec, &len);
  pthread_mutex_lock(&j->mu);
  if (e) {
    errno = sip_error_code(e) == SIP_RESOURCE_EXHAUSTED ? ENOMEM : EFBIG;
    log_error(j, sip_error_message(e));
  } else if (write_all(j->fd, rec, len)) {
    log_error(j, "append");
  } else {
    j->size += len;
  }
  uint64_t size = j->size;
  pthread_mutex_unlock(&j->mu);
  sip_error_free(e);
  sip__free(rec);
  return size;
}

uint64_t sip__journal_size(sip__journal_t *j) {
  pthread_mutex_lock(&j->mu);
  uint64_t n = j->size;
  pthread_mutex_unlock(&j->mu);
  return n;
}

void sip__journal_emit(sip__journal_t *j, const char *model, const char *key,
                       uint64_t expires_wall_us, const sip_response_t *resp) {
  if (j->rewrite_fd < 0) return;
  uint8_t *rec;
  size_t len;
  sip_error_t *e = sip__journal_encode(model, key, expires_wall_us, resp, &rec, &len);
  if (!e && write_all(j->rewrite_fd, rec, len)) {
    log_error(j, "rewrite");
    close(j->rewrite_fd);
    unlink(j->tmp);
    j->rewrite_fd = -1;
  }
  sip_error_free(e);
  sip__free(rec);
}

void sip__journal_rewrite(sip__journal_t *j, sip__journal_each_fn each, void *ctx) {
  pthread_mutex_lock(&j->mu);
  j->rewrite_fd = start_tmp(j);
  if (j->rewrite_fd < 0) log_error(j, "rewrite");
  else each(ctx, j);
  if (j->rewrite_fd >= 0) {
    char *dir = sip__strdup(j->path);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (slash) *slash = '\0';
    if (!slash || commit_tmp(j, j->rewrite_fd, dir)) log_error(j, "rewrite");
    sip__free(dir);
  }
  j->rewrite_fd = -1;
  pthread_mutex_unlock(&j->mu);
}

void sip__journal_close(sip__journal_t *j) {
  if (!j) return;
  if (j->fd >= 0) close(j->fd);
  pthread_mutex_destroy(&j->mu);
  sip__free(j->path);
  sip__free(j->tmp);
  sip__free(j);
}
