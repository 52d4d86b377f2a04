/* sip — what the config parser knows of backends: the backend table's
 * names and capability flags, handed to it by the layer that owns the table
 * (src/backend/backends.c), so that config calls nothing above it. */
#ifndef SIP_CONFIG_BACKEND_CATALOG_H
#define SIP_CONFIG_BACKEND_CATALOG_H

typedef struct sip__backend_catalog {
  /* SIP_BACKEND_* flags of the backend `name`, or -1 when there is none. */
  int (*flags_of)(const char *name);
  /* Every name, ", "-separated, for error messages. */
  const char *(*names)(void);
} sip__backend_catalog_t;

#endif
