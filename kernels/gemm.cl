/* relcl's own products on CPU devices (lib/runtime/gemm.c decides), row-major C = alpha
 * op(A) op(B) + beta C, C m x n, op(A) m x k, op(B) k x n, one or a batch of them:
 *
 *   gemm_cpu     every single product (the linear layers, the output layer, their
 *                gradients);
 *   gemm_cpu_batch  its sum for batches with B as laid out (the per-head alpha V, dV, dQ, dK:
 *                32 x 64 x 32 in the issue-8 model, 500 at a time), asking for the next
 *                product's operands as it goes, with a second term in the same sum where
 *                asked (alpha V and dQ with a shared table's label sums);
 *   gemm_cpu_bt  the batched ones with B transposed and 12 columns or more (Q K^T, dalpha =
 *                dZ V^T: 32 x 32 x 64), gemm_cpu's sum over a transposed copy of B's block;
 *   gemm_heads_dots  the same with fewer than 12 columns (short sentences).
 *
 * The shape is a CPU's: PoCL runs a work-group as a loop over its work-items, and LLVM turns
 * explicit vectors into SIMD registers; CLBlast's kernels, written for GPUs, ran the same
 * products at a quarter to a half of these (docs/speed.md, "One product on a CPU",
 * "Per-head products on a CPU"). Each element of C is one sum in a fixed order (CPU_MAD), the
 * same on every run. */


/* One term of a sum, a b + c: a fused multiply-add where the compiler says its target has
 * the instruction (clang's __FMA__ on x86, __ARM_FEATURE_FMA on Arm), mad elsewhere. PoCL
 * compiles mad to a multiply and an add, and fma without the instruction to a library call
 * (an SSE2-only x86 has none). Zen 5 EPYC, relcl-bench's issue-8 step, two interleaved pairs:
 * the content GEMMs 504 and 539 ms a step with mad, 495 and 498 with fma. Each element is
 * still one sum in a fixed order: the same bits on every run of one device. */
#if defined(RELCL_CLANG) && (defined(__FMA__) || defined(__ARM_FEATURE_FMA))
#define CPU_MAD(a, b, c) fma(a, b, c)
#else
#define CPU_MAD(a, b, c) mad(a, b, c)
#endif

/* dst (row length dst_ld) = the transpose of the 16 x 16 block at src (ld), in registers:
 * 16 row loads, 64 shuffles and 16 row stores instead of 256 scattered reads (for Q K^T, 30%
 * faster in a harness on Zen 5); src's rows from `rows` on (16: none) read as zeros. Inlined,
 * so that a constant 16 folds the rows' tests away. */
__attribute__((always_inline)) inline void heads_transpose16(__local float *dst, uint dst_ld,
                                                             __global const float *src, uint ld,
                                                             uint rows) {
#if RELCL_CPU_VEC < 16 /* as four 8 x 8 blocks (common.cl) */
  RELCL_TRANSPOSE16_BY8(dst, dst_ld, src, ld, rows);
#else
  float16 v[16];
  _Pragma("unroll") for (int r = 0; r < 16; r++) v[r] =
      r < (int)rows ? vload16(0, src + r * ld) : (float16)(0.0f);
  RELCL_TRANSPOSE16(v);
  _Pragma("unroll") for (int r = 0; r < 16; r++) RELCL_CPU_VSTORE(v[r], 0, dst + r * dst_ld);
#endif
}

/* The batched products with B transposed and fewer than 12 columns (Q K^T of short
 * sentences), B n x k, a work-item per row of C: row i of product b is work-item b m + i,
 * global (batch m rounded up to the work-group), local (16). Each reads its operands straight
 * from memory, with no staging; the rows of one product are neighbouring work-items, so its B
 * is read from memory once and then from cache (at 7 keys twice as fast as gemm_cpu_bt).
 * C[i][j] is one dot product of op(A)'s row i and B's row j, in float4 over p and then across
 * the lanes (k a multiple of 4 and A as laid out; otherwise one term at a time). float4 ran
 * as fast as float16 here (memory-bound), and needs no halving of a vector to one float, on
 * which Oclgrind's uninitialized-value checker fails. */
__kernel void gemm_heads_dots(uint m, uint n, uint k, float alpha, float beta,
                              __global const float *A, uint a_off, uint lda, uint a_stride,
                              int trans_a, __global const float *B, uint b_off, uint ldb,
                              uint b_stride, __global float *C, uint c_off, uint ldc,
                              uint c_stride, uint batch) {
  const uint g = get_global_id(0);
  if (g >= batch * m) return;
  const uint b = g / m, i = g - b * m; /* not g % m: LLVM then adds a freeze, which Oclgrind's
                                        * uninitialized-value checker rejects */
  A += a_off + (ulong)b * a_stride;
  B += b_off + (ulong)b * b_stride;
  C += c_off + (ulong)b * c_stride + (size_t)i * ldc;
  for (uint j = 0; j < n; j++) {
    __global const float *bj = B + (size_t)j * ldb;
    float s = 0.0f;
    if (!trans_a && k % 4 == 0) {
      float4 acc = (float4)(0.0f);
      for (uint p = 0; p < k; p += 4)
        acc = CPU_MAD(vload4(0, A + (size_t)i * lda + p), vload4(0, bj + p), acc);
      s = dot(acc, (float4)(1.0f));
    } else {
      for (uint p = 0; p < k; p++) /* op(A)[i][p]: A m x k, or k x m transposed */
        s = CPU_MAD(trans_a ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p], bj[p], s);
    }
    const float v = alpha * s;
    C[j] = beta != 0.0f ? v + beta * C[j] : v; /* beta 0 does not read C */
  }
}

/* Products with B as laid out on CPU devices (gemm.c's cpu_product): C = alpha op(A) B + beta C, C
 * m x n, B k x n, op(A) m x k (A m x k, or k x m with trans_a); product b of a batch at b times
 * each operand's stride. B's block of columns j0 .. j0 + 2 W - 1 is at column j0 of its rows
 * (b_panel 2 W), or in a single product the panel c_id of B's copy in panels (b_panel k 2 W,
 * ldb 2 W: gemm.c's panels(), which also takes a transposed B there). A work-item
 * computes CPU_MR rows x 2 W columns of C in 2 CPU_MR accumulators of W floats (W = RELCL_CPU_VEC,
 * the device's native float vector width, a build option): each step of the sum loads 2 W floats of
 * B's row p and multiplies them by op(A)[i][p] of its rows. On PoCL the vectors are the SIMD
 * registers, and the accumulators fill most of them: 16 of AVX-512's 32 (W 16, 8 rows), 12 of
 * AVX2's 16 (W 8, 6 rows). On the Zen 5 EPYC this ran the issue-8 model's products at 150-440
 * GFLOP/s, where CLBlast's tuned Xgemm ran them at 85-124 (its float4 and float2 vectors fill a
 * quarter of a register). Rows past m read row m - 1 and are not stored; the last columns, if n is
 * not a multiple of 2 W, go through a zero-padded copy of B's row. Each element is one sum in order
 * p = 0 .. k-1 (CPU_MAD). In gemm_cpu a work-item may run `blocks` such blocks of rows, one
 * under the other, with the same columns (gemm.c's cpu_product says where). Global (ceil(n /
 * 2 W), ceil(m / (blocks CPU_MR)), batch), local (1, 1, 1); with rows_first the first two
 * dimensions swap, so that consecutive work-items (which PoCL runs one after another on a
 * thread) share B's columns rather than A's rows. The per-head products of the
 * issue-8 step ran here at 150-185 GFLOP/s, about the speed at which a copy kernel moves their
 * operands (relcl-bench, Zen 5), where gemm_heads_rows' one row a work-item, one accumulator at a
 * time, ran them at 95. */
#define CPU_W RELCL_CPU_VEC
#define CPU_MR RELCL_CPU_MR(CPU_W)
#define CPU_VEC RELCL_CPU_VECTOR
#define CPU_VLOAD RELCL_CPU_VLOAD
#define CPU_VSTORE RELCL_CPU_VSTORE
#define CPU_STEP(SP) CPU_STEP_R(SP, CPU_MR)
/* the same for the first R rows of the block only (a last block of at most CPU_MR / 2 rows).
 * The loop runs to the constant CPU_MR and tests R inside, so that it unrolls whether or not
 * R is a constant where it lands: with a loop to R, LLVM reported five of these loops in
 * cpu_rows and bt_rows as "not unrolled" in PoCL's AVX2 and SSE2 code (not in its AVX-512
 * code), which keeps the accumulators out of registers. Where R is a constant (the usual
 * case) the test folds away. */
#define CPU_STEP_R(SP, R)                                                                   \
  {                                                                                         \
    _Pragma("unroll") for (int r = 0; r < CPU_MR; r++) if (r < (R)) {                       \
      const CPU_VEC av = (CPU_VEC)(a[r][(SP)]);                                             \
      c0[r] = CPU_MAD(av, b0, c0[r]);                                                       \
      c1[r] = CPU_MAD(av, b1, c1[r]);                                                       \
    }                                                                                       \
  }
/* A block of C at rows i0 .. i0 + CPU_MR - 1: a[r], op(A)'s row i0 + r (rows past m read row
 * m - 1, whose results are not stored), and its accumulators c0[r], c1[r], zero */
#define CPU_BLOCK_START                                                                     \
  __global const float *a[CPU_MR];                                                          \
  CPU_VEC c0[CPU_MR], c1[CPU_MR];                                                           \
  for (int r = 0; r < CPU_MR; r++) {                                                        \
    const uint i = min(i0 + r, m - 1);                                                      \
    a[r] = trans_a ? A + i : A + (size_t)i * lda;                                           \
    c0[r] = c1[r] = (CPU_VEC)(0.0f);                                                        \
  }

/* Row c of a work-item's block of C: alpha times its two accumulators v0, v1, plus beta C
 * (beta 0 does not read C: BLAS's rule, C may hold anything, NaN included); where fewer than
 * 2 W columns (nn) are left, through a copy. Then what epi asks (flags.h, RELCL_GEMM_*), with
 * mk the row of M at C's row and column j0 (not read without epi): ReLU's backward, 0 where mk
 * (ReLU's output) is not above 0, as relu_bwd computes it; or mk (a bias row) added, then
 * max(., 0) with RELCL_GEMM_RELU, as bias_add does (kernels/layers.cl). Each is the same
 * float operation on the same value as the separate pass, so the bits are the same. */
inline void cpu_store(__global float *c, __global const float *mk, int epi, CPU_VEC v0,
                      CPU_VEC v1, float beta, uint nn) {
  if (nn >= 2 * CPU_W) {
    const CPU_VEC z = (CPU_VEC)(0.0f);
    v0 = beta != 0.0f ? v0 + beta * CPU_VLOAD(0, c) : v0;
    v1 = beta != 0.0f ? v1 + beta * CPU_VLOAD(1, c) : v1;
    if (epi & RELCL_GEMM_BIAS) {
      v0 = v0 + CPU_VLOAD(0, mk);
      v1 = v1 + CPU_VLOAD(1, mk);
    }
    if (epi & RELCL_GEMM_RELU) {
      v0 = fmax(v0, z);
      v1 = fmax(v1, z);
    }
    if (epi & RELCL_GEMM_RELU_BWD) {
      v0 = select(z, v0, CPU_VLOAD(0, mk) > z);
      v1 = select(z, v1, CPU_VLOAD(1, mk) > z);
    }
    CPU_VSTORE(v0, 0, c);
    CPU_VSTORE(v1, 1, c);
  } else {
    float l[2 * CPU_W];
    CPU_VSTORE(v0, 0, l);
    CPU_VSTORE(v1, 1, l);
    for (uint e = 0; e < nn; e++) {
      float v = beta != 0.0f ? l[e] + beta * c[e] : l[e];
      if (epi & RELCL_GEMM_BIAS) v = v + mk[e];
      if (epi & RELCL_GEMM_RELU) v = fmax(v, 0.0f);
      if (epi & RELCL_GEMM_RELU_BWD) v = mk[e] > 0.0f ? v : 0.0f;
      c[e] = v;
    }
  }
}

/* In a batch, a work-item asks for the next product's operands while it runs its own sum, a
 * few lines at each step t of it: without that its loads waited on memory (per-head products
 * of the issue-8 model, whose operands were written a kernel earlier: in a harness on the
 * Zen 5 EPYC with the operands out of cache, gemm_cpu's 32x64x32 x500 took 420-447 us without
 * these requests and 285 with them, gemm_cpu_bt's 32x32x64 x500 750-840 against 277-290; with
 * the operands in cache, within 3%; relcl-bench's issue-8 step, two interleaved pairs: the
 * per-head products 21.5-24.3 ms a step against 14.8-14.9). PoCL runs consecutive
 * work-groups on one thread, so the next product is most often this thread's next. The lines
 * asked for are those the next product's work-item of the same columns reads and writes;
 * asking past the batch's last is not done.
 *
 * Line t of the span of len floats at p: */
#define CPU_ASK_SPAN(p, len, t, w)                                                          \
  if ((size_t)(t) * 16 < (len)) CPU_PREFETCH((p) + (size_t)(t) * 16, w)
/* Row t (of rows) of a block of 2 W columns at p, rows ld apart: */
#define CPU_ASK_ROW(p, ld, rows, t, w)                                                      \
  if ((t) < (rows)) {                                                                       \
    CPU_PREFETCH((p) + (size_t)(t) * (ld), w);                                              \
    if (2 * CPU_W > 16) CPU_PREFETCH((p) + (size_t)(t) * (ld) + 16, w);                     \
  }

/* One sum of cpu_rows: for p = 0 .. KK-1, B's row p (BB, rows LDB apart, at column j0) times
 * op(A)[i][p] = a[r][p SP] of the block's rows, with the asks for the next product's lines
 * at steps t, t + 1, .. (CPU_ASK_NEXT) where ask is set */
#define CPU_SUM(BB, LDB, KK, SP)                                                            \
  if (j0 + 2 * CPU_W <= n) {                                                                \
    for (uint p = 0; p < (KK); p++, t++) {                                                  \
      if (ask) CPU_ASK_NEXT(t);                                                             \
      __global const float *bp = (BB) + (size_t)p * (LDB);                                  \
      const CPU_VEC b0 = CPU_VLOAD(0, bp), b1 = CPU_VLOAD(1, bp);                           \
      CPU_STEP_R(p * (SP), rows)                                                            \
    }                                                                                       \
  } else {                                                                                  \
    const uint nn = n - j0;                                                                 \
    for (uint p = 0; p < (KK); p++, t++) {                                                  \
      if (ask) CPU_ASK_NEXT(t);                                                             \
      float bt[2 * CPU_W];                                                                  \
      for (uint e = 0; e < 2 * CPU_W; e++) bt[e] = e < nn ? (BB)[(size_t)p * (LDB) + e] : 0.0f; \
      const CPU_VEC b0 = CPU_VLOAD(0, bt), b1 = CPU_VLOAD(1, bt);                           \
      CPU_STEP_R(p * (SP), rows)                                                            \
    }                                                                                       \
  }
#define CPU_ASK_NEXT(t)                                                                     \
  {                                                                                         \
    CPU_ASK_SPAN(na, a_span, t, 0);                                                         \
    CPU_ASK_ROW(nb, ldb, k, t, 0);                                                          \
    CPU_ASK_ROW(nc, ldc, m, t, 1);                                                          \
    CPU_ASK_SPAN(na2, a2_span, t, 0);                                                       \
  }

/* Where C's row i starts in cpu_rows (sn, s_seq, s_row, ldc: see there) */
#define CPU_C_ROW(i)                                                                        \
  (sn > 0 ? (size_t)((i) / sn) * s_seq + (size_t)((i) - (i) / sn * sn) * s_row              \
          : (size_t)(i) * ldc)

/* The block of C at rows i0 .. i0 + CPU_MR - 1 (few: CPU_MR / 2) and columns j0 .. j0 + 2 W
 * - 1 (A, B and C already at the product and B, C at column j0): its sum and its store. With
 * k2 > 0 a second term follows in the same sum, A2 (m x k2, rows lda2 apart) times B2 (k2 x n,
 * at column j0): C = alpha (op(A) B + A2 B2) + beta C, each element's k terms in order, then
 * its k2 terms. With ask, it also asks for the next product's lines (na, nb, nc, na2; a_span,
 * a2_span, see CPU_ASK_SPAN) at steps t, t + 1, .. of the sum. gemm_cpu calls it with ask
 * false and k2 0, constants: its sum is then as if this code were not there (asking in
 * gemm_cpu's single products had made them 5-10% slower). With epi (flags.h, RELCL_GEMM_*),
 * its store applies M's rows mk (ldm apart, at column j0; ldm 0 for one bias row) as
 * cpu_store says; epi 0 reads no mk. With sn > 0 C's rows go in sequences of sn rows (gemm_cpu's
 * heads layout): row i at (i / sn) s_seq + (i % sn) s_row from C; else i ldc. */
__attribute__((always_inline)) inline void
cpu_rows(uint i0, uint j0, uint m, uint n, uint k, float alpha, float beta,
         __global const float *A, uint lda, int trans_a, __global const float *B, uint ldb,
         __global const float *A2, uint lda2, __global const float *B2, uint ldb2, uint k2,
         __global float *C, uint ldc, bool ask, uint t, __global const float *na,
         size_t a_span, __global const float *nb, __global const float *nc,
         __global const float *na2, size_t a2_span, bool few, __global const float *mk,
         uint ldm, int epi, uint sn, size_t s_seq, uint s_row) {
  const int rows = few ? CPU_MR / 2 : CPU_MR; /* a constant where cpu_rows is inlined */
  CPU_BLOCK_START;
  const size_t sp = trans_a ? lda : 1u; /* op(A)[i][p] is a[i][p sp] */
  if (epi & RELCL_GEMM_RELU_BWD) /* the mask's rows, read by the store: asked for before the
                                  * sum (a bias row is the same for every block: in cache) */
    for (int r = 0; r < rows && i0 + r < m; r++) {
      CPU_PREFETCH(mk + (size_t)(i0 + r) * ldm, 0);
      if (2 * CPU_W > 16) CPU_PREFETCH(mk + (size_t)(i0 + r) * ldm + 16, 0);
    }
  /* C's rows, before the sum: with beta, which the store reads (a weight gradient's later
   * slices: gemm.c), into L2, where the sum's stream of A and B leaves them (in L1 it would
   * not); without, with the intent to write, where the sum (128 steps or more) is long enough
   * to hide their coming: the store had waited for them (gemm_cpu's samples 0.94-0.96
   * against gemm_cpu_at as the control in five relcl-bench runs, 1.00 in a sixth: issue 8's
   * shape, model-207 Xeon). Attention's short sums ask earlier (attn_ask_out). */
  if (!ask && (beta != 0.0f || k >= 128))
    for (int r = 0; r < rows && i0 + r < m; r++)
      for (int c = 0; c < 2 * CPU_W; c += 16) {
        __global const float *cr = C + CPU_C_ROW(i0 + r) + c;
        if (beta != 0.0f)
          CPU_PREFETCH_L2(cr);
        else
          CPU_PREFETCH(cr, 1);
      }
  CPU_SUM(B, ldb, k, sp)
  if (k2 > 0) {
    for (int r = 0; r < CPU_MR; r++) a[r] = A2 + (size_t)min(i0 + r, m - 1) * lda2;
    CPU_SUM(B2, ldb2, k2, 1)
  }
  for (int r = 0; r < rows && i0 + r < m; r++)
    cpu_store(C + CPU_C_ROW(i0 + r), mk + (size_t)(i0 + r) * ldm, epi, alpha * c0[r],
              alpha * c1[r], beta, n - j0);
}

__kernel void gemm_cpu(uint m, uint n, uint k, float alpha, float beta, __global const float *A,
                       uint a_off, uint lda, uint a_stride, int trans_a, __global const float *B,
                       uint b_off, uint ldb, uint b_stride, __global float *C, uint c_off,
                       uint ldc, uint c_stride, int rows_first, __global const float *M,
                       uint m_off, uint ldm, int epi, uint b_panel, uint split_n, uint split_dh,
                       uint split_h, uint blocks) {
  const uint c_id = get_global_id(rows_first ? 1 : 0), r_id = get_global_id(rows_first ? 0 : 1);
  const uint j0 = c_id * 2 * CPU_W, first = r_id * CPU_MR * blocks; /* the first block's row */
  if (j0 >= n || first >= m) return;
  const ulong b = get_global_id(2);
  A += a_off + b * a_stride;
  /* the block's columns of B: at column j0 of B's rows (b_panel 2 W), or its panel */
  B += b_off + b * b_stride + (size_t)c_id * b_panel;
  /* C's block at column j0 of its rows; or with split_n > 0, in the heads layout of
   * relcl_heads_split: C's columns are parts of split_h heads of split_dh columns, its rows
   * sequences of split_n; part q's head h of sequence s is (split_n x split_dh) at q m
   * split_h split_dh + (s split_h + h) split_n split_dh (the host asks only where a block's
   * 2 W columns lie in one head) */
  const uint g = split_n > 0 ? j0 / split_dh : 0, q = g / max(split_h, 1u);
  C += c_off + b * c_stride +
       (split_n > 0 ? (size_t)q * m * split_h * split_dh +
                          (size_t)(g - q * split_h) * split_n * split_dh + (j0 - g * split_dh)
                    : j0);
  const size_t s_seq = (size_t)split_h * split_n * split_dh;
  /* M: C's shape (a mask) or one row (a bias, ldm 0), at column j0; C where epi is 0 */
  for (uint i0 = first; i0 < min(m, first + blocks * CPU_MR); i0 += CPU_MR)
    cpu_rows(i0, j0, m, n, k, alpha, beta, A, lda, trans_a, B, ldb, A, 0, B, 0, 0, C, ldc, false,
             0, A, 0, B, C, A, 0, false, M + m_off + j0, ldm, epi, split_n, s_seq, split_dh);
}

/* B (k x n, rows ldb apart) in panels of 2 W columns for gemm_cpu (gemm.c's panels()):
 * panel jb holds rows 0 .. k-1 of columns jb 2 W .. jb 2 W + 2 W - 1, a row after the other,
 * at P + jb k 2 W; columns past n are not written (gemm_cpu reads only n's). A work-item
 * moves 16 rows of one panel; global (ceil(n / 2 W), ceil(k / 16)). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void gemm_pack(
    __global const float *B, uint b_off, uint ldb, uint k, uint n, __global float *P,
    uint p_off) {
  const uint jb = get_global_id(0), j0 = jb * 2 * CPU_W, p0 = get_global_id(1) * 16;
  const uint nn = min(n - j0, 2u * CPU_W);
  B += b_off + j0;
  P += p_off + (size_t)jb * k * 2 * CPU_W;
  for (uint p = p0; p < min(p0 + 16, k); p++) {
    __global const float *src = B + (size_t)p * ldb;
    __global float *dst = P + (size_t)p * 2 * CPU_W;
    if (nn == 2 * CPU_W) {
      CPU_VSTORE(CPU_VLOAD(0, src), 0, dst);
      CPU_VSTORE(CPU_VLOAD(1, src), 1, dst);
    } else {
      for (uint e = 0; e < nn; e++) dst[e] = src[e];
    }
  }
}

/* A weight gradient on CPU devices with 16 floats a vector (gemm.c's gemm_run: A transposed,
 * B as laid out with rows of at most 512 floats, no batch), one slice of its sum: C (m x n,
 * rows ldc apart) = alpha A^T B + beta C, A k x m (rows lda apart) and B k x n (rows ldb
 * apart), k at most RELCL_CPU_AT_K. A work-item takes C's rows i0 .. i0 + AT_ROWS - 1
 * (AT_ROWS = 4 CPU_MR = 32) and all its columns: it first copies op(A)'s AT_ROWS x k block
 * into local memory (A's row p holds step p's 32 floats in one piece), as 4 blocks of 8 rows,
 * then runs gemm_cpu's sum and store (cpu_store) for each block and each 2 W of B's columns,
 * B's rows read in place, each step asking for B's row 16 steps on (CPU_PREFETCH). Each
 * element is gemm_cpu's sum in the same order: the bits of the whole transposed copy of A,
 * B in panels and gemm_cpu over them, which this replaces. Those copies went to memory and
 * the product met their lines on another core; a host model of both on the model-207 Xeon
 * (two threads, A^T 256x256x4000) ran at 132-141 GFLOP/s with the copies, 213-215 without.
 * With with_sums, also A's column sums over chunks of 16 of its rows (transpose_sums' chunks
 * and order: the same bits) at sums + ((k0 + p) / 16) m + i, k0 the slice's first row (a
 * multiple of 16). Rows past m read row m - 1 and are not stored. Global (ceil(m /
 * AT_ROWS)), local (1). */
#ifdef RELCL_CPU_AT
#if CPU_MR != 8
#error "gemm_cpu_at takes blocks of 8 rows (16 floats a vector)"
#endif
#define AT_ROWS (4 * CPU_MR)
/* CPU_STEP_R's step p for a block of Ap: its 8 rows' entries at ab + 8 p, from one pointer
 * (with gemm_cpu's 8 pointers, a[r], the compiler kept some on the stack and reloaded them
 * at every step: A^T 256x256x4000 and 512x256x4000 took 0.91-0.93 of their time without
 * that, h17 41 rounds, model-207 Xeon) */
#define AT_STEP(P)                                                                          \
  {                                                                                         \
    __local const float *ap = ab + (size_t)(P) * 8;                                         \
    _Pragma("unroll") for (int r = 0; r < CPU_MR; r++) {                                    \
      const CPU_VEC av = (CPU_VEC)(ap[r]);                                                  \
      c0[r] = CPU_MAD(av, b0, c0[r]);                                                       \
      c1[r] = CPU_MAD(av, b1, c1[r]);                                                       \
    }                                                                                       \
  }
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void gemm_cpu_at(
    uint m, uint n, uint k, float alpha, float beta, __global const float *A, uint a_off,
    uint lda, __global const float *B, uint b_off, uint ldb, __global float *C, uint c_off,
    uint ldc, __global float *sums, uint s_off, int with_sums, uint k0) {
  __local float Ap[RELCL_CPU_AT_K * AT_ROWS];
  const uint i0 = get_global_id(0) * AT_ROWS;
  if (i0 >= m) return;
  A += a_off;
  B += b_off;
  C += c_off;
  /* op(A)'s block of AT_ROWS rows as 4 blocks of CPU_MR (8: RELCL_CPU_AT needs 16 floats a
   * vector), each k x 8 floats p-major at Ap + bl k 8: a block's 16 KB stay in L1 while its
   * sums run over every block of B's columns */
  const bool whole = i0 + AT_ROWS <= m;
  for (uint p = 0; p < k; p++) {
    __global const float *ar = A + (size_t)p * lda + i0;
    CPU_PREFETCH(ar + (size_t)16 * lda, 0);
    CPU_PREFETCH(ar + (size_t)16 * lda + 16, 0);
    for (uint bl = 0; bl < 4; bl++)
      if (whole)
        vstore8(vload8(0, ar + bl * 8), 0, Ap + (bl * k + p) * 8);
      else
        for (uint r = 0; r < 8; r++) Ap[(bl * k + p) * 8 + r] = ar[min(i0 + bl * 8 + r, m - 1) - i0];
  }
  if (with_sums) /* A's column sums over chunks of 16 rows, each in row order */
    for (uint p0 = 0; p0 < k; p0 += 16)
      for (uint bl = 0; bl < 4 && i0 + bl * 8 < m; bl++) {
        __local const float *ab = Ap + bl * k * 8;
        float8 t = vload8(0, ab + p0 * 8);
        for (uint p = p0 + 1; p < min(k, p0 + 16); p++) t += vload8(0, ab + p * 8);
        __global float *sr = sums + s_off + (size_t)((k0 + p0) / 16) * m + i0 + bl * 8;
        if (i0 + bl * 8 + 8 <= m) {
          vstore8(t, 0, sr);
        } else {
          float l[8];
          vstore8(t, 0, l);
          for (uint r = 0; i0 + bl * 8 + r < m; r++) sr[r] = l[r];
        }
      }
  for (uint bl = 0; bl < 4 && i0 + bl * 8 < m; bl++) {
    const uint i = i0 + bl * 8;
    for (uint j0 = 0; j0 < n; j0 += 2 * CPU_W) {
      __local const float *const ab = Ap + bl * k * 8;
      CPU_VEC c0[CPU_MR], c1[CPU_MR];
      for (int r = 0; r < CPU_MR; r++) c0[r] = c1[r] = (CPU_VEC)(0.0f);
      __global const float *bj = B + j0;
      if (j0 + 2 * CPU_W <= n) {
        for (uint p = 0; p < k; p++) {
          __global const float *bp = bj + (size_t)p * ldb;
          CPU_PREFETCH(bp + (size_t)16 * ldb, 0);
          CPU_PREFETCH(bp + (size_t)16 * ldb + 16, 0);
          const CPU_VEC b0 = CPU_VLOAD(0, bp), b1 = CPU_VLOAD(1, bp);
          AT_STEP(p)
        }
      } else {
        const uint nn = n - j0;
        for (uint p = 0; p < k; p++) {
          float bt[2 * CPU_W];
          for (uint e = 0; e < 2 * CPU_W; e++) bt[e] = e < nn ? bj[(size_t)p * ldb + e] : 0.0f;
          const CPU_VEC b0 = CPU_VLOAD(0, bt), b1 = CPU_VLOAD(1, bt);
          AT_STEP(p)
        }
      }
      for (int r = 0; r < CPU_MR && i + r < m; r++)
        cpu_store(C + (size_t)(i + r) * ldc + j0, C, 0, alpha * c0[r], alpha * c1[r], beta,
                  n - j0);
    }
  }
}
#endif

/* gemm_cpu's products in a batch of more than one (the per-head products): a work-item runs
 * all rows of a block of 2 W columns of one product, and with W 16 asks for the next
 * product's lines as it goes (CPU_ASK_SPAN). Global (ceil(n / 2 W), batch), local (1, 1). In
 * a harness on the Zen 5 EPYC, 32x64x32 x500 with the operands out of cache: 285 us against
 * gemm_cpu's 420, A transposed 291 against 387; in cache, 237-246 against 244-251. With k2 >
 * 0, each product has cpu_rows' second term, A2 (m x k2) B2 (k2 x n), both as laid out, at
 * strides a2_stride and b2_stride (0: one B2 for all; gemm.c's relcl__gemm_plus: a shared
 * table's label sums added to alpha V and to dQ in the same pass). With heads > 1, product
 * b's C is at (b / heads) c_stride + (b % heads) c_head: the per-head products of a
 * sequence's heads write straight into the merged layout, where relcl_heads_merge would have
 * copied them. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void gemm_cpu_batch(
    uint m, uint n, uint k, float alpha, float beta, __global const float *A, uint a_off,
    uint lda, uint a_stride, int trans_a, __global const float *B, uint b_off, uint ldb,
    uint b_stride, __global float *C, uint c_off, uint ldc, uint c_stride, uint k2,
    __global const float *A2, uint a2_off, uint lda2, uint a2_stride, __global const float *B2,
    uint b2_off, uint ldb2, uint b2_stride, uint heads, uint c_head) {
  const uint j0 = get_global_id(0) * 2 * CPU_W;
  const ulong b = get_global_id(1);
  /* product b's C: b c_stride, or with heads > 1 (b / heads) c_stride + (b % heads) c_head */
  const ulong bs = b / heads, bh = b - bs * heads, ns = (b + 1) / heads, nh = b + 1 - ns * heads;
  __global float *const C0 = C + c_off + j0;
  A += a_off + b * a_stride;
  B += b_off + b * b_stride + j0;
  C = C0 + bs * c_stride + bh * c_head;
  __global float *const next_c = C0 + ns * c_stride + nh * c_head;
  A2 += a2_off + b * a2_stride;
  B2 += b2_off + b * b2_stride + j0;
  /* Asking costs more than it gains with 8 floats or fewer a vector: Zen 3 EPYC (AVX2), a
   * harness alternating both forms in one process (operands out of cache, median of 41, two
   * rounds): 32x64x32 x500 1.82 and 1.85 ms asking, 1.57 and 1.55 not; +17 labels 2.34 ->
   * 2.04 and 2.02, +33 2.71 and 2.66 -> 2.43 and 2.33, A^T 1.82 and 1.78 -> 1.58 and 1.55.
   * (gemm_cpu_bt's asks still pay there: B^T 32x32x64 1.55 against 1.79 without.) */
  const bool ask = CPU_W >= 16 && b + 1 < get_global_size(1);
  const size_t a_span = trans_a ? (size_t)(k - 1) * lda + m : (size_t)(m - 1) * lda + k;
  const size_t a2_span = k2 > 0 ? (size_t)(m - 1) * lda2 + k2 : 0;
  /* the last block, if it has at most half of CPU_MR rows, in a block of half the height */
  for (uint i0 = 0, t = 0; i0 < m; i0 += CPU_MR, t += k + k2)
    if (m - i0 <= CPU_MR / 2)
      cpu_rows(i0, j0, m, n, k, alpha, beta, A, lda, trans_a, B, ldb, A2, lda2, B2, ldb2, k2, C,
               ldc, ask, t, A + a_stride, a_span, B + b_stride, next_c, A2 + a2_stride,
               a2_span, true, C, 0, 0, 0, 0, 0);
    else
      cpu_rows(i0, j0, m, n, k, alpha, beta, A, lda, trans_a, B, ldb, A2, lda2, B2, ldb2, k2, C,
               ldc, ask, t, A + a_stride, a_span, B + b_stride, next_c, A2 + a2_stride,
               a2_span, false, C, 0, 0, 0, 0, 0);
}

/* A batch of products with B transposed (Q K^T, dalpha = dZ V^T) on CPU devices: C = alpha
 * op(A) B^T + beta C, B n x k as laid out. A work-item computes one block of 2 W columns of
 * one product, all of its rows: it first copies that block of B, transposed, into local
 * memory (Bt[p][j], zero past n; 16 x 16 at a time in registers where the block is whole and
 * k a multiple of 16), then runs gemm_cpu's sum, CPU_MR rows at a time, over every row, with
 * B's block read from there. At most CPU_BT_KMAX terms (gemm.c cuts longer sums into slices).
 * Each element is one sum in order p = 0 .. k-1 (CPU_MAD). Global (ceil(n / 2 W), batch), local
 * (1, 1). It asks for the next product's operands as it goes (CPU_ASK_SPAN), or in a single
 * product for the next block's. Q K^T of the issue-8 step: 130-137 GFLOP/s, and 226-275 with
 * the asks, where gemm_heads' tiles (a work-group of four work-items, each eight rows by one
 * float16, B staged through local memory in slices of 32) ran at 92-94; a transposed copy of
 * the whole batch's B for gemm_cpu, at 54. */
#define CPU_BT_KMAX RELCL_CPU_BT_KMAX

/* gemm_cpu_bt's block of C at rows i0 .. i0 + CPU_MR - 1 (few: CPU_MR / 2, a constant where
 * it is inlined), B's block from Bt, asking for the next lines at steps t, t + 1, .. */
__attribute__((always_inline)) inline void
bt_rows(uint i0, uint m, uint k, float alpha, float beta, __global const float *A, uint lda,
        int trans_a, __local const float *Bt, __global float *C, uint ldc, uint nn, bool ask,
        uint t, __global const float *na, size_t a_span, __global const float *nb,
        size_t b_span, __global float *nc, bool few) {
  const int rows = few ? CPU_MR / 2 : CPU_MR;
  const size_t sp = trans_a ? lda : 1u; /* op(A)[i][p] is a[i][p sp] */
  CPU_BLOCK_START;
  for (uint p = 0; p < k; p++, t++) {
    if (ask) {
      CPU_ASK_SPAN(na, a_span, t, 0);
      CPU_ASK_SPAN(nb, b_span, t, 0);
      CPU_ASK_ROW(nc, ldc, m, t, 1);
    }
    const CPU_VEC b0 = CPU_VLOAD(0, Bt + p * 2 * CPU_W), b1 = CPU_VLOAD(1, Bt + p * 2 * CPU_W);
    CPU_STEP_R(p * sp, rows)
  }
  for (int r = 0; r < rows && i0 + r < m; r++)
    cpu_store(C + (size_t)(i0 + r) * ldc, C, 0, alpha * c0[r], alpha * c1[r], beta, nn);
}
/* Bt[p][j] = B[j][p] for the nn (at most 2 W) rows j of B (ldb apart) and its first k
 * columns, zero past nn: 16 x 16 at a time in registers where k is a multiple of 16 (a group
 * of rows past nn read as zeros), else one float at a time. Sentences shorter than 2 W took
 * the scalar way for Q K^T and for Q in attn_bt_few: half of attn_bt_few's samples in
 * relcl-train on the bundled data (short sentences) */
inline void bt_stage(__local float *Bt, __global const float *B, uint ldb, uint k, uint nn) {
  if (2 * CPU_W % 16 == 0 && k % 16 == 0) {
    for (uint p = 0; p < k; p += 16)
      for (uint j = 0; j < 2 * CPU_W; j += 16)
        if (nn >= j + 16) /* a whole block: the constant 16 */
          heads_transpose16(Bt + p * 2 * CPU_W + j, 2 * CPU_W, B + (size_t)j * ldb + p, ldb,
                            16u);
        else
          heads_transpose16(Bt + p * 2 * CPU_W + j, 2 * CPU_W, B + (size_t)j * ldb + p, ldb,
                            (uint)max((int)nn - (int)j, 0)); /* max: not usub.sat */
  } else {
    for (uint p = 0; p < k; p++)
      for (uint j = 0; j < 2 * CPU_W; j++)
        Bt[p * 2 * CPU_W + j] = j < nn ? B[(size_t)j * ldb + p] : 0.0f;
  }
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void gemm_cpu_bt(
    uint m, uint n, uint k, float alpha, float beta, __global const float *A, uint a_off,
    uint lda, uint a_stride, int trans_a, __global const float *B, uint b_off, uint ldb,
    uint b_stride, __global float *C, uint c_off, uint ldc, uint c_stride) {
  __local float Bt[CPU_BT_KMAX * 2 * CPU_W];
  const uint j0 = get_global_id(0) * 2 * CPU_W;
  const ulong b = get_global_id(1);
  A += a_off + b * a_stride;
  B += b_off + b * b_stride + (size_t)j0 * ldb;
  C += c_off + b * c_stride + j0;
  const uint nn = min(n - j0, 2u * CPU_W);
  bt_stage(Bt, B, ldb, k, nn);
  /* the next product's operands (see CPU_ASK_SPAN): all of op(A), the block's rows of B and
   * columns of C; in a single product, the next block's rows of B and columns of C (A, the
   * same for all blocks, is in cache) */
  const bool one = get_global_size(1) == 1;
  const bool ask = one ? j0 + 2 * CPU_W < n : b + 1 < get_global_size(1);
  const size_t a_span = one ? 0 : trans_a ? (size_t)(k - 1) * lda + m : (size_t)(m - 1) * lda + k;
  const uint next_nn = one ? min(n - j0 - nn, 2u * CPU_W) : nn; /* 0: not asked */
  const size_t b_span = ask ? (size_t)(next_nn - 1) * ldb + k : 0;
  __global const float *na = A + a_stride;
  __global const float *nb = one ? B + (size_t)nn * ldb : B + b_stride;
  __global float *nc = one ? C + nn : C + c_stride;
  /* the last block, if it has at most half of CPU_MR rows, in a block of half the height */
  for (uint i0 = 0, t = 0; i0 < m; i0 += CPU_MR, t += k)
    if (m - i0 <= CPU_MR / 2)
      bt_rows(i0, m, k, alpha, beta, A, lda, trans_a, Bt, C, ldc, nn, ask, t, na, a_span, nb,
              b_span, nc, true);
    else
      bt_rows(i0, m, k, alpha, beta, A, lda, trans_a, Bt, C, ldc, nn, ask, t, na, a_span, nb,
              b_span, nc, false);
}

#ifdef RELCL_ROW_ITEM
/* attn_bt's last block of C's columns where it has at most this many: the relative tables'
 * 2 k + 1 labels (33 at k 16; 17 with causal masking) leave one column past whole blocks of
 * 2 W, or fill about half of one, where a block computed all 2 W. On a Sapphire Rapids-class
 * Xeon (W 16), attention alone at issue 8's shape (125 x 4 heads, 32 positions, d 64, k 16,
 * dropout 0.1), two contexts interleaved, medians of 40, two runs each: forward 0.83 and 0.88
 * of the time with a block, backward 0.87 and 0.89; causal, 0.98 and 0.94, 0.94 and 0.95.
 * Against a limit of W / 2 (the one column only), causal 0.90 and 0.92 of its time. A block's
 * time is about that of 24 columns here. */
#define ATTN_FEW_COLS (3 * CPU_W / 2)

/* C (m x nn, rows ldc apart) = A B^T for few columns (nn at most ATTN_FEW_COLS), A m x k (rows
 * lda apart), B nn x k (rows k apart): 2 W of A's rows at a time transposed into Bt (as
 * bt_stage does B's), then each column as two vectors of those rows, B's element broadcast.
 * Each element is the sum bt_rows computes, in the same order (CPU_MAD, p = 0 .. k-1), so
 * the bits are those of a whole block. */
inline void attn_bt_few(__local float *Bt, uint m, uint nn, uint k, __global const float *A,
                        uint lda, __global const float *B, __global float *C, uint ldc) {
  for (uint i0 = 0; i0 < m; i0 += 2 * CPU_W) {
    const uint mm = min(m - i0, 2u * CPU_W);
    bt_stage(Bt, A + (size_t)i0 * lda, lda, k, mm);
    /* four columns at a time: eight chains of FMAs side by side, where a column's two
     * waited on their own latency at each step, each step's rows loaded once, and a row's
     * four results stored as one (perf: a column's scalar stores had been most of this
     * function); past the last column the last again, not stored. The same sums in the same
     * order: the same bits. Attention fwd+bwd alone (model-207 Xeon, two contexts
     * alternated, median of 20-30): relcl-bench's default shape (17 labels) 1.016-1.031
     * times as fast, issue 8's 1.033, causal 1.103. */
    for (uint j = 0; j < nn; j += 4) {
      const uint nq = min(nn - j, 4u);
      __global const float *b[4];
      for (uint q = 0; q < 4; q++) b[q] = B + (size_t)(j + min(q, nq - 1)) * k;
      CPU_VEC c0[4], c1[4];
      for (int q = 0; q < 4; q++) c0[q] = c1[q] = (CPU_VEC)(0.0f);
      for (uint p = 0; p < k; p++) {
        const CPU_VEC r0 = CPU_VLOAD(0, Bt + p * 2 * CPU_W), r1 = CPU_VLOAD(1, Bt + p * 2 * CPU_W);
        _Pragma("unroll") for (int q = 0; q < 4; q++) {
          const CPU_VEC bv = (CPU_VEC)(b[q][p]);
          c0[q] = CPU_MAD(r0, bv, c0[q]);
          c1[q] = CPU_MAD(r1, bv, c1[q]);
        }
      }
      float l[4][2 * CPU_W];
      for (int q = 0; q < 4; q++) {
        CPU_VSTORE(c0[q], 0, l[q]);
        CPU_VSTORE(c1[q], 1, l[q]);
      }
      for (uint i = 0; i < mm; i++) {
        __global float *c = C + (size_t)(i0 + i) * ldc + j;
        if (nq == 4)
          vstore4((float4)(l[0][i], l[1][i], l[2][i], l[3][i]), 0, c);
        else
          for (uint q = 0; q < nq; q++) c[q] = l[q][i];
      }
    }
  }
}

/* C (m x n, rows ldc apart) = A B^T on CPU devices, A m x k (rows lda apart), B n x k (rows k
 * apart), k at most CPU_BT_KMAX: gemm_cpu_bt's blocks for one product, B's block of 2 W rows
 * transposed into Bt first, a last block of few columns as attn_bt_few (attn_fwd_cpu's Q K^T
 * and Q wK^T, attn_bwd_cpu's dZ V^T and dZ wV^T) */
inline void attn_bt(__local float *Bt, uint m, uint n, uint k, __global const float *A, uint lda,
                    __global const float *B, __global float *C, uint ldc) {
  for (uint j0 = 0; j0 < n; j0 += 2 * CPU_W) {
    const uint nn = min(n - j0, 2u * CPU_W);
    if (nn <= ATTN_FEW_COLS) {
      attn_bt_few(Bt, m, nn, k, A, lda, B + (size_t)j0 * k, C + j0, ldc);
      continue;
    }
    bt_stage(Bt, B + (size_t)j0 * k, k, k, nn);
    for (uint i0 = 0; i0 < m; i0 += CPU_MR)
      if (m - i0 <= CPU_MR / 2)
        bt_rows(i0, m, k, 1.0f, 0.0f, A, lda, 0, Bt, C + j0, ldc, nn, false, 0, A, 0, A, 0, C,
                true);
      else
        bt_rows(i0, m, k, 1.0f, 0.0f, A, lda, 0, Bt, C + j0, ldc, nn, false, 0, A, 0, A, 0, C,
                false);
  }
}

/* The terms p0 .. p1-1 of op(A)'s k that can be other than 0 for attn_ab's block of rows
 * i0 .. i0 + rows - 1 (rows past m not counted), A being attention weights (alpha') or their
 * gradient (D), 0 at every masked (query, key): with ATTN_QUERY_ROWS the block's rows are
 * queries and the sum runs over keys, which stop at the key length len and, causal, at the
 * block's last query's position q0 + i; with ATTN_KEY_ROWS its rows are keys and the sum runs
 * over queries, none of which sees a key at or past len and, causal, none before the key's
 * position. The other terms add 0 (or -0) to a sum that starts at +0 and is never -0: leaving
 * them out gives the same bits, so long as B holds no infinity or NaN. */
enum { ATTN_ALL_TERMS, ATTN_QUERY_ROWS, ATTN_KEY_ROWS };
inline uint2 attn_terms(int mode, uint i0, uint rows, uint m, uint k, uint len, bool causal,
                        uint q0) {
  if (mode == ATTN_QUERY_ROWS) {
    const uint last = min(i0 + rows, m) - 1;
    return (uint2)(0u, min(k, causal ? min(len, q0 + last + 1) : len));
  }
  if (mode == ATTN_KEY_ROWS) {
    if (i0 >= len) return (uint2)(0u, 0u);
    /* max, not i0 > q0 ? i0 - q0 : 0 (clang makes that llvm.usub.sat, unknown to Oclgrind) */
    return (uint2)(causal ? min((uint)max((int)i0 - (int)q0, 0), k) : 0u, k);
  }
  return (uint2)(0u, k);
}

/* C (m x n, rows ldc apart) = op(A) B (+ A2 B2 with k2 > 0) on CPU devices: gemm_cpu_batch's
 * sum for one product, B (k x n) and B2 (k2 x n) rows n apart (attn_fwd_cpu's alpha' V + B'
 * wV, attn_bwd_cpu's dV, dQ + C wK, dK; table_grads_cpu's), each block of rows over only the
 * terms attn_terms gives (mode, len, causal, q0 as there) */
inline void attn_ab(uint m, uint n, uint k, __global const float *A, uint lda, int trans_a,
                    __global const float *B, __global const float *A2, uint lda2,
                    __global const float *B2, uint k2, __global float *C, uint ldc, int mode,
                    uint len, bool causal, uint q0) {
  const size_t sp = trans_a ? lda : 1u; /* op(A)[i][p] is A[i][p sp] */
  for (uint j0 = 0; j0 < n; j0 += 2 * CPU_W)
    for (uint i0 = 0; i0 < m; i0 += CPU_MR) {
      const bool few = m - i0 <= CPU_MR / 2;
      const uint2 t = attn_terms(mode, i0, few ? CPU_MR / 2 : CPU_MR, m, k, len, causal, q0);
      __global const float *Ap = A + t.x * sp, *Bp = B + (size_t)t.x * n + j0;
      if (few)
        cpu_rows(i0, j0, m, n, t.y - t.x, 1.0f, 0.0f, Ap, lda, trans_a, Bp, n, A2, lda2,
                 B2 + j0, n, k2, C + j0, ldc, false, 0, A, 0, B, C, A2, 0, true, C, 0, 0, 0, 0,
                 0);
      else
        cpu_rows(i0, j0, m, n, t.y - t.x, 1.0f, 0.0f, Ap, lda, trans_a, Bp, n, A2, lda2,
                 B2 + j0, n, k2, C + j0, ldc, false, 0, A, 0, B, C, A2, 0, false, C, 0, 0, 0, 0,
                 0);
    }
}

/* The most rows a table_grads_cpu block takes: its accumulators (two a row), X's two vectors
 * and L's broadcast fit in AVX-512's 32 registers with 12 (W 16: 24 + 3), in AVX2's 16 with
 * CPU_MR's 6 (12 + 3) */
#define TABLE_MR (CPU_W >= 16 ? 12 : CPU_MR)

/* One block of table_grads_cpu's sum: rows i0 .. i0 + rows - 1 (rows at most TABLE_MR, a
 * constant where this is inlined) and columns j0 .. j0 + 2 W - 1 of acc (R x d, rows d apart)
 * += L^T X over the s rows at L (rows R apart) and X (rows d apart); with first, acc starts
 * at 0 rather than being read. At step p it asks for line q0 + p of the next pass's lines:
 * X's span ax (axl lines), then L's al (all lines). */
__attribute__((always_inline)) inline void table_block(__global const float *L, uint R,
                                                       __global const float *X, uint d,
                                                       uint s, uint i0, uint j0,
                                                       __global float *acc, bool first,
                                                       const uint rows,
                                                       __global const float *ax, uint axl,
                                                       __global const float *al, uint all,
                                                       uint q0) {
  CPU_VEC c0[TABLE_MR], c1[TABLE_MR];
  _Pragma("unroll") for (int r = 0; r < TABLE_MR; r++) if (r < rows) {
    __global const float *c = acc + (size_t)(i0 + r) * d + j0;
    c0[r] = first ? (CPU_VEC)(0.0f) : CPU_VLOAD(0, c);
    c1[r] = first ? (CPU_VEC)(0.0f) : CPU_VLOAD(1, c);
  }
  __global const float *lp = L + i0, *xp = X + j0;
  for (uint p = 0; p < s; p++, lp += R, xp += d) {
    const uint q = q0 + p;
    if (q < axl)
      CPU_PREFETCH(ax + (size_t)q * 16, 0);
    else if (q - axl < all)
      CPU_PREFETCH(al + (size_t)(q - axl) * 16, 0);
    const CPU_VEC b0 = CPU_VLOAD(0, xp), b1 = CPU_VLOAD(1, xp);
    _Pragma("unroll") for (int r = 0; r < TABLE_MR; r++) if (r < rows) {
      const CPU_VEC av = (CPU_VEC)(lp[r]);
      c0[r] = CPU_MAD(av, b0, c0[r]);
      c1[r] = CPU_MAD(av, b1, c1[r]);
    }
  }
  _Pragma("unroll") for (int r = 0; r < TABLE_MR; r++) if (r < rows) {
    CPU_VSTORE(c0[r], 0, acc + (size_t)(i0 + r) * d + j0);
    CPU_VSTORE(c1[r], 1, acc + (size_t)(i0 + r) * d + j0);
  }
}

/* A shared table's gradient on CPU devices (lib/ops/attention.c shared_table_grads), the
 * first of two passes of fixed order (then layers.cl's colsum_finish), for one or two tables
 * in one launch: table t's partial sums L^T X (R x d) over chunks of `chunk` rows (the last
 * may be shorter), L (rows x R) and X (rows x d) at L0, X0 (t 0) or L1, X1 (t 1), into part +
 * (t chunks + c) R d for chunk c. Global (chunks, tables), local (1, 1).
 *
 * The chunk's rows go in passes of about 16 kB of X (4096 / d rows), each pass through every
 * block of the R x d result, which waits in part (this work-item's own, in L1) between
 * passes; a pass's operands (X's and L's rows, 25 kB at d 64, R 33) stay in L1 while its
 * blocks use them, and its steps ask for the next pass's lines (the next chunk's past the
 * last). The blocks of rows split R evenly at TABLE_MR rows at most (33: three of 11, where
 * blocks of 8 left one row to a block of its own). Each element is the sum, in the order
 * p = 0 .. len - 1 (CPU_MAD), that gemm_cpu_batch's attn_ab computes, which this kernel ran
 * before and still runs where d is not a multiple of 2 W: the same bits. Before, each block
 * streamed the whole chunk (200 kB at issue 8's shape) from L2 and its first touch from
 * memory: the kernel alone, both tables, 16,000 rows, inputs out of L2 (model-207 Xeon,
 * alternated, medians of 20-60): 33 x 64, 0.52-0.66 of the time; 17 x 64, 0.59-0.73 (without
 * the asks, 0.79); issue 8's step (relcl-bench --compare), 0.50 and 0.52. */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void table_grads_cpu(
    __global const float *L0, uint l0_off, __global const float *X0, uint x0_off,
    __global const float *L1, uint l1_off, __global const float *X1, uint x1_off,
    __global float *part, uint rows, int R, int d, uint chunk) {
  const uint c = get_global_id(0), t = get_global_id(1), r = (uint)R, dd = (uint)d;
  const uint i0 = c * chunk, len = min(rows - i0, chunk);
  __global const float *Lt = t ? L1 + l1_off : L0 + l0_off;
  __global const float *Xt = t ? X1 + x1_off : X0 + x0_off;
  __global const float *L = Lt + (size_t)i0 * r, *X = Xt + (size_t)i0 * dd;
  __global float *acc = part + ((size_t)t * get_global_size(0) + c) * r * dd;
  if (dd % (2 * CPU_W) != 0) {
    attn_ab(r, dd, len, L, r, 1, X, L, 0, X, 0, acc, dd, ATTN_ALL_TERMS, 0u, false, 0u);
    return;
  }
  const uint pass = max(4096u / dd, 8u);
  const uint blocks = (r + TABLE_MR - 1) / TABLE_MR, base = r / blocks;
  const uint extra = r - base * blocks; /* the first `extra` blocks have base + 1 rows */
  for (uint p0 = 0; p0 < len; p0 += pass) {
    const uint s = min(len - p0, pass), n0 = i0 + p0 + s;
    const uint ns = n0 < rows ? min(rows - n0, pass) : 0u; /* the next pass's rows */
    __global const float *ax = Xt + (size_t)n0 * dd, *al = Lt + (size_t)n0 * r;
    const uint axl = (ns * dd + 15) / 16, all = (ns * r + 15) / 16;
    __global const float *Lp = L + (size_t)p0 * r, *Xp = X + (size_t)p0 * dd;
    uint q0 = 0;
    for (uint j0 = 0; j0 < dd; j0 += 2 * CPU_W)
      for (uint b = 0, b0 = 0; b < blocks; b++, q0 += s) {
        const uint rb = base + (b < extra ? 1u : 0u);
        switch (rb) { /* a constant for table_block (cases past TABLE_MR never come) */
#define TABLE_BLOCK(RB)                                                                     \
  case RB:                                                                                  \
    table_block(Lp, r, Xp, dd, s, b0, j0, acc, p0 == 0, RB, ax, axl, al, all, q0);          \
    break;
          TABLE_BLOCK(1) TABLE_BLOCK(2) TABLE_BLOCK(3) TABLE_BLOCK(4) TABLE_BLOCK(5)
          TABLE_BLOCK(6) TABLE_BLOCK(7) TABLE_BLOCK(8) TABLE_BLOCK(9) TABLE_BLOCK(10)
          TABLE_BLOCK(11) TABLE_BLOCK(12)
#undef TABLE_BLOCK
        }
        b0 += rb;
      }
  }
}

/* Slice i of `of` of the len floats at p, asked for (CPU_PREFETCH) a slice at each of a head's
 * rows: the operands of the product after the rows, and the next head's, come in while the
 * rows compute, where a product that met them cold waited on memory at each row of B
 * (perf: most of attn_ab's samples on its loads of B). PoCL runs consecutive work-groups on
 * one thread, so the next head is most often this thread's next. Zen 3 EPYC, relative
 * self-attention of issue 8's model alone, two alternating pairs: forward 7.6-7.7 -> 6.0-6.2
 * ms, backward 13.5-13.7 -> 11.6-11.7. */
inline void attn_ask(__global const float *p, uint len, uint i, uint of) {
  const uint lines = (len + 15) / 16, per = (lines + of - 1) / of;
  for (uint l = i * per; l < min(lines, (i + 1) * per); l++) CPU_PREFETCH(p + (size_t)l * 16, 0);
}

/* Slice i of `of` of a head's output rows (rows of cols floats, ld apart), asked for with the
 * intent to write (attn_bwd_cpu's dV, dQ, dK during the rows before their products): without
 * that the products' stores waited for their lines (perf: the store in attn_ab's cpu_store
 * held a fifth of attn_bwd_cpu's product samples at issue 8's shape) */
inline void attn_ask_out(__global const float *p, uint rows, uint cols, uint ld, uint i,
                         uint of) {
  const uint per = (rows + of - 1) / of;
  for (uint q = i * per; q < min(rows, (i + 1) * per); q++)
    for (uint c = 0; c < cols; c += 16) CPU_PREFETCH(p + (size_t)q * ld + c, 1);
}

/* Where head bh's rows of a (B H) x rows x d tensor start: the heads layout (ld 0), or the
 * merged one, (bh / H) rows ld + (bh % H) d with rows ld apart */
inline size_t attn_head_at(uint bh, uint H, uint rows, uint d, uint ld) {
  const uint bs = bh / H;
  return ld > 0 ? (size_t)bs * rows * ld + (size_t)(bh - bs * H) * d : (size_t)bh * rows * d;
}

/* Attention's forward on CPU devices, a work-item per (sequence, head) bh, for a shared
 * table (lib/ops/attention.c decides): what gemm_cpu_bt, attn_fwd_rows and gemm_cpu_batch do
 * for that head in four launches, in one, which asks for the operands of the product after
 * the rows (and for the next head's) while the rows run (attn_ask):
 *   S = Q K^T;  with RELCL_GATHER, P = Q wK^T over the labels rlo .. rlo + R - 1 (nq x R);
 *   each row as attn_fwd_rows' (relcl_fwd_row_item): alpha to probs, alpha' over S, its
 *   label sums to Bk (with RELCL_BUCKET);
 *   Z = alpha' V (+ Bk wV with RELCL_BUCKET).
 * Each element is the same sum, in the same order, as in those kernels: the bits are theirs.
 * S, P and Bk hold (BH nq nk), (BH nq R) and (BH nq R) floats: scratch, or S and Bk the
 * caller's saved state (lib/ops/ops.h), where alpha' and its label sums stay for the backward;
 * wK and wV start at label rlo; Z at ld z_ld (attn_head_at). d at most CPU_BT_KMAX. Global
 * (BH), local (1). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void attn_fwd_cpu(
    __global const float *Q, uint q_off, __global const float *K, uint k_off,
    __global const float *V, uint v_off, __global const float *wK, uint wk_off,
    __global const float *wV, uint wv_off, __global const int *key_len, uint kl_off,
    __global float *Z, uint z_off, uint z_ld, __global float *probs, uint probs_off,
    __global float *S, uint s_off, __global float *P, __global float *Bk, uint bk_off, int H,
    int nq, int nk, int k, int rlo, int R, int q_pos0, int d, int flags, float scale,
    uint drop_threshold, float drop_scale, uint seed_lo, uint seed_hi, uint stream_lo,
    uint stream_hi) {
  __local float Bt[CPU_BT_KMAX * 2 * CPU_W];
  const uint bh = get_global_id(0), m = (uint)nq, n = (uint)nk, dd = (uint)d, r = (uint)R;
  __global const float *Qb = Q + q_off + (size_t)bh * m * dd;
  __global float *Sb = S + s_off + (size_t)bh * m * n, *Pb = P + (size_t)bh * m * r;
  __global float *Bb = Bk + bk_off + (size_t)bh * m * r;
  attn_bt(Bt, m, n, dd, Qb, dd, K + k_off + (size_t)bh * n * dd, Sb, n);
  if (flags & RELCL_GATHER) attn_bt(Bt, m, r, dd, Qb, dd, wK + wk_off, Pb, r);
  const int len = relcl_row_len(key_len, kl_off, (int)bh / H, nk, flags);
  __global const float *Vb = V + v_off + (size_t)bh * n * dd;
  const bool next = bh + 1 < get_global_size(0);
  const bool near = (flags & RELCL_GATHER) && R >= 8; /* relcl_labels8 between two rows */
  for (int i = 0; i < nq; i++) {
    const int row = (int)bh * nq + i;
    attn_ask(Vb, n * dd, (uint)i, m); /* alpha' V's, and the next head's Q K^T's */
    if (next) {
      attn_ask(Qb + m * dd, m * dd, (uint)i, m);
      attn_ask(K + k_off + (size_t)(bh + 1) * n * dd, n * dd, (uint)i, m);
    }
    relcl_fwd_row_item(Sb + (size_t)i * n, Pb + (size_t)i * r, 1u, near && i > 0 && i + 1 < nq,
                       probs + probs_off + (size_t)row * n, Bb + (size_t)i * r, row, q_pos0 + i,
                       len, nk, k, rlo, R, flags, scale, drop_threshold, drop_scale, seed_lo,
                       seed_hi, stream_lo, stream_hi);
  }
  const bool causal = (flags & RELCL_CAUSAL) != 0;
  attn_ab(m, dd, n, Sb, n, 0, Vb, Bb, r, wV + wv_off, (flags & RELCL_BUCKET) ? r : 0u,
          Z + z_off + attn_head_at(bh, (uint)H, m, dd, z_ld), z_ld > 0 ? z_ld : dd,
          ATTN_QUERY_ROWS, (uint)len, causal, (uint)q_pos0);
}

/* Attention's backward on CPU devices, a work-item per (sequence, head) bh, for a shared
 * table (lib/ops/attention.c decides): what attn_drop_rows, gemm_cpu_batch, gemm_cpu_bt and
 * attn_bwd_rows do for that head in seven launches, in one, the same sums in the same order,
 * asking for each product's operands during the rows before it (attn_ask):
 *   with fd (attn_drop_rows' flags) set, alpha' = dropout(alpha) into A (RELCL_WRITE_A) and
 *   its label sums into Bk (RELCL_BUCKET), each row as relcl_drop_row_item; with fd
 *   RELCL_SAVED, A and Bk hold them already (the forward's saved state: no such pass);
 *   dV = alpha'^T dZ;  D = dZ V^T;  with RELCL_GATHER in fb, G = dZ wV^T (nq x R);
 *   each row as attn_bwd_rows' (relcl_bwd_row_item, flags fb): D becomes the logits'
 *   gradient, its label sums go to Cb (RELCL_BUCKET); dropout's mask from alpha' in A
 *   where the first step wrote it;
 *   dQ = D K (+ Cb wK with RELCL_BUCKET);  dK = D^T Q.
 * The tables' gradients (sums over every head) are left to the host, from Bk and Cb. A is
 * probs where there is no dropout and nothing saved; A, D, G, Bk and Cb are (BH nq nk), (BH
 * nq nk) and (BH nq R) floats. dQ at ld dq_ld, dK and dV at dkv_ld (attn_head_at). Global
 * (BH), local (1). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void attn_bwd_cpu(
    __global const float *Q, uint q_off, __global const float *K, uint k_off,
    __global const float *V, uint v_off, __global const float *wK, uint wk_off,
    __global const float *wV, uint wv_off, __global const int *key_len, uint kl_off,
    __global const float *probs, uint probs_off, __global const float *dZ, uint dz_off,
    __global float *dQ, uint dq_off, uint dq_ld, __global float *dK, uint dk_off,
    __global float *dV, uint dv_off, uint dkv_ld, __global float *A, uint a_off,
    __global float *D, __global float *G, __global float *Bk, uint bk_off, __global float *Cb,
    int H, int nq, int nk, int k,
    int rlo, int R, int q_pos0, int d, int fd, int fb, float scale, uint drop_threshold,
    float drop_scale, uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
  __local float Bt[CPU_BT_KMAX * 2 * CPU_W];
  const uint bh = get_global_id(0), m = (uint)nq, n = (uint)nk, dd = (uint)d, r = (uint)R;
  __global const float *Qb = Q + q_off + (size_t)bh * m * dd;
  __global const float *Kb = K + k_off + (size_t)bh * n * dd;
  __global const float *Vb = V + v_off + (size_t)bh * n * dd;
  __global const float *dZb = dZ + dz_off + (size_t)bh * m * dd;
  __global const float *ab = probs + probs_off + (size_t)bh * m * n;
  __global float *Db = D + (size_t)bh * m * n, *Gb = G + (size_t)bh * m * r;
  __global float *Bb = Bk + bk_off + (size_t)bh * m * r, *Cbb = Cb + (size_t)bh * m * r;
  const bool has_a = (fd & (RELCL_WRITE_A | RELCL_SAVED)) != 0; /* alpha' in A */
  __global const float *Ab = has_a ? A + a_off + (size_t)bh * m * n : ab;
  const uint ql = dq_ld > 0 ? dq_ld : dd, kl = dkv_ld > 0 ? dkv_ld : dd;
  __global float *dQb = dQ + dq_off + attn_head_at(bh, (uint)H, m, dd, dq_ld);
  __global float *dKb = dK + dk_off + attn_head_at(bh, (uint)H, n, dd, dkv_ld);
  __global float *dVb = dV + dv_off + attn_head_at(bh, (uint)H, n, dd, dkv_ld);
  for (int i = 0; i < nq; i++) {
    attn_ask(dZb, m * dd, (uint)i, m); /* dV's and D's (attn_ask) */
    attn_ask(Vb, n * dd, (uint)i, m);
    attn_ask_out(dVb, n, dd, kl, (uint)i, m);
    if (fd && !(fd & RELCL_SAVED))
      relcl_drop_row_item(ab + (size_t)i * n, (__global float *)Ab + (size_t)i * n,
                          Bb + (size_t)i * r, (int)bh * nq + i, q_pos0 + i, nk, k, rlo, R, fd,
                          drop_threshold, drop_scale, seed_lo, seed_hi, stream_lo, stream_hi);
  }
  const int len = relcl_row_len(key_len, kl_off, (int)bh / H, nk, fb);
  const bool causal = (fb & RELCL_CAUSAL) != 0;
  /* dV = alpha'^T dZ */
  attn_ab(n, dd, m, Ab, n, 1, dZb, Ab, 0, dZb, 0, dVb, kl, ATTN_KEY_ROWS, (uint)len, causal,
          (uint)q_pos0);
  /* D = dZ V^T, G = dZ wV^T */
  attn_bt(Bt, m, n, dd, dZb, dd, Vb, Db, n);
  if (fb & RELCL_GATHER) attn_bt(Bt, m, r, dd, dZb, dd, wV + wv_off, Gb, r);
  const bool near = (fb & RELCL_GATHER) && R >= 8; /* relcl_labels8 between two rows */
  for (int i = 0; i < nq; i++) {
    attn_ask(Kb, n * dd, (uint)i, m); /* dQ's and dK's */
    attn_ask(Qb, m * dd, (uint)i, m);
    attn_ask_out(dQb, m, dd, ql, (uint)i, m);
    attn_ask_out(dKb, n, dd, kl, (uint)i, m);
    relcl_bwd_row_item(Db + (size_t)i * n, Gb + (size_t)i * r, 1u, near && i > 0 && i + 1 < nq,
                       ab + (size_t)i * n,
                       has_a && (fb & RELCL_DROPOUT) ? Ab + (size_t)i * n : 0,
                       Cbb + (size_t)i * r, (int)bh * nq + i, q_pos0 + i, len, nk, k, rlo, R, fb,
                       scale, drop_threshold, drop_scale, seed_lo, seed_hi, stream_lo,
                       stream_hi);
  }
  /* dQ = D K (+ C wK), dK = D^T Q */
  attn_ab(m, dd, n, Db, n, 0, Kb, Cbb, r, wK + wk_off, (fb & RELCL_BUCKET) ? r : 0u, dQb, ql,
          ATTN_QUERY_ROWS, (uint)len, causal, (uint)q_pos0);
  attn_ab(n, dd, m, Db, n, 1, Qb, Db, 0, Qb, 0, dKb, kl, ATTN_KEY_ROWS, (uint)len, causal,
          (uint)q_pos0);
}
#endif
