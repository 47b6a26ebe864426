/* ref.c: the oracle. Every formula is written the way relcl.h states it, one query row and one
 * key at a time, with a^K_ij and a^V_ij built as explicit vectors; nothing is factored into
 * GEMMs, so a factoring mistake in the fast code cannot be copied here. Shapes: see ref.h.
 */
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Philox4x32-10 ------------------------------------------------------------------ */

/* Constants of Random123's philox.h: round multipliers and the Weyl key increments. */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static uint32_t mulhi32(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * b) >> 32); }

void ref_philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1, uint32_t out[4]) {
  uint32_t x[4] = {c[0], c[1], c[2], c[3]};
  for (int round = 0; round < 10; round++) {
    if (round > 0) { /* the key is bumped between rounds, never before the first */
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    uint32_t hi0 = mulhi32(PHILOX_M0, x[0]), lo0 = PHILOX_M0 * x[0];
    uint32_t hi1 = mulhi32(PHILOX_M1, x[2]), lo1 = PHILOX_M1 * x[2];
    uint32_t y[4] = {hi1 ^ x[1] ^ k0, lo1, hi0 ^ x[3] ^ k1, lo0};
    memcpy(x, y, sizeof x);
  }
  memcpy(out, x, sizeof x);
}

int ref_dropout_keep(uint64_t seed, uint64_t stream, uint64_t q, int word, float p) {
  uint32_t c[4] = {(uint32_t)q, (uint32_t)(q >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
  uint32_t out[4];
  ref_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32), out);
  /* p < 1, so the product is below 2^32 and the conversion is defined; p == 0 gives 0. */
  uint32_t threshold = (uint32_t)((double)p * 4294967296.0);
  return out[word] >= threshold;
}

int ref_attn_keep(uint64_t seed, uint64_t stream, uint64_t row, int nk, int j, float p) {
  uint64_t calls_per_row = ((uint64_t)nk + 3) / 4;
  return ref_dropout_keep(seed, stream, row * calls_per_row + (uint64_t)j / 4, j % 4, p);
}

/* ---- helpers ------------------------------------------------------------------------ */

void *ref_xcalloc(size_t n, size_t size) {
  /* A reference that cannot allocate a few KB has nothing useful to say: stop loudly. */
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    fprintf(stderr, "ref: out of memory\n");
    abort();
  }
  return p;
}

static double dot(const double *a, const double *b, int d) {
  double s = 0.0;
  for (int c = 0; c < d; c++) s += a[c] * b[c];
  return s;
}

static int clampi(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Number of rows of one relative table, and its first row for head h. */
static int table_rows(const relcl_attn_desc *desc) { return 2 * desc->max_rel + 1; }
static size_t table_row0(const relcl_attn_desc *desc, int h) {
  return desc->per_head ? (size_t)h * (size_t)table_rows(desc) : 0;
}

/* r(i,j) = clamp(pk(j) - pq(i), -k, k) + k with pq(i) = q_pos0 + i and pk(j) = j. */
static int rel_index(const relcl_attn_desc *desc, int i, int j) {
  int k = desc->max_rel;
  return clampi(j - (desc->q_pos0 + i), -k, k) + k;
}

/* Whether query i of sequence b may look at key j. */
static int allowed(const relcl_attn_desc *desc, const int *key_len, int b, int i, int j) {
  int len = key_len ? key_len[b] : desc->nk;
  if (j >= len) return 0;
  if (desc->causal && j > desc->q_pos0 + i) return 0;
  return 1;
}

static int uses_aV(const relcl_attn_desc *desc) { return desc->relative && !desc->keys_only; }

/* The constant factor dropout puts on alpha_bhij: keep/(1-p), or 1 without dropout. The mask
 * does not depend on any input, so the backward treats it as a constant. */
static double dropout_factor(const relcl_attn_desc *desc, int b, int h, int i, int j) {
  if (!(desc->dropout > 0.0f)) return 1.0;
  uint64_t row =
      ((uint64_t)b * (uint64_t)desc->heads + (uint64_t)h) * (uint64_t)desc->nq + (uint64_t)i;
  int keep = ref_attn_keep(desc->seed, desc->stream, row, desc->nk, j, desc->dropout);
  return keep ? 1.0 / (1.0 - (double)desc->dropout) : 0.0;
}

/* Everything one query row (b,h,i) needs, nk entries each, plus two d-vectors of scratch. */
typedef struct row {
  int *ok;        /* key j allowed */
  int *r;         /* relative label r(i,j) */
  double *alpha;  /* softmax weight, 0 where not allowed */
  double *factor; /* dropout factor keep/(1-p), or 1 */
  double *aK, *aV;
} row;

static row row_alloc(const relcl_attn_desc *desc) {
  row w;
  w.ok = ref_xcalloc((size_t)desc->nk, sizeof *w.ok);
  w.r = ref_xcalloc((size_t)desc->nk, sizeof *w.r);
  w.alpha = ref_xcalloc((size_t)desc->nk, sizeof *w.alpha);
  w.factor = ref_xcalloc((size_t)desc->nk, sizeof *w.factor);
  w.aK = ref_xcalloc((size_t)desc->head_dim, sizeof *w.aK);
  w.aV = ref_xcalloc((size_t)desc->head_dim, sizeof *w.aV);
  return w;
}

static void row_free(row *w) {
  free(w->ok);
  free(w->r);
  free(w->alpha);
  free(w->factor);
  free(w->aK);
  free(w->aV);
}

/* a^K_ij (or a^V_ij): copy row r of head h's table into out, or zeros when the table is off. */
static void build_a(const relcl_attn_desc *desc, const double *w, int h, int r, double *out) {
  int d = desc->head_dim;
  if (!w) {
    memset(out, 0, (size_t)d * sizeof *out);
    return;
  }
  memcpy(out, w + (table_row0(desc, h) + (size_t)r) * (size_t)d, (size_t)d * sizeof *out);
}

/* Forward of one row up to the weights: logits e_ij, mask, softmax, dropout factors.
 * q is (d); K is the (nk, d) block of this (b,h). */
static void row_softmax(const relcl_attn_desc *desc, const double *q, const double *Kbh,
                        const double *wK, const int *key_len, int b, int h, int i, row *w) {
  int d = desc->head_dim, nk = desc->nk;
  double scale = 1.0 / sqrt((double)d);
  double emax = -INFINITY;
  int any = 0;
  for (int j = 0; j < nk; j++) {
    w->ok[j] = allowed(desc, key_len, b, i, j);
    w->r[j] = rel_index(desc, i, j);
    w->factor[j] = dropout_factor(desc, b, h, i, j);
    w->alpha[j] = -INFINITY; /* holds e_ij until normalised */
    if (!w->ok[j]) continue;
    double e = dot(q, Kbh + (size_t)j * (size_t)d, d);
    if (desc->relative) {
      build_a(desc, wK, h, w->r[j], w->aK);
      e += dot(q, w->aK, d);
    }
    e *= scale;
    w->alpha[j] = e;
    if (e > emax) emax = e;
    any = 1;
  }
  /* Subtracting the row max changes nothing mathematically and keeps exp() finite. */
  double sum = 0.0;
  for (int j = 0; j < nk; j++) {
    w->alpha[j] = (any && w->ok[j]) ? exp(w->alpha[j] - emax) : 0.0;
    sum += w->alpha[j];
  }
  for (int j = 0; j < nk; j++)
    if (any) w->alpha[j] /= sum; /* a fully masked row stays all 0 */
}

/* ---- attention on double inputs ----------------------------------------------------- */

void ref_attn_forward_d(const relcl_attn_desc *desc, const double *Q, const double *K,
                        const double *V, const double *wK, const double *wV,
                        const int *key_len, double *Z, double *probs) {
  int B = desc->batch, H = desc->heads, nq = desc->nq, nk = desc->nk, d = desc->head_dim;
  const double *wVu = uses_aV(desc) ? wV : NULL;
  row w = row_alloc(desc);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      size_t bh = (size_t)b * (size_t)H + (size_t)h;
      const double *Kbh = K + bh * (size_t)nk * (size_t)d;
      const double *Vbh = V + bh * (size_t)nk * (size_t)d;
      for (int i = 0; i < nq; i++) {
        size_t qi = bh * (size_t)nq + (size_t)i;
        const double *q = Q + qi * (size_t)d;
        double *z = Z + qi * (size_t)d;
        row_softmax(desc, q, Kbh, wK, key_len, b, h, i, &w);
        if (probs)
          for (int j = 0; j < nk; j++) probs[qi * (size_t)nk + (size_t)j] = w.alpha[j];
        /* z_i = sum_j alpha'_ij (v_j + a^V_ij) */
        for (int c = 0; c < d; c++) z[c] = 0.0;
        for (int j = 0; j < nk; j++) {
          if (!w.ok[j]) continue;
          double a = w.alpha[j] * w.factor[j];
          const double *v = Vbh + (size_t)j * (size_t)d;
          build_a(desc, wVu, h, w.r[j], w.aV);
          for (int c = 0; c < d; c++) z[c] += a * (v[c] + w.aV[c]);
        }
      }
    }
  row_free(&w);
}

/* Chain rule, per (b,h,i), for the forward above:
 *   z_i = sum_j alpha'_ij (v_j + a^V_ij),   alpha'_ij = f_ij alpha_ij   (f: dropout factor)
 *     => dalpha'_ij = dz_i . (v_j + a^V_ij),  dv_j += alpha'_ij dz_i,  dwV[r] += alpha'_ij dz_i
 *        dalpha_ij  = f_ij dalpha'_ij
 *   alpha_il = exp(e_il) / sum_m exp(e_im) over allowed keys
 *     => d alpha_il / d e_ij = alpha_il (delta_lj - alpha_ij),
 *        de_ij = sum_l dalpha_il alpha_il (delta_lj - alpha_ij)
 *   e_ij = q_i . (k_j + a^K_ij) / sqrt(d)
 *     => dq_i += de_ij (k_j + a^K_ij)/sqrt(d),  dk_j += de_ij q_i/sqrt(d),
 *        dwK[r] += de_ij q_i/sqrt(d)
 * Keys that are not allowed have alpha = 0 and no e: they contribute nothing. */
void ref_attn_backward_d(const relcl_attn_desc *desc, const double *Q, const double *K,
                         const double *V, const double *wK, const double *wV,
                         const int *key_len, const double *dZ, double *dQ, double *dK,
                         double *dV, double *dwK, double *dwV) {
  int B = desc->batch, H = desc->heads, nq = desc->nq, nk = desc->nk, d = desc->head_dim;
  double scale = 1.0 / sqrt((double)d);
  size_t nQ = (size_t)B * (size_t)H * (size_t)nq * (size_t)d;
  size_t nKV = (size_t)B * (size_t)H * (size_t)nk * (size_t)d;
  size_t nW = (size_t)(desc->per_head ? H : 1) * (size_t)table_rows(desc) * (size_t)d;
  const double *wVu = uses_aV(desc) ? wV : NULL;
  /* Gradients of unused tables are written as zeros, so a caller may still pass them. */
  double *dwKu = desc->relative ? dwK : NULL;
  double *dwVu = uses_aV(desc) ? dwV : NULL;

  memset(dQ, 0, nQ * sizeof *dQ);
  memset(dK, 0, nKV * sizeof *dK);
  memset(dV, 0, nKV * sizeof *dV);
  if (dwK) memset(dwK, 0, nW * sizeof *dwK);
  if (dwV) memset(dwV, 0, nW * sizeof *dwV);

  row w = row_alloc(desc);
  double *dalpha = ref_xcalloc((size_t)nk, sizeof *dalpha);
  double *de = ref_xcalloc((size_t)nk, sizeof *de);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      size_t bh = (size_t)b * (size_t)H + (size_t)h;
      size_t kv0 = bh * (size_t)nk * (size_t)d;
      for (int i = 0; i < nq; i++) {
        size_t qi = bh * (size_t)nq + (size_t)i;
        const double *q = Q + qi * (size_t)d;
        const double *dz = dZ + qi * (size_t)d;
        double *dq = dQ + qi * (size_t)d;
        row_softmax(desc, q, K + kv0, wK, key_len, b, h, i, &w);

        /* Through z_i = sum_j alpha'_ij (v_j + a^V_ij). */
        for (int j = 0; j < nk; j++) {
          dalpha[j] = 0.0;
          if (!w.ok[j]) continue;
          const double *v = V + kv0 + (size_t)j * (size_t)d;
          double *dv = dV + kv0 + (size_t)j * (size_t)d;
          double a = w.alpha[j] * w.factor[j];
          build_a(desc, wVu, h, w.r[j], w.aV);
          double dap = 0.0;
          for (int c = 0; c < d; c++) {
            dap += dz[c] * (v[c] + w.aV[c]);
            dv[c] += a * dz[c];
          }
          if (dwVu) {
            double *dwv = dwVu + (table_row0(desc, h) + (size_t)w.r[j]) * (size_t)d;
            for (int c = 0; c < d; c++) dwv[c] += a * dz[c];
          }
          dalpha[j] = w.factor[j] * dap;
        }

        /* Through the softmax, with its full Jacobian over the allowed keys. */
        for (int j = 0; j < nk; j++) {
          de[j] = 0.0;
          if (!w.ok[j]) continue;
          for (int l = 0; l < nk; l++) {
            if (!w.ok[l]) continue;
            double jac = w.alpha[l] * ((l == j ? 1.0 : 0.0) - w.alpha[j]);
            de[j] += dalpha[l] * jac;
          }
        }

        /* Through e_ij = q_i . (k_j + a^K_ij) / sqrt(d). */
        for (int j = 0; j < nk; j++) {
          if (!w.ok[j]) continue;
          const double *kj = K + kv0 + (size_t)j * (size_t)d;
          double *dk = dK + kv0 + (size_t)j * (size_t)d;
          double g = de[j] * scale;
          build_a(desc, desc->relative ? wK : NULL, h, w.r[j], w.aK);
          for (int c = 0; c < d; c++) {
            dq[c] += g * (kj[c] + w.aK[c]);
            dk[c] += g * q[c];
          }
          if (dwKu) {
            double *dwk = dwKu + (table_row0(desc, h) + (size_t)w.r[j]) * (size_t)d;
            for (int c = 0; c < d; c++) dwk[c] += g * q[c];
          }
        }
      }
    }
  free(dalpha);
  free(de);
  row_free(&w);
}

/* ---- float entry points: convert, then use the double code -------------------------- */

static double *to_double(const float *x, size_t n) {
  if (!x) return NULL;
  double *y = ref_xcalloc(n, sizeof *y);
  for (size_t t = 0; t < n; t++) y[t] = (double)x[t];
  return y;
}

typedef struct inputs_d {
  double *Q, *K, *V, *wK, *wV;
} inputs_d;

static inputs_d inputs_to_double(const relcl_attn_desc *desc, const float *Q, const float *K,
                                 const float *V, const float *wK, const float *wV) {
  size_t nQ = (size_t)desc->batch * (size_t)desc->heads * (size_t)desc->nq *
              (size_t)desc->head_dim;
  size_t nKV = (size_t)desc->batch * (size_t)desc->heads * (size_t)desc->nk *
               (size_t)desc->head_dim;
  size_t nW = (size_t)(desc->per_head ? desc->heads : 1) * (size_t)table_rows(desc) *
              (size_t)desc->head_dim;
  inputs_d in;
  in.Q = to_double(Q, nQ);
  in.K = to_double(K, nKV);
  in.V = to_double(V, nKV);
  /* Tables the options switch off are never read, so they may be NULL. */
  in.wK = desc->relative ? to_double(wK, nW) : NULL;
  in.wV = uses_aV(desc) ? to_double(wV, nW) : NULL;
  return in;
}

static void inputs_free(inputs_d *in) {
  free(in->Q);
  free(in->K);
  free(in->V);
  free(in->wK);
  free(in->wV);
}

void ref_attn_forward(const relcl_attn_desc *desc, const float *Q, const float *K,
                      const float *V, const float *wK, const float *wV, const int *key_len,
                      double *Z, double *probs) {
  inputs_d in = inputs_to_double(desc, Q, K, V, wK, wV);
  ref_attn_forward_d(desc, in.Q, in.K, in.V, in.wK, in.wV, key_len, Z, probs);
  inputs_free(&in);
}

void ref_attn_backward(const relcl_attn_desc *desc, const float *Q, const float *K,
                       const float *V, const float *wK, const float *wV, const int *key_len,
                       const double *dZ, double *dQ, double *dK, double *dV, double *dwK,
                       double *dwV) {
  inputs_d in = inputs_to_double(desc, Q, K, V, wK, wV);
  ref_attn_backward_d(desc, in.Q, in.K, in.V, in.wK, in.wV, key_len, dZ, dQ, dK, dV, dwK,
                      dwV);
  inputs_free(&in);
}

/* ---- sinusoidal positions (the absolute baseline) ----------------------------------- */

void ref_posenc_add(double *x, int B, int n, int dm, int pos0) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < n; t++) {
      double p = (double)(pos0 + t);
      double *xt = x + ((size_t)b * (size_t)n + (size_t)t) * (size_t)dm;
      for (int c = 0; c < dm; c++) {
        int two_i = c - c % 2; /* columns 2i and 2i+1 share one frequency */
        double angle = p / pow(10000.0, (double)two_i / (double)dm);
        xt[c] += (c % 2 == 0) ? sin(angle) : cos(angle);
      }
    }
}
