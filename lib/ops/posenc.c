/* Sinusoidal absolute position encoding: the baseline relative positions are measured
 * against. */
#include "runtime.h"
#include "ops.h"

relcl_status relcl_posenc_add(relcl_context *ctx, relcl_buf x, int batch, int n, int d_model,
                              int pos0) {
  relcl__clear_error();
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "posenc: ctx is NULL");
  if (batch <= 0 || n <= 0 || d_model <= 0 || pos0 < 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "posenc: batch=%d n=%d d_model=%d must be > 0 and pos0=%d >= 0", batch, n,
                       d_model, pos0);
  size_t total = (size_t)batch * (size_t)n * (size_t)d_model;
  relcl_status st = relcl__check_buf(x, total, "posenc x");
  return st == RELCL_OK ? relcl__posenc_add(ctx, x, batch, n, d_model, pos0) : st;
}

relcl_status relcl__posenc_add(relcl_context *ctx, relcl_buf x, int batch, int n, int d_model,
                               int pos0) {
  relcl__kernel_entry *kt, *ka;
  relcl_status st = relcl__kernel(ctx, "posenc", "posenc_table", &kt);
  if (st == RELCL_OK) st = relcl__kernel(ctx, "posenc", "posenc_add", &ka);
  cl_mem pe = NULL;
  if (st == RELCL_OK) st = relcl__pool_get(ctx, (size_t)n * d_model * sizeof(float), &pe);
  if (st != RELCL_OK) return st;
  relcl__args t = {kt->kernel, 0, CL_SUCCESS};
  RELCL__ARG(&t, pe);
  RELCL__ARG(&t, d_model);
  RELCL__ARG(&t, pos0);
  size_t gt[2] = {(size_t)d_model, (size_t)n};
  st = relcl__launch(ctx, kt, &t, 2, gt, NULL);
  if (st == RELCL_OK) {
    relcl__args a = {ka->kernel, 0, CL_SUCCESS};
    cl_uint off = (cl_uint)x.offset;
    RELCL__ARG(&a, x.mem);
    RELCL__ARG(&a, off);
    RELCL__ARG(&a, pe);
    RELCL__ARG(&a, n);
    RELCL__ARG(&a, d_model);
    size_t ga[3] = {(size_t)d_model, (size_t)n, (size_t)batch};
    st = relcl__launch(ctx, ka, &a, 3, ga, NULL);
  }
  relcl__pool_put(ctx, pe); /* the queue is in order: posenc_add has read it */
  return st;
}
