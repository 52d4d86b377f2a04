/* sip — Prometheus text exposition of the status JSON.
 *
 * Everything comes from sip__server_info (the status), the same
 * numbers `sip status` and the statistics endpoint show, so the page cannot
 * disagree with them; process metrics come from /proc. Samples of one family
 * are written together, as the format requires.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/core.h"
#include "server/prometheus.h"
#include "server/server_impl.h"

typedef struct sb {
  char *p;
  size_t n, cap;
  int oom;
} sb_t;

static void sb_add(sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sb_t *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->p && (size_t)n < b->cap - b->n) {
      b->n += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 16384;
    while (cap - b->n <= (size_t)n) cap *= 2;
    char *p = sip__realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

/* A label value, escaped as the format requires (\\, \", \n). */
static const char *esc(char *buf, size_t n, const char *s) {
  size_t o = 0;
  for (; s && *s && o + 3 < n; s++) {
    if (*s == '\\' || *s == '"') buf[o++] = '\\', buf[o++] = *s;
    else if (*s == '\n') buf[o++] = '\\', buf[o++] = 'n';
    else buf[o++] = *s;
  }
  buf[o] = '\0';
  return buf;
}

static void family(sb_t *b, const char *name, const char *type, const char *help) {
  sb_add(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static json_int_t ival(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }
static double nval(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* The label set {pool="...",version="..."} of one pool. */
typedef struct pool_labels {
  json_t *status; /* the pool's status object */
  char labels[700];
} pool_labels_t;

static void counter_per_pool(sb_t *b, pool_labels_t *pl, size_t n, const char *name,
                             const char *help, const char *stat, int ns_to_us) {
  family(b, name, "counter", help);
  for (size_t i = 0; i < n; i++) {
    json_t *st = json_object_get(pl[i].status, "stats");
    if (!ns_to_us) {
      sb_add(b, "%s{%s} %lld\n", name, pl[i].labels, (long long)ival(st, stat));
    } else if (!strcmp(stat, "request")) {
      /* Every answered request is a success or a failure. */
      double ns = (double)ival(json_object_get(st, "success"), "ns") +
                  (double)ival(json_object_get(st, "fail"), "ns");
      sb_add(b, "%s{%s} %.3f\n", name, pl[i].labels, ns / 1000.0);
    } else {
      sb_add(b, "%s{%s} %.3f\n", name, pl[i].labels,
             (double)ival(json_object_get(st, stat), "ns") / 1000.0);
    }
  }
}

/* `which` names a histogram in the pool status's "latency_us", or at the
 * top level of the pool status when `group` is NULL. */
static void histogram_per_pool(sb_t *b, pool_labels_t *pl, size_t n, const char *name,
                               const char *help, const char *group, const char *which) {
  family(b, name, "histogram", help);
  for (size_t i = 0; i < n; i++) {
    json_t *parent = group ? json_object_get(pl[i].status, group) : pl[i].status;
    json_t *h = json_object_get(parent, which), *bk;
    size_t j;
    json_array_foreach(json_object_get(h, "buckets"), j, bk) {
      json_t *le = json_array_get(bk, 0);
      if (json_is_string(le))
        sb_add(b, "%s_bucket{%s,le=\"+Inf\"} %lld\n", name, pl[i].labels,
               (long long)json_integer_value(json_array_get(bk, 1)));
      else
        sb_add(b, "%s_bucket{%s,le=\"%lld\"} %lld\n", name, pl[i].labels,
               (long long)json_integer_value(le),
               (long long)json_integer_value(json_array_get(bk, 1)));
    }
    sb_add(b, "%s_sum{%s} %lld\n%s_count{%s} %lld\n", name, pl[i].labels, (long long)ival(h, "sum"),
           name, pl[i].labels, (long long)ival(h, "count"));
  }
}

static void gauge_per_pool(sb_t *b, pool_labels_t *pl, size_t n, const char *name,
                           const char *help, const char *key) {
  family(b, name, "gauge", help);
  for (size_t i = 0; i < n; i++)
    sb_add(b, "%s{%s} %.17g\n", name, pl[i].labels, nval(pl[i].status, key));
}

static void process_metrics(sb_t *b) {
  long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  FILE *f = fopen("/proc/self/stat", "r");
  char line[2048];
  unsigned long long ut = 0, st = 0, start = 0, vsize = 0;
  long long rss = 0;
  if (f) {
    size_t n = fread(line, 1, sizeof line - 1, f);
    line[n] = '\0';
    fclose(f);
    /* Fields after the command name, which may hold spaces: from ')'. */
    char *p = strrchr(line, ')');
    if (p && sscanf(p + 2,
                    "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
                    "%*d %llu %llu %lld",
                    &ut, &st, &start, &vsize, &rss) != 5)
      ut = st = start = vsize = 0, rss = 0;
  }
  unsigned long long btime = 0;
  if ((f = fopen("/proc/stat", "r"))) {
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "btime %llu", &btime) == 1) break;
    fclose(f);
  }
  long fds = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)))
      if (de->d_name[0] != '.') fds++;
    closedir(d);
    fds--; /* the directory stream's own descriptor */
  }
  struct rlimit rl = {0, 0};
  getrlimit(RLIMIT_NOFILE, &rl);
  family(b, "process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
  sb_add(b, "process_cpu_seconds_total %.2f\n", tick > 0 ? (double)(ut + st) / (double)tick : 0.0);
  family(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  sb_add(b, "process_resident_memory_bytes %lld\n", rss * (long long)page);
  family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  sb_add(b, "process_virtual_memory_bytes %llu\n", vsize);
  family(b, "process_start_time_seconds", "gauge",
         "Start time of the process since the Unix epoch, in seconds.");
  sb_add(b, "process_start_time_seconds %.2f\n",
         tick > 0 ? (double)btime + (double)start / (double)tick : 0.0);
  family(b, "process_open_fds", "gauge", "Open file descriptors.");
  sb_add(b, "process_open_fds %ld\n", fds);
  family(b, "process_max_fds", "gauge", "Limit on open file descriptors.");
  sb_add(b, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
}

static const char *const session_states[] = {"INIT",   "READY",  "RUNNING",
                                             "SUSPENDED", "FAILED", "DESTROYED"};
static const char *const pool_states[] = {"LOADING", "READY", "FAILED", "STOPPED"};

/* Pipelines: requests end to end, early exits, and each stage's runs. */
static void pipeline_metrics(sb_t *b, json_t *list) {
  json_t *p, *st;
  size_t i, k;
  char e1[300], e2[300];
  family(b, "sip_pipeline_requests_total", "counter",
         "Pipeline requests answered, by result code.");
  json_array_foreach(list, i, p) {
    json_t *codes = json_object_get(p, "requests"), *v;
    const char *code, *name = esc(e1, sizeof e1, json_string_value(json_object_get(p, "name")));
    if (!json_object_get(codes, "OK"))
      sb_add(b, "sip_pipeline_requests_total{pipeline=\"%s\",code=\"OK\"} 0\n", name);
    json_object_foreach(codes, code, v)
      sb_add(b, "sip_pipeline_requests_total{pipeline=\"%s\",code=\"%s\"} %lld\n", name, code,
             (long long)json_integer_value(v));
  }
  family(b, "sip_pipeline_request_duration_us_total", "counter",
         "Cumulative time from arrival to answer of pipeline requests, in microseconds.");
  json_array_foreach(list, i, p) {
    json_t *lat = json_object_get(p, "latency_us");
    sb_add(b, "sip_pipeline_request_duration_us_total{pipeline=\"%s\"} %lld\n",
           esc(e1, sizeof e1, json_string_value(json_object_get(p, "name"))),
           (long long)(ival(lat, "ok") + ival(lat, "failed")));
  }
  family(b, "sip_pipeline_early_exits_total", "counter",
         "Pipeline requests that ended early (early_exit_condition).");
  json_array_foreach(list, i, p)
  sb_add(b, "sip_pipeline_early_exits_total{pipeline=\"%s\"} %lld\n",
         esc(e1, sizeof e1, json_string_value(json_object_get(p, "name"))),
         (long long)ival(p, "early_exits"));
  family(b, "sip_pipeline_stage_runs_total", "counter",
         "Stages of pipeline requests by outcome: ran, failed, or skipped (not run: its when "
         "was false, an input's stage did not run, or the request ended first).");
  static const char *const outcomes[] = {"ran", "skipped", "failed"};
  json_array_foreach(list, i, p) {
    esc(e1, sizeof e1, json_string_value(json_object_get(p, "name")));
    json_array_foreach(json_object_get(p, "stages"), k, st) {
      esc(e2, sizeof e2, json_string_value(json_object_get(st, "name")));
      for (int o = 0; o < 3; o++)
        sb_add(b, "sip_pipeline_stage_runs_total{pipeline=\"%s\",stage=\"%s\",outcome=\"%s\"} %lld\n",
               e1, e2, outcomes[o], (long long)ival(st, outcomes[o]));
    }
  }
  family(b, "sip_pipeline_stage_duration_us_total", "counter",
         "Cumulative time of the stages that ran, from start to end (a model stage's queueing "
         "included), in microseconds.");
  json_array_foreach(list, i, p) {
    esc(e1, sizeof e1, json_string_value(json_object_get(p, "name")));
    json_array_foreach(json_object_get(p, "stages"), k, st)
    sb_add(b, "sip_pipeline_stage_duration_us_total{pipeline=\"%s\",stage=\"%s\"} %lld\n", e1,
           esc(e2, sizeof e2, json_string_value(json_object_get(st, "name"))),
           (long long)ival(st, "total_us"));
  }
}

char *sip__prometheus_text(sip_server_t *s) {
  json_t *status = sip__server_info(s, SIP_INFO_STATUS);
  json_t *plist = json_object_get(status, "pools");
  size_t n = json_array_size(plist);
  pool_labels_t *pl = sip__calloc(n ? n : 1, sizeof *pl);
  sb_t b = {0};
  if (!status || !pl) {
    b.oom = 1;
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *p = json_array_get(plist, i);
    char e1[300], e2[300];
    const char *name = json_string_value(json_object_get(p, "name"));
    const char *ver = json_string_value(json_object_get(p, "version"));
    pl[i].status = p;
    snprintf(pl[i].labels, sizeof pl[i].labels, "pool=\"%s\",version=\"%s\"",
             esc(e1, sizeof e1, name), esc(e2, sizeof e2, ver ? ver : ""));
  }

  family(&b, "sip_pool_state", "gauge", "1 for the state the pool is in, 0 for the others.");
  for (size_t i = 0; i < n; i++) {
    const char *st = json_string_value(json_object_get(pl[i].status, "state"));
    for (size_t k = 0; k < sizeof pool_states / sizeof *pool_states; k++)
      sb_add(&b, "sip_pool_state{%s,state=\"%s\"} %d\n", pl[i].labels, pool_states[k],
             st && !strcmp(st, pool_states[k]));
  }
  family(&b, "sip_requests_total", "counter",
         "Requests answered, by result code (OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, ...).");
  for (size_t i = 0; i < n; i++) {
    json_t *codes = json_object_get(pl[i].status, "requests"), *v;
    const char *code;
    if (!json_object_get(codes, "OK")) sb_add(&b, "sip_requests_total{%s,code=\"OK\"} 0\n", pl[i].labels);
    json_object_foreach(codes, code, v)
      sb_add(&b, "sip_requests_total{%s,code=\"%s\"} %lld\n", pl[i].labels, code,
             (long long)json_integer_value(v));
  }
  counter_per_pool(&b, pl, n, "sip_inference_count_total", "Inferences executed (requests run).",
                   "inference_count", 0);
  counter_per_pool(&b, pl, n, "sip_execution_count_total",
                   "Backend executions (a batch counts once).", "execution_count", 0);
  counter_per_pool(&b, pl, n, "sip_request_duration_us_total",
                   "Cumulative time from arrival to answer of every request, in microseconds.",
                   "request", 1);
  counter_per_pool(&b, pl, n, "sip_queue_duration_us_total",
                   "Cumulative time requests waited in the queue, in microseconds.", "queue", 1);
  counter_per_pool(&b, pl, n, "sip_compute_input_duration_us_total",
                   "Cumulative time preparing inputs, in microseconds.", "compute_input", 1);
  counter_per_pool(&b, pl, n, "sip_compute_infer_duration_us_total",
                   "Cumulative time executing the model, in microseconds.", "compute_infer", 1);
  counter_per_pool(&b, pl, n, "sip_compute_output_duration_us_total",
                   "Cumulative time handling outputs, in microseconds.", "compute_output", 1);
  histogram_per_pool(&b, pl, n, "sip_request_latency_us",
                     "Time from arrival to answer of queued requests, in microseconds.",
                     "latency_us", "total");
  histogram_per_pool(&b, pl, n, "sip_queue_latency_us",
                     "Time requests waited in the queue, in microseconds.", "latency_us", "queue");
  histogram_per_pool(&b, pl, n, "sip_compute_latency_us",
                     "Execution time of requests that ran, in microseconds.", "latency_us",
                     "compute");
  histogram_per_pool(&b, pl, n, "sip_batch_size",
                     "Rows per execution (padding included); 1 without dynamic batching.", NULL,
                     "batch_sizes");
  family(&b, "sip_compute_seconds_total", "counter",
         "Execution time charged to the pool by the compute arbiter (its share of the cores).");
  for (size_t i = 0; i < n; i++)
    sb_add(&b, "sip_compute_seconds_total{%s} %.9f\n", pl[i].labels,
           (double)ival(pl[i].status, "compute_ns") / 1e9);
  family(&b, "sip_batch_level", "gauge",
         "Elastic batching: 1 for the traffic level the pool batches at now (batch_strategies).");
  for (size_t i = 0; i < n; i++) {
    const char *lv = json_string_value(json_object_get(pl[i].status, "batch_level"));
    if (!lv) continue;
    static const char *const levels[] = {"low", "medium", "high"};
    for (int k = 0; k < 3; k++)
      sb_add(&b, "sip_batch_level{%s,level=\"%s\"} %d\n", pl[i].labels, levels[k],
             !strcmp(lv, levels[k]));
  }
  gauge_per_pool(&b, pl, n, "sip_pending_requests", "Requests queued and not yet running.",
                 "queued_requests");
  family(&b, "sip_pending_requests_by_priority", "gauge", "Queued requests by priority level.");
  for (size_t i = 0; i < n; i++) {
    json_t *q = json_object_get(pl[i].status, "queued_by_priority"), *v;
    const char *lvl;
    json_object_foreach(q, lvl, v)
      sb_add(&b, "sip_pending_requests_by_priority{%s,priority=\"%s\"} %lld\n", pl[i].labels, lvl,
             (long long)json_integer_value(v));
  }
  gauge_per_pool(&b, pl, n, "sip_active_sessions", "Sessions READY or RUNNING.",
                 "active_sessions");
  family(&b, "sip_sessions", "gauge", "Sessions by state.");
  for (size_t i = 0; i < n; i++) {
    json_t *ss = json_object_get(pl[i].status, "sessions"), *x;
    for (size_t k = 0; k < sizeof session_states / sizeof *session_states; k++) {
      long cnt = 0;
      size_t j;
      json_array_foreach(ss, j, x) {
        const char *st = json_string_value(json_object_get(x, "state"));
        cnt += st && !strcmp(st, session_states[k]);
      }
      sb_add(&b, "sip_sessions{%s,state=\"%s\"} %ld\n", pl[i].labels, session_states[k], cnt);
    }
  }
  gauge_per_pool(&b, pl, n, "sip_model_load_duration_ms",
                 "How long loading the model and starting its sessions took, in milliseconds.",
                 "load_ms");
  gauge_per_pool(&b, pl, n, "sip_model_memory_bytes",
                 "Resident memory the model and its sessions added when loaded, in bytes.",
                 "memory_bytes");
  gauge_per_pool(&b, pl, n, "sip_model_file_bytes", "Size of the model file, in bytes.",
                 "model_bytes");
  family(&b, "sip_last_inference_timestamp_seconds", "gauge",
         "Wall-clock time of the last completed request (0: none), in seconds.");
  for (size_t i = 0; i < n; i++)
    sb_add(&b, "sip_last_inference_timestamp_seconds{%s} %.3f\n", pl[i].labels,
           (double)ival(json_object_get(pl[i].status, "stats"), "last_inference") / 1000.0);

  /* Per session: the session id names its pool and index ("pool/0"). */
  static const struct {
    const char *name, *type, *help, *key;
  } per_session[] = {
      {"sip_session_inferences_total", "counter", "Requests a session executed.", "inferences"},
      {"sip_session_errors_total", "counter", "Executions of a session that failed.", "errors"},
  };
  for (size_t m = 0; m < 2; m++) {
    family(&b, per_session[m].name, per_session[m].type, per_session[m].help);
    for (size_t i = 0; i < n; i++) {
      json_t *x;
      size_t j;
      json_array_foreach(json_object_get(pl[i].status, "sessions"), j, x) {
        char e[400];
        sb_add(&b, "%s{%s,session=\"%s\"} %lld\n", per_session[m].name, pl[i].labels,
               esc(e, sizeof e, json_string_value(json_object_get(x, "id"))),
               (long long)ival(x, per_session[m].key));
      }
    }
  }
  family(&b, "sip_session_state", "gauge", "1 for each session, labelled with its state.");
  for (size_t i = 0; i < n; i++) {
    json_t *x;
    size_t j;
    json_array_foreach(json_object_get(pl[i].status, "sessions"), j, x) {
      char e[400];
      const char *st = json_string_value(json_object_get(x, "state"));
      sb_add(&b, "sip_session_state{%s,session=\"%s\",state=\"%s\"} 1\n", pl[i].labels,
             esc(e, sizeof e, json_string_value(json_object_get(x, "id"))), st ? st : "UNKNOWN");
    }
  }

  pipeline_metrics(&b, json_object_get(status, "pipelines"));

  family(&b, "sip_open_connections", "gauge", "Open client connections by transport.");
  {
    json_t *c = json_object_get(status, "connections"), *v;
    const char *t;
    json_object_foreach(c, t, v)
      sb_add(&b, "sip_open_connections{transport=\"%s\"} %lld\n", t,
             (long long)json_integer_value(v));
  }
  family(&b, "sip_ready", "gauge", "1 when every pool has finished loading.");
  sb_add(&b, "sip_ready %d\n", json_is_true(json_object_get(status, "ready")));
  family(&b, "sip_uptime_seconds", "gauge", "Seconds since the server started.");
  sb_add(&b, "sip_uptime_seconds %.3f\n", nval(status, "uptime_s"));
  process_metrics(&b);
done:
  sip__free(pl);
  json_decref(status);
  if (b.oom) {
    sip__free(b.p);
    return NULL;
  }
  return b.p;
}
