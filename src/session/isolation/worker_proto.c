/* sip — reading the messages between the server and a worker
 * (worker_proto.h). Every length and offset is checked against the
 * message and the region before it is used: a worker that misbehaves may
 * fail its executions, never the server. */
#include <string.h>

#include "core/core.h"
#include "session/engine.h"
#include "session/isolation/worker_proto.h"

static int dtype_ok(int32_t dt) {
  return strcmp(sip_dtype_name((sip_dtype_t)dt), "invalid") != 0;
}

/* Next NUL-terminated string of a message, or NULL past its end. */
static const char *next_str(const char **at, const char *end) {
  const char *s = *at, *z = s < end ? memchr(s, '\0', (size_t)(end - s)) : NULL;
  if (!z) return NULL;
  *at = z + 1;
  return s;
}

int sip__wk_parse_load(const char *msg, size_t n, sip__wk_load_args_t *a) {
  sip__wk_load_t h;
  if (n < sizeof h) return -1;
  memcpy(&h, msg, sizeof h);
  if (h.op != SIP__WK_LOAD || h.n_options > SIP__WK_MAX_OPTIONS || h.spin_us < 0 ||
      h.spin_us > 1000)
    return -1;
  const char *at = msg + sizeof h, *end = msg + n;
  a->backend = next_str(&at, end);
  a->path = a->backend ? next_str(&at, end) : NULL;
  if (!a->path) return -1;
  if (!a->path[0]) a->path = NULL;
  for (uint32_t i = 0; i < h.n_options; i++) {
    a->opts[i].key = next_str(&at, end);
    a->opts[i].value = a->opts[i].key ? next_str(&at, end) : NULL;
    if (!a->opts[i].value) return -1;
  }
  a->n_opts = h.n_options;
  a->warm = h.warm != 0;
  a->spin_us = h.spin_us;
  a->settings = (sip_engine_settings_t){h.intra_op_threads, h.inter_op_threads, h.allow_spinning};
  return 0;
}

sip_error_t *sip__wk_parse_loaded(const char *msg, size_t n, sip_io_desc_t **descs,
                                  size_t *n_in, size_t *n_out, char **why) {
  sip__wk_loaded_t l;
  *descs = NULL;
  *why = NULL;
  *n_in = *n_out = 0;
  uint32_t op = 0;
  if (n >= sizeof op) memcpy(&op, msg, sizeof op);
  if (n >= sizeof(sip__wk_error_t) && op == SIP__WK_ERROR) {
    sip__wk_error_t h;
    memcpy(&h, msg, sizeof h);
    const char *text = msg + sizeof h;
    size_t len = n - sizeof h;
    const char *z = memchr(text, '\0', len);
    if (z) len = (size_t)(z - text);
    return sip_error_new(h.code > 0 && h.code < SIP_CODE_COUNT_ ? (sip_code_t)h.code
                                                                 : SIP_INTERNAL,
                         "%.*s", (int)len, text);
  }
  if (n < sizeof l) return sip_error_new(SIP_INTERNAL, "a malformed load answer from the worker");
  memcpy(&l, msg, sizeof l);
  if (l.op != SIP__WK_LOADED || l.n_in > SIP__WK_MAX_IO * 4 || l.n_out > SIP__WK_MAX_IO * 4)
    return sip_error_new(SIP_INTERNAL, "a malformed load answer from the worker");
  size_t at = sizeof l, total = (size_t)l.n_in + l.n_out;
  sip_io_desc_t *d = sip__calloc(total ? total : 1, sizeof *d);
  if (!d) return SIP__OOM();
  for (size_t i = 0; i < total; i++) {
    sip__wk_desc_t x;
    if (at + sizeof x > n) goto bad;
    memcpy(&x, msg + at, sizeof x);
    const char *name = msg + at + sizeof x;
    if (!x.name_len || x.name_len > n - at - sizeof x || !memchr(name, '\0', x.name_len) ||
        x.rank < -1 || x.rank > SIP_MAX_RANK || !dtype_ok(x.dtype))
      goto bad;
    d[i].dtype = (sip_dtype_t)x.dtype;
    d[i].rank = x.rank;
    memcpy(d[i].dims, x.dims, sizeof d[i].dims);
    if (!(d[i].name = sip__strdup(name))) {
      sip__io_descs_free(d, total);
      return SIP__OOM();
    }
    at += sizeof x + x.name_len;
  }
  if (at < n && msg[at]) {
    const char *z = memchr(msg + at, '\0', n - at);
    if (!z) goto bad;
    if (!(*why = sip__strdup(msg + at))) {
      sip__io_descs_free(d, total);
      return SIP__OOM();
    }
  }
  *descs = d;
  *n_in = l.n_in;
  *n_out = l.n_out;
  return NULL;
bad:
  sip__io_descs_free(d, total);
  return sip_error_new(SIP_INTERNAL, "the worker described the model malformed");
}

int sip__wk_check_exec(const char *msg, size_t n, size_t n_ins, size_t n_outs) {
  sip__wk_exec_t x;
  if (n < sizeof x) return -1;
  memcpy(&x, msg, sizeof x);
  if (x.op != SIP__WK_EXEC || x.region < 0 || x.region >= SIP__WK_MAX_REGIONS || x.n_in < 0 ||
      x.n_in > SIP__WK_MAX_IO || x.n_out < 0 || x.n_out > SIP__WK_MAX_IO ||
      n != sizeof x + (size_t)x.n_in * sizeof(sip__wk_tensor_t) || x.out_at > x.region_size)
    return -1;
  for (int j = 0; j < x.n_out; j++)
    if (x.out_index[j] < 0 || (size_t)x.out_index[j] >= n_outs) return -1;
  for (int i = 0; i < x.n_in; i++) {
    sip__wk_tensor_t t;
    memcpy(&t, msg + sizeof x + (size_t)i * sizeof t, sizeof t);
    if (t.index < 0 || (size_t)t.index >= n_ins || t.rank < 0 || t.rank > SIP_MAX_RANK ||
        t.off > x.region_size || t.nbytes > x.region_size - t.off ||
        !dtype_ok(t.dtype))
      return -1;
  }
  return 0;
}

int sip__wk_check_done(const char *msg, size_t n, size_t n_outputs, int32_t *code,
                       const char **text, int *text_len) {
  sip__wk_done_t d;
  *code = 0;
  *text = "";
  *text_len = 0;
  if (n < sizeof d) return -1;
  memcpy(&d, msg, sizeof d);
  if (d.op != SIP__WK_DONE) return -1;
  if (d.code) {
    *code = d.code > 0 && d.code < SIP_CODE_COUNT_ ? d.code : SIP_INTERNAL;
    *text = msg + sizeof d;
    *text_len = d.msg_len > 0 && (size_t)d.msg_len <= n - sizeof d ? d.msg_len - 1 : 0;
    const char *z = memchr(*text, '\0', (size_t)*text_len);
    if (z) *text_len = (int)(z - *text);
    return 0;
  }
  if (d.n_out < 0 || (size_t)d.n_out != n_outputs ||
      n < sizeof d + n_outputs * sizeof(sip__wk_tensor_t))
    return -1;
  for (size_t j = 0; j < n_outputs; j++) {
    sip__wk_tensor_t t;
    memcpy(&t, msg + sizeof d + j * sizeof t, sizeof t);
    if (t.rank < 0 || t.rank > SIP_MAX_RANK || t.off > d.region_size ||
        t.nbytes > d.region_size - t.off || !dtype_ok(t.dtype))
      return -1;
  }
  return 0;
}
