/* The host-only public API seen by a program that has no OpenCL headers: test/nocl/CL/cl.h
 * (first on this program's include path) stops the build if relcl_checkpoint.h or
 * relcl_data.h pulls in OpenCL. Also the version macros against meson's project version,
 * relcl_version() against the macros, and the error code of a host-side failure. */
#include "relcl_checkpoint.h"
#include "relcl_data.h"

#include <stdio.h>
#include <string.h>

#ifdef CL_SUCCESS
#error "CL/cl.h was included"
#endif

static int passed, failed;

static void check(int ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (ok)
    passed++;
  else
    failed++;
}

int main(int argc, char **argv) {
  char expect[64];
  snprintf(expect, sizeof expect, "%d.%d.%d", RELCL_VERSION_MAJOR, RELCL_VERSION_MINOR,
           RELCL_VERSION_PATCH);
  check(strcmp(expect, RELCL_VERSION) == 0, "RELCL_VERSION is MAJOR.MINOR.PATCH");
  check(strcmp(RELCL_VERSION, RELCL_TEST_PROJECT_VERSION) == 0,
        "RELCL_VERSION is meson's project version");
  check(strcmp(relcl_version(), RELCL_VERSION) == 0, "relcl_version() == RELCL_VERSION");
  check(strcmp(relcl_status_str(RELCL_ERR_FORMAT), "malformed input") == 0,
        "relcl_status_str without OpenCL");

  /* a checkpoint round trip through the public, host-only API */
  const char *dir = argc > 1 ? argv[1] : ".";
  char path[4096];
  snprintf(path, sizeof path, "%s/hostonly.safetensors", dir);
  const float data[3] = {1.0f, -2.5f, 3.25f};
  relcl_checkpoint_tensor t = {"w", 1, {3}, data};
  relcl_checkpoint_meta m = {"k", "v"};
  relcl_status st = relcl_checkpoint_save(path, &t, 1, &m, 1);
  check(st == RELCL_OK, "relcl_checkpoint_save");
  relcl_checkpoint *ck = NULL;
  st = relcl_checkpoint_open(path, 0, &ck);
  check(st == RELCL_OK, "relcl_checkpoint_open");
  float back[3] = {0};
  size_t shape[1] = {3};
  if (ck) st = relcl_checkpoint_read(ck, "w", 1, shape, back);
  check(ck && st == RELCL_OK && memcmp(back, data, sizeof data) == 0, "tensor read back");
  relcl_checkpoint_close(ck);

  /* a failure of relcl's own (a missing file): a message, and no OpenCL/CLBlast code */
  st = relcl_checkpoint_open("/nonexistent/relcl/x.safetensors", 0, &ck);
  check(st == RELCL_ERR_IO && strstr(relcl_last_error(), "/nonexistent/relcl/x") != NULL,
        "a missing file: RELCL_ERR_IO naming the file");
  check(relcl_last_error_code() == 0, "relcl_last_error_code() is 0 for a file error");

  printf("%d passed, %d failed\n", passed, failed);
  return failed || passed == 0 ? 1 : 0;
}
