/* relcl-tune: measures CLBlast's best SGEMM parameters for one OpenCL device with CLBlast's
 * own tuners (package clblast-utils) at the GEMM shapes relcl runs, and writes them as a relcl
 * tuning file, which every relcl context on that device then applies (see lib/runtime/tuning.c).
 * CLBlast ships tuned values for many GPUs; for other devices (PoCL on a CPU, a new GPU) its
 * defaults can be several times slower.
 *
 * The search is bounded by wall-clock time, not by CLBlast's search-space sizes: each kernel
 * tuner runs its phases (a fixed set, then random samples of a larger space) and relcl-tune
 * reads every configuration it times from its output as it goes, stopping the tuner when its
 * share of the time is spent. (CLBlast 1.5's -fraction divides the number of configurations,
 * so a fraction below 1 multiplies them: 578 / 0.00001 = 58 million, and bad_alloc.) */
#include "relcl.h"
#include "relcl_layers.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "relcl-tune"
#define MAX_SHAPES 8
#define MAX_PARAMS 24
#define MAX_RESULTS 4096
/* Seconds a candidate's product check may take, its kernels' compile included (test_attention
 * compiled CLBlast's kernels in 174 s on the Zen 1 EPYC with a cold PoCL cache) */
#define CHECK_SECONDS 600

typedef struct {
  long m, n, k;
} shape;

/* Default shapes: a training step of relcl's presets (tokens x d_model x d_model for the
 * attention projections, tokens x d_ff x d_model for the feed-forward layer; the tiny preset
 * that demo.sh trains, d_model 128, then d_model 256), rounded to the multiples of 128
 * CLBlast's Xgemm tuner needs; decoding's products (a beam of rows times d_model, over a
 * source of up to 512 positions) for the direct kernel; all of them for the choice between
 * the direct and the indirect kernel. --quick: the tiny preset's. */
static const char *const default_xgemm = "2048x128x128,2048x512x128,2048x256x256,2048x1024x256";
static const char *const default_direct = "128x128x512,128x256x256";
static const char *const default_routine =
    "128x128x512,2048x128x128,2048x512x128,128x256x256,2048x256x256,2048x1024x256";
static const char *const quick_xgemm = "2048x128x128,2048x512x128";
static const char *const quick_direct = "128x128x512";
static const char *const quick_routine = "128x128x512,2048x128x128,2048x512x128";

static void usage(FILE *f) {
  fprintf(f,
          "usage: " PROG " [--device SPEC] [--quick] [--budget SECONDS] [--output FILE]\n"
          "       [--xgemm-shapes LIST] [--direct-shapes LIST] [--routine-shapes LIST]\n"
          "       [--if-needed] [--step-check full|quick|off]\n"
          "       " PROG " [--device SPEC] --check FILE\n"
          "Runs CLBlast's SGEMM tuners on one device (clblast_tuner_xgemm for the indirect\n"
          "kernel, clblast_tuner_xgemm_direct for the direct one, clblast_tuner_routine_xgemm\n"
          "for the size at which to switch between them) at the GEMM shapes relcl runs, and\n"
          "writes the best parameters as a relcl tuning file. The tuners time each product\n"
          "alone, so their result, the tuning that applied before, on a CPU device the fastest\n"
          "of relcl's own Xgemm sets without local memory (timed on relcl's long products)\n"
          "and CLBlast's defaults are then timed on relcl's own training step (relcl-bench\n"
          "--tuning-child, in turn) and the fastest is written. Default output: the cache\n"
          "directory's tuning/ folder ($RELCL_CACHE_DIR, else $XDG_CACHE_HOME/relcl or\n"
          "~/.cache/relcl), where every relcl context on this device finds it.\n"
          "  --budget S     wall-clock time for the search (default 900; --quick: 240): the\n"
          "                 tuners and relcl's sweep stop within it; the checks after them\n"
          "                 compile CLBlast's kernels for each candidate, minutes more on a\n"
          "                 CPU device with an empty kernel cache\n"
          "  --quick        fewer shapes and one timing run per configuration\n"
          "  --*-shapes     comma-separated MxNxK products (Xgemm: multiples of 128)\n"
          "  --if-needed    do nothing when tuning measured on this device already applies, or\n"
          "                 on a CPU device, where relcl's own kernels run the products\n"
          "                 (unless RELCL_CPU_GEMM=clblast)\n"
          "  --step-check   time the candidates on the tiny preset's step (full, default),\n"
          "                 on a 1+1-layer model (quick), or not at all (off: the tuners' result)\n"
          "  --bench PATH   the relcl-bench to time steps with (default: next to relcl-tune)\n"
          "  --check FILE   only check that the tuning file FILE's parameters compute right\n"
          "                 products on the device, a linear layer's and attention's per-head\n"
          "                 ones (as every file before it is written; each candidate's linear\n"
          "                 layer before it is timed): exit 0 or 1\n"
          "Defaults: --xgemm-shapes %s --direct-shapes %s --routine-shapes %s\n"
          "With --quick: --xgemm-shapes %s --direct-shapes %s --routine-shapes %s\n",
          default_xgemm, default_direct, default_routine, quick_xgemm, quick_direct,
          quick_routine);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* "MxNxK,..." into shapes; false (and one line) when malformed. */
static bool parse_shapes(const char *flag, const char *text, bool mult128, shape *out, int *n) {
  *n = 0;
  const char *s = text;
  while (*s) {
    shape sh;
    int used = 0;
    if (*n == MAX_SHAPES || sscanf(s, "%ldx%ldx%ld%n", &sh.m, &sh.n, &sh.k, &used) != 3 ||
        sh.m < 16 || sh.n < 16 || sh.k < 16 || sh.m > 8192 || sh.n > 8192 || sh.k > 8192 ||
        (mult128 && (sh.m % 128 || sh.n % 128 || sh.k % 32)) ||
        (s[used] != ',' && s[used] != '\0'))
      break;
    out[(*n)++] = sh;
    s += used + (s[used] == ',');
  }
  if (*s == '\0' && *n > 0) return true;
  fprintf(stderr, PROG ": %s %s: give 1 to %d comma-separated MxNxK from 16 to 8192%s\n", flag,
          text, MAX_SHAPES, mult128 ? " (M and N multiples of 128, K of 32)" : "");
  return false;
}

/* One timed configuration of a kernel tuner, read from its table. */
typedef struct {
  int shape;
  char names[MAX_PARAMS][16];
  long values[MAX_PARAMS];
  int n;
  double ms;
} result;

typedef struct {
  result *r;
  int n;
} results;

static void strip_ansi(char *s) {
  char *w = s;
  for (char *r = s; *r; r++) {
    if (*r == '\033') {
      while (*r && *r != 'm') r++;
      if (!*r) break;
      continue;
    }
    *w++ = *r;
  }
  *w = '\0';
}

/* One line of a tuner's output: a "* Parameters explored:" header sets the names, a table row
 * whose status reads "results match" adds a result. */
static void take_line(char *line, int shape_index, char names[][16], int *n_names,
                      results *out) {
  strip_ansi(line);
  const char *hdr = "* Parameters explored:";
  if (strncmp(line, hdr, strlen(hdr)) == 0) {
    *n_names = 0;
    for (char *t = strtok(line + strlen(hdr), " \n"); t && *n_names < MAX_PARAMS;
         t = strtok(NULL, " \n"))
      snprintf(names[(*n_names)++], 16, "%s", t);
    return;
  }
  if (line[0] != '|' || !strstr(line, "results match") || *n_names == 0) return;
  char *field[16];
  int nf = 0;
  for (char *p = line + 1; nf < 16;) {
    field[nf++] = p;
    char *bar = strchr(p, '|');
    if (!bar) break;
    *bar = '\0';
    p = bar + 1;
  }
  /* | ID | total | parameters | (local | global |) compiles | time | GFLOPS | status | */
  if (nf < 7 || atoi(field[0]) <= 0 || out->n == MAX_RESULTS) return;
  int status = nf - 1;
  while (status > 0 && !strstr(field[status], "results match")) status--;
  double ms = atof(field[status - 2]);
  if (!(ms > 0) || !strstr(field[status - 2], "ms")) return;
  result *r = &out->r[out->n];
  r->shape = shape_index;
  r->ms = ms;
  r->n = 0;
  char *save = NULL;
  for (char *t = strtok_r(field[2], " ", &save); t && r->n < *n_names;
       t = strtok_r(NULL, " ", &save)) {
    snprintf(r->names[r->n], 16, "%s", names[r->n]);
    r->values[r->n++] = atol(t);
  }
  if (r->n == *n_names) out->n++;
}

/* Runs one CLBlast tuner in dir until it ends or `seconds` pass (then it is stopped: the
 * budget, not a failure), reading its results into out. Returns 0 when it ended by itself or
 * was stopped, else its exit status (or SIGNALED + the signal that killed it), with the last
 * line of its standard error in last_err. */
#define SIGNALED 1000

/* One line for a tuner that failed. */
static void report_failure(const char *tuner, const char *m, const char *n, const char *k,
                           int rc, const char *err) {
  fprintf(stderr, PROG ": %s at %sx%sx%s failed (%s %d): %s\n", tuner, m, n, k,
          rc >= SIGNALED ? "killed by signal" : "exit status",
          rc >= SIGNALED ? rc - SIGNALED : rc, err[0] ? err : "no message");
}

static int run_tuner(const char *dir, const char *const *argv, double seconds, int shape_index,
                     results *out, char *last_err, size_t last_err_size) {
  char errlog[4200];
  snprintf(errlog, sizeof errlog, "%s/%s.stderr", dir, argv[0]);
  last_err[0] = '\0';
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(last_err, last_err_size, "pipe: %s", strerror(errno));
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(last_err, last_err_size, "fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return 1;
  }
  if (pid == 0) {
    int err = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (chdir(dir) != 0 || err < 0 || dup2(fds[1], 1) < 0 || dup2(err, 2) < 0) _exit(127);
    close(fds[0]);
    /* line-buffered output, so that a stopped tuner has printed every row it timed */
    const char *args[40] = {"stdbuf", "-oL"};
    int a = 2;
    for (int i = 0; argv[i] && a < 39; i++) args[a++] = argv[i];
    args[a] = NULL;
    execvp("stdbuf", (char *const *)args);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  double deadline = now() + seconds;
  bool stopped = false;
  char names[MAX_PARAMS][16];
  int n_names = 0;
  char buf[8192];
  size_t have = 0;
  for (;;) {
    double left = deadline - now();
    if (left <= 0 && !stopped) {
      kill(pid, SIGTERM);
      stopped = true;
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    int pr = poll(&p, 1, stopped ? 2000 : (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {
      if (stopped) kill(pid, SIGKILL);
      continue;
    }
    ssize_t got = read(fds[0], buf + have, sizeof buf - 1 - have);
    if (got <= 0) break;
    have += (size_t)got;
    buf[have] = '\0';
    char *start = buf, *nl;
    while ((nl = strchr(start, '\n'))) {
      *nl = '\0';
      take_line(start, shape_index, names, &n_names, out);
      start = nl + 1;
    }
    have = strlen(start);
    memmove(buf, start, have);
    if (have == sizeof buf - 1) have = 0; /* an absurdly long line: drop it */
  }
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (stopped) return 0;
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : SIGNALED + WTERMSIG(status);
  if (rc != 0) {
    FILE *f = fopen(errlog, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
      if (line[0] != '\n') {
        line[strcspn(line, "\n")] = '\0';
        snprintf(last_err, last_err_size, "%s", line);
      }
    if (f) fclose(f);
    if (!last_err[0] && rc == 127)
      snprintf(last_err, last_err_size, "could not run %s: is clblast-utils installed?",
               argv[0]);
  }
  return rc;
}

static bool same_config(const result *a, const result *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++)
    if (a->values[i] != b->values[i] || strcmp(a->names[i], b->names[i])) return false;
  return true;
}

/* The configuration best over all shapes: timed at every shape (the tuners sample the same
 * configurations in the same order at each shape), smallest sum of time / best time at that
 * shape. When no configuration was timed at every shape, the best one at the first shape
 * that has any. NULL when there is no result. */
static const result *best_over_shapes(const results *rs, int n_shapes, double *score) {
  double best_at[MAX_SHAPES];
  for (int s = 0; s < n_shapes; s++) best_at[s] = 0;
  for (int i = 0; i < rs->n; i++) {
    double *b = &best_at[rs->r[i].shape];
    if (*b == 0 || rs->r[i].ms < *b) *b = rs->r[i].ms;
  }
  const result *best = NULL;
  *score = 0;
  for (int i = 0; i < rs->n; i++) {
    if (rs->r[i].shape != 0) continue;
    double sum = 0;
    int seen = 0;
    for (int s = 0; s < n_shapes; s++) {
      double t = 0;
      for (int j = 0; j < rs->n; j++)
        if (rs->r[j].shape == s && same_config(&rs->r[i], &rs->r[j]) &&
            (t == 0 || rs->r[j].ms < t))
          t = rs->r[j].ms;
      if (t > 0) {
        sum += t / best_at[s];
        seen++;
      }
    }
    if (seen == n_shapes && (!best || sum < *score)) {
      best = &rs->r[i];
      *score = sum;
    }
  }
  for (int s = 0; !best && s < n_shapes; s++)
    for (int i = 0; i < rs->n; i++)
      if (rs->r[i].shape == s && rs->r[i].ms == best_at[s]) {
        best = &rs->r[i];
        *score = 1;
        break;
      }
  return best;
}

static cJSON *params_json(const result *r) {
  cJSON *p = cJSON_CreateObject();
  for (int i = 0; i < r->n; i++) cJSON_AddNumberToObject(p, r->names[i], (double)r->values[i]);
  return p;
}

/* The tuned parameters in the form CLBlast's routine tuner reads from its working directory
 * (one "key": "value" per line), so that it compares the tuned kernels. */
static void write_clblast_json(const char *dir, const char *family, const result *r) {
  char path[4200];
  snprintf(path, sizeof path, "%s/clblast_%s_1_32.json", dir, family);
  FILE *f = fopen(path, "w");
  if (!f) return;
  /* its reader splits each line at '"' and wants three parts: hence the trailing commas */
  fprintf(f, "{\n  \"kernel_family\": \"%s_1\",\n  \"precision\": \"32\",\n", family);
  fprintf(f, "  \"best_parameters\": \"");
  for (int i = 0; i < r->n; i++) fprintf(f, "%s=%ld ", r->names[i], r->values[i]);
  fprintf(f, "PRECISION=32\",\n  \"made_by\": \"relcl-tune\"\n}\n");
  fclose(f);
}

/* Reads "time" of each configuration from the routine tuner's single-size JSON: the direct
 * kernel is the result whose XGEMM_MIN_INDIRECT_SIZE exceeds the size. */
static bool routine_times(const char *dir, double *indirect, double *direct) {
  char path[4200];
  snprintf(path, sizeof path, "%s/clblast_gemm_routine_single_size_32.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  remove(path);
  cJSON *root = cJSON_Parse(text);
  const cJSON *r, *list = cJSON_GetObjectItemCaseSensitive(root, "results");
  *indirect = *direct = 0;
  cJSON_ArrayForEach(r, list) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "time");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(r, "parameters");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "XGEMM_MIN_INDIRECT_SIZE");
    if (!cJSON_IsNumber(t) || !cJSON_IsNumber(s) || t->valuedouble <= 0) continue;
    *(s->valuedouble == 0 ? indirect : direct) = t->valuedouble;
  }
  cJSON_Delete(root);
  return *indirect > 0 && *direct > 0;
}

/* Smallest c with c^3 >= m n k: CLBlast uses the indirect kernel when m n k >= S^3 for
 * S = XGEMM_MIN_INDIRECT_SIZE. */
static long cube_side(const shape *s) {
  long c = 1;
  while (c * c * c < s->m * s->n * s->k) c++;
  return c;
}

/* The switch point with the least total time over the shapes, each shape's time divided by
 * its fastest (so small products count as much as large ones); candidates are the shapes'
 * own sides, 0 (always indirect) and past the largest side (always direct). */
static long best_switch(const shape *sh, const double *ind, const double *dir, int n) {
  long cand[MAX_SHAPES + 2], best = 0;
  int nc = 0;
  cand[nc++] = 0;
  long side_max = 0;
  for (int s = 0; s < n; s++) {
    cand[nc++] = cube_side(&sh[s]);
    if (cube_side(&sh[s]) > side_max) side_max = cube_side(&sh[s]);
  }
  cand[nc++] = side_max + 1;
  double best_cost = -1;
  for (int c = 0; c < nc; c++) {
    double cost = 0;
    for (int s = 0; s < n; s++) {
      if (!(ind[s] > 0 && dir[s] > 0)) continue;
      double fastest = ind[s] < dir[s] ? ind[s] : dir[s];
      cost += (cube_side(&sh[s]) >= cand[c] ? ind[s] : dir[s]) / fastest;
    }
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = cand[c];
    }
  }
  return best;
}

static void make_dirs(char *path) {
  for (char *s = path + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir(path, 0755);
      *s = '/';
    }
}

static void remove_dir(const char *dir) {
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, PROG ": could not remove %s\n", dir);
}

/* ---- the step check: candidates timed on relcl's own training step ---- */

/* A set of parameters to time: this search's result, what applied before it, or CLBlast's
 * defaults (kernels NULL). */
typedef struct candidate {
  char name[300];
  char *kernels;  /* JSON text of a tuning file's "kernels" object, or NULL */
  char file[4300]; /* the tuning file written for it; "off" for CLBlast's defaults */
  double best;    /* fastest median seconds per step over the rounds; 0: no run succeeded */
  double sec[4];
  int n;
  char products[512]; /* check_products' verdict: "right", or why not (then never timed) */
} candidate;

/* relcl-bench, next to this program (the build tree's apps/ or the install's bindir) */
static bool find_bench(char *path, size_t size) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return false;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash == NULL) return false;
  *slash = '\0';
  snprintf(path, size, "%s/relcl-bench", self);
  return access(path, X_OK) == 0;
}

/* Runs argv (argv[0] a path) with RELCL_TUNING=tuning when tuning is not NULL, its file
 * descriptor `fd` (1 or 2) into buf (at most size - 1 bytes, NUL-terminated), for at most
 * `seconds`: then it is killed and *killed set. *status is waitpid's. 0, or nonzero with
 * the reason in err (pipe, fork). */
static int run_child(const char *const *argv, const char *tuning, int fd, double seconds,
                     char *buf, size_t size, int *status, bool *killed, char *err,
                     size_t err_size) {
  int fds[2];
  *killed = false;
  buf[0] = '\0';
  if (pipe(fds) != 0) {
    snprintf(err, err_size, "pipe: %s", strerror(errno));
    return 1;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, err_size, "fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return 1;
  }
  if (pid == 0) {
    if (dup2(fds[1], fd) < 0) _exit(127);
    close(fds[0]);
    if (tuning) setenv("RELCL_TUNING", tuning, 1);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  double deadline = now() + seconds;
  size_t have = 0;
  for (;;) {
    double left = deadline - now();
    if (left <= 0 && !*killed) {
      kill(pid, SIGKILL);
      *killed = true;
    }
    struct pollfd pf = {fds[0], POLLIN, 0};
    int pr = poll(&pf, 1, *killed ? 2000 : (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;
    ssize_t got = read(fds[0], buf + have, size - 1 - have);
    if (got <= 0) break;
    have += (size_t)got;
    if (have == size - 1) break;
  }
  buf[have] = '\0';
  close(fds[0]);
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {}
  return 0;
}

/* One run of `relcl-bench --tuning-child` with RELCL_TUNING=tuning: a training step of a
 * small relative model (warm-up, then the median of three), its seconds per step in *sec.
 * 0, or nonzero with the reason in err. */
static int time_step(const char *bench, const char *spec, const char *tuning, bool quick,
                     double seconds, double *sec, char *err, size_t err_size) {
  err[0] = '\0';
  const char *args[] = {bench, "--tuning-child", "--device", spec, "--reps", "3",
                        quick ? "--quick" : NULL, NULL};
  char buf[2048];
  int status;
  bool killed;
  if (run_child(args, tuning, 1, seconds, buf, sizeof buf, &status, &killed, err, err_size))
    return 1;
  if (killed) {
    snprintf(err, err_size, "no result within %.0f s", seconds);
    return 1;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(err, err_size, "%s --tuning-child failed (%s %d)", bench,
             WIFEXITED(status) ? "exit status" : "killed by signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return 1;
  }
  cJSON *root = cJSON_Parse(buf);
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "seconds_per_step");
  int rc = cJSON_IsNumber(s) && s->valuedouble > 0 ? 0 : 1;
  if (rc == 0)
    *sec = s->valuedouble;
  else
    snprintf(err, err_size, "%s --tuning-child printed no step time", bench);
  cJSON_Delete(root);
  return rc;
}

/* A tuning file for this device holding one candidate's kernels. */
static bool write_candidate(const char *path, const cJSON *head, const char *kernels) {
  cJSON *root = cJSON_Duplicate(head, true);
  cJSON *k = cJSON_Parse(kernels);
  char *text = NULL;
  bool ok = root && k && cJSON_AddItemToObject(root, "kernels", k) &&
            (text = cJSON_PrintUnformatted(root)) != NULL;
  if (!ok) cJSON_Delete(k);
  FILE *f = ok ? fopen(path, "w") : NULL;
  ok = f && fputs(text, f) >= 0;
  if (f && fclose(f) != 0) ok = false;
  free(text);
  cJSON_Delete(root);
  return ok;
}

/* ---- relcl's own GEMM parameter: RelclGemm K_CHUNK (lib/runtime/tuning.c) ---- */

/* The long products' sizes (time_long_products): tokens and the wide inner dimension. */
static int long_rows(bool quick) { return quick ? 2048 : 4096; }
static int long_wide(bool quick) { return quick ? 4096 : 8192; }

/* Sets the entry `name` of a "kernels" object to `value` (taken; NULL: the entry removed). */
static void set_entry(cJSON *kernels, const char *name, cJSON *value) {
  cJSON_DeleteItemFromObjectCaseSensitive(kernels, name);
  if (value) cJSON_AddItemToObject(kernels, name, value);
}

/* JSON text (to free) of a copy of `kernels` with its entry `name` set to `value` (taken). */
static char *kernels_with(const cJSON *kernels, const char *name, cJSON *value) {
  cJSON *k = cJSON_Duplicate(kernels, true);
  char *text = NULL;
  if (k) {
    set_entry(k, name, value);
    text = cJSON_PrintUnformatted(k);
  } else {
    cJSON_Delete(value);
  }
  cJSON_Delete(k);
  return text;
}

/* {"K_CHUNK": chunk}, or NULL for 0 (no entry: every product in one call) */
static cJSON *k_chunk_entry(int chunk) {
  if (chunk == 0) return NULL;
  cJSON *g = cJSON_CreateObject();
  cJSON_AddNumberToObject(g, "K_CHUNK", chunk);
  return g;
}

/* ---- the product check: a set's products against a sum in double ---- */

/* A context on `spec` with the tuning file `file` ("off": CLBlast's defaults) applied. */
static relcl_status context_with(const char *spec, const char *file, relcl_context **ctx) {
  const char *was = getenv("RELCL_TUNING");
  char *saved = was ? strdup(was) : NULL;
  setenv("RELCL_TUNING", file, 1);
  relcl_status st = relcl_context_create(ctx, spec);
  if (saved)
    setenv("RELCL_TUNING", saved, 1);
  else
    unsetenv("RELCL_TUNING");
  free(saved);
  return st;
}

static float next_uniform(unsigned long long *s) { /* xorshift64, in [-1, 1] */
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (float)((*s >> 40) % 2001) / 1000.0f - 1.0f;
}

/* count host arrays h[i] and device buffers m[i] of n[i] floats; the first `inputs` filled
 * with next_uniform from *seed, on both sides. On failure some may be NULL: free_buffers. */
static relcl_status random_buffers(relcl_context *ctx, const size_t *n, int count, int inputs,
                                   unsigned long long *seed, float **h, cl_mem *m) {
  relcl_status st = RELCL_OK;
  for (int i = 0; i < count; i++)
    if ((h[i] = malloc(n[i] * sizeof(float))) == NULL) st = RELCL_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < count && st == RELCL_OK; i++) st = relcl_alloc(ctx, n[i], &m[i]);
  for (int i = 0; i < inputs && st == RELCL_OK; i++) {
    for (size_t j = 0; j < n[i]; j++) h[i][j] = next_uniform(seed);
    st = relcl_write(ctx, relcl_buf_at(m[i], 0), h[i], n[i]);
  }
  return st;
}

static void free_buffers(float **h, cl_mem *m, int count) {
  for (int i = 0; i < count; i++) {
    if (m[i]) clReleaseMemObject(m[i]);
    free(h[i]);
  }
}

/* |got - want| over sqrt(K) of entry (i, j) of C (m x n) = sum over K terms of
 * a[i * ai + k * ak] * b[j * bj + k * bk]; NaN when got is NaN. */
static double entry_error(const float *got, int n, int K, const float *a, int ai, int ak,
                          const float *b, int bj, int bk, int i, int j) {
  double want = 0.0;
  for (int k = 0; k < K; k++)
    want += (double)a[(size_t)i * ai + (size_t)k * ak] * b[(size_t)j * bj + (size_t)k * bk];
  return fabs((double)got[(size_t)i * n + j] - want) / sqrt((double)K);
}

static void keep_worst(double *worst, double e) {
  if (!(e <= *worst)) *worst = e; /* NaN counts as wrong */
}

/* The largest entry_error of one product: every entry up to 1e8 multiply-adds; above, the
 * last row and column (the partial tiles) and 4096 entries spread by a fixed sequence. */
static double product_error(const float *got, int m, int n, int K, const float *a, int ai,
                            int ak, const float *b, int bj, int bk) {
  double worst = 0.0;
  const bool all = (double)m * n * K <= 1e8;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++)
      if (all || i == m - 1 || j == n - 1)
        keep_worst(&worst, entry_error(got, n, K, a, ai, ak, b, bj, bk, i, j));
  unsigned long long s = 1;
  for (int t = 0; t < 4096 && !all; t++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    int i = (int)((s >> 33) % (unsigned)m), j = (int)((s >> 11) % (unsigned)n);
    keep_worst(&worst, entry_error(got, n, K, a, ai, ak, b, bj, bk, i, j));
  }
  return worst;
}

/* The applied tuning's switch to CLBlast's indirect kernel (GemmRoutine
 * XGEMM_MIN_INDIRECT_SIZE), 0 when it does not say. */
static long indirect_switch(relcl_context *ctx) {
  cJSON *k = cJSON_Parse(relcl_context_tuning_kernels(ctx) ? relcl_context_tuning_kernels(ctx)
                                                           : "{}");
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(k, "GemmRoutine");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, "XGEMM_MIN_INDIRECT_SIZE");
  long sw = cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e5 ? (long)v->valuedouble
                                                                             : 0;
  cJSON_Delete(k);
  return sw;
}

/* CLBlast accepts parameter sets whose kernels compute wrong products: on the Zen 1 EPYC
 * under PoCL, GEMMK 1 with KREG 1 and VWN 8 (3.5 times faster than the right sets) and
 * GEMMK 1 with NWG 16, KREG 4 and VWN 4 (docs/speed.md, "The large products against OpenBLAS").
 * So a set counts only after the products of a linear layer's forward and backward (x W^T,
 * dy W, dy^T x: CLBlast's three layouts as relcl calls them) match a sum in double: once
 * large, for the indirect kernel, with sizes off its tiles and an inner dimension that
 * K_CHUNK cuts, once small, for the direct kernel. Inputs in [-1, 1]: float rounding is
 * about 1e-7 of sqrt(K) here, a wrong product O(1). 0, or 1 with the reason in err. */
static int check_products(relcl_context *ctx, char *err, size_t err_size) {
  /* rows, in, out; the large one past the tuning's switch (CLBlast's own is 384 or less) */
  long sw = indirect_switch(ctx);
  if (sw < 384) sw = 384;
  int shapes[2][3] = {{1100, 136, 264}, {7, 33, 20}};
  while ((double)shapes[0][0] * shapes[0][1] * shapes[0][2] < (double)sw * sw * sw) {
    shapes[0][1] *= 2;
    shapes[0][2] *= 2;
  }
  unsigned long long seed = 88172645463325252ULL;
  int rc = 0;
  for (int t = 0; t < 2 && rc == 0; t++) {
    const int rows = shapes[t][0], in = shapes[t][1], out = shapes[t][2];
    const size_t n[6] = {(size_t)rows * in, (size_t)out * in, (size_t)rows * out,
                         (size_t)rows * out, (size_t)rows * in, (size_t)out * in};
    float *h[6] = {NULL}; /* x, W, dy, y, dx, dW */
    cl_mem m[6] = {NULL};
    relcl_status st = random_buffers(ctx, n, 6, 3, &seed, h, m);
    if (st == RELCL_OK) st = relcl_fill(ctx, relcl_buf_at(m[5], 0), 0.0f, n[5]);
    if (st == RELCL_OK)
      st = relcl_linear_forward(ctx, rows, in, out, relcl_buf_at(m[0], 0),
                                relcl_buf_at(m[1], 0), RELCL_BUF_NONE, relcl_buf_at(m[3], 0));
    if (st == RELCL_OK)
      st = relcl_linear_backward(ctx, rows, in, out, relcl_buf_at(m[0], 0),
                                 relcl_buf_at(m[1], 0), relcl_buf_at(m[2], 0),
                                 relcl_buf_at(m[4], 0), 0, relcl_buf_at(m[5], 0),
                                 RELCL_BUF_NONE);
    for (int i = 3; i < 6 && st == RELCL_OK; i++)
      st = relcl_read(ctx, relcl_buf_at(m[i], 0), h[i], n[i]);
    if (st != RELCL_OK) {
      snprintf(err, err_size, "the product check: %s: %s", relcl_status_str(st),
               relcl_last_error());
      rc = 1;
    } else {
      /* y = x W^T, dx = dy W, dW = dy^T x */
      const struct {
        const char *what;
        double e;
        int m, n, k;
      } p[3] = {
          {"x W^T", product_error(h[3], rows, out, in, h[0], in, 1, h[1], in, 1), rows, out, in},
          {"dy W", product_error(h[4], rows, in, out, h[2], out, 1, h[1], 1, in), rows, in, out},
          {"dy^T x", product_error(h[5], out, in, rows, h[2], 1, out, h[0], 1, in), out, in,
           rows},
      };
      for (int i = 0; i < 3 && rc == 0; i++)
        if (!(p[i].e < 1e-4)) {
          snprintf(err, err_size,
                   "computes wrong products: %s (%dx%dx%d) is off by %.3g sqrt(K) from a sum "
                   "in double",
                   p[i].what, p[i].m, p[i].n, p[i].k, p[i].e);
          rc = 1;
        }
    }
    free_buffers(h, m, 6);
  }
  return rc;
}

/* The per-head products as attention runs them (CLBlast's batched kernels on a GPU, relcl's
 * gemm_heads on a CPU since session 17, neither of which the 2-D products above run):
 * attention forward without relative terms over 2 x 3 heads of
 * 37 queries and 29 keys (sizes off every tile), Z = softmax(Q K^T / sqrt(64)) V against the
 * same in double. A wrong S = Q K^T or Z = alpha V product moves Z by O(0.1); float rounding
 * by about 1e-6. 0, or 1 with the reason in err. */
static int check_heads(relcl_context *ctx, char *err, size_t err_size) {
  enum { HB = 2, HH = 3, HQ = 37, HK = 29, HD = 64 };
  const size_t nq = (size_t)HB * HH * HQ * HD, nk = (size_t)HB * HH * HK * HD;
  const size_t n[4] = {nq, nk, nk, nq}; /* Q, K, V, Z */
  float *h[4] = {NULL};
  cl_mem m[4] = {NULL};
  unsigned long long seed = 2463534242ULL;
  relcl_status st = random_buffers(ctx, n, 4, 3, &seed, h, m);
  relcl_attn_desc desc = relcl_attn_desc_cross(HB, HH, HQ, HK, HD);
  if (st == RELCL_OK)
    st = relcl_attn_forward(ctx, &desc, relcl_buf_at(m[0], 0), relcl_buf_at(m[1], 0),
                            relcl_buf_at(m[2], 0), RELCL_BUF_NONE, RELCL_BUF_NONE,
                            RELCL_BUF_NONE, relcl_buf_at(m[3], 0), RELCL_BUF_NONE);
  if (st == RELCL_OK) st = relcl_read(ctx, relcl_buf_at(m[3], 0), h[3], n[3]);
  int rc = 0;
  if (st != RELCL_OK) {
    snprintf(err, err_size, "the per-head product check: %s: %s", relcl_status_str(st),
             relcl_last_error());
    rc = 1;
  }
  double worst = 0.0;
  for (int bh = 0; bh < HB * HH && rc == 0; bh++)
    for (int i = 0; i < HQ; i++) {
      const float *q = h[0] + ((size_t)bh * HQ + i) * HD;
      double s[HK], top = -1e300, sum = 0.0;
      for (int j = 0; j < HK; j++) {
        const float *k = h[1] + ((size_t)bh * HK + j) * HD;
        s[j] = 0.0;
        for (int e = 0; e < HD; e++) s[j] += (double)q[e] * k[e];
        s[j] /= sqrt((double)HD);
        if (s[j] > top) top = s[j];
      }
      for (int j = 0; j < HK; j++) sum += (s[j] = exp(s[j] - top));
      for (int e = 0; e < HD; e++) {
        double z = 0.0;
        for (int j = 0; j < HK; j++) z += s[j] / sum * h[2][((size_t)bh * HK + j) * HD + e];
        keep_worst(&worst, fabs(z - h[3][((size_t)bh * HQ + i) * HD + e]));
      }
    }
  if (rc == 0 && !(worst < 1e-4)) {
    snprintf(err, err_size,
             "computes wrong per-head products: attention over %dx%d blocks of %dx%dx%d is off "
             "by %.3g from a sum in double",
             HB, HH, HQ, HK, HD, worst);
    rc = 1;
  }
  free_buffers(h, m, 4);
  return rc;
}

/* check_products, and with heads check_heads, with the tuning file `file` applied (a context
 * of its own); must_apply: also fail when relcl does not apply it (not readable, not for this
 * device). check_heads compiles CLBlast's batched kernels where they run them (about 9 s a
 * set on the Zen 5 EPYC with a cold cache, before session 17), so the step check's
 * candidates skip it and the file to be written (and --check) runs it: a winner's timed step
 * has compiled those kernels by then. */
static int check_file(const char *spec, const char *file, bool must_apply, bool heads,
                      char *err, size_t err_size) {
  relcl_context *ctx = NULL;
  relcl_status st = context_with(spec, file, &ctx);
  int rc;
  if (st != RELCL_OK) {
    snprintf(err, err_size, "%s: %s", relcl_status_str(st), relcl_last_error());
    rc = 1;
  } else if (must_apply && relcl_context_tuning_kernels(ctx) == NULL) {
    snprintf(err, err_size, "not applied: %s", relcl_context_tuning(ctx));
    rc = 1;
  } else {
    rc = check_products(ctx, err, err_size);
    if (rc == 0 && heads) rc = check_heads(ctx, err, err_size);
  }
  if (ctx) relcl_context_destroy(ctx);
  return rc;
}

/* check_file (must_apply false) in a child, this program's --check-candidate (or with heads
 * --check-final), that gets `seconds`: PoCL compiles some parameter sets for many minutes
 * (on the Zen 5 EPYC, an XgemmDirect set of 16 x 16 outputs a work-item for over ten),
 * which would stall the whole search in this process. 0, or nonzero with the reason in err. */
static int check_file_bounded(const char *spec, const char *file, bool heads, double seconds,
                              char *err, size_t err_size) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    snprintf(err, err_size, "cannot find this program (/proc/self/exe): %s", strerror(errno));
    return 1;
  }
  self[len] = '\0';
  const char *option = heads ? "--check-final" : "--check-candidate";
  const char *args[] = {self, "--device", spec, option, file, NULL};
  char buf[1024];
  int status;
  bool killed;
  if (run_child(args, NULL, 2, seconds, buf, sizeof buf, &status, &killed, err, err_size))
    return 1;
  if (killed) {
    snprintf(err, err_size, "no verdict within %.0f s (its kernels still compiling?)", seconds);
    return 1;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  /* the child's one line, else how it ended */
  char *nl = strchr(buf, '\n');
  if (nl) *nl = '\0';
  if (buf[0])
    snprintf(err, err_size, "%.400s", buf);
  else
    snprintf(err, err_size, "%.300s %s failed (%s %d)", self, option,
             WIFEXITED(status) ? "exit status" : "killed by signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return 1;
}

/* Products to time: one pass of them enqueued on ctx, on the buffers m of the sizes the
 * caller gave time_products. */
typedef relcl_status (*product_pass)(relcl_context *ctx, const cl_mem *m, const int *arg);

/* What a stage times: time_products' buffers, pass and its argument. */
typedef struct {
  const size_t *sizes;
  int nbuf;
  product_pass pass;
  const int *arg;
} product_set;

/* Device milliseconds of the content GEMMs of `pass` under the tuning file `file` (a fresh
 * context applies it), on nbuf buffers of sizes[i] floats (at most 8, filled with small
 * constants): the best of `reps` passes after one in which CLBlast compiles. */
static int time_products(const char *spec, const char *file, const size_t *sizes, int nbuf,
                         product_pass pass, const int *arg, int reps, double *ms, char *err,
                         size_t err_size) {
  relcl_context *ctx = NULL;
  relcl_status st = context_with(spec, file, &ctx);
  cl_mem m[8] = {NULL};
  for (int i = 0; i < nbuf && st == RELCL_OK; i++)
    if ((st = relcl_alloc(ctx, sizes[i], &m[i])) == RELCL_OK)
      st = relcl_fill(ctx, relcl_buf_at(m[i], 0), 0.01f * (float)(i + 1), sizes[i]);
  if (st == RELCL_OK) st = relcl_profile_enable(ctx, 1);
  *ms = 1e30;
  for (int r = -1; r < reps && st == RELCL_OK; r++) { /* r = -1: CLBlast compiles */
    relcl_profile_summary sum;
    if ((st = relcl_profile_reset(ctx)) != RELCL_OK || (st = pass(ctx, m, arg)) != RELCL_OK ||
        (st = relcl_finish(ctx)) != RELCL_OK ||
        (st = relcl_profile_summary_get(ctx, &sum)) != RELCL_OK)
      break;
    if (r >= 0 && sum.part_ms[RELCL_PART_CONTENT_GEMM] < *ms)
      *ms = sum.part_ms[RELCL_PART_CONTENT_GEMM];
  }
  if (st != RELCL_OK)
    snprintf(err, err_size, "%s: %s", relcl_status_str(st), relcl_last_error());
  for (int i = 0; i < nbuf; i++)
    if (m[i]) clReleaseMemObject(m[i]);
  if (ctx) relcl_context_destroy(ctx);
  return st == RELCL_OK ? 0 : 1;
}

enum { LONG_D = 256, LONG_FF = 1024 };

/* relcl's products with a long inner dimension: a linear layer's backward over arg[0] tokens
 * (dW = dy^T x, inner dimension the tokens; dx = dy W, inner dimension 1024) and a forward
 * with a wide input (inner dimension arg[1]), as in the output layer's backward. */
static relcl_status long_pass(relcl_context *ctx, const cl_mem *m, const int *arg) {
  const int rows = arg[0], wide = arg[1];
  relcl_status st = relcl_linear_backward(
      ctx, rows, LONG_D, LONG_FF, relcl_buf_at(m[0], 0), relcl_buf_at(m[1], 0),
      relcl_buf_at(m[2], 0), relcl_buf_at(m[3], 0), 0, relcl_buf_at(m[4], 0), RELCL_BUF_NONE);
  if (st != RELCL_OK) return st;
  return relcl_linear_forward(ctx, rows / 4, wide, LONG_D, relcl_buf_at(m[5], 0),
                              relcl_buf_at(m[6], 0), RELCL_BUF_NONE, relcl_buf_at(m[3], 0));
}

/* long_pass over `rows` tokens with a `wide` input, on sizes[7] and arg[2] it fills. */
static product_set long_set(int rows, int wide, size_t *sizes, int *arg) {
  const size_t n[7] = {(size_t)rows * LONG_D,   (size_t)LONG_FF * LONG_D,
                       (size_t)rows * LONG_FF,  (size_t)rows * LONG_D,
                       (size_t)LONG_FF * LONG_D, (size_t)(rows / 4) * wide,
                       (size_t)LONG_D * wide};
  memcpy(sizes, n, sizeof n);
  arg[0] = rows, arg[1] = wide;
  return (product_set){sizes, 7, long_pass, arg};
}

/* Device milliseconds of long_pass over `rows` tokens with a `wide` input, the best of
 * `reps`. */
static int time_long_products(const char *spec, const char *file, int rows, int wide, int reps,
                              double *ms, char *err, size_t err_size) {
  size_t sizes[7];
  int arg[2];
  const product_set set = long_set(rows, wide, sizes, arg);
  return time_products(spec, file, set.sizes, set.nbuf, set.pass, set.arg, reps, ms, err,
                       err_size);
}

/* Prints " V<suffix>: T ms" for each candidate value V, records the times under
 * measured[key] by value, and returns the index of the fastest (the first of equals). */
static int report_times(cJSON *measured, const char *key, const int *values, const double *ms,
                        int n, const char *suffix) {
  int win = 0;
  cJSON *e = cJSON_AddObjectToObject(measured, key);
  for (int c = 0; c < n; c++) {
    printf(" %d%s: %.1f ms%s", values[c], suffix, ms[c], c + 1 < n ? "," : "");
    char name[16];
    snprintf(name, sizeof name, "%d", values[c]);
    cJSON_AddNumberToObject(e, name, ms[c]);
    if (ms[c] < ms[win]) win = c;
  }
  return win;
}

/* Times `set` with `kernels`' entry `name` set to entry(values[c]) (NULL: no entry) for each
 * of the n values in turn, in interleaved rounds, each the best of two passes, from files
 * DIR/PREFIX-VALUE.json (n at most 8); best[c] the fastest of candidate c. Prints why and
 * returns false when a file cannot be written or a pass fails. */
static bool time_values(const char *spec, const char *dir, const cJSON *head,
                        const cJSON *kernels, const char *name, cJSON *(*entry)(int),
                        const int *values, int n, const char *prefix, const product_set *set,
                        int rounds, double *best) {
  char files[8][4300], err[512];
  for (int c = 0; c < n && c < 8; c++) {
    char *text = kernels_with(kernels, name, entry(values[c]));
    snprintf(files[c], sizeof files[c], "%s/%s-%d.json", dir, prefix, values[c]);
    bool ok = text && write_candidate(files[c], head, text);
    free(text);
    if (!ok) {
      printf(" cannot write %s: not measured\n", files[c]);
      return false;
    }
    best[c] = 1e30;
  }
  for (int r = 0; r < rounds; r++)
    for (int c = 0; c < n && c < 8; c++) {
      double ms;
      if (time_products(spec, files[c], set->sizes, set->nbuf, set->pass, set->arg, 2, &ms, err,
                        sizeof err)) {
        printf(" failed (%s): not measured\n", err);
        return false;
      }
      if (ms < best[c]) best[c] = ms;
    }
  return true;
}

/* Choose RelclGemm K_CHUNK for `kernels` (JSON text of a "kernels" object) by timing the
 * long products with each chunk in turn, in interleaved rounds; adds the winner to *kernels
 * (0: no entry, every product in one call) and the times to measured[key]. Returns the
 * winner's milliseconds, 0 when nothing was measured. */
static double choose_k_chunk(const char *spec, const char *dir, const cJSON *head,
                             char **kernels, bool quick, const char *key, cJSON *measured) {
  static const int chunks[] = {0, 256, 512, 1024};
  enum { NC = sizeof chunks / sizeof *chunks };
  const int rows = long_rows(quick), wide = long_wide(quick);
  size_t sizes[7];
  int arg[2];
  const product_set set = long_set(rows, wide, sizes, arg);
  double best[NC];
  char prefix[100];
  printf("    relcl's products with a long inner dimension (1024x256x%d, %dx256x1024, "
         "%dx256x%d), by K_CHUNK:", rows, rows, rows / 4, wide);
  fflush(stdout);
  cJSON *parsed = cJSON_Parse(*kernels);
  if (parsed == NULL) return 0;
  snprintf(prefix, sizeof prefix, "%s-k-chunk", key);
  if (!time_values(spec, dir, head, parsed, "RelclGemm", k_chunk_entry, chunks, NC, prefix,
                   &set, quick ? 1 : 2, best)) {
    cJSON_Delete(parsed);
    return 0;
  }
  const int win = report_times(measured, key, chunks, best, NC, "");
  printf("; K_CHUNK %d\n", chunks[win]);
  char *text = kernels_with(parsed, "RelclGemm", k_chunk_entry(chunks[win]));
  cJSON_Delete(parsed);
  if (text) {
    free(*kernels);
    *kernels = text;
  }
  return best[win];
}

/* ---- the switch between CLBlast's direct and indirect kernels, on relcl's products ---- */

/* CLBlast's routine tuner (above) times its indirect kernel with the copies and transposes
 * CLBlast makes around it, which relcl's calls avoid (lib/runtime/gemm.c), so its switch can
 * be too high for relcl: on the Zen 5 EPYC it chose 256, and 128 ran a small model's step
 * 8 to 13% faster. So the switch is chosen again on relcl's own products of middle size. */
static const int switch_sizes[] = {64, 128, 256, 512};
enum { N_SWITCH = sizeof switch_sizes / sizeof *switch_sizes };

/* relcl's middle-sized products: a linear layer's forward and backward (three products)
 * for each (rows, in, out) below: a small model's step (512 tokens, width 128, and its
 * 512-wide layer) and decoding's batches of beams. From 1M to 34M multiply-adds a product,
 * across 64^3 to 512^3. */
static const int middle_layers[][3] = {
    {512, 128, 128}, {512, 128, 512}, {512, 512, 128}, {128, 256, 256}, {16, 256, 256}};
enum { N_MIDDLE = sizeof middle_layers / sizeof *middle_layers, MIDDLE_MAX = 512 * 512 };

static relcl_status middle_pass(relcl_context *ctx, const cl_mem *m, const int *arg) {
  (void)arg;
  relcl_status st = RELCL_OK;
  for (int l = 0; l < N_MIDDLE && st == RELCL_OK; l++) {
    const int rows = middle_layers[l][0], in = middle_layers[l][1], out = middle_layers[l][2];
    st = relcl_linear_forward(ctx, rows, in, out, relcl_buf_at(m[0], 0), relcl_buf_at(m[1], 0),
                              RELCL_BUF_NONE, relcl_buf_at(m[2], 0));
    if (st == RELCL_OK)
      st = relcl_linear_backward(ctx, rows, in, out, relcl_buf_at(m[0], 0),
                                 relcl_buf_at(m[1], 0), relcl_buf_at(m[2], 0),
                                 relcl_buf_at(m[3], 0), 0, relcl_buf_at(m[4], 0),
                                 RELCL_BUF_NONE);
  }
  return st;
}

static cJSON *switch_entry(int size) {
  cJSON *g = cJSON_CreateObject();
  cJSON_AddNumberToObject(g, "XGEMM_MIN_INDIRECT_SIZE", size);
  return g;
}

/* Choose GemmRoutine XGEMM_MIN_INDIRECT_SIZE for *kernels (JSON) among switch_sizes by
 * timing the middle products (x, W, y or dy, dx, dW: buffers of the largest size) with each
 * in turn; sets the winner in *kernels and the times in measured["GemmSwitch"]. */
static void choose_switch(const char *spec, const char *dir, const cJSON *head, cJSON **kernels,
                          bool quick, cJSON *measured) {
  const size_t sizes[5] = {MIDDLE_MAX, MIDDLE_MAX, MIDDLE_MAX, MIDDLE_MAX, MIDDLE_MAX};
  const product_set set = {sizes, 5, middle_pass, NULL};
  double best[N_SWITCH];
  printf("  the switch to CLBlast's indirect kernel, on relcl's products from 1M to 34M "
         "multiply-adds:");
  fflush(stdout);
  if (!time_values(spec, dir, head, *kernels, "GemmRoutine", switch_entry, switch_sizes,
                   N_SWITCH, "switch", &set, quick ? 1 : 2, best))
    return;
  const int win = report_times(measured, "GemmSwitch", switch_sizes, best, N_SWITCH, "^3");
  const cJSON *old = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(*kernels, "GemmRoutine"), "XGEMM_MIN_INDIRECT_SIZE");
  const bool same = cJSON_IsNumber(old) && old->valueint == switch_sizes[win];
  printf("; %d%s\n", switch_sizes[win], same ? " (as before)" : "");
  set_entry(*kernels, "GemmRoutine", switch_entry(switch_sizes[win]));
}

/* ---- relcl's own search of the Xgemm family that wins on CPU devices ---- */

/* Xgemm parameter sets without local memory (SA = SB = 0: PoCL runs a work-group as loops
 * split at its barriers, so local tiles cost more than they save on a CPU). CLBlast's tuner
 * samples mostly local-memory configurations; these were the fastest of relcl's own sweeps
 * on PoCL CPUs (the files in tuning/), with neighbours of them. */
static const char *const cpu_xgemm_sets[] = {
    /* the Zen 1 EPYC's: float8, 32 x 32 tiles of 4 x 4 work-items (8 x 8 results each, which
     * fit AVX2's sixteen registers), KWG 128 */
    "{\"GEMMK\":0,\"KREG\":1,\"KWG\":128,\"KWI\":2,\"MDIMA\":4,\"MDIMC\":4,\"MWG\":32,"
    "\"NDIMB\":4,\"NDIMC\":4,\"NWG\":32,\"SA\":0,\"SB\":0,\"STRM\":1,\"STRN\":0,\"VWM\":8,"
    "\"VWN\":8}",
    /* the Zen 1 EPYC's before: float4, 32 x 128 tiles of 4 x 8 work-items, KWG 16 */
    "{\"GEMMK\":0,\"KREG\":1,\"KWG\":16,\"KWI\":2,\"MDIMA\":4,\"MDIMC\":4,\"MWG\":32,"
    "\"NDIMB\":8,\"NDIMC\":8,\"NWG\":128,\"SA\":0,\"SB\":0,\"STRM\":1,\"STRN\":0,\"VWM\":4,"
    "\"VWN\":4}",
    /* the later EPYC's and the AVX-512 EPYC's: 64 x 64 tiles of 8 x 8 work-items */
    "{\"GEMMK\":0,\"KREG\":1,\"KWG\":32,\"KWI\":2,\"MDIMA\":8,\"MDIMC\":8,\"MWG\":64,"
    "\"NDIMB\":8,\"NDIMC\":8,\"NWG\":64,\"SA\":0,\"SB\":0,\"STRM\":0,\"STRN\":0,\"VWM\":4,"
    "\"VWN\":2}",
    /* float8 along M and N, 64 x 128 tiles of 8 x 8 work-items */
    "{\"GEMMK\":0,\"KREG\":1,\"KWG\":16,\"KWI\":2,\"MDIMA\":8,\"MDIMC\":8,\"MWG\":64,"
    "\"NDIMB\":8,\"NDIMC\":8,\"NWG\":128,\"SA\":0,\"SB\":0,\"STRM\":1,\"STRN\":0,\"VWM\":8,"
    "\"VWN\":8}",
    /* float4, 64 x 128 tiles of 8 x 8 work-items */
    "{\"GEMMK\":0,\"KREG\":1,\"KWG\":16,\"KWI\":2,\"MDIMA\":8,\"MDIMC\":8,\"MWG\":64,"
    "\"NDIMB\":8,\"NDIMC\":8,\"NWG\":128,\"SA\":0,\"SB\":0,\"STRM\":1,\"STRN\":0,\"VWM\":4,"
    "\"VWN\":4}",
    /* float4, 32 x 64 tiles of 4 x 8 work-items */
    "{\"GEMMK\":0,\"KREG\":1,\"KWG\":16,\"KWI\":2,\"MDIMA\":4,\"MDIMC\":4,\"MWG\":32,"
    "\"NDIMB\":8,\"NDIMC\":8,\"NWG\":64,\"SA\":0,\"SB\":0,\"STRM\":1,\"STRN\":0,\"VWM\":4,"
    "\"VWN\":4}",
    /* the Zen 1 set with KWG 32 */
    "{\"GEMMK\":0,\"KREG\":1,\"KWG\":32,\"KWI\":2,\"MDIMA\":4,\"MDIMC\":4,\"MWG\":32,"
    "\"NDIMB\":8,\"NDIMC\":8,\"NWG\":128,\"SA\":0,\"SB\":0,\"STRM\":1,\"STRN\":0,\"VWM\":4,"
    "\"VWN\":4}",
};
enum { N_CPU_SETS = sizeof cpu_xgemm_sets / sizeof *cpu_xgemm_sets };

/* The direct kernel's parameters that go with the sweep's fastest set: the Zen 1 EPYC's of
 * session 10, 8 x 8 tiles of 1 x 2 work-items (8 x 4 results each, float8 x float4) with the
 * tile's K unrolled, which ran the attention's per-head products (batched 32x32x64 and its
 * transposes, x500) 2.5 to 4 times faster than CLBlast's tuner's 2 x 2 results on 4 x 4
 * work-items there, decoding's small products no slower. CLBlast's direct tuner times one
 * square-ish product, not these; the step check (relcl's own step) decides. */
static const char *const cpu_direct_set =
    "{\"KWID\":8,\"MDIMAD\":1,\"MDIMCD\":1,\"NDIMBD\":2,\"NDIMCD\":2,\"PADA\":1,"
    "\"PADB\":1,\"VWMD\":8,\"VWND\":4,\"WGD\":8}";

/* On a CPU device: time relcl's long products (time_long_products) with each set above in
 * place of the tuners' Xgemm (the rest of the kernels kept, K_CHUNK 512, which keeps a
 * slice's operands in the caches of the CPUs measured so far), the first set whatever the
 * time, the others while `until` (an absolute now()) is ahead. tuners_ms is the tuners'
 * kernels' time on the same products (choose_k_chunk's; 0: unknown). Records the times,
 * the tuners' first, in measured["XgemmCpuSweep"]; returns the kernels (JSON text, to
 * free, without K_CHUNK) of the fastest set with cpu_direct_set, NULL when none ran, and in
 * *beat whether it beat the tuners'. */
static char *cpu_sweep(const char *spec, const char *dir, const cJSON *head, const cJSON *kernels,
                       double tuners_ms, bool quick, double until, cJSON *measured, bool *beat) {
  char file[4300], err[512];
  double best_ms = 1e30;
  int best = -1;
  cJSON *sets = cJSON_AddArrayToObject(measured, "XgemmCpuSweep");
  cJSON *k = cJSON_Duplicate(kernels, true); /* the tuners' kernels, Xgemm replaced below */
  if (k == NULL) return NULL;
  printf("  relcl's sweep of the Xgemm family without local memory (CPU devices), on the "
         "long products (the tuners' kernels: %.1f ms):", tuners_ms);
  fflush(stdout);
  if (tuners_ms > 0) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "set", "tuners");
    cJSON_AddNumberToObject(e, "ms", tuners_ms);
    cJSON_AddItemToArray(sets, e);
  }
  for (int i = 0; i < N_CPU_SETS; i++) {
    if (i > 0 && now() > until) {
      printf(" (the budget ends the sweep after %d of %d sets)", i, N_CPU_SETS);
      break;
    }
    set_entry(k, "Xgemm", cJSON_Parse(cpu_xgemm_sets[i]));
    char *text = kernels_with(k, "RelclGemm", k_chunk_entry(512));
    snprintf(file, sizeof file, "%s/cpu-set-%d.json", dir, i + 1);
    double ms = 0;
    bool ok = text && write_candidate(file, head, text) &&
              time_long_products(spec, file, long_rows(quick), long_wide(quick), 2, &ms, err,
                                 sizeof err) == 0;
    bool wrote = text != NULL;
    free(text);
    if (!ok) {
      printf(" set %d: failed (%s);", i + 1, wrote ? err : "out of memory");
      continue;
    }
    printf(" %.1f ms%s", ms, i + 1 < N_CPU_SETS ? "," : "");
    fflush(stdout);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "set", "cpu");
    cJSON_AddItemToObject(e, "Xgemm", cJSON_Parse(cpu_xgemm_sets[i]));
    cJSON_AddNumberToObject(e, "ms", ms);
    cJSON_AddItemToArray(sets, e);
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  *beat = best >= 0 && (tuners_ms <= 0 || best_ms < tuners_ms);
  if (best < 0) {
    printf("; no set could be timed\n");
    cJSON_Delete(k);
    return NULL;
  }
  printf("; fastest set: %d\n", best + 1);
  set_entry(k, "Xgemm", cJSON_Parse(cpu_xgemm_sets[best]));
  set_entry(k, "XgemmDirect", cJSON_Parse(cpu_direct_set));
  set_entry(k, "RelclGemm", NULL);
  char *text = cJSON_PrintUnformatted(k);
  cJSON_Delete(k);
  return text;
}

/* Check every candidate's products (check_products), then time those that are right on
 * relcl's training step, in interleaved rounds (so that a change in the machine's load hits
 * all alike), print the table and return the fastest one's index, or -1 when no run
 * succeeded. */
static int step_check(candidate *c, int nc, const char *bench, const char *spec, bool quick,
                      int rounds, double seconds, cJSON *out) {
  printf("  timing relcl's training step (%s, %d round%s) with each candidate:\n",
         quick ? "relcl-bench --tuning-child --quick" : "relcl-bench --tuning-child",
         rounds, rounds == 1 ? "" : "s");
  fflush(stdout);
  double t0 = now();
  for (int i = 0; i < nc; i++) {
    char err[512];
    if (check_file_bounded(spec, c[i].file, false, CHECK_SECONDS, err, sizeof err) == 0) {
      snprintf(c[i].products, sizeof c[i].products, "right");
    } else {
      snprintf(c[i].products, sizeof c[i].products, "%s", err);
      printf("    %s: %s: not a candidate\n", c[i].name, err);
    }
  }
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < nc; i++) {
      if (strcmp(c[i].products, "right")) continue;
      /* an equal share of what is left, but enough for one compile and a few steps even
       * when the budget is spent: a run that cannot finish times nothing */
      int runs_left = (rounds - r) * nc - i;
      double share = (seconds - (now() - t0)) / runs_left, sec = 0;
      char err[512];
      if (time_step(bench, spec, c[i].file, quick, share > 300 ? share : 300, &sec, err,
                    sizeof err) == 0) {
        c[i].sec[c[i].n++] = sec;
        if (c[i].best == 0 || sec < c[i].best) c[i].best = sec;
      } else {
        printf("    %s: %s\n", c[i].name, err);
      }
    }
  int win = -1;
  cJSON *arr = cJSON_AddArrayToObject(out, "candidates");
  for (int i = 0; i < nc; i++) {
    printf("    %-60.60s", c[i].name);
    for (int j = 0; j < c[i].n; j++) printf(" %8.3f", c[i].sec[j]);
    printf(c[i].n ? " s/step\n" : strcmp(c[i].products, "right") ? " wrong products\n"
                                                                     : " no run\n");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", c[i].name);
    cJSON_AddItemToObject(e, "seconds_per_step", cJSON_CreateDoubleArray(c[i].sec, c[i].n));
    cJSON_AddStringToObject(e, "products", c[i].products);
    cJSON_AddItemToArray(arr, e);
    if (c[i].best > 0 && (win < 0 || c[i].best < c[win].best)) win = i;
  }
  return win;
}

/* Whether the entry `name` of a "kernels" object is the JSON `text`. */
static bool same_entry(const cJSON *kernels, const char *name, const char *text) {
  cJSON *want = cJSON_Parse(text);
  bool same = cJSON_Compare(cJSON_GetObjectItemCaseSensitive(kernels, name), want, true);
  cJSON_Delete(want);
  return same;
}

/* The step check's second stage, on CPU devices: the direct kernel runs the step's small
 * products (decoding's and those of short batches; until session 17 also the attention's
 * per-head products and the label products of per-head tables, which relcl's gemm_heads now
 * runs on a CPU, so the figures below are from before), and its best set does not follow
 * the Xgemm set's. The first stage times cpu_direct_set only with the sweep's Xgemm set: on
 * the Zen 5 EPYC that candidate lost (its Xgemm set was slower), though cpu_direct_set with
 * the winner's Xgemm set ran the issue-8 step 5 to 6% faster than the winner, training on
 * the bundled data 21% faster (1929 target tokens/s against 1595). So the winner is timed
 * again beside itself with cpu_direct_set; *kernels becomes that when it is faster (then
 * true). Recorded in sc["direct_check"]. */
static bool direct_check(const candidate *winner, cJSON **kernels, const cJSON *head,
                         const char *dir, const char *bench, const char *spec, bool quick,
                         int rounds, double seconds, cJSON *sc) {
  candidate pair[2];
  memset(pair, 0, sizeof pair);
  snprintf(pair[0].name, sizeof pair[0].name, "%.200s", winner->name);
  snprintf(pair[0].file, sizeof pair[0].file, "%s", winner->file);
  snprintf(pair[1].name, sizeof pair[1].name,
           "relcl's direct-kernel set, the rest the winner's (%.200s)", winner->name);
  snprintf(pair[1].file, sizeof pair[1].file, "%s/candidate-direct.json", dir);
  pair[1].kernels = kernels_with(*kernels, "XgemmDirect", cJSON_Parse(cpu_direct_set));
  if (pair[1].kernels == NULL || !write_candidate(pair[1].file, head, pair[1].kernels)) {
    printf("  cannot write %s: the direct kernel's set is kept\n", pair[1].file);
    free(pair[1].kernels);
    return false;
  }
  cJSON *dc = cJSON_AddObjectToObject(sc, "direct_check");
  int win = step_check(pair, 2, bench, spec, quick, rounds, seconds, dc);
  cJSON *k = win == 1 ? cJSON_Parse(pair[1].kernels) : NULL;
  if (k) {
    cJSON_Delete(*kernels);
    *kernels = k;
  }
  printf("  direct kernel: %s\n", k ? "relcl's set is faster, taken" : "the winner's set is kept");
  cJSON_AddStringToObject(dc, "chosen", win >= 0 ? pair[win].name : "none timed");
  free(pair[1].kernels);
  return k != NULL;
}

int main(int argc, char **argv) {
  static const struct option long_opts[] = {
      {"device", required_argument, NULL, 'd'},
      {"output", required_argument, NULL, 'o'},
      {"budget", required_argument, NULL, 'b'},
      {"xgemm-shapes", required_argument, NULL, 'x'},
      {"direct-shapes", required_argument, NULL, 'D'},
      {"routine-shapes", required_argument, NULL, 'r'},
      {"quick", no_argument, NULL, 'q'},
      {"if-needed", no_argument, NULL, 'i'},
      {"step-check", required_argument, NULL, 's'},
      {"bench", required_argument, NULL, 'B'},
      {"check", required_argument, NULL, 'C'},
      {"check-candidate", required_argument, NULL, 'K'}, /* internal: check_file_bounded */
      {"check-final", required_argument, NULL, 'F'},     /* internal: check_file_bounded */
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  /* What this program measures and checks is CLBlast's products: on a CPU device relcl would
   * run them in its own gemm_cpu instead (RELCL_CPU_GEMM, lib/runtime/context.c), in its
   * contexts here and in the step check's relcl-bench alike */
  const char *cpu_gemm_env = getenv("RELCL_CPU_GEMM");
  const bool user_clblast = cpu_gemm_env && strcmp(cpu_gemm_env, "clblast") == 0;
  setenv("RELCL_CPU_GEMM", "clblast", 1);
  const char *device = getenv("RELCL_DEVICE"), *output = NULL, *budget_arg = NULL;
  const char *xgemm_arg = NULL, *direct_arg = NULL, *routine_arg = NULL;
  bool quick = false, if_needed = false;
  const char *step_arg = "full", *bench_arg = NULL, *check_arg = NULL;
  const char *child_file = NULL;
  bool child_heads = false;
  int c;
  opterr = 0; /* our own one-line messages */
  while ((c = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    /* getopt_long has just stepped past the option it returns */
    if (c == '?' || c == ':') {
      fprintf(stderr, PROG ": %s '%s' (try --help)\n",
              c == ':' ? "missing value for" : "unknown argument", argv[optind - 1]);
      return 2;
    }
    if (c == 'h') {
      usage(stdout);
      return 0;
    }
    if (c == 'd') device = optarg;
    if (c == 'o') output = optarg;
    if (c == 'b') budget_arg = optarg;
    if (c == 'x') xgemm_arg = optarg;
    if (c == 'D') direct_arg = optarg;
    if (c == 'r') routine_arg = optarg;
    if (c == 'q') quick = true;
    if (c == 'i') if_needed = true;
    if (c == 's') step_arg = optarg;
    if (c == 'B') bench_arg = optarg;
    if (c == 'C') check_arg = optarg;
    if (c == 'K' || c == 'F') child_file = optarg, child_heads = c == 'F';
  }
  if (optind < argc) {
    fprintf(stderr, PROG ": unexpected argument '%s' (try --help)\n", argv[optind]);
    return 2;
  }
  double budget = quick ? 240 : 900;
  if (budget_arg) {
    char *end;
    budget = strtod(budget_arg, &end);
    if (*end || !(budget >= 5 && budget <= 86400)) {
      fprintf(stderr, PROG ": --budget %s: give seconds from 5 to 86400\n", budget_arg);
      return 2;
    }
  }
  if (strcmp(step_arg, "full") && strcmp(step_arg, "quick") && strcmp(step_arg, "off")) {
    fprintf(stderr, PROG ": --step-check %s: give full, quick or off\n", step_arg);
    return 2;
  }
  bool step = strcmp(step_arg, "off") != 0;
  char bench[4200] = "";
  if (bench_arg) {
    snprintf(bench, sizeof bench, "%s", bench_arg);
    if (access(bench, X_OK) != 0) {
      fprintf(stderr, PROG ": --bench %s: not an executable file\n", bench_arg);
      return 2;
    }
  } else if (step && !find_bench(bench, sizeof bench)) {
    printf("relcl-bench is not next to relcl-tune (%s): the candidates cannot be timed on a "
           "training step; the tuners' result is kept as it is\n",
           bench[0] ? bench : "/proc/self/exe unreadable");
    step = false;
  }
  /* the tuners get 60% of the budget, the step check the rest (each of its runs may take
   * longer: on a CPU most of a run is compiling CLBlast's kernels for its parameters) */
  double tune_budget = step ? budget * 0.6 : budget;
  shape xs[MAX_SHAPES], ds[MAX_SHAPES], rs[MAX_SHAPES];
  int nx, nd, nr;
  if (!parse_shapes("--xgemm-shapes", xgemm_arg ? xgemm_arg : quick ? quick_xgemm : default_xgemm,
                    true, xs, &nx) ||
      !parse_shapes("--direct-shapes",
                    direct_arg ? direct_arg : quick ? quick_direct : default_direct, false, ds,
                    &nd) ||
      !parse_shapes("--routine-shapes",
                    routine_arg ? routine_arg : quick ? quick_routine : default_routine, false,
                    rs, &nr))
    return 2;

  int p, d;
  if (relcl_device_find(device, &p, &d) != RELCL_OK) {
    fprintf(stderr, PROG ": %s\n", relcl_last_error());
    return 1;
  }
  char spec[32];
  snprintf(spec, sizeof spec, "%d:%d", p, d);
  if (child_file) { /* check_file_bounded's child: the reason alone on stderr */
    char err[512];
    if (check_file(spec, child_file, false, child_heads, err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    return 0;
  }
  if (check_arg) {
    char err[512];
    bool must_apply = strcmp(check_arg, "off") != 0;
    if (check_file(spec, check_arg, must_apply, true, err, sizeof err) != 0) {
      fprintf(stderr, PROG ": --check %s on device %s: %s\n", check_arg, spec, err);
      return 1;
    }
    printf("%s: its products on device %s match a sum in double\n", check_arg, spec);
    return 0;
  }
  relcl_context *ctx = NULL;
  if (relcl_context_create(&ctx, spec) != RELCL_OK) {
    fprintf(stderr, PROG ": device %s: %s\n", spec, relcl_last_error());
    return 1;
  }
  if (if_needed && relcl_context_tuning_fit(ctx) == RELCL_TUNING_EXACT) {
    printf("CLBlast tuning measured on %s applies already: %s\n", relcl_context_device_name(ctx),
           relcl_context_tuning(ctx));
    relcl_context_destroy(ctx);
    return 0;
  }
  cl_device_id dev = relcl_context_device(ctx);
  cl_device_type type = 0;
  clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  if (if_needed && (type & CL_DEVICE_TYPE_CPU) && !user_clblast) {
    /* on a CPU relcl's own kernels run every product (RELCL_CPU_GEMM, RELCL_HEAD_GEMM): a
     * CLBlast tuning would change nothing a user runs */
    printf("no CLBlast tuning needed on %s: on a CPU device relcl runs its products in its own "
           "kernels (with RELCL_CPU_GEMM=clblast it hands them to CLBlast; tune it then)\n",
           relcl_context_device_name(ctx));
    relcl_context_destroy(ctx);
    return 0;
  }
  if (if_needed)
    printf("no CLBlast tuning measured on %s yet (now: %s): measuring one, once for this "
           "device\n", relcl_context_device_name(ctx), relcl_context_tuning(ctx));
  cl_platform_id plat = NULL;
  char name[256] = "", driver[256] = "", pname[256] = "", pversion[512] = "", cpu[64] = "";
  snprintf(cpu, sizeof cpu, "%s", relcl_context_host_cpu(ctx));
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  clGetPlatformInfo(plat, CL_PLATFORM_VERSION, sizeof pversion - 1, pversion, NULL);
  const char *type_name = type & CL_DEVICE_TYPE_GPU           ? "GPU"
                          : type & CL_DEVICE_TYPE_CPU         ? "CPU"
                          : type & CL_DEVICE_TYPE_ACCELERATOR ? "ACCELERATOR"
                                                              : "OTHER";
  /* what applies now (another device's file, or an older one of this device's) is a
   * candidate of the step check: the tuners' result must beat it to replace it */
  const char *bk = relcl_context_tuning_kernels(ctx);
  char *before_kernels = bk ? strdup(bk) : NULL;
  char before_name[300];
  snprintf(before_name, sizeof before_name, "in force before: %.200s", relcl_context_tuning(ctx));
  char *cut = strstr(before_name, ": none measured");
  if (cut) *cut = '\0';
  relcl_context_destroy(ctx);

  char path[4096];
  if (output) {
    snprintf(path, sizeof path, "%s", output);
  } else {
    const char *c = getenv("RELCL_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    char base[3500];
    if (c && !strcmp(c, "off")) {
      fprintf(stderr, PROG ": RELCL_CACHE_DIR=off: give --output FILE\n");
      return 2;
    }
    if (c && c[0])
      snprintf(base, sizeof base, "%s", c);
    else if (x && x[0])
      snprintf(base, sizeof base, "%s/relcl", x);
    else
      snprintf(base, sizeof base, "%s/.cache/relcl", h ? h : ".");
    char file[256];
    size_t k = 0;
    for (const char *s = name; *s && k < 200; s++)
      file[k++] = (char)((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ? *s
                         : (*s >= 'A' && *s <= 'Z')                            ? *s - 'A' + 'a'
                                                                               : '-');
    file[k] = '\0';
    snprintf(path, sizeof path, "%s/tuning/%s.json", base, file);
  }

  char tmp[] = "/tmp/relcl-tune-XXXXXX";
  if (!mkdtemp(tmp)) {
    fprintf(stderr, PROG ": cannot create a temporary directory: %s\n", strerror(errno));
    return 1;
  }
  printf("tuning SGEMM for %s %s (%s, driver %s) within %.0f s\n", spec, name, pname, driver,
         budget);
  fflush(stdout);
  int failures = 0;
  results found[2] = {{calloc(MAX_RESULTS, sizeof(result)), 0},
                      {calloc(MAX_RESULTS, sizeof(result)), 0}};
  const char *tuner[2] = {"clblast_tuner_xgemm", "clblast_tuner_xgemm_direct"};
  const char *family[2] = {"xgemm", "xgemm_direct"};
  const char *kernel[2] = {"Xgemm", "XgemmDirect"};
  const shape *shapes[2] = {xs, ds};
  int n_shapes[2] = {nx, nd};
  double share[2] = {0.35, 0.15}; /* of the budget; the routine tuner gets the rest */
  const result *best[2] = {NULL, NULL};
  cJSON *kernels = cJSON_CreateObject(), *measured = cJSON_CreateObject();
  if (!found[0].r || !found[1].r) {
    fprintf(stderr, PROG ": out of memory\n");
    return 1;
  }
  double t_start = now();
  for (int t = 0; t < 2; t++) {
    for (int s = 0; s < n_shapes[t]; s++) {
      char m[16], n[16], k[16], pl[16], dv[16];
      snprintf(m, sizeof m, "%ld", shapes[t][s].m);
      snprintf(n, sizeof n, "%ld", shapes[t][s].n);
      snprintf(k, sizeof k, "%ld", shapes[t][s].k);
      snprintf(pl, sizeof pl, "%d", p);
      snprintf(dv, sizeof dv, "%d", d);
      /* -fraction 4: a quarter of each phase's configurations, in CLBlast's fixed random
       * order (the same at every shape); the time share ends the run well before that */
      const char *args[] = {tuner[t], "-platform", pl,  "-device", dv, "-precision", "32",
                            "-m",     m,           "-n", n,        "-k", k,         "-fraction",
                            "4",      "-runs",     quick ? "1" : "2", NULL};
      double seconds = tune_budget * share[t] / n_shapes[t];
      double t0 = now();
      int before = found[t].n;
      char err[512];
      printf("  %s %sx%sx%s (%.0f s) ...", tuner[t], m, n, k, seconds);
      fflush(stdout);
      int rc = run_tuner(tmp, args, seconds, s, &found[t], err, sizeof err);
      printf(" %d configurations timed (%.0f s)\n", found[t].n - before, now() - t0);
      if (rc != 0) {
        failures++;
        report_failure(tuner[t], m, n, k, rc, err);
      }
    }
    double score;
    best[t] = best_over_shapes(&found[t], n_shapes[t], &score);
    if (best[t]) {
      cJSON_AddItemToObject(kernels, kernel[t], params_json(best[t]));
      write_clblast_json(tmp, family[t], best[t]);
      cJSON *ms = cJSON_CreateArray();
      for (int s = 0; s < n_shapes[t]; s++) {
        double bt = 0;
        for (int j = 0; j < found[t].n; j++)
          if (found[t].r[j].shape == s && same_config(&found[t].r[j], best[t])) bt = found[t].r[j].ms;
        char key[64];
        snprintf(key, sizeof key, "%ldx%ldx%ld", shapes[t][s].m, shapes[t][s].n, shapes[t][s].k);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "shape", key);
        cJSON_AddNumberToObject(e, "ms", bt);
        if (bt > 0)
          cJSON_AddNumberToObject(e, "gflops", 2.0 * (double)shapes[t][s].m *
                                                   (double)shapes[t][s].n *
                                                   (double)shapes[t][s].k / (bt * 1e6));
        cJSON_AddItemToArray(ms, e);
      }
      cJSON_AddItemToObject(measured, kernel[t], ms);
    }
  }

  /* the direct/indirect switch, from the routine tuner at each shape with the tuned kernels */
  double ind[MAX_SHAPES] = {0}, dir[MAX_SHAPES] = {0};
  int timed = 0;
  cJSON *routine = cJSON_CreateArray();
  for (int s = 0; s < nr && (best[0] || best[1]); s++) {
    char m[16], n[16], k[16], pl[16], dv[16];
    snprintf(m, sizeof m, "%ld", rs[s].m);
    snprintf(n, sizeof n, "%ld", rs[s].n);
    snprintf(k, sizeof k, "%ld", rs[s].k);
    snprintf(pl, sizeof pl, "%d", p);
    snprintf(dv, sizeof dv, "%d", d);
    const char *args[] = {"clblast_tuner_routine_xgemm", "-platform", pl, "-device", dv,
                          "-precision", "32", "-m", m, "-n", n, "-k", k, "-runs",
                          quick ? "2" : "4", NULL};
    /* the first call compiles CLBlast's programs with the tuned parameters (most of its
     * time on a CPU; later calls find them in the OpenCL compiler's cache): each call may
     * take what is left */
    double seconds = tune_budget - (now() - t_start);
    if (seconds < 5) break;
    double t0 = now();
    char err[512];
    results none = {NULL, 0};
    printf("  clblast_tuner_routine_xgemm %sx%sx%s (%.0f s) ...", m, n, k, seconds);
    fflush(stdout);
    int rc = run_tuner(tmp, args, seconds, 0, &none, err, sizeof err);
    bool ok = rc == 0 && routine_times(tmp, &ind[s], &dir[s]);
    if (ok) {
      timed++;
      printf(" indirect %.2f ms, direct %.2f ms (%.0f s)\n", ind[s], dir[s], now() - t0);
      cJSON *e = cJSON_CreateObject();
      char key[64];
      snprintf(key, sizeof key, "%sx%sx%s", m, n, k);
      cJSON_AddStringToObject(e, "shape", key);
      cJSON_AddNumberToObject(e, "indirect_ms", ind[s]);
      cJSON_AddNumberToObject(e, "direct_ms", dir[s]);
      cJSON_AddItemToArray(routine, e);
    } else {
      printf(" no result (%.0f s)\n", now() - t0);
    }
    if (rc != 0) {
      failures++;
      report_failure("clblast_tuner_routine_xgemm", m, n, k, rc, err);
    }
  }
  if (timed == 0)
    printf("  the switch between the direct and indirect kernels was not measured within the "
           "budget: CLBlast's default applies (give a larger --budget to measure it)\n");
  if (timed > 0) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "XGEMM_MIN_INDIRECT_SIZE", (double)best_switch(rs, ind, dir, nr));
    cJSON_AddItemToObject(kernels, "GemmRoutine", r);
  }
  cJSON_AddItemToObject(measured, "GemmRoutine", routine);
  free(found[0].r);
  free(found[1].r);

  if (cJSON_GetArraySize(kernels) == 0) {
    fprintf(stderr, PROG ": no tuning result within %.0f s; the tuners' logs are in %s\n", budget,
            tmp);
    cJSON_Delete(kernels);
    cJSON_Delete(measured);
    return 1;
  }
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "device", name);
  cJSON_AddStringToObject(root, "driver", driver);
  cJSON_AddStringToObject(root, "platform", pname);
  cJSON_AddStringToObject(root, "device_type", type_name);
  if (cpu[0]) cJSON_AddStringToObject(root, "cpu", cpu); /* PoCL names Zen 1 and 2 alike */
  cJSON_AddStringToObject(root, "platform_version", pversion);
  cJSON_AddItemToObject(root, "measured", measured);
  double tuners_ms = 0; /* the tuners' kernels on the long products, at their K_CHUNK */
  { /* with the tuners' kernels in force: relcl's own split of long products */
    char *text = cJSON_PrintUnformatted(kernels);
    if (text) {
      printf("  with the tuners' kernels:\n");
      tuners_ms = choose_k_chunk(spec, tmp, root, &text, quick, "RelclGemm", measured);
      cJSON *k = cJSON_Parse(text);
      if (k) {
        cJSON_Delete(kernels);
        kernels = k;
      }
      free(text);
    }
    /* and with those that applied before, if they do not say (a file from before K_CHUNK):
     * the step check then compares each set at its best */
    if (before_kernels && !strstr(before_kernels, "\"RelclGemm\"")) {
      printf("  with the kernels in force before:\n");
      choose_k_chunk(spec, tmp, root, &before_kernels, quick, "RelclGemm_before", measured);
    }
  }
  /* on a CPU, the family CLBlast's tuner hardly samples; its fastest set on the long
   * products is a candidate of the step check (which can rank it otherwise: on the Zen 1
   * EPYC, quick's long products put a local-memory set of the tuners' first, the step
   * the Zen 1 set, by 0.115 to 0.135 steps/s); without a step check it replaces the
   * tuners' set when it was faster on the long products */
  char *cpu_kernels = NULL;
  bool cpu_beat = false, on_cpu = !strcmp(type_name, "CPU");
  if (on_cpu)
    cpu_kernels = cpu_sweep(spec, tmp, root, kernels, tuners_ms, quick, t_start + budget * 0.7,
                            measured, &cpu_beat);
  if (cpu_kernels && (step || cpu_beat)) {
    printf("  with relcl's fastest set:\n");
    choose_k_chunk(spec, tmp, root, &cpu_kernels, quick, "RelclGemm_cpu", measured);
  }
  if (cpu_kernels && !step && cpu_beat) {
    cJSON_AddItemToObject(root, "tuners_kernels", kernels);
    kernels = cJSON_Parse(cpu_kernels);
  }
  if (step) {
    /* the tuners time each product alone; what counts is relcl's step, with its
     * transposes, odd sizes and the switch between the direct and indirect kernels */
    candidate cand[4];
    int nc = 0;
    memset(cand, 0, sizeof cand);
    snprintf(cand[nc].name, sizeof cand[nc].name, "this search (CLBlast's tuners)");
    cand[nc++].kernels = cJSON_PrintUnformatted(kernels);
    if (before_kernels && strcmp(before_kernels, cand[0].kernels ? cand[0].kernels : "")) {
      snprintf(cand[nc].name, sizeof cand[nc].name, "%s", before_name);
      cand[nc++].kernels = strdup(before_kernels);
    }
    if (cpu_kernels) {
      snprintf(cand[nc].name, sizeof cand[nc].name, "relcl's sweep of the CPU family");
      snprintf(cand[nc].file, sizeof cand[nc].file, "%s/candidate-cpu.json", tmp);
      cand[nc++].kernels = cpu_kernels;
      cpu_kernels = NULL;
    }
    snprintf(cand[nc].name, sizeof cand[nc].name, "CLBlast's defaults");
    snprintf(cand[nc++].file, sizeof cand[0].file, "off");
    bool ok = true;
    for (int i = 0; i < nc && ok; i++)
      if (cand[i].kernels) {
        if (!cand[i].file[0])
          snprintf(cand[i].file, sizeof cand[i].file, "%s/candidate-%d.json", tmp, i);
        ok = write_candidate(cand[i].file, root, cand[i].kernels);
      }
    double left = budget - (now() - t_start);
    cJSON *sc = cJSON_CreateObject();
    int win = -1;
    if (!ok)
      printf("  cannot write the candidates' files in %s: the tuners' result is kept\n", tmp);
    else
      win = step_check(cand, nc, bench, spec, !strcmp(step_arg, "quick"), quick ? 1 : 2,
                       left, sc);
    if (win >= 0) {
      printf("  fastest: %s\n", cand[win].name);
      cJSON_AddStringToObject(sc, "chosen", cand[win].name);
      if (win != 0) { /* keep the tuners' parameters beside the winner's, for reference */
        cJSON_AddItemToObject(root, "tuners_kernels", kernels);
        kernels = cand[win].kernels ? cJSON_Parse(cand[win].kernels) : cJSON_CreateObject();
      }
      if (on_cpu && !same_entry(kernels, "XgemmDirect", cpu_direct_set)) {
        cJSON *tuners = win == 0 ? cJSON_Duplicate(kernels, true) : NULL;
        if (direct_check(&cand[win], &kernels, root, tmp, bench, spec,
                         !strcmp(step_arg, "quick"), quick ? 1 : 2, budget - (now() - t_start),
                         sc) &&
            tuners) {
          cJSON_AddItemToObject(root, "tuners_kernels", tuners);
          tuners = NULL;
        }
        cJSON_Delete(tuners);
      }
    } else if (ok) {
      printf("  no candidate could be timed: the tuners' result is kept\n");
    }
    cJSON_AddItemToObject(root, "step_check", sc);
    for (int i = 0; i < nc; i++) free(cand[i].kernels);
  }
  /* the switch between the direct and indirect kernels, on relcl's own products, for the
   * parameters going into the file (none: CLBlast's defaults were fastest); a new switch
   * moves products between the kernels, and the file is checked before it is written */
  if (cJSON_GetObjectItemCaseSensitive(kernels, "Xgemm") &&
      cJSON_GetObjectItemCaseSensitive(kernels, "XgemmDirect"))
    choose_switch(spec, tmp, root, &kernels, quick, measured);
  free(before_kernels);
  free(cpu_kernels);
  char note[512];
  snprintf(note, sizeof note, "made by relcl-tune%s in %.0f s (budget %.0f s)",
           quick ? " --quick" : "", now() - t_start, budget);
  cJSON_AddStringToObject(root, "note", note);
  cJSON_AddItemToObject(root, "kernels", kernels);
  char *text = cJSON_Print(root);
  char part[4200];
  make_dirs(path);
  snprintf(part, sizeof part, "%s.part", path);
  FILE *f = fopen(part, "w");
  if (!text || !f || fputs(text, f) < 0 || fputc('\n', f) < 0 || fclose(f) != 0) {
    fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
    return 1;
  }
  /* what goes into the file is checked whole: the step check's candidates had their 2-D
   * products checked one by one, not the per-head products (check_file), and a file no step
   * check chose (the tuners' or the CPU sweep's set, or a changed switch) not at all */
  char err[512];
  if (check_file_bounded(spec, part, true, CHECK_SECONDS, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": the chosen parameters %s: nothing written to %s\n", err, path);
    remove(part);
    return 1;
  }
  if (rename(part, path)) {
    fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
    return 1;
  }
  printf("%s\nwritten to %s%s\n", text, path,
         failures ? " (from the tuners that ran; see the lines above)" : "");
  free(text);
  cJSON_Delete(root);
  if (failures == 0) remove_dir(tmp);
  else fprintf(stderr, PROG ": the tuners' logs are in %s\n", tmp);
  return failures ? 1 : 0;
}
