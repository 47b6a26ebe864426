/* relcl_model: configuration and presets, the named parameter table carving the four arenas
 * (parameters, gradients, Adam m and v), initialization from a seed, the optimizer step and
 * the public entry points. The passes themselves are in model_graph.c. */
#include "model_internal.h"
#include "ops.h"
#include "relcl_data.h"
#include "relcl_layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- configuration ---- */

static const relcl_model_config preset_tiny = {
    .vocab = 0,
    .enc_layers = 2,
    .dec_layers = 2,
    .d_model = 128,
    .heads = 4,
    .d_ff = 512,
    .dropout = 0.1f,
    .label_smoothing = 0.1f,
    .positions = RELCL_POS_RELATIVE,
    .max_rel = 8,
    .rel_per_head = 0,
    .rel_keys_only = 0,
    .pre_norm = 0,
    .max_length = 256,
};

static const relcl_model_config preset_base = {
    .vocab = 0,
    .enc_layers = 6,
    .dec_layers = 6,
    .d_model = 512,
    .heads = 8,
    .d_ff = 2048,
    .dropout = 0.1f,
    .label_smoothing = 0.1f,
    .positions = RELCL_POS_RELATIVE,
    .max_rel = 16,
    .rel_per_head = 0,
    .rel_keys_only = 0,
    .pre_norm = 0,
    .max_length = 256,
};

static const relcl_model_config preset_big = {
    .vocab = 0,
    .enc_layers = 6,
    .dec_layers = 6,
    .d_model = 1024,
    .heads = 16,
    .d_ff = 4096,
    .dropout = 0.3f,
    .label_smoothing = 0.1f,
    .positions = RELCL_POS_RELATIVE,
    .max_rel = 8,
    .rel_per_head = 0,
    .rel_keys_only = 0,
    .pre_norm = 0,
    .max_length = 256,
};

const relcl_model_config *relcl_model_preset(const char *name) {
  if (name == NULL) return NULL;
  if (strcmp(name, "tiny") == 0) return &preset_tiny;
  if (strcmp(name, "base") == 0) return &preset_base;
  if (strcmp(name, "big") == 0) return &preset_big;
  return NULL;
}

void relcl_model_config_describe(const relcl_model_config *c, char *buf, size_t size) {
  if (buf == NULL || size == 0) return;
  if (c == NULL) {
    snprintf(buf, size, "(no configuration)");
    return;
  }
  char pos[96];
  int rel = c->positions & RELCL_POS_RELATIVE, abs_ = c->positions & RELCL_POS_ABSOLUTE;
  if (rel)
    snprintf(pos, sizeof pos, "%srelative k=%d%s%s", abs_ ? "absolute + " : "", c->max_rel,
             c->rel_per_head ? " per head" : "", c->rel_keys_only ? " keys only" : "");
  else
    snprintf(pos, sizeof pos, "absolute positions");
  snprintf(buf, size,
           "%d+%d layers, d_model %d, %d heads, d_ff %d, %s, dropout %g, label smoothing %g, "
           "%s, vocab %d",
           c->enc_layers, c->dec_layers, c->d_model, c->heads, c->d_ff, pos, (double)c->dropout,
           (double)c->label_smoothing, c->pre_norm ? "pre-norm" : "post-norm", c->vocab);
}

static relcl_status check_config(const relcl_model_config *c) {
#define BAD(...) return relcl__fail(RELCL_ERR_INVALID_ARG, "model config: " __VA_ARGS__)
  if (c->vocab < 5) BAD("vocab=%d must be >= 5 (ids 0..3 are pad, unk, bos, eos)", c->vocab);
  if (c->enc_layers < 1 || c->enc_layers > RELCL_MODEL_MAX_LAYERS)
    BAD("enc_layers=%d must be in 1..%d", c->enc_layers, RELCL_MODEL_MAX_LAYERS);
  if (c->dec_layers < 1 || c->dec_layers > RELCL_MODEL_MAX_LAYERS)
    BAD("dec_layers=%d must be in 1..%d", c->dec_layers, RELCL_MODEL_MAX_LAYERS);
  if (c->d_model < 1) BAD("d_model=%d must be > 0", c->d_model);
  if (c->heads < 1) BAD("heads=%d must be > 0", c->heads);
  if (c->d_model % c->heads != 0)
    BAD("d_model=%d must be divisible by heads=%d", c->d_model, c->heads);
  if (c->d_ff < 1) BAD("d_ff=%d must be > 0", c->d_ff);
  if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
    BAD("dropout=%g must be in [0, 1)", (double)c->dropout);
  if (!(c->label_smoothing >= 0.0f && c->label_smoothing < 1.0f))
    BAD("label_smoothing=%g must be in [0, 1)", (double)c->label_smoothing);
  if (c->positions != RELCL_POS_ABSOLUTE && c->positions != RELCL_POS_RELATIVE &&
      c->positions != RELCL_POS_BOTH)
    BAD("positions=%d must be absolute (1), relative (2) or both (3)", (int)c->positions);
  if (c->max_rel < 0 || c->max_rel > 4096) BAD("max_rel=%d must be in 0..4096", c->max_rel);
  if ((c->rel_per_head | 1) != 1) BAD("rel_per_head=%d must be 0 or 1", c->rel_per_head);
  if ((c->rel_keys_only | 1) != 1) BAD("rel_keys_only=%d must be 0 or 1", c->rel_keys_only);
  if ((c->pre_norm | 1) != 1) BAD("pre_norm=%d must be 0 or 1", c->pre_norm);
  if (c->max_length < 1) BAD("max_length=%d must be > 0", c->max_length);
  if ((double)c->vocab * c->d_model > 1e9 || (double)c->d_ff * c->d_model > 1e9)
    BAD("vocab * d_model or d_ff * d_model over 10^9");
  return RELCL_OK;
#undef BAD
}

/* ---- the parameter table ---- */

enum init_kind { INIT_XAVIER, INIT_EMBEDDING, INIT_ZERO, INIT_ONE };

/* align = 1 starts the tensor on a RELCL__TENSOR_ALIGN boundary; 0 packs it right after the
 * previous one (wq|wk|wv must be adjacent). */
static relcl_status add_tensor(relcl_model *m, const char *name, int ndim, size_t d0, size_t d1,
                               size_t d2, int align, size_t *offset) {
  if (m->n_tensors == m->cap_tensors) {
    size_t cap = m->cap_tensors ? 2 * m->cap_tensors : 64;
    relcl_tensor_info *t = realloc(m->tensors, cap * sizeof *t);
    if (t != NULL) m->tensors = t;
    size_t *at = realloc(m->name_at, cap * sizeof *at);
    if (at != NULL) m->name_at = at;
    if (t == NULL || at == NULL)
      return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    m->cap_tensors = cap;
  }
  size_t len = strlen(name) + 1;
  if (m->names_used + len > m->names_cap) {
    size_t cap = m->names_cap ? 2 * m->names_cap : 4096;
    while (cap < m->names_used + len) cap *= 2;
    char *p = realloc(m->names, cap);
    if (p == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    m->names = p;
    m->names_cap = cap;
  }
  memcpy(m->names + m->names_used, name, len);
  m->name_at[m->n_tensors] = m->names_used; /* pointers are set once the pool stops moving */
  relcl_tensor_info *t = &m->tensors[m->n_tensors++];
  memset(t, 0, sizeof *t);
  m->names_used += len;
  t->ndim = ndim;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->shape[2] = d2;
  t->size = d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1);
  if (align) m->param_count = RELCL__ALIGN_UP(m->param_count);
  t->offset = m->param_count;
  m->param_count += t->size;
  *offset = t->offset;
  return RELCL_OK;
}

static relcl_status add_ln(relcl_model *m, const char *prefix, relcl__ln_p *p) {
  char name[128];
  const size_t D = (size_t)m->cfg.d_model;
  snprintf(name, sizeof name, "%s.weight", prefix);
  relcl_status st = add_tensor(m, name, 1, D, 0, 0, 1, &p->g);
  snprintf(name, sizeof name, "%s.bias", prefix);
  if (st == RELCL_OK) st = add_tensor(m, name, 1, D, 0, 0, 1, &p->b);
  return st;
}

static relcl_status add_attn(relcl_model *m, const char *prefix, bool relative,
                             relcl__attn_p *p) {
  const relcl_model_config *c = &m->cfg;
  const size_t D = (size_t)c->d_model;
  char name[128];
  size_t off;
  relcl_status st = RELCL_OK;
  static const char *const proj[3] = {"wq", "wk", "wv"};
  for (int i = 0; i < 3 && st == RELCL_OK; i++) {
    snprintf(name, sizeof name, "%s.%s.weight", prefix, proj[i]);
    st = add_tensor(m, name, 2, D, D, 0, i == 0, i == 0 ? &p->wq : &off);
  }
  for (int i = 0; i < 3 && st == RELCL_OK; i++) {
    snprintf(name, sizeof name, "%s.%s.bias", prefix, proj[i]);
    st = add_tensor(m, name, 1, D, 0, 0, i == 0, i == 0 ? &p->bq : &off);
  }
  snprintf(name, sizeof name, "%s.wo.weight", prefix);
  if (st == RELCL_OK) st = add_tensor(m, name, 2, D, D, 0, 1, &p->wo);
  snprintf(name, sizeof name, "%s.wo.bias", prefix);
  if (st == RELCL_OK) st = add_tensor(m, name, 1, D, 0, 0, 1, &p->bo);
  p->rel_k = p->rel_v = RELCL__NONE;
  if (relative && st == RELCL_OK) {
    const size_t L = 2 * (size_t)c->max_rel + 1, dh = D / (size_t)c->heads;
    const size_t H = (size_t)c->heads;
    snprintf(name, sizeof name, "%s.rel_k", prefix);
    st = c->rel_per_head ? add_tensor(m, name, 3, H, L, dh, 1, &p->rel_k)
                         : add_tensor(m, name, 2, L, dh, 0, 1, &p->rel_k);
    if (st == RELCL_OK && !c->rel_keys_only) {
      snprintf(name, sizeof name, "%s.rel_v", prefix);
      st = c->rel_per_head ? add_tensor(m, name, 3, H, L, dh, 1, &p->rel_v)
                           : add_tensor(m, name, 2, L, dh, 0, 1, &p->rel_v);
    }
  }
  return st;
}

static relcl_status add_ffn(relcl_model *m, const char *prefix, relcl__ffn_p *p) {
  const size_t D = (size_t)m->cfg.d_model, F = (size_t)m->cfg.d_ff;
  char name[128];
  snprintf(name, sizeof name, "%s.w1.weight", prefix);
  relcl_status st = add_tensor(m, name, 2, F, D, 0, 1, &p->w1);
  snprintf(name, sizeof name, "%s.w1.bias", prefix);
  if (st == RELCL_OK) st = add_tensor(m, name, 1, F, 0, 0, 1, &p->b1);
  snprintf(name, sizeof name, "%s.w2.weight", prefix);
  if (st == RELCL_OK) st = add_tensor(m, name, 2, D, F, 0, 1, &p->w2);
  snprintf(name, sizeof name, "%s.w2.bias", prefix);
  if (st == RELCL_OK) st = add_tensor(m, name, 1, D, 0, 0, 1, &p->b2);
  return st;
}

static relcl_status build_table(relcl_model *m) {
  const relcl_model_config *c = &m->cfg;
  const bool rel = (c->positions & RELCL_POS_RELATIVE) != 0;
  char pre[64];
  relcl_status st = add_tensor(m, "emb.weight", 2, (size_t)c->vocab, (size_t)c->d_model, 0, 1,
                               &m->emb);
  for (int l = 0; l < c->enc_layers && st == RELCL_OK; l++) {
    relcl__enc_p *e = &m->enc[l];
    snprintf(pre, sizeof pre, "enc.%d.self_attn", l);
    st = add_attn(m, pre, rel, &e->self);
    snprintf(pre, sizeof pre, "enc.%d.norm1", l);
    if (st == RELCL_OK) st = add_ln(m, pre, &e->n1);
    snprintf(pre, sizeof pre, "enc.%d.ffn", l);
    if (st == RELCL_OK) st = add_ffn(m, pre, &e->ffn);
    snprintf(pre, sizeof pre, "enc.%d.norm2", l);
    if (st == RELCL_OK) st = add_ln(m, pre, &e->n2);
  }
  if (st == RELCL_OK && c->pre_norm) st = add_ln(m, "enc.norm", &m->enc_norm);
  for (int l = 0; l < c->dec_layers && st == RELCL_OK; l++) {
    relcl__dec_p *d = &m->dec[l];
    snprintf(pre, sizeof pre, "dec.%d.self_attn", l);
    st = add_attn(m, pre, rel, &d->self);
    snprintf(pre, sizeof pre, "dec.%d.norm1", l);
    if (st == RELCL_OK) st = add_ln(m, pre, &d->n1);
    snprintf(pre, sizeof pre, "dec.%d.cross_attn", l);
    if (st == RELCL_OK) st = add_attn(m, pre, false, &d->cross);
    snprintf(pre, sizeof pre, "dec.%d.norm2", l);
    if (st == RELCL_OK) st = add_ln(m, pre, &d->n2);
    snprintf(pre, sizeof pre, "dec.%d.ffn", l);
    if (st == RELCL_OK) st = add_ffn(m, pre, &d->ffn);
    snprintf(pre, sizeof pre, "dec.%d.norm3", l);
    if (st == RELCL_OK) st = add_ln(m, pre, &d->n3);
  }
  if (st == RELCL_OK && c->pre_norm) st = add_ln(m, "dec.norm", &m->dec_norm);
  if (st != RELCL_OK) return st;
  m->param_count = RELCL__ALIGN_UP(m->param_count);
  for (size_t i = 0; i < m->n_tensors; i++) m->tensors[i].name = m->names + m->name_at[i];
  return RELCL_OK;
}

/* ---- initialization: splitmix64 streams, one per tensor, seeded by (seed, name) ---- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { /* [0, 1) with 53 bits */
  return (double)(splitmix64(s) >> 11) * 0x1p-53;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static void init_tensor(const relcl_model *m, const relcl_tensor_info *t, uint64_t seed,
                        float *dst) {
  uint64_t s = seed ^ fnv1a(t->name);
  splitmix64(&s); /* decorrelate seeds that differ in few bits */
  const bool norm = strstr(t->name, "norm") != NULL;
  if (strcmp(t->name, "emb.weight") == 0) {
    /* N(0, d_model^-1/2) by Box-Muller; the padding row stays zero */
    const double sd = 1.0 / sqrt((double)m->cfg.d_model);
    for (size_t i = 0; i < t->size; i++) {
      double u1 = 1.0 - uniform01(&s), u2 = uniform01(&s); /* u1 in (0, 1] */
      dst[i] = (float)(sd * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    memset(dst + (size_t)RELCL_PAD_ID * t->shape[1], 0, t->shape[1] * sizeof *dst);
  } else if (norm && ends_with(t->name, ".weight")) {
    for (size_t i = 0; i < t->size; i++) dst[i] = 1.0f;
  } else if (t->ndim == 1) {
    memset(dst, 0, t->size * sizeof *dst);
  } else {
    /* Xavier-uniform over the last two dimensions (per-head tables: each head's table) */
    const size_t fan_out = t->shape[t->ndim - 2], fan_in = t->shape[t->ndim - 1];
    const double a = sqrt(6.0 / (double)(fan_in + fan_out));
    for (size_t i = 0; i < t->size; i++) dst[i] = (float)(a * (2.0 * uniform01(&s) - 1.0));
  }
}

/* ---- lifetime ---- */

relcl_status relcl_model_create(relcl_context *ctx, const relcl_model_config *cfg,
                                uint64_t seed, relcl_model **out) {
  relcl__clear_error();
  if (out == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_create: out is NULL");
  *out = NULL;
  if (ctx == NULL || cfg == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_create: ctx and cfg are required");
  relcl_status st = check_config(cfg);
  if (st != RELCL_OK) return st;
  relcl_model *m = calloc(1, sizeof *m);
  float *host = NULL;
  if (m == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  m->ctx = ctx;
  m->cfg = *cfg;
  m->enc = calloc((size_t)cfg->enc_layers, sizeof *m->enc);
  m->dec = calloc((size_t)cfg->dec_layers, sizeof *m->dec);
  if (m->enc == NULL || m->dec == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto fail;
  }
  if ((st = build_table(m)) != RELCL_OK) goto fail;
  if (m->param_count >= ((size_t)1 << 32)) {
    st = relcl__fail(RELCL_ERR_INVALID_ARG, "model of %zu parameters: over 2^32",
                     m->param_count);
    goto fail;
  }
  /* the device arenas first: a model too large for the device is refused before its
   * initial values are written on the host (gigabytes, for such a model) */
  for (int a = 0; a < 4; a++)
    if ((st = relcl_alloc(ctx, m->param_count, &m->arena[a])) != RELCL_OK) goto fail;
  host = calloc(m->param_count, sizeof *host);
  if (host == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory (%zu parameters)",
                     m->param_count);
    goto fail;
  }
  for (size_t i = 0; i < m->n_tensors; i++)
    init_tensor(m, &m->tensors[i], seed, host + m->tensors[i].offset);
  if ((st = relcl__write(ctx, relcl_buf_at(m->arena[RELCL_ARENA_PARAMS], 0), host,
                        m->param_count)) != RELCL_OK)
    goto fail;
  for (int a = 1; a < 4; a++)
    if ((st = relcl__fill(ctx, relcl_buf_at(m->arena[a], 0), 0.0f, m->param_count)) !=
        RELCL_OK)
      goto fail;
  if ((st = relcl_alloc(ctx, 16, &m->stats)) != RELCL_OK) goto fail;
  if ((st = relcl__fill(ctx, relcl_buf_at(m->stats, 0), 0.0f, 16)) != RELCL_OK) goto fail;
  free(host);
  *out = m;
  return RELCL_OK;
fail:
  free(host);
  relcl_model_destroy(m);
  return st;
}

void relcl_model_destroy(relcl_model *m) {
  if (m == NULL) return;
  if (m->ctx) clFinish(relcl_context_queue(m->ctx));
  for (int a = 0; a < 4; a++)
    if (m->arena[a]) clReleaseMemObject(m->arena[a]);
  cl_mem bufs[] = {m->act, m->work, m->ids, m->stats};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (bufs[i]) clReleaseMemObject(bufs[i]);
  relcl__model_layout_free(&m->lay);
  relcl__decode_ws_free(m->dec_ws);
  free(m->tensors);
  free(m->name_at);
  free(m->names);
  free(m->enc);
  free(m->dec);
  free(m->h_ids);
  free(m);
}

const relcl_model_config *relcl_model_get_config(const relcl_model *m) {
  return m ? &m->cfg : NULL;
}

size_t relcl_model_tensor_count(const relcl_model *m) { return m ? m->n_tensors : 0; }

relcl_tensor_info relcl_model_tensor(const relcl_model *m, size_t i) {
  relcl_tensor_info none;
  memset(&none, 0, sizeof none);
  if (m == NULL || i >= m->n_tensors) return none;
  return m->tensors[i];
}

size_t relcl_model_param_count(const relcl_model *m) { return m ? m->param_count : 0; }

cl_mem relcl_model_arena(const relcl_model *m, relcl_arena which) {
  if (m == NULL || (int)which < 0 || (int)which > 3) return NULL;
  return m->arena[which];
}

static relcl_status arena_arg(const relcl_model *m, relcl_arena which, const void *p,
                              const char *op) {
  if (m == NULL || p == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: model and buffer are required", op);
  if ((int)which < 0 || (int)which > 3)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: no arena %d", op, (int)which);
  return RELCL_OK;
}

relcl_status relcl_model_arena_read(relcl_model *m, relcl_arena which, float *dst) {
  relcl__clear_error();
  relcl_status st = arena_arg(m, which, dst, "relcl_model_arena_read");
  if (st != RELCL_OK) return st;
  return relcl__read(m->ctx, relcl_buf_at(m->arena[which], 0), dst, m->param_count);
}

relcl_status relcl_model_arena_write(relcl_model *m, relcl_arena which, const float *src) {
  relcl__clear_error();
  relcl_status st = arena_arg(m, which, src, "relcl_model_arena_write");
  if (st != RELCL_OK) return st;
  return relcl__write(m->ctx, relcl_buf_at(m->arena[which], 0), src, m->param_count);
}

relcl_status relcl_model_zero_grad(relcl_model *m) {
  relcl__clear_error();
  if (m == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_model_zero_grad: no model");
  return relcl__fill(m->ctx, relcl_buf_at(m->arena[RELCL_ARENA_GRADS], 0), 0.0f,
                     m->param_count);
}

/* ---- batches ---- */

static relcl_status check_ids(const int32_t *ids, size_t n, int vocab, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab)
      return relcl__fail(RELCL_ERR_INVALID_ARG, "batch: %s[%zu] = %d is outside 0..%d", what,
                         i, (int)ids[i], vocab - 1);
  return RELCL_OK;
}

static relcl_status check_lens(const int32_t *lens, int B, int n, const char *what) {
  for (int b = 0; b < B; b++)
    if (lens[b] < 0 || lens[b] > n)
      return relcl__fail(RELCL_ERR_INVALID_ARG, "batch: %s[%d] = %d is outside 0..%d", what, b,
                         (int)lens[b], n);
  return RELCL_OK;
}

static relcl_status check_batch(const relcl_model *m, const relcl_model_batch *b,
                                bool with_tgt, const char *op) {
  if (m == NULL || b == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: model and batch are required", op);
  const int L = m->cfg.max_length;
  if (b->batch < 1 || b->src_len < 1 || b->src_len > L)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "%s: batch=%d must be > 0 and src_len=%d in 1..max_length=%d", op,
                       b->batch, b->src_len, L);
  if (b->src == NULL || b->src_lens == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: src and src_lens are required", op);
  if ((double)b->batch * b->src_len * m->cfg.d_model * 4 > 4e9)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: batch too large", op);
  const size_t Ns = (size_t)b->batch * (size_t)b->src_len;
  relcl_status st = check_ids(b->src, Ns, m->cfg.vocab, "src");
  if (st == RELCL_OK) st = check_lens(b->src_lens, b->batch, b->src_len, "src_lens");
  if (st != RELCL_OK || !with_tgt) return st;
  if (b->tgt_len < 1 || b->tgt_len > L)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: tgt_len=%d must be in 1..max_length=%d", op,
                       b->tgt_len, L);
  if (b->tgt_in == NULL || b->tgt_out == NULL || b->tgt_lens == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: tgt_in, tgt_out and tgt_lens are required",
                       op);
  if ((double)b->batch * b->tgt_len * m->cfg.d_model * 4 > 4e9)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: batch too large", op);
  const size_t Nt = (size_t)b->batch * (size_t)b->tgt_len;
  st = check_ids(b->tgt_in, Nt, m->cfg.vocab, "tgt_in");
  if (st == RELCL_OK) st = check_ids(b->tgt_out, Nt, m->cfg.vocab, "tgt_out");
  if (st == RELCL_OK) st = check_lens(b->tgt_lens, b->batch, b->tgt_len, "tgt_lens");
  return st;
}

relcl_status relcl__model_check_src(const relcl_model *m, const relcl_model_batch *b,
                                    const char *op) {
  return check_batch(m, b, false, op);
}

static relcl_status finish_stats(relcl_model *m, const relcl_model_batch *b,
                                 relcl_model_stats *stats) {
  float sums[2];
  relcl_status st = relcl__read(m->ctx, relcl_buf_at(m->stats, 0), sums, 2);
  if (st != RELCL_OK || stats == NULL) return st;
  size_t tokens = 0, Nt = (size_t)b->batch * (size_t)b->tgt_len;
  for (size_t i = 0; i < Nt; i++) tokens += b->tgt_out[i] != RELCL_PAD_ID;
  stats->loss_sum += sums[0];
  stats->nll_sum += sums[1];
  stats->tokens += tokens;
  return RELCL_OK;
}

relcl_status relcl_model_train_batch(relcl_model *m, const relcl_model_batch *batch,
                                     uint64_t seed, uint64_t step, int micro,
                                     relcl_model_stats *stats) {
  relcl__clear_error();
  static const char op[] = "relcl_model_train_batch";
  relcl_status st = check_batch(m, batch, true, op);
  if (st != RELCL_OK) return st;
  if (micro < 0 || micro > 255 || step >= ((uint64_t)1 << 44))
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: micro=%d must be in 0..255, step < 2^44",
                       op, micro);
  int n_tokens = 0;
  st = relcl__model_layout(m, batch->batch, batch->src_len, batch->tgt_len);
  if (st == RELCL_OK) st = relcl__model_upload(m, batch, true, true, &n_tokens);
  if (st == RELCL_OK) st = relcl__model_run(m, batch, true, seed, step, micro, n_tokens);
  if (st == RELCL_OK) st = finish_stats(m, batch, stats);
  return st;
}

relcl_status relcl_model_eval_batch(relcl_model *m, const relcl_model_batch *batch,
                                    relcl_model_stats *stats) {
  relcl__clear_error();
  relcl_status st = check_batch(m, batch, true, "relcl_model_eval_batch");
  if (st != RELCL_OK) return st;
  int n_tokens = 0;
  st = relcl__model_layout(m, batch->batch, batch->src_len, batch->tgt_len);
  if (st == RELCL_OK) st = relcl__model_upload(m, batch, true, false, &n_tokens);
  if (st == RELCL_OK) st = relcl__model_run(m, batch, false, 0, 0, 0, 0);
  if (st == RELCL_OK) st = finish_stats(m, batch, stats);
  return st;
}


/* ---- optimizer ---- */

relcl_status relcl_model_adam_step(relcl_model *m, const relcl_adam_opts *opts, uint64_t step,
                                   float *grad_norm) {
  relcl__clear_error();
  static const char op[] = "relcl_model_adam_step";
  if (m == NULL || opts == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "%s: model and opts are required", op);
  relcl_adam_args a;
  a.lr = opts->lr;
  a.beta1 = opts->beta1;
  a.beta2 = opts->beta2;
  a.eps = opts->eps;
  a.step = step;
  a.grad_scale = opts->grad_scale;
  a.clip_norm = opts->clip_norm;
  relcl_buf grads = relcl_buf_at(m->arena[RELCL_ARENA_GRADS], 0);
  relcl_buf sumsq = relcl_buf_at(m->stats, 2);
  relcl_status st = RELCL_OK;
  if (opts->clip_norm > 0.0f || grad_norm)
    st = relcl__sumsq(m->ctx, m->param_count, grads, sumsq);
  if (st == RELCL_OK) /* the checked entry: opts are the caller's (once per step) */
    st = relcl_adam_update(m->ctx, m->param_count, &a,
                           relcl_buf_at(m->arena[RELCL_ARENA_PARAMS], 0), grads,
                           relcl_buf_at(m->arena[RELCL_ARENA_ADAM_M], 0),
                           relcl_buf_at(m->arena[RELCL_ARENA_ADAM_V], 0), sumsq);
  if (st == RELCL_OK && grad_norm) {
    float s;
    st = relcl__read(m->ctx, sumsq, &s, 1);
    if (st == RELCL_OK) *grad_norm = opts->grad_scale * sqrtf(s);
  }
  return st;
}

float relcl_lr_schedule(int d_model, uint64_t step, uint64_t warmup, float scale) {
  if (d_model < 1) return 0.0f;
  double s = step < 1 ? 1.0 : (double)step;
  double w = warmup < 1 ? 1.0 : (double)warmup;
  double a = 1.0 / sqrt(s), b = s * pow(w, -1.5);
  return (float)((double)scale / sqrt((double)d_model) * (a < b ? a : b));
}

void relcl__decode_ws_free(relcl__dec_ws *ws) {
  if (ws == NULL) return;
  for (int i = 0; i < ws->n; i++)
    if (ws->buf[i]) clReleaseMemObject(ws->buf[i]);
  free(ws->buf);
  free(ws->cap);
  free(ws);
}
