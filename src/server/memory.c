/* sip — the server's memory in one place: the budget (server.memory_budget_mb,
 * auto resolved at start), the process's resident bytes, what the pools in
 * service measured at load (src/session/footprint.c measures), and the
 * capacity ModelMesh is told. The status document, /metrics, the dashboard
 * and the ModelMesh SPI all read it here, so they show one figure.
 * docs/elastic.md ("Memory") documents it. */
#include <jansson.h>

#include "core/core.h"
#include "server/introspect.h"
#include "server/server_impl.h"

/* memory_budget_mb: auto takes this share of what the machine gives. */
#define AUTO_PERCENT 80

uint64_t sip__server_memory_budget(const sip__config_t *cfg) {
  if (cfg->memory_budget_mb > 0) return (uint64_t)cfg->memory_budget_mb << 20;
  if (cfg->memory_budget_mb != -1) return 0;
  uint64_t limit = sip__cgroup_limit_bytes();
  const char *from = "cgroup memory limit";
  if (!limit) {
    limit = sip__mem_available_bytes();
    from = "MemAvailable";
  }
  uint64_t budget = limit / 100 * AUTO_PERCENT;
  sip__log(SIP__LOG_INFO, "memory budget", "memory_budget_mb=auto budget_bytes=%llu from=\"%d%% of "
           "%s (%llu bytes)\"", (unsigned long long)budget, AUTO_PERCENT, from,
           (unsigned long long)limit);
  return budget;
}

void sip__server_memory(sip_server_t *s, sip__server_memory_t *out) {
  *out = (sip__server_memory_t){0};
  size_t n = 0;
  sip__pool_t **v = sip__registry_snapshot(&s->eng, 1, &n);
  /* A model the store shares is counted once: the pools after the first
   * on it add their own bytes (docs/elastic.md "One model store"). */
  const void **seen = n ? sip__calloc(n, sizeof *seen) : NULL; /* NULL: each counted */
  size_t n_seen = 0;
  for (size_t i = 0; i < n; i++) {
    sip__pool_info_t in;
    sip__pool_info(v[i], &in);
    if (in.state != SIP__POOL_READY && in.state != SIP__POOL_STOPPED) continue;
    size_t k = 0;
    while (in.store_key && k < n_seen && seen[k] != in.store_key) k++;
    if (in.store_key && k < n_seen) {
      out->models += in.memory_bytes > in.store_bytes ? in.memory_bytes - in.store_bytes : 0;
      continue;
    }
    if (seen && in.store_key && in.store_pools > 1) seen[n_seen++] = in.store_key;
    out->models += in.memory_bytes;
  }
  sip__free((void *)seen);
  sip__registry_release(v, n);
  out->resident = sip__resident_bytes();
  out->budget = s->memory_budget;
  out->budget_auto = s->cfg->memory_budget_mb == -1;
  if (out->budget) {
    out->capacity = out->budget;
    return;
  }
  /* Isolated pools' memory is in their workers, not in `resident`. */
  uint64_t beside = out->resident > out->models ? out->resident - out->models : 0;
  uint64_t limit = sip__cgroup_limit_bytes();
  out->capacity = limit ? (limit > beside ? limit - beside : 0)
                        : sip__mem_available_bytes() + out->models;
}

json_t *sip__server_memory_json(sip_server_t *s) {
  sip__server_memory_t m;
  sip__server_memory(s, &m);
  return json_pack("{s:I,s:I,s:o,s:s,s:I}", "resident_bytes", (json_int_t)m.resident,
                   "models_bytes", (json_int_t)m.models, "budget_bytes",
                   m.budget ? json_integer((json_int_t)m.budget) : json_null(), "budget",
                   !m.budget ? "none" : m.budget_auto ? "auto" : "configured", "capacity_bytes",
                   (json_int_t)m.capacity);
}
