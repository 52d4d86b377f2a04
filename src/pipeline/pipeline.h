/* sip — pipelines: declarative DAGs of model stages (run on pools) and
 * transform stages (run inline, or on a few workers when they start a
 * request), with conditions and early exit.
 * docs/pipelines.md is the user's reference. */
#ifndef SIP_PIPELINE_H
#define SIP_PIPELINE_H

#include <jansson.h>

#include "config/config.h"
#include "session/engine.h"
#include "sip/server.h"

typedef struct sip__pipeline_set sip__pipeline_set_t;

/* The config's pipelines, each listed in the engine's registry as a model
 * (LOADING: requests hear that the server is still loading) until
 * sip__pipelines_build. NULL only when out of memory. */
sip__pipeline_set_t *sip__pipelines_new(struct sip__engine *eng, const sip__config_t *cfg);
/* Builds every pipeline once the pools have loaded: wires each stage's
 * inputs (input_mapping, or by default the previous stage's outputs / the
 * pipeline's inputs), checks names against the pools' and transforms'
 * inputs and outputs. A pipeline that cannot be built is FAILED with the
 * reason (like a pool); the others serve. */
void sip__pipelines_build(sip__pipeline_set_t *ps);
/* Stops taking transform stages for the workers and waits until those
 * queued have run (their answers go out while the transports are still up);
 * later submissions run those stages on the caller's thread. NULL: no-op. */
void sip__pipelines_quiesce(sip__pipeline_set_t *ps);
/* Waits until every pipeline request admitted has been answered, or until
 * `deadline_us` (sip__now_us clock) passes. A drain calls it with new
 * requests refused, before its pools stop admitting: stages of runs in
 * flight still reach their pools. NULL: no-op. */
void sip__pipelines_wait_runs(sip__pipeline_set_t *ps, uint64_t deadline_us);
void sip__pipelines_free(sip__pipeline_set_t *ps);

/* Whether the pipelines whose stages run on pool `name` can go on with `io`
 * (its new version's inputs and outputs; NULL: the pool goes away): NULL
 * when they can (they follow the new version), else why not, naming the
 * pipeline and stage (owned). Pipelines not READY are not checked. */
char *sip__pipelines_check_pool(const sip__pipeline_set_t *ps, const char *name,
                                const sip__model_io_t *io);

/* NOT_FOUND for a request that names a version of pipeline `name`. */
sip_error_t *sip__pipeline_version_error(const char *name, const char *version);

/* One pipeline's counters read at one instant (the status document and
 * /metrics report them). Names stay valid while the set lives. */
typedef struct sip__pipeline_counters {
  const char *name;
  sip__model_state_t state;
  uint64_t by_code[SIP_CODE_COUNT_]; /* requests answered, by result code */
  uint64_t early_exits;
  uint64_t ok_us, fail_us; /* cumulative arrival-to-answer time of OK / failed requests */
  uint64_t last_ms;        /* wall clock of the last answer */
  size_t n_stages;
} sip__pipeline_counters_t;
typedef struct sip__stage_counters {
  const char *name;
  uint64_t ran, skipped, failed, total_us;
} sip__stage_counters_t;
/* Pipeline `i` (< count) as a model, and its config (both live as long as
 * the set). */
sip__model_t *sip__pipelines_model(const sip__pipeline_set_t *ps, size_t i);
const sip__pipeline_config_t *sip__pipelines_config(const sip__pipeline_set_t *ps, size_t i);
/* How many pipelines the set has (0 for NULL). */
size_t sip__pipelines_count(const sip__pipeline_set_t *ps);
/* Pipeline `i` (< count) and its stage `k` (< n_stages). */
void sip__pipelines_counters(const sip__pipeline_set_t *ps, size_t i, sip__pipeline_counters_t *out);
void sip__pipelines_stage_counters(const sip__pipeline_set_t *ps, size_t i, size_t k,
                                   sip__stage_counters_t *out);

/* Pipelines for the pools (kind SIP_INFO_POOLS: inputs/outputs as
 * {name, dtype, shape} objects taken from the stages that consume each
 * pipeline input and produce each output, and stages) and
 * status (SIP_INFO_STATUS: counters per pipeline and stage) JSON. */
json_t *sip__pipelines_json(const sip__pipeline_set_t *ps, int kind);

#endif
