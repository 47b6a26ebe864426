/* Device choice: "P:D" indices, case-insensitive name substrings, the default, and errors
 * that list what exists; relcl_build_check on every device. */
#define _GNU_SOURCE /* strcasestr */
#include <string.h>
#include <unistd.h>

#include "testutil.h"

int main(void) {
  int p = -1, d = -1, dp, dd;
  relcl_status st = relcl_device_find(NULL, &dp, &dd);
  tu_check(st == RELCL_OK, "default device found: %d:%d", dp, dd);
  st = relcl_device_find("0:0", &p, &d);
  tu_check(st == RELCL_OK && p == 0 && d == 0, "\"0:0\" chooses platform 0 device 0");

  cl_platform_id plat;
  cl_device_id dev;
  char pname[256] = "", dname[256] = "";
  clGetPlatformIDs(1, &plat, NULL);
  clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);

  /* a substring of the platform name, in other case */
  char sub[8] = "";
  for (int i = 0; i < 5 && pname[i + 1]; i++)
    sub[i] = (char)((pname[i + 1] >= 'a' && pname[i + 1] <= 'z') ? pname[i + 1] - 32
                                                                   : pname[i + 1]);
  st = relcl_device_find(sub, &p, &d);
  tu_check(st == RELCL_OK && p == 0, "platform substring \"%s\" of \"%s\" (any case)", sub, pname);
  st = relcl_device_find(dname, &p, &d);
  tu_check(st == RELCL_OK && p == 0 && d == 0, "full device name \"%s\"", dname);

  /* the platform vendor: a piece of it found in neither name still chooses the platform */
  char vendor[256] = "", piece[8] = "";
  clGetPlatformInfo(plat, CL_PLATFORM_VENDOR, sizeof vendor - 1, vendor, NULL);
  for (size_t i = 0; vendor[0] && i + 4 <= strlen(vendor) && !piece[0]; i++) {
    char cand[5] = {vendor[i], vendor[i + 1], vendor[i + 2], vendor[i + 3], 0};
    if (strchr(cand, ' ') || strcasestr(pname, cand) || strcasestr(dname, cand)) continue;
    memcpy(piece, cand, sizeof cand);
  }
  if (piece[0]) {
    st = relcl_device_find(piece, &p, &d);
    tu_check(st == RELCL_OK && p == 0, "vendor substring \"%s\" of \"%s\"", piece, vendor);
  }
  if (strstr(pname, "Portable Computing Language")) { /* PoCL: the README's example */
    st = relcl_device_find("pocl", &p, &d);
    tu_check(st == RELCL_OK && p == 0, "\"pocl\" chooses PoCL (vendor \"%s\")", vendor);
  }

  st = relcl_device_find("no-such-device-xyz", &p, &d);
  tu_check(st == RELCL_ERR_NO_DEVICE && strstr(relcl_last_error(), "0:0") &&
               strstr(relcl_last_error(), "no-such-device-xyz"),
           "unknown name is an error listing the devices: %s", relcl_last_error());
  st = relcl_device_find("7:0", &p, &d);
  tu_check(st == RELCL_ERR_NO_DEVICE, "index out of range is an error");
  st = relcl_device_find("0:", &p, &d);
  tu_check(st == RELCL_ERR_NO_DEVICE, "malformed \"0:\" is treated as a name and not found");

  relcl_context *ctx = NULL;
  setenv("RELCL_DEVICE", "no-such-device-xyz", 1);
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_ERR_NO_DEVICE && ctx == NULL, "RELCL_DEVICE is honoured (bad value fails)");
  unsetenv("RELCL_DEVICE");
  st = relcl_context_create(&ctx, "0:0");
  tu_check(st == RELCL_OK && ctx != NULL && strstr(relcl_context_device_name(ctx), dname),
           "context on \"0:0\" reports its device: %s", ctx ? relcl_context_device_name(ctx) : "");
  relcl_context_destroy(ctx);

  /* CLBlast tuning files: off, another device's, a malformed one, this device's */
  char driver[256] = "";
  clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
  char path[] = "/tmp/relcl-tuning-XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (f) {
    fprintf(f, "{\"device\": \"%s\", \"driver\": \"%s\", \"kernels\": {\"Xgemm\": "
               "{\"GEMMK\": 0, \"KREG\": 1, \"KWG\": 16, \"KWI\": 2, \"MDIMA\": 8, "
               "\"MDIMC\": 8, \"MWG\": 32, \"NDIMB\": 8, \"NDIMC\": 8, \"NWG\": 32, "
               "\"SA\": 0, \"SB\": 0, \"STRM\": 0, \"STRN\": 0, \"VWM\": 1, \"VWN\": 1}}}\n",
            dname, driver);
    fclose(f);
  }
  setenv("RELCL_TUNING", "off", 1);
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK && strstr(relcl_context_tuning(ctx), "none"),
           "RELCL_TUNING=off: %s", st == RELCL_OK ? relcl_context_tuning(ctx) : "");
  relcl_context_destroy(ctx);
  setenv("RELCL_TUNING", path, 1);
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK && strstr(relcl_context_tuning(ctx), path) &&
               strstr(relcl_context_tuning(ctx), "1 kernel"),
           "a tuning file for this device is applied: %s",
           st == RELCL_OK ? relcl_context_tuning(ctx) : "");
  relcl_context_destroy(ctx);
  f = fopen(path, "w");
  if (f) {
    fputs("{\"device\": \"some other device\", \"driver\": \"1\", \"kernels\": {}}", f);
    fclose(f);
  }
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK && strstr(relcl_context_tuning(ctx), "not for this device"),
           "another device's file is not applied: %s",
           st == RELCL_OK ? relcl_context_tuning(ctx) : "");
  relcl_context_destroy(ctx);
  f = fopen(path, "w");
  if (f) {
    fputs("{ not json", f);
    fclose(f);
  }
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK, "a malformed tuning file is no error");
  relcl_context_destroy(ctx);
  unsetenv("RELCL_TUNING");
  remove(path);

  st = relcl_build_check(plat, dev);
  tu_check(st == RELCL_OK, "every kernel builds on %s", dname);
  const char *const *names = relcl_program_names();
  int n = 0;
  while (names[n]) n++;
  tu_check(n >= 3, "%d kernel program families are listed", n);
  return tu_finish();
}
