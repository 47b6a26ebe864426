/* Transformer layers other than attention (see include/relcl_layers.h for the math):
 * layer norm, embedding lookup and its gradient, dropout, element-wise ops, head split and
 * merge, and fixed-order column sums (bias and gain gradients).
 *
 * Shapes: row-major (rows, d); every buffer comes with an element offset (uint). Layer norm
 * runs in common.cl's row shapes (a work-group or a work-item per row); the others guard their
 * global ids, which the host rounds up to the work-group size.
 * Contraction of a*b+c into fma is off so that the host reference can reproduce sums
 * bit for bit (the embedding gradient test relies on it).
 */
#pragma OPENCL FP_CONTRACT OFF

/* flags: RELCL_ACCUMULATE, _RESIDUAL, _DROP, _RELU (kernels/flags.h) */

/* ---- dropout's keep bits ---- */

/* Keep bits: element e's decision is bit e mod 32 of word e / 32, 1 kept, 0 dropped; in the
 * item shape's masks (mk[b] lane l: element 8b + l of a run of 32), bit 8b + l of the run's
 * word (common.cl's relcl_masks_of makes both, relcl_bits8 takes masks out of a word). */

/* Keep bit e as 0 or 1 */
inline uint keep_bit(__global const uint *keep, uint e) { return (keep[e >> 5] >> (e & 31u)) & 1u; }

/* Keep bits e .. e+7 as masks (-1 kept, 0 dropped): one word's shift where they share it */
inline int8 keep_bits8(__global const uint *keep, uint e) {
  const uint sh = e & 31u;
  if (sh <= 24u) return relcl_bits8(keep[e >> 5], sh);
  int t[8];
  for (uint l = 0; l < 8u; l++) t[l] = -(int)keep_bit(keep, e + l);
  return vload8(0, t);
}

/* Dropout's masks for `runs` (1 .. RELCL_DROP_RUNS) runs of 32 elements from Philox call q0,
 * as dropout_apply makes them (the runs' rounds interleaved where all RELCL_DROP_RUNS are
 * there), their words of keep bits written to keep from word q0 / 8 (a row of whole words:
 * ln_fwd's dropout mode, embed_fwd's) */
inline void keep_runs(int8 mk[4 * RELCL_DROP_RUNS], int runs, uint q0, __global uint *keep,
                      uint threshold, uint seed_lo, uint seed_hi, uint stream_lo,
                      uint stream_hi) {
  uint words[RELCL_DROP_RUNS];
  if (runs == RELCL_DROP_RUNS)
    relcl_keep_masks_runs(mk, words, q0, stream_lo, stream_hi, seed_lo, seed_hi, threshold);
  else
    for (int g = 0; g < runs; g++)
      words[g] = relcl_keep_masks32(mk + 4 * g, q0 + 8u * (uint)g, stream_lo, stream_hi,
                                    seed_lo, seed_hi, threshold);
  for (int g = 0; g < runs; g++) keep[q0 / 8u + (uint)g] = words[g];
}

/* ---- layer norm: a work-group or a work-item per row (common.cl) ---- */

/* With add 1 the row normalized is res + (x + xb), xb a row of d (a linear layer's
 * bias), written to y first and normalized there: what dropout_apply without dropout
 * (relcl__bias_dropout_residual at p 0) and then layer norm compute, in one pass over the
 * row instead of two launches (the decoder's post-norm blocks, lib/model/decode.c). With add
 * 2 (the item shape, d a multiple of 32) the row is res + dropout(x + xb), written to sx:
 * what dropout_apply with dropout computes, its keep bits included (a post-norm block's
 * forward in training, lib/model/model_graph.c: each row starts a word of them, and its
 * elements' Philox calls are dropout_apply's). The same float operations on the same values:
 * the same bits. */
__kernel void ln_fwd(__global const float *x, uint x_off, __global const float *gain,
                     uint g_off, __global const float *bias, uint b_off, __global float *y,
                     uint y_off, __global float *mean, uint m_off, __global float *rstd,
                     uint r_off, int rows, int d, float eps, int add,
                     __global const float *xb, uint xb_off, __global const float *res,
                     uint res_off, __global float *sx, uint sx_off, __global uint *keep,
                     uint keep_off, uint threshold, float drop_scale, uint seed_lo,
                     uint seed_hi, uint stream_lo, uint stream_hi, __local float *red) {
  const int row = RELCL_ROW_ID(), lid = RELCL_ROW_LANE(), wg = RELCL_ROW_LANES();
  if (RELCL_ROW_PAST(row, rows)) return;
  __global const float *xr = x + x_off + (size_t)row * d;
  __global float *yr = y + y_off + (size_t)row * d;
  __global const float *rr = res + res_off + (size_t)row * d;
  xb += xb_off;
#ifdef RELCL_ROW_ITEM
  /* the item shape: whole vectors of the row, then its tail (common.cl) */
  const int vend = d - d % RELCL_COL_VEC;
  RELCL_COL_VECTOR s8 = 0.0f, v8 = 0.0f;
  if (add == 2) {
#if RELCL_COL_VEC != 8
#error "ln_fwd's dropout mode sums in float8 lanes (RELCL_COL_VEC)"
#endif
    __global float *sr = sx + sx_off + (size_t)row * d;
    const uint e0 = (uint)row * (uint)d; /* the row's first element, a multiple of 32 */
    /* RELCL_DROP_RUNS words of masks at a time, their Philox rounds interleaved (as
     * dropout_apply's), then the row's last words one by one */
    for (int c0 = 0; c0 < d; c0 += 32 * RELCL_DROP_RUNS) {
      const int runs = min(RELCL_DROP_RUNS, (d - c0) / 32);
      int8 mk[4 * RELCL_DROP_RUNS];
      keep_runs(mk, runs, (e0 + (uint)c0) / 4u, keep + keep_off, threshold, seed_lo, seed_hi,
                stream_lo, stream_hi);
      for (int b = 0; b < 4 * runs; b++) {
        const int c = c0 + 8 * b;
        const float8 u = select((float8)(0.0f), (vload8(0, xr + c) + vload8(0, xb + c)) *
                                                    drop_scale, mk[b]);
        const float8 t = vload8(0, rr + c) + u;
        vstore8(t, 0, sr + c);
        s8 += t;
      }
    }
    xr = sr;
  } else if (add) {
    for (int c = 0; c < vend; c += RELCL_COL_VEC) {
      const RELCL_COL_VECTOR t = RELCL_COL_VLOAD(0, rr + c) +
                                 (RELCL_COL_VLOAD(0, xr + c) + RELCL_COL_VLOAD(0, xb + c));
      RELCL_COL_VSTORE(t, 0, yr + c);
      s8 += t;
    }
    for (int c = vend; c < d; c++) yr[c] = rr[c] + (xr[c] + xb[c]);
    xr = yr;
  } else {
    for (int c = 0; c < vend; c += RELCL_COL_VEC) s8 += RELCL_COL_VLOAD(0, xr + c);
  }
  float s = relcl_lanes_sum(s8);
  for (int c = vend; c < d; c++) s += xr[c];
  const float mu = s / (float)d;
  for (int c = 0; c < vend; c += RELCL_COL_VEC) {
    const RELCL_COL_VECTOR t = RELCL_COL_VLOAD(0, xr + c) - mu;
    v8 += t * t;
  }
  float v = relcl_lanes_sum(v8);
  for (int c = vend; c < d; c++) {
    const float t = xr[c] - mu;
    v += t * t;
  }
  const float rs = 1.0f / sqrt(v / (float)d + eps);
  for (int c = 0; c < vend; c += RELCL_COL_VEC)
    RELCL_COL_VSTORE((RELCL_COL_VLOAD(0, xr + c) - mu) * rs *
                             RELCL_COL_VLOAD(0, gain + g_off + c) +
                         RELCL_COL_VLOAD(0, bias + b_off + c),
                     0, yr + c);
  const int c0 = vend, step = 1;
#else
  float s = 0.0f;
  if (add) { /* each lane reads back only its own columns: no barrier */
    for (int c = lid; c < d; c += wg) yr[c] = rr[c] + (xr[c] + xb[c]);
    xr = yr;
  }
  for (int c = lid; c < d; c += wg) s += xr[c];
  const float mu = relcl_row_sum(red, s) / (float)d;
  float v = 0.0f;
  for (int c = lid; c < d; c += wg) {
    const float t = xr[c] - mu;
    v += t * t;
  }
  const float rs = 1.0f / sqrt(relcl_row_sum(red, v) / (float)d + eps);
  const int c0 = lid, step = wg;
#endif
  for (int c = c0; c < d; c += step) /* item shape: the tail */
    yr[c] = (xr[c] - mu) * rs * gain[g_off + c] + bias[b_off + c];
  if (lid == 0) {
    mean[m_off + row] = mu;
    rstd[r_off + row] = rs;
  }
}

/* One row of layer norm's backward, one work-item over the whole row (the item shape's
 * ln_bwd, and ln_bwd_params in both shapes): dx (= or += with RELCL_ACCUMULATE) from dy, x,
 * the row's mean and rstd, in whole vectors and then the tail (only the tail without
 * RELCL_ROW_ITEM); with pg (not NULL) also the row's dy * xhat and dy added to pg and pb, each
 * column its own sum, as ln_param_partial adds them; with dar (not NULL) also dropout's
 * backward of the dx it writes into dar, the row's elements being keep bits e0 .. e0 + d - 1,
 * as dropout_apply computes it from dx with RELCL_KEEP_LOAD (the same bits). dy is read
 * before dx is written: dx may be dy. */
__attribute__((always_inline)) inline void
ln_bwd_row(__global const float *xr, __global const float *gain, __global const float *dyr,
           __global float *dxr, float mu, float rs, int d, int flags, __global float *pg,
           __global float *pb, __global float *dar, __global const uint *keep, uint e0,
           float ds, __global float *pc) {
#ifdef RELCL_ROW_ITEM
  const int vend = d - d % RELCL_COL_VEC;
  RELCL_COL_VECTOR a8 = 0.0f, b8 = 0.0f;
  for (int c = 0; c < vend; c += RELCL_COL_VEC) {
    const RELCL_COL_VECTOR dv = RELCL_COL_VLOAD(0, dyr + c);
    const RELCL_COL_VECTOR xh = (RELCL_COL_VLOAD(0, xr + c) - mu) * rs;
    const RELCL_COL_VECTOR g = dv * RELCL_COL_VLOAD(0, gain + c);
    a8 += g;
    b8 += g * xh;
    if (pg) {
      RELCL_COL_VSTORE(RELCL_COL_VLOAD(0, pg + c) + dv * xh, 0, pg + c);
      RELCL_COL_VSTORE(RELCL_COL_VLOAD(0, pb + c) + dv, 0, pb + c);
    }
  }
  float s1 = relcl_lanes_sum(a8), s2 = relcl_lanes_sum(b8);
#else
  const int vend = 0;
  float s1 = 0.0f, s2 = 0.0f;
#endif
  for (int c = vend; c < d; c++) {
    const float xh = (xr[c] - mu) * rs, g = dyr[c] * gain[c];
    s1 += g;
    s2 += g * xh;
    if (pg) {
      pg[c] += dyr[c] * xh;
      pb[c] += dyr[c];
    }
  }
  s1 /= (float)d;
  s2 /= (float)d;
#ifdef RELCL_ROW_ITEM
  for (int c = 0; c < vend; c += RELCL_COL_VEC) {
    const RELCL_COL_VECTOR g = RELCL_COL_VLOAD(0, dyr + c) * RELCL_COL_VLOAD(0, gain + c);
    RELCL_COL_VECTOR v = rs * (g - s1 - ((RELCL_COL_VLOAD(0, xr + c) - mu) * rs) * s2);
    if (flags & RELCL_ACCUMULATE) v += RELCL_COL_VLOAD(0, dxr + c);
    RELCL_COL_VSTORE(v, 0, dxr + c);
#if RELCL_COL_VEC == 8
    if (dar) {
      const float8 a = select((float8)(0.0f), v * ds, keep_bits8(keep, e0 + (uint)c));
      vstore8(a, 0, dar + c);
      if (pc) vstore8(vload8(0, pc + c) + a, 0, pc + c);
    }
#else
    if (dar)
      for (int l = 0; l < RELCL_COL_VEC; l++) {
        dar[c + l] = keep_bit(keep, e0 + (uint)(c + l)) ? dxr[c + l] * ds : 0.0f;
        if (pc) pc[c + l] += dar[c + l];
      }
#endif
  }
#endif
  for (int c = vend; c < d; c++) {
    const float g = dyr[c] * gain[c];
    const float v = rs * (g - s1 - ((xr[c] - mu) * rs) * s2);
    const float o = (flags & RELCL_ACCUMULATE) ? dxr[c] + v : v;
    dxr[c] = o;
    if (dar) {
      const float a = keep_bit(keep, e0 + (uint)c) ? o * ds : 0.0f;
      dar[c] = a;
      if (pc) pc[c] += a;
    }
  }
}

__kernel void ln_bwd(__global const float *x, uint x_off, __global const float *gain,
                     uint g_off, __global const float *mean, uint m_off,
                     __global const float *rstd, uint r_off, __global const float *dy,
                     uint dy_off, __global float *dx, uint dx_off, int rows, int d, int flags,
                     __local float *red) {
  const int row = RELCL_ROW_ID();
  if (RELCL_ROW_PAST(row, rows)) return;
  __global const float *xr = x + x_off + (size_t)row * d;
  __global const float *dyr = dy + dy_off + (size_t)row * d;
  __global float *dxr = dx + dx_off + (size_t)row * d;
  const float mu = mean[m_off + row], rs = rstd[r_off + row];
#ifdef RELCL_ROW_ITEM
  ln_bwd_row(xr, gain + g_off, dyr, dxr, mu, rs, d, flags, 0, 0, 0, 0, 0u, 0.0f, 0);
#else
  const int lid = RELCL_ROW_LANE(), wg = RELCL_ROW_LANES();
  float s1 = 0.0f, s2 = 0.0f;
  for (int c = lid; c < d; c += wg) {
    const float g = dyr[c] * gain[g_off + c];
    s1 += g;
    s2 += g * ((xr[c] - mu) * rs);
  }
  s1 = relcl_row_sum(red, s1) / (float)d;
  s2 = relcl_row_sum(red, s2) / (float)d;
  for (int c = lid; c < d; c += wg) {
    const float g = dyr[c] * gain[g_off + c];
    const float v = rs * (g - s1 - ((xr[c] - mu) * rs) * s2);
    dxr[c] = (flags & RELCL_ACCUMULATE) ? dxr[c] + v : v;
  }
#endif
}

/* Column sums over chunks of rows, each column's rows in order. Group shape: one work-item
 * per column, global (cols, chunks). Item shape (CPUs): RELCL_COL_RUNS vectors of
 * RELCL_COL_VEC adjacent columns per work-item (COL_SPAN columns), global (ceil(cols /
 * COL_SPAN), chunks): the same sums in the same order, so both shapes give the same bits, but
 * one vector add does the work of RELCL_COL_VEC dependent scalar adds, and the runs' sums are
 * independent chains (one vector alone waited on each add: in relcl-bench's issue-8 step on
 * Zen 5, colsum_partial 8.6-8.7 ms a step with one vector a work-item, 4.6-5.0 with four;
 * ln_param_partial 4.2 and 3.0). In the work-item with the last columns, whole vectors one at
 * a time, then the columns past them one by one. */
#define COL_SPAN (RELCL_COL_VEC * RELCL_COL_RUNS)
#ifdef RELCL_ROW_ITEM
#define RELCL_COL_FIRST() ((int)get_global_id(0) * COL_SPAN)
#else
#define RELCL_COL_FIRST() ((int)get_global_id(0))
#endif

#ifdef RELCL_ROW_ITEM
/* The item shape's sums of nv vectors of columns from c (nv RELCL_COL_RUNS, or 1 for the
 * last columns: a constant once inlined, so that the loops over the vectors unroll and the
 * sums stay in registers) over rows r0..r1-1 of chunk ch: ln_param_partial's of dy * xhat and
 * dy into part (2, chunks, d) */
inline void ln_param_vectors(__global const float *x, __global const float *mean,
                             __global const float *rstd, __global const float *dy,
                             __global float *part, int d, int chunks, int ch, int r0, int r1,
                             int c, const int nv) {
  RELCL_COL_VECTOR sg[RELCL_COL_RUNS], sb[RELCL_COL_RUNS];
  for (int v = 0; v < RELCL_COL_RUNS; v++) sg[v] = sb[v] = 0.0f;
  for (int r = r0; r < r1; r++) {
    const float mu = mean[r], rs = rstd[r];
    _Pragma("unroll") for (int v = 0; v < RELCL_COL_RUNS; v++) if (v < nv) {
      const RELCL_COL_VECTOR g = RELCL_COL_VLOAD(v, dy + (size_t)r * d + c);
      const RELCL_COL_VECTOR xr = RELCL_COL_VLOAD(v, x + (size_t)r * d + c);
      sg[v] += g * ((xr - mu) * rs);
      sb[v] += g;
    }
  }
  for (int v = 0; v < nv; v++) {
    RELCL_COL_VSTORE(sg[v], v, part + (size_t)ch * d + c);
    RELCL_COL_VSTORE(sb[v], v, part + ((size_t)chunks + ch) * d + c);
  }
}

/* ... and colsum_partial's of x (ld) into part (chunks, cols) */
inline void colsum_vectors(__global const float *x, int ld, __global float *part, int cols,
                           int ch, int r0, int r1, int c, const int nv) {
  RELCL_COL_VECTOR s[RELCL_COL_RUNS];
  for (int v = 0; v < RELCL_COL_RUNS; v++) s[v] = 0.0f;
  for (int r = r0; r < r1; r++)
    _Pragma("unroll") for (int v = 0; v < RELCL_COL_RUNS; v++) if (v < nv)
      s[v] += RELCL_COL_VLOAD(v, x + (size_t)r * ld + c);
  for (int v = 0; v < nv; v++) RELCL_COL_VSTORE(s[v], v, part + (size_t)ch * cols + c);
}
#endif

/* Partial sums of dy * xhat and dy over a chunk of rows: part (2, chunks, d). */
__kernel void ln_param_partial(__global const float *x, uint x_off, __global const float *mean,
                               uint m_off, __global const float *rstd, uint r_off,
                               __global const float *dy, uint dy_off, __global float *part,
                               int rows, int d, int chunk) {
  const int c0 = RELCL_COL_FIRST(), ch = get_global_id(1), chunks = get_global_size(1);
  if (c0 >= d) return;
  const int r0 = ch * chunk, r1 = min(rows, (ch + 1) * chunk);
#ifdef RELCL_ROW_ITEM
  if (c0 + COL_SPAN <= d) {
    ln_param_vectors(x + x_off, mean + m_off, rstd + r_off, dy + dy_off, part, d, chunks, ch,
                     r0, r1, c0, RELCL_COL_RUNS);
    return;
  }
  int cv = c0;
  for (; cv + RELCL_COL_VEC <= d; cv += RELCL_COL_VEC)
    ln_param_vectors(x + x_off, mean + m_off, rstd + r_off, dy + dy_off, part, d, chunks, ch,
                     r0, r1, cv, 1);
  for (int c = cv; c < d; c++) {
#else
  {
    const int c = c0;
#endif
    float sg = 0.0f, sb = 0.0f;
    for (int r = r0; r < r1; r++) {
      const float g = dy[dy_off + (size_t)r * d + c];
      sg += g * ((x[x_off + (size_t)r * d + c] - mean[m_off + r]) * rstd[r_off + r]);
      sb += g;
    }
    part[(size_t)ch * d + c] = sg;
    part[((size_t)chunks + ch) * d + c] = sb;
  }
}

/* ln_bwd and ln_param_partial in one pass over x and dy, a work-item a chunk of `chunk`
 * rows, global (chunks): each row through ln_bwd_row, its dy * xhat and dy added to the
 * chunk's sums in part (2, chunks, d), so both give the bits of the two kernels in the item
 * shape (CPUs, where layers.c runs it; the group shape builds the scalar form). The sums go
 * through part itself, which stays in L1 (2 d floats). With RELCL_DROP_DX also dropout's
 * backward of dx into da, by the keep bits from keep_off (a post-norm block's backward:
 * lib/model/model_graph.c), where it took a pass over dx of its own; with RELCL_DROP_SUM
 * too, da's sums over the chunk into part's third block (chunks of COLSUM_CHUNK rows, each
 * column in row order: colsum_partial's), the gradient of the bias before the dropout. */
__kernel void ln_bwd_params(__global const float *x, uint x_off, __global const float *gain,
                            uint g_off, __global const float *mean, uint m_off,
                            __global const float *rstd, uint r_off, __global const float *dy,
                            uint dy_off, __global float *dx, uint dx_off,
                            __global float *part, int rows, int d, int chunk, int chunks,
                            int flags, __global float *da, uint da_off,
                            __global const uint *keep, uint keep_off, float drop_scale) {
  const int ch = get_global_id(0);
  if (ch >= chunks) return;
  const int r0 = ch * chunk, r1 = min(rows, r0 + chunk);
  __global float *pg = part + (size_t)ch * d, *pb = part + ((size_t)chunks + ch) * d;
  const bool drop = (flags & RELCL_DROP_DX) != 0, sum = drop && (flags & RELCL_DROP_SUM);
  __global float *pc = sum ? part + ((size_t)2 * chunks + ch) * d : 0;
  for (int c = 0; c < d; c++) pg[c] = pb[c] = 0.0f;
  if (pc)
    for (int c = 0; c < d; c++) pc[c] = 0.0f;
  for (int row = r0; row < r1; row++)
    ln_bwd_row(x + x_off + (size_t)row * d, gain + g_off, dy + dy_off + (size_t)row * d,
               dx + dx_off + (size_t)row * d, mean[m_off + row], rstd[r_off + row], d, flags,
               pg, pb, drop ? da + da_off + (size_t)row * d : 0, keep + keep_off,
               (uint)row * (uint)d, drop_scale, pc);
}

/* ---- column sums: chunks of rows, then the chunks, both in order ---- */

/* part (chunks, cols): global as ln_param_partial's. */
__kernel void colsum_partial(__global const float *x, uint x_off, int ld,
                             __global float *part, int rows, int cols, int chunk) {
  const int c0 = RELCL_COL_FIRST(), ch = get_global_id(1);
  if (c0 >= cols) return;
  const int r0 = ch * chunk, r1 = min(rows, (ch + 1) * chunk);
#ifdef RELCL_ROW_ITEM
  if (c0 + COL_SPAN <= cols) {
    colsum_vectors(x + x_off, ld, part, cols, ch, r0, r1, c0, RELCL_COL_RUNS);
    return;
  }
  int cv = c0;
  for (; cv + RELCL_COL_VEC <= cols; cv += RELCL_COL_VEC)
    colsum_vectors(x + x_off, ld, part, cols, ch, r0, r1, cv, 1);
  for (int c = cv; c < cols; c++) {
#else
  {
    const int c = c0;
#endif
    float s = 0.0f;
    for (int r = r0; r < r1; r++) s += x[x_off + (size_t)r * ld + c];
    part[(size_t)ch * cols + c] = s;
  }
}

/* y (cols) = or += sum over the chunks of part (chunks, cols) from p_off; with outs 2 or 3,
 * also y2 and y3 from the next blocks of (chunks, cols) of part (a layer norm's gain and
 * bias, and the bias before its dropout; two tables): global outs cols. */
__kernel void colsum_finish(__global const float *part, uint p_off, __global float *y,
                            uint y_off, __global float *y2, uint y2_off, __global float *y3,
                            uint y3_off, int chunks, int cols, int outs, int flags) {
  const int g = get_global_id(0), o_ = g / cols, c = g - o_ * cols;
  if (g >= outs * cols) return;
  __global const float *p = part + p_off + (size_t)o_ * chunks * cols;
  __global float *o = o_ == 0 ? y + y_off : o_ == 1 ? y2 + y2_off : y3 + y3_off;
  float s = 0.0f;
  for (int ch = 0; ch < chunks; ch++) s += p[(size_t)ch * cols + c];
  o[c] = (flags & RELCL_ACCUMULATE) ? o[c] + s : s;
}

#ifdef RELCL_ROW_ITEM
/* colsum_rows' sums of nv vectors of columns from c (as colsum_vectors) */
inline void colsum_rows_vectors(__global const float *x, int ld, __global float *y, int rows,
                                int chunk, int c, const int nv, int flags) {
  RELCL_COL_VECTOR t[RELCL_COL_RUNS];
  for (int v = 0; v < RELCL_COL_RUNS; v++) t[v] = 0.0f;
  for (int r0 = 0; r0 < rows; r0 += chunk) {
    RELCL_COL_VECTOR s[RELCL_COL_RUNS];
    for (int v = 0; v < RELCL_COL_RUNS; v++) s[v] = 0.0f;
    for (int r = r0; r < min(rows, r0 + chunk); r++)
      _Pragma("unroll") for (int v = 0; v < RELCL_COL_RUNS; v++) if (v < nv)
        s[v] += RELCL_COL_VLOAD(v, x + (size_t)r * ld + c);
    _Pragma("unroll") for (int v = 0; v < RELCL_COL_RUNS; v++) t[v] += s[v];
  }
  for (int v = 0; v < nv; v++)
    RELCL_COL_VSTORE((flags & RELCL_ACCUMULATE) ? RELCL_COL_VLOAD(v, y + c) + t[v] : t[v], v,
                     y + c);
}
#endif

/* y (cols) = or += the column sums of x (rows x cols, rows ld apart) in one launch: each
 * work-item sums its columns over each chunk of `chunk` rows, then adds the chunks' sums in
 * order, the arithmetic of colsum_partial and colsum_finish (the same bits), for a small x
 * on a CPU (lib/ops/layers.c relcl__colsum says where). Global as colsum_partial's first
 * dimension, local 1. */
__kernel void colsum_rows(__global const float *x, uint x_off, int ld, __global float *y,
                          uint y_off, int rows, int cols, int chunk, int flags) {
  const int c0 = RELCL_COL_FIRST();
  if (c0 >= cols) return;
  x += x_off;
  y += y_off;
#ifdef RELCL_ROW_ITEM
  if (c0 + COL_SPAN <= cols) {
    colsum_rows_vectors(x, ld, y, rows, chunk, c0, RELCL_COL_RUNS, flags);
    return;
  }
  int cv = c0;
  for (; cv + RELCL_COL_VEC <= cols; cv += RELCL_COL_VEC)
    colsum_rows_vectors(x, ld, y, rows, chunk, cv, 1, flags);
  for (int c = cv; c < cols; c++) {
#else
  {
    const int c = c0;
#endif
    float t = 0.0f;
    for (int r0 = 0; r0 < rows; r0 += chunk) {
      float s = 0.0f;
      for (int r = r0; r < min(rows, r0 + chunk); r++) s += x[(size_t)r * ld + c];
      t += s;
    }
    y[c] = (flags & RELCL_ACCUMULATE) ? y[c] + t : t;
  }
}

/* ---- embedding: global (d, n) and (d, n_tokens) ---- */

/* Item shape (CPUs): global (n), a work-item copies its row, a loop the compiler vectorizes.
 * relcl-bench's issue-8 step (Zen 5, two interleaved pairs): 0.46-0.60 ms a step against
 * 3.3-3.9 with an element a work-item; the backward, a token a work-item, 0.48 against 1.9-2.2. */
/* With drop (the item shape, d a multiple of 32) each row then goes through dropout as
 * dropout_apply would take it (its keep bits written): the embeddings' dropout in training
 * (lib/model/model_graph.c), in the same launch. The same bits as the two launches. */
__kernel void embed_fwd(__global const int *ids, uint ids_off, __global const float *table,
                        uint t_off, __global float *out, uint o_off, int n, int d, int vocab,
                        float scale, int drop, __global uint *keep, uint keep_off,
                        uint threshold, float drop_scale, uint seed_lo, uint seed_hi,
                        uint stream_lo, uint stream_hi) {
#ifdef RELCL_ROW_ITEM
  const int t = get_global_id(0);
  if (t >= n) return;
  const int id = ids[ids_off + t];
  __global float *o = out + o_off + (size_t)t * d;
  if (id >= 0 && id < vocab) {
    __global const float *r = table + t_off + (size_t)id * d;
    for (int c = 0; c < d; c++) o[c] = r[c] * scale;
  } else {
    for (int c = 0; c < d; c++) o[c] = 0.0f;
  }
  if (drop) /* the row as dropout_apply's work-items: RELCL_DROP_RUNS words at a time */
    for (int c0 = 0; c0 < d; c0 += 32 * RELCL_DROP_RUNS) {
      const int runs = min(RELCL_DROP_RUNS, (d - c0) / 32);
      int8 mk[4 * RELCL_DROP_RUNS];
      keep_runs(mk, runs, ((uint)t * (uint)d + (uint)c0) / 4u, keep + keep_off, threshold,
                seed_lo, seed_hi, stream_lo, stream_hi);
      for (int b = 0; b < 4 * runs; b++)
        vstore8(select((float8)(0.0f), vload8(0, o + c0 + 8 * b) * drop_scale, mk[b]), 0,
                o + c0 + 8 * b);
    }
#else
  const int c = get_global_id(0), t = get_global_id(1);
  if (c >= d || t >= n) return;
  const int id = ids[ids_off + t];
  out[o_off + (size_t)t * d + c] =
      (id >= 0 && id < vocab) ? table[t_off + (size_t)id * d + c] * scale : 0.0f;
#endif
}

__kernel void embed_bwd(__global const int *tokens, uint tok_off, __global const int *offsets,
                        uint ofs_off, __global const int *positions, uint pos_off,
                        __global const float *dout, uint do_off, __global float *dtable,
                        uint dt_off, int n_tokens, int d, int vocab, float scale) {
#ifdef RELCL_ROW_ITEM
  /* global (n_tokens): a work-item sums its token's rows, a vector of the device's width
   * (RELCL_CPU_VEC columns) at a time, then the last columns one by one; each element's sum
   * in the same order (p ascending) */
  const int u = get_global_id(0);
  if (u >= n_tokens) return;
  const int tok = tokens[tok_off + u];
  if (tok < 0 || tok >= vocab) return;
  const int p0 = offsets[ofs_off + u], p1 = offsets[ofs_off + u + 1];
  __global float *dt = dtable + dt_off + (size_t)tok * d;
  const int vend = d - d % RELCL_CPU_VEC;
  for (int c = 0; c < vend; c += RELCL_CPU_VEC) {
    RELCL_CPU_VECTOR s = 0.0f;
    for (int p = p0; p < p1; p++)
      s += RELCL_CPU_VLOAD(0, dout + do_off + (size_t)positions[pos_off + p] * d + c);
    RELCL_CPU_VSTORE(RELCL_CPU_VLOAD(0, dt + c) + scale * s, 0, dt + c);
  }
  for (int c = vend; c < d; c++) {
    float s = 0.0f;
    for (int p = p0; p < p1; p++) s += dout[do_off + (size_t)positions[pos_off + p] * d + c];
    dt[c] = dt[c] + scale * s;
  }
#else
  const int c = get_global_id(0), u = get_global_id(1);
  if (c >= d || u >= n_tokens) return;
  const int tok = tokens[tok_off + u];
  if (tok < 0 || tok >= vocab) return;
  const int p0 = offsets[ofs_off + u], p1 = offsets[ofs_off + u + 1];
  float s = 0.0f;
  for (int p = p0; p < p1; p++) s += dout[do_off + (size_t)positions[pos_off + p] * d + c];
  const size_t i = dt_off + (size_t)tok * d + c;
  dtable[i] = dtable[i] + scale * s;
#endif
}

/* ---- element-wise: global n ---- */

/* y = [y +] [residual +] mask * (x [+ bias[i mod cols]]) * scale: inverted dropout fused
 * with the bias of the GEMM before it and the residual add after it (one pass instead of
 * three). One Philox call gives four words: call g decides elements 4g .. 4g+3, element i
 * keeping iff word i mod 4 of the call with counter (g lo, g hi, stream lo, stream hi) is
 * >= threshold. Without RELCL_DROP every element is kept and the scale is 1, which leaves
 * values exact.
 * Group shape: a call a work-item, global ceil(n / 4). For PoCL's work-item loops: no
 * private arrays, no uint4 arithmetic, a branch-free body for whole groups of four.
 * Item shape (CPUs): eight calls a work-item (32 elements), their masks in memory order
 * from common.cl's relcl_keep_masks32 (relcl_philox8's uint8 lanes) applied to four
 * float8s; global ceil(n / 32), launched as rows are (lib/ops/layers.c). The Philox rounds
 * then run in vectors whatever PoCL makes of the work-item loop: 2.4-2.5 ms for 4M elements
 * against 4.8-5.4 in the group shape (Zen 5). */

/* The elements 4g .. 4g+3 of call g (those below n), kept where k0 .. k3 are nonzero. */
inline void drop_four(uint g, int k0, int k1, int k2, int k3, __global const float *x,
                      __global const float *bias, __global const float *res,
                      __global float *y, uint n, uint cols, int flags, float s) {
  const uint i = 4 * g;
  /* the bias column of element i; the next ones by stepping with wrap-around */
  uint c = (flags & RELCL_BIAS) ? i % cols : 0u;
  if (i + 4 <= n) {
    float4 v = vload4(0, x + i);
    if (flags & RELCL_BIAS) {
      float4 bv;
      bv.x = bias[c];
      c = c + 1 == cols ? 0u : c + 1;
      bv.y = bias[c];
      c = c + 1 == cols ? 0u : c + 1;
      bv.z = bias[c];
      c = c + 1 == cols ? 0u : c + 1;
      bv.w = bias[c];
      v = v + bv;
    }
    v.x = k0 ? v.x * s : 0.0f;
    v.y = k1 ? v.y * s : 0.0f;
    v.z = k2 ? v.z * s : 0.0f;
    v.w = k3 ? v.w * s : 0.0f;
    if (flags & RELCL_RESIDUAL) v = vload4(0, res + i) + v;
    if (flags & RELCL_ACCUMULATE) v = vload4(0, y + i) + v;
    vstore4(v, 0, y + i);
    return;
  }
  /* the last, partial group: at most three elements */
  for (uint j = 0; i + j < n; j++) {
    const int kj = j == 0 ? k0 : j == 1 ? k1 : k2;
    float v = x[i + j];
    if (flags & RELCL_BIAS) {
      v = v + bias[c];
      c = c + 1 == cols ? 0u : c + 1;
    }
    v = kj ? v * s : 0.0f;
    if (flags & RELCL_RESIDUAL) v = res[i + j] + v;
    if (flags & RELCL_ACCUMULATE) v = y[i + j] + v;
    y[i + j] = v;
  }
}


/* The item shape's eight elements i .. i+7 (bias columns c .. c+7) under the mask mk (-1
 * kept, 0 dropped) */
inline void drop_eight(__global const float *x, __global const float *bias,
                       __global const float *res, __global float *y, uint i, uint c, int8 mk,
                       float s, int flags) {
  float8 v = vload8(0, x + i);
  if (flags & RELCL_BIAS) v = v + vload8(0, bias + c);
  v = select((float8)(0.0f), v * s, mk);
  if (flags & RELCL_RESIDUAL) v = vload8(0, res + i) + v;
  if (flags & RELCL_ACCUMULATE) v = vload8(0, y + i) + v;
  vstore8(v, 0, y + i);
}

__kernel void dropout_apply(__global const float *x, uint x_off, __global const float *bias,
                            uint b_off, __global const float *res, uint r_off,
                            __global float *y, uint y_off, uint n, uint cols, int flags,
                            __global uint *keep, uint keep_off, uint threshold, float scale,
                            uint seed_lo, uint seed_hi, uint stream_lo, uint stream_hi) {
  const int drop = flags & RELCL_DROP;
  const float s = drop ? scale : 1.0f;
  const uint calls = (n + 3) / 4;
  x += x_off, bias += b_off, res += r_off, y += y_off, keep += keep_off;
#ifdef RELCL_ROW_ITEM
  /* RELCL_DROP_RUNS runs of eight calls (32 elements) a work-item, the runs' masks made
   * together (their Philox rounds interleaved), then applied run by run. With
   * RELCL_KEEP_SAVE the masks are also written as keep bits (the forward pass of a training
   * step); with RELCL_KEEP_LOAD they are read from there (its backward: a masked copy at
   * memory speed instead of Philox's rounds again). */
  const uint q0 = 8 * RELCL_DROP_RUNS * (uint)get_global_id(0);
  if (q0 >= calls) return;
  /* mk[b] lane l: -1 where element 4 q0 + 8b + l is kept */
  int8 mk[4 * RELCL_DROP_RUNS];
  for (int b = 0; b < 4 * RELCL_DROP_RUNS; b++) mk[b] = (int8)(-1);
  /* i0 < n and c0 < cols: the differences below cannot wrap, as i0 + 128 could near 2^32 */
  const uint i0 = 4 * q0, c0 = (flags & RELCL_BIAS) ? i0 % cols : 0u;
  /* the runs that start before n, and their words i0 / 32 + g of the keep bits */
  const uint runs = min((uint)RELCL_DROP_RUNS, (calls - q0 + 7) / 8);
  if (drop && (flags & RELCL_KEEP_LOAD)) {
    for (uint g = 0; g < runs; g++)
      for (int b = 0; b < 4; b++) mk[4 * g + b] = relcl_bits8(keep[i0 / 32 + g], 8u * (uint)b);
  } else if (drop) {
    uint words[RELCL_DROP_RUNS];
    relcl_keep_masks_runs(mk, words, q0, stream_lo, stream_hi, seed_lo, seed_hi, threshold);
    if (flags & RELCL_KEEP_SAVE)
      for (uint g = 0; g < runs; g++) keep[i0 / 32 + g] = words[g];
  }
  if (n - i0 >= 32u * RELCL_DROP_RUNS &&
      (!(flags & RELCL_BIAS) || cols - c0 >= 32u * RELCL_DROP_RUNS)) { /* all runs whole */
    for (int b = 0; b < 4 * RELCL_DROP_RUNS; b++)
      drop_eight(x, bias, res, y, i0 + 8 * b, c0 + 8 * b, mk[b], s, flags);
    return;
  }
  for (int g = 0; g < RELCL_DROP_RUNS; g++) { /* run by run: 1.07 times as long for all */
    const uint qg = q0 + 8 * g;
    if (qg >= calls) return;
    const uint ig = 4 * qg, cg = (flags & RELCL_BIAS) ? ig % cols : 0u;
    if (n - ig >= 32u && (!(flags & RELCL_BIAS) || cols - cg >= 32u)) {
      for (int b = 0; b < 4; b++)
        drop_eight(x, bias, res, y, ig + 8 * b, cg + 8 * b, mk[4 * g + b], s, flags);
      continue;
    }
    /* the last run, or one in which the bias column wraps: call by call */
    int keep[32];
    for (int b = 0; b < 4; b++) vstore8(mk[4 * g + b], b, keep);
    const uint nl = min(8u, calls - qg);
    for (uint l = 0; l < nl; l++)
      drop_four(qg + l, keep[4 * l], keep[4 * l + 1], keep[4 * l + 2], keep[4 * l + 3], x, bias,
                res, y, n, cols, flags, s);
  }
#else
  const uint g = get_global_id(0);
  if (g >= calls) return;
  uint4 w = (uint4)(0u);
  if (drop) w = relcl_philox4x32_10((uint4)(g, 0u, stream_lo, stream_hi), seed_lo, seed_hi);
  const uint t = drop ? threshold : 0u;
  drop_four(g, w.x >= t, w.y >= t, w.z >= t, w.w >= t, x, bias, res, y, n, cols, flags, s);
#endif
}

/* y = alpha x + beta y (beta = 0: y not read) */
__kernel void axpby(__global const float *x, uint x_off, __global float *y, uint y_off, uint n,
                    float alpha, float beta) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const float v = alpha * x[x_off + i];
  y[y_off + i] = beta == 0.0f ? v : v + beta * y[y_off + i];
}

__kernel void add2(__global const float *a, uint a_off, __global const float *b, uint b_off,
                   __global float *y, uint y_off, uint n) {
  const uint i = get_global_id(0);
  if (i < n) y[y_off + i] = a[a_off + i] + b[b_off + i];
}

__kernel void relu_fwd(__global const float *x, uint x_off, __global float *y, uint y_off,
                       uint n) {
  const uint i = get_global_id(0);
  if (i < n) y[y_off + i] = fmax(x[x_off + i], 0.0f);
}

__kernel void relu_bwd(__global const float *y, uint y_off, __global const float *dy,
                       uint dy_off, __global float *dx, uint dx_off, uint n) {
  const uint i = get_global_id(0);
  if (i < n) dx[dx_off + i] = y[y_off + i] > 0.0f ? dy[dy_off + i] : 0.0f;
}

/* y (rows, cols) row stride ld: y += b, then ReLU with RELCL_RELU. Global (cols, rows); item
 * shape (CPUs) global (rows): a work-item does its row, a loop the compiler vectorizes. */
__kernel void bias_add(__global float *y, uint y_off, int ld, __global const float *b,
                       uint b_off, int rows, int cols, int flags) {
#ifdef RELCL_ROW_ITEM
  const int r = get_global_id(0);
  if (r >= rows) return;
  __global float *yr = y + y_off + (size_t)r * ld;
  __global const float *br = b + b_off;
  if (flags & RELCL_RELU)
    for (int c = 0; c < cols; c++) yr[c] = fmax(yr[c] + br[c], 0.0f);
  else
    for (int c = 0; c < cols; c++) yr[c] += br[c];
#else
  const int c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  const size_t i = y_off + (size_t)r * ld + c;
  float v = y[i] + b[b_off + c];
  if (flags & RELCL_RELU) v = fmax(v, 0.0f);
  y[i] = v;
#endif
}

/* ---- heads: global (head_dim, n, batch * heads); item shape (n, batch * heads) ----
 * x (batch * n, ld) holds `parts` blocks of heads * head_dim columns side by side (Q|K|V of
 * one projection), y the parts one after the other, each (batch, heads, n, head_dim): one
 * launch moves all of them, each work-item its element of every part (a loop rather than
 * parts in the grid: PoCL then divides once per element, and the copy ran 2-3 times faster).
 * In the item shape (CPUs) a work-item copies the head_dim floats of its row of a head, a
 * loop the compiler vectorizes: on the Zen 1 EPYC 21 + 20 ms a relcl-bench step for split and
 * merge against 92 + 85 with an element a work-item. */

/* Both directions: `split` moves x's rows into y's heads, else y's rows from x's heads. */
inline void relcl_heads_copy(__global const float *x, uint x_off, int ld, __global float *y,
                             uint y_off, int parts, int n, int heads, int head_dim, int split) {
#ifdef RELCL_ROW_ITEM /* global (n, batch * heads): the head_dim floats of a row of a head */
  const int t = get_global_id(0), bh = get_global_id(1), e0 = 0, e1 = head_dim;
  const size_t part = get_global_size(1) * (size_t)n * head_dim;
#else /* global (head_dim, n, batch * heads): one element */
  const int e0 = get_global_id(0), e1 = e0 + 1, t = get_global_id(1), bh = get_global_id(2);
  const size_t part = get_global_size(2) * (size_t)n * head_dim; /* one (B, H, n, dh) */
#endif
  if (e0 >= head_dim || t >= n) return;
  const int b = bh / heads, h = bh - b * heads;
  for (int q = 0; q < parts; q++) {
    const size_t in_heads = q * part + ((size_t)bh * n + t) * head_dim;
    const size_t in_rows = ((size_t)b * n + t) * ld + (q * heads + h) * head_dim;
    __global float *dst = y + y_off + (split ? in_heads : in_rows);
    __global const float *src = x + x_off + (split ? in_rows : in_heads);
    for (int e = e0; e < e1; e++) dst[e] = src[e];
  }
}

__kernel void heads_split(__global const float *x, uint x_off, int ld, __global float *y,
                          uint y_off, int parts, int n, int heads, int head_dim) {
  relcl_heads_copy(x, x_off, ld, y, y_off, parts, n, heads, head_dim, 1);
}

__kernel void heads_merge(__global const float *x, uint x_off, __global float *y, uint y_off,
                          int ld, int parts, int n, int heads, int head_dim) {
  relcl_heads_copy(x, x_off, ld, y, y_off, parts, n, heads, head_dim, 0);
}
