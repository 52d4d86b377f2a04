/* sip — GET /v2/events?pool=NAME: the engine's events as Server-Sent Events
 * (text/event-stream; docs/events.md). Each event is one message:
 *
 *   event: STATE_CHANGE
 *   data: {"event":"STATE_CHANGE","pool":...,"dropped":0,...}
 *
 * The subscription pushes into a bounded ring (include/sip/events.h) from
 * the emitting engine thread; MHD pulls from it as the socket takes bytes.
 * With nothing to send the connection is suspended, and the next event
 * resumes it, so a quiet stream costs no polling, and a client that stops
 * reading only loses events (counted in the next one's "dropped").
 * ?exclude=TYPE,TYPE leaves those types out and ?executions=0 the state
 * changes between READY and RUNNING (a session taking and finishing work):
 * the dashboard wants neither for every request. */
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "http/http_impl.h"
#include "sip/events.h"

struct sip__http_sse {
  sip__http_t *h;
  struct MHD_Connection *conn;
  sip_event_ring_t *ring;
  sip_event_sub_t *sub;
  pthread_mutex_t mu; /* suspended, ending */
  int suspended, ending;
  uint64_t exclude; /* bit t: events of type t are not sent */
  int no_executions; /* READY <-> RUNNING state changes are not sent */
  char *out;
  size_t out_len, out_off;
  struct sip__http_sse *next;
};

/* The engine thread that emitted ev: queue it, wake the connection. */
static void sse_push(const sip_event_t *ev, void *user) {
  sip__http_sse_t *x = user;
  if ((unsigned)ev->type < 64 && (x->exclude >> ev->type & 1)) return;
  if (x->no_executions && ev->type == SIP_EVENT_STATE_CHANGE &&
      ((!strcmp(ev->old_state, "READY") && !strcmp(ev->new_state, "RUNNING")) ||
       (!strcmp(ev->old_state, "RUNNING") && !strcmp(ev->new_state, "READY"))))
    return;
  sip_event_ring_push(x->ring, ev);
  pthread_mutex_lock(&x->mu);
  if (x->suspended) {
    x->suspended = 0;
    MHD_resume_connection(x->conn);
  }
  pthread_mutex_unlock(&x->mu);
}

/* The next message into x->out; 0 when there is none (the connection is
 * then suspended, or *end set when the stream is over). */
static int sse_next(sip__http_sse_t *x, int *end) {
  sip_event_t ev;
  uint64_t dropped;
  int got = sip_event_ring_pop(x->ring, &ev, &dropped, 0);
  if (!got) {
    pthread_mutex_lock(&x->mu);
    /* An event pushed since the pop above has not seen `suspended` set:
     * look again under the lock, which its push takes after queueing. */
    got = sip_event_ring_pop(x->ring, &ev, &dropped, 0);
    if (!got && x->ending) {
      *end = 1;
    } else if (!got) {
      x->suspended = 1;
      MHD_suspend_connection(x->conn);
    }
    pthread_mutex_unlock(&x->mu);
    if (!got) return 0;
  }
  char *json = sip_event_json(&ev, dropped);
  x->out = json ? sip__asprintf("event: %s\ndata: %s\n\n", sip_event_type_name(ev.type), json)
                : NULL;
  sip_free(json);
  if (!x->out) {
    *end = 1; /* out of memory: end the stream rather than skip silently */
    return 0;
  }
  x->out_len = strlen(x->out);
  x->out_off = 0;
  return 1;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  sip__http_sse_t *x = cls;
  if (x->out_off == x->out_len) {
    sip__free(x->out);
    x->out = NULL;
    x->out_len = x->out_off = 0;
    int end = 0;
    if (!sse_next(x, &end)) return end ? MHD_CONTENT_READER_END_OF_STREAM : 0;
  }
  size_t n = x->out_len - x->out_off;
  if (n > max) n = max;
  memcpy(buf, x->out + x->out_off, n);
  x->out_off += n;
  return (ssize_t)n;
}

/* The response is done with (the client went, or the stream ended). */
static void sse_free(void *cls) {
  sip__http_sse_t *x = cls;
  sip_server_unsubscribe_events(x->h->s, x->sub); /* no push runs after this */
  pthread_mutex_lock(&x->h->sse_mu);
  for (sip__http_sse_t **pp = &x->h->sse; *pp; pp = &(*pp)->next)
    if (*pp == x) {
      *pp = x->next;
      break;
    }
  pthread_mutex_unlock(&x->h->sse_mu);
  sip_event_ring_free(x->ring);
  pthread_mutex_destroy(&x->mu);
  sip__free(x->out);
  sip__free(x);
}

sip_error_t *sip__http_event_exclude(const char *list, uint64_t *mask) {
  *mask = 0;
  for (const char *p = list; p && *p;) {
    size_t n = strcspn(p, ",");
    int found = 0;
    for (int t = 1; t < SIP_EVENT_TYPES_ && t < 64 && !found; t++) {
      const char *name = sip_event_type_name((sip_event_type_t)t);
      if (strlen(name) == n && !memcmp(name, p, n)) {
        *mask |= (uint64_t)1 << t;
        found = 1;
      }
    }
    if (!found && n) {
      char known[512] = "";
      for (int t = 1; t < SIP_EVENT_TYPES_; t++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", t > 1 ? ", " : "",
                 sip_event_type_name((sip_event_type_t)t));
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "exclude: unknown event type '%.*s'; expected a comma-separated list "
                           "of %s",
                           (int)(n > 64 ? 64 : n), p, known);
    }
    p += n;
    if (*p == ',') p++;
  }
  return NULL;
}

enum MHD_Result sip__http_events(sip__hreq_t *q) {
  const char *pool = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "pool");
  uint64_t exclude = 0;
  sip_error_t *e = sip__http_event_exclude(
      MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "exclude"), &exclude);
  if (e) return sip__http_send_error(q->conn, e);
  const char *execs = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "executions");
  if (execs && strcmp(execs, "0") && strcmp(execs, "1"))
    return sip__http_send_error_msg(q->conn, 400, "executions: expected 0 (leave out the READY "
                                                  "<-> RUNNING state changes) or 1 (the default)");
  sip__http_sse_t *x = sip__calloc(1, sizeof *x);
  if (!x || !(x->ring = sip_event_ring_new(0))) {
    sip__free(x);
    return sip__http_send_error_msg(q->conn, 500, "out of memory");
  }
  x->h = q->h;
  x->conn = q->conn;
  x->exclude = exclude;
  x->no_executions = execs && !strcmp(execs, "0");
  pthread_mutex_init(&x->mu, NULL);
  e = sip_server_subscribe_events(q->h->s, pool, sse_push, x, &x->sub);
  if (e) {
    sip_event_ring_free(x->ring);
    pthread_mutex_destroy(&x->mu);
    sip__free(x);
    return sip__http_send_error(q->conn, e);
  }
  pthread_mutex_lock(&q->h->sse_mu);
  x->next = q->h->sse;
  q->h->sse = x;
  pthread_mutex_unlock(&q->h->sse_mu);
  /* x is freed with the response (sse_free) from here on. */
  struct MHD_Response *r =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, x, sse_free);
  if (!r) {
    sse_free(x);
    return sip__http_send_error_msg(q->conn, 500, "out of memory");
  }
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  return sip__http_queue(q->conn, 200, r, "text/event-stream");
}

void sip__http_sse_stop(sip__http_t *h) {
  pthread_mutex_lock(&h->sse_mu);
  for (sip__http_sse_t *x = h->sse; x; x = x->next) {
    pthread_mutex_lock(&x->mu);
    x->ending = 1;
    if (x->suspended) {
      x->suspended = 0;
      MHD_resume_connection(x->conn);
    }
    pthread_mutex_unlock(&x->mu);
  }
  pthread_mutex_unlock(&h->sse_mu);
}
