/* libFuzzer target for the response cache's value decoder
 * (src/server/cache/response_cache_codec.c): values come from a Redis server
 * that other processes write to, so they are untrusted. Beyond "no crash,
 * no leak" it checks the contract: a value that decodes gives outputs that
 * pass sip_tensor_validate and encode again into exactly the same bytes
 * (the encoding is canonical), and a value that does not decode says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "server/cache/response_cache.h"
#include "sip/sip.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sip_tensor_t **outs = NULL;
  size_t n = 0;
  const char *why = NULL;
  if (sip__rcache_decode(data, size, &outs, &n, &why)) {
    CHECK(why && *why && !outs && n == 0);
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    sip_error_t *e = sip_tensor_validate(outs[i]);
    CHECK(!e);
  }
  size_t len = 0;
  uint8_t *again = sip__rcache_encode(outs, n, &len);
  CHECK(again && len == size && !memcmp(again, data, size));
  sip__free(again);
  for (size_t i = 0; i < n; i++) sip_tensor_free(outs[i]);
  sip__free(outs);
  return 0;
}
