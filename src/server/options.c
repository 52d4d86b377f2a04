/* sip — server options (sip/server.h): where the config comes from, whether
 * to listen and wait for the loads, and listening addresses that replace
 * the config's. */
#include <string.h>

#include "core/core.h"
#include "server/server_impl.h"

sip_server_options_t *sip_server_options_new(void) {
  sip_server_options_t *o = sip__calloc(1, sizeof *o);
  if (o) o->listen = 1;
  return o;
}

void sip_server_options_free(sip_server_options_t *o) {
  if (!o) return;
  sip__free(o->config_file);
  sip__free(o->config_text);
  sip__free(o->base_dir);
  sip__free(o->http);
  sip__free(o->grpc);
  for (size_t i = 0; i < o->n_endpoints; i++) sip__free(o->endpoints[i]);
  sip__free(o->endpoints);
  sip__free(o);
}

sip_error_t *sip_server_options_set_config_file(sip_server_options_t *o, const char *path) {
  if (!path) return sip_error_new(SIP_INVALID_ARGUMENT, "config path is NULL");
  char *p = sip__strdup(path);
  if (!p) return SIP__OOM();
  sip__free(o->config_file);
  o->config_file = p;
  return NULL;
}

sip_error_t *sip_server_options_set_config_string(sip_server_options_t *o, const char *yaml,
                                                  const char *base_dir) {
  if (!yaml) return sip_error_new(SIP_INVALID_ARGUMENT, "config text is NULL");
  char *t = sip__strdup(yaml), *b = sip__strdup(base_dir ? base_dir : ".");
  if (!t || !b) {
    sip__free(t);
    sip__free(b);
    return SIP__OOM();
  }
  sip__free(o->config_text);
  sip__free(o->base_dir);
  o->config_text = t;
  o->base_dir = b;
  return NULL;
}

void sip_server_options_set_listen(sip_server_options_t *o, int listen) { o->listen = listen; }
void sip_server_options_set_wait_for_load(sip_server_options_t *o, int wait) {
  o->wait_for_load = wait;
}

static sip_error_t *set_string(char **slot, const char *value, const char *what) {
  if (!value || !*value)
    return sip_error_new(SIP_INVALID_ARGUMENT, "%s is empty; expected HOST:PORT", what);
  char *v = sip__strdup(value);
  if (!v) return SIP__OOM();
  sip__free(*slot);
  *slot = v;
  return NULL;
}

sip_error_t *sip_server_options_set_http_address(sip_server_options_t *o, const char *address) {
  return set_string(&o->http, address, "the HTTP address");
}

sip_error_t *sip_server_options_set_grpc_address(sip_server_options_t *o, const char *address) {
  return set_string(&o->grpc, address, "the gRPC address");
}

sip_error_t *sip_server_options_add_endpoint(sip_server_options_t *o, const char *url) {
  if (!url || !*url)
    return sip_error_new(SIP_INVALID_ARGUMENT, "an endpoint is empty; expected ipc://PATH, "
                         "unix:///PATH or tcp://HOST:PORT");
  char **v = sip__reallocarray(o->endpoints, o->n_endpoints + 1, sizeof *v);
  if (!v) return SIP__OOM();
  o->endpoints = v;
  if (!(v[o->n_endpoints] = sip__strdup(url))) return SIP__OOM();
  o->n_endpoints++;
  return NULL;
}

sip_error_t *sip__server_options_apply(const sip_server_options_t *o, sip__config_t *cfg) {
  return sip__config_set_addresses(cfg, o->http, o->grpc, (const char *const *)o->endpoints,
                                   o->n_endpoints);
}
