/* sip — libsipclient: shared memory regions. A region is a sealed memfd
 * mapped here and registered with the server over the connection (its fd
 * goes as SCM_RIGHTS); the client registers it again after a reconnection
 * (client.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"
#include "sip/client.h"
#include "transport/frame.h"
#include "client_impl.h"

typedef struct shm_mapping {
  void *base;
  size_t len;
  int fd;
} shm_mapping_t;

static void shm_mapping_release(void *ctx) {
  shm_mapping_t *m = ctx;
  munmap(m->base, m->len);
  close(m->fd);
  sip__free(m);
}

sip_error_t *sip_client_shm_create(sip_client_t *c, const char *name, size_t byte_size,
                                   sip_client_shm_t **out) {
  *out = NULL;
  if (!name || !*name || strlen(name) > 255)
    return sip_error_new(SIP_INVALID_ARGUMENT, "a shared memory region needs a name of 1 to 255 "
                         "bytes");
  if (!byte_size || byte_size > (size_t)INT64_MAX)
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s': byte size %zu; "
                         "expected 1..2^63-1", name, byte_size);
  pthread_mutex_lock(&c->rmu);
  sip_client_shm_t *dup = c->regions;
  while (dup && strcmp(dup->name, name)) dup = dup->next;
  pthread_mutex_unlock(&c->rmu);
  if (dup)
    return sip_error_new(SIP_ALREADY_EXISTS, "shared memory region '%s' already exists on this "
                         "connection", name);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void *base = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)byte_size) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    base = mmap(NULL, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    if (fd >= 0) close(fd);
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "shared memory region '%s' of %zu bytes: %s",
                         name, byte_size, strerror(err));
  }
  shm_mapping_t *m = sip__malloc(sizeof *m);
  sip_client_shm_t *r = sip__calloc(1, sizeof *r);
  if (m) *m = (shm_mapping_t){base, byte_size, fd};
  if (r) {
    r->data = base;
    r->size = byte_size;
    r->fd = fd;
    r->name = sip__strdup(name);
  }
  if (r && m) r->map = sip_buf_wrap(base, byte_size, shm_mapping_release, m);
  else if (m) shm_mapping_release(m);
  else {
    munmap(base, byte_size);
    close(fd);
  }
  if (!r || !r->name || !r->map) {
    if (r) {
      sip_buf_unref(r->map);
      sip__free(r->name);
      sip__free(r);
    }
    return SIP__OOM();
  }
  char *json = NULL;
  sip_error_t *e = sip__client_info_call(
      c, &(sip__client_info_msg_t){.shm_type = SIP__MSG_SHM_REGISTER, .name = name, .byte_size = byte_size,
                       .fd = fd},
      &json);
  sip__free(json);
  if (e) {
    sip_buf_unref(r->map);
    sip__free(r->name);
    sip__free(r);
    return e;
  }
  pthread_mutex_lock(&c->rmu);
  r->next = c->regions;
  c->regions = r;
  pthread_mutex_unlock(&c->rmu);
  *out = r;
  return NULL;
}

void *sip_client_shm_data(const sip_client_shm_t *r) { return r->data; }
size_t sip_client_shm_size(const sip_client_shm_t *r) { return r->size; }

sip_error_t *sip_client_shm_destroy(sip_client_t *c, sip_client_shm_t *r) {
  if (!r) return NULL;
  pthread_mutex_lock(&c->rmu);
  sip_client_shm_t **pp = &c->regions;
  while (*pp && *pp != r) pp = &(*pp)->next;
  if (*pp) *pp = r->next;
  pthread_mutex_unlock(&c->rmu);
  char *json = NULL;
  sip_error_t *e =
      sip__client_info_call(c, &(sip__client_info_msg_t){.shm_type = SIP__MSG_SHM_UNREGISTER, .name = r->name}, &json);
  sip__free(json);
  sip_buf_unref(r->map);
  sip__free(r->name);
  sip__free(r);
  return e;
}

sip_error_t *sip_client_shm_status(sip_client_t *c, const char *name, char **json) {
  *json = NULL;
  return sip__client_info_call(c, &(sip__client_info_msg_t){.shm_type = SIP__MSG_SHM_STATUS, .name = name ? name : ""},
                   json);
}

