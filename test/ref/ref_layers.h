/* ref_layers.h: the plain-C oracle for relcl_layers.h, written from the formulas (layer norm's
 * Jacobian entry by entry, the cross-entropy as -sum q log p, Adam as in Kingma & Ba with
 * PyTorch's placement of eps), in double, one element at a time. No relcl or OpenCL call.
 * Row-major shapes as in relcl_layers.h.
 */
#ifndef RELCL_TEST_REF_LAYERS_H
#define RELCL_TEST_REF_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* y (rows, d), mean, rstd (rows) */
void ref_layernorm_forward(int rows, int d, double eps, const float *x, const float *gain,
                           const float *bias, double *y, double *mean, double *rstd);
/* The same on double inputs (the whole-model reference, ref_model.c). */
void ref_layernorm_forward_d(int rows, int d, double eps, const double *x, const double *gain,
                             const double *bias, double *y, double *mean, double *rstd);
/* dx (rows, d) = J^T dy with J the Jacobian of one row's y in x, built entry by entry;
 * dgain, dbias (d) = the sums over rows (overwritten). */
void ref_layernorm_backward(int rows, int d, double eps, const float *x, const float *gain,
                            const float *dy, double *dx, double *dgain, double *dbias);
void ref_layernorm_backward_d(int rows, int d, double eps, const double *x, const double *gain,
                              const double *dy, double *dx, double *dgain, double *dbias);

/* out (n, d) = scale * table[ids]; ids outside 0..vocab-1 give zero rows */
void ref_embedding_forward(int n, int d, int vocab, const int32_t *ids, const float *table,
                           double scale, double *out);
/* dtable (vocab, d) += scale * dout[t] for every position t, in double */
void ref_embedding_backward(int n, int d, int vocab, const int32_t *ids, const float *dout,
                            double scale, double *dtable);
/* The same sum in float, in relcl's documented order (per distinct id ascending, its
 * positions ascending, s += dout, then dtable += scale * s): for the bit-exact test. */
void ref_embedding_backward_float(int n, int d, int vocab, const int32_t *ids,
                                  const float *dout, float scale, float *dtable);

/* 1 if element i survives relcl_dropout_forward's mask: word i mod 4 of Philox4x32-10 with
 * key (seed lo, seed hi) and counter (i/4 lo, i/4 hi, stream lo, stream hi) is
 * >= (uint32_t)(p * 2^32) (p = 0 keeps everything). */
int ref_dropout4_keep(uint64_t seed, uint64_t stream, uint64_t i, float p);

/* y = residual + keep * x * (float)(1/(1-p)) computed in float as relcl documents (exact:
 * one product and one sum per element), keep from ref_dropout4_keep; residual may be NULL. */
void ref_dropout_forward(size_t n, float p, uint64_t seed, uint64_t stream, const float *x,
                         const float *residual, float *y);

/* y (rows, cols) = residual + keep * (x + bias[c]) * (float)(1/(1-p)), in float: the sum
 * x + bias first (what a linear layer with its bias gives), then the inverted dropout of
 * ref_dropout_forward over the flat index i = r cols + c, then the residual; exact (one
 * float operation at a time). p = 0 keeps everything and does not scale. */
void ref_bias_dropout_residual(int rows, int cols, float p, uint64_t seed, uint64_t stream,
                               const float *x, const float *bias, const float *residual,
                               float *y);

/* y (rows, out) = x W^T + b (b may be NULL) */
void ref_linear_forward(int rows, int in, int out, const float *x, const float *W,
                        const float *b, double *y);
void ref_linear_forward_d(int rows, int in, int out, const double *x, const double *W,
                          const double *b, double *y);
/* dx = dy W, dW = dy^T x, db = sum_r dy (all overwritten) */
void ref_linear_backward(int rows, int in, int out, const float *x, const float *W,
                         const float *dy, double *dx, double *dW, double *db);
/* on double inputs; db may be NULL (no bias) */
void ref_linear_backward_d(int rows, int in, int out, const double *x, const double *W,
                           const double *dy, double *dx, double *dW, double *db);

/* y (cols) = column sums of x (rows, cols; stride ld) */
void ref_colsum(int rows, int cols, const float *x, int ld, double *y);
double ref_sumsq(size_t n, const float *x);

/* losses (rows, 2) and dlogits (rows, V), with q = (1-eps) onehot + eps/V, from the
 * explicit softmax and -sum_v q_v log p_v; rows whose target is ignore_id or outside
 * 0..V-1 get zeros. */
void ref_xent(int rows, int V, double eps, int ignore_id, const float *logits,
              const int32_t *targets, double grad_scale, double *losses, double *dlogits);

void ref_xent_d(int rows, int V, double eps, int ignore_id, const double *logits,
                const int32_t *targets, double grad_scale, double *losses, double *dlogits);

/* first index of the largest non-NaN entry of each row (0 for a row of NaN) */
void ref_argmax(int rows, int cols, const float *x, int ld, int32_t *out);

/* A batch of products, row-major, each C_b = alpha op(A_b) op(B_b) + beta C_b in double:
 * op(A) is m x k (A as stored is k x m when ta), op(B) k x n (B as stored n x k when tb);
 * entry b's operands start b * stride into a, b and c. With beta 0, C is not read. */
void ref_gemm_batched(int ta, int tb, int m, int n, int k, double alpha, const float *a,
                      int lda, size_t stride_a, const float *b, int ldb, size_t stride_b,
                      double beta, double *c, int ldc, size_t stride_c, int batch);

/* One Adam step in double on n entries; clip_norm <= 0: no clipping. */
void ref_adam(size_t n, double lr, double beta1, double beta2, double eps, uint64_t step,
              double grad_scale, double clip_norm, const float *grad, double *param, double *m,
              double *v);

#endif
