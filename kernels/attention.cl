/* Row kernels of relation-aware attention: one work-group or one work-item per query row
 * (common.cl's two shapes); `rows` = B H nq.
 *
 * Per row (bh, i), bh = b*H + h, row = bh*nq + i, query position pq = q_pos0 + i:
 *   S, D, A   (rows, nk)  logits, weights or their gradients
 *   Bk, Cb    (rows, R)   one value per relative label r in rlo .. rlo+R-1 (column r - rlo)
 *   P, G      the same values label-major (as the host's GEMM writes them): row bh*nq + i,
 *             column c at bh * p_block + c * p_label + i
 *   r = clamp(j - pq, -k, k) + k
 * Labels 1..2k-1 each hold exactly one key (j = pq + r - k); label 0 sums the keys at or
 * left of pq - k and label 2k those at or right of pq + k; with k = 0 label 0 sums all.
 * Masked keys (j >= key_len[b], or j > pq when causal) get weight 0 and are never read
 * from P or G (so the host may drop labels that only masked keys would use).
 */

/* Oclgrind 21.10 cannot check the LLVM `freeze` that a paired x / y, x % y turns into, so
 * the remainder is written as a subtraction. */

/* flags: RELCL_GATHER, _BUCKET, _CAUSAL, _KEY_LEN, _DROPOUT, _WRITE_A (kernels/flags.h). The
 * labels, key lengths and the item shape's row helpers are in common.cl (gemm.cl's attn_fwd_cpu
 * shares them). */

inline int relcl_masked(int j, int pq, int len, int flags) {
  return j >= len || ((flags & RELCL_CAUSAL) && j > pq);
}

/* Dropout decisions of row `row`'s keys in the group shape, one key a lane (the item shape's:
 * common.cl's relcl_row_mask8). */
#ifndef RELCL_ROW_ITEM
inline int relcl_row_keep(int row, int nk, int j, uint stream_lo, uint stream_hi,
                          uint seed_lo, uint seed_hi, uint threshold) {
  return relcl_keep((ulong)row * (ulong)((nk + 3) / 4) + (ulong)(j / 4), (uint)(j & 3),
                    stream_lo, stream_hi, seed_lo, seed_hi, threshold);
}
#endif

/* Label sums in the group shape, part one: key j's value v goes straight into its interior
 * label, or into the lane's running sums of the two edge labels. */
inline void relcl_bucket_put(__global float *bk, int j, int pq, int k, int rlo, int R, float v,
                             float *left, float *right) {
  const int r = relcl_label(j, pq, k);
  if (k == 0 || r == 0)
    *left += v;
  else if (r == 2 * k)
    *right += v;
  else if (r >= rlo && r < rlo + R)
    bk[r - rlo] = v;
}

/* Part two (every lane of the row calls it): the edge sums, and zeros for interior labels
 * whose key lies outside 0..nk-1. */
inline void relcl_bucket_finish(__global float *bk, int pq, int nk, int k, int rlo, int R,
                                float left, float right, __local float *red) {
  left = relcl_row_sum(red, left);
  right = relcl_row_sum(red, right);
  for (int c = RELCL_ROW_LANE(); c < R; c += RELCL_ROW_LANES()) {
    const int r = c + rlo;
    if (r == 0) {
      bk[c] = left;
    } else if (r == 2 * k) {
      bk[c] = right;
    } else {
      const int j = pq + r - k;
      if (j < 0 || j >= nk) bk[c] = 0.0f;
    }
  }
}

/* Forward: S holds q.k on entry. Adds the relative logit, scales, masks, softmaxes; writes
 * alpha to probs, alpha' = dropout(alpha) over S, and the label sums of alpha' to Bk. */
__kernel void attn_fwd_rows(__global float *S, uint s_off, __global const float *P, uint p_off,
                            uint p_block, uint p_label, __global float *probs,
                            uint probs_off, __global float *Bk, uint b_off,
                            __global const int *key_len, uint kl_off, int rows, int H,
                            int nq, int nk, int k, int rlo, int R, int q_pos0, int flags,
                            float scale, uint drop_threshold, float drop_scale, uint seed_lo,
                            uint seed_hi, uint stream_lo, uint stream_hi,
                            __local float *red) {
  const int row = RELCL_ROW_ID(), lid = RELCL_ROW_LANE(), wg = RELCL_ROW_LANES();
  if (RELCL_ROW_PAST(row, rows)) return;
  const int bh = row / nq, i = row - bh * nq; /* not row % nq: see oclgrind note above */
  const int pq = q_pos0 + i;
  const int len = relcl_row_len(key_len, kl_off, bh / H, nk, flags);
  __global float *s = S + s_off + (size_t)row * nk;
  __global const float *p = P + p_off + (size_t)bh * p_block + i;
  __global float *a = probs + probs_off + (size_t)row * nk;
  __global float *bk = Bk + b_off + (size_t)row * R;

#ifdef RELCL_ROW_ITEM
  relcl_fwd_row_item(s, p, p_label, false, a, bk, row, pq, len, nk, k, rlo, R, flags, scale,
                     drop_threshold, drop_scale, seed_lo, seed_hi, stream_lo, stream_hi);
#else
  float mx = -FLT_MAX;
  for (int j = lid; j < nk; j += wg) {
    if (relcl_masked(j, pq, len, flags)) continue;
    float e = s[j];
    if (flags & RELCL_GATHER) e += p[(size_t)(relcl_label(j, pq, k) - rlo) * p_label];
    e *= scale;
    s[j] = e;
    mx = fmax(mx, e);
  }
  mx = relcl_row_max(red, mx);

  float sum = 0.0f;
  for (int j = lid; j < nk; j += wg) /* each lane keeps its own j: s[j] = exp(.) is its own */
    if (!relcl_masked(j, pq, len, flags)) {
      const float e = exp(s[j] - mx);
      s[j] = e;
      sum += e;
    }
  sum = relcl_row_sum(red, sum);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* every key masked: weights all 0 */

  float left = 0.0f, right = 0.0f;
  for (int j = lid; j < nk; j += wg) {
    const float alpha = relcl_masked(j, pq, len, flags) ? 0.0f : s[j] * inv;
    a[j] = alpha;
    float ad = alpha;
    if (flags & RELCL_DROPOUT)
      ad = relcl_row_keep(row, nk, j, stream_lo, stream_hi, seed_lo, seed_hi, drop_threshold)
               ? alpha * drop_scale
               : 0.0f;
    s[j] = ad;
    if (flags & RELCL_BUCKET) relcl_bucket_put(bk, j, pq, k, rlo, R, ad, &left, &right);
  }
  if (flags & RELCL_BUCKET) relcl_bucket_finish(bk, pq, nk, k, rlo, R, left, right, red);
#endif
}

/* Backward, before the GEMMs: alpha' = dropout(alpha) into A (with RELCL_WRITE_A) and its
 * label sums into Bk (with RELCL_BUCKET). The item shape reads alpha' back for the sums, from
 * A, or from probs without dropout: RELCL_DROPOUT and RELCL_BUCKET need RELCL_WRITE_A
 * (attention.c has A exactly when it has dropout). */
__kernel void attn_drop_rows(__global const float *probs, uint probs_off, __global float *A,
                             uint a_off, __global float *Bk, uint b_off,
                             __global const int *key_len, uint kl_off, int rows, int H, int nq,
                             int nk, int k, int rlo, int R, int q_pos0, int flags,
                             uint drop_threshold, float drop_scale, uint seed_lo, uint seed_hi,
                             uint stream_lo, uint stream_hi, __local float *red) {
  const int row = RELCL_ROW_ID(), lid = RELCL_ROW_LANE(), wg = RELCL_ROW_LANES();
  if (RELCL_ROW_PAST(row, rows)) return;
  const int pq = q_pos0 + row - (row / nq) * nq;
  __global const float *a = probs + probs_off + (size_t)row * nk;
  __global float *ad_out = A + a_off + (size_t)row * nk;
  __global float *bk = Bk + b_off + (size_t)row * R;
#ifdef RELCL_ROW_ITEM
  relcl_drop_row_item(a, ad_out, bk, row, pq, nk, k, rlo, R, flags, drop_threshold, drop_scale,
                      seed_lo, seed_hi, stream_lo, stream_hi);
#else
  float left = 0.0f, right = 0.0f;
  for (int j = lid; j < nk; j += wg) {
    float ad = a[j];
    if (flags & RELCL_DROPOUT)
      ad = relcl_row_keep(row, nk, j, stream_lo, stream_hi, seed_lo, seed_hi, drop_threshold)
               ? ad * drop_scale
               : 0.0f;
    if (flags & RELCL_WRITE_A) ad_out[j] = ad;
    if (flags & RELCL_BUCKET) relcl_bucket_put(bk, j, pq, k, rlo, R, ad, &left, &right);
  }
  if (flags & RELCL_BUCKET) relcl_bucket_finish(bk, pq, nk, k, rlo, R, left, right, red);
#endif
}

/* Backward through gather, dropout and softmax. D holds dz.v_j on entry (the gradient of
 * alpha' from the content term); adds G at each key's label (the a^V term), applies the
 * dropout mask, then de = alpha (dalpha - sum_l alpha_l dalpha_l) * scale over D, and the
 * label sums of de into Cb. */
__kernel void attn_bwd_rows(__global float *D, uint d_off, __global const float *G, uint g_off,
                            uint g_block, uint g_label, __global const float *probs,
                            uint probs_off, __global float *Cb, uint c_off,
                            __global const int *key_len, uint kl_off, int rows, int H,
                            int nq, int nk, int k, int rlo, int R, int q_pos0, int flags,
                            float scale,
                            uint drop_threshold, float drop_scale, uint seed_lo, uint seed_hi,
                            uint stream_lo, uint stream_hi, __local float *red) {
  const int row = RELCL_ROW_ID(), lid = RELCL_ROW_LANE(), wg = RELCL_ROW_LANES();
  if (RELCL_ROW_PAST(row, rows)) return;
  const int bh = row / nq, i = row - bh * nq; /* not row % nq: see oclgrind note above */
  const int pq = q_pos0 + i;
  const int len = relcl_row_len(key_len, kl_off, bh / H, nk, flags);
  __global float *dd = D + d_off + (size_t)row * nk;
  __global const float *g = G + g_off + (size_t)bh * g_block + i;
  __global const float *a = probs + probs_off + (size_t)row * nk;
  __global float *cb = Cb + c_off + (size_t)row * R;

#ifdef RELCL_ROW_ITEM
  relcl_bwd_row_item(dd, g, g_label, false, a, 0, cb, row, pq, len, nk, k, rlo, R, flags, scale,
                     drop_threshold, drop_scale, seed_lo, seed_hi, stream_lo, stream_hi);
#else
  float dot = 0.0f;
  for (int j = lid; j < nk; j += wg) {
    float da = 0.0f;
    if (!relcl_masked(j, pq, len, flags)) {
      da = dd[j];
      if (flags & RELCL_GATHER) da += g[(size_t)(relcl_label(j, pq, k) - rlo) * g_label];
      if ((flags & RELCL_DROPOUT) &&
          !relcl_row_keep(row, nk, j, stream_lo, stream_hi, seed_lo, seed_hi, drop_threshold))
        da = 0.0f;
      else if (flags & RELCL_DROPOUT)
        da *= drop_scale;
    }
    dd[j] = da;
    dot += a[j] * da;
  }
  dot = relcl_row_sum(red, dot);

  float left = 0.0f, right = 0.0f;
  for (int j = lid; j < nk; j += wg) {
    const float de = a[j] * (dd[j] - dot) * scale;
    dd[j] = de;
    if (flags & RELCL_BUCKET) relcl_bucket_put(cb, j, pq, k, rlo, R, de, &left, &right);
  }
  if (flags & RELCL_BUCKET) relcl_bucket_finish(cb, pq, nk, k, rlo, R, left, right, red);
#endif
}

/* The products of a shared table on GPUs (attention.c; on CPUs relcl's gemm_cpu and
 * gemm_cpu_bt run them, through gemm.c), an output a work-item. */

/* A shared table's gradient, dW[r][c] = sum over rows of L[row][r] X[row][c] (L rows x R,
 * X rows x d), in two passes of fixed order: this one sums each chunk of `chunk` rows into
 * part (chunks, R, d), layers.cl's colsum_finish then the chunks. Global (d, R, chunks). */
__kernel void table_grad_partial(__global const float *L, uint l_off, __global const float *X,
                                 uint x_off, __global float *part, uint rows, int R, int d,
                                 uint chunk) {
  const uint ch = get_global_id(2);
  const uint i0 = ch * chunk, i1 = min(rows, i0 + chunk);
  const int r = get_global_id(1), c = get_global_id(0);
  if (c >= d) return;
  __global const float *l = L + l_off + r, *x = X + x_off;
  float s = 0.0f;
  for (uint i = i0; i < i1; i++) s += l[(size_t)i * R] * x[(size_t)i * d + c];
  part[((size_t)ch * R + r) * d + c] = s;
}

/* A shared table's label values (attention.c labels_from): out[c * rows + i] = sum over k of
 * X[i][k] W[c][k], for rows i < rows of X (rows x d) and labels c < R of the table's window
 * W (R x d), label-major as the row kernels gather them. Global (rows rounded up, R). Each
 * sum runs over k in order. */
__kernel void labels_shared(__global const float *X, uint x_off, __global const float *W,
                            uint w_off, __global float *out, uint out_off, uint rows, int R,
                            int d) {
  const uint i = get_global_id(0);
  const int c = get_global_id(1);
  if (i >= rows) return;
  __global const float *x = X + x_off + (size_t)i * d, *w = W + w_off + (size_t)c * d;
  float s = 0.0f;
  for (int k = 0; k < d; k++) s += x[k] * w[k];
  out[out_off + (size_t)c * rows + i] = s;
}

/* A shared table's label sums added to rows (attention.c add_from_labels): Y[i][j] += sum
 * over c of L[i][c] W[c][j], for L (rows x R), the table's window W (R x d), Y (rows x d); the
 * sum runs over c in order and is then added. Global (d rounded up, rows). */
__kernel void add_labels_shared(__global const float *L, uint l_off, __global const float *W,
                                uint w_off, __global float *Y, uint y_off, uint rows, int R,
                                int d) {
  L += l_off, W += w_off, Y += y_off;
  const int j = get_global_id(0);
  const uint i = get_global_id(1);
  if (j >= d) return;
  float s = 0.0f;
  for (int c = 0; c < R; c++) s += L[(size_t)i * R + c] * W[(size_t)c * d + j];
  Y[(size_t)i * d + j] += s;
}
