/* relcl-bench: the device's own limits, to say how far relcl's kernels and GEMMs are from
 * them. A copy kernel gives memory bandwidth, a kernel of independent fused multiply-adds the
 * arithmetic rate; both are built here from source (they are not relcl's) and timed with
 * OpenCL events on a queue of their own. The SGEMM figure is relcl's own GEMM at a large
 * square shape, as a step runs it: gemm_cpu on a CPU, else CLBlast with whatever tuning the
 * context applied. */
#include "bench.h"
#include "relcl_layers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *peak_source =
    "__kernel void bench_copy(__global const float4 *src, __global float4 *dst) {\n"
    "  size_t i = get_global_id(0);\n"
    "  dst[i] = src[i];\n"
    "}\n"
    "/* 8 independent chains of fma on floatW vectors: enough parallelism per work-item to\n"
    " * fill the pipelines; the result is stored so that nothing is optimized away */\n"
    "#define BENCH_FMA(W)                                                                \\\n"
    "__kernel void bench_fma##W(__global float *out, float a, float b, int iters) {      \\\n"
    "  float##W x0 = (float##W)(get_global_id(0) * 1e-9f), x1 = x0 + 0.1f, x2 = x0 + 0.2f, \\\n"
    "         x3 = x0 + 0.3f, x4 = x0 + 0.4f, x5 = x0 + 0.5f, x6 = x0 + 0.6f, x7 = x0 + 0.7f; \\\n"
    "  for (int i = 0; i < iters; i++) {                                                 \\\n"
    "    x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);  \\\n"
    "    x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);  \\\n"
    "  }                                                                                 \\\n"
    "  float##W s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;                               \\\n"
    "  out[get_global_id(0)] = dot(s.s0123, (float4)(1.0f));                             \\\n"
    "}\n"
    "BENCH_FMA(4)\n"
    "BENCH_FMA(8)\n"
    "BENCH_FMA(16)\n";

/* The FMA kernels' vector widths: the rate is the best of them. On PoCL the explicit vector
 * is the SIMD register: float4 alone measured 130 GFLOP/s on the Zen 5 EPYC, whose AVX-512
 * units do 510-530 with float16 (and OpenBLAS's SGEMM 440 there), so a float4-only peak made
 * every GEMM look 4 times closer to the limit than it was. */
static const int fma_widths[] = {4, 8, 16};
enum { FMA_CHAINS = 8 };

/* Best device time in seconds of `reps` launches of kernel over global work-items. */
static int time_kernel(cl_command_queue q, cl_kernel k, size_t global, int reps, double *best) {
  *best = 1e30;
  for (int r = 0; r < reps; r++) {
    cl_event ev = NULL;
    cl_int err = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, &ev);
    if (err == CL_SUCCESS) err = clWaitForEvents(1, &ev);
    cl_ulong t0 = 0, t1 = 0;
    if (err == CL_SUCCESS)
      err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    if (err == CL_SUCCESS)
      err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    if (ev) clReleaseEvent(ev);
    if (err != CL_SUCCESS) {
      fprintf(stderr, "relcl-bench: device peak kernel failed (OpenCL error %d)\n", (int)err);
      return 1;
    }
    double s = (double)(t1 - t0) * 1e-9;
    if (s > 0 && s < *best) *best = s;
  }
  return 0;
}

/* relcl's SGEMM (y = x W^T, n x n x n), for timing with relcl's profiler: device time only. */
int bench_sgemm_init(bench_sgemm *s, relcl_context *ctx, int n) {
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  s->n = n;
  const size_t nn = (size_t)n * (size_t)n;
  relcl_status st;
  if ((st = bench_alloc_fill(ctx, nn, 0.5f, &s->x)) != RELCL_OK ||
      (st = bench_alloc_fill(ctx, nn, 0.25f, &s->w)) != RELCL_OK ||
      (st = relcl_alloc(ctx, nn, &s->y)) != RELCL_OK ||
      /* one untimed call: CLBlast compiles its kernel for the shape */
      (st = relcl_linear_forward(ctx, n, n, n, relcl_buf_at(s->x, 0), relcl_buf_at(s->w, 0),
                                 RELCL_BUF_NONE, relcl_buf_at(s->y, 0))) != RELCL_OK ||
      (st = relcl_finish(ctx)) != RELCL_OK) {
    fprintf(stderr, "relcl-bench: SGEMM %d^3: %s: %s\n", n, relcl_status_str(st),
            relcl_last_error());
    bench_sgemm_free(s);
    return 1;
  }
  return 0;
}

int bench_sgemm_ms(bench_sgemm *s, double *ms) {
  relcl_profile_summary sum;
  relcl_status st;
  if ((st = relcl_profile_reset(s->ctx)) != RELCL_OK ||
      (st = relcl_linear_forward(s->ctx, s->n, s->n, s->n, relcl_buf_at(s->x, 0),
                                 relcl_buf_at(s->w, 0), RELCL_BUF_NONE,
                                 relcl_buf_at(s->y, 0))) != RELCL_OK ||
      (st = relcl_finish(s->ctx)) != RELCL_OK ||
      (st = relcl_profile_summary_get(s->ctx, &sum)) != RELCL_OK) {
    fprintf(stderr, "relcl-bench: SGEMM %d^3: %s: %s\n", s->n, relcl_status_str(st),
            relcl_last_error());
    return 1;
  }
  *ms = sum.part_ms[RELCL_PART_CONTENT_GEMM];
  return 0;
}

void bench_sgemm_free(bench_sgemm *s) {
  cl_mem m[] = {s->x, s->w, s->y};
  for (int i = 0; i < 3; i++)
    if (m[i]) clReleaseMemObject(m[i]);
  s->x = s->w = s->y = NULL;
}

/* The best of reps SGEMMs in a row. */
static int time_sgemm(relcl_context *ctx, int n, int reps, double *gflops) {
  bench_sgemm s;
  if (relcl_profile_enable(ctx, 1) != RELCL_OK) {
    fprintf(stderr, "relcl-bench: SGEMM peak: %s\n", relcl_last_error());
    return 1;
  }
  if (bench_sgemm_init(&s, ctx, n)) return 1;
  double best = 1e30, ms;
  int rc = 0;
  for (int r = 0; r < reps && rc == 0; r++) {
    rc = bench_sgemm_ms(&s, &ms);
    if (rc == 0 && ms > 0 && ms < best) best = ms;
  }
  if (rc == 0) *gflops = bench_cube_gflops(n, best);
  bench_sgemm_free(&s);
  if (relcl_profile_enable(ctx, 0) != RELCL_OK) rc = 1;
  return rc;
}

/* The copy kernel on a queue of its own over two buffers of `floats` floats, for timing
 * alone (bench_peaks_measure) and beside the step (relcl-bench.c's profile_steps) */
int bench_copy_init(bench_copy *c, relcl_context *ctx, size_t floats) {
  memset(c, 0, sizeof *c);
  cl_context cl = relcl_context_cl(ctx);
  cl_device_id dev = relcl_context_device(ctx);
  cl_int err;
  c->floats = floats;
  c->q = clCreateCommandQueue(cl, dev, CL_QUEUE_PROFILING_ENABLE, &err);
  if (err == CL_SUCCESS) c->prog = clCreateProgramWithSource(cl, 1, &peak_source, NULL, &err);
  if (err == CL_SUCCESS) err = clBuildProgram(c->prog, 1, &dev, "", NULL, NULL);
  if (err == CL_SUCCESS) c->k = clCreateKernel(c->prog, "bench_copy", &err);
  if (err == CL_SUCCESS) c->a = clCreateBuffer(cl, CL_MEM_READ_WRITE, floats * 4, NULL, &err);
  if (err == CL_SUCCESS) c->b = clCreateBuffer(cl, CL_MEM_READ_WRITE, floats * 4, NULL, &err);
  const float zero = 0.0f;
  if (err == CL_SUCCESS)
    err = clEnqueueFillBuffer(c->q, c->a, &zero, sizeof zero, 0, floats * 4, 0, NULL, NULL);
  if (err == CL_SUCCESS) err = clSetKernelArg(c->k, 0, sizeof c->a, &c->a);
  if (err == CL_SUCCESS) err = clSetKernelArg(c->k, 1, sizeof c->b, &c->b);
  if (err == CL_SUCCESS) err = clFinish(c->q);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "relcl-bench: copy kernel: OpenCL error %d\n", (int)err);
    bench_copy_free(c);
    return 1;
  }
  return 0;
}

int bench_copy_time(bench_copy *c, int reps, double *s) {
  return time_kernel(c->q, c->k, c->floats / 4, reps, s);
}

double bench_copy_gbs(const bench_copy *c, double s) {
  return 2.0 * (double)c->floats * 4 / s * 1e-9;
}

void bench_copy_free(bench_copy *c) {
  if (c->a) clReleaseMemObject(c->a);
  if (c->b) clReleaseMemObject(c->b);
  if (c->k) clReleaseKernel(c->k);
  if (c->prog) clReleaseProgram(c->prog);
  if (c->q) clReleaseCommandQueue(c->q);
  memset(c, 0, sizeof *c);
}

int bench_peaks_measure(relcl_context *ctx, bool quick, bench_peaks *out) {
  cl_context cl = relcl_context_cl(ctx);
  cl_device_id dev = relcl_context_device(ctx);
  cl_int err;
  cl_command_queue q = NULL;
  cl_program prog = NULL;
  cl_kernel kfma[3] = {NULL, NULL, NULL};
  cl_mem b = NULL;
  int rc = 1;
  const size_t fma_items = quick ? ((size_t)1 << 14) : ((size_t)1 << 16);
  const int iters = 256, reps = quick ? 2 : 5;

  q = clCreateCommandQueue(cl, dev, CL_QUEUE_PROFILING_ENABLE, &err);
  if (err != CL_SUCCESS) goto cl_fail;
  prog = clCreateProgramWithSource(cl, 1, &peak_source, NULL, &err);
  if (err != CL_SUCCESS) goto cl_fail;
  if ((err = clBuildProgram(prog, 1, &dev, "", NULL, NULL)) != CL_SUCCESS) goto cl_fail;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "bench_fma%d", fma_widths[i]);
    kfma[i] = clCreateKernel(prog, name, &err);
    if (err != CL_SUCCESS) goto cl_fail;
  }
  b = clCreateBuffer(cl, CL_MEM_READ_WRITE, fma_items * 4, NULL, &err);
  if (err != CL_SUCCESS) goto cl_fail;
  float fa = 0.999f, fb = 0.001f;
  for (int i = 0; i < 3; i++)
    if ((err = clSetKernelArg(kfma[i], 0, sizeof b, &b)) != CL_SUCCESS ||
        (err = clSetKernelArg(kfma[i], 1, sizeof fa, &fa)) != CL_SUCCESS ||
        (err = clSetKernelArg(kfma[i], 2, sizeof fb, &fb)) != CL_SUCCESS ||
        (err = clSetKernelArg(kfma[i], 3, sizeof iters, &iters)) != CL_SUCCESS)
      goto cl_fail;
  double t;
  bench_copy copy;
  if (bench_copy_init(&copy, ctx, bench_copy_floats(quick))) goto done;
  const int copy_failed = bench_copy_time(&copy, reps + 1, &t);
  if (!copy_failed) out->copy_gbs = bench_copy_gbs(&copy, t);
  bench_copy_free(&copy);
  if (copy_failed) goto done;
  out->fma_gflops = 0;
  for (int i = 0; i < 3; i++) {
    if (time_kernel(q, kfma[i], fma_items, reps + 1, &t)) goto done;
    double g = (double)fma_items * iters * FMA_CHAINS * fma_widths[i] * 2 / t * 1e-9;
    if (g > out->fma_gflops) out->fma_gflops = g, out->fma_width = fma_widths[i];
  }
  out->sgemm_n = quick ? 256 : 1024;
  /* the best of twice as many: on a shared 2-core machine single products of 1024^3 ranged
   * from 27 to 48 GFLOP/s in one sitting (Zen 1, PoCL), and the GEMM table's %SGEMM column
   * is relative to this */
  if (time_sgemm(ctx, out->sgemm_n, 2 * reps, &out->sgemm_gflops)) goto done;
  rc = 0;
  goto done;
cl_fail:
  fprintf(stderr, "relcl-bench: device peak kernels: OpenCL error %d\n", (int)err);
done:
  if (b) clReleaseMemObject(b);
  for (int i = 0; i < 3; i++)
    if (kfma[i]) clReleaseKernel(kfma[i]);
  if (prog) clReleaseProgram(prog);
  if (q) clReleaseCommandQueue(q);
  return rc;
}
