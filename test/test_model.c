/* The whole Transformer (relcl_model.h) on the device:
 *  1. the gradient of every parameter tensor against central finite differences of the
 *     device's own loss, on very small models (absolute, relative, both + per-head tables +
 *     keys only, pre-norm), with dropout on (masks are fixed by seed and step);
 *  2. a small model overfits 8 sentence pairs to near-zero loss, and greedy decoding then
 *     reproduces the targets;
 *  3. training is bitwise reproducible (same seed, same device: same parameters and moments),
 *     and dropout masks do depend on the seed;
 *  plus the parameter table, presets, eval == train without dropout, the learning-rate
 *  schedule and argument errors. `--bench` times the tiny preset on a ~2000-token batch.
 *
 * Finite differences in float (the exact, every-entry comparison is test_model_ref.c's,
 * against a double-precision CPU model; this one checks the device against itself). Model:
 * vocab 11, d_model 8, 2 heads, d_ff 16, 1+1 layers (2+2 for one configuration), k = 2;
 * batch 2 x (5, 4) with padding on both sides; dropout 0.1 (masks fixed by seed and step);
 * loss = sum of the label-smoothed token losses, L ~ 16. For an entry with analytic gradient
 * g and central difference fd(h) = (L(p+h) - L(p-h)) / 2h, the test requires
 *     |fd(h) - g| <= 0.02 * max(|g|, floor(h)),      floor(h) = 500 ulp(L) / h,
 * at h = 1e-2; or at h = 3e-3 or 1e-3 provided |fd - g| there is also at most half its value
 * at h = 1e-2 (a kink or truncation, below: a wrong gradient's error does not shrink). Why:
 *  - the device returns L as a float sum: it is quantized at ulp(L) (1.9e-6 at L = 16) and
 *    carries a few ulps of rounding from the float forward, so fd has an absolute error of a
 *    few ulp(L) / h (observed up to 3.8 ulp(L) / h): under 1% of the floor (floor(1e-2) =
 *    9.5e-2). An entry with |g| above the floor is held to 2% of itself, one below it to
 *    1.9e-3 absolute: a tensor whose whole gradient is ~1e-2 can fail. (The former rule,
 *    5e-3 of the tensor's largest |g| + 4 ulp(L) / h down to h = 1e-3, allowed 7.6e-3 there,
 *    about the gradient itself.) The key biases' true gradient is exactly 0 (softmax ignores
 *    a per-row constant): there only the rounding is seen;
 *  - truncation, h^2 L''' / 6, is ~1e-5 at h = 1e-2 for O(1) derivatives (observed on
 *    smooth entries: <= 0.6% of |g|), and falls by 11x at h = 3e-3;
 *  - a ReLU input within ~h of zero breaks the expansion (a kink: fd lags g, then converges
 *    as h shrinks, e.g. 0.0015, 0.0042, 0.0114, 0.0267 for g = 0.0266 at h = 1e-1 .. 1e-3).
 * A missing or wrong term (a factor, a sign, a lost path) gives errors of O(|g|) at every h.
 * 12 entries per tensor: its 4 largest |g| and 8 random ones (fixed seed). A control pass
 * reports 5e-3 for every entry of a key bias (true gradient 0: a small-gradient tensor wrong
 * by its own size) and requires exactly that tensor to fail.
 */
#include <time.h>

#include "relcl_data.h"
#include "relcl_model.h"
#include "testutil.h"

/* --keep-buffers (for Oclgrind): destroy models only at exit. Oclgrind 21.10's
 * uninitialized-value checker misreports buffers created after others were released
 * (see test_attention.c); each model alone is clean. */
static int keep_models;
static relcl_model *kept[64];
static int n_kept;

static void done_model(relcl_model *m) {
  if (keep_models && n_kept < 64)
    kept[n_kept++] = m;
  else
    relcl_model_destroy(m);
}

/* ---- a small batch with padding ---- */

typedef struct batch_data {
  int B, S, T;
  int32_t *src, *tgt_in, *tgt_out, *src_lens, *tgt_lens;
} batch_data;

/* Pairs given as id lists (no BOS/EOS) packed into one padded batch. */
static batch_data pack(int n, int32_t *const *src, const int *slen, int32_t *const *tgt,
                       const int *tlen) {
  batch_data b;
  b.B = n;
  b.S = b.T = 0;
  for (int i = 0; i < n; i++) {
    if (slen[i] > b.S) b.S = slen[i];
    if (tlen[i] + 1 > b.T) b.T = tlen[i] + 1;
  }
  b.src = calloc((size_t)n * b.S, 4);
  b.tgt_in = calloc((size_t)n * b.T, 4);
  b.tgt_out = calloc((size_t)n * b.T, 4);
  b.src_lens = calloc((size_t)n, 4);
  b.tgt_lens = calloc((size_t)n, 4);
  for (int i = 0; i < n; i++) {
    memcpy(b.src + (size_t)i * b.S, src[i], (size_t)slen[i] * 4);
    b.src_lens[i] = slen[i];
    b.tgt_in[(size_t)i * b.T] = RELCL_BOS_ID;
    memcpy(b.tgt_in + (size_t)i * b.T + 1, tgt[i], (size_t)tlen[i] * 4);
    memcpy(b.tgt_out + (size_t)i * b.T, tgt[i], (size_t)tlen[i] * 4);
    b.tgt_out[(size_t)i * b.T + tlen[i]] = RELCL_EOS_ID;
    b.tgt_lens[i] = tlen[i] + 1;
  }
  return b;
}

static relcl_model_batch view(const batch_data *b) {
  relcl_model_batch v = {b->B, b->S, b->T, b->src, b->tgt_in, b->tgt_out, b->src_lens,
                         b->tgt_lens};
  return v;
}

static void free_batch(batch_data *b) {
  free(b->src), free(b->tgt_in), free(b->tgt_out), free(b->src_lens), free(b->tgt_lens);
}

/* Random pairs over the ids 4..vocab-1; target = a fixed map of the reversed source. */
static batch_data random_pairs(int n, int vocab, int min_len, int max_len, uint64_t seed) {
  int32_t **s = calloc((size_t)n, sizeof *s), **t = calloc((size_t)n, sizeof *t);
  int *sl = calloc((size_t)n, sizeof *sl), *tl = calloc((size_t)n, sizeof *tl);
  const int real = vocab - 4;
  for (int i = 0; i < n; i++) {
    sl[i] = min_len + (int)(tu_next(&seed) % (uint64_t)(max_len - min_len + 1));
    tl[i] = sl[i];
    s[i] = calloc((size_t)sl[i], 4);
    t[i] = calloc((size_t)tl[i], 4);
    for (int j = 0; j < sl[i]; j++) s[i][j] = 4 + (int32_t)(tu_next(&seed) % (uint64_t)real);
    for (int j = 0; j < tl[i]; j++) t[i][j] = 4 + (s[i][sl[i] - 1 - j] - 4 + 5) * 7 % real;
  }
  batch_data b = pack(n, s, sl, t, tl);
  for (int i = 0; i < n; i++) free(s[i]), free(t[i]);
  free(s), free(t), free(sl), free(tl);
  return b;
}

static relcl_model_config small_config(void) { return tu_small_model_config(); }

/* ---- 1. finite differences ---- */

/* per entry: |fd - g| <= FD_TOL max(|g|, FD_FLOOR_ULPS ulp(L) / h) at h = 1e-2, or at
 * 3e-3 or 1e-3 when |fd - g| also fell to half its size at 1e-2 (a kink or truncation) */
enum { FD_RUNGS = 3 };
static const double FD_TOL = 0.02, FD_FLOOR_ULPS = 500.0;

static double loss_at(relcl_model *m, const relcl_model_batch *b, uint64_t seed, uint64_t step) {
  relcl_model_stats s = {0, 0, 0};
  TU_OK(relcl_model_train_batch(m, b, seed, step, 1, &s));
  return s.loss_sum;
}

/* Entries to probe in a tensor of n: its PROBES_TOP largest |g| (the ones a scale error
 * shows in first) and then random distinct ones, PROBES in all (or all n when fewer). */
enum { PROBES = 12, PROBES_TOP = 4 };

static int pick_probes(const float *g, size_t n, uint64_t seed, size_t *out) {
  int k = 0;
  const int want = n < PROBES ? (int)n : PROBES;
  while (k < want && k < PROBES_TOP) { /* the largest |g| not yet taken */
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
      int taken = 0;
      for (int j = 0; j < k; j++) taken |= out[j] == i;
      if (!taken && (best == n || fabsf(g[i]) > fabsf(g[best]))) best = i;
    }
    out[k++] = best;
  }
  while (k < want) {
    size_t i = (size_t)(tu_next(&seed) % n);
    int taken = 0;
    for (int j = 0; j < k; j++) taken |= out[j] == i;
    if (!taken) out[k++] = i;
  }
  return k;
}

/* Every tensor, or with only >= 0 that tensor alone, silently (the control pass); returns
 * the number of tensors that failed. */
static int check_fd_tensors(relcl_model *m, const relcl_model_batch *b, const char *name,
                            float *params, const float *grads, double L0, long only) {
  const uint64_t seed = 1234, step = 5;
  const float Lf = (float)L0;
  const double ulp = (double)nextafterf(Lf, INFINITY) - (double)Lf;
  static const float steps[FD_RUNGS] = {1e-2f, 3e-3f, 1e-3f};
  double worst_all = 0.0;
  const char *worst_name = "";
  int rungs[FD_RUNGS] = {0, 0, 0}, n_failed = 0;
  for (size_t ti = 0; ti < relcl_model_tensor_count(m); ti++) {
    if (only >= 0 && (size_t)only != ti) continue;
    relcl_tensor_info t = relcl_model_tensor(m, ti);
    double scale = 0.0;
    for (size_t i = 0; i < t.size; i++) scale = fmax(scale, fabs(grads[t.offset + i]));
    size_t probe[PROBES];
    const int n_probes = pick_probes(grads + t.offset, t.size, 500 + ti, probe);
    double worst = 0.0;
    int ok = 1, worst_rung = 0;
    for (int pi = 0; pi < n_probes; pi++) {
      const size_t i = t.offset + probe[pi];
      const float keep = params[i];
      const double g = grads[i];
      double err = 0.0, abs_err[FD_RUNGS] = {0, 0, 0};
      int passed = 0, k;
      for (k = 0; k < FD_RUNGS && !passed; k++) {
        const float h = steps[k];
        double L[2];
        for (int side = 0; side < 2; side++) {
          params[i] = keep + (side ? h : -h);
          TU_OK(relcl_model_arena_write(m, RELCL_ARENA_PARAMS, params));
          L[side] = loss_at(m, b, seed, step);
        }
        params[i] = keep;
        /* the step actually taken in float */
        double hh = ((double)(keep + h) - (double)(keep - h)) / 2.0;
        double fd = (L[1] - L[0]) / (2.0 * hh);
        const double floor_ = FD_FLOOR_ULPS * ulp / hh;
        abs_err[k] = fabs(fd - g);
        err = abs_err[k] / fmax(fabs(g), floor_);
        passed = err <= FD_TOL && (k == 0 || abs_err[k] <= 0.5 * abs_err[0]);
      }
      ok &= passed;
      if (k - 1 > worst_rung) worst_rung = k - 1;
      rungs[k - 1]++;
      worst = fmax(worst, err);
    }
    TU_OK(relcl_model_arena_write(m, RELCL_ARENA_PARAMS, params));
    if (!ok) n_failed++;
    if (worst > worst_all) worst_all = worst, worst_name = t.name;
    if (only < 0)
      tu_check(ok, "fd %-22s %-28s rel err %.1e (h=%.0e, %d entries, max |g| %.2e)", name,
               t.name, worst, (double)steps[worst_rung], n_probes, scale);
  }
  if (only < 0)
    printf("     fd %-22s loss %.4f, %zu tensors, worst rel err %.1e (%s); entries passed at "
           "h=1e-2/3e-3/1e-3 (kinks): %d/%d/%d\n",
           name, L0, relcl_model_tensor_count(m), worst_all, worst_name, rungs[0], rungs[1],
           rungs[2]);
  return n_failed;
}

static void check_fd(relcl_context *ctx, const char *name, relcl_model_config cfg,
                     const char *control) {
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &cfg, 7, &m));
  /* source lengths 5 and 3, target lengths 4 and 2 (with EOS): padding on both sides */
  int32_t s0[] = {4, 5, 6, 7, 5}, s1[] = {8, 9, 10}, t0[] = {6, 4, 6}, t1[] = {10};
  int32_t *src[] = {s0, s1}, *tgt[] = {t0, t1};
  int sl[] = {5, 3}, tl[] = {3, 1};
  batch_data bd = pack(2, src, sl, tgt, tl);
  relcl_model_batch b = view(&bd);
  const uint64_t seed = 1234, step = 5;
  const size_t n = relcl_model_param_count(m);
  float *params = tu_alloc_host(n), *grads = tu_alloc_host(n);
  TU_OK(relcl_model_zero_grad(m));
  relcl_model_stats st0 = {0, 0, 0};
  TU_OK(relcl_model_train_batch(m, &b, seed, step, 1, &st0));
  TU_OK(relcl_model_arena_read(m, RELCL_ARENA_GRADS, grads));
  TU_OK(relcl_model_arena_read(m, RELCL_ARENA_PARAMS, params));
  check_fd_tensors(m, &b, name, params, grads, st0.loss_sum, -1);
  if (control) {
    /* the planted error: the key bias's gradient is truly 0 (softmax ignores a per-row
     * constant); report 5e-3 for each entry instead, a tensor wrong by the whole size of a
     * small gradient. The former rule (5e-3 scale + 4 ulp(L) / h down to h = 1e-3, i.e.
     * 7.6e-3 absolute) let it pass. */
    long ti = -1;
    for (size_t i = 0; i < relcl_model_tensor_count(m); i++)
      if (strcmp(relcl_model_tensor(m, i).name, control) == 0) ti = (long)i;
    if (ti >= 0) {
      relcl_tensor_info t = relcl_model_tensor(m, (size_t)ti);
      for (size_t i = 0; i < t.size; i++) grads[t.offset + i] += 5e-3f;
    }
    tu_check(ti >= 0 && check_fd_tensors(m, &b, name, params, grads, st0.loss_sum, ti) == 1,
             "fd control: %s's gradient (truly 0) reported as 5e-3 is caught", control);
  }
  free(params), free(grads);
  free_batch(&bd);
  done_model(m);
}

/* ---- 2. overfitting ---- */

static void check_overfit(relcl_context *ctx) {
  relcl_model_config c = *relcl_model_preset("tiny");
  c.vocab = 16;
  c.enc_layers = c.dec_layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.d_ff = 64;
  c.max_rel = 4;
  c.dropout = 0.0f;
  c.label_smoothing = 0.0f;
  c.max_length = 16;
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 42, &m));
  batch_data bd = random_pairs(8, c.vocab, 3, 7, 2024);
  relcl_model_batch b = view(&bd);
  const int max_steps = 400;
  double per_token = 1e9;
  int steps = 0;
  printf("     overfit: loss per token by step:");
  for (int step = 1; step <= max_steps; step++) {
    relcl_model_stats s = {0, 0, 0};
    TU_OK(relcl_model_zero_grad(m));
    TU_OK(relcl_model_train_batch(m, &b, 1, (uint64_t)step, 0, &s));
    per_token = s.loss_sum / (double)s.tokens;
    if (step == 1 || step % 25 == 0) printf(" %d:%.3f", step, per_token);
    steps = step;
    if (per_token < 0.02) break;
    relcl_adam_opts o = {3e-3f, 0.9f, 0.98f, 1e-9f, 1.0f / (float)s.tokens, 1.0f};
    TU_OK(relcl_model_adam_step(m, &o, (uint64_t)step, NULL));
  }
  printf(" final %d:%.4f\n", steps, per_token);
  relcl_model_stats e = {0, 0, 0};
  TU_OK(relcl_model_eval_batch(m, &b, &e));
  double eval = e.loss_sum / (double)e.tokens;
  tu_check(eval < 0.1, "overfit: 8 pairs, loss %.4f per token after %d steps (< 0.1)", eval,
           steps);
  const int max_out = 10;
  int32_t *out = calloc((size_t)bd.B * max_out, 4), *lens = calloc((size_t)bd.B, 4);
  TU_OK(relcl_model_greedy(m, &b, max_out, out, lens));
  int exact = 0;
  for (int i = 0; i < bd.B; i++) {
    int n = bd.tgt_lens[i] - 1, ok = lens[i] == n && out[(size_t)i * max_out + n] == RELCL_EOS_ID;
    for (int j = 0; ok && j < n; j++) ok = out[(size_t)i * max_out + j] == bd.tgt_out[(size_t)i * bd.T + j];
    exact += ok;
  }
  tu_check(exact == bd.B, "overfit: greedy decoding reproduces %d of %d targets", exact, bd.B);
  free(out), free(lens);
  free_batch(&bd);
  done_model(m);
}

/* ---- 3. bitwise reproducibility ---- */

static void train_steps(relcl_model *m, const batch_data *halves, uint64_t seed, int steps) {
  for (int step = 1; step <= steps; step++) {
    TU_OK(relcl_model_zero_grad(m));
    relcl_model_stats s = {0, 0, 0};
    for (int micro = 0; micro < 2; micro++) {
      relcl_model_batch b = view(&halves[micro]);
      TU_OK(relcl_model_train_batch(m, &b, seed, (uint64_t)step, micro, &s));
    }
    float lr = relcl_lr_schedule(relcl_model_get_config(m)->d_model, (uint64_t)step, 4, 1.0f);
    relcl_adam_opts o = {lr, 0.9f, 0.98f, 1e-9f, 1.0f / (float)s.tokens, 0.5f};
    float norm;
    TU_OK(relcl_model_adam_step(m, &o, (uint64_t)step, &norm));
  }
}

static void check_reproducible(relcl_context *ctx) {
  relcl_model_config c = small_config();
  c.vocab = 16;
  c.d_model = 16;
  c.dropout = 0.2f;
  relcl_model *m[3];
  batch_data halves[2] = {random_pairs(4, c.vocab, 2, 6, 5), random_pairs(3, c.vocab, 3, 8, 6)};
  for (int i = 0; i < 3; i++) {
    TU_OK(relcl_model_create(ctx, &c, 99, &m[i]));
    train_steps(m[i], halves, i < 2 ? 77 : 78, 4);
  }
  const size_t n = relcl_model_param_count(m[0]);
  float *a = tu_alloc_host(n), *b = tu_alloc_host(n);
  int same = 1;
  for (int arena = 0; arena < 4; arena++) {
    TU_OK(relcl_model_arena_read(m[0], (relcl_arena)arena, a));
    TU_OK(relcl_model_arena_read(m[1], (relcl_arena)arena, b));
    same &= memcmp(a, b, n * 4) == 0;
  }
  tu_check(same, "reproducible: 4 steps x 2 micro-batches twice: every arena bitwise equal");
  TU_OK(relcl_model_arena_read(m[2], RELCL_ARENA_PARAMS, b));
  TU_OK(relcl_model_arena_read(m[0], RELCL_ARENA_PARAMS, a));
  tu_check(memcmp(a, b, n * 4) != 0, "reproducible: another dropout seed gives other parameters");
  free(a), free(b);
  for (int i = 0; i < 3; i++) done_model(m[i]);
  free_batch(&halves[0]), free_batch(&halves[1]);
}

/* ---- the table, presets, eval, schedule, errors ---- */

static void check_table(relcl_context *ctx) {
  relcl_model_config c = small_config();
  c.positions = RELCL_POS_BOTH;
  c.rel_per_head = 1;
  c.pre_norm = 1;
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 1, &m));
  const size_t nt = relcl_model_tensor_count(m), n = relcl_model_param_count(m);
  /* emb; per layer: attention 8 (+2 relative), 2 norms (4), ffn 4; decoder: + cross 8 +
   * a third norm; final norms 2 + 2 */
  const size_t want = 1 + (8 + 2 + 4 + 4) + (8 + 2 + 8 + 6 + 4) + 4;
  int ok = nt == want, names = 1, inside = 1, shapes = 1;
  size_t covered = 0;
  for (size_t i = 0; i < nt; i++) {
    relcl_tensor_info t = relcl_model_tensor(m, i);
    size_t prod = 1;
    for (int d = 0; d < t.ndim; d++) prod *= t.shape[d];
    shapes &= prod == t.size;
    inside &= t.offset + t.size <= n;
    covered += t.size;
    for (size_t j = 0; j < i; j++) {
      relcl_tensor_info u = relcl_model_tensor(m, j);
      names &= strcmp(t.name, u.name) != 0;
      inside &= t.offset >= u.offset + u.size || u.offset >= t.offset + t.size;
    }
  }
  tu_check(ok, "table: %zu tensors (want %zu)", nt, want);
  tu_check(names && inside && shapes && covered <= n,
           "table: unique names, disjoint ranges inside the %zu-float arena, sizes = shapes", n);
  relcl_tensor_info r = relcl_model_tensor(m, 9);
  tu_check(strcmp(r.name, "enc.0.self_attn.rel_k") == 0 && r.ndim == 3 && r.shape[0] == 2 &&
               r.shape[1] == 5 && r.shape[2] == 4,
           "table: %s is (heads, 2k+1, head_dim)", r.name);
  tu_check(relcl_model_tensor(m, nt).name == NULL, "table: out-of-range index gives no tensor");
  /* initialization: pad row zero, unit gains, zero biases, Xavier bound, embedding sd */
  float *p = tu_alloc_host(n);
  TU_OK(relcl_model_arena_read(m, RELCL_ARENA_PARAMS, p));
  int init_ok = 1;
  double emb_var = 0.0;
  for (size_t i = 0; i < nt; i++) {
    relcl_tensor_info t = relcl_model_tensor(m, i);
    const float *x = p + t.offset;
    if (strcmp(t.name, "emb.weight") == 0) {
      for (size_t j = 0; j < t.shape[1]; j++) init_ok &= x[j] == 0.0f;
      for (size_t j = t.shape[1]; j < t.size; j++) emb_var += (double)x[j] * x[j];
      emb_var /= (double)(t.size - t.shape[1]);
    } else if (strstr(t.name, "norm") && strstr(t.name, ".weight")) {
      for (size_t j = 0; j < t.size; j++) init_ok &= x[j] == 1.0f;
    } else if (t.ndim == 1) {
      for (size_t j = 0; j < t.size; j++) init_ok &= x[j] == 0.0f;
    } else {
      double a = sqrt(6.0 / (double)(t.shape[t.ndim - 1] + t.shape[t.ndim - 2]));
      for (size_t j = 0; j < t.size; j++) init_ok &= fabs(x[j]) <= a && x[j] != 0.0f;
    }
  }
  tu_check(init_ok, "init: pad row 0, gains 1, biases 0, |Xavier| <= bound");
  /* variance of 80 normal draws: 1/8 within a factor 2 */
  tu_check(emb_var > 0.0625 && emb_var < 0.25, "init: embedding variance %.3f ~ 1/d_model", emb_var);
  free(p);
  done_model(m);

  const char *names_[] = {"tiny", "base", "big"};
  const int dm[] = {128, 512, 1024};
  for (int i = 0; i < 3; i++) {
    const relcl_model_config *pc = relcl_model_preset(names_[i]);
    char buf[256];
    relcl_model_config_describe(pc, buf, sizeof buf);
    tu_check(pc && pc->d_model == dm[i], "preset %s: %s", names_[i], buf);
  }
  tu_check(relcl_model_preset("huge") == NULL && relcl_model_preset(NULL) == NULL,
           "preset: unknown name gives NULL");
  relcl_model_destroy(NULL);
}

static void check_eval_and_schedule(relcl_context *ctx) {
  relcl_model_config c = small_config();
  c.dropout = 0.0f;
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 3, &m));
  batch_data bd = random_pairs(3, c.vocab, 2, 6, 9);
  relcl_model_batch b = view(&bd);
  relcl_model_stats t = {0, 0, 0}, e = {0, 0, 0};
  TU_OK(relcl_model_train_batch(m, &b, 1, 1, 0, &t));
  TU_OK(relcl_model_eval_batch(m, &b, &e));
  tu_check(t.loss_sum == e.loss_sum && t.nll_sum == e.nll_sum && t.tokens == e.tokens &&
               t.loss_sum > e.nll_sum * 0.5,
           "eval: without dropout eval loss == train loss (%.6f, nll %.6f, %zu tokens)",
           e.loss_sum, e.nll_sum, e.tokens);
  free_batch(&bd);
  done_model(m);

  /* lr = d^-0.5 min(s^-0.5, s w^-1.5): peak at s = w */
  double peak = 1.0 / sqrt(512.0) / sqrt(4000.0);
  double e1 = fabs(relcl_lr_schedule(512, 4000, 4000, 1.0f) - peak) / peak;
  double e2 = fabs(relcl_lr_schedule(512, 1, 4000, 2.0f) - 2.0 / sqrt(512.0) * pow(4000.0, -1.5)) /
              (2.0 / sqrt(512.0) * pow(4000.0, -1.5));
  double e3 = fabs(relcl_lr_schedule(512, 16000, 4000, 1.0f) - peak / 2.0) / (peak / 2.0);
  tu_check(e1 < 1e-6 && e2 < 1e-6 && e3 < 1e-6, "lr schedule: peak %.3e at warmup, rel errs %.1e %.1e %.1e",
           peak, e1, e2, e3);
}

static void check_errors(relcl_context *ctx) {
  relcl_model *m = NULL;
  relcl_model_config c = small_config();
  c.heads = 3;
  relcl_status st = relcl_model_create(ctx, &c, 1, &m);
  tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "heads") && m == NULL,
           "error: d_model 8 with 3 heads: %s", relcl_last_error());
  c = small_config();
  c.vocab = 3;
  st = relcl_model_create(ctx, &c, 1, &m);
  tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "vocab"),
           "error: vocab 3: %s", relcl_last_error());
  c = small_config();
  c.dropout = 1.0f;
  st = relcl_model_create(ctx, &c, 1, &m);
  tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "dropout"),
           "error: dropout 1: %s", relcl_last_error());
  tu_check(relcl_model_create(NULL, &c, 1, &m) == RELCL_ERR_INVALID_ARG, "error: NULL context");

  c = small_config();
  TU_OK(relcl_model_create(ctx, &c, 1, &m));
  batch_data bd = random_pairs(2, c.vocab, 2, 4, 1);
  relcl_model_batch b = view(&bd);
  relcl_model_stats s = {0, 0, 0};
  bd.tgt_out[1] = 11;
  st = relcl_model_train_batch(m, &b, 1, 1, 0, &s);
  tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "tgt_out"),
           "error: target id 11 of vocab 11: %s", relcl_last_error());
  bd.tgt_out[1] = 4;
  bd.src_lens[0] = bd.S + 1;
  st = relcl_model_train_batch(m, &b, 1, 1, 0, &s);
  tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "src_lens"),
           "error: source length past src_len: %s", relcl_last_error());
  bd.src_lens[0] = 1;
  b.src_len = 17;
  st = relcl_model_eval_batch(m, &b, &s);
  tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "max_length"),
           "error: src_len over max_length: %s", relcl_last_error());
  b.src_len = bd.S;
  st = relcl_model_train_batch(m, &b, 1, 1, 256, &s);
  tu_check(st == RELCL_ERR_INVALID_ARG, "error: micro-batch 256: %s", relcl_last_error());
  st = relcl_model_train_batch(m, NULL, 1, 1, 0, &s);
  tu_check(st == RELCL_ERR_INVALID_ARG, "error: NULL batch: %s", relcl_last_error());
  int32_t out[4], lens[2];
  st = relcl_model_greedy(m, &b, 0, out, lens);
  tu_check(st == RELCL_ERR_INVALID_ARG, "error: greedy max_out 0: %s", relcl_last_error());
  relcl_adam_opts o = {1e-3f, 0.9f, 0.98f, 1e-9f, 1.0f, 0.0f};
  st = relcl_model_adam_step(m, &o, 0, NULL);
  tu_check(st == RELCL_ERR_INVALID_ARG, "error: Adam step 0: %s", relcl_last_error());
  /* the model still works after the errors */
  s.loss_sum = 0;
  TU_OK(relcl_model_train_batch(m, &b, 1, 1, 0, &s));
  tu_check(s.loss_sum > 0 && isfinite(s.loss_sum), "error: model usable afterwards");
  free_batch(&bd);
  done_model(m);
}

/* ---- --bench: the tiny preset on a ~2000-token batch ---- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(relcl_context *ctx, int vocab, int B, int len, int steps) {
  relcl_model_config c = *relcl_model_preset("tiny");
  c.vocab = vocab;
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 1, &m));
  char desc[256];
  relcl_model_config_describe(&c, desc, sizeof desc);
  batch_data bd = random_pairs(B, vocab, len - 4, len - 1, 3);
  relcl_model_batch b = view(&bd);
  size_t tokens = 0;
  double t0 = 0;
  for (int step = 0; step <= steps; step++) {
    if (step == 1) t0 = now(); /* step 0 warms up: allocations, CLBlast kernels */
    relcl_model_stats s = {0, 0, 0};
    TU_OK(relcl_model_zero_grad(m));
    TU_OK(relcl_model_train_batch(m, &b, 1, (uint64_t)step + 1, 0, &s));
    relcl_adam_opts o = {1e-4f, 0.9f, 0.98f, 1e-9f, 1.0f / (float)s.tokens, 1.0f};
    TU_OK(relcl_model_adam_step(m, &o, (uint64_t)step + 1, NULL));
    TU_OK(relcl_finish(ctx));
    tokens = s.tokens;
  }
  double dt = (now() - t0) / steps;
  printf("bench: %s, %zu params\n", desc, relcl_model_param_count(m));
  printf("bench: batch %d x (%d, %d): %zu target tokens, %.3f s/step, %.0f target tokens/s\n",
         B, bd.S, bd.T, tokens, dt, (double)tokens / dt);
  free_batch(&bd);
  done_model(m);
}

/* One step of everything (train with dropout and accumulation, Adam with clipping, greedy),
 * sized for a simulator: --small runs only this and the error checks (for Oclgrind). */
static void check_one_step(relcl_context *ctx) {
  relcl_model_config c = small_config();
  c.positions = RELCL_POS_BOTH;
  c.enc_layers = c.dec_layers = 2;
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &c, 5, &m));
  batch_data halves[2] = {random_pairs(2, c.vocab, 2, 5, 7), random_pairs(2, c.vocab, 3, 4, 8)};
  train_steps(m, halves, 3, 1);
  int32_t out[2 * 6], lens[2];
  relcl_model_batch b = view(&halves[0]);
  TU_OK(relcl_model_greedy(m, &b, 6, out, lens));
  int ok = 1;
  for (int i = 0; i < 2; i++) {
    ok &= lens[i] >= 0 && lens[i] <= 6;
    for (int j = 0; j < 6; j++) ok &= out[i * 6 + j] >= 0 && out[i * 6 + j] < c.vocab;
  }
  tu_check(ok, "one step: train, Adam, greedy run; outputs in range (lengths %d %d)", lens[0],
           lens[1]);
  free_batch(&halves[0]), free_batch(&halves[1]);
  done_model(m);
}

/* --small: one step of everything and the error checks only (for Oclgrind);
 * --keep-buffers: see done_model.
 * --bench [VOCAB]: time the tiny preset instead of testing. */
int main(int argc, char **argv) {
  int small = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--small") == 0) {
      small = 1;
    } else if (strcmp(argv[i], "--keep-buffers") == 0) {
      keep_models = 1;
    } else if (strcmp(argv[i], "--bench") == 0) {
      int vocab = i + 1 < argc ? atoi(argv[i + 1]) : 8000;
      relcl_context *ctx = tu_context();
      printf("device: %s\n", relcl_context_device_name(ctx));
      bench(ctx, vocab > 4 ? vocab : 8000, 64, 32, 5);
      relcl_context_destroy(ctx);
      return 0;
    } else {
      fprintf(stderr, "usage: test_model [--small] [--keep-buffers] | --bench [VOCAB]\n");
      return 2;
    }
  }
  relcl_context *ctx = tu_context();
  printf("device: %s\n", relcl_context_device_name(ctx));
  if (small) {
    check_one_step(ctx);
    check_errors(ctx);
    check_eval_and_schedule(ctx);
    for (int i = 0; i < n_kept; i++) relcl_model_destroy(kept[i]);
    relcl_context_destroy(ctx);
    return tu_finish();
  }
  check_table(ctx);
  check_errors(ctx);
  check_eval_and_schedule(ctx);
  check_one_step(ctx);

  relcl_model_config c = small_config();
  c.positions = RELCL_POS_ABSOLUTE;
  check_fd(ctx, "absolute post-norm", c, "dec.0.self_attn.wk.bias");
  c = small_config();
  c.positions = RELCL_POS_RELATIVE;
  c.enc_layers = c.dec_layers = 2; /* layer-to-layer paths: d enc_out sums over decoders */
  check_fd(ctx, "relative post-norm 2+2", c, NULL);
  c = small_config();
  c.positions = RELCL_POS_BOTH;
  c.rel_per_head = 1;
  c.rel_keys_only = 1;
  c.pre_norm = 1;
  c.label_smoothing = 0.0f;
  check_fd(ctx, "both ph ko pre-norm", c, NULL);
  c = small_config();
  c.positions = RELCL_POS_RELATIVE;
  c.rel_per_head = 1;
  c.pre_norm = 1;
  c.max_rel = 1;
  check_fd(ctx, "rel per-head pre k=1", c, NULL);

  check_overfit(ctx);
  check_reproducible(ctx);
  for (int i = 0; i < n_kept; i++) relcl_model_destroy(kept[i]);
  relcl_context_destroy(ctx);
  return tu_finish();
}
