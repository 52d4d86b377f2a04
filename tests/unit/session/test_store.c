/* The engine's model store (src/session/store.c): one load per key, shared
 * by every acquirer and freed at the last release; a different option, a
 * different CPU set (the extra) or different bytes under the same path is a
 * different model; a failed load leaves nothing behind; the counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "session/store.h"

static int loads, frees, fail_next;

static sip_error_t *fake_load(void *state, const char *path, const sip_kv_t *o, size_t n,
                              void **model) {
  (void)state, (void)path, (void)o, (void)n;
  if (fail_next) {
    fail_next = 0;
    return sip_error_new(SIP_INVALID_ARGUMENT, "bad model");
  }
  loads++;
  *model = malloc(16);
  return NULL;
}

static void fake_free(void *model) {
  frees++;
  free(model);
}

static const sip_backend_vtable_t fake = {.name = "fake", .load = fake_load, .model_free = fake_free};
static const sip_backend_vtable_t other = {.name = "other", .load = fake_load,
                                           .model_free = fake_free};

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static sip__store_entry_t *get(sip__store_t *st, const sip_backend_vtable_t *vt,
                               const char *path, const sip_kv_t *o, size_t n, const char *extra,
                               int want_loaded) {
  sip__store_entry_t *e = NULL;
  int loaded = -1;
  sip_error_t *err = sip__store_acquire(st, vt, NULL, path, o, n, extra, &e, &loaded);
  assert_null(err);
  assert_non_null(e);
  assert_int_equal(loaded, want_loaded);
  return e;
}

static void test_keying_and_refcount(void **state) {
  (void)state;
  char dir[] = "/tmp/sip_store_XXXXXX", path[64], link[80];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/m.bin", dir);
  snprintf(link, sizeof link, "%s/alias.bin", dir);
  write_file(path, "weights one");
  assert_int_equal(symlink(path, link), 0);
  loads = frees = 0;
  sip__store_t st;
  sip__store_init(&st);
  sip_kv_t ab[2] = {{"a", "1"}, {"b", "2"}}, ba[2] = {{"b", "2"}, {"a", "1"}};
  sip__store_entry_t *e1 = get(&st, &fake, path, ab, 2, "", 1);
  /* the same file by another name, the options in another order: shared */
  sip__store_entry_t *e2 = get(&st, &fake, link, ba, 2, NULL, 0);
  assert_ptr_equal(e1, e2);
  assert_ptr_equal(sip__store_model(e1), sip__store_model(e2));
  assert_int_equal(sip__store_refs(&st, e1), 2);
  assert_int_equal(loads, 1);
  /* another option value, another extra, another backend: separate loads */
  sip_kv_t ab3[2] = {{"a", "1"}, {"b", "3"}};
  sip__store_entry_t *e3 = get(&st, &fake, path, ab3, 2, "", 1);
  sip__store_entry_t *e4 = get(&st, &fake, path, ab, 2, "cpus=3", 1);
  sip__store_entry_t *e5 = get(&st, &other, path, ab, 2, "", 1);
  assert_true(e3 != e1 && e4 != e1 && e5 != e1);
  assert_int_equal(loads, 4);
  /* the same path rewritten with other bytes: a new model */
  write_file(path, "weights two");
  sip__store_entry_t *e6 = get(&st, &fake, path, ab, 2, "", 1);
  assert_true(e6 != e1);
  sip__store_stats_t s;
  sip__store_read(&st, &s);
  assert_int_equal(s.loads, 5);
  assert_int_equal(s.shares, 1);
  assert_int_equal(s.models, 5);
  /* a failed load leaves no entry: the next acquirer loads */
  fail_next = 1;
  sip__store_entry_t *bad = NULL;
  int loaded = 0;
  sip_error_t *err = sip__store_acquire(&st, &fake, NULL, NULL, NULL, 0, "", &bad, &loaded);
  assert_non_null(err);
  assert_int_equal(sip_error_code(err), SIP_INVALID_ARGUMENT);
  sip_error_free(err);
  assert_null(bad);
  sip__store_entry_t *e7 = get(&st, &fake, NULL, NULL, 0, "", 1);
  /* a missing file is NOT_FOUND */
  char missing[80];
  snprintf(missing, sizeof missing, "%s/none.bin", dir);
  err = sip__store_acquire(&st, &fake, NULL, missing, NULL, 0, "", &bad, &loaded);
  assert_non_null(err);
  assert_int_equal(sip_error_code(err), SIP_NOT_FOUND);
  sip_error_free(err);
  /* freed at the last release only */
  sip__store_release(&st, e1);
  assert_int_equal(frees, 0);
  assert_int_equal(sip__store_refs(&st, e2), 1);
  sip__store_release(&st, e2);
  assert_int_equal(frees, 1);
  assert_int_equal(sip__store_refs(&st, e1), 0); /* gone: only compared */
  sip__store_release(&st, e3);
  sip__store_release(&st, e4);
  sip__store_release(&st, e5);
  sip__store_release(&st, e6);
  sip__store_release(&st, e7);
  assert_int_equal(frees, 6);
  sip__store_read(&st, &s);
  assert_int_equal(s.models, 0);
  sip__store_destroy(&st);
  unlink(link);
  unlink(path);
  rmdir(dir);
}

static void test_peek(void **state) {
  (void)state;
  char dir[] = "/tmp/sip_store_XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/m.bin", dir);
  write_file(path, "weights");
  sip__store_t st;
  sip__store_init(&st);
  assert_int_equal(sip__store_peek(&st, &fake, path, NULL, 0, ""), 0);
  sip__store_entry_t *e = get(&st, &fake, path, NULL, 0, "", 1);
  /* the peek finds it (its bytes may measure 0 for a tiny model) */
  assert_int_equal(sip__store_peek(&st, &fake, path, NULL, 0, ""), sip__store_bytes(e));
  sip_kv_t o = {"a", "1"};
  assert_int_equal(sip__store_peek(&st, &fake, path, &o, 1, ""), 0);
  sip__store_release(&st, e);
  sip__store_destroy(&st);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keying_and_refcount),
      cmocka_unit_test(test_peek),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
