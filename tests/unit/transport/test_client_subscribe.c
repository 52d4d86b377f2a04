/* libsipclient's event subscriptions (sip_client_subscribe) against an
 * in-process server: completions of requests sent on another connection,
 * in order with their ids; a bad buffer size refused; unsubscribing; and
 * the stream ending when its server goes away. */
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
      cmocka_unit_test(test_subscribe),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
