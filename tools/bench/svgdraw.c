/*
 * svgdraw.c — text, lines, markers, scales and axes for flashcl-bench's SVG
 * plots (see svgdraw.h).
 */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "svgdraw.h"

#define TICK_FONT 11.0
#define CHAR_WIDTH (0.6 * TICK_FONT) /* a sans-serif digit, roughly */
#define MAX_TICKS 64

/* The largest 1-2-5 value at most v (up = 0) or the smallest at least v. */
static double nice125(double v, int up) {
  static const double m[4] = {1, 2, 5, 10};
  double decade = pow(10.0, floor(log10(v)));
  double x = v / decade;
  if (up) {
    for (int i = 0; i < 4; ++i)
      if (x <= m[i] * (1 + 1e-9)) return m[i] * decade;
    return 10 * decade;
  }
  for (int i = 3; i >= 0; --i)
    if (x >= m[i] * (1 - 1e-9)) return m[i] * decade;
  return decade;
}

static double linear_step(const svg_scale *s) { return nice125((s->hi - s->lo) / 5.0, 1); }

void svg_scale_fit(svg_scale *s, double min, double max) {
  if (s->kind == SCALE_LOG10) {
    s->lo = nice125(min / 1.2, 0);
    s->hi = nice125(max * 1.2, 1);
  } else if (s->kind == SCALE_LOG2) {
    s->lo = min / 1.4;
    s->hi = max * 1.4;
  } else {
    s->lo = min < 0 ? min : 0;
    s->hi = max > s->lo ? max * 1.02 : s->lo + 1;
    double step = linear_step(s);
    s->hi = ceil(s->hi / step) * step;
  }
}

static double unit(const svg_scale *s, double v) {
  return s->kind == SCALE_LOG10 ? log10(v) : s->kind == SCALE_LOG2 ? log2(v) : v;
}

double svg_map(const svg_scale *s, double v) {
  double u0 = unit(s, s->lo), u1 = unit(s, s->hi);
  return s->p0 + (s->p1 - s->p0) * (unit(s, v) - u0) / (u1 - u0);
}

static int in_range(const svg_scale *s, double v) {
  return v >= s->lo * (1 - 1e-9) && v <= s->hi * (1 + 1e-9);
}

/* Tick values, spaced so that their labels do not touch: 1-2-5 in each
 * decade when there is room, else every decade or every k-th; powers of two,
 * every k-th octave; round linear steps. With `minor`, the unlabelled 2s and
 * 5s of a log10 axis labelled only at its decades, for lighter grid lines. */
static int ticks(const svg_scale *s, int minor, double *out) {
  double length = fabs(s->p1 - s->p0);
  double spread = unit(s, s->hi) - unit(s, s->lo); /* decades, octaves or units */
  int n = 0;
  if (minor && s->kind != SCALE_LOG10) return 0;
  if (s->kind == SCALE_LINEAR) {
    double step = linear_step(s);
    for (double v = ceil(s->lo / step) * step; v <= s->hi * (1 + 1e-9) && n < MAX_TICKS; v += step)
      out[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    return n;
  }
  double per_unit = length / spread, min_gap = 34.0;
  int every = 1;
  while (every * per_unit < min_gap) every *= 2;
  static const double all125[3] = {1, 2, 5}, one[1] = {1};
  /* log10(2) = 0.3 of a decade is the closest pair of 1-2-5 ticks. */
  int dense = s->kind == SCALE_LOG10 && 0.3 * per_unit >= min_gap;
  const double *mant = dense ? all125 : one;
  int n_mant = dense ? 3 : 1;
  if (minor) {
    if (dense || every > 1 || 0.3 * per_unit < 8) return 0;
    mant = all125 + 1, n_mant = 2;
  }
  double base = s->kind;
  for (int e = (int)floor(unit(s, s->lo)); e <= (int)ceil(unit(s, s->hi)); ++e) {
    if (e % every) continue;
    for (int i = 0; i < n_mant && n < MAX_TICKS; ++i) {
      double v = mant[i] * pow(base, e);
      if (in_range(s, v)) out[n++] = v;
    }
  }
  return n;
}

void svg_format_tick(const svg_scale *s, double v, char *buf, size_t len) {
  if (s->kind == SCALE_LOG2 && v >= 1024) snprintf(buf, len, "%gk", v / 1024);
  else if (fabs(v) >= 1e6) snprintf(buf, len, "%gM", v / 1e6);
  else if (fabs(v) >= 1e3) snprintf(buf, len, "%gk", v / 1e3);
  else snprintf(buf, len, "%g", v);
}

void svg_axis(FILE *f, const svg_scale *s, int vertical, double x0, double y0, double x1,
              double y1, const char *label) {
  double t[MAX_TICKS];
  int n = ticks(s, 1, t);
  for (int i = 0; i < n; ++i) {
    double p = svg_map(s, t[i]);
    if (vertical) svg_line(f, x0, p, x1, p, "stroke=\"#f2f2f2\"");
    else svg_line(f, p, y0, p, y1, "stroke=\"#f2f2f2\"");
  }
  n = ticks(s, 0, t);
  size_t widest = 0;
  for (int i = 0; i < n; ++i) {
    char text[32];
    svg_format_tick(s, t[i], text, sizeof text);
    if (strlen(text) > widest) widest = strlen(text);
    double p = svg_map(s, t[i]);
    if (vertical) {
      svg_line(f, x0, p, x1, p, "stroke=\"#e2e2e2\"");
      svg_text(f, x0 - 6, p + 4, "font-size=\"11\" text-anchor=\"end\"", "%s", text);
    } else {
      svg_line(f, p, y0, p, y1, "stroke=\"#e2e2e2\"");
      svg_text(f, p, y1 + 16, "font-size=\"11\" text-anchor=\"middle\"", "%s", text);
    }
  }
  char attrs[96];
  if (vertical) {
    /* Beside the widest tick label, so that the two never overlap. */
    double x = x0 - 14 - (double)widest * CHAR_WIDTH, y = (y0 + y1) / 2;
    snprintf(attrs, sizeof attrs,
             "font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\"", x, y);
    svg_text(f, x, y, attrs, "%s", label);
  } else {
    svg_text(f, (x0 + x1) / 2, y1 + 34, "font-size=\"12\" text-anchor=\"middle\"", "%s", label);
  }
}

/* Length of the UTF-8 sequence starting at s, or 0 if it is malformed. */
static int utf8_length(const unsigned char *s) {
  int n = s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
  for (int i = 1; i < n; ++i)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return n;
}

void svg_escape(FILE *f, const char *text) {
  for (const unsigned char *s = (const unsigned char *)text; *s; ++s) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else if (*s < 0x20 || *s == 0x7f) fputc('?', f);
    else if (*s < 0x80) fputc(*s, f);
    else {
      int n = utf8_length(s);
      if (n == 0) {
        fputc('?', f);
      } else {
        fwrite(s, 1, (size_t)n, f);
        s += n - 1;
      }
    }
  }
}

void svg_text(FILE *f, double x, double y, const char *attrs, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" %s>", x, y, attrs);
  svg_escape(f, text);
  fputs("</text>\n", f);
}

void svg_line(FILE *f, double x0, double y0, double x1, double y1, const char *attrs) {
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" %s/>\n", x0, y0, x1, y1, attrs);
}

void svg_rect(FILE *f, double x0, double y0, double x1, double y1, const char *attrs) {
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" %s/>\n", x0, y0, x1 - x0,
          y1 - y0, attrs);
}

void svg_polyline(FILE *f, const double *x, const double *y, int n, const char *attrs) {
  fputs("<polyline points=\"", f);
  for (int i = 0; i < n; ++i) fprintf(f, "%s%.1f,%.1f", i ? " " : "", x[i], y[i]);
  fprintf(f, "\" fill=\"none\" %s/>\n", attrs);
}

void svg_marker(FILE *f, double x, double y, int shape, const char *colour, int hollow) {
  /* Outlines as offsets from the centre, sized to look equally heavy. */
  static const double square[] = {-3.3, -3.3, 3.3, -3.3, 3.3, 3.3, -3.3, 3.3};
  static const double triangle[] = {0, -4.6, 4.2, 3, -4.2, 3};
  static const double diamond[] = {0, -4.6, 4.6, 0, 0, 4.6, -4.6, 0};
  static const double *outline[3] = {square, triangle, diamond};
  static const int corners[3] = {4, 3, 4};
  shape %= 4;
  if (shape == 0) {
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.8\"", x, y);
  } else {
    fputs("<polygon points=\"", f);
    for (int i = 0; i < corners[shape - 1]; ++i)
      fprintf(f, "%s%.1f,%.1f", i ? " " : "", x + outline[shape - 1][2 * i],
              y + outline[shape - 1][2 * i + 1]);
    fputc('"', f);
  }
  fprintf(f, " fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", hollow ? "#fff" : colour,
          colour);
}
