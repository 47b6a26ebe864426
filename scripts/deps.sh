# Debian/Ubuntu packages relcl needs, and the step that installs the missing ones.
# Sourced by test.sh and demo.sh: append new dependencies to RELCL_DEPS, nowhere else.
# shellcheck shell=bash

RELCL_DEPS=(
  gcc libc6-dev meson ninja-build pkg-config python3  # toolchain (libc6-dev: gcc only recommends it)
  ocl-icd-opencl-dev opencl-headers                    # OpenCL ICD loader and headers
  pocl-opencl-icd clinfo                               # a CPU OpenCL device, and a way to list devices
  libclblast-dev                                       # every GEMM
  clblast-utils                                        # CLBlast's tuners, run by relcl-tune
  oclgrind                                             # kernel checker used by the test suite
  g++ libsentencepiece-dev libcjson-dev liblzma-dev    # lib/io/spm.cc (C++ over SentencePiece), lib/io/data.c
  sentencepiece                                        # spm_encode/spm_decode, to inspect a model by hand
  libcairo2-dev libyaml-dev                            # relcl-train: loss plot (PNG), YAML config files
  python3-venv xz-utils                                # demo.sh: a venv for sacrebleu (BLEU), test set
  libopenmpi-dev openmpi-bin                           # relcl-train on many ranks/nodes (MPI), its test
)

# Opt-in, never installed by test.sh, demo.sh or CI (about 1 GB): PyTorch from Debian, for
# bench/vs-pytorch.py's side-by-side run against relcl (/usr/bin/python3 imports it).
# Debian's torch multiplies through whatever libblas.so.3 the alternatives system points
# to: without OpenBLAS that is the reference BLAS (3 GFLOP/s here against 30+), and the
# comparison would be against a PyTorch no CPU user runs.
RELCL_TORCH_DEPS=(python3-torch libopenblas0-pthread)

# Install whatever in RELCL_DEPS is missing; `apt-get update` runs only when something is.
relcl_install_deps() {
  relcl_apt_install "${RELCL_DEPS[@]}"
}

# The same for RELCL_TORCH_DEPS: `source scripts/deps.sh && relcl_install_torch`.
relcl_install_torch() {
  relcl_apt_install "${RELCL_TORCH_DEPS[@]}"
}

# Install the named Debian packages that are missing (as root, or through sudo).
relcl_apt_install() {
  local missing=() pkg status
  for pkg in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "relcl: missing packages (${missing[*]}) and not root, with no sudo to install them" >&2
      return 1
    fi
    sudo=(sudo)
  fi
  echo "relcl: installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

# PyPI packages (never apt's: Debian has no safetensors) go in one venv, build/venv, made on
# first use: demo.sh's sacrebleu, the test suite's safetensors + numpy (test_checkpoint.py
# loads relcl's checkpoints with them). Installs whichever of the named packages (import name
# = package name) the venv cannot import yet, prints the venv's python, fails when pip cannot.
# Run from the source root.
RELCL_VENV=build/venv
relcl_pyvenv() {
  local py=$RELCL_VENV/bin/python missing=() pkg
  if [[ ! -x $py ]]; then
    python3 -m venv "$RELCL_VENV" >&2 || return 1
  fi
  for pkg in "$@"; do
    "$py" -c "import $pkg" 2>/dev/null || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    echo "relcl: installing ${missing[*]} from PyPI into $RELCL_VENV" >&2
    "$RELCL_VENV/bin/pip" install --quiet "${missing[@]}" >&2 || return 1
  fi
  echo "$py"
}
