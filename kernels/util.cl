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
