/* sip — request parameters: the one table every front-end reads them
 * through (sip_request_set_parameter). Native frames, KServe HTTP/REST and
 * KServe gRPC each turn their wire form into a sip_param_value_t and call
 * it; types are checked, units converted and pipeline_config read here,
 * once, with one message per mistake. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/sequence.h"

#define MAX_WAIT_MS 86400000u /* one day: batch_timeout_ms, stage_timeout_ms */

static const char *type_name(const sip_param_value_t *v) {
  if (v->type == SIP_PARAM_JSON) {
    const json_t *j = v->json;
    return json_is_real(j)   ? "a number with a fraction"
           : json_is_string(j) ? "a string"
           : json_is_boolean(j) ? "a boolean"
           : json_is_object(j) ? "an object"
           : json_is_array(j)  ? "a list"
                               : "null";
  }
  switch (v->type) {
  case SIP_PARAM_BOOL: return "a boolean";
  case SIP_PARAM_DOUBLE: return "a number with a fraction";
  case SIP_PARAM_STRING: return "a string";
  default: return "a value of an unknown type";
  }
}

static sip_error_t *bad(const char *key, const sip_param_value_t *v, const char *expect) {
  const json_t *j = v->type == SIP_PARAM_JSON ? v->json : NULL;
  if (v->type == SIP_PARAM_INT || json_is_integer(j))
    return sip_error_new(SIP_INVALID_ARGUMENT, "parameters.%s is %lld; expected %s", key,
                         (long long)(j ? json_integer_value(j) : v->i), expect);
  if (v->type == SIP_PARAM_UINT)
    return sip_error_new(SIP_INVALID_ARGUMENT, "parameters.%s is %llu; expected %s", key,
                         (unsigned long long)v->u, expect);
  return sip_error_new(SIP_INVALID_ARGUMENT, "parameters.%s is %s; expected %s", key,
                       type_name(v), expect);
}

/* An integer value in 0..2^63-1 (a double only when whole), else 0. */
static int as_count(const sip_param_value_t *v, uint64_t *out) {
  if (v->type == SIP_PARAM_INT && v->i >= 0) *out = (uint64_t)v->i;
  else if (v->type == SIP_PARAM_UINT && v->u <= (uint64_t)INT64_MAX) *out = v->u;
  else if (v->type == SIP_PARAM_DOUBLE && v->d >= 0 && v->d < 9.2e18 && v->d == floor(v->d))
    *out = (uint64_t)v->d;
  else if (v->type == SIP_PARAM_JSON && json_is_integer((const json_t *)v->json) &&
           json_integer_value((const json_t *)v->json) >= 0)
    *out = (uint64_t)json_integer_value((const json_t *)v->json);
  else return 0;
  return 1;
}

static int as_bool(const sip_param_value_t *v, int *out) {
  if (v->type == SIP_PARAM_BOOL) *out = v->b != 0;
  else if (v->type == SIP_PARAM_JSON && json_is_boolean((const json_t *)v->json))
    *out = json_is_true((const json_t *)v->json);
  else return 0;
  return 1;
}

static const char *as_string(const sip_param_value_t *v) {
  if (v->type == SIP_PARAM_STRING) return v->s ? v->s : "";
  if (v->type == SIP_PARAM_JSON && json_is_string((const json_t *)v->json))
    return json_string_value((const json_t *)v->json);
  return NULL;
}

/* ---- one setter per parameter ---- */

static sip_error_t *set_priority(sip_request_t *r, const char *key, const sip_param_value_t *v) {
  uint64_t u;
  if (!as_count(v, &u))
    return bad(key, v, "an integer in 0..2^63-1 (0: the pool's default, 1: the highest)");
  /* KServe/Triton: 0 is the default, 1 the highest; sip has 3 levels, so
   * everything past 3 is the lowest. */
  r->priority = u > 3 ? 3 : (int)u;
  return NULL;
}

static sip_error_t *set_timeout(sip_request_t *r, const char *key, const sip_param_value_t *v) {
  uint64_t us;
  if (!as_count(v, &us)) return bad(key, v, "an integer in 0..2^63-1 (microseconds; 0: none)");
  uint64_t ms = us / 1000 + (us % 1000 != 0); /* rounded up: never earlier than asked */
  r->timeout_ms = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
  return NULL;
}

static sip_error_t *set_batch_wait(sip_request_t *r, const char *key,
                                   const sip_param_value_t *v) {
  uint64_t ms;
  if (!as_count(v, &ms) || ms > MAX_WAIT_MS)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "parameters.%s: expected an integer 0..86400000 (milliseconds a request "
                         "may wait for its batch to fill)", key);
  r->batch_wait_ms = (uint32_t)ms;
  return NULL;
}

static sip_error_t *set_sequence_id(sip_request_t *r, const char *key,
                                    const sip_param_value_t *v) {
  const char *s = as_string(v);
  uint64_t id = 0;
  if (!s && !as_count(v, &id))
    return bad(key, v, "an integer in 0..2^63-1 or a string of 1..256 bytes (0 and \"\": none)");
  if (s && strlen(s) > 256) {
    sip__request_sequence_id(r, 0, NULL); /* a refused id leaves no sequence */
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "parameters.%s is a string of %zu bytes; expected 1..256", key, strlen(s));
  }
  return sip__request_sequence_id(r, id, s); /* 0 and "" mean no sequence, as in Triton */
}

static sip_error_t *set_sequence_flag(sip_request_t *r, const char *key,
                                      const sip_param_value_t *v) {
  int b;
  if (!as_bool(v, &b)) return bad(key, v, "true or false");
  int flag = !strcmp(key, "sequence_start") ? SIP__SEQF_START : SIP__SEQF_END;
  r->seq_flags = b ? r->seq_flags | flag : r->seq_flags & ~flag;
  return NULL;
}

static sip_error_t *set_idempotency_key(sip_request_t *r, const char *key,
                                        const sip_param_value_t *v) {
  const char *s = as_string(v);
  if (!s) return bad(key, v, "a string");
  return sip_request_set_idempotency_key(r, s);
}

/* W3C trace context (docs/tracing.md): an invalid value is ignored. */
static sip_error_t *set_traceparent(sip_request_t *r, const char *key,
                                    const sip_param_value_t *v) {
  const char *s = as_string(v);
  if (!s) return bad(key, v, "a string (W3C traceparent)");
  sip__request_traceparent(r, s);
  return NULL;
}

static sip_error_t *set_tracestate(sip_request_t *r, const char *key,
                                   const sip_param_value_t *v) {
  const char *s = as_string(v);
  if (!s) return bad(key, v, "a string (W3C tracestate)");
  return sip__request_tracestate(r, s);
}

#define PC_EXPECTED "{\"stage_timeout_ms\": [...], \"early_exit_condition\": \"...\"}"

static sip_error_t *pipeline_config(sip_request_t *r, const json_t *root) {
  if (!json_is_object(root))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "parameters.pipeline_config is not a JSON object; expected " PC_EXPECTED);
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)root, key, v) {
    if (!strcmp(key, "stage_timeout_ms")) {
      size_t n = json_is_array(v) ? json_array_size(v) : 0;
      if (!json_is_array(v))
        return sip_error_new(SIP_INVALID_ARGUMENT,
                             "pipeline_config.stage_timeout_ms: expected a list of millisecond "
                             "values, one per stage in config order (0: none)");
      uint32_t *ms = n ? sip__calloc(n, sizeof *ms) : NULL;
      if (n && !ms) return SIP__OOM();
      for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > MAX_WAIT_MS) {
          sip__free(ms);
          return sip_error_new(SIP_INVALID_ARGUMENT, "pipeline_config.stage_timeout_ms[%zu]: "
                               "expected an integer 0..86400000", i);
        }
        ms[i] = (uint32_t)json_integer_value(x);
      }
      sip__free(r->stage_timeout_ms);
      r->stage_timeout_ms = ms;
      r->n_stage_timeouts = n;
      r->has_stage_timeouts = 1;
    } else if (!strcmp(key, "early_exit_condition")) {
      if (!json_is_string(v))
        return sip_error_new(SIP_INVALID_ARGUMENT,
                             "pipeline_config.early_exit_condition: expected a string");
      char *c = sip__strdup(json_string_value(v));
      if (!c) return SIP__OOM();
      sip__free(r->early_exit);
      r->early_exit = c;
    } else {
      return sip_error_new(SIP_INVALID_ARGUMENT, "pipeline_config has no key '%s'; expected "
                           "stage_timeout_ms or early_exit_condition", key);
    }
  }
  return NULL;
}

/* A JSON object, or a string holding one (gRPC's string_param, the C API). */
static sip_error_t *set_pipeline_config(sip_request_t *r, const char *key,
                                        const sip_param_value_t *v) {
  if (v->type == SIP_PARAM_JSON) return pipeline_config(r, (const json_t *)v->json);
  if (v->type != SIP_PARAM_STRING)
    return bad(key, v, "a JSON object " PC_EXPECTED " (or a string holding one)");
  json_error_t je;
  json_t *root = json_loads(v->s ? v->s : "", 0, &je);
  sip_error_t *e = root ? pipeline_config(r, root)
                        : sip_error_new(SIP_INVALID_ARGUMENT, "parameters.pipeline_config is not "
                                        "JSON (%s); expected " PC_EXPECTED, je.text);
  json_decref(root);
  return e;
}

static const struct param {
  const char *key;
  sip_error_t *(*set)(sip_request_t *r, const char *key, const sip_param_value_t *v);
} PARAMS[] = {
    {"priority", set_priority},
    {"timeout", set_timeout},
    {"batch_timeout_ms", set_batch_wait},
    {"sequence_id", set_sequence_id},
    {"sequence_start", set_sequence_flag},
    {"sequence_end", set_sequence_flag},
    {"idempotency_key", set_idempotency_key},
    {"traceparent", set_traceparent},
    {"tracestate", set_tracestate},
    {"pipeline_config", set_pipeline_config},
};
#define N_PARAMS (sizeof PARAMS / sizeof PARAMS[0])

static char names[256];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_init(void) {
  size_t n = 0;
  for (size_t i = 0; i < N_PARAMS; i++)
    n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", PARAMS[i].key);
}

const char *sip_request_parameter_names(void) {
  pthread_once(&names_once, names_init); /* the table's keys, in its order */
  return names;
}

sip_error_t *sip_request_set_parameter(sip_request_t *r, const char *key,
                                       const sip_param_value_t *v) {
  if (!r || !key || !v)
    return sip_error_new(SIP_INVALID_ARGUMENT, "request parameter: %s is NULL",
                         !r ? "the request" : !key ? "the key" : "the value");
  for (size_t i = 0; i < N_PARAMS; i++)
    if (!strcmp(PARAMS[i].key, key)) return PARAMS[i].set(r, key, v);
  return sip_error_new(SIP_NOT_FOUND, "unknown request parameter '%s'; expected one of %s", key,
                       sip_request_parameter_names());
}

sip_error_t *sip__request_check_parameters(const sip_request_t *r) {
  if ((r->seq_flags & (SIP__SEQF_START | SIP__SEQF_END)) && !(r->seq_flags & SIP__SEQF_SET))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "parameters.sequence_start/sequence_end need a sequence_id (an integer "
                         ">= 1 or a non-empty string)");
  return NULL;
}
