/* Plain buffer utilities.
 * fill: x[i] = value for i in 0..n-1 (a kernel rather than clEnqueueFillBuffer, whose
 * writes Oclgrind 21.10 does not track: its checker then reports later reads as
 * uninitialized). Global size n rounded up to the work-group size. */
__kernel void fill(__global float *x, uint x_off, uint n, float value) {
  const uint i = get_global_id(0);
  if (i < n) x[x_off + i] = value;
}
