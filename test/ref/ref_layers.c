/* ref_layers.c: the oracle for the layer ops (see ref_layers.h). Plain loops in double, each
 * formula as a textbook writes it; the fast code's factorings (layer norm's closed-form
 * backward, the loss as lse - z_t, Adam's folded bias correction) are not reused here. */
#include "ref_layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

/* ---- layer norm ---- */

static void row_stats(int d, double eps, const double *x, double *mean, double *rstd) {
  double mu = 0.0, var = 0.0;
  for (int c = 0; c < d; c++) mu += x[c];
  mu /= d;
  for (int c = 0; c < d; c++) var += (x[c] - mu) * (x[c] - mu);
  var /= d;
  *mean = mu;
  *rstd = 1.0 / sqrt(var + eps);
}

static double *to_double(const float *x, size_t n) {
  double *y = ref_xcalloc(n, sizeof *y);
  for (size_t i = 0; i < n; i++) y[i] = x[i];
  return y;
}

void ref_layernorm_forward_d(int rows, int d, double eps, const double *x, const double *gain,
                             const double *bias, double *y, double *mean, double *rstd) {
  for (int r = 0; r < rows; r++) {
    const double *xr = x + (size_t)r * d;
    double mu, rs;
    row_stats(d, eps, xr, &mu, &rs);
    for (int c = 0; c < d; c++) y[(size_t)r * d + c] = (xr[c] - mu) * rs * gain[c] + bias[c];
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
  }
}

void ref_layernorm_forward(int rows, int d, double eps, const float *x, const float *gain,
                           const float *bias, double *y, double *mean, double *rstd) {
  double *xd = to_double(x, (size_t)rows * d), *gd = to_double(gain, (size_t)d);
  double *bd = to_double(bias, (size_t)d);
  ref_layernorm_forward_d(rows, d, eps, xd, gd, bd, y, mean, rstd);
  free(xd), free(gd), free(bd);
}

void ref_layernorm_backward_d(int rows, int d, double eps, const double *x, const double *gain,
                              const double *dy, double *dx, double *dgain, double *dbias) {
  for (int c = 0; c < d; c++) dgain[c] = dbias[c] = 0.0;
  double *xhat = ref_xcalloc((size_t)d, sizeof *xhat);
  for (int r = 0; r < rows; r++) {
    const double *xr = x + (size_t)r * d, *dyr = dy + (size_t)r * d;
    double mu, rs;
    row_stats(d, eps, xr, &mu, &rs);
    for (int c = 0; c < d; c++) xhat[c] = (xr[c] - mu) * rs;
    /* y_i = gain_i xhat_i + bias_i, xhat_i = (x_i - mu) rs:
     * d xhat_i / d x_j = rs (delta_ij - 1/d) - xhat_i xhat_j rs / d */
    for (int j = 0; j < d; j++) {
      double s = 0.0;
      for (int i = 0; i < d; i++) {
        double J = rs * ((i == j ? 1.0 : 0.0) - 1.0 / d) - xhat[i] * xhat[j] * rs / d;
        s += dyr[i] * gain[i] * J;
      }
      dx[(size_t)r * d + j] = s;
    }
    for (int c = 0; c < d; c++) {
      dgain[c] += dyr[c] * xhat[c];
      dbias[c] += dyr[c];
    }
  }
  free(xhat);
}

void ref_layernorm_backward(int rows, int d, double eps, const float *x, const float *gain,
                            const float *dy, double *dx, double *dgain, double *dbias) {
  double *xd = to_double(x, (size_t)rows * d), *gd = to_double(gain, (size_t)d);
  double *dyd = to_double(dy, (size_t)rows * d);
  ref_layernorm_backward_d(rows, d, eps, xd, gd, dyd, dx, dgain, dbias);
  free(xd), free(gd), free(dyd);
}

/* ---- embedding ---- */

void ref_embedding_forward(int n, int d, int vocab, const int32_t *ids, const float *table,
                           double scale, double *out) {
  for (int t = 0; t < n; t++)
    for (int c = 0; c < d; c++)
      out[(size_t)t * d + c] = (ids[t] >= 0 && ids[t] < vocab)
                                   ? scale * table[(size_t)ids[t] * d + c]
                                   : 0.0;
}

void ref_embedding_backward(int n, int d, int vocab, const int32_t *ids, const float *dout,
                            double scale, double *dtable) {
  for (int t = 0; t < n; t++)
    if (ids[t] >= 0 && ids[t] < vocab)
      for (int c = 0; c < d; c++)
        dtable[(size_t)ids[t] * d + c] += scale * dout[(size_t)t * d + c];
}

void ref_embedding_backward_float(int n, int d, int vocab, const int32_t *ids,
                                  const float *dout, float scale, float *dtable) {
  for (int v = 0; v < vocab; v++) {
    int seen = 0;
    for (int t = 0; t < n; t++) seen |= ids[t] == v;
    if (!seen) continue;
    for (int c = 0; c < d; c++) {
      float s = 0.0f;
      for (int t = 0; t < n; t++)
        if (ids[t] == v) s += dout[(size_t)t * d + c];
      float prod = scale * s; /* two roundings, as the kernel (no fma contraction) */
      dtable[(size_t)v * d + c] = dtable[(size_t)v * d + c] + prod;
    }
  }
}

/* ---- dropout ---- */

int ref_dropout4_keep(uint64_t seed, uint64_t stream, uint64_t i, float p) {
  if (p <= 0.0f) return 1;
  return ref_dropout_keep(seed, stream, i / 4, (int)(i % 4), p);
}

void ref_dropout_forward(size_t n, float p, uint64_t seed, uint64_t stream, const float *x,
                         const float *residual, float *y) {
  const float scale = (float)(1.0 / (1.0 - (double)p));
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    if (p > 0.0f) v = ref_dropout4_keep(seed, stream, i, p) ? v * scale : 0.0f;
    y[i] = residual ? residual[i] + v : v;
  }
}

void ref_bias_dropout_residual(int rows, int cols, float p, uint64_t seed, uint64_t stream,
                               const float *x, const float *bias, const float *residual,
                               float *y) {
  const float scale = (float)(1.0 / (1.0 - (double)p));
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const size_t i = (size_t)r * cols + c;
      float v = x[i] + bias[c];
      if (p > 0.0f) v = ref_dropout4_keep(seed, stream, i, p) ? v * scale : 0.0f;
      y[i] = residual[i] + v;
    }
}

/* ---- linear ---- */

void ref_linear_forward_d(int rows, int in, int out, const double *x, const double *W,
                          const double *b, double *y) {
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < out; o++) {
      double s = b ? b[o] : 0.0;
      for (int i = 0; i < in; i++) s += x[(size_t)r * in + i] * W[(size_t)o * in + i];
      y[(size_t)r * out + o] = s;
    }
}

void ref_linear_forward(int rows, int in, int out, const float *x, const float *W,
                        const float *b, double *y) {
  double *xd = to_double(x, (size_t)rows * in), *Wd = to_double(W, (size_t)out * in);
  double *bd = b ? to_double(b, (size_t)out) : NULL;
  ref_linear_forward_d(rows, in, out, xd, Wd, bd, y);
  free(xd), free(Wd), free(bd);
}

void ref_linear_backward_d(int rows, int in, int out, const double *x, const double *W,
                           const double *dy, double *dx, double *dW, double *db) {
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < in; i++) {
      double s = 0.0;
      for (int o = 0; o < out; o++) s += dy[(size_t)r * out + o] * W[(size_t)o * in + i];
      dx[(size_t)r * in + i] = s;
    }
  for (int o = 0; o < out; o++) {
    for (int i = 0; i < in; i++) {
      double s = 0.0;
      for (int r = 0; r < rows; r++) s += dy[(size_t)r * out + o] * x[(size_t)r * in + i];
      dW[(size_t)o * in + i] = s;
    }
    double s = 0.0;
    for (int r = 0; r < rows; r++) s += dy[(size_t)r * out + o];
    if (db) db[o] = s;
  }
}

void ref_linear_backward(int rows, int in, int out, const float *x, const float *W,
                         const float *dy, double *dx, double *dW, double *db) {
  double *xd = to_double(x, (size_t)rows * in), *Wd = to_double(W, (size_t)out * in);
  double *dyd = to_double(dy, (size_t)rows * out);
  ref_linear_backward_d(rows, in, out, xd, Wd, dyd, dx, dW, db);
  free(xd), free(Wd), free(dyd);
}

/* ---- reductions ---- */

void ref_colsum(int rows, int cols, const float *x, int ld, double *y) {
  for (int c = 0; c < cols; c++) {
    double s = 0.0;
    for (int r = 0; r < rows; r++) s += x[(size_t)r * ld + c];
    y[c] = s;
  }
}

double ref_sumsq(size_t n, const float *x) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}

/* ---- loss ---- */

void ref_xent_d(int rows, int V, double eps, int ignore_id, const double *logits,
                const int32_t *targets, double grad_scale, double *losses, double *dlogits) {
  double *p = ref_xcalloc((size_t)V, sizeof *p);
  for (int r = 0; r < rows; r++) {
    const double *z = logits + (size_t)r * V;
    const int t = targets[r];
    double *g = dlogits ? dlogits + (size_t)r * V : NULL;
    if (t == ignore_id || t < 0 || t >= V) {
      losses[2 * r] = losses[2 * r + 1] = 0.0;
      if (g)
        for (int v = 0; v < V; v++) g[v] = 0.0;
      continue;
    }
    double mx = -INFINITY, sum = 0.0;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) sum += exp(z[v] - mx);
    for (int v = 0; v < V; v++) p[v] = exp(z[v] - mx) / sum;
    double loss = 0.0;
    for (int v = 0; v < V; v++) {
      double q = (v == t ? 1.0 - eps : 0.0) + eps / V;
      double logp = (z[v] - mx) - log(sum);
      loss -= q * logp;
      if (g) g[v] = grad_scale * (p[v] - q);
    }
    losses[2 * r] = loss;
    losses[2 * r + 1] = -((z[t] - mx) - log(sum));
  }
  free(p);
}

void ref_xent(int rows, int V, double eps, int ignore_id, const float *logits,
              const int32_t *targets, double grad_scale, double *losses, double *dlogits) {
  double *zd = to_double(logits, (size_t)rows * V);
  ref_xent_d(rows, V, eps, ignore_id, zd, targets, grad_scale, losses, dlogits);
  free(zd);
}

void ref_argmax(int rows, int cols, const float *x, int ld, int32_t *out) {
  for (int r = 0; r < rows; r++) {
    int best = -1;
    for (int c = 0; c < cols; c++) {
      float v = x[(size_t)r * ld + c];
      if (isnan(v)) continue;
      if (best < 0 || v > x[(size_t)r * ld + best]) best = c;
    }
    out[r] = best < 0 ? 0 : best;
  }
}

/* ---- Adam ---- */

void ref_adam(size_t n, double lr, double beta1, double beta2, double eps, uint64_t step,
              double grad_scale, double clip_norm, const float *grad, double *param, double *m,
              double *v) {
  double c = 1.0;
  if (clip_norm > 0.0) {
    double norm = grad_scale * sqrt(ref_sumsq(n, grad));
    if (norm > clip_norm) c = clip_norm / (norm + 1e-6);
  }
  for (size_t i = 0; i < n; i++) {
    double g = grad_scale * c * grad[i];
    m[i] = beta1 * m[i] + (1.0 - beta1) * g;
    v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
    double mhat = m[i] / (1.0 - pow(beta1, (double)step));
    double vhat = v[i] / (1.0 - pow(beta2, (double)step));
    param[i] -= lr * mhat / (sqrt(vhat) + eps);
  }
}

void ref_gemm_batched(int ta, int tb, int m, int n, int k, double alpha, const float *a,
                      int lda, size_t stride_a, const float *b, int ldb, size_t stride_b,
                      double beta, double *c, int ldc, size_t stride_c, int batch) {
  for (int e = 0; e < batch; e++) {
    const float *A = a + e * stride_a, *B = b + e * stride_b;
    double *C = c + e * stride_c;
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        double sum = 0.0;
        for (int p = 0; p < k; p++) {
          double aip = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
          double bpj = tb ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
          sum += aip * bpj;
        }
        double *cij = &C[(size_t)i * ldc + j];
        *cij = alpha * sum + (beta != 0.0 ? beta * *cij : 0.0);
      }
  }
}
