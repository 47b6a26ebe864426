/* The parts of relcl-bench: the training-step comparison (relcl-bench.c), the attention
 * scaling sweep (bench_scaling.c), the device's own limits (bench_peak.c) and --compare's
 * op-by-op comparison (bench_ops.c). Each part prints its table on stdout (unless quiet) and
 * adds its figures to a cJSON object. */
#ifndef RELCL_BENCH_H
#define RELCL_BENCH_H

#include "relcl.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Seconds on a monotonic clock. */
double bench_now(void);
/* Median, min and max of n values (n >= 1); values is reordered. */
void bench_stats(double *values, int n, double *median, double *min, double *max);
/* Median, min and max of the n ratios b[r] / a[r] over the r where both are above 0 (a's and
 * b's runs r timed next to each other); false when there is none. */
bool bench_ratio_stats(const double *a, const double *b, int n, double *median, double *min,
                       double *max);
/* Whether two profile names are one kernel or one product: the same name, or the same
 * product shape run by two of the GEMM door's kernels ("gemm_cpu_at A^T 256x256x4000 x1" and
 * "gemm_cpu A^T 256x256x4000 x1", "SGEMM ..."), so that --compare matches a product whichever
 * kernel each side ran it in. */
bool bench_same_entry(const char *a, const char *b);
/* Add a JSON array of n numbers under key. */
void bench_json_array(cJSON *obj, const char *key, const double *values, int n);
/* A buffer of n floats on ctx, every one v. */
relcl_status bench_alloc_fill(relcl_context *ctx, size_t n, float v, cl_mem *out);
/* GFLOP/s of an n^3 product that took ms milliseconds */
double bench_cube_gflops(int n, double ms);

enum { BENCH_MAX_OP_REPS = 64 }; /* --op-reps' limit (bench_ops.c) */

/* ---- attention scaling (bench_scaling.c) ---- */

typedef struct bench_scaling_opts {
  int n_min, n_max; /* lengths n_min, 2 n_min, ... up to n_max */
  int batch, heads, head_dim, k;
  int reps;
  const char *plot; /* PNG path prefix ("" or NULL: no plot) */
  bool quiet;
} bench_scaling_opts;

/* Attention forward + backward time and the extra device memory of the relative terms for
 * each n, absolute against relative with k and with k = n. 0, or 1 after printing why. */
int bench_scaling(relcl_context *ctx, const bench_scaling_opts *o, cJSON *out);

/* ---- the device's limits (bench_peak.c) ---- */

typedef struct bench_peaks {
  double copy_gbs;     /* device-to-device copy, bytes read + written per second / 1e9 */
  double fma_gflops;   /* multiply-adds, 2 flops each: the best of float4, float8, float16 */
  int fma_width;       /* the vector width that gave it */
  double sgemm_gflops; /* relcl's SGEMM at a large square shape (gemm_cpu on a CPU, CLBlast),
                        * the best of several in a row */
  int sgemm_n;
  /* the same SGEMM timed after each profiled step of the relative model, over those steps
   * (relcl-bench.c's profile_steps), side A's and --compare's side B's; 0: not measured */
  double sgemm_step_gflops, sgemm_step_gflops_b;
  /* the copy timed there too (after side A's steps); 0: not measured */
  double copy_step_gbs;
} bench_peaks;

/* The copy kernel of bench_peaks_measure on a queue of its own, over two buffers of `floats`
 * floats (bench_copy_floats: 64 MiB, 16 with --quick), to time again beside the step: init
 * builds it, time gives the best of reps copies in seconds (0, or 1 after printing why), gbs
 * the rate of a copy in s seconds (bytes read + written per second / 1e9). */
typedef struct bench_copy {
  cl_command_queue q;
  cl_program prog;
  cl_kernel k;
  cl_mem a, b;
  size_t floats;
} bench_copy;
static inline size_t bench_copy_floats(bool quick) {
  return quick ? ((size_t)1 << 22) : ((size_t)1 << 24);
}
int bench_copy_init(bench_copy *c, relcl_context *ctx, size_t floats);
int bench_copy_time(bench_copy *c, int reps, double *s);
double bench_copy_gbs(const bench_copy *c, double s);
void bench_copy_free(bench_copy *c);

/* relcl's SGEMM y = x W^T at n^3 (gemm_cpu's B^T on a CPU, CLBlast elsewhere), timed by
 * relcl's profiler (device time): init allocates and runs it once; ms times one call (the
 * context's profiling on; it resets the profile). 0, or 1 after printing why. */
typedef struct bench_sgemm {
  relcl_context *ctx;
  int n;
  cl_mem x, w, y;
} bench_sgemm;
int bench_sgemm_init(bench_sgemm *s, relcl_context *ctx, int n);
int bench_sgemm_ms(bench_sgemm *s, double *ms);
void bench_sgemm_free(bench_sgemm *s);

/* Measure the copy and FMA kernels (built here from source, on the context's device and a
 * queue of their own) and a large SGEMM through relcl_linear_forward. 0, or 1 after
 * printing why. */
int bench_peaks_measure(relcl_context *ctx, bool quick, bench_peaks *out);

/* ---- --compare, op by op (bench_ops.c) ---- */

typedef struct bench_ops_opts {
  int rows;           /* tokens of the linear layers */
  int linear[5][2];   /* (in, out) of each linear layer */
  int n_linear;
  int sentences, heads, len, head_dim, k; /* attention: relative self and cross */
  float dropout;
  int reps;
  bool quiet;
} bench_ops_opts;

/* The ops alternately on ctx_a and ctx_b, per kernel and GEMM shape side by side ("ops" in
 * out). 0, or 1 after printing why. */
int bench_ops_compare(relcl_context *ctx_a, relcl_context *ctx_b, const bench_ops_opts *o,
                      cJSON *out);

#endif
