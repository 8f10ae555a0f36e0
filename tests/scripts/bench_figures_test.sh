#!/usr/bin/env bash
# Figures the scripts print are in fixed notation whatever their size, so the
# patterns of the bench tests hold on a slow machine and on a fast one:
# bench_figure and bench_median_range (scripts/bench-common.sh) over values
# from 1e-6 to 1e7, and no script under scripts/ formats with %g or %e
# (awk and printf would print 1158 as 1.16e+03 there).
# usage: bench_figures_test.sh SOURCE_DIR
set -uo pipefail
src="$1"
# shellcheck source=scripts/bench-common.sh
source "$src/scripts/bench-common.sh"
fail=0
check() {  # check GOT WANT
  [ "$1" = "$2" ] || { echo "FAIL: got '$1', want '$2'"; fail=1; }
}
check "$(bench_figure 1158)" 1158
check "$(bench_figure 1234567.8)" 1234568
check "$(bench_figure 12.34)" 12.3
check "$(bench_figure 0.5)" 0.500
check "$(bench_figure 0.01234)" 0.0123
check "$(bench_figure 0)" 0
check "$(bench_median_range "1158 1100 1200")" "1158 (1100-1200)"
check "$(bench_median_range "0.02 0.01 0.04 0.03")" "0.0250 (0.0100-0.0400)"
num='^-?[0-9]+(\.[0-9]+)?$'
for v in 0.000001 0.000123 0.0456 7.89 99.95 1000 31415.9 9999999; do
  f=$(bench_figure "$v")
  [[ $f =~ $num ]] || { echo "FAIL: bench_figure $v printed '$f'"; fail=1; }
done
# %g / %e conversions in the scripts' printf and awk formats (%%g is a literal).
if grep -nE '%[-+ #0]*[0-9]*(\.[0-9]+)?[gGeE]' "$src"/scripts/*.sh "$src"/scripts/*/*.cc |
    grep -vE '%%[gGeE]'; then
  echo "FAIL: the lines above print figures with %g or %e; use fixed notation"
  fail=1
fi
[ "$fail" -eq 0 ] || exit 1
echo "PASS"
