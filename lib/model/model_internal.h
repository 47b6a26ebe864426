/* The model's private layout, shared by model.c (configuration, parameter table,
 * initialization, optimizer, entry points) and model_graph.c (the forward and backward
 * passes over the activation and work buffers). Not installed. */
#ifndef RELCL_MODEL_INTERNAL_H
#define RELCL_MODEL_INTERNAL_H

#include "flags.h"
#include "runtime.h"
#include "relcl_model.h"

/* Every tensor of the parameter arenas and of the activation and work buffers starts on a
 * 512-byte boundary, the largest CL_DEVICE_MEM_BASE_ADDR_ALIGN of the devices relcl runs on
 * (128 bytes on PoCL, 512 on NVIDIA's): relcl__gemm can then hand it to CLBlast as a
 * sub-buffer at offset 0, which CLBlast reads in place instead of copying it first
 * (lib/runtime/gemm.c). */
#define RELCL__TENSOR_ALIGN 128 /* floats */
#define RELCL__ALIGN_UP(n) \
  (((n) + RELCL__TENSOR_ALIGN - 1) / RELCL__TENSOR_ALIGN * RELCL__TENSOR_ALIGN)

#define RELCL__NONE ((size_t)-1) /* an absent tensor or buffer region */
#define RELCL__LN_EPS 1e-5f       /* epsilon of every layer norm of the model */

/* Offsets (floats, the same in every arena) of one layer's parameters. */
typedef struct relcl__ln_p {
  size_t g, b;
} relcl__ln_p;

/* wq, wk, wv are adjacent (one (3D, D) matrix for self-attention, wk|wv one (2D, D) matrix
 * for cross attention), and so are their biases. rel_k / rel_v are RELCL__NONE when absent. */
typedef struct relcl__attn_p {
  size_t wq, bq, wo, bo, rel_k, rel_v;
} relcl__attn_p;

typedef struct relcl__ffn_p {
  size_t w1, b1, w2, b2;
} relcl__ffn_p;

typedef struct relcl__enc_p {
  relcl__attn_p self;
  relcl__ln_p n1;
  relcl__ffn_p ffn;
  relcl__ln_p n2;
} relcl__enc_p;

typedef struct relcl__dec_p {
  relcl__attn_p self;
  relcl__ln_p n1;
  relcl__attn_p cross;
  relcl__ln_p n2;
  relcl__ffn_p ffn;
  relcl__ln_p n3;
} relcl__dec_p;

/* Activations of one residual block, offsets into the activation buffer:
 *   post-norm: s = x + dropout(F(x)) at ln_x, out = LN(s); sub_in = x
 *   pre-norm:  u = LN(x) at sub_in, out = x + dropout(F(u)); ln_x = x
 * F's own activations: attention Q|K|V in head layout (qkv_h), the weights (probs) and the
 * merged output (zm); feed-forward hidden h. */
typedef struct relcl__block_a {
  size_t x_in, ln_x, sub_in, mean, rstd, out;
  size_t keep; /* the block's dropout keep bits (ops.h), from its forward to its backward */
  size_t qkv_h, probs, zm, h;
  size_t saved; /* attention's state from its forward to its backward (ops.h) */
} relcl__block_a;

/* Work regions (floats, in the work buffer) and int regions (in the ids buffer). */
typedef struct relcl__layout {
  int B, S, T;          /* shape the layout holds (T may be a capacity: greedy) */
  size_t act_floats, work_floats, ids_ints;
  /* activations */
  size_t enc_x0, enc_out, enc_mean, enc_rstd; /* enc_out: final norm (pre) or last block */
  size_t dec_x0, dec_out, dec_mean, dec_rstd;
  size_t enc_keep, dec_keep; /* the embeddings' dropout keep bits */
  relcl__block_a *enc; /* 2 per encoder layer */
  relcl__block_a *dec; /* 3 per decoder layer */
  /* work */
  size_t qkv, zh, a, dzm, dh, g0, g1, d_enc, d_emb, logits, losses;
  size_t f_ld; /* the feed-forward hidden's (h, dh) rows this far apart (relcl__act_ld) */
  size_t logit_rows; /* rows of logits per chunk */
  /* ids */
  size_t src, tgt_in, tgt_out, src_lens, tgt_lens, csr_tok, csr_ofs, csr_pos, argmax;
} relcl__layout;

struct relcl_model {
  relcl_context *ctx;
  relcl_model_config cfg;
  /* parameter table */
  relcl_tensor_info *tensors;
  size_t n_tensors, cap_tensors;
  char *names; /* every name, NUL-separated; tensors[i].name points into it once built */
  size_t *name_at; /* offset of tensor i's name in names, while the table grows */
  size_t names_used, names_cap;
  size_t param_count;
  cl_mem arena[4];
  size_t emb;
  relcl__enc_p *enc;
  relcl__dec_p *dec;
  relcl__ln_p enc_norm, dec_norm; /* pre-norm only */
  /* buffers that grow with the batch shape and are reused */
  cl_mem act, work, ids, stats;
  size_t act_cap, work_cap, ids_cap;
  relcl__layout lay;
  /* host staging of one batch's ints */
  int32_t *h_ids;
  size_t h_ids_cap;
  /* decode.c: the incremental decoder's buffers, kept between decoders */
  struct relcl__dec_ws *dec_ws;
};

/* model_graph.c */
relcl_status relcl__model_layout(relcl_model *m, int B, int S, int T);
void relcl__model_layout_free(relcl__layout *lay);
/* Forward (and with train, backward) of a batch whose ids are uploaded; dropout p > 0 only
 * when train. Leaves (loss sum, nll sum) in stats[0..1]. */
relcl_status relcl__model_run(relcl_model *m, const relcl_model_batch *batch, bool train,
                              uint64_t seed, uint64_t step, int micro, int n_csr_tokens);
/* Greedy decoding that reruns the decoder over the whole prefix at every step: the
 * reference the cached decoder is tested and timed against. */
relcl_status relcl__model_greedy_full(relcl_model *m, const relcl_model_batch *src,
                                      int max_out, int32_t *out, int32_t *out_lens);
/* The encoder alone, without dropout: uploads src's ids and leaves the encoder output
 * (B S, D) at lay.enc_out in act, for the incremental decoder (decode.c). */
relcl_status relcl__model_encode(relcl_model *m, const relcl_model_batch *src);

/* model.c: the checks relcl_model_greedy makes of a batch of sources (ids in the
 * vocabulary, lengths, sizes); op names the caller in the message. */
relcl_status relcl__model_check_src(const relcl_model *m, const relcl_model_batch *b,
                                    const char *op);

/* The decoder buffers a model keeps between decodings: the model owns them (model.c frees
 * them in relcl__decode_ws_free, at relcl_model_destroy), decode.c lays them out and fills
 * them (buf[i] per decode.c's W_* slots). */
typedef struct relcl__dec_ws relcl__dec_ws;
struct relcl__dec_ws {
  int n; /* W_CACHE0 + 4 L (decode.c) */
  cl_mem *buf;
  size_t *cap; /* elements */
  bool busy;
};
void relcl__decode_ws_free(relcl__dec_ws *ws);

/* decode.c: whether greedy decoding drops finished sentences from a decoder of `rows` rows
 * when `kept` are left (beam.c follows the same rule at beam 1). */
bool relcl__decode_compact(int rows, int kept);

/* decode.c: the last step's logits (n_hyps, V) and each row's log-sum-exp (n_hyps), found on
 * the device: what a beam search needs from a step. */
relcl_status relcl__decoder_read(relcl_decoder *d, float *logits, double *lse);
/* Beam search's candidates on the device: the kk <= RELCL__TOPK_MAX largest logits of each
 * hypothesis row, largest first, equal ones by increasing id, NaN never (id -1 past a row's
 * last), into val, id (N, kk), and each row's log-sum-exp as relcl__decoder_read gives it:
 * kk N numbers cross to the host instead of N V. */
#define RELCL__TOPK_MAX RELCL_TOPK_MAX /* kernels/flags.h: the kernel's array size */
relcl_status relcl__decoder_read_top(relcl_decoder *d, int kk, float *val, int32_t *id,
                                     double *lse);
/* The same selection on any rows: z (N, V) into val, id (N, kk) and z0 (N) = z[:, 0]
 * (decode.c, kernels/decode.cl's row_topk). */
relcl_status relcl__rows_topk(relcl_context *ctx, int N, int V, int kk, relcl_buf z,
                              relcl_buf val, relcl_buf id, relcl_buf z0);

/* decode.c: greedy decoding through the cached incremental decoder (relcl_model_greedy). */
relcl_status relcl__decode_greedy(relcl_model *m, const relcl_model_batch *src, int max_out,
                                  int32_t *out, int32_t *out_lens);
/* Upload a batch's ids (and, for training, the embedding-gradient index); *n_tokens gets the
 * index's distinct ids. */
relcl_status relcl__model_upload(relcl_model *m, const relcl_model_batch *batch, bool with_tgt,
                                 bool with_index, int *n_tokens);

#endif
