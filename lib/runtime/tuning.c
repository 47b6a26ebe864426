/* CLBlast tuning parameters per device. CLBlast's built-in database knows many GPUs but not,
 * say, PoCL on a given CPU, where its defaults run SGEMM several times slower than tuned
 * parameters do. relcl-tune runs CLBlast's tuners for a device and writes the best
 * parameters as a relcl tuning file. A context applies the first file measured on its device
 * (same name and driver version and, for a CPU device, the same CPU model: PoCL names its device
 * after the instruction set it compiles for, so an AMD EPYC of 2017 and one of 2019 are both
 * "pthread-haswell-AMD EPYC", and parameters measured on one can run the other's GEMMs at a
 * third of what they could); when there is none, the closest known one: a file measured on the
 * same device name on another CPU model, else on another device of the same platform and type
 * (another PoCL CPU, say), whose parameters run several times faster than CLBlast's defaults
 * do, and says so in relcl_context_tuning().
 * It looks in:
 *   RELCL_TUNING=FILE (or "off" to apply none), else
 *   the cache directory's tuning/ subdirectory (where relcl-tune writes), else
 *   the files shipped in tuning/ and embedded at build time.
 * File format (JSON):
 *   {"device": "<CL_DEVICE_NAME>", "driver": "<CL_DRIVER_VERSION>",
 *    "platform": "<CL_PLATFORM_NAME>", "device_type": "CPU" | "GPU" | "ACCELERATOR" | "OTHER",
 *    "cpu": "<relcl_context_host_cpu(): for a CPU device, e.g. AuthenticAMD family 23 model 1>",
 *    "kernels": {"Xgemm": {"MWG": 64, ...}, "XgemmDirect": {...},
 *                "RelclGemm": {"K_CHUNK": 512}}, ...}
 * Every entry of "kernels" is a CLBlast kernel's parameters except RelclGemm, which is relcl's
 * own: K_CHUNK > 0 computes a product whose inner dimension is longer than 1.5 K_CHUNK as a
 * sequence of products over consecutive slices of at most about K_CHUNK, accumulated into C
 * in order (gemm.c). On a CPU, CLBlast's kernels run a long inner dimension at half the rate
 * of a short one (a Zen 1 EPYC: 1048x256x8000 at 12 GFLOP/s in one call, 23 in slices of
 * 500), while on a GPU the extra passes over C only cost; a file without it splits nothing.
 * A file that does not parse is skipped with no effect on results: tuning changes speed
 * only, never what CLBlast computes. */
#include "internal.h"

#include <cjson/cJSON.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the files of tuning/, embedded at build time; NULL-ended */
extern const char *const relcl__tuning_sources[];

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *buf = NULL;
  long n;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1 << 24) &&
      fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
    if (fread(buf, 1, (size_t)n, f) == (size_t)n)
      buf[n] = '\0';
    else {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  return buf;
}

static bool str_is(const cJSON *obj, const char *key, const char *want) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsString(v) && strcmp(v->valuestring, want) == 0;
}

void relcl__host_cpu(char *buf, size_t size) {
  buf[0] = '\0';
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  unsigned a, b, c, d;
  char vendor[13];
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  memcpy(vendor, &b, 4);
  memcpy(vendor + 4, &d, 4);
  memcpy(vendor + 8, &c, 4);
  vendor[12] = '\0';
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  /* the display family and model of Intel's and AMD's manuals */
  unsigned family = (a >> 8) & 0xfu, model = (a >> 4) & 0xfu;
  if (family == 0xfu) family += (a >> 20) & 0xffu;
  if (family == 0x6u || family >= 0xfu) model += ((a >> 16) & 0xfu) << 4;
  snprintf(buf, size, "%s family %u model %u", vendor, family, model);
#else
  (void)size; /* unknown: a CPU device's tuning is then matched on its name and driver only */
#endif
}

/* A number from a sysfs file of cache index i (level, size), with its unit's letter in
 * *unit where it has one; 0 where the file is missing or says nothing */
static unsigned long cache_attr(int i, const char *name, char *unit) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, name);
  FILE *f = fopen(path, "r");
  unsigned long v = 0;
  if (f) {
    if (fscanf(f, "%lu%c", &v, unit) < 1) v = 0;
    fclose(f);
  }
  return v;
}

size_t relcl__host_l2(void) {
  for (int i = 0; i < 8; i++) { /* the index whose level is 2 (its order is not fixed) */
    char unit = '\n';
    if (cache_attr(i, "level", &unit) != 2) continue;
    const unsigned long v = cache_attr(i, "size", &unit);
    if (v > 0) return unit == 'M' ? (size_t)v << 20 : unit == 'K' ? (size_t)v << 10 : v;
  }
  return (size_t)1 << 20;
}

int relcl__tuning_rank(const char *text, const relcl__tuning_device *dev) {
  cJSON *root = cJSON_Parse(text);
  int rank = 0;
  if (root && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "kernels"))) {
    if (str_is(root, "device", dev->name) && str_is(root, "driver", dev->driver))
      /* a file that does not name its CPU may come from another model of the same name */
      rank = dev->cpu[0] == '\0' || str_is(root, "cpu", dev->cpu) ? 3 : 2;
    else if (str_is(root, "platform", dev->platform) && str_is(root, "device_type", dev->type))
      rank = 1;
  }
  cJSON_Delete(root);
  return rank;
}

relcl_tuning_fit relcl__tuning_fit(const char *text, const relcl__tuning_device *dev) {
  int rank = relcl__tuning_rank(text, dev);
  return rank == 3 ? RELCL_TUNING_EXACT : rank > 0 ? RELCL_TUNING_NEAREST : RELCL_TUNING_NONE;
}

void relcl__tuning_describe(cl_platform_id platform, cl_device_id device,
                            relcl__tuning_device *dev) {
  memset(dev, 0, sizeof *dev);
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof dev->name - 1, dev->name, NULL);
  clGetDeviceInfo(device, CL_DRIVER_VERSION, sizeof dev->driver - 1, dev->driver, NULL);
  clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof dev->platform - 1, dev->platform, NULL);
  cl_device_type type = 0;
  clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  snprintf(dev->type, sizeof dev->type, "%s",
           type & CL_DEVICE_TYPE_GPU           ? "GPU"
           : type & CL_DEVICE_TYPE_CPU         ? "CPU"
           : type & CL_DEVICE_TYPE_ACCELERATOR ? "ACCELERATOR"
                                               : "OTHER");
  if (type & CL_DEVICE_TYPE_CPU) relcl__host_cpu(dev->cpu, sizeof dev->cpu);
}

/* Apply every kernel's parameters of a parsed file; the number of kernels applied. */
static int apply(cl_device_id device, const cJSON *root, relcl_context *ctx, char *why,
                 size_t why_size) {
  const cJSON *kernels = cJSON_GetObjectItemCaseSensitive(root, "kernels"), *k;
  int applied = 0;
  cJSON_ArrayForEach(k, kernels) {
    const char *names[64];
    size_t values[64], n = 0;
    const cJSON *p;
    if (k->string && strcmp(k->string, "RelclGemm") == 0) { /* relcl's own, not CLBlast's */
      p = cJSON_GetObjectItemCaseSensitive(k, "K_CHUNK");
      if (cJSON_IsNumber(p) && p->valuedouble >= 0 && p->valuedouble < 1e9) {
        ctx->gemm_k_chunk = (size_t)p->valuedouble;
        applied++;
      } else if (why[0] == '\0') {
        snprintf(why, why_size, "kernel RelclGemm: K_CHUNK is not a size");
      }
      continue;
    }
    cJSON_ArrayForEach(p, k) {
      if (n == 64 || !cJSON_IsNumber(p) || p->valuedouble < 0) continue;
      names[n] = p->string;
      values[n++] = (size_t)p->valuedouble;
    }
    if (k->string && n > 0 && relcl__gemm_override(device, k->string, n, names, values) ==
                                  RELCL_OK) {
      applied++;
      /* what gemm.c needs to know of CLBlast's choices */
      for (size_t i = 0; i < n; i++) {
        if (strcmp(k->string, "Xgemm") == 0) {
          if (strcmp(names[i], "NWG") == 0) ctx->gemm_row_tile = values[i];
          if (strcmp(names[i], "MWG") == 0) ctx->gemm_col_tile = values[i];
          if (strcmp(names[i], "KWG") == 0) ctx->gemm_k_tile = values[i];
          if (strcmp(names[i], "GEMMK") == 0) ctx->gemm_kernel_1 = values[i] == 1;
        }
        if (strcmp(k->string, "GemmRoutine") == 0 &&
            strcmp(names[i], "XGEMM_MIN_INDIRECT_SIZE") == 0)
          ctx->gemm_min_indirect = values[i];
      }
    } else if (why[0] == '\0')
      snprintf(why, why_size, "kernel %s: %s", k->string ? k->string : "?", relcl_last_error());
  }
  return applied;
}

/* The best candidate seen so far (relcl__tuning_rank): an exact one ends the search; of the
 * others the first of the highest rank is kept (the search order puts the user's own files
 * before the shipped ones). */
typedef struct {
  int rank;
  relcl_tuning_fit fit;
  char *text;
  char origin[4500];
} best_file;

static void consider(best_file *best, const relcl__tuning_device *dev, char *text,
                     const char *origin) {
  int rank = text ? relcl__tuning_rank(text, dev) : 0;
  if (rank > best->rank) {
    free(best->text);
    best->rank = rank;
    best->fit = rank == 3 ? RELCL_TUNING_EXACT : RELCL_TUNING_NEAREST;
    best->text = text;
    snprintf(best->origin, sizeof best->origin, "%s", origin);
  } else {
    free(text);
  }
}

#define RELCL__TUNE_HINT "run `relcl-tune --quick` (a few minutes) to measure this device"
/* where relcl's own kernels run every product (relcl__own_products), CLBlast's tuning
 * changes nothing, and the hint says so instead */
#define RELCL__NO_TUNE_HINT                                                                  \
  "no tuning needed: relcl's own kernels run every product on this device (CLBlast's only "  \
  "with RELCL_CPU_GEMM=clblast and RELCL_HEAD_GEMM=clblast)"

void relcl__tuning_apply(relcl_context *ctx) {
  relcl__tuning_device dev;
  relcl__tuning_describe(ctx->platform, ctx->device, &dev);
  snprintf(ctx->host_cpu, sizeof ctx->host_cpu, "%s", dev.cpu);
  char *used = ctx->tuning;
  size_t used_size = sizeof ctx->tuning;
  ctx->tuning_fit = RELCL_TUNING_NONE;
  const char *env = getenv("RELCL_TUNING");
  if (env && strcmp(env, "off") == 0) {
    snprintf(used, used_size, "none (CLBlast's defaults): RELCL_TUNING=off");
    return;
  }
  best_file best = {0, RELCL_TUNING_NONE, NULL, ""};
  if (env && env[0]) {
    errno = 0;
    char *text = read_all(env);
    if (text == NULL) { /* say so: "not for this device" would send the user the wrong way */
      snprintf(used, used_size,
               "none (CLBlast's defaults): RELCL_TUNING=%.800s cannot be read (%s)", env,
               errno ? strerror(errno) : "over 16 MiB or cut short");
      return;
    }
    consider(&best, &dev, text, env);
  } else {
    char dir[4096];
    relcl__cache_dir(dir, sizeof dir);
    if (dir[0]) {
      char tdir[4200];
      snprintf(tdir, sizeof tdir, "%s/tuning", dir);
      DIR *d = opendir(tdir);
      for (struct dirent *e; d && best.fit != RELCL_TUNING_EXACT && (e = readdir(d));) {
        if (!strstr(e->d_name, ".json") || e->d_name[0] == '.') continue;
        char path[4500];
        snprintf(path, sizeof path, "%s/%s", tdir, e->d_name);
        consider(&best, &dev, read_all(path), path);
      }
      if (d) closedir(d);
    }
    for (int i = 0; best.fit != RELCL_TUNING_EXACT && relcl__tuning_sources[i]; i++)
      consider(&best, &dev, strdup(relcl__tuning_sources[i]), "shipped tuning");
  }
  const char *hint = relcl__own_products_in(ctx) ? RELCL__NO_TUNE_HINT : RELCL__TUNE_HINT;
  if (best.fit == RELCL_TUNING_NONE) {
    snprintf(used, used_size, "none (CLBlast's defaults): %s; %s",
             env && env[0] ? "RELCL_TUNING's file is not for this platform and device type"
                           : "no tuning known for this platform and device type",
             hint);
    return;
  }
  cJSON *root = cJSON_Parse(best.text);
  char why[256] = "";
  int n = apply(ctx->device, root, ctx, why, sizeof why);
  const cJSON *from = cJSON_GetObjectItemCaseSensitive(root, "device");
  const cJSON *from_cpu = cJSON_GetObjectItemCaseSensitive(root, "cpu");
  if (best.fit == RELCL_TUNING_EXACT)
    snprintf(used, used_size, "%.600s (%d kernel%s%s%s)", best.origin, n, n == 1 ? "" : "s",
             why[0] ? "; skipped " : "", why);
  else if (best.rank == 2)
    snprintf(used, used_size,
             "borrowed from %.100s on %s%.60s (%.300s, %d kernel%s%s%s): none measured on "
             "this CPU (%s); %s",
             dev.name, cJSON_IsString(from_cpu) ? "" : "a CPU it does not name",
             cJSON_IsString(from_cpu) ? from_cpu->valuestring : "", best.origin, n,
             n == 1 ? "" : "s", why[0] ? "; skipped " : "", why, dev.cpu, hint);
  else
    snprintf(used, used_size,
             "borrowed from %.100s (%.300s, %d kernel%s%s%s): none measured on this device; %s",
             cJSON_IsString(from) ? from->valuestring : "another device", best.origin, n,
             n == 1 ? "" : "s", why[0] ? "; skipped " : "", why, hint);
  ctx->tuning_fit = best.fit;
  /* kept so that relcl-tune can time what is in force against its own result */
  ctx->tuning_kernels =
      cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(root, "kernels"));
  cJSON_Delete(root);
  free(best.text);
}

const char *relcl_context_tuning(const relcl_context *ctx) { return ctx->tuning; }

relcl_tuning_fit relcl_context_tuning_fit(const relcl_context *ctx) { return ctx->tuning_fit; }

const char *relcl_context_tuning_kernels(const relcl_context *ctx) { return ctx->tuning_kernels; }

const char *relcl_context_host_cpu(const relcl_context *ctx) { return ctx->host_cpu; }
