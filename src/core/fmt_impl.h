/* sip — what fmt.c (float32) and fmt64.c (float64) share: the text of the
 * special values, the layout of digits, Ryu's logarithms, and characters
 * built 8 at a time.
 * Private to src/core/fmt*.c. */
#ifndef SIP_CORE_FMT_IMPL_H
#define SIP_CORE_FMT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The text of v when v is zero, NaN or infinite (its length), else 0. */
size_t sip__fmt_special(double v, char *out);
/* The text of a finite nonzero value given as its significant digits
 * dig[0..nd) (nd <= 17, no leading or trailing zero) and x, the decimal
 * exponent of the first; plain notation when -4 <= x < plain_max. */
size_t sip__fmt_layout(int negative, const char *dig, int nd, int x, int plain_max, char *out);

/* Ryu's logarithms, exact over the ranges given (checked with integer
 * arithmetic), which cover every float64. Bits of 5^e (1 for e = 0):
 * ceil(log2(5^e)) for 0 < e <= 3528. */
static inline int32_t pow5bits(int32_t e) { return (int32_t)(((uint32_t)e * 1217359) >> 19) + 1; }
/* floor(log10(2^e)), 0 <= e <= 1650. */
static inline uint32_t log10_pow2(int32_t e) { return ((uint32_t)e * 78913) >> 18; }
/* floor(log10(5^e)), 0 <= e <= 2620. */
static inline uint32_t log10_pow5(int32_t e) { return ((uint32_t)e * 732923) >> 20; }

/* Stores the 8 characters of w, character i in byte i. */
static inline void store8(char *o, uint64_t w) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(o, &w, 8);
#else
  for (int i = 0; i < 8; i++, w >>= 8) o[i] = (char)(w & 0xff);
#endif
}

/* The 8 decimal digits of v < 10^8 in ASCII, the first in the lowest byte:
 * split in 4 + 4, 2 + 2, 1 + 1 digits in the lanes of one 64-bit word
 * (x * 10486 >> 20 is x / 100 for x < 10^4, x * 103 >> 10 is x / 10 for
 * x < 100; no lane overflows into the next). */
static inline uint64_t ascii8(uint32_t v) {
  uint64_t x = (uint64_t)(v / 10000) | (uint64_t)(v % 10000) << 32;
  uint64_t q = ((x * 10486) >> 20) & 0x0000007f0000007fu;
  x = q | (x - q * 100) << 16;
  q = ((x * 103) >> 10) & 0x000f000f000f000fu;
  x = q | (x - q * 10) << 8;
  return x | 0x3030303030303030u;
}

#endif
