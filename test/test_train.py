#!/usr/bin/env python3
"""relcl-train from outside: flags, config files, data errors, checkpoints, exact resume.

Runs the real program on a tiny model (test/train/tiny.yaml: 1+1 layers, d_model 32) and the
small fixture corpus in test/train/, in a temporary directory, and checks what a user sees:
exit codes (0 ok, 1 runtime error, 2 usage error), one-line errors naming the flag or the
file and line, --dump-config, --log-json, the PNG plot, and the checkpoints themselves, read
with nothing but json and struct (the safetensors layout).

Exact resume is checked bitwise: every tensor (parameters and both Adam moments) of step 80
after 40 steps + --resume must equal those of 80 straight steps; so must a run killed with
SIGKILL at a random point, and one killed while a checkpoint was being written.

usage: test_train.py PATH/TO/relcl-train
Prints one line per check and ends with "N passed, M failed".
"""
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "train")
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


def run(args, timeout=300, **kw):
    p = subprocess.run([EXE] + args, capture_output=True, text=True, timeout=timeout, **kw)
    return p.returncode, p.stdout, p.stderr


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
    tensors = {k: data[v["data_offsets"][0] : v["data_offsets"][1]] for k, v in header.items()}
    return meta, tensors


def same_tensors(a, b):
    """'' when every tensor of two checkpoints is bitwise equal, else what differs."""
    _, ta = read_st(a)
    _, tb = read_st(b)
    if sorted(ta) != sorted(tb):
        return "tensor names differ"
    bad = [k for k in ta if ta[k] != tb[k]]
    return "" if not bad else "%d of %d tensors differ, e.g. %s" % (len(bad), len(ta), bad[0])


def device_max_alloc():
    """The largest CL_DEVICE_MAX_MEM_ALLOC_SIZE over every OpenCL device (ctypes over the ICD
    loader, the device relcl-train picks is one of them), or 0 when it cannot be asked."""
    import ctypes
    import ctypes.util
    try:
        cl = ctypes.CDLL(ctypes.util.find_library("OpenCL") or "libOpenCL.so.1")
    except OSError:
        return 0
    best = 0
    n = ctypes.c_uint32()
    if cl.clGetPlatformIDs(0, None, ctypes.byref(n)) != 0 or n.value == 0:
        return 0
    plats = (ctypes.c_void_p * n.value)()
    cl.clGetPlatformIDs(n.value, plats, None)
    all_types, max_alloc = ctypes.c_uint64(0xFFFFFFFF), ctypes.c_uint32(0x1010)
    for p in plats:
        nd = ctypes.c_uint32()
        if cl.clGetDeviceIDs(ctypes.c_void_p(p), all_types, 0, None, ctypes.byref(nd)) != 0:
            continue
        devs = (ctypes.c_void_p * nd.value)()
        cl.clGetDeviceIDs(ctypes.c_void_p(p), all_types, nd.value, devs, None)
        for d in devs:
            v = ctypes.c_uint64()
            if cl.clGetDeviceInfo(ctypes.c_void_p(d), max_alloc, 8, ctypes.byref(v), None) == 0:
                best = max(best, v.value)
    return best


def ckpt(d, step):
    return os.path.join(d, "ckpt-%08d.safetensors" % step)


def main():
    global EXE
    EXE = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="relcl-train-test-")
    os.chdir(work)
    for f in os.listdir(FIX):
        shutil.copy(os.path.join(FIX, f), f)
    data = ["--train-src", "train.en", "--train-tgt", "train.fr",
            "--valid-src", "valid.en", "--valid-tgt", "valid.fr"]
    tiny = ["--config", "tiny.yaml"] + data

    # ---- usage errors: exit 2, one line naming the flag ----
    for args, needle in [
        (["--bogus"], "--bogus"),
        (["--d-model"], "--d-model"),
        (["--d-model", "abc"], "--d-model"),
        (["--dropout", "1.5"], "--dropout"),
        (["--positions", "sideways"], "--positions"),
        (["--heads", "3", "--d-model", "32"], "--heads"),
        (["--max-steps", "-1"], "--max-steps"),
        (["--train-src", "train.en"], "--train-tgt"),
        (["stray"], "stray"),
        (["--config", "missing.yaml"], "missing.yaml"),
    ]:
        rc, out, err = run(args)
        check(rc == 2 and one_line(err) and needle in err,
              "usage error %s -> exit 2, one line naming %s" % (" ".join(args), needle),
              "rc=%d stderr=%r" % (rc, err))
    rc, out, err = run(["--help"])
    check(rc == 0 and "--max-relative-position" in out and "--resume" in out, "--help")

    # ---- --dump-config, --config YAML and JSON ----
    rc, out, err = run(["--preset", "tiny", "--d-model", "48", "--heads", "4", "--dump-config"])
    ok = rc == 0
    try:
        cfg = json.loads(out)
        ok = ok and cfg["preset"] == "tiny" and cfg["d-model"] == 48 and cfg["heads"] == 4
        ok = ok and cfg["label-smoothing"] == 0.1 and cfg["warmup"] == 4000
    except (ValueError, KeyError):
        ok = False
    check(ok, "--dump-config prints the resolved configuration as JSON (flags over preset)", out + err)
    with open("dumped.json", "w") as f:
        f.write(out)
    rc2, out2, _ = run(["--config", "dumped.json", "--dump-config"])
    check(rc2 == 0 and out2 == out, "--dump-config output read back by --config gives itself")
    results = []
    for cf in ("tiny.yaml", "tiny.json"):
        rc, out, err = run(["--config", cf, "--layers", "2", "--dump-config"])
        try:
            c = json.loads(out)
            results.append(c)
            ok = rc == 0 and c["d-model"] == 32 and c["d-ff"] == 64 and c["enc-layers"] == 2
            ok = ok and c["dec-layers"] == 2 and c["lr-scale"] == 2 and c["preset"] == "tiny"
        except (ValueError, KeyError):
            ok = False
        check(ok, "--config %s read, flags override it" % cf, out + err)
    check(len(results) == 2 and results[0] == results[1], "tiny.yaml and tiny.json resolve alike")
    with open("bad.yaml", "w") as f:
        f.write("preset: tiny\nd-model: wide\n")
    rc, out, err = run(["--config", "bad.yaml", "--dump-config"])
    check(rc == 2 and one_line(err) and "bad.yaml:2" in err and "d-model" in err,
          "bad value in a YAML config -> exit 2 naming FILE:LINE and the key", err)
    with open("bad2.json", "w") as f:
        f.write('{"preset": "tiny", "colour": "blue"}')
    rc, out, err = run(["--config", "bad2.json", "--dump-config"])
    check(rc == 2 and one_line(err) and "colour" in err, "unknown key in a JSON config -> exit 2", err)

    # ---- data errors: exit 1, one line naming file and line ----
    with open("train.en") as f:
        en = f.read().splitlines()
    with open("train.fr") as f:
        fr = f.read().splitlines()

    def write(name, lines, raw=None):
        with open(name, "wb") as f:
            f.write(raw if raw is not None else ("\n".join(lines) + "\n").encode())

    write("short.fr", fr[:-3])
    bad_utf8 = ("\n".join(fr[:6]) + "\n").encode() + b"caf\xc3\x28 au lait\n" + ("\n".join(fr[7:]) + "\n").encode()
    write("utf8.fr", None, bad_utf8)
    nul = ("\n".join(fr[:9]) + "\n").encode() + b"nul\x00byte\n" + ("\n".join(fr[10:]) + "\n").encode()
    write("nul.fr", None, nul)
    for tgt, needles, what in [
        ("short.fr", ["short.fr", str(len(fr) - 3)], "differing line counts"),
        ("utf8.fr", ["utf8.fr:7"], "invalid UTF-8"),
        ("nul.fr", ["nul.fr:10"], "NUL byte"),
        ("missing.fr", ["missing.fr"], "missing file"),
    ]:
        rc, out, err = run(["--config", "tiny.yaml", "--train-src", "train.en", "--train-tgt", tgt,
                            "--model-dir", "bad-" + tgt, "--max-steps", "1"])
        check(rc == 1 and one_line(err) and all(n in err for n in needles),
              "data error (%s) -> exit 1, one line naming %s" % (what, ", ".join(needles)),
              "rc=%d stderr=%r" % (rc, err))

    # ---- 80 straight steps: the reference ----
    t0 = time.time()
    rc, out, err = run(tiny + ["--model-dir", "A", "--max-steps", "80", "--log-json", "A.jsonl"])
    secs = time.time() - t0
    if not check(rc == 0, "80 straight steps (%.1f s)" % secs, err[-2000:]):
        return finish(work)
    spm = os.path.abspath("A/spm.model")
    check("300 pairs kept, 1 empty skipped" in out, "data statistics: pairs kept, empty skipped",
          out[:1500])
    check(os.path.exists(ckpt("A", 80)) and os.path.exists("A/best.safetensors"),
          "checkpoint of step 80 and best.safetensors written")
    meta, tensors = read_st(ckpt("A", 80))
    names = [n for n in tensors if not n.startswith("adam_")]
    ok = len(names) > 0 and all("adam_m/" + n in tensors and "adam_v/" + n in tensors for n in names)
    check(ok, "checkpoint holds %d parameter tensors with adam_m/ and adam_v/ moments" % len(names))
    need = ["relcl.config", "relcl.vocab_fnv1a64", "relcl.step", "relcl.batch_epoch",
            "relcl.batch_index", "relcl.seed", "relcl.adam_step"]
    check(all(k in meta for k in need) and meta["relcl.step"] == "80",
          "checkpoint metadata: config, vocabulary hash, step, batch position, seed",
          str(sorted(meta)))
    try:
        mc = json.loads(meta["relcl.config"])
        check(mc["d-model"] == 32 and mc["positions"] == "relative", "relcl.config is the model's JSON")
    except (ValueError, KeyError):
        check(False, "relcl.config is the model's JSON", meta.get("relcl.config", ""))
    # --log-json
    train_lines = valid_lines = 0
    ok = True
    with open("A.jsonl") as f:
        for line in f:
            o = json.loads(line)
            if "valid_loss" in o:
                valid_lines += 1
                ok = ok and isinstance(o["step"], int) and isinstance(o["valid_loss"], float)
            else:
                train_lines += 1
                ok = ok and isinstance(o["step"], int) and isinstance(o["loss"], float)
    check(ok and train_lines == 8 and valid_lines == 4,
          "--log-json: 8 training lines (step, loss) and 4 validation lines (step, valid_loss)",
          "train %d valid %d" % (train_lines, valid_lines))
    with open("A/loss.png", "rb") as f:
        png = f.read()
    w, h = struct.unpack(">II", png[16:24]) if len(png) > 24 else (0, 0)
    check(png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR" and w >= 400 and h >= 300,
          "loss.png is a PNG (%dx%d)" % (w, h))
    check("step      80" in out and "lr " in out and "tok/s" in out and "ppl" in out,
          "log lines carry step, loss, ppl, lr, tok/s")
    check("new best" in out or "stalled" in out, "validation lines say new best / stalled")

    common = tiny + ["--spm-model", spm]
    # ---- 40 steps, then --resume to 80: bitwise the same ----
    rc, out, err = run(common + ["--model-dir", "B", "--max-steps", "40"])
    check(rc == 0 and os.path.exists(ckpt("B", 40)), "40 steps", err)
    rc, out, err = run(common + ["--model-dir", "B", "--max-steps", "80", "--resume"])
    check(rc == 0 and "resumed at step 40" in out, "--resume continues from step 40", out[-800:] + err)
    diff = same_tensors(ckpt("A", 80), ckpt("B", 80)) if os.path.exists(ckpt("B", 80)) else "no step 80"
    check(diff == "", "40 + resume to 80 == 80 straight, bitwise (params and Adam moments)", diff)

    # ---- refusals ----
    rc, out, err = run(common + ["--model-dir", "B", "--max-steps", "100"])
    check(rc == 1 and one_line(err) and "--resume" in err,
          "a fresh run into a directory with checkpoints is refused", err)
    rc, out, err = run(common + ["--model-dir", "B", "--max-steps", "100", "--resume",
                                 "--d-model", "64"])
    check(rc == 1 and one_line(err) and "--d-model" in err,
          "resume with another --d-model -> one line naming it", err)
    rc, out, err = run(common + ["--model-dir", "B", "--max-steps", "100", "--resume",
                                 "--positions", "absolute"])
    check(rc == 1 and one_line(err) and "--positions" in err, "resume with other --positions refused", err)
    rc, out, err = run(tiny + ["--model-dir", "V", "--vocab-size", "180", "--max-steps", "1"])
    rc, out, err = run(common[:-2] + ["--spm-model", "V/spm.model", "--model-dir", "B",
                                     "--max-steps", "100", "--resume"])
    check(rc == 1 and one_line(err) and "vocabulary" in err,
          "resume with another vocabulary refused", err)
    check(same_tensors(ckpt("A", 80), ckpt("B", 80)) == "" and
          open("B/spm.model", "rb").read() == open(spm, "rb").read(),
          "refused resumes left the directory as it was")

    # ---- a corrupt newest checkpoint: skipped with a message, the previous one used ----
    shutil.copytree("B", "C")
    p = ckpt("C", 80)
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) - 100)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x10]))
    rc, out, err = run(common + ["--model-dir", "C", "--max-steps", "80", "--resume"])
    check(rc == 0 and "ckpt-00000080" in out and "skipping" in out and "resumed at step 60" in out,
          "a corrupt newest checkpoint is skipped, saying why, and step 60 is used",
          out[:1500] + err)
    diff = same_tensors(ckpt("A", 80), ckpt("C", 80)) if os.path.exists(ckpt("C", 80)) else "none"
    check(diff == "", "... and training from 60 again reaches the same step 80", diff)
    shutil.copytree("B", "D")
    for s in (20, 40, 60, 80):
        if os.path.exists(ckpt("D", s)):
            with open(ckpt("D", s), "r+b") as f:
                f.truncate(1000)
    rc, out, err = run(common + ["--model-dir", "D", "--max-steps", "80", "--resume"])
    check(rc == 1 and one_line(err) and "no valid checkpoint" in err,
          "every checkpoint truncated -> one clear line, exit 1", err)

    # ---- kill -9 at a random point during training, then resume ----
    # The check needs a run that was really killed (returncode -SIGKILL) before its last
    # checkpoint: a run that finished, or was killed after writing step 80 (while it saved
    # best.safetensors or exited: seen once in CI), would prove nothing, so it is retried with
    # an earlier kill point.
    random.seed(os.getpid())
    args = common + ["--model-dir", "E", "--max-steps", "80", "--valid-every", "10"]
    killed = False
    for attempt in range(4):
        shutil.rmtree("E", ignore_errors=True)
        p = subprocess.Popen([EXE] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # the time of 10 steps, measured on this run, sets the range of the random kill point:
        # somewhere between step 20 and about step 70 (earlier on each retry)
        marks = []
        for s in (10, 20):
            deadline = time.time() + 300
            while not os.path.exists(ckpt("E", s)) and p.poll() is None and time.time() < deadline:
                time.sleep(0.002)
            marks.append(time.time())
        time.sleep(random.uniform(0, 5 * (marks[1] - marks[0]) / (1 + 2 * attempt)))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        killed = p.wait() == -signal.SIGKILL
        steps = sorted(int(f[5:13]) for f in os.listdir("E") if f.startswith("ckpt-"))
        if killed and (not steps or steps[-1] < 80):
            break
    check(killed and (not steps or steps[-1] < 80),
          "kill -9 during training landed (returncode -9, last checkpoint %s, %d attempts)"
          % (steps[-1] if steps else None, attempt + 1))
    rc, out, err = run(args + ["--resume"])
    diff = same_tensors(ckpt("A", 80), ckpt("E", 80)) if os.path.exists(ckpt("E", 80)) else "none"
    check(killed and rc == 0 and diff == "",
          "... and resume -> step 80 bitwise equal", diff + err)

    # ---- kill -9 while a checkpoint is being written ----
    args = common + ["--model-dir", "F", "--max-steps", "80", "--valid-every", "2"]
    caught = None
    for attempt in range(10):
        shutil.rmtree("F", ignore_errors=True)
        os.mkdir("F")
        p = subprocess.Popen([EXE] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while not os.path.exists(ckpt("F", 30)) and p.poll() is None and time.time() < deadline:
            time.sleep(0.002)
        while p.poll() is None:  # poll hard for the temporary file of the next save
            tmp = [f for f in os.listdir("F") if f.startswith(".ckpt-") and ".tmp-" in f]
            if tmp:
                p.send_signal(signal.SIGKILL)
                caught = tmp[0]
                break
        if p.wait() != -signal.SIGKILL:
            caught = None  # the run ended by itself: no kill landed
        elif caught and not os.path.exists(os.path.join("F", caught)):
            caught = None  # the save finished (renamed) before the kill arrived: not mid-save
        if caught:
            break
    check(caught is not None,
          "a kill -9 landed inside a save (returncode -9, temporary file %s, %d attempts)"
          % (caught, attempt + 1))
    rc, out, err = run(args + ["--resume"])
    diff = same_tensors(ckpt("A", 80), ckpt("F", 80)) if os.path.exists(ckpt("F", 80)) else "none"
    check(caught is not None and rc == 0 and "temporary file" in out and diff == "",
          "after a kill mid-save the last checkpoint loads, the stray file is removed, and "
          "resume reaches step 80 bitwise equal", diff + out[-600:] + err)
    check(not [f for f in os.listdir("F") if ".tmp-" in f], "no temporary file left behind")

    # ---- SIGTERM: a checkpoint is saved before stopping, and resuming is still exact ----
    args = common + ["--model-dir", "S", "--max-steps", "80", "--valid-every", "25"]
    p = subprocess.Popen([EXE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not os.path.exists(ckpt("S", 25)) and p.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    time.sleep(random.uniform(0, 0.02))  # well before the 55 steps left are done
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate()
    steps = sorted(int(f[5:13]) for f in os.listdir("S") if f.startswith("ckpt-"))
    check(p.returncode == 1 and "interrupted" in out and steps and ("step %d" % steps[-1]) in out,
          "SIGTERM saves a checkpoint (step %s) and stops, exit 1" % (steps[-1] if steps else None),
          "rc=%s %s %s" % (p.returncode, out[-400:], err))
    rc, out, err = run(args + ["--resume"])
    diff = same_tensors(ckpt("A", 80), ckpt("S", 80)) if os.path.exists(ckpt("S", 80)) else "none"
    check(rc == 0 and diff == "", "... and resuming from it reaches step 80 bitwise equal", diff + err)

    # ---- --translate: greedy translations from the model directory ----
    rc, out, err = run(["--model-dir", "A", "--translate", "valid.en"])
    n_valid = len(open("valid.en").read().splitlines())
    check(rc == 0 and len(out.splitlines()) == n_valid,
          "--translate prints one line per input line (%d)" % n_valid, err)
    rc, out, err = run(["--model-dir", "nowhere", "--translate", "valid.en"])
    check(rc == 1 and one_line(err) and "nowhere" in err, "--translate without a model: one line", err)

    # ---- device out of memory: one clear line, on every device ----
    # A 1+1-layer model (d_model 1024) whose parameter arena, one buffer, needs twice the
    # largest single allocation any device allows (CL_DEVICE_MAX_MEM_ALLOC_SIZE), so every
    # device must refuse it with one line, exit 1 (relcl_alloc refuses it before touching
    # memory). The library holds at most 2^32 parameters (16 GB an arena): on a device that
    # allocates 15.6 GB at once, the check is the refusal of a model over that limit instead.
    max_alloc = device_max_alloc()
    D, fixed = 1024, 12 * 1024 * 1024  # floats: d_ff-independent part of one arena (approx.)
    target = min(2 * max_alloc // 4, int(3.9e9))  # floats of one arena
    oom = max_alloc > 0 and 4 * target > max_alloc
    d_ff = max(1, (target - fixed) // (4 * D)) if oom else 10**9 // D
    layers = 1 if oom else 2  # 2 layers at the largest d_ff: over 2^32 parameters
    rc, out, err = run(common + ["--model-dir", "OOM", "--d-model", str(D), "--heads", "16",
                                 "--d-ff", str(d_ff), "--layers", str(layers),
                                 "--max-steps", "1"])
    want = "out of memory" if oom else "2^32"
    check(rc == 1 and one_line(err) and want in err,
          "a model too large for the device (d_ff %d, %d layers; largest allocation %.1f GiB) "
          "-> exit 1, one line saying %r" % (d_ff, layers, max_alloc / 2**30, want),
          "rc=%d %s" % (rc, err))

    # ---- --keep, --max-time ----
    rc, out, err = run(common + ["--model-dir", "G", "--max-steps", "60", "--valid-every", "10",
                                 "--keep", "2"])
    left = sorted(f for f in os.listdir("G") if f.startswith("ckpt-"))
    check(rc == 0 and left == ["ckpt-00000050.safetensors", "ckpt-00000060.safetensors"],
          "--keep 2 keeps the last two checkpoints", str(left))
    rc, out, err = run(common + ["--model-dir", "H", "--max-steps", "1000000", "--max-time", "1"])
    check(rc == 0 and "reached --max-time" in out and any(f.startswith("ckpt-") for f in os.listdir("H")),
          "--max-time stops the run and saves a checkpoint", out[-500:] + err)
    return finish(work)


def finish(work):
    if failed == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("work directory kept: " + work)
    if passed + failed == 0:  # a run in which nothing was checked must not pass
        check(False, "no check ran")
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
