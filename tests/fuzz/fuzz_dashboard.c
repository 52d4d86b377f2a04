/* libFuzzer target for the dashboard's two readers of outside text
 * (src/http/dashboard.c, src/http/events.c):
 *
 * - the event stream's ?exclude= list (sip__http_event_exclude): an error
 *   or a set of known types only; a list rebuilt from the set's names
 *   parses to the same set;
 * - the report's snapshot (sip__dash_render): whatever the text, the
 *   <script id="sip-snapshot"> element ends where the snapshot ends, and
 *   holds the text with each '<' written \u003c (and nothing else changed).
 *
 * Input: byte 0 picks which; the rest is the text (NUL-terminated copy).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "http/http_impl.h"
#include "sip/events.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

static void exclude(const char *text) {
  uint64_t mask = 0;
  sip_error_t *e = sip__http_event_exclude(text, &mask);
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT);
    sip_error_free(e);
    return;
  }
  CHECK(!(mask & 1));
  CHECK(!(mask >> SIP_EVENT_TYPES_));
  char again[1024] = "";
  for (int t = 1; t < SIP_EVENT_TYPES_; t++)
    if (mask >> t & 1) {
      strcat(again, again[0] ? "," : "");
      strcat(again, sip_event_type_name((sip_event_type_t)t));
    }
  uint64_t mask2 = 0;
  e = sip__http_event_exclude(again, &mask2);
  CHECK(!e && mask2 == mask);
}

static void report(const char *text) {
  size_t len = 0;
  char *page = sip__dash_render(text, &len);
  if (!page) return; /* out of memory */
  static const char open[] = "<script type=\"application/json\" id=\"sip-snapshot\">";
  const char *p = strstr(page, open);
  CHECK(p);
  p += sizeof open - 1;
  const char *close = strstr(p, "</script>");
  CHECK(close);
  /* The element's text is the snapshot with '<' escaped, and ends there. */
  const char *q = p;
  for (const char *t = text; *t; t++) {
    if (*t == '<') {
      CHECK(!strncmp(q, "\\u003c", 6));
      q += 6;
    } else {
      CHECK(*q == *t);
      q++;
    }
  }
  CHECK(q == close);
  CHECK(!memchr(p, '<', (size_t)(close - p)));
  sip__free(page);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  char *text = malloc(size);
  if (!text) return 0;
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  if (data[0] & 1)
    report(text);
  else
    exclude(text);
  free(text);
  return 0;
}
