/* sip — a pool's scheduling keys: dynamic_batching, queue and
 * batch_strategies (elastic batching), with the checks that tie them
 * together and to max_batch_size (docs/scheduling.md). */
#include "config/parse.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static int parse_preferred(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_thresholds(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);

static const char *const padding_names[] = {"none", "replicate_last", "zero", NULL};
static const char *const timeout_action_names[] = {"reject", "delay", NULL};

enum { B_MAX, B_DELAY, B_PREFERRED, B_PADDING, B_COUNT };
static const sip__field_t batching_fields[B_COUNT] = {
    [B_MAX] = {.name = "max_batch_size", .type = F_INT,
               .offset = offsetof(sip__pool_config_t, max_batch_size), .def = 0, .min = 1,
               .max = 65536, .required = true,
               .doc = "Most rows (dim 0) one execution takes from merged requests."},
    [B_DELAY] = {.name = "max_queue_delay_us", .type = F_INT64,
                 .offset = offsetof(sip__pool_config_t, max_queue_delay_us), .def = 0, .min = 0,
                 .max = 60000000,
                 .doc = "How long a short batch may wait for more requests (never past the "
                        "earliest deadline in it)."},
    [B_PREFERRED] = {.name = "preferred_batch_sizes", .type = F_CUSTOM, .parse = parse_preferred,
                     .expect = "a list of up to 16 increasing batch sizes, each 1..max_batch_size",
                     .doc = "Sizes dispatched at once when reached, without waiting."},
    [B_PADDING] = {.name = "padding_strategy", .type = F_ENUM,
                   .offset = offsetof(sip__pool_config_t, padding_strategy),
                   .names = padding_names, .def = SIP__PAD_NONE,
                   .doc = "How a short batch fills a model's fixed batch dim."},
};
const sip__section_t sip__cfg_batching_section = {batching_fields, B_COUNT};

enum { QU_MAX, QU_TIMEOUT, QU_ACTION, QU_AGEING, QU_COUNT };
static const sip__field_t queue_fields[QU_COUNT] = {
    [QU_MAX] = {.name = "max_size", .type = F_INT64,
                .offset = offsetof(sip__pool_config_t, queue_max_size), .def = 10000,
                .min = 0, .max = 100000000,
                .doc = "Most queued requests (more get RESOURCE_EXHAUSTED at once); 0 = "
                       "unbounded."},
    [QU_TIMEOUT] = {.name = "default_timeout_ms", .type = F_INT64,
                    .offset = offsetof(sip__pool_config_t, default_timeout_ms), .def = 0,
                    .min = 0, .max = 86400000,
                    .doc = "Deadline of requests that carry none; 0 = none."},
    [QU_ACTION] = {.name = "timeout_action", .type = F_ENUM,
                   .offset = offsetof(sip__pool_config_t, timeout_action),
                   .names = timeout_action_names, .def = SIP__TIMEOUT_REJECT,
                   .doc = "reject: answer DEADLINE_EXCEEDED; delay: run last, when idle."},
    [QU_AGEING] = {.name = "ageing_ms", .type = F_INT64,
                   .offset = offsetof(sip__pool_config_t, ageing_ms), .def = 2000, .min = 0,
                   .max = 86400000,
                   .doc = "A waiting request rises one priority level per ageing_ms; 0 = off."},
};
const sip__section_t sip__cfg_queue_section = {queue_fields, QU_COUNT};

#define LEVEL_FIELDS(i)                                                                         \
  {{.name = "max_batch", .type = F_INT,                                                        \
    .offset = offsetof(sip__pool_config_t, batch_levels[i].max_batch), .def = 0, .min = 1,       \
    .max = 65536, .required = true, .doc = "Batch size at this traffic level."},               \
   {.name = "timeout", .type = F_INT64,                                                        \
    .offset = offsetof(sip__pool_config_t, batch_levels[i].timeout_ms), .def = 0, .min = 0,     \
    .max = 60000, .doc = "Milliseconds a batch may wait to fill at this level."}}
static const sip__field_t level_fields[3][2] = {LEVEL_FIELDS(0), LEVEL_FIELDS(1), LEVEL_FIELDS(2)};
static const sip__section_t level_sections[3] = {
    {level_fields[0], 2}, {level_fields[1], 2}, {level_fields[2], 2}};

enum { E_LOW, E_MEDIUM, E_HIGH, E_THRESH, E_COUNT };
static const sip__field_t elastic_fields[E_COUNT] = {
    [E_LOW] = {.name = "low", .type = F_SECTION, .section = &level_sections[0], .required = true,
               .doc = "Batching below the first rate threshold."},
    [E_MEDIUM] = {.name = "medium", .type = F_SECTION, .section = &level_sections[1],
                  .required = true, .doc = "Batching between the thresholds."},
    [E_HIGH] = {.name = "high", .type = F_SECTION, .section = &level_sections[2],
                .required = true, .doc = "Batching above the second threshold."},
    [E_THRESH] = {.name = "rate_thresholds", .type = F_CUSTOM, .parse = parse_thresholds,
                  .expect = "two increasing arrival rates in requests per second, e.g. [50, 200]",
                  .doc = "Arrival rates (req/s) separating low|medium|high; default [50, 200]."},
};
const sip__section_t sip__cfg_elastic_section = {elastic_fields, E_COUNT};

#define CONTROL_FIELD(k, key, what)                                                       \
  [k] = {.name = key, .type = F_STRING, .offset = offsetof(sip__pool_config_t, seq_control[k]), \
         .expect = "the name of a model input", .doc = what}
static const sip__field_t control_fields[SIP__SEQ_CONTROLS] = {
    CONTROL_FIELD(SIP__SEQ_START, "start",
                  "Input set to 1 on a sequence's first request, else 0 (int32, fp32 or bool; "
                  "one element)."),
    CONTROL_FIELD(SIP__SEQ_END, "end",
                  "Input set to 1 on a sequence's last request, else 0 (int32, fp32 or bool; "
                  "one element)."),
    CONTROL_FIELD(SIP__SEQ_READY, "ready",
                  "Input set to 1 on every request of a sequence (int32, fp32 or bool; one "
                  "element)."),
    CONTROL_FIELD(SIP__SEQ_CORRID, "corrid",
                  "Input set to the sequence id (uint64, int64, uint32, int32 or string; one "
                  "element)."),
};
static const sip__section_t control_section = {control_fields, SIP__SEQ_CONTROLS};

enum { S_IDLE, S_MAX, S_BACKLOG, S_CONTROL, S_COUNT };
static const sip__field_t sequence_fields[S_COUNT] = {
    [S_IDLE] = {.name = "idle_timeout_us", .type = F_INT64,
                .offset = offsetof(sip__pool_config_t, seq_idle_timeout_us), .def = 1000000,
                .min = 1000, .max = 86400000000LL,
                .doc = "A sequence that gets no request for this long is released; later "
                       "requests of it fail."},
    [S_MAX] = {.name = "max_sequences", .type = F_INT,
               .offset = offsetof(sip__pool_config_t, seq_max_sequences), .def = 0, .min = 1,
               .max = 4096,
               .doc = "Sequences bound to sessions at once (spread over the sessions); absent = "
                      "pool_size."},
    [S_BACKLOG] = {.name = "max_backlog", .type = F_INT64,
                   .offset = offsetof(sip__pool_config_t, seq_max_backlog), .def = 1024,
                   .min = 0, .max = 1000000,
                   .doc = "New sequences waiting for a free slot at most; more: "
                          "RESOURCE_EXHAUSTED."},
    [S_CONTROL] = {.name = "control_inputs", .type = F_SECTION, .section = &control_section,
                   .doc = "Model inputs the server fills for each request of a sequence."},
};
const sip__section_t sip__cfg_sequence_section = {sequence_fields, S_COUNT};

/* A list of up to `max` numbers; ints when `ints`. */
static int parse_number_list(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp,
                             size_t max, int ints, double *out, size_t *n) {
  char ikey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, exp);
  *n = seq_len(v);
  if (*n == 0 || *n > max)
    return sip__cfg_fail(c, v->start_mark, key, "has %zu items; expected %s", *n, exp);
  for (size_t i = 0; i < *n; i++) {
    yaml_node_t *e = seq_item(c, v, i);
    sip__cfg_key_index(ikey, key, i);
    if (!e) return sip__cfg_oom(c);
    if (sip__cfg_want_scalar(c, e, ikey, exp)) return -1;
    const char *s = text(e);
    size_t len = e->data.scalar.length;
    char buf[64], *end;
    int64_t iv;
    if (len >= sizeof buf || !is_plain(e))
      return sip__cfg_fail(c, e->start_mark, ikey, "%s is not a number; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (ints) {
      if (sip__cfg_parse_int(s, len, &iv) || iv < 1)
        return sip__cfg_fail(c, e->start_mark, ikey, "%s is not a positive integer; expected %s",
                        sip__cfg_show(shown, sizeof shown, s, len), exp);
      out[i] = (double)iv;
    } else {
      out[i] = strtod(buf, &end);
      if (end == buf || *end || !(out[i] > 0) || out[i] > 1e9)
        return sip__cfg_fail(c, e->start_mark, ikey, "%s is not a positive number; expected %s",
                        sip__cfg_show(shown, sizeof shown, s, len), exp);
    }
    if (i && out[i] <= out[i - 1])
      return sip__cfg_fail(c, e->start_mark, ikey, "%s is not larger than the item before it; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
  }
  return 0;
}

static int parse_preferred(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__pool_config_t *pool = base;
  double vals[SIP__MAX_PREFERRED];
  size_t n = 0;
  if (parse_number_list(c, v, key, batching_fields[B_PREFERRED].expect, SIP__MAX_PREFERRED, 1,
                        vals, &n))
    return -1;
  for (size_t i = 0; i < n; i++) pool->preferred_batch_sizes[i] = (int)vals[i];
  pool->n_preferred = n;
  return 0;
}


static int parse_thresholds(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip__pool_config_t *pool = base;
  size_t n = 0;
  const char *exp = elastic_fields[E_THRESH].expect;
  if (parse_number_list(c, v, key, exp, 2, 0, pool->rate_thresholds, &n)) return -1;
  if (n != 2) return sip__cfg_fail(c, v->start_mark, key, "has %zu items; expected %s", n, exp);
  return 0;
}

/* Cross-field rules of the scheduling sections. */
int sip__cfg_check_scheduling(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t **vals,
                         const char *key) {
  char k[KEY_MAX];
  if (vals[P_BATCHING]) {
    for (size_t i = 0; i < pool->n_preferred; i++) {
      if (pool->preferred_batch_sizes[i] <= pool->max_batch_size) continue;
      sip__cfg_key_join(k, key, "dynamic_batching.preferred_batch_sizes",
                   strlen("dynamic_batching.preferred_batch_sizes"));
      return sip__cfg_fail(c, vals[P_BATCHING]->start_mark, k,
                      "%d is larger than max_batch_size %d; expected sizes 1..%d",
                      pool->preferred_batch_sizes[i], pool->max_batch_size, pool->max_batch_size);
    }
  }
  if (vals[P_SEQUENCE]) {
    pool->sequence_batching = 1;
    if (!pool->seq_max_sequences) pool->seq_max_sequences = pool->pool_size;
    if (vals[P_BATCHING] || vals[P_ELASTIC]) {
      sip__cfg_key_join(k, key, "sequence_batching", strlen("sequence_batching"));
      return sip__cfg_fail(c, vals[P_SEQUENCE]->start_mark, k,
                      "cannot be combined with %s; expected one of sequence_batching (requests "
                      "of a sequence run one at a time on its session) or dynamic batching",
                      vals[P_BATCHING] ? "dynamic_batching" : "batch_strategies");
    }
    for (int i = 0; i < SIP__SEQ_CONTROLS; i++)
      for (int j = 0; j < i; j++) {
        if (!pool->seq_control[i] || !pool->seq_control[j] ||
            strcmp(pool->seq_control[i], pool->seq_control[j]))
          continue;
        sip__cfg_key_join(k, key, "sequence_batching.control_inputs",
                     strlen("sequence_batching.control_inputs"));
        return sip__cfg_fail(c, vals[P_SEQUENCE]->start_mark, k,
                        "%s and %s both name input '%s'; expected a different input for each",
                        control_fields[j].name, control_fields[i].name, pool->seq_control[i]);
      }
  }
  if (vals[P_ELASTIC]) {
    if (!pool->rate_thresholds[0]) {
      pool->rate_thresholds[0] = 50;
      pool->rate_thresholds[1] = 200;
    }
    /* Elastic levels size the batches: the pool batches up to the largest. */
    int most = 0;
    for (int i = 0; i < 3; i++)
      if (pool->batch_levels[i].max_batch > most) most = pool->batch_levels[i].max_batch;
    if (!vals[P_BATCHING]) pool->max_batch_size = most;
    if (most > pool->max_batch_size) {
      sip__cfg_key_join(k, key, "batch_strategies", strlen("batch_strategies"));
      return sip__cfg_fail(c, vals[P_ELASTIC]->start_mark, k,
                      "a level's max_batch %d is larger than dynamic_batching.max_batch_size %d; "
                      "expected max_batch <= max_batch_size",
                      most, pool->max_batch_size);
    }
  }
  return 0;
}
