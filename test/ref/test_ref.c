/* test_ref.c: checks the oracle before anything is checked against it. Gradients against
 * central finite differences of the reference's own forward; the forward against hand-worked
 * numbers, against plain attention written separately here, and against masks and dropout
 * recomputed here from relcl.h's definitions; Philox against Random123's known answers.
 * Prints one line per check and "N passed, M failed"; exits nonzero on any failure.
 *
 * Build: cc -std=c11 -O2 -Wall -Wextra -Werror -I include test/ref/ref.c test/ref/test_ref.c
 *        -lm -o /tmp/test_ref && /tmp/test_ref
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

static int n_pass, n_fail;

static void check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s  ", ok ? "PASS" : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (ok) n_pass++;
  else n_fail++;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    fprintf(stderr, "test_ref: out of memory\n");
    exit(2);
  }
  return p;
}

/* xorshift64*: deterministic inputs, so a failure reproduces. */
static double uniform(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  uint64_t x = *s * 0x2545F4914F6CDD1Dull;
  return (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
}

static double maxd(double a, double b) { return a > b ? a : b; }

/* ---- Philox and the dropout mask ---------------------------------------------------- */

static void test_philox(void) {
  /* Random123 tests/kat_vectors, "philox4x32 10" lines: counter, key, expected output. */
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int t = 0; t < 3; t++) {
    uint32_t c[4] = {kat[t][0], kat[t][1], kat[t][2], kat[t][3]}, out[4];
    ref_philox4x32_10(c, kat[t][4], kat[t][5], out);
    int ok = memcmp(out, &kat[t][6], sizeof out) == 0;
    check(ok, "philox4x32_10 KAT %d: %08x %08x %08x %08x", t, out[0], out[1], out[2], out[3]);
  }

  /* ref_dropout_keep must be exactly the stated word and layout: each word against a p
   * whose threshold is that word (kept) and one just above it (dropped). */
  uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
  uint64_t q = 0x00000005deadbeefull;
  uint32_t c[4] = {0xdeadbeef, 0x5, 0x76543210, 0xfedcba98}, out[4];
  ref_philox4x32_10(c, 0x89abcdef, 0x01234567, out);
  int layout = 1;
  for (int w = 0; w < 4; w++) {
    double at = (double)out[w] / 4294967296.0, above = ((double)out[w] + 512.0) / 4294967296.0;
    float p_at = (float)at, p_above = (float)above;
    uint32_t t_at = (uint32_t)((double)p_at * 4294967296.0);
    uint32_t t_above = (uint32_t)((double)p_above * 4294967296.0);
    if (p_above >= 1.0f) continue; /* a word near 2^32: no p above it */
    layout &= ref_dropout_keep(seed, stream, q, w, p_at) == (out[w] >= t_at);
    layout &= ref_dropout_keep(seed, stream, q, w, p_above) == (out[w] >= t_above);
    layout &= ref_dropout_keep(seed, stream, q, w, 0.0f) == 1;
  }
  check(layout, "dropout_keep uses key (seed lo,hi), counter (q lo,hi, stream lo,hi), word w");

  /* The attention mask's layout: a row of nk keys starts a call; key j is word j mod 4 of
   * call row * ceil(nk/4) + floor(j/4). */
  int rows_ok = 1;
  const float ph = 0.5f;
  for (int nk = 1; nk <= 9; nk++)
    for (uint64_t row = 0; row < 3; row++)
      for (int j = 0; j < nk; j++)
        rows_ok &= ref_attn_keep(seed, stream, row, nk, j, ph) ==
                   ref_dropout_keep(seed, stream, row * (uint64_t)((nk + 3) / 4) + (uint64_t)(j / 4),
                                    j % 4, ph);
  check(rows_ok, "attention key (row, j) is word j mod 4 of call row * ceil(nk/4) + j/4");

  int all = 1;
  for (uint64_t i = 0; i < 4096; i++) all &= ref_dropout_keep(7, 3, i / 4, (int)(i % 4), 0.0f);
  check(all, "dropout p=0 keeps all of 4096 weights");

  /* Fraction kept at p=0.3 over 2^20 weights: its standard deviation is
   * sqrt(0.3*0.7/2^20) = 4.5e-4, so +-3e-3 is over 6 sigma for a correct generator while a
   * wrong comparison (> vs <) or threshold scale lands near 0.3 or 0/1. */
  long kept = 0, n = 1L << 20;
  for (long i = 0; i < n; i++) kept += ref_dropout_keep(42, 1, (uint64_t)i / 4, (int)(i % 4), 0.3f);
  double frac = (double)kept / (double)n;
  check(fabs(frac - 0.7) < 3e-3, "dropout p=0.3 keeps %.4f of 2^20 weights (want 0.7 +- 3e-3)",
        frac);

  int diff_seed = 0, diff_stream = 0;
  for (uint64_t i = 0; i < 256; i++) {
    diff_seed |= ref_dropout_keep(1, 0, i, 0, 0.5f) != ref_dropout_keep(2, 0, i, 0, 0.5f);
    diff_stream |= ref_dropout_keep(1, 0, i, 0, 0.5f) != ref_dropout_keep(1, 1, i, 0, 0.5f);
  }
  check(diff_seed && diff_stream, "dropout mask changes with seed and with stream");
}

/* ---- sinusoidal encoding ------------------------------------------------------------ */

static void test_posenc(void) {
  /* B=2, n=2, dm=5, pos0=1, x starts at 0.5 (so "+=" is tested). Frequencies by hand:
   * columns 0,1 use 10000^(0/5) = 1, columns 2,3 use 10000^(2/5), column 4 10000^(4/5). */
  enum { B = 2, N = 2, DM = 5 };
  double x[B * N * DM];
  for (int t = 0; t < B * N * DM; t++) x[t] = 0.5;
  ref_posenc_add(x, B, N, DM, 1);
  double f1 = pow(10000.0, 0.4), f2 = pow(10000.0, 0.8);
  double err = 0.0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < N; t++) {
      double p = 1.0 + t;
      double want[DM] = {sin(p), cos(p), sin(p / f1), cos(p / f1), sin(p / f2)};
      for (int c = 0; c < DM; c++)
        err = maxd(err, fabs(x[(b * N + t) * DM + c] - (0.5 + want[c])));
    }
  double y[4] = {0, 0, 0, 0};
  ref_posenc_add(y, 1, 1, 4, 0);
  err = maxd(err, fabs(y[0]) + fabs(y[1] - 1) + fabs(y[2]) + fabs(y[3] - 1));
  /* Same libm calls on the same doubles: only rounding of p/f can differ. */
  check(err < 1e-14, "posenc_add: hand values at dm=5 (odd), pos0=1, and PE(0)=[0,1,0,1]: err %.1e",
        err);
}

/* ---- hand-worked forward ------------------------------------------------------------ */

/* One query (d=1, q=1) over 4 keys with k=1, K=0, V=(5,0,0,0). Then e_j = wK[r(j)] and
 * z = sum_j alpha_j (v_j + wV[r(j)]). With wK = (0, ln2, ln4) the weights are 1:2:4 by label,
 * so every expected value below is a small fraction worked out by hand. */
static void hand(const char *name, relcl_attn_desc desc, const int *key_len,
                 const double *want) {
  const float ln2 = (float)log(2.0), ln4 = (float)log(4.0);
  float Q[2] = {1, 1}, K[8] = {0}, V[8] = {5, 0, 0, 0, 5, 0, 0, 0};
  /* head 0: labels weigh 1:2:4; head 1 (per_head only): reversed, 4:2:1 */
  float wK[6] = {0, ln2, ln4, ln4, ln2, 0};
  float wV[6] = {1, 10, 100, 2, 20, 200};
  double Z[2] = {-1, -1};
  ref_attn_forward(&desc, Q, K, V, wK, desc.keys_only ? NULL : wV, key_len, Z, NULL);
  double err = 0.0;
  for (int h = 0; h < desc.heads; h++)
    err = maxd(err, fabs(Z[h] - want[h]) / maxd(1, fabs(want[h])));
  /* ln2, ln4 are rounded to float (at most 6e-8 relative), which moves z by less than 1e-7
   * relative; a wrong label, mask or head moves it by 1e-1 or more. */
  char got[96];
  if (desc.heads > 1)
    snprintf(got, sizeof got, "z = %.6f, %.6f (want %.6f, %.6f)", Z[0], Z[1], want[0], want[1]);
  else
    snprintf(got, sizeof got, "z = %.6f (want %.6f)", Z[0], want[0]);
  check(err < 1e-6, "hand forward, %s: %s, rel err %.1e", name, got, err);
}

static void test_hand(void) {
  relcl_attn_desc d = {0};
  d.batch = 1, d.heads = 1, d.nq = 1, d.nk = 4, d.head_dim = 1;
  d.relative = 1, d.max_rel = 1, d.q_pos0 = 1;
  /* q_pos0=1: r(j) = clamp(j-1,-1,1)+1 = 0,1,2,2 (j=3 clipped): weights 1,2,4,4 over 11. */
  double w1[1] = {(5 + 1 + 20 + 400 + 400) / 11.0};
  hand("q_pos0=1 k=1, j=3 clipped", d, NULL, w1);

  relcl_attn_desc c = d;
  c.causal = 1; /* keys 2,3 lie after position 1: weights 1,2 over 3 */
  double w2[1] = {(5 + 1 + 20) / 3.0};
  hand("causal at q_pos0=1", c, NULL, w2);

  int len1[1] = {1}, len0[1] = {0};
  double w3[1] = {5 + 1};
  hand("key_len=1", d, len1, w3);
  double w4[1] = {0};
  hand("key_len=0 (empty row)", d, len0, w4);

  relcl_attn_desc p3 = d;
  p3.q_pos0 = 3; /* r = 0,0,0,1: weights 1,1,1,2 over 5 */
  double w5[1] = {(5 + 1 + 1 + 1 + 20) / 5.0};
  hand("q_pos0=3, left labels clipped", p3, NULL, w5);

  relcl_attn_desc ko = d;
  ko.keys_only = 1;
  double w6[1] = {5 / 11.0};
  hand("keys_only, wV=NULL", ko, NULL, w6);

  relcl_attn_desc ph = d;
  ph.heads = 2, ph.per_head = 1; /* head 1 weighs labels 4,2,1,1 over 8, wV (2,20,200) */
  double w7[2] = {(5 + 1 + 20 + 400 + 400) / 11.0, (5 * 4 + 2 * 4 + 20 * 2 + 200 + 200) / 8.0};
  hand("per_head (2 heads)", ph, NULL, w7);
}

/* ---- the case table ----------------------------------------------------------------- */

typedef struct fd_case {
  const char *name;
  relcl_attn_desc desc;
  int key_len[4]; /* used when has_key_len */
  int has_key_len;
} fd_case;

#define DESC(B, H, NQ, NK, D, REL, K, PH, KO, CAUSAL, QPOS0, P)                               \
  {.batch = B, .heads = H, .nq = NQ, .nk = NK, .head_dim = D, .relative = REL, .max_rel = K,  \
   .per_head = PH, .keys_only = KO, .causal = CAUSAL, .q_pos0 = QPOS0, .dropout = P,          \
   .seed = 0x5eed5eedull, .stream = 3}

static const fd_case cases[] = {
    /*            B  H nq nk d rel k ph ko causal q0 p */
    {"self full shared k=2", DESC(2, 2, 5, 5, 3, 1, 2, 0, 0, 0, 0, 0.0f), {0}, 0},
    {"self causal shared k=2", DESC(2, 2, 5, 5, 3, 1, 2, 0, 0, 1, 0, 0.0f), {0}, 0},
    {"self causal per_head k=1", DESC(2, 2, 4, 4, 4, 1, 1, 1, 0, 1, 0, 0.0f), {0}, 0},
    {"keys_only per_head k=3", DESC(1, 2, 5, 5, 3, 1, 3, 1, 1, 0, 0, 0.0f), {0}, 0},
    {"keys_only causal shared k=1", DESC(2, 1, 4, 4, 2, 1, 1, 0, 1, 1, 0, 0.0f), {0}, 0},
    {"k=0 shared", DESC(2, 2, 4, 4, 3, 1, 0, 0, 0, 0, 0, 0.0f), {0}, 0},
    {"k=0 per_head causal", DESC(1, 2, 4, 4, 3, 1, 0, 1, 0, 1, 0, 0.0f), {0}, 0},
    {"k=7 > n=4 shared", DESC(1, 2, 4, 4, 3, 1, 7, 0, 0, 0, 0, 0.0f), {0}, 0},
    {"k=6 > n=5 per_head causal", DESC(1, 1, 5, 5, 2, 1, 6, 1, 0, 1, 0, 0.0f), {0}, 0},
    {"key_len {4,0,2} (zero-length row)", DESC(3, 2, 4, 4, 3, 1, 2, 0, 0, 0, 0, 0.0f),
     {4, 0, 2}, 1},
    {"key_len {3,1} causal per_head", DESC(2, 2, 4, 4, 3, 1, 1, 1, 0, 1, 0, 0.0f), {3, 1}, 1},
    {"cross nq=3 nk=6 q_pos0=2 causal k=2", DESC(2, 2, 3, 6, 3, 1, 2, 0, 0, 1, 2, 0.0f), {0},
     0},
    {"cross nq=2 nk=5 q_pos0=4 per_head k=1", DESC(1, 2, 2, 5, 3, 1, 1, 1, 0, 0, 4, 0.0f),
     {0}, 0},
    {"dropout 0.3 causal shared k=2", DESC(2, 2, 5, 5, 3, 1, 2, 0, 0, 1, 0, 0.3f), {0}, 0},
    {"dropout 0.3 per_head key_len {5,3} q_pos0=1",
     DESC(2, 2, 3, 5, 3, 1, 2, 1, 0, 0, 1, 0.3f), {5, 3}, 1},
    {"relative off, causal", DESC(2, 2, 4, 4, 3, 0, 2, 0, 0, 1, 0, 0.0f), {0}, 0},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct tensors {
  size_t nQ, nKV, nW, nP;
  double *Q, *K, *V, *wK, *wV, *dZ;
} tensors;

static int uses_aV(const relcl_attn_desc *d) { return d->relative && !d->keys_only; }

/* Random inputs, rounded to float so the float entry points see exactly the same numbers. */
static tensors tensors_make(const relcl_attn_desc *d, uint64_t seed) {
  tensors t;
  t.nQ = (size_t)d->batch * d->heads * d->nq * d->head_dim;
  t.nKV = (size_t)d->batch * d->heads * d->nk * d->head_dim;
  t.nW = (size_t)(d->per_head ? d->heads : 1) * (2 * d->max_rel + 1) * d->head_dim;
  t.nP = (size_t)d->batch * d->heads * d->nq * d->nk;
  double **arr[6] = {&t.Q, &t.K, &t.V, &t.wK, &t.wV, &t.dZ};
  size_t len[6] = {t.nQ, t.nKV, t.nKV, t.nW, t.nW, t.nQ};
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int a = 0; a < 6; a++) {
    *arr[a] = xcalloc(len[a], sizeof(double));
    for (size_t e = 0; e < len[a]; e++) (*arr[a])[e] = (double)(float)uniform(&s);
  }
  return t;
}

static void tensors_free(tensors *t) {
  free(t->Q), free(t->K), free(t->V), free(t->wK), free(t->wV), free(t->dZ);
}

/* Tables the options switch off are passed as NULL, as a caller would. */
static const double *wK_of(const relcl_attn_desc *d, const tensors *t) {
  return d->relative ? t->wK : NULL;
}
static const double *wV_of(const relcl_attn_desc *d, const tensors *t) {
  return uses_aV(d) ? t->wV : NULL;
}

/* Query i of sequence b may see key j: relcl.h's rule, restated here independently. */
static int may_see(const fd_case *c, int b, int i, int j) {
  int len = c->has_key_len ? c->key_len[b] : c->desc.nk;
  return j < len && !(c->desc.causal && j > c->desc.q_pos0 + i);
}

/* ---- gradients against central finite differences ----------------------------------- */

/* L = sum dZ . Z, so dL/dZ = dZ and the analytic gradients are those of ref_attn_backward_d. */
static double loss(const relcl_attn_desc *d, const tensors *t, const int *key_len, double *Z) {
  ref_attn_forward_d(d, t->Q, t->K, t->V, wK_of(d, t), wV_of(d, t), key_len, Z, NULL);
  double L = 0.0;
  for (size_t e = 0; e < t->nQ; e++) L += t->dZ[e] * Z[e];
  return L;
}

/* Tolerance: inputs and gradients are O(1) and L sums ~100 O(1) terms, so L carries a rounding
 * error of ~1e-14; divided by 2h = 2e-6 that is ~1e-8. The truncation error of a central
 * difference is h^2/6 |L'''| ~ 1e-13. So a correct gradient agrees to ~1e-8; 1e-6 (relative to
 * max(1, |grad|)) leaves a 100x margin, while a wrong sign, a missing term or a misplaced
 * index errs by 1e-2 or more. */
#define FD_H 1e-6
#define FD_TOL 1e-6

static void fd_check(const fd_case *c, const char *what, tensors *t, const int *key_len,
                     double *x, size_t n, const double *grad, int expect_zero) {
  const relcl_attn_desc *d = &c->desc;
  double *Z = xcalloc(t->nQ, sizeof *Z);
  double err = 0.0, gmax = 0.0;
  for (size_t e = 0; e < n; e++) {
    double save = x[e];
    x[e] = save + FD_H;
    double lp = loss(d, t, key_len, Z);
    x[e] = save - FD_H;
    double lm = loss(d, t, key_len, Z);
    x[e] = save;
    double fd = (lp - lm) / (2.0 * FD_H);
    err = maxd(err, fabs(fd - grad[e]) / maxd(1.0, fabs(grad[e])));
    gmax = maxd(gmax, fabs(grad[e]));
  }
  free(Z);
  /* A gradient that is zero everywhere would pass FD trivially: demand a real signal, except
   * where zero is the right answer (dwK at k=0, see test_fd). */
  int signal = expect_zero ? gmax < 1e-12 : gmax > 1e-3;
  check(err <= FD_TOL && signal, "fd %-3s %-44s rel err %.1e (tol %.0e), max|g| %.2e%s", what,
        c->name, err, FD_TOL, gmax, expect_zero ? " (want 0)" : "");
}

static void test_fd(const fd_case *c, int index) {
  const relcl_attn_desc *d = &c->desc;
  const int *key_len = c->has_key_len ? c->key_len : NULL;
  tensors t = tensors_make(d, 100 + (uint64_t)index);
  double *dQ = xcalloc(t.nQ, sizeof *dQ), *dK = xcalloc(t.nKV, sizeof *dK);
  double *dV = xcalloc(t.nKV, sizeof *dV);
  double *dwK = xcalloc(t.nW, sizeof *dwK), *dwV = xcalloc(t.nW, sizeof *dwV);
  ref_attn_backward_d(d, t.Q, t.K, t.V, wK_of(d, &t), wV_of(d, &t), key_len, t.dZ, dQ, dK, dV,
                      d->relative ? dwK : NULL, uses_aV(d) ? dwV : NULL);
  fd_check(c, "dQ", &t, key_len, t.Q, t.nQ, dQ, 0);
  fd_check(c, "dK", &t, key_len, t.K, t.nKV, dK, 0);
  fd_check(c, "dV", &t, key_len, t.V, t.nKV, dV, 0);
  /* At k=0 every pair has label 0, so q_i . wK[0] shifts a whole softmax row by one constant:
   * alpha does not depend on wK and dwK must vanish. */
  if (d->relative) fd_check(c, "dwK", &t, key_len, t.wK, t.nW, dwK, d->max_rel == 0);
  if (uses_aV(d)) fd_check(c, "dwV", &t, key_len, t.wV, t.nW, dwV, 0);
  free(dQ), free(dK), free(dV), free(dwK), free(dwV);
  tensors_free(&t);
}

/* ---- the forward against facts recomputed here -------------------------------------- */

/* Masks and softmax: allowed rows sum to 1, masked weights are exactly 0, and a row with no
 * allowed key has z = 0. 1e-12: a sum of <= 6 doubles that each carry ~1e-16. */
static void test_softmax_rows(const fd_case *c, int index) {
  const relcl_attn_desc *d = &c->desc;
  tensors t = tensors_make(d, 200 + (uint64_t)index);
  double *Z = xcalloc(t.nQ, sizeof *Z), *P = xcalloc(t.nP, sizeof *P);
  ref_attn_forward_d(d, t.Q, t.K, t.V, wK_of(d, &t), wV_of(d, &t),
                     c->has_key_len ? c->key_len : NULL, Z, P);
  double err = 0.0;
  int bad_mask = 0, rows = 0, empty = 0;
  for (int b = 0; b < d->batch; b++)
    for (int h = 0; h < d->heads; h++)
      for (int i = 0; i < d->nq; i++) {
        size_t qi = ((size_t)b * d->heads + h) * d->nq + i;
        double sum = 0.0;
        int any = 0;
        for (int j = 0; j < d->nk; j++) {
          double a = P[qi * d->nk + j];
          if (may_see(c, b, i, j)) any = 1, bad_mask |= !(a > 0.0);
          else bad_mask |= a != 0.0;
          sum += a;
        }
        if (any) rows++, err = maxd(err, fabs(sum - 1.0));
        else {
          empty++;
          bad_mask |= sum != 0.0;
          for (int e = 0; e < d->head_dim; e++) bad_mask |= Z[qi * d->head_dim + e] != 0.0;
        }
      }
  check(err < 1e-12 && !bad_mask,
        "softmax %-44s %d rows sum to 1 (err %.1e), %d empty rows zero, masks %s", c->name,
        rows, err, empty, bad_mask ? "WRONG" : "ok");
  free(Z), free(P);
  tensors_free(&t);
}

/* Plain scaled dot-product attention, no positions: e = q.k/sqrt(d), softmax, z = alpha V.
 * Written here without sharing code with ref.c. Z (B,H,nq,d). */
static void plain_attention(const fd_case *c, const tensors *t, double *Z) {
  const relcl_attn_desc *d = &c->desc;
  int dd = d->head_dim;
  double *w = xcalloc((size_t)d->nk, sizeof *w);
  for (int b = 0; b < d->batch; b++)
    for (int h = 0; h < d->heads; h++)
      for (int i = 0; i < d->nq; i++) {
        size_t bh = (size_t)b * d->heads + h, qi = bh * d->nq + i;
        double sum = 0.0;
        for (int j = 0; j < d->nk; j++) {
          w[j] = 0.0;
          if (!may_see(c, b, i, j)) continue;
          double e = 0.0;
          for (int x = 0; x < dd; x++) e += t->Q[qi * dd + x] * t->K[(bh * d->nk + j) * dd + x];
          w[j] = exp(e / sqrt((double)dd)); /* |e| <= d / sqrt(d): no overflow */
          sum += w[j];
        }
        for (int x = 0; x < dd; x++) {
          double z = 0.0;
          for (int j = 0; j < d->nk; j++)
            if (sum > 0.0) z += w[j] / sum * t->V[(bh * d->nk + j) * dd + x];
          Z[qi * dd + x] = z;
        }
      }
  free(w);
}

/* relative=0 is plain attention; k=0 is plain attention too (one label for every pair: the
 * a^K term is a per-row constant the softmax ignores) plus wV[0] on every non-empty row, since
 * the weights sum to 1. Both with dropout off. 1e-12: the same O(1) sums in another order. */
static void test_plain(void) {
  double err_off = 0.0, err_k0 = 0.0;
  for (int n = 0; n < N_CASES; n++) {
    fd_case c = cases[n];
    c.desc.dropout = 0.0f;
    tensors t = tensors_make(&c.desc, 300 + (uint64_t)n);
    double *Zp = xcalloc(t.nQ, sizeof *Zp), *Z = xcalloc(t.nQ, sizeof *Z);
    const int *key_len = c.has_key_len ? c.key_len : NULL;
    plain_attention(&c, &t, Zp);

    relcl_attn_desc off = c.desc;
    off.relative = 0;
    ref_attn_forward_d(&off, t.Q, t.K, t.V, NULL, NULL, key_len, Z, NULL);
    for (size_t e = 0; e < t.nQ; e++) err_off = maxd(err_off, fabs(Z[e] - Zp[e]));

    relcl_attn_desc k0 = c.desc;
    k0.relative = 1, k0.max_rel = 0;
    ref_attn_forward_d(&k0, t.Q, t.K, t.V, t.wK, k0.keys_only ? NULL : t.wV, key_len, Z, NULL);
    int dd = k0.head_dim;
    for (int b = 0; b < k0.batch; b++)
      for (int h = 0; h < k0.heads; h++)
        for (int i = 0; i < k0.nq; i++) {
          int any = 0;
          for (int j = 0; j < k0.nk; j++) any |= may_see(&c, b, i, j);
          size_t qi = ((size_t)b * k0.heads + h) * k0.nq + i;
          const double *wV0 = t.wV + (size_t)(k0.per_head ? h : 0) * dd; /* row 0 of table h */
          for (int x = 0; x < dd; x++) {
            double want = Zp[qi * dd + x] + (any && !k0.keys_only ? wV0[x] : 0.0);
            err_k0 = maxd(err_k0, fabs(Z[qi * dd + x] - want));
          }
        }
    free(Zp), free(Z);
    tensors_free(&t);
  }
  check(err_off < 1e-12, "relative=0 equals plain attention on all %d cases: err %.1e", N_CASES,
        err_off);
  check(err_k0 < 1e-12, "k=0 equals plain attention (+ wV[0]) on all %d cases: err %.1e",
        N_CASES, err_k0);
}

/* Dropout: z_i = sum_j probs_ij keep_ij/(1-p) (v_j + wV[r(i,j)]), with the index and r
 * recomputed here from relcl.h, and the mask must really drop and keep some allowed weights.
 * 1e-12: the same few products summed in the same order up to rounding. */
static void test_dropout_forward(const fd_case *c, int index) {
  const relcl_attn_desc *d = &c->desc;
  tensors t = tensors_make(d, 400 + (uint64_t)index);
  double *Z = xcalloc(t.nQ, sizeof *Z), *P = xcalloc(t.nP, sizeof *P);
  ref_attn_forward_d(d, t.Q, t.K, t.V, wK_of(d, &t), wV_of(d, &t),
                     c->has_key_len ? c->key_len : NULL, Z, P);
  int dd = d->head_dim, k = d->max_rel, kept = 0, dropped = 0;
  double err = 0.0;
  for (int b = 0; b < d->batch; b++)
    for (int h = 0; h < d->heads; h++)
      for (int i = 0; i < d->nq; i++) {
        size_t qi = ((size_t)b * d->heads + h) * d->nq + i;
        for (int x = 0; x < dd; x++) {
          double z = 0.0;
          for (int j = 0; j < d->nk; j++) {
            if (!may_see(c, b, i, j)) continue;
            int keep = ref_attn_keep(d->seed, d->stream, qi, d->nk, j, d->dropout);
            if (x == 0) keep ? kept++ : dropped++;
            int rel = j - (d->q_pos0 + i);
            int r = (rel < -k ? -k : rel > k ? k : rel) + k;
            double av = t.wV[((size_t)(d->per_head ? h : 0) * (2 * k + 1) + r) * dd + x];
            z += P[qi * d->nk + j] * keep / (1.0 - d->dropout) *
                 (t.V[(((size_t)b * d->heads + h) * d->nk + j) * dd + x] + av);
          }
          err = maxd(err, fabs(z - Z[qi * dd + x]));
        }
      }
  check(err < 1e-12 && kept > 0 && dropped > 0,
        "dropout forward %-38s = probs*keep/(1-p) recombined: err %.1e (%d kept, %d dropped)",
        c->name, err, kept, dropped);
  free(Z), free(P);
  tensors_free(&t);
}

/* The float entry points must give exactly what the double core gives on the same numbers. */
static void test_float_entry(void) {
  const fd_case *c = &cases[14]; /* dropout, per_head, key_len, q_pos0: every argument used */
  const relcl_attn_desc *d = &c->desc;
  tensors t = tensors_make(d, 500);
  float *f[5];
  double *src[5] = {t.Q, t.K, t.V, t.wK, t.wV};
  size_t len[5] = {t.nQ, t.nKV, t.nKV, t.nW, t.nW};
  for (int a = 0; a < 5; a++) {
    f[a] = xcalloc(len[a], sizeof(float));
    for (size_t e = 0; e < len[a]; e++) f[a][e] = (float)src[a][e];
  }
  size_t nout = 2 * t.nQ + t.nP + 2 * t.nKV + 2 * t.nW; /* Z P dQ dK dV dwK dwV */
  double *o1 = xcalloc(nout, sizeof *o1), *o2 = xcalloc(nout, sizeof *o2);
  double *o[2] = {o1, o2};
  for (int v = 0; v < 2; v++) {
    double *Z = o[v], *P = Z + t.nQ, *dQ = P + t.nP, *dK = dQ + t.nQ, *dV = dK + t.nKV;
    double *dwK = dV + t.nKV, *dwV = dwK + t.nW;
    if (v == 0) {
      ref_attn_forward(d, f[0], f[1], f[2], f[3], f[4], c->key_len, Z, P);
      ref_attn_backward(d, f[0], f[1], f[2], f[3], f[4], c->key_len, t.dZ, dQ, dK, dV, dwK, dwV);
    } else {
      ref_attn_forward_d(d, t.Q, t.K, t.V, t.wK, t.wV, c->key_len, Z, P);
      ref_attn_backward_d(d, t.Q, t.K, t.V, t.wK, t.wV, c->key_len, t.dZ, dQ, dK, dV, dwK,
                          dwV);
    }
  }
  check(memcmp(o1, o2, nout * sizeof *o1) == 0,
        "float entry points equal the double core bit for bit (%s)", c->name);
  for (int a = 0; a < 5; a++) free(f[a]);
  free(o1), free(o2);
  tensors_free(&t);
}

int main(void) {
  test_philox();
  test_posenc();
  test_hand();
  test_plain();
  test_float_entry();
  for (int n = 0; n < N_CASES; n++) test_softmax_rows(&cases[n], n);
  for (int n = 0; n < N_CASES; n++)
    if (cases[n].desc.dropout > 0.0f) test_dropout_forward(&cases[n], n);
  for (int n = 0; n < N_CASES; n++) test_fd(&cases[n], n);
  printf("%d passed, %d failed\n", n_pass, n_fail);
  return n_fail != 0;
}
