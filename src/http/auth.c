/* sip — the HTTP front-end's request guard (docs/security.md), run once
 * the headers of a request are in, before its route sees it:
 *
 *   1. management routes: the Host header must name this server
 *      (server.allowed_hosts, or the defaults): else 421 Misdirected
 *      Request (RFC 9110 15.5.20), which also stops DNS rebinding;
 *   2. management POSTs: a cross-site request is refused 403 (an Origin
 *      that is not the Host, "Sec-Fetch-Site: cross-site", or a body type
 *      a web page may send without a CORS preflight and no JSON route
 *      reads: text/plain, multipart/form-data);
 *   3. every route but health and readiness: the bearer token of its API
 *      group (core/auth.h): else 401 with WWW-Authenticate, or 403 for
 *      management from a remote peer when no management token is set.
 */
#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/auth.h"
#include "core/core.h"
#include "http/http.h"
#include "http/http_impl.h"

int sip__http_route_group(sip__route_kind_t kind) {
  switch (kind) {
  case R_LIVE:
  case R_READY:
  case R_MODEL_READY:
  case R_NONE:
    return SIP__AUTH_OPEN;
  case R_SERVER:
  case R_MODEL:
  case R_CONFIG:
  case R_INFER:
  case R_CUDA_SHM:
  case R_SYS_SHM:
    return SIP__AUTH_INFERENCE;
  case R_STATS:
  case R_ALL_STATS:
  case R_METRICS:
  case R_EVENTS:
  case R_STATUS:
  case R_DASHBOARD:
  case R_DASH_DATA:
  case R_DASH_REPORT:
    return SIP__AUTH_METRICS;
  case R_REPO_INDEX:
  case R_REPO_LOAD:
  case R_REPO_UNLOAD:
  case R_LOGGING:
  case R_TRACE:
  case R_ADMIN:
    return SIP__AUTH_MANAGEMENT;
  default:
    break;
  }
  return SIP__AUTH_MANAGEMENT; /* a route added later is closed until it is placed here */
}

/* An optional ":port" after a host: 1..5 digits. */
static int port_ok(const char *p) {
  if (!*p) return 1;
  if (*p++ != ':') return 0;
  size_t n = strspn(p, "0123456789");
  return n >= 1 && n <= 5 && !p[n];
}

/* The host part of an authority "host[:port]" or "[v6]:port": *len bytes
 * at the returned pointer (brackets removed); NULL when the authority is
 * not one (RFC 3986 3.2: "localhost:80@evil.example" has userinfo and no
 * such port, so it names neither localhost nor anything else). */
static const char *authority_host(const char *a, size_t *len) {
  if (a[0] == '[') {
    const char *rb = strchr(a, ']');
    size_t n = rb ? (size_t)(rb - a - 1) : 0;
    if (!rb || !n || strspn(a + 1, "0123456789abcdefABCDEF:.") != n || !port_ok(rb + 1))
      return NULL;
    *len = n;
    return a + 1;
  }
  const char *colon = strchr(a, ':');
  if (colon && strchr(colon + 1, ':')) { /* an unbracketed IPv6 address ("::1") */
    *len = strlen(a);
    return strspn(a, "0123456789abcdefABCDEF:.") == *len ? a : NULL;
  }
  *len = colon ? (size_t)(colon - a) : strlen(a);
  static const char reg_name[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~";
  if (strspn(a, reg_name) != *len || !port_ok(a + *len)) return NULL;
  return a;
}

static int host_is(const char *h, size_t n, const char *name) {
  size_t k = strlen(name);
  if (k >= 2 && name[0] == '[' && name[k - 1] == ']') name++, k -= 2;
  return n == k && !strncasecmp(h, name, n);
}

static int wildcard(const char *host, size_t n) {
  return n == 0 || host_is(host, n, "0.0.0.0") || host_is(host, n, "::") ||
         host_is(host, n, "*");
}

int sip__http_host_allowed(const sip__config_t *cfg, const char *host_header) {
  if (!host_header) return 1; /* HTTP/1.0 without Host: no name to be misled by */
  size_t n;
  const char *h = authority_host(host_header, &n);
  if (!h) return 0;
  if (cfg->allowed_hosts) {
    for (size_t i = 0; i < cfg->n_allowed_hosts; i++)
      if (!strcmp(cfg->allowed_hosts[i], "*") || host_is(h, n, cfg->allowed_hosts[i])) return 1;
    return 0;
  }
  static const char *const local[] = {"localhost", "localhost.localdomain", "ip6-localhost",
                                      "127.0.0.1", "::1"};
  for (size_t i = 0; i < sizeof local / sizeof *local; i++)
    if (host_is(h, n, local[i])) return 1;
  if (!cfg->http) return 0;
  size_t ln;
  const char *listen = authority_host(cfg->http, &ln);
  if (!listen) return 0;
  if (wildcard(listen, ln)) return cfg->auth.n_tokens[SIP__AUTH_MANAGEMENT] > 0;
  return ln == n && !strncasecmp(listen, h, n);
}

/* Why a management POST looks cross-site, or NULL. `tls`: this server
 * speaks HTTPS, so a same-site Origin is https://HOST and never http://. */
static const char *cross_site(struct MHD_Connection *c, int tls) {
  const char *site = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Site");
  if (site && !strcasecmp(site, "cross-site")) return "the request is cross-site (Sec-Fetch-Site)";
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  if (origin) {
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    const char *scheme = tls ? "https://" : "http://";
    size_t k = strlen(scheme);
    if (strncasecmp(origin, scheme, k) || !host || strcasecmp(origin + k, host))
      return tls ? "its Origin is not https:// and the Host it was sent to"
                 : "its Origin is not http:// and the Host it was sent to (this server does not "
                   "speak HTTPS)";
  }
  const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
  if (ct) {
    /* Bodies an HTML form may send without a CORS preflight and that could
     * pass for JSON (text/plain: `name=value` unencoded) or that no JSON
     * route reads. application/x-www-form-urlencoded is let through: curl -d
     * and urllib send it by default, a form cannot write JSON in it (braces
     * and quotes are percent-encoded), and browsers send Origin with every
     * cross-site POST, which is refused above. */
    static const char *const simple[] = {"text/plain", "multipart/form-data"};
    for (size_t i = 0; i < sizeof simple / sizeof *simple; i++) {
      size_t k = strlen(simple[i]);
      if (!strncasecmp(ct, simple[i], k) && (ct[k] == '\0' || ct[k] == ';' || ct[k] == ' '))
        return "its Content-Type is one a web page may send cross-site (text/plain or "
               "multipart/form-data); expected application/json (or none)";
    }
  }
  return NULL;
}

static void deny(sip__hreq_t *q, unsigned status, int bearer, const char *fmt, const char *a,
                 const char *b) {
  q->denied = status;
  q->deny_bearer = bearer;
  snprintf(q->deny_msg, sizeof q->deny_msg, fmt, a, b);
}

void sip__http_guard(sip__hreq_t *q, const char *method) {
  struct MHD_Connection *c = q->conn;
  const sip__config_t *cfg = q->h->cfg;
  int group = sip__http_route_group(q->kind);
  if (group == SIP__AUTH_OPEN) return;
  const char *what = sip__auth_group_name(group);
  if (group == SIP__AUTH_MANAGEMENT) {
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!sip__http_host_allowed(cfg, host)) {
      sip__log(SIP__LOG_WARN, "http request refused", "reason=\"foreign Host\" host=\"%.100s\"",
               host);
      return deny(q, 421, 0, "this server does not answer management requests for Host "
                  "'%.100s'%s; expected one of server.allowed_hosts (docs/security.md)", host, "");
    }
    const char *why = !strcmp(method, MHD_HTTP_METHOD_POST) ? cross_site(c, cfg->tls_cert_file != NULL) : NULL;
    if (why) {
      sip__log(SIP__LOG_WARN, "http request refused", "reason=\"cross-site\" detail=\"%s\"", why);
      return deny(q, 403, 0, "cross-site management request refused: %s%s", why, "");
    }
  }
  const char *value = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  size_t len = 0;
  const char *token = sip__auth_bearer(value, &len);
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  bool local = ci && sip__addr_is_local(ci->client_addr);
  switch (sip__auth_check(&cfg->auth, group, token, len, local)) {
  case SIP__AUTH_OK:
    return;
  case SIP__AUTH_MISSING:
    return deny(q, 401, 1, "%s requests need a bearer token on this server; expected an "
                "'Authorization: Bearer TOKEN' header with a token of server.auth.%s_tokens",
                what, what);
  case SIP__AUTH_BAD_TOKEN:
    sip__log(SIP__LOG_WARN, "http authentication failed", "group=%s", what);
    return deny(q, 401, 2, "the bearer token is not valid for %s requests; expected a token of "
                "server.auth.%s_tokens", what, what);
  case SIP__AUTH_NOT_LOCAL:
    return deny(q, 403, 0, "%s requests are accepted only from loopback unless "
                "server.auth.%s_tokens is set", what, what);
  }
}

int sip__http_deny_now(sip__hreq_t *q) {
  const char *cl = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND,
                                               MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (!cl) return 0;
  char *end = NULL;
  errno = 0;
  unsigned long long n = strtoull(cl, &end, 10);
  return errno == ERANGE || (end != cl && n > q->h->cfg->http_max_body_bytes);
}

enum MHD_Result sip__http_send_denied(sip__hreq_t *q) {
  size_t len;
  char *body = sip__ks_error_json(q->deny_msg, &len);
  if (!body) return MHD_NO;
  struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, sip__free);
  if (!r) {
    sip__free(body);
    return MHD_NO;
  }
  if (q->deny_bearer)
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                            q->deny_bearer == 2 ? "Bearer realm=\"sip\", error=\"invalid_token\""
                                                : "Bearer realm=\"sip\"");
  return sip__http_queue(q->conn, q->denied, r, "application/json");
}
