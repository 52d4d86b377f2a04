/* libFuzzer target for the messages between the server and a worker
 * process (src/session/isolation/worker_proto.c; isolation: process).
 *
 * The first byte picks the reader; the rest is the message. Contracts:
 * a LOAD that parses has every string within the message and at most 64
 * options; a LOADED answer gives descriptions with names, ranks -1..16
 * and valid dtypes, or an error with a message; an EXEC that passes has
 * every input within the region size it names and every index in range;
 * a DONE that passes has its message within the input, or every output
 * within its region. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session/engine.h"
#include "session/isolation/worker_proto.h"

#define CHECK(cond) \
  do {              \
    if (!(cond)) abort(); \
  } while (0)

static int within(const char *p, const char *msg, size_t n) { return p >= msg && p < msg + n; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  /* An owned copy of exactly the message: reads past it are caught. */
  size_t n = size - 1;
  char *msg = malloc(n ? n : 1);
  if (!msg) return 0;
  memcpy(msg, data + 1, n);
  switch (data[0] % 4) {
  case 0: {
    sip__wk_load_args_t a;
    if (sip__wk_parse_load(msg, n, &a) == 0) {
      CHECK(within(a.backend, msg, n) && a.n_opts <= SIP__WK_MAX_OPTIONS);
      CHECK(!a.path || within(a.path, msg, n));
      for (uint32_t i = 0; i < a.n_opts; i++)
        CHECK(within(a.opts[i].key, msg, n) && within(a.opts[i].value, msg, n));
    }
    break;
  }
  case 1: {
    sip_io_desc_t *d;
    size_t n_in, n_out;
    char *why;
    sip_error_t *e = sip__wk_parse_loaded(msg, n, &d, &n_in, &n_out, &why);
    if (e) {
      CHECK(!d && !why && sip_error_message(e));
      sip_error_free(e);
      break;
    }
    for (size_t i = 0; i < n_in + n_out; i++)
      CHECK(d[i].name && d[i].rank >= -1 && d[i].rank <= SIP_MAX_RANK);
    sip__io_descs_free(d, n_in + n_out);
    free(why);
    break;
  }
  case 2:
    if (sip__wk_check_exec(msg, n, 3, 2) == 0) {
      sip__wk_exec_t x;
      memcpy(&x, msg, sizeof x);
      for (int i = 0; i < x.n_in; i++) {
        sip__wk_tensor_t t;
        memcpy(&t, msg + sizeof x + (size_t)i * sizeof t, sizeof t);
        CHECK(t.index >= 0 && t.index < 3 && t.off + t.nbytes <= x.region_size);
      }
      for (int j = 0; j < x.n_out; j++) CHECK(x.out_index[j] >= 0 && x.out_index[j] < 2);
    }
    break;
  default: {
    int32_t code;
    const char *text;
    int len;
    if (sip__wk_check_done(msg, n, 2, &code, &text, &len) == 0 && code) {
      CHECK(code > 0 && code < SIP_CODE_COUNT_ && len >= 0);
      CHECK(!len || (within(text, msg, n) && within(text + len - 1, msg, n)));
    }
    break;
  }
  }
  free(msg);
  return 0;
}
