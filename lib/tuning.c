/* CLBlast tuning parameters per device. CLBlast's built-in database knows many GPUs but not,
 * say, PoCL on a given CPU, where its defaults run SGEMM several times slower than tuned
 * parameters do. relcl-tune runs CLBlast's tuners for a device and writes the best
 * parameters as a relcl tuning file; a context applies the first file that matches its
 * device (name and driver version), looking in:
 *   RELCL_TUNING=FILE (or "off" to apply none), else
 *   the cache directory's tuning/ subdirectory (where relcl-tune writes), else
 *   the files shipped in tuning/ and embedded at build time.
 * File format (JSON):
 *   {"device": "<CL_DEVICE_NAME>", "driver": "<CL_DRIVER_VERSION>",
 *    "kernels": {"Xgemm": {"MWG": 64, ...}, "XgemmDirect": {...}}, ...}
 * A file that does not parse is skipped with no effect on results: tuning changes speed
 * only, never what CLBlast computes. */
#include "internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
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

/* Apply every kernel's parameters of a parsed file; the number of kernels applied. */
static int apply(cl_device_id device, const cJSON *root, char *why, size_t why_size) {
  const cJSON *kernels = cJSON_GetObjectItemCaseSensitive(root, "kernels"), *k;
  int applied = 0;
  cJSON_ArrayForEach(k, kernels) {
    const char *names[64];
    size_t values[64], n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, k) {
      if (n == 64 || !cJSON_IsNumber(p) || p->valuedouble < 0) continue;
      names[n] = p->string;
      values[n++] = (size_t)p->valuedouble;
    }
    if (k->string && n > 0 && relcl__gemm_override(device, k->string, n, names, values) ==
                                  RELCL_OK)
      applied++;
    else if (why[0] == '\0')
      snprintf(why, why_size, "kernel %s: %s", k->string ? k->string : "?", relcl_last_error());
  }
  return applied;
}

/* Parse text; when it is for this device, apply it. true when it matched. */
static bool try_text(cl_device_id device, const char *name, const char *driver,
                     const char *text, const char *origin, char *used, size_t used_size) {
  cJSON *root = cJSON_Parse(text);
  bool match = root && str_is(root, "device", name) && str_is(root, "driver", driver);
  if (match) {
    char why[512] = "";
    int n = apply(device, root, why, sizeof why);
    snprintf(used, used_size, "%s (%d kernel%s%s%s)", origin, n, n == 1 ? "" : "s",
             why[0] ? "; skipped " : "", why);
  }
  cJSON_Delete(root);
  return match;
}

static bool try_file(cl_device_id device, const char *name, const char *driver,
                     const char *path, char *used, size_t used_size) {
  char *text = read_all(path);
  bool match = text && try_text(device, name, driver, text, path, used, used_size);
  free(text);
  return match;
}

void relcl__tuning_apply(relcl_context *ctx) {
  char name[256] = "", driver[256] = "";
  clGetDeviceInfo(ctx->device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  clGetDeviceInfo(ctx->device, CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
  char *used = ctx->tuning;
  size_t used_size = sizeof ctx->tuning;
  snprintf(used, used_size, "none (CLBlast's defaults)");
  const char *env = getenv("RELCL_TUNING");
  if (env && strcmp(env, "off") == 0) return;
  if (env && env[0]) {
    if (!try_file(ctx->device, name, driver, env, used, used_size))
      snprintf(used, used_size, "none: RELCL_TUNING=%s is not for this device", env);
    return;
  }
  char dir[4096];
  relcl__cache_dir(dir, sizeof dir);
  if (dir[0]) {
    char tdir[4200];
    snprintf(tdir, sizeof tdir, "%s/tuning", dir);
    DIR *d = opendir(tdir);
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
      if (!strstr(e->d_name, ".json") || e->d_name[0] == '.') continue;
      char path[4500];
      snprintf(path, sizeof path, "%s/%s", tdir, e->d_name);
      found = try_file(ctx->device, name, driver, path, used, used_size);
    }
    if (d) closedir(d);
    if (found) return;
  }
  for (int i = 0; relcl__tuning_sources[i]; i++)
    if (try_text(ctx->device, name, driver, relcl__tuning_sources[i], "shipped tuning", used,
                 used_size))
      return;
}

const char *relcl_context_tuning(const relcl_context *ctx) { return ctx->tuning; }
