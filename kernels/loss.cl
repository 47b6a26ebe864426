/* The output side of the model: label-smoothed cross-entropy fused with its gradient, and the
 * row argmax of greedy decoding. One work-group (power of two) or one work-item per row of
 * logits (rows, V): common.cl's row shapes. See include/relcl_layers.h for the formulas.
 */

/* flags: RELCL_WRITE_GRAD (kernels/flags.h) */

/* The item shape's vectors here are the device's own width (common.cl's RELCL_CPU_VECTOR: 16
 * floats with AVX-512, 8 with AVX2), not RELCL_COL_VEC (8): a row of logits is long (8000
 * entries in the issue-8 model). relcl-bench's issue-8 step (Zen 5, two interleaved pairs):
 * 7.6-7.7 ms a step against 10.2-10.4 with 8; attention's rows, 32 keys long, ran slower with
 * 16 and keep 8. */

/* losses (rows, 2): (label-smoothed loss, nll). dz may be z (in place): every lane reads
 * z[t], then (group shape) a global-memory barrier (the reductions' barriers fence only local
 * memory) before any entry is overwritten; every other entry is read and written by one lane. */
__kernel void xent_rows(__global const float *z, uint z_off, __global const int *targets,
                        uint t_off, __global float *dz, uint dz_off, __global float *losses,
                        uint l_off, int rows, int V, float eps, int ignore_id,
                        float grad_scale, int flags, __local float *red) {
  const int row = RELCL_ROW_ID(), lid = RELCL_ROW_LANE(), wg = RELCL_ROW_LANES();
  if (RELCL_ROW_PAST(row, rows)) return;
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
  RELCL_ROW_BARRIER_GLOBAL();
#ifdef RELCL_ROW_ITEM
  /* the item shape: whole vectors of the row, then its tail (common.cl), so that exp runs
   * on vectors. With the gradient, exp(z - max) goes into dz as it is summed, and the last
   * pass scales it (exp(z - lse) = exp(z - max) / se): one exp an entry instead of two, the
   * row (32 KB at 8000 entries) still in cache. dz may be z: each entry is read before it is
   * written, by this work-item alone. */
  const int vend = V - V % RELCL_CPU_VEC, grad = flags & RELCL_WRITE_GRAD;
  RELCL_CPU_VECTOR m8 = -FLT_MAX;
  for (int v = 0; v < vend; v += RELCL_CPU_VEC) m8 = fmax(m8, RELCL_CPU_VLOAD(0, zr + v));
  float mx = relcl_cpu_lanes(m8, 1);
  for (int v = vend; v < V; v++) mx = fmax(mx, zr[v]);
  RELCL_CPU_VECTOR se8 = 0.0f, sz8 = 0.0f;
  for (int v = 0; v < vend; v += RELCL_CPU_VEC) {
    const RELCL_CPU_VECTOR x = RELCL_CPU_VLOAD(0, zr + v), e = exp(x - mx);
    se8 += e;
    sz8 += x;
    if (grad) RELCL_CPU_VSTORE(e, 0, dzr + v);
  }
  float se = relcl_cpu_lanes(se8, 0), sz = relcl_cpu_lanes(sz8, 0);
  for (int v = vend; v < V; v++) {
    const float x = zr[v], e = exp(x - mx);
    se += e;
    sz += x;
    if (grad) dzr[v] = e;
  }
#else
  float mx = -FLT_MAX;
  for (int v = lid; v < V; v += wg) mx = fmax(mx, zr[v]);
  mx = relcl_row_max(red, mx);
  float se = 0.0f, sz = 0.0f;
  for (int v = lid; v < V; v += wg) {
    se += exp(zr[v] - mx);
    sz += zr[v];
  }
  se = relcl_row_sum(red, se);
  sz = relcl_row_sum(red, sz);
#endif
  const float lse = mx + log(se);
  const float nll = lse - zt;
  if (lid == 0) {
    losses[l_off + 2 * (size_t)row] = (1.0f - eps) * nll + eps * (lse - sz / (float)V);
    losses[l_off + 2 * (size_t)row + 1] = nll;
  }
  if (flags & RELCL_WRITE_GRAD) {
    const float u = eps / (float)V;
#ifdef RELCL_ROW_ITEM
    const float r = 1.0f / se;
    for (int v = 0; v < vend; v += RELCL_CPU_VEC)
      RELCL_CPU_VSTORE(grad_scale * (RELCL_CPU_VLOAD(0, dzr + v) * r - u), 0, dzr + v);
    for (int v = vend; v < V; v++) dzr[v] = grad_scale * (dzr[v] * r - u);
    /* the target's entry again, from zt: dz may be z */
    dzr[t] = grad_scale * (exp(zt - lse) - (1.0f - eps + u));
#else
    for (int v = lid; v < V; v += wg) {
      const float q = v == t ? 1.0f - eps + u : u;
      dzr[v] = grad_scale * (exp(zr[v] - lse) - q);
    }
#endif
  }
}

/* out[row] = smallest index of the largest entry; NaN never wins. */
__kernel void argmax_rows(__global const float *x, uint x_off, int ld, __global int *out,
                          uint o_off, int rows, int cols, __local float *rv, __local int *ri) {
  const int row = RELCL_ROW_ID(), lid = RELCL_ROW_LANE(), wg = RELCL_ROW_LANES();
  if (RELCL_ROW_PAST(row, rows)) return;
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
#ifndef RELCL_ROW_ITEM
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
  bi = ri[0];
#endif
  if (lid == 0) out[o_off + row] = bi < cols ? bi : 0;
}
