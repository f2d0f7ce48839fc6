# Sourced by the tests that start a real scheduler or launcher on this host
# (slurm_cluster.sh, mpirun_cluster.sh): failing with the reason, the time
# left, a clean environment and the engine's commands.

fail() { echo "FAIL: $*"; exit 1; }

# take_bin_dir BUILD/bin: sets $bin to it and $program to its
# convnet_mnist_distributed, the program these tests run under the engine;
# fails, naming what is missing, when there is none.
take_bin_dir() {
  bin=${1:?usage: $(basename "$0") BUILD/bin}
  program="$bin/convnet_mnist_distributed"
  [ -x "$program" ] || { echo "FAIL: no $program"; exit 1; }
}

# CTest gives these scripts 300 s in all: a wait gets at most CAP seconds
# and never more than is left of 290.
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

# need_engine "COMMANDS" PACKAGE...: fails, naming the Debian packages
# (scripts/install-deps.sh installs them), when one of the commands is
# missing: a test never installs what it needs, nor skips without it.
need_engine() {
  local commands=$1; shift
  local cmd
  for cmd in $commands; do
    command -v "$cmd" >/dev/null 2>&1 \
      || fail "$cmd is missing (Debian's $*; scripts/install-deps.sh installs them)"
  done
}

# free_port_run N prints the first of N consecutive loopback ports free now,
# below the kernel's ephemeral range (scripts/free_ports.py): the ranks'
# --port_base and the scheduler's own ports, none fixed, so that two runs
# of the suite on one machine do not meet. Says why on stderr when it fails.
free_port_run() {
  /usr/bin/python3 "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/free_ports.py" \
    "$1" --consecutive
}
