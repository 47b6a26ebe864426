/* Incremental decoding and beam search (relcl_model.h, lib/model/decode.c, lib/model/beam.c), on small
 * random untrained models (no training needed: the checks are about arithmetic and search):
 *  1. cached == full: at every step the cached decoder's logits equal those of a full
 *     decoder pass over the whole prefix (relcl__model_run, the training graph), for
 *     absolute, relative, both, per-head, keys-only, pre-norm models; with two rows per
 *     source and a reorder halfway (the beam-search path); plus a control showing that the
 *     comparison does catch a decoder off by one position;
 *  2. greedy: relcl_model_greedy (cached) == beam search with beam 1, ids identical; and ==
 *     the uncached greedy decoder (relcl__model_greedy_full);
 *  3. beam search: n-best sorted by score and distinct, each score recomputed by teacher
 *     forcing (relcl_model_eval_batch's NLL), the length penalty's formula and effect,
 *     deterministic, argument errors;
 *  4. a decoding call's kept panels of its weights: greedy decoding of more than 64 rows
 *     equal to the same step by step, also after the parameters change between calls.
 * `--bench [VOCAB]` times cached against uncached greedy decoding and beam 4 on the tiny
 * preset instead; `--small` runs one configuration of 1 (4 steps) and 2, with every model
 * kept to the end (for Oclgrind, which misreads buffers created after others were released:
 * longer runs recycle the scratch pool's buffers).
 *
 * Tolerance of 1 (stated at the check): both paths run the same kernels in the same order;
 * they differ only in the shapes given to CLBlast (rows B*T against N, nk = t+1 keys out of
 * a strided cache), whose GEMMs may tile and so sum the d_model = 16..32 products in
 * another order. Float rounding then differs by a few ulp per GEMM, ~1e-7 relative, grown
 * through 2 layers and layer norms to ~1e-6 of the logits' scale (observed: <= 1e-6).
 * 1e-4 of the scale leaves a 100x margin; a wrong position, mask or table gives errors of
 * order 0.1 of the scale, which the control check shows.
 */
#include <time.h>

#include "model_internal.h"
#include "relcl_data.h"
#include "relcl_model.h"
#include "testutil.h"

static const double LOGIT_TOL = 1e-4;

/* --small: models are destroyed only at exit, and the full pass's buffers are grown once */
static int small;
static relcl_model *kept[16];
static int n_kept;

static void done_model(relcl_model *m) {
  if (small && n_kept < 16) kept[n_kept++] = m;
  else relcl_model_destroy(m);
}

static relcl_model_config small_config(void) {
  relcl_model_config c;
  memset(&c, 0, sizeof c);
  c.vocab = 29;
  c.enc_layers = 2;
  c.dec_layers = 2;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.dropout = 0.1f; /* never applied: decoding has no dropout */
  c.label_smoothing = 0.1f;
  c.positions = RELCL_POS_RELATIVE;
  c.max_rel = 3; /* shorter than the prefixes: clipping is exercised */
  c.max_length = 40;
  return c;
}

/* B sources of random ids 4..V-1, lengths lens[b] (the last id EOS), padded with 0 to S. */
typedef struct sources {
  int B, S;
  int32_t *ids, *lens;
} sources;

static sources make_sources(int B, const int *lens, int V, uint64_t seed) {
  sources s;
  s.B = B;
  s.S = 0;
  for (int b = 0; b < B; b++)
    if (lens[b] > s.S) s.S = lens[b];
  s.ids = calloc((size_t)B * s.S, 4);
  s.lens = calloc((size_t)B, 4);
  for (int b = 0; b < B; b++) {
    s.lens[b] = lens[b];
    for (int j = 0; j < lens[b] - 1; j++)
      s.ids[(size_t)b * s.S + j] = 4 + (int32_t)(tu_next(&seed) % (uint64_t)(V - 4));
    s.ids[(size_t)b * s.S + lens[b] - 1] = RELCL_EOS_ID;
  }
  return s;
}

static void free_sources(sources *s) {
  free(s->ids);
  free(s->lens);
}

static relcl_model_batch src_batch(const sources *s) {
  relcl_model_batch b = {s->B, s->S, 0, s->ids, NULL, NULL, s->lens, NULL};
  return b;
}

/* Logits (B T, V) of the full training graph without dropout: row b's source, target input
 * tgt_in (B, T). */
static float *full_logits(relcl_model *m, int B, int S, const int32_t *src,
                          const int32_t *src_lens, int T, const int32_t *tgt_in) {
  const size_t Nt = (size_t)B * T, V = (size_t)m->cfg.vocab;
  int32_t *tgt_out = malloc(Nt * 4), *tgt_lens = malloc((size_t)B * 4);
  for (size_t i = 0; i < Nt; i++) tgt_out[i] = 4; /* any id: the loss is not looked at */
  for (int b = 0; b < B; b++) tgt_lens[b] = T;
  relcl_model_batch mb = {B, S, T, src, tgt_in, tgt_out, src_lens, tgt_lens};
  int n;
  TU_OK(relcl__model_layout(m, B, S, T));
  if (m->lay.logit_rows < Nt) {
    fprintf(stderr, "full_logits: batch too large for one logit chunk\n");
    exit(1);
  }
  TU_OK(relcl__model_upload(m, &mb, true, false, &n));
  TU_OK(relcl__model_run(m, &mb, false, 0, 0, 0, 0));
  float *z = tu_alloc_host(Nt * V);
  TU_OK(relcl_read(m->ctx, relcl_buf_at(m->work, m->lay.logits), z, Nt * V));
  free(tgt_out);
  free(tgt_lens);
  return z;
}

/* max |a - b| / max(1, max |b|) over n */
static double scaled_err(const float *a, const float *b, size_t n) {
  double num = 0.0, den = 1.0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - (double)b[i]);
    if (isnan(e)) return NAN; /* a NaN on either side fails (a later entry must not hide it) */
    if (e > num) num = e;
    if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
  }
  return num / den;
}

/* ---- 1. cached == full ---- */

/* Decode T steps of random prefixes with `beam` rows per source, reordering (swapping the
 * rows of each sentence) after step T/2 and, with beam > 1, dropping source 1 at the same
 * time (relcl_decoder_select), and compare every step's logits with a full pass over the
 * prefix. Returns the worst scaled error; *control gets the smallest error against the full
 * pass at the wrong position (t - 1), which a correct decoder must not match. */
static double cached_vs_full(relcl_model *m, const sources *s, int beam, int T,
                             double *control) {
  int N = s->B * beam;
  const int V = m->cfg.vocab;
  uint64_t seed = 99;
  /* prefixes: row r's tokens y_r[0..T-1]; the input at step t is BOS, y_r[0], ... */
  int32_t *y = malloc((size_t)N * T * 4);
  for (int i = 0; i < N * T; i++) y[i] = 4 + (int32_t)(tu_next(&seed) % (uint64_t)(V - 4));
  relcl_model_batch sb = src_batch(s);
  relcl_decoder *d;
  TU_OK(relcl__model_layout(m, N, s->S, T)); /* the full pass's largest shape, first */
  TU_OK(relcl_decoder_create(m, &sb, beam, T, &d));
  /* the full pass sees one sentence per row: row r's source is r / beam */
  int32_t *src = malloc((size_t)N * s->S * 4), *slen = malloc((size_t)N * 4);
  for (int r = 0; r < N; r++) {
    memcpy(src + (size_t)r * s->S, s->ids + (size_t)(r / beam) * s->S, (size_t)s->S * 4);
    slen[r] = s->lens[r / beam];
  }
  int32_t *tok = malloc((size_t)N * 4), *from = malloc((size_t)N * 4);
  int32_t *tgt_in = malloc((size_t)N * T * 4);
  float *cached = tu_alloc_host((size_t)N * V), *want = tu_alloc_host((size_t)N * V);
  float *prev = tu_alloc_host((size_t)N * V);
  double worst = 0.0, ctrl = INFINITY;
  for (int t = 0; t < T; t++) {
    if (t == T / 2 && beam > 1) {
      /* keep the sources but 1, and swap the rows of every sentence: caches, encoder keys
       * and values, prefixes and the full pass's sources alike */
      int32_t keep[16];
      int nb = 0;
      for (int b = 0; b < s->B; b++)
        if (b != 1) keep[nb++] = b;
      const int N2 = nb * beam;
      int32_t *y2 = malloc((size_t)N2 * T * 4);
      for (int r = 0; r < N2; r++) {
        int b = keep[r / beam], i = r % beam;
        from[r] = b * beam + (beam - 1 - i);
        memcpy(y2 + (size_t)r * T, y + (size_t)from[r] * T, (size_t)T * 4);
        memcpy(src + (size_t)r * s->S, s->ids + (size_t)b * s->S, (size_t)s->S * 4);
        slen[r] = s->lens[b];
      }
      TU_OK(relcl_decoder_select(d, nb, keep, from));
      tu_check(relcl_decoder_hyps(d) == N2, "select: %d rows left", relcl_decoder_hyps(d));
      free(y);
      y = y2;
      N = N2;
    }
    for (int r = 0; r < N; r++) tok[r] = t == 0 ? RELCL_BOS_ID : y[(size_t)r * T + t - 1];
    TU_OK(relcl_decoder_step(d, tok));
    TU_OK(relcl_read(m->ctx, relcl_decoder_logits(d), cached, (size_t)N * V));
    /* the full pass over the prefix BOS y[0..t-1] (t + 1 positions), last position */
    const int Tt = t + 1;
    for (int r = 0; r < N; r++) {
      tgt_in[(size_t)r * Tt] = RELCL_BOS_ID;
      for (int j = 1; j < Tt; j++) tgt_in[(size_t)r * Tt + j] = y[(size_t)r * T + j - 1];
    }
    float *z = full_logits(m, N, s->S, src, slen, Tt, tgt_in);
    for (int r = 0; r < N; r++) {
      memcpy(want + (size_t)r * V, z + ((size_t)r * Tt + t) * V, (size_t)V * 4);
      if (t > 0) memcpy(prev + (size_t)r * V, z + ((size_t)r * Tt + t - 1) * V, (size_t)V * 4);
    }
    free(z);
    double e = scaled_err(cached, want, (size_t)N * V);
    worst = tu_worse(worst, e);
    if (t > 0) {
      double c = scaled_err(cached, prev, (size_t)N * V);
      if (c < ctrl) ctrl = c;
    }
  }
  relcl_decoder_destroy(d);
  free(y), free(src), free(slen), free(tok), free(from), free(tgt_in);
  free(cached), free(want), free(prev);
  *control = ctrl;
  return worst;
}

static void check_cached(relcl_context *ctx, const char *name, relcl_model_config c) {
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 17, &m));
  const int lens[3] = {7, 3, 9};
  sources s = make_sources(3, lens, c.vocab, 5);
  double ctrl1 = INFINITY, ctrl2, e1 = 0.0;
  if (!small) e1 = cached_vs_full(m, &s, 1, 9, &ctrl1);
  double e2 = cached_vs_full(m, &s, 2, small ? 4 : 8, &ctrl2);
  tu_check(e1 <= LOGIT_TOL, "cached == full, %s, 3 sources, 9 steps: worst error %.2e of the "
           "logits' scale (<= %.0e)", name, e1, LOGIT_TOL);
  tu_check(e2 <= LOGIT_TOL, "cached == full, %s, 2 rows per source, reorder and a source "
           "dropped at step 4: worst %.2e (<= %.0e)", name, e2, LOGIT_TOL);
  double ctrl = ctrl1 < ctrl2 ? ctrl1 : ctrl2;
  tu_check(ctrl > 100 * LOGIT_TOL, "control, %s: against the previous position the error is "
           "%.2e (> %.0e: the comparison would see a position off by one)", name, ctrl,
           100 * LOGIT_TOL);
  free_sources(&s);
  done_model(m);
}

/* ---- 2. and 3.: greedy and beam search ---- */

/* Make EOS likely at some steps and not others: its output embedding scaled up, so its
 * logit varies widely with the decoder state (an untrained model almost never ends). */
/* n parameters from offset off (floats) times factor */
static void scale_params(relcl_model *m, size_t off, size_t n, float factor) {
  float *p = tu_alloc_host(relcl_model_param_count(m));
  TU_OK(relcl_model_arena_read(m, RELCL_ARENA_PARAMS, p));
  for (size_t j = 0; j < n; j++) p[off + j] *= factor;
  TU_OK(relcl_model_arena_write(m, RELCL_ARENA_PARAMS, p));
  free(p);
}

static void boost_eos(relcl_model *m, float factor) { /* EOS's row of the embedding */
  const size_t D = (size_t)m->cfg.d_model;
  scale_params(m, m->emb + (size_t)RELCL_EOS_ID * D, D, factor);
}

static int same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
  return na == nb && (na == 0 || memcmp(a, b, (size_t)na * 4) == 0);
}

static void check_greedy(relcl_context *ctx, relcl_model *m, const sources *s, int max_out) {
  relcl_model_batch sb = src_batch(s);
  const int B = s->B;
  int32_t *out = calloc((size_t)B * max_out, 4), *lens = calloc((size_t)B, 4);
  int32_t *out2 = calloc((size_t)B * max_out, 4), *lens2 = calloc((size_t)B, 4);
  TU_OK(relcl_model_greedy(m, &sb, max_out, out, lens));
  TU_OK(relcl__model_greedy_full(m, &sb, max_out, out2, lens2));
  relcl_beam_opts o = relcl_beam_opts_default();
  o.beam_size = 1;
  o.max_len_a = 0.0f;
  o.max_len_b = max_out;
  relcl_beam_result *res;
  TU_OK(relcl_model_beam_search(m, &sb, &o, &res));
  int same_beam = 0, same_full = 0, ended = 0;
  for (int b = 0; b < B; b++) {
    relcl_hyp h = relcl_beam_result_hyp(res, b, 0);
    const int32_t *g = out + (size_t)b * max_out;
    same_beam += relcl_beam_result_count(res, b) == 1 && same_ids(h.ids, h.len, g, lens[b]) &&
                 h.finished == (lens[b] < max_out);
    same_full += same_ids(out2 + (size_t)b * max_out, lens2[b], g, lens[b]);
    ended += lens[b] < max_out;
  }
  tu_check(same_beam == B, "beam 1 == greedy (cached): %d of %d sentences identical (%d ended "
           "with EOS, %d cut at %d)", same_beam, B, ended, B - ended, max_out);
  tu_check(same_full == B, "greedy cached == greedy uncached: %d of %d identical", same_full,
           B);
  (void)ctx;
  relcl_beam_result_destroy(res);
  free(out), free(lens), free(out2), free(lens2);
}

/* Greedy decoding step by step through relcl_decoder, every row to the end (no rows
 * dropped), each product making its own copy of its weights: ids (B, max_out) and lengths
 * as relcl_model_greedy gives them (EOS at position lens[b] where one came). */
static void stepwise_greedy(relcl_model *m, const sources *s, int max_out, int32_t *out,
                            int32_t *lens) {
  relcl_model_batch sb = src_batch(s);
  const int B = s->B;
  relcl_decoder *d;
  TU_OK(relcl_decoder_create(m, &sb, 1, max_out, &d));
  int32_t *tok = calloc((size_t)B, 4), *next = calloc((size_t)B, 4);
  char *done = calloc((size_t)B, 1);
  for (size_t i = 0; i < (size_t)B * max_out; i++) out[i] = RELCL_PAD_ID;
  for (int b = 0; b < B; b++) {
    tok[b] = RELCL_BOS_ID;
    lens[b] = max_out;
  }
  for (int t = 0; t < max_out; t++) {
    TU_OK(relcl_decoder_step(d, tok));
    TU_OK(relcl_decoder_argmax(d, next));
    for (int b = 0; b < B; b++) {
      tok[b] = next[b];
      if (done[b]) continue;
      out[(size_t)b * max_out + t] = next[b];
      if (next[b] == RELCL_EOS_ID) done[b] = 1, lens[b] = t;
    }
  }
  relcl_decoder_destroy(d);
  free(tok), free(next), free(done);
}

/* A decoding call keeps its weights' panels from its first step to its end (lib/runtime/
 * gemm.c relcl__panels_keep: products of more than 64 rows with B transposed): greedy
 * decoding (relcl_model_greedy) and beam 1 (relcl_model_beam_search) of 72 sentences
 * against the same decoding step by step (no panels kept), ids identical; again after the
 * parameters change between two calls, where panels left kept by the first call would give
 * the step-by-step decoding the first call's products. Planted, each failed it: no drop at
 * the end of relcl_model_greedy's call, nor of relcl_model_beam_search's; panels found by
 * shape alone, whatever the operand's offset. */
static void check_kept_panels(relcl_context *ctx) {
  relcl_model_config c = small_config();
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 29, &m));
  enum { B = 72, T = 12 };
  int lens[B];
  uint64_t seed = 5;
  for (int b = 0; b < B; b++) lens[b] = 3 + (int)(tu_next(&seed) % 8);
  sources s = make_sources(B, lens, c.vocab, 13);
  relcl_model_batch sb = src_batch(&s);
  relcl_beam_opts bo = relcl_beam_opts_default();
  bo.beam_size = 1;
  bo.max_len_a = 0.0f;
  bo.max_len_b = T;
  int32_t *o[3], *l[3];
  for (int i = 0; i < 3; i++) o[i] = calloc((size_t)B * T, 4), l[i] = calloc((size_t)B, 4);
  for (int round = 0; round < 2; round++) {
    stepwise_greedy(m, &s, T, o[1], l[1]); /* first: it would meet panels left kept */
    TU_OK(relcl_model_greedy(m, &sb, T, o[0], l[0]));
    relcl_beam_result *res; /* beam 1: relcl_model_beam_search's own keep */
    TU_OK(relcl_model_beam_search(m, &sb, &bo, &res));
    int same = 0, same_beam = 0, moved = 0;
    for (int b = 0; b < B; b++) {
      const relcl_hyp h = relcl_beam_result_hyp(res, b, 0);
      same += same_ids(o[0] + (size_t)b * T, l[0][b], o[1] + (size_t)b * T, l[1][b]);
      same_beam += same_ids(h.ids, h.len, o[1] + (size_t)b * T, l[1][b]);
      moved += !same_ids(o[0] + (size_t)b * T, l[0][b], o[2] + (size_t)b * T, l[2][b]);
    }
    relcl_beam_result_destroy(res);
    const char *when = round ? "after the parameters changed" : "first call";
    tu_check(same == B, "kept panels, %s: greedy == step by step for %d of %d sentences",
             when, same, B);
    tu_check(same_beam == B, "kept panels, %s: beam 1 == step by step for %d of %d sentences",
             when, same_beam, B);
    if (round == 1)
      tu_check(moved > 0, "kept panels: the parameters' change moved %d of %d sentences", moved,
               B);
    memcpy(o[2], o[0], (size_t)B * T * 4);
    memcpy(l[2], l[0], (size_t)B * 4);
    /* the last decoder layer's first feed-forward weights (D_ff x D), only ever read by a
     * B^T product of more than 64 rows here, negated */
    scale_params(m, m->dec[c.dec_layers - 1].ffn.w1, (size_t)c.d_ff * c.d_model, -1.0f);
  }
  for (int i = 0; i < 3; i++) free(o[i]), free(l[i]);
  (void)ctx;
  free_sources(&s);
  relcl_model_destroy(m);
}

/* -log p of a hypothesis by teacher forcing: one eval batch of the source and the ids (EOS
 * appended when finished). */
static double teacher_forced(relcl_model *m, const sources *s, int b, const relcl_hyp *h) {
  const int T = h->len + (h->finished ? 1 : 0);
  if (T == 0) return 0.0;
  int32_t *in = calloc((size_t)T, 4), *outv = calloc((size_t)T, 4);
  in[0] = RELCL_BOS_ID;
  for (int j = 1; j < T; j++) in[j] = h->ids[j - 1];
  for (int j = 0; j < h->len; j++) outv[j] = h->ids[j];
  if (h->finished) outv[h->len] = RELCL_EOS_ID;
  int32_t tl = T;
  relcl_model_batch mb = {1, s->S, T, s->ids + (size_t)b * s->S, in, outv, s->lens + b, &tl};
  relcl_model_stats st = {0, 0, 0};
  TU_OK(relcl_model_eval_batch(m, &mb, &st));
  free(in), free(outv);
  return st.nll_sum;
}

static void check_beam(relcl_context *ctx, relcl_model *m, const sources *s) {
  (void)ctx;
  relcl_model_batch sb = src_batch(s);
  const int B = s->B, K = 4;
  relcl_beam_opts o = relcl_beam_opts_default();
  o.beam_size = K;
  o.n_best = K;
  o.length_penalty = 0.0f;
  o.max_len_a = 1.0f;
  o.max_len_b = 6;
  relcl_beam_result *r0, *r2, *again;
  TU_OK(relcl_model_beam_search(m, &sb, &o, &r0));
  TU_OK(relcl_model_beam_search(m, &sb, &o, &again));
  o.length_penalty = 2.0f;
  TU_OK(relcl_model_beam_search(m, &sb, &o, &r2));

  int sorted = 1, distinct = 1, counts = 1, formula = 1, same = 1, finished = 0, total = 0;
  double worst_tf = 0.0;
  for (int b = 0; b < B; b++) {
    const int n = relcl_beam_result_count(r0, b);
    counts &= n >= 1 && n <= K && relcl_beam_result_count(again, b) == n;
    for (int k = 0; k < n; k++) {
      relcl_hyp h = relcl_beam_result_hyp(r0, b, k), h2 = relcl_beam_result_hyp(again, b, k);
      same &= same_ids(h.ids, h.len, h2.ids, h2.len) && h.score == h2.score;
      if (k > 0) sorted &= relcl_beam_result_hyp(r0, b, k - 1).score >= h.score;
      for (int j = 0; j < k; j++) {
        relcl_hyp g = relcl_beam_result_hyp(r0, b, j);
        distinct &= !same_ids(g.ids, g.len, h.ids, h.len);
      }
      formula &= h.score == h.logprob; /* alpha 0 */
      /* log-probabilities summed over <= 16 tokens, each from float logits: the device's
       * NLL sum is float, ~1e-6 relative per term; 1e-4 (1 + |logprob|) covers it */
      double tf = -teacher_forced(m, s, b, &h);
      double e = fabs(tf - h.logprob) / (1.0 + fabs(h.logprob));
      worst_tf = tu_worse(worst_tf, e);
      finished += h.finished;
      total++;
    }
  }
  tu_check(counts, "beam 4, n-best 4: 1..4 hypotheses per sentence");
  tu_check(sorted, "n-best lists sorted by score");
  tu_check(distinct, "n-best hypotheses distinct");
  tu_check(same, "beam search deterministic: a second run gives the same lists and scores");
  tu_check(formula, "alpha 0: score == log-probability");
  tu_check(worst_tf <= 1e-4, "scores == teacher-forced log-probabilities (%d hypotheses, %d "
           "finished): worst error %.2e of 1 + |logprob| (<= 1e-4)", total, finished, worst_tf);

  /* alpha only ranks the finished set, which the search does not depend on: hypotheses
   * are scored ((5 + len) / 6)^alpha lower, and the best is never shorter than with 0 */
  int pen_ok = 1, longer_ok = 1, changed = 0;
  for (int b = 0; b < B; b++) {
    for (int k = 0; k < relcl_beam_result_count(r2, b); k++) {
      relcl_hyp h = relcl_beam_result_hyp(r2, b, k);
      double lp = pow((5.0 + h.len + h.finished) / 6.0, 2.0);
      pen_ok &= fabs(h.score - h.logprob / lp) <= 1e-12 * (1.0 + fabs(h.score));
    }
    relcl_hyp a = relcl_beam_result_hyp(r0, b, 0), c = relcl_beam_result_hyp(r2, b, 0);
    longer_ok &= c.len + c.finished >= a.len + a.finished;
    changed += !same_ids(a.ids, a.len, c.ids, c.len);
  }
  tu_check(pen_ok, "length penalty 2: score == logprob / ((5 + len) / 6)^2");
  tu_check(longer_ok && changed > 0, "length penalty 2: the best is never shorter than with 0, "
           "and differs in %d of %d sentences", changed, B);
  relcl_beam_result_destroy(r0);
  relcl_beam_result_destroy(r2);
  relcl_beam_result_destroy(again);

  /* errors */
  relcl_beam_result *res = NULL;
  o.n_best = K + 1;
  relcl_status st = relcl_model_beam_search(m, &sb, &o, &res);
  tu_check(st == RELCL_ERR_INVALID_ARG && res == NULL, "error: n_best > beam_size: %s",
           relcl_last_error());
  o = relcl_beam_opts_default();
  o.beam_size = 0;
  st = relcl_model_beam_search(m, &sb, &o, &res);
  tu_check(st == RELCL_ERR_INVALID_ARG, "error: beam_size 0: %s", relcl_last_error());
  relcl_decoder *d;
  TU_OK(relcl_decoder_create(m, &sb, 2, 2, &d)); /* 6 sources: 12 rows */
  int32_t tok[12], from[12];
  for (int r = 0; r < 12; r++) {
    tok[r] = RELCL_BOS_ID;
    from[r] = r;
  }
  tok[1] = m->cfg.vocab;
  st = relcl_decoder_step(d, tok);
  tu_check(st == RELCL_ERR_INVALID_ARG, "error: token outside the vocabulary: %s",
           relcl_last_error());
  tok[1] = 2;
  from[0] = 2;
  st = relcl_decoder_reorder(d, from);
  tu_check(st == RELCL_ERR_INVALID_ARG, "error: reorder across sentences: %s",
           relcl_last_error());
  TU_OK(relcl_decoder_step(d, tok));
  TU_OK(relcl_decoder_step(d, tok));
  st = relcl_decoder_step(d, tok);
  tu_check(st == RELCL_ERR_INVALID_ARG && relcl_decoder_position(d) == 2,
           "error: a step past max_len: %s", relcl_last_error());
  relcl_decoder_destroy(d);
}

/* ---- --bench ---- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(relcl_context *ctx, int vocab) {
  relcl_model_config c = *relcl_model_preset("tiny");
  c.vocab = vocab;
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 1, &m));
  char desc[256];
  relcl_model_config_describe(&c, desc, sizeof desc);
  printf("bench: %s\n", desc);
  const int B = 32, max_out = 40;
  int lens[32];
  for (int b = 0; b < B; b++) lens[b] = 15 + b % 10;
  sources s = make_sources(B, lens, vocab, 3);
  relcl_model_batch sb = src_batch(&s);
  int32_t *out = calloc((size_t)B * max_out, 4), *ol = calloc((size_t)B, 4);
  TU_OK(relcl_model_greedy(m, &sb, 4, out, ol)); /* warm-up: kernels, CLBlast */
  TU_OK(relcl__model_greedy_full(m, &sb, 4, out, ol));
  double t0 = now();
  TU_OK(relcl__model_greedy_full(m, &sb, max_out, out, ol));
  double full = now() - t0;
  t0 = now();
  TU_OK(relcl_model_greedy(m, &sb, max_out, out, ol));
  double cached = now() - t0;
  printf("bench: greedy, %d sentences x %d steps (untrained: no EOS): uncached %.3f s, cached "
         "%.3f s (%.1fx), %.0f sentences/s\n",
         B, max_out, full, cached, full / cached, B / cached);
  relcl_beam_opts o = relcl_beam_opts_default();
  o.max_len_a = 0.0f;
  o.max_len_b = max_out;
  relcl_beam_result *res;
  t0 = now();
  TU_OK(relcl_model_beam_search(m, &sb, &o, &res));
  double beam = now() - t0;
  printf("bench: beam 4, %d sentences x %d steps: %.3f s, %.0f sentences/s\n", B,
         relcl_beam_result_steps(res), beam, B / beam);
  relcl_beam_result_destroy(res);
  free(out), free(ol);
  free_sources(&s);
  relcl_model_destroy(m);
}

int main(int argc, char **argv) {
  relcl_context *ctx = tu_context();
  printf("device: %s\n", relcl_context_device_name(ctx));
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
    int vocab = argc > 2 ? atoi(argv[2]) : 8000;
    bench(ctx, vocab > 4 ? vocab : 8000);
    relcl_context_destroy(ctx);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--small") == 0) {
    small = 1;
  } else if (argc > 1) {
    fprintf(stderr, "usage: test_decode [--small | --bench [VOCAB]]\n");
    return 2;
  }
  relcl_model_config c = small_config();
  if (small) {
    c.positions = RELCL_POS_BOTH;
    c.rel_per_head = 1;
    c.pre_norm = 1;
    check_cached(ctx, "both per-head pre-norm", c);
    c = small_config();
    relcl_model *m;
    TU_OK(relcl_model_create(ctx, &c, 23, &m));
    boost_eos(m, 4.0f);
    const int lens[3] = {5, 3, 4};
    sources s = make_sources(3, lens, c.vocab, 11);
    TU_OK(relcl__model_layout(m, 4, s.S, 8)); /* teacher forcing's largest shape, first */
    check_greedy(ctx, m, &s, 6);
    free_sources(&s);
    done_model(m);
    for (int i = 0; i < n_kept; i++) relcl_model_destroy(kept[i]);
    relcl_context_destroy(ctx);
    return tu_finish();
  }
  c.positions = RELCL_POS_ABSOLUTE;
  check_cached(ctx, "absolute post-norm", c);
  c = small_config();
  check_cached(ctx, "relative post-norm", c);
  c = small_config();
  c.positions = RELCL_POS_BOTH;
  c.rel_per_head = 1;
  c.rel_keys_only = 1;
  c.pre_norm = 1;
  check_cached(ctx, "both per-head keys-only pre-norm", c);
  c = small_config();
  c.rel_per_head = 1;
  c.pre_norm = 1;
  c.max_rel = 1;
  check_cached(ctx, "relative per-head pre-norm k=1", c);
  c = small_config();
  c.d_model = 152; /* heads 76 wide: the item shape's attn_step sums eight columns a vector,
                    * up to eight vectors at once, then the rest one by one (decode.cl) */
  c.d_ff = 64;
  check_cached(ctx, "relative post-norm, heads 76 wide", c);

  c = small_config();
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 23, &m));
  boost_eos(m, 4.0f);
  const int lens[6] = {5, 9, 3, 7, 4, 8};
  sources s = make_sources(6, lens, c.vocab, 11);
  check_greedy(ctx, m, &s, 14);
  check_beam(ctx, m, &s);
  free_sources(&s);
  relcl_model_destroy(m);
  check_kept_panels(ctx);
  relcl_context_destroy(ctx);
  return tu_finish();
}
