/* sip — a pool's backend_options checked against its backend's option
 * table (sip_backend_vtable_t.options, handed over by the backend
 * catalogue): unknown keys and values of the wrong type are refused with
 * the keys the backend knows, then the backend's own check runs (an
 * execution provider this build lacks...). A list option
 * (execution_providers: [cuda, {name: cpu}]) reaches the backend as JSON
 * text: an array of objects, each with a "name" and its other keys as
 * strings. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config/parse.h"
#include "core/core.h"

#define LIST_EXPECT "a list of names or maps with a name ([cuda, {name: cpu}])"

/* One list item as a JSON object ({"name": ...} for a bare name). */
static int list_item(sip__ctx_t *c, yaml_node_t *e, const char *ikey, json_t *arr) {
  char mkey[KEY_MAX];
  json_t *o = json_object();
  if (!o || json_array_append_new(arr, o)) return sip__cfg_oom(c);
  if (e->type == YAML_SCALAR_NODE && !is_null(e)) {
    if (memchr(text(e), '\0', e->data.scalar.length)) return sip__cfg_fail_kind(c, e, ikey, LIST_EXPECT);
    return json_object_set_new(o, "name", json_stringn(text(e), e->data.scalar.length)) ? sip__cfg_oom(c) : 0;
  }
  if (e->type != YAML_MAPPING_NODE) return sip__cfg_fail_kind(c, e, ikey, LIST_EXPECT);
  for (yaml_node_pair_t *pr = e->data.mapping.pairs.start; pr < e->data.mapping.pairs.top; pr++) {
    yaml_node_t *k, *v;
    if (sip__cfg_pair(c, pr, &k, &v)) return -1;
    if (k->type != YAML_SCALAR_NODE || is_null(k) || !k->data.scalar.length ||
        memchr(text(k), '\0', k->data.scalar.length))
      return sip__cfg_fail_kind(c, k, ikey, "option names as plain words");
    sip__cfg_key_join(mkey, ikey, text(k), k->data.scalar.length);
    if (v->type != YAML_SCALAR_NODE || is_null(v) || memchr(text(v), '\0', v->data.scalar.length))
      return sip__cfg_fail_kind(c, v, mkey, "a scalar value (string, number or bool)");
    char *ks = sip__strndup(text(k), k->data.scalar.length);
    if (!ks) return sip__cfg_oom(c);
    int dup = json_object_get(o, ks) != NULL;
    int rc = dup ? 0 : json_object_set_new(o, ks, json_stringn(text(v), v->data.scalar.length));
    sip__free(ks);
    if (dup) return sip__cfg_fail(c, k->start_mark, mkey, "duplicate key; expected each key once");
    if (rc) return sip__cfg_oom(c);
  }
  if (!json_is_string(json_object_get(o, "name")))
    return sip__cfg_fail(c, e->start_mark, ikey, "a map without a name; expected %s", LIST_EXPECT);
  return 0;
}

int sip__cfg_option_value(sip__ctx_t *c, yaml_node_t *val, const char *okey, char **out) {
  char ikey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  *out = NULL;
  if (val->type == YAML_SCALAR_NODE && !is_null(val)) {
    const char *vs = text(val);
    size_t vl = val->data.scalar.length;
    if (memchr(vs, '\0', vl))
      return sip__cfg_fail(c, val->start_mark, okey, "%s contains a NUL byte; expected a string "
                      "without one", sip__cfg_show(shown, sizeof shown, vs, vl));
    return (*out = sip__strndup(vs, vl)) ? 0 : sip__cfg_oom(c);
  }
  if (val->type != YAML_SEQUENCE_NODE)
    return sip__cfg_fail_kind(c, val, okey, "a scalar value (string, number or bool) or " LIST_EXPECT);
  if (!seq_len(val)) return sip__cfg_fail(c, val->start_mark, okey, "is an empty list; expected %s",
                                     LIST_EXPECT);
  json_t *arr = json_array();
  if (!arr) return sip__cfg_oom(c);
  for (size_t i = 0; i < seq_len(val); i++) {
    yaml_node_t *e = seq_item(c, val, i);
    sip__cfg_key_index(ikey, okey, i);
    if (!e || list_item(c, e, ikey, arr)) {
      json_decref(arr);
      return e ? -1 : sip__cfg_oom(c);
    }
  }
  char *js = json_dumps(arr, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(arr);
  if (!js) return sip__cfg_oom(c);
  *out = sip__strdup(js);
  free(js);
  return *out ? 0 : sip__cfg_oom(c);
}

static const char *type_expect(const sip_backend_option_t *o, char *buf, size_t cap) {
  switch (o->type) {
    case SIP_OPTION_BOOL: return "true or false";
    case SIP_OPTION_INT:
      snprintf(buf, cap, "an integer %lld..%lld", (long long)o->min, (long long)o->max);
      return buf;
    case SIP_OPTION_ENUM: {
      size_t at = (size_t)snprintf(buf, cap, "one of ");
      for (size_t i = 0; o->values[i] && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", o->values[i]);
      return buf;
    }
    case SIP_OPTION_LIST: return LIST_EXPECT;
    case SIP_OPTION_STRING: break;
  }
  return "a scalar value";
}

/* The value node `v` fits option `o`: 1, else 0. */
static int fits(const sip_backend_option_t *o, const yaml_node_t *v) {
  if (o->type == SIP_OPTION_LIST) return v->type == YAML_SEQUENCE_NODE;
  if (v->type != YAML_SCALAR_NODE) return 0;
  const char *s = text(v);
  size_t len = v->data.scalar.length;
  if (o->type == SIP_OPTION_BOOL) {
    static const char *const words[] = {"true", "false", "yes", "no", "on", "off", "1", "0"};
    for (size_t i = 0; i < COUNT(words); i++)
      if (strlen(words[i]) == len && !strncasecmp(s, words[i], len)) return 1;
    return 0;
  }
  if (o->type == SIP_OPTION_INT) {
    int64_t x;
    return !sip__cfg_parse_int(s, len, &x) && x >= o->min && x <= o->max;
  }
  if (o->type == SIP_OPTION_ENUM) {
    for (size_t i = 0; o->values[i]; i++)
      if (strlen(o->values[i]) == len && !strncasecmp(s, o->values[i], len)) return 1;
    return 0;
  }
  return 1;
}

int sip__cfg_check_backend_options(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t *opts,
                              const char *key) {
  char okey[KEY_MAX], known[1024], exp[512], shown[SHOW_MAX * 4 + 8];
  if (!opts || opts->type != YAML_MAPPING_NODE || !pool->backend) return 0;
  size_t n_table = 0;
  const sip_backend_option_t *table =
      c->backends->options_of ? c->backends->options_of(pool->backend, &n_table) : NULL;
  size_t at = 0;
  known[0] = '\0';
  for (size_t i = 0; table && i < n_table && at < sizeof known; i++)
    at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", table[i].name);
  sip__cfg_key_join(okey, key, "backend_options", strlen("backend_options"));
  for (yaml_node_pair_t *pr = opts->data.mapping.pairs.start; pr < opts->data.mapping.pairs.top;
       pr++) {
    yaml_node_t *k, *v;
    if (sip__cfg_pair(c, pr, &k, &v)) return -1;
    char ikey[KEY_MAX];
    sip__cfg_key_join(ikey, okey, text(k), k->data.scalar.length);
    if (!table) { /* no table: any key, as written; lists need a table that declares them */
      if (v->type != YAML_SCALAR_NODE)
        return sip__cfg_fail_kind(c, v, ikey, "a scalar value (this backend declares no list options)");
      continue;
    }
    const sip_backend_option_t *o = NULL;
    for (size_t i = 0; i < n_table && !o; i++)
      if (strlen(table[i].name) == k->data.scalar.length &&
          !memcmp(table[i].name, text(k), k->data.scalar.length))
        o = &table[i];
    if (!o)
      return sip__cfg_fail(c, k->start_mark, ikey, "unknown option of backend %s; expected one of %s",
                      pool->backend, known);
    if (!fits(o, v))
      return sip__cfg_fail(c, v->start_mark, ikey, "%s is not valid; expected %s",
                      v->type == YAML_SCALAR_NODE
                          ? sip__cfg_show(shown, sizeof shown, text(v), v->data.scalar.length)
                          : v->type == YAML_SEQUENCE_NODE ? "a list" : "a map",
                      type_expect(o, exp, sizeof exp));
  }
  sip_error_t *e = c->backends->check_options
                       ? c->backends->check_options(pool->backend, pool->backend_options,
                                                    pool->n_backend_options)
                       : NULL;
  if (!e) return 0;
  int rc = sip__cfg_fail(c, opts->start_mark, okey, "%s", sip_error_message(e));
  sip_error_free(e);
  return rc;
}

const char *sip__cfg_backend_for(sip__ctx_t *c, const char *path) {
  const char *b = c->backends->probe ? c->backends->probe(path) : NULL;
  if (!b && c->backends->default_backend) b = c->backends->default_backend();
  return b;
}
