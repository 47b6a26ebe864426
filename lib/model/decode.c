/* Incremental decoding: the encoder once per batch, then one decoder position per step over
 * per-layer key/value caches (Shaw et al. 2018, section 3.3: the new query's relative logits
 * are q_t . wK[clip(j - t)], so the cache needs nothing beyond keys and values). Greedy
 * decoding (relcl_model_greedy) runs on it; beam search (beam.c) too.
 *
 * Shapes (B sources, beam rows each, N = B beam rows, S source length, Tc cache positions,
 * D d_model, H heads, dh = D / H, F d_ff, V vocab):
 *   self-attention cache, per layer, keys and values   (N, H, Tc, dh)
 *   encoder-decoder keys and values, per layer          (B, H, S, dh)
 *   step activations                                    (N, D), FFN hidden (N, F)
 *   logits                                              (N, V)
 * The encoder-decoder attention of a step is one call per layer with the beam rows of a
 * sentence as its nq = beam queries: the source's keys are stored once, not beam times.
 * Both attentions of a step run in kernels/decode.cl's attn_step (one work-group per query
 * row, or on CPUs one work-item: the relative terms cost the labels in use, the prefix only
 * its content terms); the self-attention's caches stay where each position was written, and
 * beam search reorders only their history (decode.cl's top comment); every
 * other op is the one the full pass uses (model_graph.c), in the same order, so the two
 * differ only in summation order (the fused attention, GEMMs of other shapes). */
#include "flags.h" /* RELCL_STEP_*: shared with kernels/decode.cl */
#include "model_internal.h"
#include "ops.h"
#include "relcl_data.h"
#include "relcl_layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* int32 arrays, one buffer each: each is written from its start (Oclgrind takes a host write
 * at an offset for uninitialized memory). I_TOK (N), I_FROM (N), I_SRCLEN (B), I_ARGMAX (N),
 * I_SOURCES (B), I_ZEROS (N), I_HIST0 and I_HIST1 (N, Tc): the two copies of the caches'
 * history (kernels/decode.cl: hypothesis r's position j is in cache row hist[r][j]). */
enum { I_TOK, I_FROM, I_SRCLEN, I_ARGMAX, I_SOURCES, I_ZEROS, I_HIST0, I_HIST1, N_IB };

/* The device buffers of a decoder:
 *   W_WORK            float regions (the step's activations, logits)
 *   W_IB0 + I_...     the int32 arrays above
 *   W_MEM, W_MEM2     encoder-decoder keys and values, layer l at 2 l B S D (K, then V); the
 *                     second receives them when sentences are dropped
 *   W_CACHE0 + 2l + kv  layer l's keys (kv 0) or values (1), (N, H, Tc, dh)
 * A model keeps one set between decoders (grown when a batch needs more, released with the
 * model), so decoding batch after batch allocates nothing in steady state, and Oclgrind,
 * which misreads buffers created after others were released, sees no release. A decoder
 * created while another holds the model's set gets its own. */
enum { W_WORK, W_IB0, W_MEM = W_IB0 + N_IB, W_MEM2, W_CACHE0 };


struct relcl_decoder {
  relcl_model *m;
  relcl_context *ctx;
  relcl__dec_ws *ws;
  bool own_ws; /* not the model's: released with the decoder */
  int B, beam, N, S, Tc, t;
  int D, H, dh, F, V, L;
  bool pre;
  size_t x0, x1, u, a, qkv, z, h, mean, rstd, logits, losses, probs; /* W_WORK */
  size_t pw; /* floats per query row in probs: weights, label logits, label sums */
  int32_t *src_lens; /* (B) host copy */
  int cur;           /* the copy of the history in use: I_HIST0 + cur */
};

#define TRY(call)                    \
  do {                               \
    relcl_status st_ = (call);       \
    if (st_ != RELCL_OK) return st_; \
  } while (0)

static relcl_buf P(const relcl_decoder *d, size_t off) {
  return relcl_buf_at(d->m->arena[RELCL_ARENA_PARAMS], off);
}
static relcl_buf Wk(const relcl_decoder *d, size_t off) {
  return relcl_buf_at(d->ws->buf[W_WORK], off);
}
static relcl_buf Id(const relcl_decoder *d, int which) {
  return relcl_buf_at(d->ws->buf[W_IB0 + which], 0);
}
static relcl_buf Mem(const relcl_decoder *d, size_t off) {
  return relcl_buf_at(d->ws->buf[W_MEM], off);
}
static relcl_buf opt(const relcl_decoder *d, size_t off) {
  return off == RELCL__NONE ? RELCL_BUF_NONE : P(d, off);
}
static relcl_buf cache(const relcl_decoder *d, int l, int kv) {
  return relcl_buf_at(d->ws->buf[W_CACHE0 + 2 * l + kv], 0);
}

static size_t take(size_t *used, size_t n) {
  size_t off = (*used + 15) / 16 * 16;
  *used = off + n;
  return off;
}

/* ---- lifetime ---- */


static relcl__dec_ws *ws_new(int L) {
  relcl__dec_ws *ws = calloc(1, sizeof *ws);
  if (ws == NULL) return NULL;
  ws->n = W_CACHE0 + 2 * L;
  ws->buf = calloc((size_t)ws->n, sizeof *ws->buf);
  ws->cap = calloc((size_t)ws->n, sizeof *ws->cap);
  if (ws->buf == NULL || ws->cap == NULL) {
    relcl__decode_ws_free(ws);
    return NULL;
  }
  return ws;
}

/* Buffer i of at least n elements: kept when large enough (its old contents are finite
 * floats or ids), else replaced by a new one, zeroed (CLBlast's tiles may read, then discard,
 * entries past a matrix's end: they must not be garbage). The caches are not zeroed: only
 * decode.cl's kernels touch them, and those read no position before cache_put has written
 * it (zeroing them took 84 of the 222 ms of zeroing when relcl-translate decoded the demo's
 * test set, session 32). A buffer that grows grows by half at least: batches sorted by
 * length ask for a little more each time. */
static relcl_status ws_ensure(relcl_context *ctx, relcl__dec_ws *ws, int i, size_t n) {
  if (ws->buf[i] && ws->cap[i] >= n) return RELCL_OK;
  if (ws->buf[i] && n < ws->cap[i] + ws->cap[i] / 2) n = ws->cap[i] + ws->cap[i] / 2;
  if (ws->buf[i]) clReleaseMemObject(ws->buf[i]);
  ws->buf[i] = NULL;
  ws->cap[i] = 0;
  relcl_status st = relcl_alloc(ctx, n, &ws->buf[i]);
  if (st == RELCL_OK && i < W_CACHE0)
    st = relcl__fill(ctx, relcl_buf_at(ws->buf[i], 0), 0.0f, n);
  if (st == RELCL_OK) ws->cap[i] = n;
  return st;
}

void relcl_decoder_destroy(relcl_decoder *d) {
  if (d == NULL) return;
  if (d->ctx) clFinish(relcl_context_queue(d->ctx));
  if (d->own_ws) relcl__decode_ws_free(d->ws);
  else if (d->ws) d->ws->busy = false;
  free(d->src_lens);
  free(d);
}

/* Encoder-decoder keys and values of every layer from the encoder output, as the full pass
 * computes them: one (Ns, 2D) projection by wk|wv, split into heads. */
static relcl_status cross_memory(relcl_decoder *d) {
  relcl_model *m = d->m;
  const relcl__layout *L = &m->lay;
  const size_t D = (size_t)d->D, DD = D * D, Ns = (size_t)d->B * d->S;
  relcl_buf enc = relcl_buf_at(m->act, L->enc_out), tmp = relcl_buf_at(m->work, L->qkv);
  for (int l = 0; l < d->L; l++) {
    const relcl__attn_p *ap = &m->dec[l].cross;
    /* layer l's keys, then its values (Ns * D further on): one split of the two */
    const size_t k = 2 * (size_t)l * Ns * D;
    TRY(relcl__linear_forward(d->ctx, (int)Ns, d->D, 2 * d->D, enc, P(d, ap->wq + DD),
                             P(d, ap->bq + D), tmp));
    TRY(relcl__heads_split(d->ctx, 2, d->B, d->S, d->H, d->dh, tmp, 2 * d->D, Mem(d, k)));
  }
  return RELCL_OK;
}

relcl_status relcl_decoder_create(relcl_model *m, const relcl_model_batch *src, int beam,
                                  int max_len, relcl_decoder **out) {
  relcl__clear_error();
  static const char op[] = "relcl_decoder_create";
  if (out == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: out is NULL", op);
  *out = NULL;
  relcl_status st = relcl__model_check_src(m, src, op);
  if (st != RELCL_OK) return st;
  const relcl_model_config *c = &m->cfg;
  if (beam < 1 || max_len < 1 || (double)src->batch * beam > (1 << 20) ||
      (double)src->batch * beam * max_len * c->d_model * 4 > 4e9)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "%s: beam=%d and max_len=%d must be > 0, and batch * beam * max_len * "
                       "d_model under 2^30",
                       op, beam, max_len);
  relcl_decoder *d = calloc(1, sizeof *d);
  if (d == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  d->m = m;
  d->ctx = m->ctx;
  d->B = src->batch;
  d->beam = beam;
  d->N = src->batch * beam;
  d->S = src->src_len;
  d->Tc = max_len;
  d->D = c->d_model;
  d->H = c->heads;
  d->dh = c->d_model / c->heads;
  d->F = c->d_ff;
  d->V = c->vocab;
  d->L = c->dec_layers;
  d->pre = c->pre_norm != 0;
  const size_t N = (size_t)d->N, D = (size_t)d->D;
  size_t used = 0;
  d->x0 = take(&used, N * D);
  d->x1 = take(&used, N * D);
  d->u = take(&used, N * D);
  d->a = take(&used, N * D);
  d->qkv = take(&used, 3 * N * D);
  d->z = take(&used, N * D);
  d->h = take(&used, N * (size_t)d->F);
  d->mean = take(&used, N);
  d->rstd = take(&used, N);
  d->logits = take(&used, N * (size_t)d->V);
  d->losses = take(&used, 2 * N);
  d->pw = (size_t)(d->Tc > d->S ? d->Tc : d->S) + 2 * (2 * (size_t)c->max_rel + 1);
  d->probs = take(&used, N * (size_t)d->H * d->pw);
  const size_t cache_n = N * (size_t)d->Tc * D, mem_n = 2 * (size_t)d->L * d->B * d->S * D;
  d->src_lens = malloc((size_t)d->B * sizeof *d->src_lens);
  if (d->src_lens == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  memcpy(d->src_lens, src->src_lens, (size_t)d->B * sizeof *d->src_lens);
  if (m->dec_ws == NULL) m->dec_ws = ws_new(d->L);
  if (m->dec_ws != NULL && !m->dec_ws->busy) {
    d->ws = m->dec_ws;
  } else {
    d->ws = ws_new(d->L);
    d->own_ws = true;
  }
  if (d->ws == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  d->ws->busy = true;
  {
    const size_t hist_n = N * (size_t)d->Tc;
    const size_t n_ib[N_IB] = {N, N, (size_t)d->B, N, (size_t)d->B, N, hist_n, hist_n};
    if ((st = ws_ensure(d->ctx, d->ws, W_WORK, used)) != RELCL_OK ||
        (st = ws_ensure(d->ctx, d->ws, W_MEM, mem_n)) != RELCL_OK ||
        (st = ws_ensure(d->ctx, d->ws, W_MEM2, mem_n)) != RELCL_OK)
      goto fail;
    for (int i = 0; i < N_IB; i++)
      if ((st = ws_ensure(d->ctx, d->ws, W_IB0 + i, n_ib[i])) != RELCL_OK) goto fail;
    for (int i = 0; i < 2 * d->L; i++)
      if ((st = ws_ensure(d->ctx, d->ws, W_CACHE0 + i, cache_n)) != RELCL_OK) goto fail;
    /* I_ZEROS must hold zeros: a reused buffer may hold anything */
    if ((st = relcl__fill(d->ctx, Id(d, I_ZEROS), 0.0f, N)) != RELCL_OK ||
        (st = relcl__write(d->ctx, Id(d, I_SRCLEN), src->src_lens, (size_t)d->B)) != RELCL_OK)
      goto fail;
  }
  if ((st = relcl__model_encode(m, src)) != RELCL_OK || (st = cross_memory(d)) != RELCL_OK)
    goto fail;
  *out = d;
  return RELCL_OK;
fail:
  relcl_decoder_destroy(d);
  return st;
}

int relcl_decoder_hyps(const relcl_decoder *d) { return d ? d->N : 0; }
int relcl_decoder_position(const relcl_decoder *d) { return d ? d->t : 0; }
relcl_buf relcl_decoder_logits(const relcl_decoder *d) {
  return d ? Wk(d, d->logits) : RELCL_BUF_NONE;
}

/* ---- one step ---- */

typedef enum { SUB_SELF, SUB_CROSS, SUB_FFN } sub_kind;

static relcl_status launch3(relcl_context *ctx, relcl__kernel_entry *k, const relcl__args *a,
                            size_t n0, size_t n1, size_t n2) {
  size_t w = relcl__wg(ctx, n0, k->max_wg < 64 ? k->max_wg : 64);
  size_t global[3] = {(n0 + w - 1) / w * w, n1, n2}, local[3] = {w, 1, 1};
  return relcl__launch(ctx, k, a, 3, global, local);
}


/* Keys and values of the new position (columns D.. and 2D.. of qkv (N, 3D)) into layer l's
 * caches at t, each hypothesis's into its own row (and the history says so). */
static relcl_status cache_put(relcl_decoder *d, int l) {
  relcl__kernel_entry *k;
  TRY(relcl__kernel(d->ctx, "decode", "cache_put", &k));
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  const int ld = 3 * d->D, v_gap = d->D;
  relcl__buf_arg(&a, Wk(d, d->qkv + (size_t)d->D), NULL);
  RELCL__ARG(&a, ld);
  RELCL__ARG(&a, v_gap);
  relcl__buf_arg(&a, cache(d, l, 0), NULL);
  relcl__buf_arg(&a, cache(d, l, 1), NULL);
  RELCL__ARG(&a, d->H);
  RELCL__ARG(&a, d->Tc);
  RELCL__ARG(&a, d->dh);
  RELCL__ARG(&a, d->t);
  RELCL__ARG(&a, d->N);
  relcl__buf_arg(&a, Id(d, I_HIST0 + d->cur), NULL);
  if (relcl__row_item(d->ctx)) /* the item shape: a head a work-item (kernels/decode.cl) */
    return launch3(d->ctx, k, &a, (size_t)d->N * d->H, 2, 1);
  return launch3(d->ctx, k, &a, (size_t)d->dh, (size_t)d->H, 2 * (size_t)d->N);
}

/* Where attn_step reads a query's q or writes its z: (sequence, head, query) strides */
typedef struct step_layout {
  int b, h, i;
} step_layout;

/* Attention of nq queries per (b, h) of Q over nk keys of K, V (matrix bh at bh kv_stride;
 * with hist, the caches' history, key j of (b, h) in cache row hist[b][j]) into Z, by
 * kernels/decode.cl's attn_step (the decoder's shapes: see there); q and z of (b, h, i) at
 * b ql.b + h ql.h + i ql.i (zl) in Q (Z): the products' own layouts, no heads split or
 * merge. Relative tables wK, wV as in relcl_attn_forward (absent: no relative term). */
static relcl_status attn_step(relcl_decoder *d, int B, int nq, int nk, int q_pos0, int flags,
                              relcl_buf Q, step_layout ql, relcl_buf K, relcl_buf V,
                              size_t kv_stride, relcl_buf hist, relcl_buf wK, relcl_buf wV,
                              relcl_buf key_len, relcl_buf Z, step_layout zl) {
  relcl__kernel_entry *kern;
  TRY(relcl__kernel(d->ctx, "decode", "attn_step", &kern));
  const relcl_model_config *c = &d->m->cfg;
  if (wK.mem) flags |= RELCL_STEP_REL_K;
  if (wV.mem) flags |= RELCL_STEP_REL_V;
  if ((flags & (RELCL_STEP_REL_K | RELCL_STEP_REL_V)) && c->rel_per_head)
    flags |= RELCL_STEP_PER_HEAD;
  if (key_len.mem) flags |= RELCL_STEP_KEY_LEN;
  relcl_buf none = Wk(d, 0); /* unused arguments still need a buffer */
  cl_uint stride = (cl_uint)kv_stride;
  int k = c->max_rel;
  float scale = (float)(1.0 / sqrt((double)d->dh));
  relcl__args a = {kern->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, Q, NULL);
  relcl__buf_arg(&a, K, NULL);
  relcl__buf_arg(&a, V, NULL);
  RELCL__ARG(&a, stride);
  relcl__buf_arg(&a, wK.mem ? wK : none, NULL);
  relcl__buf_arg(&a, wV.mem ? wV : none, NULL);
  relcl__buf_arg(&a, key_len.mem ? key_len : Id(d, I_ZEROS), NULL);
  relcl__buf_arg(&a, hist.mem ? hist : Id(d, I_ZEROS), NULL);
  const int hist_ld = hist.mem ? d->Tc : 0;
  RELCL__ARG(&a, hist_ld);
  cl_uint pw = (cl_uint)d->pw;
  relcl__buf_arg(&a, Wk(d, d->probs), NULL);
  RELCL__ARG(&a, pw);
  relcl__buf_arg(&a, Z, NULL);
  RELCL__ARG(&a, d->H);
  RELCL__ARG(&a, nq);
  RELCL__ARG(&a, nk);
  RELCL__ARG(&a, d->dh);
  RELCL__ARG(&a, k);
  RELCL__ARG(&a, q_pos0);
  RELCL__ARG(&a, flags);
  RELCL__ARG(&a, scale);
  /* the group shape: a work-group of wg per query row; the item shape (CPUs): a work-item per
   * row, summing as a work-group of wg would (kernels/decode.cl) */
  const bool item = relcl__row_item(d->ctx);
  size_t limit = item || kern->max_wg >= 64 ? 64 : kern->max_wg;
  size_t wg = relcl__pow2_wg((size_t)(nk > d->dh ? nk : d->dh), limit);
  const int rows = B * d->H * nq, lanes = (int)wg;
  RELCL__ARG(&a, rows);
  RELCL__ARG(&a, lanes);
  const int strides[6] = {ql.b, ql.h, ql.i, zl.b, zl.h, zl.i};
  for (int i = 0; i < 6; i++) RELCL__ARG(&a, strides[i]);
  RELCL__ARG_LOCAL(&a, item ? sizeof(float) : wg * sizeof(float));
  RELCL__ARG_LOCAL(&a, item ? sizeof(float) : (size_t)d->dh * sizeof(float));
  if (item) {
    size_t local = relcl__wg(d->ctx, (size_t)rows, 16);
    size_t global = (rows + local - 1) / local * local;
    return relcl__launch(d->ctx, kern, &a, 1, &global, &local);
  }
  size_t global = (size_t)rows * wg;
  return relcl__launch(d->ctx, kern, &a, 1, &global, &wg);
}

/* The history's row r = the first t positions of row from[r] (I_FROM), for n rows, into the
 * other copy, which becomes the one in use */
static relcl_status hist_gather(relcl_decoder *d, int n) {
  relcl__kernel_entry *k;
  TRY(relcl__kernel(d->ctx, "decode", "hist_gather", &k));
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, Id(d, I_FROM), NULL);
  relcl__buf_arg(&a, Id(d, I_HIST0 + d->cur), NULL);
  relcl__buf_arg(&a, Id(d, I_HIST1 - d->cur), NULL);
  RELCL__ARG(&a, d->Tc);
  RELCL__ARG(&a, d->t);
  RELCL__ARG(&a, n);
  TRY(launch3(d->ctx, k, &a, (size_t)d->t, (size_t)n, 1));
  d->cur = 1 - d->cur;
  return RELCL_OK;
}

/* a = F(u) - b, F one sub-layer of decoder layer l, *b the bias of F's last linear layer
 * (block_fwd adds it with the residual, as model_graph.c does). */
static relcl_status sub_fwd(relcl_decoder *d, int l, sub_kind kind, relcl_buf u,
                            relcl_buf *b) {
  relcl_context *ctx = d->ctx;
  const relcl__dec_p *dp = &d->m->dec[l];
  const int N = d->N, D = d->D;
  relcl_buf a = Wk(d, d->a);
  if (kind == SUB_FFN) {
    TRY(relcl__linear_relu_forward(ctx, N, D, d->F, u, P(d, dp->ffn.w1), P(d, dp->ffn.b1),
                                   Wk(d, d->h), (size_t)d->F));
    *b = P(d, dp->ffn.b2);
    return relcl__linear_forward(ctx, N, d->F, D, Wk(d, d->h), P(d, dp->ffn.w2),
                                RELCL_BUF_NONE, a);
  }
  if (kind == SUB_SELF) {
    const relcl__attn_p *ap = &dp->self;
    TRY(relcl__linear_forward(ctx, N, D, 3 * D, u, P(d, ap->wq), P(d, ap->bq), Wk(d, d->qkv)));
    TRY(cache_put(d, l));
    /* q of row r's head h in Q|K|V's row r (3 D floats); z into (N, D), heads side by side.
     * The tables say which relative terms there are (no rel_v with keys only). */
    TRY(attn_step(d, N, 1, d->t + 1, d->t, RELCL_STEP_CAUSAL, Wk(d, d->qkv),
                  (step_layout){3 * D, d->dh, 0}, cache(d, l, 0), cache(d, l, 1),
                  (size_t)d->Tc * d->dh, Id(d, I_HIST0 + d->cur), opt(d, ap->rel_k),
                  opt(d, ap->rel_v), RELCL_BUF_NONE, Wk(d, d->z), (step_layout){D, d->dh, 0}));
    *b = P(d, ap->bo);
    return relcl__linear_forward(ctx, N, D, D, Wk(d, d->z), P(d, ap->wo), RELCL_BUF_NONE, a);
  }
  const relcl__attn_p *ap = &dp->cross;
  const size_t k = 2 * (size_t)l * d->B * d->S * D, v = k + (size_t)d->B * d->S * D;
  TRY(relcl__linear_forward(ctx, N, D, D, u, P(d, ap->wq), P(d, ap->bq), Wk(d, d->qkv)));
  /* the beam rows of a sentence are its queries: query i of sentence b is row b beam + i of
   * Q (N, D), and its z goes to the same row of (N, D) */
  const step_layout rows = {d->beam * D, d->dh, D};
  TRY(attn_step(d, d->B, d->beam, d->S, 0, 0, Wk(d, d->qkv), rows, Mem(d, k), Mem(d, v),
                (size_t)d->S * d->dh, RELCL_BUF_NONE, RELCL_BUF_NONE, RELCL_BUF_NONE,
                Id(d, I_SRCLEN), Wk(d, d->z), rows));
  *b = P(d, ap->bo);
  return relcl__linear_forward(ctx, N, D, D, Wk(d, d->z), P(d, ap->wo), RELCL_BUF_NONE, a);
}

/* One residual block from x_in into x_out (model_graph.c's block_fwd without dropout; bias
 * and residual are added by the same kernel at p = 0, for the same rounding). */
static relcl_status block_fwd(relcl_decoder *d, int l, sub_kind kind, size_t x_in,
                              size_t x_out) {
  const relcl__dec_p *dp = &d->m->dec[l];
  const relcl__ln_p *ln = kind == SUB_SELF ? &dp->n1 : kind == SUB_CROSS ? &dp->n2 : &dp->n3;
  const int N = d->N, D = d->D;
  relcl_buf b;
  if (d->pre) {
    TRY(relcl__layernorm_forward(d->ctx, N, D, RELCL__LN_EPS, Wk(d, x_in), P(d, ln->g),
                                P(d, ln->b), Wk(d, d->u), Wk(d, d->mean), Wk(d, d->rstd)));
    TRY(sub_fwd(d, l, kind, Wk(d, d->u), &b));
    return relcl__bias_dropout_residual(d->ctx, N, D, 0.0f, 0, 0, Wk(d, d->a), b, Wk(d, x_in),
                                        Wk(d, x_out), RELCL_BUF_NONE);
  }
  TRY(sub_fwd(d, l, kind, Wk(d, x_in), &b));
  /* LN(x_in + (a + b)) in one launch: the bits of the sum stored, then normalized */
  return relcl__layernorm_add_forward(d->ctx, N, D, RELCL__LN_EPS, Wk(d, d->a), b, Wk(d, x_in),
                                      P(d, ln->g), P(d, ln->b), Wk(d, x_out), Wk(d, d->mean),
                                      Wk(d, d->rstd));
}

relcl_status relcl_decoder_step(relcl_decoder *d, const int32_t *tokens) {
  relcl__clear_error();
  static const char op[] = "relcl_decoder_step";
  if (d == NULL || tokens == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: decoder and tokens are required", op);
  if (d->t >= d->Tc)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: all %d positions are used", op, d->Tc);
  for (int r = 0; r < d->N; r++)
    if (tokens[r] < 0 || tokens[r] >= d->V)
      return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: tokens[%d] = %d is outside 0..%d", op, r,
                         (int)tokens[r], d->V - 1);
  relcl_model *m = d->m;
  const int N = d->N, D = d->D;
  TRY(relcl__write(d->ctx, Id(d, I_TOK), tokens, (size_t)N));
  TRY(relcl__embedding_forward(d->ctx, N, D, d->V, Id(d, I_TOK), P(d, m->emb),
                              sqrtf((float)D), Wk(d, d->x0)));
  if (m->cfg.positions & RELCL_POS_ABSOLUTE)
    TRY(relcl__posenc_add(d->ctx, Wk(d, d->x0), N, 1, D, d->t));
  size_t x = d->x0, y = d->x1;
  for (int l = 0; l < d->L; l++)
    for (int k = 0; k < 3; k++) {
      TRY(block_fwd(d, l, (sub_kind)k, x, y));
      size_t s = x;
      x = y;
      y = s;
    }
  if (d->pre) {
    TRY(relcl__layernorm_forward(d->ctx, N, D, RELCL__LN_EPS, Wk(d, x), P(d, m->dec_norm.g),
                                P(d, m->dec_norm.b), Wk(d, y), Wk(d, d->mean),
                                Wk(d, d->rstd)));
    x = y;
  }
  /* logits = out E^T: the tied output embedding, as in the full pass */
  TRY(relcl__gemm(d->ctx, false, true, (size_t)N, (size_t)d->V, (size_t)D, 1.0f, Wk(d, x),
                  (size_t)D, 0, P(d, m->emb), (size_t)D, 0, 0.0f, Wk(d, d->logits),
                  (size_t)d->V, 0, 1));
  d->t++;
  return RELCL_OK;
}

relcl_status relcl_decoder_logprobs(relcl_decoder *d, float *out) {
  relcl__clear_error();
  if (d == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_decoder_logprobs: NULL argument");
  const size_t V = (size_t)d->V;
  TRY(relcl__read(d->ctx, Wk(d, d->logits), out, (size_t)d->N * V));
  for (int r = 0; r < d->N; r++) {
    float *z = out + (size_t)r * V;
    double mx = -INFINITY, se = 0.0;
    for (size_t v = 0; v < V; v++)
      if (z[v] > mx) mx = z[v];
    for (size_t v = 0; v < V; v++) se += exp((double)z[v] - mx);
    const double lse = mx + log(se);
    for (size_t v = 0; v < V; v++) z[v] = (float)((double)z[v] - lse);
  }
  return RELCL_OK;
}

relcl_status relcl__decoder_read(relcl_decoder *d, float *logits, double *lse) {
  const size_t N = (size_t)d->N, V = (size_t)d->V;
  /* the loss kernel's NLL of target 0 is lse - z_0 (a stable log-sum-exp per row, on the
   * device): lse = that + z_0 */
  TRY(relcl__xent_forward_backward(d->ctx, d->N, d->V, 0.0f, -1, Wk(d, d->logits),
                                  Id(d, I_ZEROS), 1.0f, RELCL_BUF_NONE, Wk(d, d->losses)));
  TRY(relcl__read(d->ctx, Wk(d, d->logits), logits, N * V));
  float *l = malloc(2 * N * sizeof *l);
  if (l == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  relcl_status st = relcl__read(d->ctx, Wk(d, d->losses), l, 2 * N);
  for (size_t r = 0; st == RELCL_OK && r < N; r++)
    lse[r] = (double)l[2 * r + 1] + (double)logits[r * V];
  free(l);
  return st;
}

relcl_status relcl__rows_topk(relcl_context *ctx, int N, int V, int kk, relcl_buf z,
                              relcl_buf val, relcl_buf id, relcl_buf z0) {
  if (kk < 1 || kk > RELCL__TOPK_MAX || kk > V || N < 1)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl__rows_topk: kk=%d must be in 1..%d and "
                                              "<= V=%d, N=%d >= 1", kk, RELCL__TOPK_MAX, V, N);
  relcl__kernel_entry *k;
  relcl_status st = relcl__kernel(ctx, "decode", "row_topk", &k);
  if (st != RELCL_OK) return st;
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  relcl__buf_arg(&a, z, NULL);
  RELCL__ARG(&a, V);
  RELCL__ARG(&a, N);
  RELCL__ARG(&a, kk);
  relcl__buf_arg(&a, val, NULL);
  relcl__buf_arg(&a, id, NULL);
  relcl__buf_arg(&a, z0, NULL);
  size_t w = relcl__wg(ctx, (size_t)N, k->max_wg < 64 ? k->max_wg : 64);
  size_t global = ((size_t)N + w - 1) / w * w;
  return relcl__launch(ctx, k, &a, 1, &global, &w);
}

relcl_status relcl__decoder_read_top(relcl_decoder *d, int kk, float *val, int32_t *id,
                                     double *lse) {
  const size_t N = (size_t)d->N, K = (size_t)kk;
  /* one buffer, read back at once (a step's one wait for the device, where four reads each
   * waited): the values (N K), the ids (N K int32), the rows' z_0 (N), then the loss
   * kernel's (loss, NLL) pairs (2 N) */
  const size_t o_id = N * K, o_z0 = 2 * N * K, o_l = o_z0 + N, all = o_l + 2 * N;
  cl_mem vm = NULL;
  float *h = malloc(all * sizeof *h);
  relcl_status st = h ? RELCL_OK : relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  if (st == RELCL_OK) st = relcl__pool_get(d->ctx, all * sizeof(float), &vm);
  /* the same log-sum-exp as relcl__decoder_read: the loss kernel's NLL of token 0 + z_0 */
  if (st == RELCL_OK)
    st = relcl_xent_forward_backward(d->ctx, d->N, d->V, 0.0f, -1, Wk(d, d->logits),
                                     Id(d, I_ZEROS), 1.0f, RELCL_BUF_NONE,
                                     relcl_buf_at(vm, o_l));
  if (st == RELCL_OK)
    st = relcl__rows_topk(d->ctx, d->N, d->V, kk, Wk(d, d->logits), relcl_buf_at(vm, 0),
                          relcl_buf_at(vm, o_id), relcl_buf_at(vm, o_z0));
  if (st == RELCL_OK) st = relcl__read(d->ctx, relcl_buf_at(vm, 0), h, all);
  if (st == RELCL_OK) {
    memcpy(val, h, N * K * sizeof *val);
    memcpy(id, h + o_id, N * K * sizeof *id);
    for (size_t r = 0; r < N; r++) lse[r] = (double)h[o_l + 2 * r + 1] + (double)h[o_z0 + r];
  }
  if (vm) relcl__pool_put(d->ctx, vm);
  free(h);
  return st;
}

relcl_status relcl_decoder_argmax(relcl_decoder *d, int32_t *out) {
  relcl__clear_error();
  if (d == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_decoder_argmax: NULL argument");
  TRY(relcl__argmax_rows(d->ctx, d->N, d->V, Wk(d, d->logits), d->V, Id(d, I_ARGMAX)));
  return relcl__read(d->ctx, Id(d, I_ARGMAX), out, (size_t)d->N);
}

relcl_status relcl_decoder_select(relcl_decoder *d, int batch, const int32_t *sources,
                                  const int32_t *from) {
  relcl__clear_error();
  static const char op[] = "relcl_decoder_select";
  if (d == NULL || sources == NULL || from == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: decoder, sources and from are required", op);
  if (batch < 1 || batch > d->B)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: batch=%d must be in 1..%d", op, batch, d->B);
  const int K = d->beam, N = batch * K;
  bool same_sources = batch == d->B, identity;
  for (int j = 0; j < batch; j++) {
    if (sources[j] < 0 || sources[j] >= d->B)
      return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: sources[%d] = %d is outside 0..%d", op, j,
                         (int)sources[j], d->B - 1);
    same_sources = same_sources && sources[j] == j;
  }
  identity = same_sources;
  for (int r = 0; r < N; r++) {
    if (from[r] < 0 || from[r] >= d->N || from[r] / K != sources[r / K])
      return relcl__fail(RELCL_ERR_INVALID_ARG,
                         "%s: from[%d] = %d is not a row of source %d", op, r, (int)from[r],
                         (int)sources[r / K]);
    identity = identity && from[r] == r;
  }
  if (identity) return RELCL_OK;
  /* the history follows the hypotheses (the caches stay: kernels/decode.cl); the encoder's
   * keys and values go into the other copy ((H, S, dh) a row: the embedding kernel at scale
   * 1, an exact copy) */
  if (d->t > 0) {
    TRY(relcl__write(d->ctx, Id(d, I_FROM), from, (size_t)N));
    TRY(hist_gather(d, N));
  }
  if (!same_sources) {
    const size_t BSD = (size_t)d->B * d->S * d->D, bSD = (size_t)batch * d->S * d->D;
    TRY(relcl__write(d->ctx, Id(d, I_SOURCES), sources, (size_t)batch));
    for (int i = 0; i < 2 * d->L; i++) /* layer i / 2, keys then values: packed anew */
      TRY(relcl__embedding_forward(d->ctx, batch, d->S * d->D, d->B, Id(d, I_SOURCES),
                                  Mem(d, (size_t)i * BSD), 1.0f,
                                  relcl_buf_at(d->ws->buf[W_MEM2], (size_t)i * bSD)));
    cl_mem m = d->ws->buf[W_MEM];
    size_t c = d->ws->cap[W_MEM];
    d->ws->buf[W_MEM] = d->ws->buf[W_MEM2];
    d->ws->cap[W_MEM] = d->ws->cap[W_MEM2];
    d->ws->buf[W_MEM2] = m;
    d->ws->cap[W_MEM2] = c;
    /* sources may repeat or go backwards: a copy first */
    int32_t *lens = malloc((size_t)batch * sizeof *lens);
    if (lens == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int j = 0; j < batch; j++) lens[j] = d->src_lens[sources[j]];
    memcpy(d->src_lens, lens, (size_t)batch * sizeof *lens);
    free(lens);
    TRY(relcl__write(d->ctx, Id(d, I_SRCLEN), d->src_lens, (size_t)batch));
    d->B = batch;
  }
  d->N = N;
  return RELCL_OK;
}

relcl_status relcl_decoder_reorder(relcl_decoder *d, const int32_t *from) {
  relcl__clear_error();
  if (d == NULL || from == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_decoder_reorder: decoder and from are "
                       "required");
  int32_t *sources = malloc((size_t)d->B * sizeof *sources);
  if (sources == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int j = 0; j < d->B; j++) sources[j] = j;
  relcl_status st = relcl_decoder_select(d, d->B, sources, from);
  free(sources);
  return st;
}

/* ---- greedy decoding ---- */

bool relcl__decode_compact(int rows, int kept) { return kept < rows && 4 * kept <= 3 * rows; }

relcl_status relcl__decode_greedy(relcl_model *m, const relcl_model_batch *src, int max_out,
                                  int32_t *out, int32_t *out_lens) {
  const int B = src->batch;
  relcl_decoder *d = NULL;
  /* row j of the decoder decodes sentence act[j] */
  int32_t *tok = malloc((size_t)B * sizeof *tok), *next = malloc((size_t)B * sizeof *next);
  int32_t *act = malloc((size_t)B * sizeof *act), *kept = malloc((size_t)B * sizeof *kept);
  char *done = calloc((size_t)B, 1);
  relcl_status st = RELCL_OK;
  if (tok == NULL || next == NULL || act == NULL || kept == NULL || done == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  if ((st = relcl_decoder_create(m, src, 1, max_out, &d)) != RELCL_OK) goto fail;
  relcl__panels_keep(m->ctx, m->arena[RELCL_ARENA_PARAMS]); /* as relcl_model_beam_search */
  for (size_t i = 0; i < (size_t)B * max_out; i++) out[i] = RELCL_PAD_ID;
  for (int b = 0; b < B; b++) {
    out_lens[b] = max_out;
    tok[b] = RELCL_BOS_ID;
    act[b] = b;
  }
  int rows = B;
  for (int t = 0; t < max_out; t++) {
    if ((st = relcl_decoder_step(d, tok)) != RELCL_OK ||
        (st = relcl_decoder_argmax(d, next)) != RELCL_OK)
      goto fail;
    int n_kept = 0;
    for (int j = 0; j < rows; j++) {
      const int b = act[j];
      tok[j] = next[j];
      if (done[b]) continue;
      out[(size_t)b * max_out + t] = next[j];
      if (next[j] == RELCL_EOS_ID) {
        done[b] = 1;
        out_lens[b] = t;
      } else {
        kept[n_kept++] = j;
      }
    }
    if (n_kept == 0) break;
    if (!relcl__decode_compact(rows, n_kept)) continue;
    for (int j = 0; j < n_kept; j++) { /* rows only move down */
      act[j] = act[kept[j]];
      tok[j] = tok[kept[j]];
    }
    if ((st = relcl_decoder_select(d, n_kept, kept, kept)) != RELCL_OK) goto fail;
    rows = n_kept;
  }
fail:
  relcl__panels_drop(m->ctx);
  relcl_decoder_destroy(d);
  free(tok);
  free(next);
  free(act);
  free(kept);
  free(done);
  return st;
}

relcl_status relcl_model_greedy(relcl_model *m, const relcl_model_batch *src, int max_out,
                                int32_t *out, int32_t *out_lens) {
  relcl__clear_error();
  static const char op[] = "relcl_model_greedy";
  relcl_status st = relcl__model_check_src(m, src, op);
  if (st != RELCL_OK) return st;
  if (max_out < 1 || out == NULL || out_lens == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: max_out=%d must be > 0; out and out_lens "
                       "are required", op, max_out);
  if ((double)src->batch * (max_out + 1) * m->cfg.d_model * 4 > 4e9)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: batch * max_out too large", op);
  return relcl__decode_greedy(m, src, max_out, out, out_lens);
}
