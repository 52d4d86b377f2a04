/* libFuzzer target for the checks behind Triton's log and trace settings
 * (src/core/settings.c: sip__log_settings_check, sip__trace_settings_check).
 *
 * Input: byte 0 picks the body's kind (log settings, global trace settings,
 * a model's trace settings) and the starting log level; the rest is the
 * JSON body. Beyond "no crash, no leak" it checks the contract: exactly one
 * of error and result; errors are INVALID_ARGUMENT with a message; a log
 * level is one of SIP__LOG_*; trace changes name only Triton's keys, with
 * values of the documented types (null only for a model), and dump back to
 * JSON.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/settings.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

static int trace_key(const char *k) {
  static const char *const keys[] = {"trace_file", "trace_level", "trace_rate", "trace_count",
                                     "log_frequency", "trace_mode"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
    if (!strcmp(k, keys[i])) return 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int kind = data[0] % 3, level = (data[0] >> 2) % 4;
  json_error_t je;
  json_t *b = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &je);
  if (!b || !json_is_object(b)) {
    json_decref(b);
    return 0;
  }
  sip_error_t *e;
  if (kind == 0) {
    int lv = level;
    e = sip__log_settings_check(b, &lv);
    if (!e) CHECK(lv >= SIP__LOG_DEBUG && lv <= SIP__LOG_ERROR);
  } else {
    json_t *set = NULL;
    e = sip__trace_settings_check(b, kind == 2, &set);
    CHECK(!e == !!set);
    if (set) {
      const char *k;
      json_t *v;
      json_object_foreach(set, k, v) {
        CHECK(trace_key(k) && json_object_get(b, k));
        CHECK(json_is_string(v) || json_is_array(v) || (json_is_null(v) && kind == 2));
      }
      char *txt = json_dumps(set, JSON_COMPACT);
      CHECK(txt);
      free(txt);
      json_decref(set);
    }
  }
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT || sip_error_code(e) == SIP_RESOURCE_EXHAUSTED);
    CHECK(sip_error_message(e) && sip_error_message(e)[0]);
    sip_error_free(e);
  }
  json_decref(b);
  return 0;
}
