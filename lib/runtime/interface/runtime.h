/* What the runtime part (context, kernels, buffers, scratch pool, GEMM) offers the ops and
 * the model: kernels by name, launching, scratch buffers, unchecked transfers and the one
 * GEMM wrapper. The context's fields stay inside the runtime (internal.h there). Not
 * installed. */
#ifndef RELCL_RUNTIME_H
#define RELCL_RUNTIME_H

#include "base.h"
#include "relcl.h"

/* ---- kernels (kernel.c) ---- */

typedef struct relcl__kernel_entry {
  const char *name; /* static string */
  cl_kernel kernel;
  size_t max_wg; /* CL_KERNEL_WORK_GROUP_SIZE for this device */
  relcl_profile_part part; /* what the profile counts its time under */
} relcl__kernel_entry;

/* The kernel `name` of `family` on ctx, created once and kept. */
relcl_status relcl__kernel(relcl_context *ctx, const char *family, const char *name,
                           relcl__kernel_entry **out);

/* ---- launching ---- */

/* Kernel arguments in order: RELCL__ARG(&args, x) for each; the first failure sticks. */
typedef struct relcl__args {
  cl_kernel kernel;
  cl_uint index; /* the next argument; after a failure, the one that failed */
  cl_int err;
} relcl__args;

static inline void relcl__arg(relcl__args *a, size_t size, const void *value) {
  if (a->err == CL_SUCCESS &&
      (a->err = clSetKernelArg(a->kernel, a->index, size, value)) == CL_SUCCESS)
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
/* relcl__launch for a kernel that computes a product of m x n x k multiply-adds: the profile
 * names it "kernel MxNxK" and keeps the shape, so relcl-bench rates it as a GEMM. */
relcl_status relcl__launch_product(relcl_context *ctx, relcl__kernel_entry *k,
                                   const relcl__args *args, cl_uint dims, const size_t *global,
                                   const size_t *local, size_t m, size_t n, size_t kk);
/* The row kernels' shape on ctx (kernels/common.cl): true for a work-item per row (CPUs,
 * or RELCL_ROW_KERNELS=item), false for a power-of-two work-group per row. */
bool relcl__row_item(const relcl_context *ctx);
/* The vector width of relcl's CPU kernels on ctx (gemm_cpu's W, kernels/gemm.cl): 16, 8 or 4
 * after the device's native float vector width, or RELCL_CPU_VEC's. */
int relcl__cpu_width(const relcl_context *ctx);
/* Whether relcl's own product kernels run ctx's products, single and batched (gemm_cpu,
 * gemm_cpu_bt: CPUs, unless RELCL_CPU_GEMM or RELCL_HEAD_GEMM is clblast): then a product
 * through relcl__gemm is the fastest form of it, and CLBlast's tuning changes nothing. */
bool relcl__own_products(const relcl_context *ctx);
/* Whether attention's forward may run in one kernel a head (kernels/gemm.cl attn_fwd_cpu):
 * relcl's own products, item-shaped rows, and RELCL_ATTN not apart (CPUs). */
bool relcl__attn_fused(const relcl_context *ctx);
/* Whether weight gradients run in gemm_cpu_at (gemm.c: where B's rows, or A's through C^T,
 * are RELCL_CPU_AT_COLS floats or fewer): relcl's own products, a device with relcl__cpu_at's
 * local memory, and RELCL_WGRAD not copy. */
bool relcl__wgrad_local(const relcl_context *ctx);
/* Launch a row kernel over `rows` rows of `width` columns, adding its `locals` local-memory
 * arguments (4 bytes per lane each): with item, one work-item per row (the global size
 * rounded up: the kernel returns past its rows); else one power-of-two work-group per row. */
relcl_status relcl__launch_rows(relcl_context *ctx, relcl__kernel_entry *k, relcl__args *a,
                                size_t rows, size_t width, int locals, bool item);
/* Largest power of two <= limit and <= want rounded up to a power of two, >= 1. */
size_t relcl__pow2_wg(size_t want, size_t limit);
/* The work-group size for want work-items of a kernel that guards its range rounded up to it
 * and whose work-items do not work together in the item shape: there (CPUs) always the
 * largest power of two within limit, elsewhere relcl__pow2_wg. */
size_t relcl__wg(const relcl_context *ctx, size_t want, size_t limit);

/* ---- scratch buffers (pool.c): lent for the length of one call ---- */

relcl_status relcl__pool_get(relcl_context *ctx, size_t bytes, cl_mem *out);
void relcl__pool_put(relcl_context *ctx, cl_mem mem);

/* ---- B^T's panels kept between products (gemm.c) ---- */

/* From relcl__panels_keep until relcl__panels_drop, a product on a CPU whose transposed B
 * lies in mem (gemm_cpu's B^T products: x W^T) copies that B into panels the first time only
 * and reads the same panels again after, where each product made its own copy: the caller
 * promises that nothing writes mem meanwhile (a decoding call and its model's parameters).
 * The same panels, the same sums: the same bits. Another keep drops the kept first; the
 * context drops them when destroyed. */
void relcl__panels_keep(relcl_context *ctx, cl_mem mem);
void relcl__panels_drop(relcl_context *ctx);

/* An operand B (n x k, rows k apart, at offset in a kept buffer) of B^T products */
typedef struct relcl__panel_src {
  size_t offset, n, k;
} relcl__panel_src;

/* relcl__panels_keep(ctx, mem), then on a CPU (relcl's own products) the panels of all
 * `count` operands made at once, in one launch, where each product would have made its own
 * (a training step's x W^T: one transpose a weight). Where they do not all fit
 * (RELCL__KEPT_BYTES), nothing is kept. The same panels: the same bits. */
relcl_status relcl__panels_keep_all(relcl_context *ctx, cl_mem mem, const relcl__panel_src *list,
                                    int count);

/* ---- buffers (buffer.c) ---- */

/* Set n floats to value, without argument checks. */
relcl_status relcl__fill(relcl_context *ctx, relcl_buf dst, float value, size_t n);

/* Check that buf holds at least n elements of 4 bytes past its offset. */
relcl_status relcl__check_buf(relcl_buf buf, size_t n, const char *what);
/* relcl__check_buf calls made so far on this thread: test_checks counts the graph's (none). */
unsigned long relcl__check_buf_count(void);

/* Blocking transfers without argument checks. */
relcl_status relcl__write(relcl_context *ctx, relcl_buf dst, const void *src, size_t n);
relcl_status relcl__read(relcl_context *ctx, relcl_buf src, void *dst, size_t n);

/* ---- GEMM (gemm.c: the only file that calls CLBlast) ---- */

/* out = x^T, without argument checks: x is rows x cols with leading dimension ld, out
 * cols x rows with ld_out (kernels/util.cl transpose; gemm.c's operands on a CPU). Enqueued
 * without a profile event: a GEMM's span covers it. */
relcl_status relcl__transpose(relcl_context *ctx, relcl_buf x, size_t rows, size_t cols,
                              size_t ld, relcl_buf out, size_t ld_out);

/* Row-major C = alpha op(A) op(B) + beta C, batch times with element strides; timed under
 * part when profiling (relcl__gemm: RELCL_PART_CONTENT_GEMM). */
relcl_status relcl__gemm_in(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                            bool trans_b, size_t m, size_t n, size_t k, float alpha, relcl_buf a,
                            size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                            size_t stride_b, float beta, relcl_buf c, size_t ldc,
                            size_t stride_c, size_t batch);
#define relcl__gemm(ctx, ...) relcl__gemm_in((ctx), RELCL_PART_CONTENT_GEMM, __VA_ARGS__)

/* The second term of relcl__gemm_plus: A2 (m x k) and B2 (k x n), both as laid out, product
 * e's at e times their strides (0: one for all) */
typedef struct relcl__gemm_term {
  size_t k;
  relcl_buf a;
  size_t lda, stride_a;
  relcl_buf b;
  size_t ldb, stride_b;
} relcl__gemm_term;

/* relcl__gemm_in's C = alpha (op(A) B + A2 B2) + beta C, B as laid out, batch times; t2
 * NULL or of k 0: no second term. Where relcl's gemm_cpu_batch runs the batch (CPUs, batch >
 * 1), in one pass: each element one sum, op(A) B's terms then A2 B2's, timed under part;
 * elsewhere C = alpha op(A) B + beta C under part, then C += alpha A2 B2 under part2. With
 * heads > 1 (a divisor of batch), product e's C is at (e / heads) stride_c + (e % heads)
 * c_head (the merged layout of relcl_heads_merge); where gemm_cpu_batch does not run the
 * batch, that is one batch of heads products a group (relcl__own_products tells which). */
relcl_status relcl__gemm_plus(relcl_context *ctx, relcl_profile_part part, bool trans_a,
                              size_t m, size_t n, size_t k, float alpha, relcl_buf a,
                              size_t lda, size_t stride_a, relcl_buf b, size_t ldb,
                              size_t stride_b, const relcl__gemm_term *t2,
                              relcl_profile_part part2, float beta, relcl_buf c, size_t ldc,
                              size_t stride_c, size_t heads, size_t c_head, size_t batch);

/* relcl__gemm's C = alpha A B + beta C (one product, A and B as laid out), then ReLU's
 * backward where relcl's gemm_cpu runs the product: C[i][j] = 0 unless y[i][j] > 0 (y, ReLU's
 * output, with C's shape, row length ldy), in its store. *masked false: the product ran
 * unmasked (CLBlast, or another of relcl's kernels) and the caller applies relu_bwd. */
relcl_status relcl__gemm_relu_masked(relcl_context *ctx, size_t m, size_t n, size_t k,
                                     float alpha, relcl_buf a, size_t lda, relcl_buf b,
                                     size_t ldb, float beta, relcl_buf c, size_t ldc,
                                     relcl_buf y, size_t ldy, bool *masked);

/* Partial column sums of a product's A, made as relcl__gemm_wgrad copies A out: part holds
 * chunks rows of m floats whose sum in row order is A's column sums (layers.cl's
 * colsum_finish adds them up); a pool buffer the caller gives back (relcl__pool_put), also
 * when the call failed. part NULL: none made. */
typedef struct relcl__colsums {
  cl_mem part;
  size_t chunks;
} relcl__colsums;

/* A weight gradient, C (m x n) += A^T B with A k x m and B k x n as laid out (relcl__gemm);
 * with sums (not NULL), where relcl's gemm_cpu copies A out transposed first (CPUs), A's
 * partial column sums from that copy: a linear layer's bias gradient without a pass over dy
 * of its own. */
relcl_status relcl__gemm_wgrad(relcl_context *ctx, size_t m, size_t n, size_t k, relcl_buf a,
                               size_t lda, relcl_buf b, size_t ldb, relcl_buf c, size_t ldc,
                               relcl__colsums *sums);

/* C in the heads layout of relcl_heads_split: C's n columns are n / (heads head_dim) parts of
 * heads heads of head_dim columns, its rows sequences of n rows (n divides m); part q's head h
 * of sequence s is an n x head_dim matrix at q m heads head_dim + (s heads + h) n head_dim. */
typedef struct relcl__split {
  size_t n, heads, head_dim;
} relcl__split;

/* relcl__gemm's C = A op(B) (one product, A as laid out), then with bias (a row of n, or
 * RELCL_BUF_NONE) + bias by column and max(., 0) with relu: in the store where relcl's gemm_cpu
 * runs the product in one piece, with the bits of the separate pass (bias_add); *applied
 * false: C = A op(B) alone, and the caller adds the bias. With split (not NULL), C in its heads
 * layout where gemm_cpu's blocks of 2 W columns each lie in one head (*split_done; a bias
 * then always in the store); else C as laid out (ldc), and the caller splits. */
relcl_status relcl__gemm_store(relcl_context *ctx, bool trans_b, size_t m, size_t n, size_t k,
                               relcl_buf a, size_t lda, relcl_buf b, size_t ldb, relcl_buf c,
                               size_t ldc, relcl_buf bias, bool relu, const relcl__split *split,
                               bool *applied, bool *split_done);
/* How far apart to lay the rows of an activation `cols` floats wide that relcl's products
 * write and read (the feed-forward's hidden): cols, or on contexts where gemm_cpu runs the
 * products with 8 floats or fewer a vector, cols + 16 where rows cols floats apart would
 * fall in fewer than 4 of L1's sets (gemm.c). */
size_t relcl__act_ld(const relcl_context *ctx, size_t cols);
/* Whether relcl__gemm_store of this shape (A as laid out) stores C in the heads layout sp
 * (then its *split_done is true): the caller picks where C goes before the call. */
bool relcl__gemm_splits(const relcl_context *ctx, bool trans_b, size_t m, size_t n, size_t k,
                        const relcl__split *sp);
#endif
