/* The server section's security settings (src/config/config_security.c):
 * tokens from the config, the environment and files; socket_mode; tls;
 * allowed_hosts; and the messages of bad values (which never quote a token). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/backends.h"
#include "config/config.h"
#include "core/core.h"

#define POOL "session_pools:\n  - {name: p, backend: builtin}\n"

/* Loads `yaml`; the config, or NULL with the error's message in msg. */
static sip__config_t *load(const char *yaml, char *msg, size_t n) {
  sip__config_t *cfg = NULL;
  sip_error_t *e = sip__config_load_string(yaml, strlen(yaml), "cfg.yaml", "/base",
                                           sip__backend_catalog(), &cfg);
  snprintf(msg, n, "%s", e ? sip_error_message(e) : "");
  sip_error_free(e);
  return cfg;
}

static void expect_error(const char *yaml, const char *want, const char *never) {
  char msg[2048];
  sip__config_t *cfg = load(yaml, msg, sizeof msg);
  if (cfg) {
    sip__config_free(cfg);
    fail_msg("expected an error for:\n%s", yaml);
  }
  if (!strstr(msg, want)) fail_msg("message lacks \"%s\": %s", want, msg);
  if (never && strstr(msg, never)) fail_msg("message shows \"%s\": %s", never, msg);
}

static void test_defaults(void **state) {
  (void)state;
  char msg[2048];
  sip__config_t *cfg = load(POOL, msg, sizeof msg);
  assert_non_null(cfg);
  assert_int_equal(cfg->socket_mode, 0600);
  assert_false(sip__auth_enabled(&cfg->auth));
  assert_null(cfg->tls_cert_file);
  assert_null(cfg->allowed_hosts);
  sip__config_free(cfg);
}

static void test_tokens_from_everywhere(void **state) {
  (void)state;
  char path[] = "/tmp/sip_token_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "file-token-123\n", 15), 15);
  close(fd);
  setenv("SIP_TEST_TOKEN", "env-token-456", 1);
  char yaml[1024], msg[2048];
  snprintf(yaml, sizeof yaml,
           "server:\n"
           "  auth:\n"
           "    inference_tokens: [literal-token-1, \"env:SIP_TEST_TOKEN\"]\n"
           "    management_tokens: [\"file:%s\"]\n"
           "    metrics_tokens: []\n"
           "  socket_mode: 0660\n"
           "  socket_group: sip\n"
           "  allowed_hosts: [sip.example.com, \"[::1]\"]\n"
           "  tls: {cert_file: tls/cert.pem, key_file: /etc/sip/key.pem}\n" POOL,
           path);
  sip__config_t *cfg = load(yaml, msg, sizeof msg);
  unlink(path);
  if (!cfg) fail_msg("%s", msg);
  assert_int_equal(cfg->auth.n_tokens[SIP__AUTH_INFERENCE], 2);
  assert_string_equal(cfg->auth.tokens[SIP__AUTH_INFERENCE][0], "literal-token-1");
  assert_string_equal(cfg->auth.tokens[SIP__AUTH_INFERENCE][1], "env-token-456");
  assert_int_equal(cfg->auth.n_tokens[SIP__AUTH_MANAGEMENT], 1);
  assert_string_equal(cfg->auth.tokens[SIP__AUTH_MANAGEMENT][0], "file-token-123");
  assert_int_equal(cfg->auth.n_tokens[SIP__AUTH_METRICS], 0); /* an empty list: open */
  assert_int_equal(cfg->socket_mode, 0660);
  assert_string_equal(cfg->socket_group, "sip");
  assert_int_equal(cfg->n_allowed_hosts, 2);
  assert_string_equal(cfg->allowed_hosts[0], "sip.example.com");
  assert_string_equal(cfg->tls_cert_file, "/base/tls/cert.pem"); /* relative to the config */
  assert_string_equal(cfg->tls_key_file, "/etc/sip/key.pem");
  sip__config_free(cfg);
}

static void test_bad_values(void **state) {
  (void)state;
  unsetenv("SIP_TEST_UNSET");
  expect_error("server:\n  auth: {inference_tokens: [abc1234]}\n" POOL,
               "server.auth.inference_tokens[0]: the token is shorter than 8", "abc1234");
  expect_error("server:\n  auth: {metrics_tokens: [\"has a space\"]}\n" POOL,
               "holds a space", "has a space");
  expect_error("server:\n  auth: {management_tokens: [\"env:SIP_TEST_UNSET\"]}\n" POOL,
               "environment variable SIP_TEST_UNSET is not set", NULL);
  expect_error("server:\n  auth: {management_tokens: [\"file:/nonexistent/tok\"]}\n" POOL,
               "cannot read token file /nonexistent/tok", NULL);
  expect_error("server:\n  auth: {inference_tokens: secret-token}\n" POOL,
               "expected a list of tokens", NULL);
  expect_error("server:\n  auth: {admin_tokens: [secret-token]}\n" POOL, "admin_tokens", NULL);
  expect_error("server:\n  socket_mode: 0888\n" POOL, "is not an octal permission mode", NULL);
  expect_error("server:\n  socket_mode: 0066\n" POOL, "leaves the owner without read and write",
               NULL);
  expect_error("server:\n  socket_mode: 06600\n" POOL, "is not an octal permission mode", NULL);
  expect_error("server:\n  tls: {cert_file: c.pem}\n" POOL,
               "server.tls: has cert_file without key_file", NULL);
  expect_error("server:\n  allowed_hosts: [\"evil.com/x\"]\n" POOL, "is not a host name", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_tokens_from_everywhere),
      cmocka_unit_test(test_bad_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
