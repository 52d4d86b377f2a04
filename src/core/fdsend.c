/* sip — sending a descriptor with bytes (fdsend.h). */
#include "core/fdsend.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

ssize_t sip__send_with_fd(int sock, const void *p, size_t n, int fd) {
  struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  }
  ssize_t r;
  while ((r = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  return r;
}
