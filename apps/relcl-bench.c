/* relcl-bench: what relative positions cost in a training step, where the step's time goes,
 * how far relcl is from the device's limits, how attention scales with length, and what
 * CLBlast tuning is worth, on one OpenCL device. Shaw et al. (2018) report a 7% decrease in
 * steps per second on P100 GPUs; this is the same measurement for relcl.
 *
 * Every variant trains the same model on the same synthetic batches (fixed lengths, so only
 * the positions differ): one step is zero-grad, forward + backward, Adam, and relcl_finish.
 * Variants are timed interleaved after a warm-up step each, in rounds whose order turns
 * around every other round (A R, R A, A R, ...), so that machine noise and drift hit every
 * variant alike and none always runs first. */
#include "bench.h"
#include "relcl_model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "relcl-bench"

enum { MAX_VARIANTS = 24, MAX_REPS = 64, MAX_COMPARE = 8, MAX_ENTRIES = 256 };

typedef struct options {
  const char *device, *preset, *plot, *tuning_file;
  const char *compare[MAX_COMPARE]; /* --compare VAR=VALUE: side B's environment */
  int n_compare;
  int vocab, batch_tokens, length, k, reps, profile_reps, tuning_reps, op_reps;
  int layers, d_model, heads, d_ff; /* 0: the preset's */
  int scaling_max, scaling_min;
  bool variants, json, quick, no_scaling, no_tuning, no_peaks, tuning_child;
} options;

typedef struct variant {
  char name[48];
  relcl_positions positions;
  int k, per_head, keys_only;
  int side, base;      /* side 0 (A) or 1 (B, --compare); base: the side's absolute variant */
  relcl_context *ctx;  /* the side's context */
  relcl_model *model;
  double sec[MAX_REPS]; /* timed steps without profiling */
  double med, lo, hi;   /* seconds per step */
  /* profiled steps (events read at relcl_finish, not per command), averaged per step */
  double prof_wall, busy, span, part[RELCL_PART_COUNT];
} variant;

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the kernel word of a GEMM-door product's profile name (lib/runtime/gemm.c gemm_run) */
static bool gemm_kind(const char *name, size_t len) {
  return (len == 5 && strncmp(name, "SGEMM", 5) == 0) ||
         (len > 5 && strncmp(name, "gemm_", 5) == 0);
}

bool bench_same_entry(const char *a, const char *b) {
  if (strcmp(a, b) == 0) return true;
  const char *sa = strchr(a, ' '), *sb = strchr(b, ' ');
  return sa && sb && gemm_kind(a, (size_t)(sa - a)) && gemm_kind(b, (size_t)(sb - b)) &&
         strcmp(sa, sb) == 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void bench_stats(double *values, int n, double *median, double *min, double *max) {
  qsort(values, (size_t)n, sizeof *values, cmp_double);
  *median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  *min = values[0];
  *max = values[n - 1];
}

bool bench_ratio_stats(const double *a, const double *b, int n, double *median, double *min,
                       double *max) {
  _Static_assert((int)BENCH_MAX_OP_REPS <= (int)MAX_REPS, "q holds every repetition");
  double q[MAX_REPS];
  int nq = 0;
  for (int r = 0; r < n && r < MAX_REPS; r++)
    if (a[r] > 0 && b[r] > 0) q[nq++] = b[r] / a[r];
  if (nq > 0) bench_stats(q, nq, median, min, max);
  return nq > 0;
}

relcl_status bench_alloc_fill(relcl_context *ctx, size_t n, float v, cl_mem *out) {
  relcl_status st = relcl_alloc(ctx, n, out);
  return st == RELCL_OK ? relcl_fill(ctx, relcl_buf_at(*out, 0), v, n) : st;
}

double bench_cube_gflops(int n, double ms) {
  return 2.0 * n * (double)n * n / (ms * 1e-3) * 1e-9;
}

void bench_json_array(cJSON *obj, const char *key, const double *values, int n) {
  cJSON *a = cJSON_AddArrayToObject(obj, key);
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(values[i]));
}

static double load_average(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
  }
  return l;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: " PROG
          " [options]\n"
          "Times training steps of the same model with absolute and relative positions, shows\n"
          "where a step's device time goes, the device's limits, attention's scaling with\n"
          "length and the effect of CLBlast tuning. Defaults fit the device: the base preset\n"
          "at ~4096 target tokens on a GPU, the tiny preset at 512 on a CPU.\n"
          "  --device SPEC        OpenCL device (as RELCL_DEVICE)\n"
          "  --preset NAME        tiny | base | big\n"
          "  --vocab N            vocabulary (default 2000 with tiny, 32000 otherwise)\n"
          "  --layers N, --d-model N, --heads N, --d-ff N   override the preset's sizes\n"
          "  --batch-tokens N     target tokens per batch (sentences = N / length)\n"
          "  --length N           source and target length of every sentence (default 32)\n"
          "  --k N                relative clipping distance (default: the preset's)\n"
          "  --variants           also keys-only, per-head tables, both positions, k 2/16/64\n"
          "  --reps N             timed steps per variant (default 5 on a CPU, 20 on a GPU)\n"
          "  --profile-reps N     profiled steps per variant for the breakdown (default 2)\n"
          "  --tuning-reps N      runs per tuning setting in the tuning comparison (default 2)\n"
          "  --tuning FILE        compare CLBlast's defaults with this tuning file\n"
          "  --scaling-max N      longest n of the attention sweep, 32 ... N (default 2048 on a\n"
          "                       GPU, 512 on a CPU, where 2048 takes about ten minutes)\n"
          "  --plot PREFIX        scaling plots PREFIX-time.png, PREFIX-memory.png\n"
          "                       (default relcl-bench-scaling; \"\" for none)\n"
          "  --no-scaling, --no-tuning, --no-peaks   skip a part\n"
          "  --compare VAR=VALUE  A/B in one process: every variant also runs in a second\n"
          "                       context (B) created with VAR=VALUE, interleaved with the\n"
          "                       first (A), and the step, its parts and every kernel and GEMM\n"
          "                       shape are compared (B time / A time); repeatable. VAR is one\n"
          "                       of RELCL_KERNEL_DIR, RELCL_CPU_VEC, RELCL_CPU_GEMM,\n"
          "                       RELCL_HEAD_GEMM, RELCL_ROW_KERNELS, RELCL_ATTN,\n"
          "                       RELCL_WGRAD. Then the\n"
          "                       model's linear layers and attention calls alternately on A\n"
          "                       and B, op by op\n"
          "  --op-reps N          repetitions of that op-by-op comparison (default 15, 3 with\n"
          "                       --quick)\n"
          "  --quick              a small, fast run of every part (the test suite's smoke run)\n"
          "  --json               print one JSON object instead of the tables\n");
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

/* The variables --compare may set: those a context reads once, when it is created, and keeps
 * to itself. RELCL_TUNING is not one (CLBlast's parameters are process-wide), nor PoCL's own
 * (read when the platform loads). */
static const char *const compare_vars[] = {"RELCL_KERNEL_DIR", "RELCL_CPU_VEC",
                                           "RELCL_CPU_GEMM",   "RELCL_HEAD_GEMM",
                                           "RELCL_ROW_KERNELS", "RELCL_ATTN",
                                           "RELCL_WGRAD"};
enum { N_COMPARE_VARS = sizeof compare_vars / sizeof *compare_vars };

/* VAR of "VAR=VALUE" when --compare may set it, else NULL. */
static const char *compare_var(const char *s) {
  const char *eq = strchr(s, '=');
  for (int i = 0; eq && i < N_COMPARE_VARS; i++)
    if (strlen(compare_vars[i]) == (size_t)(eq - s) &&
        strncmp(s, compare_vars[i], (size_t)(eq - s)) == 0)
      return compare_vars[i];
  return NULL;
}

static int parse_compare(const char *val, options *o) {
  const char *var = val ? compare_var(val) : NULL;
  if (!var) {
    fprintf(stderr, PROG ": --compare needs VAR=VALUE with VAR one of");
    for (int i = 0; i < N_COMPARE_VARS; i++)
      fprintf(stderr, "%s %s", i ? "," : "", compare_vars[i]);
    fprintf(stderr, "; got \"%s\"\n", val ? val : "");
    return 2;
  }
  const size_t n = strlen(var);
  for (int i = 0; i < o->n_compare; i++)
    if (strncmp(o->compare[i], val, n + 1) == 0) {
      fprintf(stderr, PROG ": --compare %.*s given twice\n", (int)n, val);
      return 2;
    }
  if (o->n_compare == MAX_COMPARE) {
    fprintf(stderr, PROG ": --compare given more than %d times\n", MAX_COMPARE);
    return 2;
  }
  o->compare[o->n_compare++] = val;
  return 0;
}

/* 0, 1 for --help, 2 after printing a usage error. */
static int parse_args(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    struct {
      const char *flag;
      int *dst, lo, hi;
    } ints[] = {{"--vocab", &o->vocab, 5, 1 << 20},
                {"--batch-tokens", &o->batch_tokens, 1, 1 << 22},
                {"--length", &o->length, 2, 4096},
                {"--k", &o->k, 0, 4096},
                {"--reps", &o->reps, 1, MAX_REPS},
                {"--profile-reps", &o->profile_reps, 1, MAX_REPS},
                {"--tuning-reps", &o->tuning_reps, 1, 16},
                {"--op-reps", &o->op_reps, 1, BENCH_MAX_OP_REPS},
                {"--scaling-max", &o->scaling_max, 32, 1 << 14},
                {"--layers", &o->layers, 1, 64},
                {"--d-model", &o->d_model, 8, 1 << 14},
                {"--heads", &o->heads, 1, 256},
                {"--d-ff", &o->d_ff, 8, 1 << 16}};
    bool done = false;
    for (size_t j = 0; j < sizeof ints / sizeof *ints && !done; j++)
      if (strcmp(a, ints[j].flag) == 0) {
        if (!val || !parse_int(val, ints[j].lo, ints[j].hi, ints[j].dst)) {
          fprintf(stderr, PROG ": %s needs an integer in %d..%d, got \"%s\"\n", a, ints[j].lo,
                  ints[j].hi, val ? val : "");
          return 2;
        }
        i++;
        done = true;
      }
    if (done) continue;
    const char **strs[] = {&o->device, &o->preset, &o->plot, &o->tuning_file};
    const char *sflags[] = {"--device", "--preset", "--plot", "--tuning"};
    for (int j = 0; j < 4 && !done; j++)
      if (strcmp(a, sflags[j]) == 0) {
        if (!val) {
          fprintf(stderr, PROG ": %s needs a value\n", a);
          return 2;
        }
        *strs[j] = val;
        i++;
        done = true;
      }
    if (done) continue;
    if (strcmp(a, "--compare") == 0) {
      if (parse_compare(val, o)) return 2;
      i++;
      continue;
    }
    if (strcmp(a, "--variants") == 0)
      o->variants = true;
    else if (strcmp(a, "--json") == 0)
      o->json = true;
    else if (strcmp(a, "--quick") == 0)
      o->quick = true;
    else if (strcmp(a, "--no-scaling") == 0)
      o->no_scaling = true;
    else if (strcmp(a, "--no-tuning") == 0)
      o->no_tuning = true;
    else if (strcmp(a, "--no-peaks") == 0)
      o->no_peaks = true;
    else if (strcmp(a, "--tuning-child") == 0)
      o->tuning_child = true; /* internal */
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 1;
    } else {
      fprintf(stderr, PROG ": unknown option \"%s\" (see --help)\n", a);
      return 2;
    }
  }
  if (o->preset && relcl_model_preset(o->preset) == NULL) {
    fprintf(stderr, PROG ": --preset \"%s\": use tiny, base or big\n", o->preset);
    return 2;
  }
  return 0;
}

/* ---- the synthetic batch ---- */

typedef struct batch_data {
  int32_t *src, *tgt_in, *tgt_out, *src_lens, *tgt_lens;
  relcl_model_batch view;
} batch_data;

enum { BOS = 2, EOS = 3, FIRST_PIECE = 4 };

static int batch_make(batch_data *bd, int sentences, int len, int vocab) {
  size_t n = (size_t)sentences * (size_t)len;
  bd->src = malloc(n * sizeof(int32_t));
  bd->tgt_in = malloc(n * sizeof(int32_t));
  bd->tgt_out = malloc(n * sizeof(int32_t));
  bd->src_lens = malloc((size_t)sentences * sizeof(int32_t));
  bd->tgt_lens = malloc((size_t)sentences * sizeof(int32_t));
  if (!bd->src || !bd->tgt_in || !bd->tgt_out || !bd->src_lens || !bd->tgt_lens) return 1;
  uint32_t x = 12345; /* fixed: every run sees the same tokens */
  for (int s = 0; s < sentences; s++) {
    bd->src_lens[s] = bd->tgt_lens[s] = len;
    for (int t = 0; t < len; t++) {
      x = x * 1664525u + 1013904223u;
      bd->src[(size_t)s * len + t] = FIRST_PIECE + (int32_t)((x >> 8) % (uint32_t)(vocab - 4));
      x = x * 1664525u + 1013904223u;
      int32_t y = FIRST_PIECE + (int32_t)((x >> 8) % (uint32_t)(vocab - 4));
      bd->tgt_out[(size_t)s * len + t] = t == len - 1 ? EOS : y;
      bd->tgt_in[(size_t)s * len + t] = t == 0 ? BOS : bd->tgt_out[(size_t)s * len + t - 1];
    }
  }
  bd->view = (relcl_model_batch){sentences,  len,         len,          bd->src,
                                 bd->tgt_in, bd->tgt_out, bd->src_lens, bd->tgt_lens};
  return 0;
}

static void batch_free(batch_data *bd) {
  free(bd->src);
  free(bd->tgt_in);
  free(bd->tgt_out);
  free(bd->src_lens);
  free(bd->tgt_lens);
}

/* One training step, finished on the device. */
static relcl_status train_step(relcl_context *ctx, relcl_model *m, const relcl_model_batch *b,
                               uint64_t step) {
  relcl_model_stats s = {0, 0, 0};
  relcl_status st = relcl_model_zero_grad(m);
  if (st == RELCL_OK) st = relcl_model_train_batch(m, b, 1, step, 0, &s);
  relcl_adam_opts a = {1e-4f, 0.9f, 0.98f, 1e-9f, 1.0f / (float)(s.tokens ? s.tokens : 1), 1.0f};
  if (st == RELCL_OK) st = relcl_model_adam_step(m, &a, step, NULL);
  if (st == RELCL_OK) st = relcl_finish(ctx);
  return st;
}

/* ---- variants ---- */

static int add_variant(variant *v, int *n, const char *name, relcl_positions pos, int k,
                       int per_head, int keys_only) {
  for (int i = 0; i < *n; i++) /* --k 16 and the k-16 variant are one */
    if (v[i].positions == pos && v[i].k == k && v[i].per_head == per_head &&
        v[i].keys_only == keys_only)
      return i;
  if (*n == MAX_VARIANTS) return -1;
  variant *x = &v[(*n)++];
  memset(x, 0, sizeof *x);
  snprintf(x->name, sizeof x->name, "%s", name);
  x->positions = pos;
  x->k = k;
  x->per_head = per_head;
  x->keys_only = keys_only;
  return *n - 1;
}

typedef struct setup {
  relcl_model_config cfg;
  const char *preset;
  bool gpu;
  int sentences;
  size_t tokens; /* target tokens per batch */
} setup;

static void choose_setup(relcl_context *ctx, const options *o, setup *s) {
  cl_device_type type = 0;
  clGetDeviceInfo(relcl_context_device(ctx), CL_DEVICE_TYPE, sizeof type, &type, NULL);
  s->gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
  s->preset = o->preset ? o->preset : (s->gpu && !o->quick) ? "base" : "tiny";
  s->cfg = *relcl_model_preset(s->preset);
  s->cfg.vocab = o->vocab ? o->vocab : strcmp(s->preset, "tiny") == 0 ? 2000 : 32000;
  if (o->quick) { /* a 1+1-layer model, so that the whole run fits a CI time budget */
    s->cfg.enc_layers = s->cfg.dec_layers = 1;
    if (!o->vocab) s->cfg.vocab = 500;
  }
  if (o->k >= 0) s->cfg.max_rel = o->k;
  if (o->layers) s->cfg.enc_layers = s->cfg.dec_layers = o->layers;
  if (o->d_model) s->cfg.d_model = o->d_model;
  if (o->heads) s->cfg.heads = o->heads;
  if (o->d_ff) s->cfg.d_ff = o->d_ff;
  int len = o->length ? o->length : o->quick ? 16 : 32;
  int tokens = o->batch_tokens ? o->batch_tokens : o->quick ? 256 : s->gpu ? 4096 : 512;
  s->sentences = tokens / len > 0 ? tokens / len : 1;
  if (len > s->cfg.max_length) s->cfg.max_length = len;
  s->tokens = (size_t)s->sentences * (size_t)len;
  s->cfg.dropout = 0.1f;
}

/* The variants of side A in ctx, and with ctx_b (--compare) the same again in ctx_b, named
 * "... [B]". Each variant's decrease is taken against its own side's absolute model. */
static int make_variants(relcl_context *ctx, relcl_context *ctx_b, const options *o,
                         const setup *s, variant *v, int *n) {
  int k = s->cfg.max_rel;
  char name[48];
  add_variant(v, n, "absolute", RELCL_POS_ABSOLUTE, k, 0, 0);
  snprintf(name, sizeof name, "relative k=%d", k);
  add_variant(v, n, name, RELCL_POS_RELATIVE, k, 0, 0);
  if (o->variants) {
    snprintf(name, sizeof name, "keys-only k=%d", k);
    add_variant(v, n, name, RELCL_POS_RELATIVE, k, 0, 1);
    snprintf(name, sizeof name, "per-head k=%d", k);
    add_variant(v, n, name, RELCL_POS_RELATIVE, k, 1, 0);
    snprintf(name, sizeof name, "abs+relative k=%d", k);
    add_variant(v, n, name, RELCL_POS_BOTH, k, 0, 0);
    const int ks[] = {2, 16, 64};
    for (int i = 0; i < 3; i++) {
      snprintf(name, sizeof name, "relative k=%d", ks[i]);
      add_variant(v, n, name, RELCL_POS_RELATIVE, ks[i], 0, 0);
    }
  }
  const int n_a = *n;
  for (int i = 0; i < n_a; i++) v[i].ctx = ctx;
  for (int i = 0; ctx_b && i < n_a; i++) { /* at most MAX_VARIANTS / 2 on side A */
    variant *b = &v[(*n)++];
    *b = v[i];
    snprintf(name, sizeof name, "%.43s [B]", v[i].name);
    memcpy(b->name, name, sizeof name);
    b->side = 1;
    b->base = n_a;
    b->ctx = ctx_b;
  }
  for (int i = 0; i < *n; i++) {
    relcl_model_config c = s->cfg;
    c.positions = v[i].positions;
    c.max_rel = v[i].k;
    c.rel_per_head = v[i].per_head;
    c.rel_keys_only = v[i].keys_only;
    relcl_status st = relcl_model_create(v[i].ctx, &c, 1, &v[i].model);
    if (st != RELCL_OK) {
      fprintf(stderr, PROG ": model \"%s\": %s: %s\n", v[i].name, relcl_status_str(st),
              relcl_last_error());
      return 1;
    }
  }
  return 0;
}

/* Side B's context (--compare): created with the VAR=VALUE pairs set, the environment restored
 * after, so that nothing else in the process (side A, the tuning children) sees them. */
static int create_side_b(const options *o, relcl_context **ctx_b) {
  char *saved[MAX_COMPARE] = {0}; /* the values before, NULL where unset */
  int rc = 0;
  for (int i = 0; i < o->n_compare; i++) {
    const char *var = compare_var(o->compare[i]), *old = getenv(var);
    saved[i] = old ? strdup(old) : NULL;
    setenv(var, o->compare[i] + strlen(var) + 1, 1);
  }
  relcl_status st = relcl_context_create(ctx_b, o->device);
  if (st != RELCL_OK) {
    fprintf(stderr, PROG ": --compare's context (B): %s: %s\n", relcl_status_str(st),
            relcl_last_error());
    rc = 1;
  }
  for (int i = 0; i < o->n_compare; i++) {
    const char *var = compare_var(o->compare[i]);
    if (saved[i])
      setenv(var, saved[i], 1);
    else
      unsetenv(var);
    free(saved[i]);
  }
  return rc;
}

/* Variant number j of round r: the order turns around every other round. */
static int in_round(int r, int j, int n) { return r % 2 ? n - 1 - j : j; }

/* Warm-up, then reps timed steps of every variant, interleaved (in_round). */
static int time_steps(variant *v, int n, const relcl_model_batch *b, int reps) {
  relcl_status st = RELCL_OK;
  for (int i = 0; i < n && st == RELCL_OK; i++) st = train_step(v[i].ctx, v[i].model, b, 1);
  for (int r = 0; r < reps && st == RELCL_OK; r++)
    for (int j = 0; j < n && st == RELCL_OK; j++) {
      const int i = in_round(r, j, n);
      double t0 = bench_now();
      st = train_step(v[i].ctx, v[i].model, b, (uint64_t)r + 2);
      v[i].sec[r] = bench_now() - t0;
    }
  if (st != RELCL_OK) {
    fprintf(stderr, PROG ": training step: %s: %s\n", relcl_status_str(st), relcl_last_error());
    return 1;
  }
  for (int i = 0; i < n; i++) {
    double copy[MAX_REPS];
    memcpy(copy, v[i].sec, sizeof copy);
    bench_stats(copy, reps, &v[i].med, &v[i].lo, &v[i].hi);
  }
  return 0;
}

/* ---- where the time goes ---- */

typedef struct entry_sum {
  relcl_profile_entry e;
  char name[96];
} entry_sum;

/* Add entry x (one step's) to the table e of n, matched by name and part: the table sums the
 * profiled steps. */
static void entry_add(entry_sum *e, int *n, const relcl_profile_entry *x) {
  for (int i = 0; i < *n; i++)
    if (e[i].e.part == x->part && strcmp(e[i].name, x->name) == 0) {
      e[i].e.ms += x->ms;
      e[i].e.calls += x->calls;
      return;
    }
  if (*n == MAX_ENTRIES) return;
  entry_sum *y = &e[(*n)++];
  y->e = *x;
  snprintf(y->name, sizeof y->name, "%s", x->name);
  y->e.name = y->name;
}

/* Profiled steps of every variant (interleaved as time_steps does), per-part device time per
 * step; the entries of the variants keep[side] (each side's relative model), averaged over
 * the profiled steps, are kept for the limits table (keep[1] < 0: no side B). After each of
 * those steps three SGEMMs of sgemm_n^3 run on the side's context: sgemm[side] is the rate of
 * the best of each three over the same steps (total flops over total time), the measure
 * beside the step that the limits table rates the step's products against; a machine whose
 * speed drifts then moves both alike. After side A's, likewise three copies of copy_floats
 * floats: *copy_gbs, the bandwidth beside the step of the products' memory roof. With
 * sgemm_n 0 (--no-peaks: no limits table) neither is timed, and both come back 0. */
static int profile_steps(variant *v, int n, const relcl_model_batch *b, int reps,
                         const int keep[2], entry_sum *entries[2], int n_entries[2], int sgemm_n,
                         double sgemm[2], size_t copy_floats, double *copy_gbs) {
  relcl_status st = RELCL_OK;
  bench_sgemm sg[2];
  bench_copy cp;
  double sg_ms[2] = {0, 0}, copy_s = 0;
  const bool beside = sgemm_n > 0;
  int rc = 1;
  memset(sg, 0, sizeof sg);
  memset(&cp, 0, sizeof cp);
  if (beside && bench_copy_init(&cp, v[keep[0]].ctx, copy_floats)) return 1;
  for (int side = 0; side < 2 && beside; side++)
    if (keep[side] >= 0 && bench_sgemm_init(&sg[side], v[keep[side]].ctx, sgemm_n)) goto out;
  for (int i = 0; i < n && st == RELCL_OK; i++) {
    st = relcl_profile_enable(v[i].ctx, 1);
    v[i].prof_wall = v[i].busy = v[i].span = 0;
    memset(v[i].part, 0, sizeof v[i].part);
  }
  n_entries[0] = n_entries[1] = 0;
  for (int r = 0; r < reps && st == RELCL_OK; r++)
    for (int j = 0; j < n && st == RELCL_OK; j++) {
      const int i = in_round(r, j, n);
      relcl_context *ctx = v[i].ctx;
      relcl_profile_summary s;
      if ((st = relcl_profile_reset(ctx)) != RELCL_OK) break;
      double t0 = bench_now();
      if ((st = train_step(ctx, v[i].model, b, (uint64_t)r + 100)) != RELCL_OK) break;
      v[i].prof_wall += (bench_now() - t0) / reps;
      if ((st = relcl_profile_summary_get(ctx, &s)) != RELCL_OK) break;
      v[i].busy += s.busy_ms * 1e-3 / reps;
      v[i].span += s.span_ms * 1e-3 / reps;
      for (int p = 0; p < RELCL_PART_COUNT; p++) v[i].part[p] += s.part_ms[p] * 1e-3 / reps;
      const int side = i == keep[0] ? 0 : i == keep[1] ? 1 : -1;
      if (side < 0) continue;
      int count = relcl_profile_count(ctx);
      for (int q = 0; q < count && st == RELCL_OK; q++) {
        relcl_profile_entry x;
        if ((st = relcl_profile_entry_get(ctx, q, &x)) == RELCL_OK)
          entry_add(entries[side], &n_entries[side], &x);
      }
      if (!beside) continue;
      double best = 0; /* the best of three in a row: the first one's operands come from memory */
      for (int t = 0; t < 3 && st == RELCL_OK; t++) {
        double ms = 0;
        if (bench_sgemm_ms(&sg[side], &ms)) goto out;
        if (t == 0 || ms < best) best = ms;
      }
      sg_ms[side] += best;
      double copy_t = 0; /* the best of three copies */
      if (side == 0 && st == RELCL_OK) {
        if (bench_copy_time(&cp, 3, &copy_t)) goto out;
        copy_s += copy_t;
      }
    }
  for (int side = 0; side < 2; side++)
    sgemm[side] = sg_ms[side] > 0 ? bench_cube_gflops(sgemm_n, sg_ms[side] / reps) : 0;
  *copy_gbs = copy_s > 0 ? bench_copy_gbs(&cp, copy_s / reps) : 0;
  rc = 0;
out:
  bench_sgemm_free(&sg[0]);
  bench_sgemm_free(&sg[1]);
  bench_copy_free(&cp);
  if (rc) return 1;
  for (int side = 0; side < 2; side++) /* per step */
    for (int q = 0; q < n_entries[side]; q++) {
      entries[side][q].e.ms /= reps;
      entries[side][q].e.calls /= reps;
    }
  for (int i = 0; i < n && st == RELCL_OK; i++) st = relcl_profile_enable(v[i].ctx, 0);
  if (st != RELCL_OK) {
    fprintf(stderr, PROG ": profiled step: %s: %s\n", relcl_status_str(st), relcl_last_error());
    return 1;
  }
  return 0;
}

static int by_ms(const void *a, const void *b) {
  double x = ((const entry_sum *)a)->e.ms, y = ((const entry_sum *)b)->e.ms;
  return (x < y) - (x > y);
}

/* ---- tuning: children with RELCL_TUNING=off and with the tuning that applies ---- */

/* Run this program with --tuning-child; its one output line is the median step time. */
static int run_child(char *const *argv, const char *tuning, double *sec, char *used,
                     size_t used_size) {
  int fd[2];
  if (pipe(fd) != 0) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(fd[0]);
    if (dup2(fd[1], 1) < 0) _exit(127);
    if (tuning)
      setenv("RELCL_TUNING", tuning, 1);
    else
      unsetenv("RELCL_TUNING");
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(fd[1]);
  char buf[2048];
  size_t got = 0;
  ssize_t r;
  while ((r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
  close(fd[0]);
  buf[got] = '\0';
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  cJSON *root = cJSON_Parse(buf);
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "seconds_per_step");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tuning");
  int rc = cJSON_IsNumber(s) && cJSON_IsString(t) ? 0 : 1;
  if (!rc) {
    *sec = s->valuedouble;
    snprintf(used, used_size, "%s", t->valuestring);
  }
  cJSON_Delete(root);
  return rc;
}

static int tuning_compare(const options *o, const char *applied, bool quiet, cJSON *out) {
  const char *with = o->tuning_file ? o->tuning_file : getenv("RELCL_TUNING");
  bool none = strncmp(applied, "none", 4) == 0;
  cJSON *t = cJSON_AddObjectToObject(out, "tuning");
  if (none && !o->tuning_file) {
    cJSON_AddStringToObject(t, "applies", applied);
    cJSON_AddBoolToObject(t, "compared", 0);
    if (!quiet)
      printf(
          "\ntuning: none applies to this device (%s): CLBlast's defaults are all there is "
          "to time; relcl-tune writes a tuning file, or pass --tuning FILE\n",
          applied);
    return 0;
  }
  char *argv[32];
  int argc = 0;
  char reps[16], k[16], vocab[16], tokens[16], len[16];
  argv[argc++] = (char *)PROG;
  argv[argc++] = (char *)"--tuning-child";
  if (o->device) argv[argc++] = (char *)"--device", argv[argc++] = (char *)o->device;
  if (o->preset) argv[argc++] = (char *)"--preset", argv[argc++] = (char *)o->preset;
  if (o->quick) argv[argc++] = (char *)"--quick";
  snprintf(reps, sizeof reps, "%d", o->quick ? 1 : 3);
  argv[argc++] = (char *)"--reps", argv[argc++] = reps;
  struct {
    const char *flag;
    int v;
    char *buf;
  } pass[] = {{"--k", o->k, k},
              {"--vocab", o->vocab, vocab},
              {"--batch-tokens", o->batch_tokens, tokens},
              {"--length", o->length, len}};
  for (int i = 0; i < 4; i++)
    if (pass[i].v > 0 || (i == 0 && pass[i].v >= 0)) {
      snprintf(pass[i].buf, 16, "%d", pass[i].v);
      argv[argc++] = (char *)pass[i].flag, argv[argc++] = pass[i].buf;
    }
  argv[argc] = NULL;
  double off[16], on[16];
  char used_off[512] = "", used_on[512] = "";
  for (int r = 0; r < o->tuning_reps; r++) { /* interleaved */
    if (run_child(argv, "off", &off[r], used_off, sizeof used_off) ||
        run_child(argv, with, &on[r], used_on, sizeof used_on)) {
      fprintf(stderr, PROG ": the tuning comparison's child run failed\n");
      return 1;
    }
  }
  double m_off, m_on, lo, hi;
  bench_stats(off, o->tuning_reps, &m_off, &lo, &hi);
  bench_stats(on, o->tuning_reps, &m_on, &lo, &hi);
  cJSON_AddStringToObject(t, "applies", used_on);
  cJSON_AddBoolToObject(t, "compared", 1);
  cJSON_AddNumberToObject(t, "default_steps_per_s", 1.0 / m_off);
  cJSON_AddNumberToObject(t, "tuned_steps_per_s", 1.0 / m_on);
  cJSON_AddNumberToObject(t, "speedup", m_off / m_on);
  if (!quiet)
    printf(
        "\ntuning (relative model, separate processes, interleaved, median of %d): CLBlast's "
        "defaults %.3f steps/s, with %s %.3f steps/s: x%.2f\n",
        o->tuning_reps, 1.0 / m_off, used_on, 1.0 / m_on, m_off / m_on);
  return 0;
}

/* ---- output ---- */

static void print_rates(const setup *s, const variant *v, int n, int reps) {
  printf(
      "\nstep rate: one step = zero-grad + forward + backward + Adam + relcl_finish; %d "
      "timed steps per variant, interleaved (the order turned around every other round), after "
      "one warm-up step each\n",
      reps);
  printf("%-22s %28s %34s %11s\n", "variant", "steps/s median (min..max)",
         "target tokens/s median (min..max)", "decrease");
  for (int i = 0; i < n; i++) {
    char dec[32] = "-";
    if (i != v[i].base)
      snprintf(dec, sizeof dec, "%.1f%%", 100.0 * (1.0 - v[v[i].base].med / v[i].med));
    printf("%-22s %10.3f (%6.3f..%6.3f) %14.0f (%8.0f..%8.0f) %11s\n", v[i].name, 1.0 / v[i].med,
           1.0 / v[i].hi, 1.0 / v[i].lo, (double)s->tokens / v[i].med, (double)s->tokens / v[i].hi,
           (double)s->tokens / v[i].lo, dec);
  }
}

/* --compare: side B against side A, variant by variant. Time ratios B / A (below 1: B is
 * faster): of the median steps, of the steps timed next to each other (repetition r of both
 * runs in the same round), and of the profiled device time. */
typedef struct side_ratio {
  double median, paired, paired_lo, paired_hi, device;
} side_ratio;

static side_ratio compare_sides(const variant *a, const variant *b, int reps) {
  side_ratio x = {0};
  bench_ratio_stats(a->sec, b->sec, reps, &x.paired, &x.paired_lo, &x.paired_hi);
  x.median = b->med / a->med;
  x.device = a->busy > 0 ? b->busy / a->busy : 0;
  return x;
}

/* Side B's variant of side A's variant i (--compare): B's variants follow A's, in order, and
 * each of B's bases (its absolute model) is the number of A's. */
static const variant *twin_of(const variant *v, int n, int i) { return &v[i + v[n - 1].base]; }

static void print_compare(const options *o, const variant *v, int n, int reps) {
  printf("\nA against B: A as the environment gives, B in a second context with");
  for (int i = 0; i < o->n_compare; i++) printf(" %s", o->compare[i]);
  printf(
      "; the same steps, interleaved in one process. Time B / A (below 1: B is faster): of "
      "the medians, of the %d paired repetitions (median, min..max), of the profiled device "
      "time\n",
      reps);
  printf("%-22s %10s %10s %8s %24s %8s\n", "variant", "A steps/s", "B steps/s", "medians",
         "paired (min..max)", "device");
  for (int i = 0; i < n; i++) {
    if (v[i].side != 0) continue;
    const variant *b = twin_of(v, n, i);
    side_ratio x = compare_sides(&v[i], b, reps);
    printf("%-22s %10.3f %10.3f %8.3f %8.3f (%5.3f..%5.3f) %8.3f\n", v[i].name, 1.0 / v[i].med,
           1.0 / b->med, x.median, x.paired, x.paired_lo, x.paired_hi, x.device);
  }
}

static void print_breakdown(const variant *v, int n, int reps) {
  printf(
      "\nwhere a step's time goes (ms per step; device time from OpenCL events, %d profiled "
      "steps each; events are read at relcl_finish, not waited for one by one)\n",
      reps);
  printf("%-20s", "part");
  for (int i = 0; i < n; i++) printf(" %18.18s", v[i].name);
  printf("\n");
  for (int p = 0; p < RELCL_PART_COUNT; p++) {
    printf("%-20s", relcl_profile_part_name((relcl_profile_part)p));
    for (int i = 0; i < n; i++) printf(" %18.1f", v[i].part[p] * 1e3);
    printf("\n");
  }
  const char *rows[] = {"device busy", "wall (profiled)", "host gap", "wall (no profiling)"};
  for (int r = 0; r < 4; r++) {
    printf("%-20s", rows[r]);
    for (int i = 0; i < n; i++) {
      double x = r == 0   ? v[i].busy
                 : r == 1 ? v[i].prof_wall
                 : r == 2 ? v[i].prof_wall - v[i].busy
                          : v[i].med;
      printf(" %18.1f", x * 1e3);
    }
    printf("\n");
  }
  printf(
      "host gap = wall time of a profiled step - the device time of its commands (the same "
      "steps): how long the device sat idle waiting for the host (launches, argument checks, "
      "the blocking read of the loss; on a CPU device also the host thread's share of the "
      "cores). Profiling only adds an event per command; compare the two wall rows.\n");
}

/* What a step's kernels must at least read and write, for their fraction of the copy
 * bandwidth. Every sentence has the same length, so each call of a kernel has one size:
 * N tokens x D (activations), W = B H len^2 attention weights, P parameters. Unknown
 * kernels get 0 (not rated). Lower bounds: a kernel that reads a row twice is not charged. */
typedef struct traffic {
  double nd, w, p;
} traffic;

static double kernel_bytes(const char *name, const traffic *t) {
  static const struct {
    const char *name;
    double nd, w, p; /* floats per call, in units of N*D, W and P */
  } table[] = {
      {"ln_fwd", 2, 0, 0},         /* x in, y out */
      {"ln_bwd", 3, 0, 0},         /* x, dy in, dx out */
      {"dropout_apply", 2, 0, 0},  /* x in, y out (and a residual in the forward) */
      {"attn_fwd_rows", 0, 3, 0},  /* logits in, weights and dropped weights out */
      {"attn_drop_rows", 0, 2, 0}, /* weights in, dropped weights out */
      {"attn_bwd_rows", 0, 3, 0},  /* gradient and weights in, logit gradient out */
      {"adam_update", 0, 0, 7},    /* param, grad, m, v in; param, m, v out */
  };
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (strcmp(table[i].name, name) == 0)
      return 4 * (table[i].nd * t->nd + table[i].w * t->w + table[i].p * t->p);
  return 0;
}

/* Rate and fraction of peak of an entry: GFLOP/s of the FMA peak for GEMMs, GB/s of the
 * copy bandwidth for rated kernels. false when neither applies. */
static bool entry_rate(const relcl_profile_entry *x, const traffic *t, const bench_peaks *pk,
                       double *rate, double *frac, bool *gemm) {
  double sec = x->ms * 1e-3;
  *gemm = x->m > 0;
  if (sec <= 0) return false;
  if (*gemm) {
    *rate = 2.0 * x->m * x->n * x->k * x->batch * x->calls / sec * 1e-9;
    *frac = *rate / pk->fma_gflops;
    return true;
  }
  double bytes = kernel_bytes(x->name, t);
  if (bytes <= 0) return false;
  *rate = bytes * x->calls / sec * 1e-9;
  *frac = *rate / pk->copy_gbs;
  return true;
}

/* Side B's entry of the same kernel or shape as a (same name and part), or NULL. */
static const entry_sum *twin_entry(const entry_sum *a, const entry_sum *b, int nb) {
  for (int i = 0; i < nb; i++)
    if (b[i].e.part == a->e.part && bench_same_entry(b[i].name, a->name)) return &b[i];
  return NULL;
}

/* What a product's rate is a share of: the SGEMM beside the step where measured */
static double sgemm_ref(const bench_peaks *pk) {
  return pk->sgemm_step_gflops > 0 ? pk->sgemm_step_gflops : pk->sgemm_gflops;
}

/* The copy bandwidth a product's memory roof is taken at: the copy beside the step where
 * measured */
static double copy_ref(const bench_peaks *pk) {
  return pk->copy_step_gbs > 0 ? pk->copy_step_gbs : pk->copy_gbs;
}

/* The most of the SGEMM measure a product can reach where memory bounds it, as a fraction:
 * its least traffic (op(A) and B read once, C written once: x batch) moved at the copy
 * bandwidth (copy_ref) takes bytes / copy seconds, and its flops in that time are its rate there; 1
 * where that rate is above the SGEMM's. Products only (content and relative GEMMs): the
 * fused attention kernels' shapes are rows x terms x d over a head's rows, not one product's
 * operands. 0 where not rated. */
static double memory_roof(const relcl_profile_entry *x, const bench_peaks *pk) {
  if (x->m == 0 || copy_ref(pk) <= 0 || sgemm_ref(pk) <= 0 ||
      (x->part != RELCL_PART_CONTENT_GEMM && x->part != RELCL_PART_RELATIVE_GEMM))
    return 0;
  const double m = (double)x->m, n = (double)x->n, k = (double)x->k, b = (double)x->batch;
  const double bytes = 4 * (m * k + k * n + m * n) * b, flops = 2 * m * n * k * b;
  const double gflops = flops / bytes * copy_ref(pk);
  return fmin(1.0, gflops / sgemm_ref(pk));
}

static void print_limits(const bench_peaks *pk, entry_sum *e, int n, const entry_sum *eb,
                         int nb, double busy, const traffic *t) {
  qsort(e, (size_t)n, sizeof *e, by_ms);
  for (int i = 0; i < n; i++) e[i].e.name = e[i].name; /* the sort moved the names */
  const bool b = eb != NULL;
  printf(
      "\ndevice limits: copy %.1f GB/s alone and %.1f beside the step, FMA %.1f GFLOP/s "
      "(float%d), SGEMM %dx%dx%d %.1f GFLOP/s alone (the best of 10 in a row) and %.1f "
      "beside the step (the best of 3 after each profiled step of the relative model, over "
      "those steps; the copy likewise); the SGEMM is relcl's GEMM as a step runs it: gemm_cpu "
      "on a CPU, CLBlast as tuned elsewhere\n",
      pk->copy_gbs, pk->copy_step_gbs, pk->fma_gflops, pk->fma_width, pk->sgemm_n, pk->sgemm_n,
      pk->sgemm_n, pk->sgemm_gflops, pk->sgemm_step_gflops);
  printf("relative model, a step (the mean of the profiled steps): kernels and GEMM shapes by "
         "device time; GEMMs in GFLOP/s (of the FMA peak, of the SGEMM beside the step, and "
         "roof: the most of that SGEMM the product's least traffic allows at the copy "
         "bandwidth beside the step, each operand read once and the result written once), "
         "kernels in GB/s of the least traffic they need (of the copy bandwidth alone)%s\n",
         b ? "; side B's time and B / A (the limits and rates are side A's)" : "");
  printf("%8s %6s %6s %12s %7s %7s %5s  ", "ms", "share", "calls", "rate", "%peak", "%SGEMM",
         "roof");
  if (b) printf("%8s %6s  ", "B ms", "B/A");
  printf("%-18s %s\n", "part", "name");
  for (int i = 0; i < n; i++) {
    const relcl_profile_entry *x = &e[i].e;
    char rs[24] = "", pf[16] = "", ps[16] = "", pr[16] = "";
    double rate, frac;
    bool gemm;
    if (entry_rate(x, t, pk, &rate, &frac, &gemm)) {
      snprintf(rs, sizeof rs, gemm ? "%.1f GFLOP/s" : "%.2f GB/s", rate);
      snprintf(pf, sizeof pf, "%.0f%%", 100 * frac);
      if (gemm) snprintf(ps, sizeof ps, "%.0f%%", 100 * rate / sgemm_ref(pk));
    }
    const double roof = memory_roof(x, pk);
    if (roof > 0) snprintf(pr, sizeof pr, "%.0f%%", 100 * roof);
    printf("%8.2f %5.1f%% %6ld %12s %7s %7s %5s  ", x->ms, 100 * x->ms / (busy * 1e3), x->calls,
           rs, pf, ps, pr);
    if (b) {
      const entry_sum *y = twin_entry(&e[i], eb, nb);
      if (y && x->ms > 0)
        printf("%8.2f %6.3f  ", y->e.ms, y->e.ms / x->ms);
      else
        printf("%8s %6s  ", "-", "-");
    }
    printf("%-18s %s\n", relcl_profile_part_name(x->part), x->name);
  }
  for (int i = 0; b && i < nb; i++) /* what only side B ran */
    if (!twin_entry(&eb[i], e, n))
      printf("%8s %6s %6ld %12s %7s %7s %5s  %8.2f %6s  %-18s %s\n", "-", "", eb[i].e.calls,
             "", "", "", "", eb[i].e.ms, "-", relcl_profile_part_name(eb[i].e.part),
             eb[i].name);
}

static void json_limits(cJSON *out, const bench_peaks *pk, const entry_sum *e, int n,
                        const entry_sum *eb, int nb, const traffic *t) {
  cJSON *l = cJSON_AddObjectToObject(out, "limits");
  cJSON_AddNumberToObject(l, "copy_gb_per_s", pk->copy_gbs);
  if (pk->copy_step_gbs > 0)
    cJSON_AddNumberToObject(l, "copy_beside_step_gb_per_s", pk->copy_step_gbs);
  cJSON_AddNumberToObject(l, "fma_gflop_per_s", pk->fma_gflops);
  cJSON_AddNumberToObject(l, "fma_vector_width", pk->fma_width);
  cJSON_AddNumberToObject(l, "sgemm_gflop_per_s", pk->sgemm_gflops);
  cJSON_AddNumberToObject(l, "sgemm_n", pk->sgemm_n);
  cJSON_AddNumberToObject(l, "sgemm_beside_step_gflop_per_s", pk->sgemm_step_gflops);
  if (pk->sgemm_step_gflops_b > 0)
    cJSON_AddNumberToObject(l, "sgemm_beside_step_gflop_per_s_b", pk->sgemm_step_gflops_b);
  cJSON *a = cJSON_AddArrayToObject(l, "relative_step_entries");
  for (int i = 0; i < n; i++) {
    const relcl_profile_entry *x = &e[i].e;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", e[i].name);
    cJSON_AddStringToObject(j, "part", relcl_profile_part_name(x->part));
    cJSON_AddNumberToObject(j, "ms", x->ms);
    cJSON_AddNumberToObject(j, "calls", (double)x->calls);
    double rate, frac;
    bool gemm;
    if (entry_rate(x, t, pk, &rate, &frac, &gemm)) {
      if (gemm) {
        cJSON_AddNumberToObject(j, "gflop_per_s", rate);
        cJSON_AddNumberToObject(j, "fraction_of_fma_peak", frac);
        cJSON_AddNumberToObject(j, "fraction_of_sgemm_peak", rate / sgemm_ref(pk));
        const double roof = memory_roof(x, pk);
        if (roof > 0) cJSON_AddNumberToObject(j, "sgemm_fraction_memory_roof", roof);
      } else {
        cJSON_AddNumberToObject(j, "gb_per_s_least_traffic", rate);
        cJSON_AddNumberToObject(j, "fraction_of_copy_peak", frac);
      }
    }
    const entry_sum *y = eb ? twin_entry(&e[i], eb, nb) : NULL;
    if (y) {
      cJSON_AddNumberToObject(j, "ms_b", y->e.ms);
      if (x->ms > 0) cJSON_AddNumberToObject(j, "time_ratio_b_over_a", y->e.ms / x->ms);
    }
    cJSON_AddItemToArray(a, j);
  }
  if (!eb) return;
  a = cJSON_AddArrayToObject(l, "relative_step_entries_b_only");
  for (int i = 0; i < nb; i++)
    if (!twin_entry(&eb[i], e, n)) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "name", eb[i].name);
      cJSON_AddStringToObject(j, "part", relcl_profile_part_name(eb[i].e.part));
      cJSON_AddNumberToObject(j, "ms", eb[i].e.ms);
      cJSON_AddNumberToObject(j, "calls", (double)eb[i].e.calls);
      cJSON_AddItemToArray(a, j);
    }
}

static void json_compare(cJSON *out, const options *o, const variant *v, int n, int reps) {
  cJSON *c = cJSON_AddObjectToObject(out, "compare");
  cJSON *env = cJSON_AddArrayToObject(c, "b_environment");
  for (int i = 0; i < o->n_compare; i++)
    cJSON_AddItemToArray(env, cJSON_CreateString(o->compare[i]));
  cJSON *a = cJSON_AddArrayToObject(c, "variants");
  for (int i = 0; i < n; i++) {
    if (v[i].side != 0) continue;
    const variant *b = twin_of(v, n, i);
    side_ratio x = compare_sides(&v[i], b, reps);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", v[i].name);
    cJSON_AddNumberToObject(j, "a_steps_per_s", 1.0 / v[i].med);
    cJSON_AddNumberToObject(j, "b_steps_per_s", 1.0 / b->med);
    cJSON_AddNumberToObject(j, "time_ratio_medians", x.median);
    cJSON_AddNumberToObject(j, "time_ratio_paired_median", x.paired);
    cJSON_AddNumberToObject(j, "time_ratio_paired_min", x.paired_lo);
    cJSON_AddNumberToObject(j, "time_ratio_paired_max", x.paired_hi);
    cJSON_AddNumberToObject(j, "time_ratio_device", x.device);
    cJSON_AddItemToArray(a, j);
  }
}

static void json_variants(cJSON *out, const setup *s, const variant *v, int n, int reps) {
  cJSON *a = cJSON_AddArrayToObject(out, "variants");
  for (int i = 0; i < n; i++) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", v[i].name);
    cJSON_AddStringToObject(j, "positions",
                            v[i].positions == RELCL_POS_ABSOLUTE   ? "absolute"
                            : v[i].positions == RELCL_POS_RELATIVE ? "relative"
                                                                   : "both");
    cJSON_AddNumberToObject(j, "k", v[i].k);
    cJSON_AddBoolToObject(j, "per_head", v[i].per_head);
    cJSON_AddBoolToObject(j, "keys_only", v[i].keys_only);
    cJSON_AddStringToObject(j, "side", v[i].side ? "B" : "A");
    double sps[MAX_REPS];
    for (int r = 0; r < reps; r++) sps[r] = 1.0 / v[i].sec[r];
    bench_json_array(j, "steps_per_s_runs", sps, reps);
    cJSON_AddNumberToObject(j, "steps_per_s", 1.0 / v[i].med);
    cJSON_AddNumberToObject(j, "steps_per_s_min", 1.0 / v[i].hi);
    cJSON_AddNumberToObject(j, "steps_per_s_max", 1.0 / v[i].lo);
    cJSON_AddNumberToObject(j, "target_tokens_per_s", (double)s->tokens / v[i].med);
    cJSON_AddNumberToObject(j, "target_tokens_per_s_min", (double)s->tokens / v[i].hi);
    cJSON_AddNumberToObject(j, "target_tokens_per_s_max", (double)s->tokens / v[i].lo);
    cJSON_AddNumberToObject(j, "decrease_percent",
                            100.0 * (1.0 - v[v[i].base].med / v[i].med));
    cJSON *b = cJSON_AddObjectToObject(j, "breakdown_ms");
    for (int p = 0; p < RELCL_PART_COUNT; p++)
      cJSON_AddNumberToObject(b, relcl_profile_part_name((relcl_profile_part)p),
                              v[i].part[p] * 1e3);
    cJSON_AddNumberToObject(j, "device_busy_ms", v[i].busy * 1e3);
    cJSON_AddNumberToObject(j, "device_span_ms", v[i].span * 1e3);
    cJSON_AddNumberToObject(j, "wall_ms", v[i].med * 1e3);
    cJSON_AddNumberToObject(j, "wall_profiled_ms", v[i].prof_wall * 1e3);
    cJSON_AddNumberToObject(j, "host_gap_ms", (v[i].prof_wall - v[i].busy) * 1e3);
    cJSON_AddItemToArray(a, j);
  }
}

/* --tuning-child: the relative model's median step time, as one JSON line. */
static int tuning_child(relcl_context *ctx, const options *o) {
  setup s;
  choose_setup(ctx, o, &s);
  int reps = o->reps ? o->reps : 3;
  variant v[1];
  memset(v, 0, sizeof v);
  int n = 0;
  add_variant(v, &n, "relative", RELCL_POS_RELATIVE, s.cfg.max_rel, 0, 0);
  v[0].ctx = ctx;
  batch_data bd = {0};
  int rc = 1;
  relcl_model_config c = s.cfg;
  c.positions = RELCL_POS_RELATIVE;
  relcl_status st = relcl_model_create(ctx, &c, 1, &v[0].model);
  if (st != RELCL_OK) {
    fprintf(stderr, PROG ": %s\n", relcl_last_error());
    goto done;
  }
  if (batch_make(&bd, s.sentences, (int)(s.tokens / (size_t)s.sentences), c.vocab) ||
      time_steps(v, 1, &bd.view, reps))
    goto done;
  printf("{\"tuning\": \"%s\", \"seconds_per_step\": %.6f}\n", relcl_context_tuning(ctx), v[0].med);
  rc = 0;
done:
  relcl_model_destroy(v[0].model);
  batch_free(&bd);
  return rc;
}

int main(int argc, char **argv) {
  options o = {0};
  o.k = -1;
  int prc = parse_args(argc, argv, &o);
  if (prc) return prc == 1 ? 0 : 2;
  if (!o.profile_reps) o.profile_reps = o.quick ? 1 : 2;
  if (!o.tuning_reps) o.tuning_reps = o.quick ? 1 : 2;
  if (!o.plot) o.plot = "relcl-bench-scaling";

  relcl_context *ctx = NULL, *ctx_b = NULL;
  variant v[MAX_VARIANTS];
  int nv = 0, rc = 1;
  batch_data bd = {0};
  cJSON *out = cJSON_CreateObject();
  entry_sum *entries[2] = {calloc(MAX_ENTRIES, sizeof(entry_sum)),
                           calloc(MAX_ENTRIES, sizeof(entry_sum))};
  relcl_status st = relcl_context_create(&ctx, o.device);
  if (st != RELCL_OK) {
    fprintf(stderr, PROG ": %s: %s\n", relcl_status_str(st), relcl_last_error());
    goto done;
  }
  if (o.tuning_child) {
    rc = tuning_child(ctx, &o);
    goto done;
  }
  if (!entries[0] || !entries[1] || (o.n_compare && create_side_b(&o, &ctx_b))) goto done;
  setup s;
  choose_setup(ctx, &o, &s);
  if (!o.reps) o.reps = o.quick ? 2 : s.gpu ? 20 : 5;
  int len = (int)(s.tokens / (size_t)s.sentences);
  double load0 = load_average(), t_start = bench_now();
  char desc[256];
  relcl_model_config_describe(&s.cfg, desc, sizeof desc);
  cJSON_AddStringToObject(out, "device", relcl_context_device_name(ctx));
  cJSON_AddStringToObject(out, "device_type", s.gpu ? "GPU" : "other (CPU)");
  cJSON_AddStringToObject(out, "preset", s.preset);
  cJSON_AddStringToObject(out, "model", desc);
  cJSON_AddNumberToObject(out, "vocab", s.cfg.vocab);
  cJSON_AddNumberToObject(out, "sentences", s.sentences);
  cJSON_AddNumberToObject(out, "length", len);
  cJSON_AddNumberToObject(out, "target_tokens", (double)s.tokens);
  cJSON_AddStringToObject(out, "tuning_applied", relcl_context_tuning(ctx));
  cJSON_AddNumberToObject(out, "load_average_start", load0);
  if (!o.json) {
    printf(PROG ": device %s (%s)\n", relcl_context_device_name(ctx), s.gpu ? "GPU" : "not a GPU");
    printf("model: %s preset%s: %s\n", s.preset,
           o.preset ? ""
           : s.gpu  ? " (default on a GPU)"
                    : " (default on a CPU device; base on a GPU)",
           desc);
    printf(
        "batch: %d sentences x %d source and %d target positions = %zu target tokens "
        "(synthetic, fixed lengths)\n",
        s.sentences, len, len, s.tokens);
    printf("CLBlast tuning: %s; load average %.2f\n", relcl_context_tuning(ctx), load0);
    if (ctx_b) {
      printf("compared: side A as the environment gives, side B (\"[B]\") with");
      for (int i = 0; i < o.n_compare; i++) printf(" %s", o.compare[i]);
      printf(", every variant on both sides interleaved in one process\n");
    }
    fflush(stdout);
  }
  if (batch_make(&bd, s.sentences, len, s.cfg.vocab)) goto done;
  if (make_variants(ctx, ctx_b, &o, &s, v, &nv)) goto done;
  if (time_steps(v, nv, &bd.view, o.reps)) goto done;
  if (!o.json) print_rates(&s, v, nv, o.reps), fflush(stdout);

  /* the relative model of each side: variant 1, and its twin on side B */
  const int keep[2] = {1, ctx_b ? (int)(twin_of(v, nv, 1) - v) : -1};
  int n_entries[2] = {0, 0};
  double sgemm_step[2] = {0, 0}; /* SGEMM beside the profiled steps, GFLOP/s, per side */
  const int sgemm_n = o.quick ? 256 : 1024;
  double copy_step = 0; /* the copy beside side A's profiled steps, GB/s */
  if (profile_steps(v, nv, &bd.view, o.profile_reps, keep, entries, n_entries,
                    o.no_peaks ? 0 : sgemm_n, sgemm_step, bench_copy_floats(o.quick),
                    &copy_step))
    goto done;
  if (!o.json) print_breakdown(v, nv, o.profile_reps), fflush(stdout);
  if (ctx_b) {
    if (!o.json) print_compare(&o, v, nv, o.reps), fflush(stdout);
    json_compare(out, &o, v, nv, o.reps);
  }
  cJSON_AddNumberToObject(out, "absolute_steps_per_s", 1.0 / v[0].med);
  cJSON_AddNumberToObject(out, "relative_steps_per_s", 1.0 / v[1].med);
  cJSON_AddNumberToObject(out, "overhead_percent", 100.0 * (1.0 - v[0].med / v[1].med));
  {
    double paired[MAX_REPS], med, lo, hi;
    for (int r = 0; r < o.reps; r++) paired[r] = 100.0 * (1.0 - v[0].sec[r] / v[1].sec[r]);
    bench_stats(paired, o.reps, &med, &lo, &hi);
    cJSON_AddNumberToObject(out, "overhead_percent_paired_median", med);
    /* the fastest step of each is the least disturbed by other work on a shared machine */
    double best = 100.0 * (1.0 - v[0].lo / v[1].lo);
    double device = 100.0 * (1.0 - v[0].busy / v[1].busy);
    cJSON_AddNumberToObject(out, "overhead_percent_fastest", best);
    cJSON_AddNumberToObject(out, "overhead_percent_device_time", device);
    if (!o.json)
      printf(
          "\noverhead of relative positions: %.1f%% fewer steps/s (medians; paired "
          "repetitions: median %.1f%%, %.1f%% .. %.1f%%; fastest steps: %.1f%%; device "
          "time: %.1f%%). Shaw et al. report 7%% on P100 GPUs\n",
          100.0 * (1.0 - v[0].med / v[1].med), med, lo, hi, best, device);
  }
  json_variants(out, &s, v, nv, o.reps);
  traffic traf = {(double)s.tokens * s.cfg.d_model,
                  (double)s.sentences * s.cfg.heads * (double)len * len,
                  (double)relcl_model_param_count(v[1].model)};
  for (int i = 0; i < nv; i++) { /* free device memory before the sweeps */
    relcl_model_destroy(v[i].model);
    v[i].model = NULL;
  }
  if (ctx_b) {
    const int d = s.cfg.d_model, f = s.cfg.d_ff;
    bench_ops_opts op = {.rows = (int)s.tokens,
                         .linear = {{d, 3 * d}, {d, d}, {d, f}, {f, d}, {d, s.cfg.vocab}},
                         .n_linear = 5,
                         .sentences = s.sentences,
                         .heads = s.cfg.heads,
                         .len = len,
                         .head_dim = d / s.cfg.heads,
                         .k = s.cfg.max_rel,
                         .dropout = s.cfg.dropout,
                         .reps = o.op_reps ? o.op_reps : o.quick ? 3 : 15,
                         .quiet = o.json};
    if (bench_ops_compare(ctx, ctx_b, &op, cJSON_GetObjectItemCaseSensitive(out, "compare")))
      goto done;
    fflush(stdout);
  }

  if (!o.no_peaks) {
    bench_peaks pk = {0};
    if (bench_peaks_measure(ctx, o.quick, &pk)) goto done;
    pk.sgemm_step_gflops = sgemm_step[0];
    pk.sgemm_step_gflops_b = sgemm_step[1];
    pk.copy_step_gbs = copy_step;
    const entry_sum *eb = ctx_b ? entries[1] : NULL;
    if (!o.json)
      print_limits(&pk, entries[0], n_entries[0], eb, n_entries[1], v[1].busy, &traf),
          fflush(stdout);
    json_limits(out, &pk, entries[0], n_entries[0], eb, n_entries[1], &traf);
  }
  if (!o.no_scaling) {
    bench_scaling_opts so = {.n_min = 32,
                             .n_max = o.scaling_max ? o.scaling_max
                                      : o.quick     ? 64
                                      : s.gpu       ? 2048
                                                    : 512,
                             .batch = 1,
                             .heads = 8,
                             .head_dim = 64,
                             .k = 16,
                             .reps = o.quick ? 1 : 3,
                             .plot = o.plot,
                             .quiet = o.json};
    if (bench_scaling(ctx, &so, out)) goto done;
    fflush(stdout);
  }
  if (!o.no_tuning && tuning_compare(&o, relcl_context_tuning(ctx), o.json, out)) goto done;

  double load1 = load_average(), elapsed = bench_now() - t_start;
  cJSON_AddNumberToObject(out, "load_average_end", load1);
  cJSON_AddNumberToObject(out, "elapsed_s", elapsed);
  if (o.json) {
    char *text = cJSON_Print(out);
    if (text) puts(text);
    free(text);
  } else {
    printf("\n%.0f s in all; load average %.2f at the start, %.2f at the end\n", elapsed, load0,
           load1);
  }
  rc = 0;
done:
  for (int i = 0; i < nv; i++) relcl_model_destroy(v[i].model);
  batch_free(&bd);
  free(entries[0]);
  free(entries[1]);
  cJSON_Delete(out);
  relcl_context_destroy(ctx_b);
  relcl_context_destroy(ctx);
  return rc;
}
