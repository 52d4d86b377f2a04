/* sip — descriptors of model inputs and outputs as introspection JSON. */
#include <jansson.h>

#include "session/engine.h"

json_t *sip__io_json(const sip_io_desc_t *d, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) {
    json_t *shape = json_array();
    for (int k = 0; k < d[i].rank; k++) json_array_append_new(shape, json_integer(d[i].dims[k]));
    json_array_append_new(a, json_pack("{s:s,s:s,s:o}", "name", d[i].name, "dtype",
                                       sip_dtype_name(d[i].dtype), "shape",
                                       d[i].rank >= 0 ? shape : (json_decref(shape), json_null())));
  }
  return a;
}
