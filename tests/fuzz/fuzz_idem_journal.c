/* libFuzzer target for the idempotency journal's reader
 * (src/server/state/idem_journal.c). The first byte picks the input's form: even,
 * the rest is a whole file image as found on disk; odd, the rest is one
 * record's payload, given the magic, its length and a matching CRC so that
 * the payload decoder itself is reached. Beyond "no crash, no leak" it
 * checks the contract: the reader never reports more bytes than it was
 * given and stops with a reason exactly when it did not reach the end;
 * every record it returns encodes again into a record that reads back the
 * same (model, key, expiry, code, message, outputs byte for byte). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/core.h"
#include "server/state/idem_journal.h"
#include "session/engine.h"
#include "sip/sip.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

typedef struct seen {
  char *model, *key;
  uint64_t expires;
  sip_response_t *resp;
  int n;
} seen_t;

static void same_response(const sip_response_t *a, const sip_response_t *b) {
  CHECK(a->code == b->code && !strcmp(a->message, b->message) && a->n_outputs == b->n_outputs);
  for (size_t i = 0; i < a->n_outputs; i++) {
    const sip_tensor_t *x = a->outputs[i], *y = b->outputs[i];
    CHECK(!strcmp(x->name, y->name) && x->dtype == y->dtype && x->rank == y->rank &&
          x->nbytes == y->nbytes);
    CHECK(!memcmp(x->dims, y->dims, (size_t)x->rank * sizeof x->dims[0]));
    CHECK(!x->nbytes || !memcmp(x->data, y->data, x->nbytes));
  }
}

static void again(void *ctx, const char *model, const char *key, uint64_t expires,
                  sip_response_t *resp) {
  seen_t *s = ctx;
  CHECK(!strcmp(model, s->model) && !strcmp(key, s->key) && expires == s->expires);
  same_response(resp, s->resp);
  s->n++;
  sip_response_free(resp);
}

static void each(void *ctx, const char *model, const char *key, uint64_t expires,
                 sip_response_t *resp) {
  (void)ctx;
  uint8_t *rec = NULL;
  size_t len = 0;
  sip_error_t *e = sip__journal_encode(model, key, expires, resp, &rec, &len);
  if (!e) {
    uint8_t *file = malloc(8 + len);
    CHECK(file);
    memcpy(file, SIP__JOURNAL_MAGIC, 8);
    memcpy(file + 8, rec, len);
    seen_t s = {(char *)model, (char *)key, expires, resp, 0};
    const char *why = NULL;
    CHECK(sip__journal_read(file, 8 + len, again, &s, &why) == 8 + len && !why && s.n == 1);
    free(file);
  }
  sip_error_free(e);
  sip__free(rec);
  sip_response_free(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  const uint8_t *buf = data + 1;
  size_t len = size - 1;
  uint8_t *img = NULL;
  if (data[0] & 1) { /* one payload, framed */
    img = malloc(16 + len);
    CHECK(img);
    uint32_t plen = (uint32_t)len, crc = (uint32_t)crc32(0, buf, plen);
    memcpy(img, SIP__JOURNAL_MAGIC, 8);
    memcpy(img + 8, &plen, 4);
    memcpy(img + 12, &crc, 4);
    if (len) memcpy(img + 16, buf, len);
    buf = img;
    len += 16;
  }
  const char *why = NULL;
  size_t used = sip__journal_read(buf, len, each, NULL, &why);
  CHECK(used <= len);
  CHECK((used == len) == !why || (used == 0 && why));
  free(img);
  return 0;
}
