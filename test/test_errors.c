/* Every bad argument of the public calls returns its error status with a message, and
 * nothing crashes: shapes that disagree, k < 0, d = 0, NULL or too-small buffers, dropout
 * outside [0, 1). The message is the call's own: before each call a successful one
 * (relcl_finish) must leave relcl_last_error() empty, so "returns a message" cannot be
 * satisfied by an older one, and every call that succeeds must leave "" too. */
#include <sys/resource.h>

#include "internal.h"
#include "relcl_layers.h"
#include "relcl_model.h"
#include "testutil.h"

static relcl_context *ctx;
static cl_mem big, small_buf, kl;

static relcl_buf B(cl_mem m) { return relcl_buf_at(m, 0); }

static void expect(relcl_status got, relcl_status want, const char *what) {
  const char *msg = relcl_last_error();
  const int msg_ok = want == RELCL_OK ? msg[0] == '\0' : msg[0] != '\0';
  tu_check(got == want && msg_ok, "%-44s -> %s: %s", what, relcl_status_str(got),
           msg[0] ? msg : "(no message)");
}

/* A successful call first: the message of the checked call can then only be its own. */
static void settle(void) {
  relcl_status st = relcl_finish(ctx);
  if (st != RELCL_OK || relcl_last_error()[0] != '\0')
    tu_check(0, "relcl_finish succeeds and clears the message: %s", relcl_last_error());
}

#define EXPECT(call, want, what) \
  do {                           \
    settle();                    \
    expect((call), (want), (what)); \
  } while (0)

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
  EXPECT(fwd(&good, big, big, big, big, NULL), RELCL_OK, "a valid call succeeds");

  d = good, d.batch = 0;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "batch = 0");
  d = good, d.heads = -1;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "heads < 0");
  d = good, d.head_dim = 0;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "d = 0");
  d = good, d.nq = 0;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "nq = 0");
  d = good, d.nk = 0;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "nk = 0");
  d = good, d.max_rel = -1;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "k < 0");
  d = good, d.q_pos0 = -2;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "q_pos0 < 0");
  d = good, d.dropout = 1.0f;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "dropout = 1");
  d = good, d.dropout = -0.1f;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "dropout < 0");
  d = good, d.dropout = NAN;
  EXPECT(fwd(&d, big, big, big, NULL, NULL), RELCL_ERR_INVALID_ARG, "dropout NaN");
  EXPECT(relcl_attn_forward(ctx, NULL, B(big), B(big), B(big), B(big), B(big), RELCL_BUF_NONE,
                            B(big), RELCL_BUF_NONE),
         RELCL_ERR_INVALID_ARG, "desc NULL");
  EXPECT(relcl_attn_forward(NULL, &good, B(big), B(big), B(big), B(big), B(big), RELCL_BUF_NONE,
                            B(big), RELCL_BUF_NONE),
         RELCL_ERR_INVALID_ARG, "ctx NULL");
  EXPECT(relcl_attn_forward(ctx, &good, RELCL_BUF_NONE, B(big), B(big), B(big), B(big),
                            RELCL_BUF_NONE, B(big), RELCL_BUF_NONE),
         RELCL_ERR_INVALID_ARG, "Q NULL");
  EXPECT(fwd(&good, small_buf, big, big, NULL, NULL), RELCL_ERR_BUFFER_TOO_SMALL, "Q too small");
  EXPECT(fwd(&good, big, small_buf, big, NULL, NULL), RELCL_ERR_BUFFER_TOO_SMALL,
         "wK too small (shapes disagree)");
  d = good, d.per_head = 1;
  EXPECT(fwd(&d, big, small_buf, big, NULL, NULL), RELCL_ERR_BUFFER_TOO_SMALL,
         "per-head wK too small");
  EXPECT(fwd(&good, big, big, small_buf, NULL, NULL), RELCL_ERR_BUFFER_TOO_SMALL, "Z too small");
  EXPECT(fwd(&good, big, big, big, small_buf, NULL), RELCL_ERR_BUFFER_TOO_SMALL,
         "probs too small");
  EXPECT(fwd(&good, big, big, big, NULL, kl), RELCL_ERR_BUFFER_TOO_SMALL,
         "key_len shorter than batch");
  EXPECT(relcl_attn_forward(ctx, &good, relcl_buf_at(big, (1 << 16) - 10), B(big), B(big),
                            B(big), B(big), RELCL_BUF_NONE, B(big), RELCL_BUF_NONE),
         RELCL_ERR_BUFFER_TOO_SMALL, "offset pushes Q past the buffer end");
  d = good, d.relative = 0;
  EXPECT(fwd(&d, big, small_buf, big, NULL, NULL), RELCL_OK, "wK unused without relative");

  EXPECT(bwd(&good, big, big, big), RELCL_OK, "a valid backward succeeds");
  EXPECT(bwd(&good, small_buf, big, big), RELCL_ERR_BUFFER_TOO_SMALL, "backward probs too small");
  EXPECT(bwd(&good, big, small_buf, big), RELCL_ERR_BUFFER_TOO_SMALL, "backward dQ too small");
  EXPECT(bwd(&good, big, big, small_buf), RELCL_ERR_BUFFER_TOO_SMALL, "backward dwK too small");
  d = good, d.max_rel = -3;
  EXPECT(bwd(&d, big, big, big), RELCL_ERR_INVALID_ARG, "backward k < 0");

  /* the saved state: 2 x 2 heads x 8 rows, alpha' (8 keys) and 2 min(7, 3) + 1 label sums */
  settle();
  tu_check(relcl_attn_saved_size(&good) == 32 * 8 + 32 * 7, "saved state of %zu floats (480)",
           relcl_attn_saved_size(&good));
  d = good, d.keys_only = 1;
  tu_check(relcl_attn_saved_size(&d) == 32 * 8, "keys_only: no label sums saved (%zu)",
           relcl_attn_saved_size(&d));
  d = good, d.nq = 0;
  expect(relcl_attn_saved_size(&d) == 0 ? RELCL_ERR_INVALID_ARG : RELCL_OK,
         RELCL_ERR_INVALID_ARG, "saved size of nq = 0: 0, with the message");
  cl_mem sv = NULL;
  TU_OK(relcl_alloc(ctx, 480, &sv));
#define FWD_SAVED(probs, saved)                                                             \
  relcl_attn_forward_saved(ctx, &good, B(big), B(big), B(big), B(big), B(big), RELCL_BUF_NONE, \
                           B(big), probs, saved)
#define BWD_SAVED(saved)                                                                    \
  relcl_attn_backward_saved(ctx, &good, B(big), B(big), B(big), B(big), B(big),            \
                            RELCL_BUF_NONE, B(big), saved, B(big), B(big), B(big), B(big),   \
                            B(big), B(big))
  EXPECT(FWD_SAVED(B(big), B(sv)), RELCL_OK, "a valid forward_saved succeeds");
  EXPECT(BWD_SAVED(B(sv)), RELCL_OK, "a valid backward_saved succeeds");
  EXPECT(FWD_SAVED(B(big), RELCL_BUF_NONE), RELCL_ERR_INVALID_ARG, "forward_saved without saved");
  EXPECT(FWD_SAVED(RELCL_BUF_NONE, B(sv)), RELCL_ERR_INVALID_ARG, "forward_saved without probs");
  EXPECT(FWD_SAVED(B(big), relcl_buf_at(sv, 1)), RELCL_ERR_BUFFER_TOO_SMALL,
         "forward_saved: saved one float short");
  EXPECT(BWD_SAVED(relcl_buf_at(sv, 1)), RELCL_ERR_BUFFER_TOO_SMALL,
         "backward_saved: saved one float short");
  EXPECT(BWD_SAVED(RELCL_BUF_NONE), RELCL_ERR_INVALID_ARG, "backward_saved without saved");
#undef FWD_SAVED
#undef BWD_SAVED
  clReleaseMemObject(sv);

  float host[16] = {0};
  EXPECT(relcl_write(ctx, B(small_buf), host, 16), RELCL_ERR_BUFFER_TOO_SMALL,
         "write past the end");
  EXPECT(relcl_read(ctx, B(small_buf), host, 16), RELCL_ERR_BUFFER_TOO_SMALL, "read past the end");
  EXPECT(relcl_fill(ctx, B(small_buf), 1.0f, 9), RELCL_ERR_BUFFER_TOO_SMALL, "fill past the end");
  EXPECT(relcl_fill(ctx, RELCL_BUF_NONE, 1.0f, 1), RELCL_ERR_INVALID_ARG, "fill NULL");
  EXPECT(relcl_posenc_add(ctx, B(big), 2, 8, 0, 0), RELCL_ERR_INVALID_ARG, "posenc d_model = 0");
  EXPECT(relcl_posenc_add(ctx, B(small_buf), 2, 8, 16, 0), RELCL_ERR_BUFFER_TOO_SMALL,
         "posenc x too small");
  cl_mem m = NULL;
  EXPECT(relcl_alloc(ctx, 0, &m), RELCL_ERR_INVALID_ARG, "alloc of zero elements");
  EXPECT(relcl_alloc(ctx, (size_t)1 << 60, &m), RELCL_ERR_OUT_OF_MEMORY, "alloc beyond the device");
  EXPECT(relcl_context_create(NULL, NULL), RELCL_ERR_INVALID_ARG, "context_create(NULL)");
  /* a failure, then destroy(NULL): a no-op that leaves the failure's message alone */
  EXPECT(relcl_fill(ctx, RELCL_BUF_NONE, 1.0f, 1), RELCL_ERR_INVALID_ARG, "fill NULL again");
  relcl_context_destroy(NULL);
  relcl_model_destroy(NULL);
  tu_check(strstr(relcl_last_error(), "relcl_fill") != NULL,
           "destroy(NULL) is a no-op and keeps the last message: %s", relcl_last_error());

  /* A failure then a success of the same call, for each family of calls: the success leaves
   * "" (before the fix the old message stayed). */
  EXPECT(relcl_relu_forward(ctx, 9, B(small_buf), B(small_buf)), RELCL_ERR_BUFFER_TOO_SMALL,
         "relu past the end");
  expect(relcl_relu_forward(ctx, 8, B(small_buf), B(small_buf)), RELCL_OK,
         "relu after a failed relu: message cleared");
  relcl_model_config mc = *relcl_model_preset("tiny");
  relcl_model *model = NULL;
  EXPECT(relcl_model_create(ctx, &mc, 1, &model), RELCL_ERR_INVALID_ARG, "model without vocab");
  mc.vocab = 16, mc.d_model = 8, mc.heads = 2, mc.d_ff = 8, mc.enc_layers = mc.dec_layers = 1;
  expect(relcl_model_create(ctx, &mc, 1, &model), RELCL_OK,
         "model_create after a failed one: message cleared");
  relcl_model_destroy(model);
  /* A model whose parameter arena is over the device's largest allocation is refused
   * before its initial values are written on the host (they were, once: 15 GB of host
   * memory and the kernel's OOM killer, for relcl-train's out-of-memory check). */
  /* 1+1 layers of d_model 1024 hold ~12.6M + 4096 d_ff floats; a device that allocates
   * 15.6 GB at once gets 2+2 layers at the largest d_ff instead: over the 2^32 parameters the
   * library holds, refused as an invalid argument before any allocation */
  const double arena = 1.5 * (double)ctx->max_alloc / 4; /* floats */
  const int fits_limit = arena < 3.9e9;
  mc.d_model = 1024, mc.heads = 16, mc.vocab = 16;
  mc.enc_layers = mc.dec_layers = fits_limit ? 1 : 2;
  mc.d_ff = fits_limit ? (int)fmax(1.0, (arena - 12.0 * 1024 * 1024) / (4.0 * 1024)) : 976562;
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  relcl_status st = relcl_model_create(ctx, &mc, 1, &model);
  getrusage(RUSAGE_SELF, &r1);
  const long grew_mb = (r1.ru_maxrss - r0.ru_maxrss) / 1024;
  tu_check(st == (fits_limit ? RELCL_ERR_OUT_OF_MEMORY : RELCL_ERR_INVALID_ARG) &&
               model == NULL && grew_mb < 256,
           "a model over the device's largest allocation (d_ff %d): %s, host memory grew %ld MB: "
           "%s",
           mc.d_ff, relcl_status_str(st), grew_mb, relcl_last_error());
  EXPECT(relcl_alloc(ctx, 0, &m), RELCL_ERR_INVALID_ARG, "alloc of zero elements again");
  expect(relcl_alloc(ctx, 4, &m), RELCL_OK, "alloc after a failed alloc: message cleared");
  if (m) clReleaseMemObject(m);
  tu_check(strcmp(relcl_status_str(RELCL_ERR_BUILD), "OpenCL kernel build failed") == 0,
           "status strings come from the one list");

  clReleaseMemObject(big);
  clReleaseMemObject(small_buf);
  clReleaseMemObject(kl);
  relcl_context_destroy(ctx);
  return tu_finish();
}
