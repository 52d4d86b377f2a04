/* sip — the model repository (server.model_repository) and the loader.
 *
 * Layout: <repository>/<model>/<version>/model.onnx, an optional
 * <model>/config.yaml (the pool's settings and its version_policy) and an
 * optional <model>/current link naming the default version. Every served
 * version is a pool of its own in the registry (src/session/registry.c),
 * named by the model, told apart by version.
 *
 * One thread, the loader, does every load: first the config file's pools
 * and (unless model_control is explicit) every repository model, then the
 * load and unload requests queued by sip_server_load_model_async & co, one
 * at a time. A (re)load brings the new versions' sessions to READY outside
 * the registry, then swaps them in and retires the versions they replace in
 * one registry step, then drains and frees the retired pools. So requests
 * switch to the new version at one instant, requests already admitted
 * finish on the old one, and a load that fails leaves what was serving in
 * place. Names from requests are checked before they touch the file system,
 * and every path is resolved (realpath) and must stay inside the
 * repository. */
#include "server/repository.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "pipeline/pipeline.h"
#include "server/server_impl.h"

#define MODEL_NAME_MAX 128
#define NAME_EXPECT "a model directory name: 1..128 characters from A-Z a-z 0-9 _ . - not starting with '.'"

/* ---- pure helpers ------------------------------------------------------ */

/* A name quoted in a message: at most 64 bytes, unprintable bytes as '?'
 * (names come from requests and end up in logs). */
static const char *shown(char *buf, size_t n, const char *s, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < len && o + 4 < n && i < 64; i++)
    buf[o++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  if (len > 64 && o + 4 < n) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
  buf[o] = '\0';
  return buf;
}

sip_error_t *sip__repo_check_name(const char *name, size_t len) {
  char b[80];
  if (!name || len == 0)
    return sip_error_new(SIP_INVALID_ARGUMENT, "model name is empty; expected %s", NAME_EXPECT);
  if (memchr(name, '\0', len))
    return sip_error_new(SIP_INVALID_ARGUMENT, "model name contains a NUL byte; expected %s",
                         NAME_EXPECT);
  if (name[0] == '/')
    return sip_error_new(SIP_INVALID_ARGUMENT, "model name '%s' is an absolute path; expected %s",
                         shown(b, sizeof b, name, len), NAME_EXPECT);
  if (memchr(name, '/', len) || memchr(name, '\\', len))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "model name '%s' contains a path separator; expected %s",
                         shown(b, sizeof b, name, len), NAME_EXPECT);
  if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "model name '%s' refers to a directory outside the model; expected %s",
                         shown(b, sizeof b, name, len), NAME_EXPECT);
  if (name[0] == '.')
    return sip_error_new(SIP_INVALID_ARGUMENT, "model name '%s' starts with '.' (hidden); expected %s",
                         shown(b, sizeof b, name, len), NAME_EXPECT);
  if (len > MODEL_NAME_MAX)
    return sip_error_new(SIP_INVALID_ARGUMENT, "model name of %zu bytes is too long; expected %s",
                         len, NAME_EXPECT);
  for (size_t i = 0; i < len; i++) {
    char ch = name[i];
    if (!sip__name_char(ch))
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "model name '%s' has a character that is not allowed (byte 0x%02x); "
                           "expected %s",
                           shown(b, sizeof b, name, len), (unsigned char)ch, NAME_EXPECT);
  }
  return NULL;
}

static int contains(const int64_t *v, size_t n, int64_t x) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == x) return 1;
  return 0;
}

size_t sip__repo_select_versions(const sip_pool_config_t *policy, const int64_t *avail, size_t n,
                                 int64_t current, int64_t *out, int64_t *missing,
                                 size_t *n_missing) {
  size_t k = 0;
  *n_missing = 0;
  switch (policy->version_policy) {
  case SIP_VERSIONS_ALL:
    for (size_t i = 0; i < n; i++) out[k++] = avail[i];
    break;
  case SIP_VERSIONS_SPECIFIC:
    for (size_t i = 0; i < policy->n_versions; i++) {
      if (contains(avail, n, policy->versions[i]))
        out[k++] = policy->versions[i];
      else
        missing[(*n_missing)++] = policy->versions[i];
    }
    break;
  default: {
    size_t latest = policy->version_latest > 0 ? (size_t)policy->version_latest : 1;
    for (size_t i = n > latest ? n - latest : 0; i < n; i++) out[k++] = avail[i];
  }
  }
  if (current >= 0 && contains(avail, n, current) && !contains(out, k, current)) {
    size_t at = 0;
    while (at < k && out[at] < current) at++;
    memmove(&out[at + 1], &out[at], (k - at) * sizeof *out);
    out[at] = current;
    k++;
  }
  return k;
}

/* ---- state -------------------------------------------------------------- */

enum { REC_LOADING, REC_READY, REC_UNLOADING, REC_UNLOADED, REC_FAILED };
static const char *const rec_state_names[] = {"LOADING", "READY", "UNLOADING", "UNAVAILABLE",
                                              "UNAVAILABLE"};

typedef struct failure {
  char *version; /* NULL: the model as a whole */
  sip_code_t code;
  char *reason; /* "CODE: message", as the status shows it */
} failure_t;

/* What the repository knows about one model beyond its pools. */
typedef struct model_rec {
  char *name;
  int state;
  failure_t *failed; /* what the last load could not serve */
  size_t n_failed;
  struct model_rec *next;
} model_rec_t;

typedef struct repo_op {
  int unload;
  char *name;
  sip_repo_done_fn done;
  void *user;
  struct repo_op *next;
} repo_op_t;

struct sip_repo {
  char *root; /* realpath of server.model_repository; NULL: none */
  size_t root_len;
  pthread_mutex_t mu; /* ops, stop, models */
  pthread_cond_t cv;
  repo_op_t *head, *tail;
  int stop;
  pthread_t thread;
  int started;
  model_rec_t *models;
};

static void failures_free(failure_t *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    sip__free(f[i].version);
    sip__free(f[i].reason);
  }
  sip__free(f);
}

/* The record of `name`, created when missing (NULL on OOM). Caller holds mu. */
static model_rec_t *rec_get(sip_repo_t *R, const char *name, int create) {
  for (model_rec_t *m = R->models; m; m = m->next)
    if (!strcmp(m->name, name)) return m;
  if (!create) return NULL;
  model_rec_t *m = sip__calloc(1, sizeof *m);
  if (!m || !(m->name = sip__strdup(name))) {
    sip__free(m);
    return NULL;
  }
  m->next = R->models;
  R->models = m;
  return m;
}

static void rec_set_state(sip_repo_t *R, const char *name, int state) {
  pthread_mutex_lock(&R->mu);
  model_rec_t *m = rec_get(R, name, 1);
  if (m) m->state = state;
  pthread_mutex_unlock(&R->mu);
}

/* Sets the outcome of a load: its state and failures (taken). */
static void rec_finish(sip_repo_t *R, const char *name, int state, failure_t *f, size_t n) {
  pthread_mutex_lock(&R->mu);
  model_rec_t *m = rec_get(R, name, 1);
  if (m) {
    failures_free(m->failed, m->n_failed);
    m->state = state;
    m->failed = f;
    m->n_failed = n;
  } else {
    failures_free(f, n);
  }
  pthread_mutex_unlock(&R->mu);
}

/* ---- paths -------------------------------------------------------------- */

/* realpath of `path` into *out (owned) when it lies inside the repository.
 * Errors: NOT_FOUND (missing), INVALID_ARGUMENT (resolves outside). */
static sip_error_t *inside(sip_repo_t *R, const char *path, const char *what, char **out) {
  *out = NULL;
  char real[PATH_MAX];
  if (!realpath(path, real)) {
    char eb[128];
    return sip_error_new(errno == ENOENT ? SIP_NOT_FOUND : SIP_INVALID_ARGUMENT, "%s %s: %s", what,
                         path, strerror_r(errno, eb, sizeof eb));
  }
  if (strncmp(real, R->root, R->root_len) || real[R->root_len] != '/')
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "%s %s resolves to %s, outside the model repository %s; links must "
                         "stay inside it",
                         what, path, real, R->root);
  return (*out = sip__strdup(real)) ? NULL : SIP_OOM();
}

/* The model's directory (resolved, owned). */
static sip_error_t *model_dir(sip_repo_t *R, const char *name, char **out) {
  *out = NULL;
  char *path = sip__asprintf("%s/%s", R->root, name);
  if (!path) return SIP_OOM();
  sip_error_t *e = inside(R, path, "model directory", out);
  if (e && sip_error_code(e) == SIP_NOT_FOUND) {
    sip_error_free(e);
    e = sip_error_new(SIP_NOT_FOUND, "model '%s' is not in the model repository %s (no directory %s)",
                      name, R->root, path);
  }
  struct stat st;
  if (!e && (stat(*out, &st) != 0 || !S_ISDIR(st.st_mode)))
    e = sip_error_new(SIP_NOT_FOUND, "model '%s': %s is not a directory; expected %s/%s/<version>/model.onnx",
                      name, path, R->root, name);
  if (e) {
    sip__free(*out);
    *out = NULL;
  }
  sip__free(path);
  return e;
}

/* Identity of the files a version was loaded from: a reload with nothing
 * changed keeps the running pool. */
static char *fingerprint(const char *model_file, const char *config_file) {
  struct stat a, b;
  int ha = stat(model_file, &a) == 0, hb = config_file && stat(config_file, &b) == 0;
  return sip__asprintf("%ju:%ju:%jd:%jd.%09ld|%ju:%ju:%jd:%jd.%09ld",
                       ha ? (uintmax_t)a.st_dev : 0, ha ? (uintmax_t)a.st_ino : 0,
                       ha ? (intmax_t)a.st_size : 0, ha ? (intmax_t)a.st_mtim.tv_sec : 0,
                       ha ? a.st_mtim.tv_nsec : 0L, hb ? (uintmax_t)b.st_dev : 0,
                       hb ? (uintmax_t)b.st_ino : 0, hb ? (intmax_t)b.st_size : 0,
                       hb ? (intmax_t)b.st_mtim.tv_sec : 0, hb ? b.st_mtim.tv_nsec : 0L);
}

typedef struct version {
  int64_t num;
  char name[24];
  char *file; /* resolved model.onnx */
} version_t;

static int cmp_version(const void *a, const void *b) {
  int64_t x = ((const version_t *)a)->num, y = ((const version_t *)b)->num;
  return x < y ? -1 : x > y;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends a failure (copies); returns -1 on OOM. */
/* Records what could not be served: `e` (borrowed) for version `version`
 * (NULL: the model). -1 when out of memory. */
static int add_failure(failure_t **f, size_t *n, const char *version, const sip_error_t *e) {
  failure_t *v = sip__reallocarray(*f, *n + 1, sizeof *v);
  if (!v) return -1;
  *f = v;
  v[*n].version = version ? sip__strdup(version) : NULL;
  v[*n].code = e ? sip_error_code(e) : SIP_INTERNAL;
  v[*n].reason = e ? sip__asprintf("%s: %s", sip_code_name(sip_error_code(e)), sip_error_message(e))
                   : sip__strdup("INTERNAL: failed to load");
  (*n)++;
  return 0;
}

/* ---- load and unload (the loader thread) -------------------------------- */

/* Live repository pools of `name`, each with a reference. */
static sip_pool_t **model_pools(sip_server_t *s, const char *name, size_t *n) {
  size_t all = 0;
  sip_pool_t **v = sip__registry_snapshot(&s->eng, 1, &all);
  *n = 0;
  for (size_t i = 0; i < all; i++) {
    if (v[i]->from_repo && !strcmp(v[i]->cfg->name, name))
      v[(*n)++] = v[i];
    else
      sip__pool_unref(v[i]);
  }
  return v;
}

/* What of the config file already has this name: "a session_pools entry",
 * "a pipeline (pipeline_sessions)", or NULL. Requests name pools and
 * pipelines alike, so a repository model may share neither name. */
static const char *config_name_taken(sip_server_t *s, const char *name) {
  for (size_t i = 0; i < s->cfg->n_pools; i++)
    if (!strcmp(s->cfg->pools[i].name, name)) return "a session_pools entry";
  for (size_t i = 0; i < s->cfg->n_pipelines; i++)
    if (!strcmp(s->cfg->pipelines[i].name, name)) return "a pipeline (pipeline_sessions)";
  return NULL;
}

/* Returns memory freed by the pools just released to the system: without
 * it glibc keeps freed heap pages, and a reload would look like a leak. */
static void give_back_memory(void) { malloc_trim(0); }

/* Scans the model directory for versions (sorted); versions that cannot be
 * used are added to the failures. */
static sip_error_t *scan_versions(sip_repo_t *R, const char *name, const char *dir,
                                  version_t **out, size_t *n_out, failure_t **f, size_t *nf) {
  *out = NULL;
  *n_out = 0;
  DIR *d = opendir(dir);
  if (!d) {
    char eb[128];
    return sip_error_new(SIP_NOT_FOUND, "model '%s': cannot read %s: %s", name, dir,
                         strerror_r(errno, eb, sizeof eb));
  }
  version_t *v = NULL;
  size_t n = 0;
  sip_error_t *e = NULL;
  struct dirent *de;
  while (!e && (de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (len == 0 || len > 18 || strspn(de->d_name, "0123456789") != len) continue;
    char *file = sip__asprintf("%s/%s/model.onnx", dir, de->d_name);
    if (!file) {
      e = SIP_OOM();
      break;
    }
    struct stat st;
    if (lstat(file, &st) != 0) { /* a directory without a model is not a version */
      sip__free(file);
      continue;
    }
    char *real = NULL;
    sip_error_t *fe = inside(R, file, "model file", &real);
    if (!fe && (stat(real, &st) != 0 || !S_ISREG(st.st_mode)))
      fe = sip_error_new(SIP_INVALID_ARGUMENT, "model file %s is not a regular file", file);
    sip__free(file);
    int64_t num = strtoll(de->d_name, NULL, 10);
    for (size_t i = 0; !fe && i < n; i++)
      if (v[i].num == num)
        fe = sip_error_new(SIP_INVALID_ARGUMENT,
                           "version directories '%s' and '%s' are the same version number", v[i].name,
                           de->d_name);
    if (fe) {
      if (add_failure(f, nf, de->d_name, fe)) e = SIP_OOM();
      sip_error_free(fe);
      sip__free(real);
      continue;
    }
    version_t *nv = sip__reallocarray(v, n + 1, sizeof *v);
    if (!nv) {
      sip__free(real);
      e = SIP_OOM();
      break;
    }
    v = nv;
    v[n].num = num;
    memcpy(v[n].name, de->d_name, len + 1); /* len <= 18 was checked above */
    v[n].file = real;
    n++;
  }
  closedir(d);
  if (e) {
    for (size_t i = 0; i < n; i++) sip__free(v[i].file);
    sip__free(v);
    return e;
  }
  qsort(v, n, sizeof *v, cmp_version);
  *out = v;
  *n_out = n;
  return NULL;
}

/* The version a `current` link names (-1: no link). */
static sip_error_t *current_version(const char *name, const char *dir, const version_t *v,
                                    size_t n, int64_t *out) {
  *out = -1;
  char *link = sip__asprintf("%s/current", dir);
  if (!link) return SIP_OOM();
  char target[PATH_MAX];
  ssize_t len = readlink(link, target, sizeof target - 1);
  sip__free(link);
  if (len <= 0) return NULL;
  target[len] = '\0';
  while (len > 1 && target[len - 1] == '/') target[--len] = '\0';
  const char *base = strrchr(target, '/');
  base = base ? base + 1 : target;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].name, base)) {
      *out = v[i].num;
      return NULL;
    }
  return sip_error_new(SIP_NOT_FOUND,
                       "model '%s': the 'current' link points to '%s', which is not a version "
                       "directory of the model with a model.onnx",
                       name, target);
}

static int rec_exists(sip_repo_t *R, const char *name) {
  pthread_mutex_lock(&R->mu);
  int found = rec_get(R, name, 0) != NULL;
  pthread_mutex_unlock(&R->mu);
  return found;
}

/* Checks a request's model name against the repository (not its files). */
static sip_error_t *check_request(sip_server_t *s, const char *name) {
  if (!s->repo->root)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "this server has no model repository (server.model_repository); models "
                         "cannot be loaded or unloaded");
  sip_error_t *e = sip__repo_check_name(name, strlen(name));
  if (e) return e;
  const char *taken = config_name_taken(s, name);
  if (taken)
    return sip_error_new(SIP_FAILED_PRECONDITION,
                         "'%s' is %s of the config file; only models of the model repository are "
                         "loaded and unloaded, under names of their own",
                         name, taken);
  return NULL;
}

/* Loads or reloads one model: the versions its policy selects are brought
 * to READY, swapped in, and the versions they replace drained and freed.
 * When anything fails, what was serving stays (only versions that loaded
 * replace their old selves) and the failure is recorded for the index. */
static sip_error_t *load_model(sip_server_t *s, const char *name) {
  sip_repo_t *R = s->repo;
  sip_error_t *e = check_request(s, name);
  if (e) return e;
  uint64_t t0 = sip__now_us();
  failure_t *f = NULL;
  size_t nf = 0, nv = 0, n_old = 0, n_add = 0, n_retire = 0, n_sel = 0, n_missing = 0;
  version_t *v = NULL;
  char *dir = NULL, *cfg_file = NULL;
  sip_pool_config_t *tmpl = NULL;
  int64_t *sel = NULL, missing[SIP_MAX_SPECIFIC_VERSIONS], current = -1;
  sip_pool_t **add = NULL, **retire = NULL;
  int *keep = NULL;
  sip_pool_t **old = model_pools(s, name, &n_old);

  e = model_dir(R, name, &dir);
  if (e && !n_old && !rec_exists(R, name)) { /* not a model of this repository */
    sip__registry_release(old, n_old);
    return e;
  }
  rec_set_state(R, name, REC_LOADING);
  if (!e) {
    char *path = sip__asprintf("%s/config.yaml", dir);
    struct stat st;
    if (!path) e = SIP_OOM();
    else if (lstat(path, &st) == 0) e = inside(R, path, "model config", &cfg_file);
    sip__free(path);
  }
  if (!e) e = sip__config_load_model(cfg_file, name, NULL, &tmpl);
  if (!e) e = scan_versions(R, name, dir, &v, &nv, &f, &nf);
  /* Version directories that cannot be used (a link leaving the
   * repository...) are reported in the index but fail nothing by
   * themselves; the failures counted from here on do. */
  size_t nf_scan = nf;
  if (!e) e = current_version(name, dir, v, nv, &current);
  if (!e) {
    int64_t *nums = sip__calloc(nv + 1, sizeof *nums);
    sel = sip__calloc(nv + 1, sizeof *sel);
    if (!nums || !sel) {
      e = SIP_OOM();
    } else {
      for (size_t i = 0; i < nv; i++) nums[i] = v[i].num;
      n_sel = sip__repo_select_versions(tmpl, nums, nv, current, sel, missing, &n_missing);
    }
    sip__free(nums);
  }
  for (size_t i = 0; !e && i < n_missing; i++) {
    char ver[24];
    snprintf(ver, sizeof ver, "%lld", (long long)missing[i]);
    sip_error_t *me = sip_error_new(SIP_NOT_FOUND, "version %s is listed in "
                                    "version_policy.specific but %s/%s/model.onnx does not exist",
                                    ver, dir, ver);
    if (add_failure(&f, &nf, ver, me)) e = SIP_OOM();
    sip_error_free(me);
  }
  if (!e && !n_sel && nf == nf_scan)
    e = sip_error_new(SIP_NOT_FOUND,
                      "model '%s' has no version to serve; expected %s/<version>/model.onnx with a "
                      "numeric version",
                      name, dir);
  if (!e) {
    add = sip__calloc(n_sel + 1, sizeof *add);
    retire = sip__calloc(n_old + 1, sizeof *retire);
    keep = sip__calloc(n_old + 1, sizeof *keep);
    if (!add || !retire || !keep) e = SIP_OOM();
  }
  /* Each selected version: keep the running pool when its files did not
   * change, else load a new one beside it. */
  for (size_t i = 0; !e && i < n_sel; i++) {
    const version_t *ver = NULL;
    for (size_t k = 0; k < nv && !ver; k++)
      if (v[k].num == sel[i]) ver = &v[k];
    char *fp = fingerprint(ver->file, cfg_file);
    if (!fp) {
      e = SIP_OOM();
      break;
    }
    int kept = 0;
    for (size_t j = 0; j < n_old && !kept; j++)
      if (old[j]->version && !strcmp(old[j]->version, ver->name) && old[j]->fingerprint &&
          !strcmp(old[j]->fingerprint, fp))
        kept = keep[j] = 1;
    if (kept) {
      sip__free(fp);
      continue;
    }
    sip_pool_config_t *pc = NULL;
    sip_error_t *le = sip__config_load_model(cfg_file, name, ver->file, &pc);
    sip_pool_t *p = le ? NULL : sip__pool_new(&s->eng, pc, pc, ver->name);
    if (!le && !p) le = SIP_OOM();
    if (le) {
      sip__free(fp);
      e = le;
      break;
    }
    p->from_repo = 1;
    p->pinned = ver->num == current;
    p->fingerprint = fp;
    sip__pool_load(p);
    if (atomic_load(&p->state) == SIP_POOL_READY) {
      add[n_add++] = p;
    } else {
      if (add_failure(&f, &nf, ver->name, p->load_error)) e = SIP_OOM();
      sip__pool_destroy(p);
    }
  }
  /* Pipelines whose stages run on this model follow its new versions only
   * if those still fit how the stages were wired. */
  for (size_t i = 0; !e && i < n_add; i++) {
    sip__model_io_t io;
    char *why = add[i]->base.vt->describe_io(&add[i]->base, &io)
                    ? sip__pipelines_check_pool(s->pipelines, name, &io)
                    : NULL;
    if (why)
      e = sip_error_new(SIP_FAILED_PRECONDITION, "version '%s' does not fit %s; the versions "
                        "serving stay", add[i]->version ? add[i]->version : "-", why);
    sip__free(why);
  }
  if (e) { /* nothing changes: the versions loaded for nothing go */
    for (size_t i = 0; i < n_add; i++) {
      sip__pool_shutdown(add[i]);
      sip__pool_destroy(add[i]);
    }
    n_add = 0;
  } else {
    for (size_t j = 0; j < n_old; j++) {
      if (keep[j]) continue;
      int replaced = 0;
      for (size_t i = 0; i < n_add && !replaced; i++)
        replaced = old[j]->version && !strcmp(add[i]->version, old[j]->version);
      /* After a failure only versions with a working successor go. */
      if (nf == nf_scan || replaced) retire[n_retire++] = old[j];
    }
    /* The `current` link may have moved between versions that stay. */
    pthread_rwlock_wrlock(&s->eng.reg_lock);
    for (size_t j = 0; j < n_old; j++)
      if (keep[j]) old[j]->pinned = old[j]->version_num == current;
    pthread_rwlock_unlock(&s->eng.reg_lock);
    if (n_add || n_retire) {
      sip_error_t *se = sip__registry_swap(&s->eng, add, n_add, retire, n_retire);
      if (se) {
        for (size_t i = 0; i < n_add; i++) {
          sip__pool_shutdown(add[i]);
          sip__pool_destroy(add[i]);
        }
        n_add = n_retire = 0;
        e = se;
      }
    }
  }
  size_t n_live = n_old - n_retire + n_add;
  /* Our references go first: a drain waits for every other one. */
  sip__registry_release(old, n_old);
  for (size_t i = 0; i < n_retire; i++) {
    sip__log(SIP__LOG_INFO, "retiring model version", "model=%s version=%s", name,
             retire[i]->version ? retire[i]->version : "-");
    sip__registry_drain_free(&s->eng, retire[i]);
  }
  if (n_retire) give_back_memory();
  if (e) {
    add_failure(&f, &nf, NULL, e);
  } else if (nf > nf_scan) {
    const failure_t *first = &f[nf_scan];
    e = sip_error_new(first->code, "model '%s'%s%s%s failed to load: %s%s", name,
                      first->version ? " version '" : "", first->version ? first->version : "",
                      first->version ? "'" : "", first->reason,
                      n_live ? " (the versions that were serving stay)" : "");
  }
  sip__log(e ? SIP__LOG_ERROR : SIP__LOG_INFO, e ? "model load failed" : "model loaded",
           "model=%s versions_new=%zu versions_retired=%zu versions_serving=%zu failures=%zu "
           "ms=%.1f%s%s%s",
           name, n_add, n_retire, n_live, nf, (double)(sip__now_us() - t0) / 1000.0,
           e ? " reason=\"" : "", e ? sip_error_message(e) : "", e ? "\"" : "");
  rec_finish(R, name, n_live ? REC_READY : REC_FAILED, f, nf);
  for (size_t i = 0; i < nv; i++) sip__free(v[i].file);
  sip__free(v);
  sip__free(sel);
  sip__free(add);
  sip__free(retire);
  sip__free(keep);
  sip__free(dir);
  sip__free(cfg_file);
  sip__config_pool_free(tmpl);
  return e;
}

static sip_error_t *unload_model(sip_server_t *s, const char *name) {
  sip_repo_t *R = s->repo;
  sip_error_t *e = check_request(s, name);
  if (e) return e;
  size_t n_old = 0;
  sip_pool_t **old = model_pools(s, name, &n_old);
  if (!n_old) {
    sip__registry_release(old, n_old);
    char *dir = NULL;
    e = rec_exists(R, name) ? NULL : model_dir(R, name, &dir);
    sip__free(dir);
    if (!e) rec_finish(R, name, REC_UNLOADED, NULL, 0); /* already unloaded: done */
    return e;
  }
  char *why = sip__pipelines_check_pool(s->pipelines, name, NULL);
  if (why) {
    e = sip_error_new(SIP_FAILED_PRECONDITION, "model '%s' cannot be unloaded: %s; change or "
                      "remove that pipeline first", name, why);
    sip__free(why);
    sip__registry_release(old, n_old);
    return e;
  }
  rec_set_state(R, name, REC_UNLOADING);
  e = sip__registry_swap(&s->eng, NULL, 0, old, n_old);
  if (e) {
    sip__registry_release(old, n_old);
    rec_set_state(R, name, REC_READY);
    return e;
  }
  /* Our references go first (a drain waits for every other one); the pools
   * stay valid, since only sip__registry_drain_free frees them. */
  for (size_t i = 0; i < n_old; i++) sip__pool_unref(old[i]);
  for (size_t i = 0; i < n_old; i++) sip__registry_drain_free(&s->eng, old[i]);
  sip__free(old);
  give_back_memory();
  rec_finish(R, name, REC_UNLOADED, NULL, 0);
  sip__log(SIP__LOG_INFO, "model unloaded", "model=%s versions=%zu", name, n_old);
  return NULL;
}

/* ---- the loader thread ---------------------------------------------------- */

/* Model directory names in the repository, sorted (hidden and invalid
 * names skipped). */
static char **scan_models(sip_repo_t *R, size_t *n_out) {
  *n_out = 0;
  DIR *d = opendir(R->root);
  if (!d) return NULL;
  char **v = NULL;
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    sip_error_t *e = sip__repo_check_name(de->d_name, strlen(de->d_name));
    if (e) {
      sip_error_free(e);
      continue;
    }
    char *path = sip__asprintf("%s/%s", R->root, de->d_name);
    struct stat st;
    int dir = path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    sip__free(path);
    if (!dir) continue;
    char **nv = sip__reallocarray(v, n + 1, sizeof *v);
    char *name = nv ? sip__strdup(de->d_name) : NULL;
    if (!name) {
      if (nv) v = nv;
      break;
    }
    v = nv;
    v[n++] = name;
  }
  closedir(d);
  if (v) qsort(v, n, sizeof *v, cmp_str);
  *n_out = n;
  return v;
}

static void free_names(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) sip__free(v[i]);
  sip__free(v);
}

/* The config file's pools, then every repository model (unless explicit),
 * one at a time: loads compete for the same cores and memory bandwidth. */
static void initial_load(sip_server_t *s) {
  sip_repo_t *R = s->repo;
  /* Only this thread changes the registry while it loads. */
  pthread_rwlock_rdlock(&s->eng.reg_lock);
  size_t n_pools = s->eng.n_pools;
  for (size_t i = 0; i < n_pools; i++)
    if (atomic_load(&s->eng.pools[i]->state) == SIP_POOL_LOADING) sip__pool_load(s->eng.pools[i]);
  pthread_rwlock_unlock(&s->eng.reg_lock);
  size_t n = 0;
  char **names = NULL;
  if (R->root && s->cfg->model_control == SIP_MODEL_CONTROL_STARTUP) {
    names = scan_models(R, &n);
    /* Known and loading from now on (requests hear "loading", not "unknown"). */
    for (size_t i = 0; i < n; i++)
      if (!config_name_taken(s, names[i])) rec_set_state(R, names[i], REC_LOADING);
    for (size_t i = 0; i < n && !atomic_load(&s->draining); i++) {
      sip_error_t *e = load_model(s, names[i]);
      sip_error_free(e); /* logged and recorded */
    }
  }
  free_names(names, n);
  /* Pipelines hook (src/pipeline/): built once their pools have loaded. */
  sip__pipelines_build(s->pipelines);
  atomic_store(&s->loaded, 1);
  sip__log(SIP__LOG_INFO, "all pools loaded", "pools=%zu repository_models=%zu", n_pools, n);
}

static void *loader_main(void *arg) {
  sip_server_t *s = arg;
  sip_repo_t *R = s->repo;
  if (!atomic_load(&s->loaded)) initial_load(s);
  pthread_mutex_lock(&R->mu);
  for (;;) {
    while (!R->head && !R->stop) pthread_cond_wait(&R->cv, &R->mu);
    repo_op_t *op = R->head;
    if (!op) break;
    R->head = op->next;
    if (!R->head) R->tail = NULL;
    int stopping = R->stop;
    pthread_mutex_unlock(&R->mu);
    sip_error_t *e = stopping ? sip_error_new(SIP_UNAVAILABLE, "server is shutting down")
                     : op->unload ? unload_model(s, op->name)
                                  : load_model(s, op->name);
    op->done(e, op->user);
    sip__free(op->name);
    sip__free(op);
    pthread_mutex_lock(&R->mu);
  }
  pthread_mutex_unlock(&R->mu);
  return NULL;
}

sip_error_t *sip__repo_start(sip_server_t *s, int wait) {
  sip_repo_t *R = sip__calloc(1, sizeof *R);
  if (!R) return SIP_OOM();
  pthread_mutex_init(&R->mu, NULL);
  pthread_cond_init(&R->cv, NULL);
  s->repo = R;
  if (s->cfg->model_repository) {
    char real[PATH_MAX], eb[128];
    struct stat st;
    if (!realpath(s->cfg->model_repository, real) || stat(real, &st) != 0)
      return sip_error_new(SIP_NOT_FOUND, "server.model_repository %s: %s; expected a directory",
                           s->cfg->model_repository, strerror_r(errno, eb, sizeof eb));
    if (!S_ISDIR(st.st_mode))
      return sip_error_new(SIP_NOT_FOUND,
                           "server.model_repository %s is not a directory; expected a directory "
                           "of <model>/<version>/model.onnx",
                           s->cfg->model_repository);
    if (!(R->root = sip__strdup(real))) return SIP_OOM();
    R->root_len = strlen(real);
  }
  if (wait) initial_load(s);
  if (pthread_create(&R->thread, NULL, loader_main, s) != 0)
    return sip_error_new(SIP_RESOURCE_EXHAUSTED, "cannot start the loader thread");
  R->started = 1;
  return NULL;
}

void sip__repo_stop(sip_server_t *s) {
  sip_repo_t *R = s->repo;
  if (!R) return;
  pthread_mutex_lock(&R->mu);
  R->stop = 1; /* also refuses new requests (queue_op) */
  pthread_cond_signal(&R->cv);
  pthread_mutex_unlock(&R->mu);
  if (!R->started) return;
  pthread_join(R->thread, NULL);
  R->started = 0;
}

void sip__repo_free(sip_server_t *s) {
  sip_repo_t *R = s->repo;
  if (!R) return;
  while (R->head) { /* never started: nobody answered these */
    repo_op_t *op = R->head;
    R->head = op->next;
    op->done(sip_error_new(SIP_UNAVAILABLE, "server is shutting down"), op->user);
    sip__free(op->name);
    sip__free(op);
  }
  while (R->models) {
    model_rec_t *m = R->models;
    R->models = m->next;
    failures_free(m->failed, m->n_failed);
    sip__free(m->name);
    sip__free(m);
  }
  sip__free(R->root);
  pthread_mutex_destroy(&R->mu);
  pthread_cond_destroy(&R->cv);
  sip__free(R);
  s->repo = NULL;
}

sip_error_t *sip__repo_unavailable(sip_server_t *s, const char *name) {
  sip_repo_t *R = s->repo;
  if (!R || !R->root) return NULL;
  sip_error_t *e = NULL;
  pthread_mutex_lock(&R->mu);
  model_rec_t *m = rec_get(R, name, 0);
  if (m && m->state == REC_LOADING)
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' is loading", name);
  else if (m && m->state == REC_UNLOADING)
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' is being unloaded", name);
  else if (m && m->state == REC_FAILED && m->n_failed)
    e = sip_error_new(SIP_UNAVAILABLE, "model '%s' failed to load: %s", name, m->failed[0].reason);
  else if (m)
    e = sip_error_new(SIP_UNAVAILABLE,
                      "model '%s' is unloaded; load it (sip load %s, or POST "
                      "/v2/repository/models/%s/load)",
                      name, name, name);
  pthread_mutex_unlock(&R->mu);
  if (e) return e;
  sip_error_t *ne = sip__repo_check_name(name, strlen(name));
  if (ne) {
    sip_error_free(ne);
    return NULL;
  }
  char *dir = NULL;
  ne = model_dir(R, name, &dir);
  sip__free(dir);
  if (ne) {
    sip_error_free(ne);
    return NULL;
  }
  return sip_error_new(SIP_UNAVAILABLE,
                       "model '%s' is in the model repository but not loaded; load it (sip load "
                       "%s, or POST /v2/repository/models/%s/load)",
                       name, name, name);
}

/* ---- public API ------------------------------------------------------------ */

static sip_error_t *queue_op(sip_server_t *s, const char *name, int unload, sip_repo_done_fn done,
                             void *user) {
  if (!name) return sip_error_new(SIP_INVALID_ARGUMENT, "model name is NULL");
  if (!done) return sip_error_new(SIP_INVALID_ARGUMENT, "completion callback is NULL");
  sip_error_t *e = check_request(s, name);
  if (e) return e;
  if (atomic_load(&s->draining))
    return sip_error_new(SIP_UNAVAILABLE, "server is shutting down");
  /* An unknown model is refused at once (the loader checks again). */
  char *dir = NULL;
  if (!unload || !sip__registry_has(&s->eng, name)) {
    if (!unload || !rec_exists(s->repo, name)) e = model_dir(s->repo, name, &dir);
  }
  sip__free(dir);
  if (e) return e;
  repo_op_t *op = sip__calloc(1, sizeof *op);
  if (!op || !(op->name = sip__strdup(name))) {
    sip__free(op);
    return SIP_OOM();
  }
  op->unload = unload;
  op->done = done;
  op->user = user;
  sip_repo_t *R = s->repo;
  pthread_mutex_lock(&R->mu);
  if (R->stop) { /* the loader is gone: nobody would answer this one */
    pthread_mutex_unlock(&R->mu);
    sip__free(op->name);
    sip__free(op);
    return sip_error_new(SIP_UNAVAILABLE, "server is shutting down");
  }
  if (R->tail)
    R->tail->next = op;
  else
    R->head = op;
  R->tail = op;
  pthread_cond_signal(&R->cv);
  pthread_mutex_unlock(&R->mu);
  return NULL;
}

sip_error_t *sip_server_load_model_async(sip_server_t *s, const char *name, sip_repo_done_fn done,
                                         void *user) {
  return queue_op(s, name, 0, done, user);
}

sip_error_t *sip_server_unload_model_async(sip_server_t *s, const char *name,
                                           sip_repo_done_fn done, void *user) {
  return queue_op(s, name, 1, done, user);
}

typedef struct op_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sip_error_t *err;
  int done;
} op_wait_t;

static void op_done(sip_error_t *e, void *user) {
  op_wait_t *w = user;
  pthread_mutex_lock(&w->mu);
  w->err = e;
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static sip_error_t *run_op(sip_server_t *s, const char *name, int unload) {
  op_wait_t w = {.done = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  sip_error_t *e = queue_op(s, name, unload, op_done, &w);
  if (!e) {
    pthread_mutex_lock(&w.mu);
    while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    e = w.err;
  }
  pthread_mutex_destroy(&w.mu);
  pthread_cond_destroy(&w.cv);
  return e;
}

sip_error_t *sip_server_load_model(sip_server_t *s, const char *name) { return run_op(s, name, 0); }

sip_error_t *sip_server_unload_model(sip_server_t *s, const char *name) {
  return run_op(s, name, 1);
}

/* ---- the index ------------------------------------------------------------- */

typedef struct entry {
  json_t *obj;
  const char *name; /* in obj */
  int64_t num;
} entry_t;

static int cmp_entry(const void *a, const void *b) {
  const entry_t *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : x->num < y->num ? -1 : x->num > y->num;
}

static int add_entry(entry_t **v, size_t *n, json_t *obj, int64_t num) {
  entry_t *nv = obj ? sip__reallocarray(*v, *n + 1, sizeof *nv) : NULL;
  if (!nv) {
    json_decref(obj);
    return -1;
  }
  *v = nv;
  nv[*n].obj = obj;
  nv[*n].name = json_string_value(json_object_get(obj, "name"));
  nv[*n].num = num;
  (*n)++;
  return 0;
}

static const char *index_state(int pool_state) {
  return pool_state == SIP_POOL_READY     ? "READY"
         : pool_state == SIP_POOL_LOADING ? "LOADING"
                                          : "UNAVAILABLE";
}

static int64_t num_of(const char *v) {
  return v && v[0] >= '0' && v[0] <= '9' ? strtoll(v, NULL, 10) : -1;
}

char *sip_server_repository_index(sip_server_t *s, int ready_only) {
  sip_repo_t *R = s->repo;
  entry_t *v = NULL;
  size_t n = 0, n_pools = 0;
  int oom = 0;
  sip_pool_t **pools = sip__registry_snapshot(&s->eng, 1, &n_pools);
  int *is_default = sip__calloc(n_pools + 1, sizeof *is_default);
  if (!is_default) oom = 1;
  pthread_rwlock_rdlock(&s->eng.reg_lock);
  for (size_t i = 0; is_default && i < n_pools; i++)
    is_default[i] = sip__registry_is_default_locked(&s->eng, pools[i]);
  pthread_rwlock_unlock(&s->eng.reg_lock);
  for (size_t i = 0; !oom && i < n_pools; i++) {
    sip_pool_t *p = pools[i];
    int st = atomic_load(&p->state);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:b}", "name", p->cfg->name, "state",
                          index_state(st), "reason",
                          st == SIP_POOL_FAILED && p->error ? p->error : "", "source",
                          p->from_repo ? "repository" : "config", "default", is_default[i]);
    if (o && p->version) json_object_set_new(o, "version", json_string(p->version));
    oom = add_entry(&v, &n, o, p->version_num);
  }
  if (R && R->root) {
    pthread_mutex_lock(&R->mu);
    for (model_rec_t *m = R->models; m && !oom; m = m->next) {
      int live = 0;
      for (size_t i = 0; i < n_pools && !live; i++) live = !strcmp(pools[i]->cfg->name, m->name);
      int listed = 0;
      for (size_t k = 0; k < m->n_failed && !oom; k++) {
        const failure_t *fl = &m->failed[k];
        int served = 0;
        for (size_t i = 0; fl->version && i < n_pools && !served; i++)
          served = !strcmp(pools[i]->cfg->name, m->name) && pools[i]->version &&
                   !strcmp(pools[i]->version, fl->version);
        if (served) continue;
        json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "name", m->name, "state", "UNAVAILABLE",
                              "reason", fl->reason, "source", "repository");
        if (o && fl->version) json_object_set_new(o, "version", json_string(fl->version));
        oom = add_entry(&v, &n, o, num_of(fl->version));
        listed = 1;
      }
      if (!live && !listed && !oom)
        oom = add_entry(&v, &n,
                        json_pack("{s:s,s:s,s:s,s:s}", "name", m->name, "state",
                                  rec_state_names[m->state], "reason",
                                  m->state == REC_UNLOADED ? "unloaded" : "", "source",
                                  "repository"),
                        -1);
    }
    pthread_mutex_unlock(&R->mu);
    /* Models on disk that were never loaded (model_control: explicit). */
    size_t nn = 0;
    char **names = oom ? NULL : scan_models(R, &nn);
    for (size_t i = 0; i < nn && !oom; i++) {
      int known = 0;
      for (size_t k = 0; k < n && !known; k++) known = !strcmp(v[k].name, names[i]);
      if (!known)
        oom = add_entry(&v, &n,
                        json_pack("{s:s,s:s,s:s,s:s}", "name", names[i], "state", "UNAVAILABLE",
                                  "reason", "not loaded", "source", "repository"),
                        -1);
    }
    free_names(names, nn);
  }
  sip__registry_release(pools, n_pools);
  sip__free(is_default);
  char *txt = NULL;
  json_t *models = oom ? NULL : json_array();
  if (models) {
    qsort(v, n, sizeof *v, cmp_entry);
    for (size_t i = 0; i < n; i++) {
      const char *st = json_string_value(json_object_get(v[i].obj, "state"));
      if (!ready_only || (st && !strcmp(st, "READY"))) json_array_append(models, v[i].obj);
    }
    json_t *root = json_pack("{s:o}", "models", models);
    if (root) txt = json_dumps(root, JSON_COMPACT);
    json_decref(root);
  }
  for (size_t i = 0; i < n; i++) json_decref(v[i].obj);
  sip__free(v);
  return txt;
}
