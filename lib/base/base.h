/* The base of librelcl, seen by every part: error reporting (error.c) and host utilities
 * (util.c). Needs OpenCL's types only (a failed call's cl_int). Not installed. */
#ifndef RELCL_BASE_H
#define RELCL_BASE_H

#include "relcl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- errors (error.c) ---- */

/* Record a message for relcl_last_error() and return status. printf-style. */
relcl_status relcl__fail(relcl_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, keeping code (a cl_int or CLBlast status) for relcl_last_error_code(). */
relcl_status relcl__fail_code(relcl_status status, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same for a failed OpenCL call: the message names the call and the cl_int. */
relcl_status relcl__cl_fail(cl_int err, const char *what);
const char *relcl__cl_error_name(cl_int err);
/* The first statement of every public call returning relcl_status: a message outlives
 * only the call that set it (relcl.h, relcl_last_error). */
void relcl__clear_error(void);

/* ---- host utilities (util.c) ---- */

#define RELCL__FNV_BASIS 0xcbf29ce484222325ULL
/* FNV-1a 64 of n bytes, continuing from h (start with RELCL__FNV_BASIS). */
uint64_t relcl__fnv1a64(uint64_t h, const void *data, size_t n);
/* Index of the first byte of s[0..n) that is not part of valid UTF-8 (overlong forms,
 * surrogates and code points past U+10FFFF are invalid), or n. */
size_t relcl__utf8_bad(const unsigned char *s, size_t n);

/* Atomic file writing: fn writes the content through relcl__file_out_write into a temporary
 * file beside path (".NAME.tmp-" and six random characters), which is then fsynced and
 * renamed over path, and the directory fsynced. On any failure the temporary file is
 * removed, path is untouched, and the error names path. fn returns RELCL_OK, or a status after relcl__fail. */
typedef struct relcl__file_out relcl__file_out;
typedef relcl_status (*relcl__file_writer)(relcl__file_out *out, void *arg);
relcl_status relcl__write_atomic(const char *path, relcl__file_writer fn, void *arg);
/* false after the first failed write (the error is reported by relcl__write_atomic). */
bool relcl__file_out_write(relcl__file_out *out, const void *data, size_t n);
size_t relcl__file_out_written(const relcl__file_out *out);

/* The whole of a file of at most max bytes, NUL-terminated (malloc'ed, *size without the
 * NUL). Larger, or endless (/dev/zero), is RELCL_ERR_FORMAT "PATH: ... not a WHAT" before
 * more than max + 1 bytes are read; errors name path. */
relcl_status relcl__read_file(const char *path, size_t max, const char *what, char **out,
                              size_t *size);

#endif
