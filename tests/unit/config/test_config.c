/* Unit tests for the config parser (src/config/): values, defaults, unknown and
 * duplicate keys, kinds, ranges, enums, endpoints and names, with every message. */
#include "config_helpers.h"

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
      "    backend_options: {graph_optimization_level: all, execution_provider: cpu, "
      "own_intra_op_threads: 3, enable_mem_pattern: true}\n"
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
  assert_int_equal(cfg->pools[0].residency, SIP__RESIDENCY_DEFAULT);
  sip__config_free(cfg);
  cfg = load_ok(POOL("    residency: on_demand\n"));
  assert_int_equal(cfg->pools[0].residency, SIP__RESIDENCY_ON_DEMAND);
  sip__config_free(cfg);
  cfg = load_ok(POOL("    residency: pinned\n"));
  assert_int_equal(cfg->pools[0].residency, SIP__RESIDENCY_PINNED);
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
  EXPECT_ERR(POOL("    residency: lazy\n"),
             NAME ":4:16: session_pools[0].residency: \"lazy\" is not valid; expected one of "
                  "pinned, on_demand");
  EXPECT_ERR(POOL("    residency: on_demand\n    sequence_batching: {}\n"),
             "session_pools[0].residency: on_demand cannot be used with sequence_batching",
             "expected pinned");
  EXPECT_ERR(POOL("    residency: on_demand\n"
                  "pipeline_sessions:\n  - name: pl\n    stages:\n      - {name: s, pool: p}\n"),
             NAME ":8:1: pipeline_sessions[0].stages[0].pool: 'p' has residency: on_demand, which "
                  "a pipeline stage cannot run on yet; expected a pinned pool (line 2)");
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

/* A list option reaches the backend as JSON text; cpu is always there. */

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_config),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_sizes_and_bools),
      cmocka_unit_test(test_availability_keys),
      cmocka_unit_test(test_unknown_keys),
      cmocka_unit_test(test_duplicate_keys),
      cmocka_unit_test(test_wrong_kinds),
      cmocka_unit_test(test_out_of_range),
      cmocka_unit_test(test_bad_enums),
      cmocka_unit_test(test_endpoints),
      cmocka_unit_test(test_pool_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
