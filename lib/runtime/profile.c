/* Profiling: RELCL_PROFILE and relcl_profile_*: device time of every kernel, GEMM and copy,
 * by name and by part of a training step. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- profiling ---- */

static int by_time(const void *a, const void *b) {
  double x = ((const struct relcl__prof *)a)->ms, y = ((const struct relcl__prof *)b)->ms;
  return (x < y) - (x > y);
}

/* What a kernel is counted under in a step's breakdown; kernels not named are OTHER. */
relcl_profile_part relcl__kernel_part(const char *name) {
  static const struct {
    const char *name;
    relcl_profile_part part;
  } parts[] = {
      {"attn_fwd_rows", RELCL_PART_ATTENTION_ROWS}, {"attn_drop_rows", RELCL_PART_ATTENTION_ROWS},
      {"attn_bwd_rows", RELCL_PART_ATTENTION_ROWS}, {"attn_step", RELCL_PART_ATTENTION_ROWS},
      /* attention in one kernel a head on CPUs, products included (lib/ops/attention.c) */
      {"attn_fwd_cpu", RELCL_PART_ATTENTION_ROWS},  {"attn_bwd_cpu", RELCL_PART_ATTENTION_ROWS},
      {"ln_fwd", RELCL_PART_LAYER_NORM},            {"ln_bwd", RELCL_PART_LAYER_NORM},
      {"ln_param_partial", RELCL_PART_LAYER_NORM},  {"ln_bwd_params", RELCL_PART_LAYER_NORM},
      {"dropout_apply", RELCL_PART_DROPOUT},
      {"xent_rows", RELCL_PART_LOSS},               {"argmax_rows", RELCL_PART_LOSS},
      {"adam_update", RELCL_PART_OPTIMIZER},        {"sum_block", RELCL_PART_OPTIMIZER},
      {"fill", RELCL_PART_COPIES},                  {"heads_split", RELCL_PART_COPIES},
      {"transpose_batch", RELCL_PART_COPIES}, /* gemm.c relcl__panels_keep_all */
      {"heads_merge", RELCL_PART_COPIES},           {"cache_put", RELCL_PART_COPIES},
      {"cache_gather", RELCL_PART_COPIES},
      {"table_grad_partial", RELCL_PART_RELATIVE_GEMM}, /* attention.c table_grad */
      {"table_grads_cpu", RELCL_PART_RELATIVE_GEMM},    /* attention.c shared_table_grads */
      {"labels_shared", RELCL_PART_RELATIVE_GEMM},      /* attention.c labels_from */
      {"table_window_t", RELCL_PART_RELATIVE_GEMM},
      {"add_labels_shared", RELCL_PART_RELATIVE_GEMM}, /* attention.c add_from_labels */
  };
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
    if (strcmp(parts[i].name, name) == 0) return parts[i].part;
  return RELCL_PART_OTHER;
}

const char *relcl_profile_part_name(relcl_profile_part part) {
  static const char *const names[RELCL_PART_COUNT] = {
      "content GEMMs", "relative GEMMs", "attention rows", "layer norm", "dropout",
      "loss",          "optimizer",      "copies",         "other element-wise"};
  return (unsigned)part < RELCL_PART_COUNT ? names[part] : "unknown";
}

static int prof_entry(relcl_context *ctx, const char *name, relcl_profile_part part,
                      const size_t shape[4]) {
  for (int i = 0; i < ctx->n_prof; i++)
    if (ctx->prof[i].part == part && strcmp(ctx->prof[i].name, name) == 0) return i;
  if (ctx->n_prof == (int)(sizeof ctx->prof / sizeof *ctx->prof)) return -1;
  struct relcl__prof *e = &ctx->prof[ctx->n_prof];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", name);
  e->part = part;
  if (shape) e->m = shape[0], e->n = shape[1], e->k = shape[2], e->batch = shape[3];
  return ctx->n_prof++;
}

/* Wait for the pending commands and add their times. The queue is in order, so waiting
 * costs nothing that relcl_finish would not. */
void relcl__profile_resolve(relcl_context *ctx) {
  for (int i = 0; i < ctx->n_pending; i++) {
    struct relcl__pending *p = &ctx->pending[i];
    cl_ulong t0 = 0, t1 = 0;
    if (clWaitForEvents(1, &p->ev) == CL_SUCCESS &&
        clGetEventProfilingInfo(p->start ? p->start : p->ev, CL_PROFILING_COMMAND_START,
                                sizeof t0, &t0, NULL) == CL_SUCCESS &&
        clGetEventProfilingInfo(p->ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) ==
            CL_SUCCESS &&
        t1 >= t0) {
      double ms = (double)(t1 - t0) * 1e-6;
      if (p->entry >= 0) {
        ctx->prof[p->entry].ms += ms;
        ctx->prof[p->entry].calls++;
      }
      ctx->prof_commands++;
      ctx->prof_busy_ms += ms;
      ctx->prof_part_ms[p->part] += ms;
      if (ctx->prof_first == 0 || t0 < ctx->prof_first) ctx->prof_first = t0;
      if (t1 > ctx->prof_last) ctx->prof_last = t1;
    }
    clReleaseEvent(p->ev);
    if (p->start) clReleaseEvent(p->start);
  }
  ctx->n_pending = 0;
}

void relcl__profile_event(relcl_context *ctx, const char *name, relcl_profile_part part,
                          const size_t shape[4], cl_event ev) {
  relcl__profile_span(ctx, name, part, shape, NULL, ev);
}

void relcl__profile_span(relcl_context *ctx, const char *name, relcl_profile_part part,
                         const size_t shape[4], cl_event start, cl_event ev) {
  if (ev == NULL || !ctx->profile) {
    if (ev) clReleaseEvent(ev);
    if (start) clReleaseEvent(start);
    return;
  }
  /* bounded memory when nobody calls relcl_finish: read what is pending now and then */
  if (ctx->n_pending == ctx->cap_pending) {
    int cap = ctx->cap_pending ? 2 * ctx->cap_pending : 1024;
    void *grown = cap <= (1 << 16) ? realloc(ctx->pending, (size_t)cap * sizeof *ctx->pending)
                                   : NULL;
    if (grown) {
      ctx->pending = grown;
      ctx->cap_pending = cap;
    } else {
      relcl__profile_resolve(ctx);
    }
  }
  struct relcl__pending *p = &ctx->pending[ctx->n_pending++];
  p->start = start;
  p->ev = ev;
  p->part = part;
  p->entry = prof_entry(ctx, name, part, shape);
}

relcl_status relcl_profile_enable(relcl_context *ctx, int on) {
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_enable: ctx is NULL");
  if (on && !ctx->queue_profiling && ctx->borrowed) /* the queue is the caller's */
    return relcl__fail(RELCL_ERR_INVALID_ARG,
                       "relcl_profile_enable: the caller's queue was created without "
                       "CL_QUEUE_PROFILING_ENABLE");
  if (on && !ctx->queue_profiling) {
    /* OpenCL 1.2 cannot turn profiling on for an existing queue: swap in a new one */
    cl_int err = clFinish(ctx->queue);
    if (err != CL_SUCCESS) return relcl__cl_fail(err, "clFinish");
    cl_command_queue q =
        clCreateCommandQueue(ctx->cl, ctx->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) return relcl__cl_fail(err, "clCreateCommandQueue (profiling)");
    clReleaseCommandQueue(ctx->queue);
    ctx->queue = q;
    ctx->queue_profiling = true;
  }
  ctx->profile = on != 0;
  return RELCL_OK;
}

relcl_status relcl_profile_reset(relcl_context *ctx) {
  if (ctx == NULL) return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_reset: ctx is NULL");
  relcl__profile_resolve(ctx);
  ctx->n_prof = 0;
  ctx->prof_commands = 0;
  ctx->prof_busy_ms = 0;
  memset(ctx->prof_part_ms, 0, sizeof ctx->prof_part_ms);
  ctx->prof_first = ctx->prof_last = 0;
  return RELCL_OK;
}

int relcl_profile_count(relcl_context *ctx) {
  if (ctx == NULL) {
    relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_count: ctx is NULL");
    return -1;
  }
  relcl__profile_resolve(ctx);
  return ctx->n_prof;
}

relcl_status relcl_profile_entry_get(relcl_context *ctx, int i, relcl_profile_entry *out) {
  if (ctx == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_entry_get: ctx or out is NULL");
  relcl__profile_resolve(ctx);
  if (i < 0 || i >= ctx->n_prof)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_entry_get: index %d not in 0..%d",
                       i, ctx->n_prof - 1);
  const struct relcl__prof *e = &ctx->prof[i];
  *out = (relcl_profile_entry){e->name, e->part, e->ms, e->calls, e->m, e->n, e->k, e->batch};
  return RELCL_OK;
}

relcl_status relcl_profile_summary_get(relcl_context *ctx, relcl_profile_summary *out) {
  if (ctx == NULL || out == NULL)
    return relcl__fail(RELCL_ERR_INVALID_ARG, "relcl_profile_summary_get: ctx or out is NULL");
  relcl__profile_resolve(ctx);
  out->commands = ctx->prof_commands;
  out->busy_ms = ctx->prof_busy_ms;
  out->span_ms =
      ctx->prof_last > ctx->prof_first ? (double)(ctx->prof_last - ctx->prof_first) * 1e-6 : 0;
  memcpy(out->part_ms, ctx->prof_part_ms, sizeof out->part_ms);
  return RELCL_OK;
}

void relcl__profile_print(relcl_context *ctx) {
  relcl__profile_resolve(ctx);
  qsort(ctx->prof, (size_t)ctx->n_prof, sizeof *ctx->prof, by_time);
  double total = ctx->prof_busy_ms;
  fprintf(stderr, "relcl profile (RELCL_PROFILE): %.1f ms of device time\n", total);
  for (int i = 0; i < ctx->n_prof; i++)
    fprintf(stderr, "  %10.1f ms %5.1f%% %8ld calls  %-18s %s\n", ctx->prof[i].ms,
            100.0 * ctx->prof[i].ms / (total > 0 ? total : 1), ctx->prof[i].calls,
            relcl_profile_part_name(ctx->prof[i].part), ctx->prof[i].name);
}
