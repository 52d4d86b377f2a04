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
 *
 * A POSIX shm object stays its client's, who may shrink it (ftruncate)
 * while a request reads or writes the region: such an access raises
 * SIGBUS. The mappings of POSIX shm regions are guarded: a process-wide
 * SIGBUS handler (installed once, with the first such registration;
 * faults elsewhere go on to the handler that was there before) replaces a
 * mapping that faulted with anonymous memory and marks it damaged, so the
 * access completes against zeros instead of ending the process. What the
 * request read or wrote there is lost: a front-end checks every region a
 * request used before answering (sip__shm_scope_check for its views,
 * sip__shm_check_bytes for output bytes that point into a region) and
 * answers INVALID_ARGUMENT instead; the region's next view maps the object
 * afresh (or is refused while the object is too small). A system call
 * reading a shrunk mapping fails with EFAULT instead of faulting: bytes of
 * a region are copied before they are handed to one (sip__shm_guarded).
 * Memfds passed by native clients are sealed against shrinking
 * (sip__shm_register_fd) and are not guarded.
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
/* Unregisters everything (mappings in use stay until their last view goes);
 * for a scope (sip__shm_scope_new), drops its references. NULL is a no-op. */
void sip__shm_set_free(sip__shm_set_t *set);

/* Checks a POSIX shm key: "/name" or "name", one path component of at most
 * SIP__SHM_MAX_NAME bytes, not "." or "..", no NUL. INVALID_ARGUMENT saying
 * why; NULL when good. */
sip_error_t *sip__shm_check_key(const char *key);

/* Registers `name` as [offset, offset + byte_size) of the POSIX shared
 * memory object `key` (shm_open, read-write; only /dev/shm objects can be
 * named), its mapping guarded. A name is 1 to SIP__SHM_MAX_NAME bytes, not
 * "." or "..", without '/' or control characters (every front-end can name
 * it again, in a URL path too). Errors: INVALID_ARGUMENT (bad name or key,
 * zero size, offset + size overflowing, the object smaller than offset +
 * byte_size: the message gives its real size), NOT_FOUND (no such object),
 * PERMISSION_DENIED, ALREADY_EXISTS (the name is registered),
 * RESOURCE_EXHAUSTED (the set is full, or 8192 guarded mappings are in use
 * in the process). */
sip_error_t *sip__shm_register(sip__shm_set_t *set, const char *name, const char *key,
                               uint64_t offset, uint64_t byte_size);
/* The same for an open file descriptor (a memfd a client passed, sealed
 * against shrinking: not guarded); takes ownership of `fd` (closed on error
 * too). `key` is what status reports. */
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
 * "output 'y'"). A region whose mapping a fault damaged is mapped afresh
 * first. Errors: NOT_FOUND (no such region), INVALID_ARGUMENT (out of the
 * region, or the object has shrunk under the registration: the message
 * gives its size now and the size needed). */
sip_error_t *sip__shm_view(sip__shm_set_t *set, const char *name, uint64_t offset, uint64_t size,
                           const char *what, sip_buf_t **owner, uint8_t **data);

/* A request's scope of `parent`: a set that lends parent's regions (views;
 * register, unregister and status act on parent) and remembers each guarded
 * mapping it lent, so that the request's answer can be checked with
 * sip__shm_scope_check. A front-end decodes each request with a scope of
 * the server's set and frees it (sip__shm_set_free, which drops its
 * references) once the request is answered. NULL when out of memory (or
 * `parent` is NULL). */
sip__shm_set_t *sip__shm_scope_new(sip__shm_set_t *parent);
/* NULL while every guarded mapping viewed through `scope` holds its
 * registration and no access to it faulted; otherwise INVALID_ARGUMENT
 * naming the first region that shrank ("shared memory region 'r' (key '/k')
 * shrank to 0 bytes while the request used it; its registration needs 64
 * bytes ..."). NULL for a set that is not a scope. Thread-safe. */
sip_error_t *sip__shm_scope_check(sip__shm_set_t *scope);
/* The same check for the guarded mapping [p, p + n) lies in (bytes of a
 * region an output tensor points into, or was written into); NULL for any
 * other memory. The caller keeps the memory alive. Call it after the last
 * access whose result is answered. */
sip_error_t *sip__shm_check_bytes(const void *p, size_t n);
/* 1 when [p, p + n) overlaps a guarded mapping: bytes its client may
 * shrink, to be copied (then checked) before a system call reads them. */
int sip__shm_guarded(const void *p, size_t n);

#endif
