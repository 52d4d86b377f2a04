/* sip — a request's own pipeline_config (read by the parameter table,
 * src/session/request/request_params.c) checked against one pipeline's stages. */
#include <string.h>

#include "core/core.h"
#include "pipeline/pipeline_impl.h"

sip_error_t *sip__pipeline_request_config(const sip__pipeline_t *pl, const sip_request_t *req,
                                          uint32_t *stage_timeout_ms, sip__expr_t **exit) {
  if (req->has_stage_timeouts) {
    if (req->n_stage_timeouts > pl->n)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "pipeline_config.stage_timeout_ms: %zu values; expected a list of at "
                           "most %zu millisecond values, one per stage in config order (0: none)",
                           req->n_stage_timeouts, pl->n);
    memset(stage_timeout_ms, 0, MAX_STAGES * sizeof *stage_timeout_ms); /* replaces the config's */
    memcpy(stage_timeout_ms, req->stage_timeout_ms,
           req->n_stage_timeouts * sizeof *req->stage_timeout_ms);
  }
  if (!req->early_exit) return NULL;
  sip__expr_free(*exit);
  *exit = NULL;
  sip_error_t *pe = sip__expr_parse(req->early_exit, exit);
  if (pe) {
    sip_error_t *e = sip_error_new(SIP_INVALID_ARGUMENT, "pipeline_config.early_exit_condition: %s",
                                   sip_error_message(pe));
    sip_error_free(pe);
    return e;
  }
  const char *const *refs;
  size_t n = sip__expr_refs(*exit, &refs);
  for (size_t i = 0; i < n; i++) {
    const char *dot = strchr(refs[i], '.');
    if (dot && !((size_t)(dot - refs[i]) == 8 && !strncmp(refs[i], "pipeline", 8)) &&
        stage_index(pl, refs[i], (size_t)(dot - refs[i])) < 0)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "pipeline_config.early_exit_condition: '%s' names no stage of "
                           "pipeline '%s'",
                           refs[i], pl->cfg->name);
  }
  return NULL;
}
