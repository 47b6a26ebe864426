#!/usr/bin/env bash
# demo.sh: relcl's main job, from a fresh Debian/Ubuntu machine: install what is missing,
# build, tune CLBlast's GEMMs for the device once (when no tuning measured on it applies), list
# the OpenCL devices (and build every kernel on each), then show relative and
# absolute attention side by side, then train a tiny relative-position Transformer on the
# bundled English-French corpus for about ten minutes and translate a few test sentences,
# then translate the whole test set with beam search and print its sacrebleu BLEU.
# One function per step; main() runs them in order.
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

# CLBlast's SGEMM parameters for this device: when none measured on it apply (another
# device's, or CLBlast's defaults), measure them once with relcl-tune --quick (a few
# minutes); the file goes to the cache directory's tuning/ folder, like the compiled
# kernels, so later runs skip this. On a CPU device relcl runs every product in its own
# kernels, and relcl-tune says so and measures nothing. A failed tuner leaves the tuning
# relcl-info reports in place.
tune() {
  step "CLBlast tuning for this device (build/apps/relcl-tune --quick --if-needed)"
  build/apps/relcl-tune --quick --if-needed ||
    echo "relcl-tune failed (see above): continuing with the tuning relcl-info reports"
}

device_info() {
  step "OpenCL devices (build/apps/relcl-info)"
  build/apps/relcl-info
}

attention_demo() {
  step "relative vs absolute attention (build/apps/relcl-attn-demo)"
  build/apps/relcl-attn-demo
}

# Train the `tiny` relative-position model on the bundled corpus for a bounded time
# (RELCL_DEMO_TRAIN_SECONDS, default 600), then translate a few test sentences greedily.
# Everything goes to demo-out/train-tiny: checkpoints, spm.model, loss.png, log.jsonl.
train_demo() {
  local dir=demo-out/train-tiny data=data/gettext-en-fr
  step "training a tiny relative-position Transformer on $data for ${RELCL_DEMO_TRAIN_SECONDS:-600} s (build/apps/relcl-train)"
  rm -rf "$dir"
  build/apps/relcl-train --preset tiny --positions relative \
    --train-src "$data/train.en.xz" --train-tgt "$data/train.fr.xz" \
    --valid-src "$data/valid.en.xz" --valid-tgt "$data/valid.fr.xz" \
    --vocab-size 2000 --batch-tokens 1536 --warmup 200 --lr-scale 1 \
    --max-time "${RELCL_DEMO_TRAIN_SECONDS:-600}" --valid-every 50 --log-every 20 \
    --model-dir "$dir" --log-json "$dir/log.jsonl"
  echo "loss plot: $dir/loss.png"

  step "greedy translations of short test sentences (relcl-train --translate, best checkpoint)"
  python3 - "$data" "$dir" <<'PY'
import lzma, sys
data, out = sys.argv[1], sys.argv[2]
en = lzma.open(data + "/test.en.xz", "rt", encoding="utf-8").read().splitlines()
fr = lzma.open(data + "/test.fr.xz", "rt", encoding="utf-8").read().splitlines()
pairs = [(a, b) for a, b in zip(en, fr) if 2 <= len(a.split()) <= 6][:8]
for name, side in (("test8.en", 0), ("test8.fr", 1)):
    with open(out + "/" + name, "w", encoding="utf-8") as f:
        f.write("".join(p[side] + "\n" for p in pairs))
PY
  build/apps/relcl-train --model-dir "$dir" --translate "$dir/test8.en" >"$dir/test8.out"
  local src hyp ref
  while IFS= read -r src && IFS= read -r hyp <&3 && IFS= read -r ref <&4; do
    printf '  en:    %s\n  relcl: %s\n  ref:   %s\n\n' "$src" "$hyp" "$ref"
  done <"$dir/test8.en" 3<"$dir/test8.out" 4<"$dir/test8.fr"
}

# sacrebleu (the field's BLEU, from PyPI): the system's when it has one, else the venv of
# scripts/deps.sh (build/venv). Prints the python to run it with.
sacrebleu_python() {
  if python3 -c 'import sacrebleu' 2>/dev/null; then
    echo python3
    return
  fi
  relcl_pyvenv sacrebleu
}

# Translate the bundled test set with the trained model (beam 4, length penalty 0.6, the
# paper's settings) and score it against the references with sacrebleu.
bleu_demo() {
  local dir=demo-out/train-tiny data=data/gettext-en-fr py
  step "translating the test set (build/apps/relcl-translate, beam 4) and scoring it with sacrebleu"
  py=$(sacrebleu_python)
  xz -dc "$data/test.en.xz" >"$dir/test.en"
  xz -dc "$data/test.fr.xz" >"$dir/test.fr"
  build/apps/relcl-translate --model "$dir" --checkpoint best --beam-size 4 \
    --length-penalty 0.6 <"$dir/test.en" >"$dir/test.hyp"
  echo "translations: $dir/test.hyp"
  "$py" -m sacrebleu "$dir/test.fr" -i "$dir/test.hyp" -m bleu -f text
}

main() {
  install_deps
  build
  tune
  device_info
  attention_demo
  train_demo
  bleu_demo
}

main "$@"
