#!/usr/bin/env bash
# Starts a Colibri cluster on this machine: N expert nodes and a coordinator
# serving colibri.v1.Inference over them, then generates text through it with
# colibri-client. The cluster keeps running; scripts/cluster-down.sh stops it.
#
#   bash scripts/cluster-up.sh [--nodes N] [--model M.gguf] [--prompt TEXT] [--dir D]
#                              [--n-predict N]
#
#   --nodes N      expert nodes (default 3)
#   --model M      GGUF model (default: scripts/demo-model/colibri-demo-kjv-q8_0.gguf,
#                  the committed demo model trained on the King James Bible)
#   --prompt TEXT  the prompt of the generation at the end (default: "And it
#                  came to pass")
#   --dir D        state folder: pids/, logs/, node data, addresses
#                  (default: <build>/cluster)
#   --n-predict N  tokens to generate (default 48)
#
# State under D: pids/<name>.pid, logs/<name>.log (stderr) and <name>.out
# (stdout), node<i>/ (each node's RocksDB), addresses (name host:port per
# line), coordinator.address. Everything listens on 127.0.0.1 with ports the
# OS picks.
#
# Running it again with the same --dir restarts the cluster cleanly (it calls
# cluster-down.sh first); the nodes keep their stored experts, so the second
# start ingests nothing.
#
# Environment:
#   COLIBRI_BUILD_DIR   build folder (default: build)
#   COLIBRI_SKIP_BUILD  1: use the binaries as they are (no install, no build)
#   COLIBRI_THREADS     threads of the coordinator and of each node (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."

n_nodes=3
model=""
prompt="And it came to pass"
dir=""
n_predict=48
usage() { sed -n '6,16p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) n_nodes="${2:?}"; shift 2 ;;
    --model) model="${2:?}"; shift 2 ;;
    --prompt) prompt="${2:?}"; shift 2 ;;
    --dir) dir="${2:?}"; shift 2 ;;
    --n-predict) n_predict="${2:?}"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "cluster-up: unknown argument $1" >&2; usage ;;
  esac
done
case "$n_nodes" in ''|*[!0-9]*|0) echo "cluster-up: --nodes must be a positive number" >&2; exit 2 ;; esac

build="${COLIBRI_BUILD_DIR:-build}"
dir="${dir:-$build/cluster}"
threads="${COLIBRI_THREADS:-1}"

if [ "${COLIBRI_SKIP_BUILD:-0}" != 1 ]; then
  bash scripts/install-deps.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target colibri-coordinator colibri-expert-node colibri-client
fi
coordinator_bin="$build/coordinator/colibri-coordinator"
node_bin="$build/expert_node/colibri-expert-node"
client_bin="$build/client/colibri-client"
for b in "$coordinator_bin" "$node_bin" "$client_bin"; do
  [ -x "$b" ] || { echo "cluster-up: $b is not built" >&2; exit 1; }
done

model="${model:-scripts/demo-model/colibri-demo-kjv-q8_0.gguf}"
[ -f "$model" ] || { echo "cluster-up: no model file $model" >&2; exit 1; }

if [ -d "$dir/pids" ] && [ -n "$(ls -A "$dir/pids" 2>/dev/null)" ]; then
  echo "cluster-up: restarting the cluster recorded in $dir"
  bash scripts/cluster-down.sh --dir "$dir"
fi
mkdir -p "$dir/pids" "$dir/logs"
: > "$dir/addresses"

# start NAME TIMEOUT_S BINARY ARGS...: runs it in the background with its
# output in logs/, records its pid, waits for its "listening on" line and
# prints the address.
start() {
  local name="$1" timeout="$2"
  shift 2
  # Emptied before the start: the loop below may look before the child's own
  # redirection truncates it, and must not read a previous run's address.
  : >"$dir/logs/$name.out"
  "$@" </dev/null >"$dir/logs/$name.out" 2>"$dir/logs/$name.log" &
  local pid=$!
  echo "$pid" >"$dir/pids/$name.pid"
  local waited=0
  while ! grep -q '^listening on ' "$dir/logs/$name.out" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "cluster-up: $name exited; its log ($dir/logs/$name.log):" >&2
      tail -n 20 "$dir/logs/$name.log" >&2
      rm -f "$dir/pids/$name.pid"
      return 1
    fi
    if [ "$waited" -ge $((timeout * 10)) ]; then
      echo "cluster-up: $name did not start within ${timeout} s (log: $dir/logs/$name.log)" >&2
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  local address
  address="$(sed -n 's/^listening on //p' "$dir/logs/$name.out" | head -n 1)"
  echo "$name $address" >>"$dir/addresses"
  echo "$address"
}

fail() {
  echo "cluster-up: stopping what was started" >&2
  bash scripts/cluster-down.sh --dir "$dir" >&2 || true
  exit 1
}

node_addresses=""
for i in $(seq 1 "$n_nodes"); do
  address="$(start "node$i" 30 "$node_bin" --listen 127.0.0.1:0 --data-dir "$dir/node$i" \
    --node-id "node$i" --threads "$threads")" || fail
  echo "cluster-up: node$i on $address"
  node_addresses="${node_addresses:+$node_addresses,}$address"
done

coordinator="$(start coordinator 600 "$coordinator_bin" serve --model "$model" \
  --nodes "$node_addresses" --listen 127.0.0.1:0 --threads "$threads")" || fail
echo "$coordinator" >"$dir/coordinator.address"
echo "cluster-up: coordinator on $coordinator ($(grep '^ingest:' "$dir/logs/coordinator.log" || true))"

waited=0
until "$client_bin" --coordinator "$coordinator" health >/dev/null 2>&1; do
  if [ "$waited" -ge 300 ]; then
    echo "cluster-up: the coordinator does not answer health checks" >&2
    fail
  fi
  sleep 0.1
  waited=$((waited + 1))
done

echo "cluster-up: $n_nodes nodes and the coordinator are running; state and logs in $dir"
echo "cluster-up: try  $client_bin --coordinator $coordinator status"
echo "cluster-up: stop with  bash scripts/cluster-down.sh --dir $dir"
echo "cluster-up: generated through the cluster:"
"$client_bin" --coordinator "$coordinator" generate "$prompt" -n "$n_predict" --temp 0.7 --seed 1
