/* sip — polling settings (spin.h). */
#include "core/spin.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int sip__spin_core_spare(void) {
  static atomic_int fd = -2, cpus;
  int f = atomic_load(&fd);
  if (f == -2) {
    int nf = open("/proc/loadavg", O_RDONLY | O_CLOEXEC), expect = -2;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    atomic_store(&cpus, n > 0 ? (int)n : 1);
    if (!atomic_compare_exchange_strong(&fd, &expect, nf < 0 ? -1 : nf) && nf >= 0) close(nf);
    f = atomic_load(&fd);
  }
  if (f < 0) return 0;
  /* "0.52 0.58 0.59 3/467 12345": the fourth field is runnable/all. */
  char buf[128];
  ssize_t n = pread(f, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char *slash = strchr(buf, '/'), *at = slash;
  if (!slash) return 0;
  while (at > buf && at[-1] >= '0' && at[-1] <= '9') at--;
  return at < slash && atol(at) <= atomic_load(&cpus);
}
