/* The one place that calls CLBlast, and the one door to every GEMM: relcl is row-major
 * throughout; see product() for the column-major call. The batched per-head products go to
 * relcl's own kernels on CPUs (kernels/gemm.cl). */
#include "flags.h" /* RELCL_CPU_*: gemm_cpu's block and gemm_cpu_bt's longest sum */
#include "internal.h"

#include <clblast_c.h>
#include <stdio.h>
#include <string.h>

static relcl_status clblast_fail(CLBlastStatusCode code, const char *what, size_t m, size_t n,
                                 size_t k, size_t batch) {
  relcl_status st = RELCL_ERR_CLBLAST;
  /* CLBlast reuses OpenCL's status numbers */
  if (code == CLBlastOpenCLOutOfResources || code == CLBlastOpenCLOutOfHostMemory ||
      code == (CLBlastStatusCode)CL_MEM_OBJECT_ALLOCATION_FAILURE)
    st = RELCL_ERR_OUT_OF_MEMORY;
  return relcl__fail_code(st, (int)code,
                          "CLBlast %s (m=%zu n=%zu k=%zu batch=%zu) failed with status %d", what,
                          m, n, k, batch, (int)code);
}

static CLBlastTranspose transposed(bool t) {
  return t ? CLBlastTransposeYes : CLBlastTransposeNo;
}

/* An operand where CLBlast's indirect kernel reads it in place: at offset 0 of its buffer.
 * CLBlast copies any other operand to a padded temporary first (and C back after), however
 * well its sizes fit the kernel's tiles; relcl's operands sit at offsets in arenas and pools,
 * so a sub-buffer that starts at the operand stands in for it where the device allows that
 * origin (CL_DEVICE_MEM_BASE_ADDR_ALIGN). Where it does not, the operand goes as it is and
 * CLBlast copies it: slower, the same result. */
typedef struct {
  cl_mem mem;
  size_t offset;
  cl_mem sub; /* released after the call (the enqueued kernels keep it alive) */
} operand;

static operand at_zero(const relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                       size_t ld) {
  operand o = {x.mem, x.offset, NULL};
  size_t origin = x.offset * sizeof(float);
  if (x.offset == 0 || ctx->sub_align == 0 || origin % ctx->sub_align != 0) return o;
  cl_buffer_region region = {origin, ((rows - 1) * ld + cols) * sizeof(float)};
  cl_int err;
  cl_mem sub = clCreateSubBuffer(x.mem, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
  if (err == CL_SUCCESS) o = (operand){sub, 0, sub};
  return o;
}

/* Which operand relcl transposes itself before CLBlast's indirect kernel (GEMMK 0) runs:
 * called as one_call() calls it, the kernel reads relcl's A as k x m (A transposed) and
 * relcl's B as k x n (B as it is), and copies any other operand into a temporary with its
 * TransposePadMatrix kernel first. On PoCL that kernel is slow: 9% of the issue-8 step's
 * time on Zen 1 (perf), where relcl's `transpose` (kernels/util.cl) moves the same data in
 * a fraction of it. So on CPU contexts (the item shape, kernels/common.cl) relcl transposes
 * such an operand into a scratch buffer of exactly its size, where its sizes are whole tiles
 * of the kernel (the tuning's NWG along m, MWG along n, KWG along k) and CLBlast then reads
 * it in place; elsewhere CLBlast copies as before. */
static bool own_transpose(const relcl_context *ctx, size_t k, size_t rows_tile_dim,
                          size_t tile) {
  return ctx->row_item && !ctx->gemm_kernel_1 && tile > 0 && ctx->gemm_k_tile > 0 &&
         rows_tile_dim % tile == 0 && k % ctx->gemm_k_tile == 0;
}

/* The rows of x whose column sums one block of the transpose adds up (kernels/util.cl's
 * T_SIDE): the chunks of its partial sums are ceil(rows / this) */
static size_t transpose_side(const relcl_context *ctx) { return ctx->row_item ? 16 : 8; }

/* relcl__transpose, with panel > 0 into panels of that many of out's columns, panel_stride
 * floats apart, and with sums.mem set x's partial column sums there (chunks of
 * transpose_side() rows, cols floats apart: kernels/util.cl); its event in ev (may be NULL) */
static relcl_status transpose_run(relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                                  size_t ld, relcl_buf out, size_t ld_out, size_t panel,
                                  size_t panel_stride, relcl_buf sums, cl_event *ev) {
  if (rows == 0 || cols == 0) return RELCL_OK;
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "util", "transpose", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  cl_uint ld_in = (cl_uint)ld, ldo = (cl_uint)ld_out, r = (cl_uint)rows, c = (cl_uint)cols;
  relcl__buf_arg(&a, x, NULL);
  RELCL__ARG(&a, ld_in);
  relcl__buf_arg(&a, out, NULL);
  RELCL__ARG(&a, ldo);
  RELCL__ARG(&a, r);
  RELCL__ARG(&a, c);
  const cl_uint pw = (cl_uint)panel, ps = (cl_uint)panel_stride;
  RELCL__ARG(&a, pw);
  RELCL__ARG(&a, ps);
  const cl_int with_sums = sums.mem != NULL;
  relcl__buf_arg(&a, sums, out.mem);
  RELCL__ARG(&a, with_sums);
  /* blocks of 8 x 8 a work-item, or of 16 x 16 in the item shape (kernels/util.cl) */
  const size_t side = transpose_side(ctx);
  const size_t bc = (cols + side - 1) / side;
  size_t wg[2] = {relcl__wg(ctx, bc, k->max_wg < 16 ? k->max_wg : 16), 1};
  size_t global[2] = {(bc + wg[0] - 1) / wg[0] * wg[0], (rows + side - 1) / side};
  return relcl__enqueue(ctx, k, &a, 2, global, wg, ev);
}

relcl_status relcl__transpose(relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                              size_t ld, relcl_buf out, size_t ld_out) {
  return transpose_run(ctx, x, rows, cols, ld, out, ld_out, 0, 0, RELCL_BUF_NONE, NULL);
}

/* Scratch for the partial column sums of a rows x cols matrix, one row of them for each
 * chunk of transpose_side(ctx) rows (transpose_sums' blocks), into *sums */
static relcl_status colsums_get(relcl_context *ctx, size_t rows, size_t cols,
                                relcl__colsums *sums) {
  sums->chunks = (rows + transpose_side(ctx) - 1) / transpose_side(ctx);
  return relcl__pool_get(ctx, sums->chunks * cols * sizeof(float), &sums->part);
}

/* x^T into a scratch buffer *out (cols x rows, ld rows) the caller gives back to the pool;
 * with sums (not NULL), x's partial column sums into another, *sums (transpose_run). */
static relcl_status transposed_copy(relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                                    size_t ld, cl_mem *out, relcl__colsums *sums) {
  relcl_status st = relcl__pool_get(ctx, rows * cols * sizeof(float), out);
  relcl_buf s = RELCL_BUF_NONE;
  if (st == RELCL_OK && sums) {
    st = colsums_get(ctx, rows, cols, sums);
    s = relcl_buf_at(sums->part, 0);
  }
  return st == RELCL_OK
             ? transpose_run(ctx, x, rows, cols, ld, relcl_buf_at(*out, 0), rows, 0, 0, s, NULL)
             : st;
}

/* transposed_copy's column sums of x (rows x cols, rows ld apart) without the copy
 * (kernels/util.cl column_sums: the same blocks, the same bits), into *sums */
static relcl_status column_sums(relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                                size_t ld, relcl__colsums *sums) {
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "util", "column_sums", &k);
  if (st == RELCL_OK) st = colsums_get(ctx, rows, cols, sums);
  if (st != RELCL_OK) return st;
  const size_t side = transpose_side(ctx);
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  const cl_uint ld_in = (cl_uint)ld, r = (cl_uint)rows, c = (cl_uint)cols;
  relcl__buf_arg(&a, x, NULL);
  RELCL__ARG(&a, ld_in);
  RELCL__ARG(&a, r);
  RELCL__ARG(&a, c);
  relcl__buf_arg(&a, relcl_buf_at(sums->part, 0), NULL);
  size_t global[2] = {(cols + side - 1) / side, sums->chunks}, local[2] = {1, 1};
  return relcl__enqueue(ctx, k, &a, 2, global, local, NULL);
}

/* gemm_cpu's B in panels of 2 W columns (kernels/gemm.cl's gemm_pack): each block of the
 * product then reads its rows one after the other, where B's own rows, ldb floats apart,
 * cross a page every few steps of the sum (or every step: ldb 1024 or more), and the CPU's
 * prefetchers stop at pages. B as laid out is copied into panels when its sum is longer than
 * RELCL_CPU_PACK_K and C has at least RELCL_CPU_PACK_REUSE rows (the copy moves k n floats
 * once, the product reads them once per block of rows; gemm_run's copy of a transposed A asks
 * the same of C's columns); a transposed B goes into panels as it is transposed, at no extra
 * cost. On AVX-512 devices this first applied only to rows a page or more apart: Zen 5,
 * relcl-bench's SGEMM measure (1024^3,
 * B transposed, rows 4 KB apart), four interleaved pairs: 281-346 GFLOP/s in rows of B,
 * 458-497 in panels; its issue-8 step's content GEMMs 486 and 490 -> 472 and 478 ms (B^T
 * 4000x1024x256 32 -> 28, A^T 256x1024x4000 37 -> 35, ...), where most rows are 1 KB apart.
 *
 * Where a block's row of B is one cache line or less (W 8 or 4: AVX2, SSE2, 128-bit SIMD), a
 * step of the sum reads one line of B, and rows 1 KB apart already starve the prefetchers:
 * there B goes into panels for every product past gemm_cpu_batch's narrow ones
 * (k > RELCL_CPU_NARROW_K), and a transposed A is copied out likewise.
 * Zen 3 EPYC (AVX2), a harness alternating both rules, median of 5 to 15: 1048x256x8000 (the
 * output layer's input gradient, B rows 1 KB apart) 71 -> 33 ms, 4000x256x1024 20.8 -> 16.3,
 * 4000x1024x256 25.4 -> 20.9; A^T 768x256x4000 22.9 -> 17.9, 256x1024x4000 23.1 -> 19.2,
 * 8000x256x1048 52.1 -> 47.2; 512x128x128 to 512x512x128 (the tiny preset's) within 0.1 ms
 * either way. PoCL's SSE2 code on the same machine: 1048x256x8000 251 -> 167 ms, the others
 * within 5%.
 *
 * Since session 33 AVX-512 devices also pack whatever ldb (and copy out a transposed A
 * whatever lda), where the rule above had asked for rows 1024 floats or more apart: on a
 * Sapphire Rapids-class Xeon (2 MB L2 a core) relcl-bench's issue-8 step, two interleaved
 * pairs, content GEMMs 671 and 655 -> 620 and 595 ms, the weight gradients A^T
 * 256x1024x4000 57.5 and 56.9 -> 48.7 and 46.3 ms, 768x256x4000 42.3 and 42.5 -> 36.9 and
 * 34.5, 256x256x4000 33.2 and 33.5 -> 29.3 and 28.6, the forward 4000x256x1024 36.5 and 37.0
 * -> 33.9 and 34.4 (B's rows 1 KB apart). And every sum past gemm_cpu_batch's narrow ones,
 * where AVX-512 had asked for one over 256: the feed-forward's input gradient (ReLU's
 * backward in the store, 4000x1024x256, B's rows 4 KB apart) 48.6 and 52.7 -> 40.2 and 39.5
 * ms, the other products within 4%; the step 1.303 and 1.297 -> 1.328 and 1.332 steps/s.
 * Not measured on the Zen 5 since. */
#define RELCL_CPU_PACK_K RELCL_CPU_NARROW_K
#define RELCL_CPU_PACK_REUSE 256

/* Whether gemm_cpu reads a B as laid out (ldb floats apart, C m rows) through panels, by the
 * rule above; on AVX-512 devices since session 43 only where B's rows are a page or more
 * apart (ldb 1024 or more) or C has 2048 rows or more: with fewer rows the copy's own pass,
 * and its command, cost more than the product gains. Zen 5 (1 MB L2), a harness alternating
 * both rules in one process (medians of 31 to 41 pairs, the same bits), input gradients
 * dx = dy W, m x n x k: 512x128x512 0.96, 512x512x128 0.98, 768x128x512 0.85, 960x512x128
 * 0.87, 1536x128x2000 0.97, 1536x256x768 0.94, 1048x256x8000 (issue 8's output layer)
 * 0.98, 856x256x8000 0.95 of the time without the panels; with them kept: 1536x1024x256
 * 1.09 and 2048x1024x256 1.12 (rows 4 KB apart), 2048x256x1024 1.10 without. relcl-bench's
 * default step (the tiny preset, 512 rows), two builds alternated, 200 pairs, twice: 0.985
 * and 0.984 of the time. */
static bool pack_b(const relcl_context *ctx, size_t m, size_t ldb) {
  return ctx->cpu_vec >= 16 ? m >= 2048 || ldb >= 1024 : m >= RELCL_CPU_PACK_REUSE;
}

/* The floats of op(B)'s panels (k x n in panels of w = 2 W columns), or 0 where a transposed
 * B cannot go into them (w not a multiple of the transpose's block side) */
static size_t panels_floats(const relcl_context *ctx, bool trans, size_t k, size_t n) {
  const size_t w = 2 * (size_t)ctx->cpu_vec;
  return trans && w % (ctx->row_item ? 16 : 8) != 0 ? 0 : (n + w - 1) / w * k * w;
}

/* panels()'s copy into out (panels_floats), kern its gemm_pack where not trans */
static relcl_status panels_into(relcl_context *ctx, bool trans, relcl__kernel_entry *kern,
                                relcl_buf b, size_t ldb, size_t k, size_t n, cl_mem out,
                                size_t *panel) {
  const size_t w = 2 * (size_t)ctx->cpu_vec;
  *panel = k * w;
  if (trans) /* B's rows are op(B)'s columns */
    return transpose_run(ctx, b, n, k, ldb, relcl_buf_at(out, 0), w, w, k * w,
                         RELCL_BUF_NONE, NULL);
  relcl__args args = {kern->kernel, 0, CL_SUCCESS};
  const cl_uint lb = (cl_uint)ldb, kk = (cl_uint)k, nn = (cl_uint)n;
  relcl__buf_arg(&args, b, NULL);
  RELCL__ARG(&args, lb);
  RELCL__ARG(&args, kk);
  RELCL__ARG(&args, nn);
  relcl__buf_arg(&args, relcl_buf_at(out, 0), NULL);
  size_t global[2] = {(n + w - 1) / w, (k + 15) / 16}, local[2] = {1, 1};
  return relcl__enqueue(ctx, kern, &args, 2, global, local, NULL);
}

/* op(B) (k x n: B k x n, ld ldb, or with trans B n x k) into panels of w = 2 W of its
 * columns in a scratch buffer *out the caller gives back to the pool: panel jb holds rows
 * 0 .. k-1 of columns jb w .. jb w + w - 1 at jb k w, ld w (*panel = k w). *out NULL: with
 * trans, w is not a multiple of the transpose's block side. */
static relcl_status panels(relcl_context *ctx, bool trans, relcl_buf b, size_t ldb, size_t k,
                           size_t n, cl_mem *out, size_t *panel) {
  const size_t floats = panels_floats(ctx, trans, k, n);
  *out = NULL;
  if (floats == 0) return RELCL_OK;
  relcl__kernel_entry *kern = NULL;
  relcl_status st = trans ? RELCL_OK : relcl__kernel(ctx, "gemm", "gemm_pack", &kern);
  if (st == RELCL_OK) st = relcl__pool_get(ctx, floats * sizeof(float), out);
  if (st != RELCL_OK) return st;
  return panels_into(ctx, trans, kern, b, ldb, k, n, *out, panel);
}

/* ---- B^T's panels kept between products (relcl__panels_keep) ----
 * relcl-translate on the demo's model (beam 4, model-207 Xeon) spent 4% of its CPU samples
 * in the transposes of its decoder's weights, each copied into panels again for every
 * product of every step. The kept panels count as scratch (relcl_memory_stats). */

/* The kept panels count as scratch: add bytes to the pool's held bytes and take off gone */
static void kept_held(relcl_context *ctx, size_t bytes, size_t gone) {
  ctx->pool.held = ctx->pool.held + bytes - gone;
  if (ctx->pool.held > ctx->pool.held_peak) ctx->pool.held_peak = ctx->pool.held;
  relcl__mem_note_scratch(ctx);
}

void relcl__panels_drop(relcl_context *ctx) {
  relcl__kept *kp = &ctx->kept;
  for (int i = 0; i < kp->n; i++)
    if (kp->e[i].panels != kp->batch) clReleaseMemObject(kp->e[i].panels);
  kept_held(ctx, 0, kp->bytes);
  kp->src = NULL;
  kp->listed = false;
  kp->n = 0;
  kp->bytes = 0;
}

void relcl__panels_keep(relcl_context *ctx, cl_mem mem) {
  relcl__panels_drop(ctx);
  ctx->kept.src = mem;
}

/* op(B) = B^T's panels (B n x k at b, rows ldb apart) from the kept ones: found, or made
 * into a buffer of their own and kept where b lies in the kept buffer and room is left;
 * out->mem NULL where not kept (the caller makes its own copy, as without a keep). */
static relcl_status kept_panels(relcl_context *ctx, relcl_buf b, size_t ldb, size_t k,
                                size_t n, relcl_buf *out, size_t *panel) {
  relcl__kept *kp = &ctx->kept;
  const size_t bytes = panels_floats(ctx, true, k, n) * sizeof(float);
  *out = RELCL_BUF_NONE;
  if (kp->src == NULL || b.mem != kp->src || bytes == 0) return RELCL_OK;
  for (int i = 0; i < kp->n; i++) {
    const relcl__kept_panel *e = &kp->e[i];
    if (e->offset == b.offset && e->ldb == ldb && e->k == k && e->n == n) {
      *out = relcl_buf_at(e->panels, e->at);
      *panel = k * 2 * (size_t)ctx->cpu_vec;
      return RELCL_OK;
    }
  }
  if (kp->listed || kp->n == RELCL__KEPT_PANELS || kp->bytes + bytes > RELCL__KEPT_BYTES ||
      bytes > ctx->max_alloc)
    return RELCL_OK;
  cl_int err;
  cl_mem mem = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) return RELCL_OK; /* not kept: the product makes its own copy */
  const relcl_status st = panels_into(ctx, true, NULL, b, ldb, k, n, mem, panel);
  if (st != RELCL_OK) {
    clReleaseMemObject(mem);
    return st;
  }
  kp->e[kp->n++] = (relcl__kept_panel){b.offset, ldb, k, n, mem, 0};
  kp->bytes += bytes;
  kept_held(ctx, bytes, 0);
  *out = relcl_buf_at(mem, 0);
  return RELCL_OK;
}

/* The uints of an entry of transpose_batch's table (kernels/util.cl TRANSPOSE_ENTRY) */
enum { TRANSPOSE_ENTRY = 5 };

/* Until session 43 each training step transposed every weight of its forward into panels in
 * a launch of its own (the B^T products x W^T), and the output layer's embedding once a
 * chunk of logits. Where the panels cannot be had (too many, too large, no memory), nothing
 * is kept and each product makes its own copy as before. */
relcl_status relcl__panels_keep_all(relcl_context *ctx, cl_mem mem, const relcl__panel_src *list,
                                    int count) {
  relcl__panels_drop(ctx); /* kept again (kp->src) only once the panels are made */
  relcl__kept *kp = &ctx->kept;
  if (!ctx->gemm_cpu || count <= 0 || count > RELCL__KEPT_PANELS) return RELCL_OK;
  const size_t w = 2 * (size_t)ctx->cpu_vec, side = transpose_side(ctx);
  const size_t n_table = (size_t)count * TRANSPOSE_ENTRY;
  cl_uint *table = malloc(n_table * sizeof *table); /* NULL once kp->table_host holds it */
  if (table == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  size_t floats = 0, blocks = 0;
  bool fits = true;
  for (int i = 0; i < count && fits; i++) {
    const relcl__panel_src *s = &list[i];
    const size_t f = panels_floats(ctx, true, s->k, s->n);
    fits = f > 0 && floats + f <= UINT32_MAX && s->offset <= UINT32_MAX;
    cl_uint *t = table + (size_t)i * TRANSPOSE_ENTRY;
    t[0] = (cl_uint)s->offset, t[1] = (cl_uint)s->n, t[2] = (cl_uint)s->k;
    t[3] = (cl_uint)floats, t[4] = (cl_uint)blocks;
    kp->e[i] = (relcl__kept_panel){s->offset, s->k, s->k, s->n, NULL, floats};
    floats += f;
    blocks += (s->n + side - 1) / side * ((s->k + side - 1) / side);
  }
  const size_t bytes = floats * sizeof(float);
  relcl_status st = RELCL_OK; /* where nothing is kept, each product makes its own copy */
  if (!fits || bytes > RELCL__KEPT_BYTES || bytes > ctx->max_alloc || blocks > UINT32_MAX)
    goto done;
  cl_int err = CL_SUCCESS;
  if (kp->batch_bytes < bytes) { /* grown; kept from step to step */
    if (kp->batch) clReleaseMemObject(kp->batch);
    kp->batch = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    const size_t had = kp->batch_bytes;
    kp->batch_bytes = err == CL_SUCCESS ? bytes : 0;
    kept_held(ctx, kp->batch_bytes, had);
    if (err != CL_SUCCESS) goto done;
  }
  /* the table on the device: made again only when the operands change */
  if (kp->table_n != n_table || memcmp(kp->table_host, table, n_table * sizeof *table) != 0) {
    if (kp->table) clReleaseMemObject(kp->table);
    free(kp->table_host);
    kp->table_host = table, table = NULL;
    kp->table = clCreateBuffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                               n_table * sizeof *kp->table_host, kp->table_host, &err);
    kp->table_n = err == CL_SUCCESS ? n_table : 0;
    if (err != CL_SUCCESS) goto done;
  }
  relcl__kernel_entry *k;
  if ((st = relcl__kernel(ctx, "util", "transpose_batch", &k)) != RELCL_OK) goto done;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  const cl_uint c = (cl_uint)count, nb = (cl_uint)blocks, pw = (cl_uint)w;
  RELCL__ARG(&a, mem);
  RELCL__ARG(&a, kp->batch);
  RELCL__ARG(&a, kp->table);
  RELCL__ARG(&a, c);
  RELCL__ARG(&a, nb);
  RELCL__ARG(&a, pw);
  size_t wg = relcl__wg(ctx, blocks, k->max_wg < 16 ? k->max_wg : 16),
         global = (blocks + wg - 1) / wg * wg;
  if ((st = relcl__launch(ctx, k, &a, 1, &global, &wg)) != RELCL_OK) goto done;
  for (int i = 0; i < count; i++) kp->e[i].panels = kp->batch;
  kp->src = mem;
  kp->n = count;
  kp->listed = true;
done:
  free(table);
  return st;
}

/* One row-major product C = alpha op(A) op(B) + beta C, given to CLBlast as the column-major
 * C^T = alpha op(B)^T op(A)^T (the same numbers in the same memory). CLBlast's indirect
 * kernel (GEMMK 0) keeps C column-major: called row-major it transposes C into a temporary
 * and back around every product, and A before every product whose A is not transposed;
 * called this way round it transposes neither C nor, for a weight gradient (A^T B), either
 * operand, and reads in place every operand at offset 0 whose sizes are multiples of its
 * tiles. On Zen 1 with the shipped tuning that ran fifteen of the largest products of the
 * issue-8 step 11% faster than row-major (docs/speed.md, "What is left"). The operands it
 * would still transpose, relcl may transpose first (own_transpose). */
static relcl_status one_call(relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                             size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                             relcl_buf b, size_t ldb, float beta, relcl_buf c, size_t ldc,
                             cl_event *ev) {
  cl_mem ta = NULL, tb = NULL;
  relcl_status st = RELCL_OK;
  if (!trans_a && own_transpose(ctx, k, m, ctx->gemm_row_tile)) {
    st = transposed_copy(ctx, a, m, k, lda, &ta, NULL);
    a = relcl_buf_at(ta, 0), lda = m, trans_a = true;
  }
  if (st == RELCL_OK && trans_b && own_transpose(ctx, k, n, ctx->gemm_col_tile)) {
    st = transposed_copy(ctx, b, n, k, ldb, &tb, NULL);
    b = relcl_buf_at(tb, 0), ldb = n, trans_b = false;
  }
  if (st == RELCL_OK) {
    operand A = at_zero(ctx, a, trans_a ? k : m, trans_a ? m : k, lda);
    operand B = at_zero(ctx, b, trans_b ? n : k, trans_b ? k : n, ldb);
    operand C = at_zero(ctx, c, m, n, ldc);
    CLBlastStatusCode code =
        CLBlastSgemm(CLBlastLayoutColMajor, transposed(trans_b), transposed(trans_a), n, m, k,
                     alpha, B.mem, B.offset, ldb, A.mem, A.offset, lda, beta, C.mem, C.offset,
                     ldc, &ctx->queue, ev);
    if (A.sub) clReleaseMemObject(A.sub);
    if (B.sub) clReleaseMemObject(B.sub);
    if (C.sub) clReleaseMemObject(C.sub);
    if (code != CLBlastSuccess) st = clblast_fail(code, "SGEMM", m, n, k, 1);
  }
  /* the queue is in order: the product has read them before any later user writes */
  relcl__pool_put(ctx, ta);
  relcl__pool_put(ctx, tb);
  return st;
}

/* A product as CLBlast's indirect kernel runs it best: one_call(), with the rows in whole
 * tiles of the kernel (the tuning's Xgemm NWG) in one call and the rest, fewer than a tile,
 * in a second. CLBlast copies every operand whose size is not a whole number of tiles into a
 * padded temporary, and a training batch's rows rarely are (sentences x longest). Each row
 * of C depends on its own row of op(A) only, so the two calls compute what one would. Below
 * 16 tiles (decoding's products) the copies it would save are small, and one call is kept.
 *
 * Where relcl does not know the tiles (no tuning applied) or CLBlast runs its direct kernel
 * (below the tuning's XGEMM_MIN_INDIRECT_SIZE cubed), which reads every layout in place
 * without copies, the product goes row-major as it is. */
static relcl_status product(relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                            size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                            relcl_buf b, size_t ldb, float beta, relcl_buf c, size_t ldc,
                            cl_event *ev) {
  const size_t tile = ctx->gemm_row_tile;
  const double edge = (double)ctx->gemm_min_indirect;
  if (tile == 0 || (double)m * (double)n * (double)k < edge * edge * edge) {
    CLBlastStatusCode code =
        CLBlastSgemm(CLBlastLayoutRowMajor, transposed(trans_a), transposed(trans_b), m, n, k,
                     alpha, a.mem, a.offset, lda, b.mem, b.offset, ldb, beta, c.mem, c.offset,
                     ldc, &ctx->queue, ev);
    return code == CLBlastSuccess ? RELCL_OK : clblast_fail(code, "SGEMM", m, n, k, 1);
  }
  if (m < 16 * tile || m % tile == 0)
    return one_call(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ev);
  const size_t whole = m / tile * tile;
  relcl_status st = one_call(ctx, trans_a, trans_b, whole, n, k, alpha, a, lda, b, ldb, beta,
                             c, ldc, NULL);
  if (st != RELCL_OK) return st;
  return one_call(ctx, trans_a, trans_b, m - whole, n, k, alpha,
                  relcl_buf_at(a.mem, a.offset + (trans_a ? whole : whole * lda)), lda, b, ldb,
                  beta, relcl_buf_at(c.mem, c.offset + whole * ldc), ldc, ev);
}

/* The arguments relcl's product kernels (kernels/gemm.cl) start with: m, n, k, alpha, beta,
 * then A, B, C, each with its row length and the distance between the products of a batch
 * (A also whether it is transposed) */
static void product_args(relcl__args *args, bool trans_a, size_t m, size_t n, size_t k,
                         float alpha, relcl_buf a, size_t lda, size_t stride_a, relcl_buf b,
                         size_t ldb, size_t stride_b, float beta, relcl_buf c, size_t ldc,
                         size_t stride_c) {
  const cl_uint dims[3] = {(cl_uint)m, (cl_uint)n, (cl_uint)k};
  const cl_uint la = (cl_uint)lda, sa = (cl_uint)stride_a, lb = (cl_uint)ldb,
                sb = (cl_uint)stride_b, lc = (cl_uint)ldc, sc = (cl_uint)stride_c;
  const cl_int ta = trans_a;
  for (int i = 0; i < 3; i++) RELCL__ARG(args, dims[i]);
  RELCL__ARG(args, alpha);
  RELCL__ARG(args, beta);
  relcl__buf_arg(args, a, NULL);
  RELCL__ARG(args, la);
  RELCL__ARG(args, sa);
  RELCL__ARG(args, ta);
  relcl__buf_arg(args, b, NULL);
  RELCL__ARG(args, lb);
  RELCL__ARG(args, sb);
  relcl__buf_arg(args, c, NULL);
  RELCL__ARG(args, lc);
  RELCL__ARG(args, sc);
}

/* The batched products with B transposed and fewer than RELCL_DOTS_BELOW columns on CPU
 * contexts (ctx->gemm_heads): gemm_heads_dots (kernels/gemm.cl), a work-item per row of C. */
static relcl_status dots_product(relcl_context *ctx, bool trans_a, size_t m, size_t n, size_t k,
                                 float alpha, relcl_buf a, size_t lda, size_t stride_a,
                                 relcl_buf b, size_t ldb, size_t stride_b, float beta,
                                 relcl_buf c, size_t ldc, size_t stride_c, size_t batch,
                                 cl_event *ev) {
  relcl__kernel_entry *kern;
  relcl_status st = relcl__kernel(ctx, "gemm", "gemm_heads_dots", &kern);
  if (st != RELCL_OK) return st;
  const cl_uint nb = (cl_uint)batch;
  relcl__args args = {kern->kernel, 0, CL_SUCCESS};
  product_args(&args, trans_a, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
               stride_c);
  RELCL__ARG(&args, nb);
  size_t local = 16, global = (batch * m + local - 1) / local * local;
  return relcl__enqueue(ctx, kern, &args, 1, &global, &local, ev);
}

/* A batch in relcl's gemm_cpu_batch or gemm_cpu_bt (kernels/gemm.cl), a work-item for all
 * rows of a product's block of 2 W columns, asking for the next product's operands as it goes:
 * gemm_cpu_batch with B as laid out, gemm_cpu_bt with B transposed (a transposed copy of each
 * block of B's rows in local memory, for gemm_cpu's sum) */
static relcl_status cpu_columns(relcl_context *ctx, const char *kernel, bool trans_a, size_t m,
                                size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                                size_t stride_a, relcl_buf b, size_t ldb, size_t stride_b,
                                const relcl__gemm_term *t2, float beta, relcl_buf c, size_t ldc,
                                size_t stride_c, size_t heads, size_t c_head, size_t batch,
                                cl_event *ev) {
  relcl__kernel_entry *kern = NULL;
  relcl_status st = relcl__kernel(ctx, "gemm", kernel, &kern);
  if (st != RELCL_OK) return st;
  relcl__args args = {kern->kernel, 0, CL_SUCCESS};
  product_args(&args, trans_a, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
               stride_c);
  if (strcmp(kernel, "gemm_cpu_batch") == 0) { /* its second term: none (k2 0) without t2 */
    const relcl__gemm_term none = {0, a, 0, 0, b, 0, 0}, *t = t2 ? t2 : &none;
    const cl_uint k2 = (cl_uint)t->k, la = (cl_uint)t->lda, sa = (cl_uint)t->stride_a,
                  lb = (cl_uint)t->ldb, sb = (cl_uint)t->stride_b;
    RELCL__ARG(&args, k2);
    relcl__buf_arg(&args, t->a, NULL);
    RELCL__ARG(&args, la);
    RELCL__ARG(&args, sa);
    relcl__buf_arg(&args, t->b, NULL);
    RELCL__ARG(&args, lb);
    RELCL__ARG(&args, sb);
    const cl_uint nh = (cl_uint)(heads > 1 ? heads : 1), ch = (cl_uint)c_head;
    RELCL__ARG(&args, nh);
    RELCL__ARG(&args, ch);
  }
  const size_t nr = 2 * (size_t)ctx->cpu_vec;
  size_t global[2] = {(n + nr - 1) / nr, batch}, local[2] = {1, 1};
  return relcl__enqueue(ctx, kern, &args, 2, global, local, ev);
}

/* A single product with a sum this short or shorter and A, B as laid out goes to
 * gemm_cpu_batch as a batch of blocks of rows (RELCL_CPU_CHUNK_BLOCKS blocks of gemm_cpu's
 * rows each, B shared), so that each block asks for the next one's rows of A and C: a
 * shared table's label sums, 16000x64x33 with beta 1 in the issue-8 step, in a harness on
 * the Zen 5 EPYC with the operands out of cache, 232 us against gemm_cpu's 307 (in cache,
 * 229 against 222; 16000x64x17, which moves C twice for 17 terms, 197 either way). Each
 * element is the same sum as in gemm_cpu. */
#define RELCL_CPU_NARROW_K 64
#define RELCL_CPU_CHUNK_BLOCKS 4

/* The rows of each block such a product goes in, or 0 where it goes to gemm_cpu (gemm_run
 * asks once and passes it to cpu_product) */
static size_t narrow_chunk(const relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                           size_t k) {
  const size_t chunk = RELCL_CPU_CHUNK_BLOCKS * (size_t)RELCL_CPU_MR(ctx->cpu_vec);
  return !trans_a && !trans_b && k <= RELCL_CPU_NARROW_K && m >= 2 * chunk ? chunk : 0;
}

/* gemm_cpu's blocks of rows a work-item (cpu_product): for sums up to this long */
#define RELCL_CPU_BLOCKS_K 1024

/* How many of L1's sets rows `ld` floats apart fall in: x86 CPUs' L1 caches (32 or 48 KB, 8
 * or 12 ways) have 64 sets of 64-byte lines, so addresses 4 KB apart share a set. */
static size_t l1_sets(size_t ld) {
  const size_t s = ld * sizeof(float) % 4096;
  size_t g = 4096, r = s; /* gcd(4096, s) */
  while (r) {
    const size_t t = g % r;
    g = r, r = t;
  }
  return s == 0 ? 1 : 4096 / (g > 64 ? g : 64);
}

/* The padded rows are measured with 8 floats or fewer a vector only (cpu_product's note on
 * blocks); AVX-512 devices keep rows cols floats apart. */
size_t relcl__act_ld(const relcl_context *ctx, size_t cols) {
  return ctx->gemm_cpu && ctx->cpu_vec <= 8 && l1_sets(cols) < 4 ? cols + 16 : cols;
}

/* One product on CPU contexts (ctx->gemm_cpu), or a batch of them with B as laid out, in
 * relcl's gemm_cpu or gemm_cpu_batch (kernels/gemm.cl): B transposed goes through a
 * transposed copy first (the kernel reads B's rows), op(A) is read in place either way.
 * CLBlast's Xgemm, tuned, ran the issue-8 model's products at 90-120 GFLOP/s on the Zen 5
 * EPYC through PoCL, this kernel at 250-530 (docs/speed.md, "One product on a CPU"). */
static relcl_status cpu_product(relcl_context *ctx, bool trans_a, bool trans_b, size_t m,
                                size_t n, size_t k, float alpha, relcl_buf a, size_t lda,
                                size_t stride_a, relcl_buf b, size_t ldb, size_t stride_b,
                                float beta, relcl_buf c, size_t ldc, size_t stride_c,
                                size_t batch, size_t chunk, relcl_buf mask, size_t ldm,
                                cl_int epi, const relcl__gemm_term *t2, size_t heads,
                                size_t c_head, size_t b_panel, const relcl__split *split,
                                cl_event *ev) {
  const size_t mr = RELCL_CPU_MR(ctx->cpu_vec), nr = 2 * (size_t)ctx->cpu_vec;
  if (batch > 1)
    return cpu_columns(ctx, "gemm_cpu_batch", trans_a, m, n, k, alpha, a, lda, stride_a, b, ldb,
                       stride_b, t2, beta, c, ldc, stride_c, heads, c_head, batch, ev);
  if (chunk > 0) {
    const size_t whole = m / chunk, rest = m - whole * chunk;
    relcl_status st =
        cpu_columns(ctx, "gemm_cpu_batch", false, chunk, n, k, alpha, a, lda, chunk * lda, b, ldb,
                    0, NULL, beta, c, ldc, chunk * ldc, 1, 0, whole, rest ? NULL : ev);
    if (st != RELCL_OK || rest == 0) return st;
    return cpu_columns(ctx, "gemm_cpu_batch", false, rest, n, k, alpha,
                       relcl_buf_at(a.mem, a.offset + whole * chunk * lda), lda, 0, b, ldb, 0,
                       NULL, beta, relcl_buf_at(c.mem, c.offset + whole * chunk * ldc), ldc, 0, 1,
                       0, 1, ev);
  }
  /* B transposed: into panels (or, where a transpose block does not fit one, rows), or the
   * kept panels (relcl__panels_keep) */
  cl_mem tb = NULL;
  relcl_buf kept = RELCL_BUF_NONE;
  relcl_status st = RELCL_OK;
  if (trans_b) {
    st = kept_panels(ctx, b, ldb, k, n, &kept, &b_panel);
    if (st == RELCL_OK && !kept.mem) st = panels(ctx, true, b, ldb, k, n, &tb, &b_panel);
    const bool rows = st == RELCL_OK && !tb && !kept.mem;
    if (rows) st = transposed_copy(ctx, b, n, k, ldb, &tb, NULL);
    b = kept.mem ? kept : relcl_buf_at(tb, 0), ldb = rows ? n : nr;
  }
  const cl_uint panel = (cl_uint)(b_panel ? b_panel : nr); /* B's blocks this far apart */
  relcl__kernel_entry *kern = NULL;
  if (st == RELCL_OK) st = relcl__kernel(ctx, "gemm", "gemm_cpu", &kern);
  if (st == RELCL_OK) {
    relcl__args args = {kern->kernel, 0, CL_SUCCESS};
    product_args(&args, trans_a, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                 ldc, stride_c);
    /* Which operand's panel consecutive work-items share: A's rows (the default), or B's
     * columns, so that the larger of op(A) and B stays in cache while the other streams. On
     * AVX-512 devices B's columns for a wide B (over 512 columns). Zen 5, relcl-bench's
     * issue-8 step: 4000x1024x256 and 1048x8000x256 (B^T) 7-20% faster with B's columns
     * shared, the products of 256 columns 5-45% slower. With 8 floats or fewer a vector, B's
     * columns where B is the larger (n > m). Zen 3 EPYC (AVX2), a harness alternating both
     * with the operands out of cache (a 96 MB fill before each call), median of 7: A^T
     * 256x1024x4000 21.4 ms with B's columns shared against 34.8, 1048x8000x256 (B^T) 37.0
     * against 46.8; with A's rows 4000x1024x256 (B^T) 15.0 against 20.8, its input
     * gradient's 16.3 against 22.8, A^T 8000x256x1048 64.9 against 84.2.
     *
     * On AVX-512 devices only where B's columns also fill more than half of L2 (cpu_l2): a
     * B that fits streams from L2 while A's rows stay in L1. Sapphire Rapids-class Xeon (2
     * MB L2), a harness alternating both, operands out of cache: B^T 4000x1024x256 (B 1 MB)
     * 6.35 against 8.16 ms with A's rows shared, B^T 4000x768x256 4.49 against 5.84,
     * 4000x1024x256 (B as laid out) 6.89 against 9.12; B^T 1048x8000x256 (B 8 MB) 16.5 against
     * 23.2 with B's columns shared, A^T 256x1024x4000 (slices of 512: B 2 MB) 9.3 against
     * 11.4. On the Zen 5 (1 MB L2) every product the first rule shares B's columns in holds
     * 768 KB or more of B. */
    const cl_int rows_first =
        ctx->cpu_vec >= 16 ? n > 512 && k * n * sizeof(float) > ctx->cpu_l2 / 2 : n > m;
    RELCL__ARG(&args, rows_first);
    /* what the store applies (gemm_run's epilogues): ReLU's backward with its mask, a bias
     * (then ReLU) with its row; C in M's place without one */
    const cl_uint lm = (cl_uint)ldm;
    relcl__buf_arg(&args, epi ? mask : c, NULL);
    RELCL__ARG(&args, lm);
    RELCL__ARG(&args, epi);
    RELCL__ARG(&args, panel);
    /* C in the heads layout (gemm_run checked that gemm_cpu's blocks lie in one head) */
    const cl_uint sp[3] = {split ? (cl_uint)split->n : 0, split ? (cl_uint)split->head_dim : 0,
                           split ? (cl_uint)split->heads : 0};
    for (int i = 0; i < 3; i++) RELCL__ARG(&args, sp[i]);
    /* How many blocks of rows a work-item runs, one under the other, with the same panel of
     * B (gemm_cpu's `blocks`): four where the sum is at most RELCL_CPU_BLOCKS_K long and either consecutive work-items share B's panel
     * (rows_first) or C's rows fall in 4 or more of L1's sets (l1_sets): a work-item's 24
     * rows of C in one or two sets evict the lines of A and B its next blocks read. Zen 3 EPYC
     * (AVX2), harnesses alternating one and four blocks in one process (operands out of
     * cache before each call, median of 9 to 11), time with four over time with one:
     *  - C's rows in 4 sets or more: B^T 4000x256x256 0.90, 4000x256x256 0.89, 4000x256x512
     *    0.91, 4000x256x768 0.95, 4000x256x1024 0.94, B^T 4000x64x256 0.85, B^T
     *    4000x768x256 0.92-0.96; B^T 4000x1024x256 with C's rows 1040 floats apart 0.90, B^T
     *    4000x512x256 with them 528 apart 0.92; the heads layout's B^T +bias split
     *    4000x768x256, 4000x512x256 and 4000x256x256 (rows 64 floats apart) 0.90-1.00;
     *  - in one or two: B^T 4000x1024x256 1.02-1.10, B^T 4000x512x256 1.01-1.07, B^T
     *    4000x768x256 with C's rows 1024 floats apart 1.05, B^T 4000x256x256 with them 512
     *    apart 1.03 (but B^T 4000x1536x256, two sets, 0.94 twice);
     *  - rows_first: B^T 1048x8000x256 (the output layer's logits) 0.93-0.94, B^T
     *    1048x4000x256 0.87, B^T 512x2048x256 0.90-0.96, decoding's B^T 64x8000x256
     *    0.91-1.00;
     *  - a sum past 1024: 1048x256x8000 1.08-1.30.
     * Two, three and six blocks gained less than four. Each element is the same sum either
     * way. Since session 33 on AVX-512 devices too (8 rows a block there): a Sapphire
     * Rapids-class Xeon, relcl-bench's issue-8 step, two interleaved pairs, B^T 1048x8000x256
     * 51.5 and 51.3 -> 45.9 and 43.7 ms, B^T +bias split 4000x768x256 35.2 and 32.9 -> 29.6
     * and 29.5, B^T 4000x256x256 16.8 and 16.7 -> 15.2 and 15.4; the step 1.233 and 1.221 ->
     * 1.286 and 1.251 steps/s (with B's columns shared only, 1.239 and 1.202). */
    const size_t c_ld = split ? split->head_dim : ldc; /* C's rows this far apart */
    const cl_uint blocks =
        k <= RELCL_CPU_BLOCKS_K && (rows_first || l1_sets(c_ld) >= 4)
            ? 4u
            : 1u;
    RELCL__ARG(&args, blocks);
    /* a work-item a work-group: PoCL runs each as one call, with nothing to loop over */
    size_t cols = (n + nr - 1) / nr, rows = (m + mr * blocks - 1) / (mr * blocks),
           local[3] = {1, 1, 1};
    size_t global[3] = {rows_first ? rows : cols, rows_first ? cols : rows, batch};
    st = relcl__enqueue(ctx, kern, &args, 3, global, local, ev);
  }
  relcl__pool_put(ctx, tb); /* the queue is in order: the product has read it */
  return st;
}

/* The widest B (and rows of B) gemm_cpu_at reads in place: B's rows 2 KB apart or less, a
 * slice of 512 (768) of them, 1 MB (1.5), in L2 while consecutive work-items (C's rows) read
 * it, each row asked for 16 steps ahead. Model-207 Xeon, two settings alternated in one
 * process (h16, 31 rounds, the same bits), against the old path (A transposed, B in panels):
 * A^T 128x512x512 0.69-0.83 of the time, 256x512x512 0.77, 128x512x2048 0.71, 256x512x4000
 * 0.74-0.76. (Session 36 had measured 0.97-1.03 for B's rows 2 KB apart: its requests were
 * empty then, kernels/common.cl.) With rows 4 KB apart (n 1024) it was slower for a long sum
 * (256x1024x4000 1.09; in panels 1.00) though faster for a short one (128x1024x512 0.65). */
#define RELCL_CPU_AT_COLS 512

/* One slice of a weight gradient, C = alpha A^T B + beta C over k rows of A and B (a and b at
 * the slice's first row k0), in relcl's gemm_cpu_at (kernels/gemm.cl), which copies each
 * work-item's block of A^T into local memory and reads B in place; with sums.mem set, A's
 * column sums by chunks of 16 rows there, chunk (k0 + p) / 16 at m floats a chunk.
 * Model-207 Xeon, a harness running this build and the one before it (transposed copy of A,
 * B in panels, gemm_cpu) alternated in one process, medians of 31 to 61 pairs, the same
 * bits: relcl-bench's default configuration's A^T 512x128x512 0.75 of the time, 2000x128x512
 * 0.79, 384x128x512 0.77, 256x128x512 0.76, 128x128x512 1.00; issue 8's A^T 256x256x4000
 * 0.79, 512x256x4000 0.90, 768x256x4000 0.94-1.00, 1024x256x4000 1.04, 8000x256x1048 0.94,
 * 8000x256x856 0.92. */
static relcl_status at_product(relcl_context *ctx, size_t m, size_t n, size_t k, size_t k0,
                               float alpha, relcl_buf a, size_t lda, relcl_buf b, size_t ldb,
                               float beta, relcl_buf c, size_t ldc, relcl_buf sums,
                               cl_event *ev) {
  relcl__kernel_entry *kern;
  relcl_status st = relcl__kernel(ctx, "gemm", "gemm_cpu_at", &kern);
  if (st != RELCL_OK) return st;
  const size_t rows = 4 * (size_t)RELCL_CPU_MR(ctx->cpu_vec);
  const cl_uint dims[3] = {(cl_uint)m, (cl_uint)n, (cl_uint)k};
  const cl_uint la = (cl_uint)lda, lb = (cl_uint)ldb, lc = (cl_uint)ldc, first = (cl_uint)k0;
  const cl_int with_sums = sums.mem != NULL;
  relcl__args args = {kern->kernel, 0, CL_SUCCESS};
  for (int i = 0; i < 3; i++) RELCL__ARG(&args, dims[i]);
  RELCL__ARG(&args, alpha);
  RELCL__ARG(&args, beta);
  relcl__buf_arg(&args, a, NULL);
  RELCL__ARG(&args, la);
  relcl__buf_arg(&args, b, NULL);
  RELCL__ARG(&args, lb);
  relcl__buf_arg(&args, c, NULL);
  RELCL__ARG(&args, lc);
  relcl__buf_arg(&args, sums, c.mem);
  RELCL__ARG(&args, with_sums);
  RELCL__ARG(&args, first);
  size_t global = (m + rows - 1) / rows, local = 1;
  return relcl__enqueue(ctx, kern, &args, 1, &global, &local, ev);
}

/* Who runs a product (relcl__gemm_in decides): CLBlast, one or a batch; relcl's gemm_cpu,
 * gemm_cpu_bt or gemm_heads_dots (kernels/gemm.cl) */
typedef enum { CLBLAST_BATCHED, CLBLAST, CPU, CPU_BT, DOTS } how_t;

/* Batched products with B transposed and fewer columns than this go to gemm_heads_dots.
 * relcl-train's real batches (Zen 5, 8 steps, two runs), Q K^T against gemm_cpu_bt: 7 and 8
 * keys 17-18 and 10 ms against 33-34 and 15-16; 11 keys 14-15 ms either way; 12 keys 15-16
 * against 13. */
#define RELCL_DOTS_BELOW 12

/* Who runs a product of this shape (gemm_run), and its sum in slices of *len, accumulated
 * into C one after the other, always in the same order (*len = k: one piece). */
static how_t route(const relcl_context *ctx, bool trans_a, bool trans_b, size_t m, size_t n,
                   size_t k, size_t batch, size_t *len) {
  how_t how = CLBLAST_BATCHED;
  *len = k;
  if (batch == 1 && ctx->gemm_cpu && trans_b && k <= RELCL_CPU_BT_KMAX && m <= 64) {
    /* B transposed, few rows and a short sum (a shared table's label values, 33 x 16000 x 64
     * in the issue-8 step): gemm_cpu_bt reads each block of B once, where the transposed copy
     * gemm_cpu needs would move all of B twice more (B^T 33x16000x64, Zen 5: 1.8-2.1 ms a
     * step against 4.6 in relcl's earlier labels_shared kernel) */
    how = CPU_BT;
  } else if (batch == 1 && ctx->gemm_cpu) {
    /* A weight gradient (A transposed) with a long sum goes in slices (of 512 until session
     * 43, of at most 768 since: below) on AVX-512 devices: each slice's panels of A and B
     * then stay in cache. Zen 5, a harness: A^T
     * 1024x256x4000 341 GFLOP/s against 216 in one piece, 256x1024x4000 236 against 198,
     * 8000x256x1048 354 against 315. The other products run their whole sum at once
     * (1048x256x8000: 530 in one piece). With 8 floats or fewer a vector, op(A) is copied out
     * and B read in panels (gemm_run), both streams in order, and one piece is faster: Zen 3
     * EPYC (AVX2), a harness alternating both, median of 7: A^T 256x1024x4000 22.4 -> 19.4 ms,
     * 1024x256x4000 21.9 -> 20.6, 768x256x4000 17.3 -> 15.1, 8000x256x1048 44.8 -> 39.4
     * (slices of 384 or 1024 were no better than 512).
     *
     * On AVX-512 devices a product with A as laid out and a sum over 1024 goes in slices of
     * 512 too (the output layer's input gradient, 1048x256x8000): in one piece each block of
     * rows reads all of B's panels (8 MB), which on a core with 2 MB of L2 come from memory
     * every time. Sapphire Rapids-class Xeon (AVX-512, 2 MB L2 a core, session 33), a harness
     * alternating both with the operands out of cache, median of 9: 1048x256x8000 33.6 ->
     * 14.4 ms (128 -> 299 GFLOP/s), 856x256x8000 27.8 -> 12.1; slices of 768 and 1024 within
     * 5% of 512, of 2048 25.7 ms. */
    how = CPU;
    if (ctx->cpu_vec >= 16 && trans_a && k > RELCL_CPU_AT_K) {
      /* Since session 43 a weight gradient's slices are the fewest of at most
       * RELCL_CPU_AT_K (gemm_cpu_at's longest), of equal length in multiples of 16 (its bias
       * sums' chunks), where they were 512 and what was left: each slice reads and writes
       * all of C, so a short last one cost as much as a long one there. Zen 5, two builds
       * alternated in one process (41 pairs): the output layer's A^T 8000x256x1048 (512 +
       * 512 + 24 -> 2 x 528) 0.97 and 0.96 of the time, 8000x256x856 (2 x 432) 0.99,
       * 256x256x4000 (6 x 672) 0.98, the others 0.99-1.00. */
      const size_t pieces = (k + RELCL_CPU_AT_K - 1) / RELCL_CPU_AT_K;
      *len = ((k + pieces - 1) / pieces + 15) / 16 * 16;
    } else if (ctx->cpu_vec >= 16 && k > 1024) {
      *len = 512;
    }
  } else if (batch == 1) {
    how = CLBLAST;
    const size_t chunk = ctx->gemm_k_chunk;
    if (chunk > 0 && k > chunk + chunk / 2) {
      /* the tuning's RelclGemm K_CHUNK (tuning.c), for CLBlast: slices of equal length, a
       * multiple of 128 for a K_CHUNK of 512 or more (every slice then starts where a
       * sub-buffer can, and fills CLBlast's tiles of up to 128 along K), else of 8 (the
       * tests' small K_CHUNK) */
      size_t pieces = (k + chunk - 1) / chunk, align = chunk >= 512 ? 128 : 8;
      *len = ((k + pieces - 1) / pieces + align - 1) / align * align;
    }
  } else if (ctx->gemm_heads) { /* the per-head products on a CPU */
    how = !trans_b ? CPU : n >= RELCL_DOTS_BELOW ? CPU_BT : DOTS;
    if (how == CPU_BT && k > RELCL_CPU_BT_KMAX) *len = RELCL_CPU_BT_KMAX;
  }
  return how;
}

/* Whether the route is gemm_cpu_batch's whole sum: the only kernel that takes a second term
 * and the heads' layout of C (relcl__gemm_plus) */
static bool batch_kernel(how_t how, size_t batch, size_t len, size_t k) {
  return how == CPU && batch > 1 && len == k;
}

/* Whether a product so routed can store C in the heads layout sp (relcl__gemm_store): only
 * gemm_cpu's single products of one piece, each block of 2 W columns in one head, whole
 * sequences */
static bool split_ok(const relcl_context *ctx, how_t how, size_t batch, size_t chunk, size_t len,
                     size_t k, size_t m, size_t n, const relcl__split *sp) {
  return how == CPU && batch == 1 && chunk == 0 && len == k && sp->n > 0 && m % sp->n == 0 &&
         sp->heads > 0 && sp->head_dim % (2 * (size_t)ctx->cpu_vec) == 0 &&
         n % (sp->heads * sp->head_dim) == 0;
}

bool relcl__gemm_splits(const relcl_context *ctx, bool trans_b, size_t m, size_t n, size_t k,
                        const relcl__split *sp) {
  size_t len;
  const how_t how = route(ctx, false, trans_b, m, n, k, 1, &len);
  const size_t chunk = how == CPU ? narrow_chunk(ctx, false, trans_b, m, k) : 0;
  return split_ok(ctx, how, 1, chunk, len, k, m, n, sp);
}

/* What a product may do besides C = alpha op(A) op(B) + beta C (gemm_run), each only where
 * its route allows; zero for none. epi: an epilogue in gemm_cpu's store (flags.h
 * RELCL_GEMM_*: relcl__gemm_relu_masked's mask, relcl__gemm_store's bias), its operand M in
 * mask, rows ldm apart (0: one row). t2: a second term in gemm_cpu_batch's sum
 * (relcl__gemm_plus), heads and c_head: C in the heads' layout. sums: A's partial column sums
 * from its transposed copy (relcl__gemm_wgrad). split: C in the heads layout (relcl__gemm_store).
 * applied, added and split_done are set on return: whether the product applied epi, t2 and
 * split (the caller does it otherwise). */
typedef struct gemm_extra {
  int epi;
  relcl_buf mask;
  size_t ldm;
  const relcl__gemm_term *t2;
  size_t heads, c_head;
  relcl__colsums *sums;
  const relcl__split *split;
  bool applied, added, split_done;
} gemm_extra;

/* relcl__gemm_in and its variants below, with the extras in x */
static relcl_status gemm_run(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                             bool trans_b, size_t m, size_t n, size_t k, float alpha,
                             relcl_buf a, size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                             size_t stride_b, float beta, relcl_buf c, size_t ldc,
                             size_t stride_c, size_t batch, gemm_extra *x) {
  x->applied = x->added = x->split_done = false;
  if (x->sums) *x->sums = (relcl__colsums){NULL, 0};
  int epi = x->epi;
  const relcl__gemm_term *t2 = x->t2;
  if (m == 0 || n == 0 || batch == 0) return RELCL_OK;
  relcl_status st;
  if (k == 0) /* an empty sum: C = beta C, which CLBlast does not accept */
    return relcl__fail(RELCL_ERR_INVALID_ARG, "GEMM with an empty inner dimension");
  size_t len;
  const how_t how = route(ctx, trans_a, trans_b, m, n, k, batch, &len);
  /* The profile times a product from its first command's start to its last one's end. CLBlast
   * returns the event of its last kernel only, and its indirect GEMM runs up to four (padding
   * and transposing A, B and C around the product): a marker before the call stands for the
   * first. relcl's own commands give their events themselves (ctx->span_first), which keeps
   * markers out of the queue: each cost a profiled step as much time between commands as a
   * small kernel (relcl-bench's default step under PoCL's tracing, Zen 5: 69 markers a step;
   * the time between commands 3.2 -> 2.6 ms a step without them). */
  cl_event start = NULL, ev, *evp = relcl__profile_slot(ctx, &ev);
  if (evp && (how == CLBLAST || how == CLBLAST_BATCHED)) {
    if (clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &start) != CL_SUCCESS) start = NULL;
  } else if (evp) {
    ctx->span_first = &start;
  }
  /* a single product for gemm_cpu_batch's blocks of rows (cpu_product) */
  const size_t chunk = how == CPU && batch == 1 ? narrow_chunk(ctx, trans_a, trans_b, m, k) : 0;
  /* only gemm_cpu's single products take an epilogue, and a bias only in a sum of one piece
   * (ReLU's backward, 0 or 1 times each slice's sum, goes on every slice): the caller applies
   * it otherwise. A bias at every width since session 33: on the Zen 5 EPYC (AVX-512) a
   * bias and ReLU in the store had made the products 3 to 6% slower, more than the bias_add
   * passes it saved (docs/speed.md, session 21), and AVX-512 kept them apart until then; on
   * the Zen 3 (AVX2) relcl-bench op by op put the products with and without it within 5% of
   * each other (the spread of its runs) and the step lost its 18 bias_add passes (session
   * 28). On a Sapphire Rapids-class Xeon (AVX-512, session 33), two interleaved pairs of
   * relcl-bench's issue-8 step: the feed-forward's first product and its bias_add 47.9 and
   * 48.0 ms -> 44.7 and 41.8 with both in the product, the step's other element-wise passes
   * 10.2 and 10.4 -> 5.8 and 5.7 ms; relcl-translate (beam 4, the demo's model), four pairs:
   * 1.45-1.49 s -> 1.43-1.46, the same translations. */
  /* C in the heads layout (relcl__gemm_store), which cannot leave a bias to bias_add */
  const relcl__split *split =
      x->split && split_ok(ctx, how, batch, chunk, len, k, m, n, x->split) &&
              !(epi & RELCL_GEMM_RELU_BWD) && (!(epi & RELCL_GEMM_BIAS) || x->mask.mem)
          ? x->split
          : NULL;
  x->split_done = split != NULL;
  const bool bias_ok = !(epi & RELCL_GEMM_BIAS) || len == k;
  if (how != CPU || batch > 1 || chunk > 0 || !bias_ok || !x->mask.mem) epi = 0;
  x->applied = epi != 0;
  /* only gemm_cpu_batch's batches take a second term (relcl__gemm_plus runs it apart else) */
  if (!batch_kernel(how, batch, len, k) || (t2 && t2->k == 0)) t2 = NULL;
  x->added = t2 != NULL;
  static const char *const kinds[] = {"SGEMM", "SGEMM", "gemm_cpu", "gemm_cpu_bt",
                                      "gemm_heads_dots"};
  /* the profile's name of what ran (gemm_cpu_at: below) */
  const char *kind = how == CPU && (batch > 1 || chunk > 0) ? "gemm_cpu_batch" : kinds[how];
  st = RELCL_OK;
  /* gemm_cpu's single products with a long sum: B as laid out in panels (see panels()), one
   * copy for all slices */
  const bool long_single = how == CPU && batch == 1 && chunk == 0 && k > RELCL_CPU_PACK_K;
  /* a weight gradient (A transposed, B as laid out, nothing in the store) in gemm_cpu_at,
   * where the device has it (relcl__cpu_at): neither A nor B copied */
  const bool wgrad_at = long_single && trans_a && !trans_b && ctx->gemm_at && !epi && !split &&
                        len <= RELCL_CPU_AT_K;
  const bool at = wgrad_at && n <= RELCL_CPU_AT_COLS && ldb <= RELCL_CPU_AT_COLS;
  /* ... and where B is wider than that (x's rows over RELCL_CPU_AT_COLS floats) but A is not
   * (dy's, m floats or fewer): C^T = B^T A in gemm_cpu_at, into T = C^T (C transposed in
   * first where beta is not 0, T transposed back into C after), B's columns copied into
   * local memory and A read in place. Each element is the same sum in the same order as
   * in C: the bits of RELCL_WGRAD=copy, the bias gradient's too (column_sums). Model-207
   * Xeon, against the copies (A transposed, B in panels, gemm_cpu), two builds alternated in
   * one process (h13, 31 rounds, the same bits): A^T 256x1024x4000 (issue 8's feed-forward)
   * 0.75 of the time, 128x1024x2048 0.45, 512x2048x4000 0.96 (256x256x4000, unchanged,
   * 1.015); relcl-bench --compare RELCL_WGRAD=copy, issue 8's step: 1.22 op by op. */
  const bool at_t = wgrad_at && !at && m <= RELCL_CPU_AT_COLS && lda <= RELCL_CPU_AT_COLS;
  if (at || at_t) kind = "gemm_cpu_at";
  cl_mem ct = NULL;
  if (at_t) {
    st = relcl__pool_get(ctx, n * m * sizeof(float), &ct);
    if (st == RELCL_OK && x->sums) st = column_sums(ctx, a, k, m, lda, x->sums);
    if (st == RELCL_OK && beta != 0.0f)
      st = transpose_run(ctx, c, m, n, ldc, relcl_buf_at(ct, 0), m, 0, 0, RELCL_BUF_NONE,
                         NULL);
  }
  /* A's column sums by chunks of 16 rows (transpose_side with gemm_cpu_at), for x->sums,
   * where the transposed copy would have made them (RELCL_CPU_PACK_REUSE columns: the bits
   * of RELCL_WGRAD=copy; with fewer the caller sums A in a pass of its own, as it did) */
  relcl_buf at_sums = RELCL_BUF_NONE;
  if (at && x->sums && n >= RELCL_CPU_PACK_REUSE) {
    st = colsums_get(ctx, k, m, x->sums);
    if (st == RELCL_OK) at_sums = relcl_buf_at(x->sums->part, 0);
  }
  cl_mem pk = NULL;
  size_t b_panel = 0;
  if (long_single && !at && !at_t && !trans_b && pack_b(ctx, m, ldb)) {
    st = panels(ctx, false, b, ldb, k, n, &pk, &b_panel);
    if (st == RELCL_OK) b = relcl_buf_at(pk, 0), ldb = 2 * (size_t)ctx->cpu_vec;
  }
  /* A transposed (a weight gradient), with a long sum and C 256 columns or more: op(A) copied
   * out as laid out (ta false), whose block of rows the kernel reads as that many contiguous
   * streams, where A^T's 8 floats a step come from a new page each (rows a page or more
   * apart) or every few steps (see RELCL_CPU_PACK_K's note). Zen 5,
   * relcl-bench's issue-8 step, two interleaved pairs: A^T 1024x256x4000 40.8 and 39.7 ->
   * 33.1 and 35.0 ms a step, A^T 8000x256x1048 the same (with A in panels of 8 columns
   * instead, 12-18% slower); content GEMMs 477 and 470 -> 461 and 454. */
  cl_mem pa = NULL;
  bool ta = trans_a;
  if (st == RELCL_OK && long_single && !at && !at_t && trans_a &&
      n >= RELCL_CPU_PACK_REUSE) {
    st = transposed_copy(ctx, a, k, m, lda, &pa, x->sums);
    if (st == RELCL_OK) a = relcl_buf_at(pa, 0), lda = k, ta = false;
  }
  for (size_t k0 = 0; k0 < k && st == RELCL_OK; k0 += len) {
    const size_t kk = k - k0 < len ? k - k0 : len;
    const relcl_buf ak = relcl_buf_at(a.mem, a.offset + (ta ? k0 * lda : k0)),
                    bk = relcl_buf_at(b.mem, b.offset + (trans_b ? k0 : k0 * ldb));
    const float bb = k0 == 0 ? beta : 1.0f;
    cl_event *e = k0 + kk == k ? evp : NULL;
    switch (how) {
    case CLBLAST:
      st = product(ctx, trans_a, trans_b, m, n, kk, alpha, ak, lda, bk, ldb, bb, c, ldc, e);
      break;
    case CPU:
      if (at) {
        st = at_product(ctx, m, n, kk, k0, alpha, ak, lda, bk, ldb, bb, c, ldc, at_sums, e);
        break;
      }
      if (at_t) { /* the profile's end: the transpose back, below */
        st = at_product(ctx, n, m, kk, k0, alpha, bk, ldb, ak, lda, bb, relcl_buf_at(ct, 0), m,
                        RELCL_BUF_NONE, NULL);
        break;
      }
      /* a mask on every slice: ReLU's 0 or 1 times each slice's sum is that of their sum */
      st = cpu_product(ctx, ta, trans_b, m, n, kk, alpha, ak, lda, stride_a, bk, ldb,
                       stride_b, bb, c, ldc, stride_c, batch, chunk, x->mask, x->ldm, epi, t2,
                       x->heads, x->c_head, b_panel, split, e);
      break;
    case CPU_BT:
      st = cpu_columns(ctx, "gemm_cpu_bt", trans_a, m, n, kk, alpha, ak, lda, stride_a, bk, ldb,
                       stride_b, NULL, bb, c, ldc, stride_c, 1, 0, batch, e);
      break;
    case DOTS:
      st = dots_product(ctx, trans_a, m, n, kk, alpha, ak, lda, stride_a, bk, ldb, stride_b, bb,
                        c, ldc, stride_c, batch, e);
      break;
    case CLBLAST_BATCHED: { /* CLBlast's direct kernel, which reads every layout in place */
      CLBlastStatusCode code = CLBlastSgemmStridedBatched(
          CLBlastLayoutRowMajor, transposed(trans_a), transposed(trans_b), m, n, kk, alpha, ak.mem,
          ak.offset, lda, stride_a, bk.mem, bk.offset, ldb, stride_b, bb, c.mem, c.offset, ldc,
          stride_c, batch, &ctx->queue, e);
      st = code == CLBlastSuccess ? RELCL_OK : clblast_fail(code, "SGEMM", m, n, kk, batch);
      break;
    }
    }
  }
  if (at_t && st == RELCL_OK) /* C = T^T, the profile's end */
    st = transpose_run(ctx, relcl_buf_at(ct, 0), n, m, m, c, ldc, 0, 0, RELCL_BUF_NONE, evp);
  ctx->span_first = NULL;
  relcl__pool_put(ctx, pk); /* the queue is in order: the products have read them */
  relcl__pool_put(ctx, pa);
  relcl__pool_put(ctx, ct);
  if (st == RELCL_OK && ev) {
    char name[160], plus[32] = ""; /* a second term's length: "+17" */
    if (t2) snprintf(plus, sizeof plus, "+%zu", t2->k);
    const char *store = !epi                      ? ""
                        : epi & RELCL_GEMM_RELU_BWD ? " relu'"
                        : epi & RELCL_GEMM_RELU     ? " +bias relu"
                                                    : " +bias";
    snprintf(name, sizeof name, "%s%s%s%s%s %zux%zux%zu%s x%zu", kind, trans_a ? " A^T" : "",
             trans_b ? " B^T" : "", store, split ? " split" : "", m, n, k, plus, batch);
    const size_t sum = k + (t2 ? t2->k : 0); /* rated as the one sum it is */
    relcl__profile_span(ctx, name, part, (const size_t[4]){m, n, sum, batch}, start, ev);
  } else {
    if (ev) clReleaseEvent(ev);
    if (start) clReleaseEvent(start);
  }
  return st;
}

relcl_status relcl__gemm_in(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                            bool trans_b, size_t m, size_t n, size_t k, float alpha, relcl_buf a,
                            size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                            size_t stride_b, float beta, relcl_buf c, size_t ldc,
                            size_t stride_c, size_t batch) {
  gemm_extra x = {0};
  return gemm_run(ctx, part, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb,
                  stride_b, beta, c, ldc, stride_c, batch, &x);
}

relcl_status relcl__gemm_plus(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                              size_t m, size_t n, size_t k, float alpha, relcl_buf a,
                              size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                              size_t stride_b, const relcl__gemm_term *t2,
                              relcl_profile_part part2, float beta, relcl_buf c, size_t ldc,
                              size_t stride_c, size_t heads, size_t c_head, size_t batch) {
  if (t2 && t2->k == 0) t2 = NULL;
  size_t len;
  const how_t how = route(ctx, trans_a, false, m, n, k, batch, &len);
  if (heads <= 1 || batch_kernel(how, batch, len, k)) {
    gemm_extra x = {.t2 = t2, .heads = heads, .c_head = c_head}, none = {0};
    relcl_status st = gemm_run(ctx, part, trans_a, false, m, n, k, alpha, a, lda, stride_a, b,
                               ldb, stride_b, beta, c, ldc, stride_c, batch, &x);
    if (st != RELCL_OK || x.added || !t2) return st;
    return gemm_run(ctx, part2, false, false, m, n, t2->k, alpha, t2->a, t2->lda, t2->stride_a,
                    t2->b, t2->ldb, t2->stride_b, 1.0f, c, ldc, stride_c, batch, &none);
  }
  /* elsewhere, C in the heads' layout: a batch of the heads for each group of them */
  if (batch % heads != 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "GEMM batch %zu is not a whole number of %zu heads",
                       batch, heads);
  relcl_status st = RELCL_OK;
  for (size_t g = 0; g < batch / heads && st == RELCL_OK; g++) {
    const size_t e = g * heads; /* the group's first product */
    relcl__gemm_term t = {0};
    if (t2) {
      t = *t2;
      t.a = relcl_buf_at(t2->a.mem, t2->a.offset + e * t2->stride_a);
      t.b = relcl_buf_at(t2->b.mem, t2->b.offset + e * t2->stride_b);
    }
    st = relcl__gemm_plus(ctx, part, trans_a, m, n, k, alpha,
                          relcl_buf_at(a.mem, a.offset + e * stride_a), lda, stride_a,
                          relcl_buf_at(b.mem, b.offset + e * stride_b), ldb, stride_b,
                          t2 ? &t : NULL, part2, beta,
                          relcl_buf_at(c.mem, c.offset + g * stride_c), ldc, c_head, 1, 0, heads);
  }
  return st;
}

relcl_status relcl__gemm_relu_masked(relcl_context *ctx, size_t m, size_t n, size_t k,
                                     float alpha, relcl_buf a, size_t lda, relcl_buf b,
                                     size_t ldb, float beta, relcl_buf c, size_t ldc,
                                     relcl_buf y, size_t ldy, bool *masked) {
  gemm_extra x = {.epi = RELCL_GEMM_RELU_BWD, .mask = y, .ldm = ldy};
  relcl_status st = gemm_run(ctx, RELCL_PART_CONTENT_GEMM, false, false, m, n, k, alpha, a, lda,
                             0, b, ldb, 0, beta, c, ldc, 0, 1, &x);
  *masked = x.applied;
  return st;
}

relcl_status relcl__gemm_store(relcl_context *ctx, bool trans_b, size_t m, size_t n, size_t k,
                               relcl_buf a, size_t lda, relcl_buf b, size_t ldb, relcl_buf c,
                               size_t ldc, relcl_buf bias, bool relu, const relcl__split *split,
                               bool *applied, bool *split_done) {
  gemm_extra x = {.epi = bias.mem ? RELCL_GEMM_BIAS | (relu ? RELCL_GEMM_RELU : 0) : 0,
                  .mask = bias, .split = split};
  relcl_status st = gemm_run(ctx, RELCL_PART_CONTENT_GEMM, false, trans_b, m, n, k, 1.0f, a,
                             lda, 0, b, ldb, 0, 0.0f, c, ldc, 0, 1, &x);
  *applied = x.applied;
  if (split_done) *split_done = x.split_done;
  return st;
}

relcl_status relcl__gemm_wgrad(relcl_context *ctx, size_t m, size_t n, size_t k, relcl_buf a,
                               size_t lda, relcl_buf b, size_t ldb, relcl_buf c, size_t ldc,
                               relcl__colsums *sums) {
  gemm_extra x = {.sums = sums};
  return gemm_run(ctx, RELCL_PART_CONTENT_GEMM, true, false, m, n, k, 1.0f, a, lda, 0, b, ldb,
                  0, 1.0f, c, ldc, 0, 1, &x);
}

relcl_status relcl__gemm_override(cl_device_id device, const char *kernel, size_t n,
                                  const char *const *names, const size_t *values) {
  CLBlastStatusCode code = CLBlastOverrideParameters(device, kernel, CLBlastPrecisionSingle, n,
                                                     (const char **)names, values);
  return code == CLBlastSuccess
             ? RELCL_OK
             : relcl__fail(RELCL_ERR_CLBLAST, "CLBlast rejected the parameters of %s (status %d)",
                           kernel, (int)code);
}

void relcl__gemm_forget(void) { (void)CLBlastClearCache(); }
