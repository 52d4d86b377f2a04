/* sip — the native protocol's endpoints: one kind per scheme (ipc://,
 * unix://, tcp://), chosen from a table, each with its parsing, its bind
 * and listen, and its connect (the unix kind's stale-socket probe; tests).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
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

static sip_error_t *unix_parse(const char *rest, sip__endpoint_t *out) {
  if (strlen(rest) >= sizeof out->path)
    return sip_error_new(SIP_INVALID_ARGUMENT, "unix socket path %s is longer than %zu bytes",
                         rest, sizeof out->path - 1);
  if (!rest[0])
    return sip_error_new(SIP_INVALID_ARGUMENT, "unix socket endpoint has an empty path; " EXPECTED);
  strcpy(out->path, rest);
  return NULL;
}

static struct sockaddr_un unix_addr(const sip__endpoint_t *ep) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, ep->path, sizeof ep->path);
  return sa;
}

static int unix_connect(const sip__endpoint_t *ep) {
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

/* Binds `fd` to `path` with the endpoint's mode and owner already in place
 * when the path appears: the socket is bound inside a private directory
 * (mode 0700, next to `path`), given its mode and owner there, then renamed
 * to `path`. No one else can connect while its mode is still the umask's.
 * When the private name would not fit in sun_path, or the directory cannot
 * be made, the umask is narrowed around bind instead (process-wide, but
 * only for the bind). */
static int bind_private(int fd, const sip__endpoint_t *ep, const char *path) {
  char dir[sizeof ep->path + 16], tmp[sizeof ep->path + 32];
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) : 0;
  int fits = dl + sizeof "/.sipd-XXXXXX/s" <= sizeof ep->path;
  if (fits) {
    snprintf(dir, sizeof dir, "%.*s/.sipd-XXXXXX", (int)dl, slash ? path : ".");
    fits = mkdtemp(dir) != NULL; /* a directory sipd cannot write to: the umask way */
  }
  if (fits) {
    snprintf(tmp, sizeof tmp, "%s/s", dir);
  } else {
    snprintf(tmp, sizeof tmp, "%s", path);
  }
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(tmp) >= sizeof sa.sun_path) return errno = ENAMETOOLONG, -1;
  memcpy(sa.sun_path, tmp, strlen(tmp) + 1);
  mode_t old = fits ? 0 : umask(0777 & ~(mode_t)(ep->mode & 0600));
  int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
  if (!fits) umask(old);
  if (rc == 0 && (ep->uid != (uid_t)-1 || ep->gid != (gid_t)-1)) rc = chown(tmp, ep->uid, ep->gid);
  if (rc == 0) rc = chmod(tmp, (mode_t)ep->mode);
  if (rc == 0 && fits) rc = rename(tmp, path);
  int err = errno;
  if (fits) {
    if (rc) unlink(tmp);
    rmdir(dir);
  } else if (rc) {
    unlink(tmp);
  }
  errno = err;
  return rc;
}

static sip_error_t *unix_listen(const sip__endpoint_t *ep, sip__listener_t *l) {
  const char *path = ep->path;
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
  if (bind_private(fd, ep, path) != 0 || listen(fd, 512) != 0) {
    int err = errno;
    close(fd);
    return sip_error_new(SIP_UNAVAILABLE, "cannot listen on unix socket %s (mode %04o): %s",
                         path, ep->mode, strerror(err));
  }
  l->fd = fd;
  l->unlink_path = sip__strdup(path);
  l->address = sip__asprintf("unix://%s", path);
  return NULL;
}

/* ---- tcp://host:port, tcp://[ipv6]:port ------------------------------------ */

#define TCP_EXPECTED "expected tcp://host:port (IPv6 hosts in brackets: tcp://[::1]:port)"

static sip_error_t *tcp_parse(const char *rest, sip__endpoint_t *out) {
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
static sip_error_t *tcp_resolve(const sip__endpoint_t *ep, int flags, struct addrinfo **res) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = flags | AI_NUMERICSERV};
  int rc = getaddrinfo(ep->host[0] ? ep->host : NULL, ep->port, &hints, res);
  if (rc == 0) return NULL;
  char shown[300];
  tcp_show(ep->host, ep->port, shown, sizeof shown);
  return sip_error_new(SIP_UNAVAILABLE, "cannot resolve tcp endpoint %s: %s", shown,
                       gai_strerror(rc));
}

static sip_error_t *tcp_listen(const sip__endpoint_t *ep, sip__listener_t *l) {
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

static int tcp_connect(const sip__endpoint_t *ep) {
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

static const sip__endpoint_kind_t kinds[] = {
    {"ipc://", 0, unix_parse, unix_listen, unix_connect},
    {"unix://", 0, unix_parse, unix_listen, unix_connect},
    {"tcp://", 1, tcp_parse, tcp_listen, tcp_connect},
};

sip_error_t *sip__endpoint_parse(const char *endpoint, sip__endpoint_t *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    size_t n = strlen(kinds[i].scheme);
    if (strncmp(endpoint, kinds[i].scheme, n)) continue;
    out->kind = &kinds[i];
    return kinds[i].parse(endpoint + n, out);
  }
  return sip_error_new(SIP_INVALID_ARGUMENT, "endpoint '%s'; " EXPECTED, endpoint);
}

sip_error_t *sip__endpoint_listen(const char *endpoint, const sip__sock_perm_t *perm,
                                  sip__listener_t *l) {
  l->fd = -1;
  sip__endpoint_t ep;
  sip_error_t *e = sip__endpoint_parse(endpoint, &ep);
  if (e) return e;
  ep.mode = perm && perm->mode ? perm->mode : 0600;
  ep.uid = perm ? perm->uid : (uid_t)-1;
  ep.gid = perm ? perm->gid : (gid_t)-1;
  return ep.kind->listen(&ep, l);
}

sip_error_t *sip__sock_perm_resolve(const char *owner, const char *group, unsigned mode,
                                    sip__sock_perm_t *out) {
  out->mode = mode ? mode : 0600;
  out->uid = (uid_t)-1;
  out->gid = (gid_t)-1;
  char buf[4096];
  if (owner) {
    struct passwd pw, *r = NULL;
    char *end;
    unsigned long id = strtoul(owner, &end, 10);
    if (*owner && !*end) out->uid = (uid_t)id;
    else if (getpwnam_r(owner, &pw, buf, sizeof buf, &r) == 0 && r) out->uid = pw.pw_uid;
    else return sip_error_new(SIP_INVALID_ARGUMENT, "server.socket_owner '%s': no such user; "
                              "expected a user name or numeric uid", owner);
  }
  if (group) {
    struct group gr, *r = NULL;
    char *end;
    unsigned long id = strtoul(group, &end, 10);
    if (*group && !*end) out->gid = (gid_t)id;
    else if (getgrnam_r(group, &gr, buf, sizeof buf, &r) == 0 && r) out->gid = gr.gr_gid;
    else return sip_error_new(SIP_INVALID_ARGUMENT, "server.socket_group '%s': no such group; "
                              "expected a group name or numeric gid", group);
  }
  return NULL;
}
