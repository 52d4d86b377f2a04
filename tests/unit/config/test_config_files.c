/* Unit tests for the config parser (src/config/): backend options, model
 * paths and files, YAML syntax and aliases, allocation failures, the HTTP,
 * gRPC and other server keys, with every message. */
#include "config_helpers.h"

static void test_option_list(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL("    backend_options:\n      execution_providers: "
                                    "[{name: cpu, arena: 1}, cpu]\n"));
  assert_int_equal(cfg->pools[0].n_backend_options, 1);
  assert_string_equal(cfg->pools[0].backend_options[0].key, "execution_providers");
  assert_string_equal(cfg->pools[0].backend_options[0].value,
                      "[{\"name\":\"cpu\",\"arena\":\"1\"},{\"name\":\"cpu\"}]");
  sip__config_free(cfg);
  EXPECT_ERR(POOL("    backend_options: {execution_providers: [{device_id: 0}]}\n"),
             "execution_providers[0]: a map without a name");
  EXPECT_ERR(POOL("    backend_options: {execution_providers: []}\n"), "is an empty list");
  EXPECT_ERR("session_pools:\n  - {name: a, backend: builtin, backend_options: {shape: [1]}}\n",
             "backend_options.shape: a list is not valid; expected a scalar value");
}

static void test_model_path(void **state) {
  (void)state;
  EXPECT_ERR("session_pools:\n  - name: a\n    model_path: models/ocr.om\n",
             NAME ":3:17: session_pools[0].model_path: \"models/ocr.om\" is a CANN offline model (.om), "
                  "but this build has no CANN backend; expected one of model.onnx (onnxruntime)");
  EXPECT_ERR("session_pools:\n  - {name: a, model_path: x.OM, backend: onnxruntime}\n",
             "is a CANN offline model (.om)");
  EXPECT_ERR("session_pools:\n  - name: a\n    model_path: m.xyz\n",
             NAME ":3:17: session_pools[0].model_path: \"m.xyz\" has an unknown extension (.xyz)",
             "expected one of model.onnx (onnxruntime)");
  /* Options are checked against the backend's table. */
  EXPECT_ERR("session_pools:\n  - {name: a, model_path: a.onnx, backend_options: {nope: 1}}\n",
             "session_pools[0].backend_options.nope: unknown option of backend onnxruntime; "
             "expected one of graph_optimization_level, execution_providers");
  EXPECT_ERR("session_pools:\n  - {name: a, model_path: a.onnx, backend_options: "
             "{enable_mem_pattern: maybe}}\n",
             "backend_options.enable_mem_pattern: \"maybe\" is not valid; expected true or false");
  EXPECT_ERR("session_pools:\n  - {name: a, model_path: a.onnx, backend_options: "
             "{graph_optimization_level: [all]}}\n",
             "expected one of disable, basic, extended, all");
  EXPECT_ERR("session_pools:\n  - {name: a, backend: builtin, backend_options: {delay_ms: -1}}\n",
             "backend_options.delay_ms: \"-1\" is not valid; expected an integer 0..3600000");
  /* A provider this build of ONNX Runtime lacks, with the list it has. */
  EXPECT_ERR("session_pools:\n  - name: a\n    model_path: a.onnx\n    backend_options:\n"
             "      execution_providers: [{name: cuda, device_id: 0}, cpu]\n",
             "session_pools[0].backend_options: onnxruntime: execution provider 'cuda' is not in "
             "this build of ONNX Runtime; available: ", "cpu (CPUExecutionProvider)");
  EXPECT_ERR("session_pools:\n  - name: a\n    pool_size: 2\n",
             NAME ":2:5: session_pools[0].model_path: missing",
             "expected a path to a model file a backend claims or a model directory (required unless the backend "
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
             NAME ":5:7: session_pools[0].backend_options.providers: unknown option of backend "
                  "onnxruntime; expected one of graph_optimization_level, execution_providers");
  EXPECT_ERR(POOL("    backend_options:\n      graph_optimization_level: [cpu, cuda]\n"),
             NAME ":5:33: session_pools[0].backend_options.graph_optimization_level: a list is "
                  "not valid; expected one of disable, basic, extended, all");
  EXPECT_ERR(POOL("    backend_options: {a: }\n"), "session_pools[0].backend_options.a: has no value");
  EXPECT_ERR(POOL("    backend_options: [a, b]\n"), "session_pools[0].backend_options: is a list",
             "expected a map of scalar values");
  EXPECT_ERR(POOL("    backend_options: {[k]: v}\n"), "session_pools[0].backend_options: a key is a list");
  sip__config_t *cfg = load_ok("session_pools:\n  - name: p\n    backend: transform\n"
                                "    backend_options: {\"quoted key\": 'x y', e: \"\"}\n");
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
  /* A list is seed 003's model list (test_model_list.c): its items are models. */
  EXPECT_ERR("- a\n- b\n", NAME ":1:3: [0]: is a scalar; expected a model: a map of model_name");
  EXPECT_ERR("7\n", NAME ":1:1: (root): is a scalar; expected a map with keys: server, session_pools",
             "or a list of models in seed 003's form");
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
                     "  - {name: a, model_path: a.onnx, backend_options: {enable_mem_pattern: 1, "
                     "own_intra_op_threads: 2}}\n"
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
  assert_int_equal(cfg->grpc_threads, 1);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_option_list),
      cmocka_unit_test(test_model_path),
      cmocka_unit_test(test_backend_options),
      cmocka_unit_test(test_document_shape),
      cmocka_unit_test(test_yaml_syntax),
      cmocka_unit_test(test_aliases),
      cmocka_unit_test(test_base_dir),
      cmocka_unit_test(test_load_file),
      cmocka_unit_test(test_alloc_failures),
      cmocka_unit_test(test_http_keys),
      cmocka_unit_test(test_grpc_keys),
      cmocka_unit_test(test_misc),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
