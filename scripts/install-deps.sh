#!/usr/bin/env bash
# Installs, from Debian 12's own packages, whatever syncfac's build, tests,
# main job and benchmarks' scripts need that this machine lacks: the
# libraries and every command they run, assuming a minimal Debian
# (debootstrap --variant=minbase: no openssl, ip, python3 or CA
# certificates). Needs root (or sudo) only when something is missing.
#
#   scripts/install-deps.sh          install what is missing
#   scripts/install-deps.sh --check  list what is missing, exit 1 if any
#                                    (the tests' venv too, scripts/test-venv.sh),
#                                    and the CPU levels the suites can run at
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libcaf-dev libeigen3-dev libboost-test-dev zlib1g-dev libssl-dev
  nlohmann-json3-dev
  dataset-fashion-mnist
  # word lists of the language-identification example (docs/models.md)
  wamerican wngerman wfrench wspanish witalian wportuguese wdutch
  clang-14 libclang-rt-14-dev  # the libFuzzer targets (tests/fuzz)
  openssl          # scripts/make-cluster-certs.sh and the TLS tests
  iproute2         # ip netns: the network-namespace cluster test; ss: where
                   # nodes listen (tests/examples/listen_address.sh)
  python3          # the tests' and benches' scripts
  python3-venv     # virtual environments of the tests that use PyPI
  python3-yaml     # the Kubernetes manifests' test (examples/kubernetes)
  util-linux       # unshare: per-pod /etc/hosts in the TF_CONFIG tests; taskset: tests/examples/cpu_share.cpp
  ca-certificates  # HTTPS to PyPI from those environments
  gzip             # gzipped IDX fixtures of the data tests
  curl             # tests/observability: scrapes of the metrics endpoint
  openmpi-bin      # mpirun: the Open MPI cluster test (tests/examples)
  slurm-wlm munge  # srun, slurmctld, slurmd, munged: the Slurm cluster test
  chromium         # the status page in a headless browser (tests/observability)
  prometheus       # promtool check metrics (tests/observability)
)

# The commands the build and the tests call, and the package of each: a
# package can be installed while a command it should bring is not (a
# diverted or removed binary), and --check says which.
declare -A commands=(
  [cmake]=cmake [c++]=build-essential [make]=build-essential
  [pkg-config]=pkg-config [clang++-14]=clang-14 [openssl]=openssl
  [ip]=iproute2 [ss]=iproute2 [python3]=python3 [gzip]=gzip [timeout]=coreutils
  [curl]=curl [unshare]=util-linux
  [mpirun]=openmpi-bin [srun]=slurm-client [slurmctld]=slurmctld
  [slurmd]=slurmd [sinfo]=slurm-client [munged]=munge
  [chromium]=chromium [promtool]=prometheus [flock]=util-linux
  [taskset]=util-linux
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${1:-}" = --check ]; then
  status=0
  for pkg in "${missing[@]}"; do
    echo "syncfac: missing package $pkg"
    status=1
  done
  for cmd in "${!commands[@]}"; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
      echo "syncfac: missing command $cmd (package ${commands[$cmd]})"
      status=1
    fi
  done
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "syncfac: python3 cannot make virtual environments (package python3-venv)"
    status=1
  fi
  if ! python3 -c 'import yaml' >/dev/null 2>&1; then
    echo "syncfac: python3 cannot read YAML (package python3-yaml)"
    status=1
  fi
  # The PyPI packages some tests read their output with.
  "$(dirname "$0")/test-venv.sh" --check || status=1
  # Hardware is no package: what this CPU lacks is said, and the suites
  # that need it skip (tests/hardware_skip.hpp).
  "$(dirname "$0")/cpu-levels.sh"
  [ $status -eq 0 ] && echo "syncfac: every dependency is installed"
  exit $status
elif [ $# -gt 0 ]; then
  echo "syncfac: install-deps.sh takes no arguments but --check, got '$1'" >&2
  exit 2
fi

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
