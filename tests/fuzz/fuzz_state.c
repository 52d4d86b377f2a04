/* libFuzzer target for the runtime state file (src/server/state/state.c). Beyond
 * "no crash, no leak" it checks the contract: exactly one of error and
 * result; errors are INVALID_ARGUMENT or FAILED_PRECONDITION (another
 * format version) with a "state file: " message; a parsed state dumps to a
 * document that parses again to the same models (names in order, loaded
 * flags and config texts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/state/state.h"
#include "sip/sip.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sip__state_t *st = NULL;
  sip_error_t *e = sip__state_parse((const char *)data, size, &st);
  CHECK(!e != !st);
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT ||
          sip_error_code(e) == SIP_FAILED_PRECONDITION);
    CHECK(!strncmp(sip_error_message(e), "state file: ", 12));
    sip_error_free(e);
    return 0;
  }
  char *txt = sip__state_dump(st);
  if (txt) {
    sip__state_t *again = NULL;
    e = sip__state_parse(txt, strlen(txt), &again);
    CHECK(!e && again);
    size_t n = sip__state_model_count(st);
    CHECK(sip__state_model_count(again) == n);
    for (size_t i = 0; i < n; i++) {
      int l1 = -1, l2 = -1;
      const char *c1 = NULL, *c2 = NULL;
      const char *n1 = sip__state_model_at(st, i, &l1, &c1);
      const char *n2 = sip__state_model_at(again, i, &l2, &c2);
      CHECK(!strcmp(n1, n2) && l1 == l2 && !c1 == !c2);
      CHECK(!c1 || !strcmp(c1, c2));
      CHECK(!i || strcmp(sip__state_model_at(st, i - 1, NULL, NULL), n1) < 0);
    }
    sip__state_free(again);
    sip_free(txt);
  }
  sip__state_free(st);
  return 0;
}
