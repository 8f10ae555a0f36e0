#!/usr/bin/env bash
# Installs every Debian package that building and testing Colibri needs.
# Idempotent (scripts/apt-install-missing.sh): a second run on a ready machine
# costs nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libabsl-dev                          # Status, StatusOr, Mutex, flags-free utilities
  libopenblas-dev                      # batched matmuls of prompt processing
  libgtest-dev libgmock-dev            # unit and integration tests
  libpcre2-dev                         # Unicode-property regexes of the BPE pre-tokenizers
  libicu-dev                           # icu-uc of the tokenizers (model/tokenizer/CMakeLists.txt)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler  # wire protocol
  librocksdb-dev                       # expert-node disk tier
  libxxhash-dev                        # expert-node value checksums (XXH64)
  liburing-dev                         # expert-node reads at queue depth (io_uring; optional)
  libcli11-dev                         # command lines with subcommands (header-only)
  libtomlplusplus-dev                  # TOML parser of the --config files (common/config_file.cc)
  nlohmann-json3-dev                   # JSON: chat-template contexts, golden files in tests
  openssl                              # test certificates of the TLS tests; deploy/make-certs.sh
  systemd                              # systemd-analyze verify of deploy/systemd units
  yamllint                             # lint of the deploy/ and k8s/ YAML
  iproute2                             # network namespaces of the multi-host deploy test
  nftables                             # deploy/firewall/colibri.nft, loaded in the multi-host test
  clang libclang-rt-14-dev             # libFuzzer + ASan/UBSan runtimes of scripts/fuzz.sh
  libcpp-httplib-dev                   # serve's OpenAI-compatible HTTP API (cpp-httplib 0.11)
  libsystemd-dev                       # sd_notify: READY=1 for the Type=notify units of deploy/systemd
  libedit-dev                          # line editing and history of `colibri-client chat` on a terminal
  tmux                                 # tests/integration/chat_terminal_test types into chat on a terminal
  curl                                 # the HTTP API's integration test drives it with curl
  prometheus                           # promtool check metrics in tests/integration/metrics_scrape_test
  chromium                             # headless browser that draws /dashboard in tests/integration/dashboard_test
)
# On x86-64 the project is also built for 64-bit ARM and tested emulated
# (scripts/test-arm64.sh, which fetches the arm64 libraries itself); an ARM
# machine runs its NEON kernels natively.
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  packages+=(g++-aarch64-linux-gnu qemu-user)
fi

exec bash "$(dirname "$0")/apt-install-missing.sh" install-deps "${packages[@]}"
