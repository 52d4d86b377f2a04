/* sip — what the image transforms (transform_image.c) share with
 * crop_and_resize (transform_crop.c). */
#ifndef SIP_OPS_TRANSFORM_IMAGE_H
#define SIP_OPS_TRANSFORM_IMAGE_H

#include <stdint.h>

#include "ops/transform_impl.h"

/* Views input `x` as an image through t's layout; with need_pixels, an
 * image under 1x1 pixels is INVALID_ARGUMENT (resampling needs one). */
sip_error_t *sip__tf_image_in(const sip__transform_t *t, const sip_tensor_t *x, sip__tf_img_t *img,
                              int need_pixels);

/* Reads the options scale, mean and std (one value, or one per channel;
 * std never 0) into t. */
sip_error_t *sip__tf_mean_std(sip__transform_t *t, const sip__tf_opts_t *o);

/* mean/std hold one value or one per channel: INVALID_ARGUMENT when an
 * image of c channels does not match them. */
sip_error_t *sip__tf_check_channels(const sip__transform_t *t, int64_t c);

#endif
