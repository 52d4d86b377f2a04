/* sip — the native-protocol front-end (listener.c and the files of
 * listener_impl.h): framed requests on unix and tcp endpoints, one epoll
 * loop (docs/protocol.md; the design: docs/internals/transport.md). */
#ifndef SIP_TRANSPORT_LISTENER_H
#define SIP_TRANSPORT_LISTENER_H

#include "sip/frontend.h"

/* start() takes the server's `const sip__config_t *` (endpoints,
 * max_frame_bytes). Connections are reported as "unix" and "tcp". */
extern const sip_frontend_vtable_t sip__frontend_native;

#endif
