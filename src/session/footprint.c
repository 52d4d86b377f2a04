/* sip — what memory costs, measured in one place: the process's resident
 * bytes (a pool's load and each session it adds are the growth across
 * them), and the memory the machine gives the process (a cgroup's limit,
 * else MemAvailable) for server.memory_budget_mb: auto and ModelMesh's
 * capacity. docs/elastic.md ("Memory") says what these figures are.
 *
 * Resident set size (/proc/<pid>/statm) rather than PSS (smaps_rollup):
 * statm is one counter read, while smaps_rollup walks every mapping under
 * the address-space lock the allocator needs too; and across a load in one
 * process the two grow alike (the pages a load adds are private to it). */
#include <stdio.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "session/engine.h"

uint64_t sip__resident_bytes_of(int pid) {
  char path[64];
  if (pid > 0)
    snprintf(path, sizeof path, "/proc/%d/statm", pid);
  else
    snprintf(path, sizeof path, "/proc/self/statm");
  FILE *f = fopen(path, "re");
  unsigned long long size = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%llu %llu", &size, &rss) != 2) rss = 0;
    fclose(f);
  }
  return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

uint64_t sip__resident_bytes(void) { return sip__resident_bytes_of(0); }

uint64_t sip__resident_settled(void) {
#if defined(__GLIBC__)
  /* glibc keeps freed heap pages resident for reuse: without giving them
   * back, a load that reuses them would show no growth, and one that
   * frees its parsing buffers would show them as kept. */
  malloc_trim(0);
#endif
  return sip__resident_bytes();
}

int sip__resident_peak_reset(void) {
  FILE *f = fopen("/proc/self/clear_refs", "we");
  if (!f) return 0;
  int ok = fputs("5", f) >= 0;
  ok &= fclose(f) == 0;
  return ok;
}

uint64_t sip__resident_peak(void) {
  char line[256];
  unsigned long long kib = 0;
  FILE *f = fopen("/proc/self/status", "re");
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %llu kB", &kib) == 1) break;
  fclose(f);
  return (uint64_t)kib * 1024u;
}

uint64_t sip__cgroup_limit_bytes(void) {
  unsigned long long v = 0, limit = 0;
  FILE *f = fopen("/sys/fs/cgroup/memory.max", "re"); /* cgroup v2 ("max": none) */
  if (f && fscanf(f, "%llu", &v) == 1) limit = v;
  if (f) fclose(f);
  if (!limit && (f = fopen("/sys/fs/cgroup/memory/memory.limit_in_bytes", "re"))) { /* v1 */
    /* v1 writes "no limit" as a huge page-rounded number */
    if (fscanf(f, "%llu", &v) == 1 && v < (1ull << 60)) limit = v;
    fclose(f);
  }
  return (uint64_t)limit;
}

uint64_t sip__mem_available_bytes(void) {
  char line[256];
  unsigned long long v;
  uint64_t avail = 0;
  FILE *f = fopen("/proc/meminfo", "re");
  if (f) {
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) avail = (uint64_t)v << 10;
    fclose(f);
  }
  return avail;
}
