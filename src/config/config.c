/* sip — YAML configuration parser.
 *
 * libyaml builds the document tree; this file walks it against one
 * declarative table per section (name, type, default, bounds, doc), so the
 * defaults, the "expected ..." half of every message and the list of allowed
 * keys all come from the same place. Parsing stops at the first error.
 *
 * Every message reads `FILE:LINE:COL: KEY: what was wrong; expected WHAT`.
 * Positions are libyaml marks (0-based) printed 1-based; LINE:COL points at
 * the value for value errors and at the key for unknown/duplicate keys.
 *
 * Aliases are resolved by libyaml into shared nodes and may even form cycles
 * (`&a [*a]`). The walk is safe anyway: it only descends into the fixed
 * nesting of the schema (root -> server | session_pools -> pool ->
 * resource_quota | backend_options) and checks each node's kind first.
 */
#include "config/config.h"

#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "core/core.h"

/* Enums are stored through an int; make sure that is their representation. */
_Static_assert(sizeof(sip_priority_level_t) == sizeof(int), "enum is not int-sized");
_Static_assert(sizeof(sip_log_level_t) == sizeof(int), "enum is not int-sized");
_Static_assert(SIP_PRIO_HIGH == 0 && SIP_PRIO_MEDIUM == 1 && SIP_PRIO_LOW == 2,
               "priority_names[] follows the enum order");
_Static_assert(SIP_LOG_DEBUG == 0 && SIP_LOG_INFO == 1 && SIP_LOG_WARN == 2 && SIP_LOG_ERROR == 3,
               "log_level_names[] follows the enum order");

enum {
  KEY_MAX = 512,       /* key paths ("session_pools[3].resource_quota.x") */
  SHOW_MAX = 64,       /* bytes of a user value quoted in a message */
  MAX_FIELDS = 16,     /* fields per section */
  UNIX_PATH_MAX = 107, /* sizeof(sun_path) - 1 */
  POOL_NAME_MAX = 128,
};

/* A config larger than this is a mistake (or /dev/zero), not a config. */
#define CONFIG_FILE_MAX ((size_t)16 << 20)

#define DEFAULT_ENDPOINT "ipc:///tmp/sip_service.sock"

/* Where a pool map is being read: fields marked `only` exist in one place. */
enum { IN_POOL = 1, IN_MODEL = 2 };

typedef struct ctx {
  const char *name;     /* label for messages: the file path or "<string>" */
  const char *base_dir; /* relative model paths are joined to it; NULL: kept */
  yaml_document_t *doc;
  sip_error_t *err; /* the first error; set together with a -1 return */
  unsigned where;   /* IN_POOL inside session_pools[], IN_MODEL in a repository config.yaml */
  const sip_backend_catalog_t *backends; /* names and flags of the backends this server has */
  yaml_node_t *pipelines; /* pipeline_sessions, read after session_pools wherever it is written */
} ctx_t;

typedef enum ftype {
  F_INT,     /* int, decimal plain scalar within [min, max] */
  F_INT64,   /* int64_t, same */
  F_BOOL,    /* int 0/1: true | false */
  F_SIZE,    /* size_t: integer or "256MiB" within [min, max] */
  F_ENUM,    /* enum stored as int: index of the word in names[] */
  F_WORD,    /* char *: one of names[], stored as an owned copy */
  F_STRING,  /* char *: any non-empty scalar, optionally checked by valid() */
  F_SECTION, /* nested map whose fields store into the same base struct */
  F_CUSTOM,  /* parse() does it all */
} ftype_t;

typedef struct section section_t;
typedef int (*custom_fn)(ctx_t *c, yaml_node_t *v, const char *key, void *base);

typedef struct field {
  const char *name;
  ftype_t type;
  size_t offset;            /* into the base struct */
  int64_t def;              /* numeric default; may lie outside [min, max] (0 = unlimited) */
  int64_t min, max;         /* numeric bounds, inclusive */
  const char *const *names; /* F_ENUM / F_WORD: NULL-terminated */
  const section_t *section; /* F_SECTION */
  custom_fn parse;          /* F_CUSTOM */
  bool (*valid)(const char *s, size_t len); /* F_STRING, optional */
  bool required;
  /* 0: valid wherever the section is; IN_POOL: only in session_pools[]
   * entries; IN_MODEL: only in a model repository's config.yaml. */
  unsigned only;
  const char *expect; /* F_STRING / F_CUSTOM: what a valid value looks like */
  const char *doc;    /* one line for the reference documentation */
} field_t;

struct section {
  const field_t *fields;
  size_t n;
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int parse_endpoints(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_pools(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_options(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_preferred(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_thresholds(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_version_policy(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_preprocess(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_cpus(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int parse_backend(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static bool valid_pool_name(const char *s, size_t len);
static int parse_pipelines(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static int defer_pipelines(ctx_t *c, yaml_node_t *v, const char *key, void *base);
static bool valid_http_address(const char *s, size_t len);

static const char *const log_level_names[] = {"debug", "info", "warn", "error", NULL};
static const char *const priority_names[] = {"high", "medium", "low", NULL};
#define BACKEND_EXPECT "the name of a backend of this server (built in: onnxruntime, builtin, transform; or one the embedding program registered)"
static const char *const padding_names[] = {"none", "replicate_last", "zero", NULL};
static const char *const timeout_action_names[] = {"reject", "delay", NULL};
static const char *const model_control_names[] = {"startup", "explicit", NULL};

#define ENDPOINT_EXPECT                                                                          \
  "ipc://PATH, unix:///ABSOLUTE/PATH (at most 107 bytes) or tcp://HOST:PORT (port 0..65535, 0 = " \
  "ephemeral; IPv6 hosts in brackets)"
#define MODEL_PATH_EXPECT "a path to an .onnx file or a model directory"
#define PREPROCESS_EXPECT                                                                   \
  "a map of steps in order: input, decode, color_convert, resize, letterbox, to_tensor, " \
  "normalize, cast (docs/preprocess.md)"
#define HTTP_EXPECT "HOST:PORT (port 0..65535, 0 = ephemeral; IPv6 hosts in brackets)"
#define CPUS_EXPECT                                                                        \
  "logical CPU numbers 0..1023 as a list ([0, 1]) or ranges in taskset's form (\"0-3,8\" or " \
  "[0-3, 8]), each CPU once"
#define VERSION_POLICY_EXPECT                                                                  \
  "{latest: N} (N 1..1024), {specific: [V, ...]} (up to 64 distinct version numbers) or all"

/* ---- the schema ------------------------------------------------------- */

enum { Q_MEMORY, Q_COMPUTE, Q_COUNT };
static const field_t quota_fields[Q_COUNT] = {
    [Q_MEMORY] = {.name = "max_memory_mb", .type = F_INT64,
                  .offset = offsetof(sip_pool_config_t, max_memory_mb),
                  .def = 0, .min = 1, .max = 1048576,
                  .doc = "Memory budget of the pool in MiB; absent = unlimited."},
    [Q_COMPUTE] = {.name = "max_compute_percent", .type = F_INT,
                   .offset = offsetof(sip_pool_config_t, max_compute_percent),
                   .def = 0, .min = 1, .max = 100,
                   .doc = "Share of the compute the pool may use; absent = unlimited."},
};
static const section_t quota_section = {quota_fields, Q_COUNT};

enum { B_MAX, B_DELAY, B_PREFERRED, B_PADDING, B_COUNT };
static const field_t batching_fields[B_COUNT] = {
    [B_MAX] = {.name = "max_batch_size", .type = F_INT,
               .offset = offsetof(sip_pool_config_t, max_batch_size), .def = 0, .min = 1,
               .max = 65536, .required = true,
               .doc = "Most rows (dim 0) one execution takes from merged requests."},
    [B_DELAY] = {.name = "max_queue_delay_us", .type = F_INT64,
                 .offset = offsetof(sip_pool_config_t, max_queue_delay_us), .def = 0, .min = 0,
                 .max = 60000000,
                 .doc = "How long a short batch may wait for more requests (never past the "
                        "earliest deadline in it)."},
    [B_PREFERRED] = {.name = "preferred_batch_sizes", .type = F_CUSTOM, .parse = parse_preferred,
                     .expect = "a list of up to 16 increasing batch sizes, each 1..max_batch_size",
                     .doc = "Sizes dispatched at once when reached, without waiting."},
    [B_PADDING] = {.name = "padding_strategy", .type = F_ENUM,
                   .offset = offsetof(sip_pool_config_t, padding_strategy),
                   .names = padding_names, .def = SIP_PAD_NONE,
                   .doc = "How a short batch fills a model's fixed batch dim."},
};
static const section_t batching_section = {batching_fields, B_COUNT};

enum { QU_MAX, QU_TIMEOUT, QU_ACTION, QU_AGEING, QU_COUNT };
static const field_t queue_fields[QU_COUNT] = {
    [QU_MAX] = {.name = "max_size", .type = F_INT64,
                .offset = offsetof(sip_pool_config_t, queue_max_size), .def = 0, .min = 0,
                .max = 100000000, .doc = "Most queued requests; 0 = unbounded."},
    [QU_TIMEOUT] = {.name = "default_timeout_ms", .type = F_INT64,
                    .offset = offsetof(sip_pool_config_t, default_timeout_ms), .def = 0,
                    .min = 0, .max = 86400000,
                    .doc = "Deadline of requests that carry none; 0 = none."},
    [QU_ACTION] = {.name = "timeout_action", .type = F_ENUM,
                   .offset = offsetof(sip_pool_config_t, timeout_action),
                   .names = timeout_action_names, .def = SIP_TIMEOUT_REJECT,
                   .doc = "reject: answer DEADLINE_EXCEEDED; delay: run last, when idle."},
    [QU_AGEING] = {.name = "ageing_ms", .type = F_INT64,
                   .offset = offsetof(sip_pool_config_t, ageing_ms), .def = 2000, .min = 0,
                   .max = 86400000,
                   .doc = "A waiting request rises one priority level per ageing_ms; 0 = off."},
};
static const section_t queue_section = {queue_fields, QU_COUNT};

#define LEVEL_FIELDS(i)                                                                         \
  {{.name = "max_batch", .type = F_INT,                                                        \
    .offset = offsetof(sip_pool_config_t, batch_levels[i].max_batch), .def = 0, .min = 1,       \
    .max = 65536, .required = true, .doc = "Batch size at this traffic level."},               \
   {.name = "timeout", .type = F_INT64,                                                        \
    .offset = offsetof(sip_pool_config_t, batch_levels[i].timeout_ms), .def = 0, .min = 0,     \
    .max = 60000, .doc = "Milliseconds a batch may wait to fill at this level."}}
static const field_t level_fields[3][2] = {LEVEL_FIELDS(0), LEVEL_FIELDS(1), LEVEL_FIELDS(2)};
static const section_t level_sections[3] = {
    {level_fields[0], 2}, {level_fields[1], 2}, {level_fields[2], 2}};

enum { E_LOW, E_MEDIUM, E_HIGH, E_THRESH, E_COUNT };
static const field_t elastic_fields[E_COUNT] = {
    [E_LOW] = {.name = "low", .type = F_SECTION, .section = &level_sections[0], .required = true,
               .doc = "Batching below the first rate threshold."},
    [E_MEDIUM] = {.name = "medium", .type = F_SECTION, .section = &level_sections[1],
                  .required = true, .doc = "Batching between the thresholds."},
    [E_HIGH] = {.name = "high", .type = F_SECTION, .section = &level_sections[2],
                .required = true, .doc = "Batching above the second threshold."},
    [E_THRESH] = {.name = "rate_thresholds", .type = F_CUSTOM, .parse = parse_thresholds,
                  .expect = "two increasing arrival rates in requests per second, e.g. [50, 200]",
                  .doc = "Arrival rates (req/s) separating low|medium|high; default [50, 200]."},
};
static const section_t elastic_section = {elastic_fields, E_COUNT};

enum { P_NAME, P_MODEL_PATH, P_BACKEND, P_POOL_SIZE, P_PRIORITY, P_QUOTA, P_OPTIONS, P_BATCHING,
       P_QUEUE, P_ELASTIC, P_VERSIONS, P_PREPROCESS, P_CPUS, P_COUNT };
static const field_t pool_fields[P_COUNT] = {
    /* A repository model's name and files come from its directory. */
    [P_NAME] = {.name = "name", .type = F_STRING, .offset = offsetof(sip_pool_config_t, name),
                .valid = valid_pool_name, .required = true, .only = IN_POOL,
                .expect = "a pool name of 1..128 characters from A-Z a-z 0-9 _ . -",
                .doc = "Unique name clients address the pool by."},
    [P_MODEL_PATH] = {.name = "model_path", .type = F_STRING,
                      .offset = offsetof(sip_pool_config_t, model_path),
                      .expect = MODEL_PATH_EXPECT, .only = IN_POOL,
                      .doc = "Model file or directory; relative paths are relative to the "
                             "config file. Required unless backend is builtin or transform."},
    [P_BACKEND] = {.name = "backend", .type = F_CUSTOM, .parse = parse_backend,
                   .expect = BACKEND_EXPECT,
                   .doc = "Backend; default inferred from model_path (.onnx or directory: "
                          "onnxruntime)."},
    [P_POOL_SIZE] = {.name = "pool_size", .type = F_INT,
                     .offset = offsetof(sip_pool_config_t, pool_size),
                     .def = 1, .min = 1, .max = 256,
                     .doc = "Number of warm sessions."},
    [P_PRIORITY] = {.name = "priority", .type = F_ENUM,
                    .offset = offsetof(sip_pool_config_t, priority), .names = priority_names,
                    .def = SIP_PRIO_MEDIUM, .doc = "Scheduling priority."},
    [P_QUOTA] = {.name = "resource_quota", .type = F_SECTION, .section = &quota_section,
                 .doc = "Per-pool resource limits."},
    [P_OPTIONS] = {.name = "backend_options", .type = F_CUSTOM, .parse = parse_options,
                   .expect = "a map of scalar values (strings, numbers or bools)",
                   .doc = "Options passed to the backend as strings."},
    [P_BATCHING] = {.name = "dynamic_batching", .type = F_SECTION, .section = &batching_section,
                    .doc = "Merge queued requests along dim 0 into one execution."},
    [P_QUEUE] = {.name = "queue", .type = F_SECTION, .section = &queue_section,
                 .doc = "Queue size, default deadline, expiry action, ageing."},
    [P_ELASTIC] = {.name = "batch_strategies", .type = F_SECTION, .section = &elastic_section,
                   .doc = "Elastic batching: batch size and wait by traffic level."},
    [P_VERSIONS] = {.name = "version_policy", .type = F_CUSTOM, .parse = parse_version_policy,
                    .only = IN_MODEL, .expect = VERSION_POLICY_EXPECT,
                    .doc = "Which version directories are served; default {latest: 1}."},
    [P_PREPROCESS] = {.name = "preprocess", .type = F_CUSTOM, .parse = parse_preprocess,
                      .expect = PREPROCESS_EXPECT,
                      .doc = "Transforms run on one input before the model, so clients may send "
                             "raw images or PNG/JPEG bytes (docs/preprocess.md)."},
    [P_CPUS] = {.name = "cpu_affinity", .type = F_CUSTOM, .parse = parse_cpus,
                .expect = CPUS_EXPECT,
                .doc = "Logical CPUs the pool's session threads and own intra-op threads run "
                       "on (docs/scheduling.md); absent = any."},
};
static const section_t pool_section = {pool_fields, P_COUNT};

enum { S_ENDPOINTS, S_INTRA, S_INTER, S_SPIN, S_FRAME, S_LOG, S_HTTP, S_HTTP_BODY, S_HTTP_THREADS,
       S_SLOTS, S_REPO, S_CONTROL, S_COUNT };
static const field_t server_fields[S_COUNT] = {
    [S_ENDPOINTS] = {.name = "endpoints", .type = F_CUSTOM, .parse = parse_endpoints,
                     .expect = "a non-empty list of endpoints: " ENDPOINT_EXPECT,
                     .doc = "Addresses to listen on; default [" DEFAULT_ENDPOINT "]."},
    [S_INTRA] = {.name = "intra_op_threads", .type = F_INT,
                 .offset = offsetof(sip_config_t, engine.intra_op_threads),
                 .def = 0, .min = 0, .max = 256,
                 .doc = "Threads of the shared intra-op pool; 0 = number of cores."},
    [S_INTER] = {.name = "inter_op_threads", .type = F_INT,
                 .offset = offsetof(sip_config_t, engine.inter_op_threads),
                 .def = 0, .min = 0, .max = 256,
                 .doc = "Threads of the shared inter-op pool; 0 = 1."},
    [S_SPIN] = {.name = "allow_spinning", .type = F_BOOL,
                .offset = offsetof(sip_config_t, engine.allow_spinning), .def = 0,
                .doc = "Let idle engine threads spin instead of sleeping."},
    [S_FRAME] = {.name = "max_frame_bytes", .type = F_SIZE,
                 .offset = offsetof(sip_config_t, max_frame_bytes),
                 .def = (int64_t)256 << 20, .min = 1024, .max = (int64_t)4 << 30,
                 .doc = "Largest request or response frame."},
    [S_LOG] = {.name = "log_level", .type = F_ENUM, .offset = offsetof(sip_config_t, log_level),
               .names = log_level_names, .def = SIP_LOG_INFO, .doc = "Least severe level logged."},
    /* KServe v2 HTTP/REST front-end (src/http/). */
    [S_HTTP] = {.name = "http", .type = F_STRING, .offset = offsetof(sip_config_t, http),
                .valid = valid_http_address, .expect = HTTP_EXPECT,
                .doc = "Address of the KServe v2 HTTP/REST front-end and /metrics; absent = off."},
    [S_HTTP_BODY] = {.name = "http_max_body_bytes", .type = F_SIZE,
                     .offset = offsetof(sip_config_t, http_max_body_bytes),
                     .def = (int64_t)64 << 20, .min = 1024, .max = (int64_t)4 << 30,
                     .doc = "Largest HTTP request body; larger ones get 413 before being read."},
    [S_HTTP_THREADS] = {.name = "http_threads", .type = F_INT,
                        .offset = offsetof(sip_config_t, http_threads),
                        .def = 2, .min = 1, .max = 64,
                        .doc = "HTTP event-loop threads (they never wait for inference)."},
    [S_SLOTS] = {.name = "execution_slots", .type = F_INT,
                 .offset = offsetof(sip_config_t, execution_slots), .def = 0, .min = 0,
                 .max = 1024,
                 .doc = "Executions running at once across all pools (more wait, ordered by "
                        "pool priority and compute share); 0 = number of cores."},
    [S_REPO] = {.name = "model_repository", .type = F_STRING,
                .offset = offsetof(sip_config_t, model_repository),
                .expect = "a directory of <model>/<version>/model.onnx",
                .doc = "Model repository: every <model> directory is a pool per served version; "
                       "relative to the config file."},
    [S_CONTROL] = {.name = "model_control", .type = F_ENUM,
                   .offset = offsetof(sip_config_t, model_control), .names = model_control_names,
                   .def = SIP_MODEL_CONTROL_STARTUP,
                   .doc = "startup: load every repository model at start; explicit: only on "
                          "request. Load/unload work in both."},
};
static const section_t server_section = {server_fields, S_COUNT};

enum { T_SERVER, T_POOLS, T_PIPELINES, T_COUNT };
static const field_t top_fields[T_COUNT] = {
    [T_SERVER] = {.name = "server", .type = F_SECTION, .section = &server_section,
                  .doc = "Process-wide settings."},
    /* Required unless server.model_repository is set (checked in parse_document). */
    [T_POOLS] = {.name = "session_pools", .type = F_CUSTOM, .parse = parse_pools,
                 .expect = "a list of pools (may be empty: session_pools: [])",
                 .doc = "The model pools to serve."},
    [T_PIPELINES] = {.name = "pipeline_sessions", .type = F_CUSTOM, .parse = defer_pipelines,
                     .expect = "a list of pipelines (docs/pipelines.md)",
                     .doc = "Declarative multi-model pipelines."},
};
static const section_t top_section = {top_fields, T_COUNT};

_Static_assert(COUNT(quota_fields) <= MAX_FIELDS && COUNT(pool_fields) <= MAX_FIELDS &&
                   COUNT(server_fields) <= MAX_FIELDS && COUNT(top_fields) <= MAX_FIELDS,
               "raise MAX_FIELDS");

/* ---- messages --------------------------------------------------------- */

static int fail(ctx_t *c, yaml_mark_t m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(ctx_t *c, yaml_mark_t m, const char *key, const char *fmt, ...) {
  char what[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  c->err = sip_error_new(SIP_INVALID_ARGUMENT, "%s:%zu:%zu: %s: %s", c->name, m.line + 1,
                         m.column + 1, key[0] ? key : "(root)", what);
  return -1;
}

static int oom(ctx_t *c) {
  c->err = SIP_OOM();
  return -1;
}

/* Quotes a user value for a message: escapes what would garble a terminal
 * and cuts long values, so fuzzed or binary input yields a readable line. */
static const char *show(char *buf, size_t n, const char *s, size_t len) {
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

/* parent + "." + name, with the name sanitised and cut like show(). */
static void key_join(char *dst, const char *parent, const char *name, size_t len) {
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

static void key_index(char *dst, const char *parent, size_t i) {
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

/* Whether field f exists where the parser is (see field_t.only). */
static bool visible(const field_t *f, unsigned where) { return !f->only || (f->only & where); }

static void list_fields(char *buf, size_t n, const section_t *s, unsigned where) {
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
static const char *expected(char *buf, size_t n, const field_t *f, unsigned where) {
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
    list_fields(buf, n, f->section, where);
    break;
  case F_STRING:
  case F_CUSTOM:
    snprintf(buf, n, "%s", f->expect);
    break;
  }
  return buf;
}

/* ---- scalars ---------------------------------------------------------- */

static bool is_null(const yaml_node_t *v) {
  if (v->type != YAML_SCALAR_NODE || v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const char *s = (const char *)v->data.scalar.value;
  size_t len = v->data.scalar.length;
  return len == 0 || (len == 1 && s[0] == '~') ||
         (len == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

static bool is_plain(const yaml_node_t *v) {
  return v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static const char *text(const yaml_node_t *v) { return (const char *)v->data.scalar.value; }

/* Reports a node of the wrong kind (or with no value) for field text `exp`. */
static int fail_kind(ctx_t *c, const yaml_node_t *v, const char *key, const char *exp) {
  if (is_null(v)) return fail(c, v->start_mark, key, "has no value; expected %s", exp);
  const char *kind = v->type == YAML_MAPPING_NODE    ? "a map"
                     : v->type == YAML_SEQUENCE_NODE ? "a list"
                                                     : "a scalar";
  return fail(c, v->start_mark, key, "is %s; expected %s", kind, exp);
}

/* A non-null scalar, or an error. */
static int want_scalar(ctx_t *c, const yaml_node_t *v, const char *key, const char *exp) {
  if (v->type != YAML_SCALAR_NODE || is_null(v)) return fail_kind(c, v, key, exp);
  return 0;
}

/* Decimal integer with optional sign. 0: ok, -1: not an integer, -2: overflow. */
static int parse_int(const char *s, size_t len, int64_t *out) {
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

/* "268435456", "256MiB", "64 KiB", "1GiB", "2048B". 0 / -1 / -2 as parse_int. */
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

static bool valid_pool_name(const char *s, size_t len) {
  if (len < 1 || len > POOL_NAME_MAX) return false;
  for (size_t i = 0; i < len; i++)
    if (!sip__name_char(s[i])) return false;
  return true;
}

/* ---- the table walker ------------------------------------------------- */

static void *at(void *base, size_t off) { return (char *)base + off; }

static void apply_defaults(const section_t *s, void *base) {
  for (size_t i = 0; i < s->n; i++) {
    const field_t *f = &s->fields[i];
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
      apply_defaults(f->section, base);
      break;
    case F_WORD:
    case F_STRING:
    case F_CUSTOM:
      break; /* NULL / handled by the parser or the post-checks */
    }
  }
}

static int parse_map(ctx_t *c, yaml_node_t *m, const char *key, const section_t *s,
                     const char *exp, void *base, yaml_node_t **vals);

static int parse_value(ctx_t *c, const field_t *f, yaml_node_t *v, const char *key, void *base) {
  char exp[1024], shown[SHOW_MAX * 4 + 8];
  expected(exp, sizeof exp, f, c->where);
  void *p = at(base, f->offset);

  if (f->type == F_SECTION) {
    yaml_node_t *vals[MAX_FIELDS] = {0};
    return parse_map(c, v, key, f->section, exp, base, vals);
  }
  if (f->type == F_CUSTOM) return f->parse(c, v, key, base);

  if (want_scalar(c, v, key, exp)) return -1;
  const char *s = text(v);
  size_t len = v->data.scalar.length;

  switch (f->type) {
  case F_INT:
  case F_INT64: {
    if (!is_plain(v))
      return fail(c, v->start_mark, key, "%s is a quoted string; expected %s",
                  show(shown, sizeof shown, s, len), exp);
    int64_t x = 0;
    int rc = parse_int(s, len, &x);
    if (rc == -1)
      return fail(c, v->start_mark, key, "%s is not an integer; expected %s",
                  show(shown, sizeof shown, s, len), exp);
    if (rc == -2 || x < f->min || x > f->max)
      return fail(c, v->start_mark, key, "%.*s is out of range; expected %s",
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
    return fail(c, v->start_mark, key, "%s is not a boolean%s; expected %s",
                show(shown, sizeof shown, s, len), is_plain(v) ? "" : " (it is quoted)", exp);
  }
  case F_SIZE: {
    uint64_t x = 0;
    int rc = parse_size(s, len, &x);
    if (rc == -1)
      return fail(c, v->start_mark, key, "%s is not a byte size; expected %s",
                  show(shown, sizeof shown, s, len), exp);
    if (rc == -2 || x < (uint64_t)f->min || x > (uint64_t)f->max || x > SIZE_MAX)
      return fail(c, v->start_mark, key, "%s is out of range; expected %s",
                  show(shown, sizeof shown, s, len), exp);
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
        if (!copy) return oom(c);
        *(char **)p = copy;
      }
      return 0;
    }
    return fail(c, v->start_mark, key, "%s is not valid; expected %s",
                show(shown, sizeof shown, s, len), exp);
  case F_STRING: {
    if (memchr(s, '\0', len))
      return fail(c, v->start_mark, key, "%s contains a NUL byte; expected %s",
                  show(shown, sizeof shown, s, len), exp);
    if (len == 0) return fail(c, v->start_mark, key, "is empty; expected %s", exp);
    if (f->valid && !f->valid(s, len))
      return fail(c, v->start_mark, key, "%s is not valid; expected %s",
                  show(shown, sizeof shown, s, len), exp);
    char *copy = sip__strndup(s, len);
    if (!copy) return oom(c);
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
static int parse_map(ctx_t *c, yaml_node_t *m, const char *key, const section_t *s,
                     const char *exp, void *base, yaml_node_t **vals) {
  yaml_node_t *keys[MAX_FIELDS] = {0};
  char child[KEY_MAX], buf[1024];

  if (!is_null(m)) {
    if (m->type != YAML_MAPPING_NODE) return fail_kind(c, m, key, exp);
    for (yaml_node_pair_t *pr = m->data.mapping.pairs.start; pr < m->data.mapping.pairs.top; pr++) {
      yaml_node_t *k = yaml_document_get_node(c->doc, pr->key);
      yaml_node_t *v = yaml_document_get_node(c->doc, pr->value);
      if (!k || !v) {
        c->err = sip_error_new(SIP_INTERNAL, "%s: libyaml returned a broken document", c->name);
        return -1;
      }
      buf[0] = '\0';
      list_fields(buf, sizeof buf, s, c->where);
      if (k->type != YAML_SCALAR_NODE)
        return fail(c, k->start_mark, key, "a key is %s; expected a scalar key, one of: %s",
                    k->type == YAML_MAPPING_NODE ? "a map" : "a list", buf);
      const char *kn = text(k);
      size_t kl = k->data.scalar.length;
      key_join(child, key, kn, kl);
      size_t i = 0;
      while (i < s->n && !(visible(&s->fields[i], c->where) && strlen(s->fields[i].name) == kl &&
                           !memcmp(s->fields[i].name, kn, kl)))
        i++;
      if (i == s->n) return fail(c, k->start_mark, child, "unknown key; expected one of: %s", buf);
      if (vals[i])
        return fail(c, k->start_mark, child,
                    "duplicate key (first at line %zu); expected each key at most once",
                    keys[i]->start_mark.line + 1);
      keys[i] = k;
      vals[i] = v;
      if (parse_value(c, &s->fields[i], v, child, base)) return -1;
    }
  }
  for (size_t i = 0; i < s->n; i++) {
    if (!s->fields[i].required || vals[i] || !visible(&s->fields[i], c->where)) continue;
    key_join(child, key, s->fields[i].name, strlen(s->fields[i].name));
    return fail(c, m->start_mark, child, "missing; expected %s",
                expected(buf, sizeof buf, &s->fields[i], c->where));
  }
  return 0;
}

/* ---- custom fields ---------------------------------------------------- */

static size_t seq_len(const yaml_node_t *v) {
  return (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
}

static yaml_node_t *seq_item(ctx_t *c, const yaml_node_t *v, size_t i) {
  return yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
}

/* Why `s` is not a valid endpoint, or NULL. */
static const char *endpoint_problem(const char *s, size_t len, char *why, size_t n) {
  if (memchr(s, '\0', len)) return "contains a NUL byte";
  if (len >= 6 && !strncmp(s, "ipc://", 6)) {
    if (len == 6) return "has an empty path";
    if (len - 6 > UNIX_PATH_MAX)
      return snprintf(why, n, "has a %zu-byte path, longer than a Unix socket path can be",
                      len - 6), why;
    return NULL;
  }
  if (len >= 7 && !strncmp(s, "unix://", 7)) {
    if (len == 7 || s[7] != '/') return "does not have an absolute path";
    if (len - 7 > UNIX_PATH_MAX)
      return snprintf(why, n, "has a %zu-byte path, longer than a Unix socket path can be",
                      len - 7), why;
    return NULL;
  }
  if (len >= 6 && !strncmp(s, "tcp://", 6)) {
    const char *h = s + 6, *end = s + len, *colon;
    if (h < end && *h == '[') {
      const char *rb = memchr(h, ']', (size_t)(end - h));
      if (!rb || rb == h + 1) return "has a malformed IPv6 host";
      for (const char *q = h + 1; q < rb; q++)
        if (!strchr("0123456789abcdefABCDEF:.", *q)) return "has a malformed IPv6 host";
      if (rb + 1 == end || rb[1] != ':') return "has no port";
      colon = rb + 1;
    } else {
      colon = NULL;
      for (const char *q = h; q < end; q++)
        if (*q == ':') colon = q;
      if (!colon) return "has no port";
      if (colon == h) return "has no host";
      for (const char *q = h; q < colon; q++) {
        if (*q == ':') return "has an IPv6 host without brackets";
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
              *q == '.' || *q == '-' || *q == '_'))
          return "has an invalid host";
      }
    }
    const char *port = colon + 1;
    size_t pl = (size_t)(end - port);
    int64_t pv = 0;
    if (pl == 0) return "has no port";
    if (pl > 5 || port[0] == '+' || port[0] == '-' || parse_int(port, pl, &pv) || pv > 65535)
      return "has a port out of range";
    return NULL;
  }
  return "has an unknown scheme";
}

/* server.http is a tcp endpoint without the scheme: one grammar for both. */
static bool valid_http_address(const char *s, size_t len) {
  char buf[300], why[128];
  if (len > sizeof buf - 7 || memchr(s, '\0', len)) return false;
  memcpy(buf, "tcp://", 6);
  memcpy(buf + 6, s, len);
  return endpoint_problem(buf, len + 6, why, sizeof why) == NULL;
}

static int parse_endpoints(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip_config_t *cfg = base;
  const char *exp = server_fields[S_ENDPOINTS].expect;
  char ikey[KEY_MAX], shown[SHOW_MAX * 4 + 8], why[128];

  if (v->type != YAML_SEQUENCE_NODE) return fail_kind(c, v, key, exp);
  size_t n = seq_len(v);
  if (n == 0) return fail(c, v->start_mark, key, "is empty; expected %s", exp);
  cfg->endpoints = sip__calloc(n, sizeof *cfg->endpoints);
  if (!cfg->endpoints) return oom(c);
  cfg->n_endpoints = n;
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *e = seq_item(c, v, i);
    key_index(ikey, key, i);
    if (!e) return oom(c);
    if (want_scalar(c, e, ikey, ENDPOINT_EXPECT)) return -1;
    const char *s = text(e);
    size_t len = e->data.scalar.length;
    const char *problem = endpoint_problem(s, len, why, sizeof why);
    if (problem)
      return fail(c, e->start_mark, ikey, "%s %s; expected %s", show(shown, sizeof shown, s, len),
                  problem, ENDPOINT_EXPECT);
    for (size_t j = 0; j < i; j++)
      if (strlen(cfg->endpoints[j]) == len && !memcmp(cfg->endpoints[j], s, len))
        return fail(c, e->start_mark, ikey, "%s is listed twice (also [%zu]); expected each "
                    "endpoint once", show(shown, sizeof shown, s, len), j);
    if (!(cfg->endpoints[i] = sip__strndup(s, len))) return oom(c);
  }
  return 0;
}

static int parse_options(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip_pool_config_t *pool = base;
  const char *exp = pool_fields[P_OPTIONS].expect;
  char okey[KEY_MAX], shown[SHOW_MAX * 4 + 8];

  if (is_null(v)) return 0;
  if (v->type != YAML_MAPPING_NODE) return fail_kind(c, v, key, exp);
  size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
  if (n == 0) return 0;
  pool->backend_options = sip__calloc(n, sizeof *pool->backend_options);
  if (!pool->backend_options) return oom(c);
  pool->n_backend_options = n;
  for (size_t i = 0; i < n; i++) {
    yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
    yaml_node_t *k = yaml_document_get_node(c->doc, pr->key);
    yaml_node_t *val = yaml_document_get_node(c->doc, pr->value);
    if (!k || !val) return oom(c);
    if (k->type != YAML_SCALAR_NODE)
      return fail(c, k->start_mark, key, "a key is %s; expected %s",
                  k->type == YAML_MAPPING_NODE ? "a map" : "a list", exp);
    const char *ks = text(k);
    size_t kl = k->data.scalar.length;
    key_join(okey, key, ks, kl);
    if (kl == 0 || is_null(k) || memchr(ks, '\0', kl))
      return fail(c, k->start_mark, okey, "%s is not a valid option name; expected %s",
                  show(shown, sizeof shown, ks, kl), exp);
    for (size_t j = 0; j < i; j++)
      if (strlen(pool->backend_options[j].key) == kl &&
          !memcmp(pool->backend_options[j].key, ks, kl))
        return fail(c, k->start_mark, okey, "duplicate key; expected each key at most once");
    if (val->type != YAML_SCALAR_NODE || is_null(val))
      return fail_kind(c, val, okey, "a scalar value (string, number or bool)");
    const char *vs = text(val);
    size_t vl = val->data.scalar.length;
    if (memchr(vs, '\0', vl))
      return fail(c, val->start_mark, okey, "%s contains a NUL byte; expected a string without one",
                  show(shown, sizeof shown, vs, vl));
    /* Stored one at a time so config_free sees only finished entries. */
    char *kc = sip__strndup(ks, kl);
    if (!kc) return oom(c);
    char *vc = sip__strndup(vs, vl);
    if (!vc) {
      sip__free(kc);
      return oom(c);
    }
    pool->backend_options[i].key = kc;
    pool->backend_options[i].value = vc;
  }
  return 0;
}

/* Joins a relative path to base_dir; absolute paths and no base_dir keep it. */
static char *resolve_path(const char *base_dir, const char *p) {
  if (!base_dir || !base_dir[0] || p[0] == '/') return sip__strdup(p);
  size_t bl = strlen(base_dir);
  return sip__asprintf("%s%s%s", base_dir, base_dir[bl - 1] == '/' ? "" : "/", p);
}

/* Transform options naming files (ctc_greedy_decode's labels_file): their
 * relative paths resolve against the config file's directory, like
 * model_path, so a config works from any working directory. */
static bool is_path_option(const char *key) {
  size_t n = strlen(key);
  return n > 5 && !strcmp(key + n - 5, "_file");
}

static int resolve_option_paths(ctx_t *c, sip_kv_t *kv, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!kv[i].key || !kv[i].value || !is_path_option(kv[i].key)) continue;
    char *r = resolve_path(c->base_dir, kv[i].value);
    if (!r) return oom(c);
    sip__free((void *)kv[i].value);
    kv[i].value = r;
  }
  return 0;
}

/* The extension of the last path component (".onnx"), or NULL. */
static const char *path_ext(const char *p) {
  const char *slash = strrchr(p, '/');
  const char *last = slash ? slash + 1 : p;
  return strrchr(last, '.');
}

/* Cross-field rules: model_path vs backend, resolution, and the default
 * backend. Existence is not checked here: a pool whose model fails to load
 * is reported FAILED by the runtime, not refused at parse time. */
static int check_pool(ctx_t *c, sip_pool_config_t *pool, yaml_node_t *map, yaml_node_t **vals,
                      const char *key) {
  char mkey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  key_join(mkey, key, "model_path", strlen("model_path"));
  /* A backend without SIP_BACKEND_NEEDS_FILE (builtin, transform) needs no
   * model file; one with SIP_BACKEND_PATH_OPTIONS reads files named in its
   * options, resolved like model_path. */
  int flags = pool->backend ? c->backends->flags_of(pool->backend) : (int)SIP_BACKEND_NEEDS_FILE;
  bool builtin = flags >= 0 && !(flags & SIP_BACKEND_NEEDS_FILE);
  if (flags >= 0 && (flags & SIP_BACKEND_PATH_OPTIONS) &&
      resolve_option_paths(c, pool->backend_options, pool->n_backend_options))
    return -1;

  if (!pool->model_path) {
    if (builtin) return 0;
    return fail(c, map->start_mark, mkey,
                "missing; expected %s (required unless the backend needs no model file, "
                "like builtin or transform)",
                MODEL_PATH_EXPECT);
  }
  yaml_mark_t pm = vals[P_MODEL_PATH]->start_mark;
  const char *written = pool->model_path;
  const char *ext = path_ext(written);
  size_t wl = strlen(written);

  if (!builtin && ext && !strcasecmp(ext, ".om"))
    return fail(c, pm, mkey,
                "%s is a CANN offline model (.om), but this build has no CANN backend; "
                "expected an .onnx file or a model directory",
                show(shown, sizeof shown, written, wl));

  char *resolved = resolve_path(c->base_dir, written);
  if (!resolved) return oom(c);
  if (!pool->backend) {
    struct stat st;
    /* No extension or a trailing slash reads as a directory (versioned model
     * dirs); an existing directory with a dot in its name is one too. */
    bool dir = !ext || written[wl - 1] == '/' || (stat(resolved, &st) == 0 && S_ISDIR(st.st_mode));
    if (!dir && strcasecmp(ext, ".onnx")) {
      sip__free(resolved);
      return fail(c, pm, mkey,
                  "%s has an unknown extension (%s); expected an .onnx file or a model directory "
                  "(or an explicit backend)",
                  show(shown, sizeof shown, written, wl), ext);
    }
    if (!(pool->backend = sip__strdup("onnxruntime"))) {
      sip__free(resolved);
      return oom(c);
    }
  }
  sip__free(pool->model_path);
  pool->model_path = resolved;
  return 0;
}

/* A list of up to `max` numbers; ints when `ints`. */
static int parse_number_list(ctx_t *c, yaml_node_t *v, const char *key, const char *exp,
                             size_t max, int ints, double *out, size_t *n) {
  char ikey[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (v->type != YAML_SEQUENCE_NODE) return fail_kind(c, v, key, exp);
  *n = seq_len(v);
  if (*n == 0 || *n > max)
    return fail(c, v->start_mark, key, "has %zu items; expected %s", *n, exp);
  for (size_t i = 0; i < *n; i++) {
    yaml_node_t *e = seq_item(c, v, i);
    key_index(ikey, key, i);
    if (!e) return oom(c);
    if (want_scalar(c, e, ikey, exp)) return -1;
    const char *s = text(e);
    size_t len = e->data.scalar.length;
    char buf[64], *end;
    int64_t iv;
    if (len >= sizeof buf || !is_plain(e))
      return fail(c, e->start_mark, ikey, "%s is not a number; expected %s",
                  show(shown, sizeof shown, s, len), exp);
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (ints) {
      if (parse_int(s, len, &iv) || iv < 1)
        return fail(c, e->start_mark, ikey, "%s is not a positive integer; expected %s",
                    show(shown, sizeof shown, s, len), exp);
      out[i] = (double)iv;
    } else {
      out[i] = strtod(buf, &end);
      if (end == buf || *end || !(out[i] > 0) || out[i] > 1e9)
        return fail(c, e->start_mark, ikey, "%s is not a positive number; expected %s",
                    show(shown, sizeof shown, s, len), exp);
    }
    if (i && out[i] <= out[i - 1])
      return fail(c, e->start_mark, ikey, "%s is not larger than the item before it; expected %s",
                  show(shown, sizeof shown, s, len), exp);
  }
  return 0;
}

static int parse_preferred(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip_pool_config_t *pool = base;
  double vals[SIP_MAX_PREFERRED];
  size_t n = 0;
  if (parse_number_list(c, v, key, batching_fields[B_PREFERRED].expect, SIP_MAX_PREFERRED, 1,
                        vals, &n))
    return -1;
  for (size_t i = 0; i < n; i++) pool->preferred_batch_sizes[i] = (int)vals[i];
  pool->n_preferred = n;
  return 0;
}

/* Adds "N" or "A-B" (s[0..len)) to the pool's CPU set; `at` locates it
 * for messages. */
static int add_cpus(ctx_t *c, sip_pool_config_t *pool, yaml_mark_t at, const char *key,
                    const char *s, size_t len) {
  char shown[SHOW_MAX * 4 + 8];
  const char *dash = len > 1 ? memchr(s + 1, '-', len - 1) : NULL;
  size_t l1 = dash ? (size_t)(dash - s) : len;
  int64_t lo, hi;
  if (parse_int(s, l1, &lo) || (dash ? parse_int(dash + 1, len - l1 - 1, &hi) : (hi = lo, 0)) ||
      lo < 0 || hi < lo || hi >= SIP_MAX_CPUS)
    return fail(c, at, key, "%s is not a CPU number or range; expected %s",
                show(shown, sizeof shown, s, len), CPUS_EXPECT);
  for (int64_t k = lo; k <= hi; k++) {
    uint64_t bit = UINT64_C(1) << (k % 64);
    if (pool->cpu_mask[k / 64] & bit)
      return fail(c, at, key, "names CPU %lld twice; expected %s", (long long)k, CPUS_EXPECT);
    pool->cpu_mask[k / 64] |= bit;
    pool->n_cpus++;
  }
  return 0;
}

/* cpu_affinity: [0, 2-3] or "0,2-3". */
/* backend: a name from the server's backend table (built-in or registered). */
static int parse_backend(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  char shown[SHOW_MAX * 4 + 8];
  if (want_scalar(c, v, key, BACKEND_EXPECT)) return -1;
  const char *s = text(v);
  size_t len = v->data.scalar.length;
  if (!len || memchr(s, '\0', len) || c->backends->flags_of(s) < 0)
    return fail(c, v->start_mark, key, "%s is not a backend of this server; expected one of %s",
                show(shown, sizeof shown, s, len), c->backends->names());
  char **slot = &((sip_pool_config_t *)base)->backend;
  sip__free(*slot);
  if (!(*slot = sip__strndup(s, len))) return oom(c);
  return 0;
}

static int parse_cpus(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip_pool_config_t *pool = base;
  char ikey[KEY_MAX];
  if (v->type == YAML_SCALAR_NODE && !is_null(v)) {
    const char *s = text(v), *end = s + v->data.scalar.length;
    for (;;) {
      const char *comma = memchr(s, ',', (size_t)(end - s));
      const char *e = comma ? comma : end;
      while (s < e && *s == ' ') s++;
      while (e > s && e[-1] == ' ') e--;
      if (add_cpus(c, pool, v->start_mark, key, s, (size_t)(e - s))) return -1;
      if (!comma) break;
      s = comma + 1;
    }
    return 0;
  }
  if (v->type != YAML_SEQUENCE_NODE) return fail_kind(c, v, key, CPUS_EXPECT);
  if (seq_len(v) == 0) return fail(c, v->start_mark, key, "is an empty list; expected %s", CPUS_EXPECT);
  for (size_t i = 0; i < seq_len(v); i++) {
    yaml_node_t *e = seq_item(c, v, i);
    key_index(ikey, key, i);
    if (!e) return oom(c);
    if (want_scalar(c, e, ikey, CPUS_EXPECT) ||
        add_cpus(c, pool, e->start_mark, ikey, text(e), e->data.scalar.length))
      return -1;
  }
  return 0;
}

static int parse_thresholds(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip_pool_config_t *pool = base;
  size_t n = 0;
  const char *exp = elastic_fields[E_THRESH].expect;
  if (parse_number_list(c, v, key, exp, 2, 0, pool->rate_thresholds, &n)) return -1;
  if (n != 2) return fail(c, v->start_mark, key, "has %zu items; expected %s", n, exp);
  return 0;
}

/* version_policy: {latest: N} | {specific: [V, ...]} | all. */
static int parse_version_policy(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip_pool_config_t *pool = base;
  const char *exp = VERSION_POLICY_EXPECT;
  char k[KEY_MAX], shown[SHOW_MAX * 4 + 8];
  if (v->type == YAML_SCALAR_NODE && !is_null(v)) {
    if (v->data.scalar.length == 3 && !memcmp(text(v), "all", 3)) {
      pool->version_policy = SIP_VERSIONS_ALL;
      return 0;
    }
    return fail(c, v->start_mark, key, "%s is not valid; expected %s",
                show(shown, sizeof shown, text(v), v->data.scalar.length), exp);
  }
  if (v->type != YAML_MAPPING_NODE) return fail_kind(c, v, key, exp);
  size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
  if (n != 1) return fail(c, v->start_mark, key, "has %zu keys; expected %s", n, exp);
  yaml_node_t *kn = yaml_document_get_node(c->doc, v->data.mapping.pairs.start[0].key);
  yaml_node_t *vn = yaml_document_get_node(c->doc, v->data.mapping.pairs.start[0].value);
  if (!kn || !vn) return oom(c);
  if (kn->type != YAML_SCALAR_NODE) return fail_kind(c, kn, key, exp);
  const char *ks = text(kn);
  size_t kl = kn->data.scalar.length;
  key_join(k, key, ks, kl);
  if (kl == 6 && !memcmp(ks, "latest", 6)) {
    static const field_t latest = {.name = "latest", .type = F_INT,
                                   .offset = offsetof(sip_pool_config_t, version_latest),
                                   .min = 1, .max = 1024};
    pool->version_policy = SIP_VERSIONS_LATEST;
    return parse_value(c, &latest, vn, k, pool);
  }
  if (kl == 8 && !memcmp(ks, "specific", 8)) {
    const char *sexp = "a list of up to 64 distinct version numbers (0..2^53), e.g. [1, 3]";
    if (vn->type != YAML_SEQUENCE_NODE) return fail_kind(c, vn, k, sexp);
    size_t m = seq_len(vn);
    if (m == 0 || m > SIP_MAX_SPECIFIC_VERSIONS)
      return fail(c, vn->start_mark, k, "has %zu items; expected %s", m, sexp);
    for (size_t i = 0; i < m; i++) {
      char ik[KEY_MAX];
      yaml_node_t *e = seq_item(c, vn, i);
      key_index(ik, k, i);
      if (!e) return oom(c);
      if (want_scalar(c, e, ik, sexp)) return -1;
      int64_t x = 0;
      if (!is_plain(e) || parse_int(text(e), e->data.scalar.length, &x) || x < 0 ||
          x > ((int64_t)1 << 53))
        return fail(c, e->start_mark, ik, "%s is not a version number; expected %s",
                    show(shown, sizeof shown, text(e), e->data.scalar.length), sexp);
      /* Kept sorted; a repeated number is a mistake worth naming. */
      size_t at = pool->n_versions;
      for (size_t j = 0; j < pool->n_versions; j++) {
        if (pool->versions[j] == x)
          return fail(c, e->start_mark, ik, "%lld is listed twice; expected %s", (long long)x,
                      sexp);
        if (pool->versions[j] > x && at == pool->n_versions) at = j;
      }
      memmove(&pool->versions[at + 1], &pool->versions[at],
              (pool->n_versions - at) * sizeof pool->versions[0]);
      pool->versions[at] = x;
      pool->n_versions++;
    }
    pool->version_policy = SIP_VERSIONS_SPECIFIC;
    return 0;
  }
  return fail(c, kn->start_mark, k, "unknown key; expected %s", exp);
}

/* Cross-field rules of the scheduling sections. */
static int check_scheduling(ctx_t *c, sip_pool_config_t *pool, yaml_node_t **vals,
                            const char *key) {
  char k[KEY_MAX];
  if (vals[P_BATCHING]) {
    for (size_t i = 0; i < pool->n_preferred; i++) {
      if (pool->preferred_batch_sizes[i] <= pool->max_batch_size) continue;
      key_join(k, key, "dynamic_batching.preferred_batch_sizes",
               strlen("dynamic_batching.preferred_batch_sizes"));
      return fail(c, vals[P_BATCHING]->start_mark, k,
                  "%d is larger than max_batch_size %d; expected sizes 1..%d",
                  pool->preferred_batch_sizes[i], pool->max_batch_size, pool->max_batch_size);
    }
  }
  if (vals[P_ELASTIC]) {
    if (!pool->rate_thresholds[0]) {
      pool->rate_thresholds[0] = 50;
      pool->rate_thresholds[1] = 200;
    }
    /* Elastic levels size the batches: the pool batches up to the largest. */
    int most = 0;
    for (int i = 0; i < 3; i++)
      if (pool->batch_levels[i].max_batch > most) most = pool->batch_levels[i].max_batch;
    if (!vals[P_BATCHING]) pool->max_batch_size = most;
    if (most > pool->max_batch_size) {
      key_join(k, key, "batch_strategies", strlen("batch_strategies"));
      return fail(c, vals[P_ELASTIC]->start_mark, k,
                  "a level's max_batch %d is larger than dynamic_batching.max_batch_size %d; "
                  "expected max_batch <= max_batch_size",
                  most, pool->max_batch_size);
    }
  }
  return 0;
}

static int parse_pools(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  sip_config_t *cfg = base;
  char ikey[KEY_MAX], exp[1024], shown[SHOW_MAX * 4 + 8];
  snprintf(exp, sizeof exp, "a map with keys: ");
  list_fields(exp, sizeof exp, &pool_section, IN_POOL);

  if (is_null(v)) return 0;
  if (v->type != YAML_SEQUENCE_NODE) return fail_kind(c, v, key, top_fields[T_POOLS].expect);
  size_t n = seq_len(v);
  if (n == 0) return 0;
  cfg->pools = sip__calloc(n, sizeof *cfg->pools);
  if (!cfg->pools) return oom(c);
  cfg->n_pools = n;
  for (size_t i = 0; i < n; i++) {
    sip_pool_config_t *pool = &cfg->pools[i];
    yaml_node_t *item = seq_item(c, v, i);
    yaml_node_t *vals[MAX_FIELDS] = {0};
    key_index(ikey, key, i);
    if (!item) return oom(c);
    /* An empty "- " entry is a mistake, not a pool made of defaults. */
    if (item->type != YAML_MAPPING_NODE) return fail_kind(c, item, ikey, exp);
    apply_defaults(&pool_section, pool);
    pool->line = (int)item->start_mark.line + 1;
    c->where = IN_POOL;
    int rc = parse_map(c, item, ikey, &pool_section, exp, pool, vals);
    c->where = 0;
    if (rc) return -1;
    for (size_t j = 0; j < i; j++) {
      if (strcmp(cfg->pools[j].name, pool->name)) continue;
      char nkey[KEY_MAX];
      key_join(nkey, ikey, "name", 4);
      return fail(c, vals[P_NAME]->start_mark, nkey,
                  "%s is already the name of session_pools[%zu] (line %d); expected unique pool "
                  "names",
                  show(shown, sizeof shown, pool->name, strlen(pool->name)), j, cfg->pools[j].line);
    }
    if (check_scheduling(c, pool, vals, ikey)) return -1;
    if (check_pool(c, pool, item, vals, ikey)) return -1;
  }
  return 0;
}

/* ---- entry points ----------------------------------------------------- */

static sip_error_t *syntax_error(const char *name, const yaml_parser_t *p, const char *yaml,
                                 size_t len) {
  if (p->error == YAML_MEMORY_ERROR) return SIP_OOM();
  size_t line = p->problem_mark.line + 1, col = p->problem_mark.column + 1;
  const char *problem = p->problem ? p->problem : "unknown error";
  if (p->error == YAML_READER_ERROR) {
    /* Reader errors carry a byte offset, not a mark. */
    line = 1;
    col = 1;
    for (size_t i = 0; i < p->problem_offset && i < len; i++) {
      if (yaml[i] == '\n') line++, col = 1;
      else col++;
    }
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "%s:%zu:%zu: YAML syntax error: %s (byte 0x%02x at offset %zu); "
                         "expected UTF-8 or UTF-16 text",
                         name, line, col, problem, (unsigned)p->problem_value & 0xffu,
                         p->problem_offset);
  }
  if (p->context)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "%s:%zu:%zu: YAML syntax error: %s (%s that started at %zu:%zu); "
                         "expected well-formed YAML",
                         name, line, col, problem, p->context, p->context_mark.line + 1,
                         p->context_mark.column + 1);
  return sip_error_new(SIP_INVALID_ARGUMENT,
                       "%s:%zu:%zu: YAML syntax error: %s; expected well-formed YAML", name, line,
                       col, problem);
}

/* Frees n owned key/value pairs (owned copies behind sip_kv_t's
 * borrowed-looking const pointers) and the array. */
static void kv_free(sip_kv_t *kv, size_t n) {
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
static int dup_key(ctx_t *c, const yaml_node_t *map, const yaml_node_pair_t *pr,
                   const yaml_node_t *kn, const char *key, const char *what) {
  for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pr; q++) {
    yaml_node_t *qk = yaml_document_get_node(c->doc, q->key);
    if (qk && qk->type == YAML_SCALAR_NODE && !strcmp(text(qk), text(kn)))
      return fail(c, kn->start_mark, key, "duplicate key (first at line %zu); expected each %s "
                  "at most once", qk->start_mark.line + 1, what);
  }
  return 0;
}

#include "config/pipelines.inc"
#include "config/preprocess.inc"

static int defer_pipelines(ctx_t *c, yaml_node_t *v, const char *key, void *base) {
  (void)key, (void)base;
  c->pipelines = v;
  return 0;
}

static int parse_document(ctx_t *c, sip_config_t *cfg) {
  char exp[1024];
  snprintf(exp, sizeof exp, "a map with keys: ");
  list_fields(exp, sizeof exp, &top_section, 0);

  yaml_node_t *root = yaml_document_get_root_node(c->doc);
  if (!root || is_null(root))
    return fail(c, root ? root->start_mark : c->doc->start_mark, "",
                "the document is empty; expected %s", exp);
  if (root->type != YAML_MAPPING_NODE) return fail_kind(c, root, "", exp);
  yaml_node_t *vals[MAX_FIELDS] = {0};
  if (parse_map(c, root, "", &top_section, exp, cfg, vals)) return -1;
  /* Stages refer to pools and add their own: pipelines come after every
   * session_pools entry, in whichever order the keys are written. */
  if (c->pipelines && parse_pipelines(c, c->pipelines, "pipeline_sessions", cfg)) return -1;
  if (!vals[T_POOLS] && !cfg->model_repository)
    return fail(c, root->start_mark, "session_pools",
                "missing; expected %s, or a server.model_repository", top_fields[T_POOLS].expect);
  if (cfg->model_repository) {
    char *r = resolve_path(c->base_dir, cfg->model_repository);
    if (!r) return oom(c);
    sip__free(cfg->model_repository);
    cfg->model_repository = r;
  }
  if (check_pipelines(c, cfg, root)) return -1;
  if (cfg->n_endpoints == 0) {
    cfg->endpoints = sip__calloc(1, sizeof *cfg->endpoints);
    if (!cfg->endpoints) return oom(c);
    cfg->n_endpoints = 1;
    if (!(cfg->endpoints[0] = sip__strdup(DEFAULT_ENDPOINT))) return oom(c);
  }
  return 0;
}

/* Runs libyaml over the text and `body` over its one document; refuses a
 * second document (it would be silently ignored). Returns c->err. */
static sip_error_t *parse_text(ctx_t *c, const char *yaml, size_t len,
                               int (*body)(ctx_t *c, void *arg), void *arg) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return SIP_OOM();
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);

  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) { /* libyaml already freed `doc` */
    c->err = syntax_error(c->name, &parser, yaml, len);
  } else {
    c->doc = &doc;
    if (body(c, arg) == 0) {
      yaml_document_t extra;
      if (!yaml_parser_load(&parser, &extra)) {
        c->err = syntax_error(c->name, &parser, yaml, len);
      } else {
        if (yaml_document_get_root_node(&extra))
          fail(c, extra.start_mark, "", "a second YAML document starts here; expected exactly "
               "one document");
        yaml_document_delete(&extra);
      }
    }
    yaml_document_delete(&doc);
    c->doc = NULL;
  }
  yaml_parser_delete(&parser);
  return c->err;
}

static int parse_document_body(ctx_t *c, void *cfg) { return parse_document(c, cfg); }

sip_error_t *sip__config_load_string(const char *yaml, size_t len, const char *name,
                                     const char *base_dir, const sip_backend_catalog_t *backends,
                                     sip_config_t **out) {
  if (!out) return sip_error_new(SIP_INVALID_ARGUMENT, "config: out is NULL");
  *out = NULL;
  if (!backends) return sip_error_new(SIP_INVALID_ARGUMENT, "config: no backend table given");
  if (!yaml && len) return sip_error_new(SIP_INVALID_ARGUMENT, "config: text is NULL");
  if (!yaml) yaml = "";
  if (!name) name = "<string>";

  sip_config_t *cfg = sip__calloc(1, sizeof *cfg);
  if (!cfg) return SIP_OOM();
  if (!(cfg->path = sip__strdup(name))) {
    sip__free(cfg);
    return SIP_OOM();
  }
  apply_defaults(&top_section, cfg);

  ctx_t c = {.name = cfg->path, .base_dir = base_dir, .backends = backends};
  sip_error_t *e = parse_text(&c, yaml, len, parse_document_body, cfg);
  if (e) {
    sip__config_free(cfg);
    return e;
  }
  *out = cfg;
  return NULL;
}

/* Reads a whole config file (at most CONFIG_FILE_MAX bytes) into *buf. */
static sip_error_t *read_file(const char *path, char **buf_out, size_t *len_out) {
  char eb[256];
  *buf_out = NULL;
  *len_out = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return sip_error_new(SIP_NOT_FOUND, "%s: cannot open the config file: %s", path,
                         strerror_r(errno, eb, sizeof eb));
  size_t cap = 4096, n = 0;
  char *buf = sip__malloc(cap);
  sip_error_t *err = NULL;
  if (!buf) err = SIP_OOM();
  while (!err) {
    if (n == cap) {
      if (cap >= CONFIG_FILE_MAX) {
        err = sip_error_new(SIP_INVALID_ARGUMENT,
                            "%s: the file is larger than %zu MiB; expected a config file", path,
                            CONFIG_FILE_MAX >> 20);
        break;
      }
      char *nb = sip__realloc(buf, cap * 2);
      if (!nb) {
        err = SIP_OOM();
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f))
        err = sip_error_new(SIP_NOT_FOUND, "%s: cannot read the config file: %s", path,
                            strerror_r(errno, eb, sizeof eb));
      break;
    }
  }
  fclose(f);
  if (err) {
    sip__free(buf);
    return err;
  }
  *buf_out = buf;
  *len_out = n;
  return NULL;
}

sip_error_t *sip__config_load_file(const char *path, const sip_backend_catalog_t *backends,
                                   sip_config_t **out) {
  if (!out) return sip_error_new(SIP_INVALID_ARGUMENT, "config: out is NULL");
  *out = NULL;
  if (!path || !path[0]) return sip_error_new(SIP_INVALID_ARGUMENT, "config: no file path given");
  char *buf = NULL, *copy = NULL;
  size_t n = 0;
  sip_error_t *err = read_file(path, &buf, &n);
  if (!err && !(copy = sip__strdup(path))) err = SIP_OOM();
  if (!err) err = sip__config_load_string(buf, n, path, dirname(copy), backends, out);
  sip__free(copy);
  sip__free(buf);
  return err;
}

/* ---- a model repository's config.yaml ---------------------------------- */

/* Field by field what a session_pools entry holds, minus name/model_path
 * (they come from the repository layout), plus version_policy. */
static int parse_model_body(ctx_t *c, void *arg) {
  sip_pool_config_t *pool = arg;
  char exp[1024];
  snprintf(exp, sizeof exp, "a map with keys: ");
  list_fields(exp, sizeof exp, &pool_section, IN_MODEL);
  yaml_node_t *root = yaml_document_get_root_node(c->doc);
  yaml_node_t *vals[MAX_FIELDS] = {0};
  if (!root || is_null(root)) return 0; /* an empty file: every default */
  if (root->type != YAML_MAPPING_NODE) return fail_kind(c, root, "", exp);
  if (parse_map(c, root, "", &pool_section, exp, pool, vals)) return -1;
  return check_scheduling(c, pool, vals, "");
}

sip_error_t *sip__config_load_model(const char *path, const char *name, const char *model_path,
                                    const sip_backend_catalog_t *backends,
                                    sip_pool_config_t **out) {
  *out = NULL;
  if (!backends) return sip_error_new(SIP_INVALID_ARGUMENT, "config: no backend table given");
  sip_pool_config_t *pool = sip__calloc(1, sizeof *pool);
  if (!pool) return SIP_OOM();
  apply_defaults(&pool_section, pool);
  pool->version_latest = 1;
  pool->line = 1;
  sip_error_t *e = NULL;
  if (!(pool->name = sip__strdup(name)) || (model_path && !(pool->model_path = sip__strdup(model_path))))
    e = SIP_OOM();
  if (!e && path) {
    char *buf = NULL;
    size_t n = 0;
    e = read_file(path, &buf, &n);
    if (!e) {
      ctx_t c = {.name = path, .where = IN_MODEL, .backends = backends};
      e = parse_text(&c, buf, n, parse_model_body, pool);
    }
    sip__free(buf);
  }
  if (!e && !pool->backend && !(pool->backend = sip__strdup("onnxruntime"))) e = SIP_OOM();
  if (e) {
    sip__config_pool_free(pool);
    return e;
  }
  *out = pool;
  return NULL;
}

static void pool_clear(sip_pool_config_t *p) {
  sip__free(p->name);
  sip__free(p->model_path);
  sip__free(p->backend);
  kv_free(p->backend_options, p->n_backend_options);
  sip__free(p->preprocess_input);
  for (size_t j = 0; j < p->n_preprocess; j++) {
    sip__free(p->preprocess[j].op);
    kv_free(p->preprocess[j].options, p->preprocess[j].n_options);
  }
  sip__free(p->preprocess);
}

void sip__config_pool_free(sip_pool_config_t *p) {
  if (!p) return;
  pool_clear(p);
  sip__free(p);
}

void sip__config_free(sip_config_t *cfg) {
  if (!cfg) return;
  sip__free(cfg->path);
  for (size_t i = 0; i < cfg->n_endpoints; i++) sip__free(cfg->endpoints[i]);
  sip__free(cfg->endpoints);
  sip__free(cfg->http);
  sip__free(cfg->model_repository);
  for (size_t i = 0; i < cfg->n_pools; i++) pool_clear(&cfg->pools[i]);
  sip__free(cfg->pools);
  pipelines_free(cfg);
  sip__free(cfg);
}

const char *sip__priority_name(sip_priority_level_t p) {
  return (unsigned)p < SIP_PRIO_LEVELS ? priority_names[p] : "unknown";
}
