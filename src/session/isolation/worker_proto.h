/* sip — the messages between the server and a pool's worker process
 * (isolation: process; docs/availability.md, src/session/isolation/isolation.c).
 *
 * Two kinds of channel, both AF_UNIX SOCK_SEQPACKET (one message per
 * send, boundaries kept): the control channel the worker is started with
 * (load, bind a session, heartbeat), and one channel per session that
 * carries its executions. Tensors never travel in messages: they lie in
 * shared-memory regions (memfd, sealed against shrinking) that the server
 * creates per session and passes once over the session's channel
 * (SCM_RIGHTS, attached to the first execution that uses them); messages
 * carry offsets into them. Both ends run the same binary, so structs go as
 * they are. */
#ifndef SIP_SESSION_WORKER_PROTO_H
#define SIP_SESSION_WORKER_PROTO_H

#include <stdint.h>

#include "sip/backend.h"
#include "sip/error.h"
#include "sip/tensor.h"

#define SIP__WK_MAX_IO 64
#define SIP__WK_MAX_MSG 65536 /* largest control message (load: path, options) */

enum {
  SIP__WK_LOAD = 1, /* server → worker: sip__wk_load_t + strings */
  SIP__WK_LOADED,   /* sip__wk_loaded_t + io descriptions */
  SIP__WK_ERROR,    /* sip__wk_error_t + message */
  SIP__WK_BIND,     /* sip__wk_bind_t, with the session channel's fd */
  SIP__WK_BOUND,    /* sip__wk_hdr_t */
  SIP__WK_PING,     /* sip__wk_hdr_t */
  SIP__WK_PONG,     /* sip__wk_hdr_t */
  SIP__WK_EXEC,     /* sip__wk_exec_t + sip__wk_tensor_t[n_in], maybe with a region's fd */
  SIP__WK_DONE,     /* sip__wk_done_t + sip__wk_tensor_t[n_out] + message */
};

typedef struct sip__wk_hdr {
  uint32_t op;
  uint32_t pad;
} sip__wk_hdr_t;

/* Followed by the backend's name, the model path (empty: none) and
 * n_options key/value pairs, each NUL-terminated. */
typedef struct sip__wk_load {
  uint32_t op;
  int32_t intra_op_threads, inter_op_threads, allow_spinning;
  uint32_t n_options;
  uint32_t warm; /* run one execution on zeros after loading (hot_standby) */
  int32_t spin_us; /* how long a session polls for its next execution, 0..1000 us */
  uint32_t pad;
} sip__wk_load_t;

typedef struct sip__wk_error {
  uint32_t op;
  int32_t code; /* sip_code_t */
} sip__wk_error_t;   /* + message, NUL-terminated */

/* Followed by n_in + n_out of: dtype, rank, dims, then the name
 * (NUL-terminated, padded to 8 bytes); then the batch problem (empty:
 * none), NUL-terminated. */
typedef struct sip__wk_loaded {
  uint32_t op;
  uint32_t n_in, n_out;
  uint32_t pad;
} sip__wk_loaded_t;

typedef struct sip__wk_desc {
  int32_t dtype, rank;
  int64_t dims[SIP_MAX_RANK];
  uint32_t name_len; /* with its NUL and padding */
  uint32_t pad;
} sip__wk_desc_t;

typedef struct sip__wk_bind {
  uint32_t op;
  uint32_t session; /* the server's id for it (logs) */
} sip__wk_bind_t;

/* One tensor in a region: `index` is the model's input or output number
 * (describe order). */
typedef struct sip__wk_tensor {
  int32_t index, dtype, rank, pad;
  int64_t dims[SIP_MAX_RANK];
  uint64_t off, nbytes;
} sip__wk_tensor_t;

/* An execution: inputs in region `region` (its size now region_size; a fd
 * attached when the worker does not have it yet), the outputs wanted by
 * index. `fault` (sip__fault_kind_t) is an injected fault to take. */
typedef struct sip__wk_exec {
  uint32_t op;
  int32_t region;
  uint64_t region_size;
  uint64_t out_at; /* where outputs may go: the first byte past the inputs */
  int32_t fault;
  int32_t n_in, n_out, pad;
  int64_t fault_delay_ms;
  int32_t out_index[SIP__WK_MAX_IO];
} sip__wk_exec_t;

/* The answer: outputs in the same region (which the worker may have
 * grown to region_size), in the order asked; or code != 0 and a message. */
typedef struct sip__wk_done {
  uint32_t op;
  int32_t code;
  uint64_t region_size;
  int32_t n_out, msg_len;
} sip__wk_done_t;

#define SIP__WK_MAX_REGIONS 9 /* per session: 8 the answers may hold, 1 copied out */
#define SIP__WK_MAX_OPTIONS 64

/* ---- reading them (worker_proto.c); the message need not be aligned ---- */

/* A LOAD message's contents (strings point into the message). */
typedef struct sip__wk_load_args {
  const char *backend, *path; /* path NULL: none */
  sip_kv_t opts[SIP__WK_MAX_OPTIONS];
  uint32_t n_opts;
  int warm;
  int64_t spin_us; /* 0..1000 */
  sip_engine_settings_t settings;
} sip__wk_load_args_t;
/* 0, or -1 when the n bytes at msg are not a well-formed LOAD. */
int sip__wk_parse_load(const char *msg, size_t n, sip__wk_load_args_t *a);
/* The worker's answer to LOAD: the model's n_in inputs then n_out outputs
 * (*descs, owned) and why it cannot batch (*why, owned, or NULL); or the
 * error the worker answered (ERROR) or INTERNAL for a malformed answer. */
sip_error_t *sip__wk_parse_loaded(const char *msg, size_t n, sip_io_desc_t **descs,
                                  size_t *n_in, size_t *n_out, char **why);
/* 0 when the n bytes at msg are a well-formed EXEC for a model of n_ins
 * inputs and n_outs outputs (every input within its region's size). */
int sip__wk_check_exec(const char *msg, size_t n, size_t n_ins, size_t n_outs);
/* 0 when the n bytes at msg are a well-formed DONE: an error (*code set,
 * *text / *text_len its message, within the message) or n_outputs outputs
 * within the region size it names; -1 otherwise. */
int sip__wk_check_done(const char *msg, size_t n, size_t n_outputs, int32_t *code,
                       const char **text, int *text_len);

#endif
