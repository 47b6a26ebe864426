#!/usr/bin/env python3
"""Bad inputs that used to get through relcl-train, relcl-translate and relcl-average (issue 11).

Each check is what a user sees: exit status 2 for a usage error, 1 for a runtime error, one
line on stderr naming the file, line or flag, and nothing lost or overwritten:
  - --config: duplicate keys (also d-model beside d_model) name both lines, in YAML and JSON;
    /dev/zero is an error, not an allocation failure; --layers past the library's limit is a
    usage error before any data is read;
  - relcl-translate: a getline that fails for lack of memory (glibc returns -1 with neither the
    error nor the end-of-file flag set) is an error, not the end of the input: an LD_PRELOAD
    shim (test/shim_getline.c) makes the second getline on stdin fail that way;
  - --spm-model /dev/zero: an error naming the file, quickly (run under a 4 GB address-space
    limit, but for AddressSanitizer builds, so an unbounded read fails instead of filling
    the machine);
  - relcl-average: an output that is one of the inputs (same path, another spelling, a hard or
    a symbolic link) or a ckpt-* name is refused and nothing is written; an average records
    relcl.averaged_from; relcl-train --resume refuses an average that sits among the
    checkpoints as ckpt-* (as an older relcl-average could leave it).

usage: test_bad_inputs.py relcl-translate relcl-average relcl-train shim_getline.so
Prints one line per check and ends with "N passed, M failed".
"""
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not detail else "\n     " + detail))
    sys.stdout.flush()
    if ok:
        passed += 1
    else:
        failed += 1
    return ok


def limit_memory():
    # AddressSanitizer reserves terabytes of address space for its shadow: no limit there
    if "ASAN_OPTIONS" not in os.environ:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def run(exe, args, stdin=b"", timeout=300, env=None, small=False):
    """stdin: bytes, or a file descriptor (an int)."""
    fd = isinstance(stdin, int)
    p = subprocess.run([exe] + args, input=None if fd else stdin, stdin=stdin if fd else None,
                       capture_output=True, timeout=timeout, env=env,
                       preexec_fn=limit_memory if small else None)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def one_line(err):
    return len(err.strip().splitlines()) == 1


def meta_of(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]).get("__metadata__", {})


def read(path):
    with open(path, "rb") as f:
        return f.read()


def config_checks(TRAIN):
    missing = ["--train-src", "no-such.en", "--train-tgt", "no-such.fr", "--model-dir", "X"]
    for name, text in [
        ("dup.yaml", "preset: tiny\nd-model: 32\nheads: 2\nd_model: 64\n"),
        ("dup.json", '{"preset": "tiny",\n "d-model": 32,\n "heads": 2,\n "d_model": 64}\n'),
        ("dup2.yaml", "preset: tiny\nseed: 1\nvocab-size: 100\nseed: 2\n"),
    ]:
        with open(name, "w") as f:
            f.write(text)
        first, second = (2, 4)
        rc, out, err = run(TRAIN, ["--config", name] + missing)
        check(rc == 2 and one_line(err) and "%s:%d" % (name, first) in err and
              "%s:%d" % (name, second) in err,
              "--config %s: a key set twice -> exit 2 naming lines %d and %d" %
              (name, first, second), "rc=%d stderr=%r" % (rc, err))
    rc, out, err = run(TRAIN, ["--config", "/dev/zero"] + missing, small=True, timeout=60)
    check(rc == 2 and one_line(err) and "/dev/zero" in err and "larger than" in err,
          "--config /dev/zero -> exit 2, 'larger than', one line", "rc=%d stderr=%r" % (rc, err))
    for args, needle in [(["--layers", "32"], "--layers"), (["--enc-layers", "1000"],
                                                             "--enc-layers"),
                         (["--dec-layers", "40"], "--dec-layers")]:
        rc, out, err = run(TRAIN, args + missing)
        check(rc == 2 and one_line(err) and needle in err and "no-such" not in err and
              not os.path.exists("X"),
              "%s past the library's 31 layers -> exit 2 before the data is read" %
              " ".join(args), "rc=%d stderr=%r" % (rc, err))
    with open("deep.yaml", "w") as f:
        f.write("preset: tiny\nlayers: 64\n")
    rc, out, err = run(TRAIN, ["--config", "deep.yaml"] + missing)
    check(rc == 2 and one_line(err) and "deep.yaml:2" in err and "no-such" not in err,
          "layers: 64 in a config file -> exit 2 naming the line", "rc=%d stderr=%r" % (rc, err))


def main():
    TR, AV, TRAIN, SHIM = (os.path.abspath(p) for p in sys.argv[1:5])
    work = tempfile.mkdtemp(prefix="relcl-bad-inputs-test-")
    os.chdir(work)
    config_checks(TRAIN)

    corpus = os.path.join(HERE, "train")
    for side in ("train.en", "train.fr"):
        shutil.copy(os.path.join(corpus, side), side)
    data = ["--train-src", "train.en", "--train-tgt", "train.fr"]
    tiny = ["--config", os.path.join(HERE, "translate", "tiny.yaml"), "--valid-every", "1"]
    rc, out, err = run(TRAIN, tiny + ["--max-steps", "2", "--model-dir", "M"] + data)
    ck1, ck2 = "M/ckpt-00000001.safetensors", "M/ckpt-00000002.safetensors"
    if not check(rc == 0 and os.path.exists(ck1) and os.path.exists(ck2),
                 "relcl-train: a 2-step model with two checkpoints", err[-2000:]):
        return
    fast = ["--model", "M", "--beam-size", "1", "--max-length-b", "2", "--quiet"]

    # ---- relcl-translate: read errors ----
    text = b"one\ntwo\nthree\n"
    rc, out, err = run(TR, fast, stdin=text)
    check(rc == 0 and out.count(b"\n") == 3, "control: 3 lines in, 3 out, exit 0", err)
    env = dict(os.environ, LD_PRELOAD=SHIM, RELCL_SHIM_GETLINE_OK="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0")
    rc, out, err = run(TR, fast, stdin=text, env=env)
    check(rc == 1 and one_line(err) and "after line 1" in err and "memory" in err,
          "getline out of memory after line 1 -> exit 1, one line (was: exit 0, 2 lines lost)",
          "rc=%d out=%r stderr=%r" % (rc, out, err))
    env["RELCL_SHIM_GETLINE_OK"] = "1000"
    rc, out, err = run(TR, fast, stdin=text, env=env)
    check(rc == 0 and out.count(b"\n") == 3, "control: the shim with no failure, exit 0", err)
    fd = os.open(".", os.O_RDONLY)
    rc, out, err = run(TR, fast, stdin=fd)
    os.close(fd)
    check(rc == 1 and one_line(err) and "standard input" in err,
          "a directory as standard input -> exit 1, one line", "rc=%d stderr=%r" % (rc, err))

    # ---- files read whole ----
    rc, out, err = run(TR, fast + ["--spm-model", "/dev/zero"], small=True, timeout=120)
    check(rc == 1 and one_line(err) and "/dev/zero" in err and "too large" in err,
          "relcl-translate --spm-model /dev/zero -> exit 1, 'too large', one line",
          "rc=%d stderr=%r" % (rc, err))
    rc, out, err = run(TRAIN, tiny + ["--spm-model", "/dev/zero", "--model-dir", "Z"] + data,
                       small=True, timeout=120)
    check(rc != 0 and "/dev/zero" in err and "too large" in err and one_line(err),
          "relcl-train --spm-model /dev/zero -> an error, 'too large', one line",
          "rc=%d stderr=%r" % (rc, err))

    # ---- relcl-average: the output is never an input or a ckpt-* name ----
    shutil.copy(ck1, "a.safetensors")
    shutil.copy(ck2, "b.safetensors")
    before = {p: read(p) for p in ("a.safetensors", "b.safetensors")}
    os.link("b.safetensors", "hard.safetensors")
    os.symlink(os.path.abspath("b.safetensors"), "soft.safetensors")
    os.makedirs("sub", exist_ok=True)
    for out_name in ["b.safetensors", "./sub/../b.safetensors", "hard.safetensors",
                     "soft.safetensors"]:
        rc, out, err = run(AV, ["--output", out_name, "a.safetensors", "b.safetensors"])
        check(rc == 2 and one_line(err) and "is the input" in err and
              all(read(p) == before[p] for p in before),
              "relcl-average --output %s (an input) -> exit 2, inputs untouched" % out_name,
              "rc=%d stderr=%r" % (rc, err))
    for out_name in ["M/ckpt-00000003.safetensors", "elsewhere/ckpt-00000099.safetensors"]:
        os.makedirs("elsewhere", exist_ok=True)
        rc, out, err = run(AV, ["--output", out_name, ck1, ck2])
        check(rc == 2 and one_line(err) and "ckpt-" in err and not os.path.exists(out_name),
              "relcl-average --output %s -> exit 2, nothing written" % out_name,
              "rc=%d stderr=%r" % (rc, err))
    rc, out, err = run(AV, ["--model-dir", "M", "--last", "2"])
    avg = "M/average.safetensors"
    meta = meta_of(avg) if rc == 0 and os.path.exists(avg) else {}
    check(rc == 0 and meta.get("relcl.average_of") == "2" and
          json.loads(meta.get("relcl.averaged_from", "[]")) == ["M/" + os.path.basename(ck1),
                                                                 "M/" + os.path.basename(ck2)],
          "an average records relcl.average_of and relcl.averaged_from",
          "rc=%d meta=%r stderr=%r" % (rc, {k: v for k, v in meta.items() if "aver" in k}, err))

    # ---- relcl-train --resume never resumes from an average ----
    if os.path.exists(avg):
        shutil.copy(avg, "M/ckpt-00000009.safetensors")
        listing = sorted(os.listdir("M"))
        rc, out, err = run(TRAIN, tiny + ["--max-steps", "3", "--model-dir", "M", "--resume"]
                           + data)
        check(rc == 1 and one_line(err) and "ckpt-00000009" in err and "average" in err and
              sorted(os.listdir("M")) == listing,
              "--resume with an average as the newest ckpt-* -> exit 1 naming it, nothing "
              "written", "rc=%d stderr=%r" % (rc, err[-1500:]))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a crash is a failed check, not a silent pass
        check(False, "test script raised %s: %s" % (type(e).__name__, e))
    if passed + failed == 0:
        check(False, "no check ran")
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
