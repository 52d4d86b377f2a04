/* Unit tests for the runtime state checkpoint (src/server/state/state.c): the
 * document's parser and writer, and its file: atomic replacement, files
 * that cannot be used moved aside, a write cut short ignored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "server/state/state.h"
#include "sip/sip.h"

static sip__state_t *parse_ok(const char *text) {
  sip__state_t *st = NULL;
  sip_error_t *e = sip__state_parse(text, strlen(text), &st);
  if (e) fail_msg("refused: %s", sip_error_message(e));
  assert_non_null(st);
  return st;
}

static void parse_bad(const char *text, size_t len, sip_code_t code, const char *want) {
  sip__state_t *st = NULL;
  sip_error_t *e = sip__state_parse(text, len, &st);
  if (!e) fail_msg("accepted: %s", text);
  assert_null(st);
  assert_int_equal(sip_error_code(e), code);
  if (!strstr(sip_error_message(e), want))
    fail_msg("message '%s' lacks '%s'", sip_error_message(e), want);
  sip_error_free(e);
}

static void test_round_trip(void **unused) {
  (void)unused;
  sip__state_t *st = sip__state_new();
  assert_null(sip__state_set_model(st, "b", 0, NULL));
  assert_null(sip__state_set_model(st, "a", 1, "{\"max_batch_size\": 4}"));
  assert_null(sip__state_set_model(st, "c", 1, NULL));
  assert_null(sip__state_set_model(st, "b", 1, "{}")); /* replaces */
  assert_int_equal(sip__state_model_count(st), 3);
  char *txt = sip__state_dump(st);
  sip__state_free(st);
  st = parse_ok(txt);
  sip_free(txt);
  int loaded = -1;
  const char *cfg = NULL;
  assert_string_equal(sip__state_model_at(st, 0, &loaded, &cfg), "a");
  assert_int_equal(loaded, 1);
  assert_string_equal(cfg, "{\"max_batch_size\": 4}");
  assert_string_equal(sip__state_model_at(st, 1, &loaded, &cfg), "b");
  assert_int_equal(loaded, 1);
  assert_string_equal(cfg, "{}");
  assert_string_equal(sip__state_model_at(st, 2, &loaded, &cfg), "c");
  assert_null(cfg);
  assert_null(sip__state_model_at(st, 3, &loaded, &cfg));
  sip__state_free(st);
}

/* Sections a later version adds are kept as read and written back. */
/* Pools changed at run time: recorded, read back, forgotten; bad entries
 * refused with what was wrong. */
static void test_pools(void **unused) {
  (void)unused;
  sip__state_t *st = sip__state_new();
  sip__state_pool_t a = {.pool_size = 3, .max_memory_mb = -1, .max_compute_percent = 40};
  a.drained[0] = 1u << 2;
  a.drained[3] = UINT64_C(1) << 63; /* session 255 */
  sip__state_pool_t b = {.pool_size = 0, .max_memory_mb = 0, .max_compute_percent = -1};
  assert_null(sip__state_set_pool(st, "a", &a));
  assert_null(sip__state_set_pool(st, "b", &b));
  assert_null(sip__state_set_pool(st, "gone", &b));
  assert_null(sip__state_set_pool(st, "gone", NULL));
  assert_null(sip__state_set_pool(st, "never", NULL));
  char *txt = sip__state_dump(st);
  sip__state_free(st);
  st = parse_ok(txt);
  sip_free(txt);
  assert_int_equal(sip__state_pool_count(st), 2);
  sip__state_pool_t got;
  assert_string_equal(sip__state_pool_at(st, 0, &got), "a");
  assert_memory_equal(&got, &a, sizeof a);
  assert_string_equal(sip__state_pool_at(st, 1, &got), "b");
  assert_memory_equal(&got, &b, sizeof b);
  assert_null(sip__state_pool_at(st, 2, &got));
  sip__state_free(st);
#define DOC(pools) "{\"format\": \"sip-state\", \"version\": 1, \"pools\": " pools "}"
  static const char *const bad[][2] = {
      {DOC("[]"), "\"pools\" is not an object"},
      {DOC("{\"p\": {\"pool_size\": 0}}"), "setting out of range: p"},
      {DOC("{\"p\": {\"pool_size\": 257}}"), "setting out of range: p"},
      {DOC("{\"p\": {\"max_memory_mb\": -1}}"), "setting out of range: p"},
      {DOC("{\"p\": {\"max_compute_percent\": 101}}"), "setting out of range: p"},
      {DOC("{\"p\": {\"pool_size\": \"2\"}}"), "setting out of range: p"},
      {DOC("{\"p\": 3}"), "setting out of range: p"},
      {DOC("{\"p\": {\"drained\": [256]}}"), "session indexes 0..255: p"},
      {DOC("{\"p\": {\"drained\": 1}}"), "setting out of range: p"},
      {DOC("{\"../x\": {}}"), "state file: pool: "},
  };
#undef DOC
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    parse_bad(bad[i][0], strlen(bad[i][0]), SIP_INVALID_ARGUMENT, bad[i][1]);
}

static void test_unknown_sections_kept(void **unused) {
  (void)unused;
  sip__state_t *st = parse_ok("{\"format\":\"sip-state\",\"version\":1,\"pools\":{\"p\":"
                              "{\"pool_size\":3}},\"repository\":{\"models\":{\"m\":"
                              "{\"loaded\":false}},\"other\":1}}");
  assert_int_equal(sip__state_model_count(st), 1);
  char *txt = sip__state_dump(st);
  assert_non_null(strstr(txt, "\"pool_size\": 3"));
  assert_non_null(strstr(txt, "\"other\": 1"));
  assert_non_null(strstr(txt, "\"loaded\": false"));
  sip_free(txt);
  sip__state_free(st);
  st = parse_ok("{\"format\":\"sip-state\",\"version\":1}");
  assert_int_equal(sip__state_model_count(st), 0);
  sip__state_free(st);
}

static void test_bad_documents(void **unused) {
  (void)unused;
  const char *trunc = "{\"format\":\"sip-state\",\"version\":1,\"repos";
  parse_bad(trunc, strlen(trunc), SIP_INVALID_ARGUMENT, "not JSON");
  parse_bad("\x01\x02garbage", 9, SIP_INVALID_ARGUMENT, "not JSON");
  parse_bad("", 0, SIP_INVALID_ARGUMENT, "not JSON");
  parse_bad("[]", 2, SIP_INVALID_ARGUMENT, "not an object");
  parse_bad("{\"version\":1}", 13, SIP_INVALID_ARGUMENT, "not a sip state file");
  const char *v2 = "{\"format\":\"sip-state\",\"version\":2}";
  parse_bad(v2, strlen(v2), SIP_FAILED_PRECONDITION, "format version 2; this sipd reads version 1");
  const char *vs = "{\"format\":\"sip-state\",\"version\":\"1\"}";
  parse_bad(vs, strlen(vs), SIP_INVALID_ARGUMENT, "\"version\" is not an integer");
  const char *noload = "{\"format\":\"sip-state\",\"version\":1,\"repository\":{\"models\":"
                       "{\"m\":{\"config\":\"{}\"}}}}";
  parse_bad(noload, strlen(noload), SIP_INVALID_ARGUMENT, "without a boolean \"loaded\": m");
  const char *cfg = "{\"format\":\"sip-state\",\"version\":1,\"repository\":{\"models\":"
                    "{\"m\":{\"loaded\":true,\"config\":{}}}}}";
  parse_bad(cfg, strlen(cfg), SIP_INVALID_ARGUMENT, "\"config\" is not a string: m");
  const char *name = "{\"format\":\"sip-state\",\"version\":1,\"repository\":{\"models\":"
                     "{\"../x\":{\"loaded\":true}}}}";
  parse_bad(name, strlen(name), SIP_INVALID_ARGUMENT, "repository model");
  const char *dup = "{\"format\":\"sip-state\",\"format\":\"sip-state\",\"version\":1}";
  parse_bad(dup, strlen(dup), SIP_INVALID_ARGUMENT, "not JSON");
}

/* ---- the file ---- */

static char *make_dir(void) {
  char tmpl[] = "/tmp/sip_state_XXXXXX";
  char *d = mkdtemp(tmpl);
  assert_non_null(d);
  return strdup(d);
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int count_prefix(const char *dir, const char *prefix, char *found, size_t n) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int c = 0;
  for (struct dirent *de; (de = readdir(d));)
    if (!strncmp(de->d_name, prefix, strlen(prefix))) {
      c++;
      if (found) snprintf(found, n, "%s/%s", dir, de->d_name);
    }
  closedir(d);
  return c;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    for (struct dirent *de; (de = readdir(d));) {
      if (de->d_name[0] == '.') continue;
      char path[512];
      snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

static void test_save_and_open(void **unused) {
  (void)unused;
  char *root = make_dir();
  char dir[300];
  snprintf(dir, sizeof dir, "%s/state", root); /* created by open */
  sip__state_t *st = NULL;
  assert_null(sip__state_open(dir, &st));
  assert_int_equal(sip__state_model_count(st), 0);
  assert_null(sip__state_set_model(st, "m", 1, "{\"max_batch_size\":2}"));
  assert_null(sip__state_save(dir, st));
  assert_int_equal(count_prefix(dir, "state.json.tmp", NULL, 0), 0);
  sip__state_free(st);
  /* A write cut short (state.json.tmp left behind) is ignored and removed. */
  write_file(dir, "state.json.tmp", "{\"format\":\"sip-st");
  st = NULL;
  assert_null(sip__state_open(dir, &st));
  assert_int_equal(count_prefix(dir, "state.json.tmp", NULL, 0), 0);
  int loaded = 0;
  const char *cfg = NULL;
  assert_string_equal(sip__state_model_at(st, 0, &loaded, &cfg), "m");
  assert_int_equal(loaded, 1);
  assert_string_equal(cfg, "{\"max_batch_size\":2}");
  sip__state_free(st);
  remove_dir(dir);
  rmdir(root);
  free(root);
}

static void test_unusable_file_moved_aside(void **unused) {
  (void)unused;
  const char *bad[] = {"{\"format\":\"sip-state\",\"vers", "garbage\n",
                       "{\"format\":\"sip-state\",\"version\":7}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *dir = make_dir();
    write_file(dir, "state.json", bad[i]);
    sip__state_t *st = NULL;
    assert_null(sip__state_open(dir, &st));
    assert_int_equal(sip__state_model_count(st), 0);
    sip__state_free(st);
    char aside[600];
    assert_int_equal(count_prefix(dir, "state.json.corrupt-", aside, sizeof aside), 1);
    assert_int_equal(count_prefix(dir, "state.json", NULL, 0), 1); /* only the one aside */
    FILE *f = fopen(aside, "rb");
    char buf[128] = {0};
    assert_non_null(f);
    assert_true(fread(buf, 1, sizeof buf - 1, f) > 0);
    fclose(f);
    assert_string_equal(buf, bad[i]); /* kept as it was, for a post-mortem */
    remove_dir(dir);
    free(dir);
  }
}

static void test_unwritable_dir(void **unused) {
  (void)unused;
  sip__state_t *st = NULL;
  sip_error_t *e = sip__state_open("/proc/sip-no-such-dir", &st);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_FAILED_PRECONDITION);
  assert_non_null(strstr(sip_error_message(e), "server.state_dir /proc/sip-no-such-dir"));
  sip_error_free(e);
  assert_null(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_unknown_sections_kept),
      cmocka_unit_test(test_pools),
      cmocka_unit_test(test_bad_documents),
      cmocka_unit_test(test_save_and_open),
      cmocka_unit_test(test_unusable_file_moved_aside),
      cmocka_unit_test(test_unwritable_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
