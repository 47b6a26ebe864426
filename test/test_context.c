/* A caller's own cl_context and queue (relcl_context_create_from_cl): relcl's results on it
 * are the bits of a relcl-made context, relcl neither retains nor releases the caller's
 * objects, bad queues are refused; relcl_last_error_code() carries the raw OpenCL code; and
 * contexts used from two threads at once (relcl.h's thread-safety rule) give the bits of
 * one thread. Public API only: linked against the shared library. */
#include <pthread.h>
#include <time.h>

#include "testutil.h"

enum { B = 2, H = 2, N = 7, D = 8, K = 3 };
enum { NX = B * H * N * D, NW = (2 * K + 1) * D };

static float hq[NX], hk[NX], hv[NX], hwk[NW], hwv[NW];

/* One relative self-attention forward on ctx; out gets Z. */
static relcl_status attend(relcl_context *ctx, float *out) {
  cl_mem m[6] = {0};
  const size_t n[6] = {NX, NX, NX, NW, NW, NX};
  const float *src[5] = {hq, hk, hv, hwk, hwv};
  relcl_status st = RELCL_OK;
  for (int i = 0; i < 6 && st == RELCL_OK; i++) st = relcl_alloc(ctx, n[i], &m[i]);
  for (int i = 0; i < 5 && st == RELCL_OK; i++)
    st = relcl_write(ctx, relcl_buf_at(m[i], 0), src[i], n[i]);
  relcl_attn_desc desc = relcl_attn_desc_self(B, H, N, D, K);
  if (st == RELCL_OK)
    st = relcl_attn_forward(ctx, &desc, relcl_buf_at(m[0], 0), relcl_buf_at(m[1], 0),
                            relcl_buf_at(m[2], 0), relcl_buf_at(m[3], 0), relcl_buf_at(m[4], 0),
                            RELCL_BUF_NONE, relcl_buf_at(m[5], 0), RELCL_BUF_NONE);
  if (st == RELCL_OK) st = relcl_read(ctx, relcl_buf_at(m[5], 0), out, NX);
  for (int i = 0; i < 6; i++)
    if (m[i]) clReleaseMemObject(m[i]);
  return st;
}

static cl_uint refcount_queue(cl_command_queue q) {
  cl_uint n = 0;
  clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, NULL);
  return n;
}

static cl_uint refcount_context(cl_context c) {
  cl_uint n = 0;
  clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL);
  return n;
}

/* The caller's own cl_context and in-order queue on dev. */
static cl_context own_cl(cl_platform_id plat, cl_device_id dev, cl_command_queue *queue) {
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  cl_context cl = clCreateContext(props, 1, &dev, NULL, NULL, &err);
  if (err != CL_SUCCESS) tu_die_status(RELCL_ERR_OPENCL, "clCreateContext");
  *queue = clCreateCommandQueue(cl, dev, 0, &err);
  if (err != CL_SUCCESS) tu_die_status(RELCL_ERR_OPENCL, "clCreateCommandQueue");
  return cl;
}

typedef struct worker {
  float z[NX];
  int rounds;
  relcl_status st;
} worker;

/* Each thread: its own context, several rounds of attention, the last result kept. */
static void *work(void *arg) {
  worker *w = arg;
  relcl_context *ctx = NULL;
  w->st = relcl_context_create(&ctx, NULL);
  for (int r = 0; r < w->rounds && w->st == RELCL_OK; r++) w->st = attend(ctx, w->z);
  relcl_context_destroy(ctx);
  return NULL;
}

int main(void) {
  tu_fill(hq, NX, 1);
  tu_fill(hk, NX, 2);
  tu_fill(hv, NX, 3);
  tu_fill(hwk, NW, 4);
  tu_fill(hwv, NW, 5);

  /* the reference bits: a context relcl makes itself */
  static float zref[NX], zown[NX];
  relcl_context *ref = NULL;
  TU_OK(relcl_context_create(&ref, NULL));
  TU_OK(attend(ref, zref));
  double norm = 0;
  for (int i = 0; i < NX; i++) norm += fabs(zref[i]);
  tu_check(norm > 1.0, "reference output is not zero (sum |z| = %.3f)", norm);

  /* the caller's own context and queue, on the same device */
  cl_device_id dev = relcl_context_device(ref);
  cl_platform_id plat = NULL;
  clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
  cl_int err;
  cl_command_queue queue;
  cl_context cl = own_cl(plat, dev, &queue);
  cl_uint q_refs = refcount_queue(queue), c_refs = refcount_context(cl);

  relcl_context *own = NULL;
  relcl_status st = relcl_context_create_from_cl(&own, cl, queue);
  tu_check(st == RELCL_OK, "relcl_context_create_from_cl: %s", relcl_last_error());
  if (st != RELCL_OK) return tu_finish();
  tu_check(relcl_context_cl(own) == cl && relcl_context_queue(own) == queue &&
               relcl_context_device(own) == dev,
           "the context reports the caller's cl_context, queue and device");
  TU_OK(attend(own, zown));
  /* profiling cannot swap the caller's queue for one of its own */
  st = relcl_profile_enable(own, 1);
  tu_check(st == RELCL_ERR_INVALID_ARG && relcl_context_queue(own) == queue,
           "relcl_profile_enable on a caller's queue without profiling is refused, the queue "
           "kept: %s", relcl_last_error());
  tu_check(memcmp(zown, zref, sizeof zref) == 0,
           "attention on the caller's queue gives the bits of relcl's own context");

  /* a buffer of another cl_context: OpenCL refuses it, the raw code is kept as a number */
  cl_mem foreign = NULL;
  TU_OK(relcl_alloc(ref, 16, &foreign));
  float sixteen[16] = {0};
  st = relcl_write(own, relcl_buf_at(foreign, 0), sixteen, 16);
  tu_check(st == RELCL_ERR_OPENCL && relcl_last_error_code() == CL_INVALID_CONTEXT,
           "a cl_mem of another context: RELCL_ERR_OPENCL, relcl_last_error_code() %d == "
           "CL_INVALID_CONTEXT (%d): %s",
           relcl_last_error_code(), CL_INVALID_CONTEXT, relcl_last_error());
  st = relcl_alloc(own, 0, &foreign);
  tu_check(st == RELCL_ERR_INVALID_ARG && relcl_last_error_code() == 0,
           "relcl's own argument check: relcl_last_error_code() is 0");
  clReleaseMemObject(foreign);

  relcl_context_destroy(own);
  /* PoCL's worker threads release a finished command's event, which holds its queue, a moment
   * after clFinish has returned: one fresh-clone CI run saw the count at 2 right after the
   * destroy. Wait up to a second for it to settle; a reference relcl kept would not. */
  for (int i = 0; i < 100 && refcount_queue(queue) != q_refs; i++)
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  /* The context's count may stay above c_refs while another relcl context lives (ref here):
   * CLBlast caches its compiled GEMM programs per cl_context, each holding a reference. The
   * last relcl context clears that cache: checked at the end. */
  tu_check(refcount_queue(queue) == q_refs && refcount_context(cl) >= c_refs,
           "after destroy the caller's queue holds %u reference(s) as before (%u), the "
           "context at least its %u (%u)",
           refcount_queue(queue), q_refs, c_refs, refcount_context(cl));
  /* still the caller's: usable, and the caller's release is the last one */
  cl_mem mine = clCreateBuffer(cl, CL_MEM_READ_WRITE, 64, NULL, &err);
  tu_check(err == CL_SUCCESS && clEnqueueWriteBuffer(queue, mine, CL_TRUE, 0, 64, sixteen, 0,
                                                     NULL, NULL) == CL_SUCCESS,
           "the caller's queue still works after relcl_context_destroy");
  if (mine) clReleaseMemObject(mine);

  /* refused queues */
  relcl_context *bad = (relcl_context *)&bad;
  st = relcl_context_create_from_cl(&bad, cl, NULL);
  tu_check(st == RELCL_ERR_INVALID_ARG && bad == NULL, "a NULL queue is refused");
  st = relcl_context_create_from_cl(&bad, relcl_context_cl(ref), queue);
  tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "another cl_context"),
           "a queue of another cl_context is refused: %s", relcl_last_error());
  cl_command_queue ooo =
      clCreateCommandQueue(cl, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
  if (err == CL_SUCCESS) {
    st = relcl_context_create_from_cl(&bad, cl, ooo);
    tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "in order"),
             "an out-of-order queue is refused: %s", relcl_last_error());
    clReleaseCommandQueue(ooo);
  } else {
    printf("skip out-of-order queue: the device has none\n");
  }
  tu_check(clReleaseCommandQueue(queue) == CL_SUCCESS && clReleaseContext(cl) == CL_SUCCESS,
           "the caller releases its own queue and context");

  /* two threads, each with its own context, at the same time */
  static worker w[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    w[i].rounds = 4;
    if (pthread_create(&t[i], NULL, work, &w[i]) != 0) tu_die_status(RELCL_ERR_INVALID_ARG, "pthread_create");
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++)
    tu_check(w[i].st == RELCL_OK && memcmp(w[i].z, zref, sizeof zref) == 0,
             "thread %d with its own context: the single-thread bits (%s)", i,
             relcl_status_str(w[i].st));

  relcl_context_destroy(ref);

  /* The last relcl context of the process takes CLBlast's programs with it: after it, the
   * caller's cl_context holds only its own reference again, and a driver never sees a
   * program released after its context (at exit, Oclgrind 21.10 corrupts memory then). */
  cl = own_cl(plat, dev, &queue);
  c_refs = refcount_context(cl);
  TU_OK(relcl_context_create_from_cl(&own, cl, queue));
  TU_OK(attend(own, zown));
  cl_uint during = refcount_context(cl);
  relcl_context_destroy(own);
  tu_check(refcount_context(cl) == c_refs,
           "the last relcl context released CLBlast's programs: the caller's cl_context holds "
           "%u reference(s) as before relcl (%u; %u while relcl's context lived)",
           refcount_context(cl), c_refs, during);
  clReleaseCommandQueue(queue);
  clReleaseContext(cl);
  return tu_finish();
}
