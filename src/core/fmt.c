/* sip — the shortest decimal of a float32 (fmt.h), and what fmt64.c
 * shares: the special values and the layout of digits.
 *
 * The digits come from Ryu's algorithm (Ulf Adams, "Ryu: fast float-to-string
 * conversion", PLDI 2018), written here for float32 from the paper: the
 * value's rounding interval is scaled by a power of ten with 64-bit
 * approximations of 5^q and 5^-q that are precise enough for every float32
 * (the paper proves 59 and 61 bits suffice for 24-bit significands), then
 * digits are removed while the interval still holds a shorter decimal. No
 * division by a variable, no floating point, no allocation.
 *
 * Checked once on every one of the 2^32 bit patterns: the same digits as
 * the double-conversion library's SHORTEST_SINGLE, and the text read by
 * strtod then rounded to float gives the value back, but for one value
 * (handled below); and in tests/unit/core/test_fmt.c on a million random
 * ones at each build. */
#include <stdint.h>
#include <string.h>

#include "core/fmt.h"
#include "core/fmt_impl.h"

/* ---- layout ------------------------------------------------------------- */

size_t sip__fmt_special(double v, char *out) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  int neg = (int)(u >> 63);
  const char *s;
  if ((u & 0x7ff0000000000000u) == 0x7ff0000000000000u)
    s = (u & 0x000fffffffffffffu) ? "NaN" : neg ? "-Infinity" : "Infinity";
  else if (!(u << 1))
    s = neg ? "-0.0" : "0";
  else
    return 0;
  size_t n = strlen(s);
  memcpy(out, s, n + 1);
  return n;
}

/* "e+XX" / "e-XXX" at o, as printf writes exponents: where it ends. */
static char *exponent(char *o, int x) {
  *o++ = 'e';
  *o++ = x < 0 ? '-' : '+';
  unsigned e = (unsigned)(x < 0 ? -x : x);
  if (e >= 100) {
    *o++ = (char)('0' + e / 100);
    e %= 100;
  }
  *o++ = (char)('0' + e / 10);
  *o++ = (char)('0' + e % 10);
  return o;
}

size_t sip__fmt_layout(int negative, const char *dig, int nd, int x, int plain_max, char *out) {
  char *o = out;
  if (negative) *o++ = '-';
  if (x < -4 || x >= plain_max) { /* d.ddde+XX, as printf's %g */
    *o++ = dig[0];
    if (nd > 1) {
      *o++ = '.';
      memcpy(o, dig + 1, (size_t)nd - 1);
      o += nd - 1;
    }
    o = exponent(o, x);
  } else if (x < 0) { /* 0.000ddd */
    memcpy(o, "0.0000", 6);
    o += 1 - x;
    memcpy(o, dig, (size_t)nd);
    o += nd;
  } else if (nd <= x + 1) { /* ddd000: an integer */
    memcpy(o, dig, (size_t)nd);
    o += nd;
    for (int i = nd; i <= x; i++) *o++ = '0';
  } else { /* ddd.ddd */
    memcpy(o, dig, (size_t)x + 1);
    o += x + 1;
    *o++ = '.';
    memcpy(o, dig + x + 1, (size_t)(nd - x - 1));
    o += nd - x - 1;
  }
  *o = '\0';
  return (size_t)(o - out);
}

/* ---- float32 digits (Ryu) ----------------------------------------------- */

#define POW5_INV_BITS 59
#define POW5_BITS 61

/* ceil(2^(POW5_INV_BITS - 1 + pow5bits(q)) / 5^q), q = 0..31. */
static const uint64_t pow5_inv[32] = {
    0x0800000000000001u, 0x0666666666666667u, 0x051eb851eb851eb9u, 0x04189374bc6a7efau,
    0x068db8bac710cb2au, 0x053e2d6238da3c22u, 0x0431bde82d7b634eu, 0x06b5fca6af2bd216u,
    0x055e63b88c230e78u, 0x044b82fa09b5a52du, 0x06df37f675ef6eaeu, 0x057f5ff85e592558u,
    0x0465e6604b7a8447u, 0x0709709a125da071u, 0x05a126e1a84ae6c1u, 0x0480ebe7b9d58567u,
    0x0734aca5f6226f0bu, 0x05c3bd5191b525a3u, 0x049c97747490eae9u, 0x0760f253edb4ab0eu,
    0x05e72843249088d8u, 0x04b8ed0283a6d3e0u, 0x078e480405d7b966u, 0x060b6cd004ac9452u,
    0x04d5f0a66a23a9dbu, 0x07bcb43d769f762bu, 0x063090312bb2c4efu, 0x04f3a68dbc8f03f3u,
    0x07ec3daf94180651u, 0x065697bfa9acd1dau, 0x051212ffbaf0a7e2u, 0x040e7599625a1fe8u};

/* The POW5_BITS leading bits of 5^i (floor), i = 0..47. */
static const uint64_t pow5[48] = {
    0x1000000000000000u, 0x1400000000000000u, 0x1900000000000000u, 0x1f40000000000000u,
    0x1388000000000000u, 0x186a000000000000u, 0x1e84800000000000u, 0x1312d00000000000u,
    0x17d7840000000000u, 0x1dcd650000000000u, 0x12a05f2000000000u, 0x174876e800000000u,
    0x1d1a94a200000000u, 0x12309ce540000000u, 0x16bcc41e90000000u, 0x1c6bf52634000000u,
    0x11c37937e0800000u, 0x16345785d8a00000u, 0x1bc16d674ec80000u, 0x1158e460913d0000u,
    0x15af1d78b58c4000u, 0x1b1ae4d6e2ef5000u, 0x10f0cf064dd59200u, 0x152d02c7e14af680u,
    0x1a784379d99db420u, 0x108b2a2c28029094u, 0x14adf4b7320334b9u, 0x19d971e4fe8401e7u,
    0x1027e72f1f128130u, 0x1431e0fae6d7217cu, 0x193e5939a08ce9dbu, 0x1f8def8808b02452u,
    0x13b8b5b5056e16b3u, 0x18a6e32246c99c60u, 0x1ed09bead87c0378u, 0x13426172c74d822bu,
    0x1812f9cf7920e2b6u, 0x1e17b84357691b64u, 0x12ced32a16a1b11eu, 0x178287f49c4a1d66u,
    0x1d6329f1c35ca4bfu, 0x125dfa371a19e6f7u, 0x16f578c4e0a060b5u, 0x1cb2d6f618c878e3u,
    0x11efc659cf7d4b8du, 0x166bb7f0435c9e71u, 0x1c06a5ec5433c60du, 0x118427b3b4a05bc8u};

static int multiple_of_pow5(uint32_t v, uint32_t p) {
  uint32_t n = 0;
  while (v % 5 == 0 && n < p) v /= 5, n++;
  return n >= p;
}

static int multiple_of_pow2(uint32_t v, uint32_t p) { return (v & ((1u << p) - 1)) == 0; }

/* floor(m * factor / 2^shift), 32 <= shift < 96 (52..60 here), in 64-bit
 * arithmetic. */
static uint32_t mul_shift(uint32_t m, uint64_t factor, int32_t shift) {
  uint64_t lo = (uint64_t)m * (uint32_t)factor, hi = (uint64_t)m * (factor >> 32);
  return (uint32_t)(((lo >> 32) + hi) >> (shift - 32));
}

static uint32_t mul_pow5_inv(uint32_t m, uint32_t q, int32_t j) {
  return mul_shift(m, pow5_inv[q], j);
}
static uint32_t mul_pow5(uint32_t m, uint32_t i, int32_t j) { return mul_shift(m, pow5[i], j); }

/* The shortest digits of the finite nonzero float with biased exponent
 * `exp` and fraction bits `frac`: *x the decimal exponent of the last digit
 * (value ~ digits * 10^*x). */
static uint32_t float_digits(uint32_t frac, uint32_t exp, int32_t *x) {
  int32_t e2;
  uint32_t m2;
  if (exp == 0) {
    e2 = 1 - 127 - 23 - 2;
    m2 = frac;
  } else {
    e2 = (int32_t)exp - 127 - 23 - 2;
    m2 = (1u << 23) | frac;
  }
  /* The interval of decimals that read back to m2 * 2^e2, its ends
   * included when m2 is even (ties round to even), scaled by 4. */
  int accept_bounds = (m2 & 1) == 0;
  uint32_t mv = 4 * m2, mp = 4 * m2 + 2;
  uint32_t mm_shift = frac != 0 || exp <= 1; /* the gap below is half for 2^k */
  uint32_t mm = 4 * m2 - 1 - mm_shift;

  uint32_t vr, vp, vm;
  int32_t e10;
  int vm_trailing_zeros = 0, vr_trailing_zeros = 0;
  uint32_t last_removed = 0;
  if (e2 >= 0) {
    uint32_t q = log10_pow2(e2);
    e10 = (int32_t)q;
    int32_t k = POW5_INV_BITS + pow5bits((int32_t)q) - 1;
    int32_t i = -e2 + (int32_t)q + k;
    vr = mul_pow5_inv(mv, q, i);
    vp = mul_pow5_inv(mp, q, i);
    vm = mul_pow5_inv(mm, q, i);
    if (q != 0 && (vp - 1) / 10 <= vm / 10) {
      /* The digit below vr, needed for rounding even with no loop below. */
      int32_t l = POW5_INV_BITS + pow5bits((int32_t)q - 1) - 1;
      last_removed = mul_pow5_inv(mv, q - 1, -e2 + (int32_t)q - 1 + l) % 10;
    }
    if (q <= 9) {
      /* At most one of mp, mv, mm is a multiple of 5. */
      if (mv % 5 == 0)
        vr_trailing_zeros = multiple_of_pow5(mv, q);
      else if (accept_bounds)
        vm_trailing_zeros = multiple_of_pow5(mm, q);
      else
        vp -= (uint32_t)multiple_of_pow5(mp, q);
    }
  } else {
    uint32_t q = log10_pow5(-e2);
    e10 = (int32_t)q + e2;
    int32_t i = -e2 - (int32_t)q;
    int32_t k = pow5bits(i) - POW5_BITS;
    int32_t j = (int32_t)q - k;
    vr = mul_pow5(mv, (uint32_t)i, j);
    vp = mul_pow5(mp, (uint32_t)i, j);
    vm = mul_pow5(mm, (uint32_t)i, j);
    if (q != 0 && (vp - 1) / 10 <= vm / 10) {
      j = (int32_t)q - 1 - (pow5bits(i + 1) - POW5_BITS);
      last_removed = mul_pow5(mv, (uint32_t)i + 1, j) % 10;
    }
    if (q <= 1) {
      /* mv = 4 m2 has two trailing zero bits; mm has one iff mm_shift. */
      vr_trailing_zeros = 1;
      if (accept_bounds)
        vm_trailing_zeros = mm_shift == 1;
      else
        --vp; /* mp = mv + 2 has one: the upper end is excluded */
    } else if (q < 31) {
      vr_trailing_zeros = multiple_of_pow2(mv, q - 1);
    }
  }

  /* Remove digits while the interval still holds a shorter decimal. */
  int32_t removed = 0;
  uint32_t out;
  if (vm_trailing_zeros || vr_trailing_zeros) { /* rare: exact ends or ties */
    while (vp / 10 > vm / 10) {
      vm_trailing_zeros &= vm % 10 == 0;
      vr_trailing_zeros &= last_removed == 0;
      last_removed = vr % 10;
      vr /= 10, vp /= 10, vm /= 10;
      removed++;
    }
    if (vm_trailing_zeros) {
      while (vm % 10 == 0) {
        vr_trailing_zeros &= last_removed == 0;
        last_removed = vr % 10;
        vr /= 10, vp /= 10, vm /= 10;
        removed++;
      }
    }
    if (vr_trailing_zeros && last_removed == 5 && vr % 2 == 0)
      last_removed = 4; /* exactly ...50..0: round half to even */
    out = vr + ((vr == vm && (!accept_bounds || !vm_trailing_zeros)) || last_removed >= 5);
  } else {
    while (vp / 10 > vm / 10) {
      last_removed = vr % 10;
      vr /= 10, vp /= 10, vm /= 10;
      removed++;
    }
    out = vr + (vr == vm || last_removed >= 5);
  }
  *x = e10 + removed;
  return out;
}

/* ---- float32 text ----------------------------------------------------- */

/* Characters are built 8 at a time in 64-bit words and stored whole, later
 * stores overwriting the tail of earlier ones (bytes written one by one and
 * read back in bulk would stall the store buffer). No store reaches past
 * out[SIP_FMT_MAX - 1]. */

static const uint32_t pow10_32[10] = {1,      10,      100,      1000,      10000,
                                      100000, 1000000, 10000000, 100000000, 1000000000};

size_t sip__fmt_float(float v, char *out) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  uint32_t frac = u & 0x7fffffu, exp = (u >> 23) & 0xffu;
  if (exp == 0xff || (!exp && !frac)) return sip__fmt_special(v, out);
  int32_t x;
  uint32_t d = float_digits(frac, exp, &x);
  if ((u & 0x7fffffffu) == 0x15ae43fdu) {
    /* The one float32 whose shortest decimal (7.038531e-26) read as a
     * double, then rounded to float32 (how JSON readers read FP32: two
     * roundings), gives its neighbour; all 2^32 were checked. The nearest
     * 8-digit decimal reads back either way. */
    d = 70385307;
    x = -33;
  }
  /* The digits may end in zeros (a round-up of ...9): the exponent takes them. */
  while (d % 10 == 0) d /= 10, x++;
  /* nd digits: floor(log10(2^bits)) = bits * 1233 >> 12 is nd or nd - 1. */
  int nd = ((32 - __builtin_clz(d)) * 1233) >> 12;
  nd += d >= pow10_32[nd];
  x += nd - 1; /* now the exponent of the first digit */
  /* first: characters 0..7 of the digits; rest: characters 1..8. */
  uint64_t low8 = ascii8(d % 100000000), first, rest;
  if (nd == 9) {
    first = ('0' + d / 100000000) | low8 << 8;
    rest = low8;
  } else {
    first = low8 >> 8 * (8 - nd);
    rest = first >> 8;
  }
  char *o = out;
  *o = '-';
  o += u >> 31;
  if (x < -4 || x >= 9) { /* d.ddde+XX */
    o[0] = (char)first;
    o[1] = '.';
    store8(o + 2, rest);
    o = exponent(o + (nd > 1 ? nd + 1 : 1), x);
  } else if (x < 0) { /* 0.000ddd */
    store8(o, 0x3030303030302e30u); /* "0.000000" */
    o += 1 - x;
    store8(o, first);
    store8(o + 1, rest);
    o += nd;
  } else if (nd > x + 1) { /* dd.ddd */
    store8(o, first);
    o[x + 1] = '.';
    store8(o + x + 2, rest >> 8 * x);
    o += nd + 1;
  } else { /* ddd000: an integer */
    store8(o, first);
    store8(o + 1, rest);
    store8(o + nd, 0x3030303030303030u);
    o += x + 1;
  }
  *o = '\0';
  return (size_t)(o - out);
}
