/* sip — libsipclient's internals, shared by its files: the client and its
 * pending requests (client.c), the calls answered by INFO_RESPONSE
 * (client_info.c), inference (client_infer.c), shared memory regions
 * (client_shm.c) and event subscriptions (client_events.c). */
#ifndef SIP_CLIENT_IMPL_H
#define SIP_CLIENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sip/client.h"
#include "transport/frame.h"

/* A request sent and not yet answered, on the client's pending list. */
typedef struct sip__client_pending {
  struct sip__client_pending *next;
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
} sip__client_pending_t;

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
  sip__client_pending_t *pending;
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

/* A synchronous call waiting for its callback. */
typedef struct sip__client_waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  sip_client_response_t *resp;
  char *json;
  sip_error_t *err;
} sip__client_waiter_t;

/* A message answered by INFO_RESPONSE: INFO_REQUEST (kind > 0), a
 * REPO_REQUEST (`repo` JSON) or a shared memory message (shm_type). */
typedef struct sip__client_info_msg {
  int kind;
  const char *repo;
  const char *admin; /* ADMIN_REQUEST JSON */
  const char *auth;  /* AUTH: the token */
  uint16_t shm_type;
  const char *name;
  uint64_t byte_size;
  int fd; /* SHM_REGISTER's memfd */
} sip__client_info_msg_t;

/* client.c: the connection. */
/* Frees a pending request and its kept frame. */
void sip__client_pending_free(sip__client_pending_t *p);
/* Connects to an endpoint (ipc:// or unix:// path, tcp:// host:port);
 * *out: the blocking socket (owned by the caller). */
sip_error_t *sip__client_dial(const char *ep, int *out);
/* Reads exactly n bytes; 0, or -1 when the connection ended. */
int sip__client_read_full(int fd, void *p, size_t n);
/* A failed INFO_RESPONSE's error: its {"error": ...} message, or the text. */
sip_error_t *sip__client_error_from_text(sip_code_t code, const char *txt, size_t n);
/* Frees a token after overwriting it. */
void sip__client_wipe_free(char *s);
/* Registers p (owned from here on) on the pending list and writes the frame
 * w (freed); `fd` >= 0 goes with it as SCM_RIGHTS. */
sip_error_t *sip__client_send_frame(sip_client_t *c, sip__client_pending_t *p, sip__wbuf_t *w,
                                    int fd);
/* Waits for signal_done, then destroys the waiter's lock and condition. */
void sip__client_wait_done(sip__client_waiter_t *w);
void sip__client_signal_done(sip__client_waiter_t *w);

/* client_info.c: sends a message and waits for its INFO_RESPONSE. */
sip_error_t *sip__client_info_call(sip_client_t *c, const sip__client_info_msg_t *m, char **json);

#endif
