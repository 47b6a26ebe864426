#!/usr/bin/env bash
# test.sh: install what is missing, build, and run relcl's whole test suite.
#   build/          release build: every suite (including oclgrind and wg256)
#   build-asan/     AddressSanitizer + UndefinedBehaviorSanitizer build: every suite but oclgrind
#   build-install/  `meson install` into a prefix, then examples/hello.c and translate.c built
#                   through pkg-config (translate.c on a 2-step model of the installed relcl-train)
# A failed or skipped test fails the run. The last line is "N passed, M failed[, K skipped]".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
root=$PWD
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

passed=0 failed=0 skipped=0
problems=()

fail() {
  failed=$((failed + 1))
  problems+=("FAILED  $1")
  echo "test.sh: FAILED: $1" >&2
}

section() { printf '\n==== %s\n' "$1"; }

summary() {
  section "summary"
  if ((${#problems[@]})); then printf '%s\n' "${problems[@]}"; fi
  local line="$passed passed, $failed failed"
  ((skipped == 0)) || line+=", $skipped skipped"
  echo "$line"
  ((failed == 0 && skipped == 0))
}

# Configure dir with the given options, or reconfigure it when it exists (wiping it when an
# old configuration cannot be reused).
configure() {
  local dir=$1
  shift
  if [[ -f $dir/meson-private/coredata.dat ]]; then
    meson setup --reconfigure "$dir" "$@" || meson setup --wipe "$dir" "$@"
  else
    meson setup "$dir" "$@"
  fi
}

# meson test writes its results here (meson-logs/testlog-test.sh.json), not to the default
# testlog.json, so that a `meson test` run by hand in the same directory cannot mix its
# results into ours.
logbase=testlog-test.sh

# Add one build directory's meson test results to the counts. meson reports an exit code of
# 77 as SKIP; skipped tests are counted and fail the run.
count_results() {
  local dir=$1 label=$2 out line p f s
  local log=$dir/meson-logs/$logbase.json
  if [[ ! -f $log ]]; then
    echo "test.sh: $label: no test results (no tests defined?)" >&2
    return 0
  fi
  if ! out=$(python3 - "$log" "$label" <<'PY'
import json, sys
path, label = sys.argv[1], sys.argv[2]
n = {"pass": 0, "fail": 0, "skip": 0}
with open(path) as f:
    for number, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            t = json.loads(line)
        except ValueError:
            n["fail"] += 1
            print(f"FAILED  {label}: line {number} of {path} is not a test result")
            continue
        res = t.get("result", "?")
        if res in ("OK", "EXPECTEDFAIL"):
            n["pass"] += 1
        elif res == "SKIP":
            n["skip"] += 1
            print(f"SKIPPED {label}: {t.get('name')}")
        else:
            n["fail"] += 1
            print(f"FAILED  {label}: {t.get('name')} ({res})")
print("COUNTS", n["pass"], n["fail"], n["skip"])
PY
  ); then
    fail "$label: cannot read $log"
    return 0
  fi
  while IFS= read -r line; do
    case $line in
      COUNTS*)
        read -r _ p f s <<<"$line"
        passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
        ;;
      ?*) problems+=("$line") ;;
    esac
  done <<<"$out"
}

# The kernel caches live in build directories, so a run never reads or fills the user's home.
# relcl's is each build's own, so each build runs its compile-and-cache path. PoCL's is
# build/'s for every build (meson option test_pocl_cache): compiling CLBlast's kernels from
# cold is most of a kernel test's time on PoCL (test_attention: 174 s cold, 1 s warm on a
# 2-core Zen 1), and the kernels are the same in the sanitized build.
pocl_cache=$root/build/test/pocl-cache

# Build dir, run `meson test` there with extra arguments, and count the results.
run_suite() {
  local dir=$1 label=$2
  shift 2
  rm -f "$dir/meson-logs/$logbase.json"
  if ! meson compile -C "$dir"; then
    fail "$label: compile"
    return 0
  fi
  local rc=0 failed_before=$failed
  RELCL_CACHE_DIR=$root/$dir/cache/relcl POCL_CACHE_DIR=$pocl_cache \
    meson test -C "$dir" --print-errorlogs --logbase "$logbase" "$@" || rc=$?
  count_results "$dir" "$label"
  if ((rc != 0 && failed == failed_before)); then
    fail "$label: meson test exited with status $rc"
  fi
}

section "dependencies"
if ! relcl_install_deps; then
  fail "installing packages: ${RELCL_DEPS[*]}"
  summary
  exit 1
fi

# PyPI packages the tests need (test_checkpoint.py: the real safetensors), in build/venv
if ! relcl_pyvenv safetensors numpy >/dev/null; then
  fail "installing safetensors and numpy from PyPI into $RELCL_VENV"
fi

section "build: release, every suite"
if configure build -Dwerror=true; then
  run_suite build build
else
  fail "build: meson setup"
fi

section "build-asan: AddressSanitizer + UndefinedBehaviorSanitizer"
# detect_leaks=0: LeakSanitizer reports allocations made inside the OpenCL ICD loader and the
# PoCL driver (operator new in libpocl, no relcl frame; seen when kernels are compiled from
# source), which are the driver's, not relcl's, and vary from run to run.
# Oclgrind is left out: it is an interpreter, slow enough without ASan, and the host code
# those tests run is the same as in the suites run here. The sanitizers make the host side
# slower, hence the longer timeouts.
if configure build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
  -Dtest_pocl_cache="$pocl_cache"; then
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_suite build-asan build-asan --no-suite oclgrind --timeout-multiplier 3
else
  fail "build-asan: meson setup"
fi

section "build-install: meson install, pkg-config, examples/hello.c"
prefix=$root/build-install/prefix
install_ok=0
rm -rf "$prefix" # a stale install must not stand in for this one
if configure build-install --prefix="$prefix" --libdir=lib &&
  meson compile -C build-install && meson install -C build-install --quiet; then
  if flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs relcl); then
    echo "pkg-config --cflags --libs relcl: $flags"
    # shellcheck disable=SC2086  # flags are words
    if cc -std=c11 -Wall -Wextra -Werror examples/hello.c $flags -o build-install/hello &&
      LD_LIBRARY_PATH=$prefix/lib RELCL_CACHE_DIR=$root/build-install/cache/relcl \
        POCL_CACHE_DIR=$pocl_cache ./build-install/hello; then
      install_ok=1
    fi
  fi
fi
if ((install_ok)); then
  passed=$((passed + 1))
else
  fail "install: examples/hello.c built against the installed library through pkg-config"
fi

# examples/translate.c: a model loaded through the public API translates a sentence. The
# model is the installed relcl-train's, 2 steps on the fixture corpus (what it says is not
# looked at: one line of output and exit 0 are).
translate_ok=0
if ((install_ok)); then
  model=$root/build-install/model
  rm -rf "$model"
  # shellcheck disable=SC2086  # flags are words
  if cc -std=c11 -Wall -Wextra -Werror examples/translate.c $flags -o build-install/translate &&
    LD_LIBRARY_PATH=$prefix/lib RELCL_CACHE_DIR=$root/build-install/cache/relcl \
      POCL_CACHE_DIR=$pocl_cache "$prefix/bin/relcl-train" \
      --config test/translate/tiny.yaml --max-steps 2 --model-dir "$model" \
      --train-src test/train/train.en --train-tgt test/train/train.fr >/dev/null &&
    out=$(LD_LIBRARY_PATH=$prefix/lib RELCL_CACHE_DIR=$root/build-install/cache/relcl \
      POCL_CACHE_DIR=$pocl_cache ./build-install/translate \
      "$model/ckpt-00000002.safetensors" "$model/spm.model" "Hello world.") &&
    [[ $(printf '%s\n' "$out" | wc -l) == 1 ]]; then
    echo "examples/translate.c: '$out'"
    translate_ok=1
  fi
fi
if ((translate_ok)); then
  passed=$((passed + 1))
else
  fail "install: examples/translate.c loads a trained model and translates (pkg-config build)"
fi

# The README shows examples/hello.c and translate.c; this keeps them from drifting apart.
for example in examples/hello.c examples/translate.c; do
  if python3 -c 'import sys; sys.exit(open(sys.argv[1]).read() not in open("README.md").read())' "$example"
  then
    passed=$((passed + 1))
  else
    fail "README.md does not contain the exact text of $example"
  fi
done

summary
