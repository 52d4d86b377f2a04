/* sip — the autoscaler's decision (docs/elastic.md, "Autoscaling"): from a
 * pool's size, its load over the window, the forecast and the clock, the
 * size it should have. Pure: no pool, no clock of its own, no locks, so it
 * is tested on numbers alone (tests/unit/session/test_autoscale_policy.c). */
#ifndef SIP_SESSION_AUTOSCALE_POLICY_H
#define SIP_SESSION_AUTOSCALE_POLICY_H

#include <stdint.h>

#include "config/config.h"

typedef struct sip__as_input {
  int sessions;          /* the pool's size now */
  double utilization;    /* busy sessions / sessions, averaged over the window (0..1) */
  double demand;         /* busy + queued requests, averaged over the window */
  int queued_now;        /* requests waiting now */
  double p99_ms;         /* over the window; 0: none answered */
  double forecast_sessions; /* sessions the forecast rate needs; 0: no forecast */
  uint64_t now_us;
  uint64_t last_change_us; /* the last scale (either way); 0: never */
  uint64_t last_up_us;     /* the last scale-up; 0: never */
} sip__as_input_t;

typedef enum sip__as_reason {
  SIP__AS_NONE = 0,
  SIP__AS_UTILIZATION, /* utilisation at or above scale_up_threshold */
  SIP__AS_P99,         /* p99 above target_p99_ms */
  SIP__AS_FORECAST,    /* the forecast rate needs more */
  SIP__AS_WAKE,        /* a request reached a pool with no session */
  SIP__AS_IDLE,        /* utilisation at or below scale_down_threshold after the cooldown */
  SIP__AS_BOUNDS       /* outside min..max (a config change) */
} sip__as_reason_t;

/* The name of a reason ("utilization", "p99", ...). */
const char *sip__as_reason_name(sip__as_reason_t r);

/* Scale-ups wait this long after the previous one, so the window sees the
 * sessions it added before it adds more. */
#define SIP__AS_UP_GAP_US 1000000

/* The size the pool should have (== in->sessions: no change), and why.
 * Up: to ceil(demand / scale_up_threshold), at least one more, when the
 * utilisation reaches the threshold or the p99 passes its target; to the
 * forecast's sessions when they are more. Down, once cooldown_s passed
 * since the last change, when the utilisation is at or below
 * scale_down_threshold and the p99 within target: to what the demand and
 * the forecast need at scale_up_threshold, at least min_sessions. A pool
 * with no session and requests waiting gets one at once. Always within
 * min_sessions..max_sessions. */
int sip__as_decide(const sip__autoscale_config_t *cfg, const sip__as_input_t *in,
                   sip__as_reason_t *why);

/* Sessions an arrival rate needs: rate (req/s) * service time (s) /
 * scale_up_threshold, rounded up; 0 when either is 0. */
double sip__as_sessions_for(double rate_rps, double service_s, double up_threshold);

#endif
