/* sip — the native protocol's endpoints: one kind per scheme (ipc://,
 * unix://, tcp://), chosen from a table, each with its parsing, its bind
 * and listen, and its connect (the unix kind's stale-socket probe; tests).
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/core.h"
#include "transport/listener_impl.h"

#define EXPECTED "expected ipc:///path, unix:///path or tcp://host:port"

/* ---- unix sockets (ipc:// and unix://) ------------------------------------ */

static sip_error_t *unix_parse(const char *rest, endpoint_t *out) {
  if (strlen(rest) >= sizeof out->path)
    return sip_error_new(SIP_INVALID_ARGUMENT, "unix socket path %s is longer than %zu bytes",
                         rest, sizeof out->path - 1);
  if (!rest[0])
    return sip_error_new(SIP_INVALID_ARGUMENT, "unix socket endpoint has an empty path; " EXPECTED);
  strcpy(out->path, rest);
  return NULL;
}

static struct sockaddr_un unix_addr(const endpoint_t *ep) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, ep->path, sizeof ep->path);
  return sa;
}

static int unix_connect(const endpoint_t *ep) {
  struct sockaddr_un sa = unix_addr(ep);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    fd = -1;
  }
  return fd;
}

static sip_error_t *unix_listen(const endpoint_t *ep, listener_t *l) {
  const char *path = ep->path;
  struct sockaddr_un sa = unix_addr(ep);
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return sip_error_new(SIP_UNAVAILABLE, "cannot listen on %s: a file that is not a socket "
                                            "is in the way",
                           path);
    /* A socket file: in use by a live server, or left by a dead one. */
    int probe = unix_connect(ep);
    if (probe >= 0) {
      close(probe);
      return sip_error_new(SIP_UNAVAILABLE, "cannot listen on %s: another server is listening "
                                            "there",
                           path);
    }
    unlink(path);
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return sip_error_new(SIP_UNAVAILABLE, "socket(): %s", strerror(errno));
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 512) != 0) {
    int err = errno;
    close(fd);
    return sip_error_new(SIP_UNAVAILABLE, "cannot listen on unix socket %s: %s", path,
                         strerror(err));
  }
  l->fd = fd;
  l->unlink_path = sip__strdup(path);
  l->address = sip__asprintf("unix://%s", path);
  return NULL;
}

/* ---- tcp://host:port, tcp://[ipv6]:port ------------------------------------ */

#define TCP_EXPECTED "expected tcp://host:port (IPv6 hosts in brackets: tcp://[::1]:port)"

static sip_error_t *tcp_parse(const char *rest, endpoint_t *out) {
  const char *h0 = rest, *h1, *colon;
  if (*rest == '[') {
    const char *rb = strchr(rest, ']');
    if (!rb || rb == rest + 1)
      return sip_error_new(SIP_INVALID_ARGUMENT, "tcp endpoint '%s' has a malformed IPv6 host; "
                           TCP_EXPECTED, rest);
    if (rb[1] != ':')
      return sip_error_new(SIP_INVALID_ARGUMENT, "tcp endpoint '%s' has no port after the IPv6 "
                           "host; " TCP_EXPECTED, rest);
    h0 = rest + 1;
    h1 = rb;
    colon = rb + 1;
  } else {
    colon = strrchr(rest, ':');
    if (!colon)
      return sip_error_new(SIP_INVALID_ARGUMENT, "tcp endpoint '%s'; expected tcp://host:port",
                           rest);
    h1 = colon;
    if (memchr(h0, ':', (size_t)(h1 - h0)))
      return sip_error_new(SIP_INVALID_ARGUMENT, "tcp endpoint '%s' has an IPv6 host without "
                           "brackets; " TCP_EXPECTED, rest);
  }
  if ((size_t)(h1 - h0) >= sizeof out->host)
    return sip_error_new(SIP_INVALID_ARGUMENT, "tcp endpoint '%s'; expected tcp://host:port",
                         rest);
  const char *port = colon + 1;
  size_t pl = strlen(port);
  if (!pl)
    return sip_error_new(SIP_INVALID_ARGUMENT, "tcp endpoint '%s' has no port; " TCP_EXPECTED,
                         rest);
  long pv = 0;
  for (size_t i = 0; i < pl && pv <= 65535; i++)
    pv = port[i] >= '0' && port[i] <= '9' ? pv * 10 + (port[i] - '0') : 65536;
  if (pl >= sizeof out->port || pv > 65535)
    return sip_error_new(SIP_INVALID_ARGUMENT, "tcp endpoint '%s' has a port out of range; "
                         "expected 0..65535 (0 = ephemeral)", rest);
  memcpy(out->host, h0, (size_t)(h1 - h0));
  out->host[h1 - h0] = '\0';
  memcpy(out->port, port, pl + 1);
  return NULL;
}

/* HOST:PORT as clients write it (an IPv6 host in brackets), for addresses
 * and messages. */
static void tcp_show(const char *host, const char *port, char *buf, size_t n) {
  int v6 = strchr(host, ':') != NULL;
  snprintf(buf, n, "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* The endpoint's addresses (a passive lookup: "" is every address). */
static sip_error_t *tcp_resolve(const endpoint_t *ep, int flags, struct addrinfo **res) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = flags | AI_NUMERICSERV};
  int rc = getaddrinfo(ep->host[0] ? ep->host : NULL, ep->port, &hints, res);
  if (rc == 0) return NULL;
  char shown[300];
  tcp_show(ep->host, ep->port, shown, sizeof shown);
  return sip_error_new(SIP_UNAVAILABLE, "cannot resolve tcp endpoint %s: %s", shown,
                       gai_strerror(rc));
}

static sip_error_t *tcp_listen(const endpoint_t *ep, listener_t *l) {
  struct addrinfo *res = NULL;
  sip_error_t *e = tcp_resolve(ep, AI_PASSIVE, &res);
  if (e) return e;
  int fd = -1, err = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 512) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  char shown[300];
  if (fd < 0) {
    tcp_show(ep->host, ep->port, shown, sizeof shown);
    return sip_error_new(SIP_UNAVAILABLE, "cannot listen on tcp://%s: %s", shown, strerror(err));
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
  l->fd = fd;
  l->is_tcp = 1;
  char port_s[8];
  snprintf(port_s, sizeof port_s, "%d", port);
  tcp_show(ep->host, port_s, shown, sizeof shown);
  l->address = sip__asprintf("tcp://%s", shown);
  return NULL;
}

static int tcp_connect(const endpoint_t *ep) {
  struct addrinfo *res = NULL;
  sip_error_t *e = tcp_resolve(ep, 0, &res);
  if (e) {
    sip_error_free(e);
    errno = EADDRNOTAVAIL;
    return -1;
  }
  int fd = -1, err = ECONNREFUSED;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) errno = err;
  return fd;
}

/* ---- the scheme table ------------------------------------------------------ */

static const endpoint_kind_t kinds[] = {
    {"ipc://", 0, unix_parse, unix_listen, unix_connect},
    {"unix://", 0, unix_parse, unix_listen, unix_connect},
    {"tcp://", 1, tcp_parse, tcp_listen, tcp_connect},
};

sip_error_t *sip__endpoint_parse(const char *endpoint, endpoint_t *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    size_t n = strlen(kinds[i].scheme);
    if (strncmp(endpoint, kinds[i].scheme, n)) continue;
    out->kind = &kinds[i];
    return kinds[i].parse(endpoint + n, out);
  }
  return sip_error_new(SIP_INVALID_ARGUMENT, "endpoint '%s'; " EXPECTED, endpoint);
}

sip_error_t *sip__endpoint_listen(const char *endpoint, listener_t *l) {
  l->fd = -1;
  endpoint_t ep;
  sip_error_t *e = sip__endpoint_parse(endpoint, &ep);
  return e ? e : ep.kind->listen(&ep, l);
}
