/* sip — the autoscaler thread (docs/elastic.md, "Autoscaling"): ticks
 * every serving pool with an autoscale block (src/session/autoscale.h)
 * with what the server's memory budget has left. */
#ifndef SIP_SERVER_AUTOSCALE_H
#define SIP_SERVER_AUTOSCALE_H

#include <jansson.h>

#include "session/engine.h"
#include "sip/server.h"

/* Starts the thread of `s` (s->autoscaler). Errors: RESOURCE_EXHAUSTED. */
sip_error_t *sip__autoscaler_start(sip_server_t *s);
/* Stops and frees it; safe when never started. */
void sip__autoscaler_stop(sip_server_t *s);
/* A pool's "autoscale" object of the status document (its settings and
 * what the sampler sees), NULL when it has no autoscale block. Owned. */
json_t *sip__autoscale_json(sip__pool_t *p);

#endif
