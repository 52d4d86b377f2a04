/* sip — transform operations: the pre/post-processing steps of pipelines
 * (image resizing and cropping, normalisation, NMS, CTC decoding, PP-OCR DB
 * text-box extraction), as pure C functions over sip_tensor_t.
 *
 * One uniform interface so a pipeline can drive any of them from config:
 *
 *   sip__transform_new("resize", opts, n, &t)   parse + validate options
 *   sip__transform_describe(t, ...)              named inputs/outputs
 *   sip__transform_run(t, inputs, n, &outs, &n_outs)
 *   sip__transform_free(t)
 *
 * A transform is immutable after sip__transform_new: any number of threads
 * may run it at once (it is shared by every session of a `transform` pool
 * and by every request of a pipeline). Inputs come from clients, so every
 * shape, dtype and size is checked; overflow and hostile shapes give
 * INVALID_ARGUMENT (or RESOURCE_EXHAUSTED), never a crash.
 *
 * Operations (full reference with formulas: docs/transforms.md). Image
 * layouts are given by the `layout` option: hwc, nhwc, chw or nchw; image
 * dtypes by `dtype`: uint8 or float32 (default uint8 for hwc/nhwc, float32
 * for chw/nchw). "f32" = float32, "i64" = int64, "img" = the image layout.
 *
 * op                 inputs                      outputs                               options (default)
 * ------------------ --------------------------- ------------------------------------- ----------------------------------------
 * decode_image       data u8[N] (PNG/JPEG bytes) image u8 [H,W,3] ([H,W,1] gray),       mode rgb|bgr|gray (rgb), dtype uint8|string
 *                                                size i64[2] (H,W)                     (transform_decode.c)
 * resize             image img                   output img                            size "H,W", or limit_side_len and/or
 *                                                                                      multiple_of (PP-OCR det); layout (hwc), dtype
 * letterbox          image img                   output img, scale f32[1],             size "H,W" (required), pad_value (114),
 *                                                offset f32[2] (top,left)              layout (hwc), dtype
 * normalize          input img                   output f32 (same shape)               mean (0), std (1), scale (1; "1/255" ok),
 *                                                                                      layout (nchw), dtype (float32)
 * color_convert      image img (C >= 3)          output img (C = 1 for gray)           mode bgr2rgb|rgb2bgr|rgb2gray|bgr2gray
 *                                                                                      (required), layout (hwc), dtype
 * to_tensor          image [H,W,C] or [N,H,W,C]  output f32 [N,C,H,W]                  scale (1), dtype (uint8)
 * rotate180          image img [, flags]         output img                            layout (nchw), dtype, flags (none | a
 *                    [, widths i64[N]]                                                 dtype: adds input `flags`), flag_index (0),
 *                                                                                      flag_threshold (0), widths (false: adds
 *                                                                                      input `widths`, valid width per image)
 * cast               input (any shape)           output                                to (required), from (float32)
 * softmax            input f32 (rank >= 1)       output f32                            axis (-1)
 * topk               input f32 (rank >= 1)       values f32, indices i64               k (1), axis (-1),
 *                                                [, labels string]                   labels_file
 * nms                boxes f32[N,4], scores f32[N] indices i64[K], boxes f32[K,4],     iou_threshold (0.5), score_threshold
 *                                                scores f32[K]                         (none), max_output (0: all)
 * crop_and_resize    image img (one image),      output f32 [N,C,H,W], widths i64[N]   target_size "H,W" | height (+ max_width
 *                    boxes f32 [N,4] or [N,4,2]                                        2048, min_width 0, rotate_tall false),
 *                                                                                      layout (hwc), dtype, scale/mean/std,
 *                                                                                      pad_value (0)
 * ctc_greedy_decode  probs f32 [N,T,C]           text string[N], scores f32[N]         labels_file (required),
 *                                                                                      use_space_char (true)
 * db_postprocess     probs f32 [1,1,H,W]         boxes f32 [K,4,2], scores f32[K]      thresh (0.3), box_thresh (0.6),
 *                    [, src_size i64[2] (H,W)]                                         unclip_ratio (1.5), min_size (3),
 *                                                                                      max_candidates (1000), src_size "H,W"
 *                                                                                      (absent: the input `src_size` is needed)
 */
#ifndef SIP_PIPELINE_TRANSFORMS_H
#define SIP_PIPELINE_TRANSFORMS_H

#include <stddef.h>

#include "sip/backend.h"
#include "sip/error.h"
#include "sip/tensor.h"

typedef struct sip__transform sip__transform_t;

/* Creates a transform of operation `op` with options `opts` (key/value
 * strings as written in config; values may be lists written "a,b" or
 * "[a, b]"). Options are borrowed; the transform keeps copies of what it
 * needs (a ctc labels file is read here, once). Unknown operations, unknown
 * or repeated options and bad values give an owned INVALID_ARGUMENT error
 * naming the operation, the option and what is expected; NOT_FOUND when a
 * file cannot be read. On success *out is owned by the caller. */
sip_error_t *sip__transform_new(const char *op, const sip_kv_t *opts, size_t n_opts,
                                sip__transform_t **out);

/* Frees a transform; NULL is a no-op. Not while a run is in progress. */
void sip__transform_free(sip__transform_t *t);

/* The operation's name ("resize"). Static storage. */
const char *sip__transform_op(const sip__transform_t *t);
/* NULL when dim 0 of the transform's inputs holds independent items, each
 * making one row of every output, so requests may be batched along it;
 * otherwise why not (for a message). */
const char *sip__transform_batch_problem(const sip__transform_t *t);

/* "resize, letterbox, ..." (static storage), for error messages. */
const char *sip__transform_op_names(void);

/* The inputs and outputs of this transform as configured (names, dtypes and
 * ranks; -1 marks a dynamic dim, rank -1 any rank). Arrays are owned by the
 * transform and valid until sip__transform_free. */
void sip__transform_describe(const sip__transform_t *t, const sip_io_desc_t **inputs,
                             size_t *n_inputs, const sip_io_desc_t **outputs,
                             size_t *n_outputs);

/* Runs the transform. `inputs` (borrowed) are matched to the described
 * inputs by tensor name; a tensor whose name is NULL or "" takes the
 * described input at its own position. Every described input is required
 * and no other is accepted. On success *outputs is a new array (free with
 * sip__transform_outputs_free) of *n_outputs owned tensors, one per
 * described output, in describe() order. On failure returns an owned error
 * (INVALID_ARGUMENT for bad inputs, RESOURCE_EXHAUSTED when out of memory or
 * an output would exceed SIP__TRANSFORM_MAX_BYTES) and leaves *outputs NULL.
 * Thread-safe. */
sip_error_t *sip__transform_run(const sip__transform_t *t, const sip_tensor_t *const *inputs,
                                size_t n_inputs, sip_tensor_t ***outputs, size_t *n_outputs);

/* Frees an output array from sip__transform_run and its tensors. */
void sip__transform_outputs_free(sip_tensor_t **outputs, size_t n);

/* Largest output tensor (bytes) one run may produce: a bound on what a
 * client's shapes can make the server allocate. */
#define SIP__TRANSFORM_MAX_BYTES ((size_t)1 << 30)

#endif
