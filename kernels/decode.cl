/* Incremental decoding (lib/model/decode.c): the self-attention key and value caches of a decoder
 * layer, (N, H, Tc, dh) for N hypotheses, H heads and room for Tc positions. Writing the new
 * position and gathering hypotheses run here, on the device, rather than as host-side buffer
 * copies, which Oclgrind cannot follow. Pure copies: no arithmetic.
 */

/* The new position t of every hypothesis: cache[r][h][t][e] = x[r ld + h dh + e], x the
 * step's projected keys (or values), (N, ld), heads in its first H dh columns.
 * Global (dh, H, N). */
__kernel void cache_put(__global const float *x, uint x_off, int ld, __global float *cache,
                        uint c_off, int H, int Tc, int dh, int t, int N) {
  const int e = get_global_id(0), h = get_global_id(1), r = get_global_id(2);
  if (e >= dh || h >= H || r >= N) return;
  cache[c_off + (((size_t)r * H + h) * Tc + t) * dh + e] =
      x[x_off + (size_t)r * ld + (size_t)h * dh + e];
}

/* Hypothesis r continues from hypothesis from[r] of src: dst[r][h][p][e] =
 * src[from[r]][h][p][e] for the npos positions written so far (later ones are never read).
 * Global (npos dh, H, N). */
__kernel void cache_gather(__global const int *from, uint f_off, __global const float *src,
                           uint s_off, __global float *dst, uint d_off, int H, int Tc, int dh,
                           int npos, int N) {
  const int c = get_global_id(0), h = get_global_id(1), r = get_global_id(2);
  if (c >= npos * dh || h >= H || r >= N) return;
  const size_t row = (size_t)H * Tc * dh, at = (size_t)h * Tc * dh + c;
  dst[d_off + (size_t)r * row + at] = src[s_off + (size_t)from[f_off + r] * row + at];
}

/* flags of attn_step: RELCL_STEP_* (kernels/flags.h) */

/* Attention of the few queries of a decoder step, straight from the caches: relcl.h's
 * relcl_attn_forward without dropout, for nq = 1 (self-attention of the new position) or
 * nq = beam (encoder-decoder attention of a sentence's hypotheses), where CLBlast's batched
 * GEMMs would spend most of their tiles on padding. One work-group (a power of two) per query
 * row g = (b H + h) nq + i at position pos = q_pos0 + i:
 *   e_j = (q . k_j + q . wK[r]) scale,  r = clamp(j - pos, -k, k) + k,  keys j < n unmasked
 *   z = sum_j softmax(e)_j (v_j + wV[r])
 * As in the design's incremental decoding, the relative terms cost only the labels the row
 * uses (rlo .. rlo + R - 1, at most 2k + 1): their logits q . wK[r] once, and on the value
 * side the sums of the weights falling on each label (the clipped ends gather many keys)
 * times wV[r]; the prefix itself costs only the content terms.
 * Q, Z (B H nq, dh); K, V: matrix bh at bh * kv_stride, rows of dh; P (B H nq, pw) scratch
 * with pw >= nk + 2 R: the weights, then the label logits, then the label sums.
 * Fixed-order sums (common.cl's trees; j or c in order otherwise): no dependence on
 * scheduling. */
__kernel void attn_step(__global const float *Q, uint q_off, __global const float *K,
                        uint k_off, __global const float *V, uint v_off, uint kv_stride,
                        __global const float *wK, uint wk_off, __global const float *wV,
                        uint wv_off, __global const int *key_len, uint kl_off,
                        __global float *P, uint p_off, uint pw, __global float *Z, uint z_off,
                        int H, int nq, int nk, int dh, int k, int q_pos0, int flags,
                        float scale, __local float *red, __local float *q) {
  const int g = get_group_id(0), lid = get_local_id(0), wg = get_local_size(0);
  const int bh = g / nq, i = g - bh * nq, b = bh / H, h = bh - b * H;
  const int pos = q_pos0 + i;
  int n = nk;
  if (flags & RELCL_STEP_KEY_LEN) n = min(n, key_len[kl_off + b]);
  if (flags & RELCL_STEP_CAUSAL) n = min(n, pos + 1);
  /* the labels keys 0 .. n-1 use */
  const int rlo = clamp(-pos, -k, k) + k, rhi = clamp(n - 1 - pos, -k, k) + k;
  const int R = n > 0 ? rhi - rlo + 1 : 0;
  for (int c = lid; c < dh; c += wg) q[c] = Q[q_off + (size_t)g * dh + c];
  barrier(CLK_LOCAL_MEM_FENCE);
  __global const float *kb = K + k_off + (size_t)bh * kv_stride;
  __global const float *vb = V + v_off + (size_t)bh * kv_stride;
  const size_t table = (size_t)(2 * k + 1) * dh;
  const size_t t_at = (flags & RELCL_STEP_PER_HEAD) ? (size_t)h * table : 0;
  __global float *p = P + p_off + (size_t)g * pw, *lab = p + nk, *bucket = lab + R;

  if (flags & RELCL_STEP_REL_K) {
    for (int r = lid; r < R; r += wg) {
      __global const float *rk = wK + wk_off + t_at + (size_t)(rlo + r) * dh;
      float e = 0.0f;
      for (int c = 0; c < dh; c++) e += q[c] * rk[c];
      lab[r] = e;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
  float mx = -FLT_MAX;
  for (int j = lid; j < n; j += wg) {
    __global const float *kj = kb + (size_t)j * dh;
    float e = 0.0f;
    for (int c = 0; c < dh; c++) e += q[c] * kj[c];
    if (flags & RELCL_STEP_REL_K) e += lab[clamp(j - pos, -k, k) + k - rlo];
    e *= scale;
    p[j] = e;
    mx = fmax(mx, e);
  }
  mx = relcl_wg_max(red, mx);
  float sum = 0.0f;
  for (int j = lid; j < n; j += wg) {
    const float a = exp(p[j] - mx);
    p[j] = a;
    sum += a;
  }
  sum = relcl_wg_sum(red, sum);
  barrier(CLK_GLOBAL_MEM_FENCE); /* p[] was written by the group's other work-items */
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* every key masked: z = 0 */
  if (flags & RELCL_STEP_REL_V) {
    /* label r's keys: j = pos + d for |d| < k, and the clipped ends j <= pos - k, j >= pos + k */
    for (int r = lid; r < R; r += wg) {
      const int d = rlo + r - k;
      const int j0 = d == -k ? 0 : pos + d, j1 = d == k ? n - 1 : pos + d;
      float s = 0.0f;
      for (int j = max(j0, 0); j <= min(j1, n - 1); j++) s += p[j];
      bucket[r] = s;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
  for (int c = lid; c < dh; c += wg) {
    float acc = 0.0f;
    for (int j = 0; j < n; j++) acc += p[j] * vb[(size_t)j * dh + c];
    if (flags & RELCL_STEP_REL_V)
      for (int r = 0; r < R; r++) acc += bucket[r] * wV[wv_off + t_at + (size_t)(rlo + r) * dh + c];
    Z[z_off + (size_t)g * dh + c] = acc * inv;
  }
}

/* Beam search's candidates (lib/model/beam.c): the kk largest logits of each of N rows of z (N, V),
 * largest first, equal logits in increasing id, NaN never (the order of beam.c's host
 * ranking); slots past a row's non-NaN logits get id -1. Also the row's logit 0 (decode.c's
 * log-sum-exp is the loss kernel's NLL of token 0 plus it). val, id (N, kk), z0 (N).
 * One work-item per row, scanning ids in order: no dependence on scheduling; kk at most
 * RELCL_TOPK_MAX (kernels/flags.h; the host ranks larger beams itself). Global (N). */
__kernel void row_topk(__global const float *z, uint z_off, int V, int N, int kk,
                       __global float *val, uint v_off, __global int *id, uint i_off,
                       __global float *z0, uint z0_off) {
  const int r = get_global_id(0);
  if (r >= N) return;
  __global const float *row = z + z_off + (size_t)r * V;
  float tv[RELCL_TOPK_MAX];
  int ti[RELCL_TOPK_MAX];
  int n = 0;
  for (int v = 0; v < V; v++) {
    const float x = row[v];
    if (x != x) continue;
    if (n == kk && !(x > tv[n - 1])) continue;
    int j = n < kk ? n++ : kk - 1; /* insertion after the equal ones: lower id first */
    while (j > 0 && x > tv[j - 1]) {
      tv[j] = tv[j - 1];
      ti[j] = ti[j - 1];
      j--;
    }
    tv[j] = x;
    ti[j] = v;
  }
  for (int j = 0; j < kk; j++) {
    val[v_off + (size_t)r * kk + j] = j < n ? tv[j] : 0.0f;
    id[i_off + (size_t)r * kk + j] = j < n ? ti[j] : -1;
  }
  z0[z0_off + r] = row[0];
}
