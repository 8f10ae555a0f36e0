#!/usr/bin/env bash
# Installs those of the given Debian packages that are not installed yet.
# Idempotent and non-interactive; runs `apt-get update` once, and only when a
# package is missing, so a second run on a ready machine costs nothing.
#
#   scripts/apt-install-missing.sh LABEL PACKAGE...
#
# LABEL prefixes the messages (the calling script's name).
set -euo pipefail

label="$1"
shift
missing=()
for p in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "$label: all $# packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "$label: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
