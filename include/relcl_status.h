/* The part of relcl's API that every relcl header shares and that needs no OpenCL headers:
 * the export macro, the version, status codes and the per-thread last error. Host-only users
 * (relcl_checkpoint.h, relcl_data.h) include only this; relcl.h adds the device API.
 */
#ifndef RELCL_STATUS_H
#define RELCL_STATUS_H

#include "relcl_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ------------------------------------------------------------------------ */

/* The version of the library loaded at run time ("0.1.0"); RELCL_VERSION is the one the
 * caller was compiled against.
 * Soname policy: while the major version is 0, every minor release may change the ABI, so
 * the soname carries major.minor (librelcl.so.0.1); from 1.0 on it carries the major only
 * and the ABI changes only with it. */
const char *relcl_version(void);

/* ---- status ------------------------------------------------------------------------ */

#define RELCL_STATUS_LIST(X)                                                              \
  X(RELCL_OK, 0, "success")                                                              \
  X(RELCL_ERR_INVALID_ARG, -1, "invalid argument")                                       \
  X(RELCL_ERR_BUFFER_TOO_SMALL, -2, "buffer too small for the given shape")              \
  X(RELCL_ERR_NO_PLATFORM, -3, "no OpenCL platform found")                               \
  X(RELCL_ERR_NO_DEVICE, -4, "requested OpenCL device not found")                        \
  X(RELCL_ERR_OPENCL, -5, "OpenCL call failed")                                          \
  X(RELCL_ERR_BUILD, -6, "OpenCL kernel build failed")                                   \
  X(RELCL_ERR_CLBLAST, -7, "CLBlast call failed")                                        \
  X(RELCL_ERR_OUT_OF_MEMORY, -8, "out of memory")                                        \
  X(RELCL_ERR_IO, -9, "file input/output failed")                                        \
  X(RELCL_ERR_FORMAT, -10, "malformed input")

typedef enum relcl_status {
#define RELCL__STATUS_ENUM(name, value, text) name = value,
  RELCL_STATUS_LIST(RELCL__STATUS_ENUM)
#undef RELCL__STATUS_ENUM
} relcl_status;

/* Static description of a status ("invalid argument"). */
const char *relcl_status_str(relcl_status status);
/* The last error message of this thread, with details; "" when none. Valid until the next
 * relcl call on this thread: every call returning relcl_status starts by clearing it, so
 * after a call that returned RELCL_OK it is "". */
const char *relcl_last_error(void);
/* The raw code behind the last error of this thread, as a number: the cl_int of the OpenCL
 * call that failed (RELCL_ERR_OPENCL, and RELCL_ERR_OUT_OF_MEMORY or RELCL_ERR_BUILD when
 * OpenCL reported them), or CLBlast's status code (RELCL_ERR_CLBLAST; CLBlast reuses
 * OpenCL's numbers for OpenCL failures). 0 when the last error came from relcl's own checks
 * (bad arguments, files), or when there is no error. */
int relcl_last_error_code(void);

#ifdef __cplusplus
}
#endif
#endif
