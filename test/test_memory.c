/* Device memory and profiling seen through the public API (relcl_memory_stats_get,
 * relcl_profile_*): the extra memory of the relative terms grows as n*k, never as n*n*d;
 * relcl_alloc buffers are counted while alive; the profiler puts each command in its part
 * and its parts add up to the device time.
 *
 * The memory figures are the scratch that attention requests and holds at one time (what
 * it needs beyond its arguments), so they do not depend on which pooled buffer served a
 * request. Expected sizes are argued from the factored formulation (shared/design/
 * relative-attention.md): per (b, h, query) the relative terms need label values over at
 * most 2k+1 labels (Q wK^T, the label sums of the weights, and their gradients), never a
 * d-vector per key. */
#include "testutil.h"

enum { B = 1, H = 2, D = 16 };

typedef struct bufs {
  cl_mem q, k, v, z, dz, dq, dk, dv, probs, wk, wv, dwk, dwv;
} bufs;

static cl_mem zeros(relcl_context *ctx, size_t n, float value) {
  cl_mem m;
  TU_OK(relcl_alloc(ctx, n, &m));
  TU_OK(relcl_fill(ctx, relcl_buf_at(m, 0), value, n));
  return m;
}

static void make(relcl_context *ctx, int n, int kmax, bufs *b) {
  size_t x = (size_t)B * H * n * D, w = (size_t)(2 * kmax + 1) * D;
  cl_mem *all[] = {&b->q, &b->k, &b->v, &b->z, &b->dz, &b->dq, &b->dk, &b->dv};
  for (int i = 0; i < 8; i++) *all[i] = zeros(ctx, x, 0.01f * (float)i);
  b->probs = zeros(ctx, (size_t)B * H * n * n, 0.0f);
  b->wk = zeros(ctx, w, 0.02f);
  b->wv = zeros(ctx, w, 0.03f);
  b->dwk = zeros(ctx, w, 0.0f);
  b->dwv = zeros(ctx, w, 0.0f);
}

static void release(bufs *b) {
  cl_mem all[] = {b->q,  b->k,     b->v,  b->z,  b->dz,  b->dq, b->dk,
                  b->dv, b->probs, b->wk, b->wv, b->dwk, b->dwv};
  for (int i = 0; i < 13; i++) clReleaseMemObject(all[i]);
}

/* Peak scratch (bytes requested and in use at once) of one forward + backward. */
static size_t scratch_peak(relcl_context *ctx, const bufs *b, int n, int k, int relative) {
  relcl_attn_desc d = relcl_attn_desc_self(B, H, n, D, k);
  d.relative = relative;
#define A(m) relcl_buf_at(b->m, 0)
  TU_OK(relcl_memory_reset_peaks(ctx));
  TU_OK(
      relcl_attn_forward(ctx, &d, A(q), A(k), A(v), A(wk), A(wv), RELCL_BUF_NONE, A(z), A(probs)));
  TU_OK(relcl_attn_backward(ctx, &d, A(q), A(k), A(v), A(wk), A(wv), RELCL_BUF_NONE, A(probs),
                            A(dz), A(dq), A(dk), A(dv), A(dwk), A(dwv)));
#undef A
  TU_OK(relcl_finish(ctx));
  relcl_memory_stats m;
  TU_OK(relcl_memory_stats_get(ctx, &m));
  return m.scratch_used_peak;
}

/* Extra scratch of the relative terms at (n, k). */
static double extra(relcl_context *ctx, int n, int k) {
  bufs b;
  make(ctx, n, k, &b);
  double rel = (double)scratch_peak(ctx, &b, n, k, 1);
  double abs_ = (double)scratch_peak(ctx, &b, n, k, 0);
  release(&b);
  double x = rel - abs_;
  double labels = (double)B * H * n * (2 * k + 1) * 4; /* one float per (b,h,i,label) */
  double nnd = (double)B * H * n * (double)n * D * 4;
  printf(
      "     n=%d k=%d: scratch absolute %.0f B, relative %.0f B, extra %.0f B = %.2f label "
      "tensors, %.4f of n*n*d\n",
      n, k, abs_, rel, x, x / labels, x / nnd);
  /* the factored form holds at most four (B, H, n, 2k+1) label tensors at once */
  tu_check(x > 0 && x <= 4 * labels,
           "n=%d k=%d: extra memory %.0f B is 1 to 4 label tensors "
           "(B*H*n*(2k+1) floats = %.0f B), not n*n*d (%.0f B)",
           n, k, x, labels, nnd);
  return x;
}

static void check_scaling(relcl_context *ctx) {
  /* n > 2k everywhere, so that every one of the 2k+1 labels is in use */
  double e64 = extra(ctx, 64, 8), e256 = extra(ctx, 256, 8), e256k = extra(ctx, 256, 16);
  /* n*k: 4x the length at fixed k is 4x the memory (n*n or n*n*d would be 16x); twice
   * k is (2*16+1)/(2*8+1) = 1.94x. Tolerance 10%: allocations round to 4 bytes only. */
  double rn = e256 / e64, rk = e256k / e256;
  tu_check(rn > 3.6 && rn < 4.4,
           "extra memory grows as n: n 64 -> 256 at k 8 gives x%.2f (n*k: "
           "x4, n*n*d: x16)",
           rn);
  tu_check(rk > 1.94 * 0.9 && rk < 1.94 * 1.1,
           "extra memory grows as k: k 8 -> 16 at n 256 gives x%.2f (2k+1: x1.94)", rk);
}

static void check_alloc_accounting(relcl_context *ctx) {
  relcl_memory_stats m0, m1, m2;
  TU_OK(relcl_memory_stats_get(ctx, &m0));
  cl_mem a;
  TU_OK(relcl_alloc(ctx, 1000, &a));
  TU_OK(relcl_memory_stats_get(ctx, &m1));
  clReleaseMemObject(a);
  TU_OK(relcl_finish(ctx));
  TU_OK(relcl_memory_stats_get(ctx, &m2));
  tu_check(m1.alloc_bytes == m0.alloc_bytes + 4000 && m1.alloc_peak >= m1.alloc_bytes &&
               m1.total_peak >= m1.alloc_bytes + m1.scratch_bytes,
           "relcl_alloc of 1000 floats counts 4000 bytes (%zu -> %zu), peaks at least current",
           m0.alloc_bytes, m1.alloc_bytes);
  tu_check(m2.alloc_bytes == m0.alloc_bytes && m2.alloc_peak == m1.alloc_peak,
           "releasing it gives them back (%zu), the peak stays (%zu)", m2.alloc_bytes,
           m2.alloc_peak);
  TU_OK(relcl_memory_reset_peaks(ctx));
  TU_OK(relcl_memory_stats_get(ctx, &m2));
  tu_check(m2.alloc_peak == m2.alloc_bytes && m2.scratch_peak == m2.scratch_bytes,
           "reset: peaks equal the current values");
}

/* The profiler: one relative and one absolute call, then the parts. */
static void check_profile(relcl_context *ctx) {
  const int n = 48, k = 4;
  bufs b;
  make(ctx, n, k, &b);
  relcl_profile_summary s[2];
  for (int relative = 0; relative < 2; relative++) {
    relcl_attn_desc d = relcl_attn_desc_self(B, H, n, D, k);
    d.relative = relative;
    TU_OK(relcl_profile_enable(ctx, 1));
    for (int pass = 0; pass < 2; pass++) { /* the first may fill new scratch buffers */
      TU_OK(relcl_profile_reset(ctx));
      TU_OK(relcl_attn_forward(ctx, &d, relcl_buf_at(b.q, 0), relcl_buf_at(b.k, 0),
                               relcl_buf_at(b.v, 0), relcl_buf_at(b.wk, 0), relcl_buf_at(b.wv, 0),
                               RELCL_BUF_NONE, relcl_buf_at(b.z, 0), relcl_buf_at(b.probs, 0)));
    }
    float host[4];
    TU_OK(relcl_read(ctx, relcl_buf_at(b.z, 0), host, 4));
    TU_OK(relcl_finish(ctx));
    TU_OK(relcl_profile_summary_get(ctx, &s[relative]));
    double sum = 0;
    for (int p = 0; p < RELCL_PART_COUNT; p++) sum += s[relative].part_ms[p];
    int count = relcl_profile_count(ctx), gemms = 0, reads = 0, rows = 0, windows = 0,
        fused = 0, whole = 0;
    long calls = 0;
    for (int i = 0; i < count; i++) {
      relcl_profile_entry e;
      TU_OK(relcl_profile_entry_get(ctx, i, &e));
      calls += e.calls;
      gemms += e.m > 0;
      reads += e.part == RELCL_PART_COPIES && strstr(e.name, "read") != NULL;
      rows += e.part == RELCL_PART_ATTENTION_ROWS && strcmp(e.name, "attn_fwd_rows") == 0;
      windows += strcmp(e.name, "table_window_t") == 0 ? (int)e.calls : 0;
      fused += e.m > 0 && strchr(e.name, '+') != NULL ? (int)e.calls : 0;
      /* one product of all its multiply-adds (attention.c fused_columns) */
      whole += e.part == RELCL_PART_ATTENTION_ROWS && strncmp(e.name, "attn_fwd_cpu ", 13) == 0 &&
               e.m == (size_t)B * H * n && e.k == D &&
               e.n == (size_t)2 * n + (relative ? 2 * (2 * k + 1) : 0);
    }
    if (whole) { /* attention in one kernel a head (CPUs: RELCL_ATTN), the products in it */
      tu_check(calls == 2 && s[relative].commands == 2 && whole == 1 && reads == 1 &&
                   gemms == 1 && s[relative].part_ms[RELCL_PART_RELATIVE_GEMM] == 0,
               "%s forward in one kernel a head: %ld commands profiled (want 2), %d GEMM "
               "shapes (the kernel, its products as one), the kernel and the read in their "
               "parts",
               relative ? "relative" : "absolute", calls, gemms);
    } else {
      /* forward: Q K^T and alpha V, plus Q wK^T and B' wV when relative; one row kernel;
       * the read. On CPU contexts Q wK^T reads the shared table's window transposed, written
       * by one more command (attention.c labels_shared); it has no product shape. Where
       * relcl's own products run, B' wV is in alpha V's product ("gemm_cpu_batch 48x16x48+9
       * x2": attention.c heads_product). */
      long want = (relative ? 6 : 4) + windows - fused;
      tu_check(calls == want && s[relative].commands == want && rows == 1 && reads == 1 &&
                   windows <= relative && fused <= relative &&
                   gemms == (relative ? 4 : 2) - fused,
               "%s forward: %ld commands profiled (want %ld), %d GEMM shapes, the row kernel "
               "and the read in their parts",
               relative ? "relative" : "absolute", calls, want, gemms);
    }
    tu_check(fabs(sum - s[relative].busy_ms) <= 1e-9 + 1e-9 * sum &&
                 s[relative].span_ms + 1e-6 >= s[relative].busy_ms * 0.999,
             "%s: parts add up to the busy time (%.3f ms), within the span (%.3f ms)",
             relative ? "relative" : "absolute", s[relative].busy_ms, s[relative].span_ms);
  }
  if (s[1].commands > 2) /* the kernels apart */
    tu_check(s[0].part_ms[RELCL_PART_RELATIVE_GEMM] == 0 &&
                 s[1].part_ms[RELCL_PART_RELATIVE_GEMM] > 0,
             "relative GEMMs are counted apart (absolute %.3f ms, relative %.3f ms)",
             s[0].part_ms[RELCL_PART_RELATIVE_GEMM], s[1].part_ms[RELCL_PART_RELATIVE_GEMM]);
  TU_OK(relcl_profile_enable(ctx, 0));
  TU_OK(relcl_profile_reset(ctx));
  TU_OK(relcl_fill(ctx, relcl_buf_at(b.z, 0), 0.0f, 4));
  TU_OK(relcl_finish(ctx));
  tu_check(relcl_profile_count(ctx) == 0, "profiling off: nothing collected");
  release(&b);
}

int main(void) {
  relcl_context *ctx;
  TU_OK(relcl_context_create(&ctx, NULL));
  printf("device: %s\n", relcl_context_device_name(ctx));
  check_alloc_accounting(ctx);
  check_scaling(ctx);
  check_profile(ctx);
  relcl_context_destroy(ctx);
  /* on a CPU attention runs in one kernel a head; the profile of its kernels apart, too */
  setenv("RELCL_ATTN", "apart", 1);
  TU_OK(relcl_context_create(&ctx, NULL));
  check_profile(ctx);
  unsetenv("RELCL_ATTN");
  return tu_finish();
}
