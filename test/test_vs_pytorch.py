#!/usr/bin/env python3
"""bench/vs-pytorch.py and bench/torch_transformer.py from outside, on a tiny model (1+1
layers, d_model 32) and the first 3000 pairs of the bundled corpus, so that it runs in about a
minute. No timing is asserted (the machine is shared); what is checked:
  - one --quick run (both positions, 16 steps) exits 0 and gives numbers: rates positive,
    the ratio = relcl's median / PyTorch's, the table printed;
  - relcl's and PyTorch's parameter counts agree (relative and absolute) and every step
    trained the same number of target tokens (the same batches);
  - the PyTorch model is relcl's model: from relcl's checkpoint of step 16 it redoes relcl's
    step 17 without dropout to the same loss and gradient norm (within 3e-5 relative); from
    its own initial values its first loss is about ln(vocab), and its loss follows relcl's
    step for step (same batches, same schedule; only the initial values and the dropout
    masks differ);
  - the note on OpenBLAS kernels older than the CPU (blas_core_note: which cores and flags
    call for one and which OPENBLAS_CORETYPE it names; the run prints it where this CPU does);
  - a wrong expected parameter count, a missing relcl-train and bad flags fail as documented.
Exits 77 when /usr/bin/python3 has no torch (test/meson.build registers the test only where
it has, since test.sh counts a skip as a failure).

usage: test_vs_pytorch.py PATH/TO/relcl-train SOURCE_ROOT
Prints one line per check and ends with "N passed, M failed".
"""
import importlib.util
import json
import lzma
import math
import os
import subprocess
import sys
import tempfile

passed = failed = 0
TORCH_PY = "/usr/bin/python3"
STEPS = 16  # of the main run: enough for the loss to fall, few for the ASan build's sake


def check(ok, what, detail=""):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not detail else "\n     " + detail))
    sys.stdout.flush()
    if ok:
        passed += 1
    else:
        failed += 1


def blas_note_checks(root):
    """vs-pytorch.py's note on OpenBLAS kernels older than the CPU (no torch needed)"""
    spec = importlib.util.spec_from_file_location(
        "vs_pytorch", os.path.join(root, "bench", "vs-pytorch.py"))
    vs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vs)
    note = vs.blas_core_note
    n = note("Prescott", {"sse3", "avx2", "avx512f", "avx512_bf16"})
    check(n is not None and "OPENBLAS_CORETYPE=Cooperlake" in n and "Prescott" in n,
          "OpenBLAS's Prescott kernels on an AVX-512 CPU with bf16: a note naming Cooperlake", n)
    n = note("Prescott", {"sse3", "avx2", "avx512f"})
    check(n is not None and "OPENBLAS_CORETYPE=SkylakeX" in n,
          "... without bf16: SkylakeX", n)
    n = note("Nehalem", {"sse3", "avx2"})
    check(n is not None and "OPENBLAS_CORETYPE=Haswell" in n, "Nehalem's on an AVX2 CPU: Haswell",
          n)
    for core, flags in (("Haswell", {"avx2"}), ("SkylakeX", {"avx2", "avx512f"}),
                        ("Prescott", {"sse3"}), (None, {"avx2"}), ("Zen", {"avx2"})):
        check(note(core, flags) is None, "no note for %s kernels on %s" % (core, sorted(flags)))
    return vs


def main():
    train, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    vs = blas_note_checks(root)
    if subprocess.run([TORCH_PY, "-c", "import torch"], capture_output=True).returncode != 0:
        print("SKIP: %s cannot import torch" % TORCH_PY)
        sys.exit(77)
    driver = os.path.join(root, "bench", "vs-pytorch.py")
    torch_py = os.path.join(root, "bench", "torch_transformer.py")
    with tempfile.TemporaryDirectory() as tmp:
        data = {}
        for lang in ("en", "fr"):
            with lzma.open(os.path.join(root, "data", "gettext-en-fr", "train.%s.xz" % lang)) as f:
                lines = f.read().split(b"\n")[:3000]
            data[lang] = os.path.join(tmp, "s." + lang)
            with open(data[lang], "wb") as f:
                f.write(b"\n".join(lines) + b"\n")
        tiny = ["--train-src", data["en"], "--train-tgt", data["fr"], "--layers", "1",
                "--d-model", "32", "--heads", "2", "--d-ff", "64", "--max-relative-position", "4",
                "--batch-tokens", "600"]
        out = os.path.join(tmp, "out.json")
        # lr warm-up over the run's steps: the loss moves within it; the SentencePiece model is
        # trained by the first relcl run and must outlive its run's directory
        r = subprocess.run([TORCH_PY, driver, "--quick", "--steps", str(STEPS - 1),
                            "--warmup", str(STEPS),
                            "--vocab-size", "400", "--relcl-train", train, "--json", out] + tiny,
                           capture_output=True, text=True, timeout=900)
        check(r.returncode == 0, "vs-pytorch.py --quick exits 0",
              (r.stdout + r.stderr)[-3000:])
        if r.returncode != 0:
            return
        check("| relcl (" in r.stdout and "| PyTorch " in r.stdout and "device: " in r.stdout
              and "load (1, 5, 15 min): " in r.stdout, "the table, device and load printed",
              r.stdout[-2000:])
        with open(out) as f:
            j = json.load(f)
        want = None if j["openblas_coretype_env"] else vs.blas_core_note(j["openblas_core"],
                                                                         vs.cpu_flags())
        check(want in r.stdout if want else "note: OpenBLAS runs" not in r.stdout,
              "the OpenBLAS note printed where this CPU calls for it (%s kernels: %s)"
              % (j["openblas_core"], "a note" if want else "none"))
        for pos in ("relative", "absolute"):
            s = j["summary"][pos]
            rl, tr = s["relcl"]["median"], s["torch"]["median"]
            check(rl > 0 and tr > 0 and math.isfinite(rl) and math.isfinite(tr),
                  "%s: rates positive (relcl %.0f, PyTorch %.0f tok/s)" % (pos, rl, tr))
            check(abs(j["ratio"][pos] - rl / tr) <= 1e-9 * j["ratio"][pos],
                  "%s: ratio = relcl / PyTorch = %.3f" % (pos, j["ratio"][pos]))
            relcl, torch = j["runs"][pos]["relcl"][0], j["runs"][pos]["torch"][0]
            check(relcl["params"] == torch["params"] and relcl["tensors"] == torch["tensors"],
                  "%s: %d parameters in %d tensors in both (PyTorch %d in %d)"
                  % (pos, relcl["params"], relcl["tensors"], torch["params"], torch["tensors"]))
            tk = [x["tokens"] for x in relcl["steps"]]
            check(len(tk) == STEPS and tk == [x["tokens"] for x in torch["steps"]],
                  "%s: %d steps, the same target tokens in each (%d in all)"
                  % (pos, STEPS, sum(tk)))
            c = torch.get("check", {})
            check(c.get("step") == STEPS + 1 and c.get("relcl_gnorm") == relcl["check"]["gnorm"]
                  and abs(c["gnorm"] - c["relcl_gnorm"]) <= 3e-5 * c["relcl_gnorm"]
                  and abs(c["loss"] - c["relcl_loss"]) <= 3e-5 * c["relcl_loss"],
                  "%s: relcl's step %d redone in PyTorch from relcl's checkpoint: loss %s and "
                  "gradient norm %s (relcl %s, %s)" % (pos, STEPS + 1, c.get("loss"),
                                                      c.get("gnorm"), c.get("relcl_loss"),
                                                      c.get("relcl_gnorm")))
            a = [x["loss"] for x in relcl["steps"]]
            b = [x["loss"] for x in torch["steps"]]
            lnv = math.log(torch["vocab"])
            # tied embeddings, unit-variance outputs: logits of variance ~1 add ~0.5 to ln V
            check(lnv - 0.2 <= b[0] <= lnv + 1.0 and lnv - 0.2 <= a[0] <= lnv + 1.0,
                  "%s: first loss about ln(vocab) = %.3f (relcl %.3f, PyTorch %.3f)"
                  % (pos, lnv, a[0], b[0]))
            check(sum(b[-5:]) / 5 < b[0] - 0.8 and sum(a[-5:]) / 5 < a[0] - 0.8,
                  "%s: the loss falls (relcl %.3f -> %.3f, PyTorch %.3f -> %.3f)"
                  % (pos, a[0], sum(a[-5:]) / 5, b[0], sum(b[-5:]) / 5))
            # Other initial values and dropout masks: measured here a mean gap of ~0.03 and
            # steps within 0.2 of each other; a model that differs (no label smoothing, no
            # sqrt(d_model) scale, another batch) moves the curve by more than 0.1.
            gap = [abs(x - y) for x, y in zip(a, b)]
            mean = sum(gap[5:]) / len(gap[5:])
            check(mean <= 0.1 and max(gap) <= 0.35,
                  "%s: PyTorch's loss follows relcl's (mean gap %.3f after step 5, max %.3f)"
                  % (pos, mean, max(gap)), "relcl %s\n     torch %s" % (a, b))
        keep = os.path.join(tmp, "runs")
        r = subprocess.run([TORCH_PY, driver, "--quick", "--no-absolute", "--steps", "1",
                            "--vocab-size", "400", "--relcl-train", train, "--keep", keep] + tiny,
                           capture_output=True, text=True, timeout=900)
        spm = os.path.join(keep, "spm.model")
        check(r.returncode == 0 and os.path.isfile(spm) and
              os.path.isfile(os.path.join(keep, "relcl-relative-1", "ckpt-00000003.safetensors")),
              "--keep DIR keeps the runs (spm.model, checkpoints)", (r.stdout + r.stderr)[-2000:])
        n = j["runs"]["relative"]["relcl"][0]["params"]
        r = subprocess.run([TORCH_PY, torch_py, "--count-only", "--spm-model", spm,
                            "--expect-params", str(n + 16)] + tiny, capture_output=True,
                           text=True, timeout=300)
        check(r.returncode == 1 and "differs from relcl's" in r.stderr,
              "torch_transformer.py: another parameter count than relcl's fails",
              "exit %d: %s" % (r.returncode, r.stderr[-500:]))
        r = subprocess.run([TORCH_PY, driver, "--relcl-train", os.path.join(tmp, "nothing")],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and r.stderr.startswith("vs-pytorch: no relcl build")
              and r.stderr.count("\n") == 1, "a missing relcl-train: one line, exit 1",
              "exit %d: %r" % (r.returncode, r.stderr))
        r = subprocess.run([TORCH_PY, driver, "--steps", "0"], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 2, "--steps 0: exit 2", "exit %d" % r.returncode)


if __name__ == "__main__":
    main()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed or passed == 0 else 0)
