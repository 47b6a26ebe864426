/* Incremental decoding (lib/decode.c): the self-attention key and value caches of a decoder
 * layer, (N, H, Tc, dh) for N hypotheses, H heads and room for Tc positions. Writing the new
 * position and gathering hypotheses run here, on the device, rather than as host-side buffer
 * copies, which Oclgrind cannot follow. Pure copies: no arithmetic.
 */

/* The new position t of every hypothesis: cache[r][h][t][e] = x[r ld + h dh + e], x the
 * step's projected keys (or values), (N, ld), heads in its first H dh columns.
 * Global (dh, H, N). */
__kernel void cache_put(__global const float *x, uint x_off, int ld, __global float *cache,
                        uint c_off, int H, int Tc, int dh, int t, int N) {
  const int e = get_global_id(0), h = get_global_id(1), r = get_global_id(2);
  if (e >= dh || h >= H || r >= N) return;
  cache[c_off + (((size_t)r * H + h) * Tc + t) * dh + e] =
      x[x_off + (size_t)r * ld + (size_t)h * dh + e];
}

/* Hypothesis r continues from hypothesis from[r] of src: dst[r][h][p][e] =
 * src[from[r]][h][p][e] for the npos positions written so far (later ones are never read).
 * Global (npos dh, H, N). */
__kernel void cache_gather(__global const int *from, uint f_off, __global const float *src,
                           uint s_off, __global float *dst, uint d_off, int H, int Tc, int dh,
                           int npos, int N) {
  const int c = get_global_id(0), h = get_global_id(1), r = get_global_id(2);
  if (c >= npos * dh || h >= H || r >= N) return;
  const size_t row = (size_t)H * Tc * dh, at = (size_t)h * Tc * dh + c;
  dst[d_off + (size_t)r * row + at] = src[s_off + (size_t)from[f_off + r] * row + at];
}
