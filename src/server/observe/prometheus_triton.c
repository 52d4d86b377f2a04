/* sip — Triton's metric families on /metrics (metrics.triton_names;
 * docs/metrics.md has the mapping). Each nv_* sample is computed from the
 * counters its sip_* family is written from, read once per page by
 * prometheus.c, so the two agree sample for sample. Labels are Triton's:
 * model and version, an unversioned pool or pipeline reporting version "1"
 * (Triton's models always have a numeric version, and a model with one
 * version is conventionally "1"). Pipelines are reported as Triton reports
 * ensembles: requests and their end-to-end time; their queue and compute
 * times are their stages' pools'. */
#include <stdio.h>

#include "server/observe/prometheus_impl.h"

const char *sip__prom_triton_labels(char *out, size_t n, const char *model, const char *version) {
  char e1[300], e2[300];
  snprintf(out, n, "model=\"%s\",version=\"%s\"", sip__prom_esc(e1, sizeof e1, model),
           sip__prom_esc(e2, sizeof e2, version && *version ? version : "1"));
  return out;
}

static uint64_t failures(const uint64_t *by_code) {
  uint64_t f = 0;
  for (int k = 0; k < SIP_CODE_COUNT_; k++)
    if (k != SIP_OK) f += by_code[k];
  return f;
}

enum {
  SUCCESS, FAILURE, COUNT, EXEC, REQUEST_US, QUEUE_US, INPUT_US, INFER_US, OUTPUT_US, PENDING,
  NFAM
};

static const struct {
  const char *name, *type, *help;
  int pipelines; /* also written for pipelines */
} fams[NFAM] = {
    [SUCCESS] = {"nv_inference_request_success", "counter",
                 "Successful inference requests, each counted once whatever its batch size "
                 "(sip_requests_total{code=\"OK\"}).", 1},
    [FAILURE] = {"nv_inference_request_failure", "counter",
                 "Failed inference requests, each counted once whatever its batch size "
                 "(sip_requests_total, every code but OK).", 1},
    [COUNT] = {"nv_inference_count", "counter",
               "Inferences performed, a batch of n counting n (sip_inference_count_total).", 0},
    [EXEC] = {"nv_inference_exec_count", "counter",
              "Model executions, a batch counting once (sip_execution_count_total).", 0},
    [REQUEST_US] = {"nv_inference_request_duration_us", "counter",
                    "Cumulative end-to-end request time in microseconds "
                    "(sip_request_duration_us_total).", 1},
    [QUEUE_US] = {"nv_inference_queue_duration_us", "counter",
                  "Cumulative time requests waited in the queue in microseconds "
                  "(sip_queue_duration_us_total).", 0},
    [INPUT_US] = {"nv_inference_compute_input_duration_us", "counter",
                  "Cumulative time preparing inputs in microseconds "
                  "(sip_compute_input_duration_us_total).", 0},
    [INFER_US] = {"nv_inference_compute_infer_duration_us", "counter",
                  "Cumulative time executing the model in microseconds "
                  "(sip_compute_infer_duration_us_total).", 0},
    [OUTPUT_US] = {"nv_inference_compute_output_duration_us", "counter",
                   "Cumulative time handling outputs in microseconds "
                   "(sip_compute_output_duration_us_total).", 0},
    [PENDING] = {"nv_inference_pending_request_count", "gauge",
                 "Requests queued and not yet running (sip_pending_requests).", 0},
};

/* A pool's sample of family f: counts as integers, times as sip writes
 * them (nanoseconds / 1000 with three decimals). */
static void pool_sample(sip__sb_t *b, int f, const char *labels, const sip__pool_counters_t *c) {
  uint64_t ns = 0, count = 0;
  switch (f) {
  case SUCCESS: count = c->by_code[SIP_OK]; break;
  case FAILURE: count = failures(c->by_code); break;
  case COUNT: count = c->inference_count; break;
  case EXEC: count = c->execution_count; break;
  case PENDING: count = c->queued_total; break;
  case REQUEST_US: ns = c->success.ns + c->fail.ns; break;
  case QUEUE_US: ns = c->queue_stat.ns; break;
  case INPUT_US: ns = c->compute_input.ns; break;
  case INFER_US: ns = c->compute_infer.ns; break;
  case OUTPUT_US: ns = c->compute_output.ns; break;
  }
  if (f >= REQUEST_US && f <= OUTPUT_US)
    sip__sb_add(b, "%s{%s} %.3f\n", fams[f].name, labels, (double)ns / 1000.0);
  else
    sip__sb_add(b, "%s{%s} %llu\n", fams[f].name, labels, (unsigned long long)count);
}

/* A pipeline's: as its sip_pipeline_* families (whole microseconds). */
static void pipeline_sample(sip__sb_t *b, int f, const char *labels,
                            const sip__pipeline_counters_t *pc) {
  uint64_t v = f == SUCCESS   ? pc->by_code[SIP_OK]
               : f == FAILURE ? failures(pc->by_code)
                              : pc->ok_us + pc->fail_us;
  sip__sb_add(b, "%s{%s} %llu\n", fams[f].name, labels, (unsigned long long)v);
}

void sip__prometheus_triton(sip__sb_t *b, const sip__prom_pool_row_t *pl, size_t n,
                            const sip__pipeline_counters_t *pc, size_t np) {
  char labels[640];
  for (int f = 0; f < NFAM; f++) {
    sip__prom_family(b, fams[f].name, fams[f].type, fams[f].help);
    for (size_t i = 0; i < n; i++)
      pool_sample(b, f, sip__prom_triton_labels(labels, sizeof labels, pl[i].name, pl[i].version), &pl[i].c);
    for (size_t i = 0; fams[f].pipelines && i < np; i++)
      pipeline_sample(b, f, sip__prom_triton_labels(labels, sizeof labels, pc[i].name, NULL), &pc[i]);
  }
}
