#!/usr/bin/env bash
# Runs one of the Node.js checks of this folder with its npm packages
# (installed by scripts/test.sh with `npm ci --prefix tests/deploy`).
# Usage: run_node_test.sh SCRIPT.js ARGS... Exit 77: skipped.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node > /dev/null; then
  echo "SKIP: node not found (Node.js 20 runs the deploy checks)"
  exit 77
fi
if [ ! -d "$here/node_modules/kubernetes-models" ]; then
  echo "SKIP: npm packages missing: run npm ci --prefix tests/deploy (scripts/test.sh does)"
  exit 77
fi
exec node "$here/$1" "${@:2}"
