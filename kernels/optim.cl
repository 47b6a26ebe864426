/* The optimizer: a fixed-order sum of squares (global-norm clipping) and the Adam update with
 * bias correction (see include/relcl_layers.h). No atomics: the sum of squares is blocks of
 * contiguous elements, one work-group tree each, then one tree over the blocks.
 */

/* flags: RELCL_SQUARE, RELCL_CLIP (kernels/flags.h) */

/* part[g] = sum (x_i or x_i^2) over block g = [g * block, (g + 1) * block) cut at n, for g <
 * blocks. Group shape: a work-group a block, its lanes strided over it, then a tree. Item
 * shape (CPUs): a work-item a block, read in order in vectors of the device's width
 * (RELCL_CPU_VEC, lane l taking the elements l mod the width), the lanes added in order, then
 * the last elements: relcl-bench's issue-8 step (Zen 5, two interleaved pairs), 0.61-0.65 ms
 * a step against 3.41-3.43 in the group shape, whose lanes each read every 256th element. */
__kernel void sum_block(__global const float *x, uint x_off, __global float *part, uint p_off,
                        uint n, uint block, uint blocks, int flags, __local float *red) {
#ifdef RELCL_ROW_ITEM
  const uint g = get_global_id(0);
  if (g >= blocks) return;
  const uint i0 = min(n, g * block), i1 = min(n, i0 + block);
  const uint vend = i0 + (i1 - i0) / RELCL_CPU_VEC * RELCL_CPU_VEC;
  __global const float *xs = x + x_off;
  RELCL_CPU_VECTOR acc = 0.0f;
  for (uint i = i0; i < vend; i += RELCL_CPU_VEC) {
    const RELCL_CPU_VECTOR v = RELCL_CPU_VLOAD(0, xs + i);
    acc += (flags & RELCL_SQUARE) ? v * v : v;
  }
  float s = relcl_cpu_lanes(acc, 0);
  for (uint i = vend; i < i1; i++) {
    const float v = xs[i];
    s += (flags & RELCL_SQUARE) ? v * v : v;
  }
  part[p_off + g] = s;
#else
  const uint g = get_group_id(0), lid = get_local_id(0), wg = get_local_size(0);
  const uint i0 = g * block, i1 = min(n, i0 + block);
  float s = 0.0f;
  for (uint i = i0 + lid; i < i1; i += wg) {
    const float v = x[x_off + i];
    s += (flags & RELCL_SQUARE) ? v * v : v;
  }
  s = relcl_wg_sum(red, s);
  if (lid == 0) part[p_off + g] = s;
#endif
}

__kernel void adam_update(__global float *param, uint p_off, __global const float *grad,
                          uint g_off, __global float *m, uint m_off, __global float *v,
                          uint v_off, __global const float *sumsq, uint s_off, uint n,
                          float lr_bc1, float inv_sqrt_bc2, float beta1, float beta2, float eps,
                          float grad_scale, float clip_norm, int flags) {
  float c = grad_scale;
  if (flags & RELCL_CLIP) {
    const float norm = grad_scale * sqrt(sumsq[s_off]);
    if (norm > clip_norm) c *= clip_norm / (norm + 1e-6f);
  }
  RELCL_FOR_ELEMENTS(i, n) {
    const float g = c * grad[g_off + i];
    const float mi = beta1 * m[m_off + i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[v_off + i] + (1.0f - beta2) * g * g;
    m[m_off + i] = mi;
    v[v_off + i] = vi;
    param[p_off + i] -= lr_bc1 * mi / (sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}
