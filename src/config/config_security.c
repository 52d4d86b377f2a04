/* sip — the server section's security settings (docs/security.md): bearer
 * tokens per API group (server.auth), TLS (server.tls), the unix socket's
 * mode and owner, and the Host names the HTTP front-end answers. */
#include "config/parse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define TOKEN_MIN 8
#define TOKEN_MAX 4096
#define TOKENS_EXPECT                                                                          \
  "a list of tokens, each written as env:VARIABLE (read from the environment), "              \
  "file:PATH (the file's first line; relative to the config file) or the token itself; a "   \
  "token is 8..4096 visible ASCII characters"

static int parse_inference_tokens(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_management_tokens(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_metrics_tokens(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);

static const sip__field_t auth_fields[] = {
    {.name = "inference_tokens", .type = F_CUSTOM, .parse = parse_inference_tokens,
     .expect = TOKENS_EXPECT,
     .doc = "Tokens for inference, model metadata and shared memory; absent = open."},
    {.name = "management_tokens", .type = F_CUSTOM, .parse = parse_management_tokens,
     .expect = TOKENS_EXPECT,
     .doc = "Tokens for the model repository, admin (faults, session drain/resume), log and "
            "trace settings; also accepted by every other group; absent = loopback and unix "
            "socket peers only."},
    {.name = "metrics_tokens", .type = F_CUSTOM, .parse = parse_metrics_tokens,
     .expect = TOKENS_EXPECT,
     .doc = "Tokens for /metrics, statistics, status and events; absent = open."},
};
const sip__section_t sip__cfg_auth_section = {auth_fields, COUNT(auth_fields)};

static const sip__field_t tls_fields[] = {
    {.name = "cert_file", .type = F_STRING, .offset = offsetof(sip__config_t, tls_cert_file),
     .expect = "a PEM certificate (chain) file",
     .doc = "Certificate of the HTTP and gRPC front-ends, PEM; relative to the config file."},
    {.name = "key_file", .type = F_STRING, .offset = offsetof(sip__config_t, tls_key_file),
     .expect = "a PEM private key file",
     .doc = "Its private key, PEM; relative to the config file."},
};
const sip__section_t sip__cfg_tls_section = {tls_fields, COUNT(tls_fields)};

/* Reads one token source into an owned string, or fails saying why (never
 * quoting the token). */
static int token_value(sip__ctx_t *c, yaml_node_t *e, const char *ikey, char **out) {
  const char *s = text(e);
  size_t len = e->data.scalar.length;
  char *tok = NULL;
  if (len > 4 && !strncmp(s, "env:", 4)) {
    const char *val = getenv(s + 4);
    if (!val || !*val)
      return sip__cfg_fail(c, e->start_mark, ikey, "environment variable %s is not set; expected "
                      "it to hold the token", s + 4);
    tok = sip__strdup(val);
  } else if (len > 5 && !strncmp(s, "file:", 5)) {
    char *path = sip__cfg_resolve_path(c->base_dir, s + 5);
    if (!path) return sip__cfg_oom(c);
    FILE *f = fopen(path, "r");
    if (!f) {
      int err = errno;
      int rc = sip__cfg_fail(c, e->start_mark, ikey, "cannot read token file %s: %s; expected a "
                        "readable file holding the token", s + 5, strerror(err));
      sip__free(path);
      return rc;
    }
    sip__free(path);
    char line[TOKEN_MAX + 2];
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    tok = sip__strdup(line);
  } else {
    tok = sip__strndup(s, len);
  }
  if (!tok) return sip__cfg_oom(c);
  size_t n = strlen(tok);
  const char *why = n < TOKEN_MIN ? "is shorter than 8 characters"
                    : n > TOKEN_MAX ? "is longer than 4096 characters"
                                    : NULL;
  for (size_t i = 0; !why && i < n; i++)
    if (tok[i] < 0x21 || tok[i] > 0x7e)
      why = "holds a space, a control or a non-ASCII character";
  if (why) {
    sip__free(tok);
    return sip__cfg_fail(c, e->start_mark, ikey, "the token %s; expected %s", why, TOKENS_EXPECT);
  }
  *out = tok;
  return 0;
}

static int parse_tokens(sip__ctx_t *c, yaml_node_t *v, const char *key, sip__auth_t *a, int group) {
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, TOKENS_EXPECT);
  size_t n = seq_len(v);
  if (!n) return 0; /* an empty list: the group stays open */
  if (!(a->tokens[group] = sip__calloc(n, sizeof *a->tokens[group]))) return sip__cfg_oom(c);
  for (size_t i = 0; i < n; i++) {
    char ikey[KEY_MAX];
    sip__cfg_key_index(ikey, key, i);
    yaml_node_t *e = sip__cfg_seq_scalar(c, v, i, key, TOKENS_EXPECT);
    if (!e || token_value(c, e, ikey, &a->tokens[group][i])) return -1;
    a->n_tokens[group] = i + 1;
  }
  return 0;
}

static int parse_inference_tokens(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  return parse_tokens(c, v, key, &((sip__config_t *)base)->auth, SIP__AUTH_INFERENCE);
}
static int parse_management_tokens(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  return parse_tokens(c, v, key, &((sip__config_t *)base)->auth, SIP__AUTH_MANAGEMENT);
}
static int parse_metrics_tokens(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  return parse_tokens(c, v, key, &((sip__config_t *)base)->auth, SIP__AUTH_METRICS);
}

int sip__cfg_parse_socket_mode(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  const char *exp = CFG_SOCKET_MODE_EXPECT;
  if (sip__cfg_want_scalar(c, v, key, exp)) return -1;
  const char *s = text(v);
  size_t len = v->data.scalar.length;
  unsigned mode = 0;
  int ok = len >= 3 && len <= 4;
  for (size_t i = 0; ok && i < len; i++)
    if (s[i] < '0' || s[i] > '7') ok = 0;
    else mode = mode * 8 + (unsigned)(s[i] - '0');
  char shown[SHOW_MAX * 4 + 8];
  if (!ok || mode > 0777)
    return sip__cfg_fail(c, v->start_mark, key, "%s is not an octal permission mode; expected %s",
                    sip__cfg_show(shown, sizeof shown, s, len), exp);
  if ((mode & 0600) != 0600)
    return sip__cfg_fail(c, v->start_mark, key, "%s leaves the owner without read and write; "
                    "expected %s", sip__cfg_show(shown, sizeof shown, s, len), exp);
  ((sip__config_t *)base)->socket_mode = (int)mode;
  return 0;
}

int sip__cfg_parse_allowed_hosts(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__config_t *cfg = base;
  const char *exp = CFG_ALLOWED_HOSTS_EXPECT;
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, exp);
  size_t n = seq_len(v);
  if (!(cfg->allowed_hosts = sip__calloc(n ? n : 1, sizeof *cfg->allowed_hosts))) return sip__cfg_oom(c);
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = sip__cfg_seq_scalar(c, v, i, key, exp);
    if (!e) return -1;
    const char *s = text(e);
    size_t len = e->data.scalar.length;
    char ikey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
    sip__cfg_key_index(ikey, key, i);
    int ok = len > 0 && len <= 255;
    for (size_t j = 0; ok && j < len; j++)
      ok = (s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') ||
           (s[j] >= '0' && s[j] <= '9') || strchr(".-_:[]*", s[j]);
    if (!ok)
      return sip__cfg_fail(c, e->start_mark, ikey, "%s is not a host name; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
    if (!(cfg->allowed_hosts[i] = sip__strndup(s, len))) return sip__cfg_oom(c);
    cfg->n_allowed_hosts = i + 1;
  }
  return 0;
}

int sip__cfg_check_security(sip__ctx_t *c, sip__config_t *cfg, yaml_node_t *server) {
  if (!cfg->socket_mode) cfg->socket_mode = CFG_SOCKET_MODE_DEFAULT;
  if (!cfg->tls_cert_file != !cfg->tls_key_file)
    return sip__cfg_fail(c, server ? server->start_mark : (yaml_mark_t){0}, "server.tls",
                    "has %s without %s; expected both cert_file and key_file",
                    cfg->tls_cert_file ? "cert_file" : "key_file",
                    cfg->tls_cert_file ? "key_file" : "cert_file");
  char **paths[] = {&cfg->tls_cert_file, &cfg->tls_key_file};
  for (size_t i = 0; i < COUNT(paths); i++) {
    if (!*paths[i]) continue;
    char *r = sip__cfg_resolve_path(c->base_dir, *paths[i]);
    if (!r) return sip__cfg_oom(c);
    sip__free(*paths[i]);
    *paths[i] = r;
  }
  return 0;
}

void sip__cfg_security_free(sip__config_t *cfg) {
  for (int g = 0; g < SIP__AUTH_GROUPS; g++) {
    for (size_t i = 0; i < cfg->auth.n_tokens[g]; i++) {
      /* Tokens are secrets: wipe them before the memory is reused. */
      volatile char *t = cfg->auth.tokens[g][i];
      for (size_t j = 0; t[j]; j++) t[j] = 0;
      sip__free(cfg->auth.tokens[g][i]);
    }
    sip__free(cfg->auth.tokens[g]);
  }
  sip__free(cfg->tls_cert_file);
  sip__free(cfg->tls_key_file);
  sip__free(cfg->socket_owner);
  sip__free(cfg->socket_group);
  for (size_t i = 0; i < cfg->n_allowed_hosts; i++) sip__free(cfg->allowed_hosts[i]);
  sip__free(cfg->allowed_hosts);
}

static int same_str(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

static int same_list(char *const *a, size_t an, char *const *b, size_t bn) {
  if (an != bn) return 0;
  for (size_t i = 0; i < an; i++)
    if (strcmp(a[i], b[i])) return 0;
  return 1;
}

int sip__config_security_same(const sip__config_t *x, const sip__config_t *y) {
  for (int g = 0; g < SIP__AUTH_GROUPS; g++)
    if (!same_list(x->auth.tokens[g], x->auth.n_tokens[g], y->auth.tokens[g], y->auth.n_tokens[g]))
      return 0;
  return same_str(x->tls_cert_file, y->tls_cert_file) && same_str(x->tls_key_file, y->tls_key_file) &&
         x->socket_mode == y->socket_mode && same_str(x->socket_owner, y->socket_owner) &&
         same_str(x->socket_group, y->socket_group) &&
         same_list(x->allowed_hosts, x->n_allowed_hosts, y->allowed_hosts, y->n_allowed_hosts) &&
         !x->allowed_hosts == !y->allowed_hosts;
}
