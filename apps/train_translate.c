/* Greedy decoding for relcl-train --translate: the checkpoint says which model it is
 * ("relcl.config") and which vocabulary ("relcl.spm_model" beside it, checked by hash). */
#include "train_translate.h"

#include "relcl.h"
#include "relcl_checkpoint.h"
#include "relcl_data.h"
#include "relcl_model.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK = 16 };

static int fail(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "relcl-train: --translate: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  return 1;
}

/* best.safetensors when it is valid, else the newest valid ckpt-*. */
static relcl_status open_for_decoding(const char *dir, relcl_checkpoint **ck) {
  char best[PATH_MAX + 32];
  snprintf(best, sizeof best, "%s/%s", dir, RELCL_CHECKPOINT_BEST_NAME);
  if (relcl_checkpoint_open(best, 0, ck) == RELCL_OK) return RELCL_OK;
  char *skipped = NULL;
  relcl_status st = relcl_checkpoint_open_latest(dir, ck, &skipped);
  free(skipped);
  return st;
}

int train_translate(const train_config *cfg) {
  relcl_checkpoint *ck = NULL;
  relcl_spm *spm = NULL;
  relcl_context *ctx = NULL;
  relcl_model *model = NULL;
  relcl_text *text = NULL;
  float *params = NULL;
  int32_t *src = NULL, *lens = NULL, *out = NULL, *out_lens = NULL;
  int32_t *ids[CHUNK] = {0};
  size_t nids[CHUNK] = {0};
  int rc = 1;
  char err[512];
  relcl_status st;
  if ((st = open_for_decoding(cfg->model_dir, &ck)) != RELCL_OK) {
    rc = fail("%s%s", relcl_last_error(), "");
    goto out;
  }
  relcl_model_config mc;
  uint64_t hash = 0;
  const char *mj = relcl_checkpoint_meta_get(ck, RELCL_CHECKPOINT_CONFIG_KEY);
  if (!mj || train_model_from_json(mj, &mc, &hash, err, sizeof err) != 0) {
    rc = fail("%s: not a relcl-train checkpoint: %s", relcl_checkpoint_path(ck),
              mj ? err : "no relcl.config");
    goto out;
  }
  const char *sp = relcl_checkpoint_meta_get(ck, "relcl.spm_model");
  char spm_path[PATH_MAX + 64];
  snprintf(spm_path, sizeof spm_path, "%s/%s", cfg->model_dir, sp ? sp : "spm.model");
  if ((st = relcl_spm_load(&spm, spm_path)) != RELCL_OK) {
    rc = fail("%s%s", relcl_last_error(), "");
    goto out;
  }
  if (relcl_spm_hash(spm) != hash) {
    rc = fail("%s is not the vocabulary %s was trained with", spm_path, relcl_checkpoint_path(ck));
    goto out;
  }
  if ((st = relcl_context_create(&ctx, cfg->device)) != RELCL_OK ||
      (st = relcl_model_create(ctx, &mc, 1, &model)) != RELCL_OK) {
    rc = fail("%s%s", relcl_last_error(), "");
    goto out;
  }
  params = malloc(relcl_model_param_count(model) * sizeof *params);
  if (!params) {
    rc = fail("out of host memory%s%s", "", "");
    goto out;
  }
  for (size_t i = 0; i < relcl_model_tensor_count(model); i++) {
    relcl_tensor_info t = relcl_model_tensor(model, i);
    if (relcl_checkpoint_read(ck, t.name, t.ndim, t.shape, params + t.offset) != RELCL_OK) {
      rc = fail("%s%s", relcl_last_error(), "");
      goto out;
    }
  }
  if ((st = relcl_model_arena_write(model, RELCL_ARENA_PARAMS, params)) != RELCL_OK) {
    rc = fail("%s%s", relcl_last_error(), "");
    goto out;
  }
  const char *path = strcmp(cfg->translate, "-") == 0 ? "/dev/stdin" : cfg->translate;
  if ((st = relcl_text_read(&text, path)) != RELCL_OK) {
    rc = fail("%s%s", relcl_last_error(), "");
    goto out;
  }
  const int L = mc.max_length; /* positions, EOS included */
  src = malloc((size_t)CHUNK * (size_t)L * sizeof *src);
  lens = malloc(CHUNK * sizeof *lens);
  out = malloc((size_t)CHUNK * (size_t)L * sizeof *out);
  out_lens = malloc(CHUNK * sizeof *out_lens);
  if (!src || !lens || !out || !out_lens) {
    rc = fail("out of host memory%s%s", "", "");
    goto out;
  }
  size_t n = relcl_text_count(text);
  for (size_t base = 0; base < n; base += CHUNK) {
    int B = 0, S = 1;
    int row_of[CHUNK];
    for (size_t i = base; i < n && i < base + CHUNK; i++) {
      int k = (int)(i - base);
      free(ids[k]);
      ids[k] = NULL;
      nids[k] = 0;
      row_of[k] = -1;
      if (relcl_text_blank(text, i)) continue;
      if ((st = relcl_spm_encode(spm, relcl_text_line(text, i, NULL), &ids[k], &nids[k])) !=
          RELCL_OK) {
        rc = fail("%s%s", relcl_last_error(), "");
        goto out;
      }
      if (nids[k] > (size_t)L - 1) nids[k] = (size_t)L - 1; /* the model's longest input */
      row_of[k] = B++;
      if ((int)nids[k] + 1 > S) S = (int)nids[k] + 1;
    }
    int max_out = 2 * S + 10 < L - 1 ? 2 * S + 10 : L - 1;
    if (B > 0) {
      memset(src, 0, (size_t)B * (size_t)S * sizeof *src);
      for (size_t i = base; i < n && i < base + CHUNK; i++) {
        int k = (int)(i - base), r = row_of[k];
        if (r < 0) continue;
        memcpy(src + (size_t)r * S, ids[k], nids[k] * sizeof *src);
        src[(size_t)r * S + nids[k]] = RELCL_EOS_ID;
        lens[r] = (int32_t)nids[k] + 1;
      }
      relcl_model_batch mb = {B, S, 0, src, NULL, NULL, lens, NULL};
      if ((st = relcl_model_greedy(model, &mb, max_out, out, out_lens)) != RELCL_OK) {
        rc = fail("%s%s", relcl_last_error(), "");
        goto out;
      }
    }
    for (size_t i = base; i < n && i < base + CHUNK; i++) {
      int r = row_of[i - base];
      char *s = NULL;
      if (r >= 0 && (st = relcl_spm_decode(spm, out + (size_t)r * max_out, (size_t)out_lens[r],
                                           &s)) != RELCL_OK) {
        rc = fail("%s%s", relcl_last_error(), "");
        goto out;
      }
      printf("%s\n", s ? s : "");
      free(s);
    }
    fflush(stdout);
  }
  rc = 0;
out:
  for (int k = 0; k < CHUNK; k++) free(ids[k]);
  free(src), free(lens), free(out), free(out_lens), free(params);
  relcl_text_destroy(text);
  relcl_model_destroy(model);
  relcl_context_destroy(ctx);
  relcl_spm_destroy(spm);
  relcl_checkpoint_close(ck);
  return rc;
}
