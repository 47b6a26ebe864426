/* The OpenCL C sources embedded at build time (generated relcl_kernels.c). */
#ifndef RELCL_PROGRAMS_H
#define RELCL_PROGRAMS_H

typedef struct relcl__program_source {
  const char *name;   /* family, e.g. "attention" */
  const char *file;   /* "attention.cl": the name looked up under RELCL_KERNEL_DIR */
  const char *source; /* the file's text, without the common prelude */
} relcl__program_source;

/* The prelude of every family: kernels/flags.h, then common.cl, each after a #line. */
extern const char relcl__common_source[];
/* Ends with an entry whose name is NULL. */
extern const relcl__program_source relcl__program_sources[];
/* The families' names, NULL-ended: constant, so relcl_program_names needs no filling. */
extern const char *const relcl__program_names[];

#endif
