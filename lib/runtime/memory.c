/* Device-memory accounting: relcl_memory_stats_get and its counters. */
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- device-memory accounting ---- */

struct relcl__memacct {
  atomic_size_t alloc, alloc_peak, scratch, total_peak;
  atomic_int refs; /* the context and every live relcl_alloc buffer */
};

typedef struct alloc_note {
  relcl__memacct *acct;
  size_t bytes;
} alloc_note;

relcl_status relcl__memacct_create(relcl__memacct **out) {
  relcl__memacct *a = malloc(sizeof *a);
  if (a == NULL) return relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
  atomic_init(&a->alloc, 0);
  atomic_init(&a->alloc_peak, 0);
  atomic_init(&a->scratch, 0);
  atomic_init(&a->total_peak, 0);
  atomic_init(&a->refs, 1);
  *out = a;
  return RELCL_OK;
}

void relcl__memacct_release(relcl__memacct *a) {
  if (a && atomic_fetch_sub(&a->refs, 1) == 1) free(a);
}

static void raise_to(atomic_size_t *peak, size_t v) {
  size_t old = atomic_load(peak);
  while (v > old && !atomic_compare_exchange_weak(peak, &old, v)) {
  }
}

static void memacct_total(relcl__memacct *a) {
  raise_to(&a->total_peak, atomic_load(&a->alloc) + atomic_load(&a->scratch));
}

static void CL_CALLBACK alloc_released(cl_mem mem, void *user) {
  (void)mem;
  alloc_note *note = user;
  atomic_fetch_sub(&note->acct->alloc, note->bytes);
  relcl__memacct_release(note->acct);
  free(note);
}

/* Count a new relcl_alloc buffer until OpenCL deletes it (whenever its last reference goes). */
void relcl__memacct_track(relcl_context *ctx, cl_mem mem, size_t bytes) {
  alloc_note *note = malloc(sizeof *note);
  if (note == NULL) return; /* statistics only: never fail an allocation for them */
  note->acct = ctx->mem;
  note->bytes = bytes;
  atomic_fetch_add(&ctx->mem->refs, 1);
  atomic_fetch_add(&ctx->mem->alloc, bytes);
  if (clSetMemObjectDestructorCallback(mem, alloc_released, note) != CL_SUCCESS) {
    atomic_fetch_sub(&ctx->mem->alloc, bytes);
    relcl__memacct_release(ctx->mem);
    free(note);
    return;
  }
  raise_to(&ctx->mem->alloc_peak, atomic_load(&ctx->mem->alloc));
  memacct_total(ctx->mem);
}

void relcl__mem_note_scratch(relcl_context *ctx) {
  if (ctx->mem == NULL) return; /* a context that failed before its accounts were made */
  atomic_store(&ctx->mem->scratch, ctx->pool.held);
  memacct_total(ctx->mem);
}

relcl_status relcl_memory_stats_get(const relcl_context *ctx, relcl_memory_stats *out) {
  if (ctx == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_memory_stats_get: ctx or out is NULL");
  out->alloc_bytes = atomic_load(&ctx->mem->alloc);
  out->alloc_peak = atomic_load(&ctx->mem->alloc_peak);
  out->scratch_bytes = ctx->pool.held;
  out->scratch_peak = ctx->pool.held_peak;
  out->scratch_used_peak = ctx->pool.used_peak;
  out->total_peak = atomic_load(&ctx->mem->total_peak);
  return RELCL_OK;
}

relcl_status relcl_memory_reset_peaks(relcl_context *ctx) {
  if (ctx == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_memory_reset_peaks: ctx is NULL");
  ctx->pool.held_peak = ctx->pool.held;
  ctx->pool.used_peak = ctx->pool.used;
  size_t alloc = atomic_load(&ctx->mem->alloc);
  atomic_store(&ctx->mem->alloc_peak, alloc);
  atomic_store(&ctx->mem->total_peak, alloc + ctx->pool.held);
  return RELCL_OK;
}
