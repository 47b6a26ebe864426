/* ref_model.c: the whole-model oracle (see ref_model.h). One forward pass, step by step, in
 * double, every intermediate in its own buffer, and its backward by the chain rule over
 * what the forward kept; central differences of the forward check that backward. */
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

/* ---- one pass: forward, and with grad != NULL the backward by the chain rule ---- */

typedef struct pass {
  const ref_model *m;
  const double *P;
  double *G; /* gradients (param_count), or NULL: forward only */
  const relcl_model_batch *b;
  const ref_dropout *drop;
  int B, S, T, D, H, dh, F, V;
  int *src_lens, *tgt_lens;
} pass;

static const ref_tensor *tensor(const pass *p, const char *prefix, const char *what) {
  char n[160];
  snprintf(n, sizeof n, "%s%s%s", prefix, what[0] ? "." : "", what);
  return ref_model_find(p->m, n);
}

/* The parameters of tensor "<prefix>.<what>" (NULL when the model has none). */
static const double *par(const pass *p, const char *prefix, const char *what) {
  const ref_tensor *t = tensor(p, prefix, what);
  return t ? p->P + t->offset : NULL;
}

/* grad[tensor] += g (n entries) */
static void acc(const pass *p, const char *prefix, const char *what, const double *g) {
  const ref_tensor *t = tensor(p, prefix, what);
  for (size_t i = 0; i < t->size; i++) p->G[t->offset + i] += g[i];
}

static uint64_t stream_of(const pass *p, int layer, int site) {
  return ((p->drop->step * 256 + (uint64_t)p->drop->micro) * 64 + (uint64_t)layer) * 16 +
         (uint64_t)site;
}

/* y = residual + mask * x / (1 - p) over n entries (element i of the mask is Philox word
 * i mod 4 of counter i / 4); residual may be NULL. In place when y == x. The backward is the
 * same map with no residual: dx = mask * dy / (1 - p). */
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

/* (B, n, D) -> (B, H, n, dh) */
static void split_heads(const pass *p, int n, const double *x, double *y) {
  for (int b = 0; b < p->B; b++)
    for (int h = 0; h < p->H; h++)
      for (int t = 0; t < n; t++)
        for (int e = 0; e < p->dh; e++)
          y[(((size_t)b * p->H + h) * n + t) * p->dh + e] =
              x[((size_t)b * n + t) * p->D + h * p->dh + e];
}

static void merge_heads(const pass *p, int n, const double *x, double *y) {
  for (int b = 0; b < p->B; b++)
    for (int h = 0; h < p->H; h++)
      for (int t = 0; t < n; t++)
        for (int e = 0; e < p->dh; e++)
          y[((size_t)b * n + t) * p->D + h * p->dh + e] =
              x[(((size_t)b * p->H + h) * n + t) * p->dh + e];
}

/* y (rows, out) = x W^T + b with W = tensor <prefix>.<w>.weight */
static void linear(const pass *p, const char *prefix, const char *w, int rows, int in, int out,
                   const double *x, double *y) {
  char wn[64], bn[64];
  snprintf(wn, sizeof wn, "%s.weight", w), snprintf(bn, sizeof bn, "%s.bias", w);
  ref_linear_forward_d(rows, in, out, x, par(p, prefix, wn), par(p, prefix, bn), y);
}

/* dx (+= when add) from dy; the weight and bias gradients added to G */
static void linear_bwd(const pass *p, const char *prefix, const char *w, int rows, int in,
                       int out, const double *x, const double *dy, double *dx, int add) {
  char wn[64], bn[64];
  snprintf(wn, sizeof wn, "%s.weight", w), snprintf(bn, sizeof bn, "%s.bias", w);
  double *d_x = ref_xcalloc((size_t)rows * in, sizeof *d_x);
  double *dW = ref_xcalloc((size_t)out * in, sizeof *dW), *db = ref_xcalloc((size_t)out, sizeof *db);
  ref_linear_backward_d(rows, in, out, x, par(p, prefix, wn), dy, d_x, dW, db);
  acc(p, prefix, wn, dW);
  acc(p, prefix, bn, db);
  for (size_t i = 0; i < (size_t)rows * in; i++) dx[i] = (add ? dx[i] : 0.0) + d_x[i];
  free(d_x), free(dW), free(db);
}

static void layernorm(const pass *p, const char *norm, int rows, const double *x, double *y) {
  ref_layernorm_forward_d(rows, p->D, LN_EPS, x, par(p, norm, "weight"), par(p, norm, "bias"), y,
                          NULL, NULL);
}

/* dx (+= when add) from dy; the gain and bias gradients added to G */
static void layernorm_bwd(const pass *p, const char *norm, int rows, const double *x,
                          const double *dy, double *dx, int add) {
  const size_t N = (size_t)rows * p->D;
  double *d_x = ref_xcalloc(N, sizeof *d_x), *dg = ref_xcalloc((size_t)p->D, sizeof *dg);
  double *db = ref_xcalloc((size_t)p->D, sizeof *db);
  ref_layernorm_backward_d(rows, p->D, LN_EPS, x, par(p, norm, "weight"), dy, d_x, dg, db);
  acc(p, norm, "weight", dg);
  acc(p, norm, "bias", db);
  for (size_t i = 0; i < N; i++) dx[i] = (add ? dx[i] : 0.0) + d_x[i];
  free(d_x), free(dg), free(db);
}

typedef enum { SUB_SELF, SUB_CROSS, SUB_FFN } sub_kind;

/* One residual block and what its backward needs. */
typedef struct block {
  sub_kind kind;
  char sub[64], norm[64];
  int decoder, layer, site_w, site_r, n, nk, rows;
  double *x_in; /* the block's input (B n, D) */
  double *u;    /* pre-norm: LN(x_in), F's input; post-norm: NULL (F reads x_in) */
  double *s;    /* post-norm: x_in + drop(F), LN's input */
  const double *kv; /* attention: the keys' and values' input (u, x_in or the encoder's) */
  double *qh, *kh, *vh, *zm; /* attention: Q, K, V (B, H, n, dh), merged output (B nq, D) */
  double *hp;                /* FFN: W1 x + b1 before the ReLU (rows, F) */
  relcl_attn_desc desc;
  const int *key_len;
} block;

static void block_free(block *k) {
  free(k->x_in), free(k->u), free(k->s), free(k->qh), free(k->kh), free(k->vh), free(k->zm);
  free(k->hp);
}

static void attn_fwd(const pass *p, block *k, const double *in, double *out) {
  const relcl_model_config *c = &p->m->cfg;
  const int D = p->D, nq = k->n, nk = k->nk;
  const size_t nqD = (size_t)p->B * nq * D, nkD = (size_t)p->B * nk * D;
  const int relative = k->kind == SUB_SELF && (c->positions & RELCL_POS_RELATIVE);
  double *q = ref_xcalloc(nqD, sizeof *q), *kk = ref_xcalloc(nkD, sizeof *kk);
  double *v = ref_xcalloc(nkD, sizeof *v), *z = ref_xcalloc(nqD, sizeof *z);
  k->kv = k->kind == SUB_CROSS ? k->kv : in;
  linear(p, k->sub, "wq", p->B * nq, D, D, in, q);
  linear(p, k->sub, "wk", p->B * nk, D, D, k->kv, kk);
  linear(p, k->sub, "wv", p->B * nk, D, D, k->kv, v);
  k->qh = ref_xcalloc(nqD, sizeof *k->qh);
  k->kh = ref_xcalloc(nkD, sizeof *k->kh);
  k->vh = ref_xcalloc(nkD, sizeof *k->vh);
  k->zm = ref_xcalloc(nqD, sizeof *k->zm);
  split_heads(p, nq, q, k->qh);
  split_heads(p, nk, kk, k->kh);
  split_heads(p, nk, v, k->vh);
  relcl_attn_desc *d = &k->desc;
  memset(d, 0, sizeof *d);
  d->batch = p->B, d->heads = p->H, d->nq = nq, d->nk = nk, d->head_dim = p->dh;
  d->relative = relative, d->max_rel = relative ? c->max_rel : 0;
  d->per_head = relative && c->rel_per_head, d->keys_only = relative && c->rel_keys_only;
  d->causal = k->kind == SUB_SELF && k->decoder;
  d->dropout = p->drop->p, d->seed = p->drop->seed, d->stream = stream_of(p, k->layer, k->site_w);
  k->key_len = k->decoder && k->kind == SUB_SELF ? p->tgt_lens : p->src_lens;
  ref_attn_forward_d(d, k->qh, k->kh, k->vh, relative ? par(p, k->sub, "rel_k") : NULL,
                     d->relative && !d->keys_only ? par(p, k->sub, "rel_v") : NULL, k->key_len,
                     z, NULL);
  merge_heads(p, nq, z, k->zm);
  linear(p, k->sub, "wo", p->B * nq, D, D, k->zm, out);
  free(q), free(kk), free(v), free(z);
}

/* d_in = d F / d in (overwritten); cross attention adds its keys' and values' gradient to
 * d_kv (the encoder output's). */
static void attn_bwd(const pass *p, block *k, const double *in, const double *dout,
                     double *d_in, double *d_kv) {
  const int D = p->D, nq = k->n, nk = k->nk;
  const size_t nqD = (size_t)p->B * nq * D, nkD = (size_t)p->B * nk * D;
  const relcl_attn_desc *d = &k->desc;
  double *dzm = ref_xcalloc(nqD, sizeof *dzm), *dz = ref_xcalloc(nqD, sizeof *dz);
  double *dqh = ref_xcalloc(nqD, sizeof *dqh), *dkh = ref_xcalloc(nkD, sizeof *dkh);
  double *dvh = ref_xcalloc(nkD, sizeof *dvh), *dq = ref_xcalloc(nqD, sizeof *dq);
  double *dk = ref_xcalloc(nkD, sizeof *dk), *dv = ref_xcalloc(nkD, sizeof *dv);
  const ref_tensor *tk = d->relative ? tensor(p, k->sub, "rel_k") : NULL;
  const ref_tensor *tv = d->relative && !d->keys_only ? tensor(p, k->sub, "rel_v") : NULL;
  double *dwk = tk ? ref_xcalloc(tk->size, sizeof *dwk) : NULL;
  double *dwv = tv ? ref_xcalloc(tv->size, sizeof *dwv) : NULL;
  linear_bwd(p, k->sub, "wo", p->B * nq, D, D, k->zm, dout, dzm, 0);
  split_heads(p, nq, dzm, dz);
  ref_attn_backward_d(d, k->qh, k->kh, k->vh, tk ? p->P + tk->offset : NULL,
                      tv ? p->P + tv->offset : NULL, k->key_len, dz, dqh, dkh, dvh, dwk, dwv);
  if (tk) acc(p, k->sub, "rel_k", dwk);
  if (tv) acc(p, k->sub, "rel_v", dwv);
  merge_heads(p, nq, dqh, dq);
  merge_heads(p, nk, dkh, dk);
  merge_heads(p, nk, dvh, dv);
  linear_bwd(p, k->sub, "wq", p->B * nq, D, D, in, dq, d_in, 0);
  double *dkv = k->kind == SUB_CROSS ? d_kv : d_in; /* self: keys and values read `in` too */
  linear_bwd(p, k->sub, "wk", p->B * nk, D, D, k->kv, dk, dkv, 1);
  linear_bwd(p, k->sub, "wv", p->B * nk, D, D, k->kv, dv, dkv, 1);
  free(dzm), free(dz), free(dqh), free(dkh), free(dvh), free(dq), free(dk), free(dv);
  free(dwk), free(dwv);
}

static void ffn_fwd(const pass *p, block *k, const double *in, double *out) {
  const size_t n = (size_t)k->rows * p->F;
  double *h = ref_xcalloc(n, sizeof *h);
  k->hp = ref_xcalloc(n, sizeof *k->hp);
  linear(p, k->sub, "w1", k->rows, p->D, p->F, in, k->hp);
  for (size_t i = 0; i < n; i++) h[i] = k->hp[i] > 0.0 ? k->hp[i] : 0.0;
  linear(p, k->sub, "w2", k->rows, p->F, p->D, h, out);
  free(h);
}

static void ffn_bwd(const pass *p, block *k, const double *in, const double *dout,
                    double *d_in) {
  const size_t n = (size_t)k->rows * p->F;
  double *h = ref_xcalloc(n, sizeof *h), *dh = ref_xcalloc(n, sizeof *dh);
  for (size_t i = 0; i < n; i++) h[i] = k->hp[i] > 0.0 ? k->hp[i] : 0.0;
  linear_bwd(p, k->sub, "w2", k->rows, p->F, p->D, h, dout, dh, 0);
  for (size_t i = 0; i < n; i++) dh[i] = k->hp[i] > 0.0 ? dh[i] : 0.0; /* relu'(0) = 0 */
  linear_bwd(p, k->sub, "w1", k->rows, p->D, p->F, in, dh, d_in, 0);
  free(h), free(dh);
}

/* One residual block over x (rows, D), in place: post-norm x = LN(x + drop(F(x))),
 * pre-norm x = x + drop(F(LN(x))). For cross attention k->kv is the encoder output. */
static void block_fwd(const pass *p, block *k, double *x) {
  const size_t N = (size_t)k->rows * p->D;
  double *a = ref_xcalloc(N, sizeof *a);
  k->x_in = ref_xcalloc(N, sizeof *k->x_in);
  memcpy(k->x_in, x, N * sizeof *x);
  const double *in = k->x_in;
  if (p->m->cfg.pre_norm) {
    k->u = ref_xcalloc(N, sizeof *k->u);
    layernorm(p, k->norm, k->rows, k->x_in, k->u);
    in = k->u;
  }
  if (k->kind == SUB_FFN)
    ffn_fwd(p, k, in, a);
  else
    attn_fwd(p, k, in, a);
  if (p->m->cfg.pre_norm) {
    dropout(p, N, k->layer, k->site_r, a, k->x_in, x);
  } else {
    k->s = ref_xcalloc(N, sizeof *k->s);
    dropout(p, N, k->layer, k->site_r, a, k->x_in, k->s);
    layernorm(p, k->norm, k->rows, k->s, x);
  }
  free(a);
}

/* g (rows, D): the gradient of the block's output in, of its input out. d_enc: the encoder
 * output's gradient, to which cross attention adds. */
static void block_bwd(const pass *p, block *k, double *g, double *d_enc) {
  const size_t N = (size_t)k->rows * p->D;
  double *ds = ref_xcalloc(N, sizeof *ds), *da = ref_xcalloc(N, sizeof *da);
  double *dF = ref_xcalloc(N, sizeof *dF);
  const int pre = p->m->cfg.pre_norm;
  if (!pre) layernorm_bwd(p, k->norm, k->rows, k->s, g, ds, 0); /* d s */
  else memcpy(ds, g, N * sizeof *g);                              /* d out */
  dropout(p, N, k->layer, k->site_r, ds, NULL, da);              /* d F = mask-scaled */
  const double *in = pre ? k->u : k->x_in;
  if (k->kind == SUB_FFN)
    ffn_bwd(p, k, in, da, dF);
  else
    attn_bwd(p, k, in, da, dF, d_enc);
  /* the residual path carries ds to x_in; F's input is x_in (post) or LN(x_in) (pre) */
  memcpy(g, ds, N * sizeof *g);
  if (pre)
    layernorm_bwd(p, k->norm, k->rows, k->x_in, dF, g, 1);
  else
    for (size_t i = 0; i < N; i++) g[i] += dF[i];
  free(ds), free(da), free(dF);
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

static void embed_bwd(const pass *p, const int32_t *ids, int n, int site, const double *g) {
  const int rows = p->B * n;
  const size_t N = (size_t)rows * p->D;
  double *dx = ref_xcalloc(N, sizeof *dx);
  const ref_tensor *t = tensor(p, "emb.weight", "");
  dropout(p, N, LAYER_EMB, site, g, NULL, dx);
  for (int r = 0; r < rows; r++)
    if (ids[r] >= 0 && ids[r] < p->V)
      for (int c = 0; c < p->D; c++)
        p->G[t->offset + (size_t)ids[r] * p->D + c] += sqrt((double)p->D) * dx[(size_t)r * p->D + c];
  free(dx);
}

static void set_block(block *k, sub_kind kind, const char *stack, int l, const char *sub,
                      const char *norm, int decoder, int layer, int site_w, int site_r, int n,
                      int nk, int rows) {
  memset(k, 0, sizeof *k);
  k->kind = kind;
  snprintf(k->sub, sizeof k->sub, "%s.%d.%s", stack, l, sub);
  snprintf(k->norm, sizeof k->norm, "%s.%d.%s", stack, l, norm);
  k->decoder = decoder, k->layer = layer, k->site_w = site_w, k->site_r = site_r;
  k->n = n, k->nk = nk, k->rows = rows;
}

static double run(const ref_model *m, const double *params, double *grad,
                  const relcl_model_batch *b, const ref_dropout *drop, double *logits,
                  double *nll) {
  const relcl_model_config *c = &m->cfg;
  pass p = {m, params, grad, b, drop, b->batch, b->src_len, b->tgt_len, c->d_model, c->heads,
            c->d_model / c->heads, c->d_ff, c->vocab, NULL, NULL};
  p.src_lens = ref_xcalloc((size_t)p.B, sizeof *p.src_lens);
  p.tgt_lens = ref_xcalloc((size_t)p.B, sizeof *p.tgt_lens);
  for (int i = 0; i < p.B; i++) p.src_lens[i] = b->src_lens[i], p.tgt_lens[i] = b->tgt_lens[i];
  const int Ns = p.B * p.S, Nt = p.B * p.T, D = p.D, pre = c->pre_norm;
  const size_t NsD = (size_t)Ns * D, NtD = (size_t)Nt * D;
  double *enc = ref_xcalloc(NsD, sizeof *enc), *dec = ref_xcalloc(NtD, sizeof *dec);
  double *enc_last = ref_xcalloc(NsD, sizeof *enc_last), *dec_last = ref_xcalloc(NtD, sizeof *dec_last);
  const int ne = 2 * c->enc_layers, nd = 3 * c->dec_layers;
  block *eb = ref_xcalloc((size_t)ne, sizeof *eb), *db = ref_xcalloc((size_t)nd, sizeof *db);

  embed(&p, b->src, p.S, SITE_SRC_EMB, enc);
  for (int l = 0; l < c->enc_layers; l++) {
    set_block(&eb[2 * l], SUB_SELF, "enc", l, "self_attn", "norm1", 0, l, SITE_SELF_W,
              SITE_SELF_R, p.S, p.S, Ns);
    set_block(&eb[2 * l + 1], SUB_FFN, "enc", l, "ffn", "norm2", 0, l, 0, SITE_FFN_R, p.S, p.S,
              Ns);
    block_fwd(&p, &eb[2 * l], enc);
    block_fwd(&p, &eb[2 * l + 1], enc);
  }
  memcpy(enc_last, enc, NsD * sizeof *enc);
  if (pre) layernorm(&p, "enc.norm", Ns, enc_last, enc); /* enc: the encoder output */

  embed(&p, b->tgt_in, p.T, SITE_TGT_EMB, dec);
  for (int l = 0; l < c->dec_layers; l++) {
    const int layer = LAYER_DEC0 + l;
    block *k = &db[3 * l];
    set_block(&k[0], SUB_SELF, "dec", l, "self_attn", "norm1", 1, layer, SITE_SELF_W,
              SITE_SELF_R, p.T, p.T, Nt);
    set_block(&k[1], SUB_CROSS, "dec", l, "cross_attn", "norm2", 1, layer, SITE_CROSS_W,
              SITE_CROSS_R, p.T, p.S, Nt);
    set_block(&k[2], SUB_FFN, "dec", l, "ffn", "norm3", 1, layer, 0, SITE_FFN_R, p.T, p.T, Nt);
    k[1].kv = enc;
    for (int w = 0; w < 3; w++) block_fwd(&p, &k[w], dec);
  }
  memcpy(dec_last, dec, NtD * sizeof *dec);
  if (pre) layernorm(&p, "dec.norm", Nt, dec_last, dec);

  /* tied output projection: logits = dec E^T (no bias) */
  double *z = logits ? logits : ref_xcalloc((size_t)Nt * p.V, sizeof *z);
  double *dz = grad ? ref_xcalloc((size_t)Nt * p.V, sizeof *dz) : NULL;
  const double *E = par(&p, "emb.weight", "");
  ref_linear_forward_d(Nt, D, p.V, dec, E, NULL, z);
  double *losses = ref_xcalloc(2 * (size_t)Nt, sizeof *losses);
  ref_xent_d(Nt, p.V, c->label_smoothing, PAD, z, b->tgt_out, 1.0, losses, dz);
  double loss = 0.0, nl = 0.0;
  for (int r = 0; r < Nt; r++) loss += losses[2 * r], nl += losses[2 * r + 1];
  if (nll) *nll = nl;

  if (grad) {
    const ref_tensor *te = tensor(&p, "emb.weight", "");
    double *dE = ref_xcalloc(te->size, sizeof *dE), *g = ref_xcalloc(NtD, sizeof *g);
    double *d_enc = ref_xcalloc(NsD, sizeof *d_enc), *t = ref_xcalloc(NsD > NtD ? NsD : NtD, sizeof *t);
    ref_linear_backward_d(Nt, D, p.V, dec, E, dz, g, dE, NULL);
    acc(&p, "emb.weight", "", dE);
    if (pre) {
      layernorm_bwd(&p, "dec.norm", Nt, dec_last, g, t, 0);
      memcpy(g, t, NtD * sizeof *g);
    }
    for (int i = nd - 1; i >= 0; i--) block_bwd(&p, &db[i], g, d_enc);
    embed_bwd(&p, b->tgt_in, p.T, SITE_TGT_EMB, g);
    free(g);
    g = ref_xcalloc(NsD, sizeof *g);
    if (pre)
      layernorm_bwd(&p, "enc.norm", Ns, enc_last, d_enc, g, 0);
    else
      memcpy(g, d_enc, NsD * sizeof *g);
    for (int i = ne - 1; i >= 0; i--) block_bwd(&p, &eb[i], g, NULL);
    embed_bwd(&p, b->src, p.S, SITE_SRC_EMB, g);
    free(dE), free(g), free(d_enc), free(t);
  }

  for (int i = 0; i < ne; i++) block_free(&eb[i]);
  for (int i = 0; i < nd; i++) block_free(&db[i]);
  if (!logits) free(z);
  free(dz), free(eb), free(db), free(losses), free(enc), free(dec), free(enc_last);
  free(dec_last), free(p.src_lens), free(p.tgt_lens);
  return loss;
}

double ref_model_loss(const ref_model *m, const double *params, const relcl_model_batch *b,
                      const ref_dropout *drop, double *logits, double *nll) {
  return run(m, params, NULL, b, drop, logits, nll);
}

double ref_model_grad(const ref_model *m, const double *params, const relcl_model_batch *b,
                      const ref_dropout *drop, double *grad) {
  memset(grad, 0, m->param_count * sizeof *grad);
  return run(m, params, grad, b, drop, NULL, NULL);
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
