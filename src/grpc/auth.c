/* sip — the gRPC front-end's authentication (docs/security.md): the API
 * group of each method and the check of a call's `authorization: Bearer
 * TOKEN` metadata, before its message is read. Browsers cannot make gRPC
 * calls, so there is no Host or Origin check here. */
#include <grpc/support/alloc.h>
#include <string.h>

#include "core/auth.h"
#include "core/core.h"
#include "grpc/grpc_frontend.h"
#include "grpc/grpc_impl.h"

#define SVC "/inference.GRPCInferenceService/"

/* Methods by group; a method not listed is management (closed by default). */
static const struct {
  const char *path;
  int group;
} method_groups[] = {
    {SVC "ServerLive", SIP__AUTH_OPEN},
    {SVC "ServerReady", SIP__AUTH_OPEN},
    {SVC "ModelReady", SIP__AUTH_OPEN},
    {"/grpc.health.v1.Health/Check", SIP__AUTH_OPEN},
    {SVC "ServerMetadata", SIP__AUTH_INFERENCE},
    {SVC "ModelMetadata", SIP__AUTH_INFERENCE},
    {SVC "ModelInfer", SIP__AUTH_INFERENCE},
    {SVC "ModelStreamInfer", SIP__AUTH_INFERENCE},
    {SVC "ModelConfig", SIP__AUTH_INFERENCE},
    {SVC "SystemSharedMemoryStatus", SIP__AUTH_INFERENCE},
    {SVC "SystemSharedMemoryRegister", SIP__AUTH_INFERENCE},
    {SVC "SystemSharedMemoryUnregister", SIP__AUTH_INFERENCE},
    {SVC "CudaSharedMemoryStatus", SIP__AUTH_INFERENCE},
    {SVC "CudaSharedMemoryRegister", SIP__AUTH_INFERENCE},
    {SVC "CudaSharedMemoryUnregister", SIP__AUTH_INFERENCE},
    {SVC "ModelStatistics", SIP__AUTH_METRICS},
    {SVC "RepositoryIndex", SIP__AUTH_MANAGEMENT},
    {SVC "RepositoryModelLoad", SIP__AUTH_MANAGEMENT},
    {SVC "RepositoryModelUnload", SIP__AUTH_MANAGEMENT},
    {SVC "TraceSetting", SIP__AUTH_MANAGEMENT},
    {SVC "LogSettings", SIP__AUTH_MANAGEMENT},
};

int sip__grpc_method_group(const char *path) {
  for (size_t i = 0; i < sizeof method_groups / sizeof *method_groups; i++)
    if (!strcmp(method_groups[i].path, path)) return method_groups[i].group;
  return SIP__AUTH_MANAGEMENT;
}

/* Whether gRPC's peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000",
 * "unix:/path") is a local peer. */
static bool peer_is_local(const char *p) {
  if (!p) return false;
  return !strncmp(p, "unix:", 5) || !strncmp(p, "ipv4:127.", 9) || !strncmp(p, "ipv6:[::1]", 10) ||
         !strncmp(p, "ipv6:[::ffff:127.", 17) || !strncmp(p, "ipv6:%5B::1%5D", 14);
}

sip_error_t *sip__grpc_authorize(sip__gcall_t *c) {
  int group = sip__grpc_method_group(c->method->path);
  if (group == SIP__AUTH_OPEN) return NULL;
  const sip__auth_t *a = &c->g->cfg->auth;
  const char *token = NULL;
  size_t len = 0;
  char value[4200];
  for (size_t i = 0; i < c->md.count; i++) {
    grpc_slice k = c->md.metadata[i].key, v = c->md.metadata[i].value;
    if (GRPC_SLICE_LENGTH(k) != 13 || memcmp(GRPC_SLICE_START_PTR(k), "authorization", 13)) continue;
    size_t n = GRPC_SLICE_LENGTH(v);
    if (n >= sizeof value) n = sizeof value - 1;
    memcpy(value, GRPC_SLICE_START_PTR(v), n);
    value[n] = '\0';
    token = sip__auth_bearer(value, &len);
    if (!token) token = "", len = 0; /* present but not Bearer: a wrong credential */
    break;
  }
  char *peer = grpc_call_get_peer(c->call);
  bool local = peer_is_local(peer);
  gpr_free(peer);
  const char *what = sip__auth_group_name(group);
  switch (sip__auth_check(a, group, token, len, local)) {
  case SIP__AUTH_OK:
    return NULL;
  case SIP__AUTH_MISSING:
    return sip_error_new(SIP_UNAUTHENTICATED, "%s calls need a bearer token on this server; "
                         "expected 'authorization: Bearer TOKEN' metadata with a token of "
                         "server.auth.%s_tokens", what, what);
  case SIP__AUTH_BAD_TOKEN:
    sip__log(SIP__LOG_WARN, "grpc authentication failed", "group=%s", what);
    return sip_error_new(SIP_UNAUTHENTICATED, "the bearer token is not valid for %s calls; "
                         "expected a token of server.auth.%s_tokens", what, what);
  case SIP__AUTH_NOT_LOCAL:
    return sip_error_new(SIP_PERMISSION_DENIED, "%s calls are accepted only from loopback "
                         "unless server.auth.%s_tokens is set", what, what);
  }
  return NULL;
}
