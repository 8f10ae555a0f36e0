#!/usr/bin/env bash
# Writes a synthetic MoE GGUF model (seeded random weights, a real BPE tokenizer)
# with colibri-make-model, building the generator first if needed.
#
#   scripts/make-synthetic-model.sh                      # demo preset -> build/models/demo-q4_k.gguf
#   scripts/make-synthetic-model.sh --preset qwen3-30b-a3b --layers 4 --out /tmp/q3.gguf
#   scripts/make-synthetic-model.sh --help               # every flag
#
# Flags are passed through unchanged; without --out/-o the file goes to
# <build>/models/<preset>-<type>.gguf. COLIBRI_BUILD_DIR selects the build folder
# (default: build).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${COLIBRI_BUILD_DIR:-$root/build}
binary=$build/tools/colibri-make-model

if ! command -v cmake > /dev/null; then
  echo "make-synthetic-model: cmake not found; run scripts/install-deps.sh first" >&2
  exit 1
fi
if [[ ! -f $build/CMakeCache.txt ]]; then
  generator=()
  if command -v ninja > /dev/null; then generator=(-G Ninja); fi
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release > /dev/null
fi
# A no-op when the generator is up to date.
cmake --build "$build" --target colibri-make-model > /dev/null

# Default output path, unless the caller chose one (or only asks for help).
preset=demo
type=q4_k
has_out=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --out | -o | --out=* | -h | --help | --list-presets) has_out=1 ;;
    --preset) preset=${args[i + 1]:-$preset} ;;
    --preset=*) preset=${args[i]#--preset=} ;;
    --type) type=${args[i + 1]:-$type} ;;
    --type=*) type=${args[i]#--type=} ;;
  esac
done
if ((has_out == 0)); then
  mkdir -p "$build/models"
  set -- "$@" --out "$build/models/$preset-${type,,}.gguf"
fi
exec "$binary" "$@"
