#!/usr/bin/env python3
"""The shared library's exported symbols against the public headers.

usage: test_exports.py LIBRELCL.so INCLUDE_DIR EXPECTED_SONAME
Fails when librelcl.so exports anything that is not a public relcl_ function (a relcl__
internal, a test hook, a C++ runtime symbol), when a function declared in include/*.h is not
exported (a user's program would fail to link), when an exported relcl_ name is declared in
no public header, or when the soname is not the one the policy in meson.build gives.
"""
import glob
import os
import re
import subprocess
import sys

passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def declared_functions(include_dir):
    """Names of the functions the public headers declare (not static inline ones)."""
    names = set()
    for path in sorted(glob.glob(os.path.join(include_dir, "*.h"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
        # drop the bodies of static inline functions (and their names with them)
        while True:
            m = re.search(r"static\s+inline\b[^;{]*\{", text)
            if not m:
                break
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            text = text[:m.start()] + text[i:]
        # a declaration: a type (an identifier, maybe pointers) right before NAME(
        for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*|\*)\s*\b(relcl_[A-Za-z0-9_]+)\s*\(",
                             text):
            if m.group(1) not in ("return", "sizeof"):
                names.add(m.group(2))
    return names


def main():
    lib, include_dir, soname = sys.argv[1:4]
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    exported = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            exported.add(parts[2].split("@")[0])
    declared = declared_functions(include_dir)
    # the parser must see the API, or every check below passes vacuously
    check(len(declared) >= 100 and "relcl_attn_forward" in declared and
          "relcl_checkpoint_save" in declared,
          f"headers declare {len(declared)} functions, relcl_attn_forward among them")
    check(len(exported) >= 100, f"{len(exported)} symbols exported")

    internal = sorted(s for s in exported if s.startswith("relcl__"))
    check(not internal, "no relcl__ internal exported" +
          (": " + ", ".join(internal[:10]) if internal else ""))
    hooks = sorted(s for s in exported if "hook" in s or re.search(r"(^|_)tests?(_|$)", s))
    check(not hooks, "no test hook exported" + (": " + ", ".join(hooks) if hooks else ""))
    foreign = sorted(s for s in exported if not s.startswith("relcl_"))
    check(not foreign, "nothing but relcl_ names exported" +
          (": " + ", ".join(foreign[:10]) if foreign else ""))
    missing = sorted(declared - exported)
    check(not missing, "every declared function exported" +
          ("; missing: " + ", ".join(missing) if missing else ""))
    undeclared = sorted(s for s in exported - declared if not s.startswith("relcl__"))
    check(not undeclared, "every exported relcl_ name declared in include/" +
          ("; undeclared: " + ", ".join(undeclared) if undeclared else ""))

    dyn = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"Library soname: \[([^\]]*)\]", dyn)
    got = m.group(1) if m else None
    check(got == soname, f"soname {got}, policy says {soname}")

    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
