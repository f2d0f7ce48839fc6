#!/usr/bin/env bash
# Installs, from Debian 12's own packages, what syncfac needs that this
# machine lacks: the libraries and every command they run, assuming a
# minimal Debian (debootstrap --variant=minbase: no openssl, ip, python3 or
# CA certificates). Needs root (or sudo) only when something is missing.
#
#   scripts/install-deps.sh [GROUP...]          install what is missing
#   scripts/install-deps.sh --check [GROUP...]  list what is missing, exit 1 if any
#                          (with test: the tests' venv too, scripts/test-venv.sh,
#                          and the CPU levels the suites can run at)
#
# The groups (no GROUP: all of them):
#   runtime  running the programs: their shared libraries and the main
#            job's data set (the Dockerfile's runtime stage)
#   build    building the library and the programs (the Dockerfile's
#            build stage; scripts/run.sh takes runtime and build)
#   python   building and using the Python module `syncfac` (docs/python.md):
#            pybind11, Debian's python3 with its headers and NumPy; the
#            module is built when these are there (SYNCFAC_PYTHON=AUTO),
#            so the main job (runtime, build) needs none of them
#   test     building and running every test and benchmark: runtime,
#            build, python and the tests' own tools (scripts/test.sh)
set -euo pipefail

usage() {
  sed -n '7,22p' "$0" | sed 's/^# \{0,1\}//' >&2
}

runtime_packages=(
  # the programs' shared libraries (ldd build/bin/*)
  libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17 libssl3 zlib1g
  libgomp1 libstdc++6 libgcc-s1
  dataset-fashion-mnist  # the main job's data (the default --data_dir)
)
build_packages=(
  build-essential cmake pkg-config
  libcaf-dev libeigen3-dev zlib1g-dev libssl-dev nlohmann-json3-dev
)
python_packages=(
  pybind11-dev     # the module's bindings (python/)
  python3-dev      # Python.h of /usr/bin/python3, the interpreter it is built for
  python3-numpy    # the arrays syncfac.train takes
)
test_packages=(
  libboost-test-dev  # every Boost.Test suite (BUILD_TESTING)
  # word lists of the language-identification example (docs/models.md)
  wamerican wngerman wfrench wspanish witalian wportuguese wdutch
  clang-14 libclang-rt-14-dev  # the libFuzzer targets (tests/fuzz)
  openssl          # scripts/make-cluster-certs.sh and the TLS tests
  iproute2         # ip netns: the network-namespace cluster test; ss: where
                   # nodes listen (tests/examples/listen_address.sh)
  python3          # the tests' and benches' scripts
  python3-venv     # virtual environments of the tests that use PyPI
  python3-yaml     # the Kubernetes manifests' test (examples/kubernetes)
  python3-pytest   # the Python module's tests (tests/python, CTest python_module and python_cluster)
  util-linux       # unshare: per-pod /etc/hosts in the TF_CONFIG tests; taskset: tests/examples/cpu_share.cpp
  ca-certificates  # HTTPS to PyPI from those environments
  gzip             # gzipped IDX fixtures of the data tests
  curl             # tests/observability: scrapes of the metrics endpoint
  openmpi-bin      # mpirun: the Open MPI cluster tests (tests/examples; syncfac.node in tests/python)
  slurm-wlm munge  # srun, slurmctld, slurmd, munged: the Slurm cluster test
  chromium         # the status page in a headless browser (tests/observability)
  prometheus       # promtool check metrics (tests/observability)
  buildah          # the container image test (tests/image): builds the Dockerfile
  debootstrap      # its debian:12-slim base, made locally (no registry needed)
)

# The commands each group's users call, and the package of each: a
# package can be installed while a command it should bring is not (a
# diverted or removed binary), and --check says which.
declare -A build_commands=(
  [cmake]=cmake [c++]=build-essential [make]=build-essential
  [pkg-config]=pkg-config
)
declare -A test_commands=(
  [clang++-14]=clang-14 [openssl]=openssl
  [ip]=iproute2 [ss]=iproute2 [python3]=python3 [gzip]=gzip [timeout]=coreutils
  [curl]=curl [unshare]=util-linux
  [mpirun]=openmpi-bin [srun]=slurm-client [slurmctld]=slurmctld
  [slurmd]=slurmd [sinfo]=slurm-client [munged]=munge
  [chromium]=chromium [promtool]=prometheus [flock]=util-linux
  [taskset]=util-linux
  [buildah]=buildah [debootstrap]=debootstrap
)

check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(runtime build test)
want_runtime=0 want_build=0 want_python=0 want_test=0
for g in "${groups[@]}"; do
  case "$g" in
    runtime) want_runtime=1 ;;
    build) want_build=1 ;;
    python) want_python=1 ;;
    # The tests build and run everything.
    test) want_runtime=1 want_build=1 want_python=1 want_test=1 ;;
    *)
      echo "syncfac: install-deps.sh: unknown group or option '$g'" \
           "(groups: runtime, build, python, test; option: --check first)" >&2
      usage
      exit 2 ;;
  esac
done

packages=()
declare -A commands=()
if [ $want_runtime = 1 ]; then
  packages+=("${runtime_packages[@]}")
fi
if [ $want_build = 1 ]; then
  packages+=("${build_packages[@]}")
  for c in "${!build_commands[@]}"; do commands[$c]=${build_commands[$c]}; done
fi
if [ $want_python = 1 ]; then
  packages+=("${python_packages[@]}")
fi
if [ $want_test = 1 ]; then
  packages+=("${test_packages[@]}")
  for c in "${!test_commands[@]}"; do commands[$c]=${test_commands[$c]}; done
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ $check = 1 ]; then
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
  if [ $want_test = 1 ]; then
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
  fi
  [ $status -eq 0 ] && echo "syncfac: every dependency of ${groups[*]} is installed"
  exit $status
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "syncfac: every dependency of ${groups[*]} is installed"
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
