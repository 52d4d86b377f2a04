/* sip — bearer tokens per API group (auth.h, docs/security.md). */
#include "core/auth.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

bool sip__ct_equal(const void *a, size_t an, const void *b, size_t bn) {
  /* Compare over the longer length, reading each side modulo its own
   * length, so the loop's duration does not reveal where the first
   * difference is; a length mismatch is folded in at the end. */
  const volatile uint8_t *x = a, *y = b;
  size_t n = an > bn ? an : bn;
  uint8_t diff = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t cx = an ? x[i % an] : 0, cy = bn ? y[i % bn] : 0;
    diff |= (uint8_t)(cx ^ cy);
  }
  return (diff | (uint8_t)(an != bn)) == 0;
}

const char *sip__auth_group_name(int group) {
  switch (group) {
  case SIP__AUTH_INFERENCE: return "inference";
  case SIP__AUTH_MANAGEMENT: return "management";
  case SIP__AUTH_METRICS: return "metrics";
  default: return "open";
  }
}

bool sip__auth_enabled(const sip__auth_t *a) {
  if (!a) return false;
  for (int g = 0; g < SIP__AUTH_GROUPS; g++)
    if (a->n_tokens[g]) return true;
  return false;
}

static bool in_group(const sip__auth_t *a, int g, const char *token, size_t len) {
  bool hit = false;
  for (size_t i = 0; i < a->n_tokens[g]; i++)
    hit |= sip__ct_equal(a->tokens[g][i], strlen(a->tokens[g][i]), token, len);
  return hit;
}

bool sip__auth_token_ok(const sip__auth_t *a, int group, const char *token, size_t len) {
  if (!a || !token || group < 0 || group >= SIP__AUTH_GROUPS) return false;
  bool own = in_group(a, group, token, len);
  bool mgmt = in_group(a, SIP__AUTH_MANAGEMENT, token, len);
  return own || mgmt;
}

sip__auth_verdict_t sip__auth_check(const sip__auth_t *a, int group, const char *token,
                                    size_t len, bool local) {
  if (group < 0 || group >= SIP__AUTH_GROUPS) return SIP__AUTH_OK;
  if (!a || !a->n_tokens[group]) {
    /* An open group; management without tokens is open to local peers
     * only (a management token, when some other group is the one with
     * tokens, cannot exist: n_tokens[MANAGEMENT] is 0 here). */
    if (group == SIP__AUTH_MANAGEMENT && !local) return SIP__AUTH_NOT_LOCAL;
    return SIP__AUTH_OK;
  }
  if (!token) return SIP__AUTH_MISSING;
  return sip__auth_token_ok(a, group, token, len) ? SIP__AUTH_OK : SIP__AUTH_BAD_TOKEN;
}

unsigned sip__auth_groups(const sip__auth_t *a, const char *token, size_t len, bool local) {
  unsigned m = 0;
  for (int g = 0; g < SIP__AUTH_GROUPS; g++)
    if (sip__auth_check(a, g, token, len, local) == SIP__AUTH_OK) m |= 1u << g;
  return m;
}

bool sip__addr_is_local(const struct sockaddr *sa) {
  if (!sa) return false;
  if (sa->sa_family == AF_UNIX) return true;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const void *)sa;
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const void *)sa;
    const uint8_t *b = in6->sin6_addr.s6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && b[12] == 127;
  }
  return false;
}

const char *sip__auth_bearer(const char *value, size_t *len) {
  if (!value) return NULL;
  while (*value == ' ' || *value == '\t') value++;
  if (strncasecmp(value, "Bearer", 6) || (value[6] != ' ' && value[6] != '\t')) return NULL;
  const char *t = value + 6;
  while (*t == ' ' || *t == '\t') t++;
  size_t n = strlen(t);
  while (n && (t[n - 1] == ' ' || t[n - 1] == '\t')) n--;
  if (!n) return NULL;
  *len = n;
  return t;
}

#define PEM_MAX ((size_t)1 << 20)

sip_error_t *sip__read_pem(const char *path, const char *what, char **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  char eb[128];
  if (!f)
    return sip_error_new(SIP_UNAVAILABLE, "server.tls.%s: cannot read %s: %s", what, path,
                         strerror_r(errno, eb, sizeof eb));
  char *buf = sip__malloc(PEM_MAX + 1);
  size_t n = buf ? fread(buf, 1, PEM_MAX + 1, f) : 0;
  int err = ferror(f);
  fclose(f);
  if (!buf) return SIP__OOM();
  buf[n > PEM_MAX ? PEM_MAX : n] = '\0';
  sip_error_t *e = NULL;
  if (err) e = sip_error_new(SIP_UNAVAILABLE, "server.tls.%s: cannot read %s", what, path);
  else if (n > PEM_MAX) e = sip_error_new(SIP_UNAVAILABLE, "server.tls.%s: %s is larger than 1 MiB; "
                                          "expected a PEM file", what, path);
  else if (!n || !memmem(buf, n, "-----BEGIN ", 11))
    e = sip_error_new(SIP_UNAVAILABLE, "server.tls.%s: %s is not PEM; expected a file with a "
                      "-----BEGIN ...----- block", what, path);
  if (e) {
    sip__free_secret(buf);
    return e;
  }
  *out = buf;
  return NULL;
}

void sip__free_secret(char *s) {
  if (!s) return;
  volatile char *v = s;
  for (size_t i = 0; v[i]; i++) v[i] = 0;
  sip__free(s);
}
