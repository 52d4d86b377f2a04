/* sip — ModelMesh's model runtime SPI (mmesh.ModelRuntime,
 * proto/mmesh_model_runtime.proto) on the gRPC port: ModelMesh loads, sizes
 * and unloads models through it and forwards inference with the model id
 * in `mm-model-id` metadata (infer.c), so sip needs no adapter beside it.
 *
 * A model id becomes a repository model name (sip__grpc_mmesh_name); a load
 * imports the files ModelMesh fetched into the repository
 * (sip_server_import_model_async), an unload removes them again. Sizes are
 * the memory the model's pools measured when they loaded (memory_bytes);
 * the capacity is what models may take in all (sip__server_memory:
 * server.memory_budget_mb when set). docs/grpc.md
 * ("ModelMesh model runtime") documents it. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grpc/grpc_impl.h"
#include "mmesh_model_runtime.pb-c.h"
#include "server/introspect.h"

/* ModelMesh gives up on a load after this; sip sets no limit of its own. */
#define LOAD_TIMEOUT_MS 600000u
/* What "most" models stay under, before ModelMesh has seen their size. */
#define DEFAULT_MODEL_BYTES (UINT64_C(128) << 20)
/* predictModelSize: a model's memory once loaded against its files' size
 * (the backend holds the weights once, plus its arenas), and what a
 * session adds whatever the model. */
#define SIZE_FACTOR 2
#define SIZE_EXTRA (UINT64_C(1) << 20)
#define NAME_MAX_LEN 128

/* ---- model ids ------------------------------------------------------------------ */

static int kept(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '-';
}

sip_error_t *sip__grpc_mmesh_name(const char *id, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  if (!id[0])
    return sip_error_new(SIP_INVALID_ARGUMENT, "modelId is empty; expected ModelMesh's model id");
  if (!kept((unsigned char)id[0]))
    return sip_error_new(SIP_INVALID_ARGUMENT, "modelId '%.64s' starts with '%c'; expected a "
                         "letter, digit, '_' or '-' first", id, id[0]);
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
    if (o + 4 > cap || o + (kept(*p) ? 1 : 3) > NAME_MAX_LEN)
      return sip_error_new(SIP_INVALID_ARGUMENT, "modelId '%.64s...' is too long; expected at "
                           "most %d bytes of A-Z a-z 0-9 _ -, each other byte counting 3",
                           id, NAME_MAX_LEN);
    if (kept(*p)) {
      out[o++] = (char)*p;
    } else { /* '.', '/', ':' ... as .HH: no two ids share a name */
      out[o++] = '.';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  out[o] = '\0';
  return NULL;
}

/* ---- sizes ------------------------------------------------------------------------ */

/* The memory the model's served versions measured, and the sessions of its
 * default version; 0 when it serves none. */
static int model_bytes(sip_server_t *s, const char *name, uint64_t *bytes, uint32_t *sessions) {
  size_t n = 0;
  sip__model_view_t *v = sip__server_models(s, &n);
  int found = 0;
  *bytes = 0;
  if (sessions) *sessions = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i].is_pipeline || strcmp(v[i].name, name)) continue;
    found = 1;
    *bytes += v[i].stats.memory_bytes;
    if (sessions && (v[i].is_default || !*sessions)) *sessions = (uint32_t)v[i].pool_size;
  }
  sip__server_models_free(v, n);
  return found;
}

/* The size of the regular files at `path`, three directory levels deep. */
static uint64_t disk_bytes(const char *path, int depth) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (S_ISREG(st.st_mode)) return (uint64_t)st.st_size;
  if (!S_ISDIR(st.st_mode) || depth > 3) return 0;
  uint64_t sum = 0;
  DIR *d = opendir(path);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char *p = sip__asprintf("%s/%s", path, de->d_name);
    if (p) sum += disk_bytes(p, depth + 1);
    sip__free(p);
  }
  if (d) closedir(d);
  return sum;
}

/* ---- the RPCs ------------------------------------------------------------------- */

typedef struct mm_load {
  sip__gcall_t *c;
  char name[NAME_MAX_LEN + 1];
} mm_load_t;

static void on_loaded(sip_error_t *e, void *user) {
  mm_load_t *q = user;
  Mmesh__LoadModelResponse r = MMESH__LOAD_MODEL_RESPONSE__INIT;
  if (!e && !model_bytes(q->c->g->s, q->name, &r.sizeinbytes, &r.maxconcurrency))
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' loaded but was unloaded before its size "
                      "was read", q->name);
  sip__grpc_reply(q->c, e, &r.base);
  sip__grpc_call_unref(q->c);
  sip__free(q);
}

void sip__grpc_mmesh_load(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Mmesh__LoadModelRequest *q = (const void *)req;
  mm_load_t *l = sip__calloc(1, sizeof *l);
  sip_error_t *e = l ? sip__grpc_mmesh_name(q->modelid, l->name, sizeof l->name) : SIP__OOM();
  if (!e && !q->modelpath[0])
    e = sip_error_new(SIP_INVALID_ARGUMENT, "modelPath is empty; expected the path of the "
                      "model's files");
  if (!e) {
    l->c = c;
    sip__grpc_call_ref(c);
    e = sip_server_import_model_async(c->g->s, l->name, q->modelpath, on_loaded, l);
    if (e) sip__grpc_call_unref(c); /* never the last: the caller holds one */
  }
  if (e) {
    sip__free(l);
    sip__grpc_reply(c, e, NULL);
  }
}

/* An unload, or runtimeStatus's removal of every imported model. */
static void on_removed(sip_error_t *e, void *user);

static void remove_model(sip__gcall_t *c, const char *name) {
  sip__grpc_call_ref(c);
  sip_error_t *e = sip_server_remove_model_async(c->g->s, name, on_removed, c);
  if (e) {
    sip__grpc_call_unref(c); /* never the last: the caller holds one */
    sip__grpc_reply(c, e, NULL);
  }
}

void sip__grpc_mmesh_unload(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Mmesh__UnloadModelRequest *q = (const void *)req;
  char name[NAME_MAX_LEN + 1];
  sip_error_t *e = sip__grpc_mmesh_name(q->modelid, name, sizeof name);
  if (e) sip__grpc_reply(c, e, NULL);
  else remove_model(c, name);
}

void sip__grpc_mmesh_predict(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Mmesh__PredictModelSizeRequest *q = (const void *)req;
  char name[NAME_MAX_LEN + 1];
  struct stat st;
  Mmesh__PredictModelSizeResponse r = MMESH__PREDICT_MODEL_SIZE_RESPONSE__INIT;
  sip_error_t *e = sip__grpc_mmesh_name(q->modelid, name, sizeof name);
  if (!e && !q->modelpath[0])
    e = sip_error_new(SIP_INVALID_ARGUMENT, "modelPath is empty; expected the path of the "
                      "model's files");
  else if (!e && stat(q->modelpath, &st) != 0)
    e = sip_error_new(SIP_NOT_FOUND, "modelPath %s does not exist; expected the path of the "
                      "model's files", q->modelpath);
  if (!e) r.sizeinbytes = SIZE_FACTOR * disk_bytes(q->modelpath, 0) + SIZE_EXTRA;
  sip__grpc_reply(c, e, &r.base);
}

void sip__grpc_mmesh_size(sip__gcall_t *c, const ProtobufCMessage *req) {
  const Mmesh__ModelSizeRequest *q = (const void *)req;
  char name[NAME_MAX_LEN + 1];
  Mmesh__ModelSizeResponse r = MMESH__MODEL_SIZE_RESPONSE__INIT;
  sip_error_t *e = sip__grpc_mmesh_name(q->modelid, name, sizeof name);
  if (!e && !model_bytes(c->g->s, name, &r.sizeinbytes, NULL))
    e = sip_error_new(SIP_NOT_FOUND, "model '%s' is not loaded", q->modelid);
  sip__grpc_reply(c, e, &r.base);
}

typedef Mmesh__RuntimeStatusResponse status_t;

static void status_reply(sip__gcall_t *c, sip_error_t *e, int ready) {
  status_t r = MMESH__RUNTIME_STATUS_RESPONSE__INIT;
  Mmesh__RuntimeStatusResponse__MethodInfo info = MMESH__RUNTIME_STATUS_RESPONSE__METHOD_INFO__INIT;
  Mmesh__RuntimeStatusResponse__MethodInfosEntry ent[2] = {
      MMESH__RUNTIME_STATUS_RESPONSE__METHOD_INFOS_ENTRY__INIT,
      MMESH__RUNTIME_STATUS_RESPONSE__METHOD_INFOS_ENTRY__INIT};
  Mmesh__RuntimeStatusResponse__MethodInfosEntry *entp[2] = {&ent[0], &ent[1]};
  uint32_t name_field = 1; /* model_name of ModelInferRequest, name of ModelMetadataRequest */
  info.idinjectionpath = &name_field;
  info.n_idinjectionpath = 1;
  ent[0].key = "inference.GRPCInferenceService/ModelInfer";
  ent[1].key = "inference.GRPCInferenceService/ModelMetadata";
  ent[0].value = ent[1].value = &info;
  r.status = ready ? MMESH__RUNTIME_STATUS_RESPONSE__STATUS__READY
                   : MMESH__RUNTIME_STATUS_RESPONSE__STATUS__STARTING;
  sip__server_memory_t mem; /* the budget when set, else what the machine gives */
  sip__server_memory(c->g->s, &mem);
  r.capacityinbytes = mem.capacity;
  r.maxloadingconcurrency = 1; /* one loader thread */
  r.modelloadingtimeoutms = LOAD_TIMEOUT_MS;
  r.defaultmodelsizeinbytes = DEFAULT_MODEL_BYTES;
  r.runtimeversion = (char *)sip_version();
  r.numericruntimeversion = (uint64_t)sip_api_version();
  r.methodinfos = entp;
  r.n_methodinfos = 2;
  r.limitmodelconcurrency = 0;
  r.allowanymethod = 0;
  sip__grpc_reply(c, e, &r.base);
}

static void on_removed(sip_error_t *e, void *user) {
  sip__gcall_t *c = user;
  if (c->method->req == &mmesh__runtime_status_request__descriptor) {
    status_reply(c, e, 1);
  } else {
    Mmesh__UnloadModelResponse r = MMESH__UNLOAD_MODEL_RESPONSE__INIT;
    sip__grpc_reply(c, e, &r.base);
  }
  sip__grpc_call_unref(c);
}

/* STARTING until the server is ready (its models loaded); then, as the SPI
 * asks before READY, every model imported earlier is removed (ModelMesh
 * restarted and no longer knows them). */
void sip__grpc_mmesh_status(sip__gcall_t *c, const ProtobufCMessage *req) {
  (void)req;
  if (!sip_server_ready(c->g->s) || sip_server_draining(c->g->s)) status_reply(c, NULL, 0);
  else remove_model(c, "");
}
