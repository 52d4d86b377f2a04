/* sip — docs/config.md, written from the parser's own tables: the field
 * tables of every table-driven section and the key tables of the
 * hand-parsed maps (preprocess, pipelines, stages). `make docs` runs it
 * through docs/gen/config_doc.c; the ctest docs/config fails when the
 * committed file differs. */
#include "config/parse.h"

#include <stdio.h>
#include <string.h>

/* A table cell: '|' escaped, '<' and '>' as entities ("<stage>.<output>"
 * is text, not HTML). */
static void cell(FILE *out, const char *s) {
  fputc(' ', out);
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", out);
    else if (*s == '>') fputs("&gt;", out);
    else if (*s == '|') fputs("\\|", out);
    else fputc(*s, out);
  }
  fputs(" |", out);
}

static void cellf(FILE *out, const char *fmt, long long a, long long b) {
  char buf[128];
  snprintf(buf, sizeof buf, fmt, a, b);
  cell(out, buf);
}

static const char *type_of(char *buf, size_t n, const sip__field_t *f, const char *path) {
  switch (f->type) {
  case F_INT:
  case F_INT64:
    return "integer";
  case F_BOOL:
    return "true or false";
  case F_SIZE:
    return "byte size: an integer, or a number with B, KiB, MiB or GiB (256MiB)";
  case F_SECTION:
    snprintf(buf, n, "map: see `%s%s%s`", path, path[0] ? "." : "", f->name);
    return buf;
  case F_ENUM:
  case F_WORD:
  case F_STRING:
  case F_CUSTOM:
    break;
  }
  return sip__cfg_expected(buf, n, f, IN_POOL | IN_MODEL);
}

/* A byte size as the largest exact unit. */
static void size_text(char *buf, size_t n, long long v) {
  static const char *const units[] = {"GiB", "MiB", "KiB"};
  for (int i = 0; i < 3; i++) {
    long long u = 1LL << (30 - 10 * i);
    if (v && v % u == 0) {
      snprintf(buf, n, "%lld%s", v / u, units[i]);
      return;
    }
  }
  snprintf(buf, n, "%lld", v);
}

static void default_cell(FILE *out, const sip__field_t *f) {
  char buf[64];
  bool numeric = f->type == F_INT || f->type == F_INT64 || f->type == F_SIZE;
  if (f->required) return cell(out, "required");
  if (numeric && (f->def < f->min || f->def > f->max)) return cell(out, "absent");
  switch (f->type) {
  case F_INT:
  case F_INT64:
    return cellf(out, "%lld", (long long)f->def, 0);
  case F_SIZE:
    size_text(buf, sizeof buf, (long long)f->def);
    return cell(out, buf);
  case F_BOOL:
    return cell(out, f->def ? "true" : "false");
  case F_ENUM:
    return cell(out, f->names[f->def]);
  case F_WORD:
  case F_STRING:
  case F_CUSTOM:
  case F_SECTION:
    break;
  }
  cell(out, "—");
}

static void bounds_cell(FILE *out, const sip__field_t *f) {
  char lo[64], hi[64], both[140];
  switch (f->type) {
  case F_INT:
  case F_INT64:
    return cellf(out, "%lld..%lld", (long long)f->min, (long long)f->max);
  case F_SIZE:
    size_text(lo, sizeof lo, (long long)f->min);
    size_text(hi, sizeof hi, (long long)f->max);
    snprintf(both, sizeof both, "%s..%s", lo, hi);
    return cell(out, both);
  default:
    return cell(out, "—");
  }
}

static void table_head(FILE *out) {
  fputs("| key | type / allowed values | default | bounds | description |\n", out);
  fputs("|---|---|---|---|---|\n", out);
}

/* One section's table (the fields visible `where`) under the heading
 * `path` ("": the top level), then its nested sections; with `ref`, the
 * nested sections are those already written under `ref` instead. */
static void section(FILE *out, const sip__section_t *s, const char *path, unsigned where,
                    const char *ref) {
  char buf[1024];
  if (path[0]) fprintf(out, "\n### `%s`\n\n", path);
  else fputs("\n### Top level\n\n", out);
  table_head(out);
  for (size_t i = 0; i < s->n; i++) {
    const sip__field_t *f = &s->fields[i];
    if (!visible(f, where)) continue;
    fprintf(out, "| `%s` |", f->name);
    cell(out, type_of(buf, sizeof buf, f, ref ? ref : path));
    default_cell(out, f);
    bounds_cell(out, f);
    cell(out, f->doc ? f->doc : "");
    fputc('\n', out);
  }
  for (size_t i = 0; i < s->n; i++) {
    const sip__field_t *f = &s->fields[i];
    if (ref || f->type != F_SECTION || !visible(f, where)) continue;
    char sub[KEY_MAX];
    snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", f->name);
    section(out, f->section, sub, where, NULL);
  }
}

static void keys(FILE *out, const sip__cfg_key_doc_t *k, const char *path) {
  fprintf(out, "\n### `%s`\n\n", path);
  table_head(out);
  for (; k->name; k++) {
    fprintf(out, "| `%s` |", k->name);
    cell(out, k->type);
    cell(out, k->def ? k->def : "—");
    cell(out, "—");
    cell(out, k->doc);
    fputc('\n', out);
  }
}

int sip__config_doc_markdown(FILE *out) {
  fputs("# Configuration reference\n\n"
        "<!-- Generated from the parser's tables (src/config) by docs/gen/config_doc.c; do not\n"
        "     edit: run `make docs`. -->\n\n"
        "Every key `sipd --config` reads, with its type, default, bounds and meaning. Unknown\n"
        "keys are errors; every error names `FILE:LINE:COL`, the key, what was wrong and what\n"
        "was expected. \"absent\" as a default: the limit or setting is off unless the key is\n"
        "given. Sizes take an integer or a number with a unit (`64KiB`, `256MiB`, `1GiB`).\n",
        out);

  fputs("\n## The config file\n", out);
  fputs("\n`session_pools` is required unless `server.model_repository` is set or\n"
        "`pipeline_sessions` stages bring their own pools (`model_path`).\n", out);
  section(out, &sip__cfg_top_section, "", 0, NULL);

  fputs("\n## Session pools\n\nEach entry of `session_pools` is a map:\n", out);
  section(out, &sip__cfg_pool_section, "session_pools[]", IN_POOL, NULL);
  fputs("\n`preprocess` is a map of steps, run in the order written; every key but `input` is a\n"
        "step (docs/preprocess.md). A step's value is a map of its operation's options, `true`\n"
        "(the defaults), `false` (no such step), or a scalar or list setting its main option.\n",
        out);
  keys(out, sip__cfg_preprocess_keys, "session_pools[].preprocess");

  fputs("\n## A repository model's config.yaml\n\n"
        "`<model_repository>/<model>/config.yaml` (optional) holds the settings of the model's\n"
        "pools: every `session_pools` key but `name` and `model_path` (they come from the\n"
        "directory), plus `version_policy`. Nested maps are as under `session_pools[]`.\n",
        out);
  section(out, &sip__cfg_pool_section, "config.yaml", IN_MODEL, "session_pools[]");

  fputs("\n## Pipelines\n\nEach entry of `pipeline_sessions` is a map (docs/pipelines.md):\n", out);
  keys(out, sip__cfg_pipeline_keys, "pipeline_sessions[]");
  fputs("\nA stage is a model stage (on a pool) or a transform stage; a transform stage's\n"
        "keys other than these are its operation's options (docs/transforms.md).\n",
        out);
  keys(out, sip__cfg_stage_keys, "pipeline_sessions[].stages[]");
  return ferror(out) ? -1 : 0;
}

static const char *const option_types[] = {"string", "true or false", "an integer", "one of",
                                           "a list of names or maps with a name"};

int sip__config_doc_backends(FILE *out, const sip__backend_catalog_t *b) {
  char buf[1024];
  fputs("\n## Backends\n\n"
        "A pool's `backend` and its `backend_options`, as this build carries them. A pool that\n"
        "names no backend gets the one that claims its model file (by the file's extension);\n"
        "a model directory's versions hold a backend's default file. `backend_options` keys\n"
        "are checked against the backend's table: an unknown key or a value of the wrong type\n"
        "is an error naming the keys the backend knows.\n", out);
  for (size_t i = 0; b->name_at(i); i++) {
    const char *name = b->name_at(i);
    const char *const *files = b->files_of(name);
    size_t n = 0;
    const sip_backend_option_t *o = b->options_of(name, &n);
    fprintf(out, "\n### `backend: %s`\n\nPlatform `%s`", name, b->platform_of(name));
    if (files[0]) {
      fputs("; model files: ", out);
      for (size_t k = 0; files[k]; k++) fprintf(out, "%s`%s`", k ? ", " : "", files[k]);
    }
    fputs(".\n", out);
    if (!o) {
      fputs("\nIts options are its own (not checked by the config); see its documentation.\n",
            out);
      continue;
    }
    if (!n) {
      fputs("\nIt takes no options.\n", out);
      continue;
    }
    fputc('\n', out);
    table_head(out);
    for (size_t k = 0; k < n; k++) {
      fprintf(out, "| `%s` |", o[k].name);
      size_t at = (size_t)snprintf(buf, sizeof buf, "%s", (unsigned)o[k].type < COUNT(option_types)
                                   ? option_types[o[k].type] : "?");
      for (size_t v = 0; o[k].type == SIP_OPTION_ENUM && o[k].values[v] && at < sizeof buf; v++)
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s", v ? ", " : " ", o[k].values[v]);
      cell(out, buf);
      cell(out, o[k].def ? o[k].def : "—");
      if (o[k].type == SIP_OPTION_INT) {
        snprintf(buf, sizeof buf, "%lld..%lld", (long long)o[k].min, (long long)o[k].max);
        cell(out, buf);
      } else {
        cell(out, "—");
      }
      cell(out, o[k].doc ? o[k].doc : "");
      fputc('\n', out);
    }
  }
  return ferror(out) ? -1 : 0;
}
