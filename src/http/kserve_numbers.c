/* sip — the fast path of JSON tensor data in KServe request bodies.
 *
 * jansson builds a node per JSON number: for a tensor of tens of thousands of
 * elements that costs more than the inference. So before a body reaches
 * jansson, sip__ks_cut finds each `"data": [...]` array that holds only
 * numbers and true/false (nested or flat) and replaces it with a placeholder
 * string; jansson then parses the small rest, and each input whose data is a
 * placeholder has its numbers read straight into its tensor buffer by
 * sip__ks_cut_fill. Only numbers are scanned here: JSON structure stays
 * jansson's.
 *
 * The fast path decides nothing on its own: anything unusual (a syntax error,
 * an element of the wrong kind, a value out of range, a count that does not
 * match the shape) makes it give up, and the request is decoded again by the
 * classic path (kserve_decode.c), which words the error. So answers, errors
 * included, are the same as without it. Values are too: each number reads to
 * the double jansson's strtod gives (integers, as jansson, through int64),
 * then converts as the classic path does.
 */
#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/fmt.h"
#include "http/http.h"
#include "http/kserve_impl.h"

/* ---- one number -------------------------------------------------------- */

static const double pow10_exact[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/* strtod of the token p[0..n) (a valid JSON number), in the C locale as
 * jansson reads numbers; -1 when it overflows (jansson's error). */
static int slow_double(const char *p, size_t n, double *out) {
  char small[128], *s = n < sizeof small ? small : sip__malloc(n + 1);
  if (!s) return -1;
  memcpy(s, p, n);
  s[n] = '\0';
  pthread_once(&c_locale_once, make_c_locale);
  errno = 0;
  double v = c_locale ? strtod_l(s, NULL, c_locale) : strtod(s, NULL);
  int err = errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL);
  if (s != small) sip__free(s);
  *out = v;
  return err ? -1 : 0;
}

#if LDBL_MANT_DIG == 64
/* w * 10^e10 (|e10| <= 27, w < 2^64) through x87 extended precision: both
 * operands are exact, so the product or quotient is rounded once to 64 bits;
 * rounding that again to 53 bits is the correct rounding unless the 64-bit
 * result lies within an ulp of a halfway point between doubles, where this
 * gives up (0) and strtod decides. */
static int extended_double(uint64_t w, int e10, double *out) {
  static const long double p10[28] = {
      1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
      1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
      1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
  if (e10 < -27 || e10 > 27) return 0;
  long double x = e10 < 0 ? (long double)w / p10[-e10] : (long double)w * p10[e10];
  uint64_t mant;
  memcpy(&mant, &x, 8); /* the 64-bit significand, explicit integer bit */
  unsigned low = (unsigned)(mant & 0x7ff);
  if (low >= 0x3ff && low <= 0x401) return 0;
  *out = (double)x;
  return 1;
}
#else
static int extended_double(uint64_t w, int e10, double *out) {
  (void)w, (void)e10, (void)out;
  return 0;
}
#endif

/* Eight ASCII digits at once (little-endian load), as simdjson and
 * fast_float do: a test that all eight are digits, and their value. */
static int eight_digits(const char *p, uint32_t *out) {
  uint64_t v;
  memcpy(&v, p, 8);
  if (((v & 0xf0f0f0f0f0f0f0f0u) | (((v + 0x0606060606060606u) & 0xf0f0f0f0f0f0f0f0u) >> 4)) !=
      0x3333333333333333u)
    return 0;
  v -= 0x3030303030303030u;
  v = v * 10 + (v >> 8);
  v = (((v & 0x000000ff000000ffu) * 0x000f424000000064u) +
       (((v >> 16) & 0x000000ff000000ffu) * 0x0000271000000001u)) >> 32;
  *out = (uint32_t)v;
  return 1;
}

typedef struct mantissa {
  uint64_t w;  /* the first 19 significant digits */
  int nd;      /* how many w holds */
  int dropped; /* digits past those */
} mantissa_t;

/* Reads the digits at p[i..n) into m; returns where they end. */
static size_t digits(const char *p, size_t i, size_t n, mantissa_t *m) {
  uint32_t eight;
  while (m->nd <= 11 && n - i >= 8 && eight_digits(p + i, &eight)) {
    m->w = m->w * 100000000u + eight;
    m->nd += 8;
    i += 8;
  }
  for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
    if (m->nd < 19) {
      m->w = m->w * 10 + (uint64_t)(p[i] - '0');
      m->nd++;
    } else {
      m->dropped++;
    }
  }
  return i;
}

size_t sip__ks_number(const char *p, size_t n, sip__ks_num_t *out) {
  size_t i = 0;
  int neg = 0;
  if (i < n && p[i] == '-') neg = 1, i++;
  if (i >= n || p[i] < '0' || p[i] > '9') return 0;
  mantissa_t m = {0, 0, 0};
  int e10 = 0; /* the value is w * 10^e10 (before dropped digits) */
  if (p[i] == '0') {
    i++;
    if (i < n && p[i] >= '0' && p[i] <= '9') return 0; /* no leading zeros */
  } else {
    i = digits(p, i, n, &m);
    e10 = m.dropped;
  }
  int is_int = 1;
  if (i < n && p[i] == '.') {
    is_int = 0;
    i++;
    if (i >= n || p[i] < '0' || p[i] > '9') return 0;
    if (!m.w) /* zeros before the first significant digit */
      for (; i < n && p[i] == '0'; i++) e10--;
    int nd = m.nd;
    i = digits(p, i, n, &m);
    e10 -= m.nd - nd;
  }
  if (i < n && (p[i] == 'e' || p[i] == 'E')) {
    is_int = 0;
    i++;
    int eneg = 0;
    if (i < n && (p[i] == '+' || p[i] == '-')) eneg = p[i] == '-', i++;
    if (i >= n || p[i] < '0' || p[i] > '9') return 0;
    int x = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
      if (x < 100000) x = x * 10 + (p[i] - '0');
    e10 += eneg ? -x : x;
  }
  uint64_t w = m.w;
  int dropped = m.dropped;
  out->is_int = is_int;
  if (is_int) {
    /* jansson reads integers with strtoll: past int64 is its error. */
    if (dropped || w > (uint64_t)INT64_MAX + neg) return 0;
    out->i = neg ? (int64_t)(0 - w) : (int64_t)w;
    out->d = (double)out->i;
    return i;
  }
  double d;
  if (!dropped && w == 0) {
    d = 0.0;
  } else if (!dropped && w <= (uint64_t)1 << 53 && e10 >= -22 && e10 <= 22) {
    /* Clinger's fast path: exact operands, one rounding. */
    d = e10 < 0 ? (double)w / pow10_exact[-e10] : (double)w * pow10_exact[e10];
  } else if (dropped || !extended_double(w, e10, &d)) {
    if (slow_double(p, i, &d)) return 0;
    out->d = d;
    return i;
  }
  out->d = neg ? -d : d;
  return i;
}

/* ---- cutting the data arrays out -------------------------------------- */

/* Bytes a number/true/false-only array may hold: 1, and the brackets 2 and
 * 4 (so an AND of four is 1 only when all four are plain). */
static const uint8_t array_byte[256] = {
    [' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1, [','] = 1, ['['] = 2, [']'] = 4,
    ['-'] = 1, ['+'] = 1,  ['.'] = 1,  ['e'] = 1,  ['E'] = 1, ['0'] = 1, ['1'] = 1,
    ['2'] = 1, ['3'] = 1,  ['4'] = 1,  ['5'] = 1,  ['6'] = 1, ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['t'] = 1,  ['r'] = 1,  ['u'] = 1,  ['f'] = 1, ['a'] = 1, ['l'] = 1,
    ['s'] = 1};

/* Length of the array at p[0] == '[' if it holds only array_byte bytes,
 * else 0; *depth: how deep it nests. */
static size_t array_extent(const uint8_t *p, size_t n, int *depth) {
  const uint8_t *t = array_byte;
  int d = 0, max = 0;
  for (size_t i = 0; i < n; i++) {
    while (n - i >= 4 && (t[p[i]] & t[p[i + 1]] & t[p[i + 2]] & t[p[i + 3]]) == 1) i += 4;
    if (i >= n) break;
    uint8_t c = t[p[i]];
    if (!c) return 0;
    if (c == 2) {
      if (++d > max) max = d;
    } else if (c == 4 && --d == 0) {
      *depth = max;
      return i + 1;
    }
  }
  return 0;
}

static int out_add(sip__ks_cut_t *c, const void *s, size_t n) {
  if (c->json_len + n + 1 > c->json_cap) {
    size_t cap = c->json_cap ? c->json_cap : 1024;
    while (cap < c->json_len + n + 1) cap *= 2;
    char *p = sip__realloc(c->json, cap);
    if (!p) return -1;
    c->json = p;
    c->json_cap = cap;
  }
  memcpy(c->json + c->json_len, s, n);
  c->json_len += n;
  return 0;
}

static int add_span(sip__ks_cut_t *c, size_t off, size_t len) {
  if (c->n_spans == c->cap_spans) {
    size_t cap = c->cap_spans ? 2 * c->cap_spans : 8;
    sip__ks_span_t *s = sip__reallocarray(c->spans, cap, sizeof *s);
    if (!s) return -1;
    c->spans = s;
    c->cap_spans = cap;
  }
  c->spans[c->n_spans].off = off;
  c->spans[c->n_spans].len = len;
  c->n_spans++;
  return 0;
}

void sip__ks_cut_free(sip__ks_cut_t *c) {
  sip__free(c->json);
  sip__free(c->spans);
  memset(c, 0, sizeof *c);
}

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int sip__ks_cut(const uint8_t *p, size_t n, int max_depth, sip__ks_cut_t *c) {
  memset(c, 0, sizeof *c);
  c->text = p;
  int depth = 0;
  size_t copied = 0; /* p[0..copied) is in c->json */
  for (size_t i = 0; i < n;) {
    uint8_t ch = p[i];
    if (ch == '[' || ch == '{') {
      if (++depth > max_depth) goto none;
      i++;
      continue;
    }
    if (ch == ']' || ch == '}') {
      depth--;
      i++;
      continue;
    }
    if (ch != '"') {
      i++;
      continue;
    }
    size_t s = ++i;
    int escaped = 0;
    while (i < n && p[i] != '"') {
      if (p[i] == '\\') {
        /* A NUL in the text could pass for a placeholder. */
        if (n - i > 5 && !memcmp(p + i + 1, "u0000", 5)) goto none;
        escaped = 1;
        i++;
      }
      i++;
    }
    if (i >= n) goto none;
    size_t slen = i - s;
    i++; /* the closing quote */
    if (escaped || slen != 4 || memcmp(p + s, "data", 4)) continue;
    size_t k = i;
    while (k < n && is_ws(p[k])) k++;
    if (k >= n || p[k] != ':') continue;
    k++;
    while (k < n && is_ws(p[k])) k++;
    if (k >= n || p[k] != '[') continue;
    int inner = 0;
    size_t len = array_extent(p + k, n - k, &inner);
    if (!len) continue; /* strings, null...: jansson's */
    if (depth + inner > max_depth) goto none;
    char ph[32];
    int phn = snprintf(ph, sizeof ph, "\"\\u0000%zu\"", c->n_spans);
    if (out_add(c, p + copied, k - copied) || out_add(c, ph, (size_t)phn) || add_span(c, k, len))
      goto oom;
    copied = k + len;
    i = copied;
  }
  if (!c->n_spans) goto none;
  if (out_add(c, p + copied, n - copied)) goto oom;
  c->json[c->json_len] = '\0';
  return 1;
none:
  sip__ks_cut_free(c);
  return 0;
oom:
  sip__ks_cut_free(c);
  return -1;
}

/* ---- filling a tensor ------------------------------------------------- */

int sip__ks_store_int(sip_dtype_t dt, uint8_t *dst, int64_t k, int64_t x) {
  switch (dt) {
#define INT_CASE(DT, T, LO, HI)                            \
  case DT: {                                               \
    if (x < (int64_t)(LO) || x > (int64_t)(HI)) return 0;  \
    T y = (T)x;                                            \
    memcpy(dst + sizeof(T) * (size_t)k, &y, sizeof y);     \
    return 1;                                              \
  }
    INT_CASE(SIP_DTYPE_INT8, int8_t, INT8_MIN, INT8_MAX)
    INT_CASE(SIP_DTYPE_INT16, int16_t, INT16_MIN, INT16_MAX)
    INT_CASE(SIP_DTYPE_INT32, int32_t, INT32_MIN, INT32_MAX)
    INT_CASE(SIP_DTYPE_INT64, int64_t, INT64_MIN, INT64_MAX)
    INT_CASE(SIP_DTYPE_UINT8, uint8_t, 0, UINT8_MAX)
    INT_CASE(SIP_DTYPE_UINT16, uint16_t, 0, UINT16_MAX)
    INT_CASE(SIP_DTYPE_UINT32, uint32_t, 0, UINT32_MAX)
    /* jansson reads integers into int64: larger UINT64 values need binary. */
    INT_CASE(SIP_DTYPE_UINT64, uint64_t, 0, INT64_MAX)
#undef INT_CASE
  default:
    return -1;
  }
}

/* Stores element k of dtype dt; 0 when the value does not fit it. */
static int store(sip_dtype_t dt, uint8_t *dst, int64_t k, const sip__ks_num_t *v) {
  switch (dt) {
  case SIP_DTYPE_FLOAT64:
    memcpy(dst + 8 * k, &v->d, 8);
    return 1;
  case SIP_DTYPE_FLOAT32: {
    float y = (float)v->d;
    memcpy(dst + 4 * k, &y, 4);
    return 1;
  }
  case SIP_DTYPE_FLOAT16: {
    uint16_t h = sip__f64_to_f16(v->d);
    memcpy(dst + 2 * k, &h, 2);
    return 1;
  }
  default:
    return v->is_int && sip__ks_store_int(dt, dst, k, v->i) > 0;
  }
}

int sip__ks_fill(const char *p, size_t n, sip_dtype_t dt, void *dst_, int64_t count) {
  uint8_t *dst = dst_;
  if (dt == SIP_DTYPE_STRING || !sip_dtype_size(dt)) return -1;
  size_t i = 0;
  int depth = 0;
  int64_t k = 0;
  if (!n || p[0] != '[') return -1;
  for (;;) {
    /* A value is due (or, right after '[', the end of an empty array). */
    while (i < n && is_ws((uint8_t)p[i])) i++;
    if (i >= n) return -1;
    if (p[i] == '[') {
      depth++;
      i++;
      while (i < n && is_ws((uint8_t)p[i])) i++;
      if (i < n && p[i] == ']') {
        i++;
        depth--;
        goto closed;
      }
      if (i < n && p[i] == '[') continue;
    }
    if (k >= count) return -1;
    if (dt == SIP_DTYPE_BOOL) {
      if (n - i >= 4 && !memcmp(p + i, "true", 4)) {
        dst[k++] = 1;
        i += 4;
      } else if (n - i >= 5 && !memcmp(p + i, "false", 5)) {
        dst[k++] = 0;
        i += 5;
      } else {
        return -1;
      }
    } else {
      sip__ks_num_t v;
      size_t used = sip__ks_number(p + i, n - i, &v);
      if (!used || !store(dt, dst, k, &v)) return -1;
      k++;
      i += used;
    }
  after_value:
    while (i < n && is_ws((uint8_t)p[i])) i++;
    if (i >= n) return -1;
    if (p[i] == ',') {
      if (!depth) return -1;
      i++;
      continue;
    }
    if (p[i] != ']' || !depth) return -1;
    i++;
    depth--;
  closed:
    if (!depth) return i == n && k == count ? 0 : -1;
    goto after_value;
  }
}

int sip__ks_cut_index(const sip__ks_cut_t *c, const char *s, size_t len) {
  if (!c || len < 2 || s[0] != '\0') return -1;
  size_t idx = 0;
  for (size_t i = 1; i < len; i++) {
    if (s[i] < '0' || s[i] > '9' || idx > c->n_spans) return -1;
    idx = idx * 10 + (size_t)(s[i] - '0');
  }
  return idx < c->n_spans ? (int)idx : -1;
}

/* ---- writing numbers --------------------------------------------------- */

/* Floats in responses are written shortest (core/fmt.h: the fewest digits
 * that read back to the same float32 / float64); sip__ks_format_g, printf's
 * %.<prec>g text without printf for most values, serves other precisions. */

size_t sip__ks_format_int(int64_t v, uint64_t u, int is_signed, char *out) {
  char tmp[24];
  size_t n = 0, o = 0;
  if (is_signed) {
    if (v < 0) out[o++] = '-';
    u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  }
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  while (n) out[o++] = tmp[--n];
  out[o] = '\0';
  return o;
}

#if LDBL_MANT_DIG == 64
static const long double pow10_ld[28] = {
    1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
    1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
    1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};

/* The `prec` significant digits of v > 0 (finite), correctly rounded, as
 * printf would choose them: *digits (prec digits), *e10 the exponent of the
 * first. 0 when extended precision cannot decide (a value too small or too
 * large, or one too near a rounding tie): printf then does. */
static int fast_digits(double v, int prec, uint64_t *digits, int *e10) {
  int e2;
  frexp(v, &e2);
  int e = (int)floor((e2 - 1) * 0.30102999566398120); /* log10(2): E or E - 1 */
  const long double lo = pow10_ld[prec - 1], hi = pow10_ld[prec];
  for (int tries = 0; tries < 3; tries++) {
    int s = prec - 1 - e;
    if (s < -27 || s > 27) return 0;
    /* Exact operands (v, and 10^|s| < 2^64): one rounding to 64 bits. */
    long double x = s < 0 ? (long double)v / pow10_ld[-s] : (long double)v * pow10_ld[s];
    if (x < lo) {
      e--;
      continue;
    }
    if (x >= hi) {
      e++;
      continue;
    }
    long double r = floorl(x), frac = x - r;
    /* x is within 2^-(64 - bits of r) of the exact value: ties and near-ties
     * are printf's. */
    long double tol = hi / 18446744073709551616.0L * 4;
    if (frac > 0.5L - tol && frac < 0.5L + tol) return 0;
    uint64_t d = (uint64_t)r + (frac > 0.5L);
    if ((long double)d >= hi) { /* 9.99..96 -> 10.0 */
      d /= 10;
      e++;
    }
    *digits = d;
    *e10 = e;
    return 1;
  }
  return 0;
}
#else
static int fast_digits(double v, int prec, uint64_t *digits, int *e10) {
  (void)v, (void)prec, (void)digits, (void)e10;
  return 0;
}
#endif

size_t sip__ks_format_g(double v, int prec, char *out) {
  uint64_t d;
  int e;
  if (!isfinite(v) || v == 0 || prec < 1 || prec > 17 || !fast_digits(fabs(v), prec, &d, &e))
    return (size_t)snprintf(out, 32, "%.*g", prec, v);
  char dig[20];
  for (int i = prec - 1; i >= 0; i--, d /= 10) dig[i] = (char)('0' + d % 10);
  int nd = prec;
  while (nd > 1 && dig[nd - 1] == '0') nd--; /* %g drops trailing zeros */
  size_t o = 0;
  if (v < 0) out[o++] = '-';
  if (e < -4 || e >= prec) { /* d.ddde+XX */
    out[o++] = dig[0];
    if (nd > 1) {
      out[o++] = '.';
      memcpy(out + o, dig + 1, (size_t)nd - 1);
      o += (size_t)nd - 1;
    }
    out[o++] = 'e';
    out[o++] = e < 0 ? '-' : '+';
    int x = e < 0 ? -e : e;
    if (x >= 100) out[o++] = (char)('0' + x / 100);
    out[o++] = (char)('0' + x / 10 % 10);
    out[o++] = (char)('0' + x % 10);
  } else if (e < 0) { /* 0.000ddd */
    out[o++] = '0';
    out[o++] = '.';
    for (int i = -1; i > e; i--) out[o++] = '0';
    memcpy(out + o, dig, (size_t)nd);
    o += (size_t)nd;
  } else { /* ddd.ddd */
    int ip = e + 1; /* integer digits */
    for (int i = 0; i < ip; i++) out[o++] = i < nd ? dig[i] : '0';
    if (nd > ip) {
      out[o++] = '.';
      memcpy(out + o, dig + ip, (size_t)(nd - ip));
      o += (size_t)(nd - ip);
    }
  }
  out[o] = '\0';
  return o;
}

size_t sip__ks_format_double(double v, int prec, char *out) {
  if (prec == 9) return sip__fmt_float((float)v, out);
  if (prec == 17) return sip__fmt_double(v, out);
  return sip__ks_format_g(v, prec, out);
}
