/* sip — a pool's service-level accounting (docs/sla.md).
 *
 * Every answered request of a pool with an `sla` block is recorded here
 * (sip__sla_record: a few relaxed atomic increments, no lock). The SLA
 * monitor (src/server/observe/sla_monitor.c) calls sip__sla_tick once per window:
 * the window's counts are the difference between two readings of the
 * cumulative counters, so recording never waits for the monitor. A closed
 * window is good when it meets every target that is set; alerts fire and
 * resolve with hysteresis over consecutive windows.
 *
 * The window arithmetic and the alert state machine (sip__sla_window_compute,
 * sip__sla_state_step) are pure functions of their arguments: time comes in
 * as arguments, so tests drive them with a clock of their own. */
#ifndef SIP_SESSION_SLA_H
#define SIP_SESSION_SLA_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "sip/error.h"

/* Latency histogram: exact below 32 us, then 32 buckets per power of two
 * (each 1/32 of its octave wide: a value read back is within 1.6%), up to
 * 2^36 us (19 hours); longer latencies share the last bucket. */
#define SIP__SLA_SUB 32
#define SIP__SLA_BUCKETS 1024

/* Cumulative counts of a pool's answers at one instant. */
typedef struct sip__sla_counts {
  uint64_t ok;       /* answered successfully */
  uint64_t failed;   /* answered with an error the server is to blame for */
  uint64_t excluded; /* refused for the client's own input (not counted) */
  uint64_t lat[SIP__SLA_BUCKETS]; /* successful requests by latency bucket */
} sip__sla_counts_t;

/* The bucket of a latency, and the value (microseconds) a bucket stands for
 * (the middle of its range). */
int sip__sla_bucket(uint64_t us);
double sip__sla_bucket_value_us(int b);
/* 1 when an answer with `code` is the client's doing (bad input, a request
 * for something that does not exist or is not allowed, its own
 * cancellation): such answers count neither for nor against availability. */
int sip__sla_code_excluded(sip_code_t code);

typedef enum sip__alert_level {
  SIP__ALERT_NONE = 0,
  SIP__ALERT_WARNING = 1,
  SIP__ALERT_CRITICAL = 2,
  SIP__ALERT_LEVELS
} sip__alert_level_t;
/* "none", "warning", "critical". */
const char *sip__alert_level_name(int level);

/* Targets a window missed (sip__sla_window_t.violated). */
enum { SIP__SLA_V_LATENCY = 1, SIP__SLA_V_AVAILABILITY = 2, SIP__SLA_V_THROUGHPUT = 4 };

/* One closed window. */
typedef struct sip__sla_window {
  uint64_t end_us;  /* wall clock when it closed, microseconds since the epoch */
  double seconds;   /* its length */
  uint64_t requests; /* counted: ok + failed */
  uint64_t ok, failed, excluded;
  double p99_ms;         /* of successful requests; < 0: there were none */
  double availability;   /* ok / requests; < 0: no request counted */
  double throughput_rps; /* ok / seconds */
  int good;              /* every target set was met */
  unsigned violated;     /* SIP__SLA_V_* of the targets missed */
} sip__sla_window_t;

/* The window between two readings of the counters (`prev` taken at its
 * start, `cur` at its end), `seconds` long, closed at wall time `end_us`,
 * judged against `t`. A target without a measurement is not missed: p99
 * with no successful request, availability with no counted request (an
 * idle window misses only min_throughput_rps). */
void sip__sla_window_compute(const sip__sla_config_t *t, const sip__sla_counts_t *prev,
                             const sip__sla_counts_t *cur, double seconds, uint64_t end_us,
                             sip__sla_window_t *w);
/* What a window missed, measured against target ("p99 latency 120.4 ms >
 * 50 ms; availability 95.00% < 99.90%"), into buf; "" for a good window. */
void sip__sla_describe(const sip__sla_config_t *t, const sip__sla_window_t *w, char *buf,
                       size_t n);

/* An alert that fired or resolved. */
typedef struct sip__sla_alert {
  int level;        /* the level that fired, or (resolved) the one that ended */
  int previous;     /* the level before this change */
  int resolved;     /* 1: the alert ended (the pool is back to level none) */
  int streak;       /* consecutive bad windows (firing) or good windows (resolved) */
  uint64_t time_us; /* wall clock: the closing of the deciding window */
  char reason[256];
  sip__sla_window_t window; /* the deciding window */
} sip__sla_alert_t;

/* The evaluation state of one pool's windows. */
typedef struct sip__sla_state {
  sip__sla_config_t t;
  unsigned char *hist; /* good (1) / bad (0) of the last t.horizon_windows windows, a ring */
  size_t hist_n, hist_head, hist_good;
  uint64_t windows, good_windows; /* every window closed so far */
  sip__sla_window_t last;
  int have_last;
  int level; /* sip__alert_level_t */
  int bad_streak, good_streak;
  uint64_t since_us; /* wall clock: when `level` began (or monitoring did) */
  char reason[256];  /* why the alert fired ("" at level none before any alert) */
  uint64_t fired[SIP__ALERT_LEVELS]; /* alerts fired, by level */
  uint64_t resolved;                 /* alerts resolved */
} sip__sla_state_t;

/* 0, or -1 when out of memory. `start_us`: wall clock, since_us at first. */
int sip__sla_state_init(sip__sla_state_t *st, const sip__sla_config_t *t, uint64_t start_us);
void sip__sla_state_destroy(sip__sla_state_t *st);
/* Takes a closed window: compliance history, streaks, and the alert level
 * as `pol` says (fire the highest level whose count of consecutive bad
 * windows is reached, never lower while windows stay bad; resolve after
 * resolve_after consecutive good ones). 1 with *out filled when an alert
 * fired or resolved, else 0. */
int sip__sla_state_step(sip__sla_state_t *st, const sip__alerts_config_t *pol,
                        const sip__sla_window_t *w, sip__sla_alert_t *out);
/* Good windows / windows among the last horizon_windows; < 0 before the
 * first window. */
double sip__sla_state_compliance(const sip__sla_state_t *st);

/* The alert as the JSON object webhooks receive and the log quotes (owned):
 * pool, version, level, state ("firing" | "resolved"), previous_level,
 * reason, time_us, time (RFC 3339, UTC), violations [{metric, measured,
 * target}], window {...}, targets {...}, consecutive_windows. */
json_t *sip__sla_alert_json(const char *pool, const char *version, const sip__sla_config_t *t,
                            const sip__sla_alert_t *a);

/* ---- one pool's SLA (owned by the pool) ---- */
typedef struct sip__sla {
  uint64_t id; /* unique in the process: tells a replaced pool's SLA from its successor's */
  atomic_uint_fast64_t ok, failed, excluded;
  atomic_uint_fast64_t lat[SIP__SLA_BUCKETS];
  pthread_mutex_t mu; /* guards what follows */
  sip__sla_state_t st;
  sip__sla_counts_t prev;   /* the counters when the open window began */
  uint64_t window_start_us; /* monotonic; 0: not armed yet */
} sip__sla_t;

/* NULL when out of memory or when `t` is not enabled. */
sip__sla_t *sip__sla_new(const sip__sla_config_t *t);
void sip__sla_free(sip__sla_t *s);
/* Counts one answer (any thread; lock-free). */
void sip__sla_record(sip__sla_t *s, sip_code_t code, uint64_t latency_us);
/* Reads the cumulative counters. */
void sip__sla_counts_read(sip__sla_t *s, sip__sla_counts_t *out);
/* Brings the pool's windows up to monotonic time `now_us` (wall clock
 * `wall_us`): the first call opens the first window; a call at or after
 * the open window's end closes it (over the time it really lasted) and
 * opens the next. Returns the monotonic time the open window ends; *fired
 * is 1 with *alert filled when closing it fired or resolved an alert. */
uint64_t sip__sla_tick(sip__sla_t *s, const sip__alerts_config_t *pol, uint64_t now_us,
                       uint64_t wall_us, sip__sla_alert_t *alert, int *fired);

/* The pool's SLA at one instant, typed (for /metrics). */
typedef struct sip__sla_view {
  double compliance; /* < 0: no window closed yet */
  int have_last;
  sip__sla_window_t last;
  int level;
  uint64_t since_us;
  uint64_t fired[SIP__ALERT_LEVELS];
  uint64_t resolved;
} sip__sla_view_t;
void sip__sla_read(sip__sla_t *s, sip__sla_view_t *v);
/* The alert level now (sip__alert_level_t). */
int sip__sla_level(sip__sla_t *s);
/* The status document's "sla" object (docs/sla.md): targets, window_s,
 * horizon_windows, compliance, windows, good_windows, last_window, alert,
 * alerts_fired. Owned. */
json_t *sip__sla_json(sip__sla_t *s);

#endif
