/* libsipclient against an in-process server listening on a temporary unix
 * socket and an ephemeral TCP port: sync and async infer, pipelining,
 * introspection, error codes, connection failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sip/client.h"
#include "sip/sip.h"

static char sock_path[64];
static char unix_ep[96];

/* An in-process server of `yaml`, its pools loaded. */
static sip_server_t *start_yaml(const char *yaml) {
  sip_server_options_t *o = sip_server_options_new();
  assert_null(sip_server_options_set_config_string(o, yaml, "."));
  sip_server_options_set_wait_for_load(o, 1);
  sip_server_t *srv = NULL;
  sip_error_t *e = sip_server_new(o, &srv);
  sip_server_options_free(o);
  if (e) fprintf(stderr, "%s\n", sip_error_message(e));
  assert_null(e);
  return srv;
}

static int setup(void **state) {
  snprintf(sock_path, sizeof sock_path, "/tmp/sip_test_client_%d.sock", (int)getpid());
  snprintf(unix_ep, sizeof unix_ep, "ipc://%s", sock_path);
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "server: {endpoints: ['%s', 'tcp://127.0.0.1:0'], log_level: error}\n"
           "session_pools:\n"
           "  - {name: echo, backend: builtin, pool_size: 2, backend_options: {shape: '-1,3'}}\n"
           "  - {name: slow, backend: builtin, pool_size: 1,\n"
           "     backend_options: {shape: '-1', delay_ms: 100}}\n"
           "  - {name: seq, backend: builtin, backend_options: {shape: '-1,3'},\n"
           "     sequence_batching: {}}\n",
           unix_ep);
  sip_server_t *srv = start_yaml(yaml);
  assert_int_equal(sip_server_endpoint_count(srv), 2);
  *state = srv;
  return 0;
}

static int teardown(void **state) {
  sip_server_free(*state);
  assert_int_equal(access(sock_path, F_OK), -1); /* the socket file is removed */
  return 0;
}

static sip_tensor_t *vec3(float base, int64_t rows) {
  float v[64 * 3];
  for (int i = 0; i < rows * 3; i++) v[i] = base + (float)i;
  int64_t dims[2] = {rows, 3};
  return sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, dims, v,
                             (size_t)rows * 3 * sizeof(float));
}

static void check_echo(const sip_client_response_t *r, float base, int64_t rows) {
  const sip_tensor_t *t = sip_client_response_output(r, "output");
  assert_non_null(t);
  assert_int_equal(t->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->dims[0], rows);
  assert_int_equal(t->dims[1], 3);
  const float *f = t->data;
  for (int i = 0; i < rows * 3; i++) assert_true(f[i] == base + (float)i);
}

static void sync_on(const char *ep) {
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(ep, &c));
  sip_tensor_t *t = vec3(1.5f, 4);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .request_id = 77};
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_infer(c, &req, &r);
  assert_null(e);
  assert_int_equal(r->request_id, 77);
  assert_true(r->latency_ms > 0);
  assert_true(r->total_us >= r->compute_us);
  check_echo(r, 1.5f, 4);
  sip_client_response_free(r);
  sip_tensor_free(t);
  sip_client_free(c);
}

static void test_sync_unix(void **state) {
  (void)state;
  sync_on(unix_ep);
}

static void test_sync_tcp(void **state) {
  sip_server_t *srv = *state;
  const char *tcp = sip_server_endpoint(srv, 1);
  assert_non_null(strstr(tcp, "tcp://127.0.0.1:"));
  sync_on(tcp);
}

typedef struct collect {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, ok, failed;
  uint64_t order[64];
} collect_t;

static void on_done(sip_client_response_t *r, sip_error_t *e, void *user) {
  collect_t *c = user;
  pthread_mutex_lock(&c->mu);
  if (r) {
    /* Each request i carried base i*100; check its own data came back. */
    const sip_tensor_t *t = sip_client_response_output(r, "output");
    const float *f = t->data;
    if (f[0] == (float)(r->request_id * 100)) c->ok++;
    c->order[c->done] = r->request_id;
  } else {
    c->failed++;
  }
  c->done++;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  sip_client_response_free(r);
  sip_error_free(e);
}

static void test_async_pipelined(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  collect_t col = {.done = 0};
  pthread_mutex_init(&col.mu, NULL);
  pthread_cond_init(&col.cv, NULL);
  enum { N = 50 };
  for (uint64_t i = 1; i <= N; i++) {
    sip_tensor_t *t = vec3((float)(i * 100), 2);
    const sip_tensor_t *in[] = {t};
    sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .request_id = i};
    assert_null(sip_client_infer_async(c, &req, on_done, &col));
    sip_tensor_free(t); /* the request was encoded: inputs are not needed any more */
  }
  pthread_mutex_lock(&col.mu);
  while (col.done < N) pthread_cond_wait(&col.cv, &col.mu);
  pthread_mutex_unlock(&col.mu);
  assert_int_equal(col.ok, N);
  assert_int_equal(col.failed, 0);
  sip_client_free(c);
  pthread_mutex_destroy(&col.mu);
  pthread_cond_destroy(&col.cv);
}

static void test_errors(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(0, 1);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "nope", .inputs = in, .n_inputs = 1};
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_infer(c, &req, &r);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "nope"));
  sip_error_free(e);

  int64_t dims[1] = {3};
  float v[3] = {0};
  sip_tensor_t *bad = sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, dims, v, sizeof v);
  const sip_tensor_t *in2[] = {bad};
  req.pool = "echo";
  req.inputs = in2;
  e = sip_client_infer(c, &req, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "[3]"));
  assert_non_null(strstr(sip_error_message(e), "[-1,3]"));
  sip_error_free(e);

  /* The connection survived both errors. */
  req.inputs = in;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  sip_tensor_free(bad);
  sip_tensor_free(t);
  sip_client_free(c);
}

static void test_deadline(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  int64_t dims[1] = {1};
  float v = 1;
  sip_tensor_t *t = sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, dims, &v, sizeof v);
  const sip_tensor_t *in[] = {t};
  collect_t col = {.done = 0};
  pthread_mutex_init(&col.mu, NULL);
  pthread_cond_init(&col.cv, NULL);
  sip_client_request_t busy = {.pool = "slow", .inputs = in, .n_inputs = 1, .request_id = 0};
  assert_null(sip_client_infer_async(c, &busy, on_done, &col));
  sip_client_request_t late = {.pool = "slow", .inputs = in, .n_inputs = 1, .timeout_ms = 20};
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_infer(c, &late, &r);
  assert_int_equal(sip_error_code(e), SIP_DEADLINE_EXCEEDED);
  sip_error_free(e);
  pthread_mutex_lock(&col.mu);
  while (col.done < 1) pthread_cond_wait(&col.cv, &col.mu);
  pthread_mutex_unlock(&col.mu);
  sip_tensor_free(t);
  sip_client_free(c);
  pthread_mutex_destroy(&col.mu);
  pthread_cond_destroy(&col.cv);
}

static void test_info(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  char *json = NULL;
  assert_null(sip_client_info(c, 1, &json));
  assert_non_null(strstr(json, "\"ready\":true"));
  sip_client_free_string(json);
  assert_null(sip_client_info(c, 2, &json));
  assert_non_null(strstr(json, "\"name\":\"echo\""));
  assert_non_null(strstr(json, "\"shape\":[-1,3]"));
  sip_client_free_string(json);
  assert_null(sip_client_info(c, 3, &json));
  assert_non_null(strstr(json, "\"sessions\""));
  sip_client_free_string(json);
  sip_error_t *e = sip_client_info(c, 9, &json);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  sip_client_free(c);
}

/* A client-side batch of 7 rows in chunks of 3: the answer has the 7 rows
 * in order, the padding of the last chunk removed. */
static void test_batch_infer(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(10.0f, 7);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1};
  for (int padding = 0; padding <= 2; padding++) {
    sip_client_response_t *r = NULL;
    sip_error_t *e = sip_client_batch_infer(c, &req, 3, padding, &r);
    assert_null(e);
    check_echo(r, 10.0f, 7);
    sip_client_response_free(r);
  }
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_batch_infer(c, &req, 3, 7, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  req.pool = "nope";
  e = sip_client_batch_infer(c, &req, 3, 1, &r);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  sip_error_free(e);
  sip_tensor_free(t);
  sip_client_free(c);
}

static void test_connect_failures(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  sip_error_t *e = sip_client_connect("ipc:///tmp/definitely_not_here.sock", &c);
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  sip_error_free(e);
  e = sip_client_connect("http://x", &c);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  e = sip_client_connect("tcp://127.0.0.1", &c);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  assert_null(c);
}

/* A unix socket listening with a full backlog at `path`: the listener; the
 * pending connections that fill it are in pend[0..*n). */
static int full_backlog(const char *path, int *pend, int *n) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  strcpy(sa.sun_path, path);
  unlink(path);
  int l = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(l, 0), 0);
  for (*n = 0; *n < 64; (*n)++) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
      assert_int_equal(errno, EAGAIN);
      close(s);
      return l;
    }
    pend[*n] = s;
  }
  fail_msg("the backlog never filled");
  return -1;
}

typedef struct acceptor {
  int l;
  atomic_int stop, accepted;
} acceptor_t;

/* Starts accepting 300 ms in, until stopped. */
static void *accept_later(void *arg) {
  acceptor_t *a = arg;
  usleep(300000);
  while (!atomic_load(&a->stop)) {
    struct pollfd p = {.fd = a->l, .events = POLLIN};
    if (poll(&p, 1, 50) == 1) {
      int s = accept(a->l, NULL, NULL);
      if (s >= 0) {
        atomic_fetch_add(&a->accepted, 1);
        close(s);
      }
    }
  }
  return NULL;
}

/* A full listen backlog (EAGAIN on connect) is retried until the server
 * accepts, and given up with a clear error when it never does (a blocking
 * connect waited forever). */
static void test_connect_backlog_full(void **state) {
  (void)state;
  char path[80], ep[96];
  snprintf(path, sizeof path, "/tmp/sip_test_backlog_%d.sock", (int)getpid());
  snprintf(ep, sizeof ep, "ipc://%s", path);
  int pend[64], n = 0;
  acceptor_t a = {.l = full_backlog(path, pend, &n)};
  pthread_t t;
  pthread_create(&t, NULL, accept_later, &a);
  sip_client_t *c = NULL;
  sip_error_t *e = sip_client_connect(ep, &c);
  if (e) fail_msg("%s", sip_error_message(e));
  assert_true(atomic_load(&a.accepted) > 0);
  sip_client_free(c);
  atomic_store(&a.stop, 1);
  pthread_join(t, NULL);
  for (int i = 0; i < n; i++) close(pend[i]);
  close(a.l);
  /* Never accepted: refused after the retry window. */
  int l = full_backlog(path, pend, &n);
  c = NULL;
  e = sip_client_connect(ep, &c);
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  assert_non_null(strstr(sip_error_message(e), "listen backlog stayed full"));
  sip_error_free(e);
  assert_null(c);
  for (int i = 0; i < n; i++) close(pend[i]);
  close(l);
  unlink(path);
}

/* Sequence ids travel in the request's parameters (numbers and strings,
 * with pipeline_config alongside). */
static void test_sequence(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(2, 1);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "seq", .inputs = in, .n_inputs = 1};
  sip_client_response_t *r = NULL;
  sip_error_t *e = sip_client_infer(c, &req, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "needs a sequence id"));
  sip_error_free(e);
  req.sequence_start = 1;
  e = sip_client_infer(c, &req, &r); /* refused before sending */
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);

  req.sequence_id = 31;
  req.pipeline_config = "{}"; /* ignored by pools, sent alongside */
  assert_null(sip_client_infer(c, &req, &r));
  check_echo(r, 2, 1);
  sip_client_response_free(r);
  req.sequence_start = 0;
  req.sequence_end = 1;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  e = sip_client_infer(c, &req, &r); /* it ended */
  assert_int_equal(sip_error_code(e), SIP_FAILED_PRECONDITION);
  assert_non_null(strstr(sip_error_message(e), "sequence 31 is not active"));
  sip_error_free(e);

  req.sequence_id_str = "say \"hi\"";
  e = sip_client_infer(c, &req, &r);
  assert_int_equal(sip_error_code(e), SIP_FAILED_PRECONDITION);
  assert_non_null(strstr(sip_error_message(e), "sequence 'say \"hi\"' is not active"));
  sip_error_free(e);
  req.sequence_start = 1;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  sip_tensor_free(t);
  sip_client_free(c);
}

/* The W3C trace context travels in the request's parameters: the server
 * takes a valid traceparent (with tracestate, and beside other parameters)
 * and ignores an invalid one; neither is an error. */
static void test_traceparent(void **state) {
  (void)state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(4, 2);
  const sip_tensor_t *in[] = {t};
  static const char *const tps[] = {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                                    "not a traceparent"};
  for (size_t i = 0; i < 3; i++) {
    sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1,
                                .traceparent = tps[i], .tracestate = i ? NULL : "rojo=1",
                                .pipeline_config = i == 2 ? "{}" : NULL};
    sip_client_response_t *r = NULL;
    sip_error_t *e = sip_client_infer(c, &req, &r);
    if (e) fail_msg("traceparent '%s': %s", tps[i], sip_error_message(e));
    check_echo(r, 4, 2);
    sip_client_response_free(r);
  }
  /* A tracestate without a traceparent is not sent; a traceparent that is
   * not UTF-8 is refused before sending. */
  sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .tracestate = "x=1"};
  sip_client_response_t *r = NULL;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  req.traceparent = "\xff\xfe";
  sip_error_t *e = sip_client_infer(c, &req, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "traceparent is not valid UTF-8"));
  sip_error_free(e);
  sip_tensor_free(t);
  sip_client_free(c);
}

/* Shared memory: the input read from a region by reference, the output
 * written into the same region and viewed there; the response outlives
 * the region's destruction. */
static void test_shared_memory(void **state) {
  sip_server_t *srv = *state;
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_client_shm_t *r = NULL;
  assert_null(sip_client_shm_create(c, "buf", 4096, &r));
  assert_int_equal(sip_client_shm_size(r), 4096);
  float *base = sip_client_shm_data(r);
  for (int i = 0; i < 12; i++) base[i] = 0.5f + (float)i;
  sip_error_t *e = sip_client_shm_create(c, "buf", 64, &(sip_client_shm_t *){NULL});
  assert_int_equal(sip_error_code(e), SIP_ALREADY_EXISTS);
  sip_error_free(e);

  int64_t dims[2] = {4, 3};
  sip_tensor_t *in = sip_tensor_new_view("input", SIP_DTYPE_FLOAT32, 2, dims, NULL, 48, NULL);
  const sip_tensor_t *ins[] = {in};
  const char *outs[] = {"output"};
  sip_client_shm_ref_t in_ref[] = {{"buf", 0, 48}}, out_ref[] = {{"buf", 1024, 1024}};
  sip_client_request_t req = {.pool = "echo", .inputs = ins, .n_inputs = 1, .outputs = outs,
                              .n_outputs = 1, .input_shm = in_ref, .output_shm = out_ref};
  sip_client_response_t *resp = NULL;
  assert_null(sip_client_infer(c, &req, &resp));
  check_echo(resp, 0.5f, 4);
  const sip_tensor_t *o = sip_client_response_output(resp, "output");
  assert_ptr_equal(o->data, (uint8_t *)base + 1024); /* a view of the region */

  char *json = NULL;
  assert_null(sip_client_shm_status(c, NULL, &json));
  assert_non_null(strstr(json, "\"name\":\"buf\""));
  assert_non_null(strstr(json, "\"byte_size\":4096"));
  sip_client_free_string(json);
  assert_null(sip_client_shm_destroy(c, r));
  check_echo(resp, 0.5f, 4); /* the response keeps the mapping */
  sip_client_response_free(resp);
  assert_null(sip_client_shm_status(c, NULL, &json));
  assert_string_equal(json, "{\"regions\":[]}");
  sip_client_free_string(json);

  /* The region is gone on the server: NOT_FOUND, and the connection stays. */
  e = sip_client_infer(c, &req, &resp);
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(e), "no shared memory region named 'buf'"));
  sip_error_free(e);
  /* Batches do not take shared memory. */
  e = sip_client_batch_infer(c, &req, 0, 0, &resp);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  sip_tensor_free(in);
  /* A region left registered is released with the client. */
  assert_null(sip_client_shm_create(c, "left", 8192, &r));
  sip_client_free(c);

  /* Over TCP no descriptor can travel. */
  assert_null(sip_client_connect(sip_server_endpoint(srv, 1), &c));
  e = sip_client_shm_create(c, "t", 4096, &r);
  assert_int_equal(sip_error_code(e), SIP_FAILED_PRECONDITION);
  assert_non_null(strstr(sip_error_message(e), "unix socket"));
  sip_error_free(e);
  sip_client_free(c);
}

/* A server of its own on `ep` (the echo pool, keyed requests kept). */
static sip_server_t *start_on(const char *ep) {
  char yaml[512];
  snprintf(yaml, sizeof yaml,
           "server: {endpoints: ['%s'], log_level: error}\n"
           "session_pools:\n"
           "  - {name: echo, backend: builtin, backend_options: {shape: '-1,3'}}\n", ep);
  return start_yaml(yaml);
}

typedef struct answer {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  sip_client_response_t *resp;
  sip_error_t *err;
} answer_t;

static void on_answer(sip_client_response_t *r, sip_error_t *e, void *user) {
  answer_t *a = user;
  pthread_mutex_lock(&a->mu);
  a->resp = r;
  a->err = e;
  a->done = 1;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* The server goes away and comes back on the same socket: plain requests
 * get UNAVAILABLE meanwhile, a keyed one waits and is answered once the
 * client reconnected by itself, the shared memory region is registered
 * again, and the key runs once (the second send is a replay). */
static void test_reconnect(void **state) {
  (void)state;
  char path[64], ep[96];
  snprintf(path, sizeof path, "/tmp/sip_test_reconnect_%d.sock", (int)getpid());
  snprintf(ep, sizeof ep, "ipc://%s", path);
  sip_server_t *srv = start_on(ep);
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(ep, &c));
  sip_client_set_reconnect(c, 5, 50, 20000);
  sip_client_shm_t *region = NULL;
  assert_null(sip_client_shm_create(c, "r", 4096, &region));
  float *base = sip_client_shm_data(region);
  for (int i = 0; i < 6; i++) base[i] = 2.5f + (float)i;
  sip_tensor_t *t = vec3(1.0f, 2);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t plain = {.pool = "echo", .inputs = in, .n_inputs = 1};
  sip_client_response_t *r = NULL;
  assert_null(sip_client_infer(c, &plain, &r));
  sip_client_response_free(r);

  sip_server_free(srv); /* the connection closes */
  sip_error_t *e = NULL;
  for (int i = 0; i < 200; i++) { /* until the client noticed */
    e = sip_client_infer(c, &plain, &r);
    if (e) break;
    sip_client_response_free(r);
    usleep(5000);
  }
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  sip_error_free(e);
  answer_t a = {.done = 0};
  pthread_mutex_init(&a.mu, NULL);
  pthread_cond_init(&a.cv, NULL);
  sip_client_request_t keyed = plain;
  keyed.idempotency_key = "reconnect-1";
  assert_null(sip_client_infer_async(c, &keyed, on_answer, &a));
  /* The server comes back only once its pool is loaded: it binds a path of
   * its own and that socket is renamed onto the one the client reconnects
   * to. (A client that reconnected while the pool still loaded would be
   * answered "pool 'echo' is still loading", which is right but not what
   * this test is about.) */
  char path2[80], ep2[112];
  snprintf(path2, sizeof path2, "%s.next", path);
  snprintf(ep2, sizeof ep2, "ipc://%s", path2);
  srv = start_on(ep2);
  assert_int_equal(rename(path2, path), 0);
  pthread_mutex_lock(&a.mu);
  while (!a.done) pthread_cond_wait(&a.cv, &a.mu);
  pthread_mutex_unlock(&a.mu);
  if (a.err) fail_msg("keyed request failed: %s", sip_error_message(a.err));
  check_echo(a.resp, 1.0f, 2);
  assert_int_equal(a.resp->replayed, 0);
  sip_client_response_free(a.resp);
  assert_true(sip_client_reconnects(c) >= 1);
  /* Sent again: the kept answer. */
  assert_null(sip_client_infer(c, &keyed, &r));
  assert_int_equal(r->replayed, 1);
  check_echo(r, 1.0f, 2);
  sip_client_response_free(r);
  /* The region was registered on the new connection. */
  int64_t dims[2] = {2, 3};
  sip_tensor_t *sh = sip_tensor_new_view("input", SIP_DTYPE_FLOAT32, 2, dims, NULL, 24, NULL);
  const sip_tensor_t *shin[] = {sh};
  sip_client_shm_ref_t ref[] = {{"r", 0, 24}};
  sip_client_request_t shreq = {.pool = "echo", .inputs = shin, .n_inputs = 1, .input_shm = ref};
  assert_null(sip_client_infer(c, &shreq, &r));
  check_echo(r, 2.5f, 2);
  sip_client_response_free(r);
  sip_tensor_free(sh);
  /* A key longer than 1024 bytes is refused before sending. */
  char big[1100];
  memset(big, 'k', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  keyed.idempotency_key = big;
  e = sip_client_infer(c, &keyed, &r);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  sip_tensor_free(t);
  pthread_mutex_destroy(&a.mu);
  pthread_cond_destroy(&a.cv);
  assert_null(sip_client_shm_destroy(c, region));
  sip_client_free(c); /* closed by its user: no reconnection, the thread ends */
  sip_server_free(srv);
  unlink(path); /* renamed from path2: the server removed only the name it bound */
}

/* A server with tokens: requests need AUTH first; sip_client_authenticate
 * opens the groups and the token is sent again after a reconnection; a
 * wrong token is UNAUTHENTICATED. */
static void test_token(void **state) {
  (void)state;
  char path[64], ep[96], yaml[512];
  snprintf(path, sizeof path, "/tmp/sip_test_token_%d.sock", (int)getpid());
  snprintf(ep, sizeof ep, "ipc://%s", path);
  snprintf(yaml, sizeof yaml,
           "server: {endpoints: ['%s'], log_level: error,\n"
           "         auth: {inference_tokens: [client-token-1]}}\n"
           "session_pools:\n"
           "  - {name: echo, backend: builtin, backend_options: {shape: '-1,3'}}\n", ep);
  sip_server_t *srv = start_yaml(yaml);
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(ep, &c));
  sip_client_set_reconnect(c, 5, 50, 20000);
  char *json = NULL;
  sip_error_t *e = sip_client_authenticate(c, "wrong-token-1", &json);
  assert_int_equal(sip_error_code(e), SIP_UNAUTHENTICATED);
  sip_error_free(e);
  sip_tensor_t *t = vec3(3.0f, 1);
  const sip_tensor_t *in[] = {t};
  sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1};
  sip_client_response_t *r = NULL;
  /* Until the client has reconnected after the server closed the connection. */
  for (int i = 0; i < 400 && (e = sip_client_authenticate(c, "client-token-1", &json)); i++) {
    sip_error_free(e);
    usleep(5000);
  }
  assert_null(e);
  assert_non_null(strstr(json, "\"inference\""));
  sip_client_free_string(json);
  assert_null(sip_client_infer(c, &req, &r));
  check_echo(r, 3.0f, 1);
  sip_client_response_free(r);
  /* The server restarts: the client reconnects and authenticates by itself. */
  sip_server_free(srv);
  srv = start_yaml(yaml);
  for (int i = 0; i < 400 && (e = sip_client_infer(c, &req, &r)); i++) {
    assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE); /* never UNAUTHENTICATED */
    sip_error_free(e);
    usleep(5000);
  }
  assert_null(e);
  check_echo(r, 3.0f, 1);
  sip_client_response_free(r);
  assert_true(sip_client_reconnects(c) >= 2);
  sip_tensor_free(t);
  sip_client_free(c);
  sip_server_free(srv);
}

/* Events over a subscription of its own: the completions of requests sent
 * on another connection arrive in order with their request ids; a bad
 * buffer size is refused; unsubscribing stops the callbacks. */
typedef struct events {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n_complete, ended;
  uint64_t ids[16];
} events_t;

static void on_event(const char *json, void *user) {
  events_t *ev = user;
  pthread_mutex_lock(&ev->mu);
  if (!json) {
    ev->ended = 1;
  } else if (strstr(json, "\"event\":\"INFERENCE_COMPLETE\"") && ev->n_complete < 16) {
    const char *id = strstr(json, "\"request_id\":");
    ev->ids[ev->n_complete++] = id ? strtoull(id + 13, NULL, 10) : 0;
  }
  pthread_cond_broadcast(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
}

static void test_subscribe(void **state) {
  (void)state;
  events_t ev = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  sip_client_sub_t *sub = NULL;
  sip_error_t *e = sip_client_subscribe(unix_ep, "echo", 70000, NULL, on_event, &ev, &sub);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_null(sub);
  sip_error_free(e);
  e = sip_client_subscribe("ipc:///nonexistent/sip.sock", "echo", 0, NULL, on_event, &ev, &sub);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  sip_error_free(e);
  assert_null(sip_client_subscribe(unix_ep, "echo", 0, NULL, on_event, &ev, &sub));
  sip_client_t *c = NULL;
  assert_null(sip_client_connect(unix_ep, &c));
  sip_tensor_t *t = vec3(0, 1);
  const sip_tensor_t *in[] = {t};
  for (uint64_t id = 1; id <= 3; id++) {
    sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .request_id = id};
    sip_client_response_t *r = NULL;
    assert_null(sip_client_infer(c, &req, &r));
    sip_client_response_free(r);
  }
  pthread_mutex_lock(&ev.mu);
  while (ev.n_complete < 3) pthread_cond_wait(&ev.cv, &ev.mu);
  assert_int_equal(ev.ids[0], 1);
  assert_int_equal(ev.ids[1], 2);
  assert_int_equal(ev.ids[2], 3);
  pthread_mutex_unlock(&ev.mu);
  sip_client_unsubscribe(sub);
  assert_int_equal(ev.ended, 0); /* ended by us: no end-of-stream call */
  sip_client_request_t req = {.pool = "echo", .inputs = in, .n_inputs = 1, .request_id = 9};
  sip_client_response_t *r = NULL;
  assert_null(sip_client_infer(c, &req, &r));
  sip_client_response_free(r);
  assert_int_equal(ev.n_complete, 3);
  sip_tensor_free(t);
  sip_client_free(c);

  /* A server that goes away ends the stream: fn hears NULL once. */
  char path[96], ep[128], yaml[512];
  snprintf(path, sizeof path, "/tmp/sip_test_client_sub_%d.sock", (int)getpid());
  snprintf(ep, sizeof ep, "ipc://%s", path);
  snprintf(yaml, sizeof yaml,
           "server: {endpoints: ['%s'], log_level: error}\n"
           "session_pools:\n  - {name: echo, backend: builtin, backend_options: {shape: '-1'}}\n",
           ep);
  sip_server_t *other = start_yaml(yaml);
  events_t gone = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  assert_null(sip_client_subscribe(ep, NULL, 0, NULL, on_event, &gone, &sub));
  sip_server_free(other);
  pthread_mutex_lock(&gone.mu);
  while (!gone.ended) pthread_cond_wait(&gone.cv, &gone.mu);
  pthread_mutex_unlock(&gone.mu);
  sip_client_unsubscribe(sub);
  assert_int_equal(gone.ended, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_subscribe),
      cmocka_unit_test(test_sync_unix),      cmocka_unit_test(test_sync_tcp),
      cmocka_unit_test(test_async_pipelined), cmocka_unit_test(test_errors),
      cmocka_unit_test(test_deadline),       cmocka_unit_test(test_info),
      cmocka_unit_test(test_connect_failures), cmocka_unit_test(test_batch_infer),
      cmocka_unit_test(test_connect_backlog_full),
      cmocka_unit_test(test_sequence),       cmocka_unit_test(test_traceparent),
      cmocka_unit_test(test_shared_memory),  cmocka_unit_test(test_reconnect),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
