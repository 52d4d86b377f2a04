/* sip — bearer tokens per API group, shared by the three front-ends
 * (docs/security.md).
 *
 * Every request belongs to one group: inference (infer, model metadata,
 * shared memory), management (model repository, admin, log and trace
 * settings, session drain/resume), metrics (/metrics, statistics, events,
 * status), or none (health and readiness: always open). A group with tokens
 * configured takes a request only with one of them; a management token is
 * accepted for every group. A group without tokens is open, except
 * management, which is then open only to local peers (loopback TCP or a
 * unix socket). Tokens are compared in constant time.
 */
#ifndef SIP_CORE_AUTH_H
#define SIP_CORE_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "sip/error.h"
struct sockaddr;

typedef enum sip__auth_group {
  SIP__AUTH_INFERENCE = 0,
  SIP__AUTH_MANAGEMENT = 1,
  SIP__AUTH_METRICS = 2,
  SIP__AUTH_GROUPS,         /* not a group: the number of them */
  SIP__AUTH_OPEN = -1,      /* health and readiness: no check */
} sip__auth_group_t;

/* The tokens of each group (config: server.auth). Owned by the config. */
typedef struct sip__auth {
  char **tokens[SIP__AUTH_GROUPS];
  size_t n_tokens[SIP__AUTH_GROUPS];
} sip__auth_t;

typedef enum sip__auth_verdict {
  SIP__AUTH_OK = 0,
  SIP__AUTH_MISSING,     /* the group needs a token and none came: 401 */
  SIP__AUTH_BAD_TOKEN,   /* a token came that the group does not take: 401 */
  SIP__AUTH_NOT_LOCAL,   /* management without tokens, from a remote peer: 403 */
} sip__auth_verdict_t;

/* Whether a and b hold the same bytes, in time that depends only on their
 * lengths (not on where they differ). */
bool sip__ct_equal(const void *a, size_t an, const void *b, size_t bn);

/* The group's name: "inference", "management", "metrics" ("open" for
 * SIP__AUTH_OPEN). Static storage. */
const char *sip__auth_group_name(int group);

/* Whether any group has tokens. `a` may be NULL (no tokens). */
bool sip__auth_enabled(const sip__auth_t *a);

/* Whether `token` (len bytes) is one of the tokens that open `group`
 * (the group's own, or a management token). Every configured token is
 * compared, so the time taken says nothing about which one matched. */
bool sip__auth_token_ok(const sip__auth_t *a, int group, const char *token, size_t len);

/* The decision for one request of `group` carrying `token` (NULL: none)
 * from a peer that is `local` (loopback or a unix socket). */
sip__auth_verdict_t sip__auth_check(const sip__auth_t *a, int group, const char *token,
                                    size_t len, bool local);

/* The bit mask of groups (1 << group) that `token` opens, open groups
 * included (management's only when `local`). For the native protocol, where
 * a connection authenticates once. */
unsigned sip__auth_groups(const sip__auth_t *a, const char *token, size_t len, bool local);

/* Whether a socket address is local: AF_UNIX, 127.0.0.0/8, ::1 or
 * ::ffff:127.0.0.0/104. NULL: false. */
bool sip__addr_is_local(const struct sockaddr *sa);

/* The token of an "Authorization: Bearer TOKEN" header value (scheme case
 * insensitive, spaces around the token skipped): *len its length. NULL
 * when the value is NULL or not a Bearer credential. */
const char *sip__auth_bearer(const char *value, size_t *len);

/* Reads a PEM file of server.tls (`what`: "cert_file" or "key_file") into
 * an owned NUL-terminated string (at most 1 MiB). UNAVAILABLE saying why. */
sip_error_t *sip__read_pem(const char *path, const char *what, char **out);
/* Wipes and frees a string read by sip__read_pem (NULL: no-op). */
void sip__free_secret(char *s);

#endif
