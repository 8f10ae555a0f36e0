#!/usr/bin/env bash
# bench_run (scripts/bench-common.sh) counts as decode only the CPU a
# coordinator spends after its first byte of output, also when the output file
# still holds a previous run's text as the run starts (the poll may look
# before the child's redirection has emptied it). The stand-in coordinator
# burns ~0.4 s of CPU, prints, burns ~0.4 s more; the check allows wide
# margins (it asserts where the CPU was counted, not how fast anything is).
# Then bench_wait_idle on a process that is busy for a second, then idle.
# usage: bench_common_test.sh SOURCE_DIR
set -uo pipefail
src="$1"
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/bench_common.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/coordinator" <<'STUB'
#!/usr/bin/env bash
CLK_TCK=${CLK_TCK:-100}
# ~$1 ticks of CPU on this process's own clock, forking nothing (a child's
# CPU would count in the run's total but not in the process's own).
burn_cpu() {
  local line f start=-1 i
  while true; do
    for ((i = 0; i < 20000; i++)); do :; done
    read -r line </proc/$$/stat
    read -r -a f <<<"${line##*) }"
    [ "$start" -lt 0 ] && start=$((f[11] + f[12]))
    [ $((f[11] + f[12] - start)) -ge "$1" ] && break
  done
}
ticks=$((CLK_TCK * 4 / 10))
burn_cpu "$ticks"
echo "generated text"
burn_cpu "$ticks"
STUB
chmod +x "$tmp/coordinator"
# shellcheck source=/dev/null
source "$src/scripts/bench-common.sh"
COORD="$tmp/coordinator"
export CLK_TCK="$BENCH_CLK_TCK"
status=0
for round in 1 2 3 4 5; do
  echo "a previous run's text" >"$tmp/run.out"
  bench_run "$tmp/run" run
  echo "round $round: run CPU $RUN_CPU_S s, decode CPU ${RUN_DECODE_CPU_S:-none} s"
  if [ -z "${RUN_DECODE_CPU_S:-}" ] ||
    ! awk -v d="$RUN_DECODE_CPU_S" -v t="$RUN_CPU_S" 'BEGIN { exit !(d > 0.2 && d < t - 0.2) }'; then
    echo "FAIL: decode CPU should be about half of the run's, after the first output"
    status=1
  fi
done

# bench_wait_idle returns only once a busy process has stopped burning CPU:
# here one that burns 2 s, then sleeps.
cat >"$tmp/busy" <<'STUB'
#!/usr/bin/env bash
start=${EPOCHREALTIME/./}
while [ $((${EPOCHREALTIME/./} - start)) -lt 2000000 ]; do :; done
echo idle >"$1"
exec sleep 30
STUB
rm -f "$tmp/idle"
bash "$tmp/busy" "$tmp/idle" &
busy=$!
bench_wait_idle "$busy"
if [ ! -e "$tmp/idle" ]; then
  echo "FAIL: bench_wait_idle returned while the process was still busy"
  status=1
fi
kill "$busy" 2>/dev/null
wait "$busy" 2>/dev/null
exit "$status"
