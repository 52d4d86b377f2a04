/* sip — what the config parser knows of backends: the backend table's
 * names, capability flags, formats (probe, default file names, platform)
 * and option tables, handed to it by the layer that owns the table
 * (src/backend/backends.c), so that config calls nothing above it. */
#ifndef SIP_CONFIG_BACKEND_CATALOG_H
#define SIP_CONFIG_BACKEND_CATALOG_H

#include <stddef.h>

#include "sip/backend.h"

typedef struct sip__backend_catalog {
  /* SIP_BACKEND_* flags of the backend `name`, or -1 when there is none. */
  int (*flags_of)(const char *name);
  /* Every name, ", "-separated, for error messages. */
  const char *(*names)(void);
  /* The backend whose probe claims the model file `path`, or NULL. */
  const char *(*probe)(const char *path);
  /* The backend of a model directory no file decides (the first backend
   * with default file names), or NULL when there is none. */
  const char *(*default_backend)(void);
  /* "<file> (<backend>), ...": the default file names backends
   * claim, for messages. Static storage. */
  const char *(*formats)(void);
  /* The platform clients see for `name` (its own name when it sets none). */
  const char *(*platform_of)(const char *name);
  /* The option table of `name` (*n entries), or NULL when it publishes none
   * (any key is passed through). */
  const sip_backend_option_t *(*options_of)(const char *name, size_t *n);
  /* The backend's own check of option values (check_options), or NULL. */
  sip_error_t *(*check_options)(const char *name, const sip_kv_t *options, size_t n);
  /* The default file names of `name` (NULL-terminated; never NULL). */
  const char *const *(*files_of)(const char *name);
  /* The name of the i-th backend, or NULL past the end (the reference). */
  const char *(*name_at)(size_t i);
} sip__backend_catalog_t;

#endif
