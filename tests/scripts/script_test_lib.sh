# shellcheck shell=bash disable=SC2034,SC2154
# Shared by the smoke tests of scripts/bench-*.sh (sourced, not run). The test
# sets tmp (its folder) and out (where the script's stdout goes) first.

# run_script SCRIPT ARGS...: bash SCRIPT ARGS, stdout to $out, stderr to
# $tmp/err.txt; when it fails, prints both and exits 1.
run_script() {
  if ! bash "$@" >"$out" 2>"$tmp/err.txt"; then
    echo "FAIL: $(basename "$1") exited with an error"
    cat "$out" "$tmp/err.txt"
    exit 1
  fi
}

fail=0
# expect REGEX WHAT: some line of $out matches REGEX; else FAIL and fail=1.
expect() {
  grep -Eq -- "$1" "$out" || { echo "FAIL: no $2 (/$1/)"; fail=1; }
}
# A decimal number in a table.
num='[0-9]+(\.[0-9]+)?'
