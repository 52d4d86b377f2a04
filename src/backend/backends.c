/* sip — the backend table: the backends this build carries and those an
 * embedder registered (sip_backend_register), process-wide. The engine
 * finds a pool's backend here by name, and the config checks names and
 * capabilities against the same table (sip__backend_catalog). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/backends.h"
#include "core/core.h"

#define MAX_BACKENDS 16

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const sip_backend_vtable_t *table[MAX_BACKENDS] = {
    &sip__backend_onnxruntime, &sip__backend_builtin, &sip__backend_transform,
#ifdef SIP_HAVE_TORCH
    &sip__backend_torchscript,
#endif
};
static size_t n_table = SIP__BUILTIN_BACKENDS;
static char names[MAX_BACKENDS * 40];

const sip_backend_vtable_t *sip__backend_find(const char *name) {
  const sip_backend_vtable_t *vt = NULL;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; name && i < n_table && !vt; i++)
    if (!strcmp(table[i]->name, name)) vt = table[i];
  pthread_mutex_unlock(&mu);
  return vt;
}

/* Names are only ever added, so the text is rebuilt on registration and
 * read without the lock afterwards. */
static void rebuild_names(void) {
  size_t at = 0;
  for (size_t i = 0; i < n_table; i++)
    at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", table[i]->name);
#ifndef SIP_HAVE_TORCH
  /* Said where a config names it, instead of a bare "not a backend". */
  snprintf(names + at, sizeof names - at, " (this build has no TorchScript backend: libtorch "
           "was not found when it was built)");
#endif
}

const char *sip__backend_names(void) {
  pthread_mutex_lock(&mu);
  if (!names[0]) rebuild_names();
  pthread_mutex_unlock(&mu);
  return names;
}

static int catalog_flags(const char *name) {
  const sip_backend_vtable_t *vt = sip__backend_find(name);
  return vt ? (int)vt->flags : -1;
}

/* The i-th backend, or NULL past the end. */
static const sip_backend_vtable_t *backend_at(size_t i) {
  pthread_mutex_lock(&mu);
  const sip_backend_vtable_t *vt = i < n_table ? table[i] : NULL;
  pthread_mutex_unlock(&mu);
  return vt;
}

static const char *catalog_name_at(size_t i) {
  const sip_backend_vtable_t *vt = backend_at(i);
  return vt ? vt->name : NULL;
}

const sip_backend_vtable_t *sip__backend_probe(const char *path) {
  const sip_backend_vtable_t *vt;
  for (size_t i = 0; path && (vt = backend_at(i)); i++)
    if (vt->probe && vt->probe(path)) return vt;
  return NULL;
}

static const char *catalog_probe(const char *path) {
  const sip_backend_vtable_t *vt = sip__backend_probe(path);
  return vt ? vt->name : NULL;
}

const sip_backend_vtable_t *sip__backend_default(void) {
  const sip_backend_vtable_t *vt;
  for (size_t i = 0; (vt = backend_at(i)); i++)
    if (vt->default_files && vt->default_files[0]) return vt;
  return NULL;
}

static const char *catalog_default(void) {
  const sip_backend_vtable_t *vt = sip__backend_default();
  return vt ? vt->name : NULL;
}

const char *const *sip__backend_files(const char *name) {
  static const char *const none[] = {NULL};
  static const char *all[MAX_BACKENDS * 4 + 1];
  const sip_backend_vtable_t *vt;
  if (name) {
    vt = sip__backend_find(name);
    return vt && vt->default_files ? vt->default_files : none;
  }
  /* Rebuilt under the lock; entries are only ever added, so a reader
   * racing a registration sees a NULL-terminated prefix. */
  pthread_mutex_lock(&mu);
  size_t k = 0;
  for (size_t i = 0; i < n_table; i++)
    for (size_t j = 0; table[i]->default_files && table[i]->default_files[j] && j < 4; j++)
      all[k++] = table[i]->default_files[j];
  all[k] = NULL;
  pthread_mutex_unlock(&mu);
  return all;
}

const char *sip__backend_file_name(const char *name) {
  const char *const *f = sip__backend_files(name);
  if (f[0]) return f[0];
  const sip_backend_vtable_t *d = sip__backend_default();
  return d ? d->default_files[0] : "model";
}

static const char *catalog_formats(void) {
  static char text[MAX_BACKENDS * 80];
  pthread_mutex_lock(&mu);
  size_t at = 0;
  text[0] = '\0';
  for (size_t i = 0; i < n_table; i++)
    for (size_t j = 0; table[i]->default_files && table[i]->default_files[j] && j < 4; j++)
      at += (size_t)snprintf(text + at, sizeof text - at, "%s%s (%s)", at ? ", " : "",
                             table[i]->default_files[j], table[i]->name);
  pthread_mutex_unlock(&mu);
  return text;
}

static const char *catalog_platform(const char *name) {
  const sip_backend_vtable_t *vt = sip__backend_find(name);
  return !vt ? name : vt->platform ? vt->platform : vt->name;
}

static const sip_backend_option_t *catalog_options(const char *name, size_t *n) {
  const sip_backend_vtable_t *vt = sip__backend_find(name);
  *n = vt && vt->options ? vt->n_options : 0;
  return vt ? vt->options : NULL;
}

static sip_error_t *catalog_check(const char *name, const sip_kv_t *kv, size_t n) {
  const sip_backend_vtable_t *vt = sip__backend_find(name);
  return vt && vt->check_options ? vt->check_options(kv, n) : NULL;
}

const sip__backend_catalog_t *sip__backend_catalog(void) {
  static const sip__backend_catalog_t cat = {
      .flags_of = catalog_flags,
      .names = sip__backend_names,
      .probe = catalog_probe,
      .default_backend = catalog_default,
      .formats = catalog_formats,
      .platform_of = catalog_platform,
      .options_of = catalog_options,
      .check_options = catalog_check,
      .files_of = sip__backend_files,
      .name_at = catalog_name_at,
  };
  return &cat;
}

sip_error_t *sip_backend_register(const sip_backend_vtable_t *vt) {
  if (!vt || !vt->name || !vt->name[0])
    return sip_error_new(SIP_INVALID_ARGUMENT, "a backend needs a name");
  for (const char *c = vt->name; *c; c++)
    if (!sip__name_char(*c))
      return sip_error_new(SIP_INVALID_ARGUMENT, "backend name '%s' has '%c'; expected letters, "
                           "digits, '_' and '-'", vt->name, *c);
  if (strlen(vt->name) > 32)
    return sip_error_new(SIP_INVALID_ARGUMENT, "backend name '%s' is longer than 32 characters",
                         vt->name);
  if (!vt->load || !vt->describe || !vt->session_new || !vt->execute || !vt->session_free ||
      !vt->model_free)
    return sip_error_new(SIP_INVALID_ARGUMENT, "backend '%s' lacks one of load, describe, "
                         "session_new, execute, session_free, model_free", vt->name);
  if (vt->memory && (!vt->alloc || !vt->copy))
    return sip_error_new(SIP_INVALID_ARGUMENT, "backend '%s' has a memory hook but lacks alloc "
                         "or copy; expected all three (or none: host memory)", vt->name);
  for (size_t i = 0; vt->options && i < vt->n_options; i++)
    if (!vt->options[i].name || (vt->options[i].type == SIP_OPTION_ENUM && !vt->options[i].values))
      return sip_error_new(SIP_INVALID_ARGUMENT, "backend '%s': option %zu has no %s", vt->name, i,
                           vt->options[i].name ? "values (an ENUM needs them)" : "name");
  sip_error_t *e = NULL;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < n_table && !e; i++)
    if (!strcmp(table[i]->name, vt->name))
      e = sip_error_new(SIP_INVALID_ARGUMENT, "a backend named '%s' exists already", vt->name);
  if (!e && n_table == MAX_BACKENDS)
    e = sip_error_new(SIP_RESOURCE_EXHAUSTED, "%d backends are registered; at most %d are "
                      "supported", MAX_BACKENDS, MAX_BACKENDS);
  if (!e) {
    table[n_table++] = vt;
    rebuild_names();
  }
  pthread_mutex_unlock(&mu);
  return e;
}
