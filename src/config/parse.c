/* sip — the config parser's machinery (see parse.h): messages, scalars, the
 * table walker that reads every table-driven section, paths, and the
 * helpers the hand-parsed maps (pipelines, stages, preprocess) share. */
#include "config/parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

/* Enums are stored through an int; make sure that is their representation. */
_Static_assert(sizeof(sip__priority_level_t) == sizeof(int), "enum is not int-sized");
_Static_assert(sizeof(sip__log_level_t) == sizeof(int), "enum is not int-sized");

/* ---- messages --------------------------------------------------------- */

int sip__cfg_fail(sip__ctx_t *c, yaml_mark_t m, const char *key, const char *fmt, ...) {
  char what[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  c->err = sip_error_new(SIP_INVALID_ARGUMENT, "%s:%zu:%zu: %s: %s", c->name, m.line + 1,
                         m.column + 1, key[0] ? key : "(root)", what);
  return -1;
}

int sip__cfg_oom(sip__ctx_t *c) {
  c->err = SIP__OOM();
  return -1;
}

/* Quotes a user value for a message: escapes what would garble a terminal
 * and cuts long values, so fuzzed or binary input yields a readable line. */
const char *sip__cfg_show(char *buf, size_t n, const char *s, size_t len) {
  size_t o = 0;
  buf[o++] = '"';
  for (size_t i = 0; i < len && i < SHOW_MAX && o + 6 < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') {
      buf[o++] = '\\';
      buf[o++] = (char)ch;
    } else if (ch < 0x20 || ch == 0x7f) {
      o += (size_t)snprintf(buf + o, n - o, "\\x%02x", ch);
    } else {
      buf[o++] = (char)ch;
    }
  }
  if (len > SHOW_MAX && o + 5 < n) {
    memcpy(buf + o, "...", 3);
    o += 3;
  }
  buf[o++] = '"';
  buf[o] = '\0';
  return buf;
}

/* parent + "." + name, with the name sanitised and cut like sip__cfg_show(). */
void sip__cfg_key_join(char *dst, const char *parent, const char *name, size_t len) {
  size_t o = 0;
  if (parent[0]) {
    int w = snprintf(dst, KEY_MAX, "%s.", parent);
    o = w < 0 ? 0 : (size_t)w < KEY_MAX ? (size_t)w : KEY_MAX - 1;
  }
  for (size_t i = 0; i < len && i < SHOW_MAX && o + 4 < KEY_MAX; i++) {
    unsigned char ch = (unsigned char)name[i];
    dst[o++] = (ch < 0x21 || ch >= 0x7f) ? '?' : (char)ch;
  }
  if (len > SHOW_MAX && o + 4 < KEY_MAX) {
    memcpy(dst + o, "...", 3);
    o += 3;
  }
  dst[o] = '\0';
}

void sip__cfg_key_index(char *dst, const char *parent, size_t i) {
  int w = snprintf(dst, KEY_MAX, "%s[%zu]", parent, i);
  if (w < 0) dst[0] = '\0';
}

/* Appends "a, b, c" to buf. */
static void list_names(char *buf, size_t n, const char *const *names) {
  size_t o = strlen(buf);
  for (size_t i = 0; names[i] && o < n; i++) {
    int w = snprintf(buf + o, n - o, "%s%s", i ? ", " : "", names[i]);
    if (w < 0) return;
    o += (size_t)w;
  }
}

void sip__cfg_list_fields(char *buf, size_t n, const sip__section_t *s, unsigned where) {
  size_t o = strlen(buf);
  bool first = true;
  for (size_t i = 0; i < s->n && o < n; i++) {
    if (!visible(&s->fields[i], where)) continue;
    int w = snprintf(buf + o, n - o, "%s%s", first ? "" : ", ", s->fields[i].name);
    first = false;
    if (w < 0) return;
    o += (size_t)w;
  }
}

/* The "expected ..." text of a field: derived from its type and bounds. */
const char *sip__cfg_expected(char *buf, size_t n, const sip__field_t *f, unsigned where) {
  buf[0] = '\0';
  switch (f->type) {
  case F_INT:
  case F_INT64:
    snprintf(buf, n, "an integer %lld..%lld", (long long)f->min, (long long)f->max);
    break;
  case F_BOOL:
    snprintf(buf, n, "true or false");
    break;
  case F_SIZE:
    snprintf(buf, n,
             "a byte size %lld..%lld: an integer, or a number with a suffix B, KiB, MiB or GiB "
             "(e.g. 256MiB)",
             (long long)f->min, (long long)f->max);
    break;
  case F_ENUM:
  case F_WORD:
    snprintf(buf, n, "one of ");
    list_names(buf, n, f->names);
    break;
  case F_SECTION:
    snprintf(buf, n, "a map with keys: ");
    sip__cfg_list_fields(buf, n, f->section, where);
    break;
  case F_STRING:
  case F_CUSTOM:
    snprintf(buf, n, "%s", f->expect);
    break;
  }
  return buf;
}

/* ---- scalars ---------------------------------------------------------- */

/* Reports a node of the wrong kind (or with no value) for field text `exp`. */
int sip__cfg_fail_kind(sip__ctx_t *c, const yaml_node_t *v, const char *key, const char *exp) {
  if (is_null(v)) return sip__cfg_fail(c, v->start_mark, key, "has no value; expected %s", exp);
  const char *kind = v->type == YAML_MAPPING_NODE    ? "a map"
                     : v->type == YAML_SEQUENCE_NODE ? "a list"
                                                     : "a scalar";
  return sip__cfg_fail(c, v->start_mark, key, "is %s; expected %s", kind, exp);
}

/* A non-null scalar, or an error. */
int sip__cfg_want_scalar(sip__ctx_t *c, const yaml_node_t *v, const char *key, const char *exp) {
  if (v->type != YAML_SCALAR_NODE || is_null(v)) return sip__cfg_fail_kind(c, v, key, exp);
  return 0;
}

int sip__cfg_pair(sip__ctx_t *c, const yaml_node_pair_t *pr, yaml_node_t **k, yaml_node_t **v) {
  *k = yaml_document_get_node(c->doc, pr->key);
  *v = yaml_document_get_node(c->doc, pr->value);
  return *k && *v ? 0 : sip__cfg_oom(c);
}

yaml_node_t *sip__cfg_seq_scalar(sip__ctx_t *c, const yaml_node_t *v, size_t i, const char *key,
                            const char *exp) {
  yaml_node_t *e = seq_item(c, v, i);
  char ik[KEY_MAX];
  sip__cfg_key_index(ik, key, i);
  if (!e) return sip__cfg_oom(c), NULL;
  if (sip__cfg_want_scalar(c, e, ik, exp)) return NULL;
  return e;
}

/* Decimal integer with optional sign. 0: ok, -1: not an integer, -2: overflow. */
int sip__cfg_parse_int(const char *s, size_t len, int64_t *out) {
  size_t i = 0;
  bool neg = false;
  if (i < len && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i == len) return -1;
  uint64_t v = 0;
  bool over = false;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) over = true;
    else v = v * 10 + d;
  }
  if (over || v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) return -2;
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return 0;
}

/* "268435456", "256MiB", "64 KiB", "1GiB", "2048B". 0 / -1 / -2 as sip__cfg_parse_int. */
static int parse_size(const char *s, size_t len, uint64_t *out) {
  size_t i = 0;
  uint64_t v = 0;
  bool over = false;
  while (i < len && s[i] >= '0' && s[i] <= '9') {
    unsigned d = (unsigned)(s[i++] - '0');
    if (v > (UINT64_MAX - d) / 10) over = true;
    else v = v * 10 + d;
  }
  if (i == 0) return -1;
  while (i < len && s[i] == ' ') i++;
  static const struct {
    const char *suffix;
    unsigned shift;
  } units[] = {{"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}};
  for (size_t u = 0; u < COUNT(units); u++) {
    size_t sl = strlen(units[u].suffix);
    if (len - i == sl && strncasecmp(s + i, units[u].suffix, sl) == 0) {
      if (over || v > (UINT64_MAX >> units[u].shift)) return -2;
      *out = v << units[u].shift;
      return 0;
    }
  }
  return -1;
}

bool sip__cfg_valid_pool_name(const char *s, size_t len) {
  if (len < 1 || len > POOL_NAME_MAX) return false;
  for (size_t i = 0; i < len; i++)
    if (!sip__name_char(s[i])) return false;
  return true;
}

/* ---- the table walker ------------------------------------------------- */

static void *at(void *base, size_t off) { return (char *)base + off; }

void sip__cfg_apply_defaults(const sip__section_t *s, void *base) {
  for (size_t i = 0; i < s->n; i++) {
    const sip__field_t *f = &s->fields[i];
    void *p = at(base, f->offset);
    switch (f->type) {
    case F_INT:
    case F_BOOL:
      *(int *)p = (int)f->def;
      break;
    case F_INT64:
      *(int64_t *)p = f->def;
      break;
    case F_SIZE:
      *(size_t *)p = (size_t)f->def;
      break;
    case F_ENUM: {
      int e = (int)f->def;
      memcpy(p, &e, sizeof e);
      break;
    }
    case F_SECTION:
      sip__cfg_apply_defaults(f->section, base);
      break;
    case F_WORD:
    case F_STRING:
    case F_CUSTOM:
      break; /* NULL / handled by the parser or the post-checks */
    }
  }
}

int sip__cfg_parse_value(sip__ctx_t *c, const sip__field_t *f, yaml_node_t *v, const char *key, void *base) {
  char exp[1024], shown[SHOW_MAX * 4 + 8];
  sip__cfg_expected(exp, sizeof exp, f, c->where);
  void *p = at(base, f->offset);

  if (f->type == F_SECTION) {
    yaml_node_t *vals[MAX_FIELDS] = {0};
    return sip__cfg_parse_map(c, v, key, f->section, exp, base, vals);
  }
  if (f->type == F_CUSTOM) return f->parse(c, v, key, base);

  if (sip__cfg_want_scalar(c, v, key, exp)) return -1;
  const char *s = text(v);
  size_t len = v->data.scalar.length;

  switch (f->type) {
  case F_INT:
  case F_INT64: {
    if (!is_plain(v))
      return sip__cfg_fail(c, v->start_mark, key, "%s is a quoted string; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
    int64_t x = 0;
    int rc = sip__cfg_parse_int(s, len, &x);
    if (rc == -1)
      return sip__cfg_fail(c, v->start_mark, key, "%s is not an integer; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
    if (rc == -2 || x < f->min || x > f->max)
      return sip__cfg_fail(c, v->start_mark, key, "%.*s is out of range; expected %s",
                      (int)(len < SHOW_MAX ? len : SHOW_MAX), s, exp);
    if (f->type == F_INT) *(int *)p = (int)x;
    else *(int64_t *)p = x;
    return 0;
  }
  case F_BOOL: {
    static const char *const t[] = {"true", "True", "TRUE"}, *const fl[] = {"false", "False", "FALSE"};
    if (is_plain(v)) {
      for (size_t i = 0; i < COUNT(t); i++) {
        if (len == strlen(t[i]) && !memcmp(s, t[i], len)) return *(int *)p = 1, 0;
        if (len == strlen(fl[i]) && !memcmp(s, fl[i], len)) return *(int *)p = 0, 0;
      }
    }
    return sip__cfg_fail(c, v->start_mark, key, "%s is not a boolean%s; expected %s",
                    sip__cfg_show(shown, sizeof shown, s, len), is_plain(v) ? "" : " (it is quoted)", exp);
  }
  case F_SIZE: {
    uint64_t x = 0;
    int rc = parse_size(s, len, &x);
    if (rc == -1)
      return sip__cfg_fail(c, v->start_mark, key, "%s is not a byte size; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
    if (rc == -2 || x < (uint64_t)f->min || x > (uint64_t)f->max || x > SIZE_MAX)
      return sip__cfg_fail(c, v->start_mark, key, "%s is out of range; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
    *(size_t *)p = (size_t)x;
    return 0;
  }
  case F_ENUM:
  case F_WORD:
    for (int i = 0; f->names[i]; i++) {
      if (len != strlen(f->names[i]) || memcmp(s, f->names[i], len)) continue;
      if (f->type == F_ENUM) {
        memcpy(p, &i, sizeof i);
      } else {
        char *copy = sip__strdup(f->names[i]);
        if (!copy) return sip__cfg_oom(c);
        *(char **)p = copy;
      }
      return 0;
    }
    return sip__cfg_fail(c, v->start_mark, key, "%s is not valid; expected %s",
                    sip__cfg_show(shown, sizeof shown, s, len), exp);
  case F_STRING: {
    if (memchr(s, '\0', len))
      return sip__cfg_fail(c, v->start_mark, key, "%s contains a NUL byte; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
    if (len == 0) return sip__cfg_fail(c, v->start_mark, key, "is empty; expected %s", exp);
    if (f->valid && !f->valid(s, len))
      return sip__cfg_fail(c, v->start_mark, key, "%s is not valid; expected %s",
                      sip__cfg_show(shown, sizeof shown, s, len), exp);
    char *copy = sip__strndup(s, len);
    if (!copy) return sip__cfg_oom(c);
    *(char **)p = copy;
    return 0;
  }
  case F_SECTION:
  case F_CUSTOM:
    break; /* handled above */
  }
  return 0;
}

/* Walks map `m` against section `s`. `exp` describes the map itself; on
 * return vals[i] is the value node of field i (NULL when absent). A null
 * value ("server:" with every key commented out) counts as an empty map. */
int sip__cfg_parse_map(sip__ctx_t *c, yaml_node_t *m, const char *key, const sip__section_t *s,
                  const char *exp, void *base, yaml_node_t **vals) {
  yaml_node_t *keys[MAX_FIELDS] = {0};
  char child[KEY_MAX], buf[1024];

  if (!is_null(m)) {
    if (m->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, m, key, exp);
    for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top; pr++) {
      yaml_node_t *k = yaml_document_get_node(c->doc, pr->key);
      yaml_node_t *v = yaml_document_get_node(c->doc, pr->value);
      if (!k || !v) {
        c->err = sip_error_new(SIP_INTERNAL, "%s: libyaml returned a broken document", c->name);
        return -1;
      }
      buf[0] = '\0';
      sip__cfg_list_fields(buf, sizeof buf, s, c->where);
      if (k->type != YAML_SCALAR_NODE)
        return sip__cfg_fail(c, k->start_mark, key, "a key is %s; expected a scalar key, one of: %s",
                        k->type == YAML_MAPPING_NODE ? "a map" : "a list", buf);
      const char *kn = text(k);
      size_t kl = k->data.scalar.length;
      sip__cfg_key_join(child, key, kn, kl);
      size_t i = 0;
      while (i < s->n && !(visible(&s->fields[i], c->where) && strlen(s->fields[i].name) == kl &&
                           !memcmp(s->fields[i].name, kn, kl)))
        i++;
      if (i == s->n) return sip__cfg_fail(c, k->start_mark, child, "unknown key; expected one of: %s", buf);
      if (vals[i])
        return sip__cfg_fail(c, k->start_mark, child,
                        "duplicate key (first at line %zu); expected each key at most once",
                        keys[i]->start_mark.line + 1);
      keys[i] = k;
      vals[i] = v;
      if (sip__cfg_parse_value(c, &s->fields[i], v, child, base)) return -1;
    }
  }
  for (size_t i = 0; i < s->n; i++) {
    if (!s->fields[i].required || vals[i] || !visible(&s->fields[i], c->where)) continue;
    sip__cfg_key_join(child, key, s->fields[i].name, strlen(s->fields[i].name));
    return sip__cfg_fail(c, m->start_mark, child, "missing; expected %s",
                    sip__cfg_expected(buf, sizeof buf, &s->fields[i], c->where));
  }
  return 0;
}

/* ---- paths and helpers of the hand-parsed maps ------------------------- */

/* Joins a relative path to base_dir; absolute paths and no base_dir keep it. */
char *sip__cfg_resolve_path(const char *base_dir, const char *p) {
  if (!base_dir || !base_dir[0] || p[0] == '/') return sip__strdup(p);
  size_t bl = strlen(base_dir);
  return sip__asprintf("%s%s%s", base_dir, base_dir[bl - 1] == '/' ? "" : "/", p);
}

/* Transform options naming files (ctc_greedy_decode's labels_file): their
 * relative paths resolve against the config file's directory, like
 * model_path, so a config works from any working directory. */
bool sip__cfg_is_path_option(const char *key) {
  size_t n = strlen(key);
  return n > 5 && !strcmp(key + n - 5, "_file");
}

/* The extension of the last path component (".bin"), or NULL. */
const char *sip__cfg_path_ext(const char *p) {
  const char *slash = strrchr(p, '/');
  const char *last = slash ? slash + 1 : p;
  return strrchr(last, '.');
}

/* Frees n owned key/value pairs (owned copies behind sip_kv_t's
 * borrowed-looking const pointers) and the array. */
void sip__cfg_kv_free(sip_kv_t *kv, size_t n) {
  for (size_t i = 0; kv && i < n; i++) {
    sip__free((void *)kv[i].key);
    sip__free((void *)kv[i].value);
  }
  sip__free(kv);
}

/* Maps whose keys are parsed by hand (stages, pipelines, preprocess):
 * libyaml keeps duplicate keys and the first would win silently, so the
 * pair `pr` of `map` fails when an earlier key is the same (`what`: "key",
 * "step"). */
int sip__cfg_dup_key(sip__ctx_t *c, const yaml_node_t *map, const yaml_node_pair_t *pr,
                const yaml_node_t *kn, const char *key, const char *what) {
  for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pr; q++) {
    yaml_node_t *qk = yaml_document_get_node(c->doc, q->key);
    if (qk && qk->type == YAML_SCALAR_NODE && !strcmp(text(qk), text(kn)))
      return sip__cfg_fail(c, kn->start_mark, key, "duplicate key (first at line %zu); expected each %s "
                      "at most once", qk->start_mark.line + 1, what);
  }
  return 0;
}

/* A scalar as an owned string; a list of scalars as "a,b,c". */
int sip__cfg_scalar_or_list(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp, char **out) {
  if (v->type == YAML_SCALAR_NODE) {
    *out = sip__strndup(text(v), v->data.scalar.length);
    return *out ? 0 : sip__cfg_oom(c);
  }
  if (v->type != YAML_SEQUENCE_NODE) return sip__cfg_fail_kind(c, v, key, exp);
  size_t n = seq_len(v), len = 0;
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = sip__cfg_seq_scalar(c, v, i, key, exp);
    if (!e) return -1;
    len += e->data.scalar.length + 1;
  }
  char *s = sip__malloc(len + 1), *p = s;
  if (!s) return sip__cfg_oom(c);
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = seq_item(c, v, i);
    if (i) *p++ = ',';
    memcpy(p, text(e), e->data.scalar.length);
    p += e->data.scalar.length;
  }
  *p = '\0';
  *out = s;
  return 0;
}
