/* Loss curves into a PNG with cairo: axes with round tick values, a light grid, labels, a
 * legend, one colour per series (validation points marked). Written atomically. */
#include "train_plot.h"

#include <cairo.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PI 3.14159265358979323846

enum { W = 960, H = 560, LEFT = 84, RIGHT = 28, TOP = 52, BOTTOM = 64 };

static const double colours[4][3] = {
    {0.12, 0.47, 0.71}, /* blue */
    {0.90, 0.42, 0.05}, /* orange */
    {0.17, 0.63, 0.17}, /* green */
    {0.84, 0.15, 0.16}, /* red */
};

/* A round step (1, 2 or 5 times a power of ten) giving about `want` intervals over range. */
static double nice_step(double range, int want) {
  double raw = range / want, p = pow(10, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void fmt_tick(char *buf, size_t size, double v, double step) {
  if (fabs(v) < step * 1e-6) v = 0;
  if (step >= 1 && fabs(v) >= 1e6) snprintf(buf, size, "%.3gM", v / 1e6);
  else if (step >= 1000 && fabs(v) >= 1e3) snprintf(buf, size, "%gk", v / 1e3);
  else if (step >= 1) snprintf(buf, size, "%.0f", v);
  else {
    int dec = (int)ceil(-log10(step) - 1e-9);
    snprintf(buf, size, "%.*f", dec, v);
  }
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double ax, double ay) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s, &e);
  cairo_move_to(cr, x - e.x_bearing - ax * e.width, y - e.y_bearing - ay * e.height);
  cairo_show_text(cr, s);
}

int train_plot_png(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const train_series *series, int n_series, char *err, size_t errsize) {
  if (n_series > 4) n_series = 4;
  /* data range */
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (int s = 0; s < n_series; s++)
    for (size_t i = 0; i < series[s].n; i++) {
      double x = series[s].x[i], y = series[s].y[i];
      if (!isfinite(x) || !isfinite(y)) continue;
      x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
    }
  bool empty = !(x0 <= x1);
  if (empty) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  x0 = fmin(x0, 0);
  if (x1 - x0 < 1) x1 = x0 + 1;
  if (y1 - y0 < 1e-6) y0 -= 0.5, y1 += 0.5;
  double xs = nice_step(x1 - x0, 8), ys = nice_step(y1 - y0, 6);
  x1 = ceil(x1 / xs) * xs;
  y0 = floor(y0 / ys) * ys, y1 = ceil(y1 / ys) * ys;
  if (y0 < 0 && y1 > 0 && y0 > -ys * 1.01) y0 = 0;

  cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
  cairo_t *cr = cairo_create(surf);
  double pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
#define PX(x) (LEFT + ((x) - x0) / (x1 - x0) * pw)
#define PY(y) (TOP + ph - ((y) - y0) / (y1 - y0) * ph)
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

  /* grid and ticks */
  cairo_set_font_size(cr, 13);
  cairo_set_line_width(cr, 1);
  char buf[64];
  for (double v = x0; v <= x1 + xs * 1e-6; v += xs) {
    double px = round(PX(v)) + 0.5;
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, px, TOP);
    cairo_line_to(cr, px, TOP + ph);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    fmt_tick(buf, sizeof buf, v, xs);
    text_at(cr, px, TOP + ph + 8, buf, 0.5, 0);
  }
  for (double v = y0; v <= y1 + ys * 1e-6; v += ys) {
    double py = round(PY(v)) + 0.5;
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, LEFT, py);
    cairo_line_to(cr, LEFT + pw, py);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    fmt_tick(buf, sizeof buf, v, ys);
    text_at(cr, LEFT - 8, py, buf, 1, 0.5);
  }
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_rectangle(cr, LEFT + 0.5, TOP + 0.5, pw, ph);
  cairo_stroke(cr);

  /* labels and title */
  cairo_set_font_size(cr, 15);
  text_at(cr, LEFT + pw / 2, H - 22, xlabel, 0.5, 0.5);
  cairo_save(cr);
  cairo_translate(cr, 22, TOP + ph / 2);
  cairo_rotate(cr, -PI / 2);
  text_at(cr, 0, 0, ylabel, 0.5, 0.5);
  cairo_restore(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  cairo_set_font_size(cr, 17);
  text_at(cr, LEFT + pw / 2, TOP / 2, title, 0.5, 0.5);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

  /* the curves, clipped to the plot area */
  cairo_save(cr);
  cairo_rectangle(cr, LEFT, TOP, pw, ph);
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  for (int s = 0; s < n_series; s++) {
    const train_series *t = &series[s];
    cairo_set_source_rgb(cr, colours[s][0], colours[s][1], colours[s][2]);
    cairo_set_line_width(cr, 2);
    bool pen = false;
    for (size_t i = 0; i < t->n; i++) {
      if (!isfinite(t->y[i])) {
        pen = false;
        continue;
      }
      if (pen) cairo_line_to(cr, PX(t->x[i]), PY(t->y[i]));
      else cairo_move_to(cr, PX(t->x[i]), PY(t->y[i]));
      pen = true;
    }
    cairo_stroke(cr);
    if (s > 0 || t->n == 1) /* mark the sparse series (validation) */
      for (size_t i = 0; i < t->n; i++) {
        if (!isfinite(t->y[i])) continue;
        cairo_arc(cr, PX(t->x[i]), PY(t->y[i]), 3.5, 0, 2 * PI);
        cairo_fill(cr);
      }
  }
  cairo_restore(cr);
  if (empty) {
    cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
    cairo_set_font_size(cr, 15);
    text_at(cr, LEFT + pw / 2, TOP + ph / 2, "no data yet", 0.5, 0.5);
  }

  /* legend, top right inside the plot */
  cairo_set_font_size(cr, 14);
  double lw = 0;
  for (int s = 0; s < n_series; s++) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, series[s].label, &e);
    lw = fmax(lw, e.x_advance);
  }
  if (n_series > 0) {
    double bw = lw + 56, bh = 10 + 22.0 * n_series, bx = LEFT + pw - bw - 10, by = TOP + 10;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
    cairo_rectangle(cr, bx, by, bw, bh);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    for (int s = 0; s < n_series; s++) {
      double cy = by + 16 + 22.0 * s;
      cairo_set_source_rgb(cr, colours[s][0], colours[s][1], colours[s][2]);
      cairo_set_line_width(cr, 2);
      cairo_move_to(cr, bx + 10, cy);
      cairo_line_to(cr, bx + 38, cy);
      cairo_stroke(cr);
      if (s > 0) {
        cairo_arc(cr, bx + 24, cy, 3.5, 0, 2 * PI);
        cairo_fill(cr);
      }
      cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
      text_at(cr, bx + 46, cy, series[s].label, 0, 0.5);
    }
  }
#undef PX
#undef PY

  cairo_destroy(cr);
  cairo_surface_flush(surf);
  /* one fixed temporary name: a writer killed midway leaves one file, reused next time */
  char tmp[4096];
  const char *slash = strrchr(path, '/');
  int dirlen = slash ? (int)(slash - path + 1) : 0;
  snprintf(tmp, sizeof tmp, "%.*s.%s.tmp", dirlen, path, slash ? slash + 1 : path);
  cairo_status_t cs = cairo_surface_write_to_png(surf, tmp);
  cairo_surface_destroy(surf);
  if (cs != CAIRO_STATUS_SUCCESS) {
    unlink(tmp);
    snprintf(err, errsize, "%s: cannot write the plot: %s", path, cairo_status_to_string(cs));
    return -1;
  }
  if (rename(tmp, path) != 0) {
    snprintf(err, errsize, "%s: cannot write the plot: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}
