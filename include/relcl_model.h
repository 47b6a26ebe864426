/* relcl_model: an encoder-decoder Transformer (Vaswani et al. 2017) with relative position
 * representations (Shaw et al. 2018), trained and run entirely on one OpenCL device.
 *
 * Parameters, gradients and the two Adam moments each live in ONE device buffer (an arena)
 * carved by a table of named tensors, so zeroing the gradients is one fill and a checkpoint
 * is one transfer per arena. Tensor names are stable and readable
 * ("enc.3.self_attn.wq.weight", "dec.0.cross_attn.wo.bias", "emb.weight", ...); the
 * checkpoint files use them.
 *
 * Conventions as in relcl.h: every fallible call returns relcl_status, details in
 * relcl_last_error(); relcl_model_destroy(NULL) is a no-op; the model does not own the
 * context, which must outlive it.
 */
#ifndef RELCL_MODEL_H
#define RELCL_MODEL_H

#include "relcl.h"
#include "relcl_checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum relcl_positions {
  RELCL_POS_ABSOLUTE = 1, /* sinusoidal encodings added to the embeddings */
  RELCL_POS_RELATIVE = 2, /* Shaw relative representations in every self-attention */
  RELCL_POS_BOTH = 3,
} relcl_positions;

/* The most encoder (and decoder) layers a model may have: dropout streams number the
 * encoder's layers 0..30 and the decoder's 31..61 (lib/model/model_graph.c). */
#define RELCL_MODEL_MAX_LAYERS 31

typedef struct relcl_model_config {
  int vocab;            /* shared source/target vocabulary; ids 0..3 = pad, unk, bos, eos */
  int enc_layers, dec_layers; /* 1 .. RELCL_MODEL_MAX_LAYERS */
  int d_model, heads, d_ff;
  float dropout;        /* residual, embedding and attention-weight dropout */
  float label_smoothing;
  relcl_positions positions;
  int max_rel;          /* clipping distance k of the relative positions */
  int rel_per_head;     /* 1: one table per head; 0: shared by the heads of a layer */
  int rel_keys_only;    /* 1: no a^V term (Shaw et al. Table 3) */
  int pre_norm;         /* 1: pre-layer-norm blocks (plus a final norm); 0: post-norm */
  int max_length;       /* longest sequence the model is built for (positions, masks) */
} relcl_model_config;

/* Presets: "tiny", "base", "big" (Vaswani et al. / Shaw et al. sizes). NULL if unknown.
 * vocab is left 0: it comes from the SentencePiece model. */
const relcl_model_config *relcl_model_preset(const char *name);

/* One-line human summary ("6+6 layers, d_model 512, 8 heads, d_ff 2048, relative k=16"). */
void relcl_model_config_describe(const relcl_model_config *cfg, char *buf, size_t size);

typedef struct relcl_model relcl_model;

/* Build the model and initialize its parameters from seed (Xavier-uniform matrices,
 * N(0, d_model^-0.5) embeddings, zero biases, unit layer-norm gains). Checks the config
 * (d_model divisible by heads, sizes > 0, ...) and returns RELCL_ERR_INVALID_ARG naming
 * the field. */
relcl_status relcl_model_create(relcl_context *ctx, const relcl_model_config *cfg,
                                uint64_t seed, relcl_model **out);
void relcl_model_destroy(relcl_model *model);
const relcl_model_config *relcl_model_get_config(const relcl_model *model);

/* ---- the parameter table ---- */

typedef enum relcl_arena {
  RELCL_ARENA_PARAMS = 0,
  RELCL_ARENA_GRADS = 1,
  RELCL_ARENA_ADAM_M = 2,
  RELCL_ARENA_ADAM_V = 3,
} relcl_arena;

typedef struct relcl_tensor_info {
  const char *name;
  int ndim;
  size_t shape[4];
  size_t offset; /* in floats, within every arena */
  size_t size;   /* elements */
} relcl_tensor_info;

size_t relcl_model_tensor_count(const relcl_model *model);
relcl_tensor_info relcl_model_tensor(const relcl_model *model, size_t i);
size_t relcl_model_param_count(const relcl_model *model); /* floats in one arena */
cl_mem relcl_model_arena(const relcl_model *model, relcl_arena which);
/* Blocking copies of a whole arena (param_count floats). */
relcl_status relcl_model_arena_read(relcl_model *model, relcl_arena which, float *dst);
relcl_status relcl_model_arena_write(relcl_model *model, relcl_arena which, const float *src);

/* ---- saving and loading (lib/model/model_io.c) ----
 *
 * A saved model is a relcl checkpoint (relcl_checkpoint.h, safetensors): every parameter
 * under its tensor name, the configuration as JSON in the metadata key "relcl.config", and,
 * when asked, the two Adam moments ("adam_m/NAME", "adam_v/NAME") and the optimizer's step
 * ("relcl.adam_step", decimal). relcl-train's checkpoints are such files.
 *
 * The configuration's JSON is one object with exactly these keys (relcl-train's flag names):
 *   "vocab", "vocab-fnv1a64" (the vocabulary's relcl_spm_hash, 16 lowercase hex digits),
 *   "enc-layers", "dec-layers", "d-model", "heads", "d-ff", "dropout", "label-smoothing",
 *   "positions" ("absolute" | "relative" | "both"), "max-relative-position",
 *   "relative-per-head", "relative-keys-only", "pre-norm" (booleans), "max-length".
 * Reading is strict, since a decoder allocates by these numbers: a missing, unknown or
 * repeated key, a wrong type, a number that should be an integer and is not (500.7), or a
 * value out of range (max-length over RELCL_MODEL_MAX_LENGTH, layers over 31, ...) is
 * RELCL_ERR_FORMAT naming the key. */

/* Longest max_length a saved configuration may declare (positions, BOS/EOS included). */
#define RELCL_MODEL_MAX_LENGTH (1 << 21)
/* Metadata key of the optimizer's step in a saved model. */
#define RELCL_MODEL_ADAM_STEP_KEY "relcl.adam_step"

/* The configuration as one line of JSON (keys as above, in that order). *out is malloc'ed;
 * the caller frees it. A value that reading would refuse (max_length over
 * RELCL_MODEL_MAX_LENGTH, ...) is RELCL_ERR_INVALID_ARG: what is saved can be loaded. */
relcl_status relcl_model_config_to_json(const relcl_model_config *cfg, uint64_t vocab_hash,
                                        char **out);
/* Parse it back into *cfg and *vocab_hash (may be NULL). The message names the key. */
relcl_status relcl_model_config_from_json(const char *json, relcl_model_config *cfg,
                                          uint64_t *vocab_hash);
/* The configuration of an open checkpoint ("relcl.config"); errors say "PATH: relcl.config:
 * ...", or "PATH: no relcl.config: not a relcl model" when it has none. */
relcl_status relcl_model_checkpoint_config(const relcl_checkpoint *ck, relcl_model_config *cfg,
                                           uint64_t *vocab_hash);
/* Whether the weights of a model of configuration `have` fit one of `want`: 1 when every
 * field that shapes the parameters (vocab, layers, widths, heads, positions and their
 * options) agrees, else 0 with the first difference in why as "d-model 32, not 64" (why may
 * be NULL). dropout, label_smoothing and max_length do not count. */
int relcl_model_config_compatible(const relcl_model_config *have, const relcl_model_config *want,
                                  char *why, size_t size);

/* Flag of relcl_model_save and relcl_model_restore: the Adam moments and step too. */
enum { RELCL_MODEL_OPTIMIZER = 1 };

typedef struct relcl_model_save_opts {
  int flags;                        /* 0 or RELCL_MODEL_OPTIMIZER */
  uint64_t adam_step;               /* with RELCL_MODEL_OPTIMIZER: Adam updates made so far */
  uint64_t vocab_hash;              /* written into "relcl.config" (relcl_spm_hash) */
  const relcl_checkpoint_meta *meta; /* further metadata, kept as given (may be NULL) */
  size_t n_meta;                    /* keys must not be "relcl.config" or "relcl.adam_step" */
} relcl_model_save_opts;

/* Write the model to path atomically (relcl_checkpoint_save: a crash leaves the old file).
 * Reads the arenas back from the device (blocking). */
relcl_status relcl_model_save(relcl_model *model, const char *path,
                              const relcl_model_save_opts *opts);

/* Copy a checkpoint's parameters (and with RELCL_MODEL_OPTIMIZER its Adam moments, and the
 * step into *adam_step, which may be NULL) into an existing model, bit for bit. Every tensor
 * of the model must be in the file with its exact shape, every tensor of the file must be the
 * model's (or its moment), and every value read finite: a missing, extra or misshapen tensor,
 * or a NaN or infinity, is RELCL_ERR_FORMAT naming the tensor, and the model is then left as
 * it was. The configuration in the file is not compared: see
 * relcl_model_config_compatible. */
relcl_status relcl_model_restore(relcl_model *model, const relcl_checkpoint *ck, int flags,
                                 uint64_t *adam_step);

/* Create the model a checkpoint describes ("relcl.config") on ctx, with its parameters
 * (relcl_model_restore, flags as there). vocab_hash (may be NULL) receives the vocabulary's
 * hash from the configuration, to check a SentencePiece model against (relcl_spm_hash). */
relcl_status relcl_model_load_checkpoint(relcl_context *ctx, const relcl_checkpoint *ck,
                                         int flags, relcl_model **out, uint64_t *vocab_hash);
/* The same from a file (opened with relcl_checkpoint_open, checksums verified). */
relcl_status relcl_model_load(relcl_context *ctx, const char *path, int flags,
                              relcl_model **out, uint64_t *vocab_hash);

/* ---- training ---- */

/* A batch as the host has it (see relcl_data.h's relcl_batch): ids padded with 0. */
typedef struct relcl_model_batch {
  int batch, src_len, tgt_len;
  const int32_t *src;      /* (batch, src_len) */
  const int32_t *tgt_in;   /* (batch, tgt_len) BOS y */
  const int32_t *tgt_out;  /* (batch, tgt_len) y EOS */
  const int32_t *src_lens; /* (batch) */
  const int32_t *tgt_lens; /* (batch) */
} relcl_model_batch;

typedef struct relcl_model_stats {
  double loss_sum;  /* label-smoothed cross-entropy summed over target tokens */
  double nll_sum;   /* plain negative log-likelihood summed over target tokens */
  size_t tokens;    /* target tokens (not padding) */
} relcl_model_stats;

/* Set every gradient to zero (one fill of the gradient arena). */
relcl_status relcl_model_zero_grad(relcl_model *model);

/* Forward and backward of one (micro-)batch with dropout; adds the gradient of the SUMMED
 * loss to the gradient arena, and the batch's sums to *stats. Dropout masks come from
 * Philox with (seed, stream = f(step, micro, layer, site)), so a step is reproducible.
 * micro numbers the micro-batches of one update (gradient accumulation). */
relcl_status relcl_model_train_batch(relcl_model *model, const relcl_model_batch *batch,
                                     uint64_t seed, uint64_t step, int micro,
                                     relcl_model_stats *stats);

/* Loss without dropout and without gradients (validation). */
relcl_status relcl_model_eval_batch(relcl_model *model, const relcl_model_batch *batch,
                                    relcl_model_stats *stats);

typedef struct relcl_adam_opts {
  float lr;         /* this step's learning rate */
  float beta1, beta2, eps;
  float grad_scale; /* multiplies the gradients first (1 / target tokens of the update) */
  float clip_norm;  /* clip the scaled gradient's L2 norm to this; <= 0: no clipping */
} relcl_adam_opts;

/* One Adam update with bias correction at step (from 1). *grad_norm receives the scaled
 * gradient's L2 norm before clipping (may be NULL). Deterministic: fixed-order reductions. */
relcl_status relcl_model_adam_step(relcl_model *model, const relcl_adam_opts *opts,
                                   uint64_t step, float *grad_norm);

/* lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step from 1. */
float relcl_lr_schedule(int d_model, uint64_t step, uint64_t warmup, float scale);

/* ---- inference ---- */

/* Greedy decoding of a batch of sources (src as in relcl_model_batch; tgt fields unused):
 * out (batch, max_out) receives ids without BOS, ending at EOS or max_out; out_lens the
 * count of ids before EOS. Runs on the cached incremental decoder (relcl_decoder, below),
 * and gives exactly what relcl_model_beam_search gives with beam_size 1. */
relcl_status relcl_model_greedy(relcl_model *model, const relcl_model_batch *src, int max_out,
                                int32_t *out, int32_t *out_lens);

/* ---- incremental decoding (lib/model/decode.c) ----
 *
 * The encoder runs once per batch of sources; the decoder then advances one position per
 * step and keeps every layer's self-attention keys and values in a cache, so that step t
 * costs one new position: its query attends to the cached keys 0..t (with relative
 * positions only that query's 2k+1 relative logits and label sums are formed: no work over
 * the prefix beyond the content terms), and the encoder-decoder attention reads keys and
 * values computed once from the encoder output. Dropout is off.
 *
 * Rows: a decoder holds n_hyps = batch * beam hypotheses; row r decodes source r / beam
 * (a beam search keeps `beam` rows per sentence; greedy decoding has beam 1). */
typedef struct relcl_decoder relcl_decoder;

/* Encode src (as in relcl_model_greedy: tgt fields unused) and make room for max_len
 * decoder positions (0 .. max_len - 1). Device memory: the caches, 4 * dec_layers * n_hyps
 * * max_len * d_model floats (keys and values, twice: reordering copies from one copy to
 * the other), plus the encoder-decoder keys and values, 2 * dec_layers * batch * src_len *
 * d_model floats. The model must outlive the decoder; its parameters are read at every step.
 * The model's own batch buffers are used only during this call. */
relcl_status relcl_decoder_create(relcl_model *model, const relcl_model_batch *src, int beam,
                                  int max_len, relcl_decoder **out);
void relcl_decoder_destroy(relcl_decoder *dec);
int relcl_decoder_hyps(const relcl_decoder *dec);     /* n_hyps = batch * beam (now) */
int relcl_decoder_position(const relcl_decoder *dec); /* steps taken: position of the next input */

/* One step: tokens (n_hyps) are the inputs at position t = relcl_decoder_position() (BOS at
 * t = 0, then each hypothesis's last token). Leaves the logits of the token at t + 1,
 * (n_hyps, vocab), on the device. An id outside the vocabulary or a step past max_len is
 * RELCL_ERR_INVALID_ARG. */
relcl_status relcl_decoder_step(relcl_decoder *dec, const int32_t *tokens);
/* The last step's logits (n_hyps, vocab) on the device; overwritten by the next step. */
relcl_buf relcl_decoder_logits(const relcl_decoder *dec);
/* The last step's log-probabilities on the host: out (n_hyps, vocab) = z - logsumexp(z) per
 * row, computed in double from the device's logits. */
relcl_status relcl_decoder_logprobs(relcl_decoder *dec, float *out);
/* The last step's most likely token per row, found on the device (the smallest index of the
 * largest logit): out (n_hyps). */
relcl_status relcl_decoder_argmax(relcl_decoder *dec, int32_t *out);
/* Reorder the hypotheses: row r continues from row from[r]'s cache (every position so far),
 * as after a beam-search step. from[r] must decode the same source as r (from[r] / beam ==
 * r / beam). A gather on the device; the identity costs nothing. */
relcl_status relcl_decoder_reorder(relcl_decoder *dec, const int32_t *from);
/* Keep `batch` of the current sources and reorder their rows: new source j is current
 * source sources[j], and new row r continues from current row from[r], which must decode
 * current source sources[r / beam]. n_hyps becomes batch * beam: finished sentences stop
 * costing anything. Gathers caches and encoder keys and values on the device. */
relcl_status relcl_decoder_select(relcl_decoder *dec, int batch, const int32_t *sources,
                                  const int32_t *from);

/* ---- beam search (lib/model/beam.c) ---- */

typedef struct relcl_beam_opts {
  int beam_size;        /* hypotheses kept per sentence; 1 is greedy decoding */
  int n_best;           /* hypotheses returned per sentence, 1 .. beam_size */
  float length_penalty; /* alpha: hypotheses rank by logprob / ((5 + len) / 6)^alpha, len
                           counting the EOS (Wu et al. 2016); 0 ranks by log-probability */
  float max_len_a;      /* sentence i emits at most floor(a * src_lens[i]) + b tokens, EOS */
  int max_len_b;        /* included, and never more than the model's max_length */
} relcl_beam_opts;

/* beam 4, n_best 1, length penalty 0.6, a = 1, b = 50 (the source's length + 50) */
relcl_beam_opts relcl_beam_opts_default(void);

typedef struct relcl_hyp {
  const int32_t *ids; /* the output, without BOS and EOS; owned by the result */
  int len;            /* count of ids */
  int finished;       /* 1: ended with EOS; 0: cut at the sentence's maximum length */
  double logprob;     /* sum of the log-probabilities of every emitted token, EOS included */
  double score;       /* logprob / ((5 + len + finished) / 6)^alpha: what ranks hypotheses */
} relcl_hyp;

typedef struct relcl_beam_result relcl_beam_result;

/* Beam search over a batch of sources (tgt fields unused), every sentence at once
 * (batch * beam_size decoder rows, relcl_decoder). Each step extends every live hypothesis
 * of a sentence by every token and keeps the 2 * beam_size best extensions by log-
 * probability: those ending in EOS among the first beam_size finish, the best beam_size of
 * the others stay live (fairseq's procedure). A sentence stops when beam_size hypotheses
 * have finished, or at its maximum length (its live hypotheses are then returned unfinished);
 * the search stops when every sentence has. Deterministic: equal scores go to the lower row,
 * then the lower token id, so beam_size 1 gives exactly relcl_model_greedy's output.
 * *out receives the n-best lists; free it with relcl_beam_result_destroy. On a CPU device
 * this call (and relcl_model_greedy) also holds, until it returns, a copy of the decoder's
 * weights in the layout its products read (up to the decoder's parameters and the output
 * embedding again, at most 512 MB), made once instead of at every step: the model's
 * parameters must not change while it runs. */
relcl_status relcl_model_beam_search(relcl_model *model, const relcl_model_batch *src,
                                     const relcl_beam_opts *opts, relcl_beam_result **out);
void relcl_beam_result_destroy(relcl_beam_result *res);
/* Hypotheses of sentence i (0 .. batch - 1), best score first: count in 1 .. n_best. */
int relcl_beam_result_count(const relcl_beam_result *res, int i);
relcl_hyp relcl_beam_result_hyp(const relcl_beam_result *res, int i, int k);
/* Decoder steps the search ran (every sentence advances together). */
int relcl_beam_result_steps(const relcl_beam_result *res);

#ifdef __cplusplus
}
#endif
#endif
