/* sip — the SLA monitor: closes pools' SLA windows on a thread of its own
 * and delivers the alerts (docs/sla.md; src/server/observe/sla_monitor.c). */
#ifndef SIP_SERVER_SLA_MONITOR_H
#define SIP_SERVER_SLA_MONITOR_H

#include <jansson.h>

#include "server/observe/webhook.h"
#include "sip/server.h"

typedef struct sip__sla_monitor sip__sla_monitor_t;

/* Starts the monitor of `s` (s->sla) with the config's alerts block and its
 * webhooks. Errors: RESOURCE_EXHAUSTED. */
sip_error_t *sip__sla_monitor_start(sip_server_t *s);
/* Stops the thread and the webhooks (see sip__webhooks_free); safe when
 * never started. */
void sip__sla_monitor_stop(sip_server_t *s);
/* The status document's "alerts" object: the policy (warning_after,
 * critical_after, resolve_after), alerts sent, and each webhook's counters
 * {url, delivered, failed, dropped, attempts, queued}. Owned. */
json_t *sip__sla_monitor_json(sip_server_t *s);
/* Calls fn for each webhook with its counters (for /metrics). */
void sip__sla_monitor_webhooks(sip_server_t *s,
                               void (*fn)(void *ctx, const char *url,
                                          const sip__webhook_stats_t *st),
                               void *ctx);

#endif
