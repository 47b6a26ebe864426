/* ref.h: the slow, obvious plain-C reference (the oracle) for relcl's attention, dropout mask
 * and sinusoidal encoding. Written from the formulas of Shaw, Uszkoreit & Vaswani (2018) as
 * stated in relcl.h, loop by loop, in double, so that the fast code can disagree with it.
 * It uses relcl.h only for relcl_attn_desc: no relcl call, no OpenCL.
 *
 * Shapes (row-major, dense), with B = batch, H = heads, d = head_dim, k = max_rel:
 *   Q, dQ, Z, dZ   (B, H, nq, d)
 *   K, V, dK, dV   (B, H, nk, d)
 *   wK, wV, dwK, dwV   (2k+1, d), or (H, 2k+1, d) with per_head
 *   key_len        (B), or NULL for all nk keys
 *   probs          (B, H, nq, nk)  softmax weights before dropout
 */
#ifndef RELCL_TEST_REF_H
#define RELCL_TEST_REF_H

#include <stddef.h>
#include <stdint.h>

#include "relcl.h"

/* calloc that never returns NULL (at least one element): a reference that cannot allocate
 * a few KB has nothing useful to say, so it stops loudly (abort). */
void *ref_xcalloc(size_t n, size_t size);

/* Philox4x32-10 (Salmon et al. 2011, Random123), key (k0, k1), counter c[4]; writes out[4]. */
void ref_philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1, uint32_t out[4]);

/* 1 if word `word` (0..3) of the Philox call with key (seed lo32, seed hi32) and counter
 * (q lo32, q hi32, stream lo32, stream hi32) is >= (uint32_t)(p * 4294967296.0), computed in
 * double from the float p (p in [0, 1); p == 0 keeps everything). */
int ref_dropout_keep(uint64_t seed, uint64_t stream, uint64_t q, int word, float p);

/* 1 if attention weight (row, j) of a row of nk keys, row = (b*heads + h)*nq + i, survives
 * dropout p: word j mod 4 of call q = row * ceil(nk/4) + floor(j/4) (include/relcl.h). */
int ref_attn_keep(uint64_t seed, uint64_t stream, uint64_t row, int nk, int j, float p);

/* Forward: Z and probs (may be NULL) in double. wK and wV may be NULL when desc->relative is
 * 0, and wV when desc->keys_only. */
void ref_attn_forward(const relcl_attn_desc *desc, const float *Q, const float *K,
                      const float *V, const float *wK, const float *wV, const int *key_len,
                      double *Z, double *probs);

/* Backward of ref_attn_forward by the chain rule on the direct per-(i,j) formula. Given dZ,
 * dQ, dK, dV, dwK and dwV are overwritten (not accumulated, unlike relcl_attn_backward);
 * dwK and dwV may be NULL when unused, and are then skipped. */
void ref_attn_backward(const relcl_attn_desc *desc, const float *Q, const float *K,
                       const float *V, const float *wK, const float *wV, const int *key_len,
                       const double *dZ, double *dQ, double *dK, double *dV, double *dwK,
                       double *dwV);

/* The same two functions on double inputs: the float ones convert and call these. They exist
 * so that finite differences can perturb inputs by far less than a float's resolution. */
void ref_attn_forward_d(const relcl_attn_desc *desc, const double *Q, const double *K,
                        const double *V, const double *wK, const double *wV,
                        const int *key_len, double *Z, double *probs);
void ref_attn_backward_d(const relcl_attn_desc *desc, const double *Q, const double *K,
                         const double *V, const double *wK, const double *wV,
                         const int *key_len, const double *dZ, double *dQ, double *dK,
                         double *dV, double *dwK, double *dwV);

/* x (B, n, dm) += PE(pos0 + t) for t in 0..n-1, in double, with
 * PE(p, 2i) = sin(p / 10000^(2i/dm)) and PE(p, 2i+1) = cos(p / 10000^(2i/dm)). */
void ref_posenc_add(double *x, int B, int n, int dm, int pos0);

#endif
