#!/usr/bin/env python3
"""relcl-tune from outside, on tiny sizes:
  - --quick with a short --budget on 128^3 products writes a tuning file for this device
    (name, driver, platform, device type, at least the Xgemm parameters, the GEMM rate it
    measured), which relcl-info then reports as applied, measured on this device;
  - the candidates (the tuners' result, what applied before, CLBlast's defaults) are timed on
    relcl's own training step (--step-check quick) and the fastest one's parameters are the
    file's;
  - relcl's own K_CHUNK (long products as slices) is timed and the fastest goes with the
    tuners' kernels;
  - the switch between CLBlast's direct and indirect kernels is timed on relcl's own
    middle-sized products and the fastest goes into the file;
  - --if-needed does nothing when that file applies, nor on a CPU (relcl's own kernels);
  - every step-check candidate's products were checked against a sum in double;
    --check FILE passes the file written, and fails in one line, exit 1, for parameters that
    compute wrong products (a GEMMK 1 set CLBlast 1.5 accepts: KREG 1 with VWN 8) and for a
    file that cannot be read;
  - a tuner that dies (a stand-in that aborts like std::bad_alloc) is reported in one line
    with its exit status and the last line of its standard error, exit 1, nothing written;
  - bad flags: one line, exit 2.

CLBlast's tuners are external programs (clblast-utils). The first --quick run uses the real
ones: they run, and their tables are read. With --stand-in-tuners (the sanitized build, where
what is worth checking is relcl-tune's own code) stand-ins take their place in that run too
(stand_in_tuners), and the checks are then exact: the fastest matching row of each table is
the result, the routine tuner's times are recorded and give the switch between them. The
second --quick run (the step check's second stage) always uses the stand-ins.

Most of the time is PoCL compiling CLBlast's kernels, for each new parameter set (and each
XGEMM_MIN_INDIRECT_SIZE: it is in the program's source). On the 2-core AMD EPYC Zen 3 (PoCL
device pthread-haswell-AMD EPYC), shared with other work, so approximate: the release build
from an empty PoCL cache 495 s (before the stand-ins and budgets above: 525 to 653 s), 404 to
435 s of it the real run (its switch stage compiles four programs, 197 s; the step check's
product checks 106 s); then the sanitized build on the same cache, as test.sh runs them,
52 s (before: 182 to 229 s); with a warm cache 108 to 130 s and 53 to 56 s (before: 242 s
and 153 s). The sanitized build alone from an empty cache compiles all that under ASan: its
first run took over the 600 s a run may take.

usage: test_tune.py [--stand-in-tuners] relcl-tune relcl-info
Prints one line per check and ends with "N passed, M failed".
"""
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1
    return ok


def fake_bench(path, cases):
    """Writes at path a stand-in for relcl-bench --tuning-child: it prints the seconds per
    step of the first (glob pattern on $RELCL_TUNING, seconds) case that matches."""
    arms = "".join(f"  {pattern}) s={sec} ;;\n" for pattern, sec in cases)
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\ncase \"$RELCL_TUNING\" in\n{arms}esac\n"
                "echo \"{\\\"tuning\\\": \\\"x\\\", \\\"seconds_per_step\\\": $s}\"\n")
    os.chmod(path, stat.S_IRWXU)
    return path


# What the stand-in tuners report. Xgemm: relcl's first CPU set (cpu_xgemm_sets in
# apps/relcl-tune.c), which the CPU sweep always times, so that the sweep compiles no CLBlast
# program the tuners' set did not; XgemmDirect: the shipped file's (tuning/), not relcl's own
# set, so that the step check's second stage has something to replace. In the tuners' order.
STAND_IN_XGEMM = {"GEMMK": 0, "MWG": 32, "NWG": 32, "KWG": 128, "MDIMC": 4, "NDIMC": 4,
                  "MDIMA": 4, "NDIMB": 4, "KWI": 2, "VWM": 8, "VWN": 8, "STRM": 1, "STRN": 0,
                  "SA": 0, "SB": 0, "KREG": 1}
STAND_IN_DIRECT = {"WGD": 8, "MDIMCD": 4, "NDIMCD": 4, "MDIMAD": 4, "NDIMBD": 4, "KWID": 2,
                   "VWMD": 2, "VWND": 2, "PADA": 1, "PADB": 1}
# The routine tuner's stand-in times (indirect, direct ms) at two shapes: the direct kernel
# faster at 128^3, the indirect at 256^3, so that the switch relcl-tune derives lies between
# them, at 256. That is one of the values relcl's own switch stage times with relcl's sets, so
# the CPU set's candidate is a CLBlast program the release build's real run has compiled (the
# switch is in the program's source), which the sanitized build then finds in PoCL's cache.
STAND_IN_ROUTINE = {"128x128x128": (2.0, 1.5), "256x256x256": (9.0, 12.0)}
STAND_IN_SWITCH = 256


def tuner_table(params, rows):
    """Shell lines printing a CLBlast kernel tuner's table as it does, colours included: the
    parameter names, then a row per (parameter values, milliseconds, status)."""
    lines = [f"* Parameters explored: {' '.join(params)} "]
    for i, (values, ms, status) in enumerate(rows, 1):
        lines.append(f"|{i:5d} |{len(rows):6d} | {' '.join(f'{v:4d}' for v in values)} |"
                     f"       8       8 |      32      32 |    \\033[32mOK\\033[0m    317 ms |"
                     f"{ms:10.2f} ms |     3.3 |     \\033[32m{status}\\033[0m |")
    return "".join(f"printf '{line}\\n'\n" for line in lines)


def stand_in_tuner(dir, name, body):
    """Writes the shell script body as dir/name, executable."""
    path = os.path.join(dir, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, stat.S_IRWXU)


def stand_in_tuners(dir):
    """Writes in dir stand-ins for CLBlast's three tuners (relcl-tune runs them from PATH),
    each failing in one line (exit 3) unless given the shapes it expects:
      - the kernel tuners print a table in which STAND_IN_XGEMM (STAND_IN_DIRECT) is the
        fastest row whose results match, beside a slower one and a faster one that failed;
      - the routine tuner checks that the best parameters relcl-tune wrote for it are those,
        and writes its result file (STAND_IN_ROUTINE's times); at the last shape it then
        waits until relcl-tune stops it at the end of the tuners' share of the budget (as a
        real tuner is stopped), so that relcl's CPU sweep, whose deadline comes a little
        later, times its first set alone: each other set compiles CLBlast's kernels anew,
        15 s or more from a cold cache."""
    def expect(shape, then):
        m, n, k = shape.split("x")
        return f'  *"-m {m} -n {n} -k {k} "*) {then} ;;\n'

    def unexpected(name):
        return f'  *) echo "{name}: unexpected arguments: $*" >&2; exit 3 ;;\nesac\n'

    xg, dr = STAND_IN_XGEMM, STAND_IN_DIRECT
    slower = dict(xg, MWG=64, NWG=64, VWM=4, VWN=4)
    stand_in_tuner(dir, "clblast_tuner_xgemm",
                   'case "$* " in\n' + expect("128x128x128", "") +
                   unexpected("clblast_tuner_xgemm") +
                   tuner_table(xg, [(slower.values(), 3.0, "results match"),
                                    (xg.values(), 2.5, "results match"),
                                    (slower.values(), 0.5, "L2 error")]))
    stand_in_tuner(dir, "clblast_tuner_xgemm_direct",
                   'case "$* " in\n' + expect("64x64x64", "") +
                   unexpected("clblast_tuner_xgemm_direct") +
                   tuner_table(dr, [(dr.values(), 0.75, "results match"),
                                    (dict(dr, WGD=16).values(), 0.5, "L2 error")]))
    body = ""
    for family, params in (("xgemm", xg), ("xgemm_direct", dr)):
        best = " ".join(f"{p}={v}" for p, v in params.items())
        body += (f"grep -qF '\"best_parameters\": \"{best} PRECISION=32\",' "
                 f"clblast_{family}_1_32.json || {{\n"
                 f"  echo 'clblast_{family}_1_32.json: not the best parameters' >&2; exit 3\n}}\n")
    body += 'case "$* " in\n'
    for i, (shape, (indirect, direct)) in enumerate(STAND_IN_ROUTINE.items()):
        last = 1 if i == len(STAND_IN_ROUTINE) - 1 else ""
        body += expect(shape, f"indirect={indirect} direct={direct} last={last}")
    body += unexpected("clblast_tuner_routine_xgemm")
    body += ("cat > clblast_gemm_routine_single_size_32.json <<EOF\n"
             '{"kernel_family": "gemm_routine", "precision": "32", "results": [\n'
             ' {"kernel": "XgemmDirectTN", "time": $direct,'
             ' "parameters": {"XGEMM_MIN_INDIRECT_SIZE": 4096, "PRECISION": 32}},\n'
             ' {"kernel": "Xgemm", "time": $indirect,'
             ' "parameters": {"XGEMM_MIN_INDIRECT_SIZE": 0, "PRECISION": 32}}]}\n'
             "EOF\n"
             '[ -z "$last" ] || exec sleep 600\n')
    stand_in_tuner(dir, "clblast_tuner_routine_xgemm", body)


def run(args, env=None, timeout=600):
    """Runs args, printing how long it took (where the test's time goes)."""
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    print(f"({time.monotonic() - t0:.1f} s) {os.path.basename(args[0])} {' '.join(args[1:])}")
    return r


def tiny(budget, routine_shapes="128x128x128"):
    """relcl-tune --quick's flags for tiny shapes and a budget of seconds."""
    return ["--quick", "--budget", str(budget), "--xgemm-shapes", "128x128x128",
            "--direct-shapes", "64x64x64", "--routine-shapes", routine_shapes]


def main():
    argv = sys.argv[1:]
    stand_in = argv[:1] == ["--stand-in-tuners"]
    tune, info = argv[stand_in:]
    print("CLBlast's tuners: " + ("stand-ins (--stand-in-tuners)" if stand_in else "real"))
    with tempfile.TemporaryDirectory() as tmp:
        stand_ins = os.path.join(tmp, "stand-in-tuners")
        os.mkdir(stand_ins)
        stand_in_tuners(stand_ins)
        stand_in_env = dict(os.environ,
                            PATH=stand_ins + os.pathsep + os.environ.get("PATH", ""))
        # with the stand-ins: the routine tuner runs only while 5 s of the tuners' share
        # (60% of the budget) are left, and the CPU sweep's deadline (70%) passes while
        # relcl times K_CHUNK (stand_in_tuners)
        stand_in_tiny = tiny(10, ",".join(STAND_IN_ROUTINE))
        out = os.path.join(tmp, "t.json")
        # the step check's runs, faked (the real ones compile CLBlast's kernels for each
        # candidate: minutes on a CPU): the tuners' result is slowest, relcl's CPU set
        # fastest, CLBlast's defaults and what applied before in between
        bench = fake_bench(os.path.join(tmp, "fake-bench"),
                           [("off", 0.3), ("*candidate-0.json", 0.5),
                            ("*candidate-cpu.json", 0.1), ("*", 0.2)])
        # the real tuners get 60% of 30 s: Xgemm 6 s, where from a cold PoCL cache its first
        # configuration is timed after 3 s; the routine tuner, compiling CLBlast's whole
        # GEMM program, is always stopped (the stand-ins check what it reports)
        r = run([tune, *(stand_in_tiny if stand_in else tiny(30)), "--step-check", "quick",
                 "--bench", bench, "--output", out], env=stand_in_env if stand_in else None)
        print(r.stdout[-2000:], r.stderr[-2000:])
        check(r.returncode == 0, f"--quick on 128^3 exits 0 (got {r.returncode})")
        tuned = {}
        try:
            with open(out, encoding="utf-8") as f:
                tuned = json.load(f)
        except (OSError, ValueError) as e:
            check(False, f"the tuning file is written and is JSON: {e}")
        kernels = tuned.get("kernels", {})
        check(all(tuned.get(k) for k in ("device", "driver", "platform", "device_type")),
              "the file names the device, driver, platform and device type: "
              + ", ".join(str(tuned.get(k)) for k in ("device", "driver", "platform",
                                                      "device_type")))
        if tuned.get("device_type") == "CPU" and platform.machine() in ("x86_64", "i686"):
            check(re.fullmatch(r"\w{12} family \d+ model \d+", tuned.get("cpu", "")) is not None,
                  f"a CPU device's file names its CPU model (PoCL names Zen 1 and 2 alike): "
                  f"{tuned.get('cpu')}")
        tk = tuned.get("tuners_kernels", kernels)
        xg = tk.get("Xgemm", {})
        check(all(isinstance(xg.get(p), int) for p in ("MWG", "NWG", "KWG", "VWM", "GEMMK")),
              f"Xgemm parameters measured: {xg}")
        if stand_in:
            # the tuners' tables and the routine tuner's file, read (strip_ansi, take_line,
            # best_over_shapes, routine_times, best_switch)
            check(xg == STAND_IN_XGEMM and tk.get("XgemmDirect") == STAND_IN_DIRECT,
                  f"the tuners' fastest rows whose results match are their result: {xg}, "
                  f"{tk.get('XgemmDirect')}")
            routine = tuned.get("measured", {}).get("GemmRoutine")
            want = [{"shape": shape, "indirect_ms": i, "direct_ms": d}
                    for shape, (i, d) in STAND_IN_ROUTINE.items()]
            check(routine == want, f"the routine tuner's times at each shape: {routine}")
            switch = tk.get("GemmRoutine", {}).get("XGEMM_MIN_INDIRECT_SIZE")
            check(switch == STAND_IN_SWITCH, f"the tuners' switch between the direct and "
                  f"indirect kernels from those times: {STAND_IN_SWITCH} (got {switch})")
        # relcl's own split of long products, timed with the tuners' kernels: the fastest
        # K_CHUNK goes with them (none: 0 was fastest)
        kc = tuned.get("measured", {}).get("RelclGemm", {})
        if check(sorted(kc, key=int) == ["0", "256", "512", "1024"]
                 and all(isinstance(v, (int, float)) and 0 < v < 1e29 for v in kc.values()),
                 f"RelclGemm K_CHUNK 0, 256, 512, 1024 timed: {kc}"):
            fastest = int(min(kc, key=lambda c: kc[c]))
            got = tuned.get("tuners_kernels", kernels).get("RelclGemm", {}).get("K_CHUNK", 0)
            check(got == fastest, f"the tuners' result carries the fastest K_CHUNK "
                  f"{fastest} (got {got})")
        # the switch between the direct and indirect kernels, chosen again on relcl's own
        # middle-sized products for the parameters in the file: the fastest goes in
        sw = tuned.get("measured", {}).get("GemmSwitch", {})
        if check(sorted(sw, key=int) == ["64", "128", "256", "512"]
                 and all(isinstance(v, (int, float)) and 0 < v < 1e29 for v in sw.values()),
                 f"XGEMM_MIN_INDIRECT_SIZE 64, 128, 256, 512 timed on relcl's products: {sw}"):
            fastest = int(min(sw, key=lambda c: sw[c]))
            got = kernels.get("GemmRoutine", {}).get("XGEMM_MIN_INDIRECT_SIZE")
            check(got == fastest, f"the file's switch is the fastest, {fastest} (got {got})")
        rate = [e for e in tuned.get("measured", {}).get("Xgemm", []) if e.get("gflops", 0) > 0]
        check(len(rate) == 1 and rate[0]["shape"] == "128x128x128"
              and (not stand_in or (rate[0]["ms"] == 2.5
                                    and abs(rate[0]["gflops"] - 2 * 128**3 / 2.5e6) < 1e-6)),
              f"the rate of the chosen Xgemm parameters is recorded: {rate}")

        sc = tuned.get("step_check", {})
        cands = sc.get("candidates", [])
        names = [c.get("name", "") for c in cands]
        check(len(cands) >= 2 and names[0].startswith("this search")
              and names[-1] == "CLBlast's defaults"
              and all(len(c.get("seconds_per_step", [])) >= 1 for c in cands),
              f"the step check timed every candidate: {cands}")
        check(all(c.get("products") == "right" for c in cands),
              f"every candidate's products checked first: {[c.get('products') for c in cands]}")
        # on a CPU, relcl's own Xgemm sets without local memory are timed on the long
        # products beside the tuners' (the first set whatever the budget); the fastest set,
        # with its own K_CHUNK, is a step-check candidate (fastest of all in the fake bench)
        sweep = tuned.get("measured", {}).get("XgemmCpuSweep")
        cpu_name = "relcl's sweep of the CPU family"
        if tuned.get("device_type") == "CPU":
            ok = (isinstance(sweep, list) and len(sweep) >= 2
                  and sweep[0].get("set") == "tuners"
                  and all(e.get("ms", 0) > 0 for e in sweep)
                  and all(e.get("set") == "cpu" and e.get("Xgemm", {}).get("SA") == 0
                          for e in sweep[1:]))
            if check(ok, f"a CPU device: the tuners' Xgemm and relcl's sets timed: {sweep}"):
                fastest = min(sweep[1:], key=lambda e: e["ms"])
                check(cpu_name in names, f"the fastest set is a step-check candidate: {names}")
                kc = tuned.get("measured", {}).get("RelclGemm_cpu", {})
                check(sorted(kc, key=int) == ["0", "256", "512", "1024"],
                      f"K_CHUNK timed for the fastest set: {kc}")
                check(kernels.get("Xgemm") == fastest["Xgemm"],
                      f"chosen, the file holds the fastest set: {kernels.get('Xgemm')}")
                direct = kernels.get("XgemmDirect", {})
                check(direct.get("WGD") == 8 and direct.get("MDIMCD") == 1
                      and direct.get("NDIMCD") == 2 and direct.get("KWID") == 8,
                      f"with relcl's direct-kernel set for the per-head products: {direct}")
                if kc:
                    best_chunk = int(min(kc, key=lambda c: kc[c]))
                    check(kernels.get("RelclGemm", {}).get("K_CHUNK", 0) == best_chunk,
                          f"with its fastest K_CHUNK {best_chunk}: {kernels.get('RelclGemm')}")
        if cpu_name in names:
            want = cpu_name
        else:
            want = names[1] if len(names) == 3 else "CLBlast's defaults"
        check(sc.get("chosen") == want,
              f"the fastest candidate is chosen: {sc.get('chosen')} (want {want})")
        check("tuners_kernels" in tuned and (kernels == {}) == (want == "CLBlast's defaults")
              and kernels != tuned["tuners_kernels"],
              f"the file holds the chosen parameters, the tuners' kept beside them: {kernels}")

        env = dict(os.environ, RELCL_TUNING=out)
        r = run([info], env=env)
        line = [x for x in r.stdout.splitlines() if x.startswith("CLBlast tuning")]
        check(len(line) == 1 and out in line[0] and "kernel" in line[0]
              and "borrowed" not in line[0] and "none" not in line[0],
              f"relcl-info reports the file as applied: {line}")
        r = run([tune, "--if-needed", "--output", os.path.join(tmp, "never.json")], env=env,
                timeout=120)
        check(r.returncode == 0 and "applies already" in r.stdout
              and not os.path.exists(os.path.join(tmp, "never.json")),
              f"--if-needed does nothing when tuning for this device applies: {r.stdout.strip()}")
        if tuned.get("device_type") == "CPU":
            # on a CPU relcl's own kernels run the products: --if-needed measures nothing even
            # when no tuning applies, unless RELCL_CPU_GEMM=clblast hands them to CLBlast
            r = run([tune, "--if-needed", "--output", os.path.join(tmp, "never2.json")],
                    env=dict(os.environ, RELCL_TUNING="off", RELCL_CPU_GEMM=""), timeout=120)
            check(r.returncode == 0 and "no CLBlast tuning needed" in r.stdout
                  and not os.path.exists(os.path.join(tmp, "never2.json")),
                  f"--if-needed on a CPU with no tuning: nothing to measure: {r.stdout.strip()}")

        # --check: the file just written passes; the same file with an Xgemm set that computes
        # wrong products (the indirect kernel from 64^3 on, so the check's products reach
        # it), and a file that is not there, fail in one line
        r = run([tune, "--check", out], timeout=300)
        check(r.returncode == 0 and "match a sum in double" in r.stdout,
              f"--check on the file written: exit 0 ({r.returncode}): {r.stdout.strip()}")
        wrong = dict(tuned)
        wrong["kernels"] = dict(kernels)
        wrong["kernels"]["Xgemm"] = {
            "GEMMK": 1, "KREG": 1, "KWG": 1, "KWI": 1, "MDIMA": 4, "MDIMC": 4, "MWG": 32,
            "NDIMB": 4, "NDIMC": 4, "NWG": 32, "SA": 0, "SB": 0, "STRM": 0, "STRN": 0,
            "VWM": 8, "VWN": 8}
        wrong["kernels"]["GemmRoutine"] = {"XGEMM_MIN_INDIRECT_SIZE": 64}
        wrong_file = os.path.join(tmp, "wrong.json")
        with open(wrong_file, "w") as f:
            json.dump(wrong, f)
        r = run([tune, "--check", wrong_file], timeout=300)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and wrong_file in lines[0]
              and "wrong products" in lines[0],
              f"--check on a set that computes wrong products: exit 1 ({r.returncode}), "
              f"one line: {r.stderr.strip()}")
        # the per-head products (attention's batched products) are checked too: with the
        # attention kernels' scale planted 1% off (RELCL_KERNEL_DIR), the file that passed
        # fails, in one line
        planted = os.path.join(tmp, "kernels-planted")
        shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"),
                        planted)
        # (attn_fwd_rows' group shape in attention.cl, its item shape's row, which
        # attn_fwd_cpu shares, in common.cl: its whole vectors of keys and the rest)
        found = 0
        for name in ("attention.cl", "common.cl"):
            path = os.path.join(planted, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            found += text.count("    e *= scale;\n")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace("    e *= scale;\n", "    e *= scale * 1.01f;\n"))
        check(found == 3, "the planted scale has its lines to replace")
        r = run([tune, "--check", out], env=dict(os.environ, RELCL_KERNEL_DIR=planted),
                timeout=300)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and "wrong per-head products" in lines[0],
              f"--check with attention's scale planted 1% off: exit 1 ({r.returncode}), one "
              f"line: {r.stderr.strip()}")
        missing = os.path.join(tmp, "missing.json")
        r = run([tune, "--check", missing], timeout=300)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and "cannot be read" in lines[0],
              f"--check on a missing file: exit 1 ({r.returncode}), one line: {r.stderr.strip()}")

        # on a CPU, the step check's second stage: when the winner's direct-kernel set is not
        # relcl's, the winner is timed again beside itself with relcl's set, which replaces
        # its own when faster (here the fake bench makes the tuners' result the winner and
        # relcl's direct-kernel set faster still). The tuners are the stand-ins, so that this
        # run compiles few CLBlast programs the first did not (with the real tuners' new
        # random sets, it took 5.5 of the test's 13 minutes from cold on a Zen 3 EPYC), and,
        # with their budget of 10 s, the CPU sweep times one set, not all seven (146 s
        # there from cold, most of it compiling CLBlast's kernels for the six others)
        if tuned.get("device_type") == "CPU":
            bench2 = fake_bench(os.path.join(tmp, "fake-bench-2"),
                                [("off", 0.3), ("*candidate-0.json", 0.1),
                                 ("*candidate-direct.json", 0.05), ("*", 0.2)])
            out2 = os.path.join(tmp, "t2.json")
            r = run([tune, *stand_in_tiny, "--step-check", "quick", "--bench", bench2,
                     "--output", out2], env=stand_in_env)
            t2 = {}
            try:
                with open(out2, encoding="utf-8") as f:
                    t2 = json.load(f)
            except (OSError, ValueError) as e:
                print(r.stdout[-2000:], r.stderr[-2000:])
            sc2 = t2.get("step_check", {})
            k2, tk2 = t2.get("kernels", {}), t2.get("tuners_kernels", {})
            relcl_direct = {"KWID": 8, "MDIMAD": 1, "MDIMCD": 1, "NDIMBD": 2, "NDIMCD": 2,
                            "PADA": 1, "PADB": 1, "VWMD": 8, "VWND": 4, "WGD": 8}
            check(r.returncode == 0 and tk2.get("Xgemm") == STAND_IN_XGEMM
                  and tk2.get("XgemmDirect") == STAND_IN_DIRECT,
                  f"the stand-in tuners' sets are this run's tuners' result: {tk2.get('Xgemm')}, "
                  f"{tk2.get('XgemmDirect')}")
            dc = sc2.get("direct_check", {})
            dnames = [c.get("name", "") for c in dc.get("candidates", [])]
            check(r.returncode == 0 and sc2.get("chosen") == "this search (CLBlast's tuners)"
                  and len(dnames) == 2 and dnames[0] == sc2.get("chosen")
                  and dnames[1].startswith("relcl's direct-kernel set")
                  and all(c.get("products") == "right" for c in dc.get("candidates", [])),
                  f"the winner's direct-kernel set not relcl's: the winner timed again "
                  f"beside itself with relcl's, both checked: {dc}")
            check(len(dnames) == 2 and dc.get("chosen") == dnames[1],
                  f"relcl's direct-kernel set is chosen when faster: {dc.get('chosen')}")
            check(k2.get("XgemmDirect") == relcl_direct
                  and k2.get("Xgemm") == tk2.get("Xgemm") is not None
                  and k2.get("RelclGemm") == tk2.get("RelclGemm")
                  and tk2.get("XgemmDirect") != relcl_direct,
                  f"the file holds the winner's parameters with relcl's direct-kernel set, "
                  f"the tuners' kept beside them: {k2.get('XgemmDirect')}, "
                  f"tuners' {tk2.get('XgemmDirect')}")

        # a tuner that dies the way CLBlast 1.5's did with -fraction 0.00001
        fake = os.path.join(tmp, "bin")
        os.mkdir(fake)
        for name in ("clblast_tuner_xgemm", "clblast_tuner_xgemm_direct",
                     "clblast_tuner_routine_xgemm"):
            p = os.path.join(fake, name)
            with open(p, "w") as f:
                f.write("#!/bin/sh\necho '* Found 578 configuration(s)'\n"
                        "echo 'terminate called after throwing an instance of "
                        "'\"'\"'std::bad_alloc'\"'\"'' >&2\nexit 134\n")
            os.chmod(p, stat.S_IRWXU)
        env = dict(os.environ, PATH=fake + os.pathsep + os.environ.get("PATH", ""))
        bad = os.path.join(tmp, "bad.json")
        r = run([tune, *tiny(30), "--output", bad], env=env)
        lines = [x for x in r.stderr.splitlines() if "clblast_tuner_xgemm at" in x]
        check(r.returncode == 1 and len(lines) == 1 and "exit status 134" in lines[0]
              and "std::bad_alloc" in lines[0] and not os.path.exists(bad),
              f"a dying tuner: one line with its status and message, exit 1: {lines}")

        for args, what in ((["--budget", "1"], "--budget 1"),
                           (["--step-check", "maybe"], "--step-check maybe"),
                           (["--xgemm-shapes", "100x128x128"], "an Xgemm shape not a multiple of 128"),
                           (["--direct-shapes", "64x64"], "a malformed shape"),
                           (["--frobnicate"], "an unknown flag")):
            r = run([tune, *args, "--output", os.path.join(tmp, "x.json")], timeout=60)
            check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
                  and "relcl-tune" in r.stderr,
                  f"{what}: exit 2 and one line: {r.stderr.strip()}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
