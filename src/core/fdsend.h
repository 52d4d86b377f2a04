/* sip — sending bytes over a unix socket with a descriptor attached
 * (SCM_RIGHTS): shared memory regions to the server, tensors' regions to a
 * worker process. */
#ifndef SIP_CORE_FDSEND_H
#define SIP_CORE_FDSEND_H

#include <stddef.h>
#include <sys/types.h>

/* One sendmsg(2) of n bytes at p (MSG_NOSIGNAL), with descriptor fd
 * attached when fd >= 0; retried on EINTR. Returns what sendmsg returns
 * (bytes sent, or -1 with errno). */
ssize_t sip__send_with_fd(int sock, const void *p, size_t n, int fd);

#endif
