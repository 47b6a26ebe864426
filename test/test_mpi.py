#!/usr/bin/env python3
"""relcl-train on several MPI ranks (Open MPI's mpirun), from outside, on one machine.

On the tiny model of test/train/ (d_model 32, a few steps):
- 2 ranks with --accum 1 against 1 rank with --accum 2 under mpirun: every tensor (parameters
  and both Adam moments) bitwise equal. Bitwise, because the gradients are summed on the host
  in the order of the micro-batches' index whichever rank computed them. A plain run (no
  mpirun) accumulates on the device, in another rounding order: the same within a tolerance
  (mean |difference| of the parameters < 1e-4 after 6 Adam steps: Adam divides by sqrt(v), so
  single elements whose gradient is near 0 may move by up to lr; the mean stays at rounding
  level), and a run on other micro-batches must fall outside that tolerance.
- --balance with rank 1 slowed down (RELCL_TEST_MPI_SLOW): rank 0 takes more micro-batches,
  and the tensors are bitwise those of the run without --balance.
- A rank whose parameters drift (RELCL_TEST_MPI_PERTURB) is found by the hash check, said so,
  and repaired from rank 0: the tensors are bitwise those of the run without the drift.
- Ranks that start with another configuration or other data stop before training, with one
  line naming the rank, its host and what differs.
- A rank killed mid-run (RELCL_TEST_MPI_KILL, SIGKILL) ends the job with a message naming the
  rank and host; --resume with ONE rank and --accum 2 continues to the same bits as the run
  that was never killed.
- One rank on PoCL and one under Oclgrind (two OpenCL platforms) train together for 2 steps of
  a very small model.

usage: test_mpi.py PATH/TO/relcl-train   (needs mpirun and oclgrind in PATH)
Prints one line per check and ends with "N passed, M failed".
"""
import array
import os
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_train  # noqa: E402  (its check() and safetensors reader)

FIX = os.path.join(HERE, "train")
MPIRUN = ["mpirun", "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism", "none"]


check = test_train.check  # one line per check, counted in test_train.passed/failed


def env(**extra):
    e = dict(os.environ)
    # CI runs as root; one PoCL thread a rank on the 2-core machine
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             POCL_MAX_PTHREAD_COUNT="1")
    # an ASan build under oclgrind: its runtime is preloaded ahead of ASan's
    e["ASAN_OPTIONS"] = ":".join(x for x in [e.get("ASAN_OPTIONS", ""),
                                             "verify_asan_link_order=0"] if x)
    e.update(extra)
    return e


def mpirun(ranks, timeout=900, **extra):
    """ranks: list of (count, argv[, mpirun options]) for mpirun's colon-separated app
    contexts."""
    cmd = list(MPIRUN)
    for i, ctx in enumerate(ranks):
        cmd += ([":"] if i else []) + ["-np", str(ctx[0])] + (ctx[2] if len(ctx) > 2 else []) + ctx[1]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(**extra))
    return p.returncode, p.stdout, p.stderr


def crash(err):
    """When a rank died of a signal: mpirun's line naming the rank, the signal, any message
    of the C library or C++ runtime, and the rank's backtrace (Open MPI prints it), one short
    line each, so that a failure report shows them before the logs' tails."""
    keep = ("noticed that process rank", "Signal:", "Signal code", "Failing at", "Assertion",
            "terminate called", "what():", "free()", "malloc", "corrupted", "stack smashing",
            "OCLGRIND", "pocl error", "Aborted")
    lines = [l.strip() for l in err.splitlines()]
    said = [l for l in lines if any(k in l for k in keep)]
    frames = [l.split("] ", 1)[-1] for l in lines if "] [" in l and "] [ 0]" not in l]
    return "\n     ".join(said + frames[:16])


def plain(argv, timeout=900):
    p = subprocess.run([EXE] + argv, capture_output=True, text=True, timeout=timeout, env=env())
    return p.returncode, p.stdout, p.stderr


def read_st(path):
    _, tensors = test_train.read_st(path)
    return tensors


def same_tensors(a, b):
    """'' when every tensor of two checkpoints is bitwise equal, else what differs."""
    if not (os.path.exists(a) and os.path.exists(b)):
        return "missing %s" % (a if not os.path.exists(a) else b)
    return test_train.same_tensors(a, b)


def mean_param_diff(a, b):
    ta, tb = read_st(a), read_st(b)
    total = count = 0
    for k in ta:
        if k.startswith("adam_"):
            continue
        x, y = array.array("f", ta[k]), array.array("f", tb[k])
        total += sum(abs(p - q) for p, q in zip(x, y))
        count += len(x)
    return total / count


def ckpt(d, step):
    return os.path.join(d, "ckpt-%08d.safetensors" % step)


def main():
    global EXE
    EXE = os.path.abspath(sys.argv[1])
    for tool in ("mpirun", "oclgrind"):
        if not check(shutil.which(tool) is not None, "%s is installed" % tool):
            print("%d passed, %d failed" % (test_train.passed, test_train.failed))
            return 1
    work = tempfile.mkdtemp(prefix="relcl-mpi-test-")
    os.chdir(work)
    for f in os.listdir(FIX):
        shutil.copy(os.path.join(FIX, f), f)
    host = socket.gethostname()
    data = ["--train-src", "train.en", "--train-tgt", "train.fr"]
    # one vocabulary for every run: SentencePiece is trained once; this first run also
    # fills the kernel cache (minutes on a busy 2-core machine, in a debug build)
    rc, out, err = plain(["--config", "tiny.yaml"] + data + ["--model-dir", "V", "--max-steps", "1"])
    check(rc == 0, "a vocabulary for the runs", err)
    base = ["--config", "tiny.yaml"] + data + ["--spm-model", "V/spm.model", "--max-steps", "6",
                                               "--valid-every", "2", "--log-every", "2",
                                               "--hash-every", "1"]
    T = [EXE] + base

    # ---- N ranks x --accum A == 1 rank x --accum N*A ----
    rc2, out2, err2 = mpirun([(2, T + ["--model-dir", "M2"])])
    check(rc2 == 0 and "rank 1 on %s:" % host in out2 and "mpi step" in out2,
          "2 ranks train (rank 0 lists both ranks' devices and prints the MPI line)",
          "rc=%d\n%s\n%s" % (rc2, out2[-2000:], err2[-2000:]))
    check("differ from rank 0" not in out2, "2 PoCL ranks: parameter hashes agree every step", out2)
    rc1, out1, err1 = mpirun([(1, T + ["--accum", "2", "--model-dir", "M1"])])
    check(rc1 == 0, "1 rank with --accum 2 under mpirun", err1[-2000:])
    d = same_tensors(ckpt("M1", 6), ckpt("M2", 6))
    check(d == "", "2 ranks x --accum 1 == 1 rank x --accum 2, bitwise (parameters, Adam m, v)", d)
    rc, out, err = plain(base + ["--accum", "2", "--model-dir", "P2"])
    rc_, out_, err_ = plain(base + ["--accum", "1", "--model-dir", "P1"])
    if check(rc == 0 and rc_ == 0, "plain runs (no mpirun) with --accum 2 and 1", err + err_):
        near = mean_param_diff(ckpt("P2", 6), ckpt("M2", 6))
        far = mean_param_diff(ckpt("P1", 6), ckpt("M2", 6))
        check(near < 1e-4, "plain --accum 2 (device accumulation) == 2 ranks within mean "
              "|diff| 1e-4 (got %.2e)" % near)
        check(far > 1e-4, "... and the tolerance tells other micro-batches apart (plain "
              "--accum 1: %.2e)" % far)

    # ---- --balance with a slow rank ----
    TA = T + ["--accum", "2"]
    rc, out, err = mpirun([(2, TA + ["--model-dir", "B0"])])
    check(rc == 0, "2 ranks x --accum 2", err[-2000:])
    rc, outb, err = mpirun([(2, TA + ["--balance", "--model-dir", "B1"])],
                           RELCL_TEST_MPI_SLOW="1:1")
    shares = [l.split("micro-batches per update ")[1].split(" ")[0]
              for l in outb.splitlines() if "micro-batches per update" in l]
    moved = any(float(s.split("+")[0]) > float(s.split("+")[1]) for s in shares)
    check(rc == 0 and moved, "--balance gives the fast rank more micro-batches (shares %s)"
          % shares, err[-2000:])
    d = same_tensors(ckpt("B0", 6), ckpt("B1", 6))
    check(d == "", "--balance with a slow rank: bitwise the run without --balance", d)

    # ---- parameter hash check and repair ----
    rc, out, err = mpirun([(2, T + ["--model-dir", "H"])], RELCL_TEST_MPI_PERTURB="1:3")
    check(rc == 0 and "step 3: the parameters of rank 1 on %s differ from rank 0's" % host in out,
          "drifted parameters on rank 1 are found at the next hash check and said", out[-3000:])
    d = same_tensors(ckpt("H", 6), ckpt("M2", 6))
    check(d == "", "... and repaired from rank 0: bitwise the run without the drift", d)

    # ---- ranks that disagree at start ----
    # rank 1 in another directory whose train.fr (same name) has one line changed
    os.makedirs("other/V")
    for f in ("tiny.yaml", "train.en", "V/spm.model"):
        shutil.copy(f, os.path.join("other", f))
    with open("train.fr") as f:
        lines = f.readlines()
    lines[7] = "autre chose\n"
    with open("other/train.fr", "w") as f:
        f.writelines(lines)
    for extra, mpiopt, what in [(["--dropout", "0.2"], [], "configuration"),
                                ([], ["-wdir", os.path.abspath("other")],
                                 "--train-tgt's contents")]:
        rc, out, err = mpirun([(1, T + ["--model-dir", os.path.abspath("D")]),
                               (1, T + ["--model-dir", os.path.abspath("D")] + extra, mpiopt)])
        lines = [l for l in err.splitlines() if "differ in" in l]
        check(rc != 0 and len(lines) == 1 and "rank 1 on %s and rank 0 on %s differ in %s"
              % (host, host, what) in lines[0] and not os.path.exists(ckpt("D", 2)),
              "ranks differing in %s stop before training, one line naming rank and host"
              % what, "rc=%d\n%s" % (rc, err[-2000:]))

    # ---- a device error on one rank ends the job, naming it ----
    rc, out, err = mpirun([(1, T + ["--model-dir", "E"]),
                           (1, T + ["--model-dir", "E", "--device", "no-such-device"])])
    said = [l for l in err.splitlines() if l.startswith("relcl-train: rank 1 on %s: device:" % host)]
    check(rc != 0 and len(said) == 1, "a device error on rank 1 ends the job with one line "
          "naming rank 1 and %s" % host, "rc=%d\n%s" % (rc, err[-2000:]))

    # ---- a rank killed mid-run, then --resume with another number of ranks ----
    rc, out, err = mpirun([(2, T + ["--model-dir", "K"])], RELCL_TEST_MPI_KILL="1:5")
    said = [l for l in (out + err).splitlines() if "rank 1" in l and host in l and "signal 9" in l]
    check(rc != 0 and said, "a killed rank ends the job with a line naming rank 1 and %s" % host,
          "rc=%d\n%s" % (rc, (out + err)[-3000:]))
    check(os.path.exists(ckpt("K", 4)) and not os.path.exists(ckpt("K", 6)),
          "the checkpoint of step 4 is there, none later")
    rc, out, err = mpirun([(1, T + ["--accum", "2", "--model-dir", "K", "--resume"])])
    check(rc == 0 and "resuming from" in out, "--resume on 1 rank with --accum 2", err[-2000:])
    d = same_tensors(ckpt("K", 6), ckpt("M2", 6))
    check(d == "", "... continues to the bits of the 2-rank run never killed", d)

    # ---- two OpenCL platforms: PoCL and Oclgrind's simulated device ----
    small = ["--config", "tiny.yaml"] + data + [
        "--spm-model", "V/spm.model", "--max-steps", "2", "--valid-every", "2", "--hash-every",
        "1", "--log-every", "1", "--d-model", "8", "--d-ff", "16", "--batch-tokens", "40",
        "--max-length", "12", "--model-dir", "X"]
    rc, out, err = mpirun([(1, [EXE] + small), (1, ["oclgrind", EXE] + small)], timeout=1800)
    devs = [l for l in out.splitlines() if l.startswith("rank ") and " on %s: " % host in l]
    check(rc == 0 and len(devs) == 2 and "Portable Computing Language" in devs[0] and
          "Oclgrind" in devs[1] and os.path.exists(ckpt("X", 2)),
          "one rank on PoCL and one on Oclgrind train 2 steps together (%s)" %
          "; ".join(devs), "rc=%d\n     %s\n%s\n%s" % (rc, crash(err), out[-1500:], err[-3000:]))

    shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (test_train.passed, test_train.failed))
    return 0 if test_train.failed == 0 and test_train.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
