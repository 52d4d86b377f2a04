/* sip bench — a load generator for sip pools (perf_analyzer is the anchor).
 *
 * Modes: --concurrency N keeps N requests outstanding; --rate R sends R
 * requests per second (--distribution constant|poisson); --pattern spike
 * alternates 1-second periods at --min-rate and, with --spike-probability,
 * at --max-rate (Poisson arrivals within a period).
 *
 * Latency is measured from each request's *intended* send time, so a slow
 * server cannot hide behind a generator that waits for it (coordinated
 * omission). Measurement runs in windows until the last three agree within
 * ±10% in throughput and p99, then reports those three together. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sip/client.h"
#include "tools/cli.h"

typedef struct window {
  uint64_t *lat_us; /* latencies of requests completed in this window */
  size_t n, cap;
  uint64_t ok, errors_by_code[SIP_CODE_COUNT_];
  uint64_t queue_us_sum, compute_us_sum, server_n;
} window_t;

typedef struct bench {
  sip_client_t *client;
  sip_client_request_t req;
  /* mode */
  int concurrency;
  double rate, min_rate, max_rate, spike_p;
  int poisson, spike;
  long max_outstanding;
  /* state */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long outstanding;
  int stop;
  window_t cur;
  uint64_t sent;
  unsigned seed;
  /* HTTP and gRPC (KServe v2) transports: a worker thread per kept
   * connection, one request outstanding on each. */
  sip_cli_http_t *http;
  sip_cli_grpc_t *grpc;
  int http_json;             /* --http-format json: JSON tensors instead of binary */
  const char *http_body;     /* --http-body FILE: that body as it is */
  int http_err_said;         /* a connection error was printed */
  int grpc_status_said;      /* a gRPC error status was printed */
  uint64_t next_ns; /* rate modes: the next intended send time */
  uint64_t period_end_ns;
  double period_rate;
  /* --sequence-length L: each closed-loop chain sends sequences of L
   * requests (START on the first, END on the last), each a new id. */
  int seq_len;
  uint64_t next_seq;
} bench_t;

typedef struct inflight {
  bench_t *b;
  uint64_t intended_ns;
  uint64_t seq_id; /* the chain's current sequence */
  int seq_pos;     /* its next request's place in it */
} inflight_t;

static void on_done(sip_client_response_t *r, sip_error_t *e, void *user);

/* Sends the chain's next request (its place in a sequence, if any). */
static sip_error_t *send_req(bench_t *b, inflight_t *f) {
  sip_client_request_t req = b->req;
  if (b->seq_len) {
    if (f->seq_pos == 0) f->seq_id = __atomic_add_fetch(&b->next_seq, 1, __ATOMIC_RELAXED);
    req.sequence_id = f->seq_id;
    req.sequence_start = f->seq_pos == 0;
    req.sequence_end = f->seq_pos == b->seq_len - 1;
    f->seq_pos = (f->seq_pos + 1) % b->seq_len;
  }
  return sip_client_infer_async(b->client, &req, on_done, f);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps until t_ns unless it has passed: a sleep asked for a time already
 * gone still parks the thread until the timer fires, tens of microseconds
 * on a virtual machine, which a closed loop would count in every round trip. */
static void sleep_until(uint64_t t_ns) {
  if (now_ns() >= t_ns) return;
  struct timespec ts = {(time_t)(t_ns / 1000000000ull), (long)(t_ns % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void record(window_t *w, uint64_t lat_us) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 4096;
    uint64_t *v = realloc(w->lat_us, cap * sizeof *v);
    if (!v) return;
    w->lat_us = v;
    w->cap = cap;
  }
  w->lat_us[w->n++] = lat_us;
}

static void on_done(sip_client_response_t *r, sip_error_t *e, void *user) {
  inflight_t *f = user;
  bench_t *b = f->b;
  uint64_t lat_us = (now_ns() - f->intended_ns) / 1000;
  pthread_mutex_lock(&b->mu);
  record(&b->cur, lat_us);
  if (r) {
    b->cur.ok++;
    b->cur.queue_us_sum += r->queue_us;
    b->cur.compute_us_sum += r->compute_us;
    b->cur.server_n++;
  } else {
    unsigned c = (unsigned)sip_error_code(e);
    b->cur.errors_by_code[c < SIP_CODE_COUNT_ ? c : SIP_INTERNAL]++;
  }
  /* A chain stopping mid-sequence finishes it first: an open sequence would
   * hold its slot on the server until the idle timeout. */
  int again = b->concurrency && (!b->stop || (b->seq_len && f->seq_pos != 0));
  /* Only a freed slot concerns the threads waiting on cv (the sender, and
   * the end of the run): a closed loop that signals every answer wakes the
   * sender for nothing, a context switch on the CPU the round trip needs. */
  if (again) {
    b->sent++; /* the slot passes straight to the next request */
  } else {
    b->outstanding--;
    pthread_cond_signal(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  sip_client_response_free(r);
  sip_error_free(e);
  /* Closed loop: send the next request from here, without waking another
   * thread, so the generator adds as little as it can to each round trip. */
  if (again) {
    f->intended_ns = now_ns();
    sip_error_t *e2 = send_req(b, f);
    if (!e2) return;
    sip_error_free(e2);
    pthread_mutex_lock(&b->mu);
    b->outstanding--;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
  }
  free(f);
}

/* Sends one request meant to leave at intended_ns. Returns -1 when the
 * connection is gone. */
static int send_one(bench_t *b, uint64_t intended_ns) {
  inflight_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->b = b;
  f->intended_ns = intended_ns;
  sip_error_t *e = send_req(b, f);
  if (e) {
    fprintf(stderr, "sip bench: %s\n", sip_error_message(e));
    sip_error_free(e);
    free(f);
    pthread_mutex_lock(&b->mu);
    b->outstanding--;
    pthread_mutex_unlock(&b->mu);
    return -1;
  }
  return 0;
}

/* Exponential gap for a Poisson process of `rate` per second, in ns. */
static uint64_t gap_ns(bench_t *b, double rate) {
  if (!b->poisson && !b->spike) return (uint64_t)(1e9 / rate);
  double u = (rand_r(&b->seed) + 1.0) / ((double)RAND_MAX + 2.0);
  return (uint64_t)(-log(u) / rate * 1e9);
}

/* Rate modes: the next intended send time, advancing the shared schedule
 * (a spike pattern picks each 1-second period's rate). Caller holds b->mu. */
static uint64_t schedule_next(bench_t *b) {
  if (b->spike && b->next_ns >= b->period_end_ns) {
    b->period_rate = (rand_r(&b->seed) / ((double)RAND_MAX + 1.0)) < b->spike_p ? b->max_rate
                                                                                  : b->min_rate;
    b->period_end_ns = b->next_ns + 1000000000ull;
  }
  uint64_t t = b->next_ns;
  b->next_ns += gap_ns(b, b->spike ? b->period_rate : b->rate);
  return t;
}

/* Waits until fewer than `cap` requests are outstanding and takes a place;
 * 0 once the run is stopping. */
static int take_place(bench_t *b, long cap) {
  pthread_mutex_lock(&b->mu);
  while (!b->stop && b->outstanding >= cap) pthread_cond_wait(&b->cv, &b->mu);
  int ok = !b->stop;
  if (ok) {
    b->outstanding++;
    b->sent++;
  }
  pthread_mutex_unlock(&b->mu);
  return ok;
}

static void *sender_main(void *arg) {
  bench_t *b = arg;
  for (;;) {
    uint64_t intended;
    if (b->concurrency) {
      if (!take_place(b, b->concurrency)) break;
      intended = now_ns(); /* the place freed now: that is when this request was meant to go */
    } else {
      pthread_mutex_lock(&b->mu);
      intended = schedule_next(b);
      pthread_mutex_unlock(&b->mu);
      sleep_until(intended);
      /* Past the outstanding cap the send waits, but its latency still
       * counts from `intended`, the time it should have left. */
      if (!take_place(b, b->max_outstanding)) break;
    }
    if (send_one(b, intended) < 0) break;
  }
  return NULL;
}

/* ---- HTTP transport (tools/bench_http.c) ---- */

static sip_code_t code_of_http(long status) {
  switch (status) {
  case 200: return SIP_OK;
  case 400: return SIP_INVALID_ARGUMENT;
  case 401: return SIP_UNAUTHENTICATED;
  case 403: return SIP_PERMISSION_DENIED;
  case 404: return SIP_NOT_FOUND;
  case 413: case 429: return SIP_RESOURCE_EXHAUSTED;
  case 499: return SIP_CANCELLED;
  case 501: return SIP_UNIMPLEMENTED;
  case 503: return SIP_UNAVAILABLE;
  case 504: return SIP_DEADLINE_EXCEEDED;
  default: return SIP_INTERNAL;
  }
}

/* When the next request is meant to leave; 0 once the run is over. */
static uint64_t next_intended(bench_t *b) {
  pthread_mutex_lock(&b->mu);
  uint64_t t = 0;
  if (!b->stop) {
    t = b->concurrency ? now_ns() : schedule_next(b);
    b->outstanding++;
  }
  pthread_mutex_unlock(&b->mu);
  return t;
}

/* gRPC's status code as sip's (docs/grpc.md's table, read backwards). */
static sip_code_t code_of_grpc(int status) {
  for (int k = 0; k < SIP_CODE_COUNT_; k++)
    if (sip_code_grpc_status((sip_code_t)k) == status) return (sip_code_t)k;
  return SIP_INTERNAL;
}

/* One kept connection (HTTP or gRPC), one request outstanding on it. */
static void *conn_worker(void *arg) {
  bench_t *b = arg;
  sip_cli_http_conn_t *conn = b->http ? sip_cli_http_conn_new(b->http) : NULL;
  sip_cli_grpc_conn_t *gconn = b->grpc ? sip_cli_grpc_conn_new(b->grpc) : NULL;
  for (;;) {
    uint64_t intended = conn || gconn ? next_intended(b) : 0;
    if (!intended) break;
    sleep_until(intended);
    int status = conn ? sip_cli_http_roundtrip(conn) : sip_cli_grpc_call(gconn);
    uint64_t lat_us = (now_ns() - intended) / 1000;
    if (status < 0 && !__atomic_exchange_n(&b->http_err_said, 1, __ATOMIC_RELAXED))
      fprintf(stderr, "sip bench: %s (counted as UNAVAILABLE; said once)\n",
              conn ? sip_cli_http_conn_error(conn) : sip_cli_grpc_conn_error(gconn));
    if (gconn && status > 0 && !__atomic_exchange_n(&b->grpc_status_said, 1, __ATOMIC_RELAXED))
      fprintf(stderr, "sip bench: gRPC status %d, %s (said once)\n", status,
              sip_cli_grpc_conn_error(gconn));
    sip_code_t code = status < 0 ? SIP_UNAVAILABLE
                      : conn     ? code_of_http(status)
                                 : code_of_grpc(status);
    pthread_mutex_lock(&b->mu);
    record(&b->cur, lat_us);
    if (code == SIP_OK)
      b->cur.ok++;
    else
      b->cur.errors_by_code[code]++;
    b->outstanding--;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
  }
  if (!conn && !gconn) fprintf(stderr, "sip bench: out of memory for a connection\n");
  sip_cli_http_conn_free(conn);
  sip_cli_grpc_conn_free(gconn);
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct summary {
  double seconds, throughput, mean_ms, p50_ms, p90_ms, p95_ms, p99_ms, queue_us, compute_us;
  uint64_t n, ok, errors, errors_by_code[SIP_CODE_COUNT_];
} summary_t;

static double pct(const uint64_t *v, size_t n, double q) {
  if (!n) return 0;
  size_t i = (size_t)ceil(q * (double)n) - 1;
  return (double)v[i < n ? i : n - 1] / 1000.0;
}

/* Summarises windows (sorting their latencies together). */
static summary_t summarise(window_t *ws, size_t n, double seconds) {
  summary_t s = {.seconds = seconds};
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += ws[i].n;
  uint64_t *all = malloc((total ? total : 1) * sizeof *all);
  size_t k = 0;
  double sum = 0, qsum = 0, csum = 0, sn = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < ws[i].n && all; j++) all[k++] = ws[i].lat_us[j], sum += ws[i].lat_us[j];
    s.ok += ws[i].ok;
    for (int c = 0; c < SIP_CODE_COUNT_; c++) {
      s.errors_by_code[c] += ws[i].errors_by_code[c];
      s.errors += ws[i].errors_by_code[c];
    }
    qsum += ws[i].queue_us_sum;
    csum += ws[i].compute_us_sum;
    sn += ws[i].server_n;
  }
  if (all) qsort(all, k, sizeof *all, cmp_u64);
  s.n = k;
  s.throughput = seconds > 0 ? (double)k / seconds : 0;
  s.mean_ms = k ? sum / (double)k / 1000.0 : 0;
  s.p50_ms = pct(all, k, 0.50);
  s.p90_ms = pct(all, k, 0.90);
  s.p95_ms = pct(all, k, 0.95);
  s.p99_ms = pct(all, k, 0.99);
  s.queue_us = sn ? qsum / sn : 0;
  s.compute_us = sn ? csum / sn : 0;
  free(all);
  return s;
}

static int within(double a, double b, double tol) {
  double m = a > b ? a : b;
  return m == 0 || fabs(a - b) <= tol * m;
}

/* --shm: a region holding every input (sent by reference: only the frame
 * travels on the socket) and room for each requested output ("separate":
 * after the inputs, out_bytes each, default the largest input's size;
 * "in-place": output k over input k's bytes). Outstanding requests share
 * the region: their outputs overwrite each other. */
static int set_up_shm(bench_t *b, const char *mode, uint64_t out_bytes,
                      sip_client_shm_ref_t *in_refs, sip_client_shm_ref_t *out_refs,
                      sip_client_shm_t **region) {
  int in_place = !strcmp(mode, "in-place");
  if (in_place && (!b->req.n_outputs || b->req.n_outputs > b->req.n_inputs)) {
    fprintf(stderr, "sip bench: --shm in-place writes output k over input k: it needs 1..%zu "
                    "outputs named with -o\n", b->req.n_inputs);
    return -1;
  }
  uint64_t size = 0, largest = 0;
  for (size_t i = 0; i < b->req.n_inputs; i++) {
    uint64_t n = b->req.inputs[i]->nbytes;
    in_refs[i] = (sip_client_shm_ref_t){"bench", size, n};
    size += (n + 63) & ~63ull;
    largest = n > largest ? n : largest;
  }
  if (!out_bytes) out_bytes = largest ? largest : 64;
  for (size_t k = 0; k < b->req.n_outputs; k++) {
    out_refs[k] = in_place ? in_refs[k] : (sip_client_shm_ref_t){"bench", size, out_bytes};
    if (!in_place) size += (out_bytes + 63) & ~63ull;
  }
  sip_error_t *e = sip_client_shm_create(b->client, "bench", size ? size : 64, region);
  if (e) {
    fprintf(stderr, "sip bench: --shm: a region of %llu bytes: %s\n", (unsigned long long)size,
            sip_error_message(e));
    sip_error_free(e);
    return -1;
  }
  char *base = sip_client_shm_data(*region);
  for (size_t i = 0; i < b->req.n_inputs; i++)
    memcpy(base + in_refs[i].offset, b->req.inputs[i]->data, b->req.inputs[i]->nbytes);
  b->req.input_shm = in_refs;
  if (b->req.n_outputs) b->req.output_shm = out_refs;
  return 0;
}

static void usage_bench(FILE *f) {
  fprintf(f,
          "usage: sip [-e ENDPOINT] bench POOL -i NAME:DTYPE:SHAPE=VALUES... [options]\n"
          "  ENDPOINT may also be http://HOST:PORT (KServe v2; --http-format binary|json,\n"
          "  default binary tensors; one kept-alive connection per outstanding request)\n"
          "  or grpc://HOST:PORT (KServe v2 ModelInfer, raw tensors; one kept HTTP/2\n"
          "  connection per outstanding request)\n"
          "  --concurrency N            N requests outstanding (default 1)\n"
          "  --rate R                   R requests/s instead (open loop)\n"
          "  --distribution constant|poisson   arrivals in --rate mode (default constant)\n"
          "  --pattern spike --min-rate A --max-rate B --spike-probability P\n"
          "                             1 s periods at A req/s, or B with probability P\n"
          "  --window-ms MS             measurement window (default 2000)\n"
          "  --max-windows N            give up on stability after N windows (default 10)\n"
          "  --max-outstanding N        cap in rate modes (default 1024)\n"
          "  --timeout-ms N --priority high|medium|low  -o OUTPUT   as for infer\n"
          "  --sequence-length L        with --concurrency on a native endpoint: each\n"
          "                             outstanding chain sends sequences of L requests\n"
          "                             (a sequence_batching pool; docs/sequences.md)\n"
          "  --shm separate|in-place    native unix socket: inputs in a shared memory\n"
          "                             region (sent by reference), the -o outputs written\n"
          "                             into it after them, or over the inputs (in-place)\n"
          "  --shm-output-bytes N       room for each output (default the largest input)\n"
          "  --http-body FILE           HTTP: send FILE as the JSON body (e.g. one naming\n"
          "                             registered shared memory regions) instead of -i\n"
          "  --json                     machine-readable result on stdout\n");
}

int sip_cli_bench(sip_client_t *c, const char *endpoint, int json_out, int argc, char **argv) {
  if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
    usage_bench(argc < 1 ? stderr : stdout);
    return argc < 1 ? 2 : 0;
  }
  bench_t b = {.client = c, .req = {.pool = argv[0]}, .max_outstanding = 1024, .seed = 12345};
  sip_tensor_t *inputs[64];
  const char *outputs[64];
  size_t n_in = 0, n_out = 0;
  long window_ms = 2000, max_windows = 10;
  int rc = 0;
  const char *shm_mode = NULL; /* --shm */
  uint64_t shm_out_bytes = 0;
  sip_client_shm_ref_t in_refs[64], out_refs[64];
  sip_client_shm_t *region = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "sip bench: %s needs a value\n", a);
      rc = 2;
      goto done;
    }
    i++;
    if (!strcmp(a, "-i") || !strcmp(a, "--input")) {
      sip_tensor_t *t = n_in < 64 ? sip_cli_parse_input(v) : NULL;
      if (!t) {
        rc = 2;
        goto done;
      }
      inputs[n_in++] = t;
    } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && n_out < 64) {
      outputs[n_out++] = v;
    } else if (!strcmp(a, "--concurrency")) {
      b.concurrency = atoi(v);
    } else if (!strcmp(a, "--rate")) {
      b.rate = atof(v);
    } else if (!strcmp(a, "--distribution")) {
      if (strcmp(v, "constant") && strcmp(v, "poisson")) {
        fprintf(stderr, "sip bench: --distribution %s; expected constant or poisson\n", v);
        rc = 2;
        goto done;
      }
      b.poisson = !strcmp(v, "poisson");
    } else if (!strcmp(a, "--pattern")) {
      if (strcmp(v, "spike")) {
        fprintf(stderr, "sip bench: --pattern %s; expected spike\n", v);
        rc = 2;
        goto done;
      }
      b.spike = 1;
    } else if (!strcmp(a, "--http-format")) {
      if (strcmp(v, "json") && strcmp(v, "binary")) {
        fprintf(stderr, "sip bench: --http-format %s; expected json or binary\n", v);
        rc = 2;
        goto done;
      }
      b.http_json = !strcmp(v, "json");
    } else if (!strcmp(a, "--http-body")) {
      b.http_body = v;
    } else if (!strcmp(a, "--shm")) {
      if (strcmp(v, "separate") && strcmp(v, "in-place")) {
        fprintf(stderr, "sip bench: --shm %s; expected separate or in-place\n", v);
        rc = 2;
        goto done;
      }
      shm_mode = v;
    } else if (!strcmp(a, "--shm-output-bytes")) {
      shm_out_bytes = strtoull(v, NULL, 10);
    } else if (!strcmp(a, "--min-rate")) {
      b.min_rate = atof(v);
    } else if (!strcmp(a, "--max-rate")) {
      b.max_rate = atof(v);
    } else if (!strcmp(a, "--spike-probability")) {
      b.spike_p = atof(v);
    } else if (!strcmp(a, "--window-ms")) {
      window_ms = atol(v);
    } else if (!strcmp(a, "--max-windows")) {
      max_windows = atol(v);
    } else if (!strcmp(a, "--sequence-length")) {
      b.seq_len = atoi(v);
    } else if (!strcmp(a, "--max-outstanding")) {
      b.max_outstanding = atol(v);
    } else if (!strcmp(a, "--timeout-ms")) {
      b.req.timeout_ms = (uint32_t)strtoul(v, NULL, 10);
    } else if (!strcmp(a, "--priority")) {
      b.req.priority = !strcasecmp(v, "high") ? 1 : !strcasecmp(v, "medium") ? 2
                       : !strcasecmp(v, "low") ? 3 : atoi(v);
    } else {
      fprintf(stderr, "sip bench: unknown option '%s'\n", a);
      usage_bench(stderr);
      rc = 2;
      goto done;
    }
  }
  if (b.spike && (b.min_rate <= 0 || b.max_rate < b.min_rate || b.spike_p < 0 || b.spike_p > 1)) {
    fprintf(stderr, "sip bench: --pattern spike needs 0 < --min-rate <= --max-rate and "
                    "--spike-probability in 0..1\n");
    rc = 2;
    goto done;
  }
  if (!b.spike && b.rate <= 0 && b.concurrency <= 0) b.concurrency = 1;
  if (b.spike || b.rate > 0) b.concurrency = 0;
  int http = !strncmp(endpoint, "http", 4), grpc = !strncmp(endpoint, "grpc://", 7);
  if (b.seq_len < 0 || (b.seq_len && (!b.concurrency || http || grpc))) {
    fprintf(stderr, "sip bench: --sequence-length needs a length >= 1, --concurrency and a "
                    "native endpoint\n");
    rc = 2;
    goto done;
  }
  if ((shm_mode || shm_out_bytes) && (http || grpc || !shm_mode)) {
    fprintf(stderr, "sip bench: --shm (and --shm-output-bytes with it) needs a native unix-socket "
                    "endpoint (ipc:// or unix://); over HTTP, register regions and send a body "
                    "naming them with --http-body\n");
    rc = 2;
    goto done;
  }
  if ((b.http_body || b.http_json) && !http) {
    fprintf(stderr, "sip bench: --http-body and --http-format json need an http:// endpoint\n");
    rc = 2;
    goto done;
  }
  if (window_ms < 100 || max_windows < 3 || b.max_outstanding < 1) {
    fprintf(stderr, "sip bench: --window-ms >= 100, --max-windows >= 3, --max-outstanding >= 1\n");
    rc = 2;
    goto done;
  }
  b.req.inputs = (const sip_tensor_t *const *)inputs;
  b.req.n_inputs = n_in;
  b.req.outputs = outputs;
  b.req.n_outputs = n_out;
  pthread_mutex_init(&b.mu, NULL);
  pthread_cond_init(&b.cv, NULL);
  char mode[128];
  if (b.concurrency)
    snprintf(mode, sizeof mode, "concurrency %d", b.concurrency);
  else if (b.spike)
    snprintf(mode, sizeof mode, "spike %.0f..%.0f req/s p=%.2f", b.min_rate, b.max_rate,
             b.spike_p);
  else
    snprintf(mode, sizeof mode, "rate %.1f req/s %s", b.rate, b.poisson ? "poisson" : "constant");
  fprintf(stderr, "sip bench: pool %s at %s, %s, windows of %ld ms\n", b.req.pool, endpoint, mode,
          window_ms);

  /* Native endpoints: one sender thread, asynchronous requests. HTTP and
   * gRPC: a worker per outstanding request (concurrency N, or
   * --max-outstanding in rate modes), each on its own kept connection. */
  size_t n_workers = 0;
  pthread_t sender, *workers = NULL;
  b.next_ns = now_ns();
  if (b.client) {
    if (shm_mode && set_up_shm(&b, shm_mode, shm_out_bytes, in_refs, out_refs, &region)) {
      rc = 1;
      goto done;
    }
    pthread_create(&sender, NULL, sender_main, &b);
  } else {
    if (grpc ? sip_cli_grpc_new(endpoint, &b.req, &b.grpc)
             : sip_cli_http_new(endpoint, &b.req, b.http_json, b.http_body, &b.http)) {
      rc = 1;
      goto done;
    }
    n_workers = b.concurrency ? (size_t)b.concurrency
                              : (size_t)(b.max_outstanding < 256 ? b.max_outstanding : 256);
    workers = calloc(n_workers, sizeof *workers);
    if (!workers) {
      fprintf(stderr, "sip bench: out of memory for %zu workers\n", n_workers);
      rc = 1;
      goto done;
    }
    for (size_t k = 0; k < n_workers; k++) pthread_create(&workers[k], NULL, conn_worker, &b);
  }
  window_t *ws = calloc((size_t)max_windows, sizeof *ws);
  size_t nw = 0;
  int stable = 0;
  uint64_t t0 = now_ns();
  while (nw < (size_t)max_windows) {
    sleep_until(t0 + (uint64_t)(nw + 1) * (uint64_t)window_ms * 1000000ull);
    pthread_mutex_lock(&b.mu);
    ws[nw] = b.cur;
    memset(&b.cur, 0, sizeof b.cur);
    pthread_mutex_unlock(&b.mu);
    summary_t s = summarise(&ws[nw], 1, window_ms / 1000.0);
    fprintf(stderr, "  window %zu: %9.1f req/s  p50 %8.3f ms  p99 %8.3f ms  errors %llu\n", nw + 1,
            s.throughput, s.p50_ms, s.p99_ms, (unsigned long long)s.errors);
    nw++;
    if (nw >= 3) {
      summary_t a = summarise(&ws[nw - 3], 1, 1), m = summarise(&ws[nw - 2], 1, 1),
                z = summarise(&ws[nw - 1], 1, 1);
      if (within(a.throughput, m.throughput, 0.1) && within(m.throughput, z.throughput, 0.1) &&
          within(a.throughput, z.throughput, 0.1) && within(a.p99_ms, m.p99_ms, 0.1) &&
          within(m.p99_ms, z.p99_ms, 0.1) && within(a.p99_ms, z.p99_ms, 0.1)) {
        stable = 1;
        break;
      }
    }
  }
  pthread_mutex_lock(&b.mu);
  b.stop = 1;
  pthread_cond_broadcast(&b.cv);
  pthread_mutex_unlock(&b.mu);
  if (b.client) pthread_join(sender, NULL);
  for (size_t k = 0; k < n_workers; k++) pthread_join(workers[k], NULL);
  free(workers);
  /* Let outstanding requests finish so their callbacks don't outlive us. */
  pthread_mutex_lock(&b.mu);
  while (b.outstanding > 0) pthread_cond_wait(&b.cv, &b.mu);
  pthread_mutex_unlock(&b.mu);

  summary_t s = summarise(&ws[nw - 3], 3, 3.0 * (double)window_ms / 1000.0);
  if (json_out) {
    json_t *errs = json_object();
    for (int k = 0; k < SIP_CODE_COUNT_; k++)
      if (s.errors_by_code[k])
        json_object_set_new(errs, sip_code_name((sip_code_t)k),
                            json_integer((json_int_t)s.errors_by_code[k]));
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:b,s:I,s:f,s:I,s:I,s:f,s:{s:f,s:f,s:f,s:f,s:f},s:o,s:{s:f,s:f}}", "pool",
        b.req.pool, "endpoint", endpoint, "mode", mode, "stable", stable, "windows",
        (json_int_t)nw, "seconds", s.seconds, "requests", (json_int_t)s.n, "errors",
        (json_int_t)s.errors, "throughput_rps", s.throughput, "latency_ms", "mean", s.mean_ms,
        "p50", s.p50_ms, "p90", s.p90_ms, "p95", s.p95_ms, "p99", s.p99_ms, "errors_by_code",
        errs, "server_us", "queue_mean", s.queue_us, "compute_mean", s.compute_us);
    char *txt = json_dumps(o, JSON_INDENT(2));
    printf("%s\n", txt);
    free(txt);
    json_decref(o);
  } else {
    printf("%s after %zu windows (the last 3 %s within ±10%%)\n",
           stable ? "stable" : "NOT stable", nw, stable ? "agree" : "do not agree");
    printf("throughput: %.1f req/s (%llu requests, %llu errors)\n", s.throughput,
           (unsigned long long)s.n, (unsigned long long)s.errors);
    printf("latency ms: mean %.3f  p50 %.3f  p90 %.3f  p95 %.3f  p99 %.3f\n", s.mean_ms, s.p50_ms,
           s.p90_ms, s.p95_ms, s.p99_ms);
    printf("server us : queue %.1f  compute %.1f (means)\n", s.queue_us, s.compute_us);
    if (s.errors) {
      printf("errors    :");
      for (int k = 0; k < SIP_CODE_COUNT_; k++)
        if (s.errors_by_code[k])
          printf(" %s=%llu", sip_code_name((sip_code_t)k),
                 (unsigned long long)s.errors_by_code[k]);
      printf("\n");
    }
  }
  rc = s.n ? 0 : 1;
  for (size_t k = 0; k < nw; k++) free(ws[k].lat_us);
  free(ws);
  free(b.cur.lat_us);
  pthread_mutex_destroy(&b.mu);
  pthread_cond_destroy(&b.cv);
done:
  if (region) {
    sip_error_t *e = sip_client_shm_destroy(c, region);
    if (e) fprintf(stderr, "sip bench: unregistering the region: %s\n", sip_error_message(e));
    sip_error_free(e);
  }
  sip_cli_http_free(b.http);
  sip_cli_grpc_free(b.grpc);
  for (size_t k = 0; k < n_in; k++) sip_tensor_free(inputs[k]);
  return rc;
}
