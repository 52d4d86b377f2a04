/* sip — keeping the server's own directories out of its answers (redact.h). */
#include "core/redact.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define MAX_DIRS 256

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
/* Longest first, so a directory inside another one wins. */
static char *dirs[MAX_DIRS];
static size_t dir_len[MAX_DIRS];
static size_t n_dirs;

static int add_one(const char *d, size_t n) {
  while (n > 1 && d[n - 1] == '/') n--;
  if (n < 2 || d[0] != '/') return 0;
  int rc = 0;
  pthread_rwlock_wrlock(&lock);
  size_t i = 0;
  for (; i < n_dirs; i++)
    if (dir_len[i] == n && !memcmp(dirs[i], d, n)) break;
  if (i == n_dirs && n_dirs < MAX_DIRS) {
    char *copy = sip__strndup(d, n);
    if (!copy) {
      rc = -1;
    } else {
      size_t at = 0;
      while (at < n_dirs && dir_len[at] >= n) at++;
      memmove(dirs + at + 1, dirs + at, (n_dirs - at) * sizeof *dirs);
      memmove(dir_len + at + 1, dir_len + at, (n_dirs - at) * sizeof *dir_len);
      dirs[at] = copy;
      dir_len[at] = n;
      n_dirs++;
    }
  }
  pthread_rwlock_unlock(&lock);
  return rc;
}

int sip__redact_add_dir(const char *dir) {
  if (!dir || dir[0] != '/') return 0;
  int rc = add_one(dir, strlen(dir));
  char real[PATH_MAX];
  if (!rc && realpath(dir, real)) rc = add_one(real, strlen(real));
  return rc;
}

int sip__redact_add_parent(const char *file) {
  const char *slash = file ? strrchr(file, '/') : NULL;
  if (!slash || slash == file) return 0;
  char *d = sip__strndup(file, (size_t)(slash - file));
  if (!d) return -1;
  int rc = sip__redact_add_dir(d);
  sip__free(d);
  return rc;
}

void sip__redact_reset(void) {
  pthread_rwlock_wrlock(&lock);
  for (size_t i = 0; i < n_dirs; i++) sip__free(dirs[i]);
  n_dirs = 0;
  pthread_rwlock_unlock(&lock);
}

static int path_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-' || c == '/';
}

/* The registered directory that starts at s[i] as a whole path component
 * sequence (its length), or 0. Read lock held. */
static size_t match_at(const char *s, size_t n, size_t i) {
  if (s[i] != '/' || (i > 0 && path_char(s[i - 1]))) return 0;
  for (size_t k = 0; k < n_dirs; k++) {
    size_t l = dir_len[k];
    if (n - i < l || memcmp(s + i, dirs[k], l)) continue;
    if (i + l == n || s[i + l] == '/' || !path_char(s[i + l])) return l;
  }
  return 0;
}

char *sip__redacted(const char *s, size_t n, size_t *out_n) {
  if (!s || !n) return NULL;
  pthread_rwlock_rdlock(&lock);
  size_t i = 0;
  while (i < n && n_dirs && !match_at(s, n, i)) i++;
  /* A match never makes the text longer ("DIR/" -> "", "DIR" -> "."). */
  char *out = i < n && n_dirs ? sip__malloc(n + 1) : NULL;
  if (out) {
    memcpy(out, s, i);
    size_t o = i;
    while (i < n) {
      size_t l = match_at(s, n, i);
      if (!l) {
        out[o++] = s[i++];
        continue;
      }
      i += l;
      if (i < n && s[i] == '/') i++; /* "DIR/x" -> "x" */
      else out[o++] = '.';           /* "DIR" -> "." */
    }
    out[o] = '\0';
    *out_n = o;
  }
  pthread_rwlock_unlock(&lock);
  return out;
}

const char *sip__redact_path(const char *path) {
  if (!path) return NULL;
  size_t n = strlen(path);
  pthread_rwlock_rdlock(&lock);
  size_t l = n ? match_at(path, n, 0) : 0;
  pthread_rwlock_unlock(&lock);
  if (!l) return path;
  return path[l] == '/' ? path + l + 1 : path + l;
}
