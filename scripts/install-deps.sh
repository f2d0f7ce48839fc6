#!/usr/bin/env bash
# Installs, from Debian 12's own packages, whatever syncfac needs that this
# machine lacks. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libcaf-dev libeigen3-dev libboost-test-dev zlib1g-dev libssl-dev
  nlohmann-json3-dev
  python3 python3-venv curl  # tests/observability: the TensorBoard venv, scrapes
  dataset-fashion-mnist
  clang-14 libclang-rt-14-dev  # the libFuzzer targets (tests/fuzz)
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "syncfac: all build dependencies are installed"
  exit 0
fi

echo "syncfac: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then
    sudo_cmd=(sudo)
  else
    echo "syncfac: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
