#!/usr/bin/env bash
# Runs a test program on a copy of the kernels with RELCL_PORTABLE defined (flags.h), so that
# kernels/gemm.cl takes its standard OpenCL C paths, which a compiler other than clang gets,
# instead of clang's builtins.
# usage: run_portable.sh KERNEL_DIR PROGRAM [ARGS...]
set -eu
src=$1
shift
dir=$(mktemp -d "${TMPDIR:-/tmp}/relcl-portable.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cp "$src"/*.cl "$src"/*.h "$dir"/
printf '\n#define RELCL_PORTABLE 1\n' >> "$dir/flags.h"
RELCL_KERNEL_DIR=$dir "$@"
