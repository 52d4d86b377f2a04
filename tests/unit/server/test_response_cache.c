/* Unit tests for the response cache's keys and values
 * (src/server/cache/response_cache_codec.c) and its memory backend
 * (src/server/cache/response_cache_memory.c): the digest changes with every
 * field that changes a result and with nothing else; values round-trip
 * byte for byte and every truncation or corruption is refused with a
 * reason; the memory backend evicts least recently used first within
 * max_bytes and keeps the pool's byte gauge. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "server/cache/response_cache.h"
#include "session/request/request.h"

/* A request to "m" with input x = FP32 [2,3] of `base`+i, shaped `d0` x 6/d0. */
static sip_request_t *req(float base, int64_t d0) {
  sip_request_t *r = sip_request_new("m");
  assert_non_null(r);
  float v[6];
  for (int i = 0; i < 6; i++) v[i] = base + (float)i;
  int64_t dims[2] = {d0, 6 / d0};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy("x", SIP_DTYPE_FLOAT32, 2, dims, v,
                                                          sizeof v)));
  return r;
}

static void key_of(const char *model, const char *version, const sip_request_t *r,
                   uint8_t out[SIP__RCACHE_DIGEST]) {
  assert_int_equal(sip__rcache_key(model, version, r, out), 0);
}

static void test_key_changes_with_what_changes_a_result(void **state) {
  (void)state;
  uint8_t k0[32], k[32];
  sip_request_t *r = req(1, 2);
  key_of("m", "1", r, k0);
  key_of("m", "1", r, k);
  assert_memory_equal(k0, k, 32); /* deterministic */
  /* Model and version. */
  key_of("n", "1", r, k);
  assert_memory_not_equal(k0, k, 32);
  key_of("m", "2", r, k);
  assert_memory_not_equal(k0, k, 32);
  /* Fields are length-prefixed: "m1"+"" is not "m"+"1". */
  uint8_t a[32], b[32];
  key_of("m1", "", r, a);
  key_of("m", "1", r, b);
  assert_memory_not_equal(a, b, 32);
  /* An unversioned pool: NULL and "" are the same version. */
  key_of("m", NULL, r, a);
  key_of("m", "", r, b);
  assert_memory_equal(a, b, 32);
  /* Input bytes, shape (same bytes), dtype, name. */
  sip_request_t *r2 = req(2, 2);
  key_of("m", "1", r2, k);
  assert_memory_not_equal(k0, k, 32);
  sip_request_free(r2);
  r2 = req(1, 3);
  key_of("m", "1", r2, k);
  assert_memory_not_equal(k0, k, 32);
  r2->inputs[0]->dtype = SIP_DTYPE_INT32;
  r2->inputs[0]->dims[0] = 2;
  r2->inputs[0]->dims[1] = 3;
  key_of("m", "1", r2, k);
  assert_memory_not_equal(k0, k, 32);
  sip_request_free(r2);
  r2 = req(1, 2);
  r2->inputs[0]->name[0] = 'z';
  key_of("m", "1", r2, k);
  assert_memory_not_equal(k0, k, 32);
  sip_request_free(r2);
  /* Requested outputs. */
  r2 = req(1, 2);
  assert_null(sip_request_add_output(r2, "y"));
  key_of("m", "1", r2, k);
  assert_memory_not_equal(k0, k, 32);
  sip_request_free(r2);
  /* pipeline_config changes a result. */
  r2 = req(1, 2);
  assert_null(sip_request_set_pipeline_config(r2, "{\"early_exit_condition\":\"a.y > 1\"}"));
  key_of("m", "1", r2, k);
  assert_memory_not_equal(k0, k, 32);
  sip_request_free(r2);
  /* Priority, timeouts, ids, idempotency keys and the version asked for
   * (the served one is what counts) do not. */
  r2 = req(1, 2);
  assert_null(sip_request_set_priority(r2, 1));
  sip_request_set_timeout_ms(r2, 1234);
  sip_request_set_batch_wait_ms(r2, 5);
  sip_request_set_id(r2, 99);
  assert_null(sip_request_set_idempotency_key(r2, "key-1"));
  assert_null(sip_request_set_client_id(r2, "client-7"));
  key_of("m", "1", r2, k);
  assert_memory_equal(k0, k, 32);
  sip_request_free(r2);
  sip_request_free(r);
}

/* Outputs: FP32 [2,3], STRING [2] ("hi", ""), INT64 scalar, UINT8 [0]. */
static size_t make_outputs(sip_tensor_t **o) {
  float f[6] = {1.5f, -2, 3, 4, 5, 6};
  int64_t d23[2] = {2, 3}, d2[1] = {2}, d0[1] = {0};
  uint8_t s[14] = {2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0};
  int64_t seven = 7;
  o[0] = sip_tensor_new_copy("y", SIP_DTYPE_FLOAT32, 2, d23, f, sizeof f);
  o[1] = sip_tensor_new_copy("text", SIP_DTYPE_STRING, 1, d2, s, 10);
  o[2] = sip_tensor_new_copy("n", SIP_DTYPE_INT64, 0, NULL, &seven, sizeof seven);
  o[3] = sip_tensor_new_copy("empty", SIP_DTYPE_UINT8, 1, d0, NULL, 0);
  for (int i = 0; i < 4; i++) assert_non_null(o[i]);
  return 4;
}

static void free_outputs(sip_tensor_t **o, size_t n) {
  for (size_t i = 0; i < n; i++) sip_tensor_free(o[i]);
}

static void test_value_round_trip(void **state) {
  (void)state;
  sip_tensor_t *o[4];
  size_t n = make_outputs(o), len = 0;
  uint8_t *val = sip__rcache_encode(o, n, &len);
  assert_non_null(val);
  assert_memory_equal(val, "SRC1", 4);
  sip_tensor_t **back = NULL;
  size_t nb = 0;
  const char *why = NULL;
  assert_int_equal(sip__rcache_decode(val, len, &back, &nb, &why), 0);
  assert_int_equal(nb, n);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(back[i]->name, o[i]->name);
    assert_int_equal(back[i]->dtype, o[i]->dtype);
    assert_int_equal(back[i]->rank, o[i]->rank);
    assert_memory_equal(back[i]->dims, o[i]->dims, sizeof(int64_t) * (size_t)o[i]->rank);
    assert_int_equal(back[i]->nbytes, o[i]->nbytes);
    if (o[i]->nbytes) assert_memory_equal(back[i]->data, o[i]->data, o[i]->nbytes);
  }
  /* Encoding is canonical: the decoded outputs give the same bytes. */
  size_t len2 = 0;
  uint8_t *val2 = sip__rcache_encode(back, nb, &len2);
  assert_int_equal(len2, len);
  assert_memory_equal(val2, val, len);
  sip__free(val2);
  free_outputs(back, nb);
  sip__free(back);
  /* No outputs at all is a value too. */
  uint8_t *none = sip__rcache_encode(NULL, 0, &len2);
  assert_non_null(none);
  assert_int_equal(sip__rcache_decode(none, len2, &back, &nb, &why), 0);
  assert_int_equal(nb, 0);
  sip__free(none);
  sip__free(val);
  free_outputs(o, n);
}

static void refused(const uint8_t *val, size_t len) {
  sip_tensor_t **back = (sip_tensor_t **)1;
  size_t nb = 99;
  const char *why = NULL;
  assert_int_equal(sip__rcache_decode(val, len, &back, &nb, &why), -1);
  assert_null(back);
  assert_int_equal(nb, 0);
  assert_non_null(why);
  assert_true(strlen(why) > 0);
}

static void test_value_corruption_refused(void **state) {
  (void)state;
  sip_tensor_t *o[4];
  size_t n = make_outputs(o), len = 0;
  uint8_t *val = sip__rcache_encode(o, n, &len);
  assert_non_null(val);
  for (size_t cut = 0; cut < len; cut++) refused(val, cut); /* every truncation */
  uint8_t *copy = sip__malloc(len + 1);
  memcpy(copy, val, len);
  copy[len] = 0;
  refused(copy, len + 1); /* a trailing byte */
  copy[0] = 'X';
  refused(copy, len); /* not the magic */
  memcpy(copy, val, len);
  copy[4] = 0xff; /* more outputs than bytes */
  refused(copy, len);
  memcpy(copy, val, len);
  copy[8 + 2 + 1] = 0; /* the first output's dtype: INVALID */
  refused(copy, len);
  memcpy(copy, val, len);
  copy[8 + 2 + 1] = SIP_DTYPE_INT64; /* FP32 [2,3]'s 24 bytes are not 6 INT64s */
  refused(copy, len);
  memcpy(copy, val, len);
  copy[8 + 2 + 2] = SIP_MAX_RANK + 1; /* rank out of range */
  refused(copy, len);
  memcpy(copy, val, len);
  copy[8 + 2 + 3 + 7] = 0x80; /* a negative first dim */
  refused(copy, len);
  sip__free(copy);
  sip__free(val);
  /* Device memory is never encoded. */
  o[0]->memory_type = SIP_MEMORY_DEVICE;
  assert_int_equal(sip__rcache_encodable(o, n), 0);
  assert_null(sip__rcache_encode(o, n, &len));
  o[0]->memory_type = SIP_MEMORY_CPU;
  free_outputs(o, n);
}

static void key_n(uint8_t k[32], int i) {
  memset(k, 0, 32);
  k[0] = (uint8_t)i;
  k[31] = 0x5a;
}

static int get(void *be, int i, uint8_t want) {
  uint8_t k[32], *v = NULL;
  size_t len = 0;
  key_n(k, i);
  int rc = sip__rcache_memory_vt.get(be, k, &v, &len);
  if (rc == 1) {
    assert_int_equal(len, 1000);
    assert_int_equal(v[0], want);
    assert_int_equal(v[999], want);
  }
  sip__free(v);
  return rc;
}

static void put(void *be, int i, uint8_t fill, _Atomic int64_t *gauge) {
  uint8_t k[32], v[1000];
  key_n(k, i);
  memset(v, fill, sizeof v);
  assert_int_equal(sip__rcache_memory_vt.put(be, k, v, sizeof v, gauge), 0);
}

static void test_memory_lru(void **state) {
  (void)state;
  /* Room for two 1000-byte values with their bookkeeping, not three. */
  void *be = sip__rcache_memory_new(2600);
  assert_non_null(be);
  _Atomic int64_t g1 = 0, g2 = 0;
  assert_int_equal(get(be, 1, 0), 0);
  put(be, 1, 0x11, &g1);
  put(be, 2, 0x22, &g2);
  assert_true(atomic_load(&g1) >= 1000 && atomic_load(&g2) >= 1000);
  assert_int_equal(get(be, 1, 0x11), 1); /* 1 is now the most recently used */
  put(be, 3, 0x33, &g2);                 /* evicts 2, the least recently used */
  assert_int_equal(get(be, 2, 0), 0);
  assert_int_equal(get(be, 1, 0x11), 1);
  assert_int_equal(get(be, 3, 0x33), 1);
  int64_t one = atomic_load(&g1);
  assert_int_equal(atomic_load(&g2), one); /* 2 left, 3 came: one value each */
  /* The same key again replaces its value. */
  put(be, 1, 0x44, &g1);
  assert_int_equal(get(be, 1, 0x44), 1);
  assert_int_equal(atomic_load(&g1), one);
  /* A value bigger than max_bytes is not kept (and evicts nothing). */
  uint8_t k[32], big[4000];
  key_n(k, 9);
  memset(big, 1, sizeof big);
  assert_int_equal(sip__rcache_memory_vt.put(be, k, big, sizeof big, &g1), 0);
  assert_int_equal(get(be, 9, 0), 0);
  assert_int_equal(get(be, 1, 0x44), 1);
  assert_int_equal(get(be, 3, 0x33), 1);
  sip__rcache_memory_vt.free(be);
  /* Freeing gives the bytes back. */
  assert_int_equal(atomic_load(&g1), 0);
  assert_int_equal(atomic_load(&g2), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key_changes_with_what_changes_a_result),
      cmocka_unit_test(test_value_round_trip),
      cmocka_unit_test(test_value_corruption_refused),
      cmocka_unit_test(test_memory_lru),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
