#!/usr/bin/env python3
"""Layering rules of the source tree that a compiler does not see.

usage: test_layering.py SOURCE_ROOT
- Kernel flag bits are defined once, in kernels/flags.h: no kernels/*.cl file #defines a
  RELCL_ integer of its own, no lib/ file defines a flag's value again (enum or #define), and
  every flag in flags.h is used by some kernel.
- Only lib/gemm.c calls CLBlast (includes clblast_c.h).
- apps/ and examples/ include only public headers (include/*.h) and their own; test/ref/
  includes no lib/ code.
- No file-level cycles in lib/: the graph "file A calls a function defined in file B" has no
  cycle (a cycle means two files are one unit in two pieces).
- In each program as it is built (kernels/flags.h, common.cl, then the family's file), no
  macro is tested (#if, #ifdef, #elif) above its #define, but for a default (#ifndef X
  followed by #define X): such a test sees it undefined and silently takes the other branch
  (common.cl tested RELCL_CLANG above its #define, which left every prefetch empty from
  session 33's end to session 37).
"""
import glob
import os
import re
import sys

passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def quoted_includes(path):
    return re.findall(r'^\s*#\s*include\s*"([^"]+)"', read(path), flags=re.M)


def main():
    root = sys.argv[1]
    rel = lambda p: os.path.relpath(p, root)

    flags = dict(re.findall(r"^#define (RELCL_[A-Z0-9_]+) (\d+)",
                            read(os.path.join(root, "kernels/flags.h")), flags=re.M))
    check(len(flags) >= 10, f"kernels/flags.h defines {len(flags)} flags")
    cl_files = sorted(glob.glob(os.path.join(root, "kernels/*.cl")))
    cl_text = {p: strip_comments(read(p)) for p in cl_files}
    own = [f"{rel(p)}: {m}" for p, t in cl_text.items()
           for m in re.findall(r"^\s*#\s*define\s+(RELCL_[A-Z0-9_]+)\s+\(?\d", t, flags=re.M)]
    check(not own, "no kernel file defines a flag of its own" + (": " + ", ".join(own) if own
                                                                   else ""))
    unused = [f for f in flags if not any(re.search(r"\b" + f + r"\b", t)
                                          for t in cl_text.values())]
    check(not unused, "every flag in flags.h is used by a kernel" +
          (": unused " + ", ".join(unused) if unused else ""))
    lib_files = sorted(glob.glob(os.path.join(root, "lib/**/*.c"), recursive=True) +
                       glob.glob(os.path.join(root, "lib/**/*.h"), recursive=True))
    again = []
    for p in lib_files:
        t = strip_comments(read(p))
        for f in flags:
            short = f[len("RELCL_"):]
            pat = r"(\b(%s|%s)\s*=\s*\d)|(#\s*define\s+(%s|%s)\s+\d)" % (f, short, f, short)
            if re.search(pat, t):
                again.append(f"{rel(p)}: {f}")
    check(not again, "no lib/ file defines a flag's value again" +
          (": " + ", ".join(again) if again else ""))

    clblast = [rel(p) for p in glob.glob(os.path.join(root, "**/*.c"), recursive=True) +
               glob.glob(os.path.join(root, "**/*.cc"), recursive=True) +
               glob.glob(os.path.join(root, "**/*.h"), recursive=True)
               if "/build" not in p and re.search(r"#\s*include\s*[<\"]clblast", read(p))]
    check(clblast and all(p.endswith("gemm.c") and p.startswith("lib") for p in clblast),
          "only lib/gemm.c includes CLBlast: " + ", ".join(clblast))

    public = {os.path.basename(p) for p in glob.glob(os.path.join(root, "include/*.h"))}
    public |= {"relcl_version.h"}
    bad = []
    for d in ("apps", "examples"):
        own_headers = {os.path.basename(p) for p in glob.glob(os.path.join(root, d, "*.h"))}
        for p in sorted(glob.glob(os.path.join(root, d, "*.c"))):
            for inc in quoted_includes(p):
                if inc not in public and inc not in own_headers:
                    bad.append(f"{rel(p)}: {inc}")
    check(not bad, "apps/ and examples/ include only public headers" +
          (": " + ", ".join(bad) if bad else ""))
    lib_names = {os.path.basename(p) for p in lib_files}
    bad = [f"{rel(p)}: {inc}" for p in glob.glob(os.path.join(root, "test/ref/*"))
           for inc in quoted_includes(p) if inc in lib_names or "lib/" in inc]
    check(not bad, "test/ref includes no lib/ code" + (": " + ", ".join(bad) if bad else ""))

    # file-level call graph of lib/
    srcs = sorted(glob.glob(os.path.join(root, "lib/**/*.c"), recursive=True) +
                  glob.glob(os.path.join(root, "lib/**/*.cc"), recursive=True))
    defined = {}
    for p in srcs:
        t = strip_comments(read(p))
        for m in re.finditer(r"^(?:extern \"C\"\s+)?[A-Za-z][\w \*]*?\b(relcl_\w+)\s*\([^;]*?\)\s*\{",
                             t, flags=re.M):
            defined.setdefault(m.group(1), p)
    graph = {p: set() for p in srcs}
    for p in srcs:
        t = strip_comments(read(p))
        for name in set(re.findall(r"\b(relcl_\w+)\s*\(", t)):
            q = defined.get(name)
            if q and q != p:
                graph[p].add(q)
    check(len(defined) >= 100, f"{len(defined)} lib/ functions found for the call graph")
    cycles, state, stack = [], {}, []

    def visit(p):
        state[p] = 1
        stack.append(p)
        for q in sorted(graph[p]):
            if state.get(q) == 1:
                cycles.append(" -> ".join(rel(x) for x in stack[stack.index(q):] + [q]))
            elif q not in state:
                visit(q)
        stack.pop()
        state[p] = 2

    for p in srcs:
        if p not in state:
            visit(p)
    check(not cycles, "no file-level cycles in lib/" + (": " + "; ".join(cycles) if cycles
                                                         else ""))

    # macros tested above their #define, in each program's text as program.c composes it
    prelude = [os.path.join(root, "kernels", f) for f in ("flags.h", "common.cl")]
    early = []
    for fam in cl_files:
        if fam.endswith("common.cl"):
            continue
        lines = []
        for p in prelude + [fam]:
            text = re.sub(r"/\*.*?\*/", lambda c: "\n" * c.group(0).count("\n"), read(p),
                          flags=re.S)  # comments out, lines kept
            lines += [(rel(p), i + 1, l) for i, l in enumerate(text.split("\n"))]
        first_def = {}
        for n, (_, _, l) in enumerate(lines):
            m = re.match(r"\s*#\s*define\s+(\w+)", l)
            if m:
                first_def.setdefault(m.group(1), n)
        for n, (f, i, l) in enumerate(lines):
            m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif)\b(.*)", l)
            if not m:
                continue
            for name in re.findall(r"\b[A-Za-z_]\w*\b", m.group(2)):
                d = first_def.get(name)
                if d is None or d < n:
                    continue
                default = m.group(1) == "ifndef" and d == n + 1
                if not default:
                    early.append(f"{f}:{i} tests {name} (defined at {lines[d][0]}:{lines[d][1]})")
    early = sorted(set(early))
    check(not early, "no kernel macro is tested above its #define" +
          (": " + "; ".join(early) if early else ""))

    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
