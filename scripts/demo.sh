#!/usr/bin/env bash
# The main job on one machine: installs the Debian packages, builds Colibri and
# generates text with the committed demo model (scripts/demo-model/, a small
# Qwen3-MoE trained on the King James Bible; see scripts/demo-model/PROVENANCE.md).
#
# Environment:
#   COLIBRI_BUILD_DIR  build folder (default: build)
#   COLIBRI_MODEL      a GGUF model to use instead of the demo model
#   COLIBRI_PROMPT     the prompt (default: "And it came to pass")
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

build="${COLIBRI_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target colibri-coordinator

model="${COLIBRI_MODEL:-scripts/demo-model/colibri-demo-kjv-q8_0.gguf}"

"$build/coordinator/colibri-coordinator" inspect --model "$model"
echo
"$build/coordinator/colibri-coordinator" run --model "$model" \
  --prompt "${COLIBRI_PROMPT:-And it came to pass}" --n-predict 48 --temp 0.7 --seed 1
