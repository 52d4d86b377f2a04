/* sip — the autoscaler's decision (see autoscale_policy.h). */
#include "session/autoscale_policy.h"

#include <math.h>

const char *sip__as_reason_name(sip__as_reason_t r) {
  static const char *const names[] = {"none", "utilization", "p99", "forecast", "wake", "idle",
                                      "bounds"};
  return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "unknown";
}

double sip__as_sessions_for(double rate_rps, double service_s, double up_threshold) {
  if (!(rate_rps > 0) || !(service_s > 0) || !(up_threshold > 0)) return 0;
  return ceil(rate_rps * service_s / up_threshold - 1e-9);
}

static int clamp(int n, int lo, int hi) { return n < lo ? lo : n > hi ? hi : n; }

int sip__as_decide(const sip__autoscale_config_t *cfg, const sip__as_input_t *in,
                   sip__as_reason_t *why) {
  int n = in->sessions, lo = cfg->min_sessions, hi = cfg->max_sessions;
  double up = cfg->scale_up_threshold;
  int fc = in->forecast_sessions > 0 ? (int)fmin(ceil(in->forecast_sessions - 1e-9), 1e6) : 0;
  *why = SIP__AS_NONE;
  if (n < lo || n > hi) {
    *why = SIP__AS_BOUNDS;
    return clamp(n, lo, hi);
  }
  if (n == 0) { /* released: the next request (or the forecast) brings sessions back */
    if (in->queued_now > 0) *why = SIP__AS_WAKE;
    else if (fc > 0) *why = SIP__AS_FORECAST;
    else return 0;
    return clamp(fc > 1 ? fc : 1, 1, hi);
  }
  int p99_over = cfg->target_p99_ms > 0 && in->p99_ms > cfg->target_p99_ms;
  int can_up = !in->last_up_us || in->now_us - in->last_up_us >= SIP__AS_UP_GAP_US;
  if (can_up && n < hi) {
    int want = n;
    if (in->utilization >= up) {
      int need = (int)fmin(ceil(in->demand / up - 1e-9), 1e6);
      want = need > n + 1 ? need : n + 1;
      *why = SIP__AS_UTILIZATION;
    } else if (p99_over) {
      want = n + 1;
      *why = SIP__AS_P99;
    }
    if (fc > want) {
      want = fc;
      *why = SIP__AS_FORECAST;
    }
    if (want > n) return clamp(want, lo, hi);
    *why = SIP__AS_NONE;
  }
  uint64_t cool = (uint64_t)cfg->cooldown_s * 1000000;
  int cooled = !in->last_change_us || in->now_us - in->last_change_us >= cool;
  if (cooled && n > lo && in->utilization <= cfg->scale_down_threshold && !p99_over &&
      in->queued_now == 0) {
    int need = in->demand > 0 ? (int)fmin(ceil(in->demand / up - 1e-9), 1e6) : 0;
    if (fc > need) need = fc;
    if (need < n) {
      *why = SIP__AS_IDLE;
      return clamp(need, lo, hi);
    }
  }
  return n;
}
