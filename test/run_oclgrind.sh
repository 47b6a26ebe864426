#!/usr/bin/env bash
# Runs a test program under Oclgrind's checker with GPU-like limits. Oclgrind exits 0 whatever
# it finds, so this fails when its log is not empty (and when the program itself fails).
# usage: run_oclgrind.sh PROGRAM [ARGS...]
set -u
log=$(mktemp "${TMPDIR:-/tmp}/relcl-oclgrind.XXXXXX")
trap 'rm -f "$log"' EXIT
oclgrind --data-races --uninitialized --check-api --max-wgsize 256 --local-mem-size 49152 \
  --log "$log" "$@"
status=$?
if [[ -s $log ]]; then
  echo "FAIL Oclgrind reported $(grep -c '^[A-Z]' "$log") problem(s); the first ones:"
  head -n 40 "$log"
  echo "0 passed, 1 failed"
  exit 1
fi
exit $status
