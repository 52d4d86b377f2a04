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
  if (!v) {
    if (json_object_get(params, "sequence_start") || json_object_get(params, "sequence_end"))
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "parameters.%s without parameters.sequence_id; expected the id of "
                           "the sequence too",
                           json_object_get(params, "sequence_start") ? "sequence_start"
                                                                      : "sequence_end");
    return NULL;
  }
  if (json_is_integer(v) && json_integer_value(v) >= 1) {
    out->id = (uint64_t)json_integer_value(v);
  } else if (json_is_string(v) && json_string_length(v) >= 1 && json_string_length(v) <= 256 &&
             strlen(json_string_value(v)) == json_string_length(v)) {
    out->sid = json_string_value(v);
  } else {
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "parameters.sequence_id is %s; expected an integer >= 1 or a string of "
                         "1..256 bytes",
                         json_is_integer(v)  ? "an integer below 1"
                         : json_is_string(v) ? "an empty, too long or NUL-holding string"
                                             : "neither an integer nor a string");
  }
  out->present = 1;
  return NULL;
}
