/* sip — models imported into the repository from files outside it
 * (sip_server_import_model_async; ModelMesh's loadModel, src/grpc/mmesh.c).
 *
 * The model's files are hard-linked (copied when a link cannot be made: on
 * another file system, say) into <repository>/<name>/<version>/<model
 * file>, beside a marker file, .sip-import, that names where they came
 * from; then the model loads as any repository model does. The directory
 * is built under a hidden name and renamed into place, so a scan never sees
 * half of it. Removing an imported model unloads it and deletes that
 * directory; a directory without the marker is never deleted.
 *
 * When the files were fetched into <repository>/<name>/ itself (ModelMesh's
 * puller writes <root>/<model id>/ and sipd may serve <root> as its
 * repository), that directory is adopted instead: a version directory is
 * added beside the fetched files (unless they are laid out in versions
 * already) and the marker names it; removing the model deletes only those
 * two, the fetched files are their fetcher's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backends.h"
#include "core/core.h"
#include "server/repository/repository_impl.h"

#define MARK ".sip-import"
#define LAYOUTS "a model file of a format this server loads (%s), a directory holding one, or a " \
                "directory of <version>/<model file>"

/* ---- files ------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

/* Deletes `path` and everything under it (links are not followed). */
static int rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int copy_file(const char *from, const char *to) {
  int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
  if (in >= 0) out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  char *buf = out >= 0 ? sip__malloc(1 << 20) : NULL;
  for (ssize_t n; buf && (n = read(in, buf, 1 << 20)) >= 0;) {
    if (n == 0) {
      rc = 0;
      break;
    }
    ssize_t w = 0;
    for (ssize_t k; w < n && (k = write(out, buf + w, (size_t)(n - w))) > 0;) w += k;
    if (w < n) break;
  }
  sip__free(buf);
  if (out >= 0 && close(out) != 0) rc = -1;
  if (in >= 0) close(in);
  return rc;
}

/* `from` as `to`: a hard link, else a copy. */
static sip_error_t *place(const char *from, const char *to) {
  if (link(from, to) == 0 || copy_file(from, to) == 0) return NULL;
  char eb[128];
  return sip_error_new(SIP_INTERNAL, "cannot link or copy model file %s into the model "
                       "repository: %s", from, strerror_r(errno, eb, sizeof eb));
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The source the marker of directory `dir` names (owned), or NULL when it
 * has none (not imported). `added` (may be NULL) gets the second line: ""
 * for a directory the import made, else "adopted <version directory added
 * or nothing>". */
static char *mark_of(const char *dir, char added[32]) {
  char *path = sip__asprintf("%s/" MARK, dir), *out = NULL;
  FILE *f = path ? fopen(path, "re") : NULL;
  char line[PATH_MAX + 2], more[32] = "";
  if (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    out = sip__strdup(line);
    if (fgets(more, sizeof more, f)) more[strcspn(more, "\n")] = '\0';
  }
  if (added) memcpy(added, more, sizeof more);
  if (f) fclose(f);
  sip__free(path);
  return out;
}

static sip_error_t *write_mark(const char *dir, const char *source, const char *added) {
  char *mark = sip__asprintf("%s/" MARK, dir);
  FILE *f = mark ? fopen(mark, "we") : NULL;
  sip__free(mark);
  int bad = !f || fprintf(f, "%s\n%s\n", source, added) < 0;
  if (f && fclose(f) != 0) bad = 1;
  return bad ? sip_error_new(SIP_INTERNAL, "cannot write an import marker in the model "
                             "repository")
             : NULL;
}

/* ---- layouts ------------------------------------------------------------------ */

/* The one file of `dir` some backend claims (owned name), or NULL when
 * there is none or more than one. */
static char *only_model_file(const char *dir) {
  DIR *d = opendir(dir);
  char *found = NULL;
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));) {
    if (de->d_name[0] == '.') continue;
    char *p = sip__asprintf("%s/%s", dir, de->d_name);
    if (p && is_file(p) && sip__backend_probe(p) && n++ == 0) found = sip__strdup(de->d_name);
    sip__free(p);
  }
  if (d) closedir(d);
  if (n != 1) {
    sip__free(found);
    found = NULL;
  }
  return found;
}

/* Version `ver` of directory `tmp`, holding `file` under the default name
 * of the backend that claims it (`as`; NULL: its own name). */
static sip_error_t *place_one(const char *file, const char *as, const char *tmp,
                              const char *ver) {
  if (!as) {
    const sip_backend_vtable_t *vt = sip__backend_probe(file);
    if (!vt)
      return sip_error_new(SIP_INVALID_ARGUMENT, "model file %s is of no format this server "
                           "loads; expected " LAYOUTS, file, sip__backend_catalog()->formats());
    as = sip__backend_file_name(vt->name);
  }
  char *vdir = sip__asprintf("%s/%s", tmp, ver), *to = sip__asprintf("%s/%s/%s", tmp, ver, as);
  sip_error_t *e = !vdir || !to ? SIP__OOM() : NULL;
  if (!e && mkdir(vdir, 0755) != 0)
    e = sip_error_new(SIP_INTERNAL, "cannot create a version directory in the model repository");
  if (!e) e = place(file, to);
  sip__free(vdir);
  sip__free(to);
  return e;
}

/* The next version number of `dir`: one past its largest numeric entry. */
static void next_version(const char *dir, char out[24]) {
  long long max = 0;
  DIR *d = opendir(dir);
  for (struct dirent *de; d && (de = readdir(d));) {
    size_t k = strspn(de->d_name, "0123456789");
    if (k && k <= 18 && !de->d_name[k] && atoll(de->d_name) > max) max = atoll(de->d_name);
  }
  if (d) closedir(d);
  snprintf(out, 24, "%lld", max + 1);
}

/* Lays the model at `source` (resolved) out as versions of the model
 * directory `to`: a new directory, or with `adopt` the existing one that
 * holds `source`, where one version is added (named in `added`; "" when
 * `source` is `to` laid out in versions already). */
static sip_error_t *materialise(const char *source, const char *to, int adopt, char added[24]) {
  struct stat st;
  const char *formats = sip__backend_catalog()->formats();
  char ver[24] = "1";
  added[0] = '\0';
  if (stat(source, &st) != 0) {
    char eb[128];
    return sip_error_new(SIP_NOT_FOUND, "model path %s: %s; expected " LAYOUTS, source,
                         strerror_r(errno, eb, sizeof eb), formats);
  }
  if (adopt) next_version(to, ver);
  else if (mkdir(to, 0755) != 0)
    return sip_error_new(SIP_INTERNAL, "cannot create the model's directory in the model "
                         "repository");
  sip_error_t *e = NULL;
  if (S_ISREG(st.st_mode)) {
    e = place_one(source, NULL, to, ver);
    goto out;
  }
  if (!S_ISDIR(st.st_mode))
    return sip_error_new(SIP_INVALID_ARGUMENT, "model path %s is neither a file nor a "
                         "directory; expected " LAYOUTS, source, formats);
  /* The model's settings come along: config.yaml, or Triton's config.pbtxt
   * (sip__repo_cfg_find reads whichever is there). */
  static const char *const settings[] = {"config.yaml", "config.pbtxt"};
  for (size_t i = 0; !e && !adopt && i < 2; i++) {
    char *cfg = sip__asprintf("%s/%s", source, settings[i]);
    char *cfg_to = sip__asprintf("%s/%s", to, settings[i]);
    if (!cfg || !cfg_to) e = SIP__OOM();
    else if (is_file(cfg)) e = place(cfg, cfg_to);
    sip__free(cfg);
    sip__free(cfg_to);
  }
  if (e) return e;
  /* A default file name right in the directory: <path>/<a default file name of a backend>. */
  for (const char *const *f = sip__backend_files(NULL); *f; f++) {
    char *p = sip__asprintf("%s/%s", source, *f);
    int here = p && is_file(p);
    if (here) e = place_one(p, *f, to, ver);
    sip__free(p);
    if (here) goto out;
  }
  /* Version directories: <path>/<version>/<model file> (adopted: the latest). */
  sip__version_dir_t *v = NULL;
  size_t n = 0, placed = 0;
  int err = sip__version_dirs(source, sip__backend_files(NULL), &v, &n);
  if (err == ENOMEM) return SIP__OOM();
  for (size_t i = n; !err && !e && i-- > 0;) {
    if (!is_file(v[i].file)) continue;
    const char *base = strrchr(v[i].file, '/') + 1;
    placed++;
    if (adopt && !strcmp(source, to)) break; /* in versions already: nothing to add */
    if (adopt) {
      e = place_one(v[i].file, base, to, ver);
      break;
    }
    e = place_one(v[i].file, base, to, v[i].name);
  }
  sip__version_dirs_free(v, n);
  if (e || placed) {
    if (!e && adopt && strcmp(source, to)) memcpy(added, ver, sizeof ver);
    return e;
  }
  /* The one model file of the directory, whatever its name: <path>/mnist.<ext>. */
  char *only = only_model_file(source);
  char *p = only ? sip__asprintf("%s/%s", source, only) : NULL;
  e = p ? place_one(p, NULL, to, ver)
        : sip_error_new(SIP_NOT_FOUND, "model path %s holds no model; expected " LAYOUTS,
                        source, formats);
  sip__free(only);
  sip__free(p);
out:
  if (!e && adopt) memcpy(added, ver, sizeof ver);
  return e;
}

/* ---- the loader's operations ------------------------------------------------------ */

/* Deletes what the import into `dir` made: the directory, or when it was
 * adopted the version directory it added and the marker (the fetched files
 * are their fetcher's). */
static int undo(const char *dir) {
  char added[32];
  char *src = mark_of(dir, added);
  if (!src) return 0;
  sip__free(src);
  if (strncmp(added, "adopted", 7)) return rm_tree(dir);
  int named = added[7] == ' ' && strspn(added + 8, "0123456789") == strlen(added + 8) && added[8];
  char *v = named ? sip__asprintf("%s/%s", dir, added + 8) : NULL;
  char *m = sip__asprintf("%s/" MARK, dir);
  int rc = (v && rm_tree(v) != 0) || !m || (unlink(m) != 0 && errno != ENOENT) ? -1 : 0;
  sip__free(v);
  sip__free(m);
  return rc;
}

/* Unloads `name` and deletes what its import made. */
static sip_error_t *remove_one(sip_server_t *s, const char *name) {
  sip__repo_t *R = s->repo;
  struct stat st;
  sip_error_t *e = sip__repo_unload_model(s, name);
  if (e && sip_error_code(e) == SIP_NOT_FOUND) { /* never heard of: unloaded already */
    sip_error_free(e);
    e = NULL;
  }
  if (e) return e;
  char *dir = sip__asprintf("%s/%s", R->root, name), *src = dir ? mark_of(dir, NULL) : NULL;
  if (!dir) return SIP__OOM();
  if (src) {
    if (undo(dir) != 0) {
      char eb[128];
      e = sip_error_new(SIP_INTERNAL, "model '%s' is unloaded but its imported files could not "
                        "all be deleted: %s", name, strerror_r(errno, eb, sizeof eb));
    } else {
      sip__repo_rec_drop(R, name);
      sip__log(SIP__LOG_INFO, "imported model removed", "model=%s source=%s", name, src);
    }
  } else if (lstat(dir, &st) != 0) {
    sip__repo_rec_drop(R, name); /* an import that failed: its files went then */
  }
  sip__free(src);
  sip__free(dir);
  return e;
}

sip_error_t *sip__repo_remove(sip_server_t *s, const char *name) {
  if (name[0]) return remove_one(s, name);
  size_t n = 0;
  char **names = sip__repo_scan_models(s->repo, &n);
  sip_error_t *e = NULL;
  for (size_t i = 0; i < n && !e; i++) {
    char *dir = sip__asprintf("%s/%s", s->repo->root, names[i]);
    char *src = dir ? mark_of(dir, NULL) : NULL;
    if (src) e = remove_one(s, names[i]);
    sip__free(src);
    sip__free(dir);
  }
  sip__repo_free_names(names, n);
  return e;
}

/* 1 when `path` is `dir` or lies under it. */
static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

sip_error_t *sip__repo_import(sip_server_t *s, const char *name, const char *source) {
  sip__repo_t *R = s->repo;
  sip_error_t *e = sip__repo_check_request(s, name);
  if (e) return e;
  char *dir = sip__asprintf("%s/%s", R->root, name);
  char *tmp = sip__asprintf("%s/.sip-import-%s", R->root, name);
  char *was = dir ? mark_of(dir, NULL) : NULL;
  char real[PATH_MAX], added[24], mark[40];
  struct stat st;
  int adopt = 0;
  if (!dir || !tmp) {
    e = SIP__OOM();
  } else if (was && !strcmp(was, source) && sip__registry_has(&s->eng, name)) {
    goto out; /* loaded from there already */
  } else if (was) {
    e = remove_one(s, name); /* another source, or it failed: the old import goes first */
  }
  /* Fetched into the model's own directory: adopted, not moved. */
  if (!e && lstat(dir, &st) == 0) {
    adopt = realpath(dir, real) && under(source, real);
    if (!adopt)
      e = sip_error_new(SIP_FAILED_PRECONDITION, "'%s' is a model of the model repository "
                        "that was not imported; an import may not replace it (choose another "
                        "name)", name);
  }
  if (!e && !adopt && rm_tree(tmp) != 0) /* what an import that stopped half-way left */
    e = sip_error_new(SIP_INTERNAL, "cannot clear a previous import of '%s'", name);
  if (!e) e = materialise(source, adopt ? real : tmp, adopt, added);
  if (adopt) snprintf(mark, sizeof mark, added[0] ? "adopted %s" : "adopted", added);
  else mark[0] = '\0';
  if (!e) e = write_mark(adopt ? real : tmp, source, mark);
  if (!e && !adopt && rename(tmp, dir) != 0)
    e = sip_error_new(SIP_INTERNAL, "cannot move the import of '%s' into place", name);
  if (e) {
    if (!adopt) rm_tree(tmp);
    goto out;
  }
  e = sip__repo_load_model(s, name, NULL);
  /* Nothing of it serves: what the import made goes, its reason stays in
   * the index. */
  if (e && !sip__registry_has(&s->eng, name)) undo(adopt ? real : dir);
  sip__log(e ? SIP__LOG_ERROR : SIP__LOG_INFO, e ? "model import failed" : "model imported",
           "model=%s source=%s%s", name, source, adopt ? " adopted=yes" : "");
out:
  sip__free(was);
  sip__free(tmp);
  sip__free(dir);
  return e;
}

/* ---- public API ------------------------------------------------------------------ */

sip_error_t *sip_server_import_model_async(sip_server_t *s, const char *name, const char *path,
                                           sip_repo_done_fn done, void *user) {
  if (!path || !path[0])
    return sip_error_new(SIP_INVALID_ARGUMENT, "model path is empty; expected " LAYOUTS,
                         sip__backend_catalog()->formats());
  char real[PATH_MAX];
  if (!realpath(path, real)) {
    char eb[128];
    return sip_error_new(errno == ENOENT ? SIP_NOT_FOUND : SIP_INVALID_ARGUMENT,
                         "model path %s: %s; expected " LAYOUTS, path,
                         strerror_r(errno, eb, sizeof eb), sip__backend_catalog()->formats());
  }
  return sip__repo_queue_op(s, name ? name : "", SIP__REPO_OP_IMPORT, NULL, real, done, user);
}

sip_error_t *sip_server_remove_model_async(sip_server_t *s, const char *name,
                                           sip_repo_done_fn done, void *user) {
  return sip__repo_queue_op(s, name, SIP__REPO_OP_REMOVE, NULL, NULL, done, user);
}
