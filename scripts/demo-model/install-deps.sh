#!/usr/bin/env bash
# Installs the Debian packages that training the demo model needs (not CI's:
# CI only uses the committed model). Idempotent
# (scripts/apt-install-missing.sh).
set -euo pipefail

packages=(
  python3-torch    # the training (PyTorch 1.13 on Debian 12)
  python3-numpy    # token arrays
  bible-kjv        # the `bible` program that prints the text
  bible-kjv-text   # the King James Bible (public domain), the training text
)

exec bash "$(dirname "$0")/../apt-install-missing.sh" demo-model/install-deps "${packages[@]}"
