/* relcl-train: trains an encoder-decoder Transformer with relative position representations
 * on one OpenCL device, with the recipe of Vaswani et al. (2017): Adam 0.9/0.98/1e-9, the
 * inverse-square-root schedule with warm-up, label smoothing, token-budget batches. Thin: the
 * options live in train_config.c, the plot in train_plot.c, everything else in librelcl. */
#include "relcl.h"
#include "relcl_checkpoint.h"
#include "relcl_data.h"
#include "relcl_model.h"
#include "train_config.h"
#include "train_mpi.h"
#include "train_plot.h"
#include "translate_model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "relcl-train"
#define SPM_NAME "spm.model"
#define PLOT_NAME "loss.png"

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *fmt_dur(double s, char *buf, size_t size) {
  if (!(s >= 0) || s > 1e9) s = 0;
  long t = (long)(s + 0.5), h = t / 3600, m = t / 60 % 60, sec = t % 60;
  if (h) snprintf(buf, size, "%ld:%02ld:%02ld", h, m, sec);
  else snprintf(buf, size, "%ld:%02ld", m, sec);
  return buf;
}

/* v to `digits` significant digits: log lines and the loss history need no more. (cJSON
 * then writes the short form, and null for NaN and infinities, which JSON cannot hold.) */
static double round_sig(double v, int digits) {
  char buf[48];
  snprintf(buf, sizeof buf, "%.*g", digits, v);
  return strtod(buf, NULL);
}

typedef struct history {
  double *x, *y;
  size_t n, cap;
} history;

static bool history_add(history *h, double x, double y) {
  if (h->n == h->cap) {
    size_t cap = h->cap ? 2 * h->cap : 64;
    double *nx = realloc(h->x, cap * sizeof *nx);
    if (!nx) return false;
    h->x = nx;
    double *ny = realloc(h->y, cap * sizeof *ny);
    if (!ny) return false;
    h->y = ny;
    h->cap = cap;
  }
  h->x[h->n] = x;
  h->y[h->n] = y;
  h->n++;
  return true;
}

/* Everything one training run holds. */
typedef struct run {
  train_config cfg;
  relcl_model_config mcfg;
  char dir[PATH_MAX], spm_path[PATH_MAX + 16], plot_path[PATH_MAX + 16];
  relcl_spm *spm;
  uint64_t vocab_hash;
  relcl_corpus *train, *valid;
  relcl_batcher *batcher, *vbatcher;
  relcl_context *ctx;
  relcl_model *model;
  size_t nparam;
  char *config_json;
  FILE *json;
  bool tty, bar_shown;
  double last_bar;
  /* progress */
  uint64_t step, start_step, tokens;
  uint64_t epoch;        /* epoch of the last batch trained on, from 0 */
  double epoch_frac;     /* its position within the epoch */
  double elapsed_before; /* training time of earlier runs, from the checkpoint */
  double t_start;
  double best;
  uint64_t best_step, last_saved, last_valid;
  int stalled;
  history train_h, valid_h;
  /* --valid-bleu */
  relcl_text *bleu_src;
  bool bleu_off;
} run;

/* ---- messages ---- */

/* One --log-json line (and the object freed). */
static void log_json(run *r, cJSON *o) {
  char *s = o ? cJSON_PrintUnformatted(o) : NULL;
  if (s) {
    fprintf(r->json, "%s\n", s);
    fflush(r->json);
  }
  cJSON_free(s);
  cJSON_Delete(o);
}

static void clear_bar(run *r) {
  if (r->bar_shown) {
    fputs("\r\033[K", stdout);
    r->bar_shown = false;
  }
}

static void errorf(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void errorf(run *r, const char *fmt, ...) {
  if (r) clear_bar(r);
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": %s", train_mpi_where());
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static bool is_oom(relcl_status st) {
  const char *e = relcl_last_error();
  return st == RELCL_ERR_OUT_OF_MEMORY || strstr(e, "MEM_OBJECT_ALLOCATION_FAILURE") ||
         strstr(e, "OUT_OF_RESOURCES") || strstr(e, "OUT_OF_HOST_MEMORY");
}

/* One line for a failed library call during `what` on the device. */
static void device_error(run *r, relcl_status st, const char *what) {
  if (is_oom(st))
    errorf(r,
           "out of memory on %s while %s (%s): try a smaller --batch-tokens, --max-length or "
           "model",
           r->ctx ? relcl_context_device_name(r->ctx) : "the device", what, relcl_last_error());
  else errorf(r, "%s: %s", what, relcl_last_error());
}

/* ---- files ---- */

static int mkdir_p(const char *path) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return ENAMETOOLONG;
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) return errno;
      *p = c;
      if (c == '\0') break;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

static void fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* Write bytes to path atomically (temporary file, fsync, rename, fsync of the directory). */
static int write_atomic(const char *dir, const char *path, const void *data, size_t size) {
  char tmp[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  const char *p = data;
  size_t left = size;
  int e = 0;
  while (left > 0 && e == 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno != EINTR) e = errno;
    else if (n > 0) p += n, left -= (size_t)n;
  }
  if (e == 0 && fsync(fd) != 0) e = errno;
  if (close(fd) != 0 && e == 0) e = errno;
  if (e == 0 && rename(tmp, path) != 0) e = errno;
  if (e) unlink(tmp);
  else fsync_dir(dir);
  return e;
}

/* ---- vocabulary and data ---- */

/* The SentencePiece model: --spm-model, else the model directory's (when resuming), else one
 * trained here on both sides of the training text. */
static int setup_vocab(run *r, bool from_dir) {
  relcl_status st;
  const char *path = r->cfg.spm_model;
  if (!path && from_dir) path = r->spm_path;
  if (path) {
    if ((st = relcl_spm_load(&r->spm, path)) != RELCL_OK) {
      errorf(r, "vocabulary: %s", relcl_last_error());
      return 1;
    }
  } else {
    char prefix[PATH_MAX + 8];
    snprintf(prefix, sizeof prefix, "%s/spm", r->dir);
    const char *inputs[2] = {r->cfg.train_src, r->cfg.train_tgt};
    printf("vocabulary: training a SentencePiece model of %d pieces on the training text...\n",
           r->cfg.vocab_size);
    fflush(stdout);
    double t = now();
    if ((st = relcl_spm_train(inputs, 2, r->cfg.vocab_size, prefix)) != RELCL_OK ||
        (st = relcl_spm_load(&r->spm, r->spm_path)) != RELCL_OK) {
      errorf(r, "vocabulary: %s", relcl_last_error());
      return 1;
    }
    printf("vocabulary: trained in %.1f s\n", now() - t);
  }
  r->vocab_hash = relcl_spm_hash(r->spm);
  return 0;
}

/* Keep a copy of a given --spm-model in the model directory, so the directory is complete. */
static int keep_vocab(run *r) {
  if (!r->cfg.spm_model) return 0;
  struct stat a, b;
  if (stat(r->cfg.spm_model, &a) == 0 && stat(r->spm_path, &b) == 0 && a.st_dev == b.st_dev &&
      a.st_ino == b.st_ino)
    return 0;
  size_t size = 0;
  const void *bytes = relcl_spm_bytes(r->spm, &size);
  int e = write_atomic(r->dir, r->spm_path, bytes, size);
  if (e) {
    errorf(r, "%s: %s", r->spm_path, strerror(e));
    return 1;
  }
  return 0;
}

static void print_stats(const char *what, const char *src, const char *tgt,
                        const relcl_corpus *c, int max_length) {
  relcl_corpus_stats s;
  relcl_corpus_get_stats(c, &s);
  printf("%s: %s + %s: %zu lines, %zu pairs kept, %zu empty skipped, %zu too long (> %d "
         "subwords) skipped; %zu + %zu subwords\n",
         what, src, tgt, s.lines, s.pairs, s.empty, s.too_long, max_length, s.src_tokens,
         s.tgt_tokens);
}

static int load_data(run *r) {
  relcl_status st;
  double t = now();
  st = relcl_corpus_load(&r->train, r->cfg.train_src, r->cfg.train_tgt, r->spm,
                         r->cfg.max_length);
  if (st != RELCL_OK) {
    errorf(r, "training data: %s", relcl_last_error());
    return 1;
  }
  print_stats("train", r->cfg.train_src, r->cfg.train_tgt, r->train, r->cfg.max_length);
  if (relcl_corpus_size(r->train) == 0) {
    errorf(r, "training data: no pair left to train on");
    return 1;
  }
  if (r->cfg.valid_src) {
    st = relcl_corpus_load(&r->valid, r->cfg.valid_src, r->cfg.valid_tgt, r->spm,
                           r->cfg.max_length);
    if (st != RELCL_OK) {
      errorf(r, "validation data: %s", relcl_last_error());
      return 1;
    }
    print_stats("valid", r->cfg.valid_src, r->cfg.valid_tgt, r->valid, r->cfg.max_length);
    if (relcl_corpus_size(r->valid) == 0) {
      errorf(r, "validation data: no pair left to validate on");
      return 1;
    }
  }
  relcl_batch_opts o = relcl_batch_opts_default((size_t)r->cfg.batch_tokens, r->cfg.seed);
  if ((st = relcl_batcher_create(&r->batcher, r->train, &o)) != RELCL_OK) {
    errorf(r, "batches: %s", relcl_last_error());
    return 1;
  }
  if (r->valid) {
    o.shuffle = 0;
    if ((st = relcl_batcher_create(&r->vbatcher, r->valid, &o)) != RELCL_OK) {
      errorf(r, "validation batches: %s", relcl_last_error());
      return 1;
    }
  }
  printf("batches: %zu per epoch of at most %" PRId64 " tokens, %d per update; read in %.1f s\n",
         relcl_batcher_count(r->batcher), r->cfg.batch_tokens, r->cfg.accum, now() - t);
  return 0;
}

/* ---- checkpoints ---- */

static const char *meta(const relcl_checkpoint *ck, const char *key, bool *ok) {
  const char *v = relcl_checkpoint_meta_get(ck, key);
  if (!v) *ok = false;
  return v ? v : "";
}

static uint64_t meta_u64(const relcl_checkpoint *ck, const char *key, bool *ok) {
  const char *v = meta(ck, key, ok);
  char *end = NULL;
  uint64_t x = strtoull(v, &end, 10);
  if (!end || *end || !*v) *ok = false;
  return x;
}

static double meta_real(const relcl_checkpoint *ck, const char *key, bool *ok) {
  const char *v = meta(ck, key, ok);
  char *end = NULL;
  double x = strtod(v, &end);
  if (!end || *end || !*v) *ok = false;
  return x;
}

static char *history_json(const run *r) {
  cJSON *root = cJSON_CreateObject();
  const history *h[2] = {&r->train_h, &r->valid_h};
  const char *names[2] = {"train", "valid"};
  for (int k = 0; root && k < 2; k++) {
    cJSON *a = cJSON_AddArrayToObject(root, names[k]);
    for (size_t i = 0; a && i < h[k]->n; i++) {
      const double xy[2] = {h[k]->x[i], round_sig(h[k]->y[i], 7)};
      cJSON_AddItemToArray(a, cJSON_CreateDoubleArray(xy, 2));
    }
  }
  char *s = root ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return s;
}

static void history_load(run *r, const char *json) {
  cJSON *root = json ? cJSON_Parse(json) : NULL;
  history *h[2] = {&r->train_h, &r->valid_h};
  const char *names[2] = {"train", "valid"};
  for (int k = 0; root && k < 2; k++) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(root, names[k]), *p;
    cJSON_ArrayForEach(p, a) {
      cJSON *x = cJSON_GetArrayItem(p, 0), *y = cJSON_GetArrayItem(p, 1);
      if (cJSON_IsNumber(x) && cJSON_IsNumber(y) && x->valuedouble <= (double)r->step)
        history_add(h[k], x->valuedouble, y->valuedouble);
    }
  }
  cJSON_Delete(root);
}

static void update_plot(run *r) {
  train_series s[2] = {
      {"training (label-smoothed, dropout)", r->train_h.x, r->train_h.y, r->train_h.n},
      {"validation", r->valid_h.x, r->valid_h.y, r->valid_h.n},
  };
  char title[PATH_MAX + 64], err[PATH_MAX + 256];
  const char *base = strrchr(r->dir, '/');
  snprintf(title, sizeof title, "relcl-train: %s", base && base[1] ? base + 1 : r->dir);
  if (train_plot_png(r->plot_path, title, "update step", "loss (nats per target token)", s,
                     r->valid ? 2 : 1, err, sizeof err) != 0) {
    /* a plot that cannot be written is worth a line, not the run */
    errorf(r, "warning: %s", err);
  }
}

/* Save the model with both Adam moments (relcl_model_save), and what resuming needs.
 * valid_loss: NaN when not validated at this step. */
static int save_checkpoint(run *r, double valid_loss, bool is_best) {
  relcl_status st;
  int rc = 1;
  char *hist = history_json(r);
  if (!hist) {
    errorf(r, "out of host memory while saving");
    goto done;
  }
  uint64_t be = 0;
  size_t bi = 0;
  relcl_batcher_tell(r->batcher, &be, &bi);
  char s_step[24], s_be[24], s_bi[24], s_seed[24], s_hash[24], s_el[40], s_tok[24], s_vl[40],
      s_best[40], s_bstep[24], s_stall[24];
  snprintf(s_step, sizeof s_step, "%" PRIu64, r->step);
  snprintf(s_be, sizeof s_be, "%" PRIu64, be);
  snprintf(s_bi, sizeof s_bi, "%zu", bi);
  snprintf(s_seed, sizeof s_seed, "%" PRIu64, r->cfg.seed);
  snprintf(s_hash, sizeof s_hash, "%016" PRIx64, r->vocab_hash);
  snprintf(s_el, sizeof s_el, "%.3f", r->elapsed_before + (now() - r->t_start));
  snprintf(s_tok, sizeof s_tok, "%" PRIu64, r->tokens);
  snprintf(s_vl, sizeof s_vl, "%.9g", valid_loss);
  snprintf(s_best, sizeof s_best, "%.9g", r->best);
  snprintf(s_bstep, sizeof s_bstep, "%" PRIu64, r->best_step);
  snprintf(s_stall, sizeof s_stall, "%d", r->stalled);
  relcl_checkpoint_meta md[] = {
      {"relcl.train_config", r->config_json},
      {"relcl.vocab_fnv1a64", s_hash},
      {"relcl.spm_model", SPM_NAME},
      {"relcl.step", s_step},
      {"relcl.epoch", s_be},
      {"relcl.batch_epoch", s_be},
      {"relcl.batch_index", s_bi},
      {"relcl.seed", s_seed},
      {"relcl.elapsed", s_el},
      {"relcl.tokens", s_tok},
      {"relcl.best_valid_loss", s_best},
      {"relcl.best_step", s_bstep},
      {"relcl.stalled", s_stall},
      {"relcl.history", hist},
      {"relcl.device", relcl_context_device_name(r->ctx)},
      {"relcl.version", RELCL_VERSION},
      {"relcl.valid_loss", s_vl}, /* last: left out when not validated */
  };
  size_t nmd = sizeof md / sizeof md[0] - (isfinite(valid_loss) ? 0 : 1);
  relcl_model_save_opts so = {RELCL_MODEL_OPTIMIZER, r->step, r->vocab_hash, md, nmd};
  char path[PATH_MAX + 64], best[PATH_MAX + 64], tmp[PATH_MAX + 64];
  if ((st = relcl_checkpoint_step_path(r->dir, r->step, path, sizeof path)) != RELCL_OK ||
      (st = relcl_model_save(r->model, path, &so)) != RELCL_OK) {
    errorf(r, "saving a checkpoint: %s", relcl_last_error());
    goto done;
  }
  if (is_best) {
    /* best.safetensors: a second name for the same file (hard link, then atomic rename);
     * a filesystem without hard links gets a second save */
    snprintf(best, sizeof best, "%s/%s", r->dir, RELCL_CHECKPOINT_BEST_NAME);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp-link", r->dir, RELCL_CHECKPOINT_BEST_NAME);
    unlink(tmp);
    if (link(path, tmp) == 0 && rename(tmp, best) == 0) {
      fsync_dir(r->dir);
    } else {
      unlink(tmp);
      if ((st = relcl_model_save(r->model, best, &so)) != RELCL_OK) {
        errorf(r, "saving the best checkpoint: %s", relcl_last_error());
        goto done;
      }
    }
  }
  if ((st = relcl_checkpoint_keep_last(r->dir, (size_t)r->cfg.keep)) != RELCL_OK) {
    errorf(r, "removing old checkpoints: %s", relcl_last_error());
    goto done;
  }
  r->last_saved = r->step;
  clear_bar(r);
  printf("saved %s%s\n", path, is_best ? " (and as best.safetensors)" : "");
  fflush(stdout);
  rc = 0;
done:
  free(hist);
  return rc;
}

/* Make best.safetensors agree with a checkpoint that says it is the best, after a run was
 * killed between saving the checkpoint and linking it. */
static void repair_best(run *r, const relcl_checkpoint *ck) {
  if (r->best_step != r->step || !isfinite(r->best)) return;
  char best[PATH_MAX + 64], tmp[PATH_MAX + 64];
  snprintf(best, sizeof best, "%s/%s", r->dir, RELCL_CHECKPOINT_BEST_NAME);
  relcl_checkpoint *b = NULL;
  bool fine = false;
  if (relcl_checkpoint_open(best, 0, &b) == RELCL_OK) {
    const char *s = relcl_checkpoint_meta_get(b, "relcl.step");
    fine = s && strtoull(s, NULL, 10) == r->step;
    relcl_checkpoint_close(b);
  }
  if (fine) return;
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp-link", r->dir, RELCL_CHECKPOINT_BEST_NAME);
  unlink(tmp);
  if (link(relcl_checkpoint_path(ck), tmp) == 0 && rename(tmp, best) == 0) {
    fsync_dir(r->dir);
    printf("best.safetensors: relinked to %s (a run stopped before doing so)\n",
           relcl_checkpoint_path(ck));
  } else {
    unlink(tmp);
  }
}

/* Say which training options differ from the checkpoint's: they are allowed, but the run is
 * then no longer the exact continuation of the old one. */
static void note_changes(run *r, const char *old_json) {
  static const char *const keys[] = {"train-src", "train-tgt", "batch-tokens", "accum",
                                     "max-length", "warmup", "lr-scale", "clip-norm", "dropout",
                                     "label-smoothing", "seed"};
  cJSON *a = old_json ? cJSON_Parse(old_json) : NULL, *b = cJSON_Parse(r->config_json);
  for (size_t i = 0; a && b && i < sizeof keys / sizeof keys[0]; i++) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(a, keys[i]);
    cJSON *y = cJSON_GetObjectItemCaseSensitive(b, keys[i]);
    char *sx = x ? cJSON_PrintUnformatted(x) : NULL, *sy = y ? cJSON_PrintUnformatted(y) : NULL;
    if (sx && sy && strcmp(sx, sy) != 0)
      printf("note: --%s was %s in the checkpoint's run, now %s\n", keys[i], sx, sy);
    free(sx);
    free(sy);
  }
  cJSON_Delete(a);
  cJSON_Delete(b);
}

/* Refuse a checkpoint of another model or vocabulary, in one line. */
static int check_resume_config(run *r, const relcl_checkpoint *ck) {
  const char *path = relcl_checkpoint_path(ck);
  char why[256];
  relcl_model_config have;
  uint64_t have_hash = 0;
  if (relcl_model_checkpoint_config(ck, &have, &have_hash) != RELCL_OK) {
    errorf(r, "cannot resume: %s", relcl_last_error());
    return 1;
  }
  if (have_hash != r->vocab_hash)
    snprintf(why, sizeof why, "another vocabulary (SentencePiece model hash %016" PRIx64
             ", this run has %016" PRIx64 ")", have_hash, r->vocab_hash);
  else if (!relcl_model_config_compatible(&have, &r->mcfg, why + 2, sizeof why - 2))
    memcpy(why, "--", 2); /* the configuration's keys are this program's flags */
  else why[0] = '\0';
  if (why[0]) {
    errorf(r, "cannot resume from %s: it was made with %s (resuming needs the same model and "
           "vocabulary; use another --model-dir to start over)",
           path, why);
    return 1;
  }
  note_changes(r, relcl_checkpoint_meta_get(ck, "relcl.train_config"));
  return 0;
}

/* Read the training position and counters (the parameters come after the model exists). */
static int resume_meta(run *r, const relcl_checkpoint *ck) {
  const char *path = relcl_checkpoint_path(ck);
  bool ok = true;
  r->step = meta_u64(ck, "relcl.step", &ok);
  uint64_t be = meta_u64(ck, "relcl.batch_epoch", &ok);
  uint64_t bi = meta_u64(ck, "relcl.batch_index", &ok);
  (void)meta_u64(ck, "relcl.seed", &ok);
  r->elapsed_before = meta_real(ck, "relcl.elapsed", &ok);
  r->tokens = meta_u64(ck, "relcl.tokens", &ok);
  r->best = meta_real(ck, "relcl.best_valid_loss", &ok);
  r->best_step = meta_u64(ck, "relcl.best_step", &ok);
  r->stalled = (int)meta_u64(ck, "relcl.stalled", &ok);
  if (!ok) {
    errorf(r, "%s: not a relcl-train checkpoint: its metadata lacks the training position",
           path);
    return 1;
  }
  /* batch cuts depend on the corpus and --batch-tokens: a different count means the
   * position no longer names the same batch; start the epoch over */
  if (bi > relcl_batcher_count(r->batcher)) {
    printf("note: the training batches changed since the checkpoint (data or --batch-tokens); "
           "continuing at the start of epoch %" PRIu64 "\n",
           be + 2);
    be++, bi = 0;
  }
  relcl_status st = relcl_batcher_seek(r->batcher, be, (size_t)bi);
  if (st != RELCL_OK) {
    errorf(r, "%s: %s", path, relcl_last_error());
    return 1;
  }
  r->epoch = be;
  r->last_saved = r->last_valid = r->step;
  history_load(r, relcl_checkpoint_meta_get(ck, "relcl.history"));
  return 0;
}

/* Parameters and Adam moments from the checkpoint into the model (bit for bit). */
static int resume_tensors(run *r, const relcl_checkpoint *ck) {
  uint64_t adam_step = 0;
  relcl_status st = relcl_model_restore(r->model, ck, RELCL_MODEL_OPTIMIZER, &adam_step);
  if (st != RELCL_OK) {
    if (st == RELCL_ERR_FORMAT) errorf(r, "cannot resume: %s", relcl_last_error());
    else device_error(r, st, "restoring the parameters");
    return 1;
  }
  if (adam_step != r->step) {
    errorf(r, "cannot resume: %s: relcl.adam_step %" PRIu64 " is not relcl.step %" PRIu64,
           relcl_checkpoint_path(ck), adam_step, r->step);
    return 1;
  }
  return 0;
}

/* ---- training ---- */

static relcl_model_batch model_batch(const relcl_batch *b) {
  relcl_model_batch m = {b->batch,  b->src_len, b->tgt_len,  b->src,
                         b->tgt_in, b->tgt_out, b->src_lens, b->tgt_lens};
  return m;
}

static int validate(run *r, double *loss, double *nll) {
  relcl_model_stats s = {0, 0, 0};
  size_t n = relcl_batcher_count(r->vbatcher);
  for (size_t i = 0; i < n; i++) {
    relcl_batch b;
    relcl_status st = relcl_batcher_get(r->vbatcher, 0, i, &b);
    if (st != RELCL_OK) {
      errorf(r, "validation batches: %s", relcl_last_error());
      return 1;
    }
    relcl_model_batch mb = model_batch(&b);
    if ((st = relcl_model_eval_batch(r->model, &mb, &s)) != RELCL_OK) {
      device_error(r, st, "validating");
      return 1;
    }
  }
  *loss = s.tokens ? s.loss_sum / (double)s.tokens : NAN;
  *nll = s.tokens ? s.nll_sum / (double)s.tokens : NAN;
  return 0;
}

/* Validate (when there is a validation set and validating is asked for), save, plot. Sets
 * *early when early stopping is reached. */
static int checkpoint_now(run *r, bool validating, bool *early) {
  double loss = NAN, nll = NAN;
  bool is_best = false;
  if (validating && r->vbatcher && r->last_valid != r->step) {
    double t = now();
    if (validate(r, &loss, &nll)) return 1;
    r->last_valid = r->step;
    char msg[128], el[32];
    if (!(loss >= r->best)) { /* also the first time, when best is NaN */
      is_best = true;
      r->best = loss;
      r->best_step = r->step;
      r->stalled = 0;
      snprintf(msg, sizeof msg, "new best");
    } else {
      r->stalled++;
      snprintf(msg, sizeof msg, "stalled %d time%s (best %.4f at step %" PRIu64 ")", r->stalled,
               r->stalled == 1 ? "" : "s", r->best, r->best_step);
    }
    history_add(&r->valid_h, (double)r->step, loss);
    clear_bar(r);
    printf("valid step %7" PRIu64 " | epoch %3" PRIu64 " | loss %.4f | ppl %9.2f | %s | %.1f s | "
           "%s\n",
           r->step, r->epoch + 1, loss, exp(nll), msg, now() - t,
           fmt_dur(r->elapsed_before + now() - r->t_start, el, sizeof el));
    if (r->json) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "type", "valid");
      cJSON_AddNumberToObject(o, "step", (double)r->step);
      cJSON_AddNumberToObject(o, "epoch", (double)(r->epoch + 1));
      cJSON_AddNumberToObject(o, "valid_loss", round_sig(loss, 6));
      cJSON_AddNumberToObject(o, "valid_nll", round_sig(nll, 6));
      cJSON_AddNumberToObject(o, "valid_ppl", round_sig(exp(nll), 6));
      cJSON_AddNumberToObject(o, "best_valid_loss", round_sig(r->best, 6));
      cJSON_AddNumberToObject(o, "best_step", (double)r->best_step);
      cJSON_AddBoolToObject(o, "new_best", is_best);
      cJSON_AddNumberToObject(o, "stalled", r->stalled);
      log_json(r, o);
    }
    if (r->cfg.early_stopping > 0 && r->stalled >= r->cfg.early_stopping) *early = true;
  }
  if (save_checkpoint(r, loss, is_best)) return 1;
  update_plot(r);
  return 0;
}

/* ---- --valid-bleu: greedy translations of the validation set, scored by sacrebleu ---- */

/* Greedy decoding (beam 1, which is relcl_model_greedy) in batches of 64 sentences. */
static tm_opts greedy_opts(void) {
  tm_opts o;
  o.beam = relcl_beam_opts_default();
  o.beam.beam_size = 1;
  o.beam.length_penalty = 0.0f;
  o.batch_size = 64;
  return o;
}

/* Write lines to path, one a line; 0 or errno. */
static int write_lines(const char *path, char *const *lines, const relcl_text *t, size_t n) {
  FILE *f = fopen(path, "w");
  if (!f) return errno;
  for (size_t i = 0; i < n; i++) {
    fputs(lines ? lines[i] : relcl_text_line(t, i, NULL), f);
    fputc('\n', f);
  }
  int e = ferror(f) ? EIO : 0;
  if (fclose(f) != 0 && !e) e = errno;
  return e;
}

/* BLEU of the hypotheses in DIR/valid-bleu.hyp against DIR/valid-bleu.ref, by the python of
 * RELCL_PYTHON (default python3) running sacrebleu; NAN when that does not work. */
static double sacrebleu_score(const run *r) {
  const char *py = getenv("RELCL_PYTHON");
  char cmd[3 * PATH_MAX + 256];
  snprintf(cmd, sizeof cmd,
           "'%s' -m sacrebleu '%s/valid-bleu.ref' -i '%s/valid-bleu.hyp' -m bleu -b -w 2 "
           "2>/dev/null",
           py && *py ? py : "python3", r->dir, r->dir);
  if (strchr(r->dir, '\'') || (py && strchr(py, '\''))) return NAN; /* no quoting games */
  FILE *p = popen(cmd, "r");
  if (!p) return NAN;
  double bleu = NAN;
  if (fscanf(p, "%lf", &bleu) != 1) bleu = NAN;
  if (pclose(p) != 0) bleu = NAN;
  return bleu;
}

/* Greedy translations of --valid-src (into MODEL_DIR/valid-bleu.hyp) and their BLEU against
 * --valid-tgt. Without sacrebleu: said once, then skipped. Returns 1 on a device error. */
static int valid_bleu(run *r) {
  if (r->bleu_off) return 0;
  char path[PATH_MAX + 32], err[1024];
  double t = now();
  size_t n = 0;
  if (!r->bleu_src) {
    relcl_text *ref = NULL;
    int e = 0;
    if (relcl_text_read(&r->bleu_src, r->cfg.valid_src) != RELCL_OK ||
        relcl_text_read(&ref, r->cfg.valid_tgt) != RELCL_OK) {
      errorf(r, "--valid-bleu: %s", relcl_last_error());
      relcl_text_destroy(ref);
      return 1;
    }
    snprintf(path, sizeof path, "%s/valid-bleu.ref", r->dir);
    e = write_lines(path, NULL, ref, relcl_text_count(ref));
    relcl_text_destroy(ref);
    if (e) {
      errorf(r, "%s: %s", path, strerror(e));
      return 1;
    }
  }
  n = relcl_text_count(r->bleu_src);
  const char **lines = malloc((n ? n : 1) * sizeof *lines);
  char **hyp = calloc(n ? n : 1, sizeof *hyp);
  int rc = 1;
  if (!lines || !hyp) {
    errorf(r, "out of host memory for --valid-bleu");
    goto done;
  }
  for (size_t i = 0; i < n; i++) lines[i] = relcl_text_line(r->bleu_src, i, NULL);
  tm_opts o = greedy_opts();
  tm_stats stats;
  memset(&stats, 0, sizeof stats);
  if (tm_translate(r->model, r->spm, lines, n, &o, hyp, NULL, NULL, &stats, err, sizeof err)) {
    errorf(r, "--valid-bleu: %s", err);
    goto done;
  }
  snprintf(path, sizeof path, "%s/valid-bleu.hyp", r->dir);
  int e = write_lines(path, hyp, NULL, n);
  if (e) {
    errorf(r, "%s: %s", path, strerror(e));
    goto done;
  }
  double bleu = sacrebleu_score(r);
  clear_bar(r);
  if (!isfinite(bleu)) {
    printf("valid BLEU: sacrebleu did not run (pip install sacrebleu, or set RELCL_PYTHON to a "
           "python that has it): --valid-bleu is off for this run\n");
    r->bleu_off = true;
  } else {
    printf("valid step %7" PRIu64 " | BLEU %.2f (greedy, sacrebleu, %zu sentences) | %.1f s\n",
           r->step, bleu, n, now() - t);
    if (r->json) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "type", "valid_bleu");
      cJSON_AddNumberToObject(o, "step", (double)r->step);
      cJSON_AddNumberToObject(o, "valid_bleu", round_sig(bleu, 4));
      log_json(r, o);
    }
  }
  fflush(stdout);
  rc = 0;
done:
  if (hyp)
    for (size_t i = 0; i < n; i++) free(hyp[i]);
  free(hyp);
  free(lines);
  return rc;
}

typedef struct interval {
  double loss_sum, nll_sum, gnorm_sum, seconds;
  uint64_t tokens, steps;
} interval;

static double eta_seconds(const run *r, double t) {
  double done = t - r->t_start, eta = INFINITY;
  uint64_t steps = r->step - r->start_step;
  if (r->cfg.max_steps > 0 && steps > 0)
    eta = done / (double)steps * (double)((uint64_t)r->cfg.max_steps - r->step);
  if (r->cfg.max_time > 0) eta = fmin(eta, fmax(0, r->cfg.max_time - done));
  return eta;
}

static void draw_bar(run *r, const interval *iv, double t) {
  if (!r->tty || t - r->last_bar < 0.1) return;
  r->last_bar = t;
  double frac = NAN, eta = eta_seconds(r, t);
  if (r->cfg.max_steps > 0) frac = (double)r->step / (double)r->cfg.max_steps;
  if (r->cfg.max_time > 0) frac = fmax(isnan(frac) ? 0 : frac, (t - r->t_start) / r->cfg.max_time);
  char bar[32] = "", e[32] = "?";
  if (isfinite(frac)) {
    int w = 20, fill = (int)(fmin(frac, 1) * w);
    bar[0] = '[';
    for (int i = 0; i < w; i++) bar[1 + i] = i < fill ? '#' : '.';
    snprintf(bar + w + 1, sizeof bar - (size_t)w - 1, "] %3.0f%%", 100 * fmin(frac, 1));
  }
  if (isfinite(eta)) fmt_dur(eta, e, sizeof e);
  double loss = iv->tokens ? iv->loss_sum / (double)iv->tokens : NAN;
  double tps = iv->seconds > 0 ? (double)iv->tokens / iv->seconds : 0;
  printf("\r%s step %" PRIu64 " | loss %.3f | %.0f tok/s | ETA %s\033[K", bar, r->step, loss,
         tps, e);
  fflush(stdout);
  r->bar_shown = true;
}

static void log_train(run *r, interval *iv, float lr, double t) {
  double loss = iv->loss_sum / (double)iv->tokens, nll = iv->nll_sum / (double)iv->tokens;
  double tps = iv->seconds > 0 ? (double)iv->tokens / iv->seconds : 0;
  double gnorm = iv->gnorm_sum / (double)iv->steps, elapsed = r->elapsed_before + t - r->t_start;
  double eta = eta_seconds(r, t);
  char el[32], e[40] = "";
  if (isfinite(eta)) {
    strcpy(e, " | ETA ");
    fmt_dur(eta, e + 7, sizeof e - 7);
  }
  clear_bar(r);
  printf("step %7" PRIu64 " | epoch %3" PRIu64 " (%3.0f%%) | loss %.4f | ppl %9.2f | lr %.3e | "
         "gnorm %.3f | %6.0f tok/s | %s%s\n",
         r->step, r->epoch + 1, 100 * r->epoch_frac, loss, exp(nll), (double)lr, gnorm, tps,
         fmt_dur(elapsed, el, sizeof el), e);
  fflush(stdout);
  if (r->json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "train");
    cJSON_AddNumberToObject(o, "step", (double)r->step);
    cJSON_AddNumberToObject(o, "epoch", (double)(r->epoch + 1));
    cJSON_AddNumberToObject(o, "loss", round_sig(loss, 6));
    cJSON_AddNumberToObject(o, "nll", round_sig(nll, 6));
    cJSON_AddNumberToObject(o, "ppl", round_sig(exp(nll), 6));
    cJSON_AddNumberToObject(o, "lr", round_sig(lr, 6));
    cJSON_AddNumberToObject(o, "gnorm", round_sig(gnorm, 6));
    cJSON_AddNumberToObject(o, "tokens", (double)iv->tokens);
    cJSON_AddNumberToObject(o, "tokens_per_s", round_sig(tps, 6));
    cJSON_AddNumberToObject(o, "elapsed", round_sig(elapsed, 9));
    log_json(r, o);
  }
  history_add(&r->train_h, (double)r->step, loss);
  update_plot(r);
  memset(iv, 0, sizeof *iv);
}

/* The loop: accum micro-batches, one Adam update, logging, validation and checkpoints. */
static int train(run *r) {
  interval iv = {0};
  relcl_status st;
  bool early = false;
  const char *why = NULL;
  char why_buf[128];
  r->t_start = now();
  r->start_step = r->step;
  float lr = 0;
  while (true) {
    if (r->cfg.max_steps > 0 && r->step >= (uint64_t)r->cfg.max_steps) {
      snprintf(why_buf, sizeof why_buf, "reached --max-steps %" PRId64, r->cfg.max_steps);
      why = why_buf;
      break;
    }
    double t0 = now();
    bool timeup = r->cfg.max_time > 0 && t0 - r->t_start >= r->cfg.max_time;
    bool signaled = stop_signal != 0;
    train_mpi_agree_stop(&timeup, &early, &signaled); /* every rank stops at the same step */
    if (signaled && !stop_signal) stop_signal = SIGTERM;
    if (timeup) {
      snprintf(why_buf, sizeof why_buf, "reached --max-time %g s", r->cfg.max_time);
      why = why_buf;
      break;
    }
    if (early) {
      snprintf(why_buf, sizeof why_buf, "early stopping: validation loss stalled %d times",
               r->stalled);
      why = why_buf;
      break;
    }
    if (stop_signal) break;
    uint64_t step = r->step + 1; /* the update being made, from 1 */
    if ((st = relcl_model_zero_grad(r->model)) != RELCL_OK) {
      device_error(r, st, "zeroing the gradients");
      return 1;
    }
    relcl_model_stats s = {0, 0, 0}, sm = {0, 0, 0};
    /* under MPI every rank walks all the update's micro-batches and trains its share */
    bool mpi = train_mpi_active();
    int first = 0, mine = 0;
    int total = train_mpi_share(r->cfg.accum, r->cfg.balance, step, &first, &mine);
    for (int micro = 0; micro < total; micro++) {
      relcl_batch b;
      if ((st = relcl_batcher_next(r->batcher, &b)) != RELCL_OK) {
        errorf(r, "batches: %s", relcl_last_error());
        return 1;
      }
      r->epoch = b.epoch;
      r->epoch_frac = (double)(b.index + 1) / (double)relcl_batcher_count(r->batcher);
      if (micro < first || micro >= first + mine) continue;
      relcl_model_batch mb = model_batch(&b);
      if ((st = relcl_model_train_batch(r->model, &mb, r->cfg.seed, step, micro,
                                        mpi ? &sm : &s)) != RELCL_OK ||
          (mpi && (st = train_mpi_micro_done(r->model, &sm)) != RELCL_OK)) {
        char what[64];
        snprintf(what, sizeof what, "training step %" PRIu64, step);
        device_error(r, st, what);
        return 1;
      }
    }
    if (mpi && (st = train_mpi_reduce(r->model, &s)) != RELCL_OK) {
      device_error(r, st, "summing the gradients of the ranks");
      return 1;
    }
    lr = relcl_lr_schedule(r->mcfg.d_model, step, (uint64_t)r->cfg.warmup,
                           (float)r->cfg.lr_scale);
    relcl_adam_opts ao = {lr, 0.9f, 0.98f, 1e-9f, s.tokens ? 1.0f / (float)s.tokens : 0.0f,
                          (float)r->cfg.clip_norm};
    float gnorm = 0;
    if ((st = relcl_model_adam_step(r->model, &ao, step, &gnorm)) != RELCL_OK) {
      device_error(r, st, "the Adam update");
      return 1;
    }
    if ((st = train_mpi_check_params(r->model, step, r->cfg.hash_every)) != RELCL_OK) {
      device_error(r, st, "comparing the parameters of the ranks");
      return 1;
    }
    double loss = s.tokens ? s.loss_sum / (double)s.tokens : NAN;
    if (!isfinite(loss) || !isfinite(gnorm)) {
      errorf(r,
             "training diverged at step %" PRIu64 " (loss %g, gradient norm %g): try a lower "
             "--lr-scale, a longer --warmup or --clip-norm; the last checkpoint is intact",
             step, loss, (double)gnorm);
      return 1;
    }
    r->step = step;
    r->tokens += s.tokens;
    double t1 = now();
    iv.loss_sum += s.loss_sum, iv.nll_sum += s.nll_sum, iv.gnorm_sum += gnorm;
    iv.tokens += s.tokens, iv.steps++, iv.seconds += t1 - t0;
    bool last = r->cfg.max_steps > 0 && r->step >= (uint64_t)r->cfg.max_steps;
    if (train_mpi_rank() != 0) continue; /* only rank 0 logs, validates and saves */
    if (r->step % (uint64_t)r->cfg.log_every == 0 || last) {
      log_train(r, &iv, lr, t1);
      train_mpi_log(r->step);
    } else {
      draw_bar(r, &iv, t1);
    }
    if (r->step % (uint64_t)r->cfg.valid_every == 0 && checkpoint_now(r, true, &early))
      return 1;
    if (r->cfg.valid_bleu > 0 && r->step % (uint64_t)r->cfg.valid_bleu == 0 && valid_bleu(r))
      return 1;
  }
  if (train_mpi_rank() != 0) return stop_signal ? 1 : 0;
  if (iv.steps > 0) log_train(r, &iv, lr, now());
  /* interrupted: save at once, without validating */
  if (r->step != r->last_saved && checkpoint_now(r, !stop_signal, &early)) return 1;
  clear_bar(r);
  char el[32];
  double t = now() - r->t_start;
  if (stop_signal) {
    printf("interrupted (%s) at step %" PRIu64 "; continue with --resume\n",
           stop_signal == SIGINT ? "SIGINT" : "SIGTERM", r->step);
    return 1;
  }
  printf("done: %s; step %" PRIu64 ", %" PRIu64 " steps in %s (%.2f steps/s)", why, r->step,
         r->step - r->start_step, fmt_dur(t, el, sizeof el),
         t > 0 ? (double)(r->step - r->start_step) / t : 0.0);
  if (isfinite(r->best))
    printf(", best validation loss %.4f at step %" PRIu64, r->best, r->best_step);
  printf("\n");
  return 0;
}

/* ---- under mpirun (train_mpi.h) ---- */

static bool mpi_together = false; /* a failure that every rank knows of */

/* Stop before training when the ranks differ: first in version and configuration (the
 * device may differ), then (spm given) in vocabulary and data. */
static int mpi_agree_start(run *r, const relcl_spm *spm) {
  uint64_t h[5] = {0};
  const char *names[5];
  int n = 0;
  if (!spm) {
    cJSON *c = cJSON_Parse(r->config_json);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "device");
    char *js = c ? cJSON_PrintUnformatted(c) : NULL;
    cJSON_Delete(c);
    names[n] = "relcl version", h[n++] = train_mpi_hash_str(RELCL_VERSION);
    names[n] = "configuration (options other than --device)", h[n++] = train_mpi_hash_str(js);
    free(js);
  } else {
    names[n] = "vocabulary", h[n++] = r->vocab_hash;
    names[n] = "--train-src's contents", h[n++] = train_mpi_hash_file(r->cfg.train_src);
    names[n] = "--train-tgt's contents", h[n++] = train_mpi_hash_file(r->cfg.train_tgt);
    names[n] = "--valid-src's contents", h[n++] = train_mpi_hash_file(r->cfg.valid_src);
    names[n] = "--valid-tgt's contents", h[n++] = train_mpi_hash_file(r->cfg.valid_tgt);
  }
  if (train_mpi_agree(names, h, n) == 0) return 0;
  mpi_together = true;
  return 1;
}

/* Rank 0's SentencePiece model to the ranks without --spm-model. */
static int mpi_share_vocab(run *r) {
  void *bytes = NULL;
  size_t size = 0;
  if (r->spm) bytes = (void *)relcl_spm_bytes(r->spm, &size);
  if (train_mpi_bcast_bytes(&bytes, &size)) {
    errorf(r, "out of host memory for the vocabulary");
    return 1;
  }
  if (r->spm) return 0;
  relcl_status st = relcl_spm_load_bytes(&r->spm, bytes, size);
  free(bytes);
  if (st != RELCL_OK) {
    errorf(r, "vocabulary from rank 0: %s", relcl_last_error());
    return 1;
  }
  r->vocab_hash = relcl_spm_hash(r->spm);
  return 0;
}

/* Rank 0 alone read the checkpoint: its position, counters and tensors to every rank, so a
 * checkpoint resumes with any number of ranks. */
static int mpi_sync_start(run *r) {
  uint64_t be = 0;
  size_t bi = 0;
  relcl_batcher_tell(r->batcher, &be, &bi);
  uint64_t v[5] = {r->step, be, (uint64_t)bi, r->tokens, (uint64_t)r->stalled};
  void *p = v;
  size_t size = sizeof v;
  if (train_mpi_bcast_bytes(&p, &size)) return errorf(r, "out of host memory"), 1;
  if (train_mpi_rank() != 0) {
    memcpy(v, p, sizeof v);
    free(p);
    r->step = r->last_saved = r->last_valid = v[0];
    r->epoch = v[1];
    r->tokens = v[3];
    r->stalled = (int)v[4];
    if (relcl_batcher_seek(r->batcher, v[1], (size_t)v[2]) != RELCL_OK)
      return errorf(r, "batches: %s", relcl_last_error()), 1;
  }
  relcl_status st = train_mpi_sync_params(r->model);
  if (st != RELCL_OK) {
    device_error(r, st, "receiving rank 0's parameters");
    return 1;
  }
  train_mpi_describe(relcl_context_device_name(r->ctx));
  return 0;
}

/* ---- --translate: greedy translations with a model directory ---- */

/* Translate cfg->translate ("-": standard input) with --model-dir's best.safetensors, else
 * its newest valid checkpoint: the library's decoder with beam 1 (greedy), one output line
 * per input line. Returns an exit status. */
static int translate_file(const train_config *cfg) {
  enum { CHUNK = 256 }; /* lines per call: sorted into batches, printed as they are done */
  tm_files files;
  relcl_context *ctx = NULL;
  relcl_model *model = NULL;
  relcl_text *text = NULL;
  char *out[CHUNK] = {0}, err[4096];
  const char *lines[CHUNK];
  int rc = 1;
  bool open = false;
  if (tm_files_open(&files, cfg->model_dir, "best", NULL, err, sizeof err) != 0 &&
      tm_files_open(&files, cfg->model_dir, "last", NULL, err, sizeof err) != 0) {
    errorf(NULL, "--translate: %s", err);
    return 1;
  }
  open = true;
  const char *path = strcmp(cfg->translate, "-") == 0 ? "/dev/stdin" : cfg->translate;
  if (relcl_text_read(&text, path) != RELCL_OK || relcl_context_create(&ctx, cfg->device) != RELCL_OK) {
    errorf(NULL, "--translate: %s", relcl_last_error());
    goto done;
  }
  if (tm_model_load(&files, ctx, &model, err, sizeof err) != 0) {
    errorf(NULL, "--translate: %s", err);
    goto done;
  }
  tm_opts o = greedy_opts();
  tm_stats stats;
  memset(&stats, 0, sizeof stats);
  const size_t n = relcl_text_count(text);
  for (size_t base = 0; base < n; base += CHUNK) {
    const size_t k = n - base < CHUNK ? n - base : CHUNK;
    for (size_t i = 0; i < k; i++) lines[i] = relcl_text_line(text, base + i, NULL);
    int e = tm_translate(model, files.spm, lines, k, &o, out, NULL, NULL, &stats, err,
                         sizeof err);
    for (size_t i = 0; i < k && e == 0; i++) printf("%s\n", out[i]);
    for (size_t i = 0; i < k; i++) {
      free(out[i]);
      out[i] = NULL;
    }
    if (e) {
      errorf(NULL, "--translate: line %zu and after: %s", base + 1, err);
      goto done;
    }
    fflush(stdout);
  }
  rc = 0;
done:
  relcl_model_destroy(model);
  relcl_context_destroy(ctx);
  relcl_text_destroy(text);
  if (open) tm_files_close(&files);
  return rc;
}

/* ---- main ---- */

static void free_run(run *r) {
  if (r->json) fclose(r->json);
  relcl_model_destroy(r->model);
  relcl_context_destroy(r->ctx);
  relcl_batcher_destroy(r->batcher);
  relcl_batcher_destroy(r->vbatcher);
  relcl_corpus_destroy(r->train);
  relcl_corpus_destroy(r->valid);
  relcl_spm_destroy(r->spm);
  free(r->config_json);
  free(r->train_h.x), free(r->train_h.y), free(r->valid_h.x), free(r->valid_h.y);
  relcl_text_destroy(r->bleu_src);
  train_config_free(&r->cfg);
}

static int run_main(run *r, int argc, char **argv) {
  char err[1024];
  int rc = train_config_parse(&r->cfg, argc, argv, err, sizeof err);
  if (rc != 0) {
    errorf(NULL, "%s", err);
    return rc;
  }
  if (r->cfg.help) {
    train_config_usage(stdout, PROG);
    return 0;
  }
  if (r->cfg.translate) return translate_file(&r->cfg);
  r->config_json = train_config_json(&r->cfg, 0);
  if (!r->config_json) return errorf(NULL, "out of memory"), 1;
  if (r->cfg.dump_config) {
    char *pretty = train_config_json(&r->cfg, 1);
    if (!pretty) return errorf(NULL, "out of memory"), 1;
    fputs(pretty, stdout);
    free(pretty);
    return 0;
  }
  r->tty = isatty(STDOUT_FILENO) && !train_mpi_active(); /* mpirun gives ranks a pty */
  r->best = NAN;

  /* the model directory */
  snprintf(r->dir, sizeof r->dir, "%s", r->cfg.model_dir);
  size_t dl = strlen(r->dir);
  while (dl > 1 && r->dir[dl - 1] == '/') r->dir[--dl] = '\0';
  snprintf(r->spm_path, sizeof r->spm_path, "%s/%s", r->dir, SPM_NAME);
  snprintf(r->plot_path, sizeof r->plot_path, "%s/%s", r->dir, PLOT_NAME);
  int e = mkdir_p(r->dir);
  if (e) return errorf(r, "--model-dir %s: %s", r->dir, strerror(e)), 1;
  size_t stray = 0;
  bool root = train_mpi_rank() == 0; /* only rank 0 reads and writes the directory */
  if (root && relcl_checkpoint_dir_clean(r->dir, &stray) == RELCL_OK && stray > 0)
    printf("%s: removed %zu temporary file%s of an interrupted save\n", r->dir, stray,
           stray == 1 ? "" : "s");
  relcl_checkpoint_list list = {0};
  if (root && relcl_checkpoint_list_dir(r->dir, &list) != RELCL_OK)
    return errorf(r, "--model-dir: %s", relcl_last_error()), 1;
  size_t n_ckpt = list.count;
  char newest[PATH_MAX + 64] = "";
  if (n_ckpt) snprintf(newest, sizeof newest, "%s", list.paths[n_ckpt - 1]);
  relcl_checkpoint_list_free(&list);
  if (n_ckpt && !r->cfg.resume)
    return errorf(r, "%s already holds checkpoints (newest %s): add --resume to continue, or "
                  "choose another --model-dir",
                  r->dir, newest),
           1;

  printf(PROG " %s\n", RELCL_VERSION);
  relcl_checkpoint *ck = NULL;
  if (r->cfg.resume && n_ckpt) {
    char *skipped = NULL;
    relcl_status st = relcl_checkpoint_open_latest(r->dir, &ck, &skipped);
    if (skipped) { /* one line per checkpoint passed over */
      for (char *line = strtok(skipped, "\n"); line; line = strtok(NULL, "\n"))
        printf("skipping a bad checkpoint: %s\n", line);
      free(skipped);
    }
    if (st != RELCL_OK) return errorf(r, "cannot resume: %s", relcl_last_error()), 1;
    if (relcl_checkpoint_meta_get(ck, RELCL_CHECKPOINT_AVERAGE_KEY)) { /* no optimizer state */
      errorf(r, "cannot resume from %s: it is an average of %s checkpoints (relcl-average); "
             "move it out of %s", relcl_checkpoint_path(ck),
             relcl_checkpoint_meta_get(ck, RELCL_CHECKPOINT_AVERAGE_KEY), r->dir);
      relcl_checkpoint_close(ck);
      return 1;
    }
    printf("resuming from %s\n", relcl_checkpoint_path(ck));
  } else if (r->cfg.resume) {
    printf("%s: no checkpoint yet; starting from step 0\n", r->dir);
  }

  rc = 1;
  if (train_mpi_active() && mpi_agree_start(r, NULL)) goto out;
  /* the vocabulary: --spm-model on every rank, else rank 0's (trained or resumed) */
  if ((root || r->cfg.spm_model) && setup_vocab(r, ck != NULL)) goto out;
  if (!r->cfg.spm_model && train_mpi_size() > 1 && mpi_share_vocab(r)) goto out;
  train_config_model(&r->cfg, relcl_spm_vocab_size(r->spm), &r->mcfg);
  /* the configuration check comes before anything is written into the directory */
  if (ck && check_resume_config(r, ck)) goto out;
  if (root && keep_vocab(r)) goto out;
  printf("vocabulary: %s, %d pieces, hash %016" PRIx64 "\n", r->spm_path,
         relcl_spm_vocab_size(r->spm), r->vocab_hash);
  if (load_data(r)) goto out;
  if (train_mpi_active() && mpi_agree_start(r, r->spm)) goto out;
  if (ck && resume_meta(r, ck)) goto out;

  char devbuf[256];
  bool bad_map = false;
  const char *device = train_mpi_device(r->cfg.device, r->cfg.device_map, devbuf, sizeof devbuf,
                                        &bad_map, err, sizeof err);
  if (bad_map) {
    errorf(r, "%s", err);
    rc = 2;
    goto out;
  }
  relcl_status st = relcl_context_create(&r->ctx, device);
  if (st != RELCL_OK) {
    errorf(r, "device: %s", relcl_last_error());
    goto out;
  }
  printf("device: %s\n", relcl_context_device_name(r->ctx));
  printf("CLBlast tuning: %s\n", relcl_context_tuning(r->ctx));
  if ((st = relcl_model_create(r->ctx, &r->mcfg, r->cfg.seed, &r->model)) != RELCL_OK) {
    device_error(r, st, "creating the model");
    goto out;
  }
  r->nparam = 0; /* the parameters, not the arena's floats (which include alignment gaps) */
  for (size_t i = 0; i < relcl_model_tensor_count(r->model); i++)
    r->nparam += relcl_model_tensor(r->model, i).size;
  char desc[256];
  relcl_model_config_describe(&r->mcfg, desc, sizeof desc);
  printf("model: %s; %zu parameters in %zu tensors\n", desc, r->nparam,
         relcl_model_tensor_count(r->model));
  if (ck) {
    const char *dev = relcl_checkpoint_meta_get(ck, "relcl.device");
    if (dev && strcmp(dev, relcl_context_device_name(r->ctx)) != 0)
      printf("note: the checkpoint was trained on %s; continuing on another device is not "
             "bit-for-bit the run that would have gone on there\n",
             dev);
    if (resume_tensors(r, ck)) goto out;
    repair_best(r, ck);
    printf("resumed at step %" PRIu64 " (epoch %" PRIu64 "), %" PRIu64 " target tokens seen\n",
           r->step, r->epoch + 1, r->tokens);
    relcl_checkpoint_close(ck);
    ck = NULL;
  }
  if (train_mpi_active() && mpi_sync_start(r)) goto out;
  if (r->cfg.early_stopping > 0 && r->stalled >= r->cfg.early_stopping) {
    printf("done: early stopping was already reached (validation loss stalled %d times)\n",
           r->stalled);
    rc = 0;
    goto out;
  }
  if (r->cfg.log_json && root) {
    r->json = fopen(r->cfg.log_json, "a");
    if (!r->json) {
      errorf(r, "--log-json %s: %s", r->cfg.log_json, strerror(errno));
      goto out;
    }
  }
  printf("training: lr-scale %g, warmup %" PRId64 ", label smoothing %g, seed %" PRIu64
         "%s%s; checkpoints every %" PRId64 " steps in %s\n",
         r->cfg.lr_scale, r->cfg.warmup, r->cfg.label_smoothing, r->cfg.seed,
         r->valid ? "" : ", no validation set", r->cfg.max_steps || r->cfg.max_time ? "" : ", no step or time limit",
         r->cfg.valid_every, r->dir);
  fflush(stdout);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND; /* a second signal kills as usual */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  rc = train(r);
out:
  relcl_checkpoint_close(ck);
  return rc;
}

int main(int argc, char **argv) {
  if (train_mpi_init(&argc, &argv)) return 1;
  run r;
  memset(&r, 0, sizeof r);
  int rc = run_main(&r, argc, argv);
  free_run(&r);
  /* a failure every rank knows of (disagreeing start, a signal) ends normally; any other
   * ends the whole job */
  train_mpi_finalize(rc, mpi_together || stop_signal);
  return rc;
}
