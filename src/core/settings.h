/* sip — Triton's log and trace settings extensions, for every front-end
 * (HTTP /v2/logging and /v2/trace/setting, gRPC LogSettings and
 * TraceSetting): the checks behind a change, the documents they answer
 * with and the store of trace settings (the server holds one, shared by
 * the front-ends: server/introspect.h).
 *
 * The log settings read and change the process's log level. Trace settings
 * drive request tracing (docs/tracing.md): trace_level OFF or not, and
 * trace_rate (one request in N is sampled); a model's own value set to
 * null falls back to the global one. Values are
 * JSON as the HTTP extension has them; trace counts are decimal strings.
 */
#ifndef SIP_CORE_SETTINGS_H
#define SIP_CORE_SETTINGS_H

#include <jansson.h>

#include "sip/error.h"

#define SIP__LOG_SETTING_KEYS \
  "log_info, log_warning, log_error, log_verbose_level, log_file, log_format"
#define SIP__TRACE_SETTING_KEYS \
  "trace_file, trace_level, trace_rate, trace_count, log_frequency, trace_mode"

/* The log settings now: {log_file, log_info, log_warning, log_error,
 * log_verbose_level, log_format} (owned; NULL when out of memory). */
json_t *sip__log_settings_doc(void);
/* The log level the settings object `b` asks for, starting from *level
 * (SIP__LOG_*). Errors: INVALID_ARGUMENT naming the setting. */
sip_error_t *sip__log_settings_check(json_t *b, int *level);
/* Checks `b` and, when valid, sets the process's log level (logged as a
 * warning). */
sip_error_t *sip__log_settings_apply(json_t *b);

/* The trace changes `b` makes (an owned object of normalized values; null
 * clears a model's own value when for_model). Errors: INVALID_ARGUMENT. */
sip_error_t *sip__trace_settings_check(json_t *b, int for_model, json_t **out);

typedef struct sip__trace_set sip__trace_set_t;
/* Triton's defaults; NULL when out of memory. */
sip__trace_set_t *sip__trace_set_new(void);
void sip__trace_set_free(sip__trace_set_t *t);
/* The settings `model` sees (NULL: the global ones), owned. Thread-safe. */
json_t *sip__trace_get(sip__trace_set_t *t, const char *model);
/* Checks `b` whole, then applies it to the global settings or to
 * `model`'s own; *doc gets the settings `model` now sees. Thread-safe. */
sip_error_t *sip__trace_apply(sip__trace_set_t *t, const char *model, json_t *b, json_t **doc);
/* The trace rate `model` (NULL: the global settings) is sampled at: 0 when
 * its trace_level is OFF (or trace_rate is 0), else N for one request in N.
 * One relaxed atomic load when no level is on anywhere. Thread-safe. */
int sip__trace_rate(sip__trace_set_t *t, const char *model);

#endif
