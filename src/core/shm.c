/* sip — shared-memory regions (shm.h). */
#include "core/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"

/* What a mapping's buffer releases: the whole mapping and its fd. */
typedef struct mapping {
  void *base;
  size_t len;
  int fd;
  int slot;         /* its guard slot (below); -1: not guarded (a sealed memfd) */
  uint64_t need;    /* offset + byte size: what the object must hold */
  char *name, *key; /* the region's, for messages */
} mapping_t;

/* ---- the guard: mappings a client can shrink under a request ---------------
 *
 * A client may ftruncate its POSIX shm object while a request reads or
 * writes the region (a backend, an encoder, a memmove): the access raises
 * SIGBUS, which would end the process. Every POSIX shm mapping is listed in
 * a table the SIGBUS handler reads without locks. A fault inside a listed
 * mapping replaces the whole mapping with anonymous memory (the access runs
 * again against zeros, its writes land nowhere), marks it damaged and
 * returns; whoever answers a request that used the mapping checks it
 * (sip__shm_scope_check, sip__shm_check_bytes) and answers an error
 * instead, and the region's next view maps the object afresh. Any other
 * SIGBUS goes to the handler that was there before (ASan's report), or
 * ends the process as it would have. Memfds a native client passed are
 * sealed against shrinking: they are not listed. */

#define GUARD_SLOTS 8192

typedef struct gslot {
  atomic_uintptr_t base;
  atomic_size_t len;
  atomic_int live;    /* 1 while the mapping is in place */
  atomic_int damaged; /* a fault replaced it */
  _Atomic(mapping_t *) m; /* NULL: free (changed under gmu) */
} gslot_t;

static gslot_t gslots[GUARD_SLOTS];
static atomic_size_t ghi; /* slots [0, ghi) have been used */
static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t gonce = PTHREAD_ONCE_INIT;
static struct sigaction gprev; /* the SIGBUS action before ours */

/* A SIGBUS that is not ours: what would have happened without us. */
static void chain(int sig, siginfo_t *si, void *uc) {
  void (*h)(int) = gprev.sa_handler;
  int sent = !si || si->si_code <= 0; /* kill(), not a fault */
  if (h == SIG_IGN && sent) return;
  if (h != SIG_DFL && h != SIG_IGN) {
    if (gprev.sa_flags & SA_SIGINFO)
      gprev.sa_sigaction(sig, si, uc);
    else
      h(sig);
    return;
  }
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  /* A sent signal is delivered again when this returns; a fault happens
   * again, now with the default action: the process ends of it. */
  if (sent) raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  int saved = errno;
  if (si && si->si_code > 0) {
    uintptr_t a = (uintptr_t)si->si_addr;
    size_t hi = atomic_load_explicit(&ghi, memory_order_acquire);
    for (size_t i = 0; i < hi; i++) {
      gslot_t *g = &gslots[i];
      if (!atomic_load_explicit(&g->live, memory_order_acquire)) continue;
      uintptr_t b = atomic_load_explicit(&g->base, memory_order_relaxed);
      size_t l = atomic_load_explicit(&g->len, memory_order_relaxed);
      if (a < b || a - b >= l) continue;
      /* The raw system call: nothing in between that a handler must not call. */
      long r = syscall(SYS_mmap, (long)b, (long)l, (long)(PROT_READ | PROT_WRITE),
                       (long)(MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS), -1L, 0L);
      if (r == -1) break; /* it stays a fault */
      atomic_store_explicit(&g->damaged, 1, memory_order_release);
      errno = saved;
      return;
    }
  }
  chain(sig, si, uc);
  errno = saved;
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &gprev) != 0)
    sip__log(SIP__LOG_WARN, "no SIGBUS handler: a shared memory object shrunk under a request "
             "ends the process", "error=\"%s\"", strerror(errno));
}

/* Lists m's mapping; -1 when the table is full. */
static int guard_add(mapping_t *m) {
  pthread_once(&gonce, install);
  pthread_mutex_lock(&gmu);
  size_t hi = atomic_load_explicit(&ghi, memory_order_relaxed), at = hi;
  for (size_t i = 0; i < hi && at == hi; i++)
    if (!atomic_load_explicit(&gslots[i].m, memory_order_relaxed)) at = i;
  if (at < GUARD_SLOTS) {
    gslot_t *g = &gslots[at];
    atomic_store_explicit(&g->base, (uintptr_t)m->base, memory_order_relaxed);
    atomic_store_explicit(&g->len, m->len, memory_order_relaxed);
    atomic_store_explicit(&g->damaged, 0, memory_order_relaxed);
    atomic_store_explicit(&g->m, m, memory_order_relaxed);
    atomic_store_explicit(&g->live, 1, memory_order_release);
    if (at == hi) atomic_store_explicit(&ghi, hi + 1, memory_order_release);
    m->slot = (int)at;
  }
  pthread_mutex_unlock(&gmu);
  return at < GUARD_SLOTS ? (int)at : -1;
}

/* Unlists m's mapping, before it is unmapped. */
static void guard_remove(mapping_t *m) {
  if (m->slot < 0) return;
  gslot_t *g = &gslots[m->slot];
  pthread_mutex_lock(&gmu);
  atomic_store_explicit(&g->live, 0, memory_order_release);
  atomic_store_explicit(&g->m, NULL, memory_order_relaxed);
  pthread_mutex_unlock(&gmu);
}

static int damaged(const mapping_t *m) {
  return m->slot >= 0 && atomic_load_explicit(&gslots[m->slot].damaged, memory_order_acquire);
}

/* The listed mapping [p, p + n) lies in (n 0: p's), or NULL. The caller
 * holds a reference on it, so it cannot go meanwhile. */
static mapping_t *guard_find(const void *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  size_t hi = atomic_load_explicit(&ghi, memory_order_acquire);
  for (size_t i = 0; i < hi; i++) {
    gslot_t *g = &gslots[i];
    if (!atomic_load_explicit(&g->live, memory_order_acquire)) continue;
    uintptr_t b = atomic_load_explicit(&g->base, memory_order_relaxed);
    size_t l = atomic_load_explicit(&g->len, memory_order_relaxed);
    if (a - b < l || (n && a < b && b - a < n)) return atomic_load(&g->m);
  }
  return NULL;
}

/* NULL while m's object holds its registration and no access faulted. */
static sip_error_t *check_mapping(const mapping_t *m) {
  struct stat st;
  long long size = fstat(m->fd, &st) == 0 ? (long long)st.st_size : 0;
  if ((uint64_t)size >= m->need && !damaged(m)) return NULL;
  if ((uint64_t)size < m->need)
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s' (key '%s') shrank to "
                         "%lld bytes while the request used it; its registration needs %" PRIu64
                         " bytes (offset + byte size): what the request read or wrote there is "
                         "lost; grow the object back (or register the region again) and send the "
                         "request again", m->name, m->key, size, m->need);
  return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s' (key '%s') shrank while "
                       "the request used it (it holds %lld bytes again; its registration needs "
                       "%" PRIu64 " bytes): what the request read or wrote there is lost; send "
                       "the request again", m->name, m->key, size, m->need);
}

sip_error_t *sip__shm_check_bytes(const void *p, size_t n) {
  mapping_t *m = guard_find(p, n);
  return m ? check_mapping(m) : NULL;
}

int sip__shm_guarded(const void *p, size_t n) { return guard_find(p, n) != NULL; }

/* ---- mappings ---------------------------------------------------------------- */

static void mapping_release(void *ctx) {
  mapping_t *m = ctx;
  guard_remove(m);
  munmap(m->base, m->len);
  close(m->fd);
  sip__free(m->name);
  sip__free(m->key);
  sip__free(m);
}

/* Maps [offset, offset + byte_size) of fd (taken: closed on error too), a
 * mapping listed in the guard when `guarded`: *buf owns it, *data is the
 * registration's first byte. */
static sip_error_t *map_object(int fd, const char *name, const char *key, uint64_t offset,
                               uint64_t byte_size, int guarded, mapping_t **mo, sip_buf_t **buf,
                               uint8_t **data) {
  long page = sysconf(_SC_PAGESIZE);
  uint64_t aligned = offset - offset % (uint64_t)(page > 0 ? page : 4096);
  size_t len = (size_t)(offset - aligned + byte_size);
  void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)aligned);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    return sip_error_new(err == EACCES ? SIP_PERMISSION_DENIED : SIP_RESOURCE_EXHAUSTED,
                         "shared memory region '%s': cannot map '%s': %s", name, key,
                         strerror(err));
  }
  mapping_t *m = sip__calloc(1, sizeof *m);
  if (!m) {
    munmap(base, len);
    close(fd);
    return SIP__OOM();
  }
  *m = (mapping_t){.base = base, .len = len, .fd = fd, .slot = -1, .need = offset + byte_size};
  uint8_t *d = (uint8_t *)base + (offset - aligned);
  sip_buf_t *b = sip_buf_wrap(d, (size_t)byte_size, mapping_release, m); /* releases m on failure */
  if (!b) return SIP__OOM();
  m->name = sip__strdup(name);
  m->key = sip__strdup(key);
  sip_error_t *e = !m->name || !m->key ? SIP__OOM() : NULL;
  if (!e && guarded && guard_add(m) < 0)
    e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "shared memory region '%s': %d shared memory "
                      "mappings are in use in this process, the most it keeps; unregister some "
                      "regions first", name, GUARD_SLOTS);
  if (e) {
    sip_buf_unref(b);
    return e;
  }
  *mo = m;
  *buf = b;
  *data = d;
  return NULL;
}

/* ---- sets ---------------------------------------------------------------------- */

typedef struct region {
  char *name, *key;
  uint64_t offset, byte_size;
  int guarded;    /* a POSIX shm object: its client can shrink it */
  mapping_t *m;   /* the current mapping, owned by map */
  uint8_t *data;  /* the registration's first byte in it */
  sip_buf_t *map; /* the set's reference on the mapping */
} region_t;

/* A mapping a scope lent, and its reference. */
typedef struct use {
  sip_buf_t *ref;
  mapping_t *m;
} use_t;

struct sip__shm_set {
  pthread_mutex_t mu;
  region_t **v;
  size_t n, cap, max;
  sip__shm_set_t *parent; /* a scope: the set whose regions it lends */
  use_t *uses;            /* a scope: the guarded mappings it lent */
  size_t n_uses, cap_uses;
};

sip__shm_set_t *sip__shm_set_new(size_t max_regions) {
  sip__shm_set_t *s = sip__calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  s->max = max_regions ? max_regions : 4096;
  return s;
}

sip__shm_set_t *sip__shm_scope_new(sip__shm_set_t *parent) {
  sip__shm_set_t *s = parent ? sip__shm_set_new(1) : NULL;
  if (s) s->parent = parent->parent ? parent->parent : parent;
  return s;
}

static void region_free(region_t *r) {
  if (!r) return;
  sip_buf_unref(r->map); /* the mapping (and fd) go with the last view */
  sip__free(r->name);
  sip__free(r->key);
  sip__free(r);
}

void sip__shm_set_free(sip__shm_set_t *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) region_free(s->v[i]);
  for (size_t i = 0; i < s->n_uses; i++) sip_buf_unref(s->uses[i].ref);
  sip__free(s->uses);
  sip__free(s->v);
  pthread_mutex_destroy(&s->mu);
  sip__free(s);
}

#define NAME_RULE \
  "a region name is 1 to %d bytes, not '.' or '..', without '/' or control characters"

/* A name every front-end can name again: a path segment (HTTP routes), a
 * log field and a JSON string without surprises. */
static sip_error_t *check_name(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0)
    return sip_error_new(SIP_INVALID_ARGUMENT, "a shared memory region needs a name; " NAME_RULE,
                         SIP__SHM_MAX_NAME);
  if (n > SIP__SHM_MAX_NAME)
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region name is %zu bytes; at most %d "
                         "are accepted (" NAME_RULE ")", n, SIP__SHM_MAX_NAME, SIP__SHM_MAX_NAME);
  if (!strcmp(name, ".") || !strcmp(name, ".."))
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region name '%s' is not usable; "
                         NAME_RULE, name, SIP__SHM_MAX_NAME);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c == '/' || c < 0x20 || c == 0x7f)
      return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region name holds %s at byte %zu; "
                           NAME_RULE, c == '/' ? "'/'" : "a control character", i,
                           SIP__SHM_MAX_NAME);
  }
  return NULL;
}

sip_error_t *sip__shm_check_key(const char *key) {
  if (!key || !*key)
    return sip_error_new(SIP_INVALID_ARGUMENT, "a shared memory key is needed (a POSIX shm "
                         "name such as \"/my_region\")");
  const char *k = key[0] == '/' ? key + 1 : key;
  size_t n = strlen(k);
  if (n == 0 || n > SIP__SHM_MAX_NAME || strchr(k, '/') || !strcmp(k, ".") || !strcmp(k, ".."))
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory key '%.*s' is not a POSIX shm name: "
                         "expected \"/name\" (one component of 1 to %d bytes, not '.' or '..', "
                         "no other '/'), naming an object in /dev/shm", SIP__SHM_MAX_NAME + 8,
                         key, SIP__SHM_MAX_NAME);
  return NULL;
}

static region_t *find(sip__shm_set_t *s, const char *name, size_t *at) {
  for (size_t i = 0; i < s->n; i++)
    if (!strcmp(s->v[i]->name, name)) {
      if (at) *at = i;
      return s->v[i];
    }
  return NULL;
}

/* sip__shm_register_fd, with the mapping guarded when `guarded`. */
static sip_error_t *register_fd(sip__shm_set_t *s, const char *name, int fd, const char *key,
                                uint64_t offset, uint64_t byte_size, int guarded) {
  if (s->parent) s = s->parent;
  sip_error_t *e = check_name(name);
  if (e) {
    close(fd);
    return e;
  }
  if (byte_size == 0 || byte_size > SIZE_MAX / 2 || offset > (uint64_t)INT64_MAX ||
      byte_size > (uint64_t)INT64_MAX - offset) {
    close(fd);
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s': offset %" PRIu64
                         " and byte size %" PRIu64 " are not a usable range (expected a byte "
                         "size > 0 and offset + byte size below 2^63)", name, offset, byte_size);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s': '%s' is not a shared "
                         "memory object", name, key);
  }
  if ((uint64_t)st.st_size < offset + byte_size) {
    close(fd);
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s': offset %" PRIu64
                         " + byte size %" PRIu64 " is past the end of '%s', which holds %lld "
                         "bytes", name, offset, byte_size, key, (long long)st.st_size);
  }
  region_t *r = sip__calloc(1, sizeof *r);
  if (!r) {
    close(fd);
    return SIP__OOM();
  }
  if ((e = map_object(fd, name, key, offset, byte_size, guarded, &r->m, &r->map, &r->data))) {
    sip__free(r);
    return e;
  }
  r->offset = offset;
  r->byte_size = byte_size;
  r->guarded = guarded;
  r->name = sip__strdup(name);
  r->key = sip__strdup(key);
  if (!r->name || !r->key) {
    region_free(r);
    return SIP__OOM();
  }
  pthread_mutex_lock(&s->mu);
  if (find(s, name, NULL))
    e = sip_error_new(SIP_ALREADY_EXISTS, "shared memory region '%s' is already registered; "
                      "unregister it first", name);
  else if (s->n == s->max)
    e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "%zu shared memory regions are registered, the "
                      "most this server keeps; unregister some first", s->max);
  else if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 8;
    region_t **v = sip__realloc(s->v, cap * sizeof *v);
    if (!v)
      e = SIP__OOM();
    else {
      s->v = v;
      s->cap = cap;
    }
  }
  if (!e) s->v[s->n++] = r;
  pthread_mutex_unlock(&s->mu);
  if (e) region_free(r);
  return e;
}

sip_error_t *sip__shm_register_fd(sip__shm_set_t *s, const char *name, int fd, const char *key,
                                  uint64_t offset, uint64_t byte_size) {
  return register_fd(s, name, fd, key, offset, byte_size, 0);
}

sip_error_t *sip__shm_register(sip__shm_set_t *s, const char *name, const char *key,
                               uint64_t offset, uint64_t byte_size) {
  sip_error_t *e = check_name(name);
  if (!e) e = sip__shm_check_key(key);
  if (e) return e;
  char path[SIP__SHM_MAX_NAME + 16];
  snprintf(path, sizeof path, "/dev/shm/%s", key[0] == '/' ? key + 1 : key);
  /* What shm_open does, plus O_NONBLOCK: a FIFO planted in /dev/shm must
   * not block the caller (it is refused by the S_ISREG check). */
  int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return sip_error_new(SIP_NOT_FOUND, "shared memory region '%s': no shared memory object "
                           "'%s' (create it with shm_open before registering)", name, key);
    return sip_error_new(err == EACCES || err == EPERM ? SIP_PERMISSION_DENIED
                                                       : SIP_INVALID_ARGUMENT,
                         "shared memory region '%s': cannot open shared memory object '%s': %s",
                         name, key, strerror(err));
  }
  /* The client keeps the object and may shrink it under a request: guarded. */
  return register_fd(s, name, fd, key, offset, byte_size, 1);
}

void sip__shm_unregister(sip__shm_set_t *s, const char *name) {
  if (s->parent) s = s->parent;
  region_t **gone = NULL;
  size_t n_gone = 0;
  pthread_mutex_lock(&s->mu);
  if (!name || !*name) {
    gone = s->v;
    n_gone = s->n;
    s->v = NULL;
    s->n = s->cap = 0;
  } else {
    size_t at;
    region_t *r = find(s, name, &at);
    if (r) {
      s->v[at] = s->v[--s->n];
      pthread_mutex_unlock(&s->mu);
      region_free(r);
      return;
    }
  }
  pthread_mutex_unlock(&s->mu);
  for (size_t i = 0; i < n_gone; i++) region_free(gone[i]);
  sip__free(gone);
}

void sip__shm_info_free(sip__shm_info_t *v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++) {
    sip__free(v[i].name);
    sip__free(v[i].key);
  }
  sip__free(v);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const sip__shm_info_t *)a)->name, ((const sip__shm_info_t *)b)->name);
}

sip_error_t *sip__shm_status(sip__shm_set_t *s, const char *name, sip__shm_info_t **out,
                             size_t *n) {
  if (s->parent) s = s->parent;
  *out = NULL;
  *n = 0;
  int one = name && *name;
  pthread_mutex_lock(&s->mu);
  region_t *r = one ? find(s, name, NULL) : NULL;
  if (one && !r) {
    pthread_mutex_unlock(&s->mu);
    return sip_error_new(SIP_NOT_FOUND, "no shared memory region named '%.*s' is registered",
                         SIP__SHM_MAX_NAME, name);
  }
  size_t cnt = one ? 1 : s->n;
  sip__shm_info_t *v = cnt ? sip__calloc(cnt, sizeof *v) : NULL;
  int oom = cnt && !v;
  for (size_t i = 0; v && i < cnt; i++) {
    region_t *x = one ? r : s->v[i];
    v[i] = (sip__shm_info_t){.name = sip__strdup(x->name), .key = sip__strdup(x->key),
                             .offset = x->offset, .byte_size = x->byte_size};
    oom |= !v[i].name || !v[i].key;
  }
  pthread_mutex_unlock(&s->mu);
  if (oom) {
    sip__shm_info_free(v, cnt);
    return SIP__OOM();
  }
  if (cnt > 1) qsort(v, cnt, sizeof *v, by_name);
  *out = v;
  *n = cnt;
  return NULL;
}

/* ---- views ------------------------------------------------------------------- */

/* Whether r can be lent: its object still holds the registration (a client
 * that shrank it would make accesses fault), and a mapping a fault damaged
 * is replaced by a fresh one. Caller holds the set's lock. */
static sip_error_t *refresh(region_t *r, const char *what) {
  struct stat st;
  long long size = fstat(r->m->fd, &st) == 0 ? (long long)st.st_size : 0;
  if ((uint64_t)size < r->offset + r->byte_size)
    return sip_error_new(SIP_INVALID_ARGUMENT, "%s: shared memory region '%s' (key '%s') no "
                         "longer covers its registered %" PRIu64 " bytes: the object was "
                         "truncated to %lld bytes and the registration needs %" PRIu64
                         " (offset + byte size); grow it back or register the region again",
                         what, r->name, r->key, r->byte_size, size, r->offset + r->byte_size);
  if (!damaged(r->m)) return NULL;
  int fd = fcntl(r->m->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "%s: shared memory region '%s' must be mapped "
                         "again (its object shrank under an earlier request): %s", what, r->name,
                         strerror(errno));
  mapping_t *m;
  sip_buf_t *map;
  uint8_t *data;
  sip_error_t *e = map_object(fd, r->name, r->key, r->offset, r->byte_size, r->guarded, &m, &map,
                              &data);
  if (e) return e;
  sip_buf_unref(r->map); /* requests still holding the damaged one keep it until they answer */
  r->m = m;
  r->map = map;
  r->data = data;
  return NULL;
}

/* A view of a region of s (not a scope); *m gets its mapping. */
static sip_error_t *view(sip__shm_set_t *s, const char *name, uint64_t offset, uint64_t size,
                         const char *what, sip_buf_t **owner, uint8_t **data, mapping_t **m) {
  pthread_mutex_lock(&s->mu);
  region_t *r = name ? find(s, name, NULL) : NULL;
  sip_error_t *e = NULL;
  if (!r)
    e = sip_error_new(SIP_NOT_FOUND, "%s: no shared memory region named '%.*s' is registered",
                      what, SIP__SHM_MAX_NAME, name ? name : "");
  else if (offset > r->byte_size || size > r->byte_size - offset)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: offset %" PRIu64 " + byte size %" PRIu64
                      " is past the end of shared memory region '%s' (%" PRIu64 " bytes)",
                      what, offset, size, name, r->byte_size);
  else if (!(e = refresh(r, what))) {
    *owner = sip_buf_ref(r->map);
    *data = r->data + offset;
    *m = r->m;
  }
  pthread_mutex_unlock(&s->mu);
  return e;
}

sip_error_t *sip__shm_view(sip__shm_set_t *s, const char *name, uint64_t offset, uint64_t size,
                           const char *what, sip_buf_t **owner, uint8_t **data) {
  *owner = NULL;
  *data = NULL;
  mapping_t *m = NULL;
  sip_error_t *e = view(s->parent ? s->parent : s, name, offset, size, what, owner, data, &m);
  if (e || !s->parent || m->slot < 0) return e;
  /* A scope remembers each guarded mapping once, for sip__shm_scope_check. */
  pthread_mutex_lock(&s->mu);
  size_t i = 0;
  while (i < s->n_uses && s->uses[i].m != m) i++;
  if (i == s->n_uses && s->n_uses == s->cap_uses) {
    size_t cap = s->cap_uses ? s->cap_uses * 2 : 4;
    use_t *u = sip__reallocarray(s->uses, cap, sizeof *u);
    if (!u)
      e = SIP__OOM();
    else
      s->uses = u, s->cap_uses = cap;
  }
  if (i == s->n_uses && !e) s->uses[s->n_uses++] = (use_t){.ref = sip_buf_ref(*owner), .m = m};
  pthread_mutex_unlock(&s->mu);
  if (e) {
    sip_buf_unref(*owner);
    *owner = NULL;
    *data = NULL;
  }
  return e;
}

sip_error_t *sip__shm_scope_check(sip__shm_set_t *s) {
  if (!s || !s->parent) return NULL;
  sip_error_t *e = NULL;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->n_uses && !e; i++) e = check_mapping(s->uses[i].m);
  pthread_mutex_unlock(&s->mu);
  return e;
}
