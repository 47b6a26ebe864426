/* relcl-train --translate: greedy translations with a trained model directory's best (else
 * newest) checkpoint, for the demo and a first look, until a real decoder exists. */
#ifndef RELCL_TRAIN_TRANSLATE_H
#define RELCL_TRAIN_TRANSLATE_H

#include "train_config.h"

/* Translate the lines of cfg->translate ("-": standard input) with cfg->model_dir, one
 * output line per input line on stdout. Returns an exit status (0, or 1 with one line on
 * stderr). */
int train_translate(const train_config *cfg);

#endif
