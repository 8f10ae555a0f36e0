#!/bin/sh
# CTest's driver of grpc_client_test.mjs: skips (77) without Node or without
# the npm packages that `npm ci` installs here (scripts/test.sh runs it).
# Usage: run_grpc_client_test.sh COORDINATOR MODEL.gguf PROTO_DIR
dir=$(dirname "$0")
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is not installed"
  exit 77
fi
if [ ! -d "$dir/node_modules/@grpc/grpc-js" ] || [ ! -d "$dir/node_modules/@grpc/proto-loader" ]; then
  echo "SKIP: run 'npm ci' in tests/api_clients to install @grpc/grpc-js and @grpc/proto-loader"
  exit 77
fi
if [ ! -f "$2" ]; then
  echo "SKIP: fixture model $2 not found"
  exit 77
fi
exec node "$dir/grpc_client_test.mjs" "$1" "$2" "$3"
