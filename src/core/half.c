/* sip — IEEE half precision <-> double, rounding to nearest even (as
 * numpy does), shared by the KServe JSON codec, expressions and transforms. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"

uint16_t sip__f64_to_f16(double d) {
  uint64_t x;
  memcpy(&x, &d, sizeof x);
  uint16_t sign = (uint16_t)((x >> 48) & 0x8000);
  int exp = (int)((x >> 52) & 0x7ff);
  uint64_t mant = x & 0xfffffffffffffull;
  if (exp == 0x7ff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0)); /* inf, quiet NaN */
  if (exp == 0) return sign; /* double subnormals are far below half's range */
  int e = exp - 1023 + 15;  /* half's biased exponent */
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  uint64_t m = mant | (1ull << 52);
  /* Normal halves keep 11 significant bits (the implicit one included);
   * subnormals fewer, shifted by how far below the normal range we are.
   * Rounding straight from the double avoids double rounding via float. */
  int shift = e > 0 ? 42 : 43 - e;
  if (shift > 63) return sign;
  uint64_t h = m >> shift, rem = m & ((1ull << shift) - 1), halfway = 1ull << (shift - 1);
  if (rem > halfway || (rem == halfway && (h & 1))) h++;
  /* A carry out of the significand bumps the exponent (up to inf: 0x7c00). */
  if (e <= 0) return (uint16_t)(sign | h);
  return (uint16_t)(sign | (((uint64_t)(e - 1) << 10) + h));
}

double sip__f16_to_f64(uint16_t h) {
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = ldexp(mant, -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = ldexp(mant | 0x400, exp - 25);
  return (h & 0x8000) ? -v : v;
}
