/* sip — libsipclient: engine event subscriptions (SUBSCRIBE, then EVENT
 * frames). A subscription has a connection and a reader thread of its own. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"
#include "sip/client.h"
#include "transport/frame.h"
#include "client_impl.h"

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
  if (sip__client_read_full(fd, hdr, sizeof hdr) != 0) return -1;
  sip_error_t *e = sip__frame_header_decode(hdr, UINT32_MAX, h);
  if (e) {
    sip_error_free(e);
    return -1;
  }
  char *p = sip__malloc((size_t)h->length + 1);
  if (!p || sip__client_read_full(fd, p, h->length) != 0) {
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
                                 : sip__client_error_from_text((sip_code_t)code, txt, n);
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
  sip_error_t *e = sip__client_dial(endpoint, &fd);
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
