/* Sinusoidal absolute positions against the reference, and the scratch pool: repeated
 * attention calls reuse memory instead of creating buffers. */
#include "internal.h"
#include "ref/ref.h"
#include "testutil.h"

static void check_posenc(relcl_context *ctx, int B, int n, int dm, int pos0) {
  size_t N = (size_t)B * n * dm;
  float *x = tu_alloc_host(N);
  double *r = calloc(N, sizeof *r);
  tu_fill(x, N, 9);
  for (size_t i = 0; i < N; i++) r[i] = x[i];
  ref_posenc_add(r, B, n, dm, pos0);
  cl_mem m = tu_upload(ctx, x, N);
  TU_OK(relcl_posenc_add(ctx, relcl_buf_at(m, 0), B, n, dm, pos0));
  float *y = tu_download(ctx, m, N);
  /* float sin/cos of arguments up to ~pos: the argument itself carries pos * 6e-8 of
   * rounding, so allow 1e-6 * (pos0 + n) + 1e-6 absolute */
  double worst = 0;
  for (size_t i = 0; i < N; i++) worst = tu_worse(worst, fabs(y[i] - r[i]));
  double tol = 1e-6 * (pos0 + n) + 1e-6;
  tu_check(worst <= tol, "posenc B=%d n=%d d_model=%d pos0=%d: max err %.2e (tol %.1e)", B, n, dm,
           pos0, worst, tol);
  clReleaseMemObject(m);
  free(x);
  free(y);
  free(r);
}

int main(void) {
  relcl_context *ctx = tu_context();
  check_posenc(ctx, 1, 1, 1, 0);
  check_posenc(ctx, 2, 7, 6, 0);
  check_posenc(ctx, 3, 33, 17, 0);
  check_posenc(ctx, 2, 50, 64, 0);
  check_posenc(ctx, 1, 5, 512, 300);

  /* pool: after one warm-up call, further calls of the same shapes create no buffers */
  relcl_attn_desc d = relcl_attn_desc_self(2, 4, 16, 8, 4);
  d.dropout = 0.1f;
  size_t nq = 2 * 4 * 16 * 8, np = 2 * 4 * 16 * 16;
  cl_mem a, p, g;
  TU_OK(relcl_alloc(ctx, nq, &a));
  TU_OK(relcl_alloc(ctx, np, &p));
  TU_OK(relcl_alloc(ctx, nq * 5, &g));
  TU_OK(relcl_fill(ctx, relcl_buf_at(a, 0), 0.5f, nq));
  TU_OK(relcl_fill(ctx, relcl_buf_at(g, 0), 0.0f, nq * 5)); /* dwK, dwV accumulate */
  TU_OK(relcl_fill(ctx, relcl_buf_at(p, 0), 0.0f, np));
  relcl_buf A = relcl_buf_at(a, 0), P = relcl_buf_at(p, 0);
  for (int i = 0; i < 2; i++) {
    TU_OK(relcl_attn_forward(ctx, &d, A, A, A, A, A, RELCL_BUF_NONE, relcl_buf_at(g, 0), P));
    TU_OK(relcl_attn_backward(ctx, &d, A, A, A, A, A, RELCL_BUF_NONE, P, A, relcl_buf_at(g, 0),
                              relcl_buf_at(g, nq), relcl_buf_at(g, 2 * nq), relcl_buf_at(g, 3 * nq),
                              relcl_buf_at(g, 3 * nq + 1000)));
  }
  size_t warm = ctx->pool.created;
  for (int i = 0; i < 10; i++) {
    TU_OK(relcl_attn_forward(ctx, &d, A, A, A, A, A, RELCL_BUF_NONE, relcl_buf_at(g, 0), P));
    TU_OK(relcl_attn_backward(ctx, &d, A, A, A, A, A, RELCL_BUF_NONE, P, A, relcl_buf_at(g, 0),
                              relcl_buf_at(g, nq), relcl_buf_at(g, 2 * nq), relcl_buf_at(g, 3 * nq),
                              relcl_buf_at(g, 3 * nq + 1000)));
  }
  TU_OK(relcl_finish(ctx));
  tu_check(ctx->pool.created == warm && warm > 0,
           "10 more forward+backward calls created no scratch buffer (%zu after warm-up)", warm);
  int in_use = 0;
  for (int i = 0; i < RELCL__POOL_SLOTS; i++) in_use += ctx->pool.slot[i].in_use;
  tu_check(in_use == 0, "every scratch buffer is back in the pool");
  clReleaseMemObject(a);
  clReleaseMemObject(p);
  clReleaseMemObject(g);
  relcl_context_destroy(ctx);
  return tu_finish();
}
