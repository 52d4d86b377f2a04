/* sip — polling settings (spin.h). */
#include "core/spin.h"

#include <stdlib.h>

int64_t sip__spin_us_env(const char *var) {
  const char *env = getenv(var);
  if (!env || !*env) return -1;
  char *end = NULL;
  long y = strtol(env, &end, 10);
  return !*end && y >= 0 && y <= 1000 ? y : -1;
}

int64_t sip__spin_window_us(int64_t configured) {
  if (configured >= 0) return configured > 1000 ? 1000 : configured;
  int64_t env = sip__spin_us_env("SIP_IDLE_SPIN_US");
  return env >= 0 ? env : SIP__IDLE_SPIN_US_DEFAULT;
}
