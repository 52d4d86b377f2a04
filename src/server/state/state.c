/* sip — the runtime state checkpoint: the document, its parser and its
 * atomic file (state.h; format in docs/internals/state.md). */
#include "server/state/state.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "server/repository/repository.h"

typedef struct model {
  char *name;
  int loaded;
  char *config; /* NULL: none */
} model_t;

struct sip__state {
  json_t *root;  /* every section as read, but repository.models (in m) */
  model_t *m;    /* sorted by name */
  size_t n;
};

sip__state_t *sip__state_new(void) {
  sip__state_t *st = sip__calloc(1, sizeof *st);
  if (st && !(st->root = json_object())) {
    sip__free(st);
    return NULL;
  }
  return st;
}

void sip__state_free(sip__state_t *st) {
  if (!st) return;
  for (size_t i = 0; i < st->n; i++) {
    sip__free(st->m[i].name);
    sip__free(st->m[i].config);
  }
  sip__free(st->m);
  json_decref(st->root);
  sip__free(st);
}

/* Index of `name`, or where it would go (*found 0). */
static size_t find(const sip__state_t *st, const char *name, int *found) {
  size_t lo = 0, hi = st->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(st->m[mid].name, name);
    if (!c) {
      *found = 1;
      return mid;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  *found = 0;
  return lo;
}

sip_error_t *sip__state_set_model(sip__state_t *st, const char *name, int loaded,
                                  const char *config) {
  int found;
  size_t i = find(st, name, &found);
  char *c = config ? sip__strdup(config) : NULL;
  if (config && !c) return SIP__OOM();
  if (!found) {
    char *n = sip__strdup(name);
    model_t *v = n ? sip__reallocarray(st->m, st->n + 1, sizeof *v) : NULL;
    if (!v) {
      sip__free(n);
      sip__free(c);
      return SIP__OOM();
    }
    st->m = v;
    memmove(&v[i + 1], &v[i], (st->n - i) * sizeof *v);
    v[i].name = n;
    v[i].config = NULL;
    st->n++;
  }
  sip__free(st->m[i].config);
  st->m[i].config = c;
  st->m[i].loaded = loaded != 0;
  return NULL;
}

size_t sip__state_model_count(const sip__state_t *st) { return st->n; }

const char *sip__state_model_at(const sip__state_t *st, size_t i, int *loaded,
                                const char **config) {
  if (i >= st->n) return NULL;
  if (loaded) *loaded = st->m[i].loaded;
  if (config) *config = st->m[i].config;
  return st->m[i].name;
}

/* ---- pools changed at run time: root.pools, kept as JSON ---- */

static json_t *pools_obj(const sip__state_t *st) {
  json_t *p = json_object_get(st->root, "pools");
  return json_is_object(p) ? p : NULL;
}

size_t sip__state_pool_count(const sip__state_t *st) {
  json_t *p = pools_obj(st);
  return p ? json_object_size(p) : 0;
}

static void pool_read(json_t *v, sip__state_pool_t *out) {
  json_t *j;
  memset(out, 0, sizeof *out);
  out->max_memory_mb = -1;
  out->max_compute_percent = -1;
  if ((j = json_object_get(v, "pool_size"))) out->pool_size = (int)json_integer_value(j);
  if ((j = json_object_get(v, "max_memory_mb"))) out->max_memory_mb = json_integer_value(j);
  if ((j = json_object_get(v, "max_compute_percent")))
    out->max_compute_percent = (int)json_integer_value(j);
  size_t i;
  json_t *d;
  json_array_foreach(json_object_get(v, "drained"), i, d) {
    json_int_t k = json_integer_value(d);
    out->drained[k / 64] |= UINT64_C(1) << (k % 64);
  }
}

const char *sip__state_pool_at(const sip__state_t *st, size_t i, sip__state_pool_t *out) {
  json_t *pools = pools_obj(st);
  size_t k = 0;
  const char *name;
  json_t *v;
  if (pools) json_object_foreach(pools, name, v) {
      if (k++ == i) {
        pool_read(v, out);
        return name;
      }
    }
  return NULL;
}

sip_error_t *sip__state_set_pool(sip__state_t *st, const char *name,
                                 const sip__state_pool_t *c) {
  json_t *pools = pools_obj(st);
  if (!c) {
    if (pools) json_object_del(pools, name);
    return NULL;
  }
  if (!pools && (!(pools = json_object()) || json_object_set_new(st->root, "pools", pools)))
    return SIP__OOM();
  json_t *v = json_object(), *drained = json_array();
  int oom = !v || !drained;
  if (!oom && c->pool_size) oom = json_object_set_new(v, "pool_size", json_integer(c->pool_size));
  if (!oom && c->max_memory_mb >= 0)
    oom = json_object_set_new(v, "max_memory_mb", json_integer(c->max_memory_mb));
  if (!oom && c->max_compute_percent >= 0)
    oom = json_object_set_new(v, "max_compute_percent", json_integer(c->max_compute_percent));
  for (int k = 0; !oom && k < 256; k++)
    if (c->drained[k / 64] >> (k % 64) & 1) oom = json_array_append_new(drained, json_integer(k));
  if (!oom && json_array_size(drained)) {
    oom = json_object_set(v, "drained", drained);
  }
  json_decref(drained);
  if (oom || json_object_set_new(pools, name, v)) {
    if (oom) json_decref(v);
    return SIP__OOM();
  }
  return NULL;
}

/* ---- the document ---- */

#define EXPECT                                                                              \
  "expected {\"format\": \"" SIP__STATE_FORMAT "\", \"version\": 1, \"repository\": "      \
  "{\"models\": {NAME: {\"loaded\": true|false, \"config\": TEXT}}}, \"pools\": {NAME: "   \
  "{\"pool_size\": 1..256, \"max_memory_mb\": 0.., \"max_compute_percent\": 0..100, "       \
  "\"drained\": [0..255, ...]}}}"

static sip_error_t *bad(const char *fmt, const char *detail) {
  return sip_error_new(SIP_INVALID_ARGUMENT, "state file: %s%s; " EXPECT, fmt, detail ? detail : "");
}

/* A name as requests may give it, for an entry of kind `what`. */
static sip_error_t *check_name(const char *name, const char *what) {
  sip_error_t *e = sip__repo_check_name(name, strlen(name));
  if (!e) return NULL;
  sip_error_t *b = sip_error_new(SIP_INVALID_ARGUMENT, "state file: %s: %s", what,
                                 sip_error_message(e));
  sip_error_free(e);
  return b;
}

/* An optional integer member in [lo, hi]. */
static int int_ok(json_t *v, const char *key, json_int_t lo, json_int_t hi) {
  json_t *j = json_object_get(v, key);
  return !j || (json_is_integer(j) && json_integer_value(j) >= lo && json_integer_value(j) <= hi);
}

static sip_error_t *parse_pools(json_t *pools) {
  if (!json_is_object(pools)) return bad("\"pools\" is not an object", NULL);
  const char *name;
  json_t *v;
  json_object_foreach(pools, name, v) {
    sip_error_t *e = check_name(name, "pool");
    if (e) return e;
    json_t *drained = json_object_get(v, "drained");
    if (!json_is_object(v) || !int_ok(v, "pool_size", 1, 256) ||
        !int_ok(v, "max_memory_mb", 0, 1048576) || !int_ok(v, "max_compute_percent", 0, 100) ||
        (drained && !json_is_array(drained)))
      return bad("a pool entry with a setting out of range: ", name);
    size_t i;
    json_t *d;
    json_array_foreach(drained, i, d) {
      if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > 255)
        return bad("a pool entry whose \"drained\" holds other than session indexes 0..255: ",
                   name);
    }
  }
  return NULL;
}

static sip_error_t *parse_models(sip__state_t *st, json_t *models) {
  if (!json_is_object(models)) return bad("repository.models is not an object", NULL);
  const char *name;
  json_t *v;
  json_object_foreach(models, name, v) {
    sip_error_t *e = check_name(name, "repository model");
    if (e) return e;
    json_t *loaded = json_object_get(v, "loaded"), *config = json_object_get(v, "config");
    if (!json_is_object(v) || !json_is_boolean(loaded))
      return bad("repository model entry without a boolean \"loaded\": ", name);
    if (config && !json_is_null(config) && !json_is_string(config))
      return bad("repository model entry whose \"config\" is not a string: ", name);
    if ((e = sip__state_set_model(st, name, json_is_true(loaded),
                                  json_is_string(config) ? json_string_value(config) : NULL)))
      return e;
  }
  return NULL;
}

sip_error_t *sip__state_parse(const char *text, size_t len, sip__state_t **out) {
  *out = NULL;
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    char detail[256];
    snprintf(detail, sizeof detail, "line %d column %d: %s", je.line, je.column, je.text);
    return bad("not JSON: ", detail);
  }
  sip_error_t *e = NULL;
  json_t *format = json_object_get(root, "format"), *version = json_object_get(root, "version");
  json_t *repo = json_object_get(root, "repository");
  if (!json_is_object(root))
    e = bad("the document is not an object", NULL);
  else if (!json_is_string(format) || strcmp(json_string_value(format), SIP__STATE_FORMAT))
    e = bad("\"format\" is not \"" SIP__STATE_FORMAT "\" (not a sip state file)", NULL);
  else if (!json_is_integer(version))
    e = bad("\"version\" is not an integer", NULL);
  else if (json_integer_value(version) != SIP__STATE_VERSION)
    e = sip_error_new(SIP_FAILED_PRECONDITION,
                      "state file: format version %lld; this sipd reads version %d",
                      (long long)json_integer_value(version), SIP__STATE_VERSION);
  else if (repo && !json_is_object(repo))
    e = bad("\"repository\" is not an object", NULL);
  else if (json_object_get(root, "pools"))
    e = parse_pools(json_object_get(root, "pools"));
  sip__state_t *st = e ? NULL : sip__calloc(1, sizeof *st);
  if (!e && !st) e = SIP__OOM();
  if (!e) {
    st->root = root;
    root = NULL;
    json_t *models = repo ? json_object_get(repo, "models") : NULL;
    if (models) e = parse_models(st, models);
    if (!e && models) json_object_del(repo, "models");
  }
  json_decref(root);
  if (e) {
    sip__state_free(st);
    return e;
  }
  *out = st;
  return NULL;
}

char *sip__state_dump(const sip__state_t *st) {
  json_t *root = json_deep_copy(st->root);
  json_t *models = json_object();
  int oom = !root || !models;
  for (size_t i = 0; !oom && i < st->n; i++) {
    json_t *m = json_pack("{s:b}", "loaded", st->m[i].loaded);
    if (m && st->m[i].config) json_object_set_new(m, "config", json_string(st->m[i].config));
    oom = !m || json_object_set_new(models, st->m[i].name, m);
  }
  json_t *repo = oom ? NULL : json_object_get(root, "repository");
  if (!oom && !json_is_object(repo)) {
    repo = json_object();
    oom = !repo || json_object_set_new(root, "repository", repo);
  }
  char *txt = NULL;
  if (!oom && !json_object_set(repo, "models", models) &&
      !json_object_set_new(root, "format", json_string(SIP__STATE_FORMAT)) &&
      !json_object_set_new(root, "version", json_integer(SIP__STATE_VERSION)))
    txt = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(models);
  json_decref(root);
  return txt;
}

/* ---- the file ---- */

static sip_error_t *io_error(const char *what, const char *path) {
  char eb[128];
  return sip_error_new(SIP_INTERNAL, "state file: cannot %s %s: %s", what, path,
                       strerror_r(errno, eb, sizeof eb));
}

/* Makes a rename in `dir` durable. */
static int sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* The whole file, or NULL with errno set (ENOENT: no file). */
static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      char *nb = sip__realloc(buf, cap = cap ? cap * 2 : 4096);
      if (!nb) {
        sip__free(buf);
        fclose(f);
        errno = ENOMEM;
        return NULL;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    sip__free(buf);
    errno = EIO;
    return NULL;
  }
  *len = n;
  return buf;
}

sip_error_t *sip__state_dir_check(const char *dir) {
  char eb[128];
  struct stat sb;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return sip_error_new(SIP_FAILED_PRECONDITION, "server.state_dir %s cannot be created: %s; "
                         "expected a writable directory", dir, strerror_r(errno, eb, sizeof eb));
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK | X_OK) != 0)
    return sip_error_new(SIP_FAILED_PRECONDITION, "server.state_dir %s is not a writable "
                         "directory; expected a writable directory", dir);
  return NULL;
}

sip_error_t *sip__state_open(const char *dir, sip__state_t **out) {
  *out = NULL;
  sip_error_t *de = sip__state_dir_check(dir);
  if (de) return de;
  char *path = sip__asprintf("%s/" SIP__STATE_FILE, dir);
  char *tmp = sip__asprintf("%s/" SIP__STATE_FILE ".tmp", dir);
  if (!path || !tmp) {
    sip__free(path);
    sip__free(tmp);
    return SIP__OOM();
  }
  unlink(tmp); /* a write cut short by a crash: state.json is the old state */
  size_t len = 0;
  char *text = read_all(path, &len);
  int had_file = text != NULL;
  sip_error_t *e = NULL, *why = NULL;
  if (!text && errno != ENOENT)
    why = io_error("read", path);
  else if (text)
    why = sip__state_parse(text, len, out);
  sip__free(text);
  if (why) {
    char *aside = sip__asprintf("%s/" SIP__STATE_FILE ".corrupt-%lld", dir, (long long)time(NULL));
    int moved = aside && rename(path, aside) == 0;
    sip__log(SIP__LOG_ERROR, "state file unusable, moved aside; starting from the config",
             "file=%s moved_to=%s reason=\"%s\"", path, moved ? aside : "(could not move)",
             sip_error_message(why));
    sip__free(aside);
  }
  if (!*out && !(*out = sip__state_new())) e = SIP__OOM();
  if (!e && had_file && !why)
    sip__log(SIP__LOG_INFO, "state file read", "file=%s repository_models=%zu", path,
             sip__state_model_count(*out));
  sip_error_free(why);
  sip__free(path);
  sip__free(tmp);
  return e;
}

sip_error_t *sip__state_save(const char *dir, const sip__state_t *st) {
  char *txt = sip__state_dump(st);
  char *path = sip__asprintf("%s/" SIP__STATE_FILE, dir);
  char *tmp = sip__asprintf("%s/" SIP__STATE_FILE ".tmp", dir);
  sip_error_t *e = NULL;
  if (!txt || !path || !tmp) e = SIP__OOM();
  int fd = e ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (!e && fd < 0) e = io_error("create", tmp);
  size_t len = txt ? strlen(txt) : 0, off = 0;
  while (!e && off < len) {
    ssize_t w = write(fd, txt + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) e = io_error("write", tmp);
    else off += (size_t)w;
  }
  if (!e && fsync(fd) != 0) e = io_error("sync", tmp);
  if (fd >= 0 && close(fd) != 0 && !e) e = io_error("close", tmp);
  if (!e && rename(tmp, path) != 0) e = io_error("replace", path);
  if (!e && sync_dir(dir) != 0) e = io_error("sync the directory of", path);
  if (e && tmp) unlink(tmp);
  free(txt); /* jansson's allocation */
  sip__free(path);
  sip__free(tmp);
  return e;
}
