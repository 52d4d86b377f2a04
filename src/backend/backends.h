/* sip — the backend table (backends.c) and the backends this build carries. */
#ifndef SIP_BACKEND_BACKENDS_H
#define SIP_BACKEND_BACKENDS_H

#include "config/backend_catalog.h"
#include "sip/backend.h"

/* The backend named `name` (built in or registered), or NULL. */
const sip_backend_vtable_t *sip__backend_find(const char *name);
/* "onnxruntime, builtin, transform[, registered ...]" (static storage). */
const char *sip__backend_names(void);
/* The first backend whose probe claims the model file `path`, or NULL. */
const sip_backend_vtable_t *sip__backend_probe(const char *path);
/* The backend of model directories no file decides: the first one with
 * default file names (onnxruntime in this build), or NULL. */
const sip_backend_vtable_t *sip__backend_default(void);
/* The default file names of a version directory for backend `name`; NULL
 * name: every backend's, in table order. NULL-terminated, static storage. */
const char *const *sip__backend_files(const char *name);
/* The first of those for `name` (the default backend's when `name` has
 * none), for messages ("model.onnx"). Static storage. */
const char *sip__backend_file_name(const char *name);
/* The table as the config parser reads it (src/config/config.h). */
const sip__backend_catalog_t *sip__backend_catalog(void);

extern const sip_backend_vtable_t sip__backend_onnxruntime;
extern const sip_backend_vtable_t sip__backend_builtin;
extern const sip_backend_vtable_t sip__backend_transform;
#ifdef SIP_HAVE_TORCH
/* src/backend/torchscript.cc, built when libtorch is found. */
extern const sip_backend_vtable_t sip__backend_torchscript;
#define SIP__BUILTIN_BACKENDS 4
#else
#define SIP__BUILTIN_BACKENDS 3
#endif

#endif
