#!/usr/bin/env bash
# Decode speed of a DeepSeek-V3-shaped synthetic model (deepseek2 with MLA:
# d 7168, 128 heads, q_lora 1536, kv_lora 512, 256 experts top-8 in 8 groups of
# which 4 are used, expert ffn 2048, 1 shared expert) with a few layers, run
# locally and on 3 expert nodes on loopback (scripts/bench-cluster.sh), next to
# the memory-bandwidth limit, and its KV cache bytes per token (the compressed
# latent against the expanded K/V). Run from the repository root after a build.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/bench-deepseek-v3.sh [options]

  --type T           weight type: q2_k, q4_k or iq2_xxs (default q2_k)
  --layers L         layers (default 2)
  --dense-layers D   leading dense layers, ffn 18432 (default 1)
  --experts E        routed experts per layer (default 256; fewer for a smaller file)
  --top-k K          experts per token (default 8)
  --nextn-layers X   NextN/MTP blocks after the layers (default 0); with X > 0
                     the local runs of --draft none, ngram and mtp follow
  -n N               tokens to generate per run (default 8)
  --dir DIR          where the model is made (default /tmp/colibri-bench-dsv3)
  --build DIR        build folder (default build)
  --fresh            delete the nodes' stored experts first
  -h, --help         this text

The model is made once per shape and type (several GB; keep it out of the
repository). Needs colibri-coordinator, colibri-expert-node, colibri-make-model
and colibri_ops_bench.
USAGE
}

cd "$(dirname "$0")/.."
type=q2_k
layers=2
dense=1
n_predict=8
experts=256
top_k=8
nextn=0
dir=/tmp/colibri-bench-dsv3
build=build
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --type) type="${2:?}"; shift 2 ;;
    --layers) layers="${2:?}"; shift 2 ;;
    --dense-layers) dense="${2:?}"; shift 2 ;;
    --experts) experts="${2:?}"; shift 2 ;;
    --top-k) top_k="${2:?}"; shift 2 ;;
    --nextn-layers) nextn="${2:?}"; shift 2 ;;
    -n) n_predict="${2:?}"; shift 2 ;;
    --dir) dir="${2:?}"; shift 2 ;;
    --build) build="${2:?}"; shift 2 ;;
    --fresh) extra+=(--fresh); shift ;;
    *) usage >&2; exit 2 ;;
  esac
done

model="$dir/deepseek-v3-L$layers-D$dense-E$experts-K$top_k-N$nextn-$type.gguf"
if [ ! -f "$model" ]; then
  mkdir -p "$dir"
  echo "making $model..." >&2
  "$build/tools/colibri-make-model" --preset deepseek-v3 --layers "$layers" \
    --dense-layers "$dense" --experts "$experts" --top-k "$top_k" --nextn-layers "$nextn" \
    --type "$type" --out "$model.part" >&2
  mv "$model.part" "$model"
fi
echo "== $model"
"$build/coordinator/colibri-coordinator" inspect -m "$model" |
  grep -E '^(  MLA|  KV cache|bytes|routed experts|active weight)'
scripts/bench-cluster.sh --model "$model" -n "$n_predict" --build "$build" \
  --prompt "The small birds of the valley" "${extra[@]}"
if [ "$nextn" -gt 0 ]; then
  # Speculative decoding on this machine: the same ids every time (checked),
  # the speed and acceptance of each drafter.
  reference=""
  for draft in none ngram mtp; do
    log="$dir/draft-$draft.log"
    ids=$("$build/coordinator/colibri-coordinator" run -m "$model" -n "$n_predict" --temp 0 \
      --ignore-eos --print-token-ids --prompt "The small birds of the valley" \
      --draft "$draft" 2>"$log")
    [ -z "$reference" ] && reference="$ids"
    [ "$ids" = "$reference" ] || { echo "--draft $draft changed the output" >&2; exit 1; }
    echo "--draft $draft: $(grep -E '^(generation|speculation)' "$log" | tr '\n' ' ')"
  done
fi
