/* relcl-bench: how attention's time and memory grow with the sequence length n, absolute
 * against relative positions (k fixed, and k = n). relcl forms the relative terms in a
 * factored form (Q wK^T over the 2k+1 labels, label sums of the weights), so their extra
 * memory is a few (batch, heads, n, min(2k+1, 2n-1)) tensors: n*k, never n*n*d. */
#include "bench.h"
#include "train_plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V_ABS, V_REL_K, V_REL_N, N_VARIANTS, MAX_POINTS = 16 };

enum {
  T_Q, T_K, T_V, T_Z, T_DZ, T_DQ, T_DK, T_DV, T_PROBS, T_WK, T_WV, T_DWK, T_DWV, T_SAVED, N_BUFS
};

typedef struct point {
  int n;
  double ms[N_VARIANTS];      /* median forward + backward */
  size_t scratch[N_VARIANTS]; /* scratch requested and in use at once, peak */
  size_t saved[N_VARIANTS];   /* the saved state the forward leaves for the backward */
  size_t tables;              /* wK, wV and their gradients at k, and at k = n */
  size_t tables_n;
} point;

/* One forward + backward as training runs them (the saved state, relcl_attn_forward_saved);
 * dropout off, no padding, relative per variant. */
static relcl_status run_once(relcl_context *ctx, relcl_attn_desc *d, cl_mem *b) {
#define B_(i) relcl_buf_at(b[i], 0)
  relcl_status st =
      relcl_attn_forward_saved(ctx, d, B_(T_Q), B_(T_K), B_(T_V), B_(T_WK), B_(T_WV),
                               RELCL_BUF_NONE, B_(T_Z), B_(T_PROBS), B_(T_SAVED));
  if (st == RELCL_OK)
    st = relcl_attn_backward_saved(ctx, d, B_(T_Q), B_(T_K), B_(T_V), B_(T_WK), B_(T_WV),
                                   RELCL_BUF_NONE, B_(T_PROBS), B_(T_SAVED), B_(T_DZ),
                                   B_(T_DQ), B_(T_DK), B_(T_DV), B_(T_DWK), B_(T_DWV));
  if (st == RELCL_OK) st = relcl_finish(ctx);
  return st;
#undef B_
}

static relcl_attn_desc desc_of(const bench_scaling_opts *o, int n, int v) {
  relcl_attn_desc d = relcl_attn_desc_self(o->batch, o->heads, n, o->head_dim, o->k);
  d.relative = v != V_ABS;
  if (v == V_REL_N) d.max_rel = n;
  return d;
}

static int measure(relcl_context *ctx, const bench_scaling_opts *o, int n, point *pt) {
  size_t x = (size_t)o->batch * o->heads * n * o->head_dim;
  size_t w = (size_t)(2 * n + 1) * o->head_dim; /* room for k = n */
  for (int v = 0; v < N_VARIANTS; v++) {
    const relcl_attn_desc d = desc_of(o, n, v);
    pt->saved[v] = relcl_attn_saved_size(&d) * sizeof(float);
  }
  size_t sizes[N_BUFS] = {x, x, x, x, x, x, x, x, (size_t)o->batch * o->heads * n * n, w, w, w, w,
                          pt->saved[V_REL_N] / sizeof(float)}; /* k = n's, the largest */
  cl_mem b[N_BUFS] = {0};
  relcl_status st = RELCL_OK;
  int rc = 1;
  /* small values: any data times the same, but keep the softmax away from overflow */
  for (int i = 0; i < N_BUFS && st == RELCL_OK; i++)
    st = bench_alloc_fill(ctx, sizes[i], 0.01f * (float)(i % 5), &b[i]);
  if (st != RELCL_OK) goto done;
  /* warm-up (CLBlast compiles per shape), and each variant's scratch high-water mark */
  for (int v = 0; v < N_VARIANTS; v++) {
    relcl_attn_desc d = desc_of(o, n, v);
    relcl_memory_stats m;
    if ((st = relcl_memory_reset_peaks(ctx)) != RELCL_OK) goto done;
    if ((st = run_once(ctx, &d, b)) != RELCL_OK) goto done;
    if ((st = relcl_memory_stats_get(ctx, &m)) != RELCL_OK) goto done;
    pt->scratch[v] = m.scratch_used_peak;
  }
  pt->tables = 4 * (size_t)(2 * o->k + 1) * o->head_dim * sizeof(float);
  pt->tables_n = 4 * (size_t)(2 * n + 1) * o->head_dim * sizeof(float);
  double t[N_VARIANTS][32];
  int reps = o->reps < 32 ? o->reps : 32;
  for (int r = 0; r < reps; r++) /* interleaved, so that load changes hit every variant */
    for (int v = 0; v < N_VARIANTS; v++) {
      relcl_attn_desc d = desc_of(o, n, v);
      double t0 = bench_now();
      if ((st = run_once(ctx, &d, b)) != RELCL_OK) goto done;
      t[v][r] = (bench_now() - t0) * 1e3;
    }
  for (int v = 0; v < N_VARIANTS; v++) {
    double lo, hi;
    bench_stats(t[v], reps, &pt->ms[v], &lo, &hi);
  }
  rc = 0;
done:
  if (rc)
    fprintf(stderr, "relcl-bench: attention at n=%d: %s: %s\n", n, relcl_status_str(st),
            relcl_last_error());
  for (int i = 0; i < N_BUFS; i++)
    if (b[i]) clReleaseMemObject(b[i]);
  return rc;
}

/* Extra bytes of a relative variant over absolute: its scratch and saved state beyond
 * absolute's, plus the tables and their gradients. */
static double extra_bytes(const point *p, int v) {
  double s = (double)p->scratch[v] - (double)p->scratch[V_ABS];
  s += (double)p->saved[v] - (double)p->saved[V_ABS];
  return s + (double)(v == V_REL_N ? p->tables_n : p->tables);
}

/* Two PNGs over n: the time ratio relative / absolute (the table has the milliseconds), and
 * the extra memory of the relative terms. */
static void plot(const bench_scaling_opts *o, const point *pts, int np) {
  double xs[MAX_POINTS], ratio[2][MAX_POINTS], mem[2][MAX_POINTS];
  for (int i = 0; i < np; i++) {
    xs[i] = pts[i].n;
    ratio[0][i] = pts[i].ms[V_REL_K] / pts[i].ms[V_ABS];
    ratio[1][i] = pts[i].ms[V_REL_N] / pts[i].ms[V_ABS];
    mem[0][i] = extra_bytes(&pts[i], V_REL_K) / 1048576.0;
    mem[1][i] = extra_bytes(&pts[i], V_REL_N) / 1048576.0;
  }
  char lk[64], path[4200], err[512], title[256];
  snprintf(lk, sizeof lk, "relative k=%d", o->k);
  train_series s[2] = {{lk, xs, ratio[0], (size_t)np}, {"relative k=n", xs, ratio[1], (size_t)np}};
  snprintf(path, sizeof path, "%s-time.png", o->plot);
  snprintf(title, sizeof title,
           "attention forward + backward time, relative / absolute (batch %d, %d heads, d %d)",
           o->batch, o->heads, o->head_dim);
  if (train_plot_png(path, title, "n (sequence length)", "time / absolute time", s, 2, err,
                     sizeof err) != 0)
    fprintf(stderr, "relcl-bench: %s\n", err);
  else if (!o->quiet)
    printf("plot: %s\n", path);
  train_series m[2] = {{lk, xs, mem[0], (size_t)np}, {"relative k=n", xs, mem[1], (size_t)np}};
  snprintf(path, sizeof path, "%s-memory.png", o->plot);
  snprintf(title, sizeof title, "extra device memory of the relative terms (batch %d, %d heads)",
           o->batch, o->heads);
  if (train_plot_png(path, title, "n (sequence length)", "MiB", m, 2, err, sizeof err) != 0)
    fprintf(stderr, "relcl-bench: %s\n", err);
  else if (!o->quiet)
    printf("plot: %s\n", path);
}

static void print_row(const bench_scaling_opts *o, const point *p) {
  double naive = (double)o->batch * o->heads * p->n * (double)p->n * o->head_dim * 4;
  printf("%6d %11.2f %11.2f %13.2f %9.2f %9.2f %13.3f %13.3f %12.1f\n", p->n, p->ms[V_ABS],
         p->ms[V_REL_K], p->ms[V_REL_N], p->ms[V_REL_K] / p->ms[V_ABS],
         p->ms[V_REL_N] / p->ms[V_ABS], extra_bytes(p, V_REL_K) / 1048576.0,
         extra_bytes(p, V_REL_N) / 1048576.0, naive / 1048576.0);
  fflush(stdout);
}

int bench_scaling(relcl_context *ctx, const bench_scaling_opts *o, cJSON *out) {
  if (!o->quiet) {
    printf(
        "\nattention scaling: forward + backward, batch %d, %d heads, head_dim %d, k %d, "
        "median of %d interleaved runs, as training runs them (the forward's saved state); "
        "extra memory = scratch and saved state beyond absolute + the tables and their "
        "gradients\n",
        o->batch, o->heads, o->head_dim, o->k, o->reps);
    printf("%6s %11s %11s %13s %9s %9s %13s %13s %12s\n", "n", "absolute ms", "rel k ms",
           "rel k=n ms", "k ratio", "k=n ratio", "extra k MiB", "extra k=n MiB", "n*n*d MiB");
  }
  point pts[MAX_POINTS];
  int np = 0;
  for (int n = o->n_min; n <= o->n_max && np < MAX_POINTS; n *= 2) {
    pts[np].n = n;
    if (measure(ctx, o, n, &pts[np])) return 1;
    if (!o->quiet) print_row(o, &pts[np]);
    np++;
  }
  cJSON *arr = cJSON_AddArrayToObject(out, "scaling");
  for (int i = 0; i < np; i++) {
    const point *p = &pts[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "n", p->n);
    cJSON_AddNumberToObject(e, "absolute_ms", p->ms[V_ABS]);
    cJSON_AddNumberToObject(e, "relative_k_ms", p->ms[V_REL_K]);
    cJSON_AddNumberToObject(e, "relative_kn_ms", p->ms[V_REL_N]);
    cJSON_AddNumberToObject(e, "extra_bytes_relative_k", extra_bytes(p, V_REL_K));
    cJSON_AddNumberToObject(e, "extra_bytes_relative_kn", extra_bytes(p, V_REL_N));
    cJSON_AddNumberToObject(e, "naive_n_n_d_bytes",
                            (double)o->batch * o->heads * p->n * (double)p->n * o->head_dim * 4);
    cJSON_AddItemToArray(arr, e);
  }
  if (o->plot && o->plot[0] && np > 0) plot(o, pts, np);
  return 0;
}
