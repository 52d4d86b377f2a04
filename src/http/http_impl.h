/* sip — what the HTTP front-end's files share: the front-end's state, one
 * request's state, the route table's entries and the calls between them.
 * Private to src/http/ (http.h is the layer's interface).
 *
 *   http.c        daemon lifecycle, the front-end vtable, MHD's callbacks
 *                 (one request's phases) and the send helpers
 *   routes.c      the route table: method + path -> handler, 404 and 405
 *   auth.c        the request guard: Host, Origin and bearer tokens per API
 *                 group (docs/security.md)
 *   health.c      server-level GETs: live, ready, server metadata, /metrics
 *   models.c      model metadata, config, readiness and statistics
 *   infer.c       inference, and the model metadata cache it reads
 *   repository.c  the model repository extension (index, load, unload)
 *   settings.c    Triton's log and trace settings
 *   framing.c     a request's framing headers checked as RFC 9112 asks
 *   conns.c       connection limits, the header deadline, clients that hang
 *                 up while their request waits
 *   cudashm.c     Triton's CUDA shared memory extension, without GPUs
 *   shm.c         system shared memory: the routes (and the codec's part,
 *                 kserve_impl.h)
 *   dashboard.c   the live dashboard: its page, data and report
 */
#ifndef SIP_HTTP_IMPL_H
#define SIP_HTTP_IMPL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "http/http.h"
#include "server/introspect.h"

/* What a model's inputs look like, for raw binary requests (which carry no
 * shape), and its version, for "model_version" in answers. Filled from the
 * pools JSON when the pool is READY, per model and requested version, and
 * rebuilt when the server's pools changed since (a model repository load
 * or unload). Reference-counted: a request keeps the one it used. */
typedef struct sip__meta {
  char *model;
  char *asked;   /* the version asked for, NULL: the default one */
  uint64_t gen;  /* the registry generation it describes */
  char *version; /* NULL: unversioned */
  sip_io_desc_t *inputs;
  size_t n_inputs;
  atomic_int refs;
  struct sip__meta *next;
} sip__meta_t;

typedef struct sip__http_conns sip__http_conns_t;
typedef struct sip__http_conn sip__http_conn_t;

struct sip__http {
  sip_server_t *s;
  const sip__config_t *cfg;
  /* One daemon per event-loop thread. With more than one, an accept thread
   * (http.c) hands each new connection to the next daemon in turn, so
   * connections spread over the threads. */
  struct MHD_Daemon **d;
  int n_d;
  int listen_fd;          /* the acceptor's socket */
  int wake[2];            /* a write stops the acceptor */
  pthread_t acceptor;
  atomic_uint next_d;     /* the daemon the next connection goes to */
  char address[300];
  atomic_long inflight; /* requests begun and not yet fully answered */
  pthread_mutex_t mu;   /* with cv: stop waits for inflight to reach 0 */
  pthread_cond_t cv;
  pthread_mutex_t cache_mu;
  sip__meta_t *cache;
  pthread_mutex_t sse_mu; /* sse: the open event streams (events.c) */
  struct sip__http_sse *sse;
  sip__http_conns_t *cs; /* connection limits, header deadlines, hang-ups (conns.c) */
  char *tls_cert, *tls_key; /* server.tls: the PEM texts, while the daemons run */
  /* server.dashboard: this daemon serves only the dashboard's routes
   * (sip__http_dashboard_route); others are answered 404. */
  int dashboard_only;
};

typedef enum sip__route_kind {
  R_NONE = 0,
  R_LIVE,
  R_READY,
  R_SERVER,
  R_MODEL,
  R_MODEL_READY,
  R_INFER,
  R_CONFIG,
  R_STATS,
  R_ALL_STATS,
  R_METRICS,
  R_REPO_INDEX,  /* POST /v2/repository/index */
  R_REPO_LOAD,   /* POST /v2/repository/models/{m}/load */
  R_REPO_UNLOAD, /* POST /v2/repository/models/{m}/unload */
  R_LOGGING,     /* GET/POST /v2/logging */
  R_TRACE,       /* GET/POST /v2/trace/setting, /v2/models/{m}/trace/setting */
  R_CUDA_SHM,    /* /v2/cudasharedmemory/... (a server without GPUs) */
  R_SYS_SHM,     /* /v2/systemsharedmemory/... */
  R_EVENTS,      /* GET /v2/events?pool=NAME (Server-Sent Events) */
  R_ADMIN,       /* POST /v2/admin */
  R_STATUS,      /* GET /v2/status: the status document (pools, sessions, sla, alerts) */
  R_DASHBOARD,   /* GET /dashboard: the live dashboard's page */
  R_DASH_DATA,   /* GET /v2/dashboard/data */
  R_DASH_REPORT, /* GET /v2/dashboard/report: the page with a snapshot, self-contained */
} sip__route_kind_t;

typedef struct sip__hreq sip__hreq_t;

/* A GET route's answer (also for HEAD), called once the whole request is
 * in: answering earlier makes MHD close the connection. */
typedef enum MHD_Result (*sip__http_get_fn)(sip__hreq_t *q);

/* A POST route's phases (http.c's on_request calls them in order). */
typedef struct sip__http_post_ops {
  /* Headers are in, the body is not (NULL: nothing to do). May answer at
   * once and set q->refused, or leave an error in q->early. */
  enum MHD_Result (*begin)(sip__hreq_t *q);
  /* A chunk of the body. */
  enum MHD_Result (*body)(sip__hreq_t *q, const char *data, size_t n);
  /* The whole body is in (q->early is answered before this is called). */
  enum MHD_Result (*start)(sip__hreq_t *q);
  /* Called again after the connection was resumed: the answer. */
  enum MHD_Result (*answer)(sip__hreq_t *q);
} sip__http_post_ops_t;

/* One entry of the route table (routes.c). A pattern is matched literally
 * but for its placeholders: {model}, {version} and {region} take one
 * non-empty path segment of name characters (a model name at most 128
 * bytes, a region name at most SIP__SHM_MAX_NAME); {path} takes
 * the rest of the path up to its last '/' (non-empty, any characters: the
 * engine checks repository names and says why one is refused). */
typedef struct sip__http_route {
  const char *pattern;
  sip__route_kind_t kind;
  sip__http_get_fn get;             /* GET and HEAD, or NULL */
  const sip__http_post_ops_t *post; /* POST, or NULL */
} sip__http_route_t;

/* One HTTP request (MHD's con_cls). */
struct sip__hreq {
  sip__http_t *h;
  struct MHD_Connection *conn;
  const sip__http_route_t *route; /* NULL: no such endpoint */
  sip__route_kind_t kind;
  char *model, *version;
  /* The body, written at buf + pad: pad puts the binary section (after the
   * JSON header) on a 64-byte boundary so binary inputs are used in place. */
  uint8_t *buf;
  size_t pad, len, cap;
  int64_t header_len; /* -1: all JSON, 0: raw binary, > 0: JSON header length */
  int compressed;     /* Content-Encoding gzip or deflate: inflated before decoding */
  int compress_out;   /* Accept-Encoding: 0 none, 1 gzip, 2 deflate */
  uint64_t trace_t0;  /* when its headers were in (the receive span's start) */
  int started;        /* decoded and submitted (or failed): the rest is the answer */
  int refused;        /* answered before its body was read (MHD drops the body) */
  sip_error_t *early; /* found in the headers; answered once the body is read */
  unsigned denied;    /* auth.c refused it with this status: answered once it is read */
  int deny_bearer;    /* 401: 1 WWW-Authenticate Bearer, 2 with error="invalid_token" */
  char deny_msg[320];
  sip__ks_request_t *ks;
  struct sip__meta *meta; /* the model's metadata (a reference), or NULL */
  sip__http_conn_t *hc; /* watched for a hang-up while suspended (conns.c) */
  /* Set before the connection is resumed. */
  sip_response_t *resp;
  int resp_oom;
  sip_error_t *err;
  char *answer; /* an operator request's answer (JSON, sip_free), or NULL */
};

/* ---- auth.c: Host, Origin and bearer-token checks (docs/security.md) ------ */

/* The API group of a route (SIP__AUTH_OPEN: health and readiness). */
int sip__http_route_group(sip__route_kind_t kind);
/* Whether a Host header value (NULL: none) names this server, by
 * server.allowed_hosts or the defaults. */
int sip__http_host_allowed(const sip__config_t *cfg, const char *host_header);
/* Once the headers are in: sets q->denied (and the message) when the
 * request may not go to its route. */
void sip__http_guard(sip__hreq_t *q, const char *method);
/* Whether a denied request is answered at once rather than once its body
 * is in: when the body it announces is over server.http_max_body_bytes
 * (MHD then closes the connection; a refused client does not get to send
 * gigabytes first). */
int sip__http_deny_now(sip__hreq_t *q);
/* The answer of a denied request (401 with WWW-Authenticate, 403, 421). */
enum MHD_Result sip__http_send_denied(sip__hreq_t *q);

/* ---- events.c: GET /v2/events as Server-Sent Events ----------------------- */
typedef struct sip__http_sse sip__http_sse_t;
enum MHD_Result sip__http_events(sip__hreq_t *q);
/* ?exclude=: a comma-separated list of event type names (NULL or "": none;
 * empty items are skipped) into a bit set, bit t for type t; an unknown
 * name is INVALID_ARGUMENT listing the known ones. */
sip_error_t *sip__http_event_exclude(const char *list, uint64_t *mask);
/* Ends every event stream (before the daemons stop: none stays suspended). */
void sip__http_sse_stop(sip__http_t *h);

/* ---- dashboard.c: the live dashboard (docs/dashboard.md) ------------------- */
enum MHD_Result sip__http_dashboard(sip__hreq_t *q);
enum MHD_Result sip__http_dashboard_data(sip__hreq_t *q);
enum MHD_Result sip__http_dashboard_report(sip__hreq_t *q);
/* 1 for the routes server.dashboard's own port serves: the page, its data
 * and report, the event stream, /metrics and the health checks (all
 * read-only). */
int sip__http_dashboard_route(sip__route_kind_t kind);
/* The page (owned, sip__free; *len its length; NULL when out of memory):
 * the template with its styles and scripts inlined. With `snapshot` (JSON
 * text of sip__dash_data, borrowed) it is the report: the snapshot in a
 * <script type="application/json" id="sip-snapshot"> element, then
 * SIP__DASH_HISTORY_EMPTY, which the page's export button replaces with
 * the history it recorded. */
char *sip__dash_render(const char *snapshot, size_t *len);
#define SIP__DASH_HISTORY_EMPTY "<script type=\"application/json\" id=\"sip-history\">null</script>"
/* What the dashboard shows (owned): the status document (pools with their
 * sessions, queues, latency and batch histograms, pipelines, connections)
 * with each pool's settings (backend, priority, pool_size, model_path,
 * dynamic_batching, source), "time_us" (wall clock), "draining" and
 * "repository" (the repository index's models, failed loads with their
 * reason). NULL when out of memory. */
json_t *sip__dash_data(sip_server_t *s);

/* ---- routes.c ------------------------------------------------------------ */

/* The route of `url` (MHD has percent-decoded it and removed the query), or
 * NULL when there is none (or out of memory). *model and *version get owned
 * copies of the path's {model}/{path} and {version} (left alone when the
 * pattern has none). */
const sip__http_route_t *sip__http_route_match(const char *url, char **model, char **version);
/* 0 when `r` answers `method`. Else the status to answer: 404 (r is NULL)
 * or 405, with the message written to msg and, for 405, the Allow header's
 * value in *allow. */
unsigned sip__http_route_refusal(const sip__http_route_t *r, const char *url, const char *method,
                                 char *msg, size_t msg_n, const char **allow);
/* Answers a request no POST route takes: the GET routes, 404 and 405. */
enum MHD_Result sip__http_answer(sip__hreq_t *q, const char *url, const char *method);

/* ---- framing.c: a request's framing headers (RFC 9112) ------------------- */

/* One header field (borrowed strings). */
typedef struct sip__http_field {
  const char *name, *value;
} sip__http_field_t;
/* Host, Content-Length and Transfer-Encoding fields looked at, at most. */
#define SIP__HTTP_FRAMING_FIELDS 16
/* 0 when the request's framing is sound; else the status to answer (400:
 * no Host in HTTP/1.1, several Host, differing or malformed Content-Length,
 * Transfer-Encoding with Content-Length, chunked not last; 501: a transfer
 * coding other than chunked; 413: Content-Length over max_body, however
 * large) with the message in msg. `f` holds the request's fields (others
 * than those three are ignored); version is e.g. "HTTP/1.1". Pure. */
unsigned sip__http_framing_check(const char *version, const sip__http_field_t *f, size_t n,
                                 uint64_t max_body, char *msg, size_t msg_n);
/* The same for a connection's request, its fields read from MHD. */
unsigned sip__http_framing_problem(struct MHD_Connection *c, const char *version,
                                   uint64_t max_body, char *msg, size_t msg_n);

/* ---- conns.c: connection limits, header deadlines, hang-ups ------------- */

sip_error_t *sip__http_conns_init(sip__http_t *h);
void sip__http_conns_free(sip__http_t *h);
/* MHD's own connection limit for each daemon, from
 * server.http_max_connections (max): the connections sip admits, and as
 * many again shut down to make room (conns.c) that MHD has yet to close.
 * Lower, MHD would drop connections sip admitted, unanswered. */
#define SIP__HTTP_MHD_LIMIT(max) (2 * (max))
/* Accept thread: admits a new connection (0), or answers it 503 and closes
 * it (-1) past server.http_max_connections_per_ip (held to half of
 * server.http_max_connections), or at server.http_max_connections when no
 * connection waits for a request's headers (else the one waiting longest
 * is closed to make room). */
int sip__http_conns_admit(sip__http_t *h, int fd, const struct sockaddr *sa, socklen_t sl);
/* Accept thread: MHD_add_connection refused (and closed) fd. */
void sip__http_conns_forget_fd(sip__http_t *h, int fd);
/* Accept thread: the descriptor to poll too, and what to call when it is
 * readable or the time it returned has passed: shuts down connections past
 * their header deadline, wakes MHD to read the end of clients that hung up
 * and cancels their requests waiting suspended.
 * Returns the ms until the next deadline (-1: none). */
int sip__http_conns_fd(sip__http_t *h);
int sip__http_conns_run(sip__http_t *h);
/* MHD's NOTIFY_CONNECTION. */
void sip__http_conns_notify(sip__http_t *h, struct MHD_Connection *c, void **socket_context,
                            enum MHD_ConnectionNotificationCode code);
/* A request's headers are in: its connection's deadline is met. */
void sip__http_conns_headers_in(sip__http_t *h, struct MHD_Connection *c);
/* A request ended (MHD's NOTIFY_COMPLETED): when it completed, the next
 * request's headers have the deadline from now. */
void sip__http_conns_request_done(sip__http_t *h, struct MHD_Connection *c,
                                  enum MHD_RequestTerminationCode toe);
/* Before c is suspended for a request: from now until unwatched, a hang-up
 * of its client (also one before this call) cancels *token (the
 * connection's), which goes on the request. Returns what
 * sip__http_conns_unwatch takes (NULL: not watched, *token NULL). Any
 * thread may unwatch. */
sip__http_conn_t *sip__http_conns_watch(sip__http_t *h, struct MHD_Connection *c,
                                        sip_cancel_token_t **token);
void sip__http_conns_unwatch(sip__http_t *h, sip__http_conn_t *hc);
/* The connections open now: admitted and not yet closed by MHD (the
 * number the limits compare). Any thread. */
long sip__http_conns_open(sip__http_t *h);

/* ---- http.c: answers ----------------------------------------------------- */

/* Queues `r` (consumed; NULL: out of memory, MHD_NO) with a Content-Type. */
enum MHD_Result sip__http_queue(struct MHD_Connection *c, unsigned status,
                                struct MHD_Response *r, const char *ctype);
/* Sends an owned sip__malloc'd body. */
enum MHD_Result sip__http_send_owned(struct MHD_Connection *c, unsigned status, const char *ctype,
                                     char *body, size_t len);
/* {"error": msg} with `status`. */
enum MHD_Result sip__http_send_error_msg(struct MHD_Connection *c, unsigned status,
                                         const char *msg);
/* An error (consumed), with the HTTP status of its code. */
enum MHD_Result sip__http_send_error(struct MHD_Connection *c, sip_error_t *e);
/* Sends a JSON value (consumed; NULL: 500 out of memory). */
enum MHD_Result sip__http_send_json(struct MHD_Connection *c, unsigned status, json_t *v);

/* Collects a small JSON body (at most 64 KiB; `what` names the request in
 * the error past that). */
enum MHD_Result sip__http_small_body(sip__hreq_t *q, const char *data, size_t n, const char *what);
/* The small body as a JSON object (owned; an empty body is {}), or NULL
 * after answering 400 saying why, with `expect` naming what was expected. */
json_t *sip__http_body_object(sip__hreq_t *q, const char *expect);

/* ---- settings.c: Triton's log and trace settings (core/settings.h) -------- */
enum MHD_Result sip__http_logging_get(sip__hreq_t *q);
enum MHD_Result sip__http_trace_get(sip__hreq_t *q);
extern const sip__http_post_ops_t sip__http_logging_ops;
extern const sip__http_post_ops_t sip__http_trace_ops;
extern const sip__http_post_ops_t sip__http_admin_ops; /* POST /v2/admin (docs/availability.md) */

/* ---- cudashm.c: Triton's CUDA shared memory extension, without GPUs ---------- */
enum MHD_Result sip__http_cudashm_status(sip__hreq_t *q);
extern const sip__http_post_ops_t sip__http_cudashm_unregister_ops;
extern const sip__http_post_ops_t sip__http_cudashm_register_ops;

/* ---- shm.c: system shared memory (the server's regions, core/shm.h) --------- */
enum MHD_Result sip__http_shm_status(sip__hreq_t *q);
extern const sip__http_post_ops_t sip__http_shm_unregister_ops;
extern const sip__http_post_ops_t sip__http_shm_register_ops;
/* The check behind register, on a parsed body object (fuzz_http): "key" a
 * string (required), "offset" an integer >= 0 (default 0), "byte_size" an
 * integer >= 0 (required); no other fields. *key points into `b`. The range
 * itself is checked by sip__shm_register. INVALID_ARGUMENT saying why. */
sip_error_t *sip__http_shm_register_args(const json_t *b, const char **key, uint64_t *offset,
                                         uint64_t *byte_size);

/* ---- models.c ------------------------------------------------------------ */

enum MHD_Result sip__http_model_meta(sip__hreq_t *q);
enum MHD_Result sip__http_model_config(sip__hreq_t *q);
enum MHD_Result sip__http_model_ready(sip__hreq_t *q);
enum MHD_Result sip__http_model_stats(sip__hreq_t *q);
enum MHD_Result sip__http_all_stats(sip__hreq_t *q);

/* ---- health.c ------------------------------------------------------------ */

enum MHD_Result sip__http_live(sip__hreq_t *q);
enum MHD_Result sip__http_ready(sip__hreq_t *q);
enum MHD_Result sip__http_status(sip__hreq_t *q);
enum MHD_Result sip__http_server_meta(sip__hreq_t *q);
enum MHD_Result sip__http_metrics(sip__hreq_t *q);

/* ---- infer.c ------------------------------------------------------------- */

extern const sip__http_post_ops_t sip__http_infer_ops;
/* Drops a reference to a metadata cache entry (NULL: no-op). */
void sip__http_meta_unref(sip__meta_t *m);
/* Empties the front-end's metadata cache (at stop). */
void sip__http_meta_clear(sip__http_t *h);

/* ---- repository.c -------------------------------------------------------- */

extern const sip__http_post_ops_t sip__http_repo_ops;

#endif
