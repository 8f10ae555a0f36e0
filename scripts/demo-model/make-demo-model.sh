#!/usr/bin/env bash
# Reproduces scripts/demo-model/: trains the demo MoE on the King James Bible, exports
# it to GGUF, quantizes it with colibri-quantize, checks the export against
# PyTorch and writes the committed files. Not part of CI (CI uses the committed
# model); takes ~40 min on 2 busy cores.
#
#   bash scripts/demo-model/make-demo-model.sh [--steps N] [--work DIR]
#
#   --steps N   training steps (default 300, what the committed model used)
#   --work DIR  checkpoints, logs and the F32/F16 files (default build/demo-model)
#   --note TEXT   a sentence for PROVENANCE.md on how this run differed
#   --skip-train  reuse DIR's checkpoint of step N (a longer run's ckpt-N.pt is the
#                 same as a --steps N run's final.pt: the schedule ignores --steps)
#
# Environment: COLIBRI_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."

steps=300
work=build/demo-model
skip_train=0
note=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="${2:?}"; shift 2 ;;
    --work) work="${2:?}"; shift 2 ;;
    --skip-train) skip_train=1; shift ;;
    --note) note="${2:?}"; shift 2 ;;
    *) echo "make-demo-model: unknown argument $1" >&2; exit 2 ;;
  esac
done
build="${COLIBRI_BUILD_DIR:-build}"
py=/usr/bin/python3  # Debian's, where python3-torch is installed
here=scripts/demo-model
out=scripts/demo-model

bash "$here/install-deps.sh"
bash scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target colibri-coordinator colibri-quantize
coordinator="$build/coordinator/colibri-coordinator"
quantize="$build/tools/quantize/colibri-quantize"

mkdir -p "$work" "$out"
train_cmd=(nice -n 19 "$py" "$here/train.py" --out "$work" --steps "$steps")
ckpt="$work/final.pt"
if [ "$skip_train" != 1 ]; then
  echo "make-demo-model: ${train_cmd[*]} (log: $work/train.log)"
  "${train_cmd[@]}" >"$work/train.log" 2>&1
elif [ -f "$work/$(printf 'ckpt-%05d.pt' "$steps")" ]; then
  ckpt="$work/$(printf 'ckpt-%05d.pt' "$steps")"
fi
[ -f "$ckpt" ] || { echo "make-demo-model: no checkpoint $ckpt" >&2; exit 1; }

"$py" "$here/export_gguf.py" --ckpt "$ckpt" --tokenizer "$work/tokenizer.json" \
  --out "$work/demo-f32.gguf"
"$quantize" --in "$work/demo-f32.gguf" --out "$work/demo-f16.gguf" --type f16
"$quantize" --in "$work/demo-f32.gguf" --out "$work/demo-q4_0.gguf" --type q4_0
"$quantize" --in "$work/demo-f32.gguf" --out "$out/colibri-demo-kjv-q8_0.gguf" --type q8_0
cp "$work/heldout.txt" "$out/heldout.txt"
cp "$work/train.log" "$out/train.log"
cp "$work/loss.tsv" "$out/loss.tsv"

"$py" "$here/check_export.py" --ckpt "$ckpt" --tokenizer "$work/tokenizer.json" \
  --text "$work/heldout.txt" --coordinator "$coordinator" --f16 "$work/demo-f16.gguf" \
  --quantized "$out/colibri-demo-kjv-q8_0.gguf" "$work/demo-q4_0.gguf" \
  --json "$work/check.json" | tee "$work/check.txt"

"$py" "$here/write_provenance.py" --work "$work" --out "$out" \
  --command "bash scripts/demo-model/make-demo-model.sh --steps $steps" \
  --train-command "${train_cmd[*]}" --ckpt "$(basename "$ckpt")" --note "$note"
echo "make-demo-model: wrote $out"
