/* sip — histograms. Observations are relaxed atomics: readers may see a
 * bucket and the count from slightly different instants, which is fine for
 * monitoring and keeps the hot path free of locks. */
#include "metrics/metrics.h"

const uint64_t sip__hist_bounds_us[SIP_HIST_BUCKETS] = {
    50,    100,    250,    500,    1000,    2500,    5000,    10000,   25000,
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000};

void sip__hist_observe(sip_hist_t *h, uint64_t us) {
  int i = 0;
  while (i < SIP_HIST_BUCKETS && us > sip__hist_bounds_us[i]) i++;
  atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

json_t *sip__hist_json(const sip_hist_t *h) {
  json_t *b = json_array();
  uint64_t cum = 0;
  for (int i = 0; i <= SIP_HIST_BUCKETS; i++) {
    cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
    json_t *le = i < SIP_HIST_BUCKETS ? json_integer((json_int_t)sip__hist_bounds_us[i])
                                      : json_string("+Inf");
    json_array_append_new(b, json_pack("[o,I]", le, (json_int_t)cum));
  }
  return json_pack("{s:I,s:I,s:o}", "count", (json_int_t)cum, "sum",
                   (json_int_t)atomic_load(&h->sum_us), "buckets", b);
}

double sip__hist_quantile_us(const sip_hist_t *h, double q) {
  uint64_t counts[SIP_HIST_BUCKETS + 1], total = 0;
  for (int i = 0; i <= SIP_HIST_BUCKETS; i++) total += counts[i] = atomic_load(&h->buckets[i]);
  if (!total) return 0;
  double rank = q * (double)total, cum = 0;
  for (int i = 0; i <= SIP_HIST_BUCKETS; i++) {
    if (cum + (double)counts[i] >= rank && counts[i]) {
      double lo = i ? (double)sip__hist_bounds_us[i - 1] : 0;
      double hi = i < SIP_HIST_BUCKETS ? (double)sip__hist_bounds_us[i] : lo * 2;
      return lo + (hi - lo) * (rank - cum) / (double)counts[i];
    }
    cum += (double)counts[i];
  }
  return (double)sip__hist_bounds_us[SIP_HIST_BUCKETS - 1];
}

void sip__stat_add(sip_stat_t *s, uint64_t ns) {
  atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->ns, ns, memory_order_relaxed);
}

json_t *sip__stat_json(const sip_stat_t *s) {
  return json_pack("{s:I,s:I}", "count", (json_int_t)atomic_load(&s->count), "ns",
                   (json_int_t)atomic_load(&s->ns));
}
