/* Sinusoidal absolute positions (Vaswani et al. 2017), the baseline relcl compares with.
 *   x (B, n, d_model) += PE(pos0 + t):  PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i),
 *   w_i = 10000^(-2i/d_model)
 * In two passes: posenc_table computes PE for the n positions once (an exp and a sin or cos
 * each), posenc_add adds it to every sentence. Computed for every element of every sentence,
 * the exp, sin and cos took 31 ms of the issue-8 step on PoCL (Zen 5), where all of the
 * relative model's element-wise passes took 27; a work-item per position looping over the
 * sentences, 15. */

/* pe (n, d_model) = PE(pos0 + t). Global (d_model, n). */
__kernel void posenc_table(__global float *pe, int d_model, int pos0) {
  const int c = get_global_id(0), t = get_global_id(1);
  const float w = exp(-(float)(c & ~1) * (log(10000.0f) / (float)d_model));
  const float angle = (float)(pos0 + t) * w;
  pe[(size_t)t * d_model + c] = (c & 1) ? cos(angle) : sin(angle);
}

/* x (B, n, d_model) += pe (n, d_model). Global (d_model, n, B). */
__kernel void posenc_add(__global float *x, uint x_off, __global const float *pe, int n,
                         int d_model) {
  const int c = get_global_id(0), t = get_global_id(1), b = get_global_id(2);
  x[x_off + ((size_t)b * n + t) * d_model + c] += pe[(size_t)t * d_model + c];
}
