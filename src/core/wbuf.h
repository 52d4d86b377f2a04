/* sip — a growable byte buffer for encoding: appends never fail on the
 * spot; running out of memory sets a sticky flag the caller checks once.
 * Integers are written little-endian. */
#ifndef SIP_CORE_WBUF_H
#define SIP_CORE_WBUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct sip__wbuf {
  uint8_t *data;
  size_t len, cap;
  int oom; /* sticky: set when any append failed */
} sip__wbuf_t;
void sip__wbuf_free(sip__wbuf_t *w);
void sip__wbuf_put(sip__wbuf_t *w, const void *p, size_t n);
void sip__wbuf_u8(sip__wbuf_t *w, uint8_t v);
void sip__wbuf_u16(sip__wbuf_t *w, uint16_t v);
void sip__wbuf_u32(sip__wbuf_t *w, uint32_t v);
void sip__wbuf_u64(sip__wbuf_t *w, uint64_t v);
/* Stores the n low bytes of v at p, little-endian. */
void sip__put_le(uint8_t *p, uint64_t v, int n);

#endif
