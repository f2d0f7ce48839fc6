# Sourced by the tests that start a real scheduler or launcher on this host
# (slurm_cluster.sh, mpirun_cluster.sh): skipping with CTest's code, the time
# left, a clean environment and installing a missing engine from Debian.

skip() { echo "SKIP: $*"; exit 77; }

# take_bin_dir BUILD/bin: sets $bin to it and $program to its
# convnet_mnist_distributed, the program these tests run under the engine;
# fails, naming what is missing, when there is none.
take_bin_dir() {
  bin=${1:?usage: $(basename "$0") BUILD/bin}
  program="$bin/convnet_mnist_distributed"
  [ -x "$program" ] || { echo "FAIL: no $program"; exit 1; }
}

# CTest gives these scripts 300 s in all: a wait gets at most CAP seconds
# and never more than is left of 290 (an install may have taken some).
budget() {
  local cap=$1 left=$(( 290 - SECONDS ))
  [ $left -lt 10 ] && left=10
  echo $(( cap < left ? cap : left ))
}

# The ranks must see only the launcher the test starts, not one the test
# may itself run under (the derivation would take its variables).
while read -r var; do
  unset "$var"
done < <(compgen -e | grep -E '^(SLURM_|OMPI_|PMI_|PMIX_|SYNCFAC_HOSTS$|TF_CONFIG$)')

# need_engine "COMMANDS" PACKAGE...: installs the packages from Debian when
# one of the commands is missing, within the test's time limit (a stale
# package list gets one update); skips, saying why, when that cannot be done.
need_engine() {
  local commands=$1; shift
  local cmd missing=
  for cmd in $commands; do
    command -v "$cmd" >/dev/null 2>&1 || missing=$cmd
  done
  [ -z "$missing" ] && return 0
  local what="$*" log="/tmp/syncfac-$1-apt.log"
  [ "$(id -u)" -eq 0 ] || skip "$what not installed ($missing missing) and this is not root"
  export DEBIAN_FRONTEND=noninteractive
  install() {
    timeout 80 apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1
  }
  install "$@" || { timeout 40 apt-get update -qq >>"$log" 2>&1 && install "$@"; } \
    || skip "cannot install $what (apt-get: $(tail -1 "$log"))"
  for cmd in $commands; do
    command -v "$cmd" >/dev/null 2>&1 || skip "$what installed but no $cmd"
  done
}
