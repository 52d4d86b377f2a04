/* Unit tests for src/sched/batch.c: joining requests' tensors along dim 0
 * (numeric and STRING), padding a short batch to a fixed size
 * (replicate_last, zero), slicing a batch's outputs back (views sharing the
 * batch's buffer), compatibility rules and allocation failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/core.h"
#include "sched/batch.h"
#include "sip/tensor.h"

/* ---- helpers ---------------------------------------------------------- */

static sip_tensor_t *f32(const char *name, int64_t rows, int64_t cols, float first) {
  float v[64];
  assert_true(rows * cols <= 64);
  for (int64_t i = 0; i < rows * cols; i++) v[i] = first + (float)i;
  int64_t d[2] = {rows, cols};
  sip_tensor_t *t =
      sip_tensor_new_copy(name, SIP_DTYPE_FLOAT32, 2, d, v, (size_t)(rows * cols) * sizeof(float));
  assert_non_null(t);
  return t;
}

/* Packs strings as the wire does: u32 LE length + bytes, one after another. */
static size_t pack(const char *const *s, size_t n, unsigned char *out) {
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t len = (uint32_t)strlen(s[i]);
    out[off] = (unsigned char)len;
    out[off + 1] = (unsigned char)(len >> 8);
    out[off + 2] = (unsigned char)(len >> 16);
    out[off + 3] = (unsigned char)(len >> 24);
    memcpy(out + off + 4, s[i], len);
    off += 4 + len;
  }
  return off;
}

static sip_tensor_t *str(const char *name, int64_t rows, int64_t cols, const char *const *s) {
  unsigned char buf[1024];
  size_t n = pack(s, (size_t)(rows * cols), buf);
  int64_t d[2] = {rows, cols};
  sip_tensor_t *t = sip_tensor_new_copy(name, SIP_DTYPE_STRING, 2, d, buf, n);
  assert_non_null(t);
  return t;
}

/* Asserts that STRING tensor t holds exactly `want` (count elements). */
static void assert_strings(const sip_tensor_t *t, const char *const *want, size_t count) {
  assert_int_equal(t->dtype, SIP_DTYPE_STRING);
  assert_null(sip_tensor_validate(t));
  assert_int_equal(sip_tensor_count(t), (int64_t)count);
  const unsigned char *p = t->data;
  size_t off = 0;
  for (size_t i = 0; i < count; i++) {
    assert_true(off + 4 <= t->nbytes);
    uint32_t len = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
                   (uint32_t)p[off + 3] << 24;
    off += 4;
    if (len != strlen(want[i]) || memcmp(p + off, want[i], len) != 0)
      fail_msg("string element %zu is \"%.*s\", want \"%s\"", i, (int)len, (const char *)p + off,
               want[i]);
    off += len;
  }
  assert_int_equal(off, t->nbytes);
}

static void assert_floats(const sip_tensor_t *t, const float *want, size_t count) {
  assert_int_equal(t->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(t->nbytes, count * sizeof(float));
  assert_int_equal(sip_tensor_count(t), (int64_t)count);
  const float *f = t->data;
  for (size_t i = 0; i < count; i++)
    if (f[i] != want[i]) fail_msg("element %zu is %g, want %g", i, (double)f[i], (double)want[i]);
}

static void expect_error(sip_error_t *e, sip_code_t code, const char *sub) {
  if (!e) fail_msg("expected %s, got success", sip_code_name(code));
  char msg[512];
  snprintf(msg, sizeof msg, "%s", sip_error_message(e));
  sip_code_t got = sip_error_code(e);
  sip_error_free(e);
  if (got != code) fail_msg("code %s, want %s: %s", sip_code_name(got), sip_code_name(code), msg);
  if (sub && !strstr(msg, sub)) fail_msg("message lacks \"%s\": %s", sub, msg);
}

/* ---- concat ----------------------------------------------------------- */

static void test_concat_numeric(void **state) {
  (void)state;
  sip_tensor_t *a = f32("x", 1, 3, 0), *b = f32("x", 2, 3, 10), *c = f32("x", 1, 3, 100);
  const sip_tensor_t *parts[] = {a, b, c};
  sip_tensor_t *out = NULL;
  assert_null(sip__batch_concat("joined", parts, 3, 0, SIP__PAD_NONE, &out));
  assert_non_null(out);
  assert_string_equal(out->name, "joined");
  assert_int_equal(out->rank, 2);
  assert_int_equal(out->dims[0], 4);
  assert_int_equal(out->dims[1], 3);
  assert_non_null(out->owner); /* a fresh buffer: slices of it can be views */
  static const float want[] = {0, 1, 2, 10, 11, 12, 13, 14, 15, 100, 101, 102};
  assert_floats(out, want, 12);
  assert_null(sip_tensor_validate(out));
  /* A copy: the parts can go first. */
  sip_tensor_free(a);
  sip_tensor_free(b);
  sip_tensor_free(c);
  assert_floats(out, want, 12);
  sip_tensor_free(out);

  /* pad_to not above the rows given: no padding, whatever the strategy. */
  a = f32("x", 2, 2, 1);
  b = f32("x", 1, 2, 5);
  const sip_tensor_t *p2[] = {a, b};
  for (int pad = SIP__PAD_NONE; pad <= SIP__PAD_ZERO; pad++) {
    for (int64_t to = 0; to <= 3; to++) {
      assert_null(sip__batch_concat("x", p2, 2, to, pad, &out));
      assert_int_equal(out->dims[0], 3);
      static const float w[] = {1, 2, 3, 4, 5, 6};
      assert_floats(out, w, 6);
      sip_tensor_free(out);
    }
  }
  /* One part alone is a copy of it. */
  assert_null(sip__batch_concat("x", p2, 1, 0, SIP__PAD_NONE, &out));
  assert_int_equal(out->dims[0], 2);
  assert_true(out->data != a->data);
  static const float w1[] = {1, 2, 3, 4};
  assert_floats(out, w1, 4);
  sip_tensor_free(out);
  sip_tensor_free(a);
  sip_tensor_free(b);
}

static void test_concat_rank1_and_int64(void **state) {
  (void)state;
  int64_t v1[] = {1, -2}, v2[] = {INT64_MAX}, d1[1] = {2}, d2[1] = {1};
  sip_tensor_t *a = sip_tensor_new_copy("i", SIP_DTYPE_INT64, 1, d1, v1, sizeof v1);
  sip_tensor_t *b = sip_tensor_new_copy("i", SIP_DTYPE_INT64, 1, d2, v2, sizeof v2);
  const sip_tensor_t *parts[] = {a, b};
  sip_tensor_t *out = NULL;
  assert_null(sip__batch_concat("i", parts, 2, 5, SIP__PAD_REPLICATE_LAST, &out));
  assert_int_equal(out->rank, 1);
  assert_int_equal(out->dims[0], 5);
  assert_int_equal(out->nbytes, 5 * sizeof(int64_t));
  const int64_t *g = out->data;
  assert_true(g[0] == 1 && g[1] == -2 && g[2] == INT64_MAX && g[3] == INT64_MAX &&
              g[4] == INT64_MAX);
  sip_tensor_free(out);
  assert_null(sip__batch_concat("i", parts, 2, 4, SIP__PAD_ZERO, &out));
  g = out->data;
  assert_int_equal(out->dims[0], 4);
  assert_true(g[0] == 1 && g[1] == -2 && g[2] == INT64_MAX && g[3] == 0);
  sip_tensor_free(out);
  sip_tensor_free(a);
  sip_tensor_free(b);
}

static void test_concat_strings(void **state) {
  (void)state;
  /* Rows of 2 strings each, of very different lengths (empty included). */
  static const char *const sa[] = {"a", ""};
  static const char *const sb[] = {"hello, world", "xyz", "", "a much longer string, 40 bytes long!!!!"};
  static const char *const sc[] = {"\xc3\xbc", "zz"};
  sip_tensor_t *a = str("s", 1, 2, sa), *b = str("s", 2, 2, sb), *c = str("s", 1, 2, sc);
  const sip_tensor_t *parts[] = {a, b, c};
  sip_tensor_t *out = NULL;
  assert_null(sip__batch_concat("s", parts, 3, 0, SIP__PAD_NONE, &out));
  assert_int_equal(out->dims[0], 4);
  assert_int_equal(out->dims[1], 2);
  static const char *const all[] = {"a", "", "hello, world", "xyz", "",
                                    "a much longer string, 40 bytes long!!!!", "\xc3\xbc", "zz"};
  assert_strings(out, all, 8);
  sip_tensor_free(out);

  /* replicate_last copies the whole last row (both of its strings). */
  assert_null(sip__batch_concat("s", parts, 3, 6, SIP__PAD_REPLICATE_LAST, &out));
  assert_int_equal(out->dims[0], 6);
  static const char *const rep[] = {"a", "", "hello, world", "xyz", "",
                                    "a much longer string, 40 bytes long!!!!", "\xc3\xbc", "zz",
                                    "\xc3\xbc", "zz", "\xc3\xbc", "zz"};
  assert_strings(out, rep, 12);
  sip_tensor_free(out);

  /* The last row of a multi-row last part (its strings differ in length). */
  const sip_tensor_t *ba[] = {a, b};
  assert_null(sip__batch_concat("s", ba, 2, 4, SIP__PAD_REPLICATE_LAST, &out));
  static const char *const rep2[] = {"a", "", "hello, world", "xyz", "",
                                     "a much longer string, 40 bytes long!!!!", "",
                                     "a much longer string, 40 bytes long!!!!"};
  assert_strings(out, rep2, 8);
  sip_tensor_free(out);

  /* zero padding of strings: empty strings. */
  assert_null(sip__batch_concat("s", parts, 3, 5, SIP__PAD_ZERO, &out));
  assert_int_equal(out->dims[0], 5);
  static const char *const zer[] = {"a", "", "hello, world", "xyz", "",
                                    "a much longer string, 40 bytes long!!!!", "\xc3\xbc", "zz",
                                    "", ""};
  assert_strings(out, zer, 10);
  sip_tensor_free(out);
  sip_tensor_free(a);
  sip_tensor_free(b);
  sip_tensor_free(c);
}

static void test_padding_numeric(void **state) {
  (void)state;
  sip_tensor_t *a = f32("x", 1, 2, 1), *b = f32("x", 1, 2, 7);
  const sip_tensor_t *parts[] = {a, b};
  sip_tensor_t *out = NULL;
  assert_null(sip__batch_concat("x", parts, 2, 5, SIP__PAD_REPLICATE_LAST, &out));
  assert_int_equal(out->dims[0], 5);
  static const float rep[] = {1, 2, 7, 8, 7, 8, 7, 8, 7, 8};
  assert_floats(out, rep, 10);
  sip_tensor_free(out);

  assert_null(sip__batch_concat("x", parts, 2, 4, SIP__PAD_ZERO, &out));
  assert_int_equal(out->dims[0], 4);
  static const float zer[] = {1, 2, 7, 8, 0, 0, 0, 0};
  assert_floats(out, zer, 8);
  sip_tensor_free(out);

  /* A single short request padded to the model's fixed batch. */
  assert_null(sip__batch_concat("x", parts, 1, 4, SIP__PAD_REPLICATE_LAST, &out));
  static const float one[] = {1, 2, 1, 2, 1, 2, 1, 2};
  assert_floats(out, one, 8);
  sip_tensor_free(out);

  /* Nothing to replicate: a last part of zero rows. */
  sip_tensor_t *empty = f32("x", 0, 2, 0);
  const sip_tensor_t *pe[] = {empty};
  expect_error(sip__batch_concat("x", pe, 1, 2, SIP__PAD_REPLICATE_LAST, &out),
               SIP_INVALID_ARGUMENT, "input 'x'");
  assert_null(out);
  /* ...while zero padding of nothing is all zeros. */
  assert_null(sip__batch_concat("x", pe, 1, 2, SIP__PAD_ZERO, &out));
  static const float z4[] = {0, 0, 0, 0};
  assert_floats(out, z4, 4);
  sip_tensor_free(out);
  sip_tensor_free(empty);
  sip_tensor_free(a);
  sip_tensor_free(b);
}

/* ---- slice ------------------------------------------------------------ */

static int released;
static void on_release(void *ctx) {
  released++;
  free(ctx);
}

static void test_slice_back(void **state) {
  (void)state;
  sip_tensor_t *a = f32("x", 1, 3, 0), *b = f32("x", 2, 3, 10), *c = f32("x", 3, 3, 20);
  const sip_tensor_t *parts[] = {a, b, c};
  sip_tensor_t *joined = NULL;
  assert_null(sip__batch_concat("x", parts, 3, 8, SIP__PAD_ZERO, &joined));
  assert_int_equal(joined->dims[0], 8);
  /* Each part's rows come back equal to the part, under the output's name. */
  sip_tensor_t *back[3];
  int64_t row0 = 0;
  for (int i = 0; i < 3; i++) {
    assert_null(sip__batch_slice(joined, "y", row0, parts[i]->dims[0], &back[i]));
    assert_string_equal(back[i]->name, "y");
    assert_int_equal(back[i]->rank, 2);
    assert_int_equal(back[i]->dims[0], parts[i]->dims[0]);
    assert_int_equal(back[i]->dims[1], 3);
    assert_int_equal(back[i]->nbytes, parts[i]->nbytes);
    assert_memory_equal(back[i]->data, parts[i]->data, parts[i]->nbytes);
    /* Views: same buffer as the batch, at the right place. */
    assert_ptr_equal(back[i]->owner, joined->owner);
    assert_ptr_equal(back[i]->data, (const char *)joined->data + row0 * 3 * sizeof(float));
    row0 += parts[i]->dims[0];
  }
  /* Slices outlive the batch tensor (they hold the buffer). */
  sip_tensor_free(joined);
  for (int i = 0; i < 3; i++) {
    assert_memory_equal(back[i]->data, parts[i]->data, parts[i]->nbytes);
    sip_tensor_free(back[i]);
  }
  sip_tensor_free(a);
  sip_tensor_free(b);
  sip_tensor_free(c);
}

static void test_slice_shares_owner(void **state) {
  (void)state;
  /* A batch output backed by a buffer whose release we can see. */
  float *mem = malloc(6 * sizeof(float));
  assert_non_null(mem);
  for (int i = 0; i < 6; i++) mem[i] = (float)i;
  released = 0;
  sip_buf_t *buf = sip_buf_wrap(mem, 6 * sizeof(float), on_release, mem);
  assert_non_null(buf);
  int64_t d[2] = {3, 2};
  sip_tensor_t *out = sip_tensor_new_view("y", SIP_DTYPE_FLOAT32, 2, d, mem, 24, buf);
  sip_buf_unref(buf); /* the tensor holds the only reference now */
  assert_non_null(out);
  sip_tensor_t *s0 = NULL, *s1 = NULL, *s2 = NULL;
  assert_null(sip__batch_slice(out, "y", 0, 1, &s0));
  assert_null(sip__batch_slice(out, "y", 1, 2, &s1));
  assert_null(sip__batch_slice(out, "y", 3, 0, &s2)); /* an empty tail slice */
  assert_ptr_equal(s0->owner, buf);
  assert_ptr_equal(s1->owner, buf);
  assert_ptr_equal(s0->data, mem);
  assert_ptr_equal(s1->data, mem + 2);
  assert_int_equal(s2->dims[0], 0);
  assert_int_equal(s2->nbytes, 0);
  sip_tensor_free(out);
  assert_int_equal(released, 0); /* the slices keep the buffer */
  sip_tensor_free(s1);
  sip_tensor_free(s2);
  assert_int_equal(released, 0);
  static const float w0[] = {0, 1};
  assert_floats(s0, w0, 2);
  sip_tensor_free(s0);
  assert_int_equal(released, 1); /* the last reference released it, once */

  /* A tensor without an owner (borrowed memory) is sliced as a copy. */
  float loose[4] = {1, 2, 3, 4};
  int64_t d2[2] = {2, 2};
  sip_tensor_t *b = sip_tensor_new_view("y", SIP_DTYPE_FLOAT32, 2, d2, loose, sizeof loose, NULL);
  assert_non_null(b);
  assert_null(b->owner);
  sip_tensor_t *cp = NULL;
  assert_null(sip__batch_slice(b, "z", 1, 1, &cp));
  assert_true(cp->data != (const void *)(loose + 2));
  sip_tensor_free(b);
  loose[2] = 99; /* the copy does not see it */
  static const float w1[] = {3, 4};
  assert_floats(cp, w1, 2);
  sip_tensor_free(cp);
}

static void test_slice_strings(void **state) {
  (void)state;
  static const char *const s[] = {"", "one", "three", "a longer string here", "x", ""};
  sip_tensor_t *t = str("s", 3, 2, s);
  /* Give it an owner so slices are views (as a batch output has). */
  sip_tensor_t *joined = NULL;
  const sip_tensor_t *parts[] = {t};
  assert_null(sip__batch_concat("s", parts, 1, 0, SIP__PAD_NONE, &joined));
  sip_tensor_t *r0 = NULL, *r12 = NULL, *r2 = NULL;
  assert_null(sip__batch_slice(joined, "o", 0, 1, &r0));
  assert_null(sip__batch_slice(joined, "o", 1, 2, &r12));
  assert_null(sip__batch_slice(joined, "o", 2, 1, &r2));
  assert_strings(r0, s, 2);
  assert_strings(r12, s + 2, 4);
  assert_strings(r2, s + 4, 2);
  assert_ptr_equal(r12->owner, joined->owner);
  sip_tensor_free(joined);
  assert_strings(r12, s + 2, 4);
  sip_tensor_free(r0);
  sip_tensor_free(r12);
  sip_tensor_free(r2);
  sip_tensor_free(t);
}

static void test_slice_out_of_range(void **state) {
  (void)state;
  sip_tensor_t *t = f32("y", 3, 2, 0), *out = (sip_tensor_t *)1;
  expect_error(sip__batch_slice(t, "y", 2, 2, &out), SIP_INTERNAL, "output 'y' has 3 rows");
  assert_null(out);
  expect_error(sip__batch_slice(t, "y", -1, 1, &out), SIP_INTERNAL, NULL);
  expect_error(sip__batch_slice(t, "y", 0, -1, &out), SIP_INTERNAL, NULL);
  expect_error(sip__batch_slice(t, "y", 4, 0, &out), SIP_INTERNAL, NULL);
  /* A scalar has no rows to slice. */
  float one = 1;
  sip_tensor_t *sc = sip_tensor_new_copy("y", SIP_DTYPE_FLOAT32, 0, NULL, &one, sizeof one);
  expect_error(sip__batch_slice(sc, "y", 0, 1, &out), SIP_INTERNAL, NULL);
  assert_null(out);
  sip_tensor_free(sc);
  sip_tensor_free(t);
}

/* ---- compatibility ---------------------------------------------------- */

static void test_incompatible_rejected(void **state) {
  (void)state;
  sip_tensor_t *a = f32("x", 1, 3, 0), *wide = f32("x", 1, 4, 0);
  int32_t iv[3] = {0};
  int64_t d13[2] = {1, 3}, d3[1] = {3}, d131[3] = {1, 3, 1};
  sip_tensor_t *ints = sip_tensor_new_copy("x", SIP_DTYPE_INT32, 2, d13, iv, sizeof iv);
  float fv[3] = {0};
  sip_tensor_t *r1 = sip_tensor_new_copy("x", SIP_DTYPE_FLOAT32, 1, d3, fv, sizeof fv);
  sip_tensor_t *r3 = sip_tensor_new_copy("x", SIP_DTYPE_FLOAT32, 3, d131, fv, sizeof fv);
  float one = 1;
  sip_tensor_t *sc = sip_tensor_new_copy("x", SIP_DTYPE_FLOAT32, 0, NULL, &one, sizeof one);

  assert_true(sip__batch_compatible(a, a));
  sip_tensor_t *a5 = f32("x", 5, 3, 0); /* dim 0 may differ */
  assert_true(sip__batch_compatible(a, a5));
  assert_false(sip__batch_compatible(a, wide)); /* dim 1 */
  assert_false(sip__batch_compatible(a, ints)); /* dtype */
  assert_false(sip__batch_compatible(a, r1));   /* rank */
  assert_false(sip__batch_compatible(a, r3));
  assert_false(sip__batch_compatible(sc, sc)); /* a scalar has no batch dim */

  const sip_tensor_t *bad[][2] = {{a, wide}, {a, ints}, {a, r1}, {a, r3}, {sc, sc}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sip_tensor_t *out = (sip_tensor_t *)1;
    expect_error(sip__batch_concat("x", bad[i], 2, 0, SIP__PAD_NONE, &out), SIP_INTERNAL,
                 "input 'x': batch parts differ");
    assert_null(out);
  }
  /* The odd part may come anywhere in the list. */
  const sip_tensor_t *mid[] = {a, a5, wide, a};
  sip_tensor_t *out = (sip_tensor_t *)1;
  expect_error(sip__batch_concat("x", mid, 4, 8, SIP__PAD_ZERO, &out), SIP_INTERNAL, NULL);
  assert_null(out);
  /* An empty batch. */
  expect_error(sip__batch_concat("x", mid, 0, 0, SIP__PAD_NONE, &out), SIP_INTERNAL, NULL);
  assert_null(out);
  sip_tensor_free(a);
  sip_tensor_free(a5);
  sip_tensor_free(wide);
  sip_tensor_free(ints);
  sip_tensor_free(r1);
  sip_tensor_free(r3);
  sip_tensor_free(sc);
}

/* ---- allocation failures ---------------------------------------------- */

static void test_alloc_failures(void **state) {
  (void)state;
  static const char *const sa[] = {"ab", ""}, *const sb[] = {"cde", "f"};
  static const char *const want[] = {"ab", "", "cde", "f", "cde", "f"};
  sip_tensor_t *a = str("s", 1, 2, sa), *b = str("s", 1, 2, sb);
  const sip_tensor_t *parts[] = {a, b};
  /* Every allocation concat makes may fail: it reports it and leaks nothing. */
  int ok = 0;
  for (long n = 0; n < 50 && !ok; n++) {
    sip_tensor_t *out = (sip_tensor_t *)1;
    sip__alloc_fail_after(n);
    sip_error_t *e = sip__batch_concat("s", parts, 2, 3, SIP__PAD_REPLICATE_LAST, &out);
    sip__alloc_fail_after(-1);
    if (e) {
      expect_error(e, SIP_RESOURCE_EXHAUSTED, "out of memory");
      assert_null(out);
      continue;
    }
    ok = 1;
    assert_true(n > 0); /* it does allocate */
    assert_strings(out, want, 6);
    sip_tensor_free(out);
  }
  assert_true(ok);

  /* The same for slices, as views (an owner) and as copies (none). */
  sip_tensor_t *joined = NULL;
  assert_null(sip__batch_concat("s", parts, 2, 3, SIP__PAD_REPLICATE_LAST, &joined));
  sip_tensor_t loose = *joined;
  loose.owner = NULL;
  for (int copy = 0; copy < 2; copy++) {
    ok = 0;
    for (long n = 0; n < 50 && !ok; n++) {
      sip_tensor_t *v = (sip_tensor_t *)1;
      sip__alloc_fail_after(n);
      sip_error_t *e = sip__batch_slice(copy ? &loose : joined, "o", 1, 2, &v);
      sip__alloc_fail_after(-1);
      if (e) {
        expect_error(e, SIP_RESOURCE_EXHAUSTED, "out of memory");
        assert_null(v);
        continue;
      }
      ok = 1;
      assert_true(n > 0);
      assert_strings(v, want + 2, 4);
      if (copy)
        assert_true(v->owner != joined->owner);
      else
        assert_ptr_equal(v->owner, joined->owner);
      sip_tensor_free(v);
    }
    assert_true(ok);
  }
  sip_tensor_free(joined);
  sip_tensor_free(a);
  sip_tensor_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_concat_numeric),     cmocka_unit_test(test_concat_rank1_and_int64),
      cmocka_unit_test(test_concat_strings),     cmocka_unit_test(test_padding_numeric),
      cmocka_unit_test(test_slice_back),         cmocka_unit_test(test_slice_shares_owner),
      cmocka_unit_test(test_slice_strings),      cmocka_unit_test(test_slice_out_of_range),
      cmocka_unit_test(test_incompatible_rejected), cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
