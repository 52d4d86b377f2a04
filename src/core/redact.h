/* sip — keeping the server's own directories out of its answers
 * (docs/security.md). The server registers the directories its files live
 * in (the model repository, the config file's directory, the state
 * directory, each model's directory, the working directory); answers
 * (error messages, model metadata and config, status JSON) then show paths
 * under them relative to them: "/srv/models/resnet/1/model.bin" becomes
 * "resnet/1/model.bin". The log keeps the full paths. Process-wide (a
 * client library in the same process registers nothing); thread-safe. */
#ifndef SIP_CORE_REDACT_H
#define SIP_CORE_REDACT_H

#include <stddef.h>

/* Adds a directory (an absolute path; its realpath is added too). Relative
 * paths, "/" and NULL are ignored. Returns 0, or -1 out of memory. */
int sip__redact_add_dir(const char *dir);
/* Adds the directory part of a file's path (as sip__redact_add_dir). */
int sip__redact_add_parent(const char *file);
/* Forgets every directory (tests). */
void sip__redact_reset(void);

/* `s` (n bytes, need not be NUL-terminated) with every registered
 * directory removed from the paths in it ("DIR/x" -> "x", "DIR" alone ->
 * "."): owned (sip__malloc'd, NUL-terminated, *out_n bytes), or NULL when
 * nothing in `s` needed it (or out of memory), so the caller uses `s`. */
char *sip__redacted(const char *s, size_t n, size_t *out_n);

/* A path as answers show it: a pointer into `path` past the longest
 * registered directory that holds it (and the '/'), or `path` itself. NULL
 * stays NULL. */
const char *sip__redact_path(const char *path);

#endif
