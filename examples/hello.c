/* hello.c: the smallest useful relcl program. One relation-aware self-attention call
 * (batch 1, 2 heads, 5 positions, head_dim 4, relative positions clipped at k = 2) on the
 * default OpenCL device, or the one RELCL_DEVICE names; prints a few outputs.
 * Build: cc hello.c $(pkg-config --cflags --libs relcl) */
#include <relcl.h>
#include <stdio.h>

enum { B = 1, H = 2, N = 5, D = 4, K = 2 };
enum { NX = B * H * N * D, NW = (2 * K + 1) * D };

/* Every relcl call returns a status; on failure, relcl_last_error() says why. */
#define CHECK(call)                                                                            \
  if ((st = (call)) != RELCL_OK) goto done

/* Deterministic values in [-0.5, 0.5). */
static void fill(float *x, int n, int seed) {
  for (int i = 0; i < n; i++) x[i] = (float)((i * 37 + seed * 11) % 23) / 23.0f - 0.5f;
}

int main(void) {
  relcl_context *ctx = NULL;
  cl_mem q = NULL, k = NULL, v = NULL, wk = NULL, wv = NULL, z = NULL;
  float hq[NX], hk[NX], hv[NX], hwk[NW], hwv[NW], hz[NX];
  relcl_status st = RELCL_OK;
  int rc = 1;

  CHECK(relcl_context_create(&ctx, NULL)); /* NULL: RELCL_DEVICE, else the default device */
  printf("device: %s\n", relcl_context_device_name(ctx));

  fill(hq, NX, 1);
  fill(hk, NX, 2);
  fill(hv, NX, 3);
  fill(hwk, NW, 4);
  fill(hwv, NW, 5);
  CHECK(relcl_alloc(ctx, NX, &q));
  CHECK(relcl_alloc(ctx, NX, &k));
  CHECK(relcl_alloc(ctx, NX, &v));
  CHECK(relcl_alloc(ctx, NW, &wk));
  CHECK(relcl_alloc(ctx, NW, &wv));
  CHECK(relcl_alloc(ctx, NX, &z));
  CHECK(relcl_write(ctx, relcl_buf_at(q, 0), hq, NX));
  CHECK(relcl_write(ctx, relcl_buf_at(k, 0), hk, NX));
  CHECK(relcl_write(ctx, relcl_buf_at(v, 0), hv, NX));
  CHECK(relcl_write(ctx, relcl_buf_at(wk, 0), hwk, NW));
  CHECK(relcl_write(ctx, relcl_buf_at(wv, 0), hwv, NW));

  /* Q, K, V (B, H, N, D); wK, wV (2K+1, D) shared by the heads; no padding; Z (B, H, N, D);
   * the attention weights are not kept (probs absent). */
  relcl_attn_desc desc = relcl_attn_desc_self(B, H, N, D, K);
  CHECK(relcl_attn_forward(ctx, &desc, relcl_buf_at(q, 0), relcl_buf_at(k, 0),
                           relcl_buf_at(v, 0), relcl_buf_at(wk, 0), relcl_buf_at(wv, 0),
                           RELCL_BUF_NONE, relcl_buf_at(z, 0), RELCL_BUF_NONE));
  CHECK(relcl_read(ctx, relcl_buf_at(z, 0), hz, NX)); /* blocking: waits for the result */

  for (int h = 0; h < H; h++)
    for (int i = 0; i < N; i++) {
      printf("z[head %d, pos %d] =", h, i);
      for (int c = 0; c < D; c++) printf(" %+.4f", hz[(h * N + i) * D + c]);
      printf("\n");
    }
  rc = 0;
done:
  if (rc != 0) fprintf(stderr, "hello: %s: %s\n", relcl_status_str(st), relcl_last_error());
  cl_mem bufs[] = {q, k, v, wk, wv, z};
  for (int i = 0; i < 6; i++)
    if (bufs[i]) clReleaseMemObject(bufs[i]);
  relcl_context_destroy(ctx); /* NULL is fine */
  return rc;
}
