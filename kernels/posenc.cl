/* Sinusoidal absolute positions (Vaswani et al. 2017), the baseline relcl compares with.
 *   x (B, n, d_model) += PE(pos0 + t):  PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i),
 *   w_i = 10000^(-2i/d_model)
 * Global size (d_model, n, B). */
__kernel void posenc_add(__global float *x, uint x_off, int n, int d_model, int pos0) {
  const int c = get_global_id(0), t = get_global_id(1), b = get_global_id(2);
  const float w = exp(-(float)(c & ~1) * (log(10000.0f) / (float)d_model));
  const float angle = (float)(pos0 + t) * w;
  x[x_off + ((size_t)b * n + t) * d_model + c] += (c & 1) ? cos(angle) : sin(angle);
}
