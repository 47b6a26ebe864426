/* Every bad argument of the public calls returns its error status with a message, and
 * nothing crashes: shapes that disagree, k < 0, d = 0, NULL or too-small buffers, dropout
 * outside [0, 1). */
#include "testutil.h"

static relcl_context *ctx;
static cl_mem big, small_buf, kl;

static relcl_buf B(cl_mem m) { return relcl_buf_at(m, 0); }

static void expect(relcl_status got, relcl_status want, const char *what) {
  const char *msg = relcl_last_error();
  tu_check(got == want && (want == RELCL_OK || msg[0] != '\0'), "%-44s -> %s: %s", what, relcl_status_str(got), msg);
}

static relcl_status fwd(const relcl_attn_desc *d, cl_mem q, cl_mem wk, cl_mem z, cl_mem probs,
                        cl_mem key_len) {
  return relcl_attn_forward(ctx, d, B(q), B(big), B(big), B(wk), B(big),
                            key_len ? B(key_len) : RELCL_BUF_NONE, B(z),
                            probs ? B(probs) : RELCL_BUF_NONE);
}

static relcl_status bwd(const relcl_attn_desc *d, cl_mem probs, cl_mem dq, cl_mem dwk) {
  return relcl_attn_backward(ctx, d, B(big), B(big), B(big), B(big), B(big), RELCL_BUF_NONE,
                             B(probs), B(big), B(dq), B(big), B(big), B(dwk), B(big));
}

int main(void) {
  ctx = tu_context();
  TU_OK(relcl_alloc(ctx, 1 << 16, &big));
  TU_OK(relcl_alloc(ctx, 8, &small_buf));
  TU_OK(relcl_alloc(ctx, 1, &kl)); /* room for one sequence length only */

  relcl_attn_desc good = relcl_attn_desc_self(2, 2, 8, 8, 3), d;
  expect(fwd(&good, big, big, big, big, NULL), RELCL_OK, "a valid call succeeds");

  d = good, d.batch = 0;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "batch = 0");
  d = good, d.heads = -1;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "heads < 0");
  d = good, d.head_dim = 0;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "d = 0");
  d = good, d.nq = 0;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "nq = 0");
  d = good, d.nk = 0;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "nk = 0");
  d = good, d.max_rel = -1;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "k < 0");
  d = good, d.q_pos0 = -2;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "q_pos0 < 0");
  d = good, d.dropout = 1.0f;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "dropout = 1");
  d = good, d.dropout = -0.1f;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "dropout < 0");
  d = good, d.dropout = NAN;
  expect(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "dropout NaN");
  expect(relcl_attn_forward(ctx, NULL, B(big), B(big), B(big), B(big), B(big), RELCL_BUF_NONE,
                            B(big), RELCL_BUF_NONE),
         RELCL_ERR_INVALID_ARG, "desc NULL");
  expect(relcl_attn_forward(NULL, &good, B(big), B(big), B(big), B(big), B(big), RELCL_BUF_NONE,
                            B(big), RELCL_BUF_NONE),
         RELCL_ERR_INVALID_ARG, "ctx NULL");
  expect(relcl_attn_forward(ctx, &good, RELCL_BUF_NONE, B(big), B(big), B(big), B(big),
                            RELCL_BUF_NONE, B(big), RELCL_BUF_NONE),
         RELCL_ERR_INVALID_ARG, "Q NULL");
  expect(fwd(&good, small_buf, big, big, NULL, NULL), RELCL_ERR_BUFFER_TOO_SMALL, "Q too small");
  expect(fwd(&good, big, small_buf, big, NULL, NULL), RELCL_ERR_BUFFER_TOO_SMALL,
         "wK too small (shapes disagree)");
  d = good, d.per_head = 1;
  expect(fwd(&d, big, small_buf, big, NULL, NULL), RELCL_ERR_BUFFER_TOO_SMALL,
         "per-head wK too small");
  expect(fwd(&good, big, big, small_buf, NULL, NULL), RELCL_ERR_BUFFER_TOO_SMALL, "Z too small");
  expect(fwd(&good, big, big, big, small_buf, NULL), RELCL_ERR_BUFFER_TOO_SMALL,
         "probs too small");
  expect(fwd(&good, big, big, big, NULL, kl), RELCL_ERR_BUFFER_TOO_SMALL,
         "key_len shorter than batch");
  expect(relcl_attn_forward(ctx, &good, relcl_buf_at(big, (1 << 16) - 10), B(big), B(big),
                            B(big), B(big), RELCL_BUF_NONE, B(big), RELCL_BUF_NONE),
         RELCL_ERR_BUFFER_TOO_SMALL, "offset pushes Q past the buffer end");
  d = good, d.relative = 0;
  expect(fwd(&d, big, small_buf, big, NULL, NULL), RELCL_OK, "wK unused without relative");

  expect(bwd(&good, big, big, big), RELCL_OK, "a valid backward succeeds");
  expect(bwd(&good, small_buf, big, big), RELCL_ERR_BUFFER_TOO_SMALL, "backward probs too small");
  expect(bwd(&good, big, small_buf, big), RELCL_ERR_BUFFER_TOO_SMALL, "backward dQ too small");
  expect(bwd(&good, big, big, small_buf), RELCL_ERR_BUFFER_TOO_SMALL, "backward dwK too small");
  d = good, d.max_rel = -3;
  expect(bwd(&d, big, big, big), RELCL_ERR_INVALID_ARG, "backward k < 0");

  float host[16] = {0};
  expect(relcl_write(ctx, B(small_buf), host, 16), RELCL_ERR_BUFFER_TOO_SMALL,
         "write past the end");
  expect(relcl_read(ctx, B(small_buf), host, 16), RELCL_ERR_BUFFER_TOO_SMALL, "read past the end");
  expect(relcl_fill(ctx, B(small_buf), 1.0f, 9), RELCL_ERR_BUFFER_TOO_SMALL, "fill past the end");
  expect(relcl_fill(ctx, RELCL_BUF_NONE, 1.0f, 1), RELCL_ERR_INVALID_ARG, "fill NULL");
  expect(relcl_posenc_add(ctx, B(big), 2, 8, 0, 0), RELCL_ERR_INVALID_ARG, "posenc d_model = 0");
  expect(relcl_posenc_add(ctx, B(small_buf), 2, 8, 16, 0), RELCL_ERR_BUFFER_TOO_SMALL,
         "posenc x too small");
  cl_mem m = NULL;
  expect(relcl_alloc(ctx, 0, &m), RELCL_ERR_INVALID_ARG, "alloc of zero elements");
  expect(relcl_alloc(ctx, (size_t)1 << 60, &m), RELCL_ERR_OUT_OF_MEMORY, "alloc beyond the device");
  expect(relcl_context_create(NULL, NULL), RELCL_ERR_INVALID_ARG, "context_create(NULL)");
  relcl_context_destroy(NULL); /* a no-op */
  tu_check(1, "relcl_context_destroy(NULL) is a no-op");
  tu_check(strcmp(relcl_status_str(RELCL_ERR_BUILD), "OpenCL kernel build failed") == 0,
           "status strings come from the one list");

  clReleaseMemObject(big);
  clReleaseMemObject(small_buf);
  clReleaseMemObject(kl);
  relcl_context_destroy(ctx);
  return tu_finish();
}
