/* Unit tests for the model repository's pure parts: model name checks
 * (src/server/repository/repository_versions.c), version-policy selection, and the parsing of
 * a model's config.yaml (src/config/config.c, sip__config_load_model). */
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

#include <pthread.h>

#include "config/config.h"
#include "core/core.h"
#include "inproc.h"
#include "server/repository/repository.h"
#include "sip/sip.h"
#include "backend/backends.h"

/* ---- names ---- */

static void name_ok(const char *name) {
  sip_error_t *e = sip__repo_check_name(name, strlen(name));
  if (e) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("'%s' refused: %s", name, msg);
  }
}

/* Refused with INVALID_ARGUMENT and a message containing `want`. */
static void name_bad(const char *name, size_t len, const char *want) {
  sip_error_t *e = sip__repo_check_name(name, len);
  if (!e) fail_msg("'%s' accepted", name);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t code = sip_error_code(e);
  sip_error_free(e);
  assert_int_equal(code, SIP_INVALID_ARGUMENT);
  if (!strstr(msg, want)) fail_msg("message for '%s' lacks \"%s\": %s", name, want, msg);
  if (!strstr(msg, "expected")) fail_msg("message does not say what is expected: %s", msg);
}

#define BAD(name, want) name_bad(name, strlen(name), want)

static void test_names(void **state) {
  (void)state;
  name_ok("m");
  name_ok("resnet50");
  name_ok("det.v2-x_1");
  name_ok("a..b"); /* dots inside a name are not traversal */
  char longest[129];
  memset(longest, 'a', 128);
  longest[128] = '\0';
  name_ok(longest);

  BAD("", "empty");
  BAD(".", "outside the model");
  BAD("..", "outside the model");
  BAD("../etc", "path separator");
  BAD("../../etc/passwd", "path separator");
  BAD("a/b", "path separator");
  BAD("a/../b", "path separator");
  BAD("a\\b", "path separator");
  BAD("/etc", "absolute path");
  BAD("/", "absolute path");
  BAD(".hidden", "starts with '.'");
  BAD("a b", "not allowed");
  BAD("a:1", "not allowed");
  BAD("caf\xc3\xa9", "not allowed");
  BAD("tab\there", "not allowed");
  name_bad("ab\0cd", 5, "NUL");
  name_bad("\0", 1, "NUL");
  char toolong[130];
  memset(toolong, 'a', 129);
  toolong[129] = '\0';
  BAD(toolong, "too long");
  /* Unprintable bytes are not echoed into the message (it reaches logs). */
  sip_error_t *e = sip__repo_check_name("x\x1b[31m/y", 8);
  assert_non_null(e);
  assert_null(strchr(sip_error_message(e), '\x1b'));
  sip_error_free(e);
}

/* ---- version policy ---- */

static sip__pool_config_t policy(int kind, int latest, const int64_t *specific, size_t n) {
  sip__pool_config_t p;
  memset(&p, 0, sizeof p);
  p.version_policy = kind;
  p.version_latest = latest;
  for (size_t i = 0; i < n; i++) p.versions[i] = specific[i];
  p.n_versions = n;
  return p;
}

/* Selects from avail and checks the result and the missing list. */
static void expect_select(const sip__pool_config_t *p, const int64_t *avail, size_t n,
                          int64_t current, const int64_t *want, size_t n_want,
                          const int64_t *want_missing, size_t n_want_missing) {
  int64_t out[64], missing[SIP__MAX_SPECIFIC_VERSIONS];
  size_t n_missing = 99;
  size_t got = sip__repo_select_versions(p, avail, n, current, out, missing, &n_missing);
  assert_int_equal(got, n_want);
  for (size_t i = 0; i < got; i++) assert_int_equal(out[i], want[i]);
  assert_int_equal(n_missing, n_want_missing);
  for (size_t i = 0; i < n_missing; i++) assert_int_equal(missing[i], want_missing[i]);
}

static void test_select_versions(void **state) {
  (void)state;
  const int64_t avail[] = {1, 2, 10};
  sip__pool_config_t p = policy(SIP__VERSIONS_LATEST, 1, NULL, 0);
  expect_select(&p, avail, 3, -1, (int64_t[]){10}, 1, NULL, 0); /* numeric: 10 > 2 */
  p = policy(SIP__VERSIONS_LATEST, 2, NULL, 0);
  expect_select(&p, avail, 3, -1, (int64_t[]){2, 10}, 2, NULL, 0);
  p = policy(SIP__VERSIONS_LATEST, 7, NULL, 0);
  expect_select(&p, avail, 3, -1, avail, 3, NULL, 0);
  p = policy(SIP__VERSIONS_ALL, 0, NULL, 0);
  expect_select(&p, avail, 3, -1, avail, 3, NULL, 0);
  p = policy(SIP__VERSIONS_SPECIFIC, 0, (int64_t[]){1, 3, 10}, 3);
  expect_select(&p, avail, 3, -1, (int64_t[]){1, 10}, 2, (int64_t[]){3}, 1);
  p = policy(SIP__VERSIONS_SPECIFIC, 0, (int64_t[]){4}, 1);
  expect_select(&p, avail, 3, -1, NULL, 0, (int64_t[]){4}, 1);

  /* A `current` link adds the version it names (in order) ... */
  p = policy(SIP__VERSIONS_LATEST, 1, NULL, 0);
  expect_select(&p, avail, 3, 1, (int64_t[]){1, 10}, 2, NULL, 0);
  p = policy(SIP__VERSIONS_SPECIFIC, 0, (int64_t[]){1, 10}, 2);
  expect_select(&p, avail, 3, 2, (int64_t[]){1, 2, 10}, 3, NULL, 0);
  /* ... once, and only when that version exists. */
  p = policy(SIP__VERSIONS_LATEST, 1, NULL, 0);
  expect_select(&p, avail, 3, 10, (int64_t[]){10}, 1, NULL, 0);
  expect_select(&p, avail, 3, 5, (int64_t[]){10}, 1, NULL, 0);

  /* Nothing there: nothing served. */
  expect_select(&p, NULL, 0, -1, NULL, 0, NULL, 0);
  p = policy(SIP__VERSIONS_ALL, 0, NULL, 0);
  expect_select(&p, NULL, 0, -1, NULL, 0, NULL, 0);
}

/* ---- a model's config.yaml ---- */

static char dir[] = "/tmp/sip_test_repoXXXXXX";

static int setup(void **state) {
  (void)state;
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char path[256];
  snprintf(path, sizeof path, "%s/config.yaml", dir);
  unlink(path);
  rmdir(dir);
  return 0;
}

static const char *write_config(const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "%s/config.yaml", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static sip__pool_config_t *model_ok(const char *text) {
  sip__pool_config_t *p = NULL;
  sip_error_t *e = sip__config_load_model(text ? write_config(text) : NULL, "m", "/r/m/1/model.onnx", sip__backend_catalog(), &p);
  if (e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("unexpected error: %s\n--- yaml:\n%s", msg, text ? text : "(none)");
  }
  assert_non_null(p);
  return p;
}

static void model_bad(const char *text, const char *want1, const char *want2) {
  sip__pool_config_t *p = NULL;
  sip_error_t *e = sip__config_load_model(write_config(text), "m", "/r/m/1/model.onnx", sip__backend_catalog(), &p);
  if (!e) fail_msg("expected an error for:\n%s", text);
  assert_null(p);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t code = sip_error_code(e);
  sip_error_free(e);
  assert_int_equal(code, SIP_INVALID_ARGUMENT);
  if (!strstr(msg, want1) || (want2 && !strstr(msg, want2)))
    fail_msg("message lacks \"%s\" / \"%s\":\n  %s\n--- yaml:\n%s", want1, want2 ? want2 : "", msg,
             text);
}

static void test_model_config(void **state) {
  (void)state;
  /* No config.yaml, or an empty one: every default, latest: 1. */
  sip__pool_config_t *p = model_ok(NULL);
  assert_string_equal(p->name, "m");
  assert_string_equal(p->model_path, "/r/m/1/model.onnx");
  assert_string_equal(p->backend, "onnxruntime");
  assert_int_equal(p->pool_size, 1);
  assert_int_equal(p->priority, SIP__PRIO_MEDIUM);
  assert_int_equal(p->version_policy, SIP__VERSIONS_LATEST);
  assert_int_equal(p->version_latest, 1);
  sip__config_pool_free(p);
  p = model_ok("# nothing set\n");
  assert_int_equal(p->version_latest, 1);
  sip__config_pool_free(p);

  p = model_ok("pool_size: 3\npriority: high\nresource_quota: {max_memory_mb: 512}\n"
               "dynamic_batching: {max_batch_size: 8}\nqueue: {max_size: 10}\n"
               "backend_options: {graph_optimization_level: disable}\n"
               "version_policy: {latest: 2}\n");
  assert_int_equal(p->pool_size, 3);
  assert_int_equal(p->priority, SIP__PRIO_HIGH);
  assert_int_equal(p->max_memory_mb, 512);
  assert_int_equal(p->max_batch_size, 8);
  assert_int_equal(p->queue_max_size, 10);
  assert_int_equal(p->n_backend_options, 1);
  assert_int_equal(p->version_policy, SIP__VERSIONS_LATEST);
  assert_int_equal(p->version_latest, 2);
  sip__config_pool_free(p);

  p = model_ok("version_policy: {specific: [3, 1, 20]}\n");
  assert_int_equal(p->version_policy, SIP__VERSIONS_SPECIFIC);
  assert_int_equal(p->n_versions, 3);
  assert_int_equal(p->versions[0], 1); /* kept sorted */
  assert_int_equal(p->versions[1], 3);
  assert_int_equal(p->versions[2], 20);
  sip__config_pool_free(p);

  p = model_ok("version_policy: all\n");
  assert_int_equal(p->version_policy, SIP__VERSIONS_ALL);
  sip__config_pool_free(p);

  /* Errors name the file, line and column, the key and what is expected. */
  model_bad("pool_size: 0\n", "config.yaml:1:12: pool_size: 0 is out of range", "1..256");
  model_bad("name: other\n", "config.yaml:1:1: name: unknown key", "version_policy");
  model_bad("model_path: x.onnx\n", "model_path: unknown key", NULL);
  model_bad("version_policy: {latest: 0}\n", "1:26: version_policy.latest: 0 is out of range",
            "1..1024");
  model_bad("version_policy: {specific: []}\n", "version_policy.specific: has 0 items",
            "distinct version numbers");
  model_bad("version_policy: {specific: [1, 1]}\n", "version_policy.specific[1]: 1 is listed twice",
            NULL);
  model_bad("version_policy: {specific: [-1]}\n", "is not a version number", NULL);
  model_bad("version_policy: newest\n", "version_policy: \"newest\" is not valid",
            "{latest: N}");
  model_bad("version_policy: {latest: 1, all: 1}\n", "version_policy: has 2 keys", NULL);
  model_bad("version_policy: {oldest: 1}\n", "version_policy.oldest: unknown key", NULL);
  model_bad("- 1\n", "is a list; expected a map with keys: backend, pool_size", NULL);
  model_bad("pool_size: [\n", "YAML syntax error", NULL);
  model_bad("dynamic_batching: {max_batch_size: 4, preferred_batch_sizes: [8]}\n",
            "larger than max_batch_size", NULL);
}

/* version_policy belongs to a repository model's config.yaml only. */
static void test_policy_not_in_session_pools(void **state) {
  (void)state;
  const char *yaml = "session_pools:\n  - name: p\n    model_path: m.onnx\n"
                     "    version_policy: all\n";
  sip__config_t *cfg = NULL;
  sip_error_t *e = sip__config_load_string(yaml, strlen(yaml), "cfg.yaml", "/base", sip__backend_catalog(), &cfg);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "session_pools[0].version_policy: unknown key"));
  assert_null(strstr(sip_error_message(e), "expected one of: name, model_path, backend, pool_size, "
                                          "priority, resource_quota, backend_options, "
                                          "dynamic_batching, queue, batch_strategies, version"));
  sip_error_free(e);

  /* session_pools may be left out when a repository is configured. */
  const char *repo = "server: {model_repository: models}\n";
  e = sip__config_load_string(repo, strlen(repo), "cfg.yaml", "/base", sip__backend_catalog(), &cfg);
  assert_null(e);
  assert_string_equal(cfg->model_repository, "/base/models");
  assert_int_equal(cfg->model_control, SIP__MODEL_CONTROL_STARTUP);
  assert_int_equal(cfg->n_pools, 0);
  sip__config_free(cfg);
  const char *expl = "server: {model_repository: /abs/models, model_control: explicit}\n";
  e = sip__config_load_string(expl, strlen(expl), "cfg.yaml", "/base", sip__backend_catalog(), &cfg);
  assert_null(e);
  assert_string_equal(cfg->model_repository, "/abs/models");
  assert_int_equal(cfg->model_control, SIP__MODEL_CONTROL_EXPLICIT);
  sip__config_free(cfg);
  const char *none = "server: {log_level: info}\n";
  e = sip__config_load_string(none, strlen(none), "cfg.yaml", "/base", sip__backend_catalog(), &cfg);
  assert_non_null(e);
  assert_non_null(strstr(sip_error_message(e), "session_pools: missing; expected a list of pools"));
  assert_non_null(strstr(sip_error_message(e), "server.model_repository"));
  sip_error_free(e);
}

/* ---- the engine API: load, reload, unload in-process ---- */

/* A repository version for the builtin backend (identity; it reads no
 * file, but the repository wants one there). */
static void make_version(const char *repo, const char *model, int v) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", repo, model);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%d", repo, model, v);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%d/model.onnx", repo, model, v);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
}

static sip_request_t *request(const char *pool, float value) {
  sip_request_t *r = sip_request_new(pool);
  int64_t dims[1] = {2};
  float x[2] = {value, value + 0.5f};
  assert_null(sip_request_add_input(
      r, sip_tensor_new_copy("input", SIP_DTYPE_FLOAT32, 1, dims, x, sizeof x)));
  return r;
}

static sip_code_t infer_code(sip_server_t *s, const char *pool) {
  sip_response_t *resp = NULL;
  sip_error_t *e = sip_server_infer(s, request(pool, 1), &resp);
  sip_code_t code = e ? sip_error_code(e) : sip_response_code(resp);
  sip_error_free(e);
  sip_response_free(resp);
  return code;
}

typedef struct counter {
  pthread_mutex_t mu;
  int ok, failed;
} counter_t;

static void count_done(sip_response_t *resp, void *user) {
  counter_t *c = user;
  pthread_mutex_lock(&c->mu);
  if (resp && sip_response_code(resp) == SIP_OK)
    c->ok++;
  else
    c->failed++;
  pthread_mutex_unlock(&c->mu);
  sip_response_free(resp);
}

static int index_has(sip_server_t *s, const char *needle) {
  char *idx = sip_server_repository_index(s, 0);
  assert_non_null(idx);
  int found = strstr(idx, needle) != NULL;
  sip_free(idx);
  return found;
}

static void test_engine_load_reload_unload(void **state) {
  (void)state;
  char repo[] = "/tmp/sip_test_engine_repoXXXXXX";
  assert_non_null(mkdtemp(repo));
  make_version(repo, "m", 1);
  char path[512];
  snprintf(path, sizeof path, "%s/m/config.yaml", repo);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("backend: builtin\nbackend_options: {delay_ms: 20}\n", f);
  fclose(f);

  char yaml[512];
  snprintf(yaml, sizeof yaml, "server: {model_repository: %s}\n", repo);
  sip_server_t *s = new_server_yaml(yaml);
  assert_true(index_has(s, "{\"name\":\"m\",\"state\":\"READY\""));
  assert_int_equal(infer_code(s, "m"), SIP_OK);
  assert_int_equal(infer_code(s, "m:1"), SIP_OK);

  /* Requests queued on version 1 finish there while 2 takes over: the
   * blocking load returns only once 1 is drained and freed. */
  counter_t c = {.ok = 0};
  pthread_mutex_init(&c.mu, NULL);
  for (int i = 0; i < 8; i++) assert_null(sip_server_infer_async(s, request("m", (float)i), count_done, &c));
  make_version(repo, "m", 2);
  assert_null(sip_server_load_model(s, "m"));
  pthread_mutex_lock(&c.mu);
  assert_int_equal(c.ok, 8);
  assert_int_equal(c.failed, 0);
  pthread_mutex_unlock(&c.mu);
  pthread_mutex_destroy(&c.mu);
  assert_int_equal(infer_code(s, "m:2"), SIP_OK);
  assert_int_equal(infer_code(s, "m:1"), SIP_NOT_FOUND);
  assert_true(index_has(s, "\"version\":\"2\""));
  assert_false(index_has(s, "\"version\":\"1\""));
  /* Nothing changed: the running version stays (a no-op reload). */
  assert_null(sip_server_load_model(s, "m"));
  assert_int_equal(infer_code(s, "m"), SIP_OK);

  /* Names are checked before the file system is touched. */
  sip_error_t *e = sip_server_load_model(s, "../m");
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  e = sip_server_unload_model(s, "/etc");
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  sip_error_free(e);
  e = sip_server_load_model(s, "nope");
  assert_int_equal(sip_error_code(e), SIP_NOT_FOUND);
  sip_error_free(e);

  assert_null(sip_server_unload_model(s, "m"));
  assert_int_equal(infer_code(s, "m"), SIP_UNAVAILABLE);
  assert_true(index_has(s, "\"reason\":\"unloaded\""));
  assert_null(sip_server_load_model(s, "m"));
  assert_int_equal(infer_code(s, "m"), SIP_OK);
  sip_server_free(s);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", repo);
  assert_int_equal(system(cmd), 0);
}

/* Without a repository the calls say so; session_pools are not theirs. */
static void test_engine_without_repository(void **state) {
  (void)state;
  sip_server_t *s = new_server_yaml("session_pools:\n  - {name: p, backend: builtin}\n");
  sip_error_t *e = sip_server_load_model(s, "p");
  assert_int_equal(sip_error_code(e), SIP_FAILED_PRECONDITION);
  sip_error_free(e);
  char *idx = sip_server_repository_index(s, 1);
  assert_non_null(strstr(idx, "{\"name\":\"p\",\"state\":\"READY\",\"reason\":\"\",\"source\":\"config\""));
  sip_free(idx);
  assert_int_equal(infer_code(s, "p"), SIP_OK);
  sip_server_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_select_versions),
      cmocka_unit_test(test_model_config),
      cmocka_unit_test(test_policy_not_in_session_pools),
      cmocka_unit_test(test_engine_load_reload_unload),
      cmocka_unit_test(test_engine_without_repository),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
