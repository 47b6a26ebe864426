/* Every attention op against the plain-C reference (test/ref), over a table of cases:
 * forward (Z and the weights), backward (dQ, dK, dV, dwK, dwV), bitwise repeatability,
 * and central finite differences of the device's own forward.
 *
 * Tolerances. The reference accumulates in double; the device in float32 (unit roundoff
 * 6e-8). Z and the weights are sums of at most nk*d ~ 10^4 products of O(1) values plus
 * exp() with <= 4 ulp error (OpenCL 1.2 spec), so their error relative to the tensor's
 * largest entry stays below ~1e-6 (sqrt(n) growth of rounding); we allow 2e-5. The gradients pass through one more
 * GEMM and the softmax backward's difference (dalpha - sum alpha dalpha), which can cancel:
 * 1e-4. (Observed: below 2e-6 on PoCL.) A wrong label, mask or scale changes entries by O(0.1)
 * relative, far above both. Errors are relative to max(largest entry, 1e-2): an all-zero
 * reference (dwK with k = 0) is compared on the scale of the other gradients, which are O(1). */
#include "ops.h" /* relcl__attn_forward/backward with merged outputs */
#include "runtime.h" /* relcl__cpu_width */
#include "ref/ref.h"
#include "testutil.h"

typedef struct attn_case {
  const char *name;
  int B, H, nq, nk, d, k;
  int rel, per_head, keys_only, causal, q_pos0;
  int padding; /* 0: none; 1: key_len[b] = nk - b (floored at 1); 2: also one empty sequence */
  float dropout;
  float q_scale; /* Q's entries times this: 2 spreads the logits over a few units */
} attn_case;

static const attn_case cases[] = {
    /* name               B  H  nq  nk  d   k  rel ph ko cau q0 pad drop qs */
    {"n=1", 2, 2, 1, 1, 4, 3, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"n<k", 2, 2, 3, 3, 8, 5, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"n=k", 1, 3, 4, 4, 8, 4, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"n>k", 2, 2, 13, 13, 8, 2, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"k=0", 2, 2, 7, 7, 8, 0, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"k=1", 1, 2, 9, 9, 6, 1, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"causal n>k", 2, 2, 11, 11, 8, 3, 1, 0, 0, 1, 0, 0, 0.0f, 2.0f},
    {"causal n<k", 2, 2, 4, 4, 8, 6, 1, 0, 0, 1, 0, 0, 0.0f, 2.0f},
    {"padding", 3, 2, 9, 9, 8, 3, 1, 0, 0, 0, 0, 1, 0.0f, 2.0f},
    {"padding+empty", 3, 2, 6, 6, 8, 2, 1, 0, 0, 0, 0, 2, 0.0f, 2.0f},
    {"causal+padding", 3, 2, 10, 10, 8, 4, 1, 0, 0, 1, 0, 1, 0.0f, 2.0f},
    {"cross nq<nk", 2, 2, 5, 12, 8, 0, 0, 0, 0, 0, 0, 1, 0.0f, 2.0f},
    {"cross nq>nk", 2, 2, 12, 5, 8, 0, 0, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"cross relative q0", 2, 2, 3, 9, 8, 3, 1, 0, 0, 0, 4, 0, 0.0f, 2.0f},
    {"incremental step", 2, 2, 1, 7, 8, 3, 1, 0, 0, 1, 6, 0, 0.0f, 2.0f},
    {"incremental k>t", 2, 2, 1, 3, 8, 5, 1, 0, 0, 1, 2, 0, 0.0f, 2.0f},
    {"per-head", 2, 3, 8, 8, 8, 2, 1, 1, 0, 0, 0, 0, 0.0f, 2.0f},
    {"per-head causal pad", 3, 2, 7, 7, 8, 3, 1, 1, 0, 1, 0, 1, 0.0f, 2.0f},
    {"keys-only", 2, 2, 8, 8, 8, 3, 1, 0, 1, 0, 0, 0, 0.0f, 2.0f},
    {"keys-only per-head", 2, 2, 6, 6, 8, 2, 1, 1, 1, 1, 0, 0, 0.0f, 2.0f},
    {"relative off", 2, 2, 8, 8, 8, 2, 0, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"d=5", 2, 2, 9, 9, 5, 3, 1, 0, 0, 0, 0, 1, 0.0f, 2.0f},
    {"d=7 per-head", 1, 2, 6, 6, 7, 2, 1, 1, 0, 1, 0, 0, 0.0f, 2.0f},
    {"d=1", 1, 1, 5, 5, 1, 2, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    /* at least 8 labels (2k + 1, or k + 1 causal) and rows between two rows: the fused
     * kernels' eight-key label reads (common.cl relcl_labels8), small enough for Oclgrind */
    {"labels8 both edges", 1, 2, 9, 9, 8, 4, 1, 0, 0, 0, 0, 1, 0.1f, 2.0f},
    {"labels8 causal", 1, 2, 12, 12, 8, 7, 1, 0, 0, 1, 0, 0, 0.1f, 2.0f},
    /* the shared table's label kernels (attention.cl labels_shared, add_labels_shared) in
     * the item shape: rows not a multiple of their 4, d of whole vectors of 8 and with a
     * tail of 4, labels R = 33 (five vectors of 8, the last partial) */
    {"d=64 k=16", 3, 2, 11, 11, 64, 16, 1, 0, 0, 0, 0, 1, 0.0f, 2.0f},
    {"d=12 causal", 1, 3, 13, 13, 12, 5, 1, 0, 0, 1, 0, 0, 0.0f, 2.0f},
    {"dropout", 2, 2, 10, 10, 8, 3, 1, 0, 0, 0, 0, 1, 0.3f, 2.0f},
    {"dropout causal per-head", 2, 2, 9, 9, 8, 2, 1, 1, 0, 1, 0, 0, 0.1f, 2.0f},
    {"dropout keys-only", 2, 2, 7, 7, 8, 3, 1, 0, 1, 0, 0, 0, 0.5f, 2.0f},
    /* rows of 45 and 44 keys: a row's Philox calls start at the row (ceil(nk/4) a row) and
     * the item shape takes them 32 keys at a time */
    {"dropout long padded", 2, 2, 6, 45, 8, 3, 1, 0, 0, 0, 0, 1, 0.2f, 2.0f},
    {"large B*H", 8, 16, 17, 17, 8, 4, 1, 0, 0, 0, 0, 1, 0.0f, 2.0f},
    /* issue 8's heads: d = 64 (whole blocks of gemm_cpu's 2 W columns), 32 keys, k = 16 */
    {"d=64 n=32 dropout", 3, 2, 32, 32, 64, 16, 1, 0, 0, 0, 0, 1, 0.1f, 2.0f},
    {"d=64 causal cross", 2, 2, 32, 20, 64, 16, 1, 0, 0, 1, 0, 1, 0.1f, 2.0f},
    {"long rows", 1, 2, 40, 300, 16, 16, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f},
    {"long causal", 1, 2, 290, 290, 8, 16, 1, 0, 0, 1, 0, 0, 0.1f, 2.0f},
    /* logits hundreds apart: a row's maximum must be the largest of all its keys, or exp
     * overflows (a maximum that missed half of a vector's lanes passed every case above) */
    {"large logits", 2, 2, 16, 16, 8, 3, 1, 0, 0, 0, 0, 1, 0.0f, 300.0f},
    {"large logits causal", 2, 2, 19, 19, 8, 3, 1, 0, 0, 1, 0, 0, 0.1f, 300.0f},
};

typedef struct tensors {
  size_t nQ, nKV, nW, nP;
  float *Q, *K, *V, *wK, *wV, *dZ;
  int *key_len;
} tensors;

static relcl_attn_desc desc_of(const attn_case *c) {
  relcl_attn_desc d = {0};
  d.batch = c->B;
  d.heads = c->H;
  d.nq = c->nq;
  d.nk = c->nk;
  d.head_dim = c->d;
  d.max_rel = c->k;
  d.relative = c->rel;
  d.per_head = c->per_head;
  d.keys_only = c->keys_only;
  d.causal = c->causal;
  d.q_pos0 = c->q_pos0;
  d.dropout = c->dropout;
  d.seed = 0x1234567890abcdefULL;
  d.stream = 42;
  return d;
}

static tensors make_tensors(const attn_case *c, uint64_t seed) {
  tensors t;
  t.nQ = (size_t)c->B * c->H * c->nq * c->d;
  t.nKV = (size_t)c->B * c->H * c->nk * c->d;
  t.nW = (size_t)(c->per_head ? c->H : 1) * (2 * c->k + 1) * c->d;
  t.nP = (size_t)c->B * c->H * c->nq * c->nk;
  t.Q = tu_alloc_host(t.nQ);
  t.K = tu_alloc_host(t.nKV);
  t.V = tu_alloc_host(t.nKV);
  t.wK = tu_alloc_host(t.nW);
  t.wV = tu_alloc_host(t.nW);
  t.dZ = tu_alloc_host(t.nQ);
  /* scale Q by the case's q_scale: at 2 the logits spread over a few units, softmax far from
   * uniform and far from one-hot */
  tu_fill(t.Q, t.nQ, seed + 1);
  for (size_t i = 0; i < t.nQ; i++) t.Q[i] *= c->q_scale;
  tu_fill(t.K, t.nKV, seed + 2);
  tu_fill(t.V, t.nKV, seed + 3);
  tu_fill(t.wK, t.nW, seed + 4);
  tu_fill(t.wV, t.nW, seed + 5);
  tu_fill(t.dZ, t.nQ, seed + 6);
  t.key_len = NULL;
  if (c->padding) {
    t.key_len = calloc((size_t)c->B, sizeof(int));
    for (int b = 0; b < c->B; b++) t.key_len[b] = c->nk - b > 1 ? c->nk - b : 1;
    if (c->padding == 2) t.key_len[c->B - 1] = 0;
  }
  return t;
}

static void free_tensors(tensors *t) {
  free(t->Q);
  free(t->K);
  free(t->V);
  free(t->wK);
  free(t->wV);
  free(t->dZ);
  free(t->key_len);
}

/* Under --small (the Oclgrind run) device buffers are released only at exit: Oclgrind
 * 21.10's uninitialized-value checker misreports buffers created after others were released
 * (each case alone, or the whole sequence with buffers kept, is clean). */
static int keep_buffers;
static cl_mem kept[4096];
static size_t n_kept;

static void release(cl_mem m) {
  if (m == NULL) return;
  if (keep_buffers && n_kept < sizeof kept / sizeof *kept)
    kept[n_kept++] = m;
  else
    clReleaseMemObject(m);
}

typedef struct device_run {
  float *Z, *probs, *dQ, *dK, *dV, *dwK, *dwV;
} device_run;

static void free_run(device_run *r) {
  free(r->Z);
  free(r->probs);
  free(r->dQ);
  free(r->dK);
  free(r->dV);
  free(r->dwK);
  free(r->dwV);
}

/* Forward and backward on the device, dwK and dwV starting at dw0: they accumulate
 * (dW += ...), so check_case starts them at DW0 and adds DW0 to the reference's, and an
 * overwrite instead of a sum is seen. With saved, through relcl_attn_forward_saved and
 * _backward_saved. */
#define DW0 0.5
static device_run run_device_as(relcl_context *ctx, const relcl_attn_desc *d, const tensors *t,
                                float dw0, int saved) {
  cl_mem Q = tu_upload(ctx, t->Q, t->nQ), K = tu_upload(ctx, t->K, t->nKV),
         V = tu_upload(ctx, t->V, t->nKV), wK = tu_upload(ctx, t->wK, t->nW),
         wV = tu_upload(ctx, t->wV, t->nW), dZ = tu_upload(ctx, t->dZ, t->nQ);
  cl_mem kl = t->key_len ? tu_upload(ctx, t->key_len, (size_t)d->batch) : NULL;
  cl_mem Z, P, dQ, dK, dV, dwK, dwV;
  TU_OK(relcl_alloc(ctx, t->nQ, &Z));
  TU_OK(relcl_alloc(ctx, t->nP, &P));
  TU_OK(relcl_alloc(ctx, t->nQ, &dQ));
  TU_OK(relcl_alloc(ctx, t->nKV, &dK));
  TU_OK(relcl_alloc(ctx, t->nKV, &dV));
  TU_OK(relcl_alloc(ctx, t->nW, &dwK));
  TU_OK(relcl_alloc(ctx, t->nW, &dwV));
  TU_OK(relcl_fill(ctx, relcl_buf_at(dwK, 0), dw0, t->nW));
  TU_OK(relcl_fill(ctx, relcl_buf_at(dwV, 0), dw0, t->nW));
  relcl_buf none = RELCL_BUF_NONE;
  relcl_buf klb = kl ? relcl_buf_at(kl, 0) : none;
  cl_mem S = NULL;
  if (saved) {
    TU_OK(relcl_alloc(ctx, relcl_attn_saved_size(d), &S));
    TU_OK(relcl_attn_forward_saved(ctx, d, relcl_buf_at(Q, 0), relcl_buf_at(K, 0),
                                   relcl_buf_at(V, 0), relcl_buf_at(wK, 0), relcl_buf_at(wV, 0),
                                   klb, relcl_buf_at(Z, 0), relcl_buf_at(P, 0),
                                   relcl_buf_at(S, 0)));
    TU_OK(relcl_attn_backward_saved(
        ctx, d, relcl_buf_at(Q, 0), relcl_buf_at(K, 0), relcl_buf_at(V, 0),
        relcl_buf_at(wK, 0), relcl_buf_at(wV, 0), klb, relcl_buf_at(P, 0), relcl_buf_at(S, 0),
        relcl_buf_at(dZ, 0), relcl_buf_at(dQ, 0), relcl_buf_at(dK, 0), relcl_buf_at(dV, 0),
        relcl_buf_at(dwK, 0), relcl_buf_at(dwV, 0)));
  } else {
    TU_OK(relcl_attn_forward(ctx, d, relcl_buf_at(Q, 0), relcl_buf_at(K, 0), relcl_buf_at(V, 0),
                             relcl_buf_at(wK, 0), relcl_buf_at(wV, 0), klb, relcl_buf_at(Z, 0),
                             relcl_buf_at(P, 0)));
    TU_OK(relcl_attn_backward(ctx, d, relcl_buf_at(Q, 0), relcl_buf_at(K, 0),
                              relcl_buf_at(V, 0), relcl_buf_at(wK, 0), relcl_buf_at(wV, 0), klb,
                              relcl_buf_at(P, 0), relcl_buf_at(dZ, 0), relcl_buf_at(dQ, 0),
                              relcl_buf_at(dK, 0), relcl_buf_at(dV, 0), relcl_buf_at(dwK, 0),
                              relcl_buf_at(dwV, 0)));
  }
  device_run r;
  r.Z = tu_download(ctx, Z, t->nQ);
  r.probs = tu_download(ctx, P, t->nP);
  r.dQ = tu_download(ctx, dQ, t->nQ);
  r.dK = tu_download(ctx, dK, t->nKV);
  r.dV = tu_download(ctx, dV, t->nKV);
  r.dwK = tu_download(ctx, dwK, t->nW);
  r.dwV = tu_download(ctx, dwV, t->nW);
  cl_mem all[] = {Q, K, V, wK, wV, dZ, kl, Z, P, dQ, dK, dV, dwK, dwV, S};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
  return r;
}

static device_run run_device(relcl_context *ctx, const relcl_attn_desc *d, const tensors *t,
                             float dw0) {
  return run_device_as(ctx, d, t, dw0, 0);
}

static int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof *a) == 0;
}

/* Every output of two runs, bit for bit */
static int same_run(const device_run *a, const device_run *b, const tensors *t) {
  return same_bits(a->Z, b->Z, t->nQ) && same_bits(a->probs, b->probs, t->nP) &&
         same_bits(a->dQ, b->dQ, t->nQ) && same_bits(a->dK, b->dK, t->nKV) &&
         same_bits(a->dV, b->dV, t->nKV) && same_bits(a->dwK, b->dwK, t->nW) &&
         same_bits(a->dwV, b->dwV, t->nW);
}

/* The model's graph asks for Z, dQ, dK and dV in the merged layout (ops.h: sequence b's row
 * i, head h at b n ld + i ld + h dh), and has the forward save alpha' and its label sums for
 * the backward (ops.h, relcl_attn_saved_size): each entry the same bits as in the heads
 * layout of the public functions (r), which save nothing, the tables' gradients too; the
 * columns past the heads, the entry before each buffer's start and the one past the saved
 * state untouched. Then the backward again with the saved alpha' zeroed: dV = alpha'^T dZ must
 * be all 0, or the backward did not read it. */
static void check_merged(relcl_context *ctx, const relcl_attn_desc *d, const tensors *t,
                         const device_run *r, const char *name) {
  const size_t B = (size_t)d->batch, H = (size_t)d->heads, dh = (size_t)d->head_dim;
  const size_t nq = (size_t)d->nq, nk = (size_t)d->nk, ld = H * dh + 3;
  const size_t nz = 1 + B * nq * ld, nkv = 1 + B * nk * ld;
  const size_t nsaved = relcl_attn_saved_size(d), ns = 2 + nsaved;
  const size_t ninit = nkv > nz ? (nkv > ns ? nkv : ns) : (nz > ns ? nz : ns);
  const float sentinel = -7.25f;
  float *init = tu_alloc_host(ninit);
  for (size_t i = 0; i < ninit; i++) init[i] = sentinel;
  cl_mem Q = tu_upload(ctx, t->Q, t->nQ), K = tu_upload(ctx, t->K, t->nKV),
         V = tu_upload(ctx, t->V, t->nKV), wK = tu_upload(ctx, t->wK, t->nW),
         wV = tu_upload(ctx, t->wV, t->nW), dZ = tu_upload(ctx, t->dZ, t->nQ);
  cl_mem kl = t->key_len ? tu_upload(ctx, t->key_len, B) : NULL;
  cl_mem Z = tu_upload(ctx, init, nz), dQ = tu_upload(ctx, init, nz),
         dK = tu_upload(ctx, init, nkv), dV = tu_upload(ctx, init, nkv), P, dwK, dwV;
  cl_mem Sv = tu_upload(ctx, init, ns);
  TU_OK(relcl_alloc(ctx, t->nP, &P));
  TU_OK(relcl_alloc(ctx, t->nW, &dwK));
  TU_OK(relcl_alloc(ctx, t->nW, &dwV));
  TU_OK(relcl_fill(ctx, relcl_buf_at(dwK, 0), (float)DW0, t->nW)); /* they accumulate, as */
  TU_OK(relcl_fill(ctx, relcl_buf_at(dwV, 0), (float)DW0, t->nW));  /* run_device's */
  relcl_buf klb = kl ? relcl_buf_at(kl, 0) : RELCL_BUF_NONE;
  TU_OK(relcl__attn_forward(ctx, d, relcl_buf_at(Q, 0), relcl_buf_at(K, 0), relcl_buf_at(V, 0),
                            relcl_buf_at(wK, 0), relcl_buf_at(wV, 0), klb, relcl_buf_at(Z, 1),
                            ld, relcl_buf_at(P, 0), relcl_buf_at(Sv, 1)));
  TU_OK(relcl__attn_backward(ctx, d, relcl_buf_at(Q, 0), relcl_buf_at(K, 0),
                             relcl_buf_at(V, 0), relcl_buf_at(wK, 0), relcl_buf_at(wV, 0), klb,
                             relcl_buf_at(P, 0), relcl_buf_at(Sv, 1), relcl_buf_at(dZ, 0),
                             relcl_buf_at(dQ, 1), ld, relcl_buf_at(dK, 1), relcl_buf_at(dV, 1),
                             ld, relcl_buf_at(dwK, 0), relcl_buf_at(dwV, 0)));
  float *got[4] = {tu_download(ctx, Z, nz), tu_download(ctx, dQ, nz), tu_download(ctx, dK, nkv),
                   tu_download(ctx, dV, nkv)};
  float *gw[2] = {tu_download(ctx, dwK, t->nW), tu_download(ctx, dwV, t->nW)};
  float *sv = tu_download(ctx, Sv, ns);
  const float *want[4] = {r->Z, r->dQ, r->dK, r->dV};
  const size_t rows[4] = {nq, nq, nk, nk};
  size_t wrong = 0, touched = 0;
  for (int o = 0; o < 4; o++) {
    touched += got[o][0] != sentinel;
    for (size_t b = 0; b < B; b++)
      for (size_t i = 0; i < rows[o]; i++)
        for (size_t col = 0; col < ld; col++) {
          const float g = got[o][1 + (b * rows[o] + i) * ld + col];
          const size_t h = col / dh, e = col % dh;
          if (h >= H)
            touched += g != sentinel;
          else
            wrong += memcmp(&g, &want[o][((b * H + h) * rows[o] + i) * dh + e], 4) != 0;
        }
  }
  tu_check(wrong == 0 && touched == 0,
           "%-24s merged Z, dQ, dK, dV: the heads layout's bits (%zu differ), nothing else "
           "written (%zu)", name, wrong, touched);
  const int tables_same = !d->relative || (same_bits(gw[0], r->dwK, t->nW) &&
                                           (d->keys_only || same_bits(gw[1], r->dwV, t->nW)));
  tu_check(tables_same, "%-24s saved state: the tables' gradients' bits", name);
  tu_check(sv[0] == sentinel && sv[ns - 1] == sentinel,
           "%-24s saved state: %zu floats, nothing written outside", name, nsaved);
  for (size_t i = 0; i < nsaved; i++) sv[1 + i] = 0.0f;
  TU_OK(relcl_write(ctx, relcl_buf_at(Sv, 0), sv, ns));
  TU_OK(relcl__attn_backward(ctx, d, relcl_buf_at(Q, 0), relcl_buf_at(K, 0),
                             relcl_buf_at(V, 0), relcl_buf_at(wK, 0), relcl_buf_at(wV, 0), klb,
                             relcl_buf_at(P, 0), relcl_buf_at(Sv, 1), relcl_buf_at(dZ, 0),
                             relcl_buf_at(dQ, 1), ld, relcl_buf_at(dK, 1), relcl_buf_at(dV, 1),
                             ld, relcl_buf_at(dwK, 0), relcl_buf_at(dwV, 0)));
  float *dv0 = tu_download(ctx, dV, nkv);
  size_t nonzero = 0;
  for (size_t b = 0; b < B; b++)
    for (size_t i = 0; i < nk; i++)
      for (size_t col = 0; col < H * dh; col++) nonzero += dv0[1 + (b * nk + i) * ld + col] != 0.0f;
  tu_check(nonzero == 0, "%-24s saved state: the backward reads alpha' there (%zu of dV not 0)",
           name, nonzero);
  free(dv0);
  free(sv);
  for (int o = 0; o < 2; o++) free(gw[o]);
  for (int o = 0; o < 4; o++) free(got[o]);
  free(init);
  cl_mem all[] = {Q, K, V, wK, wV, dZ, kl, Z, P, dQ, dK, dV, dwK, dwV, Sv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
}

/* A second context with RELCL_ATTN=apart where the first runs attention in one kernel a head
 * (CPUs: kernels/gemm.cl attn_fwd_cpu, attn_bwd_cpu), else NULL */
static relcl_context *apart;

/* Whether the two forms compute each element as the same sum in the same order: a shared
 * table (or none), more than one head in all, head_dim within gemm_cpu_bt's longest sum and
 * keys enough that Q K^T goes to gemm_cpu_bt (gemm.c's RELCL_DOTS_BELOW: 12) */
static int same_sums(const attn_case *c) {
  return !(c->rel && c->per_head) && c->B * c->H > 1 && c->d <= 128 && c->nk >= 12;
}

static void check_case(relcl_context *ctx, const attn_case *c) {
  relcl_attn_desc d = desc_of(c);
  tensors t = make_tensors(c, 1000 + (uint64_t)(c - cases) * 16);
  double *Z = calloc(t.nQ, sizeof *Z), *P = calloc(t.nP, sizeof *P);
  double *dQ = calloc(t.nQ, sizeof *dQ), *dK = calloc(t.nKV, sizeof *dK),
         *dV = calloc(t.nKV, sizeof *dV), *dwK = calloc(t.nW, sizeof *dwK),
         *dwV = calloc(t.nW, sizeof *dwV), *dZ = calloc(t.nQ, sizeof *dZ);
  for (size_t i = 0; i < t.nQ; i++) dZ[i] = t.dZ[i];
  ref_attn_forward(&d, t.Q, t.K, t.V, t.wK, t.wV, t.key_len, Z, P);
  ref_attn_backward(&d, t.Q, t.K, t.V, t.wK, t.wV, t.key_len, dZ, dQ, dK, dV, dwK, dwV);
  for (size_t i = 0; i < t.nW; i++) {
    dwK[i] += DW0;
    dwV[i] += DW0;
  }

  device_run r = run_device(ctx, &d, &t, (float)DW0);
  const double fwd_tol = 2e-5, bwd_tol = 1e-4;
  double e;
  e = tu_rel_err(r.Z, Z, t.nQ, 1e-2);
  tu_check(e < fwd_tol, "%-24s Z      rel err %.2e", c->name, e);
  e = tu_rel_err(r.probs, P, t.nP, 1e-2);
  tu_check(e < fwd_tol, "%-24s probs  rel err %.2e", c->name, e);
  e = tu_rel_err(r.dQ, dQ, t.nQ, 1e-2);
  tu_check(e < bwd_tol, "%-24s dQ     rel err %.2e", c->name, e);
  e = tu_rel_err(r.dK, dK, t.nKV, 1e-2);
  tu_check(e < bwd_tol, "%-24s dK     rel err %.2e", c->name, e);
  e = tu_rel_err(r.dV, dV, t.nKV, 1e-2);
  tu_check(e < bwd_tol, "%-24s dV     rel err %.2e", c->name, e);
  if (c->rel) {
    e = tu_rel_err(r.dwK, dwK, t.nW, 1e-2);
    tu_check(e < bwd_tol, "%-24s dwK    rel err %.2e", c->name, e);
  }
  if (c->rel && !c->keys_only) {
    e = tu_rel_err(r.dwV, dwV, t.nW, 1e-2);
    tu_check(e < bwd_tol, "%-24s dwV    rel err %.2e", c->name, e);
  }

  /* the same call again gives the same bits: no order depends on scheduling */
  device_run r2 = run_device(ctx, &d, &t, (float)DW0);
  tu_check(same_run(&r, &r2, &t), "%-24s bitwise identical on a second run", c->name);
  /* the public functions with a saved state: the same bits */
  device_run rs = run_device_as(ctx, &d, &t, (float)DW0, 1);
  tu_check(same_run(&r, &rs, &t), "%-24s relcl_attn_forward_saved / _backward_saved: the same bits",
           c->name);
  free_run(&rs);
  check_merged(ctx, &d, &t, &r, c->name);
  if (apart && same_sums(c)) { /* one kernel a head: the bits of the kernels it joins */
    device_run ra = run_device(apart, &d, &t, (float)DW0);
    tu_check(same_run(&r, &ra, &t), "%-24s one kernel a head: the bits of the kernels apart",
             c->name);
    free_run(&ra);
  }

  free_run(&r);
  free_run(&r2);
  free(Z);
  free(P);
  free(dQ);
  free(dK);
  free(dV);
  free(dwK);
  free(dwV);
  free(dZ);
  free_tensors(&t);
}

/* k = 0 puts every pair on one label: the weights must equal those of attention with no
 * position information, and Z must differ by exactly wV[0] (the weights sum to 1). */
static void check_k0_is_positionless(relcl_context *ctx) {
  attn_case c0 = {"k=0", 2, 2, 9, 9, 8, 0, 1, 0, 0, 0, 0, 0, 0.0f, 2.0f};
  attn_case cn = c0;
  cn.rel = 0;
  relcl_attn_desc d0 = desc_of(&c0), dn = desc_of(&cn);
  tensors t = make_tensors(&c0, 77);
  device_run a = run_device(ctx, &d0, &t, 0.0f), b = run_device(ctx, &dn, &t, 0.0f);
  double *pb = calloc(t.nP, sizeof *pb), *zb = calloc(t.nQ, sizeof *zb);
  for (size_t i = 0; i < t.nP; i++) pb[i] = b.probs[i];
  for (size_t i = 0; i < t.nQ; i++) zb[i] = (double)b.Z[i] + t.wV[i % (size_t)c0.d];
  double ep = tu_rel_err(a.probs, pb, t.nP, 1e-3), ez = tu_rel_err(a.Z, zb, t.nQ, 1e-3);
  /* both sides are float computations of the same softmax: 1e-5 */
  tu_check(ep < 1e-5, "k=0 weights equal position-free weights (rel err %.2e)", ep);
  tu_check(ez < 1e-5, "k=0 output equals position-free output + wV[0] (rel err %.2e)", ez);
  free_run(&a);
  free_run(&b);
  free(pb);
  free(zb);
  free_tensors(&t);
}

/* Central finite differences of the device's float forward, L = sum(Z * dZ), on a few
 * entries of every input. Step 1e-2 on O(1) inputs: truncation error ~ h^2 * L''' ~ 1e-4
 * and float rounding of L (~1e-6 |L|) / 2h ~ 1e-4 relative, so 2e-3 of the gradient's
 * scale (observed: below 1e-4) catches a wrong term (O(1) relative) without false alarms. */
static void check_finite_differences(relcl_context *ctx, const attn_case *c) {
  relcl_attn_desc d = desc_of(c);
  tensors t = make_tensors(c, 555);
  device_run g = run_device(ctx, &d, &t, 0.0f);
  struct {
    const char *name;
    float *x, *grad;
    size_t n;
    int used;
  } inputs[] = {
      {"Q", t.Q, g.dQ, t.nQ, 1},
      {"K", t.K, g.dK, t.nKV, 1},
      {"V", t.V, g.dV, t.nKV, 1},
      {"wK", t.wK, g.dwK, t.nW, c->rel},
      {"wV", t.wV, g.dwV, t.nW, c->rel && !c->keys_only},
  };
  cl_mem Qm = tu_upload(ctx, t.Q, t.nQ), Km = tu_upload(ctx, t.K, t.nKV),
         Vm = tu_upload(ctx, t.V, t.nKV), wKm = tu_upload(ctx, t.wK, t.nW),
         wVm = tu_upload(ctx, t.wV, t.nW), Zm;
  cl_mem kl = t.key_len ? tu_upload(ctx, t.key_len, (size_t)c->B) : NULL;
  cl_mem mems[] = {Qm, Km, Vm, wKm, wVm};
  TU_OK(relcl_alloc(ctx, t.nQ, &Zm));
  float *Z = tu_alloc_host(t.nQ);
  for (int in = 0; in < 5; in++) {
    if (!inputs[in].used) continue;
    double worst = 0.0, scale = 1e-3;
    for (size_t i = 0; i < inputs[in].n; i++)
      if (fabs(inputs[in].grad[i]) > scale) scale = fabs(inputs[in].grad[i]);
    uint64_t s = 99 + (uint64_t)in;
    for (int probe = 0; probe < 6; probe++) {
      size_t i = (size_t)(tu_next(&s) % inputs[in].n);
      double loss[2];
      float keep = inputs[in].x[i];
      for (int side = 0; side < 2; side++) {
        inputs[in].x[i] = keep + (side ? 1e-2f : -1e-2f);
        TU_OK(relcl_write(ctx, relcl_buf_at(mems[in], 0), inputs[in].x, inputs[in].n));
        TU_OK(relcl_attn_forward(ctx, &d, relcl_buf_at(Qm, 0), relcl_buf_at(Km, 0),
                                 relcl_buf_at(Vm, 0), relcl_buf_at(wKm, 0), relcl_buf_at(wVm, 0),
                                 kl ? relcl_buf_at(kl, 0) : RELCL_BUF_NONE, relcl_buf_at(Zm, 0),
                                 RELCL_BUF_NONE));
        TU_OK(relcl_read(ctx, relcl_buf_at(Zm, 0), Z, t.nQ));
        double L = 0.0;
        for (size_t j = 0; j < t.nQ; j++) L += (double)Z[j] * t.dZ[j];
        loss[side] = L;
      }
      inputs[in].x[i] = keep;
      TU_OK(relcl_write(ctx, relcl_buf_at(mems[in], 0), inputs[in].x, inputs[in].n));
      double fd = (loss[1] - loss[0]) / (2.0 * 1e-2);
      double e = fabs(fd - inputs[in].grad[i]) / scale;
      worst = tu_worse(worst, e);
    }
    tu_check(worst < 2e-3, "%-24s finite differences d%-3s rel err %.2e", c->name,
             inputs[in].name, worst);
  }
  for (int i = 0; i < 5; i++) clReleaseMemObject(mems[i]);
  clReleaseMemObject(Zm);
  if (kl) clReleaseMemObject(kl);
  free(Z);
  free_run(&g);
  free_tensors(&t);
}

/* --small: only the cases small enough for a simulator (Oclgrind), no finite differences.
 * --case NAME: only the cases whose name contains NAME.
 * --keep-buffers: release device buffers only at exit (for Oclgrind, see above). */
int main(int argc, char **argv) {
  int small = 0;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--small") == 0)
      small = 1;
    else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
      only = argv[++i], small = 1;
    else if (strcmp(argv[i], "--keep-buffers") == 0)
      keep_buffers = 1;
    else {
      fprintf(stderr, "usage: test_attention [--small] [--case NAME] [--keep-buffers]\n");
      return 2;
    }
  }
  relcl_context *ctx = tu_context();
  printf("device: %s\n", relcl_context_device_name(ctx));
  tu_check_width(relcl__cpu_width(ctx));
  printf("attention: %s\n", relcl__attn_fused(ctx) ? "one kernel a head" : "kernels apart");
  const char *attn_env = getenv("RELCL_ATTN");
  if (attn_env && strcmp(attn_env, "apart") == 0)
    tu_check(!relcl__attn_fused(ctx), "RELCL_ATTN=apart: the context runs attention's kernels "
                                      "apart");
  if (relcl__attn_fused(ctx) && !keep_buffers) { /* not under Oclgrind: twice as long */
    setenv("RELCL_ATTN", "apart", 1);
    apart = tu_context();
    unsetenv("RELCL_ATTN");
  }
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const attn_case *c = &cases[i];
    if (small && (size_t)c->B * c->H * c->nq * c->nk > 600) continue;
    if (only && strstr(c->name, only) == NULL) continue;
    check_case(ctx, c);
  }
  if (small) {
    for (size_t i = 0; i < n_kept; i++) clReleaseMemObject(kept[i]);
    if (apart) relcl_context_destroy(apart);
    relcl_context_destroy(ctx);
    return tu_finish();
  }
  check_k0_is_positionless(ctx);
  static const attn_case fd_cases[] = {
      {"fd relative", 2, 2, 6, 6, 4, 2, 1, 0, 0, 0, 0, 1, 0.0f, 2.0f},
      {"fd per-head causal", 1, 2, 5, 5, 4, 3, 1, 1, 0, 1, 0, 0, 0.0f, 2.0f},
      {"fd dropout", 1, 2, 6, 6, 4, 2, 1, 0, 0, 0, 0, 0, 0.2f, 2.0f},
      {"fd cross q0", 1, 2, 3, 7, 4, 2, 1, 0, 0, 0, 3, 1, 0.0f, 2.0f},
  };
  for (size_t i = 0; i < sizeof fd_cases / sizeof *fd_cases; i++)
    check_finite_differences(ctx, &fd_cases[i]);
  if (apart) relcl_context_destroy(apart);
  relcl_context_destroy(ctx);
  return tu_finish();
}
