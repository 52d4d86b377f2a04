/* sip — server readiness (sip/server.h: sip_server_ready; introspect.h):
 * loading over, no drain, and with server.strict_readiness (the default,
 * as Triton's) every pool and pipeline READY, so that a load balancer or a
 * Kubernetes probe never sends traffic to a server whose models failed. */
#include <stdio.h>
#include <string.h>

#include "server/introspect.h"
#include "server/server_impl.h"

size_t sip__server_unready(sip_server_t *s, char *buf, size_t cap) {
  size_t n = 0, bad = 0;
  if (buf && cap) buf[0] = '\0';
  sip__model_view_t *v = sip__server_models(s, &n);
  for (size_t i = 0; i < n; i++) {
    int loading = !strcmp(v[i].state, "LOADING");
    int failed = !strcmp(v[i].state, "FAILED") && s->cfg->strict_readiness;
    if (!loading && !failed) continue;
    bad++;
    size_t at = buf ? strlen(buf) : 0;
    if (!buf || at + 1 >= cap) continue;
    const char *ver = v[i].is_default || !v[i].version ? NULL : v[i].version;
    snprintf(buf + at, cap - at, "%s'%s%s%s' %s%s%.200s", at ? ", " : "", v[i].name,
             ver ? ":" : "", ver ? ver : "", loading ? "still loading" : "FAILED",
             failed && v[i].error ? ": " : "", failed && v[i].error ? v[i].error : "");
  }
  sip__server_models_free(v, n);
  return bad;
}

int sip_server_ready(sip_server_t *s) {
  if (!atomic_load(&s->loaded) || atomic_load(&s->leaving) || atomic_load(&s->draining))
    return 0;
  return !s->cfg->strict_readiness || sip__server_unready(s, NULL, 0) == 0;
}
