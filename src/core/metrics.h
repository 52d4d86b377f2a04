/* sip — lock-free counters and fixed-bucket latency histograms. */
#ifndef SIP_METRICS_H
#define SIP_METRICS_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

/* Bucket upper bounds in microseconds; one more bucket holds +Inf. */
#define SIP_HIST_BUCKETS 18
extern const uint64_t sip__hist_bounds_us[SIP_HIST_BUCKETS];

typedef struct sip_hist {
  atomic_uint_fast64_t buckets[SIP_HIST_BUCKETS + 1]; /* non-cumulative */
  atomic_uint_fast64_t sum_us;
} sip_hist_t;

void sip__hist_observe(sip_hist_t *h, uint64_t us);

/* A count and a cumulative duration. */
typedef struct sip_stat {
  atomic_uint_fast64_t count, ns;
} sip_stat_t;
void sip__stat_add(sip_stat_t *s, uint64_t ns);
/* A histogram read at one instant: cumulative bucket counts (the last is
 * +Inf, so it is the count) and the sum. */
typedef struct sip__hist_read {
  uint64_t cum[SIP_HIST_BUCKETS + 1];
  uint64_t sum_us;
} sip__hist_read_t;
void sip__hist_read(const sip_hist_t *h, sip__hist_read_t *out);
/* A sip_stat_t read at one instant. */
typedef struct sip__stat_read {
  uint64_t count, ns;
} sip__stat_read_t;
sip__stat_read_t sip__stat_read(const sip_stat_t *s);
/* {"count": n, "ns": t} */
json_t *sip__stat_json(const sip_stat_t *s);
/* {"count": n, "sum": s, "buckets": [[le, cumulative], ..., ["+Inf", n]]} */
json_t *sip__hist_json(const sip_hist_t *h);
/* The same documents, of values already read. */
json_t *sip__hist_read_json(const sip__hist_read_t *r);
json_t *sip__stat_read_json(sip__stat_read_t r);

#endif
