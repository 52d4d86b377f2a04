/* sip — introspection for the layers above the server (front-ends): the
 * document sip_server_info_json sends, as jansson values. */
#ifndef SIP_SERVER_INTROSPECT_H
#define SIP_SERVER_INTROSPECT_H

#include <jansson.h>

#include "sip/server.h"

/* sip_server_info_json's document itself (owned; NULL for an unknown kind),
 * for the modules that read it rather than send it. */
json_t *sip__server_info(sip_server_t *s, int kind);

#endif
