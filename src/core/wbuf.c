/* sip — the growable encoding buffer (wbuf.h). */
#include "core/wbuf.h"

#include <string.h>

#include "core/core.h"

void sip__put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void sip__wbuf_free(sip__wbuf_t *w) {
  sip__free(w->data);
  memset(w, 0, sizeof *w);
}

static int reserve(sip__wbuf_t *w, size_t n) {
  if (w->oom) return 0;
  if (w->cap - w->len >= n) return 1;
  size_t cap = w->cap ? w->cap : 256;
  while (cap - w->len < n) {
    if (cap > SIZE_MAX / 2) {
      w->oom = 1;
      return 0;
    }
    cap *= 2;
  }
  uint8_t *d = sip__realloc(w->data, cap);
  if (!d) {
    w->oom = 1;
    return 0;
  }
  w->data = d;
  w->cap = cap;
  return 1;
}

void sip__wbuf_put(sip__wbuf_t *w, const void *p, size_t n) {
  if (!n || !reserve(w, n)) return;
  memcpy(w->data + w->len, p, n);
  w->len += n;
}

static void put_int(sip__wbuf_t *w, uint64_t v, int n) {
  if (!reserve(w, (size_t)n)) return;
  sip__put_le(w->data + w->len, v, n);
  w->len += (size_t)n;
}
void sip__wbuf_u8(sip__wbuf_t *w, uint8_t v) { put_int(w, v, 1); }
void sip__wbuf_u16(sip__wbuf_t *w, uint16_t v) { put_int(w, v, 2); }
void sip__wbuf_u32(sip__wbuf_t *w, uint32_t v) { put_int(w, v, 4); }
void sip__wbuf_u64(sip__wbuf_t *w, uint64_t v) { put_int(w, v, 8); }
