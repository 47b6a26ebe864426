/* Shared by every relcl program (prepended at build time): the counter-based RNG,
 * work-group reductions and the two shapes of the row kernels. OpenCL C 1.2, no extensions. */

/* Whether the compiler is clang and its builtins may be used (CPU_PREFETCH below, the
 * shuffles of the 16 x 16 transposes): not where RELCL_PORTABLE is defined (the suite's
 * layers_portable runs the kernels so). Defined first:
 * everything after tests it (test_device checks that PoCL's programs hold prefetches). */
#if defined(__clang__) && !defined(RELCL_PORTABLE)
#define RELCL_CLANG
#endif

/* A request that the cache line at p be fetched, for a read (w 0) or a write (w 1): clang's
 * builtin (a prefetch instruction on a CPU: gemm.cl, decode.cl) where the host asks for it (RELCL_POCL, a
 * build option on PoCL: lib/runtime/program.c), nothing elsewhere. OpenCL's own prefetch()
 * is empty in PoCL. */
#if defined(RELCL_CLANG) && defined(RELCL_POCL)
#define CPU_PREFETCH(p, w) __builtin_prefetch((p), (w), 3)
#define CPU_PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)
#else
#define CPU_PREFETCH(p, w) ((void)0)
#define CPU_PREFETCH_L2(p) ((void)0)
#endif

/* Philox4x32-10 (Salmon et al., SC'11): the same integer arithmetic on every device, so a
 * dropout mask depends only on (seed, stream, index). Written on four scalars with the high
 * words taken from 64-bit products: PoCL calls a library routine for mul_hi and does not
 * vectorize uint4 arithmetic across work-items, which made this 10 to 15 times slower on a
 * CPU; GPUs compile the 32x32->64 product to the same single instruction as mul_hi. */
inline uint4 relcl_philox4x32_10(uint4 c, uint k0, uint k1) {
  uint x0 = c.x, x1 = c.y, x2 = c.z, x3 = c.w;
  for (int round = 0; round < 10; round++) {
    const ulong p0 = (ulong)0xD2511F53u * x0, p1 = (ulong)0xCD9E8D57u * x2;
    x0 = (uint)(p1 >> 32) ^ x1 ^ k0;
    x1 = (uint)p1;
    x2 = (uint)(p0 >> 32) ^ x3 ^ k1;
    x3 = (uint)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (uint4)(x0, x1, x2, x3);
}

/* 1 when word `word` (0..3) of the Philox call with counter `q` of stream `stream` is at
 * least the threshold p * 2^32: one call decides four elements (layers.cl's dropout_apply,
 * attention.cl's rows). */
inline int relcl_keep(ulong q, uint word, uint stream_lo, uint stream_hi, uint seed_lo,
                      uint seed_hi, uint threshold) {
  const uint4 w = relcl_philox4x32_10((uint4)((uint)q, (uint)(q >> 32), stream_lo, stream_hi),
                                      seed_lo, seed_hi);
  const uint x = word == 0u ? w.x : word == 1u ? w.y : word == 2u ? w.z : w.w;
  return x >= threshold;
}

/* The counters' words of calls q0 .. q0+7: the low words, and the high words with the carry
 * (a true lane compares as all ones: minus it adds one) */
#define RELCL_PHILOX8_START(c0, c1, c2, c3, q0)                                             \
  uint8 c0 = (uint8)((uint)(q0)) + (uint8)(0, 1, 2, 3, 4, 5, 6, 7);                         \
  uint8 c1 = (uint8)((uint)((q0) >> 32)) - as_uint8(c0 < (uint8)((uint)(q0)));              \
  uint8 c2 = (uint8)(stream_lo), c3 = (uint8)(stream_hi)
/* one round on eight calls' words with the keys k0, k1, each word in the low half of a
 * 64-bit lane (the high half not read: the products take the low halves, and the words
 * leave as their low halves) */
#define RELCL_PHILOX8_ROUND(c0, c1, c2, c3)                                                 \
  {                                                                                         \
    const ulong8 p0 = (c0 & (ulong8)(0xFFFFFFFFu)) * (ulong8)(0xD2511F53u),                 \
                 p1 = (c2 & (ulong8)(0xFFFFFFFFu)) * (ulong8)(0xCD9E8D57u);                 \
    c0 = (p1 >> 32) ^ c1 ^ (ulong8)(k0);                                                    \
    c1 = p1;                                                                                \
    c2 = (p0 >> 32) ^ c3 ^ (ulong8)(k1);                                                    \
    c3 = p0;                                                                                \
  }

/* The words of the eight consecutive calls q0 .. q0+7 at once, relcl_philox4x32_10's bit for
 * bit (the same integer arithmetic, one call a lane): word[w] lane l is word w of call
 * q0 + l. The products go through ulong8 lanes, which LLVM turns into the CPU's 32 x 32 -> 64
 * vector multiply: dropout_apply took half the time it took with mul_hi on uint8 lanes, and
 * two thirds of the time with ulong4 halves (PoCL 3.1, Zen 5). */
inline void relcl_philox8(uint8 word[4], ulong q0, uint stream_lo, uint stream_hi,
                          uint seed_lo, uint seed_hi) {
  RELCL_PHILOX8_START(u0, u1, u2, u3, q0);
  ulong8 c0 = convert_ulong8(u0), c1 = convert_ulong8(u1), c2 = convert_ulong8(u2),
         c3 = convert_ulong8(u3);
  uint k0 = seed_lo, k1 = seed_hi;
  for (int round = 0; round < 10; round++) {
    RELCL_PHILOX8_ROUND(c0, c1, c2, c3)
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  word[0] = convert_uint8(c0), word[1] = convert_uint8(c1), word[2] = convert_uint8(c2),
  word[3] = convert_uint8(c3);
}

/* relcl_philox8 for RELCL_DROP_RUNS runs of eight calls, q0 + 8g .. q0 + 8g + 7 into w[g],
 * all in one loop: each round's multiplies wait on the round before, and independent runs
 * keep the multiplier busy meanwhile (dropout_apply, PoCL on Zen 5: one run a work-item 21.6
 * ms a step, two 16.1, four 14.3-15.3) */
inline void relcl_philox8_runs(uint8 w[RELCL_DROP_RUNS][4], ulong q0, uint stream_lo,
                               uint stream_hi, uint seed_lo, uint seed_hi) {
  ulong8 c[RELCL_DROP_RUNS][4];
  _Pragma("unroll") for (int g = 0; g < RELCL_DROP_RUNS; g++) {
    RELCL_PHILOX8_START(u0, u1, u2, u3, q0 + 8 * g);
    c[g][0] = convert_ulong8(u0), c[g][1] = convert_ulong8(u1), c[g][2] = convert_ulong8(u2),
    c[g][3] = convert_ulong8(u3);
  }
  uint k0 = seed_lo, k1 = seed_hi;
  for (int round = 0; round < 10; round++) {
    _Pragma("unroll") for (int g = 0; g < RELCL_DROP_RUNS; g++)
      RELCL_PHILOX8_ROUND(c[g][0], c[g][1], c[g][2], c[g][3])
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _Pragma("unroll") for (int g = 0; g < RELCL_DROP_RUNS; g++)
    _Pragma("unroll") for (int i = 0; i < 4; i++) w[g][i] = convert_uint8(c[g][i]);
}

/* Bits sh .. sh + 7 of word (sh at most 24) as masks, -1 where set and 0 where not */
inline int8 relcl_bits8(uint word, uint sh) {
  return -as_int8(((uint8)(word) >> ((uint8)(sh) + (uint8)(0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u))) &
                  (uint8)(1u));
}

/* The 32 decisions of eight consecutive calls, from their words w (relcl_philox8), in element
 * order: element 4c + w is word w of call c, and mk[b] lane l is element 8b + l's, -1 where
 * kept and 0 where dropped. Returns them as a word of keep bits, bit e element e's (layers.cl's
 * keep bits): the masks are taken from it, a call's four bits a lane shifted into place, the
 * lanes' bits put together by halves, where shuffles interleaved four vectors of masks
 * (through private memory: a quarter of dropout_apply's samples). Lanes are never taken one
 * by one: Oclgrind's uninitialized-value checker crashes on that. */
inline uint relcl_masks_of(int8 mk[4], const uint8 w[4], uint threshold) {
  const uint8 t = (uint8)(threshold);
  const uint8 nib = (select((uint8)(0u), (uint8)(1u), w[0] >= t) |
                     select((uint8)(0u), (uint8)(2u), w[1] >= t)) |
                    (select((uint8)(0u), (uint8)(4u), w[2] >= t) |
                     select((uint8)(0u), (uint8)(8u), w[3] >= t));
  const uint8 at = nib << (uint8)(0u, 4u, 8u, 12u, 16u, 20u, 24u, 28u);
  const uint4 h4 = at.lo | at.hi;
  const uint2 h2 = h4.lo | h4.hi;
  uint h[2];
  vstore2(h2, 0, h);
  const uint word = h[0] | h[1];
  for (int b = 0; b < 4; b++) mk[b] = relcl_bits8(word, 8u * (uint)b);
  return word;
}

/* The 32 decisions of the eight consecutive calls q0 .. q0+7 in element order, relcl_keep's
 * bit for bit (relcl_masks_of). For the item shape, where a work-item takes 32 adjacent
 * elements at a time (attention.cl's rows) and applies the masks to float8s with select. */
inline uint relcl_keep_masks32(int8 mk[4], ulong q0, uint stream_lo, uint stream_hi,
                               uint seed_lo, uint seed_hi, uint threshold) {
  uint8 w[4];
  relcl_philox8(w, q0, stream_lo, stream_hi, seed_lo, seed_hi);
  return relcl_masks_of(mk, w, threshold);
}

/* The same for the 32 RELCL_DROP_RUNS elements of calls q0 .. q0 + 8 RELCL_DROP_RUNS - 1
 * (layers.cl's dropout_apply): mk[4g + b] is relcl_keep_masks32's mk[b] for q0 + 8g, and
 * word[g] its word of keep bits. */
inline void relcl_keep_masks_runs(int8 mk[4 * RELCL_DROP_RUNS], uint word[RELCL_DROP_RUNS],
                                  ulong q0, uint stream_lo, uint stream_hi, uint seed_lo,
                                  uint seed_hi, uint threshold) {
  uint8 w[RELCL_DROP_RUNS][4];
  relcl_philox8_runs(w, q0, stream_lo, stream_hi, seed_lo, seed_hi);
  for (int g = 0; g < RELCL_DROP_RUNS; g++) word[g] = relcl_masks_of(mk + 4 * g, w[g], threshold);
}

/* Tree reductions over a power-of-two work-group, in a fixed order: the result does not
 * depend on scheduling. Every work-item must call them. */
inline float relcl_wg_sum(__local float *red, float v) {
  const int lid = get_local_id(0), n = get_local_size(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = n / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

inline float relcl_wg_max(__local float *red, float v) {
  const int lid = get_local_id(0), n = get_local_size(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = n / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

/* An element-wise loop in the two shapes of the row kernels below: an element a work-item in
 * the group shape, a run of RELCL_ELEM_RUN adjacent elements a work-item in the item shape
 * (CPUs). The host launches as many work-items (lib/ops/layers.c launch_elements). For
 * kernels with per-work-item set-up (optim.cl's adam_update: the clipping factor) the run is
 * faster on PoCL (Adam over the issue-8 model's parameters: 8 ms against 25); the simple
 * ones (layers.cl's relu_bwd, add2, axpby) keep an element a work-item, which PoCL
 * vectorizes across work-items, where a loop must allow for its buffers aliasing (relu_bwd
 * runs in place): relu_bwd took 96 ms a step as runs against 36. */
#ifdef RELCL_ROW_ITEM
#define RELCL_FOR_ELEMENTS(i, n)                                                   \
  for (uint i = (uint)get_global_id(0) * RELCL_ELEM_RUN,                                    \
            i##_end = min((uint)(n), i + RELCL_ELEM_RUN);                                   \
       i < i##_end; i++)
#else
#define RELCL_FOR_ELEMENTS(i, n) for (uint i = (uint)get_global_id(0); i < (uint)(n); i = (uint)(n))
#endif

#define RELCL_PASTE_(a, b) a##b
#define RELCL_PASTE(a, b) RELCL_PASTE_(a, b)
/* floatW, vloadW, vstoreW for the device's own vector width W (RELCL_CPU_VEC, a build option:
 * 16 with AVX-512, 8 with AVX2; gemm.cl's products, and the item shape's long sums) */
#define RELCL_CPU_VECTOR RELCL_PASTE(float, RELCL_CPU_VEC)
#define RELCL_CPU_VLOAD RELCL_PASTE(vload, RELCL_CPU_VEC)
#if defined(RELCL_CLANG) && defined(RELCL_POCL)
/* vstoreW as one store instruction: PoCL builds vstore16 from pieces, three stores (4, 4 and
 * 8 floats) where one would do. Issue 8's shape, model-207 Xeon, perf samples against the
 * build before: the attention kernels (short sums, many stores) 0.92-0.97, gemm_cpu within
 * the noise (0.98-1.01). A vector type of float alignment stores at any float's address, as
 * vstoreW may. */
typedef float relcl_cpu_vector_u __attribute__((ext_vector_type(RELCL_CPU_VEC), aligned(4)));
#define RELCL_CPU_VSTORE_AS(AS)                                                             \
  __attribute__((overloadable)) inline void relcl_cpu_vstore(RELCL_CPU_VECTOR v, size_t i,  \
                                                             AS float *p) {                 \
    *(AS relcl_cpu_vector_u *)(p + i * RELCL_CPU_VEC) = v;                                  \
  }
RELCL_CPU_VSTORE_AS(__global)
RELCL_CPU_VSTORE_AS(__local)
RELCL_CPU_VSTORE_AS(__private)
#define RELCL_CPU_VSTORE relcl_cpu_vstore
#else
#define RELCL_CPU_VSTORE RELCL_PASTE(vstore, RELCL_CPU_VEC)
#endif
/* v's lanes added in order, or (max) their largest */
inline float relcl_cpu_lanes(RELCL_CPU_VECTOR v, int max) {
  float l[RELCL_CPU_VEC];
  RELCL_CPU_VSTORE(v, 0, l);
  float s = l[0];
  for (int i = 1; i < RELCL_CPU_VEC; i++) s = max ? fmax(s, l[i]) : s + l[i];
  return s;
}

/* The row kernels (attention.cl, layers.cl's layer norm, loss.cl) come in two shapes, chosen
 * per context (lib/runtime/context.c) by building with or without -DRELCL_ROW_ITEM:
 *  - group (GPUs): one power-of-two work-group per row, its work-items striding over the
 *    row's columns, sums in the trees above;
 *  - item (CPUs): one work-item per row, a loop over the columns in order, no barrier and
 *    no local memory; where the work is arithmetic (layer norm, cross-entropy) the loop takes
 *    vectors of RELCL_COL_VEC columns and the sums run in as many lanes (relcl_lanes_sum).
 *    PoCL runs a work-group as loops cut at each barrier, so the trees cost more there than
 *    the row's arithmetic.
 * A kernel reads its row and its lane (lid of wg lanes over the row) from these, returns
 * when RELCL_ROW_PAST (item: the global size is rounded up to whole groups), and reduces with
 * relcl_row_sum / _max, which are the trees or nothing (one lane holds the whole sum). The
 * order of a sum is fixed in both shapes, but differs between them. */
#ifdef RELCL_ROW_ITEM
#define RELCL_ROW_ID() ((int)get_global_id(0))
#define RELCL_ROW_LANE() 0
#define RELCL_ROW_LANES() 1
#define RELCL_ROW_PAST(row, rows) ((row) >= (rows))
#define RELCL_ROW_BARRIER_GLOBAL() ((void)0)
inline float relcl_row_sum(__local float *red, float v) { return v; }
inline float relcl_row_max(__local float *red, float v) { return v; }
/* floatN, vloadN, vstoreN for N = RELCL_COL_VEC (flags.h) */
#define RELCL_COL_VECTOR RELCL_PASTE(float, RELCL_COL_VEC)
#define RELCL_COL_VLOAD RELCL_PASTE(vload, RELCL_COL_VEC)
#define RELCL_COL_VSTORE RELCL_PASTE(vstore, RELCL_COL_VEC)
/* the lanes of v, halves added to halves (((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))):
 * three steps where adding them in order took seven, each waiting on the one before (perf: a
 * tenth of attention's forward rows). Through memory: Oclgrind's uninitialized-value checker
 * crashes on a vector's halves and lanes taken in registers (v.lo + v.hi, s2.x + s2.y). */
inline float relcl_lanes_sum8(float8 v) {
  float l[8];
  vstore8(v, 0, l);
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* Sums over a row in the item shape go in RELCL_COL_VEC lanes (lane l takes the columns
 * c = l mod RELCL_COL_VEC of the whole vectors), then these add the lanes (halves to halves
 * for 8), then the kernel adds the tail past the last whole vector in order. */
inline float relcl_lanes_sum(RELCL_COL_VECTOR v) {
#if RELCL_COL_VEC == 8
  return relcl_lanes_sum8(v);
#else
  float l[RELCL_COL_VEC];
  RELCL_COL_VSTORE(v, 0, l);
  float s = l[0];
  for (int i = 1; i < RELCL_COL_VEC; i++) s += l[i];
  return s;
#endif
}
inline float relcl_lanes_max(RELCL_COL_VECTOR v) {
#if RELCL_COL_VEC == 8
  /* halves against halves: three steps where a chain through memory took seven */
  const float4 m4 = fmax(v.lo, v.hi);
  const float2 m2 = fmax(m4.lo, m4.hi);
  return fmax(m2.x, m2.y);
#else
  float l[RELCL_COL_VEC];
  RELCL_COL_VSTORE(v, 0, l);
  float m = l[0];
  for (int i = 1; i < RELCL_COL_VEC; i++) m = fmax(m, l[i]);
  return m;
#endif
}
#else
#define RELCL_ROW_ID() ((int)get_group_id(0))
#define RELCL_ROW_LANE() ((int)get_local_id(0))
#define RELCL_ROW_LANES() ((int)get_local_size(0))
/* the host launches exactly `rows` groups; and with a `return` before the barriers, even one
 * that whole groups take, PoCL 3.1 computed ln_bwd wrong (test_layers, d = 5) */
#define RELCL_ROW_PAST(row, rows) 0
#define RELCL_ROW_BARRIER_GLOBAL() barrier(CLK_GLOBAL_MEM_FENCE)
inline float relcl_row_sum(__local float *red, float v) { return relcl_wg_sum(red, v); }
inline float relcl_row_max(__local float *red, float v) { return relcl_wg_max(red, v); }
#endif

/* ---- 16 x 16 transposes in registers (gemm.cl's gemm_cpu_bt, util.cl's transpose) ---- */

/* Shuffles of two floatN (N 8 or 16) by constant indices (0 to N-1 the first, N to 2N-1 the
 * second): clang's builtin where the compiler is clang, OpenCL's shuffle2 elsewhere. Both
 * become one vector permute each on PoCL; with shuffle2 Q K^T ran 5% slower (relcl-bench,
 * two interleaved pairs, Zen 5). */
#ifdef RELCL_CLANG
#define RELCL_SHUFFLE(N, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define RELCL_SHUFFLE(N, a, b, ...) shuffle2(a, b, (uint##N)(__VA_ARGS__))
#endif

/* One step of an N x N transpose in v[N] (floatN rows): in every pair of rows (r, r + S), r's
 * bit S clear, the entries in columns with bit S set in row r swap with those with it clear
 * in row r + S. After the steps for S = N/2, ..., 2, 1, (r, c) has gone to (c, r). Fully
 * unrolled it must be: written as a loop over all 16 rows with a test of bit S, the 16 x 16
 * transpose gained nothing over staging element by element. */
#define T_STEP(N, S, LO, HI)                                                                \
  _Pragma("unroll") for (int q = 0; q < N / 2; q++) {                                       \
    const int r = q / S * 2 * S + q % S;                                                    \
    const float##N x = v[r], y = v[r + S];                                                  \
    v[r] = RELCL_SHUFFLE(N, x, y, LO);                                                      \
    v[r + S] = RELCL_SHUFFLE(N, x, y, HI);                                                  \
  }
#define T16_LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define T16_HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define T16_LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define T16_HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define T16_LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define T16_HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define T16_LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define T16_HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31

/* The same steps on an 8 x 8 block in v[8] (float8 rows: S = 4, 2, 1), for devices with 8
 * floats a vector or fewer, where the 16 x 16 block's sixteen float16 (32 AVX2 registers)
 * spill: util.cl's transpose and gemm.cl's heads_transpose16 move a 16 x 16 block as four of
 * these there. */
#define T8_LO4 0, 1, 2, 3, 8, 9, 10, 11
#define T8_HI4 4, 5, 6, 7, 12, 13, 14, 15
#define T8_LO2 0, 1, 8, 9, 4, 5, 12, 13
#define T8_HI2 2, 3, 10, 11, 6, 7, 14, 15
#define T8_LO1 0, 8, 2, 10, 4, 12, 6, 14
#define T8_HI1 1, 9, 3, 11, 5, 13, 7, 15
#define RELCL_TRANSPOSE8(v)                                                                 \
  do {                                                                                      \
    T_STEP(8, 4, T8_LO4, T8_HI4)                                                            \
    T_STEP(8, 2, T8_LO2, T8_HI2)                                                            \
    T_STEP(8, 1, T8_LO1, T8_HI1)                                                            \
  } while (0)
/* The 16 x 16 block at src (rows ld apart) transposed to dst (rows dst_ld apart), as four
 * 8 x 8 blocks, src's rows from ROWS on (16: none) read as zeros (dst may be local or global
 * memory: a macro, not a function) */
#define RELCL_TRANSPOSE16_BY8(dst, dst_ld, src, ld, ROWS)                                   \
  _Pragma("unroll") for (int quad = 0; quad < 4; quad++) {                                  \
    const int qr = quad / 2 * 8, qc = quad % 2 * 8;                                         \
    float8 v[8];                                                                            \
    _Pragma("unroll") for (int r = 0; r < 8; r++) v[r] =                                    \
        qr + r < (int)(ROWS) ? vload8(0, (src) + (qr + r) * (ld) + qc) : (float8)(0.0f);    \
    RELCL_TRANSPOSE8(v);                                                                    \
    _Pragma("unroll") for (int c = 0; c < 8; c++)                                           \
      vstore8(v[c], 0, (dst) + (qc + c) * (dst_ld) + qr);                                   \
  }

/* v[16], rows of a 16 x 16 block, becomes its transpose (the four steps above) */
#define RELCL_TRANSPOSE16(v)                                                                \
  do {                                                                                      \
    T_STEP(16, 8, T16_LO8, T16_HI8)                                                         \
    T_STEP(16, 4, T16_LO4, T16_HI4)                                                         \
    T_STEP(16, 2, T16_LO2, T16_HI2)                                                         \
    T_STEP(16, 1, T16_LO1, T16_HI1)                                                         \
  } while (0)

/* ---- attention's rows in the item shape (attention.cl's row kernels, gemm.cl's attn_*_cpu) ---- */

inline int relcl_label(int j, int pq, int k) { return clamp(j - pq, -k, k) + k; }

inline int relcl_row_len(__global const int *key_len, uint kl_off, int b, int nk, int flags) {
  return (flags & RELCL_KEY_LEN) ? clamp(key_len[kl_off + b], 0, nk) : nk;
}

/* Dropout decisions of row `row`'s keys. Key j's is word j mod 4 of the Philox call with
 * counter row * ceil(nk / 4) + floor(j / 4) (include/relcl.h): a row starts a call, so a
 * call decides four keys of one row. The group shape takes one key a lane (relcl_row_keep);
 * the item shape walks the row in order, eight keys at a time (relcl_row_mask8), and takes
 * 32 keys (eight calls) at a time from relcl_keep_masks32 (vector integer arithmetic). */
#ifdef RELCL_ROW_ITEM
typedef struct relcl_masks {
  int8 mk[4]; /* keys j0 .. j0+31, j0 the last multiple of 32 asked for */
} relcl_masks;

/* Keys j .. j+7's, -1 where kept (all of them without RELCL_DROPOUT in flags): j a multiple
 * of 8, called for every such j in order (each multiple of 32 computes the next 32) */
inline int8 relcl_row_mask8(relcl_masks *km, int flags, int row, int nk, int j, uint stream_lo,
                            uint stream_hi, uint seed_lo, uint seed_hi, uint threshold) {
  if (!(flags & RELCL_DROPOUT)) return (int8)(-1);
  if ((j & 31) == 0)
    relcl_keep_masks32(km->mk, (ulong)row * (ulong)((nk + 3) / 4) + (ulong)(j / 4), stream_lo,
                       stream_hi, seed_lo, seed_hi, threshold);
  return km->mk[(j >> 3) & 3];
}

/* The item shape's label sums of a whole row, from its values v[0..nk-1] once they are
 * stored: the interior labels are the keys pq-k+1 .. pq+k-1 in order, so their columns are
 * one copy of v (zeros where a label's key lies outside 0..nk-1); the edge labels sum their
 * keys in key order. */
inline void relcl_bucket_row(__global float *bk, __global const float *v, int pq, int nk,
                             int k, int rlo, int R) {
  float left = 0.0f, right = 0.0f;
  if (rlo == 0) { /* label 0: the keys at or left of pq - k (all of them when k = 0) */
    const int end = k == 0 ? nk : clamp(pq - k + 1, 0, nk);
    for (int j = 0; j < end; j++) left += v[j];
  }
  if (k > 0 && rlo + R > 2 * k) /* label 2k: the keys at or right of pq + k */
    for (int j = clamp(pq + k, 0, nk); j < nk; j++) right += v[j];
  /* columns lo .. hi copy the keys pq + rlo + c - k; the others are 0 or an edge sum */
  const int off = pq + rlo - k;
  const int lo = min(max(max(1, rlo), -off + rlo) - rlo, R);
  const int hi = max(min(min(2 * k - 1, rlo + R - 1) - rlo, nk - 1 - off), lo - 1);
  for (int c = 0; c < lo; c++) bk[c] = c + rlo == 0 ? left : 0.0f;
  int c = lo;
  for (; c + 8 <= hi + 1; c += 8) vstore8(vload8(0, v + off + c), 0, bk + c);
  for (; c <= hi; c++) bk[c] = v[off + c];
  for (c = hi + 1; c < R; c++) bk[c] = c + rlo == 2 * k ? right : 0.0f;
}

/* The label terms of keys j .. j+7 of a row at query position pq, each p[relcl_label(j + l, pq,
 * k) - rlo], from p's R labels one float apart, every key's label among them (unmasked keys),
 * where p's 8 floats before and 8 after are readable (gemm.cl's attn_fwd_cpu and attn_bwd_cpu:
 * a row between two of the head's rows, R >= 8): the keys between the clipped edges in one
 * load, those on an edge from its label's float, by selects, where a key on an edge had taken
 * a load of its own (most of a row's keys at relcl-bench's default shape, 32 keys and k 8).
 * The values are the loads': the same bits. */
inline float8 relcl_labels8(__global const float *p, int j, int pq, int k, int rlo, int R) {
  const int8 dl = (int8)(j - pq) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);
  const float8 mid = vload8(0, p + clamp(j - pq + k - rlo, -8, R));
  /* a key left of the edge has label 0, so rlo is 0; right of it 2k, the last label */
  return select(select(mid, (float8)(p[0]), dl <= (int8)(-k)), (float8)(p[R - 1]),
                dl >= (int8)(k));
}

/* attn_fwd_rows' row in the item shape (and gemm.cl's attn_fwd_cpu's): s holds q.k of the row's
 * nk keys on entry, p its relative logits (label c at c p_label; with p_near, one float apart
 * and read as relcl_labels8 says); adds them, scales, masks, softmaxes; writes alpha to a, alpha' =
 * dropout(alpha) over s, and the label sums of alpha' to bk. */
inline void relcl_fwd_row_item(__global float *s, __global const float *p, uint p_label,
                               bool p_near, __global float *a, __global float *bk, int row,
                               int pq, int len, int nk, int k, int rlo, int R, int flags,
                               float scale, uint drop_threshold, float drop_scale,
                               uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
  /* The item shape (CPUs): the unmasked keys are the prefix j < lim, and exp runs on whole
   * vectors of it, then on its tail (loss.cl's pattern); the sum goes in lanes
   * (relcl_lanes_sum). Scalar exp was half of this kernel's time on PoCL. */
  const int lim = min(len, (flags & RELCL_CAUSAL) ? max(pq + 1, 0) : nk);
  const int vend = lim - lim % RELCL_COL_VEC;
  /* the logits and their maximum, a vector of keys at a time (the maximum in lanes: one
   * chain of scalar fmax was most of this function's time on PoCL), their relative logits
   * read as a vector where the vector's labels are consecutive (no key clipped, labels one
   * float apart). The maximum is exact in any order: the same bits. Sapphire Rapids-class
   * Xeon, attention alone at issue 8's shape (attn_bt_few's note), interleaved: forward 0.89
   * and 0.93 of the time with the scalar loop, causal 0.99 and 0.97. */
  RELCL_COL_VECTOR mxv = -FLT_MAX;
  for (int j = 0; j < vend; j += RELCL_COL_VEC) {
    RELCL_COL_VECTOR e = RELCL_COL_VLOAD(0, s + j);
    if (flags & RELCL_GATHER) {
#if RELCL_COL_VEC == 8
      if (p_near) {
        e += relcl_labels8(p, j, pq, k, rlo, R);
      } else
#endif
      if (p_label == 1 && j - pq >= -k && j + RELCL_COL_VEC - 1 - pq <= k) {
        e += RELCL_COL_VLOAD(0, p + (j - pq + k - rlo));
      } else {
        float g[RELCL_COL_VEC];
        for (int l = 0; l < RELCL_COL_VEC; l++)
          g[l] = p[(size_t)(relcl_label(j + l, pq, k) - rlo) * p_label];
        e += RELCL_COL_VLOAD(0, g);
      }
    }
    e *= scale;
    RELCL_COL_VSTORE(e, 0, s + j);
    mxv = fmax(mxv, e);
  }
  float mx = relcl_lanes_max(mxv);
  for (int j = vend; j < lim; j++) {
    float e = s[j];
    if (flags & RELCL_GATHER) e += p[(size_t)(relcl_label(j, pq, k) - rlo) * p_label];
    e *= scale;
    s[j] = e;
    mx = fmax(mx, e);
  }
  RELCL_COL_VECTOR sum8 = 0.0f;
  for (int j = 0; j < vend; j += RELCL_COL_VEC) {
    const RELCL_COL_VECTOR e = exp(RELCL_COL_VLOAD(0, s + j) - mx);
    RELCL_COL_VSTORE(e, 0, s + j);
    sum8 += e;
  }
  if (vend < lim) { /* the tail as one more vector, its lanes past lim exp(-inf) = 0, where
                     * it took a scalar exp a key: relcl-train on the bundled data's short
                     * sentences, this function 0.81-0.90 of its samples (model-207 Xeon) */
    float t[RELCL_COL_VEC];
    for (int l = 0; l < RELCL_COL_VEC; l++) t[l] = vend + l < lim ? s[vend + l] - mx : -INFINITY;
    const RELCL_COL_VECTOR e = exp(RELCL_COL_VLOAD(0, t));
    RELCL_COL_VSTORE(e, 0, t);
    for (int j = vend; j < lim; j++) s[j] = t[j - vend];
    sum8 += e;
  }
  const float sum = relcl_lanes_sum(sum8);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* every key masked: weights all 0 */

  /* eight keys at a time; keys at or past lim (masked) get alpha 0 */
  relcl_masks km;
  for (int j = 0; j < nk; j += 8) {
    const int8 keep = relcl_row_mask8(&km, flags, row, nk, j, stream_lo, stream_hi, seed_lo,
                                      seed_hi, drop_threshold);
    if (j + 8 <= lim) {
      const float8 alpha = vload8(0, s + j) * inv;
      vstore8(alpha, 0, a + j);
      float8 ad = alpha;
      if (flags & RELCL_DROPOUT) ad = select((float8)(0.0f), alpha * drop_scale, keep);
      vstore8(ad, 0, s + j);
      continue;
    }
    int kp[8];
    vstore8(keep, 0, kp);
    for (int l = 0; l < 8 && j + l < nk; l++) {
      const float alpha = j + l < lim ? s[j + l] * inv : 0.0f;
      a[j + l] = alpha;
      const float ad = (flags & RELCL_DROPOUT) ? (kp[l] ? alpha * drop_scale : 0.0f) : alpha;
      s[j + l] = ad;
    }
  }
  if (flags & RELCL_BUCKET) relcl_bucket_row(bk, s, pq, nk, k, rlo, R);
}

/* attn_drop_rows' row in the item shape (and gemm.cl's attn_bwd_cpu's): alpha' = dropout(alpha)
 * of the row's alpha a into ad_out (with RELCL_WRITE_A), its label sums into bk (with
 * RELCL_BUCKET) */
inline void relcl_drop_row_item(__global const float *a, __global float *ad_out,
                                __global float *bk, int row, int pq, int nk, int k, int rlo,
                                int R, int flags, uint drop_threshold, float drop_scale,
                                uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
  /* eight keys at a time (masked keys' alpha is 0 already) */
  relcl_masks km;
  for (int j = 0; j < nk; j += 8) {
    const int8 keep = relcl_row_mask8(&km, flags, row, nk, j, stream_lo, stream_hi, seed_lo,
                                      seed_hi, drop_threshold);
    if (j + 8 <= nk) {
      float8 ad = vload8(0, a + j);
      if (flags & RELCL_DROPOUT) ad = select((float8)(0.0f), ad * drop_scale, keep);
      if (flags & RELCL_WRITE_A) vstore8(ad, 0, ad_out + j);
      continue;
    }
    int kp[8];
    vstore8(keep, 0, kp);
    for (int l = 0; l < 8 && j + l < nk; l++) {
      float ad = a[j + l];
      if (flags & RELCL_DROPOUT) ad = kp[l] ? ad * drop_scale : 0.0f;
      if (flags & RELCL_WRITE_A) ad_out[j + l] = ad;
    }
  }
  if (flags & RELCL_BUCKET)
    relcl_bucket_row(bk, (flags & RELCL_WRITE_A) ? ad_out : a, pq, nk, k, rlo, R);
}

/* attn_bwd_rows' row in the item shape (and gemm.cl's attn_bwd_cpu's): dd holds dalpha' =
 * dz . v of the row's keys on entry, g its label terms dz . wV (label c at c g_label; with
 * g_near, one float apart and read as relcl_labels8 says), a its
 * alpha; leaves the logits' gradient de in dd and its label sums in cb (with RELCL_BUCKET).
 *
 * With dropout, ad (not 0) is the row's alpha' where the caller has it (attn_bwd_cpu, after
 * relcl_drop_row_item), and a key counts as kept where alpha' is not 0, instead of Philox's
 * rounds a second time. The bits are the same: alpha' = alpha * drop_scale (above 1) is 0
 * where it was kept only if alpha is 0, and such a key's dalpha' meets nothing but products
 * with alpha (its share of the dot, its de). Attention fwd+bwd alone, two contexts with
 * either form alternated (model-207 Xeon, median of 30): relcl-bench's default shape
 * (16 x 4 heads, 32 positions, d 32, k 8, dropout 0.1) 1.09-1.11 times as fast, causal
 * 1.09-1.10; issue 8's (125 x 4, d 64, k 16) 1.045. test_attention's dropout cases check
 * the kernels apart (Philox) give the same bits. */
inline void relcl_bwd_row_item(__global float *dd, __global const float *g, uint g_label,
                               bool g_near, __global const float *a, __global const float *ad,
                               __global float *cb, int row, int pq, int len, int nk, int k,
                               int rlo, int R, int flags, float scale, uint drop_threshold,
                               float drop_scale, uint seed_lo, uint seed_hi, uint stream_lo,
                               uint stream_hi) {
  /* The item shape: eight keys at a time, the unmasked ones the prefix j < lim; the dot
   * product in lanes (relcl_lanes_sum), then the keys of the partial vectors in order. */
  const int lim = min(len, (flags & RELCL_CAUSAL) ? max(pq + 1, 0) : nk);
  float8 dot8 = 0.0f;
  float tail = 0.0f;
  relcl_masks km;
  for (int j = 0; j < nk; j += 8) {
    int8 keep;
    if (ad && j + 8 <= nk) {
      keep = vload8(0, ad + j) != (float8)(0.0f);
    } else if (ad) {
      float t[8];
      for (int l = 0; l < 8; l++) t[l] = j + l < nk ? ad[j + l] : 0.0f;
      keep = vload8(0, t) != (float8)(0.0f);
    } else {
      keep = relcl_row_mask8(&km, flags, row, nk, j, stream_lo, stream_hi, seed_lo, seed_hi,
                             drop_threshold);
    }
    if (j + 8 <= lim) {
      float8 da = vload8(0, dd + j);
      if (flags & RELCL_GATHER) { /* a vector where the labels are consecutive (the forward's
                                   * relcl_fwd_row_item) */
        if (g_near) {
          da += relcl_labels8(g, j, pq, k, rlo, R);
        } else if (g_label == 1 && j - pq >= -k && j + 7 - pq <= k) {
          da += vload8(0, g + (j - pq + k - rlo));
        } else {
          float t[8];
          for (int l = 0; l < 8; l++)
            t[l] = g[(size_t)(relcl_label(j + l, pq, k) - rlo) * g_label];
          da += vload8(0, t);
        }
      }
      if (flags & RELCL_DROPOUT) da = select((float8)(0.0f), da * drop_scale, keep);
      vstore8(da, 0, dd + j);
      dot8 += vload8(0, a + j) * da;
      continue;
    }
    int kp[8];
    vstore8(keep, 0, kp);
    for (int l = 0; l < 8 && j + l < nk; l++) {
      float da = 0.0f;
      if (j + l < lim) {
        da = dd[j + l];
        if (flags & RELCL_GATHER) da += g[(size_t)(relcl_label(j + l, pq, k) - rlo) * g_label];
        if (flags & RELCL_DROPOUT) da = kp[l] ? da * drop_scale : 0.0f;
      }
      dd[j + l] = da;
      tail += a[j + l] * da;
    }
  }
  const float dot = relcl_lanes_sum8(dot8) + tail;

  const int vend = nk - nk % 8;
  for (int j = 0; j < vend; j += 8)
    vstore8(vload8(0, a + j) * (vload8(0, dd + j) - dot) * scale, 0, dd + j);
  for (int j = vend; j < nk; j++) dd[j] = a[j] * (dd[j] - dot) * scale;
  if (flags & RELCL_BUCKET) relcl_bucket_row(cb, dd, pq, nk, k, rlo, R);
}
#endif
