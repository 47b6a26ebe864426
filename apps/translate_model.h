/* What relcl-translate and relcl-train (--translate, --valid-bleu) share: finding a checkpoint
 * and its SentencePiece model, loading the model it holds (relcl_model_load_checkpoint), and
 * translating lines of text in length-sorted batches with the library's beam search. Errors
 * are one line in err (no printing here). */
#ifndef RELCL_TRANSLATE_MODEL_H
#define RELCL_TRANSLATE_MODEL_H

#include "relcl.h"
#include "relcl_checkpoint.h"
#include "relcl_data.h"
#include "relcl_model.h"

#include <stddef.h>
#include <stdint.h>

/* ---- finding and loading ---- */

typedef struct tm_files {
  relcl_checkpoint *ck;        /* opened and validated */
  relcl_spm *spm;              /* its vocabulary, hash checked against the config */
  relcl_model_config cfg;      /* from "relcl.config" */
  char ck_path[4096], spm_path[4096];
  char *skipped;               /* newer checkpoints passed over (one "PATH: why" a line), or NULL */
} tm_files;

/* model: a model directory or one checkpoint file. which (directories only): "last" (the
 * newest valid ckpt-*, the default when NULL), "best", or a file name (as given, else inside
 * the directory). spm: the SentencePiece model, or NULL for the one the checkpoint names
 * ("relcl.spm_model", else spm.model) beside the checkpoint. Returns 0, or 1 with err set. */
int tm_files_open(tm_files *f, const char *model, const char *which, const char *spm, char *err,
                  size_t errsize);
void tm_files_close(tm_files *f);

/* The model of f on ctx with the checkpoint's parameters (relcl_model_load_checkpoint: NaN,
 * infinities and bad configurations are refused). Returns 0, or 1 with err set. */
int tm_model_load(const tm_files *f, relcl_context *ctx, relcl_model **out, char *err,
                  size_t errsize);

/* ---- translating ---- */

typedef struct tm_opts {
  relcl_beam_opts beam;
  int batch_size; /* sentences per beam search */
} tm_opts;

typedef struct tm_stats {
  size_t sentences, empty, cropped; /* cropped: inputs over the model's maximum length */
  size_t src_tokens, out_tokens;    /* subwords in, best hypotheses' subwords out */
} tm_stats;

/* Translate n lines (valid UTF-8, no newline). out[i * n_best + k] receives the k-th best
 * translation of line i (malloc'ed; "" for an empty line or fewer hypotheses) and, when score
 * is not NULL, score[i * n_best + k] its score (0 for none); counts (may be NULL) the number
 * of hypotheses of line i (1 for an empty line). Lines are sorted by length into batches of
 * batch_size. Sums are added to *stats. Returns 0, or 1 with err set (out then holds NULLs
 * or strings to free). */
int tm_translate(relcl_model *model, const relcl_spm *spm, const char *const *lines, size_t n,
                 const tm_opts *opts, char **out, double *score, int *counts, tm_stats *stats,
                 char *err, size_t errsize);

#endif
