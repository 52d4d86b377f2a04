/* bench_events — the engine's side of bench/events.py, without a client or
 * transport in the way: an in-process server with one builtin identity pool
 * runs N requests (64 in flight) with no event subscriber, then with one
 * whose ring is never read (every event past its capacity is dropped and
 * counted), alternating for R rounds.
 *
 *   bench_events N R  -> {"without": [req/s...], "with": [req/s...], "dropped": n}
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sip/sip.h"

#define WINDOW 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long done, failed;

static void on_done(sip_response_t *r, void *user) {
  (void)user;
  pthread_mutex_lock(&mu);
  done++;
  failed += !r || sip_response_code(r) != SIP_OK;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  sip_response_free(r);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check(sip_error_t *e) {
  if (!e) return;
  fprintf(stderr, "bench_events: %s\n", sip_error_message(e));
  exit(1);
}

/* Requests per second over n requests. */
static double run(sip_server_t *s, long n) {
  float v[4] = {1, 2, 3, 4};
  int64_t d[2] = {1, 4};
  pthread_mutex_lock(&mu);
  done = 0;
  pthread_mutex_unlock(&mu);
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    pthread_mutex_lock(&mu);
    while (i - done >= WINDOW) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    sip_request_t *r = sip_request_new("echo");
    check(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 2, d, v,
                                                       sizeof v)));
    check(sip_server_infer_async(s, r, on_done, NULL));
  }
  pthread_mutex_lock(&mu);
  while (done < n) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return (double)n / (now_s() - t0);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 10000;
  int rounds = argc > 2 ? atoi(argv[2]) : 7;
  sip_server_options_t *o = sip_server_options_new();
  check(sip_server_options_set_config_string(
      o, "server: {log_level: error}\nsession_pools:\n"
         "  - {name: echo, backend: builtin, pool_size: 1, backend_options: {shape: '-1,4'}}\n",
      NULL));
  sip_server_options_set_listen(o, 0);
  sip_server_options_set_wait_for_load(o, 1);
  sip_server_t *s = NULL;
  check(sip_server_new(o, &s));
  sip_server_options_free(o);
  run(s, n); /* warm-up */
  printf("{\"without\": [");
  double with[64];
  uint64_t dropped = 0;
  if (rounds > 64) rounds = 64;
  for (int i = 0; i < rounds; i++) {
    printf("%s%.0f", i ? ", " : "", run(s, n));
    sip_event_ring_t *ring = sip_event_ring_new(0);
    sip_event_sub_t *sub;
    check(sip_server_subscribe_events(s, "echo", sip_event_ring_push_fn, ring, &sub));
    with[i] = run(s, n);
    sip_server_unsubscribe_events(s, sub);
    dropped += sip_event_ring_dropped_total(ring);
    sip_event_ring_free(ring);
  }
  printf("], \"with\": [");
  for (int i = 0; i < rounds; i++) printf("%s%.0f", i ? ", " : "", with[i]);
  printf("], \"dropped\": %llu, \"failed\": %ld}\n", (unsigned long long)dropped, failed);
  sip_server_free(s);
  return failed != 0;
}
