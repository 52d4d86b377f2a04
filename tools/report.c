/* sip CLI — `sip report --html FILE`: the dashboard's self-contained HTML
 * report (docs/dashboard.md), fetched from a running sipd's
 * GET /v2/dashboard/report and written to FILE ("-": standard output).
 *
 * With an http:// endpoint the report comes from there. With a native
 * endpoint the server's status names its addresses; the first HTTP one
 * (server.http or server.dashboard) is used, its wildcard host (0.0.0.0,
 * [::]) replaced by the native endpoint's host, or the loopback for a unix
 * socket. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sip/client.h"
#include "tools/cli.h"

typedef struct body {
  char *p;
  size_t n;
  int oom;
} body_t;

static size_t collect(char *data, size_t size, size_t nmemb, void *user) {
  body_t *b = user;
  size_t n = size * nmemb;
  char *p = realloc(b->p, b->n + n + 1);
  if (!p) {
    b->oom = 1;
    return 0;
  }
  memcpy(p + b->n, data, n);
  b->n += n;
  p[b->n] = '\0';
  b->p = p;
  return n;
}

/* The base URL ("http://host:port") to fetch from, or NULL after saying
 * why on stderr. Owned (free). */
static char *http_base(sip_client_t *c, const char *endpoint) {
  if (!strncmp(endpoint, "http://", 7)) {
    char *b = strdup(endpoint);
    size_t n = b ? strlen(b) : 0;
    while (n && b[n - 1] == '/') b[--n] = '\0';
    if (n > 10 && !strcmp(b + n - 10, "/dashboard")) b[n - 10] = '\0';
    return b;
  }
  char *txt = NULL;
  sip_error_t *e = sip_client_info(c, 3, &txt);
  if (e) {
    fprintf(stderr, "sip: %s: %s\n", sip_code_name(sip_error_code(e)), sip_error_message(e));
    sip_error_free(e);
    return NULL;
  }
  json_t *root = json_loads(txt, 0, NULL);
  sip_client_free_string(txt);
  const char *found = NULL;
  size_t i;
  json_t *ep;
  json_array_foreach(json_object_get(root, "endpoints"), i, ep) {
    const char *s = json_string_value(ep);
    if (s && !strncmp(s, "http://", 7)) {
      found = s;
      break;
    }
  }
  if (!found) {
    fprintf(stderr, "sip: report: the server at %s has no HTTP address; expected server.http or "
                    "server.dashboard in its config (or -e http://HOST:PORT)\n", endpoint);
    json_decref(root);
    return NULL;
  }
  /* host and port of the address, without a path */
  const char *hp = found + 7;
  size_t hp_n = strcspn(hp, "/");
  const char *colon = NULL;
  for (const char *q = hp; q < hp + hp_n; q++)
    if (*q == ':') colon = q;
  char host[300];
  snprintf(host, sizeof host, "%.*s", (int)(colon ? colon - hp : (long)hp_n), hp);
  const char *port = colon ? colon + 1 : "80";
  int port_n = (int)(hp + hp_n - port);
  if (!strcmp(host, "0.0.0.0") || !strcmp(host, "[::]")) {
    /* A wildcard address: reach it where the native endpoint is. */
    const char *h = !strncmp(endpoint, "tcp://", 6) ? endpoint + 6 : NULL;
    size_t h_n = 0;
    if (h) {
      const char *last = strrchr(h, ':');
      h_n = last ? (size_t)(last - h) : strlen(h);
    }
    if (h && h_n)
      snprintf(host, sizeof host, "%.*s", (int)h_n, h);
    else
      snprintf(host, sizeof host, "%s", !strcmp(host, "[::]") ? "[::1]" : "127.0.0.1");
  }
  char *b = malloc(strlen(host) + (size_t)port_n + 16);
  if (b) sprintf(b, "http://%s:%.*s", host, port_n, port);
  json_decref(root);
  return b;
}

int sip_cli_report(sip_client_t *c, const char *endpoint, int argc, char **argv) {
  const char *out = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--html") && i + 1 < argc) {
      out = argv[++i];
    } else {
      fprintf(stderr, "sip: report: unknown option '%s'; expected --html FILE\n", argv[i]);
      return 2;
    }
  }
  if (!out) {
    fprintf(stderr, "sip: report: expected --html FILE (- for standard output)\n");
    return 2;
  }
  char *base = http_base(c, endpoint);
  if (!base) return 1;
  char *url = malloc(strlen(base) + 32);
  if (!url) {
    free(base);
    return 1;
  }
  sprintf(url, "%s/v2/dashboard/report", base);
  free(base);
  body_t b = {0};
  CURL *h = curl_easy_init();
  long status = 0;
  CURLcode rc = CURLE_FAILED_INIT;
  if (h) {
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
  }
  int ret = 0;
  if (rc != CURLE_OK || b.oom) {
    fprintf(stderr, "sip: report: GET %s failed: %s\n", url,
            b.oom ? "out of memory" : curl_easy_strerror(rc));
    ret = 1;
  } else if (status != 200) {
    fprintf(stderr, "sip: report: GET %s answered %ld: %s\n", url, status, b.p ? b.p : "");
    ret = 1;
  } else {
    FILE *f = strcmp(out, "-") ? fopen(out, "wb") : stdout;
    int ok = f && fwrite(b.p, 1, b.n, f) == b.n;
    if (f && f != stdout && fclose(f)) ok = 0;
    if (!ok) {
      fprintf(stderr, "sip: report: cannot write %s\n", out);
      ret = 1;
    } else if (f != stdout) {
      fprintf(stderr, "sip: report written to %s (%zu bytes)\n", out, b.n);
    }
  }
  free(b.p);
  free(url);
  return ret;
}
