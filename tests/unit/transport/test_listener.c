/* Unit tests for the native front-end's endpoints (src/transport/endpoint.c):
 * parsing each scheme (IPv6 hosts in brackets included) and the errors of
 * bad ones with their messages; listening on unix and tcp endpoints, the
 * address reported, and connecting back to it (IPv6 where the machine has
 * ::1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "transport/listener_impl.h"

static void parse_ok(const char *s, sip__endpoint_t *ep) {
  sip_error_t *e = sip__endpoint_parse(s, ep);
  if (e) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("%s: unexpected error: %s", s, msg);
  }
}

/* Parses `s`, expecting `code` and a message containing `want`. */
static void parse_err(const char *s, sip_code_t code, const char *want) {
  sip__endpoint_t ep;
  sip_error_t *e = sip__endpoint_parse(s, &ep);
  if (!e) fail_msg("%s: parsed, want an error containing \"%s\"", s, want);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t got = sip_error_code(e);
  sip_error_free(e);
  if (got != code) fail_msg("%s: code %s, want %s: %s", s, sip_code_name(got), sip_code_name(code), msg);
  if (!strstr(msg, want)) fail_msg("%s: message lacks \"%s\": %s", s, want, msg);
}

static void test_parse_unix(void **state) {
  (void)state;
  sip__endpoint_t ep;
  parse_ok("ipc:///tmp/sip.sock", &ep);
  assert_string_equal(ep.kind->scheme, "ipc://");
  assert_int_equal(ep.kind->is_tcp, 0);
  assert_string_equal(ep.path, "/tmp/sip.sock");
  parse_ok("ipc://relative.sock", &ep);
  assert_string_equal(ep.path, "relative.sock");
  parse_ok("unix:///run/sip/a.sock", &ep);
  assert_string_equal(ep.kind->scheme, "unix://");
  assert_int_equal(ep.kind->is_tcp, 0);
  assert_string_equal(ep.path, "/run/sip/a.sock");
  /* 107 bytes is the longest path a socket address holds. */
  char s[160] = "ipc://";
  memset(s + 6, 'p', 107);
  s[6 + 107] = '\0';
  parse_ok(s, &ep);
  assert_int_equal(strlen(ep.path), 107);
}

static void test_parse_tcp(void **state) {
  (void)state;
  sip__endpoint_t ep;
  parse_ok("tcp://127.0.0.1:5555", &ep);
  assert_string_equal(ep.kind->scheme, "tcp://");
  assert_int_equal(ep.kind->is_tcp, 1);
  assert_string_equal(ep.host, "127.0.0.1");
  assert_string_equal(ep.port, "5555");
  parse_ok("tcp://localhost:0", &ep);
  assert_string_equal(ep.host, "localhost");
  assert_string_equal(ep.port, "0");
  parse_ok("tcp://:65535", &ep); /* every address */
  assert_string_equal(ep.host, "");
  assert_string_equal(ep.port, "65535");
}

static void test_parse_ipv6(void **state) {
  (void)state;
  sip__endpoint_t ep;
  parse_ok("tcp://[::1]:9", &ep);
  assert_string_equal(ep.host, "::1");
  assert_string_equal(ep.port, "9");
  parse_ok("tcp://[::]:0", &ep);
  assert_string_equal(ep.host, "::");
  parse_ok("tcp://[fe80::1:2]:8001", &ep);
  assert_string_equal(ep.host, "fe80::1:2");
  assert_string_equal(ep.port, "8001");
  parse_ok("tcp://[::ffff:127.0.0.1]:80", &ep);
  assert_string_equal(ep.host, "::ffff:127.0.0.1");
  parse_err("tcp://[::1:9", SIP_INVALID_ARGUMENT,
            "tcp endpoint '[::1:9' has a malformed IPv6 host; expected tcp://host:port (IPv6 "
            "hosts in brackets: tcp://[::1]:port)");
  parse_err("tcp://[]:9", SIP_INVALID_ARGUMENT, "tcp endpoint '[]:9' has a malformed IPv6 host");
  parse_err("tcp://[::1]", SIP_INVALID_ARGUMENT,
            "tcp endpoint '[::1]' has no port after the IPv6 host");
  parse_err("tcp://[::1]9", SIP_INVALID_ARGUMENT,
            "tcp endpoint '[::1]9' has no port after the IPv6 host");
  parse_err("tcp://[::1]:", SIP_INVALID_ARGUMENT, "tcp endpoint '[::1]:' has no port");
  parse_err("tcp://::1:9", SIP_INVALID_ARGUMENT,
            "tcp endpoint '::1:9' has an IPv6 host without brackets");
}

static void test_parse_errors(void **state) {
  (void)state;
  parse_err("http://h:1", SIP_INVALID_ARGUMENT,
            "endpoint 'http://h:1'; expected ipc:///path, unix:///path or tcp://host:port");
  parse_err("", SIP_INVALID_ARGUMENT, "endpoint ''; expected ipc:///path");
  parse_err("/tmp/sip.sock", SIP_INVALID_ARGUMENT, "endpoint '/tmp/sip.sock'; expected");
  parse_err("TCP://h:1", SIP_INVALID_ARGUMENT, "endpoint 'TCP://h:1'; expected");
  parse_err("ipc://", SIP_INVALID_ARGUMENT, "unix socket endpoint has an empty path");
  parse_err("unix://", SIP_INVALID_ARGUMENT, "unix socket endpoint has an empty path");
  char s[200] = "unix://";
  memset(s + 7, 'p', 108);
  s[7 + 108] = '\0';
  parse_err(s, SIP_INVALID_ARGUMENT, "is longer than 107 bytes");
  parse_err("tcp://nohost", SIP_INVALID_ARGUMENT,
            "tcp endpoint 'nohost'; expected tcp://host:port");
  parse_err("tcp://", SIP_INVALID_ARGUMENT, "tcp endpoint ''; expected tcp://host:port");
  parse_err("tcp://h:", SIP_INVALID_ARGUMENT, "tcp endpoint 'h:' has no port");
  parse_err("tcp://h:65536", SIP_INVALID_ARGUMENT,
            "tcp endpoint 'h:65536' has a port out of range; expected 0..65535 (0 = ephemeral)");
  parse_err("tcp://h:99999999999999999999", SIP_INVALID_ARGUMENT, "has a port out of range");
  parse_err("tcp://h:12a", SIP_INVALID_ARGUMENT, "has a port out of range");
  parse_err("tcp://h:-1", SIP_INVALID_ARGUMENT, "has a port out of range");
  parse_err("tcp://h:+1", SIP_INVALID_ARGUMENT, "has a port out of range");
  char t[400] = "tcp://";
  memset(t + 6, 'h', 300);
  strcpy(t + 306, ":80");
  parse_err(t, SIP_INVALID_ARGUMENT, "; expected tcp://host:port");
}

static void close_listener(sip__listener_t *l) {
  if (l->fd >= 0) close(l->fd);
  if (l->unlink_path) unlink(l->unlink_path);
  sip__free(l->unlink_path);
  sip__free(l->address);
  memset(l, 0, sizeof *l);
  l->fd = -1;
}

/* Connects to a listener's reported address: it must parse back. */
static void connect_back(const sip__listener_t *l) {
  sip__endpoint_t ep;
  parse_ok(l->address, &ep);
  int fd = ep.kind->connect(&ep);
  if (fd < 0) fail_msg("cannot connect to %s", l->address);
  close(fd);
}

static void test_listen_tcp(void **state) {
  (void)state;
  sip__listener_t l = {0};
  sip_error_t *e = sip__endpoint_listen("tcp://127.0.0.1:0", NULL, &l);
  assert_null(e);
  assert_true(l.fd >= 0);
  assert_int_equal(l.is_tcp, 1);
  assert_null(l.unlink_path);
  assert_true(!strncmp(l.address, "tcp://127.0.0.1:", 16));
  assert_true(atoi(l.address + 16) > 0);
  connect_back(&l);
  /* The same port again is taken. */
  char again[64];
  snprintf(again, sizeof again, "%s", l.address);
  sip__listener_t l2 = {0};
  e = sip__endpoint_listen(again, NULL, &l2);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  char want[96];
  snprintf(want, sizeof want, "cannot listen on %s: ", again);
  assert_true(strstr(sip_error_message(e), want) != NULL);
  assert_int_equal(l2.fd, -1);
  sip_error_free(e);
  close_listener(&l);
}

static void test_listen_ipv6(void **state) {
  (void)state;
  sip__listener_t l = {0};
  sip_error_t *e = sip__endpoint_listen("tcp://[::1]:0", NULL, &l);
  if (e) { /* no IPv6 loopback on this machine */
    assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
    assert_true(strstr(sip_error_message(e), "tcp://[::1]:0") != NULL ||
                strstr(sip_error_message(e), "[::1]:0") != NULL);
    sip_error_free(e);
    skip();
  }
  /* Reported in brackets, so that it parses back (it used to lose the ']'). */
  assert_true(!strncmp(l.address, "tcp://[::1]:", 12));
  assert_true(atoi(l.address + 12) > 0);
  assert_int_equal(l.is_tcp, 1);
  connect_back(&l);
  close_listener(&l);
}

static void test_listen_unix(void **state) {
  (void)state;
  char path[64], ep[80];
  snprintf(path, sizeof path, "/tmp/sip_test_listener_%d.sock", (int)getpid());
  unlink(path);
  snprintf(ep, sizeof ep, "ipc://%s", path);
  sip__listener_t l = {0};
  sip_error_t *e = sip__endpoint_listen(ep, NULL, &l);
  assert_null(e);
  assert_int_equal(l.is_tcp, 0);
  char want[160];
  snprintf(want, sizeof want, "unix://%s", path);
  assert_string_equal(l.address, want);
  assert_string_equal(l.unlink_path, path);
  connect_back(&l);
  /* A live server there: refused. */
  sip__listener_t l2 = {0};
  e = sip__endpoint_listen(ep, NULL, &l2);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  snprintf(want, sizeof want, "cannot listen on %s: another server is listening there", path);
  assert_string_equal(sip_error_message(e), want);
  sip_error_free(e);
  /* A socket file left behind by a dead server: replaced. */
  close(l.fd);
  l.fd = -1;
  snprintf(ep, sizeof ep, "unix://%s", path);
  e = sip__endpoint_listen(ep, NULL, &l2);
  assert_null(e);
  connect_back(&l2);
  close_listener(&l2);
  close_listener(&l);
  /* A file that is not a socket: left alone. */
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  e = sip__endpoint_listen(ep, NULL, &l2);
  assert_non_null(e);
  snprintf(want, sizeof want, "cannot listen on %s: a file that is not a socket is in the way",
           path);
  assert_string_equal(sip_error_message(e), want);
  sip_error_free(e);
  assert_int_equal(access(path, F_OK), 0);
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_unix),   cmocka_unit_test(test_parse_tcp),
      cmocka_unit_test(test_parse_ipv6),   cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_listen_tcp),   cmocka_unit_test(test_listen_ipv6),
      cmocka_unit_test(test_listen_unix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
