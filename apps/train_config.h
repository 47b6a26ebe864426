/* relcl-train's options. One table drives the command-line flags, the config file (YAML or
 * JSON, a flat mapping of the same names), --dump-config and --help; flags override the file,
 * and both override the preset, which overrides the built-in defaults. (The model's own JSON,
 * "relcl.config" in checkpoints, is the library's: relcl_model_config_to_json.) */
#ifndef RELCL_TRAIN_CONFIG_H
#define RELCL_TRAIN_CONFIG_H

#include "relcl_model.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct train_config {
  /* data */
  char *train_src, *train_tgt, *valid_src, *valid_tgt;
  char *spm_model; /* NULL: train one on the training text */
  int vocab_size;
  /* model */
  char *preset;
  int enc_layers, dec_layers, d_model, heads, d_ff;
  double dropout, label_smoothing;
  char *positions; /* "absolute", "relative" or "both" */
  int max_rel, rel_per_head, rel_keys_only, pre_norm;
  /* training */
  int64_t batch_tokens;
  int accum, max_length;
  int64_t warmup;
  double lr_scale, clip_norm;
  int64_t max_steps; /* 0: no limit */
  double max_time;   /* seconds of this run; 0: no limit */
  uint64_t seed;
  char *device; /* NULL: RELCL_DEVICE, else the default */
  /* under mpirun (train_mpi.h) */
  char *device_map;   /* devices by local rank on each host */
  int balance;        /* share micro-batches by measured speed */
  int64_t hash_every; /* compare parameter hashes every N updates; 0: never */
  /* output */
  char *model_dir;
  int keep;
  int64_t valid_every, log_every;
  int64_t valid_bleu; /* greedy validation BLEU every N updates (sacrebleu); 0: never */
  int early_stopping; /* 0: off */
  char *log_json;
  /* what to do (not part of the resolved configuration) */
  char *config_file;
  char *translate; /* --translate FILE: greedy translations instead of training */
  int dump_config, resume, help;
} train_config;

/* Parse argv into cfg (which this initializes; free with train_config_free). Returns 0, or
 * 2 with one line in err naming the flag (or FILE:LINE and the key) for a usage error. */
int train_config_parse(train_config *cfg, int argc, char **argv, char *err, size_t errsize);
void train_config_free(train_config *cfg);

/* The full resolved configuration as a JSON object, one option a line (valid YAML too, and
 * accepted back by --config). Caller frees. pretty 0: one line. */
char *train_config_json(const train_config *cfg, int pretty);

/* The --help text. */
void train_config_usage(FILE *out, const char *prog);

/* The model part of cfg, with vocab from the vocabulary and max_length counting BOS/EOS. */
void train_config_model(const train_config *cfg, int vocab, relcl_model_config *out);

#endif
