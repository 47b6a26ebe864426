#!/usr/bin/env python3
"""relcl-info and RELCL_DEVICE from outside: a choice that matches nothing exits 1 with one
line naming the choice (so a script can check a choice), a choice that matches exits 0 and
marks that device; on PoCL, RELCL_DEVICE=pocl (the README's example) matches through the
platform vendor "The pocl project", and every kernel built from cold prints nothing on stderr.

usage: test_info.py RELCL-INFO
"""
import os
import subprocess
import sys
import tempfile

passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def run(info, device, *args, **extra_env):
    env = dict(os.environ, **extra_env)
    if device is None:
        env.pop("RELCL_DEVICE", None)
    else:
        env["RELCL_DEVICE"] = device
    return subprocess.run([info, *args], env=env, capture_output=True, text=True, timeout=300)


def main():
    info = sys.argv[1]
    r = run(info, "no-such-device-xyz")
    check(r.returncode == 1, f"RELCL_DEVICE=no-such-device-xyz exits 1 (got {r.returncode})")
    lines = r.stderr.strip().splitlines()
    check(len(lines) == 1 and "no-such-device-xyz" in lines[0] and "0:0" in lines[0],
          "one line naming the choice and listing the devices: " + r.stderr.strip())

    # (each run that matches builds every kernel on every device: keep them few)
    r = listing = run(info, "0:0")
    check(r.returncode == 0 and "device 0:0 [default]" in r.stdout,
          f"RELCL_DEVICE=0:0 exits 0 and marks 0:0 (got {r.returncode})")
    r = run(info, "", "--bogus")
    check(r.returncode == 2 and "--bogus" in r.stderr, "an unknown argument exits 2")

    # a RELCL_TUNING file that is not there: said so (not "not for this device"), exit 0
    missing = "/nonexistent-dir/relcl-tuning.json"
    r = run(info, "0:0", RELCL_TUNING=missing)
    line = [x for x in r.stdout.splitlines() if x.startswith("CLBlast tuning")]
    check(r.returncode == 0 and len(line) == 1 and missing in line[0]
          and "cannot be read" in line[0], f"RELCL_TUNING={missing}: {line}")

    if "Portable Computing Language" in listing.stdout:
        r = run(info, "POCL")
        check(r.returncode == 0 and "[default]" in r.stdout,
              f"PoCL: RELCL_DEVICE=POCL matches through the vendor (exit {r.returncode})")
        # every kernel built from cold (no relcl cache, an empty PoCL cache) prints nothing on
        # stderr: Debian's PoCL prints clang's count of warnings there ("12 warnings
        # generated." for each family with PoCL's AVX2 code before relcl built with -w)
        with tempfile.TemporaryDirectory() as cold:
            r = run(info, "0:0", RELCL_CACHE_DIR="off", POCL_CACHE_DIR=cold)
        check(r.returncode == 0 and "kernels:" in r.stdout and r.stderr == "",
              f"PoCL: every kernel built from cold, nothing on stderr: {r.stderr.strip()!r}")
    else:
        print("skip PoCL vendor checks: the platform is not PoCL")

    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
