/*
 * svgdraw.h — the small SVG vocabulary flashcl-bench's plots are written
 * in: escaped text, lines, markers, and scales with axes whose ticks fall
 * on 1-2-5 values (log10), powers of two (log2) or round steps (linear).
 * Nothing here knows about attention; svg.c lays the plots out.
 */
#ifndef FLASHCL_SVGDRAW_H
#define FLASHCL_SVGDRAW_H

#include <stdio.h>

enum { SCALE_LINEAR = 0, SCALE_LOG2 = 2, SCALE_LOG10 = 10 };

/** Maps data values in [lo, hi] onto pixels [p0, p1] (p1 < p0 for a y axis,
 *  whose pixels grow downwards). */
typedef struct svg_scale {
  int kind;         /* SCALE_* */
  double lo, hi;
  double p0, p1;
} svg_scale;

/** Sets lo and hi to hold [min, max] with some room: log10 ends snap to 1-2-5
 *  values, linear ranges start at 0 and end on a round step, log2 ranges get
 *  a margin so that end markers are not cut. */
void svg_scale_fit(svg_scale *s, double min, double max);
double svg_map(const svg_scale *s, double v);

/** Writes tick label `v` to buf: 0.05, 20, 5k, 2M; on log2 scales binary
 *  (1024 -> 1k). */
void svg_format_tick(const svg_scale *s, double v, char *buf, size_t len);

/** Draws one axis of the plot rectangle [x0,x1] x [y0,y1] (pixels):
 *  grid lines across it, tick labels outside it, and `label` centred
 *  beneath (x) or rotated beside (y) it. */
void svg_axis(FILE *f, const svg_scale *along, int vertical, double x0, double y0,
              double x1, double y1, const char *label);

/** Text with XML-escaped content; `attrs` are extra attributes written as
 *  they are (font-size, text-anchor, ...). */
void svg_text(FILE *f, double x, double y, const char *attrs, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/** Copies s into f, XML-escaped; control bytes and malformed UTF-8 become '?'
 *  so that the file stays well-formed whatever a driver reports. */
void svg_escape(FILE *f, const char *s);

void svg_line(FILE *f, double x0, double y0, double x1, double y1, const char *attrs);

/** The rectangle with corners (x0, y0) and (x1, y1). */
void svg_rect(FILE *f, double x0, double y0, double x1, double y1, const char *attrs);

/** Polyline through n points. */
void svg_polyline(FILE *f, const double *x, const double *y, int n, const char *attrs);

/** A marker centred on (x, y): shape 0 circle, 1 square, 2 triangle,
 *  3 diamond (others wrap); `hollow` fills it white. */
void svg_marker(FILE *f, double x, double y, int shape, const char *colour, int hollow);

#endif
