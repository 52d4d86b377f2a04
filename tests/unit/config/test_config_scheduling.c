/* Unit tests for the config parser (src/config/): scheduling, batching,
 * CPU affinity, pipelines, comparisons of pools and pipelines, drain, state,
 * SLA and alert keys, with every message. */
#include "config_helpers.h"

static void test_scheduling_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(
      "server: {execution_slots: 3}\n" POOL(
          "    dynamic_batching: {max_batch_size: 8, max_queue_delay_us: 500, "
          "preferred_batch_sizes: [2, 4, 8], padding_strategy: replicate_last}\n"
          "    queue: {max_size: 100, default_timeout_ms: 250, timeout_action: delay, "
          "ageing_ms: 0}\n"
          "    batch_strategies:\n"
          "      low: {max_batch: 1, timeout: 0}\n"
          "      medium: {max_batch: 4, timeout: 5}\n"
          "      high: {max_batch: 8, timeout: 60000}\n"
          "      rate_thresholds: [20, 100.5]\n"));
  assert_int_equal(cfg->execution_slots, 3);
  sip__pool_config_t *p = &cfg->pools[0];
  assert_int_equal(p->max_batch_size, 8);
  assert_int_equal(p->max_queue_delay_us, 500);
  assert_int_equal(p->n_preferred, 3);
  assert_int_equal(p->preferred_batch_sizes[0], 2);
  assert_int_equal(p->preferred_batch_sizes[1], 4);
  assert_int_equal(p->preferred_batch_sizes[2], 8); /* = max_batch_size is allowed */
  assert_int_equal(p->padding_strategy, SIP__PAD_REPLICATE_LAST);
  assert_int_equal(p->queue_max_size, 100);
  assert_int_equal(p->default_timeout_ms, 250);
  assert_int_equal(p->timeout_action, SIP__TIMEOUT_DELAY);
  assert_int_equal(p->ageing_ms, 0);
  assert_int_equal(p->batch_levels[0].max_batch, 1);
  assert_int_equal(p->batch_levels[0].timeout_ms, 0);
  assert_int_equal(p->batch_levels[1].max_batch, 4);
  assert_int_equal(p->batch_levels[1].timeout_ms, 5);
  assert_int_equal(p->batch_levels[2].max_batch, 8); /* = max_batch_size is allowed */
  assert_int_equal(p->batch_levels[2].timeout_ms, 60000);
  assert_true(p->rate_thresholds[0] == 20.0 && p->rate_thresholds[1] == 100.5);
  sip__config_free(cfg);

  /* Defaults: no batching, a queue of 10000 without deadlines, reject,
   * ageing 2 s, no elastic levels, one execution slot per core. */
  cfg = load_ok(POOL(""));
  p = &cfg->pools[0];
  assert_int_equal(cfg->execution_slots, 0);
  assert_int_equal(p->max_batch_size, 0);
  assert_int_equal(p->max_queue_delay_us, 0);
  assert_int_equal(p->n_preferred, 0);
  assert_int_equal(p->padding_strategy, SIP__PAD_NONE);
  assert_int_equal(p->queue_max_size, 10000);
  assert_int_equal(p->default_timeout_ms, 0);
  assert_int_equal(p->timeout_action, SIP__TIMEOUT_REJECT);
  assert_int_equal(p->ageing_ms, 2000);
  for (int i = 0; i < 3; i++) assert_int_equal(p->batch_levels[i].max_batch, 0);
  sip__config_free(cfg);

  /* Sections with only their required keys (or none) take the defaults. */
  cfg = load_ok(POOL("    dynamic_batching: {max_batch_size: 1, padding_strategy: zero}\n"
                     "    queue: {}\n"));
  p = &cfg->pools[0];
  assert_int_equal(p->max_batch_size, 1);
  assert_int_equal(p->max_queue_delay_us, 0);
  assert_int_equal(p->n_preferred, 0);
  assert_int_equal(p->padding_strategy, SIP__PAD_ZERO);
  assert_int_equal(p->queue_max_size, 10000);
  assert_int_equal(p->timeout_action, SIP__TIMEOUT_REJECT);
  assert_int_equal(p->ageing_ms, 2000);
  sip__config_free(cfg);
  cfg = load_ok(POOL("    dynamic_batching: {max_batch_size: 65536, max_queue_delay_us: 60000000, "
                     "padding_strategy: none}\n"
                     "    queue: {max_size: 100000000, default_timeout_ms: 86400000, "
                     "timeout_action: reject, ageing_ms: 86400000}\n"));
  p = &cfg->pools[0];
  assert_int_equal(p->max_batch_size, 65536);
  assert_int_equal(p->max_queue_delay_us, 60000000);
  assert_int_equal(p->padding_strategy, SIP__PAD_NONE);
  assert_int_equal(p->queue_max_size, 100000000);
  assert_int_equal(p->default_timeout_ms, 86400000);
  assert_int_equal(p->ageing_ms, 86400000);
  sip__config_free(cfg);

  /* batch_strategies alone: batching up to the largest level, default
   * thresholds [50, 200], level timeouts 0. */
  cfg = load_ok(POOL("    batch_strategies: {low: {max_batch: 2}, medium: {max_batch: 16}, "
                     "high: {max_batch: 4}}\n"));
  p = &cfg->pools[0];
  assert_int_equal(p->max_batch_size, 16);
  assert_int_equal(p->batch_levels[0].max_batch, 2);
  assert_int_equal(p->batch_levels[0].timeout_ms, 0);
  assert_int_equal(p->batch_levels[2].max_batch, 4);
  assert_true(p->rate_thresholds[0] == 50.0 && p->rate_thresholds[1] == 200.0);
  sip__config_free(cfg);

  cfg = load_ok("server: {execution_slots: 1024}\nsession_pools: []\n");
  assert_int_equal(cfg->execution_slots, 1024);
  sip__config_free(cfg);
}

static void test_scheduling_errors(void **state) {
  (void)state;
  /* dynamic_batching */
  EXPECT_ERR(POOL("    dynamic_batching: {max_queue_delay_us: 5}\n"),
             NAME ":4:23: session_pools[0].dynamic_batching.max_batch_size: missing",
             "expected an integer 1..65536");
  EXPECT_ERR(POOL("    dynamic_batching: {}\n"), "dynamic_batching.max_batch_size: missing");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 0}\n"),
             "dynamic_batching.max_batch_size: 0 is out of range; expected an integer 1..65536");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 65537}\n"),
             "dynamic_batching.max_batch_size: 65537 is out of range");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: x}\n"),
             "dynamic_batching.max_batch_size: \"x\" is not an integer");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, max_queue_delay_us: -1}\n"),
             "dynamic_batching.max_queue_delay_us: -1 is out of range",
             "expected an integer 0..60000000");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, max_queue_delay_us: 60000001}\n"),
             "dynamic_batching.max_queue_delay_us: 60000001 is out of range");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, padding_strategy: pad}\n"),
             "dynamic_batching.padding_strategy: \"pad\" is not valid",
             "expected one of none, replicate_last, zero");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, max_delay: 1}\n"),
             "dynamic_batching.max_delay: unknown key",
             "max_batch_size, max_queue_delay_us, preferred_batch_sizes, padding_strategy");
  EXPECT_ERR(POOL("    dynamic_batching: 8\n"), "session_pools[0].dynamic_batching: is a scalar",
             "expected a map");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, max_batch_size: 4}\n"),
             "dynamic_batching.max_batch_size: duplicate key");

  /* preferred_batch_sizes */
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [2, 16]}\n"),
             "dynamic_batching.preferred_batch_sizes: 16 is larger than max_batch_size 8",
             "expected sizes 1..8");
  /* ...whichever key comes first. */
  EXPECT_ERR(POOL("    dynamic_batching: {preferred_batch_sizes: [9], max_batch_size: 8}\n"),
             "preferred_batch_sizes: 9 is larger than max_batch_size 8");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [4, 2]}\n"),
             NAME ":4:70: session_pools[0].dynamic_batching.preferred_batch_sizes[1]",
             "is not larger than the item before it",
             "expected a list of up to 16 increasing batch sizes, each 1..max_batch_size");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [2, 2]}\n"),
             "preferred_batch_sizes[1]", "is not larger than the item before it");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [1, 4, 3]}\n"),
             "preferred_batch_sizes[2]", "is not larger");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: []}\n"),
             "preferred_batch_sizes: has 0 items", "increasing batch sizes");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [0]}\n"),
             "preferred_batch_sizes[0]", "is not a positive integer");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [-2]}\n"),
             "preferred_batch_sizes[0]", "is not a positive integer");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [1.5]}\n"),
             "preferred_batch_sizes[0]", "is not a positive integer");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [\"2\"]}\n"),
             "preferred_batch_sizes[0]", "is not a number");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: [[2]]}\n"),
             "preferred_batch_sizes[0]");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 8, preferred_batch_sizes: 4}\n"),
             "preferred_batch_sizes: is a scalar", "expected a list");
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 20, preferred_batch_sizes: "
                  "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}\n"),
             "preferred_batch_sizes: has 17 items", "up to 16");

  /* queue */
  EXPECT_ERR(POOL("    queue: {max_size: -1}\n"),
             "session_pools[0].queue.max_size: -1 is out of range",
             "expected an integer 0..100000000");
  EXPECT_ERR(POOL("    queue: {max_size: 100000001}\n"), "queue.max_size", "out of range");
  EXPECT_ERR(POOL("    queue: {default_timeout_ms: 86400001}\n"),
             "queue.default_timeout_ms: 86400001 is out of range", "0..86400000");
  EXPECT_ERR(POOL("    queue: {default_timeout_ms: -5}\n"), "queue.default_timeout_ms",
             "out of range");
  EXPECT_ERR(POOL("    queue: {timeout_action: drop}\n"),
             "queue.timeout_action: \"drop\" is not valid", "expected one of reject, delay");
  EXPECT_ERR(POOL("    queue: {ageing_ms: -1}\n"), "queue.ageing_ms: -1 is out of range",
             "0..86400000");
  EXPECT_ERR(POOL("    queue: {ageing_ms: 86400001}\n"), "queue.ageing_ms", "out of range");
  EXPECT_ERR(POOL("    queue: {max_size: 1, max_size: 2}\n"), "queue.max_size: duplicate key");
  EXPECT_ERR(POOL("    queue: {timeout_ms: 1}\n"), "queue.timeout_ms: unknown key",
             "max_size, default_timeout_ms, timeout_action, ageing_ms");
  EXPECT_ERR(POOL("    queue: [1]\n"), "session_pools[0].queue: is a list", "expected a map");

  /* batch_strategies */
#define LEVELS "low: {max_batch: 1}, medium: {max_batch: 2}, high: {max_batch: 4}"
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 1}, medium: {max_batch: 2}}\n"),
             "session_pools[0].batch_strategies.high: missing", "expected a map with keys: "
                                                                "max_batch, timeout");
  EXPECT_ERR(POOL("    batch_strategies: {medium: {max_batch: 2}, high: {max_batch: 4}}\n"),
             "batch_strategies.low: missing");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 2}, high: {max_batch: 4}}\n"),
             "batch_strategies.medium: missing");
  EXPECT_ERR(POOL("    batch_strategies: {}\n"), "batch_strategies.", "missing");
  EXPECT_ERR(POOL("    batch_strategies: {low: {timeout: 1}, medium: {max_batch: 2}, high: "
                  "{max_batch: 4}}\n"),
             "batch_strategies.low.max_batch: missing", "expected an integer 1..65536");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 1}, medium: {max_batch: 2}, high: "
                  "{timeout: 4}}\n"),
             "batch_strategies.high.max_batch: missing");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 0}, medium: {max_batch: 2}, high: "
                  "{max_batch: 4}}\n"),
             "batch_strategies.low.max_batch: 0 is out of range");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 1, timeout: 60001}, medium: "
                  "{max_batch: 2}, high: {max_batch: 4}}\n"),
             "batch_strategies.low.timeout: 60001 is out of range", "0..60000");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 1}, medium: {max_batch: 2, wait: 1}, "
                  "high: {max_batch: 4}}\n"),
             "batch_strategies.medium.wait: unknown key", "max_batch, timeout");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", extreme: {max_batch: 8}}\n"),
             "batch_strategies.extreme: unknown key",
             "low, medium, high, rate_thresholds");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [100, 20]}\n"),
             "batch_strategies.rate_thresholds[1]", "is not larger than the item before it",
             "expected two increasing arrival rates");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [10, 10]}\n"),
             "batch_strategies.rate_thresholds[1]", "is not larger");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [20]}\n"),
             "batch_strategies.rate_thresholds: has 1 items", "two increasing");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [20, 30, 40]}\n"),
             "batch_strategies.rate_thresholds: has 3 items");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: []}\n"),
             "batch_strategies.rate_thresholds: has 0 items");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [0, 10]}\n"),
             "batch_strategies.rate_thresholds[0]", "is not a positive number");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: [x, 10]}\n"),
             "batch_strategies.rate_thresholds[0]", "is not a positive number");
  EXPECT_ERR(POOL("    batch_strategies: {" LEVELS ", rate_thresholds: 50}\n"),
             "batch_strategies.rate_thresholds: is a scalar");
  /* A level may not batch more than dynamic_batching allows. */
  EXPECT_ERR(POOL("    dynamic_batching: {max_batch_size: 2}\n"
                  "    batch_strategies: {" LEVELS "}\n"),
             NAME ":5:23: session_pools[0].batch_strategies",
             "max_batch 4 is larger than dynamic_batching.max_batch_size 2",
             "expected max_batch <= max_batch_size");
  EXPECT_ERR(POOL("    batch_strategies: {low: {max_batch: 9}, medium: {max_batch: 2}, high: "
                  "{max_batch: 4}}\n"
                  "    dynamic_batching: {max_batch_size: 8}\n"),
             "max_batch 9 is larger than dynamic_batching.max_batch_size 8");
#undef LEVELS

  /* server.execution_slots */
  EXPECT_ERR("server: {execution_slots: -1}\nsession_pools: []\n",
             NAME ":1:27: server.execution_slots: -1 is out of range",
             "expected an integer 0..1024");
  EXPECT_ERR("server: {execution_slots: 1025}\nsession_pools: []\n",
             "server.execution_slots: 1025 is out of range");
  EXPECT_ERR("server: {execution_slots: two}\nsession_pools: []\n",
             "server.execution_slots: \"two\" is not an integer");
  EXPECT_ERR("server: {execution_slots: [1]}\nsession_pools: []\n",
             "server.execution_slots: is a list");

  /* resource_quota bounds used by the arbiter and the memory check. */
  EXPECT_ERR(POOL("    resource_quota: {max_compute_percent: 0}\n"),
             "resource_quota.max_compute_percent: 0 is out of range", "1..100");
  EXPECT_ERR(POOL("    resource_quota: {max_compute_percent: 101}\n"),
             "resource_quota.max_compute_percent: 101 is out of range");
  EXPECT_ERR(POOL("    resource_quota: {max_memory_mb: 0}\n"),
             "resource_quota.max_memory_mb: 0 is out of range", "1..1048576");
}

static int has_cpu(const sip__pool_config_t *p, int k) { return (int)(p->cpu_mask[k / 64] >> (k % 64) & 1); }

static void test_cpu_affinity(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL("    cpu_affinity: [0, 2-3, 1023]\n"));
  const sip__pool_config_t *p = &cfg->pools[0];
  assert_int_equal(p->n_cpus, 4);
  assert_true(has_cpu(p, 0) && has_cpu(p, 2) && has_cpu(p, 3) && has_cpu(p, 1023));
  assert_false(has_cpu(p, 1) || has_cpu(p, 4) || has_cpu(p, 64));
  sip__config_free(cfg);
  cfg = load_ok(POOL("    cpu_affinity: \"1, 4-5,64\"\n"));
  p = &cfg->pools[0];
  assert_int_equal(p->n_cpus, 4);
  assert_true(has_cpu(p, 1) && has_cpu(p, 4) && has_cpu(p, 5) && has_cpu(p, 64));
  sip__config_free(cfg);
  cfg = load_ok(POOL("    cpu_affinity: 3\n"));
  assert_int_equal(cfg->pools[0].n_cpus, 1);
  assert_true(has_cpu(&cfg->pools[0], 3));
  sip__config_free(cfg);
  cfg = load_ok(POOL(""));
  assert_int_equal(cfg->pools[0].n_cpus, 0); /* absent: wherever the OS runs them */
  sip__config_free(cfg);

  EXPECT_ERR(POOL("    cpu_affinity: [0, 0]\n"),
             NAME ":4:23: session_pools[0].cpu_affinity[1]: names CPU 0 twice",
             "expected logical CPU numbers 0..1023");
  EXPECT_ERR(POOL("    cpu_affinity: \"0-3,2\"\n"), "cpu_affinity: names CPU 2 twice");
  EXPECT_ERR(POOL("    cpu_affinity: [3-1]\n"),
             "cpu_affinity[0]: \"3-1\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: [-1]\n"), "\"-1\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: [1024]\n"), "\"1024\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: [0-1024]\n"), "\"0-1024\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: \"0,,1\"\n"), "\"\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: [a]\n"), "\"a\" is not a CPU number or range");
  EXPECT_ERR(POOL("    cpu_affinity: []\n"), "cpu_affinity: is an empty list");
  EXPECT_ERR(POOL("    cpu_affinity: {cpu: 1}\n"), "cpu_affinity: is a map",
             "expected logical CPU numbers");
  EXPECT_ERR(POOL("    cpu_affinity: [[1]]\n"), "cpu_affinity[0]: is a list");
  EXPECT_ERR(POOL("    cpu_affinity:\n"), "cpu_affinity: has no value");
}

/* Pipeline maps are parsed by hand: a repeated key is an error, not a
 * silent overwrite (the fuzzer found the second early_exit_condition
 * leaking the first). */
static void test_pipeline_duplicate_keys(void **state) {
  (void)state;
  const char *base = "session_pools:\n  - {name: p, backend: builtin}\npipeline_sessions:\n";
  char yaml[512];
  snprintf(yaml, sizeof yaml,
           "%s  - name: x\n    early_exit_condition: \"len(a.output) == 0\"\n"
           "    stages: [{name: a, pool: p}]\n    early_exit_condition: \"len(a.output) > 1\"\n",
           base);
  EXPECT_ERR(yaml, NAME ":7:5: pipeline_sessions[0].early_exit_condition: duplicate key (first at "
             "line 5); expected each key at most once");
  snprintf(yaml, sizeof yaml, "%s  - {name: x, stages: [{name: a, pool: p}], name: y}\n", base);
  EXPECT_ERR(yaml, "pipeline_sessions[0].name: duplicate key (first at line 4)");
  snprintf(yaml, sizeof yaml,
           "%s  - {name: x, outputs: [a.output], stages: [{name: a, pool: p}], outputs: [a.output]}\n",
           base);
  EXPECT_ERR(yaml, "pipeline_sessions[0].outputs: duplicate key");
  snprintf(yaml, sizeof yaml,
           "%s  - {name: x, stages: [{name: a, pool: p, input_mapping: {input: pipeline.a, "
           "input: pipeline.b}}]}\n",
           base);
  EXPECT_ERR(yaml, "stages[0].input_mapping.input: duplicate key",
             "expected each input at most once");
  EXPECT_ERR(POOL("    preprocess: {resize: {size: \"4,4\", size: \"8,8\"}}\n"),
             "preprocess.resize.size: duplicate key", "expected each option at most once");
}

/* Pools compared for a config reload: equal settings whatever the line or
 * the key order; any one setting changed makes them differ. */
static void test_pool_same(void **state) {
  (void)state;
  const char *base =
      "session_pools:\n  - name: a\n    model_path: a.onnx\n    pool_size: 2\n"
      "    backend_options: {own_intra_op_threads: '1'}\n    queue: {max_size: 8}\n";
  const char *moved =
      "server: {log_level: warn}\n\nsession_pools:\n  - queue: {max_size: 8}\n"
      "    backend_options: {own_intra_op_threads: '1'}\n    pool_size: 2\n    model_path: a.onnx\n    name: a\n";
  const char *changed[] = {
      "session_pools:\n  - {name: a, model_path: a.onnx, pool_size: 3, backend_options: {own_intra_op_threads: '1'}, "
      "queue: {max_size: 8}}\n",
      "session_pools:\n  - {name: a, model_path: b.onnx, pool_size: 2, backend_options: {own_intra_op_threads: '1'}, "
      "queue: {max_size: 8}}\n",
      "session_pools:\n  - {name: a, model_path: a.onnx, pool_size: 2, backend_options: {own_intra_op_threads: '2'}, "
      "queue: {max_size: 8}}\n",
      "session_pools:\n  - {name: a, model_path: a.onnx, pool_size: 2, backend_options: {own_intra_op_threads: '1'}, "
      "queue: {max_size: 9}}\n",
      "session_pools:\n  - {name: a, model_path: a.onnx, pool_size: 2, backend_options: {own_intra_op_threads: '1'}, "
      "queue: {max_size: 8}, priority: high}\n",
  };
  sip__config_t *a = load_ok(base), *b = load_ok(moved);
  assert_true(sip__config_pool_same(&a->pools[0], &b->pools[0]));
  assert_true(sip__config_pipelines_same(a, b));
  sip__config_free(b);
  for (size_t i = 0; i < sizeof changed / sizeof *changed; i++) {
    b = load_ok(changed[i]);
    if (sip__config_pool_same(&a->pools[0], &b->pools[0])) fail_msg("same: %s", changed[i]);
    sip__config_free(b);
  }
  sip__config_free(a);
}

static void test_pipelines_same(void **state) {
  (void)state;
  const char *pools = "session_pools:\n  - {name: p, model_path: p.onnx}\n"
                      "  - {name: q, model_path: q.onnx}\n";
  char one[512], two[512], three[512];
  snprintf(one, sizeof one, "%spipeline_sessions:\n  - name: pl\n    stages:\n"
           "      - {name: s, pool: p}\n", pools);
  snprintf(two, sizeof two, "%spipeline_sessions:\n  - name: pl\n    stages:\n"
           "      - {name: s, pool: q}\n", pools);
  snprintf(three, sizeof three, "%spipeline_sessions:\n  - name: pl\n    stages:\n"
           "      - {name: s, pool: p, when: 'sum(pipeline.x) > 0'}\n", pools);
  sip__config_t *a = load_ok(one), *a2 = load_ok(one), *b = load_ok(two), *c = load_ok(three),
                *none = load_ok(pools);
  assert_true(sip__config_pipelines_same(a, a2));
  assert_false(sip__config_pipelines_same(a, b));
  assert_false(sip__config_pipelines_same(a, c));
  assert_false(sip__config_pipelines_same(a, none));
  sip__config_free(a);
  sip__config_free(a2);
  sip__config_free(b);
  sip__config_free(c);
  sip__config_free(none);
}

static void test_drain_and_state_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok("session_pools: []\n");
  assert_int_equal(cfg->drain_timeout_ms, 30000);
  assert_int_equal(cfg->drain_delay_ms, 0);
  assert_null(cfg->state_dir);
  sip__config_free(cfg);
  cfg = load_ok("server: {drain_timeout_ms: 0, drain_delay_ms: 2500, state_dir: st}\n"
                "session_pools: []\n");
  assert_int_equal(cfg->drain_timeout_ms, 0);
  assert_int_equal(cfg->drain_delay_ms, 2500);
  assert_string_equal(cfg->state_dir, BASE "/st"); /* relative to the config file */
  sip__config_free(cfg);
  EXPECT_ERR("server: {drain_timeout_ms: -1}\nsession_pools: []\n", "drain_timeout_ms");
  EXPECT_ERR("server: {drain_timeout_ms: 3600001}\nsession_pools: []\n", "drain_timeout_ms");
  EXPECT_ERR("server: {drain_delay_ms: -1}\nsession_pools: []\n", "drain_delay_ms");
  EXPECT_ERR("server: {drain_delay_ms: 600001}\nsession_pools: []\n", "drain_delay_ms");
  EXPECT_ERR("server: {state_dir: [a]}\nsession_pools: []\n", "state_dir");
}

/* sla (per pool) and alerts (top level): values, defaults, and the errors
 * of docs/sla.md. */
static void test_sla_and_alerts_keys(void **state) {
  (void)state;
  sip__config_t *cfg = load_ok(POOL("    sla: {latency_p99_ms: 2.5, availability: 0.999, "
                                    "min_throughput_rps: 20, window_s: 5, horizon_windows: 12}\n"
                                    "  - name: q\n    model_path: m.onnx\n"
                                    "    sla: {availability: \"99.5%\"}\n"
                                    "  - name: r\n    model_path: m.onnx\n"));
  const sip__sla_config_t *a = &cfg->pools[0].sla, *b = &cfg->pools[1].sla, *c = &cfg->pools[2].sla;
  assert_int_equal(a->enabled, 1);
  assert_true(a->latency_p99_ms == 2.5 && a->availability == 0.999 && a->min_throughput_rps == 20);
  assert_int_equal(a->window_s, 5);
  assert_int_equal(a->horizon_windows, 12);
  assert_int_equal(b->enabled, 1);
  assert_true(b->availability > 0.99499 && b->availability < 0.99501); /* a percent, as a fraction */
  assert_true(b->latency_p99_ms == 0 && b->min_throughput_rps == 0);     /* not set */
  assert_int_equal(b->window_s, 10);                                    /* defaults */
  assert_int_equal(b->horizon_windows, 60);
  assert_int_equal(c->enabled, 0);
  /* alerts defaults */
  assert_int_equal(cfg->alerts.warning_after, 1);
  assert_int_equal(cfg->alerts.critical_after, 3);
  assert_int_equal(cfg->alerts.resolve_after, 2);
  assert_int_equal(cfg->alerts.n_webhooks, 0);
  assert_int_equal(cfg->alerts.timeout_ms, 2000);
  assert_int_equal(cfg->alerts.retries, 3);
  assert_int_equal(cfg->alerts.backoff_ms, 500);
  assert_int_equal(cfg->alerts.queue_size, 256);
  /* A changed target is a changed pool (a reload replaces it). */
  sip__pool_config_t changed = cfg->pools[0];
  assert_true(sip__config_pool_same(&cfg->pools[0], &changed));
  changed.sla.latency_p99_ms = 3;
  assert_false(sip__config_pool_same(&cfg->pools[0], &changed));
  sip__config_free(cfg);

  cfg = load_ok("alerts:\n  warning_after: 2\n  critical_after: 2\n  resolve_after: 5\n"
                "  webhooks: [\"http://127.0.0.1:9/hook\", \"https://example.org/a?b=c\"]\n"
                "  timeout_ms: 100\n  retries: 0\n  backoff_ms: 10\n  queue_size: 4\n"
                "session_pools: []\n");
  assert_int_equal(cfg->alerts.warning_after, 2);
  assert_int_equal(cfg->alerts.critical_after, 2);
  assert_int_equal(cfg->alerts.resolve_after, 5);
  assert_int_equal(cfg->alerts.n_webhooks, 2);
  assert_string_equal(cfg->alerts.webhooks[0], "http://127.0.0.1:9/hook");
  assert_string_equal(cfg->alerts.webhooks[1], "https://example.org/a?b=c");
  assert_int_equal(cfg->alerts.retries, 0);
  assert_int_equal(cfg->alerts.queue_size, 4);
  sip__config_free(cfg);

  /* sla errors */
  EXPECT_ERR(POOL("    sla: {window_s: 5}\n"), NAME ":4:10: session_pools[0].sla: sets no target",
             "expected at least one of latency_p99_ms, availability, min_throughput_rps");
  EXPECT_ERR(POOL("    sla:\n"), "session_pools[0].sla: sets no target");
  EXPECT_ERR(POOL("    sla: {availability: 99.9}\n"),
             "session_pools[0].sla.availability: \"99.9\" is above 1: availability is a fraction "
             "(0.999) or a percent with a % sign (\"99.9%\")");
  EXPECT_ERR(POOL("    sla: {availability: 100.5%}\n"), "sla.availability: \"100.5%\" is above 100%");
  EXPECT_ERR(POOL("    sla: {availability: 0}\n"), "sla.availability: \"0\" is not above 0");
  EXPECT_ERR(POOL("    sla: {availability: high}\n"), "sla.availability: \"high\" is not a number",
             "expected a fraction of requests 0 < x <= 1");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: -5}\n"), "sla.latency_p99_ms: \"-5\" is not above 0",
             "expected a number of milliseconds > 0");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: 50ms}\n"), "sla.latency_p99_ms: \"50ms\" is not a number");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: .nan}\n"), "sla.latency_p99_ms: \".nan\" is not a number");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: 0x10}\n"), "sla.latency_p99_ms: \"0x10\" is not a number");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: [5]}\n"), "sla.latency_p99_ms: is a list");
  EXPECT_ERR(POOL("    sla: {min_throughput_rps: 0}\n"), "sla.min_throughput_rps: \"0\" is not above 0",
             "requests per second");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: 5, window_s: 0}\n"), "sla.window_s",
             "an integer 1..86400");
  EXPECT_ERR(POOL("    sla: {latency_p99_ms: 5, horizon_windows: 0}\n"), "sla.horizon_windows");
  EXPECT_ERR(POOL("    sla: {latency_p99: 5}\n"), "sla.latency_p99: unknown key",
             "latency_p99_ms, availability, min_throughput_rps, window_s, horizon_windows");
  /* alerts errors: the block's body, and what the message says */
  static const struct {
    const char *body, *want;
  } bad_alerts[] = {
      {"warning_after: 3, critical_after: 2",
       "alerts.critical_after: 2 is below warning_after 3; expected critical_after >= "
       "warning_after"},
      {"resolve_after: 0", "alerts.resolve_after: 0 is out of range; expected an integer 1..10000"},
      {"webhooks: \"http://a/b\"", "alerts.webhooks: is a scalar; expected a list of up to 8 URLs"},
      {"webhooks: [\"ftp://a/b\"]",
       "alerts.webhooks[0]: \"ftp://a/b\" is not an http:// or https:// URL"},
      {"webhooks: [\"http://\"]", "alerts.webhooks[0]: \"http://\" is not an http:// or https://"},
      {"webhooks: [\"http://a b/\"]", "alerts.webhooks[0]: \"http://a b/\" is not an http://"},
      {"webhooks: [\"http://a/\", \"http://a/\"]",
       "alerts.webhooks[1]: \"http://a/\" is listed twice"},
      {"webhooks: [a, b, c, d, e, f, g, h, i]", "alerts.webhooks: has 9 items"},
      {"timeout_ms: 0", "alerts.timeout_ms: 0 is out of range; expected an integer 10..600000"},
      {"hooks: []",
       "alerts.hooks: unknown key; expected one of: warning_after, critical_after, resolve_after, "
       "webhooks"},
  };
  for (size_t i = 0; i < sizeof bad_alerts / sizeof bad_alerts[0]; i++) {
    char yaml[256];
    snprintf(yaml, sizeof yaml, "alerts: {%s}\nsession_pools: []\n", bad_alerts[i].body);
    EXPECT_ERR(yaml, bad_alerts[i].want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scheduling_keys),
      cmocka_unit_test(test_scheduling_errors),
      cmocka_unit_test(test_cpu_affinity),
      cmocka_unit_test(test_pipeline_duplicate_keys),
      cmocka_unit_test(test_pool_same),
      cmocka_unit_test(test_pipelines_same),
      cmocka_unit_test(test_drain_and_state_keys),
      cmocka_unit_test(test_sla_and_alerts_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
