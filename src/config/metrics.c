/* sip — the config's metrics block: what /metrics exports besides sip's own
 * families (docs/metrics.md). */
#include "config/parse.h"

#include <stddef.h>

enum { M_TRITON, M_COUNT };
static const sip__field_t metrics_fields[M_COUNT] = {
    [M_TRITON] = {.name = "triton_names", .type = F_BOOL,
                  .offset = offsetof(sip__config_t, metrics.triton_names), .def = 1,
                  .doc = "Also export Triton's families (nv_inference_request_success, "
                         "nv_inference_queue_duration_us, ...) with Triton's labels model and "
                         "version, computed from the same counters as the sip_* families "
                         "(docs/metrics.md)."},
};
const sip__section_t sip__cfg_metrics_section = {metrics_fields, M_COUNT};
_Static_assert(COUNT(metrics_fields) <= MAX_FIELDS, "raise MAX_FIELDS");
