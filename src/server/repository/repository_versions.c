/* sip — the model repository's names, paths and versions: a model name
 * from a request is checked before it touches the file system, every path
 * is resolved (realpath) and must stay inside the repository, a model's
 * version directories and its `current` link are read (through the session
 * layer's one reader of versioned directories, sip__version_dirs) and its
 * version_policy picks the versions to serve. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backends.h"
#include "core/core.h"
#include "server/repository/repository_impl.h"

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

size_t sip__repo_select_versions(const sip__pool_config_t *policy, const int64_t *avail, size_t n,
                                 int64_t current, int64_t *out, int64_t *missing,
                                 size_t *n_missing) {
  size_t k = 0;
  *n_missing = 0;
  switch (policy->version_policy) {
  case SIP__VERSIONS_ALL:
    for (size_t i = 0; i < n; i++) out[k++] = avail[i];
    break;
  case SIP__VERSIONS_SPECIFIC:
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

/* ---- paths -------------------------------------------------------------- */

/* realpath of `path` into *out (owned) when it lies inside the repository.
 * Errors: NOT_FOUND (missing), INVALID_ARGUMENT (resolves outside). */
sip_error_t *sip__repo_inside(sip__repo_t *R, const char *path, const char *what, char **out) {
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
  return (*out = sip__strdup(real)) ? NULL : SIP__OOM();
}

/* The model's directory (resolved, owned). */
sip_error_t *sip__repo_model_dir(sip__repo_t *R, const char *name, char **out) {
  *out = NULL;
  char *path = sip__asprintf("%s/%s", R->root, name);
  if (!path) return SIP__OOM();
  sip_error_t *e = sip__repo_inside(R, path, "model directory", out);
  if (e && sip_error_code(e) == SIP_NOT_FOUND) {
    sip_error_free(e);
    /* The answer goes to clients: no server paths in it. */
    e = sip_error_new(SIP_NOT_FOUND, "Request for unknown model: '%s' is not found: it is not in "
                      "the model repository (expected a directory '%s' holding "
                      "<version>/<model file>, one of %s)", name, name,
                      sip__backend_catalog()->formats());
  }
  struct stat st;
  if (!e && (stat(*out, &st) != 0 || !S_ISDIR(st.st_mode)))
    e = sip_error_new(SIP_NOT_FOUND, "model '%s': its entry in the model repository is not a "
                      "directory; expected a directory '%s' holding <version>/<model file>, one "
                      "of %s", name, name, sip__backend_catalog()->formats());
  if (e) {
    sip__free(*out);
    *out = NULL;
  }
  sip__free(path);
  return e;
}

/* ---- versions and model directories ----------------------------------------- */

/* Scans the model directory for versions (sorted); versions that cannot be
 * used are added to the failures. */
sip_error_t *sip__repo_scan_versions(sip__repo_t *R, const char *name, const char *dir,
                                     sip__version_dir_t **out, size_t *n_out, sip__failure_t **f,
                                     size_t *nf) {
  *out = NULL;
  *n_out = 0;
  sip__version_dir_t *v = NULL;
  size_t n = 0, kept = 0;
  int err = sip__version_dirs(dir, sip__backend_files(NULL), &v, &n);
  if (err == ENOMEM) return SIP__OOM();
  if (err) {
    char eb[128];
    return sip_error_new(SIP_NOT_FOUND, "model '%s': cannot read %s: %s", name, dir,
                         strerror_r(err, eb, sizeof eb));
  }
  sip_error_t *e = NULL;
  for (size_t i = 0; i < n && !e; i++) {
    char *real = NULL;
    struct stat st;
    sip_error_t *fe = sip__repo_inside(R, v[i].file, "model file", &real);
    if (!fe && (stat(real, &st) != 0 || !S_ISREG(st.st_mode)))
      fe = sip_error_new(SIP_INVALID_ARGUMENT, "model file %s is not a regular file", v[i].file);
    for (size_t j = 0; !fe && j < kept; j++)
      if (v[j].num == v[i].num)
        fe = sip_error_new(SIP_INVALID_ARGUMENT,
                           "version directories '%s' and '%s' are the same version number",
                           v[j].name, v[i].name);
    sip__free(v[i].file);
    v[i].file = NULL;
    if (fe) {
      if (sip__repo_add_failure(f, nf, v[i].name, fe)) e = SIP__OOM();
      sip_error_free(fe);
      sip__free(real);
      continue;
    }
    v[kept] = v[i]; /* kept <= i */
    v[kept++].file = real;
  }
  if (e) {
    sip__version_dirs_free(v, n);
    return e;
  }
  *out = v;
  *n_out = kept;
  return NULL;
}

/* The version a `current` link names (-1: no link). */
sip_error_t *sip__repo_current_version(const char *name, const char *dir,
                                       const sip__version_dir_t *v, size_t n, int64_t *out) {
  *out = -1;
  char target[PATH_MAX];
  const char *base = NULL;
  int link = sip__version_current(dir, target, sizeof target, &base);
  if (link < 0) return SIP__OOM();
  if (!link) return NULL;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].name, base)) {
      *out = v[i].num;
      return NULL;
    }
  return sip_error_new(SIP_NOT_FOUND,
                       "model '%s': the 'current' link points to '%s', which is not a version "
                       "directory of the model with a model file",
                       name, target);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Model directory names in the repository, sorted (hidden and invalid
 * names skipped). */
char **sip__repo_scan_models(sip__repo_t *R, size_t *n_out) {
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

void sip__repo_free_names(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) sip__free(v[i]);
  sip__free(v);
}
