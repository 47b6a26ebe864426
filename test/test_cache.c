/* The program-binary cache: binaries are written under RELCL_CACHE_DIR, reused, rewritten
 * when damaged, skipped with RELCL_CACHE_DIR=off; an unusable directory just means
 * compiling. A kernel that fails to build reports RELCL_ERR_BUILD with the build log;
 * RELCL_KERNEL_DIR loads the sources from disk. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

#ifndef RELCL_SOURCE_KERNEL_DIR
#error "RELCL_SOURCE_KERNEL_DIR must name the kernels/ directory"
#endif

static char tmp[256];

static int count_bins(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strstr(e->d_name, ".bin") && !strstr(e->d_name, ".tmp")) n++;
  closedir(d);
  return n;
}

static void damage_all(const char *dir, int how) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strstr(e->d_name, ".bin")) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (how == 0) {
      truncate(path, 20);
    } else {
      FILE *f = fopen(path, "r+b");
      fseek(f, -5, SEEK_END);
      int c = fgetc(f);
      fseek(f, -5, SEEK_END);
      fputc(c ^ 0x5a, f);
      fclose(f);
    }
  }
  if (d) closedir(d);
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  fputs(text, f);
  fclose(f);
  return 1;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc((size_t)n + 1, 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
  fclose(f);
  return s;
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/relcl-test-cache-XXXXXX");
  if (!mkdtemp(tmp)) return 1;
  char cache[300], kdir[300];
  snprintf(cache, sizeof cache, "%s/cache", tmp);
  setenv("RELCL_CACHE_DIR", cache, 1);

  /* hits and source builds are the library's own counts (relcl__program_counts): equal
   * results and file counts alone would also come from a cache that never hits */
  unsigned long h0, b0, h1, b1;
  relcl__program_counts(&h0, &b0);
  float ref = tu_attn_probe();
  int n = count_bins(cache);
  relcl__program_counts(&h1, &b1);
  tu_check(!isnan(ref) && n >= 3 && h1 == h0 && b1 - b0 == (unsigned long)n,
           "first context writes %d binaries into the cache (%lu built, %lu hits)", n, b1 - b0,
           h1 - h0);
  relcl__program_counts(&h0, &b0);
  float again = tu_attn_probe();
  relcl__program_counts(&h1, &b1);
  tu_check(again == ref && count_bins(cache) == n && h1 - h0 == (unsigned long)n && b1 == b0,
           "second context reuses them: %lu hits, %lu built, same result", h1 - h0, b1 - b0);
  damage_all(cache, 0);
  relcl__program_counts(&h0, &b0);
  float t = tu_attn_probe();
  relcl__program_counts(&h1, &b1);
  tu_check(t == ref && h1 == h0 && b1 - b0 == (unsigned long)n,
           "truncated cache entries fall back to compiling (%lu built, %lu hits)", b1 - b0,
           h1 - h0);
  relcl__program_counts(&h0, &b0);
  tu_check(count_bins(cache) == n && tu_attn_probe() == ref, "and are rewritten whole");
  relcl__program_counts(&h1, &b1);
  tu_check(h1 - h0 == (unsigned long)n && b1 == b0, "the rewritten entries hit: %lu hits",
           h1 - h0);
  damage_all(cache, 1);
  relcl__program_counts(&h0, &b0);
  tu_check(tu_attn_probe() == ref, "a flipped byte in an entry falls back to compiling");
  relcl__program_counts(&h1, &b1);
  tu_check(h1 == h0 && b1 - b0 == (unsigned long)n, "no damaged entry is used: %lu hits",
           h1 - h0);

  char off[300];
  snprintf(off, sizeof off, "%s/off-test", tmp);
  setenv("RELCL_CACHE_DIR", "off", 1);
  tu_check(tu_attn_probe() == ref && count_bins(off) == 0, "RELCL_CACHE_DIR=off works and writes nothing");
  char blocked[300];
  snprintf(blocked, sizeof blocked, "%s/file", tmp);
  write_file(blocked, "not a directory");
  char under[340];
  snprintf(under, sizeof under, "%s/sub", blocked);
  setenv("RELCL_CACHE_DIR", under, 1);
  tu_check(tu_attn_probe() == ref, "an unusable cache directory just means compiling");
  setenv("RELCL_CACHE_DIR", "off", 1);

  /* RELCL_KERNEL_DIR: a copy of the sources behaves the same; a broken one reports its log */
  snprintf(kdir, sizeof kdir, "%s/kernels", tmp);
  mkdir(kdir, 0755);
  const char *const *names = relcl_program_names();
  char path[600];
  static const char *const prelude[] = {"flags.h", "common.cl"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", RELCL_SOURCE_KERNEL_DIR, prelude[i]);
    char *text = read_file(path);
    snprintf(path, sizeof path, "%s/%s", kdir, prelude[i]);
    write_file(path, text ? text : "");
    free(text);
  }
  for (int i = 0; names[i]; i++) {
    char src[600], dst[600];
    snprintf(src, sizeof src, "%s/%s.cl", RELCL_SOURCE_KERNEL_DIR, names[i]);
    snprintf(dst, sizeof dst, "%s/%s.cl", kdir, names[i]);
    char *text = read_file(src);
    write_file(dst, text ? text : "");
    free(text);
  }
  setenv("RELCL_KERNEL_DIR", kdir, 1);
  tu_check(tu_attn_probe() == ref, "RELCL_KERNEL_DIR loads the same kernels from disk");
  snprintf(path, sizeof path, "%s/attention.cl", kdir);
  char *att = read_file(path);
  char *broken = calloc(strlen(att) + 64, 1);
  sprintf(broken, "%s\n__kernel void broken(void) { undefined_thing(1); }\n", att);
  write_file(path, broken);
  relcl_context *ctx = NULL;
  relcl_status st = relcl_context_create(&ctx, NULL);
  const char *msg = relcl_last_error();
  tu_check(st == RELCL_ERR_BUILD && ctx == NULL && strstr(msg, "attention.cl") &&
               strstr(msg, "undefined_thing"),
           "a kernel that fails to build: RELCL_ERR_BUILD with the build log");
  printf("     (message begins: %.160s)\n", msg);
  remove(path);
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_ERR_IO && strstr(relcl_last_error(), "attention.cl"),
           "a missing kernel file names the file: %s", relcl_last_error());
  unsetenv("RELCL_KERNEL_DIR");
  free(att);
  free(broken);

  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) printf("note: could not remove %s\n", tmp);
  return tu_finish();
}
