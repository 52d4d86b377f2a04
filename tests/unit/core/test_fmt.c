/* Unit tests for src/core/fmt.c and fmt_double.cc, the shortest number text
 * of JSON responses: every text reads back (strtof, strtod, and strtod then a
 * cast to float as JSON readers do) to the same bits, has no shorter decimal
 * that would, and is a JSON number (or NaN / Infinity / -Infinity, the
 * protocol's tokens); on a million random float32 bit patterns, random
 * doubles, all 65,536 float16 values, and edge values with their exact text. */
#include <float.h>
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

static uint64_t rng = 0x2545f4914f6cdd1du;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* 1 when s is exactly one JSON number (RFC 8259's grammar). */
static int json_number(const char *s) {
  if (*s == '-') s++;
  if (*s == '0') s++;
  else if (*s >= '1' && *s <= '9') while (*s >= '0' && *s <= '9') s++;
  else return 0;
  if (*s == '.') {
    s++;
    if (*s < '0' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') s++;
  }
  if (*s == 'e' || *s == 'E') {
    s++;
    if (*s == '+' || *s == '-') s++;
    if (*s < '0' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') s++;
  }
  return *s == '\0';
}

/* Significant digits of the number text s (leading zeros not counted;
 * trailing zeros of an integer not either: "1000" is 1e3). */
static int sig_digits(const char *s) {
  int n = 0, pending = 0, seen = 0, point = 0;
  for (; *s && *s != 'e'; s++) {
    if (*s == '.') {
      point = 1;
      continue;
    }
    if (*s < '0' || *s > '9') continue;
    if (*s == '0' && !seen) continue;
    seen = 1;
    if (*s == '0' && !point) {
      pending++;
      continue;
    }
    n += pending + 1;
    pending = 0;
  }
  return n;
}

/* 1 when some decimal of k significant digits reads back to v (as a float
 * when is_float, both by strtof and by strtod then a cast): the nearest one
 * by printf, and its neighbours, which are the ones on each side of v. */
static int shorter_exists(double v, int k, int is_float) {
  if (k < 1) return 0;
  char s[64];
  snprintf(s, sizeof s, "%.*e", k - 1, v);
  char *e = strchr(s, 'e');
  int x = atoi(e + 1);
  *e = '\0';
  long long d = 0;
  for (char *p = s; *p; p++)
    if (*p >= '0' && *p <= '9') d = d * 10 + (*p - '0');
  for (long long c = d - 1; c <= d + 1; c++) {
    char t[64];
    snprintf(t, sizeof t, "%s%llde%d", v < 0 ? "-" : "", c, x - (k - 1));
    if (is_float ? strtof(t, NULL) == (float)v && (float)strtod(t, NULL) == (float)v
                 : strtod(t, NULL) == v)
      return 1;
  }
  return 0;
}

static void check_float(float f) {
  char s[SIP_FMT_MAX]; /* exactly: ASan sees a store past it */
  memset(s, 'x', sizeof s);
  size_t n = sip__fmt_float(f, s);
  if (n != strlen(s) || n >= SIP_FMT_MAX) fail_msg("%a: length %zu for '%s'", (double)f, n, s);
  if (!json_number(s)) fail_msg("%a: '%s' is not a JSON number", (double)f, s);
  float g = strtof(s, NULL), h = (float)strtod(s, NULL);
  if (memcmp(&g, &f, 4) || memcmp(&h, &f, 4))
    fail_msg("%a: '%s' reads back as %a (strtof) and %a (strtod)", (double)f, s, (double)g,
             (double)h);
  if (shorter_exists(f, sig_digits(s) - 1, 1))
    fail_msg("%a: '%s' is not the shortest text that reads back", (double)f, s);
}

static void check_double(double d) {
  char s[SIP_FMT_MAX]; /* exactly: ASan sees a store past it */
  memset(s, 'x', sizeof s);
  size_t n = sip__fmt_double(d, s);
  if (n != strlen(s) || n >= SIP_FMT_MAX) fail_msg("%a: length %zu for '%s'", d, n, s);
  if (!json_number(s)) fail_msg("%a: '%s' is not a JSON number", d, s);
  double g = strtod(s, NULL);
  if (memcmp(&g, &d, 8)) fail_msg("%a: '%s' reads back as %a", d, s, g);
  if (shorter_exists(d, sig_digits(s) - 1, 0))
    fail_msg("%a: '%s' is not the shortest text that reads back", d, s);
}

static void test_float_random(void **st) {
  (void)st;
  int checked = 0;
  while (checked < 1000000) {
    uint32_t u = (uint32_t)next();
    float f;
    memcpy(&f, &u, 4);
    if (!isfinite(f)) continue;
    check_float(f);
    checked++;
  }
  /* Values of the size tensors hold: activations and probabilities. */
  for (int i = 0; i < 200000; i++) {
    double m = ((double)(next() >> 11) / 9007199254740992.0 - 0.5) *
               pow(10, (int)(next() % 12) - 6);
    check_float((float)m);
    check_float((float)((int)(next() % 256) / 255.0 - 0.5) / 0.5f);
  }
}

static void test_double_random(void **st) {
  (void)st;
  int checked = 0;
  while (checked < 200000) {
    uint64_t u = next();
    double d;
    memcpy(&d, &u, 8);
    if (!isfinite(d)) continue;
    check_double(d);
    check_double(((double)(next() >> 11) / 9007199254740992.0 - 0.5) *
                 pow(10, (int)(next() % 12) - 6));
    checked++;
  }
}

/* Every float16 value: written as the float32 it is exactly, read back as
 * the KServe decoder reads FP16 (strtod, then rounded to half). */
static void test_float16_all(void **st) {
  (void)st;
  for (uint32_t h = 0; h < 65536; h++) {
    double v = sip__f16_to_f64((uint16_t)h);
    char s[SIP_FMT_MAX];
    sip__fmt_float((float)v, s);
    if (isnan(v)) {
      assert_string_equal(s, "NaN");
      continue;
    }
    if (isinf(v)) {
      assert_string_equal(s, v > 0 ? "Infinity" : "-Infinity");
      continue;
    }
    assert_true(json_number(s));
    uint16_t back = sip__f64_to_f16(strtod(s, NULL));
    if (back != h) fail_msg("half 0x%04x: '%s' reads back as 0x%04x", h, s, back);
  }
}

static void expect_float(float f, const char *want) {
  char s[SIP_FMT_MAX];
  size_t n = sip__fmt_float(f, s);
  if (n != strlen(want) || strcmp(s, want)) fail_msg("%a: '%s', expected '%s'", (double)f, s, want);
  if (isfinite(f)) check_float(f);
}

static void expect_double(double d, const char *want) {
  char s[SIP_FMT_MAX];
  size_t n = sip__fmt_double(d, s);
  if (n != strlen(want) || strcmp(s, want)) fail_msg("%a: '%s', expected '%s'", d, s, want);
  if (isfinite(d)) check_double(d);
}

static void test_edges(void **st) {
  (void)st;
  /* Zeros: negative zero keeps its sign through a JSON reader ("-0" is the
   * integer 0 there). */
  expect_float(0.0f, "0");
  expect_float(-0.0f, "-0.0");
  expect_double(0.0, "0");
  expect_double(-0.0, "-0.0");
  double nz = strtod("-0.0", NULL);
  assert_true(nz == 0 && signbit(nz));
  /* NaN and the infinities: the protocol's tokens, any NaN payload. */
  expect_float(NAN, "NaN");
  expect_float(-NAN, "NaN");
  expect_float(INFINITY, "Infinity");
  expect_float(-INFINITY, "-Infinity");
  expect_double(NAN, "NaN");
  expect_double(INFINITY, "Infinity");
  expect_double(-INFINITY, "-Infinity");
  uint32_t qnan = 0x7fc00001u, snan = 0xff800001u;
  float f;
  memcpy(&f, &qnan, 4);
  expect_float(f, "NaN");
  memcpy(&f, &snan, 4);
  expect_float(f, "NaN");
  /* Range ends: largest, smallest normal, subnormals. */
  expect_float(FLT_MAX, "3.4028235e+38");
  expect_float(-FLT_MAX, "-3.4028235e+38");
  expect_float(FLT_MIN, "1.1754944e-38");
  expect_float(nextafterf(FLT_MIN, 0), "1.1754942e-38"); /* largest subnormal */
  expect_float(FLT_TRUE_MIN, "1e-45");
  expect_float(-FLT_TRUE_MIN, "-1e-45");
  expect_float(2 * FLT_TRUE_MIN, "3e-45");
  expect_double(DBL_MAX, "1.7976931348623157e+308");
  expect_double(DBL_MIN, "2.2250738585072014e-308");
  expect_double(DBL_TRUE_MIN, "5e-324");
  expect_double(-DBL_TRUE_MIN, "-5e-324");
  expect_double(nextafter(DBL_MIN, 0), "2.225073858507201e-308");
  /* 7.038531e-26, its shortest text, read as a double then rounded to float
   * gives the next float up: a digit more reads back both ways. */
  uint32_t hard = 0x15ae43fdu;
  memcpy(&f, &hard, 4);
  expect_float(f, "7.0385307e-26");
  expect_float(-f, "-7.0385307e-26");
  check_float(nextafterf(f, 0));
  check_float(nextafterf(f, 1));
  /* Shortest, not 9 or 17 digits. */
  expect_float(0.1f, "0.1");
  expect_float(-1.5f, "-1.5");
  expect_float(1.0f / 3, "0.33333334");
  expect_float(123456.789f, "123456.79");
  expect_float(3.14159265f, "3.1415927");
  expect_float(16777217.0f, "16777216");
  expect_double(0.1, "0.1");
  expect_double(0.1 + 0.2, "0.30000000000000004");
  expect_double(1.0 / 3, "0.3333333333333333");
  expect_double(5e-324 * 3, "1.5e-323");
  /* Integers: plain below 10^9 (float32) / 10^17 (float64), a JSON integer
   * within int64; exponent notation above, as printf's %g. */
  expect_float(1.0f, "1");
  expect_float(-7.0f, "-7");
  expect_float(100.0f, "100");
  expect_float(16777216.0f, "16777216");
  expect_float(123456792.0f, "123456790");
  expect_float(1e9f, "1e+09");
  expect_float(1e10f, "1e+10");
  expect_float(4294967296.0f, "4.2949673e+09");
  expect_double(1.0, "1");
  expect_double(9007199254740993.0, "9007199254740992");
  expect_double(1e16, "10000000000000000");
  expect_double(1e17, "1e+17");
  expect_double(1e23, "1e+23");
  expect_double(9223372036854775807.0, "9.223372036854776e+18");
  /* Small magnitudes: plain down to 1e-4, then exponent notation. */
  expect_float(1e-4f, "0.0001");
  expect_float(1.25e-4f, "0.000125");
  expect_float(1e-5f, "1e-05");
  expect_float(9.99e-5f, "9.99e-05");
  expect_float(1e-38f, "1e-38");
  expect_double(1e-4, "0.0001");
  expect_double(1e-5, "1e-05");
  expect_double(1e-100, "1e-100");
  expect_double(1.5e300, "1.5e+300");
  /* Powers of two: the rounding interval is narrower below them. */
  for (int e = -149; e <= 127; e++) {
    check_float(ldexpf(1.0f, e));
    check_float(nextafterf(ldexpf(1.0f, e), INFINITY));
    check_float(nextafterf(ldexpf(1.0f, e), 0));
  }
  for (int e = -1074; e <= 1023; e++) {
    check_double(ldexp(1.0, e));
    check_double(nextafter(ldexp(1.0, e), INFINITY));
    check_double(nextafter(ldexp(1.0, e), 0));
  }
  /* Every integer float32 represents exactly up to 2^24, a sample beyond. */
  for (int i = -100000; i <= 100000; i++) check_float((float)i);
  for (int i = 0; i < 100000; i++) check_float((float)(int64_t)(next() >> 8));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_edges),
      cmocka_unit_test(test_float_random),
      cmocka_unit_test(test_double_random),
      cmocka_unit_test(test_float16_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
