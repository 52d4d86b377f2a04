/* sip — number text: the shortest decimal that reads back to the same
 * float32 (fmt.c) or float64 (fmt64.c), by Ryu's algorithm, laid out as
 * JSON numbers.
 *
 * Shortest: no decimal with fewer significant digits reads back to the
 * value; among those with as few, the one nearest the value. Reading back
 * (strtof / strtod, or strtod then a cast to float, as JSON readers do)
 * gives the value bit for bit: for that, one float32, whose shortest text
 * read the second way gives its neighbour, is written with a digit more
 * (+-7.0385307e-26). Layout as printf's %g (9 significant digits
 * for float32, 17 for float64): plain notation when the decimal exponent x
 * is -4 <= x < 9 (float32) or < 17 (float64), d.ddde+XX otherwise; so an
 * integral value is written as an integer below 10^9 / 10^17 (a JSON
 * integer within int64). Zero is "0"; negative zero "-0.0" (as "-0" it
 * would read as the integer 0 and lose its sign). NaN and the infinities,
 * which JSON lacks, are the tokens the KServe JSON protocol uses:
 * NaN, Infinity, -Infinity. */
#ifndef SIP_CORE_FMT_H
#define SIP_CORE_FMT_H

#include <stddef.h>

/* The most bytes a number takes, its ending NUL included. */
#define SIP_FMT_MAX 32

/* v's text into out (SIP_FMT_MAX bytes, NUL-ended): its length. */
size_t sip__fmt_float(float v, char *out);
size_t sip__fmt_double(double v, char *out);

#endif
