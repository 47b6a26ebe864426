/* Host-side data: the parallel corpus as subword ids and the length-bucketed, seeded
 * batcher. Text files come from text.c, subwords from spm.cc (the only C++ file) through the
 * public relcl_text_* and relcl_spm_* functions. */
#include "base.h"
#include "relcl_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- corpus ---------------------------------------------------------------------------- */

struct relcl_corpus {
  int32_t *ids; /* src ids of pair i at off[i], its tgt ids right after */
  size_t n_ids, cap_ids;
  size_t *off, *line;
  int32_t *src_len, *tgt_len;
  size_t n, cap;
  relcl_corpus_stats stats;
};

relcl_status relcl_corpus_create(relcl_corpus **out) {
  relcl__clear_error();
  if (out == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "corpus_create: out is NULL");
  *out = calloc(1, sizeof **out);
  if (*out == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "corpus_create: out of memory");
  return RELCL_OK;
}

void relcl_corpus_destroy(relcl_corpus *c) {
  if (c == NULL) return;
  free(c->ids);
  free(c->off);
  free(c->line);
  free(c->src_len);
  free(c->tgt_len);
  free(c);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 1;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (q == NULL) return 0;
  *p = q;
  *cap = c;
  return 1;
}

relcl_status relcl_corpus_add(relcl_corpus *c, const int32_t *src, int src_len, const int32_t *tgt,
                              int tgt_len, size_t line) {
  relcl__clear_error();
  if (c == NULL || src == NULL || tgt == NULL || src_len <= 0 || tgt_len <= 0)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "corpus_add: line %zu: both sides need at least one id (src %d, tgt %d)",
                       line, src_len, tgt_len);
  for (int k = 0; k < src_len; k++)
    if (src[k] < 0) return relcl__fail(RELCL_ERR_INVALID_ARG, "corpus_add: negative id");
  for (int k = 0; k < tgt_len; k++)
    if (tgt[k] < 0) return relcl__fail(RELCL_ERR_INVALID_ARG, "corpus_add: negative id");
  size_t pair_cap = c->cap, ids_need = c->n_ids + (size_t)src_len + (size_t)tgt_len;
  if (!grow((void **)&c->ids, &c->cap_ids, ids_need, sizeof *c->ids)) goto oom;
  if (c->n + 1 > c->cap) {
    size_t cap;
    cap = pair_cap;
    if (!grow((void **)&c->off, &cap, c->n + 1, sizeof *c->off)) goto oom;
    cap = pair_cap;
    if (!grow((void **)&c->line, &cap, c->n + 1, sizeof *c->line)) goto oom;
    cap = pair_cap;
    if (!grow((void **)&c->src_len, &cap, c->n + 1, sizeof *c->src_len)) goto oom;
    cap = pair_cap;
    if (!grow((void **)&c->tgt_len, &cap, c->n + 1, sizeof *c->tgt_len)) goto oom;
    c->cap = cap;
  }
  c->off[c->n] = c->n_ids;
  c->line[c->n] = line;
  c->src_len[c->n] = src_len;
  c->tgt_len[c->n] = tgt_len;
  memcpy(c->ids + c->n_ids, src, (size_t)src_len * sizeof *src);
  memcpy(c->ids + c->n_ids + src_len, tgt, (size_t)tgt_len * sizeof *tgt);
  c->n_ids = ids_need;
  c->n++;
  c->stats.pairs = c->n;
  c->stats.src_tokens += (size_t)src_len;
  c->stats.tgt_tokens += (size_t)tgt_len;
  if (src_len > c->stats.src_max) c->stats.src_max = src_len;
  if (tgt_len > c->stats.tgt_max) c->stats.tgt_max = tgt_len;
  return RELCL_OK;
oom:
  return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "corpus_add: out of memory at pair %zu", c->n);
}

/* Encode one line, turning a failure into "FILE:LINE: ..." */
static relcl_status encode_line(const relcl_spm *spm, const relcl_text *t, size_t i,
                                const char *path, int32_t **ids, size_t *n) {
  relcl_status st = relcl_spm_encode(spm, relcl_text_line(t, i, NULL), ids, n);
  if (st != RELCL_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", relcl_last_error());
    st = relcl__fail(st, "%s:%zu: %s", path, i + 1, why);
  }
  return st;
}

relcl_status relcl_corpus_load(relcl_corpus **out, const char *src_path, const char *tgt_path,
                               const relcl_spm *spm, int max_length) {
  relcl__clear_error();
  if (out == NULL || src_path == NULL || tgt_path == NULL || spm == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "corpus_load: NULL argument");
  *out = NULL;
  relcl_text *a = NULL, *b = NULL;
  relcl_corpus *c = NULL;
  int32_t *x = NULL, *y = NULL;
  relcl_status st;
  if ((st = relcl_text_read(&a, src_path)) != RELCL_OK) goto fail;
  if ((st = relcl_text_read(&b, tgt_path)) != RELCL_OK) goto fail;
  size_t na = relcl_text_count(a), nb = relcl_text_count(b);
  if (na != nb) {
    /* point at the first line the shorter file has no partner for */
    const char *longer = na > nb ? src_path : tgt_path;
    st = relcl__fail(RELCL_ERR_FORMAT,
                     "%s:%zu: line counts differ: %s has %zu lines but %s has %zu lines", longer,
                     (na < nb ? na : nb) + 1, src_path, na, tgt_path, nb);
    goto fail;
  }
  if ((st = relcl_corpus_create(&c)) != RELCL_OK) goto fail;
  c->stats.lines = na;
  for (size_t i = 0; i < na; i++) {
    if (relcl_text_blank(a, i) || relcl_text_blank(b, i)) {
      c->stats.empty++;
      continue;
    }
    size_t nx = 0, ny = 0;
    if ((st = encode_line(spm, a, i, src_path, &x, &nx)) != RELCL_OK) goto fail;
    if ((st = encode_line(spm, b, i, tgt_path, &y, &ny)) != RELCL_OK) goto fail;
    if (nx == 0 || ny == 0) {
      c->stats.empty++;
    } else if (max_length > 0 && (nx > (size_t)max_length || ny > (size_t)max_length)) {
      c->stats.too_long++;
    } else if ((st = relcl_corpus_add(c, x, (int)nx, y, (int)ny, i + 1)) != RELCL_OK) {
      goto fail;
    }
    free(x);
    free(y);
    x = y = NULL;
  }
  relcl_text_destroy(a);
  relcl_text_destroy(b);
  *out = c;
  return RELCL_OK;
fail:
  free(x);
  free(y);
  relcl_text_destroy(a);
  relcl_text_destroy(b);
  relcl_corpus_destroy(c);
  return st;
}

size_t relcl_corpus_size(const relcl_corpus *c) { return c ? c->n : 0; }

void relcl_corpus_get_stats(const relcl_corpus *c, relcl_corpus_stats *stats) {
  if (stats == NULL) return;
  if (c == NULL) {
    memset(stats, 0, sizeof *stats);
    return;
  }
  *stats = c->stats;
}

const int32_t *relcl_corpus_src(const relcl_corpus *c, size_t i, int *len) {
  if (c == NULL || i >= c->n) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = c->src_len[i];
  return c->ids + c->off[i];
}

const int32_t *relcl_corpus_tgt(const relcl_corpus *c, size_t i, int *len) {
  if (c == NULL || i >= c->n) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = c->tgt_len[i];
  return c->ids + c->off[i] + c->src_len[i];
}

size_t relcl_corpus_line(const relcl_corpus *c, size_t i) { return c && i < c->n ? c->line[i] : 0; }

/* ---- batches --------------------------------------------------------------------------- */

/* splitmix64 (Steele, Lea & Flood 2014): the generator relcl_data.h specifies. */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, n), n >= 1, without modulo bias: reject draws below 2^64 mod n. */
static uint64_t below(uint64_t *state, uint64_t n) {
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t z = splitmix64(state);
    if (z >= threshold) return z % n;
  }
}

static void fisher_yates(uint64_t *state, size_t *a, size_t n) {
  for (size_t i = n; i-- > 1;) {
    size_t j = (size_t)below(state, (uint64_t)i + 1);
    size_t t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

struct relcl_batcher {
  const relcl_corpus *corpus;
  relcl_batch_opts opts;
  size_t n;      /* pairs */
  int32_t *cost; /* (n) L = max(S, T) of each pair */
  int32_t max_cost;
  size_t *hist; /* (max_cost + 2) counting-sort buckets */
  size_t nb;    /* batches per epoch */
  size_t *cut;  /* (nb + 1) batch b is sorted positions [cut[b], cut[b+1]) */
  /* the plan of one epoch, computed when first asked for */
  int have_plan;
  uint64_t plan_epoch;
  size_t *shuffled; /* (n) */
  size_t *order;    /* (n) pairs sorted by cost */
  size_t *perm;     /* (nb) batch order */
  /* position of next() */
  uint64_t epoch;
  size_t index;
  /* the batch handed out, sized for the largest */
  int32_t *src, *tgt_in, *tgt_out, *src_lens, *tgt_lens;
  size_t *pairs;
};

relcl_batch_opts relcl_batch_opts_default(size_t batch_tokens, uint64_t seed) {
  relcl_batch_opts o;
  o.batch_tokens = batch_tokens;
  o.seed = seed;
  o.shuffle = 1;
  o.src_eos = 1;
  return o;
}

static void pair_lens(const relcl_batcher *b, size_t p, int *s, int *t) {
  *s = b->corpus->src_len[p] + (b->opts.src_eos ? 1 : 0);
  *t = b->corpus->tgt_len[p] + 1;
}

/* Stable counting sort of in[] by cost into out[]. */
static void sort_by_cost(relcl_batcher *b, const size_t *in, size_t *out) {
  memset(b->hist, 0, ((size_t)b->max_cost + 2) * sizeof *b->hist);
  for (size_t i = 0; i < b->n; i++) b->hist[b->cost[in[i]] + 1]++;
  for (int32_t c = 1; c <= b->max_cost + 1; c++) b->hist[c] += b->hist[c - 1];
  for (size_t i = 0; i < b->n; i++) out[b->hist[b->cost[in[i]]]++] = in[i];
}

static void make_plan(relcl_batcher *b, uint64_t epoch) {
  if (b->have_plan && (b->plan_epoch == epoch || !b->opts.shuffle)) return;
  for (size_t i = 0; i < b->n; i++) b->shuffled[i] = i;
  uint64_t state = b->opts.seed ^ (0xD1B54A32D192ED03ull * (epoch + 1));
  if (b->opts.shuffle) fisher_yates(&state, b->shuffled, b->n);
  sort_by_cost(b, b->shuffled, b->order);
  for (size_t k = 0; k < b->nb; k++) b->perm[k] = k;
  if (b->opts.shuffle) fisher_yates(&state, b->perm, b->nb);
  b->have_plan = 1;
  b->plan_epoch = epoch;
}

void relcl_batcher_destroy(relcl_batcher *b) {
  if (b == NULL) return;
  free(b->cost);
  free(b->hist);
  free(b->cut);
  free(b->shuffled);
  free(b->order);
  free(b->perm);
  free(b->src);
  free(b->tgt_in);
  free(b->tgt_out);
  free(b->src_lens);
  free(b->tgt_lens);
  free(b->pairs);
  free(b);
}

relcl_status relcl_batcher_create(relcl_batcher **out, const relcl_corpus *corpus,
                                  const relcl_batch_opts *opts) {
  relcl__clear_error();
  if (out == NULL || corpus == NULL || opts == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "batcher_create: NULL argument");
  *out = NULL;
  if (corpus->n == 0) return relcl__fail(RELCL_ERR_INVALID_ARG, "batcher: the corpus is empty");
  relcl_batcher *b = calloc(1, sizeof *b);
  if (b == NULL) goto oom;
  b->corpus = corpus;
  b->opts = *opts;
  b->n = corpus->n;
  b->cost = malloc(b->n * sizeof *b->cost);
  if (b->cost == NULL) goto oom;
  for (size_t p = 0; p < b->n; p++) {
    int s, t;
    pair_lens(b, p, &s, &t);
    b->cost[p] = s > t ? s : t;
    if (b->cost[p] > b->max_cost) b->max_cost = b->cost[p];
  }
  if (opts->batch_tokens < (size_t)b->max_cost) {
    size_t p = 0;
    while (b->cost[p] != b->max_cost) p++;
    relcl_status st = relcl__fail(RELCL_ERR_INVALID_ARG,
                                  "batcher: batch_tokens %zu is below the longest pair "
                                  "(%d tokens with BOS/EOS, line %zu)",
                                  opts->batch_tokens, (int)b->max_cost, corpus->line[p]);
    relcl_batcher_destroy(b);
    return st;
  }
  b->hist = malloc(((size_t)b->max_cost + 2) * sizeof *b->hist);
  b->shuffled = malloc(b->n * sizeof *b->shuffled);
  b->order = malloc(b->n * sizeof *b->order);
  b->cut = malloc((b->n + 1) * sizeof *b->cut);
  if (!b->hist || !b->shuffled || !b->order || !b->cut) goto oom;

  /* Cut the cost-sorted sequence (identity order: only the costs matter). */
  for (size_t i = 0; i < b->n; i++) b->shuffled[i] = i;
  sort_by_cost(b, b->shuffled, b->order);
  size_t rows_max = 0, cells_max = 0, start = 0;
  b->nb = 0;
  while (start < b->n) {
    size_t end = start + 1;
    while (end < b->n && (end - start + 1) * (size_t)b->cost[b->order[end]] <= opts->batch_tokens)
      end++;
    b->cut[b->nb++] = start;
    size_t rows = end - start, cells = rows * (size_t)b->cost[b->order[end - 1]];
    if (rows > rows_max) rows_max = rows;
    if (cells > cells_max) cells_max = cells;
    start = end;
  }
  b->cut[b->nb] = b->n;
  b->perm = malloc(b->nb * sizeof *b->perm);
  b->src = malloc(cells_max * sizeof *b->src);
  b->tgt_in = malloc(cells_max * sizeof *b->tgt_in);
  b->tgt_out = malloc(cells_max * sizeof *b->tgt_out);
  b->src_lens = malloc(rows_max * sizeof *b->src_lens);
  b->tgt_lens = malloc(rows_max * sizeof *b->tgt_lens);
  b->pairs = malloc(rows_max * sizeof *b->pairs);
  if (!b->perm || !b->src || !b->tgt_in || !b->tgt_out || !b->src_lens || !b->tgt_lens || !b->pairs)
    goto oom;
  *out = b;
  return RELCL_OK;
oom:
  relcl_batcher_destroy(b);
  return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "batcher: out of memory");
}

size_t relcl_batcher_count(const relcl_batcher *b) { return b ? b->nb : 0; }

relcl_status relcl_batcher_get(relcl_batcher *b, uint64_t epoch, size_t index, relcl_batch *out) {
  relcl__clear_error();
  if (b == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "batcher_get: NULL argument");
  if (index >= b->nb)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "batcher: batch %zu of an epoch of %zu", index,
                       b->nb);
  make_plan(b, epoch);
  size_t k = b->perm[index], first = b->cut[k], rows = b->cut[k + 1] - first;
  int S = 0, T = 0;
  for (size_t r = 0; r < rows; r++) {
    int s, t;
    pair_lens(b, b->order[first + r], &s, &t);
    if (s > S) S = s;
    if (t > T) T = t;
  }
  size_t src_tokens = 0, tgt_tokens = 0;
  for (size_t r = 0; r < rows; r++) {
    size_t p = b->order[first + r];
    int xl, yl;
    const int32_t *x = relcl_corpus_src(b->corpus, p, &xl);
    const int32_t *y = relcl_corpus_tgt(b->corpus, p, &yl);
    int32_t *srow = b->src + r * (size_t)S;
    int32_t *in = b->tgt_in + r * (size_t)T, *outr = b->tgt_out + r * (size_t)T;
    int s = xl + (b->opts.src_eos ? 1 : 0);
    memcpy(srow, x, (size_t)xl * sizeof *x);
    if (b->opts.src_eos) srow[xl] = RELCL_EOS_ID;
    for (int j = s; j < S; j++) srow[j] = RELCL_PAD_ID;
    in[0] = RELCL_BOS_ID;
    memcpy(in + 1, y, (size_t)yl * sizeof *y);
    memcpy(outr, y, (size_t)yl * sizeof *y);
    outr[yl] = RELCL_EOS_ID;
    for (int j = yl + 1; j < T; j++) in[j] = outr[j] = RELCL_PAD_ID;
    b->src_lens[r] = s;
    b->tgt_lens[r] = yl + 1;
    b->pairs[r] = p;
    src_tokens += (size_t)s;
    tgt_tokens += (size_t)yl + 1;
  }
  out->epoch = epoch;
  out->index = index;
  out->batch = (int)rows;
  out->src_len = S;
  out->tgt_len = T;
  out->src = b->src;
  out->tgt_in = b->tgt_in;
  out->tgt_out = b->tgt_out;
  out->src_lens = b->src_lens;
  out->tgt_lens = b->tgt_lens;
  out->pairs = b->pairs;
  out->src_tokens = src_tokens;
  out->tgt_tokens = tgt_tokens;
  return RELCL_OK;
}

relcl_status relcl_batcher_next(relcl_batcher *b, relcl_batch *out) {
  relcl__clear_error();
  if (b == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "batcher_next: NULL batcher");
  relcl_status st = relcl_batcher_get(b, b->epoch, b->index, out);
  if (st != RELCL_OK) return st;
  if (++b->index == b->nb) {
    b->index = 0;
    b->epoch++;
  }
  return RELCL_OK;
}

void relcl_batcher_tell(const relcl_batcher *b, uint64_t *epoch, size_t *index) {
  if (epoch) *epoch = b ? b->epoch : 0;
  if (index) *index = b ? b->index : 0;
}

relcl_status relcl_batcher_seek(relcl_batcher *b, uint64_t epoch, size_t index) {
  relcl__clear_error();
  if (b == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "batcher_seek: NULL batcher");
  if (index > b->nb)
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "batcher: cannot seek to batch %zu of an epoch of %zu batches", index,
                       b->nb);
  if (index == b->nb) {
    epoch++;
    index = 0;
  }
  b->epoch = epoch;
  b->index = index;
  return RELCL_OK;
}
