/* sip — a request's sequence parameters (core/seqparam.h). */
#include "core/seqparam.h"

#include <string.h>

int sip__seq_param_key(const char *key) {
  return !strcmp(key, "sequence_id") || !strcmp(key, "sequence_start") ||
         !strcmp(key, "sequence_end");
}

static sip_error_t *flag(const json_t *params, const char *key, int *out) {
  json_t *v = json_object_get(params, key);
  if (!v) return NULL;
  if (!json_is_boolean(v))
    return sip_error_new(SIP_INVALID_ARGUMENT, "parameters.%s is not a boolean; expected true or "
                                               "false", key);
  *out = json_is_true(v);
  return NULL;
}

sip_error_t *sip__seq_params_read(const json_t *params, sip__seq_params_t *out) {
  memset(out, 0, sizeof *out);
  sip_error_t *e;
  if ((e = flag(params, "sequence_start", &out->start)) ||
      (e = flag(params, "sequence_end", &out->end)))
    return e;
  json_t *v = json_object_get(params, "sequence_id");
  if (v && json_is_integer(v) && json_integer_value(v) >= 1) {
    out->id = (uint64_t)json_integer_value(v);
  } else if (v && json_is_string(v) && json_string_length(v) >= 1) {
    if (json_string_length(v) > 256 || strlen(json_string_value(v)) != json_string_length(v))
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "parameters.sequence_id is a string of %zu bytes%s; expected 1..256 "
                           "bytes without NUL",
                           json_string_length(v),
                           strlen(json_string_value(v)) != json_string_length(v) ? " with a NUL"
                                                                               : "");
    out->sid = json_string_value(v);
  } else if (v && !(json_is_integer(v) && json_integer_value(v) == 0) &&
             !(json_is_string(v) && json_string_length(v) == 0)) {
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "parameters.sequence_id is %s; expected an integer >= 1 or a string of "
                         "1..256 bytes (0 and \"\": no sequence)",
                         json_is_integer(v) ? "a negative integer"
                                            : "neither an integer nor a string");
  } else { /* absent, 0 or "": not part of a sequence, as in Triton */
    if (out->start || out->end)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "parameters.%s is true without a sequence; expected a "
                           "parameters.sequence_id other than 0 or \"\" too",
                           out->start ? "sequence_start" : "sequence_end");
    return NULL;
  }
  out->present = 1;
  return NULL;
}
