#!/usr/bin/env bash
# Stops the cluster scripts/cluster-up.sh started: SIGTERM to every recorded
# process (the coordinator first), waits for each to exit (SIGKILL after
# 15 s), removes the pid files. Idempotent: with nothing recorded it says so
# and succeeds.
#
#   bash scripts/cluster-down.sh [--dir D]   (default: <build>/cluster, as cluster-up)
#
# Environment: COLIBRI_BUILD_DIR (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${COLIBRI_BUILD_DIR:-build}/cluster"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="${2:?}"; shift 2 ;;
    *) echo "cluster-down: unknown argument $1 (usage: cluster-down.sh [--dir D])" >&2; exit 2 ;;
  esac
done

shopt -s nullglob
pid_files=("$dir/pids/coordinator.pid" "$dir"/pids/node*.pid)
stopped=0
for f in "${pid_files[@]}"; do
  [ -f "$f" ] || continue
  name="$(basename "$f" .pid)"
  pid="$(cat "$f")"
  # Only a live colibri process: the pid may have been reused since.
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
     tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q colibri-; then
    kill -TERM "$pid" 2>/dev/null || true
    waited=0
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$waited" -ge 150 ]; then
        echo "cluster-down: $name (pid $pid) ignored SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
      sleep 0.1
      waited=$((waited + 1))
    done
    echo "cluster-down: stopped $name (pid $pid)"
    stopped=$((stopped + 1))
  fi
  rm -f "$f"
done
rm -f "$dir/coordinator.address"
if [ "$stopped" -eq 0 ]; then
  echo "cluster-down: nothing running in $dir"
fi
