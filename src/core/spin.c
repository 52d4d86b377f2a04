/* sip — polling settings (spin.h). */
#include "core/spin.h"

#include <stdlib.h>

int64_t sip__spin_us_setting(const char *var, long def, atomic_int *cache) {
  int v = atomic_load(cache);
  if (v >= 0) return v;
  const char *env = getenv(var);
  long x = def;
  if (env && *env) {
    char *end = NULL;
    long y = strtol(env, &end, 10);
    if (!*end && y >= 0 && y <= 1000) x = y;
  }
  atomic_store(cache, (int)x);
  return x;
}
