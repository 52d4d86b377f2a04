/* Unit tests of Triton's families on /metrics (src/server/observe/prometheus_triton.c,
 * metrics.triton_names): from known counters, each nv_* family is written
 * once with # HELP and # TYPE, with Triton's labels (model, version; an
 * unversioned model is version "1"), values computed from the counters the
 * sip_* families use, pipelines reported as ensembles; an in-process server
 * exports them by default and not with metrics: {triton_names: false}; the
 * config refuses a non-boolean with what it expected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backends.h"
#include "config/config.h"
#include "core/core.h"
#include "inproc.h"
#include "server/observe/prometheus.h"
#include "server/observe/prometheus_impl.h"
#include "sip/sip.h"

/* The page built from two pools and one pipeline with known counters. */
static char *triton_page(void) {
  sip__prom_pool_row_t pl[2];
  memset(pl, 0, sizeof pl);
  pl[0].name = "resnet";
  pl[0].version = "";
  sip__pool_counters_t *c = &pl[0].c;
  c->by_code[SIP_OK] = 7;
  c->by_code[SIP_INTERNAL] = 2;
  c->by_code[SIP_DEADLINE_EXCEEDED] = 1;
  c->inference_count = 12;
  c->execution_count = 5;
  c->queued_total = 3;
  c->success.ns = 4000500;
  c->fail.ns = 1000250;
  c->queue_stat.ns = 1500;
  c->compute_input.ns = 2001;
  c->compute_infer.ns = 3000000;
  c->compute_output.ns = 999;
  pl[1].name = "we\"ird";
  pl[1].version = "3";
  pl[1].c.by_code[SIP_OK] = 1;
  sip__pipeline_counters_t pc;
  memset(&pc, 0, sizeof pc);
  pc.name = "ocr";
  pc.by_code[SIP_OK] = 4;
  pc.by_code[SIP_INVALID_ARGUMENT] = 1;
  pc.by_code[SIP_UNAVAILABLE] = 2;
  pc.ok_us = 800;
  pc.fail_us = 45;
  sip__sb_t b = {0};
  sip__prometheus_triton(&b, pl, 2, &pc, 1);
  assert_false(b.oom);
  assert_non_null(b.p);
  return b.p;
}

/* `line` is a whole line of `page`. */
static void has_line(const char *page, const char *line) {
  size_t n = strlen(line);
  for (const char *p = page; (p = strstr(p, line)); p++)
    if ((p == page || p[-1] == '\n') && p[n] == '\n') return;
  fail_msg("no line \"%s\" in:\n%s", line, page);
}

static int count_of(const char *page, const char *s) {
  int k = 0;
  for (const char *p = page; (p = strstr(p, s)); p += strlen(s)) k++;
  return k;
}

static void test_values_and_labels(void **state) {
  (void)state;
  char *page = triton_page();
  /* Unversioned: "1"; versioned: its own; names escaped. */
  has_line(page, "nv_inference_request_success{model=\"resnet\",version=\"1\"} 7");
  has_line(page, "nv_inference_request_success{model=\"we\\\"ird\",version=\"3\"} 1");
  /* Every code but OK is a failure. */
  has_line(page, "nv_inference_request_failure{model=\"resnet\",version=\"1\"} 3");
  has_line(page, "nv_inference_request_failure{model=\"we\\\"ird\",version=\"3\"} 0");
  has_line(page, "nv_inference_count{model=\"resnet\",version=\"1\"} 12");
  has_line(page, "nv_inference_exec_count{model=\"resnet\",version=\"1\"} 5");
  has_line(page, "nv_inference_pending_request_count{model=\"resnet\",version=\"1\"} 3");
  /* Times: nanoseconds / 1000, as sip_*_duration_us_total writes them. */
  has_line(page, "nv_inference_request_duration_us{model=\"resnet\",version=\"1\"} 5000.750");
  has_line(page, "nv_inference_queue_duration_us{model=\"resnet\",version=\"1\"} 1.500");
  has_line(page, "nv_inference_compute_input_duration_us{model=\"resnet\",version=\"1\"} 2.001");
  has_line(page, "nv_inference_compute_infer_duration_us{model=\"resnet\",version=\"1\"} 3000.000");
  has_line(page, "nv_inference_compute_output_duration_us{model=\"resnet\",version=\"1\"} 0.999");
  /* The pipeline, as an ensemble: requests and their end-to-end time only. */
  has_line(page, "nv_inference_request_success{model=\"ocr\",version=\"1\"} 4");
  has_line(page, "nv_inference_request_failure{model=\"ocr\",version=\"1\"} 3");
  has_line(page, "nv_inference_request_duration_us{model=\"ocr\",version=\"1\"} 845");
  assert_int_equal(count_of(page, "model=\"ocr\""), 3);
  sip__free(page);
}

static void test_families_declared_once(void **state) {
  (void)state;
  char *page = triton_page();
  static const struct {
    const char *name, *type;
  } fams[] = {
      {"nv_inference_request_success", "counter"},
      {"nv_inference_request_failure", "counter"},
      {"nv_inference_count", "counter"},
      {"nv_inference_exec_count", "counter"},
      {"nv_inference_request_duration_us", "counter"},
      {"nv_inference_queue_duration_us", "counter"},
      {"nv_inference_compute_input_duration_us", "counter"},
      {"nv_inference_compute_infer_duration_us", "counter"},
      {"nv_inference_compute_output_duration_us", "counter"},
      {"nv_inference_pending_request_count", "gauge"},
  };
  char want[256];
  for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
    snprintf(want, sizeof want, "# TYPE %s %s", fams[i].name, fams[i].type);
    has_line(page, want);
    snprintf(want, sizeof want, "# HELP %s ", fams[i].name);
    assert_int_equal(count_of(page, want), 1);
    /* Its samples are together, after its header and before the next. */
    const char *hdr = strstr(page, want);
    const char *end = strstr(hdr + 1, "# HELP");
    if (!end) end = page + strlen(page);
    snprintf(want, sizeof want, "\n%s{", fams[i].name);
    int samples = 0;
    for (const char *p = page; (p = strstr(p, want)); p++, samples++)
      assert_true(p > hdr && p < end);
    assert_int_equal(samples, i < 2 || i == 4 ? 3 : 2); /* the pipeline's three */
  }
  /* Nothing else: a header of two lines per family, two pools in each,
   * the pipeline in three. */
  assert_int_equal(count_of(page, "\n"), 10 * 2 + 10 * 2 + 3);
  sip__free(page);
}

static void test_server_default_on_and_off(void **state) {
  (void)state;
  static const char *const yaml[2] = {
      "server: {log_level: error}\n"
      "session_pools:\n  - {name: echo, backend: builtin}\n",
      "server: {log_level: error}\n"
      "metrics: {triton_names: false}\n"
      "session_pools:\n  - {name: echo, backend: builtin}\n",
  };
  for (int off = 0; off < 2; off++) {
    sip_server_t *s = new_server_yaml(yaml[off]);
    char *page = sip__prometheus_text(s);
    assert_non_null(page);
    assert_non_null(strstr(page, "sip_requests_total{pool=\"echo\",version=\"\",code=\"OK\"} 0\n"));
    if (off) {
      assert_null(strstr(page, "nv_inference"));
    } else {
      has_line(page, "nv_inference_request_success{model=\"echo\",version=\"1\"} 0");
      has_line(page, "# TYPE nv_inference_pending_request_count gauge");
    }
    sip__free(page);
    sip_server_free(s);
  }
}

/* `metrics_yaml` then one pool, parsed as t.yaml. */
static sip_error_t *load(const char *metrics_yaml, sip__config_t **cfg) {
  char yaml[512];
  snprintf(yaml, sizeof yaml, "%ssession_pools:\n  - {name: a, backend: builtin}\n", metrics_yaml);
  *cfg = NULL;
  return sip__config_load_string(yaml, strlen(yaml), "t.yaml", NULL, sip__backend_catalog(), cfg);
}

static void test_config_section(void **state) {
  (void)state;
  sip__config_t *cfg = NULL;
  assert_null(load("", &cfg));
  assert_int_equal(cfg->metrics.triton_names, 1);
  sip__config_free(cfg);
  assert_null(load("metrics: {triton_names: false}\n", &cfg));
  assert_int_equal(cfg->metrics.triton_names, 0);
  sip__config_free(cfg);
  sip_error_t *e = load("metrics: {triton_names: maybe}\n", &cfg);
  assert_non_null(e);
  assert_null(cfg);
  const char *msg = sip_error_message(e);
  if (!strstr(msg, "t.yaml:1:") || !strstr(msg, "triton_names") || !strstr(msg, "maybe") ||
      !strstr(msg, "expected true or false"))
    fail_msg("message: %s", msg);
  sip_error_free(e);
  /* An unknown key names the ones there are. */
  e = load("metrics: {triton: true}\n", &cfg);
  assert_non_null(e);
  if (!strstr(sip_error_message(e), "triton_names")) fail_msg("message: %s", sip_error_message(e));
  sip_error_free(e);
}

static int setup(void **state) {
  (void)state;
  sip__log_set_level(SIP__LOG_ERROR + 1);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values_and_labels),
      cmocka_unit_test(test_families_declared_once),
      cmocka_unit_test(test_server_default_on_and_off),
      cmocka_unit_test(test_config_section),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
