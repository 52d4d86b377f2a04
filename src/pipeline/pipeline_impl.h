/* sip — the pipeline layer's private state: a built pipeline (its stages,
 * their wiring and typed inputs and outputs), the set of the config's
 * pipelines and its transform workers. Only src/pipeline includes this.
 *
 *   build.c   wiring, checks and typed I/O descriptors; the set's lifetime;
 *             the re-check when a pool that stages use changes
 *   run.c     a request's run: stages launched, finished, answered; the
 *             workers; the model vtable (submit)
 *   status.c  what a pipeline takes and gives, its state, introspection */
#ifndef SIP_PIPELINE_PIPELINE_IMPL_H
#define SIP_PIPELINE_PIPELINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/queue.h"
#include "ops/expr.h"
#include "ops/transforms.h"
#include "pipeline/pipeline.h"
#include "session/registry.h"

#define MAX_STAGES 64
#define MAX_STAGE_INPUTS 64

/* How a wire's tensor is converted for its consumer (default wiring only):
 * an image as a model takes it (float32 NCHW, one image) and as image
 * transforms take it (uint8 HWC). */
typedef enum sip__wire_conv {
  CONV_NONE = 0,
  CONV_NCHW_F32_TO_HWC_U8, /* rounded, saturated to 0..255 */
  CONV_HWC_U8_TO_NCHW_F32, /* [H,W,C] -> [1,C,H,W], values kept */
} sip__wire_conv_t;

typedef struct sip__wire {
  char *name; /* the stage's input */
  int src;    /* -1: a pipeline input; else a stage index */
  char *out;  /* the source's output (or pipeline input) name */
  int conv;   /* sip__wire_conv_t */
} sip__wire_t;

typedef struct sip__stage {
  const sip__stage_config_t *cfg;
  sip__transform_t *tf;
  sip__expr_t *when;
  sip__wire_t *in;
  size_t n_in;
  char **outs; /* what the stage produces (model outputs or the transform's) */
  size_t n_outs;
  sip_io_desc_t *in_desc, *out_desc; /* its inputs' and outputs' descriptors (copies) */
  size_t n_in_desc, n_out_desc;
  int deps[MAX_STAGES];
  size_t n_deps;
  int users[MAX_STAGES];
  size_t n_users;
  atomic_uint_fast64_t ran, skipped, failed, total_us;
} sip__stage_t;

typedef struct sip__pout {
  int stage;
  char *out;  /* the stage's output */
  char *name; /* the name in the response */
} sip__pout_t;

typedef struct sip__pipeline {
  sip__model_t base; /* first: a pipeline is a model (sip__pipeline_vt) */
  struct sip__pipeline_set *ps;
  _Atomic int state; /* sip__model_state_t: LOADING until built, then READY or FAILED */
  const sip__pipeline_config_t *cfg;
  sip__stage_t *st;
  size_t n;
  sip__expr_t *exit;
  char **inputs; /* pipeline.<name> references */
  size_t n_inputs;
  /* The pipeline's inputs and outputs, typed as the stages that read and
   * make them; an input only conditions read has dtype INVALID, rank -1. */
  sip_io_desc_t *io_in, *io_out;
  sip__pout_t *po;
  size_t n_po;
  char *error; /* non-NULL: FAILED */
  atomic_uint_fast64_t by_code[SIP_CODE_COUNT_];
  atomic_uint_fast64_t early_exits;
  /* End-to-end time of answered requests, successful and failed; when the
   * last one arrived (ms since the epoch). */
  atomic_uint_fast64_t ok_us, fail_us, last_ms;
} sip__pipeline_t;

/* A transform stage ready at submission, handed to a worker. */
typedef struct sip__job {
  struct run *r;
  int stage;
  SIP__FIFO_LINK(struct sip__job);
} sip__job_t;

/* The workers' queue of jobs (src/core/queue.h). */
typedef struct sip__job_queue {
  SIP__FIFO_FIELDS(sip__job_t);
} sip__job_queue_t;

#define N_WORKERS 4

struct sip__pipeline_set {
  sip__engine_t *eng; /* its stages find their pools in eng's registry */
  sip__pipeline_t *p;
  size_t n;
  /* Transform stages that are ready when a request arrives (decode_image,
   * resize, ...) would otherwise run on the submitting thread, which is a
   * transport's event loop: a 20 ms decode there stalls every connection.
   * They run on these workers instead; later transforms run on the engine
   * thread that completed their inputs. */
  pthread_mutex_t mu;
  pthread_cond_t cv, idle_cv;
  sip__job_queue_t jobs;
  int busy;   /* jobs being run */
  int closed; /* quiesced: submissions run their stages inline */
  _Atomic long runs; /* requests admitted and not answered (a drain waits for them) */
  pthread_t workers[N_WORKERS];
  int n_workers;
};

/* ---- shared by building and running ---- */

static inline int find_str(char *const *v, size_t n, const char *s) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i], s)) return (int)i;
  return -1;
}

static inline int stage_index(const sip__pipeline_t *pl, const char *name, size_t len) {
  for (size_t i = 0; i < pl->n; i++)
    if (strlen(pl->st[i].cfg->name) == len && !strncmp(pl->st[i].cfg->name, name, len))
      return (int)i;
  return -1;
}

/* Outputs a stage keeps: all it produces, or its output_filter. */
static inline int keeps(const sip__stage_t *s, const char *out) {
  if (find_str(s->outs, s->n_outs, out) < 0) return 0;
  if (!s->cfg->n_output_filter) return 1;
  return find_str(s->cfg->output_filter, s->cfg->n_output_filter, out) >= 0;
}

/* ---- run.c ---- */

/* What every pipeline is to the registry: submit (run.c), describe_io and
 * state (status.c); ref/unref do nothing (pipelines live as long as the
 * engine). */
extern const sip__model_vt_t sip__pipeline_vt;
/* Starts the workers once the set is built, where a transform stage starts
 * a pipeline that built (none otherwise). */
void sip__pipeline_workers_start(sip__pipeline_set_t *ps);

/* ---- status.c ---- */

int sip__pipeline_describe_io(sip__model_t *m, sip__model_io_t *io);
sip__model_state_t sip__pipeline_state(sip__model_t *m, const char **error);

/* request_config.c: a request's own pipeline_config applied to a run of
 * `pl`: its stage time limits replace stage_timeout_ms (MAX_STAGES
 * entries) and its early-exit condition is parsed into *exit (owned),
 * both checked against the pipeline's stages. NULL or an owned
 * INVALID_ARGUMENT error. */
sip_error_t *sip__pipeline_request_config(const sip__pipeline_t *pl, const sip_request_t *req,
                                          uint32_t *stage_timeout_ms, sip__expr_t **exit);

#endif
