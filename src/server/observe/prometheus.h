/* sip — Prometheus text exposition (format 0.0.4) of the engine's metrics. */
#ifndef SIP_PROMETHEUS_H
#define SIP_PROMETHEUS_H

#include "sip/server.h"

/* The whole /metrics page: per pool and version, per session, and process
 * metrics, built from the status introspection JSON (so it shows
 * exactly what `sip status` shows). Returns an owned NUL-terminated string
 * (sip__free), NULL when out of memory. Thread-safe. docs/http.md lists the
 * names. */
char *sip__prometheus_text(sip_server_t *s);

#endif
