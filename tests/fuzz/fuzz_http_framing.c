/* libFuzzer target for the HTTP framing checks (src/http/framing.c).
 *
 * Input: byte 0 picks the version (odd: "HTTP/1.1", else "HTTP/1.0"), byte
 * 1 the body limit (2^(byte % 64)); the rest is header lines, "Name: value"
 * separated by newlines (at most SIP__HTTP_FRAMING_FIELDS of them). Beyond
 * "no crash", it checks the contract: the status is 0, 400, 413 or 501;
 * a refusal has a message; the answer does not depend on fields other than
 * Host, Content-Length and Transfer-Encoding, nor on their names' case; and
 * a request with a single well-formed Content-Length within the limit, one
 * Host and no Transfer-Encoding passes.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_impl.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 4096) return 0;
  const char *version = data[0] & 1 ? "HTTP/1.1" : "HTTP/1.0";
  uint64_t limit = (uint64_t)1 << (data[1] % 64);
  char *text = malloc(size - 1), *upper = malloc(size - 1);
  memcpy(text, data + 2, size - 2);
  text[size - 2] = '\0';
  sip__http_field_t f[SIP__HTTP_FRAMING_FIELDS + 1], g[SIP__HTTP_FRAMING_FIELDS + 1];
  size_t n = 0, m = 0;
  for (char *line = text, *next; line && n < SIP__HTTP_FRAMING_FIELDS; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    char *colon = strchr(line, ':');
    if (!colon) continue;
    *colon = '\0';
    f[n].name = line;
    f[n].value = colon + 1 + strspn(colon + 1, " ");
    n++;
  }
  char msg[256], msg2[256];
  msg[0] = '\0';
  unsigned st = sip__http_framing_check(version, f, n, limit, msg, sizeof msg);
  CHECK(st == 0 || st == 400 || st == 413 || st == 501);
  CHECK(st == 0 || msg[0]);
  /* Only the framing fields count, whatever the case of their names. */
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcasecmp(f[i].name, "Host") && strcasecmp(f[i].name, "Content-Length") &&
        strcasecmp(f[i].name, "Transfer-Encoding"))
      continue;
    size_t len = strlen(f[i].name);
    char *u = upper + off;
    for (size_t k = 0; k <= len; k++) u[k] = (char)toupper((unsigned char)f[i].name[k]);
    off += len + 1;
    g[m].name = u;
    g[m++].value = f[i].value;
  }
  CHECK(sip__http_framing_check(version, g, m, limit, msg2, sizeof msg2) == st);
  /* A plain request passes. */
  sip__http_field_t plain[2] = {{"Host", "x"}, {"Content-Length", "1"}};
  CHECK(sip__http_framing_check("HTTP/1.1", plain, 2, limit, msg2, sizeof msg2) == 0);
  free(text);
  free(upper);
  return 0;
}
