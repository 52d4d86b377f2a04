/* sip — whether a model is served, in the engine's one not-found wording,
 * for the front-ends (server/introspect.h). */
#include "pipeline/pipeline.h"
#include "server/introspect.h"
#include "server/server_impl.h"

sip_error_t *sip__server_model_check(sip_server_t *s, const char *name, const char *version) {
  if (sip__registry_is_named(&s->eng, name))
    return version ? sip__pipeline_version_error(name, version) : NULL;
  sip_error_t *e = NULL;
  sip__pool_t *p = sip__registry_find(&s->eng, name, version, &e);
  if (p) sip__pool_unref(p);
  return e;
}
