#!/usr/bin/env bash
# Every example config file (*.toml) under deploy/ and k8s/ parses with the
# real binary it is for (`--config FILE --help` reads and checks the file,
# then prints the help): *node*.toml -> colibri-expert-node,
# *coordinator*.toml -> colibri-coordinator serve, *client*.toml ->
# colibri-client. A copy with a misspelled key must fail naming key and line.
# Usage: example_configs_test.sh SOURCE_DIR BUILD_DIR.
set -euo pipefail
src="$1"
build="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

binary_for() {
  case "$(basename "$1")" in
    *node*.toml) echo "$build/expert_node/colibri-expert-node" ;;
    *coordinator*.toml) echo "$build/coordinator/colibri-coordinator serve" ;;
    *client*.toml) echo "$build/client/colibri-client" ;;
    *) return 1 ;;
  esac
}

status=0
count=0
while IFS= read -r -d '' file; do
  count=$((count + 1))
  if ! cmd="$(binary_for "$file")"; then
    echo "FAIL: $file: no binary for this name (want *node*, *coordinator* or *client*)"
    status=1
    continue
  fi
  # shellcheck disable=SC2086  # $cmd is a binary and maybe a subcommand
  if out="$($cmd --config "$file" --help 2>&1 > /dev/null)"; then
    echo "ok: ${file#"$src"/}"
  else
    echo "FAIL: ${file#"$src"/}: $out"
    status=1
  fi
  # The negative control: a misspelled key appended as the last line.
  cp "$file" "$tmp/broken.toml"
  echo 'listenn = "x"' >> "$tmp/broken.toml"
  line="$(wc -l < "$tmp/broken.toml")"
  # shellcheck disable=SC2086
  if out="$($cmd --config "$tmp/broken.toml" --help 2>&1 > /dev/null)"; then
    echo "FAIL: ${file#"$src"/} with a misspelled key was accepted"
    status=1
  elif [[ "$out" != *"broken.toml:$line: unknown key 'listenn'"* ]]; then
    echo "FAIL: unexpected message for a misspelled key: $out"
    status=1
  fi
done < <(find "$src/deploy" "$src/k8s" -name '*.toml' -print0 2> /dev/null | sort -z)
if [ "$count" -lt 2 ]; then
  echo "FAIL: found $count example config files under deploy/ and k8s/"
  exit 1
fi
echo "$count example config files checked"
exit "$status"
