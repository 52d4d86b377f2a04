/* sip — introspection for the layers above the server (front-ends): the
 * document sip_server_info_json sends, as jansson values. */
#ifndef SIP_SERVER_INTROSPECT_H
#define SIP_SERVER_INTROSPECT_H

#include <jansson.h>

#include "sip/server.h"

/* sip_server_info_json's document itself (owned; NULL for an unknown kind),
 * for the modules that read it rather than send it. */
json_t *sip__server_info(sip_server_t *s, int kind);

/* NULL when `name` (`version`; NULL: the default) is served, else the
 * NOT_FOUND every front-end answers with (the engine's one wording). */
sip_error_t *sip__server_model_check(sip_server_t *s, const char *name, const char *version);

#endif
