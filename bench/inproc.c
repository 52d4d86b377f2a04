/* bench_inproc — the in-process baseline for the benchmarks: a model run
 * straight through sip's ONNX Runtime backend (the same zero-copy calls the
 * server makes), with no queue, scheduler or transport.
 *
 *   bench_inproc latency MODEL INPUT DIMS N        -> {"p50_us", "p99_us", "mean_us"}
 *   bench_inproc throughput MODEL INPUT DIMS SECONDS [intra_threads [sessions]]
 *                                                   -> {"items_per_s", "batch", "sessions"}
 * Throughput runs `sessions` (default 1) sessions of the one loaded model,
 * each on its own thread running back to back, as a pool of that many
 * sessions would; items_per_s is their sum.
 * DIMS like 1,3,48,192 (dim 0 is the batch); the input is float32 filled
 * with a fixed pattern. Results are JSON on stdout. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "backend/backends.h"
#include "session/engine.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void die(sip_error_t *e) {
  fprintf(stderr, "bench_inproc: %s\n", sip_error_message(e));
  exit(1);
}

/* One execution, its outputs freed. */
static void run_once(const sip_backend_vtable_t *be, void *sess, const sip_tensor_t *const *in,
                     const char *const *names, size_t n_out) {
  sip_tensor_t *res[16];
  sip_error_t *e = be->execute(sess, in, 1, names, n_out, res);
  if (e) die(e);
  for (size_t k = 0; k < n_out; k++) sip_tensor_free(res[k]);
}

/* One session of the throughput mode: runs until `seconds` have passed. */
typedef struct runner {
  const sip_backend_vtable_t *be;
  void *sess;
  const sip_tensor_t *const *in;
  const char *const *names;
  size_t n_out;
  double seconds;
  uint64_t runs;
  double elapsed_s;
} runner_t;

static void *run_session(void *arg) {
  runner_t *r = arg;
  for (int i = 0; i < 3; i++) run_once(r->be, r->sess, r->in, r->names, r->n_out); /* warm-up */
  uint64_t t0 = sip__now_ns();
  while ((double)(sip__now_ns() - t0) < r->seconds * 1e9) {
    run_once(r->be, r->sess, r->in, r->names, r->n_out);
    r->runs++;
  }
  r->elapsed_s = (double)(sip__now_ns() - t0) / 1e9;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: bench_inproc latency|throughput MODEL INPUT DIMS N|SECONDS "
                    "[threads [sessions]]\n");
    return 2;
  }
  const char *mode = argv[1], *model = argv[2], *input = argv[3];
  /* Arguments are checked before anything is loaded, so a refusal frees nothing. */
  int n_sess = argc > 7 ? atoi(argv[7]) : 1;
  if (n_sess < 1 || n_sess > 64) {
    fprintf(stderr, "bench_inproc: sessions must be 1..64, got %d\n", n_sess);
    return 2;
  }
  int64_t dims[SIP_MAX_RANK];
  int rank = 0;
  for (char *p = argv[4]; *p && rank < SIP_MAX_RANK;) {
    dims[rank++] = strtoll(p, &p, 10);
    if (*p == ',') p++;
  }
  size_t count = 1;
  for (int i = 0; i < rank; i++) count *= (size_t)dims[i];
  float *data = malloc(count * sizeof *data);
  for (size_t i = 0; i < count; i++) data[i] = (float)(i % 255) / 255.0f;

  sip_engine_settings_t st = {.intra_op_threads = argc > 6 ? atoi(argv[6]) : 0};
  const sip_backend_vtable_t *be = &sip__backend_onnxruntime;
  void *state = NULL, *m = NULL, *sess = NULL;
  sip_error_t *e;
  /* In chain mode MODEL is a list: load its first entry here. */
  char first[4096];
  snprintf(first, sizeof first, "%s", model);
  if (!strcmp(mode, "chain")) first[strcspn(first, ",")] = '\0';
  if ((e = be->init(&st, &state)) || (e = be->load(state, first, NULL, 0, &m)) ||
      (e = be->session_new(m, &sess)))
    die(e);
  const sip_io_desc_t *ins, *outs;
  size_t n_in, n_out;
  be->describe(m, &ins, &n_in, &outs, &n_out);
  const char *names[16];
  for (size_t i = 0; i < n_out && i < 16; i++) names[i] = outs[i].name;
  sip_tensor_t *t = sip_tensor_new_view(input, SIP_DTYPE_FLOAT32, rank, dims, data,
                                        count * sizeof *data, NULL);
  const sip_tensor_t *tin[1] = {t};

  if (!strcmp(mode, "chain")) {
    /* MODEL is "a.onnx,b.onnx,c.onnx": each model's first output feeds the
     * next model's first input, as a pipeline of model stages would. */
    long n = atol(argv[5]);
    void *ms[8], *ss[8];
    const char *names8[8][1];
    size_t nm = 0;
    char *list = strdup(model), *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok && nm < 8; tok = strtok_r(NULL, ",", &save)) {
      if ((e = be->load(state, tok, NULL, 0, &ms[nm])) || (e = be->session_new(ms[nm], &ss[nm])))
        die(e);
      const sip_io_desc_t *mi, *mo;
      size_t a, b2;
      be->describe(ms[nm], &mi, &a, &mo, &b2);
      names8[nm][0] = mo[0].name;
      nm++;
    }
    uint64_t *lat = malloc((size_t)n * sizeof *lat);
    double sum = 0;
    for (long i = -(n / 10 + 10); i < n; i++) {
      uint64_t t0 = sip__now_ns();
      sip_tensor_t *cur = sip_tensor_new_view(input, SIP_DTYPE_FLOAT32, rank, dims, data,
                                              count * sizeof *data, NULL);
      for (size_t k = 0; k < nm; k++) {
        const sip_io_desc_t *mi, *mo;
        size_t a, b2;
        be->describe(ms[k], &mi, &a, &mo, &b2);
        sip_tensor_t *in = sip_tensor_new_view(mi[0].name, cur->dtype, cur->rank, cur->dims,
                                               cur->data, cur->nbytes, cur->owner);
        const sip_tensor_t *ins1[1] = {in};
        sip_tensor_t *o[1];
        if ((e = be->execute(ss[k], ins1, 1, names8[k], 1, o))) die(e);
        sip_tensor_free(in);
        sip_tensor_free(cur);
        cur = o[0];
      }
      sip_tensor_free(cur);
      if (i >= 0) {
        lat[i] = sip__now_ns() - t0;
        sum += (double)lat[i];
      }
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    printf("{\"p50_us\": %.3f, \"p99_us\": %.3f, \"mean_us\": %.3f, \"models\": %zu}\n",
           lat[n / 2] / 1e3, lat[(size_t)(n * 0.99)] / 1e3, sum / (double)n / 1e3, nm);
    for (size_t k = 0; k < nm; k++) {
      be->session_free(ss[k]);
      be->model_free(ms[k]);
    }
    free(lat);
    free(list);
  } else if (!strcmp(mode, "latency")) {
    long n = atol(argv[5]);
    uint64_t *lat = malloc((size_t)n * sizeof *lat);
    for (long i = 0; i < n / 10 + 10; i++) run_once(be, sess, tin, names, n_out); /* warm-up */
    double sum = 0;
    for (long i = 0; i < n; i++) {
      uint64_t t0 = sip__now_ns();
      run_once(be, sess, tin, names, n_out);
      lat[i] = sip__now_ns() - t0;
      sum += (double)lat[i];
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    printf("{\"p50_us\": %.3f, \"p99_us\": %.3f, \"mean_us\": %.3f}\n", lat[n / 2] / 1e3,
           lat[(size_t)(n * 0.99)] / 1e3, sum / (double)n / 1e3);
    free(lat);
  } else {
    runner_t rs[64];
    pthread_t th[64];
    double seconds = atof(argv[5]);
    for (int i = 0; i < n_sess; i++) {
      rs[i] = (runner_t){.be = be, .sess = sess, .in = tin, .names = names, .n_out = n_out,
                         .seconds = seconds};
      if (i && (e = be->session_new(m, &rs[i].sess))) die(e);
    }
    for (int i = 0; i < n_sess; i++)
      if (pthread_create(&th[i], NULL, run_session, &rs[i])) {
        fprintf(stderr, "bench_inproc: cannot start session thread %d\n", i);
        return 1;
      }
    double items_per_s = 0;
    for (int i = 0; i < n_sess; i++) {
      pthread_join(th[i], NULL);
      items_per_s += (double)rs[i].runs * (double)dims[0] / rs[i].elapsed_s;
      if (i) be->session_free(rs[i].sess);
    }
    printf("{\"items_per_s\": %.3f, \"batch\": %lld, \"sessions\": %d}\n", items_per_s,
           (long long)dims[0], n_sess);
  }
  sip_tensor_free(t);
  be->session_free(sess);
  be->model_free(m);
  be->shutdown(state);
  free(data);
  return 0;
}
