/* sip — engine events for embedders and front-ends: subscriptions
 * (include/sip/events.h) and event streams written to a socket by a thread
 * of their own (include/sip/frontend.h). A stream's reader can be as slow as
 * it likes: its ring drops and counts what does not fit, and only the
 * stream's thread ever waits on its socket. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "server/server_impl.h"
#include "session/observe/events.h"
#include "sip/frontend.h"

#define MAX_STREAMS 64
/* How often a waiting stream looks at its peer and at shutdown. */
#define TICK_MS 200

sip_error_t *sip_server_subscribe_events(sip_server_t *srv, const char *pool, sip_event_fn fn,
                                         void *user, sip_event_sub_t **out) {
  return sip__event_subscribe(srv->eng.events, pool, fn, user, out);
}

void sip_server_unsubscribe_events(sip_server_t *srv, sip_event_sub_t *sub) {
  sip__event_unsubscribe(srv->eng.events, sub);
}

typedef struct stream {
  struct stream *next;
  sip_server_t *srv;
  int fd;
  sip_event_ring_t *ring;
  sip_event_sub_t *sub;
  sip_event_encode_fn enc;
  void *user;
  uint8_t *first;
  size_t first_len;
  pthread_t thread;
  atomic_int stop, done;
} stream_t;

struct sip__event_streams {
  pthread_mutex_t mu;
  stream_t *head;
  int n;
};

/* 0 while the peer is there (bytes it sends are read and ignored). */
static int peer_gone(int fd, short revents) {
  if (revents & (POLLHUP | POLLERR | POLLRDHUP)) return 1;
  if (!(revents & POLLIN)) return 0;
  char junk[512];
  ssize_t r = recv(fd, junk, sizeof junk, MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Writes all of p; -1 when the peer went, the socket failed or the stream
 * is stopped. */
static int write_all(stream_t *st, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = send(st->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    struct pollfd pf = {.fd = st->fd, .events = POLLOUT | POLLRDHUP};
    if (atomic_load(&st->stop)) return -1;
    int r = poll(&pf, 1, TICK_MS);
    if (r > 0 && (pf.revents & (POLLHUP | POLLERR | POLLRDHUP))) return -1;
  }
  return 0;
}

static void *stream_main(void *arg) {
  stream_t *st = arg;
  int ok = write_all(st, st->first, st->first_len) == 0;
  while (ok && !atomic_load(&st->stop)) {
    sip_event_t ev;
    uint64_t dropped;
    if (sip_event_ring_pop(st->ring, &ev, &dropped, TICK_MS)) {
      size_t len = 0;
      void *bytes = st->enc(&ev, dropped, &len, st->user);
      ok = bytes && write_all(st, bytes, len) == 0;
      sip_free(bytes);
    } else {
      struct pollfd pf = {.fd = st->fd, .events = POLLIN | POLLRDHUP};
      if (poll(&pf, 1, 0) > 0 && peer_gone(st->fd, pf.revents)) ok = 0;
    }
  }
  /* No more events for this ring; the server frees it once joined. */
  sip__event_unsubscribe(st->srv->eng.events, st->sub);
  st->sub = NULL;
  close(st->fd);
  st->fd = -1;
  atomic_store(&st->done, 1);
  return NULL;
}

static void stream_free(stream_t *st) {
  pthread_join(st->thread, NULL);
  sip_event_ring_free(st->ring);
  sip__free(st->first);
  sip__free(st);
}

/* Joins and frees the streams that ended. Caller holds ss->mu. */
static void reap_locked(struct sip__event_streams *ss) {
  for (stream_t **pp = &ss->head; *pp;) {
    stream_t *st = *pp;
    if (!atomic_load(&st->done)) {
      pp = &st->next;
      continue;
    }
    *pp = st->next;
    ss->n--;
    stream_free(st);
  }
}

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

sip_error_t *sip_server_stream_events(sip_server_t *s, int fd, const char *pool,
                                      size_t capacity, const void *first, size_t first_len,
                                      sip_event_encode_fn enc, void *user) {
  pthread_mutex_lock(&init_mu);
  if (!s->streams && (s->streams = sip__calloc(1, sizeof *s->streams)))
    pthread_mutex_init(&s->streams->mu, NULL);
  pthread_mutex_unlock(&init_mu);
  struct sip__event_streams *ss = s->streams;
  if (!ss) {
    close(fd);
    return SIP__OOM();
  }
  pthread_mutex_lock(&ss->mu);
  reap_locked(ss);
  sip_error_t *e = NULL;
  stream_t *st = NULL;
  if (ss->n >= MAX_STREAMS)
    e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "%d event subscriptions are open, the most a "
                      "server keeps; close one first", MAX_STREAMS);
  else if (!(st = sip__calloc(1, sizeof *st)) || !(st->ring = sip_event_ring_new(capacity)) ||
           !(st->first = sip__malloc(first_len ? first_len : 1)))
    e = SIP__OOM();
  if (!e) {
    if (first_len) memcpy(st->first, first, first_len);
    st->first_len = first_len;
    st->srv = s;
    st->fd = fd;
    st->enc = enc;
    st->user = user;
    e = sip__event_subscribe(s->eng.events, pool, sip_event_ring_push_fn, st->ring, &st->sub);
  }
  if (!e && pthread_create(&st->thread, NULL, stream_main, st) != 0) {
    sip__event_unsubscribe(s->eng.events, st->sub);
    e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start an event stream thread");
  }
  if (e) {
    if (st) {
      sip_event_ring_free(st->ring);
      sip__free(st->first);
      sip__free(st);
    }
    close(fd);
  } else {
    st->next = ss->head;
    ss->head = st;
    ss->n++;
  }
  pthread_mutex_unlock(&ss->mu);
  return e;
}

void sip__event_streams_stop(sip_server_t *s) {
  struct sip__event_streams *ss = s->streams;
  if (!ss) return;
  pthread_mutex_lock(&ss->mu);
  for (stream_t *st = ss->head; st; st = st->next) {
    atomic_store(&st->stop, 1);
    sip_event_ring_close(st->ring);
  }
  while (ss->head) {
    stream_t *st = ss->head;
    ss->head = st->next;
    stream_free(st);
  }
  pthread_mutex_unlock(&ss->mu);
  pthread_mutex_destroy(&ss->mu);
  sip__free(ss);
  s->streams = NULL;
}
