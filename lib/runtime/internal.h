/* Inside the runtime part only: the context's layout, the scratch pool's, program building
 * and the binary cache, profiling and CLBlast tuning. The ops and the model see runtime.h
 * (interface/), not this. Not installed. */
#ifndef RELCL_INTERNAL_H
#define RELCL_INTERNAL_H

#include "base.h"
#include "runtime.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

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
  size_t held, held_peak; /* bytes of the pool's buffers and of the kept panels (gemm.c's
                           * relcl__panels_keep): relcl_memory_stats' scratch */
  size_t used, used_peak; /* bytes requested by the users of in-use buffers */
} relcl__pool;

/* ---- B^T's panels kept between products (gemm.c, relcl__panels_keep) ---- */

#define RELCL__KEPT_PANELS 512
/* At most this many bytes of them: past it, products pack as they would without */
#define RELCL__KEPT_BYTES ((size_t)512 << 20)

typedef struct relcl__kept_panel {
  size_t offset, ldb, k, n; /* the operand B (n x k, rows ldb apart at offset in src) */
  cl_mem panels;            /* its panels (gemm.c's panels()), at `at` floats in it: its own
                             * buffer, or relcl__kept's batch */
  size_t at;
} relcl__kept_panel;

typedef struct relcl__kept {
  cl_mem src; /* the buffer whose operands are kept; NULL: none */
  bool listed; /* relcl__panels_keep_all's: only its operands are kept, none made later */
  int n;
  size_t bytes; /* of the entries' own buffers */
  relcl__kept_panel e[RELCL__KEPT_PANELS];
  /* relcl__panels_keep_all's panels, one buffer for all, kept from one keep to the next
   * (counted as scratch), and its launch's table as the device has it */
  cl_mem batch, table;
  size_t batch_bytes, table_n;
  cl_uint *table_host;
} relcl__kept;

/* ---- device-memory accounting (context.c) ----
 * Buffers from relcl_alloc may outlive the context (a cl_mem keeps its cl_context), and
 * OpenCL runs their destructor callbacks on any thread: the counters live in their own
 * reference-counted block, updated atomically. */
typedef struct relcl__memacct relcl__memacct;
/* The pool's held bytes changed: recompute the combined peak. */
void relcl__mem_note_scratch(relcl_context *ctx);

/* ---- context ---- */

enum { RELCL__MAX_PROGRAMS = 16, RELCL__MAX_KERNELS = 64 };

struct relcl_context {
  cl_platform_id platform;
  cl_device_id device;
  cl_context cl;
  cl_command_queue queue;
  bool borrowed; /* cl and queue came from relcl_context_create_from_cl: never released */
  char name[512];
  size_t device_max_wg;
  bool row_item; /* row kernels in the item shape (kernels/common.cl): CPUs, RELCL_ROW_KERNELS */
  cl_ulong local_mem;
  cl_ulong max_alloc;
  cl_program program[RELCL__MAX_PROGRAMS];
  relcl__kernel_entry kernel[RELCL__MAX_KERNELS];
  int n_kernels;
  relcl__pool pool;
  relcl__kept kept; /* B^T's panels kept between products (gemm.c) */
  char tuning[1024]; /* which CLBlast tuning was applied (tuning.c) */
  relcl_tuning_fit tuning_fit;
  char *tuning_kernels; /* the applied file's "kernels" object as JSON text, or NULL */
  char host_cpu[64];    /* relcl__host_cpu() for a CPU device, else "" */
  size_t gemm_k_chunk;  /* the tuning's RelclGemm K_CHUNK (gemm.c); 0: one call per product */
  size_t sub_align;     /* CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: sub-buffer origins (gemm.c) */
  size_t gemm_row_tile; /* the tuning's Xgemm NWG, CLBlast's tile along relcl's rows (gemm.c);
                         * 0: not known (no tuning applied) */
  size_t gemm_min_indirect; /* the tuning's GemmRoutine XGEMM_MIN_INDIRECT_SIZE, or 0 */
  size_t gemm_col_tile, gemm_k_tile; /* the tuning's Xgemm MWG and KWG, or 0 (gemm.c) */
  bool gemm_kernel_1;                /* the tuning's Xgemm GEMMK is 1 (gemm.c) */
  bool gemm_cpu;   /* single products in relcl's gemm_cpu (kernels/gemm.cl), not CLBlast's:
                   * CPUs, RELCL_CPU_GEMM */
  int cpu_vec;     /* its vector width, relcl__cpu_vec */
  bool wgrad_local; /* RELCL_WGRAD: weight gradients from local copies of A^T (CPUs) */
  bool gemm_at;     /* ... and the device has gemm_cpu_at (relcl__cpu_at): they run there */
  size_t cpu_l2;   /* a CPU device's L2 cache a core, in bytes (relcl__host_l2) */
  bool gemm_heads; /* batched products in relcl's kernels (kernels/gemm.cl: gemm_cpu,
                    * gemm_cpu_bt, gemm_heads_dots), not CLBlast's: CPUs, RELCL_HEAD_GEMM */
  bool attn_fused; /* attention's forward in one kernel a head where it can (kernels/gemm.cl
                    * attn_fwd_cpu, lib/ops/attention.c): CPUs, RELCL_ATTN */
  relcl__memacct *mem; /* relcl_alloc accounting (context.c) */
  /* Profiling (relcl_profile_enable, RELCL_PROFILE): commands get events, kept pending and
   * read at relcl_finish, so the queue is never synchronized per command. */
  bool profile;         /* collect events */
  bool profile_print;   /* RELCL_PROFILE=1: print the table at destroy */
  bool queue_profiling; /* the queue was created with CL_QUEUE_PROFILING_ENABLE */
  /* While a product runs in relcl's own kernels with profiling on (gemm.c): where its first
   * command puts its event (relcl__enqueue fills it when empty), so that the product's time
   * starts at that command's start with no marker of its own in the queue; else NULL */
  cl_event *span_first;
  struct relcl__prof {
    char name[96];
    relcl_profile_part part;
    double ms;
    long calls;
    size_t m, n, k, batch;
  } prof[256];
  int n_prof;
  struct relcl__pending {
    cl_event start; /* the span's first command or a marker before it, or NULL: ev's own */
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
/* The same for a routine that enqueues several commands: its time runs from the start of
 * `start` (its first command; for CLBlast, which returns the event of its last one only, a
 * marker enqueued just before it) to the end of ev, the last one's. Takes both events. */
void relcl__profile_span(relcl_context *ctx, const char *name, relcl_profile_part part,
                         const size_t shape[4], cl_event start, cl_event ev);
/* Where a command should put its event: &slot when profiling, else NULL. */
static inline cl_event *relcl__profile_slot(relcl_context *ctx, cl_event *slot) {
  *slot = NULL;
  return ctx->profile ? slot : NULL;
}

/* relcl__own_products (runtime.h), for the runtime's files that context.c calls */
static inline bool relcl__own_products_in(const relcl_context *ctx) {
  return ctx->gemm_cpu && ctx->gemm_heads;
}

/* Enqueue kernel k with its arguments, into *ev when ev is not NULL, without a profile record
 * of its own (relcl__launch makes one; gemm.c times its products as GEMMs): a failed argument
 * or launch is one error naming the kernel. */
relcl_status relcl__enqueue(relcl_context *ctx, const relcl__kernel_entry *k,
                            const relcl__args *args, cl_uint dims, const size_t *global,
                            const size_t *local, cl_event *ev);

/* Apply the CLBlast tuning file that matches ctx's device, if any (tuning.c). */
void relcl__tuning_apply(relcl_context *ctx);
/* What a tuning file is matched on (tuning.c). */
typedef struct relcl__tuning_device {
  char name[256], driver[256], platform[256], type[16];
  char cpu[64]; /* a CPU device's CPU model (relcl__host_cpu), else "" */
} relcl__tuning_device;
/* The host CPU's vendor, family and model ("AuthenticAMD family 23 model 1", from CPUID on
 * x86), or "" where relcl cannot tell. */
void relcl__host_cpu(char *buf, size_t size);
/* The L2 cache of the host's first CPU in bytes (Linux's sysfs), 1 MiB where it does not
 * say: a CPU device's (PoCL runs on the host's cores), for gemm.c's choices. */
size_t relcl__host_l2(void);
void relcl__tuning_describe(cl_platform_id platform, cl_device_id device,
                            relcl__tuning_device *dev);
/* How well the tuning file text fits dev, ranked: 3 measured on it (same device name and
 * driver and, for a CPU device whose model relcl can tell, the same CPU model), 2 the same
 * device name and driver on another CPU model or on one the file does not name, 1 the same
 * platform name and device type, 0 not at all (also for text that does not parse). */
int relcl__tuning_rank(const char *text, const relcl__tuning_device *dev);
/* The rank as the public fit: EXACT (3), NEAREST (2 and 1), NONE (0). */
relcl_tuning_fit relcl__tuning_fit(const char *text, const relcl__tuning_device *dev);

/* ---- profiling, memory accounting (profile.c, memory.c) ---- */

/* The table of timings on stderr, by time (RELCL_PROFILE: the one print in lib). */
void relcl__profile_print(relcl_context *ctx);
/* The context's relcl_alloc accounting (memory.c). */
relcl_status relcl__memacct_create(relcl__memacct **out);
void relcl__memacct_release(relcl__memacct *a);
/* Count a new relcl_alloc buffer until its release. */
void relcl__memacct_track(relcl_context *ctx, cl_mem mem, size_t bytes);
/* What the profile counts a kernel's time under, by its name (profile.c). */
relcl_profile_part relcl__kernel_part(const char *name);
/* Wait for the pending profiled commands and add their times (profile.c). */
void relcl__profile_resolve(relcl_context *ctx);

/* ---- programs (program.c, cache.c) ---- */

/* Number of program families and their index by name (-1 when unknown). */
int relcl__program_count(void);
int relcl__program_index(const char *family);
/* Full source of family i (common prelude + file), from the embedded copy or from
 * RELCL_KERNEL_DIR. Caller frees. */
relcl_status relcl__program_source_text(int i, char **out);
/* Build (or load from the binary cache) family i for a device, its row kernels in the item
 * shape (kernels/common.cl) or the group shape. */
/* gemm_cpu's vector width on this device (kernels/gemm.cl RELCL_CPU_VEC): 16, 8 or 4 after
 * its native float vector width (PoCL: the CPU's SIMD registers), or RELCL_CPU_VEC's */
int relcl__cpu_vec(cl_device_id device);
/* Whether kernels/gemm.cl's gemm_cpu_at is built (RELCL_CPU_AT) and runs the weight gradients
 * (gemm.c): the item shape of the row kernels, 16 floats a vector, and local memory for its
 * copy of A, RELCL_CPU_AT_K x 4 CPU_MR floats (96 KB; PoCL has 2 MB, Intel's CPU runtime 32 KB) */
bool relcl__cpu_at(cl_device_id device, bool row_item);
/* RELCL_CPU_VEC: 0 unset or empty, 4, 8 or 16 as set, -1 any other value */
int relcl__cpu_vec_env(void);
relcl_status relcl__program_build(cl_context cl, cl_platform_id platform, cl_device_id device,
                                  int i, bool row_item, bool use_cache, cl_program *out);
/* Programs built from a cached binary (hits) and from source, counted over the process:
 * for the tests (test_cache.c), which reach them through the static library. */
void relcl__program_counts(unsigned long *hits, unsigned long *builds);

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

void relcl__pool_destroy(relcl__pool *pool);

/* ---- GEMM (gemm.c: the only file that calls CLBlast) ---- */

/* Override CLBlast's tuning parameters of one kernel ("Xgemm", ...) for a device, single
 * precision. */
relcl_status relcl__gemm_override(cl_device_id device, const char *kernel, size_t n,
                                  const char *const *names, const size_t *values);

/* Release every program CLBlast has built and cached, in every context (the parameters set
 * by relcl__gemm_override stay). */
void relcl__gemm_forget(void);

#endif
