/* sip — the runtime state checkpoint (server.state_dir/state.json): the
 * changes made while serving that a restart must not forget. Today: which
 * repository models were loaded or unloaded on request, and the Triton
 * model config a load carried; and the pools changed at run time: their
 * size, quotas and sessions taken out of service. The document has a
 * format version; sections this version does not know are kept as read and
 * written back.
 *
 * The file is replaced atomically (write a temporary file, fsync, rename,
 * fsync the directory): after a crash it is the old or the new state, never
 * a mix. A file that cannot be used (not JSON, not a sip state, another
 * format version) is moved aside and the server starts from its config.
 * Format: docs/internals/state.md. */
#ifndef SIP_SERVER_STATE_H
#define SIP_SERVER_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "sip/error.h"

#define SIP__STATE_FILE "state.json"
#define SIP__STATE_FORMAT "sip-state"
#define SIP__STATE_VERSION 1

typedef struct sip__state sip__state_t;

/* An empty state; NULL when out of memory. */
sip__state_t *sip__state_new(void);
void sip__state_free(sip__state_t *st);

/* Parses a state document of `len` bytes (need not be NUL-terminated). On
 * success *out is owned by the caller. Errors: INVALID_ARGUMENT naming what
 * is wrong (not JSON, not a sip state, a malformed entry),
 * FAILED_PRECONDITION for another format version. */
sip_error_t *sip__state_parse(const char *text, size_t len, sip__state_t **out);
/* The document as JSON text (owned, free with sip_free); NULL on OOM. */
char *sip__state_dump(const sip__state_t *st);

/* Repository models the state records, in name order. */
size_t sip__state_model_count(const sip__state_t *st);
/* Model i: its name (borrowed), whether it was left loaded, and the model
 * config text its load carried (borrowed; NULL: none). */
const char *sip__state_model_at(const sip__state_t *st, size_t i, int *loaded,
                                const char **config);
/* Records that `name` was loaded (with `config`, copied; NULL: none) or
 * unloaded. Errors: out of memory. */
sip_error_t *sip__state_set_model(sip__state_t *st, const char *name, int loaded,
                                  const char *config);

/* A pool's run-time settings (sip pool update, sip session drain). */
typedef struct sip__state_pool {
  int pool_size;            /* 0: not changed */
  int64_t max_memory_mb;    /* -1: not changed; 0: unlimited */
  int max_compute_percent;  /* -1: not changed; 0: unset */
  uint64_t drained[4];      /* bit i: session i out of service (0..255) */
} sip__state_pool_t;

/* Pools the state records, in name order. */
size_t sip__state_pool_count(const sip__state_t *st);
/* Pool i: its name (borrowed) and settings. */
const char *sip__state_pool_at(const sip__state_t *st, size_t i, sip__state_pool_t *out);
/* Records `name`'s settings (copied); NULL forgets them (the pool was
 * reloaded from its config). Errors: out of memory. */
sip_error_t *sip__state_set_pool(sip__state_t *st, const char *name,
                                 const sip__state_pool_t *settings);

/* Creates `dir` when it does not exist. Errors: it cannot be created or
 * is not a writable directory (FAILED_PRECONDITION naming
 * server.state_dir). */
sip_error_t *sip__state_dir_check(const char *dir);

/* Reads <dir>/state.json into *out (owned; empty when there is no file),
 * creating `dir` when it does not exist. A file that cannot be used is
 * renamed <dir>/state.json.corrupt-<unix seconds>, with an ERROR log line
 * saying why and where it went, and *out is empty. Errors: the directory
 * cannot be created or read (FAILED_PRECONDITION, with the reason). */
sip_error_t *sip__state_open(const char *dir, sip__state_t **out);
/* Writes `st` to <dir>/state.json atomically. Errors: I/O (INTERNAL, with
 * the file and the reason); the previous file then stays. */
sip_error_t *sip__state_save(const char *dir, const sip__state_t *st);

#endif
