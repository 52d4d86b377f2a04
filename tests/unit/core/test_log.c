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

#include "core/core.h"

static void sleep_until_next_second(void) {
  uint64_t now = sip__now_us();
  uint64_t wait = 1000000 - now % 1000000 + 1000;
  struct timespec ts = {0, (long)wait * 1000};
  if (wait >= 1000000) ts = (struct timespec){1, (long)(wait - 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void test_failure_lines_are_rate_limited(void **state) {
  (void)state;
  char path[] = "/tmp/sip_test_log_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  sip__log_set_level(SIP__LOG_INFO);
  sleep_until_next_second(); /* all 120 calls fall in one second */
  for (int i = 0; i < 120; i++) sip__log_failure("pool=p code=NOT_FOUND n=%d", i);
  sleep_until_next_second();
  sip__log_failure("pool=p code=NOT_FOUND n=last");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  FILE *f = fdopen(fd, "r");
  rewind(f);
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

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_failure_lines_are_rate_limited)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
