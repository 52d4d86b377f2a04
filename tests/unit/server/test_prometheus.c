/* Unit tests of the Prometheus text exposition (src/server/observe/prometheus.c):
 * an in-process server with builtin pools (one failing every other run, one
 * that fails to load) and pipelines (one built, one FAILED) answers known
 * requests, then the page is parsed here and checked: every family has
 * # HELP and # TYPE before its samples and its samples together, every
 * sample line parses, no sample is repeated, counters match the requests
 * made per pool, pipeline, stage and outcome, histograms are cumulative with
 * _count equal to the +Inf bucket, and each pool has exactly one state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "inproc.h"
#include "server/observe/prometheus.h"
#include "sip/sip.h"

/* ---- a parser of the text format (0.0.4) ------------------------------------ */

#define MAXL 8
#define MAXS 4096
#define MAXF 256

typedef struct sample {
  char name[128];
  int n_labels;
  char key[MAXL][64];
  char val[MAXL][512];
  double value;
} sample_t;

typedef struct family {
  char name[128];
  char type[16];
  int help, typed; /* seen: # HELP, # TYPE */
  int n_samples;
} family_t;

typedef struct page {
  sample_t *s;
  int n;
  family_t f[MAXF];
  int nf;
} page_t;

static family_t *family_named(page_t *pg, const char *name) {
  for (int i = 0; i < pg->nf; i++)
    if (!strcmp(pg->f[i].name, name)) return &pg->f[i];
  return NULL;
}

/* The family a sample belongs to: its name, or for a histogram's series the
 * name without _bucket / _sum / _count. */
static family_t *family_of(page_t *pg, const char *sample) {
  family_t *f = family_named(pg, sample);
  if (f) return f;
  static const char *const sfx[] = {"_bucket", "_sum", "_count"};
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(sample), m = strlen(sfx[k]);
    if (n > m && !strcmp(sample + n - m, sfx[k])) {
      char base[128];
      snprintf(base, sizeof base, "%.*s", (int)(n - m), sample);
      f = family_named(pg, base);
      if (f && !strcmp(f->type, "histogram")) return f;
    }
  }
  return NULL;
}

static int is_name_start(int c) { return isalpha(c) || c == '_' || c == ':'; }
static int is_name_char(int c) { return isalnum(c) || c == '_' || c == ':'; }

/* Parses one sample line into *s; fails the test with the line otherwise. */
static void parse_sample(const char *line, sample_t *s) {
  memset(s, 0, sizeof *s);
  const char *p = line;
  size_t n = 0;
  if (!is_name_start((unsigned char)*p)) fail_msg("sample name: %s", line);
  while (is_name_char((unsigned char)*p) && n + 1 < sizeof s->name) s->name[n++] = *p++;
  if (*p == '{') {
    p++;
    while (*p != '}') {
      if (s->n_labels == MAXL) fail_msg("too many labels: %s", line);
      char *k = s->key[s->n_labels], *v = s->val[s->n_labels];
      size_t kn = 0, vn = 0;
      if (!is_name_start((unsigned char)*p)) fail_msg("label name: %s", line);
      while (is_name_char((unsigned char)*p) && kn + 1 < 64) k[kn++] = *p++;
      if (p[0] != '=' || p[1] != '"') fail_msg("label %s without =\"value\": %s", k, line);
      p += 2;
      for (;;) {
        if (!*p || *p == '\n') fail_msg("unterminated label value: %s", line);
        if (*p == '"') break;
        char c = *p++;
        if (c == '\\') {
          c = *p++;
          if (c == 'n') c = '\n';
          else if (c != '\\' && c != '"') fail_msg("bad escape \\%c in a label value: %s", c, line);
        }
        if (vn + 1 < 512) v[vn++] = c;
      }
      p++; /* the closing quote */
      for (int j = 0; j < s->n_labels; j++)
        if (!strcmp(s->key[j], k)) fail_msg("label %s twice: %s", k, line);
      s->n_labels++;
      if (*p == ',') p++;
      else if (*p != '}') fail_msg("expected , or } after a label: %s", line);
    }
    p++;
  }
  if (*p != ' ') fail_msg("expected one space before the value: %s", line);
  p++;
  char *end;
  s->value = strtod(p, &end);
  if (end == p || *end) fail_msg("value does not parse: %s", line);
  if (!isfinite(s->value) || s->value < 0) fail_msg("value not finite or negative: %s", line);
}

/* Parses the whole page, checking the layout: HELP then TYPE before the
 * first sample of each family, each family declared once, its samples
 * together, the page ending in a newline. */
static void parse_page(const char *text, page_t *pg) {
  memset(pg, 0, sizeof *pg);
  pg->s = calloc(MAXS, sizeof *pg->s);
  assert_non_null(pg->s);
  size_t len = strlen(text);
  assert_true(len > 0);
  assert_int_equal(text[len - 1], '\n');
  family_t *cur = NULL; /* the family whose samples are being written */
  const char *p = text;
  char line[2048];
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t n = (size_t)(nl - p);
    if (n >= sizeof line) {
      fail_msg("line of %zu characters", n);
      return;
    }
    memcpy(line, p, n);
    line[n] = '\0';
    p = nl + 1;
    if (!n) fail_msg("empty line in the page");
    if (!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7)) {
      char name[128], rest[1024] = "";
      if (sscanf(line + 7, "%127s %1023[^\n]", name, rest) < 1 || !rest[0])
        fail_msg("comment without name and text: %s", line);
      family_t *f = family_named(pg, name);
      if (line[2] == 'H') {
        if (f) fail_msg("family %s declared twice", name);
        assert_true(pg->nf < MAXF);
        f = &pg->f[pg->nf++];
        snprintf(f->name, sizeof f->name, "%s", name);
        f->help = 1;
        cur = f;
      } else {
        if (!f || f->typed || f->n_samples) fail_msg("# TYPE of %s not right after its # HELP", name);
        static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
        int ok = 0;
        for (int k = 0; k < 5; k++) ok |= !strcmp(rest, types[k]);
        if (!ok) fail_msg("unknown type: %s", line);
        snprintf(f->type, sizeof f->type, "%.15s", rest); /* one of the five types above */
        f->typed = 1;
      }
      continue;
    }
    if (line[0] == '#') fail_msg("unexpected comment: %s", line);
    assert_true(pg->n < MAXS);
    sample_t *s = &pg->s[pg->n++];
    parse_sample(line, s);
    family_t *f = family_of(pg, s->name);
    if (!f) fail_msg("sample of an undeclared family: %s", line);
    if (!f->help || !f->typed) fail_msg("sample before # HELP and # TYPE: %s", line);
    if (f != cur) fail_msg("sample of %s away from its family's block: %s", f->name, line);
    if (!strcmp(f->type, "counter") && strcmp(f->name, s->name))
      fail_msg("counter sample named otherwise than its family: %s", line);
    f->n_samples++;
  }
  /* No two samples with one name and label set. */
  for (int i = 0; i < pg->n; i++)
    for (int j = i + 1; j < pg->n; j++) {
      const sample_t *a = &pg->s[i], *b = &pg->s[j];
      if (strcmp(a->name, b->name) || a->n_labels != b->n_labels) continue;
      int same = 1;
      for (int k = 0; k < a->n_labels && same; k++)
        same = !strcmp(a->key[k], b->key[k]) && !strcmp(a->val[k], b->val[k]);
      if (same) fail_msg("sample %s repeated with the same labels", a->name);
    }
}

static void page_free(page_t *pg) { free(pg->s); }

static const char *label(const sample_t *s, const char *k) {
  for (int i = 0; i < s->n_labels; i++)
    if (!strcmp(s->key[i], k)) return s->val[i];
  return NULL;
}

/* The samples named `name` whose labels include the pairs (NULL-ended
 * key, value, ...); returns how many, the first in *out. */
static int vfind(page_t *pg, const char *name, const sample_t **out, va_list ap) {
  const char *kv[2 * MAXL];
  int nkv = 0;
  for (const char *k; nkv < 2 * MAXL && (k = va_arg(ap, const char *));) {
    kv[nkv++] = k;
    kv[nkv++] = va_arg(ap, const char *);
  }
  int found = 0;
  for (int i = 0; i < pg->n; i++) {
    const sample_t *s = &pg->s[i];
    if (strcmp(s->name, name)) continue;
    int ok = 1;
    for (int k = 0; k < nkv && ok; k += 2) {
      const char *v = label(s, kv[k]);
      ok = v && !strcmp(v, kv[k + 1]);
    }
    if (ok && !found++ && out) *out = s;
  }
  return found;
}

/* The value of the one sample that matches; fails when none or many do. */
static double value(page_t *pg, const char *name, ...) {
  va_list ap;
  va_start(ap, name);
  const sample_t *s = NULL;
  int n = vfind(pg, name, &s, ap);
  va_end(ap);
  if (n != 1) fail_msg("%d samples of %s match; want one", n, name);
  return s->value;
}

static int count(page_t *pg, const char *name, ...) {
  va_list ap;
  va_start(ap, name);
  int n = vfind(pg, name, NULL, ap);
  va_end(ap);
  return n;
}

/* A label set without `le`, as text, to group a histogram's series. */
static void series_key(const sample_t *s, char *buf, size_t n) {
  buf[0] = '\0';
  for (int i = 0; i < s->n_labels; i++)
    if (strcmp(s->key[i], "le"))
      snprintf(buf + strlen(buf), n - strlen(buf), "%s=%s;", s->key[i], s->val[i]);
}

/* Every histogram series: buckets in increasing `le`, cumulative (never
 * decreasing), ending at +Inf, with _count equal to the +Inf bucket and a
 * _sum; returns the number of series checked. */
static int check_histograms(page_t *pg) {
  int series = 0;
  for (int f = 0; f < pg->nf; f++) {
    if (strcmp(pg->f[f].type, "histogram")) continue;
    char bucket[160], cnt[160], sum[160];
    snprintf(bucket, sizeof bucket, "%s_bucket", pg->f[f].name);
    snprintf(cnt, sizeof cnt, "%s_count", pg->f[f].name);
    snprintf(sum, sizeof sum, "%s_sum", pg->f[f].name);
    for (int i = 0; i < pg->n; i++) {
      if (strcmp(pg->s[i].name, cnt)) continue;
      char key[2048];
      series_key(&pg->s[i], key, sizeof key);
      double prev_le = -1, prev_v = 0, inf = -1;
      int buckets = 0, sums = 0;
      for (int j = 0; j < pg->n; j++) {
        char k2[2048];
        series_key(&pg->s[j], k2, sizeof k2);
        if (strcmp(k2, key)) continue;
        if (!strcmp(pg->s[j].name, sum)) sums++;
        if (strcmp(pg->s[j].name, bucket)) continue;
        const char *le = label(&pg->s[j], "le");
        if (!le) fail_msg("%s without le", bucket);
        if (inf >= 0) fail_msg("%s{%s}: a bucket after +Inf", bucket, key);
        double v = pg->s[j].value;
        if (v < prev_v) fail_msg("%s{%s}: le=%s holds %g < %g, not cumulative", bucket, key, le, v, prev_v);
        prev_v = v;
        if (!strcmp(le, "+Inf")) {
          inf = v;
        } else {
          double l = strtod(le, NULL);
          if (l <= prev_le) fail_msg("%s{%s}: le %s not increasing", bucket, key, le);
          prev_le = l;
        }
        buckets++;
      }
      if (inf < 0) fail_msg("%s{%s}: no +Inf bucket", bucket, key);
      if (pg->s[i].value != inf)
        fail_msg("%s{%s} = %g but the +Inf bucket holds %g", cnt, key, pg->s[i].value, inf);
      if (sums != 1) fail_msg("%s{%s}: %d _sum samples", pg->f[f].name, key, sums);
      assert_true(buckets >= 2);
      series++;
    }
  }
  return series;
}

static void scrape(sip_server_t *s, page_t *pg) {
  char *text = sip__prometheus_text(s);
  assert_non_null(text);
  parse_page(text, pg);
  sip__free(text);
}

/* ---- requests ------------------------------------------------------------------ */

static sip_request_t *freq(const char *model, uint64_t id, const char *input, int n) {
  sip_request_t *r = sip_request_new(model);
  assert_non_null(r);
  sip_request_set_id(r, id);
  float v[8];
  for (int i = 0; i < n; i++) v[i] = (float)(id * 10 + (uint64_t)i);
  int64_t d[1] = {n};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy(input, SIP_DTYPE_FLOAT32, 1, d, v,
                                                           (size_t)n * sizeof(float))));
  return r;
}

/* Runs one request synchronously; returns its code (admission errors too). */
static sip_code_t run(sip_server_t *s, sip_request_t *r) {
  sip_response_t *resp = NULL;
  sip_error_t *e = sip_server_infer(s, r, &resp);
  if (e) {
    sip_code_t c = sip_error_code(e);
    sip_error_free(e);
    return c;
  }
  sip_code_t c = sip_response_code(resp);
  sip_response_free(resp);
  return c;
}

static const char *CONFIG =
    "server: {log_level: error}\n"
    "session_pools:\n"
    "  - {name: echo, backend: builtin, pool_size: 2}\n"
    "  - {name: flaky, backend: builtin, backend_options: {fail_every: 2}}\n"
    "  - {name: rotten, backend: builtin, backend_options: {dtype: nope}}\n"
    "  - {name: stage.pool-1_x, backend: builtin}\n"
    "pipeline_sessions:\n"
    "  - name: chain.v1\n"
    "    stages:\n"
    "      - {name: a, pool: stage.pool-1_x}\n"
    "      - {name: b, pool: stage.pool-1_x}\n"
    "  - name: broken\n"
    "    stages:\n"
    "      - {name: s, pool: rotten}\n";

static int setup(void **state) {
  (void)state;
  sip__log_set_level(SIP__LOG_ERROR + 1);
  return 0;
}

static void test_scrape_after_requests(void **state) {
  (void)state;
  sip_server_t *s = new_server_yaml(CONFIG);
  /* echo: 3 answered, 1 refused at admission. */
  for (uint64_t id = 1; id <= 3; id++) assert_int_equal(run(s, freq("echo", id, "input", 2)), SIP_OK);
  assert_int_equal(run(s, freq("echo", 4, "nope", 2)), SIP_INVALID_ARGUMENT);
  /* flaky: runs 2 and 4 fail. */
  static const sip_code_t flaky[] = {SIP_OK, SIP_INTERNAL, SIP_OK, SIP_INTERNAL, SIP_OK};
  for (int i = 0; i < 5; i++) assert_int_equal(run(s, freq("flaky", 10 + (uint64_t)i, "input", 3)), flaky[i]);
  /* rotten never loaded. */
  assert_int_equal(run(s, freq("rotten", 20, "input", 1)), SIP_UNAVAILABLE);
  assert_int_equal(run(s, freq("rotten", 21, "input", 1)), SIP_UNAVAILABLE);
  /* chain.v1: 2 through both stages; one that stage a refuses (int32);
   * one without the pipeline's input. */
  for (uint64_t id = 30; id < 32; id++) assert_int_equal(run(s, freq("chain.v1", id, "input", 4)), SIP_OK);
  sip_request_t *r = sip_request_new("chain.v1");
  int32_t iv[2] = {1, 2};
  int64_t d[1] = {2};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("input", SIP_DTYPE_INT32, 1, d, iv, sizeof iv)));
  assert_int_equal(run(s, r), SIP_INVALID_ARGUMENT);
  assert_int_equal(run(s, freq("chain.v1", 33, "other", 1)), SIP_INVALID_ARGUMENT);
  /* broken: FAILED to build. */
  assert_int_equal(run(s, freq("broken", 40, "input", 1)), SIP_UNAVAILABLE);

  page_t pg;
  scrape(s, &pg);

  /* Layout: the families this page must have, each declared with a type. */
  static const struct {
    const char *name, *type;
  } fams[] = {
      {"sip_pool_state", "gauge"},
      {"sip_requests_total", "counter"},
      {"sip_inference_count_total", "counter"},
      {"sip_execution_count_total", "counter"},
      {"sip_request_latency_us", "histogram"},
      {"sip_queue_latency_us", "histogram"},
      {"sip_compute_latency_us", "histogram"},
      {"sip_batch_size", "histogram"},
      {"sip_sessions", "gauge"},
      {"sip_session_inferences_total", "counter"},
      {"sip_session_errors_total", "counter"},
      {"sip_session_state", "gauge"},
      {"sip_pipeline_requests_total", "counter"},
      {"sip_pipeline_stage_runs_total", "counter"},
      {"sip_pipeline_early_exits_total", "counter"},
      {"sip_ready", "gauge"},
      {"process_open_fds", "gauge"},
  };
  for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
    family_t *f = family_named(&pg, fams[i].name);
    if (!f) fail_msg("no family %s", fams[i].name);
    assert_string_equal(f->type, fams[i].type);
  }

  /* Pool states: exactly one state is 1 per pool, the right one. */
  static const struct {
    const char *pool, *state;
  } states[] = {{"echo", "READY"}, {"flaky", "READY"}, {"rotten", "FAILED"}, {"stage.pool-1_x", "READY"}};
  static const char *const all_states[] = {"LOADING", "READY", "FAILED", "STOPPED", "UNLOADED"};
  for (size_t i = 0; i < 4; i++) {
    assert_int_equal(count(&pg, "sip_pool_state", "pool", states[i].pool, NULL), 5);
    for (int k = 0; k < 5; k++) {
      double v = value(&pg, "sip_pool_state", "pool", states[i].pool, "state", all_states[k], NULL);
      assert_true(v == (strcmp(all_states[k], states[i].state) ? 0.0 : 1.0));
    }
    /* Unversioned pools carry an empty version label. */
    const sample_t *one = NULL;
    for (int j = 0; j < pg.n && !one; j++)
      if (!strcmp(pg.s[j].name, "sip_pool_state") && !strcmp(label(&pg.s[j], "pool"), states[i].pool))
        one = &pg.s[j];
    assert_string_equal(label(one, "version"), "");
  }

  /* Requests per pool and code. */
  assert_true(value(&pg, "sip_requests_total", "pool", "echo", "code", "OK", NULL) == 3);
  assert_true(value(&pg, "sip_requests_total", "pool", "echo", "code", "INVALID_ARGUMENT", NULL) == 1);
  assert_int_equal(count(&pg, "sip_requests_total", "pool", "echo", NULL), 2);
  assert_true(value(&pg, "sip_requests_total", "pool", "flaky", "code", "OK", NULL) == 3);
  assert_true(value(&pg, "sip_requests_total", "pool", "flaky", "code", "INTERNAL", NULL) == 2);
  assert_int_equal(count(&pg, "sip_requests_total", "pool", "flaky", NULL), 2);
  /* A pool without successes still shows OK 0. */
  assert_true(value(&pg, "sip_requests_total", "pool", "rotten", "code", "OK", NULL) == 0);
  assert_true(value(&pg, "sip_requests_total", "pool", "rotten", "code", "UNAVAILABLE", NULL) == 2);
  /* The pipeline's stages ran as requests on their pool: 2 requests x 2
   * stages, and stage a's refusal of the int32 input. */
  assert_true(value(&pg, "sip_requests_total", "pool", "stage.pool-1_x", "code", "OK", NULL) == 4);
  assert_true(value(&pg, "sip_requests_total", "pool", "stage.pool-1_x", "code", "INVALID_ARGUMENT", NULL) == 1);

  /* Executions: refused requests never ran; failed runs did. */
  assert_true(value(&pg, "sip_inference_count_total", "pool", "echo", NULL) == 3);
  assert_true(value(&pg, "sip_execution_count_total", "pool", "echo", NULL) == 3);
  assert_true(value(&pg, "sip_inference_count_total", "pool", "flaky", NULL) == 5);
  assert_true(value(&pg, "sip_execution_count_total", "pool", "flaky", NULL) == 5);
  assert_true(value(&pg, "sip_inference_count_total", "pool", "rotten", NULL) == 0);
  assert_true(value(&pg, "sip_session_errors_total", "pool", "flaky", "session", "flaky/0", NULL) == 2);
  assert_true(value(&pg, "sip_session_inferences_total", "pool", "flaky", "session", "flaky/0", NULL) == 5);
  assert_true(value(&pg, "sip_session_inferences_total", "pool", "echo", "session", "echo/0", NULL) +
                  value(&pg, "sip_session_inferences_total", "pool", "echo", "session", "echo/1", NULL) ==
              3);
  assert_true(value(&pg, "sip_session_state", "pool", "echo", "session", "echo/1", "state", "READY", NULL) == 1);
  assert_true(value(&pg, "sip_sessions", "pool", "echo", "state", "READY", NULL) == 2);
  assert_true(value(&pg, "sip_sessions", "pool", "echo", "state", "RUNNING", NULL) == 0);
  assert_true(value(&pg, "sip_active_sessions", "pool", "echo", NULL) == 2);
  assert_true(value(&pg, "sip_pending_requests", "pool", "echo", NULL) == 0);

  /* Histograms: well formed everywhere (4 families x 4 pools, and the
   * server's sip_residency_cold_start_seconds), and their counts are the
   * requests that were queued. */
  assert_int_equal(check_histograms(&pg), 17);
  assert_true(value(&pg, "sip_request_latency_us_count", "pool", "echo", NULL) == 3);
  assert_true(value(&pg, "sip_request_latency_us_count", "pool", "flaky", NULL) == 5);
  assert_true(value(&pg, "sip_request_latency_us_count", "pool", "rotten", NULL) == 0);
  assert_true(value(&pg, "sip_queue_latency_us_count", "pool", "flaky", NULL) == 5);
  assert_true(value(&pg, "sip_compute_latency_us_count", "pool", "flaky", NULL) == 5);
  assert_true(value(&pg, "sip_batch_size_count", "pool", "echo", NULL) == 3);
  /* Without dynamic batching an execution has the request's rows (dim 0):
   * echo's requests have 2, flaky's 3, failed runs included. */
  assert_true(value(&pg, "sip_batch_size_bucket", "pool", "echo", "le", "1", NULL) == 0);
  assert_true(value(&pg, "sip_batch_size_bucket", "pool", "echo", "le", "2", NULL) == 3);
  assert_true(value(&pg, "sip_batch_size_sum", "pool", "echo", NULL) == 6);
  assert_true(value(&pg, "sip_batch_size_bucket", "pool", "flaky", "le", "2", NULL) == 0);
  assert_true(value(&pg, "sip_batch_size_bucket", "pool", "flaky", "le", "4", NULL) == 5);
  assert_true(value(&pg, "sip_batch_size_sum", "pool", "flaky", NULL) == 15);

  /* Pipelines: requests by code (OK 0 shown when none), stages by outcome. */
  assert_true(value(&pg, "sip_pipeline_requests_total", "pipeline", "chain.v1", "code", "OK", NULL) == 2);
  assert_true(value(&pg, "sip_pipeline_requests_total", "pipeline", "chain.v1", "code", "INVALID_ARGUMENT", NULL) == 2);
  assert_int_equal(count(&pg, "sip_pipeline_requests_total", "pipeline", "chain.v1", NULL), 2);
  assert_true(value(&pg, "sip_pipeline_requests_total", "pipeline", "broken", "code", "OK", NULL) == 0);
  assert_true(value(&pg, "sip_pipeline_requests_total", "pipeline", "broken", "code", "UNAVAILABLE", NULL) == 1);
  assert_true(value(&pg, "sip_pipeline_stage_runs_total", "pipeline", "chain.v1", "stage", "a", "outcome", "ran", NULL) == 2);
  assert_true(value(&pg, "sip_pipeline_stage_runs_total", "pipeline", "chain.v1", "stage", "a", "outcome", "failed", NULL) == 1);
  assert_true(value(&pg, "sip_pipeline_stage_runs_total", "pipeline", "chain.v1", "stage", "b", "outcome", "ran", NULL) == 2);
  assert_true(value(&pg, "sip_pipeline_stage_runs_total", "pipeline", "chain.v1", "stage", "b", "outcome", "failed", NULL) == 0);
  assert_true(value(&pg, "sip_pipeline_stage_runs_total", "pipeline", "chain.v1", "stage", "b", "outcome", "skipped", NULL) == 1);
  /* The FAILED pipeline: its stage listed, all zero. */
  assert_int_equal(count(&pg, "sip_pipeline_stage_runs_total", "pipeline", "broken", NULL), 3);
  assert_true(value(&pg, "sip_pipeline_stage_runs_total", "pipeline", "broken", "stage", "s", "outcome", "ran", NULL) == 0);
  assert_true(value(&pg, "sip_pipeline_stage_duration_us_total", "pipeline", "broken", "stage", "s", NULL) == 0);
  assert_true(value(&pg, "sip_pipeline_early_exits_total", "pipeline", "broken", NULL) == 0);
  assert_true(value(&pg, "sip_pipeline_early_exits_total", "pipeline", "chain.v1", NULL) == 0);
  assert_true(value(&pg, "sip_pipeline_request_duration_us_total", "pipeline", "chain.v1", NULL) > 0);

  /* Every pool-labelled sample names a pool of the config. */
  for (int i = 0; i < pg.n; i++) {
    const char *pool = label(&pg.s[i], "pool");
    if (!pool) continue;
    int known = 0;
    for (size_t k = 0; k < 4; k++) known |= !strcmp(pool, states[k].pool);
    if (!known) fail_msg("%s labelled with unknown pool '%s'", pg.s[i].name, pool);
  }
  /* Pool rotten and pipeline broken FAILED: not ready (server.strict_readiness). */
  assert_true(value(&pg, "sip_ready", NULL) == 0);
  page_free(&pg);
  sip_server_free(s);
}

/* A server that has answered nothing: every counter 0, histograms empty
 * but complete. */
static void test_scrape_fresh_server(void **state) {
  (void)state;
  sip_server_t *s = new_server_yaml("server: {log_level: error}\n"
                                    "session_pools:\n  - {name: idle, backend: builtin}\n");
  page_t pg;
  scrape(s, &pg);
  assert_int_equal(check_histograms(&pg), 5); /* 4 per pool, 1 of the server */
  assert_true(value(&pg, "sip_requests_total", "pool", "idle", "code", "OK", NULL) == 0);
  assert_int_equal(count(&pg, "sip_requests_total", NULL), 1);
  assert_true(value(&pg, "sip_request_latency_us_count", "pool", "idle", NULL) == 0);
  assert_true(value(&pg, "sip_request_latency_us_bucket", "pool", "idle", "le", "+Inf", NULL) == 0);
  assert_true(value(&pg, "sip_last_inference_timestamp_seconds", "pool", "idle", NULL) == 0);
  assert_true(value(&pg, "sip_pool_state", "pool", "idle", "state", "READY", NULL) == 1);
  /* No pipelines: their families are declared with no samples. */
  family_t *f = family_named(&pg, "sip_pipeline_requests_total");
  assert_non_null(f);
  assert_int_equal(f->n_samples, 0);
  page_free(&pg);
  sip_server_free(s);
}

/* Label values are escaped: pool and stage names cannot hold a quote, a
 * backslash or a newline, but a version can, since a model directory's
 * 'current' link may name any directory. */
static void test_label_escaping(void **state) {
  (void)state;
  char dir[] = "/tmp/sip_prom_XXXXXX";
  assert_non_null(mkdtemp(dir));
  static const char ver[] = "a\"b\\c\nd"; /* a"b\c<newline>d */
  char m[256], vd[512], file[600], link[300];
  snprintf(m, sizeof m, "%s/m", dir);
  snprintf(vd, sizeof vd, "%s/%s", m, ver);
  snprintf(file, sizeof file, "%s/model.onnx", vd);
  snprintf(link, sizeof link, "%s/current", m);
  assert_int_equal(mkdir(m, 0700), 0);
  assert_int_equal(mkdir(vd, 0700), 0);
  FILE *fp = fopen(file, "w");
  assert_non_null(fp);
  fclose(fp);
  assert_int_equal(symlink(ver, link), 0);
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "server: {log_level: error}\n"
           "session_pools:\n  - {name: vers, backend: builtin, model_path: '%s'}\n", m);
  sip_server_t *s = new_server_yaml(yaml);
  assert_int_equal(run(s, freq("vers", 1, "input", 2)), SIP_OK);
  char *text = sip__prometheus_text(s);
  assert_non_null(text);
  assert_non_null(strstr(text, "sip_pool_state{pool=\"vers\",version=\"a\\\"b\\\\c\\nd\",state=\"READY\"} 1\n"));
  page_t pg;
  parse_page(text, &pg);
  sip__free(text);
  assert_true(value(&pg, "sip_pool_state", "pool", "vers", "version", ver, "state", "READY", NULL) == 1);
  assert_true(value(&pg, "sip_requests_total", "pool", "vers", "version", ver, "code", "OK", NULL) == 1);
  assert_int_equal(check_histograms(&pg), 5); /* 4 per pool, 1 of the server */
  page_free(&pg);
  sip_server_free(s);
  unlink(link);
  unlink(file);
  rmdir(vd);
  rmdir(m);
  rmdir(dir);
}

/* Scrapes taken while requests run are each well formed, and counters
 * never go down from one scrape to the next. */
typedef struct load {
  sip_server_t *s;
  atomic_int stop;
  atomic_int sent;
  atomic_int unexpected; /* answers neither OK nor INTERNAL (checked on the main thread) */
} load_t;

static void *traffic(void *arg) {
  load_t *l = arg;
  for (uint64_t id = 1; !atomic_load(&l->stop) && id < 400; id++) {
    sip_code_t c = run(l->s, freq(id % 3 ? "echo" : "flaky", id, "input", 2));
    if (c != SIP_OK && c != SIP_INTERNAL) atomic_fetch_add(&l->unexpected, 1);
    atomic_fetch_add(&l->sent, 1);
  }
  return NULL;
}

static void test_scrapes_under_traffic(void **state) {
  (void)state;
  sip_server_t *s = new_server_yaml(CONFIG);
  load_t l = {s, 0, 0, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, traffic, &l), 0);
  double prev_ok = 0, prev_inf = 0;
  for (int i = 0; i < 20; i++) {
    page_t pg;
    scrape(s, &pg);
    check_histograms(&pg);
    double ok = value(&pg, "sip_requests_total", "pool", "echo", "code", "OK", NULL);
    double inf = value(&pg, "sip_inference_count_total", "pool", "flaky", NULL);
    assert_true(ok >= prev_ok);
    assert_true(inf >= prev_inf);
    prev_ok = ok;
    prev_inf = inf;
    page_free(&pg);
  }
  atomic_store(&l.stop, 1);
  pthread_join(th, NULL);
  int sent = atomic_load(&l.sent);
  assert_int_equal(atomic_load(&l.unexpected), 0);
  assert_true(sent > 0);
  page_t pg;
  scrape(s, &pg);
  /* Every request answered is counted once, in one of the two pools. */
  double echo = value(&pg, "sip_requests_total", "pool", "echo", "code", "OK", NULL);
  double fl = value(&pg, "sip_requests_total", "pool", "flaky", "code", "OK", NULL);
  double fl_err = count(&pg, "sip_requests_total", "pool", "flaky", "code", "INTERNAL", NULL)
                      ? value(&pg, "sip_requests_total", "pool", "flaky", "code", "INTERNAL", NULL)
                      : 0;
  assert_true(echo + fl + fl_err == sent);
  page_free(&pg);
  sip_server_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scrape_after_requests),
      cmocka_unit_test(test_scrape_fresh_server),
      cmocka_unit_test(test_label_escaping),
      cmocka_unit_test(test_scrapes_under_traffic),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
