/* Internal interface shared by the files of librelcl: errors, the context layout, program
 * building, the scratch pool and the one GEMM wrapper. Not installed. */
#ifndef RELCL_INTERNAL_H
#define RELCL_INTERNAL_H

#include "relcl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- errors (error.c) ---- */

/* Record a message for relcl_last_error() and return status. printf-style. */
relcl_status relcl__fail(relcl_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, keeping code (a cl_int or CLBlast status) for relcl_last_error_code(). */
relcl_status relcl__fail_code(relcl_status status, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same for a failed OpenCL call: the message names the call and the cl_int. */
relcl_status relcl__cl_fail(cl_int err, const char *what);
const char *relcl__cl_error_name(cl_int err);
/* The first statement of every public call returning relcl_status: a message outlives
 * only the call that set it (relcl.h, relcl_last_error). */
void relcl__clear_error(void);

/* ---- scratch pool (pool.c) ---- */

typedef struct relcl__pool_slot {
  cl_mem mem;
  size_t bytes;
  size_t requested; /* what the current user asked for (0 when free) */
  bool in_use;
} relcl__pool_slot;

#define RELCL__POOL_SLOTS 32

typedef struct relcl__pool {
  relcl__pool_slot slot[RELCL__POOL_SLOTS];
  size_t created; /* buffers ever created: lets tests see that calls reuse memory */
  size_t held, held_peak; /* bytes of the pool's buffers (relcl_memory_stats) */
  size_t used, used_peak; /* bytes requested by the users of in-use buffers */
} relcl__pool;

/* ---- device-memory accounting (context.c) ----
 * Buffers from relcl_alloc may outlive the context (a cl_mem keeps its cl_context), and
 * OpenCL runs their destructor callbacks on any thread: the counters live in their own
 * reference-counted block, updated atomically. */
typedef struct relcl__memacct relcl__memacct;
/* The pool's held bytes changed: recompute the combined peak. */
void relcl__mem_note_scratch(relcl_context *ctx);

/* ---- context ---- */

enum { RELCL__MAX_PROGRAMS = 16, RELCL__MAX_KERNELS = 64 };

typedef struct relcl__kernel_entry {
  const char *name; /* static string */
  cl_kernel kernel;
  size_t max_wg; /* CL_KERNEL_WORK_GROUP_SIZE for this device */
  relcl_profile_part part; /* what the profile counts its time under */
} relcl__kernel_entry;

struct relcl_context {
  cl_platform_id platform;
  cl_device_id device;
  cl_context cl;
  cl_command_queue queue;
  bool borrowed; /* cl and queue came from relcl_context_create_from_cl: never released */
  char name[512];
  size_t device_max_wg;
  cl_ulong local_mem;
  cl_ulong max_alloc;
  cl_program program[RELCL__MAX_PROGRAMS];
  relcl__kernel_entry kernel[RELCL__MAX_KERNELS];
  int n_kernels;
  relcl__pool pool;
  char tuning[1024]; /* which CLBlast tuning was applied (tuning.c) */
  relcl_tuning_fit tuning_fit;
  relcl__memacct *mem; /* relcl_alloc accounting (context.c) */
  /* Profiling (relcl_profile_enable, RELCL_PROFILE): commands get events, kept pending and
   * read at relcl_finish, so the queue is never synchronized per command. */
  bool profile;         /* collect events */
  bool profile_print;   /* RELCL_PROFILE=1: print the table at destroy */
  bool queue_profiling; /* the queue was created with CL_QUEUE_PROFILING_ENABLE */
  struct relcl__prof {
    char name[96];
    relcl_profile_part part;
    double ms;
    long calls;
    size_t m, n, k, batch;
  } prof[256];
  int n_prof;
  struct relcl__pending {
    cl_event start; /* a marker before the command(s), or NULL: then ev's own start */
    cl_event ev;
    int entry; /* index into prof, or -1 when the table was full (still counted in totals) */
    relcl_profile_part part;
  } *pending;
  int n_pending, cap_pending;
  long prof_commands;
  double prof_busy_ms, prof_part_ms[RELCL_PART_COUNT];
  cl_ulong prof_first, prof_last; /* device clock of the first start, the last end */
};

/* With ctx->profile: keep ev (a command enqueued under name, in part, with the GEMM shape
 * m x n x k x batch or zeros) to be read later; without, release it. ev may be NULL. */
void relcl__profile_event(relcl_context *ctx, const char *name, relcl_profile_part part,
                          const size_t shape[4], cl_event ev);
/* The same for a routine that enqueues several commands but returns the event of its last
 * one only (CLBlast): its time runs from the end of `start`, a marker enqueued just before
 * it, to the end of ev. Takes both events. */
void relcl__profile_span(relcl_context *ctx, const char *name, relcl_profile_part part,
                         const size_t shape[4], cl_event start, cl_event ev);
/* Where a command should put its event: &slot when profiling, else NULL. */
static inline cl_event *relcl__profile_slot(relcl_context *ctx, cl_event *slot) {
  *slot = NULL;
  return ctx->profile ? slot : NULL;
}

/* Apply the CLBlast tuning file that matches ctx's device, if any (tuning.c). */
void relcl__tuning_apply(relcl_context *ctx);
/* What a tuning file is matched on (tuning.c). */
typedef struct relcl__tuning_device {
  char name[256], driver[256], platform[256], type[16];
} relcl__tuning_device;
void relcl__tuning_describe(cl_platform_id platform, cl_device_id device,
                            relcl__tuning_device *dev);
/* How well the tuning file text fits dev: EXACT (same device name and driver), NEAREST (same
 * platform name and device type), else NONE (also for text that does not parse). */
relcl_tuning_fit relcl__tuning_fit(const char *text, const relcl__tuning_device *dev);

/* ---- programs (program.c, cache.c) ---- */

/* Number of program families and their index by name (-1 when unknown). */
int relcl__program_count(void);
int relcl__program_index(const char *family);
/* Full source of family i (common prelude + file), from the embedded copy or from
 * RELCL_KERNEL_DIR. Caller frees. */
relcl_status relcl__program_source_text(int i, char **out);
/* Build (or load from the binary cache) family i for a device. */
relcl_status relcl__program_build(cl_context cl, cl_platform_id platform, cl_device_id device,
                                  int i, bool use_cache, cl_program *out);
/* Programs built from a cached binary (hits) and from source, counted over the process:
 * for the tests (test_cache.c), which reach them through the static library. */
void relcl__program_counts(unsigned long *hits, unsigned long *builds);
/* The kernel `name` of `family` on ctx, created once and kept. */
relcl_status relcl__kernel(relcl_context *ctx, const char *family, const char *name,
                           relcl__kernel_entry **out);

/* Program-binary cache: the directory in use ("" when disabled). */
const char *relcl__cache_dir(char *buf, size_t size);
/* 32 hex digits identifying (source, options, device, driver, platform). */
void relcl__cache_key(const char *source, const char *options, cl_platform_id platform,
                      cl_device_id device, char key[33]);
/* Load a binary; false on any fault (missing, short, corrupt). Caller frees *bin. */
bool relcl__cache_load(const char *dir, const char *key, unsigned char **bin, size_t *size);
/* Store atomically (temporary file, fsync, rename); failures are ignored by design. */
void relcl__cache_store(const char *dir, const char *key, const unsigned char *bin,
                        size_t size);

/* ---- launching ---- */

/* Kernel arguments in order: RELCL__ARG(&args, x) for each; the first failure sticks. */
typedef struct relcl__args {
  cl_kernel kernel;
  cl_uint index;
  cl_int err;
} relcl__args;

static inline void relcl__arg(relcl__args *a, size_t size, const void *value) {
  if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->kernel, a->index, size, value);
  a->index++;
}
#define RELCL__ARG(a, x) relcl__arg((a), sizeof(x), &(x))

/* A buffer argument as a kernel takes it: (cl_mem, uint element offset). An absent buffer
 * passes fallback, since even an unused argument needs a valid buffer. */
static inline void relcl__buf_arg(relcl__args *a, relcl_buf b, cl_mem fallback) {
  cl_mem m = b.mem ? b.mem : fallback;
  cl_uint off = (cl_uint)b.offset;
  relcl__arg(a, sizeof m, &m);
  relcl__arg(a, sizeof off, &off);
}
#define RELCL__ARG_LOCAL(a, bytes) relcl__arg((a), (bytes), NULL)
relcl_status relcl__launch(relcl_context *ctx, relcl__kernel_entry *k, const relcl__args *args,
                           cl_uint dims,
                           const size_t *global, const size_t *local);
/* Largest power of two <= limit and <= want rounded up to a power of two, >= 1. */
size_t relcl__pow2_wg(size_t want, size_t limit);

relcl_status relcl__pool_get(relcl_context *ctx, size_t bytes, cl_mem *out);
void relcl__pool_put(relcl_context *ctx, cl_mem mem);
void relcl__pool_destroy(relcl__pool *pool);

/* Set n floats to value, without argument checks. */
relcl_status relcl__fill(relcl_context *ctx, relcl_buf dst, float value, size_t n);

/* Check that buf holds at least n elements of 4 bytes past its offset. */
relcl_status relcl__check_buf(relcl_buf buf, size_t n, const char *what);
/* relcl__check_buf calls made so far on this thread: test_checks counts the graph's (none). */
unsigned long relcl__check_buf_count(void);

/* ---- host utilities (util.c) ---- */

#define RELCL__FNV_BASIS 0xcbf29ce484222325ULL
/* FNV-1a 64 of n bytes, continuing from h (start with RELCL__FNV_BASIS). */
uint64_t relcl__fnv1a64(uint64_t h, const void *data, size_t n);
/* Index of the first byte of s[0..n) that is not part of valid UTF-8 (overlong forms,
 * surrogates and code points past U+10FFFF are invalid), or n. */
size_t relcl__utf8_bad(const unsigned char *s, size_t n);

/* Atomic file writing: fn writes the content through relcl__file_out_write into a temporary
 * file beside path (".NAME.tmp-XXXXXX"), which is then fsynced and renamed over path, and
 * the directory fsynced. On any failure the temporary file is removed, path is untouched,
 * and the error names path. fn returns RELCL_OK, or a status after relcl__fail. */
typedef struct relcl__file_out relcl__file_out;
typedef relcl_status (*relcl__file_writer)(relcl__file_out *out, void *arg);
relcl_status relcl__write_atomic(const char *path, relcl__file_writer fn, void *arg);
/* false after the first failed write (the error is reported by relcl__write_atomic). */
bool relcl__file_out_write(relcl__file_out *out, const void *data, size_t n);
size_t relcl__file_out_written(const relcl__file_out *out);

/* The whole of a file of at most max bytes, NUL-terminated (malloc'ed, *size without the
 * NUL). Larger, or endless (/dev/zero), is RELCL_ERR_FORMAT "PATH: ... not a WHAT" before
 * more than max + 1 bytes are read; errors name path. */
relcl_status relcl__read_file(const char *path, size_t max, const char *what, char **out,
                              size_t *size);

/* ---- GEMM (gemm.c: the only file that calls CLBlast) ---- */

/* Override CLBlast's tuning parameters of one kernel ("Xgemm", ...) for a device, single
 * precision. */
relcl_status relcl__gemm_override(cl_device_id device, const char *kernel, size_t n,
                                  const char *const *names, const size_t *values);

/* Row-major C = alpha op(A) op(B) + beta C, batch times with element strides; timed under
 * part when profiling (relcl__gemm: RELCL_PART_CONTENT_GEMM). */
relcl_status relcl__gemm_in(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                            bool trans_b, size_t m, size_t n, size_t k, float alpha, relcl_buf a,
                            size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                            size_t stride_b, float beta, relcl_buf c, size_t ldc,
                            size_t stride_c, size_t batch);
#define relcl__gemm(ctx, ...) relcl__gemm_in((ctx), RELCL_PART_CONTENT_GEMM, __VA_ARGS__)
#endif
