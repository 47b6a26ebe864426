/* Relation-aware multi-head attention, forward and backward (Shaw et al. 2018), in the
 * factored form of ../shared/design/relative-attention.md: the content terms run through
 * relcl's GEMM door (CLBlast, or relcl's own product kernels on a CPU); the small label
 * products with a shared table (the default) and the gather / softmax / dropout / bucket
 * passes over the nq x nk weights in kernels/attention.cl, those with per-head tables as
 * products. On a CPU, with a shared table or none, all of a head's work but the tables'
 * gradients runs in one kernel (kernels/gemm.cl attn_fwd_cpu, attn_bwd_cpu: fused below).
 * No nq x nk x d tensor is ever built. */
#include "flags.h" /* RELCL_GATHER, ...: shared with kernels/attention.cl */
#include "runtime.h"
#include "ops.h"

#include <math.h>

relcl_attn_desc relcl_attn_desc_self(int batch, int heads, int n, int head_dim, int max_rel) {
  relcl_attn_desc d = {0};
  d.batch = batch;
  d.heads = heads;
  d.nq = d.nk = n;
  d.head_dim = head_dim;
  d.relative = 1;
  d.max_rel = max_rel;
  return d;
}

relcl_attn_desc relcl_attn_desc_cross(int batch, int heads, int nq, int nk, int head_dim) {
  relcl_attn_desc d = {0};
  d.batch = batch;
  d.heads = heads;
  d.nq = nq;
  d.nk = nk;
  d.head_dim = head_dim;
  return d;
}

/* What one call computes, derived once from the descriptor. */
typedef struct plan {
  size_t B, H, nq, nk, d, BH, rows;
  int k, rlo, R; /* labels rlo .. rlo+R-1 are the only ones any unmasked pair uses */
  bool rel, rel_v;
  size_t table; /* elements in one (2k+1, d) table */
  int flags;
  float scale;
  cl_uint drop_threshold;
  float drop_scale;
  cl_uint seed_lo, seed_hi, stream_lo, stream_hi;
} plan;

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static relcl_status make_plan(const relcl_attn_desc *desc, plan *p) {
  if (desc == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "attention: desc is NULL");
  if (desc->batch <= 0 || desc->heads <= 0 || desc->nq <= 0 || desc->nk <= 0 ||
      desc->head_dim <= 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "attention: batch=%d heads=%d nq=%d nk=%d head_dim=%d must all be > 0",
                       desc->batch, desc->heads, desc->nq, desc->nk, desc->head_dim);
  if (desc->max_rel < 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "attention: max_rel=%d must be >= 0",
                       desc->max_rel);
  if (desc->q_pos0 < 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "attention: q_pos0=%d must be >= 0", desc->q_pos0);
  if (!(desc->dropout >= 0.0f && desc->dropout < 1.0f))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "attention: dropout=%g must be in [0, 1)",
                       (double)desc->dropout);
  p->B = (size_t)desc->batch;
  p->H = (size_t)desc->heads;
  p->nq = (size_t)desc->nq;
  p->nk = (size_t)desc->nk;
  p->d = (size_t)desc->head_dim;
  p->BH = p->B * p->H;
  p->rows = p->BH * p->nq;
  /* kernels index with 32-bit offsets */
  if (p->rows * p->nk >= ((size_t)1 << 32) || p->BH * p->nk * p->d >= ((size_t)1 << 32) ||
      p->rows * p->d >= ((size_t)1 << 32) || desc->max_rel > (1 << 20) ||
      (size_t)desc->q_pos0 + p->nq > ((size_t)1 << 30))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "attention: shape too large (over 2^32 elements)");
  p->k = desc->max_rel;
  p->rel = desc->relative != 0;
  p->rel_v = p->rel && !desc->keys_only;
  p->table = (size_t)(2 * p->k + 1) * p->d;
  /* deltas j - pq range over [-(q_pos0+nq-1), nk-1-q_pos0]; causal masks the positive ones */
  int q0 = desc->q_pos0, nq = desc->nq, nk = desc->nk;
  int dmin = -(q0 + nq - 1), dmax = nk - 1 - q0;
  if (desc->causal && dmax > 0) dmax = 0;
  if (dmax < dmin) dmax = dmin; /* every key masked: keep one (unused) label */
  p->rlo = clampi(dmin, -p->k, p->k) + p->k;
  p->R = clampi(dmax, -p->k, p->k) + p->k - p->rlo + 1;
  p->flags = (desc->causal ? RELCL_CAUSAL : 0) | (desc->dropout > 0.0f ? RELCL_DROPOUT : 0);
  p->scale = (float)(1.0 / sqrt((double)p->d));
  double thr = (double)desc->dropout * 4294967296.0;
  p->drop_threshold = thr >= 4294967295.0 ? 0xffffffffu : (cl_uint)thr;
  p->drop_scale = (float)(1.0 / (1.0 - (double)desc->dropout));
  p->seed_lo = (cl_uint)desc->seed;
  p->seed_hi = (cl_uint)(desc->seed >> 32);
  p->stream_lo = (cl_uint)desc->stream;
  p->stream_hi = (cl_uint)(desc->stream >> 32);
  return RELCL_OK;
}

static relcl_status check_inputs(const plan *p, const relcl_attn_desc *desc, relcl_buf Q,
                                 relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                 relcl_buf key_len) {
  relcl_status st;
  size_t tables = desc->per_head ? p->H : 1;
  if ((st = relcl__check_buf(Q, p->rows * p->d, "Q")) != RELCL_OK) return st;
  if ((st = relcl__check_buf(K, p->BH * p->nk * p->d, "K")) != RELCL_OK) return st;
  if ((st = relcl__check_buf(V, p->BH * p->nk * p->d, "V")) != RELCL_OK) return st;
  if (p->rel && (st = relcl__check_buf(wK, tables * p->table, "wK")) != RELCL_OK) return st;
  if (p->rel_v && (st = relcl__check_buf(wV, tables * p->table, "wV")) != RELCL_OK) return st;
  if (key_len.mem && (st = relcl__check_buf(key_len, p->B, "key_len")) != RELCL_OK) return st;
  return RELCL_OK;
}

/* The label GEMMs below are what relative positions add: the profile counts them apart. */
#define REL_GEMM(ctx, ...) relcl__gemm_in((ctx), RELCL_PART_RELATIVE_GEMM, __VA_ARGS__)

/* Per-head tables: the matrices of sequence b for heads 0..H-1 sit at fixed strides, so
 * each sequence is one strided-batched GEMM over the heads. (CLBlast's offset-array batched
 * GEMM would be one call, but Oclgrind flags its results as uninitialized.) */

/* The label GEMMs of labels_from and add_from_labels run one entry per (sequence, head), each
 * as small as the per-head products: shared tables as one batched call over all B H entries
 * (the table's stride 0), per-head tables as one call per sequence over its heads (the
 * tables' stride). An entry of R x nq x d is below CLBlast's switch to its indirect kernel,
 * so CLBlast runs its direct kernel, which pads nothing; as one product over all rows, the
 * indirect kernel padded R (17 or 33) and d (64) to its tiles (docs/speed.md, "What is
 * left"). */
typedef struct entries {
  size_t calls, batch, w_stride;
} entries;

static entries label_entries(const plan *p, bool per_head) {
  return per_head ? (entries){p->B, p->H, p->table} : (entries){1, p->BH, 0};
}

/* One label value per row and label, X (rows x d) . W[window]^T, W shared or per head, stored
 * label-major: the value of row bh * nq + i and label column c at bh * gather_block(p) +
 * c * gather_label(p) + i. So the GEMM's short side (R labels) is its M, which CLBlast's
 * indirect kernel padded to MWG (32 on CPUs) rather than N to NWG (128) when this was one
 * product over all rows: 1.5 to 2 times faster on PoCL (docs/speed.md, "What is left");
 * the direct kernel that runs the entries now reads either way. The row kernels read it at
 * those strides. */
static size_t gather_block(const plan *p, bool per_head) {
  return per_head ? p->nq * (size_t)p->R : p->nq;
}
static size_t gather_label(const plan *p, bool per_head) { return per_head ? p->nq : p->rows; }

/* A product kernel of m x n x kk multiply-adds over global (n0, n1), in groups of (up to 64,
 * 1); the kernels guard the rounded-up n0. The profile rates it as a GEMM of that shape. */
static relcl_status launch_product(relcl_context *ctx, relcl__kernel_entry *k,
                                   const relcl__args *a, size_t n0, size_t n1, size_t m,
                                   size_t n, size_t kk) {
  size_t w = relcl__wg(ctx, n0, k->max_wg < 64 ? k->max_wg : 64);
  size_t global[2] = {(n0 + w - 1) / w * w, n1}, local[2] = {w, 1};
  return relcl__launch_product(ctx, k, a, 2, global, local, m, n, kk);
}

/* The arguments of labels_shared and add_labels_shared: (in, table, out, rows, R, d). */
static relcl__args label_args(relcl__kernel_entry *k, const plan *p, relcl_buf in,
                              relcl_buf table, relcl_buf out) {
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  const cl_uint rows = (cl_uint)p->rows;
  const int R = p->R, d = (int)p->d;
  relcl__buf_arg(&a, in, NULL);
  relcl__buf_arg(&a, table, NULL);
  relcl__buf_arg(&a, out, NULL);
  RELCL__ARG(&a, rows);
  RELCL__ARG(&a, R);
  RELCL__ARG(&a, d);
  return a;
}

/* With a shared table, the label values and sums are two products over all rows with the
 * table's window (R x d). On CPUs (relcl__own_products) they go through relcl's GEMM door to
 * gemm_cpu_bt and gemm_cpu (the sums, since session 23, inside alpha V's and dQ's per-head
 * product: heads_product), which ran them 2 to 2.5 times faster than relcl's dedicated
 * kernels of sessions 12 to 19 (relcl-bench's issue-8 step, Zen 5: 16000x33x64 4.6 -> 1.8-2.1
 * ms a step, 16000x64x33 2.4 -> 1.5-1.8). Elsewhere relcl's kernels (kernels/attention.cl
 * labels_shared, add_labels_shared) run them, an output a work-item: as CLBlast's batched
 * direct kernel over the B H entries they ran at 11 to 16 GFLOP/s on PoCL (docs/speed.md,
 * "What is left"). */
static relcl_status labels_shared(relcl_context *ctx, const plan *p, relcl_buf X, relcl_buf win,
                                  relcl_buf out) {
  if (relcl__own_products(ctx)) /* out (R x rows) = win X^T */
    return REL_GEMM(ctx, false, true, (size_t)p->R, p->rows, p->d, 1.0f, win, p->d, 0, X, p->d,
                    0, 0.0f, out, p->rows, 0, 1);
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "attention", "labels_shared", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = label_args(k, p, X, win, out);
  return launch_product(ctx, k, &a, p->rows, (size_t)p->R, p->rows, (size_t)p->R, p->d);
}

static relcl_status add_labels_shared(relcl_context *ctx, const plan *p, relcl_buf L,
                                      relcl_buf win, relcl_buf Y) {
  if (relcl__own_products(ctx)) /* Y (rows x d) += L win */
    return REL_GEMM(ctx, false, false, p->rows, p->d, (size_t)p->R, 1.0f, L, (size_t)p->R, 0, win,
                    p->d, 0, 1.0f, Y, p->d, 0, 1);
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "attention", "add_labels_shared", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = label_args(k, p, L, win, Y);
  return launch_product(ctx, k, &a, p->d, p->rows, p->rows, p->d, (size_t)p->R);
}

static relcl_status labels_from(relcl_context *ctx, const plan *p, bool per_head, relcl_buf X,
                                relcl_buf W, relcl_buf out) {
  relcl_buf win = relcl_buf_at(W.mem, W.offset + (size_t)p->rlo * p->d);
  if (!per_head) return labels_shared(ctx, p, X, win, out);
  const size_t block = gather_block(p, per_head), label = gather_label(p, per_head);
  const entries e = label_entries(p, per_head);
  for (size_t b = 0; b < e.calls; b++) { /* (R x nq) per entry = W[window] . X_bh^T */
    relcl_status st = REL_GEMM(
        ctx, false, true, (size_t)p->R, p->nq, p->d, 1.0f, win, p->d, e.w_stride,
        relcl_buf_at(X.mem, X.offset + b * e.batch * p->nq * p->d), p->d, p->nq * p->d, 0.0f,
        relcl_buf_at(out.mem, out.offset + b * e.batch * block), label, block, e.batch);
    if (st != RELCL_OK) return st;
  }
  return RELCL_OK;
}

/* The strides of labels_from's layout, after the gather buffer's argument. */
static void gather_args(relcl__args *a, const plan *p, bool per_head) {
  const cl_uint block = (cl_uint)gather_block(p, per_head);
  const cl_uint label = (cl_uint)gather_label(p, per_head);
  RELCL__ARG(a, block);
  RELCL__ARG(a, label);
}

/* Y (rows x d) += L (rows x R) . W[window], W shared or per head. */
static relcl_status add_from_labels(relcl_context *ctx, const plan *p, bool per_head, relcl_buf L,
                                    relcl_buf W, relcl_buf Y) {
  relcl_buf win = relcl_buf_at(W.mem, W.offset + (size_t)p->rlo * p->d);
  if (!per_head) return add_labels_shared(ctx, p, L, win, Y);
  const entries e = label_entries(p, per_head);
  for (size_t b = 0; b < e.calls; b++) {
    relcl_status st = REL_GEMM(
        ctx, false, false, p->nq, p->d, (size_t)p->R, 1.0f,
        relcl_buf_at(L.mem, L.offset + b * e.batch * p->nq * (size_t)p->R), (size_t)p->R,
        p->nq * (size_t)p->R, win, p->d, e.w_stride, 1.0f,
        relcl_buf_at(Y.mem, Y.offset + b * e.batch * p->nq * p->d), p->d, p->nq * p->d,
        e.batch);
    if (st != RELCL_OK) return st;
  }
  return RELCL_OK;
}

/* Y = op(A) B per (b, h) (op(A) m x kk, at a_stride; B kk x d, at b_stride), and with labels
 * Y += L (rows x R) W[window] (add_from_labels). A shared table's labels, where relcl's own
 * products run, go into the same pass as A B's (relcl__gemm_plus: each element of Y one sum,
 * kk terms then R): the label sums' own product (16000x64x33 and 16000x64x17 with beta 1,
 * issue-8 step) moved all of Y twice more for R terms. Y is in the heads layout (ld 0) or
 * merged with row length ld (ops.h): relcl's own products write it there, one batch over
 * all heads; elsewhere, and where per-head tables' labels are added, Y goes through scratch
 * in the heads layout and relcl__heads_merge. */
static relcl_status heads_product(relcl_context *ctx, const plan *p, bool per_head, bool trans_a,
                                  size_t m, size_t kk, relcl_buf A, size_t a_stride,
                                  relcl_buf B, size_t b_stride, bool labels, relcl_buf L,
                                  relcl_buf W, relcl_buf Y, size_t ld) {
  const size_t d = p->d, R = (size_t)p->R, lda = trans_a ? m : kk;
  const bool own = relcl__own_products(ctx), fuse = labels && !per_head && own;
  if (ld > 0 && (!own || (labels && !fuse))) { /* through scratch */
    cl_mem T = NULL;
    relcl_status st = relcl__pool_get(ctx, p->BH * m * d * sizeof(float), &T);
    if (st == RELCL_OK)
      st = heads_product(ctx, p, per_head, trans_a, m, kk, A, a_stride, B, b_stride, labels, L,
                         W, relcl_buf_at(T, 0), 0);
    if (st == RELCL_OK)
      st = relcl__heads_merge(ctx, 1, (int)p->B, (int)m, (int)p->H, (int)d, relcl_buf_at(T, 0),
                              Y, ld);
    relcl__pool_put(ctx, T);
    return st;
  }
  const size_t ldc = ld > 0 ? ld : d, stride_c = m * ldc, heads = ld > 0 ? p->H : 1;
  if (fuse || ld > 0) {
    const relcl__gemm_term t2 = {R, L, R, p->nq * R,
                                 relcl_buf_at(W.mem, W.offset + (size_t)p->rlo * d), d, 0};
    return relcl__gemm_plus(ctx, RELCL_PART_CONTENT_GEMM, trans_a, m, d, kk, 1.0f, A, lda,
                            a_stride, B, d, b_stride, fuse ? &t2 : NULL,
                            RELCL_PART_RELATIVE_GEMM, 0.0f, Y, ldc, stride_c, heads, d, p->BH);
  }
  relcl_status st = relcl__gemm(ctx, trans_a, false, m, d, kk, 1.0f, A, lda, a_stride, B, d,
                                b_stride, 0.0f, Y, d, m * d, p->BH);
  if (st == RELCL_OK && labels) st = add_from_labels(ctx, p, per_head, L, W, Y);
  return st;
}

/* A shared table's dW[window] += L^T X over all rows, in two passes of fixed order: the
 * partial sums of chunks of rows into scratch, then the column sum's finish over the chunks.
 * On CPUs (relcl__own_products) the chunks are up to 512 rows, as even as whole rows allow,
 * one batched product through relcl's GEMM door (gemm_cpu, A transposed; a last, shorter
 * chunk a second call; with chunks of exactly 512 that one ran 128 rows of 16000 at a seventh
 * of the batch's rate): relcl-bench's
 * issue-8 step (Zen 5), 33x64x16000 3.6 -> 1.3-1.4 ms a step and 17x64x16000 2.1 -> 0.8-0.9,
 * against relcl's table_grad_partial over chunks of 128; chunks of 256, 1024 or the whole sum
 * in slices were slower. Elsewhere table_grad_partial (kernels/attention.cl) computes the
 * chunks of TABLE_CHUNK rows, a column of a label a work-item: as one CLBlast product (R x d x
 * all rows) the indirect kernel padded R to its tiles and ran at about 12 GFLOP/s on PoCL. */
enum { TABLE_CHUNK = 128, TABLE_GEMM_CHUNK = 512 };

/* part's chunks of len rows each (the last rest < len rows, if rest > 0) */
static relcl_status table_chunks_gemm(relcl_context *ctx, const plan *p, relcl_buf L, relcl_buf X,
                                      cl_mem part, size_t len, size_t whole, size_t rest) {
  const size_t R = (size_t)p->R, cols = R * p->d;
  relcl_status st = RELCL_OK;
  if (whole > 0)
    st = REL_GEMM(ctx, true, false, R, p->d, len, 1.0f, L, R, len * R, X, p->d, len * p->d, 0.0f,
                  relcl_buf_at(part, 0), p->d, cols, whole);
  if (st == RELCL_OK && rest > 0)
    st = REL_GEMM(ctx, true, false, R, p->d, rest, 1.0f,
                  relcl_buf_at(L.mem, L.offset + whole * len * R), R, 0,
                  relcl_buf_at(X.mem, X.offset + whole * len * p->d), p->d, 0, 0.0f,
                  relcl_buf_at(part, whole * cols), p->d, 0, 1);
  return st;
}

/* part's chunks (chunk rows each) in relcl's table_grad_partial */
static relcl_status table_chunks_kernel(relcl_context *ctx, const plan *p, relcl_buf L,
                                        relcl_buf X, cl_mem part, size_t chunk, size_t chunks) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "attention", "table_grad_partial", &k);
  if (st != RELCL_OK) return st;
  const cl_uint rows = (cl_uint)p->rows, ch = (cl_uint)chunk;
  const int R = p->R, d = (int)p->d;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, L, NULL);
  relcl__buf_arg(&a, X, NULL);
  RELCL__ARG(&a, part);
  RELCL__ARG(&a, rows);
  RELCL__ARG(&a, R);
  RELCL__ARG(&a, d);
  RELCL__ARG(&a, ch);
  size_t w = relcl__pow2_wg(p->d, k->max_wg < 64 ? k->max_wg : 64);
  size_t global[3] = {(p->d + w - 1) / w * w, (size_t)R, chunks}, local[3] = {w, 1, 1};
  return relcl__launch_product(ctx, k, &a, 3, global, local, (size_t)R, p->d, p->rows);
}

/* The rows of each of the tables' chunks (*chunks of them, the last possibly shorter): with
 * relcl's GEMMs, as many as TABLE_GEMM_CHUNK's would make, as even as whole rows allow */
static size_t table_chunk(const plan *p, bool gemm, size_t *chunks) {
  size_t chunk = gemm ? TABLE_GEMM_CHUNK : TABLE_CHUNK;
  *chunks = (p->rows + chunk - 1) / chunk;
  if (gemm) {
    chunk = (p->rows + *chunks - 1) / *chunks;
    *chunks = (p->rows + chunk - 1) / chunk;
  }
  return chunk;
}

static relcl_status shared_table_grad(relcl_context *ctx, const plan *p, relcl_buf L,
                                      relcl_buf X, relcl_buf dst) {
  const bool gemm = relcl__own_products(ctx);
  size_t chunks;
  const size_t chunk = table_chunk(p, gemm, &chunks);
  const size_t cols = (size_t)p->R * p->d;
  cl_mem part = NULL;
  relcl_status st = relcl__pool_get(ctx, chunks * cols * sizeof(float), &part);
  if (st == RELCL_OK)
    st = gemm ? table_chunks_gemm(ctx, p, L, X, part, chunk, p->rows / chunk, p->rows % chunk)
              : table_chunks_kernel(ctx, p, L, X, part, chunk, chunks);
  if (st == RELCL_OK)
    st = relcl__colsum_finish(ctx, part, 0, (int)chunks, (int)cols, dst, RELCL_BUF_NONE, 1);
  relcl__pool_put(ctx, part);
  return st;
}

/* Both shared tables' gradients, dwV[window] += Bk^T dZ and dwK[window] += Cb^T Q (either
 * may be absent: dW.mem NULL), over all rows, on CPUs with the item shape (relcl__row_item and
 * relcl__own_products): the chunks shared_table_grad's GEMMs run, in one launch of
 * kernels/gemm.cl's table_grads_cpu for both tables, each chunk's sum that of gemm_cpu_batch,
 * then colsum_finish over each table's chunks, both tables in one launch: the bits of
 * shared_table_grad for each table, in two launches instead of four to six. Model-207 Xeon,
 * attention forward and backward alone, this and the separate launches in two builds
 * alternated in one process (medians of 30, every output the same bits): relcl-bench's
 * default shape (16 x 4 heads, 32 positions, d 32, k 8) 1.019 and 1.026 times as fast, causal
 * 1.011 and 1.025, the backward alone 1.070; issue 8's shape (125 x 4, d 64, k 16) 1.037. */
static bool grads_at_once(relcl_context *ctx) {
  return relcl__row_item(ctx) && relcl__own_products(ctx);
}

static relcl_status shared_table_grads(relcl_context *ctx, const plan *p, relcl_buf Lv,
                                       relcl_buf Xv, relcl_buf dwV, relcl_buf Lk, relcl_buf Xk,
                                       relcl_buf dwK) {
  /* the tables present, in order (a lone one given to the kernel twice, its second unused) */
  relcl_buf L[2], X[2], y[2];
  cl_uint tables = 0;
  if (dwV.mem) L[tables] = Lv, X[tables] = Xv, y[tables++] = dwV;
  if (dwK.mem) L[tables] = Lk, X[tables] = Xk, y[tables++] = dwK;
  if (tables == 0) return RELCL_OK;
  if (tables == 1) L[1] = L[0], X[1] = X[0];
  size_t chunks;
  const size_t chunk = table_chunk(p, true, &chunks);
  const size_t cols = (size_t)p->R * p->d, win = (size_t)p->rlo * p->d;
  relcl__kernel_entry *kp;
  relcl_status st = relcl__kernel(ctx, "gemm", "table_grads_cpu", &kp);
  cl_mem part = NULL;
  if (st == RELCL_OK) st = relcl__pool_get(ctx, tables * chunks * cols * sizeof(float), &part);
  if (st == RELCL_OK) {
    const cl_uint rows = (cl_uint)p->rows, ch = (cl_uint)chunk;
    const int R = p->R, d = (int)p->d;
    relcl__args a = {kp->kernel, 0, CL_SUCCESS};
    for (int t = 0; t < 2; t++) {
      relcl__buf_arg(&a, L[t], NULL);
      relcl__buf_arg(&a, X[t], NULL);
    }
    RELCL__ARG(&a, part);
    RELCL__ARG(&a, rows);
    RELCL__ARG(&a, R);
    RELCL__ARG(&a, d);
    RELCL__ARG(&a, ch);
    const size_t global[2] = {chunks, tables}, local[2] = {1, 1};
    st = relcl__launch_product(ctx, kp, &a, 2, global, local, (size_t)R, p->d,
                               tables * p->rows);
  }
  /* each table's sum over its chunks, in order, both in one launch */
  if (st == RELCL_OK)
    st = relcl__colsum_finish(ctx, part, 0, (int)chunks, (int)cols,
                              relcl_buf_at(y[0].mem, y[0].offset + win),
                              tables == 2 ? relcl_buf_at(y[1].mem, y[1].offset + win)
                                          : RELCL_BUF_NONE,
                              1);
  relcl__pool_put(ctx, part);
  return st;
}

/* dW[window] += L^T (rows x R)^T . X (rows x d), summed over batch (and heads when shared),
 * in a fixed order. Per head, one strided-batched GEMM per sequence: the entries of one call
 * write different tables, so no two race and the sum over sequences keeps its order. */
static relcl_status table_grad(relcl_context *ctx, const plan *p, bool per_head, relcl_buf L,
                               relcl_buf X, relcl_buf dW) {
  relcl_buf dst = relcl_buf_at(dW.mem, dW.offset + (size_t)p->rlo * p->d);
  if (!per_head) return shared_table_grad(ctx, p, L, X, dst);
  const size_t R = (size_t)p->R;
  for (size_t b = 0; b < p->B; b++) {
    relcl_status st = REL_GEMM(
        ctx, true, false, R, p->d, p->nq, 1.0f,
        relcl_buf_at(L.mem, L.offset + b * p->H * p->nq * R), R, p->nq * R,
        relcl_buf_at(X.mem, X.offset + b * p->H * p->nq * p->d), p->d, p->nq * p->d, 1.0f, dst,
        p->d, p->table, p->H);
    if (st != RELCL_OK) return st;
  }
  return RELCL_OK;
}

/* The shape every attention kernel takes: H, nq, nk, k, rlo, R, q_pos0 (the row kernels
 * after their rows, kernels/gemm.cl's attn_fwd_cpu and attn_bwd_cpu before head_dim) */
static void head_args(relcl__args *a, const plan *p, const relcl_attn_desc *desc) {
  const int H = (int)p->H, nq = desc->nq, nk = desc->nk, q0 = desc->q_pos0;
  RELCL__ARG(a, H);
  RELCL__ARG(a, nq);
  RELCL__ARG(a, nk);
  RELCL__ARG(a, p->k);
  RELCL__ARG(a, p->rlo);
  RELCL__ARG(a, p->R);
  RELCL__ARG(a, q0);
}

/* Arguments common to the three row kernels, after their buffers */
static void row_args(relcl__args *a, const plan *p, const relcl_attn_desc *desc, int flags) {
  const int rows = (int)p->rows;
  RELCL__ARG(a, rows);
  head_args(a, p, desc);
  RELCL__ARG(a, flags);
}

static void drop_args(relcl__args *a, const plan *p) {
  RELCL__ARG(a, p->drop_threshold);
  RELCL__ARG(a, p->drop_scale);
  RELCL__ARG(a, p->seed_lo);
  RELCL__ARG(a, p->seed_hi);
  RELCL__ARG(a, p->stream_lo);
  RELCL__ARG(a, p->stream_hi);
}

/* A work-group or a work-item per query row (kernels/common.cl), as the context says. */
static relcl_status launch_rows(relcl_context *ctx, relcl__kernel_entry *k, relcl__args *a,
                                const plan *p) {
  return relcl__launch_rows(ctx, k, a, p->rows, p->nk, 1, relcl__row_item(ctx));
}

/* The forward's saved state's floats (ops.h): alpha' (rows x nk), then with the a^V term
 * its label sums (rows x R, as attn_fwd_rows writes Bk) */
static size_t saved_floats(const plan *p) {
  return p->rows * p->nk + (p->rel_v ? p->rows * (size_t)p->R : 0);
}

size_t relcl_attn_saved_size(const relcl_attn_desc *desc) {
  relcl__clear_error();
  plan p = {0};
  return make_plan(desc, &p) == RELCL_OK ? saved_floats(&p) : 0;
}

/* relcl_attn_forward and _forward_saved: the checks, then the unchecked forward */
static relcl_status attn_forward_checked(relcl_context *ctx, const relcl_attn_desc *desc,
                                         relcl_buf Q, relcl_buf K, relcl_buf V, relcl_buf wK,
                                         relcl_buf wV, relcl_buf key_len, relcl_buf Z,
                                         relcl_buf probs, relcl_buf saved, bool with_saved) {
  relcl__clear_error();
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "attention: ctx is NULL");
  plan p = {0};
  relcl_status st = make_plan(desc, &p);
  if (st == RELCL_OK) st = check_inputs(&p, desc, Q, K, V, wK, wV, key_len);
  if (st == RELCL_OK) st = relcl__check_buf(Z, p.rows * p.d, "Z");
  if (st == RELCL_OK && (probs.mem || with_saved))
    st = relcl__check_buf(probs, p.rows * p.nk, "probs");
  if (st == RELCL_OK && with_saved) st = relcl__check_buf(saved, saved_floats(&p), "saved");
  if (st != RELCL_OK) return st;
  return relcl__attn_forward(ctx, desc, Q, K, V, wK, wV, key_len, Z, 0, probs, saved);
}

relcl_status relcl_attn_forward(relcl_context *ctx, const relcl_attn_desc *desc, relcl_buf Q,
                                relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                relcl_buf key_len, relcl_buf Z, relcl_buf probs) {
  return attn_forward_checked(ctx, desc, Q, K, V, wK, wV, key_len, Z, probs, RELCL_BUF_NONE,
                              false);
}

relcl_status relcl_attn_forward_saved(relcl_context *ctx, const relcl_attn_desc *desc,
                                      relcl_buf Q, relcl_buf K, relcl_buf V, relcl_buf wK,
                                      relcl_buf wV, relcl_buf key_len, relcl_buf Z,
                                      relcl_buf probs, relcl_buf saved) {
  return attn_forward_checked(ctx, desc, Q, K, V, wK, wV, key_len, Z, probs, saved, true);
}

/* Where a pass writes or reads alpha' (rows x nk) and, with the a^V term, its label sums
 * (rows x R): the caller's saved state (saved_floats), or scratch from the pool into *Am
 * (with need_a) and *Bm, which the caller gives back. *A is absent where alpha' has no
 * buffer of its own. */
static relcl_status weights_at(relcl_context *ctx, const plan *p, relcl_buf saved,
                               bool need_a, cl_mem *Am, cl_mem *Bm, relcl_buf *A,
                               relcl_buf *Bk) {
  *Am = *Bm = NULL;
  if (saved.mem) {
    *A = saved;
    *Bk = relcl_buf_at(saved.mem, saved.offset + p->rows * p->nk);
    return RELCL_OK;
  }
  relcl_status st = RELCL_OK;
  if (need_a) st = relcl__pool_get(ctx, p->rows * p->nk * sizeof(float), Am);
  if (st == RELCL_OK && p->rel_v)
    st = relcl__pool_get(ctx, p->rows * (size_t)p->R * sizeof(float), Bm);
  *A = relcl_buf_at(*Am, 0);
  *Bk = relcl_buf_at(*Bm, 0);
  return st;
}

/* The profile names and rates each fused kernel as the one product m x n x k with as many
 * multiply-adds as its products have (relcl-bench's per-shape table gives its GFLOP/s, rows
 * and dropout included in its time): m = B H nq rows, k = head_dim, and n, returned here, the
 * columns of its products over k: nk_products of nk columns (the forward's Q K^T and alpha'
 * V; the backward's dV, D = dZ V^T, dQ and dK) and one of R for each table (Q wK^T and B' wV;
 * G = dZ wV^T and C wK). */
static size_t fused_columns(const plan *p, size_t nk_products) {
  return nk_products * p->nk + (p->rel ? (size_t)p->R : 0) + (p->rel_v ? (size_t)p->R : 0);
}

/* Whether attention runs in one kernel a head (kernels/gemm.cl attn_fwd_cpu, attn_bwd_cpu):
 * on CPUs (relcl__attn_fused), with a shared table or none, head_dim within gemm_cpu_bt's
 * longest sum */
static bool fused(const relcl_context *ctx, const plan *p, const relcl_attn_desc *desc) {
  return relcl__attn_fused(ctx) && !(p->rel && desc->per_head) && p->d <= RELCL_CPU_BT_KMAX;
}

/* The forward in one kernel a head (kernels/gemm.cl attn_fwd_cpu): S, the relative logits and
 * the label sums go through scratch that the same work-item writes and reads back at once, so
 * they stay in its cache (S and the label sums through saved, where the caller keeps them for
 * the backward). The same sums in the same order as the three launches below it. */
static relcl_status fused_forward(relcl_context *ctx, const plan *p, const relcl_attn_desc *desc,
                                  relcl_buf Q, relcl_buf K, relcl_buf V, relcl_buf wK,
                                  relcl_buf wV, relcl_buf key_len, relcl_buf Z, size_t z_ld,
                                  relcl_buf probs, relcl_buf saved) {
  cl_mem S = NULL, Pm = NULL, Bm = NULL, Am = NULL;
  relcl_buf Sb, Bb; /* S, then alpha', and its label sums */
  relcl__kernel_entry *kern;
  const size_t Rsz = p->rows * (size_t)p->R * sizeof(float);
  relcl_status st = relcl__kernel(ctx, "gemm", "attn_fwd_cpu", &kern);
  if (st == RELCL_OK) st = weights_at(ctx, p, saved, true, &S, &Bm, &Sb, &Bb);
  if (st == RELCL_OK && p->rel) st = relcl__pool_get(ctx, Rsz, &Pm);
  if (st == RELCL_OK && !probs.mem) {
    st = relcl__pool_get(ctx, p->rows * p->nk * sizeof(float), &Am);
    probs = relcl_buf_at(Am, 0);
  }
  if (st == RELCL_OK) {
    const int flags = p->flags | (p->rel ? RELCL_GATHER : 0) | (p->rel_v ? RELCL_BUCKET : 0) |
                      (key_len.mem ? RELCL_KEY_LEN : 0);
    const cl_uint zl = (cl_uint)z_ld;
    const int d = (int)p->d;
    const size_t win = (size_t)p->rlo * p->d; /* the tables at label rlo */
    relcl__args a = {kern->kernel, 0, CL_SUCCESS};
    relcl__buf_arg(&a, Q, NULL);
    relcl__buf_arg(&a, K, NULL);
    relcl__buf_arg(&a, V, NULL);
    relcl__buf_arg(&a, p->rel ? relcl_buf_at(wK.mem, wK.offset + win) : Q, NULL);
    relcl__buf_arg(&a, p->rel_v ? relcl_buf_at(wV.mem, wV.offset + win) : Q, NULL);
    relcl__buf_arg(&a, key_len, S);
    relcl__buf_arg(&a, Z, NULL);
    RELCL__ARG(&a, zl);
    relcl__buf_arg(&a, probs, NULL);
    const cl_mem pm = Pm ? Pm : Sb.mem;
    relcl__buf_arg(&a, Sb, NULL);
    RELCL__ARG(&a, pm);
    relcl__buf_arg(&a, Bb, Sb.mem);
    head_args(&a, p, desc);
    RELCL__ARG(&a, d);
    RELCL__ARG(&a, flags);
    RELCL__ARG(&a, p->scale);
    drop_args(&a, p);
    const size_t global[1] = {p->BH}, local[1] = {1};
    st = relcl__launch_product(ctx, kern, &a, 1, global, local, p->rows, fused_columns(p, 2),
                               p->d);
  }
  relcl__pool_put(ctx, S);
  relcl__pool_put(ctx, Pm);
  relcl__pool_put(ctx, Bm);
  relcl__pool_put(ctx, Am);
  return st;
}

/* make_plan again (host arithmetic, no OpenCL call): the plan is also what the launch uses. */
relcl_status relcl__attn_forward(relcl_context *ctx, const relcl_attn_desc *desc, relcl_buf Q,
                                 relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                 relcl_buf key_len, relcl_buf Z, size_t z_ld, relcl_buf probs,
                                 relcl_buf saved) {
  plan p = {0};
  relcl_status st = make_plan(desc, &p);
  if (st != RELCL_OK) return st;
  if (fused(ctx, &p, desc))
    return fused_forward(ctx, &p, desc, Q, K, V, wK, wV, key_len, Z, z_ld, probs, saved);

  cl_mem S = NULL, Pm = NULL, Bm = NULL, Am = NULL;
  relcl__kernel_entry *kern;
  const size_t Rsz = p.rows * (size_t)p.R * sizeof(float);
  if ((st = relcl__kernel(ctx, "attention", "attn_fwd_rows", &kern)) != RELCL_OK) goto done;
  relcl_buf Sb, Bb; /* S, then alpha', and its label sums */
  if ((st = weights_at(ctx, &p, saved, true, &S, &Bm, &Sb, &Bb)) != RELCL_OK) goto done;
  if (p.rel && (st = relcl__pool_get(ctx, Rsz, &Pm)) != RELCL_OK) goto done;
  if (!probs.mem) {
    if ((st = relcl__pool_get(ctx, p.rows * p.nk * sizeof(float), &Am)) != RELCL_OK) goto done;
    probs = relcl_buf_at(Am, 0);
  }
  const relcl_buf Pb = relcl_buf_at(Pm, 0);

  /* S = Q K^T per (b, h) */
  st = relcl__gemm(ctx, false, true, p.nq, p.nk, p.d, 1.0f, Q, p.d, p.nq * p.d, K, p.d,
                   p.nk * p.d, 0.0f, Sb, p.nk, p.nq * p.nk, p.BH);
  if (st != RELCL_OK) goto done;
  /* P = Q wK^T over the labels in use */
  if (p.rel && (st = labels_from(ctx, &p, desc->per_head, Q, wK, Pb)) != RELCL_OK) goto done;

  {
    int flags = p.flags | (p.rel ? RELCL_GATHER : 0) | (p.rel_v ? RELCL_BUCKET : 0) |
                (key_len.mem ? RELCL_KEY_LEN : 0);
    relcl__args a = {kern->kernel, 0, CL_SUCCESS};
    relcl__buf_arg(&a, Sb, NULL);
    relcl__buf_arg(&a, Pb, Sb.mem);
    gather_args(&a, &p, desc->per_head);
    relcl__buf_arg(&a, probs, NULL);
    relcl__buf_arg(&a, Bb, Sb.mem);
    relcl__buf_arg(&a, key_len, Sb.mem);
    row_args(&a, &p, desc, flags);
    RELCL__ARG(&a, p.scale);
    drop_args(&a, &p);
    if ((st = launch_rows(ctx, kern, &a, &p)) != RELCL_OK) goto done;
  }

  /* Z = alpha' V (+ B' wV) */
  st = heads_product(ctx, &p, desc->per_head, false, p.nq, p.nk, Sb, p.nq * p.nk, V, p.nk * p.d,
                     p.rel_v, Bb, wV, Z, z_ld);
done:
  relcl__pool_put(ctx, S);
  relcl__pool_put(ctx, Pm);
  relcl__pool_put(ctx, Bm);
  relcl__pool_put(ctx, Am);
  return st;
}

/* relcl_attn_backward and _backward_saved: the checks, then the unchecked backward */
static relcl_status attn_backward_checked(relcl_context *ctx, const relcl_attn_desc *desc,
                                          relcl_buf Q, relcl_buf K, relcl_buf V, relcl_buf wK,
                                          relcl_buf wV, relcl_buf key_len, relcl_buf probs,
                                          relcl_buf saved, bool with_saved, relcl_buf dZ,
                                          relcl_buf dQ, relcl_buf dK, relcl_buf dV,
                                          relcl_buf dwK, relcl_buf dwV) {
  relcl__clear_error();
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "attention: ctx is NULL");
  plan p = {0};
  relcl_status st = make_plan(desc, &p);
  if (st != RELCL_OK) return st;
  size_t tables = desc->per_head ? p.H : 1;
  st = check_inputs(&p, desc, Q, K, V, wK, wV, key_len);
  if (st == RELCL_OK) st = relcl__check_buf(probs, p.rows * p.nk, "probs");
  if (st == RELCL_OK) st = relcl__check_buf(dZ, p.rows * p.d, "dZ");
  if (st == RELCL_OK) st = relcl__check_buf(dQ, p.rows * p.d, "dQ");
  if (st == RELCL_OK) st = relcl__check_buf(dK, p.BH * p.nk * p.d, "dK");
  if (st == RELCL_OK) st = relcl__check_buf(dV, p.BH * p.nk * p.d, "dV");
  if (st == RELCL_OK && p.rel && dwK.mem) st = relcl__check_buf(dwK, tables * p.table, "dwK");
  if (st == RELCL_OK && p.rel_v && dwV.mem) st = relcl__check_buf(dwV, tables * p.table, "dwV");
  if (st == RELCL_OK && with_saved) st = relcl__check_buf(saved, saved_floats(&p), "saved");
  if (st != RELCL_OK) return st;
  return relcl__attn_backward(ctx, desc, Q, K, V, wK, wV, key_len, probs, saved, dZ, dQ, 0, dK,
                              dV, 0, dwK, dwV);
}

relcl_status relcl_attn_backward(relcl_context *ctx, const relcl_attn_desc *desc, relcl_buf Q,
                                 relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                 relcl_buf key_len, relcl_buf probs, relcl_buf dZ,
                                 relcl_buf dQ, relcl_buf dK, relcl_buf dV, relcl_buf dwK,
                                 relcl_buf dwV) {
  return attn_backward_checked(ctx, desc, Q, K, V, wK, wV, key_len, probs, RELCL_BUF_NONE,
                               false, dZ, dQ, dK, dV, dwK, dwV);
}

relcl_status relcl_attn_backward_saved(relcl_context *ctx, const relcl_attn_desc *desc,
                                       relcl_buf Q, relcl_buf K, relcl_buf V, relcl_buf wK,
                                       relcl_buf wV, relcl_buf key_len, relcl_buf probs,
                                       relcl_buf saved, relcl_buf dZ, relcl_buf dQ,
                                       relcl_buf dK, relcl_buf dV, relcl_buf dwK,
                                       relcl_buf dwV) {
  return attn_backward_checked(ctx, desc, Q, K, V, wK, wV, key_len, probs, saved, true, dZ, dQ,
                               dK, dV, dwK, dwV);
}

/* The backward in one kernel a head (kernels/gemm.cl attn_bwd_cpu), then the tables'
 * gradients, sums over every head, from the label sums in Bk (computed again, or saved) and
 * Cb: the same sums in the same order as relcl__attn_backward's launches. */
static relcl_status fused_backward(relcl_context *ctx, const plan *p,
                                   const relcl_attn_desc *desc, relcl_buf Q, relcl_buf K,
                                   relcl_buf V, relcl_buf wK, relcl_buf wV, relcl_buf key_len,
                                   relcl_buf probs, relcl_buf saved, relcl_buf dZ, relcl_buf dQ,
                                   size_t dq_ld,
                                   relcl_buf dK, relcl_buf dV, size_t dkv_ld, relcl_buf dwK,
                                   relcl_buf dwV) {
  cl_mem Am = NULL, Dm = NULL, Bm = NULL, Gm = NULL, Cm = NULL;
  const size_t Rsz = p->rows * (size_t)p->R * sizeof(float);
  const size_t Ssz = p->rows * p->nk * sizeof(float);
  relcl__kernel_entry *kern;
  relcl_status st = relcl__kernel(ctx, "gemm", "attn_bwd_cpu", &kern);
  if (st == RELCL_OK) st = relcl__pool_get(ctx, Ssz, &Dm);
  if (st == RELCL_OK && p->rel) st = relcl__pool_get(ctx, Rsz, &Cm);
  if (st == RELCL_OK && p->rel_v) st = relcl__pool_get(ctx, Rsz, &Gm);
  /* alpha' and its label sums: the forward's, or the drop pass's */
  relcl_buf A = RELCL_BUF_NONE, Bb = RELCL_BUF_NONE;
  if (st == RELCL_OK)
    st = weights_at(ctx, p, saved, (p->flags & RELCL_DROPOUT) != 0, &Am, &Bm, &A, &Bb);
  if (st == RELCL_OK) {
    const int len_flag = key_len.mem ? RELCL_KEY_LEN : 0;
    /* attn_drop_rows' flags (0: alpha' is alpha and no label sums of it are needed;
     * RELCL_SAVED: no drop pass) and attn_bwd_rows' */
    const int fd_drop = p->flags | len_flag | (Am ? RELCL_WRITE_A : 0) |
                        (p->rel_v ? RELCL_BUCKET : 0);
    const int fd = saved.mem ? RELCL_SAVED : Am || p->rel_v ? fd_drop : 0;
    const int fb =
        p->flags | len_flag | (p->rel_v ? RELCL_GATHER : 0) | (p->rel ? RELCL_BUCKET : 0);
    const cl_uint dql = (cl_uint)dq_ld, dkvl = (cl_uint)dkv_ld;
    const int d = (int)p->d;
    const size_t win = (size_t)p->rlo * p->d; /* the tables at label rlo */
    cl_mem gm = Gm ? Gm : Dm, cm = Cm ? Cm : Dm;
    relcl__args a = {kern->kernel, 0, CL_SUCCESS};
    relcl__buf_arg(&a, Q, NULL);
    relcl__buf_arg(&a, K, NULL);
    relcl__buf_arg(&a, V, NULL);
    relcl__buf_arg(&a, p->rel ? relcl_buf_at(wK.mem, wK.offset + win) : Q, NULL);
    relcl__buf_arg(&a, p->rel_v ? relcl_buf_at(wV.mem, wV.offset + win) : Q, NULL);
    relcl__buf_arg(&a, key_len, Dm);
    relcl__buf_arg(&a, probs, NULL);
    relcl__buf_arg(&a, dZ, NULL);
    relcl__buf_arg(&a, dQ, NULL);
    RELCL__ARG(&a, dql);
    relcl__buf_arg(&a, dK, NULL);
    relcl__buf_arg(&a, dV, NULL);
    RELCL__ARG(&a, dkvl);
    relcl__buf_arg(&a, A, Dm);
    RELCL__ARG(&a, Dm);
    RELCL__ARG(&a, gm);
    relcl__buf_arg(&a, Bb, Dm);
    RELCL__ARG(&a, cm);
    head_args(&a, p, desc);
    RELCL__ARG(&a, d);
    RELCL__ARG(&a, fd);
    RELCL__ARG(&a, fb);
    RELCL__ARG(&a, p->scale);
    drop_args(&a, p);
    const size_t global[1] = {p->BH}, local[1] = {1};
    st = relcl__launch_product(ctx, kern, &a, 1, global, local, p->rows, fused_columns(p, 4),
                               p->d);
  }
  /* dwV += B'^T dZ, dwK += C^T Q */
  if (st == RELCL_OK)
    st = shared_table_grads(ctx, p, Bb, dZ, p->rel_v ? dwV : RELCL_BUF_NONE,
                            relcl_buf_at(Cm, 0), Q, p->rel ? dwK : RELCL_BUF_NONE);
  relcl__pool_put(ctx, Am);
  relcl__pool_put(ctx, Dm);
  relcl__pool_put(ctx, Bm);
  relcl__pool_put(ctx, Gm);
  relcl__pool_put(ctx, Cm);
  return st;
}

relcl_status relcl__attn_backward(relcl_context *ctx, const relcl_attn_desc *desc, relcl_buf Q,
                                  relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                  relcl_buf key_len, relcl_buf probs, relcl_buf saved,
                                  relcl_buf dZ, relcl_buf dQ, size_t dq_ld, relcl_buf dK,
                                  relcl_buf dV, size_t dkv_ld, relcl_buf dwK, relcl_buf dwV) {
  plan p = {0};
  relcl_status st = make_plan(desc, &p);
  if (st != RELCL_OK) return st;
  if (fused(ctx, &p, desc))
    return fused_backward(ctx, &p, desc, Q, K, V, wK, wV, key_len, probs, saved, dZ, dQ, dq_ld,
                          dK, dV, dkv_ld, dwK, dwV);

  cl_mem Am = NULL, Dm = NULL, Bm = NULL, Gm = NULL, Cm = NULL;
  const size_t Rsz = p.rows * (size_t)p.R * sizeof(float);
  const size_t Ssz = p.rows * p.nk * sizeof(float);
  const int len_flag = key_len.mem ? RELCL_KEY_LEN : 0;
  relcl__kernel_entry *kdrop, *kbwd;
  if ((st = relcl__kernel(ctx, "attention", "attn_drop_rows", &kdrop)) != RELCL_OK) goto done;
  if ((st = relcl__kernel(ctx, "attention", "attn_bwd_rows", &kbwd)) != RELCL_OK) goto done;
  if ((st = relcl__pool_get(ctx, Ssz, &Dm)) != RELCL_OK) goto done;
  if (p.rel && (st = relcl__pool_get(ctx, Rsz, &Cm)) != RELCL_OK) goto done;
  if (p.rel_v && (st = relcl__pool_get(ctx, Rsz, &Gm)) != RELCL_OK) goto done;
  /* alpha' (= alpha without dropout) and its label sums B': the forward's where it saved them */
  relcl_buf A, Bb;
  if ((st = weights_at(ctx, &p, saved, (p.flags & RELCL_DROPOUT) != 0, &Am, &Bm, &A, &Bb)) !=
      RELCL_OK)
    goto done;
  if (!A.mem) A = probs;
  relcl_buf Db = relcl_buf_at(Dm, 0), Gb = relcl_buf_at(Gm, 0), Cb = relcl_buf_at(Cm, 0);

  /* alpha' and its label sums B', as the forward pass had them */
  if (!saved.mem && (Am || p.rel_v)) {
    relcl__args a = {kdrop->kernel, 0, CL_SUCCESS};
    relcl__buf_arg(&a, probs, Dm);
    relcl__buf_arg(&a, relcl_buf_at(Am, 0), Dm);
    relcl__buf_arg(&a, Bb, Dm);
    relcl__buf_arg(&a, key_len, Dm);
    row_args(&a, &p, desc,
             p.flags | len_flag | (Am ? RELCL_WRITE_A : 0) | (p.rel_v ? RELCL_BUCKET : 0));
    drop_args(&a, &p);
    if ((st = launch_rows(ctx, kdrop, &a, &p)) != RELCL_OK) goto done;
  }
  /* dV = alpha'^T dZ;  dwV += B'^T dZ */
  st = heads_product(ctx, &p, desc->per_head, true, p.nk, p.nq, A, p.nq * p.nk, dZ, p.nq * p.d,
                     false, RELCL_BUF_NONE, RELCL_BUF_NONE, dV, dkv_ld);
  /* with both tables' gradients at once, at the end */
  const bool at_once = !desc->per_head && grads_at_once(ctx);
  if (st == RELCL_OK && p.rel_v && dwV.mem && !at_once)
    st = table_grad(ctx, &p, desc->per_head, Bb, dZ, dwV);
  if (st != RELCL_OK) goto done;
  /* dalpha' = dZ V^T (+ G at the labels, G = dZ wV^T) */
  st = relcl__gemm(ctx, false, true, p.nq, p.nk, p.d, 1.0f, dZ, p.d, p.nq * p.d, V, p.d,
                   p.nk * p.d, 0.0f, Db, p.nk, p.nq * p.nk, p.BH);
  if (st == RELCL_OK && p.rel_v) st = labels_from(ctx, &p, desc->per_head, dZ, wV, Gb);
  if (st != RELCL_OK) goto done;
  {
    relcl__args a = {kbwd->kernel, 0, CL_SUCCESS};
    relcl__buf_arg(&a, Db, Dm);
    relcl__buf_arg(&a, Gb, Dm);
    gather_args(&a, &p, desc->per_head);
    relcl__buf_arg(&a, probs, Dm);
    relcl__buf_arg(&a, Cb, Dm);
    relcl__buf_arg(&a, key_len, Dm);
    row_args(&a, &p, desc,
             p.flags | len_flag | (p.rel_v ? RELCL_GATHER : 0) | (p.rel ? RELCL_BUCKET : 0));
    RELCL__ARG(&a, p.scale);
    drop_args(&a, &p);
    if ((st = launch_rows(ctx, kbwd, &a, &p)) != RELCL_OK) goto done;
  }
  /* dQ = de K (+ C wK);  dK = de^T Q;  dwK += C^T Q */
  st = heads_product(ctx, &p, desc->per_head, false, p.nq, p.nk, Db, p.nq * p.nk, K,
                     p.nk * p.d, p.rel, Cb, wK, dQ, dq_ld);
  if (st == RELCL_OK)
    st = heads_product(ctx, &p, desc->per_head, true, p.nk, p.nq, Db, p.nq * p.nk, Q,
                       p.nq * p.d, false, RELCL_BUF_NONE, RELCL_BUF_NONE, dK, dkv_ld);
  if (st == RELCL_OK && at_once)
    st = shared_table_grads(ctx, &p, Bb, dZ, p.rel_v ? dwV : RELCL_BUF_NONE, Cb, Q,
                            p.rel ? dwK : RELCL_BUF_NONE);
  else if (st == RELCL_OK && p.rel && dwK.mem)
    st = table_grad(ctx, &p, desc->per_head, Cb, Q, dwK);
done:
  relcl__pool_put(ctx, Am);
  relcl__pool_put(ctx, Dm);
  relcl__pool_put(ctx, Bm);
  relcl__pool_put(ctx, Gm);
  relcl__pool_put(ctx, Cm);
  return st;
}
