/* sip — a Triton model configuration (JSON) given with a repository load
 * (`{"parameters": {"config": "<json>"}}`, tritonclient's
 * load_model(config=...)), mapped onto the settings of the model's pools.
 *
 * What maps: max_batch_size; dynamic_batching (preferred_batch_size,
 * max_queue_delay_microseconds, and sip's padding_strategy); instance_group
 * counts (KIND_CPU, KIND_AUTO, KIND_MODEL) → pool_size; version_policy;
 * sip's own priority and resource_quota, as the config endpoint reports
 * them. What is checked: name (the model's), platform/backend (the
 * model's backend's), input/output (names, data types and dims against the loaded
 * model). Triton's other fields are accepted only when they hold their
 * defaults (an empty object, list or string, false, 0), since sip has no
 * meaning for them; any other field is a 400 naming it. The text applied
 * is kept in canonical form so a reload with another config replaces the
 * running pools and a reload with the same one keeps them. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/core.h"

#define MAX_IO 256

typedef struct ov_io {
  char *name;
  sip_dtype_t dtype; /* SIP_DTYPE_INVALID: not given */
  int rank;          /* -1: dims not given */
  int64_t dims[SIP_MAX_RANK];
} ov_io_t;

struct sip__model_override {
  int max_batch_size; /* -1: not given */
  int has_batching;
  int64_t max_queue_delay_us; /* -1: not given */
  int has_preferred;
  int preferred[SIP__MAX_PREFERRED];
  size_t n_preferred;
  int padding; /* -1: not given */
  int instance_count; /* 0: not given */
  int has_versions;
  int version_policy, version_latest;
  int64_t versions[SIP__MAX_SPECIFIC_VERSIONS];
  size_t n_versions;
  int priority;                  /* -1: not given */
  int64_t max_memory_mb;         /* -1: not given */
  int max_compute_percent;       /* -1: not given */
  int response_cache;            /* response_cache.enable: 0/1; -1: not given */
  json_t *backend_options;       /* NULL: not given */
  char *platform, *backend;      /* as given (non-empty), checked at apply; NULL: not given */
  ov_io_t *io[2];                /* inputs, outputs */
  size_t n_io[2];
  char *canonical;
};

static const char *const io_kind[2] = {"input", "output"};

/* Triton fields sip has no meaning for: accepted at their defaults only. */
static const char *const triton_default_only[] = {
    "optimization", "model_warmup", "default_model_filename", "parameters",
    "cc_model_filenames", "metric_tags", "model_transaction_policy",
    "runtime", "sequence_batching", "ensemble_scheduling", "model_repository_agents",
    "batch_input", "batch_output", "model_operations", "model_metrics", NULL};
/* What the config endpoint reports about a version: read-only. */
static const char *const reported_only[] = {"model_path", "version", NULL};

static const char *const supported_text =
    "name, platform, backend, max_batch_size, dynamic_batching, instance_group, version_policy, "
    "input, output, priority, resource_quota, response_cache";

static int in_list(const char *const *l, const char *s) {
  for (; *l; l++)
    if (!strcmp(*l, s)) return 1;
  return 0;
}

static sip_error_t *bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static sip_error_t *bad(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sip_error_new(SIP_INVALID_ARGUMENT, "model config: %s", msg);
}

/* A default protobuf value: what Triton prints for a field left unset. */
static int is_default(json_t *v) {
  switch (json_typeof(v)) {
    case JSON_NULL:
    case JSON_FALSE: return 1;
    case JSON_OBJECT: {
      const char *k;
      json_t *x;
      json_object_foreach(v, k, x) if (!is_default(x)) return 0;
      return 1;
    }
    case JSON_ARRAY: return json_array_size(v) == 0;
    case JSON_STRING: return json_string_length(v) == 0;
    case JSON_INTEGER: return json_integer_value(v) == 0;
    case JSON_REAL: return json_real_value(v) == 0;
    default: return 0;
  }
}

/* An integer in [lo, hi]: a JSON integer, or a decimal string (protobuf's
 * JSON form of 64-bit fields). */
static sip_error_t *get_int(json_t *v, const char *what, int64_t lo, int64_t hi, int64_t *out) {
  long long x = 0;
  if (json_is_integer(v)) {
    x = json_integer_value(v);
  } else if (json_is_string(v)) {
    const char *s = json_string_value(v);
    char *end = NULL;
    errno = 0;
    x = strtoll(s, &end, 10);
    if (!*s || *end || errno) return bad("%s \"%s\" is not an integer; expected %lld..%lld", what,
                                         s, (long long)lo, (long long)hi);
  } else {
    return bad("%s is not an integer; expected %lld..%lld", what, (long long)lo, (long long)hi);
  }
  if (x < lo || x > hi)
    return bad("%s %lld is out of range; expected %lld..%lld", what, x, (long long)lo,
               (long long)hi);
  *out = x;
  return NULL;
}

/* Checks that `o` (an object) has only the keys in `keys`. */
static sip_error_t *only_keys(json_t *o, const char *what, const char *const *keys,
                              const char *expected) {
  if (!json_is_object(o)) return bad("%s is not an object; expected {%s}", what, expected);
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    if (!in_list(keys, k)) return bad("%s has unknown field '%s'; expected %s", what, k, expected);
  }
  return NULL;
}

static sip_error_t *parse_batching(sip__model_override_t *o, json_t *v) {
  static const char *const keys[] = {"preferred_batch_size", "max_queue_delay_microseconds",
                                     "padding_strategy", "preserve_ordering", "priority_levels",
                                     "default_priority_level", "default_queue_policy",
                                     "priority_queue_policy", NULL};
  sip_error_t *e = only_keys(v, "dynamic_batching", keys,
                             "preferred_batch_size, max_queue_delay_microseconds");
  if (e) return e;
  o->has_batching = 1;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (!strcmp(k, "preferred_batch_size")) {
      if (!json_is_array(x) || json_array_size(x) > SIP__MAX_PREFERRED)
        return bad("dynamic_batching.preferred_batch_size is not a list of up to %d sizes",
                   SIP__MAX_PREFERRED);
      o->has_preferred = 1;
      size_t i;
      json_t *it;
      json_array_foreach(x, i, it) {
        int64_t n;
        if ((e = get_int(it, "dynamic_batching.preferred_batch_size item", 1, 65536, &n)))
          return e;
        if (i && n <= o->preferred[i - 1])
          return bad("dynamic_batching.preferred_batch_size %lld is not larger than the size "
                     "before it; expected increasing sizes", (long long)n);
        o->preferred[i] = (int)n;
      }
      o->n_preferred = json_array_size(x);
    } else if (!strcmp(k, "max_queue_delay_microseconds")) {
      if ((e = get_int(x, "dynamic_batching.max_queue_delay_microseconds", 0, 60000000,
                       &o->max_queue_delay_us)))
        return e;
    } else if (!strcmp(k, "padding_strategy")) {
      static const char *const pads[] = {"none", "replicate_last", "zero", NULL};
      const char *s = json_string_value(x);
      int found = -1;
      for (int i = 0; s && pads[i]; i++)
        if (!strcmp(pads[i], s)) found = i;
      if (found < 0)
        return bad("dynamic_batching.padding_strategy is not one of none, replicate_last, zero");
      o->padding = found;
    } else if (!is_default(x)) {
      return bad("dynamic_batching.%s is not supported; sip schedules by request priority and "
                 "deadline (leave it out, or at its default)", k);
    }
  }
  return NULL;
}

static sip_error_t *parse_instances(sip__model_override_t *o, json_t *v) {
  if (!json_is_array(v) || !json_array_size(v))
    return bad("instance_group is not a non-empty list; expected [{\"count\": N, \"kind\": "
               "\"KIND_CPU\"}]");
  static const char *const keys[] = {"name", "kind", "count", "gpus", "rate_limiter",
                                     "secondary_devices", "profile", "passive",
                                     "host_policy", NULL};
  size_t i;
  json_t *g;
  int64_t total = 0;
  json_array_foreach(v, i, g) {
    sip_error_t *e = only_keys(g, "instance_group item", keys, "name, kind, count");
    if (e) return e;
    const char *k;
    json_t *x;
    int64_t count = 1;
    json_object_foreach(g, k, x) {
      if (!strcmp(k, "count")) {
        if ((e = get_int(x, "instance_group count", 1, 256, &count))) return e;
      } else if (!strcmp(k, "kind")) {
        const char *s = json_string_value(x);
        if (s && !strcmp(s, "KIND_GPU"))
          return bad("instance_group kind KIND_GPU cannot be served: this server runs models on "
                     "the CPU; expected KIND_CPU or KIND_AUTO");
        if (!s || (strcmp(s, "KIND_CPU") && strcmp(s, "KIND_AUTO") && strcmp(s, "KIND_MODEL")))
          return bad("instance_group kind is not one of KIND_CPU, KIND_AUTO, KIND_MODEL");
      } else if (strcmp(k, "name") && !is_default(x)) {
        return bad("instance_group %s is not supported (leave it out, or at its default)", k);
      }
    }
    total += count;
  }
  if (total > 256)
    return bad("instance_group counts add up to %lld; expected at most 256 instances",
               (long long)total);
  o->instance_count = (int)total;
  return NULL;
}

static sip_error_t *parse_versions(sip__model_override_t *o, json_t *v) {
  static const char *const keys[] = {"latest", "all", "specific", NULL};
  const char *exp = "one of {\"latest\": {\"num_versions\": N}}, {\"all\": {}}, "
                    "{\"specific\": {\"versions\": [...]}}";
  sip_error_t *e = only_keys(v, "version_policy", keys, exp);
  if (e) return e;
  if (json_object_size(v) != 1) return bad("version_policy has %zu policies; expected %s",
                                           json_object_size(v), exp);
  o->has_versions = 1;
  json_t *x;
  int64_t n;
  if ((x = json_object_get(v, "latest"))) {
    static const char *const lk[] = {"num_versions", NULL};
    if ((e = only_keys(x, "version_policy.latest", lk, "num_versions"))) return e;
    json_t *nv = json_object_get(x, "num_versions");
    n = 1;
    if (nv && (e = get_int(nv, "version_policy.latest.num_versions", 1, 1024, &n))) return e;
    o->version_policy = SIP__VERSIONS_LATEST;
    o->version_latest = (int)n;
  } else if ((x = json_object_get(v, "all"))) {
    if (!json_is_object(x) || json_object_size(x))
      return bad("version_policy.all is not an empty object; expected {}");
    o->version_policy = SIP__VERSIONS_ALL;
  } else {
    x = json_object_get(v, "specific");
    static const char *const sk[] = {"versions", NULL};
    if ((e = only_keys(x, "version_policy.specific", sk, "versions"))) return e;
    json_t *l = json_object_get(x, "versions");
    if (!json_is_array(l) || !json_array_size(l) ||
        json_array_size(l) > SIP__MAX_SPECIFIC_VERSIONS)
      return bad("version_policy.specific.versions is not a list of 1..%d versions",
                 SIP__MAX_SPECIFIC_VERSIONS);
    size_t i;
    json_t *it;
    int64_t tmp[SIP__MAX_SPECIFIC_VERSIONS];
    json_array_foreach(l, i, it) {
      if ((e = get_int(it, "version_policy.specific version", 1, INT64_MAX, &tmp[i]))) return e;
    }
    size_t cnt = json_array_size(l);
    /* Kept increasing and without repeats, as the config file's are. */
    for (size_t a = 1; a < cnt; a++)
      for (size_t b = a; b > 0 && tmp[b] < tmp[b - 1]; b--) {
        int64_t t = tmp[b];
        tmp[b] = tmp[b - 1];
        tmp[b - 1] = t;
      }
    o->n_versions = 0;
    for (size_t a = 0; a < cnt; a++)
      if (!a || tmp[a] != tmp[a - 1]) o->versions[o->n_versions++] = tmp[a];
    o->version_policy = SIP__VERSIONS_SPECIFIC;
  }
  return NULL;
}

static sip_error_t *parse_io(sip__model_override_t *o, int out, json_t *v) {
  const char *what = io_kind[out];
  if (!json_is_array(v) || json_array_size(v) > MAX_IO)
    return bad("%s is not a list of up to %d tensors; expected [{\"name\", \"data_type\", "
               "\"dims\"}]", what, MAX_IO);
  o->io[out] = sip__calloc(json_array_size(v) + 1, sizeof *o->io[out]);
  if (!o->io[out]) return SIP__OOM();
  static const char *const keys[] = {"name", "data_type", "dims", "format", "reshape",
                                     "is_shape_tensor", "allow_ragged_batch", "optional",
                                     "label_filename", "is_non_linear_format_io", NULL};
  size_t i;
  json_t *t;
  json_array_foreach(v, i, t) {
    char w[64];
    snprintf(w, sizeof w, "%s %zu", what, i);
    sip_error_t *e = only_keys(t, w, keys, "name, data_type, dims");
    if (e) return e;
    ov_io_t *d = &o->io[out][o->n_io[out]++];
    d->rank = -1;
    d->dtype = SIP_DTYPE_INVALID;
    const char *name = json_string_value(json_object_get(t, "name"));
    if (!name || !*name) return bad("%s has no name; expected a string", w);
    if (!(d->name = sip__strdup(name))) return SIP__OOM();
    const char *k;
    json_t *x;
    json_object_foreach(t, k, x) {
      if (!strcmp(k, "name")) continue;
      if (!strcmp(k, "data_type")) {
        const char *s = json_string_value(x);
        if (s && !strncmp(s, "TYPE_", 5))
          d->dtype = sip__dtype_from_protocol(strcmp(s, "TYPE_STRING") ? s + 5 : "BYTES");
        if (d->dtype == SIP_DTYPE_INVALID)
          return bad("%s '%s' data_type is not a Triton type such as TYPE_FP32 or TYPE_STRING",
                     what, name);
      } else if (!strcmp(k, "dims")) {
        if (!json_is_array(x) || json_array_size(x) > SIP_MAX_RANK)
          return bad("%s '%s' dims is not a list of up to %d sizes", what, name, SIP_MAX_RANK);
        size_t j;
        json_t *dj;
        json_array_foreach(x, j, dj) {
          if ((e = get_int(dj, "dims item", -1, INT64_MAX, &d->dims[j]))) return e;
        }
        d->rank = (int)json_array_size(x);
      } else if (!(!strcmp(k, "format") && json_is_string(x) &&
                   !strcmp(json_string_value(x), "FORMAT_NONE")) &&
                 !is_default(x)) {
        return bad("%s '%s' field %s is not supported (leave it out, or at its default)", what,
                   name, k);
      }
    }
  }
  return NULL;
}

static sip_error_t *parse_quota(sip__model_override_t *o, json_t *v) {
  static const char *const keys[] = {"max_memory_mb", "max_compute_percent", NULL};
  sip_error_t *e = only_keys(v, "resource_quota", keys, "max_memory_mb, max_compute_percent");
  if (e) return e;
  json_t *x;
  int64_t n;
  if ((x = json_object_get(v, "max_memory_mb"))) {
    if ((e = get_int(x, "resource_quota.max_memory_mb", 0, 1048576, &n))) return e;
    o->max_memory_mb = n;
  }
  if ((x = json_object_get(v, "max_compute_percent"))) {
    if ((e = get_int(x, "resource_quota.max_compute_percent", 0, 100, &n))) return e;
    o->max_compute_percent = (int)n;
  }
  return NULL;
}

static sip_error_t *parse_field(sip__model_override_t *o, const char *model, const char *k,
                                json_t *v) {
  sip_error_t *e = NULL;
  if (!strcmp(k, "name")) {
    if (!json_is_string(v) || strcmp(json_string_value(v), model))
      return bad("name is not the model's; expected \"%s\" (or leave it out)", model);
  } else if (!strcmp(k, "platform") || !strcmp(k, "backend")) {
    /* Checked against the model's backend when applied. */
    char **slot = k[0] == 'p' ? &o->platform : &o->backend;
    if (!json_is_string(v))
      return bad("%s is not a string; expected the model's %s, or leave it out", k, k);
    if (json_string_length(v) && !(*slot = sip__strdup(json_string_value(v)))) return SIP__OOM();
  } else if (!strcmp(k, "max_batch_size")) {
    int64_t n;
    if ((e = get_int(v, "max_batch_size", 0, 65536, &n))) return e;
    o->max_batch_size = (int)n;
  } else if (!strcmp(k, "dynamic_batching")) {
    e = parse_batching(o, v);
  } else if (!strcmp(k, "instance_group")) {
    e = parse_instances(o, v);
  } else if (!strcmp(k, "version_policy")) {
    e = parse_versions(o, v);
  } else if (!strcmp(k, "input") || !strcmp(k, "output")) {
    e = parse_io(o, !strcmp(k, "output"), v);
  } else if (!strcmp(k, "priority")) {
    static const char *const prios[] = {"high", "medium", "low", NULL};
    const char *s = json_string_value(v);
    for (int i = 0; s && prios[i]; i++)
      if (!strcmp(prios[i], s)) o->priority = i;
    if (o->priority < 0) return bad("priority is not one of high, medium, low");
  } else if (!strcmp(k, "resource_quota")) {
    e = parse_quota(o, v);
  } else if (!strcmp(k, "response_cache")) { /* Triton's {enable: bool}: the server's cache */
    json_t *en = json_object_get(v, "enable");
    if (!json_is_object(v) || json_object_size(v) > (en != NULL) || (en && !json_is_boolean(en)))
      return bad("response_cache is not {\"enable\": true|false}");
    o->response_cache = json_is_true(en);
  } else if (!strcmp(k, "backend_options")) {
    if (!json_is_object(v)) return bad("backend_options is not an object of strings");
    o->backend_options = json_incref(v);
  } else if (in_list(reported_only, k)) {
    /* Reported by the config endpoint for the version it describes; a load
     * takes the files from the repository. */
  } else if (in_list(triton_default_only, k)) {
    if (!is_default(v))
      return bad("field '%s' is not supported by this server (leave it out, or at its default); "
                 "supported: %s", k, supported_text);
  } else {
    return bad("unknown field '%s'; expected Triton model config fields: %s", k, supported_text);
  }
  return e;
}

void sip__model_override_free(sip__model_override_t *o) {
  if (!o) return;
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < o->n_io[k]; i++) sip__free(o->io[k][i].name);
    sip__free(o->io[k]);
  }
  json_decref(o->backend_options);
  sip__free(o->platform);
  sip__free(o->backend);
  sip__free(o->canonical);
  sip__free(o);
}

sip_error_t *sip__model_override_parse(const char *text, size_t len, const char *model,
                                       sip__model_override_t **out) {
  *out = NULL;
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return bad("not valid JSON (%s at line %d column %d); expected a Triton model config object",
               je.text, je.line, je.column);
  if (!json_is_object(root)) {
    json_decref(root);
    return bad("not a JSON object; expected a Triton model config object");
  }
  sip__model_override_t *o = sip__calloc(1, sizeof *o);
  if (!o) {
    json_decref(root);
    return SIP__OOM();
  }
  o->max_batch_size = -1;
  o->max_queue_delay_us = -1;
  o->padding = -1;
  o->priority = -1;
  o->max_memory_mb = -1;
  o->max_compute_percent = -1;
  o->response_cache = -1;
  sip_error_t *e = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if ((e = parse_field(o, model, k, v))) break;
  }
  if (!e && o->has_batching && o->max_batch_size == 0)
    e = bad("dynamic_batching needs max_batch_size > 0 (the model's batch dimension)");
  if (!e) {
    for (size_t i = 0; i < o->n_preferred && !e; i++)
      if (o->max_batch_size > 0 && o->preferred[i] > o->max_batch_size)
        e = bad("dynamic_batching.preferred_batch_size %d is larger than max_batch_size %d",
                o->preferred[i], o->max_batch_size);
  }
  if (!e && !(o->canonical = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT))) e = SIP__OOM();
  json_decref(root);
  if (e) {
    sip__model_override_free(o);
    return e;
  }
  *out = o;
  return NULL;
}

const char *sip__model_override_text(const sip__model_override_t *o) {
  return o ? o->canonical : "";
}

void sip__model_override_versions(const sip__model_override_t *o, sip__pool_config_t *pc) {
  if (!o || !o->has_versions) return;
  pc->version_policy = o->version_policy;
  pc->version_latest = o->version_latest;
  memcpy(pc->versions, o->versions, o->n_versions * sizeof *o->versions);
  pc->n_versions = o->n_versions;
}

/* 1 when the pool's backend_options are exactly `want` (an object of
 * strings). */
static int same_options(const sip__pool_config_t *pc, json_t *want) {
  if (json_object_size(want) != pc->n_backend_options) return 0;
  for (size_t i = 0; i < pc->n_backend_options; i++) {
    const char *s = json_string_value(json_object_get(want, pc->backend_options[i].key));
    if (!s || strcmp(s, pc->backend_options[i].value)) return 0;
  }
  return 1;
}

sip_error_t *sip__model_override_apply(const sip__model_override_t *o, sip__pool_config_t *pc) {
  if (!o) return NULL;
  if (o->backend && (!pc->backend || strcmp(o->backend, pc->backend)))
    return bad("backend is not %s; this model is served by the %s backend", pc->backend,
               pc->backend);
  if (o->platform && (!pc->platform || strcmp(o->platform, pc->platform)))
    return bad("platform is not %s; this model is served by the %s backend",
               pc->platform ? pc->platform : "-", pc->backend);
  /* backend_options may name files (custom operator libraries): a load
   * request cannot change them, only repeat them. */
  if (o->backend_options && !same_options(pc, o->backend_options))
    return bad("backend_options cannot be changed by a load request (they may name files on the "
               "server); expected the model's own, as its config endpoint reports them, or leave "
               "them out and edit config.yaml");
  if (o->max_batch_size >= 0) pc->max_batch_size = o->max_batch_size;
  if (o->max_batch_size == 0) { /* no batching: nothing of it stays */
    pc->n_preferred = 0;
    pc->max_queue_delay_us = 0;
    memset(pc->batch_levels, 0, sizeof pc->batch_levels);
  }
  if (o->has_preferred) {
    memcpy(pc->preferred_batch_sizes, o->preferred, o->n_preferred * sizeof *o->preferred);
    pc->n_preferred = o->n_preferred;
  }
  if (o->max_queue_delay_us >= 0) pc->max_queue_delay_us = o->max_queue_delay_us;
  if (o->padding >= 0) pc->padding_strategy = o->padding;
  if (o->instance_count) pc->pool_size = o->instance_count;
  if (o->priority >= 0) pc->priority = (sip__priority_level_t)o->priority;
  if (o->max_memory_mb >= 0) pc->max_memory_mb = o->max_memory_mb;
  if (o->max_compute_percent >= 0) pc->max_compute_percent = o->max_compute_percent;
  if (o->response_cache >= 0) pc->response_cache = o->response_cache;
  sip__model_override_versions(o, pc);
  if (o->has_batching && !pc->max_batch_size)
    return bad("dynamic_batching needs max_batch_size > 0, and the model's config.yaml sets "
               "none; give max_batch_size too");
  for (size_t i = 0; i < pc->n_preferred; i++)
    if (pc->preferred_batch_sizes[i] > pc->max_batch_size)
      return bad("dynamic_batching.preferred_batch_size %d is larger than max_batch_size %d",
                 pc->preferred_batch_sizes[i], pc->max_batch_size);
  for (int i = 0; i < 3; i++)
    if (pc->batch_levels[i].max_batch > pc->max_batch_size)
      return bad("max_batch_size %d is smaller than batch_strategies' max_batch %d in the "
                 "model's config.yaml; expected at least %d",
                 pc->max_batch_size, pc->batch_levels[i].max_batch,
                 pc->batch_levels[i].max_batch);
  return NULL;
}

/* Triton's config name of a data type: TYPE_FP32, TYPE_STRING... */
static const char *triton_type(sip_dtype_t dt, char *buf, size_t size) {
  const char *p = sip__dtype_protocol_name(dt);
  snprintf(buf, size, "TYPE_%s", !p ? "INVALID" : strcmp(p, "BYTES") ? p : "STRING");
  return buf;
}

/* Declared dims fit the model's: equal rank with -1 matching anything, or
 * Triton's form without the batch dimension when the model batches. */
static int dims_fit(const ov_io_t *d, const sip_io_desc_t *m, int batched) {
  if (d->rank < 0 || m->rank < 0) return 1;
  for (int skip = 0; skip <= (batched && m->rank > 0); skip++) {
    if (d->rank != m->rank - skip) continue;
    int ok = 1;
    for (int k = 0; k < d->rank && ok; k++) {
      int64_t a = d->dims[k], b = m->dims[k + skip];
      ok = a < 0 || b < 0 || a == b;
    }
    if (ok) return 1;
  }
  return 0;
}

sip_error_t *sip__model_override_check_io(const sip__model_override_t *o,
                                          const sip_io_desc_t *const io[2], const size_t n[2],
                                          int batched) {
  if (!o) return NULL;
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < o->n_io[k]; i++) {
      const ov_io_t *d = &o->io[k][i];
      const sip_io_desc_t *m = NULL;
      for (size_t j = 0; j < n[k] && !m; j++)
        if (!strcmp(io[k][j].name, d->name)) m = &io[k][j];
      if (!m) return bad("%s '%s' is not an %s of the model", io_kind[k], d->name, io_kind[k]);
      char a[32], b[32];
      if (d->dtype != SIP_DTYPE_INVALID && d->dtype != m->dtype)
        return bad("%s '%s' data_type is %s, but the model's is %s", io_kind[k], d->name,
                   triton_type(d->dtype, a, sizeof a), triton_type(m->dtype, b, sizeof b));
      if (!dims_fit(d, m, batched)) {
        char want[128], have[128];
        sip__shape_str(want, sizeof want, d->rank, d->dims, ",");
        sip__shape_str(have, sizeof have, m->rank, m->dims, ",");
        return bad("%s '%s' dims %s do not fit the model's shape %s", io_kind[k], d->name, want,
                   have);
      }
    }
  }
  return NULL;
}
