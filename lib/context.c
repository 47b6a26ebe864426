/* Device choice, context and queue, kernel lookup and launching, plain buffer helpers. */
#include "internal.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PLATFORMS = 16, MAX_DEVICES = 64 };

typedef struct device_list {
  int n_platforms;
  cl_platform_id platform[MAX_PLATFORMS];
  int n_devices[MAX_PLATFORMS];
  cl_device_id device[MAX_PLATFORMS][MAX_DEVICES];
} device_list;

static relcl_status list_devices(device_list *dl) {
  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(MAX_PLATFORMS, dl->platform, &np);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || np == 0)
    return relcl__fail(RELCL_ERR_NO_PLATFORM,
                       "no OpenCL platform found: install an OpenCL driver (for a CPU: "
                       "pocl-opencl-icd) and check with clinfo");
  if (err != CL_SUCCESS) return relcl__cl_fail(err, "clGetPlatformIDs");
  dl->n_platforms = (int)np;
  for (cl_uint p = 0; p < np; p++) {
    cl_uint nd = 0;
    err = clGetDeviceIDs(dl->platform[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, dl->device[p], &nd);
    dl->n_devices[p] = (err == CL_SUCCESS) ? (int)nd : 0; /* a platform may have none */
  }
  return RELCL_OK;
}

static void platform_name(cl_platform_id p, char *buf, size_t size) {
  if (clGetPlatformInfo(p, CL_PLATFORM_NAME, size, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
  buf[size - 1] = '\0';
}

static void device_name(cl_device_id d, char *buf, size_t size) {
  if (clGetDeviceInfo(d, CL_DEVICE_NAME, size, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
  buf[size - 1] = '\0';
}

static bool contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n) return true;
  }
  return n == 0;
}

static bool parse_index_pair(const char *s, int *p, int *d) {
  char *end;
  long a = strtol(s, &end, 10);
  if (end == s || *end != ':') return false;
  const char *s2 = end + 1;
  long b = strtol(s2, &end, 10);
  if (end == s2 || *end != '\0' || a < 0 || b < 0 || a > 1000 || b > 1000) return false;
  *p = (int)a;
  *d = (int)b;
  return true;
}

relcl_status relcl_device_find(const char *spec, int *platform_index, int *device_index) {
  relcl__clear_error();
  device_list dl;
  relcl_status st = list_devices(&dl);
  if (st != RELCL_OK) return st;
  char pn[256], dn[256];
  int p, d;
  if (spec == NULL || spec[0] == '\0') {
    for (p = 0; p < dl.n_platforms; p++)
      for (d = 0; d < dl.n_devices[p]; d++) {
        cl_device_type type = 0;
        clGetDeviceInfo(dl.device[p][d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
        if (type & CL_DEVICE_TYPE_GPU) goto found;
      }
    for (p = 0; p < dl.n_platforms; p++)
      if (dl.n_devices[p] > 0) {
        d = 0;
        goto found;
      }
  } else if (parse_index_pair(spec, &p, &d)) {
    if (p < dl.n_platforms && d < dl.n_devices[p]) goto found;
  } else {
    for (p = 0; p < dl.n_platforms; p++) {
      platform_name(dl.platform[p], pn, sizeof pn);
      for (d = 0; d < dl.n_devices[p]; d++) {
        device_name(dl.device[p][d], dn, sizeof dn);
        if (contains_nocase(pn, spec) || contains_nocase(dn, spec)) goto found;
      }
    }
  }
  {
    char list[4096] = "";
    size_t used = 0;
    for (p = 0; p < dl.n_platforms; p++) {
      platform_name(dl.platform[p], pn, sizeof pn);
      for (d = 0; d < dl.n_devices[p]; d++) {
        device_name(dl.device[p][d], dn, sizeof dn);
        int w = snprintf(list + used, sizeof list - used, "%s%d:%d \"%s / %s\"",
                         used ? ", " : "", p, d, pn, dn);
        if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
      }
    }
    return relcl__fail(RELCL_ERR_NO_DEVICE, "no OpenCL device matches \"%s\"; available: %s",
                       spec ? spec : "", used ? list : "none");
  }
found:
  *platform_index = p;
  *device_index = d;
  return RELCL_OK;
}

static relcl_status lookup(const char *spec, cl_platform_id *platform, cl_device_id *device) {
  int p, d;
  relcl_status st = relcl_device_find(spec, &p, &d);
  if (st != RELCL_OK) return st;
  device_list dl;
  st = list_devices(&dl);
  if (st != RELCL_OK) return st;
  *platform = dl.platform[p];
  *device = dl.device[p][d];
  return RELCL_OK;
}

relcl_status relcl_context_create(relcl_context **out, const char *device) {
  relcl__clear_error();
  if (out == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_context_create: out is NULL");
  *out = NULL;
  if (device == NULL) device = getenv("RELCL_DEVICE");
  relcl_context *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  relcl_status st = lookup(device, &ctx->platform, &ctx->device);
  if (st != RELCL_OK) goto fail;

  char pn[256], dn[256];
  platform_name(ctx->platform, pn, sizeof pn);
  device_name(ctx->device, dn, sizeof dn);
  snprintf(ctx->name, sizeof ctx->name, "%.250s / %.250s", pn, dn);
  clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof ctx->device_max_wg,
                  &ctx->device_max_wg, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ctx->local_mem,
                  &ctx->local_mem, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ctx->max_alloc,
                  &ctx->max_alloc, NULL);

  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
  ctx->cl = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    st = relcl__cl_fail(err, "clCreateContext");
    goto fail;
  }
  const char *prof = getenv("RELCL_PROFILE");
  ctx->profile = prof && prof[0] && strcmp(prof, "0") != 0;
  ctx->queue = clCreateCommandQueue(ctx->cl, ctx->device,
                                    ctx->profile ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
  if (err != CL_SUCCESS) {
    st = relcl__cl_fail(err, "clCreateCommandQueue");
    goto fail;
  }
  for (int i = 0; i < relcl__program_count(); i++) {
    st = relcl__program_build(ctx->cl, ctx->platform, ctx->device, i, true, &ctx->program[i]);
    if (st != RELCL_OK) goto fail;
  }
  relcl__tuning_apply(ctx);
  relcl__clear_error();
  *out = ctx;
  return RELCL_OK;
fail:
  relcl_context_destroy(ctx);
  return st;
}

static int by_time(const void *a, const void *b) {
  double x = ((const struct relcl__prof *)a)->ms, y = ((const struct relcl__prof *)b)->ms;
  return (x < y) - (x > y);
}

void relcl__profile_event(relcl_context *ctx, const char *name, cl_event ev) {
  cl_ulong t0 = 0, t1 = 0;
  if (clWaitForEvents(1, &ev) == CL_SUCCESS &&
      clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) ==
          CL_SUCCESS &&
      clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) ==
          CL_SUCCESS) {
    int i = 0;
    while (i < ctx->n_prof && strcmp(ctx->prof[i].name, name) != 0) i++;
    if (i == ctx->n_prof && i < (int)(sizeof ctx->prof / sizeof *ctx->prof)) {
      snprintf(ctx->prof[i].name, sizeof ctx->prof[i].name, "%s", name);
      ctx->n_prof++;
    }
    if (i < ctx->n_prof) {
      ctx->prof[i].ms += (double)(t1 - t0) * 1e-6;
      ctx->prof[i].calls++;
    }
  }
  clReleaseEvent(ev);
}

static void print_profile(relcl_context *ctx) {
  qsort(ctx->prof, (size_t)ctx->n_prof, sizeof *ctx->prof, by_time);
  double total = 0;
  for (int i = 0; i < ctx->n_prof; i++) total += ctx->prof[i].ms;
  fprintf(stderr, "relcl profile (RELCL_PROFILE): %.1f ms of device time\n", total);
  for (int i = 0; i < ctx->n_prof; i++)
    fprintf(stderr, "  %10.1f ms %5.1f%% %8ld calls  %s\n", ctx->prof[i].ms,
            100.0 * ctx->prof[i].ms / (total > 0 ? total : 1), ctx->prof[i].calls,
            ctx->prof[i].name);
}

void relcl_context_destroy(relcl_context *ctx) {
  if (ctx == NULL) return;
  if (ctx->queue) clFinish(ctx->queue);
  if (ctx->profile && ctx->n_prof) print_profile(ctx); /* asked for: the one print in lib */
  relcl__pool_destroy(&ctx->pool);
  for (int i = 0; i < ctx->n_kernels; i++) clReleaseKernel(ctx->kernel[i].kernel);
  for (int i = 0; i < RELCL__MAX_PROGRAMS; i++)
    if (ctx->program[i]) clReleaseProgram(ctx->program[i]);
  if (ctx->queue) clReleaseCommandQueue(ctx->queue);
  if (ctx->cl) clReleaseContext(ctx->cl);
  free(ctx);
}

cl_context relcl_context_cl(const relcl_context *ctx) { return ctx->cl; }
cl_command_queue relcl_context_queue(const relcl_context *ctx) { return ctx->queue; }
cl_device_id relcl_context_device(const relcl_context *ctx) { return ctx->device; }
const char *relcl_context_device_name(const relcl_context *ctx) { return ctx->name; }

relcl_status relcl_finish(relcl_context *ctx) {
  relcl__clear_error();
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_finish: ctx is NULL");
  cl_int err = clFinish(ctx->queue);
  return err == CL_SUCCESS ? RELCL_OK : relcl__cl_fail(err, "clFinish");
}

relcl_status relcl_build_check(cl_platform_id platform, cl_device_id device) {
  relcl__clear_error();
  cl_int err;
  cl_context cl = clCreateContext(
      (cl_context_properties[]){CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0}, 1,
      &device, NULL, NULL, &err);
  if (err != CL_SUCCESS) return relcl__cl_fail(err, "clCreateContext");
  relcl_status st = RELCL_OK;
  for (int i = 0; i < relcl__program_count() && st == RELCL_OK; i++) {
    cl_program prog = NULL;
    st = relcl__program_build(cl, platform, device, i, false, &prog);
    if (prog) clReleaseProgram(prog);
  }
  clReleaseContext(cl);
  return st;
}

/* ---- kernels ---- */

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

relcl_status relcl__launch(relcl_context *ctx, relcl__kernel_entry *k, const relcl__args *args,
                           cl_uint dims, const size_t *global, const size_t *local) {
  if (args->err != CL_SUCCESS) {
    char what[160];
    snprintf(what, sizeof what, "clSetKernelArg(%s, argument %u)", k->name, args->index - 1);
    return relcl__cl_fail(args->err, what);
  }
  for (cl_uint i = 0; i < dims; i++)
    if (global[i] == 0) return RELCL_OK; /* nothing to do */
  cl_event ev = NULL;
  cl_int err = clEnqueueNDRangeKernel(ctx->queue, k->kernel, dims, NULL, global, local, 0, NULL,
                                      ctx->profile ? &ev : NULL);
  if (err == CL_SUCCESS && ev) relcl__profile_event(ctx, k->name, ev);
  if (err != CL_SUCCESS) {
    char what[160];
    snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", k->name);
    return relcl__cl_fail(err, what);
  }
  return RELCL_OK;
}

/* ---- buffers ---- */

relcl_status relcl__check_buf(relcl_buf buf, size_t n, const char *what) {
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
  return err == CL_SUCCESS ? RELCL_OK : relcl__cl_fail(err, "clCreateBuffer");
}

relcl_status relcl_write(relcl_context *ctx, relcl_buf dst, const void *src, size_t n) {
  relcl__clear_error();
  if (ctx == NULL || (src == NULL && n > 0))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_write: ctx or src is NULL");
  relcl_status st = relcl__check_buf(dst, n, "relcl_write destination");
  if (st != RELCL_OK || n == 0) return st;
  cl_int err = clEnqueueWriteBuffer(ctx->queue, dst.mem, CL_TRUE, dst.offset * 4, n * 4, src, 0,
                                    NULL, NULL);
  return err == CL_SUCCESS ? RELCL_OK : relcl__cl_fail(err, "clEnqueueWriteBuffer");
}

relcl_status relcl_read(relcl_context *ctx, relcl_buf src, void *dst, size_t n) {
  relcl__clear_error();
  if (ctx == NULL || (dst == NULL && n > 0))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_read: ctx or dst is NULL");
  relcl_status st = relcl__check_buf(src, n, "relcl_read source");
  if (st != RELCL_OK || n == 0) return st;
  cl_int err = clEnqueueReadBuffer(ctx->queue, src.mem, CL_TRUE, src.offset * 4, n * 4, dst, 0,
                                   NULL, NULL);
  return err == CL_SUCCESS ? RELCL_OK : relcl__cl_fail(err, "clEnqueueReadBuffer");
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
  size_t wg = k->max_wg < 64 ? k->max_wg : 64;
  size_t global = (n + wg - 1) / wg * wg;
  return relcl__launch(ctx, k, &a, 1, &global, &wg);
}

relcl_status relcl_fill(relcl_context *ctx, relcl_buf dst, float value, size_t n) {
  relcl__clear_error();
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_fill: ctx is NULL");
  relcl_status st = relcl__check_buf(dst, n, "relcl_fill destination");
  return st == RELCL_OK ? relcl__fill(ctx, dst, value, n) : st;
}
