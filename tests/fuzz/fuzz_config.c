/* libFuzzer target for the YAML config parser.
 *
 * Beyond "no crash, no leak", it checks the contract: exactly one of error
 * and config, every message starts with the label, and every accepted
 * config satisfies the schema's invariants (so a validation hole aborts).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

#define CHECK(cond) \
  do {              \
    if (!(cond)) abort(); \
  } while (0)

static void check_config(const sip_config_t *cfg) {
  CHECK(cfg->path && !strcmp(cfg->path, "fuzz.yaml"));
  CHECK(cfg->n_endpoints >= 1 && cfg->endpoints);
  for (size_t i = 0; i < cfg->n_endpoints; i++) CHECK(cfg->endpoints[i] && cfg->endpoints[i][0]);
  CHECK(cfg->engine.intra_op_threads >= 0 && cfg->engine.intra_op_threads <= 256);
  CHECK(cfg->engine.inter_op_threads >= 0 && cfg->engine.inter_op_threads <= 256);
  CHECK(cfg->engine.allow_spinning == 0 || cfg->engine.allow_spinning == 1);
  CHECK(cfg->max_frame_bytes >= 1024 && (uint64_t)cfg->max_frame_bytes <= ((uint64_t)4 << 30));
  CHECK((unsigned)cfg->log_level <= SIP_LOG_ERROR);
  CHECK(cfg->n_pools == 0 || cfg->pools);
  for (size_t i = 0; i < cfg->n_pools; i++) {
    const sip_pool_config_t *p = &cfg->pools[i];
    CHECK(p->name && strlen(p->name) >= 1 && strlen(p->name) <= 128);
    for (size_t j = 0; j < i; j++) CHECK(strcmp(p->name, cfg->pools[j].name) != 0);
    CHECK(p->backend);
    CHECK(!strcmp(p->backend, "builtin") || (!strcmp(p->backend, "onnxruntime") && p->model_path));
    CHECK(p->pool_size >= 1 && p->pool_size <= 256);
    CHECK((unsigned)p->priority < SIP_PRIO_LEVELS);
    CHECK(p->max_memory_mb >= 0 && p->max_memory_mb <= 1048576);
    CHECK(p->max_compute_percent >= 0 && p->max_compute_percent <= 100);
    for (size_t j = 0; j < p->n_backend_options; j++)
      CHECK(p->backend_options[j].key && p->backend_options[j].value);
    int cpus = 0; /* cpu_affinity: n_cpus is the number of bits set */
    for (size_t w = 0; w < SIP_MAX_CPUS / 64; w++) cpus += __builtin_popcountll(p->cpu_mask[w]);
    CHECK(cpus == p->n_cpus);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sip_config_t *cfg = NULL;
  sip_error_t *err =
      sip__config_load_string((const char *)data, size, "fuzz.yaml", "/fuzz/base", &cfg);
  if (err) {
    CHECK(!cfg);
    const char *msg = sip_error_message(err);
    CHECK(msg && (!strncmp(msg, "fuzz.yaml:", 10) || sip_error_code(err) == SIP_RESOURCE_EXHAUSTED));
    sip_error_free(err);
  } else {
    CHECK(cfg);
    check_config(cfg);
    sip__config_free(cfg);
  }
  return 0;
}
