/* Logging: failed-request lines are rate-limited and the next line counts
 * what was left out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/core.h"

static void sleep_until_next_second(void) {
  uint64_t now = sip__now_us();
  uint64_t wait = 1000000 - now % 1000000 + 1000;
  struct timespec ts = {0, (long)wait * 1000};
  if (wait >= 1000000) ts = (struct timespec){1, (long)(wait - 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* stderr into a new temporary file named from `path` (a mkstemp
 * template); release_stderr puts it back and returns the file, rewound. */
static int capture_stderr(char *path, int *saved) {
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stderr);
  *saved = dup(2);
  dup2(fd, 2);
  return fd;
}

static FILE *release_stderr(int fd, int saved) {
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  FILE *f = fdopen(fd, "r");
  rewind(f);
  return f;
}

static void test_failure_lines_are_rate_limited(void **state) {
  (void)state;
  char path[] = "/tmp/sip_test_log_XXXXXX";
  int saved, fd = capture_stderr(path, &saved);
  sip__log_set_level(SIP__LOG_INFO);
  sleep_until_next_second(); /* all 120 calls fall in one second */
  for (int i = 0; i < 120; i++) sip__log_failure("pool=p code=NOT_FOUND n=%d", i);
  sleep_until_next_second();
  sip__log_failure("pool=p code=NOT_FOUND n=last");
  FILE *f = release_stderr(fd, saved);
  char line[4096];
  int lines = 0, last_ok = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, "msg=\"request failed\"")) continue;
    lines++;
    if (strstr(line, "n=last")) last_ok = strstr(line, "suppressed_before=70") != NULL;
  }
  fclose(f);
  unlink(path);
  assert_int_equal(lines, 51); /* 50 in the first second, then the last one */
  assert_true(last_ok);
}

/* server.log_format: json: one JSON object per line, the logfmt keys as
 * members (quoted values that hold quotes, control characters and UTF-8
 * included). */
static void test_json_lines(void **state) {
  (void)state;
  char path[] = "/tmp/sip_test_log_XXXXXX";
  int saved, fd = capture_stderr(path, &saved);
  sip__log_set_level(SIP__LOG_INFO);
  sip__log_set_format(SIP__LOG_JSON);
  sip__log(SIP__LOG_WARN, "pool \"x\" failed", "pool=x code=NOT_FOUND reason=\"model 'a' said \"no\"\tthen\x01 \xe4\xb8\xad\" n=3");
  sip__log(SIP__LOG_INFO, "plain", NULL);
  sip__log_set_format(SIP__LOG_TEXT);
  sip__log(SIP__LOG_INFO, "text again", "k=v");
  FILE *f = release_stderr(fd, saved);
  char line[4096];
  assert_non_null(fgets(line, sizeof line, f));
  json_error_t je;
  json_t *o = json_loads(line, 0, &je);
  if (!o) fail_msg("not JSON (%s): %s", je.text, line);
  assert_string_equal(json_string_value(json_object_get(o, "level")), "warn");
  assert_string_equal(json_string_value(json_object_get(o, "msg")), "pool \"x\" failed");
  assert_string_equal(json_string_value(json_object_get(o, "pool")), "x");
  assert_string_equal(json_string_value(json_object_get(o, "code")), "NOT_FOUND");
  assert_string_equal(json_string_value(json_object_get(o, "reason")),
                      "model 'a' said \"no\"\tthen\x01 \xe4\xb8\xad");
  assert_string_equal(json_string_value(json_object_get(o, "n")), "3");
  assert_non_null(json_string_value(json_object_get(o, "ts")));
  json_decref(o);
  assert_non_null(fgets(line, sizeof line, f));
  o = json_loads(line, 0, &je);
  assert_non_null(o);
  assert_int_equal(json_object_size(o), 3); /* ts, level, msg */
  json_decref(o);
  assert_non_null(fgets(line, sizeof line, f));
  assert_non_null(strstr(line, "level=info msg=\"text again\" k=v"));
  fclose(f);
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_failure_lines_are_rate_limited),
                                     cmocka_unit_test(test_json_lines)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
