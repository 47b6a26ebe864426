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

/* flags: RELCL_GATHER, _BUCKET, _CAUSAL, _KEY_LEN, _DROPOUT, _WRITE_A (kernels/flags.h) */

inline int relcl_label(int j, int pq, int k) { return clamp(j - pq, -k, k) + k; }

inline int relcl_row_len(__global const int *key_len, uint kl_off, int b, int nk, int flags) {
  return (flags & RELCL_KEY_LEN) ? clamp(key_len[kl_off + b], 0, nk) : nk;
}

inline int relcl_masked(int j, int pq, int len, int flags) {
  return j >= len || ((flags & RELCL_CAUSAL) && j > pq);
}

/* Dropout decisions of row `row`'s keys. Key j's is word j mod 4 of the Philox call with
 * counter row * ceil(nk / 4) + floor(j / 4) (include/relcl.h): a row starts a call, so a
 * call decides four keys of one row. The group shape takes one key a lane (relcl_row_keep);
 * the item shape walks the row in order, eight keys at a time (relcl_row_mask8), and takes
 * 32 keys (eight calls) at a time from relcl_keep_masks32 (vector integer arithmetic). */
#ifdef RELCL_ROW_ITEM
typedef struct relcl_masks {
  int8 mk[4]; /* keys j0 .. j0+31, j0 the last multiple of 32 asked for */
} relcl_masks;

/* Keys j .. j+7's, -1 where kept (all of them without RELCL_DROPOUT in flags): j a multiple
 * of 8, called for every such j in order (each multiple of 32 computes the next 32) */
inline int8 relcl_row_mask8(relcl_masks *km, int flags, int row, int nk, int j, uint stream_lo,
                            uint stream_hi, uint seed_lo, uint seed_hi, uint threshold) {
  if (!(flags & RELCL_DROPOUT)) return (int8)(-1);
  if ((j & 31) == 0)
    relcl_keep_masks32(km->mk, (ulong)row * (ulong)((nk + 3) / 4) + (ulong)(j / 4), stream_lo,
                       stream_hi, seed_lo, seed_hi, threshold);
  return km->mk[(j >> 3) & 3];
}

/* the lanes of v added in order (through memory, as common.cl's relcl_lanes_sum) */
inline float relcl_lanes_sum8(float8 v) {
  float l[8];
  vstore8(v, 0, l);
  float s = l[0];
  for (int i = 1; i < 8; i++) s += l[i];
  return s;
}
#else
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

#ifdef RELCL_ROW_ITEM
/* The item shape's label sums of a whole row, from its values v[0..nk-1] once they are
 * stored: the interior labels are the keys pq-k+1 .. pq+k-1 in order, so their columns are
 * one copy of v (zeros where a label's key lies outside 0..nk-1); the edge labels sum their
 * keys in key order. */
inline void relcl_bucket_row(__global float *bk, __global const float *v, int pq, int nk,
                             int k, int rlo, int R) {
  float left = 0.0f, right = 0.0f;
  if (rlo == 0) { /* label 0: the keys at or left of pq - k (all of them when k = 0) */
    const int end = k == 0 ? nk : clamp(pq - k + 1, 0, nk);
    for (int j = 0; j < end; j++) left += v[j];
  }
  if (k > 0 && rlo + R > 2 * k) /* label 2k: the keys at or right of pq + k */
    for (int j = clamp(pq + k, 0, nk); j < nk; j++) right += v[j];
  /* columns lo .. hi copy the keys pq + rlo + c - k; the others are 0 or an edge sum */
  const int off = pq + rlo - k;
  const int lo = min(max(max(1, rlo), -off + rlo) - rlo, R);
  const int hi = max(min(min(2 * k - 1, rlo + R - 1) - rlo, nk - 1 - off), lo - 1);
  for (int c = 0; c < lo; c++) bk[c] = c + rlo == 0 ? left : 0.0f;
  int c = lo;
  for (; c + 8 <= hi + 1; c += 8) vstore8(vload8(0, v + off + c), 0, bk + c);
  for (; c <= hi; c++) bk[c] = v[off + c];
  for (c = hi + 1; c < R; c++) bk[c] = c + rlo == 2 * k ? right : 0.0f;
}
#endif

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
  /* The item shape (CPUs): the unmasked keys are the prefix j < lim, and exp runs on whole
   * vectors of it, then on its tail (loss.cl's pattern); the sum goes in lanes
   * (relcl_lanes_sum). Scalar exp was half of this kernel's time on PoCL. */
  const int lim = min(len, (flags & RELCL_CAUSAL) ? max(pq + 1, 0) : nk);
  const int vend = lim - lim % RELCL_COL_VEC;
  float mx = -FLT_MAX;
  for (int j = 0; j < lim; j++) {
    float e = s[j];
    if (flags & RELCL_GATHER) e += p[(size_t)(relcl_label(j, pq, k) - rlo) * p_label];
    e *= scale;
    s[j] = e;
    mx = fmax(mx, e);
  }
  RELCL_COL_VECTOR sum8 = 0.0f;
  for (int j = 0; j < vend; j += RELCL_COL_VEC) {
    const RELCL_COL_VECTOR e = exp(RELCL_COL_VLOAD(0, s + j) - mx);
    RELCL_COL_VSTORE(e, 0, s + j);
    sum8 += e;
  }
  float sum = relcl_lanes_sum(sum8);
  for (int j = vend; j < lim; j++) {
    const float e = exp(s[j] - mx);
    s[j] = e;
    sum += e;
  }
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
#endif
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* every key masked: weights all 0 */

#ifdef RELCL_ROW_ITEM
  /* eight keys at a time; keys at or past lim (masked) get alpha 0 */
  relcl_masks km;
  for (int j = 0; j < nk; j += 8) {
    const int8 keep = relcl_row_mask8(&km, flags, row, nk, j, stream_lo, stream_hi, seed_lo,
                                      seed_hi, drop_threshold);
    if (j + 8 <= lim) {
      const float8 alpha = vload8(0, s + j) * inv;
      vstore8(alpha, 0, a + j);
      float8 ad = alpha;
      if (flags & RELCL_DROPOUT) ad = select((float8)(0.0f), alpha * drop_scale, keep);
      vstore8(ad, 0, s + j);
      continue;
    }
    int kp[8];
    vstore8(keep, 0, kp);
    for (int l = 0; l < 8 && j + l < nk; l++) {
      const float alpha = j + l < lim ? s[j + l] * inv : 0.0f;
      a[j + l] = alpha;
      const float ad = (flags & RELCL_DROPOUT) ? (kp[l] ? alpha * drop_scale : 0.0f) : alpha;
      s[j + l] = ad;
    }
  }
  if (flags & RELCL_BUCKET) relcl_bucket_row(bk, s, pq, nk, k, rlo, R);
#else
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
  /* eight keys at a time (masked keys' alpha is 0 already) */
  relcl_masks km;
  for (int j = 0; j < nk; j += 8) {
    const int8 keep = relcl_row_mask8(&km, flags, row, nk, j, stream_lo, stream_hi, seed_lo,
                                      seed_hi, drop_threshold);
    if (j + 8 <= nk) {
      float8 ad = vload8(0, a + j);
      if (flags & RELCL_DROPOUT) ad = select((float8)(0.0f), ad * drop_scale, keep);
      if (flags & RELCL_WRITE_A) vstore8(ad, 0, ad_out + j);
      continue;
    }
    int kp[8];
    vstore8(keep, 0, kp);
    for (int l = 0; l < 8 && j + l < nk; l++) {
      float ad = a[j + l];
      if (flags & RELCL_DROPOUT) ad = kp[l] ? ad * drop_scale : 0.0f;
      if (flags & RELCL_WRITE_A) ad_out[j + l] = ad;
    }
  }
  if (flags & RELCL_BUCKET)
    relcl_bucket_row(bk, (flags & RELCL_WRITE_A) ? ad_out : a, pq, nk, k, rlo, R);
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
  /* The item shape: eight keys at a time, the unmasked ones the prefix j < lim; the dot
   * product in lanes (relcl_lanes_sum), then the keys of the partial vectors in order. */
  const int lim = min(len, (flags & RELCL_CAUSAL) ? max(pq + 1, 0) : nk);
  float8 dot8 = 0.0f;
  float tail = 0.0f;
  relcl_masks km;
  for (int j = 0; j < nk; j += 8) {
    const int8 keep = relcl_row_mask8(&km, flags, row, nk, j, stream_lo, stream_hi, seed_lo,
                                      seed_hi, drop_threshold);
    if (j + 8 <= lim) {
      float8 da = vload8(0, dd + j);
      if (flags & RELCL_GATHER) {
        float t[8];
        for (int l = 0; l < 8; l++)
          t[l] = g[(size_t)(relcl_label(j + l, pq, k) - rlo) * g_label];
        da += vload8(0, t);
      }
      if (flags & RELCL_DROPOUT) da = select((float8)(0.0f), da * drop_scale, keep);
      vstore8(da, 0, dd + j);
      dot8 += vload8(0, a + j) * da;
      continue;
    }
    int kp[8];
    vstore8(keep, 0, kp);
    for (int l = 0; l < 8 && j + l < nk; l++) {
      float da = 0.0f;
      if (j + l < lim) {
        da = dd[j + l];
        if (flags & RELCL_GATHER) da += g[(size_t)(relcl_label(j + l, pq, k) - rlo) * g_label];
        if (flags & RELCL_DROPOUT) da = kp[l] ? da * drop_scale : 0.0f;
      }
      dd[j + l] = da;
      tail += a[j + l] * da;
    }
  }
  const float dot = relcl_lanes_sum8(dot8) + tail;

  const int vend = nk - nk % 8;
  for (int j = 0; j < vend; j += 8)
    vstore8(vload8(0, a + j) * (vload8(0, dd + j) - dot) * scale, 0, dd + j);
  for (int j = vend; j < nk; j++) dd[j] = a[j] * (dd[j] - dot) * scale;
  if (flags & RELCL_BUCKET) relcl_bucket_row(cb, dd, pq, nk, k, rlo, R);
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
