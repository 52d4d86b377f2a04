/* sip — native-protocol front-end: unix-socket and TCP listeners on one
 * epoll event-loop thread (accepting, reading frames, the lifecycle; the
 * endpoints are opened by endpoint.c, messages handled by handlers.c,
 * answers written by conn.c). The loop never blocks on inference: requests go
 * to the pools asynchronously. An answer is written by the engine thread
 * that completed it, straight to the socket when nothing is queued before
 * it (no extra thread hop on the hot path); what the socket does not take
 * at once is queued and flushed by the loop on EPOLLOUT. Connections are
 * named by id (generation << 32 | slot) and reference-counted, so an answer
 * for a connection that closed meanwhile is dropped, and a descriptor is
 * closed only when no thread can still write to it. */
#include <errno.h>
#include <fcntl.h>
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
#include <unistd.h>

#include "config/config.h"
#include "core/core.h"
#include "transport/frame.h"
#include "transport/listener.h"
#include "transport/listener_impl.h"

/* A received frame's memory: this header, then the payload (RX_HDR keeps
 * the payload as aligned as malloc's own blocks are). The frame's bytes
 * stay charged to its connection's budget until the last request viewing
 * them lets go. */
typedef struct rx_mem {
  sip__rx_budget_t *budget;
  size_t charged;
} rx_mem_t;
#define RX_HDR ((size_t)64)
_Static_assert(sizeof(rx_mem_t) <= RX_HDR, "rx_mem_t fits before the payload");
/* A payload's buffer starts this large (or at the announced length when
 * smaller) and doubles as bytes arrive: an announced frame is not memory
 * its client has sent. */
#define RX_FIRST ((size_t)64 << 10)

static void release_payload(void *p) {
  rx_mem_t *m = p;
  sip__rx_budget_release(m->budget, m->charged);
  sip__rx_budget_unref(m->budget);
  sip__free(m);
}

/* Where the bytes of refused frames are read to and dropped (loop only). */
static uint8_t skip_sink[64 << 10];

/* recvmsg into iov[0..niov) that also takes the descriptors a peer passed
 * (SCM_RIGHTS) with these bytes into fds[*n_fds...] (close-on-exec; any
 * beyond SIP__CONN_MAX_FDS, or cut off by the kernel, are closed and
 * *dropped set). */
static ssize_t recv_fds(int sock, struct iovec *iov, int niov, int *fds, int *n_fds,
                        int *dropped) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(SIP__CONN_MAX_FDS * sizeof(int))];
  } ctl;
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)niov, .msg_control = ctl.buf,
                       .msg_controllen = sizeof ctl.buf};
  ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  if (msg.msg_flags & MSG_CTRUNC) *dropped = 1;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      if (*n_fds < SIP__CONN_MAX_FDS) {
        fds[(*n_fds)++] = fd;
      } else {
        close(fd);
        *dropped = 1;
      }
    }
  }
  return n;
}

/* The descriptors read ahead go to the frame now being read. */
static void take_fds_ahead(sip__conn_t *c) {
  for (int i = 0; i < c->n_fds_ahead; i++) {
    if (c->n_fds < SIP__CONN_MAX_FDS) {
      c->fds[c->n_fds++] = c->fds_ahead[i];
    } else {
      close(c->fds_ahead[i]);
      c->fds_dropped = 1;
    }
  }
  c->fds_dropped |= c->fds_ahead_dropped;
  c->n_fds_ahead = c->fds_ahead_dropped = 0;
}

/* The frame in c->h is refused (e: taken) before its payload is in: it is
 * answered, and its remaining bytes are read and dropped. Returns -1 when
 * the connection was closed. */
static int refuse_frame(sip__listener_set_t *ls, sip__conn_t *c, sip_error_t *e) {
  sip__log(SIP__LOG_WARN, "frame refused", "type=%u length=%u reason=\"%s\"", c->h.type,
           c->h.length, sip_error_message(e));
  c->skip = c->h.length - c->got;
  sip__conn_drop_rx(c);
  sip__handle_refused(ls, c, e);
  if (!c->skip) {
    c->hdr_got = 0;
    sip__conn_close_fds(c);
  }
  return sip__conn_flush(ls, c);
}

/* Makes room for more of the payload being read: the buffer doubles, up to
 * the announced length, as far as the receive budgets allow. 0 when it
 * did; 1 when the frame was refused instead; -1 when the connection was
 * closed. */
static int grow_rx(sip__listener_set_t *ls, sip__conn_t *c) {
  size_t len = c->h.length, cap = c->rx ? c->rx_cap * 2 : RX_FIRST;
  if (cap > len) cap = len;
  size_t more = cap - c->rx_cap;
  int over = sip__rx_budget_charge(c->budget, more);
  if (over) {
    sip__rx_budget_t *b = over == 1 ? c->budget : c->budget->parent;
    return refuse_frame(ls, c, sip_error_new(
        SIP_RESOURCE_EXHAUSTED, "a %u-byte frame does not fit in what %s may hold of received "
        "frames: %zu of %zu bytes are taken (%s); try again later",
        c->h.length, over == 1 ? "one connection" : "all connections together",
        atomic_load(&b->used), b->limit,
        over == 1 ? "server.max_connection_receive_bytes" : "server.max_receive_bytes"))
               ? -1 : 1;
  }
  uint8_t *p = sip__realloc(c->rx, RX_HDR + cap);
  if (!p) {
    sip__rx_budget_release(c->budget, more);
    return refuse_frame(ls, c, sip_error_new(SIP_RESOURCE_EXHAUSTED,
                                             "out of memory for a %u-byte frame", c->h.length))
               ? -1 : 1;
  }
  c->rx = p;
  c->rx_cap = cap;
  return 0;
}

/* The whole payload is in: hand it to its handler. Returns -1 when the
 * connection was closed. */
static int frame_done(sip__listener_set_t *ls, sip__conn_t *c) {
  rx_mem_t *m = (rx_mem_t *)c->rx;
  m->budget = c->budget;
  m->charged = c->rx_cap;
  c->payload = sip_buf_wrap(c->rx + RX_HDR, c->h.length, release_payload, m);
  if (!c->payload) {
    sip__conn_drop_rx(c);
    sip__conn_error(ls, c, c->h.request_id, SIP__OOM());
    return sip__conn_flush(ls, c);
  }
  atomic_fetch_add(&c->budget->refs, 1); /* the frame's, given back by release_payload */
  c->rx = NULL;
  c->rx_cap = c->got = 0;
  c->in_payload = 0;
  sip__handle_frame(ls, c);
  sip_buf_unref(c->payload); /* tensors of queued requests keep their own references */
  c->payload = NULL;
  c->hdr_got = 0;
  sip__conn_close_fds(c); /* whatever the handler did not take */
  sip__conn_pause_in_flight(ls, c);
  return sip__conn_flush(ls, c);
}

/* Reads everything available. Returns -1 when the connection was closed.
 *
 * The last bytes of a payload are read together with up to a header less
 * one byte of whatever follows: when nothing follows (a client waiting for
 * its answer) the read says so, and the loop goes back to epoll (level
 * triggered) without the read that would fail with EAGAIN; when a frame
 * follows, its header's first bytes are in. At least one byte of that
 * header stays in the socket, so a connection paused after this frame is
 * woken by epoll as it would have been. Descriptors that come with such a
 * read belong to the next frame (they travel with a frame's first bytes:
 * those of this one were read with its header). */
static int conn_read(sip__listener_set_t *ls, sip__conn_t *c) {
  for (;;) {
    if (c->closing || atomic_load(&c->read_paused)) return 0;
    struct iovec iov[2];
    int niov = 1, ahead = 0;
    if (c->skip) {
      iov[0].iov_base = skip_sink;
      iov[0].iov_len = c->skip < sizeof skip_sink ? c->skip : sizeof skip_sink;
    } else if (!c->in_payload) {
      iov[0].iov_base = c->hdr + c->hdr_got;
      iov[0].iov_len = SIP__FRAME_HEADER_SIZE - c->hdr_got;
    } else {
      if (c->got == c->rx_cap && c->got < c->h.length) {
        int rc = grow_rx(ls, c);
        if (rc < 0) return -1;
        if (rc > 0) continue; /* refused: its bytes are skipped */
      }
      iov[0].iov_base = c->rx + RX_HDR + c->got;
      iov[0].iov_len = c->rx_cap - c->got;
      /* c->hdr was decoded: it takes the next frame's first bytes. */
      ahead = c->rx_cap == c->h.length && c->got < c->h.length;
      if (ahead) {
        iov[1].iov_base = c->hdr;
        iov[1].iov_len = SIP__FRAME_HEADER_SIZE - 1;
        niov = 2;
      }
    }
    size_t want = iov[0].iov_len;
    ssize_t n = !want ? 0
                : ahead ? recv_fds(c->fd, iov, niov, c->fds_ahead, &c->n_fds_ahead,
                                   &c->fds_ahead_dropped)
                        : recv_fds(c->fd, iov, niov, c->fds, &c->n_fds, &c->fds_dropped);
    if (want && n == 0) { /* peer closed; a partial frame is simply dropped */
      sip__conn_close(ls, c);
      return -1;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        /* What came of the header is all the client sent: it is a frame begun. */
        if (!c->in_payload && !c->skip) c->hdr_ahead = 0;
        return 0;
      }
      sip__conn_close(ls, c);
      return -1;
    }
    if (n > 0) c->last_rx_us = sip__now_us();
    if (c->skip) {
      c->skip -= (size_t)n;
      if (!c->skip) {
        c->hdr_got = 0;
        sip__conn_close_fds(c);
      }
      continue;
    }
    if (!c->in_payload) {
      if (!c->hdr_got) c->frame_us = c->last_rx_us;
      c->hdr_ahead = 0;
      c->hdr_got += (size_t)n;
      if (c->hdr_got < SIP__FRAME_HEADER_SIZE) continue;
      sip_error_t *e = sip__frame_header_decode(c->hdr, ls->max_frame, &c->h);
      if (e) {
        uint64_t rid = 0;
        for (int i = 7; i >= 0; i--) rid = rid << 8 | c->hdr[16 + i];
        sip__conn_error(ls, c, rid, e);
        return sip__conn_flush(ls, c);
      }
      c->in_payload = 1;
      c->got = 0;
      int rc = grow_rx(ls, c);
      if (rc < 0) return -1;
      if (rc > 0) continue;
    } else {
      size_t next = (size_t)n > want ? (size_t)n - want : 0;
      c->got += (size_t)n - next;
      if (ahead && !next) take_fds_ahead(c); /* all this frame's */
      if (c->got < c->h.length) continue;
      if (frame_done(ls, c) < 0) return -1;
      if (!ahead) continue;
      if (!next) return 0; /* nothing followed: epoll says when more comes */
      c->hdr_got = next;
      c->hdr_ahead = 1;
      c->frame_us = c->last_rx_us;
      take_fds_ahead(c);
      continue;
    }
    if (c->got == c->h.length && frame_done(ls, c) < 0) return -1;
  }
}

/* Closes, with an ERROR frame saying why, every connection whose current
 * frame stalled: its header not complete frame_timeout after its first
 * byte, or no byte of its payload for that long. A connection not read
 * from (backpressure) is no exception when it holds part of a frame: its
 * client stopped taking its answers, which is why the frame's bytes stop
 * coming (one between frames holds nothing of a frame and is left). The
 * ERROR frame goes behind the answers still queued; when the client does
 * not take them all at once the connection is closed without it, since a
 * client that stopped reading would otherwise hold it for good. So is a
 * connection closing for another reason (an ERROR frame after a malformed
 * one) whose client has not taken its last bytes frame_timeout later. */
static void sweep_stalled(sip__listener_set_t *ls, uint64_t now) {
  uint64_t t = ls->frame_timeout_us;
  for (uint32_t i = 0; i < ls->n_slots; i++) {
    sip__conn_t *c = ls->slots[i];
    if (!c) continue;
    if (atomic_load(&c->closing)) {
      if (!c->closing_us) {
        c->closing_us = now;
      } else if (now - c->closing_us > t) {
        sip__log(SIP__LOG_WARN, "connection closed: its client did not take its last answers",
                 "timeout_ms=%llu", (unsigned long long)(t / 1000));
        sip__conn_close(ls, c);
      }
      continue;
    }
    /* Header bytes read with the last frame's end while the connection is
     * not read from are no frame begun: the clock starts when it is read. */
    if (c->hdr_ahead && atomic_load(&c->read_paused)) c->frame_us = now;
    const char *what;
    if (c->in_payload || c->skip)
      what = now - c->last_rx_us > t ? "no byte of the frame's payload came for" : NULL;
    else
      what = c->hdr_got && now - c->frame_us > t ? "the frame header was not complete" : NULL;
    if (!what) continue;
    sip__log(SIP__LOG_WARN, "frame stalled, connection closed",
             "got=%zu length=%u reason=\"%s\" read_paused=%d",
             c->in_payload ? c->got : c->hdr_got, c->in_payload ? c->h.length : 0, what,
             atomic_load(&c->read_paused));
    sip__wbuf_t w = {0};
    char msg[200];
    snprintf(msg, sizeof msg, "%s %llu ms%s (server.frame_timeout_ms); connection closed", what,
             (unsigned long long)(t / 1000), c->in_payload || c->skip ? "" : " after its first byte");
    sip__encode_error(&w, c->in_payload ? c->h.request_id : 0, SIP_DEADLINE_EXCEEDED, msg);
    sip__conn_queue_wbuf(ls, c, &w);
    atomic_store(&c->closing, 1);
    /* Not all sent (the connection is still open): closed without waiting. */
    if (sip__conn_flush(ls, c) == 0) sip__conn_close(ls, c);
  }
}

/* Logs a failed accept at most once a second, with how many were left out
 * since the last line. */
static void log_accept_failed(sip__listener_set_t *ls, const sip__listener_t *l, int err,
                              const char *action) {
  uint64_t now = sip__now_us();
  if (ls->accept_log_us && now - ls->accept_log_us < 1000000) {
    ls->accept_log_suppressed++;
    return;
  }
  sip__log(SIP__LOG_WARN, "accept failed", "endpoint=%s error=\"%s\" action=\"%s\" suppressed=%lu",
           l->address, strerror(err), action, ls->accept_log_suppressed);
  ls->accept_log_us = now;
  ls->accept_log_suppressed = 0;
}

static void set_listeners_armed(sip__listener_set_t *ls, int armed) {
  for (size_t i = 0; i < ls->n_ls; i++) {
    struct epoll_event ev = {.events = armed ? EPOLLIN : 0u, .data.u64 = TAG(TAG_LISTENER, i)};
    epoll_ctl(ls->epfd, EPOLL_CTL_MOD, ls->ls[i].fd, &ev);
  }
}

/* How long the listeners stay disarmed when no descriptor can be freed. */
#define ACCEPT_BACKOFF_US 100000

/* Out of descriptors or memory with a connection pending: frees the
 * reserve descriptor to accept the connection and close it at once (the
 * client sees it closed rather than waiting, and the listener stops
 * firing), then takes the reserve again. Returns 0 when it did; else the
 * listeners are disarmed for ACCEPT_BACKOFF_US and it returns -1. */
static int shed_connection(sip__listener_set_t *ls, sip__listener_t *l, int err) {
  if ((err == EMFILE || err == ENFILE) && ls->reserve_fd >= 0) {
    close(ls->reserve_fd);
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
    ls->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
      log_accept_failed(ls, l, err, "connection closed: out of file descriptors");
      return 0;
    }
  }
  log_accept_failed(ls, l, err, "accepting paused for 100 ms");
  set_listeners_armed(ls, 0);
  ls->listeners_paused_until_us = sip__now_us() + ACCEPT_BACKOFF_US;
  return -1;
}

/* Past server.max_connections: the new connection gets an ERROR frame
 * saying so and is closed (logged at most once a second). */
static void refuse_connection(sip__listener_set_t *ls, const sip__listener_t *l, int fd, long open) {
  char msg[200];
  snprintf(msg, sizeof msg, "the server has %ld connections open, its limit "
           "(server.max_connections); try again later", open);
  sip__wbuf_t w = {0};
  sip__encode_error(&w, 0, SIP_RESOURCE_EXHAUSTED, msg);
  if (!w.oom) {
    ssize_t n = send(fd, w.data, w.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;
  }
  sip__wbuf_free(&w);
  /* Closing with unread bytes would reset a TCP connection, and the
   * client could lose the answer: what it sent already is read first. */
  shutdown(fd, SHUT_WR);
  for (int i = 0; i < 16 && recv(fd, skip_sink, sizeof skip_sink, MSG_DONTWAIT) > 0; i++) {}
  close(fd);
  uint64_t now = sip__now_us();
  if (ls->refuse_log_us && now - ls->refuse_log_us < 1000000) {
    ls->refuse_log_suppressed++;
    return;
  }
  sip__log(SIP__LOG_WARN, "connection refused", "endpoint=%s open=%ld limit=%ld suppressed=%lu",
           l->address, open, ls->max_conns, ls->refuse_log_suppressed);
  ls->refuse_log_us = now;
  ls->refuse_log_suppressed = 0;
}

static void do_accept(sip__listener_set_t *ls, sip__listener_t *l) {
  for (int shed = 0;;) {
    struct sockaddr_storage peer;
    socklen_t peer_len = sizeof peer;
    int fd = accept4(l->fd, (struct sockaddr *)&peer, &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      int err = errno;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        /* A bounded number per wakeup: the other connections are served too. */
        if (shed_connection(ls, l, err) == 0 && ++shed < 64) continue;
      } else {
        log_accept_failed(ls, l, err, "none");
      }
      return;
    }
    long open = atomic_load(&ls->open_conns[0]) + atomic_load(&ls->open_conns[1]);
    if (open >= ls->max_conns) {
      refuse_connection(ls, l, fd, open);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* harmless on unix sockets */
    uint32_t slot = 0;
    while (slot < ls->n_slots && ls->slots[slot]) slot++;
    if (slot == ls->n_slots) {
      uint32_t n = ls->n_slots ? ls->n_slots * 2 : 64;
      pthread_mutex_lock(&ls->slots_mu); /* writers read the table */
      sip__conn_t **v = sip__reallocarray(ls->slots, n, sizeof *v);
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
    sip__conn_t *c = sip__calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->wmu, NULL);
    c->fd = fd;
    c->is_tcp = l->is_tcp;
    c->budget = sip__rx_budget_new(ls->conn_rx_limit, ls->rx_total);
    if (!c->budget) {
      sip__conn_unref(c);
      continue;
    }
    sip__conn_auth_init(ls, c, !l->is_tcp || sip__addr_is_local((struct sockaddr *)&peer));
    c->cancel = sip_cancel_token_new(); /* NULL (no cancel on close) only when out of memory */
    c->slot = slot;
    c->gen = ++ls->next_gen;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = TAG(TAG_CONN, slot)};
    if (epoll_ctl(ls->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      sip__rx_budget_unref(c->budget);
      sip_cancel_token_free(c->cancel);
      sip__conn_unref(c);
      continue;
    }
    pthread_mutex_lock(&ls->slots_mu);
    ls->slots[slot] = c;
    pthread_mutex_unlock(&ls->slots_mu);
    atomic_fetch_add(&ls->open_conns[c->is_tcp], 1);
  }
}

/* How long stop gives all connections together to take their last answers. */
#define STOP_GRACE_US 1000000

/* At stop (the pools have drained: every answer is written or queued):
 * sends what is queued on every connection at once, for STOP_GRACE_US in
 * all, however many clients stopped reading, then closes every connection. */
static void flush_at_stop(sip__listener_set_t *ls) {
  uint64_t until = sip__now_us() + STOP_GRACE_US;
  struct pollfd *p = sip__calloc(ls->n_slots ? ls->n_slots : 1, sizeof *p);
  for (;;) {
    nfds_t n = 0;
    for (uint32_t i = 0; i < ls->n_slots; i++) {
      sip__conn_t *c = ls->slots[i];
      if (!c) continue;
      pthread_mutex_lock(&c->wmu);
      int left = sip__conn_send_queued(ls, c) == 0 && c->out.head;
      pthread_mutex_unlock(&c->wmu);
      if (left && p) p[n++] = (struct pollfd){.fd = c->fd, .events = POLLOUT};
    }
    uint64_t now = sip__now_us();
    if (!n || now >= until) break;
    if (poll(p, n, (int)((until - now + 999) / 1000)) < 0 && errno != EINTR) break;
  }
  sip__free(p);
  for (uint32_t i = 0; i < ls->n_slots; i++)
    if (ls->slots[i]) sip__conn_close(ls, ls->slots[i]);
}

static void *loop_main(void *arg) {
  sip__listener_set_t *ls = arg;
  struct epoll_event evs[64];
  while (!atomic_load(&ls->stop)) {
    int timeout_ms = -1;
    if (ls->listeners_paused_until_us) {
      uint64_t now = sip__now_us();
      if (now >= ls->listeners_paused_until_us) {
        ls->listeners_paused_until_us = 0;
        set_listeners_armed(ls, 1);
        if (ls->reserve_fd < 0) ls->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      } else {
        timeout_ms = (int)((ls->listeners_paused_until_us - now + 999) / 1000);
      }
    }
    if (ls->frame_timeout_us &&
        atomic_load(&ls->open_conns[0]) + atomic_load(&ls->open_conns[1]) > 0) {
      uint64_t now = sip__now_us();
      if (now >= ls->next_sweep_us) {
        sweep_stalled(ls, now);
        ls->next_sweep_us = now + ls->sweep_us;
      }
      int t = (int)((ls->next_sweep_us - now + 999) / 1000);
      if (timeout_ms < 0 || t < timeout_ms) timeout_ms = t;
    }
    /* Connections paused for their requests in flight are read again as
     * those are answered, which no event here tells: looked at every 5 ms. */
    if (ls->n_paused_in_flight > 0) {
      sip__conn_resume_in_flight(ls);
      if (ls->n_paused_in_flight > 0 && (timeout_ms < 0 || timeout_ms > 5)) timeout_ms = 5;
    }
    int n = epoll_wait(ls->epfd, evs, 64, timeout_ms);
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64 >> 56, v = evs[i].data.u64 & ((1ull << 56) - 1);
      if (tag == TAG_WAKE) {
        uint64_t v;
        ssize_t rc = read(ls->wakefd, &v, sizeof v); /* the stop signal */
        (void)rc;
      } else if (tag == TAG_LISTENER) {
        do_accept(ls, &ls->ls[v]);
      } else if (tag == TAG_CONN && v < ls->n_slots && ls->slots[v]) {
        sip__conn_t *c = ls->slots[v];
        if ((evs[i].events & EPOLLOUT) && sip__conn_flush(ls, c) < 0) continue;
        if ((evs[i].events & (EPOLLHUP | EPOLLERR)) && atomic_load(&c->read_paused)) {
          sip__conn_close(ls, c); /* not read from: a hang-up ends it here */
          continue;
        }
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          if (c->closing) {
            /* Nothing more is read; a hang-up ends it. */
            if (evs[i].events & (EPOLLHUP | EPOLLERR)) sip__conn_close(ls, c);
            else {
              char sink[4096];
              ssize_t r = recv(c->fd, sink, sizeof sink, 0);
              if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) sip__conn_close(ls, c);
            }
          } else {
            conn_read(ls, c);
          }
        }
      }
    }
  }
  flush_at_stop(ls);
  return NULL;
}

/* ---- public (internal) API ---- */

static void listeners_stop(void *state);

static sip_error_t *listeners_start(sip_server_t *srv, const void *options, void **out) {
  const sip__config_t *cfg = options;
  char **endpoints = cfg->endpoints;
  size_t n = cfg->n_endpoints;
  if (n > MAX_LISTENERS)
    return sip_error_new(SIP_INVALID_ARGUMENT, "%zu endpoints; at most %d are supported", n,
                         MAX_LISTENERS);
  sip__listener_set_t *ls = sip__calloc(1, sizeof *ls);
  if (!ls) return SIP__OOM();
  ls->srv = srv;
  ls->max_frame = cfg->max_frame_bytes;
  ls->auth = &cfg->auth;
  ls->max_unsent = cfg->max_unsent_bytes ? cfg->max_unsent_bytes : (size_t)16 << 20;
  ls->max_in_flight = ls->max_unsent > ((size_t)1 << 20) ? ls->max_unsent : (size_t)1 << 20;
  /* A zeroed setting (an embedder's config) takes the config's default. */
  ls->max_conns = cfg->max_connections > 0 ? cfg->max_connections : 1024;
  ls->frame_timeout_us = (uint64_t)cfg->frame_timeout_ms * 1000;
  /* Stalls are looked for every tenth of the timeout (10 ms to 1 s). */
  ls->sweep_us = ls->frame_timeout_us / 10;
  ls->sweep_us = ls->sweep_us < 10000 ? 10000 : ls->sweep_us > 1000000 ? 1000000 : ls->sweep_us;
  ls->conn_rx_limit = cfg->max_connection_receive_bytes ? cfg->max_connection_receive_bytes
                                                        : (size_t)512 << 20;
  ls->rx_total = sip__rx_budget_new(cfg->max_receive_bytes ? cfg->max_receive_bytes
                                                           : (size_t)1 << 30, NULL);
  ls->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ls->epfd = epoll_create1(EPOLL_CLOEXEC);
  ls->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  pthread_mutex_init(&ls->slots_mu, NULL);
  sip_error_t *e = NULL;
  if (!ls->rx_total)
    e = SIP__OOM();
  else if (ls->epfd < 0 || ls->wakefd < 0)
    e = sip_error_new(SIP_UNAVAILABLE, "epoll/eventfd: %s", strerror(errno));
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG(TAG_WAKE, 0)};
  if (!e && epoll_ctl(ls->epfd, EPOLL_CTL_ADD, ls->wakefd, &ev) != 0)
    e = sip_error_new(SIP_UNAVAILABLE, "epoll_ctl: %s", strerror(errno));
  sip__sock_perm_t perm;
  if (!e)
    e = sip__sock_perm_resolve(cfg->socket_owner, cfg->socket_group, (unsigned)cfg->socket_mode,
                               &perm);
  for (size_t i = 0; !e && i < n; i++) {
    e = sip__endpoint_listen(endpoints[i], &perm, &ls->ls[i]);
    if (e) break;
    ls->n_ls = i + 1;
    if (!ls->ls[i].address) {
      e = SIP__OOM();
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
  sip__listener_set_t *ls = state;
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
      if (ls->slots[i]) sip__conn_close(ls, ls->slots[i]);
  }
  sip__free(ls->slots);
  if (ls->epfd >= 0) close(ls->epfd);
  if (ls->wakefd >= 0) close(ls->wakefd);
  if (ls->reserve_fd >= 0) close(ls->reserve_fd);
  sip__rx_budget_unref(ls->rx_total);
  pthread_mutex_destroy(&ls->slots_mu);
  sip__free(ls);
}

static size_t listeners_count(void *state) { return ((sip__listener_set_t *)state)->n_ls; }

static void listeners_connections(void *state, sip_frontend_count_fn emit, void *ctx) {
  sip__listener_set_t *ls = state;
  emit(ctx, "unix", atomic_load(&ls->open_conns[0]));
  emit(ctx, "tcp", atomic_load(&ls->open_conns[1]));
}

static const char *listeners_address(void *state, size_t i) {
  sip__listener_set_t *ls = state;
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
