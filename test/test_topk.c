/* Beam search's selection on the device (kernels/decode.cl's row_topk, lib/model/beam.c's
 * relcl__rows_topk) against a host sort written here: for each row, the kk largest logits,
 * largest first, equal logits by increasing id, NaN never, id -1 past the last non-NaN one;
 * and the row's logit 0. The logits are drawn from a few values so that ties are everywhere
 * (the tie order decides which hypotheses a beam keeps), with NaN and -inf sprinkled in and
 * rows that hold fewer than kk numbers. Exact comparison: the kernel only moves floats. */
#include "model_internal.h"
#include "testutil.h"

typedef struct {
  float v;
  int id;
} entry;

/* larger first; equal: lower id first */
static int entry_cmp(const void *pa, const void *pb) {
  const entry *a = pa, *b = pb;
  if (a->v != b->v) return a->v > b->v ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

/* One case: N rows of V logits, kk best; returns the number of mismatching rows. */
static int run_case(relcl_context *ctx, int N, int V, int kk, int nan_rows) {
  const size_t NV = (size_t)N * V, NK = (size_t)N * kk;
  float *z = malloc(NV * sizeof *z), *val = malloc(NK * sizeof *val), *z0 = malloc(N * sizeof *z0);
  int32_t *id = malloc(NK * sizeof *id);
  entry *e = malloc((size_t)V * sizeof *e);
  cl_mem zm = NULL, vm = NULL, im = NULL, z0m = NULL;
  int bad = N;
  if (!z || !val || !z0 || !id || !e) goto done;
  static const float levels[] = {-3.0f, -1.5f, 0.0f, 0.25f, 2.0f, 2.0f, 7.5f};
  for (size_t i = 0; i < NV; i++) {
    uint32_t u = next_u32() % 100;
    z[i] = u < 3 ? NAN : u < 5 ? -INFINITY : levels[next_u32() % 7];
  }
  /* rows mostly NaN: fewer than kk numbers */
  for (int r = 0; r < nan_rows && r < N; r++)
    for (int v = 0; v < V; v++) z[(size_t)r * V + v] = v % 5 == 1 ? (float)(v % 3) : NAN;
  if (relcl_alloc(ctx, NV, &zm) != RELCL_OK || relcl_alloc(ctx, NK, &vm) != RELCL_OK ||
      relcl_alloc(ctx, NK, &im) != RELCL_OK || relcl_alloc(ctx, (size_t)N, &z0m) != RELCL_OK ||
      relcl_write(ctx, relcl_buf_at(zm, 0), z, NV) != RELCL_OK ||
      relcl__rows_topk(ctx, N, V, kk, relcl_buf_at(zm, 0), relcl_buf_at(vm, 0),
                       relcl_buf_at(im, 0), relcl_buf_at(z0m, 0)) != RELCL_OK ||
      relcl_read(ctx, relcl_buf_at(vm, 0), val, NK) != RELCL_OK ||
      relcl_read(ctx, relcl_buf_at(im, 0), id, NK) != RELCL_OK ||
      relcl_read(ctx, relcl_buf_at(z0m, 0), z0, (size_t)N) != RELCL_OK) {
    printf("  device error: %s\n", relcl_last_error());
    goto done;
  }
  bad = 0;
  for (int r = 0; r < N; r++) {
    int n = 0;
    for (int v = 0; v < V; v++)
      if (!isnan(z[(size_t)r * V + v])) e[n++] = (entry){z[(size_t)r * V + v], v};
    qsort(e, (size_t)n, sizeof *e, entry_cmp);
    bool ok = memcmp(&z0[r], &z[(size_t)r * V], sizeof(float)) == 0;
    for (int j = 0; j < kk; j++) {
      const size_t at = (size_t)r * kk + j;
      ok = ok && (j < n ? id[at] == e[j].id && val[at] == e[j].v : id[at] == -1);
    }
    if (!ok && bad++ == 0) {
      printf("  row %d differs; host:", r);
      for (int j = 0; j < kk && j < n; j++) printf(" %d:%g", e[j].id, e[j].v);
      printf("\n  device:");
      for (int j = 0; j < kk; j++) printf(" %d:%g", id[(size_t)r * kk + j], val[(size_t)r * kk + j]);
      printf("\n");
    }
  }
done:
  cl_mem mems[] = {zm, vm, im, z0m};
  for (int i = 0; i < 4; i++)
    if (mems[i]) clReleaseMemObject(mems[i]);
  free(z);
  free(val);
  free(z0);
  free(id);
  free(e);
  return bad;
}

int main(void) {
  relcl_context *ctx;
  relcl_status st = relcl_context_create(&ctx, NULL);
  if (st != RELCL_OK) tu_die_status(st, "context");
  const struct {
    int N, V, kk, nan_rows;
  } cases[] = {
      {1, 1, 1, 0},       {3, 7, 7, 0},      {5, 40, 1, 0},    {64, 300, 8, 4},
      {33, 2000, 2, 2},   {16, 997, 32, 3},  {200, 50, 16, 10}, {8, 8000, 8, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int bad = run_case(ctx, cases[c].N, cases[c].V, cases[c].kk, cases[c].nan_rows);
    tu_check(bad == 0, "row_topk == host sort: N %d, V %d, kk %d (%d rows short of kk): %d rows "
                       "differ",
             cases[c].N, cases[c].V, cases[c].kk, cases[c].nan_rows, bad);
  }
  st = relcl__rows_topk(ctx, 4, 10, RELCL__TOPK_MAX + 1, RELCL_BUF_NONE, RELCL_BUF_NONE,
                        RELCL_BUF_NONE, RELCL_BUF_NONE);
  tu_check(st == RELCL_ERR_INVALID_ARG, "kk over RELCL__TOPK_MAX is refused: %s",
           relcl_last_error());
  st = relcl__rows_topk(ctx, 4, 10, 11, RELCL_BUF_NONE, RELCL_BUF_NONE, RELCL_BUF_NONE,
                        RELCL_BUF_NONE);
  tu_check(st == RELCL_ERR_INVALID_ARG, "kk over V is refused");
  relcl_context_destroy(ctx);
  return tu_finish();
}
