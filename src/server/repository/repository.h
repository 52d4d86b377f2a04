/* sip — model repository helpers that are pure functions (unit-tested in
 * tests/unit/server/test_repository.c). */
#ifndef SIP_REPOSITORY_H
#define SIP_REPOSITORY_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "sip/error.h"

/* Checks a model name from a request before it is joined to the repository
 * path: 1..128 bytes of [A-Za-z0-9_.-], not starting with '.' (so neither
 * "." nor ".." nor a hidden entry), which also excludes '/', absolute paths
 * and NUL (`len` is the name's length as received; a NUL before it is
 * refused). Returns INVALID_ARGUMENT naming the problem, or NULL. */
sip_error_t *sip__repo_check_name(const char *name, size_t len);

/* Applies `policy`'s version_policy to the versions present, `avail` (n,
 * increasing, distinct). `current` (-1: none) is the version a `current`
 * link names; it is served even when the policy leaves it out, since the
 * link is the operator's explicit choice of default. Writes the versions to
 * serve to `out` (room for n + 1, increasing) and returns their count;
 * versions the policy lists as specific but that are absent go to `missing`
 * (room for SIP__MAX_SPECIFIC_VERSIONS), their count to *n_missing. */
size_t sip__repo_select_versions(const sip__pool_config_t *policy, const int64_t *avail, size_t n,
                                 int64_t current, int64_t *out, int64_t *missing,
                                 size_t *n_missing);

#endif
