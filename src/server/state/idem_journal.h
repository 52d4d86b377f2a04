/* sip — the idempotency journal (server.state_dir/idempotency.journal): the
 * answers the idempotency caches keep, written as they are kept and before
 * the request is answered, so that a sipd killed and started again still
 * answers a resent request from what the first process computed instead of
 * running it a second time (docs/idempotency.md).
 *
 * The file is the 8 bytes "sipidem1", then records: u32 payload length, u32
 * CRC-32 of the payload, the payload (integers little-endian):
 *   u64 expires (wall clock, us) | u16 n + model | u32 n + key | u32 code |
 *   u64 queue_us, compute_us, total_us | u32 n + message | u32 outputs |
 *   per output: u16 n + name, u32 dtype, u32 rank, i64 dims[rank],
 *               u64 nbytes, the bytes.
 * Each record is one write(2) on a file opened O_APPEND: a process killed
 * at any point leaves whole records in the kernel's page cache (a machine
 * that loses power may lose the last ones: the file is not synced per
 * record). A reader skips a record that is cut short, malformed or whose
 * CRC does not match, and resynchronises on the next whole record whose
 * CRC matches: damage loses only the records it touches. */
#ifndef SIP_SERVER_IDEM_JOURNAL_H
#define SIP_SERVER_IDEM_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "sip/server.h"

#define SIP__JOURNAL_FILE "idempotency.journal"
#define SIP__JOURNAL_MAGIC "sipidem1"

typedef struct sip__journal sip__journal_t;

/* One record, as read: borrowed strings (valid during the callback) and an
 * owned response (the callback takes it). */
typedef void (*sip__journal_fn)(void *ctx, const char *model, const char *key,
                                uint64_t expires_wall_us, sip_response_t *resp);

/* Encodes one record (header included) into *out (owned, sip__free) of
 * *len bytes. Errors: out of memory; INVALID_ARGUMENT for a field too long
 * for its length prefix. */
sip_error_t *sip__journal_encode(const char *model, const char *key, uint64_t expires_wall_us,
                                 const sip_response_t *resp, uint8_t **out, size_t *len);
/* Reads the records of a whole file image `buf` (magic included), calling
 * fn for each whole, valid one, in file order; damaged bytes are skipped up
 * to the next valid record. Returns the bytes of the magic and the valid
 * records (len when nothing was damaged) and sets *why to the first damage
 * seen (static text; NULL: none). A buffer without the magic reads nothing
 * (why says so). */
size_t sip__journal_read(const uint8_t *buf, size_t len, sip__journal_fn fn, void *ctx,
                         const char **why);

/* Opens <dir>/idempotency.journal: reads it (fn gets each record whose
 * expiry is still ahead), then starts it again holding only those (written
 * to a temporary file, synced, renamed over it). Errors: I/O (INTERNAL with
 * the file and the reason). A journal that cannot be read in full is
 * logged, and what could be read is kept. */
sip_error_t *sip__journal_open(const char *dir, sip__journal_fn fn, void *ctx,
                               sip__journal_t **out);
/* Appends one kept answer; returns the journal's size after it (as
 * sip__journal_size). A write that fails is logged (at most once a minute)
 * and dropped: serving goes on. Thread-safe. */
uint64_t sip__journal_append(sip__journal_t *j, const char *model, const char *key,
                         uint64_t expires_wall_us, const sip_response_t *resp);
/* Bytes written since the journal was last started afresh. */
uint64_t sip__journal_size(sip__journal_t *j);
/* Starts the journal again with the records `each` writes through
 * sip__journal_emit (called once, with the journal locked: appends wait);
 * a failure keeps the old file. */
typedef void (*sip__journal_each_fn)(void *ctx, sip__journal_t *j);
void sip__journal_rewrite(sip__journal_t *j, sip__journal_each_fn each, void *ctx);
/* Inside a rewrite: writes one record to the new file. */
void sip__journal_emit(sip__journal_t *j, const char *model, const char *key,
                       uint64_t expires_wall_us, const sip_response_t *resp);
void sip__journal_close(sip__journal_t *j);

#endif
