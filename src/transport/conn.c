/* sip — one native-protocol connection's output: reference counting and
 * lookup by id (so an answer for a connection that closed meanwhile is
 * dropped, and a descriptor is closed only when no thread can still write
 * to it), the output queue, and answers written straight from the engine
 * thread that produced them when nothing is queued before them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "transport/frame.h"
#include "transport/listener_impl.h"

/* A referenced connection by id, or NULL when it is gone. Any thread. */
static sip__conn_t *conn_acquire(sip__listener_set_t *ls, uint64_t id) {
  uint32_t slot = (uint32_t)id, gen = (uint32_t)(id >> 32);
  pthread_mutex_lock(&ls->slots_mu);
  sip__conn_t *c = slot < ls->n_slots ? ls->slots[slot] : NULL;
  if (c && c->gen == gen)
    atomic_fetch_add(&c->refs, 1);
  else
    c = NULL;
  pthread_mutex_unlock(&ls->slots_mu);
  return c;
}

/* ---- receive budgets ---- */

sip__rx_budget_t *sip__rx_budget_new(size_t limit, sip__rx_budget_t *parent) {
  sip__rx_budget_t *b = sip__calloc(1, sizeof *b);
  if (!b) return NULL;
  atomic_init(&b->refs, 1);
  atomic_init(&b->used, 0);
  b->limit = limit;
  b->parent = parent;
  if (parent) atomic_fetch_add(&parent->refs, 1);
  return b;
}

void sip__rx_budget_unref(sip__rx_budget_t *b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  sip__rx_budget_unref(b->parent);
  sip__free(b);
}

static int charge_one(sip__rx_budget_t *b, size_t n) {
  if (atomic_fetch_add(&b->used, n) + n <= b->limit) return 0;
  atomic_fetch_sub(&b->used, n);
  return -1;
}

int sip__rx_budget_charge(sip__rx_budget_t *b, size_t n) {
  if (charge_one(b, n)) return 1;
  if (b->parent && charge_one(b->parent, n)) {
    atomic_fetch_sub(&b->used, n);
    return 2;
  }
  return 0;
}

void sip__rx_budget_release(sip__rx_budget_t *b, size_t n) {
  atomic_fetch_sub(&b->used, n);
  if (b->parent) atomic_fetch_sub(&b->parent->used, n);
}

void sip__conn_drop_rx(sip__conn_t *c) {
  if (c->rx) sip__rx_budget_release(c->budget, c->rx_cap);
  sip__free(c->rx);
  c->rx = NULL;
  c->rx_cap = c->got = 0;
  c->in_payload = 0;
}

static void free_chunk(sip__conn_t *c, sip__chunk_t *k) {
  c->unsent -= k->len + sizeof *k;
  sip__free(k->data);
  sip__free(k);
}

static void free_chunks(sip__conn_t *c) {
  sip__chunk_t *k;
  while ((k = chunks_pop(&c->out))) free_chunk(c, k);
}

void sip__conn_unref(sip__conn_t *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  close(c->fd);
  free_chunks(c);
  pthread_mutex_destroy(&c->wmu);
  sip__free(c);
}

/* Loop only. */
void sip__conn_close(sip__listener_set_t *ls, sip__conn_t *c) {
  /* Nobody will read the answers: queued requests of this client are
   * cancelled instead of run. */
  if (c->cancel && !atomic_load(&ls->stop)) sip_server_cancel(ls->srv, c->cancel);
  sip_cancel_token_free(c->cancel);
  c->cancel = NULL;
  pthread_mutex_lock(&ls->slots_mu);
  ls->slots[c->slot] = NULL;
  pthread_mutex_unlock(&ls->slots_mu);
  if (c->paused_in_flight) {
    c->paused_in_flight = 0;
    ls->n_paused_in_flight--;
  }
  pthread_mutex_lock(&c->wmu);
  c->dead = 1;
  free_chunks(c);
  pthread_mutex_unlock(&c->wmu);
  epoll_ctl(ls->epfd, EPOLL_CTL_DEL, c->fd, NULL);
  sip_buf_unref(c->payload);
  c->payload = NULL;
  sip__conn_drop_rx(c);
  sip__rx_budget_unref(c->budget);
  c->budget = NULL;
  sip__conn_close_fds(c);
  for (int i = 0; i < c->n_fds_ahead; i++) close(c->fds_ahead[i]);
  c->n_fds_ahead = 0;
  /* The connection's regions go; requests in flight keep their views. */
  sip__shm_set_free(c->shm);
  c->shm = NULL;
  atomic_fetch_sub(&ls->open_conns[c->is_tcp], 1);
  sip__conn_unref(c); /* the descriptor closes when the last writer lets go */
}

/* Sets the events the loop waits for on `c`. Caller holds c->wmu. */
static void update_events(sip__listener_set_t *ls, sip__conn_t *c) {
  struct epoll_event ev = {
      .events = (atomic_load(&c->read_paused) ? 0u : EPOLLIN | EPOLLRDHUP) |
                (c->epollout ? EPOLLOUT : 0u),
      .data.u64 = TAG(TAG_CONN, c->slot)};
  epoll_ctl(ls->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Caller holds c->wmu. */
static void set_epollout(sip__listener_set_t *ls, sip__conn_t *c, int on) {
  if (c->epollout == on) return;
  c->epollout = on;
  update_events(ls, c);
}

/* Reads from a paused connection again once its unsent answers and its
 * requests in flight both drop below half the bound. Caller holds c->wmu. */
static void maybe_resume(sip__listener_set_t *ls, sip__conn_t *c) {
  if (!atomic_load(&c->read_paused) || c->unsent > ls->max_unsent / 2 ||
      atomic_load(&c->budget->used) > ls->max_in_flight / 2)
    return;
  atomic_store(&c->read_paused, 0);
  update_events(ls, c);
}

void sip__conn_pause_in_flight(sip__listener_set_t *ls, sip__conn_t *c) {
  if (atomic_load(&c->budget->used) <= ls->max_in_flight) return;
  pthread_mutex_lock(&c->wmu);
  if (!atomic_load(&c->read_paused)) {
    atomic_store(&c->read_paused, 1);
    update_events(ls, c);
  }
  pthread_mutex_unlock(&c->wmu);
  if (!c->paused_in_flight) {
    c->paused_in_flight = 1;
    ls->n_paused_in_flight++;
  }
}

void sip__conn_resume_in_flight(sip__listener_set_t *ls) {
  for (uint32_t i = 0; ls->n_paused_in_flight > 0 && i < ls->n_slots; i++) {
    sip__conn_t *c = ls->slots[i];
    if (!c || !c->paused_in_flight) continue;
    pthread_mutex_lock(&c->wmu);
    maybe_resume(ls, c);
    int paused = atomic_load(&c->read_paused);
    pthread_mutex_unlock(&c->wmu);
    if (!paused) {
      c->paused_in_flight = 0;
      ls->n_paused_in_flight--;
    }
  }
}

/* Sends queued chunks until done or the socket is full. Caller holds
 * c->wmu. Returns -1 on a socket error. */
int sip__conn_send_queued(sip__listener_set_t *ls, sip__conn_t *c) {
  while (c->out.head) {
    sip__chunk_t *k = c->out.head;
    ssize_t n = send(c->fd, k->data + k->off, k->len - k->off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        set_epollout(ls, c, 1);
        maybe_resume(ls, c);
        return 0;
      }
      return -1;
    }
    k->off += (size_t)n;
    if (k->off == k->len) free_chunk(c, chunks_pop(&c->out));
  }
  set_epollout(ls, c, 0);
  maybe_resume(ls, c);
  return 0;
}

/* Loop only: writes what it can. Returns -1 when the connection was closed. */
int sip__conn_flush(sip__listener_set_t *ls, sip__conn_t *c) {
  pthread_mutex_lock(&c->wmu);
  int rc = sip__conn_send_queued(ls, c);
  int done = !c->out.head;
  pthread_mutex_unlock(&c->wmu);
  if (rc < 0 || (done && atomic_load(&c->closing))) {
    sip__conn_close(ls, c);
    return -1;
  }
  return 0;
}

/* Queues bytes (ownership taken) behind what is already queued. Caller
 * holds c->wmu. */
static void queue_locked(sip__listener_set_t *ls, sip__conn_t *c, uint8_t *data, size_t len) {
  sip__chunk_t *k = sip__calloc(1, sizeof *k);
  if (!k) {
    sip__free(data);
    /* Cannot answer: better to drop the connection than hang the client. */
    atomic_store(&c->closing, 1);
    set_epollout(ls, c, 1); /* the loop closes it on the next EPOLLOUT */
    return;
  }
  k->data = data;
  k->len = len;
  c->unsent += len + sizeof *k;
  chunks_push(&c->out, k);
  /* Backpressure: a client that does not read its answers is not read
   * from either, so what it sends cannot grow the queue without bound
   * (sending clears it again, maybe_resume). */
  if (c->unsent > ls->max_unsent && !atomic_load(&c->read_paused)) {
    atomic_store(&c->read_paused, 1);
    update_events(ls, c);
  }
}

/* Loop only: queues an encoded frame; conn_flush sends it. */
void sip__conn_queue_wbuf(sip__listener_set_t *ls, sip__conn_t *c, sip__wbuf_t *w) {
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

void sip__conn_close_fds(sip__conn_t *c) {
  for (int i = 0; i < c->n_fds; i++) close(c->fds[i]);
  c->n_fds = 0;
  c->fds_dropped = 0;
}

/* Protocol violation: answer with an ERROR frame, then close. */
void sip__conn_error(sip__listener_set_t *ls, sip__conn_t *c, uint64_t request_id, sip_error_t *e) {
  sip__log(SIP__LOG_WARN, "closing connection after a malformed frame", "code=%s reason=\"%s\"",
           sip_code_name(sip_error_code(e)), sip_error_message(e));
  sip__wbuf_t w = {0};
  sip__encode_error(&w, request_id, sip_error_code(e), sip_error_message(e));
  sip_error_free(e);
  sip__conn_queue_wbuf(ls, c, &w);
  atomic_store(&c->closing, 1);
}

/* ---- answers (engine threads) ---- */

/* Writes an answer from the engine thread that produced it: directly when
 * nothing is queued before it, else behind the queue (the loop flushes). */
void sip__conn_write_answer(sip__listener_set_t *ls, uint64_t id, sip__wbuf_t *w) {
  sip__conn_t *c = w->oom ? NULL : conn_acquire(ls, id);
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
    if (!c->epollout && sip__conn_send_queued(ls, c) < 0) {
      free_chunks(c);
      atomic_store(&c->closing, 1);
      set_epollout(ls, c, 1); /* the loop sees the error and closes */
    }
  }
  pthread_mutex_unlock(&c->wmu);
  sip__conn_unref(c);
}
