/* sip — composition: the public sip_server_new builds the engine
 * (src/server) and attaches the front-ends its config asks for (src/transport
 * for the native endpoints, src/http for server.http and server.dashboard, src/grpc for
 * server.grpc), then loads the pools.
 * The engine itself knows no front-end; this is the one file that names
 * them all. */
#include "config/config.h"
#include "grpc/grpc_frontend.h"
#include "http/http.h"
#include "server/server.h"
#include "sip/frontend.h"
#include "transport/listener.h"

sip_error_t *sip_server_new(const sip_server_options_t *o, sip_server_t **out) {
  *out = NULL;
  sip_server_t *s = NULL;
  sip_error_t *e = sip__server_create(o, &s);
  if (e) return e;
  const sip__config_t *cfg = sip__server_config(s);
  if (sip__server_options_listen(o)) {
    /* Front-ends answer "loading" until the pools are READY. */
    e = sip_server_add_frontend(s, &sip__frontend_native, cfg);
    if (!e && cfg->http) e = sip_server_add_frontend(s, &sip__frontend_http, cfg);
    if (!e && cfg->grpc) e = sip_server_add_frontend(s, &sip__frontend_grpc, cfg);
    if (!e && cfg->dashboard) e = sip_server_add_frontend(s, &sip__frontend_dashboard, cfg);
  }
  if (!e) e = sip__server_start(s, o);
  if (e) {
    sip_server_free(s);
    return e;
  }
  *out = s;
  return NULL;
}
