/* Small helpers shared by the test programs: deterministic data, device upload and
 * download, error measures, and the pass/fail tally every test prints at its end. */
#ifndef RELCL_TESTUTIL_H
#define RELCL_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relcl.h"
#include "relcl_model.h"

static int tu_passed, tu_failed;

/* Record one check, print its line; returns ok. */
static inline int __attribute__((format(printf, 2, 3))) tu_check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (ok)
    tu_passed++;
  else
    tu_failed++;
  return ok;
}

/* The closing line CI reads, and the exit status. A run in which no check ran fails: a
 * filter that matches nothing (`--case typo`) or a skipped section must not pass as green. */
static inline int tu_finish(void) {
  if (tu_passed + tu_failed == 0) {
    printf("FAIL no check ran\n");
    tu_failed++;
  }
  printf("%d passed, %d failed\n", tu_passed, tu_failed);
  return tu_failed ? 1 : 0;
}

static inline void tu_die_status(relcl_status st, const char *what) {
  fprintf(stderr, "%s: %s: %s\n", what, relcl_status_str(st), relcl_last_error());
  exit(1);
}

#define TU_OK(call)                                  \
  do {                                               \
    relcl_status tu_st_ = (call);                    \
    if (tu_st_ != RELCL_OK) tu_die_status(tu_st_, #call); \
  } while (0)

/* splitmix64: portable, seedable; values uniform in [-1, 1). */
static inline uint64_t tu_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline void tu_fill(float *x, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((double)(tu_next(&seed) >> 11) * 0x1p-52 - 1.0);
}

static inline float *tu_alloc_host(size_t n) {
  float *p = calloc(n ? n : 1, sizeof *p);
  if (p == NULL) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  return p;
}

/* Device copy of host data (n floats). */
static inline cl_mem tu_upload(relcl_context *ctx, const void *x, size_t n) {
  cl_mem m;
  TU_OK(relcl_alloc(ctx, n ? n : 1, &m));
  if (n) TU_OK(relcl_write(ctx, relcl_buf_at(m, 0), x, n));
  return m;
}

static inline float *tu_download(relcl_context *ctx, cl_mem m, size_t n) {
  float *x = tu_alloc_host(n);
  TU_OK(relcl_read(ctx, relcl_buf_at(m, 0), x, n));
  return x;
}

/* The larger of two errors, NaN if either is: fmax and > would drop a NaN, and a check of
 * the result would pass. */
static inline double tu_worse(double a, double b) {
  return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

/* max |a - b| / max(max |b|, floor): the error relative to the tensor's scale. */
static inline double tu_rel_err(const float *a, const double *b, size_t n, double floor_) {
  double num = 0.0, den = floor_;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]);
    if (isnan(e)) return NAN; /* a NaN on either side fails (a later entry must not hide it) */
    if (e > num) num = e;
    if (fabs(b[i]) > den) den = fabs(b[i]);
  }
  return num / den;
}

/* The very small model of the whole-model tests (test_model.c, test_model_ref.c): vocab 11,
 * d_model 8, 2 heads, d_ff 16, 1+1 layers, k = 2, otherwise the tiny preset. */
static inline relcl_model_config tu_small_model_config(void) {
  relcl_model_config c = *relcl_model_preset("tiny");
  c.vocab = 11;
  c.enc_layers = c.dec_layers = 1;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.max_rel = 2;
  c.max_length = 16;
  return c;
}

/* A relcl tuning file (lib/runtime/tuning.c) for the device named so, with `kernels` (the
 * JSON text of its "kernels" object) and, when cpu is not NULL, the CPU model. */
static inline void tu_write_tuning(const char *path, const char *device, const char *driver,
                                   const char *platform, const char *type, const char *cpu,
                                   const char *kernels) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  fprintf(f, "{\"device\": \"%s\", \"driver\": \"%s\", \"platform\": \"%s\", "
             "\"device_type\": \"%s\", ",
          device, driver, platform, type);
  if (cpu) fprintf(f, "\"cpu\": \"%s\", ", cpu);
  fprintf(f, "\"kernels\": %s}\n", kernels);
  fclose(f);
}

static inline relcl_context *tu_context(void) {
  relcl_context *ctx = NULL;
  TU_OK(relcl_context_create(&ctx, NULL));
  return ctx;
}

/* Under RELCL_CPU_VEC (test/meson.build's _vec runs: each CPU vector width's kernels and
 * product choices on whatever CPU runs the suite), that the context took that width; width
 * is the context's (relcl__cpu_width, not public). */
static inline void tu_check_width(int width) {
  const char *env = getenv("RELCL_CPU_VEC");
  printf("CPU kernels: %d floats a vector\n", width);
  if (env && env[0])
    tu_check(width == atoi(env), "RELCL_CPU_VEC=%s: the context's CPU kernels take %d floats",
             env, width);
}

/* Tests of where kernels come from (the binary cache, RELCL_KERNEL_DIR): a small attention
 * call on a fresh context whose result must not depend on that; the sum of its outputs, NAN
 * when no context could be made (the reason is printed). */
static inline float tu_attn_probe(void) {
  relcl_context *ctx;
  if (relcl_context_create(&ctx, NULL) != RELCL_OK) {
    printf("     context: %s\n", relcl_last_error());
    return NAN;
  }
  float x[64];
  tu_fill(x, 64, 3);
  cl_mem m = tu_upload(ctx, x, 64), z;
  TU_OK(relcl_alloc(ctx, 16, &z));
  relcl_attn_desc d = relcl_attn_desc_self(1, 1, 4, 4, 2);
  TU_OK(relcl_attn_forward(ctx, &d, relcl_buf_at(m, 0), relcl_buf_at(m, 16), relcl_buf_at(m, 32),
                           relcl_buf_at(m, 40), relcl_buf_at(m, 44), RELCL_BUF_NONE,
                           relcl_buf_at(z, 0), RELCL_BUF_NONE));
  float out[16];
  TU_OK(relcl_read(ctx, relcl_buf_at(z, 0), out, 16));
  float sum = 0;
  for (int i = 0; i < 16; i++) sum += out[i];
  clReleaseMemObject(m);
  clReleaseMemObject(z);
  relcl_context_destroy(ctx);
  return sum;
}

#endif
