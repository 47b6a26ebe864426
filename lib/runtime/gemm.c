/* The one place that calls CLBlast. relcl is row-major throughout; see product() for the
 * column-major call. */
#include "internal.h"

#include <clblast_c.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static relcl_status clblast_fail(CLBlastStatusCode code, const char *what, size_t m, size_t n,
                                 size_t k, size_t batch) {
  relcl_status st = RELCL_ERR_CLBLAST;
  /* CLBlast reuses OpenCL's status numbers */
  if (code == CLBlastOpenCLOutOfResources || code == CLBlastOpenCLOutOfHostMemory ||
      code == (CLBlastStatusCode)CL_MEM_OBJECT_ALLOCATION_FAILURE)
    st = RELCL_ERR_OUT_OF_MEMORY;
  return relcl__fail_code(st, (int)code,
                          "CLBlast %s (m=%zu n=%zu k=%zu batch=%zu) failed with status %d", what,
                          m, n, k, batch, (int)code);
}

static CLBlastTranspose transposed(bool t) {
  return t ? CLBlastTransposeYes : CLBlastTransposeNo;
}

/* An operand where CLBlast's indirect kernel reads it in place: at offset 0 of its buffer.
 * CLBlast copies any other operand to a padded temporary first (and C back after), however
 * well its sizes fit the kernel's tiles; relcl's operands sit at offsets in arenas and pools,
 * so a sub-buffer that starts at the operand stands in for it where the device allows that
 * origin (CL_DEVICE_MEM_BASE_ADDR_ALIGN). Where it does not, the operand goes as it is and
 * CLBlast copies it: slower, the same result. */
typedef struct {
  cl_mem mem;
  size_t offset;
  cl_mem sub; /* released after the call (the enqueued kernels keep it alive) */
} operand;

static operand at_zero(const relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                       size_t ld) {
  operand o = {x.mem, x.offset, NULL};
  size_t origin = x.offset * sizeof(float);
  if (x.offset == 0 || ctx->sub_align == 0 || origin % ctx->sub_align != 0) return o;
  cl_buffer_region region = {origin, ((rows - 1) * ld + cols) * sizeof(float)};
  cl_int err;
  cl_mem sub = clCreateSubBuffer(x.mem, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
  if (err == CL_SUCCESS) o = (operand){sub, 0, sub};
  return o;
}

/* Which operand relcl transposes itself before CLBlast's indirect kernel (GEMMK 0) runs:
 * called as one_call() calls it, the kernel reads relcl's A as k x m (A transposed) and
 * relcl's B as k x n (B as it is), and copies any other operand into a temporary with its
 * TransposePadMatrix kernel first. On PoCL that kernel is slow: 9% of the issue-8 step's
 * time on Zen 1 (perf), where relcl's `transpose` (kernels/util.cl) moves the same data in
 * a fraction of it. So on CPU contexts (the item shape, kernels/common.cl) relcl transposes
 * such an operand into a scratch buffer of exactly its size, where its sizes are whole tiles
 * of the kernel (the tuning's NWG along m, MWG along n, KWG along k) and CLBlast then reads
 * it in place; elsewhere CLBlast copies as before. */
static bool own_transpose(const relcl_context *ctx, size_t k, size_t rows_tile_dim,
                          size_t tile) {
  return ctx->row_item && !ctx->gemm_kernel_1 && tile > 0 && ctx->gemm_k_tile > 0 &&
         rows_tile_dim % tile == 0 && k % ctx->gemm_k_tile == 0;
}

relcl_status relcl__transpose(relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                              size_t ld, relcl_buf out, size_t ld_out) {
  if (rows == 0 || cols == 0) return RELCL_OK;
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "util", "transpose", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  cl_uint ld_in = (cl_uint)ld, ldo = (cl_uint)ld_out, r = (cl_uint)rows, c = (cl_uint)cols;
  relcl__buf_arg(&a, x, NULL);
  RELCL__ARG(&a, ld_in);
  relcl__buf_arg(&a, out, NULL);
  RELCL__ARG(&a, ldo);
  RELCL__ARG(&a, r);
  RELCL__ARG(&a, c);
  if (a.err != CL_SUCCESS) return relcl__cl_fail(a.err, "clSetKernelArg(transpose)");
  size_t wg[2] = {relcl__pow2_wg((cols + 7) / 8, k->max_wg < 16 ? k->max_wg : 16), 1};
  size_t global[2] = {((cols + 7) / 8 + wg[0] - 1) / wg[0] * wg[0], (rows + 7) / 8};
  cl_int err = clEnqueueNDRangeKernel(ctx->queue, k->kernel, 2, NULL, global, wg, 0, NULL, NULL);
  return err == CL_SUCCESS ? RELCL_OK : relcl__cl_fail(err, "clEnqueueNDRangeKernel(transpose)");
}

/* x^T into a scratch buffer *out (cols x rows, ld rows) the caller gives back to the pool. */
static relcl_status transposed_copy(relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                                    size_t ld, cl_mem *out) {
  relcl_status st = relcl__pool_get(ctx, rows * cols * sizeof(float), out);
  return st == RELCL_OK ? relcl__transpose(ctx, x, rows, cols, ld, relcl_buf_at(*out, 0), rows)
                        : st;
}

/* One row-major product C = alpha op(A) op(B) + beta C, given to CLBlast as the column-major
 * C^T = alpha op(B)^T op(A)^T (the same numbers in the same memory). CLBlast's indirect
 * kernel (GEMMK 0) keeps C column-major: called row-major it transposes C into a temporary
 * and back around every product, and A before every product whose A is not transposed;
 * called this way round it transposes neither C nor, for a weight gradient (A^T B), either
 * operand, and reads in place every operand at offset 0 whose sizes are multiples of its
 * tiles. On Zen 1 with the shipped tuning that ran fifteen of the largest products of the
 * issue-8 step 11% faster than row-major (README, "What is left"). The operands it would
 * still transpose, relcl may transpose first (own_transpose). */
static relcl_status one_call(relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                             size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                             relcl_buf b, size_t ldb, float beta, relcl_buf c, size_t ldc,
                             cl_event *ev) {
  cl_mem ta = NULL, tb = NULL;
  relcl_status st = RELCL_OK;
  if (!trans_a && own_transpose(ctx, k, m, ctx->gemm_row_tile)) {
    st = transposed_copy(ctx, a, m, k, lda, &ta);
    a = relcl_buf_at(ta, 0), lda = m, trans_a = true;
  }
  if (st == RELCL_OK && trans_b && own_transpose(ctx, k, n, ctx->gemm_col_tile)) {
    st = transposed_copy(ctx, b, n, k, ldb, &tb);
    b = relcl_buf_at(tb, 0), ldb = n, trans_b = false;
  }
  if (st == RELCL_OK) {
    operand A = at_zero(ctx, a, trans_a ? k : m, trans_a ? m : k, lda);
    operand B = at_zero(ctx, b, trans_b ? n : k, trans_b ? k : n, ldb);
    operand C = at_zero(ctx, c, m, n, ldc);
    CLBlastStatusCode code =
        CLBlastSgemm(CLBlastLayoutColMajor, transposed(trans_b), transposed(trans_a), n, m, k,
                     alpha, B.mem, B.offset, ldb, A.mem, A.offset, lda, beta, C.mem, C.offset,
                     ldc, &ctx->queue, ev);
    if (A.sub) clReleaseMemObject(A.sub);
    if (B.sub) clReleaseMemObject(B.sub);
    if (C.sub) clReleaseMemObject(C.sub);
    if (code != CLBlastSuccess) st = clblast_fail(code, "SGEMM", m, n, k, 1);
  }
  /* the queue is in order: the product has read them before any later user writes */
  relcl__pool_put(ctx, ta);
  relcl__pool_put(ctx, tb);
  return st;
}

/* A product as CLBlast's indirect kernel runs it best: one_call(), with the rows in whole
 * tiles of the kernel (the tuning's Xgemm NWG) in one call and the rest, fewer than a tile,
 * in a second. CLBlast copies every operand whose size is not a whole number of tiles into a
 * padded temporary, and a training batch's rows rarely are (sentences x longest). Each row
 * of C depends on its own row of op(A) only, so the two calls compute what one would. Below
 * 16 tiles (decoding's products) the copies it would save are small, and one call is kept.
 *
 * Where relcl does not know the tiles (no tuning applied) or CLBlast runs its direct kernel
 * (below the tuning's XGEMM_MIN_INDIRECT_SIZE cubed), which reads every layout in place
 * without copies, the product goes row-major as it is. */
static relcl_status product(relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                            size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                            relcl_buf b, size_t ldb, float beta, relcl_buf c, size_t ldc,
                            cl_event *ev) {
  const size_t tile = ctx->gemm_row_tile;
  const double edge = (double)ctx->gemm_min_indirect;
  if (tile == 0 || (double)m * (double)n * (double)k < edge * edge * edge) {
    CLBlastStatusCode code =
        CLBlastSgemm(CLBlastLayoutRowMajor, transposed(trans_a), transposed(trans_b), m, n, k,
                     alpha, a.mem, a.offset, lda, b.mem, b.offset, ldb, beta, c.mem, c.offset,
                     ldc, &ctx->queue, ev);
    return code == CLBlastSuccess ? RELCL_OK : clblast_fail(code, "SGEMM", m, n, k, 1);
  }
  if (m < 16 * tile || m % tile == 0)
    return one_call(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ev);
  const size_t whole = m / tile * tile;
  relcl_status st = one_call(ctx, trans_a, trans_b, whole, n, k, alpha, a, lda, b, ldb, beta,
                             c, ldc, NULL);
  if (st != RELCL_OK) return st;
  return one_call(ctx, trans_a, trans_b, m - whole, n, k, alpha,
                  relcl_buf_at(a.mem, a.offset + (trans_a ? whole : whole * lda)), lda, b, ldb,
                  beta, relcl_buf_at(c.mem, c.offset + whole * ldc), ldc, ev);
}

/* ---- the per-head products through CLBlast's indirect kernel (XgemmHeads) ----
 *
 * Attention's per-head products (Q K^T, alpha V and the four of the backward pass: 32 x 32 x 64
 * x 500 on issue 8's model) run in CLBlast's direct kernel below its switch to the indirect
 * one. On a CPU that kernel runs them at a third of the SGEMM rate: on the Zen 5 EPYC 42-45
 * GFLOP/s, where the indirect kernel with 16 x 16 tiles runs the same products at 112-121
 * when their operands come with the inner dimension first and in whole tiles, against 28-34
 * when CLBlast pads and transposes them itself. A tuning file's XgemmHeads is such a set: for
 * the per-head products relcl puts it and a switch of 1 (always indirect) in force in place of
 * the tuning's Xgemm set and switch, packs the operands itself (pack_blocks, kernels/util.cl),
 * and puts the tuning's sets back before any other product. CLBlast keeps its parameters per
 * device and process, and a change costs about 0.3 ms (it copies its whole database), so the
 * per-head set stays in force from one per-head product to the next, and one lock makes the
 * change and the call that reads it one step: a product never runs with another thread's set,
 * and the same inputs give the same bits. */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;

/* The devices whose Xgemm and switch are a per-head set now, with what it replaced. */
static struct heads_in_force {
  cl_device_id device;
  relcl__gemm_set heads, main;
  size_t min_indirect;
} in_force[8];

static size_t set_value(const relcl__gemm_set *set, const char *name) {
  for (size_t i = 0; i < set->n; i++)
    if (strcmp(set->names[i], name) == 0) return set->values[i];
  return 0;
}

static relcl_status override_set(cl_device_id device, const relcl__gemm_set *set,
                                 size_t min_indirect) {
  const char *names[24];
  for (size_t i = 0; i < set->n; i++) names[i] = set->names[i];
  relcl_status st = relcl__gemm_override(device, "Xgemm", set->n, names, set->values);
  const char *switch_name = "XGEMM_MIN_INDIRECT_SIZE";
  if (st == RELCL_OK)
    st = relcl__gemm_override(device, "GemmRoutine", 1, &switch_name, &min_indirect);
  return st;
}

static struct heads_in_force *find_in_force(cl_device_id device) {
  for (size_t i = 0; i < sizeof in_force / sizeof in_force[0]; i++)
    if (in_force[i].device == device) return &in_force[i];
  return NULL;
}

/* With clblast_lock held: the tuning's sets in force on ctx's device, or (heads) its
 * XgemmHeads. *used says whether the per-head set is in force after. */
static relcl_status use_set(relcl_context *ctx, bool heads, bool *used) {
  struct heads_in_force *e = find_in_force(ctx->device);
  *used = false;
  if (heads && e && memcmp(&e->heads, &ctx->gemm_heads, sizeof e->heads) == 0) {
    *used = true;
    return RELCL_OK;
  }
  if (e) { /* put back what the per-head set replaced */
    relcl_status st = override_set(ctx->device, &e->main, e->min_indirect);
    e->device = NULL;
    if (st != RELCL_OK || !heads) return st;
  }
  if (!heads || (e = find_in_force(NULL)) == NULL) return RELCL_OK;
  relcl_status st = override_set(ctx->device, &ctx->gemm_heads, 1);
  if (st != RELCL_OK) { /* whatever CLBlast kept of it, the tuning's sets again */
    (void)override_set(ctx->device, &ctx->gemm_main, ctx->gemm_min_indirect);
    return st;
  }
  *e = (struct heads_in_force){ctx->device, ctx->gemm_heads, ctx->gemm_main,
                               ctx->gemm_min_indirect};
  *used = true;
  return RELCL_OK;
}

void relcl__gemm_reset(cl_device_id device) {
  pthread_mutex_lock(&clblast_lock);
  struct heads_in_force *e = find_in_force(device);
  if (e) {
    (void)override_set(device, &e->main, e->min_indirect);
    e->device = NULL;
  }
  pthread_mutex_unlock(&clblast_lock);
}

/* Whether a batched product goes through heads_product: a per-head set (and the tuning's own,
 * to put back) of CLBlast's GEMMK 0 kernel whose KWG is whole vectors (CLBlast rounds K up
 * to VWM after KWG), and beta 0 (C is written, never read, so it can be padded scratch). */
static bool heads_apply(const relcl_context *ctx, float beta) {
  const relcl__gemm_set *h = &ctx->gemm_heads;
  size_t kwg = set_value(h, "KWG"), vwm = set_value(h, "VWM");
  return h->n > 0 && ctx->gemm_main.n > 0 && ctx->gemm_min_indirect > 0 && beta == 0.0f &&
         set_value(h, "GEMMK") == 0 && set_value(h, "MWG") > 0 && set_value(h, "NWG") > 0 &&
         kwg > 0 && vwm > 0 && kwg % vwm == 0;
}

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

/* pack_blocks (kernels/util.cl): batch blocks of out (rows_p x cols_p, ld_out, stride_out)
 * from in's (rows x cols, or cols x rows read transposed), zero-padded. */
static relcl_status pack(relcl_context *ctx, relcl_buf in, size_t ld_in, size_t stride_in,
                         bool trans, size_t rows, size_t cols, relcl_buf out, size_t ld_out,
                         size_t stride_out, size_t rows_p, size_t cols_p, size_t batch) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "util", "pack_blocks", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  cl_uint v[9] = {(cl_uint)ld_in, (cl_uint)stride_in, 0,          (cl_uint)rows,
                  (cl_uint)cols,  (cl_uint)ld_out,    (cl_uint)stride_out, (cl_uint)rows_p,
                  (cl_uint)cols_p};
  cl_int t = trans;
  relcl__buf_arg(&a, in, NULL);
  RELCL__ARG(&a, v[0]);
  RELCL__ARG(&a, v[1]);
  RELCL__ARG(&a, t);
  RELCL__ARG(&a, v[3]);
  RELCL__ARG(&a, v[4]);
  relcl__buf_arg(&a, out, NULL);
  RELCL__ARG(&a, v[5]);
  RELCL__ARG(&a, v[6]);
  RELCL__ARG(&a, v[7]);
  RELCL__ARG(&a, v[8]);
  if (a.err != CL_SUCCESS) return relcl__cl_fail(a.err, "clSetKernelArg(pack_blocks)");
  size_t groups = (cols_p + 7) / 8;
  size_t wg[3] = {relcl__pow2_wg(groups, k->max_wg < 16 ? k->max_wg : 16), 1, 1};
  size_t global[3] = {(groups + wg[0] - 1) / wg[0] * wg[0], (rows_p + 7) / 8, batch};
  cl_int err = clEnqueueNDRangeKernel(ctx->queue, k->kernel, 3, NULL, global, wg, 0, NULL, NULL);
  return err == CL_SUCCESS ? RELCL_OK : relcl__cl_fail(err, "clEnqueueNDRangeKernel(pack_blocks)");
}

/* Operand x of a per-head product as CLBlast reads it in place: each block kk x cc with the
 * inner dimension (k, rows here) first and ld cc, padded to kp x cp; x is that already
 * (k x c, ld c) or, with trans, its transpose (c x k). Where x already is exactly that, it
 * goes as it is (from a sub-buffer at its offset, at_zero); else into pool scratch *tmp. */
static relcl_status inner_first(relcl_context *ctx, relcl_buf x, size_t ld, size_t stride,
                                bool trans, size_t k, size_t c, size_t kp, size_t cp,
                                size_t batch, operand *out, cl_mem *tmp) {
  if (!trans && k == kp && c == cp && ld == c && stride == k * c) {
    *out = at_zero(ctx, x, batch * k, c, c);
    if (out->offset == 0) return RELCL_OK;
    if (out->sub) clReleaseMemObject(out->sub);
  }
  relcl_status st = relcl__pool_get(ctx, batch * kp * cp * sizeof(float), tmp);
  if (st != RELCL_OK) return st;
  *out = (operand){*tmp, 0, NULL};
  return pack(ctx, x, ld, stride, trans, k, c, relcl_buf_at(*tmp, 0), cp, kp * cp, kp, cp,
              batch);
}

/* Row-major C = alpha op(A) op(B) per block, beta 0, with the per-head set in force: given
 * to CLBlast as column-major C^T = op(B)^T op(A)^T, whose indirect kernel (GEMMK 0) reads the
 * column-major first operand as it is (op(B) with k first: B, or B^T packed) and the second
 * transposed (op(A) with k first: A^T, or A packed), all sizes rounded up to its tiles (MWG
 * along n, NWG along m, KWG along k). C goes in place when it is exactly that, else into
 * scratch and its corner back out. */
static relcl_status heads_product(relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                                  size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                                  size_t stride_a, relcl_buf b, size_t ldb, size_t stride_b,
                                  relcl_buf c, size_t ldc, size_t stride_c, size_t batch,
                                  cl_event *ev) {
  const relcl__gemm_set *h = &ctx->gemm_heads;
  const size_t np = round_up(n, set_value(h, "MWG")), mp = round_up(m, set_value(h, "NWG")),
               kp = round_up(k, set_value(h, "KWG"));
  cl_mem ta = NULL, tb = NULL, tc = NULL;
  operand A = {NULL, 0, NULL}, B = {NULL, 0, NULL}, C = {NULL, 0, NULL};
  relcl_status st = inner_first(ctx, b, ldb, stride_b, trans_b, k, n, kp, np, batch, &B, &tb);
  if (st == RELCL_OK)
    st = inner_first(ctx, a, lda, stride_a, !trans_a, k, m, kp, mp, batch, &A, &ta);
  bool c_in_place = m == mp && n == np && ldc == n && stride_c == m * n;
  if (st == RELCL_OK && c_in_place) {
    C = at_zero(ctx, c, batch * m, n, n);
    c_in_place = C.offset == 0;
  }
  if (st == RELCL_OK && !c_in_place) {
    st = relcl__pool_get(ctx, batch * mp * np * sizeof(float), &tc);
    C = (operand){tc, 0, C.sub};
  }
  if (st == RELCL_OK) {
    CLBlastStatusCode code = CLBlastSgemmStridedBatched(
        CLBlastLayoutColMajor, CLBlastTransposeNo, CLBlastTransposeYes, np, mp, kp, alpha, B.mem,
        0, np, kp * np, A.mem, 0, mp, kp * mp, 0.0f, C.mem, 0, np, mp * np, batch, &ctx->queue,
        c_in_place ? ev : NULL);
    if (code != CLBlastSuccess) st = clblast_fail(code, "SGEMM", m, n, k, batch);
  }
  if (st == RELCL_OK && !c_in_place) {
    st = pack(ctx, relcl_buf_at(tc, 0), np, mp * np, false, m, n, c, ldc, stride_c, m, n,
              batch);
    if (st == RELCL_OK && ev && clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, ev) != CL_SUCCESS)
      *ev = NULL;
  }
  if (A.sub) clReleaseMemObject(A.sub);
  if (B.sub) clReleaseMemObject(B.sub);
  if (C.sub) clReleaseMemObject(C.sub);
  /* the queue is in order: the product has read them before any later user writes */
  relcl__pool_put(ctx, ta);
  relcl__pool_put(ctx, tb);
  relcl__pool_put(ctx, tc);
  return st;
}

relcl_status relcl__gemm_in(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                            bool trans_b, size_t m, size_t n, size_t k, float alpha, relcl_buf a,
                            size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                            size_t stride_b, float beta, relcl_buf c, size_t ldc,
                            size_t stride_c, size_t batch) {
  if (m == 0 || n == 0 || batch == 0) return RELCL_OK;
  relcl_status st;
  if (k == 0) /* an empty sum: C = beta C, which CLBlast does not accept */
    return relcl__fail(RELCL_ERR_INVALID_ARG, "GEMM with an empty inner dimension");
  /* CLBlast returns the event of its last kernel only, and its indirect GEMM runs up to four
   * (padding and transposing A, B and C around the product): a marker before the call lets
   * the profile time all of them. */
  bool heads = batch > 1 && heads_apply(ctx, beta);
  pthread_mutex_lock(&clblast_lock);
  st = use_set(ctx, heads, &heads); /* host time, before the span */
  cl_event start = NULL, ev, *evp = relcl__profile_slot(ctx, &ev);
  if (evp && clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &start) != CL_SUCCESS)
    start = NULL;
  size_t chunk = ctx->gemm_k_chunk;
  if (st != RELCL_OK) {
  } else if (heads) {
    st = heads_product(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb,
                       stride_b, c, ldc, stride_c, batch, evp);
  } else if (batch == 1 && chunk > 0 && k > chunk + chunk / 2) {
    /* the tuning's RelclGemm K_CHUNK (tuning.c): slices of equal length, accumulated into C
     * one after the other, always in the same order. The length is a multiple of 128 for a
     * K_CHUNK of 512 or more (every slice then starts where a sub-buffer can, and fills
     * CLBlast's tiles of up to 128 along K), else of 8 (the tests' small K_CHUNK). */
    size_t pieces = (k + chunk - 1) / chunk, align = chunk >= 512 ? 128 : 8;
    size_t len = ((k + pieces - 1) / pieces + align - 1) / align * align;
    for (size_t k0 = 0; k0 < k && st == RELCL_OK; k0 += len) {
      size_t kk = k - k0 < len ? k - k0 : len;
      st = product(ctx, trans_a, trans_b, m, n, kk, alpha,
                     relcl_buf_at(a.mem, a.offset + (trans_a ? k0 * lda : k0)), lda,
                     relcl_buf_at(b.mem, b.offset + (trans_b ? k0 : k0 * ldb)), ldb,
                     k0 == 0 ? beta : 1.0f, c, ldc, k0 + kk == k ? evp : NULL);
    }
  } else if (batch == 1)
    st = product(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, evp);
  else { /* the per-head products without XgemmHeads: CLBlast's direct kernel, which reads
          * every layout in place */
    CLBlastStatusCode code = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, transposed(trans_a),
                                      transposed(trans_b), m, n, k, alpha, a.mem, a.offset,
                                      lda, stride_a, b.mem, b.offset, ldb, stride_b, beta,
                                      c.mem, c.offset, ldc, stride_c, batch, &ctx->queue, evp);
    st = code == CLBlastSuccess ? RELCL_OK : clblast_fail(code, "SGEMM", m, n, k, batch);
  }
  pthread_mutex_unlock(&clblast_lock);
  if (st == RELCL_OK && ev) {
    char name[160];
    snprintf(name, sizeof name, "SGEMM%s%s %zux%zux%zu x%zu", trans_a ? " A^T" : "",
             trans_b ? " B^T" : "", m, n, k, batch);
    relcl__profile_span(ctx, name, part, (const size_t[4]){m, n, k, batch}, start, ev);
  } else {
    if (ev) clReleaseEvent(ev);
    if (start) clReleaseEvent(start);
  }
  return st;
}

relcl_status relcl__gemm_override(cl_device_id device, const char *kernel, size_t n,
                                  const char *const *names, const size_t *values) {
  CLBlastStatusCode code = CLBlastOverrideParameters(device, kernel, CLBlastPrecisionSingle, n,
                                                     (const char **)names, values);
  return code == CLBlastSuccess
             ? RELCL_OK
             : relcl__fail(RELCL_ERR_CLBLAST, "CLBlast rejected the parameters of %s (status %d)",
                           kernel, (int)code);
}

void relcl__gemm_forget(void) { (void)CLBlastClearCache(); }
