/* JSON tensor text both ways, one core (bench/json_codec.py): the request
 * body in the file argv[1] (one input) is decoded (sip__ks_decode, fast
 * path), its input encoded back as a JSON response (sip__ks_encode), and the
 * response's own data array decoded again as a request; and the elements
 * alone written with the former formatter (sip__ks_format_g: printf's %.9g /
 * %.17g text) and with the shortest one (sip__ks_format_double). The five are
 * timed in turn, argv[2] samples each, interleaved so that a change of the
 * machine's load hits all alike; each is timed in the thread's CPU time, so
 * that other processes on a loaded machine do not count. Prints JSON: the
 * median microseconds of each, and the bytes of text each reads or writes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/fmt.h"
#include "http/http.h"
#include "http/kserve_impl.h"
#include "session/engine.h"

enum { DECODE, DECODE_OWN, ENCODE, FMT_OLD, FMT_NEW, N_TASKS };
static const char *const names[N_TASKS] = {"decode", "decode_own", "encode", "fmt_old", "fmt_new"};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void die(const char *what, sip_error_t *e) {
  fprintf(stderr, "%s failed: %s\n", what, e ? sip_error_message(e) : "out of memory");
  exit(1);
}

static sip__ks_request_t *decode(const char *body, size_t len) {
  sip__ks_request_t *k = NULL;
  sip_error_t *e = sip__ks_decode("m", NULL, (const uint8_t *)body, len, -1, NULL, NULL, 0, &k);
  if (e) die("decode", e);
  return k;
}

/* The elements of t as text, as the encoder writes a data array: `old`
 * with printf's digits, else the shortest. Returns the bytes written. */
static size_t format_all(const sip_tensor_t *t, int old, char *out) {
  size_t o = 0, n = (size_t)sip_tensor_count(t);
  int f64 = t->dtype == SIP_DTYPE_FLOAT64, prec = f64 ? 17 : 9;
  for (size_t i = 0; i < n; i++) {
    double v = f64 ? LOAD(double, t->data, i) : LOAD(float, t->data, i);
    if (i) out[o++] = ',';
    o += old ? sip__ks_format_g(v, prec, out + o) : sip__ks_format_double(v, prec, out + o);
  }
  return o;
}

/* A request whose input is the response's first output, data as written. */
static char *own_body(const sip__ks_body_t *b, const sip_tensor_t *t, size_t *len) {
  const char *d = strstr(b->json, "\"data\":[");
  const char *end = d ? strchr(d, ']') : NULL;
  if (!end) die("finding the response's data", NULL);
  d += 7;
  size_t dn = (size_t)(end + 1 - d);
  size_t cap = dn + strlen(t->name) + 96 + 24 * (size_t)t->rank;
  char *s = malloc(cap);
  if (!s) die("own body", NULL);
  size_t o = (size_t)snprintf(s, cap, "{\"inputs\":[{\"name\":\"%s\",\"datatype\":\"%s\","
                              "\"shape\":[", t->name, sip__ks_datatype(t->dtype));
  for (int i = 0; i < t->rank; i++)
    o += (size_t)snprintf(s + o, cap - o, "%s%lld", i ? "," : "", (long long)t->dims[i]);
  o += (size_t)snprintf(s + o, cap - o, "],\"data\":");
  memcpy(s + o, d, dn);
  memcpy(s + o + dn, "}]}", 4);
  *len = o + dn + 3;
  return s;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BODY.json SAMPLES\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) return perror(argv[1]), 1;
  fseek(f, 0, SEEK_END);
  size_t len = (size_t)ftell(f);
  rewind(f);
  char *body = malloc(len + 1);
  if (!body || fread(body, 1, len, f) != len) return perror(argv[1]), 1;
  fclose(f);
  body[len] = '\0';
  int n = atoi(argv[2]);
  if (n < 1) n = 1;

  sip__ks_request_t *k = decode(body, len);
  const sip_tensor_t *const *ins = (const sip_tensor_t *const *)k->req->inputs;
  if (k->req->n_inputs != 1 ||
      (ins[0]->dtype != SIP_DTYPE_FLOAT32 && ins[0]->dtype != SIP_DTYPE_FLOAT64)) {
    fprintf(stderr, "%s: expected one FP32 or FP64 input\n", argv[1]);
    return 2;
  }
  const sip_tensor_t *t = ins[0];
  int64_t count = sip_tensor_count(t);
  sip__ks_body_t resp;
  sip_error_t *e = sip__ks_encode(k, "m", NULL, ins, 1, &resp);
  if (e) die("encode", e);
  size_t own_len;
  char *own = own_body(&resp, t, &own_len);
  size_t resp_len = resp.json_len;
  sip__ks_body_clear(&resp);
  char *text = malloc((size_t)count * SIP_FMT_MAX + 1);
  if (!text) die("buffer", NULL);
  size_t old_len = format_all(t, 1, text), new_len = format_all(t, 0, text);

  /* Small tensors: several runs per sample, so a sample is not all clock. */
  int reps = count >= 30000 ? 1 : (int)(30000 / (count ? count : 1));
  double *samples = malloc(sizeof *samples * (size_t)n * N_TASKS);
  if (!samples) die("samples", NULL);
  for (int i = 0; i < n; i++) {
    for (int task = 0; task < N_TASKS; task++) {
      double t0 = now_us();
      for (int r = 0; r < reps; r++) {
        switch (task) {
        case DECODE: sip__ks_request_free(decode(body, len)); break;
        case DECODE_OWN: sip__ks_request_free(decode(own, own_len)); break;
        case ENCODE:
          if ((e = sip__ks_encode(k, "m", NULL, ins, 1, &resp))) die("encode", e);
          sip__ks_body_clear(&resp);
          break;
        case FMT_OLD: format_all(t, 1, text); break;
        case FMT_NEW: format_all(t, 0, text); break;
        }
      }
      samples[task * n + i] = (now_us() - t0) / reps;
    }
  }
  printf("{\"count\":%lld,\"bytes_in\":%zu,\"bytes_own\":%zu,\"bytes_out\":%zu,"
         "\"bytes_fmt_old\":%zu,\"bytes_fmt_new\":%zu",
         (long long)count, len, own_len, resp_len, old_len, new_len);
  for (int task = 0; task < N_TASKS; task++) {
    qsort(samples + task * n, (size_t)n, sizeof *samples, cmp);
    printf(",\"%s_us\":%.2f", names[task], samples[task * n + n / 2]);
  }
  printf("}\n");
  free(samples);
  free(text);
  free(own);
  sip__ks_request_free(k);
  free(body);
  return 0;
}
