/* Alert webhooks (src/server/observe/webhook.c) against a small HTTP receiver run by
 * the test on a thread: bodies arrive in order, with Content-Type
 * application/json; a 500 answer is retried; a full queue drops and counts;
 * the counters say what happened. The receiver tells the test when it holds
 * a request, so nothing depends on timing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/observe/webhook.h"

#define MAX_POSTS 16

typedef struct receiver {
  int fd;
  int port;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const int *statuses; /* answer of the i-th request (past the end: 200) */
  size_t n_statuses;
  char *bodies[MAX_POSTS];
  int json[MAX_POSTS]; /* came with Content-Type: application/json */
  int n;
  int holding; /* a request is read and waits for `release` */
  int hold;    /* hold each request until released */
  int release;
  int stop;
} receiver_t;

/* Reads one request (headers, then Content-Length bytes); NULL on EOF. */
static char *read_request(int c, int *json) {
  static char buf[65536];
  size_t n = 0;
  buf[0] = '\0';
  char *end = NULL;
  while (!(end = strstr(buf, "\r\n\r\n"))) {
    ssize_t r = recv(c, buf + n, sizeof buf - 1 - n, 0);
    if (r <= 0) return NULL;
    n += (size_t)r;
    buf[n] = '\0';
  }
  const char *cl = strcasestr(buf, "content-length:");
  size_t want = cl ? (size_t)atol(cl + 15) : 0;
  *json = strcasestr(buf, "content-type: application/json") != NULL;
  size_t head = (size_t)(end + 4 - buf);
  while (n - head < want) {
    ssize_t r = recv(c, buf + n, sizeof buf - 1 - n, 0);
    if (r <= 0) return NULL;
    n += (size_t)r;
  }
  return strndup(buf + head, want);
}

static void *receiver_main(void *arg) {
  receiver_t *rx = arg;
  for (;;) {
    int c = accept(rx->fd, NULL, NULL);
    if (c < 0) break;
    int json = 0;
    char *body = read_request(c, &json);
    pthread_mutex_lock(&rx->mu);
    if (rx->stop) {
      pthread_mutex_unlock(&rx->mu);
      free(body);
      close(c);
      break;
    }
    int i = rx->n;
    if (body && i < MAX_POSTS) {
      rx->bodies[i] = body;
      rx->json[i] = json;
      rx->n++;
    } else {
      free(body);
    }
    if (rx->hold) {
      rx->holding = 1;
      pthread_cond_broadcast(&rx->cv);
      while (!rx->release && !rx->stop) pthread_cond_wait(&rx->cv, &rx->mu);
      rx->release = 0;
      rx->holding = 0;
    }
    int status = (size_t)i < rx->n_statuses ? rx->statuses[i] : 200;
    pthread_cond_broadcast(&rx->cv);
    pthread_mutex_unlock(&rx->mu);
    char reply[128];
    int len = snprintf(reply, sizeof reply,
                       "HTTP/1.1 %d X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status);
    if (send(c, reply, (size_t)len, MSG_NOSIGNAL) < 0) { /* the sender gave up: fine */
    }
    close(c);
  }
  return NULL;
}

static void receiver_start(receiver_t *rx, const int *statuses, size_t n, int hold) {
  memset(rx, 0, sizeof *rx);
  rx->statuses = statuses;
  rx->n_statuses = n;
  rx->hold = hold;
  pthread_mutex_init(&rx->mu, NULL);
  pthread_cond_init(&rx->cv, NULL);
  rx->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(rx->fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(rx->fd, 16), 0);
  socklen_t al = sizeof a;
  getsockname(rx->fd, (struct sockaddr *)&a, &al);
  rx->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&rx->thread, NULL, receiver_main, rx), 0);
}

static void receiver_stop(receiver_t *rx) {
  pthread_mutex_lock(&rx->mu);
  rx->stop = 1;
  pthread_cond_broadcast(&rx->cv);
  pthread_mutex_unlock(&rx->mu);
  shutdown(rx->fd, SHUT_RDWR);
  pthread_join(rx->thread, NULL);
  close(rx->fd);
  for (int i = 0; i < rx->n; i++) free(rx->bodies[i]);
  pthread_mutex_destroy(&rx->mu);
  pthread_cond_destroy(&rx->cv);
}

/* Waits (at most 30 s: a failure, not a measurement) until pred holds. */
#define WAIT_FOR(pred)                                                       \
  do {                                                                       \
    for (int k_ = 0; !(pred); k_++) {                                        \
      if (k_ > 30000) fail_msg("timed out waiting for " #pred);              \
      nanosleep(&(struct timespec){0, 1000000}, NULL);                       \
    }                                                                        \
  } while (0)

static sip__webhook_stats_t stats(sip__webhooks_t *w) {
  sip__webhook_stats_t st;
  sip__webhooks_read(w, 0, &st);
  return st;
}

static int received(receiver_t *rx) {
  pthread_mutex_lock(&rx->mu);
  int n = rx->n;
  pthread_mutex_unlock(&rx->mu);
  return n;
}

/* A receiver answering `statuses` (holding each request when `hold`) and
 * webhooks posting to it with `retries` and `queue_size`. */
static sip__webhooks_t *start_pair(receiver_t *rx, const int *statuses, size_t n, int hold,
                                   int retries, int queue_size) {
  receiver_start(rx, statuses, n, hold);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/alerts", rx->port);
  char *urls[1] = {url};
  sip__alerts_config_t a = {.webhooks = urls, .n_webhooks = 1, .timeout_ms = 10000,
                            .retries = retries, .backoff_ms = 1, .queue_size = queue_size};
  sip__webhooks_t *w = sip__webhooks_new(&a); /* copies the URLs */
  assert_non_null(w);
  return w;
}

static void test_order_and_retry(void **state) {
  (void)state;
  static const int statuses[] = {500, 200, 200, 200};
  receiver_t rx;
  sip__webhooks_t *w = start_pair(&rx, statuses, 4, 0, 2, 16);
  assert_int_equal(sip__webhooks_count(w), 1);
  sip__webhooks_post(w, "{\"n\":1}");
  sip__webhooks_post(w, "{\"n\":2}");
  sip__webhooks_post(w, "{\"n\":3}");
  WAIT_FOR(stats(w).delivered == 3);
  sip__webhook_stats_t st = stats(w);
  assert_int_equal(st.attempts, 4); /* the first answered 500: sent again */
  assert_int_equal(st.failed, 0);
  assert_int_equal(st.dropped, 0);
  assert_int_equal(st.queued, 0);
  assert_int_equal(received(&rx), 4);
  assert_string_equal(rx.bodies[0], "{\"n\":1}");
  assert_string_equal(rx.bodies[1], "{\"n\":1}");
  assert_string_equal(rx.bodies[2], "{\"n\":2}");
  assert_string_equal(rx.bodies[3], "{\"n\":3}");
  for (int i = 0; i < 4; i++) assert_true(rx.json[i]);
  sip__webhooks_free(w);
  receiver_stop(&rx);
}

static void test_gives_up_after_retries(void **state) {
  (void)state;
  static const int statuses[] = {503, 503, 503, 200};
  receiver_t rx;
  sip__webhooks_t *w = start_pair(&rx, statuses, 4, 0, 2, 16);
  sip__webhooks_post(w, "{\"a\":1}");
  WAIT_FOR(stats(w).failed == 1);
  sip__webhook_stats_t st = stats(w);
  assert_int_equal(st.attempts, 3); /* 1 + retries */
  assert_int_equal(st.delivered, 0);
  sip__webhooks_post(w, "{\"a\":2}"); /* the next one goes on its own */
  WAIT_FOR(stats(w).delivered == 1);
  assert_string_equal(rx.bodies[3], "{\"a\":2}");
  sip__webhooks_free(w);
  receiver_stop(&rx);
}

static void test_full_queue_drops(void **state) {
  (void)state;
  receiver_t rx;
  sip__webhooks_t *w = start_pair(&rx, NULL, 0, 1, 0, 1); /* each request held until released */
  sip__webhooks_post(w, "1");
  pthread_mutex_lock(&rx.mu); /* the worker is delivering "1" */
  while (!rx.holding) pthread_cond_wait(&rx.cv, &rx.mu);
  pthread_mutex_unlock(&rx.mu);
  sip__webhooks_post(w, "2"); /* queued: the one place */
  sip__webhooks_post(w, "3"); /* no room: dropped */
  sip__webhook_stats_t st = stats(w);
  assert_int_equal(st.dropped, 1);
  assert_int_equal(st.queued, 2); /* the one delivered and the one waiting */
  for (int i = 0; i < 2; i++) { /* release "1", then "2" */
    pthread_mutex_lock(&rx.mu);
    while (!rx.holding) pthread_cond_wait(&rx.cv, &rx.mu);
    rx.release = 1;
    pthread_cond_broadcast(&rx.cv);
    pthread_mutex_unlock(&rx.mu);
    WAIT_FOR(stats(w).delivered == (uint64_t)i + 1);
  }
  assert_int_equal(received(&rx), 2);
  assert_string_equal(rx.bodies[0], "1");
  assert_string_equal(rx.bodies[1], "2");
  assert_int_equal(stats(w).queued, 0);
  sip__webhooks_free(w);
  receiver_stop(&rx);
}

static void test_no_urls(void **state) {
  (void)state;
  sip__alerts_config_t a = {.timeout_ms = 100, .queue_size = 1};
  assert_null(sip__webhooks_new(&a));
  assert_null(sip__webhooks_new(NULL));
  sip__webhooks_post(NULL, "{}"); /* no-ops */
  sip__webhooks_free(NULL);
  assert_int_equal(sip__webhooks_count(NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_and_retry),
      cmocka_unit_test(test_gives_up_after_retries),
      cmocka_unit_test(test_full_queue_drops),
      cmocka_unit_test(test_no_urls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
