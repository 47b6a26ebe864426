/* Beam search over the incremental decoder (decode.c), every sentence of a batch at once:
 * the device runs the decoder, the logits, their log-sum-exp and each row's 2 beam best
 * tokens (kernels/decode.cl's row_topk; the host scans the rows itself for beams over
 * RELCL__TOPK_MAX / 2), the host ranks the extensions (one sort per sentence) and tells the
 * decoder how to reorder its caches. The procedure is fairseq's: of the 2 beam best extensions, those that
 * end in EOS within the first beam finish, the best beam others stay live; GNMT's length
 * penalty (Wu et al. 2016) ranks finished hypotheses. */
#include "model_internal.h"
#include "relcl_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

relcl_beam_opts relcl_beam_opts_default(void) {
  relcl_beam_opts o;
  o.beam_size = 4;
  o.n_best = 1;
  o.length_penalty = 0.6f;
  o.max_len_a = 1.0f;
  o.max_len_b = 50;
  return o;
}

struct relcl_beam_result {
  int batch, n_best, steps;
  int *count;      /* (batch) */
  relcl_hyp *hyps; /* (batch, n_best) */
  int32_t *ids;    /* (batch, n_best, max_len): the hypotheses' ids */
};

void relcl_beam_result_destroy(relcl_beam_result *res) {
  if (res == NULL) return;
  free(res->count);
  free(res->hyps);
  free(res->ids);
  free(res);
}

int relcl_beam_result_count(const relcl_beam_result *res, int i) {
  return res && i >= 0 && i < res->batch ? res->count[i] : 0;
}

relcl_hyp relcl_beam_result_hyp(const relcl_beam_result *res, int i, int k) {
  relcl_hyp none;
  memset(&none, 0, sizeof none);
  if (res == NULL || i < 0 || i >= res->batch || k < 0 || k >= res->count[i]) return none;
  return res->hyps[(size_t)i * res->n_best + k];
}

int relcl_beam_result_steps(const relcl_beam_result *res) { return res ? res->steps : 0; }

/* ---- the search ---- */

typedef struct cand {
  double score; /* the hypothesis's log-probability with this token */
  int slot;     /* the live hypothesis (row within the sentence) it extends */
  int tok;
} cand;

/* Best first; equal scores: lower slot, then lower token. A total order: deterministic. */
static int cand_cmp(const void *pa, const void *pb) {
  const cand *a = pa, *b = pb;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
  return (a->tok > b->tok) - (a->tok < b->tok);
}

typedef struct fin {
  double logprob, score;
  int len, finished, order;
  int32_t *ids; /* into the search's pool */
} fin;

static int fin_cmp(const void *pa, const void *pb) {
  const fin *a = pa, *b = pb;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  return (a->order > b->order) - (a->order < b->order);
}

typedef struct search {
  int B, K, N, V, Tc, KK;
  double alpha;
  int *max_len;     /* (B) */
  double *live;     /* (N) log-probability of each live row; -inf: no hypothesis */
  double *next_live; /* (K) of one sentence, while its candidates are read */
  int32_t *hist[2]; /* (N, Tc) tokens of each row, current and next */
  int32_t *tok, *from;
  float *logits;    /* (N, V), when the host selects the rows' best tokens */
  float *tval;      /* (N, KK) the rows' best logits, when the device selects them */
  int32_t *tid;     /* (N, KK) their tokens (-1: none) */
  double *lse;      /* (N) log-sum-exp of each row of logits */
  cand *cands;      /* (K KK) of one sentence */
  cand *top;        /* (KK) of one row */
  fin *fins;        /* (B, 3K) */
  int32_t *fin_ids; /* (B, 3K, Tc) */
  int *n_fin;       /* (B) */
  char *done;       /* (B) */
  int Bc;           /* sentences the decoder still holds */
  int32_t *act;     /* (B) the sentence of each of them: rows j K .. j K + K - 1 are act[j]'s */
  int32_t *kept;    /* (B) scratch */
} search;

static void search_free(search *s) {
  free(s->max_len);
  free(s->live);
  free(s->next_live);
  free(s->hist[0]);
  free(s->hist[1]);
  free(s->tok);
  free(s->from);
  free(s->logits);
  free(s->tval);
  free(s->tid);
  free(s->lse);
  free(s->cands);
  free(s->top);
  free(s->fins);
  free(s->fin_ids);
  free(s->n_fin);
  free(s->done);
  free(s->act);
  free(s->kept);
}

static void add_fin(search *s, int b, const int32_t *ids, int len, int last_tok, double logprob,
                    int finished) {
  const int cap = 3 * s->K;
  if (s->n_fin[b] >= cap) return; /* cannot happen: at most 2K - 1 + K entries */
  const int i = s->n_fin[b]++;
  fin *f = &s->fins[(size_t)b * cap + i];
  f->ids = s->fin_ids + ((size_t)b * cap + i) * s->Tc;
  memcpy(f->ids, ids, (size_t)len * sizeof *ids);
  if (last_tok >= 0) f->ids[len++] = last_tok;
  f->len = len;
  f->finished = finished;
  f->logprob = logprob;
  f->score = logprob / pow((5.0 + len + finished) / 6.0, s->alpha);
  f->order = i;
}

/* The KK best tokens of row z by logit (lower id first among equals; NaN never), as
 * candidates extending slot with log-probability base: base + z - lse. Returns how many. */
static int row_top(search *s, const float *z, double lse, int slot, double base, cand *out) {
  const int V = s->V, KK = s->KK;
  int n = 0;
  for (int v = 0; v < V; v++) {
    const float x = z[v];
    if (!(x == x)) continue;
    if (n == KK && !(x > s->top[n - 1].score)) continue;
    int j = n < KK ? n++ : KK - 1; /* insertion, keeping equal logits in id order */
    while (j > 0 && x > s->top[j - 1].score) {
      s->top[j] = s->top[j - 1];
      j--;
    }
    s->top[j].score = x;
    s->top[j].tok = v;
  }
  for (int j = 0; j < n; j++) {
    out[j].score = base + (s->top[j].score - lse);
    out[j].slot = slot;
    out[j].tok = s->top[j].tok;
  }
  return n;
}

/* Row r's candidates as the device selected them (the same as row_top's). */
static int row_top_device(const search *s, int r, int slot, double base, cand *out) {
  int n = 0;
  for (int j = 0; j < s->KK; j++) {
    const size_t at = (size_t)r * s->KK + j;
    if (s->tid[at] < 0) break;
    out[n].score = base + ((double)s->tval[at] - s->lse[r]);
    out[n].slot = slot;
    out[n++].tok = s->tid[at];
  }
  return n;
}

/* Rank the extensions of sentence b (decoder source j) after step t, finish or keep them,
 * and set the rows' next tokens, sources and histories. */
static void sentence_step(search *s, int b, int j, int t) {
  const int K = s->K, Tc = s->Tc, base = j * K;
  int nc = 0;
  for (int i = 0; i < K; i++) {
    const int r = base + i;
    if (s->live[r] == -INFINITY) continue;
    nc += s->tid ? row_top_device(s, r, i, s->live[r], s->cands + nc)
                 : row_top(s, s->logits + (size_t)r * s->V, s->lse[r], i, s->live[r],
                           s->cands + nc);
  }
  qsort(s->cands, (size_t)nc, sizeof *s->cands, cand_cmp);
  const bool last = t + 1 >= s->max_len[b];
  int n_live = 0;
  for (int k = 0; k < nc && n_live < K; k++) {
    const cand *c = &s->cands[k];
    const int32_t *h = s->hist[0] + (size_t)(base + c->slot) * Tc;
    if (c->tok == RELCL_EOS_ID) {
      if (k < K) add_fin(s, b, h, t, -1, c->score, 1);
      continue;
    }
    if (last) {
      add_fin(s, b, h, t, c->tok, c->score, 0);
    } else {
      const int r = base + n_live;
      int32_t *hn = s->hist[1] + (size_t)r * Tc;
      memcpy(hn, h, (size_t)t * sizeof *h);
      hn[t] = c->tok;
      s->from[r] = base + c->slot;
      s->tok[r] = c->tok;
      s->next_live[n_live] = c->score;
    }
    n_live++;
  }
  for (int i = 0; i < K; i++) s->live[base + i] = i < n_live ? s->next_live[i] : -INFINITY;
  if (last || n_live == 0 || s->n_fin[b] >= K) {
    s->done[b] = 1;
    for (int i = 0; i < K; i++) s->live[base + i] = -INFINITY;
  }
}

/* Drop finished sentences from the decoder now? With a beam the rows are gathered every step
 * anyway, so always; greedy (beam 1) gathers nothing otherwise, so only once a quarter of the
 * rows would go: the rule relcl_model_greedy follows too, which keeps beam 1 and greedy
 * decoding the same rows together (and so the same bits). */
static bool compact(const search *s, int n_kept) {
  if (n_kept == s->Bc) return false;
  return s->K > 1 || relcl__decode_compact(s->Bc, n_kept);
}

relcl_status relcl_model_beam_search(relcl_model *m, const relcl_model_batch *src,
                                     const relcl_beam_opts *opts, relcl_beam_result **out) {
  relcl__clear_error();
  static const char op[] = "relcl_model_beam_search";
  if (out == NULL || opts == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: opts and out are required", op);
  *out = NULL;
  relcl_status st = relcl__model_check_src(m, src, op);
  if (st != RELCL_OK) return st;
  if (opts->beam_size < 1 || opts->beam_size > 1024 || opts->n_best < 1 ||
      opts->n_best > opts->beam_size || !isfinite(opts->length_penalty) ||
      !(opts->max_len_a >= 0.0f && opts->max_len_a <= 1e4f) || opts->max_len_b < 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "%s: beam_size=%d must be in 1..1024, n_best=%d in 1..beam_size, "
                       "length_penalty finite, max_len_a in 0..1e4 and max_len_b >= 0",
                       op, opts->beam_size, opts->n_best);
  search s;
  memset(&s, 0, sizeof s);
  relcl_decoder *d = NULL;
  relcl_beam_result *res = NULL;
  const int B = src->batch, K = opts->beam_size;
  s.B = B;
  s.K = K;
  s.N = B * K;
  s.V = m->cfg.vocab;
  s.KK = 2 * K < s.V ? 2 * K : s.V;
  s.alpha = opts->length_penalty;
  s.max_len = malloc((size_t)B * sizeof *s.max_len);
  if (s.max_len == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  s.Tc = 1;
  for (int b = 0; b < B; b++) {
    double ml = floor((double)opts->max_len_a * src->src_lens[b]) + opts->max_len_b;
    if (ml > m->cfg.max_length) ml = m->cfg.max_length;
    s.max_len[b] = ml < 1 ? 1 : (int)ml;
    if (s.max_len[b] > s.Tc) s.Tc = s.max_len[b];
  }
  const size_t N = (size_t)s.N, Tc = (size_t)s.Tc;
  s.live = malloc(N * sizeof *s.live);
  s.next_live = malloc((size_t)K * sizeof *s.next_live);
  s.hist[0] = calloc(N * Tc, sizeof(int32_t));
  s.hist[1] = calloc(N * Tc, sizeof(int32_t));
  s.tok = malloc(N * sizeof *s.tok);
  s.from = malloc(N * sizeof *s.from);
  const bool on_device = s.KK <= RELCL__TOPK_MAX;
  if (on_device) {
    s.tval = malloc(N * (size_t)s.KK * sizeof *s.tval);
    s.tid = malloc(N * (size_t)s.KK * sizeof *s.tid);
  } else {
    s.logits = malloc(N * (size_t)s.V * sizeof *s.logits);
  }
  s.lse = malloc(N * sizeof *s.lse);
  s.cands = malloc((size_t)K * s.KK * sizeof *s.cands);
  s.top = malloc((size_t)s.KK * sizeof *s.top);
  s.fins = calloc((size_t)B * 3 * K, sizeof *s.fins);
  s.fin_ids = malloc((size_t)B * 3 * K * Tc * sizeof *s.fin_ids);
  s.n_fin = calloc((size_t)B, sizeof *s.n_fin);
  s.done = calloc((size_t)B, 1);
  s.act = malloc((size_t)B * sizeof *s.act);
  s.kept = malloc((size_t)B * sizeof *s.kept);
  if (!s.live || !s.next_live || !s.hist[0] || !s.hist[1] || !s.tok || !s.from ||
      (on_device ? !s.tval || !s.tid : !s.logits) ||
      !s.lse || !s.cands || !s.top || !s.fins || !s.fin_ids || !s.n_fin || !s.done || !s.act ||
      !s.kept) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  if ((st = relcl_decoder_create(m, src, K, s.Tc, &d)) != RELCL_OK) goto fail;
  /* the decoder's weights into panels once for all steps (gemm.c): nothing writes the
   * parameters during the search */
  relcl__panels_keep(m->ctx, m->arena[RELCL_ARENA_PARAMS]);
  /* one live hypothesis per sentence at first: the other rows would only repeat it */
  for (size_t r = 0; r < N; r++) {
    s.live[r] = r % (size_t)K == 0 ? 0.0 : -INFINITY;
    s.tok[r] = RELCL_BOS_ID;
  }
  s.Bc = B;
  for (int b = 0; b < B; b++) s.act[b] = b;
  int steps = 0;
  for (int t = 0; t < s.Tc; t++) {
    const size_t Nc = (size_t)s.Bc * K;
    if ((st = relcl_decoder_step(d, s.tok)) != RELCL_OK ||
        (st = on_device ? relcl__decoder_read_top(d, s.KK, s.tval, s.tid, s.lse)
                        : relcl__decoder_read(d, s.logits, s.lse)) != RELCL_OK)
      goto fail;
    steps++;
    for (size_t r = 0; r < Nc; r++) {
      s.from[r] = (int32_t)r;
      s.tok[r] = RELCL_PAD_ID; /* rows without a hypothesis: any id will do */
    }
    int n_kept = 0;
    for (int j = 0; j < s.Bc; j++) {
      if (!s.done[s.act[j]]) sentence_step(&s, s.act[j], j, t);
      if (!s.done[s.act[j]]) s.kept[n_kept++] = j;
    }
    if (n_kept == 0) break;
    /* histories: rows not rewritten this step belong to no hypothesis any more */
    int32_t *h = s.hist[0];
    s.hist[0] = s.hist[1];
    s.hist[1] = h;
    if (!compact(&s, n_kept)) {
      if ((st = relcl_decoder_reorder(d, s.from)) != RELCL_OK) goto fail;
      continue;
    }
    /* drop the finished sentences: their rows stop costing anything. Rows only move down,
     * so each copy reads a row not yet overwritten. */
    for (int jn = 0; jn < n_kept; jn++) {
      const int jo = s.kept[jn];
      for (int i = 0; i < K; i++) {
        const size_t rn = (size_t)jn * K + i, ro = (size_t)jo * K + i;
        s.from[rn] = s.from[ro];
        s.tok[rn] = s.tok[ro];
        s.live[rn] = s.live[ro];
        memmove(s.hist[0] + rn * Tc, s.hist[0] + ro * Tc, Tc * sizeof *s.hist[0]);
      }
      s.act[jn] = s.act[jo];
    }
    if ((st = relcl_decoder_select(d, n_kept, s.kept, s.from)) != RELCL_OK) goto fail;
    s.Bc = n_kept;
  }

  res = calloc(1, sizeof *res);
  if (res == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  res->batch = B;
  res->n_best = opts->n_best;
  res->steps = steps;
  res->count = calloc((size_t)B, sizeof *res->count);
  res->hyps = calloc((size_t)B * opts->n_best, sizeof *res->hyps);
  res->ids = malloc((size_t)B * opts->n_best * Tc * sizeof *res->ids);
  if (!res->count || !res->hyps || !res->ids) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  for (int b = 0; b < B; b++) {
    fin *f = s.fins + (size_t)b * 3 * K;
    qsort(f, (size_t)s.n_fin[b], sizeof *f, fin_cmp);
    const int n = s.n_fin[b] < opts->n_best ? s.n_fin[b] : opts->n_best;
    res->count[b] = n;
    for (int k = 0; k < n; k++) {
      int32_t *ids = res->ids + ((size_t)b * opts->n_best + k) * Tc;
      memcpy(ids, f[k].ids, (size_t)f[k].len * sizeof *ids);
      relcl_hyp *hy = &res->hyps[(size_t)b * opts->n_best + k];
      hy->ids = ids;
      hy->len = f[k].len;
      hy->finished = f[k].finished;
      hy->logprob = f[k].logprob;
      hy->score = f[k].score;
    }
  }
  *out = res;
  res = NULL;
fail:
  relcl__panels_drop(m->ctx);
  relcl_beam_result_destroy(res);
  relcl_decoder_destroy(d);
  search_free(&s);
  return st;
}
