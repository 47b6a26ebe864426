/* The output side of the model: label-smoothed cross-entropy fused with its gradient, and the
 * row argmax of greedy decoding. One work-group (power of two) per row of logits (rows, V);
 * reductions in common.cl's fixed-order trees. See include/relcl_layers.h for the formulas.
 */

/* flags: RELCL_WRITE_GRAD (kernels/flags.h) */

/* losses (rows, 2): (label-smoothed loss, nll). dz may be z (in place): every work-item reads
 * z[t], then a global-memory barrier (the reductions' barriers fence only local memory) before
 * any entry is overwritten; every other entry is read and written by one work-item. */
__kernel void xent_rows(__global const float *z, uint z_off, __global const int *targets,
                        uint t_off, __global float *dz, uint dz_off, __global float *losses,
                        uint l_off, int V, float eps, int ignore_id, float grad_scale, int flags,
                        __local float *red) {
  const int row = get_group_id(0), lid = get_local_id(0), wg = get_local_size(0);
  __global const float *zr = z + z_off + (size_t)row * V;
  __global float *dzr = dz + dz_off + (size_t)row * V;
  const int t = targets[t_off + row];
  if (t == ignore_id || t < 0 || t >= V) { /* uniform over the group: no barrier skipped */
    if (flags & RELCL_WRITE_GRAD)
      for (int v = lid; v < V; v += wg) dzr[v] = 0.0f;
    if (lid == 0) {
      losses[l_off + 2 * (size_t)row] = 0.0f;
      losses[l_off + 2 * (size_t)row + 1] = 0.0f;
    }
    return;
  }
  const float zt = zr[t];
  barrier(CLK_GLOBAL_MEM_FENCE);
  float mx = -FLT_MAX;
  for (int v = lid; v < V; v += wg) mx = fmax(mx, zr[v]);
  mx = relcl_wg_max(red, mx);
  float se = 0.0f, sz = 0.0f;
  for (int v = lid; v < V; v += wg) {
    se += exp(zr[v] - mx);
    sz += zr[v];
  }
  se = relcl_wg_sum(red, se);
  sz = relcl_wg_sum(red, sz);
  const float lse = mx + log(se);
  const float nll = lse - zt;
  if (lid == 0) {
    losses[l_off + 2 * (size_t)row] = (1.0f - eps) * nll + eps * (lse - sz / (float)V);
    losses[l_off + 2 * (size_t)row + 1] = nll;
  }
  if (flags & RELCL_WRITE_GRAD) {
    const float u = eps / (float)V;
    for (int v = lid; v < V; v += wg) {
      const float q = v == t ? 1.0f - eps + u : u;
      dzr[v] = grad_scale * (exp(zr[v] - lse) - q);
    }
  }
}

/* out[row] = smallest index of the largest entry; NaN never wins. */
__kernel void argmax_rows(__global const float *x, uint x_off, int ld, __global int *out,
                          uint o_off, int cols, __local float *rv, __local int *ri) {
  const int row = get_group_id(0), lid = get_local_id(0), wg = get_local_size(0);
  __global const float *xr = x + x_off + (size_t)row * ld;
  float best = -INFINITY;
  int bi = cols; /* "none yet": larger than any index */
  for (int c = lid; c < cols; c += wg) {
    const float v = xr[c];
    if (v > best || (bi == cols && v == best)) { /* ascending c: the first of equals stays */
      best = v;
      bi = c;
    }
  }
  rv[lid] = best;
  ri[lid] = bi;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = wg / 2; s > 0; s >>= 1) {
    if (lid < s) {
      const float v = rv[lid + s];
      const int i = ri[lid + s];
      if (v > rv[lid] || (v == rv[lid] && i < ri[lid])) {
        rv[lid] = v;
        ri[lid] = i;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[o_off + row] = ri[0] < cols ? ri[0] : 0;
}
