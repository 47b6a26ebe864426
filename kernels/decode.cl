/* Incremental decoding (lib/model/decode.c): the self-attention key and value caches of a decoder
 * layer, (N, H, Tc, dh) for N cache rows, H heads and room for Tc positions, and the history
 * (N, Tc) of int: hypothesis r's position j is in cache row hist[r][j]. A step writes each
 * hypothesis's new position t into its own row, r; when beam search reorders the hypotheses,
 * only the history follows (hist_gather), where copying every cache row had taken 12% of
 * relcl-translate's device time (session 32). Each (row, position) is written once: rows
 * keep the earlier positions of hypotheses that others descend from. Writing the new
 * position and reordering run here, on the device, rather than as host-side buffer copies,
 * which Oclgrind cannot follow. Pure copies: no arithmetic.
 */

/* The new position t of every hypothesis, its keys and its values in one launch: cache_k
 * [r][h][t][e] = x[r ld + h dh + e] and cache_v[r][h][t][e] = x[r ld + v_gap + h dh + e], x
 * the step's projections (N, ld), the keys' H dh columns first and the values' v_gap
 * floats after them; and hist[r][t] = r (rows Tc apart). Global (dh, H, 2 N), keys and
 * values of row r at 2 r and 2 r + 1; in the item shape (CPUs) (N H, 2), a head's dh floats
 * a work-item (a float a work-item took 5% of relcl-translate's device time on PoCL). */
__kernel void cache_put(__global const float *x, uint x_off, int ld, int v_gap,
                        __global float *cache_k, uint k_off, __global float *cache_v,
                        uint v_off, int H, int Tc, int dh, int t, int N, __global int *hist,
                        uint h_off) {
#ifdef RELCL_ROW_ITEM
  const int e = 0, r = get_global_id(0) / H, h = get_global_id(0) - r * H;
  const int kv = get_global_id(1);
  if (r >= N) return;
  __global float *dst = kv ? cache_v + v_off : cache_k + k_off;
  dst += (((size_t)r * H + h) * Tc + t) * dh;
  __global const float *src = x + x_off + (size_t)r * ld + (size_t)kv * v_gap + (size_t)h * dh;
  int c = 0;
  for (; c + 8 <= dh; c += 8) vstore8(vload8(0, src + c), 0, dst + c);
  for (; c < dh; c++) dst[c] = src[c];
#else
  const int e = get_global_id(0), h = get_global_id(1), r = get_global_id(2) / 2;
  const int kv = get_global_id(2) - 2 * r;
  if (e >= dh || h >= H || r >= N) return;
  __global float *dst = kv ? cache_v + v_off : cache_k + k_off;
  dst[(((size_t)r * H + h) * Tc + t) * dh + e] =
      x[x_off + (size_t)r * ld + (size_t)kv * v_gap + (size_t)h * dh + e];
#endif
  if (e == 0 && h == 0 && kv == 0) hist[h_off + (size_t)r * Tc + t] = r;
}

/* Hypothesis r continues from hypothesis from[r]: dst[r][j] = src[from[r]][j] for the npos
 * positions so far (rows Tc apart). Global (npos, N). */
__kernel void hist_gather(__global const int *from, uint f_off, __global const int *src,
                          uint s_off, __global int *dst, uint d_off, int Tc, int npos, int N) {
  const int j = get_global_id(0), r = get_global_id(1);
  if (j >= npos || r >= N) return;
  dst[d_off + (size_t)r * Tc + j] = src[s_off + (size_t)from[f_off + r] * Tc + j];
}

/* flags of attn_step: RELCL_STEP_* (kernels/flags.h) */

/* Attention of the few queries of a decoder step, straight from the caches: relcl.h's
 * relcl_attn_forward without dropout, for nq = 1 (self-attention of the new position) or
 * nq = beam (encoder-decoder attention of a sentence's hypotheses), where CLBlast's batched
 * GEMMs would spend most of their tiles on padding. One work-group (a power of two) per query
 * row g = (b H + h) nq + i at position pos = q_pos0 + i (on CPUs a work-item: attn_step_row):
 *   e_j = (q . k_j + q . wK[r]) scale,  r = clamp(j - pos, -k, k) + k,  keys j < n unmasked
 *   z = sum_j softmax(e)_j (v_j + wV[r])
 * As in the design's incremental decoding, the relative terms cost only the labels the row
 * uses (rlo .. rlo + R - 1, at most 2k + 1): their logits q . wK[r] once, and on the value
 * side the sums of the weights falling on each label (the clipped ends gather many keys)
 * times wV[r]; the prefix itself costs only the content terms.
 * Q, Z: query row g's dh floats at b q_bs + h q_hs + i q_is (step_at: the heads layout
 * (B, H, nq, dh), or where the decoder's products write and read them, which saves a split
 * and a merge); K, V: matrix bh at bh * kv_stride, rows of dh, or with a history (hist,
 * rows hist_ld apart; 0: none) key j of (b, h) at position j of cache row hist[b][j] (see the
 * top of this file); P (B H nq, pw) scratch
 * with pw >= nk + 2 R: the weights, then the label logits, then the label sums.
 * Fixed-order sums (common.cl's trees; j or c in order otherwise): no dependence on
 * scheduling. */
/* Query row g of attn_step: its (sequence or hypothesis b, head h) bh = b H + h, position,
 * keys n (key_len and causal limits) and the labels those keys use, rlo .. rlo + R - 1 */
typedef struct {
  int bh, b, h, pos, n, rlo, R;
} step_row_t;
inline step_row_t step_row_of(int g, int H, int nq, int nk, int k, int q_pos0, int flags,
                              __global const int *key_len, uint kl_off) {
  step_row_t s;
  s.bh = g / nq;
  s.b = s.bh / H;
  s.h = s.bh - s.b * H;
  s.pos = q_pos0 + (g - s.bh * nq);
  s.n = nk;
  if (flags & RELCL_STEP_KEY_LEN) s.n = min(s.n, key_len[kl_off + s.b]);
  if (flags & RELCL_STEP_CAUSAL) s.n = min(s.n, s.pos + 1);
  s.rlo = clamp(-s.pos, -k, k) + k;
  s.R = s.n > 0 ? clamp(s.n - 1 - s.pos, -k, k) + k - s.rlo + 1 : 0;
  return s;
}

/* Where query row g's q (or z) starts: its sequence b, head h and query i (g - bh nq) times
 * the strides bs, hs, is */
inline size_t step_at(step_row_t sr, int g, int nq, int bs, int hs, int is) {
  return (size_t)sr.b * bs + (size_t)sr.h * hs + (size_t)(g - sr.bh * nq) * is;
}

/* The weights p[] of label rlo + r's keys, in order: j = pos + d for |d| < k, and the clipped
 * ends j <= pos - k, j >= pos + k */
inline float step_bucket(__global const float *p, int r, int rlo, int k, int pos, int n) {
  const int d = rlo + r - k;
  const int j0 = d == -k ? 0 : pos + d, j1 = d == k ? n - 1 : pos + d;
  float s = 0.0f;
  for (int j = max(j0, 0); j <= min(j1, n - 1); j++) s += p[j];
  return s;
}

/* Key (or value) j of a query row's matrix x: row j of x (rows dh apart), or with a history
 * hr (not 0: the query's hypothesis's row of hist) position j of cache row hr[j], cache rows
 * `row` floats apart (x is then the head's matrix in cache row 0) */
inline __global const float *step_key(__global const float *x, __global const int *hr,
                                      size_t row, int j, int dh) {
  return x + (hr ? (size_t)hr[j] * row : 0) + (size_t)j * dh;
}

/* Column c of attn_step's weighted sum before the softmax's 1 / sum: the weights p[] of the n
 * rows of V (step_key), then the label sums of the R rows of the table window wv (with
 * RELCL_STEP_REL_V), in order */
inline float step_column(__global const float *p, __global const float *vb,
                         __global const int *hr, size_t row, int n, int dh,
                         __global const float *bucket, __global const float *wv, int R,
                         int flags, int c) {
  float acc = 0.0f;
  for (int j = 0; j < n; j++) acc += p[j] * step_key(vb, hr, row, j, dh)[c];
  if (flags & RELCL_STEP_REL_V)
    for (int r = 0; r < R; r++) acc += bucket[r] * wv[(size_t)r * dh + c];
  return acc;
}

/* attn_step's arguments but its local scratch (the item shape's attn_step_row takes them) */
#define STEP_PARAMS                                                                         \
  __global const float *Q, uint q_off, __global const float *K, uint k_off,                 \
      __global const float *V, uint v_off, uint kv_stride, __global const float *wK,        \
      uint wk_off, __global const float *wV, uint wv_off, __global const int *key_len,      \
      uint kl_off, __global const int *hist, uint h_off, int hist_ld, __global float *P,    \
      uint p_off, uint pw, __global float *Z, uint z_off, int H, int nq, int nk, int dh,    \
      int k, int q_pos0, int flags, float scale, int rows, int lanes, int q_bs, int q_hs,   \
      int q_is, int z_bs, int z_hs, int z_is

/* attn_step's kb, vb, hr and row for query row sr: with a history (hist_ld > 0, the
 * self-attention's caches) hypothesis b's row of it and head h's matrix in cache row 0, cache
 * rows H kv_stride apart; else matrix bh at bh kv_stride and no history */
#define STEP_KV_BASES                                                                       \
  __global const int *hr = hist_ld > 0 ? hist + h_off + (size_t)sr.b * hist_ld : 0;         \
  const size_t row = (size_t)H * kv_stride;                                                 \
  __global const float *kb = K + k_off + (size_t)(hr ? sr.h : sr.bh) * kv_stride;           \
  __global const float *vb = V + v_off + (size_t)(hr ? sr.h : sr.bh) * kv_stride

#ifdef RELCL_ROW_ITEM
/* Ask for the dh floats at p (common.cl's CPU_PREFETCH: nothing where it is empty) */
#define STEP_PREFETCH(p, dh) for (int l_ = 0; l_ < (dh); l_ += 16) CPU_PREFETCH((p) + l_, 0)
/* attn_step in the item shape (CPUs): a work-item per query row g (rows of them), the same
 * sums in the same order as a work-group of `lanes` work-items would make them (the host
 * passes the group shape's size): the softmax's sum as `lanes` partial sums, key j in partial
 * j mod lanes, added up in relcl_wg_sum's tree; the maximum in any order (exact); every other
 * sum in order, as there. The bits are the group shape's but for exp's (below). The
 * work-group's barriers and reductions had cost PoCL more than the arithmetic:
 * relcl-translate's decoding of the demo's test set spent 38% of its device time in
 * attn_step (see decode.c). */
#define STEP_LANES_MAX 64
/* out[j] = q . x_j for the n rows x_j = step_key(x, hr, row, j, dh), each in order of c:
 * eight rows at a time, whose sums are independent chains that overlap (rows past n read row
 * n - 1 and are not stored) */
inline void step_dots(__global const float *q, __global const float *x, __global const int *hr,
                      size_t row, int n, int dh, __global float *out) {
  for (int j = 0; j < n; j += 8) {
    __global const float *xr[8];
    _Pragma("unroll") for (int u = 0; u < 8; u++)
      xr[u] = step_key(x, hr, row, min(j + u, n - 1), dh);
    for (int u = j + 8; u < min(j + 16, n); u++) STEP_PREFETCH(step_key(x, hr, row, u, dh), dh);
    int c = 0;
#ifdef RELCL_POCL
    /* on PoCL eight columns of the eight rows at a time, transposed in registers (common.cl):
     * lane u of e8 is row u's sum, still in order of c (Oclgrind's checker misreads the
     * shuffles: element by element there) */
    float8 e8 = (float8)(0.0f);
    for (; c + 8 <= dh; c += 8) {
      float8 v[8];
      _Pragma("unroll") for (int u = 0; u < 8; u++) v[u] = vload8(0, xr[u] + c);
      RELCL_TRANSPOSE8(v);
      _Pragma("unroll") for (int cc = 0; cc < 8; cc++) e8 += q[c + cc] * v[cc];
    }
    float e[8];
    vstore8(e8, 0, e);
#else
    float e[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#endif
    for (; c < dh; c++) {
      const float qc = q[c];
      _Pragma("unroll") for (int u = 0; u < 8; u++) e[u] += qc * xr[u][c];
    }
    for (int u = 0; u < 8 && j + u < n; u++) out[j + u] = e[u];
  }
}

inline void attn_step_row(STEP_PARAMS) {
  const int g = get_global_id(0);
  if (g >= rows) return;
  const step_row_t sr = step_row_of(g, H, nq, nk, k, q_pos0, flags, key_len, kl_off);
  const int h = sr.h, pos = sr.pos, n = sr.n, rlo = sr.rlo, R = sr.R;
  __global const float *q = Q + q_off + step_at(sr, g, nq, q_bs, q_hs, q_is);
  STEP_KV_BASES;
  const size_t table = (size_t)(2 * k + 1) * dh;
  const size_t t_at = (flags & RELCL_STEP_PER_HEAD) ? (size_t)h * table : 0;
  __global float *p = P + p_off + (size_t)g * pw, *lab = p + nk, *bucket = lab + R;
  if (flags & RELCL_STEP_REL_K)
    step_dots(q, wK + wk_off + t_at + (size_t)rlo * dh, 0, 0, R, dh, lab);
  step_dots(q, kb, hr, row, n, dh, p);
  float mx = -FLT_MAX;
  for (int j = 0; j < n; j++) {
    STEP_PREFETCH(step_key(vb, hr, row, j, dh), dh); /* the weighted sum's rows of V */
    float e = p[j];
    if (flags & RELCL_STEP_REL_K) e += lab[clamp(j - pos, -k, k) + k - rlo];
    e *= scale;
    p[j] = e;
    mx = fmax(mx, e);
  }
  float part[STEP_LANES_MAX];
  for (int l = 0; l < lanes; l++) part[l] = 0.0f;
  int j = 0;
  /* eight keys a vector exp (a scalar exp a key had been a fifth of this kernel's samples),
   * each into its partial sum as one at a time would go: the same sums. PoCL's vector exp
   * differs from its scalar one in the last bit for about 1% of arguments, so these bits are
   * the group shape's but for that. */
  if (lanes >= 8)
    for (; j + 8 <= n; j += 8) {
      const float8 a = exp(vload8(0, p + j) - mx);
      vstore8(a, 0, p + j);
      float *pt = part + (j & (lanes - 1));
      vstore8(vload8(0, pt) + a, 0, pt);
    }
  for (; j < n; j++) {
    const float a = exp(p[j] - mx);
    p[j] = a;
    part[j & (lanes - 1)] += a;
  }
  for (int s = lanes / 2; s > 0; s >>= 1)
    for (int l = 0; l < s; l++) part[l] += part[l + s];
  const float sum = part[0];
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  if (flags & RELCL_STEP_REL_V)
    for (int r = 0; r < R; r++) bucket[r] = step_bucket(p, r, rlo, k, pos, n);
  __global const float *wv = wV + wv_off + t_at + (size_t)rlo * dh;
  __global float *z = Z + z_off + step_at(sr, g, nq, z_bs, z_hs, z_is);
  int c = 0;
  /* eight columns a vector, up to eight vectors at once: each column its own sum, in order,
   * the vectors independent chains that overlap. NV vectors (STEP_WSUM: a constant for 4 and
   * 8, heads 32 and 64 wide, so that the unrolled loops test nothing: their tests had been
   * a fifth of this kernel's samples in relcl-translate on the demo's model) */
#define STEP_WSUM(NV)                                                                       \
  {                                                                                         \
    for (int j = 0; j < n; j++) {                                                           \
      __global const float *vj = step_key(vb, hr, row, j, dh) + c;                          \
      const float pj = p[j];                                                                \
      _Pragma("unroll") for (int v = 0; v < 8; v++) if (v < (NV)) acc[v] += pj * vload8(v, vj); \
    }                                                                                       \
    if (flags & RELCL_STEP_REL_V)                                                           \
      for (int r = 0; r < R; r++) {                                                         \
        __global const float *wr = wv + (size_t)r * dh + c;                                 \
        const float br = bucket[r];                                                         \
        _Pragma("unroll") for (int v = 0; v < 8; v++) if (v < (NV)) acc[v] += br * vload8(v, wr); \
      }                                                                                     \
  }
  for (int nv; c + 8 <= dh; c += 8 * nv) {
    nv = min((dh - c) / 8, 8);
    float8 acc[8];
    _Pragma("unroll") for (int v = 0; v < 8; v++) acc[v] = (float8)(0.0f);
    if (nv == 8)
      STEP_WSUM(8)
    else if (nv == 4)
      STEP_WSUM(4)
    else
      STEP_WSUM(nv)
    _Pragma("unroll") for (int v = 0; v < 8; v++) if (v < nv) vstore8(acc[v] * inv, v, z + c);
  }
#undef STEP_WSUM
  for (; c < dh; c++) z[c] = step_column(p, vb, hr, row, n, dh, bucket, wv, R, flags, c) * inv;
}
#endif

__kernel void attn_step(STEP_PARAMS, __local float *red, __local float *q) {
#ifdef RELCL_ROW_ITEM
  attn_step_row(Q, q_off, K, k_off, V, v_off, kv_stride, wK, wk_off, wV, wv_off, key_len, kl_off,
                hist, h_off, hist_ld, P, p_off, pw, Z, z_off, H, nq, nk, dh, k, q_pos0, flags,
                scale, rows, lanes, q_bs, q_hs, q_is, z_bs, z_hs, z_is);
#else
  const int g = get_group_id(0), lid = get_local_id(0), wg = get_local_size(0);
  const step_row_t sr = step_row_of(g, H, nq, nk, k, q_pos0, flags, key_len, kl_off);
  const int h = sr.h, pos = sr.pos, n = sr.n, rlo = sr.rlo, R = sr.R;
  const size_t q_at = q_off + step_at(sr, g, nq, q_bs, q_hs, q_is);
  for (int c = lid; c < dh; c += wg) q[c] = Q[q_at + c];
  barrier(CLK_LOCAL_MEM_FENCE);
  STEP_KV_BASES;
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
    __global const float *kj = step_key(kb, hr, row, j, dh);
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
    for (int r = lid; r < R; r += wg) bucket[r] = step_bucket(p, r, rlo, k, pos, n);
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
  __global const float *wv = wV + wv_off + t_at + (size_t)rlo * dh;
  const size_t z_at = z_off + step_at(sr, g, nq, z_bs, z_hs, z_is);
  for (int c = lid; c < dh; c += wg)
    Z[z_at + c] = step_column(p, vb, hr, row, n, dh, bucket, wv, R, flags, c) * inv;
#endif
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
  for (int v = 0; v < V;) {
    /* once kk are held, eight ids at a time where none is above the least held (NaN never
     * is): those the loop below would pass over one by one. Xeon (session 33),
     * relcl-translate on the demo's model (beam 4): 84 -> 52 ms for 411 calls, the run
     * 1.46-1.50 s -> 1.42-1.47 (four pairs), the same translations */
    if (n == kk && v + 8 <= V && !any(vload8(0, row + v) > (float8)(tv[kk - 1]))) {
      v += 8;
      continue;
    }
    for (const int end = min(v + 8, V); v < end; v++) {
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
  }
  for (int j = 0; j < kk; j++) {
    val[v_off + (size_t)r * kk + j] = j < n ? tv[j] : 0.0f;
    id[i_off + (size_t)r * kk + j] = j < n ? ti[j] : -1;
  }
  z0[z0_off + r] = row[0];
}
