/* The Transformer's passes on the device: the activation layout for a batch shape, the
 * encoder and decoder forward, the output projection fused with the loss, the backward in
 * reverse, and greedy decoding. Every step is a relcl_layers.h op, relcl_attn_* or a GEMM;
 * nothing is read back to the host inside a pass but the loss sums at its end.
 *
 * Shapes (B batch, S source and T target length, D d_model, H heads, dh = D/H, F d_ff,
 * V vocab; Ns = B S and Nt = B T rows):
 *   encoder activations (Ns, D), decoder (Nt, D), attention Q|K|V in head layout
 *   (B, H, n, dh), weights (B, H, nq, nk), FFN hidden (rows, F), logits (chunk, V).
 * Residual blocks (Vaswani et al. 2017; pre-norm as in Wang et al. 2019):
 *   post-norm  y = LN(x + dropout(F(x)))
 *   pre-norm   y = x + dropout(F(LN(x)))     and a final LN after the last layer.
 */
#include "model_internal.h"
#include "ops.h"
#include "relcl_data.h"
#include "relcl_layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LOGIT_FLOATS = 1 << 23 }; /* logits computed per chunk of rows: at most 32 MB */
static const float LN_EPS = RELCL__LN_EPS;

/* Dropout streams: stream = ((step * 256 + micro) * 64 + layer) * 16 + site, so every mask
 * of a step is distinct and the same on every run and device. Layers: encoder 0..30,
 * decoder 31..61, embeddings 63. */
enum { LAYER_DEC0 = 31, LAYER_EMB = 63 };
enum {
  SITE_SRC_EMB = 0, /* with LAYER_EMB */
  SITE_TGT_EMB = 1,
  SITE_SELF_W = 1, /* attention weights of self-attention */
  SITE_SELF_R = 2, /* residual branch of self-attention */
  SITE_CROSS_W = 3,
  SITE_CROSS_R = 4,
  SITE_FFN_R = 5,
};

/* ---- layout ---- */

static size_t take(size_t *used, size_t n) {
  size_t off = RELCL__ALIGN_UP(*used); /* model_internal.h */
  *used = off + n;
  return off;
}

void relcl__model_layout_free(relcl__layout *lay) {
  free(lay->enc);
  free(lay->dec);
  lay->enc = lay->dec = NULL;
}

/* *mem replaced by a new buffer of n elements, zeroed once */
static relcl_status fresh(relcl_context *ctx, cl_mem *mem, size_t *cap, size_t n) {
  if (*mem) clReleaseMemObject(*mem);
  *mem = NULL;
  *cap = 0;
  relcl_status st = relcl_alloc(ctx, n, mem);
  if (st == RELCL_OK) st = relcl__fill(ctx, relcl_buf_at(*mem, 0), 0.0f, n);
  if (st == RELCL_OK) *cap = n;
  return st;
}

/* Grow a buffer to n elements (never shrinks). A buffer that grows grows by a quarter at
 * least: real batches ask for a little more now and then (the activations of the issue-8
 * model, about 400 MB, grew 4 times and the work space twice in 60 steps of the bundled
 * data, each time reallocated and zeroed), and the quarter covers what followed. Where the
 * device has no room for the quarter, exactly n. */
static relcl_status ensure(relcl_context *ctx, cl_mem *mem, size_t *cap, size_t n) {
  if (*mem && *cap >= n) return RELCL_OK;
  const size_t grown = *mem && n < *cap + *cap / 4 ? *cap + *cap / 4 : n;
  relcl_status st = fresh(ctx, mem, cap, grown);
  if (st == RELCL_ERR_OUT_OF_MEMORY && grown > n) {
    relcl__clear_error();
    st = fresh(ctx, mem, cap, n);
  }
  return st;
}

static void block_common(size_t *act, size_t rows, size_t D, bool pre, size_t x_in,
                         relcl__block_a *b) {
  b->x_in = x_in;
  if (pre) {
    b->ln_x = x_in;
    b->sub_in = take(act, rows * D);
  } else {
    b->ln_x = take(act, rows * D);
    b->sub_in = x_in;
  }
  b->mean = take(act, rows);
  b->rstd = take(act, rows);
  b->out = take(act, rows * D);
  b->keep = take(act, relcl__keep_words(rows * D));
  b->qkv_h = b->probs = b->zm = b->h = b->saved = RELCL__NONE;
}

/* Floats of a self-attention's saved state (ops.h) at n positions, as attn_desc describes it
 * (per_head changes nothing here); cross attention's, relative terms off: nq x nk weights */
static size_t self_saved(const relcl_model_config *c, int B, int n, bool decoder) {
  relcl_attn_desc d = relcl_attn_desc_self(B, c->heads, n, c->d_model / c->heads, c->max_rel);
  d.relative = (c->positions & RELCL_POS_RELATIVE) != 0;
  d.keys_only = c->rel_keys_only;
  d.causal = decoder;
  return relcl_attn_saved_size(&d);
}

relcl_status relcl__model_layout(relcl_model *m, int B, int S, int T) {
  const relcl_model_config *c = &m->cfg;
  relcl__layout *L = &m->lay;
  if (L->enc == NULL) {
    L->enc = calloc(2 * (size_t)c->enc_layers, sizeof *L->enc);
    L->dec = calloc(3 * (size_t)c->dec_layers, sizeof *L->dec);
    if (L->enc == NULL || L->dec == NULL)
      return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  const size_t D = (size_t)c->d_model, H = (size_t)c->heads;
  /* the feed-forward's hidden rows, padded where rows d_ff floats apart would share L1's sets
   * (relcl__act_ld: the issue-8 model's 1024 on AVX2 CPUs, 1040) */
  const size_t Fld = relcl__act_ld(m->ctx, (size_t)c->d_ff);
  L->f_ld = Fld;
  const size_t V = (size_t)c->vocab;
  const size_t Ns = (size_t)B * S, Nt = (size_t)B * T, R = Ns > Nt ? Ns : Nt;
  const bool pre = c->pre_norm != 0;
  L->B = B;
  L->S = S;
  L->T = T;
  size_t act = 0, work = 0, ids = 0;

  L->enc_x0 = take(&act, Ns * D);
  L->enc_keep = take(&act, relcl__keep_words(Ns * D));
  size_t x = L->enc_x0;
  for (int l = 0; l < c->enc_layers; l++) {
    relcl__block_a *sa = &L->enc[2 * l], *ff = &L->enc[2 * l + 1];
    block_common(&act, Ns, D, pre, x, sa);
    sa->qkv_h = take(&act, 3 * Ns * D);
    sa->probs = take(&act, (size_t)B * H * S * S);
    sa->saved = take(&act, self_saved(c, B, S, false));
    sa->zm = take(&act, Ns * D);
    block_common(&act, Ns, D, pre, sa->out, ff);
    ff->h = take(&act, Ns * Fld);
    x = ff->out;
  }
  L->enc_mean = L->enc_rstd = RELCL__NONE;
  if (pre) {
    L->enc_out = take(&act, Ns * D);
    L->enc_mean = take(&act, Ns);
    L->enc_rstd = take(&act, Ns);
  } else {
    L->enc_out = x;
  }

  L->dec_x0 = take(&act, Nt * D);
  L->dec_keep = take(&act, relcl__keep_words(Nt * D));
  x = L->dec_x0;
  for (int l = 0; l < c->dec_layers; l++) {
    relcl__block_a *sa = &L->dec[3 * l], *ca = &L->dec[3 * l + 1], *ff = &L->dec[3 * l + 2];
    block_common(&act, Nt, D, pre, x, sa);
    sa->qkv_h = take(&act, 3 * Nt * D);
    sa->probs = take(&act, (size_t)B * H * T * T);
    sa->saved = take(&act, self_saved(c, B, T, true));
    sa->zm = take(&act, Nt * D);
    block_common(&act, Nt, D, pre, sa->out, ca);
    ca->qkv_h = take(&act, Nt * D + 2 * Ns * D);
    ca->probs = take(&act, (size_t)B * H * T * S);
    ca->saved = take(&act, (size_t)B * H * T * S);
    ca->zm = take(&act, Nt * D);
    block_common(&act, Nt, D, pre, ca->out, ff);
    ff->h = take(&act, Nt * Fld);
    x = ff->out;
  }
  L->dec_mean = L->dec_rstd = RELCL__NONE;
  if (pre) {
    L->dec_out = take(&act, Nt * D);
    L->dec_mean = take(&act, Nt);
    L->dec_rstd = take(&act, Nt);
  } else {
    L->dec_out = x;
  }

  L->qkv = take(&work, 3 * R * D);
  L->zh = take(&work, R * D);
  L->a = take(&work, R * D);
  L->dzm = take(&work, R * D);
  L->dh = take(&work, R * Fld);
  L->g0 = take(&work, R * D);
  L->g1 = take(&work, R * D);
  L->d_enc = take(&work, Ns * D);
  L->d_emb = take(&work, (Ns + Nt) * D);
  /* greedy decoding needs one row per sequence in one chunk */
  size_t lr = LOGIT_FLOATS / V;
  if (lr < (size_t)B) lr = (size_t)B;
  L->logit_rows = lr > Nt ? Nt : lr;
  L->logits = take(&work, L->logit_rows * V);
  L->losses = take(&work, 2 * Nt);

  L->src = take(&ids, Ns);
  L->tgt_in = take(&ids, Nt);
  L->tgt_out = take(&ids, Nt);
  L->src_lens = take(&ids, (size_t)B);
  L->tgt_lens = take(&ids, (size_t)B);
  L->csr_tok = take(&ids, Ns + Nt);
  L->csr_ofs = take(&ids, Ns + Nt + 1);
  L->csr_pos = take(&ids, Ns + Nt);
  L->argmax = take(&ids, (size_t)B);

  L->act_floats = act;
  L->work_floats = work;
  L->ids_ints = ids;
  if (act >= ((size_t)1 << 32) || work >= ((size_t)1 << 32))
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "batch of %d x (%d, %d) needs over 2^32 activation floats: use smaller "
                       "batches",
                       B, S, T);
  relcl_status st = ensure(m->ctx, &m->act, &m->act_cap, act);
  if (st == RELCL_OK) st = ensure(m->ctx, &m->work, &m->work_cap, work);
  if (st == RELCL_OK) st = ensure(m->ctx, &m->ids, &m->ids_cap, ids);
  if (st == RELCL_OK && m->h_ids_cap < ids) {
    int32_t *h = realloc(m->h_ids, ids * sizeof *h);
    if (h == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    m->h_ids = h;
    m->h_ids_cap = ids;
  }
  return st;
}

/* ---- upload ---- */

relcl_status relcl__model_upload(relcl_model *m, const relcl_model_batch *b, bool with_tgt,
                                 bool with_index, int *n_tokens) {
  const relcl__layout *L = &m->lay;
  const size_t Ns = (size_t)b->batch * b->src_len;
  const size_t Nt = with_tgt ? (size_t)b->batch * b->tgt_len : 0;
  int32_t *h = m->h_ids;
  memcpy(h + L->src, b->src, Ns * sizeof *h);
  memcpy(h + L->src_lens, b->src_lens, (size_t)b->batch * sizeof *h);
  size_t used = L->src_lens + (size_t)b->batch;
  if (with_tgt) {
    memcpy(h + L->tgt_in, b->tgt_in, Nt * sizeof *h);
    memcpy(h + L->tgt_out, b->tgt_out, Nt * sizeof *h);
    memcpy(h + L->tgt_lens, b->tgt_lens, (size_t)b->batch * sizeof *h);
    used = L->tgt_lens + (size_t)b->batch;
  }
  *n_tokens = 0;
  if (with_index) {
    /* positions of the embedded rows: sources first, then targets; padding left out (its
     * gradient is exactly zero: masked keys, ignored targets) */
    int32_t *ids = malloc((Ns + Nt) * sizeof *ids);
    if (ids == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int i = 0; i < b->batch; i++) {
      for (int t = 0; t < b->src_len; t++) {
        size_t p = (size_t)i * b->src_len + t;
        ids[p] = t < b->src_lens[i] ? b->src[p] : -1;
      }
      for (int t = 0; t < b->tgt_len; t++) {
        size_t p = (size_t)i * b->tgt_len + t;
        ids[Ns + p] = t < b->tgt_lens[i] ? b->tgt_in[p] : -1;
      }
    }
    relcl_status st = relcl_embedding_index(ids, (int)(Ns + Nt), m->cfg.vocab, h + L->csr_tok,
                                            h + L->csr_ofs, h + L->csr_pos, n_tokens);
    free(ids);
    if (st != RELCL_OK) return st;
    used = L->csr_pos + Ns + Nt;
  }
  return relcl__write(m->ctx, relcl_buf_at(m->ids, 0), h, used);
}

/* ---- one pass ---- */

typedef struct pass {
  relcl_model *m;
  relcl_context *ctx;
  const relcl__layout *L;
  int B, S, T, D, H, dh, F, V;
  size_t Ns, Nt;
  bool train, pre;
  float p; /* dropout: 0 unless training */
  uint64_t seed, step;
  int micro;
} pass;

static relcl_buf P(const pass *p, size_t off) {
  return relcl_buf_at(p->m->arena[RELCL_ARENA_PARAMS], off);
}
static relcl_buf G(const pass *p, size_t off) {
  return relcl_buf_at(p->m->arena[RELCL_ARENA_GRADS], off);
}
static relcl_buf A(const pass *p, size_t off) { return relcl_buf_at(p->m->act, off); }
static relcl_buf W(const pass *p, size_t off) { return relcl_buf_at(p->m->work, off); }
static relcl_buf I(const pass *p, size_t off) { return relcl_buf_at(p->m->ids, off); }
static relcl_buf opt(relcl_buf b, size_t off) {
  return off == RELCL__NONE ? RELCL_BUF_NONE : relcl_buf_at(b.mem, off);
}

static uint64_t stream_of(const pass *p, int layer, int site) {
  return ((p->step * 256 + (uint64_t)p->micro) * 64 + (uint64_t)layer) * 16 + (uint64_t)site;
}

typedef enum { SUB_SELF, SUB_CROSS, SUB_FFN } sub_kind;

typedef struct block_desc {
  sub_kind kind;
  const relcl__attn_p *attn;
  const relcl__ffn_p *ffn;
  const relcl__ln_p *ln;
  bool decoder;
  int layer, site_w, site_r;
} block_desc;

static int rows_of(const pass *p, const block_desc *bd) {
  return (int)(bd->decoder ? p->Nt : p->Ns);
}

static relcl_attn_desc attn_desc(const pass *p, const block_desc *bd) {
  const relcl_model_config *c = &p->m->cfg;
  relcl_attn_desc d;
  if (bd->kind == SUB_CROSS) {
    d = relcl_attn_desc_cross(p->B, p->H, p->T, p->S, p->dh);
  } else {
    const int n = bd->decoder ? p->T : p->S;
    d = relcl_attn_desc_self(p->B, p->H, n, p->dh, c->max_rel);
    d.relative = bd->attn->rel_k != RELCL__NONE;
    d.per_head = c->rel_per_head;
    d.keys_only = c->rel_keys_only;
    d.causal = bd->decoder;
  }
  d.dropout = p->p;
  d.seed = p->seed;
  d.stream = stream_of(p, bd->layer, bd->site_w);
  return d;
}

/* key lengths: the source for encoder self-attention and cross attention */
static relcl_buf key_len(const pass *p, const block_desc *bd) {
  return I(p, bd->decoder && bd->kind == SUB_SELF ? p->L->tgt_lens : p->L->src_lens);
}

#define TRY(call)                          \
  do {                                     \
    relcl_status st_ = (call);             \
    if (st_ != RELCL_OK) return st_;       \
  } while (0)

/* a = F(u) - b into the work region `a`, *b the bias of F's last linear layer: block_fwd
 * adds it in the pass that applies dropout and the residual. */
static relcl_status sub_fwd(const pass *p, const block_desc *bd, const relcl__block_a *ba,
                            relcl_buf u, relcl_buf *b) {
  const relcl__layout *L = p->L;
  const int D = p->D, N = rows_of(p, bd), H = p->H, dh = p->dh;
  const size_t ND = (size_t)N * D;
  relcl_buf out = W(p, L->a);
  if (bd->kind == SUB_FFN) {
    const relcl__ffn_p *f = bd->ffn;
    TRY(relcl__linear_relu_forward(p->ctx, N, D, p->F, u, P(p, f->w1), P(p, f->b1),
                                   A(p, ba->h), L->f_ld));
    *b = P(p, f->b2);
    return relcl__linear_forward_ld(p->ctx, N, p->F, D, A(p, ba->h), L->f_ld, P(p, f->w2),
                                    RELCL_BUF_NONE, out);
  }
  const relcl__attn_p *ap = bd->attn;
  relcl_attn_desc desc = attn_desc(p, bd);
  size_t q = ba->qkv_h, k, v;
  /* q, k, v in the heads layout, each after the other, as the projections store them */
  if (bd->kind == SUB_SELF) {
    TRY(relcl__linear_forward_heads(p->ctx, N, D, 3 * D, u, P(p, ap->wq), P(p, ap->bq), A(p, q),
                                    desc.nq, H, dh));
    k = q + ND;
    v = k + ND;
  } else {
    const size_t DD = (size_t)D * D, NsD = p->Ns * D;
    TRY(relcl__linear_forward_heads(p->ctx, N, D, D, u, P(p, ap->wq), P(p, ap->bq), A(p, q),
                                    p->T, H, dh));
    k = q + ND;
    v = k + NsD;
    TRY(relcl__linear_forward_heads(p->ctx, (int)p->Ns, D, 2 * D, A(p, L->enc_out),
                                    P(p, ap->wq + DD), P(p, ap->bq + (size_t)D), A(p, k), p->S,
                                    H, dh));
  }
  /* Z straight into the merged layout the output projection reads (ops.h) */
  TRY(relcl__attn_forward(p->ctx, &desc, A(p, q), A(p, k), A(p, v),
                         opt(P(p, 0), ap->rel_k), opt(P(p, 0), ap->rel_v), key_len(p, bd),
                         A(p, ba->zm), (size_t)D, A(p, ba->probs), A(p, ba->saved)));
  *b = P(p, ap->bo);
  return relcl__linear_forward(p->ctx, N, D, D, A(p, ba->zm), P(p, ap->wo), RELCL_BUF_NONE, out);
}

/* The gradient of a sublayer's output bias (its output projection's): where block_bwd sums it
 * in layer norm's backward pass, sub_bwd leaves it out */
static relcl_buf out_bias_grad(const pass *p, const block_desc *bd) {
  return bd->kind == SUB_FFN ? G(p, bd->ffn->b2) : G(p, bd->attn->bo);
}

/* dx (= or += by acc) = the gradient through F of da (work region `a`), with F's
 * parameter gradients added to the gradient arena, its output bias's only with out_db. */
static relcl_status sub_bwd(const pass *p, const block_desc *bd, const relcl__block_a *ba,
                            relcl_buf u, relcl_buf dx, int acc, bool out_db) {
  const relcl__layout *L = p->L;
  const int D = p->D, N = rows_of(p, bd), B = p->B, H = p->H, dh = p->dh;
  const size_t ND = (size_t)N * D;
  relcl_buf da = W(p, L->a);
  if (bd->kind == SUB_FFN) {
    const relcl__ffn_p *f = bd->ffn;
    relcl_buf dh_ = W(p, L->dh);
    TRY(relcl__relu_linear_backward(p->ctx, N, p->F, D, A(p, ba->h), P(p, f->w2), da, dh_,
                                   L->f_ld, G(p, f->w2),
                                   out_db ? G(p, f->b2) : RELCL_BUF_NONE));
    return relcl__linear_backward_ld(p->ctx, N, D, p->F, u, P(p, f->w1), dh_, L->f_ld, dx, acc,
                                     G(p, f->w1), G(p, f->b1));
  }
  const relcl__attn_p *ap = bd->attn;
  relcl_attn_desc desc = attn_desc(p, bd);
  TRY(relcl__linear_backward_heads(p->ctx, N, D, D, A(p, ba->zm), P(p, ap->wo), da,
                                   W(p, L->zh), desc.nq, H, dh, G(p, ap->wo),
                                   out_db ? G(p, ap->bo) : RELCL_BUF_NONE));
  const size_t nkD = (size_t)B * desc.nk * D;
  const size_t q = ba->qkv_h, k = q + ND, v = k + nkD;
  const relcl_buf qkv = W(p, L->qkv);
  const size_t Dz = (size_t)D;
  if (bd->kind == SUB_SELF) {
    /* dq, dk, dv straight into their columns of the merged (N x 3D) gradient */
    TRY(relcl__attn_backward(p->ctx, &desc, A(p, q), A(p, k), A(p, v), opt(P(p, 0), ap->rel_k),
                            opt(P(p, 0), ap->rel_v), key_len(p, bd), A(p, ba->probs),
                            A(p, ba->saved), W(p, L->zh), qkv, 3 * Dz,
                            relcl_buf_at(qkv.mem, qkv.offset + Dz),
                            relcl_buf_at(qkv.mem, qkv.offset + 2 * Dz), 3 * Dz,
                            opt(G(p, 0), ap->rel_k), opt(G(p, 0), ap->rel_v)));
    return relcl__linear_backward(p->ctx, N, D, 3 * D, u, P(p, ap->wq), qkv, dx, acc,
                                 G(p, ap->wq), G(p, ap->bq));
  }
  /* cross attention: dq merged into dzm (free: dz went to zh), dk and dv side by side
   * into the merged (Ns x 2D) gradient of the encoder's projection */
  const relcl_buf dqm = W(p, L->dzm);
  TRY(relcl__attn_backward(p->ctx, &desc, A(p, q), A(p, k), A(p, v), opt(P(p, 0), ap->rel_k),
                          opt(P(p, 0), ap->rel_v), key_len(p, bd), A(p, ba->probs),
                          A(p, ba->saved), W(p, L->zh), dqm, Dz, qkv,
                          relcl_buf_at(qkv.mem, qkv.offset + Dz), 2 * Dz, opt(G(p, 0), ap->rel_k),
                          opt(G(p, 0), ap->rel_v)));
  const size_t DD = Dz * Dz;
  TRY(relcl__linear_backward(p->ctx, N, D, D, u, P(p, ap->wq), dqm, dx, acc, G(p, ap->wq),
                            G(p, ap->bq)));
  return relcl__linear_backward(p->ctx, (int)p->Ns, D, 2 * D, A(p, L->enc_out),
                               P(p, ap->wq + DD), qkv, W(p, L->d_enc), 1,
                               G(p, ap->wq + DD), G(p, ap->bq + (size_t)D));
}

static relcl_status block_fwd(const pass *p, const block_desc *bd, const relcl__block_a *ba) {
  const int N = rows_of(p, bd), D = p->D;
  const uint64_t stream = stream_of(p, bd->layer, bd->site_r);
  const relcl__ln_p *ln = bd->ln;
  relcl_buf b;
  if (p->pre) {
    TRY(relcl__layernorm_forward(p->ctx, N, D, LN_EPS, A(p, ba->x_in), P(p, ln->g), P(p, ln->b),
                                A(p, ba->sub_in), A(p, ba->mean), A(p, ba->rstd)));
    TRY(sub_fwd(p, bd, ba, A(p, ba->sub_in), &b));
    return relcl__bias_dropout_residual(p->ctx, N, D, p->p, p->seed, stream, W(p, p->L->a), b,
                                        A(p, ba->x_in), A(p, ba->out), A(p, ba->keep));
  }
  TRY(sub_fwd(p, bd, ba, A(p, ba->x_in), &b));
  return relcl__bias_dropout_residual_layernorm(p->ctx, N, D, LN_EPS, p->p, p->seed, stream,
                                                W(p, p->L->a), b, A(p, ba->x_in),
                                                A(p, ba->ln_x), A(p, ba->keep), P(p, ln->g),
                                                P(p, ln->b), A(p, ba->out), A(p, ba->mean),
                                                A(p, ba->rstd));
}

/* *g holds the gradient of the block's output; on return, of its input (the two buffers
 * may have been swapped). */
static relcl_status block_bwd(const pass *p, const block_desc *bd, const relcl__block_a *ba,
                              relcl_buf *g, relcl_buf *t) {
  const int N = rows_of(p, bd), D = p->D;
  const size_t n = (size_t)N * D;
  const uint64_t stream = stream_of(p, bd->layer, bd->site_r);
  const relcl__ln_p *ln = bd->ln;
  relcl_buf da = W(p, p->L->a);
  if (p->pre) {
    TRY(relcl__dropout_backward(p->ctx, n, p->p, p->seed, stream, *g, da, 0, A(p, ba->keep)));
    TRY(sub_bwd(p, bd, ba, A(p, ba->sub_in), *t, 0, true));
    return relcl__layernorm_backward(p->ctx, N, D, A(p, ba->x_in), P(p, ln->g), A(p, ba->mean),
                                    A(p, ba->rstd), *t, *g, 1, G(p, ln->g), G(p, ln->b));
  }
  TRY(relcl__layernorm_dropout_backward(p->ctx, N, D, A(p, ba->ln_x), P(p, ln->g),
                                       A(p, ba->mean), A(p, ba->rstd), *g, *t, G(p, ln->g),
                                       G(p, ln->b), p->p, p->seed, stream, A(p, ba->keep), da,
                                       out_bias_grad(p, bd)));
  TRY(sub_bwd(p, bd, ba, A(p, ba->x_in), *t, 1, false));
  relcl_buf s = *g;
  *g = *t;
  *t = s;
  return RELCL_OK;
}

static block_desc enc_block(const relcl_model *m, int l, int which) {
  block_desc bd;
  memset(&bd, 0, sizeof bd);
  bd.layer = l;
  if (which == 0) {
    bd.kind = SUB_SELF;
    bd.attn = &m->enc[l].self;
    bd.ln = &m->enc[l].n1;
    bd.site_w = SITE_SELF_W;
    bd.site_r = SITE_SELF_R;
  } else {
    bd.kind = SUB_FFN;
    bd.ffn = &m->enc[l].ffn;
    bd.ln = &m->enc[l].n2;
    bd.site_r = SITE_FFN_R;
  }
  return bd;
}

static block_desc dec_block(const relcl_model *m, int l, int which) {
  block_desc bd;
  memset(&bd, 0, sizeof bd);
  bd.layer = LAYER_DEC0 + l;
  bd.decoder = true;
  if (which == 0) {
    bd.kind = SUB_SELF;
    bd.attn = &m->dec[l].self;
    bd.ln = &m->dec[l].n1;
    bd.site_w = SITE_SELF_W;
    bd.site_r = SITE_SELF_R;
  } else if (which == 1) {
    bd.kind = SUB_CROSS;
    bd.attn = &m->dec[l].cross;
    bd.ln = &m->dec[l].n2;
    bd.site_w = SITE_CROSS_W;
    bd.site_r = SITE_CROSS_R;
  } else {
    bd.kind = SUB_FFN;
    bd.ffn = &m->dec[l].ffn;
    bd.ln = &m->dec[l].n3;
    bd.site_r = SITE_FFN_R;
  }
  return bd;
}

/* x0 = dropout(sqrt(D) E[ids] (+ PE)), its keep bits at keep */
static relcl_status embed_fwd(const pass *p, size_t ids, int n, size_t x0, size_t keep,
                              int site) {
  const relcl_model_config *c = &p->m->cfg;
  const int rows = p->B * n;
  const uint64_t stream = stream_of(p, LAYER_EMB, site);
  if (!(c->positions & RELCL_POS_ABSOLUTE)) /* the dropout in the lookup's launch */
    return relcl__embedding_dropout_forward(p->ctx, rows, p->D, p->V, I(p, ids),
                                            P(p, p->m->emb), sqrtf((float)p->D), p->p,
                                            p->seed, stream, A(p, x0), A(p, keep));
  TRY(relcl__embedding_forward(p->ctx, rows, p->D, p->V, I(p, ids), P(p, p->m->emb),
                              sqrtf((float)p->D), A(p, x0)));
  TRY(relcl__posenc_add(p->ctx, A(p, x0), p->B, n, p->D, 0));
  if (p->p > 0.0f)
    TRY(relcl__dropout_forward(p->ctx, (size_t)rows * p->D, p->p, p->seed, stream, A(p, x0),
                              RELCL_BUF_NONE, A(p, x0), A(p, keep)));
  return RELCL_OK;
}

static relcl_status encoder_fwd(const pass *p) {
  const relcl_model *m = p->m;
  const relcl__layout *L = p->L;
  TRY(embed_fwd(p, L->src, p->S, L->enc_x0, L->enc_keep, SITE_SRC_EMB));
  for (int l = 0; l < m->cfg.enc_layers; l++)
    for (int w = 0; w < 2; w++) {
      block_desc bd = enc_block(m, l, w);
      TRY(block_fwd(p, &bd, &L->enc[2 * l + w]));
    }
  if (p->pre)
    TRY(relcl__layernorm_forward(p->ctx, (int)p->Ns, p->D, LN_EPS,
                                A(p, L->enc[2 * m->cfg.enc_layers - 1].out),
                                P(p, m->enc_norm.g), P(p, m->enc_norm.b), A(p, L->enc_out),
                                A(p, L->enc_mean), A(p, L->enc_rstd)));
  return RELCL_OK;
}

static relcl_status decoder_fwd(const pass *p) {
  const relcl_model *m = p->m;
  const relcl__layout *L = p->L;
  TRY(embed_fwd(p, L->tgt_in, p->T, L->dec_x0, L->dec_keep, SITE_TGT_EMB));
  for (int l = 0; l < m->cfg.dec_layers; l++)
    for (int w = 0; w < 3; w++) {
      block_desc bd = dec_block(m, l, w);
      TRY(block_fwd(p, &bd, &L->dec[3 * l + w]));
    }
  if (p->pre)
    TRY(relcl__layernorm_forward(p->ctx, (int)p->Nt, p->D, LN_EPS,
                                A(p, L->dec[3 * m->cfg.dec_layers - 1].out),
                                P(p, m->dec_norm.g), P(p, m->dec_norm.b), A(p, L->dec_out),
                                A(p, L->dec_mean), A(p, L->dec_rstd)));
  return RELCL_OK;
}

/* logits = dec_out E^T per chunk of rows, loss (and, training, d dec_out into g and
 * dE += dlogits^T dec_out); the sums of the (loss, nll) rows into stats[0..1]. */
static relcl_status output_and_loss(const pass *p, relcl_buf d_out) {
  const relcl_model *m = p->m;
  const relcl__layout *L = p->L;
  const size_t D = (size_t)p->D, V = (size_t)p->V, Nt = p->Nt;
  const float eps = m->cfg.label_smoothing;
  for (size_t r0 = 0; r0 < Nt; r0 += L->logit_rows) {
    const size_t nr = Nt - r0 < L->logit_rows ? Nt - r0 : L->logit_rows;
    relcl_buf x = A(p, L->dec_out + r0 * D), z = W(p, L->logits);
    TRY(relcl__gemm(p->ctx, false, true, nr, V, D, 1.0f, x, D, 0, P(p, m->emb), D, 0, 0.0f, z,
                    V, 0, 1));
    TRY(relcl__xent_forward_backward(p->ctx, (int)nr, p->V, eps, RELCL_PAD_ID, z,
                                    I(p, L->tgt_out + r0), 1.0f,
                                    p->train ? z : RELCL_BUF_NONE, W(p, L->losses + 2 * r0)));
    if (!p->train) continue;
    TRY(relcl__gemm(p->ctx, false, false, nr, D, V, 1.0f, z, V, 0, P(p, m->emb), D, 0, 0.0f,
                    relcl_buf_at(d_out.mem, d_out.offset + r0 * D), D, 0, 1));
    TRY(relcl__gemm(p->ctx, true, false, V, D, nr, 1.0f, z, V, 0, x, D, 0, 1.0f, G(p, m->emb),
                    D, 0, 1));
  }
  return relcl__colsum(p->ctx, (int)Nt, 2, W(p, L->losses), 2, relcl_buf_at(m->stats, 0), 0);
}

static relcl_status backward(const pass *p, int n_tokens) {
  const relcl_model *m = p->m;
  const relcl__layout *L = p->L;
  const size_t D = (size_t)p->D;
  relcl_buf g = W(p, L->g0), t = W(p, L->g1);
  /* decoder: g holds d dec_out from the loss */
  if (p->pre) {
    TRY(relcl__layernorm_backward(p->ctx, (int)p->Nt, p->D,
                                 A(p, L->dec[3 * m->cfg.dec_layers - 1].out),
                                 P(p, m->dec_norm.g), A(p, L->dec_mean), A(p, L->dec_rstd), g, t,
                                 0, G(p, m->dec_norm.g), G(p, m->dec_norm.b)));
    relcl_buf s = g;
    g = t;
    t = s;
  }
  TRY(relcl__fill(p->ctx, W(p, L->d_enc), 0.0f, p->Ns * D));
  for (int l = m->cfg.dec_layers - 1; l >= 0; l--)
    for (int w = 2; w >= 0; w--) {
      block_desc bd = dec_block(m, l, w);
      TRY(block_bwd(p, &bd, &L->dec[3 * l + w], &g, &t));
    }
  TRY(relcl__dropout_backward(p->ctx, p->Nt * D, p->p, p->seed,
                             stream_of(p, LAYER_EMB, SITE_TGT_EMB), g,
                             W(p, L->d_emb + p->Ns * D), 0, A(p, L->dec_keep)));
  /* encoder: d enc_out was summed over the decoder layers' cross attention */
  if (p->pre) {
    g = W(p, L->g0);
    t = W(p, L->g1);
    TRY(relcl__layernorm_backward(p->ctx, (int)p->Ns, p->D,
                                 A(p, L->enc[2 * m->cfg.enc_layers - 1].out),
                                 P(p, m->enc_norm.g), A(p, L->enc_mean), A(p, L->enc_rstd),
                                 W(p, L->d_enc), g, 0, G(p, m->enc_norm.g),
                                 G(p, m->enc_norm.b)));
  } else {
    g = W(p, L->d_enc);
    t = W(p, L->g0);
  }
  for (int l = m->cfg.enc_layers - 1; l >= 0; l--)
    for (int w = 1; w >= 0; w--) {
      block_desc bd = enc_block(m, l, w);
      TRY(block_bwd(p, &bd, &L->enc[2 * l + w], &g, &t));
    }
  TRY(relcl__dropout_backward(p->ctx, p->Ns * D, p->p, p->seed,
                             stream_of(p, LAYER_EMB, SITE_SRC_EMB), g, W(p, L->d_emb), 0,
                             A(p, L->enc_keep)));
  return relcl__embedding_backward(p->ctx, n_tokens, p->D, p->V, I(p, L->csr_tok),
                                  I(p, L->csr_ofs), I(p, L->csr_pos), W(p, L->d_emb),
                                  sqrtf((float)p->D), G(p, m->emb));
}

static pass make_pass(relcl_model *m, int B, int S, int T, bool train, uint64_t seed,
                      uint64_t step, int micro) {
  pass p;
  memset(&p, 0, sizeof p);
  p.m = m;
  p.ctx = m->ctx;
  p.L = &m->lay;
  p.B = B;
  p.S = S;
  p.T = T;
  p.D = m->cfg.d_model;
  p.H = m->cfg.heads;
  p.dh = p.D / p.H;
  p.F = m->cfg.d_ff;
  p.V = m->cfg.vocab;
  p.Ns = (size_t)B * S;
  p.Nt = (size_t)B * T;
  p.train = train;
  p.pre = m->cfg.pre_norm != 0;
  p.p = train ? m->cfg.dropout : 0.0f;
  p.seed = seed;
  p.step = step;
  p.micro = micro;
  return p;
}

/* The weights a pass multiplies as x W^T (every linear layer's, the output layer's embedding),
 * W (rows x cols) at its offset in the parameters, into list; their count */
static int bt_weights(const relcl_model *m, relcl__panel_src *list) {
  const size_t D = (size_t)m->cfg.d_model, F = (size_t)m->cfg.d_ff, DD = D * D;
  int n = 0;
#define BT(off, rows, cols) (list[n++] = (relcl__panel_src){(off), (rows), (cols)})
  for (int l = 0; l < m->cfg.enc_layers; l++) {
    const relcl__enc_p *e = &m->enc[l];
    BT(e->self.wq, 3 * D, D), BT(e->self.wo, D, D), BT(e->ffn.w1, F, D), BT(e->ffn.w2, D, F);
  }
  for (int l = 0; l < m->cfg.dec_layers; l++) {
    const relcl__dec_p *d = &m->dec[l];
    BT(d->self.wq, 3 * D, D), BT(d->self.wo, D, D), BT(d->cross.wq, D, D);
    BT(d->cross.wq + DD, 2 * D, D), BT(d->cross.wo, D, D), BT(d->ffn.w1, F, D);
    BT(d->ffn.w2, D, F);
  }
  BT(m->emb, (size_t)m->cfg.vocab, D);
#undef BT
  return n;
}

relcl_status relcl__model_run(relcl_model *m, const relcl_model_batch *b, bool train,
                              uint64_t seed, uint64_t step, int micro, int n_csr_tokens) {
  pass p = make_pass(m, b->batch, b->src_len, b->tgt_len, train, seed, step, micro);
  /* the weights' panels for the forward's products made at once (nothing writes the
   * parameters during a pass) */
  relcl__panel_src list[4 * RELCL_MODEL_MAX_LAYERS + 7 * RELCL_MODEL_MAX_LAYERS + 1];
  relcl_status st = relcl__panels_keep_all(m->ctx, m->arena[RELCL_ARENA_PARAMS], list,
                                           bt_weights(m, list));
  if (st == RELCL_OK) st = encoder_fwd(&p);
  if (st == RELCL_OK) st = decoder_fwd(&p);
  if (st == RELCL_OK) st = output_and_loss(&p, W(&p, p.L->g0));
  if (st == RELCL_OK && train) st = backward(&p, n_csr_tokens);
  relcl__panels_drop(m->ctx);
  return st;
}

relcl_status relcl__model_encode(relcl_model *m, const relcl_model_batch *src) {
  int n_tokens;
  TRY(relcl__model_layout(m, src->batch, src->src_len, 1));
  TRY(relcl__model_upload(m, src, false, false, &n_tokens));
  pass p = make_pass(m, src->batch, src->src_len, 1, false, 0, 0, 0);
  return encoder_fwd(&p);
}

/* ---- greedy decoding: the decoder reruns over the whole prefix at every step ---- */

relcl_status relcl__model_greedy_full(relcl_model *m, const relcl_model_batch *src,
                                      int max_out, int32_t *out, int32_t *out_lens) {
  const int B = src->batch, Tcap = max_out;
  relcl_status st = relcl__model_layout(m, B, src->src_len, Tcap);
  int n_tokens;
  if (st == RELCL_OK) st = relcl__model_upload(m, src, false, false, &n_tokens);
  if (st != RELCL_OK) return st;
  const relcl__layout *L = &m->lay;
  pass p = make_pass(m, B, src->src_len, 1, false, 0, 0, 0);
  TRY(encoder_fwd(&p));

  int32_t *prefix = calloc((size_t)B * Tcap, sizeof *prefix);
  int32_t *lens = malloc((size_t)B * sizeof *lens), *next = malloc((size_t)B * sizeof *next);
  char *done = calloc((size_t)B, 1);
  if (prefix == NULL || lens == NULL || next == NULL || done == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  for (size_t i = 0; i < (size_t)B * max_out; i++) out[i] = RELCL_PAD_ID;
  for (int b = 0; b < B; b++) out_lens[b] = max_out;
  int remaining = B;
  for (int t = 0; t < max_out && remaining > 0; t++) {
    const int T = t + 1;
    /* the prefix (B, T): BOS then the ids so far (finished rows repeat PAD: they are
     * no longer read) */
    for (int b = 0; b < B; b++) {
      prefix[(size_t)b * T] = RELCL_BOS_ID;
      for (int j = 1; j < T; j++) prefix[(size_t)b * T + j] = out[(size_t)b * max_out + j - 1];
      lens[b] = T;
    }
    p = make_pass(m, B, src->src_len, T, false, 0, 0, 0);
    /* the ids buffer is rewritten from offset 0 (a few KB): Oclgrind 21.10 does not see a
     * write at an offset as initializing memory, and would flag every later read */
    memcpy(m->h_ids + L->tgt_in, prefix, (size_t)B * T * sizeof *prefix);
    memcpy(m->h_ids + L->tgt_lens, lens, (size_t)B * sizeof *lens);
    if ((st = relcl__write(m->ctx, I(&p, 0), m->h_ids, L->tgt_lens + (size_t)B)) != RELCL_OK ||
        (st = decoder_fwd(&p)) != RELCL_OK)
      goto fail;
    /* logits of the last position of every row: rows T-1, 2T-1, ... (stride T D) */
    const size_t D = (size_t)p.D, V = (size_t)p.V;
    if ((st = relcl__gemm(m->ctx, false, true, (size_t)B, V, D, 1.0f,
                          A(&p, L->dec_out + (size_t)(T - 1) * D), (size_t)T * D, 0,
                          P(&p, m->emb), D, 0, 0.0f, W(&p, L->logits), V, 0, 1)) != RELCL_OK ||
        (st = relcl__argmax_rows(m->ctx, B, p.V, W(&p, L->logits), p.V, I(&p, L->argmax))) !=
            RELCL_OK ||
        (st = relcl__read(m->ctx, I(&p, L->argmax), next, (size_t)B)) != RELCL_OK)
      goto fail;
    for (int b = 0; b < B; b++) {
      if (done[b]) continue;
      out[(size_t)b * max_out + t] = next[b];
      if (next[b] == RELCL_EOS_ID) {
        done[b] = 1;
        out_lens[b] = t;
        remaining--;
      }
    }
  }
fail:
  free(prefix);
  free(lens);
  free(next);
  free(done);
  return st;
}
