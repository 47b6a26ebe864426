/* Bad files on the way to a program (issue 11):
 *  - a cache entry whose body is damaged but whose header carries the FNV-1a of the damaged
 *    body (the reproduction: PoCL trusted a length inside the binary, read far out
 *    of bounds and crashed) is not handed to the driver but rebuilt from source, with the
 *    same results; so is an entry whose size field disagrees with the file;
 *  - an empty (or blank) kernel file, or one cut short so that a kernel is missing, under
 *    RELCL_KERNEL_DIR fails at relcl_context_create naming the file (and the kernel), not
 *    later as CL_INVALID_KERNEL_NAME. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#ifndef RELCL_SOURCE_KERNEL_DIR
#error "RELCL_SOURCE_KERNEL_DIR must name the kernels/ directory"
#endif

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = calloc((size_t)len + 1, 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

static void spit(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(data, 1, n, f);
    fclose(f);
  }
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

/* Every cache entry: magic "RELCLBI?" (8 bytes), key (32), size (8), then at byte 48 the
 * first format's FNV-1a of the body. how 0: a length inside the driver's binary set huge (in
 * a PoCL binary the one after "/program.bc", elsewhere a word in the middle) and the FNV-1a
 * of the damaged body written at byte 48; how 1: the size field one less than the body.
 * Returns the number of entries changed. */
static int damage_entries(const char *dir, int how) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strstr(e->d_name, ".bin") || strstr(e->d_name, ".tmp")) continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t len = 0;
    unsigned char *b = slurp(path, &len);
    if (b == NULL || len < 128 || memcmp(b, "RELCLBI", 7) != 0) {
      free(b);
      continue;
    }
    size_t body = b[7] == 'N' ? 56 : 64; /* the first format's header, or the second's */
    if (how == 0) {
      size_t at = body + (len - body) / 2;
      for (size_t i = body; i + 16 < len; i++)
        if (memcmp(b + i, "/program.bc", 11) == 0) {
          at = i + 11;
          break;
        }
      uint32_t huge = 0x7ffffff0u;
      memcpy(b + at, &huge, sizeof huge);
      uint64_t h = fnv1a(b + body, len - body);
      memcpy(b + 48, &h, sizeof h);
    } else {
      uint64_t size;
      memcpy(&size, b + 40, sizeof size);
      size--;
      memcpy(b + 40, &size, sizeof size);
    }
    spit(path, b, len);
    free(b);
    n++;
  }
  if (d) closedir(d);
  return n;
}

static char *text_of(const char *path) {
  size_t n;
  return (char *)slurp(path, &n);
}

static void put_text(const char *path, const char *text) { spit(path, text, strlen(text)); }

static void test_damaged_cache(const char *tmp, float *ref) {
  char cache[400];
  snprintf(cache, sizeof cache, "%s/cache", tmp);
  setenv("RELCL_CACHE_DIR", cache, 1);
  *ref = tu_attn_probe();
  for (int how = 0; how < 2; how++) {
    int n = damage_entries(cache, how);
    float got = tu_attn_probe(); /* the first format crashed here (SIGSEGV in PoCL) */
    tu_check(n >= 3 && got == *ref,
             "%d cache entries with %s: rebuilt from source, same result (%g, want %g)", n,
             how == 0 ? "a huge length inside the binary and the FNV-1a of the damaged body"
                      : "a size field one short of the body",
             got, *ref);
    tu_check(damage_entries(cache, how) == n && tu_attn_probe() == *ref,
             "and the rewritten entries are whole: damaged again, rebuilt again");
  }
}

static void test_kernel_dir(const char *tmp, float ref) {
  setenv("RELCL_CACHE_DIR", "off", 1);
  char kdir[400], path[600];
  snprintf(kdir, sizeof kdir, "%s/kernels", tmp);
  mkdir(kdir, 0755);
  const char *const *names = relcl_program_names();
  for (int i = -1; names[i < 0 ? 0 : i]; i++) {
    char src[600];
    const char *name = i < 0 ? "common" : names[i];
    snprintf(src, sizeof src, "%s/%s.cl", RELCL_SOURCE_KERNEL_DIR, name);
    snprintf(path, sizeof path, "%s/%s.cl", kdir, name);
    char *text = text_of(src);
    put_text(path, text ? text : "");
    free(text);
  }
  { /* the flag bits shared with lib/, part of every program's prelude */
    char src[600];
    snprintf(src, sizeof src, "%s/flags.h", RELCL_SOURCE_KERNEL_DIR);
    snprintf(path, sizeof path, "%s/flags.h", kdir);
    char *text = text_of(src);
    put_text(path, text ? text : "");
    free(text);
  }
  setenv("RELCL_KERNEL_DIR", kdir, 1);
  tu_check(tu_attn_probe() == ref, "control: a whole copy of kernels/ under RELCL_KERNEL_DIR works");

  snprintf(path, sizeof path, "%s/attention.cl", kdir);
  char *att = text_of(path);
  struct {
    const char *what, *text, *words[2];
  } cases[] = {
      {"an empty attention.cl", "", {"attention.cl", "empty"}},
      {"a blank attention.cl", "\n  \n\t\n", {"attention.cl", "empty"}},
      {"attention.cl cut before its last kernel", NULL, {"attention.cl", "attn_bwd_rows"}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    if (cases[c].text) {
      put_text(path, cases[c].text);
    } else {
      char *cut = strdup(att);
      char *last = strstr(cut, "__kernel void attn_bwd_rows");
      if (last) *last = '\0';
      put_text(path, cut);
      free(cut);
    }
    relcl_context *ctx = NULL;
    relcl_status st = relcl_context_create(&ctx, NULL);
    const char *msg = relcl_last_error();
    tu_check(st != RELCL_OK && ctx == NULL && strstr(msg, cases[c].words[0]) &&
                 strstr(msg, cases[c].words[1]),
             "%s: relcl_context_create fails naming %s and '%s': %s", cases[c].what,
             cases[c].words[0], cases[c].words[1], st == RELCL_OK ? "(it succeeded)" : msg);
    relcl_context_destroy(ctx);
  }
  put_text(path, att);
  tu_check(tu_attn_probe() == ref, "control: the file restored, it works again");
  unsetenv("RELCL_KERNEL_DIR");
  free(att);
}

int main(void) {
  char tmp[256];
  snprintf(tmp, sizeof tmp, "/tmp/relcl-test-program-cache-XXXXXX");
  if (!mkdtemp(tmp)) return 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  float ref = NAN;
  test_damaged_cache(tmp, &ref);
  if (isnan(ref)) tu_check(0, "no reference result: the device is unusable");
  else test_kernel_dir(tmp, ref);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) printf("note: could not remove %s\n", tmp);
  return tu_finish();
}
