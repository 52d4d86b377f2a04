/* sip — the config parser's shared machinery. Only the files of src/config
 * include this.
 *
 * libyaml builds the document tree; the parser walks it against one
 * declarative table per section (name, type, default, bounds, doc), so the
 * defaults, the "expected ..." half of every message, the list of allowed
 * keys and the reference documentation (docs/config.md) all come from the
 * same place. Parsing stops at the first error.
 *
 *   parse.c           messages, scalars, the table walker, paths, helpers
 *                     the hand-parsed maps share
 *   config_server.c   the server section and its endpoints
 *   pools.c           session_pools entries (and a repository model's
 *                     config.yaml): quotas, backend, backend_options,
 *                     cpu_affinity, version_policy, the cross-field check
 *   scheduling.c      dynamic_batching, queue, batch_strategies and their
 *                     cross-field check
 *   preprocess.c      session_pools[].preprocess
 *   pipelines.c       pipeline_sessions[] and their stages
 *   config.c          the document, the loaders, freeing
 *   doc.c             docs/config.md from the tables
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
#ifndef SIP_CONFIG_PARSE_H
#define SIP_CONFIG_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <yaml.h>

#include "config/config.h"

/* The parser's own symbols stay inside the library. */
#pragma GCC visibility push(hidden)

enum {
  KEY_MAX = 512,       /* key paths ("session_pools[3].resource_quota.x") */
  SHOW_MAX = 64,       /* bytes of a user value quoted in a message */
  MAX_FIELDS = 48,     /* fields per section */
  UNIX_PATH_MAX = 107, /* sizeof(sun_path) - 1 */
  POOL_NAME_MAX = 128,
};

#define DEFAULT_ENDPOINT "ipc:///tmp/sip_service.sock"
#define MODEL_PATH_EXPECT "a path to a model file a backend claims or a model directory"
#define PREPROCESS_EXPECT                                                                   \
  "a map of steps in order: input, decode, color_convert, resize, letterbox, to_tensor, " \
  "normalize, cast (docs/preprocess.md)"
#define POOLS_EXPECT "a list of pools (may be empty: session_pools: [])"
#define MODELS_EXPECT \
  "a list of models in seed 003's form: maps of model_name, model_path, model_type, " \
  "input_shapes, output_nums, preprocess, max_batch_size (docs/seed-models.md)"

/* Where a pool map is being read: fields marked `only` exist in one place. */
enum { IN_POOL = 1, IN_MODEL = 2 };

typedef struct sip__ctx {
  const char *name;     /* label for messages: the file path or "<string>" */
  const char *base_dir; /* relative model paths are joined to it; NULL: kept */
  yaml_document_t *doc;
  sip_error_t *err; /* the first error; set together with a -1 return */
  unsigned where;   /* IN_POOL inside session_pools[], IN_MODEL in a repository config.yaml */
  const sip__backend_catalog_t *backends; /* names and flags of the backends this server has */
  yaml_node_t *pipelines; /* pipeline_sessions, read after session_pools wherever it is written */
  yaml_node_t *models;    /* models (seed 003's list), read after session_pools too */
} sip__ctx_t;

typedef enum sip__ftype {
  F_INT,     /* int, decimal plain scalar within [min, max] */
  F_INT64,   /* int64_t, same */
  F_BOOL,    /* int 0/1: true | false */
  F_SIZE,    /* size_t: integer or "256MiB" within [min, max] */
  F_ENUM,    /* enum stored as int: index of the word in names[] */
  F_WORD,    /* char *: one of names[], stored as an owned copy */
  F_STRING,  /* char *: any non-empty scalar, optionally checked by valid() */
  F_SECTION, /* nested map whose fields store into the same base struct */
  F_CUSTOM,  /* parse() does it all */
} sip__ftype_t;

typedef struct sip__section sip__section_t;
typedef int (*sip__custom_fn)(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);

typedef struct sip__field {
  const char *name;
  sip__ftype_t type;
  size_t offset;            /* into the base struct */
  int64_t def;              /* numeric default; may lie outside [min, max] (0 = unlimited) */
  int64_t min, max;         /* numeric bounds, inclusive */
  const char *const *names; /* F_ENUM / F_WORD: NULL-terminated */
  const sip__section_t *section; /* F_SECTION */
  sip__custom_fn parse;          /* F_CUSTOM */
  bool (*valid)(const char *s, size_t len); /* F_STRING, optional */
  bool required;
  /* 0: valid wherever the section is; IN_POOL: only in session_pools[]
   * entries; IN_MODEL: only in a model repository's config.yaml. */
  unsigned only;
  const char *expect; /* F_STRING / F_CUSTOM: what a valid value looks like */
  const char *doc;    /* one line for the reference documentation */
} sip__field_t;

struct sip__section {
  const sip__field_t *fields;
  size_t n;
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A key the parser reads by hand (pipelines, stages, preprocess), for the
 * reference documentation; tests/unit/config/test_config_doc.c keeps these tables
 * and the parsers in step. */
typedef struct sip__cfg_key_doc {
  const char *name;
  const char *type; /* what the value is */
  const char *def;  /* the default, or NULL when there is none */
  const char *doc;  /* one line */
} sip__cfg_key_doc_t;

/* ---- the schema (each table lives with the code that reads it) --------- */

enum { P_NAME, P_MODEL_PATH, P_BACKEND, P_POOL_SIZE, P_PRIORITY, P_QUOTA, P_OPTIONS, P_BATCHING,
       P_QUEUE, P_ELASTIC, P_VERSIONS, P_PREPROCESS, P_CPUS, P_SEQUENCE, P_IDEM, P_HANG,
       P_HEALTH, P_FAILOVER, P_STANDBY, P_SLA, P_ISOLATION, P_SPIN, P_RCACHE, P_RESIDENCY, P_AUTOSCALE,
       P_COUNT };
extern const sip__field_t sip__cfg_pool_fields[P_COUNT];     /* pools.c */
extern const sip__section_t sip__cfg_pool_section;           /* pools.c */
extern const sip__section_t sip__cfg_server_section;         /* config_server.c */
extern const sip__section_t sip__cfg_auth_section;           /* config_security.c: server.auth */
extern const sip__section_t sip__cfg_tls_section;            /* config_security.c: server.tls */
extern const sip__section_t sip__cfg_tracing_section;        /* tracing.c */
extern const sip__section_t sip__cfg_metrics_section;        /* metrics.c */
extern const sip__section_t sip__cfg_response_cache_section; /* response_cache.c: server.response_cache */
extern const sip__section_t sip__cfg_batching_section;       /* scheduling.c: dynamic_batching */
extern const sip__section_t sip__cfg_queue_section;          /* scheduling.c: queue */
extern const sip__section_t sip__cfg_elastic_section;        /* scheduling.c: batch_strategies */
extern const sip__section_t sip__cfg_sequence_section;       /* scheduling.c: sequence_batching */
extern const sip__section_t sip__cfg_top_section;            /* config.c: the document */
extern const sip__section_t sip__cfg_sla_section;            /* sla.c: session_pools[].sla */
extern const sip__section_t sip__cfg_alerts_section;         /* sla.c: alerts */
extern const sip__section_t sip__cfg_autoscale_section;      /* autoscale.c: session_pools[].autoscale */
extern const char *const sip__cfg_priority_names[];     /* pools.c */
extern const sip__cfg_key_doc_t sip__cfg_pipeline_keys[];    /* pipelines.c, NULL-name terminated */
extern const sip__cfg_key_doc_t sip__cfg_stage_keys[];       /* pipelines.c, NULL-name terminated */
extern const sip__cfg_key_doc_t sip__cfg_preprocess_keys[];  /* preprocess.c, NULL-name terminated */

/* ---- messages (parse.c) ------------------------------------------------- */

/* Records `FILE:LINE:COL: KEY: what` in c->err; returns -1. */
int sip__cfg_fail(sip__ctx_t *c, yaml_mark_t m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Records out-of-memory in c->err; returns -1. */
int sip__cfg_oom(sip__ctx_t *c);
/* Quotes a user value for a message: escapes what would garble a terminal
 * and cuts long values (buf: SHOW_MAX * 4 + 8 bytes). */
const char *sip__cfg_show(char *buf, size_t n, const char *s, size_t len);
/* dst (KEY_MAX bytes) = parent + "." + name, the name sanitised and cut. */
void sip__cfg_key_join(char *dst, const char *parent, const char *name, size_t len);
/* dst (KEY_MAX bytes) = parent + "[i]". */
void sip__cfg_key_index(char *dst, const char *parent, size_t i);
/* Appends the names of s's fields visible `where` to buf, ", "-separated. */
void sip__cfg_list_fields(char *buf, size_t n, const sip__section_t *s, unsigned where);
/* The "expected ..." text of a field: derived from its type and bounds. */
const char *sip__cfg_expected(char *buf, size_t n, const sip__field_t *f, unsigned where);
/* Reports a node of the wrong kind (or with no value) for field text `exp`. */
int sip__cfg_fail_kind(sip__ctx_t *c, const yaml_node_t *v, const char *key, const char *exp);
/* A non-null scalar, or an error. */
int sip__cfg_want_scalar(sip__ctx_t *c, const yaml_node_t *v, const char *key, const char *exp);

/* ---- scalars ------------------------------------------------------------ */

static inline bool is_null(const yaml_node_t *v) {
  if (v->type != YAML_SCALAR_NODE || v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const char *s = (const char *)v->data.scalar.value;
  size_t len = v->data.scalar.length;
  return len == 0 || (len == 1 && s[0] == '~') ||
         (len == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

static inline bool is_plain(const yaml_node_t *v) {
  return v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static inline const char *text(const yaml_node_t *v) { return (const char *)v->data.scalar.value; }

static inline size_t seq_len(const yaml_node_t *v) {
  return (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
}

static inline yaml_node_t *seq_item(sip__ctx_t *c, const yaml_node_t *v, size_t i) {
  return yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
}

/* Whether field f exists where the parser is (see sip__field_t.only). */
static inline bool visible(const sip__field_t *f, unsigned where) {
  return !f->only || (f->only & where);
}

/* The key and value nodes of a map's pair; -1 (out of memory) when libyaml
 * has none. */
int sip__cfg_pair(sip__ctx_t *c, const yaml_node_pair_t *pr, yaml_node_t **k, yaml_node_t **v);
/* Item i of list v (named key[i]) when it is a non-null scalar; else NULL,
 * with c->err set. */
yaml_node_t *sip__cfg_seq_scalar(sip__ctx_t *c, const yaml_node_t *v, size_t i, const char *key,
                            const char *exp);

/* Decimal integer with optional sign. 0: ok, -1: not an integer, -2: overflow. */
int sip__cfg_parse_int(const char *s, size_t len, int64_t *out);
/* 1..128 characters from A-Z a-z 0-9 _ . - */
bool sip__cfg_valid_pool_name(const char *s, size_t len);

/* ---- the table walker (parse.c) ----------------------------------------- */

void sip__cfg_apply_defaults(const sip__section_t *s, void *base);
int sip__cfg_parse_value(sip__ctx_t *c, const sip__field_t *f, yaml_node_t *v, const char *key, void *base);
/* Walks map `m` against section `s`. `exp` describes the map itself; on
 * return vals[i] is the value node of field i (NULL when absent). A null
 * value ("server:" with every key commented out) counts as an empty map. */
int sip__cfg_parse_map(sip__ctx_t *c, yaml_node_t *m, const char *key, const sip__section_t *s,
                  const char *exp, void *base, yaml_node_t **vals);

/* ---- paths and shared helpers (parse.c) --------------------------------- */

/* Joins a relative path to base_dir; absolute paths and no base_dir keep it. */
char *sip__cfg_resolve_path(const char *base_dir, const char *p);
/* Options naming files (ending in _file): resolved like model_path. */
bool sip__cfg_is_path_option(const char *key);
/* The extension of the last path component (".bin"), or NULL. */
const char *sip__cfg_path_ext(const char *p);
/* Fails when an earlier key of hand-parsed `map` equals kn (`what`: "key", "step"). */
int sip__cfg_dup_key(sip__ctx_t *c, const yaml_node_t *map, const yaml_node_pair_t *pr,
                const yaml_node_t *kn, const char *key, const char *what);
/* Frees n owned key/value pairs and the array. */
void sip__cfg_kv_free(sip_kv_t *kv, size_t n);
/* A scalar as an owned string; a list of scalars as "a,b,c". */
int sip__cfg_scalar_or_list(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp, char **out);

/* ---- the sections' parsers and checks ----------------------------------- */

/* config_security.c: server.socket_mode and server.allowed_hosts; the
 * post-checks (socket_mode's default, tls paths); freeing. */
#define CFG_SOCKET_MODE_DEFAULT 0600
#define CFG_SOCKET_MODE_EXPECT \
  "an octal mode of 3 or 4 digits giving the owner read and write, e.g. 0600 or 0660"
#define CFG_ALLOWED_HOSTS_EXPECT \
  "a list of host names or addresses (without port; \"*\" allows any Host)"
int sip__cfg_parse_socket_mode(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
int sip__cfg_parse_allowed_hosts(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
int sip__cfg_check_security(sip__ctx_t *c, sip__config_t *cfg, yaml_node_t *server);
void sip__cfg_security_free(sip__config_t *cfg);

int sip__cfg_parse_pools(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);   /* pools.c */
/* backend_options (backend_options.c): one value as the backend gets it
 * (a scalar as written, a list as JSON text; *out owned); the pool's
 * options against its backend's option table and check; the backend a
 * model file or directory `path` gets when none is named (its probe's,
 * else the catalogue's default; NULL when there is none). */
int sip__cfg_option_value(sip__ctx_t *c, yaml_node_t *val, const char *okey, char **out);
int sip__cfg_check_backend_options(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t *opts,
                              const char *key);
const char *sip__cfg_backend_for(sip__ctx_t *c, const char *path);
int sip__cfg_parse_preprocess(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base); /* preprocess.c */
/* model_list.c: seed 003's model list (the whole document, key "", or the
 * models section): each entry becomes a pool appended to cfg->pools. */
int sip__cfg_parse_models(sip__ctx_t *c, yaml_node_t *v, const char *key, sip__config_t *cfg);
/* Cross-field rules of the scheduling sections (scheduling.c). */
int sip__cfg_check_scheduling(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t **vals, const char *key);
/* pipelines.c: pipeline_sessions, once every pool is read; after the whole
 * document, stages name existing pools and no pipeline is named like a pool. */
int sip__cfg_parse_pipelines(sip__ctx_t *c, yaml_node_t *v, const char *key, void *base);
int sip__cfg_check_pipelines(sip__ctx_t *c, sip__config_t *cfg, yaml_node_t *root);
void sip__cfg_pipelines_free(sip__config_t *cfg);
/* sla.c: a pool's sla block (`sla`: its node, NULL when absent) sets at
 * least one target; the alerts block's levels are in order. */
int sip__cfg_check_sla(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t *sla, const char *key);
int sip__cfg_check_alerts(sip__ctx_t *c, sip__config_t *cfg, yaml_node_t *alerts);
void sip__cfg_alerts_free(sip__config_t *cfg);
/* sla.c: a plain decimal number (no hex, inf or nan) into *out. */
int sip__cfg_number(sip__ctx_t *c, yaml_node_t *v, const char *key, const char *exp, double *out);
/* autoscale.c: the block's cross-field rules (`as`: its node, NULL when
 * absent): min <= max, down < up, pool_size within [min, max]. */
int sip__cfg_check_autoscale(sip__ctx_t *c, sip__pool_config_t *pool, yaml_node_t *as,
                             yaml_node_t *pool_size, const char *key);

#pragma GCC visibility pop

#endif
