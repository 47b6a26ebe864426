/* LD_PRELOAD shim for test_bad_inputs.py: getline on file descriptor 0 fails with ENOMEM
 * after RELCL_SHIM_GETLINE_OK lines, the way glibc 2.36's does when it cannot grow the
 * buffer: -1 with neither the error nor the end-of-file flag set. A reader that asks only
 * ferror() takes that for the end of the input. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

ssize_t getline(char **line, size_t *cap, FILE *f) {
  static ssize_t (*real)(char **, size_t *, FILE *);
  static long left = -1;
  if (real == NULL) *(void **)&real = dlsym(RTLD_NEXT, "getline");
  if (fileno(f) == 0) {
    if (left < 0) {
      const char *e = getenv("RELCL_SHIM_GETLINE_OK");
      left = e ? atol(e) : LONG_MAX;
    }
    if (left == 0) {
      errno = ENOMEM;
      return -1;
    }
    left--;
  }
  return real(line, cap, f);
}
