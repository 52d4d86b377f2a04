/* sip — what the files of the /metrics page share (prometheus.c writes the
 * sip_* families, prometheus_triton.c Triton's nv_* families): the text
 * builder, label escaping, family headers and the per-pool rows read once
 * per page. Internal to src/server. */
#ifndef SIP_PROMETHEUS_IMPL_H
#define SIP_PROMETHEUS_IMPL_H

#include <stddef.h>

#include "pipeline/pipeline.h"
#include "session/observe/counters.h"

/* A growing string; oom is set (and text stops being added) when an
 * allocation fails. p is owned (sip__free). */
typedef struct sip__sb {
  char *p;
  size_t n, cap;
  int oom;
} sip__sb_t;

/* Appends printf-formatted text. */
void sip__sb_add(sip__sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* `s` escaped as a label value (\\, \", \n) into buf (n bytes, truncated);
 * returns buf. */
const char *sip__prom_esc(char *buf, size_t n, const char *s);
/* A family's # HELP and # TYPE lines. */
void sip__prom_family(sip__sb_t *b, const char *name, const char *type, const char *help);

/* One pool in service: its counters read once for the whole page. */
typedef struct sip__prom_pool_row {
  sip__pool_t *pool;       /* NULL in unit tests of what only reads the fields below */
  const char *name;        /* the pool's name */
  const char *version;     /* "" when unversioned; valid while the pool is referenced */
  sip__pool_counters_t c;
  struct sip__sla *sla;    /* the pool's SLA accounting, or NULL */
  char labels[700];        /* pool="...",version="..." */
} sip__prom_pool_row_t;

/* Triton's families (docs/metrics.md) for the pools `pl` and the pipelines
 * `pc` (Triton's ensembles), from the same counters as the sip_* ones. */
void sip__prometheus_triton(sip__sb_t *b, const sip__prom_pool_row_t *pl, size_t n,
                            const sip__pipeline_counters_t *pc, size_t np);

/* The response cache's families (prometheus_rcache.c); Triton's nv_cache_*
 * too with `triton`. c may be NULL (none written but the headers). */
/* Triton's labels of a model: model="...",version="..." (an unversioned
 * one reports "1"), escaped, in out (n bytes); returns out. */
const char *sip__prom_triton_labels(char *out, size_t n, const char *model, const char *version);
struct sip__rcache;
void sip__prometheus_rcache(sip__sb_t *b, struct sip__rcache *c, int triton);
/* The autoscaler's families for the autoscaled pools of `pl`
 * (prometheus_autoscale.c). */
void sip__prometheus_autoscale(sip__sb_t *b, const sip__prom_pool_row_t *pl, size_t n);
/* The engine's residency and model store families (prometheus_elastic.c). */
struct sip__engine;
void sip__prometheus_elastic(sip__sb_t *b, struct sip__engine *e);

#endif
