/* libFuzzer target for what the security checks parse from requests
 * (docs/security.md): the Authorization header's Bearer token
 * (core/auth.c), the Host header against the allowed hosts (src/http/auth.c),
 * the constant-time compare, and the removal of the server's directories
 * from answers (core/redact.c).
 *
 * Input: byte 0 picks the check; the rest is the header value or text.
 * Beyond "no crash, no leak" it checks the contracts: a Bearer token is a
 * non-empty span inside the value without surrounding blanks; localhost
 * names are always allowed and the verdict does not depend on the port;
 * sip__ct_equal agrees with memcmp; redacted text is never longer than its
 * input and is NUL-terminated at its length.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/auth.h"
#include "core/core.h"
#include "core/redact.h"
#include "http/http.h"
#include "http/http_impl.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

static void check_bearer(const char *v, size_t n) {
  size_t len = 0;
  const char *t = sip__auth_bearer(v, &len);
  if (!t) return;
  CHECK(len > 0 && t >= v && t + len <= v + n);
  CHECK(t[0] != ' ' && t[0] != '\t' && t[len - 1] != ' ' && t[len - 1] != '\t');
}

static void check_host(const char *v) {
  static char *hosts[] = {"sip.example.com", "[::1]"};
  sip__config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.http = "127.0.0.1:8000";
  int plain = sip__http_host_allowed(&cfg, v);
  (void)plain;
  cfg.allowed_hosts = hosts;
  cfg.n_allowed_hosts = 2;
  int listed = sip__http_host_allowed(&cfg, v);
  /* The same host with a port gives the same verdict (a name with a ':' of
   * its own, an IPv6 address without brackets, is left alone). */
  if (!strchr(v, ':') && strlen(v) < 200) {
    char with_port[256];
    snprintf(with_port, sizeof with_port, "%s:1234", v);
    CHECK(sip__http_host_allowed(&cfg, with_port) == listed);
  }
  cfg.allowed_hosts = NULL;
  cfg.n_allowed_hosts = 0;
  CHECK(sip__http_host_allowed(&cfg, "localhost:9") && sip__http_host_allowed(&cfg, "[::1]:9"));
}

static void check_ct(const uint8_t *p, size_t n) {
  size_t half = n / 2;
  const uint8_t *a = p, *b = p + half;
  size_t an = half, bn = n - half;
  CHECK(sip__ct_equal(a, an, b, bn) == (an == bn && !memcmp(a, b, an)));
  CHECK(sip__ct_equal(a, an, a, an));
}

static void check_redact(const char *v, size_t n) {
  static int once;
  if (!once) {
    once = 1;
    sip__redact_add_dir("/srv/sip");
    sip__redact_add_dir("/srv/sip/models");
    sip__redact_add_dir("/tmp/x");
  }
  size_t out_n = 0;
  char *r = sip__redacted(v, n, &out_n);
  if (!r) return;
  CHECK(out_n <= n && r[out_n] == '\0');
  sip__free(r);
  const char *p = sip__redact_path(v);
  CHECK(p >= v && p <= v + strlen(v));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  char *v = malloc(size); /* exactly sized, NUL-terminated: reads past it are ASan reports */
  if (!v) return 0;
  memcpy(v, data + 1, size - 1);
  v[size - 1] = '\0';
  size_t n = strlen(v);
  switch (data[0] % 4) {
  case 0: check_bearer(v, n); break;
  case 1: check_host(v); break;
  case 2: check_ct(data + 1, size - 1); break;
  default: check_redact(v, n); break;
  }
  free(v);
  return 0;
}
