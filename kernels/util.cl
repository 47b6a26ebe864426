/* Plain buffer utilities.
 * fill: x[i] = value for i in 0..n-1 (a kernel rather than clEnqueueFillBuffer, whose
 * writes Oclgrind 21.10 does not track: its checker then reports later reads as
 * uninitialized). Global size n rounded up to the work-group size; in the item shape (CPUs)
 * a run of RELCL_FILL_RUN elements a work-item, in vectors (the zeroing of issue 8's
 * gradients and encoder gradient, 4.1 MB and 4 MB: an element a work-item filled about 1
 * GB/s on the Zen 3). */
__kernel void fill(__global float *x, uint x_off, uint n, float value) {
#ifdef RELCL_ROW_ITEM
  const uint i0 = get_global_id(0) * RELCL_FILL_RUN, i1 = min(n, i0 + RELCL_FILL_RUN);
  x += x_off;
  uint i = i0;
  if (i1 - i0 == RELCL_FILL_RUN)
    for (; i < i1; i += RELCL_CPU_VEC) RELCL_CPU_VSTORE((RELCL_CPU_VECTOR)(value), 0, x + i);
  for (; i < i1; i++) x[i] = value;
#else
  const uint i = get_global_id(0);
  if (i < n) x[x_off + i] = value;
#endif
}

/* out = in^T for gemm.c: in is rows x cols with leading dimension ld_in, out cols x rows with
 * ld_out; with panel > 0 (a multiple of T_SIDE) out is in panels of that many of its columns,
 * panel_stride floats apart, each cols x panel with ld_out = panel (gemm_cpu's B, gemm.cl's
 * gemm_pack). A work-item moves one T_SIDE x T_SIDE block; blocks cut by the matrix's edge go
 * element by element. Global (ceil(cols / T_SIDE), ceil(rows / T_SIDE)).
 *  - Group shape (GPUs): 8 x 8, eight vector loads into a private block, then its columns out
 *    as rows. (Eight float8 columns built from the rows' components ran as fast on PoCL, but
 *    Oclgrind 21.10's uninitialized-value checker crashes on the shuffles they compile to.)
 *  - Item shape (CPUs): 16 x 16, through registers on PoCL (16 row loads, 64 shuffles, 16 row
 *    stores: common.cl's RELCL_TRANSPOSE16), element by element elsewhere (Oclgrind's checker
 *    misreads the shuffled stores). The transposed copies of the forward's weights (gemm.c's
 *    B^T products on a CPU) took about 10 ms of the issue-8 step in 8 x 8 blocks (perf: 1.5%
 *    of the CPU time, against gemm_cpu's 73%); with these, the step's single B^T products
 *    145.7-146.8 ms a step against 149.6-152.9 (relcl-bench, Zen 5, two interleaved pairs;
 *    the output layer's 1048x8000x256 31.4-31.8 against 33.8-34.1). */
#ifdef RELCL_ROW_ITEM
#define T_SIDE 16u
#else
#define T_SIDE 8u
#endif
/* With sums (not 0), also the block's column sums of in, rows in order, at sums + (r0 / T_SIDE)
 * cols + c0: the partial sums colsum_finish (layers.cl) adds up, in order, to in's column
 * sums (gemm.c's weight gradients: the bias gradient from the copy of dy, with no pass of its
 * own). Read again from the block just moved, in cache. */
inline void transpose_sums(__global const float *in, uint ld_in, __global float *sums, uint nr,
                           uint nc) {
#ifdef RELCL_ROW_ITEM
  if (nc == 16) {
    float8 s0 = (float8)(0.0f), s1 = (float8)(0.0f);
    for (uint r = 0; r < nr; r++) {
      s0 += vload8(0, in + r * ld_in);
      s1 += vload8(1, in + r * ld_in);
    }
    vstore8(s0, 0, sums);
    vstore8(s1, 1, sums);
    return;
  }
#endif
  for (uint c = 0; c < nc; c++) {
    float s = 0.0f;
    for (uint r = 0; r < nr; r++) s += in[r * ld_in + c];
    sums[c] = s;
  }
}

/* transpose's column sums alone, of the same T_SIDE x T_SIDE blocks (transpose_sums): the
 * bias gradient of a weight gradient that reads dy in place (gemm.c's C^T route), with the
 * bits of the transposed copy's sums. Global (ceil(cols / T_SIDE), ceil(rows / T_SIDE)). */
__kernel void column_sums(__global const float *in, uint in_off, uint ld_in, uint rows,
                          uint cols, __global float *sums, uint s_off) {
  const uint c0 = get_global_id(0) * T_SIDE, r0 = get_global_id(1) * T_SIDE;
  if (c0 >= cols || r0 >= rows) return;
  transpose_sums(in + in_off + r0 * ld_in + c0, ld_in, sums + s_off + r0 / T_SIDE * cols + c0,
                 min(rows - r0, T_SIDE), min(cols - c0, T_SIDE));
}

/* transpose's block at row r0, column c0 of in (both in the matrix), from in and out at the
 * matrix's origins */
inline void transpose_block(__global const float *in, uint ld_in, __global float *out,
                            uint ld_out, uint rows, uint cols, uint panel, uint panel_stride,
                            uint r0, uint c0) {
  in += r0 * ld_in + c0;
  out += c0 * ld_out + (panel ? r0 / panel * panel_stride + r0 % panel : r0);
  const uint nc = min(cols - c0, T_SIDE), nr = min(rows - r0, T_SIDE);
  const bool whole = c0 + T_SIDE <= cols && r0 + T_SIDE <= rows;
#if defined(RELCL_ROW_ITEM) && defined(RELCL_POCL)
  if (whole) {
#if RELCL_CPU_VEC < 16 /* as four 8 x 8 blocks (common.cl) */
    RELCL_TRANSPOSE16_BY8(out, ld_out, in, ld_in, 16);
#else
    float16 v[16];
    _Pragma("unroll") for (int r = 0; r < 16; r++) v[r] = vload16(0, in + r * ld_in);
    RELCL_TRANSPOSE16(v);
    _Pragma("unroll") for (int c = 0; c < 16; c++) RELCL_CPU_VSTORE(v[c], 0, out + c * ld_out);
#endif
    return;
  }
#elif !defined(RELCL_ROW_ITEM)
  if (whole) {
    float t[64];
    for (uint r = 0; r < 8; r++) vstore8(vload8(0, in + r * ld_in), r, t);
    for (uint c = 0; c < 8; c++)
      for (uint r = 0; r < 8; r++) out[c * ld_out + r] = t[r * 8 + c];
    return;
  }
#endif
  for (uint c = 0; c < nc; c++)
    for (uint r = 0; r < nr; r++) out[c * ld_out + r] = in[r * ld_in + c];
}

__kernel void transpose(__global const float *in, uint in_off, uint ld_in, __global float *out,
                        uint out_off, uint ld_out, uint rows, uint cols, uint panel,
                        uint panel_stride, __global float *sums, uint s_off, int with_sums) {
  const uint c0 = get_global_id(0) * T_SIDE, r0 = get_global_id(1) * T_SIDE;
  if (c0 >= cols || r0 >= rows) return;
  if (with_sums)
    transpose_sums(in + in_off + r0 * ld_in + c0, ld_in,
                   sums + s_off + r0 / T_SIDE * cols + c0, min(rows - r0, T_SIDE),
                   min(cols - c0, T_SIDE));
  transpose_block(in + in_off, ld_in, out + out_off, ld_out, rows, cols, panel, panel_stride, r0,
                  c0);
}

/* Many matrices of in into panels of `panel` columns of their transposes in one launch (gemm.c
 * relcl__panels_keep_all: the B^T operands of a training step's products, x W^T): entry e of
 * table holds TRANSPOSE_ENTRY uints, matrix e's offset in in, its rows and cols (rows cols
 * apart), its panels' offset in out, and the first of its T_SIDE x T_SIDE blocks in the
 * launch's count; the entries in that order. Work-item g moves block g (transpose's, the same
 * copies). Global (blocks rounded up to the work-group size). */
#define TRANSPOSE_ENTRY 5
__kernel void transpose_batch(__global const float *in, __global float *out,
                              __global const uint *table, uint count, uint blocks, uint panel) {
  const uint g = get_global_id(0);
  if (g >= blocks) return;
  uint e = 0;
  while (e + 1 < count && table[(e + 1) * TRANSPOSE_ENTRY + 4] <= g) e++;
  __global const uint *t = table + e * TRANSPOSE_ENTRY;
  const uint rows = t[1], cols = t[2], b = g - t[4], bc = (cols + T_SIDE - 1) / T_SIDE;
  transpose_block(in + t[0], cols, out + t[3], panel, rows, cols, panel, cols * panel,
                  b / bc * T_SIDE, b % bc * T_SIDE);
}
