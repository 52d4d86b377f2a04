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
    &sip__backend_onnxruntime, &sip__backend_builtin, &sip__backend_transform};
static size_t n_table = 3;
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

const sip__backend_catalog_t *sip__backend_catalog(void) {
  static const sip__backend_catalog_t cat = {catalog_flags, sip__backend_names};
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
