/* relcl-tune: measures CLBlast's best GEMM parameters for one OpenCL device with CLBlast's
 * own tuners (package clblast-utils) and writes them as a relcl tuning file, which every
 * relcl context on that device then applies (see lib/tuning.c). CLBlast ships tuned values
 * for many GPUs; for other devices (PoCL on a CPU, a new GPU) its defaults can be several
 * times slower. */
#include "relcl.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "relcl-tune"

/* Each tuner times a fixed set of configurations, then a random part of a larger space:
 * about 240 random configurations for either at the default --effort 1. */
static const struct {
  const char *name;
  double fraction; /* of the random space, at effort 1 */
} tuners[] = {
    {"clblast_tuner_xgemm", 1e-5},        /* random space: 24 million configurations */
    {"clblast_tuner_xgemm_direct", 5e-3}, /* random space: 46 thousand */
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: " PROG " [--device SPEC] [--size N] [--effort X] [--output FILE]\n"
          "Runs CLBlast's SGEMM tuners (%s, %s) on one device and writes the best parameters\n"
          "as a relcl tuning file. Default output: the cache directory's tuning/ folder\n"
          "($RELCL_CACHE_DIR, else $XDG_CACHE_HOME/relcl or ~/.cache/relcl), where every relcl\n"
          "context finds it. --size: matrix size the tuners time (default 512); --effort:\n"
          "multiplies the number of random configurations tried (default 1, about 240 per\n"
          "tuner). Takes several minutes on a CPU device.\n",
          tuners[0].name, tuners[1].name);
}

static int run_tuner(const char *dir, const char *tuner, int p, int d, const char *size,
                     double fraction_value) {
  char pl[16], dv[16], log[4200], fraction[32];
  snprintf(fraction, sizeof fraction, "%.8f", fraction_value);
  snprintf(pl, sizeof pl, "%d", p);
  snprintf(dv, sizeof dv, "%d", d);
  snprintf(log, sizeof log, "%s/%s.log", dir, tuner);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (chdir(dir) != 0 || !freopen(log, "w", stdout) || !freopen(log, "a", stderr)) _exit(127);
    execlp(tuner, tuner, "-platform", pl, "-device", dv, "-precision", "32", "-m", size, "-n",
           size, "-k", size, "-fraction", fraction, "-runs", "1", (char *)NULL);
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Adds the best result of one CLBlast tuner JSON file to kernels (best time per kernel). */
static void take_best(const char *path, cJSON *kernels, cJSON *times) {
  FILE *f = fopen(path, "rb");
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = calloc((size_t)n + 1, 1);
  if (text && fread(text, 1, (size_t)n, f) == (size_t)n) {
    cJSON *root = cJSON_Parse(text);
    const cJSON *kernel = cJSON_GetObjectItemCaseSensitive(root, "best_kernel");
    const cJSON *time = cJSON_GetObjectItemCaseSensitive(root, "best_time");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "best_parameters");
    if (cJSON_IsString(kernel) && cJSON_IsString(time) && cJSON_IsString(params)) {
      /* the tuners name the OpenCL kernel they timed ("XgemmDirectTN"); CLBlast takes the
       * parameters of its family ("XgemmDirect") */
      if (strncmp(kernel->valuestring, "XgemmDirect", 11) == 0) kernel->valuestring[11] = '\0';
      double t = atof(time->valuestring);
      const cJSON *old = cJSON_GetObjectItemCaseSensitive(times, kernel->valuestring);
      if (t > 0 && (!old || t < old->valuedouble)) {
        cJSON *p = cJSON_CreateObject();
        char *copy = strdup(params->valuestring);
        for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " ")) {
          char *eq = strchr(tok, '=');
          if (!eq || strncmp(tok, "PRECISION=", 10) == 0) continue;
          *eq = '\0';
          cJSON_AddNumberToObject(p, tok, atof(eq + 1));
        }
        free(copy);
        cJSON_DeleteItemFromObjectCaseSensitive(kernels, kernel->valuestring);
        cJSON_DeleteItemFromObjectCaseSensitive(times, kernel->valuestring);
        cJSON_AddItemToObject(kernels, kernel->valuestring, p);
        cJSON_AddNumberToObject(times, kernel->valuestring, t);
      }
    }
    cJSON_Delete(root);
  }
  free(text);
  fclose(f);
}

static void make_dirs(char *path) {
  for (char *s = path + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir(path, 0755);
      *s = '/';
    }
}

int main(int argc, char **argv) {
  static const struct option long_opts[] = {
      {"device", required_argument, NULL, 'd'}, {"size", required_argument, NULL, 's'},
      {"effort", required_argument, NULL, 'e'}, {"output", required_argument, NULL, 'o'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
  };
  const char *device = getenv("RELCL_DEVICE"), *size = "512", *effort = "1";
  const char *output = NULL;
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
    if (c == 's') size = optarg;
    if (c == 'e') effort = optarg;
    if (c == 'o') output = optarg;
  }
  if (optind < argc) {
    fprintf(stderr, PROG ": unexpected argument '%s' (try --help)\n", argv[optind]);
    return 2;
  }
  char *end;
  long n = strtol(size, &end, 10);
  if (*end || end == size || n < 16 || n > 8192) {
    fprintf(stderr, PROG ": --size %s: give a matrix size from 16 to 8192\n", size);
    return 2;
  }
  double x = strtod(effort, &end);
  if (*end || end == effort || !(x > 0 && x <= 1000)) {
    fprintf(stderr, PROG ": --effort %s: give a number in (0, 1000]\n", effort);
    return 2;
  }
  int p, d;
  if (relcl_device_find(device, &p, &d) != RELCL_OK) {
    fprintf(stderr, PROG ": %s\n", relcl_last_error());
    return 1;
  }
  cl_platform_id plats[16];
  cl_device_id devs[64];
  cl_uint np = 0, nd = 0;
  clGetPlatformIDs(16, plats, &np);
  clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 64, devs, &nd);
  char name[256] = "", driver[256] = "";
  clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  clGetDeviceInfo(devs[d], CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);

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
  printf("tuning SGEMM for %d:%d %s (driver %s), size %s, effort %s\n", p, d, name, driver,
         size, effort);
  cJSON *kernels = cJSON_CreateObject(), *times = cJSON_CreateObject();
  int rc = 0;
  for (size_t t = 0; t < sizeof tuners / sizeof *tuners; t++) {
    time_t t0 = time(NULL);
    printf("  %s ...", tuners[t].name);
    fflush(stdout);
    double fraction = tuners[t].fraction * atof(effort);
    int st = run_tuner(tmp, tuners[t].name, p, d, size, fraction > 1 ? 1 : fraction);
    printf(" %s (%lds)\n", st == 0 ? "done" : "FAILED", (long)(time(NULL) - t0));
    if (st != 0) {
      fprintf(stderr, PROG ": %s failed (exit %d)%s; its log: %s/%s.log\n", tuners[t].name, st,
              st == 127 ? ": is clblast-utils installed?" : "", tmp, tuners[t].name);
      rc = 1;
    }
  }
  DIR *dir = opendir(tmp);
  for (struct dirent *e; dir && (e = readdir(dir));)
    if (strstr(e->d_name, ".json")) {
      char jp[4200];
      snprintf(jp, sizeof jp, "%s/%s", tmp, e->d_name);
      take_best(jp, kernels, times);
    }
  if (dir) closedir(dir);
  if (cJSON_GetArraySize(kernels) == 0) {
    fprintf(stderr, PROG ": no tuning result; logs in %s\n", tmp);
    return 1;
  }
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "device", name);
  cJSON_AddStringToObject(root, "driver", driver);
  char note[512];
  snprintf(note, sizeof note, "made by relcl-tune: CLBlast tuners, size %s, effort %s", size,
           effort);
  cJSON_AddStringToObject(root, "note", note);
  cJSON_AddItemToObject(root, "best_ms", times);
  cJSON_AddItemToObject(root, "kernels", kernels);
  char *text = cJSON_Print(root);
  char part[4200];
  make_dirs(path);
  snprintf(part, sizeof part, "%s.part", path);
  FILE *f = fopen(part, "w");
  if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0 || fclose(f) != 0 || rename(part, path)) {
    fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
    return 1;
  }
  printf("%s\nwritten to %s\n", text, path);
  free(text);
  cJSON_Delete(root);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (rc == 0 && system(cmd) != 0) fprintf(stderr, PROG ": could not remove %s\n", tmp);
  return rc;
}
