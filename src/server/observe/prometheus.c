/* sip — Prometheus text exposition.
 *
 * Pools' and pipelines' numbers are read typed (session/observe/counters.h,
 * sip__pipelines_counters): the same readers the status document and the
 * statistics endpoint are built from, so the page cannot disagree with
 * them; process metrics come from /proc. Samples of one family are written
 * together, as the format requires.
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/core.h"
#include "pipeline/pipeline.h"
#include "server/observe/prometheus.h"
#include "server/observe/prometheus_impl.h"
#include "session/observe/counters.h"
#include "server/server_impl.h"
#include "server/observe/sla_monitor.h"
#include "session/observe/sla.h"
#include "server/observe/tracing.h"
#include "sip/frontend.h"

/* The builder and helpers prometheus_triton.c shares (prometheus_impl.h),
 * under short names here. */
typedef sip__sb_t sb_t;
typedef sip__prom_pool_row_t pool_row_t;
#define sb_add sip__sb_add
#define esc sip__prom_esc
#define family sip__prom_family

void sip__sb_add(sb_t *b, const char *fmt, ...) {
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
const char *sip__prom_esc(char *buf, size_t n, const char *s) {
  size_t o = 0;
  for (; s && *s && o + 3 < n; s++) {
    if (*s == '\\' || *s == '"') buf[o++] = '\\', buf[o++] = *s;
    else if (*s == '\n') buf[o++] = '\\', buf[o++] = 'n';
    else buf[o++] = *s;
  }
  buf[o] = '\0';
  return buf;
}

void sip__prom_family(sb_t *b, const char *name, const char *type, const char *help) {
  sb_add(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef uint64_t (*pool_num_fn)(const sip__pool_counters_t *c);
static uint64_t n_inference(const sip__pool_counters_t *c) { return c->inference_count; }
static uint64_t n_execution(const sip__pool_counters_t *c) { return c->execution_count; }
static uint64_t n_retries(const sip__pool_counters_t *c) { return c->retries; }
static uint64_t n_fallbacks(const sip__pool_counters_t *c) { return c->fallbacks; }
static uint64_t n_session_failures(const sip__pool_counters_t *c) { return c->session_failures; }
static uint64_t n_worker_restarts(const sip__pool_counters_t *c) { return c->worker_restarts; }
/* Every answered request is a success or a failure. */
static uint64_t ns_request(const sip__pool_counters_t *c) { return c->success.ns + c->fail.ns; }
static uint64_t ns_queue(const sip__pool_counters_t *c) { return c->queue_stat.ns; }
static uint64_t ns_input(const sip__pool_counters_t *c) { return c->compute_input.ns; }
static uint64_t ns_infer(const sip__pool_counters_t *c) { return c->compute_infer.ns; }
static uint64_t ns_output(const sip__pool_counters_t *c) { return c->compute_output.ns; }

static void counter_per_pool(sb_t *b, pool_row_t *pl, size_t n, const char *name,
                             const char *help, pool_num_fn get, int ns_to_us) {
  family(b, name, "counter", help);
  for (size_t i = 0; i < n; i++) {
    if (!ns_to_us) sb_add(b, "%s{%s} %llu\n", name, pl[i].labels, (unsigned long long)get(&pl[i].c));
    else sb_add(b, "%s{%s} %.3f\n", name, pl[i].labels, (double)get(&pl[i].c) / 1000.0);
  }
}

typedef const sip__hist_read_t *(*pool_hist_fn)(const sip__pool_counters_t *c);
static const sip__hist_read_t *h_total(const sip__pool_counters_t *c) { return &c->total; }
static const sip__hist_read_t *h_queue(const sip__pool_counters_t *c) { return &c->queue; }
static const sip__hist_read_t *h_compute(const sip__pool_counters_t *c) { return &c->compute; }

static void histogram_per_pool(sb_t *b, pool_row_t *pl, size_t n, const char *name,
                               const char *help, pool_hist_fn get) {
  family(b, name, "histogram", help);
  for (size_t i = 0; i < n; i++) {
    const sip__hist_read_t *h = get(&pl[i].c);
    for (int j = 0; j < SIP__HIST_BUCKETS; j++)
      sb_add(b, "%s_bucket{%s,le=\"%llu\"} %llu\n", name, pl[i].labels,
             (unsigned long long)sip__hist_bounds_us[j], (unsigned long long)h->cum[j]);
    sb_add(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, pl[i].labels,
           (unsigned long long)h->cum[SIP__HIST_BUCKETS]);
    sb_add(b, "%s_sum{%s} %llu\n%s_count{%s} %llu\n", name, pl[i].labels,
           (unsigned long long)h->sum_us, name, pl[i].labels,
           (unsigned long long)h->cum[SIP__HIST_BUCKETS]);
  }
}

static void batch_histogram(sb_t *b, pool_row_t *pl, size_t n) {
  const char *name = "sip_batch_size";
  family(b, name, "histogram", "Rows per execution (padding included); 1 without dynamic batching.");
  for (size_t i = 0; i < n; i++) {
    const sip__pool_counters_t *c = &pl[i].c;
    for (int j = 0; j < SIP__BATCH_BUCKETS - 1; j++)
      sb_add(b, "%s_bucket{%s,le=\"%d\"} %llu\n", name, pl[i].labels, 1 << j,
             (unsigned long long)c->batch_cum[j]);
    uint64_t count = c->batch_cum[SIP__BATCH_BUCKETS - 1];
    sb_add(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, pl[i].labels, (unsigned long long)count);
    sb_add(b, "%s_sum{%s} %llu\n%s_count{%s} %llu\n", name, pl[i].labels,
           (unsigned long long)c->batch_rows_sum, name, pl[i].labels, (unsigned long long)count);
  }
}

typedef double (*pool_gauge_fn)(const sip__pool_counters_t *c);
static double g_queued(const sip__pool_counters_t *c) { return (double)c->queued_total; }
static double g_active(const sip__pool_counters_t *c) { return c->active_sessions; }
static double g_load_ms(const sip__pool_counters_t *c) { return c->load_ms; }
static double g_memory(const sip__pool_counters_t *c) { return (double)c->memory_bytes; }
static double g_session_memory(const sip__pool_counters_t *c) { return (double)c->session_bytes; }
static double g_file(const sip__pool_counters_t *c) { return (double)c->model_bytes; }
static double g_store_pools(const sip__pool_counters_t *c) { return (double)c->store_pools; }

static void gauge_per_pool(sb_t *b, pool_row_t *pl, size_t n, const char *name,
                           const char *help, pool_gauge_fn get) {
  family(b, name, "gauge", help);
  for (size_t i = 0; i < n; i++) sb_add(b, "%s{%s} %.17g\n", name, pl[i].labels, get(&pl[i].c));
}

/* Pools with sequence_batching only. */
static void sequence_metrics(sb_t *b, pool_row_t *pl, size_t n) {
  static const struct {
    const char *name, *type, *help;
  } fam[3] = {
      {"sip_sequences_active", "gauge", "Sequences bound to a session (sequence_batching)."},
      {"sip_sequences_waiting", "gauge", "New sequences waiting in the backlog for a free slot."},
      {"sip_sequences_expired_total", "counter",
       "Sequences released after idle_timeout_us without a request."},
  };
  for (int f = 0; f < 3; f++) {
    family(b, fam[f].name, fam[f].type, fam[f].help);
    for (size_t i = 0; i < n; i++) {
      const sip__pool_counters_t *c = &pl[i].c;
      if (!c->sequences) continue;
      uint64_t v = f == 0 ? c->seq_active : f == 1 ? c->seq_waiting : c->seq_expired;
      sb_add(b, "%s{%s} %llu\n", fam[f].name, pl[i].labels, (unsigned long long)v);
    }
  }
}

/* sip_requests_total-style samples: OK always, other codes once seen. */
static void codes_samples(sb_t *b, const char *name, const char *labels, const uint64_t *by_code) {
  if (!by_code[SIP_OK]) sb_add(b, "%s{%s,code=\"OK\"} 0\n", name, labels);
  for (int k = 0; k < SIP_CODE_COUNT_; k++)
    if (by_code[k])
      sb_add(b, "%s{%s,code=\"%s\"} %llu\n", name, labels, sip_code_name((sip_code_t)k),
             (unsigned long long)by_code[k]);
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
static const char *const pool_states[] = {"LOADING", "READY", "FAILED", "STOPPED", "UNLOADED"};

/* Pipelines: requests end to end, early exits, and each stage's runs;
 * `all`: the n pipelines' counters, read once for the page. */
static void pipeline_metrics(sb_t *b, const sip__pipeline_set_t *ps,
                             const sip__pipeline_counters_t *all, size_t n) {
  char e1[300], e2[300], labels[320];
  sip__stage_counters_t sc;
  family(b, "sip_pipeline_requests_total", "counter",
         "Pipeline requests answered, by result code.");
  for (size_t i = 0; i < n; i++) {
    const sip__pipeline_counters_t pc = all[i];
    snprintf(labels, sizeof labels, "pipeline=\"%s\"", esc(e1, sizeof e1, pc.name));
    codes_samples(b, "sip_pipeline_requests_total", labels, pc.by_code);
  }
  family(b, "sip_pipeline_request_duration_us_total", "counter",
         "Cumulative time from arrival to answer of pipeline requests, in microseconds.");
  for (size_t i = 0; i < n; i++) {
    const sip__pipeline_counters_t pc = all[i];
    sb_add(b, "sip_pipeline_request_duration_us_total{pipeline=\"%s\"} %llu\n",
           esc(e1, sizeof e1, pc.name), (unsigned long long)(pc.ok_us + pc.fail_us));
  }
  family(b, "sip_pipeline_early_exits_total", "counter",
         "Pipeline requests that ended early (early_exit_condition).");
  for (size_t i = 0; i < n; i++) {
    const sip__pipeline_counters_t pc = all[i];
    sb_add(b, "sip_pipeline_early_exits_total{pipeline=\"%s\"} %llu\n", esc(e1, sizeof e1, pc.name),
           (unsigned long long)pc.early_exits);
  }
  family(b, "sip_pipeline_stage_runs_total", "counter",
         "Stages of pipeline requests by outcome: ran, failed, or skipped (not run: its when "
         "was false, an input's stage did not run, or the request ended first).");
  for (size_t i = 0; i < n; i++) {
    const sip__pipeline_counters_t pc = all[i];
    esc(e1, sizeof e1, pc.name);
    for (size_t k = 0; k < pc.n_stages; k++) {
      sip__pipelines_stage_counters(ps, i, k, &sc);
      esc(e2, sizeof e2, sc.name);
      const struct {
        const char *outcome;
        uint64_t n;
      } o[] = {{"ran", sc.ran}, {"skipped", sc.skipped}, {"failed", sc.failed}};
      for (int j = 0; j < 3; j++)
        sb_add(b, "sip_pipeline_stage_runs_total{pipeline=\"%s\",stage=\"%s\",outcome=\"%s\"} %llu\n",
               e1, e2, o[j].outcome, (unsigned long long)o[j].n);
    }
  }
  family(b, "sip_pipeline_stage_duration_us_total", "counter",
         "Cumulative time of the stages that ran, from start to end (a model stage's queueing "
         "included), in microseconds.");
  for (size_t i = 0; i < n; i++) {
    const sip__pipeline_counters_t pc = all[i];
    esc(e1, sizeof e1, pc.name);
    for (size_t k = 0; k < pc.n_stages; k++) {
      sip__pipelines_stage_counters(ps, i, k, &sc);
      sb_add(b, "sip_pipeline_stage_duration_us_total{pipeline=\"%s\",stage=\"%s\"} %llu\n", e1,
             esc(e2, sizeof e2, sc.name), (unsigned long long)sc.total_us);
    }
  }
}

static void emit_connection(void *ctx, const char *kind, long open) {
  sb_add((sb_t *)ctx, "sip_open_connections{transport=\"%s\"} %ld\n", kind, open);
}

/* Per session: the session id names its pool and index ("pool/0"). */
/* Idempotency caches (idempotency.c): one family at a time. */
typedef struct idem_ctx {
  sb_t *b;
  const char *name;
  size_t field; /* offset into sip__idem_stats_t */
} idem_ctx_t;

static void emit_idem(void *ctx, const char *model, const sip__idem_stats_t *st) {
  idem_ctx_t *x = ctx;
  char buf[512];
  sb_add(x->b, "%s{pool=\"%s\"} %llu\n", x->name, esc(buf, sizeof buf, model),
         (unsigned long long)*(const uint64_t *)((const char *)st + x->field));
}

static void idem_metrics(sb_t *b, sip_server_t *s) {
  static const struct {
    const char *name, *type, *help;
    size_t field;
  } fams[] = {
      {"sip_idempotency_hits_total", "counter", "Duplicates answered from a kept answer.",
       offsetof(sip__idem_stats_t, hits)},
      {"sip_idempotency_joins_total", "counter", "Duplicates that joined a running request.",
       offsetof(sip__idem_stats_t, joins)},
      {"sip_idempotency_evictions_total", "counter",
       "Kept answers dropped by TTL or to stay within max_entries and max_bytes.",
       offsetof(sip__idem_stats_t, evictions)},
      {"sip_idempotency_entries", "gauge", "Idempotency keys remembered (running and finished).",
       offsetof(sip__idem_stats_t, entries)},
      {"sip_idempotency_bytes", "gauge", "Bytes of kept answers.",
       offsetof(sip__idem_stats_t, bytes)},
  };
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
    family(b, fams[i].name, fams[i].type, fams[i].help);
    idem_ctx_t x = {b, fams[i].name, fams[i].field};
    sip__server_idem_stats(s, emit_idem, &x);
  }
}

static void emit_rejection(void *ctx, const char *model, const char *protocol, const char *reason,
                           uint64_t n) {
  char e[300];
  sb_add(ctx, "sip_requests_rejected_total{model=\"%s\",protocol=\"%s\",reason=\"%s\"} %llu\n",
         esc(e, sizeof e, model), protocol, reason, (unsigned long long)n);
}

/* Pools with an sla block only (docs/sla.md). */
static void sla_metrics(sb_t *b, pool_row_t *pl, size_t n) {
  enum { COMPLIANCE, WINDOW_OK, P99, AVAIL, THROUGHPUT, LEVEL, NFAM };
  static const struct {
    const char *name, *help;
  } fam[NFAM] = {
      [COMPLIANCE] = {"sip_sla_compliance_ratio",
                      "Good SLA windows / windows over the pool's horizon (sla.horizon_windows)."},
      [WINDOW_OK] = {"sip_sla_window_ok",
                     "1 when the pool's last closed SLA window met every target, else 0."},
      [P99] = {"sip_sla_window_p99_ms",
               "p99 latency of the successful requests of the last closed SLA window, in ms."},
      [AVAIL] = {"sip_sla_window_availability",
                 "Successful / counted requests of the last closed SLA window (0..1)."},
      [THROUGHPUT] = {"sip_sla_window_throughput_rps",
                      "Successful requests per second of the last closed SLA window."},
      [LEVEL] = {"sip_sla_alert_level", "The pool's SLA alert level: 0 none, 1 warning, 2 critical."},
  };
  sip__sla_view_t *v = sip__calloc(n ? n : 1, sizeof *v);
  if (!v) {
    b->oom = 1;
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (pl[i].sla) sip__sla_read(pl[i].sla, &v[i]);
  for (int f = 0; f < NFAM; f++) {
    family(b, fam[f].name, "gauge", fam[f].help);
    for (size_t i = 0; i < n; i++) {
      const sip__sla_view_t *x = &v[i];
      const sip__sla_window_t *w = &x->last;
      double val = f == COMPLIANCE ? x->compliance
                   : f == WINDOW_OK ? (x->have_last ? w->good : -1)
                   : f == P99       ? (x->have_last ? w->p99_ms : -1)
                   : f == AVAIL     ? (x->have_last ? w->availability : -1)
                   : f == THROUGHPUT ? (x->have_last ? w->throughput_rps : -1)
                                     : x->level;
      /* No pool SLA, or nothing measured yet: no sample. */
      if (pl[i].sla && val >= 0) sb_add(b, "%s{%s} %.17g\n", fam[f].name, pl[i].labels, val);
    }
  }
  family(b, "sip_sla_alerts_total", "counter", "SLA alerts fired, by level (warning, critical).");
  for (size_t i = 0; i < n; i++)
    for (int l = SIP__ALERT_WARNING; pl[i].sla && l < SIP__ALERT_LEVELS; l++)
      sb_add(b, "sip_sla_alerts_total{%s,level=\"%s\"} %llu\n", pl[i].labels,
             sip__alert_level_name(l), (unsigned long long)v[i].fired[l]);
  family(b, "sip_sla_alerts_resolved_total", "counter", "SLA alerts resolved.");
  for (size_t i = 0; i < n; i++)
    if (pl[i].sla)
      sb_add(b, "sip_sla_alerts_resolved_total{%s} %llu\n", pl[i].labels,
             (unsigned long long)v[i].resolved);
  sip__free(v);
}

typedef struct hook_ctx {
  sb_t *b;
  int field;
} hook_ctx_t;

static void emit_webhook(void *ctx, const char *url, const sip__webhook_stats_t *st) {
  hook_ctx_t *x = ctx;
  char e[600];
  static const char *const results[] = {"delivered", "failed", "dropped"};
  if (x->field == 0) {
    const uint64_t v[3] = {st->delivered, st->failed, st->dropped};
    for (int r = 0; r < 3; r++)
      sb_add(x->b, "sip_alert_webhook_deliveries_total{url=\"%s\",result=\"%s\"} %llu\n",
             esc(e, sizeof e, url), results[r], (unsigned long long)v[r]);
  } else {
    sb_add(x->b, "sip_alert_webhook_queued{url=\"%s\"} %llu\n", esc(e, sizeof e, url),
           (unsigned long long)st->queued);
  }
}

static void webhook_metrics(sb_t *b, sip_server_t *s) {
  family(b, "sip_alert_webhook_deliveries_total", "counter",
         "Alerts posted to each webhook, by result (delivered, failed after every retry, dropped).");
  hook_ctx_t x = {b, 0};
  sip__sla_monitor_webhooks(s, emit_webhook, &x);
  family(b, "sip_alert_webhook_queued", "gauge", "Alerts waiting for each webhook.");
  x.field = 1;
  sip__sla_monitor_webhooks(s, emit_webhook, &x);
}

static void session_metrics(sb_t *b, pool_row_t *pl, size_t n) {
  sip__session_counters_t sc;
  char e[400];
  family(b, "sip_sessions", "gauge", "Sessions by state.");
  for (size_t i = 0; i < n; i++) {
    int ns = sip__pool_session_count(pl[i].pool);
    for (int k = 0; k < (int)(sizeof session_states / sizeof *session_states); k++) {
      long cnt = 0;
      for (int j = 0; j < ns; j++) {
        sip__pool_session_read(pl[i].pool, j, &sc);
        cnt += sc.state == k;
      }
      sb_add(b, "sip_sessions{%s,state=\"%s\"} %ld\n", pl[i].labels, session_states[k], cnt);
    }
  }
  gauge_per_pool(b, pl, n, "sip_model_load_duration_ms",
                 "How long loading the model and starting its sessions took, in milliseconds.",
                 g_load_ms);
  gauge_per_pool(b, pl, n, "sip_model_memory_bytes",
                 "Resident memory the model and its sessions added when loaded (and as "
                 "sessions were added or removed since), in bytes.",
                 g_memory);
  gauge_per_pool(b, pl, n, "sip_session_memory_bytes",
                 "Resident memory one session added when it was created, in bytes.",
                 g_session_memory);
  gauge_per_pool(b, pl, n, "sip_model_file_bytes", "Size of the model file, in bytes.", g_file);
  gauge_per_pool(b, pl, n, "sip_model_store_pools",
                 "Pools running on this pool's loaded model (1: alone; 0: not in the store).",
                 g_store_pools);
  family(b, "sip_last_inference_timestamp_seconds", "gauge",
         "Wall-clock time of the last completed request (0: none), in seconds.");
  for (size_t i = 0; i < n; i++)
    sb_add(b, "sip_last_inference_timestamp_seconds{%s} %.3f\n", pl[i].labels,
           (double)pl[i].c.last_inference_ms / 1000.0);
  static const struct {
    const char *name, *help;
    int errors;
  } per_session[] = {
      {"sip_session_inferences_total", "Requests a session executed.", 0},
      {"sip_session_errors_total", "Executions of a session that failed.", 1},
  };
  for (size_t m = 0; m < 2; m++) {
    family(b, per_session[m].name, "counter", per_session[m].help);
    for (size_t i = 0; i < n; i++)
      for (int j = 0; j < sip__pool_session_count(pl[i].pool); j++) {
        sip__pool_session_read(pl[i].pool, j, &sc);
        sb_add(b, "%s{%s,session=\"%s\"} %llu\n", per_session[m].name, pl[i].labels,
               esc(e, sizeof e, sc.id),
               (unsigned long long)(per_session[m].errors ? sc.errors : sc.inferences));
      }
  }
  family(b, "sip_session_state", "gauge", "1 for each session, labelled with its state.");
  for (size_t i = 0; i < n; i++)
    for (int j = 0; j < sip__pool_session_count(pl[i].pool); j++) {
      sip__pool_session_read(pl[i].pool, j, &sc);
      sb_add(b, "sip_session_state{%s,session=\"%s\",state=\"%s\"} 1\n", pl[i].labels,
             esc(e, sizeof e, sc.id), sip__session_state_name((sip__session_state_t)sc.state));
    }
}

char *sip__prometheus_text(sip_server_t *s) {
  size_t n = 0;
  /* Pools in service: a retired version still draining is not listed. */
  sip__pool_t **v = sip__registry_snapshot(&s->eng, 1, &n);
  pool_row_t *pl = sip__calloc(n ? n : 1, sizeof *pl);
  /* Pipelines are listed once built (before, the set is still LOADING);
   * their counters are read once: every family reports the same instant. */
  const sip__pipeline_set_t *ps = atomic_load(&s->loaded) ? s->pipelines : NULL;
  size_t np = sip__pipelines_count(ps);
  sip__pipeline_counters_t *pc = sip__calloc(np ? np : 1, sizeof *pc);
  sb_t b = {0};
  if (!pl || !pc) {
    b.oom = 1;
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    char e1[300], e2[300];
    sip__pool_info_t in;
    sip__pool_info(v[i], &in);
    pl[i].pool = v[i];
    pl[i].name = in.name;
    pl[i].version = in.version ? in.version : "";
    pl[i].sla = in.sla;
    sip__pool_counters_read(v[i], &pl[i].c);
    snprintf(pl[i].labels, sizeof pl[i].labels, "pool=\"%s\",version=\"%s\"",
             esc(e1, sizeof e1, in.name), esc(e2, sizeof e2, pl[i].version));
  }

  family(&b, "sip_pool_state", "gauge", "1 for the state the pool is in, 0 for the others.");
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < (int)(sizeof pool_states / sizeof *pool_states); k++)
      sb_add(&b, "sip_pool_state{%s,state=\"%s\"} %d\n", pl[i].labels, pool_states[k],
             pl[i].c.state == k);
  family(&b, "sip_requests_total", "counter",
         "Requests answered, by result code (OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, ...).");
  for (size_t i = 0; i < n; i++) codes_samples(&b, "sip_requests_total", pl[i].labels, pl[i].c.by_code);
  counter_per_pool(&b, pl, n, "sip_inference_count_total", "Inferences executed (requests run).",
                   n_inference, 0);
  counter_per_pool(&b, pl, n, "sip_execution_count_total",
                   "Backend executions (a batch counts once).", n_execution, 0);
  counter_per_pool(&b, pl, n, "sip_failover_retries_total",
                   "Requests retried on the pool after their session failed.", n_retries, 0);
  counter_per_pool(&b, pl, n, "sip_failover_fallbacks_total",
                   "Requests sent to the fallback pool after their session failed.", n_fallbacks,
                   0);
  counter_per_pool(&b, pl, n, "sip_session_failures_total",
                   "Sessions failed (crashed or hung) and replaced.", n_session_failures, 0);
  counter_per_pool(&b, pl, n, "sip_worker_restarts_total",
                   "Worker processes of process-isolated pools that ended and were replaced.",
                   n_worker_restarts, 0);
  counter_per_pool(&b, pl, n, "sip_request_duration_us_total",
                   "Cumulative time from arrival to answer of every request, in microseconds.",
                   ns_request, 1);
  counter_per_pool(&b, pl, n, "sip_queue_duration_us_total",
                   "Cumulative time requests waited in the queue, in microseconds.", ns_queue, 1);
  counter_per_pool(&b, pl, n, "sip_compute_input_duration_us_total",
                   "Cumulative time preparing inputs, in microseconds.", ns_input, 1);
  counter_per_pool(&b, pl, n, "sip_compute_infer_duration_us_total",
                   "Cumulative time executing the model, in microseconds.", ns_infer, 1);
  counter_per_pool(&b, pl, n, "sip_compute_output_duration_us_total",
                   "Cumulative time handling outputs, in microseconds.", ns_output, 1);
  histogram_per_pool(&b, pl, n, "sip_request_latency_us",
                     "Time from arrival to answer of queued requests, in microseconds.", h_total);
  histogram_per_pool(&b, pl, n, "sip_queue_latency_us",
                     "Time requests waited in the queue, in microseconds.", h_queue);
  histogram_per_pool(&b, pl, n, "sip_compute_latency_us",
                     "Execution time of requests that ran, in microseconds.", h_compute);
  batch_histogram(&b, pl, n);
  family(&b, "sip_compute_seconds_total", "counter",
         "Execution time charged to the pool by the compute arbiter (its share of the cores).");
  for (size_t i = 0; i < n; i++)
    sb_add(&b, "sip_compute_seconds_total{%s} %.9f\n", pl[i].labels, (double)pl[i].c.compute_ns / 1e9);
  family(&b, "sip_compute_share_ratio", "gauge",
         "The pool's share of every pool's execution time over the last 10 s (docs/elastic.md).");
  for (size_t i = 0; i < n; i++)
    sb_add(&b, "sip_compute_share_ratio{%s} %.6f\n", pl[i].labels,
           sip__compute_share(pl[i].c.recent_compute_ns, pl[i].c.recent_total_ns));
  family(&b, "sip_compute_quota_ratio", "gauge",
         "resource_quota.max_compute_percent as a ratio, as it is now; 0: unset.");
  for (size_t i = 0; i < n; i++)
    sb_add(&b, "sip_compute_quota_ratio{%s} %.2f\n", pl[i].labels,
           pl[i].c.compute_percent / 100.0);
  static const char *const copy_fam[2][2] = {
      {"sip_memory_copies_total", "Tensor copies between host and device memory, by direction; "
                                  "0 while the pool's backend works in host memory."},
      {"sip_memory_copy_bytes_total", "Bytes copied between host and device memory, by direction."}};
  for (int f = 0; f < 2; f++) {
    family(&b, copy_fam[f][0], "counter", copy_fam[f][1]);
    for (size_t i = 0; i < n; i++)
      for (int d = 0; d < SIP__COPY_DIRECTIONS; d++)
        sb_add(&b, "%s{%s,direction=\"%s\"} %llu\n", copy_fam[f][0], pl[i].labels,
               sip__copy_direction_name(d),
               (unsigned long long)(f ? pl[i].c.copy_bytes[d] : pl[i].c.copies[d]));
  }
  family(&b, "sip_batch_level", "gauge",
         "Elastic batching: 1 for the traffic level the pool batches at now (batch_strategies).");
  for (size_t i = 0; i < n; i++) {
    static const char *const levels[] = {"low", "medium", "high"};
    if (pl[i].c.batch_level < 0) continue;
    for (int k = 0; k < 3; k++)
      sb_add(&b, "sip_batch_level{%s,level=\"%s\"} %d\n", pl[i].labels, levels[k],
             pl[i].c.batch_level == k);
  }
  gauge_per_pool(&b, pl, n, "sip_pending_requests", "Requests queued and not yet running.", g_queued);
  family(&b, "sip_pending_requests_by_priority", "gauge", "Queued requests by priority level.");
  for (size_t i = 0; i < n; i++) {
    static const char *const lvl[SIP__SCHED_QUEUES] = {"high", "medium", "low", "delayed"};
    for (int l = 0; l < SIP__SCHED_QUEUES; l++)
      sb_add(&b, "sip_pending_requests_by_priority{%s,priority=\"%s\"} %zu\n", pl[i].labels, lvl[l],
             pl[i].c.queued[l]);
  }
  gauge_per_pool(&b, pl, n, "sip_active_sessions", "Sessions READY or RUNNING.", g_active);
  sequence_metrics(&b, pl, n);
  session_metrics(&b, pl, n);
  sla_metrics(&b, pl, n);
  sip__prometheus_autoscale(&b, pl, n);
  webhook_metrics(&b, s);
  idem_metrics(&b, s);
  sip__prometheus_rcache(&b, s->rcache, s->cfg->metrics.triton_names);
  family(&b, "sip_requests_rejected_total", "counter",
         "Requests refused before they reached a model (not decodable, or a wrong datatype, "
         "shape, parameter or model name), by model (\"unknown\" when not served), protocol and "
         "reason (malformed, invalid, unknown_model, too_large, unauthorized).");
  sip__rejections_each(s, emit_rejection, &b);

  for (size_t i = 0; i < np; i++) sip__pipelines_counters(ps, i, &pc[i]);
  pipeline_metrics(&b, ps, pc, np);
  if (s->cfg->metrics.triton_names) sip__prometheus_triton(&b, pl, n, pc, np);

  family(&b, "sip_open_connections", "gauge", "Open client connections by transport.");
  for (size_t f = 0; f < s->n_frontends; f++)
    if (s->frontends[f].vt->connections)
      s->frontends[f].vt->connections(s->frontends[f].state, emit_connection, &b);
  uint64_t tr_sampled, tr_exported, tr_dropped;
  sip__tracer_counts(s->tracer, &tr_sampled, &tr_exported, &tr_dropped);
  family(&b, "sip_traces_sampled_total", "counter", "Requests traced (docs/tracing.md).");
  sb_add(&b, "sip_traces_sampled_total %llu\n", (unsigned long long)tr_sampled);
  family(&b, "sip_trace_spans_exported_total", "counter",
         "Spans the OTLP collector accepted.");
  sb_add(&b, "sip_trace_spans_exported_total %llu\n", (unsigned long long)tr_exported);
  family(&b, "sip_trace_spans_dropped_total", "counter",
         "Spans dropped: the exporter's queue was full or the collector did not take them.");
  sb_add(&b, "sip_trace_spans_dropped_total %llu\n", (unsigned long long)tr_dropped);
  family(&b, "sip_ready", "gauge",
         "1 when every pool has finished loading and, with server.strict_readiness, none "
         "failed (as /v2/health/ready).");
  sb_add(&b, "sip_ready %d\n", sip_server_ready(s));
  family(&b, "sip_uptime_seconds", "gauge", "Seconds since the server started.");
  sb_add(&b, "sip_uptime_seconds %.3f\n", (double)(sip__now_us() - s->started_us) / 1e6);
  sip__server_memory_t mem; /* memory.c: the figures the status document shows */
  sip__server_memory(s, &mem);
  family(&b, "sip_memory_resident_bytes", "gauge", "The process's resident memory, in bytes.");
  sb_add(&b, "sip_memory_resident_bytes %llu\n", (unsigned long long)mem.resident);
  family(&b, "sip_memory_models_bytes", "gauge",
         "What the pools in service measured at load, in bytes: sip_model_memory_bytes summed, "
         "a model that pools share counted once.");
  sb_add(&b, "sip_memory_models_bytes %llu\n", (unsigned long long)mem.models);
  family(&b, "sip_memory_budget_bytes", "gauge",
         "server.memory_budget_mb in bytes (auto resolved at start); absent when none is set.");
  if (mem.budget) sb_add(&b, "sip_memory_budget_bytes %llu\n", (unsigned long long)mem.budget);
  sip__prometheus_elastic(&b, &s->eng);
  process_metrics(&b);
done:
  sip__free(pc);
  sip__free(pl);
  sip__registry_release(v, n);
  if (b.oom) {
    sip__free(b.p);
    return NULL;
  }
  return b.p;
}
