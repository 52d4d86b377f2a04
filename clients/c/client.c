/* sip — libsipclient: native-protocol client, its connection. A writer lock
 * serialises frames; a reader thread demultiplexes answers by request id
 * and, when the connection drops, reconnects with backoff and resends the
 * keyed requests still in their window. Lock order: pmu, then wmu, then rmu.
 * The calls are in client_infer.c, client_info.c, client_shm.c and
 * client_events.c (client_impl.h holds what they share). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "core/fdsend.h"
#include "sip/client.h"
#include "transport/frame.h"

#include "client_impl.h"

void sip__client_pending_free(sip__client_pending_t *p) {
  sip__wbuf_free(&p->frame);
  sip__free(p);
}


/* How long a unix socket connect is retried while the server's listen
 * backlog is full (EAGAIN), the delay between attempts doubling from 1 ms
 * up to 100 ms. A blocking connect would wait for the server forever. */
#define CONNECT_RETRY_MS 5000

/* Connects the non-blocking unix socket fd, retrying while the backlog is
 * full, and makes it blocking. 0, or the errno (EAGAIN: still full). */
static int unix_connect_retrying(int fd, const struct sockaddr_un *sa) {
  uint64_t until = sip__now_us() + (uint64_t)CONNECT_RETRY_MS * 1000;
  for (long delay_us = 1000;; delay_us = delay_us < 100000 ? delay_us * 2 : 100000) {
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN || sip__now_us() >= until) return errno;
    struct timespec ts = {0, delay_us * 1000};
    nanosleep(&ts, NULL);
  }
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ? errno : 0;
}

sip_error_t *sip__client_dial(const char *ep, int *out) {
  int fd = -1;
  if (strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "unix://", 7) == 0) {
    const char *path = ep + (ep[0] == 'i' ? 6 : 7);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
      return sip_error_new(SIP_INVALID_ARGUMENT, "unix socket path too long: %s", path);
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int err = fd < 0 ? errno : unix_connect_retrying(fd, &sa);
    if (err) {
      if (fd >= 0) close(fd);
      if (err == EAGAIN)
        return sip_error_new(SIP_UNAVAILABLE, "cannot connect to %s: the server's listen backlog "
                             "stayed full for %d ms (it accepts no connections)",
                             ep, CONNECT_RETRY_MS);
      return sip_error_new(SIP_UNAVAILABLE, "cannot connect to %s: %s", ep, strerror(err));
    }
  } else if (strncmp(ep, "tcp://", 6) == 0) {
    char host[256];
    const char *hp = ep + 6, *colon = strrchr(hp, ':');
    if (!colon || (size_t)(colon - hp) >= sizeof host || colon == hp)
      return sip_error_new(SIP_INVALID_ARGUMENT, "endpoint '%s'; expected tcp://host:port", ep);
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    char *h = host;
    if (h[0] == '[') {
      h++;
      char *e = strchr(h, ']');
      if (e) *e = '\0';
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(h, colon + 1, &hints, &res);
    if (rc != 0)
      return sip_error_new(SIP_UNAVAILABLE, "cannot resolve %s: %s", ep, gai_strerror(rc));
    int err = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
      fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
      if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        close(fd);
        fd = -1;
      }
    }
    freeaddrinfo(res);
    if (fd < 0)
      return sip_error_new(SIP_UNAVAILABLE, "cannot connect to %s: %s", ep, strerror(err));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  } else {
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "endpoint '%s'; expected ipc:///path, unix:///path or tcp://host:port",
                         ep);
  }
  *out = fd;
  return NULL;
}

int sip__client_read_full(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n) {
    ssize_t r = recv(fd, b, n, 0);
    if (r == 0) return -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    b += r;
    n -= (size_t)r;
  }
  return 0;
}

/* The answers of one connection, read ahead: one recv takes a small
 * answer's header and payload together (and whatever follows it), where
 * reading each exactly would take two. Parts too large for the buffer are
 * read straight to where they go. */
#define READ_AHEAD 16384
typedef struct {
  int fd;
  size_t off, len;
  uint8_t buf[READ_AHEAD];
} reader_t;

/* n bytes into p: 0, or -1 when the connection ended or failed. */
static int reader_take(reader_t *r, void *p, size_t n) {
  uint8_t *b = p;
  for (;;) {
    size_t have = r->len - r->off < n ? r->len - r->off : n;
    memcpy(b, r->buf + r->off, have);
    r->off += have;
    b += have;
    n -= have;
    if (!n) return 0;
    if (n >= READ_AHEAD / 2) return sip__client_read_full(r->fd, b, n);
    ssize_t got = recv(r->fd, r->buf, sizeof r->buf, 0);
    if (got == 0) return -1;
    if (got < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    r->off = 0;
    r->len = (size_t)got;
  }
}

static sip__client_pending_t *take_pending(sip_client_t *c, uint64_t id) {
  pthread_mutex_lock(&c->pmu);
  sip__client_pending_t **pp = &c->pending, *p;
  while ((p = *pp) && p->id != id) pp = &p->next;
  if (p) *pp = p->next;
  pthread_mutex_unlock(&c->pmu);
  return p;
}

static void complete_err(sip__client_pending_t *p, sip_error_t *e) {
  if (p->is_info)
    p->info_done(NULL, e, p->user);
  else
    p->done(NULL, e, p->user);
  sip__client_pending_free(p);
}

/* The connection is gone (lost, an ERROR frame, or closed by the user):
 * fails what is pending, but for keyed requests still in their resend
 * window while the client is not closed by its user. */
static void fail_all(sip_client_t *c, sip_code_t code, const char *msg) {
  uint64_t now = sip__now_ns();
  sip__client_pending_t *p = NULL;
  pthread_mutex_lock(&c->pmu);
  c->closed = 1;
  for (sip__client_pending_t **pp = &c->pending; *pp;) {
    sip__client_pending_t *q = *pp;
    if (!c->user_closed && q->frame.data && q->resend_until_ns > now) {
      pp = &q->next;
      continue;
    }
    *pp = q->next;
    q->next = p;
    p = q;
  }
  pthread_mutex_unlock(&c->pmu);
  while (p) {
    sip__client_pending_t *nx = p->next;
    complete_err(p, sip_error_new(code, "%s", msg));
    p = nx;
  }
}

static void release_payload(void *p) { sip__free(p); }

/* Points the outputs the server wrote to shared memory at the regions'
 * bytes (each tensor holding a reference on its mapping). */
static sip_error_t *resolve_shm_outputs(sip_client_t *c, sip__wire_response_t *wr) {
  sip_error_t *e = NULL;
  pthread_mutex_lock(&c->rmu);
  for (size_t i = 0; wr->output_shm && i < wr->n_outputs && !e; i++) {
    const sip__wire_shm_ref_t *ref = &wr->output_shm[i];
    if (!ref->region) continue;
    sip_client_shm_t *r = c->regions;
    while (r && strcmp(r->name, ref->region)) r = r->next;
    if (!r || ref->offset > r->size || ref->size > r->size - ref->offset)
      e = sip_error_new(SIP_INTERNAL, "the server wrote output '%s' to %s shared memory region "
                        "'%s' (offset %llu, %llu bytes)", wr->outputs[i]->name,
                        r ? "outside" : "unknown", ref->region, (unsigned long long)ref->offset,
                        (unsigned long long)ref->size);
    else {
      wr->outputs[i]->data = (uint8_t *)r->data + ref->offset;
      wr->outputs[i]->owner = sip_buf_ref(r->map);
    }
  }
  pthread_mutex_unlock(&c->rmu);
  return e;
}

/* A failed INFO_RESPONSE carries {"error": "message"}: its message, or the
 * text as is when it is not that. */
sip_error_t *sip__client_error_from_text(sip_code_t code, const char *txt, size_t n) {
  json_t *o = json_loadb(txt, n, 0, NULL);
  const char *msg = json_string_value(json_object_get(o, "error"));
  sip_error_t *e = msg ? sip_error_new(code, "%s", msg) : sip_error_new(code, "%.*s", (int)n, txt);
  json_decref(o);
  return e;
}

/* Reads answers until the connection ends, then fails what is pending on
 * it (fail_all). */
static void read_frames(sip_client_t *c, reader_t *rd) {
  for (;;) {
    uint8_t hdr[SIP__FRAME_HEADER_SIZE];
    if (reader_take(rd, hdr, sizeof hdr) != 0) break;
    sip__frame_header_t h;
    sip_error_t *e = sip__frame_header_decode(hdr, UINT32_MAX, &h);
    if (e) {
      fail_all(c, SIP_INTERNAL, sip_error_message(e));
      sip_error_free(e);
      return;
    }
    void *mem = sip__malloc(h.length ? h.length : 1);
    sip_buf_t *buf = mem ? sip_buf_wrap(mem, h.length, release_payload, mem) : NULL;
    if (!buf || reader_take(rd, mem, h.length) != 0) {
      sip_buf_unref(buf);
      break;
    }
    if (h.type == SIP__MSG_ERROR) {
      uint32_t code;
      const char *txt;
      size_t n;
      e = sip__decode_code_text(mem, h.length, 1, &code, &txt, &n);
      char *msg = e ? NULL : sip__strndup(txt, n);
      fail_all(c, e ? SIP_INTERNAL : (sip_code_t)code,
               e ? sip_error_message(e) : msg ? msg : "server error");
      sip__free(msg);
      sip_error_free(e);
      sip_buf_unref(buf);
      return;
    }
    sip__client_pending_t *p = take_pending(c, h.request_id);
    if (!p) { /* an answer nobody waits for: ignore */
      sip_buf_unref(buf);
      continue;
    }
    if (h.type == SIP__MSG_INFO_RESPONSE && p->is_info) {
      uint32_t code;
      const char *txt;
      size_t n;
      e = sip__decode_code_text(mem, h.length, 0, &code, &txt, &n);
      if (!e && code) e = sip__client_error_from_text((sip_code_t)code, txt, n);
      char *json = e ? NULL : sip__strndup(txt, n);
      if (!e && !json) e = SIP__OOM();
      p->info_done(json, e, p->user);
      sip__client_pending_free(p);
    } else if (h.type == SIP__MSG_INFER_RESPONSE && !p->is_info) {
      sip__wire_response_t wr;
      e = sip__decode_infer_response(mem, h.length, buf, &wr);
      if (!e && wr.code) e = sip_error_new((sip_code_t)wr.code, "%s", wr.message);
      if (!e) e = resolve_shm_outputs(c, &wr);
      if (e) {
        if (!sip_error_code(e)) wr.code = 0;
        sip__wire_response_clear(&wr);
        p->done(NULL, e, p->user);
      } else {
        sip_client_response_t *r = sip__calloc(1, sizeof *r);
        if (!r) {
          sip__wire_response_clear(&wr);
          p->done(NULL, SIP__OOM(), p->user);
        } else {
          r->request_id = h.request_id;
          r->outputs = wr.outputs;
          r->n_outputs = wr.n_outputs;
          r->queue_us = wr.queue_us;
          r->compute_us = wr.compute_us;
          r->total_us = wr.total_us;
          r->latency_ms = (double)(sip__now_ns() - p->start_ns) / 1e6;
          r->replayed = wr.replayed;
          sip__wire_shm_refs_free(wr.output_shm, wr.n_outputs);
          wr.output_shm = NULL;
          wr.outputs = NULL;
          wr.n_outputs = 0;
          sip__wire_response_clear(&wr);
          p->done(r, NULL, p->user);
        }
      }
      sip__client_pending_free(p);
    } else {
      complete_err(p, sip_error_new(SIP_INTERNAL, "server answered with message type %u",
                                    h.type));
    }
    sip_buf_unref(buf);
  }
  fail_all(c, SIP_UNAVAILABLE, "connection to the server closed");
}

/* Reads the answers of connection `fd` (read_frames). */
static void read_answers(sip_client_t *c, int fd) {
  reader_t rd; /* 16 KiB on the reader thread's stack */
  rd.fd = fd;
  rd.off = rd.len = 0;
  read_frames(c, &rd);
}

/* Frees a token after overwriting it. */
void sip__client_wipe_free(char *s) {
  if (!s) return;
  volatile char *v = s;
  for (size_t i = 0; v[i]; i++) v[i] = 0;
  sip__free(s);
}

static void ignore_info(char *json, sip_error_t *e, void *user) {
  (void)user;
  sip__free(json);
  sip_error_free(e);
}

/* Writes a whole frame to c->fd (wmu held); `fd` >= 0 goes with its first
 * bytes as SCM_RIGHTS. Returns 0 or errno. */
static int write_frame(sip_client_t *c, const sip__wbuf_t *w, int fd) {
  for (size_t off = 0; off < w->len;) {
    ssize_t n = sip__send_with_fd(c->fd, w->data + off, w->len - off, off == 0 ? fd : -1);
    if (n < 0) return errno;
    off += (size_t)n;
  }
  return 0;
}

/* Waits `ms` (woken early by sip_client_free); pmu held. 0 once the user
 * closed the client. */
static int backoff_wait(sip_client_t *c, uint32_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)ms * 1000000u;
  ts.tv_sec += (time_t)(ns / 1000000000u);
  ts.tv_nsec = (long)(ns % 1000000000u);
  while (!c->user_closed && pthread_cond_timedwait(&c->rcv, &c->pmu, &ts) == 0) {
  }
  return !c->user_closed;
}

/* Dials until a connection opens (spaced by the backoff) and swaps it in:
 * the regions are registered again, then the keyed requests still in their
 * window are resent, then new requests are accepted. Returns the new fd,
 * or -1 once the user closed the client. */
static int reconnect(sip_client_t *c) {
  uint32_t delay = 0;
  unsigned seed = (unsigned)sip__now_ns();
  for (;;) {
    pthread_mutex_lock(&c->pmu);
    uint32_t first = c->backoff_ms, cap = c->max_backoff_ms;
    delay = delay ? (delay > cap / 2 ? cap : delay * 2) : first;
    uint32_t jittered = delay / 2 + (delay > 1 ? (uint32_t)rand_r(&seed) % (delay / 2 + 1) : 0);
    int open = backoff_wait(c, jittered);
    pthread_mutex_unlock(&c->pmu);
    fail_all(c, SIP_UNAVAILABLE, "connection to the server lost; the resend window is over");
    if (!open) return -1;
    int fd;
    sip_error_t *e = sip__client_dial(c->endpoint, &fd);
    if (e) {
      sip_error_free(e);
      continue;
    }
    pthread_mutex_lock(&c->pmu);
    if (c->user_closed) {
      pthread_mutex_unlock(&c->pmu);
      close(fd);
      return -1;
    }
    pthread_mutex_lock(&c->wmu);
    int old = c->fd;
    c->fd = fd;
    if (c->token) { /* before anything else: the server takes nothing of a closed group */
      sip__client_pending_t *p = sip__calloc(1, sizeof *p);
      sip__wbuf_t w = {0};
      if (p) {
        p->id = atomic_fetch_add(&c->next_id, 1);
        p->is_info = 1;
        p->info_done = ignore_info;
        sip__encode_json_request(&w, SIP__MSG_AUTH, p->id, c->token, strlen(c->token));
        if (w.oom || write_frame(c, &w, -1)) {
          sip__client_pending_free(p);
        } else {
          p->next = c->pending;
          c->pending = p;
        }
        sip__wbuf_free(&w);
      }
    }
    pthread_mutex_lock(&c->rmu);
    for (sip_client_shm_t *r = c->regions; r; r = r->next) {
      sip__client_pending_t *p = sip__calloc(1, sizeof *p);
      sip__wbuf_t w = {0};
      if (!p) continue;
      p->id = atomic_fetch_add(&c->next_id, 1);
      p->is_info = 1;
      p->info_done = ignore_info;
      sip__encode_shm_register(&w, p->id, r->name, 0, r->size);
      if (w.oom || write_frame(c, &w, r->fd)) {
        sip__client_pending_free(p);
      } else {
        p->next = c->pending;
        c->pending = p;
      }
      sip__wbuf_free(&w);
    }
    pthread_mutex_unlock(&c->rmu);
    for (sip__client_pending_t *p = c->pending; p; p = p->next)
      if (p->frame.data) write_frame(c, &p->frame, -1); /* a failure: the reader sees it */
    pthread_mutex_unlock(&c->wmu);
    c->closed = 0;
    atomic_fetch_add(&c->reconnects, 1);
    pthread_mutex_unlock(&c->pmu);
    close(old);
    return fd;
  }
}

static void *reader_main(void *arg) {
  sip_client_t *c = arg;
  int fd = c->fd;
  do read_answers(c, fd);
  while ((fd = reconnect(c)) >= 0);
  return NULL;
}

void sip_client_set_reconnect(sip_client_t *c, uint32_t backoff_ms, uint32_t max_backoff_ms,
                              uint32_t resend_window_ms) {
  pthread_mutex_lock(&c->pmu);
  c->backoff_ms = backoff_ms ? backoff_ms : 1;
  c->max_backoff_ms = max_backoff_ms > c->backoff_ms ? max_backoff_ms : c->backoff_ms;
  c->resend_ms = resend_window_ms;
  pthread_mutex_unlock(&c->pmu);
}

uint64_t sip_client_reconnects(sip_client_t *c) { return atomic_load(&c->reconnects); }

sip_error_t *sip_client_connect(const char *endpoint, sip_client_t **out) {
  *out = NULL;
  if (!endpoint) return sip_error_new(SIP_INVALID_ARGUMENT, "endpoint is NULL");
  int fd;
  sip_error_t *e = sip__client_dial(endpoint, &fd);
  if (e) return e;
  sip_client_t *c = sip__calloc(1, sizeof *c);
  if (!c) {
    close(fd);
    return SIP__OOM();
  }
  c->fd = fd;
  atomic_init(&c->next_id, 1);
  atomic_init(&c->reconnects, 0);
  c->backoff_ms = 50;
  c->max_backoff_ms = 2000;
  c->resend_ms = 30000;
  pthread_mutex_init(&c->wmu, NULL);
  pthread_mutex_init(&c->pmu, NULL);
  pthread_mutex_init(&c->rmu, NULL);
  pthread_cond_init(&c->rcv, NULL);
  if (!(c->endpoint = sip__strdup(endpoint)) ||
      pthread_create(&c->reader, NULL, reader_main, c) != 0) {
    close(fd);
    int oom = !c->endpoint;
    sip__free(c->endpoint);
    sip__free(c);
    if (oom) return SIP__OOM();
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start the reader thread");
  }
  *out = c;
  return NULL;
}

void sip_client_free(sip_client_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->pmu);
  c->user_closed = 1; /* no reconnection from here on */
  pthread_cond_broadcast(&c->rcv);
  pthread_mutex_lock(&c->wmu);
  shutdown(c->fd, SHUT_RDWR); /* wakes the reader, which fails what is pending */
  pthread_mutex_unlock(&c->wmu);
  pthread_mutex_unlock(&c->pmu);
  pthread_join(c->reader, NULL);
  close(c->fd);
  while (c->regions) { /* the server dropped them with the connection */
    sip_client_shm_t *r = c->regions;
    c->regions = r->next;
    sip_buf_unref(r->map);
    sip__free(r->name);
    sip__free(r);
  }
  pthread_mutex_destroy(&c->wmu);
  pthread_mutex_destroy(&c->pmu);
  pthread_mutex_destroy(&c->rmu);
  pthread_cond_destroy(&c->rcv);
  sip__free(c->endpoint);
  sip__client_wipe_free(c->token);
  sip__free(c);
}

/* Registers p, then writes the frame; `fd` (>= 0) goes with its first
 * bytes as SCM_RIGHTS. */
sip_error_t *sip__client_send_frame(sip_client_t *c, sip__client_pending_t *p, sip__wbuf_t *w, int fd) {
  if (w->oom) {
    sip__wbuf_free(w);
    sip__client_pending_free(p);
    return SIP__OOM();
  }
  pthread_mutex_lock(&c->pmu);
  if (c->closed && (!p->frame.data || c->user_closed)) {
    pthread_mutex_unlock(&c->pmu);
    sip__wbuf_free(w);
    sip__client_pending_free(p);
    return sip_error_new(SIP_UNAVAILABLE, c->user_closed
                                              ? "the client is closed"
                                              : "connection to the server lost; reconnecting");
  }
  int queued = c->closed; /* a keyed request waits for the next connection */
  int keyed = p->frame.data != NULL;
  p->next = c->pending;
  c->pending = p;
  pthread_mutex_unlock(&c->pmu);
  if (queued) {
    sip__wbuf_free(w);
    return NULL;
  }
  uint64_t id = p->id; /* p may complete and be freed as soon as the frame is out */
  pthread_mutex_lock(&c->wmu);
  int err = write_frame(c, w, fd);
  pthread_mutex_unlock(&c->wmu);
  sip__wbuf_free(w);
  if (err && !keyed) { /* a keyed request is resent after the reconnection */
    sip__client_pending_t *mine = take_pending(c, id);
    if (mine) { /* not yet failed by the reader: the caller gets the error */
      sip__client_pending_free(mine);
      return sip_error_new(SIP_UNAVAILABLE, "cannot send to the server: %s", strerror(err));
    }
  }
  return NULL;
}

void sip__client_wait_done(sip__client_waiter_t *w) {
  pthread_mutex_lock(&w->mu);
  while (!w->done) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
}

void sip__client_signal_done(sip__client_waiter_t *w) {
  pthread_mutex_lock(&w->mu);
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

