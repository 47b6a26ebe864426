/* The device Transformer (relcl_model.h) against the whole-model reference of
 * test/ref/ref_model.c: a double-precision CPU model built only from the test/ref ops, with
 * the device's parameters copied in by name. Compared: the loss (evaluation and training),
 * the logits, and EVERY parameter gradient, by name, for absolute, relative and both
 * positions, shared and per-head tables, keys only, post- and pre-norm, 1+1 and 2+2 layers,
 * with dropout off and on (the masks come from the same Philox counters on both sides).
 * The reference's gradient is its own backward (the chain rule over its forward, in double),
 * itself checked against central differences of its double loss, every entry: ref_model.h
 * puts their error near 1e-9 for L ~ 16 and h = 1e-6, so |fd - g| <= 1e-7 max |g| (observed
 * ~1e-9) leaves room for the truncation of large third derivatives and catches any wrong
 * term of the backward.
 *
 * Model: vocab 11, d_model 8, 2 heads, d_ff 16, k = 2, label smoothing 0.1; batch 2 x (5, 4)
 * with padding on both sides; dropout 0.1 when on; L ~ 16 (a sum over 6 target tokens).
 * Tolerances (the device computes in float, eps_f = 6e-8; each is 7-10x the largest error
 * observed over all 12 configurations on PoCL (pthread, AMD EPYC), and far below what a wrong
 * term gives):
 *  - loss (eval, train, and the plain NLL): |L_dev - L_ref| <= 1e-6 L_ref. A float forward
 *    through ~12 sums and norms of width <= 16 loses a few eps_f per value; the loss sums 6
 *    rows. Observed <= 1.0e-7.
 *  - logits: max |z_dev - z_ref| <= 2e-6 max(max |z_ref|, 1). Observed <= 1.9e-7.
 *  - gradient of each tensor: max |g_dev - g_ref| <= 3e-5 * max(max |g_ref| over the tensor,
 *    floor), floor = 1e-2 * max |g_ref| over the whole model (~3e-2 here). The floor: a float
 *    backward's error in any tensor is a few eps_f of the upstream gradients and activations
 *    that meet in it, whose scale is the model's, not the tensor's; the key biases' true
 *    gradient is 0 (softmax ignores a per-row constant) and there only that rounding is
 *    seen. Observed <= 2.1e-6 on tensors above the floor, 4.1e-6 on the key biases (at the
 *    floor). So any tensor whose gradient has an entry above ~1e-6 can fail.
 * A wrong sign, a missing term or a lost path gives errors of O(1) relative to the tensor's
 * scale: the control pass flips the sign of one tensor's reference gradient and requires the
 * comparison to catch it (and only it).
 */
#include "model_internal.h"
#include "ref/ref_model.h"
#include "relcl_data.h"
#include "testutil.h"

#include <unistd.h>

static const double LOSS_TOL = 1e-6, LOGIT_TOL = 2e-6, GRAD_TOL = 3e-5, GRAD_FLOOR = 1e-2;
static const double REF_FD_TOL = 1e-7;

typedef struct worst {
  double loss, logits, grad, ref_fd;
} worst;
static worst seen;

/* Source lengths 5 and 3, target lengths (with EOS) 4 and 2: padding on both sides. */
static int32_t src[] = {4, 5, 6, 7, 5, 8, 9, 10, 0, 0};
static int32_t tgt_in[] = {RELCL_BOS_ID, 6, 4, 6, RELCL_BOS_ID, 10, 0, 0};
static int32_t tgt_out[] = {6, 4, 6, RELCL_EOS_ID, 10, RELCL_EOS_ID, 0, 0};
static int32_t src_lens[] = {5, 3}, tgt_lens[] = {4, 2};

static relcl_model_config base_config(void) {
  relcl_model_config c = tu_small_model_config();
  c.label_smoothing = 0.1f;
  c.rel_per_head = c.rel_keys_only = c.pre_norm = 0;
  return c;
}

/* The gradient comparison of every tensor; returns how many failed, and records the name of
 * the last that did in *bad. quiet: no check lines (the control pass). */
static int compare_grads(const ref_model *rm, const float *gdev, const double *gref,
                         const char *name, int quiet, const char **bad) {
  double gmax = 0.0;
  for (size_t i = 0; i < rm->param_count; i++) gmax = fmax(gmax, fabs(gref[i]));
  const double floor_ = GRAD_FLOOR * gmax;
  int failed = 0;
  double worst_here = 0.0;
  for (size_t ti = 0; ti < rm->n_tensors; ti++) {
    const ref_tensor *t = &rm->tensors[ti];
    double tmax = 0.0;
    for (size_t i = 0; i < t->size; i++) tmax = fmax(tmax, fabs(gref[t->offset + i]));
    const double e = tu_rel_err(gdev + t->offset, gref + t->offset, t->size, floor_);
    const int ok = e <= GRAD_TOL;
    if (!ok) failed++, *bad = t->name;
    if (!quiet)
      tu_check(ok, "grad %-26s %-28s rel err %.1e (max |g| %.2e)", name, t->name, e, tmax);
    if (!quiet && e > worst_here) worst_here = e;
  }
  if (!quiet && worst_here > seen.grad) seen.grad = worst_here;
  return failed;
}

/* ref_fd 0 skips the reference's own check by central differences (one forward pass a
 * parameter: the d_ff 512 variant's 16k parameters made it the suite's longest), which the
 * other configurations make of the same reference code. */
static void check_config(relcl_context *ctx, const char *name, relcl_model_config cfg,
                         int control, int ref_fd) {
  relcl_model *m;
  TU_OK(relcl_model_create(ctx, &cfg, 7, &m));
  ref_model rm;
  if (ref_model_init(&rm, &cfg) != 0) {
    tu_check(0, "%s: reference model for this config", name);
    relcl_model_destroy(m);
    return;
  }
  const relcl_model_batch b = {2, 5, 4, src, tgt_in, tgt_out, src_lens, tgt_lens};
  const int Nt = b.batch * b.tgt_len, V = cfg.vocab;

  /* the parameter tables agree by name and shape; the device's values go to the reference */
  const size_t n = relcl_model_param_count(m);
  float *params = tu_alloc_host(n), *grads = tu_alloc_host(n);
  TU_OK(relcl_model_arena_read(m, RELCL_ARENA_PARAMS, params));
  double *P = calloc(rm.param_count, sizeof *P);
  float *gdev = tu_alloc_host(rm.param_count);
  double *gref = calloc(rm.param_count, sizeof *gref);
  int table_ok = relcl_model_tensor_count(m) == rm.n_tensors;
  for (size_t i = 0; i < relcl_model_tensor_count(m); i++) {
    relcl_tensor_info t = relcl_model_tensor(m, i);
    const ref_tensor *r = ref_model_find(&rm, t.name);
    if (r == NULL || r->size != t.size || r->ndim != t.ndim) {
      table_ok = 0;
      printf("     %s: device tensor %s has no match in the reference\n", name, t.name);
      continue;
    }
    for (int d = 0; d < t.ndim; d++) table_ok &= r->shape[d] == t.shape[d];
    for (size_t j = 0; j < t.size; j++) P[r->offset + j] = params[t.offset + j];
  }
  tu_check(table_ok, "%-26s parameter tables agree: %zu tensors by name and shape", name,
           rm.n_tensors);
  if (!table_ok) goto done;

  /* evaluation: loss and logits, dropout off */
  relcl_model_stats st = {0, 0, 0};
  TU_OK(relcl_model_eval_batch(m, &b, &st));
  if (m->lay.logit_rows < (size_t)Nt) {
    tu_check(0, "%s: logits of the batch in one chunk", name);
    goto done;
  }
  float *zdev = tu_alloc_host((size_t)Nt * V);
  TU_OK(relcl_read(ctx, relcl_buf_at(m->work, m->lay.logits), zdev, (size_t)Nt * V));
  double *zref = calloc((size_t)Nt * V, sizeof *zref);
  const ref_dropout off = {0.0f, 0, 0, 0};
  double nll_ref;
  const double Le = ref_model_loss(&rm, P, &b, &off, zref, &nll_ref);
  const double e_loss = fabs(st.loss_sum - Le) / Le, e_nll = fabs(st.nll_sum - nll_ref) / nll_ref;
  const double e_logits = tu_rel_err(zdev, zref, (size_t)Nt * V, 1.0);
  free(zdev);
  tu_check(e_loss <= LOSS_TOL && e_nll <= LOSS_TOL,
           "%-26s eval loss %.6f vs %.6f (rel %.1e), nll rel %.1e", name, st.loss_sum, Le,
           e_loss, e_nll);
  tu_check(e_logits <= LOGIT_TOL, "%-26s logits (%d x %d) rel err %.1e", name, Nt, V, e_logits);
  seen.loss = fmax(seen.loss, fmax(e_loss, e_nll));
  seen.logits = fmax(seen.logits, e_logits);
  free(zref);

  /* training: loss and every gradient, with the config's dropout */
  const uint64_t seed = 1234, step = 5;
  const int micro = 1;
  TU_OK(relcl_model_zero_grad(m));
  relcl_model_stats tr = {0, 0, 0};
  TU_OK(relcl_model_train_batch(m, &b, seed, step, micro, &tr));
  TU_OK(relcl_model_arena_read(m, RELCL_ARENA_GRADS, grads));
  const ref_dropout drop = {cfg.dropout, seed, step, micro};
  const double Lt = ref_model_loss(&rm, P, &b, &drop, NULL, NULL);
  const double e_train = fabs(tr.loss_sum - Lt) / Lt;
  tu_check(e_train <= LOSS_TOL, "%-26s train loss %.6f vs %.6f (rel %.1e)", name, tr.loss_sum,
           Lt, e_train);
  seen.loss = fmax(seen.loss, e_train);
  if (cfg.dropout > 0.0f)
    tu_check(fabs(Lt - Le) > 1e-3 * Le, "%-26s dropout changes the loss (%.4f vs %.4f)", name,
             Lt, Le);
  for (size_t i = 0; i < relcl_model_tensor_count(m); i++) {
    relcl_tensor_info t = relcl_model_tensor(m, i);
    const ref_tensor *r = ref_model_find(&rm, t.name);
    for (size_t j = 0; j < t.size; j++) gdev[r->offset + j] = grads[t.offset + j];
  }
  /* the reference's own backward, and central differences of its forward as its check */
  const double Lg = ref_model_grad(&rm, P, &b, &drop, gref);
  if (ref_fd) {
    double *gfd = calloc(rm.param_count, sizeof *gfd);
    ref_model_grad_fd(&rm, P, &b, &drop, gfd);
    double fd_max = 0.0, fd_err = 0.0;
    for (size_t i = 0; i < rm.param_count; i++) {
      fd_max = fmax(fd_max, fabs(gref[i]));
      fd_err = tu_worse(fd_err, fabs(gfd[i] - gref[i]));
    }
    tu_check(Lg == Lt && fd_err <= REF_FD_TOL * fd_max,
             "%-26s reference backward == its central differences: max err %.1e of %.2e", name,
             fd_err, fd_max);
    seen.ref_fd = fmax(seen.ref_fd, fd_err / fd_max);
    free(gfd);
  } else {
    tu_check(Lg == Lt, "%-26s reference backward's loss == its forward's", name);
  }
  const char *bad = NULL;
  compare_grads(&rm, gdev, gref, name, 0, &bad);

  if (control) {
    /* the planted error: the sign of one tensor's reference gradient flipped */
    const char *plant = "dec.0.ffn.w1.weight";
    const ref_tensor *t = ref_model_find(&rm, plant);
    for (size_t j = 0; j < t->size; j++) gref[t->offset + j] = -gref[t->offset + j];
    bad = NULL;
    int nfail = compare_grads(&rm, gdev, gref, name, 1, &bad);
    tu_check(nfail == 1 && bad && strcmp(bad, plant) == 0,
             "control: a flipped sign in the gradient of %s is caught (%d tensor(s) flagged: %s)",
             plant, nfail, bad ? bad : "none");
  }

done:
  free(P), free(gdev), free(gref), free(params), free(grads);
  ref_model_free(&rm);
  relcl_model_destroy(m);
}

/* A new context on ctx's device with a tuning file measured on it (its name, driver and CPU)
 * that sets only relcl's RelclGemm K_CHUNK: every product of the model with an inner
 * dimension over 1.5 chunk (here the feed-forward's d_ff 16, the weight gradients' 10 source
 * tokens, the output layer's backward over the vocabulary of 11) then runs as a sequence of
 * products over slices of it, accumulated into C, under each transpose the model uses.
 * K_CHUNK slices CLBlast's products only: on a CPU device the suite runs this with
 * RELCL_CPU_GEMM=clblast (test/meson.build). */
static relcl_context *with_k_chunk(relcl_context *ctx, long chunk) {
  cl_device_id dev = relcl_context_device(ctx);
  cl_platform_id plat;
  cl_device_type type = 0;
  char name[256] = "", driver[256] = "", pname[256] = "";
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  static char path[] = "/tmp/relcl-test-kchunk-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    perror(path);
    exit(1);
  }
  close(fd);
  char kernels[64];
  snprintf(kernels, sizeof kernels, "{\"RelclGemm\": {\"K_CHUNK\": %ld}}", chunk);
  tu_write_tuning(path, name, driver, pname,
                  type & CL_DEVICE_TYPE_GPU   ? "GPU"
                  : type & CL_DEVICE_TYPE_CPU ? "CPU"
                                              : "OTHER",
                  relcl_context_host_cpu(ctx), kernels);
  relcl_context_destroy(ctx);
  setenv("RELCL_TUNING", path, 1);
  ctx = tu_context();
  unsetenv("RELCL_TUNING");
  remove(path);
  const char *used = relcl_context_tuning(ctx);
  tu_check(relcl_context_tuning_fit(ctx) == RELCL_TUNING_EXACT && strstr(used, path) &&
               strstr(used, "(1 kernel)"),
           "the K_CHUNK %ld tuning applies: %s", chunk, used);
  return ctx;
}

int main(int argc, char **argv) {
  const char *only = NULL;
  long k_chunk = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (strcmp(argv[i], "--k-chunk") == 0 && i + 1 < argc) {
      k_chunk = atol(argv[++i]);
    } else {
      fprintf(stderr, "usage: test_model_ref [--case NAME] [--k-chunk N]\n");
      return 2;
    }
  }
  relcl_context *ctx = tu_context();
  if (k_chunk > 0) ctx = with_k_chunk(ctx, k_chunk);
  printf("device: %s\n", relcl_context_device_name(ctx));
  tu_check_width(relcl__cpu_width(ctx));
  typedef struct variant {
    const char *name;
    relcl_positions pos;
    int per_head, keys_only, pre_norm, layers;
    int d_ff; /* 0: base_config's; 512: rows 2 KB apart, which CPU contexts with 8 floats or
               * fewer a vector pad (relcl__act_ld) */
  } variant;
  static const variant variants[] = {
      {"absolute post", RELCL_POS_ABSOLUTE, 0, 0, 0, 1, 0},
      {"relative post 2+2", RELCL_POS_RELATIVE, 0, 0, 0, 2, 0},
      {"both post", RELCL_POS_BOTH, 0, 0, 0, 1, 0},
      {"relative per-head pre", RELCL_POS_RELATIVE, 1, 0, 1, 1, 0},
      {"relative keys-only post", RELCL_POS_RELATIVE, 0, 1, 0, 1, 0},
      {"both per-head keys pre", RELCL_POS_BOTH, 1, 1, 1, 1, 0},
      {"relative post d_ff 512", RELCL_POS_RELATIVE, 0, 0, 0, 1, 512},
  };
  int first = 1;
  for (size_t v = 0; v < sizeof variants / sizeof *variants; v++)
    for (int dropout = 0; dropout < 2; dropout++) {
      if (variants[v].d_ff && dropout) continue; /* its hidden is what it checks */
      char name[64];
      snprintf(name, sizeof name, "%s%s", variants[v].name, dropout ? " drop" : "");
      if (only && strstr(name, only) == NULL) continue;
      relcl_model_config c = base_config();
      c.positions = variants[v].pos;
      c.rel_per_head = variants[v].per_head;
      c.rel_keys_only = variants[v].keys_only;
      c.pre_norm = variants[v].pre_norm;
      c.enc_layers = c.dec_layers = variants[v].layers;
      c.dropout = dropout ? 0.1f : 0.0f;
      if (variants[v].d_ff) c.d_ff = variants[v].d_ff;
      check_config(ctx, name, c, first, variants[v].d_ff == 0);
      first = 0;
    }
  printf("     worst relative errors: loss %.1e (tol %.0e), logits %.1e (tol %.0e), gradients "
         "%.1e (tol %.0e); reference backward vs its differences %.1e (tol %.0e)\n",
         seen.loss, LOSS_TOL, seen.logits, LOGIT_TOL, seen.grad, GRAD_TOL, seen.ref_fd,
         REF_FD_TOL);
  relcl_context_destroy(ctx);
  return tu_finish();
}
