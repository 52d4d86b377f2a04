/* sip — what the native-protocol front-end's files share. Private to
 * src/transport/ (listener.h is the layer's interface).
 *
 *   listener.c  the epoll loop: accept, read frames, lifecycle, the vtable
 *   endpoint.c  the endpoint kinds (ipc://, unix://, tcp://): parse, bind
 *               and listen, connect
 *   conn.c      a connection's output: references, the queue, answers
 *               written from engine threads
 *   handlers.c  one function per message type of the protocol
 *   frame.c     the wire codec (frame.h)
 *
 * Threads: one loop thread owns the listeners and every connection's
 * reading; engine threads (completions) and the repository's loader thread
 * write answers through sip__conn_write_answer.
 */
#ifndef SIP_TRANSPORT_LISTENER_IMPL_H
#define SIP_TRANSPORT_LISTENER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/auth.h"
#include "core/core.h"
#include "core/queue.h"
#include "core/shm.h"
#include "transport/frame.h"

#define MAX_LISTENERS 16
/* Shared memory regions one connection may hold registered at once. */
#define SIP__CONN_MAX_REGIONS 64
/* File descriptors kept from one frame's SCM_RIGHTS (more are closed and
 * the frame refused). */
#define SIP__CONN_MAX_FDS 4
enum { TAG_LISTENER = 1, TAG_CONN = 2, TAG_WAKE = 3 };
#define TAG(kind, v) (((uint64_t)(kind) << 56) | (uint64_t)(v))

/* Bytes waiting to be sent on a connection, in order. */
typedef struct sip__chunk {
  SIP__FIFO_LINK(struct sip__chunk);
  uint8_t *data;
  size_t len, off;
} sip__chunk_t;
typedef struct sip__chunk_fifo {
  SIP__FIFO_FIELDS(sip__chunk_t);
} sip__chunk_fifo_t;
SIP__FIFO_DEFINE(chunks, sip__chunk_fifo_t, sip__chunk_t)

/* Bytes of received request frames held by one connection, or by all of
 * them (the parent): charged as a frame's buffer grows, given back when the
 * frame is released (by the loop, or by the last request viewing it, on any
 * thread). Reference-counted: frames outlive their connection. */
typedef struct sip__rx_budget {
  atomic_size_t used;
  atomic_int refs;
  size_t limit;
  struct sip__rx_budget *parent; /* all connections' budget, or NULL */
} sip__rx_budget_t;

typedef struct sip__conn {
  int fd;
  atomic_int refs;     /* the loop's, plus writers' in flight */
  pthread_mutex_t wmu; /* output queue, epollout, dead */
  int dead;            /* closed by the loop: writers drop their answers */
  int is_tcp;
  sip_cancel_token_t *cancel; /* carried by every request of this connection */
  uint32_t gen;
  uint32_t slot;
  uint8_t hdr[SIP__FRAME_HEADER_SIZE];
  size_t hdr_got;
  sip__frame_header_t h;
  /* The payload being read: a buffer that grows as bytes arrive, up to the
   * announced length (listener.c), charged to `budget`. */
  int in_payload;
  uint8_t *rx;
  size_t rx_cap;
  size_t got;
  size_t skip;          /* bytes of a refused frame still to be read and dropped */
  sip__rx_budget_t *budget;  /* this connection's; its parent is the listener set's */
  sip_buf_t *payload;   /* the complete payload while its frame is handled */
  uint64_t frame_us;    /* when the first byte of the current frame's header came (or,
                           while read ahead of a paused connection, when last swept) */
  uint64_t last_rx_us;  /* when bytes last came */
  sip__chunk_fifo_t out; /* zeroed: empty */
  size_t unsent;    /* bytes held by `out`, with each chunk's own size */
  int epollout;
  /* Not read from while its unsent answers pass ls->max_unsent, or the
   * bytes of its requests in flight (budget->used) ls->max_in_flight; read
   * again once both drop below half their bound (set and cleared under
   * wmu). */
  atomic_int read_paused;
  int paused_in_flight; /* paused for its requests in flight (loop only) */
  atomic_int closing; /* close once the output is flushed; read nothing more */
  uint64_t closing_us; /* when the stall sweep first saw it closing (0: not yet) */
  /* Descriptors that arrived (SCM_RIGHTS) with the frame being read: only
   * SHM_REGISTER takes one; the loop closes what is left after each frame. */
  int fds[SIP__CONN_MAX_FDS];
  int n_fds;
  int fds_dropped; /* more arrived than fds[] holds, or the control data was cut */
  /* Those that came with the first bytes of the next frame, read together
   * with the end of this one (listener.c): given to it once this one is
   * handled. */
  int fds_ahead[SIP__CONN_MAX_FDS];
  int n_fds_ahead;
  int fds_ahead_dropped;
  int hdr_ahead; /* hdr_got bytes of the next header came with the end of the last frame */
  /* Regions this connection registered (loop only; created on the first
   * SHM_REGISTER, freed when the connection closes). */
  sip__shm_set_t *shm;
  /* API groups this connection may use (1 << sip__auth_group_t; auth.c),
   * and whether its peer is local (a unix socket or loopback). */
  unsigned groups;
  bool local;
} sip__conn_t;

typedef struct sip__listener {
  int fd;
  int is_tcp;
  char *address;     /* as reported */
  char *unlink_path; /* unix socket file to remove on stop */
} sip__listener_t;

typedef struct sip__listener_set sip__listener_set_t;
struct sip__listener_set {
  sip_server_t *srv;
  size_t max_frame;
  int epfd, wakefd;
  pthread_t thread;
  int thread_started;
  sip__listener_t ls[MAX_LISTENERS];
  size_t n_ls;
  sip__conn_t **slots; /* changed by the loop under slots_mu; writers look up under it */
  uint32_t n_slots;
  long n_paused_in_flight; /* connections paused for their requests in flight (loop only) */
  uint32_t next_gen;
  pthread_mutex_t slots_mu;
  atomic_int stop;
  atomic_long open_conns[2]; /* [0] unix, [1] tcp */
  /* Out of descriptors (EMFILE/ENFILE): a descriptor held in reserve is
   * given up to accept and close a pending connection, so the listener
   * stops firing; when that fails too the listeners are disarmed until
   * listeners_paused_until_us (0: armed). Loop only. */
  int reserve_fd;
  uint64_t listeners_paused_until_us;
  /* "accept failed" is logged at most once a second; the lines left out
   * in between are counted in the next one. */
  uint64_t accept_log_us;
  unsigned long accept_log_suppressed;
  /* A connection whose answers not yet sent pass max_unsent (bytes) is not
   * read from until they drop below half of it. */
  size_t max_unsent;
  /* Request bytes in flight on one connection before it is not read from:
   * max_unsent, and at least 1 MiB (pipelining that much costs little). */
  size_t max_in_flight;
  /* Connection limit (server.max_connections); frame_timeout_us: a frame
   * whose bytes stop coming this long closes its connection (0: never),
   * checked by a sweep every sweep_us. */
  long max_conns;
  uint64_t frame_timeout_us, sweep_us, next_sweep_us;
  sip__rx_budget_t *rx_total; /* server.max_receive_bytes; parent of every connection's */
  size_t conn_rx_limit;  /* server.max_connection_receive_bytes */
  uint64_t refuse_log_us; /* "connection refused" lines: at most one a second */
  unsigned long refuse_log_suppressed;
  const sip__auth_t *auth; /* server.auth (the config's); tokens per API group */
};

/* A requested output's destination in one of the connection's regions,
 * viewed when the request arrived (the view keeps the mapping alive). */
typedef struct sip__out_dst {
  char *output, *region;
  uint64_t offset, size;
  sip_buf_t *owner;
  uint8_t *data;
} sip__out_dst_t;

/* An infer request in flight: where its answer goes. */
typedef struct sip__pending {
  sip__listener_set_t *ls;
  uint64_t conn_id;
  sip__out_dst_t *dst; /* outputs going to shared memory */
  size_t n_dst;
} sip__pending_t;


/* A connection's id: generation << 32 | slot. */
static inline uint64_t conn_id(const sip__conn_t *c) { return (uint64_t)c->gen << 32 | c->slot; }

/* ---- endpoint.c ---------------------------------------------------------- */

typedef struct sip__endpoint_kind sip__endpoint_kind_t;

/* A parsed endpoint. */
typedef struct sip__endpoint {
  const sip__endpoint_kind_t *kind;
  char path[108]; /* unix: the socket file (sun_path's size) */
  char host[256]; /* tcp: the host without brackets; "": every address */
  char port[6];   /* tcp: 0..65535, 0 = ephemeral */
  unsigned mode;  /* unix: the socket file's permissions (server.socket_mode) */
  uid_t uid;      /* unix: its owner and group; -1: left as created */
  gid_t gid;
} sip__endpoint_t;

/* A unix socket's permissions and owner (server.socket_mode, socket_owner,
 * socket_group), in place before anyone can connect. */
typedef struct sip__sock_perm {
  unsigned mode;
  uid_t uid; /* -1: unchanged */
  gid_t gid;
} sip__sock_perm_t;

/* One endpoint scheme. */
struct sip__endpoint_kind {
  const char *scheme; /* with "://" */
  int is_tcp;         /* its connections are counted as "tcp", else "unix" */
  /* Parses what follows the scheme (INVALID_ARGUMENT naming the problem). */
  sip_error_t *(*parse)(const char *rest, sip__endpoint_t *out);
  /* Binds and listens (non-blocking): l->fd and l->address, and for unix
   * sockets l->unlink_path. UNAVAILABLE when it cannot. */
  sip_error_t *(*listen)(const sip__endpoint_t *ep, sip__listener_t *l);
  /* A blocking socket connected to the endpoint, or -1 with errno. */
  int (*connect)(const sip__endpoint_t *ep);
};

/* Parses "ipc:///path", "unix:///path" or "tcp://host:port" (IPv6 hosts in
 * brackets: tcp://[::1]:port). */
sip_error_t *sip__endpoint_parse(const char *endpoint, sip__endpoint_t *out);
/* Parses and listens; l->fd is -1 on error. The address is reported as
 * unix://PATH or tcp://HOST:PORT with the port bound (IPv6 in brackets). */
sip_error_t *sip__endpoint_listen(const char *endpoint, const sip__sock_perm_t *perm,
                                  sip__listener_t *l);
/* Resolves socket_owner/socket_group (names or numeric ids; NULL: left
 * alone) and the mode (0: 0600). INVALID_ARGUMENT naming an unknown one. */
sip_error_t *sip__sock_perm_resolve(const char *owner, const char *group, unsigned mode,
                                    sip__sock_perm_t *out);

/* ---- conn.c -------------------------------------------------------------- */

/* A budget of `limit` bytes under `parent` (a reference is taken; NULL:
 * none); NULL when out of memory. */
sip__rx_budget_t *sip__rx_budget_new(size_t limit, sip__rx_budget_t *parent);
void sip__rx_budget_unref(sip__rx_budget_t *b);
/* Charges n bytes to b and its parent: 0, or 1 when b's limit would be
 * passed, 2 when the parent's would (nothing is charged then). */
int sip__rx_budget_charge(sip__rx_budget_t *b, size_t n);
/* Gives back n bytes charged to b (and its parent). Any thread. */
void sip__rx_budget_release(sip__rx_budget_t *b, size_t n);
/* Loop only: frees the payload being read and gives its bytes back. */
void sip__conn_drop_rx(sip__conn_t *c);

/* Drops a reference; the last one closes the descriptor and frees it. */
void sip__conn_unref(sip__conn_t *c);
/* Loop only: closes a connection (its queued requests are cancelled). */
void sip__conn_close(sip__listener_set_t *ls, sip__conn_t *c);
/* Sends queued chunks until done or the socket is full (then EPOLLOUT is
 * armed). Caller holds c->wmu. Returns -1 on a socket error. */
int sip__conn_send_queued(sip__listener_set_t *ls, sip__conn_t *c);
/* Loop only: writes what it can. Returns -1 when the connection was closed. */
int sip__conn_flush(sip__listener_set_t *ls, sip__conn_t *c);
/* Loop only: pauses reading `c` while the bytes of its requests in flight
 * pass ls->max_in_flight (a client pipelining faster than its pool runs
 * holds no more of the server's memory than one that stops reading);
 * sip__conn_resume_in_flight reads such connections again once they and
 * their unsent answers drop below half of it. */
void sip__conn_pause_in_flight(sip__listener_set_t *ls, sip__conn_t *c);
/* Counts an INFER_REQUEST payload refused while decoding (rejected.c). */
void sip__note_rejected_frame(sip__listener_set_t *ls, const uint8_t *payload, size_t len,
                              const sip_error_t *e);
void sip__conn_resume_in_flight(sip__listener_set_t *ls);
/* Loop only: queues an encoded frame (taken); sip__conn_flush sends it. */
void sip__conn_queue_wbuf(sip__listener_set_t *ls, sip__conn_t *c, sip__wbuf_t *w);
/* Loop only: closes the descriptors that came with the last frame. */
void sip__conn_close_fds(sip__conn_t *c);
/* ---- auth.c -------------------------------------------------------------- */

/* A new connection's open groups, from its peer being local or not. */
void sip__conn_auth_init(sip__listener_set_t *ls, sip__conn_t *c, bool local);
/* Before a frame is handled: 1 when the connection may send it; else 0,
 * the frame answered (AUTH itself is handled here, or the refusal sent and
 * the connection closing). */
int sip__conn_authorize(sip__listener_set_t *ls, sip__conn_t *c);

/* Protocol violation: answer with an ERROR frame, then close. */
void sip__conn_error(sip__listener_set_t *ls, sip__conn_t *c, uint64_t request_id, sip_error_t *e);
/* Any thread: writes an answer (taken) to the connection `id` if it is
 * still open: directly when nothing is queued before it, else behind the
 * queue (the loop flushes). */
void sip__conn_write_answer(sip__listener_set_t *ls, uint64_t id, sip__wbuf_t *w);

/* ---- handlers.c ---------------------------------------------------------- */

/* Loop only: acts on the complete frame in c->h / c->payload. */
void sip__handle_frame(sip__listener_set_t *ls, sip__conn_t *c);
/* Loop only: answers the frame in c->h, refused before its payload was
 * read, with the error (taken): an INFER_RESPONSE for inference requests,
 * an INFO_RESPONSE {"error": message} for the others. */
void sip__handle_refused(sip__listener_set_t *ls, sip__conn_t *c, sip_error_t *e);

#endif
