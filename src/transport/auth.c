/* sip — the native protocol's authentication (docs/security.md): which API
 * group each message belongs to, the AUTH message that opens groups for the
 * rest of a connection, and the check in front of every other message. A
 * connection starts with the groups that are open to it (every group when
 * no tokens are configured; management only for local peers); AUTH with a
 * token adds the groups that token opens. A message of a group the
 * connection has not opened gets an ERROR (UNAUTHENTICATED, or
 * PERMISSION_DENIED for management from a remote peer with no management
 * tokens configured) and the connection is closed.
 */
#include <jansson.h>
#include <string.h>

#include "core/auth.h"
#include "core/core.h"
#include "transport/frame.h"
#include "transport/listener_impl.h"

/* The group of the frame being handled (SIP__AUTH_OPEN: no check). */
static int frame_group(const sip__conn_t *c) {
  switch (c->h.type) {
  case SIP__MSG_INFER_REQUEST:
  case SIP__MSG_BATCH_INFER_REQUEST:
  case SIP__MSG_SHM_REGISTER:
  case SIP__MSG_SHM_UNREGISTER:
  case SIP__MSG_SHM_STATUS:
    return SIP__AUTH_INFERENCE;
  case SIP__MSG_REPO_REQUEST:
  case SIP__MSG_ADMIN_REQUEST:
    return SIP__AUTH_MANAGEMENT;
  case SIP__MSG_SUBSCRIBE:
    return SIP__AUTH_METRICS;
  case SIP__MSG_INFO_REQUEST: {
    /* 1 ready: open (health); 2 pools: inference (metadata); 3 status: metrics.
     * A malformed payload is handle_info's to refuse. */
    const uint8_t *p = c->payload ? sip_buf_data(c->payload) : NULL;
    if (c->h.length != 1 || !p) return SIP__AUTH_OPEN;
    return p[0] == SIP_INFO_POOLS ? SIP__AUTH_INFERENCE
           : p[0] == SIP_INFO_STATUS ? SIP__AUTH_METRICS
                                     : SIP__AUTH_OPEN;
  }
  default:
    return SIP__AUTH_OPEN;
  }
}

void sip__conn_auth_init(sip__listener_set_t *ls, sip__conn_t *c, bool local) {
  c->local = local;
  c->groups = sip__auth_groups(ls->auth, NULL, 0, local);
}

/* AUTH: the whole payload is the token. */
static void handle_auth(sip__listener_set_t *ls, sip__conn_t *c) {
  const char *tok = c->payload ? (const char *)sip_buf_data(c->payload) : "";
  size_t len = c->h.length;
  unsigned got = 0;
  for (int g = 0; g < SIP__AUTH_GROUPS; g++)
    if (ls->auth && ls->auth->n_tokens[g] && sip__auth_token_ok(ls->auth, g, tok, len))
      got |= 1u << g;
  if (sip__auth_enabled(ls->auth) && !got) {
    sip__log(SIP__LOG_WARN, "native authentication failed", "peer=%s",
             c->local ? "local" : "remote");
    sip__conn_error(ls, c, c->h.request_id,
                    sip_error_new(SIP_UNAUTHENTICATED, "AUTH: the token is not valid for any "
                                  "API group; expected a token of server.auth"));
    return;
  }
  c->groups |= got;
  json_t *groups = json_array();
  for (int g = 0; g < SIP__AUTH_GROUPS; g++)
    if (c->groups & (1u << g)) json_array_append_new(groups, json_string(sip__auth_group_name(g)));
  json_t *ok = json_pack("{s:b,s:o}", "authenticated", 1, "groups", groups);
  char *txt = ok ? json_dumps(ok, JSON_COMPACT) : NULL;
  json_decref(ok);
  sip__wbuf_t w = {0};
  if (txt) sip__encode_info_response(&w, c->h.request_id, SIP_OK, txt, strlen(txt));
  else sip__encode_info_response(&w, c->h.request_id, SIP_RESOURCE_EXHAUSTED, "{}", 2);
  free(txt); /* jansson's allocation */
  sip__conn_queue_wbuf(ls, c, &w);
}

int sip__conn_authorize(sip__listener_set_t *ls, sip__conn_t *c) {
  if (c->h.type == SIP__MSG_AUTH) {
    handle_auth(ls, c);
    return 0;
  }
  int g = frame_group(c);
  if (g == SIP__AUTH_OPEN || (c->groups & (1u << g))) return 1;
  sip_error_t *e;
  if (g == SIP__AUTH_MANAGEMENT && !(ls->auth && ls->auth->n_tokens[g]))
    e = sip_error_new(SIP_PERMISSION_DENIED, "%s requests are accepted only from local peers "
                      "(a unix socket or loopback) unless server.auth.management_tokens is set",
                      sip__auth_group_name(g));
  else
    e = sip_error_new(SIP_UNAUTHENTICATED, "%s requests need a token on this server; expected "
                      "an AUTH (14) message with a token of server.auth.%s_tokens (or a "
                      "management token) first", sip__auth_group_name(g), sip__auth_group_name(g));
  sip__conn_error(ls, c, c->h.request_id, e);
  return 0;
}
