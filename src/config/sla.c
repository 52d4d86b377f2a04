/* sip — a pool's sla block and the top-level alerts block (docs/sla.md):
 * the targets a pool is held to per window, and when and where alerts about
 * them go. The numbers that may be fractions (latency, availability,
 * throughput) are parsed here; the rest goes through the table walker. */
#include "config/parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

#define LATENCY_EXPECT "a number of milliseconds > 0 (e.g. 50 or 2.5)"
#define AVAILABILITY_EXPECT                                                                     \
  "a fraction of requests 0 < x <= 1 (e.g. 0.999) or a percent with its sign, 0 < x <= 100 " \
  "(e.g. \"99.9%\")"
#define THROUGHPUT_EXPECT "a number of requests per second > 0 (e.g. 20)"
#define WEBHOOKS_EXPECT                                                                  \
  "a list of up to 8 URLs, each http://HOST[:PORT][/PATH] or https://HOST[:PORT][/PATH]"

static int parse_latency(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_availability(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_throughput(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_webhooks(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);

enum { L_LATENCY, L_AVAIL, L_THROUGHPUT, L_WINDOW, L_HORIZON, L_COUNT };
static const sip__field_t sla_fields[L_COUNT] = {
    [L_LATENCY] = {.name = "latency_p99_ms", .type = F_CUSTOM, .parse = parse_latency,
                   .expect = LATENCY_EXPECT,
                   .doc = "The 99th percentile of successful requests' latency (arrival to "
                          "answer) in a window must be at most this; absent = not checked."},
    [L_AVAIL] = {.name = "availability", .type = F_CUSTOM, .parse = parse_availability,
                 .expect = AVAILABILITY_EXPECT,
                 .doc = "Successful requests / requests in a window must be at least this "
                        "(requests refused for the client's own bad input are not counted); "
                        "absent = not checked."},
    [L_THROUGHPUT] = {.name = "min_throughput_rps", .type = F_CUSTOM, .parse = parse_throughput,
                      .expect = THROUGHPUT_EXPECT,
                      .doc = "Successful requests per second in a window must be at least this "
                             "(an idle window fails it); absent = not checked."},
    [L_WINDOW] = {.name = "window_s", .type = F_INT,
                  .offset = offsetof(sip__pool_config_t, sla.window_s), .def = 10, .min = 1,
                  .max = 86400, .doc = "Length of a window in seconds: targets are checked once "
                                       "per window, over the requests answered in it."},
    [L_HORIZON] = {.name = "horizon_windows", .type = F_INT,
                   .offset = offsetof(sip__pool_config_t, sla.horizon_windows), .def = 60,
                   .min = 1, .max = 100000,
                   .doc = "Compliance is the share of good windows among the last this many."},
};
const sip__section_t sip__cfg_sla_section = {sla_fields, L_COUNT};

enum { A_WARNING, A_CRITICAL, A_RESOLVE, A_WEBHOOKS, A_TIMEOUT, A_RETRIES, A_BACKOFF, A_QUEUE,
       A_COUNT };
static const sip__field_t alerts_fields[A_COUNT] = {
    [A_WARNING] = {.name = "warning_after", .type = F_INT,
                   .offset = offsetof(sip__config_t, alerts.warning_after), .def = 1, .min = 0,
                   .max = 10000,
                   .doc = "Consecutive windows missing a target before a warning fires; 0 = "
                          "no warnings."},
    [A_CRITICAL] = {.name = "critical_after", .type = F_INT,
                    .offset = offsetof(sip__config_t, alerts.critical_after), .def = 3, .min = 0,
                    .max = 10000,
                    .doc = "Consecutive windows missing a target before a critical alert fires "
                           "(at least warning_after); 0 = no critical alerts."},
    [A_RESOLVE] = {.name = "resolve_after", .type = F_INT,
                   .offset = offsetof(sip__config_t, alerts.resolve_after), .def = 2, .min = 1,
                   .max = 10000,
                   .doc = "Consecutive windows meeting every target before a firing alert "
                          "resolves."},
    [A_WEBHOOKS] = {.name = "webhooks", .type = F_CUSTOM, .parse = parse_webhooks,
                    .expect = WEBHOOKS_EXPECT,
                    .doc = "URLs every alert is POSTed to as JSON, from a thread of their own "
                           "(inference never waits for them); absent = none."},
    [A_TIMEOUT] = {.name = "timeout_ms", .type = F_INT,
                   .offset = offsetof(sip__config_t, alerts.timeout_ms), .def = 2000, .min = 10,
                   .max = 600000, .doc = "Longest one POST attempt may take (connect included)."},
    [A_RETRIES] = {.name = "retries", .type = F_INT,
                   .offset = offsetof(sip__config_t, alerts.retries), .def = 3, .min = 0,
                   .max = 100,
                   .doc = "Attempts after a failed one (no answer, or a status other than "
                          "2xx)."},
    [A_BACKOFF] = {.name = "backoff_ms", .type = F_INT,
                   .offset = offsetof(sip__config_t, alerts.backoff_ms), .def = 500, .min = 1,
                   .max = 600000,
                   .doc = "Wait before the first retry; each later retry waits twice the "
                          "previous (at most 60 s)."},
    [A_QUEUE] = {.name = "queue_size", .type = F_INT,
                 .offset = offsetof(sip__config_t, alerts.queue_size), .def = 256, .min = 1,
                 .max = 65536,
                 .doc = "Alerts waiting for one webhook at most; a newer alert that does not "
                        "fit is dropped and counted."},
};
const sip__section_t sip__cfg_alerts_section = {alerts_fields, A_COUNT};
_Static_assert(COUNT(sla_fields) <= MAX_FIELDS && COUNT(alerts_fields) <= MAX_FIELDS,
               "raise MAX_FIELDS");

/* A plain scalar that is a finite decimal number (optionally followed by
 * `suffix`, which is then stripped: *had_suffix says so). 0, or -1 with
 * the error recorded. */
static int number(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp, char suffix,
                  double *out, int *had_suffix) {
  char shown[SHOW_MAX * 4 + 8], buf[64];
  if (sip__cfg_want_scalar(c, v, key, exp)) return -1;
  const char *s = text(v);
  size_t len = v->data.scalar.length;
  *had_suffix = 0;
  if (suffix && len && s[len - 1] == suffix) {
    *had_suffix = 1;
    len--;
    while (len && s[len - 1] == ' ') len--;
  }
  int ok = len > 0 && len < sizeof buf && (is_plain(v) || *had_suffix);
  if (ok) {
    memcpy(buf, s, len);
    buf[len] = '\0';
    /* strtod also reads hex, "inf" and "nan": only decimal digits, a sign,
     * a point and an exponent are numbers here. */
    ok = strspn(buf, "+-.0123456789eE") == len && strpbrk(buf, "0123456789");
  }
  char *end = NULL;
  double x = ok ? strtod(buf, &end) : 0;
  if (!ok || !end || *end || !isfinite(x))
    return sip__cfg_fail(c, v->start_mark, key, "%s is not a number; expected %s",
                    sip__cfg_show(shown, sizeof shown, text(v), v->data.scalar.length), exp);
  *out = x;
  return 0;
}

int sip__cfg_number(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp, double *out) {
  int suffix;
  return number(c, v, key, exp, 0, out, &suffix);
}

static int positive(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp, double *out) {
  char shown[SHOW_MAX * 4 + 8];
  int pct;
  double x;
  if (number(c, v, key, exp, 0, &x, &pct)) return -1;
  if (!(x > 0))
    return sip__cfg_fail(c, v->start_mark, key, "%s is not above 0; expected %s",
                    sip__cfg_show(shown, sizeof shown, text(v), v->data.scalar.length), exp);
  *out = x;
  return 0;
}

static int parse_latency(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  return positive(c, v, key, LATENCY_EXPECT, &((sip__pool_config_t *)base)->sla.latency_p99_ms);
}

static int parse_throughput(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  return positive(c, v, key, THROUGHPUT_EXPECT,
                  &((sip__pool_config_t *)base)->sla.min_throughput_rps);
}

/* 0.999, or "99.9%". A bare number above 1 is refused rather than read as a
 * percent: 99.9 and 0.999 would otherwise both be accepted, and a typo like
 * 9.99 silently mean 9.99%. */
static int parse_availability(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  char shown[SHOW_MAX * 4 + 8];
  const char *exp = AVAILABILITY_EXPECT;
  int pct = 0;
  double x = 0;
  if (number(c, v, key, exp, '%', &x, &pct)) return -1;
  sip__cfg_show(shown, sizeof shown, text(v), v->data.scalar.length);
  if (!(x > 0)) return sip__cfg_fail(c, v->start_mark, key, "%s is not above 0; expected %s", shown, exp);
  if (pct && x > 100)
    return sip__cfg_fail(c, v->start_mark, key, "%s is above 100%%; expected %s", shown, exp);
  if (!pct && x > 1)
    return sip__cfg_fail(c, v->start_mark, key,
                    "%s is above 1: availability is a fraction (0.999) or a percent with a %% "
                    "sign (\"99.9%%\"); expected %s",
                    shown, exp);
  ((sip__pool_config_t *)base)->sla.availability = pct ? x / 100.0 : x;
  return 0;
}

/* http:// or https://, a host (no spaces or control characters anywhere). */
static bool valid_url(const char *s, size_t len) {
  size_t scheme = len > 7 && !strncasecmp(s, "http://", 7)    ? 7
                  : len > 8 && !strncasecmp(s, "https://", 8) ? 8
                                                              : 0;
  if (!scheme || s[scheme] == '/' || s[scheme] == ':' || s[scheme] == '?') return false;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f) return false;
  return true;
}

static int parse_webhooks(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__alerts_config_t *a = &((sip__config_t *)base)->alerts;
  char ikey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (is_null(v)) return 0;
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, WEBHOOKS_EXPECT);
  size_t n = seq_len(v);
  if (n > SIP__MAX_WEBHOOKS)
    return sip__cfg_fail(c, v->start_mark, key, "has %zu items; expected %s", n, WEBHOOKS_EXPECT);
  if (!n) return 0;
  if (!(a->webhooks = sip__calloc(n, sizeof *a->webhooks))) return sip__cfg_oom(c);
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = sip__cfg_seq_scalar(c, v, i, key, WEBHOOKS_EXPECT);
    if (!e) return -1;
    sip__cfg_key_index(ikey, key, i);
    const char *s = text(e);
    size_t len = e->data.scalar.length;
    if (memchr(s, '\0', len) || !valid_url(s, len))
      return sip__cfg_fail(c, e->start_mark, ikey, "%s is not an http:// or https:// URL; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), WEBHOOKS_EXPECT);
    for (size_t j = 0; j < i; j++)
      if (strlen(a->webhooks[j]) == len && !memcmp(a->webhooks[j], s, len))
        return sip__cfg_fail(c, e->start_mark, ikey, "%s is listed twice; expected each URL once",
                        sip__cfg_show(shown, sizeof shown, s, len));
    if (!(a->webhooks[i] = sip__strndup(s, len))) return sip__cfg_oom(c);
    a->n_webhooks = i + 1;
  }
  return 0;
}

int sip__cfg_check_sla(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t *sla, const char *key) {
  if (!sla) return 0;
  const sip__sla_config_t *t = &pool->sla;
  if (!t->latency_p99_ms && !t->availability && !t->min_throughput_rps) {
    char k[KEY_MAX];
    sip__cfg_key_join(k, key, "sla", 3);
    return sip__cfg_fail(c, sla->start_mark, k,
                    "sets no target; expected at least one of latency_p99_ms, availability, "
                    "min_throughput_rps");
  }
  pool->sla.enabled = 1;
  return 0;
}

int sip__cfg_check_alerts(sip__ctx_t *c, sip__config_t *cfg, yaml_node_t *alerts) {
  const sip__alerts_config_t *a = &cfg->alerts;
  if (alerts && a->warning_after && a->critical_after && a->critical_after < a->warning_after)
    return sip__cfg_fail(c, alerts->start_mark, "alerts.critical_after",
                    "%d is below warning_after %d; expected critical_after >= warning_after (or "
                    "0: no critical alerts)",
                    a->critical_after, a->warning_after);
  return 0;
}

void sip__cfg_alerts_free(sip__config_t *cfg) {
  for (size_t i = 0; i < cfg->alerts.n_webhooks; i++) sip__free(cfg->alerts.webhooks[i]);
  sip__free(cfg->alerts.webhooks);
  cfg->alerts.webhooks = NULL;
  cfg->alerts.n_webhooks = 0;
}
