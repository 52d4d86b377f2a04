/* sip — a Triton config.pbtxt mapped onto a repository model's config.yaml
 * settings (config/triton.h; the table is docs/triton.md). The text is
 * parsed by libprotobuf (triton_pbtxt.cc) into JSON; this file walks that
 * JSON, builds sip's settings as a YAML document (libyaml's emitter) and
 * names in a warning every field sip does not act on. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <yaml.h>

#include "config/config.h"
#include "config/triton.h"
#include "core/core.h"

typedef struct sip__ctx {
  const char *source;
  const sip__backend_catalog_t *backends;
  json_t *out; /* sip's settings */
  char *warn;  /* "\n"-separated */
  size_t warn_len;
  int oom;
} sip__ctx_t;

static void warn(sip__ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(sip__ctx_t *c, const char *fmt, ...) {
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = strlen(line), add = strlen(c->source) + 2 + len + 1;
  char *w = sip__realloc(c->warn, c->warn_len + add + 1);
  if (!w) {
    c->oom = 1;
    return;
  }
  c->warn = w;
  c->warn_len += (size_t)snprintf(w + c->warn_len, add + 1, "%s%s: %s", c->warn_len ? "\n" : "",
                                  c->source, line);
}

static sip_error_t *bad(const sip__ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static sip_error_t *bad(const sip__ctx_t *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sip_error_new(SIP_INVALID_ARGUMENT, "%s: %s", c->source, msg);
}

/* protobuf's JSON writes 64-bit integers as strings: either form. */
static int get_int(json_t *v, long long *out) {
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return 1;
  }
  const char *s = json_string_value(v);
  if (!s || !*s) return 0;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (*end || errno) return 0;
  *out = x;
  return 1;
}

static int set(sip__ctx_t *c, json_t *obj, const char *key, json_t *v) {
  if (!v || json_object_set_new(obj, key, v)) c->oom = 1;
  return !c->oom;
}

/* The child object `key` of `obj`, made when missing. */
static json_t *child(sip__ctx_t *c, json_t *obj, const char *key) {
  json_t *o = json_object_get(obj, key);
  if (!o && set(c, obj, key, json_object())) o = json_object_get(obj, key);
  return o;
}

/* Warns for every key of `o` not in `known` (NULL-terminated), as `what`.KEY. */
static void warn_others(sip__ctx_t *c, json_t *o, const char *what, const char *const *known,
                        const char *why) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    int found = 0;
    for (size_t i = 0; known[i] && !found; i++) found = !strcmp(known[i], k);
    if (!found) warn(c, "%s.%s is not used: %s", what, k, why);
  }
}

/* ---- backend ---- */

static sip_error_t *map_backend(sip__ctx_t *c, json_t *root) {
  const char *platform = json_string_value(json_object_get(root, "platform"));
  const char *backend = json_string_value(json_object_get(root, "backend"));
  const sip__backend_catalog_t *b = c->backends;
  const char *found = NULL;
  for (size_t i = 0; b->name_at && !found; i++) {
    const char *name = b->name_at(i);
    if (!name) break;
    const char *p = b->platform_of ? b->platform_of(name) : name;
    size_t n = backend ? strlen(backend) : 0;
    if (platform ? !strcmp(p, platform)
                 : backend && (!strcmp(name, backend) ||
                               (!strncmp(p, backend, n) && p[n] == '_')))
      found = name;
  }
  if (!platform && !backend) return NULL; /* the model file decides */
  if (!found)
    return bad(c, "%s '%s' is not served here; this server's backends are %s",
               platform ? "platform" : "backend", platform ? platform : backend, b->names());
  set(c, c->out, "backend", json_string(found));
  return NULL;
}

/* ---- version_policy, instance_group ---- */

static sip_error_t *map_versions(sip__ctx_t *c, json_t *v) {
  json_t *latest = json_object_get(v, "latest"), *specific = json_object_get(v, "specific");
  long long n = 1;
  if (json_object_get(v, "all")) return set(c, c->out, "version_policy", json_string("all")), NULL;
  if (latest) {
    json_t *nv = json_object_get(latest, "num_versions");
    if (nv && (!get_int(nv, &n) || n < 1 || n > 1024))
      return bad(c, "version_policy.latest.num_versions: expected 1..1024");
    return set(c, c->out, "version_policy", json_pack("{s:I}", "latest", (json_int_t)n)), NULL;
  }
  if (specific) {
    json_t *list = json_array(), *vs = json_object_get(specific, "versions");
    size_t i;
    json_t *x;
    if (json_array_size(vs) > 64)
      return json_decref(list), bad(c, "version_policy.specific.versions: at most 64 versions");
    json_array_foreach(vs, i, x) {
      long long ver;
      if (!get_int(x, &ver) || ver < 0)
        return json_decref(list), bad(c, "version_policy.specific.versions[%zu]: expected a "
                                         "version number >= 0", i);
      json_array_append_new(list, json_integer(ver));
    }
    return set(c, c->out, "version_policy", json_pack("{s:o}", "specific", list)), NULL;
  }
  return NULL;
}

static sip_error_t *map_instances(sip__ctx_t *c, json_t *v) {
  long long total = 0;
  size_t i;
  json_t *g;
  static const char *const known[] = {"name", "kind", "count", NULL};
  json_array_foreach(v, i, g) {
    char what[48];
    snprintf(what, sizeof what, "instance_group[%zu]", i);
    long long n = 1;
    json_t *cnt = json_object_get(g, "count");
    if (cnt && (!get_int(cnt, &n) || n < 0 || n > 256))
      return bad(c, "%s.count: expected 0..256 instances", what);
    const char *kind = json_string_value(json_object_get(g, "kind"));
    if (kind && strcmp(kind, "KIND_CPU") && strcmp(kind, "KIND_AUTO") && strcmp(kind, "KIND_MODEL"))
      warn(c, "%s.kind %s: its %lld instance(s) become sessions on this server's devices (the "
              "pool's backend and its execution providers decide where they run)", what, kind, n);
    warn_others(c, g, what, known, "sip's sessions have no device list, profiles, rate "
                "limiter or host policy");
    total += n;
  }
  if (total < 1 || total > 256)
    return bad(c, "instance_group counts add up to %lld; expected 1..256 sessions", total);
  set(c, c->out, "pool_size", json_integer(total));
  return NULL;
}

/* ---- dynamic_batching ---- */

static sip_error_t *map_queue_policy(sip__ctx_t *c, json_t *q, const char *what) {
  long long us = 0, size = 0;
  json_t *queue = child(c, c->out, "queue");
  json_t *t = json_object_get(q, "default_timeout_microseconds");
  if (t && (!get_int(t, &us) || us < 0 || us > 86400000000LL))
    return bad(c, "%s.default_timeout_microseconds: expected 0..86400000000", what);
  if (us) set(c, queue, "default_timeout_ms", json_integer((us + 999) / 1000));
  const char *action = json_string_value(json_object_get(q, "timeout_action"));
  if (action && !strcmp(action, "DELAY")) set(c, queue, "timeout_action", json_string("delay"));
  json_t *m = json_object_get(q, "max_queue_size");
  if (m && (!get_int(m, &size) || size < 0 || size > 100000000))
    return bad(c, "%s.max_queue_size: expected 0..100000000", what);
  set(c, queue, "max_size", json_integer(size)); /* 0: unbounded, as in Triton */
  if (json_is_false(json_object_get(q, "allow_timeout_override")) ||
      !json_object_get(q, "allow_timeout_override"))
    warn(c, "%s.allow_timeout_override false: sip always honours a request's own timeout",
         what);
  return NULL;
}

static sip_error_t *map_dynamic(sip__ctx_t *c, json_t *d, long long max_batch) {
  if (max_batch < 1)
    return bad(c, "dynamic_batching needs max_batch_size > 0 (the model's batch dimension)");
  json_t *b = child(c, c->out, "dynamic_batching");
  set(c, b, "max_batch_size", json_integer(max_batch));
  long long us = 0;
  json_t *delay = json_object_get(d, "max_queue_delay_microseconds");
  if (delay && (!get_int(delay, &us) || us < 0 || us > 60000000))
    return bad(c, "dynamic_batching.max_queue_delay_microseconds: expected 0..60000000");
  if (us) set(c, b, "max_queue_delay_us", json_integer(us));
  json_t *pref = json_object_get(d, "preferred_batch_size");
  if (json_array_size(pref)) {
    /* sip wants them increasing, each at most max_batch_size. */
    long long v[16];
    size_t n = 0, i;
    json_t *x;
    json_array_foreach(pref, i, x) {
      long long s;
      if (!get_int(x, &s) || s < 1 || s > max_batch)
        return bad(c, "dynamic_batching.preferred_batch_size[%zu]: expected 1..%lld "
                      "(max_batch_size)", i, max_batch);
      if (n == 16) return bad(c, "dynamic_batching.preferred_batch_size: at most 16 sizes");
      size_t j = n++;
      while (j && v[j - 1] > s) v[j] = v[j - 1], j--;
      v[j] = s;
    }
    json_t *list = json_array();
    for (i = 0; i < n; i++)
      if (!i || v[i] != v[i - 1]) json_array_append_new(list, json_integer(v[i]));
    set(c, b, "preferred_batch_sizes", list);
  }
  long long levels = 0;
  json_t *pl = json_object_get(d, "priority_levels");
  if (pl && get_int(pl, &levels) && levels > 3)
    warn(c, "dynamic_batching.priority_levels %lld: sip has 3 request priority levels; a "
            "request's priority past 3 is the lowest", levels);
  if (json_object_get(d, "default_priority_level"))
    warn(c, "dynamic_batching.default_priority_level: a request without a priority runs at "
            "its pool's priority");
  if (json_is_true(json_object_get(d, "preserve_ordering")))
    warn(c, "dynamic_batching.preserve_ordering: each request is answered as soon as its batch "
            "is done");
  if (json_object_get(d, "priority_queue_policy"))
    warn(c, "dynamic_batching.priority_queue_policy: one queue policy per pool "
            "(default_queue_policy) applies to every priority");
  json_t *q = json_object_get(d, "default_queue_policy");
  return q ? map_queue_policy(c, q, "dynamic_batching.default_queue_policy") : NULL;
}

/* ---- sequence_batching ---- */

/* 1 when a control's false/true values are sip's 0 and 1. */
static int zero_one(json_t *ctl) {
  static const char *const keys[] = {"int32_false_true", "fp32_false_true", "bool_false_true"};
  for (size_t k = 0; k < 3; k++) {
    json_t *a = json_object_get(ctl, keys[k]);
    if (!a) continue;
    if (json_array_size(a) != 2) return 0;
    json_t *f = json_array_get(a, 0), *t = json_array_get(a, 1);
    if (k == 2) return json_is_false(f) && json_is_true(t);
    if (json_number_value(f) != 0 || json_number_value(t) != 1) return 0;
  }
  return 1;
}

static sip_error_t *map_sequence(sip__ctx_t *c, json_t *s) {
  json_t *sb = child(c, c->out, "sequence_batching");
  long long us = 0;
  json_t *idle = json_object_get(s, "max_sequence_idle_microseconds");
  if (idle && (!get_int(idle, &us) || us < 1000 || us > 86400000000LL))
    return bad(c, "sequence_batching.max_sequence_idle_microseconds: expected 1000..86400000000");
  if (us) set(c, sb, "idle_timeout_us", json_integer(us));
  static const char *const kinds[][2] = {{"CONTROL_SEQUENCE_START", "start"},
                                         {"CONTROL_SEQUENCE_END", "end"},
                                         {"CONTROL_SEQUENCE_READY", "ready"},
                                         {"CONTROL_SEQUENCE_CORRID", "corrid"}};
  const char *given[4] = {NULL, NULL, NULL, NULL}; /* the input each kind was given to */
  size_t i, j;
  json_t *in, *ctl;
  json_array_foreach(json_object_get(s, "control_input"), i, in) {
    const char *name = json_string_value(json_object_get(in, "name"));
    if (!name || !*name) return bad(c, "sequence_batching.control_input[%zu] has no name", i);
    json_array_foreach(json_object_get(in, "control"), j, ctl) {
      const char *kind = json_string_value(json_object_get(ctl, "kind"));
      if (!kind) kind = "CONTROL_SEQUENCE_START"; /* the enum's zero, left out by protobuf */
      size_t k = 0;
      while (k < 4 && strcmp(kinds[k][0], kind)) k++;
      if (k == 4) {
        warn(c, "sequence_batching.control_input '%s': control kind %s is not filled by sip",
             name, kind);
        continue;
      }
      if (given[k])
        return bad(c, "sequence_batching.control_input: %s is given to both '%s' and '%s' "
                      "(a control left without a kind is %s); expected one input per kind",
                   kind, given[k], name, kinds[0][0]);
      for (size_t o = 0; o < 4; o++)
        if (given[o] && !strcmp(given[o], name))
          return bad(c, "sequence_batching.control_input '%s' is given both %s and %s; "
                        "expected a different input for each kind", name, kinds[o][0], kind);
      given[k] = name;
      const char *key = kinds[k][1];
      if (strcmp(key, "corrid") && !zero_one(ctl))
        warn(c, "sequence_batching.control_input '%s' (%s): sip fills 0 for false and 1 for "
                "true, not the values given", name, kind);
      set(c, child(c, sb, "control_inputs"), key, json_string(name));
    }
  }
  json_t *oldest = json_object_get(s, "oldest");
  if (oldest)
    warn(c, "sequence_batching.oldest: each sequence is bound to a session slot, as with the "
            "direct strategy (sip's sequences are not batched together)");
  if (json_array_size(json_object_get(s, "state")))
    warn(c, "sequence_batching.state: implicit state is not kept between requests; the model "
            "must take and return its state as ordinary inputs and outputs");
  if (json_is_true(json_object_get(s, "iterative_sequence")))
    warn(c, "sequence_batching.iterative_sequence is not supported");
  return NULL;
}

/* ---- inputs and outputs ---- */

static const char *const io_known[] = {"name", "data_type", "dims", NULL};

/* The declared tensors with numeric dims, for the I/O check after loading. */
static sip_error_t *map_io(sip__ctx_t *c, json_t *root, json_t *io) {
  static const char *const kinds[] = {"input", "output"};
  for (int k = 0; k < 2; k++) {
    json_t *list = json_object_get(root, kinds[k]), *copy = json_array(), *t;
    size_t i;
    json_array_foreach(list, i, t) {
      const char *name = json_string_value(json_object_get(t, "name"));
      if (!name || !*name) return json_decref(copy), bad(c, "%s[%zu] has no name", kinds[k], i);
      json_t *e = json_pack("{s:s}", "name", name), *dims = json_array(), *d;
      const char *dt = json_string_value(json_object_get(t, "data_type"));
      if (dt) json_object_set_new(e, "data_type", json_string(dt));
      size_t j;
      json_array_foreach(json_object_get(t, "dims"), j, d) {
        long long x;
        if (!get_int(d, &x) || x < -1) {
          json_decref(e), json_decref(dims), json_decref(copy);
          return bad(c, "%s '%s' dims[%zu]: expected a size >= 0 or -1 (any)", kinds[k], name, j);
        }
        json_array_append_new(dims, json_integer(x));
      }
      json_object_set_new(e, "dims", dims);
      json_array_append_new(copy, e);
      char what[192];
      snprintf(what, sizeof what, "%s '%s'", kinds[k], name);
      if (json_is_true(json_object_get(t, "optional")))
        warn(c, "%s is optional in Triton; sip asks for every model input", what);
      json_object_del(t, "optional");
      warn_others(c, t, what, io_known, "sip passes tensors as the client sends them (no "
                  "format, reshape, shape tensors, ragged batches or labels)");
    }
    if (json_array_size(copy)) set(c, io, kinds[k], copy);
    else json_decref(copy);
  }
  return NULL;
}

/* ---- parameters ---- */

static void map_params(sip__ctx_t *c, json_t *params) {
  const char *backend = json_string_value(json_object_get(c->out, "backend"));
  size_t n = 0;
  const sip_backend_option_t *opt =
      backend && c->backends->options_of ? c->backends->options_of(backend, &n) : NULL;
  const char *k;
  json_t *v;
  json_object_foreach(params, k, v) {
    const char *s = json_string_value(json_object_get(v, "string_value"));
    size_t i = 0;
    while (i < n && strcmp(opt[i].name, k)) i++;
    if (opt && i < n && s) {
      set(c, child(c, c->out, "backend_options"), k, json_string(s));
    } else {
      warn(c, "parameters.%s is not an option of backend %s; the backend's options "
              "(docs/config.md) go in backend_options", k, backend ? backend : "(by model file)");
    }
  }
}

/* ---- the rest ---- */

static const struct {
  const char *field, *why;
} OTHER[] = {
    {"runtime", "the backend is chosen by platform or backend"},
    {"batch_input", "there are no batch inputs"},
    {"batch_output", "there are no batch outputs"},
    {"default_model_filename", "a version directory holds the backend's default file"},
    {"cc_model_filenames", "per-device model files are not read"},
    {"metric_tags", "metrics carry the model and version labels only"},
    {"model_warmup", "sessions are created warm at load; no warm-up requests are sent"},
    {"model_operations", "custom operator libraries are not loaded"},
    {"model_transaction_policy", "every request gets exactly one response (not decoupled)"},
    {"model_repository_agents", "repository agents are not run"},
};

static int is_empty(json_t *v) {
  return json_is_false(v) || json_is_null(v) || (json_is_object(v) && !json_object_size(v)) ||
         (json_is_array(v) && !json_array_size(v)) ||
         (json_is_string(v) && !*json_string_value(v)) || (json_is_integer(v) && !json_integer_value(v));
}

static sip_error_t *map_config(sip__ctx_t *c, json_t *root, const char *model, json_t *io,
                               int *batched) {
  const char *name = json_string_value(json_object_get(root, "name"));
  if (name && *name && strcmp(name, model))
    return bad(c, "name '%s' is not the model's; expected '%s' (its directory's name)", name,
               model);
  if (json_object_get(root, "ensemble_scheduling"))
    return bad(c, "platform 'ensemble': an ensemble is a pipeline in sip; write its steps as "
                  "stages under pipeline_sessions in the server's config (docs/pipelines.md), "
                  "each stage naming its model's pool");
  sip_error_t *e = map_backend(c, root);
  long long mbs = 0;
  json_t *m = json_object_get(root, "max_batch_size");
  if (!e && m && (!get_int(m, &mbs) || mbs < 0 || mbs > 65536))
    e = bad(c, "max_batch_size: expected 0..65536");
  *batched = mbs > 0;
  json_t *v;
  if (!e && (v = json_object_get(root, "version_policy"))) e = map_versions(c, v);
  if (!e && (v = json_object_get(root, "instance_group"))) e = map_instances(c, v);
  if (!e && (v = json_object_get(root, "dynamic_batching"))) e = map_dynamic(c, v, mbs);
  if (!e && (v = json_object_get(root, "sequence_batching"))) e = map_sequence(c, v);
  if (!e) e = map_io(c, root, io);
  if (!e && (v = json_object_get(root, "parameters"))) map_params(c, v);
  if (!e && json_is_true(json_object_get(json_object_get(root, "response_cache"), "enable")))
    set(c, c->out, "response_cache", json_true()); /* the server's response cache */
  for (size_t i = 0; !e && i < sizeof OTHER / sizeof OTHER[0]; i++)
    if ((v = json_object_get(root, OTHER[i].field)) && !is_empty(v))
      warn(c, "%s is not used: %s", OTHER[i].field, OTHER[i].why);
  if (!e && mbs > 0 && !json_object_get(root, "dynamic_batching") &&
      !json_object_get(root, "sequence_batching"))
    warn(c, "max_batch_size %lld without dynamic_batching: requests of up to %lld rows run as "
            "sent, none are merged (as in Triton)", mbs, mbs);
  return e;
}

/* ---- JSON -> YAML (libyaml's emitter) ---- */

static int yaml_node(yaml_document_t *d, json_t *v) {
  char num[64];
  const char *s = num;
  yaml_scalar_style_t style = YAML_PLAIN_SCALAR_STYLE;
  if (json_is_object(v)) {
    int m = yaml_document_add_mapping(d, NULL, YAML_BLOCK_MAPPING_STYLE);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
      int kn = yaml_document_add_scalar(d, NULL, (yaml_char_t *)k, -1, YAML_PLAIN_SCALAR_STYLE);
      int vn = yaml_node(d, x);
      if (!m || !kn || !vn || !yaml_document_append_mapping_pair(d, m, kn, vn)) return 0;
    }
    return m;
  }
  if (json_is_array(v)) {
    int q = yaml_document_add_sequence(d, NULL, YAML_FLOW_SEQUENCE_STYLE);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
      int xn = yaml_node(d, x);
      if (!q || !xn || !yaml_document_append_sequence_item(d, q, xn)) return 0;
    }
    return q;
  }
  if (json_is_integer(v)) snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
  else if (json_is_boolean(v)) s = json_is_true(v) ? "true" : "false";
  else if (json_is_string(v)) s = json_string_value(v), style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
  else snprintf(num, sizeof num, "%.17g", json_number_value(v));
  return yaml_document_add_scalar(d, NULL, (yaml_char_t *)s, -1, style);
}

typedef struct outbuf {
  char *p;
  size_t n;
} outbuf_t;

static int write_out(void *data, unsigned char *buf, size_t size) {
  outbuf_t *o = data;
  char *p = sip__realloc(o->p, o->n + size + 1);
  if (!p) return 0;
  memcpy(p + o->n, buf, size);
  o->n += size;
  p[o->n] = '\0';
  o->p = p;
  return 1;
}

static char *to_yaml(json_t *v) {
  if (!json_object_size(v)) return sip__strdup("{}\n");
  yaml_document_t d;
  if (!yaml_document_initialize(&d, NULL, NULL, NULL, 1, 1)) return NULL;
  if (!yaml_node(&d, v)) {
    yaml_document_delete(&d);
    return NULL;
  }
  yaml_emitter_t em;
  outbuf_t o = {0};
  int ok = yaml_emitter_initialize(&em);
  if (ok) {
    yaml_emitter_set_output(&em, write_out, &o);
    yaml_emitter_set_width(&em, 100);
    ok = yaml_emitter_open(&em) && yaml_emitter_dump(&em, &d) && yaml_emitter_close(&em);
    yaml_emitter_delete(&em);
  } else {
    yaml_document_delete(&d);
  }
  if (!ok) {
    sip__free(o.p);
    return NULL;
  }
  return o.p;
}

sip_error_t *sip__triton_import(const char *text, size_t len, const char *source,
                                const char *model, const sip__backend_catalog_t *backends,
                                sip__triton_import_t *out) {
  memset(out, 0, sizeof *out);
  char *json = NULL, *pw = NULL;
  sip_error_t *e = sip__triton_pbtxt_to_json(text, len, source, &json, &pw);
  if (e) return e;
  json_error_t je;
  json_t *root = json_loads(json, 0, &je), *io = json_object();
  sip__free(json);
  sip__ctx_t c = {.source = source, .backends = backends, .out = json_object()};
  if (!root || !c.out || !io) e = SIP__OOM();
  if (!e) e = map_config(&c, root, model, io, &out->batched);
  if (!e && c.oom) e = SIP__OOM();
  if (!e && !(out->yaml = to_yaml(c.out))) e = SIP__OOM();
  if (!e && json_object_size(io)) {
    json_object_set_new(io, "name", json_string(model));
    if (!(out->io_json = json_dumps(io, JSON_COMPACT | JSON_SORT_KEYS))) e = SIP__OOM();
  }
  /* The parser's warnings (fields the schema lacks) first, then the map's. */
  if (!e && (pw || c.warn)) {
    out->warnings = sip__asprintf("%s%s%s", pw ? pw : "", pw && c.warn ? "\n" : "",
                                  c.warn ? c.warn : "");
    if (!out->warnings) e = SIP__OOM();
  }
  sip__free(pw);
  sip__free(c.warn);
  json_decref(c.out);
  json_decref(io);
  json_decref(root);
  if (e) sip__triton_import_clear(out);
  return e;
}

sip_error_t *sip__triton_import_file(const char *path, const char *model,
                                     const sip__backend_catalog_t *backends,
                                     sip__triton_import_t *out) {
  char *text = NULL;
  size_t len = 0;
  memset(out, 0, sizeof *out);
  sip_error_t *e = sip__config_read_file(path, &text, &len);
  if (!e) e = sip__triton_import(text, len, path, model, backends, out);
  sip__free(text);
  return e;
}

void sip__triton_import_clear(sip__triton_import_t *t) {
  if (!t) return;
  sip__free(t->yaml);
  sip__free(t->warnings);
  free(t->io_json); /* jansson's json_dumps */
  memset(t, 0, sizeof *t);
}
