/* libFuzzer target for the Triton model config a repository load may carry
 * (src/config/model_override.c). Beyond "no crash, no leak" it checks the
 * contract: exactly one of error and result; errors are INVALID_ARGUMENT
 * with a "model config: " message; a parsed config applies to a pool
 * without breaking its invariants (pool size 1..256, preferred batch sizes
 * increasing and within max_batch_size), and its check of declared inputs
 * and outputs answers without crashing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sip__model_override_t *o = NULL;
  sip_error_t *e = sip__model_override_parse((const char *)data, size, "m", &o);
  CHECK(!e != !o);
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT);
    CHECK(!strncmp(sip_error_message(e), "model config: ", 14));
    sip_error_free(e);
    return 0;
  }
  sip__pool_config_t pc;
  memset(&pc, 0, sizeof pc);
  pc.pool_size = 1;
  pc.max_batch_size = 8;
  e = sip__model_override_apply(o, &pc);
  if (!e) {
    CHECK(pc.pool_size >= 1 && pc.pool_size <= 256);
    CHECK(pc.n_preferred <= SIP__MAX_PREFERRED);
    for (size_t i = 0; i < pc.n_preferred; i++) {
      CHECK(pc.preferred_batch_sizes[i] >= 1 && pc.preferred_batch_sizes[i] <= pc.max_batch_size);
      CHECK(!i || pc.preferred_batch_sizes[i] > pc.preferred_batch_sizes[i - 1]);
    }
  }
  sip_error_free(e);
  sip_io_desc_t in = {.name = "x", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 4}};
  sip_io_desc_t out = {.name = "y", .dtype = SIP_DTYPE_FLOAT32, .rank = -1};
  const sip_io_desc_t *const io[2] = {&in, &out};
  const size_t n[2] = {1, 1};
  sip_error_free(sip__model_override_check_io(o, io, n, 1));
  CHECK(sip__model_override_text(o)[0] == '{');
  sip__model_override_free(o);
  return 0;
}
