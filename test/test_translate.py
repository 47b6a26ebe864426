#!/usr/bin/env python3
"""relcl-translate and relcl-average from outside.

Trains a tiny model for 20 steps with relcl-train (test/translate/tiny.yaml on test/train's
fixture corpus) in a temporary directory, then checks what a user sees:
  - exactly one output line per input line: empty and blank lines give empty lines, invalid
    UTF-8 and a NUL byte are replaced and counted, an over-long line is cropped and counted,
    CRLF and a last line without a newline are read as lines; stdin/stdout and
    --input/--output agree; the output does not depend on --batch-size; the summary on stderr
    reports sentences/s and tokens/s;
  - --n-best N: 'LINE ||| TEXT ||| SCORE' lines, best first, every input line present;
  - broken input: an empty model directory, a truncated or corrupt checkpoint, a missing or
    wrong SentencePiece model, a missing path -> one line on stderr, exit 1; bad flags ->
    exit 2;
  - relcl-average: the average of a checkpoint with itself equals it bit for bit;
    --model-dir --last N writes a checkpoint relcl-translate reads; the vocabulary is copied
    beside an output elsewhere; a checkpoint of another configuration is refused in one line
    naming the field;
  - relcl-train --valid-bleu: greedy validation translations scored every N steps by the
    python in RELCL_PYTHON (a stand-in here: sacrebleu is not needed), said once when that
    fails.
Checkpoints are read with nothing but json and struct (the safetensors layout).

usage: test_translate.py relcl-translate relcl-average relcl-train
Prints one line per check and ends with "N passed, M failed".
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "translate")
CORPUS = os.path.join(HERE, "train")
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


def run(exe, args, stdin=b"", timeout=300, env=None):
    p = subprocess.run([exe] + args, input=stdin, capture_output=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def one_line(err):
    return len(err.strip().splitlines()) == 1


def read_st(path):
    """(metadata, {name: raw bytes}) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    meta = header.pop("__metadata__", {})
    return meta, {k: data[v["data_offsets"][0] : v["data_offsets"][1]] for k, v in header.items()}


def cropped(err):
    """The count in relcl-translate's warning about cropped lines (0 when none)."""
    for l in err.splitlines():
        if "longer than the model's maximum of 24 subwords cropped" in l:
            return int(l.split("warning: ")[1].split()[0])
    return 0


def lines_of(out):
    """Output lines; a final newline ends the last line (it does not start another)."""
    text = out.decode("utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def main():
    global TR, AV, TRAIN
    TR, AV, TRAIN = (os.path.abspath(p) for p in sys.argv[1:4])
    work = tempfile.mkdtemp(prefix="relcl-translate-test-")
    os.chdir(work)
    for side in ("train.en", "train.fr", "valid.en", "valid.fr"):
        shutil.copy(os.path.join(CORPUS, side), side)
    data = ["--train-src", "train.en", "--train-tgt", "train.fr",
            "--valid-src", "valid.en", "--valid-tgt", "valid.fr"]
    shutil.copy(os.path.join(FIX, "tiny.yaml"), "tiny.yaml")
    rc, out, err = run(TRAIN, ["--config", "tiny.yaml", "--max-steps", "20", "--model-dir", "M"]
                       + data)
    if not check(rc == 0 and os.path.exists("M/ckpt-00000020.safetensors"),
                 "relcl-train: a 20-step model to translate with", err[-2000:]):
        return

    # ---- one output line per input line ----
    with open(os.path.join(FIX, "input.en"), "rb") as f:
        base = f.read()
    long_line = b" ".join([b"output"] * 80)  # ~80+ subwords, max length 24
    extra = [
        b"bad \xff byte",                 # invalid byte
        b"cut \xe2\x82",                  # truncated sequence
        b"nul \x00 byte",                 # NUL
        b"overlong \xc0\xaf and surrogate \xed\xa0\x80",
        b"crlf line\r",                   # CRLF
        long_line,
        b"",
        b"no newline at the end",         # last line, no '\n'
    ]
    text = base + b"\n".join(extra)
    n_lines = text.count(b"\n") + 1
    inp = [l.rstrip(b"\r") for l in text.split(b"\n")]
    with open("input.txt", "wb") as f:
        f.write(text)
    rc, out, err = run(TR, ["--model", "M"], stdin=text)
    outl = lines_of(out) if rc == 0 else []
    check(rc == 0 and len(outl) == n_lines,
          "stdin -> stdout: %d lines in, %d out" % (n_lines, len(outl)), err)
    empties = [i for i, l in enumerate(inp) if l.strip(b" \t") == b""]
    check(len(outl) == n_lines and all(outl[i] == "" for i in empties),
          "empty and blank lines (%d) give empty lines" % len(empties))
    nonempty = [i for i in range(n_lines) if i not in empties]
    # (what a 20-step model says is often nothing at all: the text is not looked at)
    check("%d sentences (%d empty)" % (n_lines, len(empties)) in err,
          "the summary counts %d sentences, %d empty" % (n_lines, len(empties)), err)
    check("4 lines with invalid UTF-8" in err, "invalid UTF-8 and NUL counted (4 lines)", err)
    _, _, err_short = run(TR, ["--model", "M"], stdin=text.replace(long_line, b"short"))
    check(cropped(err) == cropped(err_short) + 1,
          "the over-long line is cropped and counted (%d with it, %d without)"
          % (cropped(err), cropped(err_short)), err + err_short)
    check("sentences/s" in err and "tokens/s" in err, "summary with sentences/s and tokens/s",
          err)
    rc2, out2, err2 = run(TR, ["--model", "M", "--input", "input.txt", "--output", "out.txt"])
    with open("out.txt", "rb") as f:
        filed = f.read()
    check(rc2 == 0 and out2 == b"" and filed == out, "--input/--output == stdin/stdout", err2)
    rc3, out3, err3 = run(TR, ["--model", "M", "--batch-size", "1", "--quiet"], stdin=text)
    rc4, out4, _ = run(TR, ["--model", "M", "--batch-size", "5", "--quiet"], stdin=text)
    check(rc3 == 0 and rc4 == 0 and out3 == out and out4 == out and err3 == "",
          "--batch-size 1 and 5 give the same output (and --quiet prints nothing)")
    rc5, out5, err5 = run(TR, ["--model", "M", "--beam-size", "1"], stdin=text)
    check(rc5 == 0 and len(lines_of(out5)) == n_lines, "--beam-size 1 (greedy)", err5)
    rc6, out6, _ = run(TR, ["--model", "M"], stdin=b"")
    check(rc6 == 0 and out6 == b"", "empty input: no output, exit 0")

    # ---- n-best ----
    rc, out, err = run(TR, ["--model", "M", "--n-best", "3"], stdin=text)
    ok = rc == 0
    per = {}
    for l in (lines_of(out) if ok else []):
        parts = l.split(" ||| ")
        ok = ok and len(parts) == 3
        if not ok:
            break
        per.setdefault(int(parts[0]), []).append(float(parts[2]))
    ok = ok and sorted(per) == list(range(n_lines))
    ok = ok and all(len(per[i]) == 1 for i in empties)
    ok = ok and all(1 <= len(per[i]) <= 3 for i in nonempty)
    ok = ok and all(s == sorted(s, reverse=True) for s in per.values())
    check(ok, "--n-best 3: 'LINE ||| TEXT ||| SCORE', every line, scores non-increasing",
          out.decode("utf-8", "replace")[:800] + err)

    # ---- broken input: exit 1 with one line ----
    os.mkdir("empty")
    os.mkdir("trunc")
    os.mkdir("corrupt")
    os.mkdir("nospm")
    ck = "M/ckpt-00000020.safetensors"
    with open(ck, "rb") as f:
        raw = f.read()
    for d in ("trunc", "corrupt"):
        shutil.copy("M/spm.model", d)
    with open("trunc/ckpt-00000020.safetensors", "wb") as f:
        f.write(raw[: len(raw) // 2])
    bad = bytearray(raw)
    bad[-100] ^= 0x10
    with open("corrupt/ckpt-00000020.safetensors", "wb") as f:
        f.write(bad)
    shutil.copy(ck, "nospm/ckpt-00000020.safetensors")
    with open("garbage.model", "wb") as f:
        f.write(b"not a sentencepiece model\n")
    for args, needle, what in [
        (["--model", "empty"], "no checkpoint", "an empty model directory"),
        (["--model", "trunc"], "trunc", "a directory whose only checkpoint is truncated"),
        (["--model", "trunc/ckpt-00000020.safetensors"], "trunc", "a truncated checkpoint file"),
        (["--model", "corrupt"], "corrupt", "a corrupt checkpoint (one flipped bit)"),
        (["--model", "nospm"], "spm.model", "a missing SentencePiece model"),
        (["--model", "M", "--spm-model", "garbage.model"], "garbage.model",
         "a file that is not a SentencePiece model"),
        (["--model", "M", "--checkpoint", "best"], None, None),
        (["--model", "M", "--checkpoint", "nope.safetensors"], "nope.safetensors",
         "a missing --checkpoint file"),
        (["--model", "missing"], "missing", "a missing model path"),
    ]:
        rc, out, err = run(TR, args, stdin=b"hello\n")
        if needle is None:
            check(rc == 0 and out.count(b"\n") == 1, "--checkpoint best works", err)
            continue
        check(rc == 1 and one_line(err) and needle in err and out == b"",
              "%s: exit 1, one line naming it" % what, "rc=%d stderr=%r" % (rc, err))

    # ---- usage errors: exit 2, one line ----
    for args, needle in [
        (["--model", "M", "--bogus"], "--bogus"),
        ([], "--model"),
        (["--model", "M", "--beam-size", "0"], "--beam-size"),
        (["--model", "M", "--beam-size", "abc"], "--beam-size"),
        (["--model", "M", "--n-best", "5"], "--n-best"),
        (["--model", "M", "--length-penalty"], "--length-penalty"),
        (["--model", "M", "stray"], "stray"),
    ]:
        rc, out, err = run(TR, args, stdin=b"hello\n")
        check(rc == 2 and one_line(err) and needle in err,
              "usage error %s -> exit 2, one line naming %s" % (" ".join(args), needle),
              "rc=%d stderr=%r" % (rc, err))
    rc, out, err = run(TR, ["--help"])
    check(rc == 0 and b"--beam-size" in out and b"--n-best" in out, "--help")

    # ---- relcl-average ----
    rc, out, err = run(AV, ["--output", "same.safetensors", ck, ck])
    meta_a, ta = read_st(ck)
    ok = rc == 0
    if ok:
        meta_s, ts = read_st("same.safetensors")
        ok = ta.keys() == ts.keys() and all(ta[k] == ts[k] for k in ta)
        ok = ok and meta_s.get("relcl.config") == meta_a.get("relcl.config")
        ok = ok and meta_s.get("relcl.average_of") == "2"
    check(ok, "average of a checkpoint with itself == it, bit for bit (%d tensors)" % len(ta),
          err)
    check(os.path.exists("spm.model"), "the vocabulary is copied beside an output elsewhere")
    rc, out, err = run(TR, ["--model", "same.safetensors"], stdin=b"hello\n")
    check(rc == 0 and out.count(b"\n") == 1, "relcl-translate --model AVERAGED.safetensors", err)
    rc, out, err = run(AV, ["--model-dir", "M", "--last", "2"])
    ok = rc == 0 and os.path.exists("M/average.safetensors")
    if ok:
        _, t1 = read_st("M/ckpt-00000010.safetensors")
        _, t2 = read_st("M/ckpt-00000020.safetensors")
        _, tv = read_st("M/average.safetensors")
        name = "emb.weight"
        n = len(t1[name]) // 4
        a, b, v = (struct.unpack("<%df" % n, t[name]) for t in (t1, t2, tv))
        ok = all(abs(v[i] - (a[i] + b[i]) / 2) <= 1e-7 * (abs(a[i]) + abs(b[i])) for i in range(n))
    check(ok, "--model-dir M --last 2: M/average.safetensors, the mean of ckpt 10 and 20", err)
    rc, out, err = run(TR, ["--model", "M", "--checkpoint", "average.safetensors"], stdin=text)
    check(rc == 0 and len(lines_of(out)) == n_lines,
          "relcl-translate --checkpoint average.safetensors", err)
    # another configuration: d-model 16
    rc, out, err = run(TRAIN, ["--config", "tiny.yaml", "--d-model", "16", "--max-steps", "1",
                               "--spm-model", "M/spm.model", "--model-dir", "O"] + data)
    if check(rc == 0, "relcl-train: a model of another configuration", err[-1000:]):
        other = [p for p in sorted(os.listdir("O")) if p.startswith("ckpt-")][-1]
        rc, out, err = run(AV, ["--output", "mix.safetensors", ck, "O/" + other])
        check(rc == 1 and one_line(err) and "--d-model" in err and
              not os.path.exists("mix.safetensors"),
              "mismatched configurations refused in one line naming --d-model",
              "rc=%d stderr=%r" % (rc, err))
    rc, out, err = run(AV, ["--output", "x.safetensors", ck, "trunc/ckpt-00000020.safetensors"])
    check(rc == 1 and one_line(err) and "trunc" in err, "a truncated input refused in one line",
          "rc=%d stderr=%r" % (rc, err))
    for args, needle in [
        (["--bogus"], "--bogus"),
        ([ck], "--output"),
        (["--model-dir", "M"], "--last"),
        (["--model-dir", "M", "--last", "x"], "--last"),
        (["--output", "y.safetensors", "--last", "2", ck], "--model-dir"),
    ]:
        rc, out, err = run(AV, args)
        check(rc == 2 and one_line(err) and needle in err,
              "relcl-average usage error %s -> exit 2" % " ".join(args),
              "rc=%d stderr=%r" % (rc, err))
    rc, out, err = run(AV, ["--model-dir", "M", "--last", "99"])
    check(rc == 1 and one_line(err), "--last more than there are: exit 1, one line", err)

    # ---- relcl-train --valid-bleu: greedy translations of the validation set, scored by
    # the python in RELCL_PYTHON running sacrebleu (here a stand-in that prints 12.34) ----
    with open("fake-python", "w") as f:
        f.write("#!/bin/sh\necho 12.34\n")
    os.chmod("fake-python", 0o755)
    env = dict(os.environ, RELCL_PYTHON=os.path.abspath("fake-python"))
    rc, out, err = run(TRAIN, ["--config", "tiny.yaml", "--max-steps", "10", "--valid-bleu", "5",
                               "--model-dir", "VB", "--log-json", "vb.jsonl"] + data, env=env)
    text_out = out.decode("utf-8", "replace")
    with open("valid.en") as f:
        n_valid = len(f.read().splitlines())
    hyp_lines = open("VB/valid-bleu.hyp").read().split("\n")[:-1] if rc == 0 else []
    logged = [json.loads(l) for l in open("vb.jsonl")] if rc == 0 else []
    bleus = [l for l in logged if l.get("type") == "valid_bleu"]
    check(rc == 0 and text_out.count("BLEU 12.34") == 2 and len(hyp_lines) == n_valid and
          [b["step"] for b in bleus] == [5, 10] and bleus[0]["valid_bleu"] == 12.34,
          "relcl-train --valid-bleu 5: BLEU at steps 5 and 10, logged, %d hypotheses" % n_valid,
          text_out[-1500:] + err)
    env = dict(os.environ, RELCL_PYTHON="/bin/false")
    rc, out, err = run(TRAIN, ["--config", "tiny.yaml", "--max-steps", "10", "--valid-bleu", "5",
                               "--model-dir", "VC"] + data, env=env)
    text_out = out.decode("utf-8", "replace")
    check(rc == 0 and text_out.count("sacrebleu did not run") == 1,
          "--valid-bleu without sacrebleu: said once, training goes on", text_out[-1500:] + err)
    rc, out, err = run(TRAIN, ["--config", "tiny.yaml", "--max-steps", "10", "--valid-bleu", "5",
                               "--train-src", "train.en", "--train-tgt", "train.fr",
                               "--model-dir", "VD"])
    check(rc == 2 and one_line(err) and "--valid-bleu" in err,
          "--valid-bleu without a validation set: exit 2", err)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        if passed + failed == 0:  # a run in which nothing was checked must not pass
            check(False, "no check ran")
        print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
