#!/usr/bin/env bash
# demo.sh: relcl's main job, from a fresh Debian/Ubuntu machine: install what is missing,
# build, list the OpenCL devices (and build every kernel on each), then show relative and
# absolute attention side by side. One function per step; main() runs them in order.
# The device is the default one (the first GPU, else the first device) or RELCL_DEVICE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

step() { printf '\n==== %s\n' "$1"; }

install_deps() {
  step "packages"
  relcl_install_deps
}

build() {
  step "build"
  if [[ -f build/meson-private/coredata.dat ]]; then
    meson setup --reconfigure build || meson setup --wipe build
  else
    meson setup build
  fi
  ninja -C build
}

device_info() {
  step "OpenCL devices (build/apps/relcl-info)"
  build/apps/relcl-info
}

attention_demo() {
  step "relative vs absolute attention (build/apps/relcl-attn-demo)"
  build/apps/relcl-attn-demo
}

main() {
  install_deps
  build
  device_info
  attention_demo
}

main "$@"
