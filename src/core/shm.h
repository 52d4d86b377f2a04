/* sip — shared-memory regions: named registrations of part of a shared
 * memory object, mapped once and lent to requests as refcounted buffers.
 *
 * One set serves KServe/Triton's system shared memory extension (the server
 * holds it; HTTP and gRPC share it: a region registered over one is used
 * over the other), and one set per native connection holds the memfd
 * regions that connection passed (SCM_RIGHTS).
 *
 * A region maps [offset, offset + byte_size) of its object read-write. A
 * view of a region is a sip_buf_t reference, so unregistering a region a
 * request still reads or writes is safe: the mapping goes with the last
 * reference. Thread-safe.
 */
#ifndef SIP_CORE_SHM_H
#define SIP_CORE_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "sip/error.h"
#include "sip/tensor.h"

/* Longest region name and key accepted (bytes). */
#define SIP__SHM_MAX_NAME 255

typedef struct sip__shm_set sip__shm_set_t;

/* One region as status reports it. */
typedef struct sip__shm_info {
  char *name;
  char *key; /* the POSIX shm key ("/name"), or "memfd" */
  uint64_t offset, byte_size;
} sip__shm_info_t;

/* A set of at most `max_regions` regions (0: 4096). NULL when out of memory. */
sip__shm_set_t *sip__shm_set_new(size_t max_regions);
/* Unregisters everything (mappings in use stay until their last view goes). */
void sip__shm_set_free(sip__shm_set_t *set);

/* Checks a POSIX shm key: "/name" or "name", one path component of at most
 * SIP__SHM_MAX_NAME bytes, not "." or "..", no NUL. INVALID_ARGUMENT saying
 * why; NULL when good. */
sip_error_t *sip__shm_check_key(const char *key);

/* Registers `name` as [offset, offset + byte_size) of the POSIX shared
 * memory object `key` (shm_open, read-write; only /dev/shm objects can be
 * named). Errors: INVALID_ARGUMENT (bad name or key, zero size, offset +
 * size overflowing, the object smaller than offset + byte_size: the message
 * gives its real size), NOT_FOUND (no such object), PERMISSION_DENIED,
 * ALREADY_EXISTS (the name is registered), RESOURCE_EXHAUSTED (the set is
 * full). */
sip_error_t *sip__shm_register(sip__shm_set_t *set, const char *name, const char *key,
                               uint64_t offset, uint64_t byte_size);
/* The same for an open file descriptor (a memfd a client passed); takes
 * ownership of `fd` (closed on error too). `key` is what status reports. */
sip_error_t *sip__shm_register_fd(sip__shm_set_t *set, const char *name, int fd,
                                  const char *key, uint64_t offset, uint64_t byte_size);
/* Unregisters `name` (NULL or "": every region). Unknown names are fine
 * (Triton answers success too). */
void sip__shm_unregister(sip__shm_set_t *set, const char *name);
/* The regions (`name` NULL or "": all, sorted by name; else that one, or
 * NOT_FOUND), owned by the caller: sip__shm_info_free. */
sip_error_t *sip__shm_status(sip__shm_set_t *set, const char *name, sip__shm_info_t **out,
                             size_t *n);
void sip__shm_info_free(sip__shm_info_t *v, size_t n);

/* Bytes [offset, offset + size) of region `name` (offsets relative to the
 * registration): *owner gets a reference that keeps the mapping alive,
 * *data the first byte. `what` names the use in errors ("input 'x'",
 * "output 'y'"). Errors: NOT_FOUND (no such region), INVALID_ARGUMENT (out
 * of the region, or the object has shrunk under the registration). */
sip_error_t *sip__shm_view(sip__shm_set_t *set, const char *name, uint64_t offset, uint64_t size,
                           const char *what, sip_buf_t **owner, uint8_t **data);

#endif
