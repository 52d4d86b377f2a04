/* Decode speed of a KServe JSON request body (bench/json_tensors.py): the body in
 * the file argv[1] decoded argv[2] times by the fast path and by the classic
 * jansson decoder (sip__ks_json_classic), one core; and the decoded inputs
 * encoded back as a JSON response as many times. Prints JSON: the median
 * microseconds per decode each way (argv[3] "fast": the fast path only) and
 * per encode, and the MB/s of JSON text read and written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"
#include "session/engine.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median microseconds per decode over n runs. */
static double run(const uint8_t *body, size_t len, int classic, int n) {
  double *t = malloc(sizeof *t * (size_t)n);
  sip__ks_json_classic(classic);
  for (int i = 0; i < n; i++) {
    uint64_t t0 = sip__now_us();
    sip__ks_request_t *k = NULL;
    sip_error_t *e = sip__ks_decode("m", NULL, body, len, -1, NULL, NULL, 0, &k);
    t[i] = (double)(sip__now_us() - t0);
    if (e) {
      fprintf(stderr, "decode failed: %s\n", sip_error_message(e));
      exit(1);
    }
    sip__ks_request_free(k);
  }
  qsort(t, (size_t)n, sizeof *t, cmp);
  double m = t[n / 2];
  free(t);
  return m;
}

/* Median microseconds to encode the inputs of `body` as a JSON response;
 * *out_len: the response's length. */
static double encode(const uint8_t *body, size_t len, int n, size_t *out_len) {
  sip__ks_request_t *k = NULL;
  sip_error_t *e = sip__ks_decode("m", NULL, body, len, -1, NULL, NULL, 0, &k);
  if (e) exit(1);
  double *t = malloc(sizeof *t * (size_t)n);
  for (int i = 0; i < n; i++) {
    sip__ks_body_t b;
    uint64_t t0 = sip__now_us();
    e = sip__ks_encode(k, "m", NULL, (const sip_tensor_t *const *)k->req->inputs,
                       k->req->n_inputs, &b);
    t[i] = (double)(sip__now_us() - t0);
    if (e) exit(1);
    *out_len = b.json_len;
    sip__ks_body_clear(&b);
  }
  sip__ks_request_free(k);
  qsort(t, (size_t)n, sizeof *t, cmp);
  double m = t[n / 2];
  free(t);
  return m;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BODY.json ITERATIONS\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) return perror(argv[1]), 1;
  fseek(f, 0, SEEK_END);
  size_t len = (size_t)ftell(f);
  rewind(f);
  uint8_t *body = malloc(len);
  if (fread(body, 1, len, f) != len) return perror(argv[1]), 1;
  fclose(f);
  int n = atoi(argv[2]);
  /* argv[3] "fast": only the fast path (for a profiler). */
  int only_fast = argc > 3 && !strcmp(argv[3], "fast");
  double fast = run(body, len, 0, n), classic = only_fast ? 1e300 : run(body, len, 1, n);
  printf("{\"bytes\":%zu,\"fast_us\":%.1f,\"fast_mb_s\":%.1f", len, fast, (double)len / fast);
  size_t out_len = 0;
  double enc = encode(body, len, n, &out_len);
  printf(",\"encode_us\":%.1f,\"encode_mb_s\":%.1f", enc, (double)out_len / enc);
  if (!only_fast)
    printf(",\"classic_us\":%.1f,\"classic_mb_s\":%.1f", classic, (double)len / classic);
  printf("}\n");
  free(body);
  return 0;
}
