/* relcl-bench --compare, op by op: the model's linear layers and attention calls, forward and
 * backward, run alternately on side A's and side B's context (A B, B A, A B, ...) a few
 * milliseconds apart, so that a machine whose speed drifts between steps still compares two
 * kernel sets product by product. Each repetition runs every op once per side with the
 * profiler on; a kernel or GEMM shape's time is summed over the repetition's calls, and the
 * ratio B / A is taken per repetition (the two sides' runs of it are neighbours in time), then
 * its median. */
#include "bench.h"
#include "relcl_layers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LINEAR = 5, MAX_NAMES = 128, MAX_OP_REPS = BENCH_MAX_OP_REPS };

/* One side's buffers: a linear layer's x, W, b, y, dy, dx, dW, db, and attention's. */
enum { L_X, L_W, L_B, L_Y, L_DY, L_DX, L_DW, L_DB, L_N };
enum { A_Q, A_K, A_V, A_Z, A_DZ, A_DQ, A_DK, A_DV, A_P, A_WK, A_WV, A_DWK, A_DWV, A_S, A_N };

typedef struct side {
  relcl_context *ctx;
  cl_mem lin[MAX_LINEAR][L_N];
  cl_mem att[A_N];
} side;

typedef struct row_stats {
  double a, b, ratio, lo, hi; /* medians of each side, and of the per-repetition ratios */
  bool both;                  /* ratio, lo and hi set: both sides ran it */
} row_stats;

typedef struct name_row {
  char name[96];
  relcl_profile_part part;
  double ms[2][MAX_OP_REPS]; /* per side, per repetition */
  row_stats st;
} name_row;

static relcl_status side_alloc(side *s, const bench_ops_opts *o) {
  relcl_status st = RELCL_OK;
  for (int l = 0; l < o->n_linear && st == RELCL_OK; l++) {
    const size_t r = (size_t)o->rows, in = (size_t)o->linear[l][0], out = (size_t)o->linear[l][1];
    const size_t sizes[L_N] = {r * in, out * in, out, r * out, r * out, r * in, out * in, out};
    for (int i = 0; i < L_N && st == RELCL_OK; i++)
      st = bench_alloc_fill(s->ctx, sizes[i], 0.01f * (float)(i % 5 + 1), &s->lin[l][i]);
  }
  const size_t x = (size_t)o->sentences * o->heads * o->len * o->head_dim;
  const size_t w = (size_t)(2 * o->k + 1) * o->head_dim;
  const size_t p = (size_t)o->sentences * o->heads * o->len * o->len;
  /* the saved state (relcl_attn_forward_saved): relative self-attention's, the larger */
  const relcl_attn_desc self = relcl_attn_desc_self(o->sentences, o->heads, o->len,
                                                    o->head_dim, o->k);
  const size_t sv = relcl_attn_saved_size(&self);
  const size_t sizes[A_N] = {x, x, x, x, x, x, x, x, p, w, w, w, w, sv};
  /* small values: any data times the same, but keep the softmax away from overflow */
  for (int i = 0; i < A_N && st == RELCL_OK; i++)
    st = bench_alloc_fill(s->ctx, sizes[i], 0.01f * (float)(i % 5), &s->att[i]);
  return st;
}

static void side_free(side *s) {
  for (int l = 0; l < MAX_LINEAR; l++)
    for (int i = 0; i < L_N; i++)
      if (s->lin[l][i]) clReleaseMemObject(s->lin[l][i]);
  for (int i = 0; i < A_N; i++)
    if (s->att[i]) clReleaseMemObject(s->att[i]);
}

/* Every op once, forward then backward: the linear layers, then relative self-attention
 * (dropout and the saved state as in training) and cross attention. */
static relcl_status run_ops(side *s, const bench_ops_opts *o) {
#define LB(l, i) relcl_buf_at(s->lin[l][i], 0)
#define AB(i) relcl_buf_at(s->att[i], 0)
  relcl_status st = RELCL_OK;
  for (int l = 0; l < o->n_linear && st == RELCL_OK; l++) {
    const int in = o->linear[l][0], out = o->linear[l][1];
    st = relcl_linear_forward(s->ctx, o->rows, in, out, LB(l, L_X), LB(l, L_W), LB(l, L_B),
                              LB(l, L_Y));
    if (st == RELCL_OK)
      st = relcl_linear_backward(s->ctx, o->rows, in, out, LB(l, L_X), LB(l, L_W), LB(l, L_DY),
                                 LB(l, L_DX), 0, LB(l, L_DW), LB(l, L_DB));
  }
  relcl_attn_desc self = relcl_attn_desc_self(o->sentences, o->heads, o->len, o->head_dim, o->k);
  self.dropout = o->dropout;
  self.seed = 7;
  relcl_attn_desc cross = relcl_attn_desc_cross(o->sentences, o->heads, o->len, o->len,
                                                o->head_dim);
  cross.dropout = o->dropout;
  cross.seed = 7;
  const relcl_attn_desc *d[2] = {&self, &cross};
  for (int a = 0; a < 2 && st == RELCL_OK; a++) {
    st = relcl_attn_forward_saved(s->ctx, d[a], AB(A_Q), AB(A_K), AB(A_V), AB(A_WK), AB(A_WV),
                                  RELCL_BUF_NONE, AB(A_Z), AB(A_P), AB(A_S));
    if (st == RELCL_OK)
      st = relcl_attn_backward_saved(s->ctx, d[a], AB(A_Q), AB(A_K), AB(A_V), AB(A_WK),
                                     AB(A_WV), RELCL_BUF_NONE, AB(A_P), AB(A_S), AB(A_DZ),
                                     AB(A_DQ), AB(A_DK), AB(A_DV), AB(A_DWK), AB(A_DWV));
  }
  return st == RELCL_OK ? relcl_finish(s->ctx) : st;
#undef LB
#undef AB
}

/* The profile of one side's repetition r into the table (matched by part and name or
 * product: bench_same_entry). */
static relcl_status collect(relcl_context *ctx, int side_i, int r, name_row *rows, int *n) {
  const int count = relcl_profile_count(ctx);
  for (int q = 0; q < count; q++) {
    relcl_profile_entry x;
    relcl_status st = relcl_profile_entry_get(ctx, q, &x);
    if (st != RELCL_OK) return st;
    int i = 0;
    while (i < *n && !(rows[i].part == x.part && bench_same_entry(rows[i].name, x.name))) i++;
    if (i == *n) {
      if (*n == MAX_NAMES) continue;
      memset(&rows[i], 0, sizeof rows[i]);
      snprintf(rows[i].name, sizeof rows[i].name, "%s", x.name);
      rows[i].part = x.part;
      (*n)++;
    }
    rows[i].ms[side_i][r] += x.ms;
  }
  return RELCL_OK;
}

static void row_of(const double *a, const double *b, int reps, row_stats *s) {
  double x[MAX_OP_REPS], y[MAX_OP_REPS], lo, hi;
  memcpy(x, a, (size_t)reps * sizeof *x); /* bench_stats reorders */
  memcpy(y, b, (size_t)reps * sizeof *y);
  bench_stats(x, reps, &s->a, &lo, &hi);
  bench_stats(y, reps, &s->b, &lo, &hi);
  s->both = bench_ratio_stats(a, b, reps, &s->ratio, &s->lo, &s->hi);
}

static int by_a(const void *p, const void *q) { /* A's median time, longest first */
  const double x = ((const name_row *)p)->st.a, y = ((const name_row *)q)->st.a;
  return (x < y) - (x > y);
}

int bench_ops_compare(relcl_context *ctx_a, relcl_context *ctx_b, const bench_ops_opts *o,
                      cJSON *out) {
  side s[2] = {{.ctx = ctx_a}, {.ctx = ctx_b}};
  name_row *rows = calloc(MAX_NAMES, sizeof *rows);
  double total[2][MAX_OP_REPS] = {{0}};
  int n = 0, rc = 1;
  const int reps = o->reps < MAX_OP_REPS ? o->reps : MAX_OP_REPS;
  relcl_status st = rows ? RELCL_OK : RELCL_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < 2 && st == RELCL_OK; i++) {
    st = side_alloc(&s[i], o);
    if (st == RELCL_OK) st = run_ops(&s[i], o); /* warm-up */
    if (st == RELCL_OK) st = relcl_profile_enable(s[i].ctx, 1);
  }
  for (int r = 0; r < reps && st == RELCL_OK; r++)
    for (int j = 0; j < 2 && st == RELCL_OK; j++) {
      const int i = r % 2 ? 1 - j : j; /* A B, B A, ... */
      relcl_profile_summary sum;
      if ((st = relcl_profile_reset(s[i].ctx)) != RELCL_OK) break;
      if ((st = run_ops(&s[i], o)) != RELCL_OK) break;
      if ((st = relcl_profile_summary_get(s[i].ctx, &sum)) != RELCL_OK) break;
      total[i][r] = sum.busy_ms;
      st = collect(s[i].ctx, i, r, rows, &n);
    }
  for (int i = 0; i < 2 && st == RELCL_OK; i++) st = relcl_profile_enable(s[i].ctx, 0);
  if (st != RELCL_OK) {
    fprintf(stderr, "relcl-bench: --compare, op by op: %s: %s\n", relcl_status_str(st),
            relcl_last_error());
    goto done;
  }
  for (int i = 0; i < n; i++) row_of(rows[i].ms[0], rows[i].ms[1], reps, &rows[i].st);
  qsort(rows, (size_t)n, sizeof *rows, by_a);
  cJSON *j = cJSON_AddObjectToObject(out, "ops");
  cJSON_AddNumberToObject(j, "reps", reps);
  row_stats t;
  row_of(total[0], total[1], reps, &t);
  bench_json_array(j, "a_busy_ms_runs", total[0], reps);
  bench_json_array(j, "b_busy_ms_runs", total[1], reps);
  cJSON_AddNumberToObject(j, "a_busy_ms", t.a);
  cJSON_AddNumberToObject(j, "b_busy_ms", t.b);
  cJSON_AddNumberToObject(j, "time_ratio_paired_median", t.ratio);
  cJSON_AddNumberToObject(j, "time_ratio_paired_min", t.lo);
  cJSON_AddNumberToObject(j, "time_ratio_paired_max", t.hi);
  cJSON *e = cJSON_AddArrayToObject(j, "entries");
  if (!o->quiet) {
    printf("\nA against B, op by op: the model's linear layers (%d rows) and attention calls "
           "(relative self, cross), forward and backward, each side in turn (A B, B A, ...), "
           "%d repetitions; ms a repetition (medians), and B / A: the median (min..max) of "
           "the repetitions' ratios\n",
           o->rows, reps);
    printf("%9s %9s %22s  %-18s %s\n", "A ms", "B ms", "B/A (min..max)", "part", "name");
    printf("%9.2f %9.2f %6.3f (%6.3f..%6.3f)  %-18s %s\n", t.a, t.b, t.ratio, t.lo, t.hi, "",
           "all (device busy)");
  }
  for (int i = 0; i < n; i++) {
    const row_stats x = rows[i].st;
    const bool both = x.both;
    cJSON *y = cJSON_CreateObject();
    cJSON_AddStringToObject(y, "name", rows[i].name);
    cJSON_AddStringToObject(y, "part", relcl_profile_part_name(rows[i].part));
    cJSON_AddNumberToObject(y, "a_ms", x.a);
    cJSON_AddNumberToObject(y, "b_ms", x.b);
    if (both) {
      cJSON_AddNumberToObject(y, "time_ratio_paired_median", x.ratio);
      cJSON_AddNumberToObject(y, "time_ratio_paired_min", x.lo);
      cJSON_AddNumberToObject(y, "time_ratio_paired_max", x.hi);
    }
    cJSON_AddItemToArray(e, y);
    if (o->quiet) continue;
    if (both)
      printf("%9.2f %9.2f %6.3f (%6.3f..%6.3f)  %-18s %s\n", x.a, x.b, x.ratio, x.lo, x.hi,
             relcl_profile_part_name(rows[i].part), rows[i].name);
    else
      printf("%9.2f %9.2f %22s  %-18s %s\n", x.a, x.b, "-",
             relcl_profile_part_name(rows[i].part), rows[i].name);
  }
  rc = 0;
done:
  side_free(&s[0]);
  side_free(&s[1]);
  free(rows);
  return rc;
}
