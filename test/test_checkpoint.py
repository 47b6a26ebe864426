#!/usr/bin/env python3
"""Interoperability of relcl checkpoints, checked from outside the C code.

Reads a file written by relcl with nothing but json and struct, exactly as the safetensors
specification describes the format, and recomputes relcl's two checksums from their
definition in include/relcl_checkpoint.h. Then writes files the way other tools do (the
Python package's layout: tensors sorted by name, __metadata__ first, non-ASCII escaped) and
has relcl read them back. The real `safetensors` package (PyPI, with numpy) must load relcl's
file too: it comes from the venv test.sh makes (build/venv, RELCL_VENV_PYTHON), and its
absence is a failure, not a skip.

usage: test_checkpoint.py PATH/TO/test_checkpoint
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def fnv1a64(data, h=0xCBF29CE484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def header_hash(tensors, meta):
    """tensors: [(name, shape, begin, end)] in data order; meta: dict of str."""
    out = bytearray()
    for name, shape, begin, end in tensors:
        out += name.encode() + b"\0" + b"F32\0"
        out += b"".join(b"%d," % d for d in shape) + b"\0"
        out += b"%d,%d\0" % (begin, end)
    out += b"__metadata__\0"
    for key in sorted(meta, key=lambda k: k.encode()):
        if key != "relcl.header_fnv1a64":
            out += key.encode() + b"\0" + meta[key].encode() + b"\0"
    return fnv1a64(out)


def read_safetensors(path):
    """The format as specified: u64 LE header size, JSON header, byte buffer."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header_bytes = raw[8 : 8 + n]
    header = json.loads(header_bytes.decode("utf-8"))
    return raw, n, header_bytes, header, raw[8 + n :]


# What --write-sample writes (test_checkpoint.c, write_sample).
SAMPLE = {
    "enc.a": ([2, 3], [i * 0.5 - 1.0 for i in range(6)]),
    "b": ([4], [struct.unpack("<f", struct.pack("<f", 1.0 / (i + 3)))[0] for i in range(4)]),
    "scalar": ([], [-2.75]),
    "empty": ([0, 2], []),
    "d\u00e9codeur.w": ([1, 1], [3.25]),
}
SAMPLE_ORDER = ["enc.a", "b", "scalar", "empty", "d\u00e9codeur.w"]
SAMPLE_META = {"relcl.config": '{"d_model": 4}', "step": "42", "note": 'a "quoted"\nline \\'}


def check_relcl_file(path):
    raw, n, header_bytes, header, data = read_safetensors(path)
    check(len(raw) >= 8 and (8 + n) % 8 == 0, "data starts at a multiple of 8 (header %d)" % n)
    check(header_bytes[:1] == b"{" and header_bytes.rstrip(b" ") == header_bytes.strip(),
          "header starts with '{' and is padded with spaces only")
    meta = header.pop("__metadata__", None)
    check(isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values()),
          "__metadata__ is a map of strings")
    check(all(set(v) == {"dtype", "shape", "data_offsets"} and v["dtype"] == "F32"
              for v in header.values()), "every tensor: dtype F32, shape, data_offsets")
    order = sorted(header, key=lambda k: tuple(header[k]["data_offsets"]))
    pos, ok = 0, True
    for name in order:
        begin, end = header[name]["data_offsets"]
        count = math.prod(header[name]["shape"])
        ok = ok and begin == pos and end - begin == 4 * count
        pos = end
    check(ok and pos == len(data), "offsets contiguous from 0 to the end of the file, 4 bytes "
          "per element")
    check(order == SAMPLE_ORDER, "data in the order given to save: %s" % order)
    ok = True
    for name, (shape, values) in SAMPLE.items():
        begin, end = header[name]["data_offsets"]
        got = list(struct.unpack("<%df" % len(values), data[begin:end]))
        ok = ok and header[name]["shape"] == shape and got == values
    check(ok, "shapes and little-endian float32 values as written")
    check(all(meta.get(k) == v for k, v in SAMPLE_META.items()), "metadata values intact")
    stored = meta.get("relcl.data_fnv1a64")
    check(stored == "%016x" % fnv1a64(data), "relcl.data_fnv1a64 = FNV-1a 64 of the data")
    tensors = [(k, header[k]["shape"], *header[k]["data_offsets"]) for k in order]
    check(meta.get("relcl.header_fnv1a64") == "%016x" % header_hash(tensors, meta),
          "relcl.header_fnv1a64 matches its definition")
    return header, meta


def write_foreign(path, tensors, meta, checksums):
    """Lay a file out like the safetensors package does: sorted by name, __metadata__ first,
    JSON with non-ASCII escaped, padded to 8 bytes."""
    header, data, placed = {}, b"", []
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        placed.append((name, shape, len(data), len(data) + len(blob)))
        data += blob
    meta = dict(meta)
    if checksums:
        meta["relcl.data_fnv1a64"] = "%016x" % fnv1a64(data)
        meta["relcl.header_fnv1a64"] = "%016x" % header_hash(placed, meta)
    text = json.dumps({"__metadata__": meta, **header}, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def dump(exe, path, foreign=False):
    r = subprocess.run([exe, "--dump-foreign" if foreign else "--dump", path],
                       capture_output=True, text=True)
    tensors, meta = {}, {}
    for line in r.stdout.splitlines():
        parts = line.split(" ")
        if parts[0] == "T":
            shape = [] if parts[3] == "-" else [int(d) for d in parts[3].split(",")]
            values = [float.fromhex(v) for v in parts[4:]]
            tensors[bytes.fromhex(parts[1]).decode()] = (shape, values)
        elif parts[0] == "M":
            meta[bytes.fromhex(parts[1]).decode()] = bytes.fromhex(parts[2]).decode()
    return r.returncode, tensors, meta, r.stderr.strip()


def venv_python():
    """The venv python (RELCL_VENV_PYTHON, build/venv of scripts/deps.sh) when this python
    lacks safetensors or numpy and that one exists: the test then reruns under it."""
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        return None
    except ImportError:
        py = os.environ.get("RELCL_VENV_PYTHON", "")
        if py and os.path.exists(py) and os.path.abspath(py) != os.path.abspath(sys.executable):
            return py
        return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    py = venv_python()
    if py:
        os.execv(py, [py] + sys.argv)
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="relcl-ckpt-py-") as tmp:
        sample = os.path.join(tmp, "sample.safetensors")
        r = subprocess.run([exe, "--write-sample", sample])
        check(r.returncode == 0, "relcl wrote the sample")
        check_relcl_file(sample)

        code, tensors, meta, err = dump(exe, sample)
        check(code == 0 and tensors == SAMPLE and meta.get("step") == "42",
              "relcl reads its own sample back " + err)

        foreign = os.path.join(tmp, "foreign.safetensors")
        write_foreign(foreign, SAMPLE, SAMPLE_META, checksums=True)
        code, tensors, meta, err = dump(exe, foreign)
        check(code == 0 and tensors == SAMPLE and all(meta[k] == v for k, v in SAMPLE_META.items()),
              "relcl reads a file laid out by Python, checksums computed from the spec " + err)

        write_foreign(foreign, SAMPLE, {"format": "np"}, checksums=False)
        code, _, _, err = dump(exe, foreign)
        check(code != 0 and err.startswith(foreign + ": ") and "relcl.header_fnv1a64" in err,
              "without checksums it is refused by default: " + err)
        code, tensors, _, err = dump(exe, foreign, foreign=True)
        check(code == 0 and tensors == SAMPLE, "and read with the foreign flag " + err)

        try:
            import numpy
            from safetensors.numpy import load_file
            from safetensors import safe_open
        except ImportError as e:
            check(False, "the safetensors package (PyPI) loads relcl's file: not importable (%s) "
                  "by %s; test.sh installs it into build/venv (scripts/deps.sh, relcl_pyvenv)"
                  % (e, sys.executable))
        else:
            loaded = load_file(sample)
            ok = set(loaded) == set(SAMPLE)
            for name, (shape, values) in SAMPLE.items():
                a = loaded.get(name)
                ok = ok and a is not None and a.dtype == numpy.float32 and \
                    list(a.shape) == shape and a.reshape(-1).tolist() == values
            with safe_open(sample, framework="np") as f:
                ok = ok and f.metadata().get("step") == "42"
            check(ok, "the safetensors package loads relcl's file (values and metadata)")


if __name__ == "__main__":
    main()
    if passed + failed == 0:  # a run in which nothing was checked must not pass
        check(False, "no check ran")
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
