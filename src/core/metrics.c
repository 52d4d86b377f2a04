/* sip — histograms. Observations are relaxed atomics: readers may see a
 * bucket and the sum from slightly different instants, which is fine for
 * monitoring and keeps the hot path free of locks. The count is the sum
 * of the buckets. */
#include "core/metrics.h"

const uint64_t sip__hist_bounds_us[SIP__HIST_BUCKETS] = {
    50,    100,    250,    500,    1000,    2500,    5000,    10000,   25000,
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000};

void sip__hist_observe(sip__hist_t *h, uint64_t us) {
  int i = 0;
  while (i < SIP__HIST_BUCKETS && us > sip__hist_bounds_us[i]) i++;
  atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

void sip__hist_read(const sip__hist_t *h, sip__hist_read_t *out) {
  uint64_t cum = 0;
  for (int i = 0; i <= SIP__HIST_BUCKETS; i++) {
    cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
    out->cum[i] = cum;
  }
  out->sum_us = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
}

sip__stat_read_t sip__stat_read(const sip__stat_t *s) {
  return (sip__stat_read_t){atomic_load_explicit(&s->count, memory_order_relaxed),
                            atomic_load_explicit(&s->ns, memory_order_relaxed)};
}

json_t *sip__hist_read_json(const sip__hist_read_t *r) {
  json_t *b = json_array();
  for (int i = 0; i <= SIP__HIST_BUCKETS; i++) {
    json_t *le = i < SIP__HIST_BUCKETS ? json_integer((json_int_t)sip__hist_bounds_us[i])
                                      : json_string("+Inf");
    json_array_append_new(b, json_pack("[o,I]", le, (json_int_t)r->cum[i]));
  }
  return json_pack("{s:I,s:I,s:o}", "count", (json_int_t)r->cum[SIP__HIST_BUCKETS], "sum",
                   (json_int_t)r->sum_us, "buckets", b);
}

json_t *sip__hist_json(const sip__hist_t *h) {
  sip__hist_read_t r;
  sip__hist_read(h, &r);
  return sip__hist_read_json(&r);
}

void sip__stat_add(sip__stat_t *s, uint64_t ns) {
  atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->ns, ns, memory_order_relaxed);
}

json_t *sip__stat_read_json(sip__stat_read_t r) {
  return json_pack("{s:I,s:I}", "count", (json_int_t)r.count, "ns", (json_int_t)r.ns);
}

json_t *sip__stat_json(const sip__stat_t *s) { return sip__stat_read_json(sip__stat_read(s)); }
