/* sip — descriptors of model inputs and outputs as introspection JSON. */
#include <jansson.h>

#include "core/core.h"
#include "session/engine.h"

sip_io_desc_t *sip__io_descs_copy(const sip_io_desc_t *d, size_t n) {
  sip_io_desc_t *c = sip__calloc(n ? n : 1, sizeof *c);
  for (size_t i = 0; c && i < n; i++) {
    c[i] = d[i];
    if (!(c[i].name = sip__strdup(d[i].name))) {
      sip__io_descs_free(c, i);
      return NULL;
    }
  }
  return c;
}

void sip__io_descs_free(sip_io_desc_t *d, size_t n) {
  for (size_t i = 0; d && i < n; i++) sip__free(d[i].name);
  sip__free(d);
}

json_t *sip__io_json(const sip_io_desc_t *d, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) {
    if (d[i].dtype == SIP_DTYPE_INVALID && d[i].rank < 0) { /* nothing known but the name */
      json_array_append_new(a, json_pack("{s:s,s:n,s:n}", "name", d[i].name, "dtype", "shape"));
      continue;
    }
    json_t *shape = json_array();
    for (int k = 0; k < d[i].rank; k++) json_array_append_new(shape, json_integer(d[i].dims[k]));
    json_array_append_new(a, json_pack("{s:s,s:s,s:o}", "name", d[i].name, "dtype",
                                       sip_dtype_name(d[i].dtype), "shape",
                                       d[i].rank >= 0 ? shape : (json_decref(shape), json_null())));
  }
  return a;
}
