/* sip bench over KServe v2 HTTP: a client as light as wrk, so that what
 * `sip bench` reports is the server's time, not its own.
 *
 * The whole request (request line, headers and body) is encoded once; each
 * connection is a plain TCP socket (TCP_NODELAY) kept alive across
 * requests, with one buffer and one epoll instance of its own made with it.
 * A round trip is one send() of the pre-encoded bytes, then reads until the
 * response is whole, waiting in epoll_wait as wrk does between them: the
 * status line, Content-Length (or chunked framing) and Connection from the
 * headers, and the body skipped without being looked at. Nothing is
 * allocated per request. */
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tools/cli.h"

#define CONN_BUF (64 * 1024) /* a connection's read buffer: the largest header block */

struct sip_cli_http {
  char host[256], port[16];
  char *req; /* the whole request, encoded once */
  size_t req_len;
};

struct sip_cli_http_conn {
  const sip_cli_http_t *h;
  int fd;          /* -1: not connected */
  int ep;          /* epoll instance waiting for fd's responses */
  int reused;      /* it has carried a whole round trip */
  char *buf;       /* CONN_BUF bytes */
  size_t off, len; /* unread bytes: buf[off, len) */
  char err[400];   /* why the last round trip failed */
};

const char *sip_cli_kserve_type(sip_dtype_t dt) {
  switch (dt) {
  case SIP_DTYPE_BOOL: return "BOOL";
  case SIP_DTYPE_UINT8: return "UINT8";
  case SIP_DTYPE_UINT16: return "UINT16";
  case SIP_DTYPE_UINT32: return "UINT32";
  case SIP_DTYPE_UINT64: return "UINT64";
  case SIP_DTYPE_INT8: return "INT8";
  case SIP_DTYPE_INT16: return "INT16";
  case SIP_DTYPE_INT32: return "INT32";
  case SIP_DTYPE_INT64: return "INT64";
  case SIP_DTYPE_FLOAT16: return "FP16";
  case SIP_DTYPE_FLOAT32: return "FP32";
  case SIP_DTYPE_FLOAT64: return "FP64";
  case SIP_DTYPE_STRING: return "BYTES";
  default: return "?";
  }
}

/* The request's parameters object (timeout, priority), or NULL. */
static void add_parameters(json_t *root, const sip_client_request_t *req) {
  if (!req->timeout_ms && !req->priority) return;
  json_t *params = json_object_get(root, "parameters");
  if (!params) json_object_set_new(root, "parameters", params = json_object());
  if (req->timeout_ms)
    json_object_set_new(params, "timeout", json_integer((json_int_t)req->timeout_ms * 1000));
  if (req->priority) json_object_set_new(params, "priority", json_integer(req->priority));
}

/* A body all in JSON (`data` arrays; numeric inputs only); owned, NULL on
 * failure with a message on stderr. */
static char *json_body(const sip_client_request_t *req) {
  json_t *ins = json_array();
  for (size_t i = 0; i < req->n_inputs; i++) {
    const sip_tensor_t *t = req->inputs[i];
    if (t->dtype == SIP_DTYPE_STRING || t->dtype == SIP_DTYPE_FLOAT16) {
      json_decref(ins);
      fprintf(stderr, "sip bench: --http-format json takes numeric inputs other than float16; "
                      "input '%s' is %s (use --http-format binary)\n",
              t->name, sip_cli_kserve_type(t->dtype));
      return NULL;
    }
    json_t *shape = json_array(), *data = json_array();
    for (int k = 0; k < t->rank; k++) json_array_append_new(shape, json_integer(t->dims[k]));
    int64_t n = sip_tensor_count(t);
    for (int64_t k = 0; k < n; k++) {
      double v = sip_cli_value(t->dtype, t->data, (size_t)k);
      json_array_append_new(data, t->dtype == SIP_DTYPE_BOOL ? json_boolean(v != 0)
                                  : t->dtype == SIP_DTYPE_FLOAT32 || t->dtype == SIP_DTYPE_FLOAT64
                                      ? json_real(v)
                                      : json_integer((json_int_t)v));
    }
    json_array_append_new(ins, json_pack("{s:s,s:o,s:s,s:o}", "name", t->name, "shape", shape,
                                         "datatype", sip_cli_kserve_type(t->dtype), "data", data));
  }
  json_t *root = json_pack("{s:o}", "inputs", ins);
  if (req->n_outputs) {
    json_t *outs = json_array();
    for (size_t i = 0; i < req->n_outputs; i++)
      json_array_append_new(outs, json_pack("{s:s}", "name", req->outputs[i]));
    json_object_set_new(root, "outputs", outs);
  }
  add_parameters(root, req);
  char *s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (!s) fprintf(stderr, "sip bench: out of memory encoding the JSON body\n");
  return s;
}

/* The JSON header of a binary-extension body (every input's bytes follow
 * it; outputs are asked for as binary); owned. */
static char *binary_header(const sip_client_request_t *req) {
  json_t *ins = json_array(), *root = json_object();
  for (size_t i = 0; i < req->n_inputs; i++) {
    const sip_tensor_t *t = req->inputs[i];
    json_t *shape = json_array();
    for (int k = 0; k < t->rank; k++) json_array_append_new(shape, json_integer(t->dims[k]));
    json_array_append_new(ins, json_pack("{s:s,s:o,s:s,s:{s:I}}", "name", t->name, "shape", shape,
                                         "datatype", sip_cli_kserve_type(t->dtype), "parameters",
                                         "binary_data_size", (json_int_t)t->nbytes));
  }
  json_object_set_new(root, "inputs", ins);
  if (req->n_outputs) {
    json_t *outs = json_array();
    for (size_t i = 0; i < req->n_outputs; i++)
      json_array_append_new(outs, json_pack("{s:s,s:{s:b}}", "name", req->outputs[i],
                                            "parameters", "binary_data", 1));
    json_object_set_new(root, "outputs", outs);
  } else {
    json_object_set_new(root, "parameters", json_pack("{s:b}", "binary_data_output", 1));
  }
  add_parameters(root, req);
  char *s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (!s) fprintf(stderr, "sip bench: out of memory encoding the binary body's header\n");
  return s;
}

int sip_cli_parse_hostport(const char *endpoint, const char *scheme, char *host, size_t host_size,
                           char *port, size_t port_size, const char **rest) {
  size_t sl = strlen(scheme);
  const char *a = endpoint + sl + 3, *end, *colon;
  if (strncmp(endpoint, scheme, sl) || strncmp(endpoint + sl, "://", 3)) goto bad;
  end = a + strcspn(a, "/");
  if (rest) *rest = end;
  else if (*end) goto bad;
  memset(host, 0, host_size);
  memset(port, 0, port_size);
  if (*a == '[') { /* [v6]:port */
    const char *rb = memchr(a, ']', (size_t)(end - a));
    if (!rb || (size_t)(rb - a - 1) >= host_size) goto bad;
    memcpy(host, a + 1, (size_t)(rb - a - 1));
    colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
  } else {
    colon = memchr(a, ':', (size_t)(end - a));
    const char *he = colon ? colon : end;
    if (he == a || (size_t)(he - a) >= host_size) goto bad;
    memcpy(host, a, (size_t)(he - a));
  }
  if (colon) {
    size_t pl = (size_t)(end - colon - 1);
    if (!pl || pl >= port_size || strspn(colon + 1, "0123456789") < pl) goto bad;
    memcpy(port, colon + 1, pl);
  } else if (!strcmp(scheme, "http")) {
    snprintf(port, port_size, "80");
  } else {
    goto bad;
  }
  return 0;
bad:
  fprintf(stderr, "sip bench: endpoint '%s'; expected %s://HOST:PORT%s\n", endpoint, scheme,
          rest ? "[/PREFIX]" : "");
  return -1;
}

int sip_cli_http_new(const char *endpoint, const sip_client_request_t *req, int json,
                     const char *body_file, sip_cli_http_t **out) {
  *out = NULL;
  sip_cli_http_t *h = calloc(1, sizeof *h);
  const char *prefix;
  if (!h || sip_cli_parse_hostport(endpoint, "http", h->host, sizeof h->host, h->port,
                                   sizeof h->port, &prefix)) {
    free(h);
    return -1;
  }
  char *head = NULL, *body = NULL; /* head: a binary body's JSON header */
  size_t body_len = 0, head_len = 0;
  if (body_file) { /* the body as given, sent as it is */
    FILE *f = fopen(body_file, "rb");
    long n = -1;
    if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) &&
        (body = malloc((size_t)n + 1)) && fread(body, 1, (size_t)n, f) == (size_t)n) {
      body_len = (size_t)n;
    } else {
      fprintf(stderr, "sip bench: --http-body %s: %s; expected a readable file\n", body_file,
              strerror(errno ? errno : EIO));
      free(body);
      body = NULL;
    }
    if (f) fclose(f);
  } else if (json) {
    body = json_body(req);
    body_len = body ? strlen(body) : 0;
  } else {
    head = binary_header(req);
    head_len = head ? strlen(head) : 0;
    for (size_t i = 0; i < req->n_inputs; i++) body_len += req->inputs[i]->nbytes;
    body_len += head_len;
  }
  const char *token = getenv("SIP_TOKEN"); /* a token of server.auth (docs/security.md) */
  int has_token = token && *token;
  size_t cap = 512 + strlen(prefix) + strlen(req->pool) + strlen(h->host) +
               (has_token ? strlen(token) : 0) + body_len;
  if ((body_file || json) ? !body : !head) goto fail; /* said why above */
  if (!(h->req = malloc(cap))) {
    fprintf(stderr, "sip bench: out of memory for a request of %zu bytes\n", cap);
    goto fail;
  }
  const char *ctype = body_file || json ? "application/json" : "application/octet-stream";
  int n = snprintf(h->req, cap,
                   "POST %s/v2/models/%s/infer HTTP/1.1\r\nHost: %s%s%s:%s\r\n"
                   "Content-Type: %s\r\nContent-Length: %zu\r\n",
                   prefix, req->pool, strchr(h->host, ':') ? "[" : "", h->host,
                   strchr(h->host, ':') ? "]" : "", h->port, ctype, body_len);
  if (head) n += snprintf(h->req + n, cap - (size_t)n, "Inference-Header-Content-Length: %zu\r\n",
                          head_len);
  if (has_token) n += snprintf(h->req + n, cap - (size_t)n, "Authorization: Bearer %s\r\n", token);
  n += snprintf(h->req + n, cap - (size_t)n, "\r\n");
  size_t off = (size_t)n;
  if (head) {
    memcpy(h->req + off, head, head_len);
    off += head_len;
    for (size_t i = 0; i < req->n_inputs; i++) {
      memcpy(h->req + off, req->inputs[i]->data, req->inputs[i]->nbytes);
      off += req->inputs[i]->nbytes;
    }
  } else {
    memcpy(h->req + off, body, body_len);
    off += body_len;
  }
  h->req_len = off;
  free(head);
  free(body);
  *out = h;
  return 0;
fail:
  free(head);
  free(body);
  free(h->req);
  free(h);
  return -1;
}

void sip_cli_http_free(sip_cli_http_t *h) {
  if (!h) return;
  free(h->req);
  free(h);
}

sip_cli_http_conn_t *sip_cli_http_conn_new(const sip_cli_http_t *h) {
  sip_cli_http_conn_t *c = calloc(1, sizeof *c);
  if (!c || !(c->buf = malloc(CONN_BUF))) {
    free(c);
    return NULL;
  }
  c->h = h;
  c->fd = -1;
  c->ep = epoll_create1(EPOLL_CLOEXEC);
  if (c->ep < 0) {
    free(c->buf);
    free(c);
    return NULL;
  }
  return c;
}

static void conn_close(sip_cli_http_conn_t *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->off = c->len = 0;
  c->reused = 0;
}

void sip_cli_http_conn_free(sip_cli_http_conn_t *c) {
  if (!c) return;
  conn_close(c);
  close(c->ep);
  free(c->buf);
  free(c);
}

const char *sip_cli_http_conn_error(const sip_cli_http_conn_t *c) { return c->err; }

int sip_cli_connect(const char *host, const char *port, int ep, char *err, size_t err_size) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai, *p;
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc) {
    snprintf(err, err_size, "cannot resolve %s: %s", host, gai_strerror(rc));
    return -1;
  }
  int fd = -1, last = 0;
  for (p = ai; p && fd < 0; p = p->ai_next) {
    fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
    if (fd < 0) {
      last = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (connect(fd, p->ai_addr, p->ai_addrlen) || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
      last = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) snprintf(err, err_size, "cannot connect to %s:%s: %s", host, port, strerror(last));
  return fd;
}

int sip_cli_send_all(int fd, const void *data, size_t n, char *err, size_t err_size) {
  const char *p = data;
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      snprintf(err, err_size, "sending the request: %s", strerror(errno));
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int conn_open(sip_cli_http_conn_t *c) {
  c->fd = sip_cli_connect(c->h->host, c->h->port, c->ep, c->err, sizeof c->err);
  return c->fd < 0 ? -1 : 0;
}

/* Reads more into the buffer (compacting it first), waiting in epoll when
 * nothing has arrived yet; 0 at end of stream, -1 on error or a full
 * buffer. */
static ssize_t conn_fill(sip_cli_http_conn_t *c) {
  if (c->off) {
    memmove(c->buf, c->buf + c->off, c->len - c->off);
    c->len -= c->off;
    c->off = 0;
  }
  if (c->len == CONN_BUF) {
    snprintf(c->err, sizeof c->err, "a response line or header block over %d bytes", CONN_BUF);
    return -1;
  }
  for (;;) {
    ssize_t k = recv(c->fd, c->buf + c->len, CONN_BUF - c->len, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { /* wait as wrk does */
      struct epoll_event ev;
      if (epoll_wait(c->ep, &ev, 1, -1) >= 0 || errno == EINTR) continue;
    }
    if (k < 0) snprintf(c->err, sizeof c->err, "reading the response: %s", strerror(errno));
    if (k == 0) snprintf(c->err, sizeof c->err, "the server closed the connection mid-response");
    if (k > 0) c->len += (size_t)k;
    return k;
  }
}

/* Skips n body bytes: what is buffered, then straight from the socket. */
static int skip(sip_cli_http_conn_t *c, uint64_t n) {
  for (;;) {
    size_t have = c->len - c->off, k = have < n ? have : (size_t)n;
    c->off += k;
    n -= k;
    if (!n) return 0;
    if (conn_fill(c) <= 0) return -1;
  }
}

/* The next line (CRLF excluded) in the buffer, reading as needed; the
 * pointer is valid until the next read. */
static char *line(sip_cli_http_conn_t *c, size_t *len) {
  size_t scanned = 0;
  for (;;) {
    char *s = c->buf + c->off, *e = memchr(s + scanned, '\n', c->len - c->off - scanned);
    if (e) {
      *len = (size_t)(e - s) - (e > s && e[-1] == '\r');
      c->off = (size_t)(e + 1 - c->buf);
      return s;
    }
    scanned = c->len - c->off;
    if (conn_fill(c) <= 0) return NULL;
  }
}

/* A chunked body: each chunk's size line, its bytes and CRLF, then the
 * trailers up to an empty line. */
static int skip_chunked(sip_cli_http_conn_t *c) {
  for (;;) {
    size_t n;
    char *l = line(c, &n);
    if (!l) return -1;
    char *end;
    unsigned long long size = strtoull(l, &end, 16);
    if (end == l) {
      snprintf(c->err, sizeof c->err, "a chunk size line '%.40s'; expected hex digits", l);
      return -1;
    }
    if (!size) break;
    if (skip(c, size + 2)) return -1;
  }
  for (;;) {
    size_t n;
    if (!line(c, &n)) return -1;
    if (!n) return 0;
  }
}

static int send_all(sip_cli_http_conn_t *c) {
  return sip_cli_send_all(c->fd, c->h->req, c->h->req_len, c->err, sizeof c->err);
}

/* One response: its HTTP status, or -1 (c->err says why). *got_any: some
 * of it arrived. */
static int read_response(sip_cli_http_conn_t *c, int *got_any) {
  size_t n;
  char *l = line(c, &n);
  *got_any = c->len > 0;
  if (!l) return -1;
  if (n < 12 || strncmp(l, "HTTP/1.", 7) || l[8] != ' ') {
    snprintf(c->err, sizeof c->err, "a status line '%.*s'; expected HTTP/1.x NNN",
             (int)(n < 60 ? n : 60), l);
    return -1;
  }
  int status = atoi(l + 9), close_after = l[7] == '0', chunked = 0;
  long long length = -1;
  for (;;) {
    if (!(l = line(c, &n))) return -1;
    if (!n) break;
    if (n > 15 && !strncasecmp(l, "content-length:", 15)) {
      length = strtoll(l + 15, NULL, 10);
    } else if (n > 18 && !strncasecmp(l, "transfer-encoding:", 18)) {
      chunked = memchr(l, 'k', n) != NULL; /* "chunked" is the only coding servers send here */
    } else if (n > 11 && !strncasecmp(l, "connection:", 11)) {
      const char *v = l + 11 + strspn(l + 11, " \t");
      if ((size_t)(v - l) + 5 <= n && !strncasecmp(v, "close", 5)) close_after = 1;
      if ((size_t)(v - l) + 10 <= n && !strncasecmp(v, "keep-alive", 10)) close_after = 0;
    }
  }
  if (status == 204 || status == 304 || (status >= 100 && status < 200)) length = 0;
  if (chunked ? skip_chunked(c) : length >= 0 ? skip(c, (uint64_t)length) : -1) {
    if (!chunked && length < 0) { /* no framing: the body runs to the end of the stream */
      while (conn_fill(c) > 0) c->off = c->len;
      close_after = 1;
    } else {
      return -1;
    }
  }
  if (close_after) conn_close(c);
  return status;
}

int sip_cli_http_roundtrip(sip_cli_http_conn_t *c) {
  for (int attempt = 0;; attempt++) {
    if (c->fd < 0 && conn_open(c)) return -1;
    int reused = c->reused, got_any = 0, status = -1;
    if (!send_all(c)) status = read_response(c, &got_any);
    if (status >= 0) {
      if (c->fd >= 0) c->reused = 1;
      return status;
    }
    conn_close(c);
    /* A kept-alive connection the server closed while idle: once more on a
     * new one, as browsers and libcurl do. */
    if (!reused || got_any || attempt) return -1;
  }
}
