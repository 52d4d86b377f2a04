/* sip — the ONNX Runtime backend's options: the option table the config
 * checks and docs/config.md lists, their parsing at load, and execution
 * providers (`execution_providers: [{name: cuda, device_id: 0}, cpu]`):
 * refused at config check when this ORT build lacks one (the list comes
 * from OrtGetAvailableProviders), appended to the session options in
 * order at load. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "onnxruntime_c_api.h"

#include "backend/onnxruntime_impl.h"
#include "core/core.h"

/* ---- the table ----------------------------------------------------------- */

static const char *const levels[] = {"disable", "basic", "extended", "all", NULL};

const sip_backend_option_t sip__ort_options[SIP__ORT_N_OPTIONS] = {
    {.name = "graph_optimization_level", .type = SIP_OPTION_ENUM, .def = "all", .values = levels,
     .doc = "How far ONNX Runtime rewrites the graph before running it."},
    {.name = "execution_providers", .type = SIP_OPTION_LIST, .def = "[cpu]",
     .doc = "Execution providers in order of preference, each a name (cuda, tensorrt, rocm, "
            "openvino, dnnl, cpu...) or a map {name: cuda, device_id: 0, ...} whose other keys "
            "are ONNX Runtime's provider options; a provider this build lacks is refused at "
            "config check, listing those it has. With cuda or tensorrt first, inputs and "
            "outputs live in device memory (copied and counted by the engine)."},
    {.name = "execution_provider", .type = SIP_OPTION_STRING, .def = "cpu",
     .doc = "One provider by name; the same as execution_providers: [name]."},
    {.name = "enable_cpu_mem_arena", .type = SIP_OPTION_BOOL, .def = "true",
     .doc = "ONNX Runtime's CPU memory arena; off in a pool with max_memory_mb, whose "
            "accounting allocator takes its place (docs/elastic.md)."},
    {.name = "enable_mem_pattern", .type = SIP_OPTION_BOOL, .def = "true",
     .doc = "Pre-plan memory from the first run's allocation pattern."},
    {.name = "own_intra_op_threads", .type = SIP_OPTION_INT, .def = "0", .min = 0, .max = 256,
     .doc = "0: share the server's global intra-op pool (server.intra_op_threads); N: this "
            "model gets its own pool of N threads."},
};

/* ---- providers ----------------------------------------------------------- */

static const struct {
  const char *alias, *ort;
} provider_names[] = {
    {"cpu", "CPUExecutionProvider"},        {"cuda", "CUDAExecutionProvider"},
    {"tensorrt", "TensorrtExecutionProvider"}, {"rocm", "ROCMExecutionProvider"},
    {"migraphx", "MIGraphXExecutionProvider"}, {"openvino", "OpenVINOExecutionProvider"},
    {"dnnl", "DnnlExecutionProvider"},      {"xnnpack", "XnnpackExecutionProvider"},
    {"qnn", "QNNExecutionProvider"},        {"coreml", "CoreMLExecutionProvider"},
    {"webgpu", "WebGpuExecutionProvider"},  {"azure", "AzureExecutionProvider"},
};
#define N_PROVIDER_NAMES (sizeof provider_names / sizeof provider_names[0])

/* ORT's name for a provider written as an alias or as ORT's own name. */
static const char *ort_provider_name(const char *name) {
  for (size_t i = 0; i < N_PROVIDER_NAMES; i++)
    if (!strcasecmp(name, provider_names[i].alias) || !strcmp(name, provider_names[i].ort))
      return provider_names[i].ort;
  return name;
}

/* The short name of ORT's name (for SessionOptionsAppendExecutionProvider
 * and messages): "cuda" for CUDAExecutionProvider. */
static const char *alias_of(const char *ort) {
  for (size_t i = 0; i < N_PROVIDER_NAMES; i++)
    if (!strcmp(ort, provider_names[i].ort)) return provider_names[i].alias;
  return ort;
}

void sip__ort_providers_free(sip__ort_provider_t *p, size_t n) {
  for (size_t i = 0; p && i < n; i++) {
    sip__free(p[i].name);
    for (size_t k = 0; k < p[i].n; k++) {
      sip__free(p[i].keys[k]);
      sip__free(p[i].values[k]);
    }
    sip__free(p[i].keys);
    sip__free(p[i].values);
  }
  sip__free(p);
}

/* Parses execution_providers' JSON ([{"name": "cuda", "device_id": "0"}])
 * or one name (execution_provider) into lo->providers. */
static sip_error_t *parse_providers(const char *key, const char *text, int list,
                                    sip__ort_load_options_t *lo) {
  json_error_t je;
  json_t *arr = list ? json_loads(text, 0, &je) : json_pack("[{s:s}]", "name", text);
  if (!arr || !json_is_array(arr) || !json_array_size(arr)) {
    json_decref(arr);
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: backend option '%s' is '%s'; expected "
                         "a non-empty list of providers ([{name: cuda, device_id: 0}, cpu])",
                         key, text);
  }
  size_t n = json_array_size(arr);
  sip__ort_provider_t *p = sip__calloc(n, sizeof *p);
  sip_error_t *e = p ? NULL : SIP__OOM();
  for (size_t i = 0; !e && i < n; i++) {
    json_t *item = json_array_get(arr, i), *v;
    const char *k;
    json_t *name = json_object_get(item, "name");
    if (!json_is_object(item) || !json_is_string(name)) {
      e = sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: %s[%zu] has no name; expected a "
                        "provider name or {name: ..., option: value}", key, i);
      break;
    }
    p[i].name = sip__strdup(ort_provider_name(json_string_value(name)));
    p[i].device_id = 0;
    size_t m = json_object_size(item);
    p[i].keys = sip__calloc(m, sizeof *p[i].keys);
    p[i].values = sip__calloc(m, sizeof *p[i].values);
    if (!p[i].name || !p[i].keys || !p[i].values) e = SIP__OOM();
    json_object_foreach(item, k, v) {
      if (e || !strcmp(k, "name")) continue;
      if (!json_is_string(v)) {
        e = sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: %s[%zu].%s is not a scalar; "
                          "expected ONNX Runtime provider option values as scalars", key, i, k);
        break;
      }
      if (!strcmp(k, "device_id")) {
        char *end;
        long d = strtol(json_string_value(v), &end, 10);
        if (end == json_string_value(v) || *end || d < 0 || d > 1023) {
          e = sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: %s[%zu].device_id is '%s'; "
                            "expected a device number 0..1023", key, i, json_string_value(v));
          break;
        }
        p[i].device_id = (int)d;
      }
      size_t at = p[i].n;
      if (!(p[i].keys[at] = sip__strdup(k)) || !(p[i].values[at] = sip__strdup(json_string_value(v))))
        e = SIP__OOM();
      p[i].n++;
    }
  }
  json_decref(arr);
  if (e) {
    sip__ort_providers_free(p, n);
    return e;
  }
  sip__ort_providers_free(lo->providers, lo->n_providers);
  lo->providers = p;
  lo->n_providers = n;
  return NULL;
}

/* Every provider of lo is in this ORT build: else UNIMPLEMENTED naming the
 * missing one and listing the build's (OrtGetAvailableProviders). */
static sip_error_t *check_available(const sip__ort_load_options_t *lo) {
  if (!lo->n_providers) return NULL;
  if (!sip__ort_api()) return sip_error_new(SIP_FAILED_PRECONDITION, "onnxruntime: no C API");
  char **have = NULL;
  int n = 0;
  OrtStatus *st = sip__ort->GetAvailableProviders(&have, &n);
  if (st) return sip__ort_status_error(st, SIP_INTERNAL, "onnxruntime: available providers");
  sip_error_t *e = NULL;
  for (size_t i = 0; !e && i < lo->n_providers; i++) {
    int found = 0;
    for (int k = 0; k < n && !found; k++) found = !strcmp(have[k], lo->providers[i].name);
    if (found) continue;
    char list[1024];
    size_t at = 0;
    list[0] = '\0';
    for (int k = 0; k < n && at < sizeof list; k++)
      at += (size_t)snprintf(list + at, sizeof list - at, "%s%s (%s)", k ? ", " : "",
                             alias_of(have[k]), have[k]);
    e = sip_error_new(SIP_UNIMPLEMENTED, "onnxruntime: execution provider '%s' is not in this "
                      "build of ONNX Runtime; available: %s%s", alias_of(lo->providers[i].name),
                      list, strcmp(alias_of(lo->providers[i].name), "cuda") &&
                      strcmp(alias_of(lo->providers[i].name), "tensorrt") ? "" :
                      " (the GPU build: SIP_ORT_GPU=1 scripts/deps.sh)");
  }
  st = sip__ort->ReleaseAvailableProviders(have, n);
  if (st) sip__ort->ReleaseStatus(st);
  return e;
}

OrtStatus *sip__ort_append_providers(const sip__ort_load_options_t *lo, OrtSessionOptions *so) {
  OrtStatus *st = NULL;
  for (size_t i = 0; !st && i < lo->n_providers; i++) {
    const sip__ort_provider_t *p = &lo->providers[i];
    const char *const *k = (const char *const *)p->keys, *const *v = (const char *const *)p->values;
    if (!strcmp(p->name, "CPUExecutionProvider")) continue; /* always there, last */
    if (!strcmp(p->name, "CUDAExecutionProvider")) {
      OrtCUDAProviderOptionsV2 *o = NULL;
      st = sip__ort->CreateCUDAProviderOptions(&o);
      if (!st) st = sip__ort->UpdateCUDAProviderOptions(o, k, v, p->n);
      if (!st) st = sip__ort->SessionOptionsAppendExecutionProvider_CUDA_V2(so, o);
      if (o) sip__ort->ReleaseCUDAProviderOptions(o);
    } else if (!strcmp(p->name, "TensorrtExecutionProvider")) {
      OrtTensorRTProviderOptionsV2 *o = NULL;
      st = sip__ort->CreateTensorRTProviderOptions(&o);
      if (!st) st = sip__ort->UpdateTensorRTProviderOptions(o, k, v, p->n);
      if (!st) st = sip__ort->SessionOptionsAppendExecutionProvider_TensorRT_V2(so, o);
      if (o) sip__ort->ReleaseTensorRTProviderOptions(o);
    } else {
      /* The generic entry takes ORT's short names (QNN, OpenVINO...). */
      const char *short_name = p->name;
      static const char suffix[] = "ExecutionProvider";
      char buf[64];
      size_t l = strlen(p->name);
      if (l > sizeof suffix - 1 && l - (sizeof suffix - 1) < sizeof buf &&
          !strcmp(p->name + l - (sizeof suffix - 1), suffix)) {
        memcpy(buf, p->name, l - (sizeof suffix - 1));
        buf[l - (sizeof suffix - 1)] = '\0';
        short_name = buf;
      }
      st = sip__ort->SessionOptionsAppendExecutionProvider(so, short_name, k, v, p->n);
    }
  }
  return st;
}

/* ---- parsing ------------------------------------------------------------- */

static int parse_bool(const char *v, int *out) {
  static const char *const yes[] = {"true", "1", "yes", "on"};
  static const char *const no[] = {"false", "0", "no", "off"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (!strcasecmp(v, yes[i])) return *out = 1, 0;
    if (!strcasecmp(v, no[i])) return *out = 0, 0;
  }
  return -1;
}

static sip_error_t *opt_bool(const char *key, const char *v, int *out) {
  if (parse_bool(v, out) == 0) return NULL;
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "onnxruntime: backend option '%s' is '%s'; expected true or false", key, v);
}

static sip_error_t *parse_one(const char *key, const char *v, sip__ort_load_options_t *lo) {
  static const GraphOptimizationLevel level_of[] = {ORT_DISABLE_ALL, ORT_ENABLE_BASIC,
                                                    ORT_ENABLE_EXTENDED, ORT_ENABLE_ALL};
  if (!strcmp(key, "graph_optimization_level")) {
    for (size_t i = 0; levels[i]; i++)
      if (!strcasecmp(v, levels[i])) return lo->opt_level = level_of[i], NULL;
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: backend option '%s' is '%s'; "
                         "expected one of disable, basic, extended, all", key, v);
  }
  if (!strcmp(key, "execution_providers")) return parse_providers(key, v, 1, lo);
  if (!strcmp(key, "execution_provider")) return parse_providers(key, v, 0, lo);
  if (!strcmp(key, "enable_cpu_mem_arena")) return opt_bool(key, v, &lo->mem_arena);
  if (!strcmp(key, "enable_mem_pattern")) return opt_bool(key, v, &lo->mem_pattern);
  if (!strcmp(key, SIP_BACKEND_OPTION_MAX_MEMORY_MB)) { /* from the engine, not the config */
    char *end;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end || n < 0 || n > 1048576)
      return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: '%s' is '%s'; expected MiB "
                           "0..1048576", key, v);
    lo->max_memory_mb = n;
    return NULL;
  }
  if (!strcmp(key, "own_intra_op_threads")) {
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < 0 || n > 256)
      return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: backend option '%s' is '%s'; "
                           "expected 0 (share the global pool) or a thread count 1..256", key, v);
    lo->own_threads = (int)n;
    return NULL;
  }
  /* Thread settings are engine-wide because every model shares the one
   * global pool; accepting them per model would silently do nothing. */
  if (!strcmp(key, "intra_op_threads") || !strcmp(key, "inter_op_threads") ||
      !strcmp(key, "allow_spinning"))
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: '%s' is not a per-model backend "
                         "option: all models share one global thread pool; set server.%s "
                         "instead", key, key);
  char known[512];
  size_t at = 0;
  for (size_t i = 0; i < SIP__ORT_N_OPTIONS; i++)
    at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "",
                           sip__ort_options[i].name);
  return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: unknown backend option '%s' (known: "
                       "%s)", key, known);
}

sip_error_t *sip__ort_parse_options(const sip_kv_t *options, size_t n, sip__ort_load_options_t *lo) {
  memset(lo, 0, sizeof *lo);
  lo->opt_level = ORT_ENABLE_ALL;
  lo->mem_arena = -1;
  lo->mem_pattern = -1;
  lo->max_memory_mb = -1;
  if (n && !options)
    return sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: %zu backend options but no array", n);
  sip_error_t *e = NULL;
  for (size_t i = 0; !e && i < n; i++) {
    const char *key = options[i].key, *value = options[i].value;
    if (!key || !value)
      e = sip_error_new(SIP_INVALID_ARGUMENT, "onnxruntime: backend option %zu has no %s", i,
                        key ? "value" : "name");
    else
      e = parse_one(key, value, lo);
  }
  if (!e) e = check_available(lo);
  if (!e && lo->n_providers) {
    const char *first = lo->providers[0].name;
    if (!strcmp(first, "CUDAExecutionProvider") || !strcmp(first, "TensorrtExecutionProvider")) {
      lo->device = 1;
      lo->device_id = lo->providers[0].device_id;
    }
  }
  if (e) sip__ort_load_options_clear(lo);
  return e;
}

void sip__ort_load_options_clear(sip__ort_load_options_t *lo) {
  sip__ort_providers_free(lo->providers, lo->n_providers);
  lo->providers = NULL;
  lo->n_providers = 0;
}

sip_error_t *sip__ort_check_options(const sip_kv_t *options, size_t n) {
  sip__ort_load_options_t lo;
  sip_error_t *e = sip__ort_parse_options(options, n, &lo);
  if (!e) sip__ort_load_options_clear(&lo);
  return e;
}
