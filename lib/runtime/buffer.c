/* Device buffers: allocation, blocking transfers, fills, and the argument check every public
 * op makes of its buffers (relcl__check_buf). */
#include "flags.h" /* RELCL_FILL_RUN: shared with kernels/util.cl */
#include "internal.h"

#include <stdint.h>

static _Thread_local unsigned long check_buf_calls;

unsigned long relcl__check_buf_count(void) { return check_buf_calls; }

relcl_status relcl__check_buf(relcl_buf buf, size_t n, const char *what) {
  check_buf_calls++;
  if (buf.mem == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "%s is NULL", what);
  /* kernels index with 32-bit element offsets */
  if (n > UINT32_MAX || buf.offset > UINT32_MAX - n)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "%s: offset %zu + %zu elements exceeds 2^32 elements", what, buf.offset, n);
  size_t bytes = 0;
  cl_int err = clGetMemObjectInfo(buf.mem, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
  if (err != CL_SUCCESS) return relcl__cl_fail(err, what);
  if ((buf.offset + n) > bytes / 4)
    return relcl__fail(RELCL_ERR_BUFFER_TOO_SMALL,
                       "%s holds %zu elements past offset %zu, needs %zu", what,
                       bytes / 4 > buf.offset ? bytes / 4 - buf.offset : 0, buf.offset, n);
  return RELCL_OK;
}

relcl_status relcl_alloc(relcl_context *ctx, size_t n, cl_mem *out) {
  relcl__clear_error();
  if (ctx == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_alloc: ctx or out is NULL");
  if (n == 0) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_alloc: zero elements");
  if (n > ctx->max_alloc / 4)
    return relcl__fail(RELCL_ERR_OUT_OF_MEMORY,
                       "relcl_alloc: %zu bytes exceed the device's largest allocation (%llu)",
                       n * 4, (unsigned long long)ctx->max_alloc);
  cl_int err;
  *out = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, n * 4, NULL, &err);
  if (err != CL_SUCCESS) return relcl__cl_fail(err, "clCreateBuffer");
  relcl__memacct_track(ctx, *out, n * 4);
  return RELCL_OK;
}

relcl_status relcl__write(relcl_context *ctx, relcl_buf dst, const void *src, size_t n) {
  if (n == 0) return RELCL_OK;
  cl_event ev;
  cl_int err = clEnqueueWriteBuffer(ctx->queue, dst.mem, CL_TRUE, dst.offset * 4, n * 4, src, 0,
                                    NULL, relcl__profile_slot(ctx, &ev));
  relcl__profile_event(ctx, "write (host to device)", RELCL_PART_COPIES, NULL, ev);
  return err == CL_SUCCESS ? RELCL_OK : relcl__cl_fail(err, "clEnqueueWriteBuffer");
}

relcl_status relcl_write(relcl_context *ctx, relcl_buf dst, const void *src, size_t n) {
  relcl__clear_error();
  if (ctx == NULL || (src == NULL && n > 0))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_write: ctx or src is NULL");
  relcl_status st = relcl__check_buf(dst, n, "relcl_write destination");
  return st == RELCL_OK ? relcl__write(ctx, dst, src, n) : st;
}

relcl_status relcl__read(relcl_context *ctx, relcl_buf src, void *dst, size_t n) {
  if (n == 0) return RELCL_OK;
  cl_event ev;
  cl_int err = clEnqueueReadBuffer(ctx->queue, src.mem, CL_TRUE, src.offset * 4, n * 4, dst, 0,
                                   NULL, relcl__profile_slot(ctx, &ev));
  relcl__profile_event(ctx, "read (device to host)", RELCL_PART_COPIES, NULL, ev);
  return err == CL_SUCCESS ? RELCL_OK : relcl__cl_fail(err, "clEnqueueReadBuffer");
}

relcl_status relcl_read(relcl_context *ctx, relcl_buf src, void *dst, size_t n) {
  relcl__clear_error();
  if (ctx == NULL || (dst == NULL && n > 0))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_read: ctx or dst is NULL");
  relcl_status st = relcl__check_buf(src, n, "relcl_read source");
  return st == RELCL_OK ? relcl__read(ctx, src, dst, n) : st;
}

relcl_status relcl__fill(relcl_context *ctx, relcl_buf dst, float value, size_t n) {
  if (n == 0) return RELCL_OK;
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "util", "fill", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  cl_uint off = (cl_uint)dst.offset, count = (cl_uint)n;
  RELCL__ARG(&a, dst.mem);
  RELCL__ARG(&a, off);
  RELCL__ARG(&a, count);
  RELCL__ARG(&a, value);
  /* a run of RELCL_FILL_RUN elements a work-item in the item shape (util.cl) */
  const size_t items = ctx->row_item ? (n + RELCL_FILL_RUN - 1) / RELCL_FILL_RUN : n;
  size_t wg = ctx->row_item ? 1 : k->max_wg < 64 ? k->max_wg : 64;
  size_t global = (items + wg - 1) / wg * wg;
  return relcl__launch(ctx, k, &a, 1, &global, &wg);
}

relcl_status relcl_fill(relcl_context *ctx, relcl_buf dst, float value, size_t n) {
  relcl__clear_error();
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_fill: ctx is NULL");
  relcl_status st = relcl__check_buf(dst, n, "relcl_fill destination");
  return st == RELCL_OK ? relcl__fill(ctx, dst, value, n) : st;
}
