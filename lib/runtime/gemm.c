/* The one place that calls CLBlast. relcl is row-major throughout; see product() for the
 * column-major call. */
#include "internal.h"

#include <clblast_c.h>
#include <stdio.h>

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

/* One row-major product C = alpha op(A) op(B) + beta C, given to CLBlast as the column-major
 * C^T = alpha op(B)^T op(A)^T (the same numbers in the same memory). CLBlast's indirect
 * kernel (GEMMK 0) keeps C column-major: called row-major it transposes C into a temporary
 * and back around every product, and A before every product whose A is not transposed;
 * called this way round it transposes neither C nor, for a weight gradient (A^T B), either
 * operand, and reads in place every operand at offset 0 whose sizes are multiples of its
 * tiles. On Zen 1 with the shipped tuning that ran fifteen of the largest products of the
 * issue-8 step 11% faster than row-major (README, "What is left"). */
static CLBlastStatusCode one_call(relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                                  size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                                  relcl_buf b, size_t ldb, float beta, relcl_buf c, size_t ldc,
                                  cl_event *ev) {
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
  return code;
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
static CLBlastStatusCode product(relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                                 size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                                 relcl_buf b, size_t ldb, float beta, relcl_buf c, size_t ldc,
                                 cl_event *ev) {
  const size_t tile = ctx->gemm_row_tile;
  const double edge = (double)ctx->gemm_min_indirect;
  if (tile == 0 || (double)m * (double)n * (double)k < edge * edge * edge)
    return CLBlastSgemm(CLBlastLayoutRowMajor, transposed(trans_a), transposed(trans_b), m, n,
                        k, alpha, a.mem, a.offset, lda, b.mem, b.offset, ldb, beta, c.mem,
                        c.offset, ldc, &ctx->queue, ev);
  if (m < 16 * tile || m % tile == 0)
    return one_call(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ev);
  const size_t whole = m / tile * tile;
  CLBlastStatusCode code = one_call(ctx, trans_a, trans_b, whole, n, k, alpha, a, lda, b, ldb,
                                    beta, c, ldc, NULL);
  if (code != CLBlastSuccess) return code;
  return one_call(ctx, trans_a, trans_b, m - whole, n, k, alpha,
                  relcl_buf_at(a.mem, a.offset + (trans_a ? whole : whole * lda)), lda, b, ldb,
                  beta, relcl_buf_at(c.mem, c.offset + whole * ldc), ldc, ev);
}

relcl_status relcl__gemm_in(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                            bool trans_b, size_t m, size_t n, size_t k, float alpha, relcl_buf a,
                            size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                            size_t stride_b, float beta, relcl_buf c, size_t ldc,
                            size_t stride_c, size_t batch) {
  if (m == 0 || n == 0 || batch == 0) return RELCL_OK;
  CLBlastStatusCode code;
  if (k == 0) /* an empty sum: C = beta C, which CLBlast does not accept */
    return relcl__fail(RELCL_ERR_INVALID_ARG, "GEMM with an empty inner dimension");
  /* CLBlast returns the event of its last kernel only, and its indirect GEMM runs up to four
   * (padding and transposing A, B and C around the product): a marker before the call lets
   * the profile time all of them. */
  cl_event start = NULL, ev, *evp = relcl__profile_slot(ctx, &ev);
  if (evp && clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &start) != CL_SUCCESS)
    start = NULL;
  size_t chunk = ctx->gemm_k_chunk;
  if (batch == 1 && chunk > 0 && k > chunk + chunk / 2) {
    /* the tuning's RelclGemm K_CHUNK (tuning.c): slices of equal length, accumulated into C
     * one after the other, always in the same order. The length is a multiple of 128 for a
     * K_CHUNK of 512 or more (every slice then starts where a sub-buffer can, and fills
     * CLBlast's tiles of up to 128 along K), else of 8 (the tests' small K_CHUNK). */
    size_t pieces = (k + chunk - 1) / chunk, align = chunk >= 512 ? 128 : 8;
    size_t len = ((k + pieces - 1) / pieces + align - 1) / align * align;
    code = CLBlastSuccess;
    for (size_t k0 = 0; k0 < k && code == CLBlastSuccess; k0 += len) {
      size_t kk = k - k0 < len ? k - k0 : len;
      code = product(ctx, trans_a, trans_b, m, n, kk, alpha,
                     relcl_buf_at(a.mem, a.offset + (trans_a ? k0 * lda : k0)), lda,
                     relcl_buf_at(b.mem, b.offset + (trans_b ? k0 : k0 * ldb)), ldb,
                     k0 == 0 ? beta : 1.0f, c, ldc, k0 + kk == k ? evp : NULL);
    }
  } else if (batch == 1)
    code = product(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, evp);
  else /* the per-head products: CLBlast's direct kernel, which reads every layout in place */
    code = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, transposed(trans_a),
                                      transposed(trans_b), m, n, k, alpha, a.mem, a.offset,
                                      lda, stride_a, b.mem, b.offset, ldb, stride_b, beta,
                                      c.mem, c.offset, ldc, stride_c, batch, &ctx->queue, evp);
  if (code == CLBlastSuccess && ev) {
    char name[160];
    snprintf(name, sizeof name, "SGEMM%s%s %zux%zux%zu x%zu", trans_a ? " A^T" : "",
             trans_b ? " B^T" : "", m, n, k, batch);
    relcl__profile_span(ctx, name, part, (const size_t[4]){m, n, k, batch}, start, ev);
  } else {
    if (ev) clReleaseEvent(ev);
    if (start) clReleaseEvent(start);
  }
  return code == CLBlastSuccess ? RELCL_OK
                                : clblast_fail(code, "SGEMM", m, n, k, batch);
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
