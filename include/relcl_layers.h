/* relcl_layers: the Transformer's building blocks other than attention, each a forward and a
 * backward on the device, as free functions over relcl_buf tensors (outputs named last).
 * relcl_model is built from these; they are public so that other models and the tests can
 * use them one at a time.
 *
 * Conventions as in relcl.h: float32, row-major, dense unless a leading dimension is given;
 * every fallible call returns relcl_status with details in relcl_last_error(); work is
 * enqueued on the context's in-order queue. Deterministic: no atomics, every reduction runs
 * in a fixed order, so the same inputs on the same device give the same bits.
 * "Accumulate" arguments choose between y = result (0) and y += result (1); parameter
 * gradients (dW, db, dgain, dbias, dtable) always accumulate, so micro-batches add up.
 * Unless stated otherwise an output may not alias an input.
 */
#ifndef RELCL_LAYERS_H
#define RELCL_LAYERS_H

#include "relcl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layer normalization (Ba et al. 2016) -------------------------------------------- */

/* x, y (rows, d); gain, bias (d); mean, rstd (rows) saved for the backward:
 *   mean_r = sum_c x_rc / d,  var_r = sum_c (x_rc - mean_r)^2 / d,  rstd_r = 1/sqrt(var_r + eps)
 *   y_rc = (x_rc - mean_r) rstd_r gain_c + bias_c
 * y may be x (in place). */
relcl_status relcl_layernorm_forward(relcl_context *ctx, int rows, int d, float eps,
                                     relcl_buf x, relcl_buf gain, relcl_buf bias, relcl_buf y,
                                     relcl_buf mean, relcl_buf rstd);

/* With xhat = (x - mean) rstd and g = dy * gain:
 *   dx    = rstd (g - mean_c(g) - xhat mean_c(g xhat))   (= or += by accumulate)
 *   dgain += sum_r dy xhat,  dbias += sum_r dy           (either may be absent) */
relcl_status relcl_layernorm_backward(relcl_context *ctx, int rows, int d, relcl_buf x,
                                      relcl_buf gain, relcl_buf mean, relcl_buf rstd,
                                      relcl_buf dy, relcl_buf dx, int accumulate,
                                      relcl_buf dgain, relcl_buf dbias);

/* ---- token embedding ------------------------------------------------------------------ */

/* out (n, d) row t = scale * table[ids[t]]; table (vocab, d), ids (n) int32.
 * An id outside 0..vocab-1 gives a zero row (the caller validates ids on the host). */
relcl_status relcl_embedding_forward(relcl_context *ctx, int n, int d, int vocab,
                                     relcl_buf ids, relcl_buf table, float scale,
                                     relcl_buf out);

/* The host side of the deterministic embedding gradient: a compressed list of the positions
 * of each distinct id. ids (n); positions whose id is < 0 or >= vocab are skipped. Writes
 * tokens (the distinct ids, ascending), offsets (n_tokens + 1) and positions (the positions
 * of tokens[u] are positions[offsets[u] .. offsets[u+1]-1], ascending). Arrays are the
 * caller's: tokens and positions hold n entries, offsets n + 1. Host only, O(n + vocab). */
relcl_status relcl_embedding_index(const int32_t *ids, int n, int vocab, int32_t *tokens,
                                   int32_t *offsets, int32_t *positions, int *n_tokens);

/* dtable[tokens[u]] += scale * s_u with s_u = dout[positions[offsets[u]]] + ... summed in
 * float from left to right over the token's positions (in the order given): a repeated token
 * sums the same way every run. tokens, offsets, positions: as relcl_embedding_index wrote
 * them, on the device (int32). dout (n, d) with n > every position; dtable (vocab, d). */
relcl_status relcl_embedding_backward(relcl_context *ctx, int n_tokens, int d, int vocab,
                                      relcl_buf tokens, relcl_buf offsets,
                                      relcl_buf positions, relcl_buf dout, float scale,
                                      relcl_buf dtable);

/* ---- dropout (inverted) ---------------------------------------------------------------- */

/* y = residual + mask * x / (1 - p)  (residual may be absent; y may be x or residual).
 * Element i is kept iff word (i mod 4) of Philox4x32-10 with key (seed lo, seed hi) and
 * counter (i/4, 0, stream lo, stream hi) is >= p * 2^32 (words numbered x, y, z, w = 0..3):
 * all four words of a call are used, so one (seed, stream) pair names one mask on every
 * device. n < 2^32 - 4. p in [0, 1); p = 0 keeps everything. */
relcl_status relcl_dropout_forward(relcl_context *ctx, size_t n, float p, uint64_t seed,
                                   uint64_t stream, relcl_buf x, relcl_buf residual,
                                   relcl_buf y);

/* dx = mask * dy / (1 - p) (= or += by accumulate; dx may be dy when not accumulating). */
relcl_status relcl_dropout_backward(relcl_context *ctx, size_t n, float p, uint64_t seed,
                                    uint64_t stream, relcl_buf dy, relcl_buf dx,
                                    int accumulate);

/* ---- linear layer ----------------------------------------------------------------------- */

/* y (rows, out) = x (rows, in) W^T + b;  W (out, in) as in PyTorch; b (out) may be absent.
 * The product runs in relcl's own kernel on CPUs, in CLBlast elsewhere (README, "Speed"). */
relcl_status relcl_linear_forward(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                                  relcl_buf W, relcl_buf b, relcl_buf y);

/* The same product for batch sequences of n rows, with y in the heads layout that
 * relcl_attn_forward reads: out = parts heads head_dim, and y holds part after part, each
 * (batch, heads, n, head_dim), as relcl_heads_split would make of y's rows (a packed Q|K|V
 * projection gives Q, K and V one after the other). On CPUs the product's store writes it
 * there where head_dim is a multiple of the store's 2 W columns (the head split costs no
 * pass), elsewhere it goes through scratch and the split. */
relcl_status relcl_linear_forward_heads(relcl_context *ctx, int batch, int n, int in, int out,
                                        int heads, int head_dim, relcl_buf x, relcl_buf W,
                                        relcl_buf b, relcl_buf y);

/* dx (rows, in) = dy W (= or += by accumulate; absent: skipped),
 * dW += dy^T x (absent: skipped), db += sum_r dy (absent: skipped). */
relcl_status relcl_linear_backward(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                                   relcl_buf W, relcl_buf dy, relcl_buf dx, int accumulate,
                                   relcl_buf dW, relcl_buf db);

/* ---- element-wise ------------------------------------------------------------------------ */

/* y = max(x, 0) (y may be x). */
relcl_status relcl_relu_forward(relcl_context *ctx, size_t n, relcl_buf x, relcl_buf y);
/* dx = dy where y > 0, else 0; y is the forward's output (dx may be dy). */
relcl_status relcl_relu_backward(relcl_context *ctx, size_t n, relcl_buf y, relcl_buf dy,
                                 relcl_buf dx);

/* y = a + b (y may be a or b). */
relcl_status relcl_residual_add(relcl_context *ctx, size_t n, relcl_buf a, relcl_buf b,
                                relcl_buf y);

/* y = alpha x + beta y; with beta = 0, y's old contents are not read (may be garbage). */
relcl_status relcl_vec_axpby(relcl_context *ctx, size_t n, float alpha, relcl_buf x, float beta,
                             relcl_buf y);

/* ---- heads ------------------------------------------------------------------------------- */

/* Split: x is (batch, n, ld) and the heads are columns [0, heads*head_dim) of each row
 * counted from x.offset (so one packed Q|K|V matrix splits with ld = 3 d_model and offsets
 * 0, d_model, 2 d_model); y (batch, heads, n, head_dim):
 *   y[b][h][t][e] = x[(b n + t) ld + h head_dim + e]. */
relcl_status relcl_heads_split(relcl_context *ctx, int batch, int n, int heads, int head_dim,
                               relcl_buf x, int ld, relcl_buf y);
/* Merge, the inverse: x (batch, heads, n, head_dim) into columns of y (batch, n, ld). */
relcl_status relcl_heads_merge(relcl_context *ctx, int batch, int n, int heads, int head_dim,
                               relcl_buf x, relcl_buf y, int ld);

/* ---- reductions ---------------------------------------------------------------------------- */

/* y (cols) = sum over rows of x (rows, cols; row stride ld), = or += by accumulate. Rows are
 * summed in chunks of 64 in order, then the chunks in order. */
relcl_status relcl_colsum(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                          relcl_buf y, int accumulate);

/* out[0] = sum_i x_i^2 over n floats, in a fixed order (256 contiguous blocks, each a
 * work-group tree, then a tree over the blocks). */
relcl_status relcl_sumsq(relcl_context *ctx, size_t n, relcl_buf x, relcl_buf out);

/* ---- the loss ------------------------------------------------------------------------------ */

/* Label-smoothed cross-entropy fused with its gradient. Per row r of logits z (rows, V), with
 * target t = targets[r] (int32):
 *   p = softmax(z) (computed as exp(z - lse), lse = max + log sum exp(z - max): stable),
 *   q = (1 - eps) onehot(t) + eps / V         (eps spread over every class, t included)
 *   losses[r][0] = -sum_v q_v log p_v = (1 - eps)(lse - z_t) + eps (lse - mean_v z_v)
 *   losses[r][1] = -log p_t = lse - z_t       (the plain NLL, for perplexity)
 *   dlogits[r][v] = grad_scale (p_v - q_v)    (the gradient of grad_scale * losses[r][0])
 * A row whose target is ignore_id (the padding id), or outside 0..V-1, has zero losses and a
 * zero gradient. losses (rows, 2). dlogits may be logits (in place) or absent (no gradient). */
relcl_status relcl_xent_forward_backward(relcl_context *ctx, int rows, int V, float eps,
                                         int ignore_id, relcl_buf logits, relcl_buf targets,
                                         float grad_scale, relcl_buf dlogits,
                                         relcl_buf losses);

/* out[r] = the smallest index of the largest entry of row r of x (rows, cols; stride ld);
 * NaN entries are never chosen (a row of NaN gives 0). out int32. */
relcl_status relcl_argmax_rows(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                               relcl_buf out);

/* ---- Adam (Kingma & Ba 2015) with bias correction --------------------------------------- */

typedef struct relcl_adam_args {
  float lr, beta1, beta2, eps;
  uint64_t step;    /* from 1 */
  float grad_scale; /* g = grad_scale * grad first */
  float clip_norm;  /* > 0: with N = grad_scale * sqrt(sumsq[0]), g *= clip / (N + 1e-6) when
                       N > clip_norm (sumsq then required, e.g. from relcl_sumsq of grad) */
} relcl_adam_args;

/* For every i < n, with c = clipping factor (1 without clipping):
 *   g = grad_scale c grad_i;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   param -= (lr / (1 - b1^step)) m / (sqrt(v) / sqrt(1 - b2^step) + eps)
 * The clipping factor is computed on the device from sumsq: no host round trip. */
relcl_status relcl_adam_update(relcl_context *ctx, size_t n, const relcl_adam_args *args,
                               relcl_buf param, relcl_buf grad, relcl_buf m, relcl_buf v,
                               relcl_buf sumsq);

#ifdef __cplusplus
}
#endif
#endif
