/* sip bench over KServe v2 gRPC: a client as light as h2load (nghttp2's
 * load generator), so that what `sip bench` reports is the server's time,
 * not gRPC core's client.
 *
 * The ModelInfer message (inputs in raw_input_contents) is encoded once,
 * with gRPC's 5-byte length prefix, and so is the header list. Each
 * connection is a plain TCP socket (TCP_NODELAY) carrying one HTTP/2
 * session of Debian's libnghttp2, kept across calls, with an epoll instance
 * of its own. A call is one stream: its HEADERS and DATA frames go out in one
 * send(), then reads until the stream closes, waiting in epoll_wait between
 * them as wrk and h2load do. The answer's message is counted, not decoded;
 * grpc-status from its trailers is the call's status. Nothing sip allocates
 * per call (nghttp2 keeps a small stream object while the call is open, as
 * in h2load). */
#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpc_service.pb-c.h"
#include "tools/cli.h"

#define READ_BUF (64 * 1024)
#define WRITE_BUF (64 * 1024) /* frames are gathered up to this, then sent */
#define WINDOW ((1 << 30) - 1) /* stream and connection windows, as h2load's -w/-W 30 */
#define MAX_NV 10

struct sip_cli_grpc {
  char host[256], port[16], authority[300];
  char timeout[24], auth[1100];
  uint8_t *msg; /* the length-prefixed message */
  size_t msg_len;
  nghttp2_nv nv[MAX_NV];
  size_t n_nv;
};

struct sip_cli_grpc_conn {
  const sip_cli_grpc_t *g;
  int fd; /* -1: not connected */
  int ep;
  nghttp2_session *s;
  int reused;     /* it has carried a whole call */
  int32_t stream; /* the call in flight */
  int closed;     /* its stream closed */
  int status;     /* grpc-status seen, or -1 */
  int http_status;
  uint32_t rst;   /* the stream's RST_STREAM error code, 0: none */
  size_t msg_off; /* message bytes handed to nghttp2 */
  uint8_t *rbuf, *wbuf;
  char err[400];
};

int sip_cli_grpc_new(const char *endpoint, const sip_client_request_t *req, sip_cli_grpc_t **out) {
  *out = NULL;
  sip_cli_grpc_t *g = calloc(1, sizeof *g);
  if (!g) return -1;
  if (sip_cli_parse_hostport(endpoint, "grpc", g->host, sizeof g->host, g->port, sizeof g->port,
                             NULL)) {
    free(g);
    return -1;
  }
  snprintf(g->authority, sizeof g->authority, "%s%s%s:%s", strchr(g->host, ':') ? "[" : "",
           g->host, strchr(g->host, ':') ? "]" : "", g->port);
  size_t n = req->n_inputs;
  Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor *ins = calloc(n ? n : 1, sizeof *ins);
  Inference__ModelInferRequest__InferInputTensor **inp = calloc(n ? n : 1, sizeof *inp);
  Inference__ModelInferRequest__InferRequestedOutputTensor *outs =
      calloc(req->n_outputs ? req->n_outputs : 1, sizeof *outs);
  Inference__ModelInferRequest__InferRequestedOutputTensor **outp =
      calloc(req->n_outputs ? req->n_outputs : 1, sizeof *outp);
  ProtobufCBinaryData *raw = calloc(n ? n : 1, sizeof *raw);
  int64_t *shapes = calloc(n * SIP_MAX_RANK + 1, sizeof *shapes);
  Inference__InferParameter prio = INFERENCE__INFER_PARAMETER__INIT;
  Inference__ModelInferRequest__ParametersEntry pe =
      INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT, *pep = &pe;
  int rc = -1;
  if (!ins || !inp || !outs || !outp || !raw || !shapes) {
    fprintf(stderr, "sip bench: out of memory encoding the gRPC request\n");
    goto done;
  }
  m.model_name = (char *)req->pool;
  for (size_t i = 0; i < n; i++) {
    const sip_tensor_t *t = req->inputs[i];
    if (t->dtype == SIP_DTYPE_STRING) {
      fprintf(stderr, "sip bench: over gRPC, input '%s' is BYTES; expected numeric inputs "
                      "(raw_input_contents)\n", t->name);
      goto done;
    }
    inference__model_infer_request__infer_input_tensor__init(&ins[i]);
    ins[i].name = (char *)t->name;
    ins[i].datatype = (char *)sip_cli_kserve_type(t->dtype);
    ins[i].shape = shapes + i * SIP_MAX_RANK;
    ins[i].n_shape = (size_t)t->rank;
    for (int k = 0; k < t->rank; k++) ins[i].shape[k] = t->dims[k];
    inp[i] = &ins[i];
    raw[i] = (ProtobufCBinaryData){t->nbytes, (uint8_t *)t->data};
  }
  m.inputs = inp;
  m.n_inputs = n;
  m.raw_input_contents = raw;
  m.n_raw_input_contents = n;
  for (size_t i = 0; i < req->n_outputs; i++) {
    inference__model_infer_request__infer_requested_output_tensor__init(&outs[i]);
    outs[i].name = (char *)req->outputs[i];
    outp[i] = &outs[i];
  }
  m.outputs = outp;
  m.n_outputs = req->n_outputs;
  if (req->priority) { /* KServe's "priority" parameter; the deadline is grpc-timeout */
    prio.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    prio.int64_param = req->priority;
    pe.key = "priority";
    pe.value = &prio;
    m.parameters = &pep;
    m.n_parameters = 1;
  }
  size_t len = inference__model_infer_request__get_packed_size(&m);
  if (len > UINT32_MAX || !(g->msg = malloc(len + 5))) {
    fprintf(stderr, "sip bench: a gRPC message of %zu bytes; expected one under 4 GiB that fits "
                    "in memory\n", len);
    goto done;
  }
  g->msg[0] = 0; /* not compressed */
  for (int k = 0; k < 4; k++) g->msg[1 + k] = (uint8_t)(len >> (24 - 8 * k));
  inference__model_infer_request__pack(&m, g->msg + 5);
  g->msg_len = len + 5;
  rc = 0;
done:
  free(ins);
  free(inp);
  free(outs);
  free(outp);
  free(raw);
  free(shapes);
  if (rc) {
    free(g->msg);
    free(g);
    return -1;
  }
#define NV(k, v)                                                                                   \
  g->nv[g->n_nv++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), strlen(k), strlen(v),           \
                                  NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}
  NV(":method", "POST");
  NV(":scheme", "http");
  NV(":path", "/inference.GRPCInferenceService/ModelInfer");
  NV(":authority", g->authority);
  NV("content-type", "application/grpc");
  NV("te", "trailers");
  NV("user-agent", "sip-bench");
  if (req->timeout_ms) {
    snprintf(g->timeout, sizeof g->timeout, "%um", (unsigned)req->timeout_ms);
    NV("grpc-timeout", g->timeout);
  }
  const char *token = getenv("SIP_TOKEN"); /* a token of server.auth (docs/security.md) */
  if (token && *token) {
    snprintf(g->auth, sizeof g->auth, "Bearer %.1000s", token);
    NV("authorization", g->auth);
  }
#undef NV
  *out = g;
  return 0;
}

void sip_cli_grpc_free(sip_cli_grpc_t *g) {
  if (!g) return;
  free(g->msg);
  free(g);
}

/* ---- nghttp2's callbacks ---- */

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user) {
  sip_cli_grpc_conn_t *c = user;
  (void)s;
  (void)flags;
  if (f->hd.stream_id != c->stream) return 0;
  int *num = namelen == 11 && !memcmp(name, "grpc-status", 11) ? &c->status
             : namelen == 7 && !memcmp(name, ":status", 7)     ? &c->http_status
                                                               : NULL;
  if (num) { /* header values are not NUL-terminated */
    char v[16];
    size_t vn = valuelen < sizeof v - 1 ? valuelen : sizeof v - 1;
    memcpy(v, value, vn);
    v[vn] = 0;
    *num = atoi(v);
  } else if (namelen == 12 && !memcmp(name, "grpc-message", 12))
    snprintf(c->err, sizeof c->err, "grpc-message: %.*s", (int)(valuelen < 300 ? valuelen : 300),
             (const char *)value);
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t error, void *user) {
  sip_cli_grpc_conn_t *c = user;
  (void)s;
  if (id == c->stream) {
    c->closed = 1;
    c->rst = error;
  }
  return 0;
}

static ssize_t read_msg(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *user) {
  sip_cli_grpc_conn_t *c = user;
  (void)s;
  (void)id;
  (void)src;
  size_t left = c->g->msg_len - c->msg_off, k = left < len ? left : len;
  memcpy(buf, c->g->msg + c->msg_off, k);
  c->msg_off += k;
  if (c->msg_off == c->g->msg_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)k;
}

/* ---- connections ---- */

sip_cli_grpc_conn_t *sip_cli_grpc_conn_new(const sip_cli_grpc_t *g) {
  sip_cli_grpc_conn_t *c = calloc(1, sizeof *c);
  if (!c || !(c->rbuf = malloc(READ_BUF)) || !(c->wbuf = malloc(WRITE_BUF))) {
    if (c) free(c->rbuf);
    free(c);
    return NULL;
  }
  c->g = g;
  c->fd = -1;
  c->ep = epoll_create1(EPOLL_CLOEXEC);
  if (c->ep < 0) {
    free(c->rbuf);
    free(c->wbuf);
    free(c);
    return NULL;
  }
  return c;
}

static void conn_close(sip_cli_grpc_conn_t *c) {
  if (c->s) nghttp2_session_del(c->s);
  c->s = NULL;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->reused = 0;
}

void sip_cli_grpc_conn_free(sip_cli_grpc_conn_t *c) {
  if (!c) return;
  conn_close(c);
  close(c->ep);
  free(c->rbuf);
  free(c->wbuf);
  free(c);
}

const char *sip_cli_grpc_conn_error(const sip_cli_grpc_conn_t *c) { return c->err; }

static int session_open(sip_cli_grpc_conn_t *c) {
  nghttp2_session_callbacks *cb;
  if (nghttp2_session_callbacks_new(&cb)) return -1;
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  int rc = nghttp2_session_client_new(&c->s, cb, c);
  nghttp2_session_callbacks_del(cb);
  if (rc) return -1;
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW}};
  if (nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 2) ||
      nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, WINDOW))
    return -1;
  return 0;
}

static int conn_open(sip_cli_grpc_conn_t *c) {
  c->fd = sip_cli_connect(c->g->host, c->g->port, c->ep, c->err, sizeof c->err);
  if (c->fd < 0) return -1;
  if (session_open(c)) {
    snprintf(c->err, sizeof c->err, "out of memory for an HTTP/2 session");
    conn_close(c);
    return -1;
  }
  return 0;
}

static int flush(sip_cli_grpc_conn_t *c, const uint8_t *p, size_t n) {
  return sip_cli_send_all(c->fd, p, n, c->err, sizeof c->err);
}

/* Writes what nghttp2 has to send: small frames gathered into one send(). */
static int write_out(sip_cli_grpc_conn_t *c) {
  const uint8_t *d;
  ssize_t n;
  size_t len = 0; /* gathered in wbuf */
  while ((n = nghttp2_session_mem_send(c->s, &d)) > 0) {
    if (len + (size_t)n > WRITE_BUF) {
      if (flush(c, c->wbuf, len)) return -1;
      len = 0;
    }
    if ((size_t)n > WRITE_BUF) {
      if (flush(c, d, (size_t)n)) return -1;
    } else {
      memcpy(c->wbuf + len, d, (size_t)n);
      len += (size_t)n;
    }
  }
  if (n < 0) {
    snprintf(c->err, sizeof c->err, "HTTP/2: %s", nghttp2_strerror((int)n));
    return -1;
  }
  return flush(c, c->wbuf, len);
}

/* Sends and reads until the call's stream closes; *got_any: some of its
 * answer arrived. */
static int pump(sip_cli_grpc_conn_t *c, int *got_any) {
  for (;;) {
    if (write_out(c)) return -1;
    if (c->closed) return 0;
    if (!nghttp2_session_want_read(c->s) && !nghttp2_session_want_write(c->s)) {
      snprintf(c->err, sizeof c->err, "the server ended the HTTP/2 connection (GOAWAY)");
      return -1;
    }
    ssize_t k = recv(c->fd, c->rbuf, READ_BUF, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct epoll_event ev;
      if (epoll_wait(c->ep, &ev, 1, -1) >= 0 || errno == EINTR) continue;
    }
    if (k <= 0) {
      snprintf(c->err, sizeof c->err, "%s%s", k ? "reading the answer: " : "the server closed "
               "the connection mid-call", k ? strerror(errno) : "");
      return -1;
    }
    *got_any = 1;
    ssize_t r = nghttp2_session_mem_recv(c->s, c->rbuf, (size_t)k);
    if (r < 0) {
      snprintf(c->err, sizeof c->err, "HTTP/2: %s", nghttp2_strerror((int)r));
      return -1;
    }
  }
}

/* gRPC's mapping of an HTTP status that came without grpc-status. */
static int status_of_http(int http) {
  switch (http) {
  case 401: return 16; /* UNAUTHENTICATED */
  case 403: return 7;  /* PERMISSION_DENIED */
  case 404: return 12; /* UNIMPLEMENTED */
  case 429: case 502: case 503: case 504: return 14; /* UNAVAILABLE */
  case 400: return 13; /* INTERNAL */
  default: return 2;   /* UNKNOWN */
  }
}

int sip_cli_grpc_call(sip_cli_grpc_conn_t *c) {
  for (int attempt = 0;; attempt++) {
    if (c->fd < 0 && conn_open(c)) return -1;
    int reused = c->reused, got_any = 0;
    c->closed = c->rst = 0;
    c->status = c->http_status = -1;
    c->msg_off = 0;
    nghttp2_data_provider prd = {.read_callback = read_msg};
    c->stream = nghttp2_submit_request(c->s, NULL, c->g->nv, c->g->n_nv, &prd, NULL);
    if (c->stream < 0) {
      snprintf(c->err, sizeof c->err, "HTTP/2: %s", nghttp2_strerror(c->stream));
    } else if (!pump(c, &got_any)) {
      c->reused = 1;
      if (c->status >= 0) return c->status;
      if (c->rst) {
        snprintf(c->err, sizeof c->err, "the server reset the call (HTTP/2 error %u)", c->rst);
        return 14; /* UNAVAILABLE */
      }
      return status_of_http(c->http_status);
    }
    conn_close(c);
    /* A kept connection the server closed while idle: once more on a new one. */
    if (!reused || got_any || attempt) return -1;
  }
}
