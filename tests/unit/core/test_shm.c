/* Unit tests for shared-memory regions (src/core/shm.c): key checks,
 * registration bounds against the object's real size, views and their
 * bounds, unregistering a region still in use, status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/shm.h"

static char key[64];

/* A fresh /dev/shm object of `size` bytes holding 0, 1, 2, ... */
static int setup(void **state) {
  (void)state;
  snprintf(key, sizeof key, "/sip_test_shm_%d", (int)getpid());
  shm_unlink(key);
  int fd = shm_open(key, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, 8192) != 0) return -1;
  uint8_t buf[8192];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)i;
  if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) return -1;
  close(fd);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  shm_unlink(key);
  return 0;
}

/* `e` is an error of `code` whose message holds `want` (freed). */
static void expect_err(sip_error_t *e, sip_code_t code, const char *want) {
  if (!e) fail_msg("accepted; expected %s", want);
  const char *m = sip_error_message(e);
  if (sip_error_code(e) != code || !strstr(m, want)) {
    char copy[512];
    snprintf(copy, sizeof copy, "%s", m);
    int got = (int)sip_error_code(e);
    sip_error_free(e);
    fail_msg("got %d '%s'; expected %d with '%s'", got, copy, (int)code, want);
  }
  sip_error_free(e);
}

static void test_keys(void **state) {
  (void)state;
  assert_null(sip__shm_check_key("/abc"));
  assert_null(sip__shm_check_key("abc"));
  expect_err(sip__shm_check_key(""), SIP_INVALID_ARGUMENT, "key is needed");
  expect_err(sip__shm_check_key("/"), SIP_INVALID_ARGUMENT, "not a POSIX shm name");
  expect_err(sip__shm_check_key("/../etc/passwd"), SIP_INVALID_ARGUMENT, "not a POSIX shm name");
  expect_err(sip__shm_check_key("/a/b"), SIP_INVALID_ARGUMENT, "not a POSIX shm name");
  expect_err(sip__shm_check_key(".."), SIP_INVALID_ARGUMENT, "not a POSIX shm name");
  char longk[300];
  memset(longk, 'a', sizeof longk - 1);
  longk[sizeof longk - 1] = 0;
  expect_err(sip__shm_check_key(longk), SIP_INVALID_ARGUMENT, "not a POSIX shm name");
}

static void test_register_checks(void **state) {
  (void)state;
  sip__shm_set_t *s = sip__shm_set_new(2);
  expect_err(sip__shm_register(s, "r", "/sip_no_such_object_x", 0, 16), SIP_NOT_FOUND,
             "no shared memory object");
  expect_err(sip__shm_register(s, "r", "/etc/passwd", 0, 16), SIP_INVALID_ARGUMENT,
             "not a POSIX shm name");
  expect_err(sip__shm_register(s, "r", key, 0, 0), SIP_INVALID_ARGUMENT, "byte size > 0");
  expect_err(sip__shm_register(s, "r", key, 8000, 200), SIP_INVALID_ARGUMENT, "holds 8192 bytes");
  expect_err(sip__shm_register(s, "r", key, UINT64_MAX - 4, 16), SIP_INVALID_ARGUMENT,
             "not a usable range");
  expect_err(sip__shm_register(s, "", key, 0, 16), SIP_INVALID_ARGUMENT, "needs a name");
  assert_null(sip__shm_register(s, "a", key, 100, 4000));
  expect_err(sip__shm_register(s, "a", key, 0, 16), SIP_ALREADY_EXISTS, "already registered");
  assert_null(sip__shm_register(s, "b", key, 0, 16));
  expect_err(sip__shm_register(s, "c", key, 0, 16), SIP_RESOURCE_EXHAUSTED, "2 shared memory");
  sip__shm_set_free(s);
}

static void test_views_and_status(void **state) {
  (void)state;
  sip__shm_set_t *s = sip__shm_set_new(0);
  /* An offset that is not page-aligned: the view starts at its byte. */
  assert_null(sip__shm_register(s, "zeta", key, 4100, 1000));
  assert_null(sip__shm_register(s, "alpha", key, 0, 8192));
  sip_buf_t *b;
  uint8_t *p;
  assert_null(sip__shm_view(s, "zeta", 10, 20, "input 'x'", &b, &p));
  assert_int_equal(p[0], (uint8_t)(4110));
  assert_int_equal(p[19], (uint8_t)(4129));
  p[0] = 0xAB; /* writes reach the object: seen through the other region */
  sip_buf_unref(b);
  assert_null(sip__shm_view(s, "alpha", 4110, 1, "output 'y'", &b, &p));
  assert_int_equal(p[0], 0xAB);
  sip_buf_unref(b);
  expect_err(sip__shm_view(s, "zeta", 990, 11, "input 'x'", &b, &p), SIP_INVALID_ARGUMENT,
             "input 'x': offset 990 + byte size 11 is past the end");
  assert_null(b);
  expect_err(sip__shm_view(s, "zeta", UINT64_MAX, 2, "input 'x'", &b, &p), SIP_INVALID_ARGUMENT,
             "past the end");
  expect_err(sip__shm_view(s, "nope", 0, 1, "output 'y'", &b, &p), SIP_NOT_FOUND,
             "output 'y': no shared memory region named 'nope'");

  sip__shm_info_t *v;
  size_t n;
  assert_null(sip__shm_status(s, NULL, &v, &n));
  assert_int_equal(n, 2);
  assert_string_equal(v[0].name, "alpha");
  assert_string_equal(v[1].name, "zeta");
  assert_string_equal(v[1].key, key);
  assert_int_equal(v[1].offset, 4100);
  assert_int_equal(v[1].byte_size, 1000);
  sip__shm_info_free(v, n);
  assert_null(sip__shm_status(s, "zeta", &v, &n));
  assert_int_equal(n, 1);
  sip__shm_info_free(v, n);
  expect_err(sip__shm_status(s, "gone", &v, &n), SIP_NOT_FOUND, "'gone'");
  sip__shm_set_free(s);
}

static void test_unregister_in_use(void **state) {
  (void)state;
  sip__shm_set_t *s = sip__shm_set_new(0);
  assert_null(sip__shm_register(s, "r", key, 0, 64));
  sip_buf_t *keep, *b;
  uint8_t *p, *q;
  assert_null(sip__shm_view(s, "r", 0, 64, "input 'x'", &keep, &p));
  sip__shm_unregister(s, "r");
  sip__shm_unregister(s, "r"); /* unknown now: fine */
  /* The view keeps the mapping: still readable and writable. */
  assert_int_equal(p[5], 5);
  p[5] = 5;
  expect_err(sip__shm_view(s, "r", 0, 1, "input 'x'", &b, &q), SIP_NOT_FOUND, "'r'");
  assert_null(sip__shm_register(s, "r", key, 0, 64)); /* the name is free again */
  assert_null(sip__shm_register(s, "q", key, 0, 64));
  sip__shm_unregister(s, NULL); /* all */
  sip__shm_info_t *v;
  size_t n;
  assert_null(sip__shm_status(s, "", &v, &n));
  assert_int_equal(n, 0);
  sip__shm_set_free(s);
  /* The first view outlived its set. */
  assert_int_equal(p[63], 63);
  sip_buf_unref(keep);
}

static void test_truncated_object(void **state) {
  (void)state;
  sip__shm_set_t *s = sip__shm_set_new(0);
  assert_null(sip__shm_register(s, "r", key, 0, 8192));
  int fd = shm_open(key, O_RDWR, 0);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 100), 0);
  sip_buf_t *b;
  uint8_t *p;
  expect_err(sip__shm_view(s, "r", 0, 10, "input 'x'", &b, &p), SIP_INVALID_ARGUMENT,
             "no longer covers");
  assert_int_equal(ftruncate(fd, 8192), 0);
  close(fd);
  sip__shm_set_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keys),
      cmocka_unit_test_setup_teardown(test_register_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_views_and_status, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unregister_in_use, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_object, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
