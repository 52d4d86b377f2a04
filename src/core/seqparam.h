/* sip — a request's sequence parameters as KServe's "parameters" object
 * carries them: sequence_id, sequence_start, sequence_end. HTTP/REST and the
 * native protocol read the same keys (docs/sequences.md). */
#ifndef SIP_CORE_SEQPARAM_H
#define SIP_CORE_SEQPARAM_H

#include <jansson.h>
#include <stdint.h>

#include "sip/error.h"

typedef struct sip__seq_params {
  int present;     /* sequence_id was given */
  uint64_t id;     /* a numeric id (>= 1) */
  const char *sid; /* a string id, borrowed from the JSON object; NULL: numeric */
  int start, end;  /* sequence_start, sequence_end */
} sip__seq_params_t;

/* 1 when `key` is one of the three. */
int sip__seq_param_key(const char *key);
/* Reads them from `params` (a JSON object; other keys are ignored):
 * sequence_id an integer >= 1 or a string of 1..256 bytes (0 and "", as in
 * Triton, mean no sequence), the others booleans, true only with a
 * sequence. INVALID_ARGUMENT naming the parameter and the type expected. */
sip_error_t *sip__seq_params_read(const json_t *params, sip__seq_params_t *out);

#endif
