/* ref_model.h: the whole Transformer of relcl_model.h as a slow, obvious double-precision CPU
 * model, built only from the test/ref ops (ref_attn_forward_d, ref_posenc_add,
 * ref_dropout4_keep, ref_layernorm_forward_d, ref_linear_forward_d, ref_xent_d and their
 * backwards) and written
 * from the papers' formulas (Vaswani et al. 2017; Shaw et al. 2018; pre-norm as Wang et al.
 * 2019), so that the device model can disagree with it. It uses relcl_model.h only for the
 * plain structs relcl_model_config and relcl_model_batch: no relcl call, no OpenCL.
 *
 * Parameters: one double array carved by a table of named tensors with the names and shapes
 * relcl_model.h documents ("emb.weight", "enc.0.self_attn.wq.weight", ...), packed in table
 * order without padding; tests map them to the device's by name.
 *
 * The model (B batch, S source and T target length, D d_model, V vocab; PAD = 0):
 *   x0   = dropout(sqrt(D) E[ids] (+ PE))                       (embedding, tied output)
 *   post-norm block: y = LN(x + dropout(F(x)));  pre-norm: y = x + dropout(F(LN(x))),
 *        and a final LN after the last layer of each stack (enc.norm, dec.norm)
 *   F: self-attention (relative terms when configured, causal in the decoder), cross
 *        attention over the encoder output, or W2 relu(W1 x + b1) + b2
 *   logits = dec_out E^T;  loss = sum over non-PAD targets of the label-smoothed
 *        cross-entropy -sum_v q_v log p_v, q = (1 - eps) onehot + eps / V.
 * Dropout masks follow relcl_model.h's counter scheme: Philox with (seed, stream), stream =
 * ((step * 256 + micro) * 64 + layer) * 16 + site; layers: encoder l, decoder 31 + l,
 * embeddings 63; sites: source / target embedding 0 / 1 (layer 63), attention weights of
 * self / cross attention 1 / 3, residual branch of self / cross attention / FFN 2 / 4 / 5.
 */
#ifndef RELCL_TEST_REF_MODEL_H
#define RELCL_TEST_REF_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "relcl_model.h"

typedef struct ref_tensor {
  char name[128];
  size_t offset, size;
  int ndim;
  size_t shape[3];
} ref_tensor;

typedef struct ref_model {
  relcl_model_config cfg;
  ref_tensor *tensors;
  size_t n_tensors;
  size_t param_count;
} ref_model;

/* The parameter table of cfg; 0 on success. */
int ref_model_init(ref_model *m, const relcl_model_config *cfg);
void ref_model_free(ref_model *m);
/* The tensor named name, or NULL. */
const ref_tensor *ref_model_find(const ref_model *m, const char *name);

/* Dropout of one pass: p (0: none), and the (seed, step, micro) of relcl_model_train_batch. */
typedef struct ref_dropout {
  float p;
  uint64_t seed, step;
  int micro;
} ref_dropout;

/* The summed label-smoothed loss of batch under params (param_count doubles); logits
 * (B T, V) are written when not NULL, nll (the plain negative log-likelihood) likewise. */
double ref_model_loss(const ref_model *m, const double *params, const relcl_model_batch *batch,
                      const ref_dropout *drop, double *logits, double *nll);

/* d loss / d params by the chain rule (the backward of every step above, with
 * ref_attn_backward_d, ref_layernorm_backward_d and ref_linear_backward_d): grad
 * (param_count) is overwritten; returns the loss. */
double ref_model_grad(const ref_model *m, const double *params, const relcl_model_batch *batch,
                      const ref_dropout *drop, double *grad);

/* The same by central differences in double, every entry: grad (param_count), the check of
 * ref_model_grad.
 * h = 1e-6 (|params| <= ~1): truncation h^2 L''' / 6 ~ 1e-12, rounding ~ 1e-16 L / h ~ 1e-9
 * for L ~ 16, far below a float model's own error. params is restored on return. */
void ref_model_grad_fd(const ref_model *m, double *params, const relcl_model_batch *batch,
                       const ref_dropout *drop, double *grad);

#endif
