/* libFuzzer target for decode_image (src/ops/transform_decode.c): the
 * PNG/JPEG bytes a client sends, through libpng and libjpeg-turbo.
 *
 * The input's length picks the mode (rgb, bgr, gray) so every conversion
 * path sees fuzzed data. Beyond "no crash, no leak, no hang", it checks the
 * contract: a failure is INVALID_ARGUMENT or RESOURCE_EXHAUSTED with a
 * message; a success is a uint8 [H,W,C] image with C = 3 (1 for gray),
 * 1 <= H, W <= 16384, holding exactly H*W*C bytes, and `size` = [H, W].
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/transforms.h"

#define CHECK(cond)       \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

static sip__transform_t *tf[3];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const modes[] = {"rgb", "bgr", "gray"};
  int m = (int)(size % 3);
  if (!tf[m]) {
    sip_kv_t kv = {"mode", modes[m]};
    sip_error_t *e = sip__transform_new("decode_image", &kv, 1, &tf[m]);
    CHECK(!e);
  }
  int64_t dim = (int64_t)size;
  sip_tensor_t *in = sip_tensor_new_view("data", SIP_DTYPE_UINT8, 1, &dim, data, size, NULL);
  CHECK(in);
  const sip_tensor_t *ins[1] = {in};
  sip_tensor_t **outs = NULL;
  size_t n = 0;
  sip_error_t *e = sip__transform_run(tf[m], ins, 1, &outs, &n);
  if (e) {
    CHECK(!outs && !n);
    CHECK(sip_error_code(e) == SIP_INVALID_ARGUMENT || sip_error_code(e) == SIP_RESOURCE_EXHAUSTED);
    CHECK(sip_error_message(e) && sip_error_message(e)[0]);
    sip_error_free(e);
  } else {
    CHECK(n == 2);
    const sip_tensor_t *img = outs[0], *hw = outs[1];
    CHECK(img->dtype == SIP_DTYPE_UINT8 && img->rank == 3);
    CHECK(img->dims[2] == (m == 2 ? 1 : 3));
    CHECK(img->dims[0] >= 1 && img->dims[0] <= 16384 && img->dims[1] >= 1 && img->dims[1] <= 16384);
    CHECK(img->nbytes == (size_t)(img->dims[0] * img->dims[1] * img->dims[2]));
    CHECK(hw->dtype == SIP_DTYPE_INT64 && hw->rank == 1 && hw->dims[0] == 2);
    const int64_t *v = hw->data;
    CHECK(v[0] == img->dims[0] && v[1] == img->dims[1]);
    /* Every byte was written (MSan/ASan see reads of the whole image). */
    uint64_t sum = 0;
    const uint8_t *p = img->data;
    for (size_t i = 0; i < img->nbytes; i++) sum += p[i];
    CHECK(sum <= (uint64_t)img->nbytes * 255u);
    sip__transform_outputs_free(outs, n);
  }
  sip_tensor_free(in);
  return 0;
}
