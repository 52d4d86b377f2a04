/* sip — a Triton model configuration (config.pbtxt) read as sip's: the
 * text format parsed by libprotobuf (triton_pbtxt.cc), then mapped onto a
 * repository model's config.yaml settings (triton_import.c). Every field
 * sip does not act on is named in a warning; docs/triton.md lists the
 * mapping. */
#ifndef SIP_CONFIG_TRITON_H
#define SIP_CONFIG_TRITON_H

#include <stddef.h>

#include "config/backend_catalog.h"
#include "sip/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses `text` (len bytes) as Triton's ModelConfig in protobuf text
 * format; `source` names it in messages ("models/m/config.pbtxt"). On
 * success *json is the config as JSON (protobuf's mapping, field names as
 * written) and *warnings the parser's "SOURCE:LINE:COL: ..." lines (fields
 * the schema lacks), NULL when none; both owned (sip__free). Errors:
 * INVALID_ARGUMENT with each parse error's line and column. */
sip_error_t *sip__triton_pbtxt_to_json(const char *text, size_t len, const char *source,
                                       char **json, char **warnings);

/* What one model's config.pbtxt amounts to in sip (owned strings). */
typedef struct sip__triton_import {
  char *yaml;     /* the equivalent <model>/config.yaml; "{}\n" when nothing maps */
  char *warnings; /* one line per field sip does not act on ("\n"-separated), or NULL */
  /* The inputs and outputs the config declares, as Triton JSON
   * ({"name", "input", "output"}, dims numeric) for the I/O check after the
   * model loads (sip__model_override_check_io); NULL when it declares none. */
  char *io_json;
  int batched; /* max_batch_size > 0: declared dims leave out the batch dim */
} sip__triton_import_t;

/* Reads config.pbtxt text for the model `model` (its directory's name).
 * Errors: INVALID_ARGUMENT for text that does not parse, a name other than
 * `model`, a platform or backend no backend of `backends` serves, or values
 * sip's config would refuse (each naming the field and what is expected). */
sip_error_t *sip__triton_import(const char *text, size_t len, const char *source,
                                const char *model, const sip__backend_catalog_t *backends,
                                sip__triton_import_t *out);
/* The same for the file at `path` (read with sip__config_read_file; named
 * in messages). Errors also: NOT_FOUND when it cannot be read. */
sip_error_t *sip__triton_import_file(const char *path, const char *model,
                                     const sip__backend_catalog_t *backends,
                                     sip__triton_import_t *out);
void sip__triton_import_clear(sip__triton_import_t *t);

#ifdef __cplusplus
}
#endif
#endif
