/* Device choice: "P:D" indices, case-insensitive name substrings, the default, and errors
 * that list what exists; relcl_build_check on every device; which CLBlast tuning file a
 * context applies (exact device > same platform and device type > none). */
#define _GNU_SOURCE /* strcasestr */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

/* Writes a tuning file with one valid Xgemm parameter set for the given identity; cpu NULL
 * leaves the CPU model out, as files written before relcl knew it do. */
static void write_tuning(const char *path, const char *device, const char *driver,
                         const char *platform, const char *type, const char *cpu) {
  tu_write_tuning(path, device, driver, platform, type, cpu,
                  "{\"Xgemm\": "
                  "{\"GEMMK\": 0, \"KREG\": 1, \"KWG\": 16, \"KWI\": 2, \"MDIMA\": 8, "
                  "\"MDIMC\": 8, \"MWG\": 32, \"NDIMB\": 8, \"NDIMC\": 8, \"NWG\": 32, "
                  "\"SA\": 0, \"SB\": 0, \"STRM\": 0, \"STRN\": 0, \"VWM\": 1, \"VWN\": 1}}");
}

/* The host CPU's model read from /proc/cpuinfo ("AuthenticAMD family 23 model 1"), to check
 * the CPUID decoding of relcl__host_cpu against the kernel's; "" when there is no such file
 * or it has no x86 fields. */
static void cpuinfo_model(char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[4096], vendor[64] = "";
  int family = -1, model = -1;
  while (fgets(line, sizeof line, f) && line[0] != '\n') { /* the first processor only */
    char *colon = strchr(line, ':');
    if (!colon) continue;
    if (!strncmp(line, "vendor_id", 9)) sscanf(colon + 1, " %63s", vendor);
    else if (!strncmp(line, "cpu family", 10)) sscanf(colon + 1, "%d", &family);
    else if (!strncmp(line, "model\t", 6)) sscanf(colon + 1, "%d", &model);
  }
  fclose(f);
  if (vendor[0] && family >= 0 && model >= 0)
    snprintf(buf, size, "%s family %d model %d", vendor, family, model);
}

/* The matching rule on its own, on made-up devices: exact needs name and driver, nearest
 * needs platform name and device type, anything else (or no parse, no kernels) is none. */
static void tuning_fit_rule(void) {
  relcl__tuning_device cpu = {"cpu-a", "3.1", "Portable Computing Language", "CPU", ""};
  const char *exact = "{\"device\": \"cpu-a\", \"driver\": \"3.1\", \"platform\": \"X\", "
                      "\"device_type\": \"GPU\", \"kernels\": {}}";
  const char *nearest = "{\"device\": \"cpu-b\", \"driver\": \"3.1\", \"platform\": "
                        "\"Portable Computing Language\", \"device_type\": \"CPU\", "
                        "\"kernels\": {}}";
  const char *other_driver = "{\"device\": \"cpu-a\", \"driver\": \"4.0\", \"platform\": "
                             "\"Portable Computing Language\", \"device_type\": \"CPU\", "
                             "\"kernels\": {}}";
  const char *other_type = "{\"device\": \"gpu-b\", \"driver\": \"3.1\", \"platform\": "
                           "\"Portable Computing Language\", \"device_type\": \"GPU\", "
                           "\"kernels\": {}}";
  const char *other_platform = "{\"device\": \"cpu-b\", \"driver\": \"3.1\", \"platform\": "
                               "\"Intel(R) OpenCL\", \"device_type\": \"CPU\", "
                               "\"kernels\": {}}";
  const char *no_platform = "{\"device\": \"cpu-b\", \"driver\": \"3.1\", \"kernels\": {}}";
  const char *no_kernels = "{\"device\": \"cpu-a\", \"driver\": \"3.1\"}";
  tu_check(relcl__tuning_fit(exact, &cpu) == RELCL_TUNING_EXACT,
           "fit: same device name and driver is exact (whatever platform it names)");
  tu_check(relcl__tuning_fit(nearest, &cpu) == RELCL_TUNING_NEAREST,
           "fit: another device of the same platform and type is nearest");
  tu_check(relcl__tuning_fit(other_driver, &cpu) == RELCL_TUNING_NEAREST,
           "fit: the same device under another driver version is only nearest");
  tu_check(relcl__tuning_fit(other_type, &cpu) == RELCL_TUNING_NONE,
           "fit: a GPU's tuning does not fit a CPU of the same platform");
  tu_check(relcl__tuning_fit(other_platform, &cpu) == RELCL_TUNING_NONE,
           "fit: a CPU of another platform does not fit");
  tu_check(relcl__tuning_fit(no_platform, &cpu) == RELCL_TUNING_NONE,
           "fit: a file without platform and type fits only its own device");
  tu_check(relcl__tuning_fit(no_kernels, &cpu) == RELCL_TUNING_NONE,
           "fit: a file without kernels fits nothing");
  tu_check(relcl__tuning_fit("{ not json", &cpu) == RELCL_TUNING_NONE,
           "fit: text that does not parse fits nothing");

  /* the CPU model, when relcl knows the device's: PoCL names a Zen 1 and a Zen 2 EPYC alike */
  relcl__tuning_device zen1 = {"cpu-a", "3.1", "Portable Computing Language", "CPU",
                               "AuthenticAMD family 23 model 1"};
  const char *same_cpu = "{\"device\": \"cpu-a\", \"driver\": \"3.1\", \"platform\": "
                         "\"Portable Computing Language\", \"device_type\": \"CPU\", "
                         "\"cpu\": \"AuthenticAMD family 23 model 1\", \"kernels\": {}}";
  const char *other_cpu = "{\"device\": \"cpu-a\", \"driver\": \"3.1\", \"platform\": "
                          "\"Portable Computing Language\", \"device_type\": \"CPU\", "
                          "\"cpu\": \"AuthenticAMD family 23 model 49\", \"kernels\": {}}";
  tu_check(relcl__tuning_fit(same_cpu, &zen1) == RELCL_TUNING_EXACT &&
               relcl__tuning_rank(same_cpu, &zen1) == 3,
           "fit: same device name, driver and CPU model is exact");
  tu_check(relcl__tuning_fit(other_cpu, &zen1) == RELCL_TUNING_NEAREST &&
               relcl__tuning_rank(other_cpu, &zen1) == 2,
           "fit: the same device name on another CPU model is only nearest, rank 2");
  tu_check(relcl__tuning_fit(nearest, &zen1) == RELCL_TUNING_NEAREST &&
               relcl__tuning_rank(nearest, &zen1) == 1,
           "fit: another device name of the platform is nearest, rank 1 (below another CPU's)");
  tu_check(relcl__tuning_rank(exact, &zen1) == 2,
           "fit: a file that does not name its CPU model is not exact on a known one");
  tu_check(relcl__tuning_fit(other_cpu, &cpu) == RELCL_TUNING_EXACT,
           "fit: where relcl cannot tell the CPU model, name and driver decide");
}

/* A choice context.c makes per context (cpu_choice): ways[0] where the device is a CPU (`cpu`),
 * ways[1] elsewhere, the variable `var` overriding, a bad value failing at creation naming
 * it; `took` says whether a context took ways[0]. The variable is restored after. */
static void check_choice(bool cpu, const char *var, const char *const ways[2], const char *bad,
                         bool (*took)(const relcl_context *)) {
  const char *old = getenv(var);
  char saved[64] = "";
  if (old) snprintf(saved, sizeof saved, "%s", old);
  unsetenv(var);
  relcl_context *ctx = NULL;
  relcl_status st = relcl_context_create(&ctx, "0:0");
  tu_check(st == RELCL_OK && took(ctx) == cpu, "%s unset: by the device: %s", var,
           ctx && took(ctx) ? ways[0] : ways[1]);
  relcl_context_destroy(ctx);
  for (int i = 0; i < 2; i++) {
    setenv(var, ways[i], 1);
    ctx = NULL;
    st = relcl_context_create(&ctx, "0:0");
    tu_check(st == RELCL_OK && took(ctx) == (i == 0), "%s=%s is honoured", var, ways[i]);
    relcl_context_destroy(ctx);
  }
  char named[128];
  snprintf(named, sizeof named, "%s=%s", var, bad);
  setenv(var, bad, 1);
  ctx = NULL;
  st = relcl_context_create(&ctx, "0:0");
  tu_check(st == RELCL_ERR_INVALID_ARG && ctx == NULL && strstr(relcl_last_error(), named),
           "%s fails naming the variable: %s", named, relcl_last_error());
  if (saved[0]) setenv(var, saved, 1);
  else unsetenv(var);
}

static bool took_item(const relcl_context *ctx) { return relcl__row_item(ctx); }
/* the fix the tuning line names where nothing measured on this device applies: relcl-tune,
 * or, where relcl's own kernels run every product (a CPU), that none is needed */
static const char *tune_hint(const relcl_context *ctx) {
  return ctx->gemm_cpu && ctx->gemm_heads ? "no tuning needed" : "relcl-tune --quick";
}

static bool took_relcl_heads(const relcl_context *ctx) { return ctx->gemm_heads; }
static bool took_fused(const relcl_context *ctx) { return ctx->attn_fused; }
static bool took_local(const relcl_context *ctx) { return ctx->wgrad_local; }

/* Whether family i's own file (after the prelude) asks for prefetches: CPU_PREFETCH, its
 * CPU_PREFETCH_L2, decode.cl's STEP_PREFETCH or gemm.cl's CPU_ASK_ macros */
static bool asks_prefetch(int i) {
  char *text = NULL;
  if (relcl__program_source_text(i, &text) != RELCL_OK) return false;
  const char *body = text, *at;
  while ((at = strstr(body, "#line 1 \"")) != NULL) body = at + 1;
  const bool asks = strstr(body, "PREFETCH(") || strstr(body, "CPU_ASK_");
  free(text);
  return asks;
}

/* On a PoCL CPU, every family whose file asks for prefetches holds clang's prefetch
 * intrinsic in its binary (PoCL's: the program's LLVM bitcode, names in plain text), so
 * CPU_PREFETCH is not empty there (kernels/common.cl; from session 33's end to session 37 it
 * was, its guard tested before the define it needs). Through the binary cache, whose key
 * holds the source: the binary the library itself runs. */
static void prefetches_kept(cl_platform_id plat, cl_device_id dev) {
  cl_int err;
  cl_context cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  tu_check(err == CL_SUCCESS, "an OpenCL context for the prefetch check (%d)", err);
  if (err != CL_SUCCESS) return;
  int checked = 0;
  for (int i = 0; i < relcl__program_count(); i++) {
    if (!asks_prefetch(i)) continue;
    cl_program prog = NULL;
    relcl_status st = relcl__program_build(cl, plat, dev, i, true, true, &prog);
    size_t size = 0;
    unsigned char *bin = NULL;
    if (st == RELCL_OK &&
        clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) ==
            CL_SUCCESS &&
        size > 0 && (bin = malloc(size)) != NULL &&
        clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS)
      size = 0;
    bool found = false;
    const char want[] = "llvm.prefetch";
    for (size_t o = 0; bin && o + sizeof want - 1 <= size && !found; o++)
      found = memcmp(bin + o, want, sizeof want - 1) == 0;
    tu_check(st == RELCL_OK && found, "program %d (%s) asks for prefetches and its PoCL binary "
             "(%zu bytes) holds %s", i, relcl_program_names()[i], size, want);
    checked++;
    free(bin);
    if (prog) clReleaseProgram(prog);
  }
  tu_check(checked >= 2, "%d programs ask for prefetches (gemm.cl, decode.cl at least)",
           checked);
  clReleaseContext(cl);
}

int main(void) {
  tuning_fit_rule();
  char host_cpu[64], proc_cpu[64];
  relcl__host_cpu(host_cpu, sizeof host_cpu);
  cpuinfo_model(proc_cpu, sizeof proc_cpu);
#if defined(__x86_64__) || defined(__i386__)
  tu_check(host_cpu[0] != '\0', "the CPU model is known on x86: \"%s\"", host_cpu);
#endif
  if (proc_cpu[0])
    tu_check(strcmp(host_cpu, proc_cpu) == 0, "CPUID's model \"%s\" is /proc/cpuinfo's \"%s\"",
             host_cpu, proc_cpu);
  /* the L2 size gemm.c's choices use (sysfs) against glibc's (CPUID), where glibc knows it */
  const size_t l2 = relcl__host_l2();
  tu_check(l2 >= 64 * 1024, "the host's L2: %zu bytes", l2);
#ifdef _SC_LEVEL2_CACHE_SIZE
  const long l2_glibc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2_glibc > 0)
    tu_check(l2 == (size_t)l2_glibc, "the L2 from sysfs (%zu) is glibc's (%ld)", l2, l2_glibc);
#endif
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
  /* the CPU model the context reports: the host's for a CPU device, none for another */
  char dev_cpu[64] = "";
  {
    cl_device_type t0 = 0;
    clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof t0, &t0, NULL);
    if (ctx) snprintf(dev_cpu, sizeof dev_cpu, "%s", relcl_context_host_cpu(ctx));
    tu_check(ctx && strcmp(dev_cpu, t0 & CL_DEVICE_TYPE_CPU ? host_cpu : "") == 0,
             "the context's CPU model is \"%s\" (the host's for a CPU device, else none)",
             dev_cpu);
  }
  relcl_context_destroy(ctx);

  /* The row kernels' shape (kernels/common.cl) and who computes attention's per-head
   * products (gemm.c) */
  cl_device_type dtype = 0;
  clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof dtype, &dtype, NULL);
  const bool cpu = (dtype & CL_DEVICE_TYPE_CPU) != 0;
  check_choice(cpu, "RELCL_ROW_KERNELS", (const char *const[2]){"item", "group"}, "items",
               took_item);
  check_choice(cpu, "RELCL_HEAD_GEMM", (const char *const[2]){"relcl", "clblast"}, "cublas",
               took_relcl_heads);
  check_choice(cpu, "RELCL_ATTN", (const char *const[2]){"fused", "apart"}, "flash",
               took_fused);
  check_choice(cpu, "RELCL_WGRAD", (const char *const[2]){"local", "copy"}, "copies",
               took_local);
  if (cpu && strcmp(pname, "Portable Computing Language") == 0) prefetches_kept(plat, dev);

  /* The CPU kernels' vector width: unset, the device's own (16, 8 or 4 after its native
   * float vector width); RELCL_CPU_VEC other than 4, 8 or 16 fails at creation, naming the
   * variable (the _vec runs of test_layers, test_attention and test_model_ref check that a
   * valid one is taken) */
  {
    const char *old = getenv("RELCL_CPU_VEC");
    char saved[64] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    unsetenv("RELCL_CPU_VEC");
    cl_uint native = 0;
    clGetDeviceInfo(dev, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof native, &native, NULL);
    const int own = native >= 16 ? 16 : native >= 8 ? 8 : 4;
    ctx = NULL;
    st = relcl_context_create(&ctx, "0:0");
    tu_check(st == RELCL_OK && relcl__cpu_width(ctx) == own,
             "RELCL_CPU_VEC unset: the device's width, %d floats (native %u)", own, native);
    relcl_context_destroy(ctx);
    static const char *const bad[] = {"5", "0", "8x", "float8"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      char named[64];
      snprintf(named, sizeof named, "RELCL_CPU_VEC=%s:", bad[i]);
      setenv("RELCL_CPU_VEC", bad[i], 1);
      ctx = NULL;
      st = relcl_context_create(&ctx, "0:0");
      tu_check(st == RELCL_ERR_INVALID_ARG && ctx == NULL && strstr(relcl_last_error(), named),
               "%s fails naming the variable: %s", named, relcl_last_error());
    }
    st = relcl_build_check(plat, dev); /* relcl-info's kernels line */
    tu_check(st == RELCL_ERR_INVALID_ARG && strstr(relcl_last_error(), "RELCL_CPU_VEC=float8:"),
             "relcl_build_check with RELCL_CPU_VEC=float8 fails naming it: %s",
             relcl_last_error());
    if (saved[0]) setenv("RELCL_CPU_VEC", saved, 1);
    else unsetenv("RELCL_CPU_VEC");
  }

  /* CLBlast tuning files: off, another device's, a malformed one, this device's */
  char driver[256] = "";
  clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
  char path[] = "/tmp/relcl-tuning-XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (f) {
    fprintf(f, "{\"device\": \"%s\", \"driver\": \"%s\", \"cpu\": \"%s\", \"kernels\": "
               "{\"Xgemm\": "
               "{\"GEMMK\": 0, \"KREG\": 1, \"KWG\": 16, \"KWI\": 2, \"MDIMA\": 8, "
               "\"MDIMC\": 8, \"MWG\": 32, \"NDIMB\": 8, \"NDIMC\": 8, \"NWG\": 32, "
               "\"SA\": 0, \"SB\": 0, \"STRM\": 0, \"STRN\": 0, \"VWM\": 1, \"VWN\": 1}}}\n",
            dname, driver, dev_cpu);
    fclose(f);
  }
  setenv("RELCL_TUNING", "off", 1);
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK && strstr(relcl_context_tuning(ctx), "none"),
           "RELCL_TUNING=off: %s", st == RELCL_OK ? relcl_context_tuning(ctx) : "");
  tu_check(st == RELCL_OK && relcl_context_tuning_kernels(ctx) == NULL,
           "RELCL_TUNING=off: no parameters in force");
  relcl_context_destroy(ctx);
  setenv("RELCL_TUNING", path, 1);
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK && strstr(relcl_context_tuning(ctx), path) &&
               strstr(relcl_context_tuning(ctx), "1 kernel"),
           "a tuning file for this device is applied: %s",
           st == RELCL_OK ? relcl_context_tuning(ctx) : "");
  tu_check(st == RELCL_OK && relcl_context_tuning_fit(ctx) == RELCL_TUNING_EXACT,
           "... and its fit is exact");
  {
    const char *kt = st == RELCL_OK ? relcl_context_tuning_kernels(ctx) : NULL;
    tu_check(kt && strstr(kt, "\"Xgemm\"") && strstr(kt, "\"MWG\":32") &&
                 strstr(kt, "\"KWG\":16"),
             "... and its parameters are given back: %s", kt ? kt : "(null)");
  }
  relcl_context_destroy(ctx);
  f = fopen(path, "w");
  if (f) {
    fputs("{\"device\": \"some other device\", \"driver\": \"1\", \"kernels\": {}}", f);
    fclose(f);
  }
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK && strstr(relcl_context_tuning(ctx), "not for this") &&
               strstr(relcl_context_tuning(ctx), tune_hint(ctx)) &&
               relcl_context_tuning_fit(ctx) == RELCL_TUNING_NONE,
           "another device's file (no platform named) is not applied, and the fix is "
           "suggested: %s",
           st == RELCL_OK ? relcl_context_tuning(ctx) : "");
  relcl_context_destroy(ctx);

  /* another device of this platform and type: borrowed, and said so with the fix */
  char tpname[256] = "";
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof tpname - 1, tpname, NULL);
  const char *tname = dtype & CL_DEVICE_TYPE_GPU ? "GPU"
                      : dtype & CL_DEVICE_TYPE_CPU ? "CPU"
                      : dtype & CL_DEVICE_TYPE_ACCELERATOR ? "ACCELERATOR"
                                                           : "OTHER";
  write_tuning(path, "a sibling device", "0.0", tpname, tname, NULL);
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK && relcl_context_tuning_fit(ctx) == RELCL_TUNING_NEAREST &&
               strstr(relcl_context_tuning(ctx), "borrowed from a sibling device") &&
               strstr(relcl_context_tuning(ctx), "1 kernel") &&
               strstr(relcl_context_tuning(ctx), tune_hint(ctx)),
           "a sibling device's file is borrowed and said so: %s",
           st == RELCL_OK ? relcl_context_tuning(ctx) : "");
  relcl_context_destroy(ctx);
  if (dev_cpu[0]) { /* this device name and driver, measured on another CPU model: borrowed */
    write_tuning(path, dname, driver, tpname, tname, "GenuineIntel family 6 model 1");
    st = relcl_context_create(&ctx, NULL);
    tu_check(st == RELCL_OK && relcl_context_tuning_fit(ctx) == RELCL_TUNING_NEAREST &&
                 strstr(relcl_context_tuning(ctx), "on GenuineIntel family 6 model 1") &&
                 strstr(relcl_context_tuning(ctx), dev_cpu) &&
                 strstr(relcl_context_tuning(ctx), tune_hint(ctx)),
             "this device's name on another CPU model is borrowed, and said so: %s",
             st == RELCL_OK ? relcl_context_tuning(ctx) : "");
    relcl_context_destroy(ctx);
    write_tuning(path, dname, driver, tpname, tname, NULL);
    st = relcl_context_create(&ctx, NULL);
    tu_check(st == RELCL_OK && relcl_context_tuning_fit(ctx) == RELCL_TUNING_NEAREST &&
                 strstr(relcl_context_tuning(ctx), "a CPU it does not name"),
             "this device's name on an unnamed CPU model is borrowed, and said so: %s",
             st == RELCL_OK ? relcl_context_tuning(ctx) : "");
    relcl_context_destroy(ctx);
  }
  write_tuning(path, "a sibling device", "0.0", "Some Other Platform", tname, NULL);
  st = relcl_context_create(&ctx, NULL);
  tu_check(st == RELCL_OK && relcl_context_tuning_fit(ctx) == RELCL_TUNING_NONE,
           "another platform's device is not borrowed: %s",
           st == RELCL_OK ? relcl_context_tuning(ctx) : "");
  relcl_context_destroy(ctx);

  /* the cache directory: an exact file wins over a nearest one, whichever is read first,
   * and over the shipped files; with only a nearest one there, it is preferred to shipped
   * nearest files (the user's own measurements come first) */
  unsetenv("RELCL_TUNING");
  char cdir[] = "/tmp/relcl-tcache-XXXXXX", tdir[64], fa[96], fb[96];
  if (mkdtemp(cdir)) {
    snprintf(tdir, sizeof tdir, "%s/tuning", cdir);
    mkdir(tdir, 0755);
    snprintf(fa, sizeof fa, "%s/a.json", tdir);
    snprintf(fb, sizeof fb, "%s/b.json", tdir);
    char *old_cache = getenv("RELCL_CACHE_DIR") ? strdup(getenv("RELCL_CACHE_DIR")) : NULL;
    setenv("RELCL_CACHE_DIR", cdir, 1);
    /* a shipped file measured on this very device and CPU (the Zen 1 EPYC's, say) wins over
     * any nearest file in the cache directory */
    st = relcl_context_create(&ctx, NULL);
    const bool shipped_exact = st == RELCL_OK &&
                               relcl_context_tuning_fit(ctx) == RELCL_TUNING_EXACT &&
                               strstr(relcl_context_tuning(ctx), "shipped tuning");
    if (st == RELCL_OK) relcl_context_destroy(ctx);
    printf("     shipped tuning measured on this device and CPU: %s\n",
           shipped_exact ? "yes" : "no");
    for (int order = 0; order < 2; order++) {
      write_tuning(order ? fb : fa, "a sibling device", "0.0", tpname, tname, NULL);
      write_tuning(order ? fa : fb, dname, driver, tpname, tname, dev_cpu);
      st = relcl_context_create(&ctx, NULL);
      tu_check(st == RELCL_OK && relcl_context_tuning_fit(ctx) == RELCL_TUNING_EXACT &&
                   strstr(relcl_context_tuning(ctx), order ? fa : fb),
               "cache dir: the exact file (%s) wins over a sibling's: %s", order ? "a" : "b",
               st == RELCL_OK ? relcl_context_tuning(ctx) : "");
      relcl_context_destroy(ctx);
    }
    /* the same device name on another CPU model ranks above another device's */
    for (int order = 0; dev_cpu[0] && order < 2; order++) {
      write_tuning(order ? fb : fa, "a sibling device", "0.0", tpname, tname, NULL);
      write_tuning(order ? fa : fb, dname, driver, tpname, tname, "GenuineIntel family 6 model 1");
      st = relcl_context_create(&ctx, NULL);
      tu_check(st == RELCL_OK &&
                   (shipped_exact ? relcl_context_tuning_fit(ctx) == RELCL_TUNING_EXACT &&
                                        strstr(relcl_context_tuning(ctx), "shipped tuning")
                                  : relcl_context_tuning_fit(ctx) == RELCL_TUNING_NEAREST &&
                                        strstr(relcl_context_tuning(ctx), order ? fa : fb)),
               "cache dir: this device name's file of another CPU (%s) wins over a sibling's%s: %s",
               order ? "a" : "b", shipped_exact ? ", and a shipped exact file over both" : "",
               st == RELCL_OK ? relcl_context_tuning(ctx) : "");
      relcl_context_destroy(ctx);
    }
    remove(fb);
    write_tuning(fa, "a sibling device", "0.0", tpname, tname, NULL);
    st = relcl_context_create(&ctx, NULL);
    /* (a shipped file of this very device name, measured on another CPU model or on one it
     * does not name, ranks above any sibling's) */
    tu_check(st == RELCL_OK && (relcl_context_tuning_fit(ctx) == RELCL_TUNING_EXACT ||
                                strstr(relcl_context_tuning(ctx), fa) ||
                                (strstr(relcl_context_tuning(ctx), "shipped tuning") &&
                                 strstr(relcl_context_tuning(ctx), "none measured on this CPU"))),
             "cache dir: a sibling's file there comes before shipped sibling files: %s",
             st == RELCL_OK ? relcl_context_tuning(ctx) : "");
    relcl_context_destroy(ctx);
    remove(fa);
    rmdir(tdir);
    rmdir(cdir);
    if (old_cache) setenv("RELCL_CACHE_DIR", old_cache, 1);
    else unsetenv("RELCL_CACHE_DIR");
    free(old_cache);
  }
  setenv("RELCL_TUNING", path, 1);
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
