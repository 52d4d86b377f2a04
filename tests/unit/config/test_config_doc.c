/* Unit tests for the configuration reference (src/config/doc.c): every key
 * of every table has a doc line and appears in the generated page, and the
 * key tables of the hand-parsed maps (preprocess, pipelines, stages) hold
 * exactly the keys their parsers accept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backends.h"
#include "config/parse.h"
#include "core/core.h"

static char *doc_page(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  assert_int_equal(sip__config_doc_markdown(f), 0);
  assert_int_equal(fclose(f), 0);
  return buf;
}

/* Whether the page has a table row for `key`. */
static int has_row(const char *page, const char *key) {
  char row[KEY_MAX];
  snprintf(row, sizeof row, "\n| `%s` |", key);
  return strstr(page, row) != NULL;
}

static void check_section(const sip__section_t *s, const char *page, const char *path) {
  for (size_t i = 0; i < s->n; i++) {
    const sip__field_t *f = &s->fields[i];
    if (!f->doc || !f->doc[0]) fail_msg("%s.%s has no doc line", path, f->name);
    if (strchr(f->doc, '\n')) fail_msg("%s.%s: the doc is more than one line", path, f->name);
    if (!has_row(page, f->name)) fail_msg("docs/config.md has no row for %s.%s", path, f->name);
    if (f->type == F_SECTION) check_section(f->section, page, f->name);
  }
}

static void check_keys(const sip__cfg_key_doc_t *k, const char *page, const char *path) {
  for (; k->name; k++) {
    if (!k->doc || !k->doc[0] || !k->type || !k->type[0])
      fail_msg("%s.%s has no doc line or type", path, k->name);
    if (!has_row(page, k->name)) fail_msg("docs/config.md has no row for %s.%s", path, k->name);
  }
}

static void test_every_key_documented(void **state) {
  (void)state;
  char *page = doc_page();
  check_section(&sip__cfg_top_section, page, "(top)");
  check_section(&sip__cfg_pool_section, page, "session_pools[]");
  check_keys(sip__cfg_preprocess_keys, page, "preprocess");
  check_keys(sip__cfg_pipeline_keys, page, "pipeline_sessions[]");
  check_keys(sip__cfg_stage_keys, page, "stages[]");
  assert_non_null(strstr(page, "### `config.yaml`"));
  assert_non_null(strstr(page, "### `session_pools[].dynamic_batching`"));
  assert_non_null(strstr(page, "### `server`"));
  free(page);
}

/* The error of `yaml`, copied; "" when it loads. */
static void load_msg(const char *yaml, char *msg, size_t n) {
  sip__config_t *cfg = NULL;
  sip_error_t *err =
      sip__config_load_string(yaml, strlen(yaml), "cfg.yaml", "/base", sip__backend_catalog(), &cfg);
  snprintf(msg, n, "%s", err ? sip_error_message(err) : "");
  sip_error_free(err);
  sip__config_free(cfg);
}

/* The keys the parser names after `marker` in its unknown-key message, in
 * order, against the table (`skip`: a table key the message leaves out). */
static void check_listed(const char *msg, const char *marker, const sip__cfg_key_doc_t *k,
                         const char *skip) {
  const char *p = strstr(msg, marker);
  if (!p) fail_msg("no \"%s\" in: %s", marker, msg);
  p += strlen(marker);
  for (; k->name; k++) {
    if (skip && !strcmp(k->name, skip)) continue;
    size_t l = strlen(k->name);
    if (strncmp(p, k->name, l) || (p[l] && p[l] != ',' && p[l] != ' '))
      fail_msg("the parser lists \"%s\" where the table has %s", p, k->name);
    p += l;
    if (*p == ',') p += 2;
  }
  if (*p && *p != ' ') fail_msg("the parser accepts keys the table lacks: %s", p);
}

#define PIPE_HEAD "session_pools:\n  - {name: p, backend: builtin}\npipeline_sessions:\n"

static void test_pipeline_keys_match_parser(void **state) {
  (void)state;
  char msg[2048], yaml[1024];
  load_msg(PIPE_HEAD "  - {name: x, stages: [{name: a, pool: p}], bogus: 1}\n", msg, sizeof msg);
  check_listed(msg, "unknown key; expected one of: ", sip__cfg_pipeline_keys, NULL);
  load_msg(PIPE_HEAD "  - {name: x, stages: [{name: a, pool: p, bogus: 1}]}\n", msg, sizeof msg);
  check_listed(msg, "unknown key for a model stage; expected one of: ", sip__cfg_stage_keys, NULL);

  /* Every documented key is one the parser takes. */
  load_msg(PIPE_HEAD "  - name: x\n    early_exit_condition: \"len(a.output) == 0\"\n"
                     "    outputs: [a.output]\n    stages: [{name: a, pool: p}]\n",
           msg, sizeof msg);
  assert_string_equal(msg, "");
  for (const sip__cfg_key_doc_t *k = sip__cfg_stage_keys; k->name; k++) {
    static const char *const model_stage =
        "  - {name: x, stages: [{name: a, pool: p}, {name: b, %s}]}\n";
    const char *v = !strcmp(k->name, "name")            ? "name: b"
                    : !strcmp(k->name, "type")          ? "type: model, pool: p"
                    : !strcmp(k->name, "pool")          ? "pool: p"
                    : !strcmp(k->name, "model_path")    ? "model_path: m.onnx"
                    : !strcmp(k->name, "pool_size")     ? "model_path: m.onnx, pool_size: 2"
                    : !strcmp(k->name, "operation")     ? "type: transform, operation: identity"
                    : !strcmp(k->name, "input_mapping") ? "pool: p, input_mapping: {x: a.output}"
                    : !strcmp(k->name, "output_filter") ? "pool: p, output_filter: [output]"
                    : !strcmp(k->name, "when")          ? "pool: p, when: \"len(a.output) > 0\""
                                                        : NULL;
    if (!v) fail_msg("no test config for stage key %s", k->name);
    char body[256];
    snprintf(body, sizeof body, model_stage, v);
    snprintf(yaml, sizeof yaml, PIPE_HEAD "%s", body);
    load_msg(yaml, msg, sizeof msg);
    if (strstr(msg, "unknown key")) fail_msg("stage key %s is refused: %s", k->name, msg);
  }
}

static void test_preprocess_keys_match_parser(void **state) {
  (void)state;
  char msg[2048], yaml[512];
  const char *head = "session_pools:\n  - name: p\n    model_path: m.onnx\n    preprocess: ";
  snprintf(yaml, sizeof yaml, "%s{bogus: true}\n", head);
  load_msg(yaml, msg, sizeof msg);
  /* decode_image is another name for decode; the message names decode. */
  check_listed(msg, "is not a preprocess step; expected one of: ", sip__cfg_preprocess_keys,
               "decode_image");
  for (const sip__cfg_key_doc_t *k = sip__cfg_preprocess_keys; k->name; k++) {
    snprintf(yaml, sizeof yaml, "%s{%s: %s}\n", head, k->name,
             !strcmp(k->name, "input") ? "x" : "true");
    load_msg(yaml, msg, sizeof msg);
    if (strstr(msg, "is not a preprocess step"))
      fail_msg("preprocess key %s is refused: %s", k->name, msg);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_key_documented),
      cmocka_unit_test(test_pipeline_keys_match_parser),
      cmocka_unit_test(test_preprocess_keys_match_parser),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
