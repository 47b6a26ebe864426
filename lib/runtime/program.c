/* Program families: source text (embedded, or RELCL_KERNEL_DIR), build, binary cache. */
#include "internal.h"
#include "programs.h"
#include "flags.h" /* RELCL_CPU_AT_K, RELCL_CPU_MR: shared with kernels/gemm.cl */

#include <stdatomic.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the device is PoCL's, and one of its CPU devices (RELCL_POCL): the kernels then use
 * what its compiler turns into the CPU's own instructions and was measured there: clang's
 * __builtin_prefetch (gemm.cl CPU_PREFETCH) and util.cl's transpose through shuffled
 * registers. Oclgrind, also clang, cannot run a kernel that calls the first ("Undefined
 * external function: llvm.prefetch") and its uninitialized-value checker reports the
 * second's stores; PoCL's GPU devices (its CUDA back end) and other platforms are not
 * measured: they build without both. */
static bool pocl_device(cl_device_id device, bool *cpu) {
  cl_platform_id platform;
  cl_device_type type = 0;
  char name[256] = "";
  *cpu = false;
  if (clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL) !=
          CL_SUCCESS ||
      clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS ||
      clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof name - 1, name, NULL) != CL_SUCCESS)
    return false;
  *cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  return strcmp(name, "Portable Computing Language") == 0;
}

/* OpenCL C 1.2 everywhere; no -cl-fast-relaxed-math: it breaks masking on NVIDIA. The item
 * shape of the row kernels (kernels/common.cl) is a define, and so are gemm_cpu's vector
 * width (relcl__cpu_vec) and whether the device is a PoCL CPU (RELCL_POCL); the
 * options are part of the binary cache's key, so two builds never share an entry. On PoCL,
 * -w: Debian's PoCL prints clang's count of warnings ("12 warnings generated.") on the
 * program's stderr at every build that has any, and a library must not print. With AVX2 code
 * every family had some: the ABI notes clang gives for each call with vectors wider than
 * the target's registers (ulong8, float16; float8 with SSE2), which change nothing within one
 * program. A failed build still shows its errors (the build log). */
static const char *build_options(bool row_item, cl_device_id device, char *buf, size_t size) {
  bool cpu;
  const bool pocl = pocl_device(device, &cpu);
  snprintf(buf, size, "-cl-std=CL1.2%s -DRELCL_CPU_VEC=%d%s%s%s",
           row_item ? " -DRELCL_ROW_ITEM" : "", relcl__cpu_vec(device),
           relcl__cpu_at(device, row_item) ? " -DRELCL_CPU_AT" : "",
           pocl && cpu ? " -DRELCL_POCL" : "", pocl ? " -w" : "");
  return buf;
}

bool relcl__cpu_at(cl_device_id device, bool row_item) {
  cl_ulong local = 0;
  if (!row_item || relcl__cpu_vec(device) < 16 ||
      clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL) !=
          CL_SUCCESS)
    return false;
  return local >= (cl_ulong)RELCL_CPU_AT_K * 4 * RELCL_CPU_MR(16) * sizeof(float);
}

int relcl__cpu_vec_env(void) {
  const char *env = getenv("RELCL_CPU_VEC");
  if (env == NULL || env[0] == '\0') return 0;
  return strcmp(env, "4") == 0 ? 4 : strcmp(env, "8") == 0 ? 8 : strcmp(env, "16") == 0 ? 16 : -1;
}

/* RELCL_CPU_VEC chooses the width instead of the device: every width's code is correct on
 * any device (the compiler splits a vector wider than the target's registers), so a test can
 * run the kernels and the host's choices of another CPU (AVX-512's float16 rules on an AVX2
 * machine, AVX2's float8 on AVX-512), and the same width can be compared across CPUs.
 * context.c rejects any other value at context creation. */
int relcl__cpu_vec(cl_device_id device) {
  const int forced = relcl__cpu_vec_env();
  if (forced > 0) return forced;
  cl_uint w = 0;
  if (clGetDeviceInfo(device, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof w, &w, NULL) !=
      CL_SUCCESS)
    w = 0;
  return w >= 16 ? 16 : w >= 8 ? 8 : 4;
}

int relcl__program_count(void) {
  int n = 0;
  while (relcl__program_sources[n].name) n++;
  return n;
}

int relcl__program_index(const char *family) {
  for (int i = 0; relcl__program_sources[i].name; i++)
    if (strcmp(relcl__program_sources[i].name, family) == 0) return i;
  return -1;
}

const char *const *relcl_program_names(void) { return relcl__program_names; }

/* Kernel sources are a few hundred kB at most; the limit keeps /dev/zero out. */
#define MAX_SOURCE_BYTES ((size_t)4 << 20)

static relcl_status read_text(const char *dir, const char *file, char **out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  size_t size = 0;
  relcl_status st = relcl__read_file(path, MAX_SOURCE_BYTES, "kernel source", out, &size);
  if (st != RELCL_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", relcl_last_error());
    return relcl__fail(st, "RELCL_KERNEL_DIR: %s", why);
  }
  /* an empty file would build into a program without kernels, and fail only at first use */
  size_t blank = strspn(*out, " \t\r\n");
  if (blank == size) {
    free(*out);
    *out = NULL;
    return relcl__fail(RELCL_ERR_BUILD, "RELCL_KERNEL_DIR: %s is empty", path);
  }
  return RELCL_OK;
}

relcl_status relcl__program_source_text(int i, char **out) {
  *out = NULL;
  const relcl__program_source *ps = &relcl__program_sources[i];
  const char *dir = getenv("RELCL_KERNEL_DIR");
  char *flags = NULL, *common = NULL, *body = NULL, *text = NULL;
  relcl_status st = RELCL_OK;
  if (dir && dir[0]) {
    st = read_text(dir, "flags.h", &flags);
    if (st == RELCL_OK) st = read_text(dir, "common.cl", &common);
    if (st == RELCL_OK) st = read_text(dir, ps->file, &body);
    if (st != RELCL_OK) goto done;
  }
  const char *b = body ? body : ps->source;
  size_t n = strlen(relcl__common_source) + (flags ? strlen(flags) + strlen(common) : 0) +
             strlen(b) + 128;
  text = malloc(n);
  if (text == NULL) {
    st = relcl__fail(RELCL_ERR_OUT_OF_MEMORY, "out of host memory");
    goto done;
  }
  /* #line keeps compiler messages pointing at the right file and line; the prelude from
   * RELCL_KERNEL_DIR is composed as tools/embed_kernels.py composes the embedded one */
  if (flags)
    snprintf(text, n,
             "#line 1 \"flags.h\"\n%s\n#line 1 \"common.cl\"\n%s\n#line 1 \"%s\"\n%s", flags,
             common, ps->file, b);
  else
    snprintf(text, n, "%s\n#line 1 \"%s\"\n%s", relcl__common_source, ps->file, b);
  *out = text;
done:
  free(flags);
  free(common);
  free(body);
  return st;
}

/* The first kernel that the embedded source of program i defines and prog lacks, into
 * name; false when prog has them all. The embedded source is the list of what the library
 * asks for: a cut or damaged file under RELCL_KERNEL_DIR would otherwise fail only at first
 * use, as CL_INVALID_KERNEL_NAME deep inside a decode. (A cached binary holds them all: it
 * was stored from a build that passed this check, and its hash is checked before use.) */
static bool missing_kernel(cl_program prog, int i, char *name, size_t size) {
  size_t len = 0;
  char *have = NULL;
  bool missing = false;
  if (clGetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &len) != CL_SUCCESS ||
      (have = calloc(len + 2, 1)) == NULL ||
      clGetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, len, have + 1, NULL) != CL_SUCCESS) {
    free(have);
    return false; /* cannot tell: clCreateKernel will say */
  }
  have[0] = ';';
  have[strlen(have)] = ';'; /* ";a;b;" so that every name is found whole */
  static const char mark[] = "__kernel void ";
  for (const char *p = strstr(relcl__program_sources[i].source, mark); p && !missing;
       p = strstr(p + 1, mark)) {
    const char *n = p + sizeof mark - 1;
    size_t k = strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    char want[260];
    if (k == 0 || k + 2 >= sizeof want) continue;
    snprintf(want, sizeof want, ";%.*s;", (int)k, n);
    if (strstr(have, want) == NULL) {
      snprintf(name, size, "%.*s", (int)k, n);
      missing = true;
    }
  }
  free(have);
  return missing;
}

static relcl_status build_log_fail(cl_program prog, cl_device_id device, const char *file,
                                   cl_int err) {
  size_t len = 0;
  clGetProgramBuildInfo(prog, device, CL_PROGRAM_BUILD_LOG, 0, NULL, &len);
  char *log = calloc(len + 1, 1);
  if (log) clGetProgramBuildInfo(prog, device, CL_PROGRAM_BUILD_LOG, len, log, NULL);
  char name[256] = "";
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  relcl_status st =
      relcl__fail_code(RELCL_ERR_BUILD, (int)err, "building kernels/%s for %s failed (%s):\n%s",
                       file, name, relcl__cl_error_name(err), log ? log : "");
  free(log);
  return st;
}

/* Programs made from a cached binary and from source since the process started: a cache
 * that silently never hits gives the same results, so only these counts show it works. */
static atomic_ulong cache_hits, source_builds;

void relcl__program_counts(unsigned long *hits, unsigned long *builds) {
  *hits = atomic_load(&cache_hits);
  *builds = atomic_load(&source_builds);
}

/* Build from a binary; any fault returns NULL and the caller compiles from source. */
static cl_program from_binary(cl_context cl, cl_device_id device, const unsigned char *bin,
                              size_t size, const char *options) {
  cl_int err, bin_status;
  cl_program prog = clCreateProgramWithBinary(cl, 1, &device, &size, &bin, &bin_status, &err);
  if (err != CL_SUCCESS || bin_status != CL_SUCCESS) {
    if (prog) clReleaseProgram(prog);
    return NULL;
  }
  if (clBuildProgram(prog, 1, &device, options, NULL, NULL) != CL_SUCCESS) {
    clReleaseProgram(prog);
    return NULL;
  }
  return prog;
}

static void store_binary(cl_program prog, const char *dir, const char *key) {
  size_t size = 0;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
      size == 0)
    return;
  unsigned char *bin = malloc(size);
  if (bin == NULL) return;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
    relcl__cache_store(dir, key, bin, size);
  free(bin);
}

relcl_status relcl__program_build(cl_context cl, cl_platform_id platform, cl_device_id device,
                                  int i, bool row_item, bool use_cache, cl_program *out) {
  *out = NULL;
  char optbuf[96];
  const char *options = build_options(row_item, device, optbuf, sizeof optbuf);
  char *source = NULL;
  relcl_status st = relcl__program_source_text(i, &source);
  if (st != RELCL_OK) return st;

  char dirbuf[4096], key[33];
  const char *dir = use_cache ? relcl__cache_dir(dirbuf, sizeof dirbuf) : "";
  if (dir[0]) {
    relcl__cache_key(source, options, platform, device, key);
    unsigned char *bin = NULL;
    size_t size = 0;
    if (relcl__cache_load(dir, key, &bin, &size)) {
      *out = from_binary(cl, device, bin, size, options);
      free(bin);
      if (*out) {
        atomic_fetch_add(&cache_hits, 1);
        goto done;
      }
    }
  }

  cl_int err;
  const char *src = source;
  cl_program prog = clCreateProgramWithSource(cl, 1, &src, NULL, &err);
  if (err != CL_SUCCESS) {
    st = relcl__cl_fail(err, "clCreateProgramWithSource");
    goto done;
  }
  err = clBuildProgram(prog, 1, &device, options, NULL, NULL);
  if (err != CL_SUCCESS) {
    st = build_log_fail(prog, device, relcl__program_sources[i].file, err);
    clReleaseProgram(prog);
    goto done;
  }
  char missing[256];
  if (missing_kernel(prog, i, missing, sizeof missing)) {
    const char *kdir = getenv("RELCL_KERNEL_DIR");
    st = relcl__fail(RELCL_ERR_BUILD, "%s/%s has no kernel %s (a cut or broken file?)",
                     kdir && kdir[0] ? kdir : "kernels", relcl__program_sources[i].file, missing);
    clReleaseProgram(prog);
    goto done;
  }
  if (dir[0]) store_binary(prog, dir, key);
  atomic_fetch_add(&source_builds, 1);
  *out = prog;
done:
  free(source);
  return st;
}
