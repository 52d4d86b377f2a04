/* sip — lock-free counters and fixed-bucket latency histograms. */
#ifndef SIP_METRICS_H
#define SIP_METRICS_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

/* Bucket upper bounds in microseconds; one more bucket holds +Inf. */
#define SIP__HIST_BUCKETS 18
extern const uint64_t sip__hist_bounds_us[SIP__HIST_BUCKETS];

typedef struct sip__hist {
  atomic_uint_fast64_t buckets[SIP__HIST_BUCKETS + 1]; /* non-cumulative */
  atomic_uint_fast64_t sum_us;
} sip__hist_t;

void sip__hist_observe(sip__hist_t *h, uint64_t us);

/* A count and a cumulative duration. */
typedef struct sip__stat {
  atomic_uint_fast64_t count, ns;
} sip__stat_t;
void sip__stat_add(sip__stat_t *s, uint64_t ns);
/* A histogram read at one instant: cumulative bucket counts (the last is
 * +Inf, so it is the count) and the sum. */
typedef struct sip__hist_read {
  uint64_t cum[SIP__HIST_BUCKETS + 1];
  uint64_t sum_us;
} sip__hist_read_t;
void sip__hist_read(const sip__hist_t *h, sip__hist_read_t *out);
/* A sip__stat_t read at one instant. */
typedef struct sip__stat_read {
  uint64_t count, ns;
} sip__stat_read_t;
sip__stat_read_t sip__stat_read(const sip__stat_t *s);
/* {"count": n, "ns": t} */
json_t *sip__stat_json(const sip__stat_t *s);
/* {"count": n, "sum": s, "buckets": [[le, cumulative], ..., ["+Inf", n]]} */
json_t *sip__hist_json(const sip__hist_t *h);
/* The same documents, of values already read. */
json_t *sip__hist_read_json(const sip__hist_read_t *r);
json_t *sip__stat_read_json(sip__stat_read_t r);

#endif
