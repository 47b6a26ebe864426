/* ref_model.c: the whole-model oracle (see ref_model.h). One forward pass, step by step, in
 * double, every intermediate in its own buffer; gradients by central differences of it. */
#include "ref_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "ref_layers.h"

enum { LAYER_DEC0 = 31, LAYER_EMB = 63 };
enum { SITE_SRC_EMB = 0, SITE_TGT_EMB = 1 }; /* with LAYER_EMB */
enum { SITE_SELF_W = 1, SITE_SELF_R = 2, SITE_CROSS_W = 3, SITE_CROSS_R = 4, SITE_FFN_R = 5 };
static const double LN_EPS = 1e-5; /* relcl_model.h: every layer norm */
static const int PAD = 0;

/* ---- the parameter table ---- */

static void add(ref_model *m, size_t *cap, const char *name, int ndim, size_t d0, size_t d1,
                size_t d2) {
  if (m->n_tensors == *cap) {
    *cap = *cap ? 2 * *cap : 64;
    ref_tensor *t = realloc(m->tensors, *cap * sizeof *t);
    if (!t) abort();
    m->tensors = t;
  }
  ref_tensor *t = &m->tensors[m->n_tensors++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
  t->size = d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1);
  t->offset = m->param_count;
  m->param_count += t->size;
}

static void add_ln(ref_model *m, size_t *cap, const char *prefix) {
  char n[128];
  const size_t D = (size_t)m->cfg.d_model;
  snprintf(n, sizeof n, "%s.weight", prefix), add(m, cap, n, 1, D, 0, 0);
  snprintf(n, sizeof n, "%s.bias", prefix), add(m, cap, n, 1, D, 0, 0);
}

static void add_attn(ref_model *m, size_t *cap, const char *prefix, int relative) {
  const relcl_model_config *c = &m->cfg;
  const size_t D = (size_t)c->d_model, H = (size_t)c->heads, dh = D / H;
  const size_t L = 2 * (size_t)c->max_rel + 1;
  static const char *const w[4] = {"wq", "wk", "wv", "wo"};
  char n[128];
  for (int i = 0; i < 3; i++) snprintf(n, sizeof n, "%s.%s.weight", prefix, w[i]), add(m, cap, n, 2, D, D, 0);
  for (int i = 0; i < 3; i++) snprintf(n, sizeof n, "%s.%s.bias", prefix, w[i]), add(m, cap, n, 1, D, 0, 0);
  snprintf(n, sizeof n, "%s.wo.weight", prefix), add(m, cap, n, 2, D, D, 0);
  snprintf(n, sizeof n, "%s.wo.bias", prefix), add(m, cap, n, 1, D, 0, 0);
  if (!relative) return;
  for (int kv = 0; kv < (c->rel_keys_only ? 1 : 2); kv++) {
    snprintf(n, sizeof n, "%s.%s", prefix, kv ? "rel_v" : "rel_k");
    if (c->rel_per_head)
      add(m, cap, n, 3, H, L, dh);
    else
      add(m, cap, n, 2, L, dh, 0);
  }
}

static void add_ffn(ref_model *m, size_t *cap, const char *prefix) {
  const size_t D = (size_t)m->cfg.d_model, F = (size_t)m->cfg.d_ff;
  char n[128];
  snprintf(n, sizeof n, "%s.w1.weight", prefix), add(m, cap, n, 2, F, D, 0);
  snprintf(n, sizeof n, "%s.w1.bias", prefix), add(m, cap, n, 1, F, 0, 0);
  snprintf(n, sizeof n, "%s.w2.weight", prefix), add(m, cap, n, 2, D, F, 0);
  snprintf(n, sizeof n, "%s.w2.bias", prefix), add(m, cap, n, 1, D, 0, 0);
}

int ref_model_init(ref_model *m, const relcl_model_config *cfg) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  if (cfg->d_model % cfg->heads != 0) return 1;
  const int rel = (cfg->positions & RELCL_POS_RELATIVE) != 0;
  size_t cap = 0;
  char p[64];
  add(m, &cap, "emb.weight", 2, (size_t)cfg->vocab, (size_t)cfg->d_model, 0);
  for (int l = 0; l < cfg->enc_layers; l++) {
    snprintf(p, sizeof p, "enc.%d.self_attn", l), add_attn(m, &cap, p, rel);
    snprintf(p, sizeof p, "enc.%d.norm1", l), add_ln(m, &cap, p);
    snprintf(p, sizeof p, "enc.%d.ffn", l), add_ffn(m, &cap, p);
    snprintf(p, sizeof p, "enc.%d.norm2", l), add_ln(m, &cap, p);
  }
  if (cfg->pre_norm) add_ln(m, &cap, "enc.norm");
  for (int l = 0; l < cfg->dec_layers; l++) {
    snprintf(p, sizeof p, "dec.%d.self_attn", l), add_attn(m, &cap, p, rel);
    snprintf(p, sizeof p, "dec.%d.norm1", l), add_ln(m, &cap, p);
    snprintf(p, sizeof p, "dec.%d.cross_attn", l), add_attn(m, &cap, p, 0);
    snprintf(p, sizeof p, "dec.%d.norm2", l), add_ln(m, &cap, p);
    snprintf(p, sizeof p, "dec.%d.ffn", l), add_ffn(m, &cap, p);
    snprintf(p, sizeof p, "dec.%d.norm3", l), add_ln(m, &cap, p);
  }
  if (cfg->pre_norm) add_ln(m, &cap, "dec.norm");
  return 0;
}

void ref_model_free(ref_model *m) {
  free(m->tensors);
  memset(m, 0, sizeof *m);
}

const ref_tensor *ref_model_find(const ref_model *m, const char *name) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

/* ---- one forward pass ---- */

typedef struct pass {
  const ref_model *m;
  const double *P;
  const relcl_model_batch *b;
  const ref_dropout *drop;
  int B, S, T, D, H, dh, F, V;
  int *src_lens, *tgt_lens;
} pass;

/* The parameters of tensor "<prefix>.<what>" (NULL when the model has none). */
static const double *par(const pass *p, const char *prefix, const char *what) {
  char n[96];
  snprintf(n, sizeof n, "%s%s%s", prefix, what[0] ? "." : "", what);
  const ref_tensor *t = ref_model_find(p->m, n);
  return t ? p->P + t->offset : NULL;
}

static uint64_t stream_of(const pass *p, int layer, int site) {
  return ((p->drop->step * 256 + (uint64_t)p->drop->micro) * 64 + (uint64_t)layer) * 16 +
         (uint64_t)site;
}

/* y = residual + mask * x / (1 - p) over n entries (element i of the mask is Philox word
 * i mod 4 of counter i / 4); residual may be NULL. In place when y == x. */
static void dropout(const pass *p, size_t n, int layer, int site, const double *x,
                    const double *residual, double *y) {
  const float pr = p->drop->p;
  const double scale = pr > 0.0f ? (double)(float)(1.0 / (1.0 - (double)pr)) : 1.0;
  const uint64_t stream = stream_of(p, layer, site);
  for (size_t i = 0; i < n; i++) {
    double v = x[i];
    if (pr > 0.0f) v = ref_dropout4_keep(p->drop->seed, stream, i, pr) ? v * scale : 0.0;
    y[i] = (residual ? residual[i] : 0.0) + v;
  }
}

/* (B, n, D) columns [col0, col0 + D) of rows of width ld -> (B, H, n, dh) */
static void split_heads(const pass *p, int n, const double *x, int ld, int col0, double *y) {
  for (int b = 0; b < p->B; b++)
    for (int h = 0; h < p->H; h++)
      for (int t = 0; t < n; t++)
        for (int e = 0; e < p->dh; e++)
          y[(((size_t)b * p->H + h) * n + t) * p->dh + e] =
              x[((size_t)b * n + t) * ld + col0 + h * p->dh + e];
}

static void merge_heads(const pass *p, int n, const double *x, double *y) {
  for (int b = 0; b < p->B; b++)
    for (int h = 0; h < p->H; h++)
      for (int t = 0; t < n; t++)
        for (int e = 0; e < p->dh; e++)
          y[((size_t)b * n + t) * p->D + h * p->dh + e] =
              x[(((size_t)b * p->H + h) * n + t) * p->dh + e];
}

/* Multi-head attention: queries from xq (B, nq, D), keys and values from xkv (B, nk, D). */
static void attention(const pass *p, const char *prefix, int nq, int nk, const double *xq,
                      const double *xkv, int causal, int relative, const int *key_len,
                      int layer, int site_w, double *out) {
  const relcl_model_config *c = &p->m->cfg;
  const int D = p->D;
  const size_t nqD = (size_t)p->B * nq * D, nkD = (size_t)p->B * nk * D;
  double *q = ref_xcalloc(nqD, sizeof *q), *k = ref_xcalloc(nkD, sizeof *k), *v = ref_xcalloc(nkD, sizeof *v);
  double *qh = ref_xcalloc(nqD, sizeof *qh), *kh = ref_xcalloc(nkD, sizeof *kh);
  double *vh = ref_xcalloc(nkD, sizeof *vh), *z = ref_xcalloc(nqD, sizeof *z), *zm = ref_xcalloc(nqD, sizeof *zm);
  ref_linear_forward_d(p->B * nq, D, D, xq, par(p, prefix, "wq.weight"), par(p, prefix, "wq.bias"), q);
  ref_linear_forward_d(p->B * nk, D, D, xkv, par(p, prefix, "wk.weight"), par(p, prefix, "wk.bias"), k);
  ref_linear_forward_d(p->B * nk, D, D, xkv, par(p, prefix, "wv.weight"), par(p, prefix, "wv.bias"), v);
  split_heads(p, nq, q, D, 0, qh);
  split_heads(p, nk, k, D, 0, kh);
  split_heads(p, nk, v, D, 0, vh);
  relcl_attn_desc d;
  memset(&d, 0, sizeof d);
  d.batch = p->B, d.heads = p->H, d.nq = nq, d.nk = nk, d.head_dim = p->dh;
  d.relative = relative, d.max_rel = relative ? c->max_rel : 0;
  d.per_head = relative && c->rel_per_head, d.keys_only = relative && c->rel_keys_only;
  d.causal = causal;
  d.dropout = p->drop->p, d.seed = p->drop->seed, d.stream = stream_of(p, layer, site_w);
  ref_attn_forward_d(&d, qh, kh, vh, relative ? par(p, prefix, "rel_k") : NULL,
                     relative && !c->rel_keys_only ? par(p, prefix, "rel_v") : NULL, key_len, z,
                     NULL);
  merge_heads(p, nq, z, zm);
  ref_linear_forward_d(p->B * nq, D, D, zm, par(p, prefix, "wo.weight"), par(p, prefix, "wo.bias"),
                       out);
  free(q), free(k), free(v), free(qh), free(kh), free(vh), free(z), free(zm);
}

static void ffn(const pass *p, const char *prefix, int rows, const double *x, double *out) {
  double *h = ref_xcalloc((size_t)rows * p->F, sizeof *h);
  ref_linear_forward_d(rows, p->D, p->F, x, par(p, prefix, "w1.weight"), par(p, prefix, "w1.bias"), h);
  for (size_t i = 0; i < (size_t)rows * p->F; i++) h[i] = h[i] > 0.0 ? h[i] : 0.0;
  ref_linear_forward_d(rows, p->F, p->D, h, par(p, prefix, "w2.weight"), par(p, prefix, "w2.bias"),
                       out);
  free(h);
}

typedef enum { SUB_SELF, SUB_CROSS, SUB_FFN } sub_kind;

/* One residual block over x (rows = B n, D), in place: post-norm x = LN(x + drop(F(x))),
 * pre-norm x = x + drop(F(LN(x))). enc_out: the encoder output, for cross attention. */
static void block(const pass *p, sub_kind kind, const char *sub, const char *norm, int decoder,
                  int layer, int site_w, int site_r, double *x, const double *enc_out) {
  const int n = decoder ? p->T : p->S, rows = p->B * n;
  const size_t N = (size_t)rows * p->D;
  const int relative = kind == SUB_SELF && (p->m->cfg.positions & RELCL_POS_RELATIVE);
  double *u = ref_xcalloc(N, sizeof *u), *a = ref_xcalloc(N, sizeof *a);
  const double *in = x;
  if (p->m->cfg.pre_norm) {
    ref_layernorm_forward_d(rows, p->D, LN_EPS, x, par(p, norm, "weight"), par(p, norm, "bias"), u,
                            NULL, NULL);
    in = u;
  }
  if (kind == SUB_FFN)
    ffn(p, sub, rows, in, a);
  else if (kind == SUB_SELF)
    attention(p, sub, n, n, in, in, decoder, relative, decoder ? p->tgt_lens : p->src_lens, layer,
              site_w, a);
  else
    attention(p, sub, p->T, p->S, in, enc_out, 0, 0, p->src_lens, layer, site_w, a);
  dropout(p, N, layer, site_r, a, x, a); /* a = x + drop(F) */
  if (p->m->cfg.pre_norm)
    memcpy(x, a, N * sizeof *x);
  else
    ref_layernorm_forward_d(rows, p->D, LN_EPS, a, par(p, norm, "weight"), par(p, norm, "bias"), x,
                            NULL, NULL);
  free(u), free(a);
}

/* x (B n, D) = drop(sqrt(D) E[ids] (+ PE)) */
static void embed(const pass *p, const int32_t *ids, int n, int site, double *x) {
  const int rows = p->B * n;
  const double *E = par(p, "emb.weight", "");
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < p->D; c++)
      x[(size_t)r * p->D + c] =
          ids[r] >= 0 && ids[r] < p->V ? sqrt((double)p->D) * E[(size_t)ids[r] * p->D + c] : 0.0;
  if (p->m->cfg.positions & RELCL_POS_ABSOLUTE) ref_posenc_add(x, p->B, n, p->D, 0);
  dropout(p, (size_t)rows * p->D, LAYER_EMB, site, x, NULL, x);
}

static void final_norm(const pass *p, const char *norm, int rows, double *x) {
  if (!p->m->cfg.pre_norm) return;
  double *y = ref_xcalloc((size_t)rows * p->D, sizeof *y);
  ref_layernorm_forward_d(rows, p->D, LN_EPS, x, par(p, norm, "weight"), par(p, norm, "bias"), y,
                          NULL, NULL);
  memcpy(x, y, (size_t)rows * p->D * sizeof *x);
  free(y);
}

double ref_model_loss(const ref_model *m, const double *params, const relcl_model_batch *b,
                      const ref_dropout *drop, double *logits, double *nll) {
  const relcl_model_config *c = &m->cfg;
  pass p = {m, params, b, drop, b->batch, b->src_len, b->tgt_len, c->d_model, c->heads,
            c->d_model / c->heads, c->d_ff, c->vocab, NULL, NULL};
  p.src_lens = ref_xcalloc((size_t)p.B, sizeof *p.src_lens);
  p.tgt_lens = ref_xcalloc((size_t)p.B, sizeof *p.tgt_lens);
  for (int i = 0; i < p.B; i++) p.src_lens[i] = b->src_lens[i], p.tgt_lens[i] = b->tgt_lens[i];
  const int Ns = p.B * p.S, Nt = p.B * p.T;
  double *enc = ref_xcalloc((size_t)Ns * p.D, sizeof *enc), *dec = ref_xcalloc((size_t)Nt * p.D, sizeof *dec);
  char sub[64], norm[64];

  embed(&p, b->src, p.S, SITE_SRC_EMB, enc);
  for (int l = 0; l < c->enc_layers; l++) {
    snprintf(sub, sizeof sub, "enc.%d.self_attn", l), snprintf(norm, sizeof norm, "enc.%d.norm1", l);
    block(&p, SUB_SELF, sub, norm, 0, l, SITE_SELF_W, SITE_SELF_R, enc, NULL);
    snprintf(sub, sizeof sub, "enc.%d.ffn", l), snprintf(norm, sizeof norm, "enc.%d.norm2", l);
    block(&p, SUB_FFN, sub, norm, 0, l, 0, SITE_FFN_R, enc, NULL);
  }
  final_norm(&p, "enc.norm", Ns, enc);

  embed(&p, b->tgt_in, p.T, SITE_TGT_EMB, dec);
  for (int l = 0; l < c->dec_layers; l++) {
    const int layer = LAYER_DEC0 + l;
    snprintf(sub, sizeof sub, "dec.%d.self_attn", l), snprintf(norm, sizeof norm, "dec.%d.norm1", l);
    block(&p, SUB_SELF, sub, norm, 1, layer, SITE_SELF_W, SITE_SELF_R, dec, NULL);
    snprintf(sub, sizeof sub, "dec.%d.cross_attn", l), snprintf(norm, sizeof norm, "dec.%d.norm2", l);
    block(&p, SUB_CROSS, sub, norm, 1, layer, SITE_CROSS_W, SITE_CROSS_R, dec, enc);
    snprintf(sub, sizeof sub, "dec.%d.ffn", l), snprintf(norm, sizeof norm, "dec.%d.norm3", l);
    block(&p, SUB_FFN, sub, norm, 1, layer, 0, SITE_FFN_R, dec, NULL);
  }
  final_norm(&p, "dec.norm", Nt, dec);

  /* tied output projection: logits = dec E^T (no bias) */
  double *z = logits ? logits : ref_xcalloc((size_t)Nt * p.V, sizeof *z);
  ref_linear_forward_d(Nt, p.D, p.V, dec, par(&p, "emb.weight", ""), NULL, z);
  double *losses = ref_xcalloc(2 * (size_t)Nt, sizeof *losses);
  ref_xent_d(Nt, p.V, c->label_smoothing, PAD, z, b->tgt_out, 1.0, losses, NULL);
  double loss = 0.0, nl = 0.0;
  for (int r = 0; r < Nt; r++) loss += losses[2 * r], nl += losses[2 * r + 1];
  if (nll) *nll = nl;
  if (!logits) free(z);
  free(losses), free(enc), free(dec), free(p.src_lens), free(p.tgt_lens);
  return loss;
}

void ref_model_grad_fd(const ref_model *m, double *params, const relcl_model_batch *batch,
                       const ref_dropout *drop, double *grad) {
  const double h = 1e-6;
  for (size_t i = 0; i < m->param_count; i++) {
    const double keep = params[i];
    params[i] = keep + h;
    const double lp = ref_model_loss(m, params, batch, drop, NULL, NULL);
    params[i] = keep - h;
    const double lm = ref_model_loss(m, params, batch, drop, NULL, NULL);
    params[i] = keep;
    grad[i] = (lp - lm) / (2.0 * h);
  }
}
