/* In-process cost of idempotency keys (bench/idempotency.py runs it): one
 * thread runs requests through sip_server_infer on a builtin identity pool
 * without a key (baseline), with a new key each (an execution plus a cache
 * entry), and with one key again (answered from the kept answer). Three
 * interleaved rounds, best rate of each; ratios against the baseline. */
#include <stdio.h>
#include <time.h>

#include "sip/sip.h"

#define N 20000

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Requests per second; mode 0 no key, 1 a new key each, 2 one key. */
static double run(sip_server_t *srv, int mode, int round) {
  float x[256] = {0};
  int64_t dims[1] = {256};
  double t0 = now();
  for (int i = 0; i < N; i++) {
    sip_request_t *r = sip_request_new("p");
    sip_error_t *e = sip_request_add_input(
        r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, dims, x, sizeof x));
    char key[64];
    snprintf(key, sizeof key, "r%d-%d", round, mode == 1 ? i : -1);
    if (!e && mode) e = sip_request_set_idempotency_key(r, key);
    sip_response_t *resp = NULL;
    if (!e) e = sip_server_infer(srv, r, &resp);
    else sip_request_free(r);
    if (e || sip_response_code(resp) != SIP_OK) {
      fprintf(stderr, "request failed: %s\n", e ? sip_error_message(e) : "bad answer");
      return 0;
    }
    sip_response_free(resp);
  }
  return N / (now() - t0);
}

int main(void) {
  sip_server_options_t *o = sip_server_options_new();
  sip_server_t *srv = NULL;
  sip_error_t *e = sip_server_options_set_config_string(
      o, "server: {log_level: error}\nsession_pools:\n"
         "  - {name: p, backend: builtin, backend_options: {shape: '-1'}}\n", ".");
  sip_server_options_set_listen(o, 0);
  sip_server_options_set_wait_for_load(o, 1);
  if (!e) e = sip_server_new(o, &srv);
  sip_server_options_free(o);
  if (e) {
    fprintf(stderr, "%s\n", sip_error_message(e));
    return 1;
  }
  double best[3] = {0};
  for (int round = 0; round < 3; round++)
    for (int m = 0; m < 3; m++) {
      double v = run(srv, m, round);
      if (v > best[m]) best[m] = v;
    }
  printf("in process, requests/s, N=%d:\n", N);
  printf("  no key (baseline)  : %8.0f\n", best[0]);
  printf("  new key each       : %8.0f   ratio %.3f\n", best[1], best[1] / best[0]);
  printf("  same key (replays) : %8.0f   ratio %.3f\n", best[2], best[2] / best[0]);
  sip_server_free(srv);
  return 0;
}
