/* Loading a trained model for decoding, and translating lines of text with it: the checkpoint
 * says which model it is ("relcl.config", read by the library's relcl_model_checkpoint_config)
 * and which vocabulary ("relcl.spm_model" beside it, checked by hash). */
#include "translate_model.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void say(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, size, fmt, ap);
  va_end(ap);
}

static int path_join(char *buf, size_t size, const char *dir, const char *name) {
  return snprintf(buf, size, "%s/%s", dir, name) < (int)size ? 0 : 1;
}

/* The directory part of path ("." when none). */
static void dir_of(const char *path, char *buf, size_t size) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) snprintf(buf, size, ".");
  else if (slash == path) snprintf(buf, size, "/");
  else snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

void tm_files_close(tm_files *f) {
  if (f == NULL) return;
  relcl_checkpoint_close(f->ck);
  relcl_spm_destroy(f->spm);
  free(f->skipped);
  f->ck = NULL;
  f->spm = NULL;
  f->skipped = NULL;
}

static int open_dir(tm_files *f, const char *dir, const char *which, char *err, size_t errsize) {
  if (which == NULL || strcmp(which, "last") == 0) {
    relcl_checkpoint_list list;
    memset(&list, 0, sizeof list);
    if (relcl_checkpoint_list_dir(dir, &list) != RELCL_OK) {
      say(err, errsize, "%s", relcl_last_error());
      return 1;
    }
    size_t count = list.count;
    relcl_checkpoint_list_free(&list);
    if (count == 0) {
      say(err, errsize, "%s: no checkpoint (ckpt-*.safetensors) in this model directory", dir);
      return 1;
    }
    if (relcl_checkpoint_open_latest(dir, &f->ck, &f->skipped) != RELCL_OK) {
      say(err, errsize, "%s", relcl_last_error());
      return 1;
    }
    snprintf(f->ck_path, sizeof f->ck_path, "%s", relcl_checkpoint_path(f->ck));
    return 0;
  }
  struct stat st;
  const char *name = strcmp(which, "best") == 0 ? RELCL_CHECKPOINT_BEST_NAME : which;
  if (name == which && stat(which, &st) == 0) snprintf(f->ck_path, sizeof f->ck_path, "%s", which);
  else if (path_join(f->ck_path, sizeof f->ck_path, dir, name)) {
    say(err, errsize, "%s/%s: path too long", dir, name);
    return 1;
  }
  if (relcl_checkpoint_open(f->ck_path, 0, &f->ck) != RELCL_OK) {
    say(err, errsize, "%s", relcl_last_error());
    return 1;
  }
  return 0;
}

int tm_files_open(tm_files *f, const char *model, const char *which, const char *spm, char *err,
                  size_t errsize) {
  memset(f, 0, sizeof *f);
  struct stat st;
  if (stat(model, &st) != 0) {
    say(err, errsize, "%s: %s", model, strerror(errno));
    return 1;
  }
  if (S_ISDIR(st.st_mode)) {
    if (open_dir(f, model, which, err, errsize)) goto fail;
  } else {
    snprintf(f->ck_path, sizeof f->ck_path, "%s", model);
    if (relcl_checkpoint_open(model, 0, &f->ck) != RELCL_OK) {
      say(err, errsize, "%s", relcl_last_error());
      goto fail;
    }
  }
  uint64_t hash = 0;
  if (relcl_model_checkpoint_config(f->ck, &f->cfg, &hash) != RELCL_OK) {
    say(err, errsize, "%s", relcl_last_error());
    goto fail;
  }
  if (spm != NULL) {
    snprintf(f->spm_path, sizeof f->spm_path, "%s", spm);
  } else {
    const char *name = relcl_checkpoint_meta_get(f->ck, "relcl.spm_model");
    char dir[4096];
    dir_of(f->ck_path, dir, sizeof dir);
    if (path_join(f->spm_path, sizeof f->spm_path, dir, name ? name : "spm.model")) {
      say(err, errsize, "%s: path too long", dir);
      goto fail;
    }
  }
  if (relcl_spm_load(&f->spm, f->spm_path) != RELCL_OK) {
    say(err, errsize, "SentencePiece model: %s", relcl_last_error());
    goto fail;
  }
  if (relcl_spm_hash(f->spm) != hash || relcl_spm_vocab_size(f->spm) != f->cfg.vocab) {
    say(err, errsize, "%s is not the vocabulary %s was trained with (SentencePiece hash or size "
        "differs)", f->spm_path, f->ck_path);
    goto fail;
  }
  return 0;
fail:
  tm_files_close(f);
  return 1;
}

int tm_model_load(const tm_files *f, relcl_context *ctx, relcl_model **out, char *err,
                  size_t errsize) {
  if (relcl_model_load_checkpoint(ctx, f->ck, 0, out, NULL) != RELCL_OK) {
    say(err, errsize, "%s", relcl_last_error());
    return 1;
  }
  return 0;
}

/* ---- translating ---- */

static int blank(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\t') return 0;
  return 1;
}

typedef struct item {
  int32_t *ids;
  int len;   /* subwords kept, EOS not counted */
  size_t at; /* line index */
} item;

static int item_cmp(const void *pa, const void *pb) {
  const item *a = pa, *b = pb;
  if (a->len != b->len) return a->len < b->len ? -1 : 1;
  return (a->at > b->at) - (a->at < b->at);
}

/* One output line: the detokenized ids, with any line break turned into a space. */
static char *detok(const relcl_spm *spm, const int32_t *ids, int n, char *err, size_t errsize) {
  char *s = NULL;
  if (relcl_spm_decode(spm, ids, (size_t)n, &s) != RELCL_OK) {
    say(err, errsize, "%s", relcl_last_error());
    return NULL;
  }
  for (char *p = s; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  return s;
}

static char *empty_string(void) { return calloc(1, 1); }

int tm_translate(relcl_model *model, const relcl_spm *spm, const char *const *lines, size_t n,
                 const tm_opts *opts, char **out, double *score, int *counts, tm_stats *stats,
                 char *err, size_t errsize) {
  const int K = opts->beam.n_best, BS = opts->batch_size < 1 ? 1 : opts->batch_size;
  const int L = relcl_model_get_config(model)->max_length; /* positions, EOS included */
  item *items = calloc(n ? n : 1, sizeof *items);
  int32_t *src = NULL, *lens = NULL;
  size_t n_items = 0;
  int rc = 1;
  for (size_t i = 0; i < n * (size_t)K; i++) {
    out[i] = NULL;
    if (score) score[i] = 0.0;
  }
  if (items == NULL) {
    say(err, errsize, "out of host memory");
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    if (counts) counts[i] = 1;
    stats->sentences++;
    int32_t *ids = NULL;
    size_t nid = 0;
    if (!blank(lines[i]) && relcl_spm_encode(spm, lines[i], &ids, &nid) != RELCL_OK) {
      say(err, errsize, "line %zu: %s", i + 1, relcl_last_error());
      goto done;
    }
    if (nid == 0) {
      free(ids);
      stats->empty++;
      continue;
    }
    if (nid > (size_t)L - 1) { /* the longest source the model was built for, with its EOS */
      nid = (size_t)L - 1;
      stats->cropped++;
    }
    stats->src_tokens += nid;
    items[n_items].ids = ids;
    items[n_items].len = (int)nid;
    items[n_items].at = i;
    n_items++;
  }
  qsort(items, n_items, sizeof *items, item_cmp);
  /* room for the longest source there is, not the longest the model allows */
  const size_t longest = n_items ? (size_t)items[n_items - 1].len + 1 : 1;
  src = malloc((size_t)BS * longest * sizeof *src);
  lens = malloc((size_t)BS * sizeof *lens);
  if (src == NULL || lens == NULL) {
    say(err, errsize, "out of host memory");
    goto done;
  }
  /* the batches longest first: the model's and the decoder's buffers then grow at most once
   * a call, where shortest first had them grow (reallocated and zeroed) batch after batch: 30
   * zeroings of the model's buffers (303 MB) for the demo's 1,000 test sentences, 4% of
   * relcl-translate's device time (session 32). The batches and their sentences are the same
   * either way. */
  const size_t n_batches = (n_items + (size_t)BS - 1) / (size_t)BS;
  for (size_t bi = n_batches; bi-- > 0;) {
    const size_t b0 = bi * (size_t)BS;
    const int B = n_items - b0 < (size_t)BS ? (int)(n_items - b0) : BS;
    const int S = items[b0 + (size_t)B - 1].len + 1; /* sorted: the last is the longest */
    memset(src, 0, (size_t)B * S * sizeof *src);
    for (int r = 0; r < B; r++) {
      const item *it = &items[b0 + (size_t)r];
      memcpy(src + (size_t)r * S, it->ids, (size_t)it->len * sizeof *src);
      src[(size_t)r * S + it->len] = RELCL_EOS_ID;
      lens[r] = it->len + 1;
    }
    relcl_model_batch mb = {B, S, 0, src, NULL, NULL, lens, NULL};
    relcl_beam_result *res = NULL;
    if (relcl_model_beam_search(model, &mb, &opts->beam, &res) != RELCL_OK) {
      say(err, errsize, "decoding: %s", relcl_last_error());
      goto done;
    }
    for (int r = 0; r < B; r++) {
      const size_t at = items[b0 + (size_t)r].at;
      const int c = relcl_beam_result_count(res, r);
      if (counts) counts[at] = c;
      for (int k = 0; k < c; k++) {
        relcl_hyp h = relcl_beam_result_hyp(res, r, k);
        char *s = detok(spm, h.ids, h.len, err, errsize);
        if (s == NULL) {
          relcl_beam_result_destroy(res);
          goto done;
        }
        out[at * (size_t)K + (size_t)k] = s;
        if (score) score[at * (size_t)K + (size_t)k] = h.score;
        if (k == 0) stats->out_tokens += (size_t)h.len;
      }
    }
    relcl_beam_result_destroy(res);
  }
  for (size_t i = 0; i < n * (size_t)K; i++)
    if (out[i] == NULL && (out[i] = empty_string()) == NULL) {
      say(err, errsize, "out of host memory");
      goto done;
    }
  rc = 0;
done:
  for (size_t i = 0; i < n_items; i++) free(items[i].ids);
  free(items);
  free(src);
  free(lens);
  return rc;
}
