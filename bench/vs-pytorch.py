#!/usr/bin/python3
"""relcl against PyTorch on one machine: the same Transformer, the same batches, target
tokens per second in the steady state (issue 8's table).

Trains relcl (build/apps/relcl-train on the default OpenCL device, its own log's tok/s) and
PyTorch (bench/torch_transformer.py, /usr/bin/python3's torch, 2 threads) in alternating
rounds: relcl relative, PyTorch relative, relcl absolute, PyTorch absolute, then again. Each
round is a fresh run of --warmup-steps + --steps updates from step 1, so every round of
either system trains on the same batches; a round's rate is the target tokens of its last
--steps updates over their time. Prints the table (median and range over the rounds, the
ratio relcl / PyTorch), with the device, the CPU, the load and the CLBlast tuning relcl ran.

Checked on the way, fatal when they differ: the parameter count (relcl-train's "N parameters
in M tensors" against the PyTorch model's, counted the same way), the corpus statistics,
every step's target token count (the same batches), and in the first round of each kind of
positions one step redone by PyTorch from relcl's checkpoint without dropout (the same loss
and gradient norm: the same model).

usage: bench/vs-pytorch.py [--quick] [--rounds N] [--warmup-steps W] [--steps N]
       [--no-absolute] [--json FILE] [--keep DIR] [model and data flags]
Exit 0 with the table, 1 with one line on stderr when something is missing or a run fails,
2 on bad flags.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_PY = "/usr/bin/python3"  # Debian's python3-torch lives there, not in a pyenv or venv


def die(msg):
    print("vs-pytorch: " + msg, file=sys.stderr)
    sys.exit(1)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = os.path.join(ROOT, "data", "gettext-en-fr")
    ap.add_argument("--relcl-train", default=os.path.join(ROOT, "build", "apps", "relcl-train"))
    ap.add_argument("--train-src", default=os.path.join(d, "train.en.xz"))
    ap.add_argument("--train-tgt", default=os.path.join(d, "train.fr.xz"))
    ap.add_argument("--spm-model", help="default: the first relcl run trains one")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--max-relative-position", type=int, default=16)
    ap.add_argument("--batch-tokens", type=int, default=4000)
    ap.add_argument("--warmup", type=int, default=4000, help="learning-rate warm-up steps")
    ap.add_argument("--rounds", type=int, help="[3; --quick: 1]")
    ap.add_argument("--warmup-steps", type=int,
                    help="first updates of a round left out of its rate [3; --quick: 1]")
    ap.add_argument("--steps", type=int, help="updates a round's rate is over [10; --quick: 2]")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's threads")
    ap.add_argument("--no-absolute", action="store_true",
                    help="relative positions only (half the time)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 round, 1 warm-up step, 2 timed steps (unless given)")
    ap.add_argument("--json", help="write every number here as JSON")
    ap.add_argument("--keep", metavar="DIR", help="keep the runs' logs and models in DIR")
    a = ap.parse_args(argv)
    for name in ("relcl_train", "train_src", "train_tgt", "spm_model", "json", "keep"):
        if getattr(a, name):  # the runs start in the source root
            setattr(a, name, os.path.abspath(getattr(a, name)))
    for name, full, quick in (("rounds", 3, 1), ("warmup_steps", 3, 1), ("steps", 10, 2)):
        if getattr(a, name) is None:
            setattr(a, name, quick if a.quick else full)
    if a.rounds < 1 or a.steps < 1 or a.warmup_steps < 0 or a.threads < 1:
        ap.error("--rounds, --steps and --threads must be >= 1, --warmup-steps >= 0")
    return a


def check_prerequisites(a):
    if not os.access(a.relcl_train, os.X_OK):
        die("no relcl build: %s is missing (meson setup build && meson compile -C build)"
            % a.relcl_train)
    if not os.access(TORCH_PY, os.X_OK) or subprocess.run(
            [TORCH_PY, "-c", "import torch"], capture_output=True).returncode != 0:
        die("%s cannot import torch: source scripts/deps.sh && relcl_install_torch "
            "(Debian's python3-torch, about 1 GB)" % TORCH_PY)
    for tool in ("spm_encode", "spm_export_vocab"):
        if shutil.which(tool) is None:
            die("%s not found: install Debian's sentencepiece (scripts/deps.sh)" % tool)
    for f in (a.train_src, a.train_tgt) + ((a.spm_model,) if a.spm_model else ()):
        if not os.path.isfile(f):
            die("%s: no such file" % f)


def model_flags(a, positions):
    return ["--layers", str(a.layers), "--d-model", str(a.d_model), "--heads", str(a.heads),
            "--d-ff", str(a.d_ff), "--max-relative-position", str(a.max_relative_position),
            "--positions", positions, "--batch-tokens", str(a.batch_tokens),
            "--warmup", str(a.warmup), "--train-src", a.train_src, "--train-tgt", a.train_tgt]


def run(cmd, log, what):
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    text = open(log).read()
    if r.returncode != 0:
        tail = [l for l in text.splitlines() if l.strip()][-1:] or ["(no output)"]
        die("%s failed (exit %d): %s [log: %s]" % (what, r.returncode, tail[0], log))
    return text


def find(pattern, text, what, log):
    m = re.search(pattern, text, re.M)
    if m is None:
        die("%s: no %r line in %s" % (what, pattern, log))
    return m


CORPUS = (r"^train: .*: (\d+) lines, (\d+) pairs kept, (\d+) empty skipped, (\d+) too long "
          r"\(> \d+ subwords\) skipped; (\d+) \+ (\d+) subwords")
CORPUS_KEYS = ("lines", "pairs", "empty", "too_long", "src_tokens", "tgt_tokens")


def relcl_round(a, work, tag, positions, spm, check):
    mdir = os.path.join(work, "relcl-" + tag)
    shutil.rmtree(mdir, ignore_errors=True)  # relcl-train would resume from a kept run
    jlog = mdir + ".jsonl"
    last = a.warmup_steps + a.steps

    def command(steps, jlog):
        cmd = [a.relcl_train] + model_flags(a, positions) + [
            "--preset", "base", "--max-steps", str(steps), "--log-every", "1",
            "--valid-every", "1000000000", "--keep", "2", "--log-json", jlog, "--model-dir", mdir]
        return cmd + (["--spm-model", spm] if spm else ["--vocab-size", str(a.vocab_size)])

    log = mdir + ".log"
    what = "relcl-train (%s, %s)" % (positions, tag)
    text = run(command(last, jlog), log, what)
    m = find(r"^model: .*; (\d+) parameters in (\d+) tensors$", text, what, log)
    out = {"params": int(m.group(1)), "tensors": int(m.group(2)),
           "device": find(r"^device: (.*)$", text, what, log).group(1),
           "tuning": find(r"^CLBlast tuning: (.*)$", text, what, log).group(1),
           "corpus": dict(zip(CORPUS_KEYS, map(int, find(CORPUS, text, what, log).groups()))),
           "batches_per_epoch": int(find(r"^batches: (\d+) per epoch", text, what, log).group(1)),
           "spm": spm, "steps": [], "model_dir": mdir}
    with open(jlog) as f:
        for line in f:
            o = json.loads(line)
            if o.get("type") == "train":
                out["steps"].append({"step": o["step"], "tokens": o["tokens"], "loss": o["loss"],
                                     "seconds": o["tokens"] / o["tokens_per_s"]})
    if spm is None:  # trained by this run: kept beside the runs, whose directories go
        out["spm"] = os.path.join(work, "spm.model")
        shutil.copyfile(os.path.join(mdir, "spm.model"), out["spm"])
    if [s["step"] for s in out["steps"]] != list(range(1, last + 1)):
        die("%s: its --log-json has steps %s, not 1..%d" % (what, [s["step"] for s in out["steps"]],
                                                            last))
    if check:
        # one more step from the checkpoint, without dropout: PyTorch redoes it from the same
        # checkpoint (torch_transformer.py --check-checkpoint) and must find its loss and
        # gradient norm
        ck = os.path.join(mdir, "ckpt-%08d.safetensors" % last)
        spm = out["spm"]
        run(command(last + 1, jlog + ".check") + ["--resume", "--dropout", "0"],
            mdir + ".check.log", what + " --resume")
        with open(jlog + ".check") as f:
            o = [json.loads(l) for l in f if '"train"' in l][-1:]
        if not os.path.isfile(ck) or not o or o[0]["step"] != last + 1:
            die("%s --resume: no step %d from %s [log: %s.check.log]" % (what, last + 1, ck, mdir))
        out["check"] = {"checkpoint": ck, "step": last + 1, "loss": o[0]["loss"],
                        "gnorm": o[0]["gnorm"]}
    return out


def relcl_cleanup(a, rl):
    if not a.keep:
        shutil.rmtree(rl["model_dir"], ignore_errors=True)  # checkpoints: ~100 MB a run


def torch_round(a, work, tag, positions, relcl):
    base = os.path.join(work, "torch-" + tag)
    cmd = [TORCH_PY, os.path.join(HERE, "torch_transformer.py")] + model_flags(a, positions) + [
        "--spm-model", relcl["spm"], "--steps", str(a.warmup_steps + a.steps),
        "--warmup-steps", str(a.warmup_steps), "--threads", str(a.threads),
        "--expect-params", str(relcl["params"]), "--expect-tensors", str(relcl["tensors"]),
        "--json", base + ".json"]
    c = relcl.get("check")
    if c:
        cmd += ["--check-checkpoint", c["checkpoint"], "--check-step", str(c["step"]),
                "--expect-loss", repr(c["loss"]), "--expect-gnorm", repr(c["gnorm"])]
    what = "PyTorch (%s, %s)" % (positions, tag)
    run(cmd, base + ".log", what)
    with open(base + ".json") as f:
        out = json.load(f)
    if out["corpus"] != relcl["corpus"] or out["batches_per_epoch"] != relcl["batches_per_epoch"]:
        die("%s read another corpus than relcl: %s, %d batches an epoch; relcl: %s, %d"
            % (what, out["corpus"], out["batches_per_epoch"], relcl["corpus"],
               relcl["batches_per_epoch"]))
    mine = [s["tokens"] for s in out["steps"]]
    theirs = [s["tokens"] for s in relcl["steps"]]
    if mine != theirs:
        die("%s trained other batches than relcl: target tokens per step %s, relcl %s"
            % (what, mine, theirs))
    return out


def rate(steps, warmup):
    timed = steps[warmup:]
    return sum(s["tokens"] for s in timed) / sum(s["seconds"] for s in timed)


def summary(rates):
    if not rates:
        return None
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates),
            "rounds": rates}


def fmt(s):
    if s is None:
        return ""
    if len(s["rounds"]) == 1:
        return "%.0f" % s["median"]
    return "%.0f (%.0f..%.0f)" % (s["median"], s["min"], s["max"])


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.*)$", out, re.M)
        n = re.search(r"^CPU\(s\):\s*(\d+)", out, re.M)
        return "%s, %s CPUs" % (m.group(1) if m else "?", n.group(1) if n else "?")
    except OSError:
        return "? (no lscpu)"


# OpenBLAS's x86 kernels without AVX2 (its core names, as openblas_get_corename gives them)
PRE_AVX2_CORES = {"katmai", "coppermine", "northwood", "prescott", "banias", "core2", "penryn",
                  "dunnington", "nehalem", "atom", "opteron", "opteron_sse3", "barcelona",
                  "bobcat", "sandybridge", "bulldozer", "piledriver", "steamroller"}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("flags"):
                    return set(ln.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def blas_core_note(core, flags):
    """A note when OpenBLAS runs kernels older than the CPU's instruction set: a CPU newer
    than the OpenBLAS build falls back to Prescott's SSE3 kernels (Debian's 0.3.21 on a Xeon
    of CPUID model 207, session 35: PyTorch 2.46 times as slow as with its Cooperlake kernels).
    None otherwise, and where OPENBLAS_CORETYPE decided (the caller's choice)."""
    if core is None or core.lower() not in PRE_AVX2_CORES:
        return None
    best = ("Cooperlake" if "avx512_bf16" in flags else "SkylakeX" if "avx512f" in flags
            else "Haswell" if "avx2" in flags else None)
    if best is None:
        return None
    return ("note: OpenBLAS runs its %s kernels (no AVX2) on a CPU with %s: it does not know "
            "this CPU, and PyTorch runs slower here than it could; OPENBLAS_CORETYPE=%s gives "
            "it the kernels of the CPU's instruction set (say which the table used)"
            % (core, "AVX2" if best == "Haswell" else "AVX-512", best))


def shown(path):
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def load():
    return "%.2f %.2f %.2f" % os.getloadavg()


def main(argv):
    a = parse_args(argv)
    check_prerequisites(a)
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
        work = a.keep
    else:
        work = tempfile.mkdtemp(prefix="relcl-vs-pytorch-")
    positions = ["relative"] + ([] if a.no_absolute else ["absolute"])
    res = {p: {"relcl": [], "torch": []} for p in positions}
    load_before, t0 = load(), time.time()
    spm = a.spm_model
    lo, hi = a.warmup_steps + 1, a.warmup_steps + a.steps
    for r in range(1, a.rounds + 1):
        for p in positions:
            tag = "%s-%d" % (p, r)
            rl = relcl_round(a, work, tag, p, spm, check=r == 1)
            spm = rl["spm"]
            res[p]["relcl"].append(rl)
            print("round %d/%d relcl %s: %.0f tok/s (steps %d-%d; %d parameters)"
                  % (r, a.rounds, p, rate(rl["steps"], a.warmup_steps), lo, hi,
                     rl["params"]), flush=True)
            tr = torch_round(a, work, tag, p, rl)
            relcl_cleanup(a, rl)
            res[p]["torch"].append(tr)
            print("round %d/%d PyTorch %s: %.0f tok/s (same batches, same %d parameters)"
                  % (r, a.rounds, p, rate(tr["steps"], a.warmup_steps), tr["params"]),
                  flush=True)
    if not a.keep:  # kept after a failure: the message names a log in it
        shutil.rmtree(work, ignore_errors=True)
    load_after = load()
    first = res["relative"]["relcl"][0]
    tr0 = res["relative"]["torch"][0]
    S = {p: {k: summary([rate(x["steps"], a.warmup_steps) for x in res[p][k]])
             for k in ("relcl", "torch")} for p in positions}
    ratio = {p: S[p]["relcl"]["median"] / S[p]["torch"]["median"] for p in positions}
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    model = ("d_model %d, %d heads, d_ff %d, %d+%d layers, vocab %d, k = %d, %d-token batches; "
             "%d parameters (relative)" % (a.d_model, a.heads, a.d_ff, a.layers, a.layers,
                                           tr0["vocab"], a.max_relative_position, a.batch_tokens,
                                           first["params"]))
    span = "%d round%s of steps %d-%d" % (a.rounds, "s" if a.rounds > 1 else "", lo, hi)
    print()
    print("model: " + model)
    print("data: %s + %s (%d pairs)" % (shown(a.train_src), shown(a.train_tgt),
                                         first["corpus"]["pairs"]))
    print("device: %s; CPU: %s" % (first["device"], cpu_model()))
    print("relcl's CLBlast tuning: %s" % first["tuning"])
    core = tr0.get("openblas_core")
    forced = tr0.get("openblas_coretype_env")
    print("PyTorch %s, %d threads, BLAS %s%s" % (
        tr0["torch"], tr0["threads"], blas,
        "" if core is None else ", OpenBLAS kernels for %s (%s)" % (
            core, "forced by OPENBLAS_CORETYPE=%s" % forced if forced else "its own choice")))
    note = None if forced else blas_core_note(core, cpu_flags())
    if note:
        print(note)
    if forced:
        print("note: OPENBLAS_CORETYPE=%s is set: PyTorch runs that CPU's kernels, not the ones "
              "OpenBLAS picks for this one; unset it for what a user gets" % forced)
    print("load (1, 5, 15 min): %s before, %s after; %.0f s in all" % (load_before, load_after,
                                                                      time.time() - t0))
    print()
    print("| system (same machine, one run) | relative tok/s | absolute tok/s | ratio to PyTorch |")
    print("|---|---|---|---|")
    ab = "absolute" in positions
    print("| PyTorch %s (%d threads), %s | %s | %s | 1.00 |"
          % (tr0["torch"], tr0["threads"], span, fmt(S["relative"]["torch"]),
             fmt(S["absolute"]["torch"]) if ab else "", ))
    print("| relcl (%s), %s | %s | %s | **%.2f**%s |"
          % (first["tuning"], span, fmt(S["relative"]["relcl"]),
             fmt(S["absolute"]["relcl"]) if ab else "", ratio["relative"],
             " (absolute %.2f)" % ratio["absolute"] if ab else ""))
    print()
    print("tok/s: target tokens per second, median (min..max) over the rounds; ratio: relcl's "
          "median / PyTorch's, above 1 when relcl is faster")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": model, "device": first["device"], "cpu": cpu_model(),
                       "tuning": first["tuning"], "torch": tr0["torch"],
                       "threads": tr0["threads"], "blas": blas, "openblas_core": core,
                       "openblas_coretype_env": forced, "load_before": load_before,
                       "load_after": load_after, "rounds": a.rounds,
                       "warmup_steps": a.warmup_steps, "steps": a.steps, "summary": S,
                       "ratio": ratio, "runs": res}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
