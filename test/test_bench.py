#!/usr/bin/env python3
"""relcl-bench from outside: the --quick smoke run and its flags. No timing is asserted
(the machine is shared and noisy); what is checked is that every part ran and that its
figures are consistent with one another: rates positive, the overhead computed from the two
rates, the breakdown's parts adding up to the device time, relative GEMMs only where there
are relative positions, the scaling sweep's lengths and its PNG plots, bad flags refused;
--compare's second side (the same kernels from a copy: every entry has its twin; ratios
computed from the sides' own figures; a bad B environment named).

usage: test_bench.py PATH/TO/relcl-bench
Prints one line per check and ends with "N passed, M failed".
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not detail else "\n     " + detail))
    sys.stdout.flush()
    if ok:
        passed += 1
    else:
        failed += 1


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def run_json(bench, args, tmp, what):
    """relcl-bench ARGS --json: exit 0 and one JSON object, else None"""
    r = subprocess.run([bench] + args, cwd=tmp, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "%s exits 0" % what, r.stderr[-2000:])
    try:
        out = json.loads(r.stdout)
    except ValueError as e:
        check(False, "%s prints one JSON object" % what, "%s: %r" % (e, r.stdout[:500]))
        return None
    check(True, "%s prints one JSON object" % what)
    return out


def check_one_line(bench, args, tmp, code, name):
    """relcl-bench ARGS fails with exit status CODE and one line that names NAME"""
    r = subprocess.run([bench] + args, cwd=tmp, capture_output=True, text=True, timeout=300)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == code and len(lines) == 1 and name in lines[0],
          "%s: exit %d with one line naming %s" % (" ".join(args), code, name),
          "exit %d: %r" % (r.returncode, r.stderr))


def main():
    bench = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        plot = os.path.join(tmp, "scaling")
        out = run_json(bench, ["--quick", "--json", "--plot", plot], tmp, "--quick --json")
        if out is None:
            return
        for key in ("device", "absolute_steps_per_s", "relative_steps_per_s", "overhead_percent",
                    "variants", "limits", "scaling", "tuning"):
            check(key in out, "JSON has %s" % key)
        a, rel = out["absolute_steps_per_s"], out["relative_steps_per_s"]
        check(a > 0 and rel > 0 and math.isfinite(a) and math.isfinite(rel),
              "step rates positive (absolute %.3f, relative %.3f)" % (a, rel))
        # overhead = the decrease in steps/s: 1 - relative / absolute
        check(close(out["overhead_percent"], 100 * (1 - rel / a), 1e-6),
              "overhead_percent = 100 (1 - relative / absolute) = %.2f" % out["overhead_percent"])
        v = out["variants"]
        check(len(v) == 2 and v[0]["positions"] == "absolute" and v[1]["positions"] == "relative",
              "two variants by default: absolute, relative")
        for x in v:
            runs = x["steps_per_s_runs"]
            check(len(runs) == 2 and x["steps_per_s_min"] <= x["steps_per_s"] <= x["steps_per_s_max"]
                  and close(x["target_tokens_per_s"], x["steps_per_s"] * out["target_tokens"], 1e-6),
                  "%s: median within min..max over 2 runs, tokens/s = steps/s x %d tokens"
                  % (x["name"], out["target_tokens"]))
            parts = x["breakdown_ms"]
            check(close(sum(parts.values()), x["device_busy_ms"], 1e-6) and x["device_busy_ms"] > 0,
                  "%s: the parts add up to the device busy time (%.1f ms)" % (x["name"], x["device_busy_ms"]))
            check(close(x["host_gap_ms"], x["wall_profiled_ms"] - x["device_busy_ms"], 1e-6) and
                  x["host_gap_ms"] >= 0 and x["device_span_ms"] >= 0.999 * x["device_busy_ms"],
                  "%s: host gap = profiled wall - device busy >= 0 (%.1f ms); span >= busy"
                  % (x["name"], x["host_gap_ms"]))
        check(v[0]["breakdown_ms"]["relative GEMMs"] == 0 and v[1]["breakdown_ms"]["relative GEMMs"] > 0,
              "relative GEMMs only in the relative model")
        lim = out["limits"]
        check(lim["copy_gb_per_s"] > 0 and lim["fma_gflop_per_s"] > 0 and lim["sgemm_gflop_per_s"] > 0,
              "device limits measured (copy, FMA, SGEMM)")
        check(lim.get("copy_beside_step_gb_per_s", 0) > 0,
              "the copy measured beside the step too (%.1f GB/s; alone %.1f)"
              % (lim.get("copy_beside_step_gb_per_s", 0), lim["copy_gb_per_s"]))
        sg = lim.get("sgemm_beside_step_gflop_per_s", 0)
        check(sg > 0 and all(close(e["fraction_of_sgemm_peak"], e["gflop_per_s"] / sg, 1e-6)
                             for e in lim["relative_step_entries"] if "gflop_per_s" in e),
              "GEMM shapes rated against the SGEMM beside the step (%.1f GFLOP/s; alone %.1f)"
              % (sg, lim["sgemm_gflop_per_s"]))
        check(lim["fma_vector_width"] in (4, 8, 16),
              "the FMA peak names the vector width it came from (%s)" % lim.get("fma_vector_width"))
        ent = lim["relative_step_entries"]
        gemms = [e for e in ent if "gflop_per_s" in e]
        check(any(e["part"] == "relative GEMMs" for e in gemms) and
              all(close(e["fraction_of_fma_peak"], e["gflop_per_s"] / lim["fma_gflop_per_s"], 1e-6)
                  for e in gemms),
              "per-shape GEMM rates and their fraction of the FMA peak (%d shapes)" % len(gemms))
        # the memory roof: a product's least traffic (operands read once, result written
        # once) at the copy bandwidth, as a fraction of the SGEMM beside the step, at most 1
        products = [e for e in gemms if e["part"] in ("content GEMMs", "relative GEMMs")]
        bad = []
        for e in products:
            shape = re.search(r"(\d+)x(\d+)x(\d+)(?: x(\d+))?$", e["name"])
            if shape is None or "sgemm_fraction_memory_roof" not in e:
                bad.append("%s: no shape or no roof" % e["name"])
                continue
            m, n, k = (float(shape.group(i)) for i in (1, 2, 3))
            b = float(shape.group(4) or 1)
            want = min(1.0, 2 * m * n * k * b / (4 * (m * k + k * n + m * n) * b)
                       * lim["copy_beside_step_gb_per_s"] / sg)
            if not close(e["sgemm_fraction_memory_roof"], want, 1e-6):
                bad.append("%s: %g, want %g" % (e["name"], e["sgemm_fraction_memory_roof"], want))
        check(len(products) > 0 and not bad,
              "every product's memory roof = min(1, its flops per byte of least traffic x the "
              "copy bandwidth / the SGEMM) (%d products)" % len(products), "; ".join(bad))
        others = [e["name"] for e in gemms
                  if e not in products and "sgemm_fraction_memory_roof" in e]
        check(not others, "no memory roof for the fused attention kernels (%d)"
              % (len(gemms) - len(products)), ", ".join(others))
        rated = [e for e in ent if "gb_per_s_least_traffic" in e]
        # attention's rows; on a CPU attention in one kernel a head (RELCL_ATTN), rated as
        # the product of all its multiply-adds
        fused = [e for e in gemms if e["name"].startswith("attn_fwd_cpu ")]
        check(len(fused) >= 1 or "attn_fwd_rows" in {e["name"] for e in rated},
              "attention's rows rated by their traffic, or its fused kernel as a product")
        check({"ln_fwd", "adam_update"} <= {e["name"] for e in rated} and
              all(close(e["fraction_of_copy_peak"],
                        e["gb_per_s_least_traffic"] / lim["copy_gb_per_s"], 1e-6) for e in rated),
              "kernels rated against the copy bandwidth (%d kernels)" % len(rated))
        sc = out["scaling"]
        check([p["n"] for p in sc] == [32, 64], "scaling at n = 32, 64 with --quick")
        check(all(0 < p["extra_bytes_relative_k"] < p["naive_n_n_d_bytes"] for p in sc),
              "extra memory of the relative terms positive and below n*n*d")
        for suffix in ("time", "memory"):
            path = "%s-%s.png" % (plot, suffix)
            ok = os.path.exists(path)
            if ok:
                with open(path, "rb") as f:
                    ok = f.read(8) == b"\x89PNG\r\n\x1a\n"
            check(ok, "plot %s-%s.png written as a PNG" % (os.path.basename(plot), suffix))
        check("applies" in out["tuning"], "tuning: says which applies (%s)" % out["tuning"].get("applies"))

        # usage errors: exit 2, one line naming the flag
        for args, name in ((["--reps", "0"], "--reps"), (["--preset", "huge"], "--preset"),
                           (["--bogus"], "--bogus"), (["--length"], "--length")):
            check_one_line(bench, args, tmp, 2, name)
        r = subprocess.run([bench, "--help"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and "--quick" in r.stdout and "--compare" in r.stdout, "--help")
        check_compare(bench, tmp)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def check_ops(out):
    """--compare's op-by-op part: the model's linear layers and attention calls, A and B in
    turn; each ratio is the median of the repetitions' ratios"""
    ops = out.get("compare", {}).get("ops")
    check(ops is not None and ops["reps"] == 3, "compare: op by op, 3 repetitions with --quick")
    if ops is None:
        return
    a, b = ops["a_busy_ms_runs"], ops["b_busy_ms_runs"]
    check(len(a) == len(b) == 3 and min(a + b) > 0 and
          close(ops["a_busy_ms"], median(a), 1e-9) and close(ops["b_busy_ms"], median(b), 1e-9) and
          close(ops["time_ratio_paired_median"], median([y / x for x, y in zip(a, b)]), 1e-9),
          "ops: device time a repetition per side, and B / A the median of the repetitions' ratios",
          str({k: ops[k] for k in ops if k != "entries"}))
    ent = ops["entries"]
    d = int(out["model"].split("d_model ")[1].split(",")[0])
    rows = int(out["target_tokens"])
    names = {e["name"] for e in ent}
    # the first linear layer's forward (x W^T: rows x 3d x d) and attention's row kernels
    want = ["%dx%dx%d" % (rows, 3 * d, d)] + (
        ["attn_fwd_cpu ", "attn_bwd_cpu "] if any(nm.startswith("attn_fwd_cpu ") for nm in names)
        else ["attn_fwd_rows", "attn_bwd_rows", "attn_drop_rows"])
    check(all(any(w in nm for nm in names) for w in want),
          "ops: the linear layers' products and attention's kernels are there (%d entries)" % len(ent),
          "missing %s in %s" % ([w for w in want if not any(w in nm for nm in names)], sorted(names)))
    check(any(e["part"] == "relative GEMMs" for e in ent), "ops: relative self-attention's products")
    check(all(e["a_ms"] > 0 and e["b_ms"] > 0 and
              e["time_ratio_paired_min"] <= e["time_ratio_paired_median"] <= e["time_ratio_paired_max"]
              for e in ent),
          "ops: same kernels: every entry ran on both sides, its ratio within its min..max")


def check_compare(bench, tmp):
    """--compare: side B in a second context. With RELCL_KERNEL_DIR at a copy of the kernels
    B runs the same kernels as A, so every kernel and shape of A's step has a twin in B's."""
    kdir = os.path.join(tmp, "kernels-b")
    shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"), kdir)
    out = run_json(bench, ["--quick", "--json", "--no-scaling", "--no-tuning", "--profile-reps",
                           "2", "--compare", "RELCL_KERNEL_DIR=" + kdir], tmp,
                   "--compare RELCL_KERNEL_DIR=copy")
    if out is None:
        return
    v = out["variants"]
    check([(x["positions"], x["side"]) for x in v] ==
          [("absolute", "A"), ("relative", "A"), ("absolute", "B"), ("relative", "B")] and
          v[2]["name"] == v[0]["name"] + " [B]" and v[3]["name"] == v[1]["name"] + " [B]",
          "--compare: the two variants again on side B, named [B]",
          str([(x["name"], x["side"]) for x in v]))
    check(close(v[3]["decrease_percent"], 100 * (1 - v[3]["steps_per_s"] / v[2]["steps_per_s"]), 1e-6)
          and close(v[1]["decrease_percent"], 100 * (1 - v[1]["steps_per_s"] / v[0]["steps_per_s"]), 1e-6)
          and v[2]["decrease_percent"] == 0,
          "each side's decrease is against its own absolute model")
    c = out.get("compare", {})
    check(c.get("b_environment") == ["RELCL_KERNEL_DIR=" + kdir], "compare names B's environment",
          str(c.get("b_environment")))
    cv = c.get("variants", [])
    ok = len(cv) == 2
    for i, x in enumerate(cv):
        a, b = v[i], v[i + 2]
        ok = ok and x["name"] == a["name"] and close(x["a_steps_per_s"], a["steps_per_s"], 1e-9) \
            and close(x["b_steps_per_s"], b["steps_per_s"], 1e-9) \
            and close(x["time_ratio_medians"], a["steps_per_s"] / b["steps_per_s"], 1e-6) \
            and x["time_ratio_paired_min"] <= x["time_ratio_paired_median"] <= x["time_ratio_paired_max"] \
            and close(x["time_ratio_device"], b["device_busy_ms"] / a["device_busy_ms"], 1e-6)
        # the paired ratios are of steps timed in the same round: their median lies within
        # the ratios of the runs' extremes
        lo = b["steps_per_s_max"] ** -1 / a["steps_per_s_min"] ** -1
        hi = b["steps_per_s_min"] ** -1 / a["steps_per_s_max"] ** -1
        ok = ok and lo * (1 - 1e-9) <= x["time_ratio_paired_median"] <= hi * (1 + 1e-9)
    check(ok, "compare: A and B steps/s are the variants', time ratios B / A from them", str(cv))
    ent = out["limits"]["relative_step_entries"]
    check(out["limits"].get("sgemm_beside_step_gflop_per_s_b", 0) > 0,
          "compare: side B's SGEMM beside its step measured")
    twins = [e for e in ent if "ms_b" in e]
    check(len(ent) > 10 and len(twins) == len(ent) and out["limits"]["relative_step_entries_b_only"] == []
          and all(e["ms_b"] > 0 and close(e["time_ratio_b_over_a"], e["ms_b"] / e["ms"], 1e-6)
                  for e in twins),
          "same kernels: every one of A's %d kernels and shapes has B's time beside it" % len(ent),
          "%d of %d matched, B only: %s" % (len(twins), len(ent),
                                            out["limits"].get("relative_step_entries_b_only")))
    # the table is the mean of the profiled steps: each side's entries add up to its relative
    # model's device time per step
    sum_a = sum(e["ms"] for e in ent)
    sum_b = sum(e.get("ms_b", 0) for e in ent) + \
        sum(e["ms"] for e in out["limits"]["relative_step_entries_b_only"])
    check(close(sum_a, v[1]["device_busy_ms"], 1e-6) and close(sum_b, v[3]["device_busy_ms"], 1e-6),
          "over 2 profiled steps, each side's entries add up to its device time per step "
          "(A %.2f of %.2f ms, B %.2f of %.2f)" % (sum_a, v[1]["device_busy_ms"], sum_b,
                                                   v[3]["device_busy_ms"]))

    check_ops(out)

    # RELCL_WGRAD=copy: where A runs a weight gradient in gemm_cpu_at (AVX-512 CPUs), B runs
    # it in gemm_cpu; the two names are one product (relcl-bench's bench_same_entry), so
    # every entry still has its twin, and B has none of its own
    out = run_json(bench, ["--quick", "--json", "--no-scaling", "--no-tuning",
                           "--profile-reps", "1", "--compare", "RELCL_WGRAD=copy"], tmp,
                   "--compare RELCL_WGRAD=copy")
    if out is not None:
        ent = out["limits"]["relative_step_entries"]
        at = [e["name"] for e in ent if e["name"].startswith("gemm_cpu_at ")]
        check(len(ent) > 10 and all("ms_b" in e for e in ent) and
              out["limits"]["relative_step_entries_b_only"] == [],
              "--compare RELCL_WGRAD=copy: every entry has B's twin (%d in gemm_cpu_at on A)"
              % len(at), "B only: %s" % out["limits"].get("relative_step_entries_b_only"))
        ops = out.get("compare", {}).get("ops", {}).get("entries", [])
        check(len(ops) > 0 and all(e["a_ms"] > 0 and e["b_ms"] > 0 for e in ops),
              "--compare RELCL_WGRAD=copy: op by op, every product ran on both sides")

    # B's context is created with B's environment: a bad value fails there, naming it
    for env, name in (("RELCL_CPU_VEC=5", "RELCL_CPU_VEC=5"),
                      ("RELCL_KERNEL_DIR=" + os.path.join(tmp, "no-such-dir"), "no-such-dir")):
        check_one_line(bench, ["--quick", "--no-scaling", "--no-tuning", "--no-peaks", "--compare",
                               env], tmp, 1, name)
        check_one_line(bench, ["--quick", "--no-scaling", "--no-tuning", "--no-peaks", "--compare",
                               env], tmp, 1, "context (B)")
    # usage errors: exit 2, one line naming --compare
    for args in (["--compare"], ["--compare", "RELCL_CPU_VEC"], ["--compare", "RELCL_TUNING=off"],
                 ["--compare", "POCL_DEBUG=1"],
                 ["--compare", "RELCL_CPU_VEC=4", "--compare", "RELCL_CPU_VEC=8"]):
        check_one_line(bench, args, tmp, 2, "--compare")


if __name__ == "__main__":
    main()
    if passed + failed == 0:  # a run in which nothing was checked must not pass
        check(False, "no check ran")
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
