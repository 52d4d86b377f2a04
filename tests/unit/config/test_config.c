/* Unit tests for the config parser (src/config/): values, defaults and every message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "core/core.h"
#include "backend/backends.h"

#define NAME "cfg.yaml"
#define BASE "/base"

static sip__config_t *load_ok(const char *yaml) {
  sip__config_t *cfg = NULL;
  sip_error_t *err = sip__config_load_string(yaml, strlen(yaml), NAME, BASE, sip__backend_catalog(), &cfg);
  if (err) fail_msg("unexpected error: %s\n--- yaml:\n%s", sip_error_message(err), yaml);
  assert_non_null(cfg);
  return cfg;
}

/* Loads `yaml` (length len), expects an error with `code` whose message
 * contains every string of the NULL-terminated list. */
static void expect_errn(const char *yaml, size_t len, sip_code_t code, ...) {
  sip__config_t *cfg = (sip__config_t *)1;
  sip_error_t *err = sip__config_load_string(yaml, len, NAME, BASE, sip__backend_catalog(), &cfg);
  if (!err) fail_msg("expected an error for:\n%s", yaml);
  assert_null(cfg);
  /* Copied so the error is freed before a failure longjmps out (LSan). */
  char msg[4096];
  snprintf(msg, sizeof msg, "%s", sip_error_message(err));
  sip_code_t got = sip_error_code(err);
  sip_error_free(err);
  if (got != code) fail_msg("code %s, want %s: %s", sip_code_name(got), sip_code_name(code), msg);
  va_list ap;
  va_start(ap, code);
  const char *missing = NULL;
  for (const char *sub; !missing && (sub = va_arg(ap, const char *));)
    if (!strstr(msg, sub)) missing = sub;
  va_end(ap);
  if (missing) fail_msg("message lacks \"%s\":\n  %s\n--- yaml:\n%s", missing, msg, yaml);
}

#define EXPECT_ERR(yaml, ...) expect_errn(yaml, strlen(yaml), SIP_INVALID_ARGUMENT, __VA_ARGS__, NULL)

/* One pool around a fragment of pool keys (indented 4). */
#define POOL(extra) "session_pools:\n  - name: p\n    model_path: m.onnx\n" extra

static void test_full_config(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(
      "server:\n"
      "  endpoints: [\"ipc:///tmp/sip_service.sock\", \"unix:///tmp/x.sock\", "
      "\"tcp://127.0.0.1:8500\"]\n"
      "  intra_op_threads: 2\n"
      "  inter_op_threads: 1\n"
      "  allow_spinning: true\n"
      "  max_frame_bytes: 64MiB\n"
      "  log_level: debug\n"
      "session_pools:\n"
      "  - name: ocr_cls\n"
      "    model_path: models/cls.onnx\n"
      "    backend: onnxruntime\n"
      "    pool_size: 4\n"
      "    priority: high\n"
      "    resource_quota: {max_memory_mb: 2048, max_compute_percent: 25}\n"
      "    backend_options: {graph_optimization_level: all, execution_provider: cpu, n: 3, "
      "flag: true}\n"
      "  - name: det.v2-x\n"
      "    model_path: /abs/models/det\n"
      "    priority: low\n"
      "  - name: echo\n"
      "    backend: builtin\n");
  assert_string_equal(cfg->path, NAME);
  assert_int_equal(cfg->n_endpoints, 3);
  assert_string_equal(cfg->endpoints[0], "ipc:///tmp/sip_service.sock");
  assert_string_equal(cfg->endpoints[1], "unix:///tmp/x.sock");
  assert_string_equal(cfg->endpoints[2], "tcp://127.0.0.1:8500");
  assert_int_equal(cfg->engine.intra_op_threads, 2);
  assert_int_equal(cfg->engine.inter_op_threads, 1);
  assert_int_equal(cfg->engine.allow_spinning, 1);
  assert_int_equal(cfg->max_frame_bytes, 64u << 20);
  assert_int_equal(cfg->log_level, SIP__LOG_DEBUG);
  assert_int_equal(cfg->n_pools, 3);

  sip__pool_config_t *p = &cfg->pools[0];
  assert_string_equal(p->name, "ocr_cls");
  assert_string_equal(p->model_path, BASE "/models/cls.onnx");
  assert_string_equal(p->backend, "onnxruntime");
  assert_int_equal(p->pool_size, 4);
  assert_int_equal(p->priority, SIP__PRIO_HIGH);
  assert_int_equal(p->max_memory_mb, 2048);
  assert_int_equal(p->max_compute_percent, 25);
  assert_int_equal(p->line, 9);
  assert_int_equal(p->n_backend_options, 4);
  assert_string_equal(p->backend_options[0].key, "graph_optimization_level");
  assert_string_equal(p->backend_options[0].value, "all");
  assert_string_equal(p->backend_options[1].key, "execution_provider");
  assert_string_equal(p->backend_options[1].value, "cpu");
  assert_string_equal(p->backend_options[2].value, "3");
  assert_string_equal(p->backend_options[3].value, "true");

  p = &cfg->pools[1];
  assert_string_equal(p->name, "det.v2-x");
  assert_string_equal(p->model_path, "/abs/models/det");
  assert_string_equal(p->backend, "onnxruntime"); /* no extension: a model directory */
  assert_int_equal(p->priority, SIP__PRIO_LOW);
  assert_int_equal(p->line, 16);

  p = &cfg->pools[2];
  assert_string_equal(p->backend, "builtin");
  assert_null(p->model_path);
  sip__config_free(cfg);
}

static void test_defaults(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok("session_pools: []\n");
  assert_int_equal(cfg->n_endpoints, 1);
  assert_string_equal(cfg->endpoints[0], "ipc:///tmp/sip_service.sock");
  assert_int_equal(cfg->engine.intra_op_threads, 0);
  assert_int_equal(cfg->engine.inter_op_threads, 0);
  assert_int_equal(cfg->engine.allow_spinning, 0);
  assert_int_equal(cfg->max_frame_bytes, 268435456u);
  assert_int_equal(cfg->max_unsent_bytes, 16u << 20);
  assert_int_equal(cfg->log_level, SIP__LOG_INFO);
  assert_int_equal(cfg->n_pools, 0);
  assert_null(cfg->pools);
  sip__config_free(cfg);

  cfg = load_ok("session_pools:\n  - {name: a, model_path: a.onnx}\n");
  sip__pool_config_t *p = &cfg->pools[0];
  assert_int_equal(p->pool_size, 1);
  assert_int_equal(p->priority, SIP__PRIO_MEDIUM);
  assert_int_equal(p->max_memory_mb, 0);
  assert_int_equal(p->max_compute_percent, 0);
  assert_int_equal(p->n_backend_options, 0);
  assert_null(p->backend_options);
  assert_string_equal(p->backend, "onnxruntime");
  sip__config_free(cfg);

  /* Sections with every key commented out are empty, not errors. */
  cfg = load_ok("server:\n#  log_level: debug\nsession_pools:\n");
  assert_int_equal(cfg->n_pools, 0);
  assert_int_equal(cfg->log_level, SIP__LOG_INFO);
  sip__config_free(cfg);

  cfg = load_ok(POOL("    resource_quota:\n    backend_options: {}\n"));
  assert_int_equal(cfg->pools[0].max_memory_mb, 0);
  assert_int_equal(cfg->pools[0].n_backend_options, 0);
  sip__config_free(cfg);
}

static void test_sizes_and_bools(void **state) {
  (void)state;
  static const struct {
    const char *text;
    size_t want;
  } cases[] = {
      {"1024", 1024},          {"64KiB", 64u << 10},     {"256MiB", 256u << 20},
      {"1GiB", 1u << 30},      {"4GiB", (size_t)4 << 30}, {"2048B", 2048},
      {"64 kib", 64u << 10},   {"\"1MiB\"", 1u << 20},   {"4294967296", (size_t)4 << 30},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char yaml[256];
    snprintf(yaml, sizeof yaml, "server: {max_frame_bytes: %s}\nsession_pools: []\n", cases[i].text);
    sip__config_t *cfg = load_ok(yaml);
    assert_int_equal(cfg->max_frame_bytes, cases[i].want);
    sip__config_free(cfg);
  }
  sip__config_t *unsent = load_ok("server: {max_unsent_bytes: 1MiB}\nsession_pools: []\n");
  assert_int_equal(unsent->max_unsent_bytes, 1u << 20);
  sip__config_free(unsent);
  static const char *const bools[] = {"true", "True", "TRUE", "false", "False", "FALSE"};
  for (size_t i = 0; i < 6; i++) {
    char yaml[256];
    snprintf(yaml, sizeof yaml, "server: {allow_spinning: %s}\nsession_pools: []\n", bools[i]);
    sip__config_t *cfg = load_ok(yaml);
    assert_int_equal(cfg->engine.allow_spinning, i < 3);
    sip__config_free(cfg);
  }
  sip__config_t *cfg = load_ok("server: {intra_op_threads: +8, log_level: error}\nsession_pools: []\n");
  assert_int_equal(cfg->engine.intra_op_threads, 8);
  assert_int_equal(cfg->log_level, SIP__LOG_ERROR);
  sip__config_free(cfg);
}

/* The availability keys (docs/availability.md): the seeds' YAML as
 * written, defaults, and the fallback pool's checks. */
static void test_availability_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(
      "server: {allow_fault_injection: true}\n"
      "session_pools:\n"
      "  - name: critical_inference\n"
      "    model_path: models/mission_critical.onnx\n"
      "    pool_size: 2\n"
      "    hot_standby: {enabled: true, standby_count: 1, health_check_interval_ms: 5000}\n"
      "    failover: {strategy: immediate_retry, max_retries: 3, fallback_pool: "
      "critical_inference_backup}\n"
      "  - name: critical_inference_backup\n"
      "    backend: builtin\n"
      "    hang_timeout_ms: 2000\n"
      "    health_check_interval_ms: 100\n");
  assert_int_equal(cfg->allow_fault_injection, 1);
  const sip__pool_config_t *a = &cfg->pools[0], *b = &cfg->pools[1];
  assert_int_equal(a->standby_enabled, 1);
  assert_int_equal(a->standby_count, 1);
  assert_int_equal(a->standby_health_ms, 5000);
  assert_int_equal(a->failover_strategy, SIP__FAILOVER_RETRY);
  assert_int_equal(a->failover_max_retries, 3);
  assert_string_equal(a->fallback_pool, "critical_inference_backup");
  assert_int_equal(a->hang_timeout_ms, 0);
  assert_int_equal(b->hang_timeout_ms, 2000);
  assert_int_equal(b->health_check_interval_ms, 100);
  assert_int_equal(b->failover_strategy, SIP__FAILOVER_NONE);
  assert_null(b->fallback_pool);
  assert_false(sip__config_pool_same(a, b));
  sip__config_free(cfg);
  cfg = load_ok("session_pools: []\n");
  assert_int_equal(cfg->allow_fault_injection, 0);
  sip__config_free(cfg);

  EXPECT_ERR(POOL("    failover: {strategy: immediate_retry, fallback_pool: q}\n"),
             "session_pools[0].failover.fallback_pool", "\"q\" is not a pool of this file",
             "expected the name of another pool");
  EXPECT_ERR(POOL("    failover: {strategy: fallback, fallback_pool: p}\n"),
             "session_pools[0].failover.fallback_pool", "is the pool itself");
  EXPECT_ERR(POOL("    failover: {strategy: fallback}\n"),
             "session_pools[0].failover.fallback_pool", "missing");
  EXPECT_ERR(POOL("    failover: {strategy: retry_forever}\n"), "failover.strategy",
             "none, immediate_retry, fallback");
  EXPECT_ERR(POOL("    failover: {max_retries: 17}\n"), "failover.max_retries", "0..16");
  EXPECT_ERR(POOL("    hang_timeout_ms: 0\n"), "hang_timeout_ms");
  EXPECT_ERR(POOL("    hot_standby: {standby: 1}\n"), "hot_standby.standby: unknown key",
             "enabled, standby_count, health_check_interval_ms");
}

static void test_unknown_keys(void **state) {
  (void)state;
  EXPECT_ERR("session_pools: []\npipelines: []\n", NAME ":2:1: pipelines: unknown key",
             "expected one of: server, session_pools, pipeline_sessions");
  EXPECT_ERR("server:\n  log_level: info\n  threads: 2\nsession_pools: []\n",
             NAME ":3:3: server.threads: unknown key",
             "expected one of: endpoints, intra_op_threads, inter_op_threads, allow_spinning, "
             "max_frame_bytes, log_level");
  EXPECT_ERR(POOL("    warm_pool: {enabled: true}\n"),
             NAME ":4:5: session_pools[0].warm_pool: unknown key",
             "expected one of: name, model_path, backend, pool_size, priority, resource_quota, "
             "backend_options");
  EXPECT_ERR(POOL("    resource_quota: {max_memory_mb: 1, max_gpu: 2}\n"),
             NAME ":4:40: session_pools[0].resource_quota.max_gpu: unknown key",
             "expected one of: max_memory_mb, max_compute_percent");
  EXPECT_ERR("session_pools: []\n[a]: 1\n", NAME ":2:1: (root): a key is a list",
             "expected a scalar key");
}

static void test_duplicate_keys(void **state) {
  (void)state;
  EXPECT_ERR("session_pools: []\nserver: {}\nsession_pools: []\n",
             NAME ":3:1: session_pools: duplicate key (first at line 1)",
             "expected each key at most once");
  EXPECT_ERR("server:\n  log_level: info\n  log_level: warn\nsession_pools: []\n",
             NAME ":3:3: server.log_level: duplicate key (first at line 2)");
  EXPECT_ERR(POOL("    pool_size: 1\n    pool_size: 2\n"),
             NAME ":5:5: session_pools[0].pool_size: duplicate key (first at line 4)");
  EXPECT_ERR(POOL("    resource_quota: {max_memory_mb: 1, max_memory_mb: 2}\n"),
             "session_pools[0].resource_quota.max_memory_mb: duplicate key");
  EXPECT_ERR(POOL("    backend_options: {a: 1, a: 2}\n"),
             NAME ":4:29: session_pools[0].backend_options.a: duplicate key");
}

static void test_wrong_kinds(void **state) {
  (void)state;
  EXPECT_ERR("server: [1]\nsession_pools: []\n", NAME ":1:9: server: is a list",
             "expected a map with keys: endpoints,");
  EXPECT_ERR("session_pools: {a: 1}\n", NAME ":1:16: session_pools: is a map",
             "expected a list of pools");
  EXPECT_ERR("session_pools:\n  - just_a_name\n", NAME ":2:5: session_pools[0]: is a scalar",
             "expected a map with keys: name, model_path");
  EXPECT_ERR("session_pools:\n  -\n", "session_pools[0]: has no value",
             "expected a map with keys:");
  EXPECT_ERR(POOL("    resource_quota: [1, 2]\n"), NAME ":4:21: session_pools[0].resource_quota: is a list",
             "expected a map with keys: max_memory_mb, max_compute_percent");
  EXPECT_ERR("server: {endpoints: tcp://h:1}\nsession_pools: []\n",
             NAME ":1:21: server.endpoints: is a scalar", "expected a non-empty list of endpoints");
  EXPECT_ERR(POOL("    pool_size: abc\n"), NAME ":4:16: session_pools[0].pool_size: \"abc\" is not an integer",
             "expected an integer 1..256");
  EXPECT_ERR(POOL("    pool_size: 2.5\n"), "\"2.5\" is not an integer");
  EXPECT_ERR(POOL("    pool_size: \"4\"\n"), "session_pools[0].pool_size: \"4\" is a quoted string",
             "expected an integer 1..256");
  EXPECT_ERR(POOL("    pool_size: [4]\n"), "session_pools[0].pool_size: is a list",
             "expected an integer 1..256");
  EXPECT_ERR(POOL("    pool_size:\n"), NAME ":4:15: session_pools[0].pool_size: has no value",
             "expected an integer 1..256");
  EXPECT_ERR("server: {allow_spinning: yes}\nsession_pools: []\n",
             NAME ":1:26: server.allow_spinning: \"yes\" is not a boolean", "expected true or false");
  EXPECT_ERR("server: {allow_spinning: \"true\"}\nsession_pools: []\n",
             "\"true\" is not a boolean (it is quoted)");
  EXPECT_ERR("server: {log_level: [info]}\nsession_pools: []\n", "server.log_level: is a list",
             "expected one of debug, info, warn, error");
  EXPECT_ERR("session_pools:\n  - name: {a: 1}\n", NAME ":2:11: session_pools[0].name: is a map",
             "expected a pool name");
  EXPECT_ERR("server: {max_frame_bytes: 12XB}\nsession_pools: []\n",
             "server.max_frame_bytes: \"12XB\" is not a byte size", "expected a byte size 1024..4294967296");
  EXPECT_ERR("server: {max_frame_bytes: -5}\nsession_pools: []\n", "\"-5\" is not a byte size");
  EXPECT_ERR("server: {max_unsent_bytes: 100}\nsession_pools: []\n", "server.max_unsent_bytes",
             "4096..4294967296");
}

static void test_out_of_range(void **state) {
  (void)state;
  /* The example from the design brief, verbatim. */
  EXPECT_ERR("server:\n"
             "  log_level: info\n"
             "session_pools:\n"
             "  - name: a\n"
             "    model_path: a.onnx\n"
             "  - name: b\n"
             "    pool_size: 0\n"
             "    model_path: b.onnx\n",
             "cfg.yaml:7:16: session_pools[1].pool_size: 0 is out of range; expected an integer 1..256");
  EXPECT_ERR(POOL("    pool_size: 257\n"), "session_pools[0].pool_size: 257 is out of range");
  EXPECT_ERR(POOL("    pool_size: 99999999999999999999999\n"),
             "pool_size: 99999999999999999999999 is out of range");
  EXPECT_ERR("server: {intra_op_threads: 257}\nsession_pools: []\n",
             NAME ":1:28: server.intra_op_threads: 257 is out of range", "expected an integer 0..256");
  EXPECT_ERR("server: {intra_op_threads: -1}\nsession_pools: []\n",
             "server.intra_op_threads: -1 is out of range");
  EXPECT_ERR("server: {inter_op_threads: 300}\nsession_pools: []\n",
             "server.inter_op_threads: 300 is out of range", "expected an integer 0..256");
  EXPECT_ERR("server: {max_frame_bytes: 1023}\nsession_pools: []\n",
             "server.max_frame_bytes: \"1023\" is out of range", "1024..4294967296");
  EXPECT_ERR("server: {max_frame_bytes: 4294967297}\nsession_pools: []\n",
             "\"4294967297\" is out of range");
  EXPECT_ERR("server: {max_frame_bytes: 8GiB}\nsession_pools: []\n", "\"8GiB\" is out of range");
  EXPECT_ERR("server: {max_frame_bytes: 99999999999999999999GiB}\nsession_pools: []\n",
             "is out of range");
  EXPECT_ERR(POOL("    resource_quota: {max_memory_mb: 0}\n"),
             NAME ":4:37: session_pools[0].resource_quota.max_memory_mb: 0 is out of range",
             "expected an integer 1..1048576");
  EXPECT_ERR(POOL("    resource_quota: {max_memory_mb: 1048577}\n"), "1048577 is out of range");
  EXPECT_ERR(POOL("    resource_quota: {max_compute_percent: 0}\n"),
             "session_pools[0].resource_quota.max_compute_percent: 0 is out of range",
             "expected an integer 1..100");
  EXPECT_ERR(POOL("    resource_quota: {max_compute_percent: 101}\n"), "101 is out of range");
}

static void test_bad_enums(void **state) {
  (void)state;
  EXPECT_ERR(POOL("    priority: urgent\n"),
             NAME ":4:15: session_pools[0].priority: \"urgent\" is not valid; expected one of high, "
                  "medium, low");
  EXPECT_ERR(POOL("    priority: High\n"), "\"High\" is not valid");
  EXPECT_ERR(POOL("    isolation: container\n"),
             NAME ":4:16: session_pools[0].isolation: \"container\" is not valid; expected one of "
                  "thread, process");
  EXPECT_ERR("server: {log_level: verbose}\nsession_pools: []\n",
             "server.log_level: \"verbose\" is not valid; expected one of debug, info, warn, error");
  EXPECT_ERR(POOL("    backend: tensorrt\n"),
             "session_pools[0].backend: \"tensorrt\" is not a backend of this server; expected one "
             "of onnxruntime, builtin, transform");
}

static void expect_bad_endpoint(const char *ep, const char *problem) {
  char yaml[1024];
  snprintf(yaml, sizeof yaml, "server:\n  endpoints:\n    - ipc://a\n    - \"%s\"\nsession_pools: []\n", ep);
  EXPECT_ERR(yaml, NAME ":4:7: server.endpoints[1]: ", problem,
             "expected ipc://PATH, unix:///ABSOLUTE/PATH (at most 107 bytes) or tcp://HOST:PORT");
}

static void test_endpoints(void **state) {
  (void)state;
  expect_bad_endpoint("http://x:80", "has an unknown scheme");
  expect_bad_endpoint("tcp://host", "\"tcp://host\" has no port");
  expect_bad_endpoint("tcp://host:", "has no port");
  expect_bad_endpoint("tcp://:80", "has no host");
  expect_bad_endpoint("tcp://h:70000", "has a port out of range");
  expect_bad_endpoint("tcp://h:-1", "has a port out of range");
  expect_bad_endpoint("tcp://h:8o", "has a port out of range");
  expect_bad_endpoint("tcp://::1:80", "has an IPv6 host without brackets");
  expect_bad_endpoint("tcp://[zz]:80", "has a malformed IPv6 host");
  expect_bad_endpoint("tcp://[::1]", "has no port");
  expect_bad_endpoint("tcp://a b:80", "has an invalid host");
  expect_bad_endpoint("unix://rel.sock", "does not have an absolute path");
  expect_bad_endpoint("ipc://", "has an empty path");

  char longp[200], yaml[512];
  memset(longp, 'x', sizeof longp);
  longp[0] = '/';
  longp[108] = '\0'; /* 108 bytes: one too many */
  snprintf(yaml, sizeof yaml, "server: {endpoints: [\"unix://%s\"]}\nsession_pools: []\n", longp);
  EXPECT_ERR(yaml, "server.endpoints[0]: ", "has a 108-byte path, longer than a Unix socket path can be");
  snprintf(yaml, sizeof yaml, "server: {endpoints: [\"ipc://%s\"]}\nsession_pools: []\n", longp);
  EXPECT_ERR(yaml, "has a 108-byte path");
  longp[107] = '\0';
  snprintf(yaml, sizeof yaml,
           "server: {endpoints: [\"unix://%s\", \"tcp://[::1]:0\", \"ipc://rel/x.sock\", "
           "\"tcp://localhost:65535\"]}\nsession_pools: []\n",
           longp);
  sip__config_t *cfg = load_ok(yaml);
  assert_int_equal(cfg->n_endpoints, 4);
  assert_string_equal(cfg->endpoints[1], "tcp://[::1]:0");
  assert_string_equal(cfg->endpoints[2], "ipc://rel/x.sock"); /* not resolved: as written */
  sip__config_free(cfg);

  EXPECT_ERR("server: {endpoints: []}\nsession_pools: []\n", NAME ":1:21: server.endpoints: is empty",
             "expected a non-empty list");
  EXPECT_ERR("server: {endpoints: [\"tcp://h:1\", \"tcp://h:1\"]}\nsession_pools: []\n",
             "server.endpoints[1]: \"tcp://h:1\" is listed twice (also [0])");
  EXPECT_ERR("server: {endpoints: [[a]]}\nsession_pools: []\n", "server.endpoints[0]: is a list");
}

static void test_pool_names(void **state) {
  (void)state;
  EXPECT_ERR("session_pools:\n  - {name: a, model_path: a.onnx}\n  - {name: a, model_path: b.onnx}\n",
             NAME ":3:12: session_pools[1].name: \"a\" is already the name of session_pools[0] (line 2)",
             "expected unique pool names");
  EXPECT_ERR("session_pools:\n  - {name: \"my pool\", model_path: a.onnx}\n",
             NAME ":2:12: session_pools[0].name: \"my pool\" is not valid",
             "expected a pool name of 1..128 characters from A-Z a-z 0-9 _ . -");
  EXPECT_ERR("session_pools:\n  - {name: \"\", model_path: a.onnx}\n", "session_pools[0].name: is empty");
  EXPECT_ERR("session_pools:\n  - {name: \"a\\0b\", model_path: a.onnx}\n", "contains a NUL byte");
  char name[200], yaml[512];
  memset(name, 'n', sizeof name);
  name[129] = '\0';
  snprintf(yaml, sizeof yaml, "session_pools:\n  - {name: %s, model_path: a.onnx}\n", name);
  EXPECT_ERR(yaml, "session_pools[0].name: \"nnnn", "...\" is not valid");
  name[128] = '\0';
  snprintf(yaml, sizeof yaml, "session_pools:\n  - {name: %s, model_path: a.onnx}\n", name);
  sip__config_t *cfg = load_ok(yaml);
  assert_int_equal(strlen(cfg->pools[0].name), 128);
  sip__config_free(cfg);
  EXPECT_ERR("session_pools:\n  - {model_path: a.onnx}\n",
             NAME ":2:5: session_pools[0].name: missing; expected a pool name");
}

static void test_model_path(void **state) {
  (void)state;
  EXPECT_ERR("session_pools:\n  - name: a\n    model_path: models/ocr.om\n",
             NAME ":3:17: session_pools[0].model_path: \"models/ocr.om\" is a CANN offline model (.om), "
                  "but this build has no CANN backend; expected an .onnx file or a model directory");
  EXPECT_ERR("session_pools:\n  - {name: a, model_path: x.OM, backend: onnxruntime}\n",
             "is a CANN offline model (.om)");
  EXPECT_ERR("session_pools:\n  - name: a\n    model_path: m.pt\n",
             NAME ":3:17: session_pools[0].model_path: \"m.pt\" has an unknown extension (.pt)",
             "expected an .onnx file or a model directory");
  EXPECT_ERR("session_pools:\n  - name: a\n    pool_size: 2\n",
             NAME ":2:5: session_pools[0].model_path: missing",
             "expected a path to an .onnx file or a model directory (required unless the backend "
             "needs no model file, like builtin or transform)");
  EXPECT_ERR("session_pools:\n  - {name: a, model_path: \"\"}\n", "session_pools[0].model_path: is empty");
  EXPECT_ERR("session_pools:\n  - {name: a, model_path: ~}\n", "session_pools[0].model_path: has no value");

  sip__config_t *cfg = load_ok("session_pools:\n"
                              "  - {name: a, model_path: m.bin, backend: onnxruntime}\n"
                              "  - {name: b, model_path: M.ONNX}\n"
                              "  - {name: c, model_path: models/resnet/}\n"
                              "  - {name: d, model_path: fixtures/x.om, backend: builtin}\n");
  assert_string_equal(cfg->pools[0].model_path, BASE "/m.bin");
  assert_string_equal(cfg->pools[1].backend, "onnxruntime");
  assert_string_equal(cfg->pools[2].backend, "onnxruntime");
  assert_string_equal(cfg->pools[2].model_path, BASE "/models/resnet/");
  assert_string_equal(cfg->pools[3].backend, "builtin");
  assert_string_equal(cfg->pools[3].model_path, BASE "/fixtures/x.om");
  sip__config_free(cfg);

  /* A transform pool needs no model file. */
  cfg = load_ok("session_pools:\n"
                "  - {name: t, backend: transform, backend_options: {operation: softmax}}\n");
  assert_string_equal(cfg->pools[0].backend, "transform");
  assert_null(cfg->pools[0].model_path);
  sip__config_free(cfg);
}

static void test_backend_options(void **state) {
  (void)state;
  EXPECT_ERR(POOL("    backend_options: {a: {b: 1}}\n"),
             NAME ":4:26: session_pools[0].backend_options.a: is a map",
             "expected a scalar value (string, number or bool)");
  EXPECT_ERR(POOL("    backend_options:\n      providers: [cpu, cuda]\n"),
             NAME ":5:18: session_pools[0].backend_options.providers: is a list");
  EXPECT_ERR(POOL("    backend_options: {a: }\n"), "session_pools[0].backend_options.a: has no value");
  EXPECT_ERR(POOL("    backend_options: [a, b]\n"), "session_pools[0].backend_options: is a list",
             "expected a map of scalar values");
  EXPECT_ERR(POOL("    backend_options: {[k]: v}\n"), "session_pools[0].backend_options: a key is a list");
  sip__config_t *cfg = load_ok(POOL("    backend_options: {\"quoted key\": 'x y', e: \"\"}\n"));
  assert_string_equal(cfg->pools[0].backend_options[0].key, "quoted key");
  assert_string_equal(cfg->pools[0].backend_options[0].value, "x y");
  assert_string_equal(cfg->pools[0].backend_options[1].value, "");
  sip__config_free(cfg);
}

static void test_document_shape(void **state) {
  (void)state;
  EXPECT_ERR("", NAME ":1:1: (root): the document is empty; expected a map with keys: server, session_pools");
  EXPECT_ERR("# nothing but a comment\n", "(root): the document is empty");
  EXPECT_ERR("---\n", "(root): the document is empty");
  EXPECT_ERR("- a\n- b\n", NAME ":1:1: (root): is a list; expected a map with keys: server, session_pools");
  EXPECT_ERR("hello\n", "(root): is a scalar");
  EXPECT_ERR("server: {}\n", NAME ":1:1: session_pools: missing; expected a list of pools");
  EXPECT_ERR("session_pools: []\n---\nsession_pools: []\n",
             NAME ":2:1: (root): a second YAML document starts here; expected exactly one document");
}

static void test_yaml_syntax(void **state) {
  (void)state;
  EXPECT_ERR("server: [\nsession_pools: []\n", NAME ":3:1: YAML syntax error:", "expected well-formed YAML");
  EXPECT_ERR("server:\n  a: 1\n b: 2\n", NAME ":3:", "YAML syntax error");
  EXPECT_ERR("session_pools: *nope\n", NAME ":1:16: YAML syntax error: found undefined alias");
  EXPECT_ERR("session_pools: []\n\tserver: {}\n", NAME ":2:1: YAML syntax error");
  EXPECT_ERR("session_pools: []\nx: \xff\xfe\n", NAME ":2:4: YAML syntax error:", "offset 21");
  expect_errn("session_pools: []\0\n", 19, SIP_INVALID_ARGUMENT, NAME ":1:18: YAML syntax error",
              NULL);
  EXPECT_ERR("session_pools: []\n---\n: : [\n", "YAML syntax error");
}

static void test_aliases(void **state) {
  (void)state;
  /* Self-referencing anchors must end in an error, not a loop. */
  EXPECT_ERR("session_pools: &a [*a]\n", "session_pools[0]: is a list");
  EXPECT_ERR("server: &s {endpoints: *s}\nsession_pools: []\n", "server.endpoints: is a map");
  EXPECT_ERR("&r {server: *r, session_pools: []}\n", "server.server: unknown key");
  EXPECT_ERR(POOL("    backend_options: &o {a: *o}\n"), "session_pools[0].backend_options.a: is a map");
  /* Shared (non-cyclic) aliases are ordinary values. */
  sip__config_t *cfg = load_ok("session_pools:\n"
                              "  - {name: a, model_path: a.onnx, resource_quota: &q {max_memory_mb: 5}}\n"
                              "  - {name: b, model_path: b.onnx, resource_quota: *q}\n");
  assert_int_equal(cfg->pools[1].max_memory_mb, 5);
  sip__config_free(cfg);
}

static void test_base_dir(void **state) {
  (void)state;
  const char *yaml = "session_pools:\n  - {name: a, model_path: m/a.onnx}\n  - {name: b, model_path: /abs/b.onnx}\n";
  sip__config_t *cfg = NULL;
  assert_null(sip__config_load_string(yaml, strlen(yaml), NULL, NULL, sip__backend_catalog(), &cfg));
  assert_string_equal(cfg->path, "<string>");
  assert_string_equal(cfg->pools[0].model_path, "m/a.onnx");
  assert_string_equal(cfg->pools[1].model_path, "/abs/b.onnx");
  sip__config_free(cfg);
  assert_null(sip__config_load_string(yaml, strlen(yaml), "x", "/etc/sip/", sip__backend_catalog(), &cfg));
  assert_string_equal(cfg->pools[0].model_path, "/etc/sip/m/a.onnx");
  sip__config_free(cfg);
}

static void test_load_file(void **state) {
  (void)state;
  char dir[] = "/tmp/sip_test_config_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[512], mdir[512];
  snprintf(path, sizeof path, "%s/cfg.yaml", dir);
  snprintf(mdir, sizeof mdir, "%s/resnet.v2", dir);
  assert_int_equal(mkdir(mdir, 0700), 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("session_pools:\n  - {name: a, model_path: models/a.onnx}\n  - {name: b, model_path: resnet.v2}\n", f);
  fclose(f);

  sip__config_t *cfg = NULL;
  sip_error_t *err = sip__config_load_file(path, sip__backend_catalog(), &cfg);
  if (err) fail_msg("%s", sip_error_message(err));
  char want[600];
  snprintf(want, sizeof want, "%s/models/a.onnx", dir);
  assert_string_equal(cfg->path, path);
  assert_string_equal(cfg->pools[0].model_path, want);
  /* a directory with a dot in its name, recognised because it exists */
  assert_string_equal(cfg->pools[1].backend, "onnxruntime");
  sip__config_free(cfg);

  f = fopen(path, "w");
  fputs("session_pools: []\nserver: {log_level: loud}\n", f);
  fclose(f);
  err = sip__config_load_file(path, sip__backend_catalog(), &cfg);
  assert_non_null(err);
  snprintf(want, sizeof want, "%s:2:21: server.log_level:", path);
  assert_non_null(strstr(sip_error_message(err), want));
  sip_error_free(err);

  snprintf(want, sizeof want, "%s/missing.yaml", dir);
  err = sip__config_load_file(want, sip__backend_catalog(), &cfg);
  assert_int_equal(sip_error_code(err), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(err), want));
  assert_non_null(strstr(sip_error_message(err), "No such file or directory"));
  assert_null(cfg);
  sip_error_free(err);

  err = sip__config_load_file(mdir, sip__backend_catalog(), &cfg);
  assert_int_equal(sip_error_code(err), SIP_NOT_FOUND);
  assert_non_null(strstr(sip_error_message(err), "Is a directory"));
  sip_error_free(err);

  unlink(path);
  rmdir(mdir);
  rmdir(dir);
}

static void test_alloc_failures(void **state) {
  (void)state;
  const char *yaml = "server: {endpoints: [\"tcp://h:1\", \"ipc://x\"], max_frame_bytes: 1MiB}\n"
                     "session_pools:\n"
                     "  - {name: a, model_path: a.onnx, backend_options: {x: 1, y: 2}}\n"
                     "  - {name: b, backend: builtin, priority: low}\n";
  int ok = 0;
  for (long n = 0; n < 1000 && !ok; n++) {
    sip__config_t *cfg = NULL;
    sip__alloc_fail_after(n);
    sip_error_t *err = sip__config_load_string(yaml, strlen(yaml), NAME, BASE, sip__backend_catalog(), &cfg);
    sip__alloc_fail_after(-1);
    if (err) {
      assert_int_equal(sip_error_code(err), SIP_RESOURCE_EXHAUSTED);
      assert_null(cfg);
      sip_error_free(err);
    } else {
      ok = 1;
      assert_string_equal(cfg->pools[0].backend_options[1].value, "2");
      sip__config_free(cfg);
    }
  }
  assert_true(ok);
}

/* server.http, http_max_body_bytes, http_threads (the HTTP front-end). */
static void test_http_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok("session_pools: []\n");
  assert_null(cfg->http);
  assert_int_equal(cfg->http_max_body_bytes, (size_t)64 << 20);
  assert_int_equal(cfg->http_threads, 2);
  sip__config_free(cfg);

  static const char *const good[] = {"127.0.0.1:8000", "localhost:0", "\"[::1]:65535\"",
                                     "0.0.0.0:80", "my-host.example:8080"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char yaml[256], want[64];
    snprintf(yaml, sizeof yaml, "server: {http: %s}\nsession_pools: []\n", good[i]);
    cfg = load_ok(yaml);
    snprintf(want, sizeof want, "%s", good[i][0] == '"' ? "[::1]:65535" : good[i]);
    assert_string_equal(cfg->http, want);
    sip__config_free(cfg);
  }
  cfg = load_ok("server: {http: \"127.0.0.1:0\", http_max_body_bytes: 4KiB, http_threads: 8}\n"
                "session_pools: []\n");
  assert_int_equal(cfg->http_max_body_bytes, 4096);
  assert_int_equal(cfg->http_threads, 8);
  sip__config_free(cfg);

  EXPECT_ERR("server: {http: \"127.0.0.1\"}\nsession_pools: []\n",
             NAME ":1:16: server.http: \"127.0.0.1\" is not valid", "expected HOST:PORT");
  EXPECT_ERR("server: {http: \"127.0.0.1:65536\"}\nsession_pools: []\n", "server.http",
             "is not valid; expected HOST:PORT (port 0..65535");
  EXPECT_ERR("server: {http: \"tcp://127.0.0.1:80\"}\nsession_pools: []\n", "server.http",
             "is not valid");
  EXPECT_ERR("server: {http: \"::1:80\"}\nsession_pools: []\n", "server.http", "is not valid");
  EXPECT_ERR("server: {http: }\nsession_pools: []\n", "server.http: has no value");
  EXPECT_ERR("server: {http: [a]}\nsession_pools: []\n", "server.http: is a list");
  EXPECT_ERR("server: {http_max_body_bytes: 1023}\nsession_pools: []\n",
             "server.http_max_body_bytes: \"1023\" is out of range", "1024..4294967296");
  EXPECT_ERR("server: {http_max_body_bytes: 5GiB}\nsession_pools: []\n",
             "server.http_max_body_bytes", "out of range");
  EXPECT_ERR("server: {http_threads: 0}\nsession_pools: []\n",
             "server.http_threads: 0 is out of range; expected an integer 1..64");
  EXPECT_ERR("server: {http_threads: 65}\nsession_pools: []\n", "server.http_threads",
             "out of range");
}

/* server.grpc, grpc_max_message_bytes, grpc_threads (the gRPC front-end):
 * the address takes the HTTP address's grammar. */
static void test_grpc_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok("session_pools: []\n");
  assert_null(cfg->grpc);
  assert_int_equal(cfg->grpc_max_message_bytes, (size_t)64 << 20);
  assert_int_equal(cfg->grpc_threads, 2);
  sip__config_free(cfg);
  cfg = load_ok("server: {grpc: \"[::1]:0\", grpc_max_message_bytes: 1MiB, grpc_threads: 4}\n"
                "session_pools: []\n");
  assert_string_equal(cfg->grpc, "[::1]:0");
  assert_int_equal(cfg->grpc_max_message_bytes, (size_t)1 << 20);
  assert_int_equal(cfg->grpc_threads, 4);
  sip__config_free(cfg);
  EXPECT_ERR("server: {grpc: \"localhost\"}\nsession_pools: []\n",
             NAME ":1:16: server.grpc: \"localhost\" is not valid", "expected HOST:PORT");
  EXPECT_ERR("server: {grpc: \"grpc://h:1\"}\nsession_pools: []\n", "server.grpc",
             "is not valid");
  EXPECT_ERR("server: {grpc_max_message_bytes: 2GiB}\nsession_pools: []\n",
             "server.grpc_max_message_bytes", "out of range");
  EXPECT_ERR("server: {grpc_threads: 0}\nsession_pools: []\n",
             "server.grpc_threads: 0 is out of range; expected an integer 1..64");
}

static void test_misc(void **state) {
  (void)state;
  sip__config_free(NULL);
  assert_string_equal(sip__priority_name(SIP__PRIO_HIGH), "high");
  assert_string_equal(sip__priority_name(SIP__PRIO_MEDIUM), "medium");
  assert_string_equal(sip__priority_name(SIP__PRIO_LOW), "low");
  assert_string_equal(sip__priority_name(SIP__PRIO_LEVELS), "unknown");
  sip_error_t *err = sip__config_load_string("", 0, NULL, NULL, sip__backend_catalog(), NULL);
  assert_int_equal(sip_error_code(err), SIP_INVALID_ARGUMENT);
  sip_error_free(err);
  /* Long and binary values are quoted, escaped and cut in messages. */
  EXPECT_ERR(POOL("    priority: \"\\e\\x01" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n"),
             "\"\\x1b\\x01aaaa", "aaa...\" is not valid");
}

/* ---- scheduling keys: dynamic_batching, queue, batch_strategies, execution_slots ---- */

static void test_scheduling_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(
      "server: {execution_slots: 3}\n" POOL(
          "    dynamic_batching: {max_batch_size: 8, max_queue_delay_us: 500, "
          "preferred_batch_sizes: [2, 4, 8], padding_strategy: replicate_last}\n"
          "    queue: {max_size: 100, default_timeout_ms: 250, timeout_action: delay, "
          "ageing_ms: 0}\n"
          "    batch_strategies:\n"
          "      low: {max_batch: 1, timeout: 0}\n"
          "      medium: {max_batch: 4, timeout: 5}\n"
          "      high: {max_batch: 8, timeout: 60000}\n"
          "      rate_thresholds: [20, 100.5]\n"));
  assert_int_equal(cfg->execution_slots, 3);
  sip__pool_config_t *p = &cfg->pools[0];
  assert_int_equal(p->max_batch_size, 8);
  assert_int_equal(p->max_queue_delay_us, 500);
  assert_int_equal(p->n_preferred, 3);
  assert_int_equal(p->preferred_batch_sizes[0], 2);
  assert_int_equal(p->preferred_batch_sizes[1], 4);
  assert_int_equal(p->preferred_batch_sizes[2], 8); /* = max_batch_size is allowed */
  assert_int_equal(p->padding_strategy, SIP__PAD_REPLICATE_LAST);
  assert_int_equal(p->queue_max_size, 100);
  assert_int_equal(p->default_timeout_ms, 250);
  assert_int_equal(p->timeout_action, SIP__TIMEOUT_DELAY);
  assert_int_equal(p->ageing_ms, 0);
  assert_int_equal(p->batch_levels[0].max_batch, 1);
  assert_int_equal(p->batch_levels[0].timeout_ms, 0);
  assert_int_equal(p->batch_levels[1].max_batch, 4);
  assert_int_equal(p->batch_levels[1].timeout_ms, 5);
  assert_int_equal(p->batch_levels[2].max_batch, 8); /* = max_batch_size is allowed */
  assert_int_equal(p->batch_levels[2].timeout_ms, 60000);
  assert_true(p->rate_thresholds[0] == 20.0 && p->rate_thresholds[1] == 100.5);
  sip__config_free(cfg);

  /* Defaults: no batching, a queue of 10000 without deadlines, reject,
   * ageing 2 s, no elastic levels, one execution slot per core. */
  cfg = load_ok(POOL(""));
  p = &cfg->pools[0];
  assert_int_equal(cfg->execution_slots, 0);
  assert_int_equal(p->max_batch_size, 0);
  assert_int_equal(p->max_queue_delay_us, 0);
  assert_int_equal(p->n_preferred, 0);
  assert_int_equal(p->padding_strategy, SIP__PAD_NONE);
  assert_int_equal(p->queue_max_size, 10000);
  assert_int_equal(p->default_timeout_ms, 0);
  assert_int_equal(p->timeout_action, SIP__TIMEOUT_REJECT);
  assert_int_equal(p->ageing_ms, 2000);
  for (int i = 0; i < 3; i++) assert_int_equal(p->batch_levels[i].max_batch, 0);
  sip__config_free(cfg);

  /* Sections with only their required keys (or none) take the defaults. */
  cfg = load_ok(POOL("    dynamic_batching: {max_batch_size: 1, padding_strategy: zero}\n"
                     "    queue: {}\n"));
  p = &cfg->pools[0];
  assert_int_equal(p->max_batch_size, 1);
  assert_int_equal(p->max_queue_delay_us, 0);
  assert_int_equal(p->n_preferred, 0);
  assert_int_equal(p->padding_strategy, SIP__PAD_ZERO);
  assert_int_equal(p->queue_max_size, 10000);
  assert_int_equal(p->timeout_action, SIP__TIMEOUT_REJECT);
  assert_int_equal(p->ageing_ms, 2000);
  sip__config_free(cfg);
  cfg = load_ok(POOL("    dynamic_batching: {max_batch_size: 65536, max_queue_delay_us: 60000000, "
                     "padding_strategy: none}\n"
                     "    queue: {max_size: 100000000, default_timeout_ms: 86400000, "
                     "timeout_action: reject, ageing_ms: 86400000}\n"));
  p = &cfg->pools[0];
  assert_int_equal(p->max_batch_size, 65536);
  assert_int_equal(p->max_queue_delay_us, 60000000);
  assert_int_equal(p->padding_strategy, SIP__PAD_NONE);
  assert_int_equal(p->queue_max_size, 100000000);
  assert_int_equal(p->default_timeout_ms, 86400000);
  assert_int_equal(p->ageing_ms, 86400000);
  sip__config_free(cfg);

  /* batch_strategies alone: batching up to the largest level, default
   * thresholds [50, 200], level timeouts 0. */
  cfg = load_ok(POOL("    batch_strategies: {low: {max_batch: 2}, medium: {max_batch: 16}, "
                     "high: {max_batch: 4}}\n"));
  p = &cfg->pools[0];
  assert_int_equal(p->max_batch_size, 16);
  assert_int_equal(p->batch_levels[0].max_batch, 2);
  assert_int_equal(p->batch_levels[0].timeout_ms, 0);
  assert_int_equal(p->batch_levels[2].max_batch, 4);
  assert_true(p->rate_thresholds[0] == 50.0 && p->rate_thresholds[1] == 200.0);
  sip__config_free(cfg);

  cfg = load_ok("server: {execution_slots: 1024}\nsession_pools: []\n");
  assert_int_equal(cfg->execution_slots, 1024);
  sip__config_free(cfg);
}

static void test_scheduling_errors(void **state) {
  (void)state;
  /* dynamic_batching */
  EXPECT_ERR(POOL("    dynamic_batching: {max_queue_delay_us: 5}\n"),
             NAME ":4:23: session_pools[0].dynamic_batching.max_batch_size: missing",
             "expected an integer 1..65536");
  EXPECT_ERR(POOL("    dynamic_batching: {}\n"), "dynamic_batching.max_batch_size: missing");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 0}\n"),
             "dynamic_batching.max_batch_size: 0 is out of range; expected an integer 1..65536");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 65537}\n"),
             "dynamic_batching.max_batch_size: 65537 is out of range");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: x}\n"),
             "dynamic_batching.max_batch_size: \"x\" is not an integer");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, max_queue_delay_us: -1}\n"),
             "dynamic_batching.max_queue_delay_us: -1 is out of range",
             "expected an integer 0..60000000");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, max_queue_delay_us: 60000001}\n"),
             "dynamic_batching.max_queue_delay_us: 60000001 is out of range");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, padding_strategy: pad}\n"),
             "dynamic_batching.padding_strategy: \"pad\" is not valid",
             "expected one of none, replicate_last, zero");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, max_delay: 1}\n"),
             "dynamic_batching.max_delay: unknown key",
             "max_batch_size, max_queue_delay_us, preferred_batch_sizes, padding_strategy");
  EXPECT_ERR(POOL("    dynamic_batching: 8\n"), "session_pools[0].dynamic_batching: is a scalar",
             "expected a map");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, max_batch_size: 4}\n"),
             "dynamic_batching.max_batch_size: duplicate key");

  /* preferred_batch_sizes */
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [2, 16]}\n"),
             "dynamic_batching.preferred_batch_sizes: 16 is larger than max_batch_size 8",
             "expected sizes 1..8");
  /* ...whichever key comes first. */
  EXPECT_ERR(POOL("    dynamic_batching: {preferred_batch_sizes: [9], max_batch_size: 8}\n"),
             "preferred_batch_sizes: 9 is larger than max_batch_size 8");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [4, 2]}\n"),
             NAME ":4:70: session_pools[0].dynamic_batching.preferred_batch_sizes[1]",
             "is not larger than the item before it",
             "expected a list of up to 16 increasing batch sizes, each 1..max_batch_size");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [2, 2]}\n"),
             "preferred_batch_sizes[1]", "is not larger than the item before it");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [1, 4, 3]}\n"),
             "preferred_batch_sizes[2]", "is not larger");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: []}\n"),
             "preferred_batch_sizes: has 0 items", "increasing batch sizes");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [0]}\n"),
             "preferred_batch_sizes[0]", "is not a positive integer");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [-2]}\n"),
             "preferred_batch_sizes[0]", "is not a positive integer");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [1.5]}\n"),
             "preferred_batch_sizes[0]", "is not a positive integer");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [\"2\"]}\n"),
             "preferred_batch_sizes[0]", "is not a number");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [[2]]}\n"),
             "preferred_batch_sizes[0]");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: 4}\n"),
             "preferred_batch_sizes: is a scalar", "expected a list");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 20, preferred_batch_sizes: "
                  "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}\n"),
             "preferred_batch_sizes: has 17 items", "up to 16");

  /* queue */
  EXPECT_ERR(POOL("    queue: {max_size: -1}\n"),
             "session_pools[0].queue.max_size: -1 is out of range",
             "expected an integer 0..100000000");
  EXPECT_ERR(POOL("    queue: {max_size: 100000001}\n"), "queue.max_size", "out of range");
  EXPECT_ERR(POOL("    queue: {default_timeout_ms: 86400001}\n"),
             "queue.default_timeout_ms: 86400001 is out of range", "0..86400000");
  EXPECT_ERR(POOL("    queue: {default_timeout_ms: -5}\n"), "queue.default_timeout_ms",
             "out of range");
  EXPECT_ERR(POOL("    queue: {timeout_action: drop}\n"),
             "queue.timeout_action: \"drop\" is not valid", "expected one of reject, delay");
  EXPECT_ERR(POOL("    queue: {ageing_ms: -1}\n"), "queue.ageing_ms: -1 is out of range",
             "0..86400000");
  EXPECT_ERR(POOL("    queue: {ageing_ms: 86400001}\n"), "queue.ageing_ms", "out of range");
  EXPECT_ERR(POOL("    queue: {max_size: 1, max_size: 2}\n"), "queue.max_size: duplicate key");
  EXPECT_ERR(POOL("    queue: {timeout_ms: 1}\n"), "queue.timeout_ms: unknown key",
             "max_size, default_timeout_ms, timeout_action, ageing_ms");
  EXPECT_ERR(POOL("    queue: [1]\n"), "session_pools[0].queue: is a list", "expected a map");

  /* batch_strategies */
#define LEVELS "low: {max_batch: 1}, medium: {max_batch: 2}, high: {max_batch: 4}"
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 1}, medium: {max_batch: 2}}\n"),
             "session_pools[0].batch_strategies.high: missing", "expected a map with keys: "
                                                                "max_batch, timeout");
  EXPECT_ERR(POOL("    batch_strategies: {medium: {max_batch: 2}, high: {max_batch: 4}}\n"),
             "batch_strategies.low: missing");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 2}, high: {max_batch: 4}}\n"),
             "batch_strategies.medium: missing");
  EXPECT_ERR(POOL("    batch_strategies: {}\n"), "batch_strategies.", "missing");
  EXPECT_ERR(POOL("    batch_strategies: {low: {timeout: 1}, medium: {max_batch: 2}, high: "
                  "{max_batch: 4}}\n"),
             "batch_strategies.low.max_batch: missing", "expected an integer 1..65536");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 1}, medium: {max_batch: 2}, high: "
                  "{timeout: 4}}\n"),
             "batch_strategies.high.max_batch: missing");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 0}, medium: {max_batch: 2}, high: "
                  "{max_batch: 4}}\n"),
             "batch_strategies.low.max_batch: 0 is out of range");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 1, timeout: 60001}, medium: "
                  "{max_batch: 2}, high: {max_batch: 4}}\n"),
             "batch_strategies.low.timeout: 60001 is out of range", "0..60000");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 1}, medium: {max_batch: 2, wait: 1}, "
                  "high: {max_batch: 4}}\n"),
             "batch_strategies.medium.wait: unknown key", "max_batch, timeout");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", extreme: {max_batch: 8}}\n"),
             "batch_strategies.extreme: unknown key",
             "low, medium, high, rate_thresholds");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [100, 20]}\n"),
             "batch_strategies.rate_thresholds[1]", "is not larger than the item before it",
             "expected two increasing arrival rates");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [10, 10]}\n"),
             "batch_strategies.rate_thresholds[1]", "is not larger");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [20]}\n"),
             "batch_strategies.rate_thresholds: has 1 items", "two increasing");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [20, 30, 40]}\n"),
             "batch_strategies.rate_thresholds: has 3 items");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: []}\n"),
             "batch_strategies.rate_thresholds: has 0 items");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [0, 10]}\n"),
             "batch_strategies.rate_thresholds[0]", "is not a positive number");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [x, 10]}\n"),
             "batch_strategies.rate_thresholds[0]", "is not a positive number");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: 50}\n"),
             "batch_strategies.rate_thresholds: is a scalar");
  /* A level may not batch more than dynamic_batching allows. */
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 2}\n"
                  "    batch_strategies: {" LEVELS "}\n"),
             NAME ":5:23: session_pools[0].batch_strategies",
             "max_batch 4 is larger than dynamic_batching.max_batch_size 2",
             "expected max_batch <= max_batch_size");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 9}, medium: {max_batch: 2}, high: "
                  "{max_batch: 4}}\n"
                  "    dynamic_batching: {max_batch_size: 8}\n"),
             "max_batch 9 is larger than dynamic_batching.max_batch_size 8");
#undef LEVELS

  /* server.execution_slots */
  EXPECT_ERR("server: {execution_slots: -1}\nsession_pools: []\n",
             NAME ":1:27: server.execution_slots: -1 is out of range",
             "expected an integer 0..1024");
  EXPECT_ERR("server: {execution_slots: 1025}\nsession_pools: []\n",
             "server.execution_slots: 1025 is out of range");
  EXPECT_ERR("server: {execution_slots: two}\nsession_pools: []\n",
             "server.execution_slots: \"two\" is not an integer");
  EXPECT_ERR("server: {execution_slots: [1]}\nsession_pools: []\n",
             "server.execution_slots: is a list");

  /* resource_quota bounds used by the arbiter and the memory check. */
  EXPECT_ERR(POOL("    resource_quota: {max_compute_percent: 0}\n"),
             "resource_quota.max_compute_percent: 0 is out of range", "1..100");
  EXPECT_ERR(POOL("    resource_quota: {max_compute_percent: 101}\n"),
             "resource_quota.max_compute_percent: 101 is out of range");
  EXPECT_ERR(POOL("    resource_quota: {max_memory_mb: 0}\n"),
             "resource_quota.max_memory_mb: 0 is out of range", "1..1048576");
}

static int has_cpu(const sip__pool_config_t *p, int k) { return (int)(p->cpu_mask[k / 64] >> (k % 64) & 1); }

static void test_cpu_affinity(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL("    cpu_affinity: [0, 2-3, 1023]\n"));
  const sip__pool_config_t *p = &cfg->pools[0];
  assert_int_equal(p->n_cpus, 4);
  assert_true(has_cpu(p, 0) && has_cpu(p, 2) && has_cpu(p, 3) && has_cpu(p, 1023));
  assert_false(has_cpu(p, 1) || has_cpu(p, 4) || has_cpu(p, 64));
  sip__config_free(cfg);
  cfg = load_ok(POOL("    cpu_affinity: \"1, 4-5,64\"\n"));
  p = &cfg->pools[0];
  assert_int_equal(p->n_cpus, 4);
  assert_true(has_cpu(p, 1) && has_cpu(p, 4) && has_cpu(p, 5) && has_cpu(p, 64));
  sip__config_free(cfg);
  cfg = load_ok(POOL("    cpu_affinity: 3\n"));
  assert_int_equal(cfg->pools[0].n_cpus, 1);
  assert_true(has_cpu(&cfg->pools[0], 3));
  sip__config_free(cfg);
  cfg = load_ok(POOL(""));
  assert_int_equal(cfg->pools[0].n_cpus, 0); /* absent: wherever the OS runs them */
  sip__config_free(cfg);

  EXPECT_ERR(POOL("    cpu_affinity: [0, 0]\n"),
             NAME ":4:23: session_pools[0].cpu_affinity[1]: names CPU 0 twice",
             "expected logical CPU numbers 0..1023");
  EXPECT_ERR(POOL("    cpu_affinity: \"0-3,2\"\n"), "cpu_affinity: names CPU 2 twice");
  EXPECT_ERR(POOL("    cpu_affinity: [3-1]\n"),
             "cpu_affinity[0]: \"3-1\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: [-1]\n"), "\"-1\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: [1024]\n"), "\"1024\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: [0-1024]\n"), "\"0-1024\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: \"0,,1\"\n"), "\"\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: [a]\n"), "\"a\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: []\n"), "cpu_affinity: is an empty list");
  EXPECT_ERR(POOL("    cpu_affinity: {cpu: 1}\n"), "cpu_affinity: is a map",
             "expected logical CPU numbers");
  EXPECT_ERR(POOL("    cpu_affinity: [[1]]\n"), "cpu_affinity[0]: is a list");
  EXPECT_ERR(POOL("    cpu_affinity:\n"), "cpu_affinity: has no value");
}

/* Pipeline maps are parsed by hand: a repeated key is an error, not a
 * silent overwrite (the fuzzer found the second early_exit_condition
 * leaking the first). */
static void test_pipeline_duplicate_keys(void **state) {
  (void)state;
  const char *base = "session_pools:\n  - {name: p, backend: builtin}\npipeline_sessions:\n";
  char yaml[512];
  snprintf(yaml, sizeof yaml,
           "%s  - name: x\n    early_exit_condition: \"len(a.output) == 0\"\n"
           "    stages: [{name: a, pool: p}]\n    early_exit_condition: \"len(a.output) > 1\"\n",
           base);
  EXPECT_ERR(yaml, NAME ":7:5: pipeline_sessions[0].early_exit_condition: duplicate key (first at "
             "line 5); expected each key at most once");
  snprintf(yaml, sizeof yaml, "%s  - {name: x, stages: [{name: a, pool: p}], name: y}\n", base);
  EXPECT_ERR(yaml, "pipeline_sessions[0].name: duplicate key (first at line 4)");
  snprintf(yaml, sizeof yaml,
           "%s  - {name: x, outputs: [a.output], stages: [{name: a, pool: p}], outputs: [a.output]}\n",
           base);
  EXPECT_ERR(yaml, "pipeline_sessions[0].outputs: duplicate key");
  snprintf(yaml, sizeof yaml,
           "%s  - {name: x, stages: [{name: a, pool: p, input_mapping: {input: pipeline.a, "
           "input: pipeline.b}}]}\n",
           base);
  EXPECT_ERR(yaml, "stages[0].input_mapping.input: duplicate key",
             "expected each input at most once");
  EXPECT_ERR(POOL("    preprocess: {resize: {size: \"4,4\", size: \"8,8\"}}\n"),
             "preprocess.resize.size: duplicate key", "expected each option at most once");
}

/* Pools compared for a config reload: equal settings whatever the line or
 * the key order; any one setting changed makes them differ. */
static void test_pool_same(void **state) {
  (void)state;
  const char *base =
      "session_pools:\n  - name: a\n    model_path: a.onnx\n    pool_size: 2\n"
      "    backend_options: {x: '1'}\n    queue: {max_size: 8}\n";
  const char *moved =
      "server: {log_level: warn}\n\nsession_pools:\n  - queue: {max_size: 8}\n"
      "    backend_options: {x: '1'}\n    pool_size: 2\n    model_path: a.onnx\n    name: a\n";
  const char *changed[] = {
      "session_pools:\n  - {name: a, model_path: a.onnx, pool_size: 3, backend_options: {x: '1'}, "
      "queue: {max_size: 8}}\n",
      "session_pools:\n  - {name: a, model_path: b.onnx, pool_size: 2, backend_options: {x: '1'}, "
      "queue: {max_size: 8}}\n",
      "session_pools:\n  - {name: a, model_path: a.onnx, pool_size: 2, backend_options: {x: '2'}, "
      "queue: {max_size: 8}}\n",
      "session_pools:\n  - {name: a, model_path: a.onnx, pool_size: 2, backend_options: {x: '1'}, "
      "queue: {max_size: 9}}\n",
      "session_pools:\n  - {name: a, model_path: a.onnx, pool_size: 2, backend_options: {x: '1'}, "
      "queue: {max_size: 8}, priority: high}\n",
  };
  sip__config_t *a = load_ok(base), *b = load_ok(moved);
  assert_true(sip__config_pool_same(&a->pools[0], &b->pools[0]));
  assert_true(sip__config_pipelines_same(a, b));
  sip__config_free(b);
  for (size_t i = 0; i < sizeof changed / sizeof *changed; i++) {
    b = load_ok(changed[i]);
    if (sip__config_pool_same(&a->pools[0], &b->pools[0])) fail_msg("same: %s", changed[i]);
    sip__config_free(b);
  }
  sip__config_free(a);
}

static void test_pipelines_same(void **state) {
  (void)state;
  const char *pools = "session_pools:\n  - {name: p, model_path: p.onnx}\n"
                      "  - {name: q, model_path: q.onnx}\n";
  char one[512], two[512], three[512];
  snprintf(one, sizeof one, "%spipeline_sessions:\n  - name: pl\n    stages:\n"
           "      - {name: s, pool: p}\n", pools);
  snprintf(two, sizeof two, "%spipeline_sessions:\n  - name: pl\n    stages:\n"
           "      - {name: s, pool: q}\n", pools);
  snprintf(three, sizeof three, "%spipeline_sessions:\n  - name: pl\n    stages:\n"
           "      - {name: s, pool: p, when: 'sum(pipeline.x) > 0'}\n", pools);
  sip__config_t *a = load_ok(one), *a2 = load_ok(one), *b = load_ok(two), *c = load_ok(three),
                *none = load_ok(pools);
  assert_true(sip__config_pipelines_same(a, a2));
  assert_false(sip__config_pipelines_same(a, b));
  assert_false(sip__config_pipelines_same(a, c));
  assert_false(sip__config_pipelines_same(a, none));
  sip__config_free(a);
  sip__config_free(a2);
  sip__config_free(b);
  sip__config_free(c);
  sip__config_free(none);
}

static void test_drain_and_state_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok("session_pools: []\n");
  assert_int_equal(cfg->drain_timeout_ms, 30000);
  assert_null(cfg->state_dir);
  sip__config_free(cfg);
  cfg = load_ok("server: {drain_timeout_ms: 0, state_dir: st}\nsession_pools: []\n");
  assert_int_equal(cfg->drain_timeout_ms, 0);
  assert_string_equal(cfg->state_dir, BASE "/st"); /* relative to the config file */
  sip__config_free(cfg);
  EXPECT_ERR("server: {drain_timeout_ms: -1}\nsession_pools: []\n", "drain_timeout_ms");
  EXPECT_ERR("server: {drain_timeout_ms: 3600001}\nsession_pools: []\n", "drain_timeout_ms");
  EXPECT_ERR("server: {state_dir: [a]}\nsession_pools: []\n", "state_dir");
}

/* sla (per pool) and alerts (top level): values, defaults, and the errors
 * of docs/sla.md. */
static void test_sla_and_alerts_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL("    sla: {latency_p99_ms: 2.5, availability: 0.999, "
                                    "min_throughput_rps: 20, window_s: 5, horizon_windows: 12}\n"
                                    "  - name: q\n    model_path: m.onnx\n"
                                    "    sla: {availability: \"99.5%\"}\n"
                                    "  - name: r\n    model_path: m.onnx\n"));
  const sip__sla_config_t *a = &cfg->pools[0].sla, *b = &cfg->pools[1].sla, *c = &cfg->pools[2].sla;
  assert_int_equal(a->enabled, 1);
  assert_true(a->latency_p99_ms == 2.5 && a->availability == 0.999 && a->min_throughput_rps == 20);
  assert_int_equal(a->window_s, 5);
  assert_int_equal(a->horizon_windows, 12);
  assert_int_equal(b->enabled, 1);
  assert_true(b->availability > 0.99499 && b->availability < 0.99501); /* a percent, as a fraction */
  assert_true(b->latency_p99_ms == 0 && b->min_throughput_rps == 0);     /* not set */
  assert_int_equal(b->window_s, 10);                                    /* defaults */
  assert_int_equal(b->horizon_windows, 60);
  assert_int_equal(c->enabled, 0);
  /* alerts defaults */
  assert_int_equal(cfg->alerts.warning_after, 1);
  assert_int_equal(cfg->alerts.critical_after, 3);
  assert_int_equal(cfg->alerts.resolve_after, 2);
  assert_int_equal(cfg->alerts.n_webhooks, 0);
  assert_int_equal(cfg->alerts.timeout_ms, 2000);
  assert_int_equal(cfg->alerts.retries, 3);
  assert_int_equal(cfg->alerts.backoff_ms, 500);
  assert_int_equal(cfg->alerts.queue_size, 256);
  /* A changed target is a changed pool (a reload replaces it). */
  sip__pool_config_t changed = cfg->pools[0];
  assert_true(sip__config_pool_same(&cfg->pools[0], &changed));
  changed.sla.latency_p99_ms = 3;
  assert_false(sip__config_pool_same(&cfg->pools[0], &changed));
  sip__config_free(cfg);

  cfg = load_ok("alerts:\n  warning_after: 2\n  critical_after: 2\n  resolve_after: 5\n"
                "  webhooks: [\"http://127.0.0.1:9/hook\", \"https://example.org/a?b=c\"]\n"
                "  timeout_ms: 100\n  retries: 0\n  backoff_ms: 10\n  queue_size: 4\n"
                "session_pools: []\n");
  assert_int_equal(cfg->alerts.warning_after, 2);
  assert_int_equal(cfg->alerts.critical_after, 2);
  assert_int_equal(cfg->alerts.resolve_after, 5);
  assert_int_equal(cfg->alerts.n_webhooks, 2);
  assert_string_equal(cfg->alerts.webhooks[0], "http://127.0.0.1:9/hook");
  assert_string_equal(cfg->alerts.webhooks[1], "https://example.org/a?b=c");
  assert_int_equal(cfg->alerts.retries, 0);
  assert_int_equal(cfg->alerts.queue_size, 4);
  sip__config_free(cfg);

  /* sla errors */
  EXPECT_ERR(POOL("    sla: {window_s: 5}\n"), NAME ":4:10: session_pools[0].sla: sets no target",
             "expected at least one of latency_p99_ms, availability, min_throughput_rps");
  EXPECT_ERR(POOL("    sla:\n"), "session_pools[0].sla: sets no target");
  EXPECT_ERR(POOL("    sla: {availability: 99.9}\n"),
             "session_pools[0].sla.availability: \"99.9\" is above 1: availability is a fraction "
             "(0.999) or a percent with a % sign (\"99.9%\")");
  EXPECT_ERR(POOL("    sla: {availability: 100.5%}\n"), "sla.availability: \"100.5%\" is above 100%");
  EXPECT_ERR(POOL("    sla: {availability: 0}\n"), "sla.availability: \"0\" is not above 0");
  EXPECT_ERR(POOL("    sla: {availability: high}\n"), "sla.availability: \"high\" is not a number",
             "expected a fraction of requests 0 < x <= 1");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: -5}\n"), "sla.latency_p99_ms: \"-5\" is not above 0",
             "expected a number of milliseconds > 0");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: 50ms}\n"), "sla.latency_p99_ms: \"50ms\" is not a number");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: .nan}\n"), "sla.latency_p99_ms: \".nan\" is not a number");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: 0x10}\n"), "sla.latency_p99_ms: \"0x10\" is not a number");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: [5]}\n"), "sla.latency_p99_ms: is a list");
  EXPECT_ERR(POOL("    sla: {min_throughput_rps: 0}\n"), "sla.min_throughput_rps: \"0\" is not above 0",
             "requests per second");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: 5, window_s: 0}\n"), "sla.window_s",
             "an integer 1..86400");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: 5, horizon_windows: 0}\n"), "sla.horizon_windows");
  EXPECT_ERR(POOL("    sla: {latency_p99: 5}\n"), "sla.latency_p99: unknown key",
             "latency_p99_ms, availability, min_throughput_rps, window_s, horizon_windows");
  /* alerts errors: the block's body, and what the message says */
  static const struct {
    const char *body, *want;
  } bad_alerts[] = {
      {"warning_after: 3, critical_after: 2",
       "alerts.critical_after: 2 is below warning_after 3; expected critical_after >= "
       "warning_after"},
      {"resolve_after: 0", "alerts.resolve_after: 0 is out of range; expected an integer 1..10000"},
      {"webhooks: \"http://a/b\"", "alerts.webhooks: is a scalar; expected a list of up to 8 URLs"},
      {"webhooks: [\"ftp://a/b\"]",
       "alerts.webhooks[0]: \"ftp://a/b\" is not an http:// or https:// URL"},
      {"webhooks: [\"http://\"]", "alerts.webhooks[0]: \"http://\" is not an http:// or https://"},
      {"webhooks: [\"http://a b/\"]", "alerts.webhooks[0]: \"http://a b/\" is not an http://"},
      {"webhooks: [\"http://a/\", \"http://a/\"]",
       "alerts.webhooks[1]: \"http://a/\" is listed twice"},
      {"webhooks: [a, b, c, d, e, f, g, h, i]", "alerts.webhooks: has 9 items"},
      {"timeout_ms: 0", "alerts.timeout_ms: 0 is out of range; expected an integer 10..600000"},
      {"hooks: []",
       "alerts.hooks: unknown key; expected one of: warning_after, critical_after, resolve_after, "
       "webhooks"},
  };
  for (size_t i = 0; i < sizeof bad_alerts / sizeof bad_alerts[0]; i++) {
    char yaml[256];
    snprintf(yaml, sizeof yaml, "alerts: {%s}\nsession_pools: []\n", bad_alerts[i].body);
    EXPECT_ERR(yaml, bad_alerts[i].want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_config),    cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_sizes_and_bools), cmocka_unit_test(test_unknown_keys),
      cmocka_unit_test(test_duplicate_keys), cmocka_unit_test(test_wrong_kinds),
      cmocka_unit_test(test_out_of_range),   cmocka_unit_test(test_bad_enums),
      cmocka_unit_test(test_endpoints),      cmocka_unit_test(test_pool_names),
      cmocka_unit_test(test_model_path),     cmocka_unit_test(test_backend_options),
      cmocka_unit_test(test_document_shape), cmocka_unit_test(test_yaml_syntax),
      cmocka_unit_test(test_aliases),        cmocka_unit_test(test_base_dir),
      cmocka_unit_test(test_load_file),      cmocka_unit_test(test_alloc_failures),
      cmocka_unit_test(test_misc),           cmocka_unit_test(test_http_keys),
      cmocka_unit_test(test_grpc_keys),
      cmocka_unit_test(test_scheduling_keys), cmocka_unit_test(test_scheduling_errors),
      cmocka_unit_test(test_cpu_affinity), cmocka_unit_test(test_pipeline_duplicate_keys),
      cmocka_unit_test(test_pool_same), cmocka_unit_test(test_pipelines_same),
      cmocka_unit_test(test_drain_and_state_keys), cmocka_unit_test(test_availability_keys),
      cmocka_unit_test(test_sla_and_alerts_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
