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
}

/* Blocks of a batch copied, or transposed, into zero-padded blocks: gemm.c's per-head
 * products through CLBlast's indirect kernel (heads_product), which wants each operand with
 * the inner dimension first and every size a whole number of its tiles, and their results
 * copied back out. Block b of out is rows_p x cols_p with leading dimension ld_out, stride_out
 * floats after block b - 1; its element (i, j) is in's (i, j), or in's (j, i) with trans, for
 * i < rows and j < cols, and 0 elsewhere. in's blocks are stride_in apart, leading dimension
 * ld_in. A work-item writes an 8 x 8 block of out: eight vector loads (in's rows, or with
 * trans its columns' rows) into a private block, then eight vector stores, as `transpose`
 * does; a block cut by an edge goes element by element. Global (ceil(cols_p / 8),
 * ceil(rows_p / 8), batch). */
__kernel void pack_blocks(__global const float *in, uint in_off, uint ld_in, uint stride_in,
                          int trans, uint rows, uint cols, __global float *out, uint out_off,
                          uint ld_out, uint stride_out, uint rows_p, uint cols_p) {
  const uint j0 = get_global_id(0) * 8, i0 = get_global_id(1) * 8, b = get_global_id(2);
  if (j0 >= cols_p || i0 >= rows_p) return;
  in += in_off + (size_t)b * stride_in;
  out += out_off + (size_t)b * stride_out;
  if (i0 + 8 <= rows && j0 + 8 <= cols && i0 + 8 <= rows_p && j0 + 8 <= cols_p) {
    if (!trans) {
      for (uint r = 0; r < 8; r++)
        vstore8(vload8(0, in + (size_t)(i0 + r) * ld_in + j0), 0,
                out + (size_t)(i0 + r) * ld_out + j0);
    } else {
      float t[64];
      for (uint c = 0; c < 8; c++) vstore8(vload8(0, in + (size_t)(j0 + c) * ld_in + i0), c, t);
      for (uint r = 0; r < 8; r++) {
        __global float *o = out + (size_t)(i0 + r) * ld_out + j0;
        for (uint c = 0; c < 8; c++) o[c] = t[c * 8 + r];
      }
    }
    return;
  }
  const uint i1 = min(i0 + 8, rows_p), j1 = min(j0 + 8, cols_p);
  for (uint i = i0; i < i1; i++)
    for (uint j = j0; j < j1; j++)
      out[(size_t)i * ld_out + j] = i >= rows || j >= cols ? 0.0f
                                    : trans                ? in[(size_t)j * ld_in + i]
                                                           : in[(size_t)i * ld_in + j];
}
