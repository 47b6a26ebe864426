/* On-disk cache of compiled program binaries, keyed by a hash of the source, the build
 * options, the device name, the driver version and the platform version. Every fault
 * (missing, short, corrupt, unwritable) just means "compile from source". */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char magic[8] = {'R', 'E', 'L', 'C', 'L', 'B', 'I', 'N'};

typedef struct header {
  char magic[8];
  char key[32];
  uint64_t size;
  uint64_t checksum; /* FNV-1a of the binary, to catch a torn or damaged file */
} header;

static uint64_t fnv1a_str(uint64_t h, const char *s) { return relcl__fnv1a64(h, s, strlen(s) + 1); }

const char *relcl__cache_dir(char *buf, size_t size) {
  const char *env = getenv("RELCL_CACHE_DIR");
  buf[0] = '\0';
  if (env && strcmp(env, "off") == 0) return buf;
  if (env && env[0]) {
    snprintf(buf, size, "%s", env);
  } else if (getenv("XDG_CACHE_HOME") && getenv("XDG_CACHE_HOME")[0]) {
    snprintf(buf, size, "%s/relcl", getenv("XDG_CACHE_HOME"));
  } else if (getenv("HOME") && getenv("HOME")[0]) {
    snprintf(buf, size, "%s/.cache/relcl", getenv("HOME"));
  }
  return buf;
}

static void device_str(cl_device_id d, cl_device_info what, char *buf, size_t size) {
  if (clGetDeviceInfo(d, what, size - 1, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
  buf[size - 1] = '\0';
}

void relcl__cache_key(const char *source, const char *options, cl_platform_id platform,
                      cl_device_id device, char key[33]) {
  char dev_name[256], driver[256], dev_ver[256], plat_ver[256];
  device_str(device, CL_DEVICE_NAME, dev_name, sizeof dev_name);
  device_str(device, CL_DRIVER_VERSION, driver, sizeof driver);
  device_str(device, CL_DEVICE_VERSION, dev_ver, sizeof dev_ver);
  if (clGetPlatformInfo(platform, CL_PLATFORM_VERSION, sizeof plat_ver - 1, plat_ver, NULL) !=
      CL_SUCCESS)
    plat_ver[0] = '\0';
  plat_ver[sizeof plat_ver - 1] = '\0';
  /* two differently seeded 64-bit hashes: 128 bits make a collision negligible */
  uint64_t h[2] = {RELCL__FNV_BASIS, 0x84222325cbf29ce4ULL};
  for (int i = 0; i < 2; i++) {
    h[i] = fnv1a_str(h[i], source);
    h[i] = fnv1a_str(h[i], options);
    h[i] = fnv1a_str(h[i], dev_name);
    h[i] = fnv1a_str(h[i], driver);
    h[i] = fnv1a_str(h[i], dev_ver);
    h[i] = fnv1a_str(h[i], plat_ver);
    h[i] = fnv1a_str(h[i], RELCL_VERSION);
  }
  snprintf(key, 33, "%016llx%016llx", (unsigned long long)h[0], (unsigned long long)h[1]);
}

static void entry_path(const char *dir, const char *key, char *path, size_t size) {
  snprintf(path, size, "%s/%s.bin", dir, key);
}

bool relcl__cache_load(const char *dir, const char *key, unsigned char **bin, size_t *size) {
  char path[4200];
  entry_path(dir, key, path, sizeof path);
  FILE *f = fopen(path, "rb");
  if (f == NULL) return false;
  header h;
  unsigned char *data = NULL;
  bool ok = fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, magic, sizeof magic) == 0 &&
            memcmp(h.key, key, 32) == 0 && h.size > 0 && h.size < ((uint64_t)1 << 31);
  if (ok) {
    data = malloc((size_t)h.size);
    ok = data != NULL && fread(data, 1, (size_t)h.size, f) == h.size && fgetc(f) == EOF &&
         relcl__fnv1a64(RELCL__FNV_BASIS, data, (size_t)h.size) == h.checksum;
  }
  fclose(f);
  if (!ok) {
    free(data);
    return false;
  }
  *bin = data;
  *size = (size_t)h.size;
  return true;
}

static void make_dirs(const char *dir) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(tmp, 0755);
      *p = '/';
    }
  mkdir(tmp, 0755);
}

typedef struct entry {
  const char *key;
  const unsigned char *bin;
  size_t size;
} entry;

static relcl_status write_entry(relcl__file_out *out, void *arg) {
  const entry *e = arg;
  header h;
  memcpy(h.magic, magic, sizeof magic);
  memcpy(h.key, e->key, 32);
  h.size = e->size;
  h.checksum = relcl__fnv1a64(RELCL__FNV_BASIS, e->bin, e->size);
  relcl__file_out_write(out, &h, sizeof h);
  relcl__file_out_write(out, e->bin, e->size);
  return RELCL_OK;
}

void relcl__cache_store(const char *dir, const char *key, const unsigned char *bin,
                        size_t size) {
  make_dirs(dir);
  char path[4200];
  entry_path(dir, key, path, sizeof path);
  entry e = {key, bin, size};
  /* a cache that cannot be written is no error: the next run compiles again */
  (void)relcl__write_atomic(path, write_entry, &e);
  relcl__clear_error();
}
