/* sip — a pool's autoscale block (docs/elastic.md, "Autoscaling"): the
 * bounds of its sessions, the utilisation thresholds, the cooldown, an
 * optional p99 target and the traffic forecast. Defaults follow seed 001
 * (scale_up_threshold 0.85, scale_down_threshold 0.3, cooldown 30 s,
 * history_window 60, prediction_horizon 10). */
#include "config/parse.h"

#include <string.h>

#include "core/core.h"

#define UP_EXPECT "a fraction of busy sessions 0 < x <= 1 (e.g. 0.85)"
#define DOWN_EXPECT "a fraction of busy sessions 0 <= x < 1, below scale_up_threshold (e.g. 0.3)"
#define P99_EXPECT "a number of milliseconds > 0 (e.g. 50 or 2.5)"
#define UP_DEFAULT 0.85
#define DOWN_DEFAULT 0.3

static int parse_up(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_down(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_p99(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);

#define AS_OFF(f) offsetof(sip__pool_config_t, autoscale.f)
enum { S_MIN, S_MAX, S_UP, S_DOWN, S_COOL, S_WINDOW, S_P99, S_PRED, S_HIST, S_HORIZON, S_COUNT };
static const sip__field_t autoscale_fields[S_COUNT] = {
    [S_MIN] = {.name = "min_sessions", .type = F_INT, .offset = AS_OFF(min_sessions), .def = 1,
               .min = 0, .max = 256,
               .doc = "Sessions kept at least; 0: an idle pool releases every session after the "
                      "cooldown and its next request brings one back."},
    [S_MAX] = {.name = "max_sessions", .type = F_INT, .offset = AS_OFF(max_sessions), .def = 8,
               .min = 1, .max = 256,
               .doc = "Sessions at most (also capped by resource_quota.max_memory_mb and "
                      "server.memory_budget_mb, by measured memory)."},
    [S_UP] = {.name = "scale_up_threshold", .type = F_CUSTOM, .parse = parse_up,
              .expect = UP_EXPECT,
              .doc = "Utilisation (busy sessions / sessions over window_s) at or above which "
                     "sessions are added; default 0.85."},
    [S_DOWN] = {.name = "scale_down_threshold", .type = F_CUSTOM, .parse = parse_down,
                .expect = DOWN_EXPECT,
                .doc = "Utilisation at or below which sessions are removed (after the "
                       "cooldown); default 0.3."},
    [S_COOL] = {.name = "cooldown_s", .type = F_INT, .offset = AS_OFF(cooldown_s), .def = 30,
                .min = 0, .max = 86400,
                .doc = "Seconds after any change before sessions are removed (additions do not "
                       "wait for it)."},
    [S_WINDOW] = {.name = "window_s", .type = F_INT, .offset = AS_OFF(window_s), .def = 5,
                  .min = 1, .max = 60,
                  .doc = "Seconds the utilisation (sampled every 100 ms) and the p99 are taken "
                         "over."},
    [S_P99] = {.name = "target_p99_ms", .type = F_CUSTOM, .parse = parse_p99,
               .expect = P99_EXPECT,
               .doc = "The p99 of requests answered over window_s above this adds a session and "
                      "keeps any from going; absent = not used."},
    [S_PRED] = {.name = "predictive", .type = F_BOOL, .offset = AS_OFF(predictive), .def = 0,
                .doc = "Also size the pool for the forecast arrival rate (Holt's linear trend) "
                       "prediction_horizon_s ahead, so it grows ahead of a ramp."},
    [S_HIST] = {.name = "history_window_s", .type = F_INT, .offset = AS_OFF(history_window_s),
                .def = 60, .min = 2, .max = 3600,
                .doc = "Seconds of per-second arrival counts the forecast is fitted to."},
    [S_HORIZON] = {.name = "prediction_horizon_s", .type = F_INT,
                   .offset = AS_OFF(prediction_horizon_s), .def = 10, .min = 1, .max = 600,
                   .doc = "Seconds ahead the arrival rate is forecast."},
};
const sip__section_t sip__cfg_autoscale_section = {autoscale_fields, S_COUNT};
_Static_assert(COUNT(autoscale_fields) <= MAX_FIELDS, "raise MAX_FIELDS");

static sip__autoscale_config_t *as_of(void *base) {
  return &((sip__pool_config_t *)base)->autoscale;
}

static int fraction(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp, double lo,
                    int lo_open, double hi, int hi_open, double *out) {
  char shown[SHOW_MAX * 4 + 8];
  double x;
  if (sip__cfg_number(c, v, key, exp, &x)) return -1;
  if ((lo_open ? !(x > lo) : !(x >= lo)) || (hi_open ? !(x < hi) : !(x <= hi)))
    return sip__cfg_fail(c, v->start_mark, key, "%s is out of range; expected %s",
                         sip__cfg_show(shown, sizeof shown, text(v), v->data.scalar.length), exp);
  *out = x;
  return 0;
}

static int parse_up(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  return fraction(c, v, key, UP_EXPECT, 0, 1, 1, 0, &as_of(base)->scale_up_threshold);
}

static int parse_down(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  return fraction(c, v, key, DOWN_EXPECT, 0, 0, 1, 1, &as_of(base)->scale_down_threshold);
}

static int parse_p99(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  return fraction(c, v, key, P99_EXPECT, 0, 1, 3600000, 0, &as_of(base)->target_p99_ms);
}

/* The value node of `name` in mapping `m`, NULL when absent. */
static yaml_node_t *member(sip__ctx_t *c, yaml_node_t *m, const char *name) {
  size_t len = strlen(name);
  for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top; pr++) {
    yaml_node_t *k = yaml_document_get_node(c->doc, pr->key);
    if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == len &&
        !memcmp(text(k), name, len))
      return yaml_document_get_node(c->doc, pr->value);
  }
  return NULL;
}

int sip__cfg_check_autoscale(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t *as,
                             yaml_node_t *pool_size, const char *key) {
  if (!as || as->type != YAML_MAPPING_NODE) return 0;
  sip__autoscale_config_t *a = &pool->autoscale;
  char k[KEY_MAX], mk[KEY_MAX];
  sip__cfg_key_join(k, key, "autoscale", 9);
  yaml_node_t *up = member(c, as, "scale_up_threshold"), *down = member(c, as, "scale_down_threshold");
  if (!up) a->scale_up_threshold = UP_DEFAULT;
  if (!down) a->scale_down_threshold = DOWN_DEFAULT;
  a->enabled = 1;
  if (a->min_sessions > a->max_sessions) {
    yaml_node_t *n = member(c, as, "min_sessions");
    sip__cfg_key_join(mk, k, "min_sessions", 12);
    return sip__cfg_fail(c, (n ? n : as)->start_mark, mk,
                         "%d is above max_sessions (%d); expected min_sessions <= max_sessions",
                         a->min_sessions, a->max_sessions);
  }
  if (a->scale_down_threshold >= a->scale_up_threshold) {
    yaml_node_t *n = down ? down : up ? up : as;
    sip__cfg_key_join(mk, k, "scale_down_threshold", 20);
    return sip__cfg_fail(c, n->start_mark, mk,
                         "%g is not below scale_up_threshold (%g); expected scale_down_threshold "
                         "< scale_up_threshold",
                         a->scale_down_threshold, a->scale_up_threshold);
  }
  if (pool->sequence_batching)
    return sip__cfg_fail(c, as->start_mark, k,
                         "cannot be used with sequence_batching (sequences are bound to their "
                         "sessions); expected no autoscale block");
  int lo = a->min_sessions > 1 ? a->min_sessions : 1;
  if (pool_size && (pool->pool_size < lo || pool->pool_size > a->max_sessions)) {
    sip__cfg_key_join(mk, key, "pool_size", 9);
    return sip__cfg_fail(c, pool_size->start_mark, mk,
                         "%d is outside autoscale's %d..%d; expected the starting size within "
                         "min_sessions (at least 1) and max_sessions",
                         pool->pool_size, lo, a->max_sessions);
  }
  /* Unwritten pool_size (1) starts at min_sessions. */
  if (!pool_size && pool->pool_size < lo) pool->pool_size = lo;
  return 0;
}
