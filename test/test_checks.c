/* Argument checks stay at the public boundary: a training step, a validation pass and greedy
 * decoding through relcl_model run the ops' unchecked entry points (lib/ops/ops.h), so they make
 * no relcl__check_buf call (each is a clGetMemObjectInfo and a formatted name) except the
 * optimizer's one checked call (4 buffers, 5 with clipping); a public op called directly
 * still checks. Counts are (relcl__check_buf_count() - c0) (this thread), so the test links the
 * static library. */
#include "internal.h"
#include "relcl_data.h"
#include "relcl_layers.h"
#include "relcl_model.h"
#include "testutil.h"

#include <string.h>

enum { B = 2, S = 5, T = 5 };

int main(void) {
  relcl_context *ctx = NULL;
  TU_OK(relcl_context_create(&ctx, NULL));
  relcl_model_config c = *relcl_model_preset("tiny");
  c.vocab = 11;
  c.enc_layers = c.dec_layers = 1;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.max_rel = 2;
  c.max_length = 16;
  relcl_model *m = NULL;
  TU_OK(relcl_model_create(ctx, &c, 3, &m));

  const int32_t src[B * S] = {4, 5, 6, 7, 8, 9, 10, 4, 0, 0};
  const int32_t tgt_in[B * T] = {RELCL_BOS_ID, 8, 7, 6, 5, RELCL_BOS_ID, 4, 10, 9, 0};
  const int32_t tgt_out[B * T] = {8, 7, 6, 5, RELCL_EOS_ID, 4, 10, 9, RELCL_EOS_ID, 0};
  const int32_t src_lens[B] = {5, 3}, tgt_lens[B] = {5, 4};
  relcl_model_batch b = {B, S, T, src, tgt_in, tgt_out, src_lens, tgt_lens};
  relcl_adam_opts opt = {1e-3f, 0.9f, 0.98f, 1e-9f, 1.0f / 9.0f, 0.0f};
  relcl_model_stats st;
  unsigned long c0;

  /* one step first: the kernels and scratch buffers get made */
  TU_OK(relcl_model_zero_grad(m));
  TU_OK(relcl_model_train_batch(m, &b, 1, 1, 0, &st));
  TU_OK(relcl_model_adam_step(m, &opt, 1, NULL));

  c0 = relcl__check_buf_count();
  TU_OK(relcl_model_zero_grad(m));
  TU_OK(relcl_model_train_batch(m, &b, 1, 2, 0, &st));
  unsigned long train = relcl__check_buf_count() - c0;
  tu_check(train == 0, "forward and backward of a training batch: %lu buffer checks", train);
  tu_check(isfinite(st.loss_sum) && st.loss_sum > 0, "and the step computed a loss (%g)",
           st.loss_sum);
  c0 = relcl__check_buf_count();
  TU_OK(relcl_model_adam_step(m, &opt, 2, NULL));
  unsigned long adam = relcl__check_buf_count() - c0;
  tu_check(adam <= 4, "the Adam step: %lu buffer checks (its one checked call)", adam);
  c0 = relcl__check_buf_count();
  TU_OK(relcl_model_eval_batch(m, &b, &st));
  tu_check((relcl__check_buf_count() - c0) == 0, "validation: %lu buffer checks", (relcl__check_buf_count() - c0));
  int32_t out[B * 8], out_lens[B];
  c0 = relcl__check_buf_count();
  TU_OK(relcl_model_greedy(m, &b, 8, out, out_lens));
  tu_check((relcl__check_buf_count() - c0) == 0, "greedy decoding: %lu buffer checks",
           (relcl__check_buf_count() - c0));

  /* the public entry still checks: a buffer too small for the shape is refused */
  cl_mem small = NULL;
  TU_OK(relcl_alloc(ctx, 8, &small));
  c0 = relcl__check_buf_count();
  relcl_status s = relcl_relu_forward(ctx, 16, relcl_buf_at(small, 0), relcl_buf_at(small, 0));
  tu_check(s == RELCL_ERR_BUFFER_TOO_SMALL && (relcl__check_buf_count() - c0) >= 1,
           "public relcl_relu_forward checks its buffers: %s", relcl_last_error());
  clReleaseMemObject(small);

  /* a kernel argument OpenCL refuses is named in the error, not the last one set after it */
  relcl__kernel_entry *k = NULL;
  TU_OK(relcl__kernel(ctx, "util", "fill", &k));
  TU_OK(relcl_alloc(ctx, 8, &small));
  relcl__args a = {k->kernel, 0, CL_SUCCESS};
  cl_uint count = 8;
  double wrong_size = 0; /* argument 1 is a uint */
  float value = 1;
  RELCL__ARG(&a, small);
  RELCL__ARG(&a, wrong_size);
  RELCL__ARG(&a, count);
  RELCL__ARG(&a, value);
  size_t global = 8, local = 8;
  s = relcl__launch(ctx, k, &a, 1, &global, &local);
  tu_check(s != RELCL_OK && strstr(relcl_last_error(), "clSetKernelArg(fill, argument 1)"),
           "a refused kernel argument is named: %s", relcl_last_error());
  clReleaseMemObject(small);

  relcl_model_destroy(m);
  relcl_context_destroy(ctx);
  return tu_finish();
}
