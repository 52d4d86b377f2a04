/* Unit tests for the HTTP front-end's route table (src/http/routes.c): every
 * route with and without a version, the placeholders' rules, odd paths
 * (trailing slashes, empty or bad names) and the 404 / 405 answers with
 * their wording and Allow header. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "http/http_impl.h"

/* Matches `url`, expecting route `kind` with `model` and `version` (NULL:
 * none taken from the path). */
static void expect_route(const char *url, sip__route_kind_t kind, const char *model,
                         const char *version) {
  char *m = NULL, *v = NULL;
  const sip__http_route_t *r = sip__http_route_match(url, &m, &v);
  if (!r) fail_msg("%s: no route, want kind %d", url, (int)kind);
  if (r->kind != kind) fail_msg("%s: kind %d, want %d", url, (int)r->kind, (int)kind);
  if (model) {
    if (!m || strcmp(m, model)) fail_msg("%s: model '%s', want '%s'", url, m ? m : "(none)", model);
  } else if (m) {
    fail_msg("%s: model '%s', want none", url, m);
  }
  if (version) {
    if (!v || strcmp(v, version))
      fail_msg("%s: version '%s', want '%s'", url, v ? v : "(none)", version);
  } else if (v) {
    fail_msg("%s: version '%s', want none", url, v);
  }
  sip__free(m);
  sip__free(v);
}

static void expect_none(const char *url) {
  char *m = NULL, *v = NULL;
  const sip__http_route_t *r = sip__http_route_match(url, &m, &v);
  sip__free(m);
  sip__free(v);
  if (r) fail_msg("%s: matched '%s', want no route (404)", url, r->pattern);
}

/* A path and the route it must find. */
typedef struct route_case {
  const char *url;
  sip__route_kind_t kind;
  const char *model, *version;
} route_case_t;

static void expect_routes(const route_case_t *cases, size_t n) {
  for (size_t i = 0; i < n; i++)
    expect_route(cases[i].url, cases[i].kind, cases[i].model, cases[i].version);
}

static void test_fixed_routes(void **state) {
  (void)state;
  static const route_case_t cases[] = {
      {"/v2/health/live", R_LIVE, NULL, NULL},
      {"/v2/health/ready", R_READY, NULL, NULL},
      {"/v2", R_SERVER, NULL, NULL},
      {"/v2/", R_SERVER, NULL, NULL},
      {"/metrics", R_METRICS, NULL, NULL},
      {"/v2/models/stats", R_ALL_STATS, NULL, NULL},
      {"/v2/repository/index", R_REPO_INDEX, NULL, NULL},
  };
  expect_routes(cases, sizeof cases / sizeof *cases);
}

static void test_model_routes(void **state) {
  (void)state;
  static const route_case_t cases[] = {
      {"/v2/models/resnet", R_MODEL, "resnet", NULL},
      {"/v2/models/resnet/ready", R_MODEL_READY, "resnet", NULL},
      {"/v2/models/resnet/infer", R_INFER, "resnet", NULL},
      {"/v2/models/resnet/config", R_CONFIG, "resnet", NULL},
      {"/v2/models/resnet/stats", R_STATS, "resnet", NULL},
      {"/v2/models/a-b_c.1", R_MODEL, "a-b_c.1", NULL},
      /* "stats" alone is every model's statistics; with more it is a model. */
      {"/v2/models/stats/ready", R_MODEL_READY, "stats", NULL},
      {"/v2/models/versions", R_MODEL, "versions", NULL},
  };
  expect_routes(cases, sizeof cases / sizeof *cases);
}

static void test_versions_in_paths(void **state) {
  (void)state;
  static const route_case_t cases[] = {
      {"/v2/models/m/versions/2", R_MODEL, "m", "2"},
      {"/v2/models/m/versions/2/ready", R_MODEL_READY, "m", "2"},
      {"/v2/models/m/versions/2/infer", R_INFER, "m", "2"},
      {"/v2/models/m/versions/2/config", R_CONFIG, "m", "2"},
      {"/v2/models/m/versions/2/stats", R_STATS, "m", "2"},
      {"/v2/models/m/versions/v1.0-rc_2", R_MODEL, "m", "v1.0-rc_2"},
      /* A version named like an action is a version. */
      {"/v2/models/m/versions/ready", R_MODEL, "m", "ready"},
      {"/v2/models/versions/versions/x", R_MODEL, "versions", "x"},
  };
  expect_routes(cases, sizeof cases / sizeof *cases);
  static const char *const none[] = {
      "/v2/models/m/versions",         "/v2/models/m/versions/",
      "/v2/models/m/versions//infer",  "/v2/models/m/versions/2/",
      "/v2/models/m/versions/2/infer/", "/v2/models/m/versions/2/nothing",
      "/v2/models/m/versions/a b",
  };
  for (size_t i = 0; i < sizeof none / sizeof *none; i++) expect_none(none[i]);
}

static void test_repository_routes(void **state) {
  (void)state;
  expect_route("/v2/repository/models/m/load", R_REPO_LOAD, "m", NULL);
  expect_route("/v2/repository/models/m/unload", R_REPO_UNLOAD, "m", NULL);
  /* The name is everything up to the last '/': the engine refuses a bad one
   * with its reason (400) rather than a bare 404. */
  expect_route("/v2/repository/models/a/b/load", R_REPO_LOAD, "a/b", NULL);
  expect_route("/v2/repository/models/../load", R_REPO_LOAD, "..", NULL);
  expect_route("/v2/repository/models/m/load/load", R_REPO_LOAD, "m/load", NULL);
  expect_route("/v2/repository/models///load", R_REPO_LOAD, "/", NULL);
  expect_none("/v2/repository/models//load");
  expect_none("/v2/repository/models/load");
  expect_none("/v2/repository/models/m");
  expect_none("/v2/repository/models/m/");
  expect_none("/v2/repository/models/m/load/");
  expect_none("/v2/repository/models/m/reload");
  expect_none("/v2/repository/models/");
  expect_none("/v2/repository/index/");
}

static void test_odd_paths(void **state) {
  (void)state;
  expect_none("");
  expect_none("/");
  expect_none("/v2/nothing");
  expect_none("/v3/health/live");
  expect_none("/v2/health/live/");
  expect_none("/v2/health");
  expect_none("/metrics/");
  expect_none("/v2//");
  expect_none("/v2/models");
  expect_none("/v2/models/");
  expect_none("/v2/models//ready");
  expect_none("/v2/models/m/");
  expect_none("/v2/models/m//ready");
  expect_none("/v2/models/m/ready/");
  expect_none("/v2/models/m/ready/x");
  expect_none("/v2/models/m/nothing");
  expect_none("/v2/models/stats/");
  /* Names outside [A-Za-z0-9_.-] cannot exist (and must not reach logs). */
  expect_none("/v2/models/a b/ready");
  expect_none("/v2/models/a\nb/ready");
  expect_none("/v2/models/caf\xc3\xa9");
  expect_none("/v2/models/a%2Fb");
  /* A model name is at most 128 bytes. */
  char url[300], name[140];
  memset(name, 'n', 128);
  name[128] = '\0';
  snprintf(url, sizeof url, "/v2/models/%s/ready", name);
  expect_route(url, R_MODEL_READY, name, NULL);
  name[128] = 'n';
  name[129] = '\0';
  snprintf(url, sizeof url, "/v2/models/%s/ready", name);
  expect_none(url);
}

/* The refusal for `method` on `url`: its status, message and Allow value. */
static unsigned refusal(const char *url, const char *method, char *msg, size_t n,
                        const char **allow) {
  char *m = NULL, *v = NULL;
  const sip__http_route_t *r = sip__http_route_match(url, &m, &v);
  sip__free(m);
  sip__free(v);
  *allow = NULL;
  msg[0] = '\0';
  return sip__http_route_refusal(r, url, method, msg, n, allow);
}

static void test_404_and_405(void **state) {
  (void)state;
  char msg[300];
  const char *allow;
  assert_int_equal(refusal("/v2/nothing", "GET", msg, sizeof msg, &allow), 404);
  assert_string_equal(msg, "no such endpoint: GET /v2/nothing");
  assert_null(allow);
  assert_int_equal(refusal("/v2/models/m/", "POST", msg, sizeof msg, &allow), 404);
  assert_string_equal(msg, "no such endpoint: POST /v2/models/m/");

  /* GET routes answer GET and HEAD. */
  assert_int_equal(refusal("/v2/health/live", "GET", msg, sizeof msg, &allow), 0);
  assert_int_equal(refusal("/v2/health/live", "HEAD", msg, sizeof msg, &allow), 0);
  assert_int_equal(refusal("/v2/models/m/versions/1", "GET", msg, sizeof msg, &allow), 0);
  assert_int_equal(refusal("/v2/models/m/config", "POST", msg, sizeof msg, &allow), 405);
  assert_string_equal(msg, "POST is not allowed on /v2/models/m/config; use GET");
  assert_string_equal(allow, "GET, HEAD");
  assert_int_equal(refusal("/metrics", "DELETE", msg, sizeof msg, &allow), 405);
  assert_string_equal(msg, "DELETE is not allowed on /metrics; use GET");
  assert_string_equal(allow, "GET, HEAD");

  /* POST routes take only POST. */
  assert_int_equal(refusal("/v2/models/m/infer", "POST", msg, sizeof msg, &allow), 0);
  assert_int_equal(refusal("/v2/models/m/infer", "GET", msg, sizeof msg, &allow), 405);
  assert_string_equal(msg, "GET is not allowed on /v2/models/m/infer; use POST");
  assert_string_equal(allow, "POST");
  assert_int_equal(refusal("/v2/models/m/versions/3/infer", "HEAD", msg, sizeof msg, &allow),
                   405);
  assert_string_equal(allow, "POST");
  assert_int_equal(refusal("/v2/repository/index", "GET", msg, sizeof msg, &allow), 405);
  assert_string_equal(msg, "GET is not allowed on /v2/repository/index; use POST");
  assert_int_equal(refusal("/v2/repository/models/m/load", "PUT", msg, sizeof msg, &allow), 405);
  assert_string_equal(allow, "POST");
  assert_int_equal(refusal("/v2/repository/models/m/unload", "POST", msg, sizeof msg, &allow), 0);

  /* A long path is cut to 200 bytes in the message. */
  char url[400];
  memset(url, 'x', sizeof url - 1);
  url[0] = '/';
  url[sizeof url - 1] = '\0';
  assert_int_equal(refusal(url, "GET", msg, sizeof msg, &allow), 404);
  assert_int_equal(strlen(msg), strlen("no such endpoint: GET ") + 200);
}

static void test_shm_routes(void **state) {
  (void)state;
  static const route_case_t cases[] = {
      {"/v2/systemsharedmemory/status", R_SYS_SHM, NULL, NULL},
      {"/v2/systemsharedmemory/unregister", R_SYS_SHM, NULL, NULL},
      {"/v2/systemsharedmemory/region/in_0.a-b/status", R_SYS_SHM, "in_0.a-b", NULL},
      {"/v2/systemsharedmemory/region/r/register", R_SYS_SHM, "r", NULL},
      {"/v2/systemsharedmemory/region/r/unregister", R_SYS_SHM, "r", NULL},
      /* A region named like a route's last segment is a region. */
      {"/v2/systemsharedmemory/region/status/status", R_SYS_SHM, "status", NULL},
  };
  expect_routes(cases, sizeof cases / sizeof *cases);
  /* Region names: 1 to SIP__SHM_MAX_NAME name characters. */
  char url[400], name[SIP__SHM_MAX_NAME + 2];
  memset(name, 'n', sizeof name - 1);
  name[SIP__SHM_MAX_NAME] = '\0';
  snprintf(url, sizeof url, "/v2/systemsharedmemory/region/%s/register", name);
  expect_route(url, R_SYS_SHM, name, NULL);
  name[SIP__SHM_MAX_NAME] = 'n';
  name[SIP__SHM_MAX_NAME + 1] = '\0';
  snprintf(url, sizeof url, "/v2/systemsharedmemory/region/%s/register", name);
  expect_none(url);
  static const char *const none[] = {
      "/v2/systemsharedmemory",
      "/v2/systemsharedmemory/register",
      "/v2/systemsharedmemory/region//register",
      "/v2/systemsharedmemory/region/a b/register",
      "/v2/systemsharedmemory/region/a/b/register",
      "/v2/systemsharedmemory/region/r",
      "/v2/systemsharedmemory/region/r/delete",
  };
  for (size_t i = 0; i < sizeof none / sizeof *none; i++) expect_none(none[i]);
  char msg[300];
  const char *allow;
  assert_int_equal(refusal("/v2/systemsharedmemory/status", "GET", msg, sizeof msg, &allow), 0);
  assert_int_equal(refusal("/v2/systemsharedmemory/region/r/register", "GET", msg, sizeof msg,
                           &allow), 405);
  assert_string_equal(allow, "POST");
  assert_int_equal(refusal("/v2/systemsharedmemory/region/r/status", "POST", msg, sizeof msg,
                           &allow), 405);
  assert_string_equal(allow, "GET, HEAD");
}

/* Every route's handlers are set for the methods it takes. */
static void test_handlers(void **state) {
  (void)state;
  static const char *const get_urls[] = {"/v2/health/live", "/v2/health/ready", "/v2",
                                         "/metrics", "/v2/models/stats", "/v2/models/m",
                                         "/v2/models/m/ready", "/v2/models/m/config",
                                         "/v2/models/m/stats"};
  static const char *const post_urls[] = {"/v2/models/m/infer", "/v2/repository/index",
                                          "/v2/repository/models/m/load",
                                          "/v2/repository/models/m/unload"};
  for (size_t i = 0; i < sizeof get_urls / sizeof *get_urls; i++) {
    char *m = NULL, *v = NULL;
    const sip__http_route_t *r = sip__http_route_match(get_urls[i], &m, &v);
    assert_non_null(r);
    assert_non_null(r->get);
    assert_null(r->post);
    sip__free(m);
    sip__free(v);
  }
  for (size_t i = 0; i < sizeof post_urls / sizeof *post_urls; i++) {
    char *m = NULL, *v = NULL;
    const sip__http_route_t *r = sip__http_route_match(post_urls[i], &m, &v);
    assert_non_null(r);
    assert_null(r->get);
    assert_non_null(r->post);
    assert_non_null(r->post->body);
    assert_non_null(r->post->start);
    assert_non_null(r->post->answer);
    sip__free(m);
    sip__free(v);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shm_routes),
      cmocka_unit_test(test_fixed_routes),      cmocka_unit_test(test_model_routes),
      cmocka_unit_test(test_versions_in_paths), cmocka_unit_test(test_repository_routes),
      cmocka_unit_test(test_odd_paths),         cmocka_unit_test(test_404_and_405),
      cmocka_unit_test(test_handlers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
