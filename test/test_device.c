/* Device choice: "P:D" indices, case-insensitive name substrings, the default, and errors
 * that list what exists; relcl_build_check on every device. */
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

  st = relcl_build_check(plat, dev);
  tu_check(st == RELCL_OK, "every kernel builds on %s", dname);
  const char *const *names = relcl_program_names();
  int n = 0;
  while (names[n]) n++;
  tu_check(n >= 3, "%d kernel program families are listed", n);
  return tu_finish();
}
