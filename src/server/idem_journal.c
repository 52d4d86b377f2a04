/* sip — the idempotency journal: records, their reader, the file
 * (idem_journal.h). */
#include "server/idem_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/core.h"
#include "server/state.h"
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

/* ---- encoding ---- */

typedef struct wbuf {
  uint8_t *p;
  size_t n, cap;
  int oom;
} wbuf_t;

static void put(wbuf_t *b, const void *v, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    uint8_t *np = sip__realloc(b->p, cap);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, v, n);
  b->n += n;
}

#define PUT(b, type, v)   \
  do {                    \
    type v_ = (type)(v);  \
    put(b, &v_, sizeof v_); \
  } while (0)

/* A string with a length prefix of `width` bytes (2 or 4). */
static int put_str(wbuf_t *b, const char *s, int width) {
  size_t n = s ? strlen(s) : 0;
  if (width == 2 ? n > UINT16_MAX : n > UINT32_MAX) return -1;
  if (width == 2) PUT(b, uint16_t, n);
  else PUT(b, uint32_t, n);
  put(b, s, n);
  return 0;
}

sip_error_t *sip__journal_encode(const char *model, const char *key, uint64_t expires_wall_us,
                                 const sip_response_t *r, uint8_t **out, size_t *len) {
  *out = NULL;
  *len = 0;
  wbuf_t b = {0};
  PUT(&b, uint32_t, 0); /* length and CRC, set below */
  PUT(&b, uint32_t, 0);
  PUT(&b, uint64_t, expires_wall_us);
  int bad = put_str(&b, model, 2) || put_str(&b, key, 4);
  PUT(&b, int32_t, r->code);
  PUT(&b, uint64_t, r->queue_us);
  PUT(&b, uint64_t, r->compute_us);
  PUT(&b, uint64_t, r->total_us);
  bad = bad || put_str(&b, r->message, 4);
  PUT(&b, uint32_t, r->n_outputs);
  for (size_t i = 0; !bad && i < r->n_outputs; i++) {
    const sip_tensor_t *t = r->outputs[i];
    bad = put_str(&b, t->name, 2);
    PUT(&b, int32_t, t->dtype);
    PUT(&b, uint32_t, t->rank);
    put(&b, t->dims, (size_t)t->rank * sizeof t->dims[0]);
    PUT(&b, uint64_t, t->nbytes);
    put(&b, t->data, t->nbytes);
  }
  if (!bad && !b.oom && b.n - 8 >= MAX_RECORD) bad = 1;
  if (bad || b.oom) {
    sip__free(b.p);
    return bad ? sip_error_new(SIP_INVALID_ARGUMENT, "idempotency journal: an answer too large "
                               "to record (a name, key or message over its length limit, or "
                               "over 2 GiB in all)")
               : SIP__OOM();
  }
  uint32_t plen = (uint32_t)(b.n - 8), crc = (uint32_t)crc32(0, b.p + 8, plen);
  memcpy(b.p, &plen, 4);
  memcpy(b.p + 4, &crc, 4);
  *out = b.p;
  *len = b.n;
  return NULL;
}

/* ---- reading ---- */

typedef struct rbuf {
  const uint8_t *p;
  size_t n, off;
} rbuf_t;

static int get(rbuf_t *b, void *v, size_t n) {
  if (n > b->n - b->off) return -1;
  memcpy(v, b->p + b->off, n);
  b->off += n;
  return 0;
}

/* A string with a length prefix (owned, NUL-terminated) into *out. */
static int get_str(rbuf_t *b, int width, char **out) {
  uint32_t n = 0;
  uint16_t n16 = 0;
  if (width == 2 ? get(b, &n16, 2) : get(b, &n, 4)) return -1;
  if (width == 2) n = n16;
  if (n > b->n - b->off || memchr(b->p + b->off, 0, n)) return -1;
  *out = sip__malloc((size_t)n + 1);
  if (!*out) return -1;
  memcpy(*out, b->p + b->off, n);
  (*out)[n] = '\0';
  b->off += n;
  return 0;
}

/* One payload into its parts; 0 when whole and valid. */
static int decode(rbuf_t *b, char **model, char **key, uint64_t *expires, sip_response_t **resp) {
  int32_t code = 0;
  uint64_t q = 0, c = 0, t = 0;
  uint32_t n_out = 0;
  char *msg = NULL;
  *model = *key = NULL;
  *resp = NULL;
  if (get(b, expires, 8) || get_str(b, 2, model) || get_str(b, 4, key) || get(b, &code, 4) ||
      get(b, &q, 8) || get(b, &c, 8) || get(b, &t, 8) || get_str(b, 4, &msg) ||
      get(b, &n_out, 4) || code < 0 || code >= SIP_CODE_COUNT_ || n_out > 4096 ||
      (size_t)n_out * 16 > b->n - b->off) {
    sip__free(msg);
    sip__free(*model);
    sip__free(*key);
    *model = *key = NULL;
    return -1;
  }
  sip_tensor_t **outs = n_out ? sip__calloc(n_out, sizeof *outs) : NULL;
  int ok = !n_out || outs;
  for (uint32_t i = 0; ok && i < n_out; i++) {
    char *name = NULL;
    int32_t dtype = 0;
    uint32_t rank = 0;
    int64_t dims[SIP_MAX_RANK];
    uint64_t nbytes = 0;
    ok = !get_str(b, 2, &name) && !get(b, &dtype, 4) && !get(b, &rank, 4) &&
         rank <= SIP_MAX_RANK && !get(b, dims, rank * sizeof dims[0]) && !get(b, &nbytes, 8) &&
         nbytes <= b->n - b->off &&
         (dtype == SIP_DTYPE_STRING || sip_dtype_size((sip_dtype_t)dtype) > 0);
    if (ok) {
      outs[i] = sip_tensor_new_copy(name, (sip_dtype_t)dtype, (int)rank, dims, b->p + b->off,
                                    (size_t)nbytes);
      b->off += (size_t)nbytes;
      sip_error_t *e = outs[i] ? sip_tensor_validate(outs[i]) : NULL;
      ok = outs[i] && !e;
      sip_error_free(e);
    }
    sip__free(name);
  }
  if (ok && b->off != b->n) ok = 0; /* bytes left over: not a record of ours */
  if (!ok) {
    for (uint32_t i = 0; outs && i < n_out; i++) sip_tensor_free(outs[i]);
    sip__free(outs);
    sip__free(msg);
    sip__free(*model);
    sip__free(*key);
    *model = *key = NULL;
    return -1;
  }
  *resp = sip__response_new((sip_code_t)code, msg, 0, outs, n_out, q, c, t);
  if (!*resp || (int32_t)(*resp)->code != code) {
    sip_response_free(*resp);
    *resp = NULL;
    sip__free(*model);
    sip__free(*key);
    *model = *key = NULL;
    return -1;
  }
  return 0;
}

size_t sip__journal_read(const uint8_t *buf, size_t len, sip__journal_fn fn, void *ctx,
                         const char **why) {
  *why = NULL;
  if (len < MAGIC_LEN || memcmp(buf, SIP__JOURNAL_MAGIC, MAGIC_LEN)) {
    *why = "not an idempotency journal (no \"" SIP__JOURNAL_MAGIC "\" at its start)";
    return 0;
  }
  size_t off = MAGIC_LEN;
  while (off < len) {
    uint32_t plen, crc;
    if (len - off < 8) {
      *why = "a record cut short (its header)";
      break;
    }
    memcpy(&plen, buf + off, 4);
    memcpy(&crc, buf + off + 4, 4);
    if (plen > len - off - 8) {
      *why = "a record cut short";
      break;
    }
    if ((uint32_t)crc32(0, buf + off + 8, plen) != crc) {
      *why = "a record whose CRC does not match";
      break;
    }
    rbuf_t b = {buf + off + 8, plen, 0};
    char *model, *key;
    uint64_t expires;
    sip_response_t *resp;
    if (decode(&b, &model, &key, &expires, &resp)) {
      *why = "a malformed record";
      break;
    }
    fn(ctx, model, key, expires, resp);
    sip__free(model);
    sip__free(key);
    off += 8 + (size_t)plen;
  }
  return off < MAGIC_LEN ? 0 : off;
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
    sip__log(SIP__LOG_ERROR, "idempotency journal read in part", "file=%s bytes=%zu read=%zu "
             "reason=\"%s\"", j->path, len, used, why);
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

void sip__journal_append(sip__journal_t *j, const char *model, const char *key,
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
  pthread_mutex_unlock(&j->mu);
  sip_error_free(e);
  sip__free(rec);
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
