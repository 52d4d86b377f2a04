/* sip — shared-memory regions (shm.h). */
#include "core/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

typedef struct region {
  char *name, *key;
  uint64_t offset, byte_size;
  int fd;         /* open while registered (fstat on each view); closed with the mapping */
  uint8_t *data;  /* the registration's first byte */
  sip_buf_t *map; /* the set's reference on the mapping */
} region_t;

struct sip__shm_set {
  pthread_mutex_t mu;
  region_t **v;
  size_t n, cap, max;
};

/* What the mapping's buffer releases: the whole mapping and its fd. */
typedef struct mapping {
  void *base;
  size_t len;
  int fd;
} mapping_t;

static void mapping_release(void *ctx) {
  mapping_t *m = ctx;
  munmap(m->base, m->len);
  close(m->fd);
  sip__free(m);
}

sip__shm_set_t *sip__shm_set_new(size_t max_regions) {
  sip__shm_set_t *s = sip__calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  s->max = max_regions ? max_regions : 4096;
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
  sip__free(s->v);
  pthread_mutex_destroy(&s->mu);
  sip__free(s);
}

static sip_error_t *check_name(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0) return sip_error_new(SIP_INVALID_ARGUMENT, "a shared memory region needs a name");
  if (n > SIP__SHM_MAX_NAME)
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region name is %zu bytes; at most %d "
                         "are accepted", n, SIP__SHM_MAX_NAME);
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

sip_error_t *sip__shm_register_fd(sip__shm_set_t *s, const char *name, int fd, const char *key,
                                  uint64_t offset, uint64_t byte_size) {
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
  mapping_t *m = sip__malloc(sizeof *m);
  region_t *r = sip__calloc(1, sizeof *r);
  if (!m || !r) {
    munmap(base, len);
    close(fd);
    sip__free(m);
    sip__free(r);
    return SIP__OOM();
  }
  *m = (mapping_t){.base = base, .len = len, .fd = fd};
  r->data = (uint8_t *)base + (offset - aligned);
  r->fd = fd;
  r->offset = offset;
  r->byte_size = byte_size;
  r->map = sip_buf_wrap(r->data, (size_t)byte_size, mapping_release, m); /* releases m on failure */
  r->name = sip__strdup(name);
  r->key = sip__strdup(key);
  if (!r->map || !r->name || !r->key) {
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
  return sip__shm_register_fd(s, name, fd, key, offset, byte_size);
}

void sip__shm_unregister(sip__shm_set_t *s, const char *name) {
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

sip_error_t *sip__shm_view(sip__shm_set_t *s, const char *name, uint64_t offset, uint64_t size,
                           const char *what, sip_buf_t **owner, uint8_t **data) {
  *owner = NULL;
  *data = NULL;
  pthread_mutex_lock(&s->mu);
  region_t *r = name ? find(s, name, NULL) : NULL;
  sip_error_t *e = NULL;
  struct stat st;
  if (!r)
    e = sip_error_new(SIP_NOT_FOUND, "%s: no shared memory region named '%.*s' is registered",
                      what, SIP__SHM_MAX_NAME, name ? name : "");
  else if (offset > r->byte_size || size > r->byte_size - offset)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: offset %" PRIu64 " + byte size %" PRIu64
                      " is past the end of shared memory region '%s' (%" PRIu64 " bytes)",
                      what, offset, size, name, r->byte_size);
  /* A client that shrank the object after registering would make reads
   * fault: look again before lending it. */
  else if (fstat(r->fd, &st) != 0 || (uint64_t)st.st_size < r->offset + r->byte_size)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "%s: shared memory region '%s' no longer covers its "
                      "registered %" PRIu64 " bytes (the object was truncated); register it "
                      "again", what, name, r->byte_size);
  else {
    *owner = sip_buf_ref(r->map);
    *data = r->data + offset;
  }
  pthread_mutex_unlock(&s->mu);
  return e;
}
