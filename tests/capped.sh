#!/usr/bin/env bash
# Runs a suite as on an older CPU: SYNCFAC_MAX_ISA=LEVEL hides the
# instruction-set levels above LEVEL (kernels/cpu/isa.hpp; avx512 hides
# AMX), so that a machine with the newest CPU still runs what users of an
# older one get. The entries are the suites marked CAPPED
# (tests/CMakeLists.txt). Where the CPU has nothing above LEVEL, the cap
# would change nothing and the plain entry already ran as capped: the entry
# skips, naming the level the CPU lacks (tests/hardware_skip.hpp's line).
#
#   tests/capped.sh avx2|avx512 COMMAND [ARGS...]
set -euo pipefail
level=${1:?usage: capped.sh avx2|avx512 COMMAND [ARGS...]}
shift
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]]; }
case "$level" in
  avx2) above=avx512f ;;
  avx512) above=amx_tile ;;
  *) echo "capped.sh: unknown level '$level' (avx2 or avx512)" >&2; exit 2 ;;
esac
# A cap already given at or below this one (a run as on an older CPU):
# the plain entry ran there, and this cap would only lift it.
rank() { case "$1" in generic) echo 0 ;; avx2) echo 1 ;; *) echo 2 ;; esac; }
if [ -n "${SYNCFAC_MAX_ISA:-}" ] && [ "$(rank "$SYNCFAC_MAX_ISA")" -le "$(rank "$level")" ]; then
  echo "syncfac-skip (CPU level): SYNCFAC_MAX_ISA=$SYNCFAC_MAX_ISA already holds the kernels at or below $level"
  exit 77
fi
if ! has "$above"; then
  echo "syncfac-skip (CPU level): this CPU lacks $above, so SYNCFAC_MAX_ISA=$level changes nothing (the plain entry ran at $level)"
  exit 77
fi
echo "as on a CPU without $above: SYNCFAC_MAX_ISA=$level"
SYNCFAC_MAX_ISA=$level exec "$@"
