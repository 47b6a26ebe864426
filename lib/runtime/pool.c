/* Scratch memory: a small set of device buffers reused across calls. A request takes the
 * smallest free buffer that fits, or creates one; in steady state no call allocates.
 * Buffers given back may still be in use by enqueued commands: that is safe because the
 * context's queue is in order. */
#include "internal.h"

/* Mark a slot in use by a request of `requested` bytes (for relcl_memory_stats). */
static void take(relcl__pool *pool, int slot, size_t requested) {
  pool->slot[slot].in_use = true;
  pool->slot[slot].requested = requested;
  pool->used += requested;
  if (pool->used > pool->used_peak) pool->used_peak = pool->used;
}

relcl_status relcl__pool_get(relcl_context *ctx, size_t bytes, cl_mem *out) {
  relcl__pool *pool = &ctx->pool;
  bytes = (bytes + 3) & ~(size_t)3;
  if (bytes == 0) bytes = 4;
  int best = -1, empty = -1, smallest_free = -1;
  for (int i = 0; i < RELCL__POOL_SLOTS; i++) {
    relcl__pool_slot *s = &pool->slot[i];
    if (s->mem == NULL) {
      if (empty < 0) empty = i;
    } else if (!s->in_use) {
      if (s->bytes >= bytes && (best < 0 || s->bytes < pool->slot[best].bytes)) best = i;
      if (smallest_free < 0 || s->bytes < pool->slot[smallest_free].bytes) smallest_free = i;
    }
  }
  if (best >= 0) {
    take(pool, best, bytes);
    *out = pool->slot[best].mem;
    return RELCL_OK;
  }
  /* no free buffer fits: make a new one, replacing the smallest free one if full */
  int slot = empty >= 0 ? empty : smallest_free;
  if (slot < 0)
    return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "scratch pool exhausted (%d buffers in use)",
                       RELCL__POOL_SLOTS);
  if (pool->slot[slot].mem) {
    clReleaseMemObject(pool->slot[slot].mem);
    pool->slot[slot].mem = NULL;
    pool->held -= pool->slot[slot].bytes;
    relcl__mem_note_scratch(ctx);
  }
  if (bytes > ctx->max_alloc)
    return relcl__fail(RELCL_ERR_OUT_OF_MEMORY,
                       "scratch buffer of %zu bytes exceeds the device's largest allocation "
                       "(%llu bytes): use a smaller batch or sequence length",
                       bytes, (unsigned long long)ctx->max_alloc);
  cl_int err;
  cl_mem mem = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) return relcl__cl_fail(err, "clCreateBuffer (scratch)");
  /* Zeroed once: a request may get a larger buffer than it asked for, and CLBlast's tiles
   * may read (and then discard) entries past a matrix's end; they must not be garbage. */
  relcl_status st = relcl__fill(ctx, relcl_buf_at(mem, 0), 0.0f, bytes / 4);
  if (st != RELCL_OK) {
    clReleaseMemObject(mem);
    return st;
  }
  pool->slot[slot].mem = mem;
  pool->slot[slot].bytes = bytes;
  pool->held += bytes;
  if (pool->held > pool->held_peak) pool->held_peak = pool->held;
  relcl__mem_note_scratch(ctx);
  take(pool, slot, bytes);
  pool->created++;
  *out = mem;
  return RELCL_OK;
}

void relcl__pool_put(relcl_context *ctx, cl_mem mem) {
  if (mem == NULL) return;
  for (int i = 0; i < RELCL__POOL_SLOTS; i++) {
    relcl__pool_slot *s = &ctx->pool.slot[i];
    if (s->mem == mem && s->in_use) {
      s->in_use = false;
      ctx->pool.used -= s->requested;
      s->requested = 0;
    }
  }
}

void relcl__pool_destroy(relcl__pool *pool) {
  for (int i = 0; i < RELCL__POOL_SLOTS; i++)
    if (pool->slot[i].mem) clReleaseMemObject(pool->slot[i].mem);
}
