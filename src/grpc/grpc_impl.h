/* sip — what the gRPC front-end's files share: the front-end's state, one
 * call's state, the method table's entries and the calls between them.
 * Private to src/grpc/ (grpc_frontend.h is the layer's interface).
 *
 *   server.c  lifecycle, the completion-queue threads, accepting calls,
 *             the method table and the answers
 *   infer.c   ModelInfer and ModelStreamInfer
 *   rpcs.c    every other RPC: health, metadata, statistics, repository,
 *             shared memory, trace and log settings; the method table
 *   model_config.c  ModelConfig
 *   mmesh.c   ModelMesh's model runtime SPI (mmesh.ModelRuntime)
 *   codec.c   protobuf-c helpers and the inference decoder (grpc_frontend.h)
 *   encode.c  the inference answers (grpc_frontend.h)
 */
#ifndef SIP_GRPC_IMPL_H
#define SIP_GRPC_IMPL_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "config/config.h"
#include "core/core.h"
#include "grpc/grpc_frontend.h"

typedef struct sip__grpc sip__grpc_t;
typedef struct sip__gcall sip__gcall_t;

/* Every completion-queue tag: what to run when its operation completes. */
typedef struct sip__gtag {
  void (*fn)(struct sip__gtag *t, int ok);
} sip__gtag_t;

struct sip__grpc {
  sip_server_t *s;
  const sip__config_t *cfg;
  grpc_server *server;
  grpc_completion_queue *cq;
  pthread_t *threads;
  int n_threads;
  char address[300];
  sip__gtag_t shutdown_tag;
  pthread_mutex_t mu; /* with cv: stop waits for the server's shutdown */
  pthread_cond_t cv;
  int down;
  /* The version each model serves by default, for model_version in
   * answers to requests that named none (infer.c); emptied when the
   * server's models change (sip_server_generation). Under mu. */
  struct vcache *vcache;
  uint64_t vgen;
};

/* One RPC method. Unary methods get their request unpacked (`req`
 * descriptor) and answer with sip__grpc_reply; `raw` ones take the
 * serialized message; `stream` ones are ModelStreamInfer. */
typedef struct sip__gmethod {
  const char *path;
  const ProtobufCMessageDescriptor *req;
  void (*unary)(sip__gcall_t *c, const ProtobufCMessage *req);
  void (*raw)(sip__gcall_t *c, const uint8_t *data, size_t len, sip_buf_t *backing);
  int stream;
} sip__gmethod_t;

/* A queued stream answer. */
typedef struct sip__gout {
  grpc_byte_buffer *bb;
  struct sip__gout *next;
} sip__gout_t;

struct sip__gcall {
  sip__gtag_t accept_tag, recv_tag, send_tag, close_tag;
  sip__grpc_t *g;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
  grpc_byte_buffer *recv;  /* the message RECV_MESSAGE got */
  grpc_byte_buffer *sent;  /* the message being sent */
  grpc_slice status_details;
  int has_details;
  int cancelled;           /* RECV_CLOSE_ON_SERVER: the call was cancelled */
  atomic_int refs;
  const sip__gmethod_t *method;
  uint64_t deadline_us;    /* monotonic; 0: none */
  sip_cancel_token_t *cancel;
  /* ModelStreamInfer: answers are sent one at a time, in completion order. */
  pthread_mutex_t mu;
  sip__gout_t *out_head, *out_tail;
  int closed; /* the close arrived (under mu): cancel what is submitted later */
  int sending, md_sent, half_closed, status_sent, failed;
  long inflight;
};

/* ---- server.c ----------------------------------------------------------- */

/* Answers a unary call: `err` (consumed) as the status, else OK with `resp`
 * (may be NULL for an empty message). Exactly once per unary call. */
void sip__grpc_reply(sip__gcall_t *c, sip_error_t *err, const ProtobufCMessage *resp);
/* The same with an already serialized message (owned, sip__malloc). */
void sip__grpc_reply_bytes(sip__gcall_t *c, sip_error_t *err, uint8_t *msg, size_t len);
/* A reference to the call, for answers that come later. */
void sip__grpc_call_ref(sip__gcall_t *c);
void sip__grpc_call_unref(sip__gcall_t *c);
/* Milliseconds left until the call's deadline: 0 when none, -1 when
 * already past. */
int64_t sip__grpc_timeout_ms(const sip__gcall_t *c);
/* A byte buffer of one slice owning `msg` (sip__malloc'd); NULL on OOM
 * (msg freed). */
grpc_byte_buffer *sip__grpc_bytes(uint8_t *msg, size_t len);

/* ---- infer.c ------------------------------------------------------------ */

/* `backing` holds data (NULL: nothing does past the call). */
void sip__grpc_infer(sip__gcall_t *c, const uint8_t *data, size_t len, sip_buf_t *backing);
/* Empties the default-version cache (at stop). */
void sip__grpc_vcache_clear(sip__grpc_t *g);
/* One message of a ModelStreamInfer call (NULL data: the client closed its
 * side). */
void sip__grpc_stream_message(sip__gcall_t *c, const uint8_t *data, size_t len, sip_buf_t *backing,
                              int closed);
/* A stream answer finished sending (ok: it was sent). */
void sip__grpc_stream_sent(sip__gcall_t *c, int ok);

/* ---- rpcs.c ------------------------------------------------------------- */

/* auth.c: a method's API group (core/auth.h), and the check of a call's
 * bearer token: NULL when it may go on, else the error to answer. */
int sip__grpc_method_group(const char *path);
sip_error_t *sip__grpc_authorize(sip__gcall_t *c);

extern const sip__gmethod_t sip__grpc_methods[];
extern const size_t sip__grpc_n_methods;

struct sip__model_view;
/* The models (*v, *n: owned, sip__server_models_free) and the one asked
 * for (`version` "" is the default), or an error (nothing left owned);
 * `loaded`: metadata and config need its inputs and outputs. */
sip_error_t *sip__grpc_find_model(sip__gcall_t *c, const char *name, const char *version, int loaded,
                                  struct sip__model_view **v, size_t *n,
                                  const struct sip__model_view **m);

/* ---- mmesh.c: ModelMesh's model runtime SPI (mmesh.ModelRuntime) --------- */

void sip__grpc_mmesh_load(sip__gcall_t *c, const ProtobufCMessage *req);
void sip__grpc_mmesh_unload(sip__gcall_t *c, const ProtobufCMessage *req);
void sip__grpc_mmesh_predict(sip__gcall_t *c, const ProtobufCMessage *req);
void sip__grpc_mmesh_size(sip__gcall_t *c, const ProtobufCMessage *req);
void sip__grpc_mmesh_status(sip__gcall_t *c, const ProtobufCMessage *req);
/* The repository model name of ModelMesh model id `id`: bytes of A-Z a-z
 * 0-9 _ - as they are, every other byte as '.' and two lowercase hex
 * digits ("a/b.c" -> "a.2fb.2ec"), so no two ids share a name. Into `out`
 * (`cap` bytes, at least 129). INVALID_ARGUMENT for an empty id, one that
 * starts with a byte that is escaped, or a name over 128 bytes. */
sip_error_t *sip__grpc_mmesh_name(const char *id, char *out, size_t cap);
/* The model a call's `mm-model-id` metadata names (ModelMesh forwarding an
 * inference), mapped as above into `out`; NULL with out[0] = '\0' when the
 * call has none (infer.c). */
sip_error_t *sip__grpc_mm_model(sip__gcall_t *c, char *out, size_t cap);

/* ---- model_config.c ------------------------------------------------------ */

void sip__grpc_model_config(sip__gcall_t *c, const ProtobufCMessage *req);

/* ---- codec.c ------------------------------------------------------------ */

extern ProtobufCAllocator sip__grpc_pb_allocator;
/* Unpacks a message with sip's allocator; NULL when it does not parse. */
ProtobufCMessage *sip__grpc_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                                   size_t len);
void sip__grpc_msg_free(ProtobufCMessage *m);
/* Serializes `m` into an owned buffer (sip__free). */
sip_error_t *sip__grpc_pack(const ProtobufCMessage *m, uint8_t **out, size_t *len);

#endif
