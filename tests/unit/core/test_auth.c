/* Bearer tokens per API group (core/auth.h) and keeping the server's
 * directories out of answers (core/redact.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "core/auth.h"
#include "core/core.h"
#include "core/redact.h"

static void test_ct_equal(void **state) {
  (void)state;
  assert_true(sip__ct_equal("secret-token", 12, "secret-token", 12));
  assert_false(sip__ct_equal("secret-token", 12, "secret-tokeN", 12));
  assert_false(sip__ct_equal("secret-token", 12, "secret-token2", 13));
  assert_false(sip__ct_equal("secret-token", 12, "secret", 6)); /* a prefix is not equal */
  assert_false(sip__ct_equal("secret-token", 12, "", 0));
  assert_true(sip__ct_equal("", 0, "", 0));
  /* Same bytes repeated: equal modulo its length, still unequal. */
  assert_false(sip__ct_equal("abab", 4, "ab", 2));
}

static char *inf[] = {"inference-token-1", "inference-token-2"};
static char *mgmt[] = {"management-token"};

static void test_groups(void **state) {
  (void)state;
  sip__auth_t a = {0};
  a.tokens[SIP__AUTH_INFERENCE] = inf;
  a.n_tokens[SIP__AUTH_INFERENCE] = 2;
  const char *t2 = "inference-token-2";
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_INFERENCE, t2, strlen(t2), false), SIP__AUTH_OK);
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_INFERENCE, NULL, 0, true), SIP__AUTH_MISSING);
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_INFERENCE, "inference-token", 15, true),
                   SIP__AUTH_BAD_TOKEN);
  /* metrics has no tokens: open; management has none: local peers only. */
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_METRICS, NULL, 0, false), SIP__AUTH_OK);
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_MANAGEMENT, NULL, 0, true), SIP__AUTH_OK);
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_MANAGEMENT, t2, strlen(t2), false),
                   SIP__AUTH_NOT_LOCAL);
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_OPEN, NULL, 0, false), SIP__AUTH_OK);
  assert_int_equal(sip__auth_groups(&a, NULL, 0, false), 1u << SIP__AUTH_METRICS);
  assert_int_equal(sip__auth_groups(&a, t2, strlen(t2), true),
                   1u << SIP__AUTH_INFERENCE | 1u << SIP__AUTH_MANAGEMENT | 1u << SIP__AUTH_METRICS);
  /* A management token opens every group; an inference token not management. */
  a.tokens[SIP__AUTH_MANAGEMENT] = mgmt;
  a.n_tokens[SIP__AUTH_MANAGEMENT] = 1;
  const char *m = "management-token";
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_INFERENCE, m, strlen(m), false), SIP__AUTH_OK);
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_MANAGEMENT, m, strlen(m), false), SIP__AUTH_OK);
  assert_int_equal(sip__auth_check(&a, SIP__AUTH_MANAGEMENT, t2, strlen(t2), true),
                   SIP__AUTH_BAD_TOKEN);
  /* No tokens at all: everything open but management from remote peers. */
  assert_false(sip__auth_enabled(NULL));
  assert_int_equal(sip__auth_groups(NULL, NULL, 0, false),
                   1u << SIP__AUTH_INFERENCE | 1u << SIP__AUTH_METRICS);
}

static void test_bearer(void **state) {
  (void)state;
  size_t n = 0;
  const char *t = sip__auth_bearer("Bearer abc.def", &n);
  assert_non_null(t);
  assert_int_equal(n, 7);
  assert_memory_equal(t, "abc.def", 7);
  t = sip__auth_bearer("  bearer   tok  ", &n);
  assert_non_null(t);
  assert_int_equal(n, 3);
  assert_null(sip__auth_bearer("Basic dXNlcjpwdw==", &n));
  assert_null(sip__auth_bearer("Bearer", &n));
  assert_null(sip__auth_bearer("Bearer   ", &n));
  assert_null(sip__auth_bearer("Bearertok", &n));
  assert_null(sip__auth_bearer(NULL, &n));
}

static void test_local_addresses(void **state) {
  (void)state;
  struct sockaddr_in in = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.2", &in.sin_addr);
  assert_true(sip__addr_is_local((struct sockaddr *)&in));
  inet_pton(AF_INET, "10.0.0.1", &in.sin_addr);
  assert_false(sip__addr_is_local((struct sockaddr *)&in));
  struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
  inet_pton(AF_INET6, "::1", &in6.sin6_addr);
  assert_true(sip__addr_is_local((struct sockaddr *)&in6));
  inet_pton(AF_INET6, "::ffff:127.0.0.1", &in6.sin6_addr);
  assert_true(sip__addr_is_local((struct sockaddr *)&in6));
  inet_pton(AF_INET6, "::ffff:192.168.1.1", &in6.sin6_addr);
  assert_false(sip__addr_is_local((struct sockaddr *)&in6));
  inet_pton(AF_INET6, "2001:db8::1", &in6.sin6_addr);
  assert_false(sip__addr_is_local((struct sockaddr *)&in6));
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  assert_true(sip__addr_is_local((struct sockaddr *)&un));
  assert_false(sip__addr_is_local(NULL));
}

static void check_redacted(const char *in, const char *want) {
  size_t n = 0;
  char *r = sip__redacted(in, strlen(in), &n);
  if (!want) {
    assert_null(r);
    return;
  }
  assert_non_null(r);
  assert_int_equal(n, strlen(want));
  assert_string_equal(r, want);
  sip__free(r);
}

static void test_redact(void **state) {
  (void)state;
  sip__redact_reset();
  check_redacted("cannot open /srv/sip/models/m/1/model.onnx", NULL); /* nothing registered */
  assert_int_equal(sip__redact_add_dir("/srv/sip"), 0);
  assert_int_equal(sip__redact_add_dir("/srv/sip/models/"), 0);
  assert_int_equal(sip__redact_add_dir("relative/dir"), 0); /* ignored */
  assert_int_equal(sip__redact_add_dir("/"), 0);            /* ignored */
  /* The longest directory wins: relative to the model repository. */
  check_redacted("model '/srv/sip/models/m/1/model.onnx': bad", "model 'm/1/model.onnx': bad");
  check_redacted("{\"model_path\":\"/srv/sip/a.onnx\",\"x\":\"/srv/sip\"}",
                 "{\"model_path\":\"a.onnx\",\"x\":\".\"}");
  /* Not a directory of ours: another one that starts alike, a URL path. */
  check_redacted("/srv/sipx/a and /v2/models/m/infer", NULL);
  check_redacted("/other/srv/sip/a", NULL);
  check_redacted("", NULL);
  assert_string_equal(sip__redact_path("/srv/sip/models/m/1/model.onnx"), "m/1/model.onnx");
  assert_string_equal(sip__redact_path("/elsewhere/x.onnx"), "/elsewhere/x.onnx");
  assert_null(sip__redact_path(NULL));
  sip__redact_reset();
  check_redacted("/srv/sip/a", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ct_equal),  cmocka_unit_test(test_groups),
      cmocka_unit_test(test_bearer),    cmocka_unit_test(test_local_addresses),
      cmocka_unit_test(test_redact),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
