/* Helpers shared by the pipeline unit tests (test_pipeline_build_errors.c,
 * test_pipeline_build_io.c, test_pipeline_run.c): an engine set up by hand
 * from a config's builtin pools with its pipelines built
 * (sip__pipelines_new, _build), edits of the parsed config the parser
 * would refuse, and checks of a pipeline that failed to build and of a
 * config the parser refuses. */
#ifndef SIP_TEST_PIPELINE_HELPERS_H
#define SIP_TEST_PIPELINE_HELPERS_H

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
#include "session/registry.h"
#include "sip/sip.h"

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
static inline sip_error_t *parse(const char *pipelines, sip__config_t **out) {
  char yaml[8192];
  snprintf(yaml, sizeof yaml, "%spipeline_sessions:\n%s", POOLS, pipelines);
  return sip__config_load_string(yaml, strlen(yaml), "<test>", NULL, sip__backend_catalog(), out);
}

static inline sip__config_t *parse_ok(const char *pipelines) {
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
static inline void world_up(world_t *w, sip__config_t *cfg) {
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

static inline void world_down(world_t *w) {
  for (;;) {
    sip__pool_t *p = sip__registry_first_pool(&w->e);
    if (!p) break;
    sip__registry_drain_free(&w->e, p);
  }
  sip__pipelines_free(w->ps);
  sip__engine_destroy(&w->e);
  sip__config_free(w->cfg);
}

static inline sip__model_t *model(world_t *w, const char *name) {
  sip_error_t *e = NULL;
  sip__model_t *m = sip__registry_find_model(&w->e, name, NULL, &e);
  if (!m) {
    sip_error_free(e);
    fail_msg("no model '%s'", name);
  }
  return m;
}

static inline void assert_pools_ready(world_t *w) {
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
static inline sip__stage_config_t *stage_cfg(sip__config_t *cfg, const char *pl,
                                             const char *stage) {
  for (size_t i = 0; i < cfg->n_pipelines; i++) {
    if (strcmp(cfg->pipelines[i].name, pl)) continue;
    for (size_t k = 0; k < cfg->pipelines[i].n_stages; k++)
      if (!strcmp(cfg->pipelines[i].stages[k].name, stage)) return &cfg->pipelines[i].stages[k];
  }
  fail_msg("no stage %s.%s", pl, stage);
  return NULL;
}

static inline void set_str(char **slot, const char *v) {
  sip__free(*slot);
  *slot = sip__strdup(v);
  assert_non_null(*slot);
}

/* The same for a key-value pair's value (const in the struct, owned). */
static inline void set_kv_value(sip_kv_t *kv, const char *v) {
  sip__free((void *)kv->value);
  kv->value = sip__strdup(v);
  assert_non_null(kv->value);
}

static inline void set_option(sip__stage_config_t *st, const char *key, const char *v) {
  for (size_t i = 0; i < st->n_options; i++)
    if (!strcmp(st->options[i].key, key)) {
      set_kv_value(&st->options[i], v);
      return;
    }
  fail_msg("stage %s has no option %s", st->name, key);
}

static inline void assert_has(const char *text, const char *const *frags) {
  for (; *frags; frags++)
    if (!strstr(text, *frags)) fail_msg("\"%s\" not in: %s", *frags, text);
}

/* A request of one input, float32 [rows, cols] = base + i (i the flat index). */
static inline sip_request_t *freq(const char *model_name, const char *input, int rows, int cols,
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
static inline void expect_failed(world_t *w, const char *const *frags) {
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
static inline void build_failed(sip__config_t *cfg, const char *const *frags) {
  world_t w;
  world_up(&w, cfg);
  expect_failed(&w, frags);
  world_down(&w);
}

/* The parser refuses `pipelines` with a message holding each fragment. */
static inline void expect_refused(const char *pipelines, const char *const *frags) {
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

static inline int setup(void **state) {
  (void)state;
  sip__log_set_level(SIP__LOG_ERROR + 1);
  return 0;
}

#endif
