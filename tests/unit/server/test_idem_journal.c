/* Unit tests for the idempotency journal (src/server/state/idem_journal.c): its
 * records read back as written (numbers, strings, errors); a journal cut
 * short keeps the records before the cut, and damage in the middle loses
 * only the records it touches (the reader resynchronises); opening it keeps
 * only the answers whose expiry is ahead and starts the file afresh with
 * them; appends and rewrites land in the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "server/state/idem_journal.h"
#include "session/engine.h"
#include "sip/sip.h"

static sip_response_t *float_answer(float base) {
  float v[3] = {base, base + 1, base + 2};
  int64_t dims[1] = {3};
  sip_tensor_t **outs = sip__calloc(1, sizeof *outs);
  outs[0] = sip_tensor_new_copy("y", SIP_DTYPE_FLOAT32, 1, dims, v, sizeof v);
  return sip__response_new(SIP_OK, sip__strdup(""), 0, outs, 1, 10, 20, 30);
}

static sip_response_t *string_answer(void) {
  /* Two elements, "hi" and "abc", packed as the engine packs them. */
  uint8_t packed[4 + 2 + 4 + 3];
  uint32_t a = 2, b = 3;
  memcpy(packed, &a, 4);
  memcpy(packed + 4, "hi", 2);
  memcpy(packed + 6, &b, 4);
  memcpy(packed + 10, "abc", 3);
  int64_t dims[2] = {1, 2};
  sip_tensor_t **outs = sip__calloc(1, sizeof *outs);
  outs[0] = sip_tensor_new_copy("words", SIP_DTYPE_STRING, 2, dims, packed, sizeof packed);
  return sip__response_new(SIP_OK, sip__strdup(""), 0, outs, 1, 0, 0, 0);
}

typedef struct got {
  char model[8][64], key[8][64];
  uint64_t expires[8];
  sip_response_t *resp[8];
  int n;
} got_t;

static void collect(void *ctx, const char *model, const char *key, uint64_t expires,
                    sip_response_t *resp) {
  got_t *g = ctx;
  assert_true(g->n < 8);
  snprintf(g->model[g->n], 64, "%s", model);
  snprintf(g->key[g->n], 64, "%s", key);
  g->expires[g->n] = expires;
  g->resp[g->n++] = resp;
}

static void got_free(got_t *g) {
  for (int i = 0; i < g->n; i++) sip_response_free(g->resp[i]);
  g->n = 0;
}

/* A file image: the magic, then the records. */
static uint8_t *image(size_t *len, int n, const char *const *models, const char *const *keys,
                      const uint64_t *expires, sip_response_t *const *resps) {
  uint8_t *buf = malloc(8);
  memcpy(buf, SIP__JOURNAL_MAGIC, 8);
  *len = 8;
  for (int i = 0; i < n; i++) {
    uint8_t *rec;
    size_t rl;
    assert_null(sip__journal_encode(models[i], keys[i], expires[i], resps[i], &rec, &rl));
    buf = realloc(buf, *len + rl);
    memcpy(buf + *len, rec, rl);
    *len += rl;
    sip__free(rec);
  }
  return buf;
}

static void same(const sip_response_t *a, const sip_response_t *b) {
  assert_int_equal(a->code, b->code);
  assert_string_equal(a->message, b->message);
  assert_int_equal(a->n_outputs, b->n_outputs);
  assert_int_equal(a->queue_us, b->queue_us);
  assert_int_equal(a->total_us, b->total_us);
  for (size_t i = 0; i < a->n_outputs; i++) {
    const sip_tensor_t *x = a->outputs[i], *y = b->outputs[i];
    assert_string_equal(x->name, y->name);
    assert_int_equal(x->dtype, y->dtype);
    assert_int_equal(x->rank, y->rank);
    assert_memory_equal(x->dims, y->dims, (size_t)x->rank * sizeof x->dims[0]);
    assert_int_equal(x->nbytes, y->nbytes);
    assert_memory_equal(x->data, y->data, x->nbytes);
  }
}

static void test_round_trip(void **unused) {
  (void)unused;
  sip_response_t *r[3] = {float_answer(1), string_answer(),
                          sip__response_new(SIP_INVALID_ARGUMENT,
                                            sip__strdup("input 'x': expected float32"), 0, NULL,
                                            0, 1, 2, 3)};
  const char *models[3] = {"work", "text", "work"}, *keys[3] = {"\nk1", "2\nk2", "\nk3"};
  uint64_t exp[3] = {100, 200, UINT64_MAX};
  size_t len;
  uint8_t *buf = image(&len, 3, models, keys, exp, r);
  got_t g = {0};
  const char *why = "unset";
  assert_int_equal(sip__journal_read(buf, len, collect, &g, &why), len);
  assert_null(why);
  assert_int_equal(g.n, 3);
  for (int i = 0; i < 3; i++) {
    assert_string_equal(g.model[i], models[i]);
    assert_string_equal(g.key[i], keys[i]);
    assert_int_equal(g.expires[i], exp[i]);
    same(g.resp[i], r[i]);
  }
  got_free(&g);
  /* Cut anywhere inside the last record: the two before it stay. */
  uint8_t *rec;
  size_t last;
  assert_null(sip__journal_encode(models[2], keys[2], exp[2], r[2], &rec, &last));
  sip__free(rec);
  for (size_t cut = len - last + 1; cut < len; cut++) {
    assert_int_equal(sip__journal_read(buf, cut, collect, &g, &why), len - last);
    assert_int_equal(g.n, 2);
    assert_non_null(strstr(why, "cut short"));
    got_free(&g);
  }
  /* A flipped bit in the second record: the first and the third stay. */
  buf[len - last - 3] ^= 0x10;
  assert_true(sip__journal_read(buf, len, collect, &g, &why) < len);
  assert_int_equal(g.n, 2);
  assert_string_equal(g.key[0], keys[0]);
  assert_string_equal(g.key[1], keys[2]);
  same(g.resp[1], r[2]);
  assert_string_equal(why, "a record whose CRC does not match");
  got_free(&g);
  /* Not a journal at all. */
  assert_int_equal(sip__journal_read((const uint8_t *)"{\"json\": 1}", 11, collect, &g, &why), 0);
  assert_non_null(strstr(why, "not an idempotency journal"));
  assert_int_equal(g.n, 0);
  free(buf);
  for (int i = 0; i < 3; i++) sip_response_free(r[i]);
}

typedef struct count {
  int n, last;
  int in_order;
} count_t;

static void count_keys(void *ctx, const char *model, const char *key, uint64_t expires,
                       sip_response_t *resp) {
  (void)model, (void)expires;
  count_t *c = ctx;
  int k = atoi(key);
  if (c->n && k <= c->last) c->in_order = 0;
  c->last = k;
  c->n++;
  sip_response_free(resp);
}

/* 64 bytes overwritten in the middle of 2,000 records: the reader skips the
 * one or two records they touch and keeps every other one, in order. */
static void test_resync_after_damage(void **unused) {
  (void)unused;
  enum { N = 2000 };
  sip_response_t *r = float_answer(3);
  uint8_t *buf = malloc(8);
  memcpy(buf, SIP__JOURNAL_MAGIC, 8);
  size_t len = 8, mid = 0;
  for (int i = 0; i < N; i++) {
    char key[16];
    snprintf(key, sizeof key, "%d", i);
    uint8_t *rec;
    size_t rl;
    assert_null(sip__journal_encode("work", key, UINT64_MAX, r, &rec, &rl));
    buf = realloc(buf, len + rl);
    memcpy(buf + len, rec, rl);
    if (i == N / 2) mid = len + rl / 3;
    len += rl;
    sip__free(rec);
  }
  for (size_t k = 0; k < 64; k++) buf[mid + k] = (uint8_t)(0xA5 ^ k);
  count_t c = {0, 0, 1};
  const char *why = NULL;
  size_t used = sip__journal_read(buf, len, count_keys, &c, &why);
  assert_non_null(why);
  assert_true(used < len);
  assert_true(c.in_order);
  assert_in_range(c.n, N - 2, N - 1);
  assert_int_equal(c.last, N - 1); /* the records after the damage are there */
  /* Garbage at the very end: everything before it is kept. */
  uint8_t *tail = realloc(buf, len + 100);
  memset(tail + len, 0x5A, 100);
  c = (count_t){0, 0, 1};
  sip__journal_read(tail, len + 100, count_keys, &c, &why);
  assert_in_range(c.n, N - 2, N - 1);
  free(tail);
  sip_response_free(r);
}

static void write_bytes(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  fclose(f);
}

static uint8_t *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  uint8_t *buf = malloc(1 << 20);
  *n = fread(buf, 1, 1 << 20, f);
  fclose(f);
  return buf;
}

static void emit_one(void *ctx, sip__journal_t *j) {
  sip__journal_emit(j, "work", "\nrewritten", UINT64_MAX, ctx);
}

static void test_open_append_rewrite(void **unused) {
  (void)unused;
  char tmpl[] = "/tmp/sip_journal_XXXXXX";
  char *root = mkdtemp(tmpl);
  assert_non_null(root);
  char dir[256], path[300];
  snprintf(dir, sizeof dir, "%s/state", root); /* made by open */
  snprintf(path, sizeof path, "%s/" SIP__JOURNAL_FILE, dir);
  /* No journal yet: nothing read, an empty one started. */
  got_t g = {0};
  sip__journal_t *j = NULL;
  assert_null(sip__journal_open(dir, collect, &g, &j));
  assert_int_equal(g.n, 0);
  assert_int_equal(sip__journal_size(j), 8);
  sip__journal_close(j);
  /* One expired answer, one live: only the live one is read and kept. */
  sip_response_t *r[2] = {float_answer(1), float_answer(5)};
  const char *models[2] = {"work", "work"}, *keys[2] = {"\nold", "\nnew"};
  uint64_t exp[2] = {1, sip__wall_us() + 60 * UINT64_C(1000000)};
  size_t len;
  uint8_t *buf = image(&len, 2, models, keys, exp, r);
  write_bytes(path, buf, len);
  free(buf);
  assert_null(sip__journal_open(dir, collect, &g, &j));
  assert_int_equal(g.n, 1);
  assert_string_equal(g.key[0], "\nnew");
  same(g.resp[0], r[1]);
  got_free(&g);
  size_t n;
  uint8_t *file = read_bytes(path, &n);
  assert_int_equal(sip__journal_read(file, n, collect, &g, (const char *[]){NULL}), n);
  assert_int_equal(g.n, 1); /* the file was started afresh with it alone */
  got_free(&g);
  free(file);
  /* An append lands at the end. */
  sip__journal_append(j, "text", "\nappended", UINT64_MAX, r[0]);
  file = read_bytes(path, &n);
  assert_int_equal(sip__journal_size(j), n);
  const char *why = NULL;
  assert_int_equal(sip__journal_read(file, n, collect, &g, &why), n);
  assert_int_equal(g.n, 2);
  assert_string_equal(g.model[1], "text");
  got_free(&g);
  free(file);
  /* A rewrite replaces the whole file with what it emits; appends go on. */
  sip__journal_rewrite(j, emit_one, r[1]);
  sip__journal_append(j, "work", "\nafter", UINT64_MAX, r[0]);
  file = read_bytes(path, &n);
  assert_int_equal(sip__journal_read(file, n, collect, &g, &why), n);
  assert_int_equal(g.n, 2);
  assert_string_equal(g.key[0], "\nrewritten");
  same(g.resp[0], r[1]);
  assert_string_equal(g.key[1], "\nafter");
  got_free(&g);
  free(file);
  sip__journal_close(j);
  char tmp[320];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  assert_int_equal(access(tmp, F_OK), -1);
  unlink(path);
  rmdir(dir);
  rmdir(root);
  for (int i = 0; i < 2; i++) sip_response_free(r[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_resync_after_damage),
      cmocka_unit_test(test_open_append_rewrite),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
