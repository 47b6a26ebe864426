/* The context's kernel table (each kernel created on first use) and launching. */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

relcl_status relcl__kernel(relcl_context *ctx, const char *family, const char *name,
                           relcl__kernel_entry **out) {
  for (int i = 0; i < ctx->n_kernels; i++)
    if (strcmp(ctx->kernel[i].name, name) == 0) {
      *out = &ctx->kernel[i];
      return RELCL_OK;
    }
  int pi = relcl__program_index(family);
  if (pi < 0 || ctx->program[pi] == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "no kernel program family \"%s\"", family);
  if (ctx->n_kernels == RELCL__MAX_KERNELS)
    return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "too many kernels (raise RELCL__MAX_KERNELS)");
  cl_int err;
  relcl__kernel_entry *e = &ctx->kernel[ctx->n_kernels];
  e->kernel = clCreateKernel(ctx->program[pi], name, &err);
  if (err != CL_SUCCESS) return relcl__cl_fail(err, name);
  e->name = name;
  e->part = relcl__kernel_part(name);
  err = clGetKernelWorkGroupInfo(e->kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE,
                                 sizeof e->max_wg, &e->max_wg, NULL);
  if (err != CL_SUCCESS || e->max_wg == 0) e->max_wg = 1;
  ctx->n_kernels++;
  *out = e;
  return RELCL_OK;
}

size_t relcl__pow2_wg(size_t want, size_t limit) {
  size_t w = 1;
  while (w < want && w * 2 <= limit) w *= 2;
  return w;
}

/* PoCL compiles a kernel for the device at its first launch with each work-group size, and
 * sizes that follow the work (a power of two up to the work-items, for few rows) compiled
 * most kernels of decoding and of a batch's tail several times. Sapphire Rapids-class Xeon,
 * the demo's model and test set (relcl-translate, beam 4) from fresh caches: 97 kernels
 * built and 8.0-8.4 s of translating, against 1.35-1.46 s in later runs; with one size a
 * kernel (and relcl-translate's warm-up batch) 57 kernels and 1.76-1.86 s, the same
 * translations. In the item shape the work-items of a group only run one after the other,
 * and the number of groups is the same either way (one up to the limit, want / limit
 * rounded up past it): the work a thread gets does not change. */
size_t relcl__wg(const relcl_context *ctx, size_t want, size_t limit) {
  return relcl__pow2_wg(ctx->row_item ? SIZE_MAX : want, limit);
}

relcl_status relcl__enqueue(relcl_context *ctx, const relcl__kernel_entry *k,
                            const relcl__args *args, cl_uint dims, const size_t *global,
                            const size_t *local, cl_event *ev) {
  char what[160];
  if (args->err != CL_SUCCESS) {
    snprintf(what, sizeof what, "clSetKernelArg(%s, argument %u)", k->name, args->index);
    return relcl__cl_fail(args->err, what);
  }
  if (ev == NULL && ctx->span_first && *ctx->span_first == NULL)
    ev = ctx->span_first; /* the first command of a product that is being profiled */
  cl_int err = clEnqueueNDRangeKernel(ctx->queue, k->kernel, dims, NULL, global, local, 0, NULL,
                                      ev);
  if (err == CL_SUCCESS) return RELCL_OK;
  snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", k->name);
  return relcl__cl_fail(err, what);
}

static relcl_status launch(relcl_context *ctx, relcl__kernel_entry *k, const relcl__args *args,
                           cl_uint dims, const size_t *global, const size_t *local,
                           const char *name, const size_t shape[4]) {
  if (args->err == CL_SUCCESS)
    for (cl_uint i = 0; i < dims; i++)
      if (global[i] == 0) return RELCL_OK; /* nothing to do */
  cl_event ev, *slot = relcl__profile_slot(ctx, &ev);
  relcl_status st = relcl__enqueue(ctx, k, args, dims, global, local, slot);
  relcl__profile_event(ctx, name, k->part, shape, ev);
  return st;
}

relcl_status relcl__launch(relcl_context *ctx, relcl__kernel_entry *k, const relcl__args *args,
                           cl_uint dims, const size_t *global, const size_t *local) {
  return launch(ctx, k, args, dims, global, local, k->name, NULL);
}

relcl_status relcl__launch_product(relcl_context *ctx, relcl__kernel_entry *k,
                                   const relcl__args *args, cl_uint dims, const size_t *global,
                                   const size_t *local, size_t m, size_t n, size_t kk) {
  char name[96];
  snprintf(name, sizeof name, "%s %zux%zux%zu", k->name, m, n, kk);
  return launch(ctx, k, args, dims, global, local, name, (const size_t[4]){m, n, kk, 1});
}

relcl_status relcl__launch_rows(relcl_context *ctx, relcl__kernel_entry *k, relcl__args *a,
                                size_t rows, size_t width, int locals, bool item) {
  size_t limit = k->max_wg < 256 ? k->max_wg : 256, wg, global;
  if (item) {
    /* a work-group is a loop over its rows here: a few dozen rows amortize its start */
    wg = relcl__wg(ctx, rows, k->max_wg < 64 ? k->max_wg : 64);
    global = (rows + wg - 1) / wg * wg;
    for (int i = 0; i < locals; i++) RELCL__ARG_LOCAL(a, 4); /* unused in this shape */
  } else {
    wg = relcl__pow2_wg(width, limit);
    global = rows * wg;
    for (int i = 0; i < locals; i++) RELCL__ARG_LOCAL(a, wg * 4);
  }
  return relcl__launch(ctx, k, a, 1, &global, &wg);
}
