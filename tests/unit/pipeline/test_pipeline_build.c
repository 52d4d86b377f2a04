/* Unit tests of building pipelines (src/pipeline: sip__pipelines_new,
 * _build, _check_pool, _json) on an engine set up by hand from a config's
 * builtin pools, and of running built pipelines through the public API.
 *
 * Errors the config parser refuses (a reference to an unknown stage, a
 * transform's bad option) never reach the builder from a config file; to
 * exercise the builder's own checks the parsed config is changed before
 * the build, and the parser's refusal is checked separately. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backends.h"
#include "core/core.h"
#include "inproc.h"
#include "pipeline/pipeline.h"
#include "session/engine.h"
#include "sip/sip.h"

/* ---- an engine, its pools and pipelines ----------------------------------- */

typedef struct world {
  sip__engine_t e;
  sip__config_t *cfg;
  sip__pipeline_set_t *ps;
} world_t;

static const char *POOLS =
    "server: {log_level: error}\n"
    "session_pools:\n"
    "  - {name: echo, backend: builtin, backend_options: {shape: '-1,4'}}\n"
    "  - {name: ints, backend: builtin, backend_options: {dtype: int64, shape: '-1'}}\n"
    "  - {name: rotten, backend: builtin, backend_options: {dtype: nope}}\n";

/* POOLS, then `pipelines` (the pipeline_sessions entries). */
static sip_error_t *parse(const char *pipelines, sip__config_t **out) {
  char yaml[8192];
  snprintf(yaml, sizeof yaml, "%spipeline_sessions:\n%s", POOLS, pipelines);
  return sip__config_load_string(yaml, strlen(yaml), "<test>", NULL, sip__backend_catalog(), out);
}

static sip__config_t *parse_ok(const char *pipelines) {
  sip__config_t *cfg = NULL;
  sip_error_t *e = parse(pipelines, &cfg);
  if (e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sip_error_message(e));
    sip_error_free(e);
    fail_msg("config refused: %s\n%s", msg, pipelines);
  }
  return cfg;
}

/* Loads the config's pools, lists its pipelines and builds them. */
static void world_up(world_t *w, sip__config_t *cfg) {
  memset(w, 0, sizeof *w);
  w->cfg = cfg;
  sip__engine_init(&w->e, &cfg->engine, 2, NULL, NULL);
  for (size_t i = 0; i < cfg->n_pools; i++) {
    sip__pool_t *p = sip__pool_new(&w->e, &cfg->pools[i], NULL, NULL);
    assert_non_null(p);
    assert_null(sip__registry_swap(&w->e, &p, 1, NULL, 0));
    sip__pool_load(p);
  }
  w->ps = sip__pipelines_new(&w->e, cfg);
  assert_non_null(w->ps);
  sip__pipelines_build(w->ps);
}

static void world_down(world_t *w) {
  for (;;) {
    pthread_rwlock_rdlock(&w->e.reg_lock);
    sip__pool_t *p = w->e.n_pools ? w->e.pools[0] : NULL;
    pthread_rwlock_unlock(&w->e.reg_lock);
    if (!p) break;
    sip__registry_drain_free(&w->e, p);
  }
  sip__pipelines_free(w->ps);
  sip__engine_destroy(&w->e);
  sip__config_free(w->cfg);
}

static sip__model_t *model(world_t *w, const char *name) {
  sip_error_t *e = NULL;
  sip__model_t *m = sip__registry_find_model(&w->e, name, NULL, &e);
  if (!m) {
    sip_error_free(e);
    fail_msg("no model '%s'", name);
  }
  return m;
}

static void assert_pools_ready(world_t *w) {
  static const char *const ready[] = {"echo", "ints"};
  for (int i = 0; i < 2; i++) {
    sip__model_t *m = model(w, ready[i]);
    if (m->vt->state(m, NULL) != SIP__MODEL_READY) fail_msg("pool '%s' is not READY", ready[i]);
    m->vt->unref(m);
  }
  sip__model_t *m = model(w, "rotten");
  assert_int_equal(m->vt->state(m, NULL), SIP__MODEL_FAILED);
  m->vt->unref(m);
}

/* The stage config named `stage` of pipeline `pl`. */
static sip__stage_config_t *stage_cfg(sip__config_t *cfg, const char *pl, const char *stage) {
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    if (strcmp(cfg->pipelines[i].name, pl)) continue;
    for (size_t k = 0; k < cfg->pipelines[i].n_stages; k++)
      if (!strcmp(cfg->pipelines[i].stages[k].name, stage)) return &cfg->pipelines[i].stages[k];
  }
  fail_msg("no stage %s.%s", pl, stage);
  return NULL;
}

static void set_str(char **slot, const char *v) {
  sip__free(*slot);
  *slot = sip__strdup(v);
  assert_non_null(*slot);
}

/* The same for a key-value pair's value (const in the struct, owned). */
static void set_kv_value(sip_kv_t *kv, const char *v) {
  sip__free((void *)kv->value);
  kv->value = sip__strdup(v);
  assert_non_null(kv->value);
}

static void set_option(sip__stage_config_t *st, const char *key, const char *v) {
  for (size_t i = 0; i < st->n_options; i++)
    if (!strcmp(st->options[i].key, key)) {
      set_kv_value(&st->options[i], v);
      return;
    }
  fail_msg("stage %s has no option %s", st->name, key);
}

static void assert_has(const char *text, const char *const *frags) {
  for (; *frags; frags++)
    if (!strstr(text, *frags)) fail_msg("\"%s\" not in: %s", *frags, text);
}

/* A request of one input, float32 [rows, cols] = base + i (i the flat index). */
static sip_request_t *freq(const char *model_name, const char *input, int rows, int cols,
                           const float *v) {
  sip_request_t *r = sip_request_new(model_name);
  assert_non_null(r);
  int64_t d[2] = {rows, cols};
  assert_null(sip_request_add_input(r, sip_tensor_new_copy(input, SIP_DTYPE_FLOAT32, 2, d, v,
                                                           (size_t)(rows * cols) * sizeof(float))));
  return r;
}

/* Pipeline "bad" is FAILED with a reason holding each fragment, the good
 * pipeline beside it READY, the pools as they were; the JSON lists bad's
 * error and stages but no inputs or outputs; a submission is UNAVAILABLE
 * naming the pipeline and the reason. */
static void expect_failed(world_t *w, const char *const *frags) {
  sip__model_t *m = model(w, "bad");
  assert_string_equal(m->vt->kind, "pipeline");
  const char *why = NULL;
  assert_int_equal(m->vt->state(m, &why), SIP__MODEL_FAILED);
  assert_non_null(why);
  assert_has(why, frags);
  sip__model_io_t io;
  assert_int_equal(m->vt->describe_io(m, &io), 0);
  char reason[1024];
  snprintf(reason, sizeof reason, "%s", why);

  sip__model_t *g = model(w, "good");
  const char *gwhy = "unset";
  assert_int_equal(g->vt->state(g, &gwhy), SIP__MODEL_READY);
  assert_null(gwhy);
  assert_pools_ready(w);

  json_t *a = sip__pipelines_json(w->ps, SIP_INFO_POOLS);
  int seen = 0;
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *o = json_array_get(a, i);
    if (strcmp(json_string_value(json_object_get(o, "name")), "bad")) continue;
    seen = 1;
    assert_string_equal(json_string_value(json_object_get(o, "state")), "FAILED");
    assert_string_equal(json_string_value(json_object_get(o, "error")), reason);
    assert_int_equal(json_array_size(json_object_get(o, "inputs")), 0);
    assert_int_equal(json_array_size(json_object_get(o, "outputs")), 0);
    assert_true(json_array_size(json_object_get(o, "stages")) >= 1);
  }
  json_decref(a);
  assert_true(seen);

  rec_t rec;
  rec_init(&rec);
  float v[4] = {1, 2, 3, 4};
  sip_request_t *r = freq("bad", "input", 1, 4, v);
  r->done = on_done;
  r->user = &rec;
  sip_error_t *e = m->vt->submit(m, r);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_UNAVAILABLE);
  char want[1200];
  snprintf(want, sizeof want, "pipeline 'bad' failed to build: %s", reason);
  assert_string_equal(sip_error_message(e), want);
  sip_error_free(e);
  assert_int_equal(rec_count(&rec), 0);
  rec_destroy(&rec);
}

/* Builds `cfg` and expects pipeline "bad" FAILED as expect_failed says. */
static void build_failed(sip__config_t *cfg, const char *const *frags) {
  world_t w;
  world_up(&w, cfg);
  expect_failed(&w, frags);
  world_down(&w);
}

/* The parser refuses `pipelines` with a message holding each fragment. */
static void expect_refused(const char *pipelines, const char *const *frags) {
  sip__config_t *cfg = NULL;
  sip_error_t *e = parse(pipelines, &cfg);
  assert_non_null(e);
  assert_null(cfg);
  assert_has(sip_error_message(e), frags);
  sip_error_free(e);
}

/* The working pipeline every build-error case has beside "bad". */
#define GOOD                                                                   \
  "  - name: good\n"                                                           \
  "    stages:\n"                                                              \
  "      - {name: a, pool: echo}\n"                                            \
  "      - {name: sm, type: transform, operation: softmax}\n"                  \
  "      - {name: k, type: transform, operation: topk, k: 2, input_mapping: {input: sm.output}}\n" \
  "    outputs: [sm.output, k.indices, a.output]\n"

static int setup(void **state) {
  (void)state;
  sip__log_set_level(SIP__LOG_ERROR + 1);
  return 0;
}

/* ---- build errors ------------------------------------------------------------ */

static void test_unknown_pool(void **state) {
  (void)state;
  /* The parser refuses an unknown pool outright (no repository could
   * provide it); a pool can also be gone by build time. */
  static const char *const pfrags[] = {"<test>:", "ghost", NULL};
  expect_refused(GOOD "  - {name: bad, stages: [{name: a, pool: ghost}]}\n", pfrags);

  sip__config_t *cfg = parse_ok(GOOD "  - {name: bad, stages: [{name: a, pool: echo}, {name: b, pool: echo}]}\n");
  set_str(&stage_cfg(cfg, "bad", "a")->pool, "ghost");
  static const char *const frags[] = {"stage 'a'", "no pool named 'ghost'", NULL};
  build_failed(cfg, frags);
}

static void test_failed_pool(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 's'", "pool 'rotten' is FAILED",
                                      "builtin backend option dtype: 'nope'", NULL};
  build_failed(parse_ok(GOOD "  - {name: bad, stages: [{name: s, pool: rotten}]}\n"), frags);
}

static void test_input_mapping_unknown_stage(void **state) {
  (void)state;
  static const char *const pfrags[] = {"<test>:", "nosuch.output", "names no earlier stage of pipeline 'bad'", NULL};
  expect_refused(GOOD "  - name: bad\n"
                      "    stages:\n"
                      "      - {name: a, pool: echo}\n"
                      "      - {name: b, pool: echo, input_mapping: {input: nosuch.output}}\n",
                 pfrags);

  /* Past the parser: the builder says the same. */
  sip__config_t *cfg = parse_ok(GOOD "  - name: bad\n"
                                    "    stages:\n"
                                    "      - {name: a, pool: echo}\n"
                                    "      - {name: b, pool: echo, input_mapping: {input: a.output}}\n");
  sip__stage_config_t *b = stage_cfg(cfg, "bad", "b");
  assert_int_equal(b->n_input_mapping, 1);
  set_kv_value(&b->input_mapping[0], "nosuch.output");
  static const char *const frags[] = {"stage 'b' input 'input'", "'nosuch.output' names no earlier stage", NULL};
  build_failed(cfg, frags);
}

static void test_input_mapping_unknown_output(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'b' input 'input'", "stage 'a' has no output 'nope'",
                                      "(it keeps: 'output')", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: a, pool: echo}\n"
                             "      - {name: b, pool: echo, input_mapping: {input: a.nope}}\n"), frags);
}

static void test_input_mapping_not_an_input(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'a'", "input_mapping names 'q'", "not an input of the stage", NULL};
  build_failed(parse_ok(GOOD "  - {name: bad, stages: [{name: a, pool: echo, input_mapping: {q: pipeline.x}}]}\n"), frags);
}

static void test_output_filter_unknown(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'k'", "output_filter names 'probs'",
                                      "which the stage does not produce", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: a, pool: echo}\n"
                             "      - {name: k, type: transform, operation: topk, output_filter: [indices, probs]}\n"), frags);
}

/* A reference to an output the previous stage filtered away. */
static void test_filtered_output(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'c' input 'input'", "stage 'k' has no output 'values'",
                                      "(it keeps: 'indices')", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: k, type: transform, operation: topk, output_filter: [indices]}\n"
                             "      - {name: c, type: transform, operation: cast, to: float32, from: float32, "
                             "input_mapping: {input: k.values}}\n"), frags);
}

/* Default wiring: the previous stage keeps no output of the input's name
 * nor at its position, no earlier stage has one and the pipeline has no
 * input of that name (a pipeline input of that name would be taken). */
static void test_default_wiring_no_output(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'e' input 'input'", "the previous stage 'k'",
                                      "no output of that name or position", "add an input_mapping", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: k, type: transform, operation: topk, output_filter: [indices], "
                             "input_mapping: {input: pipeline.x}}\n"
                             "      - {name: e, pool: echo}\n"), frags);
}

static void test_when_unknown_stage(void **state) {
  (void)state;
  static const char *const pfrags[] = {"<test>:", "'ghost.output' names no earlier stage of pipeline 'bad'", NULL};
  expect_refused(GOOD "  - name: bad\n"
                      "    stages:\n"
                      "      - {name: a, pool: echo}\n"
                      "      - {name: b, pool: echo, when: 'len(ghost.output) > 0'}\n",
                 pfrags);

  /* Past the parser: the builder refuses it too. */
  sip__config_t *cfg = parse_ok(GOOD "  - name: bad\n"
                                    "    stages:\n"
                                    "      - {name: a, pool: echo}\n"
                                    "      - {name: b, pool: echo, when: 'len(a.output) > 0'}\n");
  set_str(&stage_cfg(cfg, "bad", "b")->when, "len(ghost.output) > 0");
  static const char *const frags[] = {"stage 'b' when", "'ghost.output' names no earlier stage", NULL};
  build_failed(cfg, frags);
}

static void test_when_unknown_output(void **state) {
  (void)state;
  static const char *const frags[] = {"stage 'b' when", "stage 'a' has no output 'nope'", NULL};
  build_failed(parse_ok(GOOD "  - name: bad\n"
                             "    stages:\n"
                             "      - {name: a, pool: echo}\n"
                             "      - {name: b, pool: echo, when: 'max(a.nope) > 0', input_mapping: {input: a.output}}\n"), frags);
}

static void test_transform_bad_option(void **state) {
  (void)state;
  static const char *const pfrags[] = {"<test>:", "transform softmax: option axis: 'zz'", NULL};
  expect_refused(GOOD "  - {name: bad, stages: [{name: t, type: transform, operation: softmax, axis: zz}]}\n",
                 pfrags);
  static const char *const kfrags[] = {"<test>:", "axiz", NULL};
  expect_refused(GOOD "  - {name: bad, stages: [{name: t, type: transform, operation: softmax, axiz: 1}]}\n",
                 kfrags);

  /* Past the parser: the builder fails the pipeline with the transform's
   * own message. */
  sip__config_t *cfg = parse_ok(GOOD "  - name: bad\n"
                      "    stages:\n"
                      "      - {name: a, pool: echo}\n"
                      "      - {name: t, type: transform, operation: softmax, axis: 1}\n");
  set_option(stage_cfg(cfg, "bad", "t"), "axis", "zz");
  static const char *const frags[] = {"stage 't'", "transform softmax: option axis: 'zz'",
                                      "expected an integer", NULL};
  build_failed(cfg, frags);
}

static void test_outputs_unknown(void **state) {
  (void)state;
  static const char *const frags[] = {"outputs:", "stage 'a' has no output 'nope'", NULL};
  build_failed(parse_ok(GOOD "  - {name: bad, outputs: [a.output, a.nope], stages: [{name: a, pool: echo}]}\n"), frags);
}

/* ---- a good pipeline's typed inputs and outputs ------------------------------ */

static const sip_io_desc_t *desc(const sip_io_desc_t *d, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return &d[i];
  fail_msg("no descriptor '%s'", name);
  return NULL;
}

static void test_typed_io(void **state) {
  (void)state;
  world_t w;
  world_up(&w, parse_ok(GOOD
                        "  - name: two\n"
                        "    stages:\n"
                        "      - {name: a, pool: echo, input_mapping: {input: pipeline.x}}\n"
                        "      - {name: b, pool: ints, input_mapping: {input: pipeline.ids}, "
                        "when: 'len(pipeline.flag) > 0'}\n"));
  /* good: one input as stage a takes it; outputs in the order listed,
   * the two named "output" qualified by their stage. */
  sip__model_t *m = model(&w, "good");
  sip__model_io_t io;
  assert_int_equal(m->vt->describe_io(m, &io), 1);
  assert_int_equal(io.n_inputs, 1);
  assert_string_equal(io.inputs[0].name, "input");
  assert_int_equal(io.inputs[0].dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(io.inputs[0].rank, 2);
  assert_int_equal(io.inputs[0].dims[0], -1);
  assert_int_equal(io.inputs[0].dims[1], 4);
  assert_int_equal(io.n_outputs, 3);
  assert_string_equal(io.outputs[0].name, "sm.output");
  assert_int_equal(io.outputs[0].dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(io.outputs[0].rank, -1); /* a transform's output: any shape */
  assert_string_equal(io.outputs[1].name, "indices");
  assert_int_equal(io.outputs[1].dtype, SIP_DTYPE_INT64);
  assert_string_equal(io.outputs[2].name, "a.output");
  assert_int_equal(io.outputs[2].dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(io.outputs[2].rank, 2);
  assert_int_equal(io.outputs[2].dims[1], 4);

  /* two: inputs by the pipeline names the stages map; one only a
   * condition reads (no type); default outputs: every sink's. */
  m = model(&w, "two");
  assert_int_equal(m->vt->describe_io(m, &io), 1);
  assert_int_equal(io.n_inputs, 3);
  const sip_io_desc_t *x = desc(io.inputs, io.n_inputs, "x");
  assert_int_equal(x->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(x->rank, 2);
  const sip_io_desc_t *ids = desc(io.inputs, io.n_inputs, "ids");
  assert_int_equal(ids->dtype, SIP_DTYPE_INT64);
  assert_int_equal(ids->rank, 1);
  assert_int_equal(ids->dims[0], -1);
  const sip_io_desc_t *flag = desc(io.inputs, io.n_inputs, "flag");
  assert_int_equal(flag->dtype, SIP_DTYPE_INVALID);
  assert_int_equal(flag->rank, -1);
  assert_int_equal(io.n_outputs, 2);
  assert_int_equal(desc(io.outputs, 2, "a.output")->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(desc(io.outputs, 2, "b.output")->dtype, SIP_DTYPE_INT64);

  /* The same in the pools introspection. */
  json_t *a = sip__pipelines_json(w.ps, SIP_INFO_POOLS);
  json_error_t je;
  json_t *want = json_loads(
      "[{\"name\": \"input\", \"dtype\": \"float32\", \"shape\": [-1, 4]}]", 0, &je);
  json_t *want_out = json_loads(
      "[{\"name\": \"sm.output\", \"dtype\": \"float32\", \"shape\": null},"
      " {\"name\": \"indices\", \"dtype\": \"int64\", \"shape\": null},"
      " {\"name\": \"a.output\", \"dtype\": \"float32\", \"shape\": [-1, 4]}]", 0, &je);
  int seen = 0;
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *o = json_array_get(a, i);
    if (strcmp(json_string_value(json_object_get(o, "name")), "good")) continue;
    seen = 1;
    assert_string_equal(json_string_value(json_object_get(o, "state")), "READY");
    assert_true(json_is_null(json_object_get(o, "error")));
    assert_true(json_equal(json_object_get(o, "inputs"), want));
    assert_true(json_equal(json_object_get(o, "outputs"), want_out));
    json_t *st = json_object_get(o, "stages");
    assert_int_equal(json_array_size(st), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(st, 0), "pool")), "echo");
    assert_string_equal(json_string_value(json_object_get(json_array_get(st, 1), "operation")), "softmax");
  }
  assert_true(seen);
  json_decref(want);
  json_decref(want_out);
  json_decref(a);
  world_down(&w);
}

/* ---- the re-check when a pool changes ------------------------------------------ */

static void test_check_pool(void **state) {
  (void)state;
  world_t w;
  world_up(&w, parse_ok(GOOD "  - {name: bad, stages: [{name: s, pool: rotten}]}\n"
                             "  - {name: also_ints, stages: [{name: i, pool: ints, output_filter: [output]}]}\n"));
  sip_io_desc_t in = {.name = "input", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 4}};
  sip_io_desc_t out = {.name = "output", .dtype = SIP_DTYPE_FLOAT32, .rank = 2, .dims = {-1, 4}};
  sip__model_io_t io = {&in, &out, 1, 1};
  /* The same I/O fits, and so does a dim the old version left dynamic
   * becoming fixed. */
  assert_null(sip__pipelines_check_pool(w.ps, "echo", &io));
  in.dims[0] = 2;
  out.dims[0] = 2;
  assert_null(sip__pipelines_check_pool(w.ps, "echo", &io));
  in.dims[0] = out.dims[0] = -1;

  char *why;
  /* A fixed dim that changes, or a rank, does not fit. */
  in.dims[1] = 8;
  why = sip__pipelines_check_pool(w.ps, "echo", &io);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': input 'input' has shape [-1, 8] in the new "
                           "version; the stage feeds [-1, 4]");
  sip__free(why);
  in.dims[1] = 4;
  out.rank = 3;
  out.dims[2] = 1;
  why = sip__pipelines_check_pool(w.ps, "echo", &io);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': output 'output' has shape [-1, 4, 1] in the "
                           "new version; the pipeline reads [-1, 4]");
  sip__free(why);
  out.rank = 2;
  /* A pool no pipeline uses. */
  assert_null(sip__pipelines_check_pool(w.ps, "nobody", NULL));

  in.dtype = SIP_DTYPE_INT64;
  why = sip__pipelines_check_pool(w.ps, "echo", &io);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': input 'input' is int64 in the new version; "
                           "the stage feeds float32");
  sip__free(why);
  in.dtype = SIP_DTYPE_FLOAT32;

  out.dtype = SIP_DTYPE_FLOAT16;
  why = sip__pipelines_check_pool(w.ps, "echo", &io);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': output 'output' is float16 in the new "
                           "version; the pipeline reads float32");
  sip__free(why);
  out.dtype = SIP_DTYPE_FLOAT32;

  sip_io_desc_t out_y = out;
  out_y.name = "y";
  sip__model_io_t io_y = {&in, &out_y, 1, 1};
  why = sip__pipelines_check_pool(w.ps, "echo", &io_y);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': it gives output 'output', which the new "
                           "version does not make");
  sip__free(why);

  sip_io_desc_t two_in[2] = {in, {.name = "mask", .dtype = SIP_DTYPE_BOOL, .rank = 1, .dims = {-1}}};
  sip__model_io_t io2 = {two_in, &out, 2, 1};
  why = sip__pipelines_check_pool(w.ps, "echo", &io2);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': the new version also takes input 'mask', "
                           "which the stage does not feed");
  sip__free(why);

  sip_io_desc_t in_z = in;
  in_z.name = "z";
  sip__model_io_t io_z = {&in_z, &out, 1, 1};
  why = sip__pipelines_check_pool(w.ps, "echo", &io_z);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'good' stage 'a': it feeds input 'input', which the new "
                           "version does not take");
  sip__free(why);

  /* The pool going away. */
  why = sip__pipelines_check_pool(w.ps, "ints", NULL);
  assert_non_null(why);
  assert_string_equal(why, "pipeline 'also_ints' stage 'i' runs on it");
  sip__free(why);
  /* A FAILED pipeline is not checked. */
  assert_null(sip__pipelines_check_pool(w.ps, "rotten", NULL));
  world_down(&w);
}

/* ---- running ---------------------------------------------------------------- */

static void test_run_numbers(void **state) {
  (void)state;
  char yaml[4096];
  snprintf(yaml, sizeof yaml, "%spipeline_sessions:\n%s", POOLS, GOOD);
  sip_server_t *s = new_server_yaml(yaml);
  float x[8] = {0.5f, -1.0f, 2.0f, 1.25f, /* row 0 */ 3.0f, 0.0f, -2.5f, 1.0f /* row 1 */};
  sip_response_t *resp = NULL;
  assert_null(sip_server_infer(s, freq("good", "input", 2, 4, x), &resp));
  if (sip_response_code(resp) != SIP_OK)
    fail_msg("%s: %s", sip_code_name(sip_response_code(resp)), sip_response_message(resp));

  /* softmax along the last axis, and its top-2 indices, computed here. */
  float sm[8];
  int64_t top[4];
  for (int r = 0; r < 2; r++) {
    float mx = x[r * 4];
    for (int i = 1; i < 4; i++) mx = fmaxf(mx, x[r * 4 + i]);
    double sum = 0;
    for (int i = 0; i < 4; i++) sum += exp((double)(x[r * 4 + i] - mx));
    for (int i = 0; i < 4; i++) sm[r * 4 + i] = (float)(exp((double)(x[r * 4 + i] - mx)) / sum);
    int best = 0, second = -1;
    for (int i = 1; i < 4; i++)
      if (x[r * 4 + i] > x[r * 4 + best]) best = i;
    for (int i = 0; i < 4; i++)
      if (i != best && (second < 0 || x[r * 4 + i] > x[r * 4 + second])) second = i;
    top[r * 2] = best;
    top[r * 2 + 1] = second;
  }
  assert_int_equal(top[0], 2);
  assert_int_equal(top[1], 3);
  assert_int_equal(top[2], 0);
  assert_int_equal(top[3], 3);

  const sip_tensor_t *t = sip_response_output_by_name(resp, "sm.output");
  assert_non_null(t);
  assert_int_equal(t->dtype, SIP_DTYPE_FLOAT32);
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->dims[0], 2);
  assert_int_equal(t->dims[1], 4);
  for (int i = 0; i < 8; i++)
    if (fabsf(((const float *)t->data)[i] - sm[i]) > 1e-6f)
      fail_msg("sm.output[%d] = %g, want %g", i, ((const float *)t->data)[i], sm[i]);
  t = sip_response_output_by_name(resp, "indices");
  assert_non_null(t);
  assert_int_equal(t->dtype, SIP_DTYPE_INT64);
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->dims[1], 2);
  assert_memory_equal(t->data, top, sizeof top);
  t = sip_response_output_by_name(resp, "a.output");
  assert_non_null(t);
  assert_memory_equal(t->data, x, sizeof x);
  /* Each stage's outputs too, as stage/output. */
  t = sip_response_output_by_name(resp, "k/values");
  assert_non_null(t);
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 2; j++)
      assert_true(fabsf(((const float *)t->data)[r * 2 + j] - sm[r * 4 + top[r * 2 + j]]) <= 1e-6f);
  assert_non_null(sip_response_output_by_name(resp, "a/output"));
  assert_non_null(sip_response_output_by_name(resp, "sm/output"));
  assert_int_equal(sip_response_output_count(resp), 3 + 4);
  /* The message tells each stage's story. */
  json_error_t je;
  json_t *info = json_loads(sip_response_message(resp), 0, &je);
  assert_non_null(info);
  assert_string_equal(json_string_value(json_object_get(info, "pipeline")), "good");
  json_t *st = json_object_get(info, "stages");
  static const char *const names[] = {"a", "sm", "k"};
  for (int i = 0; i < 3; i++)
    assert_string_equal(json_string_value(json_object_get(json_object_get(st, names[i]), "status")), "ran");
  json_decref(info);
  sip_response_free(resp);

  /* Asking for one output by name gives just that. */
  sip_request_t *r = freq("good", "input", 2, 4, x);
  assert_null(sip_request_add_output(r, "indices"));
  assert_null(sip_server_infer(s, r, &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  assert_int_equal(sip_response_output_count(resp), 1);
  assert_memory_equal(sip_response_output(resp, 0)->data, top, sizeof top);
  sip_response_free(resp);
  /* And an output it cannot give is refused. */
  r = freq("good", "input", 2, 4, x);
  assert_null(sip_request_add_output(r, "nope"));
  sip_error_t *e = sip_server_infer(s, r, &resp);
  assert_non_null(e);
  assert_int_equal(sip_error_code(e), SIP_INVALID_ARGUMENT);
  assert_non_null(strstr(sip_error_message(e), "pipeline 'good' has no output 'nope'"));
  sip_error_free(e);
  sip_server_free(s);
}

/* A `when:` on a stage's output: skipped below the threshold, run above. */
static void test_run_condition(void **state) {
  (void)state;
  char yaml[4096];
  snprintf(yaml, sizeof yaml,
           "%spipeline_sessions:\n"
           "  - name: gate\n"
           "    stages:\n"
           "      - {name: a, pool: echo}\n"
           "      - {name: sm, type: transform, operation: softmax, when: 'max(a.output) > 10'}\n",
           POOLS);
  sip_server_t *s = new_server_yaml(yaml);
  float lo[4] = {1, 2, 3, 4}, hi[4] = {1, 2, 3, 40};
  sip_response_t *resp = NULL;
  assert_null(sip_server_infer(s, freq("gate", "input", 1, 4, lo), &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  assert_null(sip_response_output_by_name(resp, "sm/output"));
  assert_non_null(sip_response_output_by_name(resp, "a/output"));
  json_error_t je;
  json_t *info = json_loads(sip_response_message(resp), 0, &je);
  assert_non_null(info);
  assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(info, "stages"), "sm"), "status")),
                      "skipped");
  json_decref(info);
  sip_response_free(resp);

  assert_null(sip_server_infer(s, freq("gate", "input", 1, 4, hi), &resp));
  assert_int_equal(sip_response_code(resp), SIP_OK);
  const sip_tensor_t *t = sip_response_output_by_name(resp, "output");
  assert_non_null(t);
  double sum = 0;
  for (int i = 0; i < 4; i++) sum += exp((double)(hi[i] - 40.0f));
  for (int i = 0; i < 4; i++)
    assert_true(fabs(((const float *)t->data)[i] - exp((double)(hi[i] - 40.0f)) / sum) <= 1e-6);
  sip_response_free(resp);

  json_t *root = status(s);
  json_t *pls = json_object_get(root, "pipelines");
  json_t *g = json_array_get(pls, 0);
  assert_string_equal(json_string_value(json_object_get(g, "name")), "gate");
  json_t *sm = json_array_get(json_object_get(g, "stages"), 1);
  assert_int_equal(jint(sm, "ran"), 1);
  assert_int_equal(jint(sm, "skipped"), 1);
  assert_int_equal(jint(json_object_get(g, "requests"), "OK"), 2);
  json_decref(root);
  sip_server_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unknown_pool),
      cmocka_unit_test(test_failed_pool),
      cmocka_unit_test(test_input_mapping_unknown_stage),
      cmocka_unit_test(test_input_mapping_unknown_output),
      cmocka_unit_test(test_input_mapping_not_an_input),
      cmocka_unit_test(test_output_filter_unknown),
      cmocka_unit_test(test_filtered_output),
      cmocka_unit_test(test_default_wiring_no_output),
      cmocka_unit_test(test_when_unknown_stage),
      cmocka_unit_test(test_when_unknown_output),
      cmocka_unit_test(test_transform_bad_option),
      cmocka_unit_test(test_outputs_unknown),
      cmocka_unit_test(test_typed_io),
      cmocka_unit_test(test_check_pool),
      cmocka_unit_test(test_run_numbers),
      cmocka_unit_test(test_run_condition),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
