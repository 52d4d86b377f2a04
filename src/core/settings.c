/* sip — Triton's log and trace settings (core/settings.h). */
#include "core/settings.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct sip__trace_set {
  pthread_mutex_t mu;
  json_t *global;    /* the global settings */
  json_t *per_model; /* model name -> the settings it overrides */
  /* Whether any model may be traced (the global level or a model's is not
   * OFF): the one check an untraced request pays (sip__trace_rate). */
  _Atomic int any_on;
};

/* ---- logging ------------------------------------------------------------- */

#define LOG_KEYS SIP__LOG_SETTING_KEYS
#define TRACE_KEYS SIP__TRACE_SETTING_KEYS

json_t *sip__log_settings_doc(void) {
  return json_pack("{s:s,s:b,s:b,s:b,s:i,s:s}", "log_file", "", "log_info",
                   sip__log_enabled(SIP__LOG_INFO), "log_warning", sip__log_enabled(SIP__LOG_WARN),
                   "log_error", 1, "log_verbose_level", sip__log_enabled(SIP__LOG_DEBUG),
                   "log_format", "default");
}

static sip_error_t *want_bool(json_t *v, const char *key) {
  return json_is_boolean(v) ? NULL
                            : sip_error_new(SIP_INVALID_ARGUMENT, "%s is not a boolean; expected "
                                            "true or false", key);
}

sip_error_t *sip__log_settings_check(json_t *b, int *level) {
  /* The level the settings ask for: the most verbose enabled. */
  int info = *level <= SIP__LOG_INFO, warn = *level <= SIP__LOG_WARN;
  int verbose = *level <= SIP__LOG_DEBUG;
  sip_error_t *e = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(b, k, v) {
    if (!strcmp(k, "log_info")) {
      if (!(e = want_bool(v, k))) info = json_is_true(v);
    } else if (!strcmp(k, "log_warning")) {
      if (!(e = want_bool(v, k))) warn = json_is_true(v);
    } else if (!strcmp(k, "log_error")) {
      if (!(e = want_bool(v, k)) && !json_is_true(v))
        e = sip_error_new(SIP_INVALID_ARGUMENT, "log_error: sipd always logs errors; expected true");
    } else if (!strcmp(k, "log_verbose_level")) {
      if (!json_is_integer(v) || json_integer_value(v) < 0)
        e = sip_error_new(SIP_INVALID_ARGUMENT, "log_verbose_level is not an integer >= 0; "
                          "expected 0 (off) or more (debug lines)");
      else
        verbose = json_integer_value(v) > 0;
    } else if (!strcmp(k, "log_file")) {
      if (!json_is_string(v) || json_string_length(v))
        e = sip_error_new(SIP_INVALID_ARGUMENT, "log_file: sipd logs to stderr; expected \"\"");
    } else if (!strcmp(k, "log_format")) {
      if (!json_is_string(v) || strcmp(json_string_value(v), "default"))
        e = sip_error_new(SIP_INVALID_ARGUMENT, "log_format: sipd writes logfmt lines; expected "
                          "\"default\"");
    } else {
      e = sip_error_new(SIP_INVALID_ARGUMENT, "unknown log setting '%s'; expected one of " LOG_KEYS,
                        k);
    }
    if (e) return e;
  }
  *level = verbose ? SIP__LOG_DEBUG : info ? SIP__LOG_INFO : warn ? SIP__LOG_WARN : SIP__LOG_ERROR;
  return NULL;
}

sip_error_t *sip__log_settings_apply(json_t *b) {
  int level = sip__log_enabled(SIP__LOG_DEBUG)  ? SIP__LOG_DEBUG
              : sip__log_enabled(SIP__LOG_INFO) ? SIP__LOG_INFO
              : sip__log_enabled(SIP__LOG_WARN) ? SIP__LOG_WARN
                                                : SIP__LOG_ERROR;
  sip_error_t *e = sip__log_settings_check(b, &level);
  if (e) return e;
  sip__log_set_level(level);
  sip__log(SIP__LOG_WARN, "log level changed", "to=%s",
           (const char *[]){"debug", "info", "warn", "error"}[level]);
  return NULL;
}

/* ---- trace settings ------------------------------------------------------ */

/* A trace value as Triton takes it: trace_level a list of OFF, TIMESTAMPS,
 * TENSORS; the counts decimal strings (numbers are taken too); trace_file a
 * string; trace_mode triton or opentelemetry. NULL when `v` is valid, with
 * *norm the value to store (owned). */
static sip_error_t *trace_value(const char *k, json_t *v, json_t **norm) {
  *norm = NULL;
  if (!strcmp(k, "trace_level")) {
    size_t i;
    json_t *x;
    if (!json_is_array(v) || !json_array_size(v))
      return sip_error_new(SIP_INVALID_ARGUMENT, "trace_level is not a non-empty list; expected "
                           "a list of OFF, TIMESTAMPS, TENSORS");
    json_array_foreach(v, i, x) {
      const char *s = json_string_value(x);
      if (!s || (strcmp(s, "OFF") && strcmp(s, "TIMESTAMPS") && strcmp(s, "TENSORS")))
        return sip_error_new(SIP_INVALID_ARGUMENT, "trace_level[%zu] is not a trace level; "
                             "expected OFF, TIMESTAMPS or TENSORS", i);
    }
    *norm = json_incref(v);
  } else if (!strcmp(k, "trace_rate") || !strcmp(k, "trace_count") ||
             !strcmp(k, "log_frequency")) {
    char num[32];
    const char *s = json_string_value(v);
    if (json_is_integer(v))
      snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v)), s = num;
    char *end = NULL;
    long long n = s && *s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || n < (strcmp(k, "trace_count") ? 0 : -1))
      return sip_error_new(SIP_INVALID_ARGUMENT, "%s is not a whole number%s; expected e.g. "
                           "\"1000\"", k, strcmp(k, "trace_count") ? " >= 0" : " >= -1");
    *norm = json_string(s);
  } else if (!strcmp(k, "trace_file")) {
    if (!json_is_string(v))
      return sip_error_new(SIP_INVALID_ARGUMENT, "trace_file is not a string; expected a path");
    *norm = json_incref(v);
  } else if (!strcmp(k, "trace_mode")) {
    const char *s = json_string_value(v);
    if (!s || (strcmp(s, "triton") && strcmp(s, "opentelemetry")))
      return sip_error_new(SIP_INVALID_ARGUMENT, "trace_mode is not a trace mode; expected "
                           "triton or opentelemetry");
    *norm = json_incref(v);
  } else {
    return sip_error_new(SIP_INVALID_ARGUMENT, "unknown trace setting '%s'; expected one of "
                         TRACE_KEYS, k);
  }
  return *norm ? NULL : SIP__OOM();
}

static int is_trace_key(const char *k) {
  static const char *const keys[] = {"trace_file",  "trace_level",   "trace_rate",
                                     "trace_count", "log_frequency", "trace_mode"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
    if (!strcmp(k, keys[i])) return 1;
  return 0;
}

sip_error_t *sip__trace_settings_check(json_t *b, int for_model, json_t **out) {
  /* Checked whole before anything changes. */
  *out = NULL;
  json_t *set = json_object();
  if (!set) return SIP__OOM();
  sip_error_t *e = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(b, k, v) {
    json_t *norm = NULL;
    if (json_is_null(v) && for_model && is_trace_key(k)) {
      norm = json_null(); /* back to the global setting */
    } else if ((e = trace_value(k, v, &norm))) {
      break;
    }
    json_object_set_new(set, k, norm);
  }
  if (e) {
    json_decref(set);
    return e;
  }
  *out = set;
  return NULL;
}

sip__trace_set_t *sip__trace_set_new(void) {
  sip__trace_set_t *t = sip__calloc(1, sizeof *t);
  if (!t) return NULL;
  pthread_mutex_init(&t->mu, NULL);
  t->global = json_pack("{s:s,s:[s],s:s,s:s,s:s,s:s}", "trace_file", "", "trace_level", "OFF",
                        "trace_rate", "1000", "trace_count", "-1", "log_frequency", "0",
                        "trace_mode", "triton");
  t->per_model = json_object();
  if (!t->global || !t->per_model) {
    sip__trace_set_free(t);
    return NULL;
  }
  return t;
}

void sip__trace_set_free(sip__trace_set_t *t) {
  if (!t) return;
  json_decref(t->global);
  json_decref(t->per_model);
  pthread_mutex_destroy(&t->mu);
  sip__free(t);
}

/* 1 when a trace_level list asks for timestamps (TENSORS implies them). */
static int level_on(json_t *lv) {
  size_t i;
  json_t *x;
  json_array_foreach(lv, i, x) {
    const char *s = json_string_value(x);
    if (s && strcmp(s, "OFF")) return 1;
  }
  return 0;
}

int sip__trace_rate(sip__trace_set_t *t, const char *model) {
  if (!atomic_load_explicit(&t->any_on, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&t->mu);
  json_t *own = model ? json_object_get(t->per_model, model) : NULL;
  json_t *lv = own ? json_object_get(own, "trace_level") : NULL;
  json_t *rate = own ? json_object_get(own, "trace_rate") : NULL;
  if (!lv) lv = json_object_get(t->global, "trace_level");
  if (!rate) rate = json_object_get(t->global, "trace_rate");
  int n = 0;
  if (level_on(lv)) {
    long long r = json_string_value(rate) ? strtoll(json_string_value(rate), NULL, 10) : 0;
    n = r <= 0 ? 0 : r > INT32_MAX ? INT32_MAX : (int)r;
  }
  pthread_mutex_unlock(&t->mu);
  return n;
}

/* Caller holds t->mu. */
static json_t *get_locked(sip__trace_set_t *t, const char *model) {
  json_t *d = json_deep_copy(t->global);
  json_t *own = model ? json_object_get(t->per_model, model) : NULL;
  if (d && own) json_object_update(d, own);
  return d;
}

json_t *sip__trace_get(sip__trace_set_t *t, const char *model) {
  pthread_mutex_lock(&t->mu);
  json_t *d = get_locked(t, model);
  pthread_mutex_unlock(&t->mu);
  return d;
}

sip_error_t *sip__trace_apply(sip__trace_set_t *t, const char *model, json_t *b, json_t **doc) {
  *doc = NULL;
  json_t *set = NULL;
  sip_error_t *e = sip__trace_settings_check(b, model != NULL, &set);
  if (e) return e;
  const char *k;
  json_t *v;
  pthread_mutex_lock(&t->mu);
  json_t *target = t->global;
  if (model) {
    target = json_object_get(t->per_model, model);
    if (!target) {
      target = json_object();
      json_object_set_new(t->per_model, model, target);
    }
  }
  json_object_foreach(set, k, v) {
    if (json_is_null(v)) json_object_del(target, k);
    else json_object_set(target, k, v);
  }
  int on = level_on(json_object_get(t->global, "trace_level"));
  json_t *own;
  json_object_foreach(t->per_model, k, own) on |= level_on(json_object_get(own, "trace_level"));
  atomic_store(&t->any_on, on);
  *doc = get_locked(t, model);
  pthread_mutex_unlock(&t->mu);
  json_decref(set);
  return *doc ? NULL : SIP__OOM();
}
