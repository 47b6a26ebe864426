/* On-disk cache of compiled program binaries, keyed by a hash of the source, the build
 * options, the device name, the driver version and the platform version. Every fault
 * (missing, short, corrupt, unwritable) just means "compile from source"; a binary reaches
 * the driver only after its size and a hash of all of it are checked. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* "RELCLBI2": entries of the first format (one FNV-1a of the body) are never read, only
 * rebuilt and replaced. */
static const char magic[8] = {'R', 'E', 'L', 'C', 'L', 'B', 'I', '2'};

typedef struct header {
  char magic[8];
  char key[32];
  uint64_t size;
  uint64_t hash[2]; /* of magic, key, size and the whole binary: see entry_hash */
} header;

/* A driver trusts the lengths inside its binaries: PoCL read far out of bounds (SIGSEGV) on a
 * body that was damaged but carried a matching 64-bit FNV-1a. So a binary is handed to the
 * driver only when two differently seeded 64-bit hashes of the header fields and of every
 * byte of the body match, and its size is exactly what is left of the file. */
static void entry_hash(const header *h, const unsigned char *bin, uint64_t out[2]) {
  static const uint64_t seed[2] = {RELCL__FNV_BASIS, 0x84222325cbf29ce4ULL};
  for (int i = 0; i < 2; i++) {
    uint64_t x = relcl__fnv1a64(seed[i], h->magic, sizeof h->magic);
    x = relcl__fnv1a64(x, h->key, sizeof h->key);
    x = relcl__fnv1a64(x, &h->size, sizeof h->size);
    out[i] = relcl__fnv1a64(x, bin, (size_t)h->size);
  }
}

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
  struct stat sb;
  /* the size first, from the file system: no allocation or read of a size the file lacks */
  bool ok = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && fread(&h, sizeof h, 1, f) == 1 &&
            memcmp(h.magic, magic, sizeof magic) == 0 && memcmp(h.key, key, 32) == 0 &&
            h.size > 0 && h.size < ((uint64_t)1 << 31) &&
            (uint64_t)sb.st_size == sizeof h + h.size;
  if (ok) {
    uint64_t hash[2];
    data = malloc((size_t)h.size);
    ok = data != NULL && fread(data, 1, (size_t)h.size, f) == h.size && fgetc(f) == EOF;
    if (ok) entry_hash(&h, data, hash);
    ok = ok && hash[0] == h.hash[0] && hash[1] == h.hash[1];
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
  memset(&h, 0, sizeof h);
  memcpy(h.magic, magic, sizeof magic);
  memcpy(h.key, e->key, 32);
  h.size = e->size;
  entry_hash(&h, e->bin, h.hash);
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
