/* The one place that calls CLBlast. Row-major throughout. */
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

relcl_status relcl__gemm_in(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                            bool trans_b, size_t m, size_t n, size_t k, float alpha, relcl_buf a,
                            size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                            size_t stride_b, float beta, relcl_buf c, size_t ldc,
                            size_t stride_c, size_t batch) {
  if (m == 0 || n == 0 || batch == 0) return RELCL_OK;
  CLBlastTranspose ta = trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
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
    /* the tuning's RelclGemm K_CHUNK (tuning.c): slices of equal length, a multiple of 8,
     * accumulated into C one after the other, always in the same order */
    size_t pieces = (k + chunk - 1) / chunk, len = ((k + pieces - 1) / pieces + 7) / 8 * 8;
    code = CLBlastSuccess;
    for (size_t k0 = 0; k0 < k && code == CLBlastSuccess; k0 += len) {
      size_t kk = k - k0 < len ? k - k0 : len;
      code = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, m, n, kk, alpha, a.mem,
                          a.offset + (trans_a ? k0 * lda : k0), lda, b.mem,
                          b.offset + (trans_b ? k0 : k0 * ldb), ldb, k0 == 0 ? beta : 1.0f,
                          c.mem, c.offset, ldc, &ctx->queue, k0 + kk == k ? evp : NULL);
    }
  } else if (batch == 1)
    code = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, alpha, a.mem, a.offset, lda,
                        b.mem, b.offset, ldb, beta, c.mem, c.offset, ldc, &ctx->queue, evp);
  else
    code = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, m, n, k, alpha, a.mem,
                                      a.offset, lda, stride_a, b.mem, b.offset, ldb, stride_b,
                                      beta, c.mem, c.offset, ldc, stride_c, batch, &ctx->queue,
                                      evp);
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
