/* Shared by every relcl program (prepended at build time): the counter-based RNG and
 * work-group reductions. OpenCL C 1.2, no extensions. */

/* Philox4x32-10 (Salmon et al., SC'11): the same integer arithmetic on every device, so a
 * dropout mask depends only on (seed, stream, index). Written on four scalars with the high
 * words taken from 64-bit products: PoCL calls a library routine for mul_hi and does not
 * vectorize uint4 arithmetic across work-items, which made this 10 to 15 times slower on a
 * CPU; GPUs compile the 32x32->64 product to the same single instruction as mul_hi. */
inline uint4 relcl_philox4x32_10(uint4 c, uint k0, uint k1) {
  uint x0 = c.x, x1 = c.y, x2 = c.z, x3 = c.w;
  for (int round = 0; round < 10; round++) {
    const ulong p0 = (ulong)0xD2511F53u * x0, p1 = (ulong)0xCD9E8D57u * x2;
    x0 = (uint)(p1 >> 32) ^ x1 ^ k0;
    x1 = (uint)p1;
    x2 = (uint)(p0 >> 32) ^ x3 ^ k1;
    x3 = (uint)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (uint4)(x0, x1, x2, x3);
}

/* 1 when element `index` of stream `stream` survives dropout with threshold p * 2^32. */
inline int relcl_keep(ulong index, uint stream_lo, uint stream_hi, uint seed_lo, uint seed_hi,
                      uint threshold) {
  uint4 c = (uint4)((uint)index, (uint)(index >> 32), stream_lo, stream_hi);
  return relcl_philox4x32_10(c, seed_lo, seed_hi).x >= threshold;
}

/* Tree reductions over a power-of-two work-group, in a fixed order: the result does not
 * depend on scheduling. Every work-item must call them. */
inline float relcl_wg_sum(__local float *red, float v) {
  const int lid = get_local_id(0), n = get_local_size(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = n / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

inline float relcl_wg_max(__local float *red, float v) {
  const int lid = get_local_id(0), n = get_local_size(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = n / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
