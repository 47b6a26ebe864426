/* The loss plot relcl-train keeps beside its checkpoints: training and validation loss
 * against the update step, drawn with cairo into a PNG. */
#ifndef RELCL_TRAIN_PLOT_H
#define RELCL_TRAIN_PLOT_H

#include <stddef.h>

typedef struct train_series {
  const char *label;
  const double *x, *y; /* n points, x ascending */
  size_t n;
} train_series;

/* Draw the series (up to 4) into a PNG at path, written to a temporary file in the same
 * directory and renamed, so a reader never sees half an image. Returns 0, or -1 with one
 * line in err. */
int train_plot_png(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const train_series *series, int n_series, char *err, size_t errsize);

#endif
