#!/usr/bin/env bash
# The test command: installs the Debian packages and the pinned npm packages
# of tests/api_clients and tests/deploy, builds Colibri (Release) and
# runs the whole test suite with CTest, then (on x86-64) cross-builds the
# project for 64-bit ARM and, under qemu-user, runs the engine's tests, the
# ARM coordinator on every fixture model against this build's, and two ARM
# expert nodes for this build's coordinator (scripts/test-arm64.sh, in
# build-arm64),
# then builds the parser and kernel tests with ASan+UBSan and
# runs them again, then runs each libFuzzer harness for 20 s (scripts/fuzz.sh,
# its own clang build in build-fuzz).
#
# Environment:
#   COLIBRI_BUILD_DIR       build folder (default: build)
#   COLIBRI_SKIP_ARM64=1    skip the ARM pass
#   COLIBRI_SKIP_SANITIZE=1 skip the sanitizer pass
#   COLIBRI_SKIP_FUZZ=1     skip the fuzzing pass
#   COLIBRI_FIXTURES_DIR    test fixtures (default: ../shared/fixtures)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
# npm packages, pinned by their package-lock.json files: the official client
# libraries the HTTP API is tested with (tests/api_clients) and the offline
# deploy/ and k8s/ checks (tests/deploy). The tests that need them skip
# without them.
if command -v npm > /dev/null 2>&1; then
  npm ci --prefix tests/api_clients --no-audit --no-fund --loglevel=error
  npm ci --prefix tests/deploy --no-audit --no-fund --loglevel=error
else
  echo "test.sh: npm not found: the client-library and deploy checks will skip"
fi

build="${COLIBRI_BUILD_DIR:-build}"
fixtures=()
if [ -n "${COLIBRI_FIXTURES_DIR:-}" ]; then
  fixtures=(-DCOLIBRI_FIXTURES_DIR="$COLIBRI_FIXTURES_DIR")
fi

# The tests put node stores, logits and logs under GoogleTest's TempDir
# (TEST_TMPDIR): one short directory per run (unix socket paths must stay short),
# removed at the end, so runs do not collide and /tmp does not fill up.
own_tmpdir=0
if [ -z "${TEST_TMPDIR:-}" ]; then
  TEST_TMPDIR="$(mktemp -d /tmp/colibri-test.XXXXXX)"
  export TEST_TMPDIR
  trap 'rm -rf "$TEST_TMPDIR"' EXIT
  own_tmpdir=1
fi
# The coordinators the tests start keep their expert hash caches there too,
# not in the user's ~/.cache.
export COLIBRI_CACHE_DIR="${COLIBRI_CACHE_DIR:-$TEST_TMPDIR/cache}"

# The four builds, ccache and the tests' files take about 2 GB at the peak.
# Say so up front when the disk is short: a full disk otherwise surfaces as a
# linker error deep into the run.
free_kb="$(df -Pk . | awk 'NR == 2 {print $4}')"
if [ "${free_kb:-0}" -lt $((3 * 1024 * 1024)) ]; then
  echo "test.sh: warning: only $((free_kb / 1024)) MiB free here; the builds need about 2 GB" >&2
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${fixtures[@]}"
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure -j2
# What the passing tests left behind goes before the next build needs the disk.
if [ "$own_tmpdir" = 1 ]; then find "$TEST_TMPDIR" -mindepth 1 -delete; fi

# (On an ARM machine the suite above ran the NEON kernels natively.)
if [ "${COLIBRI_SKIP_ARM64:-0}" != 1 ] && [ "$(dpkg --print-architecture)" = amd64 ]; then
  COLIBRI_ARM64_BUILD_DIR="$build-arm64" COLIBRI_BUILD_DIR="$build" bash scripts/test-arm64.sh
fi

if [ "${COLIBRI_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake -S . -B "$build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCOLIBRI_SANITIZE=ON "${fixtures[@]}"
  cmake --build "$build-asan" --target colibri_sanitize_tests
  ctest --test-dir "$build-asan" -L sanitize --output-on-failure -j2
fi

if [ "${COLIBRI_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz.sh --seconds 20
fi
