/* relcl: relation-aware self-attention (Shaw, Uszkoreit & Vaswani 2018) on any OpenCL 1.2
 * device. Relative terms run in relcl's own kernels; the GEMMs in CLBlast, or on a CPU device
 * in relcl's own kernels (RELCL_CPU_GEMM, RELCL_HEAD_GEMM: README "Speed").
 *
 * Conventions
 * - Every fallible call returns relcl_status; relcl_last_error() then holds a one-line
 *   message for this thread (OpenCL/CLBlast codes, build logs, file names).
 * - Handles are opaque; relcl_X_destroy(NULL) is a no-op. relcl never frees a cl_mem it
 *   did not create: buffers passed in stay the caller's.
 * - Tensors are float32, row-major, densely packed; shapes are written (dim0, dim1, ...).
 *   A relcl_buf is a cl_mem plus an offset counted in elements, so tensors may live inside
 *   one large arena buffer.
 * - All work is enqueued on the context's one in-order queue; results are ready after
 *   relcl_finish() or a blocking read.
 *
 * Threads
 * - Different relcl_context objects may be used from different threads at the same time:
 *   each has its own queue, kernel objects and scratch memory; relcl_last_error() and
 *   relcl_last_error_code() are per thread; relcl_device_find, relcl_context_create and
 *   the program-binary cache (written atomically) may run concurrently.
 * - One relcl_context, and everything created on it (relcl_model, relcl_decoder, beam
 *   results), must be used by one thread at a time. The context creates its cl_kernel
 *   objects on first use, sets their arguments before each launch (clSetKernelArg is not
 *   thread-safe on one kernel object) and lends scratch buffers from one pool; none of it
 *   is locked. A context may move between threads when the caller orders the calls (a
 *   mutex, or a join). The cl_mem buffers themselves follow OpenCL's rules.
 * - Host-only objects (relcl_text, relcl_spm, relcl_corpus, relcl_batcher,
 *   relcl_checkpoint) likewise: one thread at a time per object, distinct objects
 *   independent.
 */
#ifndef RELCL_H
#define RELCL_H

#include <stddef.h>
#include <stdint.h>

#include "relcl_status.h"

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- buffers ----------------------------------------------------------------------- */

typedef struct relcl_buf {
  cl_mem mem;    /* NULL means "absent" where an argument is optional */
  size_t offset; /* in elements (float or int32), not bytes */
} relcl_buf;

static inline relcl_buf relcl_buf_at(cl_mem mem, size_t offset) {
  relcl_buf b;
  b.mem = mem;
  b.offset = offset;
  return b;
}
#define RELCL_BUF_NONE relcl_buf_at(NULL, 0)

/* ---- devices and contexts ---------------------------------------------------------- */

typedef struct relcl_context relcl_context;

/* Resolve a device choice to (platform index, device index).
 * spec: "P:D" indices, or a case-insensitive substring of the platform's name, the
 * platform's vendor or the device's name ("pocl" matches PoCL, whose platform is "Portable
 * Computing Language" and vendor "The pocl project"); the first device that matches wins.
 * NULL or "" means the default: the first GPU, else the first device.
 * An unknown choice returns RELCL_ERR_NO_DEVICE with a message listing what exists. */
relcl_status relcl_device_find(const char *spec, int *platform_index, int *device_index);

/* Create a context and queue on one device. device: as for relcl_device_find; NULL reads
 * the RELCL_DEVICE environment variable, and falls back to the default. Kernels are built
 * (or loaded from the binary cache) here, so a build failure is reported now. */
relcl_status relcl_context_create(relcl_context **ctx, const char *device);

/* Create a context on an OpenCL context and queue the caller already has (as CLBlast takes
 * the caller's queue), so relcl's work runs in the caller's context and order. The queue
 * must belong to cl and be in order; its device is the one relcl builds for. Ownership:
 * cl and queue stay the caller's. relcl does not retain or release them, so they must
 * outlive the relcl_context; relcl_context_destroy waits for the queue (clFinish) and
 * releases only what relcl created (kernels, programs, scratch buffers). Buffers from
 * relcl_alloc on this context are cl_mem of cl. RELCL_PROFILE times commands only when
 * the queue was created with CL_QUEUE_PROFILING_ENABLE. */
relcl_status relcl_context_create_from_cl(relcl_context **ctx, cl_context cl,
                                          cl_command_queue queue);
/* Waits for the queue, then releases what relcl created (see above for a caller's queue).
 * The last relcl context of the process also clears CLBlast's cache of built programs (every
 * context's, a CLBlast caller's own included: they are built again when next used). */
void relcl_context_destroy(relcl_context *ctx);

cl_context relcl_context_cl(const relcl_context *ctx);
cl_command_queue relcl_context_queue(const relcl_context *ctx);
cl_device_id relcl_context_device(const relcl_context *ctx);
/* "platform name / device name" of the chosen device. */
const char *relcl_context_device_name(const relcl_context *ctx);
/* Which CLBlast tuning parameters the context applied, in words for the user: a file path or
 * "shipped tuning" (measured on this device), "borrowed from DEVICE ..." (measured on another
 * device of the same platform and type), or "none (CLBlast's defaults) ..."; the last two say
 * how to measure this device (relcl-tune), or, where relcl's own kernels run every product
 * (a CPU device), that no tuning is needed. See RELCL_TUNING. */
const char *relcl_context_tuning(const relcl_context *ctx);
/* How well the applied tuning fits the device. */
typedef enum relcl_tuning_fit {
  RELCL_TUNING_NONE = 0,    /* CLBlast's defaults */
  RELCL_TUNING_NEAREST = 1, /* another device's, of the same platform and device type, or this
                               device name's measured on another CPU model */
  RELCL_TUNING_EXACT = 2,   /* measured on this device name and driver version (and for a CPU
                               device on this CPU model: relcl_context_host_cpu) */
} relcl_tuning_fit;
relcl_tuning_fit relcl_context_tuning_fit(const relcl_context *ctx);
/* The applied parameters as JSON text, the "kernels" object of the tuning file
 * ({"Xgemm": {"MWG": 64, ...}, ...}), or NULL when CLBlast's defaults apply. Owned by the
 * context. */
const char *relcl_context_tuning_kernels(const relcl_context *ctx);
/* For a CPU device, the model of the CPU it runs on, as tuning files record it: vendor,
 * family and model ("AuthenticAMD family 23 model 1"; PoCL calls Zen 1 and Zen 2 EPYCs
 * alike, and their best GEMM parameters differ). "" for other devices, or where relcl cannot
 * tell (outside x86). Owned by the context. */
const char *relcl_context_host_cpu(const relcl_context *ctx);
/* Wait until every enqueued command has finished. */
relcl_status relcl_finish(relcl_context *ctx);

/* Build every relcl kernel program for one device (no cache), for diagnostics.
 * On failure returns RELCL_ERR_BUILD and relcl_last_error() holds the build log;
 * RELCL_ERR_INVALID_ARG where RELCL_CPU_VEC is set to other than 4, 8 or 16. */
relcl_status relcl_build_check(cl_platform_id platform, cl_device_id device);

/* Names of the kernel program families relcl compiles ("attention", ...), NULL-ended. */
const char *const *relcl_program_names(void);

/* ---- buffers on the context -------------------------------------------------------- */

/* Allocate n floats (or n int32 values: the same size) on the device. */
relcl_status relcl_alloc(relcl_context *ctx, size_t n, cl_mem *out);
/* Blocking copies between host and device; n elements of 4 bytes. */
relcl_status relcl_write(relcl_context *ctx, relcl_buf dst, const void *src, size_t n);
relcl_status relcl_read(relcl_context *ctx, relcl_buf src, void *dst, size_t n);
/* Set n floats to value. */
relcl_status relcl_fill(relcl_context *ctx, relcl_buf dst, float value, size_t n);

/* ---- relation-aware attention ------------------------------------------------------ */

/* One multi-head attention call.
 *   Q          (batch, heads, nq, head_dim)
 *   K, V       (batch, heads, nk, head_dim)
 *   wK, wV     (2*max_rel+1, head_dim), or (heads, 2*max_rel+1, head_dim) with per_head
 *   key_len    (batch) int32, keys j >= key_len[b] are masked; absent = all nk keys
 *   Z          (batch, heads, nq, head_dim)  output
 *   probs      (batch, heads, nq, nk) softmax weights before dropout, kept for backward
 *
 *   e_ij = (q_i . k_j + q_i . wK[r(i,j)]) / sqrt(head_dim),
 *   r(i,j) = clamp(j - (q_pos0 + i), -max_rel, max_rel) + max_rel
 *   alpha = softmax_j(e) (masked keys get 0; a row with every key masked is all 0)
 *   z_i = sum_j alpha'_ij (v_j + wV[r(i,j)]),  alpha' = dropout(alpha)
 *
 * Dropout keeps weight (b,h,i,j) iff word j mod 4 of Philox4x32-10 with key seed and
 * counter (q, stream), q = row * ceil(nk/4) + floor(j/4), row = (b*heads + h)*nq + i, is
 * >= dropout * 2^32 (a call decides four keys of one row), and scales kept weights by
 * 1/(1-dropout): the same mask on every device. */
typedef struct relcl_attn_desc {
  int batch, heads, nq, nk, head_dim;
  int relative;  /* 1: add the relative terms (needs wK, and wV unless keys_only) */
  int max_rel;   /* clipping distance k >= 0; k = 0 carries no position information */
  int per_head;  /* 1: one table per head */
  int keys_only; /* 1: no a^V term (wV unused) */
  int causal;    /* 1: mask keys after the query's position */
  int q_pos0;    /* position of query 0 on the key axis (incremental decoding); 0 for self */
  float dropout; /* on the attention weights, in [0, 1) */
  uint64_t seed, stream;
} relcl_attn_desc;

/* Self-attention over n positions with relative positions clipped at max_rel. */
relcl_attn_desc relcl_attn_desc_self(int batch, int heads, int n, int head_dim, int max_rel);
/* Cross attention (nq queries over nk keys), relative terms off. */
relcl_attn_desc relcl_attn_desc_cross(int batch, int heads, int nq, int nk, int head_dim);

/* probs may be absent (inference): scratch from the context's pool is used. */
relcl_status relcl_attn_forward(relcl_context *ctx, const relcl_attn_desc *desc, relcl_buf Q,
                                relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                relcl_buf key_len, relcl_buf Z, relcl_buf probs);

/* Gradients from dZ. dQ, dK, dV are overwritten; dwK and dwV are accumulated (+=) so
 * that micro-batches and layers sharing a table add up; absent ones are skipped (dwV
 * with keys_only, both without relative). probs is what forward wrote. */
relcl_status relcl_attn_backward(relcl_context *ctx, const relcl_attn_desc *desc, relcl_buf Q,
                                 relcl_buf K, relcl_buf V, relcl_buf wK, relcl_buf wV,
                                 relcl_buf key_len, relcl_buf probs, relcl_buf dZ,
                                 relcl_buf dQ, relcl_buf dK, relcl_buf dV, relcl_buf dwK,
                                 relcl_buf dwV);

/* Training without computing the forward's dropout again: relcl_attn_forward_saved is
 * relcl_attn_forward that also leaves alpha' = dropout(alpha) and, with the wV term, its sums
 * by relative label in saved (relcl_attn_saved_size(desc) floats; probs is then required),
 * and relcl_attn_backward_saved is relcl_attn_backward reading them there instead of
 * computing them again from probs (a pass over the weights fewer, the same results bit for
 * bit). saved must hold what the forward of the same desc and inputs left.
 * relcl_attn_saved_size returns 0 for a desc relcl_attn_forward would refuse. */
size_t relcl_attn_saved_size(const relcl_attn_desc *desc);
relcl_status relcl_attn_forward_saved(relcl_context *ctx, const relcl_attn_desc *desc,
                                      relcl_buf Q, relcl_buf K, relcl_buf V, relcl_buf wK,
                                      relcl_buf wV, relcl_buf key_len, relcl_buf Z,
                                      relcl_buf probs, relcl_buf saved);
relcl_status relcl_attn_backward_saved(relcl_context *ctx, const relcl_attn_desc *desc,
                                       relcl_buf Q, relcl_buf K, relcl_buf V, relcl_buf wK,
                                       relcl_buf wV, relcl_buf key_len, relcl_buf probs,
                                       relcl_buf saved, relcl_buf dZ, relcl_buf dQ,
                                       relcl_buf dK, relcl_buf dV, relcl_buf dwK,
                                       relcl_buf dwV);

/* ---- profiling and device-memory statistics ---------------------------------------- */

/* The parts of a training step device time is counted under. A GEMM's part is chosen where
 * relcl calls it (the relative-position products Q wK^T, B wV and their gradients are
 * RELATIVE_GEMM, every other product CONTENT_GEMM); a kernel's by its name. */
typedef enum relcl_profile_part {
  RELCL_PART_CONTENT_GEMM = 0, /* projections, Q K^T, A V, feed-forward, output layer */
  RELCL_PART_RELATIVE_GEMM,    /* Q wK^T, B wV, and their backward */
  RELCL_PART_ATTENTION_ROWS,   /* softmax / gather / bucket / dropout passes over weights;
                                  on CPUs attention in one kernel a head, its products too */
  RELCL_PART_LAYER_NORM,
  RELCL_PART_DROPOUT,          /* residual and embedding dropout */
  RELCL_PART_LOSS,             /* label-smoothed cross-entropy, argmax */
  RELCL_PART_OPTIMIZER,        /* Adam, gradient norm */
  RELCL_PART_COPIES,           /* host transfers, fills, head layout and cache copies */
  RELCL_PART_OTHER,            /* element-wise: bias, ReLU, adds, embeddings, positions */
  RELCL_PART_COUNT
} relcl_profile_part;

/* "content GEMMs", "relative GEMMs", ... (static). */
const char *relcl_profile_part_name(relcl_profile_part part);

/* Timings of one kernel, or of one GEMM shape, summed since the last reset. */
typedef struct relcl_profile_entry {
  const char *name; /* kernel name, "SGEMM[ A^T][ B^T] MxNxK xBATCH" for CLBlast's products,
                     * the same with relcl's kernel (gemm_cpu, gemm_heads...) in place of SGEMM
                     * for relcl's own products, "kernel MxNxK" for its label products; valid
                     * until reset */
  relcl_profile_part part;
  double ms;        /* device time (CL_PROFILING_COMMAND_START to _END), summed */
  long calls;
  size_t m, n, k, batch; /* a product's shape; 0 for other kernels and copies */
} relcl_profile_entry;

/* Totals since the last reset. busy_ms: summed device time of every command (the queue is
 * in order, so commands do not overlap); span_ms: from the first command's start to the
 * last one's end. */
typedef struct relcl_profile_summary {
  long commands;
  double busy_ms, span_ms;
  double part_ms[RELCL_PART_COUNT];
} relcl_profile_summary;

/* Start (on = 1) or stop (0) timing every command relcl enqueues. Events are kept, not
 * waited on: they are read at relcl_finish and by the calls below, so profiling does not
 * add a synchronization per command. A queue created without profiling (RELCL_PROFILE
 * unset) is finished and replaced by one with it: fetch relcl_context_queue afterwards;
 * a caller's own queue (relcl_context_create_from_cl) is never replaced, so without
 * CL_QUEUE_PROFILING_ENABLE it is RELCL_ERR_INVALID_ARG.
 * RELCL_PROFILE=1 turns this on at context creation and prints the table at destroy. */
relcl_status relcl_profile_enable(relcl_context *ctx, int on);
/* Forget every timing collected so far (pending commands are waited for first). */
relcl_status relcl_profile_reset(relcl_context *ctx);
/* The number of entries, after waiting for the pending commands; -1 on error. */
int relcl_profile_count(relcl_context *ctx);
relcl_status relcl_profile_entry_get(relcl_context *ctx, int i, relcl_profile_entry *out);
relcl_status relcl_profile_summary_get(relcl_context *ctx, relcl_profile_summary *out);

/* Device memory relcl holds for this context, in bytes. alloc: buffers from relcl_alloc
 * that are still alive (the model's arenas and activations are such buffers); scratch: the
 * buffers the context's scratch pool keeps; scratch_used_peak: the most scratch requested
 * and in use at one time (what attention needs beyond its arguments, independent of which
 * pooled buffers happened to serve it). Peaks are high-water marks since the last reset. */
typedef struct relcl_memory_stats {
  size_t alloc_bytes, alloc_peak;
  size_t scratch_bytes, scratch_peak;
  size_t scratch_used_peak;
  size_t total_peak; /* alloc + scratch held at once */
} relcl_memory_stats;

relcl_status relcl_memory_stats_get(const relcl_context *ctx, relcl_memory_stats *out);
/* Set every peak to the current value. */
relcl_status relcl_memory_reset_peaks(relcl_context *ctx);

/* ---- absolute positions (the baseline) -------------------------------------------- */

/* x (batch, n, d_model) += PE(pos0 + t), with PE(p, 2i) = sin(p / 10000^(2i/d_model)) and
 * PE(p, 2i+1) = cos(p / 10000^(2i/d_model)). */
relcl_status relcl_posenc_add(relcl_context *ctx, relcl_buf x, int batch, int n, int d_model,
                              int pos0);

#ifdef __cplusplus
}
#endif
#endif
