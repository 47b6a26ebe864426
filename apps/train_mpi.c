/* relcl-train's data parallelism over MPI: see train_mpi.h for what it promises. MPI is the
 * transport; this file only decides who computes which micro-batch and in which order the
 * gradients are added. */
#include "train_mpi.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if RELCL_HAVE_MPI
#include <mpi.h>
#endif

#define HOST_LEN 64
/* elements per MPI call: counts are int */
#define CHUNK ((size_t)1 << 26)
/* per-rank numbers gathered after every update */
enum { M_COMPUTE, M_MICROS, M_WAIT, M_N };

static struct {
  bool active;
  int rank, size, local_rank;
  char *hosts; /* size * HOST_LEN */
  char where[HOST_LEN + 48];
  /* this update */
  int *counts;   /* micro-batches per rank */
  double *ema;   /* seconds per micro-batch per rank, smoothed */
  int share, done;
  size_t nparam;
  float *acc;    /* the running sum */
  float *slots;  /* ranks > 0: their micro-batches' gradients until the sum arrives */
  size_t nslots;
  float *host; /* scratch for hashes and broadcasts of parameters */
  size_t host_n;
  double *slot_stats;
  double acc_stats[3];
  double t_step, t_mark, compute, wait;
  double *metrics; /* size * M_N, gathered */
  /* since the last log line */
  uint64_t iv_steps, iv_repairs;
  double iv_wall, iv_micros, *iv_compute, *iv_micro_r, *iv_wait;
  /* test hooks (RELCL_TEST_MPI_*): a slow rank, a dying rank, a drifting rank */
  int slow_rank, kill_rank, perturb_rank;
  double slow_s;
  uint64_t kill_step, perturb_step;
} S = {.slow_rank = -1, .kill_rank = -1, .perturb_rank = -1};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *host_of(int rank) { return S.hosts + (size_t)rank * HOST_LEN; }

#if RELCL_HAVE_MPI
/* "R:X" test hooks */
static void parse_hook(const char *name, int *rank, double *x) {
  const char *v = getenv(name);
  char *end = NULL;
  if (!v || !*v) return;
  long r = strtol(v, &end, 10);
  if (*end != ':') return;
  *rank = (int)r;
  *x = strtod(end + 1, NULL);
}
#endif

/* ---- the few MPI calls, timed as waiting ---- */

static void x_bcast(void *buf, size_t bytes, int root) {
#if RELCL_HAVE_MPI
  double t = now();
  for (size_t o = 0; o < bytes; o += 4 * CHUNK) {
    size_t n = bytes - o < 4 * CHUNK ? bytes - o : 4 * CHUNK;
    MPI_Bcast((char *)buf + o, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
  }
  S.wait += now() - t;
#else
  (void)buf, (void)bytes, (void)root;
#endif
}

static void x_send(const float *buf, size_t n, int to) {
#if RELCL_HAVE_MPI
  double t = now();
  for (size_t o = 0; o < n; o += CHUNK)
    MPI_Send(buf + o, (int)(n - o < CHUNK ? n - o : CHUNK), MPI_FLOAT, to, 1, MPI_COMM_WORLD);
  S.wait += now() - t;
#else
  (void)buf, (void)n, (void)to;
#endif
}

static void x_recv(float *buf, size_t n, int from) {
#if RELCL_HAVE_MPI
  double t = now();
  for (size_t o = 0; o < n; o += CHUNK)
    MPI_Recv(buf + o, (int)(n - o < CHUNK ? n - o : CHUNK), MPI_FLOAT, from, 1, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
  S.wait += now() - t;
#else
  (void)buf, (void)n, (void)from;
#endif
}

/* each rank's `bytes` bytes, in rank order, into out (size * bytes) */
static void x_allgather(const void *mine, void *out, size_t bytes) {
#if RELCL_HAVE_MPI
  double t = now();
  MPI_Allgather(mine, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  S.wait += now() - t;
#else
  memcpy(out, mine, bytes);
#endif
}

/* ---- start and end ---- */

static int env_size(void) {
  const char *v = getenv("OMPI_COMM_WORLD_SIZE");
  if (!v) v = getenv("PMI_SIZE");
  return v ? atoi(v) : 0;
}

int train_mpi_init(int *argc, char ***argv) {
  int n = env_size();
#if RELCL_HAVE_MPI
  if (n <= 0 && !getenv("PMIX_RANK")) return 0; /* not started by an MPI launcher */
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &S.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &S.size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, S.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &S.local_rank);
  MPI_Comm_free(&node);
  char name[MPI_MAX_PROCESSOR_NAME] = "", mine[HOST_LEN] = "";
  int len = 0;
  MPI_Get_processor_name(name, &len);
  memcpy(mine, name, strnlen(name, sizeof mine - 1)); /* a longer host name is cut */
  S.hosts = calloc((size_t)S.size, HOST_LEN);
  S.counts = calloc((size_t)S.size, sizeof *S.counts);
  S.ema = calloc((size_t)S.size, sizeof *S.ema);
  S.metrics = calloc((size_t)S.size * M_N, sizeof *S.metrics);
  S.iv_compute = calloc((size_t)S.size, sizeof *S.iv_compute);
  S.iv_micro_r = calloc((size_t)S.size, sizeof *S.iv_micro_r);
  S.iv_wait = calloc((size_t)S.size, sizeof *S.iv_wait);
  if (!S.hosts || !S.counts || !S.ema || !S.metrics || !S.iv_compute || !S.iv_micro_r ||
      !S.iv_wait) {
    fprintf(stderr, "relcl-train: rank %d: out of host memory\n", S.rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Allgather(mine, HOST_LEN, MPI_CHAR, S.hosts, HOST_LEN, MPI_CHAR, MPI_COMM_WORLD);
  S.active = true;
  if (S.size > 1) snprintf(S.where, sizeof S.where, "rank %d on %s: ", S.rank, mine);
  /* only rank 0 talks; the others' errors still reach stderr */
  if (S.rank != 0 && !freopen("/dev/null", "w", stdout)) fclose(stdout);
  double x = 0;
  parse_hook("RELCL_TEST_MPI_SLOW", &S.slow_rank, &S.slow_s);
  parse_hook("RELCL_TEST_MPI_KILL", &S.kill_rank, &x);
  S.kill_step = (uint64_t)x;
  parse_hook("RELCL_TEST_MPI_PERTURB", &S.perturb_rank, &x);
  S.perturb_step = (uint64_t)x;
  return 0;
#else
  (void)argc, (void)argv;
  if (n > 1) {
    fprintf(stderr,
            "relcl-train: started as one of %d MPI ranks, but this relcl-train was built "
            "without MPI (meson setup -Dmpi=enabled, with libopenmpi-dev): each rank would "
            "train alone, so none does\n",
            n);
    return 1;
  }
  return 0;
#endif
}

void train_mpi_finalize(int rc, bool together) {
  if (!S.active) return;
#if RELCL_HAVE_MPI
  fflush(stdout);
  fflush(stderr);
  if (rc != 0 && !together && S.size > 1) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
#else
  (void)rc, (void)together;
#endif
  free(S.hosts), free(S.counts), free(S.ema), free(S.metrics);
  free(S.iv_compute), free(S.iv_micro_r), free(S.iv_wait);
  free(S.acc), free(S.slots), free(S.slot_stats), free(S.host);
  S.active = false;
}

bool train_mpi_active(void) { return S.active; }
int train_mpi_rank(void) { return S.active ? S.rank : 0; }
int train_mpi_size(void) { return S.active ? S.size : 1; }
const char *train_mpi_where(void) { return S.where; }

const char *train_mpi_device(const char *device, const char *device_map, char *buf, size_t size,
                             bool *bad, char *err, size_t errsize) {
  *bad = false;
  const char *env = getenv("RELCL_DEVICE");
  if (device || (env && *env) || !device_map || !*device_map) return device;
  int n = 1;
  for (const char *p = device_map; *p; p++) n += *p == ',';
  int want = train_mpi_active() ? S.local_rank % n : 0;
  const char *p = device_map;
  for (int i = 0; i < want; i++) p = strchr(p, ',') + 1;
  size_t len = strcspn(p, ",");
  if (len == 0 || len >= size) {
    snprintf(err, errsize, "--device-map %s: entry %d is %s", device_map, want + 1,
             len ? "too long" : "empty");
    *bad = true;
    return NULL;
  }
  memcpy(buf, p, len);
  buf[len] = '\0';
  return buf;
}

/* ---- agreement ---- */

#define FNV_BASIS 0xcbf29ce484222325ull
static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint64_t train_mpi_hash_str(const char *s) { return s ? fnv(FNV_BASIS, s, strlen(s)) : 0; }

uint64_t train_mpi_hash_file(const char *path) {
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (!f) return 0;
  uint64_t h = FNV_BASIS;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = fnv(h, buf, n);
  fclose(f);
  return h;
}

int train_mpi_agree(const char *const *names, const uint64_t *hashes, int n) {
  if (!S.active || S.size == 1) return 0;
  uint64_t *all = malloc((size_t)S.size * (size_t)n * sizeof *all);
  if (!all) {
    fprintf(stderr, "relcl-train: %sout of host memory\n", S.where);
    return 1;
  }
  x_allgather(hashes, all, (size_t)n * sizeof *all);
  int bad = 0;
  for (int r = 1; r < S.size && !bad; r++)
    for (int i = 0; i < n && !bad; i++)
      if (all[(size_t)r * (size_t)n + (size_t)i] != all[i]) {
        bad = 1;
        if (S.rank == 0)
          fprintf(stderr,
                  "relcl-train: rank %d on %s and rank 0 on %s differ in %s: every rank must "
                  "start with the same; nothing was trained\n",
                  r, host_of(r), host_of(0), names[i]);
      }
  free(all);
  return bad;
}

int train_mpi_bcast_bytes(void **buf, size_t *size) {
  if (!S.active || S.size == 1) return 0;
  uint64_t n = *size;
  x_bcast(&n, sizeof n, 0);
  if (S.rank != 0) {
    *buf = malloc(n ? n : 1);
    *size = n;
  }
  int all = 0;
#if RELCL_HAVE_MPI
  int ok = *buf != NULL;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
#endif
  if (!all) return 1;
  x_bcast(*buf, n, 0);
  return 0;
}

/* nparam floats of host scratch for parameter hashes and broadcasts */
static float *scratch(size_t np) {
  if (S.host_n < np) {
    float *p = realloc(S.host, np * sizeof *p);
    if (!p) return NULL;
    S.host = p;
    S.host_n = np;
  }
  return S.host;
}

relcl_status train_mpi_sync_params(relcl_model *model) {
  size_t np = relcl_model_param_count(model);
  float *host = scratch(np);
  if (!host) return RELCL_ERR_OUT_OF_MEMORY;
  relcl_arena arenas[3] = {RELCL_ARENA_PARAMS, RELCL_ARENA_ADAM_M, RELCL_ARENA_ADAM_V};
  relcl_status st = RELCL_OK;
  for (int k = 0; k < 3; k++) {
    /* rank 0's read failing must not leave the others waiting: it aborts the job */
    if (S.rank == 0 && (st = relcl_model_arena_read(model, arenas[k], host)) != RELCL_OK)
      return st;
    x_bcast(host, np * sizeof *host, 0);
    if (S.rank != 0 && (st = relcl_model_arena_write(model, arenas[k], host)) != RELCL_OK)
      return st;
  }
  return RELCL_OK;
}

/* ---- one update ---- */

void train_mpi_agree_stop(bool *timeup, bool *early, bool *signaled) {
  if (!S.active || S.size == 1) return;
  int all[3] = {0, 0, 0};
#if RELCL_HAVE_MPI
  int mine[3] = {*timeup, *early, *signaled};
  double t = now();
  /* root's clock and validation decide; any rank's signal stops everyone */
  if (S.rank != 0) mine[0] = mine[1] = 0;
  MPI_Allreduce(mine, all, 3, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  S.wait += now() - t;
#endif
  *timeup = all[0], *early = all[1], *signaled = all[2];
}

/* Shares in proportion to each rank's speed (1 / smoothed seconds per micro-batch), at least
 * one each, rounded by largest remainders; the same arithmetic on the same gathered numbers
 * on every rank, so every rank computes the same shares. */
static void balance_counts(int total) {
  double wsum = 0;
  for (int r = 0; r < S.size; r++) wsum += 1.0 / S.ema[r];
  int given = 0;
  double *frac = malloc((size_t)S.size * sizeof *frac);
  if (!frac) return; /* keep the previous shares */
  for (int r = 0; r < S.size; r++) {
    double ideal = (double)total * (1.0 / S.ema[r]) / wsum;
    int whole = (int)ideal;
    S.counts[r] = whole < 1 ? 1 : whole;
    frac[r] = ideal - (double)S.counts[r];
    given += S.counts[r];
  }
  for (; given != total; given += given < total ? 1 : -1) {
    /* short: one more to the rank furthest below its ideal; over (ranks raised to one):
     * one less from the rank furthest above it that has more than one */
    int pick = -1;
    for (int r = 0; r < S.size; r++) {
      if (given > total && S.counts[r] <= 1) continue;
      if (pick < 0 || (given < total ? frac[r] > frac[pick] : frac[r] < frac[pick])) pick = r;
    }
    S.counts[pick] += given < total ? 1 : -1;
    frac[pick] += given < total ? -1 : 1;
  }
  free(frac);
}

int train_mpi_share(int accum, bool balance, uint64_t step, int *first, int *count) {
  *first = 0;
  *count = accum;
  if (!S.active) return accum;
  int total = S.size * accum;
  bool measured = S.ema[0] > 0;
  if (balance && measured && S.size > 1) balance_counts(total);
  else
    for (int r = 0; r < S.size; r++) S.counts[r] = accum;
  for (int r = 0; r < S.rank; r++) *first += S.counts[r];
  *count = S.counts[S.rank];
  S.share = *count;
  S.done = 0;
  S.compute = 0;
  S.wait = 0;
  memset(S.acc_stats, 0, sizeof S.acc_stats);
  S.t_step = S.t_mark = now();
  if (S.rank == S.kill_rank && step == S.kill_step) {
    fprintf(stderr, "relcl-train: %s(RELCL_TEST_MPI_KILL) killing myself at step %llu\n",
            S.where, (unsigned long long)step);
    raise(SIGKILL);
  }
  return total;
}

static relcl_status grow(relcl_model *model) {
  size_t np = relcl_model_param_count(model);
  if (S.nparam != np || !S.acc) {
    free(S.acc);
    S.acc = malloc(np * sizeof *S.acc);
    S.nparam = np;
    free(S.slots), S.slots = NULL, S.nslots = 0;
    free(S.slot_stats), S.slot_stats = NULL;
    if (!S.acc) return RELCL_ERR_OUT_OF_MEMORY;
  }
  /* rank 0 folds as it goes (one scratch slot); the others keep each micro-batch */
  size_t want = S.rank == 0 ? 1 : (size_t)S.share;
  if (!S.slots || want > S.nslots) {
    float *s = realloc(S.slots, (want ? want : 1) * np * sizeof *s);
    double *ss = realloc(S.slot_stats, (want ? want : 1) * 3 * sizeof *ss);
    if (s) S.slots = s;
    if (ss) S.slot_stats = ss;
    if (!s || !ss) return RELCL_ERR_OUT_OF_MEMORY;
    S.nslots = want;
  }
  return RELCL_OK;
}

relcl_status train_mpi_micro_done(relcl_model *model, relcl_model_stats *sm) {
  relcl_status st = grow(model);
  if (st != RELCL_OK) return st;
  size_t np = S.nparam;
  float *dst = S.rank == 0 ? (S.done == 0 ? S.acc : S.slots) : S.slots + (size_t)S.done * np;
  if ((st = relcl_model_arena_read(model, RELCL_ARENA_GRADS, dst)) != RELCL_OK ||
      (st = relcl_model_zero_grad(model)) != RELCL_OK)
    return st;
  double v[3] = {sm->loss_sum, sm->nll_sum, (double)sm->tokens};
  if (S.rank == 0) {
    if (S.done > 0)
      for (size_t i = 0; i < np; i++) S.acc[i] += S.slots[i];
    for (int k = 0; k < 3; k++) S.acc_stats[k] += v[k];
  } else {
    memcpy(S.slot_stats + 3 * (size_t)S.done, v, sizeof v);
  }
  S.done++;
  memset(sm, 0, sizeof *sm);
  if (S.rank == S.slow_rank && S.slow_s > 0) {
    struct timespec ts = {(time_t)S.slow_s, (long)((S.slow_s - (double)(time_t)S.slow_s) * 1e9)};
    nanosleep(&ts, NULL);
  }
  return RELCL_OK;
}

relcl_status train_mpi_reduce(relcl_model *model, relcl_model_stats *s) {
  relcl_status st = grow(model);
  if (st != RELCL_OK) return st;
  size_t np = S.nparam;
  S.compute = now() - S.t_mark;
  if (S.rank > 0) {
    /* the sum so far, micro-batches 0 .. first-1, then mine in order */
    x_recv(S.acc, np, S.rank - 1);
#if RELCL_HAVE_MPI
    double t = now();
    MPI_Recv(S.acc_stats, 3, MPI_DOUBLE, S.rank - 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    S.wait += now() - t;
#endif
    for (int k = 0; k < S.done; k++) {
      const float *g = S.slots + (size_t)k * np;
      for (size_t i = 0; i < np; i++) S.acc[i] += g[i];
      for (int j = 0; j < 3; j++) S.acc_stats[j] += S.slot_stats[3 * (size_t)k + (size_t)j];
    }
  }
  if (S.rank < S.size - 1) {
    x_send(S.acc, np, S.rank + 1);
#if RELCL_HAVE_MPI
    double t = now();
    MPI_Send(S.acc_stats, 3, MPI_DOUBLE, S.rank + 1, 2, MPI_COMM_WORLD);
    S.wait += now() - t;
#endif
  }
  if (S.size > 1) {
    x_bcast(S.acc, np * sizeof *S.acc, S.size - 1);
    x_bcast(S.acc_stats, sizeof S.acc_stats, S.size - 1);
  }
  if ((st = relcl_model_arena_write(model, RELCL_ARENA_GRADS, S.acc)) != RELCL_OK) return st;
  s->loss_sum = S.acc_stats[0];
  s->nll_sum = S.acc_stats[1];
  s->tokens = (size_t)S.acc_stats[2];

  /* what every rank did, for --balance and the log line */
  double mine[M_N] = {S.compute, (double)S.done, S.wait};
  x_allgather(mine, S.metrics, sizeof mine);
  S.iv_steps++;
  S.iv_wall += now() - S.t_step;
  for (int r = 0; r < S.size; r++) {
    const double *m = S.metrics + (size_t)r * M_N;
    if (m[M_MICROS] > 0) {
      double per = m[M_COMPUTE] / m[M_MICROS];
      if (!(per > 1e-9)) per = 1e-9;
      S.ema[r] = S.ema[r] > 0 ? 0.5 * S.ema[r] + 0.5 * per : per;
    }
    S.iv_compute[r] += m[M_COMPUTE];
    S.iv_micro_r[r] += m[M_MICROS];
    S.iv_wait[r] += m[M_WAIT];
    S.iv_micros += m[M_MICROS];
  }
  return RELCL_OK;
}

relcl_status train_mpi_check_params(relcl_model *model, uint64_t step, int64_t every) {
  if (!S.active || S.size == 1 || every <= 0 || step % (uint64_t)every != 0) return RELCL_OK;
  size_t np = relcl_model_param_count(model);
  float *host = scratch(np);
  if (!host) return RELCL_ERR_OUT_OF_MEMORY;
  relcl_status st;
  if (S.rank == S.perturb_rank && step == S.perturb_step) {
    /* test hook: a rank whose parameters drifted (as a device with other rounding would) */
    if ((st = relcl_model_arena_read(model, RELCL_ARENA_PARAMS, host)) != RELCL_OK) return st;
    host[0] += 1e-3f;
    if ((st = relcl_model_arena_write(model, RELCL_ARENA_PARAMS, host)) != RELCL_OK) return st;
  }
  if ((st = relcl_model_arena_read(model, RELCL_ARENA_PARAMS, host)) != RELCL_OK) return st;
  uint64_t h = fnv(FNV_BASIS, host, np * sizeof *host);
  uint64_t *all = malloc((size_t)S.size * sizeof *all);
  if (!all) return RELCL_ERR_OUT_OF_MEMORY;
  x_allgather(&h, all, sizeof h);
  bool differ = false;
  for (int r = 1; r < S.size; r++)
    if (all[r] != all[0]) {
      differ = true;
      if (S.rank == 0)
        printf("step %llu: the parameters of rank %d on %s differ from rank 0's (hash "
               "%016llx, not %016llx): replaced by rank 0's\n",
               (unsigned long long)step, r, host_of(r), (unsigned long long)all[r],
               (unsigned long long)all[0]);
    }
  free(all);
  if (!differ) return RELCL_OK;
  S.iv_repairs++;
  fflush(stdout);
  return train_mpi_sync_params(model);
}

void train_mpi_describe(const char *device) {
  if (!S.active || S.size == 1) return;
  char mine[128], *all = malloc((size_t)S.size * sizeof mine);
  if (!all) return; /* only a message lost */
  snprintf(mine, sizeof mine, "%s", device);
  x_allgather(mine, all, sizeof mine);
  for (int r = 0; r < S.size; r++)
    printf("rank %d on %s: %s\n", r, host_of(r), all + (size_t)r * sizeof mine);
  free(all);
}

void train_mpi_log(uint64_t step) {
  if (!S.active || S.rank != 0 || S.iv_steps == 0) return;
  char shares[256] = "";
  size_t o = 0;
  for (int r = 0; r < S.size && o < sizeof shares - 16; r++)
    o += (size_t)snprintf(shares + o, sizeof shares - o, "%s%.1f", r ? "+" : "",
                          S.iv_micro_r[r] / (double)S.iv_steps);
  /* micro-batches per second of the job against the sum of every rank's own rate while
   * computing: 100% when nothing waits, nothing communicates and no rank idles */
  double ideal = 0, most = 0;
  int worst = 0;
  for (int r = 0; r < S.size; r++) {
    if (S.iv_compute[r] > 0) ideal += S.iv_micro_r[r] / S.iv_compute[r];
    if (S.iv_wait[r] > most) most = S.iv_wait[r], worst = r;
  }
  double eff = S.iv_wall > 0 && ideal > 0 ? S.iv_micros / S.iv_wall / ideal : 0;
  printf("mpi step %7llu | %d ranks | micro-batches per update %s | MPI wait %.1f ms/step "
         "(rank 0), at most %.1f (rank %d) | scaling efficiency %.0f%%%s\n",
         (unsigned long long)step, S.size, shares, 1e3 * S.iv_wait[0] / (double)S.iv_steps,
         1e3 * most / (double)S.iv_steps, worst, 100 * eff,
         S.iv_repairs ? " | parameters repaired from rank 0" : "");
  fflush(stdout);
  S.iv_steps = S.iv_repairs = 0;
  S.iv_wall = S.iv_micros = 0;
  for (int r = 0; r < S.size; r++) S.iv_compute[r] = S.iv_micro_r[r] = S.iv_wait[r] = 0;
}
