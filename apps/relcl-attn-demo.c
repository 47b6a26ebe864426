/* relcl-attn-demo: absolute and relative position information side by side on the default
 * device (or RELCL_DEVICE). Eight positions with identical content, so content alone cannot
 * tell them apart; then the time of one attention call with and without the relative terms. */
#include "relcl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 8, D = 16, REL_K = 2 };

/* Timed shape: (batch, heads, n, head_dim), relative positions clipped at TK. */
enum { TB = 8, TH = 8, TN = 64, TD = 64, TK = 16, WARMUP = 2, RUNS = 21 };

/* Every relcl call returns a status; the first failure ends the program with one line. */
#define CHECK(call)                                                                            \
  if ((st = (call)) != RELCL_OK) goto done

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Deterministic values in [-0.5, 0.5). */
static void fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u + seed) % 1000) / 1000.0f - 0.5f;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The largest difference between two rows' weights at the same offset j - i, over rows 1..N-1
 * (row 0 has no key to its left) and the offsets both rows have: 0 when every row shows the
 * same pattern shifted along the diagonal. */
static float shift_difference(const float *a) {
  float worst = 0.0f;
  for (int i = 1; i < N; i++)
    for (int i2 = i + 1; i2 < N; i2++)
      for (int off = -i; off < N - i2; off++) {
        float diff = a[i * N + i + off] - a[i2 * N + i2 + off];
        if (diff < 0) diff = -diff;
        if (diff > worst) worst = diff;
      }
  return worst;
}

/* Median milliseconds of one forward call for each descriptor, after a warm-up (kernel and
 * CLBlast setup). The calls alternate so that both see the same load on a shared machine. */
static relcl_status time_forward(relcl_context *ctx, const relcl_attn_desc *desc[2], cl_mem q,
                                 cl_mem k, cl_mem v, cl_mem wk, cl_mem wv, cl_mem z,
                                 double median_ms[2]) {
  double ms[2][RUNS];
  relcl_status st = RELCL_OK;
  for (int r = -WARMUP; r < RUNS; r++)
    for (int which = 0; which < 2; which++) {
      double t0 = now_ms();
      CHECK(relcl_attn_forward(ctx, desc[which], relcl_buf_at(q, 0), relcl_buf_at(k, 0),
                               relcl_buf_at(v, 0), relcl_buf_at(wk, 0), relcl_buf_at(wv, 0),
                               RELCL_BUF_NONE, relcl_buf_at(z, 0), RELCL_BUF_NONE));
      CHECK(relcl_finish(ctx));
      if (r >= 0) ms[which][r] = now_ms() - t0;
    }
  for (int which = 0; which < 2; which++) {
    qsort(ms[which], RUNS, sizeof ms[which][0], cmp_double);
    median_ms[which] = ms[which][RUNS / 2];
  }
done:
  return st;
}

int main(int argc, char **argv) {
  if (argc > 1) {
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
      printf("usage: relcl-attn-demo\nShows the attention weights of absolute (sinusoidal) "
             "and relative (Shaw et al. 2018) position information on 8 positions with "
             "identical content, then times attention with and without the relative terms.\n"
             "The device is RELCL_DEVICE (P:D or a name substring), else the default.\n");
      return 0;
    }
    fprintf(stderr, "relcl-attn-demo: unknown argument '%s' (try --help)\n", argv[1]);
    return 2;
  }
  relcl_context *ctx = NULL;
  cl_mem x = NULL, c = NULL, wk = NULL, pa = NULL, pr = NULL, z = NULL;
  cl_mem tq = NULL, tk = NULL, tv = NULL, twk = NULL, twv = NULL, tz = NULL;
  float *big = NULL;
  relcl_status st = RELCL_OK;
  int rc = 1;

  CHECK(relcl_context_create(&ctx, NULL));
  printf("device: %s\n\n", relcl_context_device_name(ctx));

  /* Every position has the same content vector, 0.5 in each of D components (|c|^2 = 4). */
  float content[N * D], table[(2 * REL_K + 1) * D];
  for (int i = 0; i < N * D; i++) content[i] = 0.5f;
  /* Relative table: only label r = -1 ("the key one to the left") is set, to 4c, so its score
   * is (c.c + c.4c) / sqrt(D) = 5 against 1 for every other key. */
  memset(table, 0, sizeof table);
  for (int m = 0; m < D; m++) table[(REL_K - 1) * D + m] = 4.0f * 0.5f;

  CHECK(relcl_alloc(ctx, N * D, &x));
  CHECK(relcl_alloc(ctx, N * D, &c));
  CHECK(relcl_alloc(ctx, (2 * REL_K + 1) * D, &wk));
  CHECK(relcl_alloc(ctx, N * N, &pa));
  CHECK(relcl_alloc(ctx, N * N, &pr));
  CHECK(relcl_alloc(ctx, N * D, &z));

  /* (i) absolute: x = content + PE(position), Q = K = V = x, no relative term */
  CHECK(relcl_write(ctx, relcl_buf_at(x, 0), content, N * D));
  CHECK(relcl_posenc_add(ctx, relcl_buf_at(x, 0), 1, N, D, 0));
  relcl_attn_desc abs_desc = relcl_attn_desc_self(1, 1, N, D, 0);
  abs_desc.relative = 0;
  CHECK(relcl_attn_forward(ctx, &abs_desc, relcl_buf_at(x, 0), relcl_buf_at(x, 0),
                           relcl_buf_at(x, 0), RELCL_BUF_NONE, RELCL_BUF_NONE, RELCL_BUF_NONE,
                           relcl_buf_at(z, 0), relcl_buf_at(pa, 0)));

  /* (ii) relative: Q = K = V = content, relative keys with k = 2 (keys_only: no wV) */
  CHECK(relcl_write(ctx, relcl_buf_at(c, 0), content, N * D));
  CHECK(relcl_write(ctx, relcl_buf_at(wk, 0), table, (2 * REL_K + 1) * D));
  relcl_attn_desc rel_desc = relcl_attn_desc_self(1, 1, N, D, REL_K);
  rel_desc.keys_only = 1;
  CHECK(relcl_attn_forward(ctx, &rel_desc, relcl_buf_at(c, 0), relcl_buf_at(c, 0),
                           relcl_buf_at(c, 0), relcl_buf_at(wk, 0), RELCL_BUF_NONE,
                           RELCL_BUF_NONE, relcl_buf_at(z, 0), relcl_buf_at(pr, 0)));

  float A[N * N], R[N * N];
  CHECK(relcl_read(ctx, relcl_buf_at(pa, 0), A, N * N));
  CHECK(relcl_read(ctx, relcl_buf_at(pr, 0), R, N * N));

  printf("Attention weights (row i = query position, column j = key position), %d positions "
         "with identical content, one head, head_dim %d:\n\n",
         N, D);
  printf("%-49s%s\n", "absolute: x = content + sinusoidal PE(i)",
         "relative: content only, k = 2, wK[-1] = 4c");
  for (int panel = 0; panel < 2; panel++) {
    printf("%s", panel ? "          " : "      ");
    for (int j = 0; j < N; j++) printf("  j=%d", j);
  }
  printf("\n");
  for (int i = 0; i < N; i++) {
    printf("i=%d   ", i);
    for (int j = 0; j < N; j++) printf(" %.2f", (double)A[i * N + j]);
    printf("   i=%d   ", i);
    for (int j = 0; j < N; j++) printf(" %.2f", (double)R[i * N + j]);
    printf("\n");
  }
  printf("\nabsolute: each row's pattern depends on where the query is, not only on how far "
         "the key is:\n  the largest difference between two rows at the same offset j - i "
         "is %.2f.\n",
         (double)shift_difference(A));
  printf("relative: every row i >= 1 puts %.2f on key i-1 and spreads the rest evenly, the "
         "same pattern\n  shifted along the diagonal (translation invariant; largest "
         "difference between rows %.2f);\n  row 0 has no key to its left, so its weights are "
         "uniform.\n\n",
         (double)R[1 * N + 0], (double)shift_difference(R));

  /* Timing: the same call with relative terms on and off */
  const size_t nx = (size_t)TB * TH * TN * TD, nw = (size_t)(2 * TK + 1) * TD;
  big = malloc(nx * sizeof *big);
  if (big == NULL) {
    fprintf(stderr, "relcl-attn-demo: out of host memory\n");
    goto done_quiet;
  }
  CHECK(relcl_alloc(ctx, nx, &tq));
  CHECK(relcl_alloc(ctx, nx, &tk));
  CHECK(relcl_alloc(ctx, nx, &tv));
  CHECK(relcl_alloc(ctx, nw, &twk));
  CHECK(relcl_alloc(ctx, nw, &twv));
  CHECK(relcl_alloc(ctx, nx, &tz));
  cl_mem inputs[] = {tq, tk, tv};
  for (unsigned i = 0; i < 3; i++) {
    fill(big, nx, i);
    CHECK(relcl_write(ctx, relcl_buf_at(inputs[i], 0), big, nx));
  }
  fill(big, nw, 3);
  CHECK(relcl_write(ctx, relcl_buf_at(twk, 0), big, nw));
  fill(big, nw, 4);
  CHECK(relcl_write(ctx, relcl_buf_at(twv, 0), big, nw));

  relcl_attn_desc on = relcl_attn_desc_self(TB, TH, TN, TD, TK), off = on;
  off.relative = 0;
  const relcl_attn_desc *descs[2] = {&off, &on};
  double ms[2];
  CHECK(time_forward(ctx, descs, tq, tk, tv, twk, twv, tz, ms));
  double ms_off = ms[0], ms_on = ms[1];
  printf("Forward time, batch %d, heads %d, n %d, head_dim %d (median of %d runs each, on and "
         "off alternating, after %d warm-up runs):\n",
         TB, TH, TN, TD, RUNS, WARMUP);
  char on_label[64];
  snprintf(on_label, sizeof on_label, "relative on (k = %d, a^K and a^V):", TK);
  printf("  %-36s %8.2f ms\n", "relative off (content terms only):", ms_off);
  printf("  %-36s %8.2f ms\n", on_label, ms_on);
  printf("  %-36s %8.2f\n", "ratio on / off:", ms_on / ms_off);
  rc = 0;
done:
  if (rc != 0) fprintf(stderr, "relcl-attn-demo: %s: %s\n", relcl_status_str(st),
                       relcl_last_error());
done_quiet:
  free(big);
  cl_mem bufs[] = {x, c, wk, pa, pr, z, tq, tk, tv, twk, twv, tz};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) clReleaseMemObject(bufs[i]);
  relcl_context_destroy(ctx);
  return rc;
}
