/* sip — the HTTP front-end's connections as sip sees them, beside MHD's
 * own: the limits checked when one is accepted (server.http_max_connections
 * in all, server.http_max_connections_per_ip from one address, held to half
 * the total; one more is answered 503 and closed, except that at the total
 * the connection waiting longest for a request's headers is closed to make
 * room, so clients that open connections and send nothing, or half a
 * request line, cannot lock others out, from however many addresses), the
 * header deadline (a request's headers must be complete
 * server.http_header_timeout_ms after the connection opened or its
 * previous request ended, however fast bytes come: MHD's own timeout starts
 * again with each byte, so a client sending a byte at a time held a
 * connection forever), and the hang-up of a client: its request waiting
 * suspended is cancelled instead of run for nobody (MHD does not watch
 * suspended connections), and MHD is made to see the end of the stream.
 *
 * Why sip watches for hang-ups at all: MHD 0.9.75 polls its connections
 * edge-triggered (EPOLLET) and takes a read that returned fewer bytes than
 * it asked for as "nothing more to read" until the next edge. When a
 * client's last bytes and its FIN are both queued by the time MHD reads
 * (the client wrote and closed before MHD's thread got to the connection:
 * a loaded server), the read takes the bytes, the edge of the FIN is spent,
 * and MHD never reads the end of the stream: a request cut mid-body (or
 * mid-headers) kept its connection open, and counted against the limits,
 * until MHD's idle timeout. So every connection MHD has taken is in this
 * module's epoll set for EPOLLRDHUP, one-shot; when its client's end comes,
 * MHD's descriptor is woken once MHD has read all the data before the end:
 * the connection's read side is shut down (shutdown(SHUT_RD): nothing left
 * to read is lost, nothing changes but the wake-up), at once when nothing
 * is left unread (MSG_PEEK), else when a re-check a few ms later finds it
 * read (a wake-up before MHD's read would be spent the same way as the
 * FIN's). MHD reads the end and closes the connection.
 *
 * The accept thread (http.c) runs the deadlines and the hang-ups: it polls
 * this module's epoll descriptor, where connections are watched for
 * EPOLLRDHUP and an eventfd wakes it when a deadline is set. A connection
 * past its deadline is shut down (shutdown(2)); MHD sees the end and closes
 * it. MHD says a connection closed (NOTIFY_CONNECTION CLOSED) before it
 * closes the descriptor, and that unlinks it here under the lock, so a
 * descriptor shut down here is always still the connection's.
 *
 * The count of open connections (the limits', and the one the status and
 * /metrics show) runs from admission until MHD says the connection closed,
 * or MHD_add_connection refused it; a connection MHD dropped later without
 * a word (its own limit or out of memory, where the client sees the
 * connection closed) leaves the count when its descriptor number is
 * accepted again, or at its second header deadline.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "http/http_impl.h"

/* One connection (MHD's socket_context once MHD has it). */
struct sip__http_conn {
  struct sip__http_conn *prev, *next;   /* every connection, in accept order */
  struct sip__http_conn *dprev, *dnext; /* waiting for headers, in deadline order */
  atomic_int refs;                      /* the list's, plus a watcher's or request's */
  uint64_t id;
  int fd;
  int started;   /* MHD has it (NOTIFY_CONNECTION STARTED) */
  int waiting;   /* in the deadline list */
  int polled;    /* in the epoll set (from STARTED until it closes) */
  int suspended; /* a request waits suspended: a hang-up cancels it */
  int overdue;   /* its deadline passed once before MHD took it */
  int evicted;   /* shut down to make room; counted until MHD closes it */
  /* Its client's end came before MHD had read all its data: MHD is woken
   * once it has (the re-check list, in no order). */
  struct sip__http_conn *rprev, *rnext;
  int rechecking;
  uint64_t recheck_us, recheck_step_us;
  uint64_t deadline_us;
  struct sockaddr_storage addr;
  socklen_t addr_len;
  sip_cancel_token_t *cancel; /* made when its first request is suspended */
};

struct sip__http_conns {
  pthread_mutex_t mu;
  sip__http_conn_t *head, *tail;   /* every connection */
  sip__http_conn_t *dhead, *dtail; /* waiting for headers */
  sip__http_conn_t *rhead;         /* hung up, MHD to be woken once it read all */
  long n;
  long n_evicted; /* of n: shut down to make room, MHD yet to close them */
  uint64_t next_id;
  int epfd, wakefd;
  uint64_t timeout_us;
  /* "http connection refused" and "http header timeout" lines: at most one
   * a second each, with how many were left out. */
  uint64_t refused_log_us, timeout_log_us, evicted_log_us;
  unsigned long refused_suppressed, timeout_suppressed, evicted_suppressed;
};

#define WAKE_ID UINT64_MAX

sip_error_t *sip__http_conns_init(sip__http_t *h) {
  sip__http_conns_t *cs = sip__calloc(1, sizeof *cs);
  if (!cs) return SIP__OOM();
  pthread_mutex_init(&cs->mu, NULL);
  cs->timeout_us = (uint64_t)(h->cfg->http_header_timeout_ms > 0 ? h->cfg->http_header_timeout_ms
                                                                   : 30000) * 1000;
  cs->epfd = epoll_create1(EPOLL_CLOEXEC);
  cs->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  h->cs = cs;
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = WAKE_ID};
  if (cs->epfd < 0 || cs->wakefd < 0 || epoll_ctl(cs->epfd, EPOLL_CTL_ADD, cs->wakefd, &ev))
    return sip_error_new(SIP_UNAVAILABLE, "server.http: epoll/eventfd: %s", strerror(errno));
  return NULL;
}

static void conn_unref(sip__http_conn_t *hc) {
  if (atomic_fetch_sub(&hc->refs, 1) != 1) return;
  sip_cancel_token_free(hc->cancel);
  sip__free(hc);
}

void sip__http_conns_free(sip__http_t *h) {
  sip__http_conns_t *cs = h->cs;
  if (!cs) return;
  while (cs->head) {
    sip__http_conn_t *hc = cs->head;
    cs->head = hc->next;
    conn_unref(hc);
  }
  if (cs->epfd >= 0) close(cs->epfd);
  if (cs->wakefd >= 0) close(cs->wakefd);
  pthread_mutex_destroy(&cs->mu);
  sip__free(cs);
  h->cs = NULL;
}

int sip__http_conns_fd(sip__http_t *h) { return h->cs->epfd; }

/* ---- the lists (caller holds cs->mu) ---- */

static void unlink_waiting(sip__http_conns_t *cs, sip__http_conn_t *hc) {
  if (!hc->waiting) return;
  if (hc->dprev) hc->dprev->dnext = hc->dnext;
  else cs->dhead = hc->dnext;
  if (hc->dnext) hc->dnext->dprev = hc->dprev;
  else cs->dtail = hc->dprev;
  hc->dprev = hc->dnext = NULL;
  hc->waiting = 0;
}

/* Deadlines are now + the same timeout: appending keeps the list in order. */
static void start_waiting(sip__http_conns_t *cs, sip__http_conn_t *hc) {
  unlink_waiting(cs, hc);
  hc->deadline_us = sip__now_us() + cs->timeout_us;
  hc->dprev = cs->dtail;
  if (cs->dtail) cs->dtail->dnext = hc;
  else cs->dhead = hc;
  cs->dtail = hc;
  hc->waiting = 1;
}

/* Arms the connection's one-shot hang-up watch (again): it fires once
 * when its client's end of the stream is there, at once if it already is. */
static void arm(sip__http_conns_t *cs, sip__http_conn_t *hc) {
  struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT, .data.u64 = hc->id};
  if (hc->polled) {
    epoll_ctl(cs->epfd, EPOLL_CTL_MOD, hc->fd, &ev);
  } else if (epoll_ctl(cs->epfd, EPOLL_CTL_ADD, hc->fd, &ev) == 0) {
    hc->polled = 1;
  } else {
    sip__log(SIP__LOG_WARN, "http connection not watched for hang-ups", "conn=%llu error=\"%s\"",
             (unsigned long long)hc->id, strerror(errno));
  }
}

static void unlink_recheck(sip__http_conns_t *cs, sip__http_conn_t *hc) {
  if (!hc->rechecking) return;
  if (hc->rprev) hc->rprev->rnext = hc->rnext;
  else cs->rhead = hc->rnext;
  if (hc->rnext) hc->rnext->rprev = hc->rprev;
  hc->rprev = hc->rnext = NULL;
  hc->rechecking = 0;
}

/* The client of hc is gone (its end of the stream, or an error, is there):
 * wakes MHD's descriptor if MHD has read all the data before the end, else
 * puts hc on the re-check list (1 ms, then twice as long each time, up to
 * 64 ms). Returns 1 when MHD was woken. */
#define RECHECK_FIRST_US 1000
#define RECHECK_MAX_US 64000
static int wake_once_read(sip__http_conns_t *cs, sip__http_conn_t *hc, uint64_t now) {
  char b;
  if (recv(hc->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) {
    shutdown(hc->fd, SHUT_RD);
    unlink_recheck(cs, hc);
    return 1;
  }
  if (!hc->rechecking) {
    hc->rechecking = 1;
    hc->recheck_step_us = RECHECK_FIRST_US;
    hc->rprev = NULL;
    hc->rnext = cs->rhead;
    if (cs->rhead) cs->rhead->rprev = hc;
    cs->rhead = hc;
  } else if (hc->recheck_step_us < RECHECK_MAX_US) {
    hc->recheck_step_us *= 2;
  }
  hc->recheck_us = now + hc->recheck_step_us;
  return 0;
}

static void unlink_conn(sip__http_conns_t *cs, sip__http_conn_t *hc) {
  unlink_waiting(cs, hc);
  unlink_recheck(cs, hc);
  if (hc->polled) {
    epoll_ctl(cs->epfd, EPOLL_CTL_DEL, hc->fd, NULL);
    hc->polled = 0;
  }
  if (hc->prev) hc->prev->next = hc->next;
  else cs->head = hc->next;
  if (hc->next) hc->next->prev = hc->prev;
  else cs->tail = hc->prev;
  cs->n--;
  if (hc->evicted) cs->n_evicted--;
  conn_unref(hc);
}

static int same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return 0;
  if (a->ss_family == AF_INET)
    return !memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                   &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr));
  if (a->ss_family == AF_INET6)
    return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                   &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
  return 0;
}

/* Logs at most once a second per kind, counting what it leaves out. */
static void log_limited(uint64_t *last_us, unsigned long *suppressed, const char *msg,
                        const char *detail) {
  uint64_t now = sip__now_us();
  if (*last_us && now - *last_us < 1000000) {
    (*suppressed)++;
    return;
  }
  sip__log(SIP__LOG_WARN, msg, "%s suppressed=%lu", detail, *suppressed);
  *last_us = now;
  *suppressed = 0;
}

/* ---- the accept thread ---- */

/* Answers 503 on a connection MHD never sees and closes it. */
static void refuse(int fd, const char *why) {
  char body[300], resp[600];
  int bl = snprintf(body, sizeof body, "{\"error\":\"%s; try again later\"}", why);
  int rl = snprintf(resp, sizeof resp,
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    "Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s",
                    bl, body);
  ssize_t n = send(fd, resp, (size_t)rl, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)n;
  /* What the client sent already is read first: closing with unread bytes
   * resets the connection, and the answer could be lost. */
  shutdown(fd, SHUT_WR);
  char sink[4096];
  for (int i = 0; i < 4 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {}
  close(fd);
}

/* At the total limit: the connection waiting longest for its request's
 * headers (the head of the deadline list: opened, or its previous answer
 * sent, longest ago) that MHD has taken is shut down to make room; MHD sees
 * the end and closes it. Returns 0 when there was none (all are busy with
 * requests), or when `max` are already shut down and not yet closed: MHD
 * counts them until it closes them, and its own limit leaves room for as
 * many as sip's (SIP__HTTP_MHD_LIMIT). Caller holds cs->mu. */
static int evict_oldest_waiting(sip__http_conns_t *cs, long max) {
  if (cs->n_evicted >= max) return 0; /* MHD's room for them is full */
  sip__http_conn_t *hc = cs->dhead;
  while (hc && !hc->started) hc = hc->dnext;
  if (!hc) return 0;
  unlink_waiting(cs, hc);
  hc->evicted = 1;
  cs->n_evicted++;
  shutdown(hc->fd, SHUT_RDWR);
  char detail[300];
  snprintf(detail, sizeof detail, "reason=\"%ld HTTP connections open, the limit "
           "(server.http_max_connections): the one waiting longest for a request's headers is "
           "closed\" waited_ms=%llu", max,
           (unsigned long long)((sip__now_us() + cs->timeout_us - hc->deadline_us) / 1000));
  log_limited(&cs->evicted_log_us, &cs->evicted_suppressed, "http connection evicted", detail);
  return 1;
}

int sip__http_conns_admit(sip__http_t *h, int fd, const struct sockaddr *sa, socklen_t sl) {
  sip__http_conns_t *cs = h->cs;
  long max = h->cfg->http_max_connections > 0 ? h->cfg->http_max_connections : 1000;
  /* One address never holds more than half the total, whatever the
   * setting: the other half stays for everyone else. */
  long per_ip = h->cfg->http_max_connections_per_ip;
  long share = max / 2 > 0 ? max / 2 : 1;
  int capped = per_ip > share;
  if (capped) per_ip = share;
  struct sockaddr_storage ss = {0};
  memcpy(&ss, sa, sl < sizeof ss ? sl : sizeof ss);
  char why[200];
  why[0] = '\0';
  pthread_mutex_lock(&cs->mu);
  long from_peer = 0;
  for (sip__http_conn_t *hc = cs->head, *next; hc; hc = next) {
    next = hc->next;
    /* The same descriptor not yet started: MHD dropped that one without
     * telling (it closed the descriptor, which now is this one). */
    if (hc->fd == fd && !hc->started) unlink_conn(cs, hc);
    else if (per_ip > 0 && !hc->evicted && same_address(&hc->addr, &ss)) from_peer++;
  }
  /* Connections shut down to make room are going: not counted. */
  long open = cs->n - cs->n_evicted;
  if (per_ip > 0 && from_peer >= per_ip)
    snprintf(why, sizeof why, "this address has %ld HTTP connections open, the limit per "
             "address (server.http_max_connections_per_ip%s)", from_peer,
             capped ? ", held to half of server.http_max_connections" : "");
  else if (open >= max && !evict_oldest_waiting(cs, max))
    snprintf(why, sizeof why, "the server has %ld HTTP connections open, its limit "
             "(server.http_max_connections), %s", open,
             cs->n_evicted >= max ? "and is closing idle ones to make room"
                                  : "all with a request in progress");
  sip__http_conn_t *hc = why[0] ? NULL : sip__calloc(1, sizeof *hc);
  if (hc) {
    atomic_init(&hc->refs, 1);
    hc->id = ++cs->next_id;
    hc->fd = fd;
    hc->addr = ss;
    hc->addr_len = sl;
    hc->prev = cs->tail;
    if (cs->tail) cs->tail->next = hc;
    else cs->head = hc;
    cs->tail = hc;
    cs->n++;
    int wake = !cs->dhead;
    start_waiting(cs, hc);
    if (wake) {
      uint64_t one = 1;
      ssize_t w = write(cs->wakefd, &one, sizeof one);
      (void)w;
    }
  } else if (!why[0]) {
    snprintf(why, sizeof why, "out of memory");
  }
  if (why[0]) {
    char detail[300];
    snprintf(detail, sizeof detail, "reason=\"%s\"", why);
    log_limited(&cs->refused_log_us, &cs->refused_suppressed, "http connection refused", detail);
  }
  pthread_mutex_unlock(&cs->mu);
  if (!hc) {
    refuse(fd, why);
    return -1;
  }
  return 0;
}

void sip__http_conns_forget_fd(sip__http_t *h, int fd) {
  sip__http_conns_t *cs = h->cs;
  pthread_mutex_lock(&cs->mu);
  for (sip__http_conn_t *hc = cs->tail; hc; hc = hc->prev)
    if (hc->fd == fd && !hc->started) {
      unlink_conn(cs, hc);
      break;
    }
  pthread_mutex_unlock(&cs->mu);
}

int sip__http_conns_run(sip__http_t *h) {
  sip__http_conns_t *cs = h->cs;
  struct epoll_event evs[32];
  int n = epoll_wait(cs->epfd, evs, 32, 0);
  sip__http_conn_t *hung[32];
  int n_hung = 0;
  pthread_mutex_lock(&cs->mu);
  uint64_t now = sip__now_us();
  for (int i = 0; i < n; i++) {
    if (evs[i].data.u64 == WAKE_ID) {
      uint64_t v;
      ssize_t r = read(cs->wakefd, &v, sizeof v);
      (void)r;
      continue;
    }
    /* A client hung up (or its connection was shut down here): found by
     * id, since MHD may have closed it meanwhile. MHD is woken to read
     * the end; a request waiting suspended is cancelled. */
    for (sip__http_conn_t *hc = cs->head; hc; hc = hc->next) {
      if (hc->id != evs[i].data.u64) continue;
      wake_once_read(cs, hc, now);
      if (hc->suspended) {
        hc->suspended = 0;
        atomic_fetch_add(&hc->refs, 1);
        hung[n_hung++] = hc;
      }
      break;
    }
  }
  uint64_t next_us = UINT64_MAX;
  for (sip__http_conn_t *hc = cs->rhead, *rnext; hc; hc = rnext) {
    rnext = hc->rnext;
    if (hc->recheck_us > now || !wake_once_read(cs, hc, now))
      next_us = hc->recheck_us < next_us ? hc->recheck_us : next_us;
  }
  while (cs->dhead && cs->dhead->deadline_us <= now) {
    sip__http_conn_t *hc = cs->dhead;
    unlink_waiting(cs, hc);
    if (!hc->started) {
      /* MHD has not taken it yet: one more period; after that it never
       * will (it dropped the connection without a word). */
      if (hc->overdue) unlink_conn(cs, hc);
      else hc->overdue = 1, start_waiting(cs, hc);
      continue;
    }
    shutdown(hc->fd, SHUT_RDWR); /* MHD sees the end and closes it */
    char detail[120];
    snprintf(detail, sizeof detail, "timeout_ms=%llu",
             (unsigned long long)(cs->timeout_us / 1000));
    log_limited(&cs->timeout_log_us, &cs->timeout_suppressed,
                "http header timeout, connection closed", detail);
  }
  if (cs->dhead && cs->dhead->deadline_us < next_us) next_us = cs->dhead->deadline_us;
  int wait_ms = next_us == UINT64_MAX ? -1 : (int)((next_us - now + 999) / 1000);
  pthread_mutex_unlock(&cs->mu);
  /* Outside the lock: cancelling completes the request, whose callback
   * unwatches its connection. */
  for (int i = 0; i < n_hung; i++) {
    sip__log(SIP__LOG_DEBUG, "http client hung up, its request cancelled", "conn=%llu",
             (unsigned long long)hung[i]->id);
    sip_server_cancel(h->s, hung[i]->cancel);
    conn_unref(hung[i]);
  }
  return wait_ms;
}

/* ---- MHD's threads ---- */

static sip__http_conn_t *conn_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

void sip__http_conns_notify(sip__http_t *h, struct MHD_Connection *c, void **socket_context,
                            enum MHD_ConnectionNotificationCode code) {
  sip__http_conns_t *cs = h->cs;
  pthread_mutex_lock(&cs->mu);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    for (sip__http_conn_t *hc = cs->tail; hc; hc = hc->prev)
      if (hc->fd == fd && !hc->started) {
        hc->started = 1;
        *socket_context = hc;
        arm(cs, hc);
        break;
      }
  } else if (*socket_context) {
    unlink_conn(cs, *socket_context);
    *socket_context = NULL;
  }
  pthread_mutex_unlock(&cs->mu);
}

void sip__http_conns_headers_in(sip__http_t *h, struct MHD_Connection *c) {
  sip__http_conn_t *hc = conn_of(c);
  if (!hc) return;
  pthread_mutex_lock(&h->cs->mu);
  unlink_waiting(h->cs, hc);
  pthread_mutex_unlock(&h->cs->mu);
}

void sip__http_conns_request_done(sip__http_t *h, struct MHD_Connection *c,
                                  enum MHD_RequestTerminationCode toe) {
  sip__http_conn_t *hc = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? conn_of(c) : NULL;
  if (!hc) return;
  sip__http_conns_t *cs = h->cs;
  pthread_mutex_lock(&cs->mu);
  int wake = !cs->dhead;
  start_waiting(cs, hc); /* the next request's headers */
  if (wake) {
    uint64_t one = 1;
    ssize_t w = write(cs->wakefd, &one, sizeof one);
    (void)w;
  }
  pthread_mutex_unlock(&cs->mu);
}

sip__http_conn_t *sip__http_conns_watch(sip__http_t *h, struct MHD_Connection *c,
                                        sip_cancel_token_t **token) {
  sip__http_conn_t *hc = conn_of(c);
  *token = NULL;
  if (!hc) return NULL;
  sip__http_conns_t *cs = h->cs;
  pthread_mutex_lock(&cs->mu);
  if (!hc->cancel) hc->cancel = sip_cancel_token_new();
  /* Re-armed: a client gone before this request was suspended (its
   * one-shot watch spent on waking MHD) fires it again at once. */
  if (hc->cancel) arm(cs, hc);
  if (hc->cancel && hc->polled) {
    hc->suspended = 1;
    atomic_fetch_add(&hc->refs, 1);
    *token = hc->cancel;
  } else {
    hc = NULL;
  }
  pthread_mutex_unlock(&cs->mu);
  return hc;
}

void sip__http_conns_unwatch(sip__http_t *h, sip__http_conn_t *hc) {
  if (!hc) return;
  sip__http_conns_t *cs = h->cs;
  pthread_mutex_lock(&cs->mu);
  hc->suspended = 0; /* still watched: a hang-up still wakes MHD */
  pthread_mutex_unlock(&cs->mu);
  conn_unref(hc);
}

long sip__http_conns_open(sip__http_t *h) {
  sip__http_conns_t *cs = h->cs;
  pthread_mutex_lock(&cs->mu);
  long n = cs->n;
  pthread_mutex_unlock(&cs->mu);
  return n;
}
