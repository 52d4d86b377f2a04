/* sip — KServe v2 HTTP/REST front-end on libmicrohttpd: the daemon's
 * lifecycle, the front-end vtable, MHD's callbacks (one request's phases,
 * handed to the route table's handlers, routes.c) and the send helpers.
 *
 * MHD runs its own event-loop threads (server.http_threads, epoll), one
 * daemon each; sip accepts the connections on its own thread and deals them
 * out round-robin (MHD_add_connection), since a thread pool sharing the
 * listening socket lets one thread accept a whole burst of connections and
 * leaves the others idle, and MHD's own accept busy-waits when it runs out
 * of file descriptors before its first connection. An infer
 * request is decoded on that thread, then the connection is *suspended* and
 * the request submitted with sip_server_infer_async; the completion callback
 * (an engine thread) stores the response and resumes the connection, and MHD
 * calls the handler again on its thread to encode and queue the answer. So
 * no HTTP thread waits for inference, and the executor does no encoding.
 *
 * Only the public engine API and its introspection JSON are used here (plus
 * the server's `draining` flag), so the scheduler can change underneath.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/core.h"
#include "core/redact.h"
#include "http/http.h"
#include "http/http_impl.h"

/* Per-connection memory MHD may use: request line, headers and its read
 * buffer. Headers that do not fit are answered 431. */
#define CONN_MEMORY_LIMIT ((size_t)64 << 10)
#define IDLE_TIMEOUT_S 300
/* How long stop waits for answers still being written (sip__now_us is the
 * monotonic clock the condition variable uses). */
#define STOP_GRACE_US 1000000

/* ---- answers ---------------------------------------------------------------- */

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == '"')) msg[--n] = '\0';
  for (char *p = msg; *p; p++)
    if (*p == '"') *p = '\'';
  sip__log(SIP__LOG_DEBUG, "http", "mhd=\"%s\"", msg);
}

enum MHD_Result sip__http_queue(struct MHD_Connection *c, unsigned status,
                                struct MHD_Response *r, const char *ctype) {
  if (!r) return MHD_NO; /* out of memory: MHD closes the connection */
  if (ctype) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

enum MHD_Result sip__http_send_owned(struct MHD_Connection *c, unsigned status, const char *ctype,
                                     char *body, size_t len) {
  if (!body) return MHD_NO;
  struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, sip__free);
  if (!r) sip__free(body);
  return sip__http_queue(c, status, r, ctype);
}

enum MHD_Result sip__http_send_error_msg(struct MHD_Connection *c, unsigned status,
                                         const char *msg) {
  size_t len = 0, rn = 0;
  char *red = sip__redacted(msg, strlen(msg), &rn); /* no server directories (core/redact.h) */
  char *body = sip__ks_error_json(red ? red : msg, &len);
  sip__free(red);
  return sip__http_send_owned(c, status, "application/json", body, len);
}

enum MHD_Result sip__http_send_error(struct MHD_Connection *c, sip_error_t *e) {
  unsigned status = (unsigned)sip_code_http_status(sip_error_code(e));
  enum MHD_Result r = sip__http_send_error_msg(c, status, sip_error_message(e));
  sip_error_free(e);
  return r;
}

enum MHD_Result sip__http_send_json(struct MHD_Connection *c, unsigned status, json_t *v) {
  char *txt = v ? json_dumps(v, JSON_COMPACT) : NULL;
  json_decref(v);
  if (!txt) return sip__http_send_error_msg(c, 500, "out of memory");
  size_t rn = 0;
  char *red = sip__redacted(txt, strlen(txt), &rn); /* no server directories (core/redact.h) */
  if (red) {
    sip_free(txt);
    return sip__http_send_owned(c, status, "application/json", red, rn);
  }
  /* jansson allocates with malloc; sip_free is its documented deallocator. */
  struct MHD_Response *r =
      MHD_create_response_from_buffer_with_free_callback(strlen(txt), txt, sip_free);
  if (!r) sip_free(txt);
  return sip__http_queue(c, status, r, "application/json");
}

/* ---- the MHD callbacks ----------------------------------------------------- */

/* The POST route's phases when the request is a POST to one, else NULL. */
static const sip__http_post_ops_t *posting(const sip__hreq_t *q, const char *method) {
  return q->route && q->route->post && !strcmp(method, MHD_HTTP_METHOD_POST) ? q->route->post
                                                                             : NULL;
}

/* MHD calls this once when the headers are in, once per body chunk, once
 * when the whole request is in, and once more after each resume. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  sip__http_t *h = cls;
  sip__hreq_t *q = *con_cls;
  if (!q) {
    if (!(q = sip__calloc(1, sizeof *q))) return MHD_NO;
    q->h = h;
    q->conn = c;
    q->header_len = -1;
    *con_cls = q;
    atomic_fetch_add(&h->inflight, 1);
    sip__http_conns_headers_in(h, c);
    q->route = sip__http_route_match(url, &q->model, &q->version);
    if (q->route && h->dashboard_only && !sip__http_dashboard_route(q->route->kind))
      q->route = NULL; /* the dashboard's own port: its routes only (404) */
    q->kind = q->route ? q->route->kind : R_NONE;
    sip__http_guard(q, method); /* auth.c: answered once the request is in, or now */
    /* A request the client may not make hears that first, even when its
     * body is too large (the limit is not told to it). */
    if (q->denied && sip__http_deny_now(q)) {
      q->refused = 1;
      return sip__http_send_denied(q);
    }
    char msg[256];
    unsigned bad = sip__http_framing_problem(c, version, h->cfg->http_max_body_bytes, msg,
                                             sizeof msg);
    if (bad) { /* refused before its body is read: MHD closes the connection after */
      q->refused = 1;
      return sip__http_send_error_msg(c, bad, msg);
    }
    const sip__http_post_ops_t *post = posting(q, method);
    return post && post->begin && !q->denied ? post->begin(q) : MHD_YES;
  }
  const sip__http_post_ops_t *post = posting(q, method);
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0; /* bodies of other requests are ignored */
    if (!post || q->started || q->refused || q->denied) return MHD_YES;
    return post->body(q, upload_data, n);
  }
  if (q->denied) return q->refused ? MHD_YES : sip__http_send_denied(q);
  if (q->refused) return MHD_YES;
  /* GET routes, 404 and 405: answered once the whole request is in
   * (answering earlier makes MHD close the connection). */
  if (!post) return sip__http_answer(q, url, method);
  if (q->early) {
    sip_error_t *e = q->early;
    q->early = NULL;
    return sip__http_send_error(c, e);
  }
  return q->started ? post->answer(q) : post->start(q);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  sip__http_t *h = cls;
  sip__http_conns_request_done(h, c, toe);
  sip__hreq_t *q = *con_cls;
  if (!q) return;
  *con_cls = NULL;
  sip__free(q->model);
  sip__free(q->version);
  sip__free(q->buf);
  sip__http_meta_unref(q->meta);
  sip__ks_request_free(q->ks);
  sip_response_free(q->resp);
  sip_error_free(q->err);
  sip_free(q->answer);
  sip_error_free(q->early);
  sip__free(q);
  if (atomic_fetch_sub(&h->inflight, 1) == 1) {
    pthread_mutex_lock(&h->mu);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
  }
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  sip__http_t *h = cls;
  sip__http_conns_notify(h, c, socket_context, toe);
}

/* ---- lifecycle --------------------------------------------------------- */

/* Binds "host:port" (IPv6 hosts in brackets) and listens; `key` names the
 * config key in errors. */
static sip_error_t *bind_listen(const char *key, const char *hostport, int *fd_out, char *addr,
                                size_t addr_n) {
  char host[260];
  const char *colon = strrchr(hostport, ':');
  if (!colon || (size_t)(colon - hostport) >= sizeof host)
    return sip_error_new(SIP_INVALID_ARGUMENT, "%s '%s': expected HOST:PORT", key, hostport);
  const char *h0 = hostport, *h1 = colon;
  if (*h0 == '[' && h1 > h0 && h1[-1] == ']') h0++, h1--;
  memcpy(host, h0, (size_t)(h1 - h0));
  host[h1 - h0] = '\0';
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
  int rc = getaddrinfo(host, colon + 1, &hints, &res);
  if (rc)
    return sip_error_new(SIP_UNAVAILABLE, "%s %s: cannot resolve '%s': %s", key, hostport,
                         host, gai_strerror(rc));
  int fd = -1, err = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1024)) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    char eb[128];
    return sip_error_new(SIP_UNAVAILABLE, "%s %s: cannot listen: %s", key, hostport,
                         strerror_r(err, eb, sizeof eb));
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                    : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  snprintf(addr, addr_n, "http://%s%s%s:%d", strchr(host, ':') ? "[" : "", host,
           strchr(host, ':') ? "]" : "", port);
  *fd_out = fd;
  return NULL;
}

#define SMALL_BODY_MAX ((size_t)64 << 10)

enum MHD_Result sip__http_small_body(sip__hreq_t *q, const char *data, size_t n, const char *what) {
  if (q->early) return MHD_YES;
  if (q->len + n > SMALL_BODY_MAX) {
    q->early = sip_error_new(SIP_INVALID_ARGUMENT,
                             "%s body is larger than %zu bytes; expected a small JSON object",
                             what, SMALL_BODY_MAX);
    return MHD_YES;
  }
  if (q->len + n > q->cap) {
    size_t cap = q->len + n > 4096 ? q->len + n : 4096;
    uint8_t *b = sip__realloc(q->buf, cap);
    if (!b) return MHD_NO;
    q->buf = b;
    q->cap = cap;
  }
  memcpy(q->buf + q->len, data, n);
  q->len += n;
  return MHD_YES;
}

json_t *sip__http_body_object(sip__hreq_t *q, const char *expect) {
  json_error_t je;
  je.text[0] = '\0';
  json_t *b = q->len ? json_loadb((const char *)q->buf, q->len, JSON_REJECT_DUPLICATES, &je)
                     : json_object();
  if (b && json_is_object(b)) return b;
  json_decref(b);
  sip__http_send_error(q->conn, sip_error_new(SIP_INVALID_ARGUMENT,
                                              "the body is not a JSON object%s%s%s; expected %s",
                                              je.text[0] ? " (" : "", je.text,
                                              je.text[0] ? ")" : "",
                                              expect));
  return NULL;
}

static void free_http(sip__http_t *h) {
  sip__http_meta_clear(h);
  sip__http_conns_free(h);
  sip__free_secret(h->tls_cert);
  sip__free_secret(h->tls_key);
  pthread_mutex_destroy(&h->cache_mu);
  pthread_mutex_destroy(&h->sse_mu);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  sip__free(h->d);
  sip__free(h);
}

/* The accept thread: each new connection goes to the next daemon in turn,
 * so a burst of connections spreads over all the event-loop threads. Past
 * the connection limits a new one is answered 503 and closed (conns.c,
 * which this thread also runs: header deadlines, hang-ups). Out of
 * file descriptors, a reserve descriptor is given up to accept and close
 * the pending connection (else accepting pauses for 100 ms), and the
 * failure is logged at most once a second. */
static void *accept_loop(void *arg) {
  sip__http_t *h = arg;
  struct pollfd p[3] = {{.fd = h->listen_fd, .events = POLLIN},
                        {.fd = h->wake[0], .events = POLLIN},
                        {.fd = sip__http_conns_fd(h), .events = POLLIN}};
  int wait_ms = -1;
  int reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  uint64_t logged_us = 0;
  unsigned long suppressed = 0;
  for (;;) {
    if (poll(p, 3, wait_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    wait_ms = sip__http_conns_run(h);
    if (!p[0].revents) continue;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(h->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      int err = errno;
      if (err == EINTR || err == EAGAIN || err == EWOULDBLOCK || err == ECONNABORTED) continue;
      int shed = 0;
      if ((err == EMFILE || err == ENFILE) && reserve >= 0) {
        close(reserve);
        int k = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (k >= 0) close(k);
        shed = k >= 0 || errno == EAGAIN || errno == EWOULDBLOCK;
        reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
      }
      if (!shed) poll(&p[1], 1, 100); /* back off; a stop still ends it at once */
      uint64_t now = sip__now_us();
      if (logged_us && now - logged_us < 1000000) {
        suppressed++;
      } else {
        sip__log(SIP__LOG_WARN, "http accept failed",
                 "address=%s error=\"%s\" action=\"%s\" suppressed=%lu", h->address,
                 strerror(err),
                 shed ? "connection closed: out of file descriptors" : "accepting paused for 100 ms",
                 suppressed);
        logged_us = now;
        suppressed = 0;
      }
      continue;
    }
    if (sip__http_conns_admit(h, fd, (struct sockaddr *)&ss, sl)) continue;
    unsigned i = atomic_fetch_add(&h->next_d, 1) % (unsigned)h->n_d;
    if (MHD_add_connection(h->d[i], fd, (struct sockaddr *)&ss, sl) != MHD_YES)
      sip__http_conns_forget_fd(h, fd); /* MHD closed it */
  }
  if (reserve >= 0) close(reserve);
  return NULL;
}

/* Starts a front-end on `address` (`key` names it in errors): the KServe
 * front-end, or with dashboard_only the dashboard's own port. */
static sip_error_t *start_on(sip_server_t *s, const sip__config_t *cfg, const char *key,
                             const char *address, int threads, int dashboard_only,
                             void **out_) {
  sip__http_t **out = (sip__http_t **)out_;
  *out = NULL;
  sip__http_t *h = sip__calloc(1, sizeof *h);
  if (!h) return SIP__OOM();
  h->s = s;
  h->cfg = cfg;
  h->dashboard_only = dashboard_only;
  h->listen_fd = h->wake[0] = h->wake[1] = -1;
  pthread_mutex_init(&h->cache_mu, NULL);
  pthread_mutex_init(&h->sse_mu, NULL);
  pthread_mutex_init(&h->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&h->cv, &ca);
  pthread_condattr_destroy(&ca);
  /* The classic JSON tensor decoder, for comparison (bench/json.py). */
  const char *classic = getenv("SIP_HTTP_JSON_CLASSIC");
  sip__ks_json_classic(classic && *classic && strcmp(classic, "0"));
  int fd = -1;
  sip_error_t *e = sip__http_conns_init(h);
  if (!e) e = bind_listen(key, address, &fd, h->address, sizeof h->address);
  if (e) {
    free_http(h);
    return e;
  }
  h->n_d = threads > 1 ? threads : 1;
  if (!(h->d = sip__calloc((size_t)h->n_d, sizeof *h->d))) {
    close(fd);
    free_http(h);
    return SIP__OOM();
  }
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                   MHD_USE_NO_LISTEN_SOCKET;
  if (cfg->tls_cert_file) { /* HTTPS with libmicrohttpd's GnuTLS (docs/security.md) */
    e = sip__read_pem(cfg->tls_cert_file, "cert_file", &h->tls_cert);
    if (!e) e = sip__read_pem(cfg->tls_key_file, "key_file", &h->tls_key);
    if (!e && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
      e = sip_error_new(SIP_UNAVAILABLE, "server.tls: this libmicrohttpd was built without TLS");
    if (e) {
      close(fd);
      free_http(h);
      return e;
    }
    flags |= MHD_USE_TLS;
    /* "http://..." becomes "https://..." */
    memmove(h->address + 5, h->address + 4, strlen(h->address + 4) + 1);
    h->address[4] = 's';
  }
  struct MHD_OptionItem opts[] = {
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)CONN_MEMORY_LIMIT, NULL},
      /* The limits in all and per address are sip's (conns.c), over every
       * daemon; MHD's own would count each daemon apart, and is twice sip's:
       * connections conns.c shut down to make room stay MHD's until it
       * closes them. */
      {MHD_OPTION_CONNECTION_LIMIT,
       SIP__HTTP_MHD_LIMIT(cfg->http_max_connections > 0 ? cfg->http_max_connections : 1000),
       NULL},
      {MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S, NULL},
      {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h},
      {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h},
      {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL},
      /* Last, since without TLS they end the list early. */
      {h->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, h->tls_cert},
      {h->tls_key ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, h->tls_key},
      {MHD_OPTION_END, 0, NULL},
  };
  int ok = 1;
  for (int i = 0; i < h->n_d && ok; i++)
    ok = (h->d[i] = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_ARRAY, opts,
                                     MHD_OPTION_END)) != NULL;
  if (ok) {
    h->listen_fd = fd;
    ok = pipe2(h->wake, O_CLOEXEC) == 0;
    if (ok && pthread_create(&h->acceptor, NULL, accept_loop, h)) {
      close(h->wake[0]);
      close(h->wake[1]);
      ok = 0;
    } else if (ok) {
      pthread_setname_np(h->acceptor, "sip-http-accept");
    }
  }
  if (!ok) {
    for (int i = 0; i < h->n_d; i++)
      if (h->d[i]) MHD_stop_daemon(h->d[i]);
    close(fd);
    free_http(h);
    return sip_error_new(SIP_UNAVAILABLE, "%s %s: libmicrohttpd failed to start", key,
                         address);
  }
  if (dashboard_only) /* the address printed is the page's */
    snprintf(h->address + strlen(h->address), sizeof h->address - strlen(h->address),
             "/dashboard");
  sip__log(SIP__LOG_INFO, dashboard_only ? "dashboard listening" : "http listening",
           "address=%s threads=%d max_body_bytes=%zu tls=%s auth=%s", h->address, h->n_d,
           cfg->http_max_body_bytes, h->tls_cert ? "on" : "off",
           sip__auth_enabled(&cfg->auth) ? "tokens" : "open");
  *out = h;
  return NULL;
}

static sip_error_t *http_start(sip_server_t *s, const void *options, void **out) {
  const sip__config_t *cfg = options;
  return start_on(s, cfg, "server.http", cfg->http, cfg->http_threads, 0, out);
}

/* One event-loop thread: the dashboard's clients are few. */
static sip_error_t *dashboard_start(sip_server_t *s, const void *options, void **out) {
  const sip__config_t *cfg = options;
  return start_on(s, cfg, "server.dashboard", cfg->dashboard, 1, 1, out);
}

static void http_stop(void *state) {
  sip__http_t *h = state;
  if (!h) return;
  /* Stop accepting, then let answers already queued reach their clients
   * (bounded: a client that stopped reading must not hold shutdown). */
  ssize_t w = write(h->wake[1], "x", 1);
  (void)w;
  pthread_join(h->acceptor, NULL);
  close(h->wake[0]);
  close(h->wake[1]);
  close(h->listen_fd);
  sip__http_sse_stop(h);
  uint64_t until = sip__now_us() + STOP_GRACE_US;
  struct timespec ts = {(time_t)(until / 1000000), (long)(until % 1000000) * 1000};
  pthread_mutex_lock(&h->mu);
  while (atomic_load(&h->inflight) > 0)
    if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&h->mu);
  for (int i = 0; i < h->n_d; i++) MHD_stop_daemon(h->d[i]);
  free_http(h);
}

static size_t http_address_count(void *state) {
  (void)state;
  return 1;
}

static const char *http_address(void *state, size_t i) {
  return i == 0 ? ((sip__http_t *)state)->address : NULL;
}

static void http_connections(void *state, sip_frontend_count_fn emit, void *ctx) {
  sip__http_t *h = state;
  emit(ctx, h->dashboard_only ? "dashboard" : "http", sip__http_conns_open(h));
}

const sip_frontend_vtable_t sip__frontend_http = {
    .name = "http",
    .start = http_start,
    .stop = http_stop,
    .address_count = http_address_count,
    .address = http_address,
    .connections = http_connections,
};

const sip_frontend_vtable_t sip__frontend_dashboard = {
    .name = "dashboard",
    .start = dashboard_start,
    .stop = http_stop,
    .address_count = http_address_count,
    .address = http_address,
    .connections = http_connections,
};
