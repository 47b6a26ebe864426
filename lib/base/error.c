/* Status strings and the per-thread last-error message. */
#include "base.h"

#include <stdio.h>

static _Thread_local char last_error[8192];
/* The raw OpenCL or CLBlast code behind last_error, 0 when relcl's own check failed. */
static _Thread_local int last_code;

const char *relcl_status_str(relcl_status status) {
  switch (status) {
#define RELCL__STATUS_CASE(name, value, text) \
  case name:                                  \
    return text;
    RELCL_STATUS_LIST(RELCL__STATUS_CASE)
#undef RELCL__STATUS_CASE
  }
  return "unknown status";
}

const char *relcl_last_error(void) { return last_error; }

void relcl__clear_error(void) { last_error[0] = '\0'; }

relcl_status relcl__fail(relcl_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  last_code = 0;
  return status;
}

relcl_status relcl__fail_code(relcl_status status, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  last_code = code;
  return status;
}

const char *relcl__cl_error_name(cl_int err) {
  switch (err) {
#define E(x) \
  case x:    \
    return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE)
    E(CL_COMPILER_NOT_AVAILABLE) E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES)
    E(CL_OUT_OF_HOST_MEMORY) E(CL_BUILD_PROGRAM_FAILURE) E(CL_INVALID_VALUE)
    E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT) E(CL_INVALID_COMMAND_QUEUE)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS)
    E(CL_INVALID_PROGRAM) E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME)
    E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE)
    E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION)
    E(CL_INVALID_WORK_GROUP_SIZE) E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET)
    E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PLATFORM)
   
  case -1001:
    return "CL_PLATFORM_NOT_FOUND_KHR";
#undef E
  }
  return "unknown OpenCL error";
}

relcl_status relcl__cl_fail(cl_int err, const char *what) {
  relcl_status st = RELCL_ERR_OPENCL;
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
      err == CL_OUT_OF_HOST_MEMORY)
    st = RELCL_ERR_OUT_OF_MEMORY;
  return relcl__fail_code(st, (int)err, "%s failed: %s (%d)", what, relcl__cl_error_name(err),
                          (int)err);
}

/* A cleared message clears the code with it. */
int relcl_last_error_code(void) { return last_error[0] ? last_code : 0; }

const char *relcl_version(void) { return RELCL_VERSION; }
