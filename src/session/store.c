/* sip — the engine's model store (session/store.h; docs/elastic.md "One
 * model store"): one loaded model per (backend, file, content, options),
 * shared by the pools that name it, freed at its last release.
 *
 * The content is the file's SHA-256 (libcrypto's, which the response cache
 * links too). A file whose identity (device, inode, size, mtime) matches an
 * entry's is not read again: the entry's digest stands for it; a file
 * rewritten in place has a new mtime and is hashed again. */
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/store.h"

#define DIGEST 32

struct sip__store_entry {
  sip__store_entry_t *next;
  const sip_backend_vtable_t *vt;
  char *path;  /* real path, NULL: no file */
  char *opts;  /* the options, sorted, and the extra: the rest of the key */
  struct stat id; /* the file's identity when it was hashed */
  unsigned char digest[DIGEST];
  void *model;
  long refs;
  int loading; /* the first acquirer is loading it; others wait on cv */
  uint64_t bytes;
};

void sip__store_init(sip__store_t *st) {
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  st->head = NULL;
  atomic_init(&st->loads, 0);
  atomic_init(&st->shares, 0);
}

static void entry_free(sip__store_entry_t *e) {
  sip__free(e->path);
  sip__free(e->opts);
  sip__free(e);
}

void sip__store_destroy(sip__store_t *st) {
  for (sip__store_entry_t *e = st->head, *nx; e; e = nx) {
    nx = e->next;
    entry_free(e); /* a model still held is left to its holder */
  }
  st->head = NULL;
  pthread_mutex_destroy(&st->mu);
  pthread_cond_destroy(&st->cv);
}

static int cmp_kv(const void *a, const void *b) {
  const sip_kv_t *x = *(const sip_kv_t *const *)a, *y = *(const sip_kv_t *const *)b;
  int c = strcmp(x->key, y->key);
  return c ? c : strcmp(x->value ? x->value : "", y->value ? y->value : "");
}

/* "k1=v1\nk2=v2\n|extra": the options in key order and the extra. */
static char *options_text(const sip_kv_t *o, size_t n, const char *extra) {
  const sip_kv_t **v = n ? sip__calloc(n, sizeof *v) : NULL;
  if (n && !v) return NULL;
  size_t len = 2 + (extra ? strlen(extra) : 0);
  for (size_t i = 0; i < n; i++) {
    v[i] = &o[i];
    len += strlen(o[i].key) + (o[i].value ? strlen(o[i].value) : 0) + 2;
  }
  if (n) qsort(v, n, sizeof *v, cmp_kv);
  char *s = sip__malloc(len), *w = s;
  for (size_t i = 0; s && i < n; i++)
    w += sprintf(w, "%s=%s\n", v[i]->key, v[i]->value ? v[i]->value : "");
  if (s) sprintf(w, "|%s", extra ? extra : "");
  sip__free((void *)v);
  return s;
}

static int same_id(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static int same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static sip_error_t *hash_file(const char *path, unsigned char *out) {
  FILE *f = fopen(path, "rbe");
  if (!f)
    return sip_error_new(SIP_NOT_FOUND, "model file %s cannot be read: %s", path, strerror(errno));
  EVP_MD_CTX *h = EVP_MD_CTX_new();
  unsigned char *buf = sip__malloc(1 << 20);
  int ok = h && buf && EVP_DigestInit_ex(h, EVP_sha256(), NULL);
  size_t got;
  while (ok && (got = fread(buf, 1, 1 << 20, f)) > 0) ok = EVP_DigestUpdate(h, buf, got);
  int read_err = ferror(f);
  unsigned n = 0;
  ok = ok && !read_err && EVP_DigestFinal_ex(h, out, &n) && n == DIGEST;
  EVP_MD_CTX_free(h);
  sip__free(buf);
  fclose(f);
  if (read_err) return sip_error_new(SIP_NOT_FOUND, "model file %s: read error", path);
  return ok ? NULL : SIP__OOM();
}

/* The entry of this key (NULL: none), under mu. With `digest` NULL the
 * file's identity stands for its content (sip__store_peek). */
static sip__store_entry_t *find(sip__store_t *st, const sip_backend_vtable_t *vt, const char *path,
                                const struct stat *id, const unsigned char *digest,
                                const char *opts) {
  for (sip__store_entry_t *e = st->head; e; e = e->next) {
    if (e->vt != vt || !same_str(e->path, path) || strcmp(e->opts, opts)) continue;
    if (!path) return e;
    if (digest ? e->id.st_size == id->st_size && !memcmp(e->digest, digest, DIGEST)
               : same_id(&e->id, id))
      return e;
  }
  return NULL;
}

/* The real path and identity of `path` (NULL stays NULL). */
static sip_error_t *identify(const char *path, char **real, struct stat *id) {
  *real = NULL;
  memset(id, 0, sizeof *id);
  if (!path) return NULL;
  char buf[PATH_MAX];
  if (!realpath(path, buf) || stat(buf, id) != 0)
    return sip_error_new(SIP_NOT_FOUND, "model file %s: %s", path, strerror(errno));
  return (*real = sip__strdup(buf)) ? NULL : SIP__OOM();
}

sip_error_t *sip__store_acquire(sip__store_t *st, const sip_backend_vtable_t *vt, void *state,
                                const char *path, const sip_kv_t *options, size_t n_options,
                                const char *extra, sip__store_entry_t **entry, int *loaded_now) {
  *entry = NULL;
  *loaded_now = 0;
  char *real = NULL, *opts = NULL;
  struct stat id;
  unsigned char digest[DIGEST] = {0};
  sip_error_t *err = identify(path, &real, &id);
  if (!err && !(opts = options_text(options, n_options, extra))) err = SIP__OOM();
  if (err) goto out;
  /* The digest of an entry of the same file unchanged, else the file's. */
  pthread_mutex_lock(&st->mu);
  sip__store_entry_t *same = real ? find(st, vt, real, &id, NULL, opts) : NULL;
  if (same) memcpy(digest, same->digest, DIGEST);
  pthread_mutex_unlock(&st->mu);
  if (real && !same && (err = hash_file(real, digest))) goto out;
  pthread_mutex_lock(&st->mu);
  sip__store_entry_t *e;
  while ((e = find(st, vt, real, &id, digest, opts)) && e->loading)
    pthread_cond_wait(&st->cv, &st->mu);
  if (e) {
    e->refs++;
    *entry = e;
    pthread_mutex_unlock(&st->mu);
    atomic_fetch_add(&st->shares, 1);
    goto out;
  }
  if (!(e = sip__calloc(1, sizeof *e))) {
    pthread_mutex_unlock(&st->mu);
    err = SIP__OOM();
    goto out;
  }
  *e = (sip__store_entry_t){.next = st->head, .vt = vt, .path = real, .opts = opts, .id = id,
                            .refs = 1, .loading = 1};
  memcpy(e->digest, digest, DIGEST);
  real = opts = NULL;
  st->head = e;
  pthread_mutex_unlock(&st->mu);
  /* Loads run one at a time (the loader thread): the growth is this one's. */
  uint64_t rss0 = sip__resident_settled();
  void *model = NULL;
  err = vt->load(state, e->path, n_options ? options : NULL, n_options, &model);
  uint64_t rss1 = sip__resident_settled();
  pthread_mutex_lock(&st->mu);
  e->loading = 0;
  if (err) { /* unlinked: the waiters look again and load it themselves */
    sip__store_entry_t **pp = &st->head;
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
    entry_free(e);
  } else {
    e->model = model;
    e->bytes = rss1 > rss0 ? rss1 - rss0 : 0;
    *entry = e;
    *loaded_now = 1;
    atomic_fetch_add(&st->loads, 1);
  }
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
out:
  sip__free(real);
  sip__free(opts);
  return err;
}

void sip__store_release(sip__store_t *st, sip__store_entry_t *e) {
  if (!e) return;
  pthread_mutex_lock(&st->mu);
  if (--e->refs > 0) {
    pthread_mutex_unlock(&st->mu);
    return;
  }
  sip__store_entry_t **pp = &st->head;
  while (*pp != e) pp = &(*pp)->next;
  *pp = e->next;
  pthread_mutex_unlock(&st->mu);
  /* Outside the lock: freeing a large model takes a while. */
  e->vt->model_free(e->model);
  entry_free(e);
}

void *sip__store_model(const sip__store_entry_t *e) { return e->model; }

uint64_t sip__store_bytes(const sip__store_entry_t *e) { return e->bytes; }

long sip__store_refs(sip__store_t *st, const sip__store_entry_t *e) {
  long r = 0;
  pthread_mutex_lock(&st->mu);
  for (const sip__store_entry_t *x = st->head; x && !r; x = x->next)
    if (x == e) r = x->refs; /* a pointer to an entry freed is only compared */
  pthread_mutex_unlock(&st->mu);
  return r;
}

uint64_t sip__store_peek(sip__store_t *st, const sip_backend_vtable_t *vt, const char *path,
                         const sip_kv_t *options, size_t n_options, const char *extra) {
  char *real = NULL, *opts = NULL;
  struct stat id;
  uint64_t bytes = 0;
  sip_error_t *err = identify(path, &real, &id);
  if (!err && (opts = options_text(options, n_options, extra))) {
    pthread_mutex_lock(&st->mu);
    sip__store_entry_t *e = find(st, vt, real, &id, NULL, opts);
    if (e && !e->loading) bytes = e->bytes;
    pthread_mutex_unlock(&st->mu);
  }
  sip_error_free(err);
  sip__free(real);
  sip__free(opts);
  return bytes;
}

void sip__store_read(sip__store_t *st, sip__store_stats_t *out) {
  *out = (sip__store_stats_t){.loads = atomic_load(&st->loads),
                              .shares = atomic_load(&st->shares)};
  pthread_mutex_lock(&st->mu);
  for (const sip__store_entry_t *e = st->head; e; e = e->next)
    if (!e->loading) {
      out->models++;
      out->bytes += e->bytes;
    }
  pthread_mutex_unlock(&st->mu);
}
