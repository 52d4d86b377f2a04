/* sip — db_postprocess: PP-OCR's DB (differentiable binarisation) text
 * detection post-processing, from a probability map to text boxes.
 *
 * Steps, following PaddleOCR's DBPostProcess (score_mode "fast"):
 *   1. binarise the map at `thresh`;
 *   2. 8-connected components (PaddleOCR traces contours with OpenCV; a
 *      component's outer contour has the same convex hull);
 *   3. per component, the minimum-area rotated rectangle of its pixel
 *      centres: convex hull (monotone chain), then every hull edge as a
 *      rectangle side (rotating calipers; the optimum has a side on an edge);
 *      skipped when its short side < min_size;
 *   4. score = mean probability of the pixels whose centres lie in that
 *      rectangle; skipped below box_thresh;
 *   5. unclip: offset the rectangle outwards by area * unclip_ratio /
 *      perimeter (pyclipper's rounded offset of a rectangle has exactly the
 *      expanded rectangle as its minimum-area box); skipped when the short
 *      side is then < min_size + 2;
 *   6. scale to the source image (src_size) and clip; corners ordered
 *      clockwise from the top-left as PaddleOCR's get_mini_boxes does;
 *   7. reading order, as tools/infer/predict_system.py's sorted_boxes: by
 *      top-left corner (y, then x), then boxes of one line (top-left y
 *      within LINE_TOLERANCE source pixels) left to right.
 * At most max_candidates components (raster order of their first pixel)
 * are examined. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/transform_impl.h"

static const char *const db_opts[] = {"thresh",   "box_thresh",     "unclip_ratio", "min_size",
                                      "src_size", "max_candidates", NULL};

static sip_error_t *db_setup(sip__transform_t *t, const sip__tf_opts_t *o) {
  sip_error_t *e;
  t->thresh = 0.3;
  t->box_thresh = 0.6;
  t->unclip_ratio = 1.5;
  t->min_size = 3;
  t->max_candidates = 1000;
  if ((e = sip__tf_opt_num(o, "thresh", -1e30, 1e30, &t->thresh)) ||
      (e = sip__tf_opt_num(o, "box_thresh", -1e30, 1e30, &t->box_thresh)) ||
      (e = sip__tf_opt_num(o, "unclip_ratio", 0, 100, &t->unclip_ratio)) ||
      (e = sip__tf_opt_num(o, "min_size", 0, 1e6, &t->min_size)) ||
      (e = sip__tf_opt_int(o, "max_candidates", 1, 1000000, &t->max_candidates)) ||
      (e = sip__tf_opt_hw(o, "src_size", &t->src_h, &t->src_w)))
    return e;
  t->n_in = t->src_h ? 1 : 2;
  t->n_out = 2;
  sip__tf_io(&t->in[0], "probs", SIP_DTYPE_FLOAT32, 4);
  t->in[0].dims[0] = t->in[0].dims[1] = 1;
  if (!t->src_h) {
    sip__tf_io(&t->in[1], "src_size", SIP_DTYPE_INT64, 1);
    t->in[1].dims[0] = 2;
  }
  sip__tf_io(&t->out[0], "boxes", SIP_DTYPE_FLOAT32, 3);
  t->out[0].dims[1] = 4;
  t->out[0].dims[2] = 2;
  sip__tf_io(&t->out[1], "scores", SIP_DTYPE_FLOAT32, 1);
  return NULL;
}

typedef struct pt {
  double x, y;
} pt_t;

/* A rectangle: origin o, unit axes u and v (v = u turned left), extents
 * [u0,u1] x [v0,v1] along them. */
typedef struct rect {
  pt_t o, u, v;
  double u0, u1, v0, v1;
} rect_t;

static double cross3(pt_t a, pt_t b, pt_t c) {
  return (b.x - a.x) * (c.y - a.y) - (b.y - a.y) * (c.x - a.x);
}

/* Andrew's monotone chain over points already sorted by (y, x) (the
 * transposed order only mirrors the hull's orientation); returns the hull
 * size, vertices in h (room for 2n), collinear points dropped. */
static size_t hull(const pt_t *p, size_t n, pt_t *h) {
  if (n < 3) {
    memcpy(h, p, n * sizeof *p);
    return n;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    while (k >= 2 && cross3(h[k - 2], h[k - 1], p[i]) <= 0) k--;
    h[k++] = p[i];
  }
  for (size_t i = n - 1, lo = k + 1; i-- > 0;) {
    while (k >= lo && cross3(h[k - 2], h[k - 1], p[i]) <= 0) k--;
    h[k++] = p[i];
  }
  return k - 1;
}

/* Minimum-area rectangle around hull h (m vertices). A lattice hull inside
 * an H x W map has O((H+W)^(2/3)) vertices, so trying every edge against
 * every vertex stays cheap. Returns 0 when degenerate (fewer than 3
 * vertices). */
static int min_area_rect(const pt_t *h, size_t m, rect_t *best) {
  if (m < 3) return 0;
  double best_area = INFINITY;
  for (size_t i = 0; i < m; i++) {
    pt_t a = h[i], b = h[(i + 1) % m];
    double len = hypot(b.x - a.x, b.y - a.y);
    if (len == 0) continue;
    rect_t r = {a, {(b.x - a.x) / len, (b.y - a.y) / len}, {0, 0}, INFINITY, -INFINITY, INFINITY,
                -INFINITY};
    r.v = (pt_t){-r.u.y, r.u.x};
    for (size_t j = 0; j < m; j++) {
      double dx = h[j].x - a.x, dy = h[j].y - a.y;
      double pu = dx * r.u.x + dy * r.u.y, pv = dx * r.v.x + dy * r.v.y;
      r.u0 = fmin(r.u0, pu);
      r.u1 = fmax(r.u1, pu);
      r.v0 = fmin(r.v0, pv);
      r.v1 = fmax(r.v1, pv);
    }
    double area = (r.u1 - r.u0) * (r.v1 - r.v0);
    if (area < best_area) {
      best_area = area;
      *best = r;
    }
  }
  return best_area < INFINITY;
}

static pt_t corner(const rect_t *r, double pu, double pv) {
  return (pt_t){r->o.x + r->u.x * pu + r->v.x * pv, r->o.y + r->u.y * pu + r->v.y * pv};
}

/* Mean probability over pixels whose centres lie in r (its boundary
 * included: the component's own edge pixels sit on it). */
static double rect_score(const rect_t *r, const float *prob, int64_t H, int64_t W) {
  pt_t c[4] = {corner(r, r->u0, r->v0), corner(r, r->u1, r->v0), corner(r, r->u1, r->v1),
               corner(r, r->u0, r->v1)};
  double xmin = c[0].x, xmax = c[0].x, ymin = c[0].y, ymax = c[0].y;
  for (int k = 1; k < 4; k++) {
    xmin = fmin(xmin, c[k].x);
    xmax = fmax(xmax, c[k].x);
    ymin = fmin(ymin, c[k].y);
    ymax = fmax(ymax, c[k].y);
  }
  int64_t x0 = (int64_t)fmax(0, floor(xmin)), x1 = (int64_t)fmin((double)W - 1, ceil(xmax));
  int64_t y0 = (int64_t)fmax(0, floor(ymin)), y1 = (int64_t)fmin((double)H - 1, ceil(ymax));
  const double eps = 1e-3;
  double sum = 0;
  int64_t n = 0;
  for (int64_t y = y0; y <= y1; y++)
    for (int64_t x = x0; x <= x1; x++) {
      double dx = (double)x - r->o.x, dy = (double)y - r->o.y;
      double pu = dx * r->u.x + dy * r->u.y, pv = dx * r->v.x + dy * r->v.y;
      if (pu < r->u0 - eps || pu > r->u1 + eps || pv < r->v0 - eps || pv > r->v1 + eps) continue;
      sum += prob[y * W + x];
      n++;
    }
  return n ? sum / (double)n : 0;
}

/* PaddleOCR's get_mini_boxes order: the two leftmost points give top-left
 * (smaller y) and bottom-left, the two others top-right and bottom-right. */
static void order_box(pt_t *p) {
  for (int i = 1; i < 4; i++)
    for (int j = i; j > 0 && p[j].x < p[j - 1].x; j--) {
      pt_t s = p[j];
      p[j] = p[j - 1];
      p[j - 1] = s;
    }
  pt_t tl = p[0], bl = p[1], tr = p[2], br = p[3];
  if (bl.y < tl.y) {
    tl = p[1];
    bl = p[0];
  }
  if (br.y < tr.y) {
    tr = p[3];
    br = p[2];
  }
  p[0] = tl;
  p[1] = tr;
  p[2] = br;
  p[3] = bl;
}

/* sorted_boxes' "same line": top-left corners less than this many source
 * pixels apart vertically. */
#define LINE_TOLERANCE 10.0

typedef struct db_box {
  float b[8], score;
  int64_t found; /* position in detection order: ties keep it (Python's sort is stable) */
} db_box_t;

static int by_top_left(const void *pa, const void *pb) {
  const db_box_t *a = pa, *b = pb;
  if (a->b[1] != b->b[1]) return a->b[1] < b->b[1] ? -1 : 1;
  if (a->b[0] != b->b[0]) return a->b[0] < b->b[0] ? -1 : 1;
  return (a->found > b->found) - (a->found < b->found);
}

/* PaddleOCR's sorted_boxes on n boxes (corner 0 the top-left): a stable
 * sort by (y, x) of that corner, then each box moves left past its
 * predecessors while they are on its line (|dy| < LINE_TOLERANCE) and to
 * its right. The second pass only moves boxes within one line's band. */
static sip_error_t *sort_reading_order(float *boxes, float *scores, int64_t n) {
  if (n < 2) return NULL;
  db_box_t *r = sip__calloc((size_t)n, sizeof *r);
  if (!r) return SIP__OOM();
  for (int64_t i = 0; i < n; i++) {
    memcpy(r[i].b, boxes + i * 8, sizeof r[i].b);
    r[i].score = scores[i];
    r[i].found = i;
  }
  qsort(r, (size_t)n, sizeof *r, by_top_left);
  for (int64_t i = 0; i + 1 < n; i++)
    for (int64_t j = i; j >= 0; j--) {
      if (!(fabs((double)r[j + 1].b[1] - (double)r[j].b[1]) < LINE_TOLERANCE &&
            r[j + 1].b[0] < r[j].b[0]))
        break;
      db_box_t t = r[j];
      r[j] = r[j + 1];
      r[j + 1] = t;
    }
  for (int64_t i = 0; i < n; i++) {
    memcpy(boxes + i * 8, r[i].b, sizeof r[i].b);
    scores[i] = r[i].score;
  }
  sip__free(r);
  return NULL;
}

typedef struct db_work {
  unsigned char *seen;
  int64_t *queue;        /* pixel indices of one component */
  int64_t *row_min, *row_max;
  pt_t *pts, *hull;
  float *boxes, *scores; /* results, max_candidates of each */
} db_work_t;

static sip_error_t *db_run(const sip__transform_t *t, const sip_tensor_t *const *in,
                           sip_tensor_t **out) {
  const sip_tensor_t *x = in[0];
  int64_t H = x->dims[2], W = x->dims[3];
  int64_t sh = t->src_h, sw = t->src_w;
  if (!sh) {
    const int64_t *s = in[1]->data;
    sh = s[0];
    sw = s[1];
    if (sh < 1 || sw < 1 || sh > (1 << 20) || sw > (1 << 20))
      return sip_error_new(SIP_INVALID_ARGUMENT,
                           "transform db_postprocess: input 'src_size' is [%lld,%lld]; expected "
                           "the source image's [H,W], each 1..%d",
                           (long long)sh, (long long)sw, 1 << 20);
  }
  /* Pixel indices are kept in int64, but the maps themselves must fit the
   * size cap (the tensor was accepted, so H*W does not overflow). */
  if ((uint64_t)H * (uint64_t)W > SIP__TRANSFORM_MAX_BYTES / sizeof(int64_t))
    return sip_error_new(SIP_INVALID_ARGUMENT,
                         "transform db_postprocess: a %lldx%lld map is too large; expected at "
                         "most %zu pixels",
                         (long long)H, (long long)W, SIP__TRANSFORM_MAX_BYTES / sizeof(int64_t));
  size_t hw = (size_t)(H * W), hh = hw ? (size_t)H : 0; /* [1,1,1e12,0] holds no pixel */
  db_work_t w = {0};
  w.seen = sip__calloc(hw, 1);
  w.queue = sip__calloc(hw, sizeof *w.queue);
  w.row_min = sip__calloc(hh, sizeof *w.row_min);
  w.row_max = sip__calloc(hh, sizeof *w.row_max);
  w.pts = sip__calloc(2 * hh + 1, sizeof *w.pts);
  w.hull = sip__calloc(4 * hh + 2, sizeof *w.hull); /* the chain may hold 2x the points */
  /* There cannot be more components than pixels. */
  size_t most = (size_t)t->max_candidates < hw ? (size_t)t->max_candidates : hw;
  w.boxes = sip__calloc(most * 8, sizeof *w.boxes);
  w.scores = sip__calloc(most, sizeof *w.scores);
  sip_error_t *e = NULL;
  if (!w.seen || !w.queue || !w.row_min || !w.row_max || !w.pts || !w.hull || !w.boxes ||
      !w.scores)
    e = SIP__OOM();
  const float *prob = x->data;
  /* NaN compares false: never text. */
  int64_t found = 0, kept = 0;
  for (size_t start = 0; !e && start < hw && found < t->max_candidates; start++) {
    if (w.seen[start] || !(prob[start] > t->thresh)) continue;
    found++;
    /* Breadth-first flood fill over the 8 neighbours. */
    size_t head = 0, tail = 0;
    w.queue[tail++] = (int64_t)start;
    w.seen[start] = 1;
    int64_t ymin = (int64_t)start / W, ymax = ymin;
    while (head < tail) {
      int64_t p = w.queue[head++], py = p / W, px = p % W;
      for (int64_t dy = -1; dy <= 1; dy++)
        for (int64_t dx = -1; dx <= 1; dx++) {
          int64_t ny = py + dy, nx = px + dx;
          if ((!dy && !dx) || ny < 0 || ny >= H || nx < 0 || nx >= W) continue;
          int64_t q = ny * W + nx;
          if (w.seen[q] || !(prob[q] > t->thresh)) continue;
          w.seen[q] = 1;
          w.queue[tail++] = q;
          if (ny > ymax) ymax = ny;
        }
    }
    /* Only each row's leftmost and rightmost pixels can be hull vertices;
     * emitting them row by row gives the (y, x) order the hull wants. */
    for (int64_t y = ymin; y <= ymax; y++) {
      w.row_min[y] = W;
      w.row_max[y] = -1;
    }
    for (size_t i = 0; i < tail; i++) {
      int64_t py = w.queue[i] / W, px = w.queue[i] % W;
      if (px < w.row_min[py]) w.row_min[py] = px;
      if (px > w.row_max[py]) w.row_max[py] = px;
    }
    size_t np = 0;
    for (int64_t y = ymin; y <= ymax; y++) {
      if (w.row_max[y] < 0) continue;
      w.pts[np++] = (pt_t){(double)w.row_min[y], (double)y};
      if (w.row_max[y] != w.row_min[y]) w.pts[np++] = (pt_t){(double)w.row_max[y], (double)y};
    }
    size_t m = hull(w.pts, np, w.hull);
    rect_t r = {{0, 0}, {0, 0}, {0, 0}, 0, 0, 0, 0};
    if (!min_area_rect(w.hull, m, &r)) continue;
    double rw = r.u1 - r.u0, rh = r.v1 - r.v0;
    if (fmin(rw, rh) < t->min_size) continue;
    double score = rect_score(&r, prob, H, W);
    if (score < t->box_thresh) continue;
    double d = rw * rh * t->unclip_ratio / (2 * (rw + rh));
    r.u0 -= d;
    r.u1 += d;
    r.v0 -= d;
    r.v1 += d;
    if (fmin(rw, rh) + 2 * d < t->min_size + 2) continue;
    pt_t c[4] = {corner(&r, r.u0, r.v0), corner(&r, r.u1, r.v0), corner(&r, r.u1, r.v1),
                 corner(&r, r.u0, r.v1)};
    double fx = (double)sw / (double)W, fy = (double)sh / (double)H;
    for (int k = 0; k < 4; k++) {
      c[k].x = fmin(fmax(c[k].x * fx, 0), (double)sw);
      c[k].y = fmin(fmax(c[k].y * fy, 0), (double)sh);
    }
    order_box(c);
    for (int k = 0; k < 4; k++) {
      w.boxes[kept * 8 + k * 2] = (float)c[k].x;
      w.boxes[kept * 8 + k * 2 + 1] = (float)c[k].y;
    }
    w.scores[kept++] = (float)score;
  }
  if (!e) e = sort_reading_order(w.boxes, w.scores, kept);
  int64_t bd[3] = {kept, 4, 2}, sd = kept;
  void *ob, *os;
  if (!e && !(e = sip__tf_alloc(t->out[0].name, SIP_DTYPE_FLOAT32, 3, bd, &out[0], &ob)) &&
      !(e = sip__tf_alloc(t->out[1].name, SIP_DTYPE_FLOAT32, 1, &sd, &out[1], &os))) {
    memcpy(ob, w.boxes, (size_t)kept * 8 * sizeof(float));
    memcpy(os, w.scores, (size_t)kept * sizeof(float));
  }
  sip__free(w.seen);
  sip__free(w.queue);
  sip__free(w.row_min);
  sip__free(w.row_max);
  sip__free(w.pts);
  sip__free(w.hull);
  sip__free(w.boxes);
  sip__free(w.scores);
  return e;
}

const sip__tf_op_t sip__tf_db_postprocess = {"db_postprocess", db_opts, db_setup, db_run, TF_NOT_ITEMS};
