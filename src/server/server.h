/* sip — the server layer's entry points for the layer above it (src/compose):
 * the engine is created, front-ends are attached, then the pools load. */
#ifndef SIP_SERVER_SERVER_H
#define SIP_SERVER_SERVER_H

#include "config/config.h"
#include "sip/server.h"

/* The engine of `o`'s config: pools listed (LOADING), housekeeping running,
 * nothing loaded and no front-end. Free with sip_server_free. */
sip_error_t *sip__server_create(const sip_server_options_t *o, sip_server_t **out);
/* Starts the loader (waits for the initial loads when `o` says so). */
sip_error_t *sip__server_start(sip_server_t *s, const sip_server_options_t *o);
int sip__server_options_listen(const sip_server_options_t *o);
/* The parsed config the server runs (borrowed, lives as long as `s`). */
const sip__config_t *sip__server_config(const sip_server_t *s);

#endif
