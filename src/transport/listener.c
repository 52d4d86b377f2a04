/* sip — native-protocol transports: unix-socket and TCP listeners on one
 * epoll event-loop thread. The loop never blocks on inference: requests go
 * to the pools asynchronously. An answer is written by the engine thread
 * that completed it, straight to the socket when nothing is queued before
 * it (no extra thread hop on the hot path); what the socket does not take
 * at once is queued and flushed by the loop on EPOLLOUT. Connections are
 * named by id (generation << 32 | slot) and reference-counted, so an answer
 * for a connection that closed meanwhile is dropped, and a descriptor is
 * closed only when no thread can still write to it. */
#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config/config.h"
#include "core/core.h"
#include "transport/frame.h"
#include "transport/listener.h"

#define MAX_LISTENERS 16
enum { TAG_LISTENER = 1, TAG_CONN = 2, TAG_WAKE = 3 };
#define TAG(kind, v) (((uint64_t)(kind) << 56) | (uint64_t)(v))

typedef struct chunk {
  struct chunk *next;
  uint8_t *data;
  size_t len, off;
} chunk_t;

typedef struct conn {
  int fd;
  atomic_int refs;     /* the loop's, plus writers' in flight */
  pthread_mutex_t wmu; /* output queue, epollout, dead */
  int dead;            /* closed by the loop: writers drop their answers */
  int is_tcp;
  sip_cancel_token_t *cancel; /* carried by every request of this connection */
  uint32_t gen;
  uint32_t slot;
  uint8_t hdr[SIP_FRAME_HEADER_SIZE];
  size_t hdr_got;
  sip_frame_header_t h;
  sip_buf_t *payload; /* non-NULL while reading a payload */
  size_t got;
  chunk_t *out_head, *out_tail;
  int epollout;
  atomic_int closing; /* close once the output is flushed; read nothing more */
} conn_t;

typedef struct listener {
  int fd;
  int is_tcp;
  char *address;     /* as reported */
  char *unlink_path; /* unix socket file to remove on stop */
} listener_t;

typedef struct sip_listener_set sip_listener_set_t;
struct sip_listener_set {
  sip_server_t *srv;
  size_t max_frame;
  int epfd, wakefd;
  pthread_t thread;
  int thread_started;
  listener_t ls[MAX_LISTENERS];
  size_t n_ls;
  conn_t **slots; /* changed by the loop under slots_mu; writers look up under it */
  uint32_t n_slots;
  uint32_t next_gen;
  pthread_mutex_t slots_mu;
  atomic_int stop;
  atomic_long open_conns[2]; /* [0] unix, [1] tcp */
};

typedef struct pending {
  sip_listener_set_t *ls;
  uint64_t conn_id;
} pending_t;

/* ---- endpoints ---- */

static sip_error_t *open_unix(const char *path, listener_t *l) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path)
    return sip_error_new(SIP_INVALID_ARGUMENT, "unix socket path %s is longer than %zu bytes",
                         path, sizeof sa.sun_path - 1);
  strcpy(sa.sun_path, path);
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return sip_error_new(SIP_UNAVAILABLE, "cannot listen on %s: a file that is not a socket "
                                            "is in the way",
                           path);
    /* A socket file: in use by a live server, or left by a dead one. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (probe >= 0) close(probe);
    if (live)
      return sip_error_new(SIP_UNAVAILABLE, "cannot listen on %s: another server is listening "
                                            "there",
                           path);
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

static sip_error_t *open_tcp(const char *hostport, listener_t *l) {
  char host[256];
  const char *colon = strrchr(hostport, ':');
  if (!colon || (size_t)(colon - hostport) >= sizeof host)
    return sip_error_new(SIP_INVALID_ARGUMENT, "tcp endpoint '%s'; expected tcp://host:port",
                         hostport);
  memcpy(host, hostport, (size_t)(colon - hostport));
  host[colon - hostport] = '\0';
  char *h = host;
  if (h[0] == '[') { /* [::1] */
    h++;
    char *e = strchr(h, ']');
    if (e) *e = '\0';
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(h[0] ? h : NULL, colon + 1, &hints, &res);
  if (rc != 0)
    return sip_error_new(SIP_UNAVAILABLE, "cannot resolve tcp endpoint %s: %s", hostport,
                         gai_strerror(rc));
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
  if (fd < 0)
    return sip_error_new(SIP_UNAVAILABLE, "cannot listen on tcp://%s: %s", hostport,
                         strerror(err));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
  l->fd = fd;
  l->is_tcp = 1;
  l->address = sip__asprintf("tcp://%s:%d", host, port);
  return NULL;
}

static sip_error_t *open_endpoint(const char *ep, listener_t *l) {
  l->fd = -1;
  if (strncmp(ep, "ipc://", 6) == 0) return open_unix(ep + 6, l);
  if (strncmp(ep, "unix://", 7) == 0) return open_unix(ep + 7, l);
  if (strncmp(ep, "tcp://", 6) == 0) return open_tcp(ep + 6, l);
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "endpoint '%s'; expected ipc:///path, unix:///path or tcp://host:port", ep);
}

/* ---- connections ---- */

static uint64_t conn_id(const conn_t *c) { return (uint64_t)c->gen << 32 | c->slot; }

/* A referenced connection by id, or NULL when it is gone. Any thread. */
static conn_t *conn_acquire(sip_listener_set_t *ls, uint64_t id) {
  uint32_t slot = (uint32_t)id, gen = (uint32_t)(id >> 32);
  pthread_mutex_lock(&ls->slots_mu);
  conn_t *c = slot < ls->n_slots ? ls->slots[slot] : NULL;
  if (c && c->gen == gen)
    atomic_fetch_add(&c->refs, 1);
  else
    c = NULL;
  pthread_mutex_unlock(&ls->slots_mu);
  return c;
}

static void free_chunks(conn_t *c) {
  while (c->out_head) {
    chunk_t *k = c->out_head;
    c->out_head = k->next;
    sip__free(k->data);
    sip__free(k);
  }
  c->out_tail = NULL;
}

static void conn_unref(conn_t *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  close(c->fd);
  free_chunks(c);
  pthread_mutex_destroy(&c->wmu);
  sip__free(c);
}

/* Loop only. */
static void conn_close(sip_listener_set_t *ls, conn_t *c) {
  /* Nobody will read the answers: queued requests of this client are
   * cancelled instead of run. */
  if (c->cancel && !atomic_load(&ls->stop)) sip_server_cancel(ls->srv, c->cancel);
  sip_cancel_token_free(c->cancel);
  c->cancel = NULL;
  pthread_mutex_lock(&ls->slots_mu);
  ls->slots[c->slot] = NULL;
  pthread_mutex_unlock(&ls->slots_mu);
  pthread_mutex_lock(&c->wmu);
  c->dead = 1;
  free_chunks(c);
  pthread_mutex_unlock(&c->wmu);
  epoll_ctl(ls->epfd, EPOLL_CTL_DEL, c->fd, NULL);
  sip_buf_unref(c->payload);
  c->payload = NULL;
  atomic_fetch_sub(&ls->open_conns[c->is_tcp], 1);
  conn_unref(c); /* the descriptor closes when the last writer lets go */
}

/* Caller holds c->wmu. */
static void set_epollout(sip_listener_set_t *ls, conn_t *c, int on) {
  if (c->epollout == on) return;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u),
                           .data.u64 = TAG(TAG_CONN, c->slot)};
  epoll_ctl(ls->epfd, EPOLL_CTL_MOD, c->fd, &ev);
  c->epollout = on;
}

/* Sends queued chunks until done or the socket is full. Caller holds
 * c->wmu. Returns -1 on a socket error. */
static int send_queued(sip_listener_set_t *ls, conn_t *c) {
  while (c->out_head) {
    chunk_t *k = c->out_head;
    ssize_t n = send(c->fd, k->data + k->off, k->len - k->off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        set_epollout(ls, c, 1);
        return 0;
      }
      return -1;
    }
    k->off += (size_t)n;
    if (k->off == k->len) {
      c->out_head = k->next;
      if (!c->out_head) c->out_tail = NULL;
      sip__free(k->data);
      sip__free(k);
    }
  }
  set_epollout(ls, c, 0);
  return 0;
}

/* Loop only: writes what it can. Returns -1 when the connection was closed. */
static int conn_flush(sip_listener_set_t *ls, conn_t *c) {
  pthread_mutex_lock(&c->wmu);
  int rc = send_queued(ls, c);
  int done = !c->out_head;
  pthread_mutex_unlock(&c->wmu);
  if (rc < 0 || (done && atomic_load(&c->closing))) {
    conn_close(ls, c);
    return -1;
  }
  return 0;
}

/* Queues bytes (ownership taken) behind what is already queued. Caller
 * holds c->wmu. */
static void queue_locked(sip_listener_set_t *ls, conn_t *c, uint8_t *data, size_t len) {
  chunk_t *k = sip__calloc(1, sizeof *k);
  if (!k) {
    sip__free(data);
    /* Cannot answer: better to drop the connection than hang the client. */
    atomic_store(&c->closing, 1);
    set_epollout(ls, c, 1); /* the loop closes it on the next EPOLLOUT */
    return;
  }
  k->data = data;
  k->len = len;
  if (c->out_tail)
    c->out_tail->next = k;
  else
    c->out_head = k;
  c->out_tail = k;
}

/* Loop only: queues an encoded frame; conn_flush sends it. */
static void conn_queue_wbuf(sip_listener_set_t *ls, conn_t *c, sip_wbuf_t *w) {
  if (w->oom) {
    sip__wbuf_free(w);
    atomic_store(&c->closing, 1);
    return;
  }
  pthread_mutex_lock(&c->wmu);
  queue_locked(ls, c, w->data, w->len);
  pthread_mutex_unlock(&c->wmu);
  memset(w, 0, sizeof *w);
}

/* Protocol violation: answer with an ERROR frame, then close. */
static void conn_error(sip_listener_set_t *ls, conn_t *c, uint64_t request_id, sip_error_t *e) {
  sip__log(SIP__LOG_WARN, "closing connection after a malformed frame", "code=%s reason=\"%s\"",
           sip_code_name(sip_error_code(e)), sip_error_message(e));
  sip_wbuf_t w = {0};
  sip__encode_error(&w, request_id, sip_error_code(e), sip_error_message(e));
  sip_error_free(e);
  conn_queue_wbuf(ls, c, &w);
  atomic_store(&c->closing, 1);
}

/* ---- answers (engine threads) ---- */

/* Writes an answer from the engine thread that produced it: directly when
 * nothing is queued before it, else behind the queue (the loop flushes). */
static void write_answer(sip_listener_set_t *ls, uint64_t id, sip_wbuf_t *w) {
  conn_t *c = w->oom ? NULL : conn_acquire(ls, id);
  if (!c) {
    sip__wbuf_free(w);
    return;
  }
  pthread_mutex_lock(&c->wmu);
  /* After an ERROR frame nothing more is sent: the connection is ending. */
  if (c->dead || atomic_load(&c->closing)) {
    sip__wbuf_free(w);
  } else {
    queue_locked(ls, c, w->data, w->len);
    memset(w, 0, sizeof *w);
    /* With EPOLLOUT armed the loop owns flushing; otherwise send now. */
    if (!c->epollout && send_queued(ls, c) < 0) {
      free_chunks(c);
      atomic_store(&c->closing, 1);
      set_epollout(ls, c, 1); /* the loop sees the error and closes */
    }
  }
  pthread_mutex_unlock(&c->wmu);
  conn_unref(c);
}

static void on_done(sip_response_t *resp, void *user) {
  pending_t *pd = user;
  sip_wbuf_t w = {0};
  if (!resp) {
    sip__encode_infer_response(&w, 0, SIP_RESOURCE_EXHAUSTED, "out of memory", 0, 0, 0, NULL, 0);
  } else {
    uint64_t queue_us, compute_us, total_us;
    size_t n_out;
    sip_response_timings(resp, &queue_us, &compute_us, &total_us);
    const sip_tensor_t *const *outs = sip_response_outputs(resp, &n_out);
    sip__encode_infer_response(&w, sip_response_request_id(resp), sip_response_code(resp),
                               sip_response_message(resp), queue_us, compute_us, total_us, outs,
                               n_out);
    if (w.oom) {
      sip__wbuf_free(&w);
      sip__encode_infer_response(&w, sip_response_request_id(resp), SIP_RESOURCE_EXHAUSTED,
                                 "out of memory encoding the response", 0, 0, 0, NULL, 0);
    }
    sip_response_free(resp);
  }
  write_answer(pd->ls, pd->conn_id, &w);
  sip__free(pd);
}

/* ---- requests ---- */

/* A request's parameters (a JSON object): today only pipeline_config. A
 * bad one is the request's error, not the connection's. */
static sip_error_t *apply_parameters(sip_request_t *r, const char *text) {
  json_error_t je;
  json_t *root = json_loads(text, 0, &je);
  sip_error_t *e = NULL;
  if (!json_is_object(root)) {
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "request parameters are not a JSON object (%s); expected "
                      "{\"pipeline_config\": {...}}",
                      root ? "another JSON value" : je.text);
  } else {
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
      if (strcmp(key, "pipeline_config")) {
        e = sip_error_new(SIP_INVALID_ARGUMENT,
                          "unknown request parameter '%s'; expected pipeline_config", key);
        break;
      }
      char *pc = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
      e = pc ? sip_request_set_pipeline_config(r, pc) : SIP_OOM();
      free(pc);
    }
  }
  json_decref(root);
  return e;
}

static void handle_infer(sip_listener_set_t *ls, conn_t *c) {
  sip_wire_request_t wr;
  const uint8_t *payload = sip_buf_data(c->payload);
  size_t len = c->h.length;
  uint32_t max_batch = 0;
  uint8_t padding = 0;
  int batch = c->h.type == SIP_MSG_BATCH_INFER_REQUEST;
  sip_error_t *e = batch ? sip__decode_batch_prefix(payload, len, &max_batch, &padding) : NULL;
  if (batch && !e) {
    payload += SIP_BATCH_PREFIX_SIZE;
    len -= SIP_BATCH_PREFIX_SIZE;
  }
  if (!e) e = sip__decode_infer_request(payload, len, c->payload, &wr);
  if (e) {
    conn_error(ls, c, c->h.request_id, e);
    return;
  }
  sip_request_t *r = sip_request_new(wr.pool);
  pending_t *pd = sip__malloc(sizeof *pd);
  if (!r || !pd) {
    sip_request_free(r);
    sip__free(pd);
    sip__wire_request_clear(&wr);
    conn_error(ls, c, c->h.request_id, SIP_OOM());
    return;
  }
  sip_request_set_id(r, c->h.request_id);
  sip_request_set_cancel_token(r, c->cancel);
  sip_request_set_timeout_ms(r, wr.timeout_ms);
  /* The codec checked the tensors; a new request has no inputs or outputs
   * yet, so both adopt. */
  sip_error_free(sip_request_adopt_inputs(r, wr.inputs, wr.n_inputs));
  sip_error_free(sip_request_adopt_outputs(r, wr.outputs, wr.n_outputs));
  e = sip_request_set_priority(r, wr.priority);
  wr.inputs = NULL;
  wr.n_inputs = 0;
  wr.outputs = NULL;
  wr.n_outputs = 0;
  if (!e && wr.parameters) e = apply_parameters(r, wr.parameters);
  sip__wire_request_clear(&wr);
  pd->ls = ls;
  pd->conn_id = conn_id(c);
  uint64_t rid = c->h.request_id;
  if (e) sip_request_free(r);
  else e = batch ? sip_server_infer_batch(ls->srv, r, (int)(max_batch > INT32_MAX ? INT32_MAX : max_batch),
                                     padding, on_done, pd)
            : sip_server_infer_async(ls->srv, r, on_done, pd);
  if (e) {
    sip__free(pd);
    sip_wbuf_t w = {0};
    sip__encode_infer_response(&w, rid, sip_error_code(e), sip_error_message(e), 0, 0, 0, NULL,
                               0);
    sip_error_free(e);
    conn_queue_wbuf(ls, c, &w);
  }
}

static void handle_info(sip_listener_set_t *ls, conn_t *c) {
  const uint8_t *p = sip_buf_data(c->payload);
  if (c->h.length != 1 || p[0] < SIP_INFO_READY || p[0] > SIP_INFO_STATUS) {
    conn_error(ls, c, c->h.request_id,
               sip_error_new(SIP_INVALID_ARGUMENT,
                             "INFO_REQUEST payload must be one byte 1 (ready), 2 (pools) or 3 "
                             "(status); got %u bytes",
                             c->h.length));
    return;
  }
  char *json = sip_server_info_json(ls->srv, p[0]);
  sip_wbuf_t w = {0};
  if (json)
    sip__encode_info_response(&w, c->h.request_id, SIP_OK, json, strlen(json));
  else
    sip__encode_info_response(&w, c->h.request_id, SIP_RESOURCE_EXHAUSTED, "{}", 2);
  sip_free(json);
  conn_queue_wbuf(ls, c, &w);
}

/* ---- repository requests (REPO_REQUEST, answered by INFO_RESPONSE) ---- */

typedef struct repo_pending {
  sip_listener_set_t *ls;
  uint64_t conn_id, request_id;
  int unload;
  char *model;
} repo_pending_t;

/* The INFO_RESPONSE of a repository request: `ok` (taken) on success, else
 * {"error": message} with the error's code. */
static void encode_repo_answer(sip_wbuf_t *w, uint64_t rid, sip_error_t *e, json_t *ok) {
  json_t *body = e ? json_pack("{s:s}", "error", sip_error_message(e)) : ok;
  char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (txt)
    sip__encode_info_response(w, rid, e ? sip_error_code(e) : SIP_OK, txt, strlen(txt));
  else
    sip__encode_info_response(w, rid, SIP_RESOURCE_EXHAUSTED, "{\"error\":\"out of memory\"}",
                              strlen("{\"error\":\"out of memory\"}"));
  free(txt); /* jansson's allocation */
}

/* A load or unload finished (the loader thread): answer like an engine
 * completion, straight to the connection if it is still there. */
static void on_repo_done(sip_error_t *e, void *user) {
  repo_pending_t *rp = user;
  sip_wbuf_t w = {0};
  encode_repo_answer(&w, rp->request_id, e,
                     e ? NULL
                       : json_pack("{s:s,s:s,s:b}", "model", rp->model, "action",
                                   rp->unload ? "unload" : "load", "ok", 1));
  sip_error_free(e);
  write_answer(rp->ls, rp->conn_id, &w);
  sip__free(rp->model);
  sip__free(rp);
}

static void handle_repo(sip_listener_set_t *ls, conn_t *c) {
  json_error_t je;
  uint64_t rid = c->h.request_id;
  json_t *req = json_loadb((const char *)sip_buf_data(c->payload), c->h.length,
                           JSON_REJECT_DUPLICATES, &je);
  const char *action = json_string_value(json_object_get(req, "action"));
  json_t *jm = json_object_get(req, "model");
  const char *model = json_string_value(jm);
  sip_error_t *e = NULL;
  if (!req)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "REPO_REQUEST payload is not JSON: %s (offset %d)",
                      je.text, je.position);
  else if (!json_is_object(req) || !action ||
           (strcmp(action, "index") && strcmp(action, "load") && strcmp(action, "unload")))
    e = sip_error_new(SIP_INVALID_ARGUMENT,
                      "REPO_REQUEST: expected {\"action\": \"index\" | \"load\" | \"unload\", "
                      "\"model\": NAME}");
  else if (strcmp(action, "index") && !model)
    e = sip_error_new(SIP_INVALID_ARGUMENT, "REPO_REQUEST %s: \"model\" (a string) is missing",
                      action);
  else if (model && strlen(model) != json_string_length(jm))
    e = sip_error_new(SIP_INVALID_ARGUMENT, "REPO_REQUEST %s: the model name contains a NUL byte",
                      action);
  sip_wbuf_t w = {0};
  if (!e && !strcmp(action, "index")) {
    json_t *ready = json_object_get(req, "ready");
    char *txt = sip_server_repository_index(ls->srv, json_is_true(ready));
    if (txt)
      sip__encode_info_response(&w, rid, SIP_OK, txt, strlen(txt));
    else
      encode_repo_answer(&w, rid, e = SIP_OOM(), NULL);
    sip_free(txt);
  } else if (!e) {
    /* Loads take long: the loader thread answers when done. */
    repo_pending_t *rp = sip__calloc(1, sizeof *rp);
    if (!rp || !(rp->model = sip__strdup(model))) {
      e = SIP_OOM();
      if (rp) sip__free(rp);
    } else {
      rp->ls = ls;
      rp->conn_id = conn_id(c);
      rp->request_id = rid;
      rp->unload = !strcmp(action, "unload");
      e = rp->unload ? sip_server_unload_model_async(ls->srv, model, on_repo_done, rp)
                     : sip_server_load_model_async(ls->srv, model, on_repo_done, rp);
      if (e) {
        sip__free(rp->model);
        sip__free(rp);
      }
    }
    if (e) encode_repo_answer(&w, rid, e, NULL);
  } else {
    encode_repo_answer(&w, rid, e, NULL);
  }
  sip_error_free(e);
  json_decref(req);
  if (w.data || w.oom) conn_queue_wbuf(ls, c, &w);
}

static void handle_frame(sip_listener_set_t *ls, conn_t *c) {
  switch (c->h.type) {
  case SIP_MSG_INFER_REQUEST:
  case SIP_MSG_BATCH_INFER_REQUEST:
    handle_infer(ls, c);
    break;
  case SIP_MSG_INFO_REQUEST:
    handle_info(ls, c);
    break;
  case SIP_MSG_REPO_REQUEST:
    handle_repo(ls, c);
    break;
  default:
    conn_error(ls, c, c->h.request_id,
               sip_error_new(SIP_INVALID_ARGUMENT,
                             "message type %u is sent by servers, not clients; expected "
                             "INFER_REQUEST (1), INFO_REQUEST (3), BATCH_INFER_REQUEST (6) or "
                             "REPO_REQUEST (7)",
                             c->h.type));
  }
}

static void release_payload(void *p) { sip__free(p); }

/* Reads everything available. Returns -1 when the connection was closed. */
static int conn_read(sip_listener_set_t *ls, conn_t *c) {
  for (;;) {
    if (c->closing) return 0;
    uint8_t *dst;
    size_t want;
    if (!c->payload) {
      dst = c->hdr + c->hdr_got;
      want = SIP_FRAME_HEADER_SIZE - c->hdr_got;
    } else {
      dst = (uint8_t *)sip_buf_data(c->payload) + c->got;
      want = c->h.length - c->got;
    }
    ssize_t n = want ? recv(c->fd, dst, want, 0) : 0;
    if (want && n == 0) { /* peer closed; a partial frame is simply dropped */
      conn_close(ls, c);
      return -1;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      conn_close(ls, c);
      return -1;
    }
    if (!c->payload) {
      c->hdr_got += (size_t)n;
      if (c->hdr_got < SIP_FRAME_HEADER_SIZE) continue;
      sip_error_t *e = sip__frame_header_decode(c->hdr, ls->max_frame, &c->h);
      if (e) {
        uint64_t rid = 0;
        for (int i = 7; i >= 0; i--) rid = rid << 8 | c->hdr[16 + i];
        conn_error(ls, c, rid, e);
        return conn_flush(ls, c);
      }
      /* malloc, not calloc: every byte is about to be overwritten. */
      void *mem = sip__malloc(c->h.length ? c->h.length : 1);
      c->payload = mem ? sip_buf_wrap(mem, c->h.length, release_payload, mem) : NULL;
      if (!c->payload) {
        conn_error(ls, c, c->h.request_id,
                   sip_error_new(SIP_RESOURCE_EXHAUSTED, "out of memory for a %u-byte frame",
                                 c->h.length));
        return conn_flush(ls, c);
      }
      c->got = 0;
    } else {
      c->got += (size_t)n;
    }
    if (c->payload && c->got == c->h.length) {
      handle_frame(ls, c);
      sip_buf_unref(c->payload); /* tensors of queued requests keep their own references */
      c->payload = NULL;
      c->hdr_got = 0;
      if (conn_flush(ls, c) < 0) return -1;
    }
  }
}

static void do_accept(sip_listener_set_t *ls, listener_t *l) {
  for (;;) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        sip__log(SIP__LOG_WARN, "accept failed", "endpoint=%s error=\"%s\"", l->address,
                 strerror(errno));
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* harmless on unix sockets */
    uint32_t slot = 0;
    while (slot < ls->n_slots && ls->slots[slot]) slot++;
    if (slot == ls->n_slots) {
      uint32_t n = ls->n_slots ? ls->n_slots * 2 : 64;
      pthread_mutex_lock(&ls->slots_mu); /* writers read the table */
      conn_t **v = sip__reallocarray(ls->slots, n, sizeof *v);
      if (v) {
        memset(v + ls->n_slots, 0, (n - ls->n_slots) * sizeof *v);
        ls->slots = v;
        ls->n_slots = n;
      }
      pthread_mutex_unlock(&ls->slots_mu);
      if (!v) {
        close(fd);
        continue;
      }
    }
    conn_t *c = sip__calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->wmu, NULL);
    c->fd = fd;
    c->is_tcp = l->is_tcp;
    c->cancel = sip_cancel_token_new(); /* NULL (no cancel on close) only when out of memory */
    c->slot = slot;
    c->gen = ++ls->next_gen;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = TAG(TAG_CONN, slot)};
    if (epoll_ctl(ls->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      sip_cancel_token_free(c->cancel);
      conn_unref(c);
      continue;
    }
    pthread_mutex_lock(&ls->slots_mu);
    ls->slots[slot] = c;
    pthread_mutex_unlock(&ls->slots_mu);
    atomic_fetch_add(&ls->open_conns[c->is_tcp], 1);
  }
}

static void *loop_main(void *arg) {
  sip_listener_set_t *ls = arg;
  struct epoll_event evs[64];
  while (!atomic_load(&ls->stop)) {
    int n = epoll_wait(ls->epfd, evs, 64, -1);
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64 >> 56, v = evs[i].data.u64 & ((1ull << 56) - 1);
      if (tag == TAG_WAKE) {
        uint64_t v;
        ssize_t rc = read(ls->wakefd, &v, sizeof v); /* the stop signal */
        (void)rc;
      } else if (tag == TAG_LISTENER) {
        do_accept(ls, &ls->ls[v]);
      } else if (tag == TAG_CONN && v < ls->n_slots && ls->slots[v]) {
        conn_t *c = ls->slots[v];
        if ((evs[i].events & EPOLLOUT) && conn_flush(ls, c) < 0) continue;
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          if (c->closing) {
            /* Nothing more is read; a hang-up ends it. */
            if (evs[i].events & (EPOLLHUP | EPOLLERR)) conn_close(ls, c);
            else {
              char sink[4096];
              ssize_t r = recv(c->fd, sink, sizeof sink, 0);
              if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) conn_close(ls, c);
            }
          } else {
            conn_read(ls, c);
          }
        }
      }
    }
  }
  /* Pools are drained before stop: every answer is written or queued. */
  for (uint32_t i = 0; i < ls->n_slots; i++) {
    conn_t *c = ls->slots[i];
    if (!c) continue;
    /* Give a slow reader a moment to take the last answers, not forever. */
    pthread_mutex_lock(&c->wmu);
    uint64_t until = sip__now_us() + 1000000;
    while (c->out_head && sip__now_us() < until && send_queued(ls, c) == 0)
      if (c->out_head) poll(&(struct pollfd){.fd = c->fd, .events = POLLOUT}, 1, 100);
    pthread_mutex_unlock(&c->wmu);
    conn_close(ls, c);
  }
  return NULL;
}

/* ---- public (internal) API ---- */

static void listeners_stop(void *state);

static sip_error_t *listeners_start(sip_server_t *srv, const void *options, void **out) {
  const sip_config_t *cfg = options;
  char **endpoints = cfg->endpoints;
  size_t n = cfg->n_endpoints;
  if (n > MAX_LISTENERS)
    return sip_error_new(SIP_INVALID_ARGUMENT, "%zu endpoints; at most %d are supported", n,
                         MAX_LISTENERS);
  sip_listener_set_t *ls = sip__calloc(1, sizeof *ls);
  if (!ls) return SIP_OOM();
  ls->srv = srv;
  ls->max_frame = cfg->max_frame_bytes;
  ls->epfd = epoll_create1(EPOLL_CLOEXEC);
  ls->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  pthread_mutex_init(&ls->slots_mu, NULL);
  sip_error_t *e = NULL;
  if (ls->epfd < 0 || ls->wakefd < 0)
    e = sip_error_new(SIP_UNAVAILABLE, "epoll/eventfd: %s", strerror(errno));
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG(TAG_WAKE, 0)};
  if (!e && epoll_ctl(ls->epfd, EPOLL_CTL_ADD, ls->wakefd, &ev) != 0)
    e = sip_error_new(SIP_UNAVAILABLE, "epoll_ctl: %s", strerror(errno));
  for (size_t i = 0; !e && i < n; i++) {
    e = open_endpoint(endpoints[i], &ls->ls[i]);
    if (e) break;
    ls->n_ls = i + 1;
    if (!ls->ls[i].address) {
      e = SIP_OOM();
      break;
    }
    ev.events = EPOLLIN;
    ev.data.u64 = TAG(TAG_LISTENER, i);
    if (epoll_ctl(ls->epfd, EPOLL_CTL_ADD, ls->ls[i].fd, &ev) != 0)
      e = sip_error_new(SIP_UNAVAILABLE, "epoll_ctl: %s", strerror(errno));
  }
  if (!e && pthread_create(&ls->thread, NULL, loop_main, ls) != 0)
    e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start the transport thread");
  if (e) {
    listeners_stop(ls);
    return e;
  }
  ls->thread_started = 1;
  for (size_t i = 0; i < ls->n_ls; i++)
    sip__log(SIP__LOG_INFO, "listening", "endpoint=%s", ls->ls[i].address);
  *out = ls;
  return NULL;
}

static void listeners_stop(void *state) {
  sip_listener_set_t *ls = state;
  if (!ls) return;
  if (ls->thread_started) {
    atomic_store(&ls->stop, 1);
    uint64_t one = 1;
    ssize_t rc = write(ls->wakefd, &one, sizeof one);
    (void)rc;
    pthread_join(ls->thread, NULL);
  }
  for (size_t i = 0; i < ls->n_ls; i++) {
    if (ls->ls[i].fd >= 0) close(ls->ls[i].fd);
    if (ls->ls[i].unlink_path) unlink(ls->ls[i].unlink_path);
    sip__free(ls->ls[i].unlink_path);
    sip__free(ls->ls[i].address);
  }
  if (!ls->thread_started) { /* never ran: free what may be half-set */
    for (uint32_t i = 0; i < ls->n_slots; i++)
      if (ls->slots[i]) conn_close(ls, ls->slots[i]);
  }
  sip__free(ls->slots);
  if (ls->epfd >= 0) close(ls->epfd);
  if (ls->wakefd >= 0) close(ls->wakefd);
  pthread_mutex_destroy(&ls->slots_mu);
  sip__free(ls);
}

static size_t listeners_count(void *state) { return ((sip_listener_set_t *)state)->n_ls; }

static void listeners_connections(void *state, sip_frontend_count_fn emit, void *ctx) {
  sip_listener_set_t *ls = state;
  emit(ctx, "unix", atomic_load(&ls->open_conns[0]));
  emit(ctx, "tcp", atomic_load(&ls->open_conns[1]));
}

static const char *listeners_address(void *state, size_t i) {
  sip_listener_set_t *ls = state;
  return i < ls->n_ls ? ls->ls[i].address : NULL;
}

const sip_frontend_vtable_t sip__frontend_native = {
    .name = "native",
    .start = listeners_start,
    .stop = listeners_stop,
    .address_count = listeners_count,
    .address = listeners_address,
    .connections = listeners_connections,
};
