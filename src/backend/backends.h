/* sip — the backend table (backends.c) and the backends this build carries. */
#ifndef SIP_BACKEND_BACKENDS_H
#define SIP_BACKEND_BACKENDS_H

#include "config/backend_catalog.h"
#include "sip/backend.h"

/* The backend named `name` (built in or registered), or NULL. */
const sip_backend_vtable_t *sip__backend_find(const char *name);
/* "onnxruntime, builtin, transform[, registered ...]" (static storage). */
const char *sip__backend_names(void);
/* The table as the config parser reads it (src/config/config.h). */
const sip__backend_catalog_t *sip__backend_catalog(void);

extern const sip_backend_vtable_t sip__backend_onnxruntime;
extern const sip_backend_vtable_t sip__backend_builtin;
extern const sip_backend_vtable_t sip__backend_transform;

#endif
