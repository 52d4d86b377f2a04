/* libsipclient's connections: connection failures and a full listen
 * backlog, reconnection to a server that went away and came back (keyed
 * requests waiting, shared memory registered again), and the token a
 * server may require, sent again after a reconnection. */
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

#include "client_helpers.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_connect_failures),
      cmocka_unit_test(test_connect_backlog_full),
      cmocka_unit_test(test_reconnect),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
