#!/usr/bin/env bash
# The main job on one machine: installs the Debian packages, builds Colibri,
# generates the synthetic demo model (a small Qwen3-MoE-shaped GGUF with its own
# BPE tokenizer) and generates text with it.
#
# Environment:
#   COLIBRI_BUILD_DIR  build folder (default: build)
#   COLIBRI_MODEL      a GGUF model to use instead of the demo model
#   COLIBRI_PROMPT     the prompt (default: a sentence about birds)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

build="${COLIBRI_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target colibri-coordinator colibri-make-model

model="${COLIBRI_MODEL:-}"
if [ -z "$model" ]; then
  model="$build/models/demo-qwen3moe-q4_k.gguf"
  if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$build/scripts/colibri-make-model" --preset demo --type q4_k --seed 7 --out "$model"
  fi
fi

"$build/coordinator/colibri-coordinator" inspect --model "$model"
echo
"$build/coordinator/colibri-coordinator" run --model "$model" \
  --prompt "${COLIBRI_PROMPT:-The small birds of the valley}" --n-predict 48 --temp 0.7 --seed 1
