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
#include <curl/curl.h>
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
  /* HTTP (KServe v2) transport: worker threads with keep-alive connections. */
  const char *http_url;
  char *http_body;
  size_t http_body_len;
  char http_hdr[96];
  int http_json;    /* --http-json: JSON tensors instead of binary */
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

static void sleep_until(uint64_t t_ns) {
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
  if (again) b->sent++; /* the slot passes straight to the next request */
  else b->outstanding--;
  pthread_cond_signal(&b->cv);
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

/* ---- HTTP transport ---- */

static const char *kserve_type(sip_dtype_t dt) {
  switch (dt) {
  case SIP_DTYPE_BOOL: return "BOOL";
  case SIP_DTYPE_UINT8: return "UINT8";
  case SIP_DTYPE_UINT16: return "UINT16";
  case SIP_DTYPE_UINT32: return "UINT32";
  case SIP_DTYPE_UINT64: return "UINT64";
  case SIP_DTYPE_INT8: return "INT8";
  case SIP_DTYPE_INT16: return "INT16";
  case SIP_DTYPE_INT32: return "INT32";
  case SIP_DTYPE_INT64: return "INT64";
  case SIP_DTYPE_FLOAT16: return "FP16";
  case SIP_DTYPE_FLOAT32: return "FP32";
  case SIP_DTYPE_FLOAT64: return "FP64";
  case SIP_DTYPE_STRING: return "BYTES";
  default: return "?";
  }
}


/* A KServe v2 request body all in JSON (`data` arrays; numeric inputs only). */
static int build_http_json_body(bench_t *b) {
  json_t *ins = json_array();
  for (size_t i = 0; i < b->req.n_inputs; i++) {
    const sip_tensor_t *t = b->req.inputs[i];
    if (t->dtype == SIP_DTYPE_STRING || t->dtype == SIP_DTYPE_FLOAT16) {
      json_decref(ins);
      fprintf(stderr, "sip bench: --http-json supports numeric inputs other than float16\n");
      return -1;
    }
    json_t *shape = json_array(), *data = json_array();
    for (int k = 0; k < t->rank; k++) json_array_append_new(shape, json_integer(t->dims[k]));
    int64_t n = sip_tensor_count(t);
    for (int64_t k = 0; k < n; k++) {
      double v = sip_cli_value(t->dtype, t->data, (size_t)k);
      json_array_append_new(data, t->dtype == SIP_DTYPE_BOOL       ? json_boolean(v != 0)
                                  : t->dtype == SIP_DTYPE_FLOAT32 ||
                                          t->dtype == SIP_DTYPE_FLOAT64
                                      ? json_real(v)
                                      : json_integer((json_int_t)v));
    }
    json_array_append_new(ins, json_pack("{s:s,s:o,s:s,s:o}", "name", t->name, "shape", shape,
                                         "datatype", kserve_type(t->dtype), "data", data));
  }
  json_t *root = json_pack("{s:o}", "inputs", ins);
  b->http_body = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (!b->http_body) return -1;
  b->http_body_len = strlen(b->http_body);
  b->http_hdr[0] = '\0'; /* no Inference-Header-Content-Length: the body is JSON */
  return 0;
}

/* A KServe v2 request body with the binary tensor extension (the JSON
 * header, then every input's raw bytes; outputs asked for as binary). */
static int build_http_body(bench_t *b) {
  json_t *ins = json_array(), *root = json_object();
  size_t data = 0;
  for (size_t i = 0; i < b->req.n_inputs; i++) {
    const sip_tensor_t *t = b->req.inputs[i];
    json_t *shape = json_array();
    for (int k = 0; k < t->rank; k++) json_array_append_new(shape, json_integer(t->dims[k]));
    json_array_append_new(ins, json_pack("{s:s,s:o,s:s,s:{s:I}}", "name", t->name, "shape", shape,
                                         "datatype", kserve_type(t->dtype), "parameters",
                                         "binary_data_size", (json_int_t)t->nbytes));
    data += t->nbytes;
  }
  json_object_set_new(root, "inputs", ins);
  if (b->req.n_outputs) {
    json_t *outs = json_array();
    for (size_t i = 0; i < b->req.n_outputs; i++)
      json_array_append_new(outs, json_pack("{s:s,s:{s:b}}", "name", b->req.outputs[i],
                                            "parameters", "binary_data", 1));
    json_object_set_new(root, "outputs", outs);
  } else {
    json_object_set_new(root, "parameters", json_pack("{s:b}", "binary_data_output", 1));
  }
  if (b->req.timeout_ms || b->req.priority) {
    json_t *params = json_object_get(root, "parameters");
    if (!params) json_object_set_new(root, "parameters", params = json_object());
    if (b->req.timeout_ms)
      json_object_set_new(params, "timeout", json_integer((json_int_t)b->req.timeout_ms * 1000));
    if (b->req.priority) json_object_set_new(params, "priority", json_integer(b->req.priority));
  }
  char *hdr = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (!hdr) return -1;
  size_t hl = strlen(hdr);
  b->http_body = malloc(hl + data + 1);
  if (!b->http_body) {
    free(hdr);
    return -1;
  }
  memcpy(b->http_body, hdr, hl);
  size_t off = hl;
  for (size_t i = 0; i < b->req.n_inputs; i++) {
    memcpy(b->http_body + off, b->req.inputs[i]->data, b->req.inputs[i]->nbytes);
    off += b->req.inputs[i]->nbytes;
  }
  b->http_body_len = off;
  snprintf(b->http_hdr, sizeof b->http_hdr, "Inference-Header-Content-Length: %zu", hl);
  free(hdr);
  return 0;
}

static size_t sink(char *p, size_t size, size_t n, void *user) {
  (void)p;
  (void)user;
  return size * n;
}

static sip_code_t code_of_http(long status) {
  switch (status) {
  case 200: return SIP_OK;
  case 400: return SIP_INVALID_ARGUMENT;
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

static void *http_worker(void *arg) {
  bench_t *b = arg;
  CURL *h = curl_easy_init();
  struct curl_slist *hdrs = curl_slist_append(
      NULL, b->http_hdr[0] ? "Content-Type: application/octet-stream" : "Content-Type: application/json");
  if (b->http_hdr[0]) hdrs = curl_slist_append(hdrs, b->http_hdr);
  const char *token = getenv("SIP_TOKEN"); /* a token of server.auth (docs/security.md) */
  if (token && *token) {
    char auth[4200];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    hdrs = curl_slist_append(hdrs, auth);
  }
  curl_easy_setopt(h, CURLOPT_URL, b->http_url);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, b->http_body);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)b->http_body_len);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  for (;;) {
    uint64_t intended = next_intended(b);
    if (!intended) break;
    sleep_until(intended);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    uint64_t lat_us = (now_ns() - intended) / 1000;
    pthread_mutex_lock(&b->mu);
    record(&b->cur, lat_us);
    sip_code_t code = rc == CURLE_OK ? code_of_http(status) : SIP_UNAVAILABLE;
    if (code == SIP_OK)
      b->cur.ok++;
    else
      b->cur.errors_by_code[code]++;
    b->outstanding--;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
  }
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(h);
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

static void usage_bench(FILE *f) {
  fprintf(f,
          "usage: sip [-e ENDPOINT] bench POOL -i NAME:DTYPE:SHAPE=VALUES... [options]\n"
          "  ENDPOINT may also be http://HOST:PORT (KServe v2; --http-format binary|json,\n"
          "  default binary tensors)\n"
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
  if (b.seq_len < 0 || (b.seq_len && (!b.concurrency || !strncmp(endpoint, "http", 4)))) {
    fprintf(stderr, "sip bench: --sequence-length needs a length >= 1, --concurrency and a "
                    "native endpoint\n");
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

  /* Native endpoints: one sender thread, asynchronous requests. HTTP: a
   * worker per outstanding request (concurrency N, or --max-outstanding in
   * rate modes), each on its own keep-alive connection. */
  size_t n_workers = 0;
  pthread_t sender, *workers = NULL;
  char url[512];
  b.next_ns = now_ns();
  if (b.client) {
    pthread_create(&sender, NULL, sender_main, &b);
  } else {
    snprintf(url, sizeof url, "%s/v2/models/%s/infer", endpoint, b.req.pool);
    b.http_url = url;
    if ((b.http_json ? build_http_json_body(&b) : build_http_body(&b)) != 0) {
      fprintf(stderr, "sip bench: out of memory\n");
      rc = 1;
      goto done;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    n_workers = b.concurrency ? (size_t)b.concurrency
                              : (size_t)(b.max_outstanding < 256 ? b.max_outstanding : 256);
    workers = calloc(n_workers, sizeof *workers);
    for (size_t k = 0; k < n_workers; k++) pthread_create(&workers[k], NULL, http_worker, &b);
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
  free(b.http_body);
  if (!b.client) curl_global_cleanup();
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
  for (size_t k = 0; k < n_in; k++) sip_tensor_free(inputs[k]);
  return rc;
}
