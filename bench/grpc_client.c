/* A C client for bench/grpc_vs_http.py: ModelInfer calls of the tiny model
 * (x [1,4] FP32 in raw_input_contents) over gRPC's C core, from N threads
 * each with its own channel and one call outstanding, for a fixed time.
 * Prints {"p50_us", "p99_us", "throughput_rps", "requests", "errors"}.
 *
 * usage: bench_grpc_client HOST:PORT MODEL SECONDS CONCURRENCY
 */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grpc_service.pb-c.h"

typedef struct worker {
  const char *addr;
  grpc_slice msg;
  uint64_t end_us, begin_us; /* begin: after the warm-up */
  uint64_t *lat;
  size_t n, cap;
  long errors;
} worker_t;

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* One unary call; 0 when it answered OK. */
static int call_once(grpc_channel *ch, grpc_completion_queue *cq, grpc_slice method,
                     grpc_slice msg) {
  grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL,
                                             gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_byte_buffer *req = grpc_raw_byte_buffer_create(&msg, 1), *resp = NULL;
  grpc_metadata_array init_md, trail_md;
  grpc_metadata_array_init(&init_md);
  grpc_metadata_array_init(&trail_md);
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &resp;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &details;
  int bad = grpc_call_start_batch(call, ops, 6, (void *)1, NULL) != GRPC_CALL_OK;
  if (!bad) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    bad = ev.type != GRPC_OP_COMPLETE || !ev.success || status != GRPC_STATUS_OK || !resp;
  }
  if (resp) grpc_byte_buffer_destroy(resp);
  grpc_byte_buffer_destroy(req);
  grpc_metadata_array_destroy(&init_md);
  grpc_metadata_array_destroy(&trail_md);
  grpc_slice_unref(details);
  grpc_call_unref(call);
  return bad;
}

static void *run(void *arg) {
  worker_t *w = arg;
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(w->addr, cr, NULL);
  grpc_channel_credentials_release(cr);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_slice method = grpc_slice_from_static_string("/inference.GRPCInferenceService/ModelInfer");
  for (int i = 0; i < 100; i++) call_once(ch, cq, method, w->msg); /* warm up */
  w->begin_us = now_us();
  uint64_t t0;
  while ((t0 = now_us()) < w->end_us) {
    w->errors += call_once(ch, cq, method, w->msg);
    if (w->n == w->cap) {
      w->cap = w->cap ? w->cap * 2 : 4096;
      w->lat = realloc(w->lat, w->cap * sizeof *w->lat);
    }
    w->lat[w->n++] = now_us() - t0;
  }
  grpc_channel_destroy(ch);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s HOST:PORT MODEL SECONDS CONCURRENCY\n", argv[0]);
    return 2;
  }
  double seconds = atof(argv[3]);
  int conc = atoi(argv[4]);
  if (seconds <= 0 || conc < 1 || conc > 256) {
    fprintf(stderr, "SECONDS must be > 0 and CONCURRENCY 1..256\n");
    return 2;
  }
  grpc_init();
  Inference__ModelInferRequest r = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor in =
      INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT, *inp = &in;
  int64_t shape[2] = {1, 4};
  float x[4] = {0, 1, 2, 3};
  ProtobufCBinaryData raw = {sizeof x, (uint8_t *)x};
  r.model_name = argv[2];
  in.name = "x";
  in.datatype = "FP32";
  in.shape = shape;
  in.n_shape = 2;
  r.inputs = &inp;
  r.n_inputs = 1;
  r.raw_input_contents = &raw;
  r.n_raw_input_contents = 1;
  grpc_slice msg = grpc_slice_malloc(protobuf_c_message_get_packed_size(&r.base));
  protobuf_c_message_pack(&r.base, GRPC_SLICE_START_PTR(msg));
  worker_t *w = calloc((size_t)conc, sizeof *w);
  pthread_t *th = calloc((size_t)conc, sizeof *th);
  uint64_t end = now_us() + (uint64_t)(seconds * 1e6);
  for (int i = 0; i < conc; i++) {
    w[i].addr = argv[1];
    w[i].msg = msg;
    w[i].end_us = end;
    pthread_create(&th[i], NULL, run, &w[i]);
  }
  size_t total = 0;
  long errors = 0;
  double rps = 0; /* each client's rate over its own measured time */
  for (int i = 0; i < conc; i++) {
    pthread_join(th[i], NULL);
    total += w[i].n;
    errors += w[i].errors;
    if (w[i].end_us > w[i].begin_us) rps += (double)w[i].n * 1e6 / (double)(w[i].end_us - w[i].begin_us);
  }
  uint64_t *all = malloc((total + 1) * sizeof *all);
  size_t k = 0;
  for (int i = 0; i < conc; i++) {
    memcpy(all + k, w[i].lat, w[i].n * sizeof *all);
    k += w[i].n;
    free(w[i].lat);
  }
  qsort(all, total, sizeof *all, cmp_u64);
  printf("{\"p50_us\": %llu, \"p99_us\": %llu, \"throughput_rps\": %.1f, \"requests\": %zu, "
         "\"errors\": %ld}\n",
         total ? (unsigned long long)all[total / 2] : 0ULL,
         total ? (unsigned long long)all[total * 99 / 100] : 0ULL, rps, total,
         errors);
  free(all);
  free(w);
  free(th);
  grpc_slice_unref(msg);
  grpc_shutdown_blocking();
  return errors ? 1 : 0;
}
