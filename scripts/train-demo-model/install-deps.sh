#!/usr/bin/env bash
# Installs the Debian packages that training the demo model needs (not CI's:
# CI only uses the committed model). Idempotent; apt-get runs only when a
# package is missing.
set -euo pipefail

packages=(
  python3-torch    # the training (PyTorch 1.13 on Debian 12)
  python3-numpy    # token arrays
  bible-kjv        # the `bible` program that prints the text
  bible-kjv-text   # the King James Bible (public domain), the training text
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "train-demo-model/install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "train-demo-model/install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
