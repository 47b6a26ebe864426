/* translate.c: load a model trained by relcl-train and translate one sentence with it.
 *   translate CHECKPOINT SPM_MODEL "a sentence"
 * e.g. translate model/best.safetensors model/spm.model "Hello world."
 * Beam search (beam 4) on the default OpenCL device, or the one RELCL_DEVICE names.
 * Build: cc translate.c $(pkg-config --cflags --libs relcl) */
#include <relcl.h>
#include <relcl_data.h>
#include <relcl_model.h>
#include <stdio.h>
#include <stdlib.h>

/* Every relcl call returns a status; on failure, relcl_last_error() says why. */
#define CHECK(call)                                                                            \
  if ((st = (call)) != RELCL_OK) goto done

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s CHECKPOINT SPM_MODEL SENTENCE\n", argv[0]);
    return 2;
  }
  relcl_context *ctx = NULL;
  relcl_model *model = NULL;
  relcl_spm *spm = NULL;
  relcl_beam_result *res = NULL;
  int32_t *ids = NULL;
  char *text = NULL;
  size_t n = 0;
  uint64_t vocab_hash = 0;
  relcl_status st = RELCL_OK;
  int rc = 1;

  CHECK(relcl_context_create(&ctx, NULL));
  /* the checkpoint holds the configuration: the model is built as it was trained */
  CHECK(relcl_model_load(ctx, argv[1], 0, &model, &vocab_hash));
  CHECK(relcl_spm_load(&spm, argv[2]));
  if (relcl_spm_hash(spm) != vocab_hash) {
    fprintf(stderr, "translate: %s is not the vocabulary %s was trained with\n", argv[2],
            argv[1]);
    goto done;
  }

  /* the source: subword ids, then EOS (cut to the longest the model was built for) */
  CHECK(relcl_spm_encode(spm, argv[3], &ids, &n));
  int max_src = relcl_model_get_config(model)->max_length - 1;
  int len = (int)n < max_src ? (int)n : max_src;
  int32_t *src = realloc(ids, ((size_t)len + 1) * sizeof *src);
  if (src == NULL) goto done;
  ids = src;
  src[len] = RELCL_EOS_ID;
  int32_t src_len = len + 1;
  relcl_model_batch batch = {1, src_len, 0, src, NULL, NULL, &src_len, NULL};

  relcl_beam_opts opts = relcl_beam_opts_default();
  CHECK(relcl_model_beam_search(model, &batch, &opts, &res));
  relcl_hyp best = relcl_beam_result_hyp(res, 0, 0);
  CHECK(relcl_spm_decode(spm, best.ids, (size_t)best.len, &text));
  printf("%s\n", text);
  rc = 0;
done:
  if (st != RELCL_OK)
    fprintf(stderr, "translate: %s: %s\n", relcl_status_str(st), relcl_last_error());
  free(text);
  free(ids);
  relcl_beam_result_destroy(res);
  relcl_spm_destroy(spm);
  relcl_model_destroy(model); /* before the context it lives on */
  relcl_context_destroy(ctx);
  return rc;
}
