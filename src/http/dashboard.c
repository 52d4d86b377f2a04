/* sip — the live dashboard (docs/dashboard.md): GET /dashboard (the page),
 * GET /v2/dashboard/data (what it shows, as JSON) and GET
 * /v2/dashboard/report (the page as a self-contained report: the same
 * document with a snapshot of the data in it). The page refreshes from
 * /v2/events (Server-Sent Events) and the data route.
 *
 * The page's files (src/http/dashboard/: HTML, CSS, JS; uPlot from
 * scripts/deps.sh) are C arrays built by CMake (embed.cmake). The template
 * names where they go with markers that are replaced here:
 *   <!--sip:style NAME-->   a stylesheet, inlined
 *   <!--sip:script NAME-->  a script, inlined
 *   <!--sip:data-->         the report's data blocks (nothing for the live page)
 * so the live page and the report are one document, one request each, and
 * neither loads anything from elsewhere.
 */
#include <jansson.h>
#include <string.h>

#include "core/core.h"
#include "core/wbuf.h"
#include "http/http.h"
#include "http/http_impl.h"
#include "server/introspect.h"

/* <build>/dashboard_assets.c */
extern const unsigned char sip__asset_html[], sip__asset_css[], sip__asset_js[],
    sip__asset_uplot_js[], sip__asset_uplot_css[];
extern const size_t sip__asset_html_len, sip__asset_css_len, sip__asset_js_len,
    sip__asset_uplot_js_len, sip__asset_uplot_css_len;

typedef struct asset {
  const char *kind, *name;
  const unsigned char *data;
  const size_t *len;
} asset_t;

static const asset_t assets[] = {
    {"style", "uplot", sip__asset_uplot_css, &sip__asset_uplot_css_len},
    {"style", "dashboard", sip__asset_css, &sip__asset_css_len},
    {"script", "uplot", sip__asset_uplot_js, &sip__asset_uplot_js_len},
    {"script", "dashboard", sip__asset_js, &sip__asset_js_len},
};

/* ---- a growing string (core's buffer) ---------------------------------------- */

static void puts_(sip__wbuf_t *b, const char *s) { sip__wbuf_put(b, s, strlen(s)); }

/* JSON text made safe inside a <script> element: '<' only appears within
 * JSON strings, where \u003c means the same, so no "</script" or "<!--"
 * can end or confuse the element. */
static void put_json_in_script(sip__wbuf_t *b, const char *json) {
  for (const char *p = json; *p;) {
    size_t n = strcspn(p, "<");
    sip__wbuf_put(b, p, n);
    p += n;
    if (*p == '<') {
      puts_(b, "\\u003c");
      p++;
    }
  }
}

/* ---- the page ---------------------------------------------------------------- */

char *sip__dash_render(const char *snapshot, size_t *len) {
  sip__wbuf_t b = {0};
  const char *t = (const char *)sip__asset_html, *end = t + sip__asset_html_len;
  static const char open[] = "<!--sip:";
  while (t < end) {
    const char *m = strstr(t, open);
    const char *close = m ? strstr(m, "-->") : NULL;
    if (!m || !close) {
      sip__wbuf_put(&b, t, (size_t)(end - t));
      break;
    }
    sip__wbuf_put(&b, t, (size_t)(m - t));
    const char *word = m + sizeof open - 1;
    size_t wn = (size_t)(close - word);
    int done = 0;
    if (wn == 4 && !memcmp(word, "data", 4)) {
      if (snapshot) {
        puts_(&b, "<script type=\"application/json\" id=\"sip-snapshot\">");
        put_json_in_script(&b, snapshot);
        /* The export button puts the page's own history here. */
        puts_(&b, "</script>\n" SIP__DASH_HISTORY_EMPTY);
      }
      done = 1;
    }
    for (size_t i = 0; !done && i < sizeof assets / sizeof assets[0]; i++) {
      size_t kn = strlen(assets[i].kind), nn = strlen(assets[i].name);
      if (wn != kn + 1 + nn || memcmp(word, assets[i].kind, kn) || word[kn] != ' ' ||
          memcmp(word + kn + 1, assets[i].name, nn))
        continue;
      puts_(&b, !strcmp(assets[i].kind, "style") ? "<style>\n" : "<script>\n");
      sip__wbuf_put(&b, assets[i].data, *assets[i].len);
      puts_(&b, !strcmp(assets[i].kind, "style") ? "\n</style>" : "\n</script>");
      done = 1;
    }
    if (!done) sip__wbuf_put(&b, m, (size_t)(close + 3 - m)); /* not ours: left as it is */
    t = close + 3;
  }
  sip__wbuf_u8(&b, 0); /* the text's end, not counted in *len */
  if (b.oom) {
    sip__wbuf_free(&b);
    return NULL;
  }
  *len = b.len - 1;
  return (char *)b.data;
}

/* ---- the data ---------------------------------------------------------------- */

/* The pool of `list` named like `p` (name and version), or NULL. */
static json_t *same_pool(json_t *list, json_t *p) {
  const char *name = json_string_value(json_object_get(p, "name"));
  json_t *ver = json_object_get(p, "version");
  size_t i;
  json_t *o;
  json_array_foreach(list, i, o) {
    json_t *v = json_object_get(o, "version");
    const char *oname = json_string_value(json_object_get(o, "name"));
    if (name && oname && !strcmp(name, oname) &&
        (json_is_null(v) ? json_is_null(ver) || !ver : json_equal(v, ver)))
      return o;
  }
  return NULL;
}

json_t *sip__dash_data(sip_server_t *s) {
  json_t *root = sip__server_info(s, SIP_INFO_STATUS);
  json_t *cfg = sip__server_info(s, SIP_INFO_POOLS);
  if (!root || !cfg) {
    json_decref(root);
    json_decref(cfg);
    return NULL;
  }
  json_object_set_new(root, "time_us", json_integer((json_int_t)sip__wall_us()));
  json_object_set_new(root, "draining", json_boolean(sip_server_draining(s)));
  /* What the pools are configured with, beside their state and counters
   * (two snapshots: a pool loaded in between has no settings this time). */
  static const char *const keep[] = {"backend", "priority", "pool_size", "model_path",
                                     "dynamic_batching", "source"};
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(root, "pools"), i, p) {
    json_t *c = same_pool(json_object_get(cfg, "pools"), p);
    for (size_t k = 0; c && k < sizeof keep / sizeof keep[0]; k++) {
      json_t *v = json_object_get(c, keep[k]);
      if (v) json_object_set(p, keep[k], v);
    }
  }
  json_decref(cfg);
  /* The repository's models: a load that failed has no pool to show, only
   * its entry and reason here. */
  char *idx = sip_server_repository_index(s, 0);
  json_t *doc = idx ? json_loads(idx, 0, NULL) : NULL;
  sip_free(idx);
  json_t *models = json_object_get(doc, "models");
  json_object_set_new(root, "repository", json_is_array(models) ? json_incref(models) : json_array());
  json_decref(doc);
  return root;
}

/* ---- the routes -------------------------------------------------------------- */

/* Sends a rendered page (owned; NULL: out of memory), never cached. */
static enum MHD_Result send_page(sip__hreq_t *q, char *page, size_t len, const char *disposition) {
  if (!page) return sip__http_send_error_msg(q->conn, 500, "out of memory");
  struct MHD_Response *r =
      MHD_create_response_from_buffer_with_free_callback(len, page, sip__free);
  if (!r) {
    sip__free(page);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  if (disposition) MHD_add_response_header(r, "Content-Disposition", disposition);
  return sip__http_queue(q->conn, 200, r, "text/html; charset=utf-8");
}

enum MHD_Result sip__http_dashboard(sip__hreq_t *q) {
  size_t len = 0;
  char *page = sip__dash_render(NULL, &len);
  return send_page(q, page, len, NULL);
}

enum MHD_Result sip__http_dashboard_data(sip__hreq_t *q) {
  json_t *d = sip__dash_data(q->h->s);
  if (!d) return sip__http_send_error_msg(q->conn, 500, "out of memory");
  return sip__http_send_json(q->conn, 200, d);
}

enum MHD_Result sip__http_dashboard_report(sip__hreq_t *q) {
  json_t *d = sip__dash_data(q->h->s);
  char *txt = d ? json_dumps(d, JSON_COMPACT) : NULL;
  json_decref(d);
  size_t len = 0;
  char *page = txt ? sip__dash_render(txt, &len) : NULL;
  sip_free(txt);
  return send_page(q, page, len, "inline; filename=\"sip-report.html\"");
}

int sip__http_dashboard_route(sip__route_kind_t kind) {
  switch (kind) {
  case R_DASHBOARD:
  case R_DASH_DATA:
  case R_DASH_REPORT:
  case R_EVENTS:
  case R_METRICS:
  case R_LIVE:
  case R_READY:
    return 1;
  default:
    return 0;
  }
}
