/* sip — the gRPC front-end's lifecycle and call handling on gRPC's C core.
 *
 * One completion queue, server.grpc_threads threads taking its events.
 * Every operation's tag is a sip__gtag_t naming what to run. A call is accepted
 * (grpc_server_request_call, one outstanding per thread), its first message
 * received, decoded and dispatched by method path; answers are started from
 * whichever thread has them (an engine thread for inference). A call is
 * reference-counted: each operation in flight holds a reference, and the
 * last one frees it. RECV_CLOSE_ON_SERVER tells when a client cancelled (or
 * its deadline passed): the call's requests are cancelled in the engine.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/auth.h"
#include "core/redact.h"
#include "grpc/grpc_frontend.h"
#include "grpc/grpc_impl.h"

#define CONTAINER(p, T, m) ((T *)(void *)((char *)(p) - offsetof(T, m)))

static void request_next(sip__grpc_t *g);
static void start_recv(sip__gcall_t *c);

/* ---- calls ------------------------------------------------------------------- */

static void call_free(sip__gcall_t *c) {
  if (c->call) grpc_call_unref(c->call);
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->md);
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  if (c->sent) grpc_byte_buffer_destroy(c->sent);
  if (c->has_details) grpc_slice_unref(c->status_details);
  while (c->out_head) {
    sip__gout_t *o = c->out_head;
    c->out_head = o->next;
    grpc_byte_buffer_destroy(o->bb);
    sip__free(o);
  }
  sip_cancel_token_free(c->cancel);
  pthread_mutex_destroy(&c->mu);
  sip__free(c);
}

void sip__grpc_call_ref(sip__gcall_t *c) { atomic_fetch_add(&c->refs, 1); }

void sip__grpc_call_unref(sip__gcall_t *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) call_free(c);
}

int64_t sip__grpc_timeout_ms(const sip__gcall_t *c) {
  gpr_timespec d = c->details.deadline;
  if (gpr_time_cmp(d, gpr_inf_future(d.clock_type)) == 0) return 0;
  gpr_timespec left = gpr_time_sub(d, gpr_now(d.clock_type));
  if (left.tv_sec < 0 || (left.tv_sec == 0 && left.tv_nsec == 0)) return -1;
  int64_t ms = left.tv_sec * 1000 + (left.tv_nsec + 999999) / 1000000;
  return ms > 0 ? ms : 1;
}

grpc_byte_buffer *sip__grpc_bytes(uint8_t *msg, size_t len) {
  grpc_slice s;
  if (len) {
    s = grpc_slice_new(msg, len, sip__free);
  } else {
    sip__free(msg);
    s = grpc_empty_slice();
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

/* Starts `ops` on the call with `tag`, holding a reference until it completes. */
static void start(sip__gcall_t *c, const grpc_op *ops, size_t n, sip__gtag_t *tag) {
  sip__grpc_call_ref(c);
  grpc_call_error err = grpc_call_start_batch(c->call, ops, n, tag, NULL);
  if (err != GRPC_CALL_OK) {
    sip__log(SIP__LOG_ERROR, "grpc batch refused", "error=%d", (int)err);
    atomic_fetch_sub(&c->refs, 1); /* the caller still holds one */
  }
}

void sip__grpc_reply_bytes(sip__gcall_t *c, sip_error_t *err, uint8_t *msg, size_t len) {
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (!err) {
    if (!msg && !(msg = sip__malloc(1))) err = SIP__OOM();
    else if (!(c->sent = sip__grpc_bytes(msg, len))) err = SIP__OOM();
    msg = NULL;
    if (!err) {
      ops[n].op = GRPC_OP_SEND_MESSAGE;
      ops[n++].data.send_message.send_message = c->sent;
    }
  }
  sip__free(msg);
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status =
      err ? (grpc_status_code)sip_code_grpc_status(sip_error_code(err)) : GRPC_STATUS_OK;
  if (err) {
    size_t rn = 0;
    const char *m = sip_error_message(err);
    char *red = sip__redacted(m, strlen(m), &rn); /* no server directories (core/redact.h) */
    c->status_details = grpc_slice_from_copied_string(red ? red : m);
    sip__free(red);
    c->has_details = 1;
    ops[n].data.send_status_from_server.status_details = &c->status_details;
    sip_error_free(err);
  }
  n++;
  start(c, ops, n, &c->send_tag);
}

void sip__grpc_reply(sip__gcall_t *c, sip_error_t *err, const ProtobufCMessage *resp) {
  uint8_t *msg = NULL;
  size_t len = 0;
  if (!err && resp) err = sip__grpc_pack(resp, &msg, &len);
  sip__grpc_reply_bytes(c, err, msg, len);
}

/* ---- the operations' completions ------------------------------------------------ */

static void on_send(sip__gtag_t *t, int ok) {
  sip__gcall_t *c = CONTAINER(t, sip__gcall_t, send_tag);
  if (c->method && c->method->stream) {
    sip__grpc_stream_sent(c, ok);
  } else if (c->sent) {
    grpc_byte_buffer_destroy(c->sent);
    c->sent = NULL;
  }
  sip__grpc_call_unref(c);
}

static void on_close(sip__gtag_t *t, int ok) {
  sip__gcall_t *c = CONTAINER(t, sip__gcall_t, close_tag);
  (void)ok;
  pthread_mutex_lock(&c->mu);
  c->closed = 1;
  int cancel = c->cancelled && c->cancel;
  pthread_mutex_unlock(&c->mu);
  if (cancel) sip_server_cancel(c->g->s, c->cancel);
  sip__grpc_call_unref(c);
}

static void slice_release(void *p) {
  grpc_slice_unref(*(grpc_slice *)p);
  sip__free(p);
}

/* The message's bytes as one slice (a reference): the received slice itself
 * when the message came in one and uncompressed (no copy), else all of it
 * copied into one. */
static grpc_slice message_slice(grpc_byte_buffer *bb) {
  if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE &&
      bb->data.raw.slice_buffer.count == 1)
    return grpc_slice_ref(bb->data.raw.slice_buffer.slices[0]);
  grpc_slice s = grpc_empty_slice();
  grpc_byte_buffer_reader r;
  if (grpc_byte_buffer_reader_init(&r, bb)) {
    s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
  }
  return s;
}

static void on_recv(sip__gtag_t *t, int ok) {
  sip__gcall_t *c = CONTAINER(t, sip__gcall_t, recv_tag);
  grpc_byte_buffer *bb = c->recv;
  c->recv = NULL;
  grpc_slice s = ok && bb ? message_slice(bb) : grpc_empty_slice();
  if (bb) grpc_byte_buffer_destroy(bb);
  const uint8_t *data = GRPC_SLICE_START_PTR(s);
  size_t len = GRPC_SLICE_LENGTH(s);
  const sip__gmethod_t *m = c->method;
  /* A handler's tensors may view the bytes: they hold the slice. Not an
   * inlined slice (a small message readall copied): its bytes live inside
   * `s` itself, on this stack; without a backing the decoder copies them. */
  sip_buf_t *backing = NULL;
  if ((m->stream || m->raw) && ok && bb && s.refcount) {
    grpc_slice *held = sip__malloc(sizeof *held);
    if (held) {
      *held = grpc_slice_ref(s);
      backing = sip_buf_wrap((void *)data, len, slice_release, held); /* releases on failure */
    }
  }
  if (m->stream) {
    sip__grpc_stream_message(c, data, len, backing, !(ok && bb));
    if (ok && bb) start_recv(c);
  } else if (!ok || !bb) {
    sip__grpc_reply(c, sip_error_new(SIP_INVALID_ARGUMENT, "the call carried no request "
                                     "message; expected one %s", m->req ? m->req->name :
                                     "inference.ModelInferRequest"), NULL);
  } else if (m->raw) {
    m->raw(c, data, len, backing);
  } else {
    ProtobufCMessage *req = sip__grpc_unpack(m->req, data, len);
    if (!req)
      sip__grpc_reply(c,
                      sip_error_new(SIP_INVALID_ARGUMENT,
                                    "the message is not a valid %s (or a string field holds a "
                                    "NUL byte)", m->req->name),
                      NULL);
    else
      m->unary(c, req);
    sip__grpc_msg_free(req);
  }
  sip_buf_unref(backing);
  grpc_slice_unref(s);
  sip__grpc_call_unref(c);
}

static void start_recv(sip__gcall_t *c) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->recv;
  start(c, &op, 1, &c->recv_tag);
}

static const sip__gmethod_t *find_method(grpc_slice path) {
  size_t n = GRPC_SLICE_LENGTH(path);
  const char *p = (const char *)GRPC_SLICE_START_PTR(path);
  for (size_t i = 0; i < sip__grpc_n_methods; i++)
    if (strlen(sip__grpc_methods[i].path) == n && !memcmp(sip__grpc_methods[i].path, p, n))
      return &sip__grpc_methods[i];
  return NULL;
}

static void on_accept(sip__gtag_t *t, int ok) {
  sip__gcall_t *c = CONTAINER(t, sip__gcall_t, accept_tag);
  if (!ok) { /* shutting down: the request for a call was cancelled */
    call_free(c);
    return;
  }
  request_next(c->g);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  start(c, &op, 1, &c->close_tag);
  c->method = find_method(c->details.method);
  if (!c->method) {
    grpc_slice p = c->details.method;
    sip__grpc_reply(c, sip_error_new(SIP_UNIMPLEMENTED, "unknown method '%.*s'; expected one of "
                                     "inference.GRPCInferenceService or grpc.health.v1.Health",
                                     (int)(GRPC_SLICE_LENGTH(p) > 200 ? 200 : GRPC_SLICE_LENGTH(p)),
                                     (const char *)GRPC_SLICE_START_PTR(p)), NULL);
  } else {
    sip_error_t *e = sip__grpc_authorize(c); /* auth.c */
    if (e) sip__grpc_reply(c, e, NULL);
    else start_recv(c);
  }
  sip__grpc_call_unref(c);
}

/* Asks gRPC for the next call. */
static void request_next(sip__grpc_t *g) {
  sip__gcall_t *c = sip__calloc(1, sizeof *c);
  if (!c) {
    sip__log(SIP__LOG_ERROR, "grpc cannot accept calls", "reason=\"out of memory\"");
    return;
  }
  c->g = g;
  atomic_init(&c->refs, 1);
  c->accept_tag.fn = on_accept;
  c->recv_tag.fn = on_recv;
  c->send_tag.fn = on_send;
  c->close_tag.fn = on_close;
  pthread_mutex_init(&c->mu, NULL);
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->md);
  grpc_call_error err = grpc_server_request_call(g->server, &c->call, &c->details, &c->md, g->cq,
                                                 g->cq, &c->accept_tag);
  if (err != GRPC_CALL_OK) call_free(c);
}

/* ---- the front-end ----------------------------------------------------------------- */

static void *cq_thread(void *arg) {
  sip__grpc_t *g = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) ((sip__gtag_t *)ev.tag)->fn(ev.tag, ev.success);
  }
  return NULL;
}

static void on_shutdown(sip__gtag_t *t, int ok) {
  sip__grpc_t *g = CONTAINER(t, sip__grpc_t, shutdown_tag);
  (void)ok;
  pthread_mutex_lock(&g->mu);
  g->down = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

/* Shuts the queue down and takes its last events on this thread (when the
 * threads never started). */
static void drain_cq(grpc_completion_queue *cq) {
  grpc_completion_queue_shutdown(cq);
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) ((sip__gtag_t *)ev.tag)->fn(ev.tag, ev.success);
  }
}

static void grpc_stop(void *state);

/* Frees a front-end whose server never started. */
static void unstarted_free(sip__grpc_t *g) {
  grpc_server_destroy(g->server);
  drain_cq(g->cq);
  grpc_completion_queue_destroy(g->cq);
  grpc_shutdown_blocking();
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  sip__free(g);
}

static sip_error_t *grpc_start(sip_server_t *s, const void *options, void **out_) {
  const sip__config_t *cfg = options;
  *out_ = NULL;
  sip__grpc_t *g = sip__calloc(1, sizeof *g);
  if (!g) return SIP__OOM();
  g->s = s;
  g->cfg = cfg;
  g->shutdown_tag.fn = on_shutdown;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  grpc_init();
  g->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_arg args[2];
  memset(args, 0, sizeof args);
  args[0].type = args[1].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[0].value.integer = args[1].value.integer = (int)cfg->grpc_max_message_bytes;
  grpc_channel_args ca = {2, args};
  g->server = grpc_server_create(&ca, NULL);
  grpc_server_register_completion_queue(g->server, g->cq, NULL);
  grpc_server_credentials *cr = NULL;
  if (cfg->tls_cert_file) { /* TLS (docs/security.md) */
    char *cert = NULL, *key = NULL;
    sip_error_t *e = sip__read_pem(cfg->tls_cert_file, "cert_file", &cert);
    if (!e) e = sip__read_pem(cfg->tls_key_file, "key_file", &key);
    if (!e) {
      grpc_ssl_pem_key_cert_pair pair = {key, cert};
      cr = grpc_ssl_server_credentials_create(NULL, &pair, 1, 0, NULL);
      if (!cr) e = sip_error_new(SIP_UNAVAILABLE, "server.tls: gRPC refused the certificate or key");
    }
    sip__free_secret(cert);
    sip__free_secret(key);
    if (e) {
      unstarted_free(g);
      return e;
    }
  } else {
    cr = grpc_insecure_server_credentials_create();
  }
  int port = grpc_server_add_http2_port(g->server, cfg->grpc, cr);
  grpc_server_credentials_release(cr);
  if (port <= 0) {
    unstarted_free(g);
    return sip_error_new(SIP_UNAVAILABLE, "server.grpc %s: cannot listen there (address in use, "
                         "or not an address of this host)", cfg->grpc);
  }
  const char *colon = strrchr(cfg->grpc, ':');
  snprintf(g->address, sizeof g->address, "grpc://%.*s:%d", (int)(colon - cfg->grpc), cfg->grpc,
           port);
  grpc_server_start(g->server);
  g->threads = sip__calloc((size_t)cfg->grpc_threads, sizeof *g->threads);
  for (int i = 0; g->threads && i < cfg->grpc_threads; i++) {
    if (pthread_create(&g->threads[i], NULL, cq_thread, g)) break;
    g->n_threads++;
  }
  if (g->n_threads < cfg->grpc_threads) {
    grpc_stop(g);
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "server.grpc %s: cannot start its threads",
                         cfg->grpc);
  }
  for (int i = 0; i < g->n_threads; i++) request_next(g);
  sip__log(SIP__LOG_INFO, "grpc listening", "address=%s threads=%d max_message_bytes=%zu",
           g->address, cfg->grpc_threads, cfg->grpc_max_message_bytes);
  *out_ = g;
  return NULL;
}

static void grpc_stop(void *state) {
  sip__grpc_t *g = state;
  if (!g) return;
  /* Calls still open are cancelled; their operations complete (failed) on
   * the threads, which free them; the server's shutdown completes once no
   * call is left, and only then does the queue shut down. */
  grpc_server_shutdown_and_notify(g->server, g->cq, &g->shutdown_tag);
  grpc_server_cancel_all_calls(g->server);
  if (g->n_threads) {
    pthread_mutex_lock(&g->mu);
    while (!g->down) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    grpc_completion_queue_shutdown(g->cq);
    for (int i = 0; i < g->n_threads; i++) pthread_join(g->threads[i], NULL);
  } else {
    drain_cq(g->cq);
  }
  grpc_server_destroy(g->server);
  grpc_completion_queue_destroy(g->cq);
  grpc_shutdown_blocking();
  sip__grpc_vcache_clear(g);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  sip__free(g->threads);
  sip__free(g);
}

static size_t grpc_address_count(void *state) {
  (void)state;
  return 1;
}

static const char *grpc_address(void *state, size_t i) {
  return i == 0 ? ((sip__grpc_t *)state)->address : NULL;
}

const sip_frontend_vtable_t sip__frontend_grpc = {
    .name = "grpc",
    .start = grpc_start,
    .stop = grpc_stop,
    .address_count = grpc_address_count,
    .address = grpc_address,
    .connections = NULL,
};
