/*
 * svg.c — flashcl-bench --svg: one row of panels per device, (1) throughput
 * against sequence length, (2) a roofline with the measured ceilings and
 * every run on it, (3) the speed-up of flash over naive. Colour says the
 * algorithm, the marker the head dim, a dashed line and hollow marker a
 * causal mask; one legend at the top serves every panel. Only successful
 * runs are drawn. The drawing vocabulary is in svgdraw.c.
 */
#include <math.h>
#include <string.h>

#include "bench.h"
#include "svgdraw.h"

#define MARGIN 20.0
#define PANEL_W 410.0    /* one panel with its labels */
#define PANEL_H 300.0
#define N_PANELS 3
#define PAGE_W (2 * MARGIN + N_PANELS * PANEL_W)
#define HEADER_H 78.0    /* page title and legend */
#define ROW_TITLE_H 46.0 /* device name and what was measured */
#define PLOT_LEFT 78.0   /* inside a panel: room for tick labels and the y label */
#define PLOT_RIGHT 14.0
#define PLOT_TOP 26.0
#define PLOT_BOTTOM 50.0
#define MAX_DIMS 8
#define MAX_POINTS 256
#define SCALE_AUTO (-1) /* log10 when the data spans more than a decade */
#define DEGREES (180.0 / 3.14159265358979)

static const char *const FLASH_COLOUR = "#0072b2", *const NAIVE_COLOUR = "#d55e00";
static const char *const NEUTRAL = "#555";
static const char *const HALO = "stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\"";

/* ---- what is drawn -------------------------------------------------------- */

typedef double (*metric)(const bench_result *r);

static double seqlen(const bench_result *r) { return (double)r->desc.seqlen_q; }
static double tflops(const bench_result *r) { return r->tflops; }
static double intensity(const bench_result *r) {
  return r->bytes_model ? r->flops / (double)r->bytes_model : 0;
}
static double speedup(const bench_result *r) {
  return r->algo == FCL_ALGO_FLASH ? r->speedup : 0; /* naive's is 1 by definition */
}

typedef struct plot {
  svg_scale x, y;
  double left, top, right, bottom; /* the plot rectangle, pixels */
} plot;

/* A panel: which metrics, on which scales; `include` widens the data range
 * to what `decorate` draws under the data (ceilings, a reference line). */
typedef struct panel {
  const char *title, *xlabel, *ylabel, *empty;
  metric x, y;
  int xkind, ykind, lines;
  void (*include)(const bench_device *dev, double range[4]);
  void (*decorate)(FILE *f, const plot *p, const bench_device *dev);
} panel;

/* Where the bandwidth slope meets the FMA ceiling, in FLOP/byte. */
static double ridge(const fcl_peaks *pk) { return pk->fma_tflops * 1e3 / pk->copy_gbps; }

static int have_ceilings(const bench_device *dev) {
  return dev->have_peaks && dev->peaks.copy_gbps > 0 && dev->peaks.fma_tflops > 0;
}

static void widen(double range[4], double x, double y) {
  if (x > 0) range[0] = fmin(range[0], x), range[1] = fmax(range[1], x);
  if (y > 0) range[2] = fmin(range[2], y), range[3] = fmax(range[3], y);
}

/* Room for the ceilings and their labels: most of a decade of the slope left
 * of the ridge, and headroom above the flat ceiling. */
static void roofline_include(const bench_device *dev, double range[4]) {
  if (!have_ceilings(dev)) return;
  widen(range, ridge(&dev->peaks) / 6, dev->peaks.fma_tflops * 1.6);
  widen(range, ridge(&dev->peaks) * 2, 0);
}

static void roofline_decorate(FILE *f, const plot *p, const bench_device *dev) {
  if (!have_ceilings(dev)) {
    svg_text(f, p->left + 8, p->top + 16, "font-size=\"11\" fill=\"#777\"",
             "no ceilings: the peaks were not measured");
    return;
  }
  const fcl_peaks *pk = &dev->peaks;
  /* The slope y = bandwidth * intensity enters the plot at its left edge or
   * its floor, whichever is further right; its label sits on the middle of
   * what is visible of it. */
  double x_in = fmax(p->x.lo, p->y.lo * 1e3 / pk->copy_gbps);
  double xs[3] = {svg_map(&p->x, x_in), svg_map(&p->x, ridge(pk)), p->right};
  double ys[3] = {svg_map(&p->y, pk->copy_gbps * x_in / 1e3), svg_map(&p->y, pk->fma_tflops),
                  svg_map(&p->y, pk->fma_tflops)};
  svg_polyline(f, xs, ys, 3, "stroke=\"#555\" stroke-width=\"1.6\"");
  double angle = atan2(ys[1] - ys[0], xs[1] - xs[0]) * DEGREES;
  char attrs[192];
  double mid_x = (xs[0] + xs[1]) / 2, mid_y = (ys[0] + ys[1]) / 2;
  snprintf(attrs, sizeof attrs,
           "font-size=\"11\" fill=\"#333\" text-anchor=\"middle\" %s "
           "transform=\"rotate(%.1f %.1f %.1f)\"",
           HALO, angle, mid_x, mid_y);
  svg_text(f, mid_x, mid_y - 5, attrs, "copy %.0f GB/s", pk->copy_gbps);
  snprintf(attrs, sizeof attrs, "font-size=\"11\" fill=\"#333\" text-anchor=\"end\" %s", HALO);
  svg_text(f, p->right - 6, ys[1] - 6, attrs, "fp32 FMA %.3g TFLOP/s", pk->fma_tflops);
}

static void speedup_include(const bench_device *dev, double range[4]) {
  (void)dev;
  widen(range, 0, 1);
}

static void speedup_decorate(FILE *f, const plot *p, const bench_device *dev) {
  (void)dev;
  double y = svg_map(&p->y, 1.0);
  char attrs[128];
  snprintf(attrs, sizeof attrs, "stroke=\"%s\" stroke-width=\"1.2\"", NAIVE_COLOUR);
  svg_line(f, p->left, y, p->right, y, attrs);
  snprintf(attrs, sizeof attrs, "font-size=\"11\" fill=\"%s\" text-anchor=\"end\" %s",
           NAIVE_COLOUR, HALO);
  svg_text(f, p->right - 6, y - 5, attrs, "naive = 1\xc3\x97");
}

static const panel PANELS[N_PANELS] = {
    {"Throughput", "sequence length N", "TFLOP/s", "no successful runs", seqlen, tflops,
     SCALE_LOG2, SCALE_AUTO, 1, NULL, NULL},
    {"Roofline (bytes from the I/O model)", "arithmetic intensity, FLOP/byte",
     "TFLOP/s", "no successful runs", intensity, tflops, SCALE_LOG10, SCALE_LOG10, 0,
     roofline_include, roofline_decorate},
    {"Speed-up of flash over naive", "sequence length N", "naive time / flash time",
     "needs flash and naive runs of the same shape", seqlen, speedup, SCALE_LOG2, SCALE_LOG10,
     1, speedup_include, speedup_decorate},
};

/* ---- series styles ---------------------------------------------------------- */

/* What the successful runs hold, for the legend: the algorithms and masks,
 * and the head dims, ascending (the i-th is drawn with marker i). */
typedef struct keys {
  int algo[2], causal[2]; /* [0] flash / no mask, [1] naive / causal */
  size_t dim[MAX_DIMS];
  int n_dims;
} keys;

static void collect_keys(const bench_results *all, keys *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < all->count; ++i) {
    if (all->items[i].status != FCL_SUCCESS) continue;
    out->algo[all->items[i].algo == FCL_ALGO_NAIVE] = 1;
    out->causal[all->items[i].desc.causal != 0] = 1;
    size_t d = all->items[i].desc.head_dim;
    int at = 0;
    while (at < out->n_dims && out->dim[at] < d) ++at;
    if (at == out->n_dims || out->dim[at] != d) {
      if (out->n_dims == MAX_DIMS) continue;
      memmove(&out->dim[at + 1], &out->dim[at], (size_t)(out->n_dims - at) * sizeof d);
      out->dim[at] = d;
      ++out->n_dims;
    }
  }
}

static const char *colour_of(fcl_algo algo) {
  return algo == FCL_ALGO_FLASH ? FLASH_COLOUR : NAIVE_COLOUR;
}

static const char *dash_of(int causal) { return causal ? " stroke-dasharray=\"6 4\"" : ""; }

/* ---- one panel ------------------------------------------------------------- */

static int drawn(const bench_result *r, int device, const panel *pn) {
  if (r->device != device || r->status != FCL_SUCCESS) return 0;
  double x = pn->x(r), y = pn->y(r);
  return isfinite(x) && isfinite(y) && x > 0 && y > 0;
}

/* The points of one series (algorithm, head dim, mask), in order of x. */
static int gather(const bench_results *all, int device, const panel *pn, fcl_algo algo,
                  size_t head_dim, int causal, double *xs, double *ys) {
  int n = 0;
  for (size_t i = 0; i < all->count && n < MAX_POINTS; ++i) {
    const bench_result *r = &all->items[i];
    if (!drawn(r, device, pn) || r->algo != algo || r->desc.head_dim != head_dim ||
        r->desc.causal != causal)
      continue;
    double x = pn->x(r), y = pn->y(r);
    int at = n++;
    for (; at > 0 && xs[at - 1] > x; --at) xs[at] = xs[at - 1], ys[at] = ys[at - 1];
    xs[at] = x, ys[at] = y;
  }
  return n;
}

static void draw_series(FILE *f, const plot *p, const panel *pn, const bench_results *all,
                        int device, const keys *k) {
  static const fcl_algo algos[2] = {FCL_ALGO_NAIVE, FCL_ALGO_FLASH}; /* flash on top */
  double xs[MAX_POINTS], ys[MAX_POINTS];
  for (int a = 0; a < 2; ++a)
    for (int d = 0; d < k->n_dims; ++d)
      for (int causal = 0; causal < 2; ++causal) {
        int n = gather(all, device, pn, algos[a], k->dim[d], causal, xs, ys);
        for (int i = 0; i < n; ++i) xs[i] = svg_map(&p->x, xs[i]), ys[i] = svg_map(&p->y, ys[i]);
        char attrs[96];
        snprintf(attrs, sizeof attrs, "stroke=\"%s\" stroke-width=\"1.8\"%s",
                 colour_of(algos[a]), dash_of(causal));
        if (pn->lines && n > 1) svg_polyline(f, xs, ys, n, attrs);
        for (int i = 0; i < n; ++i) svg_marker(f, xs[i], ys[i], d, colour_of(algos[a]), causal);
      }
}

static void draw_panel(FILE *f, const panel *pn, const bench_device *dev, int device,
                       const bench_results *all, const keys *k, double x0, double y0,
                       int clip_id) {
  plot p = {.left = x0 + PLOT_LEFT, .top = y0 + PLOT_TOP, .right = x0 + PANEL_W - PLOT_RIGHT,
            .bottom = y0 + PANEL_H - PLOT_BOTTOM};
  svg_text(f, p.left, p.top - 9, "font-size=\"13\" font-weight=\"bold\"", "%s", pn->title);
  double range[4] = {INFINITY, 0, INFINITY, 0}; /* x min, x max, y min, y max */
  int any = 0;
  for (size_t i = 0; i < all->count; ++i)
    if (drawn(&all->items[i], device, pn))
      widen(range, pn->x(&all->items[i]), pn->y(&all->items[i])), any = 1;
  svg_rect(f, p.left, p.top, p.right, p.bottom, "fill=\"none\" stroke=\"#999\"");
  if (!any) {
    svg_text(f, (p.left + p.right) / 2, (p.top + p.bottom) / 2,
             "font-size=\"12\" fill=\"#777\" text-anchor=\"middle\"", "%s", pn->empty);
    return;
  }
  if (pn->include) pn->include(dev, range);
  int ykind = pn->ykind;
  if (ykind == SCALE_AUTO) ykind = range[3] > 10 * range[2] ? SCALE_LOG10 : SCALE_LINEAR;
  p.x = (svg_scale){pn->xkind, 0, 0, p.left, p.right};
  p.y = (svg_scale){ykind, 0, 0, p.bottom, p.top};
  svg_scale_fit(&p.x, range[0], range[1]);
  svg_scale_fit(&p.y, range[2], range[3]);
  char label[96];
  snprintf(label, sizeof label, "%s%s", pn->xlabel, p.x.kind != SCALE_LINEAR ? " (log)" : "");
  svg_axis(f, &p.x, 0, p.left, p.top, p.right, p.bottom, label);
  snprintf(label, sizeof label, "%s%s", pn->ylabel, p.y.kind != SCALE_LINEAR ? " (log)" : "");
  svg_axis(f, &p.y, 1, p.left, p.top, p.right, p.bottom, label);
  /* Lines and markers near the edges are clipped to the plot, not the page. */
  fprintf(f, "<clipPath id=\"clip%d\">", clip_id);
  svg_rect(f, p.left, p.top, p.right, p.bottom, "");
  fprintf(f, "</clipPath>\n<g clip-path=\"url(#clip%d)\">\n", clip_id);
  if (pn->decorate) pn->decorate(f, &p, dev);
  draw_series(f, &p, pn, all, device, k);
  fputs("</g>\n", f);
}

/* ---- page ------------------------------------------------------------------ */

static int successes(const bench_results *all, int device, size_t *failed) {
  int ok = 0;
  *failed = 0;
  for (size_t i = 0; i < all->count; ++i)
    if (all->items[i].device == device) {
      if (all->items[i].status == FCL_SUCCESS) ++ok;
      else ++*failed;
    }
  return ok;
}

/* "fwd pass, f32 storage": what the device's runs measured. */
static void describe_runs(const bench_results *all, int device, char *buf, size_t len) {
  snprintf(buf, len, "%s", "");
  for (size_t i = 0; i < all->count; ++i)
    if (all->items[i].device == device) {
      snprintf(buf, len, "%s pass, %s storage", bench_pass_name(all->items[i].pass),
               fcl_dtype_name(all->items[i].desc.dtype));
      return;
    }
}

static double device_row(FILE *f, const bench_device *dev, int device, const bench_results *all,
                         const keys *k, double y) {
  char what[64], peaks[96] = "peaks not measured", failed_note[80] = "";
  size_t failed = 0;
  int ok = dev->status == FCL_SUCCESS ? successes(all, device, &failed) : 0;
  describe_runs(all, device, what, sizeof what);
  svg_text(f, MARGIN, y + 18, "font-size=\"15\" font-weight=\"bold\"", "%.90s%s%s",
           bench_device_label(dev), what[0] ? "  \xc2\xb7  " : "", what);
  if (dev->status != FCL_SUCCESS) {
    svg_text(f, MARGIN, y + 36, "font-size=\"12\" fill=\"#b00\"", "not usable: %s: %.150s",
             fcl_status_str(dev->status), dev->message);
    return ROW_TITLE_H;
  }
  if (have_ceilings(dev))
    snprintf(peaks, sizeof peaks, "measured peaks: copy %.0f GB/s, fp32 FMA %.3g TFLOP/s",
             dev->peaks.copy_gbps, dev->peaks.fma_tflops);
  if (failed)
    snprintf(failed_note, sizeof failed_note, "; %zu run%s failed and %s not drawn", failed,
             failed == 1 ? "" : "s", failed == 1 ? "is" : "are");
  svg_text(f, MARGIN, y + 36, "font-size=\"12\" fill=\"#555\"", "%.60s, %u compute units; %s%s",
           dev->info.platform, dev->info.limits.compute_units, peaks, failed_note);
  if (!ok) return ROW_TITLE_H;
  for (int i = 0; i < N_PANELS; ++i)
    draw_panel(f, &PANELS[i], dev, device, all, k, MARGIN + i * PANEL_W, y + ROW_TITLE_H,
               device * N_PANELS + i);
  return ROW_TITLE_H + PANEL_H;
}

/* One legend entry: a short line and/or a marker, then its label. */
static double legend_item(FILE *f, double x, double y, const char *colour, int shape, int causal,
                          int line, const char *label) {
  if (line) {
    char attrs[96];
    snprintf(attrs, sizeof attrs, "stroke=\"%s\" stroke-width=\"1.8\"%s", colour, dash_of(causal));
    svg_line(f, x, y, x + 28, y, attrs);
  }
  if (shape >= 0) svg_marker(f, x + 14, y, shape, colour, causal);
  svg_text(f, x + 34, y + 4, "font-size=\"12\"", "%s", label);
  return x + 34 + 7.0 * (double)strlen(label) + 22;
}

static void legend(FILE *f, const keys *k, double y) {
  double x = MARGIN;
  if (k->algo[0]) x = legend_item(f, x, y, FLASH_COLOUR, -1, 0, 1, "flash");
  if (k->algo[1]) x = legend_item(f, x, y, NAIVE_COLOUR, -1, 0, 1, "naive");
  x += 18;
  for (int d = 0; d < k->n_dims; ++d) {
    char label[32];
    snprintf(label, sizeof label, "head dim %zu", k->dim[d]);
    x = legend_item(f, x, y, NEUTRAL, d, 0, 0, label);
  }
  x += 18;
  if (k->causal[0]) x = legend_item(f, x, y, NEUTRAL, 0, 0, 1, "no mask");
  if (k->causal[1]) legend_item(f, x, y, NEUTRAL, 0, 1, 1, "causal (dashed, hollow)");
}

int bench_write_svg(const char *path, const bench_device *devices, size_t n_devices,
                    const bench_results *all) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  keys k;
  collect_keys(all, &k);
  double height = HEADER_H + MARGIN;
  for (size_t dv = 0; dv < n_devices; ++dv) {
    size_t failed;
    int ok = devices[dv].status == FCL_SUCCESS && successes(all, (int)dv, &failed) > 0;
    height += ROW_TITLE_H + (ok ? PANEL_H : 0);
  }
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
          PAGE_W, height, PAGE_W, height);
  svg_text(f, MARGIN, 30, "font-size=\"18\" font-weight=\"bold\"",
           "flashcl %s: attention, flash vs naive, per device", fcl_version_string());
  legend(f, &k, 58);
  double y = HEADER_H;
  for (size_t dv = 0; dv < n_devices; ++dv)
    y += device_row(f, &devices[dv], (int)dv, all, &k, y);
  fputs("</svg>\n", f);
  int bad = ferror(f);
  return fclose(f) == 0 && !bad ? 0 : -1;
}
