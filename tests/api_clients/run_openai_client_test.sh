#!/bin/sh
# CTest's driver of openai_client_test.mjs: skips (77) without Node or without
# the npm packages that `npm ci` installs here (scripts/test.sh runs it).
# Usage: run_openai_client_test.sh COORDINATOR MODEL.gguf
dir=$(dirname "$0")
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is not installed"
  exit 77
fi
if [ ! -d "$dir/node_modules/openai" ]; then
  echo "SKIP: run 'npm ci' in tests/api_clients to install the openai client"
  exit 77
fi
if [ ! -f "$2" ]; then
  echo "SKIP: fixture model $2 not found"
  exit 77
fi
exec node "$dir/openai_client_test.mjs" "$1" "$2"
