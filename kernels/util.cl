/* Plain buffer utilities.
 * fill: x[i] = value for i in 0..n-1 (a kernel rather than clEnqueueFillBuffer, whose
 * writes Oclgrind 21.10 does not track: its checker then reports later reads as
 * uninitialized). Global size n rounded up to the work-group size. */
__kernel void fill(__global float *x, uint x_off, uint n, float value) {
  const uint i = get_global_id(0);
  if (i < n) x[x_off + i] = value;
}

/* out = in^T for gemm.c: in is rows x cols with leading dimension ld_in, out cols x rows with
 * ld_out. A work-item moves one 8 x 8 block: eight vector loads into a private block, then
 * its columns out as rows; blocks cut by the matrix's edge go element by element. (Eight
 * float8 columns built from the rows' components ran as fast on PoCL, but Oclgrind 21.10's
 * uninitialized-value checker crashes on the shuffles they compile to.) Global
 * (ceil(cols / 8), ceil(rows / 8)). */
__kernel void transpose(__global const float *in, uint in_off, uint ld_in, __global float *out,
                        uint out_off, uint ld_out, uint rows, uint cols) {
#ifdef RELCL_ROW_ITEM
  /* The item shape (CPUs): a work-item moves a 16 x 16 block through registers on PoCL (16 row
   * loads, 64 shuffles, 16 row stores: common.cl's RELCL_TRANSPOSE16), blocks cut by the
   * edge element by element; global (ceil(cols / 16), ceil(rows / 16)). The transposed copies
   * of the forward's weights (gemm.c's B^T products on a CPU) took about 10 ms of the
   * issue-8 step in 8 x 8 blocks (perf: 1.5% of the CPU time, against gemm_cpu's 73%); with
   * these, the step's single B^T products 145.7-146.8 ms a step against 149.6-152.9
   * (relcl-bench, Zen 5, two interleaved pairs; the output layer's 1048x8000x256 31.4-31.8
   * against 33.8-34.1). */
  const uint c0 = get_global_id(0) * 16, r0 = get_global_id(1) * 16;
  if (c0 >= cols || r0 >= rows) return;
  in += in_off + r0 * ld_in + c0;
  out += out_off + c0 * ld_out + r0;
#ifdef RELCL_POCL /* elsewhere (Oclgrind's checker misreads the shuffles) by elements */
  if (c0 + 16 <= cols && r0 + 16 <= rows) {
    float16 v[16];
    _Pragma("unroll") for (int r = 0; r < 16; r++) v[r] = vload16(0, in + r * ld_in);
    RELCL_TRANSPOSE16(v);
    _Pragma("unroll") for (int c = 0; c < 16; c++) vstore16(v[c], 0, out + c * ld_out);
    return;
  }
#endif
  {
    const uint nc = min(cols - c0, 16u), nr = min(rows - r0, 16u);
    for (uint c = 0; c < nc; c++)
      for (uint r = 0; r < nr; r++) out[c * ld_out + r] = in[r * ld_in + c];
  }
#else
  const uint c0 = get_global_id(0) * 8, r0 = get_global_id(1) * 8;
  if (c0 >= cols || r0 >= rows) return;
  in += in_off + r0 * ld_in + c0;
  out += out_off + c0 * ld_out + r0;
  if (c0 + 8 <= cols && r0 + 8 <= rows) {
    float t[64];
    for (uint r = 0; r < 8; r++) vstore8(vload8(0, in + r * ld_in), r, t);
    for (uint c = 0; c < 8; c++)
      for (uint r = 0; r < 8; r++) out[c * ld_out + r] = t[r * 8 + c];
  } else {
    const uint nc = min(cols - c0, 8u), nr = min(rows - r0, 8u);
    for (uint c = 0; c < nc; c++)
      for (uint r = 0; r < nr; r++) out[c * ld_out + r] = in[r * ld_in + c];
  }
#endif
}
