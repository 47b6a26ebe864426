/* The per-head products of attention on CPU devices (lib/runtime/gemm.c decides), a batch of
 * small row-major GEMMs C = alpha op(A) op(B) + beta C, C m x n, op(A) m x k, op(B) k x n:
 * Q K^T (32 x 32 x 64 in the issue-8 model), alpha V and its transposes (32 x 64 x 32), 500
 * at a time; in real batches the sentences' lengths (7 to 36 and more) instead of 32. CLBlast's
 * direct kernel runs them at 30-40% of its SGEMM rate on PoCL (its indirect one needs
 * parameters of its own for them, which CLBlast can only swap in by copying its database each
 * call). On GPUs CLBlast's kernel stays. Two kernels (README "Per-head products on a CPU"):
 *
 * gemm_heads_rows and gemm_heads_dots (at the end), a work-item per row of C, for every
 * product with B as laid out and for B transposed with fewer than 16 columns.
 *
 * gemm_heads, tiles, for B transposed (Q K^T, dalpha) with 16 columns or more. The shape is a
 * CPU's: PoCL runs a work-group as a loop over its work-items, and LLVM turns explicit vectors
 * into SIMD registers. A work-group of HEADS_NW work-items computes a tile of HEADS_TM x
 * HEADS_TN of one product; each work-item HEADS_WM rows of it, in HEADS_WM float16
 * accumulators (8 zmm on AVX-512, 16 ymm on AVX2). Each HEADS_TK slice of the sum is staged in
 * local memory first, zero past the matrices' edges, so the inner loop has constant bounds
 * (LLVM unrolls it; with a run-time bound it ran 25-40% slower):
 *   As: op(A)'s rows i, as A is laid out (transposed: As[p][i]; not: As[i][p])
 *   Bs: op(B) as Bs[p][j], transposed as it is staged (through registers in whole blocks).
 * Each element of C is one sum in order p = 0 .. k-1 (mad), the same on every run.
 *
 * The operands come from memory, not cache (the batch is megabytes), and the hardware
 * prefetcher does not guess the next product's rows: each work-group first asks for the
 * same tile of the next product in the batch, which the next work-groups on its thread
 * compute (PoCL hands a thread consecutive work-groups). On PoCL (Zen 5, operands that change
 * every call) that ran Q K^T 25% faster. OpenCL's prefetch() does nothing on PoCL; clang's
 * __builtin_prefetch does, where the compiler is clang and the target a CPU; elsewhere
 * HEADS_PREFETCH is 0 and the kernel asks for nothing. With beta 0, C is written around the
 * caches (non-temporal stores, x86 only: HEADS_STREAM), so writing it does not first read
 * each line from memory: in relcl-bench's issue-8 run that ran the products 10-30% faster and
 * the kernels that read C next (attention rows, head merge) no slower.
 *
 * Global (ceil(n / TN) * NW, ceil(m / TM), batch), local (NW, 1, 1). NW, WM and TN are
 * flags.h's RELCL_HEADS_*, which gemm.c sizes the grid from. */
#define HEADS_NW RELCL_HEADS_NW
#define HEADS_WM RELCL_HEADS_WM
#define HEADS_TM (HEADS_NW * HEADS_WM)
#define HEADS_TN RELCL_HEADS_TN
#define HEADS_TK 32
/* clang's builtins where the compiler is clang (and for the first two the target a CPU),
 * standard OpenCL C elsewhere, and where RELCL_PORTABLE is defined (the suite's
 * layers_portable runs the batched products so) */
#if defined(__clang__) && !defined(RELCL_PORTABLE)
#define HEADS_CLANG 1
#else
#define HEADS_CLANG 0
#endif
#if HEADS_CLANG && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__))
#define HEADS_PREFETCH 1
#else
#define HEADS_PREFETCH 0
#endif
#if HEADS_CLANG && (defined(__x86_64__) || defined(__i386__))
#define HEADS_STREAM 1
#else
#define HEADS_STREAM 0
#endif

/* Shuffles of two float16 by constant indices (0-15 the first, 16-31 the second): clang's
 * builtin where the compiler is clang, OpenCL's shuffle2 elsewhere. Both become one vector
 * permute each on PoCL; with shuffle2 Q K^T ran 5% slower (relcl-bench, two interleaved
 * pairs, Zen 5). */
#if HEADS_CLANG
#define HEADS_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define HEADS_SHUFFLE(a, b, ...) shuffle2(a, b, (uint16)(__VA_ARGS__))
#endif

/* One step of a 16 x 16 transpose in v[16]: in every pair of rows (r, r + S), r's bit S clear,
 * the entries in columns with bit S set in row r swap with those with it clear in row r + S.
 * After the steps for S = 8, 4, 2 and 1, (r, c) has gone to (c, r). Fully unrolled it must
 * be: written as a loop over all 16 rows with a test of bit S, the transpose gained nothing
 * over staging element by element. */
#define HEADS_TRANSPOSE_STEP(S, LO, HI)                                                     \
  _Pragma("unroll") for (int q = 0; q < 8; q++) {                                           \
    const int r = q / S * 2 * S + q % S;                                                    \
    const float16 x = v[r], y = v[r + S];                                                   \
    v[r] = HEADS_SHUFFLE(x, y, LO);                                                         \
    v[r + S] = HEADS_SHUFFLE(x, y, HI);                                                     \
  }
#define HEADS_LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define HEADS_HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define HEADS_LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define HEADS_HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define HEADS_LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define HEADS_HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define HEADS_LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define HEADS_HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31

/* dst (row length dst_ld) = the transpose of the 16 x 16 block at src (ld), in registers:
 * 16 row loads, 64 shuffles and 16 row stores instead of 256 scattered reads (for Q K^T, 30%
 * faster in a harness on Zen 5). */
inline void heads_transpose16(__local float *dst, uint dst_ld, __global const float *src,
                              uint ld) {
  float16 v[16];
  _Pragma("unroll") for (int r = 0; r < 16; r++) v[r] = vload16(0, src + r * ld);
  HEADS_TRANSPOSE_STEP(8, HEADS_LO8, HEADS_HI8)
  HEADS_TRANSPOSE_STEP(4, HEADS_LO4, HEADS_HI4)
  HEADS_TRANSPOSE_STEP(2, HEADS_LO2, HEADS_HI2)
  HEADS_TRANSPOSE_STEP(1, HEADS_LO1, HEADS_HI1)
  _Pragma("unroll") for (int r = 0; r < 16; r++) vstore16(v[r], 0, dst + r * dst_ld);
}

/* dst (R x CC, row length CC) = the R x CC tile of src at its origin (ld), zero outside
 * rows_in x cols_in; transposed: dst[r][c] = src[c][r]. Work-item w copies rows w, w + NW...
 * R and CC are multiples of 16. */
inline void heads_stage(__local float *dst, __global const float *src, uint ld, uint rows_in,
                        uint cols_in, uint R, uint CC, int transposed, uint w) {
  if (transposed && rows_in >= R && cols_in >= CC) { /* whole: in 16 x 16 blocks */
    for (uint q = w; q < R / 16 * (CC / 16); q += HEADS_NW) {
      const uint r = q % (R / 16) * 16, c = q / (R / 16) * 16;
      heads_transpose16(dst + r * CC + c, CC, src + c * ld + r, ld);
    }
    return;
  }
  for (uint r = w; r < R; r += HEADS_NW)
    for (uint c = 0; c < CC; c += 16) {
      if (r >= rows_in || c >= cols_in)
        vstore16((float16)(0.0f), 0, dst + r * CC + c);
      else if (!transposed && c + 16 <= cols_in)
        vstore16(vload16(0, src + r * ld + c), 0, dst + r * CC + c);
      else
        for (uint e = c; e < c + 16; e++)
          dst[r * CC + e] = r < rows_in && e < cols_in
                                ? src[transposed ? e * ld + r : r * ld + e]
                                : 0.0f;
    }
}

/* Ask for the rows x cols block at src (ld) to be brought into cache, a line (16 floats) at
 * a time; work-item w asks for rows w, w + NW... */
inline void heads_prefetch(__global const float *src, uint ld, uint rows, uint cols, uint w) {
#if HEADS_PREFETCH
  for (uint r = w; r < rows; r += HEADS_NW)
    for (uint c = 0; c < cols; c += 16) __builtin_prefetch(src + r * ld + c, 0, 3);
#endif
}

/* Q K^T and dalpha = dZ V^T of 16 keys or more: gemm.c sends only products with B transposed
 * (trans_b 1) here, and every other batched product to gemm_heads_rows or gemm_heads_dots
 * below. The kernel keeps its branch for B as laid out, which gemm.c no longer reaches: without
 * it PoCL compiled the transposed path 10-15% slower (harness, Zen 5, 0.84-0.87 ms against
 * 0.74-0.78 for Q K^T 32 x 32 x 64 x500). */
__kernel __attribute__((reqd_work_group_size(HEADS_NW, 1, 1))) void gemm_heads(
    uint m, uint n, uint k, float alpha, float beta, __global const float *A, uint a_off,
    uint lda, uint a_stride, int trans_a, __global const float *B, uint b_off, uint ldb,
    uint b_stride, int trans_b, __global float *C, uint c_off, uint ldc, uint c_stride) {
  __local float As[HEADS_TM * HEADS_TK];
  __local float Bs[HEADS_TK * HEADS_TN];
  const uint w = get_local_id(0);
  const uint j0 = get_group_id(0) * HEADS_TN, i0 = get_group_id(1) * HEADS_TM;
  const ulong b = get_group_id(2);
  A += a_off + b * a_stride;
  B += b_off + b * b_stride;
  C += c_off + b * c_stride;

  if (HEADS_PREFETCH && b + 1 < get_num_groups(2)) {
    const uint tm = min((uint)HEADS_TM, m - i0), tn = min((uint)HEADS_TN, n - j0);
    if (trans_a) heads_prefetch(A + a_stride + i0, lda, k, tm, w);
    else heads_prefetch(A + a_stride + i0 * lda, lda, tm, k, w);
    if (trans_b) heads_prefetch(B + b_stride + j0 * ldb, ldb, tn, k, w);
    else heads_prefetch(B + b_stride + j0, ldb, k, tn, w);
  }
  float16 acc[HEADS_WM];
  for (int r = 0; r < HEADS_WM; r++) acc[r] = (float16)(0.0f);
  for (uint p0 = 0; p0 < k; p0 += HEADS_TK) {
    const uint kk = min((uint)HEADS_TK, k - p0);
    barrier(CLK_LOCAL_MEM_FENCE); /* the last slice's reads are done */
    if (trans_a) /* A is k x m */
      heads_stage(As, A + p0 * lda + i0, lda, kk, m - i0, HEADS_TK, HEADS_TM, 0, w);
    else /* A is m x k */
      heads_stage(As, A + i0 * lda + p0, lda, m - i0, kk, HEADS_TM, HEADS_TK, 0, w);
    if (trans_b) /* B is n x k */
      heads_stage(Bs, B + j0 * ldb + p0, ldb, kk, n - j0, HEADS_TK, HEADS_TN, 1, w);
    else /* B is k x n */
      heads_stage(Bs, B + p0 * ldb + j0, ldb, kk, n - j0, HEADS_TK, HEADS_TN, 0, w);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int p = 0; p < HEADS_TK; p++) {
      const float16 bv = vload16(0, Bs + p * HEADS_TN);
      for (int r = 0; r < HEADS_WM; r++) {
        const uint i = w * HEADS_WM + r;
        const float a = trans_a ? As[p * HEADS_TM + i] : As[i * HEADS_TK + p];
        acc[r] = mad((float16)(a), bv, acc[r]);
      }
    }
  }

  /* beta 0 does not read C (BLAS's rule: C may hold anything, NaN included) */
  for (int r = 0; r < HEADS_WM; r++) {
    const uint i = i0 + w * HEADS_WM + r;
    if (i >= m) break;
    __global float *c = C + i * ldc + j0;
    const float16 v = alpha * acc[r];
    if (j0 + 16 <= n) {
#if HEADS_STREAM /* movntps wants the line's alignment */
      if (beta == 0.0f && ((size_t)c & 63) == 0) {
        __builtin_nontemporal_store(v, (__global float16 *)c);
        continue;
      }
#endif
      vstore16(beta != 0.0f ? v + beta * vload16(0, c) : v, 0, c);
    } else {
      float l[16];
      vstore16(v, 0, l);
      for (uint e = 0; e < n - j0; e++) c[e] = beta != 0.0f ? l[e] + beta * c[e] : l[e];
    }
  }
#if HEADS_STREAM
  /* Non-temporal stores are not ordered with later ones: drain them before the kernel ends.
   * Once per work-group, after the barrier, on the thread that ran the group (a CPU runtime
   * runs a work-group on one thread). An sfence per work-item stalls on each one's stores in
   * turn: the products ran 30% slower than without any. */
  barrier(CLK_GLOBAL_MEM_FENCE);
  if (w == 0) __builtin_ia32_sfence();
#endif
}

/* The products a tile fits badly, in a work-item per row of C: row i of product b is
 * work-item b m + i, global (batch m rounded up to the work-group), local (16). Each work-item
 * reads its operands straight from memory, with no staging and no barrier; the rows of one
 * product are neighbouring work-items, so its B is read from memory once and then from cache.
 * gemm.c sends here every product with B as laid out (gemm_heads_rows), which this ran as
 * fast as tiles (16 or 32 wide) at 32 x 64 x 32 and 2.5 to 11 times faster at the lengths of
 * real batches (7 to 36: the tiles of 32 rows and 32 along the sum were mostly empty), and
 * those with B transposed of fewer than 16 columns (gemm_heads_dots: Q K^T 3 times faster at
 * 7 keys; from 16 on the tiles are faster). Two kernels, not one with a branch: in one,
 * gemm_heads_dots' code made PoCL compile gemm_heads_rows' 25% slower. Each element is one
 * sum in a fixed order (in gemm_heads_dots not the tiles' order, so which kernel runs depends
 * only on the shape). */
#define HEADS_ROW_ARGS                                                                      \
  uint m, uint n, uint k, float alpha, float beta, __global const float *A, uint a_off,     \
      uint lda, uint a_stride, int trans_a, __global const float *B, uint b_off, uint ldb,  \
      uint b_stride, __global float *C, uint c_off, uint ldc, uint c_stride, uint batch
/* this work-item's row: b, i, and A, B, C moved to product b (C to its row i); returns from
 * the kernel past the last row */
#define HEADS_ROW_START                                                                     \
  const uint g = get_global_id(0);                                                          \
  if (g >= batch * m) return;                                                               \
  const uint b = g / m, i = g - b * m; /* not g % m: LLVM then adds a freeze, which       \
                                        * Oclgrind's uninitialized-value checker rejects */ \
  A += a_off + (ulong)b * a_stride;                                                         \
  B += b_off + (ulong)b * b_stride;                                                         \
  C += c_off + (ulong)b * c_stride + (size_t)i * ldc

/* op(A)[i][p]: A m x k as laid out, or k x m transposed */
inline float heads_a(__global const float *A, uint lda, int trans_a, uint i, uint p) {
  return trans_a ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
}

/* B as laid out (alpha V, dQ, dV), B k x n: C[i][j0 .. j0 + 16) in one float16, a sum over p
 * of op(A)[i][p] B[p][j0 ..], for each block of 16 columns; the last columns one by one. */
__kernel void gemm_heads_rows(HEADS_ROW_ARGS) {
  HEADS_ROW_START;
  uint j0 = 0;
  for (; j0 + 16 <= n; j0 += 16) {
    float16 acc = (float16)(0.0f);
    for (uint p = 0; p < k; p++) {
      acc = mad((float16)(heads_a(A, lda, trans_a, i, p)), vload16(0, B + (size_t)p * ldb + j0),
                acc);
    }
    const float16 v = alpha * acc;
    vstore16(beta != 0.0f ? v + beta * vload16(0, C + j0) : v, 0, C + j0); /* beta 0: C unread */
  }
  for (uint j = j0; j < n; j++) {
    float s = 0.0f;
    for (uint p = 0; p < k; p++)
      s = mad(heads_a(A, lda, trans_a, i, p), B[(size_t)p * ldb + j], s);
    const float v = alpha * s;
    C[j] = beta != 0.0f ? v + beta * C[j] : v;
  }
}

/* B transposed (Q K^T, dalpha), B n x k: C[i][j] one dot product of op(A)'s row i and B's row
 * j, in float4 over p and then across the lanes (k a multiple of 4 and A as laid out;
 * otherwise one term at a time). float4 ran as fast as float16 here (memory-bound), and
 * needs no halving of a vector to one float, on which Oclgrind's uninitialized-value checker
 * fails. */
__kernel void gemm_heads_dots(HEADS_ROW_ARGS) {
  HEADS_ROW_START;
  for (uint j = 0; j < n; j++) {
    __global const float *bj = B + (size_t)j * ldb;
    float s = 0.0f;
    if (!trans_a && k % 4 == 0) {
      float4 acc = (float4)(0.0f);
      for (uint p = 0; p < k; p += 4)
        acc = mad(vload4(0, A + (size_t)i * lda + p), vload4(0, bj + p), acc);
      s = dot(acc, (float4)(1.0f));
    } else {
      for (uint p = 0; p < k; p++)
        s = mad(heads_a(A, lda, trans_a, i, p), bj[p], s);
    }
    const float v = alpha * s;
    C[j] = beta != 0.0f ? v + beta * C[j] : v; /* beta 0 does not read C */
  }
}

/* One product on CPU devices (gemm.c's cpu_product): C = alpha op(A) B + beta C, C m x n, B
 * k x n as laid out (gemm.c transposes a transposed B first), op(A) m x k (A m x k, or k x m
 * with trans_a). A work-item computes CPU_MR rows x 2 W columns of C in 2 CPU_MR accumulators
 * of W floats (W = RELCL_CPU_VEC, the device's native float vector width, a build option):
 * each step of the sum loads 2 W floats of B's row p and multiplies them by op(A)[i][p] of
 * its rows. On PoCL the vectors are the SIMD registers, and the accumulators fill most of
 * them: 16 of AVX-512's 32 (W 16, 8 rows), 12 of AVX2's 16 (W 8, 6 rows). On the Zen 5 EPYC
 * this ran the issue-8 model's products at 150-440 GFLOP/s, where CLBlast's tuned Xgemm ran
 * them at 85-124 (its float4 and float2 vectors fill a quarter of a register). Rows past m
 * read row m - 1 and are not stored; the last columns, if n is not a multiple of 2 W, go
 * through a zero-padded copy of B's row. Each element is one sum in order p = 0 .. k-1
 * (mad). Global (ceil(n / 2 W), ceil(m / CPU_MR)), local (1, 1); with rows_first the two
 * dimensions swap, so that consecutive work-items (which PoCL runs one after another on a
 * thread) share B's columns rather than A's rows. */
#define CPU_W RELCL_CPU_VEC
#define CPU_MR RELCL_CPU_MR(CPU_W)
#define CPU_PASTE_(a, b) a##b
#define CPU_PASTE(a, b) CPU_PASTE_(a, b)
#define CPU_VEC CPU_PASTE(float, RELCL_CPU_VEC)
#define CPU_VLOAD CPU_PASTE(vload, RELCL_CPU_VEC)
#define CPU_VSTORE CPU_PASTE(vstore, RELCL_CPU_VEC)
#define CPU_STEP(SP)                                                                        \
  {                                                                                         \
    _Pragma("unroll") for (int r = 0; r < CPU_MR; r++) {                                    \
      const CPU_VEC av = (CPU_VEC)(a[r][(SP)]);                                             \
      c0[r] = mad(av, b0, c0[r]);                                                           \
      c1[r] = mad(av, b1, c1[r]);                                                           \
    }                                                                                       \
  }
__kernel void gemm_cpu(uint m, uint n, uint k, float alpha, float beta, __global const float *A,
                       uint a_off, uint lda, int trans_a, __global const float *B, uint b_off,
                       uint ldb, __global float *C, uint c_off, uint ldc, int rows_first) {
  const uint c_id = get_global_id(rows_first ? 1 : 0), r_id = get_global_id(rows_first ? 0 : 1);
  const uint j0 = c_id * 2 * CPU_W, i0 = r_id * CPU_MR;
  if (j0 >= n || i0 >= m) return;
  A += a_off;
  B += b_off + j0;
  C += c_off + j0;
  __global const float *a[CPU_MR];
  CPU_VEC c0[CPU_MR], c1[CPU_MR];
  for (int r = 0; r < CPU_MR; r++) {
    const uint i = min(i0 + r, m - 1);
    a[r] = trans_a ? A + i : A + (size_t)i * lda;
    c0[r] = c1[r] = (CPU_VEC)(0.0f);
  }
  const size_t sp = trans_a ? lda : 1u; /* op(A)[i][p] is a[i][p sp] */
  if (j0 + 2 * CPU_W <= n) {
    for (uint p = 0; p < k; p++) {
      __global const float *bp = B + (size_t)p * ldb;
      const CPU_VEC b0 = CPU_VLOAD(0, bp), b1 = CPU_VLOAD(1, bp);
      CPU_STEP(p * sp)
    }
  } else {
    const uint nn = n - j0;
    for (uint p = 0; p < k; p++) {
      float t[2 * CPU_W];
      for (uint e = 0; e < 2 * CPU_W; e++) t[e] = e < nn ? B[(size_t)p * ldb + e] : 0.0f;
      const CPU_VEC b0 = CPU_VLOAD(0, t), b1 = CPU_VLOAD(1, t);
      CPU_STEP(p * sp)
    }
  }
  /* beta 0 does not read C (BLAS's rule: C may hold anything, NaN included) */
  for (int r = 0; r < CPU_MR; r++) {
    if (i0 + r >= m) break;
    __global float *c = C + (size_t)(i0 + r) * ldc;
    const CPU_VEC v0 = alpha * c0[r], v1 = alpha * c1[r];
    if (j0 + 2 * CPU_W <= n) {
      CPU_VSTORE(beta != 0.0f ? v0 + beta * CPU_VLOAD(0, c) : v0, 0, c);
      CPU_VSTORE(beta != 0.0f ? v1 + beta * CPU_VLOAD(1, c) : v1, 1, c);
    } else {
      float l[2 * CPU_W];
      CPU_VSTORE(v0, 0, l);
      CPU_VSTORE(v1, 1, l);
      for (uint e = 0; e < n - j0; e++) c[e] = beta != 0.0f ? l[e] + beta * c[e] : l[e];
    }
  }
}
