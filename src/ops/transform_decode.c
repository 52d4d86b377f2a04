/* sip — decode_image: PNG or JPEG bytes from a client to a uint8 HWC image.
 *
 * The bytes come straight from the network, so this is a parser of hostile
 * input: both libraries report fatal errors by longjmp (libjpeg through
 * error_exit, libpng through its error callback), sizes are checked from
 * the headers before any pixel memory is allocated, and libjpeg-turbo's
 * known CPU sink (a progressive file with thousands of scans) is cut off by
 * a progress monitor. Channel handling follows OpenCV's imread, because the
 * models these pipelines feed (PaddleOCR's) were trained on cv2.imread
 * images: alpha is dropped, not composited; 16-bit PNG samples keep their
 * high byte; CMYK JPEGs are converted the way OpenCV does.
 *
 * Every state change a longjmp must see lives in a heap context reached
 * through one pointer that never changes after setjmp (locals would be
 * "clobbered" and -Wextra warns about them). */
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE and size_t */
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "core/core.h"
#include "ops/transform_impl.h"

/* Limits on what a client's bytes may make us decode: per side, and the
 * decoded image (3 channels). */
#define DEC_MAX_SIDE 16384
#define DEC_MAX_BYTES ((uint64_t)256 << 20)
/* libjpeg-turbo's own fuzzers stop progressive files at 500 scans: a
 * legitimate file has about 10, a hostile one can force a full-image pass
 * per scan. */
#define DEC_MAX_SCANS 500
/* Working memory libjpeg may take (whole-image coefficient buffers of
 * progressive files); beyond it decoding fails instead of growing. */
#define DEC_JPEG_MEM ((long)768 << 20)

enum { M_RGB, M_BGR, M_GRAY };
static const char *const mode_names[] = {"rgb", "bgr", "gray", NULL};
static const char *const decode_opts[] = {"mode", "dtype", NULL};

static sip_error_t *decode_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  t->mode = M_RGB;
  /* The bytes arrive as uint8 [N] (numpy's frombuffer, `sip infer -i
   * x:uint8:N=@file`) or as a STRING tensor of one element (KServe BYTES). */
  static const char *const dtypes[] = {"uint8", "string", NULL};
  int dt = 0;
  if ((e = sip__tf_opt_enum(o, "mode", mode_names, &t->mode)) ||
      (e = sip__tf_opt_enum(o, "dtype", dtypes, &dt)))
    return e;
  t->dtype = dt ? SIP_DTYPE_STRING : SIP_DTYPE_UINT8;
  t->n_in = 1;
  t->n_out = 2;
  sip__tf_io(&t->in[0], "data", t->dtype, dt ? -1 : 1);
  sip__tf_io(&t->out[0], "image", SIP_DTYPE_UINT8, 3);
  t->out[0].dims[2] = t->mode == M_GRAY ? 1 : 3;
  sip__tf_io(&t->out[1], "size", SIP_DTYPE_INT64, 1);
  t->out[1].dims[0] = 2;
  return NULL;
}

typedef struct dec {
  const uint8_t *src;
  size_t len, pos;
  int mode;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX > 256 ? JMSG_LENGTH_MAX : 256];
  sip_error_t *err; /* set before a longjmp that is not a library error */
  int oom;          /* an allocation of libpng's failed */
  sip_tensor_t *out;
  uint8_t *pix;
  int64_t h, w;
  uint8_t **rows; /* libpng row pointers */
  uint8_t *line;  /* one source line when a conversion follows */
  png_structp png;
  png_infop info;
} dec_t;

/* Checks the header's dimensions before anything is allocated for them. */
static sip_error_t *check_size(const char *fmt, uint64_t w, uint64_t h) {
  if (!w || !h || w > DEC_MAX_SIDE || h > DEC_MAX_SIDE)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform decode_image: the %s image is %llux%llu pixels; expected "
                         "1..%d per side",
                         fmt, (unsigned long long)w, (unsigned long long)h, DEC_MAX_SIDE);
  if (w * h * 3 > DEC_MAX_BYTES)
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform decode_image: the %s image is %llux%llu pixels (%llu MiB "
                         "decoded); at most %llu MiB are accepted",
                         fmt, (unsigned long long)w, (unsigned long long)h,
                         (unsigned long long)((w * h * 3) >> 20),
                         (unsigned long long)(DEC_MAX_BYTES >> 20));
  return NULL;
}

static sip_error_t *alloc_image(const sip__transform_t *t, dec_t *d) {
  int64_t dims[3] = {d->h, d->w, d->mode == M_GRAY ? 1 : 3};
  return sip__tf_alloc(t->out[0].name, SIP_DTYPE_UINT8, 3, dims, &d->out, (void **)&d->pix);
}

/* OpenCV's 8-bit RGB to gray (14-bit fixed-point weights), so a gray image
 * matches cv2.imread(..., IMREAD_GRAYSCALE) of a color PNG and color_convert. */
static void rgb_to_gray(const uint8_t *rgb, uint8_t *g, int64_t w) {
  for (int64_t x = 0; x < w; x++, rgb += 3)
    g[x] = (uint8_t)((rgb[0] * 4899u + rgb[1] * 9617u + rgb[2] * 1868u + 8192u) >> 14);
}

/* ---- JPEG ---- */

typedef struct jerr {
  struct jpeg_error_mgr pub;
  dec_t *d;
} jerr_t;

static void jpeg_fail(j_common_ptr c) {
  jerr_t *je = (jerr_t *)c->err;
  c->err->format_message(c, je->d->msg);
  longjmp(je->d->jb, 1);
}

/* Warnings (a truncated file, bad Huffman data) are not printed to the
 * server's stderr: libjpeg recovers from them as OpenCV does. */
static void jpeg_quiet(j_common_ptr c, int level) {
  (void)c;
  (void)level;
}

static void jpeg_progress(j_common_ptr c) {
  j_decompress_ptr di = (j_decompress_ptr)c;
  if (di->progressive_mode && di->input_scan_number > DEC_MAX_SCANS) {
    jerr_t *je = (jerr_t *)c->err;
    snprintf(je->d->msg, sizeof je->d->msg,
             "more than %d progressive scans (a legitimate file has about ten)", DEC_MAX_SCANS);
    longjmp(je->d->jb, 1);
  }
}

static sip_error_t *decode_jpeg(const sip__transform_t *t, dec_t *d) {
  struct jpeg_decompress_struct *ci = sip__calloc(1, sizeof *ci);
  jerr_t *je = sip__calloc(1, sizeof *je);
  struct jpeg_progress_mgr *pm = sip__calloc(1, sizeof *pm);
  sip_error_t *e = NULL;
  if (!ci || !je || !pm) {
    sip__free(ci);
    sip__free(je);
    sip__free(pm);
    return SIP__OOM();
  }
  ci->err = jpeg_std_error(&je->pub);
  je->pub.error_exit = jpeg_fail;
  je->pub.emit_message = jpeg_quiet;
  je->d = d;
  pm->progress_monitor = jpeg_progress;
  if (setjmp(d->jb)) {
    e = d->err ? d->err
               : sip_error_new(SIP_INVALID_ARGUMENT, "transform decode_image: corrupt JPEG: %s",
                               d->msg);
    d->err = NULL;
    goto done;
  }
  jpeg_create_decompress(ci);
  ci->progress = pm;
  ci->mem->max_memory_to_use = DEC_JPEG_MEM;
  jpeg_mem_src(ci, d->src, (unsigned long)d->len);
  jpeg_read_header(ci, TRUE);
  if ((d->err = check_size("JPEG", ci->image_width, ci->image_height))) longjmp(d->jb, 1);
  int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
  if (cmyk)
    ci->out_color_space = JCS_CMYK; /* libjpeg has no CMYK -> RGB: done below */
  else if (d->mode == M_GRAY)
    ci->out_color_space = JCS_GRAYSCALE; /* the luma plane, as OpenCV reads it */
  else
    ci->out_color_space = d->mode == M_BGR ? JCS_EXT_BGR : JCS_RGB;
  jpeg_start_decompress(ci);
  d->h = ci->output_height;
  d->w = ci->output_width;
  if ((d->err = alloc_image(t, d))) longjmp(d->jb, 1);
  int oc = d->mode == M_GRAY ? 1 : 3;
  if (cmyk && !(d->line = sip__malloc((size_t)d->w * 4 + (size_t)d->w * 3))) {
    d->err = SIP__OOM();
    longjmp(d->jb, 1);
  }
  while (ci->output_scanline < ci->output_height) {
    int64_t y = ci->output_scanline;
    uint8_t *dst = d->pix + y * d->w * oc;
    JSAMPROW row = cmyk ? d->line : dst;
    if (jpeg_read_scanlines(ci, &row, 1) != 1) break;
    if (!cmyk) continue;
    /* Adobe CMYK is stored inverted; OpenCV's conversion (k scales each
     * ink) gives the same pixels as cv2.imread. */
    uint8_t *rgb = d->mode == M_GRAY ? d->line + d->w * 4 : dst;
    for (int64_t x = 0; x < d->w; x++) {
      const uint8_t *p = d->line + x * 4;
      unsigned k = p[3];
      uint8_t r = (uint8_t)(k - ((255u - p[0]) * k >> 8));
      uint8_t g = (uint8_t)(k - ((255u - p[1]) * k >> 8));
      uint8_t b = (uint8_t)(k - ((255u - p[2]) * k >> 8));
      uint8_t *q = rgb + x * 3;
      q[0] = d->mode == M_BGR ? b : r;
      q[1] = g;
      q[2] = d->mode == M_BGR ? r : b;
    }
    if (d->mode == M_GRAY) rgb_to_gray(rgb, dst, d->w);
  }
  /* A short file leaves the rest gray (libjpeg inserted an EOI): accepted,
   * like OpenCV and PIL. What follows the last scanline is not read. */
done:
  jpeg_destroy_decompress(ci);
  sip__free(ci);
  sip__free(je);
  sip__free(pm);
  return e;
}

/* ---- PNG ---- */

static void png_fail(png_structp p, png_const_charp msg) {
  dec_t *d = png_get_error_ptr(p);
  snprintf(d->msg, sizeof d->msg, "%s", msg);
  longjmp(d->jb, 1);
}

static void png_quiet(png_structp p, png_const_charp msg) {
  (void)p;
  (void)msg;
}

static void png_read(png_structp p, png_bytep out, size_t n) {
  dec_t *d = png_get_io_ptr(p);
  if (n > d->len - d->pos) png_error(p, "the data ends early (truncated file)");
  memcpy(out, d->src + d->pos, n);
  d->pos += n;
}

/* libpng's allocations go through sip__malloc (failure injection, and one
 * allocator for everything the server holds). */
static png_voidp png_alloc(png_structp p, png_alloc_size_t n) {
  png_voidp v = sip__malloc(n);
  dec_t *d = png_get_mem_ptr(p);
  if (!v && d) d->oom = 1; /* libpng then fails with its own message */
  return v;
}

static void png_dealloc(png_structp p, png_voidp v) {
  (void)p;
  sip__free(v);
}

static sip_error_t *decode_png(const sip__transform_t *t, dec_t *d) {
  d->png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, d, png_fail, png_quiet, d,
                                    png_alloc, png_dealloc);
  if (!d->png) return SIP__OOM();
  sip_error_t *e = NULL;
  if (setjmp(d->jb)) {
    e = d->err  ? d->err
        : d->oom ? SIP__OOM()
                 : sip_error_new(SIP_INVALID_ARGUMENT, "transform decode_image: corrupt PNG: %s",
                                 d->msg);
    d->err = NULL;
    goto done;
  }
  if (!(d->info = png_create_info_struct(d->png))) png_error(d->png, "out of memory");
  png_set_read_fn(d->png, d, png_read);
  /* Ancillary chunks (text, ICC profiles) are not needed for pixels; bound
   * what one may make libpng allocate or decompress. */
  png_set_chunk_malloc_max(d->png, (png_alloc_size_t)8 << 20);
  png_set_chunk_cache_max(d->png, 128);
  png_read_info(d->png, d->info);
  png_uint_32 w = png_get_image_width(d->png, d->info), h = png_get_image_height(d->png, d->info);
  if ((d->err = check_size("PNG", w, h))) longjmp(d->jb, 1);
  int ct = png_get_color_type(d->png, d->info);
  /* To 8-bit gray or RGB, alpha dropped, as cv2.imread does. */
  png_set_expand(d->png);
  png_set_strip_16(d->png);
  png_set_strip_alpha(d->png);
  int gray_src = !(ct & PNG_COLOR_MASK_COLOR) && !png_get_valid(d->png, d->info, PNG_INFO_PLTE);
  int oc = d->mode == M_GRAY ? 1 : 3;
  int convert = d->mode == M_GRAY && !gray_src; /* RGB rows, reduced to gray here */
  if (d->mode != M_GRAY) {
    png_set_gray_to_rgb(d->png);
    if (d->mode == M_BGR) png_set_bgr(d->png);
  }
  int passes = png_set_interlace_handling(d->png);
  png_read_update_info(d->png, d->info);
  size_t rb = png_get_rowbytes(d->png, d->info);
  d->h = h;
  d->w = w;
  if (rb != (size_t)w * (size_t)(convert ? 3 : oc))
    png_error(d->png, "unexpected row layout after conversion");
  if ((d->err = alloc_image(t, d))) longjmp(d->jb, 1);
  if (!convert) {
    if (!(d->rows = sip__calloc((size_t)h, sizeof *d->rows))) {
      d->err = SIP__OOM();
      longjmp(d->jb, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) d->rows[y] = d->pix + (size_t)y * rb;
    png_read_image(d->png, d->rows);
  } else {
    /* Gray from a color file: whole RGB image first when interlaced (every
     * pass revisits rows), else one row at a time. */
    size_t keep = passes > 1 ? (size_t)h : 1;
    if (!(d->line = sip__malloc(keep * rb))) {
      d->err = SIP__OOM();
      longjmp(d->jb, 1);
    }
    for (int pass = 0; pass < passes; pass++)
      for (png_uint_32 y = 0; y < h; y++) {
        uint8_t *row = d->line + (keep > 1 ? y * rb : 0);
        png_read_row(d->png, row, NULL);
        if (pass == passes - 1) rgb_to_gray(row, d->pix + (size_t)y * w, w);
      }
  }
done:
  png_destroy_read_struct(&d->png, d->info ? &d->info : NULL, NULL);
  return e;
}

/* ---- run ---- */

static void hex_prefix(char *buf, size_t n, const uint8_t *p, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < len && i < 8 && off < n; i++)
    off += (size_t)snprintf(buf + off, n - off, "%s%02X", i ? " " : "", p[i]);
}

static sip_error_t *decode_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                               sip_tensor_t **out) {
  const sip_tensor_t *x = in[0];
  const uint8_t *p = x->data;
  size_t len = x->nbytes;
  if (x->dtype == SIP_DTYPE_STRING) {
    /* One element: u32 length, then the bytes (validated by the caller). */
    if (sip__tf_count(x) != 1)
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "transform decode_image: input 'data' holds %lld strings; expected "
                           "one (the encoded image)",
                           (long long)sip__tf_count(x));
    p += 4;
    len -= 4;
  }
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  int is_png = len >= 8 && !memcmp(p, png_sig, 8);
  int is_jpeg = len >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
  if (!is_png && !is_jpeg) {
    char hex[64];
    hex_prefix(hex, sizeof hex, p, len);
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform decode_image: not a PNG or JPEG image (%zu bytes%s%s); "
                         "expected a file starting 89 50 4E 47 (PNG) or FF D8 FF (JPEG)",
                         len, len ? ", starting " : "", hex);
  }
  dec_t *d = sip__calloc(1, sizeof *d);
  if (!d) return SIP__OOM();
  d->src = p;
  d->len = len;
  d->mode = t->mode;
  sip_error_t *e = is_png ? decode_png(t, d) : decode_jpeg(t, d);
  sip__free(d->rows);
  sip__free(d->line);
  if (e) {
    sip_tensor_free(d->out);
    sip__free(d);
    return e;
  }
  out[0] = d->out;
  int64_t two = 2, *hw;
  e = sip__tf_alloc(t->out[1].name, SIP_DTYPE_INT64, 1, &two, &out[1], (void **)&hw);
  if (!e) {
    hw[0] = d->h;
    hw[1] = d->w;
  }
  sip__free(d);
  return e;
}

const sip__tf_op_t sip__tf_decode_image = {"decode_image", decode_opts, decode_setup, decode_run, TF_NOT_ITEMS};
