/* sd_notify(3) without libsystemd: datagrams to $NOTIFY_SOCKET. */
#include "notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct sipd_notify {
  int fd; /* -1: disabled */
  struct sockaddr_un addr;
  socklen_t addr_len;
  uint64_t watchdog_usec;
  int failed_once;
};

uint64_t sipd_notify_now_usec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A decimal unsigned integer filling all of `s`; -1 otherwise. */
static int parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) return -1;
  uint64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return -1;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *out = v;
  return 0;
}

static void read_watchdog(sipd_notify_t *n) {
  const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
  if (!usec) return;
  uint64_t v = 0, p = 0;
  if (parse_u64(usec, &v) != 0 || v == 0) {
    fprintf(stderr,
            "sipd: WATCHDOG_USEC='%s' ignored: expected a positive number of microseconds\n",
            usec);
    return;
  }
  if (pid) {
    if (parse_u64(pid, &p) != 0) {
      fprintf(stderr, "sipd: WATCHDOG_PID='%s' ignored with the watchdog: expected a process id\n",
              pid);
      return;
    }
    if (p != (uint64_t)getpid()) return; /* meant for another process */
  }
  n->watchdog_usec = v;
}

/* What sipd_notify_open returns when out of memory: sends nothing. */
static sipd_notify_t disabled = {.fd = -1};

sipd_notify_t *sipd_notify_open(void) {
  sipd_notify_t *n = calloc(1, sizeof *n);
  if (!n) return &disabled;
  n->fd = -1;
  const char *path = getenv("NOTIFY_SOCKET");
  if (path && *path) {
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof n->addr.sun_path) {
      fprintf(stderr,
              "sipd: NOTIFY_SOCKET='%s' ignored: expected an absolute socket path or '@' and an "
              "abstract socket name, shorter than %zu bytes\n",
              path, sizeof n->addr.sun_path);
    } else {
      n->addr.sun_family = AF_UNIX;
      memcpy(n->addr.sun_path, path, len);
      if (path[0] == '@') n->addr.sun_path[0] = '\0'; /* abstract: no NUL terminator counted */
      n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
      n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (n->fd < 0)
        fprintf(stderr, "sipd: NOTIFY_SOCKET ignored: cannot create a datagram socket: %s\n",
                strerror(errno));
    }
    if (n->fd >= 0) read_watchdog(n);
  }
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  return n;
}

void sipd_notify_free(sipd_notify_t *n) {
  if (!n || n == &disabled) return;
  if (n->fd >= 0) close(n->fd);
  free(n);
}

int sipd_notify_enabled(const sipd_notify_t *n) { return n && n->fd >= 0; }

uint64_t sipd_notify_watchdog_usec(const sipd_notify_t *n) { return n ? n->watchdog_usec : 0; }

int sipd_notify_send(sipd_notify_t *n, const char *text) {
  if (!n || n->fd < 0) return 0;
  ssize_t len = (ssize_t)strlen(text);
  ssize_t r;
  do
    r = sendto(n->fd, text, (size_t)len, MSG_NOSIGNAL, (struct sockaddr *)&n->addr, n->addr_len);
  while (r < 0 && errno == EINTR);
  if (r == len) return 0;
  if (!n->failed_once) {
    n->failed_once = 1;
    fprintf(stderr, "sipd: cannot notify the service manager on NOTIFY_SOCKET: %s\n",
            r < 0 ? strerror(errno) : "short send");
  }
  return -1;
}

int sipd_notify_sendf(sipd_notify_t *n, const char *fmt, ...) {
  if (!n || n->fd < 0) return 0;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (k < 0) return -1;
  return sipd_notify_send(n, buf); /* a longer STATUS is cut, never split */
}

int sipd_notify_reloading(sipd_notify_t *n, const char *status) {
  return sipd_notify_sendf(n, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=%s",
                           (unsigned long long)sipd_notify_now_usec(), status);
}
