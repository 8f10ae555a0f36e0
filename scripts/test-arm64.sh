#!/usr/bin/env bash
# The kernels on 64-bit ARM: cross-builds common/, model/ops/, model/gguf/ and
# their tests (COLIBRI_KERNELS_ONLY) with Debian's aarch64-linux-gnu compilers
# and runs the tests under qemu-user, once on an emulated CPU with the
# dot-product instructions (QEMU_CPU=max: the NEON set's sdot path) and once
# on a Cortex-A53 (NEON without them). scripts/test.sh calls it; the Debian
# packages come from scripts/install-deps.sh.
#
# The target's libraries (abseil, GoogleTest) are Debian's arm64 packages,
# fetched with a private apt state under the build folder and unpacked there:
# the machine's own dpkg architectures and package lists stay as they were.
#
# Environment:
#   COLIBRI_ARM64_BUILD_DIR  build folder (default: build-arm64)
#   COLIBRI_FIXTURES_DIR     test fixtures (default: ../shared/fixtures)
set -euo pipefail
cd "$(dirname "$0")/.."

build="${COLIBRI_ARM64_BUILD_DIR:-build-arm64}"
mkdir -p "$build"
build="$(cd "$build" && pwd)"
sysroot="$build/sysroot"
packages=(libabsl-dev libabsl20220623 libgtest-dev libgmock-dev)

if [ ! -f "$sysroot/.complete" ]; then
  apt_state="$build/apt"
  rm -rf "$sysroot" "$apt_state"
  mkdir -p "$apt_state/lists/partial" "$apt_state/cache/archives/partial" "$apt_state/debs" "$sysroot"
  apt_options=(-q -o APT::Architecture=arm64 -o APT::Architectures=arm64
               -o Dir::State::Lists="$apt_state/lists" -o Dir::Cache="$apt_state/cache"
               -o APT::Sandbox::User=root)
  apt-get "${apt_options[@]}" update > "$apt_state/update.log"
  (cd "$apt_state/debs" && apt-get "${apt_options[@]}" download "${packages[@]}")
  for deb in "$apt_state/debs"/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
  rm -rf "$apt_state"
  touch "$sysroot/.complete"
fi

fixtures=()
if [ -n "${COLIBRI_FIXTURES_DIR:-}" ]; then
  fixtures=(-DCOLIBRI_FIXTURES_DIR="$COLIBRI_FIXTURES_DIR")
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLIBRI_KERNELS_ONLY=ON \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DCOLIBRI_ARM64_SYSROOT="$sysroot" "${fixtures[@]}"
cmake --build "$build"
for cpu in max cortex-a53; do
  echo "test-arm64.sh: the kernel tests on an emulated $cpu"
  QEMU_CPU=$cpu ctest --test-dir "$build" --output-on-failure -j2
done
