/* The unchecked entry points of the ops (attention, layers, position encoding):
 * what the model's graph and the decoder call. Each public relcl_X checks its arguments
 * (NULL context, sizes, and clGetMemObjectInfo on every buffer, which costs a driver call
 * and a formatted name per buffer) and then calls relcl__X; the graph, whose buffers are
 * carved from arenas it sized itself, calls relcl__X directly. Same arguments and meaning
 * as the public function; given arguments the public one would refuse, behaviour is
 * undefined. Not installed. */
#ifndef RELCL_OPS_H
#define RELCL_OPS_H

#include "relcl.h"
#include "relcl_layers.h"

/* ---- attention.c, posenc.c ---- */
/* The outputs Z (forward) and dQ, dK, dV (backward) in the heads layout with z_ld, dq_ld,
 * dkv_ld 0 (as the public functions), else merged: sequence b's row i, head h at b n ld + i
 * ld + h dh (relcl__heads_merge's layout with row length ld, the buffer at head 0's column;
 * dK and dV share dkv_ld), written there by the products where relcl's own products run. */
/* With saved (relcl_attn_saved_size(desc) floats; absent: RELCL_BUF_NONE), as
 * relcl_attn_forward_saved / _backward_saved: the forward leaves there what the backward
 * would otherwise compute again before its products (alpha' = dropout(alpha) and, with the
 * a^V term, its label sums), and the backward given the same region reads them: the same
 * bits, without the backward's pass over the weights (Philox's rounds and the label sums a
 * second time). relcl-bench's default configuration on the
 * model-207 Xeon, this and the build before it alternated three times: attn_bwd_cpu 0.70 of
 * its time, attention's part of a step 0.80 (relative) and 0.85 (absolute). The model's graph
 * keeps the region for each attention block, beside its weights (model_graph.c). */
relcl_status relcl__attn_forward(relcl_context *ctx, const relcl_attn_desc *desc, relcl_buf Q,
                                 relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                 relcl_buf key_len, relcl_buf Z, size_t z_ld, relcl_buf probs,
                                 relcl_buf saved);
relcl_status relcl__attn_backward(relcl_context *ctx, const relcl_attn_desc *desc, relcl_buf Q,
                                  relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                  relcl_buf key_len, relcl_buf probs, relcl_buf saved,
                                  relcl_buf dZ, relcl_buf dQ, size_t dq_ld, relcl_buf dK,
                                  relcl_buf dV, size_t dkv_ld, relcl_buf dwK, relcl_buf dwV);
relcl_status relcl__posenc_add(relcl_context *ctx, relcl_buf x, int batch, int n, int d_model,
                               int pos0);

/* ---- layers.c ---- */
relcl_status relcl__layernorm_forward(relcl_context *ctx, int rows, int d, float eps,
                                      relcl_buf x, relcl_buf gain, relcl_buf bias, relcl_buf y,
                                      relcl_buf mean, relcl_buf rstd);
/* Layer norm of res + (x + xb), xb a row of d (a bias), in one pass: the bits of
 * relcl__bias_dropout_residual at p 0 into a buffer, then relcl__layernorm_forward of it
 * (y holds that sum until it is normalized in place; y may not be x, xb or res) */
relcl_status relcl__layernorm_add_forward(relcl_context *ctx, int rows, int d, float eps,
                                          relcl_buf x, relcl_buf xb, relcl_buf res,
                                          relcl_buf gain, relcl_buf bias, relcl_buf y,
                                          relcl_buf mean, relcl_buf rstd);
/* relcl__bias_dropout_residual(rows, d, p, seed, stream, x, xb, res, sx, keep), then
 * relcl__layernorm_forward of sx into y, mean, rstd; in one pass on CPUs where p > 0, keep
 * and xb are given and d is a multiple of 32 (a post-norm block's forward in training). The
 * same bits either way. */
relcl_status relcl__bias_dropout_residual_layernorm(relcl_context *ctx, int rows, int d,
                                                    float eps, float p, uint64_t seed,
                                                    uint64_t stream, relcl_buf x, relcl_buf xb,
                                                    relcl_buf res, relcl_buf sx, relcl_buf keep,
                                                    relcl_buf gain, relcl_buf bias, relcl_buf y,
                                                    relcl_buf mean, relcl_buf rstd);
relcl_status relcl__layernorm_backward(relcl_context *ctx, int rows, int d, relcl_buf x,
                                       relcl_buf gain, relcl_buf mean, relcl_buf rstd,
                                       relcl_buf dy, relcl_buf dx, int accumulate,
                                       relcl_buf dgain, relcl_buf dbias);
/* relcl__layernorm_backward (dx overwritten), then dropout's backward of dx into da:
 * relcl__dropout_backward(rows d, p, seed, stream, dx, da, 0, keep), then with dsum.mem
 * relcl__colsum(rows, d, da, d, dsum, 1) (the gradient of the bias added before the
 * dropout); in one pass over dx on CPUs with dgain or dbias and the forward's keep bits (a
 * post-norm block's backward), da's sums in it too where dgain and dbias are both given. The
 * same bits either way. */
relcl_status relcl__layernorm_dropout_backward(relcl_context *ctx, int rows, int d,
                                               relcl_buf x, relcl_buf gain, relcl_buf mean,
                                               relcl_buf rstd, relcl_buf dy, relcl_buf dx,
                                               relcl_buf dgain, relcl_buf dbias, float p,
                                               uint64_t seed, uint64_t stream, relcl_buf keep,
                                               relcl_buf da, relcl_buf dsum);
relcl_status relcl__embedding_forward(relcl_context *ctx, int n, int d, int vocab,
                                      relcl_buf ids, relcl_buf table, float scale,
                                      relcl_buf out);
/* relcl__embedding_forward, then (p > 0) relcl__dropout_forward(n d, p, seed, stream, out,
 * none, out, keep) in place; in one launch on CPUs where d is a multiple of 32 and keep is
 * given (the embeddings in training). The same bits either way. */
relcl_status relcl__embedding_dropout_forward(relcl_context *ctx, int n, int d, int vocab,
                                              relcl_buf ids, relcl_buf table, float scale,
                                              float p, uint64_t seed, uint64_t stream,
                                              relcl_buf out, relcl_buf keep);
relcl_status relcl__embedding_backward(relcl_context *ctx, int n_tokens, int d, int vocab,
                                       relcl_buf tokens, relcl_buf offsets,
                                       relcl_buf positions, relcl_buf dout, float scale,
                                       relcl_buf dtable);
relcl_status relcl__linear_forward(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                                   relcl_buf W, relcl_buf b, relcl_buf y);
/* The same with x's rows ldx floats apart (the feed-forward's hidden: relcl__act_ld) */
relcl_status relcl__linear_forward_ld(relcl_context *ctx, int rows, int in, int out,
                                      relcl_buf x, size_t ldx, relcl_buf W, relcl_buf b,
                                      relcl_buf y);
/* y = relu(x W^T + b): the feed-forward's first layer, bias and ReLU in one pass after the
 * GEMM (the same float operations as linear forward then relu forward); y's rows ldy floats
 * apart (out, or the padded width relcl__act_ld gives). */
relcl_status relcl__linear_relu_forward(relcl_context *ctx, int rows, int in, int out,
                                        relcl_buf x, relcl_buf W, relcl_buf b, relcl_buf y,
                                        size_t ldy);
relcl_status relcl__linear_backward(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                                    relcl_buf W, relcl_buf dy, relcl_buf dx, int accumulate,
                                    relcl_buf dW, relcl_buf db);
/* The same with dy's rows ldy floats apart */
relcl_status relcl__linear_backward_ld(relcl_context *ctx, int rows, int in, int out,
                                       relcl_buf x, relcl_buf W, relcl_buf dy, size_t ldy,
                                       relcl_buf dx, int accumulate, relcl_buf dW,
                                       relcl_buf db);
/* The same with y, or dx (overwritten), in the heads layout of relcl__heads_split: out (or
 * in) columns in parts of heads x head_dim, rows in sequences of n; each (sequence, head) an
 * n x head_dim matrix, part after part. Where relcl's gemm_cpu runs the product and each of
 * its blocks of columns lies in one head, its store writes them there (the head split costs
 * no pass); else through scratch and relcl__heads_split. */
relcl_status relcl__linear_forward_heads(relcl_context *ctx, int rows, int in, int out,
                                         relcl_buf x, relcl_buf W, relcl_buf b, relcl_buf y,
                                         int n, int heads, int head_dim);
relcl_status relcl__linear_backward_heads(relcl_context *ctx, int rows, int in, int out,
                                          relcl_buf x, relcl_buf W, relcl_buf dy, relcl_buf dx,
                                          int n, int heads, int head_dim, relcl_buf dW,
                                          relcl_buf db);
/* relcl__linear_backward (dx overwritten) of a linear layer whose input x is a ReLU's output,
 * with ReLU's backward in dx: dx = dy W where x > 0, else 0 (the feed-forward's second
 * layer); x's and dx's rows ld floats apart (in, or relcl__act_ld's). The mask goes into the
 * product's store where relcl's gemm_cpu runs it, else relu_bwd runs after it; the same bits
 * either way. */
relcl_status relcl__relu_linear_backward(relcl_context *ctx, int rows, int in, int out,
                                         relcl_buf x, relcl_buf W, relcl_buf dy, relcl_buf dx,
                                         size_t ld, relcl_buf dW, relcl_buf db);
relcl_status relcl__vec_axpby(relcl_context *ctx, size_t n, float alpha, relcl_buf x, float beta,
                              relcl_buf y);
relcl_status relcl__colsum(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                           relcl_buf y, int accumulate);
/* y (cols) = or += the sum over chunks of part (chunks, cols) from element p_off, in order
 * (the second pass of a column sum); with y2.mem, in the same launch, y2 likewise from the
 * next (chunks, cols) of part. */
relcl_status relcl__colsum_finish(relcl_context *ctx, cl_mem part, size_t p_off, int chunks,
                                  int cols, relcl_buf y, relcl_buf y2, int accumulate);
relcl_status relcl__sumsq(relcl_context *ctx, size_t n, relcl_buf x, relcl_buf out);
relcl_status relcl__xent_forward_backward(relcl_context *ctx, int rows, int V, float eps,
                                          int ignore_id, relcl_buf logits, relcl_buf targets,
                                          float grad_scale, relcl_buf dlogits,
                                          relcl_buf losses);
relcl_status relcl__argmax_rows(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                                relcl_buf out);
relcl_status relcl__adam_update(relcl_context *ctx, size_t n, const relcl_adam_args *args,
                                relcl_buf param, relcl_buf grad, relcl_buf m, relcl_buf v,
                                relcl_buf sumsq);
/* Keep bits: the forward passes below, given a region keep of relcl__keep_words(n) floats,
 * write their masks there as bits where the context runs dropout in the item shape (CPUs);
 * dropout backward given the same region reads them instead of running Philox again (the
 * same decisions: the bits of the result do not change). keep RELCL_BUF_NONE: none written,
 * none read; elsewhere (GPUs) neither happens and the backward recomputes the masks. */
static inline size_t relcl__keep_words(size_t n) { return (n + 31) / 32; }
relcl_status relcl__dropout_forward(relcl_context *ctx, size_t n, float p, uint64_t seed,
                                    uint64_t stream, relcl_buf x, relcl_buf residual,
                                    relcl_buf y, relcl_buf keep);
/* y (rows, cols) = residual + dropout(x + bias), bias (cols) added by column: a residual
 * block's output GEMM (run without its bias) to the sum that feeds layer norm, in one pass.
 * The mask and the float operations are those of linear forward with the bias followed by
 * dropout forward with the residual: the results are the same bits. */
relcl_status relcl__bias_dropout_residual(relcl_context *ctx, int rows, int cols, float p,
                                          uint64_t seed, uint64_t stream, relcl_buf x,
                                          relcl_buf bias, relcl_buf residual, relcl_buf y,
                                          relcl_buf keep);
/* keep: the region the forward pass of the same n, p, seed and stream wrote, or
 * RELCL_BUF_NONE */
relcl_status relcl__dropout_backward(relcl_context *ctx, size_t n, float p, uint64_t seed,
                                     uint64_t stream, relcl_buf dy, relcl_buf dx,
                                     int accumulate, relcl_buf keep);
relcl_status relcl__relu_forward(relcl_context *ctx, size_t n, relcl_buf x, relcl_buf y);
relcl_status relcl__relu_backward(relcl_context *ctx, size_t n, relcl_buf y, relcl_buf dy,
                                  relcl_buf dx);
relcl_status relcl__residual_add(relcl_context *ctx, size_t n, relcl_buf a, relcl_buf b,
                                 relcl_buf y);
/* Head split and merge of `parts` projections at once: x (batch * n, ld) holds parts blocks
 * of heads * head_dim columns side by side (Q|K|V), y the parts one after the other, each
 * (batch, heads, n, head_dim) (split; merge the other way). parts = 1 is the public op. */
relcl_status relcl__heads_split(relcl_context *ctx, int parts, int batch, int n, int heads,
                                int head_dim, relcl_buf x, int ld, relcl_buf y);
relcl_status relcl__heads_merge(relcl_context *ctx, int parts, int batch, int n, int heads,
                                int head_dim, relcl_buf x, relcl_buf y, int ld);

#endif
