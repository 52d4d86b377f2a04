/* Unit tests for src/http/kserve_numbers.c, the fast path of JSON tensor
 * data: numbers against strtod/strtoll (edge cases and random values, bit for
 * bit), the array grammar and dtype ranges of sip__ks_fill, and whole request
 * bodies decoded both ways (fast path and the classic jansson decoder), which
 * must give the same tensors or the same error. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "core/fmt.h"
#include "http/http.h"
#include "http/kserve_impl.h"
#include "session/engine.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static uint64_t bits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

/* s must read as strtod reads it (bit for bit), as a real. */
static void check_real(const char *s) {
  sip__ks_num_t v;
  size_t n = strlen(s);
  size_t used = sip__ks_number(s, n, &v);
  if (used != n) fail_msg("'%s': read %zu of %zu bytes", s, used, n);
  double want = strtod(s, NULL);
  if (v.is_int) fail_msg("'%s' read as an integer", s);
  if (bits(v.d) != bits(want)) fail_msg("'%s': got %.17g, strtod gives %.17g", s, v.d, want);
}

static void check_int(const char *s) {
  sip__ks_num_t v;
  size_t n = strlen(s);
  if (sip__ks_number(s, n, &v) != n || !v.is_int) fail_msg("'%s' not read as an integer", s);
  long long want = strtoll(s, NULL, 10);
  if (v.i != want || bits(v.d) != bits((double)want))
    fail_msg("'%s': got %lld, strtoll gives %lld", s, (long long)v.i, want);
}

static void check_bad(const char *s) {
  sip__ks_num_t v;
  size_t n = strlen(s);
  size_t used = sip__ks_number(s, n, &v);
  if (used && used == n) fail_msg("'%s' was accepted as a number", s);
}

static void test_number_edges(void **st) {
  (void)st;
  static const char *reals[] = {
      "0.0", "-0.0", "0e0", "-0e-0", "0.000", "1.0", "-1.5", "0.1", "0.2", "0.3", "1e0", "1E5",
      "1e+5", "-1.5e-7", "1e22", "1e23", "1e-22", "1e-23", "123.456e-10",
      "1.7976931348623157e308", "1.7976931348623158e308", "2.2250738585072014e-308",
      "2.2250738585072011e-308", "4.9406564584124654e-324", "5e-324", "2e-324", "1e-400",
      "9007199254740993.0", "9007199254740992.5", "18446744073709551615.0",
      "18446744073709551616e0", "3.14159265358979323846264338327950288",
      "0.500000000000000166533453693773481063544750213623046875",
      "1.00000000000000011102230246251565404236316680908203125",
      "1.00000000000000011102230246251565404236316680908203124",
      "1.00000000000000011102230246251565404236316680908203126",
      "0.30000000000000004", "0.12345678901234568", "1234567890123456789e-5",
      "9999999999999999999e27", "9999999999999999999e-27", "1e-27", "1e27", "8.98846567431158e307",
      "0.000000000000000000000000000000000000000000001", "100000000000000000000000e-3",
      "7.038531e-26", "3.4028235e38", "3.4028236e38", "1.17549435e-38", "1.4e-45",
      "6.103515625e-05", "65504.0", "65520.0", "2.98023223876953125e-8"};
  for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) check_real(reals[i]);
  static const char *ints[] = {"0",    "-0", "1", "-1", "127", "-128", "255", "65535",
                               "2147483647", "-2147483648", "4294967295",
                               "9007199254740993", "9223372036854775807",
                               "-9223372036854775808", "1000000000000000000"};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) check_int(ints[i]);
  /* -0 is an integer: 0.0, as jansson gives */
  sip__ks_num_t v;
  assert_int_equal(sip__ks_number("-0", 2, &v), 2);
  assert_int_equal(bits(v.d), 0);
  static const char *bad[] = {"",     "-",   "01",  "-01", "1.",  ".1",  "1e",  "1e+",
                              "+1",   "NaN", "nan", "Infinity", "-Infinity", "inf",
                              "1e400", "-1e400", "9223372036854775808",
                              "-9223372036854775809", "99999999999999999999", "0x10", "1.e5",
                              "--1",  "- 1", "e5"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) check_bad(bad[i]);
  /* A number ends where its grammar does; the rest is the caller's. */
  assert_int_equal(sip__ks_number("12,3", 4, &v), 2);
  assert_int_equal(sip__ks_number("1.5]", 4, &v), 3);
  assert_int_equal(sip__ks_number("-2e3 ", 5, &v), 4);
  /* Bounded: digits past n are not read. */
  assert_int_equal(sip__ks_number("1234", 2, &v), 2);
  assert_int_equal(v.i, 12);
}

static void test_number_random(void **st) {
  (void)st;
  char s[128];
  static const int digits[] = {6, 9, 15, 16, 17, 18, 19, 20, 25};
  for (int r = 0; r < 200000; r++) {
    /* Random doubles in every format a client prints. */
    uint64_t u = next();
    double d;
    memcpy(&d, &u, 8);
    if (!isfinite(d)) continue;
    snprintf(s, sizeof s, "%.*e", digits[r % 9] - 1, d);
    check_real(s);
    /* Round trip: 17 digits give the double back, 9 a float back. */
    if (r % 9 == 4) assert_true(bits(strtod(s, NULL)) == u);
    float f;
    uint32_t fu = (uint32_t)next();
    memcpy(&f, &fu, 4);
    if (isfinite(f)) {
      snprintf(s, sizeof s, "%.9g", (double)f);
      if (!strchr(s, '.') && !strchr(s, 'e')) strcat(s, ".0");
      check_real(s);
      sip__ks_num_t v;
      sip__ks_number(s, strlen(s), &v);
      float g = (float)v.d;
      assert_memory_equal(&g, &f, 4);
    }
    /* Values of moderate size, as tensors hold. */
    double m = ((double)(next() >> 11) / 9007199254740992.0 - 0.5) * pow(10, (int)(next() % 12) - 6);
    snprintf(s, sizeof s, "%.*e", digits[(r / 9) % 9] - 1, m);
    check_real(s);
    /* Near the halfway point between two doubles: the hard cases. */
    long double mid = ((long double)m + (long double)nextafter(m, INFINITY)) / 2;
    snprintf(s, sizeof s, "%.*Le", (int)(next() % 22) + 15, mid);
    check_real(s);
    /* Random digit strings, point and exponent anywhere. */
    int nd = 1 + (int)(next() % 24), pt = (int)(next() % (uint64_t)(nd + 1)), o = 0;
    if (next() & 1) s[o++] = '-';
    s[o++] = (char)('1' + next() % 9);
    for (int i = 1; i < nd; i++) {
      if (i == pt) s[o++] = '.';
      s[o++] = (char)('0' + next() % 10);
    }
    if (!pt || pt >= nd) {
      s[o++] = '.';
      s[o++] = '0';
    }
    o += snprintf(s + o, sizeof s - (size_t)o, "e%d", (int)(next() % 90) - 45);
    check_real(s);
  }
}

/* Fills n elements of dt from text, expecting success (1) or a refusal. */
static int fill(const char *text, sip_dtype_t dt, int64_t n, void *dst) {
  return sip__ks_fill(text, strlen(text), dt, dst, n) == 0;
}

static void test_fill(void **st) {
  (void)st;
  float f[8];
  assert_true(fill("[1, 2.5, -0.0, 1e-3]", SIP_DTYPE_FLOAT32, 4, f));
  assert_true(f[0] == 1 && f[1] == 2.5f && f[2] == 0 && signbit(f[2]) && f[3] == 1e-3f);
  assert_true(fill("[[1,2],[3,4]]", SIP_DTYPE_FLOAT32, 4, f));
  assert_true(f[3] == 4);
  assert_true(fill("[ [ [ 1 ] , [ ] ] , 2 ]", SIP_DTYPE_FLOAT32, 2, f)); /* as the classic walk */
  assert_true(fill("[]", SIP_DTYPE_FLOAT32, 0, f));
  assert_true(fill("[[],[]]", SIP_DTYPE_FLOAT32, 0, f));
  static const char *bad[] = {"[1,]", "[,1]", "[1 2]", "[1,,2]", "[[1],", "[1]]", "[1", "1",
                              "[true]", "[1,2,3]", "[1]", "[[1,2]3]", "[01,2]", "[1e999,2]",
                              "[1,2] ", "[nan,1]"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    if (fill(bad[i], SIP_DTYPE_FLOAT32, 2, f)) fail_msg("'%s' was accepted", bad[i]);
  uint8_t b[4];
  assert_true(fill("[true,false,[true]]", SIP_DTYPE_BOOL, 3, b));
  assert_true(b[0] == 1 && b[1] == 0 && b[2] == 1);
  assert_false(fill("[true,1]", SIP_DTYPE_BOOL, 2, b));
  assert_false(fill("[tru,false]", SIP_DTYPE_BOOL, 2, b));
  assert_false(fill("[1,2]", SIP_DTYPE_STRING, 2, b));
  /* Integer types: integers only, within range. */
  static const struct {
    sip_dtype_t dt;
    const char *ok, *bad;
  } ints[] = {
      {SIP_DTYPE_INT8, "[-128,127]", "[-129,0]"},
      {SIP_DTYPE_INT8, "[0,-0]", "[1.0,0]"},
      {SIP_DTYPE_UINT8, "[0,255]", "[256,0]"},
      {SIP_DTYPE_UINT8, "[0,1]", "[-1,0]"},
      {SIP_DTYPE_INT16, "[-32768,32767]", "[32768,0]"},
      {SIP_DTYPE_UINT16, "[0,65535]", "[65536,0]"},
      {SIP_DTYPE_INT32, "[-2147483648,2147483647]", "[2147483648,0]"},
      {SIP_DTYPE_UINT32, "[0,4294967295]", "[4294967296,0]"},
      {SIP_DTYPE_INT64, "[-9223372036854775808,9223372036854775807]", "[9223372036854775808,0]"},
      {SIP_DTYPE_UINT64, "[0,9223372036854775807]", "[1e3,0]"},
  };
  uint64_t w[2];
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
    if (!fill(ints[i].ok, ints[i].dt, 2, w)) fail_msg("'%s' refused", ints[i].ok);
    if (fill(ints[i].bad, ints[i].dt, 2, w)) fail_msg("'%s' accepted", ints[i].bad);
  }
  int64_t x[2];
  assert_true(fill("[-9223372036854775808,9223372036854775807]", SIP_DTYPE_INT64, 2, x));
  assert_true(x[0] == INT64_MIN && x[1] == INT64_MAX);
  uint16_t h[2];
  assert_true(fill("[1.5,-65504]", SIP_DTYPE_FLOAT16, 2, h));
  assert_int_equal(h[0], 0x3e00);
  assert_int_equal(h[1], 0xfbff);
}

static void test_cut(void **st) {
  (void)st;
  const char *body = "{\"id\":\"data\",\"inputs\":[{\"name\":\"a\",\"data\" : [1,2]},"
                     "{\"name\":\"s\",\"data\":[\"x\"]},{\"name\":\"b\",\"data\":[[true]]}]}";
  sip__ks_cut_t c;
  assert_int_equal(sip__ks_cut((const uint8_t *)body, strlen(body), 64, &c), 1);
  assert_int_equal(c.n_spans, 2);
  assert_string_equal(c.json, "{\"id\":\"data\",\"inputs\":[{\"name\":\"a\",\"data\" : \"\\u00000\"},"
                              "{\"name\":\"s\",\"data\":[\"x\"]},{\"name\":\"b\",\"data\":"
                              "\"\\u00001\"}]}");
  assert_int_equal(sip__ks_cut_index(&c, "\0" "1", 2), 1);
  assert_int_equal(sip__ks_cut_index(&c, "\0" "2", 2), -1);
  assert_int_equal(sip__ks_cut_index(&c, "1", 1), -1);
  assert_int_equal(sip__ks_cut_index(NULL, "\0" "0", 2), -1);
  sip__ks_cut_free(&c);
  /* Nothing to cut; a NUL escape anywhere; nesting too deep: the classic way. */
  static const char *none[] = {
      "{\"inputs\":[]}", "{\"data\":[1],\"x\":\"\\u0000\"}", "{\"data\":[[[1]]]}",
      "{\"data\":[1],\"x\":\"unterminated}"};
  for (size_t i = 0; i < sizeof none / sizeof *none; i++)
    assert_int_equal(sip__ks_cut((const uint8_t *)none[i], strlen(none[i]), i == 2 ? 3 : 64, &c),
                     0);
}

/* ---- the fast path and the classic decoder agree ----------------------- */

static sip_error_t *decode_with(int classic, const char *body, sip__ks_request_t **k) {
  sip__ks_json_classic(classic);
  sip_error_t *e = sip__ks_decode("m", NULL, (const uint8_t *)body, strlen(body), -1, NULL, NULL,
                                  0, k);
  sip__ks_json_classic(0);
  return e;
}

static void same_both_ways(const char *body) {
  sip__ks_request_t *a = NULL, *b = NULL;
  sip_error_t *ea = decode_with(0, body, &a), *eb = decode_with(1, body, &b);
  if (!!ea != !!eb)
    fail_msg("%s: fast %s, classic %s", body, ea ? sip_error_message(ea) : "ok",
             eb ? sip_error_message(eb) : "ok");
  if (ea) {
    if (strcmp(sip_error_message(ea), sip_error_message(eb)) ||
        sip_error_code(ea) != sip_error_code(eb))
      fail_msg("%s: fast '%s', classic '%s'", body, sip_error_message(ea), sip_error_message(eb));
  } else {
    assert_int_equal(a->req->n_inputs, b->req->n_inputs);
    for (size_t i = 0; i < a->req->n_inputs; i++) {
      const sip_tensor_t *x = a->req->inputs[i], *y = b->req->inputs[i];
      assert_string_equal(x->name, y->name);
      assert_int_equal(x->dtype, y->dtype);
      assert_int_equal(x->rank, y->rank);
      assert_memory_equal(x->dims, y->dims, sizeof(int64_t) * (size_t)x->rank);
      assert_int_equal(x->nbytes, y->nbytes);
      if (x->nbytes) assert_memory_equal(x->data, y->data, x->nbytes);
    }
  }
  sip_error_free(ea);
  sip_error_free(eb);
  sip__ks_request_free(a);
  sip__ks_request_free(b);
}

static void test_same_as_classic(void **st) {
  (void)st;
  static const char *types[] = {"BOOL",  "INT8",   "INT16",  "INT32", "INT64", "UINT8",
                                "UINT16", "UINT32", "UINT64", "FP16",  "FP32",  "FP64",
                                "BYTES", "BF16"};
  static const char *datas[] = {
      "[1,2,3]", "[[1],[2,3]]", "[-1,0,1]", "[1.5,-0.0,1e-7]", "[true,false,true]", "[1,2]",
      "[1,2,3,4]", "[300,-300,70000]", "[1e400,1,2]", "[1,,2]", "[1,2,3,]", "[01,2,3]",
      "[\"a\",\"b\",\"c\"]", "[\"NaN\",1,2]", "[null,1,2]", "[2147483648,4294967296,-1]",
      "[9223372036854775807,-9223372036854775808,0]", "[9223372036854775808,0,0]",
      "[1e2,1E+2,1e-2]", "[65504,65520,1e-8]", "[ 1 , [ 2 ] , [ [ 3 ] ] ]", "[[],[1,2,3]]",
      "[1 2 3]", "[1,2,3]]", "[1.0,2,3]", "[true,1,0]", "[-,1,2]", "[1.,2,3]"};
  char body[512];
  for (size_t t = 0; t < sizeof types / sizeof *types; t++)
    for (size_t d = 0; d < sizeof datas / sizeof *datas; d++) {
      snprintf(body, sizeof body,
               "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"%s\",\"shape\":[3],\"data\":%s}]}",
               types[t], datas[d]);
      same_both_ways(body);
    }
  static const char *bodies[] = {
      /* duplicates, twice "data", two inputs, data elsewhere */
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],\"data\":[2]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]},"
      "{\"name\":\"y\",\"datatype\":\"INT8\",\"shape\":[2,1],\"data\":[[1],[2]]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
      "\"parameters\":{\"data\":[1e999]}}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
      "\"outputs\":[{\"name\":\"data\",\"data\":[1]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]} x",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":\"\\u00000\"}]}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":\"\\u00000\"}]}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1]}], \"id\":\"data\"}",
      "[\"data\":[1]]",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],"
      "\"parameters\":{\"binary_data_size\":4}}]}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[100000],\"data\":[1]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[0],\"data\":[]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":1}]}",
  };
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) same_both_ways(bodies[i]);
}

/* ---- writing numbers: exactly printf's text, or the shortest -------------- */

static void same_as_printf(double v, int prec) {
  char want[64], got[64];
  snprintf(want, sizeof want, "%.*g", prec, v);
  size_t n = sip__ks_format_g(v, prec, got);
  if (n != strlen(want) || strcmp(got, want))
    fail_msg("%.17g at %d digits: '%s', printf writes '%s'", v, prec, got, want);
  /* Responses: 9 and 17 digits are float32's and float64's shortest text
   * (tests/unit/core/test_fmt.c), other precisions printf's. */
  if (prec == 9 && (double)(float)v != v) return;
  if (prec == 9) sip__fmt_float((float)v, want);
  else if (prec == 17) sip__fmt_double(v, want);
  if (sip__ks_format_double(v, prec, got) != strlen(want) || strcmp(got, want))
    fail_msg("%.17g at %d digits: '%s' in a response, expected '%s'", v, prec, got, want);
}

static void test_format(void **st) {
  (void)st;
  static const double edges[] = {0.0, -0.0, 1, -1, 0.1, 0.5, 1e-4, 9.99999e-5, 1e-5, 123456789,
                                 1234567890, 1e9, 1e16, 1e17, 99999999.95, 999999999.5,
                                 9.9999999949999999e8, 0.30000000000000004, 3.4028234663852886e38,
                                 1.401298464324817e-45, 5e-324, 1.7976931348623157e308, 65504,
                                 6.103515625e-05, 2.5, 1.5, 0.125, 1e21, 1e-7, 100, 1e100,
                                 -1e-100};
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
    for (int p = 1; p <= 17; p++) same_as_printf(edges[i], p);
  for (int r = 0; r < 300000; r++) {
    uint64_t u = next();
    double d;
    memcpy(&d, &u, 8);
    if (isfinite(d)) same_as_printf(d, 17);
    float f;
    uint32_t fu = (uint32_t)next();
    memcpy(&f, &fu, 4);
    if (isfinite(f)) same_as_printf(f, 9);
    /* Values tensors hold: moderate magnitudes, exact-ish decimals. */
    double m = ((double)(next() >> 11) / 9007199254740992.0 - 0.5) * pow(10, (int)(next() % 16) - 8);
    same_as_printf(m, 17);
    same_as_printf((float)m, 9);
    same_as_printf((double)(int64_t)(next() % 2000001) / 1000 - 1000, 9);
    same_as_printf(m, 1 + (int)(next() % 17));
  }
  char s[32];
  static const int64_t iv[] = {0, 1, -1, 9, 10, -128, 127, INT64_MIN, INT64_MAX};
  for (size_t i = 0; i < sizeof iv / sizeof *iv; i++) {
    char want[32];
    snprintf(want, sizeof want, "%" PRId64, iv[i]);
    assert_int_equal(sip__ks_format_int(iv[i], 0, 1, s), strlen(want));
    assert_string_equal(s, want);
  }
  assert_int_equal(sip__ks_format_int(0, UINT64_MAX, 0, s), 20);
  assert_string_equal(s, "18446744073709551615");
  assert_int_equal(sip__ks_format_int(0, 0, 0, s), 1);
  assert_string_equal(s, "0");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_number_edges), cmocka_unit_test(test_number_random),
      cmocka_unit_test(test_fill),         cmocka_unit_test(test_cut),
      cmocka_unit_test(test_same_as_classic), cmocka_unit_test(test_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
