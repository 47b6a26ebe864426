/* The layer ops of relcl_layers.h: argument checks, then kernels from kernels/layers.cl,
 * loss.cl and optim.cl, and GEMMs through relcl__gemm. Every reduction has a fixed order
 * (work-group trees over a power-of-two group, or chunks of rows summed in sequence), so
 * results do not depend on scheduling. */
#include "relcl_layers.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h" /* RELCL_ACCUMULATE, ...: shared with layers.cl, loss.cl, optim.cl */
#include "runtime.h"
#include "ops.h"

enum { COLSUM_CHUNK = 64, COLSUM_ONE_PASS = 1 << 20, SUMSQ_BLOCKS = 256 };

#define U32_LIMIT ((size_t)1 << 32)

/* ---- helpers ---- */

/* buf holds n elements past its offset, and offset + n fits the kernels' 32-bit indices. */
static relcl_status chk(relcl_buf b, size_t n, const char *op, const char *what) {
  char name[96];
  snprintf(name, sizeof name, "%s: %s", op, what);
  relcl_status st = relcl__check_buf(b, n, name);
  if (st == RELCL_OK && b.offset + n >= U32_LIMIT)
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: over 2^32 elements", name);
  return st;
}

static relcl_status positive(const char *op, const char *what, long long v) {
  return v > 0 ? RELCL_OK
               : relcl__fail(RELCL_ERR_INVALID_ARG, "%s: %s=%lld must be > 0", op, what, v);
}

static relcl_status no_ctx(const char *op) {
  return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: ctx is NULL", op);
}


static relcl_status launch_1d(relcl_context *ctx, relcl__kernel_entry *k, relcl__args *a,
                              size_t n) {
  size_t wg = relcl__wg(ctx, n, k->max_wg < 128 ? k->max_wg : 128);
  size_t global = (n + wg - 1) / wg * wg;
  return relcl__launch(ctx, k, a, 1, &global, &wg);
}

/* A kernel over n elements written with kernels/common.cl's RELCL_FOR_ELEMENTS: a work-item
 * an element, or a run of RELCL_ELEM_RUN elements in the item shape. */
static relcl_status launch_elements(relcl_context *ctx, relcl__kernel_entry *k, relcl__args *a,
                                    size_t n) {
  return launch_1d(ctx, k, a,
                   relcl__row_item(ctx) ? (n + RELCL_ELEM_RUN - 1) / RELCL_ELEM_RUN : n);
}

/* Global (n0, n1[, n2]) with groups (w, 1[, 1]); the kernels guard the rounded-up n0. */
static relcl_status launch_nd(relcl_context *ctx, relcl__kernel_entry *k, relcl__args *a,
                              cl_uint dims, size_t n0, size_t n1, size_t n2) {
  size_t w = relcl__wg(ctx, n0, k->max_wg < 64 ? k->max_wg : 64);
  size_t global[3] = {(n0 + w - 1) / w * w, n1, n2}, local[3] = {w, 1, 1};
  return relcl__launch(ctx, k, a, dims, global, local);
}

/* A row kernel (layer norm, loss: kernels/common.cl's shapes) over `rows` rows of `width`
 * entries, with `locals` local buffers. */
static relcl_status launch_rows(relcl_context *ctx, relcl__kernel_entry *k, relcl__args *a,
                                size_t rows, size_t width, int locals) {
  return relcl__launch_rows(ctx, k, a, rows, width, locals, relcl__row_item(ctx));
}

/* Column-sum kernels (colsum_partial, ln_param_partial): global (cols, chunks) in the group
 * shape, (ceil(cols / (RELCL_COL_VEC RELCL_COL_RUNS)), chunks) in the item shape, where a
 * work-item sums RELCL_COL_RUNS vectors of adjacent columns. */
#define COL_SPAN_HOST (RELCL_COL_VEC * RELCL_COL_RUNS)
static relcl_status launch_cols(relcl_context *ctx, relcl__kernel_entry *k, relcl__args *a,
                                size_t cols, size_t chunks) {
  const size_t span = COL_SPAN_HOST;
  size_t n0 = relcl__row_item(ctx) ? (cols + span - 1) / span : cols;
  return launch_nd(ctx, k, a, 2, n0, chunks, 1);
}

static void drop_params(float p, uint64_t seed, uint64_t stream, cl_uint v[6], float *scale) {
  double thr = (double)p * 4294967296.0;
  v[0] = thr >= 4294967295.0 ? 0xffffffffu : (cl_uint)thr;
  v[1] = (cl_uint)seed;
  v[2] = (cl_uint)(seed >> 32);
  v[3] = (cl_uint)stream;
  v[4] = (cl_uint)(stream >> 32);
  *scale = (float)(1.0 / (1.0 - (double)p));
}

/* colsum_finish for one to three outputs from consecutive blocks of part */
static relcl_status colsum_finish3(relcl_context *ctx, cl_mem part, size_t p_off, int chunks,
                                   int cols, relcl_buf y, relcl_buf y2, relcl_buf y3,
                                   int accumulate) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", "colsum_finish", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  int flags = accumulate ? RELCL_ACCUMULATE : 0;
  relcl__buf_arg(&a, relcl_buf_at(part, p_off), part);
  relcl__buf_arg(&a, y, part);
  relcl__buf_arg(&a, y2.mem ? y2 : y, part);
  relcl__buf_arg(&a, y3.mem ? y3 : y, part);
  const int outs = y3.mem ? 3 : y2.mem ? 2 : 1;
  RELCL__ARG(&a, chunks);
  RELCL__ARG(&a, cols);
  RELCL__ARG(&a, outs);
  RELCL__ARG(&a, flags);
  return launch_1d(ctx, k, &a, (size_t)cols * (size_t)outs);
}

/* Sums of chunks of rows of part-producing kernels, then the chunks in order (one output, or
 * two from consecutive blocks of part in one launch). */
relcl_status relcl__colsum_finish(relcl_context *ctx, cl_mem part, size_t p_off, int chunks,
                                  int cols, relcl_buf y, relcl_buf y2, int accumulate) {
  return colsum_finish3(ctx, part, p_off, chunks, cols, y, y2, RELCL_BUF_NONE, accumulate);
}

static int chunks_of(int rows) { return (rows + COLSUM_CHUNK - 1) / COLSUM_CHUNK; }

/* ---- layer norm ---- */

/* A dropout's p, seed and stream and its keep bits: dropout_launch's, and the dropout modes of
 * ln_fwd (relcl__bias_dropout_residual_layernorm) and embed_fwd
 * (relcl__embedding_dropout_forward) */
typedef struct {
  float p;
  uint64_t seed, stream;
  relcl_buf keep;
} row_drop;

/* Dropout's kernel arguments, in the order dropout_apply, ln_fwd and embed_fwd take them:
 * the keep bits, threshold, scale, seed and stream words. Without drop the kernel reads
 * none of them: the numbers are zeros and the keep argument is `unused`, a buffer OpenCL 1.2
 * wants there (as it is where drop->keep has none). */
static void row_drop_args(relcl__args *a, const row_drop *drop, cl_mem unused) {
  cl_uint v[6] = {0, 0, 0, 0, 0, 0};
  float scale = 1.0f;
  if (drop) drop_params(drop->p, drop->seed, drop->stream, v, &scale);
  relcl__buf_arg(a, drop ? drop->keep : RELCL_BUF_NONE, unused);
  RELCL__ARG(a, v[0]);
  RELCL__ARG(a, scale);
  for (int i = 1; i < 5; i++) RELCL__ARG(a, v[i]);
}

/* ln_fwd of x, or with xb.mem of res + (x + xb), or with drop of res + dropout(x + xb) into
 * sx (kernels/layers.cl) */
static relcl_status ln_fwd(relcl_context *ctx, int rows, int d, float eps, relcl_buf x,
                           relcl_buf xb, relcl_buf res, relcl_buf gain, relcl_buf bias,
                           relcl_buf y, relcl_buf mean, relcl_buf rstd, const row_drop *drop,
                           relcl_buf sx) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", "ln_fwd", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  const int add = drop ? 2 : xb.mem != NULL;
  relcl__buf_arg(&a, x, NULL);
  relcl__buf_arg(&a, gain, NULL);
  relcl__buf_arg(&a, bias, NULL);
  relcl__buf_arg(&a, y, NULL);
  relcl__buf_arg(&a, mean, NULL);
  relcl__buf_arg(&a, rstd, NULL);
  RELCL__ARG(&a, rows);
  RELCL__ARG(&a, d);
  RELCL__ARG(&a, eps);
  RELCL__ARG(&a, add);
  relcl__buf_arg(&a, add ? xb : x, NULL); /* not read without add */
  relcl__buf_arg(&a, add ? res : x, NULL);
  relcl__buf_arg(&a, drop ? sx : y, NULL); /* nor sx without dropout */
  row_drop_args(&a, drop, y.mem);
  return launch_rows(ctx, k, &a, (size_t)rows, (size_t)d, 1);
}

relcl_status relcl__layernorm_forward(relcl_context *ctx, int rows, int d, float eps,
                                      relcl_buf x, relcl_buf gain, relcl_buf bias, relcl_buf y,
                                      relcl_buf mean, relcl_buf rstd) {
  return ln_fwd(ctx, rows, d, eps, x, RELCL_BUF_NONE, RELCL_BUF_NONE, gain, bias, y, mean,
                rstd, NULL, RELCL_BUF_NONE);
}

relcl_status relcl__layernorm_add_forward(relcl_context *ctx, int rows, int d, float eps,
                                          relcl_buf x, relcl_buf xb, relcl_buf res,
                                          relcl_buf gain, relcl_buf bias, relcl_buf y,
                                          relcl_buf mean, relcl_buf rstd) {
  return ln_fwd(ctx, rows, d, eps, x, xb, res, gain, bias, y, mean, rstd, NULL, RELCL_BUF_NONE);
}

relcl_status relcl__bias_dropout_residual_layernorm(relcl_context *ctx, int rows, int d,
                                                    float eps, float p, uint64_t seed,
                                                    uint64_t stream, relcl_buf x, relcl_buf xb,
                                                    relcl_buf res, relcl_buf sx, relcl_buf keep,
                                                    relcl_buf gain, relcl_buf bias, relcl_buf y,
                                                    relcl_buf mean, relcl_buf rstd) {
  /* in one pass where the rows are whole words of keep bits and dropout_launch keeps them */
  if (relcl__row_item(ctx) && p > 0.0f && keep.mem && xb.mem && d % 32 == 0) {
    const row_drop drop = {p, seed, stream, keep};
    return ln_fwd(ctx, rows, d, eps, x, xb, res, gain, bias, y, mean, rstd, &drop, sx);
  }
  relcl_status st =
      relcl__bias_dropout_residual(ctx, rows, d, p, seed, stream, x, xb, res, sx, keep);
  return st == RELCL_OK ? relcl__layernorm_forward(ctx, rows, d, eps, sx, gain, bias, y, mean,
                                                   rstd)
                        : st;
}

relcl_status relcl_layernorm_forward(relcl_context *ctx, int rows, int d, float eps,
                                     relcl_buf x, relcl_buf gain, relcl_buf bias, relcl_buf y,
                                     relcl_buf mean, relcl_buf rstd) {
  relcl__clear_error();
  static const char op[] = "layernorm forward";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "rows", rows);
  if (st == RELCL_OK) st = positive(op, "d", d);
  if (st == RELCL_OK && !(eps >= 0.0f))
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: eps=%g must be >= 0", op, (double)eps);
  size_t n = (size_t)rows * (size_t)d;
  if (st == RELCL_OK) st = chk(x, n, op, "x");
  if (st == RELCL_OK) st = chk(gain, (size_t)d, op, "gain");
  if (st == RELCL_OK) st = chk(bias, (size_t)d, op, "bias");
  if (st == RELCL_OK) st = chk(y, n, op, "y");
  if (st == RELCL_OK) st = chk(mean, (size_t)rows, op, "mean");
  if (st == RELCL_OK) st = chk(rstd, (size_t)rows, op, "rstd");
  if (st != RELCL_OK) return st;
  return relcl__layernorm_forward(ctx, rows, d, eps, x, gain, bias, y, mean, rstd);
}

/* Dropout's backward of layer norm's dx in ln_bwd_params' pass (relcl__layernorm_dropout_
 * backward): scale for the kept elements, their keep bits, the result, and (sum.mem) where
 * its column sums add */
typedef struct {
  float scale;
  relcl_buf keep, da, sum;
} ln_drop;

/* relcl__layernorm_backward, with drop (not NULL; on CPUs, with dgain or dbias) dropout's
 * backward of dx as well */
static relcl_status ln_backward(relcl_context *ctx, int rows, int d, relcl_buf x,
                                relcl_buf gain, relcl_buf mean, relcl_buf rstd, relcl_buf dy,
                                relcl_buf dx, int accumulate, relcl_buf dgain, relcl_buf dbias,
                                const ln_drop *drop) {
  relcl_status st = RELCL_OK;
  cl_mem part = NULL;
  relcl__kernel_entry *k;
  const int chunks = chunks_of(rows), chunk = COLSUM_CHUNK;
  const bool sum = drop && drop->sum.mem;
  const int flags = (accumulate ? RELCL_ACCUMULATE : 0) | (drop ? RELCL_DROP_DX : 0) |
                    (sum ? RELCL_DROP_SUM : 0);
  const size_t bias_part = (size_t)chunks * (size_t)d;
  /* the parameters' sums over chunks of rows into part, added up by colsum_finish below: on
   * CPUs in dx's own pass (layers.cl ln_bwd_params: the bits of ln_param_partial and ln_bwd,
   * x and dy read once; Zen 3, issue 8's step: ln_param_partial was 9-10 ms a step, reading
   * both again), elsewhere in a pass before ln_bwd (dx may overwrite dy) */
  const bool params = dgain.mem || dbias.mem, fused = params && relcl__row_item(ctx);
  if (params && (st = relcl__pool_get(ctx, (sum ? 3 : 2) * bias_part * 4, &part)) != RELCL_OK)
    goto done;
  if (fused) {
    if ((st = relcl__kernel(ctx, "layers", "ln_bwd_params", &k)) != RELCL_OK) goto done;
    relcl__args a = {k->kernel, 0, CL_SUCCESS};
    relcl__buf_arg(&a, x, NULL);
    relcl__buf_arg(&a, gain, NULL);
    relcl__buf_arg(&a, mean, NULL);
    relcl__buf_arg(&a, rstd, NULL);
    relcl__buf_arg(&a, dy, NULL);
    relcl__buf_arg(&a, dx, NULL);
    RELCL__ARG(&a, part);
    RELCL__ARG(&a, rows);
    RELCL__ARG(&a, d);
    RELCL__ARG(&a, chunk);
    RELCL__ARG(&a, chunks);
    RELCL__ARG(&a, flags);
    relcl__buf_arg(&a, drop ? drop->da : RELCL_BUF_NONE, dx.mem);
    relcl__buf_arg(&a, drop ? drop->keep : RELCL_BUF_NONE, dx.mem);
    const float scale = drop ? drop->scale : 0.0f;
    RELCL__ARG(&a, scale);
    size_t global = (size_t)chunks, local = 1; /* a work-group a chunk: both cores busy */
    if ((st = relcl__launch(ctx, k, &a, 1, &global, &local)) != RELCL_OK) goto done;
  } else {
    if (params) {
      if ((st = relcl__kernel(ctx, "layers", "ln_param_partial", &k)) != RELCL_OK) goto done;
      relcl__args a = {k->kernel, 0, CL_SUCCESS};
      relcl__buf_arg(&a, x, NULL);
      relcl__buf_arg(&a, mean, NULL);
      relcl__buf_arg(&a, rstd, NULL);
      relcl__buf_arg(&a, dy, NULL);
      RELCL__ARG(&a, part);
      RELCL__ARG(&a, rows);
      RELCL__ARG(&a, d);
      RELCL__ARG(&a, chunk);
      if ((st = launch_cols(ctx, k, &a, (size_t)d, (size_t)chunks)) != RELCL_OK) goto done;
    }
    if ((st = relcl__kernel(ctx, "layers", "ln_bwd", &k)) != RELCL_OK) goto done;
    relcl__args a = {k->kernel, 0, CL_SUCCESS};
    relcl__buf_arg(&a, x, NULL);
    relcl__buf_arg(&a, gain, NULL);
    relcl__buf_arg(&a, mean, NULL);
    relcl__buf_arg(&a, rstd, NULL);
    relcl__buf_arg(&a, dy, NULL);
    relcl__buf_arg(&a, dx, NULL);
    RELCL__ARG(&a, rows);
    RELCL__ARG(&a, d);
    RELCL__ARG(&a, flags);
    if ((st = launch_rows(ctx, k, &a, (size_t)rows, (size_t)d, 1)) != RELCL_OK) goto done;
  }
  if (sum) /* the caller gives all three (relcl__layernorm_dropout_backward) */
    st = colsum_finish3(ctx, part, 0, chunks, d, dgain, dbias, drop->sum, 1);
  else if (dgain.mem) /* with the bias's, where it is asked for, in the same launch */
    st = relcl__colsum_finish(ctx, part, 0, chunks, d, dgain, dbias, 1);
  else if (dbias.mem)
    st = relcl__colsum_finish(ctx, part, bias_part, chunks, d, dbias, RELCL_BUF_NONE, 1);
done:
  relcl__pool_put(ctx, part);
  return st;
}

relcl_status relcl__layernorm_backward(relcl_context *ctx, int rows, int d, relcl_buf x,
                                       relcl_buf gain, relcl_buf mean, relcl_buf rstd,
                                       relcl_buf dy, relcl_buf dx, int accumulate,
                                       relcl_buf dgain, relcl_buf dbias) {
  return ln_backward(ctx, rows, d, x, gain, mean, rstd, dy, dx, accumulate, dgain, dbias, NULL);
}

relcl_status relcl__layernorm_dropout_backward(relcl_context *ctx, int rows, int d,
                                               relcl_buf x, relcl_buf gain, relcl_buf mean,
                                               relcl_buf rstd, relcl_buf dy, relcl_buf dx,
                                               relcl_buf dgain, relcl_buf dbias, float p,
                                               uint64_t seed, uint64_t stream, relcl_buf keep,
                                               relcl_buf da, relcl_buf dsum) {
  /* in ln_bwd_params' pass where it runs and the forward kept its bits (dropout_launch's
   * condition for reading them); da's sums there too where both parameters' sums go */
  if ((dgain.mem || dbias.mem) && relcl__row_item(ctx) && p > 0.0f && keep.mem) {
    cl_uint v[6];
    const bool sum = dsum.mem && dgain.mem && dbias.mem;
    ln_drop drop = {0.0f, keep, da, sum ? dsum : RELCL_BUF_NONE};
    drop_params(p, seed, stream, v, &drop.scale);
    relcl_status st =
        ln_backward(ctx, rows, d, x, gain, mean, rstd, dy, dx, 0, dgain, dbias, &drop);
    return st == RELCL_OK && dsum.mem && !sum ? relcl__colsum(ctx, rows, d, da, d, dsum, 1)
                                              : st;
  }
  relcl_status st =
      ln_backward(ctx, rows, d, x, gain, mean, rstd, dy, dx, 0, dgain, dbias, NULL);
  if (st == RELCL_OK)
    st = relcl__dropout_backward(ctx, (size_t)rows * (size_t)d, p, seed, stream, dx, da, 0,
                                 keep);
  return st == RELCL_OK && dsum.mem ? relcl__colsum(ctx, rows, d, da, d, dsum, 1) : st;
}

relcl_status relcl_layernorm_backward(relcl_context *ctx, int rows, int d, relcl_buf x,
                                      relcl_buf gain, relcl_buf mean, relcl_buf rstd,
                                      relcl_buf dy, relcl_buf dx, int accumulate,
                                      relcl_buf dgain, relcl_buf dbias) {
  relcl__clear_error();
  static const char op[] = "layernorm backward";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "rows", rows);
  if (st == RELCL_OK) st = positive(op, "d", d);
  size_t n = (size_t)rows * (size_t)d;
  if (st == RELCL_OK) st = chk(x, n, op, "x");
  if (st == RELCL_OK) st = chk(gain, (size_t)d, op, "gain");
  if (st == RELCL_OK) st = chk(mean, (size_t)rows, op, "mean");
  if (st == RELCL_OK) st = chk(rstd, (size_t)rows, op, "rstd");
  if (st == RELCL_OK) st = chk(dy, n, op, "dy");
  if (st == RELCL_OK) st = chk(dx, n, op, "dx");
  if (st == RELCL_OK && dgain.mem) st = chk(dgain, (size_t)d, op, "dgain");
  if (st == RELCL_OK && dbias.mem) st = chk(dbias, (size_t)d, op, "dbias");
  if (st != RELCL_OK) return st;

  return relcl__layernorm_backward(ctx, rows, d, x, gain, mean, rstd, dy, dx, accumulate, dgain, dbias);
}

/* ---- embedding ---- */

/* embed_fwd, with drop (not NULL) in its dropout mode */
static relcl_status embed_fwd(relcl_context *ctx, int n, int d, int vocab, relcl_buf ids,
                              relcl_buf table, float scale, relcl_buf out,
                              const row_drop *drop) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", "embed_fwd", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  const int dropping = drop != NULL;
  relcl__buf_arg(&a, ids, NULL);
  relcl__buf_arg(&a, table, NULL);
  relcl__buf_arg(&a, out, NULL);
  RELCL__ARG(&a, n);
  RELCL__ARG(&a, d);
  RELCL__ARG(&a, vocab);
  RELCL__ARG(&a, scale);
  RELCL__ARG(&a, dropping);
  row_drop_args(&a, drop, out.mem);
  if (relcl__row_item(ctx)) return launch_nd(ctx, k, &a, 1, (size_t)n, 1, 1); /* a row each */
  return launch_nd(ctx, k, &a, 2, (size_t)d, (size_t)n, 1);
}

relcl_status relcl__embedding_forward(relcl_context *ctx, int n, int d, int vocab,
                                      relcl_buf ids, relcl_buf table, float scale,
                                      relcl_buf out) {
  return embed_fwd(ctx, n, d, vocab, ids, table, scale, out, NULL);
}

relcl_status relcl__embedding_dropout_forward(relcl_context *ctx, int n, int d, int vocab,
                                              relcl_buf ids, relcl_buf table, float scale,
                                              float p, uint64_t seed, uint64_t stream,
                                              relcl_buf out, relcl_buf keep) {
  /* in one launch where the rows are whole words of keep bits and dropout_launch keeps them */
  if (relcl__row_item(ctx) && p > 0.0f && keep.mem && d % 32 == 0) {
    const row_drop drop = {p, seed, stream, keep};
    return embed_fwd(ctx, n, d, vocab, ids, table, scale, out, &drop);
  }
  relcl_status st = embed_fwd(ctx, n, d, vocab, ids, table, scale, out, NULL);
  return st == RELCL_OK && p > 0.0f ? relcl__dropout_forward(ctx, (size_t)n * (size_t)d, p,
                                                             seed, stream, out, RELCL_BUF_NONE,
                                                             out, keep)
                                    : st;
}

relcl_status relcl_embedding_forward(relcl_context *ctx, int n, int d, int vocab,
                                     relcl_buf ids, relcl_buf table, float scale,
                                     relcl_buf out) {
  relcl__clear_error();
  static const char op[] = "embedding forward";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "n", n);
  if (st == RELCL_OK) st = positive(op, "d", d);
  if (st == RELCL_OK) st = positive(op, "vocab", vocab);
  if (st == RELCL_OK) st = chk(ids, (size_t)n, op, "ids");
  if (st == RELCL_OK) st = chk(table, (size_t)vocab * (size_t)d, op, "table");
  if (st == RELCL_OK) st = chk(out, (size_t)n * (size_t)d, op, "out");
  if (st != RELCL_OK) return st;
  return relcl__embedding_forward(ctx, n, d, vocab, ids, table, scale, out);
}

relcl_status relcl_embedding_index(const int32_t *ids, int n, int vocab, int32_t *tokens,
                                   int32_t *offsets, int32_t *positions, int *n_tokens) {
  relcl__clear_error();
  static const char op[] = "embedding index";
  if (ids == NULL || tokens == NULL || offsets == NULL || positions == NULL ||
      n_tokens == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: NULL argument", op);
  if (n < 0 || vocab <= 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: n=%d must be >= 0 and vocab=%d > 0", op, n,
                       vocab);
  /* counting sort by id: stable, so each id's positions stay ascending */
  int32_t *count = calloc((size_t)vocab + 1, sizeof *count);
  if (count == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int t = 0; t < n; t++)
    if (ids[t] >= 0 && ids[t] < vocab) count[ids[t] + 1]++;
  int u = 0;
  offsets[0] = 0;
  for (int v = 0; v < vocab; v++)
    if (count[v + 1] > 0) {
      tokens[u] = v;
      offsets[u + 1] = offsets[u] + count[v + 1];
      u++;
    }
  /* count[v] becomes the next free slot of id v */
  for (int v = 0; v < vocab; v++) count[v + 1] += count[v];
  for (int t = 0; t < n; t++)
    if (ids[t] >= 0 && ids[t] < vocab) positions[count[ids[t]]++] = t;
  *n_tokens = u;
  free(count);
  return RELCL_OK;
}

relcl_status relcl__embedding_backward(relcl_context *ctx, int n_tokens, int d, int vocab,
                                       relcl_buf tokens, relcl_buf offsets,
                                       relcl_buf positions, relcl_buf dout, float scale,
                                       relcl_buf dtable) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", "embed_bwd", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, tokens, NULL);
  relcl__buf_arg(&a, offsets, NULL);
  relcl__buf_arg(&a, positions, NULL);
  relcl__buf_arg(&a, dout, NULL);
  relcl__buf_arg(&a, dtable, NULL);
  RELCL__ARG(&a, n_tokens);
  RELCL__ARG(&a, d);
  RELCL__ARG(&a, vocab);
  RELCL__ARG(&a, scale);
  if (relcl__row_item(ctx)) /* a token each */
    return launch_nd(ctx, k, &a, 1, (size_t)n_tokens, 1, 1);
  return launch_nd(ctx, k, &a, 2, (size_t)d, (size_t)n_tokens, 1);
}

relcl_status relcl_embedding_backward(relcl_context *ctx, int n_tokens, int d, int vocab,
                                      relcl_buf tokens, relcl_buf offsets,
                                      relcl_buf positions, relcl_buf dout, float scale,
                                      relcl_buf dtable) {
  relcl__clear_error();
  static const char op[] = "embedding backward";
  if (ctx == NULL) return no_ctx(op);
  if (n_tokens == 0) return RELCL_OK;
  relcl_status st = positive(op, "n_tokens", n_tokens);
  if (st == RELCL_OK) st = positive(op, "d", d);
  if (st == RELCL_OK) st = positive(op, "vocab", vocab);
  if (st == RELCL_OK) st = chk(tokens, (size_t)n_tokens, op, "tokens");
  if (st == RELCL_OK) st = chk(offsets, (size_t)n_tokens + 1, op, "offsets");
  /* positions and dout: their lengths are in the index; the caller vouches for them */
  if (st == RELCL_OK) st = chk(positions, 1, op, "positions");
  if (st == RELCL_OK) st = chk(dout, (size_t)d, op, "dout");
  if (st == RELCL_OK) st = chk(dtable, (size_t)vocab * (size_t)d, op, "dtable");
  if (st != RELCL_OK) return st;
  return relcl__embedding_backward(ctx, n_tokens, d, vocab, tokens, offsets, positions, dout, scale, dtable);
}

/* ---- dropout ---- */

static relcl_status dropout_check(relcl_context *ctx, const char *op, size_t n, float p,
                                  relcl_buf x, relcl_buf res, relcl_buf y) {
  if (ctx == NULL) return no_ctx(op);
  if (!(p >= 0.0f && p < 1.0f))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: p=%g must be in [0, 1)", op, (double)p);
  if (n == 0) return RELCL_OK;
  relcl_status st = chk(x, n, op, "x");
  if (st == RELCL_OK && n >= ((size_t)1 << 32) - 4)
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: n=%zu over 2^32 - 4", op, n);
  if (st == RELCL_OK && res.mem) st = chk(res, n, op, "residual");
  if (st == RELCL_OK) st = chk(y, n, op, "y");
  return st;
}

/* y = [y +] [residual +] dropout(x [+ bias by column of `cols`]): one pass of dropout_apply.
 * With keep (ops.h's keep bits) in the item shape, the masks are written there (keep_flag
 * RELCL_KEEP_SAVE) or read from there (RELCL_KEEP_LOAD): the backward then runs no Philox
 * rounds (issue 8's step on the Zen 3: dropout 3.4-3.7% -> 2.5-2.7% of the content GEMMs'
 * time, docs/speed.md, session 28). */
static relcl_status dropout_launch(relcl_context *ctx, size_t n, size_t cols, float p,
                                   uint64_t seed, uint64_t stream, relcl_buf x, relcl_buf bias,
                                   relcl_buf res, relcl_buf y, relcl_buf keep, int keep_flag,
                                   int flags) {
  if (n == 0) return RELCL_OK;
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", "dropout_apply", &k);
  if (st != RELCL_OK) return st;
  const bool keeps = keep.mem != NULL && p > 0.0f && relcl__row_item(ctx);
  const row_drop drop = {p, seed, stream, keeps ? keep : RELCL_BUF_NONE};
  flags |= (p > 0.0f ? RELCL_DROP : 0) | (res.mem ? RELCL_RESIDUAL : 0) |
           (bias.mem ? RELCL_BIAS : 0) | (keeps ? keep_flag : 0);
  cl_uint count = (cl_uint)n, ncols = (cl_uint)cols;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, x, NULL);
  relcl__buf_arg(&a, bias, x.mem);
  relcl__buf_arg(&a, res, x.mem);
  relcl__buf_arg(&a, y, NULL);
  RELCL__ARG(&a, count);
  RELCL__ARG(&a, ncols);
  RELCL__ARG(&a, flags);
  row_drop_args(&a, &drop, x.mem);
  /* a Philox call per four elements, a work-item per call; in the item shape a work-item per
   * 8 RELCL_DROP_RUNS calls, launched as rows are (groups of up to 64: 128 took 1.5 times as
   * long on a CPU without dropout) */
  const size_t calls = (n + 3) / 4, run = 8 * RELCL_DROP_RUNS;
  if (relcl__row_item(ctx))
    return relcl__launch_rows(ctx, k, &a, (calls + run - 1) / run, 1, 0, true);
  return launch_1d(ctx, k, &a, calls);
}

relcl_status relcl__dropout_forward(relcl_context *ctx, size_t n, float p, uint64_t seed,
                                    uint64_t stream, relcl_buf x, relcl_buf residual,
                                    relcl_buf y, relcl_buf keep) {
  return dropout_launch(ctx, n, 1, p, seed, stream, x, RELCL_BUF_NONE, residual, y, keep,
                        RELCL_KEEP_SAVE, 0);
}

relcl_status relcl__bias_dropout_residual(relcl_context *ctx, int rows, int cols, float p,
                                          uint64_t seed, uint64_t stream, relcl_buf x,
                                          relcl_buf bias, relcl_buf residual, relcl_buf y,
                                          relcl_buf keep) {
  return dropout_launch(ctx, (size_t)rows * (size_t)cols, (size_t)cols, p, seed, stream, x,
                        bias, residual, y, keep, RELCL_KEEP_SAVE, 0);
}

relcl_status relcl_dropout_forward(relcl_context *ctx, size_t n, float p, uint64_t seed,
                                   uint64_t stream, relcl_buf x, relcl_buf residual,
                                   relcl_buf y) {
  relcl__clear_error();
  relcl_status st = dropout_check(ctx, "dropout forward", n, p, x, residual, y);
  return st == RELCL_OK
             ? relcl__dropout_forward(ctx, n, p, seed, stream, x, residual, y, RELCL_BUF_NONE)
             : st;
}

relcl_status relcl__dropout_backward(relcl_context *ctx, size_t n, float p, uint64_t seed,
                                     uint64_t stream, relcl_buf dy, relcl_buf dx,
                                     int accumulate, relcl_buf keep) {
  return dropout_launch(ctx, n, 1, p, seed, stream, dy, RELCL_BUF_NONE, RELCL_BUF_NONE, dx, keep,
                        RELCL_KEEP_LOAD, accumulate ? RELCL_ACCUMULATE : 0);
}

relcl_status relcl_dropout_backward(relcl_context *ctx, size_t n, float p, uint64_t seed,
                                    uint64_t stream, relcl_buf dy, relcl_buf dx,
                                    int accumulate) {
  relcl__clear_error();
  relcl_status st = dropout_check(ctx, "dropout backward", n, p, dy, RELCL_BUF_NONE, dx);
  return st == RELCL_OK ? relcl__dropout_backward(ctx, n, p, seed, stream, dy, dx, accumulate,
                                                  RELCL_BUF_NONE)
                        : st;
}

/* ---- linear ---- */

/* A product's C, rows x cols, into y in the heads layout sp (relcl__split) after all: from
 * scratch T, where the product could not store it so (relcl__gemm_splits) */
static relcl_status split_from(relcl_context *ctx, const relcl__split *sp, size_t rows,
                               size_t cols, cl_mem T, relcl_buf y) {
  const size_t width = sp->heads * sp->head_dim;
  return relcl__heads_split(ctx, (int)(cols / width), (int)(rows / sp->n), (int)sp->n,
                            (int)sp->heads, (int)sp->head_dim, relcl_buf_at(T, 0), (int)cols, y);
}

/* y = x W^T [+ b], then ReLU with RELCL_RELU: the bias and the activation in the product's
 * store where relcl's gemm_cpu runs it (relcl__gemm_store), else in one pass after it. With
 * sp (not NULL), y in the heads layout sp: in the product's store where gemm_cpu can store it
 * so, else through scratch and relcl__heads_split. */
static relcl_status linear_fwd(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                               size_t ldx, relcl_buf W, relcl_buf b, relcl_buf y, size_t ldy,
                               int flags, const relcl__split *sp) {
  const size_t R = (size_t)rows, I = (size_t)in, O = (size_t)out;
  relcl_status st = RELCL_OK;
  if (sp && !relcl__gemm_splits(ctx, true, R, O, I, sp)) {
    cl_mem T = NULL;
    st = relcl__pool_get(ctx, R * O * sizeof(float), &T);
    if (st == RELCL_OK)
      st = linear_fwd(ctx, rows, in, out, x, ldx, W, b, relcl_buf_at(T, 0), O, flags, NULL);
    if (st == RELCL_OK) st = split_from(ctx, sp, R, O, T, y);
    relcl__pool_put(ctx, T); /* the queue is in order: the split has read it */
    return st;
  }
  bool applied = false, split = false;
  st = relcl__gemm_store(ctx, true, R, O, I, x, ldx, W, I, y, ldy, b, flags & RELCL_RELU, sp,
                         &applied, &split);
  if (st == RELCL_OK && sp && (!split || (b.mem && !applied)))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "linear forward: the product did not split its output");
  if (st != RELCL_OK || b.mem == NULL || applied) return st;
  relcl__kernel_entry *k;
  if ((st = relcl__kernel(ctx, "layers", "bias_add", &k)) != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  const cl_int ld = (cl_int)ldy;
  relcl__buf_arg(&a, y, NULL);
  RELCL__ARG(&a, ld);
  relcl__buf_arg(&a, b, NULL);
  RELCL__ARG(&a, rows);
  RELCL__ARG(&a, out);
  RELCL__ARG(&a, flags);
  if (relcl__row_item(ctx)) return launch_nd(ctx, k, &a, 1, R, 1, 1); /* a work-item a row */
  return launch_nd(ctx, k, &a, 2, O, R, 1);
}

relcl_status relcl__linear_forward(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                                   relcl_buf W, relcl_buf b, relcl_buf y) {
  return linear_fwd(ctx, rows, in, out, x, (size_t)in, W, b, y, (size_t)out, 0, NULL);
}

relcl_status relcl__linear_forward_ld(relcl_context *ctx, int rows, int in, int out,
                                      relcl_buf x, size_t ldx, relcl_buf W, relcl_buf b,
                                      relcl_buf y) {
  return linear_fwd(ctx, rows, in, out, x, ldx, W, b, y, (size_t)out, 0, NULL);
}

relcl_status relcl__linear_forward_heads(relcl_context *ctx, int rows, int in, int out,
                                         relcl_buf x, relcl_buf W, relcl_buf b, relcl_buf y,
                                         int n, int heads, int head_dim) {
  const relcl__split sp = {(size_t)n, (size_t)heads, (size_t)head_dim};
  return linear_fwd(ctx, rows, in, out, x, (size_t)in, W, b, y, (size_t)out, 0, &sp);
}

relcl_status relcl__linear_relu_forward(relcl_context *ctx, int rows, int in, int out,
                                        relcl_buf x, relcl_buf W, relcl_buf b, relcl_buf y,
                                        size_t ldy) {
  return linear_fwd(ctx, rows, in, out, x, (size_t)in, W, b, y, ldy, RELCL_RELU, NULL);
}

/* relcl_linear_forward's checks of sizes and buffers (and relcl_linear_forward_heads') */
static relcl_status linear_fwd_check(const char *op, int rows, int in, int out, relcl_buf x,
                                     relcl_buf W, relcl_buf b, relcl_buf y) {
  relcl_status st = positive(op, "rows", rows);
  if (st == RELCL_OK) st = positive(op, "in", in);
  if (st == RELCL_OK) st = positive(op, "out", out);
  const size_t R = (size_t)rows, I = (size_t)in, O = (size_t)out;
  if (st == RELCL_OK) st = chk(x, R * I, op, "x");
  if (st == RELCL_OK) st = chk(W, O * I, op, "W");
  if (st == RELCL_OK && b.mem) st = chk(b, O, op, "b");
  if (st == RELCL_OK) st = chk(y, R * O, op, "y");
  return st;
}

relcl_status relcl_linear_forward(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                                  relcl_buf W, relcl_buf b, relcl_buf y) {
  relcl__clear_error();
  static const char op[] = "linear forward";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = linear_fwd_check(op, rows, in, out, x, W, b, y);
  return st == RELCL_OK ? relcl__linear_forward(ctx, rows, in, out, x, W, b, y) : st;
}

relcl_status relcl_linear_forward_heads(relcl_context *ctx, int batch, int n, int in, int out,
                                        int heads, int head_dim, relcl_buf x, relcl_buf W,
                                        relcl_buf b, relcl_buf y) {
  relcl__clear_error();
  static const char op[] = "linear forward (heads)";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "batch", batch);
  if (st == RELCL_OK) st = positive(op, "n", n);
  if (st == RELCL_OK) st = positive(op, "heads", heads);
  if (st == RELCL_OK) st = positive(op, "head_dim", head_dim);
  const long long rows = (long long)batch * n, width = (long long)heads * head_dim;
  if (st == RELCL_OK && rows > INT_MAX)
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: batch*n=%lld over INT_MAX", op, rows);
  if (st == RELCL_OK) st = linear_fwd_check(op, (int)rows, in, out, x, W, b, y);
  if (st == RELCL_OK && out % width != 0)
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: out=%d must be a multiple of heads*head_dim=%lld",
                     op, out, width);
  if (st != RELCL_OK) return st;
  return relcl__linear_forward_heads(ctx, (int)rows, in, out, x, W, b, y, n, heads, head_dim);
}

/* relcl__linear_backward, with sp (not NULL) dx overwritten in the heads layout sp: in the
 * product's store where gemm_cpu can store it so, else through scratch and heads_split */
static relcl_status linear_bwd(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                               size_t ldx, relcl_buf W, relcl_buf dy, size_t ldy, relcl_buf dx,
                               int accumulate, relcl_buf dW, relcl_buf db,
                               const relcl__split *sp) {
  const size_t R = (size_t)rows, I = (size_t)in, O = (size_t)out;
  relcl_status st = RELCL_OK;
  if (dx.mem && sp && relcl__gemm_splits(ctx, false, R, I, O, sp)) {
    bool applied, split = false;
    st = relcl__gemm_store(ctx, false, R, I, O, dy, ldy, W, I, dx, I, RELCL_BUF_NONE, false,
                           sp, &applied, &split);
    if (st == RELCL_OK && !split)
      return relcl__fail(RELCL_ERR_INVALID_ARG, "linear backward: the product did not split dx");
  } else if (dx.mem && sp) {
    cl_mem T = NULL;
    st = relcl__pool_get(ctx, R * I * sizeof(float), &T);
    if (st == RELCL_OK)
      st = relcl__gemm(ctx, false, false, R, I, O, 1.0f, dy, ldy, 0, W, I, 0, 0.0f,
                       relcl_buf_at(T, 0), I, 0, 1);
    if (st == RELCL_OK) st = split_from(ctx, sp, R, I, T, dx);
    relcl__pool_put(ctx, T);
  } else if (dx.mem) {
    st = relcl__gemm(ctx, false, false, R, I, O, 1.0f, dy, ldy, 0, W, I, 0,
                     accumulate ? 1.0f : 0.0f, dx, I, 0, 1);
  }
  /* the bias gradient from the weight gradient's copy of dy where it makes one (CPUs),
   * else in a pass of its own */
  relcl__colsums sums = {NULL, 0};
  if (st == RELCL_OK && dW.mem)
    st = relcl__gemm_wgrad(ctx, O, I, R, dy, ldy, x, ldx, dW, I, db.mem ? &sums : NULL);
  if (st == RELCL_OK && db.mem)
    st = sums.part ? relcl__colsum_finish(ctx, sums.part, 0, (int)sums.chunks, out, db,
                                          RELCL_BUF_NONE, 1)
                   : relcl__colsum(ctx, rows, out, dy, (int)ldy, db, 1);
  relcl__pool_put(ctx, sums.part); /* the queue is in order: colsum_finish has read it */
  return st;
}

relcl_status relcl__linear_backward(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                                    relcl_buf W, relcl_buf dy, relcl_buf dx, int accumulate,
                                    relcl_buf dW, relcl_buf db) {
  return linear_bwd(ctx, rows, in, out, x, (size_t)in, W, dy, (size_t)out, dx, accumulate, dW,
                    db, NULL);
}

relcl_status relcl__linear_backward_ld(relcl_context *ctx, int rows, int in, int out,
                                       relcl_buf x, relcl_buf W, relcl_buf dy, size_t ldy,
                                       relcl_buf dx, int accumulate, relcl_buf dW,
                                       relcl_buf db) {
  return linear_bwd(ctx, rows, in, out, x, (size_t)in, W, dy, ldy, dx, accumulate, dW, db,
                    NULL);
}

relcl_status relcl__linear_backward_heads(relcl_context *ctx, int rows, int in, int out,
                                          relcl_buf x, relcl_buf W, relcl_buf dy, relcl_buf dx,
                                          int n, int heads, int head_dim, relcl_buf dW,
                                          relcl_buf db) {
  const relcl__split sp = {(size_t)n, (size_t)heads, (size_t)head_dim};
  return linear_bwd(ctx, rows, in, out, x, (size_t)in, W, dy, (size_t)out, dx, 0, dW, db, &sp);
}

relcl_status relcl__relu_linear_backward(relcl_context *ctx, int rows, int in, int out,
                                         relcl_buf x, relcl_buf W, relcl_buf dy, relcl_buf dx,
                                         size_t ld, relcl_buf dW, relcl_buf db) {
  const size_t R = (size_t)rows, I = (size_t)in, O = (size_t)out;
  bool masked = false;
  relcl_status st =
      relcl__gemm_relu_masked(ctx, R, I, O, 1.0f, dy, O, W, I, 0.0f, dx, ld, x, ld, &masked);
  /* element by element over the rows' padding too (ld - in floats a row, never read) */
  if (st == RELCL_OK && !masked) st = relcl__relu_backward(ctx, (R - 1) * ld + I, x, dx, dx);
  return st == RELCL_OK ? linear_bwd(ctx, rows, in, out, x, ld, W, dy, O, RELCL_BUF_NONE, 0, dW,
                                     db, NULL)
                        : st;
}

relcl_status relcl_linear_backward(relcl_context *ctx, int rows, int in, int out, relcl_buf x,
                                   relcl_buf W, relcl_buf dy, relcl_buf dx, int accumulate,
                                   relcl_buf dW, relcl_buf db) {
  relcl__clear_error();
  static const char op[] = "linear backward";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "rows", rows);
  if (st == RELCL_OK) st = positive(op, "in", in);
  if (st == RELCL_OK) st = positive(op, "out", out);
  const size_t R = (size_t)rows, I = (size_t)in, O = (size_t)out;
  if (st == RELCL_OK && dW.mem) st = chk(x, R * I, op, "x");
  if (st == RELCL_OK && dx.mem) st = chk(W, O * I, op, "W");
  if (st == RELCL_OK) st = chk(dy, R * O, op, "dy");
  if (st == RELCL_OK && dx.mem) st = chk(dx, R * I, op, "dx");
  if (st == RELCL_OK && dW.mem) st = chk(dW, O * I, op, "dW");
  if (st == RELCL_OK && db.mem) st = chk(db, O, op, "db");
  if (st != RELCL_OK) return st;
  return relcl__linear_backward(ctx, rows, in, out, x, W, dy, dx, accumulate, dW, db);
}

/* ---- element-wise ---- */

static relcl_status elementwise_check(relcl_context *ctx, const char *op, size_t n, int nbufs,
                                      const relcl_buf *bufs, const char *const *names) {
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = RELCL_OK;
  for (int i = 0; i < nbufs && st == RELCL_OK && n > 0; i++) st = chk(bufs[i], n, op, names[i]);
  return st;
}

/* An element-wise kernel over n elements: its buffer arguments in order, then n. */
static relcl_status elementwise(relcl_context *ctx, const char *kernel, size_t n, int nbufs,
                                const relcl_buf *bufs) {
  if (n == 0) return RELCL_OK;
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", kernel, &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  cl_uint count = (cl_uint)n;
  for (int i = 0; i < nbufs; i++) relcl__buf_arg(&a, bufs[i], NULL);
  RELCL__ARG(&a, count);
  return launch_1d(ctx, k, &a, n);
}

relcl_status relcl__relu_forward(relcl_context *ctx, size_t n, relcl_buf x, relcl_buf y) {
  const relcl_buf bufs[] = {x, y};
  return elementwise(ctx, "relu_fwd", n, 2, bufs);
}

relcl_status relcl_relu_forward(relcl_context *ctx, size_t n, relcl_buf x, relcl_buf y) {
  relcl__clear_error();
  const relcl_buf bufs[] = {x, y};
  static const char *const names[] = {"x", "y"};
  relcl_status st = elementwise_check(ctx, "relu forward", n, 2, bufs, names);
  return st == RELCL_OK ? relcl__relu_forward(ctx, n, x, y) : st;
}

relcl_status relcl__relu_backward(relcl_context *ctx, size_t n, relcl_buf y, relcl_buf dy,
                                  relcl_buf dx) {
  const relcl_buf bufs[] = {y, dy, dx};
  return elementwise(ctx, "relu_bwd", n, 3, bufs);
}

relcl_status relcl_relu_backward(relcl_context *ctx, size_t n, relcl_buf y, relcl_buf dy,
                                 relcl_buf dx) {
  relcl__clear_error();
  const relcl_buf bufs[] = {y, dy, dx};
  static const char *const names[] = {"y", "dy", "dx"};
  relcl_status st = elementwise_check(ctx, "relu backward", n, 3, bufs, names);
  return st == RELCL_OK ? relcl__relu_backward(ctx, n, y, dy, dx) : st;
}

relcl_status relcl__residual_add(relcl_context *ctx, size_t n, relcl_buf a, relcl_buf b,
                                 relcl_buf y) {
  const relcl_buf bufs[] = {a, b, y};
  return elementwise(ctx, "add2", n, 3, bufs);
}

relcl_status relcl_residual_add(relcl_context *ctx, size_t n, relcl_buf a, relcl_buf b,
                                relcl_buf y) {
  relcl__clear_error();
  const relcl_buf bufs[] = {a, b, y};
  static const char *const names[] = {"a", "b", "y"};
  relcl_status st = elementwise_check(ctx, "residual add", n, 3, bufs, names);
  return st == RELCL_OK ? relcl__residual_add(ctx, n, a, b, y) : st;
}

relcl_status relcl__vec_axpby(relcl_context *ctx, size_t n, float alpha, relcl_buf x, float beta,
                              relcl_buf y) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", "axpby", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  cl_uint count = (cl_uint)n;
  relcl__buf_arg(&a, x, NULL);
  relcl__buf_arg(&a, y, NULL);
  RELCL__ARG(&a, count);
  RELCL__ARG(&a, alpha);
  RELCL__ARG(&a, beta);
  return launch_1d(ctx, k, &a, n);
}

relcl_status relcl_vec_axpby(relcl_context *ctx, size_t n, float alpha, relcl_buf x, float beta,
                             relcl_buf y) {
  relcl__clear_error();
  static const char op[] = "axpby";
  if (ctx == NULL) return no_ctx(op);
  if (n == 0) return RELCL_OK;
  relcl_status st = chk(x, n, op, "x");
  if (st == RELCL_OK) st = chk(y, n, op, "y");
  if (st != RELCL_OK) return st;
  return relcl__vec_axpby(ctx, n, alpha, x, beta, y);
}

/* ---- heads ---- */

static relcl_status heads_check(relcl_context *ctx, const char *op, int batch, int n, int heads,
                                int head_dim, relcl_buf x, relcl_buf y, int ld, bool split) {
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "batch", batch);
  if (st == RELCL_OK) st = positive(op, "n", n);
  if (st == RELCL_OK) st = positive(op, "heads", heads);
  if (st == RELCL_OK) st = positive(op, "head_dim", head_dim);
  if (st == RELCL_OK && ld < heads * head_dim)
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: ld=%d is less than heads*head_dim=%d", op, ld,
                     heads * head_dim);
  const size_t rows = (size_t)batch * (size_t)n, dense = rows * heads * (size_t)head_dim;
  /* the strided side: the last row needs only heads*head_dim entries */
  const size_t strided = (rows - 1) * (size_t)ld + (size_t)heads * head_dim;
  if (st == RELCL_OK) st = chk(x, split ? strided : dense, op, "x");
  if (st == RELCL_OK) st = chk(y, split ? dense : strided, op, "y");
  return st;
}

static relcl_status heads_launch(relcl_context *ctx, const char *kname, int parts, int batch,
                                 int n, int heads, int head_dim, relcl_buf x, relcl_buf y,
                                 int ld, bool split) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", kname, &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, x, NULL);
  if (split) RELCL__ARG(&a, ld);
  relcl__buf_arg(&a, y, NULL);
  if (!split) RELCL__ARG(&a, ld);
  RELCL__ARG(&a, parts);
  RELCL__ARG(&a, n);
  RELCL__ARG(&a, heads);
  RELCL__ARG(&a, head_dim);
  if (relcl__row_item(ctx)) /* kernels/layers.cl: a work-item per row of a head */
    return launch_nd(ctx, k, &a, 2, (size_t)n, (size_t)batch * heads, 1);
  return launch_nd(ctx, k, &a, 3, (size_t)head_dim, (size_t)n, (size_t)batch * heads);
}

relcl_status relcl__heads_split(relcl_context *ctx, int parts, int batch, int n, int heads,
                                int head_dim, relcl_buf x, int ld, relcl_buf y) {
  return heads_launch(ctx, "heads_split", parts, batch, n, heads, head_dim, x, y, ld, true);
}

relcl_status relcl_heads_split(relcl_context *ctx, int batch, int n, int heads, int head_dim,
                               relcl_buf x, int ld, relcl_buf y) {
  relcl__clear_error();
  relcl_status st = heads_check(ctx, "heads split", batch, n, heads, head_dim, x, y, ld, true);
  return st == RELCL_OK ? relcl__heads_split(ctx, 1, batch, n, heads, head_dim, x, ld, y) : st;
}

relcl_status relcl__heads_merge(relcl_context *ctx, int parts, int batch, int n, int heads,
                                int head_dim, relcl_buf x, relcl_buf y, int ld) {
  return heads_launch(ctx, "heads_merge", parts, batch, n, heads, head_dim, x, y, ld, false);
}

relcl_status relcl_heads_merge(relcl_context *ctx, int batch, int n, int heads, int head_dim,
                               relcl_buf x, relcl_buf y, int ld) {
  relcl__clear_error();
  relcl_status st = heads_check(ctx, "heads merge", batch, n, heads, head_dim, x, y, ld, false);
  return st == RELCL_OK ? relcl__heads_merge(ctx, 1, batch, n, heads, head_dim, x, y, ld) : st;
}

/* ---- reductions ---- */

/* colsum_rows: y = or += the column sums of x in one launch, a work-group a work-item (PoCL
 * runs a work-group on one core) */
static relcl_status colsum_one_pass(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                                    relcl_buf y, int accumulate) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "layers", "colsum_rows", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  const int chunk = COLSUM_CHUNK, flags = accumulate ? RELCL_ACCUMULATE : 0;
  relcl__buf_arg(&a, x, NULL);
  RELCL__ARG(&a, ld);
  relcl__buf_arg(&a, y, NULL);
  RELCL__ARG(&a, rows);
  RELCL__ARG(&a, cols);
  RELCL__ARG(&a, chunk);
  RELCL__ARG(&a, flags);
  size_t global = ((size_t)cols + COL_SPAN_HOST - 1) / COL_SPAN_HOST, local = 1;
  return relcl__launch(ctx, k, &a, 1, &global, &local);
}

/* On CPUs (the item shape), for an x of at most COLSUM_ONE_PASS floats, in one launch of
 * colsum_rows, a work-item a strip of columns down all the rows; else colsum_partial over
 * chunks of rows, then colsum_finish. The same bits either way. A strip's walk down the rows
 * meets each row in a new page, which the caches' prefetchers do not follow: once x is past
 * the L2 caches, the chunks' pass, whose consecutive work-items read consecutive lines, wins.
 * relcl_colsum alone, the two forms alternated (model-207 Xeon, medians of 30; rows x cols):
 * 512 x 2, 128, 512 and 2048: 1.66, 1.59, 1.43 and 1.14 times as fast in one launch;
 * 4000 x 256 (1M floats) 1.15-1.28; 1000 x 1024 (1M) 0.94; 4000 x 512 0.89, 4000 x 1024
 * 0.23-0.34. */
relcl_status relcl__colsum(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                           relcl_buf y, int accumulate) {
  if (relcl__row_item(ctx) && (size_t)rows * (size_t)cols <= COLSUM_ONE_PASS)
    return colsum_one_pass(ctx, rows, cols, x, ld, y, accumulate);
  relcl_status st = RELCL_OK;
  const int chunks = chunks_of(rows), chunk = COLSUM_CHUNK;
  cl_mem part = NULL;
  relcl__kernel_entry *k;
  if ((st = relcl__kernel(ctx, "layers", "colsum_partial", &k)) != RELCL_OK) goto done;
  if ((st = relcl__pool_get(ctx, (size_t)chunks * (size_t)cols * 4, &part)) != RELCL_OK)
    goto done;
  {
    relcl__args a = {k->kernel, 0, CL_SUCCESS};
    relcl__buf_arg(&a, x, NULL);
    RELCL__ARG(&a, ld);
    RELCL__ARG(&a, part);
    RELCL__ARG(&a, rows);
    RELCL__ARG(&a, cols);
    RELCL__ARG(&a, chunk);
    if ((st = launch_cols(ctx, k, &a, (size_t)cols, (size_t)chunks)) != RELCL_OK) goto done;
  }
  st = relcl__colsum_finish(ctx, part, 0, chunks, cols, y, RELCL_BUF_NONE, accumulate);
done:
  relcl__pool_put(ctx, part);
  return st;
}

relcl_status relcl_colsum(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                          relcl_buf y, int accumulate) {
  relcl__clear_error();
  static const char op[] = "colsum";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "rows", rows);
  if (st == RELCL_OK) st = positive(op, "cols", cols);
  if (st == RELCL_OK && ld < cols)
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: ld=%d is less than cols=%d", op, ld, cols);
  if (st == RELCL_OK)
    st = chk(x, (size_t)(rows - 1) * (size_t)ld + (size_t)cols, op, "x");
  if (st == RELCL_OK) st = chk(y, (size_t)cols, op, "y");
  if (st != RELCL_OK) return st;
  return relcl__colsum(ctx, rows, cols, x, ld, y, accumulate);
}

static relcl_status sum_block(relcl_context *ctx, relcl_buf x, relcl_buf part, size_t n,
                              size_t blocks, int flags) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "optim", "sum_block", &k);
  if (st != RELCL_OK) return st;
  cl_uint count = (cl_uint)n, block = (cl_uint)((n + blocks - 1) / blocks), nb = (cl_uint)blocks;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, x, NULL);
  relcl__buf_arg(&a, part, NULL);
  RELCL__ARG(&a, count);
  RELCL__ARG(&a, block);
  RELCL__ARG(&a, nb);
  RELCL__ARG(&a, flags);
  /* a tree per block, or (item shape) a work-item per block */
  return relcl__launch_rows(ctx, k, &a, blocks, block, 1, relcl__row_item(ctx));
}

relcl_status relcl__sumsq(relcl_context *ctx, size_t n, relcl_buf x, relcl_buf out) {
  relcl_status st = RELCL_OK;
  cl_mem part = NULL;
  if ((st = relcl__pool_get(ctx, SUMSQ_BLOCKS * 4, &part)) != RELCL_OK) return st;
  st = sum_block(ctx, x, relcl_buf_at(part, 0), n, SUMSQ_BLOCKS, RELCL_SQUARE);
  if (st == RELCL_OK) st = sum_block(ctx, relcl_buf_at(part, 0), out, SUMSQ_BLOCKS, 1, 0);
  relcl__pool_put(ctx, part);
  return st;
}

relcl_status relcl_sumsq(relcl_context *ctx, size_t n, relcl_buf x, relcl_buf out) {
  relcl__clear_error();
  static const char op[] = "sumsq";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "n", (long long)n);
  if (st == RELCL_OK) st = chk(x, n, op, "x");
  if (st == RELCL_OK) st = chk(out, 1, op, "out");
  if (st != RELCL_OK) return st;
  return relcl__sumsq(ctx, n, x, out);
}

/* ---- loss ---- */

relcl_status relcl__xent_forward_backward(relcl_context *ctx, int rows, int V, float eps,
                                          int ignore_id, relcl_buf logits, relcl_buf targets,
                                          float grad_scale, relcl_buf dlogits,
                                          relcl_buf losses) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "loss", "xent_rows", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  int flags = dlogits.mem ? RELCL_WRITE_GRAD : 0;
  relcl__buf_arg(&a, logits, NULL);
  relcl__buf_arg(&a, targets, NULL);
  relcl__buf_arg(&a, dlogits, logits.mem);
  relcl__buf_arg(&a, losses, NULL);
  RELCL__ARG(&a, rows);
  RELCL__ARG(&a, V);
  RELCL__ARG(&a, eps);
  RELCL__ARG(&a, ignore_id);
  RELCL__ARG(&a, grad_scale);
  RELCL__ARG(&a, flags);
  return launch_rows(ctx, k, &a, (size_t)rows, (size_t)V, 1);
}

relcl_status relcl_xent_forward_backward(relcl_context *ctx, int rows, int V, float eps,
                                         int ignore_id, relcl_buf logits, relcl_buf targets,
                                         float grad_scale, relcl_buf dlogits,
                                         relcl_buf losses) {
  relcl__clear_error();
  static const char op[] = "cross-entropy";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "rows", rows);
  if (st == RELCL_OK) st = positive(op, "V", V);
  if (st == RELCL_OK && !(eps >= 0.0f && eps <= 1.0f))
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: eps=%g must be in [0, 1]", op, (double)eps);
  const size_t n = (size_t)rows * (size_t)V;
  if (st == RELCL_OK) st = chk(logits, n, op, "logits");
  if (st == RELCL_OK) st = chk(targets, (size_t)rows, op, "targets");
  if (st == RELCL_OK && dlogits.mem) st = chk(dlogits, n, op, "dlogits");
  if (st == RELCL_OK) st = chk(losses, 2 * (size_t)rows, op, "losses");
  if (st != RELCL_OK) return st;
  return relcl__xent_forward_backward(ctx, rows, V, eps, ignore_id, logits, targets, grad_scale, dlogits, losses);
}

relcl_status relcl__argmax_rows(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                                relcl_buf out) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "loss", "argmax_rows", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, x, NULL);
  RELCL__ARG(&a, ld);
  relcl__buf_arg(&a, out, NULL);
  RELCL__ARG(&a, rows);
  RELCL__ARG(&a, cols);
  return launch_rows(ctx, k, &a, (size_t)rows, (size_t)cols, 2);
}

relcl_status relcl_argmax_rows(relcl_context *ctx, int rows, int cols, relcl_buf x, int ld,
                               relcl_buf out) {
  relcl__clear_error();
  static const char op[] = "argmax";
  if (ctx == NULL) return no_ctx(op);
  relcl_status st = positive(op, "rows", rows);
  if (st == RELCL_OK) st = positive(op, "cols", cols);
  if (st == RELCL_OK && ld < cols)
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "%s: ld=%d is less than cols=%d", op, ld, cols);
  if (st == RELCL_OK)
    st = chk(x, (size_t)(rows - 1) * (size_t)ld + (size_t)cols, op, "x");
  if (st == RELCL_OK) st = chk(out, (size_t)rows, op, "out");
  if (st != RELCL_OK) return st;
  return relcl__argmax_rows(ctx, rows, cols, x, ld, out);
}

/* ---- Adam ---- */

relcl_status relcl__adam_update(relcl_context *ctx, size_t n, const relcl_adam_args *args,
                                relcl_buf param, relcl_buf grad, relcl_buf m, relcl_buf v,
                                relcl_buf sumsq) {
  const int clip = args->clip_norm > 0.0f;
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "optim", "adam_update", &k);
  if (st != RELCL_OK) return st;
  /* bias corrections in double: 1 - beta^t loses everything in float for small t */
  double t = (double)args->step;
  double bc1 = 1.0 - pow((double)args->beta1, t), bc2 = 1.0 - pow((double)args->beta2, t);
  float lr_bc1 = (float)((double)args->lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
  float b1 = args->beta1, b2 = args->beta2, eps = args->eps, gs = args->grad_scale,
        cn = args->clip_norm;
  int flags = clip ? RELCL_CLIP : 0;
  cl_uint count = (cl_uint)n;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, param, NULL);
  relcl__buf_arg(&a, grad, NULL);
  relcl__buf_arg(&a, m, NULL);
  relcl__buf_arg(&a, v, NULL);
  relcl__buf_arg(&a, sumsq, grad.mem);
  RELCL__ARG(&a, count);
  RELCL__ARG(&a, lr_bc1);
  RELCL__ARG(&a, inv_sqrt_bc2);
  RELCL__ARG(&a, b1);
  RELCL__ARG(&a, b2);
  RELCL__ARG(&a, eps);
  RELCL__ARG(&a, gs);
  RELCL__ARG(&a, cn);
  RELCL__ARG(&a, flags);
  return launch_elements(ctx, k, &a, n);
}

relcl_status relcl_adam_update(relcl_context *ctx, size_t n, const relcl_adam_args *args,
                               relcl_buf param, relcl_buf grad, relcl_buf m, relcl_buf v,
                               relcl_buf sumsq) {
  relcl__clear_error();
  static const char op[] = "adam";
  if (ctx == NULL) return no_ctx(op);
  if (args == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: args is NULL", op);
  if (args->step < 1)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: step must be >= 1", op);
  if (!(args->beta1 >= 0.0f && args->beta1 < 1.0f && args->beta2 >= 0.0f &&
        args->beta2 < 1.0f && args->eps >= 0.0f && isfinite(args->lr) &&
        isfinite(args->grad_scale)))
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "%s: need 0 <= beta1, beta2 < 1, eps >= 0 and finite lr and grad_scale "
                       "(beta1=%g beta2=%g eps=%g lr=%g grad_scale=%g)",
                       op, (double)args->beta1, (double)args->beta2, (double)args->eps,
                       (double)args->lr, (double)args->grad_scale);
  const int clip = args->clip_norm > 0.0f;
  if (n == 0) return RELCL_OK;
  relcl_status st = chk(param, n, op, "param");
  if (st == RELCL_OK) st = chk(grad, n, op, "grad");
  if (st == RELCL_OK) st = chk(m, n, op, "m");
  if (st == RELCL_OK) st = chk(v, n, op, "v");
  if (st == RELCL_OK && clip) st = chk(sumsq, 1, op, "sumsq (needed for clipping)");
  if (st != RELCL_OK) return st;
  return relcl__adam_update(ctx, n, args, param, grad, m, v, sumsq);
}
