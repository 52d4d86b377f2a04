/* libFuzzer target for the W3C traceparent parser and the tracestate check
 * (src/core/trace.c: sip__traceparent_parse, sip__tracestate_ok).
 *
 * Input: the header value's bytes (not NUL-terminated: the parser must read
 * only `size` of them). Beyond "no crash, no over-read" it checks the
 * contract: an accepted value is at least 55 bytes, exactly 55 for version
 * 00, never version ff, with a nonzero trace id and parent; formatting what
 * was parsed gives back the value's first 55 bytes but for the flags byte's
 * other bits; and a value accepted once is accepted again (no state).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/trace.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly `size` bytes: ASan catches any read past it. */
  char *s = malloc(size ? size : 1);
  if (!s) return 0;
  if (size) memcpy(s, data, size);
  sip__trace_ctx_t c;
  int ok = sip__traceparent_parse(s, size, &c);
  if (ok) {
    CHECK(size >= 55);
    CHECK(!(s[0] == 'f' && s[1] == 'f'));
    CHECK(!(s[0] == '0' && s[1] == '0') || size == 55);
    CHECK(c.parent != 0);
    static const uint8_t zero[16];
    CHECK(memcmp(c.trace_id, zero, 16) != 0);
    char back[56];
    sip__traceparent_format(c.trace_id, c.parent, c.sampled, back);
    CHECK(memcmp(back + 2, s + 2, 51) == 0); /* -TRACE-PARENT- */
    sip__trace_ctx_t d;
    CHECK(sip__traceparent_parse(s, size, &d) == 1);
    CHECK(!memcmp(&c.trace_id, &d.trace_id, 16) && c.parent == d.parent && c.sampled == d.sampled);
  }
  int st = sip__tracestate_ok(s, size);
  CHECK(!st || (size >= 1 && size <= 512));
  free(s);
  return 0;
}
