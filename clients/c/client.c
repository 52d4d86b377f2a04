/* sip — libsipclient: native-protocol client. A writer lock serialises
 * frames; a reader thread demultiplexes answers by request id and, when the
 * connection drops, reconnects with backoff and resends the keyed requests
 * still in their window. Lock order: pmu, then wmu, then rmu. */
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

typedef struct pending {
  struct pending *next;
  uint64_t id;
  int is_info;
  uint64_t start_ns;
  sip_client_done_fn done;        /* infer */
  void (*info_done)(char *, sip_error_t *, void *); /* info */
  void *user;
  /* A request with an idempotency key: a copy of its frame, resent after a
   * reconnection until resend_until_ns. frame.data NULL otherwise. */
  sip__wbuf_t frame;
  uint64_t resend_until_ns;
} pending_t;

static void pending_free(pending_t *p) {
  sip__wbuf_free(&p->frame);
  sip__free(p);
}

struct sip_client_shm {
  sip_client_shm_t *next;
  char *name;
  void *data;
  size_t size;
  sip_buf_t *map; /* the mapping (and memfd), released with its last reference */
  int fd;         /* the memfd (owned by map), registered again on a new connection */
};

struct sip_client {
  int fd;
  pthread_mutex_t rmu;        /* regions */
  sip_client_shm_t *regions;
  pthread_t reader;
  pthread_mutex_t wmu; /* frame writes */
  pthread_mutex_t pmu; /* pending list */
  pending_t *pending;
  atomic_uint_fast64_t next_id;
  int closed; /* under pmu: no connection (new requests are refused, keyed ones wait) */
  /* Reconnection (under pmu): the endpoint, sip_client_free's flag and
   * wake-up, the backoff and resend window. */
  char *endpoint;
  int user_closed;
  pthread_cond_t rcv;
  uint32_t backoff_ms, max_backoff_ms, resend_ms;
  atomic_uint_fast64_t reconnects;
  char *token; /* sip_client_authenticate's (under wmu): sent first on a new connection */
};

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

static sip_error_t *dial(const char *ep, int *out) {
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

static int read_full(int fd, void *p, size_t n) {
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

static pending_t *take_pending(sip_client_t *c, uint64_t id) {
  pthread_mutex_lock(&c->pmu);
  pending_t **pp = &c->pending, *p;
  while ((p = *pp) && p->id != id) pp = &p->next;
  if (p) *pp = p->next;
  pthread_mutex_unlock(&c->pmu);
  return p;
}

static void complete_err(pending_t *p, sip_error_t *e) {
  if (p->is_info)
    p->info_done(NULL, e, p->user);
  else
    p->done(NULL, e, p->user);
  pending_free(p);
}

/* The connection is gone (lost, an ERROR frame, or closed by the user):
 * fails what is pending, but for keyed requests still in their resend
 * window while the client is not closed by its user. */
static void fail_all(sip_client_t *c, sip_code_t code, const char *msg) {
  uint64_t now = sip__now_ns();
  pending_t *p = NULL;
  pthread_mutex_lock(&c->pmu);
  c->closed = 1;
  for (pending_t **pp = &c->pending; *pp;) {
    pending_t *q = *pp;
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
    pending_t *nx = p->next;
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
static sip_error_t *error_from_text(sip_code_t code, const char *txt, size_t n) {
  json_t *o = json_loadb(txt, n, 0, NULL);
  const char *msg = json_string_value(json_object_get(o, "error"));
  sip_error_t *e = msg ? sip_error_new(code, "%s", msg) : sip_error_new(code, "%.*s", (int)n, txt);
  json_decref(o);
  return e;
}

/* Reads answers from `fd` until the connection ends, then fails what is
 * pending on it (fail_all). */
static void read_answers(sip_client_t *c, int fd) {
  for (;;) {
    uint8_t hdr[SIP__FRAME_HEADER_SIZE];
    if (read_full(fd, hdr, sizeof hdr) != 0) break;
    sip__frame_header_t h;
    sip_error_t *e = sip__frame_header_decode(hdr, UINT32_MAX, &h);
    if (e) {
      fail_all(c, SIP_INTERNAL, sip_error_message(e));
      sip_error_free(e);
      return;
    }
    void *mem = sip__malloc(h.length ? h.length : 1);
    sip_buf_t *buf = mem ? sip_buf_wrap(mem, h.length, release_payload, mem) : NULL;
    if (!buf || read_full(fd, mem, h.length) != 0) {
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
    pending_t *p = take_pending(c, h.request_id);
    if (!p) { /* an answer nobody waits for: ignore */
      sip_buf_unref(buf);
      continue;
    }
    if (h.type == SIP__MSG_INFO_RESPONSE && p->is_info) {
      uint32_t code;
      const char *txt;
      size_t n;
      e = sip__decode_code_text(mem, h.length, 0, &code, &txt, &n);
      if (!e && code) e = error_from_text((sip_code_t)code, txt, n);
      char *json = e ? NULL : sip__strndup(txt, n);
      if (!e && !json) e = SIP__OOM();
      p->info_done(json, e, p->user);
      pending_free(p);
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
      pending_free(p);
    } else {
      complete_err(p, sip_error_new(SIP_INTERNAL, "server answered with message type %u",
                                    h.type));
    }
    sip_buf_unref(buf);
  }
  fail_all(c, SIP_UNAVAILABLE, "connection to the server closed");
}

/* Frees a token after overwriting it. */
static void wipe_free(char *s) {
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
    sip_error_t *e = dial(c->endpoint, &fd);
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
      pending_t *p = sip__calloc(1, sizeof *p);
      sip__wbuf_t w = {0};
      if (p) {
        p->id = atomic_fetch_add(&c->next_id, 1);
        p->is_info = 1;
        p->info_done = ignore_info;
        sip__encode_json_request(&w, SIP__MSG_AUTH, p->id, c->token, strlen(c->token));
        if (w.oom || write_frame(c, &w, -1)) {
          pending_free(p);
        } else {
          p->next = c->pending;
          c->pending = p;
        }
        sip__wbuf_free(&w);
      }
    }
    pthread_mutex_lock(&c->rmu);
    for (sip_client_shm_t *r = c->regions; r; r = r->next) {
      pending_t *p = sip__calloc(1, sizeof *p);
      sip__wbuf_t w = {0};
      if (!p) continue;
      p->id = atomic_fetch_add(&c->next_id, 1);
      p->is_info = 1;
      p->info_done = ignore_info;
      sip__encode_shm_register(&w, p->id, r->name, 0, r->size);
      if (w.oom || write_frame(c, &w, r->fd)) {
        pending_free(p);
      } else {
        p->next = c->pending;
        c->pending = p;
      }
      sip__wbuf_free(&w);
    }
    pthread_mutex_unlock(&c->rmu);
    for (pending_t *p = c->pending; p; p = p->next)
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
  sip_error_t *e = dial(endpoint, &fd);
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
  wipe_free(c->token);
  sip__free(c);
}

/* Registers p, then writes the frame; `fd` (>= 0) goes with its first
 * bytes as SCM_RIGHTS. */
static sip_error_t *send_frame(sip_client_t *c, pending_t *p, sip__wbuf_t *w, int fd) {
  if (w->oom) {
    sip__wbuf_free(w);
    pending_free(p);
    return SIP__OOM();
  }
  pthread_mutex_lock(&c->pmu);
  if (c->closed && (!p->frame.data || c->user_closed)) {
    pthread_mutex_unlock(&c->pmu);
    sip__wbuf_free(w);
    pending_free(p);
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
    pending_t *mine = take_pending(c, id);
    if (mine) { /* not yet failed by the reader: the caller gets the error */
      pending_free(mine);
      return sip_error_new(SIP_UNAVAILABLE, "cannot send to the server: %s", strerror(err));
    }
  }
  return NULL;
}

/* `v` as a JSON string (owned, jansson's), or NULL when it is not UTF-8. */
static char *json_str(const char *v) {
  json_t *j = json_string(v);
  char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
  json_decref(j);
  return t;
}

/* Appends `"key": value` to the object text being built in *acc (owned);
 * 0 when out of memory. */
static int add_param(char **acc, const char *key, const char *value) {
  char *n = sip__asprintf("%s%s\"%s\": %s", *acc ? *acc : "", *acc ? ", " : "", key, value);
  sip__free(*acc);
  *acc = n;
  return n != NULL;
}

/* The request's parameters object as JSON text (owned), or NULL when it
 * has none: pipeline_config as given, the sequence keys, the idempotency
 * key, the W3C trace context. */
static sip_error_t *request_params(const sip_client_request_t *req, char **out) {
  *out = NULL;
  int seq = req->sequence_id || req->sequence_id_str;
  if (!seq && (req->sequence_start || req->sequence_end))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "sequence_start/sequence_end need a sequence_id or sequence_id_str");
  const char *key = req->idempotency_key;
  if (key && (!*key || strlen(key) > 1024))
    return sip_error_new(SIP_INVALID_ARGUMENT, "idempotency key of %zu bytes; expected 1..1024 "
                         "bytes of UTF-8", strlen(key));
  if (!seq && !req->pipeline_config && !key && !req->traceparent) return NULL;
  /* Strings the server reads as JSON strings, each checked to be UTF-8. */
  const char *names[] = {"idempotency_key", "sequence_id", "traceparent", "tracestate"};
  const char *vals[] = {key, req->sequence_id_str, req->traceparent,
                        req->traceparent ? req->tracestate : NULL};
  char *js[4] = {0};
  sip_error_t *e = NULL;
  for (int i = 0; i < 4 && !e; i++)
    if (vals[i] && !(js[i] = json_str(vals[i])))
      e = sip_error_new(SIP_INVALID_ARGUMENT, "%s is not valid UTF-8",
                        i == 0 ? "idempotency key" : i == 1 ? "sequence_id_str" : names[i]);
  char num[24];
  snprintf(num, sizeof num, "%llu", (unsigned long long)req->sequence_id);
  char *acc = NULL;
  int ok = !e;
  if (ok && req->pipeline_config) ok = add_param(&acc, "pipeline_config", req->pipeline_config);
  if (ok && seq)
    ok = add_param(&acc, "sequence_id", js[1] ? js[1] : num) &&
         add_param(&acc, "sequence_start", req->sequence_start ? "true" : "false") &&
         add_param(&acc, "sequence_end", req->sequence_end ? "true" : "false");
  if (ok && js[0]) ok = add_param(&acc, "idempotency_key", js[0]);
  if (ok && js[2]) ok = add_param(&acc, "traceparent", js[2]);
  if (ok && js[3]) ok = add_param(&acc, "tracestate", js[3]);
  for (int i = 0; i < 4; i++) free(js[i]); /* jansson's */
  if (!e && ok) *out = sip__asprintf("{%s}", acc);
  sip__free(acc);
  if (e) return e;
  return *out ? NULL : SIP__OOM();
}

/* batch < 0: a plain INFER_REQUEST; else a BATCH_INFER_REQUEST. */
static sip_error_t *infer_async(sip_client_t *c, const sip_client_request_t *req, int64_t batch,
                                int padding, sip_client_done_fn done, void *user) {
  if (!req || !req->pool || !done)
    return sip_error_new(SIP_INVALID_ARGUMENT, "request, pool and callback are required");
  if (req->priority < 0 || req->priority > 3)
    return sip_error_new(SIP_INVALID_ARGUMENT, "priority %d; expected 0..3", req->priority);
  if (padding < 0 || padding > 2)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "padding %d; expected 0 (none), 1 (replicate_last) or 2 (zero)", padding);
  if (batch >= 0 && (req->input_shm || req->output_shm))
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory inputs and outputs are for "
                         "sip_client_infer and sip_client_infer_async, not batches");
  for (size_t i = 0; req->output_shm && i < req->n_outputs; i++)
    if (req->output_shm[i].region && !req->outputs[i])
      return sip_error_new(SIP_INVALID_ARGUMENT, "output %zu has a destination but no name", i);
  pending_t *p = sip__calloc(1, sizeof *p);
  if (!p) return SIP__OOM();
  p->id = req->request_id ? req->request_id : atomic_fetch_add(&c->next_id, 1);
  p->done = done;
  p->user = user;
  p->start_ns = sip__now_ns();
  sip__wbuf_t w = {0};
  char *params = NULL;
  sip_error_t *pe = request_params(req, &params);
  if (pe) {
    sip__free(p);
    return pe;
  }
  /* The public refs borrow their names, as the wire refs do when encoding. */
  sip__wire_shm_ref_t *in_ref = req->input_shm ? sip__calloc(req->n_inputs + 1, sizeof *in_ref)
                                               : NULL;
  sip__wire_shm_ref_t *out_ref =
      req->output_shm ? sip__calloc(req->n_outputs + 1, sizeof *out_ref) : NULL;
  for (size_t i = 0; in_ref && i < req->n_inputs; i++)
    in_ref[i] = (sip__wire_shm_ref_t){(char *)req->input_shm[i].region, req->input_shm[i].offset,
                                      req->input_shm[i].byte_size};
  for (size_t i = 0; out_ref && i < req->n_outputs; i++)
    out_ref[i] = (sip__wire_shm_ref_t){(char *)req->output_shm[i].region,
                                       req->output_shm[i].offset, req->output_shm[i].byte_size};
  if ((req->input_shm && !in_ref) || (req->output_shm && !out_ref)) w.oom = 1;
  if (batch < 0)
    sip__encode_infer_request_shm(&w, p->id, req->pool, req->priority, req->timeout_ms,
                                  req->outputs, out_ref, req->n_outputs, req->inputs, in_ref,
                                  req->n_inputs, params);
  else
    sip__encode_batch_infer_request(&w, p->id, (uint32_t)batch, (uint8_t)padding, req->pool,
                                    req->priority, req->timeout_ms, req->outputs, req->n_outputs,
                                    req->inputs, req->n_inputs);
  sip__free(params);
  sip__free(in_ref);
  sip__free(out_ref);
  if (req->idempotency_key && !w.oom) { /* kept for a resend after a reconnection */
    p->frame.data = sip__malloc(w.len);
    if (!p->frame.data) w.oom = 1;
    else memcpy(p->frame.data, w.data, p->frame.len = w.len);
    uint32_t ms = req->timeout_ms;
    if (!ms) {
      pthread_mutex_lock(&c->pmu);
      ms = c->resend_ms;
      pthread_mutex_unlock(&c->pmu);
    }
    p->resend_until_ns = p->start_ns + (uint64_t)ms * 1000000u;
  }
  return send_frame(c, p, &w, -1);
}

sip_error_t *sip_client_infer_async(sip_client_t *c, const sip_client_request_t *req,
                                    sip_client_done_fn done, void *user) {
  return infer_async(c, req, -1, 0, done, user);
}

sip_error_t *sip_client_batch_infer_async(sip_client_t *c, const sip_client_request_t *req,
                                          uint32_t max_batch_size, int padding,
                                          sip_client_done_fn done, void *user) {
  return infer_async(c, req, max_batch_size, padding, done, user);
}

typedef struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  sip_client_response_t *resp;
  char *json;
  sip_error_t *err;
} waiter_t;

static void wait_done(waiter_t *w) {
  pthread_mutex_lock(&w->mu);
  while (!w->done) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
}

static void signal_done(waiter_t *w) {
  pthread_mutex_lock(&w->mu);
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void sync_infer_done(sip_client_response_t *r, sip_error_t *e, void *user) {
  waiter_t *w = user;
  w->resp = r;
  w->err = e;
  signal_done(w);
}

static sip_error_t *infer_sync(sip_client_t *c, const sip_client_request_t *req, int64_t batch,
                               int padding, sip_client_response_t **out) {
  *out = NULL;
  waiter_t w = {.done = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  sip_error_t *e = infer_async(c, req, batch, padding, sync_infer_done, &w);
  if (e) {
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return e;
  }
  wait_done(&w);
  *out = w.resp;
  return w.err;
}

sip_error_t *sip_client_infer(sip_client_t *c, const sip_client_request_t *req,
                              sip_client_response_t **out) {
  return infer_sync(c, req, -1, 0, out);
}

sip_error_t *sip_client_batch_infer(sip_client_t *c, const sip_client_request_t *req,
                                    uint32_t max_batch_size, int padding,
                                    sip_client_response_t **out) {
  return infer_sync(c, req, max_batch_size, padding, out);
}

static void sync_info_done(char *json, sip_error_t *e, void *user) {
  waiter_t *w = user;
  w->json = json;
  w->err = e;
  signal_done(w);
}

/* A message answered by INFO_RESPONSE: INFO_REQUEST (kind > 0), a
 * REPO_REQUEST (`repo` JSON) or a shared memory message (shm_type). */
typedef struct info_msg {
  int kind;
  const char *repo;
  const char *admin; /* ADMIN_REQUEST JSON */
  const char *auth;  /* AUTH: the token */
  uint16_t shm_type;
  const char *name;
  uint64_t byte_size;
  int fd; /* SHM_REGISTER's memfd */
} info_msg_t;

/* Sends it and waits for its INFO_RESPONSE. */
static sip_error_t *info_call(sip_client_t *c, const info_msg_t *m, char **json) {
  pending_t *p = sip__calloc(1, sizeof *p);
  if (!p) return SIP__OOM();
  waiter_t w = {.done = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  p->id = atomic_fetch_add(&c->next_id, 1);
  p->is_info = 1;
  p->info_done = sync_info_done;
  p->user = &w;
  sip__wbuf_t wb = {0};
  if (m->shm_type == SIP__MSG_SHM_REGISTER)
    sip__encode_shm_register(&wb, p->id, m->name, 0, m->byte_size);
  else if (m->shm_type)
    sip__encode_shm_name(&wb, m->shm_type, p->id, m->name);
  else if (m->repo)
    sip__encode_repo_request(&wb, p->id, m->repo, strlen(m->repo));
  else if (m->admin)
    sip__encode_json_request(&wb, SIP__MSG_ADMIN_REQUEST, p->id, m->admin, strlen(m->admin));
  else if (m->auth)
    sip__encode_json_request(&wb, SIP__MSG_AUTH, p->id, m->auth, strlen(m->auth));
  else
    sip__encode_info_request(&wb, p->id, (uint8_t)m->kind);
  sip_error_t *e = send_frame(c, p, &wb, m->shm_type == SIP__MSG_SHM_REGISTER ? m->fd : -1);
  if (e) {
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return e;
  }
  wait_done(&w);
  *json = w.json;
  return w.err;
}

sip_error_t *sip_client_info(sip_client_t *c, int kind, char **json) {
  *json = NULL;
  if (kind < 1 || kind > 3)
    return sip_error_new(SIP_INVALID_ARGUMENT, "info kind %d; expected 1..3", kind);
  return info_call(c, &(info_msg_t){.kind = kind}, json);
}

sip_error_t *sip_client_repository(sip_client_t *c, const char *request, char **json) {
  *json = NULL;
  if (!request) return sip_error_new(SIP_INVALID_ARGUMENT, "repository request is NULL");
  return info_call(c, &(info_msg_t){.repo = request}, json);
}

sip_error_t *sip_client_admin(sip_client_t *c, const char *request, char **json) {
  *json = NULL;
  if (!request) return sip_error_new(SIP_INVALID_ARGUMENT, "admin request is NULL");
  return info_call(c, &(info_msg_t){.admin = request}, json);
}

sip_error_t *sip_client_authenticate(sip_client_t *c, const char *token, char **json) {
  *json = NULL;
  if (!token || !*token) return sip_error_new(SIP_INVALID_ARGUMENT, "token is NULL or empty");
  char *copy = sip__strdup(token);
  if (!copy) return SIP__OOM();
  sip_error_t *e = info_call(c, &(info_msg_t){.auth = token}, json);
  pthread_mutex_lock(&c->wmu);
  char *old = c->token;
  c->token = e ? NULL : copy; /* kept only when the server took it */
  pthread_mutex_unlock(&c->wmu);
  wipe_free(old);
  if (e) wipe_free(copy);
  return e;
}

void sip_client_free_string(char *s) { sip__free(s); }

void sip_client_response_free(sip_client_response_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_outputs; i++) sip_tensor_free(r->outputs[i]);
  sip__free(r->outputs);
  sip__free(r);
}


/* ---- shared memory ---- */

typedef struct shm_mapping {
  void *base;
  size_t len;
  int fd;
} shm_mapping_t;

static void shm_mapping_release(void *ctx) {
  shm_mapping_t *m = ctx;
  munmap(m->base, m->len);
  close(m->fd);
  sip__free(m);
}

sip_error_t *sip_client_shm_create(sip_client_t *c, const char *name, size_t byte_size,
                                   sip_client_shm_t **out) {
  *out = NULL;
  if (!name || !*name || strlen(name) > 255)
    return sip_error_new(SIP_INVALID_ARGUMENT, "a shared memory region needs a name of 1 to 255 "
                         "bytes");
  if (!byte_size || byte_size > (size_t)INT64_MAX)
    return sip_error_new(SIP_INVALID_ARGUMENT, "shared memory region '%s': byte size %zu; "
                         "expected 1..2^63-1", name, byte_size);
  pthread_mutex_lock(&c->rmu);
  sip_client_shm_t *dup = c->regions;
  while (dup && strcmp(dup->name, name)) dup = dup->next;
  pthread_mutex_unlock(&c->rmu);
  if (dup)
    return sip_error_new(SIP_ALREADY_EXISTS, "shared memory region '%s' already exists on this "
                         "connection", name);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void *base = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)byte_size) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    base = mmap(NULL, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    if (fd >= 0) close(fd);
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "shared memory region '%s' of %zu bytes: %s",
                         name, byte_size, strerror(err));
  }
  shm_mapping_t *m = sip__malloc(sizeof *m);
  sip_client_shm_t *r = sip__calloc(1, sizeof *r);
  if (m) *m = (shm_mapping_t){base, byte_size, fd};
  if (r) {
    r->data = base;
    r->size = byte_size;
    r->fd = fd;
    r->name = sip__strdup(name);
  }
  if (r && m) r->map = sip_buf_wrap(base, byte_size, shm_mapping_release, m);
  else if (m) shm_mapping_release(m);
  else {
    munmap(base, byte_size);
    close(fd);
  }
  if (!r || !r->name || !r->map) {
    if (r) {
      sip_buf_unref(r->map);
      sip__free(r->name);
      sip__free(r);
    }
    return SIP__OOM();
  }
  char *json = NULL;
  sip_error_t *e = info_call(
      c, &(info_msg_t){.shm_type = SIP__MSG_SHM_REGISTER, .name = name, .byte_size = byte_size,
                       .fd = fd},
      &json);
  sip__free(json);
  if (e) {
    sip_buf_unref(r->map);
    sip__free(r->name);
    sip__free(r);
    return e;
  }
  pthread_mutex_lock(&c->rmu);
  r->next = c->regions;
  c->regions = r;
  pthread_mutex_unlock(&c->rmu);
  *out = r;
  return NULL;
}

void *sip_client_shm_data(const sip_client_shm_t *r) { return r->data; }
size_t sip_client_shm_size(const sip_client_shm_t *r) { return r->size; }

sip_error_t *sip_client_shm_destroy(sip_client_t *c, sip_client_shm_t *r) {
  if (!r) return NULL;
  pthread_mutex_lock(&c->rmu);
  sip_client_shm_t **pp = &c->regions;
  while (*pp && *pp != r) pp = &(*pp)->next;
  if (*pp) *pp = r->next;
  pthread_mutex_unlock(&c->rmu);
  char *json = NULL;
  sip_error_t *e =
      info_call(c, &(info_msg_t){.shm_type = SIP__MSG_SHM_UNREGISTER, .name = r->name}, &json);
  sip__free(json);
  sip_buf_unref(r->map);
  sip__free(r->name);
  sip__free(r);
  return e;
}

sip_error_t *sip_client_shm_status(sip_client_t *c, const char *name, char **json) {
  *json = NULL;
  return info_call(c, &(info_msg_t){.shm_type = SIP__MSG_SHM_STATUS, .name = name ? name : ""},
                   json);
}

const sip_tensor_t *sip_client_response_output(const sip_client_response_t *r, const char *name) {
  for (size_t i = 0; r && i < r->n_outputs; i++)
    if (strcmp(r->outputs[i]->name, name) == 0) return r->outputs[i];
  return NULL;
}

/* ---- engine events (SUBSCRIBE, EVENT) ---- */

struct sip_client_sub {
  int fd;
  pthread_t thread;
  atomic_int stop;
  sip_client_event_fn fn;
  void *user;
};

/* One frame into *payload (owned, NUL-terminated); 0, or -1 when the
 * connection ended or sent something that is not a frame. */
static int read_frame(int fd, sip__frame_header_t *h, char **payload) {
  uint8_t hdr[SIP__FRAME_HEADER_SIZE];
  *payload = NULL;
  if (read_full(fd, hdr, sizeof hdr) != 0) return -1;
  sip_error_t *e = sip__frame_header_decode(hdr, UINT32_MAX, h);
  if (e) {
    sip_error_free(e);
    return -1;
  }
  char *p = sip__malloc((size_t)h->length + 1);
  if (!p || read_full(fd, p, h->length) != 0) {
    sip__free(p);
    return -1;
  }
  p[h->length] = '\0';
  *payload = p;
  return 0;
}

/* Sends one frame and reads its INFO_RESPONSE (or ERROR). */
static sip_error_t *exchange(int fd, sip__wbuf_t *w, const char *what) {
  int bad = w->oom;
  for (size_t off = 0; !bad && off < w->len;) {
    ssize_t n = send(fd, w->data + off, w->len - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) bad = 1;
    else off += (size_t)n;
  }
  sip__wbuf_free(w);
  if (bad) return sip_error_new(SIP_UNAVAILABLE, "%s: the connection failed", what);
  sip__frame_header_t h;
  char *payload;
  if (read_frame(fd, &h, &payload))
    return sip_error_new(SIP_UNAVAILABLE, "%s: the server closed the connection", what);
  uint32_t code = SIP_INTERNAL;
  const char *txt = NULL;
  size_t n = 0;
  sip_error_t *e = NULL;
  if (h.type != SIP__MSG_INFO_RESPONSE && h.type != SIP__MSG_ERROR)
    e = sip_error_new(SIP_INTERNAL, "%s answered by frame type %u", what, (unsigned)h.type);
  else if ((e = sip__decode_code_text((const uint8_t *)payload, h.length,
                                      h.type == SIP__MSG_ERROR, &code, &txt, &n)))
    ;
  else if (code != SIP_OK)
    e = h.type == SIP__MSG_ERROR ? sip_error_new((sip_code_t)code, "%.*s", (int)n, txt)
                                 : error_from_text((sip_code_t)code, txt, n);
  sip__free(payload);
  return e;
}

static void *sub_main(void *arg) {
  sip_client_sub_t *s = arg;
  sip__frame_header_t h;
  char *payload;
  while (!atomic_load(&s->stop) && read_frame(s->fd, &h, &payload) == 0) {
    if (h.type == SIP__MSG_EVENT && !atomic_load(&s->stop)) s->fn(payload, s->user);
    sip__free(payload);
    if (h.type == SIP__MSG_ERROR) break;
  }
  if (!atomic_load(&s->stop)) s->fn(NULL, s->user); /* the stream ended by itself */
  return NULL;
}

sip_error_t *sip_client_subscribe(const char *endpoint, const char *pool, uint32_t buffer,
                                  const char *token, sip_client_event_fn fn, void *user,
                                  sip_client_sub_t **out) {
  *out = NULL;
  if (!endpoint || !fn)
    return sip_error_new(SIP_INVALID_ARGUMENT, "subscribe: an endpoint and a callback are needed");
  if (buffer > SIP__MAX_EVENT_BUFFER)
    return sip_error_new(SIP_INVALID_ARGUMENT, "subscribe: buffer %u; expected at most %u events",
                         buffer, (unsigned)SIP__MAX_EVENT_BUFFER);
  int fd = -1;
  sip_error_t *e = dial(endpoint, &fd);
  if (e) return e;
  sip__wbuf_t w = {0};
  if (token && *token) {
    sip__encode_json_request(&w, SIP__MSG_AUTH, 1, token, strlen(token));
    e = exchange(fd, &w, "AUTH");
  }
  if (!e) {
    sip__encode_subscribe(&w, 2, pool ? pool : "", buffer);
    e = exchange(fd, &w, "SUBSCRIBE");
  }
  sip_client_sub_t *s = e ? NULL : sip__calloc(1, sizeof *s);
  if (!e && !s) e = SIP__OOM();
  if (!e) {
    s->fd = fd;
    s->fn = fn;
    s->user = user;
    if (pthread_create(&s->thread, NULL, sub_main, s) != 0) {
      sip__free(s);
      e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "subscribe: cannot start the reader thread");
    }
  }
  if (e) {
    close(fd);
    return e;
  }
  *out = s;
  return NULL;
}

void sip_client_unsubscribe(sip_client_sub_t *s) {
  if (!s) return;
  atomic_store(&s->stop, 1);
  shutdown(s->fd, SHUT_RDWR); /* wakes the reader */
  pthread_join(s->thread, NULL);
  close(s->fd);
  sip__free(s);
}
