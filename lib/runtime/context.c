/* Device choice, context and queue, kernel lookup and launching, plain buffer helpers. */
#include "internal.h"
#include "ops.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PLATFORMS = 16, MAX_DEVICES = 64 };

static relcl_status memacct_create(relcl__memacct **out);
static void memacct_release(relcl__memacct *a);
static relcl_profile_part kernel_part(const char *name);

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

/* What every context needs once its device, cl_context and queue are known: the device's
 * name and limits, every kernel program (from the binary cache or built) and CLBlast's
 * tuning. Building every program here reports a build failure at creation. */
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
  for (int i = 0; i < relcl__program_count(); i++) {
    relcl_status st =
        relcl__program_build(ctx->cl, ctx->platform, ctx->device, i, true, &ctx->program[i]);
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
  relcl_context *ctx = calloc(1, sizeof *ctx);
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
  if ((st = memacct_create(&ctx->mem)) != RELCL_OK) goto fail;
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

  relcl_context *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  ctx->borrowed = true;
  ctx->cl = cl;
  ctx->queue = queue;
  ctx->device = device;
  ctx->platform = platform;
  /* RELCL_PROFILE can time commands only on a queue made with profiling */
  ctx->queue_profiling = (qprops & CL_QUEUE_PROFILING_ENABLE) != 0;
  ctx->profile = ctx->profile_print = profile_requested() && ctx->queue_profiling;
  relcl_status st = memacct_create(&ctx->mem);
  if (st == RELCL_OK) st = setup(ctx);
  if (st != RELCL_OK) goto fail;
  relcl__clear_error();
  *out = ctx;
  return RELCL_OK;
fail:
  relcl_context_destroy(ctx);
  return st;
}

/* ---- profiling ---- */

static int by_time(const void *a, const void *b) {
  double x = ((const struct relcl__prof *)a)->ms, y = ((const struct relcl__prof *)b)->ms;
  return (x < y) - (x > y);
}

/* What a kernel is counted under in a step's breakdown; kernels not named are OTHER. */
static relcl_profile_part kernel_part(const char *name) {
  static const struct {
    const char *name;
    relcl_profile_part part;
  } parts[] = {
      {"attn_fwd_rows", RELCL_PART_ATTENTION_ROWS}, {"attn_drop_rows", RELCL_PART_ATTENTION_ROWS},
      {"attn_bwd_rows", RELCL_PART_ATTENTION_ROWS}, {"attn_step", RELCL_PART_ATTENTION_ROWS},
      {"ln_fwd", RELCL_PART_LAYER_NORM},            {"ln_bwd", RELCL_PART_LAYER_NORM},
      {"ln_param_partial", RELCL_PART_LAYER_NORM},  {"dropout_apply", RELCL_PART_DROPOUT},
      {"xent_rows", RELCL_PART_LOSS},               {"argmax_rows", RELCL_PART_LOSS},
      {"adam_update", RELCL_PART_OPTIMIZER},        {"sum_block", RELCL_PART_OPTIMIZER},
      {"fill", RELCL_PART_COPIES},                  {"heads_split", RELCL_PART_COPIES},
      {"heads_merge", RELCL_PART_COPIES},           {"cache_put", RELCL_PART_COPIES},
      {"cache_gather", RELCL_PART_COPIES},
  };
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
    if (strcmp(parts[i].name, name) == 0) return parts[i].part;
  return RELCL_PART_OTHER;
}

const char *relcl_profile_part_name(relcl_profile_part part) {
  static const char *const names[RELCL_PART_COUNT] = {
      "content GEMMs", "relative GEMMs", "attention rows", "layer norm", "dropout",
      "loss",          "optimizer",      "copies",         "other element-wise"};
  return (unsigned)part < RELCL_PART_COUNT ? names[part] : "unknown";
}

static int prof_entry(relcl_context *ctx, const char *name, relcl_profile_part part,
                      const size_t shape[4]) {
  for (int i = 0; i < ctx->n_prof; i++)
    if (ctx->prof[i].part == part && strcmp(ctx->prof[i].name, name) == 0) return i;
  if (ctx->n_prof == (int)(sizeof ctx->prof / sizeof *ctx->prof)) return -1;
  struct relcl__prof *e = &ctx->prof[ctx->n_prof];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", name);
  e->part = part;
  if (shape) e->m = shape[0], e->n = shape[1], e->k = shape[2], e->batch = shape[3];
  return ctx->n_prof++;
}

/* Wait for the pending commands and add their times. The queue is in order, so waiting
 * costs nothing that relcl_finish would not. */
static void prof_resolve(relcl_context *ctx) {
  for (int i = 0; i < ctx->n_pending; i++) {
    struct relcl__pending *p = &ctx->pending[i];
    cl_ulong t0 = 0, t1 = 0;
    if (clWaitForEvents(1, &p->ev) == CL_SUCCESS &&
        (p->start ? clGetEventProfilingInfo(p->start, CL_PROFILING_COMMAND_END, sizeof t0, &t0,
                                            NULL)
                  : clGetEventProfilingInfo(p->ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0,
                                            NULL)) == CL_SUCCESS &&
        clGetEventProfilingInfo(p->ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) ==
            CL_SUCCESS &&
        t1 >= t0) {
      double ms = (double)(t1 - t0) * 1e-6;
      if (p->entry >= 0) {
        ctx->prof[p->entry].ms += ms;
        ctx->prof[p->entry].calls++;
      }
      ctx->prof_commands++;
      ctx->prof_busy_ms += ms;
      ctx->prof_part_ms[p->part] += ms;
      if (ctx->prof_first == 0 || t0 < ctx->prof_first) ctx->prof_first = t0;
      if (t1 > ctx->prof_last) ctx->prof_last = t1;
    }
    clReleaseEvent(p->ev);
    if (p->start) clReleaseEvent(p->start);
  }
  ctx->n_pending = 0;
}

void relcl__profile_event(relcl_context *ctx, const char *name, relcl_profile_part part,
                          const size_t shape[4], cl_event ev) {
  relcl__profile_span(ctx, name, part, shape, NULL, ev);
}

void relcl__profile_span(relcl_context *ctx, const char *name, relcl_profile_part part,
                         const size_t shape[4], cl_event start, cl_event ev) {
  if (ev == NULL || !ctx->profile) {
    if (ev) clReleaseEvent(ev);
    if (start) clReleaseEvent(start);
    return;
  }
  /* bounded memory when nobody calls relcl_finish: read what is pending now and then */
  if (ctx->n_pending == ctx->cap_pending) {
    int cap = ctx->cap_pending ? 2 * ctx->cap_pending : 1024;
    void *grown = cap <= (1 << 16) ? realloc(ctx->pending, (size_t)cap * sizeof *ctx->pending)
                                   : NULL;
    if (grown) {
      ctx->pending = grown;
      ctx->cap_pending = cap;
    } else {
      prof_resolve(ctx);
    }
  }
  struct relcl__pending *p = &ctx->pending[ctx->n_pending++];
  p->start = start;
  p->ev = ev;
  p->part = part;
  p->entry = prof_entry(ctx, name, part, shape);
}

relcl_status relcl_profile_enable(relcl_context *ctx, int on) {
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_enable: ctx is NULL");
  if (on && !ctx->queue_profiling && ctx->borrowed) /* the queue is the caller's */
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "relcl_profile_enable: the caller's queue was created without "
                       "CL_QUEUE_PROFILING_ENABLE");
  if (on && !ctx->queue_profiling) {
    /* OpenCL 1.2 cannot turn profiling on for an existing queue: swap in a new one */
    cl_int err = clFinish(ctx->queue);
    if (err != CL_SUCCESS) return relcl__cl_fail(err, "clFinish");
    cl_command_queue q =
        clCreateCommandQueue(ctx->cl, ctx->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) return relcl__cl_fail(err, "clCreateCommandQueue (profiling)");
    clReleaseCommandQueue(ctx->queue);
    ctx->queue = q;
    ctx->queue_profiling = true;
  }
  ctx->profile = on != 0;
  return RELCL_OK;
}

relcl_status relcl_profile_reset(relcl_context *ctx) {
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_reset: ctx is NULL");
  prof_resolve(ctx);
  ctx->n_prof = 0;
  ctx->prof_commands = 0;
  ctx->prof_busy_ms = 0;
  memset(ctx->prof_part_ms, 0, sizeof ctx->prof_part_ms);
  ctx->prof_first = ctx->prof_last = 0;
  return RELCL_OK;
}

int relcl_profile_count(relcl_context *ctx) {
  if (ctx == NULL) {
    relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_count: ctx is NULL");
    return -1;
  }
  prof_resolve(ctx);
  return ctx->n_prof;
}

relcl_status relcl_profile_entry_get(relcl_context *ctx, int i, relcl_profile_entry *out) {
  if (ctx == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_entry_get: ctx or out is NULL");
  prof_resolve(ctx);
  if (i < 0 || i >= ctx->n_prof)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_entry_get: index %d not in 0..%d",
                       i, ctx->n_prof - 1);
  const struct relcl__prof *e = &ctx->prof[i];
  *out = (relcl_profile_entry){e->name, e->part, e->ms, e->calls, e->m, e->n, e->k, e->batch};
  return RELCL_OK;
}

relcl_status relcl_profile_summary_get(relcl_context *ctx, relcl_profile_summary *out) {
  if (ctx == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_summary_get: ctx or out is NULL");
  prof_resolve(ctx);
  out->commands = ctx->prof_commands;
  out->busy_ms = ctx->prof_busy_ms;
  out->span_ms =
      ctx->prof_last > ctx->prof_first ? (double)(ctx->prof_last - ctx->prof_first) * 1e-6 : 0;
  memcpy(out->part_ms, ctx->prof_part_ms, sizeof out->part_ms);
  return RELCL_OK;
}

static void print_profile(relcl_context *ctx) {
  prof_resolve(ctx);
  qsort(ctx->prof, (size_t)ctx->n_prof, sizeof *ctx->prof, by_time);
  double total = ctx->prof_busy_ms;
  fprintf(stderr, "relcl profile (RELCL_PROFILE): %.1f ms of device time\n", total);
  for (int i = 0; i < ctx->n_prof; i++)
    fprintf(stderr, "  %10.1f ms %5.1f%% %8ld calls  %-18s %s\n", ctx->prof[i].ms,
            100.0 * ctx->prof[i].ms / (total > 0 ? total : 1), ctx->prof[i].calls,
            relcl_profile_part_name(ctx->prof[i].part), ctx->prof[i].name);
}

/* ---- device-memory accounting ---- */

struct relcl__memacct {
  atomic_size_t alloc, alloc_peak, scratch, total_peak;
  atomic_int refs; /* the context and every live relcl_alloc buffer */
};

typedef struct alloc_note {
  relcl__memacct *acct;
  size_t bytes;
} alloc_note;

static relcl_status memacct_create(relcl__memacct **out) {
  relcl__memacct *a = malloc(sizeof *a);
  if (a == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  atomic_init(&a->alloc, 0);
  atomic_init(&a->alloc_peak, 0);
  atomic_init(&a->scratch, 0);
  atomic_init(&a->total_peak, 0);
  atomic_init(&a->refs, 1);
  *out = a;
  return RELCL_OK;
}

static void memacct_release(relcl__memacct *a) {
  if (a && atomic_fetch_sub(&a->refs, 1) == 1) free(a);
}

static void raise_to(atomic_size_t *peak, size_t v) {
  size_t old = atomic_load(peak);
  while (v > old && !atomic_compare_exchange_weak(peak, &old, v)) {
  }
}

static void memacct_total(relcl__memacct *a) {
  raise_to(&a->total_peak, atomic_load(&a->alloc) + atomic_load(&a->scratch));
}

static void CL_CALLBACK alloc_released(cl_mem mem, void *user) {
  (void)mem;
  alloc_note *note = user;
  atomic_fetch_sub(&note->acct->alloc, note->bytes);
  memacct_release(note->acct);
  free(note);
}

/* Count a new relcl_alloc buffer until OpenCL deletes it (whenever its last reference goes). */
static void memacct_track(relcl_context *ctx, cl_mem mem, size_t bytes) {
  alloc_note *note = malloc(sizeof *note);
  if (note == NULL) return; /* statistics only: never fail an allocation for them */
  note->acct = ctx->mem;
  note->bytes = bytes;
  atomic_fetch_add(&ctx->mem->refs, 1);
  atomic_fetch_add(&ctx->mem->alloc, bytes);
  if (clSetMemObjectDestructorCallback(mem, alloc_released, note) != CL_SUCCESS) {
    atomic_fetch_sub(&ctx->mem->alloc, bytes);
    memacct_release(ctx->mem);
    free(note);
    return;
  }
  raise_to(&ctx->mem->alloc_peak, atomic_load(&ctx->mem->alloc));
  memacct_total(ctx->mem);
}

void relcl__mem_note_scratch(relcl_context *ctx) {
  atomic_store(&ctx->mem->scratch, ctx->pool.held);
  memacct_total(ctx->mem);
}

relcl_status relcl_memory_stats_get(const relcl_context *ctx, relcl_memory_stats *out) {
  if (ctx == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_memory_stats_get: ctx or out is NULL");
  out->alloc_bytes = atomic_load(&ctx->mem->alloc);
  out->alloc_peak = atomic_load(&ctx->mem->alloc_peak);
  out->scratch_bytes = ctx->pool.held;
  out->scratch_peak = ctx->pool.held_peak;
  out->scratch_used_peak = ctx->pool.used_peak;
  out->total_peak = atomic_load(&ctx->mem->total_peak);
  return RELCL_OK;
}

relcl_status relcl_memory_reset_peaks(relcl_context *ctx) {
  if (ctx == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_memory_reset_peaks: ctx is NULL");
  ctx->pool.held_peak = ctx->pool.held;
  ctx->pool.used_peak = ctx->pool.used;
  size_t alloc = atomic_load(&ctx->mem->alloc);
  atomic_store(&ctx->mem->alloc_peak, alloc);
  atomic_store(&ctx->mem->total_peak, alloc + ctx->pool.held);
  return RELCL_OK;
}

void relcl_context_destroy(relcl_context *ctx) {
  if (ctx == NULL) return;
  if (ctx->queue) clFinish(ctx->queue);
  if (ctx->profile_print && ctx->n_prof + ctx->n_pending > 0)
    print_profile(ctx); /* asked for: the one print in lib */
  prof_resolve(ctx);
  free(ctx->pending);
  relcl__pool_destroy(&ctx->pool);
  for (int i = 0; i < ctx->n_kernels; i++) clReleaseKernel(ctx->kernel[i].kernel);
  for (int i = 0; i < RELCL__MAX_PROGRAMS; i++)
    if (ctx->program[i]) clReleaseProgram(ctx->program[i]);
  if (!ctx->borrowed) { /* the caller's own cl_context and queue stay the caller's */
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->cl) clReleaseContext(ctx->cl);
  }
  memacct_release(ctx->mem);
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
  prof_resolve(ctx); /* every event is complete now: reading them costs no waiting */
  return RELCL_OK;
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
  e->part = kernel_part(name);
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
  cl_event ev;
  cl_int err = clEnqueueNDRangeKernel(ctx->queue, k->kernel, dims, NULL, global, local, 0, NULL,
                                      relcl__profile_slot(ctx, &ev));
  relcl__profile_event(ctx, k->name, k->part, NULL, ev);
  if (err != CL_SUCCESS) {
    char what[160];
    snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", k->name);
    return relcl__cl_fail(err, what);
  }
  return RELCL_OK;
}

/* ---- buffers ---- */

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
  memacct_track(ctx, *out, n * 4);
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
