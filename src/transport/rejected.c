/* sip — the native front-end's INFER_REQUEST frames refused while decoding,
 * told to the server's count of rejected requests (server/introspect.h:
 * sip_requests_rejected_total{protocol="native"}). */
#include <string.h>

#include "server/introspect.h"
#include "transport/listener_impl.h"

void sip__note_rejected_frame(sip__listener_set_t *ls, const uint8_t *payload, size_t len,
                              const sip_error_t *e) {
  /* The pool's name leads the payload (str16): named when it is whole, so
   * that a served model's rejections are counted under it. */
  char pool[256] = "";
  if (len >= 2) {
    size_t n = (size_t)payload[0] | (size_t)payload[1] << 8;
    if (n < sizeof pool && n <= len - 2 && !memchr(payload + 2, 0, n)) {
      memcpy(pool, payload + 2, n);
      pool[n] = '\0';
    }
  }
  sip__server_note_rejected(ls->srv, SIP__PROTOCOL_NATIVE, pool, 1, e);
}
