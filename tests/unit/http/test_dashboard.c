/* Unit tests for the dashboard (src/http/dashboard.c): the page and the
 * report rendered from the built-in assets (every marker replaced, every
 * asset inlined whole, the snapshot escaped for a <script> element), the
 * data document of a real server, its routes and what the dashboard's own
 * port serves. */
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
#include "sip/server.h"

extern const unsigned char sip__asset_html[], sip__asset_css[], sip__asset_js[],
    sip__asset_uplot_js[], sip__asset_uplot_css[];
extern const size_t sip__asset_html_len, sip__asset_css_len, sip__asset_js_len,
    sip__asset_uplot_js_len, sip__asset_uplot_css_len;

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static int holds(const char *page, size_t len, const unsigned char *asset, size_t n) {
  return memmem(page, len, asset, n) != NULL;
}

static void test_live_page(void **state) {
  (void)state;
  size_t len = 0;
  char *page = sip__dash_render(NULL, &len);
  assert_non_null(page);
  assert_int_equal(strlen(page), len);
  assert_int_equal(strncmp(page, "<!doctype html>", 15), 0);
  /* Every marker replaced; each asset inlined whole, once. */
  assert_null(strstr(page, "<!--sip:"));
  assert_true(holds(page, len, sip__asset_uplot_js, sip__asset_uplot_js_len));
  assert_true(holds(page, len, sip__asset_uplot_css, sip__asset_uplot_css_len));
  assert_true(holds(page, len, sip__asset_js, sip__asset_js_len));
  assert_true(holds(page, len, sip__asset_css, sip__asset_css_len));
  assert_int_equal(count(page, "<style>"), 2);
  assert_int_equal(count(page, "<script>"), 2);
  /* Nothing loaded from elsewhere, and no data: the live page reads it. */
  assert_null(strstr(page, "<script src"));
  assert_null(strstr(page, "rel=\"stylesheet\""));
  assert_null(strstr(page, "<script type=\"application/json\" id=\"sip-snapshot\">"));
  /* The inlined scripts hold no closing tag of their own: one per element. */
  assert_int_equal(count(page, "</script>"), 2);
  /* The template's length, its markers taken out, the assets and their
   * elements put in. */
  size_t markers = strlen("<!--sip:style uplot-->") + strlen("<!--sip:style dashboard-->") +
                   strlen("<!--sip:script uplot-->") + strlen("<!--sip:script dashboard-->") +
                   strlen("<!--sip:data-->");
  size_t wrappers = 2 * strlen("<style>\n\n</style>") + 2 * strlen("<script>\n\n</script>");
  assert_int_equal(len, sip__asset_html_len - markers + wrappers + sip__asset_uplot_js_len +
                            sip__asset_uplot_css_len + sip__asset_js_len + sip__asset_css_len);
  sip__free(page);
}

static void test_report_escapes_its_snapshot(void **state) {
  (void)state;
  size_t len = 0;
  char *page = sip__dash_render("{\"pools\":[{\"error\":\"</script><!--x\"}]}", &len);
  assert_non_null(page);
  const char *snap = strstr(page, "<script type=\"application/json\" id=\"sip-snapshot\">");
  assert_non_null(snap);
  const char *want = "<script type=\"application/json\" id=\"sip-snapshot\">"
                     "{\"pools\":[{\"error\":\"\\u003c/script>\\u003c!--x\"}]}</script>\n"
                     SIP__DASH_HISTORY_EMPTY;
  assert_int_equal(strncmp(snap, want, strlen(want)), 0);
  /* The data comes before the scripts that read it. */
  assert_true(snap < strstr(page, "<script>\n"));
  assert_int_equal(count(page, "</script>"), 4);
  sip__free(page);
}

static void test_routes(void **state) {
  (void)state;
  static const struct {
    const char *url;
    sip__route_kind_t kind;
  } want[] = {{"/dashboard", R_DASHBOARD},
              {"/dashboard/", R_DASHBOARD},
              {"/v2/dashboard/data", R_DASH_DATA},
              {"/v2/dashboard/report", R_DASH_REPORT}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char *m = NULL, *v = NULL;
    const sip__http_route_t *r = sip__http_route_match(want[i].url, &m, &v);
    assert_non_null(r);
    assert_int_equal(r->kind, want[i].kind);
    assert_non_null(r->get);
    assert_null(r->post);
    assert_null(m);
    assert_null(v);
    assert_true(sip__http_dashboard_route(r->kind));
  }
  /* The dashboard's own port: read-only routes only. */
  assert_true(sip__http_dashboard_route(R_EVENTS));
  assert_true(sip__http_dashboard_route(R_METRICS));
  assert_true(sip__http_dashboard_route(R_LIVE));
  static const sip__route_kind_t refused[] = {R_INFER,     R_ADMIN,       R_REPO_LOAD,   R_REPO_UNLOAD,
                                         R_REPO_INDEX, R_LOGGING,    R_TRACE,       R_SYS_SHM,
                                         R_CUDA_SHM,  R_MODEL,       R_CONFIG,      R_SERVER};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
    assert_false(sip__http_dashboard_route(refused[i]));
}

static void test_data(void **state) {
  (void)state;
  sip_server_options_t *o = sip_server_options_new();
  assert_non_null(o);
  sip_server_options_set_listen(o, 0);
  sip_server_options_set_wait_for_load(o, 1);
  sip_error_t *e = sip_server_options_set_config_string(
      o,
      "session_pools:\n"
      "  - {name: a, backend: builtin, pool_size: 2, priority: high}\n"
      "  - {name: b, backend: builtin, pool_size: 1,\n"
      "     dynamic_batching: {max_batch_size: 4}}\n",
      ".");
  sip_server_t *s = NULL;
  if (!e) e = sip_server_new(o, &s);
  sip_server_options_free(o);
  if (e) fail_msg("server: %s", sip_error_message(e));
  json_t *d = sip__dash_data(s);
  assert_non_null(d);
  assert_true(json_integer_value(json_object_get(d, "time_us")) > 0);
  assert_true(json_is_false(json_object_get(d, "draining")));
  assert_true(json_is_true(json_object_get(d, "ready")));
  json_t *pools = json_object_get(d, "pools");
  assert_int_equal(json_array_size(pools), 2);
  json_t *a = json_array_get(pools, 0), *b = json_array_get(pools, 1);
  assert_string_equal(json_string_value(json_object_get(a, "name")), "a");
  assert_string_equal(json_string_value(json_object_get(a, "state")), "READY");
  assert_string_equal(json_string_value(json_object_get(a, "priority")), "high");
  assert_string_equal(json_string_value(json_object_get(a, "backend")), "builtin");
  assert_int_equal(json_integer_value(json_object_get(a, "pool_size")), 2);
  assert_int_equal(json_array_size(json_object_get(a, "sessions")), 2);
  assert_non_null(json_object_get(json_object_get(a, "latency_us"), "total"));
  assert_non_null(json_object_get(a, "queued_by_priority"));
  assert_null(json_object_get(a, "dynamic_batching"));
  assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "dynamic_batching"),
                                                      "max_batch_size")),
                   4);
  /* The repository index: config pools are listed with their source. */
  json_t *repo = json_object_get(d, "repository");
  assert_int_equal(json_array_size(repo), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(repo, 0), "source")),
                      "config");
  /* The report of it renders, its snapshot the same document. */
  char *txt = json_dumps(d, JSON_COMPACT);
  size_t len = 0;
  char *page = sip__dash_render(txt, &len);
  assert_non_null(page);
  assert_non_null(strstr(page, "\"name\":\"a\""));
  sip__free(page);
  free(txt);
  json_decref(d);
  sip_server_free(s);
}

static void test_out_of_memory(void **state) {
  (void)state;
  /* Every allocation failing in turn: NULL, never a partial page. */
  for (long n = 0; n < 40; n++) {
    sip__alloc_fail_after(n);
    size_t len = 0;
    char *page = sip__dash_render("{}", &len);
    sip__alloc_fail_after(-1);
    if (page) {
      assert_non_null(strstr(page, "</html>"));
      sip__free(page);
      break;
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_live_page),   cmocka_unit_test(test_report_escapes_its_snapshot),
      cmocka_unit_test(test_routes),      cmocka_unit_test(test_data),
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
