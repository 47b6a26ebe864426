/* relcl-info: every OpenCL platform and device, the default marked, and whether every relcl
 * kernel builds there (the build log when not). */
#include "relcl.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void dev_str(cl_device_id d, cl_device_info what, char *buf, size_t size) {
  if (clGetDeviceInfo(d, what, size - 1, buf, NULL) != CL_SUCCESS) snprintf(buf, size, "?");
  buf[size - 1] = '\0';
}

static bool has_ext(cl_device_id d, const char *ext) {
  size_t n = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS) return false;
  char *s = calloc(n + 1, 1);
  bool found = s && clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n, s, NULL) == CL_SUCCESS &&
               strstr(s, ext) != NULL;
  free(s);
  return found;
}

int main(int argc, char **argv) {
  if (argc > 1) {
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
      printf("usage: relcl-info\nLists OpenCL platforms and devices, marks the default "
             "(RELCL_DEVICE or the first GPU, else the first device), and builds every relcl "
             "kernel on each.\nExits with 1 when RELCL_DEVICE matches no device.\n");
      return 0;
    }
    fprintf(stderr, "relcl-info: unknown argument '%s' (try --help)\n", argv[1]);
    return 2;
  }
  int def_p = -1, def_d = -1;
  const char *spec = getenv("RELCL_DEVICE");
  relcl_status st = relcl_device_find(spec, &def_p, &def_d);
  if (st == RELCL_ERR_NO_PLATFORM) {
    fprintf(stderr, "relcl-info: %s\n", relcl_last_error());
    return 1;
  }
  if (st != RELCL_OK) { /* a script checks a device choice by the exit status */
    fprintf(stderr, "relcl-info: RELCL_DEVICE: %s\n", relcl_last_error());
    return 1;
  }

  cl_platform_id plats[16];
  cl_uint np = 0;
  clGetPlatformIDs(16, plats, &np);
  int failures = 0;
  printf("relcl %s: %u OpenCL platform%s\n", RELCL_VERSION, np, np == 1 ? "" : "s");
  for (cl_uint p = 0; p < np; p++) {
    char pname[256] = "?", pver[256] = "?";
    clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    clGetPlatformInfo(plats[p], CL_PLATFORM_VERSION, sizeof pver - 1, pver, NULL);
    printf("platform %u: %s (%s)\n", p, pname, pver);
    cl_device_id devs[64];
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 64, devs, &nd) != CL_SUCCESS) nd = 0;
    for (cl_uint d = 0; d < nd; d++) {
      char name[256], vendor[256], driver[256], clc[256];
      cl_uint cus = 0;
      cl_ulong gmem = 0, lmem = 0;
      size_t wg = 0;
      cl_device_type type = 0;
      dev_str(devs[d], CL_DEVICE_NAME, name, sizeof name);
      dev_str(devs[d], CL_DEVICE_VENDOR, vendor, sizeof vendor);
      dev_str(devs[d], CL_DRIVER_VERSION, driver, sizeof driver);
      dev_str(devs[d], CL_DEVICE_OPENCL_C_VERSION, clc, sizeof clc);
      clGetDeviceInfo(devs[d], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
      bool is_default = (int)p == def_p && (int)d == def_d;
      printf("  device %u:%u%s %s\n", p, d, is_default ? " [default]" : "", name);
      printf("    type %s, vendor %s, driver %s, %s\n",
             (type & CL_DEVICE_TYPE_GPU)   ? "GPU"
             : (type & CL_DEVICE_TYPE_CPU) ? "CPU"
                                           : "other",
             vendor, driver, clc);
      printf("    compute units %u, global memory %.1f GiB, local memory %llu KiB, "
             "max work-group %zu, fp16 %s, fp64 %s\n",
             cus, (double)gmem / (1024.0 * 1024.0 * 1024.0), (unsigned long long)(lmem / 1024),
             wg, has_ext(devs[d], "cl_khr_fp16") ? "yes" : "no",
             has_ext(devs[d], "cl_khr_fp64") ? "yes" : "no");
      st = relcl_build_check(plats[p], devs[d]);
      const char *const *names = relcl_program_names();
      if (st == RELCL_OK) {
        printf("    kernels:");
        for (int i = 0; names[i]; i++) printf(" %s", names[i]);
        printf(": OK\n");
      } else {
        failures++;
        printf("    kernels: FAILED\n%s\n", relcl_last_error());
      }
    }
  }
  if (def_p >= 0) {
    relcl_context *ctx;
    if (relcl_context_create(&ctx, spec) == RELCL_OK) {
      if (relcl_context_host_cpu(ctx)[0])
        printf("CPU of the default device: %s\n", relcl_context_host_cpu(ctx));
      printf("CLBlast tuning on the default device: %s\n", relcl_context_tuning(ctx));
      relcl_context_destroy(ctx);
    }
  }
  return failures ? 1 : 0;
}
