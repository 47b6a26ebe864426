/* Device choice, context and queue, kernel lookup and launching, plain buffer helpers. */
#include "internal.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PLATFORMS = 16, MAX_DEVICES = 64 };

/* relcl contexts alive in the process: when the last one goes, CLBlast's program cache goes
 * with it (relcl_context_destroy) */
static atomic_int live_contexts;

/* A zeroed context, counted among the live ones (NULL: out of host memory). */
static relcl_context *context_new(void) {
  relcl_context *ctx = calloc(1, sizeof *ctx);
  if (ctx != NULL) atomic_fetch_add(&live_contexts, 1);
  return ctx;
}


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

static void platform_vendor(cl_platform_id p, char *buf, size_t size) {
  if (clGetPlatformInfo(p, CL_PLATFORM_VENDOR, size, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
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
  char pn[256], pv[256], dn[256];
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
    /* the vendor too: PoCL's platform is "Portable Computing Language", its vendor "The
     * pocl project", and users write RELCL_DEVICE=pocl */
    for (p = 0; p < dl.n_platforms; p++) {
      platform_name(dl.platform[p], pn, sizeof pn);
      platform_vendor(dl.platform[p], pv, sizeof pv);
      for (d = 0; d < dl.n_devices[p]; d++) {
        device_name(dl.device[p][d], dn, sizeof dn);
        if (contains_nocase(pn, spec) || contains_nocase(pv, spec) || contains_nocase(dn, spec))
          goto found;
      }
    }
  }
  {
    char list[4096] = "";
    size_t used = 0;
    for (p = 0; p < dl.n_platforms; p++) {
      platform_name(dl.platform[p], pn, sizeof pn);
      platform_vendor(dl.platform[p], pv, sizeof pv);
      for (d = 0; d < dl.n_devices[p]; d++) {
        device_name(dl.device[p][d], dn, sizeof dn);
        int w = snprintf(list + used, sizeof list - used, "%s%d:%d \"%s (%s) / %s\"",
                         used ? ", " : "", p, d, pn, pv, dn);
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

/* A choice between two ways of running something, `cpu` (*out true) on a CPU device and
 * `other` elsewhere, or what the environment variable `var` says, so that the tests run both
 * on one device; a bad value fails at creation naming it. A device of unknown type gets
 * `other`, which is right everywhere and only slower on a CPU. Three such choices:
 *  - the shape of the row kernels (kernels/common.cl), RELCL_ROW_KERNELS=item|group: a
 *    work-item per row on a CPU, whose OpenCL driver runs a work-group as loops cut at every
 *    barrier (PoCL), a work-group per row elsewhere;
 *  - who computes the batched per-head products (gemm.c), RELCL_HEAD_GEMM=relcl|clblast:
 *    relcl's kernels (kernels/gemm.cl) on a CPU, where they run them 2.5 times faster and
 *    more than CLBlast's direct kernel, CLBlast elsewhere;
 *  - who computes the single products (gemm.c), RELCL_CPU_GEMM=relcl|clblast: relcl's
 *    gemm_cpu on a CPU, 2 to 5 times CLBlast's tuned Xgemm through PoCL, CLBlast elsewhere;
 *  - attention's forward, RELCL_ATTN=fused|apart: on a CPU one kernel a head where the row
 *    kernels are items and relcl runs the products (lib/ops/attention.c), apart elsewhere. */
static relcl_status cpu_choice(const relcl_context *ctx, const char *var, const char *cpu,
                               const char *other, bool *out) {
  const char *env = getenv(var);
  if (env && env[0]) {
    if (strcmp(env, cpu) != 0 && strcmp(env, other) != 0)
      return relcl__fail(RELCL_ERR_INVALID_ARG,
                         "%s=%s: expected %s or %s (unset: %s on a CPU, %s on other devices)",
                         var, env, cpu, other, cpu, other);
    *out = strcmp(env, cpu) == 0;
    return RELCL_OK;
  }
  cl_device_type type = 0;
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS)
    type = 0;
  *out = (type & CL_DEVICE_TYPE_CPU) != 0;
  return RELCL_OK;
}

bool relcl__row_item(const relcl_context *ctx) { return ctx->row_item; }

bool relcl__own_products(const relcl_context *ctx) { return relcl__own_products_in(ctx); }

bool relcl__wgrad_local(const relcl_context *ctx) { return ctx->gemm_at; }

bool relcl__attn_fused(const relcl_context *ctx) {
  return ctx->attn_fused && ctx->row_item && relcl__own_products_in(ctx);
}

int relcl__cpu_width(const relcl_context *ctx) { return ctx->cpu_vec; }

/* RELCL_CPU_VEC, the CPU kernels' vector width (program.c's relcl__cpu_vec): unset, 4, 8 or
 * 16, else an error naming it */
static relcl_status cpu_vec_check(void) {
  if (relcl__cpu_vec_env() >= 0) return RELCL_OK;
  return relcl__fail(RELCL_ERR_INVALID_ARG,
                     "RELCL_CPU_VEC=%s: expected 4, 8 or 16 (unset: the device's native float "
                     "vector width)",
                     getenv("RELCL_CPU_VEC"));
}

/* What every context needs once its device, cl_context and queue are known: the device's
 * name and limits, the row kernels' shape, every kernel program (from the binary cache or
 * built) and CLBlast's tuning. Building every program here reports a build failure at
 * creation. */
static relcl_status setup(relcl_context *ctx) {
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
  cl_uint align_bits = 0;
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                      &align_bits, NULL) == CL_SUCCESS)
    ctx->sub_align = align_bits / 8;
  relcl_status st = cpu_choice(ctx, "RELCL_ROW_KERNELS", "item", "group", &ctx->row_item);
  if (st == RELCL_OK)
    st = cpu_choice(ctx, "RELCL_HEAD_GEMM", "relcl", "clblast", &ctx->gemm_heads);
  if (st == RELCL_OK)
    st = cpu_choice(ctx, "RELCL_CPU_GEMM", "relcl", "clblast", &ctx->gemm_cpu);
  if (st == RELCL_OK) st = cpu_choice(ctx, "RELCL_ATTN", "fused", "apart", &ctx->attn_fused);
  if (st == RELCL_OK) st = cpu_choice(ctx, "RELCL_WGRAD", "local", "copy", &ctx->wgrad_local);
  if (st == RELCL_OK) st = cpu_vec_check();
  ctx->cpu_vec = relcl__cpu_vec(ctx->device);
  ctx->gemm_at =
      ctx->gemm_cpu && ctx->wgrad_local && relcl__cpu_at(ctx->device, ctx->row_item);
  ctx->cpu_l2 = relcl__host_l2();
  if (st != RELCL_OK) return st;
  for (int i = 0; i < relcl__program_count(); i++) {
    st = relcl__program_build(ctx->cl, ctx->platform, ctx->device, i, ctx->row_item, true,
                              &ctx->program[i]);
    if (st != RELCL_OK) return st;
  }
  relcl__tuning_apply(ctx);
  return RELCL_OK;
}

static bool profile_requested(void) {
  const char *prof = getenv("RELCL_PROFILE");
  return prof && prof[0] && strcmp(prof, "0") != 0;
}

relcl_status relcl_context_create(relcl_context **out, const char *device) {
  relcl__clear_error();
  if (out == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_context_create: out is NULL");
  *out = NULL;
  if (device == NULL) device = getenv("RELCL_DEVICE");
  relcl_context *ctx = context_new();
  if (ctx == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  relcl_status st = lookup(device, &ctx->platform, &ctx->device);
  if (st != RELCL_OK) goto fail;

  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
  ctx->cl = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    st = relcl__cl_fail(err, "clCreateContext");
    goto fail;
  }
  if ((st = relcl__memacct_create(&ctx->mem)) != RELCL_OK) goto fail;
  ctx->profile = ctx->profile_print = profile_requested();
  ctx->queue_profiling = ctx->profile;
  ctx->queue = clCreateCommandQueue(ctx->cl, ctx->device,
                                    ctx->profile ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
  if (err != CL_SUCCESS) {
    st = relcl__cl_fail(err, "clCreateCommandQueue");
    goto fail;
  }
  if ((st = setup(ctx)) != RELCL_OK) goto fail;
  relcl__clear_error();
  *out = ctx;
  return RELCL_OK;
fail:
  relcl_context_destroy(ctx);
  return st;
}

relcl_status relcl_context_create_from_cl(relcl_context **out, cl_context cl,
                                          cl_command_queue queue) {
  relcl__clear_error();
  static const char fn[] = "relcl_context_create_from_cl";
  if (out == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: out is NULL", fn);
  *out = NULL;
  if (cl == NULL || queue == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: cl_context or cl_command_queue is NULL", fn);
  cl_context qcl = NULL;
  cl_command_queue_properties qprops = 0;
  cl_device_id device = NULL;
  cl_platform_id platform = NULL;
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qcl, &qcl, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof device, &device, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qprops, &qprops, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
  if (err != CL_SUCCESS) return relcl__cl_fail(err, "relcl_context_create_from_cl: the queue");
  if (qcl != cl)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: the queue belongs to another cl_context", fn);
  /* relcl's calls rely on in-order execution: each reads what the one before wrote */
  if (qprops & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: the queue must be in order", fn);

  relcl_context *ctx = context_new();
  if (ctx == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  ctx->borrowed = true;
  ctx->cl = cl;
  ctx->queue = queue;
  ctx->device = device;
  ctx->platform = platform;
  /* RELCL_PROFILE can time commands only on a queue made with profiling */
  ctx->queue_profiling = (qprops & CL_QUEUE_PROFILING_ENABLE) != 0;
  ctx->profile = ctx->profile_print = profile_requested() && ctx->queue_profiling;
  relcl_status st = relcl__memacct_create(&ctx->mem);
  if (st == RELCL_OK) st = setup(ctx);
  if (st != RELCL_OK) goto fail;
  relcl__clear_error();
  *out = ctx;
  return RELCL_OK;
fail:
  relcl_context_destroy(ctx);
  return st;
}

void relcl_context_destroy(relcl_context *ctx) {
  if (ctx == NULL) return;
  if (ctx->queue) clFinish(ctx->queue);
  if (ctx->profile_print && ctx->n_prof + ctx->n_pending > 0)
    relcl__profile_print(ctx); /* asked for: the one print in lib */
  relcl__profile_resolve(ctx);
  free(ctx->pending);
  free(ctx->tuning_kernels);
  relcl__panels_drop(ctx);
  if (ctx->kept.batch) clReleaseMemObject(ctx->kept.batch);
  if (ctx->kept.table) clReleaseMemObject(ctx->kept.table);
  free(ctx->kept.table_host);
  relcl__pool_destroy(&ctx->pool);
  for (int i = 0; i < ctx->n_kernels; i++) clReleaseKernel(ctx->kernel[i].kernel);
  for (int i = 0; i < RELCL__MAX_PROGRAMS; i++)
    if (ctx->program[i]) clReleaseProgram(ctx->program[i]);
  /* CLBlast keeps the programs it built, for every context, until the process exits, and
   * releases them then, after their contexts. Drivers that do not keep a context alive for
   * its programs corrupt memory at exit (Oclgrind 21.10 does), and a program that creates
   * and destroys contexts would keep every one's programs. So the last relcl context clears
   * the cache while its cl_context is alive; a later context builds them again. */
  if (atomic_fetch_sub(&live_contexts, 1) == 1) relcl__gemm_forget();
  if (!ctx->borrowed) { /* the caller's own cl_context and queue stay the caller's */
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->cl) clReleaseContext(ctx->cl);
  }
  relcl__memacct_release(ctx->mem);
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
  if (err != CL_SUCCESS) return relcl__cl_fail(err, "clFinish");
  relcl__profile_resolve(ctx); /* every event is complete now: reading them costs no waiting */
  return RELCL_OK;
}

relcl_status relcl_build_check(cl_platform_id platform, cl_device_id device) {
  relcl__clear_error();
  if (cpu_vec_check() != RELCL_OK) return RELCL_ERR_INVALID_ARG;
  cl_int err;
  cl_context cl = clCreateContext(
      (cl_context_properties[]){CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0}, 1,
      &device, NULL, NULL, &err);
  if (err != CL_SUCCESS) return relcl__cl_fail(err, "clCreateContext");
  relcl_status st = RELCL_OK;
  /* both shapes of the row kernels: RELCL_ROW_KERNELS may ask for either on any device */
  for (int shape = 0; shape < 2; shape++)
    for (int i = 0; i < relcl__program_count() && st == RELCL_OK; i++) {
      cl_program prog = NULL;
      st = relcl__program_build(cl, platform, device, i, shape == 1, false, &prog);
      if (prog) clReleaseProgram(prog);
    }
  clReleaseContext(cl);
  return st;
}
